//! Reads of /proc: the processes that exist, and what one of them is (its name, executable,
//! command line, cgroup, open sockets, mappings); ebtop's own entries (`/proc/self`); the
//! network namespace's sockets (`/proc/net`); a process's CPU time and memory (`stat`,
//! `statm`) and the kernel's settings (`/proc/sys`) for src/aggregate/.

use std::io;
use std::path::{Path, PathBuf};

/// `/proc/PID/cgroup`'s cgroup v2 path (the `0::` line).
pub fn read_cgroup(pid: u32) -> Option<String> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/cgroup")).ok()?;
    text.lines()
        .find_map(|l| l.strip_prefix("0::"))
        .map(str::to_owned)
}

/// The cgroup v2 paths of the processes running now (one per process, repeats included).
pub fn running_cgroups() -> impl Iterator<Item = String> {
    pids().filter_map(read_cgroup)
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

/// The parent's pid from `/proc/PID/stat` (field 4; the comm before it may hold spaces and
/// parentheses, so fields are counted from the last `)`). None once the process is gone.
pub fn read_ppid(pid: u32) -> Option<u32> {
    parse_stat_ppid(&read_pid(pid, "stat").ok()?)
}

/// Field 4 (ppid) of a `/proc/PID/stat` line.
pub fn parse_stat_ppid(stat: &str) -> Option<u32> {
    let after_comm = &stat[stat.rfind(')')? + 1..];
    after_comm.split_ascii_whitespace().nth(1)?.parse().ok()
}

/// `/proc/PID/exe`'s target (None once the process exited, or for a kernel thread).
pub fn read_exe(pid: u32) -> Option<String> {
    std::fs::read_link(format!("/proc/{pid}/exe"))
        .ok()
        .map(|p| p.to_string_lossy().into_owned())
}

/// `/proc/PID/cmdline`: the arguments, NUL-separated.
pub fn read_cmdline(pid: u32) -> io::Result<Vec<u8>> {
    std::fs::read(format!("/proc/{pid}/cmdline"))
}

/// One of a process's entries as text: `/proc/PID/ENTRY` (`stat`, `statm`).
pub fn read_pid(pid: u32, entry: &str) -> io::Result<String> {
    std::fs::read_to_string(format!("/proc/{pid}/{entry}"))
}

/// A kernel setting as text: `/proc/sys/NAME` (`kernel/bpf_stats_enabled`).
pub fn read_sys(name: &str) -> io::Result<String> {
    std::fs::read_to_string(format!("/proc/sys/{name}"))
}

/// `/proc/PID/maps`: what the process maps.
pub fn read_maps(pid: u32) -> io::Result<String> {
    std::fs::read_to_string(format!("/proc/{pid}/maps"))
}

/// A path in a process's entry (`/proc/PID/exe`, `/proc/PID/root`), to open or go through.
pub fn pid_path(pid: u32, entry: &str) -> PathBuf {
    PathBuf::from(format!("/proc/{pid}/{entry}"))
}

/// Whether process `pid` exists now.
pub fn exists(pid: u32) -> bool {
    Path::new(&format!("/proc/{pid}")).exists()
}

/// One of ebtop's own entries as text: `/proc/self/ENTRY` (`status`, `maps`, `mounts`,
/// `mountinfo`).
pub fn read_self(entry: &str) -> io::Result<String> {
    std::fs::read_to_string(format!("/proc/self/{entry}"))
}

/// A path in ebtop's own entry (`/proc/self/exe`).
pub fn self_path(entry: &str) -> PathBuf {
    PathBuf::from(format!("/proc/self/{entry}"))
}

/// ebtop's descriptor `fd` as a path (`/proc/self/fd/FD`): the open file, whatever its name.
pub fn fd_path(fd: i32) -> PathBuf {
    PathBuf::from(format!("/proc/self/fd/{fd}"))
}

/// What ebtop's descriptor `fd` is open on (`/proc/self/fd/FD`).
pub fn fd_target(fd: i32) -> io::Result<PathBuf> {
    std::fs::read_link(format!("/proc/self/fd/{fd}"))
}

/// A table of ebtop's network namespace as text: `/proc/net/ENTRY` (`tcp`, `tcp6`).
pub fn read_net(entry: &str) -> io::Result<String> {
    std::fs::read_to_string(format!("/proc/net/{entry}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_parent_is_read_past_an_odd_comm() {
        let line = "1234 (a b) c)) S 77 1234 1234 0 -1 4194560 100 0 0 0 250 30";
        assert_eq!(parse_stat_ppid(line), Some(77));
        assert_eq!(parse_stat_ppid("1234 (x"), None);
        assert_eq!(parse_stat_ppid("garbage"), None);
        let own = read_ppid(std::process::id());
        assert_eq!(own, Some(std::os::unix::process::parent_id()));
    }
}
