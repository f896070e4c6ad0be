//! The ebtop binary: argument parsing and wiring; the work is in the library.

use std::io::{self, IsTerminal};
use std::process::ExitCode;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;

use anyhow::{bail, Result};
use clap::Parser;

use ebtop::cli::{Args, Depth};
use ebtop::clock::{monotonic_ns, WallClock};
use ebtop::conntrack::TrackerConfig;
use ebtop::pipeline::Pipeline;
use ebtop::procinfo::ProcessTable;
use ebtop::protocols::ParseDepth;
use ebtop::session::{Filters, SessionMeta};
use ebtop::sink::json::JsonSink;
use ebtop::source::live::{self, LiveConfig, StopReason};

fn main() -> ExitCode {
    let args = Args::parse();
    match run(args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            if let Some(ioe) = e.downcast_ref::<io::Error>() {
                if ioe.kind() == io::ErrorKind::BrokenPipe {
                    return ExitCode::SUCCESS;
                }
            }
            eprintln!("ebtop: error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

fn run(args: Args) -> Result<()> {
    if !args.json {
        if !io::stdout().is_terminal() {
            bail!("stdout is not a terminal: use --json for machine-readable output");
        }
        bail!("the terminal UI is not in this build yet: use --json");
    }
    let stop = Arc::new(AtomicBool::new(false));
    for sig in [
        signal_hook::consts::SIGINT,
        signal_hook::consts::SIGTERM,
        signal_hook::consts::SIGHUP,
    ] {
        signal_hook::flag::register(sig, Arc::clone(&stop))?;
    }
    let filters = Filters {
        pid: args.pid,
        comm: args.comm.clone(),
        port: args.port,
    };
    let clock = WallClock::live();
    let meta = SessionMeta::this_host("live", args.snaplen, filters.clone(), clock.offset_ns);
    let cfg = TrackerConfig {
        depth: match args.depth {
            Depth::Shallow => ParseDepth::Shallow,
            Depth::Full => ParseDepth::Full,
        },
        ..TrackerConfig::default()
    };
    let stdout = io::BufWriter::with_capacity(64 * 1024, io::stdout().lock());
    let pipeline = Pipeline::new(cfg, ProcessTable::new(true), JsonSink::new(stdout));
    let live_cfg = LiveConfig {
        snaplen: args.snaplen,
        ringbuf_bytes: args.ringbuf_mb * 1024 * 1024,
        capture_all: args.capture_all,
        filters,
        verbose: args.verbose,
    };
    let start = monotonic_ns();
    live::run(
        &live_cfg,
        pipeline,
        &stop,
        args.duration,
        args.delay,
        &meta,
        |pipeline, counters, reason| {
            if reason == StopReason::OutputClosed {
                return Ok(());
            }
            match pipeline.finish(counters, monotonic_ns() - start) {
                Ok(_) => Ok(()),
                Err(e) if e.kind() == io::ErrorKind::BrokenPipe => Ok(()),
                Err(e) => Err(e.into()),
            }
        },
    )
}
