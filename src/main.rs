//! The ebtop binary: argument parsing and wiring; the work is in the library.

use std::io::{self, IsTerminal, Write};
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use anyhow::{bail, Context, Result};
use clap::{CommandFactory, FromArgMatches};

use ebtop::cli::{Args, Command, Depth};
use ebtop::clock::{monotonic_ns, WallClock};
use ebtop::conntrack::TrackerConfig;
use ebtop::filters::Filters;
use ebtop::pipeline::Pipeline;
use ebtop::procinfo::ProcessTable;
use ebtop::protocols::ParseDepth;
use ebtop::record::writer::Recorder;
use ebtop::record::{self, RecordOptions, RecordingHeader};
use ebtop::session_meta::SessionMeta;
use ebtop::sink::json::{JsonSink, LineSelection};
use ebtop::summary::Summary;

/// mimalloc, not glibc's malloc: calls are made on the capture threads and dropped on others
/// (the terminal UI's, the pipeline thread's), and glibc then frees each through the arena of
/// the thread that made it, under its lock, while the making thread's cache runs empty — in
/// the terminal UI at saturation, malloc and free were a quarter of ebtop's CPU. Built
/// without its transparent-huge-page advice (Cargo feature `no_thp`): with it, every thread's
/// first touch of its part of an arena made a 2 MiB page resident, ~9 MB of RSS per tracking
/// thread under load (bench/notes.md, "Memory with several tracking threads").
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;
use ebtop::driver::live::{self, LiveConfig, StopReason};
use ebtop::driver::replay::{self, Rewind};
use ebtop::sink::exporting::Exporting;
use ebtop::sink::null::NullSink;
use ebtop::sink::otlp::{Mode as OtlpMode, OtlpExporter, OtlpOptions};
use ebtop::sink::prometheus::PrometheusExporter;
use ebtop::sink::status::RecordingStatus;
use ebtop::sink::Sink;

/// Set by the panic hook: whatever way ebtop then ends, it is not a clean exit.
static PANICKED: AtomicBool = AtomicBool::new(false);

fn main() -> ExitCode {
    let matches = ebtop::cli::command().get_matches();
    let args = match Args::from_arg_matches(&matches) {
        Ok(a) => a,
        Err(e) => e.exit(),
    };
    if let Some(Command::Completions { shell }) = args.command {
        clap_complete::generate(shell, &mut Args::command(), "ebtop", &mut io::stdout());
        return ExitCode::SUCCESS;
    }
    if let Some(msg) = ebtop::cli::usage_problem(&matches) {
        Args::command()
            .error(clap::error::ErrorKind::ArgumentConflict, msg)
            .exit();
    }
    let result = run(args);
    if PANICKED.load(Ordering::SeqCst) {
        // The message was written by the hook (or after the terminal was restored).
        return ExitCode::FAILURE;
    }
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) if is_broken_pipe(&e) => ExitCode::SUCCESS,
        // Told when it happened (stderr, the `warning` line); the summary was written.
        Err(e) if e.is::<RecordingFailed>() => ExitCode::from(RECORDING_FAILED_STATUS),
        Err(e) => {
            ebtop::diag!("ebtop: error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

/// Exit status of a session whose `-w` recording could not be written (disk full, I/O
/// error): it stopped at once, its summary written, the recording ending with its last whole
/// frame (man page, EXIT STATUS).
const RECORDING_FAILED_STATUS: u8 = 3;

/// The session ended because its recording could not be written (already told).
#[derive(Debug)]
struct RecordingFailed;

impl std::fmt::Display for RecordingFailed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("the recording could not be written")
    }
}

impl std::error::Error for RecordingFailed {}

/// Err([`RecordingFailed`]) if the session's recording failed.
fn recording_outcome(summary: &Summary) -> Result<()> {
    match summary.recording_error {
        Some(_) => Err(RecordingFailed.into()),
        None => Ok(()),
    }
}

fn is_broken_pipe(e: &anyhow::Error) -> bool {
    e.chain().any(|c| {
        c.downcast_ref::<io::Error>()
            .is_some_and(|io| io.kind() == io::ErrorKind::BrokenPipe)
    })
}

fn run(args: Args) -> Result<()> {
    // Plugins load (and are checked) before anything else starts: a bad file fails at once.
    let plugins = args
        .plugin
        .iter()
        .map(|p| {
            let limits = ebtop::plugins::Limits {
                wasi_stubs: args.plugin_wasi_stubs,
                ..Default::default()
            };
            ebtop::plugins::Plugin::load(p, limits)
        })
        .collect::<Result<Vec<_>>>()?;
    ebtop::plugins::install(plugins)?;
    // Serving metrics with no terminal and no --json (a service): headless.
    let headless_exporter =
        (args.prometheus.is_some() || args.otlp.is_some()) && !io::stdout().is_terminal();
    let tui = shows_tui(&args) && !headless_exporter;
    if tui && !io::stdout().is_terminal() {
        bail!("stdout is not a terminal: use --json for machine-readable output");
    }
    let stop = Arc::new(AtomicBool::new(false));
    for sig in [
        signal_hook::consts::SIGINT,
        signal_hook::consts::SIGTERM,
        signal_hook::consts::SIGHUP,
    ] {
        signal_hook::flag::register(sig, Arc::clone(&stop))?;
    }
    // A panic in any thread stops every loop (capture, replay, UI): ebtop then ends the normal
    // way, probes detached and a recording closed, instead of running on without that thread.
    // While the UI owns the screen, the message waits until the terminal is restored.
    let stop_on_panic = Arc::clone(&stop);
    let report_panic = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        PANICKED.store(true, Ordering::SeqCst);
        stop_on_panic.store(true, Ordering::SeqCst);
        if ebtop::tui::terminal::ui_active() {
            let thread = std::thread::current();
            ebtop::tui::terminal::defer_message(format!(
                "ebtop: thread '{}' {info}",
                thread.name().unwrap_or("unnamed")
            ));
        } else {
            report_panic(info);
        }
    }));
    // Listening before anything starts: a taken port fails at once, before the screen.
    let prometheus = args
        .prometheus
        .as_deref()
        .map(PrometheusExporter::serve)
        .transpose()?;
    if let Some(url) = &args.otlp {
        ebtop::sink::otlp::endpoint_base(url)?;
        if !tui {
            ebtop::diag!("ebtop: OTLP export to {url}");
        }
    }
    if let (Some(p), false) = (&prometheus, tui) {
        ebtop::diag!(
            "ebtop: Prometheus metrics on http://{}/metrics",
            p.local_addr()
        );
    }
    if tui {
        return tui_session(&args, &stop, prometheus);
    }
    if args.json {
        let stdout = io::BufWriter::with_capacity(64 * 1024, io::stdout().lock());
        session(
            &args,
            &stop,
            JsonSink::new(stdout).with_selection(json_lines(&args)),
            None,
            prometheus,
        )
    } else if let (Some(path), true) = (&args.write, io::stderr().is_terminal()) {
        // Recording on a terminal: a live one-line status, as tcpdump shows.
        let status = RecordingStatus::new(io::stderr(), path.clone());
        session(&args, &stop, status, None, prometheus)
    } else {
        session(&args, &stop, NullSink, None, prometheus)
    }
}

/// The terminal UI on this thread, the collector (live or replay pipeline) on another. `stop`
/// (set by a signal, the UI's quit or the collector's failure) ends both.
fn tui_session(
    args: &Args,
    stop: &Arc<AtomicBool>,
    prometheus: Option<PrometheusExporter>,
) -> Result<()> {
    use ebtop::tui;
    let replay = args.read.is_some();
    if !replay {
        // Fail before the screen switches.
        ebtop::preflight::check_privileges()?;
    }
    let (tx, rx) = std::sync::mpsc::sync_channel(tui::CHANNEL_CAP);
    let paused = Arc::new(AtomicBool::new(false));
    let mut sink = tui::TuiSink::new(tx.clone());
    let call_returner = Some(sink.call_returner());
    let live_filter = Some(sink.live_filter());
    let control = replay.then(|| Arc::new(tui::ReplayControl::new(args.speed)));
    if let Some(c) = &control {
        sink = sink.with_pacer(tui::Pacer::new(
            Arc::clone(c),
            Arc::clone(stop),
            Arc::clone(&paused),
        ));
    }
    let opts = tui::UiOptions {
        source_label: match &args.read {
            Some(p) => format!(
                "replay {}",
                p.file_name().map_or(p.as_os_str(), |n| n).to_string_lossy()
            ),
            None => "live".to_owned(),
        },
        refresh: args.delay,
        no_color: args.no_color || std::env::var_os("NO_COLOR").is_some_and(|v| !v.is_empty()),
        live: !replay,
        paused,
        utc: args.utc,
        replay: control.clone(),
        call_returner,
        live_filter,
        profile_requests: (!replay && args.profile).then(|| sink.profile_requests()),
        call_filter: args.filter.as_ref().map(|f| f.text().to_owned()),
        recording: args.write.clone(),
        metrics: prometheus.as_ref().map(PrometheusExporter::local_addr),
    };
    let progress_tx = tx.clone();
    std::thread::scope(|s| {
        if let Some(path) = &args.read {
            // The recording's length for the progress bar, read on the side (a long recording
            // takes a while; the replay does not wait for it).
            s.spawn(move || {
                if let Some(end) = replay::recording_end_ns(path, stop) {
                    let _ = progress_tx.send(tui::UiMsg::ReplayEnd(end));
                }
            });
        }
        let collector = s.spawn(|| {
            // Set on the way out, panic included, so the UI does not wait on a dead collector.
            let _stop_on_exit = StopOnDrop(stop);
            let r = session(args, stop, sink, control.as_deref(), prometheus);
            if r.is_err() {
                // Leave the UI so the error can be seen.
                stop.store(true, Ordering::SeqCst);
            }
            r
        });
        let ui = {
            // A panic in the UI must stop the collector too, or the scope waits for it forever.
            let _stop_on_exit = StopOnDrop(stop);
            tui::run_ui(rx, tx, stop, opts)
        };
        stop.store(true, Ordering::SeqCst);
        let collected = collector
            .join()
            .unwrap_or_else(|_| Err(anyhow::anyhow!("the collector thread panicked")));
        ui.and(collected)
    })
}

struct StopOnDrop<'a>(&'a AtomicBool);

impl Drop for StopOnDrop<'_> {
    fn drop(&mut self) {
        if std::thread::panicking() {
            self.0.store(true, Ordering::SeqCst);
        }
    }
}

fn filters(args: &Args) -> Filters {
    Filters {
        pid: dedup(&args.pid),
        comm: dedup(&args.comm),
        port: dedup(&args.port),
        proto: args.proto.clone(),
        cgroup: None,
    }
}

/// `--cgroup`, `--container` and `--pod`, resolved to the cgroups the kernel compares.
fn cgroup_filters(args: &Args) -> Result<Vec<ebtop::cgroups::CgroupFilter>> {
    let mut paths: Vec<String> = args.cgroup.clone().unwrap_or_default();
    for id in args.container.iter().flatten() {
        paths.push(ebtop::cgroups::container_cgroup(id)?);
    }
    for pod in args.pod.iter().flatten() {
        paths.push(ebtop::pods::pod_cgroup(pod)?);
    }
    if paths.is_empty() {
        return Ok(Vec::new());
    }
    let mount = ebtop::cgroups::cgroup2_mount()?;
    let mut out: Vec<ebtop::cgroups::CgroupFilter> = Vec::new();
    for p in &paths {
        let c = ebtop::cgroups::resolve(p, &mount)?;
        if !out.contains(&c) {
            out.push(c);
        }
    }
    Ok(out)
}

/// A list option's values without repeats, in the order given.
fn dedup<T: PartialEq + Clone>(values: &Option<Vec<T>>) -> Option<Vec<T>> {
    values.as_ref().map(|v| {
        let mut out: Vec<T> = Vec::with_capacity(v.len());
        for x in v {
            if !out.contains(x) {
                out.push(x.clone());
            }
        }
        out
    })
}

/// The JSON line types and detail asked for (`--only`, `--overhead-programs`).
fn json_lines(args: &Args) -> LineSelection {
    let mut sel = match &args.only {
        // Each name was checked when the command line was parsed.
        Some(types) => LineSelection::only(types).unwrap_or_default(),
        None => LineSelection::default(),
    };
    sel.overhead_programs = args.overhead_programs;
    sel
}

/// Whether any output of the session uses the payload capture (calls and what is derived
/// from them): the screen, recordings and `--prometheus` do; `--json --only` with flow or overhead lines
/// alone does not, and then its programs stay detached.
fn wants_capture(args: &Args) -> bool {
    let sel = json_lines(args);
    !args.json
        || args.write.is_some()
        || args.prometheus.is_some()
        || args.otlp.is_some()
        || ["proc", "call", "exit", "endpoint", "process"]
            .iter()
            .any(|t| sel.wants(t))
}

/// Whether the TLS probes are placed: `--tls on|off`, else whenever a captured protocol may
/// come over TLS — not for `--proto dns` alone (DNS over TLS is rare: `--tls on` asks for it),
/// never without the payload capture (the plaintext goes out through it).
fn wants_tls(args: &Args) -> bool {
    use ebtop::protocols::Protocol;
    if !wants_capture(args) {
        return false;
    }
    match args.tls {
        Some(on_off) => on_off == ebtop::cli::OnOff::On,
        None => args
            .proto
            .as_ref()
            .is_none_or(|ps| ps.iter().any(|p| *p != Protocol::Dns)),
    }
}

/// -w alone records without a UI (e.g. under nohup); --tui shows it while recording.
fn shows_tui(args: &Args) -> bool {
    !args.json && (args.write.is_none() || args.tui)
}

/// `--max-cpu` (or its environment default), `--sample`: what decides which connections are
/// captured.
fn sampling_mode(args: &Args) -> Result<ebtop::source::sampling::SamplingMode> {
    use ebtop::source::sampling::SamplingMode;
    if let Some(pct) = args.sample {
        return Ok(SamplingMode::Fixed(pct / 100.0));
    }
    Ok(match args.cpu_budget().map_err(anyhow::Error::msg)? {
        Some(budget) => SamplingMode::Budget(budget),
        None => SamplingMode::Off,
    })
}

fn tracking_threads(args: &Args) -> usize {
    let cpus = std::thread::available_parallelism().map_or(1, usize::from);
    args.threads.resolve(cpus)
}

/// The kernel copies connections of protocols it does not recognise: `--capture-all`, or a
/// plugin that parses a protocol of its own.
fn capture_all(args: &Args) -> bool {
    args.capture_all || ebtop::plugins::wants_unrecognised(ebtop::plugins::session())
}

fn tracker_config(args: &Args) -> TrackerConfig {
    TrackerConfig {
        depth: match args.depth {
            Depth::Shallow => ParseDepth::Shallow,
            Depth::Full => ParseDepth::Full,
        },
        // Message heads are kept only for a person to read in the call details.
        keep_head: if shows_tui(args) {
            ebtop::tui::KEEP_HEAD_BYTES
        } else {
            0
        },
        // The kernel selects protocols it recognises; this catches the rest (--capture-all).
        protocols: filters(args).protocols(),
        ..TrackerConfig::default()
    }
}

/// `rewind`: a replay's viewer may ask it to go back in recorded time (the terminal UI).
fn session<S: Sink>(
    args: &Args,
    stop: &Arc<AtomicBool>,
    sink: S,
    rewind: Option<&ebtop::tui::ReplayControl>,
    prometheus: Option<PrometheusExporter>,
) -> Result<()> {
    let otlp = args
        .otlp
        .as_ref()
        .map(|url| {
            OtlpExporter::start(OtlpOptions {
                url: url.clone(),
                query_text: args.otlp_query_text,
                mode: if args.read.is_some() {
                    OtlpMode::Replay
                } else {
                    OtlpMode::Live
                },
                final_wait: ebtop::sink::otlp::FINAL_WAIT,
                flow_logs: args.otlp_flow_logs,
            })
        })
        .transpose()?;
    let sink = Exporting::new(sink, prometheus).with_otlp(otlp);
    match &args.read {
        Some(_) if args.profile => {
            bail!(
                "--profile is live only: a replay shows the profiles its recording holds \
                 (recorded with --profile -w) without it"
            )
        }
        Some(path) => replay_session(args, path, stop, sink, rewind),
        None => live_session(args, stop, sink),
    }
}

fn report_recording(args: &Args, summary: &Summary) {
    if let (Some(path), false) = (&args.write, args.json) {
        let dropped = summary.recording_dropped_events.unwrap_or(0);
        ebtop::diag!(
            "ebtop: recorded {} events ({} calls) to {}{}",
            summary.events - summary.filtered_events,
            summary.calls,
            path.display(),
            if dropped > 0 {
                format!(", {dropped} events dropped (disk too slow)")
            } else {
                String::new()
            }
        );
    }
}

fn live_session<S: Sink>(args: &Args, stop: &Arc<AtomicBool>, sink: S) -> Result<()> {
    ebtop::preflight::check_privileges()?;
    let cgroups = cgroup_filters(args)?;
    for pid in args.pid.iter().flatten() {
        if !ebtop::procfs::exists(*pid) {
            ebtop::diag!(
                "ebtop: warning: no process {pid} is running: nothing is traced unless a process \
                 with that id starts"
            );
        }
    }
    let mut filters = filters(args);
    if !cgroups.is_empty() {
        filters.cgroup = Some(cgroups.iter().map(|c| c.path.clone()).collect());
    }
    // Before any capture thread starts: they inherit it.
    ebtop::preflight::set_capture_priority(args.nice);
    let clock = WallClock::live();
    let mut meta = SessionMeta::this_host("live", args.snaplen, filters.clone(), clock.offset_ns);
    let mut pipeline = Pipeline::new(tracker_config(args), ProcessTable::new(true), sink)
        .with_raw_resources(args.raw_resources)
        .with_call_filter(args.filter.clone().unwrap_or_default());
    if let Some(path) = &args.write {
        // What can fail before loading fails before the file exists: a failed start leaves no
        // empty recording behind (which a retry without --force would refuse).
        ebtop::preflight::check_btf()?;
        ebtop::preflight::ensure_tracefs()?;
        let (processes, sockets) = record::scan_proc(100_000);
        let header = RecordingHeader {
            meta: meta.clone(),
            options: RecordOptions {
                snaplen: args.snaplen,
                filters: filters.clone(),
                capture_all: capture_all(args),
                delay_ns: args.delay.as_nanos() as u64,
                serving_links: serving_links(args),
            },
            processes,
            sockets,
        };
        pipeline = pipeline
            .with_recorder(Recorder::create(path, &header, args.force)?)
            .stop_on_recording_failure(Arc::clone(stop));
    }
    let pipeline = pipeline.with_threads(tracking_threads(args));
    let live_cfg = LiveConfig {
        snaplen: args.snaplen,
        copy_whole: args.copy_whole,
        ringbuf_bytes: args.ringbuf_mb.map(|mb| mb * 1024 * 1024),
        capture_all: capture_all(args),
        filters,
        verbose: args.verbose,
        max_flows: args.max_flows,
        ifaces: ebtop::source::flow_table::iface::IfaceSelection::parse(&args.iface)?,
        max_iface_flows: args.max_iface_flows,
        hooks: args.hooks,
        capture: wants_capture(args),
        tls: wants_tls(args),
        flow_table: json_lines(args).wants_flows()
            || !args.iface.is_empty()
            || !args.json
            || args.write.is_some()
            || args.otlp_flow_logs,
        cgroups,
        bpf_stats: args.bpf_stats.into(),
        tracking_threads: tracking_threads(args),
        sampling: sampling_mode(args)?,
    };
    // Rules parsed before anything loads: a typo is a one-line error at once.
    let rules = args
        .profile_when
        .iter()
        .map(|r| ebtop::profile::trigger::parse(r, args.delay))
        .collect::<std::result::Result<Vec<_>, String>>()
        .map_err(|e| anyhow::anyhow!(e))?;
    let idle_gate = if rules.is_empty() {
        ebtop::profile::kernel::Gate::Open
    } else {
        ebtop::profile::kernel::Gate::Closed
    };
    // Its own object and thread; it loads while the capture does.
    let mut profiler = args
        .profile
        .then(|| {
            ebtop::profile::kernel::ProfileProbe::spawn(
                ebtop::profile::kernel::ProfileConfig {
                    hz: args.profile_hz,
                    off_cpu_min: args.profile_off_cpu_min.0,
                    filters: live_cfg.filters.clone(),
                    cgroups: live_cfg.cgroups.clone(),
                    gate: idle_gate.clone(),
                    threads: args.profile_threads,
                },
                args.delay,
            )
        })
        .transpose()
        .context("--profile")?;
    let pipeline = match profiler.as_mut().and_then(|p| p.take_intervals()) {
        Some(feed) => {
            meta.loaded.push("profile".to_owned());
            let gate = profiler.as_ref().map(|p| p.gate()).expect("a profiler");
            let requests = pipeline.sink().profile_requests();
            let triggers = ebtop::profile::trigger::Triggers::new(
                rules,
                args.profile_for,
                args.profile_silence,
            );
            let pipeline = if serving_links(args) {
                pipeline.with_serving_links(ebtop::profile::serving::retain_for_delay(
                    args.delay.as_nanos() as u64,
                ))
            } else {
                pipeline
            };
            pipeline.with_profile_feed(feed).with_triggers(
                ebtop::profile::trigger::TriggerCtl::new(triggers, gate, idle_gate)
                    .with_filters(live_cfg.filters.clone())
                    .with_requests(requests),
            )
        }
        None => pipeline,
    };
    let start = monotonic_ns();
    live::run(
        &live_cfg,
        pipeline,
        stop,
        args.duration,
        args.delay,
        &meta,
        |pipeline, counters, reason| {
            let profile = profiler.map(|p| p.finish()).transpose()?;
            if reason == StopReason::OutputClosed {
                return Ok(());
            }
            // The session's `profile` lines come from the pipeline (the intervals it was fed).
            if let Some(profile) = profile {
                write_profile(args, &profile)?;
            }
            let (_, summary) = pipeline.finish(counters, monotonic_ns() - start)?;
            report_recording(args, &summary);
            recording_outcome(&summary)
        },
    )
}

/// Whether off-CPU blocks are linked to the calls their threads served: with an off-CPU
/// profile (src/profile/serving.rs).
fn serving_links(args: &Args) -> bool {
    args.profile && args.profile_off_cpu_min.0.is_some()
}

/// `--profile-out`'s folded files, and the hints for processes whose stacks stop short.
fn write_profile(args: &Args, profile: &ebtop::profile::Profile) -> Result<()> {
    for hint in profile.unwind_hints() {
        ebtop::diag!("{hint}");
    }
    let Some(path) = &args.profile_out else {
        return Ok(());
    };
    // pprof where the name says so, folded stacks otherwise.
    let pprof = path.to_string_lossy().ends_with(".pb.gz");
    let write = |path: &std::path::Path, on_cpu: bool| -> Result<()> {
        let mut out = std::io::BufWriter::new(
            std::fs::File::create(path).with_context(|| format!("creating {}", path.display()))?,
        );
        if pprof {
            ebtop::profile::pprof::write_gz(
                profile,
                on_cpu,
                profile.start_unix_ns,
                profile.duration_ns,
                &mut out,
            )?;
        } else {
            profile.write_folded(on_cpu, &mut out)?;
        }
        std::io::Write::flush(&mut out).with_context(|| format!("writing {}", path.display()))
    };
    write(path, true)?;
    if profile.off_cpu_min_ns.is_some() {
        write(&ebtop::profile::off_cpu_path(path), false)?;
    }
    Ok(())
}

fn replay_session<S: Sink>(
    args: &Args,
    path: &std::path::Path,
    stop: &Arc<AtomicBool>,
    sink: S,
    rewind: Option<&ebtop::tui::ReplayControl>,
) -> Result<()> {
    // The viewer may go back in time (not while writing a copy: it would hold parts twice).
    // (Writing a copy, a rewind asked stops the replay short, as it always did.)
    let Some(rewind) = rewind.filter(|_| args.write.is_none()) else {
        return replay_to_output(args, path, stop, sink, rewind.map(|r| r as &dyn Rewind));
    };
    let (mut reader, meta) = open_recording(args, path)?;
    let mut sink = sink;
    loop {
        let mut pipeline =
            replay_pipeline(args, sink, &reader.header).with_threads(tracking_threads(args));
        pipeline.start(&meta)?;
        let end = replay::run_rewindable(
            &mut reader,
            &mut pipeline,
            stop,
            Some(rewind as &dyn Rewind),
        )?;
        if end.rewound && !stop.load(Ordering::Relaxed) {
            sink = pipeline.into_sink();
            rewind.take();
            reader = record::reader::open(path)?;
            continue;
        }
        let stats = reader.stats;
        let (done, _) = pipeline.finish(&end.kernel, end.duration_ns)?;
        // The last numbers stay on screen; the viewer may still go back.
        while !stop.load(Ordering::Relaxed) && !rewind.requested() {
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        if !stop.load(Ordering::Relaxed) {
            rewind.take();
            sink = done;
            reader = record::reader::open(path)?;
            continue;
        }
        warn_about_recording(path, stats, end.complete);
        return Ok(());
    }
}

/// A recording opened, and the `meta` its replay shows: the recording's, its selection
/// narrowed by this run's filters.
fn open_recording(
    args: &Args,
    path: &std::path::Path,
) -> Result<(
    record::reader::RecordingReader<std::fs::File>,
    ebtop::session_meta::SessionMeta,
)> {
    let reader = record::reader::open(path)?;
    let mut meta = replay::replay_meta(&reader);
    meta.filters = meta.filters.narrowed_by(&filters(args));
    Ok((reader, meta))
}

/// The pipeline a replay feeds (no /proc: the processes are the recording's).
fn replay_pipeline<S: Sink>(args: &Args, sink: S, header: &RecordingHeader) -> Pipeline<S> {
    let p = Pipeline::new(tracker_config(args), ProcessTable::new(false), sink)
        .with_raw_resources(args.raw_resources)
        .with_filters(filters(args))
        .with_call_filter(args.filter.clone().unwrap_or_default());
    if header.options.serving_links {
        p.with_serving_links(ebtop::profile::serving::retain_for_delay(
            header.options.delay_ns,
        ))
    } else {
        p
    }
}

/// A copy of a recording (`-r FILE -w OUT`) or a replay to JSON: replayed once.
fn replay_to_output<S: Sink>(
    args: &Args,
    path: &std::path::Path,
    stop: &Arc<AtomicBool>,
    sink: S,
    rewind: Option<&dyn Rewind>,
) -> Result<()> {
    let (mut reader, meta) = open_recording(args, path)?;
    // --from/--to: the lines about what happened in the range (the whole range by default).
    let range = replay::TimeRange::of(args.from, args.to, &meta);
    let mut pipeline = replay_pipeline(args, replay::InRange::new(sink, range), &reader.header);
    if let Some(out) = &args.write {
        if std::fs::canonicalize(out).ok() == std::fs::canonicalize(path).ok() {
            anyhow::bail!(
                "-w {} is the recording being read: write the copy to another file",
                out.display()
            );
        }
        let mut header = reader.header.clone();
        let f = filters(args);
        // The copy's filters: the recording's, narrowed by these.
        header.options.filters = header.options.filters.narrowed_by(&f);
        header.meta.filters = meta.filters.clone();
        pipeline = pipeline
            .with_recorder(Recorder::create(out, &header, args.force)?)
            .stop_on_recording_failure(Arc::clone(stop));
    }
    let mut pipeline = pipeline.with_threads(tracking_threads(args));
    pipeline.start(&meta)?;
    let end = replay::run_rewindable(&mut reader, &mut pipeline, stop, rewind)?;
    let stats = reader.stats;
    let (_, summary) = pipeline.finish(&end.kernel, end.duration_ns)?;
    report_recording(args, &summary);
    let _ = io::stdout().flush();
    warn_about_recording(path, stats, end.complete);
    recording_outcome(&summary)
}

/// What reading a recording met that the user should know: corrupt frames, a missing end.
fn warn_about_recording(path: &std::path::Path, stats: record::ReadStats, complete: bool) {
    if stats.corrupt_frames > 0 {
        ebtop::diag!(
            "ebtop: warning: {} corrupt frame(s) in {} skipped ({} bytes); the rest was replayed",
            stats.corrupt_frames,
            path.display(),
            stats.skipped_bytes
        );
    }
    if stats.truncated_bytes > 0 || !complete {
        ebtop::diag!(
            "ebtop: warning: {} ends before its end record (cut short or still being written); \
             replayed up to its last whole frame, {} trailing bytes not readable",
            path.display(),
            stats.truncated_bytes
        );
    }
}
