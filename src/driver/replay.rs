//! Replay: a recording's records fed to the same pipeline a live capture feeds.

use std::io::Read;
use std::sync::atomic::{AtomicBool, Ordering};

use anyhow::Result;

use crate::kernel_counters::KernelCounters;
use crate::pipeline::Pipeline;
use crate::record::reader::{Item, RecordingReader};
use crate::session_meta::SessionMeta;
use crate::sink::Sink;

/// How a replay ended and what it knows about the recorded session.
pub struct ReplayEnd {
    pub kernel: KernelCounters,
    pub duration_ns: u64,
    /// The recording has its end record (the recording run ended normally).
    pub complete: bool,
    pub stopped: bool,
    /// Stopped because the viewer went back in time (`Rewind::requested`): the replay starts
    /// over.
    pub rewound: bool,
}

#[derive(Debug)]
struct Stop;
impl std::fmt::Display for Stop {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("stopped")
    }
}
impl std::error::Error for Stop {}

/// What a replay's viewer asks of it apart from the output (the terminal UI's keys,
/// `tui::ReplayControl`): to go back in recorded time. The sink only receives output.
pub trait Rewind {
    /// The viewer asked to go back (the replay stops to start over).
    fn requested(&self) -> bool;
    /// The recorded time to go back to, once (the replay then skips to it).
    fn take(&self) -> Option<u64>;
}

/// The meta line a replay shows: the recording's, marked as a replay.
pub fn replay_meta<R: Read>(reader: &RecordingReader<R>) -> SessionMeta {
    let mut meta = reader.header.meta.clone();
    meta.source = "replay".into();
    meta
}

/// Feeds every record of `reader` to `pipeline` as fast as it can.
pub fn run<S: Sink, R: Read>(
    reader: &mut RecordingReader<R>,
    pipeline: &mut Pipeline<S>,
    stop: &AtomicBool,
) -> Result<ReplayEnd> {
    run_rewindable(reader, pipeline, stop, None)
}

/// [`run`], stopping early when `rewind` says the viewer asked to go back in recorded time.
pub fn run_rewindable<S: Sink, R: Read>(
    reader: &mut RecordingReader<R>,
    pipeline: &mut Pipeline<S>,
    stop: &AtomicBool,
    rewind: Option<&dyn Rewind>,
) -> Result<ReplayEnd> {
    let rewind_requested = || rewind.is_some_and(|r| r.requested());
    for p in reader.header.processes.clone() {
        pipeline.know_process(p)?;
    }
    let mut kernel = KernelCounters::default();
    let mut end = None;
    let mut since_flush = 0u32;
    // The interval read last, held until the records after it are not its trigger events
    // (kind 9 follows kind 3; the live run wrote their lines before the interval's).
    let mut held: Option<(crate::record::IntervalRecord, Vec<_>)> = None;
    let result = reader.for_each(|item| {
        if let Item::ProfileTrigger(mono_ns, e) = item {
            match held.as_mut() {
                Some((iv, events)) if iv.mono_ns == mono_ns => events.push(*e),
                _ => pipeline.replayed_trigger(mono_ns, &e)?,
            }
            return Ok(());
        }
        if let Some((iv, events)) = held.take() {
            pipeline.on_replayed_interval(&iv, events)?;
        }
        match item {
            Item::Event(raw) => {
                if rewind_requested() {
                    return Err(Stop.into());
                }
                pipeline.on_record(raw)?;
                since_flush += 1;
                if since_flush >= 4096 {
                    since_flush = 0;
                    pipeline.flush()?;
                    if stop.load(Ordering::Relaxed) {
                        return Err(Stop.into());
                    }
                }
            }
            Item::Process(info) => pipeline.know_process(info)?,
            Item::Interval(iv) => {
                kernel = iv.kernel.clone();
                held = Some((iv, Vec::new()));
            }
            Item::Flows(report) => pipeline.set_flows(*report)?,
            Item::ProcEvent(raw) => pipeline.on_proc_record(raw)?,
            Item::Profile(p) => pipeline.set_profile(*p)?,
            Item::End(e) => end = Some(e),
            // Taken above.
            Item::ProfileTrigger(..) => {}
        }
        Ok(())
    });
    let stopped = match result {
        Ok(()) => false,
        Err(e) if e.is::<Stop>() => true,
        Err(e) => return Err(e),
    };
    if let Some((iv, events)) = held.take() {
        pipeline.on_replayed_interval(&iv, events)?;
    }
    let rewound = rewind_requested();
    pipeline.flush()?;
    pipeline.set_replay_stats(reader.stats);
    let (first, last) = pipeline.time_span()?;
    Ok(match end {
        Some(e) => ReplayEnd {
            kernel: e.kernel,
            duration_ns: e.duration_ns,
            complete: true,
            stopped,
            rewound,
        },
        None => ReplayEnd {
            kernel,
            duration_ns: last.saturating_sub(first),
            complete: false,
            stopped,
            rewound,
        },
    })
}

/// A point in a recording, as `--from`/`--to` and the terminal UI's `:goto` take it: an
/// RFC 3339 time (`2026-11-22T02:02:26Z`, `2026-11-22T03:02:26.5+01:00`; a space may stand
/// for the `T`), or an offset from the recording's start (`+30s`, `+1m30s`, `+250ms`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReplayTime {
    /// Unix time, in ns.
    At(i64),
    /// Recorded time after the recording's start, in ns.
    Offset(u64),
}

impl ReplayTime {
    pub fn parse(s: &str) -> std::result::Result<ReplayTime, String> {
        let s = s.trim();
        if let Some(rest) = s.strip_prefix('+') {
            let d = humantime::parse_duration(rest.trim())
                .map_err(|e| format!("{s:?}: {e} (an offset: +30s, +1m30s, +250ms)"))?;
            return Ok(ReplayTime::Offset(
                u64::try_from(d.as_nanos()).unwrap_or(u64::MAX),
            ));
        }
        // humantime reads `Z` (or no zone: UTC); a numeric offset is taken off here.
        let (local, offset_s) = match s.len().checked_sub(6).and_then(|i| {
            let tail = s.get(i..)?.as_bytes();
            let sign = match tail[0] {
                b'+' => 1,
                b'-' => -1,
                _ => return None,
            };
            let digits = |a: u8, b: u8| {
                (a.is_ascii_digit() && b.is_ascii_digit())
                    .then(|| i64::from(a - b'0') * 10 + i64::from(b - b'0'))
            };
            let (h, m) = (digits(tail[1], tail[2])?, digits(tail[4], tail[5])?);
            (tail[3] == b':' && s[..i].contains(':')).then(|| (&s[..i], sign * (h * 3600 + m * 60)))
        }) {
            Some((local, off)) => (local, off),
            None => (s.strip_suffix('Z').unwrap_or(s), 0),
        };
        let t = humantime::parse_rfc3339_weak(local).map_err(|e| {
            format!("{s:?}: {e} (a time: 2026-11-22T02:02:26Z, or an offset: +30s)")
        })?;
        let unix = t
            .duration_since(std::time::UNIX_EPOCH)
            .map_err(|_| format!("{s:?}: before 1970"))?;
        let unix_ns = i64::try_from(unix.as_nanos()).map_err(|_| format!("{s:?}: too late"))?;
        Ok(ReplayTime::At(unix_ns - offset_s * 1_000_000_000))
    }

    /// The recorded (kernel) time it names in the session `meta` describes.
    pub fn mono_ns(self, meta: &SessionMeta) -> u64 {
        match self {
            ReplayTime::At(unix_ns) => unix_ns.saturating_sub(meta.wall_offset_ns).max(0) as u64,
            ReplayTime::Offset(ns) => meta.start_mono_ns().saturating_add(ns),
        }
    }
}

/// The last recorded time in a recording: where its session ended (its end record), else its
/// last interval (a recording cut short). Read through once, without a pipeline: for a
/// replay's progress bar, on a thread of its own; None if `stop` is set first.
pub fn recording_end_ns(path: &std::path::Path, stop: &AtomicBool) -> Option<u64> {
    let mut reader = crate::record::reader::open(path).ok()?;
    let start = reader.header.meta.start_mono_ns();
    let mut last = None::<u64>;
    let read = reader.for_each(|item| {
        match item {
            Item::Interval(iv) => last = last.max(Some(iv.mono_ns)),
            Item::End(e) => last = last.max(Some(start.saturating_add(e.duration_ns))),
            _ => {}
        }
        if stop.load(Ordering::Relaxed) {
            return Err(Stop.into());
        }
        Ok(())
    });
    read.ok()?;
    last
}

/// `--from`/`--to` of a replay to JSON: the lines about what happened outside the range are
/// not written. The replay still reads the recording from its start (connections and their
/// calls are known as they were: a call in the range on a connection opened before it is
/// whole), so the summary line is the whole recording's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TimeRange {
    /// Recorded (kernel) times, inclusive.
    pub from_ns: u64,
    pub to_ns: u64,
}

impl TimeRange {
    /// The range `from`..`to` names in the session `meta` describes (either end open).
    pub fn of(from: Option<ReplayTime>, to: Option<ReplayTime>, meta: &SessionMeta) -> Self {
        TimeRange {
            from_ns: from.map_or(0, |t| t.mono_ns(meta)),
            to_ns: to.map_or(u64::MAX, |t| t.mono_ns(meta)),
        }
    }

    pub fn holds(&self, ns: u64) -> bool {
        (self.from_ns..=self.to_ns).contains(&ns)
    }

    /// An interval (`period_ns` up to `end_ns`) that overlaps the range.
    fn overlaps(&self, end_ns: u64, period_ns: u64) -> bool {
        end_ns >= self.from_ns && end_ns.saturating_sub(period_ns) <= self.to_ns
    }
}

/// A sink that passes on only what happened in a [`TimeRange`]: calls by the time they
/// completed (`tui::call_time`, as the terminal UI places them), intervals that overlap it
/// (with their flow reports), losses, profile triggers, warnings and exits by their time. Everything else
/// (meta, processes, the summary) passes.
pub struct InRange<S> {
    sink: S,
    range: TimeRange,
    /// The last interval passed on: its flow report's later parts follow it.
    parts_follow: bool,
}

impl<S: Sink> InRange<S> {
    pub fn new(sink: S, range: TimeRange) -> Self {
        InRange {
            sink,
            range,
            parts_follow: false,
        }
    }

    pub fn into_inner(self) -> S {
        self.sink
    }

    fn call_in_range(&self, call: &crate::call::Call) -> bool {
        self.range
            .holds(call.start_ns.saturating_add(call.latency_ns))
    }
}

impl<S: Sink> Sink for InRange<S> {
    fn meta(&mut self, meta: &SessionMeta) -> std::io::Result<()> {
        self.sink.meta(meta)
    }
    fn tls_started(&mut self, mono_ns: u64, start: &crate::sink::TlsStart) -> std::io::Result<()> {
        self.sink.tls_started(mono_ns, start)
    }
    fn process(&mut self, info: &crate::procinfo::ProcInfo) -> std::io::Result<()> {
        self.sink.process(info)
    }
    fn call(&mut self, call: &crate::call::Call) -> std::io::Result<()> {
        if self.call_in_range(call) {
            self.sink.call(call)?;
        }
        Ok(())
    }
    fn call_owned(&mut self, call: crate::call::Call) -> std::io::Result<()> {
        if self.call_in_range(&call) {
            self.sink.call_owned(call)?;
        }
        Ok(())
    }
    fn call_in(
        &mut self,
        call: &crate::call::Call,
        row: crate::aggregate::RowRef,
    ) -> std::io::Result<()> {
        if self.call_in_range(call) {
            self.sink.call_in(call, row)?;
        }
        Ok(())
    }
    fn call_owned_in(
        &mut self,
        call: crate::call::Call,
        row: crate::aggregate::RowRef,
    ) -> std::io::Result<()> {
        if self.call_in_range(&call) {
            self.sink.call_owned_in(call, row)?;
        }
        Ok(())
    }
    fn wants_windows(&self) -> bool {
        self.sink.wants_windows()
    }
    fn wants_endpoints_by_process(&self) -> bool {
        self.sink.wants_endpoints_by_process()
    }
    fn live_call_filter(
        &self,
    ) -> Option<std::sync::Arc<crate::pipeline::selection::LiveCallFilter>> {
        self.sink.live_call_filter()
    }
    fn keeps_calls(&self) -> bool {
        self.sink.keeps_calls()
    }
    fn call_formatter(&self) -> Option<crate::sink::call_line::CallFormatter> {
        self.sink.call_formatter()
    }
    fn call_formatted(&mut self, call: &crate::call::Call, line: &[u8]) -> std::io::Result<()> {
        if self.call_in_range(call) {
            self.sink.call_formatted(call, line)?;
        }
        Ok(())
    }
    fn process_exit(&mut self, exit: &crate::process_events::ProcessExit) -> std::io::Result<()> {
        if self.range.holds(exit.mono_ns) {
            self.sink.process_exit(exit)?;
        }
        Ok(())
    }
    /// The session's profile (`--from`/`--to` leave its intervals out, not its totals).
    fn profile(
        &mut self,
        mono_ns: u64,
        profile: &crate::profile::ProfileLine,
    ) -> std::io::Result<()> {
        self.sink.profile(mono_ns, profile)
    }
    fn lost(&mut self, mono_ns: u64, loss: &crate::sink::Loss) -> std::io::Result<()> {
        if self.range.holds(mono_ns) {
            self.sink.lost(mono_ns, loss)?;
        }
        Ok(())
    }
    fn profile_trigger(
        &mut self,
        mono_ns: u64,
        event: &crate::profile::trigger::TriggerEvent,
    ) -> std::io::Result<()> {
        if self.range.holds(mono_ns) {
            self.sink.profile_trigger(mono_ns, event)?;
        }
        Ok(())
    }
    fn interval(&mut self, report: &crate::report::IntervalReport) -> std::io::Result<()> {
        self.parts_follow = self.range.overlaps(report.mono_ns, report.period_ns);
        if self.parts_follow {
            self.sink.interval(report)?;
        }
        Ok(())
    }
    fn interval_owned(&mut self, report: crate::report::IntervalReport) -> std::io::Result<()> {
        self.parts_follow = self.range.overlaps(report.mono_ns, report.period_ns);
        if self.parts_follow {
            self.sink.interval_owned(report)?;
        }
        Ok(())
    }
    fn flow_part(&mut self, part: crate::flows::FlowReport) -> std::io::Result<()> {
        if self.parts_follow {
            self.sink.flow_part(part)?;
        }
        Ok(())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        self.sink.flush()
    }
    fn summary(&mut self, summary: &crate::summary::Summary) -> std::io::Result<()> {
        self.sink.summary(summary)
    }
    fn warning(&mut self, mono_ns: u64, warning: &crate::sink::Warning) -> std::io::Result<()> {
        if self.range.holds(mono_ns) {
            self.sink.warning(mono_ns, warning)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod time_tests {
    use super::*;

    #[test]
    fn replay_times_are_rfc3339_or_offsets_from_the_start() {
        let utc = 1_795_312_946_000_000_000i64; // 2026-11-22T02:02:26Z
        assert_eq!(
            ReplayTime::parse("2026-11-22T02:02:26Z"),
            Ok(ReplayTime::At(utc))
        );
        assert_eq!(
            ReplayTime::parse("2026-11-22 03:02:26.5+01:00"),
            Ok(ReplayTime::At(utc + 500_000_000))
        );
        assert_eq!(
            ReplayTime::parse("2026-11-21T21:02:26-05:00"),
            Ok(ReplayTime::At(utc))
        );
        assert_eq!(
            ReplayTime::parse("+1m30s"),
            Ok(ReplayTime::Offset(90_000_000_000))
        );
        assert_eq!(
            ReplayTime::parse("+250ms"),
            Ok(ReplayTime::Offset(250_000_000))
        );
        for bad in [
            "",
            "+",
            "+3 parsecs",
            "14:32",
            "2026-13-01T00:00:00Z",
            "yesterday",
        ] {
            assert!(ReplayTime::parse(bad).is_err(), "{bad:?}");
        }
        let mut meta = SessionMeta::this_host(
            "replay",
            4096,
            crate::filters::Filters::default(),
            utc - 1_000_000_000,
        );
        meta.start_unix_ns = utc;
        assert_eq!(ReplayTime::At(utc).mono_ns(&meta), 1_000_000_000);
        assert_eq!(ReplayTime::Offset(5).mono_ns(&meta), 1_000_000_005);
    }

    #[test]
    fn a_recordings_end_is_its_sessions_end() {
        let path = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/tests/fixtures/recordings/http_mix.ebt"
        );
        let reader = crate::record::reader::open(path.as_ref()).unwrap();
        let start = reader.header.meta.start_mono_ns();
        let end = recording_end_ns(path.as_ref(), &AtomicBool::new(false)).unwrap();
        let mut r = reader;
        let mut pipeline = crate::pipeline::Pipeline::new(
            Default::default(),
            crate::procinfo::ProcessTable::new(false),
            crate::sink::null::NullSink,
        );
        let meta = replay_meta(&r);
        pipeline.start(&meta).unwrap();
        let replayed = run(&mut r, &mut pipeline, &AtomicBool::new(false)).unwrap();
        assert!(replayed.complete);
        assert_eq!(end, start + replayed.duration_ns);
        assert!(recording_end_ns(path.as_ref(), &AtomicBool::new(true)).is_none());
    }

    /// What a sink in a range is handed: (completion times of calls, interval ends, summary).
    #[derive(Default)]
    struct Seen {
        calls: Vec<u64>,
        intervals: Vec<(u64, u64)>,
        summaries: usize,
    }

    impl Sink for Seen {
        fn call(&mut self, c: &crate::call::Call) -> std::io::Result<()> {
            self.calls.push(c.start_ns + c.latency_ns);
            Ok(())
        }
        fn interval(&mut self, r: &crate::report::IntervalReport) -> std::io::Result<()> {
            self.intervals.push((r.mono_ns, r.period_ns));
            Ok(())
        }
        fn summary(&mut self, _: &crate::summary::Summary) -> std::io::Result<()> {
            self.summaries += 1;
            Ok(())
        }
    }

    fn replay_in(range: TimeRange) -> Seen {
        let path = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/tests/fixtures/recordings/http_mix.ebt"
        );
        let mut r = crate::record::reader::open(path.as_ref()).unwrap();
        let meta = replay_meta(&r);
        let mut pipeline = crate::pipeline::Pipeline::new(
            Default::default(),
            crate::procinfo::ProcessTable::new(false),
            InRange::new(Seen::default(), range),
        );
        pipeline.start(&meta).unwrap();
        let end = run(&mut r, &mut pipeline, &AtomicBool::new(false)).unwrap();
        let (sink, _) = pipeline.finish(&end.kernel, end.duration_ns).unwrap();
        sink.into_inner()
    }

    /// `--from`/`--to`: the calls completed in the range and the intervals overlapping it,
    /// exactly those of the whole replay; the summary still comes.
    #[test]
    fn a_range_passes_on_what_happened_in_it() {
        let all = replay_in(TimeRange {
            from_ns: 0,
            to_ns: u64::MAX,
        });
        assert!(all.calls.len() > 20 && all.intervals.len() > 1);
        let mut times = all.calls.clone();
        times.sort_unstable();
        let range = TimeRange {
            from_ns: times[10],
            to_ns: times[times.len() - 10],
        };
        let some = replay_in(range);
        let want: Vec<u64> = all
            .calls
            .iter()
            .copied()
            .filter(|&t| range.holds(t))
            .collect();
        assert!(want.len() < all.calls.len() && !want.is_empty());
        assert_eq!(some.calls, want);
        let want: Vec<(u64, u64)> = all
            .intervals
            .iter()
            .copied()
            .filter(|&(end, period)| end >= range.from_ns && end - period <= range.to_ns)
            .collect();
        assert!(!want.is_empty());
        assert_eq!(some.intervals, want);
        assert_eq!((all.summaries, some.summaries), (1, 1));
    }
}
