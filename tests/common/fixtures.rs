//! Captured-traffic fixtures (tests/fixtures/<protocol>/*.seg) run through the whole
//! user-space pipeline, as the protocol fixture tests do.

use std::io;

use ebtop::call::Call;
use ebtop::conntrack::TrackerConfig;
use ebtop::event::{EventBuilder, EventKind};
use ebtop::pipeline::Pipeline;
use ebtop::procinfo::{ProcInfo, ProcessTable};
use ebtop::segfile::SegFile;
use ebtop::session::{KernelCounters, SessionMeta, Summary};
use ebtop::sink::Sink;

/// A sink that keeps the calls.
#[derive(Default)]
pub struct Collect(pub Vec<Call>);

impl Sink for Collect {
    fn meta(&mut self, _: &SessionMeta) -> io::Result<()> {
        Ok(())
    }
    fn process(&mut self, _: &ProcInfo) -> io::Result<()> {
        Ok(())
    }
    fn call(&mut self, c: &Call) -> io::Result<()> {
        self.0.push(c.clone());
        Ok(())
    }
    fn lost(&mut self, _: u64, _: &ebtop::sink::Loss) -> io::Result<()> {
        Ok(())
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
    fn summary(&mut self, _: &Summary) -> io::Result<()> {
        Ok(())
    }
}

/// tests/fixtures/`dir`/`name`.
pub fn load(dir: &str, name: &str) -> SegFile {
    let path = format!("{}/tests/fixtures/{dir}/{name}", env!("CARGO_MANIFEST_DIR"));
    SegFile::parse(&std::fs::read(&path).unwrap()).unwrap_or_else(|e| panic!("{path}: {e}"))
}

/// Runs a fixture (then a close) through the pipeline with an optional snaplen cut.
pub fn run(f: &SegFile, snaplen: Option<usize>) -> (Vec<Call>, Summary) {
    let mut p = Pipeline::new(
        TrackerConfig::default(),
        ProcessTable::new(false),
        Collect::default(),
    );
    for rec in f.records(7, snaplen) {
        p.on_record(&rec).unwrap();
    }
    let close = EventBuilder::lifecycle(EventKind::Close, 7)
        .times(u64::MAX / 4, u64::MAX / 4)
        .build(b"");
    p.on_record(&close).unwrap();
    let (sink, summary) = p.finish(&KernelCounters::default(), 1).unwrap();
    (sink.0, summary)
}
