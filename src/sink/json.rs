//! JSON lines: one object per line, `type` on every line (schema: docs/json.md).

use std::io::{self, Write};

use serde::Serialize;
use serde_json::ser::Formatter;

use super::Sink;
use crate::call::Call;
use crate::clock::WallClock;
use crate::filters::Filters;
use crate::procinfo::ProcInfo;
use crate::report::IntervalReport;
use crate::session_meta::SessionMeta;
use crate::summary::Summary;

/// The line types a user may choose (`--only`). `meta`, `lost` and `summary` are always
/// written: they say what the stream is and what it misses.
pub const SELECTABLE_TYPES: &[&str] = &[
    "proc",
    "call",
    "exit",
    "endpoint",
    "process",
    "overhead",
    "flow",
    "flow_end",
    "flow_stats",
    "drop",
    "iface",
    "iface_flow",
    "profile",
];

/// Which line types a sink writes, and how much of them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LineSelection {
    /// Bit i: `SELECTABLE_TYPES[i]` is written.
    types: u32,
    /// `overhead` lines carry `bpf_programs`, one entry per BPF program.
    pub overhead_programs: bool,
}

impl Default for LineSelection {
    fn default() -> Self {
        LineSelection {
            types: (1 << SELECTABLE_TYPES.len()) - 1,
            overhead_programs: false,
        }
    }
}

impl LineSelection {
    /// Only these types (names from [`SELECTABLE_TYPES`]); an unknown name is an error.
    pub fn only<S: AsRef<str>>(names: &[S]) -> Result<LineSelection, String> {
        let mut types = 0;
        for n in names {
            let n = n.as_ref();
            let i = SELECTABLE_TYPES.iter().position(|t| *t == n).ok_or_else(|| {
                format!(
                    "unknown line type {n:?} (known: {}; meta, lost, sampling and summary are always written)",
                    SELECTABLE_TYPES.join(", ")
                )
            })?;
            types |= 1 << i;
        }
        Ok(LineSelection {
            types,
            overhead_programs: false,
        })
    }

    pub fn wants(&self, ty: &str) -> bool {
        SELECTABLE_TYPES
            .iter()
            .position(|t| *t == ty)
            .is_some_and(|i| self.types & (1 << i) != 0)
    }

    /// Whether any flow line is wanted (else the flow table need not be loaded).
    pub fn wants_flows(&self) -> bool {
        self.wants("flow")
            || self.wants("flow_end")
            || self.wants("flow_stats")
            || self.wants("drop")
            || self.wants("iface")
            || self.wants("iface_flow")
    }
}

/// Writes floats with the digits that mean something: at most 3 decimals, and at most 4
/// significant digits below 1 (`0.000123`, not `0.00012345678901234`).
struct RoundedFloats;

fn round_meaningful(v: f64) -> f64 {
    if !v.is_finite() || v == 0.0 {
        return v;
    }
    if v.abs() >= 1.0 {
        let r = (v * 1000.0).round() / 1000.0;
        // Beyond 2^53 / 1000 the product is not exact: the value is already as precise as it is.
        return if r.is_finite() && v.abs() < 9.0e12 {
            r
        } else {
            v
        };
    }
    format!("{v:.3e}").parse().unwrap_or(v)
}

impl Formatter for RoundedFloats {
    fn write_f64<W: ?Sized + Write>(&mut self, writer: &mut W, value: f64) -> io::Result<()> {
        serde_json::ser::CompactFormatter.write_f64(writer, round_meaningful(value))
    }
    fn write_f32<W: ?Sized + Write>(&mut self, writer: &mut W, value: f32) -> io::Result<()> {
        self.write_f64(writer, f64::from(value))
    }
}

/// Pending `call` lines are handed to the output in pieces at least this large (see
/// `JsonSink::buf`); main's `BufWriter` holds 64 KiB.
const CALL_LINES_BYTES: usize = 64 * 1024;

pub struct JsonSink<W: Write> {
    /// Taken only by `into_inner` (which consumes the sink).
    out: Option<W>,
    select: LineSelection,
    /// `select.wants("call")`, looked up once: it is asked per call.
    write_calls: bool,
    clock: WallClock,
    /// Unix time the session started (recorded time when replaying).
    start_unix_ns: i64,
    /// `call` lines not yet handed to `out`: written to it in pieces of at least
    /// `CALL_LINES_BYTES` (larger than a `BufWriter`'s buffer, so it passes them straight to
    /// the file instead of copying each line once more), and before any other line.
    buf: Vec<u8>,
    /// Writes the call lines, with `clock`.
    calls: super::call_line::CallFormatter,
}

impl<W: Write> JsonSink<W> {
    pub fn new(out: W) -> Self {
        JsonSink {
            out: Some(out),
            clock: WallClock { offset_ns: 0 },
            start_unix_ns: 0,
            buf: Vec::with_capacity(CALL_LINES_BYTES + 1024),
            calls: Default::default(),
            select: LineSelection::default(),
            write_calls: true,
        }
    }
    /// Writes only the lines `select` chooses.
    pub fn with_selection(mut self, select: LineSelection) -> Self {
        self.select = select;
        self.write_calls = select.wants("call");
        self
    }
    /// Hands the pending `call` lines to `out`.
    fn write_call_lines(&mut self) -> io::Result<()> {
        if self.buf.is_empty() {
            return Ok(());
        }
        // Taken for the write (it and the output are both fields), its room kept.
        let mut lines = std::mem::take(&mut self.buf);
        let written = self.out().write_all(&lines);
        lines.clear();
        self.buf = lines;
        written
    }
    fn line(&mut self, v: &Line<'_>) -> io::Result<()> {
        self.write_call_lines()?;
        let mut ser = serde_json::Serializer::with_formatter(self.out(), RoundedFloats);
        v.serialize(&mut ser).map_err(io::Error::from)?;
        self.out().write_all(b"\n")
    }
    /// A `flow` line (an active flow, TCP or UDP) of the interval ending at `ts_mono_ns`.
    fn flow_line(
        &mut self,
        ts: &str,
        ts_mono_ns: u64,
        start_mono_ns: u64,
        f: FlowBody<'_>,
    ) -> io::Result<()> {
        // A flow's first packet can be stamped a little after the interval's end was taken
        // (the table is read after that): it is never shown as starting after its own line.
        let start = self.clock.rfc3339(start_mono_ns.min(ts_mono_ns));
        self.line(&Line::Flow(FlowLine {
            ts,
            start,
            end_time: None,
            body: f,
        }))
    }
    /// The output, with every line written to it (an error writing the last `call` lines is
    /// dropped: this is for outputs that cannot fail, such as a `Vec`).
    pub fn into_inner(mut self) -> W {
        let _ = self.write_call_lines();
        self.out.take().expect("the output is taken once")
    }

    fn out(&mut self) -> &mut W {
        self.out
            .as_mut()
            .expect("the output is taken only by into_inner, which consumes the sink")
    }
}

/// Every JSON line but `call`, one variant per `type` (serde writes the variant's name, in
/// snake case, as the line's first field). `call` lines, the many, are written by
/// `call_line::CallFormatter` straight into the output buffer; the schema of all of them is
/// docs/json.md.
#[derive(Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum Line<'a> {
    Meta(MetaLine<'a>),
    Tls(TlsStartLine<'a>),
    Proc(ProcLine<'a>),
    Exit(ExitLine<'a>),
    Lost(LostLine),
    Warning(Stamped<'a, super::Warning>),
    Endpoint(Stamped<'a, crate::aggregate::EndpointSnapshot>),
    Process(Stamped<'a, crate::aggregate::ProcessSnapshot>),
    Overhead(Stamped<'a, crate::aggregate::OverheadSnapshot>),
    Sampling(Stamped<'a, crate::report::SamplingSnapshot>),
    Flow(FlowLine<'a>),
    FlowEnd(FlowLine<'a>),
    FlowStats(Stamped<'a, crate::flows::FlowStats>),
    Drop(Stamped<'a, crate::flows::drops::DropCount>),
    Iface(Stamped<'a, crate::flows::iface::IfaceTotal>),
    IfaceFlow(Stamped<'a, crate::flows::iface::IfaceFlow>),
    Profile(Stamped<'a, crate::profile::ProfileLine>),
    ProfileTrigger(Stamped<'a, crate::profile::trigger::TriggerEvent>),
    Summary(SummaryLine<'a>),
}

#[derive(Serialize)]
struct MetaLine<'a> {
    schema: u32,
    source: &'a str,
    ebtop_version: &'a str,
    host: &'a str,
    kernel: &'a str,
    start: String,
    snaplen: u32,
    filters: &'a Filters,
    /// Live only: "socket" or "syscalls".
    #[serde(skip_serializing_if = "Option::is_none")]
    hooks: Option<&'a str>,
    /// Live only (written there even when empty): the kernel parts loaded.
    #[serde(skip_serializing_if = "Option::is_none")]
    loaded: Option<&'a [String]>,
    /// Live only: the event rings read, one per tracking thread.
    #[serde(skip_serializing_if = "Option::is_none")]
    event_rings: Option<u32>,
    /// Live with TLS probes: the files probed at start, and those that could not be.
    #[serde(skip_serializing_if = "<[String]>::is_empty")]
    tls_probed: &'a [String],
    #[serde(skip_serializing_if = "<[String]>::is_empty")]
    tls_probe_failures: &'a [String],
}

#[derive(Serialize)]
struct ProcLine<'a> {
    pid: u32,
    ppid: Option<u32>,
    comm: &'a str,
    exe: Option<&'a str>,
    cmdline: &'a [String],
    cgroup: Option<&'a str>,
    container: Option<&'a str>,
    pod: Option<&'a str>,
    namespace: Option<&'a str>,
}

#[derive(Serialize)]
struct ExitLine<'a> {
    ts: String,
    pid: u32,
    ppid: u32,
    comm: &'a str,
    exit_code: Option<i32>,
    signal: Option<i32>,
    core_dumped: bool,
}

#[derive(Serialize)]
struct TlsStartLine<'a> {
    ts: String,
    #[serde(skip_serializing_if = "<[String]>::is_empty")]
    tls_probed: &'a [String],
    #[serde(skip_serializing_if = "<[String]>::is_empty")]
    tls_probe_failures: &'a [String],
    tls_files_skipped: u64,
}

#[derive(Serialize)]
struct LostLine {
    ts: String,
    events: u64,
    bytes: u64,
    missed_runs: u64,
}

/// An aggregate line: `ts` (interval end), then the snapshot's own fields.
#[derive(Serialize)]
struct Stamped<'a, T: Serialize> {
    ts: &'a str,
    #[serde(flatten)]
    body: &'a T,
}

/// A `flow` / `flow_end` line: `ts`, wall-clock `start` (and `end_time`), then the flow. (Not
/// `end`: a jq keyword, `.end` fails in jq 1.6.)
#[derive(Serialize)]
struct FlowLine<'a> {
    ts: &'a str,
    start: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    end_time: Option<String>,
    #[serde(flatten)]
    body: FlowBody<'a>,
}

/// A TCP flow or a UDP pair, written as its own fields.
#[derive(Serialize)]
#[serde(untagged)]
enum FlowBody<'a> {
    Tcp(&'a crate::flows::TcpFlow),
    Udp(&'a crate::flows::UdpFlow),
}

#[derive(Serialize)]
struct SummaryLine<'a> {
    ts: String,
    #[serde(flatten)]
    summary: &'a Summary,
}

/// Call lines still gathered are handed to the output when the sink goes: a session that
/// ends on an error (a damaged recording, a failed write of the recording) shows every call
/// made before it, as when each line went to the output at once.
impl<W: Write> Drop for JsonSink<W> {
    fn drop(&mut self) {
        if self.out.is_some() {
            let _ = self.write_call_lines();
        }
    }
}

impl<W: Write> JsonSink<W> {
    /// The `flow`, `flow_end` and (after a report's last part) `flow_stats` lines of a flow
    /// report or a part of one, at the interval's end (`mono_ns`, `ts`): TCP flows, UDP pairs,
    /// ended flows, the order a recording stores a part in (a replay writes the same).
    fn flow_lines(
        &mut self,
        ts: &str,
        mono_ns: u64,
        fr: &crate::flows::FlowReport,
    ) -> io::Result<()> {
        let select = self.select;
        let flows = select.wants("flow");
        for f in fr.flows.iter().filter(|_| flows) {
            self.flow_line(ts, mono_ns, f.start_mono_ns, FlowBody::Tcp(f))?;
        }
        for f in fr.udp.iter().filter(|_| flows) {
            self.flow_line(ts, mono_ns, f.start_mono_ns, FlowBody::Udp(f))?;
        }
        for f in fr.ends.iter().filter(|_| select.wants("flow_end")) {
            let start = self.clock.rfc3339(match f.end_mono_ns {
                Some(e) => f.start_mono_ns.min(e),
                None => f.start_mono_ns,
            });
            let end_time = f.end_mono_ns.map(|e| self.clock.rfc3339(e));
            self.line(&Line::FlowEnd(FlowLine {
                ts,
                start,
                end_time,
                body: FlowBody::Tcp(f),
            }))?;
        }
        for d in fr.drops.iter().filter(|_| select.wants("drop")) {
            self.line(&Line::Drop(Stamped { ts, body: d }))?;
        }
        for f in fr.iface_flows.iter().filter(|_| select.wants("iface_flow")) {
            self.line(&Line::IfaceFlow(Stamped { ts, body: f }))?;
        }
        for t in fr.iface_totals.iter().filter(|_| select.wants("iface")) {
            self.line(&Line::Iface(Stamped { ts, body: t }))?;
        }
        if !fr.more && select.wants("flow_stats") {
            self.line(&Line::FlowStats(Stamped {
                ts,
                body: &fr.stats,
            }))?;
        }
        Ok(())
    }
}

impl<W: Write> Sink for JsonSink<W> {
    fn meta(&mut self, m: &SessionMeta) -> io::Result<()> {
        self.clock = WallClock {
            offset_ns: m.wall_offset_ns,
        };
        self.calls = super::call_line::CallFormatter::new(self.clock);
        self.start_unix_ns = m.start_unix_ns;
        self.line(&Line::Meta(MetaLine {
            schema: 3,
            source: &m.source,
            ebtop_version: &m.ebtop_version,
            host: &m.host,
            kernel: &m.kernel,
            start: crate::clock::rfc3339(m.start_unix_ns),
            snaplen: m.snaplen,
            filters: &m.filters,
            hooks: m.hooks.as_deref(),
            loaded: m.hooks.is_some().then_some(&m.loaded[..]),
            event_rings: m.event_rings,
            tls_probed: &m.tls_probed,
            tls_probe_failures: &m.tls_probe_failures,
        }))?;
        self.out().flush()
    }

    fn process(&mut self, p: &ProcInfo) -> io::Result<()> {
        if !self.select.wants("proc") {
            return Ok(());
        }
        // Shown with its secrets redacted; a recording keeps the arguments as they were.
        let cmdline = crate::protocols::redact::redact_args(&p.cmdline);
        self.line(&Line::Proc(ProcLine {
            pid: p.pid,
            ppid: p.ppid,
            comm: &p.comm,
            exe: p.exe.as_deref(),
            cmdline: &cmdline,
            cgroup: p.cgroup.as_deref(),
            container: p.container(),
            pod: p.pod.as_ref().map(|p| p.name.as_str()),
            namespace: p.pod.as_ref().map(|p| p.namespace.as_str()),
        }))
    }

    fn call(&mut self, c: &Call) -> io::Result<()> {
        if !self.write_calls {
            return Ok(());
        }
        self.calls.write(&mut self.buf, c);
        if self.buf.len() >= CALL_LINES_BYTES {
            self.write_call_lines()?;
        }
        Ok(())
    }

    fn call_formatter(&self) -> Option<super::call_line::CallFormatter> {
        if !self.write_calls {
            return None;
        }
        Some(super::call_line::CallFormatter::new(self.clock))
    }

    fn call_formatted(&mut self, _c: &Call, line: &[u8]) -> io::Result<()> {
        if !self.write_calls {
            return Ok(());
        }
        self.buf.extend_from_slice(line);
        if self.buf.len() >= CALL_LINES_BYTES {
            self.write_call_lines()?;
        }
        Ok(())
    }

    fn process_exit(&mut self, e: &crate::process_events::ProcessExit) -> io::Result<()> {
        if !self.select.wants("exit") {
            return Ok(());
        }
        let ts = self.clock.rfc3339(e.mono_ns);
        self.line(&Line::Exit(ExitLine {
            ts,
            pid: e.info.pid,
            ppid: e.ppid,
            comm: &e.info.comm,
            exit_code: e.status.code,
            signal: e.status.signal,
            core_dumped: e.status.core_dumped,
        }))
    }

    fn tls_started(&mut self, mono_ns: u64, start: &super::TlsStart) -> io::Result<()> {
        let ts = self.clock.rfc3339(mono_ns);
        self.line(&Line::Tls(TlsStartLine {
            ts,
            tls_probed: &start.probed,
            tls_probe_failures: &start.failures,
            tls_files_skipped: start.skipped,
        }))?;
        self.out().flush()
    }

    fn lost(&mut self, mono_ns: u64, loss: &super::Loss) -> io::Result<()> {
        let ts = self.clock.rfc3339(mono_ns);
        self.line(&Line::Lost(LostLine {
            ts,
            events: loss.events,
            bytes: loss.bytes,
            missed_runs: loss.missed_runs,
        }))
    }

    fn warning(&mut self, mono_ns: u64, w: &super::Warning) -> io::Result<()> {
        let ts = self.clock.rfc3339(mono_ns);
        // After the calls before it; seen at once, not at the next batch's flush.
        self.write_call_lines()?;
        self.line(&Line::Warning(Stamped { ts: &ts, body: w }))?;
        self.out().flush()
    }

    fn profile(&mut self, mono_ns: u64, p: &crate::profile::ProfileLine) -> io::Result<()> {
        if !self.select.wants("profile") {
            return Ok(());
        }
        let ts = self.clock.rfc3339(mono_ns);
        self.write_call_lines()?;
        self.line(&Line::Profile(Stamped { ts: &ts, body: p }))?;
        self.out().flush()
    }

    fn profile_trigger(
        &mut self,
        mono_ns: u64,
        e: &crate::profile::trigger::TriggerEvent,
    ) -> io::Result<()> {
        let ts = self.clock.rfc3339(mono_ns);
        self.write_call_lines()?;
        self.line(&Line::ProfileTrigger(Stamped { ts: &ts, body: e }))?;
        self.out().flush()
    }

    fn interval(&mut self, r: &IntervalReport) -> io::Result<()> {
        let ts = self.clock.rfc3339(r.mono_ns);
        let select = self.select;
        // Always written (as `lost` is): it says the interval's numbers are of a sample.
        if let Some(sm) = &r.sampling {
            self.line(&Line::Sampling(Stamped { ts: &ts, body: sm }))?;
        }
        for e in r.endpoints.iter().filter(|_| select.wants("endpoint")) {
            self.line(&Line::Endpoint(Stamped { ts: &ts, body: e }))?;
        }
        for p in r.processes.iter().filter(|_| select.wants("process")) {
            self.line(&Line::Process(Stamped { ts: &ts, body: p }))?;
        }
        if let Some(o) = r.overhead.as_ref().filter(|_| select.wants("overhead")) {
            if select.overhead_programs {
                self.line(&Line::Overhead(Stamped { ts: &ts, body: o }))?;
            } else {
                self.line(&Line::Overhead(Stamped {
                    ts: &ts,
                    body: &o.without_programs(),
                }))?;
            }
        }
        if let Some(p) = r.profile.as_ref().filter(|_| select.wants("profile")) {
            // The time and period of its own reading: the profile's thread reads the kernel
            // on a clock of its own, and the interval hands on the readings done in it.
            let read_ts = self
                .clock
                .rfc3339(if p.mono_ns > 0 { p.mono_ns } else { r.mono_ns });
            for l in p.lines_of(crate::profile::Span::Interval, Some(p.duration_ns)) {
                self.line(&Line::Profile(Stamped {
                    ts: &read_ts,
                    body: &l,
                }))?;
            }
        }
        match &r.flows {
            Some(fr) => self.flow_lines(&ts, r.mono_ns, fr),
            None => Ok(()),
        }
    }

    fn flow_part(&mut self, part: crate::flows::FlowReport) -> io::Result<()> {
        let ts = self.clock.rfc3339(part.mono_ns);
        self.flow_lines(&ts, part.mono_ns, &part)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.write_call_lines()?;
        self.out().flush()
    }

    fn summary(&mut self, s: &Summary) -> io::Result<()> {
        self.line(&Line::Summary(SummaryLine {
            // Session end in the session's own time (a replay shows the recorded time).
            // Saturating: a recording may carry any start and duration.
            ts: crate::clock::rfc3339(
                self.start_unix_ns
                    .saturating_add(i64::try_from(s.duration_ns).unwrap_or(i64::MAX)),
            ),
            summary: s,
        }))?;
        self.out().flush()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn call_lines_gathered_reach_the_output_when_the_sink_goes() {
        let call = crate::aggregate::endpoints::tests::call("curl", 1, "GET", "/a", 5_000);
        let mut out = Vec::new();
        {
            let mut sink = JsonSink::new(&mut out);
            sink.call(&call).unwrap();
            sink.call(&call).unwrap();
            // Dropped without a flush or a summary, as on an error.
        }
        let text = String::from_utf8(out).unwrap();
        assert_eq!(text.lines().count(), 2, "{text}");
        for line in text.lines() {
            let v: serde_json::Value = serde_json::from_str(line).unwrap();
            assert_eq!(
                (v["type"].as_str(), v["resource"].as_str()),
                (Some("call"), Some("/a"))
            );
        }
        // And before any other line: a line written after the calls comes after them.
        let mut sink = JsonSink::new(Vec::new());
        sink.call(&call).unwrap();
        sink.lost(0, &crate::sink::Loss::default()).unwrap();
        let text = String::from_utf8(sink.into_inner()).unwrap();
        let types: Vec<String> = text
            .lines()
            .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap()["type"].to_string())
            .collect();
        assert_eq!(types, ["\"call\"", "\"lost\""], "{text}");
    }

    #[test]
    fn any_start_and_duration_give_a_summary_line() {
        for (start, duration) in [
            (i64::MAX, u64::MAX),
            (i64::MAX - 1, 5),
            (i64::MIN, u64::MAX),
        ] {
            let mut sink = JsonSink::new(Vec::new());
            let mut meta = SessionMeta::this_host("replay", 0, Filters::default(), 0);
            meta.start_unix_ns = start;
            sink.meta(&meta).unwrap();
            sink.summary(&Summary {
                duration_ns: duration,
                ..Summary::default()
            })
            .unwrap();
            let out = String::from_utf8(sink.into_inner()).unwrap();
            let last: serde_json::Value =
                serde_json::from_str(out.lines().last().unwrap()).unwrap();
            assert_eq!(last["type"], "summary");
        }
    }

    #[test]
    fn floats_keep_the_digits_that_mean_something() {
        for (v, want) in [
            (9.461354223498853, "9.461"),
            (0.9931501757039578, "0.9932"),
            (0.000123456, "0.0001235"),
            (100.0, "100.0"),
            (0.0, "0.0"),
            (12345.6789, "12345.679"),
            (-2.5, "-2.5"),
            (1.0 / 3.0, "0.3333"),
        ] {
            let mut out = Vec::new();
            let mut ser = serde_json::Serializer::with_formatter(&mut out, RoundedFloats);
            v.serialize(&mut ser).unwrap();
            assert_eq!(String::from_utf8(out).unwrap(), want, "{v}");
        }
        // Too large to round at 3 decimals exactly: written as it is.
        assert_eq!(round_meaningful(1.0e15 + 0.5), 1.0e15 + 0.5);
        assert!(round_meaningful(f64::NAN).is_nan());
    }

    #[test]
    fn only_the_chosen_line_types_are_written() {
        assert!(LineSelection::only(&["calls"]).is_err());
        let sel = LineSelection::only(&["call", "flow_end"]).unwrap();
        assert!(sel.wants("call") && sel.wants("flow_end") && sel.wants_flows());
        assert!(!sel.wants("endpoint") && !sel.wants("flow") && !sel.wants("meta"));
        assert!(!LineSelection::only(&["endpoint"]).unwrap().wants_flows());
        let all = LineSelection::default();
        assert!(SELECTABLE_TYPES.iter().all(|t| all.wants(t)));
        assert!(!all.overhead_programs);

        let mut sink =
            JsonSink::new(Vec::new()).with_selection(LineSelection::only(&["exit"]).unwrap());
        sink.meta(&SessionMeta::this_host("replay", 0, Filters::default(), 0))
            .unwrap();
        assert!(
            sink.call_formatter().is_none(),
            "no call lines: none formatted"
        );
        sink.process(&ProcInfo {
            pid: 7,
            comm: "x".into(),
            exe: None,
            cmdline: Vec::new(),
            cgroup: None,
            ppid: None,
            pod: None,
        })
        .unwrap();
        sink.lost(0, &super::super::Loss::default()).unwrap();
        sink.summary(&Summary::default()).unwrap();
        let out = String::from_utf8(sink.into_inner()).unwrap();
        let types: Vec<String> = out
            .lines()
            .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap()["type"].to_string())
            .collect();
        assert_eq!(types, ["\"meta\"", "\"lost\"", "\"summary\""]);
    }

    /// The schema's version is what docs/json.md says it is (bumped with every rename).
    #[test]
    fn meta_names_the_documented_schema() {
        let mut sink = JsonSink::new(Vec::new());
        sink.meta(&SessionMeta::this_host("replay", 0, Filters::default(), 0))
            .unwrap();
        let out = String::from_utf8(sink.into_inner()).unwrap();
        let meta: serde_json::Value = serde_json::from_str(out.lines().next().unwrap()).unwrap();
        let doc = include_str!("../../docs/json.md");
        let documented = format!("version of this schema ({};", meta["schema"]);
        assert!(doc.contains(&documented), "{meta}");
        assert!(
            doc.contains(&format!("- **{}**:", meta["schema"])),
            "{meta}"
        );
    }

    #[test]
    fn proc_lines_show_command_lines_with_their_secrets_redacted() {
        let mut sink = JsonSink::new(Vec::new());
        let args = [
            "/usr/local/bin/worker",
            "--db-password=Pa55w0rd",
            "--api-key",
            "ak_live_51H8",
            "--queue=jobs",
            "DATABASE_URL=postgres://app:Pg5ecret@db:5432/shop",
        ];
        let info = ProcInfo {
            pid: 4242,
            comm: "worker".into(),
            exe: Some("/usr/local/bin/worker".into()),
            cmdline: args.iter().map(|s| s.to_string()).collect(),
            cgroup: None,
            ppid: None,
            pod: None,
        };
        sink.process(&info).unwrap();
        let out = String::from_utf8(sink.into_inner()).unwrap();
        let line: serde_json::Value = serde_json::from_str(out.trim_end()).unwrap();
        assert_eq!(
            line["cmdline"],
            serde_json::json!([
                "/usr/local/bin/worker",
                "--db-password=[redacted]",
                "--api-key",
                "[redacted]",
                "--queue=jobs",
                "DATABASE_URL=postgres://app:[redacted]@db:5432/shop",
            ])
        );
        // What the sink was given (and a recording keeps) is unchanged.
        assert_eq!(info.cmdline, args);
    }
}
