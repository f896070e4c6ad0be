//! Micro-benchmarks: each protocol parser on the fixtures its descriptor names (and DNS on a recording), and the whole user-space path
//! (decode → tracker → parser → call) on real captured traffic (src/protocols/<folder>/fixtures).

use criterion::{criterion_group, criterion_main, Criterion, Throughput};

// The allocator the ebtop binary ships with (src/main.rs): the C library's would time its own
// free-list state, which shifts with every struct's size.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

use ebtop::conntrack::{ConnTracker, TrackerConfig};
use ebtop::event::{Direction, Event};
use ebtop::protocols::{self, ParseDepth, ParseStats, ParserConfig, Protocol, Segment, Transport};
use ebtop::segfile::SegFile;

fn fixture(name: &str) -> SegFile {
    let p = format!(
        "{}/src/protocols/http1/fixtures/{name}",
        env!("CARGO_MANIFEST_DIR")
    );
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
                let mut p = (Protocol::Http.descriptor().new_parser)(&ParserConfig {
                    depth,
                    transport: Transport::Stream,
                    keep_head: 0,
                });
                let (mut out, mut st) = (Vec::new(), ParseStats::default());
                for (i, (dir, bytes)) in segs.iter().enumerate() {
                    let seg = Segment {
                        dir: *dir,
                        payload: bytes,
                        tail: &[],
                        total_len: bytes.len() as u64,
                        start_ns: i as u64 * 1000,
                        end_ns: i as u64 * 1000 + 10,
                        peer: None,
                        pos: 0,
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
            let mut calls = Vec::new();
            for r in &records {
                let ev = Event::decode(r).unwrap();
                t.handle(&ev, &mut calls);
            }
            assert_eq!(calls.len(), 20);
        })
    });
    g.finish();
}

/// The segments of a fixture as (direction, bytes, total length), `C` lines client→server.
fn seg_entries(f: &SegFile) -> Vec<(Direction, Vec<u8>, u64)> {
    f.entries
        .iter()
        .map(|e| {
            let dir = ebtop::segfile::seg_direction(f, e.to_server);
            (dir, e.bytes.clone(), e.total_len)
        })
        .collect()
}

/// Feeds `segs` to a fresh parser of `proto`; returns the calls.
fn run(
    proto: Protocol,
    transport: Transport,
    segs: &[(Direction, Vec<u8>, u64, Option<std::net::SocketAddr>)],
) -> usize {
    let mut p = (proto.descriptor().new_parser)(&ParserConfig {
        depth: ParseDepth::Full,
        transport,
        keep_head: 0,
    });
    let (mut out, mut st) = (Vec::new(), ParseStats::default());
    for (i, (dir, bytes, total, peer)) in segs.iter().enumerate() {
        let seg = Segment {
            dir: *dir,
            payload: bytes,
            tail: &[],
            total_len: *total,
            start_ns: i as u64 * 1000,
            end_ns: i as u64 * 1000 + 10,
            peer: *peer,
            pos: 0,
        };
        p.on_segment(&seg, &mut out, &mut st);
    }
    p.on_close(&mut out, &mut st);
    out.len()
}

/// Every protocol's benchmark fixtures (its descriptor's `benches`), each parsed whole per
/// pass, in a group named for the kind of calls it holds.
fn fixtures(c: &mut Criterion) {
    for d in protocols::REGISTRY {
        for bench in d.benches {
            let p = format!(
                "{}/src/protocols/{}/fixtures/{}",
                env!("CARGO_MANIFEST_DIR"),
                d.folder,
                bench.file
            );
            let f = SegFile::parse(&std::fs::read(&p).unwrap()).unwrap();
            let segs: Vec<_> = seg_entries(&f)
                .into_iter()
                .map(|(d, b, t)| (d, b, t, None))
                .collect();
            let proto = bench.proto;
            let calls = run(proto, Transport::Stream, &segs);
            assert_eq!(calls, bench.calls, "{p}");
            let mut g = c.benchmark_group(proto.name());
            g.throughput(Throughput::Elements(calls as u64));
            g.bench_function(bench.what, |b| {
                b.iter(|| run(proto, Transport::Stream, &segs))
            });
            g.finish();
        }
    }
}

fn dns(c: &mut Criterion) {
    // dnsmasq's UDP socket in the DNS recording: queries in, answers out.
    let path = format!(
        "{}/src/protocols/dns/fixtures/dns_mix.ebt",
        env!("CARGO_MANIFEST_DIR")
    );
    let mut reader = ebtop::record::reader::open(std::path::Path::new(&path)).unwrap();
    let mut per_sock: std::collections::BTreeMap<u64, Vec<_>> = Default::default();
    reader
        .for_each(|item| {
            if let ebtop::record::reader::Item::Event(raw) = item {
                let ev = Event::decode(raw).unwrap();
                if ev.kind == ebtop::event::EventKind::Data
                    && ev.sock_type == ebtop::event::SOCK_DGRAM
                {
                    per_sock.entry(ev.sock_id).or_default().push((
                        ev.dir,
                        ev.payload.to_vec(),
                        ev.total_len,
                        Some(ev.peer()),
                    ));
                }
            }
            Ok(())
        })
        .unwrap();
    let segs = per_sock.into_values().max_by_key(|v| v.len()).unwrap();
    let calls = run(Protocol::Dns, Transport::Datagram, &segs);
    assert_eq!(calls * 2, segs.len());
    let mut g = c.benchmark_group("dns");
    g.throughput(Throughput::Elements(calls as u64));
    g.bench_function("parse dnsmasq's UDP socket", |b| {
        b.iter(|| run(Protocol::Dns, Transport::Datagram, &segs))
    });
    g.finish();
}

criterion_group!(benches, parser, fixtures, dns, tracker);
criterion_main!(benches);
