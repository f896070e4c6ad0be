//! The Redis parser on real bytes with real syscall boundaries (src/protocols/redis/fixtures/*.seg,
//! captured from redis-cli, redis-benchmark, redis-py and hand-written RESP against
//! redis-server), through the whole user-space pipeline: detection, tracking, endpoints.

use crate::protocols::fixture_support::{run, Collect};

use crate::call::Side;
use crate::conntrack::TrackerConfig;
use crate::kernel_counters::KernelCounters;
use crate::pipeline::Pipeline;
use crate::procinfo::ProcessTable;
use crate::protocols::Protocol;
use crate::segfile::{self, SegFile};

fn load(name: &str) -> SegFile {
    crate::protocols::fixture_support::load("redis", name)
}

/// Every fixture: (file, calls, pushes, commands without a reply, every byte in a call).
const FIXTURES: &[(&str, usize, u64, u64, bool)] = &[
    ("cli_session.client.seg", 24, 0, 0, true),
    ("cli_session.server.seg", 24, 0, 0, true),
    ("benchmark_p16.client.seg", 49, 0, 0, true),
    ("benchmark_p16.server.seg", 49, 0, 0, true),
    ("benchmark_p16_d1000.client.seg", 6, 0, 0, false),
    ("python_resp2.seg", 29, 0, 0, true),
    ("python_resp3.seg", 19, 1, 0, false),
    ("resp3_types.seg", 14, 1, 0, false),
    ("pubsub_resp2.seg", 8, 3, 0, false),
    ("pubsub_resp3.seg", 9, 3, 0, false),
    ("client_reply.seg", 4, 0, 5, false),
    ("large_value.client.seg", 8, 0, 0, true),
    ("large_value.server.seg", 8, 0, 0, true),
    // Detection needs a command in RESP form: inline commands alone are not recognised.
    ("inline.seg", 0, 0, 0, false),
    ("monitor.seg", 2, 6, 0, false),
];

#[test]
fn every_fixture_is_listed() {
    crate::protocols::fixture_support::assert_fixtures_listed(
        "redis",
        FIXTURES.iter().map(|f| f.0),
    );
}

#[test]
fn every_fixture_yields_its_calls_on_the_traced_side() {
    for &(name, calls_want, pushes, unreplied, whole) in FIXTURES {
        let f = load(name);
        let (calls, summary) = run(&f, None);
        assert_eq!(calls.len(), calls_want, "{name}");
        let side = match f.side {
            segfile::Side::Client => Side::Client,
            segfile::Side::Server => Side::Server,
        };
        assert!(calls.iter().all(|c| c.side == side), "{name}: side");
        assert!(
            calls.iter().all(|c| c.l7.proto == Protocol::Redis),
            "{name}"
        );
        if calls_want > 0 {
            assert_eq!(summary.tracker.unrecognised_events, 0, "{name}");
        } else {
            // (Its `GET greeting` line even looks like the start of an HTTP request.)
            assert!(summary.tracker.unrecognised_events > 0, "{name}");
        }
        let p = summary.parse;
        assert_eq!(
            (p.pushes, p.unreplied_requests),
            (pushes, unreplied),
            "{name}"
        );
        assert_eq!(p.unanswered_requests, 0, "{name}");
        let moved: u64 = f.entries.iter().map(|e| e.total_len).sum();
        let counted: u64 = calls.iter().map(|c| c.l7.req.bytes + c.l7.resp.bytes).sum();
        if whole {
            assert_eq!(
                counted, moved,
                "{name}: bytes of calls vs bytes on the wire"
            );
        } else {
            assert!(counted < moved || calls.is_empty(), "{name}");
        }
        // Client latency spans the first command write to the last reply read; the fake
        // clock puts 10 µs between syscalls.
        for c in &calls {
            assert!(c.latency_ns > 0, "{name}: {c:?}");
        }
    }
}

#[test]
fn endpoints_are_commands_with_key_templates() {
    let (_, summary) = run(&load("python_resp2.seg"), None);
    let ep = |method: &str, resource: &str| {
        summary
            .endpoints
            .iter()
            .find(|e| e.method == method && e.resource == resource)
            .unwrap_or_else(|| panic!("no endpoint {method} {resource}: {:?}", summary.endpoints))
    };
    assert_eq!(ep("INCRBY", "counter:{id}").calls, 10);
    assert_eq!(ep("GET", "user:{id}").calls, 1);
    assert_eq!(ep("GET", "missing:{id}").calls, 1);
    assert_eq!(ep("HGETALL", "session:{id}").calls, 1);
    assert_eq!(ep("AUTH", "").calls, 1);
    let wrongtype = ep("GET", "queue:jobs");
    assert_eq!((wrongtype.calls, wrongtype.server_errors), (1, 1));
    assert_eq!(ep("CLIENT SETINFO", "").server_errors, 2);
}

#[test]
fn tiny_snaplens_never_invent_calls() {
    for &(name, ..) in FIXTURES {
        let f = load(name);
        let (full, _) = run(&f, None);
        for snap in [0, 1, 7, 16, 64, 200] {
            let (cut, _) = run(&f, Some(snap));
            assert!(cut.len() <= full.len(), "{name} at snaplen {snap}");
            for c in &cut {
                // A key cut by the snaplen is a prefix of the whole key; a reply whose end was
                // seen has its exact size (it answers the right command).
                assert!(
                    full.iter().any(|g| g.l7.method == c.l7.method
                        && g.l7.resource.starts_with(&c.l7.resource)
                        && g.l7.status_text == c.l7.status_text
                        && (c.l7.end_inferred || g.l7.resp.bytes == c.l7.resp.bytes)),
                    "{name} at snaplen {snap}: invented {:?} {:?} {:?}",
                    c.l7.method,
                    c.l7.resource,
                    c.l7.status_text
                );
            }
        }
    }
}

#[test]
fn redis_and_http_connections_side_by_side() {
    let redis = load("python_resp2.seg");
    let http = SegFile::parse(
        &std::fs::read(format!(
            "{}/src/protocols/http1/fixtures/curl_nginx_keepalive.client.seg",
            env!("CARGO_MANIFEST_DIR")
        ))
        .unwrap(),
    )
    .unwrap();
    let mut p = Pipeline::new(
        TrackerConfig::default(),
        ProcessTable::new(false),
        Collect::default(),
    );
    let (a, b) = (redis.records(1, None), http.records(2, None));
    for i in 0..a.len().max(b.len()) {
        for recs in [&a, &b] {
            if let Some(r) = recs.get(i) {
                p.on_record(r).unwrap();
            }
        }
    }
    let (sink, _) = p.finish(&KernelCounters::default(), 1).unwrap();
    let count = |proto| sink.0.iter().filter(|c| c.l7.proto == proto).count();
    assert_eq!((count(Protocol::Redis), count(Protocol::Http)), (29, 3));
}

/// Issue 43 item 1, beyond the status the desync test checks: every fixture cut by small
/// snaplens, and with each record lost in turn, reports only calls that are calls of the uncut
/// fixture in full — status, latency and both sizes — never a call with another's reply.
#[test]
fn after_a_loss_every_call_is_a_true_call_whole() {
    for &(name, ..) in FIXTURES {
        let f = load(name);
        let (truth, _) = run(&f, None);
        let mut variants: Vec<(String, SegFile)> = Vec::new();
        for i in 0..f.entries.len() {
            let mut g = f.clone();
            g.entries[i].bytes.clear();
            variants.push((format!("record {i} lost"), g));
        }
        let cut: Vec<_> = [1, 8, 40, 64, 512]
            .into_iter()
            .map(|s| (format!("snaplen {s}"), run(&f, Some(s)).0))
            .collect();
        let lost = variants.iter().map(|(w, g)| (w.clone(), run(g, None).0));
        for (what, calls) in cut.into_iter().chain(lost) {
            let mut left: Vec<_> = truth.iter().map(Some).collect();
            for c in &calls {
                let found = left.iter().position(|t| {
                    t.is_some_and(|t| {
                        t.side == c.side
                            && t.l7.method.starts_with(&c.l7.method)
                            && t.l7.resource.starts_with(&c.l7.resource)
                            && (t.l7.status_text.as_ref(), t.l7.outcome)
                                == (c.l7.status_text.as_ref(), c.l7.outcome)
                            && t.latency_ns == c.latency_ns
                            && (t.l7.req.bytes, t.l7.resp.bytes)
                                == (c.l7.req.bytes, c.l7.resp.bytes)
                    })
                });
                let Some(i) = found else {
                    panic!(
                        "{name} {what}: {} {:?} {:?} latency {} bytes {}/{} is no call of the uncut fixture",
                        c.l7.method, c.l7.resource, c.l7.status_text, c.latency_ns, c.l7.req.bytes, c.l7.resp.bytes
                    );
                };
                left[i] = None;
            }
        }
    }
}
