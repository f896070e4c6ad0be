//! Socket inode → owning process, from /proc/*/fd (also for flows opened before ebtop
//! started), and the local ports that listen (to infer the role of such flows).

use std::collections::{HashMap, HashSet};
use std::time::{Duration, Instant};

/// Rescans at most this often when an unknown inode turns up.
const RESCAN_EVERY: Duration = Duration::from_millis(500);

/// Rescans take at most this share of a core: a scan reads every process's fds, 0.4 s of CPU
/// with 200,000 sockets open, and hosts with many idle new connections (whose owners the kernel
/// notes only once they move data) would otherwise rescan every poll.
const SCAN_SHARE_DIVISOR: u32 = 20;

#[derive(Debug, Default)]
pub struct Owners {
    by_inode: HashMap<u64, (u32, String)>,
    listening: HashSet<u16>,
    last_scan: Option<Instant>,
    /// How long the last scan took.
    last_scan_took: Duration,
    /// An unknown inode was asked for since the last scan.
    missed: bool,
    scanned_this_poll: bool,
}

impl Owners {
    /// Reads every process's socket fds and the listening TCP ports.
    pub fn scan(&mut self) {
        let began = Instant::now();
        self.by_inode.clear();
        self.listening.clear();
        self.missed = false;
        match super::listening::listening_tcp_ports() {
            Ok(ports) => self.listening = ports,
            Err(_) => self.scan_listening_procfs(),
        }
        for pid in crate::procinfo::pids() {
            let mut comm: Option<String> = None;
            for ino in crate::procinfo::socket_inodes(pid) {
                let c = comm.get_or_insert_with(|| crate::procinfo::read_comm(pid));
                self.by_inode.entry(ino).or_insert((pid, c.clone()));
            }
        }
        let now = Instant::now();
        self.last_scan = Some(now);
        self.last_scan_took = now - began;
    }

    /// Whether enough time has passed since the last scan to scan again.
    fn may_rescan(&self) -> bool {
        self.last_scan
            .is_none_or(|t| t.elapsed() >= rescan_interval(self.last_scan_took))
    }

    /// Listening ports from /proc/net/tcp{,6}: where sock_diag netlink is not available
    /// (slow with many sockets: the kernel formats every one).
    fn scan_listening_procfs(&mut self) {
        for file in ["/proc/net/tcp", "/proc/net/tcp6"] {
            let Ok(text) = std::fs::read_to_string(file) else {
                continue;
            };
            for line in text.lines().skip(1) {
                let f: Vec<&str> = line.split_whitespace().collect();
                // local_address is ADDR:PORT (hex); st 0A = LISTEN.
                if f.len() > 3 && f[3] == "0A" {
                    if let Some(port) = f[1]
                        .rsplit(':')
                        .next()
                        .and_then(|p| u16::from_str_radix(p, 16).ok())
                    {
                        self.listening.insert(port);
                    }
                }
            }
        }
    }

    /// Start of a poll: rescan if something was missing last time and the cache is old enough.
    pub fn begin_poll(&mut self) {
        self.scanned_this_poll = false;
        if self.missed && self.may_rescan() {
            self.scan();
            self.scanned_this_poll = true;
        }
    }

    /// The cached owner, without rescanning.
    pub fn cached(&self, inode: u64) -> Option<(u32, String)> {
        self.by_inode.get(&inode).cloned()
    }

    pub fn lookup(&mut self, inode: u64) -> Option<(u32, String)> {
        if let Some(hit) = self.by_inode.get(&inode) {
            return Some(hit.clone());
        }
        // A socket opened since the last scan: rescan now (at most once per poll and
        // rate-limited), else at a later poll.
        if !self.scanned_this_poll && self.may_rescan() {
            self.scanned_this_poll = true;
            self.scan();
            if let Some(hit) = self.by_inode.get(&inode) {
                return Some(hit.clone());
            }
        }
        self.missed = true;
        None
    }

    pub fn listens(&self, port: u16) -> bool {
        self.listening.contains(&port)
    }
}

/// The least time between two scans, after one that took `took`.
fn rescan_interval(took: Duration) -> Duration {
    RESCAN_EVERY.max(took * SCAN_SHARE_DIVISOR)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rescans_are_spaced_so_they_take_at_most_a_twentieth_of_a_core() {
        // Quick scans (a host with few sockets): every half second, as before.
        assert_eq!(rescan_interval(Duration::ZERO), RESCAN_EVERY);
        assert_eq!(rescan_interval(Duration::from_millis(25)), RESCAN_EVERY);
        // A 0.4 s scan (200,000 sockets) waits 8 s: 0.4 s of every 8.4 s.
        assert_eq!(
            rescan_interval(Duration::from_millis(400)),
            Duration::from_secs(8)
        );
    }

    #[test]
    fn a_fresh_table_may_scan_and_a_just_scanned_one_may_not() {
        let mut o = Owners::default();
        assert!(o.may_rescan());
        o.scan();
        assert!(!o.may_rescan());
        o.last_scan = Some(Instant::now() - rescan_interval(o.last_scan_took));
        assert!(o.may_rescan());
    }
}
