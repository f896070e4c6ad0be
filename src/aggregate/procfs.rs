//! CPU time and resident memory of a process from /proc, as `top` computes them.

use std::io;
use std::sync::OnceLock;

/// One reading of /proc/PID/stat and /proc/PID/statm.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProcSample {
    /// CLOCK_MONOTONIC when read; CPU % is relative to the time between two readings.
    pub mono_ns: u64,
    /// utime + stime of all the process's threads, in clock ticks.
    pub cpu_ticks: u64,
    /// Start time after boot in clock ticks: a different value under the same pid means the
    /// pid was reused by another process.
    pub start_ticks: u64,
    pub rss_bytes: u64,
}

impl ProcSample {
    pub fn read(pid: u32) -> io::Result<ProcSample> {
        let stat = crate::procfs::read_pid(pid, "stat")?;
        let (cpu_ticks, start_ticks) = parse_stat(&stat)
            .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidData, "malformed stat"))?;
        let statm = crate::procfs::read_pid(pid, "statm")?;
        let rss_pages = parse_statm_rss(&statm)
            .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidData, "malformed statm"))?;
        Ok(ProcSample {
            mono_ns: crate::clock::monotonic_ns(),
            cpu_ticks,
            start_ticks,
            rss_bytes: rss_pages * page_size(),
        })
    }

    /// The same process (not a reused pid) as `earlier`?
    pub fn same_process(&self, earlier: &ProcSample) -> bool {
        self.start_ticks == earlier.start_ticks
    }
}

/// (utime + stime, starttime) from /proc/PID/stat. The comm field (2) may contain spaces and
/// parentheses, so fields are counted from the last ')'.
pub fn parse_stat(stat: &str) -> Option<(u64, u64)> {
    let after_comm = &stat[stat.rfind(')')? + 1..];
    // Field 3 (state) is the first after comm; utime, stime, starttime are fields 14, 15, 22.
    let mut fields = after_comm.split_ascii_whitespace();
    let utime: u64 = fields.nth(14 - 3)?.parse().ok()?;
    let stime: u64 = fields.next()?.parse().ok()?;
    let start: u64 = fields.nth(22 - 16)?.parse().ok()?;
    Some((utime + stime, start))
}

/// Resident pages: the second field of /proc/PID/statm.
pub fn parse_statm_rss(statm: &str) -> Option<u64> {
    statm.split_ascii_whitespace().nth(1)?.parse().ok()
}

/// CPU use between two readings of one process, in % of one core (like top: 200% = two
/// cores busy). None if they are too close together to say anything.
pub fn cpu_pct(earlier: &ProcSample, later: &ProcSample) -> Option<f64> {
    let elapsed_ns = later.mono_ns.checked_sub(earlier.mono_ns)?;
    // Below a few ticks the tick granularity dominates the result.
    if elapsed_ns < 20_000_000 {
        return None;
    }
    let ticks = later.cpu_ticks.saturating_sub(earlier.cpu_ticks);
    let cpu_s = ticks as f64 / clock_ticks_per_s() as f64;
    Some(100.0 * cpu_s / (elapsed_ns as f64 / 1e9))
}

/// USER_HZ, the unit of /proc/PID/stat times (100 on every common Linux).
pub fn clock_ticks_per_s() -> u64 {
    static HZ: OnceLock<u64> = OnceLock::new();
    // SAFETY: sysconf has no preconditions; it only reads a constant.
    *HZ.get_or_init(|| match unsafe { libc::sysconf(libc::_SC_CLK_TCK) } {
        n if n > 0 => n as u64,
        _ => 100,
    })
}

pub fn page_size() -> u64 {
    static PAGE: OnceLock<u64> = OnceLock::new();
    // SAFETY: sysconf has no preconditions; it only reads a constant.
    *PAGE.get_or_init(|| match unsafe { libc::sysconf(libc::_SC_PAGESIZE) } {
        n if n > 0 => n as u64,
        _ => 4096,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_stat_with_odd_comm() {
        // Fields 3.. of a real line, behind a comm with spaces and ')'.
        let line = "1234 (a b) c)) S 1 1234 1234 0 -1 4194560 100 0 0 0 \
                    250 30 0 0 20 0 1 0 98765 10000000 300 18446744073709551615";
        assert_eq!(parse_stat(line), Some((280, 98765)));
        assert_eq!(parse_stat("garbage"), None);
        assert_eq!(parse_statm_rss("1000 250 100 1 0 200 0\n"), Some(250));
    }

    #[test]
    fn reads_own_process() {
        let s = ProcSample::read(std::process::id()).expect("own /proc entry");
        assert!(s.rss_bytes > 0 && s.start_ticks > 0);
        assert!(clock_ticks_per_s() >= 100 && page_size() >= 4096);
    }

    #[test]
    fn cpu_pct_is_ticks_over_elapsed() {
        let hz = clock_ticks_per_s();
        let a = ProcSample {
            mono_ns: 1_000_000_000,
            cpu_ticks: 10,
            start_ticks: 5,
            rss_bytes: 0,
        };
        let b = ProcSample {
            mono_ns: 3_000_000_000,
            cpu_ticks: 10 + hz, // one second of CPU over two seconds
            ..a
        };
        let pct = cpu_pct(&a, &b).unwrap();
        assert!((pct - 50.0).abs() < 1e-9, "{pct}");
        assert_eq!(cpu_pct(&b, &a), None);
    }
}
