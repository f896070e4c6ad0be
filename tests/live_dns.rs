//! Live capture of DNS: a real dnsmasq started by the test, real clients (dig over UDP and TCP,
//! glibc's getaddrinfo through getent, which sends A and AAAA together with sendmmsg) and
//! queries the test writes itself (several on one TCP connection, one nobody answers),
//! compared with what the clients asked and got. Needs root.

mod common;

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::{TcpStream, UdpSocket};
use std::process::{Child, Command, Stdio};

use common::*;
use serde_json::Value;

/// A dnsmasq of the test's own, answering for `a.test` (A and AAAA), `NXDOMAIN` for other
/// names under `test`, asking no upstream; killed on drop.
struct Dnsmasq {
    child: Child,
}

impl Dnsmasq {
    fn start(addr: &str, port: u16) -> Dnsmasq {
        let child = Command::new("dnsmasq")
            .args(["-k", "--conf-file=/dev/null", "--pid-file=", "--user=root"])
            .arg(format!("--port={port}"))
            .arg(format!("--listen-address={addr}"))
            .args([
                "--bind-interfaces",
                "--no-resolv",
                "--no-hosts",
                "--local=/test/",
            ])
            .args([
                "--host-record=a.test,192.0.2.10,2001:db8::10",
                "--cache-size=0",
            ])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("dnsmasq is installed (scripts/deps installs it)");
        let d = Dnsmasq { child };
        wait_for_listener(addr, port, "dnsmasq");
        d
    }
}

impl Drop for Dnsmasq {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A port free for both UDP and TCP on 127.0.0.1.
fn free_port() -> u16 {
    loop {
        let port = free_tcp_port();
        if UdpSocket::bind(("127.0.0.1", port)).is_ok() {
            return port;
        }
    }
}

/// A query for `name` of type `qtype` (class IN, recursion desired), id `id`.
fn query(id: u16, name: &str, qtype: u16) -> Vec<u8> {
    let mut m = Vec::new();
    m.extend_from_slice(&id.to_be_bytes());
    m.extend_from_slice(&[0x01, 0x00, 0, 1, 0, 0, 0, 0, 0, 0]);
    for label in name.split('.') {
        m.push(label.len() as u8);
        m.extend_from_slice(label.as_bytes());
    }
    m.push(0);
    m.extend_from_slice(&qtype.to_be_bytes());
    m.extend_from_slice(&1u16.to_be_bytes());
    m
}

/// Whose calls to count: one process, or every process of a name (dnsmasq answers TCP in a
/// child process per connection).
#[derive(Clone, Copy)]
enum Who {
    Pid(u32),
    Comm(&'static str),
}

const DNSMASQ: Who = Who::Comm("dnsmasq");

impl From<u32> for Who {
    fn from(pid: u32) -> Who {
        Who::Pid(pid)
    }
}

/// (resource, status_text) → calls, of one side of `who`.
fn tally(calls: &[&Value], side: &str, who: impl Into<Who>) -> BTreeMap<(String, String), usize> {
    let who = who.into();
    let mut t = BTreeMap::new();
    for c in calls.iter().filter(|c| {
        c["side"] == side
            && match who {
                Who::Pid(p) => c["pid"] == p,
                Who::Comm(name) => c["comm"] == name,
            }
    }) {
        assert_eq!(c["proto"], "dns", "{c}");
        assert_eq!(c["method"], "QUERY", "{c}");
        let key = (
            c["resource"].as_str().unwrap().to_owned(),
            c["status_text"].as_str().unwrap().to_owned(),
        );
        *t.entry(key).or_default() += 1;
    }
    t
}

fn expect(rows: &[(&str, &str, usize)]) -> BTreeMap<(String, String), usize> {
    rows.iter()
        .map(|(r, s, n)| ((r.to_string(), s.to_string()), *n))
        .collect()
}

fn assert_clean(summary: &Value) {
    assert_eq!(summary["kernel"]["lost"], 0, "{summary}");
    for field in ["damaged_messages", "desyncs", "unmatched_responses"] {
        assert_eq!(summary["parse"][field], 0, "{field}: {summary}");
    }
}

/// dig over UDP (one query per datagram, a CH-class question among them) and over TCP (one
/// connection per query): every query once on each side, with its rcode; NXDOMAIN is the
/// asker's error.
#[test]
fn dig_queries_over_udp_and_tcp_are_counted_once_per_side() {
    require_root();
    let port = free_port();
    let _server = Dnsmasq::start("127.0.0.1", port);
    let ebtop = Ebtop::start(&["--json", "--port", &port.to_string()]);
    // One dig over UDP, one over TCP (+tcp in a batch file's lines is not honoured).
    let mut udp = String::new();
    for _ in 0..12 {
        udp.push_str("a.test A\na.test AAAA\n");
    }
    for _ in 0..6 {
        udp.push_str("nope.test A\n");
    }
    for _ in 0..3 {
        udp.push_str("version.bind TXT CH\n");
    }
    let tcp = "a.test A\nnope.test AAAA\n".repeat(5);
    let mut dig_pids = Vec::new();
    let mut text = String::new();
    for (lines, transport) in [(udp, "+notcp"), (tcp, "+tcp")] {
        let batch = std::env::temp_dir().join(format!("ebtop-dig-{}.txt", std::process::id()));
        std::fs::write(&batch, lines).unwrap();
        let dig = Command::new("dig")
            .arg("-f")
            .arg(&batch)
            .args([
                "@127.0.0.1",
                "-p",
                &port.to_string(),
                "+tries=1",
                "+time=5",
                transport,
            ])
            .stdout(Stdio::piped())
            .spawn()
            .expect("dig is installed (scripts/deps installs it)");
        dig_pids.push(dig.id());
        let out = dig.wait_with_output().unwrap();
        let _ = std::fs::remove_file(&batch);
        assert!(out.status.success());
        text.push_str(&String::from_utf8_lossy(&out.stdout));
    }
    // dig's own account: one header per query, its status in it.
    let statuses = |s: &str| text.matches(&format!("status: {s},")).count();
    assert_eq!(
        (statuses("NOERROR"), statuses("NXDOMAIN")),
        (12 + 12 + 3 + 5, 6 + 5)
    );

    let lines = ebtop.stop();
    let calls = calls(&lines);
    let udp_and_tcp = expect(&[
        ("A a.test", "NOERROR", 12 + 5),
        ("AAAA a.test", "NOERROR", 12),
        ("A nope.test", "NXDOMAIN", 6),
        ("AAAA nope.test", "NXDOMAIN", 5),
        ("TXT version.bind CH", "NOERROR", 3),
    ]);
    let mut client = tally(&calls, "client", dig_pids[0]);
    for (k, n) in tally(&calls, "client", dig_pids[1]) {
        *client.entry(k).or_default() += n;
    }
    assert_eq!(client, udp_and_tcp, "dig's side");
    assert_eq!(
        tally(&calls, "server", DNSMASQ),
        udp_and_tcp,
        "dnsmasq's side; summary {}",
        lines.last().unwrap()
    );
    for c in &calls {
        let tcp = c["version"] == "tcp";
        let nx = c["status_text"] == "NXDOMAIN";
        assert_eq!(c["outcome"], if nx { "client_error" } else { "ok" }, "{c}");
        if c["resource"] == "A a.test" {
            assert_eq!(c["addresses"], "192.0.2.10", "{c}");
        }
        // Over TCP each message carries its 2-byte length.
        let q = 12 + c["resource"].as_str().unwrap().len() as u64 + 1 + 4;
        assert!(
            c["req_bytes"].as_u64().unwrap() >= q + if tcp { 2 } else { 0 },
            "{c}"
        );
    }
    let tcp_calls = calls.iter().filter(|c| c["version"] == "tcp").count();
    assert_eq!(tcp_calls, 2 * 10, "TCP calls, both sides");
    // Issue 43: dig's calls are made by its threads (`isc-net-0000`): named by the process,
    // the thread's name apart; its `proc` lines (one per run) with exe and arguments.
    for c in calls.iter().filter(|c| c["side"] == "client") {
        assert_eq!(c["comm"], "dig", "{c}");
    }
    for pid in &dig_pids {
        let procs: Vec<_> = lines
            .iter()
            .filter(|l| l["type"] == "proc" && l["pid"] == *pid)
            .collect();
        assert_eq!(procs.len(), 1, "{procs:?}");
        assert_eq!(procs[0]["comm"], "dig", "{procs:?}");
        assert!(
            procs[0]["exe"]
                .as_str()
                .is_some_and(|e| e.ends_with("/dig")),
            "{procs:?}"
        );
        assert_eq!(procs[0]["cmdline"][0], "dig", "{procs:?}");
    }
    let summary = lines.last().unwrap();
    assert_clean(summary);
    assert_eq!(summary["parse"]["unanswered_requests"], 0, "{summary}");
}

/// glibc's getaddrinfo (getent ahosts) sends the A and AAAA queries together in one sendmmsg
/// and reads both answers: each seen once per side, from the same client socket. The resolver
/// reads /etc/resolv.conf, so getent runs in a mount namespace where it names the test's
/// dnsmasq (port 53 on another loopback address); the host's file is untouched.
#[test]
fn getaddrinfo_a_and_aaaa_sent_together_are_both_seen() {
    require_root();
    let addr = "127.0.0.153";
    let _server = Dnsmasq::start(addr, 53);
    let conf = std::env::temp_dir().join(format!("ebtop-resolv-{}.conf", std::process::id()));
    std::fs::write(
        &conf,
        format!("nameserver {addr}\noptions attempts:1 timeout:5\n"),
    )
    .unwrap();
    let ebtop = Ebtop::start(&["--json", "--port", "53"]);
    let mut pids = Vec::new();
    for name in ["a.test", "nope.test"] {
        let script = format!(
            "mount --bind {} /etc/resolv.conf && exec getent ahosts {name}",
            conf.display()
        );
        let child = Command::new("unshare")
            .args(["-m", "sh", "-c", &script])
            .stdout(Stdio::piped())
            .spawn()
            .expect("unshare (util-linux) and getent (libc-bin) are installed");
        pids.push(child.id());
        let out = child.wait_with_output().unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        if name == "a.test" {
            assert!(out.status.success());
            assert!(
                text.contains("192.0.2.10") && text.contains("2001:db8::10"),
                "{text}"
            );
        } else {
            // getent: 2 = key not found.
            assert_eq!(out.status.code(), Some(2), "{text}");
        }
    }
    let _ = std::fs::remove_file(&conf);
    let lines = ebtop.stop();
    let calls = calls(&lines);
    let found = expect(&[("A a.test", "NOERROR", 1), ("AAAA a.test", "NOERROR", 1)]);
    let missing = expect(&[
        ("A nope.test", "NXDOMAIN", 1),
        ("AAAA nope.test", "NXDOMAIN", 1),
    ]);
    let client_of = |pid: u32| tally(&calls, "client", pid);
    // unshare execs sh, which execs getent: the pid is getent's.
    assert_eq!(client_of(pids[0]), found, "getent a.test: {calls:#?}");
    assert_eq!(client_of(pids[1]), missing, "getent nope.test");
    let mut both = found.clone();
    both.extend(missing);
    assert_eq!(
        tally(&calls, "server", DNSMASQ),
        both,
        "dnsmasq's side; summary {}",
        lines.last().unwrap()
    );
    // A and AAAA of one lookup left from one socket, and were answered to it.
    for pid in &pids {
        let socks: Vec<&Value> = calls
            .iter()
            .filter(|c| c["pid"] == *pid)
            .map(|c| &c["sock_id"])
            .collect();
        assert!(socks.windows(2).all(|w| w[0] == w[1]), "{socks:?}");
    }
    let client_ports: Vec<&Value> = calls
        .iter()
        .filter(|c| c["side"] == "client")
        .map(|c| &c["local"])
        .collect();
    for c in calls.iter().filter(|c| c["side"] == "server") {
        assert!(client_ports.contains(&&c["peer"]), "server call's peer {c}");
        assert_eq!(c["local"], format!("{addr}:53"));
    }
    assert_clean(lines.last().unwrap());
}

/// Several queries written at once on one TCP connection (answers may come in any order) are
/// each paired by id; a query nobody answers makes no call and is counted unanswered, on the
/// asking socket and on the silent one that received it.
#[test]
fn pipelined_tcp_queries_pair_by_id_and_unanswered_ones_are_counted() {
    require_root();
    let port = free_port();
    let _server = Dnsmasq::start("127.0.0.1", port);
    // Same port, another loopback address: the port filter covers both servers (and the
    // connected asking socket by its peer).
    let silent = UdpSocket::bind(("127.0.0.2", port)).unwrap();
    let ebtop = Ebtop::start(&["--json", "--port", &port.to_string()]);

    const N: u16 = 8;
    let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
    let mut burst = Vec::new();
    for i in 0..N {
        let q = query(0x4000 + i, "a.test", if i % 2 == 0 { 1 } else { 28 });
        burst.extend_from_slice(&(q.len() as u16).to_be_bytes());
        burst.extend_from_slice(&q);
    }
    s.write_all(&burst).unwrap();
    let mut ids = Vec::new();
    for _ in 0..N {
        let mut len = [0u8; 2];
        s.read_exact(&mut len).unwrap();
        let mut m = vec![0u8; u16::from_be_bytes(len) as usize];
        s.read_exact(&mut m).unwrap();
        ids.push(u16::from_be_bytes([m[0], m[1]]));
    }
    ids.sort();
    assert_eq!(ids, (0x4000..0x4000 + N).collect::<Vec<_>>());
    drop(s);

    let asker = UdpSocket::bind("127.0.0.1:0").unwrap();
    asker.connect(("127.0.0.2", port)).unwrap();
    asker.send(&query(0x7777, "void.test", 1)).unwrap();
    let mut buf = [0u8; 512];
    let (n, _) = silent.recv_from(&mut buf).unwrap();
    assert!(n > 12);
    drop((asker, silent));

    let lines = ebtop.stop();
    let calls = calls(&lines);
    let me = std::process::id();
    let per_type = expect(&[
        ("A a.test", "NOERROR", N as usize / 2),
        ("AAAA a.test", "NOERROR", N as usize / 2),
    ]);
    assert_eq!(tally(&calls, "client", me), per_type, "the test's side");
    assert_eq!(
        tally(&calls, "server", DNSMASQ),
        per_type,
        "dnsmasq's side; summary {}",
        lines.last().unwrap()
    );
    let txids: Vec<u64> = calls
        .iter()
        .filter(|c| c["side"] == "client")
        .map(|c| c["txid"].as_str().unwrap().parse().unwrap())
        .collect();
    assert_eq!(txids.len(), N as usize);
    assert!(calls.iter().all(|c| c["resource"] != "A void.test"));
    let summary = lines.last().unwrap();
    assert_clean(summary);
    // The asking socket and the silent one each held the query when they closed.
    assert_eq!(summary["parse"]["unanswered_requests"], 2, "{summary}");
}

/// A datagram socket judged to carry no known protocol (on the socket-layer path: 32 unknown
/// datagrams in a row, then one in 32 examined, the rest skipped unread) still finds DNS that
/// comes later on it: from the first query examined on, every query is seen, and the datagrams
/// skipped before it are counted as unexamined. The syscall path examines every datagram.
#[test]
fn dns_after_unknown_datagrams_on_one_socket_is_found_and_the_skipped_are_counted() {
    require_root();
    let port = free_port();
    let _server = Dnsmasq::start("127.0.0.1", port);
    let sink = UdpSocket::bind("127.0.0.1:0").unwrap();
    let me = std::process::id();
    let ebtop = Ebtop::start(&["--json", "--pid", &me.to_string()]);

    // One unconnected socket: a run of datagrams of no protocol ebtop knows, then queries.
    let asker = UdpSocket::bind("127.0.0.1:0").unwrap();
    let junk = [0x5au8; 64];
    for _ in 0..40 {
        asker.send_to(&junk, sink.local_addr().unwrap()).unwrap();
    }
    const N: u16 = 40;
    let mut buf = [0u8; 512];
    for i in 0..N {
        asker
            .send_to(&query(0x5000 + i, "a.test", 1), ("127.0.0.1", port))
            .unwrap();
        let (n, _) = asker.recv_from(&mut buf).unwrap();
        assert_eq!(u16::from_be_bytes([buf[0], buf[1]]), 0x5000 + i);
        assert!(n > 12);
    }
    let asker_port = asker.local_addr().unwrap().port();
    drop(asker);

    let lines = ebtop.stop();
    let summary = lines.last().unwrap();
    let socket_path = lines[0]["hooks"] == "socket";
    let mut ids: Vec<u16> = calls(&lines)
        .iter()
        .filter(|c| c["side"] == "client" && port_of(&c["local"]) == asker_port)
        .map(|c| {
            assert_eq!(c["resource"], "A a.test", "{c}");
            assert_eq!(c["status_text"], "NOERROR", "{c}");
            c["txid"].as_str().unwrap().parse::<u16>().unwrap()
        })
        .collect();
    ids.sort();
    let seen = ids.len() as u16;
    // A suffix of the queries, each once: none after the first one found is missed.
    assert_eq!(
        ids,
        (0x5000 + N - seen..0x5000 + N).collect::<Vec<_>>(),
        "{summary}"
    );
    let unexamined = summary["kernel"]["skipped_unexamined"].as_u64().unwrap();
    if socket_path {
        // The run of unknown datagrams made the verdict; the queries before the first one
        // examined (at most 31 datagrams apart: 16 exchanges) went unread, and were counted.
        assert!(seen < N && N - seen <= 16, "seen {seen} of {N}; {summary}");
        assert!(
            unexamined >= 2 * u64::from(N - seen),
            "unexamined {unexamined}, queries missed {}; {summary}",
            N - seen
        );
    } else {
        assert_eq!(seen, N, "{summary}");
        assert_eq!(unexamined, 0, "{summary}");
    }
}
