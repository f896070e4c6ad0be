//! The MySQL parser on real bytes with real syscall boundaries (src/protocols/mysql/fixtures/*.seg,
//! the server side of the mariadb CLI, mysqlslap and Perl DBD::MariaDB against MariaDB 10.11,
//! captured by capture.sh), through the whole user-space pipeline: detection, tracking,
//! endpoints.

use crate::protocols::fixture_support::run;

use crate::protocols::{Outcome, ParseStats, Protocol};
use crate::segfile::SegFile;

fn load(name: &str) -> SegFile {
    crate::protocols::fixture_support::load("mysql", name)
}

/// (method, resource, status_text, rows) of each call.
fn summary(calls: &[crate::call::Call]) -> Vec<(String, String, Option<String>, Option<String>)> {
    calls
        .iter()
        .map(|c| {
            (
                c.l7.method.clone(),
                c.l7.resource.clone(),
                c.l7.status_text.clone(),
                detail(c, "rows").map(str::to_owned),
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

fn want(
    rows: &[(&str, &str, Option<&str>, Option<&str>)],
) -> Vec<(String, String, Option<String>, Option<String>)> {
    rows.iter()
        .map(|(m, r, s, n)| {
            (
                m.to_string(),
                r.to_string(),
                s.map(str::to_owned),
                n.map(str::to_owned),
            )
        })
        .collect()
}

/// A clean capture: nothing damaged, lost, unmatched or left unanswered.
fn assert_clean(p: &ParseStats, name: &str) {
    assert_eq!(
        (
            p.damaged_messages,
            p.desyncs,
            p.unparsed_bytes,
            p.unmatched_responses,
            p.unanswered_requests,
            p.inferred_ends
        ),
        (0, 0, 0, 0, 0, 0),
        "{name}"
    );
}

/// The mariadb CLI: one COM_QUERY per statement it sends; a CALL and a two-statement query
/// each one call with two result sets; errors 1064 and 1062.
#[test]
fn mariadb_cli_queries_errors_and_multiple_results() {
    let (calls, summary) = run(&load("mariadb_cli.seg"), None);
    assert!(calls.iter().all(|c| c.l7.proto == Protocol::Mysql));
    assert_eq!(
        self::summary(&calls),
        want(&[
            (
                "CREATE",
                "create table items (id int primary key, name varchar(20))",
                None,
                Some("0")
            ),
            (
                "INSERT",
                "insert into items values (1, 'a'), (2, 'b'), (3, 'c')",
                None,
                Some("3")
            ),
            ("SELECT", "select * from items where id > 1", None, Some("2")),
            (
                "UPDATE",
                "update items set name = 'z' where id < 3",
                None,
                Some("2")
            ),
            ("SELEC", "selec 1", Some("1064 (42000)"), None),
            (
                "INSERT",
                "insert into items values (1, 'dup')",
                Some("1062 (23000)"),
                None
            ),
            (
                "CREATE",
                "create procedure two() begin select id from items; select count(*) from items; end",
                None,
                Some("0")
            ),
            ("CALL", "call two()", None, Some("4")),
            ("SELECT", "select 1; select 2, 3", None, Some("2")),
            ("DELETE", "delete from items", None, Some("3")),
        ])
    );
    assert_eq!(calls[4].l7.outcome, Outcome::ClientError);
    assert_eq!(
        detail(&calls[5], "error"),
        Some("Duplicate entry '1' for key 'PRIMARY'")
    );
    assert_eq!(detail(&calls[7], "result_sets"), Some("2"));
    assert_eq!(detail(&calls[8], "result_sets"), Some("2"));
    assert!(calls.iter().all(|c| c.latency_ns > 0));
    let p = summary.parse;
    assert_clean(&p, "mariadb_cli");
    // COM_QUIT
    assert_eq!(p.unreplied_requests, 1);
}

/// mysqlslap --number-of-queries=20 --concurrency=1: 20 × SELECT 1 on its busiest connection.
#[test]
fn mysqlslap_twenty_selects() {
    let (calls, summary) = run(&load("mysqlslap.seg"), None);
    assert_eq!(calls.len(), 20);
    for c in &calls {
        assert_eq!(c.l7.method, "SELECT");
        assert_eq!(c.l7.resource, "SELECT 1");
        assert_eq!(c.l7.outcome, Outcome::Ok);
        assert_eq!(detail(c, "rows"), Some("1"));
    }
    assert_clean(&summary.parse, "mysqlslap");
}

/// DBD::MariaDB with server-side prepares: each execute shows its statement's SQL; the
/// parameters never show.
#[test]
fn perl_server_side_prepared_statements() {
    let (calls, summary) = run(&load("perl_prepared.seg"), None);
    let ins = "insert into kv values (?, ?)";
    let sel = "select k, v from kv where k >= ?";
    let create = "create table if not exists kv (k int primary key, v varchar(20))";
    let mut rows = vec![
        ("SET", "SET NAMES 'utf8mb4'", None, Some("0")),
        (
            "SET",
            "SET character_set_server = 'utf8mb4'",
            None,
            Some("0"),
        ),
        (
            "SET",
            "SET collation_connection = 'utf8mb4_unicode_ci'",
            None,
            Some("0"),
        ),
        (
            "SET",
            "SET collation_server = 'utf8mb4_unicode_ci'",
            None,
            Some("0"),
        ),
        // DBI's do(): prepare, execute, close.
        ("PREPARE", create, None, None),
        ("CREATE", create, None, Some("0")),
        ("PREPARE", ins, None, None),
    ];
    rows.extend(std::iter::repeat_n(("INSERT", ins, None, Some("1")), 5));
    rows.extend([
        ("INSERT", ins, Some("1062 (23000)"), None),
        ("STMT_RESET", ins, None, Some("0")),
        ("PREPARE", sel, None, None),
        ("SELECT", sel, None, Some("4")),
        (
            "PREPARE",
            "select * from no_such_table",
            Some("1146 (42S02)"),
            None,
        ),
    ]);
    assert_eq!(self::summary(&calls), want(&rows));
    assert_eq!(detail(&calls[7], "statement_id"), Some("2"));
    assert_eq!(detail(&calls[7], "command"), Some("stmt_execute"));
    // The parameters ("v1", "dup") are in no call.
    assert!(calls
        .iter()
        .all(|c| !c.l7.resource.contains("v1") && !c.l7.resource.contains("dup")));
    let p = summary.parse;
    assert_clean(&p, "perl_prepared");
    // Three COM_STMT_CLOSE and the COM_QUIT.
    assert_eq!(p.unreplied_requests, 4);
}

/// Cut at 64 bytes a syscall, long statements lose their tails and a result set written in one
/// syscall its later headers (the server's stream resyncs at the next response): a call whose
/// response ended out of sight is counted, not made; every call made is one of the uncut run,
/// in order, with its SQL's start and its status (or `unknown`).
#[test]
fn small_snaplen_makes_or_counts_every_call() {
    for name in ["mariadb_cli.seg", "mysqlslap.seg", "perl_prepared.seg"] {
        let (calls, summary) = run(&load(name), Some(64));
        let full = run(&load(name), None).0;
        let mut wholes = full.iter();
        for cut in &calls {
            let unknown = cut.l7.outcome == Outcome::Unknown;
            let found = wholes.any(|w| {
                w.l7.resource.starts_with(&cut.l7.resource)
                    && (unknown || cut.l7.status_text == w.l7.status_text)
            });
            assert!(found, "{name}: {:?} is no call of the uncut run", cut.l7);
        }
        let dropped = (full.len() - calls.len()) as u64;
        assert!(summary.parse.damaged_messages >= dropped, "{name}");
    }
}

/// Two results longer than the snaplen (500 rows in writes of 16,384 and 4,128 bytes; 30 rows
/// of 1000 bytes in 16,384 and 13,894), each followed by a query, cut as the kernel side cuts
/// them at snaplens from 256 bytes to 4 KiB: a head and, for a write longer than the snaplen,
/// its last 256 bytes (from 256 on: at shorter ones the column definitions go unseen, an
/// ordinary loss). Each call ends where the uncut one does (the final EOF in the last
/// write's tail: proven there by the row packet before it, or for rows longer than a tail by
/// the client's next command), with the same bytes, latency and outcome; the rows whose
/// packets went unseen are not counted, so none is reported.
#[test]
fn results_longer_than_the_snaplen_end_exactly_in_their_tails() {
    let f = load("mariadb_big_results.seg");
    let (whole, s) = run(&f, None);
    assert_clean(&s.parse, "whole");
    let resources: Vec<_> = whole.iter().map(|c| c.l7.resource.as_str()).collect();
    assert_eq!(
        resources,
        [
            "select seq, md5(seq) from seq_1_to_500",
            "select 'next'",
            "select repeat('x', 1000) from seq_1_to_30",
            "select 'last'"
        ]
    );
    assert_eq!(detail(&whole[0], "rows"), Some("500"));
    assert_eq!(detail(&whole[2], "rows"), Some("30"));
    let shape = |c: &crate::call::Call| (c.l7.resp.bytes, c.latency_ns, c.l7.outcome);
    for snaplen in [256, 300, 1000, 2048, 4096] {
        let (calls, s) = crate::protocols::fixture_support::run_kernel_cut(&f, snaplen);
        assert_eq!(calls.len(), 4, "snaplen {snaplen}: {calls:#?}");
        for (c, w) in calls.iter().zip(&whole) {
            assert_eq!(c.l7.resource, w.l7.resource, "snaplen {snaplen}");
            assert_eq!(shape(c), shape(w), "snaplen {snaplen}: {}", c.l7.resource);
            assert!(!c.l7.end_inferred);
        }
        // The big results' rows were not all seen: not reported; the small ones' are.
        assert_eq!(detail(&calls[0], "rows"), None, "snaplen {snaplen}");
        assert_eq!(detail(&calls[2], "rows"), None, "snaplen {snaplen}");
        assert_eq!(detail(&calls[1], "rows"), Some("1"));
        assert_eq!(detail(&calls[3], "rows"), Some("1"));
        let p = &s.parse;
        assert_eq!(
            (
                p.damaged_messages,
                p.desyncs,
                p.unmatched_responses,
                p.inferred_ends
            ),
            (0, 0, 0, 0),
            "snaplen {snaplen}"
        );
    }
}
