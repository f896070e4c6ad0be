//! `--prometheus`: a real Prometheus (Debian's `prometheus`, started by the test on loopback)
//! scrapes ebtop while a known load runs, and PromQL over its HTTP API returns exactly the
//! calls the client made, per endpoint and outcome (issue 48).

mod common;

use std::io::{BufReader, Read, Write};
use std::net::TcpStream;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::{free_tcp_port, read_response, require_root, wait_for_listener, Ebtop, TestServer};
use serde_json::Value;

/// A Prometheus scraping `target` every second, its data in a temporary directory.
struct Prometheus {
    child: Child,
    port: u16,
    _dir: tempfile::TempDir,
}

impl Prometheus {
    fn start(target: &str) -> Prometheus {
        let dir = tempfile::tempdir().unwrap();
        let config = dir.path().join("prometheus.yml");
        std::fs::write(
            &config,
            format!(
                "global:\n  scrape_interval: 1s\n  scrape_timeout: 900ms\nscrape_configs:\n  \
                 - job_name: ebtop\n    static_configs:\n      - targets: ['{target}']\n"
            ),
        )
        .unwrap();
        let port = free_tcp_port();
        let child = Command::new("prometheus")
            .arg(format!("--config.file={}", config.display()))
            .arg(format!(
                "--storage.tsdb.path={}",
                dir.path().join("data").display()
            ))
            .arg(format!("--web.listen-address=127.0.0.1:{port}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("prometheus runs (scripts/deps installs Debian's prometheus)");
        wait_for_listener("127.0.0.1", port, "prometheus");
        Prometheus {
            child,
            port,
            _dir: dir,
        }
    }

    /// An instant query's vector as (labels, value) pairs.
    fn query(&self, promql: &str) -> Vec<(Value, f64)> {
        let mut s = TcpStream::connect(("127.0.0.1", self.port)).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        write!(
            s,
            "GET /api/v1/query?query={} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
            percent_encoded(promql)
        )
        .unwrap();
        let mut out = String::new();
        s.read_to_string(&mut out).unwrap();
        let body = out.split_once("\r\n\r\n").map_or("", |b| b.1);
        let v: Value = serde_json::from_str(body).unwrap_or_else(|e| panic!("{e}: {out}"));
        assert_eq!(v["status"], "success", "{v}");
        v["data"]["result"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| {
                let value = r["value"][1].as_str().unwrap().parse().unwrap();
                (r["metric"].clone(), value)
            })
            .collect()
    }
}

impl Drop for Prometheus {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn percent_encoded(s: &str) -> String {
    s.bytes()
        .map(|b| {
            if b.is_ascii_alphanumeric() || b"-_.~".contains(&b) {
                (b as char).to_string()
            } else {
                format!("%{b:02X}")
            }
        })
        .collect()
}

#[test]
fn prometheus_scrapes_the_exact_calls_per_endpoint_and_outcome() {
    require_root();
    let server = TestServer::start();
    let metrics_port = free_tcp_port();
    let metrics = format!("127.0.0.1:{metrics_port}");
    let port = server.port.to_string();
    let ebtop = Ebtop::start(&["--json", "--prometheus", &metrics, "--port", &port]);
    let prometheus = Prometheus::start(&metrics);
    // The load: known counts of each answer, over two keep-alive connections.
    let sent = [
        ("/", 23, "ok"),
        ("/missing", 37, "client_error"),
        ("/error", 11, "server_error"),
    ];
    for conn in 0..2 {
        let s = TcpStream::connect(("127.0.0.1", server.port)).unwrap();
        let mut r = BufReader::new(s.try_clone().unwrap());
        let mut w = s;
        for &(path, n, _) in &sent {
            for _ in 0..n / 2 + (n % 2) * (1 - conn) {
                write!(w, "GET {path} HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
                read_response(&mut r);
            }
        }
    }
    // Counters only grow: wait until Prometheus has what was sent (or time runs out), then
    // compare exactly.
    let by_outcome = |route: &str| {
        prometheus.query(&format!(
            "sum by (outcome) (ebtop_calls_total{{side=\"server\",resource=\"{route}\"}})"
        ))
    };
    let want = |route: &str, outcome: &str| {
        sent.iter().find(|s| s.0 == route).map_or(0.0, |s| {
            if s.2 == outcome {
                s.1 as f64
            } else {
                0.0
            }
        })
    };
    let exact = || {
        sent.iter().all(|&(route, _, _)| {
            let got = by_outcome(route);
            ["ok", "client_error", "server_error", "unknown"]
                .iter()
                .all(|o| {
                    let v = got.iter().find(|(m, _)| m["outcome"] == *o).map(|x| x.1);
                    v == Some(want(route, o))
                })
        })
    };
    let deadline = Instant::now() + Duration::from_secs(60);
    while !exact() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(500));
    }
    for &(route, _, _) in &sent {
        let got = by_outcome(route);
        for o in ["ok", "client_error", "server_error", "unknown"] {
            let v = got.iter().find(|(m, _)| m["outcome"] == o).map(|x| x.1);
            assert_eq!(v, Some(want(route, o)), "{route} {o}: {got:?}");
        }
        // The latency histogram counts the same calls, all under +Inf and none below 1 µs.
        let count = prometheus.query(&format!(
            "sum(http_server_request_duration_seconds_count{{http_route=\"{route}\"}})"
        ));
        let n: f64 = sent.iter().find(|s| s.0 == route).unwrap().1 as f64;
        assert_eq!(count.first().map(|x| x.1), Some(n), "{route}: {count:?}");
        let inf = prometheus.query(&format!(
            "sum(http_server_request_duration_seconds_bucket{{http_route=\"{route}\",le=\"+Inf\"}})"
        ));
        assert_eq!(inf.first().map(|x| x.1), Some(n), "{route}: {inf:?}");
    }
    // ebtop's own series are there too.
    assert!(!prometheus.query("ebtop_events_total").is_empty());
    let lines = ebtop.stop();
    let summary = lines.last().unwrap();
    assert_eq!(summary["kernel"]["lost"], 0, "{summary}");
}
