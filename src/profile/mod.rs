//! On-CPU and off-CPU profiles of the processes the session selects (`--profile`).
//!
//! The kernel counts (src/bpf/profile.bpf.c: samples and off-CPU time per stack, per CPU);
//! [`kernel::ProfileProbe`] reads the cumulative counts once per interval on a thread of its
//! own, turns their growth into symbolized stacks ([`symbols`]) while the processes still run,
//! and adds them to a [`Profile`]; at the session's end the profile is written as folded stacks
//! (`--profile-out`) and as JSON `profile` lines. The data here is pure: stacks of names in,
//! lines out.

pub mod filesyms;
pub mod kernel;
pub mod pprof;
pub mod recorded;
pub mod serving;
pub mod symbols;
pub mod tree;
pub mod trigger;

use std::collections::HashMap;
use std::io::{self, Write};
use std::sync::Arc;

use serde::{Deserialize, Serialize};

/// What a count measures (the kernel's `enum ebtop_profile_kind`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Kind {
    /// Samples of the task on a CPU.
    OnCpu,
    /// Off the CPU in an interruptible sleep (sleeps, sockets, futexes, pipes).
    Interruptible,
    /// Off the CPU in an uninterruptible sleep (D: disk I/O, some kernel locks).
    Uninterruptible,
    /// Off the CPU in another state the kernel gave (stopped, traced, parked).
    OtherState,
}

impl Kind {
    pub fn from_kernel(v: u32) -> Option<Kind> {
        Some(match v {
            0 => Kind::OnCpu,
            1 => Kind::Interruptible,
            2 => Kind::Uninterruptible,
            3 => Kind::OtherState,
            _ => return None,
        })
    }

    pub fn is_on_cpu(self) -> bool {
        self == Kind::OnCpu
    }
}

/// A frame's name; shared by every stack that holds it.
pub type Frame = Arc<str>;

/// A symbolized stack of one process, root first: the user frames, then the kernel frames
/// (each with a `_[k]` suffix, as flamegraph.pl colours them).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct StackKey {
    pub tgid: u32,
    /// The thread (`--profile-threads`; None without, and in recordings made without).
    pub tid: Option<u32>,
    pub kind: Kind,
    pub frames: Arc<[Frame]>,
}

/// One off-CPU block of a thread (one that reached the threshold), with its bounds
/// (CLOCK_MONOTONIC, the capture's clock): what [`serving`] places inside the calls the
/// thread was serving. Carried by an interval's part only, never summed into a session.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Block {
    pub tgid: u32,
    pub tid: u32,
    /// Switched out (blocked) and switched in again.
    pub start_ns: u64,
    pub end_ns: u64,
    pub kind: Kind,
    pub frames: Arc<[Frame]>,
}

/// Samples (on-CPU) or blocks (off-CPU), and off-CPU nanoseconds.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Tally {
    pub count: u64,
    pub ns: u64,
}

/// Frames that show a user stack was walked to its thread's start: a stack holding none of
/// them was cut short (a function without a frame pointer on the way).
const ENTRY_FRAMES: &[&str] = &[
    "main",
    "_start",
    "__libc_start_main",
    "__libc_start_call_main",
    "start_thread",
    "clone",
    "clone3",
    "__clone3",
    "runtime.goexit",
    "runtime.goexit.abi0",
    "runtime.mstart",
    "runtime.main",
];

/// Whether a stack's user frames reach the thread's entry.
pub fn reaches_entry(frames: &[Frame]) -> bool {
    frames
        .iter()
        .any(|f| ENTRY_FRAMES.contains(&f.as_ref()) || f.ends_with("::main"))
}

/// Per process: its name and how complete its stacks are.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ProcessTotals {
    pub comm: String,
    pub on_cpu_samples: u64,
    /// On-CPU samples whose user stack reaches the thread's entry ([`reaches_entry`]).
    pub on_cpu_reaching_entry: u64,
    pub off_cpu_blocks: u64,
    pub off_cpu_ns: u64,
}

/// Counts the kernel could not attribute, over the session.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct ProfileLosses {
    /// Samples and blocks lost because the kernel's counts table was full.
    pub counts_table_full: u64,
    /// Stacks (user or kernel) the kernel's stack map could not keep: another stack held
    /// the bucket, or the map was full. Their time is counted under `[stack lost]`.
    pub stacks_lost: u64,
    /// Blocks that ended under the off-CPU threshold (counted, not attributed).
    pub short_blocks: u64,
    /// Blocks not timed: the kernel had no task storage for the thread.
    pub blocks_untimed: u64,
    /// Blocks counted in their stacks but left out of the linking to calls (`serving`):
    /// the kernel's ring of blocks or a reading's list of them was full. Written when not 0
    /// (lines and records of runs before it are unchanged).
    #[serde(skip_serializing_if = "is_zero")]
    pub blocks_unlinked_full: u64,
}

fn is_zero(v: &u64) -> bool {
    *v == 0
}

impl ProfileLosses {
    fn add(&mut self, o: &ProfileLosses) {
        self.counts_table_full += o.counts_table_full;
        self.stacks_lost += o.stacks_lost;
        self.short_blocks += o.short_blocks;
        self.blocks_untimed += o.blocks_untimed;
        self.blocks_unlinked_full += o.blocks_unlinked_full;
    }
}

/// The session's profile: stacks with their tallies, and per-process totals.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Profile {
    pub stacks: HashMap<StackKey, Tally>,
    pub processes: HashMap<u32, ProcessTotals>,
    pub losses: ProfileLosses,
    /// The user symbol tables' cache (src/profile/filesyms.rs) at the last read.
    pub symbol_cache: filesyms::CacheStats,
    /// Sampling frequency (Hz) and off-CPU threshold (ns), for the readers.
    pub hz: u32,
    pub off_cpu_min_ns: Option<u64>,
    /// When the programs were attached (Unix ns) and how long they ran.
    pub start_unix_ns: u64,
    pub duration_ns: u64,
    /// An interval's profile (the probe's reading, a recorded part): when it was read
    /// (CLOCK_MONOTONIC); 0 for a session's.
    pub mono_ns: u64,
    /// A reading's off-CPU blocks with their bounds, for the pipeline's linking (taken out
    /// there: never merged, so a session's profile holds none).
    pub blocks: Vec<Block>,
    /// Off-CPU time linked to the server calls its threads served, per endpoint (made by
    /// the pipeline from `blocks` and the calls, never read from the kernel or recorded).
    pub serving: serving::ServingProfile,
}

impl Profile {
    /// Adds `tally` to a stack of process `tgid` (named `comm`).
    pub fn add(&mut self, key: StackKey, comm: &str, tally: Tally) {
        let p = self.processes.entry(key.tgid).or_default();
        if p.comm.is_empty() {
            p.comm = comm.to_owned();
        }
        if key.kind.is_on_cpu() {
            p.on_cpu_samples += tally.count;
            if reaches_entry(&key.frames) {
                p.on_cpu_reaching_entry += tally.count;
            }
        } else {
            p.off_cpu_blocks += tally.count;
            p.off_cpu_ns += tally.ns;
        }
        let t = self.stacks.entry(key).or_default();
        t.count += tally.count;
        t.ns += tally.ns;
    }

    /// Knows process `tgid` by its name (a block's process: a reading may hold its blocks
    /// and none of its stacks, whose counts the kernel had not added yet when read; the
    /// filters of a replay decide by the name).
    pub fn note_process(&mut self, tgid: u32, comm: &str) {
        let p = self.processes.entry(tgid).or_default();
        if p.comm.is_empty() {
            p.comm = comm.to_owned();
        }
    }

    /// Adds another profile (a later interval's) to this one: stacks, totals, losses.
    pub fn merge(&mut self, other: &Profile) {
        for (k, t) in &other.stacks {
            let e = self.stacks.entry(k.clone()).or_default();
            e.count += t.count;
            e.ns += t.ns;
        }
        for (pid, p) in &other.processes {
            let e = self.processes.entry(*pid).or_default();
            if e.comm.is_empty() {
                e.comm = p.comm.clone();
            }
            e.on_cpu_samples += p.on_cpu_samples;
            e.on_cpu_reaching_entry += p.on_cpu_reaching_entry;
            e.off_cpu_blocks += p.off_cpu_blocks;
            e.off_cpu_ns += p.off_cpu_ns;
        }
        self.losses.add(&other.losses);
        self.serving.merge(&other.serving);
        // A state as of its reading, not a delta: the later reading's holds.
        if other.mono_ns >= self.mono_ns {
            self.symbol_cache = other.symbol_cache;
        }
        if self.hz == 0 {
            self.hz = other.hz;
        }
        if self.off_cpu_min_ns.is_none() {
            self.off_cpu_min_ns = other.off_cpu_min_ns;
        }
        if self.start_unix_ns == 0 {
            self.start_unix_ns = other.start_unix_ns;
        }
        self.duration_ns += other.duration_ns;
        self.mono_ns = self.mono_ns.max(other.mono_ns);
    }

    /// Keeps only the processes `keep` selects (pid, name): a filtered replay.
    pub fn retain_processes(&mut self, mut keep: impl FnMut(u32, &str) -> bool) {
        let procs = &self.processes;
        let mut kept: HashMap<u32, bool> = HashMap::new();
        for (pid, p) in procs {
            kept.insert(*pid, keep(*pid, &p.comm));
        }
        self.stacks
            .retain(|k, _| kept.get(&k.tgid).copied().unwrap_or(false));
        self.blocks
            .retain(|b| kept.get(&b.tgid).copied().unwrap_or(false));
        self.processes
            .retain(|pid, _| kept.get(pid).copied().unwrap_or(false));
    }

    pub fn is_empty(&self) -> bool {
        self.stacks.is_empty() && self.serving.endpoints.is_empty()
    }

    /// The stacks of one side (on-CPU, or all off-CPU states), sorted for stable output:
    /// by process, then by frames.
    fn sorted(&self, on_cpu: bool) -> Vec<(&StackKey, &Tally)> {
        let mut v: Vec<_> = self
            .stacks
            .iter()
            .filter(|(k, _)| k.kind.is_on_cpu() == on_cpu)
            .collect();
        v.sort_by(|a, b| {
            (a.0.tgid, a.0.tid, a.0.kind, &a.0.frames[..]).cmp(&(
                b.0.tgid,
                b.0.tid,
                b.0.kind,
                &b.0.frames[..],
            ))
        });
        v
    }

    /// Folded stacks (one line per stack: `comm-pid;root;…;leaf count`), the input of
    /// flamegraph.pl, speedscope and inferno. On-CPU: samples; off-CPU: nanoseconds, with the
    /// blocked state as the frame under the process (`[interruptible]`, …).
    pub fn write_folded(&self, on_cpu: bool, w: &mut dyn Write) -> io::Result<()> {
        for (k, t) in self.sorted(on_cpu) {
            let comm = self
                .processes
                .get(&k.tgid)
                .map(|p| p.comm.as_str())
                .unwrap_or("?");
            write!(w, "{}-{}", folded_name(comm), k.tgid)?;
            if !on_cpu {
                write!(w, ";[{}]", kind_name(k.kind))?;
            }
            for f in k.frames.iter() {
                write!(w, ";{}", folded_name(f))?;
            }
            writeln!(w, " {}", if on_cpu { t.count } else { t.ns })?;
        }
        Ok(())
    }

    /// The JSON `profile` lines of the session's totals.
    pub fn lines(&self) -> Vec<ProfileLine> {
        self.lines_of(Span::Session, None)
    }

    /// The JSON `profile` lines: one per process and side, its stacks heaviest first;
    /// `period_ns` for an interval's.
    pub fn lines_of(&self, span: Span, period_ns: Option<u64>) -> Vec<ProfileLine> {
        let mut tgids: Vec<u32> = self.processes.keys().copied().collect();
        tgids.sort_unstable();
        let mut out = Vec::new();
        for tgid in tgids {
            let p = &self.processes[&tgid];
            for on_cpu in [true, false] {
                let mut stacks: Vec<ProfileStack> = self
                    .stacks
                    .iter()
                    .filter(|(k, _)| k.tgid == tgid && k.kind.is_on_cpu() == on_cpu)
                    .map(|(k, t)| ProfileStack {
                        tid: k.tid,
                        state: (!on_cpu).then_some(k.kind),
                        frames: k.frames.iter().map(|f| f.to_string()).collect(),
                        samples: on_cpu.then_some(t.count),
                        blocks: (!on_cpu).then_some(t.count),
                        ns: (!on_cpu).then_some(t.ns),
                    })
                    .collect();
                if stacks.is_empty() {
                    continue;
                }
                stacks.sort_by(|a, b| {
                    (b.ns.unwrap_or(0), b.samples.unwrap_or(0), &a.frames, a.tid).cmp(&(
                        a.ns.unwrap_or(0),
                        a.samples.unwrap_or(0),
                        &b.frames,
                        b.tid,
                    ))
                });
                out.push(ProfileLine {
                    span,
                    period_ns,
                    kind: if on_cpu { "on_cpu" } else { "off_cpu" },
                    pid: tgid,
                    comm: p.comm.clone(),
                    hz: on_cpu.then_some(self.hz),
                    samples: on_cpu.then_some(p.on_cpu_samples),
                    samples_reaching_entry: on_cpu.then_some(p.on_cpu_reaching_entry),
                    blocks: (!on_cpu).then_some(p.off_cpu_blocks),
                    off_cpu_ns: (!on_cpu).then_some(p.off_cpu_ns),
                    min_block_ns: if on_cpu { None } else { self.off_cpu_min_ns },
                    losses: self.losses,
                    symbol_cache: self.symbol_cache,
                    endpoint: None,
                    calls: None,
                    links: (!on_cpu && !self.serving.stats.is_zero()).then_some(self.serving.stats),
                    stacks,
                });
            }
        }
        out.extend(self.serving.lines(self, span, period_ns));
        out
    }

    /// One line per program (processes of one name together: a build's hundred compiler
    /// processes get one line) whose on-CPU stacks mostly stop short: the reason and the fix.
    pub fn unwind_hints(&self) -> Vec<String> {
        // comm → (first pid, processes, samples, samples reaching the entry)
        let mut by_comm: std::collections::BTreeMap<&str, (u32, u64, u64, u64)> =
            std::collections::BTreeMap::new();
        let mut tgids: Vec<u32> = self.processes.keys().copied().collect();
        tgids.sort_unstable();
        for tgid in tgids {
            let p = &self.processes[&tgid];
            let e = by_comm.entry(p.comm.as_str()).or_insert((tgid, 0, 0, 0));
            e.1 += 1;
            e.2 += p.on_cpu_samples;
            e.3 += p.on_cpu_reaching_entry;
        }
        by_comm
            .into_iter()
            // Under half the samples complete, out of enough samples to say so.
            .filter(|(_, (_, _, n, reaching))| *n >= 20 && reaching * 2 < *n)
            .map(|(comm, (pid, procs, n, reaching))| {
                let who = if procs == 1 {
                    format!("{pid}")
                } else {
                    format!("{procs} processes")
                };
                format!(
                    "ebtop: profile: {comm} ({who}): {reaching} of {n} samples reach the \
                     thread's entry: its code likely has no frame pointers (build with \
                     -fno-omit-frame-pointer, or Rust -C force-frame-pointers=yes)"
                )
            })
            .collect()
    }
}

/// Where `--profile-out FILE` puts the off-CPU profile: `X.off-cpu.pb.gz` for `X.pb.gz`,
/// else `FILE.off-cpu`.
pub fn off_cpu_path(path: &std::path::Path) -> std::path::PathBuf {
    let s = path.as_os_str().to_string_lossy();
    match s.strip_suffix(".pb.gz") {
        Some(stem) => format!("{stem}.off-cpu.pb.gz").into(),
        None => {
            let mut p = path.as_os_str().to_owned();
            p.push(".off-cpu");
            p.into()
        }
    }
}

pub fn kind_name(k: Kind) -> &'static str {
    match k {
        Kind::OnCpu => "on_cpu",
        Kind::Interruptible => "interruptible",
        Kind::Uninterruptible => "uninterruptible",
        Kind::OtherState => "other_state",
    }
}

/// A name as one folded frame: `;` separates frames and the last space the count, so both
/// become `_` (C++ and Rust names hold spaces: `<impl Foo for Bar>`), as do line breaks.
fn folded_name(s: &str) -> std::borrow::Cow<'_, str> {
    if s.contains([';', ' ', '\n', '\r']) {
        s.replace([';', ' ', '\n', '\r'], "_").into()
    } else {
        s.into()
    }
}

/// What a `profile` line covers.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Span {
    /// One interval (`--delay`): what the kernel counted since the previous reading.
    Interval,
    /// The whole session, written at its end.
    Session,
}

/// A JSON `profile` line (docs/json.md).
#[derive(Clone, Debug, Serialize)]
pub struct ProfileLine {
    pub span: Span,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub period_ns: Option<u64>,
    pub kind: &'static str,
    pub pid: u32,
    pub comm: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub hz: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub samples: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub samples_reaching_entry: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub blocks: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub off_cpu_ns: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub min_block_ns: Option<u64>,
    /// The losses of the span (all processes).
    pub losses: ProfileLosses,
    /// The session's symbol cache (all processes); absent in a replay.
    #[serde(skip_serializing_if = "filesyms::CacheStats::is_unknown")]
    pub symbol_cache: filesyms::CacheStats,
    /// An `off_cpu` line of the time the process's threads spent off the CPU while serving
    /// this endpoint's calls (`METHOD resource`, the endpoint rows' form; src/profile/serving.rs).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub endpoint: Option<String>,
    /// The endpoint's server calls whose serving thread was known (read its request, wrote
    /// its response, nothing else in between): those whose blocks could be linked.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub calls: Option<u64>,
    /// How the span's blocks and calls were linked (all processes).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub links: Option<serving::ServingStats>,
    pub stacks: Vec<ProfileStack>,
}

#[derive(Clone, Debug, Serialize)]
pub struct ProfileStack {
    /// The thread (`--profile-threads`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tid: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub state: Option<Kind>,
    /// Root first; kernel frames last, with a `_[k]` suffix.
    pub frames: Vec<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub samples: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub blocks: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ns: Option<u64>,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(tgid: u32, kind: Kind, frames: &[&str]) -> StackKey {
        StackKey {
            tgid,
            tid: None,
            kind,
            frames: frames.iter().map(|f| Frame::from(*f)).collect(),
        }
    }

    #[test]
    fn folded_lines_name_the_process_and_add_up_per_stack() {
        let mut p = Profile::default();
        let hot = key(7, Kind::OnCpu, &["_start", "main", "hot"]);
        p.add(hot.clone(), "prog", Tally { count: 3, ns: 0 });
        p.add(hot, "prog", Tally { count: 2, ns: 0 });
        p.add(
            key(7, Kind::OnCpu, &["[unknown]"]),
            "prog",
            Tally { count: 1, ns: 0 },
        );
        p.add(
            key(
                7,
                Kind::Interruptible,
                &["main", "nanosleep", "do_nanosleep_[k]"],
            ),
            "prog",
            Tally {
                count: 2,
                ns: 40_000_000,
            },
        );
        let mut on = Vec::new();
        p.write_folded(true, &mut on).unwrap();
        assert_eq!(
            String::from_utf8(on).unwrap(),
            "prog-7;[unknown] 1\nprog-7;_start;main;hot 5\n"
        );
        let mut off = Vec::new();
        p.write_folded(false, &mut off).unwrap();
        assert_eq!(
            String::from_utf8(off).unwrap(),
            "prog-7;[interruptible];main;nanosleep;do_nanosleep_[k] 40000000\n"
        );
        let t = &p.processes[&7];
        assert_eq!((t.on_cpu_samples, t.on_cpu_reaching_entry), (6, 5));
        assert_eq!((t.off_cpu_blocks, t.off_cpu_ns), (2, 40_000_000));
    }

    #[test]
    fn folded_names_keep_their_separators_out() {
        assert_eq!(
            folded_name("<impl Foo for Bar>::f;x"),
            "<impl_Foo_for_Bar>::f_x"
        );
        assert_eq!(folded_name("plain"), "plain");
    }

    #[test]
    fn json_lines_split_sides_and_put_the_heaviest_stack_first() {
        let mut p = Profile {
            hz: 99,
            off_cpu_min_ns: Some(1_000_000),
            ..Default::default()
        };
        p.add(
            key(1, Kind::OnCpu, &["main", "a"]),
            "x",
            Tally { count: 1, ns: 0 },
        );
        p.add(
            key(1, Kind::OnCpu, &["main", "b"]),
            "x",
            Tally { count: 9, ns: 0 },
        );
        p.add(
            key(1, Kind::Uninterruptible, &["main", "read"]),
            "x",
            Tally { count: 1, ns: 5 },
        );
        let lines = p.lines();
        assert_eq!(lines.len(), 2);
        assert_eq!(lines[0].kind, "on_cpu");
        assert_eq!(lines[0].samples, Some(10));
        assert_eq!(lines[0].stacks[0].frames, ["main", "b"]);
        assert_eq!(lines[1].kind, "off_cpu");
        assert_eq!(lines[1].off_cpu_ns, Some(5));
        assert_eq!(lines[1].stacks[0].state, Some(Kind::Uninterruptible));
        let v = serde_json::to_value(&lines[1]).unwrap();
        assert_eq!(v["stacks"][0]["state"], "uninterruptible");
        assert!(v.get("samples").is_none());
        assert!(v["stacks"][0].get("tid").is_none(), "not kept per thread");
    }

    /// Kept per thread: one line per process and side still, each stack with its `tid`, the
    /// process's totals the sum of its threads'.
    #[test]
    fn json_lines_give_each_threads_stack_its_tid() {
        let mut p = Profile::default();
        for (tid, count) in [(5, 4), (6, 7)] {
            let mut k = key(5, Kind::OnCpu, &["main", "work"]);
            k.tid = Some(tid);
            p.add(k, "srv", Tally { count, ns: 0 });
        }
        let lines = p.lines();
        assert_eq!(lines.len(), 1);
        assert_eq!(lines[0].samples, Some(11));
        let v = serde_json::to_value(&lines[0]).unwrap();
        let stacks: Vec<(u64, u64)> = v["stacks"]
            .as_array()
            .unwrap()
            .iter()
            .map(|s| (s["tid"].as_u64().unwrap(), s["samples"].as_u64().unwrap()))
            .collect();
        assert_eq!(stacks, [(6, 7), (5, 4)]);
    }

    #[test]
    fn a_process_whose_stacks_stop_short_gets_one_hint() {
        let mut p = Profile::default();
        p.add(
            key(5, Kind::OnCpu, &["leaf"]),
            "nofp",
            Tally { count: 30, ns: 0 },
        );
        p.add(
            key(6, Kind::OnCpu, &["main", "leaf"]),
            "fp",
            Tally { count: 30, ns: 0 },
        );
        let hints = p.unwind_hints();
        assert_eq!(hints.len(), 1);
        assert!(hints[0].contains("nofp (5): 0 of 30"), "{}", hints[0]);
        // Processes of one program: one line for them all.
        for pid in [8, 9] {
            p.add(
                key(pid, Kind::OnCpu, &["leaf"]),
                "cc1",
                Tally { count: 15, ns: 0 },
            );
        }
        let hints = p.unwind_hints();
        assert_eq!(hints.len(), 2, "{hints:?}");
        assert!(
            hints[0].contains("cc1 (2 processes): 0 of 30"),
            "{}",
            hints[0]
        );
    }
}
