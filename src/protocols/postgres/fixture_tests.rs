//! The PostgreSQL parser on real bytes with real syscall boundaries (src/protocols/postgres/fixtures/
//! *.seg, the server side of psql and pgbench against PostgreSQL 15, captured by capture.sh),
//! through the whole user-space pipeline: detection, tracking, endpoints.

use crate::protocols::fixture_support::run;

use crate::protocols::{Outcome, Protocol};
use crate::segfile::SegFile;

fn load(name: &str) -> SegFile {
    crate::protocols::fixture_support::load("postgres", name)
}

/// (method, resource, status_text) of each call.
fn summary(calls: &[crate::call::Call]) -> Vec<(String, String, Option<String>)> {
    calls
        .iter()
        .map(|c| {
            (
                c.l7.method.clone(),
                c.l7.resource.clone(),
                c.l7.status_text.clone(),
            )
        })
        .collect()
}

fn detail<'a>(c: &'a crate::call::Call, key: &str) -> Option<&'a str> {
    c.l7.details
        .iter()
        .find(|(k, _)| *k == key)
        .map(|(_, v)| v.as_str())
}

/// pgbench -t 20 -S: 20 transactions of one SELECT each, one call per Execute.
#[test]
fn pgbench_select_only_extended_and_prepared() {
    for name in ["pgbench_extended.seg", "pgbench_prepared.seg"] {
        let (calls, summary) = run(&load(name), None);
        let p = summary.parse;
        assert_eq!(calls.len(), 20, "{name}");
        for c in &calls {
            assert_eq!(c.l7.proto, Protocol::Postgres);
            assert_eq!(c.l7.method, "SELECT");
            assert_eq!(
                c.l7.resource,
                "SELECT abalance FROM pgbench_accounts WHERE aid = $1;"
            );
            assert_eq!(c.l7.outcome, Outcome::Ok);
            assert_eq!(detail(c, "rows"), Some("1"));
            assert!(c.latency_ns > 0);
        }
        assert_eq!(
            (
                p.damaged_messages,
                p.desyncs,
                p.unmatched_responses,
                p.unanswered_requests
            ),
            (0, 0, 0, 0),
            "{name}"
        );
    }
}

/// psql -f: one simple-query call per statement psql sends, two of them errors.
#[test]
fn psql_simple_queries_errors_and_notify() {
    let (calls, summary) = run(&load("psql_simple.seg"), None);
    let got = self::summary(&calls);
    let err = |s: &str| Some(s.to_owned());
    let want: Vec<(String, String, Option<String>)> = [
        (
            "CREATE",
            "create table items (id int primary key, name text);",
            None,
        ),
        (
            "INSERT",
            "insert into items values (1, 'a'), (2, 'b'), (3, 'c');",
            None,
        ),
        ("SELECT", "select * from items where id > 1;", None),
        ("UPDATE", "update items set name = 'z' where id < 3;", None),
        ("SELECT", "select * from no_such_table;", err("42P01")),
        (
            "INSERT",
            "insert into items values (1, 'dup');",
            err("23505"),
        ),
        ("SELECT", "select 1;", None),
        ("SELECT", "select 2;", None),
        ("LISTEN", "listen jobs;", None),
        ("NOTIFY", "notify jobs, 'hello';", None),
        ("DELETE", "delete from items;", None),
    ]
    .into_iter()
    .map(|(m, r, s)| (m.to_owned(), r.to_owned(), s))
    .collect();
    assert_eq!(got, want);
    assert_eq!(detail(&calls[1], "rows"), Some("3"));
    assert_eq!(detail(&calls[2], "rows"), Some("2"));
    assert_eq!(calls[4].l7.outcome, Outcome::ClientError);
    let p = summary.parse;
    assert_eq!(p.pushes, 1);
    assert_eq!(
        (
            p.damaged_messages,
            p.desyncs,
            p.unmatched_responses,
            p.unanswered_requests
        ),
        (0, 0, 0, 0)
    );
}

/// Cut at 128 bytes a syscall, the server's startup burst (417 bytes of ParameterStatus and
/// more) loses its later headers: the stream resyncs at the next syscall that starts with a
/// message (the first reply). The client's first request proves the startup's ReadyForQuery
/// came (a client waits for it), so that reply answers it: every exchange makes its call.
#[test]
fn pgbench_under_a_small_snaplen() {
    for name in ["pgbench_extended.seg", "pgbench_prepared.seg"] {
        let (calls, summary) = run(&load(name), Some(128));
        let p = summary.parse;
        let (whole, _) = run(&load(name), None);
        assert_eq!(calls.len(), whole.len(), "{name}");
        for (cut, uncut) in calls.iter().zip(&whole) {
            assert_eq!(
                (&cut.l7.status_text, cut.l7.outcome),
                (&uncut.l7.status_text, uncut.l7.outcome),
                "{name}"
            );
        }
        assert!(calls.iter().all(|c| c.l7.resource
            == "SELECT abalance FROM pgbench_accounts WHERE aid = $1;"
            && !c.l7.end_inferred));
        assert_eq!((p.desyncs, p.unparsed_bytes), (1, 289), "{name}");
        assert_eq!(
            (
                p.damaged_messages,
                p.unmatched_responses,
                p.unanswered_requests,
                p.inferred_ends
            ),
            (0, 0, 0, 0),
            "{name}"
        );
    }
}

/// psql -c with four statements: one Q, one call; the third fails, the fourth never runs.
#[test]
fn several_statements_in_one_simple_query() {
    let (calls, summary) = run(&load("psql_multi_statement.seg"), None);
    assert_eq!(
        self::summary(&calls),
        vec![(
            "INSERT".to_owned(),
            "insert into items values (10, 'x'); select * from items; select * from nope; \
             select 3"
                .to_owned(),
            Some("42P01".to_owned())
        )]
    );
    assert_eq!(detail(&calls[0], "statements"), Some("2"));
    assert_eq!(detail(&calls[0], "tag"), Some("SELECT 1"));
    let p = summary.parse;
    assert_eq!(
        (
            p.damaged_messages,
            p.desyncs,
            p.unmatched_responses,
            p.unanswered_requests
        ),
        (0, 0, 0, 0)
    );
}

/// A 500-row result (~25 KB) in server writes of 8 KiB, cut as the kernel side cuts them at
/// every snaplen from 64 bytes to 4 KiB: a head and, for a write longer than the snaplen, its
/// last 256 bytes. The call ends exactly where the uncut one does — its CommandComplete and
/// ReadyForQuery in the last write's tail — with the same bytes, latency, rows and outcome,
/// and the next query is paired as well. Without tails (a head only) a short snaplen leaves
/// that end unseen: the end is inferred, the outcome unknown.
#[test]
fn a_result_longer_than_the_snaplen_ends_exactly_in_its_tail() {
    let f = load("psql_big_result.seg");
    let (whole, s) = run(&f, None);
    let select = "select g, md5(g::text) from generate_series(1, 500) g";
    assert_eq!(summary(&whole)[0].1, select);
    assert_eq!(detail(&whole[0], "rows"), Some("500"));
    assert_eq!(whole.len(), 2);
    assert_eq!(s.parse.inferred_ends, 0);
    let shape = |c: &crate::call::Call| {
        (
            c.l7.resp.bytes,
            c.latency_ns,
            c.l7.outcome,
            c.l7.end_inferred,
            detail(c, "rows").map(str::to_owned),
        )
    };
    for snaplen in [64, 100, 256, 300, 1000, 2048, 4096] {
        let (calls, s) = crate::protocols::fixture_support::run_kernel_cut(&f, snaplen);
        assert_eq!(calls.len(), 2, "snaplen {snaplen}");
        for (c, w) in calls.iter().zip(&whole) {
            assert_eq!(shape(c), shape(w), "snaplen {snaplen}");
        }
        assert_eq!(
            (s.parse.inferred_ends, s.parse.damaged_messages),
            (0, 0),
            "snaplen {snaplen}"
        );
    }
    // The last write (387 bytes) cut at 64 without its tail: the end goes unseen.
    let (calls, _) = run(&f, Some(64));
    assert!(calls[0].l7.end_inferred);
    assert_eq!(calls[0].l7.outcome, Outcome::Unknown);
}
