//! Who owns a flow's socket, for flows no hook named (a server's connection accepted but
//! idle, a flow opened before ebtop started), and the local ports that listen (to infer the
//! role of such flows). Where the kernel has BPF task-file iterators, a program run on demand
//! (`name_owners`, src/bpf/flows.bpf.c) writes the owner into the flow table's entries itself;
//! elsewhere socket inodes are matched against every process's /proc/PID/fd.

use std::collections::{HashMap, HashSet};
use std::io::Read;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::time::{Duration, Instant};

/// Rescans at most this often when an unknown inode turns up.
const RESCAN_EVERY: Duration = Duration::from_millis(500);

/// Rescans take at most this share of a core: a scan reads every process's fds, 0.4 s of CPU
/// with 200,000 sockets open, and hosts with many idle new connections (whose owners the kernel
/// notes only once they move data) would otherwise rescan every poll.
const SCAN_SHARE_DIVISOR: u32 = 20;

/// The `name_owners` iterator's link: each run walks every process's open files in the kernel
/// and names the owner of each flow-table entry that has none (no text, no syscall per fd:
/// /proc/PID/fd costs 0.4 s of CPU with 200,000 sockets open).
#[derive(Debug)]
pub struct OwnerIterator {
    link: OwnedFd,
}

impl OwnerIterator {
    pub fn new(link: OwnedFd) -> OwnerIterator {
        OwnerIterator { link }
    }

    /// One walk. The program writes no output, so reading to the end is the walk.
    pub fn run(&self) -> std::io::Result<()> {
        // SAFETY: the link descriptor is ours and open for the call's duration.
        let fd = unsafe { libbpf_rs::libbpf_sys::bpf_iter_create(self.link.as_raw_fd()) };
        if fd < 0 {
            return Err(std::io::Error::last_os_error());
        }
        // SAFETY: a descriptor the call above just opened, owned by nobody else.
        let mut walk = std::fs::File::from(unsafe { OwnedFd::from_raw_fd(fd) });
        let mut buf = [0u8; 64];
        loop {
            match walk.read(&mut buf) {
                Ok(0) => return Ok(()),
                Ok(_) => {}
                // EAGAIN: a million files visited without output; the next read goes on.
                Err(e)
                    if matches!(
                        e.kind(),
                        std::io::ErrorKind::Interrupted | std::io::ErrorKind::WouldBlock
                    ) => {}
                Err(e) => return Err(e),
            }
        }
    }
}

#[derive(Debug, Default)]
pub struct Owners {
    /// Where set, owners are named in the kernel's table and `by_inode` stays empty.
    in_kernel: Option<OwnerIterator>,
    /// The iterator ran during this poll after the table was read: entries read before are
    /// stale as to their owner.
    named_since_read: bool,
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
    /// Owners named by the kernel iterator (no /proc walk).
    pub fn in_kernel(iterator: OwnerIterator) -> Owners {
        Owners {
            in_kernel: Some(iterator),
            ..Default::default()
        }
    }

    /// Whether owners are named in the kernel's table (else looked up by inode here).
    pub fn names_in_kernel(&self) -> bool {
        self.in_kernel.is_some()
    }

    /// Names owners (in the kernel's table, or by reading every process's socket fds) and
    /// reads the listening TCP ports.
    pub fn scan(&mut self) {
        let began = Instant::now();
        self.by_inode.clear();
        self.listening.clear();
        self.missed = false;
        match super::listening::listening_tcp_ports() {
            Ok(ports) => self.listening = ports,
            Err(_) => self.scan_listening_procfs(),
        }
        if let Some(iterator) = &self.in_kernel {
            // A failed walk leaves owners unknown, as a flow gone before a /proc scan does.
            let _ = iterator.run();
            let now = Instant::now();
            self.last_scan = Some(now);
            self.last_scan_took = now - began;
            return;
        }
        for pid in crate::procfs::pids() {
            let mut comm: Option<String> = None;
            for ino in crate::procfs::socket_inodes(pid) {
                let c = comm.get_or_insert_with(|| crate::procfs::read_comm(pid));
                self.by_inode.entry(ino).or_insert((pid, c.clone()));
            }
        }
        let now = Instant::now();
        self.last_scan = Some(now);
        self.last_scan_took = now - began;
    }

    /// Whether enough time has passed since the last scan to scan again. The kernel iterator
    /// is held to the share of a core alone (it takes well under a millisecond on a host with
    /// a few thousand sockets, so a flow is named in the poll that first reads it); the /proc
    /// walk also to its half-second spacing.
    fn may_rescan(&self) -> bool {
        let least = if self.in_kernel.is_some() {
            self.last_scan_took * SCAN_SHARE_DIVISOR
        } else {
            rescan_interval(self.last_scan_took)
        };
        self.last_scan.is_none_or(|t| t.elapsed() >= least)
    }

    /// Listening ports from /proc/net/tcp{,6}: where sock_diag netlink is not available
    /// (slow with many sockets: the kernel formats every one).
    fn scan_listening_procfs(&mut self) {
        for file in ["tcp", "tcp6"] {
            let Ok(text) = crate::procfs::read_net(file) else {
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

    /// Start of a poll, before the table is snapshot and read: rescan if something was missing
    /// last time and the cache is old enough.
    pub fn begin_poll(&mut self) {
        self.scanned_this_poll = false;
        self.named_since_read = false;
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

    /// An open flow read from the table has no owner (kernel naming only): runs the iterator
    /// if it has not run this poll and may. True if it ran after the table was read, so the
    /// flow's entry is worth reading again.
    pub fn unnamed_in_kernel(&mut self) -> bool {
        if !self.scanned_this_poll && self.may_rescan() {
            self.scanned_this_poll = true;
            self.scan();
            self.named_since_read = true;
        } else if !self.named_since_read {
            self.missed = true;
        }
        self.named_since_read
    }

    /// A flow the walk of this poll did not name: the next poll walks again, if it may.
    pub fn still_unnamed(&mut self) {
        self.missed = true;
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
