//! Live capture of MySQL/MariaDB: a throwaway MariaDB server (its own datadir in a temp dir,
//! with a general query log table: the server's own record of every command) started by the test,
//! mysqlslap, the mariadb CLI and Perl DBD::MariaDB with server-side prepared statements,
//! compared with what the clients did and what the server logged. Needs root.

mod common;

use std::path::PathBuf;
use std::process::{Child, Command, Output, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use common::*;
use serde_json::Value;

/// A MariaDB server of the test's own on a free port (`--skip-grant-tables`: no password is
/// ever sent), with database `shop`; killed and removed on drop.
struct MariaDb {
    child: Child,
    port: u16,
    dir: PathBuf,
}

impl MariaDb {
    fn start() -> MariaDb {
        // Tests run as threads of one process: each server its own directory.
        static SERVERS: AtomicUsize = AtomicUsize::new(0);
        let dir = std::env::temp_dir().join(format!(
            "ebtop-mariadb-{}-{}",
            std::process::id(),
            SERVERS.fetch_add(1, Ordering::Relaxed)
        ));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let data = dir.join("data");
        // Its own temp dir: installs running at once collide on temporary table names in /tmp.
        let tmp = dir.join("tmp");
        std::fs::create_dir_all(&tmp).unwrap();
        let out = Command::new("mariadb-install-db")
            .arg("--no-defaults")
            .arg(format!("--datadir={}", data.display()))
            .arg(format!("--tmpdir={}", tmp.display()))
            .env("TMPDIR", &tmp)
            .args(["--user=root", "--auth-root-authentication-method=normal"])
            .arg("--skip-test-db")
            .output()
            .expect("mariadb-install-db is installed (scripts/deps installs mariadb-server)");
        assert!(out.status.success(), "mariadb-install-db: {out:?}");
        let port = free_tcp_port();
        let server = if std::path::Path::new("/usr/sbin/mariadbd").exists() {
            "/usr/sbin/mariadbd"
        } else {
            "mariadbd"
        };
        let child = Command::new(server)
            .arg("--no-defaults")
            .arg(format!("--datadir={}", data.display()))
            .args(["--user=root", &format!("--port={port}")])
            .arg("--bind-address=127.0.0.1")
            .arg(format!("--tmpdir={}", tmp.display()))
            .arg(format!("--socket={}", dir.join("my.sock").display()))
            .arg(format!("--pid-file={}", dir.join("my.pid").display()))
            .args(["--skip-grant-tables", "--skip-log-bin"])
            .args(["--innodb-flush-log-at-trx-commit=0", "--general-log=1"])
            .arg("--log-output=TABLE")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("mariadbd starts");
        let db = MariaDb { child, port, dir };
        wait_for_listener("127.0.0.1", port, "mariadbd");
        let deadline = Instant::now() + Duration::from_secs(30);
        while !db.cli(None, "select 1").status.success() {
            assert!(Instant::now() < deadline, "mariadbd did not accept queries");
            std::thread::sleep(Duration::from_millis(100));
        }
        assert!(db.cli(None, "create database shop").status.success());
        db
    }

    fn conn_args(&self) -> Vec<String> {
        [
            "--protocol=tcp",
            "-h",
            "127.0.0.1",
            "-P",
            &self.port.to_string(),
            "-u",
            "root",
        ]
        .map(String::from)
        .to_vec()
    }

    fn cli(&self, db: Option<&str>, sql: &str) -> Output {
        Command::new("mariadb")
            .arg("--no-defaults")
            .args(self.conn_args())
            .arg("--skip-ssl")
            .args(db)
            .args(["-N", "-B", "-e", sql])
            .output()
            .expect("the mariadb client is installed")
    }

    /// How many commands the server's general log (a table: the file is written lazily)
    /// recorded of `kind` (`Query`, `Prepare`, `Execute`) with text starting `sql`.
    fn logged(&self, kind: &str, sql: &str) -> usize {
        let out = self.cli(
            None,
            &format!(
                "SELECT COUNT(*) FROM mysql.general_log WHERE command_type = '{kind}' \
                 AND argument LIKE '{sql}%'"
            ),
        );
        assert!(out.status.success(), "{out:?}");
        String::from_utf8_lossy(&out.stdout).trim().parse().unwrap()
    }
}

impl Drop for MariaDb {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn of(calls: &[&Value], side: &str, method: &str, resource: &str) -> usize {
    calls
        .iter()
        .filter(|c| c["side"] == side && c["method"] == method && c["resource"] == resource)
        .count()
}

/// mysqlslap on 4 connections: every `SELECT 7` the server logged is a call on the client side
/// and on the server side, every one successful.
#[test]
fn mysqlslap_queries_are_counted_exactly_on_both_sides() {
    require_root();
    let db = MariaDb::start();
    let port = db.port.to_string();
    let ebtop = Ebtop::start(&["--json", "--port", &port]);
    let out = Command::new("mariadb-slap")
        .arg("--no-defaults")
        .args(db.conn_args())
        .args(["--create-schema=shop", "--iterations=1", "--concurrency=4"])
        .args(["--number-of-queries=400", "--query=SELECT 7"])
        .output()
        .expect("mariadb-slap is installed");
    assert!(out.status.success(), "{out:?}");
    let lines = ebtop.stop();
    let calls = calls(&lines);
    let logged = db.logged("Query", "SELECT 7");
    assert!(logged >= 400, "the server logged {logged} queries");
    for side in ["client", "server"] {
        assert_eq!(of(&calls, side, "SELECT", "SELECT 7"), logged, "{side}");
    }
    for c in calls.iter().filter(|c| c["resource"] == "SELECT 7") {
        assert_eq!(c["proto"], "mysql", "{c}");
        assert_eq!(c["outcome"], "ok", "{c}");
        assert_eq!(c["rows"], "1", "{c}");
    }
    assert_clean_summary(lines.last().unwrap());
    // Both ends are on this host: every call is one hop (issue 50).
    let hops = assert_every_call_a_hop(&lines, db.port);
    assert!(hops >= logged, "{hops}");
}

/// Server-side prepared statements (DBD::MariaDB, `mariadb_server_prepare`): every execute shown
/// with the SQL of its statement (and its first keyword as the method); a syntax error and a duplicate key with their codes; the
/// latency of `SELECT SLEEP(0.05)` between 50 ms and the client's own wall time.
#[test]
fn prepared_statements_show_their_sql_and_errors_their_codes() {
    require_root();
    let db = MariaDb::start();
    let port = db.port.to_string();
    assert!(db
        .cli(
            Some("shop"),
            "create table items (id int primary key, n int)"
        )
        .status
        .success());
    let ebtop = Ebtop::start(&["--json", "--port", &port]);
    const N: usize = 25;
    let script = format!(
        r#"
use strict; use DBI;
my $dbh = DBI->connect("DBI:MariaDB:database=shop;host=127.0.0.1;port={port};mariadb_server_prepare=1",
    "root", "", {{ RaiseError => 0, PrintError => 0 }}) or die $DBI::errstr;
my $ins = $dbh->prepare("INSERT INTO items (id, n) VALUES (?, ?)");
for my $i (1 .. {N}) {{ $ins->execute($i, $i * 10) or die $ins->errstr; }}
my $sel = $dbh->prepare("SELECT n FROM items WHERE id = ?");
for my $i (1 .. {N}) {{ $sel->execute($i) or die; my @r = $sel->fetchrow_array; $sel->finish; }}
$ins->execute(1, 0) and die "a duplicate key was accepted";
print "dup ", $ins->err, "\n";
$dbh->do("SELEC 1") and die "a syntax error was accepted";
print "syntax ", $dbh->err, "\n";
$dbh->disconnect;
"#
    );
    let out = Command::new("perl")
        .args(["-e", &script])
        .output()
        .expect("perl is installed");
    assert!(out.status.success(), "{out:?}");
    let report = String::from_utf8_lossy(&out.stdout);
    assert!(
        report.contains("dup 1062") && report.contains("syntax 1064"),
        "{report}"
    );
    let t0 = Instant::now();
    assert!(db.cli(None, "SELECT SLEEP(0.05)").status.success());
    let elapsed = t0.elapsed().as_nanos() as u64;
    let lines = ebtop.stop();
    let calls = calls(&lines);
    let insert = "INSERT INTO items (id, n) VALUES (?, ?)";
    let select = "SELECT n FROM items WHERE id = ?";
    assert_eq!(db.logged("Execute", "INSERT INTO items"), N + 1);
    assert_eq!(db.logged("Execute", "SELECT n FROM items"), N);
    for side in ["client", "server"] {
        let executes = |sql: &str| -> Vec<&Value> {
            calls
                .iter()
                .copied()
                .filter(|c| c["side"] == side && c["resource"] == sql)
                .filter(|c| c["command"] == "stmt_execute")
                .collect()
        };
        let inserts = executes(insert);
        assert_eq!(inserts.len(), N + 1, "{side}: {calls:#?}");
        assert_eq!(
            inserts.iter().filter(|c| c["outcome"] == "ok").count(),
            N,
            "{side}"
        );
        let dup = inserts.iter().find(|c| c["outcome"] != "ok").unwrap();
        assert!(
            dup["status_text"].as_str().unwrap().starts_with("1062"),
            "{dup}"
        );
        let selects = executes(select);
        assert_eq!(selects.len(), N, "{side}");
        for c in &selects {
            assert_eq!(c["outcome"], "ok", "{c}");
            assert_eq!(c["rows"], "1", "{c}");
        }
        assert_eq!(of(&calls, side, "PREPARE", insert), 1, "{side}");
        let syntax: Vec<_> = calls
            .iter()
            .filter(|c| c["side"] == side && c["resource"] == "SELEC 1")
            .collect();
        assert_eq!(syntax.len(), 1, "{side}");
        assert!(
            syntax[0]["status_text"]
                .as_str()
                .unwrap()
                .starts_with("1064"),
            "{}",
            syntax[0]
        );
        let sleeps: Vec<_> = calls
            .iter()
            .filter(|c| c["side"] == side && c["resource"] == "SELECT SLEEP(0.05)")
            .collect();
        assert_eq!(sleeps.len(), 1, "{side}");
        let latency = sleeps[0]["latency_ns"].as_u64().unwrap();
        assert!(
            (50_000_000..=elapsed).contains(&latency),
            "{side}: latency {latency} ns outside [50 ms, {elapsed} ns]"
        );
    }
    assert_clean_summary(lines.last().unwrap());
}

/// A mariadb CLI session connected before ebtop started. The client's side is picked up at its
/// next COM_QUERY: every later query is a call. The server reads each command's header apart
/// from its body, so its side is picked up at its first reply with a result set (column
/// definitions, catalog `def`), and every query after that one is a call.
#[test]
fn a_connection_open_before_ebtop_is_picked_up_on_both_sides() {
    use std::io::{BufRead, BufReader, Write};
    require_root();
    let db = MariaDb::start();
    let port = db.port.to_string();
    let mut cli = Command::new("mariadb")
        .arg("--no-defaults")
        .args(db.conn_args())
        .args(["--skip-ssl", "-N", "-B", "--unbuffered", "shop"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("the mariadb client is installed");
    let mut stdin = cli.stdin.take().unwrap();
    let mut stdout = BufReader::new(cli.stdout.take().unwrap());
    let mut line = String::new();
    writeln!(stdin, "SELECT 'before';").unwrap();
    stdout.read_line(&mut line).unwrap();
    assert_eq!(line.trim(), "before");

    let ebtop = Ebtop::start(&["--json", "--port", &port]);
    const N: usize = 30;
    for i in 0..N {
        writeln!(stdin, "SELECT {i} + 1000;").unwrap();
        line.clear();
        stdout.read_line(&mut line).unwrap();
        assert_eq!(line.trim(), (i + 1000).to_string());
    }
    drop(stdin);
    assert!(cli.wait().unwrap().success());
    let lines = ebtop.stop();
    let calls = calls(&lines);
    let queries = |side: &str| {
        calls
            .iter()
            .filter(|c| c["side"] == side && c["method"] == "SELECT")
            .filter(|c| c["resource"].as_str().unwrap_or("").ends_with(" + 1000"))
            .count()
    };
    assert_eq!(queries("client"), N);
    assert_eq!(queries("server"), N - 1);
    assert_clean_summary(lines.last().unwrap());
}

/// A 100 MB result at the default snaplen (4096) with copying whole off (copied whole, the
/// 100 MB would go through the ring, more than it holds): each server write of 16 KiB (and
/// each of the client's reads) comes as its first 4096 bytes and its last 256 (a kernel
/// tail). The final EOF lies in the last one's tail; its rows (1,007 bytes each) are longer
/// than a tail, so the client's next command proves it the end. The call ends exactly on both
/// sides: the same bytes, its outcome, its latency within the client's own time. The rows
/// whose packets went unseen are not counted: no row count is reported rather than a wrong one.
#[test]
fn a_100_mb_result_set_ends_exactly_at_the_default_snaplen() {
    require_root();
    let db = MariaDb::start();
    let port = db.port.to_string();
    let ebtop = Ebtop::start(&[
        "--json",
        "--port",
        &port,
        "--ringbuf-mb",
        "128",
        "--copy-whole",
        "0",
    ]);
    let select = "select repeat('x', 1000) from seq_1_to_100000";
    let began = Instant::now();
    let out = db.cli(Some("shop"), &format!("{select}; select 'next'"));
    let wall = began.elapsed().as_nanos() as u64;
    assert!(out.status.success(), "{out:?}");
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
    let (client, server) = (one("client"), one("server"));
    // 100,000 row packets of 4 + 3 + 1000 bytes, the column count, its definition and two
    // EOFs around them (the definition's length depends on the server's names).
    let rows = 100_000 * 1007;
    for c in [client, server] {
        assert_eq!(c["end_inferred"], false, "{c}");
        assert_eq!(c["outcome"], "ok", "{c}");
        assert!(c.get("rows").is_none(), "{c}");
        let bytes = c["resp_bytes"].as_u64().unwrap();
        assert!((rows + 5 + 9 + 9..rows + 300).contains(&bytes), "{c}");
    }
    assert_eq!(
        client["resp_bytes"], server["resp_bytes"],
        "{client}\n{server}"
    );
    let latency = |c: &Value| c["latency_ns"].as_u64().unwrap();
    assert!(latency(server) > 0, "{server}");
    assert!(latency(server) <= latency(client), "{server}\n{client}");
    assert!(latency(client) < wall, "{client}: the client ran {wall} ns");
    assert_eq!(of(&calls, "client", "SELECT", "select 'next'"), 1);
    let summary = lines.last().unwrap();
    assert_eq!(summary["kernel"]["lost"], 0, "{summary}");
    for counter in ["damaged_messages", "unmatched_responses", "inferred_ends"] {
        assert_eq!(summary["parse"][counter], 0, "{counter}: {summary}");
    }
}

/// The Python of the venv scripts/deps makes, when it has PyMySQL.
fn pymysql_python() -> Option<&'static str> {
    const PY: &str = "/var/cache/ebtop-tests/membio-venv/bin/python";
    let ok = Command::new(PY)
        .args(["-c", "import pymysql"])
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    ok.then_some(PY)
}

/// What a real client sends longer than the snaplen (issue 43 item 2), from PyMySQL with
/// CLIENT_MULTI_STATEMENTS: `executemany` batching 30,000 rows into INSERTs of ~1 MB, one
/// query of 2,000 statements whose 1,501st fails (the server answers 1,500 result sets and
/// the error, which the client reads in sends far longer than the snaplen), and a 1 MB
/// INSERT. Every command the server logged is one call on each side, with the affected rows
/// the client saw; the multi-statement query fails with the server's code on both sides, its
/// bytes the same on both; nothing lost, cut or inferred.
#[test]
fn batched_and_multi_statement_sends_beyond_the_snaplen_are_exact() {
    require_root();
    let Some(py) = pymysql_python() else {
        eprintln!("PyMySQL not in the test venv (scripts/deps): skipped");
        return;
    };
    let db = MariaDb::start();
    let port = db.port.to_string();
    assert!(db
        .cli(
            Some("shop"),
            "CREATE TABLE big (k int PRIMARY KEY, v varchar(200))"
        )
        .status
        .success());
    let ebtop = Ebtop::start(&["--json", "--port", &port, "--ringbuf-mb", "64"]);
    let script = "import sys, pymysql\n\
        from pymysql.constants import CLIENT\n\
        c = pymysql.connect(host='127.0.0.1', port=int(sys.argv[1]), user='root', database='shop',\n\
        \x20   client_flag=CLIENT.MULTI_STATEMENTS, autocommit=True)\n\
        cur = c.cursor()\n\
        rows = [cur.executemany('INSERT INTO big (k, v) VALUES (%s, %s)',\n\
        \x20   [(i, 'y' * 100) for i in range(30000)])]\n\
        stmts = ['SELECT v FROM big WHERE k = %d' % i for i in range(2000)]\n\
        stmts[1500] = 'SELECT * FROM missing_table'\n\
        sets = 1\n\
        try:\n\
        \x20   cur.execute('; '.join(stmts))\n\
        \x20   while cur.nextset():\n\
        \x20       sets += 1\n\
        except pymysql.err.ProgrammingError as e:\n\
        \x20   assert e.args[0] == 1146, e\n\
        rows.append(cur.execute('INSERT INTO big (k, v) VALUES ' +\n\
        \x20   ', '.join('(%d, \\'%s\\')' % (100000 + i, 'z' * 150) for i in range(6500))))\n\
        print(sets, *rows)\n";
    let out = Command::new(py)
        .args(["-c", script, &port])
        .output()
        .expect("python runs");
    assert!(out.status.success(), "{out:?}");
    let printed: Vec<usize> = String::from_utf8_lossy(&out.stdout)
        .split_whitespace()
        .map(|n| n.parse().unwrap())
        .collect();
    assert_eq!(printed, [1500, 30_000, 6500], "{out:?}");
    let lines = ebtop.stop();
    let calls = calls(&lines);
    let summary = lines.last().unwrap();

    // The server's log: executemany's batches (each ≤ 1 MB), the multi-statement query, the
    // 1 MB INSERT.
    let inserts = db.logged("Query", "INSERT INTO big");
    assert!(
        inserts >= 5,
        "{inserts} INSERTs logged (3.3 MB of rows in ≤ 1 MB, and one)"
    );
    assert_eq!(db.logged("Query", "SELECT v FROM big WHERE k = 0;"), 1);
    for side in ["client", "server"] {
        let mine: Vec<&&Value> = calls.iter().filter(|c| c["side"] == side).collect();
        let insert: Vec<&&&Value> = mine.iter().filter(|c| c["method"] == "INSERT").collect();
        assert_eq!(insert.len(), inserts, "{side}");
        let affected: usize = insert
            .iter()
            .map(|c| c["rows"].as_str().unwrap().parse::<usize>().unwrap())
            .sum();
        assert_eq!(affected, 30_000 + 6500, "{side}");
        for c in &insert {
            assert_eq!(c["outcome"], "ok", "{c}");
            assert_eq!(c["end_inferred"], false, "{c}");
        }
        let multi: Vec<&&&Value> = mine
            .iter()
            .filter(|c| {
                c["resource"]
                    .as_str()
                    .unwrap_or("")
                    .starts_with("SELECT v FROM big WHERE k = 0;")
            })
            .collect();
        assert_eq!(multi.len(), 1, "{side}: {summary}");
        assert_eq!(multi[0]["status_text"], "1146 (42S02)", "{}", multi[0]);
        assert_eq!(multi[0]["outcome"], "client_error", "{}", multi[0]);
        assert_eq!(multi[0]["end_inferred"], false, "{}", multi[0]);
    }
    let multi_bytes = |side: &str| {
        let c = calls
            .iter()
            .find(|c| {
                c["side"] == side
                    && c["resource"]
                        .as_str()
                        .unwrap_or("")
                        .starts_with("SELECT v FROM big WHERE k = 0;")
            })
            .unwrap();
        (c["req_bytes"].clone(), c["resp_bytes"].clone())
    };
    assert_eq!(multi_bytes("client"), multi_bytes("server"));
    assert_clean_summary(summary);
    assert_eq!(summary["parse"]["inferred_ends"], 0, "{summary}");
}

/// A 10 MB result copied whole (the default `--copy-whole`): the server's 16 KiB writes and
/// the client's reads (of its 16 KiB read buffer) are each one record, so every row packet is
/// seen and the rows are counted on both sides, the call exact (~20 MB copied in all: no loss
/// in a 64 MiB ring even if ebtop read nothing meanwhile).
#[test]
fn a_10_mb_result_copied_whole_counts_its_rows_on_both_sides() {
    require_root();
    let db = MariaDb::start();
    let port = db.port.to_string();
    let ebtop = Ebtop::start(&["--json", "--port", &port, "--ringbuf-mb", "64"]);
    let select = "select repeat('x', 1000) from seq_1_to_10000";
    let out = db.cli(Some("shop"), &format!("{select}; select 'next'"));
    assert!(out.status.success(), "{out:?}");
    let printed = out
        .stdout
        .split(|&b| b == b'\n')
        .filter(|l| l.len() == 1000);
    assert_eq!(printed.count(), 10_000);
    let lines = ebtop.stop();
    let calls = calls(&lines);
    let summary = lines.last().unwrap();
    let mut resp_bytes = Vec::new();
    for side in ["client", "server"] {
        let of: Vec<_> = calls
            .iter()
            .filter(|c| c["side"] == side && c["resource"] == select)
            .collect();
        assert_eq!(of.len(), 1, "{side}: {calls:#?}");
        let c = of[0];
        assert_eq!(c["end_inferred"], false, "{c}");
        assert_eq!(c["outcome"], "ok", "{c}");
        assert_eq!(c["rows"], "10000", "{c}");
        resp_bytes.push(c["resp_bytes"].clone());
    }
    assert_eq!(resp_bytes[0], resp_bytes[1]);
    assert!(
        summary["kernel"]["copied_whole"].as_u64().unwrap() > 0,
        "{summary}"
    );
    assert_eq!(summary["kernel"]["not_copied_whole"], 0, "{summary}");
    assert_clean_summary(summary);
}

/// MariaDB Connector/J's jar (scripts/mariadb-jdbc fetches and caches it), when present with
/// a JDK to run the client from its source.
fn connector_j() -> Option<String> {
    let out = Command::new(concat!(env!("CARGO_MANIFEST_DIR"), "/scripts/mariadb-jdbc"))
        .stderr(Stdio::null())
        .output()
        .ok()?;
    let jar = String::from_utf8_lossy(&out.stdout).trim().to_owned();
    let javac = Command::new("javac").arg("-version").output().is_ok();
    (out.status.success() && !jar.is_empty() && javac).then_some(jar)
}

/// Real pipelines (issue 43 item 2): MariaDB Connector/J sends a batch's commands before
/// reading any answer, so the server reads thousands in one receive. 5,000 executes of one
/// server-side prepared statement (a prepare and executes of statement id -1, "the one
/// prepared last", then the real id) and 5,000 text INSERTs: every command the server logged
/// is one call on each side with the statement's SQL, every row the driver counted is in
/// them; none unnamed, lost or inferred.
#[test]
fn connector_j_batches_sent_as_pipelines_are_exact_on_both_sides() {
    require_root();
    let Some(jar) = connector_j() else {
        eprintln!("MariaDB Connector/J or a JDK missing (scripts/deps): skipped");
        return;
    };
    let db = MariaDb::start();
    let port = db.port.to_string();
    let ebtop = Ebtop::start(&["--json", "--port", &port, "--ringbuf-mb", "64"]);
    let client = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/src/protocols/mysql/fixtures/ConnectorJPipeline.java"
    );
    const N: usize = 5000;
    for mode in ["prepared", "text"] {
        let out = Command::new("java")
            .args(["-cp", &jar, client, &port, mode, &N.to_string()])
            .output()
            .expect("java runs");
        assert!(out.status.success(), "{mode}: {out:?}");
        assert_eq!(
            String::from_utf8_lossy(&out.stdout).trim(),
            format!("{{\"rows\": {N}}}"),
            "{mode}"
        );
    }
    let lines = ebtop.stop();
    let calls = calls(&lines);
    let summary = lines.last().unwrap();
    let executed = db.logged("Execute", "INSERT INTO pipe");
    let queried = db.logged("Query", "INSERT INTO pipe");
    assert_eq!((executed, queried), (N, N), "the server's log");
    for side in ["client", "server"] {
        let insert: Vec<&&Value> = calls
            .iter()
            .filter(|c| c["side"] == side && c["method"] == "INSERT")
            .collect();
        assert_eq!(insert.len(), 2 * N, "{side}: {summary}");
        let affected: usize = insert
            .iter()
            .map(|c| c["rows"].as_str().unwrap().parse::<usize>().unwrap())
            .sum();
        assert_eq!(affected, 2 * N, "{side}");
        for c in &insert {
            assert!(
                c["resource"]
                    .as_str()
                    .unwrap()
                    .starts_with("INSERT INTO pipe (k, v) VALUES ("),
                "{c}"
            );
            assert_eq!(c["outcome"], "ok", "{c}");
            assert_eq!(c["end_inferred"], false, "{c}");
        }
        assert!(
            !calls
                .iter()
                .any(|c| c["side"] == side && c["method"] == "EXECUTE"),
            "{side}: an execute without its statement's SQL"
        );
    }
    assert_clean_summary(summary);
    assert_eq!(summary["parse"]["inferred_ends"], 0, "{summary}");
}
