//! Per-endpoint call statistics: counts, errors, bytes and latency percentiles, for the current
//! interval and since the start.
//!
//! An endpoint is (process name, side, protocol, method, normalised resource). The table holds
//! at most `max_endpoints` of them; calls to further endpoints fold into an "other" row per
//! (process name, side, protocol), so one service with unbounded URLs cannot push the others'
//! rows out, and the row shows who overflowed. The "other" rows are bounded too
//! ([`EndpointTable::max_other_rows`]); past that, a global row per (side, protocol) with comm
//! `*` takes the rest. Nothing is evicted: since-start numbers stay exact for the rows that got
//! in.
//!
//! Latencies are recorded in **nanoseconds** in HDR histograms covering 1 µs ..= 100 s with two
//! significant digits (bucket width ≤ 1/128 of the value; percentiles are reported as the
//! bucket's midpoint, so relative error ≤ 0.4%). Values outside that range are recorded at the
//! nearest bound and counted in `latency_clamped`; `latency_max_ns` is exact.
//!
//! Memory: a histogram is ~11 KiB (u32 counts). Each row has a since-start one, plus an interval
//! one while it has calls in the interval: the default 1000 rows cost 11–22 MiB.
//! [`EndpointTable::approx_bytes`] tells the current figure. u32 counts saturate at 4.29e9 calls
//! in one bucket (buckets are ≤ 0.8% of the value wide), i.e. after 12 hours of 100 000 calls/s
//! to one endpoint all within 0.8% of the same latency; u64 would double the memory for that.

use hashbrown::{Equivalent, HashMap};

use hdrhistogram::{Counter, Histogram};

use super::distinct::{hash64, DistinctCounter};
use super::fold::{SegmentFolder, FOLD};
use super::normalize_memo::NormalizeMemo;
use crate::call::{Call, Side};
use crate::protocols::{Outcome, Protocol};

pub const DEFAULT_MAX_ENDPOINTS: usize = 1000;
pub const LATENCY_LOW_NS: u64 = 1_000;
pub const LATENCY_HIGH_NS: u64 = 100_000_000_000;
pub const LATENCY_SIGFIG: u8 = 2;
/// Resource shown on "other" rows.
pub const OTHER_RESOURCE: &str = "{other}";
/// Comm of the global "other" rows (once per-process "other" rows are full too).
pub const ANY_COMM: &str = "*";
/// Longest method kept in a key (HTTP methods are short; a garbage token must not be large).
const MAX_METHOD_LEN: usize = 32;

/// What calls are counted by (see the module's description).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct EndpointKey {
    comm: String,
    side: Side,
    proto: Protocol,
    method: String,
    resource: String,
}

/// An [`EndpointKey`] borrowed from a call: looked up without allocating (the key is only
/// built, owned, for a new row). Its fields hash exactly as the owned key's do (`&str` hashes
/// as `String`, field by field in the same order).
#[derive(Hash)]
struct EndpointKeyRef<'a> {
    comm: &'a str,
    side: Side,
    proto: Protocol,
    method: &'a str,
    resource: &'a str,
}

impl Equivalent<EndpointKey> for EndpointKeyRef<'_> {
    fn equivalent(&self, k: &EndpointKey) -> bool {
        self.side == k.side
            && self.proto == k.proto
            && self.comm == k.comm
            && self.method == k.method
            && self.resource == k.resource
    }
}

impl EndpointKeyRef<'_> {
    fn to_owned_key(&self) -> EndpointKey {
        EndpointKey {
            comm: self.comm.to_owned(),
            side: self.side,
            proto: self.proto,
            method: self.method.to_owned(),
            resource: self.resource.to_owned(),
        }
    }
}

/// A row of one [`EndpointTable`]: where the calls of a key go, found once per key
/// ([`EndpointTable::row_of`]). Rows are never evicted, so a row's number names it for the
/// whole session: the terminal UI matches a call to the row it was counted in by it
/// ([`EndpointSnapshot::row`]) instead of normalising the call's resource again.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct RowRef(u32);

impl RowRef {
    /// A number of [`KeyRows`] whose row is not known yet (never a row: rows are u32 indexes
    /// of a table far smaller).
    const UNRESOLVED: RowRef = RowRef(u32::MAX);
}

/// `comm: None` is the global row of a (side, protocol).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct OtherKey {
    comm: Option<String>,
    side: Side,
    proto: Protocol,
}

/// Scalar counters of a row over some period.
#[derive(Debug, Clone, Copy, Default)]
struct Counts {
    calls: u64,
    server_errors: u64,
    client_errors: u64,
    unknown_outcomes: u64,
    req_bytes: u64,
    resp_bytes: u64,
    latency_sum_ns: u64,
    /// Meaningful only with `calls > 0`.
    latency_min_ns: u64,
    latency_max_ns: u64,
    latency_clamped: u64,
    folded_calls: u64,
    /// Calls that came right after their connection lost bytes ([`Call::after_loss`]).
    calls_after_loss: u64,
}

impl Counts {
    fn add(&mut self, o: &Counts) {
        if o.calls > 0 {
            self.latency_min_ns = if self.calls == 0 {
                o.latency_min_ns
            } else {
                self.latency_min_ns.min(o.latency_min_ns)
            };
        }
        self.calls += o.calls;
        self.server_errors += o.server_errors;
        self.client_errors += o.client_errors;
        self.unknown_outcomes += o.unknown_outcomes;
        self.req_bytes = self.req_bytes.saturating_add(o.req_bytes);
        self.resp_bytes = self.resp_bytes.saturating_add(o.resp_bytes);
        self.latency_sum_ns = self.latency_sum_ns.saturating_add(o.latency_sum_ns);
        self.latency_max_ns = self.latency_max_ns.max(o.latency_max_ns);
        self.latency_clamped += o.latency_clamped;
        self.folded_calls += o.folded_calls;
        self.calls_after_loss += o.calls_after_loss;
    }
}

fn new_histogram<T: Counter>() -> Histogram<T> {
    Histogram::new_with_bounds(LATENCY_LOW_NS, LATENCY_HIGH_NS, LATENCY_SIGFIG)
        .expect("constant histogram bounds are valid")
}

/// A latency clamped into the histogram's range, and whether it had to be.
fn clamp_latency(ns: u64) -> (u64, bool) {
    let v = ns.clamp(LATENCY_LOW_NS, LATENCY_HIGH_NS);
    (v, v != ns)
}

/// One past interval of a row, kept for rolling windows: its counters and its latency
/// histogram's non-empty buckets (value, count) — a few dozen entries, not 11 KiB.
struct Recent {
    /// `elapsed_ns` of the table when the interval ended.
    end_ns: u64,
    counts: Counts,
    buckets: Vec<(u64, u64)>,
}

struct Row {
    interval: Counts,
    /// Interval latencies; dropped after an interval without calls so idle rows cost only
    /// their since-start histogram.
    interval_hist: Option<Box<Histogram<u32>>>,
    total: Counts,
    total_hist: Box<Histogram<u32>>,
    /// Distinct keys folded into this row (only on "other" rows).
    folded_keys: Option<DistinctCounter>,
    /// Its resource has segments folded to `{…}` ([`SegmentFolder`]): its calls are counted
    /// as folded ones.
    segment_folded: bool,
    /// Its intervals with calls in the last `history_ns` of the table, oldest first.
    recent: std::collections::VecDeque<Recent>,
}

impl Row {
    fn new(folded: bool, segment_folded: bool) -> Row {
        Row {
            segment_folded,
            interval: Counts::default(),
            interval_hist: None,
            total: Counts::default(),
            total_hist: Box::new(new_histogram()),
            folded_keys: folded.then(DistinctCounter::default),
            recent: Default::default(),
        }
    }

    fn record(&mut self, call: &Call) {
        let c = &mut self.interval;
        c.latency_min_ns = if c.calls == 0 {
            call.latency_ns
        } else {
            c.latency_min_ns.min(call.latency_ns)
        };
        c.calls += 1;
        c.calls_after_loss += u64::from(call.after_loss);
        match call.l7.outcome {
            Outcome::Ok => {}
            Outcome::ClientError => c.client_errors += 1,
            Outcome::ServerError => c.server_errors += 1,
            Outcome::Unknown => c.unknown_outcomes += 1,
        }
        c.req_bytes = c.req_bytes.saturating_add(call.l7.req.bytes);
        c.resp_bytes = c.resp_bytes.saturating_add(call.l7.resp.bytes);
        c.latency_sum_ns = c.latency_sum_ns.saturating_add(call.latency_ns);
        c.latency_max_ns = c.latency_max_ns.max(call.latency_ns);
        let (v, clamped) = clamp_latency(call.latency_ns);
        c.latency_clamped += u64::from(clamped);
        self.interval_hist
            .get_or_insert_with(|| Box::new(new_histogram()))
            .saturating_record(v);
    }

    /// Moves the interval (ending at `end_ns` of the table's time) into the since-start
    /// totals, and into the recent intervals if the table keeps `history_ns` of them.
    fn roll_interval(&mut self, end_ns: u64, history_ns: u64) {
        while self
            .recent
            .front()
            .is_some_and(|r| r.end_ns.saturating_add(history_ns) <= end_ns)
        {
            self.recent.pop_front();
        }
        if self.interval.calls == 0 {
            self.interval_hist = None;
            return;
        }
        if history_ns > 0 {
            let buckets = self.interval_hist.as_deref().map_or(Vec::new(), |h| {
                h.iter_recorded()
                    .map(|v| (v.value_iterated_to(), v.count_at_value() as u64))
                    .collect()
            });
            self.recent.push_back(Recent {
                end_ns,
                counts: self.interval,
                buckets,
            });
        }
        self.total.add(&self.interval);
        self.interval = Counts::default();
        if let Some(h) = &mut self.interval_hist {
            self.total_hist
                .add(&**h)
                .expect("histograms of the same bounds add");
            h.reset();
        }
    }

    /// Latencies since the start up to the last interval's end in power-of-2 bins.
    fn latency_bins(&self) -> Option<LatencyBins> {
        let mut bins = [0u64; 64];
        for v in self.total_hist.iter_recorded() {
            let bin = 63 - v.value_iterated_to().max(1).leading_zeros() as usize;
            bins[bin] += u64::from(v.count_at_value());
        }
        let first = bins.iter().position(|&n| n > 0)?;
        let last = bins.iter().rposition(|&n| n > 0)?;
        Some(LatencyBins {
            first: first as u8,
            calls: bins[first..=last].into(),
        })
    }

    fn bytes(&self) -> usize {
        let hist = |h: &Histogram<u32>| {
            h.distinct_values() * std::mem::size_of::<u32>() + std::mem::size_of::<Histogram<u32>>()
        };
        std::mem::size_of::<Row>()
            + self
                .recent
                .iter()
                .map(|r| std::mem::size_of::<Recent>() + r.buckets.capacity() * 16)
                .sum::<usize>()
            + hist(&self.total_hist)
            + self.interval_hist.as_deref().map_or(0, hist)
            + self
                .folded_keys
                .as_ref()
                .map_or(0, |_| DistinctCounter::BYTES)
    }
}

/// One row of the endpoint table for one period (an interval or since the start).
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct EndpointSnapshot {
    /// The table's row these numbers are of (not in JSON: a number of this session).
    #[serde(skip)]
    pub row: RowRef,
    pub comm: String,
    pub side: Side,
    pub proto: Protocol,
    pub method: String,
    /// Normalised resource, or [`OTHER_RESOURCE`] on a row of folded endpoints.
    pub resource: String,
    /// This row sums endpoints that did not fit in the table.
    pub other: bool,
    /// On the rows by process ([`EndpointsByProcess`], the terminal UI's; never in JSON
    /// lines): the process whose calls of the endpoint these are; `Some(0)` for the endpoint's
    /// calls by processes that did not fit ([`EndpointTable::with_rows_by_process`]).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pid: Option<u32>,
    /// Length of the period the numbers cover.
    pub period_ns: u64,
    pub calls: u64,
    pub calls_per_s: f64,
    /// Its calls are of a sample of connections (`--max-cpu`, `--sample`): counts, bytes and
    /// latencies are the captured connections' (exact for those); absent when not sampled.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub sampled: bool,
    /// In a sampled interval: `calls_per_s` scaled to all traffic by the interval's ratio.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub calls_per_s_estimated: Option<f64>,
    /// Server errors (HTTP 5xx, protocol error replies).
    pub server_errors: u64,
    /// Client errors (HTTP 4xx).
    pub client_errors: u64,
    /// Calls whose outcome could not be known ([`Outcome::Unknown`]): neither ok nor an error.
    pub unknown_outcomes: u64,
    /// server_errors / the calls whose outcome is known; None when none is.
    pub server_error_rate: Option<f64>,
    /// client_errors / the calls whose outcome is known; None when none is.
    pub client_error_rate: Option<f64>,
    pub req_bytes: u64,
    pub resp_bytes: u64,
    pub req_bytes_per_s: f64,
    pub resp_bytes_per_s: f64,
    pub latency_mean_ns: u64,
    /// The calls' latencies added up, exactly (saturating): what exporters report as a
    /// histogram's sum (not in JSON lines, which have the mean).
    #[serde(skip)]
    pub latency_sum_ns: u64,
    pub latency_p50_ns: u64,
    pub latency_p90_ns: u64,
    pub latency_p99_ns: u64,
    pub latency_p999_ns: u64,
    /// Exact, not from the histogram (0 without calls).
    pub latency_min_ns: u64,
    /// Exact, not from the histogram.
    pub latency_max_ns: u64,
    /// Latencies outside 1 µs ..= 100 s, counted in the percentiles at the nearest bound.
    pub latency_clamped: u64,
    /// Calls to endpoints that did not fit (only on `other` rows).
    pub folded_calls: u64,
    /// Distinct endpoints folded into this row since the start (estimate, ~6.5% error).
    pub folded_keys_approx: u64,
    /// Some of its calls came over a connection that had just lost bytes (records lost or
    /// not captured): calls of this endpoint may be missing from the numbers.
    pub conn_loss: bool,
}

/// Totals of the table itself, to tell the user how much was folded.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct EndpointTableStats {
    pub endpoints: u64,
    pub other_rows: u64,
    pub max_endpoints: u64,
    pub folded_calls: u64,
    /// Distinct endpoint keys that were folded (estimate).
    pub folded_keys_approx: u64,
    /// Calls counted in rows whose resource has segments folded to `{…}` (exact).
    pub segment_folded_calls: u64,
    /// Distinct keys whose segments were folded to `{…}` (estimate).
    pub segment_folded_keys_approx: u64,
    pub latency_clamped: u64,
    pub approx_bytes: u64,
}

/// The rolling windows of the terminal UI's Endpoints view (besides the interval and the
/// session): rows keep their intervals of the longest ([`EndpointTable::with_history`]).
pub const WINDOW_10S_NS: u64 = 10_000_000_000;
pub const WINDOW_1M_NS: u64 = 60_000_000_000;

/// Every row's numbers over the windows a viewer shows, up to an interval's end, made by the
/// pipeline's table (the one `--json` reports from) for a sink that shows them
/// (`Sink::wants_windows`): the terminal UI keeps no table of its own, so its numbers are
/// the pipeline's whatever calls it had no time to take.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct EndpointWindows {
    /// Since the start, busiest first (`EndpointTable::cumulative`).
    pub since_start: Vec<EndpointSnapshot>,
    /// The intervals that ended in the last 10 s and the last minute (`EndpointTable::window`).
    pub last_10s: Vec<EndpointSnapshot>,
    pub last_1m: Vec<EndpointSnapshot>,
    /// The latency bins of each row of `since_start`, in its order (None for a row whose
    /// calls are not in the table's histograms).
    pub latency_bins: Vec<Option<LatencyBins>>,
    /// The same rows split by process, where the table keeps them
    /// ([`EndpointTable::with_rows_by_process`]).
    pub by_process: Option<Box<EndpointsByProcess>>,
}

impl EndpointWindows {
    /// The latency bins since the start of row `row` (of process `pid`'s calls, on rows by
    /// process); None for a row without them ("other").
    pub fn latency_bins_of(&self, row: RowRef, pid: Option<u32>) -> Option<&LatencyBins> {
        let i = self
            .since_start
            .iter()
            .position(|e| e.row == row && e.pid == pid)?;
        self.latency_bins.get(i)?.as_ref()
    }
}

/// Every endpoint row split by the process whose calls it counted (issue 44: three `python3`
/// servers are three rows, and a process's own endpoints are its own): the last interval and
/// the windows of [`EndpointWindows`] (whose `by_process` is None here).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct EndpointsByProcess {
    pub interval: Vec<EndpointSnapshot>,
    pub windows: EndpointWindows,
}

/// The rows by (endpoint row, pid) of a table that keeps them: made on a row's first call
/// by a process, at most `cap` of them; past that a row's calls by further processes go to
/// its pid-0 row (one per endpoint row, so at most as many as the table has rows).
#[derive(Default)]
struct ProcessRows {
    index: HashMap<(u32, u32), u32>,
    rows: Vec<Row>,
    /// (endpoint row, pid) of each of `rows`.
    keys: Vec<(u32, u32)>,
    cap: usize,
    /// The last interval's rows, made when it ended (before its numbers joined the totals).
    interval: Vec<EndpointSnapshot>,
}

impl ProcessRows {
    fn record(&mut self, at: RowRef, call: &Call) {
        let key = (at.0, call.pid);
        let i = match self.index.get(&key) {
            Some(&i) => i,
            None => {
                let key = if self.index.len() < self.cap {
                    key
                } else {
                    (at.0, 0)
                };
                let next = self.rows.len() as u32;
                let i = *self.index.entry(key).or_insert(next);
                if i == next {
                    self.rows.push(Row::new(false, false));
                    self.keys.push(key);
                }
                i
            }
        };
        self.rows[i as usize].record(call);
    }
}

/// A row's latencies in power-of-2 bins, from its fastest bin to its slowest (empty bins
/// between kept): a few hundred bytes a row.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LatencyBins {
    /// Bin of the fastest: [2^first, 2^(first+1)) ns.
    first: u8,
    calls: Box<[u64]>,
}

impl LatencyBins {
    /// (low ns, high ns, calls) per bin.
    pub fn bins(&self) -> Vec<(u64, u64, u64)> {
        let first = u32::from(self.first);
        self.calls
            .iter()
            .enumerate()
            .map(|(i, &n)| {
                let low = 1u64 << (first + i as u32);
                (low, low.saturating_mul(2), n)
            })
            .collect()
    }
}

pub struct EndpointTable {
    /// Endpoint rows by key and "other" rows by (comm, side, protocol): their places in
    /// `rows`, so a call whose key was looked up once (a [`RowRef`]) goes straight to its row.
    endpoints: HashMap<EndpointKey, u32>,
    others: HashMap<OtherKey, u32>,
    rows: Vec<Row>,
    max_endpoints: usize,
    max_other_rows: usize,
    keep_raw: bool,
    folded_calls: u64,
    folded_keys: DistinctCounter,
    /// Sum of the intervals ended so far: the period `cumulative` covers.
    elapsed_ns: u64,
    /// How far back rows keep their intervals for [`EndpointTable::window`] (0: not at all).
    history_ns: u64,
    /// Resources normalised already (a call's resource is most often one seen before).
    memo: NormalizeMemo,
    /// Folds path segments and DNS labels that take too many values (not with `keep_raw`).
    folder: SegmentFolder,
    /// Keys that were folded, and their rows: a folded key's next call is one lookup, not a
    /// fold again. Bounded: started over at [`MAX_ALIASES`].
    aliases: HashMap<EndpointKey, u32>,
    segment_folded_calls: u64,
    /// The rows split by process (`with_rows_by_process`; the terminal UI's).
    by_process: Option<ProcessRows>,
}

/// Folded keys remembered with their rows (see `EndpointTable::aliases`).
const MAX_ALIASES: usize = 4096;

impl Default for EndpointTable {
    fn default() -> Self {
        EndpointTable::new(DEFAULT_MAX_ENDPOINTS, false)
    }
}

impl EndpointTable {
    /// `keep_raw`: key on the raw resource instead of the normalised one (the cap still holds).
    pub fn new(max_endpoints: usize, keep_raw: bool) -> EndpointTable {
        EndpointTable {
            endpoints: HashMap::new(),
            others: HashMap::new(),
            rows: Vec::new(),
            max_endpoints,
            max_other_rows: (max_endpoints / 10).max(16),
            keep_raw,
            folded_calls: 0,
            folded_keys: DistinctCounter::default(),
            elapsed_ns: 0,
            history_ns: 0,
            memo: NormalizeMemo::default(),
            folder: SegmentFolder::default(),
            aliases: HashMap::new(),
            segment_folded_calls: 0,
            by_process: None,
        }
    }

    /// Also keeps every row split by process (up to as many (row, process) pairs as the table
    /// has endpoint rows; then a row's further processes share its pid-0 row), for a viewer
    /// that groups endpoints by process: one more lookup per call.
    pub fn with_rows_by_process(mut self) -> EndpointTable {
        self.by_process = Some(ProcessRows {
            cap: self.max_endpoints,
            ..ProcessRows::default()
        });
        self
    }

    /// Keeps each row's intervals of the last `history_ns` for rolling windows (the terminal
    /// UI's; JSON lines report intervals and need none).
    pub fn with_history(mut self, history_ns: u64) -> EndpointTable {
        self.history_ns = history_ns;
        self
    }

    /// The rolling windows, since-start numbers and latency bins of every row up to the last
    /// [`end_interval`](Self::end_interval): what a sink that shows them gets with each
    /// interval ([`EndpointWindows`]). Empty windows without history (`with_history`).
    pub fn windows(&self) -> EndpointWindows {
        let since_start = self.cumulative();
        let latency_bins = since_start
            .iter()
            .map(|e| self.rows.get(e.row.0 as usize)?.latency_bins())
            .collect();
        EndpointWindows {
            last_10s: self.window(WINDOW_10S_NS),
            last_1m: self.window(WINDOW_1M_NS),
            since_start,
            latency_bins,
            by_process: self.by_process.as_ref().map(|p| {
                let labels = self.labels();
                let rows = || process_rows(p, &labels);
                let since_start = cumulative_of(rows(), self.elapsed_ns);
                let latency_bins = since_start
                    .iter()
                    .map(|e| {
                        let i = p.index.get(&(e.row.0, e.pid.unwrap_or(0)))?;
                        p.rows.get(*i as usize)?.latency_bins()
                    })
                    .collect();
                Box::new(EndpointsByProcess {
                    interval: p.interval.clone(),
                    windows: EndpointWindows {
                        last_10s: self.window_of(rows(), WINDOW_10S_NS),
                        last_1m: self.window_of(rows(), WINDOW_1M_NS),
                        since_start,
                        latency_bins,
                        by_process: None,
                    },
                })
            }),
        }
    }

    /// Each row's label, by row number.
    fn labels(&self) -> Vec<Option<Label<'_>>> {
        let mut labels: Vec<Option<Label<'_>>> = Vec::new();
        labels.resize_with(self.rows.len(), || None);
        let (endpoints, others) = self.labelled_rows();
        for (label, _, at) in endpoints.chain(others) {
            labels[at.0 as usize] = Some(label);
        }
        labels
    }

    /// How far back rows keep their intervals (`with_history`; 0: not at all).
    pub fn history_ns(&self) -> u64 {
        self.history_ns
    }

    /// Every row over the intervals that ended in the last `window_ns` (at most the history
    /// kept; since the start if less has passed), busiest first. Percentiles come from the
    /// merged buckets of those intervals: as exact as an interval's.
    pub fn window(&self, window_ns: u64) -> Vec<EndpointSnapshot> {
        let (endpoints, others) = self.labelled_rows();
        let rows = endpoints.chain(others).map(|(l, r, at)| (l, r, at, None));
        self.window_of(rows, window_ns)
    }

    /// [`window`](Self::window) of the rows given, each with its label, number and pid.
    fn window_of<'a>(
        &self,
        rows: impl Iterator<Item = LabelledRow<'a>>,
        window_ns: u64,
    ) -> Vec<EndpointSnapshot> {
        let window_ns = window_ns.min(self.history_ns);
        let since = self.elapsed_ns.saturating_sub(window_ns);
        let period_ns = window_ns.min(self.elapsed_ns);
        let mut hist: Histogram<u64> = new_histogram();
        let mut out = Vec::new();
        let mut used = false;
        for (label, row, at, pid) in rows {
            let mut recent = row.recent.iter().filter(|r| r.end_ns > since).peekable();
            if recent.peek().is_none() {
                continue;
            }
            if used {
                hist.reset();
            }
            used = true;
            let mut counts = Counts::default();
            for r in recent {
                counts.add(&r.counts);
                for &(v, n) in &r.buckets {
                    hist.saturating_record_n(v, n);
                }
            }
            if counts.calls > 0 {
                let mut e = snapshot(
                    label,
                    at,
                    &counts,
                    Some(&hist),
                    row.folded_keys.as_ref(),
                    period_ns,
                );
                e.pid = pid;
                out.push(e);
            }
        }
        sort(&mut out);
        out
    }

    /// Whether keys hold raw resources (`--raw-resources`), not normalised ones.
    pub fn keeps_raw(&self) -> bool {
        self.keep_raw
    }

    pub fn max_other_rows(&self) -> usize {
        self.max_other_rows
    }

    /// Endpoint rows (not counting "other" rows).
    pub fn len(&self) -> usize {
        self.endpoints.len()
    }

    pub fn is_empty(&self) -> bool {
        self.endpoints.is_empty() && self.others.is_empty()
    }

    /// The endpoint rows and the "other" rows, each with its label and number.
    #[allow(clippy::type_complexity)]
    fn labelled_rows(
        &self,
    ) -> (
        impl Iterator<Item = (Label<'_>, &Row, RowRef)>,
        impl Iterator<Item = (Label<'_>, &Row, RowRef)>,
    ) {
        let rows = &self.rows;
        (
            self.endpoints
                .iter()
                .map(move |(k, &i)| (Label::Endpoint(k), &rows[i as usize], RowRef(i))),
            self.others
                .iter()
                .map(move |(k, &i)| (Label::Other(k), &rows[i as usize], RowRef(i))),
        )
    }

    /// Accounts one completed call; the row it was counted in.
    pub fn observe(&mut self, call: &Call) -> RowRef {
        let (endpoints, aliases) = (&self.endpoints, &self.aliases);
        let found = find_key(&mut self.memo, self.keep_raw, call, |key| {
            endpoints
                .get(key)
                .or_else(|| aliases.get(key))
                .map(|&i| RowRef(i))
        });
        let at = found.unwrap_or_else(|key| self.row_of(key));
        self.record(at, call);
        at
    }

    /// The row a key's calls are counted in, added if the key is new: with its too-varied
    /// segments folded (`fold`), its own row while the table has room, else its process's
    /// "other" row (the global one once those are full too). Rows are never evicted and a
    /// segment that folded folds for good, so the answer holds for every later call of the key.
    pub fn row_of(&mut self, key: EndpointKey) -> RowRef {
        if let Some(&i) = self.endpoints.get(&key) {
            return RowRef(i);
        }
        if self.keep_raw {
            return self.admit(key);
        }
        let folded = self
            .folder
            .fold(&key.comm, key.side, key.proto, &key.method, &key.resource);
        let Some(resource) = folded else {
            return self.admit(key);
        };
        let folded_key = EndpointKey {
            resource,
            ..key.clone()
        };
        let at = self.admit(folded_key);
        if self.aliases.len() >= MAX_ALIASES {
            self.aliases.clear();
        }
        self.aliases.insert(key, at.0);
        at
    }

    /// [`row_of`](Self::row_of) for a key as it is (folded already, or not to be).
    fn admit(&mut self, key: EndpointKey) -> RowRef {
        if let Some(&i) = self.endpoints.get(&key) {
            return RowRef(i);
        }
        if self.endpoints.len() < self.max_endpoints {
            let i = self.push_row(false, key.resource.contains(FOLD));
            self.endpoints.insert(key, i);
            return RowRef(i);
        }
        // Distinct keys folded are counted by their hash: once per key is the same as
        // once per call.
        let key_hash = hash64(&key);
        self.folded_keys.insert_hash(key_hash);
        let mut other = OtherKey {
            comm: Some(key.comm),
            side: key.side,
            proto: key.proto,
        };
        if !self.others.contains_key(&other) && self.others.len() >= self.max_other_rows {
            other.comm = None;
        }
        let i = match self.others.get(&other) {
            Some(&i) => i,
            None => {
                let i = self.push_row(true, false);
                self.others.insert(other, i);
                i
            }
        };
        if let Some(d) = &mut self.rows[i as usize].folded_keys {
            d.insert_hash(key_hash);
        }
        RowRef(i)
    }

    fn push_row(&mut self, folded: bool, segment_folded: bool) -> u32 {
        self.rows.push(Row::new(folded, segment_folded));
        (self.rows.len() - 1) as u32
    }

    /// Accounts one completed call in the row `at` (from [`EndpointTable::row_of`] of the
    /// call's key, `EndpointKeys` on a tracking thread).
    pub fn record(&mut self, at: RowRef, call: &Call) {
        let Some(row) = self.rows.get_mut(at.0 as usize) else {
            debug_assert!(false, "a row reference from another table");
            return;
        };
        row.record(call);
        self.segment_folded_calls += u64::from(row.segment_folded);
        if row.folded_keys.is_some() {
            row.interval.folded_calls += 1;
            self.folded_calls += 1;
        }
        if let Some(p) = &mut self.by_process {
            p.record(at, call);
        }
    }

    /// Ends an interval of `interval_ns`: the rows that had calls in it (busiest first), then
    /// the interval's numbers join the since-start ones.
    pub fn end_interval(&mut self, interval_ns: u64) -> Vec<EndpointSnapshot> {
        let mut out = Vec::new();
        let (endpoints, others) = self.labelled_rows();
        for (label, row, at) in endpoints.chain(others) {
            if row.interval.calls > 0 {
                // Only "other" rows count folded keys.
                out.push(snapshot(
                    label,
                    at,
                    &row.interval,
                    row.interval_hist.as_deref(),
                    row.folded_keys.as_ref(),
                    interval_ns,
                ));
            }
        }
        let interval_by_process = self.by_process.as_ref().map(|p| {
            let labels = self.labels();
            let mut interval: Vec<EndpointSnapshot> = process_rows(p, &labels)
                .filter(|(_, row, _, _)| row.interval.calls > 0)
                .map(|(label, row, at, pid)| {
                    let mut e = snapshot(
                        label,
                        at,
                        &row.interval,
                        row.interval_hist.as_deref(),
                        None,
                        interval_ns,
                    );
                    e.pid = pid;
                    e
                })
                .collect();
            sort(&mut interval);
            interval
        });
        if let (Some(p), Some(interval)) = (&mut self.by_process, interval_by_process) {
            p.interval = interval;
        }
        // Saturating: a recording's interval times may jump by anything.
        self.elapsed_ns = self.elapsed_ns.saturating_add(interval_ns);
        let (end_ns, history_ns) = (self.elapsed_ns, self.history_ns);
        for row in &mut self.rows {
            row.roll_interval(end_ns, history_ns);
        }
        if let Some(p) = &mut self.by_process {
            for row in &mut p.rows {
                row.roll_interval(end_ns, history_ns);
            }
        }
        sort(&mut out);
        out
    }

    /// Every row since the start up to the last [`end_interval`](Self::end_interval) (call
    /// it first for a final partial interval), busiest first.
    pub fn cumulative(&self) -> Vec<EndpointSnapshot> {
        let (endpoints, others) = self.labelled_rows();
        let rows = endpoints.chain(others).map(|(l, r, at)| (l, r, at, None));
        cumulative_of(rows, self.elapsed_ns)
    }

    pub fn stats(&self) -> EndpointTableStats {
        let clamped = self
            .rows
            .iter()
            .map(|r| r.total.latency_clamped + r.interval.latency_clamped)
            .sum();
        EndpointTableStats {
            endpoints: self.endpoints.len() as u64,
            other_rows: self.others.len() as u64,
            max_endpoints: self.max_endpoints as u64,
            folded_calls: self.folded_calls,
            folded_keys_approx: self.folded_keys.estimate(),
            segment_folded_calls: self.segment_folded_calls,
            segment_folded_keys_approx: self.folder.folded_keys_approx(),
            latency_clamped: clamped,
            approx_bytes: self.approx_bytes() as u64,
        }
    }

    /// Rough heap use: rows, their histograms and keys, the maps' slots and the folder's
    /// state. Not the memo of normalised resources nor the folded keys' aliases (bounded
    /// caches, which fill differently with tracking threads), so the figure is the same
    /// whatever the number of threads.
    pub fn approx_bytes(&self) -> usize {
        let key_bytes =
            |k: &EndpointKey| k.comm.capacity() + k.method.capacity() + k.resource.capacity();
        let keys: usize = self.endpoints.keys().map(key_bytes).sum::<usize>()
            + self
                .others
                .keys()
                .map(|k| k.comm.as_ref().map_or(0, String::capacity))
                .sum::<usize>();
        let rows: usize = self.rows.iter().map(Row::bytes).sum();
        let slots = self.endpoints.capacity() * std::mem::size_of::<(EndpointKey, u32)>()
            + self.others.capacity() * std::mem::size_of::<(OtherKey, u32)>();
        let by_process = self.by_process.as_ref().map_or(0, |p| {
            p.rows.iter().map(Row::bytes).sum::<usize>()
                + p.index.capacity() * std::mem::size_of::<((u32, u32), u32)>()
                + p.keys.capacity() * std::mem::size_of::<(u32, u32)>()
        });
        keys + rows + slots + DistinctCounter::BYTES + self.folder.approx_bytes() + by_process
    }
}

/// A tracking thread's numbering of the endpoint keys of the calls it completes
/// (`--threads`): it normalises each call's resource and looks its key up here, so the
/// pipeline thread, which applies every call in order, finds the call's row by number
/// (a [`RowRef`] per number, kept per thread) instead of normalising and hashing again.
///
/// A key's first call is marked [`EndpointKeys::NEW`] and its key handed over; the pipeline
/// looks the key up in its table then, in the order calls are applied, so rows are admitted
/// in the same order as with one thread. Past `MAX_KEYS` keys the numbering starts over
/// (a number marked new replaces what the pipeline held for it and every number after it).
pub struct EndpointKeys {
    memo: NormalizeMemo,
    keep_raw: bool,
    ids: HashMap<EndpointKey, u32>,
}

impl EndpointKeys {
    /// Set on the number of a key's first call (since the numbering started over).
    pub const NEW: u32 = 1 << 31;
    /// Keys numbered at most before the numbering starts over: bounds the memory a thread
    /// and the pipeline spend on keys that do not repeat.
    pub const MAX_KEYS: usize = 4 * DEFAULT_MAX_ENDPOINTS;

    /// `keep_raw`: as the table's (`--raw-resources`).
    pub fn new(keep_raw: bool) -> EndpointKeys {
        EndpointKeys {
            memo: NormalizeMemo::default(),
            keep_raw,
            ids: HashMap::new(),
        }
    }

    /// The number of `call`'s key; the key's first call pushes the key to `fresh` and is
    /// marked `NEW`.
    pub fn number(&mut self, call: &Call, fresh: &mut Vec<EndpointKey>) -> u32 {
        let ids = &self.ids;
        let key = match find_key(&mut self.memo, self.keep_raw, call, |key| {
            ids.get(key).copied()
        }) {
            Ok(id) => return id,
            Err(key) => key,
        };
        if self.ids.len() >= Self::MAX_KEYS {
            self.ids.clear();
        }
        let id = self.ids.len() as u32;
        fresh.push(key.clone());
        self.ids.insert(key, id);
        id | Self::NEW
    }
}

/// `call`'s key (method cut, resource normalised through `memo`) looked up by `find`; the key,
/// owned, when `find` has nothing for it.
fn find_key<T>(
    memo: &mut NormalizeMemo,
    keep_raw: bool,
    call: &Call,
    find: impl FnOnce(&EndpointKeyRef<'_>) -> Option<T>,
) -> Result<T, EndpointKey> {
    let method = crate::text::cut(&call.l7.method, MAX_METHOD_LEN);
    let resource = memo.normalize(call.l7.proto, method, &call.l7.resource, keep_raw);
    let key = EndpointKeyRef {
        comm: &call.comm,
        side: call.side,
        proto: call.l7.proto,
        method,
        resource: &resource,
    };
    find(&key).ok_or_else(|| key.to_owned_key())
}

/// The pipeline's side of one tracking thread's [`EndpointKeys`]: its numbers' rows.
#[derive(Default)]
pub struct KeyRows {
    rows: Vec<RowRef>,
}

impl KeyRows {
    /// Accounts `call`, numbered `id` by the thread, in `table`; `fresh` gives the key of a
    /// number marked new (the thread's keys in the order it numbered them). Returns the row it
    /// was counted in; None, having counted nothing, for a number this thread did not give (a
    /// bug).
    pub fn record(
        &mut self,
        table: &mut EndpointTable,
        id: u32,
        fresh: &mut impl Iterator<Item = EndpointKey>,
        call: &Call,
    ) -> Option<RowRef> {
        let at = if id & EndpointKeys::NEW != 0 {
            let n = (id & !EndpointKeys::NEW) as usize;
            let (true, Some(key)) = (n <= self.rows.len(), fresh.next()) else {
                return None;
            };
            self.rows.truncate(n);
            let at = table.row_of(key);
            self.rows.push(at);
            at
        } else {
            match *self.rows.get(id as usize)? {
                // Its first call was counted by another key (`skip`): found by its own now.
                RowRef::UNRESOLVED => {
                    let at = table.observe(call);
                    self.rows[id as usize] = at;
                    return Some(at);
                }
                at => at,
            }
        };
        table.record(at, call);
        Some(at)
    }

    /// A call numbered `id` by the thread, counted by the pipeline under another key (its
    /// process's name, not the thread's the key has): keeps the numbering in step (a number
    /// marked new takes its key) without counting; the number's row is found by the next
    /// call that is counted by it.
    pub fn skip(&mut self, id: u32, fresh: &mut impl Iterator<Item = EndpointKey>) {
        if id & EndpointKeys::NEW != 0 {
            let n = (id & !EndpointKeys::NEW) as usize;
            if n <= self.rows.len() && fresh.next().is_some() {
                self.rows.truncate(n);
                self.rows.push(RowRef::UNRESOLVED);
            }
        }
    }
}

#[derive(Clone, Copy)]
enum Label<'a> {
    Endpoint(&'a EndpointKey),
    Other(&'a OtherKey),
}

/// A row with its label, its number in the table and, on rows by process, its pid.
type LabelledRow<'a> = (Label<'a>, &'a Row, RowRef, Option<u32>);

/// The rows by process, each with its endpoint row's label and number (`labels` by number).
fn process_rows<'a>(
    p: &'a ProcessRows,
    labels: &'a [Option<Label<'a>>],
) -> impl Iterator<Item = LabelledRow<'a>> + 'a {
    p.rows.iter().zip(&p.keys).filter_map(|(row, &(at, pid))| {
        let label = (*labels.get(at as usize)?)?;
        Some((label, row, RowRef(at), Some(pid)))
    })
}

/// The rows given since the start (over `elapsed_ns`), busiest first.
fn cumulative_of<'a>(
    rows: impl Iterator<Item = LabelledRow<'a>>,
    elapsed_ns: u64,
) -> Vec<EndpointSnapshot> {
    let mut out: Vec<EndpointSnapshot> = rows
        .filter(|(_, row, _, _)| row.total.calls > 0)
        .map(|(label, row, at, pid)| {
            let mut e = snapshot(
                label,
                at,
                &row.total,
                Some(&*row.total_hist),
                row.folded_keys.as_ref(),
                elapsed_ns,
            );
            e.pid = pid;
            e
        })
        .collect();
    sort(&mut out);
    out
}

fn per_s(n: u64, period_ns: u64) -> f64 {
    if period_ns == 0 {
        0.0
    } else {
        n as f64 * 1e9 / period_ns as f64
    }
}

/// `n / d`, None when `d` is 0 (no call with a known outcome: no rate to tell).
fn known_ratio(n: u64, d: u64) -> Option<f64> {
    (d > 0).then(|| n as f64 / d as f64)
}

/// p50, p90, p99, p99.9 in ns: each the midpoint of its bucket, clamped into the exact
/// [min, max] of the calls. The true (nearest-rank) percentile lies in that bucket and in
/// [min, max], so clamping only brings the midpoint closer to it: the error stays within half
/// a bucket ([`percentile_error_bound_ns`]), and a cluster narrower than a bucket at either end
/// (all calls within 400.3–400.5 ms) is no longer reported below its fastest call.
fn percentiles<T: Counter>(h: &Histogram<T>, min_ns: u64, max_ns: u64) -> [u64; 4] {
    let mut out = [0; 4];
    if h.is_empty() {
        return out;
    }
    let min_ns = min_ns.min(max_ns);
    for (o, v) in out
        .iter_mut()
        .zip(h.value_at_quantiles([0.5, 0.9, 0.99, 0.999]))
    {
        *o = h.median_equivalent(v).clamp(min_ns, max_ns);
    }
    out
}

/// The percentiles' stated precision: each is within this many ns of the exact nearest-rank
/// percentile of the recorded (range-clamped) latencies: half a bucket, i.e. the larger of
/// 256 ns (buckets are 512 ns wide below 131 µs) and 1/256 of the value (buckets are at most
/// 1/128 of their lowest value wide above).
pub fn percentile_error_bound_ns(exact_ns: u64) -> u64 {
    (exact_ns / 256).max(256)
}

fn snapshot(
    label: Label<'_>,
    row: RowRef,
    c: &Counts,
    hist: Option<&Histogram<impl Counter>>,
    folded_keys: Option<&DistinctCounter>,
    period_ns: u64,
) -> EndpointSnapshot {
    let (comm, side, proto, method, resource, other) = match label {
        Label::Endpoint(k) => (
            k.comm.clone(),
            k.side,
            k.proto,
            k.method.clone(),
            k.resource.clone(),
            false,
        ),
        Label::Other(k) => (
            k.comm.clone().unwrap_or_else(|| ANY_COMM.to_owned()),
            k.side,
            k.proto,
            "*".to_owned(),
            OTHER_RESOURCE.to_owned(),
            true,
        ),
    };
    let [p50, p90, p99, p999] = hist.map_or([0; 4], |h| {
        percentiles(h, c.latency_min_ns, c.latency_max_ns)
    });
    EndpointSnapshot {
        row,
        comm,
        side,
        proto,
        method,
        resource,
        other,
        pid: None,
        period_ns,
        calls: c.calls,
        calls_per_s: per_s(c.calls, period_ns),
        sampled: false,
        calls_per_s_estimated: None,
        server_errors: c.server_errors,
        client_errors: c.client_errors,
        unknown_outcomes: c.unknown_outcomes,
        server_error_rate: known_ratio(c.server_errors, c.calls - c.unknown_outcomes),
        client_error_rate: known_ratio(c.client_errors, c.calls - c.unknown_outcomes),
        req_bytes: c.req_bytes,
        resp_bytes: c.resp_bytes,
        req_bytes_per_s: per_s(c.req_bytes, period_ns),
        resp_bytes_per_s: per_s(c.resp_bytes, period_ns),
        latency_mean_ns: c.latency_sum_ns.checked_div(c.calls).unwrap_or(0),
        latency_sum_ns: c.latency_sum_ns,
        latency_p50_ns: p50,
        latency_p90_ns: p90,
        latency_p99_ns: p99,
        latency_p999_ns: p999,
        latency_min_ns: if c.calls > 0 { c.latency_min_ns } else { 0 },
        latency_max_ns: c.latency_max_ns,
        latency_clamped: c.latency_clamped,
        folded_calls: c.folded_calls,
        folded_keys_approx: folded_keys.map_or(0, DistinctCounter::estimate),
        conn_loss: c.calls_after_loss > 0,
    }
}

/// Busiest first; ties in key order so output is stable.
fn sort(rows: &mut [EndpointSnapshot]) {
    rows.sort_by(|a, b| {
        b.calls
            .cmp(&a.calls)
            .then_with(|| a.other.cmp(&b.other))
            .then_with(|| a.comm.cmp(&b.comm))
            .then_with(|| a.side.cmp(&b.side))
            .then_with(|| a.proto.cmp(&b.proto))
            .then_with(|| a.method.cmp(&b.method))
            .then_with(|| a.resource.cmp(&b.resource))
            .then_with(|| a.pid.cmp(&b.pid))
    });
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::event::Direction;
    use crate::protocols::{L7Call, MessageSpan};

    /// A client call from `comm` with the given latency and outcome.
    pub(crate) fn call(
        comm: &str,
        pid: u32,
        method: &str,
        resource: &str,
        latency_ns: u64,
    ) -> Call {
        let l7 = L7Call {
            proto: Protocol::Http,
            request_dir: Direction::Egress,
            method: method.to_owned(),
            resource: resource.to_owned(),
            version: "1.1",
            status: Some(200),
            status_text: None,
            outcome: Outcome::Ok,
            req: MessageSpan {
                first_start_ns: 1_000,
                bytes: 100,
                ..Default::default()
            },
            resp: MessageSpan {
                last_end_ns: 1_000 + latency_ns,
                bytes: 1000,
                ..Default::default()
            },
            truncated: false,
            end_inferred: false,
            req_head: Default::default(),
            resp_head: Default::default(),
            details: Vec::new(),
        };
        let addr = "127.0.0.1:80".parse().unwrap();
        Call::new(l7, pid, pid, comm.into(), 1, addr, addr)
    }

    fn with_outcome(mut c: Call, outcome: Outcome) -> Call {
        c.l7.outcome = outcome;
        c
    }

    /// Nearest-rank percentile, the definition HdrHistogram uses.
    fn exact(sorted: &[u64], q: f64) -> u64 {
        let rank = ((q * sorted.len() as f64).ceil() as usize).max(1);
        sorted[rank - 1]
    }

    /// Deterministic pseudo-random numbers (xorshift) so failures reproduce.
    fn rng(seed: u64) -> impl FnMut() -> u64 {
        let mut x = crate::xorshift::XorShift(seed);
        move || x.next()
    }

    fn check_percentiles(name: &str, values: &[u64]) {
        let mut t = EndpointTable::default();
        for &v in values {
            t.observe(&call("svc", 1, "GET", "/x", v));
        }
        let snap = &t.end_interval(1_000_000_000)[0];
        let mut sorted = values.to_vec();
        sorted.sort_unstable();
        for (q, got) in [
            (0.5, snap.latency_p50_ns),
            (0.9, snap.latency_p90_ns),
            (0.99, snap.latency_p99_ns),
            (0.999, snap.latency_p999_ns),
        ] {
            let want = exact(&sorted, q);
            let err = (got as f64 - want as f64).abs() / want as f64;
            assert!(
                err <= 0.01,
                "{name} q={q}: got {got}, exact {want}, error {err}"
            );
        }
        assert_eq!(snap.latency_max_ns, *sorted.last().unwrap());
        let cum = &t.cumulative()[0];
        assert_eq!(
            (cum.latency_p50_ns, cum.latency_p99_ns),
            (snap.latency_p50_ns, snap.latency_p99_ns),
            "{name}: merging into the since-start histogram must not move percentiles"
        );
    }

    #[test]
    fn intervals_of_any_length_saturate_the_elapsed_time() {
        let mut t = EndpointTable::default();
        t.observe(&call("api", 1, "GET", "/", 1_000));
        t.end_interval(u64::MAX);
        t.end_interval(u64::MAX);
        assert_eq!(t.cumulative()[0].period_ns, u64::MAX);
    }

    #[test]
    fn percentiles_within_one_percent_bimodal() {
        let mut r = rng(42);
        let values: Vec<u64> = (0..100_000)
            .map(|i| {
                let jitter = r() % 200_000; // ±100 µs
                let base = if i % 10 == 0 { 50_000_000 } else { 10_000_000 };
                base - 100_000 + jitter
            })
            .collect();
        check_percentiles("bimodal", &values);
    }

    /// Checks every percentile of `values` (as one interval, as since-start, and through a
    /// rolling window) against its nearest-rank value: within [min, max], in order, and within
    /// the stated precision.
    fn check_clustered(name: &str, values: &[u64]) {
        let mut t = EndpointTable::default().with_history(WINDOW_1M_NS);
        for &v in values {
            t.observe(&call("svc", 1, "GET", "/x", v));
        }
        let snap = t.end_interval(1_000_000_000)[0].clone();
        let cum = t.cumulative()[0].clone();
        let win = t.window(WINDOW_1M_NS)[0].clone();
        let mut sorted = values.to_vec();
        sorted.sort_unstable();
        let (min, max) = (sorted[0], *sorted.last().unwrap());
        for s in [&snap, &cum, &win] {
            assert_eq!((s.latency_min_ns, s.latency_max_ns), (min, max), "{name}");
            let ps = [
                (0.5, s.latency_p50_ns),
                (0.9, s.latency_p90_ns),
                (0.99, s.latency_p99_ns),
                (0.999, s.latency_p999_ns),
            ];
            let mut last = 0;
            for (q, got) in ps {
                let want = exact(&sorted, q);
                assert!(
                    (min..=max).contains(&got),
                    "{name} q={q}: {got} outside [{min}, {max}] ({values:?})"
                );
                assert!(got >= last, "{name} q={q}: {got} below the previous {last}");
                last = got;
                assert!(
                    got.abs_diff(want) <= percentile_error_bound_ns(want),
                    "{name} q={q}: got {got}, exact {want} ({values:?})"
                );
            }
        }
    }

    /// A row is marked for the period when one of its calls came right after its
    /// connection lost bytes; the since-start row keeps the mark.
    #[test]
    fn rows_with_calls_after_a_loss_are_marked_for_their_period() {
        let mut t = EndpointTable::default();
        let mut lossy = call("svc", 1, "GET", "/x", 5_000);
        lossy.after_loss = true;
        t.observe(&lossy);
        t.observe(&call("svc", 1, "GET", "/x", 5_000));
        t.observe(&call("svc", 1, "GET", "/y", 5_000));
        let marks = |rows: Vec<EndpointSnapshot>| {
            let mut m: Vec<_> = rows
                .iter()
                .map(|e| (e.resource.clone(), e.conn_loss))
                .collect();
            m.sort();
            m
        };
        let yes = |r: &str, b| (r.to_owned(), b);
        assert_eq!(
            marks(t.end_interval(1_000)),
            [yes("/x", true), yes("/y", false)]
        );
        t.observe(&call("svc", 1, "GET", "/x", 5_000));
        assert_eq!(marks(t.end_interval(1_000)), [yes("/x", false)]);
        assert_eq!(marks(t.cumulative()), [yes("/x", true), yes("/y", false)]);
    }

    /// Issue 43: 8 calls between 400.345 and 400.472 ms gave p50 = p99 = 399.507 ms (the
    /// midpoint of their 2.1 ms bucket), below the fastest call.
    #[test]
    fn percentiles_of_a_cluster_inside_one_bucket_stay_within_it() {
        let values = [
            400_345_000,
            400_360_000,
            400_371_000,
            400_390_000,
            400_402_000,
            400_433_000,
            400_455_000,
            400_472_000,
        ];
        check_clustered("issue 43", &values);
        let mut t = EndpointTable::default();
        for v in values {
            t.observe(&call("svc", 1, "GET", "/x", v));
        }
        let s = &t.end_interval(1_000_000_000)[0];
        assert!(s.latency_p50_ns >= 400_345_000 && s.latency_p99_ns <= 400_472_000);
        // One call: every percentile is that call.
        check_clustered("one call", &[123_456_789]);
        let mut t = EndpointTable::default();
        t.observe(&call("svc", 1, "GET", "/x", 123_456_789));
        let s = &t.end_interval(1_000_000_000)[0];
        assert_eq!(
            [s.latency_p50_ns, s.latency_p99_ns, s.latency_p999_ns],
            [123_456_789; 3]
        );
    }

    /// Property-style: random sets of 1–4 clusters (centres log-uniform over 2 µs – 50 s,
    /// widths from nothing to a few buckets, 1–300 calls each).
    #[test]
    fn percentiles_of_random_clusters_within_min_max_and_precision() {
        let mut r = rng(4343);
        for case in 0..600 {
            let clusters = 1 + r() % 4;
            let mut values = Vec::new();
            for _ in 0..clusters {
                let exp = (r() % 100_000) as f64 / 100_000.0 * 7.4; // 10^3.3 .. 10^10.7 ns
                let centre = 10f64.powf(3.3 + exp) as u64;
                let width = match r() % 3 {
                    0 => 0,
                    1 => 1 + r() % (centre / 500 + 1), // well inside one bucket
                    _ => 1 + r() % (centre / 20 + 1),  // a few buckets
                };
                let n = 1 + r() % 300;
                for _ in 0..n {
                    values.push(centre + r() % (width + 1));
                }
            }
            check_clustered(&format!("case {case}"), &values);
        }
    }

    #[test]
    fn percentiles_within_one_percent_uniform_and_log_uniform() {
        let mut r = rng(7);
        let uniform: Vec<u64> = (0..50_000).map(|_| 1_000 + r() % 999_999_000).collect();
        check_percentiles("uniform 1µs..1s", &uniform);
        let log_uniform: Vec<u64> = (0..50_000)
            .map(|_| {
                let exp = (r() % 10_000) as f64 / 10_000.0 * 8.0; // 10^3 .. 10^11 ns
                10f64.powf(3.0 + exp) as u64
            })
            .collect();
        check_percentiles("log-uniform 1µs..100s", &log_uniform);
    }

    #[test]
    fn counts_rates_errors_and_bytes() {
        let mut t = EndpointTable::default();
        t.observe(&call("api", 1, "GET", "/users/1", 2_000_000));
        t.observe(&with_outcome(
            call("api", 1, "GET", "/users/2?x=1", 4_000_000),
            Outcome::ServerError,
        ));
        t.observe(&with_outcome(
            call("api", 1, "GET", "/users/3", 6_000_000),
            Outcome::ClientError,
        ));
        t.observe(&call("api", 1, "POST", "/users", 1_000_000));
        let snap = t.end_interval(2_000_000_000);
        assert_eq!(snap.len(), 2);
        let get = &snap[0];
        assert_eq!(
            (get.method.as_str(), get.resource.as_str(), get.calls),
            ("GET", "/users/{id}", 3)
        );
        assert_eq!((get.server_errors, get.client_errors), (1, 1));
        assert!((get.server_error_rate.unwrap() - 1.0 / 3.0).abs() < 1e-9);
        assert!((get.calls_per_s - 1.5).abs() < 1e-9);
        assert_eq!((get.req_bytes, get.resp_bytes), (300, 3000));
        assert!((get.resp_bytes_per_s - 1500.0).abs() < 1e-9);
        assert_eq!(get.latency_mean_ns, 4_000_000);
        assert_eq!(get.latency_max_ns, 6_000_000);
        assert_eq!(get.side, Side::Client);

        // An idle interval reports nothing; since-start keeps everything.
        assert!(t.end_interval(2_000_000_000).is_empty());
        t.observe(&call("api", 1, "GET", "/users/4", 2_000_000));
        let snap = t.end_interval(1_000_000_000);
        assert_eq!((snap.len(), snap[0].calls), (1, 1));
        let cum = t.cumulative();
        assert_eq!(cum[0].calls, 4);
        assert_eq!(cum[0].period_ns, 5_000_000_000);
        assert!((cum[0].calls_per_s - 0.8).abs() < 1e-9);
        assert_eq!(cum[0].server_errors, 1);
    }

    #[test]
    fn out_of_range_latencies_are_clamped_and_counted() {
        let mut t = EndpointTable::default();
        t.observe(&call("a", 1, "GET", "/", 10)); // 10 ns
        t.observe(&call("a", 1, "GET", "/", 500_000_000_000)); // 500 s
        t.observe(&call("a", 1, "GET", "/", 5_000_000));
        let s = &t.end_interval(1_000_000_000)[0];
        assert_eq!(s.latency_clamped, 2);
        assert_eq!(s.latency_max_ns, 500_000_000_000);
        assert!((s.latency_p50_ns as f64 / 5e6 - 1.0).abs() < 0.01);
        assert!(s.latency_p999_ns <= LATENCY_HIGH_NS + LATENCY_HIGH_NS / 100);
        assert_eq!(t.stats().latency_clamped, 2);
    }

    #[test]
    fn keys_separate_comm_side_and_method() {
        let mut t = EndpointTable::default();
        t.observe(&call("a", 1, "GET", "/x", 1_000_000));
        t.observe(&call("b", 2, "GET", "/x", 1_000_000));
        t.observe(&call("a", 1, "PUT", "/x", 1_000_000));
        let mut server = call("a", 1, "GET", "/x", 1_000_000);
        server.side = Side::Server;
        t.observe(&server);
        assert_eq!(t.end_interval(1_000_000_000).len(), 4);
        let mut raw = EndpointTable::new(10, true);
        raw.observe(&call("a", 1, "GET", "/x/1", 1_000_000));
        raw.observe(&call("a", 1, "GET", "/x/2", 1_000_000));
        assert_eq!(raw.len(), 2);
    }

    #[test]
    fn overflow_folds_per_process_then_globally() {
        let mut t = EndpointTable::new(2, false);
        assert_eq!(t.max_other_rows(), 16);
        t.observe(&call("a", 1, "GET", "/one", 1_000_000));
        t.observe(&call("a", 1, "GET", "/two", 1_000_000));
        for i in 0..10 {
            t.observe(&call("a", 1, "GET", &format!("/n{i}x"), 1_000_000));
        }
        // Existing endpoints still count after the cap is reached.
        t.observe(&call("a", 1, "GET", "/one", 1_000_000));
        for p in 0..20 {
            t.observe(&call(&format!("p{p}"), 100 + p, "GET", "/z", 1_000_000));
        }
        let snap = t.end_interval(1_000_000_000);
        let one = snap.iter().find(|s| s.resource == "/one").unwrap();
        assert_eq!(one.calls, 2);
        let other_a = snap.iter().find(|s| s.other && s.comm == "a").unwrap();
        assert_eq!((other_a.calls, other_a.folded_calls), (10, 10));
        assert!(other_a.folded_keys_approx.abs_diff(10) <= 1);
        // 16 "other" rows: a + p0..p14; p15..p19 share the global row.
        let global = snap.iter().find(|s| s.comm == ANY_COMM).unwrap();
        assert_eq!(global.calls, 5);
        assert!(global.folded_keys_approx.abs_diff(5) <= 1);
        assert_eq!(snap.iter().filter(|s| s.other).count(), 17);
        let st = t.stats();
        assert_eq!((st.endpoints, st.folded_calls), (2, 30));
        assert!(st.folded_keys_approx.abs_diff(30) <= 3);
    }

    fn rss_bytes() -> u64 {
        super::super::procfs::ProcSample::read(std::process::id())
            .map(|s| s.rss_bytes)
            .unwrap_or(0)
    }

    #[test]
    fn memory_stays_bounded_with_100k_distinct_paths() {
        // Folded, 100k paths under one parent are FOLD_AFTER rows and the `{…}` one.
        let mut folding = EndpointTable::default();
        for i in 0..100_000u32 {
            folding.observe(&call("svc", 1, "GET", &format!("/a/x{i}y"), 1_000_000));
        }
        assert_eq!(folding.len(), crate::aggregate::fold::FOLD_AFTER + 1);
        assert_eq!(
            folding.stats().segment_folded_calls,
            100_000 - crate::aggregate::fold::FOLD_AFTER as u64
        );
        let rss_before = rss_bytes();
        // Raw resources are not folded: the cap is what bounds them.
        let mut t = EndpointTable::new(DEFAULT_MAX_ENDPOINTS, true);
        let mut bytes_at_cap = 0;
        for i in 0..100_000u32 {
            // Non-numeric segments: normalisation keeps them all distinct.
            t.observe(&call("svc", 1, "GET", &format!("/a/x{i}y"), 1_000_000));
            if i == DEFAULT_MAX_ENDPOINTS as u32 {
                bytes_at_cap = t.approx_bytes();
            }
        }
        assert_eq!(t.len(), DEFAULT_MAX_ENDPOINTS);
        let st = t.stats();
        assert_eq!(st.other_rows, 1);
        assert_eq!(st.folded_calls, 99_000);
        let est = st.folded_keys_approx as f64;
        assert!((est / 99_000.0 - 1.0).abs() < 0.2, "estimate {est}");
        // Nothing grows past the cap (the memo of normalised resources is bounded by its own).
        assert_eq!(t.approx_bytes(), bytes_at_cap);
        assert!(
            bytes_at_cap < 30 << 20,
            "{bytes_at_cap} bytes for 1000 rows"
        );
        let snap = t.end_interval(1_000_000_000);
        assert_eq!(snap.len(), DEFAULT_MAX_ENDPOINTS + 1);
        assert_eq!(snap[0].calls, 99_000);
        // Idle rows give their interval histograms back.
        t.end_interval(1_000_000_000);
        assert!(t.approx_bytes() < bytes_at_cap * 3 / 4);
        // RSS tracks the estimate (measured: +24.8 MB for an estimate of 23.1 MB); the slack is
        // for allocator overhead and other tests running in this process.
        let growth = rss_bytes().saturating_sub(rss_before);
        assert!(
            growth < bytes_at_cap as u64 * 3 / 2 + (16 << 20),
            "RSS grew {growth} bytes"
        );
    }

    #[test]
    fn rolling_windows_merge_the_last_intervals_exactly() {
        const S: u64 = 1_000_000_000;
        let mut r = rng(3);
        let mut windowed = EndpointTable::default().with_history(60 * S);
        let mut last3 = EndpointTable::default();
        for interval in 0..8 {
            for _ in 0..200 {
                let ns = 1_000 + r() % 50_000_000;
                let c = call("api", 1, "GET", "/a", ns);
                windowed.observe(&c);
                if interval >= 5 {
                    last3.observe(&c);
                }
            }
            windowed.end_interval(S);
        }
        let w = windowed.window(3 * S);
        let whole = last3.end_interval(3 * S);
        assert_eq!(w.len(), 1);
        let (a, b) = (&w[0], &whole[0]);
        assert_eq!(a.calls, 600);
        assert_eq!(a.period_ns, 3 * S);
        assert_eq!(
            (
                a.latency_p50_ns,
                a.latency_p90_ns,
                a.latency_p99_ns,
                a.latency_max_ns
            ),
            (
                b.latency_p50_ns,
                b.latency_p90_ns,
                b.latency_p99_ns,
                b.latency_max_ns
            )
        );
        assert_eq!(a.calls_per_s, b.calls_per_s);
        // Longer than the session so far: since the start.
        assert_eq!(windowed.window(60 * S)[0].calls, 1600);
        assert_eq!(windowed.window(60 * S)[0].period_ns, 8 * S);
        // Idle intervals age a row out of the window, and out of the history.
        for _ in 0..3 {
            windowed.end_interval(S);
        }
        assert!(windowed.window(3 * S).is_empty());
        assert_eq!(
            windowed.window(10 * S)[0].calls,
            1400,
            "intervals 2..=8 of 11"
        );
        for _ in 0..60 {
            windowed.end_interval(S);
        }
        assert!(windowed.window(60 * S).is_empty());
        assert_eq!(windowed.cumulative()[0].calls, 1600);
        // Without history there is no window.
        let mut plain = EndpointTable::default();
        plain.observe(&call("api", 1, "GET", "/a", 5_000));
        plain.end_interval(S);
        assert!(plain.window(10 * S).is_empty());
    }

    #[test]
    fn latency_bins_are_powers_of_two_from_fastest_to_slowest() {
        let mut t = EndpointTable::default();
        for ns in [3_000, 3_500, 100_000, 5_000_000] {
            t.observe(&call("api", 1, "GET", "/a", ns));
        }
        t.end_interval(1_000_000_000);
        let b = t.observe(&call("api", 1, "GET", "/b", 3_200));
        // Up to the last interval's end, as the since-start numbers beside them.
        assert_eq!(t.windows().latency_bins_of(b, None), None);
        t.end_interval(1_000_000_000);
        let w = t.windows();
        let a = w
            .since_start
            .iter()
            .find(|e| e.resource == "/a")
            .unwrap()
            .row;
        let bins = w.latency_bins_of(a, None).unwrap().bins();
        assert_eq!(bins.first().unwrap(), &(2048, 4096, 2));
        assert_eq!(bins.last().unwrap(), &(4_194_304, 8_388_608, 1));
        assert_eq!(bins.iter().map(|b| b.2).sum::<u64>(), 4);
        assert!(bins.windows(2).all(|w| w[0].1 == w[1].0), "contiguous");
        assert_eq!(
            w.latency_bins_of(b, None).unwrap().bins(),
            vec![(2048, 4096, 1)]
        );
        assert_eq!(w.latency_bins.len(), w.since_start.len());
    }

    /// The windows a viewer gets with each interval count every call exactly: across
    /// interval boundaries, with intervals of uneven lengths, as the 10 s and the 1 min
    /// windows roll intervals off, and since the start.
    #[test]
    fn windows_count_every_call_of_their_intervals_exactly() {
        const MS: u64 = 1_000_000;
        let mut t = EndpointTable::default().with_history(WINDOW_1M_NS);
        // Interval i lasts 700 ms or 1300 ms in turn and has i % 7 + 1 calls to /a and,
        // every third interval, 2 to /b: (end ns, calls to /a, calls to /b) per interval.
        let mut ended: Vec<(u64, u64, u64)> = Vec::new();
        let mut elapsed = 0u64;
        for i in 0..150u64 {
            let (a, b) = (i % 7 + 1, if i % 3 == 0 { 2 } else { 0 });
            for k in 0..a {
                t.observe(&call("api", 1, "GET", "/a", 1_000 + k * 7_000));
            }
            for _ in 0..b {
                t.observe(&call("api", 1, "GET", "/b", 50_000));
            }
            let len = if i % 2 == 0 { 700 * MS } else { 1300 * MS };
            t.end_interval(len);
            elapsed += len;
            ended.push((elapsed, a, b));
            let w = t.windows();
            // An interval is in a window when it ended inside it.
            let want = |window: u64, of: fn(&(u64, u64, u64)) -> u64| -> u64 {
                ended
                    .iter()
                    .filter(|e| e.0 + window > elapsed)
                    .map(of)
                    .sum()
            };
            let got = |rows: &[EndpointSnapshot], r: &str| -> u64 {
                rows.iter().find(|e| e.resource == r).map_or(0, |e| e.calls)
            };
            for (rows, window) in [(&w.last_10s, WINDOW_10S_NS), (&w.last_1m, WINDOW_1M_NS)] {
                assert_eq!(got(rows, "/a"), want(window, |e| e.1), "/a, interval {i}");
                assert_eq!(got(rows, "/b"), want(window, |e| e.2), "/b, interval {i}");
                let period = rows.first().map_or(window.min(elapsed), |e| e.period_ns);
                assert_eq!(period, window.min(elapsed), "interval {i}");
            }
            let all = |of: fn(&(u64, u64, u64)) -> u64| ended.iter().map(of).sum::<u64>();
            assert_eq!(got(&w.since_start, "/a"), all(|e| e.1));
            assert_eq!(got(&w.since_start, "/b"), all(|e| e.2));
            assert_eq!(w.since_start, t.cumulative());
            // Each since-start row's bins hold its calls.
            for (e, bins) in w.since_start.iter().zip(&w.latency_bins) {
                let n: u64 = bins.as_ref().unwrap().bins().iter().map(|b| b.2).sum();
                assert_eq!(n, e.calls);
            }
        }
        // Past a minute of intervals without calls both windows are empty; since the start
        // keeps everything.
        for _ in 0..60 {
            t.end_interval(1_000 * MS);
        }
        let w = t.windows();
        assert!(w.last_10s.is_empty() && w.last_1m.is_empty());
        let total: u64 = ended.iter().map(|e| e.1 + e.2).sum();
        assert_eq!(w.since_start.iter().map(|e| e.calls).sum::<u64>(), total);
        // A table without history (JSON's) makes no windows.
        let mut plain = EndpointTable::default();
        plain.observe(&call("api", 1, "GET", "/a", 5_000));
        plain.end_interval(1_000 * MS);
        let w = plain.windows();
        assert!(w.last_10s.is_empty() && w.last_1m.is_empty());
        assert_eq!(w.since_start[0].calls, 1);
    }

    /// Issue 44 item 3: three `python3` servers are one row by command and three by process;
    /// each process's numbers are its own calls', they add up to the command's row in every
    /// window, the interval and the latency bins; past the cap a row's further processes
    /// share its pid-0 row; a table without the split makes none.
    #[test]
    fn rows_by_process_split_a_command_row_exactly() {
        const MS: u64 = 1_000_000;
        let mut t = EndpointTable::new(4, false)
            .with_history(WINDOW_1M_NS)
            .with_rows_by_process();
        // pid p makes p calls of /a, of p ms each; pids 1..=6 (6 > the cap of 4 pairs).
        for pid in 1..=6u32 {
            for _ in 0..pid {
                t.observe(&call("python3", pid, "GET", "/a", u64::from(pid) * MS));
            }
        }
        t.observe(&call("python3", 1, "GET", "/b", 9 * MS));
        let interval = t.end_interval(1_000 * MS);
        let w = t.windows();
        let by = w.by_process.as_ref().expect("split by process");
        for rows in [&by.interval, &by.windows.since_start, &by.windows.last_10s] {
            let of = |res: &str, pid: u32| {
                rows.iter()
                    .find(|e| e.resource == res && e.pid == Some(pid))
                    .map(|e| (e.calls, e.latency_max_ns))
            };
            // The first four (row, pid) pairs have rows; /a's pids 5 and 6 share pid 0.
            for pid in 1..=4u32 {
                assert_eq!(of("/a", pid), Some((u64::from(pid), u64::from(pid) * MS)));
            }
            assert_eq!(of("/a", 0), Some((11, 6 * MS)));
            assert_eq!(of("/b", 0), Some((1, 9 * MS)));
            assert_eq!(of("/a", 5), None);
            for e in rows.iter() {
                assert_eq!(e.comm, "python3");
            }
            let a: u64 = rows
                .iter()
                .filter(|e| e.resource == "/a")
                .map(|e| e.calls)
                .sum();
            assert_eq!(a, 21);
        }
        // By command the same calls are one row per endpoint, as before.
        assert_eq!(interval.len(), 2);
        assert!(interval.iter().all(|e| e.pid.is_none()));
        let a = interval.iter().find(|e| e.resource == "/a").unwrap();
        assert_eq!(a.calls, 21);
        // Each row by process has its own latency bins, and its calls are in them.
        for (e, bins) in by.windows.since_start.iter().zip(&by.windows.latency_bins) {
            let n: u64 = bins.as_ref().unwrap().bins().iter().map(|b| b.2).sum();
            assert_eq!(n, e.calls);
            let own = by.windows.latency_bins_of(e.row, e.pid).unwrap();
            assert_eq!(Some(own), bins.as_ref());
        }
        // A row by process names its pid; rows by command (JSON lines') have no such field.
        let json = serde_json::to_value(&by.interval[0]).unwrap();
        assert!(json.get("pid").is_some());
        let json = serde_json::to_value(a).unwrap();
        assert!(json.get("pid").is_none());
        // Without the split: no rows by process, and no lookup for them.
        let mut plain = EndpointTable::new(4, false).with_history(WINDOW_1M_NS);
        plain.observe(&call("python3", 1, "GET", "/a", MS));
        plain.end_interval(1_000 * MS);
        assert!(plain.windows().by_process.is_none());
    }

    /// Calls numbered on two tracking threads (keys repeating, past the table's cap and past
    /// the numbering's restart) and applied in one order give the table that observing the
    /// same calls in that order gives: same rows, "other" rows, folded counts, percentiles.
    #[test]
    fn numbered_keys_fill_the_table_as_observing_does() {
        let mut serial = EndpointTable::new(300, false);
        let mut table = EndpointTable::new(300, false);
        let mut threads = [EndpointKeys::new(false), EndpointKeys::new(false)];
        let mut rows = [KeyRows::default(), KeyRows::default()];
        let calls = EndpointKeys::MAX_KEYS * 3;
        let mut numbered = [0u64; 2];
        for interval in 0..3u64 {
            for i in 0..calls {
                // Non-numeric segments keep keys distinct; every fifth call repeats a few.
                let path = match i % 5 {
                    0 => format!("/hot/x{}y", i % 7),
                    // Folds to `/scan/{…}` early, before the table is full.
                    1 => format!("/scan/x{i}y"),
                    _ => format!("/p/x{}y{interval}", i / 2),
                };
                let comm = ["api", "web", "db", "cache"][i % 4];
                // Methods vary for `/p/…`, so that its paths rarely fold and the table's cap
                // is reached (and the folder's bound on parents too).
                let method = match i % 5 {
                    0 | 1 => "GET".to_owned(),
                    _ => format!("M{}", (i / 2) % 2000),
                };
                let c = call(comm, 1, &method, &path, 1_000 + (i as u64 * 37) % 90_000);
                let want = serial.observe(&c);
                let k = (i / 3) % 2;
                let mut fresh = Vec::new();
                let id = threads[k].number(&c, &mut fresh);
                numbered[k] += u64::from(id & EndpointKeys::NEW != 0);
                let at = rows[k].record(&mut table, id, &mut fresh.into_iter(), &c);
                assert_eq!(at, Some(want), "the same row, by the same number");
            }
            let (a, b) = (serial.end_interval(1_000), table.end_interval(1_000));
            assert_eq!(a, b, "interval {interval}");
        }
        assert_eq!(serial.cumulative(), table.cumulative());
        assert_eq!(serial.stats(), table.stats());
        assert!(serial.stats().folded_calls > 0 && serial.stats().other_rows > 1);
        assert!(serial.stats().segment_folded_calls > 0);
        // Both threads started their numbering over.
        assert!(
            numbered.iter().all(|&n| n > EndpointKeys::MAX_KEYS as u64),
            "{numbered:?}"
        );
        // A number no thread gave is refused, nothing counted.
        let c = call("api", 1, "GET", "/x", 5_000);
        let mut none = std::iter::empty();
        assert!(KeyRows::default()
            .record(&mut table, 7, &mut none, &c)
            .is_none());
        assert!(KeyRows::default()
            .record(&mut table, 3 | EndpointKeys::NEW, &mut none, &c)
            .is_none());
        assert_eq!(table.stats(), serial.stats());
    }

    /// A scan of distinct paths next to ordinary traffic: the varied segments fold into
    /// `{…}` rows, the table stays small, and every call is in exactly one row.
    #[test]
    fn varied_segments_fold_into_few_rows_counting_every_call() {
        let run = |keep_raw: bool| {
            let mut t = EndpointTable::new(1000, keep_raw);
            let mut calls = 0u64;
            for i in 0..3000u64 {
                let path = match i % 3 {
                    0 => format!("/missing/page{i}"),
                    1 => format!("/users/{i}"),
                    _ => format!("/static/f{}.css", i % 40),
                };
                t.observe(&call("web", 1, "GET", &path, 1_000 + i));
                calls += 1;
                if i % 500 == 499 {
                    t.end_interval(1_000_000_000);
                }
            }
            (t.cumulative(), t.stats(), calls)
        };
        let (rows, stats, calls) = run(false);
        assert_eq!(rows.iter().map(|r| r.calls).sum::<u64>(), calls);
        // At most FOLD_AFTER named values under /missing and /static, their `{…}` rows, and
        // /users/{id}.
        let fold_after = crate::aggregate::fold::FOLD_AFTER;
        assert!(rows.len() <= 2 * fold_after + 3, "{} rows", rows.len());
        assert_eq!(stats.other_rows, 0, "nothing reached the cap");
        let folded: Vec<_> = rows.iter().filter(|r| r.resource.contains(FOLD)).collect();
        let names: Vec<&str> = folded.iter().map(|r| r.resource.as_str()).collect();
        assert_eq!(names.len(), 2, "{names:?}");
        assert!(names.contains(&"/missing/{…}") && names.contains(&"/static/{…}"));
        let folded_calls: u64 = folded.iter().map(|r| r.calls).sum();
        assert_eq!(stats.segment_folded_calls, folded_calls);
        // The distinct keys that folded: all /missing pages but the first FOLD_AFTER, and the
        // /static files past the first FOLD_AFTER.
        let distinct = (1000 - fold_after) + (40 - fold_after);
        let est = stats.segment_folded_keys_approx as f64;
        assert!(
            (est - distinct as f64).abs() < 0.25 * distinct as f64,
            "{est} for {distinct}"
        );
        // The same calls in the same order, the same rows.
        let (again, again_stats, _) = run(false);
        assert_eq!(rows, again);
        assert_eq!(stats, again_stats);
        // Raw resources are not folded: every page and user is its own row up to the cap.
        let (raw, raw_stats, _) = run(true);
        assert_eq!(raw_stats.segment_folded_calls, 0);
        assert!(raw.iter().all(|r| !r.resource.contains(FOLD)));
        assert!(raw_stats.folded_calls > 0, "raw keys reach the cap");
    }
}
