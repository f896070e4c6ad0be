//! Live call chains on one host (issue 50): a threaded Python HTTP app (ThreadingHTTPServer)
//! that calls Redis twice and another local HTTP service once per request, driven by
//! concurrent keep-alive clients of this test. Ground truth: the request id is in every
//! downstream call the app makes (the Redis keys, the backend's path), and the app logs which
//! calls each request made. Every app client call must sit under the app server call of its
//! own request (a call under another request's is a failure, counted), each app server call
//! under this test's client call that reached it, and each Redis and backend server call
//! under the app's client call that reached it; a `traceparent` sent with one request is the
//! trace id of its whole chain. The same for a Go net/http service (tests/fixtures/chains/go,
//! built by the test: needs a Go toolchain) whose handler calls Redis itself, from goroutines
//! it starts (and one they start), and another HTTP service through net/http's client: every
//! call made while the request is open under it (goroutines, not threads; the started ones
//! by their creation), a started goroutine's call after the response unlinked and counted;
//! over plain HTTP and over HTTPS (crypto/tls, driven by curl). nginx in front: its upstream
//! calls under the downstream requests they proxy (the request paths), over HTTP/1 and
//! HTTPS downstreams; an HTTP/2 downstream links none and counts them. Needs root.

mod common;

use std::collections::HashMap;
use std::io::{BufReader, Write};
use std::net::TcpStream;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use common::*;
use serde_json::Value;

const APP: &str = r#"
import http.client, http.server, socket, struct, sys, threading

port, redis_port, backend_port, log_path = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
local = threading.local()
log_lock = threading.Lock()

def redis_get(key):
    s = getattr(local, "redis", None)
    if s is None:
        s = local.redis = socket.create_connection(("127.0.0.1", redis_port))
    k = key.encode()
    s.sendall(b"*2\r\n$3\r\nGET\r\n$%d\r\n%s\r\n" % (len(k), k))
    reply = b""
    while not reply.endswith(b"\r\n"):
        reply += s.recv(4096)

def pg_messages(s, until):
    # Reads PostgreSQL messages up to one of type `until` (ReadyForQuery).
    buf = b""
    while True:
        while len(buf) < 5:
            buf += s.recv(65536)
        n = struct.unpack("!I", buf[1:5])[0]
        while len(buf) < 1 + n:
            buf += s.recv(65536)
        t, buf = buf[0:1], buf[1 + n:]
        if t == until:
            return

def pg_query(sql):
    s = getattr(local, "pg", None)
    if s is None:
        s = local.pg = socket.create_connection(("127.0.0.1", pg_port))
        body = struct.pack("!I", 196608) + b"user\0postgres\0database\0postgres\0\0"
        s.sendall(struct.pack("!I", len(body) + 4) + body)
        pg_messages(s, b"Z")
    q = sql.encode() + b"\0"
    s.sendall(b"Q" + struct.pack("!I", len(q) + 4) + q)
    pg_messages(s, b"Z")

def backend_get(path):
    c = getattr(local, "backend", None)
    if c is None:
        c = local.backend = http.client.HTTPConnection("127.0.0.1", backend_port)
    c.request("GET", path)
    r = c.getresponse()
    r.read()

class App(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    def do_GET(self):
        rid = self.path.rsplit("/", 1)[-1]
        made = ["rid:%s:1" % rid, "rid:%s:2" % rid, "/b/%s" % rid]
        redis_get(made[0])
        backend_get(made[2])
        redis_get(made[1])
        if pg_port:
            made.append("SELECT'rid:%s'" % rid)
            pg_query(made[3])
        body = b"ok"
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
        with log_lock:
            with open(log_path, "a") as f:
                f.write("%s %d %s\n" % (rid, threading.get_ident(), " ".join(made)))
    def log_message(self, *a):
        pass

class Backend(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    def do_GET(self):
        self.send_response(200)
        self.send_header("Content-Length", "1")
        self.end_headers()
        self.wfile.write(b"b")
    def log_message(self, *a):
        pass

mode = sys.argv[5]
pg_port = int(sys.argv[6]) if len(sys.argv) > 6 else 0
if mode == "backend":
    http.server.ThreadingHTTPServer(("127.0.0.1", backend_port), Backend).serve_forever()
else:
    http.server.ThreadingHTTPServer(("127.0.0.1", port), App).serve_forever()
"#;

const TRACE_ID: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
const CLIENTS: usize = 6;
const PER_CLIENT: usize = 20;

struct Killed(Child);
impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn python(script: &std::path::Path, args: &[String]) -> Killed {
    Killed(
        Command::new("python3")
            .arg(script)
            .args(args)
            .stdout(Stdio::null())
            .spawn()
            .expect("python3 runs"),
    )
}

/// CLIENTS threads, each making PER_CLIENT requests to `port` ([`drive`]), run to their end.
fn drive_all(port: u16) {
    let clients: Vec<_> = (0..CLIENTS)
        .map(|c| std::thread::spawn(move || drive(port, c, PER_CLIENT)))
        .collect();
    for c in clients {
        c.join().unwrap();
    }
}

/// The app's own account (its log): request id → the downstream calls it made; every
/// request the clients made is in it.
fn app_log(log: &std::path::Path) -> HashMap<String, Vec<String>> {
    let made: HashMap<String, Vec<String>> = std::fs::read_to_string(log)
        .unwrap()
        .lines()
        .map(|l| {
            let mut w = l.split(' ');
            let rid = w.next().unwrap().to_owned();
            let _thread = w.next();
            (rid, w.map(str::to_owned).collect())
        })
        .collect();
    assert_eq!(
        made.len(),
        CLIENTS * PER_CLIENT,
        "the app served every request"
    );
    made
}

/// One keep-alive client: `n` requests for ids `c-0`…, the first of client 0 with a
/// `traceparent`.
fn drive(port: u16, client: usize, n: usize) {
    let s = TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let mut w = s.try_clone().unwrap();
    let mut r = BufReader::new(s);
    for i in 0..n {
        let trace = if client == 0 && i == 0 {
            format!("traceparent: 00-{TRACE_ID}-00f067aa0ba902b7-01\r\n")
        } else {
            String::new()
        };
        let req = format!("GET /req/{client}-{i} HTTP/1.1\r\nHost: app\r\n{trace}\r\n");
        w.write_all(req.as_bytes()).unwrap();
        let (status, _) = read_response(&mut r);
        assert_eq!(status, 200);
    }
}

fn str_of<'a>(c: &'a Value, k: &str) -> &'a str {
    c[k].as_str().unwrap_or("")
}

/// A fresh `dir` with the app's script written in it: (script, where the app's log goes).
fn app_dir(dir: &std::path::Path) -> (std::path::PathBuf, std::path::PathBuf) {
    let _ = std::fs::remove_dir_all(dir);
    std::fs::create_dir_all(dir).unwrap();
    let script = dir.join("app.py");
    std::fs::write(&script, APP).unwrap();
    (script, dir.join("app.log"))
}

/// A redis-server of the test's own on `port` (no persistence); killed on drop.
fn redis_on(port: u16) -> Killed {
    Killed(
        Command::new("redis-server")
            .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
            .args(["--save", "", "--appendonly", "no"])
            .stdout(Stdio::null())
            .spawn()
            .expect("redis-server is installed (scripts/deps installs it)"),
    )
}

#[test]
fn a_threaded_apps_calls_sit_under_the_request_they_were_made_for() {
    require_root();
    let dir = std::env::temp_dir().join(format!("ebtop-chains-{}", std::process::id()));
    let (script, log) = app_dir(&dir);

    let redis_port = free_tcp_port();
    let _redis = redis_on(redis_port);
    let (app_port, backend_port) = (free_tcp_port(), free_tcp_port());
    let ports = |mode: &str| {
        vec![
            app_port.to_string(),
            redis_port.to_string(),
            backend_port.to_string(),
            log.display().to_string(),
            mode.to_owned(),
        ]
    };
    let _backend = python(&script, &ports("backend"));
    let _app = python(&script, &ports("app"));
    wait_for_listener("127.0.0.1", redis_port, "redis-server");
    wait_for_listener("127.0.0.1", backend_port, "the backend");
    wait_for_listener("127.0.0.1", app_port, "the app");

    let port_s = app_port.to_string();
    let recording = dir.join("chains.ebtop");
    let rec_s = recording.display().to_string();
    let ebtop = Ebtop::start(&[
        "--json",
        "-w",
        &rec_s,
        "--port",
        &port_s,
        "--port",
        &redis_port.to_string(),
        "--port",
        &backend_port.to_string(),
    ]);
    drive_all(app_port);
    let lines = ebtop.stop();
    let summary = lines.last().unwrap();
    assert_eq!(summary["kernel"]["lost"], 0, "{summary}");

    let made = app_log(&log);

    let calls = calls(&lines);
    let by_id: HashMap<&str, &Value> = calls.iter().map(|c| (str_of(c, "id"), *c)).collect();
    assert_eq!(by_id.len(), calls.len(), "ids are unique");
    let on = |side: &str, port: u16, resource: &str| -> Vec<&Value> {
        calls
            .iter()
            .copied()
            .filter(|c| on_server_port(c, side, port) && str_of(c, "resource") == resource)
            .collect()
    };
    let one = |side: &str, port: u16, resource: &str| -> &Value {
        let v = on(side, port, resource);
        assert_eq!(v.len(), 1, "{side} {resource} on {port}: {v:?}");
        v[0]
    };

    let mut wrong = Vec::new();
    let mut missing = Vec::new();
    for (rid, downstream) in &made {
        let path = format!("/req/{rid}");
        let app = one("server", app_port, &path);
        let driver = one("client", app_port, &path);
        // The hop: this test's call reached the app's server call.
        if app["parent_id"] != driver["id"] {
            missing.push(format!(
                "{path}: app call's parent {} ≠ the test's call",
                app["parent_id"]
            ));
        }
        for d in downstream {
            let (port, server_port) = if d.starts_with("/b/") {
                (backend_port, backend_port)
            } else {
                (redis_port, redis_port)
            };
            let client = one("client", port, d);
            match client["parent_id"].as_str() {
                Some(p) if p == str_of(app, "id") => {}
                Some(p) => wrong.push(format!(
                    "{d} under {} instead of {path}",
                    by_id.get(p).map_or("?", |c| str_of(c, "resource"))
                )),
                None => missing.push(format!("{d}: no parent")),
            }
            let server = one("server", server_port, d);
            if server["parent_id"] != client["id"] {
                missing.push(format!("{d}: server call's parent {}", server["parent_id"]));
            }
            if rid == "0-0" {
                for c in [client, server] {
                    assert_eq!(c["trace_id"], TRACE_ID, "{d}: {c}");
                }
            } else {
                assert!(client["trace_id"].is_null(), "{c}", c = client);
            }
        }
        if rid == "0-0" {
            assert_eq!(app["trace_id"], TRACE_ID);
            assert_eq!(driver["trace_id"], TRACE_ID);
        }
    }
    assert!(wrong.is_empty(), "calls under another request: {wrong:#?}");
    assert!(missing.is_empty(), "links not made: {missing:#?}");
    let chains = &summary["chains"];
    assert_eq!(
        chains["linked"],
        (CLIENTS * PER_CLIENT * 3) as u64,
        "{chains}"
    );
    assert_eq!(chains["ambiguous"], 0, "{chains}");
    assert_eq!(chains["unconfirmed"], 0, "{chains}");

    // The recording replays into the same chains: every call's id, parent and trace id.
    let replayed = replay_json(std::path::Path::new(&rec_s), &[]);
    let chain_of = |c: &Value| {
        (
            str_of(c, "resource").to_owned(),
            c["side"].clone(),
            c["id"].clone(),
            c["parent_id"].clone(),
            c["trace_id"].clone(),
        )
    };
    let mut live: Vec<_> = calls.iter().map(|c| chain_of(c)).collect();
    let mut replay: Vec<_> = replayed
        .iter()
        .filter(|v| v["type"] == "call")
        .map(chain_of)
        .collect();
    live.sort_by_key(|k| format!("{k:?}"));
    replay.sort_by_key(|k| format!("{k:?}"));
    assert_eq!(live.len(), replay.len());
    assert!(
        live == replay,
        "the replay's chains differ from the live run's"
    );

    // The terminal UI, replaying the recording: request 0-0's app call shows its parent (the
    // test's call) and, as a waterfall, the downstream calls the app's log says it made.
    let mut tui = ebtop::tui::app::App::new("replay", std::time::Duration::from_secs(1), true);
    for m in ebtop::tui::collect_replay(std::path::Path::new(&rec_s)).unwrap() {
        tui.apply(m);
    }
    let seq = tui
        .shown()
        .calls
        .iter()
        .find(|e| {
            e.call.side.name() == "server"
                && e.call.local.port() == app_port
                && e.call.l7.resource.as_str() == "/req/0-0"
        })
        .map(|e| e.seq)
        .expect("request 0-0's app call among the calls kept");
    let (w, h) = (120u16, 80u16);
    tui.set_size(w, h);
    tui.detail = Some(seq);
    let mut term = ratatui::Terminal::new(ratatui::backend::TestBackend::new(w, h)).unwrap();
    let screen = draw(&mut term, &tui);
    let downstream = &made["0-0"];
    assert!(
        screen.contains(&format!("{} children, self time", downstream.len())),
        "{screen}"
    );
    assert!(screen.contains("parent   #"), "{screen}");
    for d in downstream {
        assert!(
            screen
                .lines()
                .any(|l| l.contains('█') && l.contains(d.as_str())),
            "{d} not in the waterfall:\n{screen}"
        );
    }

    // Tab picks the parent, then the first child (by start); Enter follows it: the child's
    // details name request 0-0's call as their parent; Esc goes back to it, then out.
    let press = |tui: &mut ebtop::tui::app::App, code| {
        tui.handle_key(crossterm::event::KeyEvent::from(code));
    };
    let targets = tui.chain_targets();
    assert_eq!(
        targets.len(),
        1 + downstream.len(),
        "the parent and each child"
    );
    use crossterm::event::KeyCode;
    press(&mut tui, KeyCode::Tab);
    press(&mut tui, KeyCode::Tab);
    let child = targets[1];
    assert_eq!(tui.chain_picked(), Some(child));
    let screen = draw(&mut term, &tui);
    assert!(
        screen
            .lines()
            .any(|l| l.starts_with("│▶ |") || l.contains("▶ |")),
        "the picked child is marked:\n{screen}"
    );
    press(&mut tui, KeyCode::Enter);
    assert_eq!(tui.detail, Some(child));
    let screen = draw(&mut term, &tui);
    assert!(
        screen.contains(&format!("parent   #{seq} ")),
        "the child's parent is request 0-0's call:\n{screen}"
    );
    press(&mut tui, KeyCode::Esc);
    assert_eq!(
        tui.detail,
        Some(seq),
        "Esc goes back to the call followed from"
    );
    press(&mut tui, KeyCode::Esc);
    assert_eq!(tui.detail, None);

    // The app's endpoint, drilled into (over the whole replay): its time by downstream
    // endpoint — each request made two Redis calls and one backend call (the app's log).
    press(&mut tui, KeyCode::Char('2'));
    press(&mut tui, KeyCode::Char('c'));
    press(&mut tui, KeyCode::Char('c'));
    let rows = tui.rows();
    let app_row = rows
        .iter()
        .find(|r| r.cells[1] == "server" && r.cells[3].starts_with("/req/"))
        .unwrap_or_else(|| {
            panic!(
                "the app's endpoint row: {:?}",
                rows.iter().map(|r| &r.cells).collect::<Vec<_>>()
            )
        });
    let key = app_row.key.clone();
    tui.select_key(&key);
    press(&mut tui, KeyCode::Enter);
    assert!(tui.drill.is_some(), "Enter drills into the endpoint");
    let ds = tui
        .drill_downstream()
        .expect("the app's calls have children");
    // The endpoint learns its pattern after its first requests (those have rows of their
    // own): its row's own count is what the drill-down covers.
    let requests: u64 = app_row.cells[4].parse().unwrap();
    assert!(requests > made.len() as u64 / 2, "{:?}", app_row.cells);
    assert_eq!((ds.calls, ds.calls_with_children), (requests, requests));
    let of = |proto: &str| -> u64 {
        ds.rows
            .iter()
            .filter(|r| r.endpoint.starts_with(proto))
            .map(|r| r.calls)
            .sum()
    };
    assert_eq!(of("redis"), 2 * requests, "{:?}", ds.rows);
    assert_eq!(of("http"), requests, "{:?}", ds.rows);
    assert_eq!(ds.rows.iter().map(|r| r.calls).sum::<u64>(), 3 * requests);
    assert!(ds.self_ns <= ds.time_ns);
    let screen = draw(&mut term, &tui);
    assert!(
        screen.contains(&format!(
            "Time of its {requests} calls kept with calls downstream ({requests} in all): self "
        )),
        "{screen}"
    );
    assert!(
        screen.contains(&ds.rows[0].endpoint),
        "the endpoint taking most time is listed:\n{screen}"
    );
}

/// The terminal UI drawn on a test terminal, as text (a line per row).
fn draw(
    term: &mut ratatui::Terminal<ratatui::backend::TestBackend>,
    tui: &ebtop::tui::app::App,
) -> String {
    term.draw(|f| ebtop::tui::render::draw(f, tui)).unwrap();
    let buf = term.backend().buffer();
    let (w, h) = (buf.area.width, buf.area.height);
    (0..h)
        .map(|y| (0..w).map(|x| buf[(x, y)].symbol()).collect::<String>() + "\n")
        .collect()
}

/// nginx in front (the issue's chain): this test's clients → nginx (one process, an event
/// loop) → the threaded app → Redis, the backend and PostgreSQL (a simple query naming the
/// request), concurrent keep-alive clients. Each
/// app server call is a hop under nginx's upstream call for the same request; each nginx
/// server call under this test's call; the app's calls under the app's request (its log).
/// nginx's upstream calls are linked to the request they proxy, however many its worker has
/// open at once, by nginx's upstream record (src/bpf/ngxchain.h): all of them, no call under
/// a request it was not made for, ever; the recording replays into the same chains.
#[test]
fn nginx_in_front_hops_into_the_app_and_never_links_a_wrong_request() {
    require_root();
    let dir = std::env::temp_dir().join(format!("ebtop-chains-nginx-{}", std::process::id()));
    let (script, log) = app_dir(&dir);
    let redis_port = free_tcp_port();
    let _redis = redis_on(redis_port);
    let (app_port, backend_port, nginx_port) = (free_tcp_port(), free_tcp_port(), free_tcp_port());
    let ports = |mode: &str| {
        vec![
            app_port.to_string(),
            redis_port.to_string(),
            backend_port.to_string(),
            log.display().to_string(),
            mode.to_owned(),
        ]
    };
    let pg = common::postgres::PgServer::start();
    let _backend = python(&script, &ports("backend"));
    let mut app_args = ports("app");
    app_args.push(pg.port.to_string());
    let _app = python(&script, &app_args);
    let proxy = format!(
        "  upstream app {{ server 127.0.0.1:{app_port}; keepalive 16; }}
  server {{
    listen 127.0.0.1:{nginx_port};
    location / {{
      proxy_pass http://app;
      proxy_http_version 1.1;
      proxy_set_header Connection \"\";
    }}
  }}"
    );
    let _nginx = Peer(start_nginx_with(&dir, &proxy));
    wait_for_listener("127.0.0.1", redis_port, "redis-server");
    wait_for_listener("127.0.0.1", backend_port, "the backend");
    wait_for_listener("127.0.0.1", app_port, "the app");
    wait_for_listener("127.0.0.1", nginx_port, "nginx");

    let recording = dir.join("chains.ebtop");
    let ebtop = Ebtop::start(&[
        "--json",
        "-w",
        &recording.display().to_string(),
        "--port",
        &nginx_port.to_string(),
        "--port",
        &app_port.to_string(),
        "--port",
        &redis_port.to_string(),
        "--port",
        &backend_port.to_string(),
        "--port",
        &pg.port.to_string(),
    ]);
    drive_all(nginx_port);
    let lines = ebtop.stop();
    let summary = lines.last().unwrap();
    assert_eq!(summary["kernel"]["lost"], 0, "{summary}");
    let made = app_log(&log);
    assert!(
        made.values().all(|d| d.len() == 4),
        "each request made 4 calls"
    );

    let calls = calls(&lines);
    let by_id: HashMap<&str, &Value> = calls.iter().map(|c| (str_of(c, "id"), *c)).collect();
    let one = |side: &str, port: u16, resource: &str| -> &Value {
        let v: Vec<&Value> = calls
            .iter()
            .copied()
            .filter(|c| on_server_port(c, side, port) && str_of(c, "resource") == resource)
            .collect();
        assert_eq!(v.len(), 1, "{side} {resource} on {port}: {v:?}");
        v[0]
    };
    let (mut wrong, mut missing, mut proxied_linked) = (Vec::new(), Vec::new(), 0);
    for (rid, downstream) in &made {
        let path = format!("/req/{rid}");
        let driver = one("client", nginx_port, &path);
        let front = one("server", nginx_port, &path);
        let upstream = one("client", app_port, &path);
        let app = one("server", app_port, &path);
        if front["parent_id"] != driver["id"] {
            missing.push(format!("{path}: nginx's call not under the test's"));
        }
        if app["parent_id"] != upstream["id"] {
            missing.push(format!(
                "{path}: the app's call not under nginx's upstream call"
            ));
        }
        match upstream["parent_id"].as_str() {
            None => {}
            Some(p) if p == str_of(front, "id") => proxied_linked += 1,
            Some(p) => wrong.push(format!(
                "nginx's upstream {path} under {}",
                by_id.get(p).map_or("?", |c| str_of(c, "resource"))
            )),
        }
        for d in downstream {
            let port = if d.starts_with("/b/") {
                backend_port
            } else if d.starts_with("SELECT") {
                pg.port
            } else {
                redis_port
            };
            let client = one("client", port, d);
            match client["parent_id"].as_str() {
                Some(p) if p == str_of(app, "id") => {}
                Some(p) => wrong.push(format!(
                    "{d} under {} instead of {path}",
                    by_id.get(p).map_or("?", |c| str_of(c, "resource"))
                )),
                None => missing.push(format!("{d}: no parent")),
            }
            if one("server", port, d)["parent_id"] != client["id"] {
                missing.push(format!("{d}: its server call not under it"));
            }
        }
    }
    assert!(wrong.is_empty(), "calls under another request: {wrong:#?}");
    assert!(missing.is_empty(), "links not made: {missing:#?}");
    let chains = &summary["chains"];
    let n = (CLIENTS * PER_CLIENT) as u64;
    // Hops: test → nginx, nginx → app, app → Redis (2), the backend and PostgreSQL.
    assert_eq!(chains["hops"], 6 * n, "{chains}");
    assert_eq!(chains["hop_unmatched"], 0, "{chains}");
    assert_eq!(chains["hop_disproved"], 0, "{chains}");
    // The app's calls, and every nginx upstream call by its upstream record
    // (src/bpf/ngxchain.h), however many requests its worker had open.
    eprintln!("nginx upstream calls linked to their request: {proxied_linked} of {n}");
    assert_eq!(proxied_linked, n, "{chains}");
    assert_eq!(chains["proxy_linked"], n, "{chains}");
    assert_eq!(chains["proxy_unproved"], 0, "{chains}");
    assert_eq!(chains["linked"], 5 * n, "{chains}");
    assert_eq!(chains["ambiguous"], 0, "{chains}");

    // The recording (with nginx's upstream records) replays into the same chains.
    let chain_of = |c: &Value| {
        (
            str_of(c, "resource").to_owned(),
            c["side"].clone(),
            c["id"].clone(),
            c["parent_id"].clone(),
        )
    };
    let mut live: Vec<_> = calls.iter().map(|c| chain_of(c)).collect();
    let replayed = replay_json(&recording, &[]);
    let mut replay: Vec<_> = common::calls(&replayed).into_iter().map(chain_of).collect();
    live.sort_by_key(|k| format!("{k:?}"));
    replay.sort_by_key(|k| format!("{k:?}"));
    assert!(
        live == replay,
        "the replay's chains differ from the live run's"
    );
    assert_eq!(replayed.last().unwrap()["chains"]["proxy_linked"], n);
}

/// nginx with an HTTPS downstream (its plaintext from the TLS probes) proxying to an HTTP/1
/// backend, driven by concurrent curl processes (each a keep-alive connection of several
/// requests): every upstream call under the downstream request it proxies — the plaintext
/// stream of the downstream socket nginx's record names — none under another.
#[test]
fn nginx_over_https_links_each_upstream_call_under_its_downstream_request() {
    require_root();
    let dir = std::env::temp_dir().join(format!("ebtop-chains-nginx-tls-{}", std::process::id()));
    let (script, log) = app_dir(&dir);
    let (cert, key) = self_signed_cert(&dir);
    let (backend_port, nginx_port) = (free_tcp_port(), free_tcp_port());
    let args = vec![
        "0".to_owned(),
        "0".to_owned(),
        backend_port.to_string(),
        log.display().to_string(),
        "backend".to_owned(),
    ];
    let _backend = python(&script, &args);
    let proxy = format!(
        "  upstream backend {{ server 127.0.0.1:{backend_port}; keepalive 16; }}
  server {{
    listen 127.0.0.1:{nginx_port} ssl;
    ssl_certificate {};
    ssl_certificate_key {};
    location / {{
      proxy_pass http://backend;
      proxy_http_version 1.1;
      proxy_set_header Connection \"\";
    }}
  }}",
        cert.display(),
        key.display()
    );
    let _nginx = Peer(start_nginx_with(&dir, &proxy));
    wait_for_listener("127.0.0.1", backend_port, "the backend");
    wait_for_listener("127.0.0.1", nginx_port, "nginx");
    let ebtop = Ebtop::start(&[
        "--json",
        "--port",
        &nginx_port.to_string(),
        "--port",
        &backend_port.to_string(),
    ]);
    let (clients, per_client) = (4, 10);
    let curls: Vec<Child> = (0..clients)
        .map(|c| {
            // Each URL with its own `-o` (one connection, kept alive across them).
            let urls: Vec<String> = (0..per_client)
                .flat_map(|i| {
                    let url = format!("https://127.0.0.1:{nginx_port}/tls/{c}-{i}");
                    ["-o".to_owned(), "/dev/null".to_owned(), url]
                })
                .collect();
            Command::new("curl")
                .args(["-sk", "-w", "%{http_code}\\n"])
                .args(&urls)
                .stdout(Stdio::piped())
                .spawn()
                .expect("curl runs")
        })
        .collect();
    for c in curls {
        let out = c.wait_with_output().unwrap();
        let codes = String::from_utf8_lossy(&out.stdout);
        assert_eq!(
            codes.lines().filter(|l| *l == "200").count(),
            per_client,
            "curl: {codes}"
        );
    }
    let lines = ebtop.stop();
    let summary = lines.last().unwrap();
    assert_eq!(summary["kernel"]["lost"], 0, "{summary}");
    let calls = calls(&lines);
    let n = (clients * per_client) as u64;
    let mut wrong = Vec::new();
    let mut linked = 0;
    for c in 0..clients {
        for i in 0..per_client {
            let path = format!("/tls/{c}-{i}");
            let of = |side: &str, port: u16| -> Vec<&Value> {
                calls
                    .iter()
                    .copied()
                    .filter(|v| on_server_port(v, side, port) && str_of(v, "resource") == path)
                    .collect()
            };
            let (front, upstream) = (of("server", nginx_port), of("client", backend_port));
            assert_eq!((front.len(), upstream.len()), (1, 1), "{path}");
            match upstream[0]["parent_id"].as_str() {
                Some(p) if p == str_of(front[0], "id") => linked += 1,
                Some(p) => wrong.push(format!("{path} under {p}")),
                None => {}
            }
        }
    }
    assert!(
        wrong.is_empty(),
        "upstream calls under another request: {wrong:?}"
    );
    let chains = &summary["chains"];
    assert_eq!(linked, n, "{chains}");
    assert_eq!(chains["proxy_linked"], n, "{chains}");
    assert_eq!(chains["proxy_unproved"], 0, "{chains}");
}

/// nginx with an HTTP/2 downstream (h2c, driven by h2load: many streams open at once on one
/// connection) proxying to an HTTP/1 backend: which stream an upstream request is for is not
/// in the downstream connection's bytes as ebtop follows them (no HTTP/1 request open there),
/// so nginx's upstream records link nothing (`proxy_unproved`, one per request), never a
/// wrong request; the hop from nginx's upstream call into the backend stands.
#[test]
fn nginx_with_an_http2_downstream_links_no_upstream_call_and_counts_them() {
    require_root();
    let dir = std::env::temp_dir().join(format!("ebtop-chains-nginx-h2-{}", std::process::id()));
    let (script, log) = app_dir(&dir);
    let (backend_port, nginx_port) = (free_tcp_port(), free_tcp_port());
    let args = vec![
        "0".to_owned(),
        "0".to_owned(),
        backend_port.to_string(),
        log.display().to_string(),
        "backend".to_owned(),
    ];
    let _backend = python(&script, &args);
    let proxy = format!(
        "  upstream backend {{ server 127.0.0.1:{backend_port}; keepalive 16; }}
  server {{
    listen 127.0.0.1:{nginx_port} http2;
    location / {{
      proxy_pass http://backend;
      proxy_http_version 1.1;
      proxy_set_header Connection \"\";
    }}
  }}"
    );
    let _nginx = Peer(start_nginx_with(&dir, &proxy));
    wait_for_listener("127.0.0.1", backend_port, "the backend");
    wait_for_listener("127.0.0.1", nginx_port, "nginx");
    let ebtop = Ebtop::start(&[
        "--json",
        "--port",
        &nginx_port.to_string(),
        "--port",
        &backend_port.to_string(),
    ]);
    let n: u64 = 60;
    let out = Command::new("h2load")
        .args(["-n", &n.to_string(), "-c", "2", "-m", "8"])
        .arg(format!("http://127.0.0.1:{nginx_port}/h2"))
        .output()
        .expect("h2load runs (nghttp2-client)");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains(&format!("{n} succeeded")),
        "h2load: every request succeeded: {text}"
    );
    let lines = ebtop.stop();
    let summary = lines.last().unwrap();
    assert_eq!(summary["kernel"]["lost"], 0, "{summary}");
    let upstream: Vec<&Value> = calls(&lines)
        .into_iter()
        .filter(|c| on_server_port(c, "client", backend_port))
        .collect();
    assert_eq!(upstream.len() as u64, n, "nginx's upstream calls");
    let unlinked = upstream.iter().filter(|c| c["parent_id"].is_null()).count();
    assert_eq!(
        unlinked as u64, n,
        "no upstream call under a downstream request"
    );
    let chains = &summary["chains"];
    assert_eq!(chains["proxy_unproved"], n, "{chains}");
    assert_eq!(chains["proxy_linked"], 0, "{chains}");
    assert_eq!(chains["linked"], 0, "{chains}");
    // Each backend server call under nginx's upstream call that reached it.
    let backend_hops = calls(&lines)
        .into_iter()
        .filter(|c| on_server_port(c, "server", backend_port))
        .filter(|c| {
            upstream
                .iter()
                .any(|u| u["id"] == c["parent_id"] && !u["id"].is_null())
        })
        .count();
    assert_eq!(backend_hops as u64, n, "{chains}");
}

/// The Go toolchain: `go` on PATH, else where Go's tarball or Debian puts it.
fn go_tool() -> std::path::PathBuf {
    let on_path: Vec<std::path::PathBuf> = std::env::var_os("PATH")
        .map(|p| std::env::split_paths(&p).map(|d| d.join("go")).collect())
        .unwrap_or_default();
    on_path
        .into_iter()
        .chain(["/usr/local/go/bin/go", "/usr/lib/go/bin/go"].map(std::path::PathBuf::from))
        .find(|p| p.is_file())
        .expect("a Go toolchain (go ≥ 1.18) is installed (scripts/deps installs it)")
}

/// tests/fixtures/chains/go built into `dir` (Go's build cache under target/tmp).
fn go_app(dir: &std::path::Path) -> std::path::PathBuf {
    let tmp = std::path::Path::new(env!("CARGO_TARGET_TMPDIR"));
    let src = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/chains/go");
    let bin = dir.join("gochains");
    let go = go_tool();
    let out = Command::new(&go)
        .current_dir(&src)
        .args(["build", "-buildvcs=false", "-o"])
        .arg(&bin)
        .arg(".")
        .env("GOTOOLCHAIN", "local")
        .env("GOFLAGS", "-mod=mod")
        .env("GOCACHE", tmp.join("go-cache"))
        .env("GOPATH", tmp.join("go-path"))
        .env("CGO_ENABLED", "0")
        .output()
        .unwrap_or_else(|e| panic!("{} runs: {e}", go.display()));
    assert!(
        out.status.success(),
        "go build of {}: {}",
        src.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    bin
}

/// Goroutines the Go app's handler starts for each request (each a Redis GET), besides one
/// that calls the backend.
const FANOUT: usize = 3;

/// A Go net/http app (many requests in flight: CLIENTS keep-alive clients) whose handler
/// makes two Redis GETs in its own goroutine, FANOUT from goroutines it starts (plain `go
/// func` with a WaitGroup; the first starts one more, nested), and two calls to a Go backend
/// through net/http's client (whose requests its Transport's writeLoop goroutines write, on
/// keep-alive connections every request's goroutines take turns on — goroutines a request
/// started, that must never serve it): one from its own goroutine, one from a goroutine it
/// started, at the same time; and a goroutine it started makes a Redis GET after the
/// response went out. Ground truth: the app's log, per request id, of the calls it made and
/// which goroutine made them. Every call made while the request was open, by its goroutine or
/// one it started (src/bpf/gospawn.h), the HTTP client's included (through the roundTrip that
/// asked for them: src/bpf/gohttp.h; on connections opened before ebtop started too), must
/// sit under its request's server call, all of them; the late one is linked to no request and
/// counted; a call under another request is a failure. Every hop (test → app, app → Redis,
/// app → backend) is linked, and the replay links the same.
#[test]
fn a_go_services_goroutines_link_their_own_calls_to_their_request_and_no_other() {
    go_app_chains(false);
}

/// The same over HTTPS (Go's crypto/tls, read by ebtop's uprobes: the plaintext's records name
/// their goroutine from the uprobe's registers), driven by curl (HTTP/1.1 keep-alive, through
/// OpenSSL's probes); the app calls the backend over HTTPS/1.1 too (net/http's writeLoop
/// writes through crypto/tls).
#[test]
fn a_go_https_services_goroutines_link_their_own_calls_to_their_request() {
    go_app_chains(true);
}

/// The lines of `path` once it has `n` (the app writes them; 60 s at most).
fn wait_for_lines(path: &std::path::Path, n: usize) -> Vec<String> {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    loop {
        let lines: Vec<String> = std::fs::read_to_string(path)
            .unwrap_or_default()
            .lines()
            .map(str::to_owned)
            .collect();
        if lines.len() >= n {
            return lines;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "{}: {} lines of {n}",
            path.display(),
            lines.len()
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
}

/// CLIENTS curl processes at once, each making PER_CLIENT HTTPS requests on one connection.
fn drive_all_tls(port: u16) {
    let clients: Vec<_> = (0..CLIENTS)
        .map(|c| {
            let mut cmd = Command::new("curl");
            cmd.args(["--http1.1", "-sk", "-w", "%{http_code}\\n"]);
            for i in 0..PER_CLIENT {
                cmd.arg(format!("https://127.0.0.1:{port}/req/{c}-{i}"));
                cmd.args(["-o", "/dev/null"]);
            }
            cmd.stdout(Stdio::piped()).spawn().expect("curl runs")
        })
        .collect();
    for c in clients {
        let out = c.wait_with_output().unwrap();
        let codes = String::from_utf8_lossy(&out.stdout).into_owned();
        assert_eq!(codes, "200\n".repeat(PER_CLIENT), "curl: {out:?}");
    }
}

fn go_app_chains(tls: bool) {
    require_root();
    let name = if tls { "go-tls" } else { "go" };
    let dir = std::env::temp_dir().join(format!("ebtop-chains-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let bin = go_app(&dir);
    let log = dir.join("app.log");
    let redis_port = free_tcp_port();
    let _redis = redis_on(redis_port);
    let (app_port, backend_port) = (free_tcp_port(), free_tcp_port());
    let tls_files: Vec<(&str, std::path::PathBuf)> = if tls {
        let (cert, key) = self_signed_cert(&dir);
        vec![("GOCHAINS_CERT", cert), ("GOCHAINS_KEY", key)]
    } else {
        Vec::new()
    };
    let go = |mode: &str| {
        Killed(
            Command::new(&bin)
                .args([mode, &app_port.to_string(), &redis_port.to_string()])
                .args([&backend_port.to_string(), &log.display().to_string()])
                .arg(FANOUT.to_string())
                .envs(tls_files.iter().map(|(k, v)| (*k, v.as_os_str())))
                .stdout(Stdio::null())
                .spawn()
                .expect("the Go app runs"),
        )
    };
    // The backend takes its port as the app's (its first argument).
    let _backend = Killed(
        Command::new(&bin)
            .args(["backend", &backend_port.to_string()])
            .envs(tls_files.iter().map(|(k, v)| (*k, v.as_os_str())))
            .spawn()
            .expect("the Go backend runs"),
    );
    let _app = go("app");
    wait_for_listener("127.0.0.1", redis_port, "redis-server");
    wait_for_listener("127.0.0.1", backend_port, "the backend");
    wait_for_listener("127.0.0.1", app_port, "the app");

    let late_log = log.with_extension("log.late");
    // Before ebtop, a request whose backend calls open two of the app's client connections:
    // requests of the session reuse connections whose writeLoop began before ebtop (their
    // writer is learned at its writes). Its log line is cleared. Not over TLS: the first
    // exchange of a Go TLS connection opened before ebtop is not captured (its plaintext
    // goes out before ebtop knows the socket is TLS), whoever wrote it.
    if !tls {
        let warm = Command::new("curl")
            .args(["-s", "-o", "/dev/null", "-w", "%{http_code}"])
            .arg(format!("http://127.0.0.1:{app_port}/req/warm"))
            .output()
            .expect("curl runs");
        assert_eq!(String::from_utf8_lossy(&warm.stdout), "200", "{warm:?}");
        // Its late call is made once its response is out: waited for, then cleared too.
        wait_for_lines(&late_log, 1);
        for l in [&log, &late_log] {
            std::fs::OpenOptions::new()
                .write(true)
                .open(l)
                .and_then(|f| f.set_len(0))
                .expect("the app's log cleared");
        }
    }

    let recording = dir.join("chains.ebtop");
    let mut ebtop = Ebtop::start(&[
        "--json",
        "-w",
        &recording.display().to_string(),
        "--port",
        &app_port.to_string(),
        "--port",
        &redis_port.to_string(),
        "--port",
        &backend_port.to_string(),
    ]);
    // The Go programs' net/http client probes were placed before any request (`start` waits
    // for the lookout's look at the running processes): a connection whose writeLoop began
    // before them writes for no asker ebtop knows.
    let tls_line = tls_start(&ebtop.collected).clone();
    let probed = tls_line["tls_probed"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    assert!(
        probed
            .iter()
            .any(|f| f.as_str().is_some_and(|f| f.ends_with(" [go+http]"))),
        "the Go app's net/http client probed: {tls_line}"
    );
    if tls {
        // curl's libssl probed before it runs.
        ebtop.installed_scanned();
        drive_all_tls(app_port);
    } else {
        drive_all(app_port);
    }
    // Every request's late call made (after its response, so maybe after the clients end).
    let late = wait_for_lines(&late_log, CLIENTS * PER_CLIENT);
    assert!(late.iter().all(|l| l.ends_with(" <nil>")), "{late:?}");
    let lines = ebtop.stop();
    let summary = lines.last().unwrap();
    assert_eq!(summary["kernel"]["lost"], 0, "{summary}");
    let made = app_log(&log);
    assert!(made.values().all(|d| d.len() == FANOUT + 5), "{made:?}");

    let calls = calls(&lines);
    let by_id: HashMap<&str, &Value> = calls.iter().map(|c| (str_of(c, "id"), *c)).collect();
    assert_eq!(by_id.len(), calls.len(), "ids are unique");
    let one = |side: &str, port: u16, resource: &str| -> &Value {
        let v: Vec<&Value> = calls
            .iter()
            .copied()
            .filter(|c| on_server_port(c, side, port) && str_of(c, "resource") == resource)
            .collect();
        assert_eq!(v.len(), 1, "{side} {resource} on {port}: {v:?}");
        v[0]
    };
    let (mut wrong, mut missing) = (Vec::new(), Vec::new());
    let n = made.len() as u64;
    for (rid, downstream) in &made {
        let path = format!("/req/{rid}");
        let app = one("server", app_port, &path);
        if app["parent_id"] != one("client", app_port, &path)["id"] {
            missing.push(format!("{path}: the app's call not under the test's"));
        }
        for d in downstream {
            let (by, what) = d.split_once(':').unwrap();
            let port = if by == "B" || by == "G" {
                backend_port
            } else {
                redis_port
            };
            let client = one("client", port, what);
            // D and B: the handler's goroutine; F, N and G: goroutines it started.
            match client["parent_id"].as_str() {
                Some(p) if p == str_of(app, "id") => {}
                None => missing.push(format!("{by} {what}: no parent")),
                Some(p) => wrong.push(format!(
                    "{by} {what} under {}",
                    by_id.get(p).map_or("?", |c| str_of(c, "resource"))
                )),
            }
            if one("server", port, what)["parent_id"] != client["id"] {
                missing.push(format!("{what}: its server call not under it"));
            }
            if rid == "0-0" && !tls {
                assert_eq!(client["trace_id"], TRACE_ID, "{what}: {client}");
            }
        }
        // The late call: its request's response went out before it.
        let what = format!("rid:{rid}:late");
        let client = one("client", redis_port, &what);
        if let Some(p) = client["parent_id"].as_str() {
            wrong.push(format!(
                "{what} (after its request) under {}",
                by_id.get(p).map_or("?", |c| str_of(c, "resource"))
            ));
        }
        if one("server", redis_port, &what)["parent_id"] != client["id"] {
            missing.push(format!("{what}: its server call not under it"));
        }
    }
    assert!(wrong.is_empty(), "calls under another request: {wrong:#?}");
    assert!(missing.is_empty(), "links not made: {missing:#?}");
    let chains = &summary["chains"];
    eprintln!("Go app's chains: {chains}");
    // Per request: D ×2, B, F ×FANOUT, N, G.
    let linked = (FANOUT as u64 + 5) * n;
    assert_eq!(chains["linked"], linked, "{chains}");
    assert_eq!(chains["goroutine_linked"], linked, "{chains}");
    assert_eq!(chains["spawn_linked"], (FANOUT as u64 + 2) * n, "{chains}");
    assert_eq!(chains["http_client_linked"], 2 * n, "B and G: {chains}");
    assert_eq!(chains["http_unproved"], 0, "{chains}");
    assert_eq!(chains["goroutine_unlinked"], n, "the late calls: {chains}");
    assert_eq!(chains["spawn_after_parent"], n, "{chains}");
    assert_eq!(chains["spawn_unknown"], 0, "{chains}");
    assert_eq!(chains["goroutine_unknown"], 0, "no cgo: {chains}");
    assert_eq!(chains["ambiguous"], 0, "{chains}");
    assert_eq!(chains["unconfirmed"], 0, "{chains}");
    // Hops: test → app, app → Redis (2 + FANOUT + nested + late), app → backend (2).
    assert_eq!(chains["hops"], (FANOUT as u64 + 7) * n, "{chains}");

    // The recording (its records name their goroutines) replays into the same chains.
    let chain_of = |c: &Value| {
        (
            str_of(c, "resource").to_owned(),
            c["side"].clone(),
            c["id"].clone(),
            c["parent_id"].clone(),
            c["trace_id"].clone(),
        )
    };
    let mut live: Vec<_> = calls.iter().map(|c| chain_of(c)).collect();
    let mut replay: Vec<_> = replay_json(&recording, &[])
        .iter()
        .filter(|v| v["type"] == "call")
        .map(chain_of)
        .collect();
    live.sort_by_key(|k| format!("{k:?}"));
    replay.sort_by_key(|k| format!("{k:?}"));
    assert!(
        live == replay,
        "the replay's chains differ from the live run's"
    );
}
