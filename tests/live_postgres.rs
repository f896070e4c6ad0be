//! Live capture of PostgreSQL: a throwaway server (initdb into a temp dir) started by the test,
//! pgbench in each query mode and psql, compared with what the clients report. Needs root.

mod common;

use std::collections::BTreeMap;
use std::io::Write;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use common::postgres::PgServer;
use common::*;
use serde_json::Value;

/// The transactions pgbench says it processed (`number of transactions actually processed: N/M`).
fn pgbench_transactions(out: &Output) -> usize {
    let text = String::from_utf8_lossy(&out.stdout);
    let line = text
        .lines()
        .find(|l| l.starts_with("number of transactions actually processed:"))
        .unwrap_or_else(|| panic!("pgbench's report: {text}"));
    line.split(':')
        .nth(1)
        .unwrap()
        .trim()
        .split('/')
        .next()
        .unwrap()
        .parse()
        .unwrap()
}

/// The statements of pgbench's TPC-B-like script, as (method, the start of the SQL); pgbench's
/// own queries about the tables (scale, partitions) start otherwise.
const TPCB: &[(&str, &str)] = &[
    ("BEGIN", "BEGIN;"),
    ("UPDATE", "UPDATE pgbench_accounts "),
    ("SELECT", "SELECT abalance FROM pgbench_accounts "),
    ("UPDATE", "UPDATE pgbench_tellers "),
    ("UPDATE", "UPDATE pgbench_branches "),
    ("INSERT", "INSERT INTO pgbench_history "),
    ("END", "END;"),
];
/// `-S`: the one statement of the select-only script.
const SELECT_ONLY: &[(&str, &str)] = &[("SELECT", "SELECT abalance FROM pgbench_accounts ")];

fn of_shape(calls: &[&Value], side: &str, method: &str, start: &str) -> usize {
    calls
        .iter()
        .filter(|c| c["side"] == side && c["method"] == method)
        .filter(|c| c["resource"].as_str().unwrap_or("").starts_with(start))
        .count()
}

/// pgbench in simple, extended and prepared mode, select-only and TPC-B-like: per statement
/// shape, calls equal to pgbench's own transaction count on the client side and on the server
/// side, every one successful.
#[test]
fn pgbench_statements_are_counted_exactly_in_every_query_mode() {
    require_root();
    let server = PgServer::start();
    let port = server.port.to_string();
    for mode in ["simple", "extended", "prepared"] {
        for (script, shapes) in [("-S", SELECT_ONLY), ("-b", TPCB)] {
            let ebtop = Ebtop::start(&["--json", "--port", &port]);
            let mut args = vec!["-n", "-c", "2", "-j", "1", "-t", "40", "-M", mode];
            args.extend(if script == "-b" {
                vec!["-b", "tpcb-like"]
            } else {
                vec!["-S"]
            });
            let out = server.pgbench(&args);
            assert!(out.status.success(), "pgbench {args:?}: {out:?}");
            let transactions = pgbench_transactions(&out);
            assert_eq!(transactions, 80, "pgbench {args:?}");
            let lines = ebtop.stop();
            let calls = calls(&lines);
            for side in ["client", "server"] {
                for (method, start) in shapes {
                    assert_eq!(
                        of_shape(&calls, side, method, start),
                        transactions,
                        "-M {mode} {script}: {side} calls of {start}…"
                    );
                }
            }
            for c in calls
                .iter()
                .filter(|c| c["resource"].as_str().unwrap_or("").contains("pgbench_"))
            {
                assert_eq!(c["proto"], "postgres", "{c}");
                assert_eq!(c["outcome"], "ok", "{c}");
                assert!(c["latency_ns"].as_u64().unwrap() > 0, "{c}");
            }
            assert_clean_summary(lines.last().unwrap());
            // Both ends are on this host: every call is one hop (issue 50).
            let hops = assert_every_call_a_hop(&lines, server.port);
            assert!(
                hops >= transactions * shapes.len(),
                "-M {mode} {script}: {hops}"
            );
        }
    }
}

/// `SELECT pg_sleep(0.05)`: the server cannot answer before it slept 50 ms, and the call ends
/// before psql returns, so its latency lies between the two on both sides. A query of a missing
/// table is a client error with its SQLSTATE.
#[test]
fn sleep_latency_is_bounded_and_errors_carry_their_sqlstate() {
    require_root();
    let server = PgServer::start();
    let port = server.port.to_string();
    let ebtop = Ebtop::start(&["--json", "--port", &port]);
    let t0 = Instant::now();
    assert!(server
        .psql("bench", "SELECT pg_sleep(0.05)")
        .status
        .success());
    let elapsed = t0.elapsed().as_nanos() as u64;
    let missing = server.psql("bench", "SELECT * FROM no_such_table");
    assert!(!missing.status.success() || !missing.stderr.is_empty());
    let lines = ebtop.stop();
    let calls = calls(&lines);
    for side in ["client", "server"] {
        let sleeps: Vec<_> = calls
            .iter()
            .filter(|c| c["side"] == side && c["resource"] == "SELECT pg_sleep(0.05)")
            .collect();
        assert_eq!(sleeps.len(), 1, "{side}: {calls:?}");
        let latency = sleeps[0]["latency_ns"].as_u64().unwrap();
        assert!(
            (50_000_000..=elapsed).contains(&latency),
            "{side}: latency {latency} ns outside [50 ms, {elapsed} ns]"
        );
        let errors: Vec<_> = calls
            .iter()
            .filter(|c| c["side"] == side && c["resource"] == "SELECT * FROM no_such_table")
            .collect();
        assert_eq!(errors.len(), 1, "{side}: {calls:?}");
        assert_eq!(errors[0]["status_text"], "42P01", "{}", errors[0]);
        assert_eq!(errors[0]["outcome"], "client_error", "{}", errors[0]);
    }
    assert_clean_summary(lines.last().unwrap());
}

/// A psql session connected before ebtop started: its later queries are picked up at their
/// message boundary (the kernel recognises a simple query mid-connection), each counted once.
#[test]
fn a_connection_open_before_ebtop_is_picked_up_at_its_next_query() {
    require_root();
    let server = PgServer::start();
    let port = server.port.to_string();
    let mut psql = Command::new("psql")
        .args(["-X", "-q", "-A", "-t"])
        .args(server.conn_args())
        .args(["-d", "bench"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("psql is installed");
    let mut stdin = psql.stdin.take().unwrap();
    // The connection is up once a first answer came back (read by the line below).
    writeln!(stdin, "SELECT 'before';").unwrap();
    let mut stdout = std::io::BufReader::new(psql.stdout.take().unwrap());
    let mut line = String::new();
    std::io::BufRead::read_line(&mut stdout, &mut line).unwrap();
    assert_eq!(line.trim(), "before");

    let ebtop = Ebtop::start(&["--json", "--port", &port]);
    const N: usize = 30;
    for i in 0..N {
        writeln!(
            stdin,
            "SELECT count(*) FROM pgbench_branches WHERE bid > {i};"
        )
        .unwrap();
        line.clear();
        std::io::BufRead::read_line(&mut stdout, &mut line).unwrap();
    }
    drop(stdin);
    assert!(psql.wait().unwrap().success());
    let lines = ebtop.stop();
    let calls = calls(&lines);
    for side in ["client", "server"] {
        assert_eq!(
            of_shape(
                &calls,
                side,
                "SELECT",
                "SELECT count(*) FROM pgbench_branches WHERE bid >"
            ),
            N,
            "{side}"
        );
    }
    assert_clean_summary(lines.last().unwrap());
}

/// A 100 MB result set and a COPY out of 100 000 rows stream through with their sizes exact
/// (every DataRow beyond the snaplen skipped by its length): one call each with its row count.
#[test]
fn a_100_mb_result_set_and_copy_stream_through_as_one_call_each() {
    require_root();
    let server = PgServer::start();
    let port = server.port.to_string();
    // No loss even if ebtop reads nothing while the 100 MB stream: its ~12 500 server writes
    // and the client's reads (of 1 KiB at the very least: 100 000), at most ~350 bytes each
    // with a 256-byte snaplen, fit a 64 MiB ring buffer (copying whole off: copied whole,
    // they would not).
    let ebtop = Ebtop::start(&[
        "--json",
        "--port",
        &port,
        "--snaplen",
        "256",
        "--ringbuf-mb",
        "64",
        "--copy-whole",
        "0",
    ]);
    let select = "SELECT repeat('x', 1000) FROM generate_series(1, 100000)";
    // Each followed by a small query on its connection: a big response's end may lie beyond
    // the snaplen, and a server that exits without close() (the syscall path sees no end
    // then) would leave it pending; the next reply ends it.
    let then = |sql: &str| {
        Command::new("psql")
            .args(["-X", "-q", "-A", "-t"])
            .args(server.conn_args())
            .args(["-d", "bench", "-c", sql, "-c", "SELECT 'next'"])
            .output()
            .expect("psql is installed")
    };
    let out = then(select);
    assert!(out.status.success());
    // psql printed every row it received.
    let printed = out
        .stdout
        .split(|&b| b == b'\n')
        .filter(|l| l.len() == 1000);
    assert_eq!(printed.count(), 100_000);
    assert!(out.stdout.ends_with(b"next\n"));
    let copy = r"\copy (SELECT g, md5(g::text) FROM generate_series(1, 100000) g) TO '/dev/null'";
    assert!(then(copy).status.success());
    let lines = ebtop.stop();
    let calls = calls(&lines);
    // Each DataRow: type, length, column count, value length, 1000 bytes.
    let data_rows = 100_000 * (1 + 4 + 2 + 4 + 1000);
    for (what, min_bytes) in [(select, data_rows), ("COPY", 100_000 * 40)] {
        let one = |side: &str| -> &Value {
            let of: Vec<_> = calls
                .iter()
                .filter(|c| c["side"] == side)
                .filter(|c| c["resource"] == what || c["method"] == what)
                .collect();
            assert_eq!(of.len(), 1, "{side} {what}: {calls:#?}");
            of[0]
        };
        let (client, server) = (one("client"), one("server"));
        // The end of the response (CommandComplete, ReadyForQuery) is in the last write's
        // (or read's) tail, its last 256 bytes, whatever the snaplen: never inferred.
        for c in [client, server] {
            assert_eq!(c["end_inferred"], false, "{c}");
            assert_eq!(c["rows"], "100000", "{c}");
            assert_eq!(c["outcome"], "ok", "{c}");
        }
        for c in [client, server] {
            assert!(c["resp_bytes"].as_u64().unwrap() > min_bytes, "{c}");
        }
        assert_eq!(
            client["resp_bytes"], server["resp_bytes"],
            "{client}\n{server}"
        );
        assert_eq!(
            client["req_bytes"], server["req_bytes"],
            "{client}\n{server}"
        );
    }
    // The server's startup burst (ParameterStatus messages) is longer than this snaplen: each
    // connection's side resyncs once after it, before any call. Nothing else may be lost.
    let summary = lines.last().unwrap();
    assert_eq!(summary["kernel"]["lost"], 0, "{summary}");
    for counter in ["damaged_messages", "unmatched_responses", "inferred_ends"] {
        assert_eq!(summary["parse"][counter], 0, "{counter}: {summary}");
    }
}

/// A 100 MB result at the default snaplen (4096): each server write of 8 KiB (and each of the
/// client's reads) comes as its first 4096 bytes and its last 256 (a kernel tail), so the
/// response's end — CommandComplete and ReadyForQuery, in the last write's tail — is seen
/// wherever the writes cut it: the call ends exactly on both sides, its row count from the
/// tag, its bytes the protocol's own count, its latency within the client's own time.
#[test]
fn a_100_mb_result_ends_exactly_at_the_default_snaplen() {
    require_root();
    let server = PgServer::start();
    let port = server.port.to_string();
    // ~25,000 records of ~4.5 KB if ebtop read nothing meanwhile: no loss in 128 MiB. Copying
    // whole off: the tails are what is tested (copied whole, the 100 MB would go through the
    // ring whole, more than it holds).
    let ebtop = Ebtop::start(&[
        "--json",
        "--port",
        &port,
        "--ringbuf-mb",
        "128",
        "--copy-whole",
        "0",
    ]);
    let select = "SELECT repeat('x', 1000) FROM generate_series(1, 100000)";
    let began = Instant::now();
    let out = Command::new("psql")
        .args(["-X", "-q", "-A", "-t"])
        .args(server.conn_args())
        .args(["-d", "bench", "-c", select, "-c", "SELECT 'next'"])
        .output()
        .expect("psql is installed");
    let wall = began.elapsed().as_nanos() as u64;
    assert!(out.status.success());
    let printed = out
        .stdout
        .split(|&b| b == b'\n')
        .filter(|l| l.len() == 1000);
    assert_eq!(printed.count(), 100_000);
    let lines = ebtop.stop();
    let calls = calls(&lines);
    let one = |side: &str| -> &Value {
        let of: Vec<_> = calls
            .iter()
            .filter(|c| c["side"] == side && c["resource"] == select)
            .collect();
        assert_eq!(of.len(), 1, "{side}: {calls:#?}");
        of[0]
    };
    let (client, server_call) = (one("client"), one("server"));
    // RowDescription of one column named "repeat" (32 bytes), 100,000 DataRows of 1,011,
    // CommandComplete "SELECT 100000" (19), ReadyForQuery (6).
    let resp_bytes = 32 + 100_000 * 1011 + 19 + 6;
    for c in [client, server_call] {
        assert_eq!(c["end_inferred"], false, "{c}");
        assert_eq!(c["outcome"], "ok", "{c}");
        assert_eq!(c["rows"], "100000", "{c}");
        assert_eq!(c["resp_bytes"], resp_bytes, "{c}");
    }
    // The server's latency lies within the client's, the client's within psql's run.
    let latency = |c: &Value| c["latency_ns"].as_u64().unwrap();
    assert!(latency(server_call) > 0, "{server_call}");
    assert!(
        latency(server_call) <= latency(client),
        "{server_call}\n{client}"
    );
    assert!(latency(client) < wall, "{client}: psql ran {wall} ns");
    let summary = lines.last().unwrap();
    assert_eq!(summary["kernel"]["lost"], 0, "{summary}");
    for counter in ["damaged_messages", "unmatched_responses", "inferred_ends"] {
        assert_eq!(summary["parse"][counter], 0, "{counter}: {summary}");
    }
}

/// TLS plaintext (the uprobes on SSL_write/SSL_read) gets tails too: a 10 MB result over TLS at
/// a 64-byte snaplen, where every write and read of the response is longer than the head and
/// a tail, ends exactly on both sides (without tails: inferred, `unknown`).
#[test]
fn a_result_over_tls_ends_exactly_in_its_tail() {
    require_root();
    let server = PgServer::start_tls();
    let port = server.port.to_string();
    // Copying whole off: the tails are what is tested.
    let ebtop = Ebtop::start(&[
        "--json",
        "--port",
        &port,
        "--snaplen",
        "64",
        "--copy-whole",
        "0",
    ]);
    let select = "SELECT repeat('x', 1000) FROM generate_series(1, 10000)";
    let conninfo = format!("host=127.0.0.1 port={port} user=postgres dbname=bench sslmode=require");
    let out = Command::new("psql")
        .args(["-X", "-q", "-A", "-t", "-d", &conninfo, "-c", select])
        .args(["-c", "SELECT 'next'"])
        .output()
        .expect("psql is installed");
    assert!(out.status.success(), "psql: {out:?}");
    let printed = out
        .stdout
        .split(|&b| b == b'\n')
        .filter(|l| l.len() == 1000);
    assert_eq!(printed.count(), 10_000);
    let lines = ebtop.stop();
    let calls = calls(&lines);
    for side in ["client", "server"] {
        let of: Vec<_> = calls
            .iter()
            .filter(|c| c["side"] == side && c["resource"] == select)
            .collect();
        assert_eq!(of.len(), 1, "{side}: {calls:#?}");
        let c = of[0];
        assert_eq!(c["tls"], true, "{c}");
        assert_eq!(c["end_inferred"], false, "{c}");
        assert_eq!(c["outcome"], "ok", "{c}");
        assert_eq!(c["rows"], "10000", "{c}");
        // RowDescription 32, DataRows 10,000 × 1,011, "SELECT 10000" 18, ReadyForQuery 6.
        assert_eq!(c["resp_bytes"], 32 + 10_000 * 1011 + 18 + 6, "{c}");
    }
    let summary = lines.last().unwrap();
    assert_eq!(summary["kernel"]["lost"], 0, "{summary}");
    assert_eq!(summary["parse"]["inferred_ends"], 0, "{summary}");
}

/// pgbench `-M prepared` connected before ebtop started: its statement was parsed out of sight,
/// so what comes first is a Bind. Those Executes are picked up (`EXECUTE P_0`, the statement's
/// name) on both sides, and nothing is unmatched.
#[test]
fn prepared_statements_parsed_before_ebtop_are_picked_up_at_their_bind() {
    require_root();
    let server = PgServer::start();
    let port = server.port.to_string();
    let script = server.dir.join("slow_select.sql");
    std::fs::write(
        &script,
        "\\set aid random(1, 100000)\nSELECT abalance FROM pgbench_accounts WHERE aid = :aid;\n\\sleep 10 ms\n",
    )
    .unwrap();
    let script = script.to_str().unwrap();
    let mut args = server.conn_args();
    // Until stopped: ebtop's start may take long on a busy host.
    args.extend(
        [
            "-n", "-c", "1", "-T", "600", "-M", "prepared", "-f", script, "bench",
        ]
        .map(String::from),
    );
    let mut pgbench = Command::new("pgbench")
        .args(&args)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("pgbench is installed");
    // Its statement is prepared at its first transaction: wait until the server ran one.
    let deadline = Instant::now() + Duration::from_secs(60);
    let running = "SELECT count(*) FROM pg_stat_activity WHERE query LIKE 'SELECT abalance%'";
    while String::from_utf8_lossy(&server.psql("bench", running).stdout).trim() == "0" {
        assert!(Instant::now() < deadline, "pgbench ran no transaction");
        std::thread::sleep(Duration::from_millis(50));
    }
    let ebtop = Ebtop::start(&["--json", "--port", &port]);
    std::thread::sleep(Duration::from_millis(500));
    let lines = ebtop.stop();
    // SIGTERM: a shell's background job ignores SIGINT and hands that on to pgbench, which
    // would then run its whole -T.
    // SAFETY: kill with the pid of our own child.
    unsafe { libc::kill(pgbench.id() as i32, libc::SIGTERM) };
    let _ = pgbench.wait();
    let calls = calls(&lines);
    for side in ["client", "server"] {
        let executes: Vec<_> = calls.iter().filter(|c| c["side"] == side).collect();
        assert!(!executes.is_empty(), "{side}: no calls");
        for c in executes {
            assert_eq!(c["resource"], "EXECUTE P_0", "{c}");
            assert_eq!(c["outcome"], "ok", "{c}");
            assert_eq!(c["rows"], "1", "{c}");
        }
    }
    assert_clean_summary(lines.last().unwrap());
}

/// `addr` (`ip:port`)'s port.
fn port_of(addr: &Value) -> u16 {
    addr.as_str()
        .and_then(|a| a.rsplit(':').next())
        .and_then(|p| p.parse().ok())
        .unwrap_or_else(|| panic!("an ip:port: {addr}"))
}

/// How many times each text occurs.
fn counted<'a>(texts: impl IntoIterator<Item = &'a str>) -> BTreeMap<&'a str, usize> {
    let mut counts = BTreeMap::new();
    for t in texts {
        *counts.entry(t).or_default() += 1;
    }
    counts
}

/// The server's calls are the clients' calls: per connection (a client's `local` is its
/// server's `peer`) the same statements in the same order with the same outcome and SQLSTATE.
/// A connection with calls on one side only fails it too.
fn assert_paired(calls: &[&Value]) {
    type Sides = (Vec<String>, Vec<String>);
    let mut conns: BTreeMap<&str, Sides> = BTreeMap::new();
    let what = |c: &Value| {
        format!(
            "{} {} {} {}",
            c["method"], c["resource"], c["outcome"], c["status_text"]
        )
    };
    for c in calls {
        let (addr, client) = if c["side"] == "client" {
            (c["local"].as_str().unwrap(), true)
        } else {
            (c["peer"].as_str().unwrap(), false)
        };
        let sides = conns.entry(addr).or_default();
        if client { &mut sides.0 } else { &mut sides.1 }.push(what(c));
    }
    let differ: Vec<String> = conns
        .iter()
        .filter(|(_, (client, server))| client != server)
        .map(|(conn, (client, server))| {
            format!("from {conn}:\n  client {client:?}\n  server {server:?}")
        })
        .collect();
    assert!(
        differ.is_empty(),
        "{} of {} connections differ between client and server calls:\n{}",
        differ.len(),
        conns.len(),
        differ[..differ.len().min(3)].join("\n")
    );
}

/// PostgreSQL over TLS (`sslmode=require`, the server's OpenSSL and libpq's, both the system
/// libssl, probed by inode): psql running a script of known statements (a CREATE, INSERTs, a
/// SELECT run 20 times, a duplicate key failing with 23505) and pgbench `-M extended` and
/// `-M prepared`. Every call on the port is a `tls: true` postgres call; per statement the
/// client's calls (of psql's or pgbench's pid) and the server's (of the postgres backend) are
/// as many as the client ran; the server confirms TLS (`pg_stat_ssl`) for psql's connection.
#[test]
fn postgres_over_tls_is_seen_exactly_on_both_sides() {
    require_root();
    let server = PgServer::start_tls();
    let port = server.port.to_string();
    let ebtop = Ebtop::start(&["--json", "--port", &port]);

    // psql: each statement of the script a simple query of its own, its text as sent (with
    // the semicolon).
    let check = "SELECT ssl, pid FROM pg_stat_ssl WHERE pid = pg_backend_pid();";
    let select = "SELECT name FROM tls_items WHERE id = 2;";
    let duplicate = "INSERT INTO tls_items VALUES (1, 'again');";
    const SELECTS: usize = 20;
    let mut script = vec![
        check.to_string(),
        "CREATE TABLE tls_items (id int PRIMARY KEY, name text);".into(),
    ];
    script.extend((1..=3).map(|i| format!("INSERT INTO tls_items VALUES ({i}, 'item {i}');")));
    script.extend(std::iter::repeat_n(select.to_string(), SELECTS));
    script.push(duplicate.into());
    script.push("SELECT count(*) FROM tls_items;".into());
    let file = server.dir.join("tls_script.sql");
    std::fs::write(
        &file,
        script.iter().map(|s| format!("{s}\n")).collect::<String>(),
    )
    .unwrap();
    let conninfo = format!("host=127.0.0.1 port={port} user=postgres dbname=bench sslmode=require");
    let psql = Command::new("psql")
        .args([
            "-X",
            "-q",
            "-A",
            "-t",
            "-v",
            "VERBOSITY=verbose",
            "-d",
            &conninfo,
            "-f",
        ])
        .arg(&file)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("psql is installed");
    let psql_pid = psql.id();
    let out = psql.wait_with_output().unwrap();
    assert!(out.status.success(), "psql: {out:?}");
    let stdout = String::from_utf8(out.stdout).unwrap();
    let printed: Vec<&str> = stdout.lines().collect();
    // The server's own word that this connection is TLS, and its backend's pid.
    let backend: u32 = printed[0]
        .strip_prefix("t|")
        .unwrap_or_else(|| panic!("pg_stat_ssl says ssl for psql's backend: {stdout}"))
        .parse()
        .unwrap();
    let rows: Vec<&str> = [&["item 2"; SELECTS][..], &["3"]].concat();
    assert_eq!(printed[1..], rows[..], "psql's output");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(
        stderr.matches("ERROR:  23505:").count(),
        1,
        "psql's one error: {stderr}"
    );

    // pgbench (PGSSLMODE=require): TPC-B-like in extended and prepared mode.
    let mut pgbench = Vec::new();
    for mode in ["extended", "prepared"] {
        let child = Command::new("pgbench")
            .args(server.conn_args())
            .args(["-n", "-c", "2", "-j", "1", "-t", "20", "-M", mode])
            .args(["-b", "tpcb-like", "bench"])
            .env("PGSSLMODE", "require")
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("pgbench is installed");
        let pid = child.id();
        let out = child.wait_with_output().unwrap();
        assert!(out.status.success(), "pgbench -M {mode}: {out:?}");
        let transactions = pgbench_transactions(&out);
        assert_eq!(transactions, 40, "pgbench -M {mode}");
        pgbench.push((mode, pid, transactions));
    }

    let lines = ebtop.stop();
    let summary = lines.last().unwrap();
    let calls = calls(&lines);
    for c in &calls {
        assert_eq!(c["tls"], true, "{c}");
        assert_eq!(c["proto"], "postgres", "{c}");
        let p = if c["side"] == "client" {
            &c["peer"]
        } else {
            &c["local"]
        };
        assert_eq!(port_of(p), server.port, "{c}");
    }

    // psql: each SQL text as often as the script ran it, on each side; only the duplicate
    // failed, with its SQLSTATE.
    let expected = counted(script.iter().map(String::as_str));
    let psql_client: Vec<&Value> = calls
        .iter()
        .copied()
        .filter(|c| c["side"] == "client" && c["pid"] == psql_pid)
        .collect();
    let psql_server: Vec<&Value> = calls
        .iter()
        .copied()
        .filter(|c| c["side"] == "server" && c["pid"] == backend)
        .collect();
    for (side, of, comm) in [
        ("client", &psql_client, "psql"),
        ("server", &psql_server, "postgres"),
    ] {
        assert_eq!(
            counted(of.iter().map(|c| c["resource"].as_str().unwrap_or(""))),
            expected,
            "psql's statements, {side} side; summary: {summary}"
        );
        for c in of {
            assert_eq!(c["comm"], comm, "{c}");
            if c["resource"] == duplicate {
                assert_eq!(c["status_text"], "23505", "{c}");
                assert_eq!(c["outcome"], "client_error", "{c}");
            } else {
                assert_eq!(c["outcome"], "ok", "{c}");
                assert!(c.get("status_text").is_none(), "{c}");
            }
        }
    }

    // pgbench: per statement of the script, as many calls as transactions, on each side.
    for (mode, pid, transactions) in pgbench {
        let client: Vec<&Value> = calls
            .iter()
            .copied()
            .filter(|c| c["side"] == "client" && c["pid"] == pid)
            .collect();
        let conns: Vec<&Value> = client.iter().map(|c| &c["local"]).collect();
        let server: Vec<&Value> = calls
            .iter()
            .copied()
            .filter(|c| c["side"] == "server" && conns.contains(&&c["peer"]))
            .collect();
        for (side, of, comm) in [
            ("client", &client, "pgbench"),
            ("server", &server, "postgres"),
        ] {
            for (method, start) in TPCB {
                assert_eq!(
                    of_shape(of, side, method, start),
                    transactions,
                    "-M {mode}: {side} calls of {start}…; summary: {summary}"
                );
            }
            for c in of {
                assert_eq!(c["comm"], comm, "{c}");
                assert_eq!(c["outcome"], "ok", "{c}");
            }
        }
    }

    assert_paired(&calls);
    assert!(
        summary["kernel"]["tls_calls"].as_u64().unwrap() > 0,
        "{summary}"
    );
    assert_clean_summary(summary);
}

/// The Python of the venv scripts/deps makes, when it has psycopg (3).
fn psycopg_python() -> Option<&'static str> {
    const PY: &str = "/var/cache/ebtop-tests/membio-venv/bin/python";
    let ok = Command::new(PY)
        .args(["-c", "import psycopg"])
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    ok.then_some(PY)
}

/// The server's own count of executions of statements starting `start` (pg_stat_statements;
/// a statement that fails is not counted there).
fn executions(server: &PgServer, db: &str, start: &str) -> usize {
    let out = server.psql(
        db,
        &format!(
            "SELECT coalesce(sum(calls), 0) FROM pg_stat_statements WHERE query LIKE '{start}%'"
        ),
    );
    assert!(out.status.success(), "{out:?}");
    String::from_utf8_lossy(&out.stdout).trim().parse().unwrap()
}

/// Calls of `method` on `side` over the whole session (the summary's endpoints), as (calls,
/// client errors, server errors, unknown outcomes).
fn session_calls(summary: &Value, side: &str, method: &str) -> [usize; 4] {
    let mut sums = [0; 4];
    for e in summary["endpoints"].as_array().expect("summary endpoints") {
        if e["side"] == side && e["method"] == method {
            for (sum, key) in sums.iter_mut().zip([
                "calls",
                "client_errors",
                "server_errors",
                "unknown_outcomes",
            ]) {
                *sum += e[key].as_u64().unwrap() as usize;
            }
        }
    }
    sums
}

/// ebtop for a deep pipeline: the ring sized above everything the test copies (nothing can
/// be lost even if the reader stalls: exactness holds under any load, and is asserted), and
/// only errors as `call` lines (the counts come from the summary's endpoints).
fn ebtop_for_pipelines(port: &str) -> Ebtop {
    Ebtop::start(&[
        "--json",
        "--port",
        port,
        "--ringbuf-mb",
        "64",
        "--filter",
        "err",
    ])
}

/// Nothing lost, nothing cut, nothing unpaired, and the kernel copied long sends whole.
fn assert_whole(summary: &Value) {
    let kernel = &summary["kernel"];
    assert_eq!(kernel["lost"], 0, "{summary}");
    assert_eq!(kernel["not_copied_whole"], 0, "{summary}");
    assert!(kernel["copied_whole"].as_u64().unwrap() > 0, "{summary}");
    for key in [
        "damaged_messages",
        "unmatched_responses",
        "desyncs",
        "pending_dropped",
        "inferred_ends",
    ] {
        assert_eq!(summary["parse"][key], 0, "{key}: {summary}");
    }
}

/// Runs psycopg's pipeline of 10,000 statements in 20 batches of 500 (a Sync each, inside one
/// outer pipeline) on database `bench`: INSERTs and SELECTs by key alternating, and in every
/// fourth batch `SELECT 1/0` as its 251st statement, so the server skips the rest of that
/// batch. Returns what the client saw executed: (INSERTs, SELECTs, failures).
fn psycopg_pipeline(py: &str, port: &str) -> (usize, usize, usize) {
    let script = "import sys, psycopg\n\
        conn = psycopg.connect(host='127.0.0.1', port=int(sys.argv[1]), user='postgres',\n\
        \x20   dbname='bench', autocommit=True)\n\
        conn.execute('CREATE TABLE pipe_t (k int PRIMARY KEY, v text)')\n\
        inserts = selects = failed = 0\n\
        with conn.pipeline():\n\
        \x20   for b in range(20):\n\
        \x20       bad = b % 4 == 1\n\
        \x20       try:\n\
        \x20           with conn.pipeline():\n\
        \x20               for j in range(500):\n\
        \x20                   i = b * 500 + j\n\
        \x20                   if bad and j == 250:\n\
        \x20                       conn.execute('SELECT 1/0 AS boom')\n\
        \x20                   elif i % 2 == 0:\n\
        \x20                       conn.execute('INSERT INTO pipe_t (k, v) VALUES (%s, %s)', (i, 'x' * (i % 40)))\n\
        \x20                   else:\n\
        \x20                       conn.execute('SELECT v FROM pipe_t WHERE k = %s', (i - 1,))\n\
        \x20           assert not bad\n\
        \x20           inserts += 250; selects += 250\n\
        \x20       except psycopg.errors.DivisionByZero:\n\
        \x20           assert bad\n\
        \x20           inserts += 125; selects += 125; failed += 1\n\
        print(inserts, selects, failed)\n";
    let out = Command::new(py)
        .args(["-c", script, port])
        .output()
        .expect("python runs");
    assert!(out.status.success(), "{out:?}");
    let counts: Vec<usize> = String::from_utf8_lossy(&out.stdout)
        .split_whitespace()
        .map(|n| n.parse().unwrap())
        .collect();
    let [inserts, selects, failed] = counts[..] else {
        panic!("the script's counts: {out:?}")
    };
    (inserts, selects, failed)
}

/// Pipelines far deeper than one capture at the default snaplen (issue 43 item 2): psycopg 3's
/// pipeline mode runs 10,000 statements on one connection (libpq writes them in ~8 KB sends,
/// the server answers in 8 KB sends) in batches of 500 up to a Sync, five of them failing
/// mid-batch (`SELECT 1/0`: the server skips the rest of that batch). Every statement the
/// server executed (pg_stat_statements) is an `ok` call on both sides, every failure a call
/// with its SQLSTATE on the failing statement, and the skipped ones make no call (counted).
#[test]
fn a_psycopg_pipeline_of_10000_statements_is_exact_at_the_default_snaplen() {
    require_root();
    let Some(py) = psycopg_python() else {
        eprintln!("psycopg not in the test venv (scripts/deps): skipped");
        return;
    };
    let server = PgServer::start_with_statement_stats();
    let port = server.port.to_string();
    let ebtop = ebtop_for_pipelines(&port);
    let (inserts, selects, failed) = psycopg_pipeline(py, &port);
    assert_eq!(failed, 5);
    let lines = ebtop.stop();
    let summary = lines.last().unwrap();
    assert_whole(summary);
    // The server executed what the client counted, the failures aside.
    assert_eq!(executions(&server, "bench", "INSERT INTO pipe_t"), inserts);
    assert_eq!(
        executions(&server, "bench", "SELECT v FROM pipe_t"),
        selects
    );
    assert_eq!(inserts + selects + failed, 10_000 - 5 * 249);
    for side in ["client", "server"] {
        assert_eq!(
            session_calls(summary, side, "INSERT"),
            [inserts, 0, 0, 0],
            "{side}"
        );
        assert_eq!(
            session_calls(summary, side, "SELECT"),
            [selects + failed, failed, 0, 0],
            "{side}"
        );
        let errors = calls_of(&lines, side);
        assert_eq!(errors.len(), failed, "{side}: {errors:#?}");
        for c in errors {
            assert_eq!(c["resource"], "SELECT 1/0 AS boom", "{c}");
            assert_eq!(c["status_text"], "22012", "{c}");
            assert_eq!(c["outcome"], "client_error", "{c}");
        }
    }
    // The statements the server skipped after each failure up to the batch's Sync (as many as
    // the client had sent by then) make no call: counted, never paired.
    assert!(
        summary["parse"]["unreplied_requests"].as_u64().unwrap() > 0,
        "{summary}"
    );
}

/// pgbench with a script of 200 statements between `\startpipeline` and `\endpipeline`
/// (`-M extended` and `-M prepared`): each pipeline one ~20 KB send and its results in
/// server sends longer than the snaplen. Per statement, calls on both sides equal the
/// server's executions (pg_stat_statements) and pgbench's transactions × 100, all `ok`.
#[test]
fn pgbench_pipelines_of_200_statements_are_exact_at_the_default_snaplen() {
    require_root();
    let server = PgServer::start_with_statement_stats();
    let port = server.port.to_string();
    let mut script = vec![
        "\\set aid random(1, 99000)".to_string(),
        "\\startpipeline".into(),
    ];
    for i in 0..100 {
        script.push(format!(
            "SELECT abalance FROM pgbench_accounts WHERE aid = :aid + {i};"
        ));
        script.push(format!(
            "UPDATE pgbench_tellers SET tbalance = tbalance + 1 WHERE tid = {};",
            i % 10 + 1
        ));
    }
    script.push("\\endpipeline".into());
    let file = server.dir.join("pipeline.sql");
    std::fs::write(&file, script.join("\n") + "\n").unwrap();
    for mode in ["extended", "prepared"] {
        assert!(server
            .psql("bench", "SELECT pg_stat_statements_reset()")
            .status
            .success());
        let ebtop = ebtop_for_pipelines(&port);
        let out = server.pgbench(&[
            "-n",
            "-c",
            "2",
            "-j",
            "1",
            "-t",
            "20",
            "-M",
            mode,
            "-f",
            file.to_str().unwrap(),
        ]);
        assert!(out.status.success(), "pgbench -M {mode}: {out:?}");
        let transactions = pgbench_transactions(&out);
        assert_eq!(transactions, 40, "-M {mode}");
        let lines = ebtop.stop();
        let summary = lines.last().unwrap();
        assert_whole(summary);
        assert_eq!(calls(&lines).len(), 0, "-M {mode}: no call failed");
        let selects = executions(&server, "bench", "SELECT abalance FROM pgbench_accounts");
        let updates = executions(&server, "bench", "UPDATE pgbench_tellers");
        assert_eq!((selects, updates), (transactions * 100, transactions * 100));
        for side in ["client", "server"] {
            assert_eq!(
                session_calls(summary, side, "SELECT"),
                [selects, 0, 0, 0],
                "-M {mode}: {side}"
            );
            assert_eq!(
                session_calls(summary, side, "UPDATE"),
                [updates, 0, 0, 0],
                "-M {mode}: {side}"
            );
        }
    }
}

/// Beyond `--copy-whole` (8 KiB here) the sends and receives of the same psycopg pipeline that
/// are longer than the bound come as a head and a tail: the statements and results in their
/// middle are unseen, and what follows them on the connection cannot be paired provably. Those
/// calls are counted (damaged, unpaired), never shown with another's status: per side no more
/// calls than the server executed, every INSERT and SELECT call `ok` or `unknown`, and every
/// failure the failing statement's own.
#[test]
fn a_pipeline_beyond_the_whole_copy_bound_is_counted_never_wrong() {
    require_root();
    let Some(py) = psycopg_python() else {
        eprintln!("psycopg not in the test venv (scripts/deps): skipped");
        return;
    };
    let server = PgServer::start_with_statement_stats();
    let port = server.port.to_string();
    let ebtop = Ebtop::start(&[
        "--json",
        "--port",
        &port,
        "--ringbuf-mb",
        "64",
        "--filter",
        "err",
        "--copy-whole",
        "8192",
    ]);
    let (inserts, selects, failed) = psycopg_pipeline(py, &port);
    let lines = ebtop.stop();
    let summary = lines.last().unwrap();
    assert_eq!(summary["kernel"]["lost"], 0, "{summary}");
    assert_eq!(executions(&server, "bench", "INSERT INTO pipe_t"), inserts);
    assert_eq!(
        executions(&server, "bench", "SELECT v FROM pipe_t"),
        selects
    );
    for side in ["client", "server"] {
        let [calls, client_errors, server_errors, _unknown] =
            session_calls(summary, side, "INSERT");
        assert!(calls <= inserts, "{side}: {calls} INSERT calls");
        assert_eq!((client_errors, server_errors), (0, 0), "{side}");
        let [calls, client_errors, server_errors, _unknown] =
            session_calls(summary, side, "SELECT");
        assert!(calls <= selects + failed, "{side}: {calls} SELECT calls");
        assert_eq!(server_errors, 0, "{side}");
        let errors = calls_of(&lines, side);
        assert_eq!(errors.len(), client_errors, "{side}: {errors:#?}");
        assert!(errors.len() <= failed, "{side}: {errors:#?}");
        for c in errors {
            assert_eq!(c["resource"], "SELECT 1/0 AS boom", "{c}");
            assert_eq!(c["status_text"], "22012", "{c}");
        }
    }
}

/// The `call` lines of `side` (with `--filter err`: its failed calls).
fn calls_of<'a>(lines: &'a [Value], side: &str) -> Vec<&'a Value> {
    calls(lines)
        .into_iter()
        .filter(|c| c["side"] == side)
        .collect()
}

/// A CPU budget over pooled connections (pgbench's 8, open for the whole run): once the
/// share drops under them (`EBTOP_DEBUG_SAMPLE_SCHEDULE`, a debug build's stand-in for the
/// measured load), every socket above the share — pgbench's and the backends' — is cut at a
/// query's first bytes: no call cut in two, nothing unanswered, and exactly those sockets
/// counted as cut.
#[test]
fn a_budget_cuts_pooled_connections_between_queries() {
    require_root();
    let server = PgServer::start();
    let port = server.port.to_string();
    let ebtop = Ebtop::start_with_env(
        &[
            "--json",
            "--port",
            &port,
            "--max-cpu",
            "50",
            "--delay",
            "200ms",
        ],
        &[("EBTOP_DEBUG_SAMPLE_SCHEDULE", "100,100,100,100,30")],
    );
    let args = [
        "-n", "-c", "8", "-j", "2", "-T", "4", "-M", "extended", "-S",
    ];
    let out = server.pgbench(&args);
    assert!(out.status.success(), "pgbench {args:?}: {out:?}");
    let lines = ebtop.stop();
    let summary = lines.last().unwrap();
    assert_clean_summary(summary);
    assert_eq!(summary["parse"]["unanswered_requests"], 0, "{summary}");
    // The pool's sockets: hundreds of queries each before the share drops. (pgbench's first
    // connection, which reads the scale, makes a few and closes at the start: never cut.)
    let keep = ebtop::source::sampling::keep_below_of(0.3);
    let mut per_sock = std::collections::BTreeMap::<u64, u64>::new();
    for c in calls(&lines) {
        assert_eq!(c["outcome"], "ok", "{c}");
        *per_sock.entry(c["sock_id"].as_u64().unwrap()).or_default() += 1;
    }
    let above: Vec<u64> = per_sock
        .iter()
        .filter(|&(&sock, &n)| n >= 10 && !ebtop::source::sampling::keeps(sock, keep))
        .map(|(&sock, _)| sock)
        .collect();
    // Pool sockets pgbench opened only after the share dropped (a loaded host) are decided
    // then and never captured: the sockets cut are exactly those captured above the share,
    // however many that is (two hogs once left 5 captured, all below it).
    assert_eq!(
        summary["kernel"]["cut_connections"].as_u64().unwrap(),
        above.len() as u64,
        "{per_sock:?} {summary}"
    );
}
