//! Process identity (exe, command line) read from /proc once per pid, bounded.

use rustc_hash::FxHashMap as HashMap;

#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ProcInfo {
    pub pid: u32,
    pub comm: String,
    pub exe: Option<String>,
    pub cmdline: Vec<String>,
}

/// The pids of /proc (processes that exist now).
pub fn pids() -> impl Iterator<Item = u32> {
    std::fs::read_dir("/proc")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| e.file_name().to_str().and_then(|s| s.parse().ok()))
}

/// The socket inodes `pid` holds open (its `/proc/PID/fd` links `socket:[N]`).
pub fn socket_inodes(pid: u32) -> impl Iterator<Item = u64> {
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|fd| {
            let target = std::fs::read_link(fd.path()).ok()?;
            let t = target.to_str()?;
            t.strip_prefix("socket:[")?.strip_suffix(']')?.parse().ok()
        })
}

/// `/proc/PID/comm` without its newline (empty if unreadable).
pub fn read_comm(pid: u32) -> String {
    std::fs::read_to_string(format!("/proc/{pid}/comm"))
        .map(|s| s.trim_end().to_string())
        .unwrap_or_default()
}

impl ProcInfo {
    /// Reads /proc/PID; fields the process took with it (it exited) stay empty.
    pub fn read(pid: u32, comm: &str) -> ProcInfo {
        let exe = std::fs::read_link(format!("/proc/{pid}/exe"))
            .ok()
            .map(|p| p.to_string_lossy().into_owned());
        let cmdline = std::fs::read(format!("/proc/{pid}/cmdline"))
            .map(|b| {
                b.split(|&c| c == 0)
                    .filter(|s| !s.is_empty())
                    .take(64)
                    .map(|s| String::from_utf8_lossy(&s[..s.len().min(512)]).into_owned())
                    .collect()
            })
            .unwrap_or_default();
        ProcInfo {
            pid,
            comm: comm.to_owned(),
            exe,
            cmdline,
        }
    }
}

/// Known processes; `lookup` says whether a process is described for the first time (so sinks
/// describe it once). Entries known in advance (a recording's table) are not yet described.
pub struct ProcessTable {
    procs: HashMap<u32, (ProcInfo, bool)>,
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
            cap: 16384,
            read_proc,
            resets: 0,
        }
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
        self.procs.insert(info.pid, (info, false));
    }
    /// The process's info, and whether this is the first time it is described.
    pub fn lookup(&mut self, pid: u32, comm: &str) -> (&ProcInfo, bool) {
        let known = match self.procs.get(&pid) {
            Some((p, _)) => p.comm == comm, // else exec'd into another program since
            None => false,
        };
        if !known {
            let info = if self.read_proc {
                ProcInfo::read(pid, comm)
            } else {
                ProcInfo {
                    pid,
                    comm: comm.to_owned(),
                    ..Default::default()
                }
            };
            self.insert(info);
        }
        let entry = self.procs.get_mut(&pid).expect("inserted above");
        let fresh = !entry.1;
        entry.1 = true;
        (&entry.0, fresh)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_own_process() {
        let me = std::process::id();
        let info = ProcInfo::read(me, "test");
        assert!(info.exe.is_some());
        assert!(!info.cmdline.is_empty());
        let mut t = ProcessTable::new(true);
        assert!(t.lookup(me, "test").1);
        assert!(!t.lookup(me, "test").1);
        assert!(t.lookup(me, "renamed").1);
    }
}
