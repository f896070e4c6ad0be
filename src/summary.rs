//! How a session ended: the last JSON line (`summary`).

use crate::conntrack::TrackerStats;
use crate::kernel_counters::KernelCounters;
use crate::protocols::ParseStats;

#[derive(Debug, Clone, Default, PartialEq, serde::Serialize)]
pub struct Summary {
    pub duration_ns: u64,
    pub calls: u64,
    pub calls_client: u64,
    pub calls_server: u64,
    /// Calls counted in every number but left out of the call outputs by the call filter
    /// (`--filter`; in the terminal UI also its Calls filter).
    pub calls_filtered_out: u64,
    /// Records received from the kernel (or the recording).
    pub events: u64,
    /// Records that did not decode (corrupt recording).
    pub decode_errors: u64,
    /// Records the user-space filters dropped (replay with --pid/--comm/--port).
    pub filtered_events: u64,
    pub kernel: KernelCounters,
    pub tracker: TrackerStats,
    pub parse: ParseStats,
    /// Since-start numbers of every endpoint (the RED table of the whole session).
    pub endpoints: Vec<crate::aggregate::EndpointSnapshot>,
    pub endpoint_table: crate::aggregate::EndpointTableStats,
    /// Process exec and exit records (after filters).
    pub process_execs: u64,
    pub process_exits: u64,
    /// Times the process table (16384 processes) was full and started over.
    pub process_table_resets: u64,
    /// With -w: events the recording thread could not keep up with.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub recording_dropped_events: Option<u64>,
    /// With -w: writing the recording failed (disk full, I/O error): the system's words. The
    /// recording ends with its last whole frame; the session stopped when it happened.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub recording_error: Option<String>,
    /// With -r: what reading the recording met.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub replay: Option<crate::record::read_stats::ReadStats>,
    /// With --otlp: spans exported and dropped (docs/fleet.md).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub otlp: Option<OtlpStats>,
    /// Call chains: links made and not made (src/chains.rs; absent with `EBTOP_CHAINS=0`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub chains: Option<crate::chains::ChainStats>,
    /// With --plugin: each plugin's calls, cost and faults (docs/plugins.md).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub plugins: Vec<crate::plugins::PluginOverhead>,
    /// When some interval was sampled (`--max-cpu`, `--sample`): what the session's numbers
    /// are a sample of. Absent when every connection was captured.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sampling: Option<SamplingTotals>,
}

/// The session's connection sampling (`summary.sampling`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct SamplingTotals {
    /// Intervals in which some send or receive was not captured (each has a `sampling` line).
    pub intervals: u64,
    /// Sends and receives not captured (their connections were sampled out).
    pub syscalls_not_captured: u64,
    /// Calls seen (as `calls`), and calls estimated: each sampled interval's estimate plus
    /// the other intervals' calls.
    pub calls_seen: u64,
    pub calls_estimated: u64,
}

/// What the summary and the interval totals say of `--otlp`'s export (src/sink/otlp/; `otlp`
/// in JSON).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct OtlpStats {
    /// Spans (calls) the collector accepted.
    pub spans_exported: u64,
    /// Spans not exported: the queue was full (the collector down or slower than the calls),
    /// given up after the last try, refused by the collector, and at the end those still
    /// queued. Each is a call counted everywhere else but missing from the traces.
    pub spans_dropped: u64,
    /// Requests that failed (each try; a retried request that then passed counts too).
    pub request_errors: u64,
    /// Metric exports the collector accepted, and those given up.
    pub metric_exports: u64,
    pub metric_exports_failed: u64,
    /// With --otlp-flow-logs: TCP flow ends the collector accepted as log records, and those
    /// not exported (as `spans_dropped` counts spans).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub flow_logs_exported: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub flow_logs_dropped: Option<u64>,
}
