//! The binary's behaviour at its edges: errors, exit codes, pipes, signals.

mod common;

use std::io::{BufRead, BufReader, Write};
use std::net::TcpStream;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::*;

fn ebtop() -> Command {
    Command::new(env!("CARGO_BIN_EXE_ebtop"))
}

#[test]
fn unknown_flag_is_a_one_line_usage_error() {
    let out = ebtop().arg("--bogus").output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("unexpected argument '--bogus'"), "{err}");
    assert!(out.stdout.is_empty());
}

#[test]
fn bad_values_are_rejected_with_the_reason() {
    for (args, needle) in [
        (&["--json", "--snaplen", "99999"][..], "99999"),
        (&["--json", "--duration", "soon"][..], "examples: 10s"),
        (&["--json", "--ringbuf-mb", "3"][..], "power of two"),
    ] {
        let out = ebtop().args(args).output().unwrap();
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(needle), "{args:?}: {err}");
    }
}

const RECORDING: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/tests/fixtures/recordings/http_mix.ebt"
);

#[test]
fn options_that_would_do_nothing_are_refused_with_the_reason() {
    for (args, needle) in [
        (
            &["-r", RECORDING, "--json", "--snaplen", "100"][..],
            "--snaplen applies to live capture",
        ),
        (
            &["-r", RECORDING, "--json", "--hooks", "socket"][..],
            "--hooks applies",
        ),
        (
            &["-r", RECORDING, "--json", "--duration", "1s"][..],
            "--duration applies",
        ),
        (
            &["-r", RECORDING, "--json", "--speed", "2"][..],
            "--speed paces",
        ),
        (&["--json", "--speed", "2"][..], "--speed paces"),
        (&["--json", "--utc"][..], "--utc applies to the terminal UI"),
        (&["-r", RECORDING, "--from", "+1s"][..], "--from/--to pick"),
        (&["--json", "--to", "+1s"][..], "--from/--to pick"),
        (&["--only", "call"][..], "--json"),
        (&["--overhead-programs"][..], "--json"),
        (
            &["--json", "--port", "1,2,3,4,5", "--port", "6,7,8,9"][..],
            "--port takes at most 8 values (given 9)",
        ),
    ] {
        let out = ebtop().args(args).output().unwrap();
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(needle), "{args:?}: {err}");
        assert!(out.stdout.is_empty(), "{args:?}");
    }
    // What a replay does use is accepted.
    let out = ebtop()
        .args([
            "-r",
            RECORDING,
            "--json",
            "--threads",
            "2",
            "--depth",
            "shallow",
        ])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn completions_are_printed_for_each_shell() {
    for (shell, needle, option) in [
        ("bash", "complete -F _ebtop", "--only"),
        ("zsh", "#compdef ebtop", "--only"),
        ("fish", "complete -c ebtop", "-l only"),
    ] {
        let out = ebtop().args(["completions", shell]).output().unwrap();
        assert!(out.status.success(), "{shell}");
        let script = String::from_utf8_lossy(&out.stdout);
        assert!(script.contains(needle), "{shell}: {script}");
        assert!(script.contains(option), "{shell}: options listed");
    }
    let out = ebtop().args(["completions", "tcsh"]).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
}

#[test]
fn help_names_no_file_that_a_copied_binary_lacks() {
    let out = ebtop().arg("--help").output().unwrap();
    let help = String::from_utf8_lossy(&out.stdout);
    for file in ["docs/", ".md", "man/", "README"] {
        assert!(!help.contains(file), "--help mentions {file}: {help}");
    }
}

/// `--help` carries the terminal UI's keys (a copied binary has no man page beside it);
/// `-h` stays short.
#[test]
fn long_help_lists_every_key() {
    let out = ebtop().arg("--help").output().unwrap();
    let help = String::from_utf8_lossy(&out.stdout);
    let keys = help
        .split_once("Keys (terminal UI):")
        .unwrap_or_else(|| panic!("no keys in --help: {help}"))
        .1;
    for k in ebtop::tui::keys::KEYS {
        let line = k.keys.join(" ");
        assert!(
            keys.lines()
                .any(|l| l.trim_start().starts_with(&line) && l.ends_with(k.action)),
            "--help lacks {line}: {}",
            k.action
        );
    }
    let short = ebtop().arg("-h").output().unwrap();
    assert!(!String::from_utf8_lossy(&short.stdout).contains("Keys (terminal UI)"));
}

/// `-r FILE --json --from T --to T`: the call lines of the calls completed in the range, as
/// the whole replay wrote them; a time that does not parse says which forms it takes.
#[test]
fn a_replay_to_json_takes_a_time_range() {
    let lines = |args: &[&str]| -> Vec<serde_json::Value> {
        let out = ebtop()
            .args(["-r", RECORDING, "--json"])
            .args(args)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect()
    };
    // When a call line's call completed, in Unix ns.
    let done = |c: &serde_json::Value| -> u128 {
        let ts = humantime::parse_rfc3339(c["ts"].as_str().unwrap()).unwrap();
        ts.duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos()
            + u128::from(c["latency_ns"].as_u64().unwrap())
    };
    let calls = |v: &[serde_json::Value]| -> Vec<serde_json::Value> {
        v.iter().filter(|l| l["type"] == "call").cloned().collect()
    };
    let all = lines(&[]);
    let mut times: Vec<u128> = calls(&all).iter().map(done).collect();
    times.sort_unstable();
    let (from, to) = (times[5], times[times.len() - 5]);
    let rfc = |ns: u128| {
        humantime::format_rfc3339_nanos(
            std::time::UNIX_EPOCH + std::time::Duration::from_nanos(ns as u64),
        )
        .to_string()
    };
    let some = lines(&["--from", &rfc(from), "--to", &rfc(to)]);
    let want: Vec<serde_json::Value> = calls(&all)
        .into_iter()
        .filter(|c| (from..=to).contains(&done(c)))
        .collect();
    assert!(!want.is_empty() && want.len() < calls(&all).len());
    assert_eq!(calls(&some), want);
    assert_eq!(some.last().unwrap()["type"], "summary");
    assert_eq!(
        some.last().unwrap()["calls"],
        all.last().unwrap()["calls"],
        "the summary is the whole recording's"
    );
    // An offset from the start: nothing before it.
    let late = lines(&["--from", "+1s"]);
    assert!(!calls(&late).is_empty() && calls(&late).len() < calls(&all).len());
    let out = ebtop()
        .args(["-r", RECORDING, "--json", "--from", "soon"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("+30s"));
}

#[test]
fn tui_refuses_when_stdout_is_not_a_terminal() {
    let out = ebtop().stdout(Stdio::piped()).output().unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("--json"), "{err}");
    assert_eq!(err.lines().count(), 1, "{err}");
}

#[test]
fn without_root_it_says_so_in_one_line() {
    // Dropping privileges needs root in the first place; CI runs as root.
    require_root();
    let out = Command::new("setpriv")
        .args([
            "--reuid=65534",
            "--regid=65534",
            "--clear-groups",
            "--inh-caps=-all",
        ])
        .arg(env!("CARGO_BIN_EXE_ebtop"))
        .args(["--json", "--duration", "1s"])
        .output()
        .expect("setpriv (util-linux) is installed");
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.starts_with("ebtop: error: ebtop needs root"), "{err}");
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(out.stdout.is_empty(), "no output before the error");
}

#[test]
fn head_closing_the_pipe_exits_zero_quietly() {
    require_root();
    let server = TestServer::start();
    let port = server.port.to_string();
    let cmd = format!(
        "set -o pipefail; {} --json --port {port} --duration 30s | head -3",
        env!("CARGO_BIN_EXE_ebtop")
    );
    let mut sh = Command::new("bash")
        .args(["-c", &cmd])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut out = BufReader::new(sh.stdout.take().unwrap());
    let mut first = String::new();
    out.read_line(&mut first).unwrap();
    assert!(first.contains("\"meta\""), "{first}");
    // Traffic until head has its 3 lines and ebtop notices the closed pipe.
    let started = Instant::now();
    while sh.try_wait().unwrap().is_none() {
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "ebtop did not exit"
        );
        if let Ok(mut s) = TcpStream::connect(("127.0.0.1", server.port)) {
            let _ = s.write_all(b"GET / HTTP/1.1\r\n\r\n");
            let mut r = BufReader::new(s);
            read_response(&mut r);
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let status = sh.wait().unwrap();
    let mut err = String::new();
    std::io::Read::read_to_string(&mut sh.stderr.take().unwrap(), &mut err).unwrap();
    assert!(status.success(), "pipeline status {status}, stderr {err}");
    assert!(err.is_empty(), "stderr: {err}");
}

#[test]
fn sigterm_and_duration_end_with_a_summary() {
    require_root();
    // SIGTERM
    let e = Ebtop::start(&["--json", "--port", "9"]);
    let lines = {
        let mut e = e;
        e.signal(libc::SIGTERM);
        e.finish()
    };
    assert_eq!(lines.last().unwrap()["type"], "summary");
    // --duration
    let started = Instant::now();
    let out = ebtop()
        .args(["--json", "--port", "9", "--duration", "1s"])
        .output()
        .unwrap();
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    let last = text.lines().last().unwrap();
    assert!(last.contains("\"type\":\"summary\""), "{last}");
    assert!(started.elapsed() < Duration::from_secs(30));
}

#[test]
fn a_pid_that_is_not_running_is_warned_about() {
    require_root();
    let pid = (100_000..4_000_000u32)
        .rev()
        .find(|p| !std::path::Path::new(&format!("/proc/{p}")).exists())
        .unwrap();
    let out = ebtop()
        .args(["--json", "--duration", "1s", "--pid", &pid.to_string()])
        .output()
        .unwrap();
    assert!(out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains(&format!("no process {pid} is running")),
        "{err}"
    );
    assert_eq!(err.lines().count(), 1, "{err}");
}
