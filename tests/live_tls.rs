//! Live capture of HTTPS: the plaintext of TLS connections, from uprobes on OpenSSL's
//! `SSL_read`/`SSL_write` and their `_ex` forms. A real nginx with a self-signed certificate,
//! curl over TLS 1.2 and 1.3, h2load, Python's urllib (the system libssl, `_ex` calls), a server
//! linked statically with OpenSSL 3 or 1.1.1 (tests/fixtures/tls/static_server.c; 1.1.1 built
//! from source by tests/fixtures/tls/openssl111, with perl and make), a Rust server linked with
//! BoringSSL (tests/fixtures/tls/boringssl; cmake, clang and libclang build it) and a process
//! that loads libssl after ebtop started, all started by the test on free ports and compared
//! with what the peers report. Needs root, nginx (nginx-light), curl, h2load, openssl, python3,
//! cc and libssl-dev.

mod common;

use std::io::{BufRead, BufReader, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{ChildStdin, ChildStdout, Command, Stdio};
use std::time::{Duration, Instant};

use common::*;
use serde_json::Value;

/// The body of `/index.html` on the test's nginx.
const INDEX: &str = "<html>hello over TLS</html>\n";
/// The size of `/big.bin`: far beyond the snaplen, and not a multiple of TLS's 16 KiB records.
const LARGE_LEN: usize = (1 << 20) + 123;

/// nginx (master_process off: one process, the one the test started) serving `www/` with
/// `index.html` (INDEX) and `big.bin` (LARGE_LEN bytes, `i % 251`) over TLS 1.2/1.3 on two
/// ports (`tls`, the one a test counts, and `other_tls`) and in clear text on `plain`;
/// everything it writes lives in its temp dir.
struct Nginx {
    peer: Peer,
    tls: u16,
    other_tls: u16,
    plain: u16,
    www: PathBuf,
    _dir: tempfile::TempDir,
}

impl Nginx {
    fn start() -> Nginx {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        let (cert, key) = self_signed_cert(d);
        let www = d.join("www");
        std::fs::create_dir(&www).unwrap();
        std::fs::write(www.join("index.html"), INDEX).unwrap();
        let big: Vec<u8> = (0..LARGE_LEN).map(|i| (i % 251) as u8).collect();
        std::fs::write(www.join("big.bin"), big).unwrap();
        let (tls, other_tls, plain) = (free_tcp_port(), free_tcp_port(), free_tcp_port());
        let p = d.display();
        let conf = format!(
            "daemon off;
master_process off;
pid {p}/nginx.pid;
error_log {p}/error.log;
events {{ worker_connections 256; }}
http {{
  access_log {p}/access.log;
  client_body_temp_path {p}/body;
  proxy_temp_path {p}/proxy;
  fastcgi_temp_path {p}/fastcgi;
  uwsgi_temp_path {p}/uwsgi;
  scgi_temp_path {p}/scgi;
  default_type application/octet-stream;
  keepalive_requests 100000;
  server {{
    listen 127.0.0.1:{tls} ssl;
    listen 127.0.0.1:{other_tls} ssl;
    ssl_certificate {cert};
    ssl_certificate_key {key};
    ssl_protocols TLSv1.2 TLSv1.3;
    root {www};
  }}
  server {{
    listen 127.0.0.1:{plain};
    root {www};
  }}
}}
",
            cert = cert.display(),
            key = key.display(),
            www = www.display(),
        );
        std::fs::write(d.join("nginx.conf"), conf).unwrap();
        let child = common::spawn_nginx(d);
        let mut peer = Peer(child);
        // Waits on the clear-text port: a bare connect to a TLS port is a failed handshake.
        let deadline = Instant::now() + Duration::from_secs(30);
        while TcpStream::connect(("127.0.0.1", plain)).is_err() {
            let log = || std::fs::read_to_string(d.join("error.log")).unwrap_or_default();
            if let Some(status) = peer.0.try_wait().unwrap() {
                panic!("nginx exited with {status}: {}", log());
            }
            assert!(Instant::now() < deadline, "nginx did not start: {}", log());
            std::thread::sleep(Duration::from_millis(50));
        }
        Nginx {
            peer,
            tls,
            other_tls,
            plain,
            www,
            _dir: dir,
        }
    }

    fn pid(&self) -> u32 {
        self.peer.0.id()
    }
}

/// What curl reported for one URL (`-w`).
#[derive(Debug)]
struct Transfer {
    path: String,
    status: u64,
    /// The request as sent (head; these are GETs).
    size_request: u64,
    /// Status line and header fields, as received.
    size_header: u64,
    size_download: u64,
}

/// One curl run (`-k --http1.1`, `extra` args) fetching `paths` from `SCHEME://127.0.0.1:PORT`
/// in that order, on one keep-alive connection: its pid and what it reported per URL; asserts
/// it succeeded.
fn curl(port: u16, scheme: &str, extra: &[&str], paths: &[&str]) -> (u32, Vec<Transfer>) {
    let mut cmd = Command::new("curl");
    cmd.args(["-sSk", "--http1.1"]).args(extra).args([
        "-w",
        "%{http_code} %{size_request} %{size_header} %{size_download} %{num_connects}\\n",
    ]);
    for p in paths {
        cmd.args(["-o", "/dev/null"])
            .arg(format!("{scheme}://127.0.0.1:{port}{p}"));
    }
    let child = cmd
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("curl is installed");
    let pid = child.id();
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "curl {extra:?} {paths:?}: {out:?}");
    let text = String::from_utf8(out.stdout).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), paths.len(), "curl -w: {text}");
    let mut connects = 0;
    let transfers = lines
        .iter()
        .zip(paths)
        .map(|(l, p)| {
            let n: Vec<u64> = l.split(' ').map(|v| v.parse().unwrap()).collect();
            connects += n[4];
            Transfer {
                path: p.to_string(),
                status: n[0],
                size_request: n[1],
                size_header: n[2],
                size_download: n[3],
            }
        })
        .collect();
    assert_eq!(connects, 1, "curl kept one connection: {text}");
    (pid, transfers)
}

fn https_client() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/tls/https_client.py")
}

/// Python's urllib fetching each URL on a connection of its own: its pid and (status, body
/// length) per URL; asserts it succeeded.
fn python_fetch(urls: &[String]) -> (u32, Vec<(u64, usize)>) {
    let child = Command::new("python3")
        .arg(https_client())
        .arg("fetch")
        .args(urls)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("python3 runs");
    let pid = child.id();
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "python fetch: {out:?}");
    let got = String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| {
            let (s, n) = l.split_once(' ').unwrap();
            (s.parse().unwrap(), n.parse().unwrap())
        })
        .collect();
    (pid, got)
}

/// Calls of process `pid` on `side`, in output order.
fn of<'a>(calls: &[&'a Value], pid: u32, side: &str) -> Vec<&'a Value> {
    calls
        .iter()
        .copied()
        .filter(|c| c["pid"] == pid && c["side"] == side)
        .collect()
}

/// An HTTP/1.1 GET over TLS of `path` answered `status`.
fn assert_tls_get(c: &Value, path: &str, status: u64) {
    assert_eq!(c["tls"], true, "{c}");
    assert_eq!(c["proto"], "http", "{c}");
    assert_eq!(c["method"], "GET", "{c}");
    assert_eq!(c["version"], "1.1", "{c}");
    assert_eq!(c["resource"], path, "{c}");
    assert_eq!(c["status"], status, "{c}");
}

/// `client` (calls of curl `pid`) are its transfers, in order, exact to the byte: the request
/// as curl counted it, the response as its header and body sizes.
fn assert_curl_calls(client: &[&Value], transfers: &[Transfer], comm: &str) {
    assert_eq!(
        client.len(),
        transfers.len(),
        "one client call per URL curl fetched: {client:#?}"
    );
    for (c, t) in client.iter().zip(transfers) {
        assert_tls_get(c, &t.path, t.status);
        assert_eq!(c["comm"], comm, "{c}");
        assert_eq!(c["req_bytes"], t.size_request, "{c} {t:?}");
        assert_eq!(
            c["resp_bytes"],
            t.size_header + t.size_download,
            "{c} {t:?}"
        );
    }
}

/// The server's calls are the clients' calls (`common::assert_paired`), and the server's span
/// inside the client's (it starts after the request was written and ends before the response
/// was read: causality, on any load).
fn assert_paired(client: &[&Value], server: &[&Value]) {
    for (cs, ss) in common::assert_paired(client, server).values() {
        for (c, s) in cs.iter().zip(ss) {
            assert!(
                s["latency_ns"].as_u64().unwrap() <= c["latency_ns"].as_u64().unwrap(),
                "server span longer than the client's: {c} {s}"
            );
        }
    }
}

/// nginx over TLS 1.2 and 1.3 with curl (one keep-alive connection each: 5 small pages and
/// a 1 MiB file, plus a 404) and Python's urllib (a connection per request, `SSL_read_ex` /
/// `SSL_write_ex`): every request is one client call with `tls: true` of the process that
/// made it, sizes exact to what curl counted, and one server call of nginx with the same
/// sizes on the same connection; a clear-text request on the same nginx has no `tls`.
#[test]
fn nginx_over_tls_1_2_and_1_3_matches_curl_and_python_exactly() {
    require_root();
    let nginx = Nginx::start();
    let ports = format!("{},{}", nginx.tls, nginx.plain);
    let ebtop = Ebtop::start(&["--json", "--port", &ports]);

    let pages: Vec<&str> = [["/index.html"; 5].as_slice(), &["/big.bin"]].concat();
    let (curl12, t12) = curl(
        nginx.tls,
        "https",
        &["--tlsv1.2", "--tls-max", "1.2"],
        &pages,
    );
    let pages13: Vec<&str> = [pages.as_slice(), &["/missing"]].concat();
    let (curl13, t13) = curl(nginx.tls, "https", &["--tlsv1.3"], &pages13);
    for t in t12.iter().chain(&t13) {
        match t.path.as_str() {
            "/index.html" => assert_eq!((t.status, t.size_download), (200, INDEX.len() as u64)),
            "/big.bin" => assert_eq!((t.status, t.size_download), (200, LARGE_LEN as u64)),
            _ => assert_eq!(t.status, 404),
        }
    }
    let py_paths = [
        "/index.html",
        "/index.html",
        "/big.bin",
        "/index.html",
        "/missing",
    ];
    let urls: Vec<String> = py_paths
        .iter()
        .map(|p| format!("https://127.0.0.1:{}{p}", nginx.tls))
        .collect();
    let (py, py_got) = python_fetch(&urls);
    assert_eq!(py_got.len(), py_paths.len(), "{py_got:?}");
    let py_status = |p: &str| if p == "/missing" { 404 } else { 200 };
    for (p, (status, len)) in py_paths.iter().zip(&py_got) {
        assert_eq!(*status, py_status(p), "python GET {p}");
        if *p == "/big.bin" {
            assert_eq!(*len, LARGE_LEN);
        }
    }
    let (plain_curl, plain_t) = curl(nginx.plain, "http", &[], &["/index.html"; 2]);

    let lines = ebtop.stop();
    let calls = calls(&lines);
    let on_tls_port = |c: &&Value| {
        let p = if c["side"] == "client" {
            &c["peer"]
        } else {
            &c["local"]
        };
        port_of(p) == nginx.tls
    };

    let c12 = of(&calls, curl12, "client");
    assert_curl_calls(&c12, &t12, "curl");
    let c13 = of(&calls, curl13, "client");
    assert_curl_calls(&c13, &t13, "curl");
    for c in c12
        .iter()
        .chain(&c13)
        .filter(|c| c["resource"] == "/big.bin")
    {
        assert!(c["resp_bytes"].as_u64().unwrap() > LARGE_LEN as u64, "{c}");
    }
    let cpy = of(&calls, py, "client");
    assert_eq!(
        cpy.len(),
        py_paths.len(),
        "one client call per Python request: {cpy:#?}"
    );
    for (c, p) in cpy.iter().zip(&py_paths) {
        assert_tls_get(c, p, py_status(p));
        let body = if *p == "/big.bin" { LARGE_LEN } else { 0 };
        assert!(c["resp_bytes"].as_u64().unwrap() > body as u64, "{c}");
    }

    let server: Vec<&Value> = of(&calls, nginx.pid(), "server")
        .into_iter()
        .filter(on_tls_port)
        .collect();
    let tls_clients: Vec<&Value> = [c12, c13, cpy].concat();
    for s in &server {
        assert_eq!(s["tls"], true, "{s}");
        assert_eq!(s["comm"], "nginx", "{s}");
    }
    assert_paired(&tls_clients, &server);

    // Clear text on the same nginx: calls as ever, without `tls`.
    let plain_client = of(&calls, plain_curl, "client");
    assert_eq!(plain_client.len(), 2, "{plain_client:#?}");
    let plain_server: Vec<&Value> = of(&calls, nginx.pid(), "server")
        .into_iter()
        .filter(|c| port_of(&c["local"]) == nginx.plain)
        .collect();
    for (c, t) in plain_client.iter().zip(&plain_t) {
        assert!(c.get("tls").is_none(), "a clear-text call has no tls: {c}");
        assert_eq!(c["resp_bytes"], t.size_header + t.size_download, "{c}");
    }
    assert_paired(&plain_client, &plain_server);

    assert_eq!(
        calls.len(),
        2 * (tls_clients.len() + plain_client.len()),
        "no other calls: {calls:#?}"
    );
    assert_clean_summary(lines.last().unwrap());
}

/// OpenSSL's public functions as the probe sites (`EBTOP_TLS_SITES=public`: what ebtop uses
/// where it cannot prove the internal read/write functions, e.g. BoringSSL or other builds),
/// each a link of its own (`EBTOP_UPROBE_LINKS=single`: what ebtop does on kernels without
/// multi-uprobe links): curl (`SSL_read`/`SSL_write`) and Python (`_ex`) exact on both sides,
/// as with the default.
#[test]
fn public_function_sites_are_exact_too() {
    require_root();
    let nginx = Nginx::start();
    let port = nginx.tls.to_string();
    let ebtop = Ebtop::start_with_env(
        &["--json", "--port", &port],
        &[
            ("EBTOP_TLS_SITES", "public"),
            ("EBTOP_UPROBE_LINKS", "single"),
        ],
    );
    let (curl_pid, transfers) = curl(
        nginx.tls,
        "https",
        &["--tlsv1.3"],
        &["/index.html", "/big.bin", "/index.html"],
    );
    let url = format!("https://127.0.0.1:{}/index.html", nginx.tls);
    let (py_pid, got) = python_fetch(&[url.clone(), url]);
    assert_eq!(got, [(200, INDEX.len()), (200, INDEX.len())]);
    let lines = ebtop.stop();
    let meta = tls_start(&lines);
    assert!(
        meta["tls_probed"]
            .as_array()
            .is_some_and(|f| f.iter().all(|f| {
                // An nginx executable's upstream probe (the call chains) is no TLS site.
                let f = f.as_str().unwrap();
                f.ends_with("[public]") || f.ends_with("[nginx]")
            })),
        "{meta}"
    );
    let calls = calls(&lines);
    let curl_calls = of(&calls, curl_pid, "client");
    assert_curl_calls(&curl_calls, &transfers, "curl");
    let py_calls = of(&calls, py_pid, "client");
    assert_eq!(py_calls.len(), 2, "{calls:#?}");
    let clients: Vec<&Value> = curl_calls.into_iter().chain(py_calls).collect();
    assert_paired(&clients, &of(&calls, nginx.pid(), "server"));
    assert_clean_summary(lines.last().unwrap());
}

/// `--pid`: probes are placed in that process only (per-process uprobes): nginx's server calls
/// are exact, curl (another process mapping the same libssl) shows nothing.
#[test]
fn pid_filter_probes_only_that_process() {
    require_root();
    let nginx = Nginx::start();
    let pid = nginx.pid().to_string();
    let ebtop = Ebtop::start(&["--json", "--pid", &pid]);
    let (_, transfers) = curl(
        nginx.tls,
        "https",
        &["--tlsv1.3"],
        &["/index.html", "/big.bin", "/index.html"],
    );
    assert_eq!(transfers.len(), 3);
    let lines = ebtop.stop();
    let meta = tls_start(&lines);
    let probed = meta["tls_probed"].as_array().expect("files probed");
    assert!(
        probed
            .iter()
            .all(|f| f.as_str().unwrap().contains(&format!("(pid {pid})"))),
        "{meta}"
    );
    let calls = calls(&lines);
    let server = of(&calls, nginx.pid(), "server");
    assert_eq!(server.len(), 3, "{calls:#?}");
    for (c, path) in server
        .iter()
        .zip(["/index.html", "/big.bin", "/index.html"])
    {
        assert_tls_get(c, path, 200);
    }
    assert_eq!(calls.len(), 3, "nothing of other processes: {calls:#?}");
}

/// `--tls off`: the same kinds of TLS traffic make no call at all (their ciphertext is seen,
/// counted as TLS and never parsed; no SSL call is probed), while clear-text calls on the same
/// nginx are still there.
#[test]
fn tls_off_shows_no_tls_calls() {
    require_root();
    let nginx = Nginx::start();
    let ports = format!("{},{}", nginx.tls, nginx.plain);
    let ebtop = Ebtop::start(&["--json", "--port", &ports, "--tls", "off"]);
    curl(
        nginx.tls,
        "https",
        &["--tlsv1.2", "--tls-max", "1.2"],
        &["/index.html"; 3],
    );
    curl(
        nginx.tls,
        "https",
        &["--tlsv1.3"],
        &["/index.html", "/big.bin"],
    );
    let url = format!("https://127.0.0.1:{}/index.html", nginx.tls);
    let (_, got) = python_fetch(&[url.clone(), url]);
    assert_eq!(got, [(200, INDEX.len()), (200, INDEX.len())]);
    let (plain_curl, _) = curl(nginx.plain, "http", &[], &["/index.html"; 2]);
    let lines = ebtop.stop();
    let calls = calls(&lines);
    let tls: Vec<&&Value> = calls.iter().filter(|c| c["tls"] == true).collect();
    assert!(tls.is_empty(), "TLS calls with --tls off: {tls:#?}");
    let on_tls_port: Vec<&&Value> = calls
        .iter()
        .filter(|c| port_of(&c["local"]) == nginx.tls || port_of(&c["peer"]) == nginx.tls)
        .collect();
    assert!(
        on_tls_port.is_empty(),
        "calls on the TLS port: {on_tls_port:#?}"
    );
    assert_eq!(of(&calls, plain_curl, "client").len(), 2, "{calls:#?}");
    assert_eq!(of(&calls, nginx.pid(), "server").len(), 2, "{calls:#?}");
    let summary = lines.last().unwrap();
    assert!(
        summary["kernel"]["tls_cipher_events"].as_u64().unwrap() > 0,
        "the encrypted connections were seen (as TLS): {summary}"
    );
    assert_eq!(summary["kernel"]["tls_calls"], 0, "{summary}");
    assert_clean_summary(summary);
}

/// A recording of TLS traffic replays (without root, without probes) to the calls the live
/// session printed, `tls: true` included, and the processes' TLS probe hits with them.
#[test]
fn a_recording_of_tls_calls_replays_to_the_same_calls() {
    require_root();
    let nginx = Nginx::start();
    let dir = tempfile::tempdir().unwrap();
    let rec = dir.path().join("tls.ebt");
    let port = nginx.tls.to_string();
    let ebtop = Ebtop::start(&["--json", "--port", &port, "-w", rec.to_str().unwrap()]);
    curl(
        nginx.tls,
        "https",
        &["--tlsv1.3"],
        &["/index.html", "/big.bin", "/index.html"],
    );
    let lines = ebtop.stop();
    let as_text = |lines: &[Value], kind: &str| -> Vec<String> {
        lines
            .iter()
            .filter(|v| v["type"] == kind)
            .map(|v| serde_json::to_string(v).unwrap())
            .collect()
    };
    let live = as_text(&lines, "call");
    assert_eq!(live.len(), 6, "{live:#?}");
    assert!(calls(&lines).iter().all(|c| c["tls"] == true));
    let mut args = vec!["-r", rec.to_str().unwrap(), "--json"];
    let extra = replay_args();
    args.extend(extra.iter().map(String::as_str));
    let out = Command::new(env!("CARGO_BIN_EXE_ebtop"))
        .args(&args)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let replayed: Vec<Value> = String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(as_text(&replayed, "call"), live, "same calls, same order");
    assert_eq!(
        replayed.last().unwrap()["kernel"],
        lines.last().unwrap()["kernel"],
        "kernel counters (TLS ones included) recorded"
    );
}

/// The comm of a process started from `path`: its file name, cut at 15 bytes.
fn comm_of(path: &Path) -> String {
    let name = path.file_name().unwrap().to_str().unwrap();
    name.chars().take(15).collect()
}

/// The OpenSSL a static server is linked with.
#[derive(Clone, Copy, Debug)]
enum StaticOpenssl {
    /// The system's static archives (libssl-dev: OpenSSL 3 on Debian 12).
    System,
    /// OpenSSL 1.1.1w, built from source once per target dir (tests/fixtures/tls/openssl111).
    V111,
    /// BoringSSL (no `_ex` functions, none of OpenSSL's internal ones), in a Rust server
    /// (tests/fixtures/tls/boringssl) whose SSL_read/SSL_write are local symbols.
    BoringSsl,
}

/// The BoringSSL server of tests/fixtures/tls/boringssl, built once per target dir (the
/// boring-sys crate builds BoringSSL with cmake: minutes the first time).
fn boringssl_server() -> PathBuf {
    static BIN: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    BIN.get_or_init(|| {
        let root = Path::new(env!("CARGO_MANIFEST_DIR"));
        let target = root.join("target/fixtures/boringssl");
        let out = Command::new(env!("CARGO"))
            .args([
                "build",
                "--quiet",
                "--locked",
                "--release",
                "--manifest-path",
            ])
            .arg(root.join("tests/fixtures/tls/boringssl/Cargo.toml"))
            .arg("--target-dir")
            .arg(&target)
            .output()
            .expect("cargo runs");
        assert!(
            out.status.success(),
            "building the BoringSSL server (tests/fixtures/tls/boringssl): {}",
            String::from_utf8_lossy(&out.stderr)
        );
        target.join("release/boringssl-server")
    })
    .clone()
}

/// Where OpenSSL 1.1.1 was built (`include/`, `lib/`): `cargo run` of the fixture crate that
/// builds it (the openssl-src crate; minutes the first time, then cached in target/).
fn openssl111_dir() -> PathBuf {
    static DIR: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    DIR.get_or_init(|| {
        let root = Path::new(env!("CARGO_MANIFEST_DIR"));
        let out = Command::new(env!("CARGO"))
            .args(["run", "--quiet", "--locked", "--manifest-path"])
            .arg(root.join("tests/fixtures/tls/openssl111/Cargo.toml"))
            .arg("--target-dir")
            .arg(root.join("target/fixtures/openssl111"))
            .output()
            .expect("cargo runs");
        assert!(
            out.status.success(),
            "building OpenSSL 1.1.1 (tests/fixtures/tls/openssl111): {}",
            String::from_utf8_lossy(&out.stderr)
        );
        PathBuf::from(String::from_utf8(out.stdout).unwrap().trim())
    })
    .clone()
}

/// Compiles tests/fixtures/tls/static_server.c against OpenSSL's static archives into `dir`,
/// and checks that the result has SSL_read/SSL_write of its own and maps no libssl.
fn build_static_server(dir: &Path, openssl: StaticOpenssl) -> PathBuf {
    if let StaticOpenssl::BoringSsl = openssl {
        return check_boringssl_server(dir);
    }
    let system_archive = |name: &str| -> PathBuf {
        let out = Command::new("cc")
            .arg(format!("-print-file-name={name}"))
            .output()
            .expect("a C compiler (cc) is installed");
        let path = String::from_utf8(out.stdout).unwrap().trim().to_string();
        assert!(
            Path::new(&path).is_absolute(),
            "{name} not found: libssl-dev is installed"
        );
        PathBuf::from(path)
    };
    let (include, ssl, crypto) = match openssl {
        StaticOpenssl::System => (
            None,
            system_archive("libssl.a"),
            system_archive("libcrypto.a"),
        ),
        StaticOpenssl::BoringSsl => unreachable!("built above"),
        StaticOpenssl::V111 => {
            let d = openssl111_dir();
            (
                Some(d.join("include")),
                d.join("lib/libssl.a"),
                d.join("lib/libcrypto.a"),
            )
        }
    };
    let bin = dir.join("static_tls_srv");
    let src = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/tls/static_server.c");
    let mut cc = Command::new("cc");
    if let Some(include) = include {
        cc.arg("-I").arg(include);
    }
    let out = cc
        .args(["-O2", "-o"])
        .arg(&bin)
        .arg(&src)
        .arg(ssl)
        .arg(crypto)
        .args(["-lpthread", "-ldl"])
        .output()
        .unwrap();
    assert!(out.status.success(), "cc static_server.c: {out:?}");
    let nm = symbols_of_static(&bin);
    for sym in ["SSL_read", "SSL_read_ex", "SSL_write", "SSL_write_ex"] {
        assert!(
            nm.lines().any(|l| l.ends_with(&format!(" T {sym}"))),
            "{sym} is defined in the executable"
        );
    }
    if let StaticOpenssl::V111 = openssl {
        let strings = Command::new("strings").arg(&bin).output().unwrap();
        assert!(
            String::from_utf8_lossy(&strings.stdout).contains("OpenSSL 1.1.1w"),
            "{} is linked with OpenSSL 1.1.1w",
            bin.display()
        );
    }
    bin
}

/// `nm`'s list of `bin`'s symbols, once `ldd` shows it maps no libssl or libcrypto.
fn symbols_of_static(bin: &Path) -> String {
    let ldd = Command::new("ldd").arg(bin).output().unwrap();
    let ldd = String::from_utf8_lossy(&ldd.stdout);
    assert!(
        !ldd.contains("libssl") && !ldd.contains("libcrypto"),
        "linked statically: {ldd}"
    );
    let nm = Command::new("nm").arg(bin).output().unwrap();
    String::from_utf8_lossy(&nm.stdout).into_owned()
}

/// A copy in `dir` of the BoringSSL server, checked: no libssl mapped, SSL_read and
/// SSL_write defined in it (local symbols, as in most programs that link BoringSSL), no `_ex`
/// forms, BoringSSL's own (`bssl::`) code in it.
fn check_boringssl_server(dir: &Path) -> PathBuf {
    let bin = dir.join("boringssl-server");
    std::fs::copy(boringssl_server(), &bin).unwrap();
    let nm = symbols_of_static(&bin);
    let defined = |sym: &str| {
        nm.lines()
            .any(|l| l.ends_with(&format!(" t {sym}")) || l.ends_with(&format!(" T {sym}")))
    };
    assert!(
        defined("SSL_read") && defined("SSL_write"),
        "{}",
        bin.display()
    );
    assert!(!defined("SSL_read_ex") && !defined("SSL_write_ex"));
    assert!(nm.contains("_ZN4bssl"), "BoringSSL's C++ code is linked in");
    bin
}

/// A server linked statically with OpenSSL 3 (no libssl.so: its SSL_read_ex / SSL_write /
/// SSL_write_ex are in the executable), started after ebtop: its calls show under its comm,
/// and once they do, curl's requests on one keep-alive connection and h2load's 100 requests
/// on 2 connections (a thread each) are exact on both sides.
///
/// ebtop can only probe a new executable after it learned of its exec, so requests made at
/// once may go unseen (or be seen from the middle): single warm-up requests, left out of the
/// counts, run until the first server call shows (bounded).
#[test]
fn a_server_linked_statically_with_openssl_started_after_ebtop_is_traced() {
    static_server_started_after_ebtop_is_traced(StaticOpenssl::System);
}

/// The same with OpenSSL 1.1.1 (the last 1.1 release, built from source: no distribution
/// here ships it): its `SSL_read`/`SSL_write` and `_ex` forms, and the internal functions
/// they share, in the executable.
#[test]
fn a_server_linked_statically_with_openssl_1_1_started_after_ebtop_is_traced() {
    static_server_started_after_ebtop_is_traced(StaticOpenssl::V111);
}

/// The same with BoringSSL, linked into a Rust program: only SSL_read/SSL_write exist, as
/// local symbols, and their public entry points are probed.
#[test]
fn a_server_linked_statically_with_boringssl_started_after_ebtop_is_traced() {
    static_server_started_after_ebtop_is_traced(StaticOpenssl::BoringSsl);
}

fn static_server_started_after_ebtop_is_traced(openssl: StaticOpenssl) {
    require_root();
    const BIG: usize = 300_001;
    let dir = tempfile::tempdir().unwrap();
    let bin = build_static_server(dir.path(), openssl);
    let (cert, key) = self_signed_cert(dir.path());
    let port = free_tcp_port();
    let p = port.to_string();
    let mut ebtop = Ebtop::start(&["--json", "--port", &p]);

    let mut child = Command::new(&bin)
        .arg(&p)
        .arg(&cert)
        .arg(&key)
        .arg(BIG.to_string())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let server = Peer(child);
    assert_eq!(line.trim(), "ready", "the static server starts");

    let server_pid = server.0.id();
    let mut warmup = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        warmup.push(curl(port, "https", &[], &["/"]).0);
        let seen = ebtop.wait_for(Duration::from_millis(500), |v| {
            v["type"] == "call" && v["side"] == "server" && v["pid"] == server_pid
        });
        if seen.is_some() {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "no call of the static server after {} requests",
            warmup.len()
        );
    }

    let paths = ["/", "/", "/big", "/", "/nope", "/"];
    let (curl_pid, transfers) = curl(port, "https", &[], &paths);
    for t in &transfers {
        let want = match t.path.as_str() {
            "/" => (200, 6),
            "/big" => (200, BIG as u64),
            _ => (404, 0),
        };
        assert_eq!((t.status, t.size_download), want, "{t:?}");
    }
    const N: usize = 100;
    let h2load_pid = h2load_h1(&format!("https://127.0.0.1:{port}/"), N);

    let lines = ebtop.stop();
    let calls = calls(&lines);
    let client_curl = of(&calls, curl_pid, "client");
    assert_curl_calls(&client_curl, &transfers, "curl");
    let head = |len: usize| format!("HTTP/1.1 200 OK\r\nContent-Length: {len}\r\n\r\n").len();
    for c in &client_curl {
        if c["resource"] == "/big" {
            assert_eq!(c["resp_bytes"], head(BIG) + BIG, "{c}");
        }
    }
    let client_h2load = of(&calls, h2load_pid, "client");
    assert_eq!(
        client_h2load.len(),
        N,
        "h2load's requests: {client_h2load:#?}"
    );
    for c in &client_h2load {
        assert_tls_get(c, "/", 200);
        assert_eq!(c["resp_bytes"], head(6) + 6, "{c}");
    }
    let server_calls = of(&calls, server_pid, "server");
    for s in &server_calls {
        assert_eq!(s["comm"], comm_of(&bin), "{s}");
        assert_eq!(s["tls"], true, "{s}");
    }
    // The server's calls on the warm-up connections (the warm-up clients' own calls, curl's
    // libssl being probed from the start, name those connections) are left out.
    let warmup_calls: Vec<&Value> = warmup
        .iter()
        .flat_map(|&pid| of(&calls, pid, "client"))
        .collect();
    assert_eq!(warmup_calls.len(), warmup.len(), "{warmup_calls:#?}");
    let warmup_conns: Vec<&Value> = warmup_calls.iter().map(|c| &c["local"]).collect();
    let (server_warmup, server_measured): (Vec<&Value>, Vec<&Value>) = server_calls
        .iter()
        .partition(|s| warmup_conns.contains(&&s["peer"]));
    assert!(!server_warmup.is_empty());
    let clients: Vec<&Value> = [client_curl, client_h2load].concat();
    assert_paired(&clients, &server_measured);
    assert_eq!(
        calls.len(),
        2 * clients.len() + warmup_calls.len() + server_warmup.len(),
        "no other calls: {calls:#?}"
    );
    // Not assert_clean_summary: a warm-up connection may have been picked up mid-way.
    let summary = lines.last().unwrap();
    assert_eq!(summary["kernel"]["lost"], 0, "{summary}");

    // Running at the start of another ebtop, the server is listed with the sites probed: the
    // internal read and write functions, whose wrappers both OpenSSL builds compile to a
    // shape `internal_sites` proves (OpenSSL 1.1.1 built with frame pointers); BoringSSL's
    // public functions.
    let again = Ebtop::start(&["--json", "--port", &p]);
    let meta = tls_start(&again.collected).clone();
    drop(again.stop());
    let sites = match openssl {
        StaticOpenssl::BoringSsl => "public",
        _ => "internal",
    };
    let listed = format!("/proc/{server_pid}/exe [{sites}]");
    assert!(
        meta["tls_probed"]
            .as_array()
            .is_some_and(|a| a.iter().any(|f| f == listed.as_str())),
        "{openssl:?}: {listed} in {meta}"
    );
}

/// https_client.py `fetch --wait` of `urls` (`flags` after --wait), started and waiting,
/// with no libssl mapped yet: its pid, stdin (a line lets it go on), stdout and the process.
fn waiting_fetch(
    urls: &[String],
    flags: &[&str],
    env: &[(&str, &Path)],
) -> (u32, ChildStdin, BufReader<ChildStdout>, Peer) {
    let mut child = Command::new("python3")
        .arg(https_client())
        .args(["fetch", "--wait"])
        .args(flags)
        .args(urls)
        .envs(env.iter().copied())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("python3 runs");
    let pid = child.id();
    let stdin = child.stdin.take().unwrap();
    let mut out = BufReader::new(child.stdout.take().unwrap());
    let py = Peer(child);
    let mut line = String::new();
    out.read_line(&mut line).unwrap();
    assert_eq!(line.trim(), "waiting");
    let maps = std::fs::read_to_string(format!("/proc/{pid}/maps")).unwrap();
    assert!(!maps.contains("libssl"), "no libssl yet: {maps}");
    (pid, stdin, out, py)
}

/// A Python process that loads libssl only after ebtop started (it waits for a line on stdin
/// before importing ssl; its maps show no libssl until then): each of its requests is a
/// client call with `tls: true`, paired with nginx's.
#[test]
fn libssl_loaded_after_ebtop_started_is_traced() {
    require_root();
    let nginx = Nginx::start();
    let paths = ["/index.html", "/big.bin", "/index.html", "/index.html"];
    let urls: Vec<String> = paths
        .iter()
        .map(|p| format!("https://127.0.0.1:{}{p}", nginx.tls))
        .collect();
    let (pid, mut stdin, out, mut py) = waiting_fetch(&urls, &[], &[]);

    let p = nginx.tls.to_string();
    let ebtop = Ebtop::start(&["--json", "--port", &p]);
    stdin.write_all(b"go\n").unwrap();
    drop(stdin);
    let mut got = Vec::new();
    for l in out.lines() {
        got.push(l.unwrap());
    }
    let status = py.0.wait().unwrap();
    assert!(status.success(), "python: {status}");
    let want: Vec<String> = paths
        .iter()
        .map(|p| {
            let len = if *p == "/big.bin" {
                LARGE_LEN
            } else {
                INDEX.len()
            };
            format!("200 {len}")
        })
        .collect();
    assert_eq!(got, want);

    let lines = ebtop.stop();
    let calls = calls(&lines);
    let client = of(&calls, pid, "client");
    assert_eq!(client.len(), paths.len(), "Python's requests: {calls:#?}");
    for (c, p) in client.iter().zip(&paths) {
        assert_tls_get(c, p, 200);
    }
    let server = of(&calls, nginx.pid(), "server");
    assert_paired(&client, &server);
    assert_eq!(calls.len(), 2 * paths.len(), "no other calls: {calls:#?}");
    assert_clean_summary(lines.last().unwrap());
}

/// The BPF links a process holds (one per attached probe).
fn links_of(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fdinfo"))
        .map(|dir| {
            dir.flatten()
                .filter(|e| std::fs::read_to_string(e.path()).is_ok_and(|t| t.contains("link_id:")))
                .count()
        })
        .unwrap_or(0)
}

/// A running process that loads a libssl from its own directory, outside the library
/// directories (LD_LIBRARY_PATH, as an application bundling OpenSSL does), after ebtop
/// started: its dlopen() is seen, the library probed before the process's next step, and
/// every request it makes after that is a client call with `tls: true`. (`--pid`: the
/// probes are placed in that process only, so the links ebtop adds are this library's.)
#[test]
fn libssl_dlopened_from_a_private_directory_after_start_is_traced() {
    require_root();
    let nginx = Nginx::start();
    let private = tempfile::tempdir().unwrap();
    for lib in ["libssl.so.3", "libcrypto.so.3"] {
        std::fs::copy(
            Path::new("/lib/x86_64-linux-gnu").join(lib),
            private.path().join(lib),
        )
        .unwrap_or_else(|e| panic!("copying {lib}: {e}"));
    }
    let paths = ["/index.html", "/big.bin", "/index.html"];
    let urls: Vec<String> = paths
        .iter()
        .map(|p| format!("https://127.0.0.1:{}{p}", nginx.tls))
        .collect();
    let (pid, mut stdin, mut out, mut py) =
        waiting_fetch(&urls, &["--pause"], &[("LD_LIBRARY_PATH", private.path())]);
    let mut line = String::new();

    let ebtop = Ebtop::start(&["--json", "--pid", &pid.to_string()]);
    let before = links_of(ebtop.pid());
    stdin.write_all(b"go\n").unwrap();
    line.clear();
    out.read_line(&mut line).unwrap();
    assert_eq!(line.trim(), "imported");
    let maps = std::fs::read_to_string(format!("/proc/{pid}/maps")).unwrap();
    let private_ssl = private.path().join("libssl.so.3");
    assert!(
        maps.contains(private_ssl.to_str().unwrap()),
        "the private libssl is mapped: {maps}"
    );
    // Until ebtop placed its probes in that library (links stop growing).
    let deadline = Instant::now() + Duration::from_secs(30);
    let (mut last, mut same) = (before, 0);
    while same < 3 {
        assert!(
            Instant::now() < deadline,
            "ebtop never probed {} ({before} links then {last})",
            private_ssl.display()
        );
        std::thread::sleep(Duration::from_millis(100));
        let n = links_of(ebtop.pid());
        same = if n == last && n > before { same + 1 } else { 0 };
        last = n;
    }
    stdin.write_all(b"go\n").unwrap();
    drop(stdin);
    let got: Vec<String> = out.lines().map(Result::unwrap).collect();
    let status = py.0.wait().unwrap();
    assert!(status.success(), "python: {status}");
    assert_eq!(got.len(), paths.len(), "{got:?}");

    let lines = ebtop.stop();
    let probed = tls_start(&lines)["tls_probed"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    assert!(
        !probed.iter().any(|p| p
            .as_str()
            .unwrap()
            .contains(private.path().to_str().unwrap())),
        "not known at start: {probed:?}"
    );
    let calls = calls(&lines);
    let client = of(&calls, pid, "client");
    assert_eq!(client.len(), paths.len(), "Python's requests: {calls:#?}");
    for (c, p) in client.iter().zip(&paths) {
        assert_tls_get(c, p, 200);
    }
    let summary = lines.last().unwrap();
    // The summary counts the files probed after the start too (the private copy), and that
    // none failed.
    assert!(
        summary["kernel"]["tls_files_probed"].as_u64().unwrap() > probed.len() as u64,
        "{probed:?} at start: {}",
        summary["kernel"]
    );
    assert_eq!(summary["kernel"]["tls_probe_failures"], 0);
    assert_clean_summary(summary);
}

/// The background client of https_client.py `loop`: asks it how many requests it completed.
struct Loop {
    peer: Peer,
    stdin: Option<ChildStdin>,
    out: BufReader<ChildStdout>,
}

impl Loop {
    fn start(port: u16, www: &Path) -> Loop {
        let mut child = Command::new("python3")
            .arg(https_client())
            .arg("loop")
            .arg(port.to_string())
            .arg(www)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("python3 runs");
        let stdin = child.stdin.take();
        let out = BufReader::new(child.stdout.take().unwrap());
        Loop {
            peer: Peer(child),
            stdin,
            out,
        }
    }

    fn count(&mut self) -> u64 {
        let stdin = self.stdin.as_mut().unwrap();
        stdin.write_all(b"mark\n").unwrap();
        stdin.flush().unwrap();
        let mut line = String::new();
        self.out.read_line(&mut line).unwrap();
        line.trim()
            .parse()
            .unwrap_or_else(|_| panic!("the loop client failed (it answered {line:?})"))
    }

    /// Waits (bounded) until the loop completed more than `than` requests; returns the count.
    fn progressed(&mut self, than: u64) -> u64 {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let n = self.count();
            if n > than {
                return n;
            }
            assert!(Instant::now() < deadline, "the loop client is stuck at {n}");
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Ends the loop: it must exit 0 having completed more than `than` requests.
    fn finish(mut self, than: u64) {
        drop(self.stdin.take());
        let mut line = String::new();
        self.out.read_line(&mut line).unwrap();
        let status = self.peer.0.wait().unwrap();
        assert!(status.success(), "the loop client failed: {status}");
        let n: u64 = line
            .trim()
            .strip_prefix("done ")
            .and_then(|n| n.parse().ok())
            .unwrap_or_else(|| panic!("{line:?}"));
        assert!(n > than, "{n}");
    }
}

/// h2load over HTTP/1.1 (`--h1`): `n` requests to `url` on 2 connections, all answered 2xx; its
/// pid.
fn h2load_h1(url: &str, n: usize) -> u32 {
    let h2load = Command::new("h2load")
        .args(["--h1", "-n", &n.to_string(), "-c", "2", url])
        .stdout(Stdio::piped())
        .spawn()
        .expect("h2load is installed (nghttp2-client)");
    let pid = h2load.id();
    let out = h2load.wait_with_output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success()
            && text.contains(&format!("{n} succeeded, 0 failed, 0 errored"))
            && text.contains(&format!("{n} 2xx")),
        "{text}"
    );
    pid
}

/// One round of traffic on `port`: h2load's 300 requests on 2 connections and 5 curl runs of
/// 3 requests (a 1 MiB file among them), every response checked; the pids and what curl saw.
fn round(port: u16) -> (u32, Vec<(u32, Vec<Transfer>)>) {
    const N: usize = 300;
    let h2load_pid = h2load_h1(&format!("https://127.0.0.1:{port}/index.html"), N);
    let curls = (0..5)
        .map(|_| {
            let (pid, t) = curl(
                port,
                "https",
                &[],
                &["/index.html", "/big.bin", "/index.html"],
            );
            for t in &t {
                let len = if t.path == "/big.bin" {
                    LARGE_LEN
                } else {
                    INDEX.len()
                };
                assert_eq!((t.status, t.size_download), (200, len as u64), "{t:?}");
            }
            (pid, t)
        })
        .collect();
    (h2load_pid, curls)
}

/// A traced round is exact: h2load's 300 and each curl's 3 calls on the client side, as many
/// on nginx's, paired; none of the loop client's (another port).
fn assert_round(
    lines: &[Value],
    nginx: &Nginx,
    (h2load, curls): &(u32, Vec<(u32, Vec<Transfer>)>),
) {
    let calls = calls(lines);
    let mut clients = of(&calls, *h2load, "client");
    assert_eq!(clients.len(), 300, "h2load's calls");
    for c in &clients {
        assert_tls_get(c, "/index.html", 200);
    }
    for (pid, transfers) in curls {
        let mine = of(&calls, *pid, "client");
        assert_curl_calls(&mine, transfers, "curl");
        clients.extend(mine);
    }
    let other: Vec<&&Value> = calls
        .iter()
        .filter(|c| {
            port_of(&c["local"]) == nginx.other_tls || port_of(&c["peer"]) == nginx.other_tls
        })
        .collect();
    assert!(
        other.is_empty(),
        "--port leaves the other port out: {other:#?}"
    );
    let server = of(&calls, nginx.pid(), "server");
    assert_paired(&clients, &server);
    assert_eq!(calls.len(), 2 * clients.len(), "no other calls");
    assert_clean_summary(lines.last().unwrap());
}

/// Traced programs are unharmed by the probes coming and going: a Python client loops over
/// keep-alive TLS connections (1 MiB bodies among them, each checked) on another port while
/// ebtop attaches, detaches and attaches again, and rounds of h2load and curl run in each of
/// the three states. Every response is right, every program exits 0, the loop makes progress
/// in each state, and the traced rounds are exact.
#[test]
fn tls_programs_are_unharmed_as_probes_attach_and_detach() {
    require_root();
    let nginx = Nginx::start();
    let mut bg = Loop::start(nginx.other_tls, &nginx.www);
    let mut done = bg.progressed(0);
    let p = nginx.tls.to_string();

    let ebtop = Ebtop::start(&["--json", "--port", &p]);
    let traced = round(nginx.tls);
    done = bg.progressed(done);
    let lines = ebtop.stop();
    assert_round(&lines, &nginx, &traced);
    done = bg.progressed(done);

    round(nginx.tls);
    done = bg.progressed(done);

    let ebtop = Ebtop::start(&["--json", "--port", &p]);
    let traced = round(nginx.tls);
    done = bg.progressed(done);
    let lines = ebtop.stop();
    assert_round(&lines, &nginx, &traced);
    bg.finish(done);
}
