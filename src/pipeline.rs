//! The core both sources feed: raw records → decode → connection tracker → parsers → calls →
//! sink. Live capture and replay call the same methods, so their output cannot differ.

use std::io;

use crate::call::{Call, Side};
use crate::conntrack::{ConnTracker, TrackerConfig};
use crate::event::Event;
use crate::procinfo::ProcessTable;
use crate::session::{KernelCounters, SessionMeta, Summary};
use crate::sink::Sink;

pub struct Pipeline<S: Sink> {
    tracker: ConnTracker,
    procs: ProcessTable,
    sink: S,
    summary: Summary,
    first_ns: Option<u64>,
    last_ns: u64,
    lost_reported: (u64, u64),
}

impl<S: Sink> Pipeline<S> {
    pub fn new(cfg: TrackerConfig, procs: ProcessTable, sink: S) -> Self {
        Pipeline {
            tracker: ConnTracker::new(cfg),
            procs,
            sink,
            summary: Summary::default(),
            first_ns: None,
            last_ns: 0,
            lost_reported: (0, 0),
        }
    }

    pub fn start(&mut self, meta: &SessionMeta) -> io::Result<()> {
        self.sink.meta(meta)
    }

    /// One record as the kernel delivered it. Undecodable records are counted and skipped.
    pub fn on_record(&mut self, raw: &[u8]) -> io::Result<()> {
        self.summary.events += 1;
        let ev = match Event::decode(raw) {
            Ok(ev) => ev,
            Err(_) => {
                self.summary.decode_errors += 1;
                return Ok(());
            }
        };
        self.on_event(&ev)
    }

    pub fn on_event(&mut self, ev: &Event) -> io::Result<()> {
        self.first_ns.get_or_insert(ev.start_ns);
        self.last_ns = self.last_ns.max(ev.end_ns);
        let mut result = Ok(());
        let (procs, sink, summary) = (&mut self.procs, &mut self.sink, &mut self.summary);
        self.tracker.handle(ev, &mut |call: Call| {
            if result.is_err() {
                return;
            }
            summary.calls += 1;
            match call.side {
                Side::Client => summary.calls_client += 1,
                Side::Server => summary.calls_server += 1,
            }
            let (info, fresh) = procs.lookup(call.pid, &call.comm);
            if fresh {
                result = sink.process(info);
            }
            if result.is_ok() {
                result = sink.call(&call);
            }
        });
        result
    }

    /// Periodic work: expire idle connections, report new kernel-side losses.
    pub fn on_interval(&mut self, now_ns: u64, kernel: &KernelCounters) -> io::Result<()> {
        self.tracker.expire(now_ns);
        let (ev, by) = self.lost_reported;
        if kernel.lost > ev {
            self.sink.lost(
                now_ns,
                kernel.lost - ev,
                kernel.lost_bytes.saturating_sub(by),
            )?;
            self.lost_reported = (kernel.lost, kernel.lost_bytes);
        }
        self.summary.kernel = kernel.clone();
        Ok(())
    }

    pub fn flush(&mut self) -> io::Result<()> {
        self.sink.flush()
    }

    /// Ends the session: final counts and the summary; returns the sink.
    pub fn finish(mut self, kernel: &KernelCounters, duration_ns: u64) -> io::Result<(S, Summary)> {
        self.on_interval(self.last_ns, kernel)?;
        self.tracker.end_session();
        self.summary.duration_ns = duration_ns;
        self.summary.tracker = self.tracker.stats;
        self.summary.parse = self.tracker.parse;
        self.sink.summary(&self.summary)?;
        Ok((self.sink, self.summary))
    }

    /// First and last kernel timestamps seen (a replay's duration).
    pub fn time_span(&self) -> (u64, u64) {
        (self.first_ns.unwrap_or(0), self.last_ns)
    }
}
