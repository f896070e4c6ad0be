//! The live session's driver: loads the capture (src/source/capture.rs), the flow table, the
//! process probe and the TLS probes, and feeds their records to the pipeline until stopped.

use std::cell::RefCell;
use std::io;
use std::mem::MaybeUninit;
use std::os::fd::{AsFd, AsRawFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anyhow::{anyhow, Context, Result};
use libbpf_rs::RingBufferBuilder;

use crate::aggregate::{BpfStats, Overhead, OverheadSnapshot, RingCounters};
use crate::kernel_counters::KernelCounters;
use crate::pipeline::{Pipeline, BUSY_DRAIN_EVERY, IDLE_DRAIN_EVERY};
use crate::process_events::{ProcEvent, ProcEventKind};
use crate::session_meta::SessionMeta;
use crate::sink::Sink;
use crate::source::capture::{detach_all, load_capture, quiet_libbpf, read_counters, Capture};
pub use crate::source::capture::{LiveConfig, MAX_SHARDS};
use crate::source::flow_table::{FlowCollector, FlowConfig, LoadedFlows};
use crate::source::process_probe::ProcessProbe;
use crate::source::ring_feed::RingFeed;
use crate::source::sampling::{IntervalLoad, Sampler, CUT_BOARD};
use crate::tls::TlsProbes;

/// Records consumed per loop pass before ticks, signals and the deadline are checked again.
const CONSUME_BATCH: usize = 4096;

/// Why the capture loop ended.
#[derive(Debug, PartialEq, Eq)]
pub enum StopReason {
    Signal,
    Duration,
    /// The output went away (e.g. `| head`): not an error for the user.
    OutputClosed,
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

/// Runs `load` on a thread of its own, at the session's priority: it is on the way to `meta`
/// (None if no thread could start: then the caller loads).
fn load_on_thread<T: Send + 'static>(
    name: &str,
    load: impl FnOnce() -> Result<T> + Send + 'static,
) -> Option<std::thread::JoinHandle<Result<T>>> {
    std::thread::Builder::new()
        .name(name.into())
        .spawn(load)
        .ok()
}

/// What a loading thread made (`what`: the object, for a message should it have panicked).
fn joined<T>(thread: std::thread::JoinHandle<Result<T>>, what: &str) -> Result<T> {
    thread
        .join()
        .map_err(|_| anyhow!("loading {what} panicked"))
        .and_then(|r| r)
}

/// The flow table loading beside the capture, and how it was configured.
struct FlowsLoading {
    /// On the socket layer's maps.
    shared: bool,
    accept_hooks: bool,
    thread: std::thread::JoinHandle<Result<LoadedFlows>>,
}

impl FlowsLoading {
    fn start(cfg: &FlowConfig, shared: Option<[std::os::fd::OwnedFd; 5]>) -> Option<FlowsLoading> {
        let (flow_cfg, is_shared) = (cfg.clone(), shared.is_some());
        let thread = load_on_thread("ebtop-load-flows", move || {
            let maps =
                shared
                    .as_ref()
                    .map(|[flows, udp_flows, udp_peer, udp_peer_task, counters]| {
                        crate::source::flow_table::SharedFlowMaps {
                            flows: flows.as_fd(),
                            udp_flows: udp_flows.as_fd(),
                            udp_peer: udp_peer.as_fd(),
                            udp_peer_task: udp_peer_task.as_fd(),
                            counters: counters.as_fd(),
                        }
                    });
            FlowCollector::load(&flow_cfg, maps)
        })?;
        Some(FlowsLoading {
            shared: is_shared,
            accept_hooks: cfg.accept_hooks,
            thread,
        })
    }

    /// Not the load wanted after all: waited for (no thread left behind) and dropped (its
    /// programs stay loaded, unattached, until ebtop exits).
    fn discard(self) {
        let _ = self.thread.join();
    }
}

/// Duplicates of the capture's maps the flow table shares (None if one is missing).
fn shared_flow_fds(
    maps: &crate::source::capture::CaptureMaps,
) -> Option<[std::os::fd::OwnedFd; 5]> {
    let dup = |name: &str| {
        maps.iter()
            .find(|(n, _)| n == name)
            .and_then(|(_, fd)| fd.try_clone().ok())
    };
    Some([
        dup("flows")?,
        dup("udp_flows")?,
        dup("udp_peer")?,
        dup("udp_peer_task")?,
        dup("flow_counters")?,
    ])
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
    // The process probe and the flow table load on threads of their own while the capture
    // loads (the kernel verifies programs loaded by several threads at once): the process
    // probe from the start, the flow table once the capture's maps it shares exist (or from
    // the start when it shares none).
    let flow_cfg = FlowConfig {
        max_flows: cfg.max_flows,
        filters: cfg.filters.clone(),
        accept_hooks: matches!(cfg.hooks, crate::cli::Hooks::Syscalls),
    };
    let procs_loading = cfg.capture.then(|| {
        let (filters, cgroups, wake_on_exec) = (cfg.filters.clone(), cfg.cgroups.clone(), cfg.tls);
        load_on_thread("ebtop-load-procs", move || {
            ProcessProbe::load(&filters, &cgroups, wake_on_exec)
        })
    });
    let mut flows_loading =
        if cfg.flow_table && (!cfg.capture || matches!(cfg.hooks, crate::cli::Hooks::Syscalls)) {
            FlowsLoading::start(&flow_cfg, None)
        } else {
            None
        };
    let mut on_socket_maps = |maps: &crate::source::capture::CaptureMaps| {
        if !(cfg.flow_table && cfg.capture) {
            return;
        }
        // A second socket-layer load (the first refused) has maps of its own.
        if let Some(earlier) = flows_loading.take() {
            earlier.discard();
        }
        flows_loading =
            shared_flow_fds(maps).and_then(|fds| FlowsLoading::start(&flow_cfg, Some(fds)));
    };
    // The TLS probes load with the capture programs (one object: the same maps and ring);
    // should the kernel refuse them, capture goes on without TLS plaintext, said once.
    let loaded = load_capture(
        cfg,
        &mut socket_storage,
        &mut syscall_storage,
        &mut on_socket_maps,
    );
    let (capture, mut links, tls_loaded) = match loaded {
        Ok((c, l)) => (c, l, cfg.tls),
        Err(e) if cfg.tls => {
            let without = LiveConfig {
                tls: false,
                ..cfg.clone()
            };
            let (c, l) = load_capture(
                &without,
                &mut socket_storage_2,
                &mut syscall_storage_2,
                &mut on_socket_maps,
            )?;
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

    // A stop during the start (SIGTERM, `q`) skips what is left to load: the session then
    // ends at once, with its meta and summary.
    let stopping = || stop.load(Ordering::Relaxed);
    // Interface flows: asked for by name, so an interface that is not there, or programs
    // the kernel refuses, end the start with the reason (before the flow table they join).
    let mut ifaces = match cfg.ifaces.clone().filter(|_| !stopping()) {
        Some(sel) => Some(
            crate::source::flow_table::iface::IfaceProgram::start(sel, cfg.max_iface_flows)
                .context("--iface")?,
        ),
        None => None,
    };
    // The flow table: optional. If it cannot load, HTTP capture goes on without it.
    let mut flows = match (cfg.flow_table && !stopping()).then(|| {
        // Without the capture attached the flow table does its per-send work itself.
        let shared = capture.flow_maps().filter(|_| cfg.capture);
        let flow_cfg = FlowConfig {
            accept_hooks: matches!(capture, Capture::Syscalls(..)),
            ..flow_cfg.clone()
        };
        // Loaded beside the capture if it was loaded as it is needed now (not so after the
        // socket layer was refused: the syscall hooks share no maps).
        let loaded = match flows_loading.take() {
            Some(l) if l.shared == shared.is_some() && l.accept_hooks == flow_cfg.accept_hooks => {
                joined(l.thread, "the flow table")
            }
            other => {
                if let Some(l) = other {
                    l.discard();
                }
                FlowCollector::load(&flow_cfg, shared)
            }
        };
        loaded.and_then(|l| FlowCollector::attach(l, &flow_cfg, ifaces.take()))
    }) {
        None => None,
        Some(Ok(c)) => Some(c),
        Some(Err(e)) => {
            crate::diag!("ebtop: warning: flow table unavailable, going on without it: {e:#}");
            if ifaces.is_some() {
                crate::diag!("ebtop: warning: interface flows (--iface) are read with the flow table: not counted");
            }
            None
        }
    };

    // Process exec/exit records: optional too; without them processes are read from /proc.
    // They describe the processes of calls: not loaded when no call is captured.
    let mut procs = match (cfg.capture && !stopping()).then(|| {
        let loaded = match procs_loading.flatten() {
            Some(thread) => joined(thread, "the process probe"),
            None => ProcessProbe::load(&cfg.filters, &cfg.cgroups, tls_loaded),
        };
        loaded.and_then(|l| ProcessProbe::attach(l, tls_loaded))
    }) {
        None => None,
        Some(Ok(p)) => Some(p),
        Some(Err(e)) => {
            crate::diag!("ebtop: warning: process exec/exit tracing unavailable: {e:#}");
            None
        }
    };

    // The capture's programs, for ebtop's own-cost figures.
    let programs: Vec<libbpf_rs::Program> = capture.programs().collect();
    // TLS plaintext: uprobes on the TLS libraries, loaded and placed by the lookout's thread
    // as it finds them (the session does not wait: `TlsProbes::start`).
    let mut tls = if tls_loaded && !stopping() {
        let started = crate::source::capture::tls_loader(&capture)
            .and_then(|load| Ok(TlsProbes::start(load, cfg.filters.pid.clone())?));
        match started {
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
    let mut tls_start_reported = false;

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
        flows
            .as_ref()
            .is_some_and(|f| f.counts_drops())
            .then_some("packet_drops"),
        flows
            .as_ref()
            .is_some_and(|f| f.counts_iface())
            .then_some("iface_flows"),
        procs.is_some().then_some("process_events"),
        tls.is_some().then_some("tls_probes"),
    ]
    .into_iter()
    .flatten()
    .map(str::to_owned)
    // Parts the caller runs beside the session (`profile`) follow.
    .chain(std::mem::take(&mut meta.loaded))
    .collect();
    meta.event_rings = Some(shards as u32);
    // The session starts now, with everything attached: `meta.start` is this moment, and
    // `--duration` counts from it (the TLS probes follow as the lookout finds their files).
    // A recording's header, written before the load, holds its start already: intervals
    // count from it, so that a replay's are the live run's.
    if !pipeline.is_recording() {
        meta.start_unix_ns = crate::clock::now_unix_ns();
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
    let drop_records = crate::source::bench_drops_records();
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
    // Connection sampling (`--max-cpu`, `--sample`): the kernel's control entry was written
    // before attach; a budget moves it once per interval.
    let mut sampler = Sampler::new(cfg.sampling);
    let mut runs_before = (0u64, 0u64);
    // TLS candidate files skipped as untrusted input, as last warned about.
    let mut tls_skips_warned = 0;
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
            if let Some(fds) = t.take_new_programs() {
                prog_fds.extend(fds.iter().cloned());
            }
            if !go_tls_enabled && t.go_probed() {
                capture.enable_go_tls();
                go_tls_enabled = true;
            }
            if !tls_start_reported && t.start_done() {
                tls_start_reported = true;
                let start = crate::sink::TlsStart {
                    probed: t.status().files.clone(),
                    failures: t.status().failures.clone(),
                    skipped: t.skipped() as u64,
                };
                if let Err(e) = pipeline.borrow_mut().on_tls_started(&start) {
                    *failure.borrow_mut() = Some(e);
                    if let Some(r) = check(&failure)? {
                        break r;
                    }
                }
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
            let mut k = k;
            let runs = (k.socket_syscalls, k.shed_runs);
            let load = IntervalLoad {
                period_ns: ov.period_ns,
                user_cpu_pct: ov.user_cpu_pct,
                bpf_cpu_pct: ov.bpf_cpu_pct,
                runs: runs.0.saturating_sub(runs_before.0),
                shed_runs: runs.1.saturating_sub(runs_before.1),
            };
            runs_before = runs;
            // The connections the trackers named at the last interval's end (cuts asked then).
            let names = CUT_BOARD.take();
            if let Err(e) = capture.name_cuts(&names) {
                crate::diag!("ebtop: warning: {e:#}");
            }
            if let Some(ctl) = sampler.on_interval(&load) {
                if let Err(e) = capture.set_sampling(ctl) {
                    crate::diag!("ebtop: warning: {e:#}");
                }
            }
            CUT_BOARD.ask(sampler.cuts());
            // What the next interval's records are decided under (a recording keeps it).
            k.sample_keep_ppm = sampler.ctl().keep_ppm();
            ov.max_cpu_pct = sampler.budget_pct();
            ov.over_budget_at_floor = sampler.over_at_floor();
            if let Some(t) = tls.as_ref() {
                let skipped = t.skipped();
                if skipped > tls_skips_warned {
                    let w = tls_skips_warning(skipped - tls_skips_warned);
                    tls_skips_warned = skipped;
                    if let Err(e) = pipeline.borrow_mut().on_warning(&w) {
                        *failure.borrow_mut() = Some(e);
                    }
                }
                ov.tls_files_probed = Some(k.tls_files_probed);
                ov.tls_probe_failures = Some(k.tls_probe_failures);
                ov.tls_files_skipped = Some(skipped as u64);
                ov.tls_running_scanned = Some(t.start_done());
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
    let mut counters = read_counters(&capture, procs.as_ref(), tls.as_ref());
    counters.sample_keep_ppm = sampler.ctl().keep_ppm();
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

/// The `warning` for `count` more files the TLS lookout skipped as untrusted input (beyond the
/// caps on size, sections and symbols of docs/security.md, or unreadable within their time
/// budget): each is named once on stderr, and their plaintext is not seen.
fn tls_skips_warning(count: usize) -> crate::sink::Warning {
    crate::sink::Warning {
        kind: crate::sink::Warning::CAP,
        cap: Some("tls_files"),
        limit: None,
        count: Some(count as u64),
        message: format!(
            "{count} files skipped for TLS probes as untrusted input (caps on size, sections, \
             symbols, or read time; each named on stderr): their TLS plaintext is not seen"
        ),
    }
}
