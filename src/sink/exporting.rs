//! A sink with exporters beside it (`--prometheus`, `--otlp`): everything goes to the sink as
//! it would without them; the Prometheus exporter gets each interval's aggregates, never raw
//! calls; the OTLP exporter gets the aggregates and each call (as a span, queued without ever
//! waiting when live), and adds its counts to the totals and the summary (`otlp`).

use std::io;

use super::{call_line, Loss, Sink, TlsStart, Warning};
use crate::aggregate::RowRef;
use crate::call::Call;
use crate::procinfo::ProcInfo;
use crate::report::IntervalReport;
use crate::session_meta::SessionMeta;
use crate::summary::Summary;

use super::otlp::OtlpExporter;
use super::prometheus::PrometheusExporter;

pub struct Exporting<S> {
    sink: S,
    prometheus: Option<PrometheusExporter>,
    otlp: Option<OtlpExporter>,
}

impl<S: Sink> Exporting<S> {
    /// `prometheus`: None passes everything straight through.
    pub fn new(sink: S, prometheus: Option<PrometheusExporter>) -> Self {
        Exporting {
            sink,
            prometheus,
            otlp: None,
        }
    }

    /// Calls as spans and the aggregates as metrics to an OTLP collector too.
    pub fn with_otlp(mut self, otlp: Option<OtlpExporter>) -> Self {
        self.otlp = otlp;
        self
    }

    fn export(&mut self, report: &IntervalReport) {
        if let Some(p) = self.prometheus.as_mut() {
            p.update(report);
        }
        if let Some(o) = self.otlp.as_mut() {
            if let Some(flows) = &report.flows {
                o.flow_ends(&flows.ends);
            }
            o.interval(report);
        }
    }

    fn span(&mut self, call: &Call) {
        if let Some(o) = self.otlp.as_mut() {
            o.call(call);
        }
    }
}

/// Every method forwards to the sink (a default body here would silently cut what a sink
/// asked for: `every_sink_method_is_forwarded` checks that none is missing).
impl<S: Sink> Sink for Exporting<S> {
    fn meta(&mut self, meta: &SessionMeta) -> io::Result<()> {
        if let Some(o) = self.otlp.as_mut() {
            o.meta(meta);
        }
        self.sink.meta(meta)
    }
    fn tls_started(&mut self, mono_ns: u64, start: &TlsStart) -> io::Result<()> {
        self.sink.tls_started(mono_ns, start)
    }
    fn process(&mut self, info: &ProcInfo) -> io::Result<()> {
        self.sink.process(info)
    }
    // Each call method hands the call to the OTLP exporter once (the sink's own defaults
    // chain them, but this forwards each one straight to the sink's).
    fn call(&mut self, call: &Call) -> io::Result<()> {
        self.span(call);
        self.sink.call(call)
    }
    fn call_owned(&mut self, call: Call) -> io::Result<()> {
        self.span(&call);
        self.sink.call_owned(call)
    }
    fn call_in(&mut self, call: &Call, row: RowRef) -> io::Result<()> {
        self.span(call);
        self.sink.call_in(call, row)
    }
    fn call_owned_in(&mut self, call: Call, row: RowRef) -> io::Result<()> {
        self.span(&call);
        self.sink.call_owned_in(call, row)
    }
    fn wants_endpoints_by_process(&self) -> bool {
        self.sink.wants_endpoints_by_process()
    }
    fn wants_windows(&self) -> bool {
        // The exporters read the since-start rows and their latency bins.
        self.prometheus.is_some() || self.otlp.is_some() || self.sink.wants_windows()
    }
    fn live_call_filter(
        &self,
    ) -> Option<std::sync::Arc<crate::pipeline::selection::LiveCallFilter>> {
        self.sink.live_call_filter()
    }
    fn keeps_calls(&self) -> bool {
        self.sink.keeps_calls()
    }
    fn call_formatter(&self) -> Option<call_line::CallFormatter> {
        self.sink.call_formatter()
    }
    fn call_formatted(&mut self, call: &Call, line: &[u8]) -> io::Result<()> {
        self.span(call);
        self.sink.call_formatted(call, line)
    }
    fn process_exit(&mut self, exit: &crate::process_events::ProcessExit) -> io::Result<()> {
        self.sink.process_exit(exit)
    }
    fn lost(&mut self, mono_ns: u64, loss: &Loss) -> io::Result<()> {
        self.sink.lost(mono_ns, loss)
    }
    fn interval(&mut self, report: &IntervalReport) -> io::Result<()> {
        self.export(report);
        match self.otlp.as_ref() {
            Some(o) => {
                let mut report = report.clone();
                report.totals.otlp = Some(o.stats());
                self.sink.interval_owned(report)
            }
            None => self.sink.interval(report),
        }
    }
    fn interval_owned(&mut self, mut report: IntervalReport) -> io::Result<()> {
        self.export(&report);
        if let Some(o) = self.otlp.as_ref() {
            report.totals.otlp = Some(o.stats());
        }
        self.sink.interval_owned(report)
    }
    fn flow_part(&mut self, part: crate::flows::FlowReport) -> io::Result<()> {
        if let Some(o) = self.otlp.as_mut() {
            o.flow_ends(&part.ends);
        }
        self.sink.flow_part(part)
    }
    fn flush(&mut self) -> io::Result<()> {
        if let Some(o) = self.otlp.as_mut() {
            o.flush();
        }
        self.sink.flush()
    }
    fn summary(&mut self, summary: &Summary) -> io::Result<()> {
        match self.otlp.as_mut() {
            Some(o) => {
                // The last metrics and the queued spans go out first: the summary's counts
                // are final.
                let mut summary = summary.clone();
                summary.otlp = Some(o.finish());
                self.sink.summary(&summary)
            }
            None => self.sink.summary(summary),
        }
    }
    fn warning(&mut self, mono_ns: u64, warning: &Warning) -> io::Result<()> {
        self.sink.warning(mono_ns, warning)
    }
    fn profile(&mut self, mono_ns: u64, profile: &crate::profile::ProfileLine) -> io::Result<()> {
        self.sink.profile(mono_ns, profile)
    }
    fn profile_trigger(
        &mut self,
        mono_ns: u64,
        event: &crate::profile::trigger::TriggerEvent,
    ) -> io::Result<()> {
        self.sink.profile_trigger(mono_ns, event)
    }
    fn profile_requests(&self) -> Option<crate::profile::trigger::ProfileRequests> {
        self.sink.profile_requests()
    }
}

#[cfg(test)]
mod tests {
    /// The names of the `fn`s declared in the first `{…}` block after `opening` in `src`.
    fn fns_after(src: &str, opening: &str) -> std::collections::BTreeSet<String> {
        let start = src.find(opening).expect(opening);
        let body = &src[start..];
        let mut depth = 0i32;
        let mut end = body.len();
        for (i, c) in body.char_indices() {
            match c {
                '{' => depth += 1,
                '}' => {
                    depth -= 1;
                    if depth == 0 {
                        end = i;
                        break;
                    }
                }
                _ => {}
            }
        }
        body[..end]
            .lines()
            .filter_map(|l| l.trim_start().strip_prefix("fn "))
            .filter_map(|l| l.split(['(', '<']).next())
            .map(str::to_owned)
            .collect()
    }

    /// A method added to `Sink` with a default body must be forwarded here too, or a sink
    /// run with `--prometheus` would lose what it asked the pipeline for.
    #[test]
    fn every_sink_method_is_forwarded() {
        let traits = fns_after(include_str!("mod.rs"), "pub trait Sink {");
        let forwarded = fns_after(
            include_str!("exporting.rs"),
            "impl<S: Sink> Sink for Exporting<S> {",
        );
        assert!(traits.len() > 15, "{traits:?}");
        assert_eq!(traits, forwarded);
    }
}
