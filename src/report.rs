//! What the pipeline hands sinks once per interval (`--delay`): the aggregates that make ebtop
//! a *top*. JSON prints them as `endpoint`, `process` and `overhead` lines; the TUI renders them.

use crate::aggregate::{EndpointSnapshot, EndpointWindows, OverheadSnapshot, ProcessSnapshot};
use crate::summary::Summary;

#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct IntervalReport {
    /// Kernel (CLOCK_MONOTONIC) time the interval ended; the recorded time in a replay.
    pub mono_ns: u64,
    /// Length of the interval.
    pub period_ns: u64,
    /// Endpoints with calls in this interval.
    pub endpoints: Vec<EndpointSnapshot>,
    /// Processes with network activity in this interval.
    pub processes: Vec<ProcessSnapshot>,
    /// ebtop's own cost (live only; a replay has no live cost to show).
    pub overhead: Option<OverheadSnapshot>,
    /// Counts since the start (calls, events, losses, parser problems).
    pub totals: Summary,
    /// Connections the tracker holds now.
    pub open_connections: u64,
    /// The flow table's interval (live when the flows programs loaded, or as a recording kept
    /// it): active flows, flows that ended, UDP pairs, table health. `None` when flows are
    /// unavailable (not loaded, or a recording made without them).
    pub flows: Option<crate::flows::FlowReport>,
    /// Every endpoint row over the last 10 s, the last minute and since the start, with its
    /// latency bins: only for a sink that shows them (`Sink::wants_windows`, the terminal UI),
    /// made by the same table as `endpoints`, so no view counts calls of its own.
    #[serde(skip)]
    pub windows: Option<Box<EndpointWindows>>,
    /// Each connection's calls (the most recent `conns::MAX_CONNS`), for the same sinks: a
    /// list of connections without a flow table counts no call itself either.
    #[serde(skip)]
    pub conns: Option<Vec<crate::aggregate::conns::ConnStats>>,
    /// Connection sampling in this interval (`--max-cpu`, `--sample`): present only when some
    /// send or receive went uncaptured because its connection was sampled out. Made from the
    /// kernel's counters the interval's record carries, so a replay marks the same intervals.
    pub sampling: Option<SamplingSnapshot>,
    /// The interval's profile (`--profile`, or a recording that holds one): the stacks the
    /// kernel counted since the previous reading, symbolized. JSON writes its `profile` lines.
    #[serde(skip)]
    pub profile: Option<Box<crate::profile::Profile>>,
    /// Live with `--profile`: what the triggers do now, for the terminal UI's header
    /// (`PROFILING spin (42) 8s more [cpu>80%]`, `profile: silent 50s more`).
    #[serde(skip)]
    pub profile_status: Option<String>,
}

/// What a sampled interval's numbers are made of (the JSON `sampling` line).
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct SamplingSnapshot {
    pub period_ns: u64,
    /// Share of the traced sends and receives that were on captured connections: what the
    /// interval's calls are a sample of (null when none was traced).
    pub ratio: Option<f64>,
    /// Share of connections the sample keeps for connections decided now (null: sampling
    /// ended at the interval's end).
    pub keep_ratio: Option<f64>,
    /// Data sends and receives traced on selected sockets, and of those not captured.
    pub syscalls: u64,
    pub syscalls_not_captured: u64,
    /// Connections decided out and in during the interval.
    pub connections_sampled_out: u64,
    pub connections_sampled_in: u64,
    /// Captured connections cut at a call boundary during the interval (the budget was
    /// still exceeded after new connections were sampled: their calls before the cut are
    /// whole, none after it is seen).
    pub connections_cut: u64,
    /// Cut connections captured again at a call boundary during the interval (the share was
    /// raised over them: their calls from then on are whole again).
    pub connections_rejoined: u64,
    /// Calls completed from captured connections (exact each), and the interval's calls
    /// estimated: calls_seen / ratio (null when nothing was captured).
    pub calls_seen: u64,
    pub calls_estimated: Option<u64>,
}

impl SamplingSnapshot {
    /// The interval between two readings of the kernel's cumulative counters; None when
    /// nothing went uncaptured in it.
    pub fn between(
        before: &crate::kernel_counters::KernelCounters,
        now: &crate::kernel_counters::KernelCounters,
        period_ns: u64,
        calls_seen: u64,
    ) -> Option<SamplingSnapshot> {
        let shed = now.shed_runs.saturating_sub(before.shed_runs);
        if shed == 0 {
            return None;
        }
        let syscalls = now
            .socket_syscalls
            .saturating_sub(before.socket_syscalls)
            .max(shed);
        let ratio = (syscalls > 0).then(|| (syscalls - shed) as f64 / syscalls as f64);
        Some(SamplingSnapshot {
            period_ns,
            ratio,
            keep_ratio: now.sample_keep_ppm.map(|p| p as f64 / 1e6),
            syscalls,
            syscalls_not_captured: shed,
            connections_sampled_out: now.shed_connections.saturating_sub(before.shed_connections),
            connections_sampled_in: now.kept_connections.saturating_sub(before.kept_connections),
            connections_cut: now.cut_connections.saturating_sub(before.cut_connections),
            connections_rejoined: now
                .rejoined_connections
                .saturating_sub(before.rejoined_connections),
            calls_seen,
            calls_estimated: ratio
                .filter(|r| *r > 0.0)
                .map(|r| (calls_seen as f64 / r).round() as u64),
        })
    }

    /// `n` per second scaled to all traffic (a rate scales soundly; a count of a sample does
    /// not: the counts stay raw).
    pub fn scale_rate(&self, per_s: f64) -> Option<f64> {
        self.ratio.filter(|r| *r > 0.0).map(|r| per_s / r)
    }
}
