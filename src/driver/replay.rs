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
    let result = reader.for_each(|item| {
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
                pipeline.on_interval(iv.mono_ns, &iv.kernel, None)?;
                kernel = iv.kernel;
            }
            Item::Flows(report) => pipeline.set_flows(*report)?,
            Item::ProcEvent(raw) => pipeline.on_proc_record(raw)?,
            Item::End(e) => end = Some(e),
        }
        Ok(())
    });
    let stopped = match result {
        Ok(()) => false,
        Err(e) if e.is::<Stop>() => true,
        Err(e) => return Err(e),
    };
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
