//! Connection tracking and parsing spread over worker threads (`--threads`).
//!
//! Records are dealt to workers by socket (`sock_id`), so each connection's records reach one
//! tracker in the order the source delivered them. Each worker decodes, filters and tracks its
//! records and returns, batch by batch, a verdict per record and the calls they completed.
//! The pipeline applies those results (counts, recorder, aggregates, process identity, sink)
//! on its own thread **in the order the records were delivered**, following a log of which
//! worker got each record: the output is the serial pipeline's, byte for byte, whatever the
//! number of workers. Interval ends and the session's end are barriers (every worker reports
//! its tracker's state there, and the pipeline merges them).

use std::collections::VecDeque;
use std::io;
use std::sync::mpsc::{self, Receiver, SyncSender, TryRecvError};
use std::thread::JoinHandle;

use rustc_hash::FxHashMap as HashMap;

use crate::aggregate::endpoints::{EndpointKey, EndpointKeys};
use crate::call::Call;
use crate::conntrack::{ConnTracker, TrackerConfig, TrackerStats, Verdict};
use crate::event::{Event, EventHead, HEADER_LEN};
use crate::filters::Filters;
use crate::procinfo::ProcInfo;
use crate::protocols::ParseStats;
use crate::sink::call_line::CallFormatter;

/// Records per batch handed to a worker (fewer at a flush): large enough that the channel
/// costs little per record, small enough that a worker starts soon after a burst begins.
pub(super) const BATCH_RECORDS: usize = 256;
/// A batch is also sent once its records take this many bytes (a record may be up to 16 KiB
/// live, and a recording's up to a frame).
pub(super) const BATCH_BYTES: usize = 1 << 20;
/// Steps delivered and not yet applied, at most (beyond, the pipeline thread catches up
/// before taking more)…
pub(super) const MAX_PENDING_STEPS: usize = 65536;
/// … and bytes of their records.
pub(super) const MAX_PENDING_BYTES: usize = 64 << 20;
/// Batches a worker may have queued before the source waits (back-pressure: the kernel ring
/// then fills and counts its losses, as it would with one thread).
pub(super) const QUEUED_BATCHES: usize = 16;

/// Applied batches' buffers a thread keeps for reuse, at most (each kind): the rest are
/// freed. Buffers keep the room their largest batch took, and a pipeline waiting on one
/// worker's progress holds many small batches of the others (up to `MAX_HELD_RECORDS` in
/// fed.rs): kept all, they were hundreds of MB on 16 CPUs, never given back.
pub(super) const SPARE_BUFFERS: usize = 2 * QUEUED_BATCHES;

/// Keeps `item` in `pool` for reuse unless the pool holds `SPARE_BUFFERS` already.
pub(super) fn keep_spare<T>(pool: &mut Vec<T>, item: T) {
    if pool.len() < SPARE_BUFFERS {
        pool.push(item);
    }
}

/// Records back to back, as delivered, and where each ends.
#[derive(Default)]
pub(super) struct RawBatch {
    pub buf: Vec<u8>,
    pub ends: Vec<u32>,
}

impl RawBatch {
    pub fn len(&self) -> usize {
        self.ends.len()
    }

    pub fn clear(&mut self) {
        self.buf.clear();
        self.ends.clear();
    }

    pub fn record(&self, i: usize) -> &[u8] {
        let start = if i == 0 { 0 } else { self.ends[i - 1] as usize };
        &self.buf[start..self.ends[i] as usize]
    }
}

/// What a worker made of one record.
#[derive(Clone, Copy)]
pub(super) enum Outcome {
    DecodeError,
    /// Left out by the user-space filters (a replay's `--pid`, `--comm`, `--port`).
    Filtered,
    /// Tracked; `calls` of the batch's calls (in order) completed with it. `head`: what
    /// applying needs of the record, so the pipeline thread need not read the record itself
    /// (written on the worker's core: a cache miss per record there).
    Tracked {
        verdict: Verdict,
        calls: u32,
        head: EventHead,
    },
}

/// A worker's results for one batch, consumed in order by the pipeline.
pub(super) struct Processed {
    pub batch: RawBatch,
    pub outcomes: Vec<Outcome>,
    /// Each record's kernel end time (0: undecodable), for merging workers' results in time.
    pub ends_ns: Vec<u64>,
    /// The first record not yet applied.
    pub next: usize,
    /// The batch's calls in order; `call_next` is the first not yet applied. They go back to
    /// their worker to be dropped there: glibc frees memory of another thread's arena under
    /// that arena's lock, which cost more than the tracking saved.
    pub calls: Vec<Call>,
    pub call_next: usize,
    /// Each call's output line, when the sink gave a formatter.
    pub lines: Lines,
    /// Each call's endpoint key number (`EndpointKeys`), in call order.
    pub key_ids: Vec<u32>,
    /// The keys of the numbers marked new, in order.
    pub fresh_keys: std::vec::IntoIter<EndpointKey>,
}

/// A record's calls' endpoint key numbers, given by tracking thread `worker`, and its batch's
/// keys not yet taken (the pipeline takes one per number marked new).
pub(super) struct Keyed<'a> {
    pub worker: usize,
    pub ids: &'a [u32],
    pub fresh: &'a mut std::vec::IntoIter<EndpointKey>,
}

/// One record's results, taken from its batch in order.
pub(super) struct TakenRecord<'a> {
    pub raw: &'a [u8],
    pub outcome: Outcome,
    /// None: the batch holds fewer calls than its outcomes say (a worker's bug).
    pub calls: Option<&'a [Call]>,
    pub lines: &'a mut Lines,
    pub keyed: Keyed<'a>,
}

impl Processed {
    /// The next record not yet applied, with its calls; the caller knows there is one.
    /// `worker`: the tracking thread that sent this batch.
    pub fn take_next(&mut self, worker: usize) -> TakenRecord<'_> {
        let i = self.next;
        self.next += 1;
        let outcome = self.outcomes[i];
        let n = match outcome {
            Outcome::Tracked { calls, .. } => calls as usize,
            _ => 0,
        };
        let first = self.call_next;
        self.call_next += n;
        TakenRecord {
            raw: self.batch.record(i),
            outcome,
            calls: self.calls.get(first..first + n),
            lines: &mut self.lines,
            keyed: Keyed {
                worker,
                ids: self.key_ids.get(first..first + n).unwrap_or_default(),
                fresh: &mut self.fresh_keys,
            },
        }
    }
}

/// Call lines back to back, and where each ends; read in order.
#[derive(Default)]
pub(super) struct Lines {
    pub buf: Vec<u8>,
    ends: Vec<u32>,
    next: usize,
}

impl Lines {
    /// The next call's line (None: no formatter).
    pub fn next_line(&mut self) -> Option<&[u8]> {
        let end = *self.ends.get(self.next)? as usize;
        let start = match self.next {
            0 => 0,
            i => self.ends[i - 1] as usize,
        };
        self.next += 1;
        Some(&self.buf[start..end])
    }
}

/// A tracker's counters and open connections at a barrier.
#[derive(Default)]
pub(super) struct TrackerState {
    pub stats: TrackerStats,
    pub parse: ParseStats,
    pub open_conns: usize,
    pub open_per_pid: HashMap<u32, u64>,
}

impl TrackerState {
    pub fn of(t: &ConnTracker) -> TrackerState {
        TrackerState {
            stats: t.stats,
            parse: t.parse,
            open_conns: t.open_conns(),
            open_per_pid: t.open_per_pid(),
        }
    }

    pub fn add(&mut self, o: TrackerState) {
        self.stats.add(&o.stats);
        self.parse.add(&o.parse);
        self.open_conns += o.open_conns;
        for (pid, n) in o.open_per_pid {
            *self.open_per_pid.entry(pid).or_default() += n;
        }
    }
}

enum ToWorker {
    Records(RawBatch),
    /// Applied calls and line buffer, to be dropped (or reused) where they were allocated.
    Recycle(Vec<Call>, Vec<u8>),
    /// Format each call's output line from now on.
    Formatter(CallFormatter),
    /// Interval end at this kernel time: expire idle connections, report the state.
    Interval(u64),
    /// Session end: close every connection's parser, report the state, stop.
    Finish,
}

enum FromWorker {
    Records(Processed),
    State(TrackerState),
}

/// What the pipeline applies, in delivery order.
pub(super) enum Step {
    /// The next record dealt to this worker.
    Record(u16),
    /// A process exec/exit record (kernel layout).
    Proc(Vec<u8>),
    /// A process description known in advance (a recording's). Boxed: a step is moved
    /// into and out of the log for every record, and a description is ~200 bytes.
    Know(Box<ProcInfo>),
}

/// One step ready to apply.
pub(super) enum Ready<'a> {
    Record {
        raw: &'a [u8],
        outcome: Outcome,
        calls: &'a [Call],
        lines: &'a mut Lines,
        /// Its calls' endpoint key numbers.
        keyed: Keyed<'a>,
    },
    Proc(Vec<u8>),
    Know(Box<ProcInfo>),
}

struct Worker {
    tx: Option<SyncSender<ToWorker>>,
    rx: Receiver<FromWorker>,
    handle: Option<JoinHandle<()>>,
    filling: RawBatch,
    ready: VecDeque<Processed>,
}

pub(super) struct Shards {
    workers: Vec<Worker>,
    log: VecDeque<Step>,
    /// Bytes of the records (and process records) in `log`.
    pending_bytes: usize,
    /// Emptied batch buffers, reused for the next batches.
    spare: Vec<RawBatch>,
}

/// The worker a socket's records go to (live, the kernel puts them in that worker's ring by the
/// same hash: `shard_of` in src/bpf/capture.h).
pub(super) fn shard_of(raw: &[u8], n: usize) -> usize {
    if raw.len() < HEADER_LEN {
        // Undecodable: any worker counts it the same.
        return 0;
    }
    let sock = u64::from_ne_bytes(raw[16..24].try_into().expect("8 bytes"));
    // Socket inode numbers are sequential: mix them so neighbours spread evenly.
    (sock.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 32) as usize % n
}

pub(super) fn worker_error() -> io::Error {
    io::Error::other("a connection-tracking worker thread stopped (see the message above)")
}

impl Shards {
    /// `n` workers, each with a tracker of `cfg` (its connection cap shared out) and the
    /// user-space `filters`, numbering endpoint keys on raw resources if `raw_resources`.
    pub fn start(
        n: usize,
        cfg: &TrackerConfig,
        filters: &Filters,
        raw_resources: bool,
    ) -> io::Result<Shards> {
        let mut workers = Vec::with_capacity(n);
        for i in 0..n {
            let (tx, wrx) = mpsc::sync_channel::<ToWorker>(QUEUED_BATCHES);
            let (wtx, rx) = mpsc::channel::<FromWorker>();
            let mut cfg = *cfg;
            cfg.max_conns = cfg.max_conns.div_ceil(n).max(1);
            let filters = filters.clone();
            let handle = std::thread::Builder::new()
                .name(format!("ebtop-track-{i}"))
                .spawn(move || {
                    let batches = BatchWork::new(raw_resources);
                    work(ConnTracker::new(cfg), batches, &filters, &wrx, &wtx)
                })?;
            workers.push(Worker {
                tx: Some(tx),
                rx,
                handle: Some(handle),
                filling: RawBatch::default(),
                ready: VecDeque::new(),
            });
        }
        Ok(Shards {
            workers,
            log: VecDeque::new(),
            pending_bytes: 0,
            spare: Vec::new(),
        })
    }

    /// Deals one record to its worker (sending the worker's batch once full).
    pub fn dispatch(&mut self, raw: &[u8]) -> io::Result<()> {
        let k = shard_of(raw, self.workers.len());
        let b = &mut self.workers[k].filling;
        b.buf.extend_from_slice(raw);
        b.ends.push(b.buf.len() as u32);
        self.log.push_back(Step::Record(k as u16));
        self.pending_bytes += raw.len();
        if b.ends.len() >= BATCH_RECORDS || b.buf.len() >= BATCH_BYTES {
            self.send_batch(k)?;
        }
        Ok(())
    }

    /// The workers write each call's line with `f` (a copy each) from now on.
    pub fn set_formatter(&mut self, f: &CallFormatter) -> io::Result<()> {
        for k in 0..self.workers.len() {
            self.send(k, ToWorker::Formatter(CallFormatter::new(f.clock)))?;
        }
        Ok(())
    }

    /// A step that is not a record, applied after every record delivered before it.
    pub fn push_step(&mut self, step: Step) {
        if let Step::Proc(raw) = &step {
            self.pending_bytes += raw.len();
        }
        self.log.push_back(step);
    }

    fn send_batch(&mut self, k: usize) -> io::Result<()> {
        let fresh = self.spare.pop().unwrap_or_default();
        let batch = std::mem::replace(&mut self.workers[k].filling, fresh);
        self.send(k, ToWorker::Records(batch))
    }

    fn send(&mut self, k: usize, msg: ToWorker) -> io::Result<()> {
        let tx = self.workers[k].tx.as_ref().ok_or_else(worker_error)?;
        tx.send(msg).map_err(|_| worker_error())
    }

    /// Sends every partly filled batch.
    pub fn send_partial(&mut self) -> io::Result<()> {
        for k in 0..self.workers.len() {
            if !self.workers[k].filling.ends.is_empty() {
                self.send_batch(k)?;
            }
        }
        Ok(())
    }

    /// Steps delivered and not yet applied.
    pub fn pending_steps(&self) -> usize {
        self.log.len()
    }

    /// Whether the backlog passed its bound (steps or bytes).
    pub fn over_bound(&self) -> bool {
        self.log.len() > MAX_PENDING_STEPS || self.pending_bytes > MAX_PENDING_BYTES
    }

    /// Whether the backlog is back to half its bound.
    pub fn under_half_bound(&self) -> bool {
        self.log.len() <= MAX_PENDING_STEPS / 2 && self.pending_bytes <= MAX_PENDING_BYTES / 2
    }

    /// The next step in delivery order, if its results are in (`wait`: until they are).
    pub fn next(&mut self, wait: bool) -> io::Result<Option<Ready<'_>>> {
        let k = match self.log.front() {
            None => return Ok(None),
            Some(Step::Record(k)) => *k as usize,
            Some(_) => {
                return Ok(match self.log.pop_front() {
                    Some(Step::Proc(raw)) => {
                        self.pending_bytes = self.pending_bytes.saturating_sub(raw.len());
                        Some(Ready::Proc(raw))
                    }
                    Some(Step::Know(info)) => Some(Ready::Know(info)),
                    _ => None,
                })
            }
        };
        self.recycle(k);
        let w = &mut self.workers[k];
        if w.ready.is_empty() {
            let msg = if wait {
                w.rx.recv().map_err(|_| worker_error())?
            } else {
                match w.rx.try_recv() {
                    Ok(m) => m,
                    Err(TryRecvError::Empty) => return Ok(None),
                    Err(TryRecvError::Disconnected) => return Err(worker_error()),
                }
            };
            match msg {
                FromWorker::Records(p) => w.ready.push_back(p),
                // A state comes only after every batch sent before its barrier.
                FromWorker::State(_) => return Err(worker_error()),
            }
        }
        self.log.pop_front();
        let taken = w.ready.front_mut().ok_or_else(worker_error)?.take_next(k);
        self.pending_bytes = self.pending_bytes.saturating_sub(taken.raw.len());
        Ok(Some(Ready::Record {
            raw: taken.raw,
            outcome: taken.outcome,
            calls: taken.calls.ok_or_else(worker_error)?,
            lines: taken.lines,
            keyed: taken.keyed,
        }))
    }

    /// Worker k's batches that were applied in full: the record buffer back to the spare
    /// list, the calls back to the worker.
    fn recycle(&mut self, k: usize) {
        let w = &mut self.workers[k];
        while w.ready.front().is_some_and(|p| p.next == p.outcomes.len()) {
            let mut p = w.ready.pop_front().expect("checked");
            p.batch.buf.clear();
            p.batch.ends.clear();
            keep_spare(&mut self.spare, p.batch);
            if let Some(tx) = &w.tx {
                // A worker that is gone shows up at the next send or receive.
                let _ = tx.send(ToWorker::Recycle(p.calls, p.lines.buf));
            }
        }
    }

    /// Barrier: every worker handles `msg` after its records and reports its tracker's
    /// state; returns the merged state. Every step must have been applied first.
    fn barrier(&mut self, msg: impl Fn() -> ToWorker) -> io::Result<TrackerState> {
        debug_assert!(self.log.is_empty());
        for k in 0..self.workers.len() {
            self.recycle(k);
            self.send(k, msg())?;
        }
        let mut total = TrackerState::default();
        for w in &mut self.workers {
            match w.rx.recv().map_err(|_| worker_error())? {
                FromWorker::State(s) => total.add(s),
                FromWorker::Records(_) => return Err(worker_error()),
            }
        }
        Ok(total)
    }

    /// Interval end at `now_ns` (after every step was applied).
    pub fn interval(&mut self, now_ns: u64) -> io::Result<TrackerState> {
        self.barrier(|| ToWorker::Interval(now_ns))
    }

    /// Session end (after every step was applied): the workers' final state; they stop.
    pub fn finish(&mut self) -> io::Result<TrackerState> {
        let state = self.barrier(|| ToWorker::Finish)?;
        self.stop();
        Ok(state)
    }

    fn stop(&mut self) {
        for w in &mut self.workers {
            w.tx = None;
        }
        for w in &mut self.workers {
            if let Some(h) = w.handle.take() {
                // A worker that panicked already reported it (the panic hook); its error
                // reached the pipeline as a closed channel.
                let _ = h.join();
            }
        }
    }
}

impl Drop for Shards {
    fn drop(&mut self) {
        self.stop();
    }
}

/// What a worker keeps between batches: the call-line formatter, its endpoint key numbers
/// and emptied buffers.
pub(super) struct BatchWork {
    formatter: Option<CallFormatter>,
    keys: EndpointKeys,
    // Emptied call vectors and line buffers, reused.
    spare_calls: Vec<Vec<Call>>,
    spare_lines: Vec<Vec<u8>>,
}

impl BatchWork {
    /// `raw_resources`: endpoint keys on raw resources (`--raw-resources`).
    pub fn new(raw_resources: bool) -> BatchWork {
        BatchWork {
            formatter: None,
            keys: EndpointKeys::new(raw_resources),
            spare_calls: Vec::new(),
            spare_lines: Vec::new(),
        }
    }

    pub fn set_formatter(&mut self, f: CallFormatter) {
        self.formatter = Some(f);
    }

    /// Takes back an applied batch's calls and line buffer.
    pub fn recycle(&mut self, mut calls: Vec<Call>, mut lines: Vec<u8>) {
        calls.clear();
        lines.clear();
        keep_spare(&mut self.spare_calls, calls);
        keep_spare(&mut self.spare_lines, lines);
    }

    /// Decodes, filters and tracks a batch's records; each call's line written if asked for.
    pub fn process(
        &mut self,
        tracker: &mut ConnTracker,
        filters: &Filters,
        batch: RawBatch,
    ) -> Processed {
        if crate::diag::debug_panic_requested("tracker") {
            panic!("injected panic in a tracking thread (EBTOP_DEBUG_PANIC=tracker)");
        }
        let mut outcomes = Vec::with_capacity(batch.ends.len());
        let mut ends_ns = Vec::with_capacity(batch.ends.len());
        let mut calls = self.spare_calls.pop().unwrap_or_default();
        let mut lines = Lines {
            buf: self.spare_lines.pop().unwrap_or_default(),
            ..Lines::default()
        };
        for i in 0..batch.ends.len() {
            let ev = Event::decode(batch.record(i));
            ends_ns.push(ev.as_ref().map_or(0, |ev| ev.end_ns));
            let outcome = match ev {
                Err(_) => Outcome::DecodeError,
                Ok(ev) if !super::passes(filters, &ev) => Outcome::Filtered,
                Ok(ev) => {
                    let before = calls.len();
                    let verdict = tracker.handle(&ev, &mut calls);
                    Outcome::Tracked {
                        verdict,
                        calls: (calls.len() - before) as u32,
                        head: EventHead::from(&ev),
                    }
                }
            };
            outcomes.push(outcome);
        }
        if let Some(f) = &mut self.formatter {
            for c in &calls {
                f.write(&mut lines.buf, c);
                lines.ends.push(lines.buf.len() as u32);
            }
        }
        let mut fresh = Vec::new();
        let key_ids = calls
            .iter()
            .map(|c| self.keys.number(c, &mut fresh))
            .collect();
        Processed {
            batch,
            outcomes,
            ends_ns,
            next: 0,
            calls,
            call_next: 0,
            lines,
            key_ids,
            fresh_keys: fresh.into_iter(),
        }
    }
}

/// A worker: tracks its share of the connections until its channel closes or `Finish`.
fn work(
    mut tracker: ConnTracker,
    mut work: BatchWork,
    filters: &Filters,
    rx: &Receiver<ToWorker>,
    tx: &mpsc::Sender<FromWorker>,
) {
    while let Ok(msg) = rx.recv() {
        let reply = match msg {
            ToWorker::Formatter(f) => {
                work.set_formatter(f);
                continue;
            }
            ToWorker::Recycle(calls, lines) => {
                work.recycle(calls, lines);
                continue;
            }
            ToWorker::Records(batch) => {
                FromWorker::Records(work.process(&mut tracker, filters, batch))
            }
            ToWorker::Interval(now) => {
                tracker.expire(now);
                FromWorker::State(TrackerState::of(&tracker))
            }
            ToWorker::Finish => {
                tracker.end_session();
                let _ = tx.send(FromWorker::State(TrackerState::of(&tracker)));
                return;
            }
        };
        if tx.send(reply).is_err() {
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_thread_keeps_a_bounded_number_of_applied_batches_buffers() {
        let mut work = BatchWork::new(false);
        for _ in 0..10 * SPARE_BUFFERS {
            work.recycle(Vec::with_capacity(64), Vec::with_capacity(64 << 10));
        }
        assert_eq!(work.spare_calls.len(), SPARE_BUFFERS);
        assert_eq!(work.spare_lines.len(), SPARE_BUFFERS);
        // A kept buffer is reused, emptied, with its room.
        let p = work.process(
            &mut ConnTracker::new(TrackerConfig::default()),
            &Filters::default(),
            RawBatch::default(),
        );
        assert!(p.calls.is_empty() && p.calls.capacity() >= 64);
        assert!(p.lines.buf.is_empty() && p.lines.buf.capacity() >= 64 << 10);
        assert_eq!(work.spare_lines.len(), SPARE_BUFFERS - 1);
    }
}
