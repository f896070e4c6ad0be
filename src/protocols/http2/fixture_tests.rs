//! The HTTP/2 parser on real bytes with real syscall boundaries (src/protocols/http2/fixtures/*.seg:
//! the server side of nghttpd with curl, nghttp and h2load, and of a Python grpcio server,
//! captured by capture.sh), through the whole user-space pipeline: detection, tracking,
//! endpoints.

use crate::protocols::fixture_support::run;

use crate::call::{Call, Side};
use crate::protocols::{Outcome, ParseStats, Protocol};
use crate::segfile::SegFile;

fn load(name: &str) -> SegFile {
    crate::protocols::fixture_support::load("http2", name)
}

fn detail<'a>(c: &'a Call, key: &str) -> Option<&'a str> {
    c.l7.details
        .iter()
        .find(|(k, _)| *k == key)
        .map(|(_, v)| v.as_str())
}

/// (method, resource, status) of each call, in completion order.
fn summary(calls: &[Call]) -> Vec<(String, String, Option<u32>)> {
    calls
        .iter()
        .map(|c| (c.l7.method.clone(), c.l7.resource.clone(), c.l7.status))
        .collect()
}

fn row(m: &str, r: &str, s: u32) -> (String, String, Option<u32>) {
    (m.to_owned(), r.to_owned(), Some(s))
}

/// What each request stream of a fixture captured whole moved, walked frame by frame apart from
/// the parser: (request wire bytes, response wire bytes, request DATA, response DATA), sorted.
/// Wire bytes: the stream's HEADERS, CONTINUATION and non-empty DATA frames, each with its
/// 9-byte header and padding — an HTTP/2 message's bytes as HTTP/1 counts a message's head and
/// body.
fn streams_walked(f: &SegFile) -> Vec<(u64, u64, u64, u64)> {
    use std::collections::BTreeMap;
    let mut per: BTreeMap<u32, [u64; 4]> = BTreeMap::new();
    for to_server in [true, false] {
        let mut stream: Vec<u8> = Vec::new();
        for e in f.entries.iter().filter(|e| e.to_server == to_server) {
            assert_eq!(e.total_len, e.bytes.len() as u64, "captured whole");
            stream.extend_from_slice(&e.bytes);
        }
        let mut b = stream
            .strip_prefix(crate::protocols::http2::PREFACE.as_slice())
            .unwrap_or(&stream);
        while b.len() >= 9 {
            let len = (b[0] as usize) << 16 | (b[1] as usize) << 8 | b[2] as usize;
            let (ty, flags) = (b[3], b[4]);
            let id = u32::from_be_bytes([b[5], b[6], b[7], b[8]]) & 0x7fff_ffff;
            let payload = &b[9..9 + len];
            b = &b[9 + len..];
            // An empty DATA frame (one that only ends its side) is not counted.
            if id % 2 == 0 || !matches!(ty, 0 | 1 | 9) || (ty == 0 && len == 0) {
                continue;
            }
            let side = usize::from(!to_server);
            let e = per.entry(id).or_default();
            e[side] += 9 + len as u64;
            if ty == 0 {
                let pad = if flags & 0x8 != 0 {
                    1 + payload[0] as u64
                } else {
                    0
                };
                e[2 + side] += len as u64 - pad;
            }
        }
        assert!(b.is_empty(), "frames end with the stream");
    }
    let mut v: Vec<_> = per
        .into_values()
        .map(|e| (e[0], e[1], e[2], e[3]))
        .collect();
    v.sort_unstable();
    v
}

/// Each call's (request, response) bytes equal its stream's wire bytes walked apart; returns
/// the streams walked.
fn assert_wire_bytes(calls: &[Call], f: &SegFile) -> Vec<(u64, u64, u64, u64)> {
    let walked = streams_walked(f);
    let mut got: Vec<(u64, u64)> = calls
        .iter()
        .map(|c| (c.l7.req.bytes, c.l7.resp.bytes))
        .collect();
    got.sort_unstable();
    let want: Vec<(u64, u64)> = walked.iter().map(|w| (w.0, w.1)).collect();
    assert_eq!(got, want);
    walked
}

/// The DATA bytes of the walked streams' responses (requests'), sorted.
fn data_sizes(walked: &[(u64, u64, u64, u64)], request: bool) -> Vec<u64> {
    let mut v: Vec<u64> = walked
        .iter()
        .map(|w| if request { w.2 } else { w.3 })
        .collect();
    v.sort_unstable();
    v
}

/// A clean capture: nothing damaged, lost, unmatched, partial or left unanswered.
fn assert_clean(p: &ParseStats, name: &str) {
    assert_eq!(
        (
            p.damaged_messages,
            p.desyncs,
            p.unparsed_bytes,
            p.unmatched_responses,
            p.unanswered_requests,
            p.inferred_ends,
            p.partial_headers,
            p.stream_resets,
        ),
        (0, 0, 0, 0, 0, 0, 0, 0),
        "{name}"
    );
}

/// curl: one GET of a 40000-byte file in three DATA frames of one write (captured whole here;
/// cut at the snaplen in `snaplen_cut_multi_frame_writes`).
#[test]
fn curl_get_large_body() {
    let f = load("curl_nghttpd.seg");
    let (calls, s) = run(&f, None);
    assert_clean(&s.parse, "curl");
    assert_eq!(summary(&calls), vec![row("GET", "/big.txt", 200)]);
    let walked = assert_wire_bytes(&calls, &f);
    assert_eq!(data_sizes(&walked, false), [40000]);
    // Three DATA frames of 9 + payload and a HEADERS frame: more than the body.
    assert!(
        calls[0].l7.resp.bytes >= 40000 + 4 * 9,
        "{}",
        calls[0].l7.resp.bytes
    );
    let c = &calls[0];
    assert_eq!(c.l7.proto, Protocol::Http2);
    assert_eq!(c.side, Side::Server);
    assert!(!c.l7.truncated);
    assert_eq!(detail(c, "authority"), Some("127.0.0.1:18090"));
    assert!(c.l7.resp.syscalls >= 1 && c.l7.req.syscalls >= 1);
}

/// nghttp: three concurrent streams on one connection, answered in one write; a 404 (its page
/// is 148 bytes).
#[test]
fn nghttp_concurrent_streams() {
    let f = load("nghttp_nghttpd.seg");
    let (mut calls, s) = run(&f, None);
    assert_clean(&s.parse, "nghttp");
    calls.sort_by(|a, b| a.l7.resource.cmp(&b.l7.resource));
    assert_eq!(
        summary(&calls),
        vec![
            row("GET", "/big.txt", 200),
            row("GET", "/index.html", 200),
            row("GET", "/missing", 404),
        ]
    );
    let walked = assert_wire_bytes(&calls, &f);
    assert_eq!(data_sizes(&walked, false), [6, 148, 40000]);
    let missing = &calls[2];
    assert_eq!(missing.l7.outcome, Outcome::ClientError);
}

/// nghttp with a body: POSTs of 7 bytes each.
#[test]
fn nghttp_post_bodies() {
    let f = load("nghttp_post_nghttpd.seg");
    let (mut calls, s) = run(&f, None);
    assert_clean(&s.parse, "nghttp post");
    calls.sort_by(|a, b| a.l7.resource.cmp(&b.l7.resource));
    assert_eq!(
        summary(&calls),
        vec![
            row("POST", "/index.html", 200),
            row("POST", "/missing", 404)
        ]
    );
    let walked = assert_wire_bytes(&calls, &f);
    assert_eq!(data_sizes(&walked, false), [6, 148]);
    assert_eq!(data_sizes(&walked, true), [7, 7]);
}

/// h2load: 25 requests on the connection, 4 streams at a time.
#[test]
fn h2load_multiplexed() {
    let f = load("h2load_nghttpd.seg");
    let (calls, s) = run(&f, None);
    assert_clean(&s.parse, "h2load");
    assert_eq!(calls.len(), 25);
    assert!(calls.iter().all(
        |c| (c.l7.method.as_str(), c.l7.resource.as_str(), c.l7.status)
            == ("GET", "/index.html", Some(200))
    ));
    let walked = assert_wire_bytes(&calls, &f);
    assert_eq!(data_sizes(&walked, false), [6; 25]);
}

/// gRPC: 5 unary calls, a server stream of 3 messages, a bidi call of 4 each way, and one
/// answered NOT_FOUND in a Trailers-Only response.
#[test]
fn grpc_unary_streaming_and_not_found() {
    let f = load("grpc_python.seg");
    let (calls, s) = run(&f, None);
    assert_clean(&s.parse, "grpc");
    assert_wire_bytes(&calls, &f);
    assert!(calls.iter().all(|c| c.l7.proto == Protocol::Grpc));
    let rows: Vec<_> = calls
        .iter()
        .map(|c| {
            (
                c.l7.resource.as_str(),
                c.l7.status_text.as_deref(),
                detail(c, "req_messages"),
                detail(c, "resp_messages"),
                detail(c, "grpc_message"),
            )
        })
        .collect();
    let unary = "/ebtop.test.Echo/Unary";
    let mut want = vec![(unary, Some("OK"), Some("1"), Some("1"), None); 5];
    want.push((
        "/ebtop.test.Echo/ServerStream",
        Some("OK"),
        Some("1"),
        Some("3"),
        None,
    ));
    want.push((
        "/ebtop.test.Echo/Bidi",
        Some("OK"),
        Some("4"),
        Some("4"),
        None,
    ));
    want.push((
        "/ebtop.test.Echo/Missing",
        Some("NOT_FOUND"),
        Some("1"),
        Some("0"),
        Some("no such item"),
    ));
    assert_eq!(rows, want);
    let missing = calls.last().unwrap();
    assert_eq!(missing.l7.outcome, Outcome::ClientError);
    assert_eq!(detail(missing, "grpc_status"), Some("5"));
    assert!(calls.iter().all(|c| c.l7.method == "POST"));
}

/// The same captures cut at ebtop's default snaplen (4096): a write of several frames loses
/// the frames past the cut. Nothing is invented: what was hidden is counted (unparsed bytes,
/// the header table forgotten, an end inferred), and the calls seen are still right.
#[test]
fn snaplen_cut_multi_frame_writes() {
    let (calls, s) = run(&load("curl_nghttpd.seg"), Some(4096));
    assert_eq!(calls.len(), 1);
    let c = &calls[0];
    assert_eq!(
        (c.l7.method.as_str(), c.l7.resource.as_str(), c.l7.status),
        ("GET", "/big.txt", Some(200))
    );
    assert!(c.l7.truncated);
    // END_STREAM was past the cut: the end is inferred from the close.
    assert!(c.l7.end_inferred);
    assert_eq!(s.parse.inferred_ends, 1);
    assert!(s.parse.unparsed_bytes > 0);
    assert_eq!(s.parse.damaged_messages, 0);

    let (calls, s) = run(&load("nghttp_nghttpd.seg"), Some(4096));
    // Each of the 3 requests is either a call or counted unanswered, never invented.
    assert_eq!(calls.len() as u64 + s.parse.unanswered_requests, 3);
    for c in &calls {
        assert_eq!(c.l7.method, "GET");
        assert!(["/index.html", "/big.txt", "/missing"].contains(&c.l7.resource.as_str()));
    }
}

/// The header blocks of every fully captured fixture (nghttp2 and gRPC's C core both index
/// into the dynamic table heavily), cut out of the frames per direction, decode to exactly what
/// `loona_hpack`'s own decoder gives: the tolerant decoder is exact on a connection seen from
/// its start.
#[test]
fn hpack_agrees_with_the_reference_decoder_on_real_blocks() {
    use crate::protocols::http2::hpack::{Decoder, Field};
    let mut blocks_seen = 0;
    for name in [
        "grpc_python.seg",
        "h2load_nghttpd.seg",
        "nghttp_nghttpd.seg",
        "nghttp_post_nghttpd.seg",
        "curl_nghttpd.seg",
    ] {
        let f = load(name);
        for to_server in [true, false] {
            let mut stream: Vec<u8> = Vec::new();
            for e in f.entries.iter().filter(|e| e.to_server == to_server) {
                assert_eq!(e.total_len, e.bytes.len() as u64, "{name}: captured whole");
                stream.extend_from_slice(&e.bytes);
            }
            let mut b = stream
                .strip_prefix(crate::protocols::http2::PREFACE.as_slice())
                .unwrap_or(&stream);
            let (mut mine, mut reference) = (Decoder::new(true), loona_hpack::Decoder::new());
            let mut block = Vec::new();
            while b.len() >= 9 {
                let len = (b[0] as usize) << 16 | (b[1] as usize) << 8 | b[2] as usize;
                let (ty, flags) = (b[3], b[4]);
                let payload = &b[9..9 + len];
                b = &b[9 + len..];
                if ty != 1 && ty != 9 {
                    continue;
                }
                let mut frag = payload;
                if ty == 1 {
                    let pad = if flags & 0x8 != 0 {
                        payload[0] as usize
                    } else {
                        0
                    };
                    let skip =
                        usize::from(flags & 0x8 != 0) + if flags & 0x20 != 0 { 5 } else { 0 };
                    frag = &payload[skip..payload.len() - pad];
                }
                block.extend_from_slice(frag);
                if flags & 0x4 == 0 {
                    continue;
                }
                let want = reference.decode(&block).expect("reference decodes");
                let mut got = Vec::new();
                mine.decode(&block, &mut got).expect("decodes");
                let got: Vec<(Vec<u8>, Vec<u8>)> = got
                    .into_iter()
                    .map(|f| match f {
                        Field::Known { name, value } => (name, value),
                        other => panic!("{name}: unknown field {other:?}"),
                    })
                    .collect();
                assert_eq!(got, want, "{name}");
                blocks_seen += 1;
                block.clear();
            }
            assert!(b.is_empty(), "{name}: frames end with the stream");
        }
    }
    // Every request and response of the captures: 25 + 16 (gRPC: requests, responses and
    // trailers) + 6 + 4 + 2 header blocks at least.
    assert!(blocks_seen >= 53, "{blocks_seen}");
}

/// `--proto grpc` and `--proto http2` select the same connections; the calls of the other are
/// left out and counted.
#[test]
fn proto_grpc_and_http2_filter_per_call() {
    use crate::conntrack::TrackerConfig;
    use crate::event::{EventBuilder, EventKind};
    use crate::kernel_counters::KernelCounters;
    use crate::pipeline::Pipeline;
    use crate::procinfo::ProcessTable;
    use crate::protocols::ProtoSet;

    let run_with = |only: &[Protocol]| {
        let mut p = Pipeline::new(
            TrackerConfig {
                protocols: ProtoSet::of(Some(only)),
                ..TrackerConfig::default()
            },
            ProcessTable::new(false),
            crate::protocols::fixture_support::Collect::default(),
        );
        for (sock, name) in [(7, "grpc_python.seg"), (8, "h2load_nghttpd.seg")] {
            for rec in load(name).records(sock, None) {
                p.on_record(&rec).unwrap();
            }
            let close = EventBuilder::lifecycle(EventKind::Close, sock)
                .times(u64::MAX / 4, u64::MAX / 4)
                .build(b"");
            p.on_record(&close).unwrap();
        }
        let (sink, summary) = p.finish(&KernelCounters::default(), 1).unwrap();
        (sink.0, summary)
    };
    let (calls, s) = run_with(&[Protocol::Grpc]);
    assert_eq!(calls.len(), 8);
    assert!(calls.iter().all(|c| c.l7.proto == Protocol::Grpc));
    assert_eq!(s.tracker.filtered_calls, 25);
    let (calls, s) = run_with(&[Protocol::Http2]);
    assert_eq!(calls.len(), 25);
    assert!(calls.iter().all(|c| c.l7.proto == Protocol::Http2));
    assert_eq!(s.tracker.filtered_calls, 8);
    let (calls, s) = run_with(&[Protocol::Http2, Protocol::Grpc]);
    assert_eq!((calls.len(), s.tracker.filtered_calls), (33, 0));
    let (calls, _) = run_with(&[Protocol::Http]);
    assert!(calls.is_empty());
}
