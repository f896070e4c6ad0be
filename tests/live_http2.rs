//! Live capture of HTTP/2 and gRPC: nghttpd (h2c) with h2load and curl, and a Python grpcio
//! server and client (src/protocols/http2/fixtures/grpc_peers.py), all started by the test on free
//! ports, compared with what the peers report. Needs root, nghttpd/h2load (nghttp2-server,
//! nghttp2-client) and Python's grpcio (scripts/deps installs them).

mod common;

use std::io::{BufRead, BufReader, Write};
use std::path::PathBuf;
use std::process::{Command, Stdio};

use common::*;
use serde_json::Value;

const SERVICE: &str = "/ebtop.test.Echo";

/// nghttpd --no-tls serving a directory with `index.html` ("hello\n", 6 bytes).
fn nghttpd() -> (Peer, u16, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("index.html"), "hello\n").unwrap();
    let port = free_tcp_port();
    let child = Command::new("nghttpd")
        .args(["--no-tls", "-d"])
        .arg(dir.path())
        .arg(port.to_string())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("nghttpd is installed (scripts/deps: nghttp2-server)");
    let peer = Peer(child);
    wait_for_listener("127.0.0.1", port, "nghttpd");
    (peer, port, dir)
}

fn grpc_peers() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("src/protocols/http2/fixtures/grpc_peers.py")
}

/// The Python grpcio server of grpc_peers.py on a free port.
fn grpc_server() -> (Peer, u16) {
    python_server(
        &[grpc_peers().to_str().unwrap(), "server"],
        "the gRPC server starts (scripts/deps: pip install grpcio)",
    )
}

/// A Python server (`args`, then a free port) started once it printed "ready".
fn python_server(args: &[&str], what: &str) -> (Peer, u16) {
    let port = free_tcp_port();
    let mut child = Command::new("python3")
        .args(args)
        .arg(port.to_string())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("python3 runs");
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    assert_eq!(line.trim(), "ready", "{what}");
    (Peer(child), port)
}

fn of<'a>(calls: &'a [&'a Value], side: &str) -> Vec<&'a Value> {
    calls
        .iter()
        .copied()
        .filter(|c| c["side"] == side)
        .collect()
}

/// h2load: 2000 requests on 4 connections, 16 streams at a time; exactly 2000 calls on each
/// side, every one `GET /index.html` 200 with its 6 bytes.
/// Runs grpc_peers.py with `args`: a client that opens its channel, says `ready`, waits for a
/// line on stdin, then makes its calls and prints one line. ebtop (`--port port`) starts
/// between the two, so the channel predates it. Returns ebtop, still running, and the
/// client's last line (the client exited successfully).
fn on_a_channel_opened_before_ebtop(args: &[&str], port: &str) -> (Ebtop, String) {
    let mut client = Command::new("python3")
        .arg(grpc_peers())
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut out = BufReader::new(client.stdout.take().unwrap());
    let mut line = String::new();
    out.read_line(&mut line).unwrap();
    assert_eq!(line.trim(), "ready");
    let ebtop = Ebtop::start(&["--json", "--port", port]);
    writeln!(client.stdin.take().unwrap()).unwrap();
    line.clear();
    out.read_line(&mut line).unwrap();
    assert!(client.wait().unwrap().success());
    (ebtop, line)
}

/// The response bytes h2load received on its requests' streams, from its `traffic:` line:
/// HEADERS payload (`headers`) and DATA payload (`data`), plus a 9-byte frame header for each
/// response's one HEADERS and one DATA frame (bodies of a few bytes: one frame each).
fn h2load_response_wire_bytes(report: &str, requests: u64) -> u64 {
    let line = report
        .lines()
        .find(|l| l.starts_with("traffic:"))
        .unwrap_or_else(|| panic!("a traffic line in {report}"));
    // "traffic: 874B (874) total, 366B (366) headers (space savings 89.48%), 100B (100) data"
    let figure = |what: &str| -> u64 {
        let at = line
            .find(what)
            .unwrap_or_else(|| panic!("{what} in {line}"));
        let open = line[..at].rfind('(').unwrap();
        let close = open + line[open..].find(')').unwrap();
        line[open + 1..close].parse().unwrap()
    };
    figure(") headers") + figure(") data") + 2 * 9 * requests
}

#[test]
fn h2load_2000_requests_are_2000_calls_per_side() {
    require_root();
    let (_server, port, _dir) = nghttpd();
    let p = port.to_string();
    let ebtop = Ebtop::start(&["--json", "--port", &p, "--proto", "http2"]);
    let out = Command::new("h2load")
        .args(["-n", "2000", "-c", "4", "-m", "16"])
        .arg(format!("http://127.0.0.1:{port}/index.html"))
        .output()
        .expect("h2load is installed (scripts/deps: nghttp2-client)");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && text.contains("2000 succeeded"),
        "{text}"
    );
    let lines = ebtop.stop();
    let calls = calls(&lines);
    for side in ["client", "server"] {
        let side_calls = of(&calls, side);
        assert_eq!(side_calls.len(), 2000, "{side}");
        for c in &side_calls {
            assert_eq!(
                (&c["proto"], &c["method"], &c["resource"], &c["status"]),
                (
                    &Value::from("http2"),
                    &Value::from("GET"),
                    &Value::from("/index.html"),
                    &Value::from(200)
                ),
                "{c}"
            );
            // A HEADERS frame (9 + at least 1) and a DATA frame of 9 + 6.
            assert!(c["resp_bytes"].as_u64().unwrap() >= 10 + 15, "{c}");
        }
        // The stream's frames on the wire, as h2load counted what it received.
        let total: u64 = side_calls
            .iter()
            .map(|c| c["resp_bytes"].as_u64().unwrap())
            .sum();
        assert_eq!(total, h2load_response_wire_bytes(&text, 2000), "{side}");
    }
    let summary = lines.last().unwrap();
    assert_clean_summary(summary);
    assert_eq!(summary["parse"]["partial_headers"], 0, "{summary}");
    assert_eq!(summary["parse"]["unanswered_requests"], 0, "{summary}");
    // Both ends are on this host: every stream is one hop (issue 50), 16 open at once.
    assert_eq!(assert_every_call_a_hop(&lines, port), 2000);
}

/// curl with prior knowledge: a page and a missing one (404, the client's error), one
/// connection each.
#[test]
fn curl_prior_knowledge_get_and_404() {
    require_root();
    let (_server, port, _dir) = nghttpd();
    let p = port.to_string();
    let ebtop = Ebtop::start(&["--json", "--port", &p]);
    for (path, code) in [("/index.html", "200"), ("/missing", "404")] {
        let out = Command::new("curl")
            .args(["-s", "--http2-prior-knowledge", "-o", "/dev/null"])
            .args(["-w", "%{http_code}"])
            .arg(format!("http://127.0.0.1:{port}{path}"))
            .output()
            .unwrap();
        assert_eq!(String::from_utf8_lossy(&out.stdout), code);
    }
    let lines = ebtop.stop();
    let calls = calls(&lines);
    for side in ["client", "server"] {
        let got: Vec<(String, u64, String)> = of(&calls, side)
            .iter()
            .map(|c| {
                (
                    c["resource"].as_str().unwrap().to_owned(),
                    c["status"].as_u64().unwrap(),
                    c["outcome"].as_str().unwrap().to_owned(),
                )
            })
            .collect();
        assert_eq!(
            got,
            vec![
                ("/index.html".to_owned(), 200, "ok".to_owned()),
                ("/missing".to_owned(), 404, "client_error".to_owned())
            ],
            "{side}"
        );
        assert!(of(&calls, side).iter().all(|c| c["proto"] == "http2"));
    }
    assert_clean_summary(lines.last().unwrap());
}

/// nghttp -v prints every frame it sends and receives: each call's `req_bytes` and
/// `resp_bytes` are its stream's HEADERS, CONTINUATION and non-empty DATA frames with their 9-byte
/// headers, as the client put them on the wire and got them (a POST body, a page, a 404), the
/// same on both sides — an HTTP/2 message's bytes as HTTP/1 counts its head and body.
#[test]
fn bytes_are_the_streams_frames_as_nghttp_saw_them() {
    require_root();
    let (_server, port, dir) = nghttpd();
    let body = dir.path().join("post.txt");
    std::fs::write(&body, "x".repeat(30_000)).unwrap();
    let p = port.to_string();
    let ebtop = Ebtop::start(&["--json", "--port", &p]);
    let base = format!("http://127.0.0.1:{port}");
    let out = Command::new("nghttp")
        .args(["-v", "-n"])
        .arg(format!("{base}/index.html"))
        .arg(format!("{base}/missing"))
        .output()
        .expect("nghttp is installed (scripts/deps: nghttp2-client)");
    assert!(out.status.success());
    let mut log = String::from_utf8_lossy(&out.stdout).into_owned();
    let out = Command::new("nghttp")
        .args(["-v", "-n", "-d"])
        .arg(&body)
        .arg(format!("{base}/index.html"))
        .output()
        .unwrap();
    assert!(out.status.success());
    log.push_str("\n--- next connection\n");
    log.push_str(&String::from_utf8_lossy(&out.stdout));
    // (path, request wire bytes, response wire bytes) per stream, from the frames printed.
    let mut streams: Vec<(String, u64, u64)> = Vec::new();
    let mut of_id: std::collections::HashMap<u64, usize> = Default::default();
    let mut opened: Option<usize> = None;
    for line in log.lines() {
        if line.starts_with("--- next connection") {
            of_id.clear();
            continue;
        }
        if let Some(path) = line.trim().strip_prefix(":path: ") {
            if let Some(i) = opened.take() {
                streams[i].0 = path.to_owned();
            }
            continue;
        }
        let Some(at) = line.find(" frame <length=") else {
            continue;
        };
        let words: Vec<&str> = line[..at].split_whitespace().collect();
        let (dir, ty) = (words[words.len() - 2], words[words.len() - 1]);
        let rest = &line[at + " frame <length=".len()..];
        let len: u64 = rest[..rest.find(',').unwrap()].parse().unwrap();
        let id: u64 = rest[rest.find("stream_id=").unwrap() + 10..rest.find('>').unwrap()]
            .parse()
            .unwrap();
        // An empty DATA frame (one that only ends its side) is not counted.
        if id == 0
            || !["HEADERS", "CONTINUATION", "DATA"].contains(&ty)
            || (ty == "DATA" && len == 0)
        {
            continue;
        }
        let i = *of_id.entry(id).or_insert_with(|| {
            streams.push((String::new(), 0, 0));
            streams.len() - 1
        });
        if dir == "send" {
            if ty == "HEADERS" && streams[i].1 == 0 {
                opened = Some(i);
            }
            streams[i].1 += 9 + len;
        } else {
            streams[i].2 += 9 + len;
        }
    }
    streams.sort();
    assert_eq!(streams.len(), 3, "{log}");
    assert!(
        streams.iter().any(|s| s.0 == "/index.html" && s.1 > 30_000),
        "{streams:?}"
    );
    let lines = ebtop.stop();
    let calls = calls(&lines);
    for side in ["client", "server"] {
        let mut got: Vec<(String, u64, u64)> = of(&calls, side)
            .iter()
            .map(|c| {
                (
                    c["resource"].as_str().unwrap().to_owned(),
                    c["req_bytes"].as_u64().unwrap(),
                    c["resp_bytes"].as_u64().unwrap(),
                )
            })
            .collect();
        got.sort();
        assert_eq!(got, streams, "{side}");
    }
    assert_clean_summary(lines.last().unwrap());
}

/// `curl --http2` to a server that accepts `Upgrade: h2c` (src/protocols/http2/fixtures/
/// h2c_upgrade_server.py, Python's `h2`): the HTTP/1.1 request that asks for the upgrade is
/// answered on HTTP/2 stream 1 and the next URLs go as HTTP/2 streams on the same
/// connection. Every URL is exactly one `http2` call on each side, with its path and status
/// (the 101 is no call of its own), and nothing is lost or unparsed.
#[test]
fn curl_upgrade_to_h2c_is_handed_to_http2_exactly() {
    require_root();
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("src/protocols/http2/fixtures/h2c_upgrade_server.py");
    let (_server, port) = python_server(
        &[script.to_str().unwrap()],
        "the h2c server starts (scripts/deps: pip install h2)",
    );
    let p = port.to_string();
    let ebtop = Ebtop::start(&["--json", "--port", &p]);
    let paths = ["/first", "/second", "/status/404", "/third"];
    let mut curl = Command::new("curl");
    curl.args(["-s", "--http2", "-w", "%{http_code} %{http_version}\\n"]);
    for path in paths {
        curl.args(["-o", "/dev/null"])
            .arg(format!("http://127.0.0.1:{port}{path}"));
    }
    let out = curl.output().unwrap();
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "200 2\n200 2\n404 2\n200 2\n",
        "curl upgraded to HTTP/2"
    );
    let lines = ebtop.stop();
    let calls = calls(&lines);
    for side in ["client", "server"] {
        let got: Vec<(&str, &str, u64)> = of(&calls, side)
            .iter()
            .map(|c| {
                (
                    c["proto"].as_str().unwrap(),
                    c["resource"].as_str().unwrap(),
                    c["status"].as_u64().unwrap(),
                )
            })
            .collect();
        assert_eq!(
            got,
            [
                ("http2", "/first", 200),
                ("http2", "/second", 200),
                ("http2", "/status/404", 404),
                ("http2", "/third", 200)
            ],
            "{side}"
        );
        // The bodies, "path=<path>\n", in a DATA frame after a HEADERS frame.
        let first = of(&calls, side)[0];
        let least = 9 + 1 + 9 + "path=/first\n".len() as u64;
        assert!(first["resp_bytes"].as_u64().unwrap() >= least, "{first}");
    }
    let summary = lines.last().unwrap();
    assert_clean_summary(summary);
    assert_eq!(summary["parse"]["unparsed_bytes"], 0, "{summary}");
}

/// gRPC: 50 unary calls, a server stream of 7 messages, a bidi call of 9 each way and one
/// NOT_FOUND, on one channel: method names, statuses and message counts exact on both sides;
/// `--proto grpc` keeps only them.
#[test]
fn grpc_unary_streams_and_not_found_exact_on_both_sides() {
    require_root();
    let (_server, port) = grpc_server();
    let p = port.to_string();
    let ebtop = Ebtop::start(&["--json", "--port", &p, "--proto", "grpc"]);
    let out = Command::new("python3")
        .arg(grpc_peers())
        .args(["client", &p, "50", "7", "9"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let lines = ebtop.stop();
    let calls = calls(&lines);
    for side in ["client", "server"] {
        let side_calls = of(&calls, side);
        assert!(side_calls.iter().all(|c| c["proto"] == "grpc"), "{side}");
        let rows: Vec<(String, String, String, String, String)> = side_calls
            .iter()
            .map(|c| {
                let s = |k: &str| c[k].as_str().unwrap_or("-").to_owned();
                (
                    s("resource"),
                    s("status_text"),
                    s("req_messages"),
                    s("resp_messages"),
                    s("outcome"),
                )
            })
            .collect();
        let row = |m: &str, st: &str, a: &str, b: &str, o: &str| {
            (
                format!("{SERVICE}/{m}"),
                st.to_owned(),
                a.to_owned(),
                b.to_owned(),
                o.to_owned(),
            )
        };
        let mut want = vec![row("Unary", "OK", "1", "1", "ok"); 50];
        want.push(row("ServerStream", "OK", "1", "7", "ok"));
        want.push(row("Bidi", "OK", "9", "9", "ok"));
        want.push(row("Missing", "NOT_FOUND", "1", "0", "client_error"));
        assert_eq!(rows, want, "{side}");
        let missing = side_calls.last().unwrap();
        assert_eq!(missing["grpc_message"], "no such item", "{missing}");
        assert_eq!(missing["grpc_status"], "5", "{missing}");
    }
    assert_clean_summary(lines.last().unwrap());
    // Both ends are on this host: every call is one hop (issue 50).
    assert_eq!(assert_every_call_a_hop(&lines, port), 53);
}

/// A gRPC channel connected (and its header tables filled) before ebtop started: no call is
/// invented, each stream after the start is one call, the connection is counted as partially
/// decodable, and a method first named after the start (a literal in HPACK) is read exactly,
/// again on its later calls (the entry it added is known).
#[test]
fn a_connection_open_before_ebtop_is_partial_never_invented() {
    require_root();
    let (_server, port) = grpc_server();
    let p = port.to_string();
    let (ebtop, line) = on_a_channel_opened_before_ebtop(&["pickup", &p, "20", "10", "5", "3"], &p);
    assert_eq!(line.trim(), "done");
    let lines = ebtop.stop();
    let calls = calls(&lines);
    for side in ["client", "server"] {
        let side_calls = of(&calls, side);
        // 10 unary calls and 5 streams after the start, each once.
        assert_eq!(side_calls.len(), 15, "{side}: {side_calls:?}");
        for c in &side_calls {
            let r = c["resource"].as_str().unwrap();
            assert!(
                r == "?"
                    || r == format!("{SERVICE}/Unary")
                    || r == format!("{SERVICE}/ServerStream"),
                "{c}"
            );
        }
        let streams = side_calls
            .iter()
            .filter(|c| c["resource"] == format!("{SERVICE}/ServerStream"))
            .count();
        assert_eq!(streams, 5, "{side}");
    }
    let summary = lines.last().unwrap();
    // Both sockets of the connection (client's and server's) picked up mid-way.
    assert_eq!(summary["parse"]["partial_headers"], 2, "{summary}");
    assert_eq!(summary["parse"]["damaged_messages"], 0, "{summary}");
}

/// Issue 43: on a gRPC channel opened before ebtop every call was `http2 POST ? 200 ok`
/// whatever it returned. grpcio indexes each `grpc-status` it sends in HPACK: a status first
/// sent after the start is a literal, decoded exactly; one indexed before the start cannot be
/// known and is `unknown` — never `ok`. Compared with the codes the client got.
#[test]
fn grpc_status_on_a_channel_opened_before_ebtop_is_exact_or_unknown() {
    require_root();
    let (_server, port) = grpc_server();
    let p = port.to_string();
    // primed: NOT_FOUND and INTERNAL were sent (and indexed) before ebtop started too.
    for primed in ["0", "1"] {
        let (ebtop, line) = on_a_channel_opened_before_ebtop(&["pickup-mix", &p, "40", primed], &p);
        let got: Value = serde_json::from_str(&line).unwrap();
        assert_eq!(got["OK"], 20, "{got}");
        assert_eq!(got["NOT_FOUND"], 10, "{got}");
        assert_eq!(got["INTERNAL"], 10, "{got}");
        let lines = ebtop.stop();
        let calls = calls(&lines);
        for side in ["client", "server"] {
            let side_calls = of(&calls, side);
            assert_eq!(
                side_calls.len(),
                40,
                "primed {primed}, {side}: {side_calls:?}"
            );
            let count = |f: &dyn Fn(&Value) -> bool| side_calls.iter().filter(|c| f(c)).count();
            let status = |name: &'static str| move |c: &Value| c["status_text"] == name;
            let (ok, not_found, internal) = (
                count(&status("OK")),
                count(&status("NOT_FOUND")),
                count(&status("INTERNAL")),
            );
            let unknown = count(&|c| c["outcome"] == "unknown");
            assert_eq!(
                ok + not_found + internal + unknown,
                40,
                "{side}: {side_calls:?}"
            );
            assert!(ok <= 20, "{side}: {ok} OK");
            // Never `ok` without a decoded OK; an unknown one has no status.
            for c in &side_calls {
                let o = c["outcome"].as_str().unwrap();
                match c["status_text"].as_str() {
                    Some("OK") => assert_eq!(o, "ok", "{c}"),
                    Some("NOT_FOUND") => assert_eq!(o, "client_error", "{c}"),
                    Some("INTERNAL") => assert_eq!(o, "server_error", "{c}"),
                    None => assert!(o == "unknown" && c["status"].is_null(), "{c}"),
                    Some(other) => panic!("{other}: {c}"),
                }
            }
            if primed == "0" {
                // First sent after the start: literals, exact.
                assert_eq!((not_found, internal), (10, 10), "{side}: {side_calls:?}");
            } else {
                assert!(not_found <= 10 && internal <= 10, "{side}: {side_calls:?}");
            }
        }
        // The session's endpoints (the summary's).
        let summary = lines.last().unwrap();
        let endpoints: Vec<&Value> = summary["endpoints"].as_array().unwrap().iter().collect();
        let unknown: u64 = endpoints
            .iter()
            .map(|e| e["unknown_outcomes"].as_u64().unwrap())
            .sum();
        // Both sides' OK calls: their status was indexed before the start.
        assert!(unknown >= 40, "{endpoints:?}");
        for e in &endpoints {
            let known = e["calls"].as_u64().unwrap() - e["unknown_outcomes"].as_u64().unwrap();
            if known == 0 {
                assert!(e["server_error_rate"].is_null(), "{e}");
            }
        }
    }
}

/// HTTP/2 over TLS (ALPN h2): nghttpd with a self-signed certificate, h2load (`-n 2000 -c 4
/// -m 16`, as over h2c) and curl, both linking the system's libssl: the TLS probes hand the
/// plaintext to the HTTP/2 parser, every request one call per side with `tls: true`, exactly
/// as over h2c.
#[test]
fn http2_over_tls_is_exact_on_both_sides() {
    require_root();
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("index.html"), "hello\n").unwrap();
    let (cert, key) = self_signed_cert(dir.path());
    let port = free_tcp_port();
    let _server = Peer(
        Command::new("nghttpd")
            .arg("-d")
            .arg(dir.path())
            .arg(port.to_string())
            .arg(&key)
            .arg(&cert)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("nghttpd is installed (scripts/deps: nghttp2-server)"),
    );
    wait_for_listener("127.0.0.1", port, "nghttpd");
    let p = port.to_string();
    let ebtop = Ebtop::start(&["--json", "--port", &p]);
    let out = Command::new("h2load")
        .args(["-n", "2000", "-c", "4", "-m", "16"])
        .arg(format!("https://127.0.0.1:{port}/index.html"))
        .output()
        .expect("h2load is installed (scripts/deps: nghttp2-client)");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && text.contains("2000 succeeded") && text.contains("h2"),
        "{text}"
    );
    let curl = Command::new("curl")
        .args([
            "-sk",
            "--http2",
            "-o",
            "/dev/null",
            "-w",
            "%{http_version} %{http_code}",
        ])
        .arg(format!("https://127.0.0.1:{port}/missing"))
        .output()
        .expect("curl runs");
    assert_eq!(String::from_utf8_lossy(&curl.stdout), "2 404");
    let lines = ebtop.stop();
    let calls = calls(&lines);
    for side in ["client", "server"] {
        let side_calls = of(&calls, side);
        let ok: Vec<_> = side_calls
            .iter()
            .filter(|c| c["resource"] == "/index.html")
            .collect();
        assert_eq!(ok.len(), 2000, "{side}");
        for c in &ok {
            assert_eq!(
                (&c["proto"], &c["tls"], &c["method"], &c["status"]),
                (
                    &Value::from("http2"),
                    &Value::from(true),
                    &Value::from("GET"),
                    &Value::from(200)
                ),
                "{c}"
            );
        }
        // The streams' frames on the wire, as h2load counted what it received.
        let total: u64 = ok.iter().map(|c| c["resp_bytes"].as_u64().unwrap()).sum();
        assert_eq!(total, h2load_response_wire_bytes(&text, 2000), "{side}");
        let missing: Vec<_> = side_calls
            .iter()
            .filter(|c| c["resource"] == "/missing")
            .collect();
        assert_eq!(missing.len(), 1, "{side}: {side_calls:#?}");
        assert_eq!(
            (&missing[0]["status"], &missing[0]["tls"]),
            (&Value::from(404), &Value::from(true))
        );
        assert_eq!(side_calls.len(), 2001, "no other calls on {side}");
    }
    let summary = lines.last().unwrap();
    assert_clean_summary(summary);
    assert_eq!(summary["parse"]["partial_headers"], 0, "{summary}");
}
