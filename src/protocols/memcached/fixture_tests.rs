//! The Memcached parser on real bytes with real syscall boundaries (src/protocols/memcached/fixtures/
//! *.seg, captured from hand-written text, meta and binary clients and pymemcache against
//! memcached 1.6), through the whole user-space pipeline: detection, tracking, endpoints.

use crate::protocols::fixture_support::{run, Collect};

use crate::call::Side;
use crate::conntrack::TrackerConfig;
use crate::kernel_counters::KernelCounters;
use crate::pipeline::Pipeline;
use crate::procinfo::ProcessTable;
use crate::protocols::Protocol;
use crate::segfile::{self, SegFile};

fn load(name: &str) -> SegFile {
    crate::protocols::fixture_support::load("memcached", name)
}

/// Every fixture: (file, calls, commands without a reply, version of every call).
const FIXTURES: &[(&str, usize, u64, &str)] = &[
    ("text.client.seg", 27, 3, "text"),
    ("text.server.seg", 27, 3, "text"),
    ("meta.client.seg", 14, 2, "meta"),
    ("meta.server.seg", 14, 2, "meta"),
    ("binary.client.seg", 13, 3, "binary"),
    ("binary.server.seg", 13, 3, "binary"),
    ("pymemcache.client.seg", 9, 1, "text"),
    ("pymemcache.server.seg", 9, 1, "text"),
];

#[test]
fn every_fixture_is_listed() {
    crate::protocols::fixture_support::assert_fixtures_listed(
        "memcached",
        FIXTURES.iter().map(|f| f.0),
    );
}

#[test]
fn every_fixture_yields_its_calls_on_the_traced_side() {
    for &(name, calls_want, unreplied, version) in FIXTURES {
        let f = load(name);
        let (calls, summary) = run(&f, None);
        assert_eq!(calls.len(), calls_want, "{name}");
        let side = match f.side {
            segfile::Side::Client => Side::Client,
            segfile::Side::Server => Side::Server,
        };
        assert!(calls.iter().all(|c| c.side == side), "{name}: side");
        assert!(
            calls
                .iter()
                .all(|c| c.l7.proto == Protocol::Memcached && c.l7.version == version),
            "{name}"
        );
        assert_eq!(summary.tracker.unrecognised_events, 0, "{name}");
        let p = summary.parse;
        assert_eq!(p.unreplied_requests, unreplied, "{name}");
        assert_eq!(
            (p.damaged_messages, p.desyncs, p.unmatched_responses),
            (0, 0, 0),
            "{name}"
        );
        assert_eq!(p.unanswered_requests, 0, "{name}");
        for c in &calls {
            assert!(c.latency_ns > 0, "{name}: {c:?}");
        }
    }
}

#[test]
fn endpoints_are_commands_with_key_templates() {
    let (_, summary) = run(&load("text.client.seg"), None);
    let ep = |method: &str, resource: &str| {
        summary
            .endpoints
            .iter()
            .find(|e| e.method == method && e.resource == resource)
            .unwrap_or_else(|| panic!("no endpoint {method} {resource}: {:?}", summary.endpoints))
    };
    // set user:1, user:2, counter:1, large:1 (noreply set quiet:1 makes no call).
    assert_eq!(ep("set", "user:{id}").calls, 2);
    assert_eq!(ep("set", "counter:{id}").calls, 1);
    assert_eq!(ep("get", "user:{id}").calls, 1);
    assert_eq!(ep("get", "missing:{id}").calls, 1);
    assert_eq!(ep("cas", "user:{id}").calls, 2);
    assert_eq!(ep("incr", "counter:{id}").calls, 2);
    // CLIENT_ERROR is the client's error, ERROR (unknown command) a server error.
    let incr = ep("incr", "user:{id}");
    assert_eq!(
        (incr.calls, incr.server_errors, incr.client_errors),
        (1, 0, 1)
    );
    assert_eq!(ep("bogus_command", "").server_errors, 1);
}

#[test]
fn tiny_snaplens_never_invent_calls() {
    for &(name, ..) in FIXTURES {
        let f = load(name);
        let (full, _) = run(&f, None);
        for snap in [0, 1, 7, 16, 24, 64, 200] {
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
                    "{name} at snaplen {snap}: invented {:?} {:?} {:?} {c:?}",
                    c.l7.method,
                    c.l7.resource,
                    c.l7.status_text
                );
            }
        }
    }
}

#[test]
fn memcached_redis_and_http_connections_side_by_side() {
    let mc = load("text.client.seg");
    let bin = load("binary.client.seg");
    let redis = crate::protocols::fixture_support::load("redis", "python_resp2.seg");
    let http = crate::protocols::fixture_support::load("http1", "curl_nginx_keepalive.client.seg");
    let mut p = Pipeline::new(
        TrackerConfig::default(),
        ProcessTable::new(false),
        Collect::default(),
    );
    let all = [
        mc.records(1, None),
        bin.records(2, None),
        redis.records(3, None),
        http.records(4, None),
    ];
    let longest = all.iter().map(Vec::len).max().unwrap_or(0);
    for i in 0..longest {
        for recs in &all {
            if let Some(r) = recs.get(i) {
                p.on_record(r).unwrap();
            }
        }
    }
    let (sink, _) = p.finish(&KernelCounters::default(), 1).unwrap();
    let count = |proto| sink.0.iter().filter(|c| c.l7.proto == proto).count();
    assert_eq!(
        (
            count(Protocol::Memcached),
            count(Protocol::Redis),
            count(Protocol::Http)
        ),
        (27 + 13, 29, 3)
    );
}
