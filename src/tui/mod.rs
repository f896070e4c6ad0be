//! The terminal UI: four views (calls, endpoints, flows, processes) over live capture or a
//! replay.
//!
//! Threads: the collector (live capture or replay) runs the pipeline with a [`TuiSink`], which
//! hands typed [`UiMsg`]s to the UI over a bounded channel with `try_send`: when the UI falls
//! behind, call batches are dropped and counted (shown in the header), capture never waits. An
//! input thread forwards keys and resizes over the same channel. The UI thread ([`run_ui`])
//! owns the terminal and redraws on a key, a resize, or at most once per refresh interval when
//! data arrived.

pub mod app;
pub mod data;
pub mod filter;
pub mod flows;
pub mod input;
pub mod keys;
pub mod profile;
pub mod render;
pub mod table;
pub mod terminal;

use std::io;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{Receiver, RecvTimeoutError, SyncSender, TrySendError};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crossterm::event::KeyEvent;

use crate::aggregate::RowRef;
use crate::call::Call;
use crate::procinfo::ProcInfo;
use crate::report::IntervalReport;
use crate::session_meta::SessionMeta;
use crate::sink::Sink;
use crate::summary::Summary;

pub use app::{Action, App, View};

/// What the collector and the input thread send the UI.
#[derive(Debug)]
pub enum UiMsg {
    Meta(Box<SessionMeta>),
    /// A process described for the first time (its command line for the Processes view).
    Process(Box<ProcInfo>),
    /// Boxed: a call moves from batch to list to the way back, 424 bytes at each move. With
    /// the pipeline's endpoint row of each (`Sink::call_owned_in`; None: not given), in order.
    Calls(Vec<Box<Call>>, Vec<Option<RowRef>>),
    Interval(Box<IntervalReport>),
    /// A later part of the last interval's flow report (its flows had `more` set).
    FlowPart(Box<crate::flows::FlowReport>),
    Lost {
        events: u64,
        bytes: u64,
    },
    /// Calls the sink could not hand over so far (UI behind).
    Dropped(u64),
    /// A cap hit, the recording failed: shown in the header.
    Warning(Box<crate::sink::Warning>),
    Ended(Box<Summary>),
    /// The replay starts over (to go back in recorded time): what was shown is forgotten.
    Restart,
    /// The recording's last recorded time (`driver::replay::recording_end_ns`): the replay's
    /// progress bar and total length.
    ReplayEnd(u64),
    Key(KeyEvent),
    Resize(u16, u16),
    /// The terminal went away (EOF, EIO or hangup on the tty): the UI ends at once.
    TerminalLost(String),
    /// The key reader failed (a bug): the UI ends with this error.
    InputFailed(String),
}

/// Channel capacity in messages (a message is a batch of calls or one report).
pub const CHANNEL_CAP: usize = 1024;
/// Non-call messages kept back while the channel is full (the oldest go first past this).
const PENDING_MAX: usize = 64;
/// Calls per batch at most.
const BATCH_MAX: usize = 512;
/// A batch is sent about this often while calls arrive: its age is looked at every
/// `AGE_CHECK_EVERY` calls, so a batch of fewer waits for the next flush (after each pass over
/// the ring live, every 4096 records or a pacing wait in a replay), a report or more calls.
const BATCH_AGE: Duration = Duration::from_millis(50);
/// Calls between two looks at a batch's age (reading the clock at every call was 2% of the
/// terminal UI's CPU).
const AGE_CHECK_EVERY: usize = 16;

/// Slowest and fastest replay pace the keys reach (as `--speed` accepts).
pub const MIN_SPEED: f64 = 0.001;
pub const MAX_SPEED: f64 = 1_000_000.0;

/// What the UI changes in a running replay: its pace, a point in recorded time the replay
/// skips to (the records before it are replayed at once, nothing is lost), and a point before
/// the present it goes back to (the replay starts over and skips to it: every number shown is
/// then what it was at that point).
#[derive(Debug)]
pub struct ReplayControl {
    speed_bits: AtomicU64,
    skip_until_ns: AtomicU64,
    /// Recorded time to go back to; `NO_REWIND` when none is asked.
    rewind_ns: AtomicU64,
}

const NO_REWIND: u64 = u64::MAX;

impl ReplayControl {
    pub fn new(speed: f64) -> ReplayControl {
        ReplayControl {
            speed_bits: AtomicU64::new(speed.clamp(MIN_SPEED, MAX_SPEED).to_bits()),
            skip_until_ns: AtomicU64::new(0),
            rewind_ns: AtomicU64::new(NO_REWIND),
        }
    }

    pub fn speed(&self) -> f64 {
        f64::from_bits(self.speed_bits.load(Ordering::Relaxed))
    }

    /// Multiplies the pace by `factor`, within [`MIN_SPEED`, `MAX_SPEED`].
    pub fn scale_speed(&self, factor: f64) {
        let v = (self.speed() * factor).clamp(MIN_SPEED, MAX_SPEED);
        self.speed_bits.store(v.to_bits(), Ordering::Relaxed);
    }

    /// Replays everything up to recorded time `ns` without waiting.
    pub fn skip_to(&self, ns: u64) {
        self.skip_until_ns.fetch_max(ns, Ordering::Relaxed);
    }

    /// Goes back to recorded time `ns`: the replay starts over and skips to it.
    pub fn rewind_to(&self, ns: u64) {
        self.rewind_ns
            .store(ns.min(NO_REWIND - 1), Ordering::Relaxed);
    }

    pub fn rewind_pending(&self) -> bool {
        self.rewind_ns.load(Ordering::Relaxed) != NO_REWIND
    }

    /// The point to go back to, once: the skip restarts there.
    pub fn take_rewind(&self) -> Option<u64> {
        let ns = self.rewind_ns.swap(NO_REWIND, Ordering::Relaxed);
        (ns != NO_REWIND).then(|| {
            self.skip_until_ns.store(ns, Ordering::Relaxed);
            ns
        })
    }
}

/// The UI's keys are how the viewer asks a replay to go back in recorded time.
impl crate::driver::replay::Rewind for ReplayControl {
    fn requested(&self) -> bool {
        self.rewind_pending()
    }

    fn take(&self) -> Option<u64> {
        self.take_rewind()
    }
}

/// Replay at the recorded pace: sleeps so recorded time advances at the control's speed ×
/// real time.
pub struct Pacer {
    control: Arc<ReplayControl>,
    pub stop: Arc<AtomicBool>,
    /// While set, the replay waits (the UI's `p`).
    pub paused: Arc<AtomicBool>,
    /// (recorded ns, when, at which speed) the pace is measured from.
    base: Option<(u64, Instant, f64)>,
}

impl Pacer {
    pub fn new(
        control: Arc<ReplayControl>,
        stop: Arc<AtomicBool>,
        paused: Arc<AtomicBool>,
    ) -> Pacer {
        Pacer {
            control,
            stop,
            paused,
            base: None,
        }
    }

    /// How long to wait before recorded time `rec_ns` is due (None: now).
    fn wait_for(&mut self, rec_ns: u64) -> Option<Duration> {
        if self.control.rewind_pending()
            || rec_ns < self.control.skip_until_ns.load(Ordering::Relaxed)
        {
            // Skipping: the pace restarts from where the skip ends.
            self.base = None;
            return None;
        }
        let speed = self.control.speed();
        if self.base.is_some_and(|(_, _, s)| s != speed) {
            // A new pace counts from now, not from the start.
            self.base = None;
        }
        let (b_ns, b_at, _) = *self.base.get_or_insert((rec_ns, Instant::now(), speed));
        let ahead = rec_ns.checked_sub(b_ns)?;
        let due = b_at + Duration::from_secs_f64(ahead as f64 / 1e9 / speed);
        due.checked_duration_since(Instant::now())
            .filter(|d| !d.is_zero())
    }

    /// Sleeps until `rec_ns` is due, in slices, staying responsive to stop and pause.
    fn pace(&mut self, rec_ns: u64) {
        loop {
            if self.stop.load(Ordering::Relaxed) || self.control.rewind_pending() {
                return;
            }
            // A skip (or a rewind's) goes on while paused: it stops where it was asked to.
            let skipping = rec_ns < self.control.skip_until_ns.load(Ordering::Relaxed);
            if self.paused.load(Ordering::Relaxed) && !skipping {
                let t = Instant::now();
                std::thread::sleep(Duration::from_millis(20));
                if let Some((_, at, _)) = &mut self.base {
                    *at += t.elapsed();
                }
                continue;
            }
            match self.wait_for(rec_ns) {
                Some(d) => std::thread::sleep(d.min(Duration::from_millis(20))),
                None => return,
            }
        }
    }
}

/// Recorded time a call counts at: when it completed as its side measures it.
pub fn call_time(call: &Call) -> u64 {
    call.start_ns.saturating_add(call.latency_ns)
}

/// The pipeline's sink when the TUI runs: batches calls and hands everything to the UI thread
/// without ever blocking.
// Calls are boxed on purpose (see `UiMsg::Calls`).
#[allow(clippy::vec_box)]
pub struct TuiSink {
    tx: SyncSender<UiMsg>,
    batch: Vec<Box<Call>>,
    /// The endpoint row of each call of `batch`.
    batch_rows: Vec<Option<RowRef>>,
    batch_since: Instant,
    /// Calls not handed over (UI behind or gone).
    dropped: u64,
    dropped_reported: u64,
    pacer: Option<Pacer>,
    /// Messages other than calls that did not fit yet.
    pending: std::collections::VecDeque<UiMsg>,
    /// The last interval's flow report has parts still to come (`Sink::flow_part`): they
    /// follow it to the UI.
    parts_follow: bool,
    /// Calls the UI is done with, handed back to be freed here (see [`CallReturner`]).
    returned: Option<Receiver<Vec<Box<Call>>>>,
    /// A session's meta came: another means the replay started over.
    met: bool,
    /// The Calls filter the UI sets and the pipeline applies (`Sink::live_call_filter`).
    live_filter: Arc<crate::pipeline::LiveCallFilter>,
    /// Where the `P` key asks for a profile (`Sink::profile_requests`).
    profile_requests: crate::profile::trigger::ProfileRequests,
}

/// Batches of calls the UI handed back, in flight at most (past that the UI frees them).
const RETURNED_CAP: usize = 8;

/// The UI's end of the way back for calls it no longer keeps (pushed out of its list of the
/// last `CALL_RING`). A call's strings and heads (about six blocks) are made on the
/// collector's thread; freed on the UI's, each block went back to its page through the
/// allocator's cross-thread list and was collected again by the making thread: dropping calls
/// was an eighth of ebtop's CPU under load in the terminal UI. Handed back in batches, they are
/// freed where they were made, and the batches' buffers carry the next calls (a buffer
/// the UI had to grow itself, now and then, is the one thing freed across).
#[derive(Debug, Default)]
#[allow(clippy::vec_box)] // see `UiMsg::Calls`
pub struct CallReturner {
    tx: Option<SyncSender<Vec<Box<Call>>>>,
    held: Vec<Box<Call>>,
    /// An emptied batch of the collector's, to hold the next calls handed back.
    spare: Option<Vec<Box<Call>>>,
}

impl CallReturner {
    pub fn new(tx: SyncSender<Vec<Box<Call>>>) -> CallReturner {
        CallReturner {
            tx: Some(tx),
            held: Vec::new(),
            spare: None,
        }
    }

    /// `call` is no longer shown: handed back (without a way back, freed here).
    pub fn give_back(&mut self, call: Box<Call>) {
        if self.tx.is_none() {
            return;
        }
        if self.held.capacity() == 0 {
            self.held = self.spare.take().unwrap_or_default();
        }
        self.held.push(call);
        if self.held.len() >= BATCH_MAX {
            self.send();
        }
    }

    /// An emptied batch buffer, to carry calls back.
    pub fn spare(&mut self, mut batch: Vec<Box<Call>>) {
        if self.tx.is_some() && self.spare.is_none() && batch.capacity() >= BATCH_MAX {
            batch.clear();
            self.spare = Some(batch);
        }
    }

    fn send(&mut self) {
        let Some(tx) = &self.tx else { return };
        let calls = std::mem::take(&mut self.held);
        match tx.try_send(calls) {
            // Full: the collector is behind; these are freed here.
            Ok(()) | Err(TrySendError::Full(_)) => {}
            Err(TrySendError::Disconnected(_)) => self.tx = None,
        }
    }
}

impl TuiSink {
    pub fn new(tx: SyncSender<UiMsg>) -> TuiSink {
        TuiSink {
            tx,
            batch: Vec::new(),
            batch_rows: Vec::new(),
            batch_since: Instant::now(),
            dropped: 0,
            dropped_reported: 0,
            pacer: None,
            pending: std::collections::VecDeque::new(),
            parts_follow: false,
            returned: None,
            met: false,
            live_filter: Arc::default(),
            profile_requests: Arc::default(),
        }
    }

    /// Shares `live` as the Calls filter (a replay started over keeps the UI's).
    pub fn with_live_filter(mut self, live: Arc<crate::pipeline::LiveCallFilter>) -> TuiSink {
        self.live_filter = live;
        self
    }

    /// Where the UI's `P` key asks for a profile (`UiOptions::profile_requests`).
    pub fn profile_requests(&self) -> crate::profile::trigger::ProfileRequests {
        Arc::clone(&self.profile_requests)
    }

    /// The Calls filter's shared end, for the UI (`UiOptions::live_filter`).
    pub fn live_filter(&self) -> Arc<crate::pipeline::LiveCallFilter> {
        Arc::clone(&self.live_filter)
    }

    /// The way back for the calls the UI is done with (see [`CallReturner`]): for the UI's
    /// `UiOptions::call_returner`.
    pub fn call_returner(&mut self) -> SyncSender<Vec<Box<Call>>> {
        let (tx, rx) = std::sync::mpsc::sync_channel(RETURNED_CAP);
        self.returned = Some(rx);
        tx
    }

    /// Frees the calls the UI handed back; one of their emptied buffers, if any came.
    #[allow(clippy::vec_box)] // see `UiMsg::Calls`
    fn free_returned(&mut self) -> Option<Vec<Box<Call>>> {
        let rx = self.returned.as_ref()?;
        let mut buffer = None;
        while let Ok(mut calls) = rx.try_recv() {
            calls.clear();
            buffer = Some(calls);
        }
        buffer
    }

    /// Replays at the recorded pace.
    pub fn with_pacer(mut self, pacer: Pacer) -> TuiSink {
        self.pacer = Some(pacer);
        self
    }

    /// Calls not handed to the UI so far.
    pub fn dropped(&self) -> u64 {
        self.dropped
    }

    /// Hands `msg` over without waiting. A call batch that does not fit is dropped and
    /// counted; anything else (meta, reports, losses, the end) is kept and sent first next
    /// time, so only calls are ever lost to a slow UI.
    fn send(&mut self, msg: UiMsg) -> bool {
        if !self.retry_pending() {
            return self.keep(msg);
        }
        match self.tx.try_send(msg) {
            Ok(()) => true,
            Err(TrySendError::Full(m)) => self.keep(m),
            Err(TrySendError::Disconnected(m)) => {
                if let UiMsg::Calls(c, _) = m {
                    self.dropped += c.len() as u64;
                }
                false
            }
        }
    }

    fn keep(&mut self, m: UiMsg) -> bool {
        match m {
            UiMsg::Calls(c, _) => self.dropped += c.len() as u64,
            UiMsg::Dropped(_) => {}
            m => {
                if self.pending.len() >= PENDING_MAX {
                    self.pending.pop_front();
                }
                self.pending.push_back(m);
            }
        }
        false
    }

    /// Sends what was kept back; true when nothing is left.
    fn retry_pending(&mut self) -> bool {
        while let Some(m) = self.pending.pop_front() {
            match self.tx.try_send(m) {
                Ok(()) => {}
                Err(TrySendError::Full(m)) => {
                    self.pending.push_front(m);
                    return false;
                }
                Err(TrySendError::Disconnected(_)) => {
                    self.pending.clear();
                    return true;
                }
            }
        }
        true
    }

    fn send_batch(&mut self) {
        let returned = self.free_returned();
        if !self.batch.is_empty() {
            // The next batch gets at least the room this one needed (a buffer the UI handed
            // back, else a new one): grown from empty by doubling, a batch was reallocated up
            // to nine times, which showed as a tenth of the capture thread's samples with a
            // flush every 10 ms (when calls were moved into it whole).
            let room = self.batch.len().min(BATCH_MAX);
            let next = returned
                .filter(|b| b.capacity() >= room)
                .unwrap_or_else(|| Vec::with_capacity(room));
            let batch = std::mem::replace(&mut self.batch, next);
            let rows = std::mem::replace(&mut self.batch_rows, Vec::with_capacity(room));
            self.send(UiMsg::Calls(batch, rows));
        }
        self.batch_since = Instant::now();
        if self.dropped != self.dropped_reported && self.send(UiMsg::Dropped(self.dropped)) {
            self.dropped_reported = self.dropped;
        }
    }

    fn pace(&mut self, rec_ns: u64) {
        if let Some(p) = &mut self.pacer {
            if p.wait_for(rec_ns).is_some() || p.paused.load(Ordering::Relaxed) {
                self.send_batch();
                if let Some(p) = &mut self.pacer {
                    p.pace(rec_ns);
                }
            }
        }
    }

    /// Batches `call` (counted in endpoint row `row`), handing the batch over when full or
    /// old enough.
    fn batch_call(&mut self, call: Call, row: Option<RowRef>) -> io::Result<()> {
        self.pace(call_time(&call));
        self.batch.push(Box::new(call));
        self.batch_rows.push(row);
        if self.batch.len() >= BATCH_MAX
            || (self.batch.len().is_multiple_of(AGE_CHECK_EVERY)
                && self.batch_since.elapsed() >= BATCH_AGE)
        {
            self.send_batch();
        }
        Ok(())
    }

    fn send_report(&mut self, r: IntervalReport) {
        self.send_batch();
        self.send(UiMsg::Interval(Box::new(r)));
    }
}

impl Sink for TuiSink {
    fn meta(&mut self, meta: &SessionMeta) -> io::Result<()> {
        if self.met {
            // A replay started over (the viewer went back in time): what was batched belongs
            // to the replay abandoned.
            self.batch.clear();
            self.batch_rows.clear();
            self.parts_follow = false;
            self.send(UiMsg::Restart);
        }
        self.met = true;
        self.send(UiMsg::Meta(Box::new(meta.clone())));
        Ok(())
    }

    fn process(&mut self, info: &ProcInfo) -> io::Result<()> {
        // The UI only shows the arguments: it gets them with their secrets redacted.
        let mut info = info.clone();
        info.cmdline = crate::protocols::redact::redact_args(&info.cmdline);
        self.send(UiMsg::Process(Box::new(info)));
        Ok(())
    }

    fn call(&mut self, call: &Call) -> io::Result<()> {
        self.call_owned(call.clone())
    }

    fn keeps_calls(&self) -> bool {
        true
    }

    fn wants_windows(&self) -> bool {
        true
    }

    fn wants_endpoints_by_process(&self) -> bool {
        true
    }

    fn live_call_filter(&self) -> Option<Arc<crate::pipeline::LiveCallFilter>> {
        Some(self.live_filter())
    }

    fn profile_requests(&self) -> Option<crate::profile::trigger::ProfileRequests> {
        Some(TuiSink::profile_requests(self))
    }

    fn call_in(&mut self, call: &Call, row: RowRef) -> io::Result<()> {
        self.call_owned_in(call.clone(), row)
    }

    fn call_owned(&mut self, call: Call) -> io::Result<()> {
        self.batch_call(call, None)
    }

    fn call_owned_in(&mut self, call: Call, row: RowRef) -> io::Result<()> {
        self.batch_call(call, Some(row))
    }

    fn lost(&mut self, mono_ns: u64, loss: &crate::sink::Loss) -> io::Result<()> {
        self.pace(mono_ns);
        self.send_batch();
        // The header's loss count: records dropped and probe runs skipped alike.
        self.send(UiMsg::Lost {
            events: loss.events + loss.missed_runs,
            bytes: loss.bytes,
        });
        Ok(())
    }

    fn warning(&mut self, mono_ns: u64, w: &crate::sink::Warning) -> io::Result<()> {
        self.pace(mono_ns);
        self.send_batch();
        self.send(UiMsg::Warning(Box::new(w.clone())));
        Ok(())
    }

    fn interval(&mut self, report: &IntervalReport) -> io::Result<()> {
        self.interval_owned(report.clone())
    }

    fn interval_owned(&mut self, report: IntervalReport) -> io::Result<()> {
        self.pace(report.mono_ns);
        self.parts_follow = report.flows.as_ref().is_some_and(|f| f.more);
        self.send_report(report);
        Ok(())
    }

    fn flow_part(&mut self, part: crate::flows::FlowReport) -> io::Result<()> {
        if self.parts_follow {
            self.parts_follow = part.more;
            self.send(UiMsg::FlowPart(Box::new(part)));
        }
        Ok(())
    }

    fn flush(&mut self) -> io::Result<()> {
        self.send_batch();
        Ok(())
    }

    fn summary(&mut self, summary: &Summary) -> io::Result<()> {
        self.send_batch();
        self.send(UiMsg::Ended(Box::new(summary.clone())));
        Ok(())
    }
}

/// How the UI starts.
#[derive(Debug, Clone)]
pub struct UiOptions {
    /// "live" or "replay FILE".
    pub source_label: String,
    pub refresh: Duration,
    pub no_color: bool,
    /// Live: the header shows the uptime from the current clock.
    pub live: bool,
    /// Set while the display is paused (a replay's pacer waits on it).
    pub paused: Arc<AtomicBool>,
    /// A replay's pace and skips, changed by keys.
    pub replay: Option<Arc<ReplayControl>>,
    /// Times in UTC instead of the local zone (`--utc`).
    pub utc: bool,
    /// Where the calls the UI is done with go (`TuiSink::call_returner`).
    pub call_returner: Option<SyncSender<Vec<Box<Call>>>>,
    /// The Calls filter the collector's pipeline applies (`TuiSink::live_filter`).
    pub live_filter: Option<Arc<crate::pipeline::LiveCallFilter>>,
    /// Live with `--profile`: where the `P` key asks for a profile.
    pub profile_requests: Option<crate::profile::trigger::ProfileRequests>,
    /// `--filter`, as given: shown in the header.
    pub call_filter: Option<String>,
    /// `-w FILE`: the header marks the recording with its size.
    pub recording: Option<std::path::PathBuf>,
    /// `--prometheus`: where the metrics are served (the header says so).
    pub metrics: Option<std::net::SocketAddr>,
}

pub use terminal::{restore_terminal, TerminalGuard};

/// Runs the UI on this thread until the user quits, `stop` is set or the terminal goes away.
/// Drawing errors once ebtop is stopping (a terminal gone or taking no output) are not errors:
/// the way out is the same as for a signal.
pub fn run_ui(
    rx: Receiver<UiMsg>,
    tx_for_input: SyncSender<UiMsg>,
    stop: &Arc<AtomicBool>,
    opts: UiOptions,
) -> anyhow::Result<()> {
    let mut out =
        io::BufWriter::with_capacity(64 * 1024, terminal::TtyWriter::new(Arc::clone(stop)));
    let guard = TerminalGuard::enter(&mut out)?;
    let backend = ratatui::backend::CrosstermBackend::new(out);
    let mut term = ratatui::Terminal::new(backend)?;
    let mut app = App::new(&opts.source_label, opts.refresh, opts.no_color);
    if let Some(tx) = opts.call_returner.clone() {
        app.set_call_returner(CallReturner::new(tx));
    }
    app.replay = opts.replay.clone();
    app.live_filter = opts.live_filter.clone();
    app.profile_requests = opts.profile_requests.clone();
    app.fixed_filter = opts.call_filter.clone();
    app.metrics = opts.metrics;
    let recording_size = |path: &std::path::Path| std::fs::metadata(path).map_or(0, |m| m.len());
    app.recording = opts
        .recording
        .as_ref()
        .map(|p| (p.display().to_string(), recording_size(p)));
    if !opts.utc {
        // Asked at each instant shown, not once now: a summer recording replayed in winter
        // shows the summer offset.
        app.zone = crate::clock::TimeZone::Local;
    }
    let size = term.size()?;
    app.set_size(size.width, size.height);

    // Keys are never dropped: the input thread waits for room, until the UI leaves.
    let input = input::TtyInput::spawn(move |i, ending| {
        let msg = match i {
            input::Input::Key(k) => UiMsg::Key(k),
            input::Input::Resize(w, h) => UiMsg::Resize(w, h),
            input::Input::TerminalLost(why) => UiMsg::TerminalLost(why),
            input::Input::Failed(why) => UiMsg::InputFailed(why),
        };
        input::send_waiting(&tx_for_input, msg, ending)
    })?;

    let result = (|| -> anyhow::Result<()> {
        if input::debug_panic_requested("ui") {
            panic!("injected panic in the UI thread (EBTOP_DEBUG_PANIC=ui)");
        }
        let mut dirty = true;
        let mut now_draw = true;
        let mut last_draw = Instant::now();
        loop {
            if stop.load(Ordering::Relaxed) {
                return Ok(());
            }
            if now_draw || (dirty && last_draw.elapsed() >= app.refresh) {
                if opts.live {
                    app.clock_ns = Some(crate::clock::monotonic_ns());
                }
                if let (Some(path), Some((_, size))) = (&opts.recording, &mut app.recording) {
                    *size = recording_size(path);
                }
                if let Err(e) = term.draw(|f| render::draw(f, &app)) {
                    if stop.load(Ordering::Relaxed) {
                        return Ok(());
                    }
                    return Err(anyhow::Error::new(e).context("drawing on the terminal failed"));
                }
                last_draw = Instant::now();
                dirty = false;
                now_draw = false;
            }
            let wait = if dirty {
                app.refresh.saturating_sub(last_draw.elapsed())
            } else if opts.live {
                // The uptime moves on.
                Duration::from_secs(1).saturating_sub(last_draw.elapsed())
            } else {
                // At rest (a replay's end, paused): nothing moves until a message comes; the
                // bound only re-checks `stop`.
                Duration::from_secs(1)
            };
            let msg = match rx.recv_timeout(wait.max(Duration::from_millis(1))) {
                Ok(m) => m,
                Err(RecvTimeoutError::Timeout) => {
                    if opts.live && last_draw.elapsed() >= Duration::from_secs(1) {
                        dirty = true;
                    }
                    continue;
                }
                Err(RecvTimeoutError::Disconnected) => return Ok(()),
            };
            let mut next = Some(msg);
            // Take what is queued, up to a bound, before drawing.
            let mut n = 0;
            while let Some(m) = next.take() {
                match m {
                    // Same way out as SIGHUP: the collector stops, the recording is closed.
                    UiMsg::TerminalLost(_) => {
                        stop.store(true, Ordering::SeqCst);
                        return Ok(());
                    }
                    UiMsg::InputFailed(why) => {
                        stop.store(true, Ordering::SeqCst);
                        anyhow::bail!("{why}");
                    }
                    _ => {}
                }
                let is_input = matches!(m, UiMsg::Key(_) | UiMsg::Resize(..));
                match app.apply(m) {
                    Action::Quit => return Ok(()),
                    Action::Redraw => now_draw = true,
                    Action::None if is_input => {}
                    Action::None => dirty = true,
                }
                opts.paused.store(app.paused(), Ordering::Relaxed);
                n += 1;
                if n < 4096 && !now_draw {
                    next = rx.try_recv().ok();
                }
            }
        }
    })();
    // Unblocks a replay waiting on a pause.
    opts.paused.store(false, Ordering::Relaxed);
    drop(rx);
    input.stop();
    drop(term);
    drop(guard);
    result
}

/// Replays a recording (as fast as possible) through a pipeline with a [`TuiSink`] and returns
/// what the UI would have received: for tests and for rendering a recording without a terminal.
/// Bytes of each request and response head the TUI keeps for the call details: the whole
/// captured head (the largest snaplen). What the Calls view holds in all is bounded by
/// `data::HEAD_BUDGET`.
pub const KEEP_HEAD_BYTES: usize = 16384;

pub fn collect_replay(path: &std::path::Path) -> anyhow::Result<Vec<UiMsg>> {
    collect_replay_filtered(path, Arc::default())
}

/// [`collect_replay`] with the UI's Calls filter `live` applied by the pipeline.
pub fn collect_replay_filtered(
    path: &std::path::Path,
    live: Arc<crate::pipeline::LiveCallFilter>,
) -> anyhow::Result<Vec<UiMsg>> {
    let mut reader = crate::record::reader::open(path)?;
    let meta = crate::driver::replay::replay_meta(&reader);
    let (tx, rx) = std::sync::mpsc::sync_channel(1 << 20);
    let sink = TuiSink::new(tx).with_live_filter(live);
    let mut pipeline = crate::pipeline::Pipeline::new(
        crate::conntrack::TrackerConfig {
            keep_head: KEEP_HEAD_BYTES,
            ..Default::default()
        },
        crate::procinfo::ProcessTable::new(false),
        sink,
    );
    let o = &reader.header.options;
    if o.serving_links {
        pipeline =
            pipeline.with_serving_links(crate::profile::serving::retain_for_delay(o.delay_ns));
    }
    pipeline.start(&meta)?;
    let stop = AtomicBool::new(false);
    let end = crate::driver::replay::run(&mut reader, &mut pipeline, &stop)?;
    pipeline.finish(&end.kernel, end.duration_ns)?;
    Ok(rx.try_iter().collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    pub(crate) const FIXTURE: &str = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/fixtures/recordings/http_mix.ebt"
    );

    #[test]
    fn replay_gives_meta_calls_reports_and_end() {
        let msgs = collect_replay(FIXTURE.as_ref()).unwrap();
        assert!(matches!(msgs.first(), Some(UiMsg::Meta(_))));
        assert!(matches!(msgs.last(), Some(UiMsg::Ended(_))));
        let calls: usize = msgs
            .iter()
            .map(|m| match m {
                UiMsg::Calls(c, _) => c.len(),
                _ => 0,
            })
            .sum();
        assert_eq!(calls, 62);
        let reports: Vec<&IntervalReport> = msgs
            .iter()
            .filter_map(|m| match m {
                UiMsg::Interval(r) => Some(&**r),
                _ => None,
            })
            .collect();
        assert!(!reports.is_empty());
        let in_reports: u64 = reports
            .iter()
            .flat_map(|r| r.endpoints.iter().map(|e| e.calls))
            .sum();
        assert_eq!(in_reports, 62, "every call is in exactly one interval");
    }

    /// The first call of the fixture recording.
    fn first_fixture_call() -> Box<Call> {
        collect_replay(FIXTURE.as_ref())
            .unwrap()
            .into_iter()
            .find_map(|m| match m {
                UiMsg::Calls(c, _) => c.into_iter().next(),
                _ => None,
            })
            .unwrap()
    }

    #[test]
    fn a_full_channel_drops_and_counts_call_batches_without_blocking() {
        let call = first_fixture_call();
        let (tx, rx) = std::sync::mpsc::sync_channel(2);
        let mut sink = TuiSink::new(tx);
        for _ in 0..10 {
            sink.call(&call).unwrap();
            sink.flush().unwrap();
        }
        // Two batches got in, the other eight were dropped and counted.
        assert_eq!(sink.dropped(), 8);
        // A report that does not fit is kept back, not dropped.
        sink.lost(
            0,
            &crate::sink::Loss {
                events: 3,
                bytes: 300,
                missed_runs: 0,
            },
        )
        .unwrap();
        let got: Vec<UiMsg> = rx.try_iter().collect();
        assert_eq!(got.len(), 2);
        sink.flush().unwrap();
        assert!(matches!(
            rx.try_recv(),
            Ok(UiMsg::Lost {
                events: 3,
                bytes: 300
            })
        ));
        // Once there is room again, the count reaches the UI.
        sink.flush().unwrap();
        assert!(matches!(rx.try_recv(), Ok(UiMsg::Dropped(8))));
        // The UI gone: nothing blocks or fails.
        drop(rx);
        sink.call(&call).unwrap();
        sink.flush().unwrap();
        assert_eq!(sink.dropped(), 9);
    }

    #[test]
    fn calls_pushed_out_of_the_list_go_back_to_the_collector_to_be_freed() {
        let call = first_fixture_call();
        let (tx, rx) = std::sync::mpsc::sync_channel(CHANNEL_CAP);
        let mut sink = TuiSink::new(tx);
        let mut app = app::App::new("test", Duration::from_secs(1), true);
        app.set_call_returner(CallReturner::new(sink.call_returner()));
        let ring = data::CALL_RING;
        let n = ring + 3 * BATCH_MAX + 7;
        for _ in 0..n {
            sink.call(&call).unwrap();
        }
        sink.flush().unwrap();
        for m in rx.try_iter() {
            app.apply(m);
        }
        assert_eq!(app.shown().calls.len(), ring);
        assert_eq!(app.shown().total_calls(), n as u64);
        // Every call pushed out is on its way back, in full batches (7 wait for more).
        let back: Vec<usize> = sink
            .returned
            .as_ref()
            .unwrap()
            .try_iter()
            .map(|b| b.len())
            .collect();
        assert_eq!(back, vec![BATCH_MAX; 3]);
        // The buffers go round: a batch the UI emptied carries calls back, and the collector
        // frees those calls and fills the buffer with new ones.
        let batch = vec![call.clone(); BATCH_MAX];
        let batch_at = batch.as_ptr() as usize;
        app.apply(UiMsg::Calls(batch, vec![]));
        app.apply(UiMsg::Calls(vec![call.clone(); BATCH_MAX], vec![]));
        app.apply(UiMsg::Calls(vec![call.clone(); BATCH_MAX], vec![]));
        sink.call(&call).unwrap();
        sink.flush().unwrap();
        assert!(sink.returned.as_ref().unwrap().try_recv().is_err());
        assert_eq!(sink.batch.as_ptr() as usize, batch_at);
        assert!(sink.batch.is_empty() && sink.batch.capacity() >= BATCH_MAX);
        // The collector gone: the UI frees what it pushes out itself, and goes on.
        drop(sink);
        drop(rx);
        app.apply(UiMsg::Calls(vec![call; 2 * BATCH_MAX], vec![]));
        assert_eq!(app.shown().calls.len(), ring);
    }

    #[test]
    fn a_report_handed_over_by_value_reaches_the_ui_without_a_copy() {
        let flows = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/tests/fixtures/recordings/flows_mix.ebt"
        );
        let mut with_flows = collect_replay(flows.as_ref())
            .unwrap()
            .into_iter()
            .filter_map(|m| match m {
                UiMsg::Interval(r) if r.flows.as_ref().is_some_and(|f| !f.flows.is_empty()) => {
                    Some(*r)
                }
                _ => None,
            });
        let report = with_flows.next().expect("the fixture reports flows");
        let flows_at = |r: &IntervalReport| r.flows.as_ref().map(|f| f.flows.as_ptr());
        let sent_at = flows_at(&report);
        let (tx, rx) = std::sync::mpsc::sync_channel(4);
        let mut sink = TuiSink::new(tx);
        sink.interval(&report).unwrap();
        sink.interval_owned(report).unwrap();
        let got: Vec<IntervalReport> = rx
            .try_iter()
            .filter_map(|m| match m {
                UiMsg::Interval(r) => Some(*r),
                _ => None,
            })
            .collect();
        assert_eq!(got.len(), 2);
        assert_eq!(got[0], got[1], "the same report either way");
        assert_ne!(flows_at(&got[0]), sent_at, "by reference: a copy");
        assert_eq!(flows_at(&got[1]), sent_at, "by value: the flows themselves");
    }

    /// An interval whose flow report comes in parts reaches the UI at once with its first
    /// part, and the others follow it in order.
    #[test]
    fn an_interval_whose_flows_come_in_parts_reaches_the_ui_part_by_part() {
        use crate::flows::{test_reports, FLOWS_PER_PART};
        let whole = test_reports::numbered(7, 5_000, 2_000, 3);
        let mut parts = test_reports::owned_parts(&whole, FLOWS_PER_PART).into_iter();
        let report = IntervalReport {
            mono_ns: 7,
            period_ns: 1,
            endpoints: vec![],
            processes: vec![],
            overhead: None,
            totals: Summary::default(),
            open_connections: 0,
            flows: parts.next(),
            windows: None,
            conns: None,
            sampling: None,
            profile: None,
            profile_status: None,
        };
        let (tx, rx) = std::sync::mpsc::sync_channel(8);
        let mut sink = TuiSink::new(tx);
        sink.interval_owned(report).unwrap();
        for part in parts {
            sink.flow_part(part).unwrap();
        }
        let mut got = rx.try_iter();
        let mut back = match got.next() {
            Some(UiMsg::Interval(r)) => r.flows.unwrap(),
            _ => panic!("the interval first"),
        };
        for m in got {
            match m {
                UiMsg::FlowPart(p) => back.append_part(*p),
                _ => panic!("only parts after the interval"),
            }
        }
        assert_eq!(back, whole);
        // A part after the last (or with no interval before it: after a rewind) is dropped.
        sink.flow_part(whole).unwrap();
        assert!(rx.try_recv().is_err());
    }

    /// A Calls filter kept with Enter goes to the pipeline, and a replay is read again from
    /// its start: the list then holds the file's matching calls from its first, while every
    /// count stays over all calls.
    #[test]
    fn a_kept_calls_filter_is_applied_by_the_pipeline_from_the_start_of_a_replay() {
        let all: Vec<Box<Call>> = collect_replay(FIXTURE.as_ref())
            .unwrap()
            .into_iter()
            .flat_map(|m| match m {
                UiMsg::Calls(c, _) => c,
                _ => Vec::new(),
            })
            .collect();
        let failed = |c: &Call| c.l7.status.is_some_and(|s| s >= 500);
        let want: Vec<&Call> = all.iter().map(|c| &**c).filter(|c| failed(c)).collect();
        assert!(!want.is_empty() && want.len() < all.len());

        let live = Arc::new(crate::pipeline::LiveCallFilter::default());
        let control = Arc::new(ReplayControl::new(1.0));
        let mut app = app::App::new("test", Duration::from_secs(1), true);
        app.live_filter = Some(Arc::clone(&live));
        app.replay = Some(Arc::clone(&control));
        for m in collect_replay(FIXTURE.as_ref()).unwrap() {
            app.apply(m);
        }
        for c in "/status>=500".chars() {
            app.handle_key(KeyEvent::from(crossterm::event::KeyCode::Char(c)));
        }
        assert!(live.get().is_none(), "not while typing");
        assert!(!control.rewind_pending());
        app.handle_key(KeyEvent::from(crossterm::event::KeyCode::Enter));
        assert_eq!(
            live.get().map(|f| f.text().to_owned()),
            Some("status>=500".into())
        );
        assert!(control.rewind_pending(), "the replay is read again");

        // What the replay read again hands over.
        app.apply(UiMsg::Restart);
        for m in collect_replay_filtered(FIXTURE.as_ref(), Arc::clone(&live)).unwrap() {
            app.apply(m);
        }
        let kept: Vec<&Call> = app.shown().calls.iter().map(|e| &*e.call).collect();
        assert_eq!(kept, want);
        assert_eq!(app.shown().total_calls(), all.len() as u64);
        assert_eq!(app.rows().len(), want.len());

        // Esc clears it: every call is handed over again.
        app.handle_key(KeyEvent::from(crossterm::event::KeyCode::Char('/')));
        app.handle_key(KeyEvent::from(crossterm::event::KeyCode::Esc));
        assert!(live.get().is_none());
    }

    #[test]
    fn pacer_follows_recorded_time_divided_by_speed() {
        let stop = Arc::new(AtomicBool::new(false));
        let paused = Arc::new(AtomicBool::new(false));
        let control = Arc::new(ReplayControl::new(10.0));
        let mut p = Pacer::new(Arc::clone(&control), Arc::clone(&stop), paused);
        let t = Instant::now();
        p.pace(1_000_000_000);
        // 200 ms of recorded time at 10x: 20 ms.
        p.pace(1_200_000_000);
        let e = t.elapsed();
        assert!(e >= Duration::from_millis(19), "{e:?}");
        assert!(e < Duration::from_secs(5), "{e:?}");
        // A skip forward replays up to its point at once, then the pace goes on from there.
        control.skip_to(100_000_000_000);
        let t = Instant::now();
        p.pace(50_000_000_000);
        p.pace(99_000_000_000);
        assert!(t.elapsed() < Duration::from_secs(2), "skipped, not paced");
        // Faster: 10 s of recorded time at 10000x is 1 ms, not 1 s.
        control.scale_speed(1000.0);
        assert_eq!(control.speed(), 10_000.0);
        let t = Instant::now();
        p.pace(100_000_000_000);
        p.pace(110_000_000_000);
        assert!(t.elapsed() >= Duration::from_millis(1));
        control.scale_speed(1e12);
        assert_eq!(control.speed(), MAX_SPEED);
        control.scale_speed(1e-12);
        assert_eq!(control.speed(), MIN_SPEED);
        // Stopping ends any wait at once.
        stop.store(true, Ordering::Relaxed);
        let t = Instant::now();
        p.pace(1_000_000_000_000);
        assert!(t.elapsed() < Duration::from_secs(2));
    }
}
