//! Where the pipeline's output goes: JSON lines, the terminal UI, a recording.

pub mod call_line;
pub mod exporting;
pub mod json;
pub mod null;
pub mod otlp;
pub mod prometheus;
pub mod status;

use std::io;

use crate::aggregate::RowRef;
use crate::call::Call;
use crate::procinfo::ProcInfo;
use crate::report::IntervalReport;
use crate::session_meta::SessionMeta;
use crate::summary::Summary;

/// The TLS probes placed for what ran at the start (`Sink::tls_started`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TlsStart {
    /// Files probed (as `meta.tls_probed` named them when the start waited for them).
    pub probed: Vec<String>,
    /// Files that define the functions but could not be probed, with the reason.
    pub failures: Vec<String>,
    /// Files skipped as untrusted input (docs/security.md).
    pub skipped: u64,
}

/// What the pipeline's output goes to; it only receives (what a replay's viewer asks of the
/// replay goes its own way: `driver::replay::Rewind`). Every method but the ones a sink
/// needs does nothing by default.
pub trait Sink {
    /// Once, before anything else (again when a replay starts over).
    fn meta(&mut self, _meta: &SessionMeta) -> io::Result<()> {
        Ok(())
    }
    /// Live with TLS probes, once: the look at the system's libraries and the processes
    /// running at the start is done (the session started without waiting for it).
    fn tls_started(&mut self, _mono_ns: u64, _start: &TlsStart) -> io::Result<()> {
        Ok(())
    }
    /// A process seen for the first time (before its first call).
    fn process(&mut self, _info: &ProcInfo) -> io::Result<()> {
        Ok(())
    }
    fn call(&mut self, _call: &Call) -> io::Result<()> {
        Ok(())
    }
    /// A call the caller no longer needs: a sink that keeps calls (the terminal UI) takes it
    /// instead of a copy.
    fn call_owned(&mut self, call: Call) -> io::Result<()> {
        self.call(&call)
    }
    /// A call as [`Sink::call`], with the endpoint row the pipeline counted it in (rows are
    /// never evicted: [`crate::aggregate::EndpointSnapshot::row`] names the same row): a
    /// sink that matches calls to endpoint rows takes the row instead of normalising the
    /// call's resource again.
    fn call_in(&mut self, call: &Call, _row: RowRef) -> io::Result<()> {
        self.call(call)
    }
    /// [`Sink::call_owned`] with the call's endpoint row (as [`Sink::call_in`]).
    fn call_owned_in(&mut self, call: Call, _row: RowRef) -> io::Result<()> {
        self.call_owned(call)
    }
    /// Whether this sink shows the endpoints' rolling windows (the terminal UI): the pipeline
    /// then keeps each row's recent intervals and hands the windows with each interval
    /// (`IntervalReport::windows`); other sinks pay nothing for them.
    fn wants_windows(&self) -> bool {
        false
    }
    /// Whether this sink groups endpoints by process too (the terminal UI's `b`): the
    /// pipeline's table then also splits every row by pid (`EndpointWindows::by_process`),
    /// one more lookup per call; other sinks pay nothing for it.
    fn wants_endpoints_by_process(&self) -> bool {
        false
    }
    /// A filter this sink changes while the session runs (the terminal UI's Calls filter):
    /// only the calls it matches are then handed to the call methods (see
    /// `Pipeline::with_live_call_filter`).
    fn live_call_filter(
        &self,
    ) -> Option<std::sync::Arc<crate::pipeline::selection::LiveCallFilter>> {
        None
    }
    /// Whether this sink keeps the calls it is given (so `call_owned` saves it a copy); other
    /// sinks get each call by reference, and the caller drops it where it lies (moving a
    /// 424-byte call out of its batch for each one was ~3% of `--json`'s CPU).
    fn keeps_calls(&self) -> bool {
        false
    }
    /// A formatter for `call` lines that other threads may use (after `meta`): the sink then
    /// gets each call with its line already written (`call_formatted`). None: sinks that
    /// write no such lines.
    fn call_formatter(&self) -> Option<call_line::CallFormatter> {
        None
    }
    /// A call with its line from [`Sink::call_formatter`]'s formatter.
    fn call_formatted(&mut self, call: &Call, _line: &[u8]) -> io::Result<()> {
        self.call(call)
    }
    /// A process described earlier (by `process`) exited.
    fn process_exit(&mut self, _exit: &crate::process_events::ProcessExit) -> io::Result<()> {
        Ok(())
    }
    /// Events the kernel could not deliver since the last report (`mono_ns`: when noticed).
    fn lost(&mut self, _mono_ns: u64, _loss: &Loss) -> io::Result<()> {
        Ok(())
    }
    /// Aggregates of the interval that just ended.
    fn interval(&mut self, _report: &IntervalReport) -> io::Result<()> {
        Ok(())
    }
    /// A report the caller no longer needs: a sink that keeps reports (the terminal UI) takes
    /// it instead of a copy (a burst's report holds up to 200,000 flows).
    fn interval_owned(&mut self, report: IntervalReport) -> io::Result<()> {
        self.interval(&report)
    }
    /// A later part of the flow report of the interval last handed over, whose `flows`
    /// had `more` set (a large report comes in parts: `crate::flows::FLOWS_PER_PART`); the
    /// last part has `more` unset and the table's stats. A sink that shows flows takes them.
    fn flow_part(&mut self, _part: crate::flows::FlowReport) -> io::Result<()> {
        Ok(())
    }
    /// End of a batch of events: make what was written visible.
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
    /// Once, last.
    fn summary(&mut self, _summary: &Summary) -> io::Result<()> {
        Ok(())
    }
    /// A process's profile (`--profile`), at the session's end (docs/json.md, `profile`).
    fn profile(&mut self, _mono_ns: u64, _profile: &crate::profile::ProfileLine) -> io::Result<()> {
        Ok(())
    }
    /// Where a viewer asks for a profile of chosen processes (the terminal UI's `P` key):
    /// the session's triggers take it at the next interval.
    fn profile_requests(&self) -> Option<crate::profile::trigger::ProfileRequests> {
        None
    }
    /// A profiling trigger started or ended (`--profile-when`, the UI's key; docs/json.md,
    /// `profile_trigger`).
    fn profile_trigger(
        &mut self,
        _mono_ns: u64,
        _event: &crate::profile::trigger::TriggerEvent,
    ) -> io::Result<()> {
        Ok(())
    }
    /// Something the user must know now, not only from the summary: a cap hit this interval,
    /// the recording failing (docs/json.md, `warning`).
    fn warning(&mut self, _mono_ns: u64, _warning: &Warning) -> io::Result<()> {
        Ok(())
    }
}

/// A `warning` line: a cap that was hit (once per interval while it is hit), or the
/// recording that could not be written.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Warning {
    /// [`Warning::CAP`] or [`Warning::RECORDING_ERROR`].
    pub kind: &'static str,
    /// For a cap: which (`flows`, `connections`, `endpoints`, `processes`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cap: Option<&'static str>,
    /// For a cap: its size.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub limit: Option<u64>,
    /// For a cap: what was left out (or started over) since the previous warning of it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub count: Option<u64>,
    /// One line for a person (what stderr shows).
    pub message: String,
}

impl Warning {
    pub const CAP: &'static str = "cap";
    pub const RECORDING_ERROR: &'static str = "recording_error";
    /// A Wasm plugin was disabled (its faults: docs/plugins.md).
    pub const PLUGIN_DISABLED: &'static str = "plugin_disabled";

    /// The few words the terminal UI's header shows.
    pub fn short(&self) -> String {
        match self.cap {
            Some(cap) => format!("{cap} cap hit"),
            None if self.kind == Self::PLUGIN_DISABLED => "PLUGIN DISABLED".to_owned(),
            None => "RECORDING FAILED".to_owned(),
        }
    }
}

/// What the kernel lost since the previous report.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Loss {
    /// Records the ring buffer had no room for.
    pub events: u64,
    /// Bytes the dropped data records had moved.
    pub bytes: u64,
    /// Capture program runs the kernel skipped (`KernelCounters::missed_runs`).
    pub missed_runs: u64,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::conntrack::TrackerConfig;
    use crate::kernel_counters::KernelCounters;
    use crate::pipeline::Pipeline;
    use crate::procinfo::ProcessTable;

    /// Takes interval reports only by value.
    #[derive(Default)]
    struct ReportsByValue {
        /// Per report: whether it carried a flow table report.
        with_flows: Vec<bool>,
        /// Whether it shows rolling windows, and per report whether it got them.
        wants_windows: bool,
        with_windows: Vec<bool>,
    }

    impl Sink for ReportsByValue {
        fn interval(&mut self, _: &IntervalReport) -> io::Result<()> {
            panic!("the pipeline lent its report: a sink that keeps it would have to copy it");
        }
        fn interval_owned(&mut self, report: IntervalReport) -> io::Result<()> {
            self.with_flows.push(report.flows.is_some());
            self.with_windows.push(report.windows.is_some());
            Ok(())
        }
        fn wants_windows(&self) -> bool {
            self.wants_windows
        }
    }

    #[test]
    fn the_pipeline_hands_over_its_interval_reports_by_value() {
        let mut pipeline = Pipeline::new(
            TrackerConfig::default(),
            ProcessTable::new(false),
            ReportsByValue::default(),
        );
        let kernel = KernelCounters::default();
        pipeline.on_interval(1_000_000_000, &kernel, None).unwrap();
        let flows = crate::flows::FlowReport {
            mono_ns: 2_000_000_000,
            ..Default::default()
        };
        pipeline.set_flows(flows.clone()).unwrap();
        pipeline.on_interval(2_000_000_000, &kernel, None).unwrap();
        // The session's last, partial interval too.
        pipeline.set_flows(flows).unwrap();
        let (sink, _) = pipeline.finish(&kernel, 3_000_000_000).unwrap();
        assert_eq!(sink.with_flows, vec![false, true, true]);
    }

    #[test]
    fn only_a_sink_that_shows_windows_gets_them() {
        for wants_windows in [false, true] {
            let sink = ReportsByValue {
                wants_windows,
                ..Default::default()
            };
            let mut pipeline =
                Pipeline::new(TrackerConfig::default(), ProcessTable::new(false), sink)
                    .with_raw_resources(true);
            let kernel = KernelCounters::default();
            pipeline.on_interval(1_000_000_000, &kernel, None).unwrap();
            pipeline.on_interval(2_000_000_000, &kernel, None).unwrap();
            let sink = pipeline.into_sink();
            assert_eq!(sink.with_windows, vec![wants_windows; 2]);
        }
    }
}
