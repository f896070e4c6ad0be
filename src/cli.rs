//! Command line (the man page, man/ebtop.1, documents the same options).

use std::time::Duration;

use clap::parser::ValueSource;
use clap::{ArgMatches, Parser, Subcommand, ValueEnum};

/// `--profile-off-cpu-min`: a duration, or `off` (no off-CPU profile).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OffCpuMin(pub Option<Duration>);

fn off_cpu_min(s: &str) -> Result<OffCpuMin, String> {
    if s == "off" {
        return Ok(OffCpuMin(None));
    }
    duration(s).map(|d| OffCpuMin(Some(d)))
}

fn duration(s: &str) -> Result<Duration, String> {
    let d = humantime::parse_duration(s).map_err(|e| format!("{e} (examples: 10s, 1m, 500ms)"))?;
    if d.is_zero() {
        return Err("must be greater than zero".into());
    }
    Ok(d)
}

fn ringbuf_mb(s: &str) -> Result<u32, String> {
    let v: u32 = s
        .parse()
        .map_err(|_| "expected a number of MiB".to_string())?;
    if !(1..=1024).contains(&v) || !v.is_power_of_two() {
        return Err("must be a power of two from 1 to 1024".into());
    }
    Ok(v)
}

fn speed(s: &str) -> Result<f64, String> {
    let v: f64 = s
        .parse()
        .map_err(|_| "expected a number, e.g. 1, 10, 0.5".to_string())?;
    // Bounded: a pace far from 1 turns recorded nanoseconds into durations that overflow.
    if !(v.is_finite() && (0.001..=1_000_000.0).contains(&v)) {
        return Err("must be from 0.001 to 1000000".into());
    }
    Ok(v)
}

/// `--max-cpu`: a percentage of one CPU (above 0, at most 100 per CPU), or `off`.
fn max_cpu(s: &str) -> Result<MaxCpu, String> {
    if s == "off" {
        return Ok(MaxCpu(None));
    }
    let pct: f64 = s
        .trim_end_matches('%')
        .parse()
        .map_err(|_| format!("{s:?} is not a percentage of one CPU (e.g. 10) or off"))?;
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get()) as f64;
    if !(pct > 0.0 && pct <= 100.0 * cpus) {
        return Err(format!(
            "{s}: a budget is above 0 and at most 100 per CPU ({})",
            100.0 * cpus
        ));
    }
    Ok(MaxCpu(Some(pct)))
}

/// `--max-cpu`: None is off (no budget).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct MaxCpu(pub Option<f64>);

/// `--max-cpu` when neither it nor `EBTOP_MAX_CPU` is given, % of one CPU.
pub const DEFAULT_MAX_CPU_PCT: f64 = 25.0;

/// The environment variable that replaces `--max-cpu`'s default (`off` or a percentage).
pub const MAX_CPU_ENV: &str = "EBTOP_MAX_CPU";

impl Args {
    /// The CPU budget, % of one CPU (None: off): `--max-cpu`, else `EBTOP_MAX_CPU`, else
    /// [`DEFAULT_MAX_CPU_PCT`].
    pub fn cpu_budget(&self) -> Result<Option<f64>, String> {
        if let Some(m) = self.max_cpu {
            return Ok(m.0);
        }
        match std::env::var(MAX_CPU_ENV) {
            Ok(v) => max_cpu(v.trim())
                .map(|m| m.0)
                .map_err(|e| format!("{MAX_CPU_ENV}={v:?}: {e}")),
            Err(std::env::VarError::NotUnicode(_)) => Err(format!(
                "{MAX_CPU_ENV} is not text: unset it or set off or a percentage"
            )),
            Err(std::env::VarError::NotPresent) => Ok(Some(DEFAULT_MAX_CPU_PCT)),
        }
    }
}

/// `--sample`: a share of connections, 0–100%.
fn sample_pct(s: &str) -> Result<f64, String> {
    let pct: f64 = s
        .trim_end_matches('%')
        .parse()
        .map_err(|_| format!("{s:?} is not a percentage (0-100)"))?;
    if !(0.0..=100.0).contains(&pct) {
        return Err(format!("{s}: a share of connections is 0-100"));
    }
    Ok(pct)
}

fn replay_time(s: &str) -> Result<crate::driver::replay::ReplayTime, String> {
    crate::driver::replay::ReplayTime::parse(s)
}

fn protocol(s: &str) -> Result<crate::protocols::Protocol, String> {
    use crate::protocols::Protocol;
    Protocol::from_name(s).ok_or_else(|| {
        let known: Vec<&str> = Protocol::all().map(|p| p.name()).collect();
        format!("unknown protocol (known: {})", known.join(", "))
    })
}

fn call_filter(s: &str) -> Result<crate::call_filter::CallFilter, String> {
    crate::call_filter::CallFilter::parse(s)
}

fn line_type(s: &str) -> Result<String, String> {
    crate::sink::json::LineSelection::only(&[s])?;
    Ok(s.to_owned())
}

/// `--bpf-stats`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum BpfStatsArg {
    Sampled,
    Full,
}

impl From<BpfStatsArg> for crate::aggregate::StatsMode {
    fn from(a: BpfStatsArg) -> Self {
        match a {
            BpfStatsArg::Sampled => crate::aggregate::StatsMode::Sampled,
            BpfStatsArg::Full => crate::aggregate::StatsMode::Full,
        }
    }
}

/// Where socket data is captured (`--hooks`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Hooks {
    /// The socket layer where the kernel has it (tp_btf sock_send_length/sock_recv_length,
    /// Linux ≥ 6.3 with BTF), else the syscall tracepoints.
    Auto,
    /// The socket layer: nothing added to unrelated syscalls; fails if the kernel lacks it.
    Socket,
    /// Syscall tracepoints (read, write, sendmsg, …): the fallback for older kernels.
    Syscalls,
}

/// Whether TLS plaintext is captured (`--tls`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum OnOff {
    On,
    Off,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Depth {
    /// Only what identifies a call: method, resource, status, framing.
    Shallow,
    /// Also optional details such as the HTTP Host header.
    Full,
}

/// top for L7 calls: live HTTP calls with latency, from eBPF socket-layer and syscall tracepoints.
#[derive(Debug, Parser)]
#[command(
    name = "ebtop",
    version,
    about,
    max_term_width = 100,
    args_conflicts_with_subcommands = true
)]
pub struct Args {
    #[command(subcommand)]
    pub command: Option<Command>,

    /// Print JSON lines instead of the terminal UI: one object per line, its kind in `type`
    /// (meta, proc, call, exit, endpoint, process, overhead, flow, flow_end, flow_stats, drop, profile, lost,
    /// summary); units in field names (`latency_ns`, `req_bytes`); times in RFC 3339 UTC.
    #[arg(long)]
    pub json: bool,

    /// Serve ebtop's aggregates for Prometheus at http://ADDR/metrics (OpenMetrics or the
    /// classic text format): per-endpoint latency histograms with OpenTelemetry's names, calls
    /// by outcome, bytes, and ebtop's own counters. ADDR is HOST:PORT (port 0: any free one,
    /// said on stderr). Live and in replay.
    #[arg(long, value_name = "ADDR")]
    pub prometheus: Option<String>,

    /// Export calls as OpenTelemetry spans (kind SERVER/CLIENT, semantic-convention
    /// attributes, the application's trace from a `traceparent` header) and the aggregates as
    /// cumulative metrics to an OTLP/HTTP collector at URL (http://HOST:4318), protobuf, from
    /// a queue of its own: when the collector is down or slow, spans are dropped and counted,
    /// capture never waits. Live and in replay (recorded times).
    #[arg(long, value_name = "URL")]
    pub otlp: Option<String>,

    /// With --otlp: SQL statements as `db.query.text` (literals kept, passwords redacted).
    /// Off by default: statements carry the application's data.
    #[arg(long, requires = "otlp")]
    pub otlp_query_text: bool,

    /// With --otlp: each TCP flow's end as an OpenTelemetry log record (event
    /// `ebtop.flow.end`: addresses, process, bytes, segments, retransmits, resets, RTT,
    /// duration, close reason) to the collector's /v1/logs. The flow table runs for it.
    #[arg(long, requires = "otlp")]
    pub otlp_flow_logs: bool,

    /// Profile the processes the session traces (--pid, --comm, --cgroup; all without them):
    /// on-CPU stacks sampled on every CPU (--profile-hz) and off-CPU time per stack (blocks
    /// of at least --profile-off-cpu-min), counted in the kernel. User stacks are walked by
    /// frame pointers: code built without them gives short stacks (a hint says so). Written
    /// every interval and at the end as `profile` JSON lines, at the end with --profile-out;
    /// the terminal UI's Profile view (5); recorded with -w, symbolized (-r shows it without
    /// the binaries). Live only.
    #[arg(long)]
    pub profile: bool,

    /// With --profile: on-CPU samples per second on each CPU (1-1000).
    #[arg(long, value_name = "HZ", default_value_t = 99, requires = "profile",
          value_parser = clap::value_parser!(u32).range(1..=1000))]
    pub profile_hz: u32,

    /// With --profile: the shortest block added to the off-CPU profile (shorter ones are
    /// counted only); `off`: no off-CPU profile (no sched_switch program).
    #[arg(long, value_name = "DURATION|off", default_value = "1ms", requires = "profile",
          value_parser = off_cpu_min)]
    pub profile_off_cpu_min: OffCpuMin,

    /// With --profile: write the on-CPU profile to FILE and the off-CPU one beside it: gzipped
    /// pprof (go tool pprof, Pyroscope) when FILE ends in .pb.gz (X.pb.gz, X.off-cpu.pb.gz),
    /// else folded stacks for flamegraph.pl or speedscope (FILE: samples, FILE.off-cpu:
    /// nanoseconds), one line per stack: `comm-pid;root;…;leaf count`.
    #[arg(long, value_name = "FILE", requires = "profile")]
    pub profile_out: Option<std::path::PathBuf>,

    /// With --profile: keep stacks per thread (the kernel counts them per thread; without
    /// this a process's threads are added up): `profile` lines give each stack's `tid`,
    /// --profile-out's pprof samples a `tid` label, the terminal UI's Profile view steps
    /// through threads too (w).
    #[arg(long, requires = "profile")]
    pub profile_threads: bool,

    /// With --profile: profile only when RULE holds (repeatable; the first that holds fires),
    /// the processes it names, for --profile-for; then no rule fires for --profile-silence.
    /// The programs stay loaded, selecting nothing in between. RULE: `cpu>80%` (a process's
    /// CPU, 100% = one core), `p99(GLOB)>200ms` (endpoints whose resource matches GLOB),
    /// `errors>5%` or `errors(GLOB)>5%`; `>`, `>=`, `<`, `<=`; then `:M/N` (true in M of
    /// the last N intervals) or `:M/Ns` (of the last N seconds), e.g. `cpu>80%:3/5s`.
    #[arg(long, value_name = "RULE", requires = "profile")]
    pub profile_when: Vec<String>,

    /// With --profile: how long a trigger (--profile-when, the terminal UI's P key) profiles.
    #[arg(long, value_name = "DURATION", value_parser = duration, default_value = "10s",
          requires = "profile")]
    pub profile_for: Duration,

    /// With --profile-when: after a triggered profile ends, how long no rule fires.
    #[arg(long, value_name = "DURATION", value_parser = duration, default_value = "60s",
          requires = "profile")]
    pub profile_silence: Duration,

    /// Record what the probes deliver to FILE (zstd frames, mode 0600), alone or with --json.
    /// With -r, writes the records that pass the filters: a filtered copy.
    #[arg(short = 'w', long = "write", value_name = "FILE")]
    pub write: Option<std::path::PathBuf>,

    /// Replay a recording instead of capturing live (no root needed). Filters apply as live.
    #[arg(short = 'r', long = "read", value_name = "FILE")]
    pub read: Option<std::path::PathBuf>,

    /// Let -w overwrite an existing file.
    #[arg(long)]
    pub force: bool,

    /// Stop after this long (e.g. 10s, 2m, 500ms). Default: until Ctrl-C.
    #[arg(long, value_name = "DURATION", value_parser = duration)]
    pub duration: Option<Duration>,

    /// Interval between periodic reports (lost events, aggregates).
    #[arg(short = 'd', long, value_name = "DURATION", value_parser = duration, default_value = "1s")]
    pub delay: Duration,

    /// Trace only these processes (thread group ids: -p 1,2 or -p 1 -p 2; at most 8).
    /// Applied in the kernel.
    #[arg(short = 'p', long, value_name = "PID", value_delimiter = ',')]
    pub pid: Option<Vec<u32>>,

    /// Trace only processes with these command names (first 15 bytes, as in
    /// /proc/PID/comm; a list or repeated, at most 8). Applied in the kernel.
    #[arg(long, value_name = "NAME", value_delimiter = ',')]
    pub comm: Option<Vec<String>>,

    /// Trace only connections with one of these local or remote ports (a list or repeated,
    /// at most 8). Applied in the kernel.
    #[arg(long, value_name = "PORT", value_delimiter = ',')]
    pub port: Option<Vec<u16>>,

    /// Trace only processes in these cgroups (v2 paths such as /system.slice/nginx.service,
    /// or directories of the mounted hierarchy) or beneath them; at most 8 with --container
    /// and --pod.
    /// Applied in the kernel to calls and process records; flows are listed by owner as ever.
    #[arg(long, value_name = "PATH", value_delimiter = ',')]
    pub cgroup: Option<Vec<String>>,

    /// Trace only processes in these containers (ids as `docker ps` shows them, from the
    /// cgroups of the processes running now). Applied in the kernel, as --cgroup.
    #[arg(long, value_name = "ID", value_delimiter = ',')]
    pub container: Option<Vec<String>>,

    /// Trace only processes in these Kubernetes pods (NAME or NAMESPACE/NAME, found in the
    /// kubelet's /var/log/pods; their cgroups from the processes running now). Applied in the
    /// kernel, as --cgroup.
    #[arg(long, value_name = "POD", value_delimiter = ',')]
    pub pod: Option<Vec<String>>,

    /// Trace only connections of these application protocols (comma-separated, e.g. http).
    /// Applied in the kernel; flows (TCP/UDP) are not affected.
    #[arg(long, value_name = "LIST", value_delimiter = ',', value_parser = protocol)]
    pub proto: Option<Vec<crate::protocols::Protocol>>,

    /// Show only the calls EXPR matches, in the filter language of the terminal UI's `/`
    /// (`'lat>100ms or err'`, `'proto:redis status:ERR'`): the `call` lines and the Calls
    /// view. Endpoints, processes, flows and the summary still count every call; a
    /// recording (-w) keeps every record.
    #[arg(long, value_name = "EXPR", value_parser = call_filter)]
    pub filter: Option<crate::call_filter::CallFilter>,

    /// Payload bytes copied per syscall (0–16384). Longer bodies are skipped by byte count;
    /// headers longer than this are not parsed.
    #[arg(long, value_name = "BYTES", default_value_t = 4096,
          value_parser = clap::value_parser!(u32).range(0..=16384))]
    pub snaplen: u32,

    /// Sends and receives of Redis, Memcached, PostgreSQL and MySQL connections up to this many
    /// bytes are copied whole, not cut at --snaplen (0–262144; 0: off): a pipeline of
    /// thousands of commands in one write stays exact. Costs ring bytes (what those
    /// connections move) and this much kernel memory per CPU.
    #[arg(long, value_name = "BYTES", default_value_t = 262_144,
          value_parser = clap::value_parser!(u32).range(0..=262_144))]
    pub copy_whole: u32,

    /// Event ring size in MiB (power of two), shared by the rings of the tracking threads
    /// (one each). Larger absorbs longer bursts. Default: 16, and 8 per tracking thread with
    /// more than one.
    #[arg(long, value_name = "MIB", value_parser = ringbuf_mb)]
    pub ringbuf_mb: Option<u32>,

    /// Copy payload of every TCP/UDP connection, not only connections whose first bytes the
    /// kernel recognises as a supported protocol.
    #[arg(long)]
    pub capture_all: bool,

    /// Load a WebAssembly protocol plugin (repeatable; live and with -r): a protocol of its
    /// own on the TCP (or UDP) ports its manifest names, or fields of HTTP/1 and Redis calls.
    /// A parse plugin makes the kernel copy connections it does not recognise (as
    /// --capture-all).
    #[arg(long, value_name = "FILE.wasm")]
    pub plugin: Vec<std::path::PathBuf>,

    /// Let plugins import WASI (Go's wasip1 guests), given deterministic stubs: no args or
    /// environment, a clock of their own from 0, fixed random bytes, writes discarded and
    /// counted, proc_exit a trap.
    #[arg(long, requires = "plugin")]
    pub plugin_wasi_stubs: bool,

    /// Endpoints keyed on the raw resource (`/users/123`) instead of the normalised one
    /// (`/users/{id}`); the endpoint cap still holds.
    #[arg(long)]
    pub raw_resources: bool,

    /// Show the terminal UI while recording with -w (without it, -w records without a UI).
    #[arg(long, conflicts_with = "json")]
    pub tui: bool,

    /// How much of each message to parse.
    #[arg(long, value_enum, default_value_t = Depth::Full)]
    pub depth: Depth,

    /// Terminal UI: times in UTC instead of the local time zone (TZ, else /etc/localtime).
    #[arg(long)]
    pub utc: bool,

    /// Terminal UI without colours (also when the NO_COLOR environment variable is set).
    #[arg(long)]
    pub no_color: bool,

    /// Terminal UI replaying -r FILE: play at this multiple of the recorded pace (e.g. 10, 0.5).
    #[arg(long, value_name = "FACTOR", default_value_t = 1.0, value_parser = speed)]
    pub speed: f64,

    /// Replay to JSON (-r FILE --json): only what happened from T on. T: an RFC 3339 time
    /// (2026-11-22T14:32:00Z, +01:00 offsets too) or an offset from the recording's start
    /// (+30s, +1m30s).
    #[arg(long, value_name = "T", value_parser = replay_time)]
    pub from: Option<crate::driver::replay::ReplayTime>,

    /// Replay to JSON (-r FILE --json): only what happened up to T (as --from).
    #[arg(long, value_name = "T", value_parser = replay_time)]
    pub to: Option<crate::driver::replay::ReplayTime>,

    /// Capacity of the kernel flow table (TCP flows tracked at once; ~256 bytes of kernel
    /// memory each, allocated only for live flows). Flows beyond it are counted, not tracked.
    #[arg(long, value_name = "N", default_value_t = crate::flows::DEFAULT_MAX_FLOWS,
          value_parser = clap::value_parser!(u32).range(1..=16_777_216))]
    pub max_flows: u32,

    /// Interface flows: bytes and packets per 5-tuple crossing these interfaces each way,
    /// whether or not a local socket sent or received them (forwarded, bridged, container to
    /// container traffic): tcx programs (a clsact filter before Linux 6.6), `iface` and
    /// `iface_flow` lines, the Flows view's interface panel. NAME[,NAME...] or `all` (every
    /// interface of ebtop's network namespace, also ones that appear later).
    #[arg(long, value_name = "NAME|all")]
    pub iface: Vec<String>,

    /// Capacity of the kernel's interface flow table (--iface): 5-tuples per interval, all
    /// interfaces together (~140 bytes per CPU each, allocated only for flows seen). What
    /// does not fit is counted per interface as `unattributed`.
    #[arg(long, value_name = "N", default_value_t = ebtop_iface_default(),
          value_parser = clap::value_parser!(u32).range(1..=4_194_304))]
    pub max_iface_flows: u32,

    /// Where socket data is captured: the socket layer (cheaper, sees io_uring and sendfile
    /// lengths), the syscall tracepoints, or auto (the socket layer where the kernel has it).
    #[arg(long, value_enum, default_value_t = Hooks::Auto)]
    pub hooks: Hooks,

    /// TLS plaintext (HTTPS, TLS database connections) from uprobes on OpenSSL's SSL_write and
    /// SSL_read in shared libssl and in programs linking it statically, and on Go's
    /// crypto/tls. Each probed call costs the traced process breakpoint traps (µs): the
    /// Processes view and `proc` lines show the hits. off: no uprobe is placed. Default: on,
    /// unless no output would use it (--only with flow, overhead lines alone; --proto dns
    /// alone: DNS over TLS, port 853, is asked for with --tls on).
    #[arg(long, value_enum)]
    pub tls: Option<OnOff>,

    /// ebtop's CPU budget, % of one CPU, counting its own threads and its BPF programs (which
    /// run in the traced processes' syscalls), or off. Within it every connection is captured
    /// (every call exact); above it ebtop captures a deterministic sample of connections,
    /// decided in the kernel once per connection (new connections first, then captured ones
    /// cut at a call boundary: every call seen is whole), and raises the sample again when
    /// the load falls; every figure made from a sample is marked (`sampling` lines, the
    /// header's SAMPLED). Default: the EBTOP_MAX_CPU environment variable if set, else 25
    /// (a quarter of one CPU: on a 2-core VM every call of an nginx serving 10,000
    /// requests/s is captured within it).
    #[arg(long, value_name = "PCT", value_parser = max_cpu)]
    pub max_cpu: Option<MaxCpu>,

    /// Capture a fixed, deterministic share of connections (0-100%), chosen by a hash of the
    /// socket in the kernel, whatever the load (marked as --max-cpu's sample is).
    #[arg(long, value_name = "PCT", value_parser = sample_pct, conflicts_with = "max_cpu")]
    pub sample: Option<f64>,

    /// How ebtop measures its own BPF run time: sampled (statistics on for the last tenth of
    /// each interval, scaled; they cost every BPF program on the host ~60-110 ns per run while
    /// on) or full (on all the time: exact counts).
    #[arg(long, value_enum, default_value_t = BpfStatsArg::Sampled)]
    pub bpf_stats: BpfStatsArg,

    /// Scheduling priority (nice value, -20..19) of ebtop's capture threads: the ring reader
    /// and the tracking threads. On a host saturated by the traced load they must still get
    /// the CPU they need, or the rings overflow and calls are lost (counted); the CPU they
    /// take is what the event rate asks for, no more. With several tracking threads, the thread
    /// that applies their results runs 5 steps above them. 0 leaves the priority as it is.
    #[arg(long, value_name = "N", default_value_t = DEFAULT_NICE, allow_hyphen_values = true,
          value_parser = clap::value_parser!(i32).range(-20..=19))]
    pub nice: i32,

    /// Threads that track connections and parse their payloads, each taking a share of the
    /// connections: a number, or auto (1 below 8 CPUs, else half the CPUs, at most 16). Live,
    /// each reads its own event ring (at most 16), their results merged back in time. Replays
    /// give the same output for any number.
    #[arg(long, value_name = "N|auto", default_value = "auto", value_parser = threads)]
    pub threads: Threads,

    /// With --json: write only these line types (comma-separated: proc, call, exit, endpoint,
    /// process, overhead, flow, flow_end, flow_stats, drop, profile); meta, lost and summary are always
    /// written. Live, only what they need is attached: the flow table only if a flow type is
    /// chosen; the payload capture, process events and TLS probes only if a call-derived type
    /// (proc, call, exit, endpoint, process) is (flow lines then carry no `l7`).
    #[arg(long, value_name = "TYPES", value_delimiter = ',', requires = "json",
          value_parser = line_type)]
    pub only: Option<Vec<String>>,

    /// With --json: `overhead` lines list each BPF program's runs and run time.
    #[arg(long, requires = "json")]
    pub overhead_programs: bool,

    /// Show libbpf's own messages and more detail on errors.
    #[arg(short, long)]
    pub verbose: bool,
}

/// What ebtop can do besides tracing.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Print a completion script for a shell, e.g.
    /// `ebtop completions bash > /etc/bash_completion.d/ebtop`.
    Completions {
        #[arg(value_enum)]
        shell: clap_complete::Shell,
    },
}

const fn ebtop_iface_default() -> u32 {
    crate::source::flow_table::iface::DEFAULT_MAX_IFACE_FLOWS
}

/// `--nice` by default: the capture threads' CFS weight is ~9x a nice-0 thread's, so a host
/// whose every core runs the traced load still leaves them the CPU they need (measured on 16
/// cores: docs/performance-history.md, "Many cores").
pub const DEFAULT_NICE: i32 = -10;

/// Options that only a live capture uses (argument ids).
const LIVE_ONLY: &[&str] = &[
    "snaplen",
    "copy_whole",
    "ringbuf_mb",
    "capture_all",
    "max_flows",
    "iface",
    "max_iface_flows",
    "hooks",
    "tls",
    "bpf_stats",
    "max_cpu",
    "sample",
    "nice",
    "duration",
    "cgroup",
    "container",
    "pod",
];

/// The command line, with the terminal UI's keys after `--help`'s options: a binary copied
/// onto a host has no man page beside it.
pub fn command() -> clap::Command {
    use clap::CommandFactory;
    let width = crate::tui::keys::KEYS
        .iter()
        .map(|k| k.keys.join(" ").chars().count())
        .max()
        .unwrap_or(0);
    let mut keys = String::from("Keys (terminal UI):\n");
    for k in crate::tui::keys::KEYS {
        keys.push_str(&format!("  {:width$}  {}\n", k.keys.join(" "), k.action));
    }
    Args::command().after_long_help(keys)
}

/// What is wrong with a command line that parsed: a filter with more values than the kernel
/// compares, or an option that does nothing in this kind of session (a live-only option with
/// -r, --speed anywhere but the terminal UI's replay) — said, not ignored.
pub fn usage_problem(m: &ArgMatches) -> Option<String> {
    let cgroups: usize = ["cgroup", "container", "pod"]
        .iter()
        .map(|id| m.get_raw(id).map_or(0, |v| v.len()))
        .sum();
    if cgroups > crate::filters::MAX_FILTER_VALUES {
        return Some(format!(
            "--cgroup, --container and --pod take at most {} values together (given {cgroups})",
            crate::filters::MAX_FILTER_VALUES
        ));
    }
    for id in ["pid", "comm", "port"] {
        let n = m.get_raw(id).map_or(0, |v| v.len());
        if n > crate::filters::MAX_FILTER_VALUES {
            return Some(format!(
                "--{id} takes at most {} values (given {n}): the kernel compares each one",
                crate::filters::MAX_FILTER_VALUES
            ));
        }
    }
    let given = |id: &str| m.value_source(id) == Some(ValueSource::CommandLine);
    let flag = |id: &str| format!("--{}", id.replace('_', "-"));
    let replay = given("read");
    if replay {
        if let Some(id) = LIVE_ONLY.iter().find(|id| given(id)) {
            return Some(format!(
                "{} applies to live capture, not to a replay (-r): the recording fixed it",
                flag(id)
            ));
        }
    }
    if given("speed") && (!replay || m.get_flag("json") || (given("write") && !m.get_flag("tui"))) {
        return Some("--speed paces the terminal UI's replay (-r FILE without --json)".to_owned());
    }
    if (given("from") || given("to")) && !(replay && m.get_flag("json")) {
        return Some(
            "--from/--to pick a time range of a replay to JSON (-r FILE --json); in the \
             terminal UI, :goto moves the replay"
                .to_owned(),
        );
    }
    let tui = !m.get_flag("json") && (!given("write") || m.get_flag("tui"));
    if given("filter") && !tui && !m.get_flag("json") {
        return Some(
            "--filter selects the calls shown (--json, the terminal UI); a recording (-w) keeps \
             every record"
                .to_owned(),
        );
    }
    if given("utc") && !tui {
        return Some("--utc applies to the terminal UI (JSON times are always UTC)".to_owned());
    }
    None
}

/// `--threads`: a count, or chosen from the CPUs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Threads {
    Auto,
    Count(usize),
}

/// Most tracking threads accepted (a replay's; live, at most 16 read rings of their own).
pub const MAX_THREADS: usize = 64;

impl Threads {
    /// The number of tracking threads on a host with `cpus` CPUs.
    pub fn resolve(self, cpus: usize) -> usize {
        match self {
            Threads::Count(n) => n,
            // Small hosts: the traced applications need the CPUs more than ebtop needs a
            // second thread (one thread takes > 1M records/s).
            Threads::Auto if cpus < 8 => 1,
            // A thread per two CPUs: 8 on 16 CPUs took ~1M spans/s (nginx 8 workers) with
            // nothing lost (docs/performance-history.md, "Many cores II").
            Threads::Auto => (cpus / 2).clamp(1, 16),
        }
    }
}

fn threads(s: &str) -> Result<Threads, String> {
    if s.eq_ignore_ascii_case("auto") {
        return Ok(Threads::Auto);
    }
    match s.parse::<usize>() {
        Ok(n) if (1..=MAX_THREADS).contains(&n) => Ok(Threads::Count(n)),
        _ => Err(format!(
            "expected auto or a number of threads from 1 to {MAX_THREADS}"
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn cli_is_consistent() {
        Args::command().debug_assert();
    }

    #[test]
    fn parses_durations_and_rejects_bad_values() {
        let a =
            Args::try_parse_from(["ebtop", "--json", "--duration", "10s", "--port", "80"]).unwrap();
        assert_eq!(a.duration, Some(Duration::from_secs(10)));
        assert!(Args::try_parse_from(["ebtop", "--duration", "0s"]).is_err());
        assert!(Args::try_parse_from(["ebtop", "--snaplen", "20000"]).is_err());
        assert!(Args::try_parse_from(["ebtop", "--ringbuf-mb", "3"]).is_err());
        assert!(Args::try_parse_from(["ebtop", "--bogus"]).is_err());
        assert!(Args::try_parse_from(["ebtop", "--speed", "0"]).is_err());
        assert!(Args::try_parse_from(["ebtop", "--speed", "-1"]).is_err());
        assert!(Args::try_parse_from(["ebtop", "--speed", "1e-20"]).is_err());
        assert!(Args::try_parse_from(["ebtop", "--speed", "inf"]).is_err());
        assert!(Args::try_parse_from(["ebtop", "--proto", "gopher"]).is_err());
        assert!(Args::try_parse_from(["ebtop", "--proto", ""]).is_err());
        assert!(Args::try_parse_from(["ebtop", "--threads", "0"]).is_err());
        assert!(Args::try_parse_from(["ebtop", "--threads", "65"]).is_err());
        assert!(Args::try_parse_from(["ebtop", "--threads", "two"]).is_err());
        let t = |v: &str| {
            Args::try_parse_from(["ebtop", "--threads", v])
                .unwrap()
                .threads
        };
        assert_eq!(t("3"), Threads::Count(3));
        assert_eq!(t("AUTO"), Threads::Auto);
        assert_eq!(Threads::Auto.resolve(2), 1);
        assert_eq!(Threads::Auto.resolve(8), 4);
        assert_eq!(Threads::Auto.resolve(16), 8);
        assert_eq!(Threads::Auto.resolve(128), 16);
        assert_eq!(Threads::Count(3).resolve(2), 3);
        assert_eq!(
            Args::try_parse_from(["ebtop", "--proto", "HTTP"])
                .unwrap()
                .proto,
            Some(vec![crate::protocols::Protocol::Http])
        );
        assert_eq!(
            Args::try_parse_from(["ebtop", "--speed", "2.5"])
                .unwrap()
                .speed,
            2.5
        );
    }
}
