//! Micro-benchmarks: the HTTP/1 parser and the whole user-space path (decode → tracker →
//! parser → call) on real captured traffic (tests/fixtures/http).

use criterion::{criterion_group, criterion_main, Criterion, Throughput};

use ebtop::conntrack::{ConnTracker, TrackerConfig};
use ebtop::event::{Direction, Event};
use ebtop::protocols::{self, ParseDepth, ParseStats, ParserConfig, Protocol, Segment, Transport};
use ebtop::segfile::SegFile;

fn fixture(name: &str) -> SegFile {
    let p = format!("{}/tests/fixtures/http/{name}", env!("CARGO_MANIFEST_DIR"));
    SegFile::parse(&std::fs::read(p).unwrap()).unwrap()
}

fn parser(c: &mut Criterion) {
    let f = fixture("wrk_nginx.seg");
    let segs: Vec<(Direction, Vec<u8>)> = f
        .entries
        .iter()
        .map(|e| {
            (
                if e.to_server {
                    Direction::Ingress
                } else {
                    Direction::Egress
                },
                e.bytes.clone(),
            )
        })
        .collect();
    let mut g = c.benchmark_group("http1");
    g.throughput(Throughput::Elements(20)); // 20 calls per pass
    for depth in [ParseDepth::Shallow, ParseDepth::Full] {
        g.bench_function(format!("parse 20 calls ({depth:?})"), |b| {
            b.iter(|| {
                let mut p = (protocols::spec(Protocol::Http).new_parser)(&ParserConfig {
                    depth,
                    transport: Transport::Stream,
                    keep_head: 0,
                });
                let (mut out, mut st) = (Vec::new(), ParseStats::default());
                for (i, (dir, bytes)) in segs.iter().enumerate() {
                    let seg = Segment {
                        dir: *dir,
                        payload: bytes,
                        total_len: bytes.len() as u64,
                        start_ns: i as u64 * 1000,
                        end_ns: i as u64 * 1000 + 10,
                        peer: None,
                    };
                    p.on_segment(&seg, &mut out, &mut st);
                }
                assert_eq!(out.len(), 20);
                out
            })
        });
    }
    g.finish();
}

fn tracker(c: &mut Criterion) {
    let f = fixture("wrk_nginx.seg");
    let records = f.records(1, None);
    let mut g = c.benchmark_group("tracker");
    g.throughput(Throughput::Elements(records.len() as u64));
    g.bench_function("decode+track+parse (events)", |b| {
        b.iter(|| {
            let mut t = ConnTracker::new(TrackerConfig::default());
            let mut n = 0;
            for r in &records {
                let ev = Event::decode(r).unwrap();
                t.handle(&ev, &mut |_c| n += 1);
            }
            assert_eq!(n, 20);
        })
    });
    g.finish();
}

criterion_group!(benches, parser, tracker);
criterion_main!(benches);
