//! Live capture of TLS driven through memory BIOs: Node.js (its TLSWrap runs OpenSSL — linked
//! into `node`, or the system libssl — over in-memory BIOs and moves the ciphertext itself
//! through libuv) and Python's asyncio (`ssl.MemoryBIO`: aiohttp as the client, uvicorn as
//! the server). No syscall happens inside their SSL calls; ebtop binds each SSL object to its
//! socket by the handshake's first flights (docs/architecture.md, "TLS through memory BIOs").
//! Every request is compared with what the peer on the other side counted: as many calls,
//! `tls: true`, statuses and sizes equal on both sides of each connection, and no TLS call
//! left without its socket. Needs root, node, nginx (nginx-light, with http2), curl, h2load,
//! openssl and scripts/deps' venv of aiohttp and uvicorn.

mod common;

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::*;
use serde_json::Value;

/// The venv scripts/deps makes for the Python peers (aiohttp, uvicorn).
const VENV_PYTHON: &str = "/var/cache/ebtop-tests/membio-venv/bin/python";
/// nginx's `/index.html`.
const INDEX: &str = "<html>hello over TLS</html>\n";

fn fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/tls/membio")
        .join(name)
}

fn venv_python() -> &'static str {
    assert!(
        Path::new(VENV_PYTHON).exists(),
        "{VENV_PYTHON} is missing: run scripts/deps"
    );
    VENV_PYTHON
}

/// nginx (one process) over TLS on `h1` (HTTP/1.1), `h2` (HTTP/2, ALPN) and `unwatched`
/// (HTTP/1.1, a port the tests leave out of `--port`), `/index.html`.
struct Nginx {
    peer: Peer,
    h1: u16,
    h2: u16,
    unwatched: u16,
    _dir: tempfile::TempDir,
}

impl Nginx {
    fn start() -> Nginx {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        let (cert, key) = self_signed_cert(d);
        let www = d.join("www");
        std::fs::create_dir(&www).unwrap();
        std::fs::write(www.join("index.html"), INDEX).unwrap();
        let (h1, h2, unwatched) = (free_tcp_port(), free_tcp_port(), free_tcp_port());
        let http = format!(
            "  keepalive_requests 100000;
  ssl_certificate {cert};
  ssl_certificate_key {key};
  root {www};
  server {{ listen 127.0.0.1:{h1} ssl; }}
  server {{ listen 127.0.0.1:{h2} ssl http2; }}
  server {{ listen 127.0.0.1:{unwatched} ssl; }}",
            cert = cert.display(),
            key = key.display(),
            www = www.display(),
        );
        let child = common::start_nginx_with(d, &http);
        wait_for_pid_file(&d.join("nginx.pid"));
        wait_for_listener("127.0.0.1", h1, "nginx");
        Nginx {
            peer: Peer(child),
            h1,
            h2,
            unwatched,
            _dir: dir,
        }
    }

    fn pid(&self) -> u32 {
        self.peer.0.id()
    }
}

fn wait_for_pid_file(path: &Path) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while !path.exists() {
        assert!(
            Instant::now() < deadline,
            "{} never written",
            path.display()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A server peer that prints "ready" once it listens: `program args…`.
fn start_server(program: &str, args: &[&str], port: u16) -> Peer {
    let mut child = Command::new(program)
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap_or_else(|e| panic!("{program} runs: {e}"));
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    assert_eq!(line.trim(), "ready", "{program} {args:?}");
    wait_for_listener("127.0.0.1", port, program);
    Peer(child)
}

/// A client peer's run: its pid and (status, body length) per request.
struct Run {
    pid: u32,
    got: Vec<(u64, usize)>,
}

/// Runs a peer client (`node_peer.js`/`py_peer.py` `client …`) to its end; asserts it did
/// all `n` requests.
fn run_client(program: &str, args: &[&str], n: usize) -> Run {
    let child = Command::new(program)
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("{program} runs: {e}"));
    let pid = child.id();
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "{program} {args:?}: {out:?}");
    let text = String::from_utf8(out.stdout).unwrap();
    let mut lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.pop(), Some("done"), "{text}");
    let got: Vec<(u64, usize)> = lines
        .iter()
        .map(|l| {
            let (s, n) = l.split_once(' ').unwrap();
            (s.parse().unwrap(), n.parse().unwrap())
        })
        .collect();
    assert_eq!(got.len(), n, "{program} {args:?}: {text}");
    Run { pid, got }
}

fn node_client(url: &str, n: usize, conns: usize, h2: bool) -> Run {
    let (n_s, c_s) = (n.to_string(), conns.to_string());
    let script = fixture("node_peer.js");
    let mut args = vec![script.to_str().unwrap(), "client", url, &n_s, &c_s];
    if h2 {
        args.push("h2");
    }
    run_client("node", &args, n)
}

fn aiohttp_client(url: &str, n: usize, conns: usize) -> Run {
    let (n_s, c_s) = (n.to_string(), conns.to_string());
    let script = fixture("py_peer.py");
    let args = [script.to_str().unwrap(), "client", url, &n_s, &c_s];
    run_client(venv_python(), &args, n)
}

/// curl fetching `url` `n` times on one keep-alive connection: its pid; asserts each answer.
fn curl(url: &str, n: usize, status: u64) -> u32 {
    let mut cmd = Command::new("curl");
    cmd.args(["-sk", "--http1.1", "-w", "%{http_code}\n"]);
    for _ in 0..n {
        cmd.args(["-o", "/dev/null", url]); // each URL its own output
    }
    let child = cmd.stdout(Stdio::piped()).spawn().expect("curl runs");
    let pid = child.id();
    let out = child.wait_with_output().unwrap();
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(out.status.success(), "curl: {text}");
    let codes: Vec<u64> = text.lines().map(|l| l.parse().unwrap()).collect();
    assert_eq!(codes, vec![status; n], "curl {url}");
    pid
}

/// h2load (OpenSSL over the socket: the calls ebtop knew before) with `n` requests on `c`
/// connections, HTTP/1.1 (`--h1`) or HTTP/2: its pid; asserts every request got a 2xx.
fn h2load(url: &str, n: usize, c: usize, h1: bool) -> u32 {
    let mut cmd = Command::new("h2load");
    if h1 {
        cmd.arg("--h1");
    }
    let child = cmd
        .args(["-n", &n.to_string(), "-c", &c.to_string(), url])
        .stdout(Stdio::piped())
        .spawn()
        .expect("h2load is installed (nghttp2-client)");
    let pid = child.id();
    let out = child.wait_with_output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success()
            && text.contains(&format!("{n} succeeded, 0 failed, 0 errored"))
            && text.contains(&format!("{n} 2xx")),
        "{text}"
    );
    pid
}

/// Calls of process `pid` on `side`.
fn of<'a>(calls: &[&'a Value], pid: u32, side: &str) -> Vec<&'a Value> {
    calls
        .iter()
        .copied()
        .filter(|c| c["pid"] == pid && c["side"] == side)
        .collect()
}

/// `calls` are the client's `run`, one call per request, over TLS: as many, the same
/// statuses (as a multiset: concurrent requests finish in any order), `http2` or `http`.
fn assert_client_run(calls: &[&Value], run: &Run, http2: bool, path: &str) {
    assert_eq!(
        calls.len(),
        run.got.len(),
        "one client call per request: {:#?}",
        &calls[..calls.len().min(5)]
    );
    let mut want: Vec<u64> = run.got.iter().map(|g| g.0).collect();
    let mut have: Vec<u64> = calls
        .iter()
        .map(|c| c["status"].as_u64().unwrap())
        .collect();
    want.sort_unstable();
    have.sort_unstable();
    assert_eq!(have, want, "statuses");
    for c in calls {
        assert_eq!(c["tls"], true, "{c}");
        assert_eq!(c["proto"], if http2 { "http2" } else { "http" }, "{c}");
        assert_eq!(c["method"], "GET", "{c}");
        assert_eq!(c["resource"], path, "{c}");
    }
}

/// Every TLS call had its socket: nothing counted as unknown, and the bindings were made.
fn assert_all_bound(summary: &Value) {
    let k = &summary["kernel"];
    assert_eq!(k["tls_no_socket"], 0, "{k}");
    assert!(k["tls_membio_bound"].as_u64().unwrap() > 0, "{k}");
    assert_clean_summary(summary);
}

/// Node as the client, nginx as the server: HTTP/1.1 (120 requests on 6 keep-alive
/// connections of one event loop, 20 of them 404s), HTTP/2 (60 streams on 3 sessions), and
/// one loop taking turns between a watched port and one `--port` leaves out (4 connections
/// each). Node's calls are exact, each pairs with nginx's call on the same connection, and
/// no call of the other port's connections is shown (nor taken for a watched one's).
#[test]
fn node_client_against_nginx_is_exact_on_both_sides() {
    require_root();
    let nginx = Nginx::start();
    let ports = format!("{},{}", nginx.h1, nginx.h2);
    let ebtop = Ebtop::start(&["--json", "--port", &ports]);

    let base = format!("https://127.0.0.1:{}", nginx.h1);
    let h1 = node_client(&format!("{base}/index.html"), 100, 6, false);
    assert!(
        h1.got.iter().all(|g| *g == (200, INDEX.len())),
        "{:?}",
        h1.got
    );
    let missing = node_client(&format!("{base}/missing"), 20, 2, false);
    assert!(missing.got.iter().all(|g| g.0 == 404), "{:?}", missing.got);
    let h2url = format!("https://127.0.0.1:{}/index.html", nginx.h2);
    let h2 = node_client(&h2url, 60, 3, true);
    assert!(
        h2.got.iter().all(|g| *g == (200, INDEX.len())),
        "{:?}",
        h2.got
    );
    let both = format!(
        "{base}/index.html,https://127.0.0.1:{}/index.html",
        nginx.unwatched
    );
    let mixed = node_client(&both, 80, 4, false);
    assert!(mixed.got.iter().all(|g| g.0 == 200), "{:?}", mixed.got);

    let lines = ebtop.stop();
    let calls = calls(&lines);
    let c1 = of(&calls, h1.pid, "client");
    assert_client_run(&c1, &h1, false, "/index.html");
    let cm = of(&calls, missing.pid, "client");
    assert_client_run(&cm, &missing, false, "/missing");
    let c2 = of(&calls, h2.pid, "client");
    assert_client_run(&c2, &h2, true, "/index.html");
    for c in c1.iter().chain(&c2) {
        assert_eq!(c["comm"], "node", "{c}");
    }
    let cx = of(&calls, mixed.pid, "client");
    assert_eq!(cx.len(), 40, "the watched port's half: {cx:#?}");
    for c in &cx {
        assert_eq!(port_of(&c["peer"]), nginx.h1, "{c}");
        assert_eq!(
            (&c["tls"], &c["status"]),
            (&true.into(), &200.into()),
            "{c}"
        );
    }
    let server = of(&calls, nginx.pid(), "server");
    let clients: Vec<&Value> = [c1, cm, c2, cx].concat();
    assert_paired(&clients, &server);
    assert_eq!(calls.len(), 2 * clients.len(), "no other calls");
    assert_all_bound(lines.last().unwrap());
}

/// Node as the server (HTTP/1.1, then HTTP/2 on another port): curl, h2load with 50
/// concurrent keep-alive connections (Node serves them all on one thread: the case where a
/// wrong association would move a call to another connection), half of them answered in a
/// later turn of the loop (`/slow`), and Node's own client. Node's server calls are exact
/// and each pairs with the client's on the same connection.
#[test]
fn node_server_is_exact_with_50_connections_on_one_loop() {
    require_root();
    let dir = tempfile::tempdir().unwrap();
    let (cert, key) = self_signed_cert(dir.path());
    let (p1, p2) = (free_tcp_port(), free_tcp_port());
    let script = fixture("node_peer.js");
    let (cert, key, script) = (cert.to_str().unwrap(), key.to_str().unwrap(), script);
    let ebtop = Ebtop::start(&["--json", "--port", &format!("{p1},{p2}")]);
    // Started after ebtop: its first connections are those of the test.
    let s1 = start_server(
        "node",
        &[
            script.to_str().unwrap(),
            "server",
            &p1.to_string(),
            cert,
            key,
        ],
        p1,
    );
    let s2 = start_server(
        "node",
        &[
            script.to_str().unwrap(),
            "server",
            &p2.to_string(),
            cert,
            key,
            "h2",
        ],
        p2,
    );
    let base = format!("https://127.0.0.1:{p1}");
    let curl_pid = curl(&format!("{base}/index.html"), 5, 200);
    let curl404 = curl(&format!("{base}/missing"), 3, 404);
    let fast = h2load(&format!("{base}/fast"), 500, 50, true);
    let slow = h2load(&format!("{base}/slow"), 500, 50, true);
    let node = node_client(&format!("{base}/slow"), 40, 4, false);
    let h2 = h2load(&format!("https://127.0.0.1:{p2}/h2"), 200, 10, false);

    let lines = ebtop.stop();
    let calls = calls(&lines);
    let mut clients = Vec::new();
    for (pid, n, path, status) in [
        (curl_pid, 5, "/index.html", 200),
        (curl404, 3, "/missing", 404),
        (fast, 500, "/fast", 200),
        (slow, 500, "/slow", 200),
    ] {
        let c = of(&calls, pid, "client");
        assert_eq!(c.len(), n, "client {pid} {path}");
        for c in &c {
            assert_eq!(
                (&c["resource"], &c["status"]),
                (&path.into(), &status.into())
            );
            assert_eq!(c["tls"], true, "{c}");
        }
        clients.extend(c);
    }
    let cn = of(&calls, node.pid, "client");
    assert_client_run(&cn, &node, false, "/slow");
    clients.extend(cn);
    let ch2 = of(&calls, h2, "client");
    assert_eq!(ch2.len(), 200);
    let server1 = of(&calls, s1.0.id(), "server");
    let server2 = of(&calls, s2.0.id(), "server");
    assert_eq!(server1.len(), clients.len(), "one server call per request");
    assert_eq!(server2.len(), 200, "one HTTP/2 server call per stream");
    for s in server1.iter().chain(&server2) {
        assert_eq!(s["tls"], true, "{s}");
        assert_eq!(s["comm"], "node", "{s}");
    }
    for s in &server2 {
        assert_eq!(s["proto"], "http2", "{s}");
    }
    assert_paired(&clients, &server1);
    assert_paired(&ch2, &server2);
    assert_all_bound(lines.last().unwrap());
}

/// Python's asyncio on both sides: aiohttp (100 requests on 10 connections) against uvicorn
/// (h11 on the asyncio loop), aiohttp against nginx, and curl against uvicorn. Each side's
/// calls are exact and pair with the other side's.
#[test]
fn python_asyncio_client_and_server_are_exact() {
    require_root();
    let python = venv_python();
    let nginx = Nginx::start();
    let dir = tempfile::tempdir().unwrap();
    let (cert, key) = self_signed_cert(dir.path());
    let port = free_tcp_port();
    let ports = format!("{port},{}", nginx.h1);
    let ebtop = Ebtop::start(&["--json", "--port", &ports]);
    let script = fixture("py_peer.py");
    let uvicorn = start_server(
        python,
        &[
            script.to_str().unwrap(),
            "server",
            &port.to_string(),
            cert.to_str().unwrap(),
            key.to_str().unwrap(),
        ],
        port,
    );
    let base = format!("https://127.0.0.1:{port}");
    let py = aiohttp_client(&format!("{base}/hello"), 100, 10);
    assert!(py.got.iter().all(|g| *g == (200, 19)), "{:?}", py.got);
    let py404 = aiohttp_client(&format!("{base}/missing"), 10, 2);
    let to_nginx = aiohttp_client(&format!("https://127.0.0.1:{}/index.html", nginx.h1), 30, 3);
    let curl_pid = curl(&format!("{base}/hello"), 5, 200);

    let lines = ebtop.stop();
    let calls = calls(&lines);
    let cp = of(&calls, py.pid, "client");
    assert_client_run(&cp, &py, false, "/hello");
    let cm = of(&calls, py404.pid, "client");
    assert_client_run(&cm, &py404, false, "/missing");
    let cn = of(&calls, to_nginx.pid, "client");
    assert_client_run(&cn, &to_nginx, false, "/index.html");
    let cc = of(&calls, curl_pid, "client");
    assert_eq!(cc.len(), 5);
    let server = of(&calls, uvicorn.0.id(), "server");
    let to_uvicorn: Vec<&Value> = [cp, cm, cc].concat();
    assert_eq!(
        server.len(),
        to_uvicorn.len(),
        "one uvicorn call per request"
    );
    assert_paired(&to_uvicorn, &server);
    assert_paired(&cn, &of(&calls, nginx.pid(), "server"));
    assert_all_bound(lines.last().unwrap());
}

/// A Node connection open before ebtop started: its handshake was never seen, so neither
/// side's SSL object can be bound — its 10 requests are counted (`tls_no_socket`), never
/// shown on another connection, while a new connection of the same two processes' kind, made
/// right after on the same server, is exact.
#[test]
fn a_connection_open_before_ebtop_is_counted_not_attributed() {
    require_root();
    let dir = tempfile::tempdir().unwrap();
    let (cert, key) = self_signed_cert(dir.path());
    let port = free_tcp_port();
    let script = fixture("node_peer.js");
    let script = script.to_str().unwrap();
    let server = start_server(
        "node",
        &[
            script,
            "server",
            &port.to_string(),
            cert.to_str().unwrap(),
            key.to_str().unwrap(),
        ],
        port,
    );
    let url = format!("https://127.0.0.1:{port}/old");
    let mut hold = Command::new("node")
        .args([script, "hold", &url, "10"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("node runs");
    let hold_pid = hold.id();
    let mut out = BufReader::new(hold.stdout.take().unwrap());
    let mut line = String::new();
    out.read_line(&mut line).unwrap();
    assert_eq!(line.trim(), "open");

    // No --port: every TLS call of the host is counted, this connection's too.
    let ebtop = Ebtop::start(&["--json"]);
    use std::io::Write as _;
    hold.stdin.take().unwrap().write_all(b"go\n").unwrap();
    let mut rest = String::new();
    std::io::Read::read_to_string(&mut out, &mut rest).unwrap();
    assert!(hold.wait().unwrap().success(), "{rest}");
    assert_eq!(rest.matches("200 16\n").count(), 10, "{rest}");
    let fresh = node_client(&format!("https://127.0.0.1:{port}/new"), 5, 1, false);

    let lines = ebtop.stop();
    let calls = calls(&lines);
    assert!(
        of(&calls, hold_pid, "client").is_empty(),
        "never attributed"
    );
    let client = of(&calls, fresh.pid, "client");
    assert_client_run(&client, &fresh, false, "/new");
    let served = of(&calls, server.0.id(), "server");
    assert_eq!(served.len(), 5, "only the new connection's: {served:#?}");
    assert_paired(&client, &served);
    // Each old request is at least a write and a read on each side.
    let k = &lines.last().unwrap()["kernel"];
    assert!(k["tls_no_socket"].as_u64().unwrap() >= 4 * 10, "{k}");
}
