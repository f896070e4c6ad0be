//! Connection sampling (`--sample`, the fixed share `--max-cpu` moves): the kernel captures a
//! deterministic sample of connections, each kept connection exactly, and every figure of a
//! sampled interval is marked — live and in a replay of its recording. Needs root.

mod common;

use std::collections::HashMap;
use std::io::{BufReader, Write};
use std::net::TcpStream;
use std::os::fd::AsRawFd;
use std::time::Duration;

use common::*;
use ebtop::source::sampling::{keep_below_of, keeps};
use serde_json::Value;

/// The socket's inode number: the id the kernel hashes (`sock_id` in call lines).
fn inode(s: &TcpStream) -> u64 {
    // SAFETY: fstat on an open descriptor into a zeroed stat.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    assert_eq!(unsafe { libc::fstat(s.as_raw_fd(), &mut st) }, 0);
    st.st_ino
}

/// The inode of the server's socket of the connection from local port `client_port` to
/// `server_port` (/proc/net/tcp: local and remote address in hex, inode in column 10).
fn server_inode(server_port: u16, client_port: u16) -> Option<u64> {
    let tcp = std::fs::read_to_string("/proc/net/tcp").unwrap();
    let local = format!(":{server_port:04X}");
    let remote = format!(":{client_port:04X}");
    tcp.lines().skip(1).find_map(|line| {
        let f: Vec<&str> = line.split_whitespace().collect();
        (f.len() > 9 && f[1].ends_with(&local) && f[2].ends_with(&remote))
            .then(|| f[9].parse().unwrap())
    })
}

struct Conn {
    stream: TcpStream,
    reader: BufReader<TcpStream>,
    client: u64,
    server: u64,
    requests: u64,
}

/// `n` connections to `server`, connection i making i + 1 requests (all answered before the
/// next), ebtop running meanwhile.
fn traffic(server: &TestServer, n: usize) -> Vec<Conn> {
    let mut conns: Vec<Conn> = (0..n).map(|_| Conn::to(server)).collect();
    for (i, c) in conns.iter_mut().enumerate() {
        for _ in 0..=i {
            c.stream
                .write_all(b"GET / HTTP/1.1\r\nHost: t\r\n\r\n")
                .unwrap();
            assert_eq!(read_response(&mut c.reader).0, 200);
            c.requests += 1;
        }
    }
    conns
}

impl Conn {
    /// A new connection to `server`, both its sockets' inodes known.
    fn to(server: &TestServer) -> Conn {
        let stream = TcpStream::connect(("127.0.0.1", server.port)).unwrap();
        let reader = BufReader::new(stream.try_clone().unwrap());
        let client = inode(&stream);
        let port = stream.local_addr().unwrap().port();
        Conn {
            stream,
            reader,
            client,
            server: 0,
            requests: 0,
        }
        .with_server(server.port, port)
    }

    fn with_server(mut self, server_port: u16, client_port: u16) -> Conn {
        // Until the server's thread accepts it, the socket has no file: inode 0.
        for _ in 0..500 {
            if let Some(ino) = server_inode(server_port, client_port).filter(|i| *i != 0) {
                self.server = ino;
                return self;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        panic!("the server did not accept the connection from port {client_port}");
    }
}

fn calls_by_socket(lines: &[Value]) -> HashMap<u64, u64> {
    let mut by = HashMap::new();
    for c in calls(lines) {
        *by.entry(c["sock_id"].as_u64().unwrap()).or_default() += 1;
    }
    by
}

#[test]
fn a_sample_of_connections_is_exact_per_kept_connection_and_marked_and_replays_the_same() {
    require_root();
    let server = TestServer::start();
    let dir = tempfile::tempdir().unwrap();
    let rec = dir.path().join("sampled.ebt");
    let port = server.port.to_string();
    let pid = std::process::id().to_string();
    let ebtop = Ebtop::start(&[
        "--json",
        "--port",
        &port,
        "--pid",
        &pid,
        "--sample",
        "50",
        "--delay",
        "200ms",
        "-w",
        rec.to_str().unwrap(),
        "--tls",
        "off",
    ]);
    let conns = traffic(&server, 40);
    let lines = ebtop.stop();
    let summary = lines.last().unwrap();
    assert_eq!(summary["kernel"]["lost"], 0, "{summary}");

    // Every kept connection's calls are exactly its requests, on both sides; a connection
    // sampled out has none. Which are kept is the hash of each socket, nothing else.
    let keep = keep_below_of(0.5);
    let by_sock = calls_by_socket(&lines);
    let (mut kept, mut out) = (0, 0);
    for c in &conns {
        for sock in [c.client, c.server] {
            let want = if keeps(sock, keep) { c.requests } else { 0 };
            assert_eq!(
                by_sock.get(&sock).copied().unwrap_or(0),
                want,
                "socket {sock} ({} requests)",
                c.requests
            );
            if want > 0 {
                kept += 1;
            } else {
                out += 1;
            }
        }
    }
    // 80 sockets at 50%: both kinds, or the test proves nothing.
    assert!(kept >= 10 && out >= 10, "kept {kept}, out {out}");
    assert_eq!(
        by_sock.values().sum::<u64>(),
        calls(&lines).len() as u64,
        "no call of another socket"
    );

    // Marks: a sampling line in every interval with uncaptured traffic, the endpoint lines of
    // those intervals marked, and the summary saying what the numbers are a sample of.
    let sampling: Vec<&Value> = lines.iter().filter(|v| v["type"] == "sampling").collect();
    assert!(!sampling.is_empty(), "no sampling line");
    let not_captured: u64 = sampling
        .iter()
        .map(|s| s["syscalls_not_captured"].as_u64().unwrap())
        .sum();
    assert_eq!(
        summary["kernel"]["shed_runs"].as_u64().unwrap(),
        not_captured,
        "every uncaptured syscall in some interval's sampling line"
    );
    for s in &sampling {
        assert_eq!(s["keep_ratio"], 0.5, "{s}");
        let ratio = s["ratio"].as_f64().unwrap();
        assert!(ratio < 1.0, "{s}");
    }
    let sampled_ts: Vec<&Value> = sampling.iter().map(|s| &s["ts"]).collect();
    for e in lines.iter().filter(|v| v["type"] == "endpoint") {
        let marked = sampled_ts.contains(&&e["ts"]);
        assert_eq!(e["sampled"] == true, marked, "{e}");
        assert_eq!(e.get("calls_per_s_estimated").is_some(), marked, "{e}");
    }
    assert_eq!(
        summary["sampling"]["intervals"].as_u64().unwrap(),
        sampling.len() as u64
    );
    assert!(
        summary["sampling"]["calls_estimated"].as_u64().unwrap()
            >= summary["sampling"]["calls_seen"].as_u64().unwrap()
    );

    // The replay marks the same intervals the same way (from the recorded counters).
    let replayed = replay_json(&rec, &[]);
    let of = |ls: &[Value], ty: &str| -> Vec<Value> {
        ls.iter().filter(|v| v["type"] == ty).cloned().collect()
    };
    assert_eq!(of(&replayed, "sampling"), of(&lines, "sampling"));
    assert_eq!(of(&replayed, "endpoint"), of(&lines, "endpoint"));
    assert_eq!(replayed.last().unwrap()["sampling"], summary["sampling"]);
}

#[test]
fn without_sampling_nothing_is_marked() {
    require_root();
    let server = TestServer::start();
    let port = server.port.to_string();
    let pid = std::process::id().to_string();
    let ebtop = Ebtop::start(&[
        "--json", "--port", &port, "--pid", &pid, "--delay", "200ms", "--tls", "off",
    ]);
    let conns = traffic(&server, 10);
    let lines = ebtop.stop();
    let by_sock = calls_by_socket(&lines);
    for c in &conns {
        assert_eq!(by_sock.get(&c.client).copied(), Some(c.requests));
        assert_eq!(by_sock.get(&c.server).copied(), Some(c.requests));
    }
    assert!(lines.iter().all(|v| v["type"] != "sampling"));
    assert!(lines
        .iter()
        .all(|v| v.get("sampled").is_none() && v.get("calls_per_s_estimated").is_none()));
    let summary = lines.last().unwrap();
    assert!(summary.get("sampling").is_none(), "{summary}");
    assert_eq!(summary["kernel"]["shed_runs"], 0);
}

/// nginx serving `index.html` over TLS on `tls` and in clear text on `plain` (to wait on: a
/// bare connect to the TLS port would be a failed handshake); killed on drop.
struct TlsNginx {
    child: std::process::Child,
    tls: u16,
    _dir: tempfile::TempDir,
}

impl TlsNginx {
    fn start() -> TlsNginx {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        let (cert, key) = self_signed_cert(d);
        std::fs::write(d.join("index.html"), "<html>sampled over TLS</html>\n").unwrap();
        let (tls, plain) = (free_tcp_port(), free_tcp_port());
        let p = d.display();
        let servers = format!(
            "  server {{
    listen 127.0.0.1:{tls} ssl;
    ssl_certificate {cert};
    ssl_certificate_key {key};
    root {p};
  }}
  server {{
    listen 127.0.0.1:{plain};
    root {p};
  }}",
            cert = cert.display(),
            key = key.display(),
        );
        let child = start_nginx_with(d, &servers);
        wait_for_listener("127.0.0.1", plain, "nginx");
        TlsNginx {
            child,
            tls,
            _dir: dir,
        }
    }
}

impl Drop for TlsNginx {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// TLS connections sampled out (curl: OpenSSL over a socket BIO, one request per
/// connection): their plaintext is counted as shed (`tls_shed_calls`), never as calls of no
/// socket, and every kept connection's one call is there.
#[test]
fn tls_plaintext_of_sampled_out_connections_is_counted_as_shed() {
    require_root();
    let nginx = TlsNginx::start();
    let ebtop = Ebtop::start(&["--json", "--comm", "curl", "--sample", "50", "--tls", "on"]);
    const N: usize = 30;
    let url = format!("https://127.0.0.1:{}/index.html", nginx.tls);
    let out = std::process::Command::new("curl")
        .args([
            "-k",
            "-s",
            "--http1.1",
            "-H",
            "Connection: close",
            "-o",
            "/dev/null",
        ])
        .args(["-w", "%{http_code} %{num_connects}\\n"])
        .args(std::iter::repeat_n(url.as_str(), N))
        .output()
        .expect("curl is installed");
    assert!(out.status.success(), "curl: {out:?}");
    let report = String::from_utf8_lossy(&out.stdout).into_owned();
    assert_eq!(
        report.lines().filter(|l| *l == "200 1").count(),
        N,
        "{report}"
    );
    let lines = ebtop.stop();
    let summary = lines.last().unwrap();
    let k = &summary["kernel"];

    // curl's N sockets were each decided once; the kept ones have their one call each.
    let (kept, shed) = (u(k, "kept_connections"), u(k, "shed_connections"));
    assert_eq!(kept + shed, N as u64, "{summary}");
    assert!(
        kept >= 3 && shed >= 3,
        "both kinds, or this proves nothing: {summary}"
    );
    let keep = keep_below_of(0.5);
    let by_sock = calls_by_socket(&lines);
    for (sock, n) in &by_sock {
        assert!(
            keeps(*sock, keep),
            "a call of socket {sock}, which the sample leaves out"
        );
        assert_eq!(*n, 1, "socket {sock}");
    }
    assert_eq!(by_sock.len() as u64, kept, "{summary}");
    // A shed connection's request and response went through SSL calls, counted as shed.
    assert_eq!(u(k, "tls_no_socket"), 0, "{summary}");
    assert!(u(k, "tls_shed_calls") >= 2 * shed, "{summary}");
}

/// ebtop on this process's connections to `server` with a budget whose share a debug build's
/// `EBTOP_DEBUG_SAMPLE_SCHEDULE` moves (`schedule`, stepped by the `gate` file), recording to
/// `rec`, an interval every 200 ms.
fn scheduled_budget(
    server: &TestServer,
    rec: &std::path::Path,
    schedule: &str,
    gate: &std::path::Path,
) -> Ebtop {
    let port = server.port.to_string();
    let pid = std::process::id().to_string();
    Ebtop::start_with_env(
        &[
            "--json",
            "--port",
            &port,
            "--pid",
            &pid,
            "--max-cpu",
            "50",
            "--delay",
            "200ms",
            "-w",
            rec.to_str().unwrap(),
            "--tls",
            "off",
        ],
        &[
            ("EBTOP_DEBUG_SAMPLE_SCHEDULE", schedule),
            ("EBTOP_DEBUG_SAMPLE_GATE", gate.to_str().unwrap()),
        ],
    )
}

/// A budget still over after new connections were sampled cuts captured (long-lived)
/// connections at a call boundary: the share drops under 20 keep-alive connections already
/// captured (a debug build's `EBTOP_DEBUG_SAMPLE_SCHEDULE` moves it at a known interval
/// instead of the measured load), and each socket above the new share stops being captured
/// at the first bytes of a request — its calls are exactly its first requests, whole, in
/// order; the sockets below the share, and those of connections that pipeline, keep every
/// call. Counted and replayed the same.
#[test]
fn a_budget_cuts_captured_connections_at_a_call_boundary() {
    require_root();
    let server = TestServer::start();
    let dir = tempfile::tempdir().unwrap();
    let rec = dir.path().join("cut.ebt");
    let gate = dir.path().join("lower-the-share");
    // All captured until the gate file exists (every connection has had a call), then 30%
    // from the next interval.
    let mut ebtop = scheduled_budget(&server, &rec, "100,30", &gate);
    let mut conns: Vec<Conn> = (0..20).map(|_| Conn::to(&server)).collect();
    // The clients of the last 4 connections pipeline: their first two requests go out in one
    // write, and each later one before the answer to the one before it is read, so a turn
    // into their request direction comes inside a call: neither side is ever cut (the client
    // wrote two requests at once, the server read them at once).
    let pipelined = 16;
    let keep = keep_below_of(0.3);
    let may_cut = |k: usize, sock: u64| !keeps(sock, keep) && k < pipelined;
    let above: usize = conns
        .iter()
        .enumerate()
        .flat_map(|(k, c)| [(k, c.client), (k, c.server)])
        .filter(|&(k, s)| may_cut(k, s))
        .count();
    // 32 sockets that may be cut, at 30%: some cut, some not, or the test proves nothing (the inodes are
    // whatever the kernel gave; a run where all fall on one side is retried by nobody).
    assert!(
        (5..=30).contains(&above),
        "{above} of 32 sockets above the share"
    );

    // Requests round after round (each answered before the next on its connection) until
    // every socket above the share was cut, then five rounds more.
    let deadline = std::time::Instant::now() + Duration::from_secs(90);
    let (mut cut, mut rounds_after) = (0u64, 0);
    while rounds_after < 5 {
        assert!(
            std::time::Instant::now() < deadline,
            "{cut} of {above} sockets cut within 90 s"
        );
        for (k, c) in conns.iter_mut().enumerate() {
            let ahead = u64::from(k >= pipelined);
            let first = if c.requests == 0 {
                0
            } else {
                c.requests + ahead
            };
            let req: String = (first..=c.requests + ahead)
                .map(|i| format!("GET /sleep/0/c{k}r{i} HTTP/1.1\r\nHost: t\r\n\r\n"))
                .collect();
            c.stream.write_all(req.as_bytes()).unwrap();
            assert_eq!(read_response(&mut c.reader).0, 200);
            c.requests += 1;
        }
        // Every connection has had a call with the share at 100%: each is captured.
        if !gate.exists() {
            std::fs::write(&gate, b"").unwrap();
        }
        while let Some(v) = ebtop.wait_for(Duration::from_millis(1), |v| v["type"] == "sampling") {
            cut += v["connections_cut"].as_u64().unwrap();
        }
        if cut as usize >= above {
            rounds_after += 1;
        }
    }
    // The requests sent ahead are answered.
    for c in conns[pipelined..].iter_mut() {
        assert_eq!(read_response(&mut c.reader).0, 200);
        c.requests += 1;
    }
    let lines = ebtop.stop();
    let summary = lines.last().unwrap();
    assert_eq!(summary["kernel"]["lost"], 0, "{summary}");
    assert_eq!(
        u(&summary["kernel"], "cut_connections"),
        above as u64,
        "{summary}"
    );
    assert_eq!(summary["parse"]["unanswered_requests"], 0, "{summary}");

    // Per socket, its calls in order: the first requests of its connection, each whole; all
    // of them below the share, fewer above it (it was cut before the last five rounds).
    let mut resources: HashMap<u64, Vec<String>> = HashMap::new();
    for c in calls(&lines) {
        assert_eq!(c["status"], 200, "{c}");
        resources
            .entry(c["sock_id"].as_u64().unwrap())
            .or_default()
            .push(c["resource"].as_str().unwrap().to_string());
    }
    for (k, c) in conns.iter().enumerate() {
        for sock in [c.client, c.server] {
            let seen = resources.remove(&sock).unwrap_or_default();
            let want: Vec<String> = (0..seen.len())
                .map(|i| format!("/sleep/0/c{k}r{i}"))
                .collect();
            assert_eq!(seen, want, "socket {sock}: not its first requests in order");
            if !may_cut(k, sock) {
                assert_eq!(seen.len() as u64, c.requests, "socket {sock} not cut");
            } else {
                assert!(
                    (seen.len() as u64) + 5 <= c.requests && !seen.is_empty(),
                    "socket {sock} above the share: {} of {} calls",
                    seen.len(),
                    c.requests
                );
            }
        }
    }
    assert!(
        resources.is_empty(),
        "calls of other sockets: {resources:?}"
    );

    // The replay writes the same sampling lines (the cuts are in the recorded counters).
    let replayed = replay_json(&rec, &[]);
    let of = |ls: &[Value]| -> Vec<Value> {
        ls.iter()
            .filter(|v| v["type"] == "sampling")
            .cloned()
            .collect()
    };
    assert_eq!(of(&replayed), of(&lines));
}

/// When the budget affords more again, connections it cut are captured again — at a call
/// boundary, the first bytes of a request — and the tracker starts their parsers over there
/// without counting a gap (the bytes between were shed, not lost): the share drops to 30%
/// under 20 keep-alive connections already captured, each socket above it is cut, then the
/// share goes back to all (a debug build's `EBTOP_DEBUG_SAMPLE_SCHEDULE`, stepped by the
/// gate file's number). Each cut socket's calls are exactly its first requests and its last
/// ones, each whole, in order; counted and replayed the same.
#[test]
fn connections_a_budget_cut_rejoin_at_a_call_boundary_when_it_affords_them() {
    require_root();
    let server = TestServer::start();
    let dir = tempfile::tempdir().unwrap();
    let rec = dir.path().join("rejoin.ebt");
    let gate = dir.path().join("schedule-step");
    // All captured (no gate file yet), then 30% while the file says 1, all at 2.
    let mut ebtop = scheduled_budget(&server, &rec, "100,30,100", &gate);
    let mut conns: Vec<Conn> = (0..20).map(|_| Conn::to(&server)).collect();
    let keep = keep_below_of(0.3);
    let above: Vec<u64> = conns
        .iter()
        .flat_map(|c| [c.client, c.server])
        .filter(|&s| !keeps(s, keep))
        .collect();
    // 40 sockets at 30%: some cut, some not, or the test proves nothing.
    assert!(
        (5..=38).contains(&above.len()),
        "{} of 40 sockets above the share",
        above.len()
    );

    // One request per connection per round, each answered before the next.
    let round = |conns: &mut Vec<Conn>| {
        for (k, c) in conns.iter_mut().enumerate() {
            let req = format!(
                "GET /sleep/0/c{k}r{} HTTP/1.1\r\nHost: t\r\n\r\n",
                c.requests
            );
            c.stream.write_all(req.as_bytes()).unwrap();
            assert_eq!(read_response(&mut c.reader).0, 200);
            c.requests += 1;
        }
    };
    let deadline = std::time::Instant::now() + Duration::from_secs(120);
    // Every connection has a call with the share at 100%: each is captured. Then 30% until
    // every socket above it was cut.
    round(&mut conns);
    std::fs::write(&gate, b"1").unwrap();
    let mut cut = 0u64;
    while (cut as usize) < above.len() {
        assert!(
            std::time::Instant::now() < deadline,
            "{cut} of {} sockets cut",
            above.len()
        );
        round(&mut conns);
        while let Some(v) = ebtop.wait_for(Duration::from_millis(1), |v| v["type"] == "sampling") {
            cut += v["connections_cut"].as_u64().unwrap();
        }
    }
    assert_eq!(
        cut as usize,
        above.len(),
        "only sockets above the share are cut"
    );
    round(&mut conns);
    // All again: rounds until a call of every cut socket made after this point came out,
    // then five more.
    let all_again: Vec<u64> = conns.iter().map(|c| c.requests).collect();
    std::fs::write(&gate, b"2").unwrap();
    let mut back: HashMap<u64, bool> = above.iter().map(|&s| (s, false)).collect();
    let index_of = |c: &Value| -> (usize, u64) {
        let r = c["resource"].as_str().unwrap();
        let (k, i) = r.trim_start_matches("/sleep/0/c").split_once('r').unwrap();
        (k.parse().unwrap(), i.parse().unwrap())
    };
    while back.values().any(|b| !b) {
        assert!(
            std::time::Instant::now() < deadline,
            "{} of {} cut sockets captured again",
            back.values().filter(|b| **b).count(),
            above.len()
        );
        round(&mut conns);
        while let Some(c) = ebtop.wait_for(Duration::from_millis(1), |v| v["type"] == "call") {
            let (k, i) = index_of(&c);
            if i >= all_again[k] {
                if let Some(b) = back.get_mut(&c["sock_id"].as_u64().unwrap()) {
                    *b = true;
                }
            }
        }
    }
    for _ in 0..5 {
        round(&mut conns);
    }
    let lines = ebtop.stop();
    let summary = lines.last().unwrap();
    assert_eq!(summary["kernel"]["lost"], 0, "{summary}");
    let n = above.len() as u64;
    assert_eq!(u(&summary["kernel"], "cut_connections"), n, "{summary}");
    assert_eq!(
        u(&summary["kernel"], "rejoined_connections"),
        n,
        "{summary}"
    );
    // Each cut socket's parser started over once, where it rejoined; no gap, nothing damaged
    // or left unanswered.
    assert_eq!(u(&summary["tracker"], "rejoins"), n, "{summary}");
    assert_eq!(u(&summary["tracker"], "gaps"), 0, "{summary}");
    assert_eq!(summary["parse"]["unanswered_requests"], 0, "{summary}");
    assert_eq!(summary["parse"]["damaged_messages"], 0, "{summary}");

    // Per socket, its calls, each whole: all of them below the share; above it its
    // first requests, then none while cut, then its requests from where it rejoined on.
    let mut seen: HashMap<u64, Vec<u64>> = HashMap::new();
    for c in calls(&lines) {
        assert_eq!(c["status"], 200, "{c}");
        seen.entry(c["sock_id"].as_u64().unwrap())
            .or_default()
            .push(index_of(c).1);
    }
    for (k, c) in conns.iter().enumerate() {
        for sock in [c.client, c.server] {
            // In the order made (a server call held for its client call on this host may go
            // out after later ones: the hop, docs/json.md `parent_id`).
            let mut got = seen.remove(&sock).unwrap_or_default();
            got.sort_unstable();
            if !above.contains(&sock) {
                assert_eq!(got, (0..c.requests).collect::<Vec<_>>(), "socket {sock}");
                continue;
            }
            // The cut: the first index missing; the rejoin: the first index after it.
            let before = got.iter().zip(0..).take_while(|(i, j)| *i == j).count();
            let after = &got[before..];
            assert!(
                before >= 1,
                "socket {sock}: no call before its cut: {got:?}"
            );
            let first_back = *after
                .first()
                .unwrap_or_else(|| panic!("socket {sock}: {got:?}"));
            assert!(
                first_back > before as u64 && first_back >= all_again[k],
                "socket {sock} of c{k}: cut at {before}, back at {first_back} (all asked from {}): {got:?}",
                all_again[k]
            );
            assert_eq!(
                after,
                (first_back..c.requests).collect::<Vec<_>>(),
                "socket {sock}: after its rejoin, every call in order"
            );
            assert!(c.requests - first_back >= 5, "socket {sock}: {got:?}");
        }
    }
    assert!(seen.is_empty(), "calls of other sockets: {seen:?}");

    // The replay makes the same calls and counts (the flag is in the recorded records).
    let replayed = replay_json(&rec, &[]);
    let of = |ls: &[Value], ty: &str| -> Vec<Value> {
        ls.iter().filter(|v| v["type"] == ty).cloned().collect()
    };
    assert_eq!(of(&replayed, "sampling"), of(&lines, "sampling"));
    let resources = |ls: &[Value]| -> Vec<(u64, String)> {
        let mut v: Vec<(u64, String)> = calls(ls)
            .iter()
            .map(|c| (c["sock_id"].as_u64().unwrap(), c["resource"].to_string()))
            .collect();
        v.sort();
        v
    };
    assert_eq!(resources(&replayed), resources(&lines));
    assert_eq!(replayed.last().unwrap()["tracker"], summary["tracker"]);
}

/// The budget without `--max-cpu`: `EBTOP_MAX_CPU` when set, else 25% of one CPU — within
/// which nothing is sampled (this idle session captures everything and writes no `sampling`
/// line); `off` is no budget; a bad value is a one-line error before anything loads.
#[test]
fn the_budget_defaults_to_a_quarter_of_a_cpu_or_the_environments() {
    require_root();
    let budget_of = |env: Option<&str>| -> Option<f64> {
        let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_ebtop"));
        match env {
            Some(v) => cmd.env("EBTOP_MAX_CPU", v),
            None => cmd.env_remove("EBTOP_MAX_CPU"),
        };
        let mut ebtop =
            Ebtop::start_command(cmd, &["--json", "--delay", "200ms", "--tls", "off"], &[]);
        let ov = ebtop
            .wait_for(Duration::from_secs(20), |v| v["type"] == "overhead")
            .expect("an overhead line");
        let lines = ebtop.stop();
        assert!(
            lines.iter().all(|v| v["type"] != "sampling"),
            "an idle session within its budget samples nothing"
        );
        // Said with a budget only, and an idle session is never over it.
        assert_eq!(
            ov["over_budget_at_floor"].as_bool(),
            ov["max_cpu_pct"].as_f64().map(|_| false),
            "{ov}"
        );
        ov["max_cpu_pct"].as_f64()
    };
    assert_eq!(budget_of(None), Some(25.0));
    assert_eq!(budget_of(Some("12.5")), Some(12.5));
    assert_eq!(budget_of(Some("off")), None);

    let out = std::process::Command::new(env!("CARGO_BIN_EXE_ebtop"))
        .env("EBTOP_MAX_CPU", "lots")
        .args(["--json", "--duration", "1s"])
        .output()
        .expect("ebtop runs");
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("EBTOP_MAX_CPU=\"lots\"") && err.lines().count() == 1,
        "{err}"
    );
}

/// A budget so small that ebtop's own work alone is over it: with every connection sampled
/// out (short connections, each decided at its first send) the overhead line says it is over
/// the budget with nothing captured — and says so only for intervals whose every traced send
/// and receive was on a connection sampled out or cut.
#[test]
fn a_budget_over_with_nothing_captured_says_so() {
    require_root();
    let server = TestServer::start();
    let port = server.port.to_string();
    let pid = std::process::id().to_string();
    let mut ebtop = Ebtop::start(&[
        "--json",
        "--port",
        &port,
        "--pid",
        &pid,
        "--delay",
        "200ms",
        "--tls",
        "off",
        "--max-cpu",
        "0.01",
    ]);
    let stop = std::sync::atomic::AtomicBool::new(false);
    let said = std::thread::scope(|s| {
        s.spawn(|| {
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                let mut c = Conn::to(&server);
                c.stream
                    .write_all(b"GET / HTTP/1.1\r\nHost: t\r\n\r\n")
                    .unwrap();
                assert_eq!(read_response(&mut c.reader).0, 200);
            }
        });
        let said = ebtop.wait_for(Duration::from_secs(90), |v| {
            v["type"] == "overhead" && v["over_budget_at_floor"] == true
        });
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        said
    });
    let lines = ebtop.stop();
    let said = said.expect("an interval over the budget with nothing captured");
    assert!(said["ebtop_cpu_pct"].as_f64().unwrap() > 0.01, "{said}");
    // Each interval's lines end with its overhead line; its sampling line comes before.
    let mut sampling: Option<&Value> = None;
    let mut at_floor = 0;
    for v in &lines {
        match v["type"].as_str() {
            Some("sampling") => sampling = Some(v),
            Some("overhead") => {
                if v["over_budget_at_floor"] == true {
                    let sm = sampling.expect("a sampling line in an interval at the floor");
                    let syscalls = sm["syscalls"].as_u64().unwrap();
                    assert!(syscalls > 0, "{sm}");
                    assert_eq!(sm["syscalls_not_captured"].as_u64(), Some(syscalls), "{sm}");
                    at_floor += 1;
                }
                sampling = None;
            }
            _ => {}
        }
    }
    assert!(at_floor >= 1);
}
