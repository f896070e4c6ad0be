//! The HTTP/1 parser on real bytes with real syscall boundaries (src/protocols/http1/fixtures/*.seg,
//! captured from curl, wrk, nc, python and nginx), through the whole user-space pipeline.

use crate::protocols::fixture_support::run;

use crate::segfile::{SegFile, Side};

fn load(name: &str) -> SegFile {
    crate::protocols::fixture_support::load("http1", name)
}

/// (method, resource, status) of each expected call, in order.
type Expected = (&'static str, &'static str, u32);
type Want = &'static [Expected];

const KEEPALIVE: Want = &[
    ("GET", "/index.html", 200),
    ("GET", "/missing.html", 404),
    ("GET", "/page20k.html", 200),
];
const PIPELINED: Want = &[
    ("GET", "/index.html", 200),
    ("GET", "/missing.html", 404),
    ("GET", "/hello.txt", 200),
];
const CHUNKED: Want = &[("GET", "/chunked", 200), ("GET", "/chunked-trailer", 200)];
const UPLOAD: Want = &[("POST", "/upload", 200)];
const BIG: Want = &[("GET", "/big300k.txt", 200)];

fn cases() -> Vec<(&'static str, Vec<Expected>)> {
    let wrk = vec![("GET", "/index.html", 200); 20];
    vec![
        ("curl_nginx_keepalive.client.seg", KEEPALIVE.to_vec()),
        ("curl_nginx_keepalive.server.seg", KEEPALIVE.to_vec()),
        ("pipelined_nginx.seg", PIPELINED.to_vec()),
        ("pipelined_nginx.client.seg", PIPELINED.to_vec()),
        ("chunked_response.client.seg", CHUNKED.to_vec()),
        ("chunked_response.server.seg", CHUNKED.to_vec()),
        ("chunked_request.seg", UPLOAD.to_vec()),
        ("chunked_request_stream.client.seg", UPLOAD.to_vec()),
        ("chunked_request_stream.server.seg", UPLOAD.to_vec()),
        ("expect_100_continue.client.seg", UPLOAD.to_vec()),
        ("expect_100_continue.server.seg", UPLOAD.to_vec()),
        ("large_body_sendfile.seg", BIG.to_vec()),
        ("large_body_client.seg", BIG.to_vec()),
        ("python_server_http10.seg", vec![("GET", "/hello.txt", 200)]),
        ("http10_close_delimited.seg", vec![("GET", "/close", 200)]),
        (
            "head_204_304.seg",
            vec![
                ("HEAD", "/index.html", 200),
                ("GET", "/empty", 204),
                ("GET", "/index.html", 304),
                ("GET", "/page20k.html", 304),
            ],
        ),
        ("wrk_nginx.seg", wrk),
    ]
}

#[test]
fn every_fixture_yields_its_calls_with_every_byte_accounted_for() {
    for (name, want) in cases() {
        let f = load(name);
        let (calls, summary) = run(&f, None);
        let got: Vec<(&str, &str, u32)> = calls
            .iter()
            .map(|c| {
                (
                    c.l7.method.as_str(),
                    c.l7.resource.as_str(),
                    c.l7.status.unwrap(),
                )
            })
            .collect();
        assert_eq!(got, want, "{name}");
        let side = match f.side {
            Side::Client => crate::call::Side::Client,
            Side::Server => crate::call::Side::Server,
        };
        assert!(calls.iter().all(|c| c.side == side), "{name}: side");
        let moved: u64 = f.entries.iter().map(|e| e.total_len).sum();
        let counted: u64 = calls.iter().map(|c| c.l7.req.bytes + c.l7.resp.bytes).sum();
        assert_eq!(
            counted, moved,
            "{name}: bytes of calls vs bytes on the wire"
        );
        assert!(calls.iter().all(|c| !c.l7.end_inferred), "{name}");
        let p = summary.parse;
        assert_eq!(
            (
                p.damaged_messages,
                p.desyncs,
                p.unmatched_responses,
                p.unanswered_requests
            ),
            (0, 0, 0, 0),
            "{name}: {p:?}"
        );
    }
}

#[test]
fn a_1k_snaplen_changes_nothing_but_the_truncated_flag() {
    for (name, _) in cases() {
        let f = load(name);
        let (full, _) = run(&f, None);
        let (cut, summary) = run(&f, Some(1024));
        assert_eq!(full.len(), cut.len(), "{name}");
        for (a, b) in full.iter().zip(&cut) {
            assert_eq!(
                (
                    &a.l7.method,
                    &a.l7.resource,
                    a.l7.status,
                    a.l7.req.bytes,
                    a.l7.resp.bytes,
                    a.latency_ns
                ),
                (
                    &b.l7.method,
                    &b.l7.resource,
                    b.l7.status,
                    b.l7.req.bytes,
                    b.l7.resp.bytes,
                    b.latency_ns
                ),
                "{name}"
            );
        }
        assert_eq!(summary.parse.damaged_messages, 0, "{name}");
    }
}

#[test]
fn tiny_snaplens_never_invent_calls() {
    for (name, _) in cases() {
        let f = load(name);
        let (full, _) = run(&f, None);
        for snap in [0, 1, 7, 16, 64, 200] {
            let (cut, _) = run(&f, Some(snap));
            assert!(cut.len() <= full.len(), "{name} at snaplen {snap}");
            for c in &cut {
                assert!(
                    full.iter()
                        .any(|g| g.l7.resource == c.l7.resource && g.l7.status == c.l7.status),
                    "{name} at snaplen {snap}: invented {c:?}"
                );
            }
        }
    }
}

#[test]
fn tls_and_other_non_http_bytes_make_no_calls() {
    let (calls, summary) = run(&load("garbage_tls.seg"), None);
    assert!(calls.is_empty());
    assert_eq!(summary.tracker.unrecognised_events, 1);
}

#[test]
fn pipelined_batch_arrives_in_one_read_and_pairs_in_order() {
    let f = load("pipelined_nginx.seg");
    let reads = f.entries.iter().filter(|e| e.to_server).count();
    assert_eq!(reads, 1, "the fixture really is one read");
    let (calls, _) = run(&f, None);
    // All three requests share that one syscall's timestamps; responses differ.
    assert!(calls
        .windows(2)
        .all(|w| w[0].l7.req.first_end_ns == w[1].l7.req.first_end_ns));
    assert!(calls
        .windows(2)
        .all(|w| w[0].l7.resp.first_start_ns < w[1].l7.resp.first_start_ns));
}
