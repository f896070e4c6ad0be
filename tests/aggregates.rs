//! Endpoint percentiles, error counts and ebtop's own overhead, end to end against a real
//! server (needs root: loads BPF).

mod common;

use std::io::{BufReader, Write};
use std::net::TcpStream;
use std::thread;
use std::time::{Duration, Instant};

use common::*;
use serde_json::Value;

/// `n` GETs of `path(i)` over `conns` parallel keep-alive connections; returns the client's own
/// latency of each call (write start → response read), ground truth for ebtop's client side.
fn load(port: u16, conns: usize, n: usize, path: impl Fn(usize) -> String + Sync) -> Vec<u64> {
    let lat = std::sync::Mutex::new(Vec::new());
    thread::scope(|s| {
        for c in 0..conns {
            let (path, lat) = (&path, &lat);
            s.spawn(move || {
                let sock = TcpStream::connect(("127.0.0.1", port)).unwrap();
                let mut w = sock.try_clone().unwrap();
                let mut r = BufReader::new(sock);
                for i in (c..n).step_by(conns) {
                    let t = Instant::now();
                    w.write_all(format!("GET {} HTTP/1.1\r\n\r\n", path(i)).as_bytes())
                        .unwrap();
                    read_response(&mut r);
                    lat.lock().unwrap().push(t.elapsed().as_nanos() as u64);
                }
            });
        }
    });
    lat.into_inner().unwrap()
}

/// The exact q-quantile (nearest rank), as an HDR histogram defines it.
fn quantile(v: &[u64], q: f64) -> u64 {
    let mut s = v.to_vec();
    s.sort_unstable();
    s[((q * s.len() as f64).ceil() as usize).clamp(1, s.len()) - 1]
}

fn within(got: u64, want: u64, pct: f64) -> bool {
    (got as f64 - want as f64).abs() <= want as f64 * pct / 100.0
}

#[test]
fn endpoint_percentiles_match_the_servers_sleeps() {
    require_root();
    let server = TestServer::start();
    let port = server.port.to_string();
    let ebtop = Ebtop::start(&["--json", "--port", &port, "-d", "500ms"]);
    // Endpoint A sleeps 10 ms, B 50 ms; /sleep/{id}/mixed: 90% of calls 10 ms, 10% 50 ms.
    let mut truth = std::collections::HashMap::new();
    truth.insert(
        ("client", "a"),
        load(server.port, 4, 100, |_| "/sleep/10/a".into()),
    );
    truth.insert(
        ("client", "b"),
        load(server.port, 4, 40, |_| "/sleep/50/b".into()),
    );
    truth.insert(
        ("client", "mixed"),
        load(server.port, 8, 400, |i| {
            format!("/sleep/{}/mixed", if i % 10 == 9 { 50 } else { 10 })
        }),
    );
    load(server.port, 2, 20, |_| "/error".into());
    for (path, ns) in server.timings.lock().unwrap().iter() {
        let name = path.rsplit('/').next().unwrap();
        let name = ["a", "b", "mixed"]
            .into_iter()
            .find(|n| *n == name)
            .unwrap();
        truth
            .entry(("server", name))
            .or_insert_with(Vec::new)
            .push(*ns);
    }
    let lines = ebtop.stop();
    let summary = lines.last().unwrap();
    let eps = summary["endpoints"].as_array().unwrap();
    let find = |side: &str, res: &str| -> &Value {
        eps.iter()
            .find(|e| e["side"] == side && e["resource"] == res)
            .unwrap_or_else(|| panic!("no {side} endpoint {res} in {eps:#?}"))
    };
    let truth_of = |side: &str, name: &str| truth[&(side, name)].clone();
    for side in ["client", "server"] {
        for (name, calls, sleep_ms) in [("a", 100, 10), ("b", 40, 50), ("mixed", 400, 10)] {
            let e = find(side, &format!("/sleep/{{id}}/{name}"));
            assert_eq!(e["calls"], calls, "{side} {name}");
            let truth = &truth[&(side, name)];
            assert_eq!(truth.len(), calls as usize);
            // ebtop's own per-call latencies (its call lines) of this endpoint.
            let own: Vec<u64> = lines
                .iter()
                .filter(|v| v["type"] == "call" && v["side"] == side)
                .filter(|v| {
                    let r = v["resource"].as_str().unwrap();
                    r.starts_with("/sleep/") && r.ends_with(&format!("/{name}"))
                })
                .map(|v| v["latency_ns"].as_u64().unwrap())
                .collect();
            assert_eq!(own.len(), calls as usize);
            for (field, q) in [("latency_p50_ns", 0.5), ("latency_p99_ns", 0.99)] {
                let got = e[field].as_u64().unwrap();
                // The aggregate is the quantile of the calls to HDR precision (0.4%).
                let exact = quantile(&own, q);
                assert!(
                    within(got, exact, 0.4),
                    "{side} {name} {field}: aggregate {got} vs quantile of its calls {exact}"
                );
                // Against both sides' own timing of the same calls. Per call: the server's
                // timing ⊆ ebtop's server span ⊆ ebtop's client span ⊆ the client's timing
                // (each span lies inside the next one in time). Order statistics keep an
                // element-wise order, so the q-quantiles are ordered the same way: bounds that
                // hold under any load, with no tolerance.
                let lower = quantile(&truth_of("server", name), q);
                let upper = quantile(&truth_of("client", name), q);
                assert!(
                    lower <= exact && exact <= upper,
                    "{side} {name} {field}: ebtop {exact} outside [server's {lower}, client's {upper}]"
                );
            }
            // And the numbers are the sleeps they should be.
            assert!(e["latency_p50_ns"].as_u64().unwrap() >= sleep_ms * 1_000_000);
        }
        let m = find(side, "/sleep/{id}/mixed");
        assert!(
            m["latency_p99_ns"].as_u64().unwrap() >= 50_000_000,
            "p99 of the mix is the slow mode"
        );
        let e = find(side, "/error");
        assert_eq!(
            (e["calls"].as_u64(), e["server_errors"].as_u64()),
            (Some(20), Some(20))
        );
        assert_eq!(e["server_error_rate"], 1.0);
    }
    // Interval endpoint lines add up to the cumulative numbers.
    let interval_calls: u64 = lines
        .iter()
        .filter(|v| v["type"] == "endpoint" && v["side"] == "server")
        .map(|v| v["calls"].as_u64().unwrap())
        .sum();
    let total: u64 = eps
        .iter()
        .filter(|e| e["side"] == "server")
        .map(|e| e["calls"].as_u64().unwrap())
        .sum();
    assert_eq!(interval_calls, total);
    assert_eq!(total, 560);
}

fn proc_cpu_ticks(pid: u32) -> u64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    let after = &stat[stat.rfind(')').unwrap() + 2..];
    let f: Vec<&str> = after.split_whitespace().collect();
    f[11].parse::<u64>().unwrap() + f[12].parse::<u64>().unwrap()
}

#[test]
fn overhead_is_reported_and_checked_against_proc() {
    require_root();
    let server = TestServer::start();
    let port = server.port.to_string();
    // Exact counts: statistics on for the whole session.
    let ebtop = Ebtop::start(&[
        "--json",
        "--port",
        &port,
        "-d",
        "500ms",
        "--bpf-stats",
        "full",
    ]);
    let pid = ebtop.pid();
    let ticks0 = proc_cpu_ticks(pid);
    let t0 = Instant::now();
    thread::sleep(Duration::from_millis(1200)); // idle intervals
    load(server.port, 4, 4000, |_| "/".into()); // busy ones
    thread::sleep(Duration::from_millis(600));
    let ticks1 = proc_cpu_ticks(pid);
    let elapsed = t0.elapsed().as_secs_f64();
    let lines = ebtop.stop();
    let ov: Vec<&Value> = lines.iter().filter(|v| v["type"] == "overhead").collect();
    let kinds: Vec<String> = lines
        .iter()
        .filter(|v| v["type"] != "call" && v["type"] != "proc")
        .map(|v| format!("{} {}", v["type"], v["ts"]))
        .collect();
    assert!(
        ov.len() >= 3,
        "one overhead line per interval: {} in {kinds:#?}",
        ov.len()
    );
    for o in &ov {
        assert_eq!(o["bpf_stats_available"], true, "{o}");
        assert!(o["rss_bytes"].as_u64().unwrap() > 1 << 20);
    }
    let runs: Vec<u64> = ov.iter().map(|o| o["bpf_runs"].as_u64().unwrap()).collect();
    // However the 4000 requests spread over the intervals (a busy machine slows them down),
    // each makes at least six probe runs (client write entry+exit and read exit, the server's
    // read exit and write entry+exit).
    assert!(
        runs.iter().sum::<u64>() >= 6 * 4000,
        "BPF runs grow with traffic: {runs:?}"
    );
    // (No comparison of busy and idle intervals: the programs run for every socket call on
    // the host, and other tests' traffic makes the idle ones busy too.)
    assert!(ov.iter().any(|o| o["bpf_cpu_pct"].as_f64().unwrap() > 0.0));
    // ebtop's user-space CPU as it reported it vs /proc/PID/stat read by the test.
    let hz = 100.0; // USER_HZ on Linux
    let proc_pct = (ticks1 - ticks0) as f64 / hz / elapsed * 100.0;
    let reported: f64 = ov
        .iter()
        .map(|o| o["user_cpu_pct"].as_f64().unwrap_or(0.0) * o["period_ns"].as_f64().unwrap())
        .sum::<f64>()
        / ov.iter()
            .map(|o| o["period_ns"].as_f64().unwrap())
            .sum::<f64>();
    assert!(
        (reported - proc_pct).abs() <= 5.0 + proc_pct * 0.5,
        "reported {reported:.1}% vs /proc {proc_pct:.1}%"
    );
}

#[test]
fn sampled_bpf_statistics_cover_a_window_of_each_interval() {
    require_root();
    let server = TestServer::start();
    let port = server.port.to_string();
    let ebtop = Ebtop::start(&["--json", "--port", &port, "-d", "500ms"]);
    load(server.port, 2, 2000, |_| "/".into());
    std::thread::sleep(Duration::from_millis(1100));
    let lines = ebtop.stop();
    let ov: Vec<&Value> = lines.iter().filter(|v| v["type"] == "overhead").collect();
    assert!(ov.len() >= 2, "{ov:#?}");
    // With the kernel.bpf_stats_enabled sysctl on (someone else's choice) statistics are on
    // all the time and the whole interval is measured.
    let always_on = std::fs::read_to_string("/proc/sys/kernel/bpf_stats_enabled")
        .is_ok_and(|s| s.trim() == "1");
    let mut sampled = 0;
    for o in &ov {
        assert_eq!(o["bpf_stats_available"], true, "{o}");
        let period = o["period_ns"].as_u64().unwrap();
        // The window (the last 50 ms of each 500 ms interval, from when the loop gets to it)
        // lies inside the interval.
        let window = o["bpf_sampled_ns"].as_u64().unwrap_or(0);
        if always_on {
            assert_eq!(window, period, "{o}");
        } else {
            assert!(window > 0 && window < period, "{o}");
        }
        assert!(o["bpf_cpu_pct"].as_f64().is_some(), "{o}");
        sampled += 1;
    }
    assert_eq!(sampled, ov.len());
}
