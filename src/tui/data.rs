//! What the terminal UI was sent, as it shows it: the newest calls with their kept heads
//! (bounded), the pipeline's endpoint numbers per window and connections, the flow table's
//! rows, interval reports, process descriptions. Nothing here knows a view, a key or a
//! terminal (`app.rs`). No call is counted here: each interval report carries the numbers
//! (`IntervalReport::windows`, `conns`), so calls the UI had no time to take change none.

use std::collections::{HashMap, VecDeque};

use super::table::{endpoint_key, CallEntry, ConnEntry};
use super::{CallReturner, UiMsg};
use crate::aggregate::{EndpointWindows, RowRef};
use crate::call::Call;
use crate::report::IntervalReport;
use crate::session_meta::SessionMeta;
use crate::summary::Summary;

/// Calls kept for the calls view (the newest).
pub const CALL_RING: usize = 10_000;

/// Bytes of message heads the Calls view keeps in all; past it the oldest calls' heads go
/// (their details say so), so memory stays bounded whatever the heads' size.
pub const HEAD_BUDGET: usize = 8 << 20;

/// Intervals of call rate the header's sparkline shows.
pub const RATE_HISTORY: usize = 30;

/// Processes whose command lines the UI keeps (as many as the process table).
pub const PROCS_MAX: usize = 16384;

/// Endpoints whose recent intervals are kept for the drill-down's sparklines.
pub const ENDPOINT_HISTORY_MAX: usize = 2048;

/// Connections kept for the flows view (the least recently used go first), by the pipeline.
pub use crate::aggregate::conns::MAX_CONNS;

/// The rolling windows of the Endpoints view's numbers (besides the interval and the
/// session), as the pipeline keeps them.
pub use crate::aggregate::endpoints::{WINDOW_10S_NS, WINDOW_1M_NS};

/// What taking a message in did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Taken {
    Added,
    /// Everything shown was dropped: a replay starts over to go back in time.
    StartedOver,
}

/// Everything the collector sent, as shown (a frozen copy while paused).
#[derive(Debug, Clone, Default)]
pub struct Data {
    pub meta: Option<SessionMeta>,
    /// Oldest first.
    pub calls: VecDeque<CallEntry>,
    pub next_seq: u64,
    pub lost_events: u64,
    pub lost_bytes: u64,
    /// Call batches the collector could not hand over because the UI was behind.
    pub ui_dropped: u64,
    /// What the header says of warnings (`sink::Warning::short`): the recording's failure
    /// (kept), else the caps hit lately.
    pub warnings: Vec<String>,
    /// The last interval's report without its flows: they moved into `flows`, and what the
    /// Processes view needs of them is in `flow_bytes_by_pid` (a burst's report holds up to
    /// 200,000 flows; kept here they would be a second copy).
    pub report: Option<Box<IntervalReport>>,
    /// Bytes each process's flows moved in `report`'s interval (in, out); None when that
    /// interval came without a flow table report.
    pub flow_bytes_by_pid: Option<BytesByPid>,
    /// The last interval's flow report has parts still to come (`UiMsg::FlowPart`), and
    /// whether their bytes count in `flow_bytes_by_pid` (not for an interval of no time).
    flow_parts_follow: Option<bool>,
    /// The pipeline's endpoint numbers since the start, over the last 10 s and the last
    /// minute, with latency bins, as of the last interval report (`app::EndpointWindow`).
    pub windows: std::rc::Rc<EndpointWindows>,
    /// The pipeline's connections and their calls, as of the last interval report (the Flows
    /// view without a flow table).
    pub conns: std::rc::Rc<[ConnEntry]>,
    /// The kernel flow table's flows, from the interval reports.
    pub flows: super::flows::FlowBoard,
    /// The profile since the start (`--profile`, or a recording's), from the intervals.
    pub profile: Option<std::rc::Rc<crate::profile::Profile>>,
    /// Latest recorded (kernel) time seen.
    pub position_ns: u64,
    /// Processes described so far (command lines), by pid.
    pub procs: HashMap<u32, crate::procinfo::ProcInfo>,
    /// Per endpoint (`endpoint_key`): calls/s, p99 ns, server- and client-error shares of
    /// each of the last `RATE_HISTORY` intervals, oldest first (the drill-down's sparklines).
    pub endpoint_history: HashMap<String, VecDeque<[f64; 4]>>,
    /// Calls per second of the last intervals, oldest first (the header's sparkline).
    pub rate_history: VecDeque<f64>,
    /// Bytes of the heads `calls` holds.
    pub head_bytes: usize,
    /// Leading entries of `calls` whose heads were dropped for `HEAD_BUDGET`.
    heads_dropped: usize,
    /// Calls before this arrival number had their heads dropped.
    pub heads_dropped_before: u64,
    pub ended: Option<Box<Summary>>,
}

impl Data {
    /// Takes in what the collector sent (`returner`: where the calls pushed out of the list
    /// go). Keys, resizes and the terminal's loss are the app's, not data: ignored.
    pub fn take_in(&mut self, msg: UiMsg, returner: &mut CallReturner) -> Taken {
        let d = self;
        match msg {
            UiMsg::Meta(m) => d.meta = Some(*m),
            UiMsg::Process(p) => {
                if d.procs.len() >= PROCS_MAX && !d.procs.contains_key(&p.pid) {
                    // Bounded as the process table is: start over (rows show the name meanwhile).
                    d.procs.clear();
                }
                d.procs.insert(p.pid, *p);
            }
            UiMsg::Calls(mut calls, rows) => {
                let mut rows = rows.into_iter();
                for c in calls.drain(..) {
                    d.add_call(c, rows.next().flatten(), returner);
                }
                returner.spare(calls);
            }
            UiMsg::Interval(mut r) => {
                if let Some(p) = r.profile.take() {
                    let total = d.profile.get_or_insert_with(Default::default);
                    std::rc::Rc::make_mut(total).merge(&p);
                }
                if let Some(w) = r.windows.take() {
                    d.windows = (*w).into();
                }
                if let Some(c) = r.conns.take() {
                    d.conns = c.into();
                }
                d.position_ns = d.position_ns.max(r.mono_ns);
                // An interval of no time (a replay ending on an interval's boundary): the
                // last real interval's numbers stay on screen, not zeros.
                let no_time = r.period_ns == 0 && d.report.is_some();
                let flows = r.flows.take();
                if !no_time {
                    d.flow_bytes_by_pid = flows.as_ref().map(flow_bytes_by_pid);
                }
                d.flow_parts_follow = flows.as_ref().filter(|f| f.more).map(|_| !no_time);
                if let Some(fr) = flows {
                    d.flows.apply(fr, r.period_ns);
                }
                if no_time {
                    if let Some(prev) = d.report.as_mut() {
                        prev.totals = r.totals;
                    }
                    return Taken::Added;
                }
                d.report = Some(r);
                // Rows by process (keyed with their pid) have sparklines too.
                let by_process = d.windows.by_process.as_ref().map(|b| &b.interval);
                let now: HashMap<String, [f64; 4]> = d
                    .report
                    .as_ref()
                    .map(|r| {
                        r.endpoints
                            .iter()
                            .chain(by_process.into_iter().flatten())
                            .map(|e| {
                                let v = [
                                    e.calls_per_s,
                                    e.latency_p99_ns as f64,
                                    e.server_error_rate.unwrap_or(0.0),
                                    e.client_error_rate.unwrap_or(0.0),
                                ];
                                (endpoint_key(e), v)
                            })
                            .collect()
                    })
                    .unwrap_or_default();
                for (k, h) in d.endpoint_history.iter_mut() {
                    if h.len() >= RATE_HISTORY {
                        h.pop_front();
                    }
                    h.push_back(now.get(k).copied().unwrap_or_default());
                }
                for (k, v) in now {
                    if d.endpoint_history.len() < ENDPOINT_HISTORY_MAX {
                        d.endpoint_history
                            .entry(k)
                            .or_insert_with(|| VecDeque::from([v]));
                    }
                }
                if let Some(rate) = d.calls_per_s() {
                    if d.rate_history.len() >= RATE_HISTORY {
                        d.rate_history.pop_front();
                    }
                    d.rate_history.push_back(rate);
                }
            }
            UiMsg::FlowPart(part) => {
                if let Some(counted) = d.flow_parts_follow {
                    d.flow_parts_follow = part.more.then_some(counted);
                    if let Some(by_pid) = d.flow_bytes_by_pid.as_mut().filter(|_| counted) {
                        add_flow_bytes(by_pid, &part);
                    }
                    d.flows.apply_part(*part);
                }
            }
            UiMsg::Lost { events, bytes } => {
                d.lost_events += events;
                d.lost_bytes += bytes;
            }
            UiMsg::Dropped(n) => d.ui_dropped = n,
            UiMsg::Warning(w) => {
                let short = w.short();
                if !d.warnings.contains(&short) {
                    d.warnings.push(short);
                }
            }
            UiMsg::Ended(s) => d.ended = Some(s),
            UiMsg::Restart => {
                // The replay starts over to go back in time: everything shown is rebuilt (the
                // calls it held go back like those pushed out).
                for e in d.calls.drain(..) {
                    returner.give_back(e.call);
                }
                *d = Data::default();
                return Taken::StartedOver;
            }
            UiMsg::Key(_)
            | UiMsg::Resize(..)
            | UiMsg::TerminalLost(_)
            | UiMsg::InputFailed(_)
            | UiMsg::ReplayEnd(_) => {}
        }
        Taken::Added
    }

    fn add_call(&mut self, call: Box<Call>, row: Option<RowRef>, returner: &mut CallReturner) {
        let d = self;
        let seq = d.next_seq;
        d.next_seq += 1;
        d.position_ns = d.position_ns.max(super::call_time(&call));
        if d.calls.len() >= CALL_RING {
            if let Some(old) = d.calls.pop_front() {
                if d.heads_dropped > 0 {
                    d.heads_dropped -= 1;
                } else {
                    d.head_bytes -= heads_len(&old.call);
                }
                let CallEntry { call: old, .. } = old;
                returner.give_back(old);
            }
        }
        d.head_bytes += heads_len(&call);
        d.calls.push_back(CallEntry::new(seq, call, row));
        while d.head_bytes > HEAD_BUDGET && d.heads_dropped < d.calls.len() {
            let e = &mut d.calls[d.heads_dropped];
            d.head_bytes -= heads_len(&e.call);
            e.call.l7.req_head.bytes = Vec::new();
            e.call.l7.resp_head.bytes = Vec::new();
            d.heads_dropped += 1;
            d.heads_dropped_before = e.seq + 1;
        }
    }

    /// Kernel time the session started (from the meta).
    pub fn start_mono_ns(&self) -> Option<u64> {
        self.meta.as_ref().map(SessionMeta::start_mono_ns)
    }

    pub fn total_calls(&self) -> u64 {
        match (&self.ended, &self.report) {
            (Some(s), _) => s.calls,
            (None, Some(r)) => r.totals.calls.max(self.next_seq),
            _ => self.next_seq,
        }
    }

    pub fn total_lost(&self) -> u64 {
        let lost = |k: &crate::kernel_counters::KernelCounters| k.lost + k.missed_runs;
        let reported = self.report.as_ref().map_or(0, |r| lost(&r.totals.kernel));
        let ended = self.ended.as_ref().map_or(0, |s| lost(&s.kernel));
        self.lost_events.max(reported).max(ended)
    }

    /// With bytes lost (records dropped, stream gaps): the calls known to be missing (messages
    /// dropped because bytes were lost inside them), a lower bound — calls wholly inside a
    /// gap are not known. None when nothing was lost.
    pub fn calls_missing(&self) -> Option<u64> {
        let t: &crate::summary::Summary = match (&self.ended, &self.report) {
            (Some(s), _) => s,
            (None, Some(r)) => &r.totals,
            (None, None) => return None,
        };
        let lost = t.tracker.gaps > 0 || t.kernel.lost + t.kernel.missed_runs > 0;
        (lost || self.total_lost() > 0).then_some(t.parse.damaged_messages)
    }

    /// With --otlp: spans (calls) not exported so far; None without --otlp.
    pub fn otlp_dropped(&self) -> Option<u64> {
        let t: &crate::summary::Summary = match (&self.ended, &self.report) {
            (Some(s), _) => s,
            (None, Some(r)) => &r.totals,
            (None, None) => return None,
        };
        t.otlp.map(|o| o.spans_dropped)
    }

    /// Calls per second over the last interval.
    pub fn calls_per_s(&self) -> Option<f64> {
        let r = self.report.as_ref()?;
        let calls: u64 = r.endpoints.iter().map(|e| e.calls).sum();
        (r.period_ns > 0).then(|| calls as f64 * 1e9 / r.period_ns as f64)
    }

    /// A call's relatives in its chain among the calls kept (src/chains.rs): its parent and
    /// its children, by start, each with its seq.
    pub fn chain_relatives(&self, c: &Call) -> ChainRelatives<'_> {
        if c.id == 0 {
            return ChainRelatives::default();
        }
        let parent = c.parent_id.and_then(|pid| {
            self.calls
                .iter()
                .rev()
                .find(|e| e.call.id == pid)
                .map(|e| (e.seq, &*e.call))
        });
        let mut children: Vec<(u64, &Call)> = self
            .calls
            .iter()
            .filter(|e| e.call.parent_id == Some(c.id))
            .map(|e| (e.seq, &*e.call))
            .collect();
        children.sort_by_key(|(_, k)| k.start_ns);
        ChainRelatives { parent, children }
    }

    pub fn find_call(&self, seq: u64) -> Option<&Call> {
        let first = self.calls.front()?.seq;
        let idx = seq.checked_sub(first)? as usize;
        self.calls
            .get(idx)
            .filter(|e| e.seq == seq)
            .map(|e| &*e.call)
    }
}

/// A call's self time: its duration less the union of its children's spans within it.
pub fn self_time_ns<'a>(c: &Call, children: impl IntoIterator<Item = &'a Call>) -> u64 {
    let (start, end) = (c.start_ns, c.start_ns.saturating_add(c.latency_ns));
    let mut spans: Vec<(u64, u64)> = children
        .into_iter()
        .map(|k| {
            (
                k.start_ns.clamp(start, end),
                k.start_ns.saturating_add(k.latency_ns).clamp(start, end),
            )
        })
        .collect();
    spans.sort_unstable();
    let (mut covered, mut reach) = (0u64, start);
    for (a, b) in spans {
        let a = a.max(reach);
        if b > a {
            covered += b - a;
            reach = b;
        }
    }
    c.latency_ns.saturating_sub(covered)
}

/// Children a call's waterfall lists (and Tab can pick) at most; the rest are counted.
pub const MAX_CHAIN_CHILDREN: usize = 24;

/// A call's parent and children among the calls kept ([`Data::chain_relatives`]).
#[derive(Debug, Default)]
pub struct ChainRelatives<'a> {
    pub parent: Option<(u64, &'a Call)>,
    /// By start time.
    pub children: Vec<(u64, &'a Call)>,
}

impl ChainRelatives<'_> {
    /// The relatives Tab can pick, as seqs: the parent (when kept), then the children by
    /// start (as many as the waterfall lists).
    pub fn targets(&self) -> Vec<u64> {
        self.parent
            .map(|(seq, _)| seq)
            .into_iter()
            .chain(
                self.children
                    .iter()
                    .take(MAX_CHAIN_CHILDREN)
                    .map(|(seq, _)| *seq),
            )
            .collect()
    }
}

/// Per pid, bytes (in, out).
pub type BytesByPid = HashMap<u32, (u64, u64)>;

/// Bytes each process's flows moved in the interval (in, out), from the flow table.
pub(super) fn flow_bytes_by_pid(fr: &crate::flows::FlowReport) -> BytesByPid {
    let mut m = BytesByPid::new();
    add_flow_bytes(&mut m, fr);
    m
}

/// Adds the bytes each process's flows in `fr` moved in the interval (in, out).
fn add_flow_bytes(m: &mut BytesByPid, fr: &crate::flows::FlowReport) {
    let tcp = fr.flows.iter().chain(&fr.ends).filter_map(|f| {
        f.pid
            .map(|pid| (pid, f.interval_bytes_in, f.interval_bytes_out))
    });
    let udp = fr
        .udp
        .iter()
        .map(|f| (f.pid, f.interval_bytes_in, f.interval_bytes_out));
    for (pid, i, o) in tcp.chain(udp) {
        let e = m.entry(pid).or_default();
        e.0 = e.0.saturating_add(i);
        e.1 = e.1.saturating_add(o);
    }
}

/// Bytes of kept heads a call holds.
fn heads_len(c: &Call) -> usize {
    c.l7.req_head.bytes.len() + c.l7.resp_head.bytes.len()
}
