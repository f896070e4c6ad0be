//! What ebtop itself costs: its user-space CPU and memory, and the CPU its BPF programs use.
//!
//! BPF programs run in the context of the traced processes' syscalls, so their time shows
//! up in those processes' /proc numbers, not ebtop's; the two parts add up without double
//! counting. The kernel only times (and counts) BPF program runs while run-time statistics are
//! enabled (an fd from `BPF_ENABLE_STATS`, or the `kernel.bpf_stats_enabled` sysctl), and that
//! costs every BPF program on the host two clock reads per run (58–113 ns measured here). So by
//! default ([`StatsMode::Sampled`]) ebtop turns them on only for a window at the end of each
//! interval and scales what the window saw to the interval (`bpf_sampled_ns` says how long
//! the window was); [`StatsMode::Full`] keeps them on for the whole session (exact counts).

use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd};

use libbpf_rs::libbpf_sys;

use super::procfs::{cpu_pct, ProcSample};

/// Cumulative ring-buffer counters (e.g. `KernelCounters::events` and `lost`); the per-interval
/// numbers are their differences.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RingCounters {
    pub events: u64,
    pub lost: u64,
}

/// A program's cumulative kernel counters.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProgCounters {
    pub name: String,
    /// Kernel program id: a different id under the same name means it was reloaded.
    pub id: u32,
    pub run_cnt: u64,
    pub run_time_ns: u64,
}

/// All programs' counters at one moment.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct BpfSample {
    /// CLOCK_MONOTONIC when read.
    pub mono_ns: u64,
    pub progs: Vec<ProgCounters>,
}

#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct BpfProgramOverhead {
    pub name: String,
    pub id: u32,
    pub runs: u64,
    pub runs_per_s: f64,
    pub run_time_ns: u64,
    /// Null without runs.
    pub ns_per_run: Option<f64>,
    /// Run time over the period, % of one core.
    pub cpu_pct: f64,
}

/// The BPF programs between two samples, each and in total.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct BpfInterval {
    pub period_ns: u64,
    pub runs: u64,
    pub runs_per_s: f64,
    pub run_time_ns: u64,
    pub ns_per_run: Option<f64>,
    pub cpu_pct: f64,
    pub programs: Vec<BpfProgramOverhead>,
}

fn per_s(n: u64, period_ns: u64) -> f64 {
    if period_ns == 0 {
        0.0
    } else {
        n as f64 * 1e9 / period_ns as f64
    }
}

fn pct_of_core(busy_ns: u64, period_ns: u64) -> f64 {
    per_s(busy_ns, period_ns) / 1e9 * 100.0
}

/// Per-program and total runs, run time and CPU between `prev` and `cur`. A program absent from
/// `prev`, reloaded (new id) or whose counters went back counts from zero.
pub fn bpf_interval(prev: &BpfSample, cur: &BpfSample) -> BpfInterval {
    let period_ns = cur.mono_ns.saturating_sub(prev.mono_ns);
    let programs: Vec<BpfProgramOverhead> = cur
        .progs
        .iter()
        .map(|p| {
            let before = prev
                .progs
                .iter()
                .find(|q| q.name == p.name && q.id == p.id)
                .filter(|q| q.run_cnt <= p.run_cnt && q.run_time_ns <= p.run_time_ns);
            let (runs, time) = match before {
                Some(q) => (p.run_cnt - q.run_cnt, p.run_time_ns - q.run_time_ns),
                None => (p.run_cnt, p.run_time_ns),
            };
            BpfProgramOverhead {
                name: p.name.clone(),
                id: p.id,
                runs,
                runs_per_s: per_s(runs, period_ns),
                run_time_ns: time,
                ns_per_run: (runs > 0).then(|| time as f64 / runs as f64),
                cpu_pct: pct_of_core(time, period_ns),
            }
        })
        .collect();
    let runs = programs.iter().map(|p| p.runs).sum();
    let run_time_ns = programs.iter().map(|p| p.run_time_ns).sum();
    BpfInterval {
        period_ns,
        runs,
        runs_per_s: per_s(runs, period_ns),
        run_time_ns,
        ns_per_run: (runs > 0).then(|| run_time_ns as f64 / runs as f64),
        cpu_pct: pct_of_core(run_time_ns, period_ns),
        programs,
    }
}

/// (id, run_cnt, run_time_ns) of the program behind `fd`.
pub fn read_prog_counters(fd: BorrowedFd<'_>) -> io::Result<(u32, u64, u64)> {
    // libbpf-rs 0.27 has no public per-fd ProgramInfo (only an iterator over every program on
    // the host), so ask the kernel directly; only the fixed-size fields are wanted.
    let mut info = libbpf_sys::bpf_prog_info::default();
    let mut len = std::mem::size_of::<libbpf_sys::bpf_prog_info>() as u32;
    // SAFETY: `info` is a writable bpf_prog_info of `len` bytes. Its pointer fields are zero, so
    // the kernel fills only the struct itself.
    let rc = unsafe { libbpf_sys::bpf_prog_get_info_by_fd(fd.as_raw_fd(), &mut info, &mut len) };
    if rc < 0 {
        return Err(io::Error::from_raw_os_error(-rc));
    }
    Ok((info.id, info.run_cnt, info.run_time_ns))
}

/// How ebtop measures its BPF programs' run time (`--bpf-stats`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StatsMode {
    /// Statistics on for a window at the end of each interval only.
    Sampled,
    /// On for the whole session: exact run counts and times, at a cost to every BPF program.
    Full,
}

/// Kernel run-time statistics for ebtop's BPF programs.
pub struct BpfStats {
    /// Keeps the kernel's statistics on while open.
    enabled: Option<OwnedFd>,
    /// Statistics are on whatever ebtop does (full mode, or the sysctl is set).
    always_on: bool,
    unavailable: Option<String>,
    prev: BpfSample,
}

/// Turns the kernel's run-time statistics on for as long as the fd lives.
fn enable_stats() -> io::Result<OwnedFd> {
    // SAFETY: no pointers; returns a new fd we own, or a negative errno.
    let rc = unsafe { libbpf_sys::bpf_enable_stats(libbpf_sys::BPF_STATS_RUN_TIME) };
    if rc < 0 {
        return Err(io::Error::from_raw_os_error(-rc));
    }
    // SAFETY: rc is a fresh fd that nothing else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(rc) })
}

impl BpfStats {
    /// Turns run-time statistics on for as long as this lives. Failing that (no CAP_SYS_ADMIN,
    /// kernel < 5.8) they are still usable if the `kernel.bpf_stats_enabled` sysctl is on;
    /// otherwise reports say why they are missing. Counting starts now.
    pub fn enable(mode: StatsMode) -> BpfStats {
        let sysctl = sysctl_stats_enabled();
        let (fd, unavailable) = match enable_stats() {
            // Sampled: this proved it can be turned on; it is, per window.
            Ok(fd) => (Some(fd).filter(|_| mode == StatsMode::Full), None),
            Err(_) if sysctl => (None, None),
            Err(e) => (
                None,
                Some(format!("enabling BPF run-time statistics failed: {e}")),
            ),
        };
        BpfStats {
            always_on: fd.is_some() || sysctl,
            enabled: fd,
            unavailable,
            prev: BpfSample {
                mono_ns: crate::clock::monotonic_ns(),
                progs: Vec::new(),
            },
        }
    }

    /// Sampled mode: statistics on from now until the next [`sample`](Self::sample), which
    /// then covers this window only. Nothing to do when they are always on.
    pub fn open_window<S: AsRef<str>>(&mut self, progs: &[(S, BorrowedFd<'_>)]) {
        if self.always_on || !self.available() || self.enabled.is_some() {
            return;
        }
        self.enabled = enable_stats().ok();
        self.prev = read_sample(progs);
    }

    /// Statistics not wanted or not possible (e.g. replay), with the reason to report.
    pub fn disabled(reason: &str) -> BpfStats {
        BpfStats {
            enabled: None,
            always_on: false,
            unavailable: Some(reason.to_owned()),
            prev: BpfSample::default(),
        }
    }

    pub fn available(&self) -> bool {
        self.unavailable.is_none()
    }

    pub fn unavailable_reason(&self) -> Option<&str> {
        self.unavailable.as_deref()
    }

    /// Reads the programs' counters and returns what they did since the previous call (or
    /// since [`enable`](Self::enable)), or in sampled mode during the window opened since (and
    /// closes it). None when statistics are unavailable or no window was open. A program whose
    /// counters cannot be read is left out.
    pub fn sample<S: AsRef<str>>(&mut self, progs: &[(S, BorrowedFd<'_>)]) -> Option<BpfInterval> {
        if !self.available() || (!self.always_on && self.enabled.is_none()) {
            return None;
        }
        let cur = read_sample(progs);
        let interval = bpf_interval(&self.prev, &cur);
        self.prev = cur;
        if !self.always_on {
            self.enabled = None;
        }
        Some(interval)
    }
}

fn read_sample<S: AsRef<str>>(progs: &[(S, BorrowedFd<'_>)]) -> BpfSample {
    BpfSample {
        mono_ns: crate::clock::monotonic_ns(),
        progs: progs
            .iter()
            .filter_map(|(name, fd)| {
                let (id, run_cnt, run_time_ns) = read_prog_counters(*fd).ok()?;
                Some(ProgCounters {
                    name: name.as_ref().to_owned(),
                    id,
                    run_cnt,
                    run_time_ns,
                })
            })
            .collect(),
    }
}

fn sysctl_stats_enabled() -> bool {
    crate::procfs::read_sys("kernel/bpf_stats_enabled").is_ok_and(|s| s.trim() == "1")
}

/// ebtop's cost over one interval.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct OverheadSnapshot {
    /// Measured time since the previous snapshot.
    pub period_ns: u64,
    /// ebtop's own process (all threads), user + system, % of one core.
    pub user_cpu_pct: Option<f64>,
    pub rss_bytes: Option<u64>,
    pub bpf_stats_available: bool,
    pub bpf_stats_error: Option<String>,
    /// BPF programs' run time, % of one core; null if statistics are unavailable.
    pub bpf_cpu_pct: Option<f64>,
    /// How long statistics were on in this interval (sampled mode: a window at its end; the
    /// rates and `bpf_cpu_pct` are the window's, `bpf_runs` is scaled to the whole interval,
    /// each program's `runs` and `run_time_ns` are the window's). Null without statistics.
    pub bpf_sampled_ns: Option<u64>,
    pub bpf_runs: u64,
    pub bpf_runs_per_s: f64,
    pub bpf_ns_per_run: Option<f64>,
    /// Per program; left out of JSON unless asked for (`--overhead-programs`): it is most of
    /// the line.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub bpf_programs: Vec<BpfProgramOverhead>,
    pub ring_events: u64,
    pub ring_events_per_s: f64,
    pub ring_lost: u64,
    pub ring_lost_per_s: f64,
    /// Files probed for TLS plaintext so far (at start and since: programs exec'd, libraries
    /// dlopen'd) and those that could not be; absent without TLS probes (and in replay).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tls_files_probed: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tls_probe_failures: Option<u64>,
    /// Files skipped as untrusted input (a lease, a link, over a cap: docs/security.md), each
    /// named once on stderr; absent as above.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tls_files_skipped: Option<u64>,
    /// Whether the processes running at the start were looked at (their files probed): TLS
    /// plaintext is complete from then on; absent as above.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tls_running_scanned: Option<bool>,
    /// Whether every installed program (those of the program directories and `PATH`, looked
    /// at after the start, between the looks at new processes) was looked at; absent as above.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tls_installed_scanned: Option<bool>,
    /// `--max-cpu`: ebtop's budget, % of one CPU (absent without one).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_cpu_pct: Option<f64>,
    /// With a budget: the interval cost more than it with nothing captured (every connection
    /// sampled out or cut), so the excess is the attached hooks' own cost at this load.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub over_budget_at_floor: Option<bool>,
    /// user_cpu_pct + bpf_cpu_pct (the BPF part counted as 0 when unavailable: then a lower
    /// bound, as `bpf_stats_available` says).
    pub ebtop_cpu_pct: Option<f64>,
    /// With --plugin: each plugin's calls, cost and faults since the start (docs/plugins.md).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub plugins: Vec<crate::plugins::PluginOverhead>,
}

impl OverheadSnapshot {
    /// This snapshot without its per-program entries.
    pub fn without_programs(&self) -> OverheadSnapshot {
        OverheadSnapshot {
            bpf_programs: Vec::new(),
            bpf_stats_error: self.bpf_stats_error.clone(),
            plugins: self.plugins.clone(),
            ..*self
        }
    }
}

/// `n` seen in `window_ns`, scaled to `period_ns` (unchanged when the window is the period).
fn scale(n: u64, period_ns: u64, window_ns: u64) -> u64 {
    if window_ns == 0 || window_ns >= period_ns {
        return n;
    }
    (n as u128 * period_ns as u128 / window_ns as u128) as u64
}

/// Samples ebtop's own cost once per interval.
pub struct Overhead {
    pid: u32,
    prev_self: Option<ProcSample>,
    bpf: BpfStats,
    prev_ring: Option<RingCounters>,
    prev_mono_ns: u64,
}

impl Overhead {
    /// `bpf`: [`BpfStats::enable`] live, [`BpfStats::disabled`] otherwise.
    pub fn new(bpf: BpfStats) -> Overhead {
        let pid = std::process::id();
        Overhead {
            pid,
            prev_self: ProcSample::read(pid).ok(),
            bpf,
            prev_ring: None,
            prev_mono_ns: crate::clock::monotonic_ns(),
        }
    }

    /// Sampled statistics: the window of this interval starts now (see [`BpfStats::open_window`]).
    pub fn open_bpf_window<S: AsRef<str>>(&mut self, progs: &[(S, BorrowedFd<'_>)]) {
        self.bpf.open_window(progs);
    }

    /// The interval since the previous call (or `new`). `progs`: ebtop's BPF programs by name;
    /// `ring`: the cumulative ring-buffer counters (the first call counts from zero).
    pub fn end_interval<S: AsRef<str>>(
        &mut self,
        progs: &[(S, BorrowedFd<'_>)],
        ring: RingCounters,
    ) -> OverheadSnapshot {
        let now_self = ProcSample::read(self.pid).ok();
        let user_cpu_pct = match (&self.prev_self, &now_self) {
            (Some(a), Some(b)) => cpu_pct(a, b),
            _ => None,
        };
        let rss_bytes = now_self.map(|s| s.rss_bytes);
        if now_self.is_some() {
            self.prev_self = now_self;
        }
        let bpf = self.bpf.sample(progs);
        let now = crate::clock::monotonic_ns();
        let period_ns = now.saturating_sub(self.prev_mono_ns);
        self.prev_mono_ns = now;
        let prev_ring = self.prev_ring.replace(ring).unwrap_or_default();
        let ring_events = ring.events.saturating_sub(prev_ring.events);
        let ring_lost = ring.lost.saturating_sub(prev_ring.lost);
        OverheadSnapshot {
            period_ns,
            user_cpu_pct,
            rss_bytes,
            bpf_stats_available: self.bpf.available(),
            bpf_stats_error: self.bpf.unavailable_reason().map(str::to_owned),
            bpf_cpu_pct: bpf.as_ref().map(|b| b.cpu_pct),
            bpf_sampled_ns: bpf.as_ref().map(|b| {
                if self.bpf.always_on {
                    period_ns
                } else {
                    b.period_ns.min(period_ns)
                }
            }),
            bpf_runs: bpf.as_ref().map_or(0, |b| {
                if self.bpf.always_on {
                    b.runs
                } else {
                    scale(b.runs, period_ns, b.period_ns)
                }
            }),
            bpf_runs_per_s: bpf.as_ref().map_or(0.0, |b| b.runs_per_s),
            bpf_ns_per_run: bpf.as_ref().and_then(|b| b.ns_per_run),
            ring_events,
            ring_events_per_s: per_s(ring_events, period_ns),
            ring_lost,
            ring_lost_per_s: per_s(ring_lost, period_ns),
            tls_files_probed: None,
            tls_probe_failures: None,
            tls_files_skipped: None,
            tls_running_scanned: None,
            tls_installed_scanned: None,
            max_cpu_pct: None,
            over_budget_at_floor: None,
            ebtop_cpu_pct: user_cpu_pct.map(|u| u + bpf.as_ref().map_or(0.0, |b| b.cpu_pct)),
            plugins: Vec::new(),
            bpf_programs: bpf.map(|b| b.programs).unwrap_or_default(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::{Duration, Instant};

    fn prog(name: &str, id: u32, run_cnt: u64, run_time_ns: u64) -> ProgCounters {
        ProgCounters {
            name: name.to_owned(),
            id,
            run_cnt,
            run_time_ns,
        }
    }

    #[test]
    fn bpf_deltas_and_rates() {
        let prev = BpfSample {
            mono_ns: 1_000_000_000,
            progs: vec![
                prog("enter", 1, 100, 10_000),
                prog("exit", 2, 0, 0),
                prog("reloaded", 3, 5_000, 9_000_000),
            ],
        };
        let cur = BpfSample {
            mono_ns: 3_000_000_000,
            progs: vec![
                prog("enter", 1, 1_100, 510_000),
                prog("exit", 2, 500, 1_000_000),
                prog("reloaded", 4, 10, 2_000), // new id: counts from zero
                prog("new", 5, 0, 0),
            ],
        };
        let b = bpf_interval(&prev, &cur);
        assert_eq!(b.period_ns, 2_000_000_000);
        let enter = &b.programs[0];
        assert_eq!((enter.runs, enter.run_time_ns), (1_000, 500_000));
        assert!((enter.runs_per_s - 500.0).abs() < 1e-9);
        assert_eq!(enter.ns_per_run, Some(500.0));
        // 500 µs busy over 2 s = 0.025% of a core.
        assert!((enter.cpu_pct - 0.025).abs() < 1e-12);
        let exit = &b.programs[1];
        assert_eq!((exit.runs, exit.ns_per_run), (500, Some(2_000.0)));
        assert!((exit.cpu_pct - 0.05).abs() < 1e-12);
        assert_eq!((b.programs[2].runs, b.programs[2].run_time_ns), (10, 2_000));
        assert_eq!(b.programs[3].ns_per_run, None);
        assert_eq!((b.runs, b.run_time_ns), (1_510, 1_502_000));
        assert!((b.runs_per_s - 755.0).abs() < 1e-9);
        assert!((b.cpu_pct - 1_502_000.0 / 2e9 * 100.0).abs() < 1e-12);
        assert!((b.ns_per_run.unwrap() - 1_502_000.0 / 1_510.0).abs() < 1e-9);

        // Same instant twice: no rates, no division by zero.
        let z = bpf_interval(&cur, &cur);
        assert_eq!((z.runs, z.runs_per_s, z.cpu_pct), (0, 0.0, 0.0));
    }

    #[test]
    fn reading_a_non_bpf_fd_fails() {
        let f = std::fs::File::open("/proc/self/stat").unwrap();
        use std::os::fd::AsFd;
        assert!(read_prog_counters(f.as_fd()).is_err());
    }

    #[test]
    fn unavailable_stats_are_reported_not_fatal() {
        let mut s = BpfStats::disabled("replay");
        assert!(s.sample::<&str>(&[]).is_none());
        let mut ov = Overhead::new(s);
        let snap = ov.end_interval::<&str>(
            &[],
            RingCounters {
                events: 10,
                lost: 0,
            },
        );
        assert!(!snap.bpf_stats_available);
        assert_eq!(snap.bpf_stats_error.as_deref(), Some("replay"));
        assert_eq!(snap.bpf_cpu_pct, None);
        assert_eq!(snap.ring_events, 10);

        // Whatever this host allows, enabling never fails the session.
        let mut live = BpfStats::enable(StatsMode::Full);
        assert_eq!(live.available(), live.unavailable_reason().is_none());
        if live.available() {
            let b = live.sample::<&str>(&[]).unwrap();
            assert_eq!((b.runs, b.programs.len()), (0, 0));
        }
    }

    #[test]
    fn sampled_stats_report_only_after_a_window_and_scale_runs_to_the_interval() {
        let mut s = BpfStats::enable(StatsMode::Sampled);
        if !s.available() || s.always_on {
            return; // not root, or the sysctl keeps statistics on: nothing sampled here
        }
        // No window open: nothing measured, statistics off.
        assert!(s.sample::<&str>(&[]).is_none());
        assert!(s.enabled.is_none());
        s.open_window::<&str>(&[]);
        assert!(s.enabled.is_some(), "statistics on during the window");
        let b = s.sample::<&str>(&[]).unwrap();
        assert_eq!(b.runs, 0);
        assert!(s.enabled.is_none(), "and off after it");
        assert_eq!(scale(10, 1_000, 100), 100);
        assert_eq!(scale(10, 1_000, 1_000), 10);
        assert_eq!(scale(10, 1_000, 0), 10);
    }

    /// utime + stime ticks of this process, parsed independently of `procfs`.
    fn own_cpu_ticks() -> u64 {
        let stat = std::fs::read_to_string("/proc/self/stat").unwrap();
        let fields: Vec<&str> = stat.rsplit_once(") ").unwrap().1.split(' ').collect();
        // fields[0] is field 3 (state); utime and stime are fields 14 and 15.
        fields[11].parse::<u64>().unwrap() + fields[12].parse::<u64>().unwrap()
    }

    fn own_rss_bytes() -> u64 {
        let statm = std::fs::read_to_string("/proc/self/statm").unwrap();
        let pages: u64 = statm.split(' ').nth(1).unwrap().parse().unwrap();
        // SAFETY: sysconf has no preconditions.
        pages * unsafe { libc::sysconf(libc::_SC_PAGESIZE) } as u64
    }

    #[test]
    fn user_space_part_matches_proc_self() {
        let _serial = crate::aggregate::cpu_test_serial();
        // SAFETY: sysconf has no preconditions.
        let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64;
        let mut ov = Overhead::new(BpfStats::disabled("test"));
        ov.end_interval::<&str>(&[], RingCounters::default());
        let (t0, ticks0) = (Instant::now(), own_cpu_ticks());
        crate::aggregate::burn_cpu(Duration::from_millis(300));
        let (ticks1, t1) = (own_cpu_ticks(), Instant::now());
        let snap = ov.end_interval::<&str>(
            &[],
            RingCounters {
                events: 3_000,
                lost: 30,
            },
        );
        let expected = (ticks1 - ticks0) as f64 / hz / (t1 - t0).as_secs_f64() * 100.0;
        let got = snap.user_cpu_pct.expect("measured");
        // One tick at each end of a 300 ms window is ~7 points.
        assert!(
            (got - expected).abs() < 15.0,
            "overhead says {got}%, /proc/self/stat says {expected}%"
        );
        // 300 ms of CPU burnt in the window (less a tick at each end): never nothing.
        assert!(
            ticks1 - ticks0 >= 300 * hz as u64 / 1000 - 2,
            "{ticks0} -> {ticks1}"
        );
        assert!(got > 0.0, "{got}%");
        assert_eq!(snap.ebtop_cpu_pct, Some(got));
        let rss = snap.rss_bytes.unwrap() as f64;
        let independent = own_rss_bytes() as f64;
        assert!(
            (rss / independent - 1.0).abs() < 0.1,
            "{rss} vs {independent}"
        );
        let secs = snap.period_ns as f64 / 1e9;
        assert!((snap.ring_events_per_s - 3_000.0 / secs).abs() < 1e-6);
        assert_eq!(snap.ring_lost, 30);
    }
}
