//! Process identity (exe, command line) read from /proc once per pid, bounded.

use rustc_hash::FxHashMap as HashMap;

use crate::procfs;

#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ProcInfo {
    pub pid: u32,
    // A recording's strings are read within the read budget (`record::limits`).
    #[serde(deserialize_with = "crate::record::limits::comm")]
    pub comm: String,
    #[serde(default, deserialize_with = "crate::record::limits::opt_path")]
    pub exe: Option<String>,
    #[serde(default, deserialize_with = "crate::record::limits::cmdline")]
    pub cmdline: Vec<String>,
    /// Its cgroup v2 path (`/system.slice/docker-<id>.scope`); absent in recordings made
    /// before it was kept, in replays of exec records, and where there is no cgroup v2.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "crate::record::limits::opt_path"
    )]
    pub cgroup: Option<String>,
    /// Its parent's pid (`/proc/PID/stat`, or the exec record's), for the Processes view's
    /// tree; absent in recordings made before it was kept, and once the process is gone.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ppid: Option<u32>,
    /// Its Kubernetes pod (from the cgroup path and the kubelet's files), resolved live and
    /// kept in recordings.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod: Option<crate::pods::Pod>,
}

impl ProcInfo {
    /// The container the process runs in (12 hex digits, as `docker ps` shows it), from its
    /// cgroup path.
    pub fn container(&self) -> Option<&str> {
        self.cgroup.as_deref().and_then(container_id)
    }
}

/// The container id in a cgroup path, first 12 hex digits: Docker (`docker-<id>.scope`,
/// `/docker/<id>`), containerd/CRI-O/Podman (`cri-containerd-<id>.scope`, `crio-<id>.scope`,
/// `libpod-<id>.scope`) and Kubernetes' cgroupfs layout (`/kubepods/…/pod<uid>/<id>`).
pub fn container_id(cgroup: &str) -> Option<&str> {
    cgroup.rsplit('/').find_map(|seg| {
        let seg = seg.strip_suffix(".scope").unwrap_or(seg);
        let id = seg.rsplit(['-', ':']).next()?;
        (id.len() == 64 && id.bytes().all(|b| b.is_ascii_hexdigit())).then(|| &id[..12])
    })
}

/// NUL-separated arguments as strings, within the caps a recording's are read with
/// (`record::limits`: at most 64, each cut at 512 bytes, 4 KiB in all; empty ones dropped).
pub fn split_cmdline(b: &[u8]) -> Vec<String> {
    use crate::record::limits::{CmdlineBuilder, MAX_ARGS, MAX_ARG_LEN};
    let mut args = CmdlineBuilder::default();
    for s in b
        .split(|&c| c == 0)
        .filter(|s| !s.is_empty())
        .take(MAX_ARGS)
    {
        args.push(&String::from_utf8_lossy(&s[..s.len().min(MAX_ARG_LEN)]));
    }
    args.args
}

impl ProcInfo {
    /// Reads /proc/PID; fields the process took with it (it exited) stay empty.
    pub fn read(pid: u32, comm: &str) -> ProcInfo {
        let exe = procfs::read_exe(pid);
        let cmdline = procfs::read_cmdline(pid)
            .map(|b| split_cmdline(&b))
            .unwrap_or_default();
        let cgroup = procfs::read_cgroup(pid);
        ProcInfo {
            pid,
            comm: comm.to_owned(),
            exe,
            cmdline,
            ppid: procfs::read_ppid(pid),
            pod: cgroup.as_deref().and_then(crate::pods::pod_of_cgroup),
            cgroup,
        }
    }
}

/// Names of a process's threads remembered besides its own (a thread may name itself:
/// `isc-net-0000` in dig, `event_engine` in grpcio); past this many, /proc is asked again.
const MAX_THREAD_NAMES: usize = 64;

struct Entry {
    info: ProcInfo,
    /// `info.comm` shared by the calls that carry it (no allocation per call).
    name: std::sync::Arc<str>,
    /// Names of its threads other than the process's, seen on its calls.
    threads: Vec<Box<str>>,
    /// Sinks were given its description.
    described: bool,
    /// Its exit record was seen (removed at the second `purge_exited` after it).
    exited: bool,
}

/// Known processes; `lookup` says whether a process is described for the first time (so sinks
/// describe it once). Entries known in advance (a recording's table) are not yet described.
pub struct ProcessTable {
    procs: HashMap<u32, Entry>,
    /// Processes that exited since the last `purge_exited`, and those that exited before it:
    /// kept one interval more, as calls of a process may still complete after its exit
    /// (records of its last syscalls are read after the exit record).
    exited_now: Vec<u32>,
    exited_before: Vec<u32>,
    cap: usize,
    /// Read /proc for unknown pids (live); a replay has its table from the recording.
    read_proc: bool,
    /// Times the table was full and started over (its processes are described again).
    pub resets: u64,
}

impl ProcessTable {
    pub fn new(read_proc: bool) -> Self {
        ProcessTable {
            procs: HashMap::default(),
            exited_now: Vec::new(),
            exited_before: Vec::new(),
            cap: 16384,
            read_proc,
            resets: 0,
        }
    }
    /// Processes the table holds before it starts over.
    pub fn cap(&self) -> usize {
        self.cap
    }
    /// Whether unknown pids are looked up in /proc (live) or not (replay).
    pub fn reads_proc(&self) -> bool {
        self.read_proc
    }
    /// Knows `info` without describing it yet.
    pub fn insert(&mut self, info: ProcInfo) {
        if self.procs.len() >= self.cap {
            self.procs.clear();
            self.resets += 1;
        }
        self.procs.insert(
            info.pid,
            Entry {
                name: info.comm.as_str().into(),
                info,
                threads: Vec::new(),
                described: false,
                exited: false,
            },
        );
    }
    /// A process ran a new program (an exec record): described anew at its next call, unless
    /// it is already described as exactly this (its /proc entry was read first).
    pub fn exec(&mut self, mut info: ProcInfo) {
        if self.read_proc && info.cgroup.is_none() {
            // Live: an exec record says nothing of the cgroup; /proc does while it runs.
            info.cgroup = procfs::read_cgroup(info.pid);
            info.pod = info.cgroup.as_deref().and_then(crate::pods::pod_of_cgroup);
        }
        if let Some(e) = self.procs.get(&info.pid).filter(|e| e.described) {
            if e.info.comm == info.comm && e.info.exe == info.exe {
                return;
            }
        }
        self.insert(info);
    }

    /// A process exited: its entry goes at the second `purge_exited` from now. Returns its
    /// description if it was described (so sinks can say it ended).
    pub fn exit(&mut self, pid: u32) -> Option<&ProcInfo> {
        self.exited_now.push(pid);
        let e = self.procs.get_mut(&pid)?;
        e.exited = true;
        e.described.then_some(&e.info)
    }

    /// Forgets processes that exited before the previous call (an interval ago).
    pub fn purge_exited(&mut self) {
        for pid in self.exited_before.drain(..) {
            // Not if the pid was taken by a new process since.
            if self.procs.get(&pid).is_some_and(|e| e.exited) {
                self.procs.remove(&pid);
            }
        }
        std::mem::swap(&mut self.exited_before, &mut self.exited_now);
    }

    /// The process's name (its thread group leader's: from its exec record or
    /// `/proc/PID/comm`) for a call of one of its threads named `thread` (the kernel's comm
    /// of the thread that made the syscall), if the table knows the process.
    pub fn name_of(&mut self, pid: u32, thread: &[u8; 16]) -> Option<std::sync::Arc<str>> {
        let n = thread.iter().position(|&c| c == 0).unwrap_or(16);
        let thread = std::str::from_utf8(&thread[..n]).ok()?;
        self.known_entry(pid, thread).map(|e| e.name.clone())
    }

    /// `pid`'s entry if it describes the process a thread named `thread` belongs to: its own
    /// name, a thread name seen before, or (live) one whose process still bears the entry's
    /// name in /proc (a thread's own name, not a new program). Gone from /proc or in a
    /// replay, a new name is a thread's: a new program comes with an exec record (and
    /// without the exec probe, the name a dead process last had is not known anyway).
    fn known_entry(&mut self, pid: u32, thread: &str) -> Option<&mut Entry> {
        let read_proc = self.read_proc;
        let e = self.procs.get_mut(&pid)?;
        if e.info.comm == thread || e.threads.iter().any(|t| &**t == thread) {
            return Some(e);
        }
        let leader = if read_proc {
            procfs::read_comm(pid)
        } else {
            String::new()
        };
        if !leader.is_empty() && leader != e.info.comm {
            return None; // exec'd into another program since
        }
        if e.threads.len() < MAX_THREAD_NAMES {
            e.threads.push(thread.into());
        }
        Some(e)
    }

    /// The process's name for a call of its thread named `thread`, the process known to the
    /// table from then on (see [`ProcessTable::lookup`]).
    pub fn name(&mut self, pid: u32, thread: &str) -> std::sync::Arc<str> {
        self.entry(pid, thread).name.clone()
    }

    /// The process's info, and whether this is the first time it is described. `thread`:
    /// the name of the thread whose call asks (see [`ProcessTable::name_of`]); a process
    /// not known yet is named from /proc (its leader's name), else by that thread's name
    /// (the best there is: it exited before ebtop saw its exec or read /proc).
    pub fn lookup(&mut self, pid: u32, thread: &str) -> (&ProcInfo, bool) {
        let entry = self.entry(pid, thread);
        let fresh = !entry.described;
        entry.described = true;
        (&entry.info, fresh)
    }

    fn entry(&mut self, pid: u32, thread: &str) -> &mut Entry {
        let known = self.known_entry(pid, thread).is_some();
        if !known {
            let info = if self.read_proc {
                let comm = procfs::read_comm(pid);
                ProcInfo::read(pid, if comm.is_empty() { thread } else { &comm })
            } else {
                ProcInfo {
                    pid,
                    comm: thread.to_owned(),
                    ..Default::default()
                }
            };
            self.insert(info);
        }
        self.procs.get_mut(&pid).expect("inserted above")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Issue 43: dig's calls came as `isc-net-0000` (its thread's name) and its `proc` lines
    /// with no exe nor command line. A thread's name is its process's name in the table.
    #[test]
    fn a_thread_named_by_itself_belongs_to_its_process() {
        let mut t = ProcessTable::new(false);
        let exec = |comm: &str, exe: &str| ProcInfo {
            pid: 7,
            comm: comm.into(),
            exe: Some(exe.into()),
            cmdline: vec![comm.into(), "example.com".into()],
            ..Default::default()
        };
        t.exec(exec("dig", "/usr/bin/dig"));
        let (info, fresh) = t.lookup(7, "isc-net-0000");
        assert_eq!(
            (
                info.comm.as_str(),
                info.exe.as_deref(),
                info.cmdline.len(),
                fresh
            ),
            ("dig", Some("/usr/bin/dig"), 2, true)
        );
        assert!(!t.lookup(7, "isc-net-0001").1, "described once");
        assert_eq!(&*t.name(7, "isc-net-0000"), "dig");
        assert_eq!(&*t.name(7, "dig"), "dig");
        assert_eq!(
            t.name_of(7, b"isc-net-0002\0\0\0\0").as_deref(),
            Some("dig")
        );
        assert_eq!(t.name_of(8, b"isc-net-0002\0\0\0\0"), None);
        // A new program (its exec record): described again, by its name.
        t.exec(exec("curl", "/usr/bin/curl"));
        let (info, fresh) = t.lookup(7, "curl");
        assert_eq!((info.comm.as_str(), fresh), ("curl", true));
        // Not known at all (a replay without its records): the thread's name is all there is.
        assert_eq!(&*t.name(9, "worker"), "worker");
    }

    /// Live, a process not in the table is named from /proc (its leader's name), whatever the
    /// name of the thread that asks.
    #[test]
    fn live_a_process_is_named_by_its_leader() {
        let mut t = ProcessTable::new(true);
        let pid = std::process::id();
        let own = procfs::read_comm(pid);
        assert!(!own.is_empty());
        let (info, _) = t.lookup(pid, "not-its-name");
        assert_eq!(info.comm, own);
        assert_eq!(&*t.name(pid, "another-thread"), own.as_str());
    }

    #[test]
    fn container_ids_from_the_runtimes_cgroup_paths() {
        let id = "4f0a6b3c2d1e0f9a8b7c6d5e4f3a2b1c0d9e8f7a6b5c4d3e2f1a0b9c8d7e6f5a";
        for path in [
            format!("/system.slice/docker-{id}.scope"),
            format!("/docker/{id}"),
            format!("/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod1234_5678.slice/cri-containerd-{id}.scope"),
            format!("/kubepods/besteffort/pod1234-5678/{id}"),
            format!("/machine.slice/libpod-{id}.scope/container"),
            format!("/system.slice/crio-{id}.scope"),
        ] {
            assert_eq!(container_id(&path), Some("4f0a6b3c2d1e"), "{path}");
        }
        assert_eq!(container_id("/"), None);
        assert_eq!(
            container_id("/user.slice/user-0.slice/session-1.scope"),
            None
        );
        assert_eq!(container_id("/system.slice/nginx.service"), None);
        // This process has a cgroup v2 line (hybrid or unified hosts).
        assert!(procfs::read_cgroup(std::process::id()).is_some());
    }

    #[test]
    fn reads_own_process() {
        let me = std::process::id();
        let info = ProcInfo::read(me, "test");
        assert!(info.exe.is_some());
        assert!(!info.cmdline.is_empty());
        let mut t = ProcessTable::new(true);
        assert!(t.lookup(me, "test").1);
        assert!(!t.lookup(me, "test").1);
        // Another name for the same process: a thread's own, not a new program.
        assert!(!t.lookup(me, "renamed").1);
        assert_eq!(t.lookup(me, "renamed").0.comm, procfs::read_comm(me));
    }
}
