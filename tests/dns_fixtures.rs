//! The DNS parser on real traffic: src/protocols/dns/fixtures/dns_mix.ebt (dnsmasq asked by dig
//! over UDP and TCP and by Python clients; how it was made: regenerate.sh there). Replayed whole
//! it must print the calls the live run printed; its DNS records fed to the parser directly,
//! split at every byte, merged, cut by a snaplen, with bytes lost or garbage in between, it must
//! make the same calls or fewer — never a different one — and count what it could not use.
//! No root needed.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::process::Command;

use ebtop::event::{Direction, Event, EventKind, SOCK_DGRAM};
use ebtop::protocols::{
    self, L7Call, ParseDepth, ParseStats, ParserConfig, Protocol, Segment, Transport,
};

const RECORDING: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/src/protocols/dns/fixtures/dns_mix.ebt"
);
const LIVE_CALLS: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/src/protocols/dns/fixtures/dns_mix.lines.jsonl"
);

/// One data record of the recording, owned.
#[derive(Clone)]
struct Rec {
    dir: Direction,
    payload: Vec<u8>,
    total_len: u64,
    start_ns: u64,
    end_ns: u64,
    peer: SocketAddr,
}

/// The recording's data records per socket, in order, with the socket's transport.
fn sockets() -> BTreeMap<u64, (Transport, Vec<Rec>)> {
    let mut reader = ebtop::record::reader::open(std::path::Path::new(RECORDING)).unwrap();
    let mut out: BTreeMap<u64, (Transport, Vec<Rec>)> = BTreeMap::new();
    reader
        .for_each(|item| {
            if let ebtop::record::reader::Item::Event(raw) = item {
                let ev = Event::decode(raw).unwrap();
                if ev.kind == EventKind::Data {
                    let transport = if ev.sock_type == SOCK_DGRAM {
                        Transport::Datagram
                    } else {
                        Transport::Stream
                    };
                    out.entry(ev.sock_id)
                        .or_insert((transport, Vec::new()))
                        .1
                        .push(Rec {
                            dir: ev.dir,
                            payload: ev.payload.to_vec(),
                            total_len: ev.total_len,
                            start_ns: ev.start_ns,
                            end_ns: ev.end_ns,
                            peer: ev.peer(),
                        });
                }
            }
            Ok(())
        })
        .unwrap();
    out
}

/// What a parser made of `recs` (each fed as one segment), after the connection closed.
fn parse(transport: Transport, recs: &[Rec]) -> (Vec<L7Call>, ParseStats) {
    let steps: Vec<Step> = recs.iter().cloned().map(Step::Seg).collect();
    parse_steps(transport, &steps)
}

enum Step {
    Seg(Rec),
    /// Bytes of a direction lost (ring buffer loss).
    Gap(Direction, Option<u64>),
}

fn parse_steps(transport: Transport, steps: &[Step]) -> (Vec<L7Call>, ParseStats) {
    let mut p = (Protocol::Dns.descriptor().new_parser)(&ParserConfig {
        depth: ParseDepth::Full,
        transport,
        keep_head: 512,
    });
    let (mut out, mut stats) = (Vec::new(), ParseStats::default());
    for step in steps {
        let r = match step {
            Step::Seg(r) => r,
            Step::Gap(dir, len) => {
                p.on_gap(*dir, *len, &mut stats);
                continue;
            }
        };
        let seg = Segment {
            dir: r.dir,
            payload: &r.payload,
            tail: &[],
            total_len: r.total_len,
            start_ns: r.start_ns,
            end_ns: r.end_ns,
            peer: (transport == Transport::Datagram).then_some(r.peer),
            pos: 0,
        };
        p.on_segment(&seg, &mut out, &mut stats);
    }
    p.on_close(&mut out, &mut stats);
    (out, stats)
}

/// What identifies a call: (request direction, resource, status).
fn key(c: &L7Call) -> (usize, String, Option<String>) {
    (
        c.request_dir.index(),
        c.resource.clone(),
        c.status_text.clone(),
    )
}

fn keys(calls: &[L7Call]) -> Vec<(usize, String, Option<String>)> {
    let mut k: Vec<_> = calls.iter().map(key).collect();
    k.sort();
    k
}

#[test]
fn replaying_the_recording_prints_the_live_calls() {
    // The lines were printed before call chains existed: compared without them (chains in
    // replay are checked against their live run in tests/live_chains.rs).
    let out = Command::new(env!("CARGO_BIN_EXE_ebtop"))
        .args(["-r", RECORDING, "--json"])
        .env("EBTOP_CHAINS", "0")
        .output()
        .unwrap();
    assert!(out.status.success());
    let got: Vec<String> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter(|l| l.contains("\"type\":\"call\""))
        .map(str::to_owned)
        .collect();
    let want: Vec<String> = std::fs::read_to_string(LIVE_CALLS)
        .unwrap()
        .lines()
        .map(str::to_owned)
        .collect();
    assert_eq!(
        want.len(),
        26,
        "13 queries, seen by the client and by dnsmasq"
    );
    assert_eq!(got, want);
}

#[test]
fn every_query_of_the_recording_is_one_call_with_what_the_server_answered() {
    let mut all = Vec::new();
    let mut totals = ParseStats::default();
    for (transport, recs) in sockets().values() {
        let (calls, stats) = parse(*transport, recs);
        totals.add(&stats);
        all.extend(calls);
    }
    assert_eq!(
        totals,
        ParseStats::default(),
        "nothing unusable in real traffic"
    );
    let tally = |resource: &str, status: &str, version: &str| {
        all.iter()
            .filter(|c| {
                c.resource == resource
                    && c.status_text.as_deref() == Some(status)
                    && c.version == version
            })
            .count()
    };
    // Each query seen by both ends: the asking socket and dnsmasq's.
    assert_eq!(tally("A a.test", "NOERROR", "udp"), 2 * (1 + 3));
    assert_eq!(tally("AAAA a.test", "NOERROR", "udp"), 2);
    assert_eq!(tally("A nope.test", "NXDOMAIN", "udp"), 2);
    assert_eq!(tally("TXT version.bind CH", "NOERROR", "udp"), 2);
    assert_eq!(tally("TXT big.test", "NOERROR", "udp"), 2);
    assert_eq!(tally("TXT big.test", "NOERROR", "tcp"), 2);
    for (r, s) in [
        ("A a.test", "NOERROR"),
        ("AAAA a.test", "NOERROR"),
        ("A nope.test", "NXDOMAIN"),
        ("TXT a.test", "NOERROR"),
    ] {
        assert_eq!(tally(r, s, "tcp"), 2, "{r} over TCP");
    }
    assert_eq!(all.len(), 26);
    for c in &all {
        assert_eq!(c.proto, Protocol::Dns);
        assert_eq!(c.method, "QUERY");
        let detail = |k: &str| {
            c.details
                .iter()
                .find(|(name, _)| *name == k)
                .map(|(_, v)| v.as_str())
        };
        match c.resource.as_str() {
            "A a.test" => assert_eq!(detail("addresses"), Some("192.0.2.10")),
            "AAAA a.test" => assert_eq!(detail("addresses"), Some("2001:db8::10")),
            "A nope.test" => assert_eq!(c.outcome, protocols::Outcome::ClientError),
            // Too big for 512 bytes without EDNS: the server set TC and sent what fit.
            "TXT big.test" if c.version == "udp" => {
                assert!(detail("flags").unwrap().contains("tc"), "{c:?}")
            }
            "TXT big.test" => assert!(c.resp.bytes > 600, "{c:?}"),
            _ => {}
        }
        if c.status_text.as_deref() == Some("NOERROR") {
            assert_eq!(c.outcome, protocols::Outcome::Ok);
        }
        assert!(c.resp.last_end_ns >= c.req.first_start_ns);
        let head = String::from_utf8_lossy(&c.resp_head.bytes);
        assert!(head.contains(c.status_text.as_deref().unwrap()), "{head}");
    }
}

/// Every TCP connection of the recording re-cut: split at every byte of each direction,
/// and each direction merged into one segment. Same calls.
#[test]
fn tcp_streams_split_anywhere_or_merged_make_the_same_calls() {
    for (transport, recs) in sockets().values() {
        if *transport != Transport::Stream {
            continue;
        }
        let (want, _) = parse(Transport::Stream, recs);
        assert!(!want.is_empty());
        // dnsmasq reads a query's length apart: its first query is seen without it (the
        // kernel recognised the connection at the message) and is kept whole.
        let byte_at_a_time: Vec<Rec> = recs[..1]
            .iter()
            .cloned()
            .chain(recs[1..].iter().flat_map(|r| {
                r.payload.iter().map(move |b| Rec {
                    payload: vec![*b],
                    total_len: 1,
                    ..r.clone()
                })
            }))
            .collect();
        let (got, stats) = parse(Transport::Stream, &byte_at_a_time);
        assert_eq!(keys(&got), keys(&want));
        assert_eq!(stats, ParseStats::default());
        // All of one direction's bytes, then all of the other's (queries before answers).
        let mut merged = Vec::new();
        for dir in [recs[0].dir, recs[0].dir.opposite()] {
            let mine: Vec<&Rec> = recs.iter().filter(|r| r.dir == dir).collect();
            merged.push(Rec {
                payload: mine.iter().flat_map(|r| r.payload.clone()).collect(),
                total_len: mine.iter().map(|r| r.total_len).sum(),
                ..mine[0].clone()
            });
        }
        let (got, _) = parse(Transport::Stream, &merged);
        assert_eq!(keys(&got), keys(&want));
    }
}

/// A snaplen cutting datagrams (the header and question still captured) keeps every call,
/// marked truncated; one cut inside the header makes none and is counted.
#[test]
fn datagrams_cut_by_the_snaplen_keep_their_calls_or_are_counted() {
    for (transport, recs) in sockets().values() {
        if *transport != Transport::Datagram {
            continue;
        }
        let (want, _) = parse(Transport::Datagram, recs);
        let cut = |n: usize| -> Vec<Rec> {
            recs.iter()
                .map(|r| Rec {
                    payload: r.payload[..n.min(r.payload.len())].to_vec(),
                    ..r.clone()
                })
                .collect()
        };
        // 12-byte header, then the question (at most 12 + 21 + 4 bytes here).
        let (got, stats) = parse(Transport::Datagram, &cut(40));
        assert_eq!(keys(&got), keys(&want));
        for c in &got {
            assert_eq!(c.truncated, c.req.bytes > 40 || c.resp.bytes > 40, "{c:?}");
        }
        assert_eq!(stats.damaged_messages, 0);
        let (got, stats) = parse(Transport::Datagram, &cut(10));
        assert!(got.is_empty());
        assert_eq!(stats.damaged_messages, recs.len() as u64);
    }
}

/// Bytes lost inside a TCP message lose that message only (counted); garbage where a length
/// should be loses sync until a message start comes again. Never a wrong call.
#[test]
fn lost_bytes_and_garbage_lose_only_what_they_touch() {
    // dnsmasq's end of the connection with 4 queries written at once (it receives first),
    // whose answers it wrote one per send.
    let recs = sockets()
        .into_values()
        .filter(|(t, recs)| {
            *t == Transport::Stream
                && recs[0].dir == Direction::Ingress
                && parse(*t, recs).0.len() == 4
        })
        .map(|(_, recs)| recs)
        .next()
        .expect("dnsmasq's side of the 4-query connection");
    let (want, _) = parse(Transport::Stream, &recs);
    assert_eq!(want.len(), 4);

    // 5 bytes lost inside the first answer: that call is lost (counted), the rest are framed.
    let mut steps = Vec::new();
    let mut lost_once = false;
    for r in &recs {
        if r.dir == Direction::Egress && !lost_once {
            lost_once = true;
            let (head, tail) = r.payload.split_at(2);
            let tail = &tail[5..];
            steps.push(Step::Seg(Rec {
                payload: head.to_vec(),
                total_len: 2,
                ..r.clone()
            }));
            steps.push(Step::Gap(r.dir, Some(5)));
            steps.push(Step::Seg(Rec {
                payload: tail.to_vec(),
                total_len: tail.len() as u64,
                ..r.clone()
            }));
        } else {
            steps.push(Step::Seg(r.clone()));
        }
    }
    let (got, stats) = parse_steps(Transport::Stream, &steps);
    assert_eq!(got.len(), 3);
    for c in &got {
        assert!(want.iter().any(|w| key(w) == key(c)), "invented {c:?}");
    }
    assert_eq!(stats.damaged_messages, 1);
    assert_eq!(stats.unanswered_requests, 1);
    assert_eq!(stats.desyncs, 0);

    // Garbage in front of the answers: they cannot be framed; queries stay unanswered.
    let mut garbled = recs.clone();
    let first_answer = garbled
        .iter()
        .position(|r| r.dir == Direction::Egress)
        .unwrap();
    let mut junk = garbled[first_answer].clone();
    junk.payload = b"\xff\xff not dns at all".to_vec();
    junk.total_len = junk.payload.len() as u64;
    garbled.insert(first_answer, junk);
    let (got, stats) = parse(Transport::Stream, &garbled);
    for c in &got {
        assert!(want.iter().any(|w| key(w) == key(c)), "invented {c:?}");
    }
    assert!(
        stats.desyncs >= 1 || stats.damaged_messages >= 1,
        "{stats:?}"
    );
    assert_eq!(
        got.len() as u64 + stats.unanswered_requests,
        4,
        "every query is a call or counted unanswered: {stats:?}"
    );
}
