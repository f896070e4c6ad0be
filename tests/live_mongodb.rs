//! Live capture of MongoDB's wire protocol: FerretDB (MongoDB's protocol over SQLite, built by
//! scripts/ferretdb from the Go module proxy and cached: no mongod is packaged here) started by
//! the test on a free port with a temporary database, and pymongo running
//! src/protocols/mongodb/fixtures/clients.py — insert_many (kind-1 document sequences), find with
//! getMore cursors, aggregate, a duplicate key and an unknown command. pymongo's command
//! monitoring is the ground truth: per command, exactly as many calls on the client side and on
//! the server side, the same failures, no other call. Needs root.

mod common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use common::*;
use serde_json::Value;

/// pymongo's Python: the test venv scripts/deps makes (pymongo beside redis-py there).
const PYTHON: &str = "/var/cache/ebtop-tests/membio-venv/bin/python";

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// FerretDB's binary: scripts/ferretdb prints it (built once per machine, minutes; cached).
fn ferretdb() -> PathBuf {
    let out = Command::new(repo().join("scripts/ferretdb"))
        .stderr(Stdio::inherit())
        .output()
        .expect("running scripts/ferretdb");
    assert!(
        out.status.success(),
        "scripts/ferretdb could not build FerretDB (needs Go and the Go module proxy; \
         scripts/deps builds it once into /var/cache/ebtop-tests/ferretdb): {}",
        out.status
    );
    PathBuf::from(String::from_utf8(out.stdout).unwrap().trim())
}

fn require_pymongo() {
    let ok = Command::new(PYTHON)
        .args(["-c", "import pymongo"])
        .status()
        .is_ok_and(|s| s.success());
    assert!(
        ok,
        "{PYTHON} with pymongo is missing: scripts/deps installs it (pip install pymongo in \
         that venv)"
    );
}

/// FerretDB on a free port with a database of its own, killed on drop.
struct Ferret {
    _child: Peer,
    port: u16,
    _dir: TempDir,
}

struct TempDir(PathBuf);

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

impl Ferret {
    fn start() -> Ferret {
        let bin = ferretdb();
        let port = free_tcp_port();
        let dir =
            std::env::temp_dir().join(format!("ebtop-ferretdb-{}-{port}", std::process::id()));
        std::fs::create_dir_all(dir.join("db")).unwrap();
        let child = Command::new(bin)
            .arg("--handler=sqlite")
            .arg(format!("--sqlite-url=file:{}/", dir.join("db").display()))
            .arg(format!("--listen-addr=127.0.0.1:{port}"))
            .arg(format!("--state-dir={}", dir.display()))
            .args([
                "--debug-addr=127.0.0.1:0",
                "--log-level=warn",
                "--telemetry=disable",
            ])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("FerretDB starts");
        let child = Peer(child);
        wait_for_listener("127.0.0.1", port, "FerretDB");
        Ferret {
            _child: child,
            port,
            _dir: TempDir(dir),
        }
    }
}

/// Runs clients.py's crud scenario `rounds` times: what pymongo's command monitoring saw,
/// (succeeded, failed) per command.
fn crud(port: u16, rounds: usize) -> (BTreeMap<String, u64>, BTreeMap<String, u64>) {
    let script = repo().join("src/protocols/mongodb/fixtures/clients.py");
    let out = Command::new(PYTHON)
        .arg(Path::new(&script))
        .args([port.to_string(), "crud".into(), rounds.to_string()])
        .stderr(Stdio::inherit())
        .output()
        .unwrap();
    assert!(out.status.success(), "clients.py failed");
    let text = String::from_utf8(out.stdout).unwrap();
    let truth: Value = serde_json::from_str(text.lines().last().unwrap()).unwrap();
    let map = |v: &Value| {
        v.as_object()
            .unwrap()
            .iter()
            .map(|(k, n)| (k.clone(), n.as_u64().unwrap()))
            .collect::<BTreeMap<_, _>>()
    };
    (map(&truth["ok"]), map(&truth["failed"]))
}

/// The handshake and the monitor's heartbeats: pymongo does not publish them to command
/// listeners, and the monitor's timing decides how many there are.
fn is_handshake(method: &str) -> bool {
    matches!(method, "hello" | "isMaster" | "ismaster")
}

#[test]
fn pymongo_commands_are_counted_exactly_on_both_sides() {
    require_root();
    require_pymongo();
    let server = Ferret::start();
    let port = server.port.to_string();
    // `--proto mongodb`: applied in the kernel, whose rule must recognise both sides.
    let ebtop = Ebtop::start(&["--json", "--port", &port, "--proto", "mongodb"]);
    const ROUNDS: usize = 5;
    let (ok, failed) = crud(server.port, ROUNDS);
    let lines = ebtop.stop();
    let summary = lines.last().unwrap();
    assert_clean_summary(summary);
    let calls = calls(&lines);
    assert!(calls.iter().all(|c| c["proto"] == "mongodb"));
    let mut sides = Vec::new();
    for side in ["client", "server"] {
        let mine: Vec<&Value> = calls
            .iter()
            .copied()
            .filter(|c| c["side"] == side && !is_handshake(c["method"].as_str().unwrap()))
            .collect();
        let mut by_method: BTreeMap<String, (u64, u64)> = BTreeMap::new();
        for c in &mine {
            let e = by_method
                .entry(c["method"].as_str().unwrap().to_owned())
                .or_default();
            e.0 += 1;
            if c["outcome"] != "ok" {
                e.1 += 1;
            }
        }
        let mut want: BTreeMap<String, (u64, u64)> = BTreeMap::new();
        for (m, n) in &ok {
            want.entry(m.clone()).or_default().0 += n;
        }
        for (m, n) in &failed {
            let e = want.entry(m.clone()).or_default();
            e.0 += n;
            e.1 += n;
        }
        // pymongo counts the duplicate insert_one a success (the command's `ok` is 1); its
        // `writeErrors` make it a failed call for ebtop: one per round.
        want.get_mut("insert").unwrap().1 += ROUNDS as u64;
        assert_eq!(by_method, want, "{side}: calls (and failures) per command");
        // Round r finds 20 r documents in batches of 6: getMore cursors every round.
        assert!(want["getMore"].0 >= 3 * ROUNDS as u64, "{want:?}");
        for c in &mine {
            let m = c["method"].as_str().unwrap();
            if matches!(m, "insert" | "find" | "getMore" | "aggregate" | "drop") {
                assert_eq!(c["resource"], "orders", "{side}: {c}");
                assert_eq!(c["db"], "shop", "{side}: {c}");
            }
            // No document value reaches the output.
            let text = c.to_string();
            assert!(!text.contains("widget"), "{side}: {text}");
        }
        let inserts: Vec<&&Value> = mine.iter().filter(|c| c["method"] == "insert").collect();
        assert_eq!(
            inserts.iter().filter(|c| c["documents"] == "20").count(),
            ROUNDS,
            "{side}: insert_many's kind-1 sequence of 20 documents"
        );
        assert_eq!(
            inserts
                .iter()
                .filter(|c| c["status_text"] == "DuplicateKey")
                .count(),
            ROUNDS
        );
        assert_eq!(
            mine.iter()
                .filter(|c| c["status_text"] == "CommandNotFound")
                .count() as u64,
            failed.values().sum::<u64>()
        );
        sides.push(mine);
    }
    assert_paired(&sides[0], &sides[1]);
    // Both ends are on this host: every call is one hop (issue 50), the handshakes too.
    let hops = assert_every_call_a_hop(&lines, server.port);
    assert!(hops >= sides[0].len(), "{hops}");
}
