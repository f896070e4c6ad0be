//! Connection tracking on worker threads that each read their own source of records (live:
//! one kernel ring per worker, chosen in the kernel by the socket, so a connection's records
//! reach one worker in the order the kernel wrote them).
//!
//! Unlike the dealt workers (`shards.rs`), no thread reads for the others: each worker reads,
//! decodes, tracks and parses its records and sends the results, batch by batch, to the
//! pipeline. The pipeline merges the workers' records by their kernel end time: a worker says
//! how far it has read (its progress: every record that ended before then, give or take
//! `LATE_SLACK_NS`, is in what it sent), and a record is applied once every other worker has
//! a later one waiting or has read past it — the output comes in the order one ring would give.
//! A connection's records stay in their worker's order whatever their times. Interval ends,
//! the stop's drain and the session's end are barriers: every worker sends what it read
//! before and then its tracker's state, and everything received is applied.

use std::io;
use std::os::fd::{AsFd, BorrowedFd};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{self, Receiver, Sender, SyncSender, TryRecvError};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use std::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};

use super::shards::{
    keep_spare, worker_error, BatchWork, Keyed, Lines, Outcome, Processed, RawBatch, TrackerState,
    BATCH_BYTES, BATCH_RECORDS, QUEUED_BATCHES,
};
use crate::call::Call;
use crate::conntrack::{ConnTracker, TrackerConfig};
use crate::eventfd::Doorbell;
use crate::filters::Filters;
use crate::sink::call_line::CallFormatter;

/// How long the reader sleeps between looks at the ring while records are coming (the ring
/// wakes it sooner once `wakeup_bytes` wait). The reader runs at the capture's priority: at a
/// look every 100 ms, the records of 100 ms (~1.2 ms of work at 10,000 requests/s on the
/// development VM) held a CPU from the traced services in one stretch, which tripled their
/// p99 response time. Every 10 ms cut the p99 a little more than 25 ms but cost the terminal
/// UI 13% more CPU per span (each look starts on cold caches); 25 ms cost nothing measurable.
pub(crate) const BUSY_DRAIN_EVERY: Duration = Duration::from_millis(25);

/// … and while none came at the last look (an idle host wakes ebtop 10 times a second).
pub(crate) const IDLE_DRAIN_EVERY: Duration = Duration::from_millis(100);

/// How long a worker waits for records before it looks again (its ring wakes it sooner once
/// enough data waits; a little data waits at most this long): short while records come, so
/// that a look's work is a short stretch, as the live driver's own reads of one ring.
const BUSY_WAIT: Duration = BUSY_DRAIN_EVERY;
const IDLE_WAIT: Duration = IDLE_DRAIN_EVERY;

/// How much earlier than a read began a record may have ended and still not be in the ring
/// then (its program stamped it and had not committed it yet: a TCP send is stamped at its
/// start). A record later than that is applied late, never lost.
const LATE_SLACK_NS: u64 = 2_000_000;

/// Records waiting for other workers' progress, at most: beyond, they are applied anyway
/// (order given up for memory, should a worker stall).
const MAX_HELD_RECORDS: usize = 1 << 16;

/// A source of raw records that one worker reads on its own thread.
pub trait RecordFeed: Send {
    /// Waits up to `timeout` for records (or for `wake` to become readable), then appends at
    /// most `max` of those ready to `buf`, back to back, each one's end offset in `ends`.
    /// Returns how many it appended and the kernel time (CLOCK_MONOTONIC) it began taking
    /// them: with fewer than `max`, every record written before then was taken.
    fn read(
        &mut self,
        wake: BorrowedFd,
        timeout: Duration,
        max: usize,
        buf: &mut Vec<u8>,
        ends: &mut Vec<u32>,
    ) -> io::Result<(usize, u64)>;

    /// Records a drain reads at most (a source still being written must not keep it going):
    /// what a full source holds.
    fn drain_budget(&self) -> usize;
}

/// What the pipeline asks of every worker at once.
#[derive(Clone, Copy, Debug)]
pub(super) enum Barrier {
    /// Interval end at this kernel time: expire idle connections, report the state.
    Interval(u64),
    /// The session stops: read what the source holds now (bounded), report the state.
    Drain,
    /// Session end: close every connection's parser, report the state, stop.
    Finish,
}

enum ToWorker {
    Formatter(CallFormatter),
    /// An applied batch's calls, line buffer and record buffer, to be reused (or dropped)
    /// where they were allocated.
    Recycle(Vec<Call>, Vec<u8>, RawBatch),
    Barrier(Barrier),
}

pub(super) enum FromWorker {
    /// A batch's results, and how far the worker had read after it (see `Progress`).
    Records(Processed, u64),
    /// Every record of this worker that ended before this kernel time has been sent.
    Progress(u64),
    State(TrackerState),
    /// The worker stopped (an error it reported, or a panic).
    Gone,
}

struct Worker {
    /// A record of another worker that ended at this kernel time waits for this worker to
    /// have read past it (0: none): the worker then says how far it read.
    wanted: Arc<AtomicU64>,
    ctl: Sender<ToWorker>,
    /// Rung after each message, so a worker waiting on its source looks at once.
    wake: Doorbell,
    handle: Option<JoinHandle<()>>,
}

pub(super) struct FedShards {
    workers: Vec<Worker>,
    results: Option<Receiver<(u16, FromWorker)>>,
    /// Readable while results may wait.
    ready: Doorbell,
    /// Per worker: results received and not yet applied, and its progress.
    queues: Vec<VecDeque<Processed>>,
    progress: Vec<u64>,
    /// Records in `queues` not yet applied.
    held: usize,
    /// The next record's kernel end time of every worker with one waiting, but `taken`'s
    /// (a tie goes to the worker first in order): the earliest is the merge's next record.
    heads: BinaryHeap<Reverse<(u64, usize)>>,
    /// The worker whose record `next_record` handed out last: its next head is found (and
    /// its applied batches recycled) once that record is no longer borrowed.
    taken: Option<usize>,
    /// The least progress of the workers with nothing waiting (None: to be computed again;
    /// it changes only when a message comes in or a worker's queue runs empty).
    read_up_to: Option<u64>,
}

/// One record to apply, with what its worker made of it.
pub(super) struct FedRecord<'a> {
    pub raw: &'a [u8],
    pub outcome: Outcome,
    pub calls: &'a [crate::call::Call],
    pub lines: &'a mut Lines,
    /// Its calls' endpoint key numbers.
    pub keyed: Keyed<'a>,
}

impl FedShards {
    /// One worker per feed, each with a tracker of `cfg` (its connection cap shared out) and
    /// the user-space `filters`, numbering endpoint keys on raw resources if `raw_resources`.
    pub fn start(
        feeds: Vec<Box<dyn RecordFeed>>,
        cfg: &TrackerConfig,
        filters: &Filters,
        raw_resources: bool,
    ) -> io::Result<FedShards> {
        let n = feeds.len().max(1);
        let (out, results) = mpsc::sync_channel(QUEUED_BATCHES * n);
        let ready = Doorbell::new()?;
        let mut workers = Vec::with_capacity(n);
        for (k, feed) in feeds.into_iter().enumerate() {
            let (ctl, ctl_rx) = mpsc::channel();
            let wake = Doorbell::new()?;
            let wanted = Arc::new(AtomicU64::new(0));
            let mut cfg = *cfg;
            cfg.max_conns = cfg.max_conns.div_ceil(n).max(1);
            let worker = FedWorker {
                k: k as u16,
                tracker: ConnTracker::new(cfg),
                filters: filters.clone(),
                feed,
                ctl: ctl_rx,
                wake: wake.try_clone()?,
                out: out.clone(),
                ready: ready.try_clone()?,
                work: BatchWork::new(raw_resources),
                batch: RawBatch::default(),
                spare: Vec::new(),
                drained: false,
                progress: 0,
                wanted: Arc::clone(&wanted),
            };
            let handle = std::thread::Builder::new()
                .name(format!("ebtop-track-{k}"))
                .spawn(move || worker.run())?;
            workers.push(Worker {
                wanted,
                ctl,
                wake,
                handle: Some(handle),
            });
        }
        Ok(FedShards {
            queues: (0..workers.len()).map(|_| VecDeque::new()).collect(),
            progress: vec![0; workers.len()],
            held: 0,
            heads: BinaryHeap::with_capacity(workers.len()),
            taken: None,
            read_up_to: None,
            workers,
            results: Some(results),
            ready,
        })
    }

    fn send(&self, k: usize, msg: ToWorker) -> io::Result<()> {
        let w = &self.workers[k];
        w.ctl.send(msg).map_err(|_| worker_error())?;
        w.wake.ring();
        Ok(())
    }

    /// The workers write each call's line with `f` (a copy each) from now on.
    pub fn set_formatter(&self, f: &CallFormatter) -> io::Result<()> {
        for k in 0..self.workers.len() {
            self.send(k, ToWorker::Formatter(CallFormatter::new(f.clock)))?;
        }
        Ok(())
    }

    /// Results that can wait at most (the workers wait beyond).
    pub fn queue_bound(&self) -> usize {
        QUEUED_BATCHES * self.workers.len()
    }

    /// Readable while results may wait (for the caller's epoll set).
    pub fn ready_fd(&self) -> BorrowedFd<'_> {
        self.ready.as_fd()
    }

    /// Asks every worker for `b`; each answers with a `State` after the records it read
    /// before.
    pub fn ask_all(&self, b: Barrier) -> io::Result<usize> {
        for k in 0..self.workers.len() {
            self.send(k, ToWorker::Barrier(b))?;
        }
        Ok(self.workers.len())
    }

    /// Clears the doorbell the workers ring with each result: done before a pass of
    /// `next(false)` that takes every result waiting (a result sent after rings it again).
    pub fn clear_ready(&self) {
        self.ready.clear();
    }

    /// Rings that doorbell: results still wait after a pass that stopped short of them.
    pub fn ring_ready(&self) {
        self.ready.ring();
    }

    /// The next result from any worker (`wait`: until one comes).
    pub fn next(&self, wait: bool) -> io::Result<Option<(usize, FromWorker)>> {
        let rx = self.results.as_ref().ok_or_else(worker_error)?;
        let got = if wait {
            rx.recv().map_err(|_| worker_error())?
        } else {
            match rx.try_recv() {
                Ok(m) => m,
                Err(TryRecvError::Empty) => return Ok(None),
                Err(TryRecvError::Disconnected) => return Err(worker_error()),
            }
        };
        match got {
            (_, FromWorker::Gone) => Err(worker_error()),
            (k, msg) => Ok(Some((k as usize, msg))),
        }
    }

    /// Takes a worker's message in: results are queued, progress noted; a state is returned.
    pub fn take_in(&mut self, k: usize, msg: FromWorker) -> Option<TrackerState> {
        self.settle();
        match msg {
            FromWorker::Records(p, progress) => {
                self.held += p.outcomes.len();
                let waited = self.head(k).is_some();
                self.queues[k].push_back(p);
                if !waited {
                    // An empty batch is recycled at once; otherwise this is k's next head.
                    self.recycle_applied(k);
                    if let Some(t) = self.head(k) {
                        self.heads.push(Reverse((t, k)));
                    }
                }
                self.progress[k] = self.progress[k].max(progress);
                self.read_up_to = None;
                None
            }
            FromWorker::Progress(t) => {
                self.progress[k] = self.progress[k].max(t);
                self.read_up_to = None;
                None
            }
            FromWorker::State(s) => Some(s),
            FromWorker::Gone => None, // `next` turns it into an error
        }
    }

    /// The next record in time that may be applied now (`all`: whatever the other workers'
    /// progress): the earliest of the workers' next records, once every worker with none
    /// waiting has read past it. O(log workers) per record: a heap of the workers' heads,
    /// and the least progress of those with nothing waiting kept between messages (a scan
    /// of every queue per record was most of the pipeline thread's time with 8 workers).
    pub fn next_record(&mut self, all: bool) -> Option<FedRecord<'_>> {
        let free = all || self.held > MAX_HELD_RECORDS;
        // The last record's worker goes first while its next record is still the earliest
        // (a tie with a worker before it goes to that one): the heap is not touched.
        let own = self.taken.take().and_then(|k| self.next_head_of(k));
        let (t, k) = match (own, self.heads.peek()) {
            (Some(own), Some(&Reverse(top))) if top < own => {
                self.heads.push(Reverse(own));
                top
            }
            (Some(own), _) => own,
            (None, Some(&Reverse(top))) => top,
            (None, None) => return None,
        };
        let in_heap = own != Some((t, k));
        if !free && t > self.least_read_up_to() {
            if !in_heap {
                self.heads.push(Reverse((t, k)));
            }
            self.want_progress(t);
            return None;
        }
        if in_heap {
            self.heads.pop();
        }
        self.taken = Some(k);
        self.held -= 1;
        let taken = self.queues[k]
            .front_mut()
            .expect("chosen above")
            .take_next(k);
        Some(FedRecord {
            raw: taken.raw,
            outcome: taken.outcome,
            calls: taken.calls.unwrap_or(&[]),
            lines: taken.lines,
            keyed: taken.keyed,
        })
    }

    /// Puts the worker of the record handed out last back among the heads (its record is
    /// applied by now), recycling its applied batches.
    fn settle(&mut self) {
        if let Some(head) = self.taken.take().and_then(|k| self.next_head_of(k)) {
            self.heads.push(Reverse(head));
        }
    }

    /// The next head of worker `k`, whose last record handed out is applied (its applied
    /// batches recycled first); None: nothing waits from it, so its progress counts.
    fn next_head_of(&mut self, k: usize) -> Option<(u64, usize)> {
        self.recycle_applied(k);
        let head = self.head(k).map(|t| (t, k));
        if head.is_none() {
            let p = self.progress[k];
            self.read_up_to = self.read_up_to.map(|r| r.min(p));
        }
        head
    }

    /// The least progress of the workers with nothing waiting (u64::MAX: none).
    fn least_read_up_to(&mut self) -> u64 {
        match self.read_up_to {
            Some(r) => r,
            None => {
                let r = (0..self.queues.len())
                    .filter(|&j| self.head(j).is_none())
                    .map(|j| self.progress[j])
                    .min()
                    .unwrap_or(u64::MAX);
                self.read_up_to = Some(r);
                r
            }
        }
    }

    /// Sends the batches of worker `k` applied in full back to it.
    fn recycle_applied(&mut self, k: usize) {
        while self.queues[k]
            .front()
            .is_some_and(|p| p.next == p.outcomes.len())
        {
            let p = self.queues[k].pop_front().expect("checked");
            // A worker that is gone shows up at the next barrier or receive.
            let _ = self.workers[k]
                .ctl
                .send(ToWorker::Recycle(p.calls, p.lines.buf, p.batch));
        }
    }

    /// The kernel end time of worker `k`'s next record (None: none waits; applied batches
    /// must have been recycled).
    fn head(&self, k: usize) -> Option<u64> {
        self.queues[k].front().map(|p| p.ends_ns[p.next])
    }

    /// Asks the workers that have not said they read past `t` (and have nothing waiting) to
    /// say so once they have: a worker at rest speaks only when asked. A worker is woken only
    /// for a first request: one already asked about an earlier time wakes for that one and
    /// then sees the later time (ringing for each later time woke each worker ~7,000 times a
    /// second at 100K spans/s on 2 CPUs, each wakeup preempting the traced load).
    pub fn want_progress(&self, t: u64) {
        for (j, w) in self.workers.iter().enumerate() {
            if self.queues[j].is_empty()
                && self.progress[j] < t
                && w.wanted.fetch_max(t, Ordering::AcqRel) == 0
            {
                w.wake.ring();
            }
        }
    }

    /// Every record that ended before this kernel time has been applied or is waiting to be
    /// (what a process exit must wait for).
    pub fn applied_up_to(&self) -> u64 {
        (0..self.queues.len())
            .map(
                |k| match self.queues[k].iter().find(|p| p.next < p.outcomes.len()) {
                    Some(p) => p.ends_ns[p.next].min(self.progress[k]),
                    None => self.progress[k],
                },
            )
            .min()
            .unwrap_or(0)
    }

    /// Ends the workers and joins them (again: nothing).
    pub(super) fn stop(&mut self) {
        // Closed channels end the workers: the control one while they wait on their source,
        // the results one while they wait to send.
        self.results = None;
        for w in &mut self.workers {
            let (dead, _) = mpsc::channel();
            drop(std::mem::replace(&mut w.ctl, dead));
            w.wake.ring();
        }
        for w in &mut self.workers {
            if let Some(h) = w.handle.take() {
                // A worker that panicked already reported it (the panic hook).
                let _ = h.join();
            }
        }
    }
}

impl Drop for FedShards {
    fn drop(&mut self) {
        self.stop();
    }
}

/// One worker's thread state.
struct FedWorker {
    k: u16,
    tracker: ConnTracker,
    filters: Filters,
    feed: Box<dyn RecordFeed>,
    ctl: Receiver<ToWorker>,
    wake: Doorbell,
    out: SyncSender<(u16, FromWorker)>,
    ready: Doorbell,
    work: BatchWork,
    /// Records read and not yet processed.
    batch: RawBatch,
    /// Record buffers back from the pipeline.
    spare: Vec<RawBatch>,
    /// The stop's drain is done: the source is not read again.
    drained: bool,
    /// How far this worker has read (see `FromWorker::Progress`).
    progress: u64,
    /// The time the pipeline waits for this worker to have read past (0: none).
    wanted: Arc<AtomicU64>,
}

/// Why a worker's loop ended.
enum End {
    /// Finished, or told to stop: nothing to report.
    Quiet,
    /// Stopped on an error (reported), the pipeline must learn it.
    Failed,
}

impl FedWorker {
    fn run(mut self) {
        // Sent also when the loop unwinds from a panic, so no barrier waits forever.
        struct Farewell {
            k: u16,
            out: SyncSender<(u16, FromWorker)>,
            ready: Doorbell,
            quiet: bool,
        }
        impl Drop for Farewell {
            fn drop(&mut self) {
                if !self.quiet {
                    let _ = self.out.send((self.k, FromWorker::Gone));
                    self.ready.ring();
                }
            }
        }
        let mut farewell = Farewell {
            k: self.k,
            out: self.out.clone(),
            ready: match self.ready.try_clone() {
                Ok(r) => r,
                Err(_) => return,
            },
            quiet: false,
        };
        farewell.quiet = matches!(self.work_loop(), End::Quiet);
    }

    fn work_loop(&mut self) -> End {
        // Whether the last read filled what it asked for: more may be ready at once.
        let mut more = false;
        // Records the last read found: the wait before the next is short while they come.
        let mut read_last = 0;
        let lag = crate::diag::debug_feed_lag();
        loop {
            let _ = self.wake.clear();
            loop {
                // Once drained, the session has ended: the source is not read again.
                let msg = if self.drained {
                    self.ctl.recv().map_err(|_| TryRecvError::Disconnected)
                } else {
                    self.ctl.try_recv()
                };
                match msg {
                    Ok(ToWorker::Formatter(f)) => self.work.set_formatter(f),
                    Ok(ToWorker::Recycle(calls, lines, mut batch)) => {
                        self.work.recycle(calls, lines);
                        batch.clear();
                        keep_spare(&mut self.spare, batch);
                    }
                    Ok(ToWorker::Barrier(b)) => match self.barrier(b) {
                        Ok(true) => {}
                        Ok(false) => return End::Quiet,
                        Err(end) => return end,
                    },
                    Err(TryRecvError::Empty) => break,
                    Err(TryRecvError::Disconnected) => return End::Quiet,
                }
            }
            let wanted = self.wanted.load(Ordering::Acquire);
            let wait = if read_last > 0 { BUSY_WAIT } else { IDLE_WAIT };
            let timeout = if more {
                Duration::ZERO
            } else if wanted > self.progress {
                // Asked about a moment: it reads again as soon as a read can vouch for it
                // (LATE_SLACK_NS after it).
                let now = crate::clock::monotonic_ns();
                Duration::from_nanos((wanted + LATE_SLACK_NS).saturating_sub(now)).min(wait)
            } else {
                wait
            };
            let want = BATCH_RECORDS.saturating_sub(self.batch.len()).max(1);
            match self.read(timeout, want) {
                Ok(n) => {
                    if n > 0 && !lag.is_zero() {
                        std::thread::sleep(lag);
                    }
                    read_last = n;
                    more = n == want;
                    let full =
                        self.batch.len() >= BATCH_RECORDS || self.batch.buf.len() >= BATCH_BYTES;
                    let wanted = self.wanted.load(Ordering::Acquire);
                    let answers = !more && wanted > 0 && self.progress >= wanted;
                    if answers {
                        // A later request (fetch_max) stays for the next pass.
                        let _ = self.wanted.compare_exchange(
                            wanted,
                            0,
                            Ordering::AcqRel,
                            Ordering::Acquire,
                        );
                    }
                    let sent = if (full || !more) && self.batch.len() > 0 {
                        self.send_batch()
                    } else if answers {
                        // Nothing to send but how far it read: another's record waits on it.
                        self.send(FromWorker::Progress(self.progress))
                    } else {
                        Ok(())
                    };
                    if let Err(end) = sent {
                        return end;
                    }
                }
                Err(e) => {
                    crate::diag!("ebtop: tracking thread {} stopped: {e}", self.k);
                    return End::Failed;
                }
            }
        }
    }

    /// Reads up to `max` records; a read that took fewer found the source empty, so every
    /// record that ended well before it began (LATE_SLACK_NS) is in hand: the progress.
    fn read(&mut self, timeout: Duration, max: usize) -> io::Result<usize> {
        let b = &mut self.batch;
        let (n, began_ns) =
            self.feed
                .read(self.wake.as_fd(), timeout, max, &mut b.buf, &mut b.ends)?;
        if n < max {
            self.progress = self.progress.max(began_ns.saturating_sub(LATE_SLACK_NS));
        }
        Ok(n)
    }

    fn send(&mut self, msg: FromWorker) -> Result<(), End> {
        self.out.send((self.k, msg)).map_err(|_| End::Quiet)?;
        self.ready.ring();
        Ok(())
    }

    /// Processes the records read so far and sends the results (waiting while the pipeline
    /// is behind: the source then fills and counts what it cannot keep).
    fn send_batch(&mut self) -> Result<(), End> {
        let fresh = self.spare.pop().unwrap_or_default();
        let batch = std::mem::replace(&mut self.batch, fresh);
        let p = self.work.process(&mut self.tracker, &self.filters, batch);
        self.send(FromWorker::Records(p, self.progress))
    }

    /// Answers a barrier; false once the session ended.
    fn barrier(&mut self, b: Barrier) -> Result<bool, End> {
        match b {
            Barrier::Interval(now) => self.tracker.expire(now),
            Barrier::Drain => {
                self.drained = true;
                let mut left = self.feed.drain_budget();
                while left > 0 {
                    let want = BATCH_RECORDS.min(left);
                    let n = self.read(Duration::ZERO, want).map_err(|e| {
                        crate::diag!("ebtop: tracking thread {} stopped: {e}", self.k);
                        End::Failed
                    })?;
                    left -= n.min(left);
                    if self.batch.len() >= BATCH_RECORDS {
                        self.send_batch()?;
                    }
                    if n < want {
                        break;
                    }
                }
            }
            Barrier::Finish => {}
        }
        if self.batch.len() > 0 {
            self.send_batch()?;
        }
        if matches!(b, Barrier::Finish) {
            self.tracker.end_session();
        }
        self.send(FromWorker::State(TrackerState::of(&self.tracker)))?;
        Ok(!matches!(b, Barrier::Finish))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::{Arc, Mutex};

    /// Records handed out in slices, as a ring would.
    struct Scripted {
        records: Arc<Mutex<Vec<Vec<u8>>>>,
    }

    impl RecordFeed for Scripted {
        fn read(
            &mut self,
            _wake: BorrowedFd,
            timeout: Duration,
            max: usize,
            buf: &mut Vec<u8>,
            ends: &mut Vec<u32>,
        ) -> io::Result<(usize, u64)> {
            let began = crate::clock::monotonic_ns();
            let mut r = self.records.lock().unwrap();
            if r.is_empty() && !timeout.is_zero() {
                drop(r);
                std::thread::sleep(Duration::from_millis(1));
                return Ok((0, began));
            }
            let n = r.len().min(max);
            for rec in r.drain(..n) {
                buf.extend_from_slice(&rec);
                ends.push(buf.len() as u32);
            }
            Ok((n, began))
        }

        fn drain_budget(&self) -> usize {
            1 << 20
        }
    }

    /// A worker's results as the pipeline gets them: one-byte records (their ids) that
    /// ended at `ends`.
    fn results(ids: &[u8], ends: &[u64]) -> Processed {
        let mut batch = RawBatch::default();
        for id in ids {
            batch.buf.push(*id);
            batch.ends.push(batch.buf.len() as u32);
        }
        Processed {
            batch,
            outcomes: vec![Outcome::DecodeError; ids.len()],
            ends_ns: ends.to_vec(),
            next: 0,
            calls: Vec::new(),
            call_next: 0,
            lines: Lines::default(),
            key_ids: Vec::new(),
            fresh_keys: Vec::new().into_iter(),
        }
    }

    fn idle_feed() -> Box<dyn RecordFeed> {
        Box::new(Scripted {
            records: Arc::new(Mutex::new(Vec::new())),
        })
    }

    #[test]
    fn records_are_applied_in_time_once_every_worker_has_read_past_them() {
        let mut sh = FedShards::start(
            vec![idle_feed(), idle_feed()],
            &TrackerConfig::default(),
            &Filters::default(),
            false,
        )
        .unwrap();
        sh.take_in(
            0,
            FromWorker::Records(results(&[1, 3, 5], &[10, 30, 50]), 60),
        );
        sh.take_in(1, FromWorker::Records(results(&[2, 4], &[20, 40]), 45));
        let mut order = Vec::new();
        while let Some(r) = sh.next_record(false) {
            order.push(r.raw[0]);
        }
        // Record 5 (at 50) waits: worker 1 has read only up to 45.
        assert_eq!(order, [1, 2, 3, 4]);
        assert_eq!(sh.applied_up_to(), 45);
        sh.take_in(1, FromWorker::Progress(55));
        assert_eq!(sh.next_record(false).map(|r| r.raw[0]), Some(5));
        assert!(sh.next_record(false).is_none());
        // A worker's own order is kept whatever the times.
        sh.take_in(0, FromWorker::Records(results(&[7, 6], &[70, 65]), 80));
        sh.take_in(1, FromWorker::Progress(90));
        let rest: Vec<u8> =
            std::iter::from_fn(|| sh.next_record(false).map(|r| r.raw[0])).collect();
        assert_eq!(rest, [7, 6]);
    }

    /// The merge as a scan of every queue per record: the reference the heap of heads must
    /// equal, record for record.
    struct ScanMerge {
        queues: Vec<VecDeque<(u64, u16)>>,
        progress: Vec<u64>,
    }

    impl ScanMerge {
        fn next(&mut self, free: bool) -> Option<u16> {
            let (t, k) = (0..self.queues.len())
                .filter_map(|k| self.queues[k].front().map(|&(t, _)| (t, k)))
                .min()?;
            let blocked =
                (0..self.queues.len()).any(|j| self.queues[j].is_empty() && self.progress[j] < t);
            if blocked && !free {
                return None;
            }
            self.queues[k].pop_front().map(|(_, id)| id)
        }
    }

    #[test]
    fn the_merge_takes_the_records_a_scan_of_every_queue_takes() {
        for (workers, seed) in [
            (1, 7),
            (2, 11),
            (4, 0x2545_f491_4f6c_dd1d),
            (8, 13),
            (16, 17),
        ] {
            merge_equals_scan(workers, seed);
        }
    }

    fn merge_equals_scan(workers: usize, seed: u64) {
        let mut sh = FedShards::start(
            (0..workers).map(|_| idle_feed()).collect(),
            &TrackerConfig::default(),
            &Filters::default(),
            false,
        )
        .unwrap();
        let mut scan = ScanMerge {
            queues: vec![VecDeque::new(); workers],
            progress: vec![0; workers],
        };
        let mut rand = crate::xorshift::below(seed);
        let mut clock = vec![0u64; workers];
        let (mut next_id, mut asked) = (0u16, 0);
        for _ in 0..3000 {
            let k = rand(workers as u64) as usize;
            match rand(4) {
                0 => {
                    // Times mostly rising per worker, ties across workers, a late one at times,
                    // now and then a batch of none (progress alone).
                    let n = rand(7) as usize;
                    let (mut ids, mut ends) = (Vec::new(), Vec::new());
                    for _ in 0..n {
                        clock[k] += rand(4);
                        let t = clock[k].saturating_sub(if rand(10) == 0 { 5 } else { 0 });
                        ids.extend_from_slice(&next_id.to_le_bytes());
                        ends.push(t);
                        scan.queues[k].push_back((t, next_id));
                        next_id += 1;
                    }
                    let progress = clock[k].saturating_sub(rand(3));
                    scan.progress[k] = scan.progress[k].max(progress);
                    let mut p = results(&[], &[]);
                    for (i, t) in ends.iter().enumerate() {
                        p.batch.buf.extend_from_slice(&ids[2 * i..2 * i + 2]);
                        p.batch.ends.push(p.batch.buf.len() as u32);
                        p.outcomes.push(Outcome::DecodeError);
                        p.ends_ns.push(*t);
                    }
                    sh.take_in(k, FromWorker::Records(p, progress));
                }
                1 => {
                    let progress = clock[k] + rand(3);
                    scan.progress[k] = scan.progress[k].max(progress);
                    sh.take_in(k, FromWorker::Progress(progress));
                }
                _ => {
                    let all = rand(8) == 0;
                    for _ in 0..1 + rand(12) {
                        let got = sh
                            .next_record(all)
                            .map(|r| u16::from_le_bytes([r.raw[0], r.raw[1]]));
                        assert_eq!(got, scan.next(all), "next record, ask {asked}");
                        asked += 1;
                    }
                }
            }
        }
        assert!(asked > 1000, "the merge was asked {asked} times");
        // What is left comes out in the same order once the others' progress is ignored.
        loop {
            let got = sh
                .next_record(true)
                .map(|r| u16::from_le_bytes([r.raw[0], r.raw[1]]));
            assert_eq!(got, scan.next(true), "draining");
            if got.is_none() {
                break;
            }
        }
    }

    #[test]
    fn a_drain_barrier_brings_every_record_read_before_it_and_then_the_state() {
        let records: Vec<Vec<u8>> = (0..1000u32).map(|i| vec![i as u8; 3]).collect();
        let feed = Scripted {
            records: Arc::new(Mutex::new(records)),
        };
        let mut sh = FedShards::start(
            vec![Box::new(feed)],
            &TrackerConfig::default(),
            &Filters::default(),
            false,
        )
        .unwrap();
        sh.ask_all(Barrier::Drain).unwrap();
        loop {
            let (k, msg) = sh.next(true).unwrap().expect("a message");
            if sh.take_in(k, msg).is_some() {
                break;
            }
        }
        let mut records = 0;
        while let Some(r) = sh.next_record(true) {
            // Three-byte records are too short to decode.
            assert!(matches!(r.outcome, Outcome::DecodeError));
            records += 1;
        }
        assert_eq!(records, 1000);
    }
}
