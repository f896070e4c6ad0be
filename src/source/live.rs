//! Live capture: loads the socket-data BPF programs (the socket layer, or the syscall
//! tracepoints: `--hooks`), the flow table and the process probe, and feeds ring-buffer records
//! to the pipeline until stopped.

use std::cell::RefCell;
use std::io;
use std::mem::MaybeUninit;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anyhow::{anyhow, Context, Result};
use libbpf_rs::skel::{OpenSkel, Skel, SkelBuilder};
use libbpf_rs::RingBufferBuilder;
use std::os::fd::{AsFd, AsRawFd};

use crate::aggregate::{BpfStats, Overhead, OverheadSnapshot, RingCounters};
use crate::bpf::counter;
use crate::bpf::sockcap::{SockcapSkel, SockcapSkelBuilder};
use crate::bpf::sockdata::{SockdataSkel, SockdataSkelBuilder};
use crate::cli::Hooks;
use crate::pipeline::Pipeline;
use crate::process_events::{ProcEvent, ProcEventKind};
use crate::session::{Filters, KernelCounters, SessionMeta};
use crate::sink::Sink;
use crate::source::process_probe::ProcessProbe;
use crate::source::ring_feed::RingFeed;
use crate::tls::TlsProbes;

/// Records consumed per loop pass before ticks, signals and the deadline are checked again.
const CONSUME_BATCH: usize = 4096;

/// How long the reader sleeps between looks at the ring while records are coming (the ring
/// wakes it sooner once `wakeup_bytes` wait). The reader runs at the capture's priority: at a
/// look every 100 ms, the records of 100 ms (~1.2 ms of work at 10,000 requests/s on the
/// development VM) held a CPU from the traced services in one stretch, which tripled their
/// p99 response time. Every 10 ms cut the p99 a little more than 25 ms but cost the terminal
/// UI 13% more CPU per span (each look starts on cold caches); 25 ms cost nothing measurable.
pub(crate) const BUSY_DRAIN_EVERY: Duration = Duration::from_millis(25);

/// … and while none came at the last look (an idle host wakes ebtop 10 times a second).
pub(crate) const IDLE_DRAIN_EVERY: Duration = Duration::from_millis(100);

/// The sys_exit_* tracepoints each shared exit program handles (see sockdata.bpf.c).
const EXIT_ATTACHMENTS: &[(&str, &[&str])] = &[
    ("exit_buf", &["write", "sendto"]),
    ("exit_iov", &["writev"]),
    ("exit_msg", &["sendmsg"]),
    ("exit_mmsg", &["sendmmsg"]),
    ("exit_none", &["sendfile64"]),
];

#[derive(Debug, Clone)]
pub struct LiveConfig {
    pub snaplen: u32,
    /// `--ringbuf-mb`: all event rings together (None: the default, `ring_layout`).
    pub ringbuf_bytes: Option<u32>,
    pub capture_all: bool,
    pub filters: Filters,
    pub verbose: bool,
    /// Capacity of the kernel flow table (`--max-flows`).
    pub max_flows: u32,
    /// Where socket data is captured (`--hooks`).
    pub hooks: Hooks,
    /// How ebtop's BPF run time is measured (`--bpf-stats`).
    pub bpf_stats: crate::aggregate::StatsMode,
    /// Load the flow table (false when no output shows flows: `--json --only` without them).
    pub flow_table: bool,
    /// `--cgroup`/`--container`, resolved: compared in the kernel.
    pub cgroups: Vec<crate::cgroups::CgroupFilter>,
    /// Probe the TLS libraries for plaintext (`--tls`; never without `capture`).
    pub tls: bool,
    /// Attach the payload capture (false when no output uses calls: `--json --only` with
    /// flow or overhead lines alone). Its object is loaded either way — the session's ring
    /// and counters — but no program of it runs; nor are process events loaded.
    pub capture: bool,
    /// Connection-tracking threads (`--threads`): with more than one, each reads its own
    /// event ring (`ring_layout`).
    pub tracking_threads: usize,
}

/// Event rings the capture objects have (`EBTOP_MAX_SHARDS` in src/bpf/capture.h): at most
/// this many tracking threads read their own ring.
pub const MAX_SHARDS: usize = 16;

/// The event rings of a skeleton's maps (or their open counterparts), shard 0 first.
macro_rules! event_rings {
    (mut $maps:expr) => {{
        let m = &mut $maps;
        [
            &mut m.events,
            &mut m.events_1,
            &mut m.events_2,
            &mut m.events_3,
            &mut m.events_4,
            &mut m.events_5,
            &mut m.events_6,
            &mut m.events_7,
            &mut m.events_8,
            &mut m.events_9,
            &mut m.events_10,
            &mut m.events_11,
            &mut m.events_12,
            &mut m.events_13,
            &mut m.events_14,
            &mut m.events_15,
        ]
    }};
    ($maps:expr) => {{
        let m = &$maps;
        [
            &m.events,
            &m.events_1,
            &m.events_2,
            &m.events_3,
            &m.events_4,
            &m.events_5,
            &m.events_6,
            &m.events_7,
            &m.events_8,
            &m.events_9,
            &m.events_10,
            &m.events_11,
            &m.events_12,
            &m.events_13,
            &m.events_14,
            &m.events_15,
        ]
    }};
}

impl LiveConfig {
    /// The event rings in use and each one's size (`ring_layout`).
    pub fn ring_layout(&self) -> (usize, u32) {
        ring_layout(self.capture, self.tracking_threads, self.ringbuf_bytes)
    }
}

/// The event rings in use and each one's size: one ring of `--ringbuf-mb` (16 MiB by default)
/// with one tracking thread (or without the capture); with more, one per thread (up to
/// `MAX_SHARDS`), sharing `--ringbuf-mb` (each a power of two, at least 256 KiB) or, by
/// default, 8 MiB each: 2 MiB each lost 0.06% of the records of ~1M spans/s over 60 s on 16
/// cores, 8 MiB nothing (docs/performance.md, "Many cores").
fn ring_layout(capture: bool, threads: usize, ringbuf_bytes: Option<u32>) -> (usize, u32) {
    const DEFAULT_ONE: u32 = 16 << 20;
    const DEFAULT_EACH: u32 = 8 << 20;
    let shards = if capture {
        threads.clamp(1, MAX_SHARDS)
    } else {
        1
    };
    match (shards, ringbuf_bytes) {
        (1, bytes) => (1, bytes.unwrap_or(DEFAULT_ONE)),
        (n, None) => (n, DEFAULT_EACH),
        (n, Some(bytes)) => {
            let each = (bytes / n as u32).max(256 * 1024);
            (n, 1 << (31 - each.leading_zeros()))
        }
    }
}

/// The loaded capture programs: the socket layer or the syscall tracepoints. Both write the
/// same records into maps of the same names, with the same settings (src/bpf/capture.h).
enum Capture<'obj> {
    Socket(Box<SockcapSkel<'obj>>),
    Syscalls(Box<SockdataSkel<'obj>>),
}

impl Capture<'_> {
    fn object(&self) -> &libbpf_rs::Object {
        match self {
            Capture::Socket(s) => s.object(),
            Capture::Syscalls(s) => s.object(),
        }
    }

    fn events(&self) -> &libbpf_rs::Map<'_> {
        self.event_rings()[0]
    }

    /// The event rings, one per shard (`events` is shard 0; src/bpf/capture.h).
    fn event_rings(&self) -> [&libbpf_rs::Map<'_>; MAX_SHARDS] {
        match self {
            Capture::Socket(s) => event_rings!(s.maps),
            Capture::Syscalls(s) => event_rings!(s.maps),
        }
    }

    fn tls_hits(&self) -> &libbpf_rs::Map<'_> {
        match self {
            Capture::Socket(s) => &s.maps.tls_hits,
            Capture::Syscalls(s) => &s.maps.tls_hits,
        }
    }

    /// Once a Go program is probed, the capture programs look up goroutines' TLS calls too.
    fn enable_go_tls(&self) {
        use libbpf_rs::MapCore;
        let map = match self {
            Capture::Socket(s) => &s.maps.tls_go_probed,
            Capture::Syscalls(s) => &s.maps.tls_go_probed,
        };
        if let Err(e) = map.update(
            &0u32.to_ne_bytes(),
            &1u32.to_ne_bytes(),
            libbpf_rs::MapFlags::ANY,
        ) {
            crate::diag!("ebtop: warning: Go TLS calls will not be placed on their sockets: {e}");
        }
    }

    fn counters(&self) -> &libbpf_rs::Map<'_> {
        match self {
            Capture::Socket(s) => &s.maps.counters,
            Capture::Syscalls(s) => &s.maps.counters,
        }
    }

    /// The flow table's maps, when the capture program does the flow table's per-send work.
    fn flow_maps(&self) -> Option<crate::source::flow_table::SharedFlowMaps<'_>> {
        match self {
            Capture::Socket(s) => Some(crate::source::flow_table::SharedFlowMaps {
                flows: s.maps.flows.as_fd(),
                udp_flows: s.maps.udp_flows.as_fd(),
                udp_peer: s.maps.udp_peer.as_fd(),
                counters: s.maps.flow_counters.as_fd(),
            }),
            Capture::Syscalls(_) => None,
        }
    }

    /// As the `meta` line names it.
    fn hooks(&self) -> &'static str {
        match self {
            Capture::Socket(_) => "socket",
            Capture::Syscalls(_) => "syscalls",
        }
    }
}

/// How many bytes a CPU puts in a ring between two looks at how full it is (`query_every_bytes`
/// in src/bpf/capture.h): all CPUs together leave at most half of `wakeup_bytes` unnoticed.
fn query_every_bytes(wakeup_bytes: u64, cpus: usize) -> u32 {
    (wakeup_bytes / (2 * cpus.max(1) as u64)).clamp(256, 64 * 1024) as u32
}

/// The settings both capture objects take before load (same rodata and map names).
macro_rules! configure_capture {
    ($open:expr, $cfg:expr) => {{
        let open = &mut $open;
        let cfg: &LiveConfig = $cfg;
        let (shards, ring_bytes) = cfg.ring_layout();
        let cpus = libbpf_rs::num_possible_cpus().context("reading the possible CPUs failed")?;
        let ro = open
            .maps
            .rodata_data
            .as_deref_mut()
            .ok_or_else(|| anyhow!("BPF object has no .rodata section"))?;
        ro.self_tgid = std::process::id();
        if let Some(pids) = &cfg.filters.pid {
            crate::bpf::set_list_filter(&mut ro.filter_tgids, &mut ro.filter_tgid_count, pids);
        }
        if let Some(ports) = &cfg.filters.port {
            crate::bpf::set_list_filter(&mut ro.filter_ports, &mut ro.filter_port_count, ports);
        }
        let protos = cfg.filters.protocols();
        if !protos.is_all() {
            // A protocol the kernel does not recognise is picked out in user space
            // (capture_all); a mask of 0 would mean "all", so an empty selection keeps a bit
            // no protocol uses.
            ro.proto_mask = protos.kernel_mask().max(1);
        }
        if let Some(comms) = &cfg.filters.comm {
            crate::bpf::set_comm_filters(&mut ro.filter_comms, &mut ro.filter_comm_count, comms);
        }
        crate::bpf::set_cgroup_filters(
            &mut ro.filter_cgroup_ids,
            &mut ro.filter_cgroup_levels,
            &mut ro.filter_cgroup_count,
            &cfg.cgroups,
        );
        ro.snaplen = cfg.snaplen;
        ro.capture_all = cfg.capture_all;
        ro.tls_capture = cfg.tls;
        ro.wakeup_bytes = (ring_bytes / 16) as u64;
        ro.query_every_bytes = query_every_bytes(ro.wakeup_bytes, cpus);
        ro.n_shards = shards as u32;
        // Without TLS the probes are not even loaded.
        if !cfg.tls {
            for mut prog in open.open_object_mut().progs_mut() {
                if crate::tls::is_tls_program(&prog.section().to_string_lossy()) {
                    prog.set_autoload(false);
                }
            }
        } else {
            crate::tls::prefer_multi_links(open.open_object_mut().progs_mut());
        }
        open.maps
            .scratch_buf
            .set_max_entries(cpus as u32)
            .context("sizing the scratch map failed")?;
        // SAFETY: sysconf takes no pointer.
        let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) }.max(4096) as u32;
        for (k, ring) in event_rings!(mut open.maps).into_iter().enumerate() {
            ring.set_max_entries(if k < shards { ring_bytes } else { page })
                .context("sizing the ring buffer failed")?;
        }
    }};
}

/// Loads and attaches the socket-layer capture (sockcap.bpf.c: tp_btf only).
fn load_socket_layer<'obj>(
    cfg: &LiveConfig,
    storage: &'obj mut MaybeUninit<libbpf_rs::OpenObject>,
) -> Result<(Capture<'obj>, Vec<libbpf_rs::Link>)> {
    let mut open = SockcapSkelBuilder::default()
        .open(storage)
        .context("opening the socket-layer BPF object failed")?;
    configure_capture!(open, cfg);
    // The flow table's per-send work runs in the capture program, on the flow table's maps
    // (handed to the flow collector after load): one program per send or receive, not two.
    open.maps
        .flows
        .set_max_entries(cfg.max_flows.max(1))
        .context("sizing the flow table failed")?;
    open.maps
        .rodata_data
        .as_deref_mut()
        .ok_or_else(|| anyhow!("BPF object has no .rodata section"))?
        .count_flows = cfg.flow_table && cfg.capture;
    #[cfg(feature = "bench-cuts")]
    if let Some(rodata) = open.maps.rodata_data.as_deref_mut() {
        rodata.bench_cut = super::bench_cuts::kernel_cut();
    }
    let mut skel = open.load().map_err(|e| {
        anyhow!(
            "loading the socket-layer programs failed: {e} (needs tp_btf sock_send_length, \
             Linux >= 6.3 with BTF; --hooks syscalls works on older kernels)"
        )
    })?;
    let mut links = Vec::new();
    for prog in skel.object_mut().progs_mut() {
        let name = prog.name().to_string_lossy().into_owned();
        let section = prog.section().to_string_lossy().into_owned();
        if crate::tls::is_tls_program(&section) || !cfg.capture {
            continue; // attached to the TLS libraries (src/tls/), or not at all
        }
        links.push(
            prog.attach()
                .map_err(|e| anyhow!("attaching probe {name} to {section} failed: {e}"))?,
        );
    }
    Ok((Capture::Socket(Box::new(skel)), links))
}

/// Loads and attaches the syscall-tracepoint capture (sockdata.bpf.c).
fn load_syscall_hooks<'obj>(
    cfg: &LiveConfig,
    storage: &'obj mut MaybeUninit<libbpf_rs::OpenObject>,
) -> Result<(Capture<'obj>, Vec<libbpf_rs::Link>)> {
    let mut open = SockdataSkelBuilder::default()
        .open(storage)
        .context("opening the BPF object failed")?;
    configure_capture!(open, cfg);
    let mut skel = open.load().map_err(|e| {
        anyhow!(
            "loading the BPF programs failed: {e} (a kernel ≥ 5.8 with BTF is needed; \
             run with --verbose for the verifier's log)"
        )
    })?;
    let mut links = Vec::new();
    for prog in skel.object_mut().progs_mut() {
        let name = prog.name().to_string_lossy().into_owned();
        let section = prog.section().to_string_lossy().into_owned();
        if crate::tls::is_tls_program(&section) || !cfg.capture {
            continue; // attached to the TLS libraries (src/tls/), or not at all
        }
        if let Some(tp) = section.strip_prefix("tracepoint/") {
            let link = prog
                .attach()
                .map_err(|e| anyhow!("attaching probe {name} to {tp} failed: {e}"))?;
            links.push(link);
            continue;
        }
        // Shared exit programs: attached to each syscall whose payload they understand.
        let exits = EXIT_ATTACHMENTS
            .iter()
            .find(|(prog_name, _)| *prog_name == name)
            .map(|(_, syscalls)| *syscalls)
            .ok_or_else(|| anyhow!("BPF program {name} has no attachment point"))?;
        for syscall in exits {
            let tp = format!("sys_exit_{syscall}");
            let link = prog
                .attach_tracepoint(libbpf_rs::TracepointCategory::Syscalls, &tp)
                .map_err(|e| anyhow!("attaching probe {name} to syscalls/{tp} failed: {e}"))?;
            links.push(link);
        }
    }
    Ok((Capture::Syscalls(Box::new(skel)), links))
}

/// Loads and attaches the capture programs `--hooks` asks for.
fn load_capture<'obj>(
    cfg: &LiveConfig,
    socket_storage: &'obj mut MaybeUninit<libbpf_rs::OpenObject>,
    syscall_storage: &'obj mut MaybeUninit<libbpf_rs::OpenObject>,
) -> Result<(Capture<'obj>, Vec<libbpf_rs::Link>)> {
    Ok(match cfg.hooks {
        Hooks::Socket => load_socket_layer(cfg, socket_storage)?,
        Hooks::Syscalls => load_syscall_hooks(cfg, syscall_storage)?,
        // Probing is loading: a kernel without the socket-layer tracepoints (< 6.3) or their
        // BTF refuses the programs, and the syscall hooks take over.
        Hooks::Auto => match load_socket_layer(cfg, socket_storage) {
            Ok(c) => c,
            Err(e) => {
                if cfg.verbose {
                    crate::diag!("ebtop: socket-layer capture unavailable ({e:#}): syscall hooks");
                }
                load_syscall_hooks(cfg, syscall_storage)?
            }
        },
    })
}

/// Why the capture loop ended.
#[derive(Debug, PartialEq, Eq)]
pub enum StopReason {
    Signal,
    Duration,
    /// The output went away (e.g. `| head`): not an error for the user.
    OutputClosed,
}

fn quiet_libbpf(verbose: bool) {
    if verbose {
        libbpf_rs::set_print(Some((libbpf_rs::PrintLevel::Info, |_lvl, msg: String| {
            use std::io::Write as _;
            let _ = write!(std::io::stderr(), "{msg}");
        })));
    } else {
        libbpf_rs::set_print(None);
    }
}

fn read_counters(
    capture: &Capture,
    procs: Option<&ProcessProbe>,
    tls: Option<&TlsProbes>,
) -> KernelCounters {
    let sum = |idx: u32| -> (u64, Vec<u64>) {
        let per_cpu = crate::bpf::percpu_u64(capture.counters(), idx);
        (per_cpu.iter().sum(), per_cpu)
    };
    let (lost, lost_per_cpu) = sum(counter::LOST);
    let (proc_events, proc_lost) = procs.map_or((0, 0), ProcessProbe::counters);
    let (tls_probe_hits, tls_probe_stepped_hits) =
        tls.map_or_else(Default::default, |t| t.hits_since_start(capture.tls_hits()));
    KernelCounters {
        events: sum(counter::EVENTS).0,
        lost,
        lost_bytes: sum(counter::LOST_BYTES).0,
        skipped_unknown_proto: sum(counter::SKIPPED_UNKNOWN).0,
        skipped_unknown_bytes: sum(counter::SKIPPED_BYTES).0,
        inflight_full: sum(counter::INFLIGHT_FULL).0,
        socket_syscalls: sum(counter::SOCK_SYSCALLS).0,
        truncated: sum(counter::TRUNCATED).0,
        lost_per_cpu,
        proc_events,
        proc_lost,
        missed_runs: crate::bpf::recursion_misses(capture.object())
            + procs.map_or(0, ProcessProbe::missed_runs),
        tls_cipher_events: sum(counter::TLS_CIPHER).0,
        tls_cipher_bytes: sum(counter::TLS_CIPHER_BYTES).0,
        tls_calls: sum(counter::TLS_CALLS).0,
        tls_no_socket: sum(counter::TLS_NO_SOCKET).0,
        tls_no_socket_bytes: sum(counter::TLS_NO_SOCKET_BYTES).0,
        tls_files_probed: tls.map_or(0, |t| t.status().files.len() as u64),
        tls_probe_failures: tls.map_or(0, |t| t.status().failures.len() as u64),
        tls_probe_hits,
        tls_probe_stepped_hits,
        tls_probe_hit_ns: tls.and_then(|t| t.hit_ns),
        tls_probe_stepped_hit_ns: tls.and_then(|t| t.stepped_hit_ns),
    }
}

/// Feeds process records to the pipeline: the execs waiting in the ring (`execs`, before the
/// socket records) or the exits held back (after them). An output error is kept for `check`.
fn drain_procs<S: Sink>(
    procs: &mut Option<ProcessProbe>,
    pipeline: &RefCell<Pipeline<S>>,
    failure: &RefCell<Option<io::Error>>,
    execs: bool,
    tls: &mut Option<TlsProbes>,
) {
    if failure.borrow().is_some() {
        return;
    }
    if let Some(p) = procs.as_mut() {
        let mut feed = |r: &[u8]| {
            // A new program may link OpenSSL statically or map a libssl not probed yet.
            if let (Some(t), Ok(ev)) = (tls.as_mut(), ProcEvent::decode(r)) {
                match ev.kind {
                    ProcEventKind::Exec => t.on_exec(&ev),
                    // A library loaded at run time: its maps now, before its first calls.
                    ProcEventKind::Loaded => {
                        t.on_dlopen(ev.pid);
                        return Ok(());
                    }
                    ProcEventKind::Exit => {}
                }
            }
            pipeline.borrow_mut().on_proc_record(r)
        };
        let result = if execs {
            p.drain_execs(&mut feed)
        } else {
            p.drain_exits(&mut feed)
        };
        if let Err(e) = result {
            *failure.borrow_mut() = Some(e);
        }
    }
}

/// Ends an interval in the output: the flows' report (if the flow table runs) first.
fn end_interval<S: Sink>(
    pipeline: &RefCell<Pipeline<S>>,
    flows: Option<crate::flows::FlowReport>,
    mono: u64,
    kernel: &KernelCounters,
    overhead: OverheadSnapshot,
) -> io::Result<()> {
    let mut p = pipeline.borrow_mut();
    if let Some(report) = flows {
        p.set_flows(report)?;
    }
    std::thread::sleep(crate::diag::debug_interval_stall());
    p.on_interval(mono, kernel, Some(overhead))
}

/// Hands the flow report parts that are ready (`wait`: every part of the requested poll) to
/// the pipeline: a tick's first part ends its interval in the output (`pending_tick`), the
/// others follow it. Not waiting, two parts at most: the ring is read between them.
fn deliver_flow_parts<S: Sink>(
    f: &mut crate::source::flow_table::FlowCollector,
    wait: bool,
    pipeline: &RefCell<Pipeline<S>>,
    pending_tick: &mut Option<(u64, KernelCounters, OverheadSnapshot)>,
) -> Result<io::Result<()>> {
    for _ in 0..if wait { usize::MAX } else { 2 } {
        let part = if wait { f.wait_part()? } else { f.try_part()? };
        let Some(part) = part else {
            break;
        };
        let result = match pending_tick.take() {
            Some((mono, k, ov)) => end_interval(pipeline, Some(part), mono, &k, ov),
            None => pipeline.borrow_mut().set_flows(part),
        };
        if result.is_err() {
            return Ok(result);
        }
    }
    Ok(Ok(()))
}

/// Detaching waits for an RCU grace period per tracepoint; in parallel threads the kernel
/// overlaps part of it (measured here: 2.2 s sequential, 1.2 s parallel for 29 links).
fn detach_all(links: Vec<libbpf_rs::Link>) {
    std::thread::scope(|scope| {
        for link in links {
            scope.spawn(move || drop(link));
        }
    });
}

/// Loads, attaches and runs until `stop` is set, `duration` passes or the sink fails.
/// The session's `meta` is written once every probe is attached. `on_stop` gets the pipeline
/// once the ring is drained, before the probes are detached: detaching waits for the kernel
/// (~35 ms per tracepoint, serialised), and the user should not wait for it to see the summary.
pub fn run<S: Sink, R>(
    cfg: &LiveConfig,
    pipeline: Pipeline<S>,
    stop: &AtomicBool,
    duration: Option<Duration>,
    interval: Duration,
    meta: &SessionMeta,
    on_stop: impl FnOnce(Pipeline<S>, &KernelCounters, StopReason) -> Result<R>,
) -> Result<R> {
    crate::preflight::check_privileges()?;
    crate::preflight::check_btf()?;
    crate::preflight::ensure_tracefs()?;
    quiet_libbpf(cfg.verbose);

    let mut socket_storage = MaybeUninit::uninit();
    let mut syscall_storage = MaybeUninit::uninit();
    let mut socket_storage_2 = MaybeUninit::uninit();
    let mut syscall_storage_2 = MaybeUninit::uninit();
    // The TLS probes load with the capture programs (one object: the same maps and ring);
    // should the kernel refuse them, capture goes on without TLS plaintext, said once.
    let (capture, mut links, tls_loaded) =
        match load_capture(cfg, &mut socket_storage, &mut syscall_storage) {
            Ok((c, l)) => (c, l, cfg.tls),
            Err(e) if cfg.tls => {
                let without = LiveConfig {
                    tls: false,
                    ..cfg.clone()
                };
                let (c, l) = load_capture(&without, &mut socket_storage_2, &mut syscall_storage_2)?;
                crate::diag!(
                    "ebtop: warning: TLS probes unavailable, going on without TLS plaintext: {e:#}"
                );
                (c, l, false)
            }
            Err(e) => return Err(e),
        };
    let mut meta = meta.clone();
    meta.hooks = Some(capture.hooks().to_owned());
    let meta = &meta;

    // The flow table: optional. If it cannot load, HTTP capture goes on without it.
    let mut flows = match cfg.flow_table.then(|| {
        crate::source::flow_table::FlowCollector::start(
            &crate::source::flow_table::FlowConfig {
                max_flows: cfg.max_flows,
                filters: cfg.filters.clone(),
                accept_hooks: matches!(capture, Capture::Syscalls(_)),
            },
            // Without the capture attached the flow table does its per-send work itself.
            capture.flow_maps().filter(|_| cfg.capture),
        )
    }) {
        None => None,
        Some(Ok(c)) => Some(c),
        Some(Err(e)) => {
            crate::diag!("ebtop: warning: flow table unavailable, going on without it: {e:#}");
            None
        }
    };

    // Process exec/exit records: optional too; without them processes are read from /proc.
    // They describe the processes of calls: not loaded when no call is captured.
    let mut procs = match cfg
        .capture
        .then(|| ProcessProbe::start(&cfg.filters, &cfg.cgroups, tls_loaded))
    {
        None => None,
        Some(Ok(p)) => Some(p),
        Some(Err(e)) => {
            crate::diag!("ebtop: warning: process exec/exit tracing unavailable: {e:#}");
            None
        }
    };

    // Every program of ebtop, for its own-cost figures (and the TLS probes' attachment).
    let programs: Vec<libbpf_rs::Program> = capture.object().progs().collect();
    // TLS plaintext: uprobes on the TLS libraries, placed before the session starts.
    let mut tls = if tls_loaded {
        match TlsProbes::start(&programs, cfg.filters.pid.clone()) {
            Ok(t) => Some(t),
            Err(e) => {
                crate::diag!(
                    "ebtop: warning: TLS probes unavailable, going on without TLS plaintext: {e}"
                );
                None
            }
        }
    } else {
        None
    };
    let mut go_tls_enabled = false;
    if tls.as_ref().is_some_and(TlsProbes::go_probed) {
        capture.enable_go_tls();
        go_tls_enabled = true;
    }

    // Kernel BPF run-time statistics for the session: ebtop shows its own cost.
    let mut overhead = Overhead::new(BpfStats::enable(cfg.bpf_stats));
    let mut pipeline = pipeline;
    if procs.is_some() {
        pipeline.use_exit_records();
    }
    // More than one tracking thread: each reads the ring its sockets' records go to.
    let (shards, ring_bytes) = cfg.ring_layout();
    if shards > 1 {
        let mut feeds: Vec<Box<dyn crate::pipeline::RecordFeed>> = Vec::with_capacity(shards);
        for ring in capture.event_rings().into_iter().take(shards) {
            let map = libbpf_rs::MapHandle::try_from(ring)
                .context("opening an event ring for its tracking thread failed")?;
            feeds.push(Box::new(RingFeed::new(map, ring_bytes as usize)));
        }
        pipeline = pipeline.with_feeds(feeds);
    }
    let mut meta = meta.clone();
    meta.loaded = [
        cfg.capture.then_some("capture"),
        flows.is_some().then_some("flow_table"),
        procs.is_some().then_some("process_events"),
        tls.is_some().then_some("tls_probes"),
    ]
    .into_iter()
    .flatten()
    .map(str::to_owned)
    .collect();
    meta.event_rings = Some(shards as u32);
    if let Some(t) = tls.as_ref() {
        meta.tls_probed = t.status().files.clone();
        meta.tls_probe_failures = t.status().failures.clone();
    }
    let meta = &meta;
    pipeline.start(meta).context("writing output failed")?;
    if shards > 1 {
        // The tracking threads started (at the capture's priority): this thread applies what
        // they send.
        crate::preflight::raise_applying_priority();
    }
    let started = Instant::now();
    let deadline = duration.map(|d| started + d);
    let pipeline = RefCell::new(pipeline);
    let failure: RefCell<Option<io::Error>> = RefCell::new(None);
    // A panic must not unwind through libbpf's C frames (that aborts: no clean detach, no
    // closed recording): it is caught here and resumed from Rust code below.
    let panicked: RefCell<Option<Box<dyn std::any::Any + Send>>> = RefCell::new(None);
    let drop_records = super::bench_drops_records();
    let mut builder = RingBufferBuilder::new();
    if shards == 1 {
        builder
            .add(capture.events(), |data: &[u8]| {
                if drop_records {
                    return 0; // read, not decoded (a benchmark build's cut)
                }
                let handled = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                    if crate::diag::debug_panic_requested("collector") {
                        panic!("injected panic in the collector (EBTOP_DEBUG_PANIC=collector)");
                    }
                    pipeline.borrow_mut().on_record(data)
                }));
                match handled {
                    Ok(Ok(())) => 0,
                    Ok(Err(e)) => {
                        *failure.borrow_mut() = Some(e);
                        -1
                    }
                    Err(p) => {
                        *panicked.borrow_mut() = Some(p);
                        -1
                    }
                }
            })
            .context("setting up the ring buffer failed")?;
    }
    // One ring: read here. Several: each by its tracking thread, whose results wake the loop.
    let ring = (shards == 1)
        .then(|| builder.build())
        .transpose()
        .context("setting up the ring buffer failed")?;
    let own_epoll = match &ring {
        Some(_) => None,
        None => {
            Some(crate::eventfd::new_epoll().context("waiting for the tracking threads failed")?)
        }
    };
    let epfd = match (&ring, &own_epoll) {
        (Some(r), _) => r.epoll_fd(),
        (None, Some(e)) => e.as_raw_fd(),
        (None, None) => unreachable!("one or the other"),
    };
    if ring.is_none() {
        if let Some(fd) = pipeline.borrow().results_fd() {
            crate::eventfd::epoll_add(epfd, fd, 0)
                .context("waiting for the tracking threads failed")?;
        }
    }
    // The loop waits on the capture ring: process records wake it too (with TLS, an exec at
    // once, so that a new program is probed before its first calls if it can be), and so
    // does the TLS lookout when it found a file to probe.
    let also_wake = [
        procs.as_ref().map(|p| (p.epoll_fd(), "process records")),
        tls.as_ref()
            .map(|t| (t.wake_fd().as_raw_fd(), "new TLS probes")),
    ];
    for (fd, what) in also_wake.into_iter().flatten() {
        // Tag 0: libbpf's own poll (not used here) would read it as ring 0, the capture ring.
        if let Err(e) = crate::eventfd::epoll_add(epfd, fd, 0) {
            crate::diag!("ebtop: warning: {what} will wait for the capture ring: {e}");
        }
    }

    let mut next_tick = started + interval;
    let mut prog_fds: Vec<(String, std::os::fd::BorrowedFd)> = programs
        .iter()
        .map(|p| (p.name().to_string_lossy().into_owned(), p.as_fd()))
        .collect();
    if let Some(p) = procs.as_ref() {
        prog_fds.extend(p.programs());
    }
    if let Some(f) = flows.as_ref() {
        prog_fds.extend(f.programs());
    }
    // Sampled BPF statistics: on for the last tenth of each interval (at least 50 ms).
    let stats_window = (interval / 10).max(Duration::from_millis(50)).min(interval);
    let mut window_at = next_tick - stats_window;
    let check = |failure: &RefCell<Option<io::Error>>| -> Result<Option<StopReason>> {
        match failure.borrow_mut().take() {
            Some(e) if e.kind() == io::ErrorKind::BrokenPipe => Ok(Some(StopReason::OutputClosed)),
            Some(e) => Err(anyhow!("writing output failed: {e}")),
            None => Ok(None),
        }
    };
    let mut pending_tick: Option<(u64, KernelCounters, OverheadSnapshot)> = None;
    // Records the last look at the ring found (with a ring per tracking thread, the threads
    // read them and this loop waits on its other duties at the idle pace).
    let mut consumed_last = 0;
    let reason = loop {
        let now = Instant::now();
        let mut wait = next_tick
            .saturating_duration_since(now)
            .min(if consumed_last > 0 {
                BUSY_DRAIN_EVERY
            } else {
                IDLE_DRAIN_EVERY
            });
        if window_at > now {
            wait = wait.min(window_at - now);
        }
        if flows.as_ref().is_some_and(|f| f.polling()) {
            // Parts of the flow report to hand on as they come.
            wait = wait.min(Duration::from_millis(1));
        }
        if let Some(d) = deadline {
            wait = wait.min(d.saturating_duration_since(now));
        }
        // Wait for a wakeup (a large batch) or the timeout, then consume a bounded number of
        // records: under a flood the loop still gets back to ticks and signals.
        let mut ev = libc::epoll_event { events: 0, u64: 0 };
        // SAFETY: epoll_wait on the ring's own epoll fd with one valid output slot.
        let waited = unsafe { libc::epoll_wait(epfd, &mut ev, 1, wait.as_millis().max(1) as i32) };
        // errno now, before anything else makes a syscall: a signal's EINTR read after
        // draining the process records (which read /proc) came back as their ENOENT.
        let wait_errno = (waited < 0).then(|| io::Error::last_os_error().raw_os_error());
        // Process execs first: an exec is then handled before the new program's calls.
        drain_procs(&mut procs, &pipeline, &failure, true, &mut tls);
        let rc = if let Some(errno) = wait_errno.filter(|e| *e != Some(libc::EINTR)) {
            -errno.unwrap_or(libc::EIO)
        } else {
            ring.as_ref().map_or(0, |r| r.consume_raw_n(CONSUME_BATCH))
        };
        consumed_last = rc.max(0);
        drain_procs(&mut procs, &pipeline, &failure, false, &mut tls);
        if let Some(p) = panicked.borrow_mut().take() {
            std::panic::resume_unwind(p);
        }
        if let Some(r) = check(&failure)? {
            break r;
        }
        if rc < 0 && rc != -libc::EINTR {
            return Err(anyhow!(
                "polling the ring buffer failed: {}",
                io::Error::from_raw_os_error(-rc)
            ));
        }
        if let Some(f) = flows.as_mut() {
            f.consume();
        }
        if let Some(t) = tls.as_mut() {
            t.poll();
            if !go_tls_enabled && t.go_probed() {
                capture.enable_go_tls();
                go_tls_enabled = true;
            }
        }
        if let Err(e) = pipeline.borrow_mut().flush() {
            *failure.borrow_mut() = Some(e);
            if let Some(r) = check(&failure)? {
                break r;
            }
        }
        // With a ring per tracking thread, the collector's first record is its first result.
        if ring.is_none()
            && crate::diag::debug_panic_requested("collector")
            && pipeline.borrow().summary().events > 0
        {
            panic!("injected panic in the collector (EBTOP_DEBUG_PANIC=collector)");
        }
        if stop.load(Ordering::Relaxed) {
            break StopReason::Signal;
        }
        let now = Instant::now();
        if deadline.is_some_and(|d| now >= d) {
            break StopReason::Duration;
        }
        if now >= window_at {
            // Late (a busy machine) the window is short, never missing.
            overhead.open_bpf_window(&prog_fds);
        }
        // The interval that ended at the last tick ends in the output once the first part of
        // its flow report is back (a few ms, read on the flow table's own thread while the
        // ring is consumed); the other parts follow as they come.
        if let Some(f) = flows.as_mut() {
            // A snapshot longer than an interval is waited for before the next tick.
            let result = deliver_flow_parts(f, now >= next_tick, &pipeline, &mut pending_tick)?;
            if let Err(e) = result {
                *failure.borrow_mut() = Some(e);
                if let Some(r) = check(&failure)? {
                    break r;
                }
            }
        }
        if now >= next_tick {
            next_tick += interval;
            let k = read_counters(&capture, procs.as_ref(), tls.as_ref());
            let mono = crate::clock::monotonic_ns();
            window_at = next_tick - stats_window;
            let mut ov = overhead.end_interval(
                &prog_fds,
                RingCounters {
                    events: k.events,
                    lost: k.lost,
                },
            );
            if let Some(t) = tls.as_ref() {
                ov.tls_files_probed = Some(k.tls_files_probed);
                ov.tls_probe_failures = Some(k.tls_probe_failures);
                ov.tls_installed_scanned = Some(t.installed_done());
            }
            if let Some(f) = flows.as_mut() {
                f.request_poll(mono)?;
                pending_tick = Some((mono, k, ov));
            } else if let Err(e) = end_interval(&pipeline, None, mono, &k, ov) {
                *failure.borrow_mut() = Some(e);
                if let Some(r) = check(&failure)? {
                    break r;
                }
            }
        }
    };
    let mut reason = reason;
    // An interval that ended before the stop is written with its flows.
    if let Some(f) = flows.as_mut() {
        if reason == StopReason::OutputClosed {
            while f.wait_part()?.is_some() {}
        } else if let Err(e) = deliver_flow_parts(f, true, &pipeline, &mut pending_tick)? {
            *failure.borrow_mut() = Some(e);
            if let Some(r) = check(&failure)? {
                reason = r;
            }
        }
    }
    // Deliver what is already in the ring; the session ends here, later records are not read.
    // The probes are still attached, and under a load that fills the ring as fast as it is
    // read an unbounded drain would never end: at most a full ring's records are read (each is
    // at least a record header).
    if reason != StopReason::OutputClosed {
        drain_procs(&mut procs, &pipeline, &failure, true, &mut tls);
        let mut left = cfg.ring_layout().1 as usize / (crate::event::HEADER_LEN + 8);
        match &ring {
            Some(ring) => {
                while left > 0 {
                    let want = CONSUME_BATCH.min(left);
                    if ring.consume_raw_n(want) < want as i32 {
                        break; // empty (or a callback stopped it: `check` below says why)
                    }
                    left -= want;
                }
            }
            // Each tracking thread reads its own ring, as far as it held records now.
            None => {
                if let Err(e) = pipeline.borrow_mut().drain_sources() {
                    *failure.borrow_mut() = Some(e);
                }
            }
        }
        drain_procs(&mut procs, &pipeline, &failure, false, &mut tls);
        if let Some(r) = check(&failure)? {
            reason = r;
        }
    }
    let counters = read_counters(&capture, procs.as_ref(), tls.as_ref());
    drop(ring);
    // Flows that ended since the last interval are reported with the last, partial one.
    let mut flow_links = Vec::new();
    if let Some(f) = flows.as_mut() {
        if reason != StopReason::OutputClosed {
            let result = f.poll(crate::clock::monotonic_ns(), |part| {
                pipeline.borrow_mut().set_flows(part)
            })?;
            if let Err(e) = result {
                *failure.borrow_mut() = Some(e);
                if let Some(r) = check(&failure)? {
                    reason = r;
                }
            }
        }
        flow_links = f.links();
    }
    let result = on_stop(pipeline.into_inner(), &counters, reason);
    links.extend(flow_links);
    if let Some(p) = procs.as_mut() {
        links.extend(p.links());
    }
    if let Some(t) = tls.as_mut() {
        links.extend(t.links());
    }
    detach_all(links);
    result
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rings_are_asked_how_full_they_are_often_enough_and_rarely() {
        // One 16 MiB ring (1 MiB wakeups) on 2 CPUs: 256 KiB each, held to 64 KiB.
        assert_eq!(query_every_bytes(1 << 20, 2), 64 * 1024);
        // 8 MiB rings on 16 CPUs: all CPUs together leave at most half of 512 KiB unnoticed.
        let q = query_every_bytes(512 << 10, 16);
        assert_eq!(q, 16 * 1024);
        assert!(u64::from(q) * 16 <= (512 << 10) / 2);
        // The smallest ring (256 KiB, 16 KiB wakeups) on many CPUs: asked every few records.
        assert_eq!(query_every_bytes(16 << 10, 256), 256);
        assert_eq!(query_every_bytes(0, 0), 256);
    }

    #[test]
    fn each_tracking_thread_gets_a_ring_of_a_power_of_two_bytes() {
        const MIB: u32 = 1 << 20;
        assert_eq!(ring_layout(true, 1, None), (1, 16 * MIB));
        assert_eq!(ring_layout(true, 1, Some(4 * MIB)), (1, 4 * MIB));
        assert_eq!(ring_layout(true, 8, None), (8, 8 * MIB));
        // A given size is shared out, rounded down to a power of two, at least 256 KiB.
        assert_eq!(ring_layout(true, 3, Some(16 * MIB)), (3, 4 * MIB));
        assert_eq!(ring_layout(true, 16, Some(MIB)), (16, 256 * 1024));
        // More threads than rings: at most MAX_SHARDS rings; without the capture, one.
        assert_eq!(ring_layout(true, 64, None).0, MAX_SHARDS);
        assert_eq!(ring_layout(false, 8, None), (1, 16 * MIB));
    }
}
