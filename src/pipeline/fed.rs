//! Connection tracking on worker threads that each read their own source of records (live:
//! one kernel ring per worker, chosen in the kernel by the socket, so a connection's records
//! reach one worker in the order the kernel wrote them).
//!
//! Unlike the dealt workers (`shards.rs`), no thread reads for the others: each worker reads,
//! decodes, tracks and parses its records and sends the results, batch by batch, to the
//! pipeline, which applies each batch as a whole when it comes. A connection's calls keep
//! their order; calls of different workers interleave by batch (the live order between
//! sockets was never more than the ring's). Interval ends, the stop's drain and the session's
//! end are barriers: every worker sends what it read before and then its tracker's state.

use std::io;
use std::os::fd::{AsFd, BorrowedFd};
use std::sync::mpsc::{self, Receiver, Sender, SyncSender, TryRecvError};
use std::thread::JoinHandle;
use std::time::Duration;

use super::shards::{
    worker_error, BatchWork, Processed, RawBatch, TrackerState, BATCH_BYTES, BATCH_RECORDS,
    QUEUED_BATCHES,
};
use crate::call::Call;
use crate::conntrack::{ConnTracker, TrackerConfig};
use crate::eventfd::Doorbell;
use crate::session::Filters;
use crate::sink::call_line::CallFormatter;

/// How long an idle worker waits for records before it looks again (its ring wakes it
/// sooner once enough data waits; a little data waits at most this long).
const IDLE_WAIT: Duration = Duration::from_millis(100);

/// A source of raw records that one worker reads on its own thread.
pub trait RecordFeed: Send {
    /// Waits up to `timeout` for records (or for `wake` to become readable), then appends at
    /// most `max` of those ready to `buf`, back to back, each one's end offset in `ends`.
    /// Returns how many it appended.
    fn read(
        &mut self,
        wake: BorrowedFd,
        timeout: Duration,
        max: usize,
        buf: &mut Vec<u8>,
        ends: &mut Vec<u32>,
    ) -> io::Result<usize>;

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
    Records(Processed),
    State(TrackerState),
    /// The worker stopped (an error it reported, or a panic).
    Gone,
}

struct Worker {
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
}

impl FedShards {
    /// One worker per feed, each with a tracker of `cfg` (its connection cap shared out) and
    /// the user-space `filters`.
    pub fn start(
        feeds: Vec<Box<dyn RecordFeed>>,
        cfg: &TrackerConfig,
        filters: &Filters,
    ) -> io::Result<FedShards> {
        let n = feeds.len().max(1);
        let (out, results) = mpsc::sync_channel(QUEUED_BATCHES * n);
        let ready = Doorbell::new()?;
        let mut workers = Vec::with_capacity(n);
        for (k, feed) in feeds.into_iter().enumerate() {
            let (ctl, ctl_rx) = mpsc::channel();
            let wake = Doorbell::new()?;
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
                work: BatchWork::default(),
                batch: RawBatch::default(),
                spare: Vec::new(),
                drained: false,
            };
            let handle = std::thread::Builder::new()
                .name(format!("ebtop-track-{k}"))
                .spawn(move || worker.run())?;
            workers.push(Worker {
                ctl,
                wake,
                handle: Some(handle),
            });
        }
        Ok(FedShards {
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

    /// The next result from any worker (`wait`: until one comes).
    pub fn next(&self, wait: bool) -> io::Result<Option<(usize, FromWorker)>> {
        let rx = self.results.as_ref().ok_or_else(worker_error)?;
        if !wait {
            // Cleared before looking, so a result sent after the look rings it again.
            self.ready.clear();
        }
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

    /// An applied batch's buffers go back to their worker.
    pub fn recycle(&self, k: usize, p: Processed) {
        // A worker that is gone shows up at the next barrier or receive.
        let _ = self.workers[k]
            .ctl
            .send(ToWorker::Recycle(p.calls, p.lines.buf, p.batch));
    }

    fn stop(&mut self) {
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
        loop {
            self.wake.clear();
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
                        self.spare.push(batch);
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
            let timeout = if more { Duration::ZERO } else { IDLE_WAIT };
            let want = BATCH_RECORDS.saturating_sub(self.batch.len()).max(1);
            match self.read(timeout, want) {
                Ok(n) => {
                    more = n == want;
                    let full =
                        self.batch.len() >= BATCH_RECORDS || self.batch.buf.len() >= BATCH_BYTES;
                    if (full || !more) && self.batch.len() > 0 {
                        if let Err(end) = self.send_batch() {
                            return end;
                        }
                    }
                }
                Err(e) => {
                    crate::diag!("ebtop: tracking thread {} stopped: {e}", self.k);
                    return End::Failed;
                }
            }
        }
    }

    fn read(&mut self, timeout: Duration, max: usize) -> io::Result<usize> {
        let b = &mut self.batch;
        self.feed
            .read(self.wake.as_fd(), timeout, max, &mut b.buf, &mut b.ends)
    }

    /// Processes the records read so far and sends the results (waiting while the pipeline
    /// is behind: the source then fills and counts what it cannot keep).
    fn send_batch(&mut self) -> Result<(), End> {
        let fresh = self.spare.pop().unwrap_or_default();
        let batch = std::mem::replace(&mut self.batch, fresh);
        let p = self.work.process(&mut self.tracker, &self.filters, batch);
        self.out
            .send((self.k, FromWorker::Records(p)))
            .map_err(|_| End::Quiet)?;
        self.ready.ring();
        Ok(())
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
        self.out
            .send((self.k, FromWorker::State(TrackerState::of(&self.tracker))))
            .map_err(|_| End::Quiet)?;
        self.ready.ring();
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
        ) -> io::Result<usize> {
            let mut r = self.records.lock().unwrap();
            if r.is_empty() && !timeout.is_zero() {
                drop(r);
                std::thread::sleep(Duration::from_millis(1));
                return Ok(0);
            }
            let n = r.len().min(max);
            for rec in r.drain(..n) {
                buf.extend_from_slice(&rec);
                ends.push(buf.len() as u32);
            }
            Ok(n)
        }

        fn drain_budget(&self) -> usize {
            1 << 20
        }
    }

    #[test]
    fn a_drain_barrier_brings_every_record_read_before_it_and_then_the_state() {
        let records: Vec<Vec<u8>> = (0..1000u32).map(|i| vec![i as u8; 3]).collect();
        let feed = Scripted {
            records: Arc::new(Mutex::new(records)),
        };
        let sh = FedShards::start(
            vec![Box::new(feed)],
            &TrackerConfig::default(),
            &Filters::default(),
        )
        .unwrap();
        sh.ask_all(Barrier::Drain).unwrap();
        let mut records = 0;
        loop {
            match sh.next(true).unwrap() {
                Some((0, FromWorker::Records(p))) => {
                    records += p.outcomes.len();
                    sh.recycle(0, p);
                }
                Some((0, FromWorker::State(_))) => break,
                _ => panic!("unexpected message"),
            }
        }
        // Three-byte records are too short to decode: each is one outcome all the same.
        assert_eq!(records, 1000);
    }
}
