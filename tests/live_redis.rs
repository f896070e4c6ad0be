//! Live capture of Redis: a real redis-server started by the test, real clients (redis-benchmark,
//! redis-cli) and hand-timed RESP clients, compared with what the clients did. Needs root.

mod common;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::*;
use serde_json::Value;

/// A redis-server of the test's own on a free port (no persistence), killed on drop.
struct RedisServer {
    child: Child,
    port: u16,
}

impl RedisServer {
    fn start() -> RedisServer {
        let port = free_tcp_port();
        let child = Command::new("redis-server")
            .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
            .args(["--save", "", "--appendonly", "no", "--protected-mode", "no"])
            .stdout(Stdio::null())
            .spawn()
            .expect("redis-server is installed (scripts/deps installs it)");
        wait_for_listener("127.0.0.1", port, "redis-server");
        RedisServer { child, port }
    }

    fn cli(&self, args: &[&str]) -> String {
        let out = Command::new("redis-cli")
            .args(["-p", &self.port.to_string()])
            .args(args)
            .output()
            .expect("redis-cli is installed");
        assert!(out.status.success(), "redis-cli {args:?}");
        String::from_utf8_lossy(&out.stdout).into_owned()
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A command as clients send it: an array of bulk strings.
fn resp(args: &[&[u8]]) -> Vec<u8> {
    let mut out = format!("*{}\r\n", args.len()).into_bytes();
    for a in args {
        out.extend_from_slice(format!("${}\r\n", a.len()).as_bytes());
        out.extend_from_slice(a);
        out.extend_from_slice(b"\r\n");
    }
    out
}

/// Reads one reply; returns its first line (type byte included).
fn read_reply(r: &mut BufReader<TcpStream>) -> String {
    let mut line = String::new();
    r.read_line(&mut line).unwrap();
    let head = line.trim_end().to_owned();
    match head.as_bytes().first() {
        Some(b'$') => {
            let n: i64 = head[1..].parse().unwrap();
            if n >= 0 {
                let mut body = vec![0u8; n as usize + 2];
                r.read_exact(&mut body).unwrap();
            }
        }
        Some(b'*') => {
            let n: i64 = head[1..].parse().unwrap();
            for _ in 0..n.max(0) {
                read_reply(r);
            }
        }
        _ => {}
    }
    head
}

fn side<'a>(calls: &[&'a Value], side: &str) -> Vec<&'a Value> {
    calls
        .iter()
        .copied()
        .filter(|c| c["side"] == side)
        .collect()
}

fn count(calls: &[&Value], method: &str) -> usize {
    calls.iter().filter(|c| c["method"] == method).count()
}

/// redis-benchmark pipelining 16 commands per write on 4 connections: every SET and GET it
/// reports counted once on each side, with the key as the resource.
#[test]
fn pipelined_commands_are_counted_exactly_on_both_sides() {
    require_root();
    let server = RedisServer::start();
    let port = server.port.to_string();
    let ebtop = Ebtop::start(&["--json", "--port", &port]);
    const N: usize = 2000;
    let out = Command::new("redis-benchmark")
        .args(["-p", &port, "-n", &N.to_string(), "-c", "4", "-P", "16"])
        .args(["-t", "set,get", "--csv"])
        .output()
        .expect("redis-benchmark is installed");
    assert!(out.status.success());
    // Its own report: one row per test with the number of requests it completed.
    let report = String::from_utf8_lossy(&out.stdout);
    assert!(
        report.contains("\"SET\"") && report.contains("\"GET\""),
        "{report}"
    );
    let lines = ebtop.stop();
    let calls = calls(&lines);
    for s in ["client", "server"] {
        let mine = side(&calls, s);
        assert_eq!(count(&mine, "SET"), N, "{s} SET calls");
        assert_eq!(count(&mine, "GET"), N, "{s} GET calls");
        for c in mine
            .iter()
            .filter(|c| c["method"] == "SET" || c["method"] == "GET")
        {
            assert_eq!(c["proto"], "redis");
            assert_eq!(c["resource"], "key:__rand_int__", "{c}");
            assert_eq!(c["outcome"], "ok", "{c}");
        }
    }
    let summary = lines.last().unwrap();
    assert_eq!(summary["kernel"]["lost"], 0, "{summary}");
    assert_eq!(summary["parse"]["damaged_messages"], 0, "{summary}");
    assert_eq!(summary["parse"]["unmatched_responses"], 0, "{summary}");
    assert_eq!(summary["parse"]["desyncs"], 0, "{summary}");
}

/// Error replies, a 3 MB value far beyond the snaplen, pub/sub pushes, MULTI/EXEC and a blocking
/// command whose latency is the wait, each checked against what the client saw and timed.
#[test]
fn errors_large_values_pushes_and_blocking_waits_are_exact() {
    require_root();
    let server = RedisServer::start();
    let port = server.port.to_string();
    let ebtop = Ebtop::start(&["--json", "--port", &port]);

    let s = TcpStream::connect(("127.0.0.1", server.port)).unwrap();
    let mut w = s.try_clone().unwrap();
    let mut r = BufReader::new(s);
    // A wrong type: an error reply the client sees.
    w.write_all(&resp(&[b"SET", b"text:1", b"hello"])).unwrap();
    assert_eq!(read_reply(&mut r), "+OK");
    w.write_all(&resp(&[b"INCR", b"text:1"])).unwrap();
    assert!(read_reply(&mut r).starts_with("-ERR"));
    w.write_all(&resp(&[b"LPUSH", b"text:1", b"x"])).unwrap();
    assert!(read_reply(&mut r).starts_with("-WRONGTYPE"));
    // 3 MB value: written and read back whole.
    const BIG: usize = 3 << 20;
    let value = vec![b'v'; BIG];
    w.write_all(&resp(&[b"SET", b"blob:7", &value])).unwrap();
    assert_eq!(read_reply(&mut r), "+OK");
    w.write_all(&resp(&[b"GET", b"blob:7"])).unwrap();
    assert_eq!(read_reply(&mut r), format!("${BIG}"));
    // A transaction: MULTI, two queued commands, EXEC.
    for cmd in [
        resp(&[b"MULTI"]),
        resp(&[b"INCR", b"n:1"]),
        resp(&[b"INCR", b"n:1"]),
        resp(&[b"EXEC"]),
    ] {
        w.write_all(&cmd).unwrap();
        read_reply(&mut r);
    }

    // Pub/sub: one subscriber, PUBLISHED messages arrive as pushes with no request.
    const MSGS: usize = 25;
    let sub = TcpStream::connect(("127.0.0.1", server.port)).unwrap();
    let mut sub_w = sub.try_clone().unwrap();
    let mut sub_r = BufReader::new(sub);
    sub_w.write_all(&resp(&[b"SUBSCRIBE", b"news"])).unwrap();
    assert_eq!(read_reply(&mut sub_r), "*3");
    for i in 0..MSGS {
        let msg = format!("m{i}");
        w.write_all(&resp(&[b"PUBLISH", b"news", msg.as_bytes()]))
            .unwrap();
        assert_eq!(read_reply(&mut r), ":1");
        assert_eq!(read_reply(&mut sub_r), "*3");
    }

    // A blocking pop answered 200 ms later by another client: the call's latency is the wait.
    const WAIT: Duration = Duration::from_millis(200);
    let blocked = TcpStream::connect(("127.0.0.1", server.port)).unwrap();
    let mut bw = blocked.try_clone().unwrap();
    let mut br = BufReader::new(blocked);
    let pusher = {
        let port = server.port;
        std::thread::spawn(move || {
            std::thread::sleep(WAIT);
            let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
            s.write_all(&resp(&[b"RPUSH", b"jobs", b"j1"])).unwrap();
            let mut buf = [0u8; 16];
            let _ = s.read(&mut buf).unwrap();
        })
    };
    let t = Instant::now();
    bw.write_all(&resp(&[b"BLPOP", b"jobs", b"5"])).unwrap();
    assert_eq!(read_reply(&mut br), "*2");
    let client_timed = t.elapsed();
    pusher.join().unwrap();
    // A real client program too.
    assert_eq!(server.cli(&["PING"]).trim(), "PONG");
    drop((w, r, sub_w, sub_r, bw, br));

    let lines = ebtop.stop();
    let calls = calls(&lines);
    let client = side(&calls, "client");
    let server_side = side(&calls, "server");
    for (name, mine) in [("client", &client), ("server", &server_side)] {
        let find = |method: &str, resource: &str| -> Vec<&Value> {
            mine.iter()
                .copied()
                .filter(|c| c["method"] == method && c["resource"] == resource)
                .collect()
        };
        assert!(mine.iter().all(|c| c["proto"] == "redis"), "{name}");
        let incr = find("INCR", "text:1");
        assert_eq!(incr.len(), 1, "{name}: {mine:#?}");
        assert_eq!(incr[0]["outcome"], "server_error");
        assert_eq!(incr[0]["status_text"], "ERR");
        let lpush = find("LPUSH", "text:1");
        assert_eq!(lpush.len(), 1);
        assert_eq!(lpush[0]["outcome"], "server_error");
        assert_eq!(lpush[0]["status_text"], "WRONGTYPE");
        let get = find("GET", "blob:7");
        assert_eq!(get.len(), 1);
        let head = format!("${BIG}\r\n");
        assert_eq!(
            get[0]["resp_bytes"].as_u64().unwrap(),
            (head.len() + BIG + 2) as u64,
            "the whole reply, framed by its length"
        );
        assert_eq!(get[0]["truncated"], true);
        let set = find("SET", "blob:7");
        assert_eq!(set.len(), 1);
        assert_eq!(
            set[0]["req_bytes"].as_u64().unwrap(),
            resp(&[b"SET", b"blob:7", &value]).len() as u64
        );
        assert_eq!(find("INCR", "n:1").len(), 2, "{name}: queued commands");
        assert_eq!(count(mine, "MULTI"), 1);
        assert_eq!(count(mine, "EXEC"), 1);
        assert_eq!(count(mine, "PUBLISH"), MSGS);
        assert_eq!(count(mine, "SUBSCRIBE"), 1);
        assert_eq!(count(mine, "PING"), 1);
        assert_eq!(find("RPUSH", "jobs").len(), 1);
        let blpop = find("BLPOP", "jobs");
        assert_eq!(blpop.len(), 1);
        let lat = Duration::from_nanos(blpop[0]["latency_ns"].as_u64().unwrap());
        // The server answers only after the push, which comes WAIT after the pop was sent; the
        // kernel's span of either side lies inside the client's own timing.
        assert!(
            lat <= client_timed,
            "{name} {lat:?} > client's {client_timed:?}"
        );
        if name == "client" {
            assert!(lat >= WAIT, "client span {lat:?} shorter than the wait");
        }
    }
    assert!(
        client.iter().any(|c| c["comm"] == "redis-cli"),
        "redis-cli's PING"
    );
    let summary = lines.last().unwrap();
    assert_eq!(summary["kernel"]["lost"], 0, "{summary}");
    assert_eq!(summary["parse"]["unmatched_responses"], 0, "{summary}");
    assert_eq!(summary["parse"]["damaged_messages"], 0, "{summary}");
    // Each message reached the subscriber as a push: once leaving the server, once arriving.
    assert_eq!(
        summary["parse"]["pushes"].as_u64().unwrap(),
        2 * MSGS as u64,
        "{summary}"
    );
}

/// redis-cli -3 (RESP3 from its HELLO 3 on): commands piped to it, replies of RESP3 types
/// (maps from COMMAND DOCS and HGETALL, a set from SMEMBERS, null), each command once per side
/// with version 3.
#[test]
fn resp3_client_commands_are_counted_with_their_version() {
    require_root();
    let server = RedisServer::start();
    let port = server.port.to_string();
    let ebtop = Ebtop::start(&["--json", "--port", &port]);
    let script = "SET page:1 a\nGET page:1\nHSET h:1 f 1 g 2\nHGETALL h:1\nSADD s:1 x y\n\
                  SMEMBERS s:1\nINCRBYFLOAT f:1 1.5\nGET missing:1\nHGETALL h:1\n";
    let mut cli = Command::new("redis-cli")
        .args(["-3", "-p", &port])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("redis-cli is installed");
    cli.stdin
        .take()
        .unwrap()
        .write_all(script.as_bytes())
        .unwrap();
    let out = cli.wait_with_output().unwrap();
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("1.5"), "{text}");
    let lines = ebtop.stop();
    let calls = calls(&lines);
    for s in ["client", "server"] {
        let mine: Vec<&Value> = side(&calls, s)
            .into_iter()
            .filter(|c| c["method"] != "HELLO")
            .collect();
        // redis-cli asks for COMMAND DOCS first (a map far beyond the snaplen).
        let expected = [
            ("COMMAND DOCS", 1),
            ("SET", 1),
            ("GET", 2),
            ("HSET", 1),
            ("HGETALL", 2),
            ("SADD", 1),
            ("SMEMBERS", 1),
            ("INCRBYFLOAT", 1),
        ];
        for (method, n) in expected {
            assert_eq!(count(&mine, method), n, "{s} {method}");
        }
        assert_eq!(mine.len(), 10, "{s}: {mine:#?}");
        for c in &mine {
            assert_eq!(c["version"], "3", "{c}");
            assert_eq!(c["outcome"], "ok", "{c}");
        }
        let hello = side(&calls, s)
            .into_iter()
            .filter(|c| c["method"] == "HELLO")
            .count();
        assert_eq!(hello, 1, "{s}: redis-cli -3 says HELLO 3 once");
    }
    let summary = lines.last().unwrap();
    assert_eq!(summary["parse"]["unmatched_responses"], 0, "{summary}");
    assert_eq!(summary["parse"]["damaged_messages"], 0, "{summary}");
}

/// The server's own count of `cmd` (INFO commandstats): calls and failed calls.
fn commandstats(server: &RedisServer, cmd: &str) -> (usize, usize) {
    let info = server.cli(&["info", "commandstats"]);
    let line = info
        .lines()
        .find(|l| l.starts_with(&format!("cmdstat_{cmd}:")))
        .unwrap_or_else(|| panic!("cmdstat_{cmd} in {info}"));
    let field = |name: &str| -> usize {
        line.split([':', ','])
            .find_map(|kv| kv.strip_prefix(&format!("{name}=")))
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| panic!("{name} in {line}"))
    };
    (field("calls"), field("failed_calls"))
}

/// The Python of the venv scripts/deps makes, when it has redis-py.
fn redis_py() -> Option<&'static str> {
    const PY: &str = "/var/cache/ebtop-tests/membio-venv/bin/python";
    let ok = Command::new(PY)
        .args(["-c", "import redis"])
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    ok.then_some(PY)
}

/// Calls of `method` on `side` over the whole session (the summary's endpoints), and of those
/// the server errors.
fn session_calls(summary: &Value, side: &str, method: &str) -> (usize, usize) {
    summary["endpoints"]
        .as_array()
        .expect("summary endpoints")
        .iter()
        .filter(|e| e["side"] == side && e["method"] == method)
        .fold((0, 0), |(n, e), x| {
            (
                n + x["calls"].as_u64().unwrap() as usize,
                e + x["server_errors"].as_u64().unwrap() as usize,
            )
        })
}

/// ebtop for a deep pipeline: the ring sized above everything the test copies (so nothing
/// can be lost even if the reader stalls: exactness holds under any load, and is asserted),
/// and only errors as `call` lines (a debug build writing 200,000 lines takes seconds; the
/// counts come from the summary's endpoints).
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

/// Nothing lost, nothing cut, nothing unpaired, and the kernel copied sends whole.
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
    ] {
        assert_eq!(summary["parse"][key], 0, "{key}: {summary}");
    }
}

/// Pipelines far deeper than one capture at the default snaplen (issue 43 item 2): the kernel
/// copies a Redis connection's sends and receives whole up to 256 KiB, so every command of
/// redis-benchmark -P 1000 (45 KB writes) and of a redis-py pipeline of 10,002 commands
/// (~6 KB writes, one large read of replies, errors inside) is a call on both sides, counted
/// as the server counted it (INFO commandstats), errors as the server's failed calls and
/// exactly on the commands that failed. Everything copied fits the ring (~5 MB).
#[test]
fn pipelines_of_thousands_of_commands_are_exact_at_the_default_snaplen() {
    require_root();
    let server = RedisServer::start();
    let port = server.port.to_string();
    let ebtop = ebtop_for_pipelines(&port);

    let out = Command::new("redis-benchmark")
        .args(["-p", &port, "-n", "20000", "-c", "2", "-P", "1000"])
        .args(["-t", "set,get", "-q"])
        .output()
        .expect("redis-benchmark is installed");
    assert!(out.status.success());

    // redis-py: a 10,002-command pipeline; every third INCRBY hits a string (an error reply
    // the client returns in place).
    let py_errors = redis_py().map(|py| {
        let script = "import sys, redis\n\
            r = redis.Redis(port=int(sys.argv[1]))\n\
            p = r.pipeline(transaction=False)\n\
            for i in range(3334):\n\
            \x20   p.set(f'py:{i}', 'x' * (1 + i % 50))\n\
            \x20   p.incrby(f'py:{i}' if i % 3 == 0 else f'n:{i % 7}', 1)\n\
            \x20   p.get(f'py:{i}')\n\
            res = p.execute(raise_on_error=False)\n\
            assert len(res) == 10002\n\
            print(sum(isinstance(x, Exception) for x in res))\n";
        let out = Command::new(py)
            .args(["-c", script, &port])
            .output()
            .expect("python runs");
        assert!(out.status.success(), "{out:?}");
        String::from_utf8_lossy(&out.stdout)
            .trim()
            .parse::<usize>()
            .unwrap()
    });
    if py_errors.is_none() {
        eprintln!("redis-py not in the test venv (scripts/deps): its pipeline skipped");
    }

    let lines = ebtop.stop();
    let summary = lines.last().unwrap();
    assert_whole(summary);
    let (sets, set_failed) = commandstats(&server, "set");
    let (gets, _) = commandstats(&server, "get");
    assert_eq!(sets, 20_000 + py_errors.map_or(0, |_| 3334));
    assert_eq!(set_failed, 0);
    let calls = calls(&lines);
    for s in ["client", "server"] {
        assert_eq!(session_calls(summary, s, "SET"), (sets, 0), "{s} SET");
        assert_eq!(session_calls(summary, s, "GET"), (gets, 0), "{s} GET");
        if let Some(errors) = py_errors {
            let (incrbys, failed) = commandstats(&server, "incrby");
            assert_eq!(
                failed, errors,
                "the server's failed INCRBYs are the client's errors"
            );
            assert_eq!(
                session_calls(summary, s, "INCRBY"),
                (incrbys, failed),
                "{s}"
            );
            // py:{i} keys hold strings: exactly those INCRBYs fail.
            let bad: Vec<_> = side(&calls, s)
                .into_iter()
                .filter(|c| c["method"] == "INCRBY")
                .collect();
            assert_eq!(bad.len(), failed, "{s} INCRBY errors");
            for c in bad {
                assert_eq!(c["outcome"], "server_error", "{c}");
                assert!(c["resource"].as_str().unwrap().starts_with("py:"), "{c}");
            }
        }
    }
}

/// `redis-cli --pipe` mass insertion of 100,000 SETs at the default snaplen: each a call on
/// both sides, as many as the server counted. Everything copied (~9 MB) fits the ring.
#[test]
fn mass_insertion_of_100k_commands_is_exact_at_the_default_snaplen() {
    require_root();
    let server = RedisServer::start();
    let port = server.port.to_string();
    let ebtop = ebtop_for_pipelines(&port);
    const MASS: usize = 100_000;
    let mut mass = Vec::with_capacity(MASS * 40);
    for i in 0..MASS {
        mass.extend(resp(&[
            b"SET",
            format!("mass:{i}").as_bytes(),
            format!("v{i}").as_bytes(),
        ]));
    }
    let mut cli = Command::new("redis-cli")
        .args(["-p", &port, "--pipe"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("redis-cli is installed");
    let mut stdin = cli.stdin.take().unwrap();
    let writer = std::thread::spawn(move || stdin.write_all(&mass));
    let out = cli.wait_with_output().unwrap();
    writer.join().unwrap().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains(&format!("errors: 0, replies: {MASS}")),
        "{text}"
    );
    let lines = ebtop.stop();
    let summary = lines.last().unwrap();
    assert_whole(summary);
    assert_eq!(commandstats(&server, "set"), (MASS, 0));
    for s in ["client", "server"] {
        assert_eq!(session_calls(summary, s, "SET"), (MASS, 0), "{s} SET");
    }
}

/// Beyond `--copy-whole` a send is cut as before (a head and a tail): redis-benchmark -P 1000
/// writes 45 KB with the bound at 8 KiB. What the kernel did not copy whole is counted
/// (`kernel.not_copied_whole`), the calls after a cut are dropped and counted (damaged,
/// unmatched), and every call shown is right: no more than the server counted, each `ok`.
#[test]
fn beyond_the_whole_copy_bound_calls_are_counted_never_wrong() {
    require_root();
    let server = RedisServer::start();
    let port = server.port.to_string();
    let ebtop = Ebtop::start(&["--json", "--port", &port, "--copy-whole", "8192"]);
    let out = Command::new("redis-benchmark")
        .args(["-p", &port, "-n", "4000", "-c", "1", "-P", "1000"])
        .args(["-t", "set", "-q"])
        .output()
        .expect("redis-benchmark is installed");
    assert!(out.status.success());
    let lines = ebtop.stop();
    let summary = lines.last().unwrap();
    assert!(
        summary["kernel"]["not_copied_whole"].as_u64().unwrap() > 0,
        "{summary}"
    );
    assert!(
        summary["parse"]["damaged_messages"].as_u64().unwrap() > 0,
        "{summary}"
    );
    let (sets, _) = commandstats(&server, "set");
    assert_eq!(sets, 4000);
    let calls = calls(&lines);
    for s in ["client", "server"] {
        let mine = side(&calls, s);
        assert!(
            count(&mine, "SET") < sets,
            "{s}: the cut writes hide commands"
        );
        for c in mine.iter().filter(|c| c["method"] == "SET") {
            assert_eq!(c["outcome"], "ok", "{c}");
            assert_eq!(
                c["req_bytes"].as_u64().unwrap(),
                resp(&[b"SET", b"key:__rand_int__", b"xxx"]).len() as u64,
                "{c}"
            );
            assert_eq!(c["resp_bytes"], 5, "{c}");
        }
    }
}
