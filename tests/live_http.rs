//! Live capture against a real server and real clients, compared with what the clients did.
//! Needs root (loads BPF).

mod common;

use std::io::{BufReader, Write};
use std::net::TcpStream;
use std::process::Command;

use common::*;
use serde_json::Value;

fn get(path: &str) -> String {
    format!("GET {path} HTTP/1.1\r\nHost: test\r\n\r\n")
}

#[test]
fn http_calls_are_counted_exactly_on_both_sides() {
    require_root();
    let server = TestServer::start();
    let port = server.port.to_string();
    let ebtop = Ebtop::start(&["--json", "--port", &port]);

    let mut expected: Vec<(&str, u16, usize)> = Vec::new(); // (path, status, body bytes)

    // Keep-alive: 10 requests on one connection.
    let s = TcpStream::connect(("127.0.0.1", server.port)).unwrap();
    let mut w = s.try_clone().unwrap();
    let mut r = BufReader::new(s);
    for _ in 0..10 {
        w.write_all(get("/").as_bytes()).unwrap();
        assert_eq!(read_response(&mut r), (200, 12));
        expected.push(("/", 200, 12));
    }
    // A 404 on the same connection.
    w.write_all(get("/missing").as_bytes()).unwrap();
    assert_eq!(read_response(&mut r), (404, 0));
    expected.push(("/missing", 404, 0));
    drop((w, r));

    // Pipelined batch: 5 requests in one write.
    let s = TcpStream::connect(("127.0.0.1", server.port)).unwrap();
    let mut w = s.try_clone().unwrap();
    let mut r = BufReader::new(s);
    let batch: String = (0..5).map(|_| get("/")).collect();
    w.write_all(batch.as_bytes()).unwrap();
    for _ in 0..5 {
        assert_eq!(read_response(&mut r), (200, 12));
        expected.push(("/", 200, 12));
    }
    // Chunked and large bodies (the large one is far beyond the snaplen).
    w.write_all(get("/chunked").as_bytes()).unwrap();
    assert_eq!(read_response(&mut r), (200, 18));
    expected.push(("/chunked", 200, 18));
    w.write_all(get("/big").as_bytes()).unwrap();
    assert_eq!(read_response(&mut r), (200, BIG_LEN));
    expected.push(("/big", 200, BIG_LEN));
    drop((w, r));

    // Slow endpoint, each on its own connection; the client times each call itself.
    let mut client_timed = std::collections::HashMap::new(); // client port -> ns
    for _ in 0..3 {
        let s = TcpStream::connect(("127.0.0.1", server.port)).unwrap();
        let client_port = s.local_addr().unwrap().port();
        let mut w = s.try_clone().unwrap();
        let mut r = BufReader::new(s);
        let t = std::time::Instant::now();
        w.write_all(get("/slow").as_bytes()).unwrap();
        assert_eq!(read_response(&mut r), (200, 4));
        client_timed.insert(client_port, t.elapsed().as_nanos() as u64);
        expected.push(("/slow", 200, 4));
    }

    // A real client program: curl, 3 requests over one keep-alive connection.
    let url = format!("http://127.0.0.1:{port}/");
    let out = Command::new("curl")
        .args([
            "-s",
            "-o",
            "/dev/null",
            "-o",
            "/dev/null",
            "-o",
            "/dev/null",
            &url,
            &url,
            &url,
        ])
        .status()
        .expect("curl is installed (.ci/run installs it)");
    assert!(out.success());
    for _ in 0..3 {
        expected.push(("/", 200, 12));
    }

    let lines = ebtop.stop();
    let calls = calls(&lines);
    let side =
        |s: &str| -> Vec<&Value> { calls.iter().copied().filter(|c| c["side"] == s).collect() };
    let (client, server_side) = (side("client"), side("server"));
    assert_eq!(client.len(), expected.len(), "client calls: {client:#?}");
    assert_eq!(server_side.len(), expected.len(), "server calls");

    for side_calls in [&client, &server_side] {
        let mut got: Vec<(String, u64)> = side_calls
            .iter()
            .map(|c| {
                (
                    c["resource"].as_str().unwrap().to_string(),
                    c["status"].as_u64().unwrap(),
                )
            })
            .collect();
        let mut want: Vec<(String, u64)> = expected
            .iter()
            .map(|(p, s, _)| (p.to_string(), *s as u64))
            .collect();
        got.sort();
        want.sort();
        assert_eq!(got, want);
        for c in side_calls.iter() {
            assert_eq!(c["method"], "GET");
            assert_eq!(c["proto"], "http");
            assert_eq!(c["version"], "1.1");
            if c["resource"] == "/big" {
                let head = format!("HTTP/1.1 200 OK\r\nContent-Length: {BIG_LEN}\r\n\r\n");
                assert_eq!(
                    c["resp_bytes"].as_u64().unwrap(),
                    (head.len() + BIG_LEN) as u64
                );
                assert_eq!(c["truncated"], true);
            }
        }
    }
    assert_eq!(client.iter().filter(|c| c["comm"] == "curl").count(), 3);

    // Latency of the slow endpoint against what each side measured itself. The kernel-side
    // span encloses the server's own timing (read exit .. write entry) and is enclosed by the
    // client's (before write .. after read), and the server span nests in the client span.
    // These bounds hold on any machine load, unlike a fixed tolerance around the sleep.
    let server_timed: std::collections::HashMap<u16, u64> = server
        .timings
        .lock()
        .unwrap()
        .iter()
        .filter_map(|(k, ns)| Some((k.strip_prefix("/slow ")?.parse().ok()?, *ns)))
        .collect();
    let sleep_ns = SLOW_MS * 1_000_000;
    let mut checked = 0;
    for (&client_port, &client_ns) in &client_timed {
        let lat = |side: &str, addr_field: &str| -> u64 {
            let found: Vec<&&Value> = calls
                .iter()
                .filter(|c| {
                    c["resource"] == "/slow"
                        && c["side"] == side
                        && port_of(&c[addr_field]) == client_port
                })
                .collect();
            assert_eq!(found.len(), 1, "{side} /slow call of port {client_port}");
            found[0]["latency_ns"].as_u64().unwrap()
        };
        let (client_lat, server_lat) = (lat("client", "local"), lat("server", "peer"));
        let server_ns = server_timed[&client_port];
        assert!(server_ns >= sleep_ns);
        assert!(
            server_lat >= server_ns,
            "server span {server_lat} ns shorter than the server's own timing {server_ns} ns"
        );
        assert!(
            server_lat <= client_lat,
            "server span {server_lat} ns longer than client span {client_lat} ns"
        );
        assert!(
            client_lat <= client_ns,
            "client span {client_lat} ns longer than the client's own timing {client_ns} ns"
        );
        checked += 1;
    }
    assert_eq!(checked, 3);

    let summary = lines.last().unwrap();
    assert_eq!(summary["kernel"]["lost"], 0, "{summary}");
    assert_eq!(
        summary["calls"].as_u64().unwrap(),
        2 * expected.len() as u64
    );
    assert_eq!(summary["parse"]["damaged_messages"], 0, "{summary}");
}

/// A body sent with sendfile(2) (as nginx sends static files): neither path can copy it (on the
/// socket layer the send is not one of the syscalls whose buffer ebtop reads; on the syscall
/// path sendfile is hooked for its length), yet the call and its byte counts are exact and the
/// unseen body is counted as not captured, never as a gap.
#[test]
fn a_body_sent_with_sendfile_keeps_calls_and_bytes_exact() {
    use std::io::Read;
    use std::os::fd::AsRawFd;
    require_root();
    const BODY: usize = 10_000;
    let dir = tempfile::tempdir().unwrap();
    let file_path = dir.path().join("body");
    std::fs::write(&file_path, vec![b'f'; BODY]).unwrap();
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let head = format!("HTTP/1.1 200 OK\r\nContent-Length: {BODY}\r\n\r\n");
    const N: usize = 3;
    let srv = {
        let head = head.clone();
        std::thread::spawn(move || {
            let (mut c, _) = listener.accept().unwrap();
            let mut buf = [0u8; 4096];
            let mut seen = Vec::new();
            for _ in 0..N {
                while !seen.windows(4).any(|w| w == b"\r\n\r\n") {
                    let k = c.read(&mut buf).unwrap();
                    assert!(k > 0);
                    seen.extend_from_slice(&buf[..k]);
                }
                let end = seen.windows(4).position(|w| w == b"\r\n\r\n").unwrap() + 4;
                seen.drain(..end);
                c.write_all(head.as_bytes()).unwrap();
                let f = std::fs::File::open(&file_path).unwrap();
                let mut off: libc::off_t = 0;
                let mut left = BODY;
                while left > 0 {
                    // SAFETY: both descriptors are open; `off` is a valid offset location.
                    let n = unsafe { libc::sendfile(c.as_raw_fd(), f.as_raw_fd(), &mut off, left) };
                    assert!(n > 0, "sendfile: {}", std::io::Error::last_os_error());
                    left -= n as usize;
                }
            }
        })
    };
    let port_s = port.to_string();
    let ebtop = Ebtop::start(&["--json", "--port", &port_s]);
    let s = TcpStream::connect(("127.0.0.1", port)).unwrap();
    let mut w = s.try_clone().unwrap();
    let mut r = BufReader::new(s);
    for _ in 0..N {
        w.write_all(get("/file").as_bytes()).unwrap();
        assert_eq!(read_response(&mut r), (200, BODY));
    }
    srv.join().unwrap();
    let lines = ebtop.stop();
    let calls = calls(&lines);
    for side in ["client", "server"] {
        let mine: Vec<&&Value> = calls.iter().filter(|c| c["side"] == side).collect();
        assert_eq!(mine.len(), N, "{side} calls: {mine:#?}");
        for c in mine {
            assert_eq!(c["status"], 200);
            assert_eq!(
                c["resp_bytes"].as_u64().unwrap(),
                (head.len() + BODY) as u64,
                "{c}"
            );
        }
    }
    let summary = lines.last().unwrap();
    assert_eq!(summary["tracker"]["gaps"], 0, "{summary}");
    assert_eq!(summary["parse"]["damaged_messages"], 0, "{summary}");
    // The server's bodies went out unseen; the client read them (copied up to the snaplen).
    assert!(
        summary["tracker"]["uncaptured_bytes"].as_u64().unwrap() >= (N * BODY) as u64,
        "{summary}"
    );
}

/// sendmmsg and recvmmsg (glibc's resolver sends its A and AAAA queries with one sendmmsg):
/// every datagram of a vector is captured with its own payload on both capture paths, not
/// counted by length only, including a second call on the same vector.
#[test]
fn datagrams_of_sendmmsg_and_recvmmsg_are_captured_whole() {
    use std::os::fd::AsRawFd;
    require_root();
    let server = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    let port = server.local_addr().unwrap().port();
    let client = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    client.connect(("127.0.0.1", port)).unwrap();
    let port_s = port.to_string();
    let ebtop = Ebtop::start(&["--json", "--port", &port_s, "--capture-all"]);
    // Two datagrams of different sizes per call, two calls on the same vector.
    let mut a = *b"first query.....";
    let mut b = [b'q'; 29];
    let lens = [a.len(), b.len()];
    let mut iovs = [
        libc::iovec {
            iov_base: a.as_mut_ptr().cast(),
            iov_len: a.len(),
        },
        libc::iovec {
            iov_base: b.as_mut_ptr().cast(),
            iov_len: b.len(),
        },
    ];
    // SAFETY: all-zero is a valid mmsghdr (null pointers, zero lengths) before it is filled.
    let mut out: [libc::mmsghdr; 2] = unsafe { std::mem::zeroed() };
    for (m, iov) in out.iter_mut().zip(iovs.iter_mut()) {
        m.msg_hdr.msg_iov = iov;
        m.msg_hdr.msg_iovlen = 1;
    }
    let mut bufs = [[0u8; 64]; 2];
    let mut rx_iovs = [
        libc::iovec {
            iov_base: bufs[0].as_mut_ptr().cast(),
            iov_len: 64,
        },
        libc::iovec {
            iov_base: bufs[1].as_mut_ptr().cast(),
            iov_len: 64,
        },
    ];
    // SAFETY: as above.
    let mut inb: [libc::mmsghdr; 2] = unsafe { std::mem::zeroed() };
    for (m, iov) in inb.iter_mut().zip(rx_iovs.iter_mut()) {
        m.msg_hdr.msg_iov = iov;
        m.msg_hdr.msg_iovlen = 1;
    }
    for _ in 0..2 {
        // SAFETY: the vector and its buffers live across the call.
        let sent = unsafe { libc::sendmmsg(client.as_raw_fd(), out.as_mut_ptr(), 2, 0) };
        assert_eq!(sent, 2, "{}", std::io::Error::last_os_error());
        let mut got = 0;
        while got < 2 {
            // SAFETY: as above; blocks until at least one datagram is there.
            let n = unsafe {
                libc::recvmmsg(
                    server.as_raw_fd(),
                    inb[got..].as_mut_ptr(),
                    (2 - got) as u32,
                    0,
                    std::ptr::null_mut(),
                )
            };
            assert!(n > 0, "{}", std::io::Error::last_os_error());
            got += n as usize;
        }
    }
    let lines = ebtop.stop();
    let summary = lines.last().unwrap();
    let tracker = &summary["tracker"];
    let total = 2 * 2 * (lens[0] + lens[1]) as u64; // two calls, sent and received
    assert_eq!(tracker["data_events"], 8, "{summary}");
    assert_eq!(tracker["data_bytes"].as_u64().unwrap(), total, "{summary}");
    assert_eq!(
        tracker["uncaptured_bytes"], 0,
        "payloads captured: {summary}"
    );
    assert_eq!(summary["kernel"]["lost"], 0, "{summary}");
}

/// Requests written with one writev(2) each, in 1 to 8 pieces cut inside the method, the
/// path, the blank line ending the head and a body longer than the snaplen: the capture reads
/// the first two entries of the array in one copy and the others one by one, so each piece must
/// land in order and each call be exact on both sides.
#[test]
fn requests_written_in_pieces_with_writev_are_copied_in_order() {
    require_root();
    let server = TestServer::start();
    let port = server.port.to_string();
    let ebtop = Ebtop::start(&["--json", "--port", &port]);
    let s = TcpStream::connect(("127.0.0.1", server.port)).unwrap();
    let mut w = s.try_clone().unwrap();
    let mut r = BufReader::new(s);
    const BODY: usize = 9000;
    let piece_counts = [1usize, 2, 3, 5, 8];
    let mut sizes = std::collections::HashMap::new();
    for pieces in piece_counts {
        let path = format!("/sleep/0/w{pieces}");
        let mut msg =
            format!("POST {path} HTTP/1.1\r\nHost: test\r\nContent-Length: {BODY}\r\n\r\n")
                .into_bytes();
        let head = msg.len();
        msg.extend(std::iter::repeat_n(b'b', BODY));
        let cuts = [
            3,
            12,
            head - 1,
            head + 100,
            head + 3000,
            head + 5000,
            head + 8000,
        ];
        let mut bounds = vec![0];
        bounds.extend_from_slice(&cuts[..pieces - 1]);
        bounds.push(msg.len());
        let slices: Vec<std::io::IoSlice> = bounds
            .windows(2)
            .map(|b| std::io::IoSlice::new(&msg[b[0]..b[1]]))
            .collect();
        assert_eq!(slices.len(), pieces);
        let sent = w.write_vectored(&slices).unwrap();
        assert_eq!(sent, msg.len(), "one writev sent the whole request");
        assert_eq!(read_response(&mut r), (200, 2));
        sizes.insert(path, msg.len() as u64);
    }
    drop((w, r));
    let lines = ebtop.stop();
    let calls = calls(&lines);
    for side in ["client", "server"] {
        let mut seen = 0;
        for c in calls.iter().filter(|c| c["side"] == side) {
            let path = c["resource"].as_str().unwrap();
            let want = sizes.get(path).unwrap_or_else(|| panic!("{side} call {c}"));
            assert_eq!(c["method"], "POST", "{c}");
            assert_eq!(c["status"], 200, "{c}");
            assert_eq!(c["req_bytes"].as_u64().unwrap(), *want, "{c}");
            seen += 1;
        }
        assert_eq!(seen, piece_counts.len(), "{side} calls: {calls:#?}");
    }
    let summary = lines.last().unwrap();
    assert_clean_summary(summary);
}

/// A client that peeks at its socket before reading (`recv`/`recvmsg` with MSG_PEEK, as curl
/// does to see whether a kept-alive connection is still open): the peeked bytes are read again
/// later, so they must not move the stream's position. Every call exact, nothing desynced.
#[test]
fn bytes_peeked_at_are_counted_once() {
    use std::os::fd::AsRawFd;
    require_root();
    let server = TestServer::start();
    let port = server.port.to_string();
    let ebtop = Ebtop::start(&["--json", "--port", &port]);
    let s = TcpStream::connect(("127.0.0.1", server.port)).unwrap();
    let fd = s.as_raw_fd();
    let mut w = s.try_clone().unwrap();
    let mut r = BufReader::new(s);
    for i in 0..6 {
        w.write_all(get("/").as_bytes()).unwrap();
        let mut peeked = [0u8; 5];
        let n = if i % 2 == 0 {
            // SAFETY: a valid socket and a buffer of the length given; blocks until the
            // response's first bytes are there.
            unsafe { libc::recv(fd, peeked.as_mut_ptr().cast(), peeked.len(), libc::MSG_PEEK) }
        } else {
            let mut iov = libc::iovec {
                iov_base: peeked.as_mut_ptr().cast(),
                iov_len: peeked.len(),
            };
            // SAFETY: all-zero is a valid msghdr; its one iovec and buffer outlive the call.
            let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
            msg.msg_iov = &mut iov;
            msg.msg_iovlen = 1;
            // SAFETY: as above.
            unsafe { libc::recvmsg(fd, &mut msg, libc::MSG_PEEK) }
        };
        assert!(n > 0, "peek: {}", std::io::Error::last_os_error());
        assert_eq!(&peeked[..n as usize], &b"HTTP/"[..n as usize]);
        assert_eq!(read_response(&mut r), (200, 12));
    }
    drop((w, r));
    let lines = ebtop.stop();
    let calls = calls(&lines);
    // What the test server answers to `/` (tests/common: TestServer).
    let resp_len = "HTTP/1.1 200 OK\r\nContent-Length: 12\r\n\r\n".len() + 12;
    for side in ["client", "server"] {
        let got: Vec<_> = calls.iter().filter(|c| c["side"] == side).collect();
        assert_eq!(got.len(), 6, "{side}: {calls:?}");
        for c in got {
            assert_eq!(
                (
                    &c["status"],
                    &c["resource"],
                    &c["req_bytes"],
                    &c["resp_bytes"]
                ),
                (
                    &200.into(),
                    &"/".into(),
                    &get("/").len().into(),
                    &resp_len.into()
                ),
                "{side}: {c}"
            );
        }
    }
    assert_clean_summary(lines.last().unwrap());
}

/// `--only` decides what is loaded: without flow line types no flow table, and the calls are
/// as exact as with everything loaded.
#[test]
fn only_call_lines_load_no_flow_table_and_keep_calls_exact() {
    require_root();
    let server = TestServer::start();
    let port = server.port.to_string();
    let ebtop = Ebtop::start(&["--json", "--port", &port, "--only", "call"]);
    let meta = ebtop.collected[0].clone();
    assert_eq!(meta["loaded"][0], "capture", "{meta}");
    assert!(
        !meta["loaded"]
            .as_array()
            .unwrap()
            .contains(&"flow_table".into()),
        "{meta}"
    );
    let s = TcpStream::connect(("127.0.0.1", server.port)).unwrap();
    let mut w = s.try_clone().unwrap();
    let mut r = BufReader::new(s);
    for _ in 0..7 {
        w.write_all(get("/").as_bytes()).unwrap();
        assert_eq!(read_response(&mut r), (200, 12));
    }
    drop((w, r));
    let lines = ebtop.stop();
    let types: std::collections::BTreeSet<&str> =
        lines.iter().map(|v| v["type"].as_str().unwrap()).collect();
    assert!(
        types.is_subset(
            &["meta", "tls", "call", "lost", "warning", "summary"]
                .into_iter()
                .collect()
        ),
        "{types:?}"
    );
    let calls = calls(&lines);
    for side in ["client", "server"] {
        assert_eq!(
            calls.iter().filter(|c| c["side"] == side).count(),
            7,
            "{side}: {calls:?}"
        );
    }
    assert_clean_summary(lines.last().unwrap());
}

/// `--port A,B` and repeated `--port`: calls on either port, none on a third; `-p` lists too.
#[test]
fn list_filters_select_any_of_their_values() {
    require_root();
    let servers = [
        TestServer::start(),
        TestServer::start(),
        TestServer::start(),
    ];
    let (a, b) = (servers[0].port.to_string(), servers[1].port.to_string());
    let ebtop = Ebtop::start(&[
        "--json",
        "--port",
        &format!("{a},{b}"),
        "--port",
        &a,
        "-p",
        &format!("{},{}", std::process::id(), std::process::id()),
    ]);
    let meta = ebtop.collected[0].clone();
    assert_eq!(
        meta["filters"]["port"],
        serde_json::json!([servers[0].port, servers[1].port]),
        "{meta}"
    );
    for s in &servers {
        let c = TcpStream::connect(("127.0.0.1", s.port)).unwrap();
        let mut w = c.try_clone().unwrap();
        let mut r = BufReader::new(c);
        for _ in 0..3 {
            w.write_all(get("/").as_bytes()).unwrap();
            assert_eq!(read_response(&mut r), (200, 12));
        }
    }
    let lines = ebtop.stop();
    let calls = calls(&lines);
    // The test process is client and (its server threads) server: both sides pass -p.
    for s in &servers[..2] {
        for side in ["client", "server"] {
            let n = calls
                .iter()
                .filter(|c| {
                    let port = format!(":{}", s.port);
                    c["side"] == side
                        && (c["local"].as_str().unwrap().ends_with(&port)
                            || c["peer"].as_str().unwrap().ends_with(&port))
                })
                .count();
            assert_eq!(n, 3, "port {} {side}: {calls:?}", s.port);
        }
    }
    assert_eq!(
        calls.len(),
        12,
        "nothing on port {}: {calls:?}",
        servers[2].port
    );
    assert_clean_summary(lines.last().unwrap());
}

/// A cgroup made by a test below the cgroup v2 mount, with a process living in it while the
/// test runs (how --pod and --container find their cgroups: from the processes running now);
/// the directories the test made are removed after it, deepest first.
struct FakeCgroup {
    /// Its path below the mount, as /proc/PID/cgroup writes it.
    path: String,
    dir: std::path::PathBuf,
    made: Vec<std::path::PathBuf>,
    resident: std::process::Child,
}

impl FakeCgroup {
    fn new(path: &str) -> FakeCgroup {
        let mount = ebtop::cgroups::cgroup2_mount().expect("a cgroup v2 hierarchy");
        let dir = mount.join(path.trim_start_matches('/'));
        // The directories this makes (on a real host some parents exist already).
        let mut made: Vec<std::path::PathBuf> = dir
            .ancestors()
            .take_while(|d| !d.exists())
            .map(std::path::Path::to_path_buf)
            .collect();
        made.reverse();
        std::fs::create_dir_all(&dir).unwrap();
        let resident = Command::new("sh")
            .arg("-c")
            .arg(format!(
                "echo $$ > {}/cgroup.procs && exec sleep 120",
                dir.display()
            ))
            .spawn()
            .unwrap();
        for _ in 0..100 {
            if ebtop::procfs::read_cgroup(resident.id()).is_some_and(|c| c == path) {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        FakeCgroup {
            path: path.to_owned(),
            dir,
            made,
            resident,
        }
    }

    /// ebtop, started with `args` (which select `filter`, this cgroup or one above it), sees
    /// three calls curl makes inside this cgroup and one call from outside it (this test):
    /// the lines it wrote, having checked that only curl's three calls are there.
    fn three_calls_inside_one_outside(&self, args: &[&str], filter: &str) -> Vec<Value> {
        let server = TestServer::start();
        let ebtop = Ebtop::start(args);
        let url = format!("http://127.0.0.1:{}/", server.port);
        // The shell moves itself into the cgroup, then becomes curl: its calls are inside.
        let status = Command::new("sh")
            .arg("-c")
            .arg(format!(
                "echo $$ > {}/cgroup.procs && exec curl -s -o /dev/null {url} -o /dev/null {url} -o /dev/null {url}",
                self.dir.display()
            ))
            .status()
            .unwrap();
        assert!(status.success());
        let s = TcpStream::connect(("127.0.0.1", server.port)).unwrap();
        let mut w = s.try_clone().unwrap();
        let mut r = BufReader::new(s);
        w.write_all(get("/").as_bytes()).unwrap();
        assert_eq!(read_response(&mut r), (200, 12));
        drop((w, r));
        let lines = ebtop.stop();
        assert_eq!(lines[0]["filters"]["cgroup"][0], filter);
        let calls = calls(&lines);
        assert_eq!(calls.len(), 3, "curl's three calls only: {calls:?}");
        assert!(calls
            .iter()
            .all(|c| c["comm"] == "curl" && c["side"] == "client"));
        assert_clean_summary(lines.last().unwrap());
        lines
    }

    /// The `proc` line of the one process described (curl).
    fn only_proc(lines: &[Value]) -> Value {
        let procs: Vec<&Value> = lines.iter().filter(|v| v["type"] == "proc").collect();
        assert_eq!(procs.len(), 1, "{procs:?}");
        assert_eq!(procs[0]["comm"], "curl", "{}", procs[0]);
        procs[0].clone()
    }
}

impl Drop for FakeCgroup {
    fn drop(&mut self) {
        let _ = self.resident.kill();
        let _ = self.resident.wait();
        for dir in self.made.iter().rev() {
            let _ = std::fs::remove_dir(dir);
        }
    }
}

/// `--cgroup`: calls of processes in that cgroup (a client the test moves there), none of
/// the processes outside it (the server, the test itself).
#[test]
fn cgroup_filter_selects_the_processes_inside_it() {
    require_root();
    let cg = FakeCgroup::new(&format!("/ebtop-test-{}", std::process::id()));
    cg.three_calls_inside_one_outside(&["--json", "--cgroup", &cg.path], &cg.path);
}

/// `--container ID` (12 hex digits, as `docker ps` shows): the calls of the processes in the
/// container's cgroup as Docker lays it out with systemd (`/system.slice/docker-<id>.scope`),
/// none of the others; the process's `proc` line names the container.
#[test]
fn container_filter_selects_the_containers_processes_and_names_it() {
    require_root();
    // 64 hex digits, the first 12 this test's own (no other test's fake container shares them).
    let short = format!("{:06x}d0c4e7", std::process::id() & 0xff_ffff);
    let id = short.clone() + &"0123456789abcdef".repeat(4)[..52];
    let cg = FakeCgroup::new(&format!("/system.slice/docker-{id}.scope"));
    let lines = cg.three_calls_inside_one_outside(&["--json", "--container", &short], &cg.path);
    assert_eq!(FakeCgroup::only_proc(&lines)["container"], short.as_str());
    drop(cg);
    let mount = ebtop::cgroups::cgroup2_mount().unwrap();
    assert!(
        !mount
            .join(format!("system.slice/docker-{id}.scope"))
            .exists(),
        "the test's cgroup is removed"
    );
}

/// `--pod NAMESPACE/NAME`: calls of the processes in that pod only, found through the
/// kubelet's files (`/var/log/pods/<namespace>_<name>_<uid>/`, made by the test) and
/// filtered in the kernel by the pod's cgroup (systemd driver, containerd:
/// `kubepods.slice/…/kubepods-besteffort-pod<uid>.slice/cri-containerd-<id>.scope`); the
/// `proc` line names the pod, its namespace and the container.
#[test]
fn pod_filter_selects_the_pods_processes_and_names_them() {
    require_root();
    let pid = std::process::id();
    let uid = format!("0b5a7c2e-1f3d-4e6a-9b8c-{pid:012x}");
    let container_id = format!("{pid:012x}").repeat(5) + "abcd";
    let pod_path = format!(
        "/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod{}.slice",
        uid.replace('-', "_")
    );
    let cg = FakeCgroup::new(&format!("{pod_path}/cri-containerd-{container_id}.scope"));
    let namespace = format!("ebtop-test-{pid}");
    // The kubelet's directory of the pod, removed (with /var/log/pods if the test made it)
    // whatever the outcome.
    struct PodLogs(Vec<std::path::PathBuf>);
    impl Drop for PodLogs {
        fn drop(&mut self) {
            for d in &self.0 {
                let _ = std::fs::remove_dir(d);
            }
        }
    }
    let logs = std::path::Path::new("/var/log/pods");
    let log_dir = logs.join(format!("{namespace}_web-0_{uid}"));
    let _logs = PodLogs(if logs.exists() {
        vec![log_dir.clone()]
    } else {
        vec![log_dir.clone(), logs.to_path_buf()]
    });
    std::fs::create_dir_all(&log_dir).unwrap();

    let lines = cg.three_calls_inside_one_outside(
        &["--json", "--pod", &format!("{namespace}/web-0")],
        &pod_path,
    );
    let proc = FakeCgroup::only_proc(&lines);
    assert_eq!(proc["pod"], "web-0", "{proc}");
    assert_eq!(proc["namespace"], namespace.as_str(), "{proc}");
    assert_eq!(proc["container"], &container_id[..12], "{proc}");
    // A pod that is not there: one line that says so, before anything is loaded.
    let out = Command::new(env!("CARGO_BIN_EXE_ebtop"))
        .args(["--json", "--pod", "no-such-namespace/no-such-pod"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("pod no-such-namespace/no-such-pod: not found"),
        "{err}"
    );
}

/// `overhead` lines: by default no per-program list; `--overhead-programs` adds
/// `bpf_programs`, one entry per BPF program ebtop loaded, whose runs add up to the line's
/// `bpf_runs` (statistics on all the time, so the counts are exact, not scaled).
#[test]
fn overhead_lines_list_the_programs_only_when_asked() {
    require_root();
    let server = TestServer::start();
    let port = server.port.to_string();
    for asked in [false, true] {
        let mut args = vec!["--json", "--port", &port, "-d", "300ms"];
        if asked {
            args.extend(["--overhead-programs", "--bpf-stats", "full"]);
        }
        let ebtop = Ebtop::start(&args);
        let s = TcpStream::connect(("127.0.0.1", server.port)).unwrap();
        let mut w = s.try_clone().unwrap();
        let mut r = BufReader::new(s);
        for _ in 0..5 {
            w.write_all(get("/").as_bytes()).unwrap();
            assert_eq!(read_response(&mut r), (200, 12));
        }
        drop((w, r));
        std::thread::sleep(std::time::Duration::from_millis(700));
        let lines = ebtop.stop();
        let ov: Vec<&Value> = lines.iter().filter(|v| v["type"] == "overhead").collect();
        assert!(ov.len() >= 2, "asked {asked}: {ov:?}");
        for o in &ov {
            assert_eq!(o["bpf_stats_available"], true, "{o}");
            if !asked {
                assert!(o.get("bpf_programs").is_none(), "{o}");
                continue;
            }
            let progs = o["bpf_programs"]
                .as_array()
                .unwrap_or_else(|| panic!("{o}"));
            assert!(!progs.is_empty(), "{o}");
            let mut ids = std::collections::BTreeSet::new();
            for p in progs {
                assert!(!p["name"].as_str().unwrap().is_empty(), "{p}");
                assert!(ids.insert(p["id"].as_u64().unwrap()), "ids differ: {o}");
                for k in ["runs", "run_time_ns"] {
                    assert!(p[k].as_u64().is_some(), "{k}: {p}");
                }
                for k in ["runs_per_s", "cpu_pct"] {
                    assert!(p[k].as_f64().is_some(), "{k}: {p}");
                }
            }
            let runs: u64 = progs.iter().map(|p| p["runs"].as_u64().unwrap()).sum();
            assert_eq!(runs, o["bpf_runs"].as_u64().unwrap(), "{o}");
        }
        if asked {
            // The traffic ran the capture programs in some interval.
            assert!(
                ov.iter().any(|o| o["bpf_runs"].as_u64().unwrap() > 0),
                "{ov:?}"
            );
        }
    }
}

/// With several tracking threads, each reads the event ring its sockets' records go to: many
/// connections at once, spread over the rings, give every call once, and each connection's
/// calls come in the order they were made.
#[test]
fn a_ring_per_tracking_thread_keeps_every_call_and_each_connections_order() {
    require_root();
    const CLIENTS: usize = 4;
    const CONNS: usize = 8; // per client thread, one after another
    const REQS: usize = 25; // per connection, keep-alive
    let server = TestServer::start();
    let port = server.port.to_string();
    let mut args = vec!["--json", "--port", &port];
    // Three threads unless the suite's environment gives a number already.
    if !hooks_args().iter().any(|a| a == "--threads") {
        args.extend(["--threads", "3"]);
    }
    let ebtop = Ebtop::start(&args);
    let meta = ebtop
        .collected
        .iter()
        .find(|v| v["type"] == "meta")
        .expect("the meta line comes first")
        .clone();
    let rings = meta["event_rings"]
        .as_u64()
        .expect("meta.event_rings, live");
    assert!(rings >= 2, "one ring per tracking thread: {meta}");

    let clients: Vec<_> = (0..CLIENTS)
        .map(|t| {
            let port = server.port;
            std::thread::spawn(move || {
                for c in 0..CONNS {
                    let s = TcpStream::connect(("127.0.0.1", port)).unwrap();
                    let mut w = s.try_clone().unwrap();
                    let mut r = BufReader::new(s);
                    for i in 0..REQS {
                        w.write_all(get(&format!("/sleep/0/{t}/{c}/{i}")).as_bytes())
                            .unwrap();
                        assert_eq!(read_response(&mut r), (200, 2));
                    }
                }
            })
        })
        .collect();
    for c in clients {
        c.join().unwrap();
    }

    let lines = ebtop.stop();
    let summary = lines.last().unwrap();
    assert_clean_summary(summary);
    let calls = calls(&lines);
    for side in ["client", "server"] {
        // Each connection (by the client's port) with its calls' request numbers, in output
        // order.
        let mut per_conn: std::collections::BTreeMap<u16, Vec<usize>> = Default::default();
        for c in calls.iter().filter(|c| c["side"] == side) {
            let client_port = port_of(if side == "client" {
                &c["local"]
            } else {
                &c["peer"]
            });
            let resource = c["resource"].as_str().unwrap();
            let i = resource.rsplit('/').next().unwrap().parse().unwrap();
            per_conn.entry(client_port).or_default().push(i);
        }
        assert_eq!(per_conn.len(), CLIENTS * CONNS, "{side}: connections");
        for (p, seq) in &per_conn {
            assert_eq!(
                seq,
                &(0..REQS).collect::<Vec<_>>(),
                "{side}: the calls of the connection from port {p}, in output order"
            );
        }
    }
    assert_eq!(summary["calls"], 2 * CLIENTS * CONNS * REQS);
}
