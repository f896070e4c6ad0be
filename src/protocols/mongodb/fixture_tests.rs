//! The MongoDB parser on real bytes with real syscall boundaries (src/protocols/mongodb/fixtures/
//! *.seg, pymongo against FerretDB, captured by capture.sh on both sides at once), through the
//! whole user-space pipeline: detection, tracking, endpoints.

use crate::call::{Call, Side};
use crate::protocols::fixture_support::run;
use crate::protocols::{Outcome, Protocol};
use crate::segfile::{self, SegFile};

fn load(name: &str) -> SegFile {
    crate::protocols::fixture_support::load("mongodb", name)
}

/// Every fixture: (file, calls, every byte in a call).
const FIXTURES: &[(&str, usize, bool)] = &[
    ("pymongo_crud.client.seg", 12, true),
    ("pymongo_crud.server.seg", 12, true),
    ("pymongo_monitor.client.seg", 2, true),
];

/// What pymongo's command monitoring reported for the crud run (capture.sh prints it): per
/// command, calls and failures; plus the handshake (`ismaster`, an OP_MSG from pymongo 4.20),
/// which pymongo does not publish.
const CRUD_TRUTH: &[(&str, &str, usize, usize)] = &[
    ("ismaster", "", 1, 0),
    ("drop", "orders", 1, 0),
    // insert_many (20 documents) and the duplicate insert_one (ok 1, writeErrors 11000).
    ("insert", "orders", 2, 1),
    ("find", "orders", 1, 0),
    ("getMore", "orders", 3, 0),
    // The pipeline and count_documents.
    ("aggregate", "orders", 2, 0),
    ("nosuchcommand", "", 1, 1),
    ("endSessions", "", 1, 1),
];

#[test]
fn every_fixture_is_listed() {
    crate::protocols::fixture_support::assert_fixtures_listed(
        "mongodb",
        FIXTURES.iter().map(|f| f.0),
    );
}

#[test]
fn every_fixture_yields_its_calls_on_the_traced_side() {
    for &(name, calls_want, whole) in FIXTURES {
        let f = load(name);
        let (calls, summary) = run(&f, None);
        assert_eq!(calls.len(), calls_want, "{name}: {calls:#?}");
        let side = match f.side {
            segfile::Side::Client => Side::Client,
            segfile::Side::Server => Side::Server,
        };
        assert!(calls.iter().all(|c| c.side == side), "{name}: side");
        assert!(calls.iter().all(|c| c.l7.proto == Protocol::Mongodb));
        assert_eq!(summary.tracker.unrecognised_events, 0, "{name}");
        let p = summary.parse;
        assert_eq!(
            (
                p.unanswered_requests,
                p.unmatched_responses,
                p.desyncs,
                p.damaged_messages
            ),
            (0, 0, 0, 0),
            "{name}"
        );
        let moved: u64 = f.entries.iter().map(|e| e.total_len).sum();
        let counted: u64 = calls.iter().map(|c| c.l7.req.bytes + c.l7.resp.bytes).sum();
        if whole {
            assert_eq!(counted, moved, "{name}: bytes of calls vs bytes moved");
        }
        for c in &calls {
            assert!(c.latency_ns > 0, "{name}: {c:?}");
            assert_ne!(c.l7.outcome, Outcome::Unknown, "{name}: {c:?}");
        }
    }
}

fn detail<'a>(c: &'a Call, key: &str) -> Option<&'a str> {
    c.l7.details
        .iter()
        .find(|(k, _)| *k == key)
        .map(|(_, v)| v.as_str())
}

#[test]
fn crud_calls_equal_pymongos_own_count_on_both_sides() {
    for name in ["pymongo_crud.client.seg", "pymongo_crud.server.seg"] {
        let (calls, _) = run(&load(name), None);
        for &(method, coll, n, failed) in CRUD_TRUTH {
            let of: Vec<&Call> = calls
                .iter()
                .filter(|c| c.l7.method == method && c.l7.resource == coll)
                .collect();
            assert_eq!(of.len(), n, "{name}: {method} {coll}: {calls:#?}");
            let errors = of.iter().filter(|c| c.l7.outcome != Outcome::Ok).count();
            assert_eq!(errors, failed, "{name}: {method} failures");
        }
        let first = &calls[0];
        assert_eq!(
            (first.l7.version, detail(first, "db")),
            ("OP_MSG", Some("admin"))
        );
        let insert_many = calls.iter().find(|c| c.l7.method == "insert").unwrap();
        // The 20 documents came in a kind-1 sequence.
        assert_eq!(detail(insert_many, "documents"), Some("20"));
        assert_eq!(detail(insert_many, "db"), Some("shop"));
        assert_eq!(insert_many.l7.version, "OP_MSG");
        let dup = calls
            .iter()
            .filter(|c| c.l7.method == "insert")
            .nth(1)
            .unwrap();
        assert_eq!(dup.l7.status_text.as_deref(), Some("DuplicateKey"));
        assert_eq!(dup.l7.outcome, Outcome::ClientError);
        assert_eq!(detail(dup, "code"), Some("11000"));
        // The message quotes the key: cut before it.
        let msg = detail(dup, "error").unwrap();
        assert!(!msg.contains('{') && !msg.contains("_id: 0"), "{msg}");
        let unknown = calls
            .iter()
            .find(|c| c.l7.method == "nosuchcommand")
            .unwrap();
        assert_eq!(unknown.l7.status_text.as_deref(), Some("CommandNotFound"));
        assert_eq!(detail(unknown, "code"), Some("59"));
        // No document value anywhere: the documents said "widget" and "dup".
        for c in &calls {
            let all = format!("{:?} {:?}", c.l7, c.l7.details);
            assert!(
                !all.contains("widget") && !all.contains("\"dup\""),
                "{name}: {all}"
            );
        }
    }
}

#[test]
fn endpoints_are_commands_on_collections() {
    let (_, summary) = run(&load("pymongo_crud.client.seg"), None);
    let ep = |method: &str, resource: &str| {
        summary
            .endpoints
            .iter()
            .find(|e| e.method == method && e.resource == resource)
            .unwrap_or_else(|| panic!("no endpoint {method} {resource}: {:?}", summary.endpoints))
    };
    assert_eq!(ep("getMore", "orders").calls, 3);
    assert_eq!(ep("find", "orders").calls, 1);
    assert_eq!(ep("insert", "orders").calls, 2);
}

#[test]
fn tiny_snaplens_never_invent_calls() {
    for &(name, ..) in FIXTURES {
        let f = load(name);
        let (full, _) = run(&f, None);
        for snap in [0, 1, 7, 16, 21, 64, 200, 1000] {
            let (cut, _) = run(&f, Some(snap));
            assert!(cut.len() <= full.len(), "{name} at snaplen {snap}");
            for c in &cut {
                assert!(
                    full.iter().any(|g| g.l7.method.starts_with(&c.l7.method)
                        && g.l7.resource.starts_with(&c.l7.resource)
                        && (c.l7.outcome == Outcome::Unknown
                            || g.l7.status_text == c.l7.status_text)
                        && g.l7.resp.bytes == c.l7.resp.bytes),
                    "{name} at snaplen {snap}: invented {:?} {:?} {:?}",
                    c.l7.method,
                    c.l7.resource,
                    c.l7.status_text
                );
            }
        }
    }
}

/// Every fixture cut by small snaplens, and with each record lost in turn, reports only calls
/// of the uncut fixture — status (or unknown), latency and both sizes.
#[test]
fn after_a_loss_every_call_is_a_true_call_whole() {
    for &(name, ..) in FIXTURES {
        let f = load(name);
        let (truth, _) = run(&f, None);
        let mut runs: Vec<(String, Vec<Call>)> = Vec::new();
        for i in 0..f.entries.len() {
            let mut g = f.clone();
            g.entries[i].bytes.clear();
            runs.push((format!("record {i} lost"), run(&g, None).0));
        }
        for s in [1, 8, 40, 64, 512] {
            runs.push((format!("snaplen {s}"), run(&f, Some(s)).0));
        }
        for (what, calls) in runs {
            let mut left: Vec<_> = truth.iter().map(Some).collect();
            for c in &calls {
                let found = left.iter().position(|t| {
                    t.is_some_and(|t| {
                        t.side == c.side
                            && t.l7.method.starts_with(&c.l7.method)
                            && t.l7.resource.starts_with(&c.l7.resource)
                            && (c.l7.outcome == Outcome::Unknown
                                || (t.l7.status_text.as_ref(), t.l7.outcome)
                                    == (c.l7.status_text.as_ref(), c.l7.outcome))
                            && t.latency_ns == c.latency_ns
                            && (t.l7.req.bytes, t.l7.resp.bytes)
                                == (c.l7.req.bytes, c.l7.resp.bytes)
                    })
                });
                let Some(i) = found else {
                    panic!(
                        "{name} {what}: {} {:?} {:?} is no call of the uncut fixture",
                        c.l7.method, c.l7.resource, c.l7.status_text
                    );
                };
                left[i] = None;
            }
        }
    }
}
