//! Live capture of HTTPS from Go programs: the plaintext of Go's own TLS stack (`crypto/tls`,
//! no OpenSSL), from uprobes on `crypto/tls.(*Conn).Write`/`Read` and the handshakes, found in
//! the program's `.gopclntab` (so a stripped binary works as well). A Go HTTPS server (built
//! stripped) and Go clients over HTTP/1.1 and HTTP/2 (tests/fixtures/tls/go, standard library
//! only), started by the test on free ports, compared with what the clients report; h2load
//! loads the server while ebtop attaches and detaches; Python's grpcio client calls the same
//! program serving gRPC over TLS. Needs root, a Go toolchain ≥ 1.18 (`go` on PATH,
//! /usr/local/go/bin/go or /usr/lib/go/bin/go; Debian: golang-go), openssl, h2load
//! (nghttp2-client) and grpcio.

mod common;

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{ChildStdin, ChildStdout, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use common::*;
use serde_json::Value;

/// The fixture's two builds: the server stripped (`-s -w`: no symbol table, so ebtop finds
/// crypto/tls through `.gopclntab` alone), the client not.
struct GoBuilds {
    server: PathBuf,
    client: PathBuf,
}

/// The Go toolchain: `go` on PATH, else where Go's tarball or Debian puts it.
/// The tests of this file run one at a time: one of them waits for ebtop to have probed the
/// one new program it runs, which another test's new program would count as.
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

fn go_tool() -> PathBuf {
    let on_path: Vec<PathBuf> = std::env::var_os("PATH")
        .map(|p| std::env::split_paths(&p).map(|d| d.join("go")).collect())
        .unwrap_or_default();
    on_path
        .into_iter()
        .chain(["/usr/local/go/bin/go", "/usr/lib/go/bin/go"].map(PathBuf::from))
        .find(|p| p.is_file())
        .expect(
            "a Go toolchain (go ≥ 1.18) is installed: on PATH, /usr/local/go/bin/go or \
             /usr/lib/go/bin/go (Debian: apt install golang-go; scripts/deps does)",
        )
}

/// Builds tests/fixtures/tls/go once per run of this test binary, into target/tmp/gotls (Go's
/// build cache there too, so later runs only link). Each binary is built under a name of this
/// process and renamed into place: another run building at the same time never sees half a file.
fn go_builds() -> &'static GoBuilds {
    static BUILDS: OnceLock<GoBuilds> = OnceLock::new();
    BUILDS.get_or_init(|| {
        let tmp = Path::new(env!("CARGO_TARGET_TMPDIR"));
        let out = tmp.join("gotls");
        std::fs::create_dir_all(&out).unwrap();
        let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/tls/go");
        let go = go_tool();
        let build = |name: &str, ldflags: &[&str]| -> PathBuf {
            let bin = out.join(name);
            let partial = out.join(format!("{name}.{}", std::process::id()));
            let result = Command::new(&go)
                .current_dir(&src)
                .args(["build", "-buildvcs=false"])
                .args(ldflags)
                .arg("-o")
                .arg(&partial)
                .arg(".")
                .env("GOTOOLCHAIN", "local")
                .env("GOFLAGS", "-mod=mod")
                .env("GOCACHE", tmp.join("go-cache"))
                .env("GOPATH", tmp.join("go-path"))
                .env("CGO_ENABLED", "0")
                .output()
                .unwrap_or_else(|e| panic!("{} runs: {e}", go.display()));
            assert!(
                result.status.success(),
                "{} build of {}: {}",
                go.display(),
                src.display(),
                String::from_utf8_lossy(&result.stderr)
            );
            std::fs::rename(&partial, &bin).unwrap();
            bin
        };
        let builds = GoBuilds {
            server: build("gotls-server", &["-ldflags=-s -w"]),
            client: build("gotls-client", &[]),
        };
        let nm = Command::new("nm")
            .arg(&builds.server)
            .output()
            .expect("nm is installed");
        assert!(
            !String::from_utf8_lossy(&nm.stdout).contains("crypto/tls"),
            "the server is stripped: {}",
            String::from_utf8_lossy(&nm.stderr)
        );
        builds
    })
}

/// A copy of a build in `dir` named `name`: a file of its own (its own inode), so what ebtop
/// probes for this test is not what other tests, or other ebtops, probed.
fn copy_of(build: &Path, dir: &Path, name: &str) -> PathBuf {
    let bin = dir.join(name);
    std::fs::copy(build, &bin).unwrap();
    bin
}

/// The comm of a process started from `path`: its file name, cut at 15 bytes.
fn comm_of(path: &Path) -> String {
    let name = path.file_name().unwrap().to_str().unwrap();
    name.chars().take(15).collect()
}

/// The fixture's server (`bin`) on a free port with a self-signed certificate made in `dir`;
/// started once it printed "listening".
struct GoServer {
    peer: Peer,
    port: u16,
    bin: PathBuf,
    _out: BufReader<ChildStdout>,
}

impl GoServer {
    fn start(bin: &Path, dir: &Path) -> GoServer {
        let (cert, key) = self_signed_cert(dir);
        GoServer::start_mode(bin, "server", &cert, &key)
    }

    /// The fixture in `mode` (`server`, or `grpc`) with this certificate.
    fn start_mode(bin: &Path, mode: &str, cert: &Path, key: &Path) -> GoServer {
        let port = free_tcp_port();
        let mut child = Command::new(bin)
            .arg(mode)
            .arg("-addr")
            .arg(format!("127.0.0.1:{port}"))
            .arg("-cert")
            .arg(cert)
            .arg("-key")
            .arg(key)
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let mut out = BufReader::new(child.stdout.take().unwrap());
        let peer = Peer(child);
        let mut line = String::new();
        out.read_line(&mut line).unwrap();
        assert_eq!(line.trim(), "listening", "the Go server starts");
        GoServer {
            peer,
            port,
            bin: bin.to_path_buf(),
            _out: out,
        }
    }

    fn pid(&self) -> u32 {
        self.peer.0.id()
    }
}

/// A run of the fixture's client (`bin`): GETs of `paths` in order on one connection to the
/// server on `port`, over HTTP/2 with `h2`.
struct GoClient {
    peer: Peer,
    stdin: Option<ChildStdin>,
    out: BufReader<ChildStdout>,
}

impl GoClient {
    /// `flags`: the client's `-wait`, `-hold`.
    fn spawn(bin: &Path, port: u16, h2: bool, flags: &[&str], paths: &[&str]) -> GoClient {
        let mut cmd = Command::new(bin);
        cmd.arg("client")
            .arg("-base")
            .arg(format!("https://127.0.0.1:{port}"));
        if h2 {
            cmd.arg("-h2");
        }
        let mut child = cmd
            .args(flags)
            .args(paths)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let stdin = child.stdin.take();
        let out = BufReader::new(child.stdout.take().unwrap());
        GoClient {
            peer: Peer(child),
            stdin,
            out,
        }
    }

    /// Started with `-wait`: running, connected to nothing yet, until `release`.
    fn waiting(bin: &Path, port: u16, h2: bool, paths: &[&str]) -> GoClient {
        let mut c = GoClient::spawn(bin, port, h2, &["-wait"], paths);
        let mut line = String::new();
        c.out.read_line(&mut line).unwrap();
        assert_eq!(line.trim(), "ready", "the Go client starts");
        c
    }

    /// Started with `-hold`: the lines it printed for its requests, once it made them all;
    /// it runs on until `finish`.
    fn printed_until_held(&mut self) -> Vec<String> {
        let mut printed = Vec::new();
        loop {
            let mut line = String::new();
            let n = self.out.read_line(&mut line).unwrap();
            assert!(n > 0, "the Go client ended before \"held\": {printed:?}");
            if line.trim() == "held" {
                return printed;
            }
            printed.push(line.trim().to_owned());
        }
    }

    fn release(&mut self) {
        let mut stdin = self.stdin.take().unwrap();
        stdin.write_all(b"go\n").unwrap();
    }

    fn pid(&self) -> u32 {
        self.peer.0.id()
    }

    /// What the client printed, one "STATUS BODY_BYTES" per request; asserts it exited 0.
    /// Its stdin ends first (a `-hold` client exits then).
    fn finish(mut self) -> Vec<String> {
        drop(self.stdin.take());
        let lines: Vec<String> = (&mut self.out).lines().map(Result::unwrap).collect();
        let status = self.peer.0.wait().unwrap();
        assert!(
            status.success(),
            "the Go client: {status}, printed {lines:?}"
        );
        lines
    }
}

/// One client run to the end (no -wait): its pid and what it printed.
fn run_client(bin: &Path, port: u16, h2: bool, paths: &[&str]) -> (u32, Vec<String>) {
    let c = GoClient::spawn(bin, port, h2, &[], paths);
    let pid = c.pid();
    (pid, c.finish())
}

/// What the fixture's server answers to `path`: status and body bytes.
fn expected(path: &str) -> (u64, u64) {
    if let Some(n) = path.strip_prefix("/size/") {
        (200, n.parse().unwrap())
    } else if let Some(s) = path.strip_prefix("/status/") {
        (s.parse().unwrap(), 0)
    } else {
        (200, 2)
    }
}

/// The client printed, for each path, the status and body size the server answers with.
fn assert_printed(printed: &[String], paths: &[&str]) {
    let want: Vec<String> = paths
        .iter()
        .map(|p| {
            let (status, len) = expected(p);
            format!("{status} {len}")
        })
        .collect();
    assert_eq!(printed, want, "what the Go client printed");
}

/// Calls of process `pid` on `side`, in output order.
fn of<'a>(calls: &[&'a Value], pid: u32, side: &str) -> Vec<&'a Value> {
    calls
        .iter()
        .copied()
        .filter(|c| c["pid"] == pid && c["side"] == side)
        .collect()
}

/// A GET over TLS of `path` (`proto` "http": HTTP/1.1, "http2") with the status the fixture's
/// server answers it with.
fn assert_tls_get(c: &Value, proto: &str, path: &str) {
    assert_eq!(c["tls"], true, "{c}");
    assert_eq!(c["proto"], proto, "{c}");
    assert_eq!(c["method"], "GET", "{c}");
    assert_eq!(c["resource"], path, "{c}");
    assert_eq!(c["status"], expected(path).0, "{c}");
}

/// `client`: a Go client's calls, one per path in order, of its comm; responses more than the
/// body the client counted (HTTP/1.1's status line and header fields, HTTP/2's HEADERS frame
/// and DATA frame headers add to it) and requests of some bytes (a GET's head, HTTP/2's
/// HEADERS frame). `summary`: the session's,
/// shown (its parse counters) should a call be missing.
fn assert_client_calls(
    client: &[&Value],
    proto: &str,
    paths: &[&str],
    comm: &str,
    summary: &Value,
) {
    let got: Vec<&str> = client
        .iter()
        .map(|c| c["resource"].as_str().unwrap_or("?"))
        .collect();
    assert_eq!(
        got, paths,
        "one {proto} client call per request, in order (parse counters: {})",
        summary["parse"]
    );
    for (c, p) in client.iter().zip(paths) {
        assert_tls_get(c, proto, p);
        assert_eq!(c["comm"], comm, "{c}");
        let body = expected(p).1;
        // Heads and bodies on the wire: HTTP/1's head lines, HTTP/2's HEADERS and DATA frames.
        assert!(c["resp_bytes"].as_u64().unwrap() > body, "{c}");
        assert!(c["req_bytes"].as_u64().unwrap() > 0, "{c}");
    }
}

/// The Go files the `tls` line's `tls_probed` lists, as the pids in their `/proc/PID/exe [go]` names.
fn go_probed(meta: &Value) -> Vec<u32> {
    meta["tls_probed"]
        .as_array()
        .map(|files| {
            files
                .iter()
                .filter_map(|f| {
                    f.as_str()?
                        .strip_prefix("/proc/")?
                        .strip_suffix("/exe [go]")
                        // With net/http's client probed too (call chains).
                        .or_else(|| {
                            f.as_str()?
                                .strip_prefix("/proc/")?
                                .strip_suffix("/exe [go+http]")
                        })?
                        .parse()
                        .ok()
                })
                .collect()
        })
        .unwrap_or_default()
}

/// `n` GETs of "/" interleaved with 2 of `/size/1000000` (1 MB: far beyond the snaplen, many
/// TLS records) and 3 of `/status/404`.
fn mixed_paths(n: usize) -> Vec<&'static str> {
    let mut paths = Vec::new();
    for i in 0..n {
        paths.push("/");
        if i == n / 4 || i == 3 * n / 4 {
            paths.push("/size/1000000");
        }
        if i == 1 || i == n / 2 || i == n - 2 {
            paths.push("/status/404");
        }
    }
    paths
}

/// A stripped Go server and two Go clients (HTTP/1.1 and HTTP/2, each on one keep-alive
/// connection: small responses, 1 MB ones and 404s, interleaved; the two at the same time),
/// all running before ebtop starts (the clients wait to be released), so all three are probed
/// at start: every request
/// is exactly one client call of the client that made it (`tls: true`, its protocol, path and
/// status, in order; HTTP/2 response sizes exact to the body the client read) and one server
/// call of the server on the same connection with the same sizes; `meta.tls_probed` lists the
/// two Go files; nothing lost, no TLS call without its socket, no other call on the port.
/// Each probe site a link of its own (`EBTOP_UPROBE_LINKS=single`, as on kernels without
/// multi-uprobe links; the other tests use those).
#[test]
fn go_server_and_clients_running_before_ebtop_are_exact_on_both_sides() {
    require_root();
    let _g = serial();
    let builds = go_builds();
    let dir = tempfile::tempdir().unwrap();
    let server_bin = copy_of(&builds.server, dir.path(), "gotls-server");
    let client_bin = copy_of(&builds.client, dir.path(), "gotls-client");
    let server = GoServer::start(&server_bin, dir.path());
    let h1_paths = mixed_paths(40);
    let h2_paths = mixed_paths(20);
    let mut h1 = GoClient::waiting(&client_bin, server.port, false, &h1_paths);
    let mut h2 = GoClient::waiting(&client_bin, server.port, true, &h2_paths);
    let (h1_pid, h2_pid) = (h1.pid(), h2.pid());

    let p = server.port.to_string();
    let ebtop = Ebtop::start_with_env(
        &["--json", "--port", &p],
        &[("EBTOP_UPROBE_LINKS", "single")],
    );
    // Both at once: the server serves the two connections side by side.
    h1.release();
    h2.release();
    assert_printed(&h1.finish(), &h1_paths);
    assert_printed(&h2.finish(), &h2_paths);
    let lines = ebtop.stop();

    let meta = tls_start(&lines);
    let probed = go_probed(meta);
    assert!(
        probed.contains(&server.pid()),
        "the stripped server is probed: {meta}"
    );
    assert!(
        probed.contains(&h1_pid) || probed.contains(&h2_pid),
        "the clients' file is probed (once for both): {meta}"
    );

    let calls = calls(&lines);
    let summary = lines.last().unwrap();
    let comm = comm_of(&client_bin);
    let c1 = of(&calls, h1_pid, "client");
    assert_client_calls(&c1, "http", &h1_paths, &comm, summary);
    let c2 = of(&calls, h2_pid, "client");
    assert_client_calls(&c2, "http2", &h2_paths, &comm, summary);
    let clients: Vec<&Value> = [c1, c2].concat();
    let server_calls = of(&calls, server.pid(), "server");
    assert_eq!(
        server_calls.len(),
        h1_paths.len() + h2_paths.len(),
        "one server call per request: {server_calls:#?}"
    );
    for s in &server_calls {
        assert_eq!(s["tls"], true, "{s}");
        assert_eq!(s["comm"], comm_of(&server.bin), "{s}");
        assert_eq!(port_of(&s["local"]), server.port, "{s}");
    }
    assert_paired(&clients, &server_calls);
    assert_eq!(calls.len(), 2 * clients.len(), "no other calls: {calls:#?}");
    assert_clean_summary(summary);
    assert_eq!(summary["kernel"]["tls_no_socket"], 0, "{summary}");
}

/// A Go server running, and a copy of the client named `name` that no process ran before (not
/// probed when ebtop starts), in a directory removed on drop.
fn server_and_new_client(name: &str) -> (tempfile::TempDir, GoServer, PathBuf) {
    let builds = go_builds();
    let dir = tempfile::tempdir().unwrap();
    let server_bin = copy_of(&builds.server, dir.path(), "gotls-server");
    let client_bin = copy_of(&builds.client, dir.path(), name);
    let server = GoServer::start(&server_bin, dir.path());
    (dir, server, client_bin)
}

/// How many files ebtop probed at its start, installed programs included (once it looked at
/// them all).
fn files_probed_at_start(ebtop: &mut Ebtop) -> u64 {
    ebtop.installed_scanned()["tls_files_probed"]
        .as_u64()
        .expect("tls_files_probed")
}

/// Waits for an `overhead` line that counts one more file probed than at the start (the tests
/// of this file run one at a time, so no other new program is probed meanwhile).
fn assert_one_more_file_probed(ebtop: &mut Ebtop, at_start: u64, what: &str) {
    let probed = ebtop.wait_for(Duration::from_secs(60), |v| {
        v["type"] == "overhead" && v["tls_files_probed"].as_u64() > Some(at_start)
    });
    assert!(
        probed.is_some(),
        "ebtop reports {what} ({at_start} files at start)"
    );
}

/// The client run `pid` is exact: a GET of each of `paths` on one connection, each paired with
/// the server's call on that connection.
fn assert_run_exact(
    calls: &[&Value],
    pid: u32,
    server_calls: &[&Value],
    paths: &[&str],
    comm: &str,
    summary: &Value,
) {
    let run = of(calls, pid, "client");
    assert_client_calls(&run, "http", paths, comm, summary);
    let conn = &run[0]["local"];
    let server: Vec<&Value> = server_calls
        .iter()
        .copied()
        .filter(|s| &s["peer"] == conn)
        .collect();
    assert_paired(&run, &server);
}

/// A Go client started after ebtop, run twice (20 GETs on one connection each) against a Go
/// server started before it: the server's 40 calls are all there, and the client's second run
/// is exact (20 calls, paired with the server's).
///
/// The limitation this shows: ebtop probes a program that was not running at its start only
/// once its exec is reported, so a new Go program's first calls may come before its probes
/// (the first run shows at most 20, perhaps fewer); but a uprobe belongs to the file, so the
/// same binary run again is traced from its first call. The second run starts once ebtop has
/// probed the first one's file (an `overhead` line counts one more file probed than at the
/// start), so a slow machine cannot start it while ebtop is still placing the probes.
/// The first run stays (`-hold`, its requests made) until then: a program that exits before
/// ebtop looked at it takes `/proc/PID/exe` with it, and nothing is probed.
#[test]
fn a_go_client_started_after_ebtop_is_traced_exactly_from_its_second_run() {
    require_root();
    let _g = serial();
    let (_dir, server, client_bin) = server_and_new_client("gotls-late");
    let p = server.port.to_string();
    let mut ebtop = Ebtop::start(&["--json", "--port", &p]);
    let at_start = files_probed_at_start(&mut ebtop);

    let paths = ["/"; 20];
    let mut first_run = GoClient::spawn(&client_bin, server.port, false, &["-hold"], &paths);
    let first = first_run.pid();
    assert_printed(&first_run.printed_until_held(), &paths);
    assert_one_more_file_probed(&mut ebtop, at_start, "the first run's program probed");
    assert_eq!(
        first_run.finish(),
        Vec::<String>::new(),
        "nothing after \"held\""
    );
    let (second, printed) = run_client(&client_bin, server.port, false, &paths);
    assert_printed(&printed, &paths);
    let lines = ebtop.stop();

    let calls = calls(&lines);
    let summary = lines.last().unwrap();
    let comm = comm_of(&client_bin);
    let server_calls = of(&calls, server.pid(), "server");
    assert_eq!(
        server_calls.len(),
        2 * paths.len(),
        "the server's calls of both runs: {server_calls:#?}"
    );
    for s in &server_calls {
        assert_tls_get(s, "http", "/");
    }
    let run1 = of(&calls, first, "client");
    assert!(run1.len() <= paths.len(), "{run1:#?}");
    for c in &run1 {
        assert_tls_get(c, "http", "/");
        assert_eq!(c["comm"], comm, "{c}");
    }
    assert_run_exact(&calls, second, &server_calls, &paths, &comm, summary);
    assert_eq!(
        calls.len(),
        server_calls.len() + run1.len() + paths.len(),
        "no other calls: {calls:#?}"
    );
    // Not assert_clean_summary: the first run may have been picked up mid-way.
    assert_eq!(summary["kernel"]["lost"], 0, "{summary}");
}

/// A Go client started after ebtop that exited before ebtop looked at it is probed all the
/// same, from its executable opened when its exec was handled, and its next run is traced
/// exactly from its first call. The lookout is held back 3 s (`EBTOP_DEBUG_LOOKOUT_DELAY_MS`,
/// a hook of debug builds), so the first run (5 GETs) has nearly always ended by then; the
/// file must be probed whichever came first.
#[test]
fn a_go_client_gone_before_ebtop_looked_is_probed_from_its_executable() {
    short_run_then_exact_run("gotls-brief", &[("EBTOP_DEBUG_LOOKOUT_DELAY_MS", "3000")]);
}

/// A Go client started after ebtop that exited before ebtop even handled its exec (a few ms
/// are enough on a busy host, as CI showed) is probed all the same, from the file its exec's
/// path names (the very file the kernel ran: the exec record carries its identity), and its
/// next run is traced exactly from its first call. The capture thread sleeps 1 s before it
/// hands an exec over (`EBTOP_DEBUG_EXEC_LAG_MS`, a hook of debug builds), so the first run
/// (5 GETs) has nearly always ended by then; the file must be probed whichever came first.
#[test]
fn a_go_client_gone_before_its_exec_was_handled_is_probed_from_its_path() {
    // Only this client's execs wait: every other program run meanwhile would hold the capture
    // thread (and the overhead lines the test waits on) for a second too.
    short_run_then_exact_run(
        "gotls-gone",
        &[
            ("EBTOP_DEBUG_EXEC_LAG_MS", "1000"),
            ("EBTOP_DEBUG_EXEC_LAG_NAME", "gotls-gone"),
        ],
    );
}

/// A new client (`name`) run once for 5 GETs and once for 20 against a Go server, under
/// ebtop with the debug hooks `hooks`: the file is probed after the first run, and the second
/// run is exact.
fn short_run_then_exact_run(name: &str, hooks: &[(&str, &str)]) {
    require_root();
    let _g = serial();
    let (_dir, server, client_bin) = server_and_new_client(name);
    let p = server.port.to_string();
    let mut ebtop = Ebtop::start_with_env(&["--json", "--port", &p], hooks);
    let at_start = files_probed_at_start(&mut ebtop);

    let (first, printed) = run_client(&client_bin, server.port, false, &["/"; 5]);
    assert_printed(&printed, &["/"; 5]);
    assert_one_more_file_probed(&mut ebtop, at_start, "the exited program's file probed");
    let paths = ["/"; 20];
    let (second, printed) = run_client(&client_bin, server.port, false, &paths);
    assert_printed(&printed, &paths);
    let lines = ebtop.stop();

    let calls = calls(&lines);
    let summary = lines.last().unwrap();
    let comm = comm_of(&client_bin);
    let server_calls = of(&calls, server.pid(), "server");
    assert_run_exact(&calls, second, &server_calls, &paths, &comm, summary);
    assert_eq!(server_calls.len(), 5 + paths.len(), "{server_calls:#?}");
    assert!(of(&calls, first, "client").len() <= 5);
    assert_eq!(summary["kernel"]["lost"], 0, "{summary}");
}

/// A Go client installed in a directory on ebtop's `PATH`, run for the first time after ebtop
/// looked at the installed programs: probed before it ever ran (no exec to wait for), so its
/// first run is exact from its first call, on both sides.
#[test]
fn a_go_client_installed_on_path_is_traced_from_its_first_call() {
    require_root();
    let _g = serial();
    let (dir, server, client_bin) = server_and_new_client("gotls-onpath");
    let p = server.port.to_string();
    let path = std::env::join_paths(std::iter::once(dir.path().to_path_buf()).chain(
        std::env::split_paths(&std::env::var_os("PATH").unwrap_or_default()),
    ))
    .unwrap();
    let mut ebtop = Ebtop::start_with_env(
        &["--json", "--port", &p],
        &[("PATH", path.to_str().unwrap())],
    );
    let at_start = files_probed_at_start(&mut ebtop);
    assert!(
        at_start >= 2,
        "the server and the installed client: {at_start}"
    );

    let paths = ["/"; 20];
    let (pid, printed) = run_client(&client_bin, server.port, false, &paths);
    assert_printed(&printed, &paths);
    let lines = ebtop.stop();

    let calls = calls(&lines);
    let summary = lines.last().unwrap();
    let comm = comm_of(&client_bin);
    let server_calls = of(&calls, server.pid(), "server");
    assert_eq!(server_calls.len(), paths.len(), "{server_calls:#?}");
    assert_run_exact(&calls, pid, &server_calls, &paths, &comm, summary);
    assert_eq!(calls.len(), 2 * paths.len(), "no other calls: {calls:#?}");
    assert_eq!(
        summary["kernel"]["tls_files_probed"], at_start,
        "nothing probed at the exec: the file was, before"
    );
    assert_clean_summary(summary);
}

/// h2load rounds against `url` in a loop (HTTP/2, then HTTP/1.1, and so on) until `stop`: each
/// of `n` requests on 4 connections, 8 in flight on each, all answered 2xx. The rounds completed
/// are counted in `done`; the first failure is kept in `failure` and ends the loop.
fn load_until(
    url: String,
    n: usize,
    stop: Arc<AtomicBool>,
    done: Arc<AtomicUsize>,
    failure: Arc<Mutex<Option<String>>>,
) -> std::thread::JoinHandle<()> {
    std::thread::spawn(move || {
        let mut round = 0usize;
        while !stop.load(Ordering::Relaxed) {
            let h1 = round % 2 == 1;
            let mut cmd = Command::new("h2load");
            if h1 {
                cmd.arg("--h1");
            }
            let out = cmd
                .args(["-n", &n.to_string(), "-c", "4", "-m", "8", &url])
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .output()
                .expect("h2load is installed (nghttp2-client)");
            let text = String::from_utf8_lossy(&out.stdout);
            let ok = out.status.success()
                && text.contains(&format!("{n} succeeded, 0 failed, 0 errored, 0 timeout"))
                && text.contains(&format!("{n} 2xx"));
            if !ok {
                *failure.lock().unwrap() = Some(format!(
                    "h2load round {round} ({}): {}\n{text}\n{}",
                    if h1 { "--h1" } else { "h2" },
                    out.status,
                    String::from_utf8_lossy(&out.stderr)
                ));
                return;
            }
            round += 1;
            done.store(round, Ordering::Relaxed);
        }
    })
}

/// The traced Go program is unharmed by the probes coming and going: h2load loads the Go server
/// (rounds of 3000 requests over HTTP/2 and HTTP/1.1 in turn, 4 connections, 8 requests in
/// flight on each) while ebtop starts and stops 3 times (each time the server's calls of both
/// protocols show before it stops). Every round has all its requests answered 2xx, none
/// failed or errored, and afterwards the server is still running and answers a Go client's
/// requests right.
#[test]
fn a_loaded_go_server_is_unharmed_as_probes_attach_and_detach() {
    require_root();
    let _g = serial();
    let builds = go_builds();
    let dir = tempfile::tempdir().unwrap();
    let server_bin = copy_of(&builds.server, dir.path(), "gotls-server");
    let client_bin = copy_of(&builds.client, dir.path(), "gotls-client");
    let mut server = GoServer::start(&server_bin, dir.path());
    let server_pid = server.pid();
    let url = format!("https://127.0.0.1:{}/", server.port);
    let stop = Arc::new(AtomicBool::new(false));
    let done = Arc::new(AtomicUsize::new(0));
    let failure: Arc<Mutex<Option<String>>> = Arc::default();
    let load = load_until(url, 3000, stop.clone(), done.clone(), failure.clone());
    // Waits (at most 120 s) until the loop completed more rounds than `than`, or failed.
    let progressed = |than: usize| {
        let deadline = Instant::now() + Duration::from_secs(120);
        loop {
            if let Some(f) = failure.lock().unwrap().as_ref() {
                panic!("{f}");
            }
            let n = done.load(Ordering::Relaxed);
            if n > than {
                return n;
            }
            assert!(Instant::now() < deadline, "h2load is stuck at {n} rounds");
            std::thread::sleep(Duration::from_millis(50));
        }
    };
    let mut rounds = progressed(0);

    let p = server.port.to_string();
    for session in 0..3 {
        let mut ebtop = Ebtop::start(&["--json", "--port", &p]);
        for proto in ["http2", "http"] {
            let seen = ebtop.wait_for(Duration::from_secs(120), |v| {
                v["type"] == "call"
                    && v["side"] == "server"
                    && v["pid"] == server_pid
                    && v["proto"] == proto
            });
            assert!(
                seen.is_some(),
                "session {session}: no {proto} call of the loaded server (h2load: {:?})",
                failure.lock().unwrap()
            );
        }
        ebtop.stop();
        rounds = progressed(rounds);
    }
    stop.store(true, Ordering::Relaxed);
    load.join().unwrap();
    if let Some(f) = failure.lock().unwrap().as_ref() {
        panic!("{f}");
    }
    assert!(
        server.peer.0.try_wait().unwrap().is_none(),
        "the Go server is still running"
    );
    let paths = ["/size/123457", "/status/503", "/"];
    let (_, printed) = run_client(&client_bin, server.port, false, &paths);
    assert_printed(&printed, &paths);
    let (_, printed) = run_client(&client_bin, server.port, true, &paths);
    assert_printed(&printed, &paths);
}

/// gRPC over TLS (ALPN h2) to a Go server (the fixture's `grpc` mode: Go's HTTP/2 server and
/// crypto/tls, gRPC's wire format), first from the fixture's Go client (`grpc-client`), then
/// from Python's grpcio client (src/protocols/http2/fixtures/grpc_peers.py `client-tls`: a real gRPC
/// library, with its own BoringSSL, which ebtop does not probe: its ciphertext is counted, its
/// calls not seen). Each client makes 20 unary calls, a server stream of 7 messages, a bidi
/// call of 9 each way and one NOT_FOUND: each one `grpc` call with `tls: true`, the method as
/// resource, the status and the message counts — on both sides for the Go client, on the
/// server's for grpcio.
#[test]
fn grpc_over_tls_is_exact_on_every_go_side() {
    require_root();
    let _g = serial();
    let dir = tempfile::tempdir().unwrap();
    let server_bin = copy_of(&go_builds().server, dir.path(), "gotls-grpc");
    let client_bin = copy_of(&go_builds().client, dir.path(), "gotls-grpc-cli");
    let (ca, cert, key) = ca_signed_cert(dir.path());
    let server = GoServer::start_mode(&server_bin, "grpc", &cert, &key);
    let p = server.port.to_string();
    let addr = format!("127.0.0.1:{p}");
    let counts = ["20", "7", "9"];
    // The Go client runs before ebtop starts (probed at start), waiting for a line.
    let mut go_client = Command::new(&client_bin)
        .args(["grpc-client", "-wait", "-addr", &addr, "-ca"])
        .arg(&ca)
        .args(counts)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let go_client_pid = go_client.id();
    let mut go_out = BufReader::new(go_client.stdout.take().unwrap());
    let mut line = String::new();
    go_out.read_line(&mut line).unwrap();
    assert_eq!(line.trim(), "ready", "the Go gRPC client starts");
    let ebtop = Ebtop::start(&["--json", "--port", &p]);
    go_client.stdin.take().unwrap().write_all(b"go\n").unwrap();
    let status = go_client.wait().unwrap();
    let mut printed = String::new();
    std::io::Read::read_to_string(&mut go_out, &mut printed).unwrap();
    assert!(
        status.success() && printed.contains("done"),
        "the Go gRPC client: {status}, {printed}"
    );
    let peers =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("src/protocols/http2/fixtures/grpc_peers.py");
    let grpcio = Command::new("python3")
        .arg(&peers)
        .args(["client-tls", &p])
        .arg(&ca)
        .args(counts)
        .output()
        .expect("python3 runs");
    assert!(
        grpcio.status.success() && String::from_utf8_lossy(&grpcio.stdout).contains("done"),
        "the grpcio client (scripts/deps: pip install grpcio): {grpcio:?}"
    );
    let lines = ebtop.stop();
    let calls = calls(&lines);
    let rpc = |c: &Value| -> (String, String, String, String) {
        assert_eq!(c["tls"], true, "{c}");
        assert_eq!(c["proto"], "grpc", "{c}");
        let s = |k: &str| c[k].as_str().map_or(c[k].to_string(), str::to_owned);
        (
            s("resource"),
            s("status_text"),
            s("req_messages"),
            s("resp_messages"),
        )
    };
    let method = |m: &str| format!("/ebtop.test.Echo/{m}");
    let mut one_client = vec![(method("Unary"), "OK".into(), "1".into(), "1".into()); 20];
    one_client.push((method("ServerStream"), "OK".into(), "1".into(), "7".into()));
    one_client.push((method("Bidi"), "OK".into(), "9".into(), "9".into()));
    one_client.push((
        method("Missing"),
        "NOT_FOUND".into(),
        "1".into(),
        "0".into(),
    ));
    let server_calls = of(&calls, server.pid(), "server");
    let got: Vec<_> = server_calls.iter().map(|c| rpc(c)).collect();
    assert_eq!(
        got,
        [one_client.clone(), one_client.clone()].concat(),
        "the server's calls, in order"
    );
    let go_calls = of(&calls, go_client_pid, "client");
    let got: Vec<_> = go_calls.iter().map(|c| rpc(c)).collect();
    assert_eq!(got, one_client, "the Go client's calls, in order");
    assert_paired(&go_calls, &server_calls[..go_calls.len()]);
    for c in [server_calls[22], go_calls[22], server_calls[45]] {
        assert_eq!(c["grpc_message"], "no such item", "{c}");
    }
    assert_eq!(
        calls.len(),
        server_calls.len() + go_calls.len(),
        "no other calls: {calls:#?}"
    );
    let summary = lines.last().unwrap();
    assert_eq!(summary["kernel"]["lost"], 0, "{summary}");
    assert_eq!(summary["kernel"]["tls_no_socket"], 0, "{summary}");
}
