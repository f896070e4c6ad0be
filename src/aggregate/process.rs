//! Per-process view of the processes that did network I/O: CPU and memory (from /proc, like
//! top) next to their L7 calls, errors and bytes.
//!
//! CPU % is measured between two /proc readings over the real time between them (100% = one
//! core busy). A process's first reading is taken when it is first seen, so its first interval
//! covers "first seen → end of interval". Counter rates use the interval length the caller
//! passes. A process that exited (its kernel exit record, or else its /proc entry gone) is
//! reported once more with `exited: true` and its last CPU and memory numbers, then dropped.

use rustc_hash::{FxHashMap as HashMap, FxHashSet as HashSet};

use super::procfs::{cpu_pct, ProcSample};
use crate::call::{Call, Side};
use crate::protocols::Outcome;

pub const DEFAULT_MAX_PROCESSES: usize = 4096;
/// Distinct connections remembered per process per interval; past it the count saturates.
const MAX_CONNS_PER_INTERVAL: usize = 4096;
const MAX_COMM_LEN: usize = 64;

/// A process name's bytes, zero-padded to 16 (the kernel's names fit): what `entry` compares
/// per record and call, as two words, before it looks at the name itself (a string compare
/// and, for a record, its UTF-8 check there were a tenth of the applying thread's time).
type CommKey = [u8; 16];

fn comm_key(name: &[u8]) -> Option<CommKey> {
    (name.len() <= 16).then(|| {
        let mut key = [0; 16];
        key[..name.len()].copy_from_slice(name);
        key
    })
}

/// A kernel process name (NUL-padded, 16 bytes) as text ("?" if it is not UTF-8).
fn kernel_comm(raw: &[u8; 16]) -> &str {
    let n = raw.iter().position(|&c| c == 0).unwrap_or(16);
    std::str::from_utf8(&raw[..n]).unwrap_or("?")
}

#[derive(Debug, Clone, Copy, Default)]
struct Activity {
    calls: u64,
    server_errors: u64,
    client_errors: u64,
    unknown_outcomes: u64,
    calls_after_loss: u64,
    bytes_in: u64,
    bytes_out: u64,
    socket_bytes_in: u64,
    socket_bytes_out: u64,
    traced_syscalls: u64,
    tls_probe_hits: u64,
    tls_probe_stepped_hits: u64,
    /// The protocols of its calls (None: no call).
    protocols: Option<crate::protocols::ProtoSet>,
}

struct Entry {
    comm: String,
    /// The key of the name `comm` was last given as (None: a longer name, compared in full).
    comm_key: Option<CommKey>,
    interval: Activity,
    /// Connections that completed a call this interval.
    conns: HashSet<u64>,
    open_connections: Option<u64>,
    last_sample: Option<ProcSample>,
    cpu_pct: Option<f64>,
    rss_bytes: Option<u64>,
    /// It exited (exit record, or its /proc entry went away); reported once more, then dropped.
    exited: bool,
    /// Reported with `exited: true`: dropped at the next interval's end.
    exit_reported: bool,
    /// Interval number of the last activity, to evict the stalest when full.
    last_active: u64,
}

/// One process over one interval.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct ProcessSnapshot {
    pub pid: u32,
    pub comm: String,
    pub period_ns: u64,
    /// Gone from /proc; CPU and memory are its last known numbers.
    pub exited: bool,
    /// % of one core (user + system), null if not measured (replay, first reading failed).
    pub cpu_pct: Option<f64>,
    pub rss_bytes: Option<u64>,
    pub calls: u64,
    pub calls_per_s: f64,
    /// As an endpoint's: its calls are of a sample of connections; absent when not sampled.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub sampled: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub calls_per_s_estimated: Option<f64>,
    /// Server errors (HTTP 5xx, protocol error replies).
    pub server_errors: u64,
    /// Client errors (HTTP 4xx).
    pub client_errors: u64,
    /// Calls whose outcome could not be known (never counted as ok).
    pub unknown_outcomes: u64,
    /// Some of its calls came over a connection that had just lost bytes: calls of the
    /// process may be missing from the numbers.
    pub conn_loss: bool,
    /// L7 message bytes from calls: for a client its requests are out, responses in; for a
    /// server the reverse.
    pub bytes_in: u64,
    pub bytes_out: u64,
    pub bytes_in_per_s: f64,
    pub bytes_out_per_s: f64,
    /// All socket bytes the pipeline reported through `observe_bytes` (any protocol).
    pub socket_bytes_in: u64,
    pub socket_bytes_out: u64,
    pub socket_bytes_in_per_s: f64,
    pub socket_bytes_out_per_s: f64,
    /// Socket syscalls of the process ebtop traced and delivered (data moved on connections
    /// of a recognised protocol): what the process costs ebtop.
    pub traced_syscalls: u64,
    pub traced_syscalls_per_s: f64,
    /// Hits of ebtop's TLS uprobes in the process (an entry and a return per SSL_write or
    /// SSL_read call): each a breakpoint trap the process pays for.
    pub tls_probe_hits: u64,
    pub tls_probe_hits_per_s: f64,
    /// What those hits cost the process (ns), estimated: hits × the cost of one hit measured
    /// at start; null without TLS probes or that measurement.
    pub tls_probe_est_ns: Option<u64>,
    /// Distinct connections that completed at least one call in the interval.
    pub connections_active: u64,
    /// Open connections, if the pipeline supplies them (`set_open_connections`).
    pub open_connections: Option<u64>,
    /// The protocols of its calls in the period (the terminal UI's `proto:` filter; not in
    /// JSON, whose `endpoint` lines say it per endpoint).
    #[serde(skip)]
    pub protocols: crate::protocols::ProtoSet,
}

pub struct ProcessStats {
    procs: HashMap<u32, Entry>,
    max_processes: usize,
    /// Live: read /proc. Replay: the processes are on another host (or gone), so don't.
    read_proc: bool,
    /// Exits come from the kernel's exit records (live with the process probe, and its
    /// replay), not from /proc entries going away: so a replay marks the same intervals.
    exit_records: bool,
    evictions: u64,
    interval_no: u64,
    /// What one TLS probe hit costs (ns), when measured: at an emulated site or a return,
    /// and at a single-stepped site.
    tls_hit_ns: Option<u64>,
    tls_stepped_hit_ns: Option<u64>,
}

impl ProcessStats {
    pub fn new(max_processes: usize, read_proc: bool) -> ProcessStats {
        ProcessStats {
            procs: HashMap::default(),
            max_processes: max_processes.max(1),
            read_proc,
            exit_records: false,
            evictions: 0,
            interval_no: 0,
            tls_hit_ns: None,
            tls_stepped_hit_ns: None,
        }
    }

    pub fn len(&self) -> usize {
        self.procs.len()
    }

    /// Exits are told by [`ProcessStats::exited`] from now on, not by /proc.
    pub fn use_exit_records(&mut self) {
        self.exit_records = true;
    }

    /// The process exited (its exit record): reported as exited at the end of this interval,
    /// then dropped.
    pub fn exited(&mut self, pid: u32) {
        if let Some(e) = self.procs.get_mut(&pid) {
            e.exited = true;
        }
    }

    pub fn is_empty(&self) -> bool {
        self.procs.is_empty()
    }

    /// Processes dropped to make room for new ones since the start.
    pub fn evictions(&self) -> u64 {
        self.evictions
    }

    pub fn observe_call(&mut self, call: &Call) {
        let e = self.entry(call.pid, comm_key(call.comm.as_bytes()), || &call.comm);
        let a = &mut e.interval;
        a.calls += 1;
        a.calls_after_loss += u64::from(call.after_loss);
        a.protocols
            .get_or_insert_with(crate::protocols::ProtoSet::empty)
            .insert(call.l7.proto);
        match call.l7.outcome {
            Outcome::Ok => {}
            Outcome::ClientError => a.client_errors += 1,
            Outcome::ServerError => a.server_errors += 1,
            Outcome::Unknown => a.unknown_outcomes += 1,
        }
        let (out, inn) = match call.side {
            Side::Client => (call.l7.req.bytes, call.l7.resp.bytes),
            Side::Server => (call.l7.resp.bytes, call.l7.req.bytes),
        };
        a.bytes_out = a.bytes_out.saturating_add(out);
        a.bytes_in = a.bytes_in.saturating_add(inn);
        if e.conns.len() < MAX_CONNS_PER_INTERVAL {
            e.conns.insert(call.sock_id);
        }
    }

    /// The measured cost of one TLS probe hit (at an emulated site or a return, and at a
    /// single-stepped site), for the estimates.
    pub fn set_tls_hit_ns(&mut self, ns: Option<u64>, stepped_ns: Option<u64>) {
        self.tls_hit_ns = ns;
        self.tls_stepped_hit_ns = stepped_ns;
    }

    /// TLS probe hits in a process this interval (`stepped` of them at single-stepped sites);
    /// counted for processes already listed (those that moved data on a socket), others are
    /// not shown.
    pub fn observe_tls_hits(&mut self, pid: u32, n: u64, stepped: u64) {
        if let Some(e) = self.procs.get_mut(&pid) {
            e.interval.tls_probe_hits = e.interval.tls_probe_hits.wrapping_add(n);
            e.interval.tls_probe_stepped_hits =
                e.interval.tls_probe_stepped_hits.wrapping_add(stepped);
        }
    }

    /// What a process's hits cost (ns): each at its kind's measured cost (`ns`: emulated,
    /// stepped; a stepped hit at the emulated cost if only that is known).
    fn tls_est_ns(ns: (Option<u64>, Option<u64>), hits: u64, stepped: u64) -> Option<u64> {
        let (ns, stepped_ns) = ns;
        let ns = ns?;
        let stepped_ns = stepped_ns.unwrap_or(ns);
        Some(
            ns.saturating_mul(hits.saturating_sub(stepped))
                .saturating_add(stepped_ns.saturating_mul(stepped)),
        )
    }

    /// One traced syscall of `pid` that moved `n` socket bytes (`dir_out`: sent).
    /// `comm`: the kernel's name of the process (NUL-padded).
    pub fn observe_bytes(&mut self, pid: u32, comm: &[u8; 16], dir_out: bool, n: u64) {
        self.observe_bytes_of(pid, Some(*comm), kernel_comm(comm), dir_out, n)
    }

    /// [`ProcessStats::observe_bytes`] of a process named `name` (not its thread's name).
    pub fn observe_bytes_named(&mut self, pid: u32, name: &str, dir_out: bool, n: u64) {
        self.observe_bytes_of(pid, comm_key(name.as_bytes()), name, dir_out, n)
    }

    fn observe_bytes_of(
        &mut self,
        pid: u32,
        key: Option<CommKey>,
        name: &str,
        dir_out: bool,
        n: u64,
    ) {
        let a = &mut self.entry(pid, key, || name).interval;
        a.traced_syscalls += 1;
        if dir_out {
            a.socket_bytes_out = a.socket_bytes_out.saturating_add(n);
        } else {
            a.socket_bytes_in = a.socket_bytes_in.saturating_add(n);
        }
    }

    /// Open connections per process, as the connection tracker knows them (a process not in
    /// `open` has none). Processes not in the table are ignored.
    pub fn set_open_connections(&mut self, open: &HashMap<u32, u64>) {
        for (pid, e) in self.procs.iter_mut() {
            e.open_connections = Some(open.get(pid).copied().unwrap_or(0));
        }
    }

    /// `pid`'s entry, named `name()` unless `key` says it already is.
    fn entry<'n>(
        &mut self,
        pid: u32,
        key: Option<CommKey>,
        name: impl FnOnce() -> &'n str,
    ) -> &mut Entry {
        // One lookup per record or call below the cap (this runs for every one of them on
        // the thread that applies them all); at the cap a new pid evicts another first.
        if self.procs.len() >= self.max_processes && !self.procs.contains_key(&pid) {
            self.evict_one();
        }
        let (read_proc, interval_no) = (self.read_proc, self.interval_no);
        let e = self.procs.entry(pid).or_insert_with(|| {
            let sample = if read_proc {
                ProcSample::read(pid).ok()
            } else {
                None
            };
            Entry {
                comm: String::new(),
                comm_key: None,
                interval: Activity::default(),
                conns: HashSet::default(),
                open_connections: None,
                last_sample: sample,
                cpu_pct: None,
                rss_bytes: sample.map(|s| s.rss_bytes),
                exited: false,
                exit_reported: false,
                last_active: interval_no,
            }
        });
        if key.is_none() || e.comm_key != key {
            let name = name();
            if e.comm != name {
                // New process or exec'd into another program.
                e.comm = name.chars().take(MAX_COMM_LEN).collect();
            }
            e.comm_key = key;
        }
        e.last_active = self.interval_no;
        e
    }

    /// Drops an exited process if there is one, else the one idle the longest.
    fn evict_one(&mut self) {
        let victim = self
            .procs
            .iter()
            .min_by_key(|(pid, e)| (!e.exited, e.last_active, **pid))
            .map(|(pid, _)| *pid);
        if let Some(pid) = victim {
            self.procs.remove(&pid);
            self.evictions += 1;
        }
    }

    /// Ends an interval of `interval_ns`: every tracked process (by pid), then counters reset.
    pub fn end_interval(&mut self, interval_ns: u64) -> Vec<ProcessSnapshot> {
        self.interval_no += 1;
        // Reported as exited last time: gone now.
        self.procs.retain(|_, e| !e.exit_reported);
        let mut out = Vec::with_capacity(self.procs.len());
        let hit_ns = (self.tls_hit_ns, self.tls_stepped_hit_ns);
        for (&pid, e) in &mut self.procs {
            if self.read_proc {
                match ProcSample::read(pid) {
                    Ok(now) => {
                        e.cpu_pct = match &e.last_sample {
                            Some(prev) if now.same_process(prev) => cpu_pct(prev, &now),
                            // A reused pid (or no earlier reading): no baseline yet.
                            _ => None,
                        };
                        e.rss_bytes = Some(now.rss_bytes);
                        e.last_sample = Some(now);
                    }
                    Err(_) => e.exited |= !self.exit_records,
                }
            }
            let a = e.interval;
            let per_s = |n: u64| {
                if interval_ns == 0 {
                    0.0
                } else {
                    n as f64 * 1e9 / interval_ns as f64
                }
            };
            out.push(ProcessSnapshot {
                pid,
                comm: e.comm.clone(),
                period_ns: interval_ns,
                exited: e.exited,
                cpu_pct: e.cpu_pct,
                rss_bytes: e.rss_bytes,
                calls: a.calls,
                calls_per_s: per_s(a.calls),
                sampled: false,
                calls_per_s_estimated: None,
                server_errors: a.server_errors,
                client_errors: a.client_errors,
                unknown_outcomes: a.unknown_outcomes,
                conn_loss: a.calls_after_loss > 0,
                bytes_in: a.bytes_in,
                bytes_out: a.bytes_out,
                bytes_in_per_s: per_s(a.bytes_in),
                bytes_out_per_s: per_s(a.bytes_out),
                socket_bytes_in: a.socket_bytes_in,
                socket_bytes_out: a.socket_bytes_out,
                socket_bytes_in_per_s: per_s(a.socket_bytes_in),
                socket_bytes_out_per_s: per_s(a.socket_bytes_out),
                traced_syscalls: a.traced_syscalls,
                traced_syscalls_per_s: per_s(a.traced_syscalls),
                tls_probe_hits: a.tls_probe_hits,
                tls_probe_hits_per_s: per_s(a.tls_probe_hits),
                tls_probe_est_ns: Self::tls_est_ns(
                    hit_ns,
                    a.tls_probe_hits,
                    a.tls_probe_stepped_hits,
                ),
                connections_active: e.conns.len() as u64,
                open_connections: e.open_connections,
                protocols: a
                    .protocols
                    .unwrap_or_else(crate::protocols::ProtoSet::empty),
            });
            e.interval = Activity::default();
            e.conns.clear();
            e.exit_reported = e.exited;
        }
        out.sort_by_key(|s| s.pid);
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::aggregate::burn_cpu;
    use crate::aggregate::endpoints::tests::call;
    use std::time::Duration;

    fn name16(name: &str) -> [u8; 16] {
        comm_key(name.as_bytes()).expect("a kernel-sized name")
    }

    #[test]
    fn a_process_takes_the_name_of_its_latest_record_or_call() {
        let mut ps = ProcessStats::new(16, false);
        let names = |ps: &mut ProcessStats| {
            let snap = ps.end_interval(1_000_000_000);
            snap.iter().map(|s| s.comm.clone()).collect::<Vec<_>>()
        };
        ps.observe_bytes(1, &name16("bash"), true, 1);
        ps.observe_bytes(1, &name16("bash"), true, 1);
        assert_eq!(names(&mut ps), ["bash"]);
        // exec: the next record names the new program, a call the one after it.
        ps.observe_bytes(1, &name16("nginx"), true, 1);
        assert_eq!(names(&mut ps), ["nginx"]);
        ps.observe_call(&call("nginx: worker", 1, "GET", "/", 1_000));
        ps.observe_bytes(1, &name16("nginx: worker"), false, 1);
        assert_eq!(names(&mut ps), ["nginx: worker"]);
        // A name longer than the kernel's is compared in full.
        let long = "a-name-longer-than-sixteen-bytes";
        ps.observe_call(&call(long, 1, "GET", "/", 1_000));
        assert_eq!(names(&mut ps), [long]);
        ps.observe_call(&call("short", 1, "GET", "/", 1_000));
        assert_eq!(names(&mut ps), ["short"]);
        // A kernel name that is not UTF-8 shows as "?".
        let mut raw = [0u8; 16];
        raw[..2].copy_from_slice(&[0xff, 0xfe]);
        ps.observe_bytes(1, &raw, true, 1);
        ps.observe_bytes(1, &raw, true, 1);
        assert_eq!(names(&mut ps), ["?"]);
    }

    #[test]
    fn measures_own_cpu_and_memory() {
        let _serial = crate::aggregate::cpu_test_serial();
        let me = std::process::id();
        let t0 = std::time::Instant::now();
        let mut ps = ProcessStats::new(16, true);
        let mut c = call("tester", me, "GET", "/x", 1_000_000);
        c.sock_id = 7;
        ps.observe_call(&c);
        ps.observe_call(&c);
        ps.observe_bytes(me, &name16("tester"), true, 500);
        ps.observe_bytes(me, &name16("tester"), false, 4000);
        burn_cpu(Duration::from_millis(250));
        let snap = ps.end_interval(250_000_000);
        let wall = t0.elapsed().as_secs_f64();
        let s = snap.iter().find(|s| s.pid == me).expect("own process");
        let cpu = s.cpu_pct.expect("measured");
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get()) as f64;
        // The process used at least the 250 ms of CPU burnt between its two samples (less a
        // tick at each end of /proc's count), and those samples lie within `wall`: however
        // loaded the host, the share is at least that over `wall`.
        // SAFETY: sysconf has no preconditions.
        let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64;
        let floor = 100.0 * (0.25 - 2.0 / hz) / wall;
        assert!(
            cpu >= floor && cpu <= 100.0 * cores + 20.0,
            "cpu {cpu}% (at least {floor}% over {wall} s)"
        );
        assert!(s.rss_bytes.unwrap() > 0);
        assert!(!s.exited);
        assert_eq!((s.calls, s.connections_active), (2, 1));
        // A client sends requests (100 bytes each) and receives responses (1000 each).
        assert_eq!((s.bytes_out, s.bytes_in), (200, 2000));
        assert_eq!((s.socket_bytes_out, s.socket_bytes_in), (500, 4000));
        assert!((s.calls_per_s - 8.0).abs() < 1e-9);
        // Counters are per interval; the process stays listed.
        let snap = ps.end_interval(250_000_000);
        assert_eq!(snap[0].calls, 0);
    }

    #[test]
    fn exited_process_is_reported_once_then_dropped() {
        let mut child = std::process::Command::new("sleep")
            .arg("30")
            .spawn()
            .expect("spawn sleep");
        let pid = child.id();
        let mut ps = ProcessStats::new(16, true);
        ps.observe_bytes(pid, &name16("sleep"), false, 1);
        ps.set_open_connections(&[(pid, 3)].into_iter().collect());
        let alive = ps.end_interval(1_000_000_000);
        assert!(!alive[0].exited);
        let rss = alive[0].rss_bytes.expect("read from /proc");
        assert_eq!(alive[0].open_connections, Some(3));
        assert_eq!(
            (alive[0].traced_syscalls, alive[0].traced_syscalls_per_s),
            (1, 1.0)
        );
        child.kill().unwrap();
        child.wait().unwrap();
        let gone = ps.end_interval(1_000_000_000);
        assert_eq!(gone.len(), 1);
        assert!(gone[0].exited);
        assert_eq!(gone[0].rss_bytes, Some(rss));
        assert!(ps.end_interval(1_000_000_000).is_empty());
        assert!(ps.is_empty());
    }

    #[test]
    fn bounded_with_stalest_evicted_and_server_bytes_reversed() {
        let mut ps = ProcessStats::new(2, false);
        ps.observe_bytes(1, &name16("a"), true, 1);
        ps.observe_bytes(2, &name16("b"), true, 1);
        ps.end_interval(1_000_000_000);
        ps.observe_bytes(2, &name16("b"), true, 1); // 1 is now the stalest
        let mut server = call("c", 3, "GET", "/", 1_000_000);
        server.side = Side::Server;
        ps.observe_call(&server);
        assert_eq!((ps.len(), ps.evictions()), (2, 1));
        let snap = ps.end_interval(1_000_000_000);
        let pids: Vec<u32> = snap.iter().map(|s| s.pid).collect();
        assert_eq!(pids, [2, 3]);
        // Replay: nothing read from /proc.
        assert_eq!((snap[1].cpu_pct, snap[1].rss_bytes), (None, None));
        // A server receives the request and sends the response.
        assert_eq!((snap[1].bytes_in, snap[1].bytes_out), (100, 1000));
    }
}
