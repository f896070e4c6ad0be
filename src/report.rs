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
}
