//! Live capture of Memcached: a real memcached started by the test, a text-protocol client and
//! a binary-protocol client with known commands, compared with what they did: exactly those
//! calls per command on the client side and on the server side, none more. Needs root.

mod common;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::process::{Child, Command, Stdio};

use common::*;
use serde_json::Value;

/// A memcached of the test's own on a free port (TCP only), killed on drop.
struct MemcachedServer {
    child: Child,
    port: u16,
}

impl MemcachedServer {
    fn start() -> MemcachedServer {
        let port = free_tcp_port();
        let child = Command::new("memcached")
            .args([
                "-u",
                "root",
                "-l",
                "127.0.0.1",
                "-U",
                "0",
                "-p",
                &port.to_string(),
            ])
            .stdout(Stdio::null())
            .spawn()
            .expect("memcached is installed (scripts/deps installs it)");
        wait_for_listener("127.0.0.1", port, "memcached");
        MemcachedServer { child, port }
    }
}

impl Drop for MemcachedServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A text-protocol connection that reads each reply whole.
struct Text {
    w: TcpStream,
    r: BufReader<TcpStream>,
}

impl Text {
    fn connect(port: u16) -> Text {
        let s = TcpStream::connect(("127.0.0.1", port)).unwrap();
        Text {
            w: s.try_clone().unwrap(),
            r: BufReader::new(s),
        }
    }
    fn line(&mut self) -> String {
        let mut line = String::new();
        self.r.read_line(&mut line).unwrap();
        line.trim_end().to_owned()
    }
    /// Sends `cmd`, returns the reply's lines (VALUE blocks read by their length).
    fn cmd(&mut self, cmd: &[u8]) -> Vec<String> {
        self.w.write_all(cmd).unwrap();
        let mut lines = Vec::new();
        loop {
            let line = self.line();
            let words: Vec<&str> = line.split(' ').collect();
            let more = match words[0] {
                "VALUE" => {
                    let n: usize = words[3].parse().unwrap();
                    let mut block = vec![0u8; n + 2];
                    self.r.read_exact(&mut block).unwrap();
                    true
                }
                "STAT" => true,
                _ => false,
            };
            lines.push(line);
            if !more {
                return lines;
            }
        }
    }
}

fn bin_request(op: u8, key: &[u8], extras: &[u8], value: &[u8], opaque: u32) -> Vec<u8> {
    let body_len = (extras.len() + key.len() + value.len()) as u32;
    let mut out = vec![0x80, op];
    out.extend_from_slice(&(key.len() as u16).to_be_bytes());
    out.push(extras.len() as u8);
    out.extend_from_slice(&[0, 0, 0]);
    out.extend_from_slice(&body_len.to_be_bytes());
    out.extend_from_slice(&opaque.to_be_bytes());
    out.extend_from_slice(&[0; 8]);
    out.extend_from_slice(extras);
    out.extend_from_slice(key);
    out.extend_from_slice(value);
    out
}

/// Reads one binary response: (opcode, status, opaque).
fn bin_response(s: &mut TcpStream) -> (u8, u16, u32) {
    let mut h = [0u8; 24];
    s.read_exact(&mut h).unwrap();
    let body = u32::from_be_bytes([h[8], h[9], h[10], h[11]]) as usize;
    let mut b = vec![0u8; body];
    s.read_exact(&mut b).unwrap();
    (
        h[1],
        u16::from_be_bytes([h[6], h[7]]),
        u32::from_be_bytes([h[12], h[13], h[14], h[15]]),
    )
}

fn side<'a>(calls: &[&'a Value], side: &str) -> Vec<&'a Value> {
    calls
        .iter()
        .copied()
        .filter(|c| c["side"] == side)
        .collect()
}

fn count(calls: &[&Value], version: &str, method: &str) -> usize {
    calls
        .iter()
        .filter(|c| c["version"] == version && c["method"] == method)
        .count()
}

#[test]
fn text_and_binary_clients_are_counted_exactly_on_both_sides() {
    require_root();
    let server = MemcachedServer::start();
    let port = server.port.to_string();
    let ebtop = Ebtop::start(&["--json", "--port", &port]);

    const N: usize = 150;
    const NOREPLY: usize = 20;
    const BIG: usize = 200_000;
    // Text: sets, hits, misses, deletes, a multi-key get, noreply sets, errors, a large value.
    let mut t = Text::connect(server.port);
    for i in 0..N {
        assert_eq!(
            t.cmd(format!("set user:{i} 0 0 5\r\nhello\r\n").as_bytes()),
            ["STORED"]
        );
        assert_eq!(t.cmd(format!("get user:{i}\r\n").as_bytes()).len(), 2);
        assert_eq!(t.cmd(format!("get missing:{i}\r\n").as_bytes()), ["END"]);
        assert_eq!(
            t.cmd(format!("delete user:{i}\r\n").as_bytes()),
            ["DELETED"]
        );
    }
    for i in 0..NOREPLY {
        t.w.write_all(format!("set quiet:{i} 0 0 1 noreply\r\nq\r\n").as_bytes())
            .unwrap();
    }
    assert_eq!(t.cmd(b"get quiet:0 quiet:1 missing:x\r\n").len(), 3);
    assert!(t.cmd(b"incr quiet:0 1\r\n")[0].starts_with("CLIENT_ERROR"));
    assert_eq!(t.cmd(b"bogus\r\n"), ["ERROR"]);
    let mut big = format!("set blob:1 0 0 {BIG}\r\n").into_bytes();
    big.extend(std::iter::repeat_n(b'v', BIG));
    big.extend_from_slice(b"\r\n");
    assert_eq!(t.cmd(&big), ["STORED"]);
    assert_eq!(t.cmd(b"get blob:1\r\n").len(), 2);
    assert!(t.cmd(b"stats\r\n").len() > 10);
    drop(t);

    // Binary: set, get hit, get miss (KEY_ENOENT), quiet gets flushed by a noop.
    let mut b = TcpStream::connect(("127.0.0.1", server.port)).unwrap();
    let flags_exp = [0u8; 8];
    let mut opaque = 0u32;
    for i in 0..N {
        let key = format!("bin:{i}");
        for (op, extras, value) in [
            (0x01, &flags_exp[..], &b"world"[..]),
            (0x00, &[][..], &[][..]),
        ] {
            opaque += 1;
            b.write_all(&bin_request(op, key.as_bytes(), extras, value, opaque))
                .unwrap();
            assert_eq!(bin_response(&mut b), (op, 0, opaque));
        }
        opaque += 1;
        b.write_all(&bin_request(0x00, b"nothere", &[], &[], opaque))
            .unwrap();
        assert_eq!(bin_response(&mut b), (0x00, 1, opaque));
    }
    // getq of a hit and a miss, then noop: the hit's response and the noop's.
    let mut batch = bin_request(0x09, b"bin:0", &[], &[], 9001);
    batch.extend(bin_request(0x09, b"nothere", &[], &[], 9002));
    batch.extend(bin_request(0x0a, b"", &[], &[], 9003));
    b.write_all(&batch).unwrap();
    assert_eq!(bin_response(&mut b), (0x09, 0, 9001));
    assert_eq!(bin_response(&mut b), (0x0a, 0, 9003));
    // incr of a non-numeric value: DELTA_BADVAL.
    b.write_all(&bin_request(0x05, b"bin:0", &[0; 20], &[], 9004))
        .unwrap();
    assert_eq!(bin_response(&mut b), (0x05, 6, 9004));
    drop(b);

    let lines = ebtop.stop();
    let calls = calls(&lines);
    for name in ["client", "server"] {
        let mine = side(&calls, name);
        assert!(mine.iter().all(|c| c["proto"] == "memcached"), "{name}");
        let want = [
            ("text", "set", N + 1),
            ("text", "get", 2 * N + 2),
            ("text", "delete", N),
            ("text", "incr", 1),
            ("text", "bogus", 1),
            ("text", "stats", 1),
            ("binary", "set", N),
            ("binary", "get", 2 * N),
            ("binary", "getq", 1),
            ("binary", "noop", 1),
            ("binary", "incr", 1),
        ];
        for (version, method, n) in want {
            assert_eq!(
                count(&mine, version, method),
                n,
                "{name} {version} {method}"
            );
        }
        let total: usize = want.iter().map(|w| w.2).sum();
        assert_eq!(mine.len(), total, "{name}: no other call");
        let errors = |outcome: &str| mine.iter().filter(|c| c["outcome"] == outcome).count();
        assert_eq!(
            errors("client_error"),
            2,
            "{name}: CLIENT_ERROR, DELTA_BADVAL"
        );
        assert_eq!(errors("server_error"), 1, "{name}: ERROR");
        let get_big: Vec<_> = mine
            .iter()
            .filter(|c| c["method"] == "get" && c["resource"] == "blob:1")
            .collect();
        assert_eq!(get_big.len(), 1);
        let head = format!("VALUE blob:1 0 {BIG}\r\n");
        assert_eq!(
            get_big[0]["resp_bytes"].as_u64().unwrap(),
            (head.len() + BIG + 2 + 5) as u64,
            "{name}: the whole reply, framed by its length"
        );
        let set_big: Vec<_> = mine
            .iter()
            .filter(|c| c["method"] == "set" && c["resource"] == "blob:1")
            .collect();
        assert_eq!(set_big[0]["req_bytes"].as_u64().unwrap(), big.len() as u64);
        let multi: Vec<_> = mine
            .iter()
            .filter(|c| c["method"] == "get" && c["resource"] == "quiet:0")
            .collect();
        assert_eq!(multi.len(), 1);
        assert_eq!(
            (&multi[0]["keys"], &multi[0]["hits"], &multi[0]["misses"]),
            (&Value::from("3"), &Value::from("2"), &Value::from("1"))
        );
    }
    let summary = lines.last().unwrap();
    assert_eq!(summary["kernel"]["lost"], 0, "{summary}");
    for k in ["damaged_messages", "unmatched_responses", "desyncs"] {
        assert_eq!(summary["parse"][k], 0, "{k}: {summary}");
    }
    // noreply sets and the getq miss, on both sides.
    assert_eq!(
        summary["parse"]["unreplied_requests"].as_u64().unwrap(),
        2 * (NOREPLY as u64 + 1),
        "{summary}"
    );
    // Both ends are on this host: every call is one hop (issue 50).
    let hops = assert_every_call_a_hop(&lines, server.port);
    assert!(hops >= 4 * N, "{hops}");
}

/// Multi-gets and pipelines far beyond one capture at the default snaplen (issue 43 item 2): the
/// kernel copies a Memcached connection's sends and receives whole up to 256 KiB. 1500 text
/// sets in one write, a `get` of 2000 keys (a 21 KB request line, ~70 KB of VALUE blocks
/// written with sendmsg's iovecs), 3000 pipelined `get`s in one write, and a binary multi-get
/// of 1000 `getkq` and a `noop` in one write: every call on both sides as the client did it,
/// hits and misses and the multi-get's bytes exact. Everything copied (~1 MB) fits the ring,
/// so nothing can be lost whatever the load: asserted.
#[test]
fn multi_gets_and_pipelines_beyond_the_snaplen_are_exact() {
    require_root();
    let server = MemcachedServer::start();
    let port = server.port.to_string();
    let ebtop = Ebtop::start(&["--json", "--port", &port, "--ringbuf-mb", "64"]);

    const STORED: usize = 1500;
    let value = |i: usize| "v".repeat(1 + i % 40);
    let mut t = Text::connect(server.port);
    let mut sets = Vec::new();
    for i in 0..STORED {
        let v = value(i);
        sets.extend(format!("set key:{i} 0 0 {}\r\n{v}\r\n", v.len()).into_bytes());
    }
    t.w.write_all(&sets).unwrap();
    for _ in 0..STORED {
        assert_eq!(t.line(), "STORED");
    }

    // One get of 2000 keys: 1500 hits, 500 misses.
    const MULTI: usize = 2000;
    let mut get = b"get".to_vec();
    for i in 0..MULTI {
        get.extend(format!(" key:{i}").into_bytes());
    }
    get.extend_from_slice(b"\r\n");
    let reply = t.cmd(&get);
    assert_eq!(reply.len(), STORED + 1);
    let mut reply_bytes = b"END\r\n".len();
    for i in 0..STORED {
        let v = value(i);
        reply_bytes += format!("VALUE key:{i} 0 {}\r\n", v.len()).len() + v.len() + 2;
    }

    // 3000 gets in one write, every other one a miss.
    const PIPELINED: usize = 3000;
    let mut gets = Vec::new();
    for i in 0..PIPELINED {
        let key = if i % 2 == 0 {
            format!("key:{}", i % STORED)
        } else {
            format!("none:{i}")
        };
        gets.extend(format!("get {key}\r\n").into_bytes());
    }
    t.w.write_all(&gets).unwrap();
    for i in 0..PIPELINED {
        let first = t.line();
        if i % 2 == 0 {
            let n: usize = first.rsplit(' ').next().unwrap().parse().unwrap();
            let mut block = vec![0u8; n + 2];
            t.r.read_exact(&mut block).unwrap();
            assert_eq!(t.line(), "END");
        } else {
            assert_eq!(first, "END");
        }
    }
    drop(t);

    // Binary multi-get: 1000 getkq (700 hits, 300 misses answered by silence) and a noop.
    const QUIET: usize = 1000;
    const QUIET_HITS: usize = 700;
    let mut b = TcpStream::connect(("127.0.0.1", server.port)).unwrap();
    let mut batch = Vec::new();
    for i in 0..QUIET {
        let key = if i < QUIET_HITS {
            format!("key:{i}")
        } else {
            format!("none:{i}")
        };
        batch.extend(bin_request(0x0d, key.as_bytes(), &[], &[], i as u32));
    }
    batch.extend(bin_request(0x0a, b"", &[], &[], 99_999));
    b.write_all(&batch).unwrap();
    for i in 0..QUIET_HITS {
        assert_eq!(bin_response(&mut b), (0x0d, 0, i as u32));
    }
    assert_eq!(bin_response(&mut b), (0x0a, 0, 99_999));
    drop(b);

    let lines = ebtop.stop();
    let summary = lines.last().unwrap();
    let kernel = &summary["kernel"];
    assert_eq!(kernel["lost"], 0, "{summary}");
    assert_eq!(kernel["not_copied_whole"], 0, "{summary}");
    assert!(kernel["copied_whole"].as_u64().unwrap() > 0, "{summary}");
    for k in [
        "damaged_messages",
        "unmatched_responses",
        "desyncs",
        "pending_dropped",
    ] {
        assert_eq!(summary["parse"][k], 0, "{k}: {summary}");
    }
    assert_eq!(
        summary["parse"]["unreplied_requests"].as_u64().unwrap(),
        2 * (QUIET - QUIET_HITS) as u64,
        "the getkq misses, on both sides: {summary}"
    );
    let calls = calls(&lines);
    for name in ["client", "server"] {
        let mine = side(&calls, name);
        let want = [
            ("text", "set", STORED),
            ("text", "get", 1 + PIPELINED),
            ("binary", "getkq", QUIET_HITS),
            ("binary", "noop", 1),
        ];
        for (version, method, n) in want {
            assert_eq!(
                count(&mine, version, method),
                n,
                "{name} {version} {method}"
            );
        }
        let total: usize = want.iter().map(|w| w.2).sum();
        assert_eq!(mine.len(), total, "{name}: no other call");
        assert!(mine.iter().all(|c| c["outcome"] == "ok"), "{name}");
        let multi: Vec<_> = mine
            .iter()
            .filter(|c| c["method"] == "get" && c["keys"].as_str() == Some(&MULTI.to_string()))
            .collect();
        assert_eq!(multi.len(), 1, "{name}");
        let m = multi[0];
        assert_eq!(
            (&m["hits"], &m["misses"]),
            (
                &Value::from(STORED.to_string()),
                &Value::from((MULTI - STORED).to_string())
            ),
            "{name}"
        );
        assert_eq!(m["req_bytes"].as_u64().unwrap(), get.len() as u64, "{name}");
        assert_eq!(
            m["resp_bytes"].as_u64().unwrap(),
            reply_bytes as u64,
            "{name}"
        );
        assert_eq!(m["truncated"], false, "{name}: copied whole");
        let singles = mine
            .iter()
            .filter(|c| c["method"] == "get" && c["keys"].is_null())
            .collect::<Vec<_>>();
        let hits = singles.iter().filter(|c| c["hits"] == "1").count();
        assert_eq!((singles.len(), hits), (PIPELINED, PIPELINED / 2), "{name}");
    }
}
