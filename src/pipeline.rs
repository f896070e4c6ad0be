//! The core both sources feed: raw records → decode → filters → connection tracker → parsers →
//! calls → sink (and recorder). Live capture and replay call the same methods, so their output
//! cannot differ.

use std::collections::BTreeMap;
use std::io;

mod fed;
#[doc(hidden)]
#[cfg(any(test, feature = "test-support"))]
pub mod fuzzing;
pub mod selection;
mod shards;

pub use fed::RecordFeed;
use fed::{Barrier, FedShards};
pub(crate) use fed::{BUSY_DRAIN_EVERY, IDLE_DRAIN_EVERY};
use selection::CallSelection;
pub use selection::LiveCallFilter;
use shards::{Outcome, Ready, Shards, Step, TrackerState};

use crate::aggregate::endpoints::KeyRows;
use crate::aggregate::process::DEFAULT_MAX_PROCESSES;
use crate::aggregate::RowRef;
use crate::aggregate::{EndpointTable, OverheadSnapshot, ProcessStats};
use crate::call::{Call, Side};
use crate::chains::{Chains, Disposition};
use crate::conntrack::{ConnTracker, TrackerConfig, Verdict};
use crate::event::{Direction, Event, EventHead, EventKind};
use crate::filters::Filters;
use crate::kernel_counters::KernelCounters;
use crate::process_events::{ProcEvent, ProcEventKind, ProcessExit};
use crate::procinfo::{ProcInfo, ProcessTable};
use crate::record::writer::Recorder;
use crate::record::IntervalRecord;
use crate::report::IntervalReport;
use crate::session_meta::SessionMeta;
use crate::sink::Sink;
use crate::summary::Summary;

/// Connections whose calls' protocol the pipeline remembers for the flows.
const MAX_L7_SEEN: usize = 65536;

pub struct Pipeline<S: Sink> {
    /// Where connections are tracked: on this thread until `start` moves it to the worker
    /// threads asked for (`threads`, `feeds`).
    tracking: Tracking,
    /// The sources of the fed workers `start` will make (`with_feeds`).
    feeds: Vec<Box<dyn RecordFeed>>,
    /// Process exits held until the fed workers applied every record read before them (the
    /// next barrier), so the process's last calls still find it.
    held_exits: Vec<HeldExit>,
    /// Tracking threads asked for.
    threads: usize,
    /// Records dealt to workers since their results were last looked for.
    dealt_since_apply: u32,
    /// Calls of the record being handled (serial tracking), reused.
    call_scratch: Vec<Call>,
    /// Everything after the tracker stage, which applies what tracking made of each record.
    down: Downstream<S>,
}

/// Where the pipeline tracks connections (the tracker stage), one of three ways.
///
/// The two worker pools keep their own workers and messages (`shards.rs`'s `Worker`,
/// `ToWorker`, `FromWorker` and `fed.rs`'s), sharing what a worker does with a batch
/// (`BatchWork`, `Processed`, `TrackerState`): one pool deals records from this thread over a
/// bounded channel per worker and takes results back per worker in delivery order (a step
/// log), the other's workers read their own sources, wait on those and a doorbell, not on a
/// channel, and send results into one channel that this thread merges by kernel time with
/// each worker's progress. One `ToWorker` would give each pool messages its workers never
/// receive (records to a fed worker, `Drain` to a dealt one) and one result channel would cost
/// the dealt pool its per-worker order (or the fed pool its single wait): the split this enum
/// removed, moved into the workers.
enum Tracking {
    /// One tracker on the pipeline's thread (`--threads 1`), fed by `on_record`.
    Inline(ConnTracker),
    /// Worker threads that records are dealt to by connection (replay, `--threads` > 1).
    Dealt(Shards),
    /// Worker threads that each read their own source (live, `--threads` > 1: a ring each);
    /// `on_record` has nothing to deliver.
    Fed(FedShards),
}

/// Everything after the tracker stage: aggregates, process identity, recorder, sink and the
/// session's counts; what tracking made of a record is applied to it (by the pipeline's own
/// thread, whichever thread tracked the record).
struct Downstream<S: Sink> {
    procs: ProcessTable,
    sink: S,
    /// Applied to every record (live: the kernel applied them already; replay: here).
    filters: Filters,
    /// Which calls reach the sink's call outputs (`--filter`, the terminal UI's filter).
    selection: CallSelection,
    recorder: Option<Recorder>,
    endpoints: EndpointTable,
    /// Each connection's calls, for a sink that lists them (`Sink::wants_windows`).
    conns: Option<crate::aggregate::conns::ConnTable>,
    /// Per tracking thread, the rows of the endpoint key numbers it gave (`EndpointKeys`).
    key_rows: Vec<KeyRows>,
    proc_stats: ProcessStats,
    /// Kernel time the current interval started, and calls since.
    interval_start_ns: Option<u64>,
    calls_in_interval: u64,
    /// Connection sampling: whether any interval was sampled, and the session's calls
    /// estimated (each sampled interval's estimate, the others' calls).
    sampled: bool,
    calls_estimated: u64,
    summary: Summary,
    first_ns: Option<u64>,
    last_ns: u64,
    /// Kernel losses up to the last `lost` line.
    lost_reported: crate::sink::Loss,
    /// The flow table's report for the interval being closed (see `set_flows`): its parts so
    /// far.
    pending_flows: Option<crate::flows::FlowReport>,
    /// An interval was handed to the sink with the first part of its flow report: the
    /// report's time, until its last part has followed.
    flows_following: Option<u64>,
    /// The flow table's stats of the last report handed on whole (they close a report whose
    /// last part never came).
    last_flow_stats: Option<crate::flows::FlowStats>,
    /// The L7 protocol of the calls seen per connection, for the flows (bounded: cleared
    /// when it holds `MAX_L7_SEEN` pairs; flows seen again get their name back).
    l7_seen: crate::flows::L7Seen,
    /// Live with `--profile`: each interval's profile as the profile's thread reads it.
    profile_feed: Option<std::sync::mpsc::Receiver<crate::profile::Profile>>,
    /// The profile of the interval being closed (the parts so far), and the session's.
    pending_profile: Option<crate::profile::Profile>,
    profile_total: Option<crate::profile::Profile>,
    /// Live with `--profile`: the triggers (`--profile-when`, the UI's key) and the gate.
    triggers: Option<crate::profile::trigger::TriggerCtl>,
    /// Replay: the trigger events recorded at the end of the interval being closed (kind 9).
    replayed_triggers: Vec<crate::profile::trigger::TriggerEvent>,
    /// Replay: the header's profile line, from the trigger events replayed.
    replayed_status: crate::profile::trigger::ReplayedStatus,
    /// With off-CPU profiles: the blocks placed inside the server calls their threads
    /// served (src/profile/serving.rs), fed every selected record, every call and each
    /// reading's blocks.
    serving: Option<crate::profile::serving::ServingLinker>,
    /// The tracker's counters at the last interval end (what `totals` shows).
    tracker_state: TrackerState,
    /// Set when writing the recording failed, so the session ends (the loop's stop flag).
    stop_on_recording_failure: Option<std::sync::Arc<std::sync::atomic::AtomicBool>>,
    /// The caps' counters as last warned about (`warn_caps`).
    caps_warned: CapsWarned,
    /// The connection table's cap (`TrackerConfig::max_conns`; per tracking thread).
    max_conns: usize,
    /// Call chains (src/chains.rs): ids, parents, trace ids, and the server calls held for
    /// the client call that reached them (with their endpoint rows). None with
    /// `EBTOP_CHAINS=0` (for measuring their cost).
    chains: Option<Chains<RowRef>>,
    /// Held calls released, to go to the sink (reused).
    released: Vec<(Call, RowRef)>,
    /// A tracking thread's call line with the chain fields added (reused).
    spliced: Vec<u8>,
}

/// What each cap had left out when it was last warned about: a `warning` goes out in an
/// interval in which one of these grew.
#[derive(Debug, Default, Clone, Copy)]
struct CapsWarned {
    flows_table_full: u64,
    conns_evicted: u64,
    endpoints_folded: u64,
    process_table_resets: u64,
    pending_dropped: u64,
}

/// A record's calls as `apply` gets them: owned where the pipeline thread tracked them itself
/// (handed on to the sink, which may keep them without a copy), borrowed from a tracking
/// thread's batch otherwise.
enum Calls<'a> {
    Owned(&'a mut Vec<Call>),
    Shared(&'a [Call]),
}

/// A process exit record held back (see `Pipeline::held_exits`), with what is asked of it.
struct HeldExit {
    ts_ns: u64,
    pid: u32,
    raw: Vec<u8>,
}

/// A flush waits for the tracking threads' results if at most this many are pending.
const FLUSH_WAITS_UP_TO: usize = 1024;

/// How much of the workers' results [`Pipeline::apply_steps`] applies.
#[derive(Clone, Copy)]
enum Apply {
    /// Those already in, without waiting.
    Ready,
    /// Partial batches are sent, then those already in are applied, without waiting.
    Partial,
    /// All (partial batches are sent first).
    All,
    /// Until the backlog is at most half its bound, waiting as needed.
    DownToHalf,
}

/// Applies the held exits (`held`, see `Pipeline::held_exits`) that ended before `up_to` (all:
/// `u64::MAX`), in time order.
fn apply_held_exits<S: Sink>(
    held: &mut Vec<HeldExit>,
    down: &mut Downstream<S>,
    up_to: u64,
) -> io::Result<()> {
    if held.is_empty() {
        return Ok(());
    }
    let (mut due, keep): (Vec<_>, Vec<_>) = std::mem::take(held)
        .into_iter()
        .partition(|exit| exit.ts_ns < up_to);
    *held = keep;
    due.sort_by_key(|exit| exit.ts_ns);
    for exit in due {
        down.apply_proc_record(&exit.raw)?;
    }
    Ok(())
}

/// Whether call chains are made: yes unless `EBTOP_CHAINS=0` (a switch for measuring what
/// they cost, docs/performance.md).
pub fn chains_enabled() -> bool {
    std::env::var_os("EBTOP_CHAINS").is_none_or(|v| v != "0")
}

/// Names `flows` by the protocol of the calls seen on them (`l7_seen`), as they are recorded
/// and handed to the sink; ended connections are forgotten.
fn name_flows(l7_seen: &mut crate::flows::L7Seen, flows: &mut crate::flows::FlowReport) {
    flows.tag_l7(l7_seen);
    forget_ended(l7_seen, flows);
}

/// Forgets the calls seen on the connections `flows` reports ended.
fn forget_ended(l7_seen: &mut crate::flows::L7Seen, flows: &crate::flows::FlowReport) {
    for f in &flows.ends {
        l7_seen.remove(&(f.local, f.peer));
    }
}

/// Whether a record passes the user-space filters (live: the kernel applied them already).
fn passes(f: &Filters, ev: &Event) -> bool {
    // A Go net/http client probe's record has no socket: its process decides (the calls it
    // links are filtered by their own ports).
    (ev.kind == EventKind::GoHttp || f.selects_ports(ev.lport, ev.rport))
        && f.selects_process(ev.pid, &ev.comm)
}

impl<S: Sink> Pipeline<S> {
    pub fn new(cfg: TrackerConfig, procs: ProcessTable, sink: S) -> Self {
        let read_proc = procs.reads_proc();
        let mut selection = CallSelection::default();
        if let Some(live) = sink.live_call_filter() {
            selection.set_live(live);
        }
        let down = Downstream {
            endpoints: Downstream::<S>::endpoint_table(&sink, false),
            conns: sink.wants_windows().then(Default::default),
            key_rows: Vec::new(),
            proc_stats: ProcessStats::new(DEFAULT_MAX_PROCESSES, read_proc),
            interval_start_ns: None,
            calls_in_interval: 0,
            sampled: false,
            calls_estimated: 0,
            procs,
            sink,
            filters: Filters::default(),
            selection,
            recorder: None,
            summary: Summary::default(),
            first_ns: None,
            last_ns: 0,
            lost_reported: crate::sink::Loss::default(),
            pending_flows: None,
            flows_following: None,
            last_flow_stats: None,
            l7_seen: Default::default(),
            profile_feed: None,
            pending_profile: None,
            profile_total: None,
            triggers: None,
            replayed_triggers: Vec::new(),
            replayed_status: Default::default(),
            serving: None,
            tracker_state: TrackerState::default(),
            stop_on_recording_failure: None,
            caps_warned: CapsWarned::default(),
            max_conns: cfg.max_conns,
            chains: chains_enabled().then(Chains::new),
            released: Vec::new(),
            spliced: Vec::new(),
        };
        Pipeline {
            tracking: Tracking::Inline(ConnTracker::new(cfg)),
            feeds: Vec::new(),
            held_exits: Vec::new(),
            threads: 1,
            dealt_since_apply: 0,
            call_scratch: Vec::new(),
            down,
        }
    }

    /// Tracks connections on `threads` worker threads (1: on the caller's thread), started by
    /// [`Pipeline::start`] with the configuration and filters in force then.
    pub fn with_threads(mut self, threads: usize) -> Self {
        self.threads = threads.max(1);
        self
    }

    /// Tracking threads asked for (`with_threads`).
    pub fn threads(&self) -> usize {
        self.threads
    }

    /// Tracks connections on one worker thread per feed, each reading its own feed (live:
    /// a kernel ring per worker). Started by [`Pipeline::start`]; `on_record` is then unused.
    pub fn with_feeds(mut self, feeds: Vec<Box<dyn RecordFeed>>) -> Self {
        self.threads = feeds.len().max(1);
        self.feeds = feeds;
        self
    }

    /// Readable while the fed workers' results may wait (for the source's epoll set).
    pub fn results_fd(&self) -> Option<std::os::fd::BorrowedFd<'_>> {
        match &self.tracking {
            Tracking::Fed(fed) => Some(fed.ready_fd()),
            _ => None,
        }
    }

    /// Endpoints keyed on raw resources (`--raw-resources`).
    pub fn with_raw_resources(mut self, raw: bool) -> Self {
        if raw {
            self.down.endpoints = Downstream::<S>::endpoint_table(&self.down.sink, true);
        }
        self
    }

    /// Filters applied to every record. The protocol selection is the tracker's: it is
    /// set here over what `TrackerConfig` said (before `start`, which hands it to the
    /// tracking threads).
    pub fn with_filters(mut self, filters: Filters) -> Self {
        if let Tracking::Inline(tracker) = &mut self.tracking {
            tracker.select_protocols(filters.protocols());
        }
        self.down.filters = filters;
        self
    }

    /// Only calls `filter` matches reach the sink's call outputs (`--filter`); every call
    /// still counts in the aggregates.
    pub fn with_call_filter(mut self, filter: crate::call_filter::CallFilter) -> Self {
        self.down.selection.set_fixed(filter);
        self
    }

    /// Only calls the filter `live` holds at the time match reach the sink's call outputs
    /// (the terminal UI's Calls filter, changed while the pipeline runs).
    pub fn with_live_call_filter(mut self, live: std::sync::Arc<LiveCallFilter>) -> Self {
        self.down.selection.set_live(live);
        self
    }

    /// Whether a recording is written (`-w`): its header holds the session's `meta` already.
    pub fn is_recording(&self) -> bool {
        self.down.recorder.is_some()
    }

    /// Records every record that passes the filters (and process descriptions) to `rec`.
    pub fn with_recorder(mut self, rec: Recorder) -> Self {
        self.down.recorder = Some(rec);
        self
    }

    /// Sets `stop` when writing the recording fails (a full disk): the session then ends,
    /// as on SIGTERM, with its summary.
    pub fn stop_on_recording_failure(
        mut self,
        stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    ) -> Self {
        self.down.stop_on_recording_failure = Some(stop);
        self
    }

    /// Live with TLS probes: the files probed for the processes running at the start (once).
    pub fn on_tls_started(&mut self, start: &crate::sink::TlsStart) -> io::Result<()> {
        self.down
            .sink
            .tls_started(crate::clock::monotonic_ns(), start)
    }

    /// Live with `--profile`: where the profile's thread sends each interval's profile; read
    /// at every interval's end (and at the session's end, after the thread's last reading).
    pub fn with_profile_feed(
        mut self,
        feed: std::sync::mpsc::Receiver<crate::profile::Profile>,
    ) -> Self {
        self.down.profile_feed = Some(feed);
        self
    }

    /// With an off-CPU profile (live, or a recording made with one): off-CPU blocks linked
    /// to the server calls their threads served; `retain_ns` as
    /// [`crate::profile::serving::ServingLinker::new`] takes it.
    /// `EBTOP_SERVING_LINKS=0` leaves them out (for measuring their cost).
    pub fn with_serving_links(mut self, retain_ns: u64) -> Self {
        if std::env::var_os("EBTOP_SERVING_LINKS").is_none_or(|v| v != "0") {
            self.down.serving = Some(crate::profile::serving::ServingLinker::new(retain_ns));
        }
        self
    }

    /// Live with `--profile`: the triggers, run at every interval's end.
    pub fn with_triggers(mut self, t: crate::profile::trigger::TriggerCtl) -> Self {
        self.down.triggers = Some(t);
        self
    }

    /// A profile (an interval's reading, or a recorded part of one) for the interval being
    /// closed: recorded as it comes (after the filters), added to the interval's and the
    /// session's. Shown with the interval (`IntervalReport::profile`); the session's totals are
    /// written at the end, before the summary.
    pub fn set_profile(&mut self, mut p: crate::profile::Profile) -> io::Result<()> {
        let f = &self.down.filters;
        if f.pid.is_some() || f.comm.is_some() {
            p.retain_processes(|pid, comm| {
                let mut c = [0u8; 16];
                let n = comm.len().min(15);
                c[..n].copy_from_slice(&comm.as_bytes()[..n]);
                f.selects_process(pid, &c)
            });
        }
        if let Some(rec) = &mut self.down.recorder {
            rec.profile(&p);
        }
        // The blocks go to the linking only (never summed: a session would hold them all).
        let blocks = std::mem::take(&mut p.blocks);
        if let Some(l) = &mut self.down.serving {
            l.set_min_block(p.off_cpu_min_ns);
            l.add_blocks(blocks);
        }
        self.down
            .profile_total
            .get_or_insert_with(Default::default)
            .merge(&p);
        match &mut self.down.pending_profile {
            Some(earlier) => earlier.merge(&p),
            None => self.down.pending_profile = Some(p),
        }
        Ok(())
    }

    /// Replay: the interval `on_interval` closes next, with the trigger events recorded at
    /// its end (kind 9 records follow their interval's record: the replay holds the interval
    /// until they are read), written where the live run wrote them, before its lines.
    pub fn on_replayed_interval(
        &mut self,
        iv: &crate::record::IntervalRecord,
        triggers: Vec<crate::profile::trigger::TriggerEvent>,
    ) -> io::Result<()> {
        self.down.replayed_triggers = triggers;
        self.on_interval(iv.mono_ns, &iv.kernel, None)
    }

    /// Replay: a trigger event with no interval before it (a recording cut or damaged there).
    pub fn replayed_trigger(
        &mut self,
        mono_ns: u64,
        e: &crate::profile::trigger::TriggerEvent,
    ) -> io::Result<()> {
        self.down.replayed_status.on_event(mono_ns, e);
        self.down.profile_trigger(mono_ns, e)
    }

    fn drain_profile_feed(&mut self) -> io::Result<()> {
        let parts: Vec<_> = match &self.down.profile_feed {
            Some(feed) => feed.try_iter().collect(),
            None => return Ok(()),
        };
        parts.into_iter().try_for_each(|p| self.set_profile(p))
    }

    /// A cap the driver watches (the TLS lookout's file caps) was hit.
    pub fn on_warning(&mut self, w: &crate::sink::Warning) -> io::Result<()> {
        self.down.sink.warning(crate::clock::monotonic_ns(), w)
    }

    pub fn start(&mut self, meta: &SessionMeta) -> io::Result<()> {
        // Intervals count from the session's start in kernel time (recorded, so a replay's
        // intervals are the live run's).
        self.down.interval_start_ns = Some(meta.start_mono_ns());
        self.down.sink.meta(meta)?;
        let Tracking::Inline(tracker) = &self.tracking else {
            return Ok(()); // the tracking threads run already
        };
        let cfg = *tracker.config();
        if !self.feeds.is_empty() {
            let feeds = std::mem::take(&mut self.feeds);
            let fed = FedShards::start(
                feeds,
                &cfg,
                &self.down.filters,
                self.down.endpoints.keeps_raw(),
            )?;
            if let Some(f) = self.down.sink.call_formatter() {
                fed.set_formatter(&f)?;
            }
            self.tracking = Tracking::Fed(fed);
        } else if self.threads > 1 {
            let mut sh = Shards::start(
                self.threads,
                &cfg,
                &self.down.filters,
                self.down.endpoints.keeps_raw(),
            )?;
            // The sink knows its clock now: the workers can write the call lines.
            if let Some(f) = self.down.sink.call_formatter() {
                sh.set_formatter(&f)?;
            }
            self.tracking = Tracking::Dealt(sh);
        }
        Ok(())
    }

    /// A process description known in advance (a recording's process table or records).
    pub fn know_process(&mut self, info: ProcInfo) -> io::Result<()> {
        match &mut self.tracking {
            Tracking::Dealt(sh) => {
                sh.push_step(Step::Know(Box::new(info)));
                self.after_step()
            }
            Tracking::Inline(_) | Tracking::Fed(_) => {
                self.down.procs.insert(info);
                Ok(())
            }
        }
    }

    /// Process exits will come as exit records (live: the process probe is loaded).
    pub fn use_exit_records(&mut self) {
        self.down.proc_stats.use_exit_records();
    }

    /// One process exec/exit record as the kernel delivered it (live: read before the socket
    /// records of the same pass, so an exec usually precedes the new program's calls).
    pub fn on_proc_record(&mut self, raw: &[u8]) -> io::Result<()> {
        match &mut self.tracking {
            Tracking::Fed(_) => match ProcEvent::decode(raw) {
                Ok(ev) if ev.kind == ProcEventKind::Exit => {
                    self.held_exits.push(HeldExit {
                        ts_ns: ev.ts_ns,
                        pid: ev.pid,
                        raw: raw.to_vec(),
                    });
                    Ok(())
                }
                Ok(ev) => {
                    // A pid used again: the old process's exit first.
                    if self.held_exits.iter().any(|held| held.pid == ev.pid) {
                        self.apply_held_exits(u64::MAX)?;
                    }
                    self.down.apply_proc_record(raw)
                }
                Err(_) => self.down.apply_proc_record(raw),
            },
            // In order with the socket records delivered before it.
            Tracking::Dealt(sh) => {
                sh.push_step(Step::Proc(raw.to_vec()));
                self.after_step()
            }
            Tracking::Inline(_) => self.down.apply_proc_record(raw),
        }
    }

    /// Applies the held exits that ended before `up_to` (all: `u64::MAX`), in time order.
    fn apply_held_exits(&mut self, up_to: u64) -> io::Result<()> {
        apply_held_exits(&mut self.held_exits, &mut self.down, up_to)
    }

    /// Applies what the fed workers sent, merged in time (see `fed.rs`); with `barrier`,
    /// first asks each of them for it and applies everything until all answered (then the
    /// held exits), returning their merged state.
    fn apply_fed(&mut self, barrier: Option<Barrier>) -> io::Result<TrackerState> {
        let Tracking::Fed(fed) = &mut self.tracking else {
            return Ok(TrackerState::default());
        };
        let result = self.down.apply_fed(fed, barrier);
        let up_to = if barrier.is_some() {
            u64::MAX
        } else {
            fed.applied_up_to()
        };
        let applied = result
            .is_ok()
            .then(|| apply_held_exits(&mut self.held_exits, &mut self.down, up_to));
        // Exits still held wait for workers at rest to say how far they read.
        if let Some(last) = self.held_exits.iter().map(|held| held.ts_ns).max() {
            fed.want_progress(last);
        }
        applied.transpose()?;
        result
    }

    /// The session stops (live): the fed workers read what their sources hold now (bounded)
    /// and everything is applied.
    pub fn drain_sources(&mut self) -> io::Result<()> {
        self.apply_fed(Some(Barrier::Drain)).map(drop)
    }

    /// One record as the kernel delivered it. Undecodable records are counted and skipped.
    pub fn on_record(&mut self, raw: &[u8]) -> io::Result<()> {
        let tracker = match &mut self.tracking {
            Tracking::Inline(tracker) => tracker,
            Tracking::Dealt(sh) => {
                sh.dispatch(raw)?;
                return self.after_step();
            }
            // The fed workers read their own sources: nothing else may deliver records.
            Tracking::Fed(_) => {
                return Err(io::Error::other(
                    "a record was delivered to a pipeline whose workers read their own sources",
                ))
            }
        };
        self.down.summary.events += 1;
        let ev = match Event::decode(raw) {
            Ok(ev) => ev,
            Err(_) => {
                self.down.summary.decode_errors += 1;
                return Ok(());
            }
        };
        if !passes(&self.down.filters, &ev) {
            self.down.summary.filtered_events += 1;
            return Ok(());
        }
        let mut calls = std::mem::take(&mut self.call_scratch);
        let verdict = tracker.handle(&ev, &mut calls);
        let result = self.down.apply(
            &EventHead::from(&ev),
            raw,
            verdict,
            Calls::Owned(&mut calls),
            None,
            None,
        );
        calls.clear();
        self.call_scratch = calls;
        result
    }

    /// After a step was delivered to the tracking threads: now and then, apply what is ready;
    /// past the backlog bound, catch up first (the kernel ring absorbs meanwhile), so a
    /// pipeline thread that falls behind its workers holds a bounded backlog.
    fn after_step(&mut self) -> io::Result<()> {
        let Tracking::Dealt(sh) = &self.tracking else {
            return Ok(());
        };
        if sh.over_bound() {
            self.dealt_since_apply = 0;
            return self.apply_steps(Apply::DownToHalf);
        }
        self.dealt_since_apply += 1;
        if self.dealt_since_apply >= 64 {
            self.dealt_since_apply = 0;
            return self.apply_steps(Apply::Ready);
        }
        Ok(())
    }

    /// Applies the workers' results in delivery order (see [`Apply`]).
    fn apply_steps(&mut self, how: Apply) -> io::Result<()> {
        let sh = match &mut self.tracking {
            Tracking::Inline(_) => return Ok(()),
            Tracking::Dealt(sh) => sh,
            // Whatever the fed workers sent so far; barriers wait for the rest.
            Tracking::Fed(_) => return self.apply_fed(None).map(drop),
        };
        let down = &mut self.down;
        // (send partial batches first, wait for results, stop at half the bound)
        let (send, wait, half) = match how {
            Apply::Ready => (false, false, false),
            Apply::Partial => (true, false, false),
            Apply::All => (true, true, false),
            Apply::DownToHalf => (true, true, true),
        };
        if send {
            sh.send_partial()?;
        }
        let mut result = Ok(());
        while result.is_ok() && sh.pending_steps() > 0 && !(half && sh.under_half_bound()) {
            let ready = match sh.next(wait) {
                Ok(Some(r)) => r,
                Ok(None) => break,
                Err(e) => {
                    result = Err(e);
                    break;
                }
            };
            result = match ready {
                Ready::Proc(raw) => down.apply_proc_record(&raw),
                Ready::Know(info) => {
                    down.procs.insert(*info);
                    Ok(())
                }
                Ready::Record {
                    raw,
                    outcome,
                    calls,
                    lines,
                    keyed,
                } => down.apply_outcome(raw, outcome, calls, lines, keyed),
            };
        }
        debug_assert!(!wait || half || result.is_err() || sh.pending_steps() == 0);
        result
    }

    /// The flow table's report, or a part of it (`more`: parts follow), in order. Before the
    /// interval's end (`on_interval`) it is handed to the sink with the interval; a part of
    /// the same report that comes after it goes to the sink at once (`Sink::flow_part`), so a
    /// report of 200,000 flows is never held whole. (`finish` reports one still pending.)
    /// Recorded as it is handed to the sink (after the filters), and named (`l7`) by the
    /// calls of the records recorded before it, so a replay shows the same.
    pub fn set_flows(&mut self, mut flows: crate::flows::FlowReport) -> io::Result<()> {
        // Recorded after every record delivered before it, as the serial pipeline does.
        self.apply_steps(Apply::All)?;
        if !self.down.filters.is_empty() {
            flows.retain_selected(&self.down.filters);
        }
        if let Some(mono_ns) = self.down.flows_following {
            if flows.mono_ns == mono_ns {
                name_flows(&mut self.down.l7_seen, &mut flows);
                if let Some(rec) = &mut self.down.recorder {
                    rec.flows_later(&flows);
                }
                if !flows.more {
                    self.down.flows_following = None;
                    self.down.last_flow_stats = Some(flows.stats.clone());
                }
                return self.down.sink.flow_part(flows);
            }
            // Another interval's report: the last part of the one followed never came (a
            // frame of a recording lost).
            self.down.close_following_flows()?;
        }
        match &mut self.down.pending_flows {
            // A report recorded whole before parts were streamed: its parts come before the
            // interval's record.
            Some(earlier) if earlier.more && earlier.mono_ns == flows.mono_ns => {
                earlier.append_part(flows)
            }
            // Else an earlier report whose interval never came (a lost frame) is replaced
            // (its ended connections forgotten, as if it had been named).
            _ => {
                if let Some(lost) = self.down.pending_flows.replace(flows) {
                    forget_ended(&mut self.down.l7_seen, &lost);
                }
            }
        }
        Ok(())
    }

    /// Periodic work: expire idle connections, report new kernel-side losses, hand the
    /// interval's aggregates to the sink. `overhead`: ebtop's own cost (live only).
    pub fn on_interval(
        &mut self,
        now_ns: u64,
        kernel: &KernelCounters,
        overhead: Option<OverheadSnapshot>,
    ) -> io::Result<()> {
        // Every record delivered before the interval's end is applied (and recorded) first.
        self.apply_steps(Apply::All)?;
        self.drain_profile_feed()?;
        self.down.take_serving(false);
        let state = self.interval_state(now_ns)?;
        self.down.record_pending_flows();
        if let Some(rec) = &mut self.down.recorder {
            rec.interval(&IntervalRecord {
                mono_ns: now_ns,
                kernel: kernel.clone(),
            });
        }
        self.down.check_recording(now_ns)?;
        self.down.release_held(Some(now_ns))?;
        self.down.report_interval(now_ns, kernel, overhead, state)
    }

    /// The trackers at an interval's end (idle connections expired); fed workers apply
    /// what they read before it first.
    fn interval_state(&mut self, now_ns: u64) -> io::Result<TrackerState> {
        match &mut self.tracking {
            Tracking::Inline(tracker) => {
                tracker.expire(now_ns);
                Ok(TrackerState::of(tracker))
            }
            Tracking::Dealt(sh) => sh.interval(now_ns),
            Tracking::Fed(_) => self.apply_fed(Some(Barrier::Interval(now_ns))),
        }
    }

    /// End of a batch of records: output becomes visible, the recorder may cut a frame.
    /// With tracking threads, a short backlog is waited for (a quiet moment: the output is
    /// complete at once); a long one (a busy source) is applied as far as its results are in,
    /// and the rest at the next flush, so the workers and this thread keep overlapping.
    pub fn flush(&mut self) -> io::Result<()> {
        let backlog = match &self.tracking {
            Tracking::Dealt(sh) => sh.pending_steps(),
            Tracking::Inline(_) | Tracking::Fed(_) => 0,
        };
        self.apply_steps(if backlog <= FLUSH_WAITS_UP_TO {
            Apply::All
        } else {
            Apply::Partial
        })?;
        if let Some(rec) = &mut self.down.recorder {
            rec.tick();
        }
        let now = self.down.last_ns;
        self.down.check_recording(now)?;
        self.down.sink.flush()
    }

    pub fn summary(&self) -> &Summary {
        &self.down.summary
    }

    /// Ends the session: final counts, the recording's end, the summary; returns the sink.
    pub fn finish(
        mut self,
        kernel: &KernelCounters,
        duration_ns: u64,
    ) -> anyhow::Result<(S, Summary)> {
        // The last, partial interval: reported (so interval lines add up to the summary) up to
        // the last event, which a replay knows as well as the live run did. Losses since the
        // last report are reported either way.
        self.apply_steps(Apply::All)?;
        self.drain_profile_feed()?;
        self.down.take_serving(true);
        // Server calls still held for their client call go out now.
        self.down.release_held(None)?;
        if self.down.calls_in_interval > 0
            || Downstream::<S>::loss_of(kernel) != self.down.lost_reported
            || self.down.pending_flows.is_some()
            || self.down.pending_profile.is_some()
        {
            let end = self
                .down
                .last_ns
                .max(self.down.interval_start_ns.unwrap_or(0));
            let state = self.interval_state(end)?;
            self.down.record_pending_flows();
            self.down.report_interval(end, kernel, None, state)?;
        }
        // A report whose last part never came (a recording cut short, or its first part is
        // the last interval's): closed with what is known of the table.
        self.down.close_following_flows()?;
        // The session's profile, before the summary.
        if let Some(total) = self.down.profile_total.take() {
            let end = self.down.last_ns.max(total.mono_ns);
            for line in total.lines() {
                self.down.sink.profile(end, &line)?;
            }
        }
        self.down.summary.kernel = kernel.clone();
        let last_ns = self.down.last_ns;
        self.down.warn_plugins(last_ns)?;
        self.down.summary.plugins = crate::plugins::overheads();
        let state = match &mut self.tracking {
            Tracking::Inline(tracker) => {
                tracker.end_session();
                TrackerState::of(tracker)
            }
            Tracking::Dealt(sh) => sh.finish()?,
            Tracking::Fed(_) => {
                let state = self.apply_fed(Some(Barrier::Finish))?;
                if let Tracking::Fed(fed) = &mut self.tracking {
                    fed.stop(); // joins the workers
                }
                state
            }
        };
        self.down.summary.endpoints = self.down.endpoints.cumulative();
        if self.down.sampled {
            // Since-start rows made partly of sampled intervals: marked as such.
            for e in &mut self.down.summary.endpoints {
                e.sampled = true;
            }
            let calls = self.down.summary.calls;
            let estimated = self.down.calls_estimated;
            if let Some(t) = self.down.summary.sampling.as_mut() {
                t.calls_seen = calls;
                t.calls_estimated = estimated.max(calls);
            }
        }
        self.down.summary.endpoint_table = self.down.endpoints.stats();
        self.down.summary.duration_ns = duration_ns;
        self.down.summary.tracker = state.stats;
        self.down.summary.parse = state.parse;
        self.down.summary.process_table_resets = self.down.procs.resets;
        if let Some(rec) = self.down.recorder.take() {
            let stats = rec.finish(&crate::record::EndRecord {
                duration_ns,
                kernel: kernel.clone(),
                dropped_events: 0,
            })?;
            self.down.summary.recording_dropped_events = Some(stats.dropped_events);
            if let Some(failure) = stats.failure {
                // A failure at the very end (the last frame, the final sync) is told now.
                if self.down.summary.recording_error.is_none() {
                    let now = self.down.last_ns;
                    self.down.tell_recording_failure(now, &failure)?;
                }
            }
        }
        self.down.sink.summary(&self.down.summary)?;
        Ok((self.down.sink, self.down.summary))
    }

    /// The sink, for a replay that starts over (with a new pipeline: the old one's state goes).
    pub fn into_sink(self) -> S {
        self.down.sink
    }

    pub fn sink(&self) -> &S {
        &self.down.sink
    }

    /// First and last kernel timestamps of the records delivered so far (all of them
    /// applied first, with tracking threads).
    pub fn time_span(&mut self) -> io::Result<(u64, u64)> {
        self.apply_steps(Apply::All)?;
        Ok((self.down.first_ns.unwrap_or(0), self.down.last_ns))
    }

    /// Counts what reading a recording met (corrupt frames, truncation) into the summary.
    pub fn set_replay_stats(&mut self, stats: crate::record::ReadStats) {
        self.down.summary.replay = Some(stats);
    }
}

impl<S: Sink> Downstream<S> {
    /// Applies what the fed workers sent, merged in time; with `barrier`, first asks each of
    /// them for it and applies everything until all answered, returning their merged state.
    fn apply_fed(
        &mut self,
        fed: &mut FedShards,
        barrier: Option<Barrier>,
    ) -> io::Result<TrackerState> {
        let mut waiting = match barrier {
            Some(b) => fed.ask_all(b)?,
            None => 0,
        };
        let mut state = TrackerState::default();
        loop {
            // What has come, without waiting (bounded: workers that send as fast as this
            // thread applies must not keep it from the loop's ticks and signals; what is left
            // rings the doorbell again, so the loop comes back for it).
            fed.clear_ready();
            let mut taken_all = false;
            for _ in 0..fed.queue_bound() {
                if barrier.is_some() && waiting == 0 {
                    break; // after the session's end the workers are gone
                }
                let Some((k, msg)) = fed.next(false)? else {
                    taken_all = true;
                    break;
                };
                if let Some(s) = fed.take_in(k, msg) {
                    state.add(s);
                    waiting -= 1;
                }
            }
            if !taken_all {
                fed.ring_ready();
            }
            // A barrier answered by all: everything they read before it is in.
            let all = barrier.is_some() && waiting == 0;
            while let Some(r) = fed.next_record(all) {
                self.apply_outcome(r.raw, r.outcome, r.calls, r.lines, r.keyed)?;
            }
            if waiting == 0 {
                return Ok(state);
            }
            if let Some((k, msg)) = fed.next(true)? {
                if let Some(s) = fed.take_in(k, msg) {
                    state.add(s);
                    waiting -= 1;
                }
            }
        }
    }

    /// The endpoint table: keeping its rows' last minute for the rolling windows only when
    /// the sink shows them (`Sink::wants_windows`).
    fn endpoint_table(sink: &S, raw: bool) -> EndpointTable {
        let mut table = EndpointTable::new(crate::aggregate::endpoints::DEFAULT_MAX_ENDPOINTS, raw);
        if sink.wants_endpoints_by_process() {
            table = table.with_rows_by_process();
        }
        if sink.wants_windows() {
            table.with_history(crate::aggregate::endpoints::WINDOW_1M_NS)
        } else {
            table
        }
    }

    fn apply_proc_record(&mut self, raw: &[u8]) -> io::Result<()> {
        self.summary.events += 1;
        let ev = match ProcEvent::decode(raw) {
            Ok(ev) => ev,
            Err(_) => {
                self.summary.decode_errors += 1;
                return Ok(());
            }
        };
        if !self.filters.selects_process(ev.pid, &ev.comm) {
            self.summary.filtered_events += 1;
            return Ok(());
        }
        if let Some(rec) = self
            .recorder
            .as_mut()
            .filter(|_| ev.kind != ProcEventKind::Loaded)
        {
            rec.proc_event(raw);
        }
        match ev.kind {
            ProcEventKind::Exec => {
                self.summary.process_execs += 1;
                self.procs.exec(ev.proc_info());
                Ok(())
            }
            ProcEventKind::Exit => {
                self.summary.process_exits += 1;
                self.proc_stats.exited(ev.pid);
                match self.procs.exit(ev.pid) {
                    Some(info) => self.sink.process_exit(&ProcessExit {
                        mono_ns: ev.ts_ns,
                        info,
                        ppid: ev.ppid,
                        status: ev.exit_status(),
                    }),
                    None => Ok(()),
                }
            }
            // Live only (a dlopen, for the TLS probes): nothing a recording or view keeps.
            ProcEventKind::Loaded => Ok(()),
        }
    }

    /// Everything after a worker's tracking for one record (`keyed`: its calls' endpoint key
    /// numbers).
    fn apply_outcome(
        &mut self,
        raw: &[u8],
        outcome: Outcome,
        calls: &[Call],
        lines: &mut shards::Lines,
        keyed: shards::Keyed,
    ) -> io::Result<()> {
        self.summary.events += 1;
        match outcome {
            Outcome::DecodeError => {
                self.summary.decode_errors += 1;
                Ok(())
            }
            Outcome::Filtered => {
                self.summary.filtered_events += 1;
                Ok(())
            }
            // The worker decoded these very bytes and passed on what applying needs.
            Outcome::Tracked { verdict, head, .. } => self.apply(
                &head,
                raw,
                verdict,
                Calls::Shared(calls),
                Some(lines),
                Some(keyed),
            ),
        }
    }

    /// Everything after tracking for one record: its calls (aggregates, process identity,
    /// sink), the recorder (after the tracker's verdict, so a `--proto` copy holds only the
    /// selected protocols' connections; `raw` is the record as delivered) and the counts.
    /// `keyed`: the tracking thread's numbers of the calls' endpoint keys.
    fn apply(
        &mut self,
        ev: &EventHead,
        raw: &[u8],
        verdict: Verdict,
        calls: Calls<'_>,
        mut lines: Option<&mut shards::Lines>,
        mut keyed: Option<shards::Keyed>,
    ) -> io::Result<()> {
        let mut result = Ok(());
        let mut n = 0u64;
        if let Some(chains) = self
            .chains
            .as_mut()
            .filter(|_| verdict == Verdict::Selected)
        {
            // The record first: a request it starts or a response it begins is in force for
            // the calls it completes.
            if let Ok(e) = Event::decode(raw) {
                chains.on_record(&e);
            }
            if chains.holding() {
                chains.expire(ev.end_ns, &mut self.released);
                result = self.emit_released();
            }
        }
        if let Some(l) = self
            .serving
            .as_mut()
            .filter(|_| verdict == Verdict::Selected)
        {
            if let Ok(e) = Event::decode(raw) {
                l.on_record(&e);
            }
        }
        match calls {
            Calls::Shared(calls) => {
                for (i, call) in calls.iter().enumerate() {
                    n += 1;
                    // Taken whatever happens below, so the next call gets its own line.
                    let line = lines.as_mut().and_then(|l| l.next_line());
                    // Named by its thread: a copy named by its process (the line formatted
                    // by the tracking thread has the thread's name, so it is not used).
                    let renamed = self.process_name(call).map(|name| {
                        let mut c = call.clone();
                        c.thread = Some(std::mem::replace(&mut c.comm, name));
                        c
                    });
                    let is_renamed = renamed.is_some();
                    // Linked here, on a copy: the tracking thread's call is shared.
                    let mut linked = renamed;
                    let mut hold = false;
                    if self.chains.is_some() {
                        let mut c = linked.take().unwrap_or_else(|| call.clone());
                        hold = self.link(&mut c) == Disposition::Hold;
                        linked = Some(c);
                    }
                    let call = linked.as_ref().unwrap_or(call);
                    if let Some(l) = self.serving.as_mut() {
                        l.on_call(call);
                    }
                    let Some(row) = self.account_call(call, is_renamed, i, &mut keyed, &mut result)
                    else {
                        continue;
                    };
                    if hold {
                        self.hold(linked.take().expect("linked above"), row, ev.end_ns);
                        continue;
                    }
                    if result.is_ok() {
                        result = self.emit_released();
                    }
                    if result.is_err() || !self.selected(call) {
                        continue;
                    }
                    result = match line {
                        Some(line) if !is_renamed && linked.is_some() => {
                            let mut spliced = std::mem::take(&mut self.spliced);
                            crate::sink::call_line::with_chain_fields(&mut spliced, line, call);
                            let r = self.sink.call_formatted(call, &spliced);
                            self.spliced = spliced;
                            r
                        }
                        Some(line) if !is_renamed => self.sink.call_formatted(call, line),
                        _ => self.sink.call_in(call, row),
                    };
                }
            }
            Calls::Owned(calls) if self.sink.keeps_calls() => {
                for (i, mut call) in calls.drain(..).enumerate() {
                    n += 1;
                    let renamed = self.rename(&mut call);
                    let hold = self.link(&mut call) == Disposition::Hold;
                    if let Some(l) = self.serving.as_mut() {
                        l.on_call(&call);
                    }
                    let Some(row) = self.account_call(&call, renamed, i, &mut keyed, &mut result)
                    else {
                        continue;
                    };
                    if hold {
                        self.hold(call, row, ev.end_ns);
                        continue;
                    }
                    if result.is_ok() {
                        result = self.emit_released();
                    }
                    if result.is_ok() && self.selected(&call) {
                        result = self.sink.call_owned_in(call, row);
                    }
                }
            }
            Calls::Owned(calls) => {
                for (i, call) in calls.iter_mut().enumerate() {
                    n += 1;
                    let renamed = self.rename(call);
                    let hold = self.link(call) == Disposition::Hold;
                    if let Some(l) = self.serving.as_mut() {
                        l.on_call(call);
                    }
                    let Some(row) = self.account_call(call, renamed, i, &mut keyed, &mut result)
                    else {
                        continue;
                    };
                    if hold {
                        self.hold(call.clone(), row, ev.end_ns);
                        continue;
                    }
                    if result.is_ok() {
                        result = self.emit_released();
                    }
                    if result.is_ok() && self.selected(call) {
                        result = self.sink.call(call);
                    }
                }
                calls.clear();
            }
        }
        self.calls_in_interval += n;
        if verdict == Verdict::NotSelected {
            self.summary.filtered_events += 1;
            return result;
        }
        if let Some(rec) = &mut self.recorder {
            rec.event(raw);
        }
        self.first_ns.get_or_insert(ev.start_ns);
        self.interval_start_ns.get_or_insert(ev.start_ns);
        self.last_ns = self.last_ns.max(ev.end_ns);
        if ev.kind == EventKind::Data {
            let out = ev.dir == Direction::Egress;
            // By its process's name when the table knows it (the record has the thread's).
            match self.procs.name_of(ev.pid, &ev.comm) {
                Some(name) => self
                    .proc_stats
                    .observe_bytes_named(ev.pid, &name, out, ev.total_len),
                None => self
                    .proc_stats
                    .observe_bytes(ev.pid, &ev.comm, out, ev.total_len),
            }
        }
        result
    }

    /// Links `call` into its chain (ids, parent, trace; a server call whose client call may
    /// still come is to be held). A held call that this client call completes is released.
    fn link(&mut self, call: &mut Call) -> Disposition {
        match self.chains.as_mut() {
            Some(chains) => chains.link(call, &mut self.released),
            None => Disposition::Now,
        }
    }

    /// Holds a server call (counted in every aggregate already) for its client call.
    fn hold(&mut self, call: Call, row: RowRef, now_ns: u64) {
        if let Some(chains) = self.chains.as_mut() {
            chains.hold(call, row, now_ns, &mut self.released);
        }
    }

    /// Hands the released held calls to the sink (those the call selection keeps).
    fn emit_released(&mut self) -> io::Result<()> {
        if self.released.is_empty() {
            return Ok(());
        }
        let mut released = std::mem::take(&mut self.released);
        let mut result = Ok(());
        for (call, row) in released.drain(..) {
            if result.is_err() || !self.selected(&call) {
                continue;
            }
            result = if self.sink.keeps_calls() {
                self.sink.call_owned_in(call, row)
            } else {
                self.sink.call_in(&call, row)
            };
        }
        self.released = released;
        result
    }

    /// Every held call goes out (the session ends), or those due at `now_ns`.
    fn release_held(&mut self, now_ns: Option<u64>) -> io::Result<()> {
        if let Some(chains) = self.chains.as_mut() {
            match now_ns {
                Some(now) => chains.expire(now, &mut self.released),
                None => chains.release_all(&mut self.released),
            }
            let mut stats = chains.stats;
            stats.held_now = chains.held_count();
            self.summary.chains = Some(stats);
        }
        self.emit_released()
    }

    /// Whether a call counted in the aggregates goes on to the sink's call outputs (the call
    /// selection); those left out are counted.
    fn selected(&mut self, call: &Call) -> bool {
        let pass = self.selection.passes(call);
        self.summary.calls_filtered_out += u64::from(!pass);
        pass
    }

    /// A call's aggregates, counts and process identity (its process described to the sink and
    /// the recorder the first time); the endpoint row it was counted in when it is then
    /// handed to the sink (None after an output error, in `result`).
    /// The name of `call`'s process when it is not the name the call carries (its thread's
    /// own: the kernel's comm is the thread's); the process is known to the table from then.
    fn process_name(&mut self, call: &Call) -> Option<std::sync::Arc<str>> {
        let name = self.procs.name(call.pid, &call.comm);
        (*name != *call.comm).then_some(name)
    }

    /// Names `call` by its process, its thread's name kept in `thread` (see `process_name`).
    /// Whether it was renamed.
    fn rename(&mut self, call: &mut Call) -> bool {
        match self.process_name(call) {
            Some(name) => {
                call.thread = Some(std::mem::replace(&mut call.comm, name));
                true
            }
            None => false,
        }
    }

    /// `renamed`: the call was renamed by its process (`rename`), so the endpoint key its
    /// tracking thread numbered (with the thread's name) is not its key.
    fn account_call(
        &mut self,
        call: &Call,
        renamed: bool,
        i: usize,
        keyed: &mut Option<shards::Keyed>,
        result: &mut io::Result<()>,
    ) -> Option<RowRef> {
        let row = self.observe_endpoint(call, renamed, keyed.as_mut().map(|keyed| (i, keyed)));
        if let Some(conns) = &mut self.conns {
            conns.observe(call);
        }
        self.proc_stats.observe_call(call);
        if self.l7_seen.len() >= MAX_L7_SEEN {
            self.l7_seen.clear();
        }
        self.l7_seen
            .insert((call.local, call.peer), (call.l7.proto.name(), call.tls));
        if result.is_err() {
            return None;
        }
        self.summary.calls += 1;
        match call.side {
            Side::Client => self.summary.calls_client += 1,
            Side::Server => self.summary.calls_server += 1,
        }
        let (info, fresh) = self.procs.lookup(call.pid, &call.comm);
        if fresh {
            if let Some(rec) = self.recorder.as_mut() {
                rec.process(info);
            }
            *result = self.sink.process(info);
        }
        result.is_ok().then_some(row)
    }

    /// Accounts `call` in the endpoint table: by the number its tracking thread gave its key
    /// (`keyed`: the call's place in the record's calls, the numbers), else by its key. The
    /// row it was counted in.
    fn observe_endpoint(
        &mut self,
        call: &Call,
        renamed: bool,
        keyed: Option<(usize, &mut shards::Keyed)>,
    ) -> RowRef {
        if let Some((i, keyed)) = keyed {
            if let Some(&id) = keyed.ids.get(i) {
                let worker = keyed.worker;
                if worker >= self.key_rows.len() {
                    self.key_rows.resize_with(worker + 1, KeyRows::default);
                }
                if renamed {
                    // The thread's numbering stays in step; the call goes by its own key.
                    self.key_rows[worker].skip(id, keyed.fresh);
                    return self.endpoints.observe(call);
                }
                if let Some(row) =
                    self.key_rows[worker].record(&mut self.endpoints, id, keyed.fresh, call)
                {
                    return row;
                }
            }
            debug_assert!(false, "a call without its endpoint key's number");
        }
        self.endpoints.observe(call)
    }

    /// Ends a report whose parts were being followed and whose last part never came, with
    /// the table's stats as last known.
    fn close_following_flows(&mut self) -> io::Result<()> {
        let Some(mono_ns) = self.flows_following.take() else {
            return Ok(());
        };
        self.sink.flow_part(crate::flows::FlowReport {
            mono_ns,
            stats: self.last_flow_stats.clone().unwrap_or_default(),
            ..Default::default()
        })
    }

    /// The pending flow report named and to the recorder (before the interval's record: a
    /// replay hands it on with that interval). Named here, not when it was handed on: the
    /// records applied since (live, the fed workers' until the interval's barrier) are
    /// recorded before it, and a replay names it after them.
    fn record_pending_flows(&mut self) {
        let Some(flows) = self.pending_flows.as_mut() else {
            return;
        };
        name_flows(&mut self.l7_seen, flows);
        if let Some(rec) = &mut self.recorder {
            rec.flows(flows);
        }
    }

    fn report_interval(
        &mut self,
        now_ns: u64,
        kernel: &KernelCounters,
        mut overhead: Option<OverheadSnapshot>,
        state: TrackerState,
    ) -> io::Result<()> {
        if let Some(ov) = overhead.as_mut() {
            ov.plugins = crate::plugins::overheads();
        }
        // The last interval's report never got its last part (a frame of a recording lost).
        self.close_following_flows()?;
        let calls_in_interval = self.calls_in_interval;
        self.calls_in_interval = 0;
        self.procs.purge_exited();
        self.proc_stats.set_open_connections(&state.open_per_pid);
        let open_connections = state.open_conns as u64;
        self.tracker_state = state;
        self.warn_caps(now_ns)?;
        let seen = Self::loss_of(kernel);
        let before = self.lost_reported;
        if seen.events > before.events || seen.missed_runs > before.missed_runs {
            let since = crate::sink::Loss {
                events: seen.events.saturating_sub(before.events),
                bytes: seen.bytes.saturating_sub(before.bytes),
                missed_runs: seen.missed_runs.saturating_sub(before.missed_runs),
            };
            self.sink.lost(now_ns, &since)?;
            self.lost_reported = seen;
        }
        self.proc_stats
            .set_tls_hit_ns(kernel.tls_probe_hit_ns, kernel.tls_probe_stepped_hit_ns);
        let since = |now: &BTreeMap<u32, u64>, before: &BTreeMap<u32, u64>, pid: &u32| {
            now.get(pid)
                .copied()
                .unwrap_or(0)
                .saturating_sub(before.get(pid).copied().unwrap_or(0))
        };
        let before = &self.summary.kernel;
        for pid in kernel.tls_probe_hits.keys() {
            let hits = since(&kernel.tls_probe_hits, &before.tls_probe_hits, pid);
            let stepped = since(
                &kernel.tls_probe_stepped_hits,
                &before.tls_probe_stepped_hits,
                pid,
            );
            if hits > 0 {
                self.proc_stats
                    .observe_tls_hits(*pid, hits, stepped.min(hits));
            }
        }
        let start = self.interval_start_ns.replace(now_ns).unwrap_or(now_ns);
        let period_ns = now_ns.saturating_sub(start);
        // From the kernel's counters the interval's record carries: a replay marks the same.
        let sampling = crate::report::SamplingSnapshot::between(
            &self.summary.kernel,
            kernel,
            period_ns,
            calls_in_interval,
        );
        self.summary.kernel = kernel.clone();
        let mut endpoints = self.endpoints.end_interval(period_ns);
        let mut processes = self.proc_stats.end_interval(period_ns);
        self.calls_estimated += sampling
            .as_ref()
            .map_or(Some(calls_in_interval), |sm| sm.calls_estimated)
            .unwrap_or(calls_in_interval);
        if let Some(sm) = &sampling {
            self.sampled = true;
            let totals = self.summary.sampling.get_or_insert_with(Default::default);
            totals.intervals += 1;
            totals.syscalls_not_captured += sm.syscalls_not_captured;
            for e in &mut endpoints {
                e.sampled = true;
                e.calls_per_s_estimated = sm.scale_rate(e.calls_per_s);
            }
            for p in &mut processes {
                p.sampled = true;
                p.calls_per_s_estimated = sm.scale_rate(p.calls_per_s);
            }
        }
        // Made only for a sink that shows them (the table keeps history only then).
        let mut windows =
            (self.endpoints.history_ns() > 0).then(|| Box::new(self.endpoints.windows()));
        if let Some(w) = windows.as_mut().filter(|_| self.sampled) {
            // Rows over several intervals, some sampled since the start: marked (a row is
            // never shown exact when part of it is a sample).
            for e in w
                .since_start
                .iter_mut()
                .chain(w.last_10s.iter_mut())
                .chain(w.last_1m.iter_mut())
            {
                e.sampled = true;
            }
        }
        let report = IntervalReport {
            mono_ns: now_ns,
            period_ns,
            endpoints,
            windows,
            conns: self.conns.as_ref().map(|c| c.snapshot()),
            processes,
            overhead,
            sampling,
            totals: self.totals(),
            open_connections,
            flows: self.pending_flows.take(),
            profile: self.pending_profile.take().map(Box::new),
            profile_status: None,
        };
        match report.flows.as_ref() {
            Some(f) if f.more => self.flows_following = Some(f.mono_ns),
            Some(f) => self.last_flow_stats = Some(f.stats.clone()),
            None => {}
        }
        let mut report = report;
        let triggered = match self.triggers.as_mut() {
            Some(t) => {
                let events = t.on_interval(now_ns, &report);
                report.profile_status = Some(t.status_line(now_ns));
                events
            }
            None => {
                let events = std::mem::take(&mut self.replayed_triggers);
                for e in &events {
                    self.replayed_status.on_event(now_ns, e);
                }
                report.profile_status = self.replayed_status.status_line(now_ns);
                events
            }
        };
        for e in &triggered {
            self.profile_trigger(now_ns, e)?;
        }
        // The sink is the report's last user (the recorder got the flows, named, in
        // `record_pending_flows`).
        self.sink.interval_owned(report)
    }

    /// The off-CPU time linked to calls since the last interval (at the records' time; all
    /// of it at the session's end), added to the interval's profile and the session's.
    fn take_serving(&mut self, last: bool) {
        let Some(l) = &mut self.serving else {
            return;
        };
        let sp = l.take(self.last_ns, last);
        if sp.endpoints.is_empty() && sp.stats.is_zero() {
            return;
        }
        let part = crate::profile::Profile {
            serving: sp,
            ..Default::default()
        };
        self.profile_total
            .get_or_insert_with(Default::default)
            .merge(&part);
        match &mut self.pending_profile {
            Some(p) => p.merge(&part),
            None => self.pending_profile = Some(part),
        }
    }

    /// A profile trigger event at `now_ns`: recorded (after the interval's record) and written.
    fn profile_trigger(
        &mut self,
        now_ns: u64,
        e: &crate::profile::trigger::TriggerEvent,
    ) -> io::Result<()> {
        if let Some(rec) = &mut self.recorder {
            rec.profile_trigger(now_ns, e);
        }
        self.sink.profile_trigger(now_ns, e)
    }

    /// Writing the recording failed: told at once (a `warning`, the terminal UI's header,
    /// stderr), kept for the summary, and the session asked to stop.
    fn check_recording(&mut self, now_ns: u64) -> io::Result<()> {
        match self.recorder.as_mut().and_then(|r| r.take_failure()) {
            Some(failure) => self.tell_recording_failure(now_ns, &failure),
            None => Ok(()),
        }
    }

    fn tell_recording_failure(
        &mut self,
        now_ns: u64,
        failure: &crate::record::writer::RecordingFailure,
    ) -> io::Result<()> {
        self.summary.recording_error = Some(failure.error.clone());
        if let Some(stop) = &self.stop_on_recording_failure {
            stop.store(true, std::sync::atomic::Ordering::SeqCst);
        }
        self.sink.warning(
            now_ns,
            &crate::sink::Warning {
                kind: crate::sink::Warning::RECORDING_ERROR,
                cap: None,
                limit: None,
                count: None,
                message: failure.to_string(),
            },
        )?;
        if crate::tui::terminal::ui_active() {
            // The header says it now; the line follows when the terminal is restored.
            crate::tui::terminal::defer_message(format!("ebtop: error: {failure}"));
        } else {
            crate::diag!("ebtop: error: {failure}");
        }
        Ok(())
    }

    /// A `warning` for each cap that left something out since it was last warned about
    /// (once per interval at most): the kernel flow table (`--max-flows`), the connection
    /// table, the endpoint table (calls folded into `other` rows), the process table, the
    /// pending requests' budget.
    fn warn_caps(&mut self, now_ns: u64) -> io::Result<()> {
        let flows = self
            .pending_flows
            .as_ref()
            .filter(|f| !f.more)
            .map(|f| &f.stats)
            .or(self.last_flow_stats.as_ref());
        let endpoints = self.endpoints.stats();
        let was = self.caps_warned;
        let now = CapsWarned {
            flows_table_full: flows.map_or(was.flows_table_full, |f| f.table_full),
            conns_evicted: self.tracker_state.stats.conns_evicted,
            endpoints_folded: endpoints.folded_calls,
            process_table_resets: self.procs.resets,
            pending_dropped: self.tracker_state.parse.pending_dropped,
        };
        let max_flows = flows.map_or(0, |f| f.max_flows);
        let hits = [
            (
                "flows",
                now.flows_table_full,
                was.flows_table_full,
                max_flows,
                "TCP flows not tracked: the kernel flow table is full (--max-flows)",
            ),
            (
                "connections",
                now.conns_evicted,
                was.conns_evicted,
                self.max_conns as u64,
                "connections evicted from the connection table (least recently seen first)",
            ),
            (
                "endpoints",
                now.endpoints_folded,
                was.endpoints_folded,
                endpoints.max_endpoints,
                "calls folded into `other` rows: the endpoint table is full",
            ),
            (
                "processes",
                now.process_table_resets,
                was.process_table_resets,
                self.procs.cap() as u64,
                "times the process table was full and started over",
            ),
            (
                "pending",
                now.pending_dropped,
                was.pending_dropped,
                crate::protocols::matching::SHARED_PENDING_BYTES as u64,
                "pipelined requests dropped unpaired: their connection's depth and the shared budget of pending requests (bytes) were spent",
            ),
        ];
        for (cap, now_n, was_n, limit, what) in hits {
            if now_n > was_n {
                let count = now_n - was_n;
                self.sink.warning(
                    now_ns,
                    &crate::sink::Warning {
                        kind: crate::sink::Warning::CAP,
                        cap: Some(cap),
                        limit: Some(limit),
                        count: Some(count),
                        message: format!("{count} {what} (cap {limit})"),
                    },
                )?;
            }
        }
        self.caps_warned = now;
        self.warn_plugins(now_ns)
    }

    /// A `warning` for each plugin disabled since the last look.
    fn warn_plugins(&mut self, now_ns: u64) -> io::Result<()> {
        for message in crate::plugins::take_disabled_warnings() {
            self.sink.warning(
                now_ns,
                &crate::sink::Warning {
                    kind: crate::sink::Warning::PLUGIN_DISABLED,
                    cap: None,
                    limit: None,
                    count: None,
                    message,
                },
            )?;
        }
        Ok(())
    }

    fn loss_of(kernel: &KernelCounters) -> crate::sink::Loss {
        crate::sink::Loss {
            events: kernel.lost,
            bytes: kernel.lost_bytes,
            missed_runs: kernel.missed_runs,
        }
    }

    /// Counts since the start, as the summary will show them.
    fn totals(&self) -> Summary {
        let mut t = self.summary.clone();
        t.endpoints = Vec::new();
        // As of now, so a viewer can tell each interval how much was folded.
        t.endpoint_table = self.endpoints.stats();
        t.tracker = self.tracker_state.stats;
        t.parse = self.tracker_state.parse;
        t
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::procinfo::ProcessTable;
    use crate::session_meta::SessionMeta;
    use crate::sink::Loss;

    #[derive(Default)]
    struct Losses(Vec<Loss>);

    impl Sink for Losses {
        fn lost(&mut self, _: u64, loss: &Loss) -> io::Result<()> {
            self.0.push(*loss);
            Ok(())
        }
    }

    /// `records` HTTP exchanges over `socks` keep-alive connections of two processes, each
    /// exchange's request and response as separate records, interleaved across connections.
    fn keep_alive_traffic(socks: u64, exchanges: u64) -> Vec<Vec<u8>> {
        traffic_to(socks, exchanges, |i| format!("/items/{i}"))
    }

    /// Keep-alive HTTP exchanges on `socks` connections of two processes, the i-th to `path(i)`.
    fn traffic_to(socks: u64, exchanges: u64, path: impl Fn(u64) -> String) -> Vec<Vec<u8>> {
        use crate::event::EventBuilder;
        let mut out = Vec::new();
        let mut seq = vec![[0u64; 2]; socks as usize];
        let mut t = 1_000_000u64;
        for i in 0..exchanges {
            let s = i % socks;
            let req = format!("GET {} HTTP/1.1\r\nHost: x\r\n\r\n", path(i));
            let resp = "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok";
            for (dir, body) in [
                (Direction::Ingress, req.as_str()),
                (Direction::Egress, resp),
            ] {
                let d = dir as usize;
                let pos = seq[s as usize][d];
                seq[s as usize][d] += body.len() as u64;
                t += 1_000;
                out.push(
                    EventBuilder::data(dir, 1000 + s, pos, body.len() as u64)
                        .times(t, t + 500)
                        .process(
                            100 + (s % 2) as u32,
                            100,
                            ["nginx", "api"][(s % 2) as usize],
                        )
                        .v4([127, 0, 0, 1], 8080, [127, 0, 0, 2], 40_000 + s as u16)
                        .build(body.as_bytes()),
                );
            }
        }
        out
    }

    /// Feeds `records` without a flush (as a long live pass would) and returns the JSON output.
    fn json_of(records: &[Vec<u8>], threads: usize) -> Vec<u8> {
        let sink = crate::sink::json::JsonSink::new(Vec::new());
        let mut p = Pipeline::new(TrackerConfig::default(), ProcessTable::new(false), sink)
            .with_threads(threads);
        p.start(&test_meta()).unwrap();
        for (i, r) in records.iter().enumerate() {
            p.on_record(r).unwrap();
            if i == records.len() / 2 {
                p.on_interval(50_000_000, &KernelCounters::default(), None)
                    .unwrap();
            }
        }
        let (sink, summary) = p.finish(&KernelCounters::default(), 1).unwrap();
        assert_eq!(summary.calls, records.len() as u64 / 2);
        sink.into_inner()
    }

    fn test_meta() -> SessionMeta {
        SessionMeta {
            source: "replay".into(),
            ebtop_version: "test".into(),
            host: "test".into(),
            kernel: "test".into(),
            start_unix_ns: 1_700_000_000_000_000_000,
            wall_offset_ns: 1_700_000_000_000_000_000,
            snaplen: 4096,
            filters: Filters::default(),
            hooks: None,
            loaded: Vec::new(),
            tls_probed: Vec::new(),
            tls_probe_failures: Vec::new(),
            event_rings: None,
        }
    }

    fn warnings(out: &[u8]) -> Vec<serde_json::Value> {
        String::from_utf8_lossy(out)
            .lines()
            .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
            .filter(|v| v["type"] == "warning")
            .collect()
    }

    /// Each warning's (cap, count).
    fn cap_counts(w: &[serde_json::Value]) -> Vec<(serde_json::Value, serde_json::Value)> {
        w.iter()
            .map(|w| (w["cap"].clone(), w["count"].clone()))
            .collect()
    }

    /// The connection table's cap: a `warning` in the interval its evictions happen, with
    /// how many, and none in an interval without any (1 and 3 tracking threads alike).
    #[test]
    fn a_connection_table_at_its_cap_is_a_warning_once_per_interval() {
        for threads in [1, 3] {
            let cfg = TrackerConfig {
                max_conns: 4,
                ..TrackerConfig::default()
            };
            let sink = crate::sink::json::JsonSink::new(Vec::new());
            let mut p = Pipeline::new(cfg, ProcessTable::new(false), sink).with_threads(threads);
            p.start(&test_meta()).unwrap();
            let records = keep_alive_traffic(40, 80);
            for r in &records {
                p.on_record(r).unwrap();
            }
            p.on_interval(500_000_000, &KernelCounters::default(), None)
                .unwrap();
            p.on_interval(1_500_000_000, &KernelCounters::default(), None)
                .unwrap();
            let (sink, summary) = p.finish(&KernelCounters::default(), 1).unwrap();
            let out = sink.into_inner();
            let w = warnings(&out);
            assert!(summary.tracker.conns_evicted > 0, "{threads} threads");
            assert_eq!(
                w.len(),
                1,
                "{threads} threads: one warning, in the interval: {w:?}"
            );
            assert_eq!(w[0]["kind"], "cap");
            assert_eq!(w[0]["cap"], "connections");
            assert_eq!(w[0]["limit"], 4);
            assert_eq!(w[0]["count"], summary.tracker.conns_evicted);
            assert!(w[0]["message"].as_str().unwrap().contains("evicted"));
        }
    }

    /// The kernel flow table's cap (`--max-flows`): reported by the table only as
    /// `flow_stats.table_full`; a `warning` now too, once per interval in which it grew.
    #[test]
    fn a_full_flow_table_is_a_warning_once_per_interval() {
        use crate::flows::test_reports;
        let mut out = Vec::new();
        let mut p = json_pipeline(&mut out);
        p.start(&test_meta()).unwrap();
        let kernel = KernelCounters::default();
        for (i, full) in [0u64, 7, 7, 20].into_iter().enumerate() {
            let at = (i as u64 + 1) * 1_000_000_000;
            let mut report = test_reports::numbered(at, 3, 0, 0);
            report.stats.table_full = full;
            report.stats.max_flows = 3;
            p.set_flows(report).unwrap();
            p.on_interval(at, &kernel, None).unwrap();
        }
        drop(p.finish(&kernel, 5_000_000_000).unwrap());
        let w = warnings(&out);
        let counts = cap_counts(&w);
        assert_eq!(
            counts,
            [("flows".into(), 7.into()), ("flows".into(), 13.into())],
            "{w:?}"
        );
        assert_eq!(w[0]["limit"], 3);
        assert!(w[0]["message"].as_str().unwrap().contains("--max-flows"));
    }

    /// The pending-call cap (issue 42 item 7): requests dropped unpaired once a connection's
    /// depth and the shared budget are spent (`parse.pending_dropped`, counted by the parsers:
    /// protocols/http1 and the others test that) are a `pending` warning in each interval in
    /// which the count grew, with how many, and none in one in which it did not. (The shared
    /// budget is the process's, 256 MiB: spending it here would starve the other tests, so
    /// the tracker's counts are handed to the interval as a tracking thread hands them.)
    #[test]
    fn pending_calls_past_the_cap_are_a_warning_once_per_interval() {
        let mut out = Vec::new();
        let mut p = json_pipeline(&mut out);
        p.start(&test_meta()).unwrap();
        let kernel = KernelCounters::default();
        for (i, dropped) in [0u64, 44, 44, 50].into_iter().enumerate() {
            let mut state = TrackerState::default();
            state.parse.pending_dropped = dropped;
            let at = (i as u64 + 1) * 1_000_000_000;
            p.down.report_interval(at, &kernel, None, state).unwrap();
        }
        drop(p.finish(&kernel, 5_000_000_000).unwrap());
        let w = warnings(&out);
        let counts = cap_counts(&w);
        assert_eq!(
            counts,
            [("pending".into(), 44.into()), ("pending".into(), 6.into())],
            "{w:?}"
        );
        assert_eq!(w[0]["kind"], "cap");
        assert_eq!(
            w[0]["limit"],
            crate::protocols::matching::SHARED_PENDING_BYTES as u64
        );
        assert!(w[0]["message"]
            .as_str()
            .unwrap()
            .contains("dropped unpaired"));
    }

    /// Issue 43: dig's calls came as `isc-net-0000` (its thread's name, what the kernel's
    /// comm is) and its `proc` lines without exe or command line. Calls, endpoints and
    /// processes are named by the process (its exec record), the thread's name in `thread`;
    /// one `proc` line with the exec record's exe and arguments; the same with tracking
    /// threads (whose endpoint numbers and lines were made with the thread's name).
    #[test]
    fn calls_are_named_by_their_process_and_keep_their_threads_name() {
        use crate::process_events::{build, ProcEventKind};
        let exec = build(
            ProcEventKind::Exec,
            500,
            100,
            "dig",
            0,
            b"/usr/bin/dig",
            b"dig\0example.com\0",
        );
        let mut records = keep_alive_traffic(4, 40);
        // Every call of pid 100 made by a thread of its own name, two of them.
        // (The record header's pid is at 40, its comm at 104: src/bpf/ebtop.h.)
        let mut n = 0;
        for r in records.iter_mut() {
            if r[40..44] == 100u32.to_le_bytes() {
                let name: &[u8] = [b"isc-net-0000", b"isc-net-0001"][n / 2 % 2];
                n += 1;
                r[104..120].fill(0);
                r[104..104 + name.len()].copy_from_slice(name);
            }
        }
        let run = |threads: usize| {
            let sink = crate::sink::json::JsonSink::new(Vec::new());
            let mut p = Pipeline::new(TrackerConfig::default(), ProcessTable::new(false), sink)
                .with_threads(threads);
            p.start(&test_meta()).unwrap();
            p.on_proc_record(&exec).unwrap();
            for r in &records {
                p.on_record(r).unwrap();
            }
            let (sink, _) = p.finish(&KernelCounters::default(), 1).unwrap();
            String::from_utf8(sink.into_inner()).unwrap()
        };
        let out = run(1);
        assert_eq!(out, run(3), "tracking threads give the serial output");
        let lines: Vec<serde_json::Value> = out
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        let of = |t: &'static str| lines.iter().filter(move |l| l["type"] == t);
        let dig: Vec<_> = of("call").filter(|c| c["pid"] == 100).collect();
        assert_eq!(dig.len(), 20);
        let mut threads = std::collections::BTreeSet::new();
        for c in &dig {
            assert_eq!(c["comm"], "dig", "{c}");
            threads.insert(c["thread"].as_str().unwrap().to_owned());
        }
        assert_eq!(threads.len(), 2, "{threads:?}");
        assert!(of("call")
            .filter(|c| c["pid"] == 101)
            .all(|c| c["comm"] == "api" && c.get("thread").is_none()));
        let procs: Vec<_> = of("proc").filter(|p| p["pid"] == 100).collect();
        assert_eq!(procs.len(), 1, "{procs:?}");
        assert_eq!(procs[0]["comm"], "dig");
        assert_eq!(procs[0]["exe"], "/usr/bin/dig");
        assert_eq!(
            procs[0]["cmdline"],
            serde_json::json!(["dig", "example.com"])
        );
        let summary = of("summary").next().unwrap();
        for e in summary["endpoints"].as_array().unwrap() {
            assert!(e["comm"] == "dig" || e["comm"] == "api", "{e}");
        }
        let dig_calls: u64 = summary["endpoints"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|e| e["comm"] == "dig")
            .map(|e| e["calls"].as_u64().unwrap())
            .sum();
        assert_eq!(dig_calls, 20);
    }

    /// Issue 43 (loss where it is read): a record lost on a connection marks the endpoint
    /// and process lines its next calls are counted in (`conn_loss`), not the others; the
    /// same with tracking threads.
    #[test]
    fn endpoints_and_processes_of_a_connection_that_lost_bytes_are_marked() {
        let mut records = keep_alive_traffic(2, 20);
        // Socket 1000's 5th exchange (records 16 and 17) lost: its next request is a gap.
        records.drain(16..18);
        let out = json_of_all(&records, 1);
        assert_eq!(out, json_of_all(&records, 3));
        let lines: Vec<serde_json::Value> = out
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        let summary = lines.iter().find(|l| l["type"] == "summary").unwrap();
        assert_eq!(summary["tracker"]["gaps"], 2, "{summary}");
        let mut marked = std::collections::BTreeMap::new();
        for e in summary["endpoints"].as_array().unwrap() {
            *marked
                .entry(e["comm"].as_str().unwrap().to_owned())
                .or_insert(false) |= e["conn_loss"].as_bool().unwrap();
        }
        // Socket 1000 is nginx's (pid 100), socket 1001 api's.
        assert!(marked["nginx"], "{marked:?}");
        assert!(!marked["api"], "{marked:?}");
        let procs: Vec<_> = lines.iter().filter(|l| l["type"] == "process").collect();
        assert!(procs
            .iter()
            .any(|p| p["comm"] == "nginx" && p["conn_loss"] == true));
        assert!(procs
            .iter()
            .all(|p| p["comm"] != "api" || p["conn_loss"] == false));
    }

    /// The JSON output of `records` with one interval's end after them.
    fn json_of_all(records: &[Vec<u8>], threads: usize) -> String {
        let sink = crate::sink::json::JsonSink::new(Vec::new());
        let mut p = Pipeline::new(TrackerConfig::default(), ProcessTable::new(false), sink)
            .with_threads(threads);
        p.start(&test_meta()).unwrap();
        for r in records {
            p.on_record(r).unwrap();
        }
        p.on_interval(50_000_000, &KernelCounters::default(), None)
            .unwrap();
        let (sink, _) = p.finish(&KernelCounters::default(), 1).unwrap();
        String::from_utf8(sink.into_inner()).unwrap()
    }

    /// A scan of distinct paths next to a few real endpoints, through the pipeline to JSON:
    /// the scan's varied segment folds into `{…}` rows, the endpoint lines stay few, every
    /// call is in one of them, the summary counts what folded, and any number of tracking
    /// threads gives the same output.
    #[test]
    fn varied_path_segments_fold_in_the_json_endpoints() {
        let exchanges = 600;
        let path = |i: u64| match i % 3 {
            0 => format!("/missing/page{i}"),
            1 => format!("/api/{}", ["users", "orders", "cart"][(i % 9 / 3) as usize]),
            _ => format!("/static/f{}.css", i % 10),
        };
        let records = traffic_to(4, exchanges, path);
        let out = json_of_all(&records, 1);
        let lines: Vec<serde_json::Value> = out
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        let summary = lines.iter().find(|v| v["type"] == "summary").unwrap();
        let endpoints = summary["endpoints"].as_array().unwrap();
        let calls: u64 = endpoints.iter().map(|e| e["calls"].as_u64().unwrap()).sum();
        assert_eq!(calls, exchanges);
        let fold = crate::aggregate::fold::FOLD;
        let folded: Vec<_> = endpoints
            .iter()
            .filter(|e| e["resource"].as_str().unwrap().contains(fold))
            .collect();
        // Two processes (nginx, api): each its `/missing/{…}` row; /api and /static stay.
        assert_eq!(folded.len(), 2, "{folded:?}");
        assert!(folded.iter().all(|e| e["resource"] == "/missing/{…}"));
        let fold_after = crate::aggregate::fold::FOLD_AFTER as u64;
        // The rows to expect, from the paths each process (`traffic_to`: by the connection's
        // parity) asked for: the /api and /static ones named, FOLD_AFTER pages and a `{…}`.
        let mut named = std::collections::HashSet::new();
        for i in (0..exchanges).filter(|i| i % 3 != 0) {
            named.insert((i % 4 % 2, path(i)));
        }
        assert_eq!(
            endpoints.len() as u64,
            named.len() as u64 + 2 * (fold_after + 1)
        );
        let table = &summary["endpoint_table"];
        let folded_calls: u64 = folded.iter().map(|e| e["calls"].as_u64().unwrap()).sum();
        assert_eq!(table["segment_folded_calls"].as_u64(), Some(folded_calls));
        assert_eq!(folded_calls, exchanges / 3 - 2 * fold_after);
        assert!(table["segment_folded_keys_approx"].as_u64().unwrap() > 0);
        // The interval lines add up to the summary's rows.
        let interval_calls: u64 = lines
            .iter()
            .filter(|v| v["type"] == "endpoint")
            .map(|e| e["calls"].as_u64().unwrap())
            .sum();
        assert_eq!(interval_calls, exchanges);
        for threads in [2, 3] {
            assert!(json_of_all(&records, threads) == out, "{threads} threads");
        }
    }

    #[test]
    fn tracking_threads_give_the_serial_output_past_the_pending_bound() {
        // More records than MAX_PENDING_STEPS between two flushes: the bound kicks in.
        let records = keep_alive_traffic(97, shards::MAX_PENDING_STEPS as u64);
        assert!(records.len() > shards::MAX_PENDING_STEPS);
        let serial = json_of(&records, 1);
        for threads in [2, 5] {
            assert!(json_of(&records, threads) == serial, "{threads} threads");
        }
    }

    #[test]
    fn time_span_after_a_partial_flush_counts_every_record() {
        let records = keep_alive_traffic(31, 4000);
        let span = |threads| {
            let sink = crate::sink::json::JsonSink::new(Vec::new());
            let mut p = Pipeline::new(TrackerConfig::default(), ProcessTable::new(false), sink)
                .with_threads(threads);
            p.start(&test_meta()).unwrap();
            assert_eq!(matches!(p.tracking, Tracking::Dealt(_)), threads > 1);
            for r in &records {
                p.on_record(r).unwrap();
            }
            // A backlog this long is applied only as far as it is ready.
            p.flush().unwrap();
            p.time_span().unwrap()
        };
        assert_eq!(span(3), span(1));
    }

    #[test]
    fn skipped_probe_runs_are_reported_like_dropped_records_once_each() {
        let mut p = Pipeline::new(
            TrackerConfig::default(),
            ProcessTable::new(false),
            Losses::default(),
        );
        let mut k = KernelCounters::default();
        p.on_interval(1_000, &k, None).unwrap();
        k.missed_runs = 3;
        p.on_interval(2_000, &k, None).unwrap();
        // Nothing new: no line.
        p.on_interval(3_000, &k, None).unwrap();
        k.lost = 2;
        k.lost_bytes = 100;
        k.missed_runs = 4;
        let (sink, summary) = p.finish(&k, 4_000).unwrap();
        assert_eq!(
            sink.0,
            vec![
                Loss {
                    events: 0,
                    bytes: 0,
                    missed_runs: 3
                },
                Loss {
                    events: 2,
                    bytes: 100,
                    missed_runs: 1
                },
            ]
        );
        assert_eq!(summary.kernel.missed_runs, 4);
    }

    /// The `flow`, `flow_end` and `flow_stats` lines of a JSON output, in order.
    fn flow_lines(out: &[u8]) -> Vec<String> {
        String::from_utf8(out.to_vec())
            .unwrap()
            .lines()
            .filter(|l| l.contains(r#""type":"flow"#))
            .map(String::from)
            .collect()
    }

    fn json_pipeline(out: &mut Vec<u8>) -> Pipeline<crate::sink::json::JsonSink<&mut Vec<u8>>> {
        Pipeline::new(
            TrackerConfig::default(),
            ProcessTable::new(false),
            crate::sink::json::JsonSink::new(out),
        )
    }

    /// A flow report handed on in parts (the first before the interval's end, the others
    /// after it, as the live loop does) writes the lines of the report whole, with its one
    /// `flow_stats` line last; and its recording replays to the same lines in the same order.
    #[test]
    fn a_flow_report_in_parts_writes_what_the_report_whole_does() {
        use crate::flows::{test_reports, FLOWS_PER_PART};
        let kernel = KernelCounters::default();
        let at = 2_000_000_000;
        let whole = test_reports::numbered(at, 6_000, 3_000, 20);

        let mut once = Vec::new();
        let mut p = json_pipeline(&mut once);
        p.set_flows(whole.clone()).unwrap();
        p.on_interval(at, &kernel, None).unwrap();
        drop(p.finish(&kernel, at).unwrap());
        let once = flow_lines(&once);
        assert_eq!(once.len(), 6_000 + 3_000 + 20 + 1);

        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("parts.ebt");
        let header = crate::record::RecordingHeader {
            meta: SessionMeta::this_host("live", 4096, Filters::default(), 0),
            options: crate::record::RecordOptions::default(),
            processes: vec![],
            sockets: vec![],
        };
        let rec = crate::record::writer::Recorder::create(&path, &header, false).unwrap();
        let mut streamed = Vec::new();
        let mut p = json_pipeline(&mut streamed).with_recorder(rec);
        let parts = test_reports::owned_parts(&whole, FLOWS_PER_PART);
        // Each kind of flow (open, ended, UDP) in parts of its own.
        let per_kind = [6_000, 3_000, 20].map(|n: usize| n.div_ceil(FLOWS_PER_PART));
        assert_eq!(parts.len(), per_kind.iter().sum::<usize>());
        let mut parts = parts.into_iter();
        p.set_flows(parts.next().unwrap()).unwrap();
        p.on_interval(at, &kernel, None).unwrap();
        for part in parts {
            p.set_flows(part).unwrap();
        }
        drop(p.finish(&kernel, at).unwrap());
        let streamed = flow_lines(&streamed);
        assert!(streamed.last().unwrap().contains(r#""type":"flow_stats""#));
        let sorted = |mut v: Vec<String>| {
            v.sort();
            v
        };
        assert_eq!(sorted(streamed.clone()), sorted(once));

        let mut replayed = Vec::new();
        let mut reader = crate::record::reader::open(&path).unwrap();
        let mut p = json_pipeline(&mut replayed);
        let stop = std::sync::atomic::AtomicBool::new(false);
        let end = crate::driver::replay::run(&mut reader, &mut p, &stop).unwrap();
        drop(p.finish(&end.kernel, end.duration_ns).unwrap());
        assert_eq!(flow_lines(&replayed), streamed);
    }

    /// A flow report handed on before the interval's end, and records applied after it but
    /// before the interval's end (live, the fed workers' records merged at the interval's
    /// barrier): the report is named by the calls of every record recorded before it, so
    /// its recording replays to the live lines. (The report was named when handed on and
    /// recorded after those records: the replay named an ended flow `http` that the live
    /// run had printed without a protocol.)
    #[test]
    fn a_flow_report_is_named_by_the_calls_recorded_before_it() {
        use crate::flows::{test_flows, FlowReport};
        let kernel = KernelCounters::default();
        let at = 50_000_000;
        // One HTTP exchange on 127.0.0.1:8080 ← 127.0.0.2:40000, and the flow of those
        // addresses ended.
        let records = keep_alive_traffic(1, 1);
        let mut ended = test_flows::tcp(1, 60, 60, Some(2_000_000));
        ended.local = "127.0.0.1:8080".parse().unwrap();
        ended.peer = "127.0.0.2:40000".parse().unwrap();
        let report = FlowReport {
            mono_ns: at,
            ends: vec![ended],
            ..Default::default()
        };

        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("named.ebt");
        let header = crate::record::RecordingHeader {
            meta: test_meta(),
            options: crate::record::RecordOptions::default(),
            processes: vec![],
            sockets: vec![],
        };
        let rec = crate::record::writer::Recorder::create(&path, &header, false).unwrap();
        let mut live = Vec::new();
        let mut p = json_pipeline(&mut live).with_recorder(rec);
        p.start(&test_meta()).unwrap();
        p.set_flows(report).unwrap();
        for r in &records {
            p.on_record(r).unwrap();
        }
        p.on_interval(at, &kernel, None).unwrap();
        drop(p.finish(&kernel, at).unwrap());
        let live = flow_lines(&live);
        let end: serde_json::Value = serde_json::from_str(
            live.iter()
                .find(|l| l.contains(r#""type":"flow_end""#))
                .unwrap(),
        )
        .unwrap();
        assert_eq!(
            end["l7"], "http",
            "the exchange was applied before the interval's end"
        );

        let mut replayed = Vec::new();
        let mut reader = crate::record::reader::open(&path).unwrap();
        let mut p = json_pipeline(&mut replayed);
        p.start(&crate::driver::replay::replay_meta(&reader))
            .unwrap();
        let stop = std::sync::atomic::AtomicBool::new(false);
        let end = crate::driver::replay::run(&mut reader, &mut p, &stop).unwrap();
        drop(p.finish(&end.kernel, end.duration_ns).unwrap());
        assert_eq!(flow_lines(&replayed), live);
    }

    /// A report whose last part never comes (a recording cut short, a frame of it lost)
    /// still ends with a `flow_stats` line, the table's as last known; and a part of the next
    /// interval's report is never taken for one of the report followed.
    #[test]
    fn a_flow_report_cut_short_still_ends_with_its_stats() {
        use crate::flows::{test_reports, FLOWS_PER_PART};
        let kernel = KernelCounters::default();
        let s = 1_000_000_000;
        let mut known = test_reports::numbered(s, 10, 0, 0);
        known.stats.created = 41;
        let streamed = |at: u64, created: u64| {
            let mut r = test_reports::numbered(at, 5_000, 0, 0);
            r.stats.created = created;
            test_reports::owned_parts(&r, FLOWS_PER_PART)
        };
        let (second, third) = (streamed(2 * s, 42), streamed(3 * s, 43));
        assert!(second[0].more && third[0].more);
        let mut out = Vec::new();
        let mut p = json_pipeline(&mut out);
        p.set_flows(known).unwrap();
        p.on_interval(s, &kernel, None).unwrap();
        // Interval 2: its first part only (the rest lost).
        p.set_flows(second[0].clone()).unwrap();
        p.on_interval(2 * s, &kernel, None).unwrap();
        // Interval 3's first part comes before its interval: it is not interval 2's.
        p.set_flows(third[0].clone()).unwrap();
        p.on_interval(3 * s, &kernel, None).unwrap();
        // The session ends before the rest of interval 3's report.
        drop(p.finish(&kernel, 3 * s).unwrap());
        let lines: Vec<serde_json::Value> = flow_lines(&out)
            .iter()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        let flows_at = |ts: &serde_json::Value| {
            lines
                .iter()
                .filter(|l| l["type"] == "flow" && l["ts"] == *ts)
                .count()
        };
        let stats: Vec<&serde_json::Value> =
            lines.iter().filter(|l| l["type"] == "flow_stats").collect();
        assert_eq!(stats.len(), 3, "one per interval");
        let created: Vec<u64> = stats
            .iter()
            .map(|l| l["created"].as_u64().unwrap())
            .collect();
        assert_eq!(created, vec![41, 41, 41], "the last stats known");
        assert_eq!(flows_at(&stats[0]["ts"]), 10);
        assert_eq!(flows_at(&stats[1]["ts"]), FLOWS_PER_PART);
        assert_eq!(flows_at(&stats[2]["ts"]), FLOWS_PER_PART);
        assert_ne!(stats[1]["ts"], stats[2]["ts"]);
    }
}
