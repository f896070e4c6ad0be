//! Recording and replay: live vs replay equality (root), committed fixtures (no root), filtered
//! copies, and every kind of bad file.

mod common;

use std::io::{BufReader, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use common::*;
use serde_json::Value;

const FIXTURE: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/tests/fixtures/recordings/http_mix.ebt"
);
const FIXTURE_CALLS: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/tests/fixtures/recordings/http_mix.calls.jsonl"
);

fn ebtop(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_ebtop"))
        .args(args)
        .args(if args.contains(&"-r") {
            common::replay_args()
        } else {
            common::hooks_args()
        })
        .output()
        .unwrap()
}

/// A replay of a committed recording, compared with the lines its live run printed before
/// call chains existed: with chains off (`EBTOP_CHAINS=0`: no `id`/`parent_id`/`trace_id`,
/// no server call held for its client call), which is what that run printed. Chains in a
/// replay are compared with their live run in tests/live_chains.rs.
fn golden_replay(fixture: &str) -> Output {
    Command::new(env!("CARGO_BIN_EXE_ebtop"))
        .args(["-r", fixture, "--json"])
        .args(common::replay_args())
        .env("EBTOP_CHAINS", "0")
        .output()
        .unwrap()
}

/// ebtop with exactly `args` (not the environment's `--hooks`/`--threads`).
fn plain_ebtop(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_ebtop"))
        .args(args)
        .output()
        .unwrap()
}

fn json_lines(out: &Output) -> Vec<Value> {
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

fn call_lines(out: &Output) -> Vec<String> {
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter(|l| l.contains("\"type\":\"call\""))
        .map(str::to_owned)
        .collect()
}

/// A recording of format minor 1, with the flow table's reports.
const FLOWS_FIXTURE: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/tests/fixtures/recordings/flows_mix.ebt"
);
const FLOWS_FIXTURE_LINES: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/tests/fixtures/recordings/flows_mix.lines.jsonl"
);

#[test]
fn replay_of_flows_recording_prints_the_live_runs_flow_lines() {
    let out = golden_replay(FLOWS_FIXTURE);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let want: Vec<String> = std::fs::read_to_string(FLOWS_FIXTURE_LINES)
        .unwrap()
        .lines()
        .map(str::to_owned)
        .collect();
    let kinds = [
        "\"type\":\"call\"",
        "\"type\":\"flow\"",
        "\"type\":\"flow_end\"",
        "\"type\":\"flow_stats\"",
    ];
    let got: Vec<String> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter(|l| kinds.iter().any(|k| l.contains(k)))
        .map(str::to_owned)
        .collect();
    assert!(
        want.iter().any(|l| l.contains("\"proto\":\"udp\"")),
        "fixture has UDP flows"
    );
    assert!(
        want.iter().any(|l| l.contains("\"flow_end\"")),
        "fixture has flow ends"
    );
    // A flow's `l7` is named from the calls seen on it, at replay as live (the live run that
    // made the fixture predates the field): every TCP flow reported carried HTTP calls.
    for l in got.iter().filter(|l| l.contains("\"proto\":\"tcp\"")) {
        assert!(l.contains(",\"l7\":\"http\""), "{l}");
    }
    // Drops were not counted when the fixture was recorded: they replay as `null` (unknown),
    // never as zero.
    for l in got.iter().filter(|l| !l.contains("\"type\":\"call\"")) {
        assert!(l.contains(",\"drops\":null"), "{l}");
    }
    let got: Vec<String> = got
        .iter()
        .map(|l| {
            l.replace(",\"l7\":\"http\"", "")
                .replace(",\"drops\":null", "")
        })
        .collect();
    assert_eq!(got, want);

    // A filtered replay keeps only the flows of that process.
    let curl_pid = want
        .iter()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .find(|v| v["type"] == "flow_end" && v["comm"] == "curl")
        .map(|v| v["pid"].clone())
        .expect("a curl flow");
    let out = ebtop(&[
        "-r",
        FLOWS_FIXTURE,
        "--json",
        "--pid",
        &curl_pid.to_string(),
    ]);
    let flows: Vec<Value> = json_lines(&out)
        .into_iter()
        .filter(|v| v["type"] == "flow" || v["type"] == "flow_end")
        .collect();
    assert!(!flows.is_empty());
    assert!(flows.iter().all(|v| v["pid"] == curl_pid), "{flows:?}");
}

#[test]
fn process_lines_count_the_connections_each_process_has_open() {
    let out = ebtop(&["-r", FLOWS_FIXTURE, "--json"]);
    let lines = json_lines(&out);
    // The keep-alive client: its connection is open across intervals, then closed.
    let client_pid = lines
        .iter()
        .find(|v| v["type"] == "flow_end" && v["comm"] == "python3" && v["role"] == "client")
        .map(|v| v["pid"].clone())
        .expect("the keep-alive client's flow");
    let open: Vec<u64> = lines
        .iter()
        .filter(|v| v["type"] == "process" && v["pid"] == client_pid)
        .map(|v| {
            v["open_connections"]
                .as_u64()
                .expect("a number after an interval")
        })
        .collect();
    assert!(open.len() >= 2, "{open:?}");
    assert!(open.contains(&1), "open while it makes calls: {open:?}");
    assert_eq!(*open.last().unwrap(), 0, "closed at the end: {open:?}");
}

#[test]
fn raw_resources_key_endpoints_on_the_paths_as_called() {
    let endpoints = |args: &[&str]| -> Vec<String> {
        let mut all = vec!["-r", FIXTURE, "--json"];
        all.extend_from_slice(args);
        let out = ebtop(&all);
        assert!(out.status.success());
        let summary = json_lines(&out).pop().unwrap();
        summary["endpoints"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| e["resource"].as_str().unwrap().to_owned())
            .collect()
    };
    let normalised = endpoints(&[]);
    assert!(
        normalised.iter().any(|r| r == "/api/users/{id}"),
        "{normalised:?}"
    );
    assert!(!normalised.iter().any(|r| r == "/api/users/119"));
    let raw = endpoints(&["--raw-resources"]);
    assert!(raw.iter().any(|r| r == "/api/users/119"), "{raw:?}");
    assert!(!raw.iter().any(|r| r.contains('{')), "{raw:?}");
    assert!(raw.len() > normalised.len());
}

#[test]
fn a_copy_over_its_own_input_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let copy = dir.path().join("in.ebt");
    std::fs::copy(FIXTURE, &copy).unwrap();
    let before = std::fs::read(&copy).unwrap();
    let out = ebtop(&[
        "-r",
        copy.to_str().unwrap(),
        "-w",
        copy.to_str().unwrap(),
        "--force",
    ]);
    one_line_error(&out, "is the recording being read");
    assert_eq!(std::fs::read(&copy).unwrap(), before, "input untouched");
}

#[test]
fn replay_of_committed_recording_equals_what_the_live_run_printed() {
    let out = golden_replay(FIXTURE);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let want: Vec<String> = std::fs::read_to_string(FIXTURE_CALLS)
        .unwrap()
        .lines()
        .map(str::to_owned)
        .collect();
    assert!(!want.is_empty());
    assert_eq!(call_lines(&out), want);
    let lines = json_lines(&out);
    assert_eq!(lines[0]["type"], "meta");
    assert_eq!(lines[0]["source"], "replay");
    let summary = lines.last().unwrap();
    assert_eq!(summary["type"], "summary");
    assert_eq!(summary["calls"].as_u64().unwrap(), want.len() as u64);
    assert_eq!(summary["replay"]["corrupt_frames"], 0);
    assert!(
        out.stderr.is_empty(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn filters_apply_to_replay_and_make_filtered_copies() {
    let all = call_lines(&ebtop(&["-r", FIXTURE, "--json"]));
    let curl_only: Vec<String> = all
        .iter()
        .filter(|l| l.contains("\"comm\":\"curl\""))
        .cloned()
        .collect();
    assert!(!curl_only.is_empty() && curl_only.len() < all.len());
    assert_eq!(
        call_lines(&ebtop(&["-r", FIXTURE, "--json", "--comm", "curl"])),
        curl_only
    );

    let dir = tempfile::tempdir().unwrap();
    let copy = dir.path().join("curl.ebt");
    let copy_s = copy.to_str().unwrap();
    let out = ebtop(&["-r", FIXTURE, "-w", copy_s, "--comm", "curl"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(std::fs::metadata(&copy).unwrap().len() < std::fs::metadata(FIXTURE).unwrap().len());
    assert_eq!(call_lines(&ebtop(&["-r", copy_s, "--json"])), curl_only);
    // The copy is not overwritten without --force.
    let again = ebtop(&["-r", FIXTURE, "-w", copy_s]);
    assert_eq!(again.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&again.stderr).contains("--force"));
    assert!(ebtop(&["-r", FIXTURE, "-w", copy_s, "--force"])
        .status
        .success());
    // By pid: one of the server's calls' pid.
    let v: Value = serde_json::from_str(&all[0]).unwrap();
    let pid = v["pid"].as_u64().unwrap().to_string();
    let by_pid = call_lines(&ebtop(&["-r", FIXTURE, "--json", "--pid", &pid]));
    assert!(!by_pid.is_empty());
    assert!(by_pid
        .iter()
        .all(|l| l.contains(&format!("\"pid\":{pid},"))));
}

fn write_tmp(dir: &Path, name: &str, bytes: &[u8]) -> PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, bytes).unwrap();
    p
}

fn one_line_error(out: &Output, needle: &str) {
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.starts_with("ebtop: error: ") && err.contains(needle),
        "{err}"
    );
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(out.stdout.is_empty());
}

#[test]
fn bad_files_get_one_clear_line_and_exit_1() {
    let dir = tempfile::tempdir().unwrap();
    let good = std::fs::read(FIXTURE).unwrap();
    let s = |p: &Path| p.to_str().unwrap().to_owned();

    one_line_error(&ebtop(&["-r", &s(dir.path()), "--json"]), "is a directory");
    one_line_error(
        &ebtop(&["-r", &s(&write_tmp(dir.path(), "empty", b"")), "--json"]),
        "is empty",
    );
    one_line_error(
        &ebtop(&[
            "-r",
            &s(&write_tmp(
                dir.path(),
                "text",
                b"hello, this is a text file\n",
            )),
            "--json",
        ]),
        "not an ebtop recording",
    );
    one_line_error(
        &ebtop(&["-r", "/nonexistent/x.ebt", "--json"]),
        "cannot read",
    );
    let mut future = good.clone();
    future[8] = 9;
    one_line_error(
        &ebtop(&[
            "-r",
            &s(&write_tmp(dir.path(), "future", &future)),
            "--json",
        ]),
        "format 9.0",
    );
}

#[test]
fn damaged_files_replay_what_is_readable_and_say_what_was_lost() {
    let dir = tempfile::tempdir().unwrap();
    let good = std::fs::read(FIXTURE).unwrap();
    let all = call_lines(&ebtop(&["-r", FIXTURE, "--json"]));
    let frames: Vec<usize> = good
        .windows(4)
        .enumerate()
        .filter(|(_, w)| w == b"EBFR")
        .map(|(i, _)| i)
        .collect();
    assert!(frames.len() >= 2, "fixture has several frames");

    // Cut inside the last frame: everything before it replays; a warning says so; exit 0.
    let cut = write_tmp(dir.path(), "cut.ebt", &good[..good.len() - 10]);
    let out = ebtop(&["-r", cut.to_str().unwrap(), "--json"]);
    assert!(out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("warning") && err.contains("cut short"),
        "{err}"
    );
    let lines = json_lines(&out);
    assert_eq!(lines.last().unwrap()["type"], "summary");
    assert!(
        lines.last().unwrap()["replay"]["truncated_bytes"]
            .as_u64()
            .unwrap()
            > 0
    );

    // A corrupt frame in the middle is skipped and counted; later frames still replay.
    let mut bad = good.clone();
    bad[frames[0] + 20] ^= 0x55;
    let p = write_tmp(dir.path(), "corrupt.ebt", &bad);
    let out = ebtop(&["-r", p.to_str().unwrap(), "--json"]);
    assert!(out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("corrupt frame"));
    let lines = json_lines(&out);
    assert_eq!(lines.last().unwrap()["replay"]["corrupt_frames"], 1);
    assert!(call_lines(&out).len() < all.len());
}

#[test]
fn live_recording_replays_to_the_same_calls() {
    require_root();
    let server = TestServer::start();
    let port = server.port.to_string();
    let dir = tempfile::tempdir().unwrap();
    let rec = dir.path().join("live.ebt");
    let live = Ebtop::start(&["--json", "--port", &port, "-w", rec.to_str().unwrap()]);
    for path in ["/", "/chunked", "/big", "/slow", "/missing"] {
        let s = TcpStream::connect(("127.0.0.1", server.port)).unwrap();
        let mut w = s.try_clone().unwrap();
        let mut r = BufReader::new(s);
        for _ in 0..3 {
            w.write_all(format!("GET {path} HTTP/1.1\r\n\r\n").as_bytes())
                .unwrap();
            read_response(&mut r);
        }
    }
    let lines = live.stop();
    let live_calls: Vec<String> = lines
        .iter()
        .filter(|v| v["type"] == "call")
        .map(|v| serde_json::to_string(v).unwrap())
        .collect();
    assert_eq!(live_calls.len(), 2 * 5 * 3);
    use std::os::unix::fs::PermissionsExt;
    assert_eq!(
        std::fs::metadata(&rec).unwrap().permissions().mode() & 0o777,
        0o600
    );

    let out = ebtop(&["-r", rec.to_str().unwrap(), "--json"]);
    assert!(out.status.success());
    let replayed: Vec<String> = json_lines(&out)
        .iter()
        .filter(|v| v["type"] == "call")
        .map(|v| serde_json::to_string(v).unwrap())
        .collect();
    assert_eq!(
        replayed, live_calls,
        "same calls, same latencies, same order"
    );
    let summary = json_lines(&out).pop().unwrap();
    assert_eq!(
        summary["kernel"],
        lines.last().unwrap()["kernel"],
        "kernel counters recorded"
    );

    // The aggregates and the flow table replay as the live run printed them: a JSON line
    // cannot tell live from replay.
    let of_types = |lines: &[Value]| -> Vec<String> {
        lines
            .iter()
            .filter(|v| {
                ["endpoint", "flow", "flow_end", "flow_stats"]
                    .contains(&v["type"].as_str().unwrap())
            })
            .map(|v| serde_json::to_string(v).unwrap())
            .collect()
    };
    let live_flows = of_types(&lines);
    let ends_on_port = lines
        .iter()
        .filter(|v| v["type"] == "flow_end" && v["proto"] == "tcp")
        .filter(|v| {
            let p = server.port.to_string();
            v["local"].as_str().unwrap().ends_with(&p) || v["peer"].as_str().unwrap().ends_with(&p)
        })
        .count();
    assert!(
        ends_on_port >= 5,
        "the 5 client connections end while recording: {ends_on_port} flow_end lines"
    );
    assert_eq!(of_types(&json_lines(&out)), live_flows);
}

/// Live with tracking threads that lag (`EBTOP_DEBUG_FEED_LAG_MS`: each holds what it read
/// 300 ms, as a host with CPU hogs starved them), intervals of 100 ms: flow reports reach
/// the pipeline before the records of the calls made before them, whose records are applied
/// at the interval's end. The flow lines still replay as the live run printed them (a flake
/// of the test above under two CPU hogs: the report was named `l7` when handed on, recorded
/// after those records, and the replay named flows the live run had printed unnamed).
#[test]
fn flow_lines_replay_as_printed_when_the_tracking_threads_lag() {
    require_root();
    let server = TestServer::start();
    let port = server.port.to_string();
    let dir = tempfile::tempdir().unwrap();
    let rec = dir.path().join("lag.ebt");
    let mut args = vec![
        "--json",
        "--port",
        &port,
        "-d",
        "100ms",
        "-w",
        rec.to_str().unwrap(),
    ];
    // Threads that read rings of their own (the suite may ask for them itself).
    if !hooks_args().iter().any(|a| a == "--threads") {
        args.extend(["--threads", "2"]);
    }
    let live = Ebtop::start_with_env(&args, &[("EBTOP_DEBUG_FEED_LAG_MS", "300")]);
    // Connections over several intervals, each with its calls and its end.
    for path in ["/", "/big", "/chunked", "/", "/big", "/missing"] {
        let s = TcpStream::connect(("127.0.0.1", server.port)).unwrap();
        let mut w = s.try_clone().unwrap();
        let mut r = BufReader::new(s);
        for _ in 0..2 {
            w.write_all(format!("GET {path} HTTP/1.1\r\n\r\n").as_bytes())
                .unwrap();
            read_response(&mut r);
        }
        drop((w, r));
        std::thread::sleep(std::time::Duration::from_millis(70));
    }
    let lines = live.stop();
    let of_types = |lines: &[Value]| -> Vec<String> {
        lines
            .iter()
            .filter(|v| {
                ["call", "flow", "flow_end", "flow_stats"].contains(&v["type"].as_str().unwrap())
            })
            .map(|v| serde_json::to_string(v).unwrap())
            .collect()
    };
    let live_lines = of_types(&lines);
    let calls = lines.iter().filter(|v| v["type"] == "call").count();
    assert_eq!(calls, 2 * 6 * 2, "every call, client and server side");
    // Each connection ends while recording (its flow_end by the last report at the latest);
    // which are named `l7` depends on how far the threads read, the same live and replayed.
    let ends = lines
        .iter()
        .filter(|v| v["type"] == "flow_end" && v["peer"].as_str().unwrap().ends_with(&port))
        .count();
    assert!(
        ends >= 6,
        "6 client connections ended: {ends} flow_end lines"
    );
    let out = ebtop(&["-r", rec.to_str().unwrap(), "--json"]);
    assert!(out.status.success());
    assert_eq!(of_types(&json_lines(&out)), live_lines);
}

/// `--proto`: live (two ebtops side by side, with and without it), in a replay and in a
/// filtered copy, on HTTP traffic beside a TCP echo of bytes of no protocol ebtop knows
/// (captured thanks to --capture-all, so there is something to leave out).
#[test]
fn proto_selects_connections_live_in_replay_and_in_copies() {
    require_root();
    // One port, two protocols: HTTP answered, anything else echoed. The port filter keeps
    // out the traffic of tests running beside this one in the same process.
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for c in listener.incoming() {
            let Ok(mut c) = c else { return };
            std::thread::spawn(move || {
                let mut buf = [0u8; 4096];
                let mut pending = 0usize; // bytes of HTTP requests not yet answered
                while let Ok(n @ 1..) = std::io::Read::read(&mut c, &mut buf[pending..]) {
                    if !buf.starts_with(b"GET ") {
                        if c.write_all(&buf[..n]).is_err() {
                            return;
                        }
                        continue;
                    }
                    pending += n;
                    while let Some(end) = buf[..pending].windows(4).position(|w| w == b"\r\n\r\n") {
                        let body = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok";
                        if c.write_all(body).is_err() {
                            return;
                        }
                        buf.copy_within(end + 4..pending, 0);
                        pending -= end + 4;
                    }
                }
            });
        }
    });
    let port_s = port.to_string();
    let dir = tempfile::tempdir().unwrap();
    let rec = dir.path().join("mixed.ebt");
    let rec_s = rec.to_str().unwrap();
    let everything = Ebtop::start(&["--json", "--port", &port_s, "--capture-all", "-w", rec_s]);
    let http_only = Ebtop::start(&[
        "--json",
        "--port",
        &port_s,
        "--capture-all",
        "--proto",
        "http",
    ]);

    let s = TcpStream::connect(("127.0.0.1", port)).unwrap();
    let mut w = s.try_clone().unwrap();
    let mut r = BufReader::new(s);
    for _ in 0..4 {
        w.write_all(b"GET / HTTP/1.1\r\n\r\n").unwrap();
        assert_eq!(read_response(&mut r), (200, 2));
    }
    drop((w, r));
    let mut e = TcpStream::connect(("127.0.0.1", port)).unwrap();
    for i in 0..3u8 {
        let msg = [0x16, 0x03, 0x01, i, 0xff, 0x00, 0x42];
        e.write_all(&msg).unwrap();
        let mut back = [0u8; 7];
        std::io::Read::read_exact(&mut e, &mut back).unwrap();
        assert_eq!(back, msg);
    }
    drop(e);

    let all_lines = everything.stop();
    let http_lines = http_only.stop();
    let calls_of = |lines: &[Value]| -> Vec<String> {
        lines
            .iter()
            .filter(|v| v["type"] == "call")
            .map(|v| serde_json::to_string(v).unwrap())
            .collect()
    };
    let live_calls = calls_of(&all_lines);
    assert_eq!(live_calls.len(), 2 * 4);
    // Live, the selection leaves the echo connection out and the HTTP calls as they are
    // (timestamps aside: each ebtop's programs read the clock themselves).
    // Compared as sets: the two ebtops' rings are filled by the same programs on several CPUs,
    // so a client call and its server call can complete in either order in each.
    let untimed = |lines: &[Value]| -> Vec<String> {
        let mut calls: Vec<String> = lines
            .iter()
            .filter(|v| v["type"] == "call")
            .map(|v| {
                let mut v = v.clone();
                v.as_object_mut().unwrap().remove("ts");
                v.as_object_mut().unwrap().remove("latency_ns");
                serde_json::to_string(&v).unwrap()
            })
            .collect();
        calls.sort();
        calls
    };
    assert_eq!(untimed(&http_lines), untimed(&all_lines));
    let (all_sum, http_sum) = (all_lines.last().unwrap(), http_lines.last().unwrap());
    assert!(all_sum["tracker"]["unrecognised_events"].as_u64().unwrap() >= 12);
    assert_eq!(http_sum["tracker"]["unrecognised_events"], 0);
    assert_eq!(
        http_lines[0]["filters"]["proto"],
        serde_json::json!(["http"])
    );
    assert_eq!(all_lines[0]["filters"]["proto"], Value::Null);

    // Replay: the same with and without --proto, and exactly the echo's events filtered.
    let replay = |extra: &[&str]| -> Vec<Value> {
        let mut args = vec!["-r", rec_s, "--json"];
        args.extend_from_slice(extra);
        let out = ebtop(&args);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        json_lines(&out)
    };
    let all = replay(&[]);
    let http = replay(&["--proto", "http"]);
    assert_eq!(calls_of(&all), live_calls);
    assert_eq!(calls_of(&http), live_calls);
    let (a, h) = (all.last().unwrap(), http.last().unwrap());
    let n =
        |v: &Value, path: &[&str]| -> u64 { path.iter().fold(v, |v, k| &v[*k]).as_u64().unwrap() };
    assert_eq!(n(a, &["events"]), n(h, &["events"]));
    assert_eq!(n(h, &["tracker", "unrecognised_events"]), 0);
    assert_eq!(
        n(h, &["filtered_events"]),
        n(a, &["tracker", "data_events"]) - n(h, &["tracker", "data_events"])
            + n(a, &["tracker", "conns_closed"])
            - n(h, &["tracker", "conns_closed"]),
        "every event of the echo connection and nothing else"
    );
    assert_eq!(
        n(a, &["tracker", "data_events"]) - n(h, &["tracker", "data_events"]),
        n(a, &["tracker", "unrecognised_events"])
    );
    assert_eq!(http[0]["filters"]["proto"], serde_json::json!(["http"]));

    // A filtered copy holds only the HTTP connection's events and says so in its header.
    let copy = dir.path().join("http.ebt");
    let copy_s = copy.to_str().unwrap();
    let out = ebtop(&["-r", rec_s, "-w", copy_s, "--proto", "http"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let from_copy = {
        let out = ebtop(&["-r", copy_s, "--json"]);
        assert!(out.status.success());
        json_lines(&out)
    };
    assert_eq!(calls_of(&from_copy), live_calls);
    let c = from_copy.last().unwrap();
    assert_eq!(
        n(c, &["events"]),
        n(h, &["events"]) - n(h, &["filtered_events"])
    );
    assert_eq!(n(c, &["filtered_events"]), 0);
    assert_eq!(n(c, &["tracker", "unrecognised_events"]), 0);
    assert_eq!(
        from_copy[0]["filters"]["proto"],
        serde_json::json!(["http"])
    );
}

/// A recording of format minor 2, with process exec/exit records of short-lived clients.
const PROCS_FIXTURE: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/tests/fixtures/recordings/procs_mix.ebt"
);
const PROCS_FIXTURE_LINES: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/tests/fixtures/recordings/procs_mix.lines.jsonl"
);

#[test]
fn replay_of_process_records_describes_and_ends_processes_as_live() {
    let of_kinds = |out: &Output| -> Vec<String> {
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .filter(|l| {
                ["proc", "exit", "call"]
                    .iter()
                    .any(|k| l.contains(&format!("\"type\":\"{k}\"")))
            })
            .map(str::to_owned)
            .collect()
    };
    let out = golden_replay(PROCS_FIXTURE);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let want: Vec<String> = std::fs::read_to_string(PROCS_FIXTURE_LINES)
        .unwrap()
        .lines()
        .map(str::to_owned)
        .collect();
    assert_eq!(of_kinds(&out), want);
    let lines: Vec<Value> = want
        .iter()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let exits: Vec<(&str, Option<i64>, Option<i64>)> = lines
        .iter()
        .filter(|v| v["type"] == "exit")
        .map(|v| {
            (
                v["comm"].as_str().unwrap(),
                v["exit_code"].as_i64(),
                v["signal"].as_i64(),
            )
        })
        .collect();
    assert_eq!(
        exits,
        [
            ("curl", Some(0), None),
            ("curl", Some(22), None),
            ("python3", None, Some(15))
        ]
    );
    // The curls were gone before anything could read /proc: their description is the
    // exec record's.
    for v in lines
        .iter()
        .filter(|v| v["type"] == "proc" && v["comm"] == "curl")
    {
        assert!(v["exe"].as_str().unwrap().ends_with("/curl"), "{v}");
        assert_eq!(v["cmdline"][0], "curl");
    }
    let summary = json_lines(&out).pop().unwrap();
    assert!(summary["process_exits"].as_u64().unwrap() >= 3);
    assert_eq!(summary["decode_errors"], 0);

    // Filters apply to process records as to calls.
    let curl_only = Command::new(env!("CARGO_BIN_EXE_ebtop"))
        .args(["-r", PROCS_FIXTURE, "--json", "--comm", "curl"])
        .args(common::replay_args())
        .env("EBTOP_CHAINS", "0") // compared with the golden lines, as above
        .output()
        .unwrap();
    let got = of_kinds(&curl_only);
    let want_curl: Vec<&String> = want
        .iter()
        .filter(|l| l.contains("\"comm\":\"curl\""))
        .collect();
    assert_eq!(got.iter().collect::<Vec<_>>(), want_curl);
    let s = json_lines(&curl_only).pop().unwrap();
    assert_eq!(s["process_exits"], 2, "{s}");
}

/// `--threads`: connections tracked on worker threads give the serial output byte for byte
/// (results are applied in delivery order), for every committed recording, with user-space
/// filters, a protocol selection, and in filtered copies.
#[test]
fn tracking_threads_change_nothing_in_the_output() {
    let dir = tempfile::tempdir().unwrap();
    let fixtures = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/recordings");
    let mut recordings: Vec<PathBuf> = std::fs::read_dir(&fixtures)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "ebt"))
        .collect();
    recordings.sort();
    assert!(recordings.len() >= 3, "{recordings:?}");
    let extra: [&[&str]; 4] = [
        &[],
        &["--comm", "curl"],
        &["--proto", "http"],
        &["--depth", "shallow"],
    ];
    for rec in &recordings {
        let rec_s = rec.to_str().unwrap();
        for args in extra {
            let run = |threads: &str| {
                let mut a = vec!["-r", rec_s, "--json", "--threads", threads];
                a.extend_from_slice(args);
                let out = plain_ebtop(&a);
                assert!(
                    out.status.success(),
                    "{a:?}: {}",
                    String::from_utf8_lossy(&out.stderr)
                );
                out.stdout
            };
            let serial = run("1");
            assert!(serial.len() > 100, "{rec_s} {args:?}");
            for threads in ["2", "3", "7"] {
                assert!(
                    run(threads) == serial,
                    "{rec_s} {args:?}: --threads {threads} printed something else than one thread"
                );
            }
        }
        // A filtered copy written by a sharded replay replays like one written serially.
        let copy = |threads: &str| {
            let path = dir.path().join(format!("copy-{threads}.ebt"));
            let p = path.to_str().unwrap();
            let out = plain_ebtop(&[
                "-r",
                rec_s,
                "-w",
                p,
                "--force",
                "--comm",
                "curl",
                "--threads",
                threads,
            ]);
            assert!(
                out.status.success(),
                "{}",
                String::from_utf8_lossy(&out.stderr)
            );
            plain_ebtop(&["-r", p, "--json", "--threads", "1"]).stdout
        };
        assert!(copy("3") == copy("1"), "{rec_s}: filtered copies differ");
        // A recording cut short (no end record: its duration comes from the last record),
        // 3/5 into its frames (after the header: magic, version, u32 length, JSON).
        let bytes = std::fs::read(rec).unwrap();
        let header = 16 + u32::from_le_bytes(bytes[12..16].try_into().unwrap()) as usize;
        let cut_at = header + (bytes.len() - header) * 3 / 5;
        let cut = write_tmp(dir.path(), "cut.ebt", &bytes[..cut_at]);
        let cut_s = cut.to_str().unwrap();
        let serial = plain_ebtop(&["-r", cut_s, "--json", "--threads", "1"]);
        assert!(serial.status.success());
        assert!(
            plain_ebtop(&["-r", cut_s, "--json", "--threads", "3"]).stdout == serial.stdout,
            "{rec_s}: a truncated copy replays differently with threads"
        );
    }
}

#[test]
fn only_writes_the_chosen_line_types_and_the_stream_frame() {
    let all = json_lines(&ebtop(&["-r", FLOWS_FIXTURE, "--json"]));
    let out = ebtop(&["-r", FLOWS_FIXTURE, "--json", "--only", "flow_end,call"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let some = json_lines(&out);
    let types: std::collections::BTreeSet<&str> =
        some.iter().map(|v| v["type"].as_str().unwrap()).collect();
    assert_eq!(
        types,
        ["call", "flow_end", "meta", "summary"]
            .into_iter()
            .collect()
    );
    // The chosen lines are exactly those of the full stream, in the same order.
    let chosen: Vec<&Value> = all
        .iter()
        .filter(|v| v["type"] == "call" || v["type"] == "flow_end")
        .collect();
    let got: Vec<&Value> = some
        .iter()
        .filter(|v| v["type"] == "call" || v["type"] == "flow_end")
        .collect();
    assert!(chosen.iter().any(|v| v["type"] == "flow_end"));
    assert_eq!(got, chosen);
    assert_eq!(some.last().unwrap(), all.last().unwrap(), "same summary");
    // No flow line starts after the line's own time (RFC 3339 UTC strings sort as times).
    for v in all.iter().filter(|v| v["type"] == "flow") {
        assert!(v["start"].as_str() <= v["ts"].as_str(), "{v}");
    }
    for v in all.iter().filter(|v| v["type"] == "flow_end") {
        assert!(v["start"].as_str() <= v["end_time"].as_str(), "{v}");
        assert!(v.get("end").is_none(), "no field named after a jq keyword");
    }

    let refused = plain_ebtop(&["-r", FLOWS_FIXTURE, "--only", "call"]);
    assert_eq!(refused.status.code(), Some(2));
    let refused = plain_ebtop(&["-r", FLOWS_FIXTURE, "--json", "--only", "calls"]);
    assert_eq!(refused.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&refused.stderr).contains("known: proc, call"));
}

/// `--json --filter` keeps the call lines the expression selects and nothing else changes:
/// the kept calls are those of the unfiltered output that the same test, read from the
/// JSON fields, selects; endpoint, process and summary numbers stay over every call.
#[test]
fn json_filter_keeps_the_selected_calls_and_every_aggregate() {
    type Select = fn(&Value) -> bool;
    let dns = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/src/protocols/dns/fixtures/dns_mix.ebt"
    );
    let cases: [(&str, &str, Select); 4] = [
        (FIXTURE, "lat>1ms or err", |c| {
            c["latency_ns"].as_u64().unwrap() > 1_000_000
                || matches!(c["outcome"].as_str(), Some("server_error" | "client_error"))
        }),
        (FIXTURE, "status>=400 side:server", |c| {
            c["status"].as_u64().is_some_and(|s| s >= 400) && c["side"] == "server"
        }),
        (dns, "proto:dns !status:NOERROR", |c| {
            c["proto"] == "dns" && c["status_text"] != "NOERROR"
        }),
        (dns, "outcome:client_error", |c| {
            c["outcome"] == "client_error"
        }),
    ];
    for (recording, expr, select) in cases {
        let all = json_lines(&ebtop(&["-r", recording, "--json"]));
        let out = ebtop(&["-r", recording, "--json", "--filter", expr]);
        assert!(out.status.success(), "{expr}: {out:?}");
        let kept = json_lines(&out);
        let calls_of = |lines: &[Value]| -> Vec<Value> {
            lines
                .iter()
                .filter(|l| l["type"] == "call")
                .cloned()
                .collect()
        };
        let want: Vec<Value> = calls_of(&all).into_iter().filter(select).collect();
        assert!(
            !want.is_empty(),
            "{expr}: the recording has calls it selects"
        );
        assert!(
            want.len() < calls_of(&all).len(),
            "{expr}: and calls it leaves out"
        );
        assert_eq!(calls_of(&kept), want, "{expr}");
        // Everything but the call lines (and the count of those left out) is the same.
        let rest = |lines: &[Value]| -> Vec<Value> {
            lines
                .iter()
                .filter(|l| l["type"] != "call")
                .map(|l| {
                    let mut l = l.clone();
                    if let Some(o) = l.as_object_mut() {
                        o.remove("calls_filtered_out");
                    }
                    l
                })
                .collect()
        };
        assert_eq!(rest(&kept), rest(&all), "{expr}");
        let summary = kept.last().unwrap();
        let total = calls_of(&all).len() as u64;
        assert_eq!(summary["calls"], total, "{expr}");
        assert_eq!(
            summary["calls_filtered_out"],
            total - want.len() as u64,
            "{expr}"
        );
        assert_eq!(all.last().unwrap()["calls_filtered_out"], 0);
    }
}

/// A `--filter` that does not parse is a usage error that says why, in one line.
#[test]
fn a_bad_filter_is_a_usage_error_naming_the_word() {
    let out = plain_ebtop(&["-r", FIXTURE, "--json", "--filter", "lat>1ms or bogus>3"]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    let first = err.lines().next().unwrap_or_default();
    assert!(
        first.contains("bogus>3") && first.contains("fields: process"),
        "{err}"
    );
    assert!(out.stdout.is_empty());
    let out = plain_ebtop(&["-r", FIXTURE, "-w", "/dev/null", "--filter", "err"]);
    assert_eq!(out.status.code(), Some(2), "{out:?}");
}
