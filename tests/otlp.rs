//! `--otlp`: a real OpenTelemetry Collector (OTLP receiver and file exporter, built by
//! scripts/otelcol and cached under /var/cache/ebtop-tests) receives exactly one span per call,
//! with the conventions' attributes and the application's trace id from the `traceparent` the
//! client sent; stopped for 10 s and restarted, capture is unaffected and the spans it missed
//! are counted as dropped; a replay exports the recorded calls at their recorded times;
//! with `--otlp-flow-logs` each TCP flow end is a log record (issue 48).

mod common;

use std::collections::BTreeMap;
use std::io::{BufReader, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::{
    calls, free_tcp_port, read_response, require_root, wait_for_listener, Ebtop, TestServer,
};
use serde_json::Value;

const TRACE_ID: &str = "4bf92f3577b34da6a3ce929d0e0e4736";

/// The collector binary, built once per machine (minutes) by scripts/otelcol.
fn collector_binary() -> PathBuf {
    let out = Command::new(concat!(env!("CARGO_MANIFEST_DIR"), "/scripts/otelcol"))
        .stderr(Stdio::inherit())
        .output()
        .expect("scripts/otelcol runs");
    assert!(out.status.success(), "scripts/otelcol failed");
    PathBuf::from(String::from_utf8(out.stdout).unwrap().trim())
}

/// A collector receiving OTLP/HTTP on `port`, writing what it gets to `dir/<name>.json`
/// (spans; metrics to `<name>-metrics.json`, logs to `<name>-logs.json`), one OTLP/JSON
/// request per line.
struct Collector {
    child: Child,
}

impl Collector {
    fn start(bin: &Path, port: u16, dir: &Path, name: &str) -> Collector {
        let config = dir.join(format!("{name}.yaml"));
        let spans = dir.join(format!("{name}.json"));
        let metrics = dir.join(format!("{name}-metrics.json"));
        let logs = dir.join(format!("{name}-logs.json"));
        std::fs::write(
            &config,
            format!(
                "receivers:\n  otlp:\n    protocols:\n      http:\n        endpoint: \
                 127.0.0.1:{port}\nexporters:\n  file/spans:\n    path: {}\n    \
                 flush_interval: 100ms\n  file/metrics:\n    path: {}\n    flush_interval: \
                 100ms\n  file/logs:\n    path: {}\n    flush_interval: 100ms\nservice:\n  \
                 telemetry:\n    metrics:\n      level: none\n  pipelines:\n    \
                 traces:\n      receivers: [otlp]\n      exporters: [file/spans]\n    metrics:\n      \
                 receivers: [otlp]\n      exporters: [file/metrics]\n    logs:\n      \
                 receivers: [otlp]\n      exporters: [file/logs]\n",
                spans.display(),
                metrics.display(),
                logs.display()
            ),
        )
        .unwrap();
        let child = Command::new(bin)
            .arg(format!("--config={}", config.display()))
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(dir.join(format!("{name}.log"))).unwrap())
            .spawn()
            .expect("the collector starts");
        wait_for_listener("127.0.0.1", port, "the OTel collector");
        Collector { child }
    }

    /// SIGTERM (the collector drains and flushes), and wait.
    fn stop(&mut self) {
        // SAFETY: kill with our own child's pid.
        unsafe { libc::kill(self.child.id() as i32, libc::SIGTERM) };
        let _ = self.child.wait();
    }
}

impl Drop for Collector {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Every span in the file exporter's output files (OTLP/JSON), with its resource.
fn spans_in(files: &[PathBuf]) -> Vec<Value> {
    let mut out = Vec::new();
    for f in files {
        let Ok(text) = std::fs::read_to_string(f) else {
            continue;
        };
        for line in text.lines().filter(|l| !l.trim().is_empty()) {
            let Ok(req) = serde_json::from_str::<Value>(line) else {
                continue; // a line being written
            };
            for rs in req["resourceSpans"].as_array().into_iter().flatten() {
                for ss in rs["scopeSpans"].as_array().into_iter().flatten() {
                    for s in ss["spans"].as_array().into_iter().flatten() {
                        let mut s = s.clone();
                        s["resource"] = rs["resource"].clone();
                        out.push(s);
                    }
                }
            }
        }
    }
    out
}

/// Waits until the files hold `n` spans (they only grow), at most 60 s; then the spans.
fn wait_for_spans(files: &[PathBuf], n: usize) -> Vec<Value> {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let spans = spans_in(files);
        if spans.len() >= n || Instant::now() > deadline {
            return spans;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

fn attr<'v>(span: &'v Value, key: &str) -> Option<&'v Value> {
    let kv = span["attributes"]
        .as_array()?
        .iter()
        .find(|kv| kv["key"] == key)?;
    let v = &kv["value"];
    v.get("stringValue")
        .or_else(|| v.get("intValue"))
        .or_else(|| v.get("boolValue"))
}

/// `n` requests to `path` on one keep-alive connection; with a `traceparent` whose parent
/// id is `parent(i)` when given.
fn requests(port: u16, path: &str, n: usize, parent: Option<&dyn Fn(usize) -> String>) {
    let s = TcpStream::connect(("127.0.0.1", port)).unwrap();
    let mut r = BufReader::new(s.try_clone().unwrap());
    let mut w = s;
    for i in 0..n {
        let tp = parent.map_or(String::new(), |p| {
            format!("traceparent: 00-{TRACE_ID}-{}-01\r\n", p(i))
        });
        write!(w, "GET {path} HTTP/1.1\r\nHost: x\r\n{tp}\r\n").unwrap();
        read_response(&mut r);
    }
}

fn summary_otlp(lines: &[Value]) -> &Value {
    let summary = lines.last().unwrap();
    assert_eq!(summary["type"], "summary");
    &summary["otlp"]
}

#[test]
fn the_collector_receives_one_span_per_call_with_the_applications_trace() {
    require_root();
    let bin = collector_binary();
    let dir = tempfile::tempdir().unwrap();
    let otlp_port = free_tcp_port();
    let _collector = Collector::start(&bin, otlp_port, dir.path(), "c");
    let server = TestServer::start();
    let url = format!("http://127.0.0.1:{otlp_port}");
    let port = server.port.to_string();
    let ebtop = Ebtop::start(&["--json", "--otlp", &url, "--port", &port]);
    // 40 calls with a traceparent each (parent ids 1..=40), 15 without, and 7 answered 404.
    let parent = |i: usize| format!("{:016x}", i + 1);
    requests(server.port, "/", 40, Some(&parent));
    requests(server.port, "/", 15, None);
    requests(server.port, "/missing", 7, None);
    let lines = ebtop.stop();
    let call_lines = calls(&lines);
    // The client's and the server's side of each request (both are this process).
    assert_eq!(call_lines.len(), 2 * (40 + 15 + 7), "{:?}", lines.last());
    let otlp = summary_otlp(&lines);
    assert_eq!(otlp["spans_exported"], call_lines.len(), "{otlp}");
    assert_eq!(otlp["spans_dropped"], 0, "{otlp}");
    let spans = wait_for_spans(&[dir.path().join("c.json")], call_lines.len());
    assert_eq!(spans.len(), call_lines.len());
    // The chains (issue 50): each CLIENT span the test's call, in the application's trace
    // as a child of the span its header named, or (no header) the root of a trace of its
    // own; each SERVER span the child of the CLIENT span that reached it (one hop), in its
    // trace.
    let by_id: BTreeMap<&str, &Value> = spans
        .iter()
        .map(|s| (s["spanId"].as_str().unwrap(), s))
        .collect();
    assert_eq!(by_id.len(), spans.len(), "span ids are unique");
    let mut by_parent: BTreeMap<String, Vec<i64>> = BTreeMap::new();
    let mut hops: BTreeMap<&str, usize> = BTreeMap::new();
    for s in &spans {
        assert_eq!(attr(s, "http.request.method"), Some(&Value::from("GET")));
        assert_eq!(
            attr(s, "server.port").and_then(|v| v.as_str()),
            Some(port.as_str()),
            "{s}"
        );
        let kind = s["kind"].as_i64().unwrap();
        assert!(kind == 2 || kind == 3, "SERVER or CLIENT: {s}");
        let path = attr(s, "url.path").and_then(Value::as_str).unwrap();
        let status = attr(s, "http.response.status_code").and_then(Value::as_str);
        match path {
            "/" => assert_eq!(status, Some("200"), "{s}"),
            "/missing" => assert_eq!(status, Some("404"), "{s}"),
            _ => panic!("{s}"),
        }
        let parent_id = s["parentSpanId"].as_str().unwrap_or("");
        if kind == 2 {
            let client = by_id.get(parent_id).unwrap_or_else(|| panic!("hop: {s}"));
            assert_eq!(client["kind"], 3, "{s}");
            assert_eq!(client["traceId"], s["traceId"], "{s}");
            assert_eq!(attr(client, "url.path"), attr(s, "url.path"), "{s}");
            *hops.entry(parent_id).or_default() += 1;
        } else if parent_id.is_empty() {
            assert_ne!(s["traceId"], TRACE_ID, "{s}");
        } else {
            assert_eq!(s["traceId"], TRACE_ID, "{s}");
            by_parent
                .entry(parent_id.to_owned())
                .or_default()
                .push(kind);
        }
        let start: u64 = s["startTimeUnixNano"].as_str().unwrap().parse().unwrap();
        let end: u64 = s["endTimeUnixNano"].as_str().unwrap().parse().unwrap();
        assert!(start > 0 && end >= start, "{s}");
    }
    assert_eq!(by_parent.len(), 40);
    for i in 0..40 {
        assert_eq!(by_parent[&parent(i)], vec![3], "parent {}", parent(i));
    }
    assert_eq!(
        hops.len(),
        40 + 15 + 7,
        "every CLIENT span reached one SERVER span"
    );
    assert!(hops.values().all(|&n| n == 1));
    // Traces without a header: one per request (its two spans), never shared.
    let mut own_traces: BTreeMap<&str, usize> = BTreeMap::new();
    for s in spans.iter().filter(|s| s["traceId"] != TRACE_ID) {
        *own_traces
            .entry(s["traceId"].as_str().unwrap())
            .or_default() += 1;
    }
    assert_eq!(own_traces.len(), 15 + 7);
    assert!(own_traces.values().all(|&n| n == 2));
    // The metrics reached the collector too (at least the last, at the end).
    assert!(
        std::fs::metadata(dir.path().join("c-metrics.json")).is_ok_and(|m| m.len() > 0),
        "no metrics"
    );
}

#[test]
fn a_collector_down_for_10_s_costs_counted_drops_and_no_calls() {
    require_root();
    let bin = collector_binary();
    let dir = tempfile::tempdir().unwrap();
    let otlp_port = free_tcp_port();
    let mut collector = Collector::start(&bin, otlp_port, dir.path(), "first");
    let server = TestServer::start();
    let url = format!("http://127.0.0.1:{otlp_port}");
    let port = server.port.to_string();
    let ebtop = Ebtop::start(&["--json", "--otlp", &url, "--port", &port]);
    requests(server.port, "/", 50, None);
    collector.stop();
    // Calls while nothing receives: their spans are retried, then given up within the 10 s
    // (a batch waits at most 1 s, its 5 tries take 1.5 s of backoff).
    requests(server.port, "/", 60, None);
    std::thread::sleep(Duration::from_secs(10));
    let _collector = Collector::start(&bin, otlp_port, dir.path(), "second");
    requests(server.port, "/", 70, None);
    let lines = ebtop.stop();
    // Capture is exact whatever the export met.
    assert_eq!(calls(&lines).len(), 2 * (50 + 60 + 70));
    let otlp = summary_otlp(&lines);
    let exported = otlp["spans_exported"].as_u64().unwrap();
    let dropped = otlp["spans_dropped"].as_u64().unwrap();
    assert_eq!(exported + dropped, 2 * (50 + 60 + 70), "{otlp}");
    assert!(
        dropped >= 2 * 60,
        "the calls made while it was down: {otlp}"
    );
    assert!(otlp["request_errors"].as_u64().unwrap() > 0, "{otlp}");
    let files = [
        dir.path().join("first.json"),
        dir.path().join("second.json"),
    ];
    let spans = wait_for_spans(&files, exported as usize);
    assert_eq!(spans.len() as u64, exported, "{otlp}");
}

#[test]
fn a_replay_exports_the_recorded_calls_at_their_recorded_times() {
    let bin = collector_binary();
    let dir = tempfile::tempdir().unwrap();
    let otlp_port = free_tcp_port();
    let _collector = Collector::start(&bin, otlp_port, dir.path(), "r");
    let url = format!("http://127.0.0.1:{otlp_port}");
    let recording = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/fixtures/recordings/http_mix.ebt"
    );
    let out = Command::new(env!("CARGO_BIN_EXE_ebtop"))
        .args(["-r", recording, "--json", "--otlp", &url])
        .args(common::replay_args())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let lines: Vec<Value> = String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let call_lines = calls(&lines);
    assert!(call_lines.len() > 10, "{}", call_lines.len());
    let otlp = summary_otlp(&lines);
    assert_eq!(otlp["spans_exported"], call_lines.len(), "{otlp}");
    assert_eq!(otlp["spans_dropped"], 0, "{otlp}");
    let spans = wait_for_spans(&[dir.path().join("r.json")], call_lines.len());
    assert_eq!(spans.len(), call_lines.len());
    // The recorded times: each call line's start and latency is one span's.
    let unix_ns = |ts: &str| {
        humantime::parse_rfc3339(ts)
            .unwrap()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos() as u64
    };
    let mut want: Vec<(u64, u64)> = call_lines
        .iter()
        .map(|c| {
            let start = unix_ns(c["ts"].as_str().unwrap());
            (start, start + c["latency_ns"].as_u64().unwrap())
        })
        .collect();
    let mut got: Vec<(u64, u64)> = spans
        .iter()
        .map(|s| {
            let n = |k: &str| s[k].as_str().unwrap().parse::<u64>().unwrap();
            (n("startTimeUnixNano"), n("endTimeUnixNano"))
        })
        .collect();
    want.sort();
    got.sort();
    assert_eq!(got, want);
}

/// Every log record in the file exporter's output (OTLP/JSON), with its resource.
fn log_records_in(file: &Path) -> Vec<Value> {
    let text = std::fs::read_to_string(file).unwrap_or_default();
    let mut out = Vec::new();
    for line in text.lines().filter(|l| !l.trim().is_empty()) {
        let Ok(req) = serde_json::from_str::<Value>(line) else {
            continue; // a line being written
        };
        for rl in req["resourceLogs"].as_array().into_iter().flatten() {
            for sl in rl["scopeLogs"].as_array().into_iter().flatten() {
                for r in sl["logRecords"].as_array().into_iter().flatten() {
                    let mut r = r.clone();
                    r["resource"] = rl["resource"].clone();
                    out.push(r);
                }
            }
        }
    }
    out
}

/// `--otlp-flow-logs`: one log record per TCP flow end, with the numbers of its `flow_end`
/// line, which are the bytes the test's own connections moved.
#[test]
fn flow_ends_reach_the_collector_as_log_records() {
    require_root();
    let bin = collector_binary();
    let dir = tempfile::tempdir().unwrap();
    let otlp_port = free_tcp_port();
    let _collector = Collector::start(&bin, otlp_port, dir.path(), "f");
    let url = format!("http://127.0.0.1:{otlp_port}");
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let lport = listener.local_addr().unwrap().port();
    let port = lport.to_string();
    let ebtop = Ebtop::start(&[
        "--json",
        "--otlp",
        &url,
        "--otlp-flow-logs",
        "--port",
        &port,
    ]);
    const N: usize = 20;
    // Connection i sends 100 + i bytes and gets 1000 + i back.
    let server = std::thread::spawn(move || {
        for i in 0..N {
            let (mut s, _) = listener.accept().unwrap();
            let mut got = vec![0u8; 100 + i];
            std::io::Read::read_exact(&mut s, &mut got).unwrap();
            s.write_all(&vec![b'r'; 1000 + i]).unwrap();
        }
    });
    let mut client_ports = Vec::new();
    for i in 0..N {
        let mut c = TcpStream::connect(("127.0.0.1", lport)).unwrap();
        client_ports.push(c.local_addr().unwrap().port());
        c.write_all(&vec![b'q'; 100 + i]).unwrap();
        let mut back = Vec::new();
        std::io::Read::read_to_end(&mut c, &mut back).unwrap();
        assert_eq!(back.len(), 1000 + i);
    }
    server.join().unwrap();
    std::thread::sleep(Duration::from_millis(1500));
    let lines = ebtop.stop();
    let ends: Vec<&Value> = lines.iter().filter(|v| v["type"] == "flow_end").collect();
    assert_eq!(ends.len(), 2 * N, "both sides of each connection ended");
    let otlp = summary_otlp(&lines);
    assert_eq!(otlp["flow_logs_exported"], 2 * N, "{otlp}");
    assert_eq!(otlp["flow_logs_dropped"], 0, "{otlp}");
    let file = dir.path().join("f-logs.json");
    let deadline = Instant::now() + Duration::from_secs(60);
    let records = loop {
        let r = log_records_in(&file);
        if r.len() >= 2 * N || Instant::now() > deadline {
            break r;
        }
        std::thread::sleep(Duration::from_millis(200));
    };
    assert_eq!(records.len(), 2 * N);
    let int = |r: &Value, k: &str| -> u64 {
        attr(r, k)
            .and_then(|v| v.as_str().map(|s| s.parse().unwrap()).or(v.as_u64()))
            .unwrap_or_else(|| panic!("{k} in {r}"))
    };
    for (i, cport) in client_ports.iter().enumerate() {
        let (req, resp) = ((100 + i) as u64, (1000 + i) as u64);
        for (local, peer, out, inb) in [(*cport, lport, req, resp), (lport, *cport, resp, req)] {
            let found: Vec<&Value> = records
                .iter()
                .filter(|r| {
                    int(r, "network.local.port") == u64::from(local)
                        && int(r, "network.peer.port") == u64::from(peer)
                })
                .collect();
            assert_eq!(found.len(), 1, "{local} -> {peer}: {found:?}");
            let r = found[0];
            assert_eq!(r["eventName"], "ebtop.flow.end", "{r}");
            assert_eq!(int(r, "ebtop.flow.bytes_out"), out, "{r}");
            assert_eq!(int(r, "ebtop.flow.bytes_in"), inb, "{r}");
            assert_eq!(
                attr(r, "ebtop.flow.close_reason").and_then(Value::as_str),
                Some("fin"),
                "{r}"
            );
            let t: u64 = r["timeUnixNano"].as_str().unwrap().parse().unwrap();
            assert!(t > 0, "{r}");
        }
    }
}
