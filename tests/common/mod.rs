//! Shared helpers for integration tests: root check, a real HTTP/1.1 server, running ebtop.
#![allow(dead_code)]

pub mod postgres;
pub mod tmux;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use serde_json::Value;

/// Live tests load BPF: without root they fail loudly (CI runs as root), never pass silently.
pub fn require_root() {
    // SAFETY: geteuid has no preconditions.
    let euid = unsafe { libc::geteuid() };
    assert_eq!(
        euid, 0,
        "this test loads eBPF programs and needs root: run the suite with sudo (CI runs as root)"
    );
}

pub const SLOW_MS: u64 = 50;
pub const BIG_LEN: usize = 200_000;

/// A small HTTP/1.1 server with keep-alive and pipelining, one thread per connection.
/// Routes: `/` (small), `/slow` (sleeps SLOW_MS), `/chunked` (4 chunks, one write each),
/// `/big` (BIG_LEN bytes body, written with writev), `/sleep/MS/...` (sleeps MS ms),
/// `/error` (503), anything else 404.
pub struct TestServer {
    pub port: u16,
    stop: Arc<AtomicBool>,
    /// (path, ns from request parsed to response write) of every /sleep request: the server's
    /// own view of its latency, ground truth for ebtop's server side.
    pub timings: Timings,
}

pub type Timings = Arc<std::sync::Mutex<Vec<(String, u64)>>>;

impl TestServer {
    pub fn start() -> TestServer {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let stop = Arc::new(AtomicBool::new(false));
        let stop2 = stop.clone();
        let timings: Timings = Default::default();
        let t2 = timings.clone();
        thread::spawn(move || {
            for conn in listener.incoming() {
                if stop2.load(Ordering::Relaxed) {
                    break;
                }
                if let Ok(c) = conn {
                    let t = t2.clone();
                    thread::spawn(move || serve(c, t));
                }
            }
        });
        TestServer {
            port,
            stop,
            timings,
        }
    }
}

impl Drop for TestServer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        let _ = TcpStream::connect(("127.0.0.1", self.port));
    }
}

fn serve(mut c: TcpStream, timings: Timings) {
    let mut buf = Vec::new();
    let mut tmp = [0u8; 65536];
    loop {
        // Answer every complete request in the buffer (pipelining), then read more.
        loop {
            let mut headers = [httparse::EMPTY_HEADER; 32];
            let mut req = httparse::Request::new(&mut headers);
            let n = match req.parse(&buf) {
                Ok(httparse::Status::Complete(n)) => n,
                Ok(httparse::Status::Partial) => break,
                Err(_) => return,
            };
            let path = req.path.unwrap_or("").to_string();
            let body_len: usize = req
                .headers
                .iter()
                .find(|h| h.name.eq_ignore_ascii_case("content-length"))
                .and_then(|h| std::str::from_utf8(h.value).ok()?.parse().ok())
                .unwrap_or(0);
            if buf.len() < n + body_len {
                break;
            }
            buf.drain(..n + body_len);
            let t = Instant::now();
            if respond(&mut c, &path, t, &timings).is_err() {
                return;
            }
        }
        match c.read(&mut tmp) {
            Ok(0) | Err(_) => return,
            Ok(k) => buf.extend_from_slice(&tmp[..k]),
        }
    }
}

fn respond(c: &mut TcpStream, path: &str, t: Instant, timings: &Timings) -> std::io::Result<()> {
    match path {
        "/" => c.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 12\r\n\r\nhello world\n"),
        "/slow" => {
            // Timed as "/slow PEER_PORT" so a test can pair it with its connection.
            thread::sleep(Duration::from_millis(SLOW_MS));
            let port = c.peer_addr().map(|a| a.port()).unwrap_or(0);
            timings
                .lock()
                .unwrap()
                .push((format!("/slow {port}"), t.elapsed().as_nanos() as u64));
            c.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 4\r\n\r\nslow")
        }
        "/chunked" => {
            c.write_all(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n")?;
            for part in ["first ", "second ", "third"] {
                c.write_all(format!("{:x}\r\n{part}\r\n", part.len()).as_bytes())?;
            }
            c.write_all(b"0\r\n\r\n")
        }
        "/big" => {
            let head = format!("HTTP/1.1 200 OK\r\nContent-Length: {BIG_LEN}\r\n\r\n");
            let body = vec![b'b'; BIG_LEN];
            let bufs = [
                std::io::IoSlice::new(head.as_bytes()),
                std::io::IoSlice::new(&body),
            ];
            let total = head.len() + BIG_LEN;
            let mut sent = c.write_vectored(&bufs)?;
            if sent < head.len() {
                c.write_all(&head.as_bytes()[sent..])?;
                sent = head.len();
            }
            c.write_all(&body[sent - head.len()..total - head.len()])
        }
        p if p.starts_with("/sleep/") => {
            // /sleep/MS[/anything]: sleeps MS milliseconds, then 200.
            let ms: u64 = p[7..]
                .split('/')
                .next()
                .and_then(|v| v.parse().ok())
                .unwrap_or(0);
            thread::sleep(Duration::from_millis(ms));
            timings
                .lock()
                .unwrap()
                .push((path.to_string(), t.elapsed().as_nanos() as u64));
            c.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
        }
        "/error" => c.write_all(b"HTTP/1.1 503 Service Unavailable\r\nContent-Length: 0\r\n\r\n"),
        _ => c.write_all(b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n"),
    }
}

/// Reads one HTTP/1.1 response (Content-Length or chunked) from `r`; returns (status, body len).
pub fn read_response(r: &mut BufReader<TcpStream>) -> (u16, usize) {
    let mut line = String::new();
    r.read_line(&mut line).unwrap();
    let status: u16 = line.split_whitespace().nth(1).unwrap().parse().unwrap();
    let mut len = 0usize;
    let mut chunked = false;
    loop {
        let mut h = String::new();
        r.read_line(&mut h).unwrap();
        let h = h.trim_end();
        if h.is_empty() {
            break;
        }
        let lower = h.to_ascii_lowercase();
        if let Some(v) = lower.strip_prefix("content-length:") {
            len = v.trim().parse().unwrap();
        }
        if lower.starts_with("transfer-encoding:") && lower.contains("chunked") {
            chunked = true;
        }
    }
    if !chunked {
        let mut body = vec![0u8; len];
        r.read_exact(&mut body).unwrap();
        return (status, len);
    }
    let mut total = 0;
    loop {
        let mut size = String::new();
        r.read_line(&mut size).unwrap();
        let n = usize::from_str_radix(size.trim(), 16).unwrap();
        let mut chunk = vec![0u8; n + 2];
        r.read_exact(&mut chunk).unwrap();
        total += n;
        if n == 0 {
            return (status, total);
        }
    }
}

/// The `tls` line: the files probed for the processes running at the start (what `meta` said
/// when the start waited for them).
pub fn tls_start(lines: &[Value]) -> &Value {
    lines
        .iter()
        .find(|v| v["type"] == "tls")
        .expect("a tls line (ebtop with TLS probes)")
}

/// `--hooks X` when the suite runs against one capture path (`EBTOP_TEST_HOOKS=socket|syscalls`,
/// as scripts/test does for each), and `--threads N` when it runs with that many tracking
/// threads (`EBTOP_TEST_THREADS`); nothing otherwise (ebtop chooses).
pub fn hooks_args() -> Vec<String> {
    let mut args = replay_args();
    if let Ok(h) = std::env::var("EBTOP_TEST_HOOKS") {
        if !h.is_empty() {
            args.extend(["--hooks".into(), h]);
        }
    }
    args
}

/// The part of [`hooks_args`] a replay takes: `--threads N` (a replay has no hooks, and
/// refuses live-only options).
pub fn replay_args() -> Vec<String> {
    let mut args = Vec::new();
    if let Ok(t) = std::env::var("EBTOP_TEST_THREADS") {
        if !t.is_empty() {
            args.extend(["--threads".into(), t]);
        }
    }
    args
}

/// Replays recording `path` to JSON (`ebtop -r PATH --json EXTRA…` with [`replay_args`]):
/// its lines. Panics, with ebtop's stderr, if the replay fails.
pub fn replay_json(path: &std::path::Path, extra: &[&str]) -> Vec<Value> {
    let out = Command::new(env!("CARGO_BIN_EXE_ebtop"))
        .arg("-r")
        .arg(path)
        .arg("--json")
        .args(extra)
        .args(replay_args())
        .output()
        .expect("ebtop runs");
    assert!(
        out.status.success(),
        "replay of {} failed: {}",
        path.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("bad JSON line {l:?}: {e}")))
        .collect()
}

/// A running `ebtop --json`, its stdout lines collected by a thread.
pub struct Ebtop {
    child: Child,
    lines: mpsc::Receiver<String>,
    pub collected: Vec<Value>,
}

impl Ebtop {
    /// Starts ebtop with `args` and waits until its `meta` line says the probes are attached.
    pub fn start(args: &[&str]) -> Ebtop {
        Ebtop::start_with_env(args, &[])
    }

    /// As `start`, with these environment variables set for ebtop.
    pub fn start_with_env(args: &[&str], env: &[(&str, &str)]) -> Ebtop {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_ebtop"));
        // Tests compare every call with ground truth: no CPU budget unless one asks for it
        // (`--max-cpu` wins over this; tests/budget.rs checks the default itself).
        cmd.env("EBTOP_MAX_CPU", "off");
        Ebtop::start_command(cmd, args, env)
    }

    /// As `start_with_env`, from `cmd` (ebtop's path, and what the caller set on it).
    pub fn start_command(mut cmd: Command, args: &[&str], env: &[(&str, &str)]) -> Ebtop {
        let mut child = cmd
            .args(args)
            .args(hooks_args())
            .envs(env.iter().copied())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("ebtop starts");
        let stdout = child.stdout.take().unwrap();
        let (tx, rx) = mpsc::channel();
        thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                match line {
                    Ok(l) => {
                        if tx.send(l).is_err() {
                            break;
                        }
                    }
                    Err(_) => break,
                }
            }
        });
        let mut e = Ebtop {
            child,
            lines: rx,
            collected: Vec::new(),
        };
        let meta = e
            .next_line(Duration::from_secs(60))
            .expect("ebtop prints its meta line");
        assert_eq!(meta["type"], "meta", "first line is meta: {meta}");
        // With TLS probes, the session starts at once and the lookout probes what runs
        // meanwhile: its `tls` line says when the running processes are covered.
        if meta["loaded"]
            .as_array()
            .is_some_and(|l| l.iter().any(|x| x == "tls_probes"))
        {
            e.wait_for(Duration::from_secs(60), |v| v["type"] == "tls")
                .expect("ebtop's TLS lookout looks at the running processes within 60 s");
        }
        e
    }

    fn next_line(&mut self, timeout: Duration) -> Option<Value> {
        let l = self.lines.recv_timeout(timeout).ok()?;
        let v: Value =
            serde_json::from_str(&l).unwrap_or_else(|e| panic!("bad JSON line {l:?}: {e}"));
        self.collected.push(v.clone());
        Some(v)
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Reads lines as ebtop writes them until one satisfies `pred` (at most `timeout`); every
    /// line read stays in what `stop` returns.
    pub fn wait_for(&mut self, timeout: Duration, pred: impl Fn(&Value) -> bool) -> Option<Value> {
        let deadline = Instant::now() + timeout;
        loop {
            let left = deadline.checked_duration_since(Instant::now())?;
            let v = self.next_line(left)?;
            if pred(&v) {
                return Some(v);
            }
        }
    }

    /// The first `overhead` line after the TLS lookout looked at every installed program (it
    /// does after the start, between its looks at new processes): from then on the count of
    /// files probed (`tls_files_probed`) changes only with new programs and libraries.
    pub fn installed_scanned(&mut self) -> Value {
        self.wait_for(Duration::from_secs(60), |v| {
            v["type"] == "overhead" && v["tls_installed_scanned"] == true
        })
        .expect("ebtop looks at the installed programs within 60 s")
    }

    /// SIGINT, then everything up to and including the summary; asserts a clean exit.
    pub fn stop(mut self) -> Vec<Value> {
        // Give the last records time to reach the ring buffer consumer.
        thread::sleep(Duration::from_millis(300));
        self.signal(libc::SIGINT);
        self.finish()
    }

    pub fn signal(&mut self, sig: i32) {
        // SAFETY: kill with a valid pid of our own child.
        unsafe { libc::kill(self.child.id() as i32, sig) };
    }

    /// Everything up to and including the summary; asserts a clean exit.
    pub fn finish(mut self) -> Vec<Value> {
        // Until the summary or the end of ebtop's output: a loaded host may leave ebtop
        // silent for seconds while it drains what it captured (a pause is no end).
        let deadline = Instant::now() + Duration::from_secs(120);
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left.max(Duration::from_millis(1))) {
                Ok(l) => {
                    let v: Value = serde_json::from_str(&l)
                        .unwrap_or_else(|e| panic!("bad JSON line {l:?}: {e}"));
                    let summary = v["type"] == "summary";
                    self.collected.push(v);
                    if summary {
                        break;
                    }
                }
                Err(_) => break,
            }
        }
        let status = self.child.wait().unwrap();
        assert!(status.success(), "ebtop exited with {status}");
        assert_eq!(
            self.collected.last().map(|v| v["type"].clone()),
            Some(Value::from("summary")),
            "the last line is the summary"
        );
        self.collected
    }
}

/// A TCP port nothing listens on now (127.0.0.1), for a server the test starts.
#[allow(dead_code)] // not every test binary starts a server of its own
pub fn free_tcp_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// Waits (at most 20 s) until `addr:port` accepts TCP connections: the server `what` started.
#[allow(dead_code)]
pub fn wait_for_listener(addr: &str, port: u16, what: &str) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while TcpStream::connect((addr, port)).is_err() {
        assert!(Instant::now() < deadline, "{what} did not start");
        thread::sleep(Duration::from_millis(50));
    }
}

/// A summary with nothing lost in the kernel and no message damaged, out of sync or unmatched.
#[allow(dead_code)]
pub fn assert_clean_summary(summary: &Value) {
    assert_eq!(summary["kernel"]["lost"], 0, "{summary}");
    for counter in ["damaged_messages", "desyncs", "unmatched_responses"] {
        assert_eq!(summary["parse"][counter], 0, "{counter}: {summary}");
    }
}

pub fn calls(lines: &[Value]) -> Vec<&Value> {
    of_type(lines, "call")
}

/// The lines of one `type`.
pub fn of_type<'a>(lines: &'a [Value], ty: &str) -> Vec<&'a Value> {
    lines.iter().filter(|v| v["type"] == ty).collect()
}

/// Field `k` of a line, a number (panics, with the line, if it is not one).
pub fn u(v: &Value, k: &str) -> u64 {
    v[k].as_u64().unwrap_or_else(|| panic!("{k} in {v}"))
}

/// A self-signed certificate and its key for `localhost`, made in `dir` with openssl:
/// (certificate, key), both PEM.
pub fn self_signed_cert(dir: &std::path::Path) -> (std::path::PathBuf, std::path::PathBuf) {
    let (cert, key) = (dir.join("cert.pem"), dir.join("key.pem"));
    let out = Command::new("openssl")
        .args(["req", "-x509", "-nodes", "-newkey", "rsa:2048"])
        .args(["-subj", "/CN=localhost", "-days", "1", "-keyout"])
        .arg(&key)
        .arg("-out")
        .arg(&cert)
        .output()
        .expect("openssl is installed");
    assert!(out.status.success(), "openssl req: {out:?}");
    (cert, key)
}

/// A certificate authority and a certificate it signed for `localhost` and 127.0.0.1 (for
/// clients that verify the chain and the name, as gRPC's do), in `dir`: (CA certificate,
/// certificate, key).
pub fn ca_signed_cert(
    dir: &std::path::Path,
) -> (std::path::PathBuf, std::path::PathBuf, std::path::PathBuf) {
    let p = |n: &str| dir.join(n);
    let run = |args: &[&str]| {
        let out = Command::new("openssl")
            .args(args)
            .current_dir(dir)
            .output()
            .expect("openssl is installed");
        assert!(out.status.success(), "openssl {args:?}: {out:?}");
    };
    run(&[
        "req",
        "-x509",
        "-nodes",
        "-newkey",
        "rsa:2048",
        "-subj",
        "/CN=ebtop-test-ca",
        "-days",
        "1",
        "-keyout",
        "ca.key",
        "-out",
        "ca.pem",
    ]);
    run(&[
        "req",
        "-nodes",
        "-newkey",
        "rsa:2048",
        "-subj",
        "/CN=localhost",
        "-keyout",
        "leaf.key",
        "-out",
        "leaf.csr",
    ]);
    std::fs::write(p("san.ext"), "subjectAltName=DNS:localhost,IP:127.0.0.1\n").unwrap();
    run(&[
        "x509",
        "-req",
        "-in",
        "leaf.csr",
        "-CA",
        "ca.pem",
        "-CAkey",
        "ca.key",
        "-CAcreateserial",
        "-days",
        "1",
        "-extfile",
        "san.ext",
        "-out",
        "leaf.pem",
    ]);
    (p("ca.pem"), p("leaf.pem"), p("leaf.key"))
}

/// Client and server calls of one connection (client `local` = server `peer`), in order.
pub type CallsOfConnection<'a> = (Vec<&'a Value>, Vec<&'a Value>);

/// The server's calls are the clients' calls: per connection the same requests in the same
/// order with the same protocol, status, sizes and `tls`, so as many on each side; a server
/// call on a connection of no call in `client` fails it too. The calls by connection, for
/// further checks.
pub fn assert_paired<'a>(
    client: &[&'a Value],
    server: &[&'a Value],
) -> std::collections::BTreeMap<String, CallsOfConnection<'a>> {
    let mut conns: std::collections::BTreeMap<String, CallsOfConnection> = Default::default();
    for c in client {
        let conn = c["local"].as_str().unwrap().to_owned();
        conns.entry(conn).or_default().0.push(c);
    }
    for s in server {
        let conn = s["peer"].as_str().unwrap().to_owned();
        conns.entry(conn).or_default().1.push(s);
    }
    let what = |c: &Value| {
        format!(
            "{} {} {} {} {} {} tls={}",
            c["proto"],
            c["method"],
            c["resource"],
            c["status"],
            c["req_bytes"],
            c["resp_bytes"],
            c["tls"]
        )
    };
    let differ: Vec<String> = conns
        .iter()
        .filter_map(|(conn, (cs, ss))| {
            let cw: Vec<String> = cs.iter().map(|c| what(c)).collect();
            let sw: Vec<String> = ss.iter().map(|s| what(s)).collect();
            (cw != sw).then(|| format!("from {conn}:\n  client {cw:?}\n  server {sw:?}"))
        })
        .collect();
    assert!(
        differ.is_empty(),
        "{} of {} connections differ between client and server calls:\n{}",
        differ.len(),
        conns.len(),
        differ[..differ.len().min(5)].join("\n")
    );
    conns
}

/// A child process killed (and reaped) on drop: a test's peer never outlives it.
pub struct Peer(pub Child);

impl Drop for Peer {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The port of an `ip:port` address of a JSON line.
pub fn port_of(addr: &Value) -> u16 {
    addr.as_str()
        .unwrap()
        .rsplit(':')
        .next()
        .unwrap()
        .parse()
        .unwrap()
}

/// Writes `dir/nginx.conf` for one nginx process of the test's own (no daemon, no master; its
/// pid, error log and temporary files in `dir`; no access log) whose `http` block holds `http`
/// (settings, upstreams, servers), and starts it.
pub fn start_nginx_with(dir: &std::path::Path, http: &str) -> Child {
    let p = dir.display();
    let conf = format!(
        "daemon off;
master_process off;
pid {p}/nginx.pid;
error_log {p}/error.log;
events {{ worker_connections 256; }}
http {{
  access_log off;
  client_body_temp_path {p}/body;
  proxy_temp_path {p}/proxy;
  fastcgi_temp_path {p}/fastcgi;
  uwsgi_temp_path {p}/uwsgi;
  scgi_temp_path {p}/scgi;
{http}
}}
"
    );
    std::fs::write(dir.join("nginx.conf"), conf).unwrap();
    spawn_nginx(dir)
}

/// Starts nginx on the prefix `dir`, with `dir/nginx.conf` and its error log in `dir`.
pub fn spawn_nginx(dir: &std::path::Path) -> Child {
    Command::new("/usr/sbin/nginx")
        .arg("-p")
        .arg(dir)
        .arg("-c")
        .arg(dir.join("nginx.conf"))
        .arg("-e")
        .arg(dir.join("error.log"))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("nginx is installed (Debian: nginx-light)")
}

/// Runs a command to its end; its stdout. Panics, with its stderr, when it fails.
pub fn sh(cmd: &[&str]) -> String {
    let out = Command::new(cmd[0])
        .args(&cmd[1..])
        .output()
        .unwrap_or_else(|e| panic!("{cmd:?}: {e}"));
    assert!(
        out.status.success(),
        "{cmd:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Runs a build command of a test's fixture (cc, rustc, go) and fails the test with its
/// stderr if it fails.
pub fn compile(mut cmd: Command, what: &str) {
    let out = cmd
        .output()
        .unwrap_or_else(|e| panic!("{what}: {e} (scripts/deps installs it)"));
    assert!(
        out.status.success(),
        "{what}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Every call this host made to `port` and the server call it reached are one hop (issue 50,
/// matched by socket pair and stream positions): each server call on `port` is the child of
/// a client call to `port` with the same method and resource, as many server calls as client
/// calls, and the summary's `chains` count them all, none unmatched or disproved. Returns the
/// hops.
pub fn assert_every_call_a_hop(lines: &[Value], port: u16) -> usize {
    assert_hops(lines, port, 0)
}

/// Whether call `c` is of `side` on a connection to the server's `port` (a server call's
/// local port, a client call's peer port).
pub fn on_server_port(c: &Value, side: &str, port: u16) -> bool {
    c["side"] == side
        && port_of(if side == "server" {
            &c["local"]
        } else {
            &c["peer"]
        }) == port
}

/// As [`assert_every_call_a_hop`], but for `unread` server calls whose response their client
/// never read (it exited first): those go out unlinked, counted in `hop_unmatched`.
pub fn assert_hops(lines: &[Value], port: u16, unread: usize) -> usize {
    let calls = calls(lines);
    let on = |side: &str| -> Vec<&Value> {
        calls
            .iter()
            .copied()
            .filter(|c| on_server_port(c, side, port))
            .collect()
    };
    let (clients, servers) = (on("client"), on("server"));
    let by_id: std::collections::HashMap<&str, &Value> = clients
        .iter()
        .map(|c| (c["id"].as_str().unwrap(), *c))
        .collect();
    let mut unlinked = Vec::new();
    for s in &servers {
        match s["parent_id"].as_str().and_then(|p| by_id.get(p)) {
            Some(c) => assert_eq!(
                (&c["method"], &c["resource"]),
                (&s["method"], &s["resource"]),
                "a server call under another request's client call: {s} under {c}"
            ),
            None => unlinked.push(s),
        }
    }
    assert!(
        unlinked.len() == unread,
        "{} of {} server calls on port {port} without their client call ({unread} unread): \
         {unlinked:#?}",
        unlinked.len(),
        servers.len()
    );
    let hops = servers.len() - unread;
    assert_eq!(
        clients.len(),
        hops,
        "client calls and linked server calls on {port}"
    );
    let chains = &lines.last().unwrap()["chains"];
    assert_eq!(chains["hops"], hops as u64, "{chains}");
    // Counted: the unread ones held for their client call. One whose request position the
    // parser could not give was never held (nothing to match it by): not counted there.
    assert!(
        chains["hop_unmatched"].as_u64().unwrap() <= unread as u64,
        "{chains}"
    );
    assert_eq!(chains["hop_disproved"], 0, "{chains}");
    hops
}
