//! Secrets never reach what a person reads, end to end with the real binary: query and path
//! parameter values named like secrets, secret-looking headers, URLs' credentials and secrets
//! inside header values, and secret arguments of a client's command line, live (`--json`), in
//! the recording's replay (`--json`, with and without `--raw-resources`) and in the TUI's
//! lists and details on that replay (tmux). Needs root (live capture), curl and tmux.

mod common;

use std::io::{BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::process::Command;
use std::thread;

use common::tmux::Tmux;
use common::*;
use serde_json::Value;

/// Every secret the client and the server send; none may show anywhere.
const SECRETS: &[&str] = &[
    "QryTok1",
    "QrySig2",
    "HdrKey3",
    "HdrCsrf4",
    "RefPw5",
    "LocPw6",
    "CookieSid7",
    "PathSid8",
    "RefUserPw9",
    "ArgTok10",
    "ArgPw11",
    "UrlPw12",
    "CurlUserPw13",
];

/// The request: secrets in the path and the query, in headers whose names look secret (not in
/// the fixed list of old: `X-Api-Key` was, `X-CSRF-Token` was not) and in a URL-valued header
/// (its credentials and its query).
const REQUEST: &[u8] = b"GET /cb;jsessionid=PathSid8?token=QryTok1&sig=QrySig2 HTTP/1.1\r\n\
    Host: test\r\nX-Api-Key: HdrKey3\r\nX-CSRF-Token: HdrCsrf4\r\n\
    Referer: http://ann:RefUserPw9@app/cb?password=RefPw5\r\n\r\n";

/// A client whose command line carries secrets (an option's value, a URL's credentials, a
/// header, the query, `-u user:password`): `curl` asks for the same resource.
fn curl_args(port: u16) -> Vec<String> {
    [
        "-s",
        "-o",
        "/dev/null",
        "--oauth2-bearer",
        "ArgTok10",
        "--pass",
        "ArgPw11",
        "-u",
        "ann:CurlUserPw13",
        "-H",
        "X-Api-Key: HdrKey3",
    ]
    .iter()
    .map(|s| s.to_string())
    .chain([format!(
        "http://ann:UrlPw12@127.0.0.1:{port}/cb;jsessionid=PathSid8?token=QryTok1&sig=QrySig2"
    )])
    .collect()
}

/// How curl's command line must show.
fn curl_shown(port: u16) -> String {
    format!(
        "curl -s -o /dev/null --oauth2-bearer [redacted] --pass [redacted] -u ann:[redacted] \
         -H X-Api-Key: [redacted] http://ann:[redacted]@127.0.0.1:{port}{RESOURCE}"
    )
}

/// The answer: a redirect with a password in its `Location`'s query, and a session cookie.
const RESPONSE: &[u8] = b"HTTP/1.1 302 Found\r\nLocation: /login?password=LocPw6\r\n\
    Set-Cookie: sid=CookieSid7\r\nContent-Length: 0\r\n\r\n";

/// The request's resource as every output must show it.
const RESOURCE: &str = "/cb;jsessionid=[redacted]?token=[redacted]&sig=[redacted]";

/// A keep-alive server that answers every request head with [`RESPONSE`].
fn redirecting_server() -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    thread::spawn(move || {
        for conn in listener.incoming() {
            let Ok(mut c) = conn else { return };
            thread::spawn(move || {
                let mut buf = Vec::new();
                let mut tmp = [0u8; 4096];
                loop {
                    while let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                        buf.drain(..end + 4);
                        if c.write_all(RESPONSE).is_err() {
                            return;
                        }
                    }
                    match c.read(&mut tmp) {
                        Ok(0) | Err(_) => return,
                        Ok(n) => buf.extend_from_slice(&tmp[..n]),
                    }
                }
            });
        }
    });
    port
}

fn assert_no_secret(what: &str, text: &str) {
    for s in SECRETS {
        assert!(!text.contains(s), "{what}: {s} shows in\n{text}");
    }
}

/// The screen shows each of `shown` (redacted forms, where the secret was).
fn assert_shows(screen: &str, shown: &[&str]) {
    for x in shown {
        assert!(screen.contains(x), "{x:?} not in\n{screen}");
    }
}

/// The lines of one run: the two requests seen from both sides, their resource redacted,
/// curl's command line too.
fn assert_calls(what: &str, lines: &[Value], port: u16) {
    let calls = calls(lines);
    let mut sides: Vec<&str> = calls.iter().map(|c| c["side"].as_str().unwrap()).collect();
    sides.sort_unstable();
    assert_eq!(
        sides,
        ["client", "client", "server", "server"],
        "{what}: {calls:?}"
    );
    let curl_host = format!("127.0.0.1:{port}");
    for c in &calls {
        assert_eq!(c["resource"], RESOURCE, "{what}: {c}");
        assert_eq!(c["status"], 302, "{what}: {c}");
        assert!(
            c["host"] == "test" || c["host"] == curl_host.as_str(),
            "{what}: {c}"
        );
    }
    let curl = lines
        .iter()
        .find(|l| l["type"] == "proc" && l["comm"] == "curl")
        .unwrap_or_else(|| panic!("{what}: no proc line of curl"));
    let shown: Vec<&str> = curl["cmdline"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a.as_str().unwrap())
        .collect();
    assert_eq!(shown.join(" "), curl_shown(port), "{what}: {curl}");
}

#[test]
fn secrets_in_queries_and_headers_reach_no_output() {
    require_root();
    let port = redirecting_server();
    let dir = tempfile::tempdir().unwrap();
    let rec = dir.path().join("secrets.ebt");
    let rec = rec.to_str().unwrap();

    // Live.
    let live = Ebtop::start(&["--json", "--port", &port.to_string(), "-w", rec]);
    let s = TcpStream::connect(("127.0.0.1", port)).unwrap();
    let mut w = s.try_clone().unwrap();
    let mut r = BufReader::new(s);
    w.write_all(REQUEST).unwrap();
    assert_eq!(read_response(&mut r), (302, 0));
    drop((w, r));
    let status = Command::new("curl").args(curl_args(port)).status().unwrap();
    assert!(status.success(), "curl: {status}");
    let lines = live.stop();
    let text: Vec<String> = lines.iter().map(Value::to_string).collect();
    assert_no_secret("live --json", &text.join("\n"));
    assert_calls("live", &lines, port);
    assert_clean_summary(lines.last().unwrap());

    // The recording holds the payloads as sent (mode 0600); what is derived from it does not.
    for extra in [&[][..], &["--raw-resources"][..]] {
        let out = Command::new(env!("CARGO_BIN_EXE_ebtop"))
            .args(["-r", rec, "--json"])
            .args(extra)
            .args(replay_args())
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let stdout = String::from_utf8_lossy(&out.stdout);
        let what = format!("replay --json {extra:?}");
        assert_no_secret(&what, &stdout);
        let lines: Vec<Value> = stdout
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        assert_calls(&what, &lines, port);
        if !extra.is_empty() {
            // Endpoints keyed on the raw resource carry its query, redacted.
            let summary = lines.last().unwrap();
            assert!(
                summary["endpoints"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .any(|e| e["resource"] == RESOURCE),
                "{summary}"
            );
        }
    }

    // The TUI on the replay keeps the message heads: the list and the call details show the
    // redacted forms and no secret.
    let t = Tmux::new();
    t.start_ebtop(&format!("-r '{rec}' --speed 1000"));
    let s = t.wait("the replay's end", |s| {
        // (The resource is cut at 120 columns, by as much as the columns beside it need.)
        s.contains("[ENDED]") && s.contains("calls 4") && s.contains(&RESOURCE[..26])
    });
    assert_no_secret("the Calls list", &s);
    // A call of the raw client's (its Referer), not curl's.
    t.keys(&["F3"]);
    t.literal("!curl");
    t.keys(&["Enter"]);
    t.wait("a call not curl's selected", |s| {
        !s.contains("F3 search:") && s.contains("[HELD")
    });
    t.keys(&["Enter"]);
    let s = t.wait("the call's heads", |s| {
        s.contains("Request head") && s.contains("Content-Length: 0")
    });
    assert_no_secret("the call details", &s);
    assert_shows(
        &s,
        &[
            "GET /cb;jsessionid=[redacted]?token=[redacted]&sig=[redacted] HTTP/1.1",
            "X-Api-Key: [redacted, 7 bytes]",
            "X-CSRF-Token: [redacted, 8 bytes]",
            "Referer: http://ann:[redacted]@app/cb?password=[redacted]",
            "Location: /login?password=[redacted]",
            "Set-Cookie: [redacted, 14 bytes]",
        ],
    );
    // curl's command line in the Processes view and in its details.
    t.keys(&["Escape", "4"]);
    let s = t.wait("the processes", |s| {
        s.contains("[4 Processes]") && s.contains("curl")
    });
    assert_no_secret("the Processes list", &s);
    t.keys(&["F3"]);
    t.literal("curl");
    t.keys(&["Enter", "Enter"]);
    let s = t.wait("curl's details", |s| {
        s.contains("Process detail") && s.contains("Command")
    });
    assert_no_secret("the process details", &s);
    assert_shows(
        &s,
        &[
            "--oauth2-bearer [redacted]",
            "--pass [redacted]",
            "-u ann:[redacted]",
            "ann:[redacted]@",
        ],
    );
    // q closes the details first, then quits.
    t.keys(&["q"]);
    t.wait("the details closed", |s| !s.contains("Process detail"));
    t.keys(&["q"]);
    t.wait_exit();
}
