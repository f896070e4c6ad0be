//! Runs one protocol's benchmark fixtures (its descriptor's `benches`, as benches/parsers.rs
//! times them) through a fresh parser N times — for counting instructions per pass under
//! callgrind, which stays exact on a loaded host where criterion's timings do not:
//!
//!     valgrind --tool=callgrind --toggle-collect='parser_passes::passes*' \
//!         target/release/examples/parser_passes memcached 200
//!
//! Instructions per pass = the Ir callgrind reports / N / fixtures.

use anyhow::{bail, Context, Result};

// The allocator the ebtop binary ships with (src/main.rs): the C library's would time its own
// free-list state, which shifts with every struct's size.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

use ebtop::protocols::{self, ParseDepth, ParseStats, ParserConfig, Segment, Transport};
use ebtop::segfile::SegFile;

type Segs = Vec<(ebtop::event::Direction, Vec<u8>, u64)>;

#[inline(never)]
fn passes(proto: protocols::Protocol, segs: &Segs, n: usize) -> usize {
    let mut calls = 0;
    for _ in 0..n {
        let mut p = (proto.descriptor().new_parser)(&ParserConfig {
            depth: ParseDepth::Full,
            transport: Transport::Stream,
            keep_head: 0,
        });
        let (mut out, mut st) = (Vec::new(), ParseStats::default());
        for (i, (dir, bytes, total)) in segs.iter().enumerate() {
            let seg = Segment {
                dir: *dir,
                payload: bytes,
                tail: &[],
                total_len: *total,
                start_ns: i as u64 * 1000,
                end_ns: i as u64 * 1000 + 10,
                peer: None,
                pos: 0,
            };
            p.on_segment(&seg, &mut out, &mut st);
        }
        p.on_close(&mut out, &mut st);
        calls += out.len();
    }
    calls
}

fn main() -> Result<()> {
    let mut args = std::env::args().skip(1);
    let usage = "usage: parser_passes PROTOCOL_FOLDER [N]";
    let folder = args.next().context(usage)?;
    let n: usize = args.next().map_or(Ok(100), |s| s.parse()).context(usage)?;
    let Some(d) = protocols::REGISTRY.iter().find(|d| d.folder == folder) else {
        bail!("no protocol folder {folder:?}");
    };
    for bench in d.benches {
        let path = format!(
            "{}/src/protocols/{}/fixtures/{}",
            env!("CARGO_MANIFEST_DIR"),
            d.folder,
            bench.file
        );
        let f = SegFile::parse(&std::fs::read(&path).with_context(|| path.clone())?)?;
        let segs: Segs = f
            .entries
            .iter()
            .map(|e| {
                let dir = ebtop::segfile::seg_direction(&f, e.to_server);
                (dir, e.bytes.clone(), e.total_len)
            })
            .collect();
        let calls = passes(bench.proto, &segs, n);
        println!("{}: {} calls in {n} passes", bench.file, calls);
    }
    Ok(())
}
