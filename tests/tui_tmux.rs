//! End to end: the TUI in a real terminal (tmux, 120×40, NO_COLOR), replaying the committed
//! recording: views, sort (and F6's menu), filter, search, the endpoint window, drill-down and
//! back, flow and process details, pause, quit with the terminal restored.
//! Needs tmux (scripts/deps installs it); root only for the live recording status line.

mod common;

use common::tmux::Tmux;
use std::process::Command;

const FIXTURE: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/tests/fixtures/recordings/http_mix.ebt"
);

/// A recording with the flow table's reports: flows and processes have details.
const FLOWS_FIXTURE: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/tests/fixtures/recordings/flows_mix.ebt"
);

fn selected_line(screen: &str) -> String {
    screen
        .lines()
        .find(|l| l.starts_with('>'))
        .unwrap_or_else(|| panic!("no selected row (>) on screen:\n{screen}"))
        .to_owned()
}

/// The Calls title says that every call kept matches the filter the pipeline applies
/// (`N of the last N matching`), and the replay is over: a kept filter's re-reading is done.
fn all_kept_match(screen: &str) -> bool {
    let Some(title) = screen.lines().find(|l| l.starts_with("Calls [")) else {
        return false;
    };
    let Some((_, counts)) = title.split_once("]: ") else {
        return false;
    };
    let words: Vec<&str> = counts.split_whitespace().collect();
    screen.contains("[ENDED]")
        && words.len() >= 6
        && words[1..4] == ["of", "the", "last"]
        && words[0] == words[4]
        && words[5] == "matching"
}

#[test]
fn tui_in_tmux_views_sort_filter_drill_pause_quit() {
    let t = Tmux::new();
    t.start_ebtop(&format!("-r '{FIXTURE}' --speed 1000"));

    // 1: calls, newest first, the whole recording (at 1000× it is over at once).
    let s = t.wait("the replay's end", |s| {
        s.contains("[ENDED]") && s.contains("calls 62")
    });
    assert!(s.contains("[1 Calls]"), "{s}");
    assert!(s.contains("/boom") && s.contains(" 500 "), "{s}");
    assert!(s.contains("! "), "errors marked without colour:\n{s}");
    assert!(selected_line(&s).contains("/boom"), "{s}");

    // 2-4: the other views.
    // (Each wait is for the whole screen: tmux may capture a frame being drawn.)
    t.keys(&["2"]);
    t.wait("endpoints", |s| {
        s.contains("[2 Endpoints]") && s.contains("/api/users/{id}") && s.contains("P99 ms")
    });
    t.keys(&["3"]);
    t.wait("connections", |s| {
        s.contains("[3 Flows]")
            && s.contains("127.0.0.1:18481")
            && s.contains("No flow table in this source")
    });
    t.keys(&["4"]);
    t.wait("processes", |s| {
        s.contains("[4 Processes]")
            && s.contains("COMMAND")
            && s.contains("curl")
            && s.contains("n/a (replay)")
    });

    // Sort the calls by the next column.
    t.keys(&["1", ">"]);
    let s = t.wait_for("sort PROCESS/PID");
    assert!(s.contains("PROCESS/PID↑"), "text sorts A→Z first: {s}");

    // Filter: only calls whose row mentions "users".
    t.literal("/users");
    t.keys(&["Enter"]);
    // Kept, it reads the replay again: the list then holds the matching calls only.
    let s = t.wait("the filtered rows", |s| {
        s.contains("filter \"users\"")
            && !s.contains("/boom")
            && s.contains("users/")
            && all_kept_match(s)
    });
    let rows: Vec<&str> = s
        .lines()
        .filter(|l| l.contains(" GET ") || l.contains(" POST "))
        .collect();
    assert!(!rows.is_empty(), "{s}");
    assert!(rows.iter().all(|l| l.contains("users")), "{s}");
    assert!(!s.contains("/boom"), "{s}");

    // Drill down from an endpoint to its calls, and back with the selection kept.
    t.keys(&["2"]);
    let s = t.wait("endpoints", |s| {
        s.contains("[2 Endpoints]") && s.lines().any(|l| l.starts_with('>'))
    });
    let first = selected_line(&s);
    t.keys(&["Down"]);
    let s = t.wait("the second row selected", |s| {
        s.lines().any(|l| l.starts_with('>')) && selected_line(s) != first
    });
    let chosen = selected_line(&s);
    t.keys(&["Enter"]);
    let s = t.wait_for("Calls of ");
    assert!(s.contains("[1 Calls]"), "{s}");
    t.keys(&["BSpace"]);
    let s = t.wait_for("[2 Endpoints]");
    assert_eq!(selected_line(&s), chosen, "selection kept after going back");

    // Pause and resume.
    t.keys(&["p"]);
    t.wait_for("PAUSED");
    t.keys(&["p"]);
    t.wait("resume", |s| !s.contains("PAUSED"));

    // Help, then quit: the process ends with status 0 and the shell's screen is back.
    t.keys(&["?"]);
    t.wait_for("Keys (any key closes)");
    t.keys(&["Escape"]);
    t.wait("help closed", |s| !s.contains("Keys (any key closes)"));
    t.keys(&["q"]);
    let s = t.wait("the exit status and tty mode", |s| {
        s.contains("ebtop exited") && s.contains("tty ")
    });
    assert!(s.contains("ebtop exited 0"), "{s}");
    assert!(s.contains("tty cooked"), "raw mode left on:\n{s}");
    assert!(
        !s.contains("[2 Endpoints]") && !s.contains("q quit"),
        "the UI is gone from the screen:\n{s}"
    );
    let cmd = t.run(&[
        "display-message",
        "-p",
        "-t",
        "ui",
        "#{pane_current_command}",
    ]);
    let cmd = String::from_utf8_lossy(&cmd.stdout);
    assert!(!cmd.contains("ebtop"), "ebtop still running: {cmd}");
}

#[test]
fn tui_in_tmux_sigterm_restores_the_terminal() {
    let t = Tmux::new();
    // At the recorded pace the replay is still running when the signal comes.
    t.start_ebtop(&format!("-r '{FIXTURE}'"));
    t.wait_for("[1 Calls]");
    let pane = t.run(&["display-message", "-p", "-t", "ui", "#{pane_pid}"]);
    let pane = String::from_utf8_lossy(&pane.stdout).trim().to_owned();
    let children = Command::new("pgrep").args(["-P", &pane]).output().unwrap();
    let pid = String::from_utf8_lossy(&children.stdout)
        .lines()
        .next()
        .expect("ebtop runs in the pane")
        .trim()
        .to_owned();
    assert!(Command::new("kill")
        .args(["-TERM", &pid])
        .status()
        .unwrap()
        .success());
    let s = t.wait("the exit status and tty mode", |s| {
        s.contains("ebtop exited") && s.contains("tty ")
    });
    assert!(s.contains("ebtop exited 0"), "{s}");
    assert!(s.contains("tty cooked"), "raw mode left on:\n{s}");
    assert!(
        !s.contains("[1 Calls]"),
        "the UI is gone from the screen:\n{s}"
    );
}

#[test]
fn times_are_local_with_the_date_and_utc_on_request() {
    // A POSIX TZ needs no zone files: 5 hours behind UTC, named EST.
    let t = Tmux::new();
    t.start_ebtop_with_env("TZ=EST5", &format!("-r '{FIXTURE}' --speed 1000"));
    let s = t.wait("the replay's end", |s| s.contains("[ENDED]"));
    // Ended, the header is where the progress line is: the session's end, past its last call.
    assert!(s.contains("at 2026-11-21 21:02:27.707 EST (+2.3s)"), "{s}");
    assert!(s.contains("] +2.3s of 2.3s"), "{s}");
    t.keys(&["q"]);
    t.wait_for("ebtop exited 0");

    // A zone with summer time: the November recording shows winter time (EST), whatever
    // the season it is replayed in.
    let t = Tmux::new();
    t.start_ebtop_with_env(
        "TZ=EST5EDT,M3.2.0,M11.1.0",
        &format!("-r '{FIXTURE}' --speed 1000"),
    );
    let s = t.wait("the replay's end", |s| s.contains("[ENDED]"));
    assert!(s.contains("at 2026-11-21 21:02:27.707 EST"), "{s}");
    t.keys(&["q"]);
    t.wait_for("ebtop exited 0");

    let t = Tmux::new();
    t.start_ebtop_with_env("TZ=EST5", &format!("-r '{FIXTURE}' --speed 1000 --utc"));
    let s = t.wait("the replay's end", |s| s.contains("[ENDED]"));
    assert!(s.contains("at 2026-11-22 02:02:27.707 UTC"), "{s}");
    t.keys(&["q"]);
    t.wait_for("ebtop exited 0");
}

#[test]
fn tui_in_tmux_field_filters_and_htop_keys() {
    let t = Tmux::new();
    t.start_ebtop(&format!("-r '{FIXTURE}' --speed 1000"));
    t.wait("the replay's end", |s| s.contains("[ENDED]"));
    // F4 opens the filter; a field comparison keeps the server errors only.
    t.keys(&["F4"]);
    t.literal("status>=500");
    t.keys(&["Enter"]);
    let s = t.wait("the server errors", |s| {
        s.contains("filter \"status>=500\"") && s.contains(" 500 ") && !s.contains(" 200 ")
    });
    let rows: Vec<&str> = s.lines().filter(|l| l.contains(" GET ")).collect();
    assert!(!rows.is_empty(), "{s}");
    assert!(rows.iter().all(|l| l.contains(" 500 ")), "{s}");
    // Esc in the prompt clears the filter: the replay is read again with every call.
    t.keys(&["/", "Escape"]);
    t.wait("the filter cleared", |s| {
        !s.contains("filter \"") && s.contains(" 200 ") && s.contains(" 500 ")
    });
    // Space pauses, as htop's users expect of a top.
    t.keys(&["Space"]);
    t.wait_for("PAUSED");
    t.keys(&["Space"]);
    t.wait("resumed", |s| !s.contains("PAUSED"));
    // F6, htop's "Sort by": a menu of the columns. q does not quit while it is open; Esc
    // closes it with the sort as it was.
    let menu_open = |s: &str| s.contains("┌ Sort by") && s.contains("Esc/F6: cancel");
    t.keys(&["F6"]);
    let s = t.wait("the sort menu", menu_open);
    assert!(
        s.contains("│> TIME        ↓ │"),
        "the cursor on the sort column:\n{s}"
    );
    t.keys(&["q", "Down"]);
    t.wait("the cursor on PROCESS/PID", |s| {
        s.contains("│> PROCESS/PID")
    });
    t.keys(&["Escape"]);
    let s = t.wait("the menu closed", |s| !menu_open(s));
    assert!(
        s.contains("[1 Calls]") && !s.contains("ebtop exited"),
        "{s}"
    );
    assert!(s.contains("sort TIME↓") && s.contains("TIME↓"), "{s}");
    // Enter on LAT ms (seven rows down): the header's mark and the column's arrow move there.
    t.keys(&["F6"]);
    t.wait("the sort menu", menu_open);
    t.keys(&["Down"; 7]);
    t.wait("the cursor on LAT ms", |s| s.contains("│> LAT ms"));
    t.keys(&["Enter"]);
    let s = t.wait("sorted by latency", |s| {
        !menu_open(s) && s.contains("sort LAT ms↓")
    });
    assert!(s.contains("LAT ms↓") && !s.contains("TIME↓"), "{s}");
    t.keys(&["q"]);
    t.wait_for("ebtop exited 0");
}

#[test]
fn tui_in_tmux_search_and_endpoint_window_keys() {
    let t = Tmux::new();
    t.start_ebtop(&format!("-r '{FIXTURE}' --speed 1000"));
    t.wait("the replay's end", |s| s.contains("[ENDED]"));
    // F3: the words typed show in the prompt line; Enter selects the first match below the
    // selection, hiding no row, and the Calls view holds it.
    t.keys(&["F3"]);
    t.literal("missing");
    t.wait_for("F3 search: missing_");
    t.keys(&["Enter"]);
    let s = t.wait("the match selected", |s| {
        !s.contains("F3 search:") && s.lines().any(|l| l.starts_with('>'))
    });
    assert!(selected_line(&s).contains("/missing"), "{s}");
    assert!(s.contains("[HELD, "), "{s}");
    assert!(s.contains(": 62 of the last 62"), "nothing hidden:\n{s}");
    // c cycles the Endpoints view's window: its title says it, and the header (120 columns
    // have room).
    t.keys(&["2"]);
    let s = t.wait_for("Endpoints, last 10 s");
    assert!(s.contains("window: last 10 s"), "{s}");
    t.keys(&["c"]);
    t.wait("the last minute", |s| {
        s.contains("Endpoints, last 1 min") && s.contains("window: last 1 min")
    });
    t.keys(&["c"]);
    t.wait("since the start", |s| {
        s.contains("Endpoints, since the start") && s.contains("window: since the start")
    });
    t.keys(&["c"]);
    t.wait("the last interval", |s| {
        s.contains("Endpoints, last interval") && s.contains("window: last interval")
    });
    t.keys(&["c"]);
    t.wait_for("window: last 10 s");
    t.keys(&["q"]);
    t.wait_for("ebtop exited 0");
}

#[test]
fn tui_in_tmux_enter_opens_flow_and_process_details() {
    let t = Tmux::new();
    t.start_ebtop(&format!("-r '{FLOWS_FIXTURE}' --speed 1000"));
    t.wait("the replay's end", |s| s.contains("[ENDED]"));
    // A TCP flow (found with F3): what the flow table said of it; Esc goes back.
    t.keys(&["3"]);
    t.wait("the flow table", |s| {
        s.contains("[3 Flows]")
            && s.contains("Kernel flow table")
            && s.lines().any(|l| l.starts_with('>'))
    });
    t.keys(&["F3"]);
    t.literal("tcp");
    t.keys(&["Enter"]);
    t.wait("a TCP flow selected", |s| {
        !s.contains("F3 search:")
            && s.lines().any(|l| l.starts_with('>'))
            && selected_line(s).contains(" tcp ")
    });
    t.keys(&["Enter"]);
    let s = t.wait("the flow's details", |s| {
        s.contains("Flow detail") && s.contains("Closed")
    });
    for what in ["Started", "Bytes      in ", "Retransmits", "Connect"] {
        assert!(s.contains(what), "{what}:\n{s}");
    }
    t.keys(&["Escape"]);
    t.wait("the details closed", |s| {
        !s.contains("Flow detail") && s.contains("[3 Flows]")
    });
    // A process: its command line, endpoints and flows.
    t.keys(&["4"]);
    t.wait("the processes", |s| {
        s.contains("[4 Processes]") && s.lines().any(|l| l.starts_with('>'))
    });
    t.keys(&["Enter"]);
    let s = t.wait("the process's details", |s| {
        s.contains("Process detail") && s.contains("Flows:")
    });
    for what in ["Command", "Executable", "Endpoints of ", "Sockets    in "] {
        assert!(s.contains(what), "{what}:\n{s}");
    }
    t.keys(&["Escape"]);
    t.wait("the details closed", |s| {
        !s.contains("Process detail") && s.contains("[4 Processes]")
    });
    t.keys(&["q"]);
    t.wait_for("ebtop exited 0");
}

#[test]
fn tui_in_tmux_replay_pace_and_skip_keys() {
    // At 0.01x the 2 s recording would take minutes: the keys make it go.
    let t = Tmux::new();
    t.start_ebtop(&format!("-r '{FIXTURE}' --speed 0.01"));
    t.wait_for("speed 0.01x");
    t.keys(&["]"]);
    t.wait_for("speed 0.02x");
    t.keys(&["["]);
    t.wait_for("speed 0.01x");
    // Skip 10 s ahead: past the end, with every call counted.
    t.keys(&["."]);
    let s = t.wait("the replay's end", |s| s.contains("[ENDED]"));
    assert!(s.contains("calls 62"), "{s}");
    // Back 10 s: before the recording's start, so it starts over at 0.01x (the last numbers
    // were kept until then); ahead again: the same 62 calls, none counted twice.
    t.keys(&[","]);
    let s = t.wait("the replay starts over", |s| {
        !s.contains("[ENDED]") && s.contains("speed 0.01x")
    });
    assert!(!s.contains("calls 62"), "{s}");
    t.keys(&["."]);
    let s = t.wait("the replay's end again", |s| s.contains("[ENDED]"));
    assert!(s.contains("calls 62"), "{s}");
    t.keys(&["q"]);
    t.wait_for("ebtop exited 0");
}

#[test]
fn recording_on_a_terminal_shows_a_live_status_line() {
    common::require_root();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("rec.ebt");
    let t = Tmux::new();
    t.start_ebtop(&format!("-w '{}' --duration 3s", path.display()));
    t.wait_for("written");
    let s = t.wait_for("ebtop exited 0");
    let status: Vec<&str> = s
        .lines()
        .filter(|l| l.starts_with("ebtop: recording "))
        .collect();
    assert_eq!(status.len(), 1, "one line, rewritten in place:\n{s}");
    assert!(
        status[0].contains(" events, ") && status[0].contains(" lost, "),
        "{s}"
    );
    assert!(path.exists());
}

/// The Endpoints view's rows as (side, method, resource) → CALLS cell, read off the screen.
fn endpoint_calls(screen: &str) -> std::collections::BTreeMap<(String, String, String), String> {
    let mut out = std::collections::BTreeMap::new();
    for line in screen.lines() {
        let words: Vec<&str> = line.split_whitespace().collect();
        let Some(i) = words.iter().position(|w| *w == "server" || *w == "client") else {
            continue;
        };
        let (Some(method), Some(resource), Some(calls)) =
            (words.get(i + 1), words.get(i + 2), words.get(i + 3))
        else {
            continue;
        };
        let key = (
            words[i].to_owned(),
            method.to_string(),
            resource.to_string(),
        );
        assert!(
            out.insert(key, calls.to_string()).is_none(),
            "one row per endpoint:\n{screen}"
        );
    }
    out
}

/// A count as the TUI's columns write it (below 1000 as is, then k, M with one decimal).
fn human(n: u64) -> String {
    let v = n as f64;
    if v < 999.95 {
        format!("{n}")
    } else if v < 999_950.0 {
        format!("{:.1}k", v / 1e3)
    } else {
        format!("{:.1}M", v / 1e6)
    }
}

/// At saturation the TUI shows `--json`'s numbers: keep-alive HTTP load as fast as the test
/// server answers is recorded, then the recording is replayed into the TUI as fast as the
/// replay goes (the UI may fall behind and drop call batches: only its Calls list may miss
/// them) and to `--json`. The header shows the summary's calls; every window of the
/// Endpoints view (10 s and 1 min when the recording is that short, since the start always)
/// shows each endpoint's count as the JSON summary has it, and the server endpoint's
/// drill-down its exact count since the start.
#[test]
fn tui_endpoint_counts_equal_json_at_saturation() {
    use std::io::{BufReader, Write};
    use std::time::{Duration, Instant};
    common::require_root();
    let server = common::TestServer::start();
    let port = server.port.to_string();
    let dir = tempfile::tempdir().unwrap();
    let rec = dir.path().join("load.ebt");
    let rec_s = rec.to_str().unwrap().to_owned();
    let live = common::Ebtop::start(&[
        "--json", "--only", "endpoint", "--port", &port, "-w", &rec_s,
    ]);
    // 4 keep-alive clients, each until 4000 requests or 3 s (a bound that holds under load).
    let clients: Vec<_> = (0..4)
        .map(|_| {
            let port = server.port;
            std::thread::spawn(move || {
                let s = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
                let mut w = s.try_clone().unwrap();
                let mut r = BufReader::new(s);
                let start = Instant::now();
                let mut n = 0u64;
                while n < 4000 && start.elapsed() < Duration::from_secs(3) {
                    w.write_all(b"GET / HTTP/1.1\r\n\r\n").unwrap();
                    common::read_response(&mut r);
                    n += 1;
                }
                n
            })
        })
        .collect();
    let sent: u64 = clients.into_iter().map(|c| c.join().unwrap()).sum();
    live.stop();

    let out = Command::new(env!("CARGO_BIN_EXE_ebtop"))
        .args(["-r", &rec_s, "--json", "--only", "endpoint"])
        .args(common::replay_args())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    let summary: serde_json::Value = serde_json::from_str(stdout.lines().last().unwrap()).unwrap();
    assert_eq!(summary["type"], "summary");
    let mut want = std::collections::BTreeMap::new();
    for e in summary["endpoints"].as_array().unwrap() {
        let key = (
            e["side"].as_str().unwrap().to_owned(),
            e["method"].as_str().unwrap().to_owned(),
            e["resource"].as_str().unwrap().to_owned(),
        );
        let calls = e["calls"].as_u64().unwrap();
        assert!(want.insert(key, calls).is_none(), "one process: {summary}");
    }
    let root = ("server".to_owned(), "GET".to_owned(), "/".to_owned());
    let root_calls = want.get(&root).copied().unwrap_or(0);
    assert!(
        root_calls > 0 && root_calls <= sent,
        "{sent} sent: {want:?}"
    );
    let want_cells: std::collections::BTreeMap<_, _> =
        want.iter().map(|(k, &n)| (k.clone(), human(n))).collect();
    let calls = summary["calls"].as_u64().unwrap();
    let duration_ns = summary["duration_ns"].as_u64().unwrap();

    let t = Tmux::new();
    t.start_ebtop(&format!("-r '{rec_s}' --speed 1000000"));
    // A liveness bound for a debug build under load, not a timing check.
    let deadline = Instant::now() + Duration::from_secs(180);
    let s = loop {
        let s = t.screen();
        if s.contains("[ENDED]") {
            break s;
        }
        assert!(Instant::now() < deadline, "no end:\n{s}");
        std::thread::sleep(Duration::from_millis(200));
    };
    assert!(
        s.contains(&format!("calls {calls} (")),
        "{calls} calls:\n{s}"
    );
    if let Some(w) = s.split("ui-dropped ").nth(1) {
        eprintln!(
            "the UI dropped {} calls",
            w.split_whitespace().next().unwrap()
        );
    }
    t.keys(&["2"]);
    for (window, applies) in [
        ("last 10 s", duration_ns <= 10_000_000_000),
        ("last 1 min", duration_ns <= 60_000_000_000),
        ("since the start", true),
    ] {
        let title = format!("Endpoints, {window}");
        let s = t.wait(&title, |s| {
            s.contains(&title) && s.lines().any(|l| l.starts_with('>'))
        });
        if applies {
            assert_eq!(endpoint_calls(&s), want_cells, "{window}:\n{s}");
        }
        if window != "since the start" {
            t.keys(&["c"]);
        }
    }
    // The server endpoint's calls since the start, exactly: its drill-down's latency bins.
    for _ in 0..want.len() {
        let s = t.screen();
        let line = selected_line(&s);
        if line.contains(" server ") && line.contains(" / ") {
            break;
        }
        t.keys(&["Down"]);
        t.wait("the selection moved", |s2| selected_line(s2) != line);
    }
    t.keys(&["Enter"]);
    let s = t.wait_for("Latency since the start (");
    assert!(
        s.contains(&format!("Latency since the start ({root_calls} calls)")),
        "{root_calls} calls:\n{s}"
    );
    // q leaves the drill-down first (k9s hands), then quits.
    t.keys(&["q"]);
    t.wait("back to the endpoints", |s| {
        !s.contains("Latency since the start (") && s.contains("Endpoints, since the start")
    });
    t.keys(&["q"]);
    t.wait_for("ebtop exited 0");
}

/// `--filter` shows in the header and keeps only its calls; a filter kept with Enter reads
/// the replay again, and the list holds the matching calls while every count stays.
#[test]
fn tui_in_tmux_command_line_and_kept_filters() {
    let t = Tmux::new();
    t.start_ebtop(&format!(
        "-r '{FIXTURE}' --speed 1000 --filter 'status>=400'"
    ));
    let s = t.wait("the replay's end", |s| {
        s.contains("[ENDED]") && s.contains("calls 62")
    });
    assert!(
        s.contains("--filter 'status>=400'") && s.contains("matching"),
        "{s}"
    );
    let rows = |s: &str| -> Vec<String> {
        s.lines()
            .filter(|l| l.contains("python3/") || l.contains("curl/"))
            .map(str::to_owned)
            .collect()
    };
    assert!(!rows(&s).is_empty(), "{s}");
    assert!(
        rows(&s)
            .iter()
            .all(|l| l.contains("/boom") || l.contains("/missing")),
        "{s}"
    );
    t.keys(&["/"]);
    t.literal("status:5xx");
    t.keys(&["Enter"]);
    let s = t.wait("the replay read again with the kept filter", |s| {
        all_kept_match(s)
            && s.contains("calls 62")
            && !rows(s).is_empty()
            && rows(s).iter().all(|l| l.contains("/boom"))
    });
    assert!(s.contains("filter \"status:5xx\""), "{s}");
    // `:` commands with k9s's hands: a prefix and Tab name the view, `sort` a column of it.
    t.keys(&[":"]);
    t.literal("endp");
    t.keys(&["Tab"]);
    t.wait("the verb completed", |s| s.contains(":endpoints_"));
    t.keys(&["Enter"]);
    t.wait("the Endpoints view", |s| has_header(s, "PROCESS", "P50 ms"));
    t.keys(&[":"]);
    t.literal("sort p50");
    t.keys(&["Enter"]);
    t.wait("sorted by P50", |s| has_header(s, "PROCESS", "P50 ms↓"));
    t.keys(&[":"]);
    t.literal("calls");
    t.keys(&["Enter"]);
    t.wait("the Calls view again", |s| has_header(s, "TIME", "LAT ms"));
    t.keys(&[":"]);
    t.literal("quit");
    t.keys(&["Enter"]);
    t.wait_exit();
}

/// DNS calls: `dnsmasq/PID`, `NXDOMAIN`, long query names.
const DNS_FIXTURE: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/src/protocols/dns/fixtures/dns_mix.ebt"
);

/// The table's header line (the one starting with `first`).
fn head_line(screen: &str, first: &str) -> String {
    screen
        .lines()
        .find(|l| l.trim_start().starts_with(first))
        .unwrap_or_else(|| panic!("no header {first}:\n{screen}"))
        .to_owned()
}

/// Whether a line starts (after blanks) with `first` and holds `text`: a table header that
/// may not be drawn yet.
fn has_header(screen: &str, first: &str, text: &str) -> bool {
    screen
        .lines()
        .any(|l| l.trim_start().starts_with(first) && l.contains(text))
}

/// Issue 44 item 6 at 80×24 and 160×45: the key columns stay, processes and statuses are
/// whole, the long column scrolls with Right/Left.
#[test]
fn tui_in_tmux_columns_follow_content_and_scroll() {
    for (w, h) in [(80, 24), (160, 45)] {
        let t = Tmux::new();
        t.start_ebtop_sized(w, h, "", &format!("-r '{DNS_FIXTURE}' --speed 1000"));
        let s = t.wait("the replay's end", |s| {
            s.contains("[ENDED]") && s.lines().any(|l| l.starts_with('>'))
        });
        let head = head_line(&s, "TIME");
        for title in [
            "TIME",
            "PROCESS/PID",
            "PROTO",
            "RESOURCE",
            "STATUS",
            "LAT ms",
        ] {
            assert!(head.contains(title), "{w}x{h}: {title}:\n{s}");
        }
        assert!(!s.contains("NXDOM~") && !s.contains("NOERR~"), "{s}");
        // No process cut (`dnsmasq/12~`).
        let cut: Vec<&str> = s
            .split_whitespace()
            .filter(|w| w.contains('/') && w.ends_with('~') && !w.starts_with('/'))
            .collect();
        assert!(cut.is_empty(), "{w}x{h}: {cut:?} cut:\n{s}");
        t.keys(&["2"]);
        let s = t.wait("endpoints", |s| {
            s.contains("[2 Endpoints]") && s.lines().any(|l| l.starts_with('>'))
        });
        let head = head_line(&s, "PROCESS");
        for title in ["CALLS", "SERR %", "P50 ms", "P99 ms"] {
            assert!(head.contains(title), "{w}x{h}: {title}:\n{s}");
        }
        t.keys(&["q"]);
        t.wait_for("ebtop exited 0");

        // The HTTP recording's processes: command lines long enough to be cut at 80 columns
        // scroll with Right (the title says how far) and come back with Left.
        let t = Tmux::new();
        t.start_ebtop_sized(w, h, "", &format!("-r '{FIXTURE}' --speed 1000"));
        t.wait("the replay's end", |s| s.contains("[ENDED]"));
        t.keys(&["4"]);
        let s = t.wait("processes", |s| {
            s.contains("[4 Processes]") && s.lines().any(|l| l.starts_with('>'))
        });
        // (At 160 columns too, curl's long command line is cut.)
        let cut = s.lines().any(|l| l.ends_with('~'));
        assert!(cut || w > 80, "{w}x{h}:\n{s}");
        t.keys(&["Right"]);
        if cut {
            t.wait("the command scrolled", |s| {
                head_line(s, "PID").contains("COMMAND +8")
            });
            t.keys(&["Left"]);
        }
        let s = t.wait("not scrolled", |s| {
            s.contains("[4 Processes]") && !head_line(s, "PID").contains("COMMAND +")
        });
        assert!(s.lines().any(|l| l.starts_with('>')), "{s}");
        t.keys(&["q"]);
        t.wait_for("ebtop exited 0");
    }
}

/// Issue 44 item 7 at 80×24 and 160×45: a held row stays on its screen line while the
/// replay brings newer calls above it; Enter opens it.
#[test]
fn tui_in_tmux_a_held_row_stays_in_place() {
    for (w, h) in [(80, 24), (160, 45)] {
        let t = Tmux::new();
        // 0.5x: the 2 s recording takes 4 s, calls arrive after the row is held.
        t.start_ebtop_sized(w, h, "", &format!("-r '{FIXTURE}' --speed 0.5"));
        t.wait("a few calls", |s| {
            s.lines()
                .filter(|l| l.contains("python3/") || l.contains("curl/"))
                .count()
                >= 3
                && !s.contains("[ENDED]")
        });
        t.keys(&["j"]);
        let s = t.wait("held", |s| s.contains("[HELD, "));
        let at = |s: &str| {
            s.lines()
                .position(|l| l.starts_with('>'))
                .map(|i| (i, s.lines().nth(i).unwrap()[1..].to_owned()))
        };
        let held = at(&s).expect("a selected row");
        let s = t.wait("the replay's end", |s| s.contains("[ENDED]"));
        assert!(!s.contains("[HELD, 0 newer"), "calls came above it:\n{s}");
        assert_eq!(at(&s), Some(held.clone()), "{w}x{h}:\n{s}");
        t.keys(&["Enter"]);
        let s = t.wait_for("Call detail");
        let time = held.1.split_whitespace().next().unwrap().to_owned();
        assert!(s.contains(&time), "the held call ({time}) opened:\n{s}");
        t.keys(&["q", "q"]);
        t.wait_for("ebtop exited 0");
    }
}

/// Where the header's progress line says the replay is, in seconds since the start.
fn progress_secs(screen: &str) -> Option<f64> {
    let line = screen.lines().find(|l| l.starts_with("replay ["))?;
    let (_, rest) = line.split_once("] +")?;
    rest.split_once("s of ")?.0.parse().ok()
}

/// Issue 44 item 8 at 80×24 and 160×45: the header's progress bar with the recording's
/// length from the start; `}` goes to the end, `{` back to the start, `:goto +1.5s` there.
#[test]
fn tui_in_tmux_replay_progress_start_end_and_goto() {
    // The recording's length as its replay to JSON reports it (the summary's duration).
    let out = Command::new(env!("CARGO_BIN_EXE_ebtop"))
        .args(["-r", FIXTURE, "--json"])
        .args(common::replay_args())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let summary: serde_json::Value = serde_json::from_str(stdout.lines().last().unwrap()).unwrap();
    let length = format!(
        "{:.1}s",
        summary["duration_ns"].as_u64().unwrap() as f64 / 1e9
    );
    for (w, h) in [(80, 24), (160, 45)] {
        let t = Tmux::new();
        // At 0.01x the 2 s recording would take minutes: only the keys move it.
        t.start_ebtop_sized(w, h, "", &format!("-r '{FIXTURE}' --speed 0.01"));
        let s = t.wait("the progress bar with the length", |s| {
            s.contains("replay [") && s.contains(&format!(" of {length}"))
        });
        assert!(!s.contains("[ENDED]"), "{s}");
        assert!(progress_secs(&s).is_some_and(|x| x < 1.0), "{s}");
        t.keys(&["}"]);
        let s = t.wait("the end", |s| {
            s.contains("[ENDED]") && s.contains("calls 62")
        });
        assert!(
            s.contains(&format!(
                "replay [████████████████████] +{length} of {length}"
            )),
            "{s}"
        );
        t.keys(&["{"]);
        t.wait("the start again", |s| {
            !s.contains("[ENDED]") && progress_secs(s).is_some_and(|x| x < 1.0)
        });
        t.literal(":goto +1.5s");
        t.wait_for(":goto +1.5s_");
        t.keys(&["Enter"]);
        let s = t.wait("1.5 s in", |s| {
            progress_secs(s).is_some_and(|x| (1.0..1.8).contains(&x))
        });
        assert!(!s.contains("[ENDED]"), "{s}");
        // A command it does not know is refused in the bottom line, saying what it takes.
        t.literal(":jump");
        t.keys(&["Enter"]);
        t.wait_for("unknown command \"jump\"");
        t.keys(&["q"]);
        t.wait_for("ebtop exited 0");
    }
}

/// Issue 44 item 10 (in part) at 80×24 and 160×45: with a filter, the Flows title counts the
/// flows it keeps; the header's sparkline says what it plots.
#[test]
fn tui_in_tmux_flows_summary_follows_the_filter_and_sparklines_are_named() {
    for (w, h) in [(80, 24), (160, 45)] {
        let t = Tmux::new();
        t.start_ebtop_sized(w, h, "", &format!("-r '{FLOWS_FIXTURE}' --speed 1000"));
        let s = t.wait("the replay's end", |s| s.contains("[ENDED]"));
        if w >= 120 {
            assert!(s.lines().next().unwrap().contains("calls/s "), "{s}");
        }
        t.keys(&["3"]);
        let s = t.wait("the flow table", |s| {
            s.contains("[3 Flows]") && s.lines().any(|l| l.starts_with('>'))
        });
        let counts = |s: &str| -> (usize, usize) {
            let title = s.lines().find(|l| l.starts_with("Flows")).unwrap();
            let words: Vec<&str> = title
                .split([' ', ',', ':'])
                .filter(|w| !w.is_empty())
                .collect();
            let before = |word: &str| -> usize {
                let i = words.iter().position(|w| *w == word).unwrap();
                words[i - 1].parse().unwrap()
            };
            (before("open"), before("ended"))
        };
        let (open, ended) = counts(&s);
        t.keys(&["/"]);
        t.literal("proto:udp");
        t.keys(&["Enter"]);
        let s = t.wait("the UDP flows", |s| {
            // (At 80 columns the header's line ends inside the quotes.)
            s.contains("filter \"proto:udp") && s.lines().any(|l| l.starts_with('>'))
        });
        let rows = s
            .lines()
            .filter(|l| l.len() > 2 && l[2..].trim_start().starts_with("127.0.0.1:"))
            .count();
        let (u_open, u_ended) = counts(&s);
        assert_eq!(u_open + u_ended, rows, "{w}x{h}:\n{s}");
        assert!(u_open + u_ended < open + ended, "{w}x{h}:\n{s}");
        // The flow table's panel is whole, its last count too (never `los`).
        assert!(
            s.lines().any(
                |l| (l.starts_with("Not counted") || l.starts_with("Uncounted"))
                    && l.contains(" lost ")
                    && l.contains("evicted ")
            ),
            "{w}x{h}:\n{s}"
        );
        t.keys(&["q"]);
        t.wait_for("ebtop exited 0");
    }
}

/// Processes, live: short-lived processes of one command that exited in an interval are one
/// row (`▸ curl ×3 exited`), which Enter opens into its members (one row per pid, under it)
/// and closes again, at 80×24 and 160×45. The view shows the last interval: three curls run
/// at once (again if an interval's end split them), and the display is paused once their row
/// is there.
#[test]
fn tui_in_tmux_exited_processes_are_one_row_that_opens() {
    common::require_root();
    let srv = common::TestServer::start();
    let url = format!("http://127.0.0.1:{}/", srv.port);
    for (w, h) in [(80, 24), (160, 45)] {
        let t = Tmux::new();
        t.start_ebtop_sized(w, h, "", &format!("--port {}", srv.port));
        t.wait_for("[1 Calls]");
        t.keys(&["4"]);
        t.wait_for("[4 Processes]");
        // (At 80 columns the command column ends inside "exited".)
        let group = "▸ curl ×3";
        let mut shown = false;
        for _ in 0..20 {
            let curls: Vec<std::process::Child> = (0..3)
                .map(|_| {
                    Command::new("curl")
                        .args(["-s", "-o", "/dev/null", "-m", "5", &url])
                        .spawn()
                        .expect("curl runs")
                })
                .collect();
            for mut c in curls {
                c.wait().unwrap();
            }
            // The interval they exited in is shown within two refreshes.
            let deadline = std::time::Instant::now() + std::time::Duration::from_secs(3);
            while std::time::Instant::now() < deadline {
                if t.screen().contains(group) {
                    t.keys(&["p"]);
                    // A refresh may come between the look and the key: then the display
                    // paused on the next interval, without the group. Resume and try again.
                    let paused = t.wait("the display paused", |s| s.contains("PAUSED"));
                    shown = paused.contains(group);
                    if !shown {
                        t.keys(&["p"]);
                        t.wait("the display resumed", |s| !s.contains("PAUSED"));
                    }
                    break;
                }
                std::thread::sleep(std::time::Duration::from_millis(50));
            }
            if shown {
                break;
            }
        }
        assert!(
            shown,
            "{w}x{h}: no interval showed {group} while paused:\n{}",
            t.screen()
        );
        let s = t.wait("the display paused on the group", |s| {
            s.contains("PAUSED") && s.contains(group)
        });
        let member_rows = |s: &str| {
            s.lines()
                .filter(|l| l.contains("curl") && !l.contains("×3"))
                .count()
        };
        assert_eq!(member_rows(&s), 0, "{w}x{h}: members hidden:\n{s}");
        // Selected by search, then opened: its three members under it.
        t.keys(&["F3"]);
        t.literal("curl ×3");
        t.keys(&["Enter"]);
        t.wait("the group selected", |s| {
            !s.contains("F3 search:") && selected_line(s).contains("curl ×3")
        });
        t.keys(&["Enter"]);
        let s = t.wait("the group open", |s| s.contains("▾ curl ×3"));
        let lines: Vec<&str> = s.lines().collect();
        let at = lines.iter().position(|l| l.contains("▾ curl ×3")).unwrap();
        let members = lines[at + 1..]
            .iter()
            .take(3)
            .filter(|l| l.contains("curl"))
            .count();
        assert_eq!(members, 3, "{w}x{h}: the members under the group:\n{s}");
        // Enter on the open group closes it.
        t.keys(&["Enter"]);
        let s = t.wait("the group closed", |s| s.contains(group));
        assert_eq!(member_rows(&s), 0, "{w}x{h}: members hidden again:\n{s}");
        t.keys(&["q"]);
        t.wait_for("ebtop exited 0");
    }
}

/// A python3 HTTP server on an ephemeral port of 127.0.0.1 (its comm is `python3`); killed
/// on drop.
struct PyServer {
    child: std::process::Child,
    port: u16,
}

impl PyServer {
    fn start() -> PyServer {
        use std::io::BufRead;
        let mut child = Command::new("python3")
            .args([
                "-c",
                "import http.server\n\
                 s = http.server.ThreadingHTTPServer(('127.0.0.1', 0), http.server.BaseHTTPRequestHandler)\n\
                 class H(http.server.BaseHTTPRequestHandler):\n\
                 \x20   def do_GET(self):\n\
                 \x20       self.send_response(200); self.send_header('Content-Length', '2'); self.end_headers(); self.wfile.write(b'ok')\n\
                 \x20   def log_message(self, *a): pass\n\
                 s.RequestHandlerClass = H\n\
                 print(s.server_address[1], flush=True)\n\
                 s.serve_forever()\n",
            ])
            .stdout(std::process::Stdio::piped())
            .spawn()
            .expect("python3 runs");
        let mut line = String::new();
        std::io::BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        let port = line.trim().parse().expect("the server's port");
        PyServer { child, port }
    }
}

impl Drop for PyServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Issue 44 items 3 and 10, live at 80×24 and 160×45: two python3 servers are one endpoint
/// row by command and two by process (`b`), and a row by process opens into that process's
/// calls only; F5 shows the Processes view as a tree (a python3 client under its python3
/// parent, both making calls); `b` there groups the four python3 processes into one row.
#[test]
fn tui_in_tmux_rows_by_process_or_command_and_the_tree() {
    common::require_root();
    let (a, b) = (PyServer::start(), PyServer::start());
    // A client (the parent) that starts a client of its own; both call both servers until
    // their parent is gone or 120 s passed.
    let dir = std::env::temp_dir().join(format!("ebtop-tree-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let script = dir.join("client.py");
    std::fs::write(
        &script,
        format!(
            "import os, sys, time, subprocess, urllib.request\n\
             if len(sys.argv) == 1:\n\
             \x20   c = subprocess.Popen([sys.executable, __file__, 'child'])\n\
             \x20   open(__file__ + '.pids.tmp', 'w').write('%d %d' % (os.getpid(), c.pid))\n\
             \x20   os.rename(__file__ + '.pids.tmp', __file__ + '.pids')\n\
             parent, end = os.getppid(), time.time() + 120\n\
             while time.time() < end and os.getppid() == parent:\n\
             \x20   for p in ({}, {}):\n\
             \x20       urllib.request.urlopen('http://127.0.0.1:%d/' % p).read()\n\
             \x20   time.sleep(0.02)\n",
            a.port, b.port
        ),
    )
    .unwrap();
    let mut parent = Command::new("python3").arg(&script).spawn().unwrap();
    // The client's pid and its child's, as the client wrote them.
    let pids_file = dir.join("client.py.pids");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    let (ppid, child) = loop {
        if let Ok(text) = std::fs::read_to_string(&pids_file) {
            let mut pids = text.split_whitespace().map(str::to_owned);
            break (pids.next().unwrap(), pids.next().unwrap());
        }
        assert!(std::time::Instant::now() < deadline, "the client never ran");
        std::thread::sleep(std::time::Duration::from_millis(50));
    };
    let (srv_a, srv_b) = (a.child.id(), b.child.id());
    for (w, h) in [(80, 24), (160, 45)] {
        let t = Tmux::new();
        t.start_ebtop_sized(w, h, "", &format!("--port {},{}", a.port, b.port));
        t.wait_for("[1 Calls]");
        t.keys(&["2"]);
        t.wait("the server endpoint by command", |s| {
            s.contains(", by command:")
                && s.lines()
                    .any(|l| l.contains("python3 ") && l.contains("server"))
        });
        t.keys(&["b"]);
        t.wait("a server row per process", |s| {
            s.contains(", by process:")
                && s.contains(&format!("python3/{srv_a}"))
                && s.contains(&format!("python3/{srv_b}"))
        });
        // A row by process opens into its process's calls only.
        t.keys(&["F3"]);
        t.literal(&format!("python3/{srv_a}"));
        t.keys(&["Enter"]);
        t.wait("server a's row selected", |s| {
            !s.contains("F3 search:") && selected_line(s).contains(&format!("python3/{srv_a}"))
        });
        t.keys(&["Enter"]);
        let s = t.wait("server a's calls", |s| {
            s.contains(&format!("Calls of python3/{srv_a}"))
                && s.lines()
                    .any(|l| l.contains(&format!("python3/{srv_a}")) && l.contains("GET"))
        });
        let rows: Vec<&str> = s.lines().filter(|l| l.contains("python3/")).collect();
        assert!(
            rows.iter().all(|l| l.contains(&format!("python3/{srv_a}"))),
            "{w}x{h}: only server a's calls:\n{s}"
        );
        // The tree: the child right under its parent, with a branch.
        t.keys(&["Escape", "4", "F5"]);
        let s = t.wait("the tree", |s| {
            s.contains(", tree:")
                && s.lines()
                    .any(|l| l.contains("└─") && l.trim_start().starts_with(&child))
        });
        let lines: Vec<&str> = s.lines().collect();
        let at = lines
            .iter()
            .position(|l| l.contains("└─") && l.contains(&format!(" {child} ")))
            .unwrap();
        assert!(
            lines[at - 1]
                .trim_start()
                .trim_start_matches('>')
                .trim_start()
                .starts_with(&ppid),
            "{w}x{h}: the child under its parent:\n{s}"
        );
        // By command: the four python3 processes are one row.
        t.keys(&["b"]);
        t.wait("python3 by command", |s| {
            s.contains(", by command:") && s.contains("python3 ×4")
        });
        t.keys(&["q"]);
        t.wait_for("ebtop exited 0");
    }
    let _ = parent.kill();
    let _ = parent.wait();
    let _ = std::fs::remove_dir_all(&dir);
}

/// The Profile view in a real terminal, from a recording made with `--profile`: the tree opens
/// on the hottest path, `o` shows off-CPU time, `/` searches, Esc goes back, q quits.
#[test]
fn tui_in_tmux_profile_view() {
    let fixture = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/fixtures/recordings/profile_burn.ebt"
    );
    let t = Tmux::new();
    t.start_ebtop(&format!("-r '{fixture}' --speed 1000"));
    t.wait("the replay's end", |s| s.contains("[ENDED]"));
    t.keys(&["5"]);
    let s = t.wait("the profile", |s| {
        s.contains("[5 Profile]") && s.contains("on-CPU samples of all processes")
    });
    assert!(
        s.contains("▾ main") && s.contains("hot") && s.contains("warm"),
        "{s}"
    );
    t.keys(&["o"]);
    t.wait("off-CPU time", |s| {
        s.contains("off-CPU time of all processes") && s.contains("[interruptible]")
    });
    t.keys(&["o", "/"]);
    t.literal("warm");
    t.keys(&["Enter"]);
    let s = t.wait("the search", |s| s.contains("search \"warm\""));
    assert!(!s.contains(" hot"), "only the paths to matches:\n{s}");
    t.keys(&["Escape"]);
    t.wait("back to calls", |s| {
        s.contains("[1 Calls]") && !s.contains("Profile:")
    });
    t.keys(&["q"]);
    let s = t.wait("the exit status", |s| s.contains("ebtop exited"));
    assert!(s.contains("ebtop exited 0"), "{s}");
}
