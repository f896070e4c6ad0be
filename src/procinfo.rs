//! Process identity (exe, command line) read from /proc once per pid, bounded.

use std::collections::HashMap;

#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ProcInfo {
    pub pid: u32,
    pub comm: String,
    pub exe: Option<String>,
    pub cmdline: Vec<String>,
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

/// Known processes; `lookup` says whether a pid is new (so sinks can describe it once).
pub struct ProcessTable {
    procs: HashMap<u32, ProcInfo>,
    cap: usize,
    /// Read /proc for unknown pids (live); a replay has its table from the recording.
    read_proc: bool,
}

impl ProcessTable {
    pub fn new(read_proc: bool) -> Self {
        ProcessTable {
            procs: HashMap::new(),
            cap: 16384,
            read_proc,
        }
    }
    pub fn insert(&mut self, info: ProcInfo) {
        if self.procs.len() >= self.cap {
            self.procs.clear();
        }
        self.procs.insert(info.pid, info);
    }
    /// The process's info, and whether this is the first time it is asked for.
    pub fn lookup(&mut self, pid: u32, comm: &str) -> (&ProcInfo, bool) {
        let fresh = match self.procs.get(&pid) {
            Some(p) => p.comm != comm, // exec'd into another program since
            None => true,
        };
        if fresh {
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
        (&self.procs[&pid], fresh)
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
