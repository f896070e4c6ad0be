//! Test support for the protocols' fixture tests (`<protocol>/fixture_tests.rs`): a protocol's
//! captured traffic (`src/protocols/<protocol>/fixtures/*.seg`) run through the whole user-space
//! pipeline.

use std::io;

use crate::call::Call;
use crate::conntrack::TrackerConfig;
use crate::event::{EventBuilder, EventKind};
use crate::kernel_counters::KernelCounters;
use crate::pipeline::Pipeline;
use crate::procinfo::ProcessTable;
use crate::segfile::SegFile;
use crate::sink::Sink;
use crate::summary::Summary;

/// A sink that keeps the calls.
#[derive(Default)]
pub struct Collect(pub Vec<Call>);

impl Sink for Collect {
    fn call(&mut self, c: &Call) -> io::Result<()> {
        self.0.push(c.clone());
        Ok(())
    }
}

/// The fixture `name` of the protocol whose folder is `folder` (src/protocols/`folder`/fixtures/).
pub fn load(folder: &str, name: &str) -> SegFile {
    let path = format!(
        "{}/src/protocols/{folder}/fixtures/{name}",
        env!("CARGO_MANIFEST_DIR")
    );
    SegFile::parse(&std::fs::read(&path).unwrap()).unwrap_or_else(|e| panic!("{path}: {e}"))
}

/// Asserts that the `.seg` files in src/protocols/`folder`/fixtures/ are exactly `listed`
/// (each fixture has its expectations in the protocol's table, and none is left out).
pub fn assert_fixtures_listed<'a>(folder: &str, listed: impl Iterator<Item = &'a str>) {
    let dir = format!(
        "{}/src/protocols/{folder}/fixtures",
        env!("CARGO_MANIFEST_DIR")
    );
    let mut on_disk: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".seg"))
        .collect();
    on_disk.sort();
    let mut listed: Vec<String> = listed.map(str::to_owned).collect();
    listed.sort();
    assert_eq!(on_disk, listed);
}

/// Runs a fixture (then a close) through the pipeline with an optional snaplen cut.
pub fn run(f: &SegFile, snaplen: Option<usize>) -> (Vec<Call>, Summary) {
    run_records(f.records(7, snaplen))
}

/// Runs a fixture of whole syscalls cut as the kernel side does at `snaplen`: heads and tails
/// ([`SegFile::kernel_records`]).
pub fn run_kernel_cut(f: &SegFile, snaplen: usize) -> (Vec<Call>, Summary) {
    run_records(f.kernel_records(7, snaplen))
}

fn run_records(records: Vec<Vec<u8>>) -> (Vec<Call>, Summary) {
    let mut p = Pipeline::new(
        TrackerConfig::default(),
        ProcessTable::new(false),
        Collect::default(),
    );
    for rec in records {
        p.on_record(&rec).unwrap();
    }
    let close = EventBuilder::lifecycle(EventKind::Close, 7)
        .times(u64::MAX / 4, u64::MAX / 4)
        .build(b"");
    p.on_record(&close).unwrap();
    let (sink, summary) = p.finish(&KernelCounters::default(), 1).unwrap();
    (sink.0, summary)
}
