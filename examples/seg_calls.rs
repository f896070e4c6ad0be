//! Prints the calls ebtop finds in a `.seg` fixture (real traffic captured per syscall) as JSON
//! lines, optionally with the payload cut at a snaplen — handy when adding a fixture or a parser.
//!
//!     cargo run --example seg_calls -- src/protocols/http1/fixtures/wrk_nginx.seg [SNAPLEN]

use anyhow::{Context, Result};

use ebtop::conntrack::TrackerConfig;
use ebtop::event::{EventBuilder, EventKind};
use ebtop::filters::Filters;
use ebtop::kernel_counters::KernelCounters;
use ebtop::pipeline::Pipeline;
use ebtop::procinfo::ProcessTable;
use ebtop::segfile::SegFile;
use ebtop::session_meta::SessionMeta;
use ebtop::sink::json::JsonSink;

fn main() -> Result<()> {
    let mut args = std::env::args().skip(1);
    let path = args.next().context("usage: seg_calls FILE.seg [SNAPLEN]")?;
    let snaplen = args
        .next()
        .map(|s| s.parse())
        .transpose()
        .context("SNAPLEN is a number")?;
    let seg = SegFile::parse(&std::fs::read(&path).with_context(|| path.clone())?)?;
    let out = std::io::stdout().lock();
    let mut p = Pipeline::new(
        TrackerConfig::default(),
        ProcessTable::new(false),
        JsonSink::new(out),
    );
    p.start(&SessionMeta::this_host(
        "replay",
        snaplen.unwrap_or(0) as u32,
        Filters::default(),
        0,
    ))?;
    for rec in seg.records(1, snaplen) {
        p.on_record(&rec)?;
    }
    p.on_record(
        &EventBuilder::lifecycle(EventKind::Close, 1)
            .times(u64::MAX / 4, u64::MAX / 4)
            .build(b""),
    )?;
    p.finish(&KernelCounters::default(), 0)?;
    Ok(())
}
