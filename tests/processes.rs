//! Process exec/exit records: real short-lived clients traced live (root), recorded, replayed.

mod common;

use std::process::Command;
use std::time::Duration;

use common::*;
use serde_json::Value;

#[test]
fn short_lived_clients_are_described_from_exec_and_their_exits_reported() {
    require_root();
    let server = TestServer::start();
    let port = server.port.to_string();
    let dir = tempfile::tempdir().unwrap();
    let rec = dir.path().join("procs.ebt");
    let rec_s = rec.to_str().unwrap();
    let ebtop = Ebtop::start(&["--json", "--port", &port, "-d", "300ms", "-w", rec_s]);
    let base = format!("http://127.0.0.1:{port}");

    // Exits 0 right after its call: gone before anyone could read its /proc entry.
    let ok_args = ["-s", "-o", "/dev/null", &format!("{base}/")].map(String::from);
    let ok = Command::new("curl").args(&ok_args).spawn().unwrap();
    let ok_pid = ok.id();
    assert!(ok.wait_with_output().unwrap().status.success());
    // -f: exits 22 on an HTTP error.
    let failing = Command::new("curl")
        .args(["-s", "-f", "-o", "/dev/null", &format!("{base}/missing")])
        .spawn()
        .unwrap();
    let failing_pid = failing.id();
    assert_eq!(failing.wait_with_output().unwrap().status.code(), Some(22));
    // Killed while its second request waits for a slow answer.
    let mut killed = Command::new("curl")
        .args(["-s", "-o", "/dev/null", "-o", "/dev/null"])
        .arg(format!("{base}/"))
        .arg(format!("{base}/sleep/3000/x"))
        .spawn()
        .unwrap();
    let killed_pid = killed.id();
    std::thread::sleep(Duration::from_millis(700));
    killed.kill().unwrap();
    killed.wait().unwrap();
    // Two more intervals: the one that reports the exits, and a quiet one.
    std::thread::sleep(Duration::from_millis(700));

    let lines = ebtop.stop();
    let of_pid = |ty: &str, pid: u32| -> Vec<(usize, &Value)> {
        lines
            .iter()
            .enumerate()
            .filter(|(_, v)| v["type"] == ty && v["pid"] == pid)
            .collect()
    };
    let me = std::process::id();
    for (pid, code, signal) in [
        (ok_pid, Some(0), None),
        (failing_pid, Some(22), None),
        (killed_pid, None, Some(libc::SIGKILL)),
    ] {
        let procs = of_pid("proc", pid);
        assert_eq!(procs.len(), 1, "one proc line for {pid}: {procs:?}");
        let p = procs[0].1;
        // From the exec record: the path execve was given, the arguments as passed.
        assert!(
            p["exe"].as_str().is_some_and(|e| e.ends_with("/curl")),
            "{p}"
        );
        assert_eq!(p["cmdline"][0], "curl");
        assert_eq!(p["comm"], "curl");
        let exits = of_pid("exit", pid);
        assert_eq!(exits.len(), 1, "one exit line for {pid}");
        let (at, e) = exits[0];
        assert_eq!(e["ppid"], me, "{e}");
        assert_eq!(e["exit_code"].as_i64(), code.map(i64::from), "{e}");
        assert_eq!(e["signal"].as_i64(), signal.map(i64::from), "{e}");
        assert_eq!(e["core_dumped"], false);
        // After the process's description and its calls.
        let calls = of_pid("call", pid);
        assert!(!calls.is_empty());
        assert!(calls.iter().all(|(i, _)| *i < at) && procs[0].0 < at);
    }
    let ok_proc = of_pid("proc", ok_pid)[0].1;
    let want: Vec<Value> = ok_args.iter().map(|a| Value::from(a.as_str())).collect();
    assert_eq!(ok_proc["cmdline"].as_array().unwrap()[1..], want[..]);

    let summary = lines.last().unwrap();
    assert!(summary["process_execs"].as_u64().unwrap() >= 3, "{summary}");
    assert!(summary["process_exits"].as_u64().unwrap() >= 3, "{summary}");
    assert_eq!(summary["kernel"]["proc_lost"], 0);
    assert!(summary["kernel"]["proc_events"].as_u64().unwrap() >= 6);

    // Recorded: the replay describes the same processes and reports the same exits.
    let out = Command::new(env!("CARGO_BIN_EXE_ebtop"))
        .args(["-r", rec_s, "--json"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let replayed: Vec<Value> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let proc_lines = |lines: &[Value]| -> Vec<Value> {
        lines
            .iter()
            .filter(|v| ["proc", "exit", "call"].contains(&v["type"].as_str().unwrap()))
            .cloned()
            .collect()
    };
    assert_eq!(proc_lines(&replayed), proc_lines(&lines));
    // The per-process lines mark each client exited once, at the same interval in the replay.
    let exited = |lines: &[Value]| -> Vec<(String, u64)> {
        lines
            .iter()
            .filter(|v| v["type"] == "process" && v["exited"] == true)
            .map(|v| {
                (
                    v["ts"].as_str().unwrap().to_owned(),
                    v["pid"].as_u64().unwrap(),
                )
            })
            .collect()
    };
    let live_exited = exited(&lines);
    for pid in [ok_pid, failing_pid, killed_pid] {
        assert_eq!(
            live_exited.iter().filter(|(_, p)| *p == pid as u64).count(),
            1,
            "{pid} in {live_exited:?}"
        );
    }
    assert_eq!(exited(&replayed), live_exited);
    let rs = replayed.last().unwrap();
    assert_eq!(rs["process_execs"], summary["process_execs"]);
    assert_eq!(rs["process_exits"], summary["process_exits"]);
}
