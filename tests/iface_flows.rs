//! Interface flows (`--iface`) against ground truth: two network namespaces joined by a
//! bridge in this one (their traffic is bridged, never seen by a local socket here), counted
//! on the bridge's ports; the senders' and iperf3's own counts. IPv6 is off on the test links
//! and neighbours are static, so nothing but the tests' traffic crosses them. Needs root.

mod common;

use std::net::UdpSocket;
use std::process::Command;
use std::sync::Mutex;
use std::thread;
use std::time::Duration;

use common::*;
use serde_json::Value;

static SERIAL: Mutex<()> = Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

/// Two namespaces `a` and `b`, each with a veth whose other end is a port of a bridge here
/// (`port_a`, `port_b`); addresses `ip_a`, `ip_b` in one subnet. Removed on drop.
struct Bridged {
    tag: String,
    bridge: String,
    ns: [String; 2],
    ports: [String; 2],
    ips: [String; 2],
}

impl Bridged {
    fn new(tag: &str) -> Bridged {
        let id = std::process::id() % 10_000;
        let b = Bridged {
            tag: tag.to_string(),
            bridge: format!("ebr{tag}{id}"),
            ns: [format!("ebia{tag}{id}"), format!("ebib{tag}{id}")],
            ports: [format!("vi{tag}a{id}"), format!("vi{tag}b{id}")],
            ips: [
                format!("10.{}.{}.1", 200 + tag.len(), id % 250),
                format!("10.{}.{}.2", 200 + tag.len(), id % 250),
            ],
        };
        sh(&["ip", "link", "add", &b.bridge, "type", "bridge"]);
        no_ipv6(&b.bridge);
        sh(&["ip", "link", "set", &b.bridge, "up"]);
        for i in 0..2 {
            let (ns, port) = (&b.ns[i], &b.ports[i]);
            let inner = format!("{port}n");
            sh(&["ip", "netns", "add", ns]);
            sh(&[
                "ip", "link", "add", port, "type", "veth", "peer", "name", &inner, "netns", ns,
            ]);
            no_ipv6(port);
            sh(&["ip", "link", "set", port, "master", &b.bridge]);
            sh(&["ip", "link", "set", port, "up"]);
            sh(&[
                "ip",
                "netns",
                "exec",
                ns,
                "sh",
                "-c",
                "echo 1 > /proc/sys/net/ipv6/conf/all/disable_ipv6",
            ]);
            sh(&[
                "ip",
                "-n",
                ns,
                "addr",
                "add",
                &format!("{}/24", b.ips[i]),
                "dev",
                &inner,
            ]);
            sh(&["ip", "-n", ns, "link", "set", &inner, "up"]);
            sh(&["ip", "-n", ns, "link", "set", "lo", "up"]);
        }
        // Static neighbours both ways: no ARP on the links.
        for i in 0..2 {
            let other = 1 - i;
            let inner = format!("{}n", b.ports[other]);
            let link = sh(&[
                "ip",
                "-n",
                &b.ns[other],
                "-br",
                "link",
                "show",
                "dev",
                &inner,
            ]);
            let mac = link.split_whitespace().nth(2).expect("a MAC").to_string();
            sh(&[
                "ip",
                "-n",
                &b.ns[i],
                "neigh",
                "replace",
                &b.ips[other],
                "lladdr",
                &mac,
                "dev",
                &format!("{}n", b.ports[i]),
                "nud",
                "permanent",
            ]);
        }
        b
    }

    /// Runs `f` on a thread inside namespace `i` (setns affects only the calling thread).
    fn run_in<T: Send + 'static>(
        &self,
        i: usize,
        f: impl FnOnce() -> T + Send + 'static,
    ) -> thread::JoinHandle<T> {
        let path = format!("/var/run/netns/{}", self.ns[i]);
        thread::spawn(move || {
            let fd = std::fs::File::open(&path).expect("netns handle");
            use std::os::fd::AsRawFd;
            // SAFETY: setns on a valid namespace fd affects only this thread.
            let rc = unsafe { libc::setns(fd.as_raw_fd(), libc::CLONE_NEWNET) };
            assert_eq!(rc, 0, "setns {path}");
            f()
        })
    }

    /// Sends `n` datagrams of `len` bytes from namespace a (`sport`, 0: any) to b's `dport`,
    /// where a socket receives them: how many arrived.
    fn udp_a_to_b(&self, n: usize, len: usize, sport: u16, dport: u16) -> usize {
        self.udp_a_to_b_ports(n, len, sport, &[dport])
    }

    /// As `udp_a_to_b`, to each of `dports` in turn, `n` rounds: how many arrived in all.
    fn udp_a_to_b_ports(&self, n: usize, len: usize, sport: u16, dports: &[u16]) -> usize {
        let ip_b = self.ips[1].clone();
        let ports = dports.to_vec();
        let want = n * ports.len();
        let rx = self.run_in(1, move || {
            let socks: Vec<UdpSocket> = ports
                .iter()
                .map(|p| {
                    let s = UdpSocket::bind((ip_b.as_str(), *p)).unwrap();
                    s.set_nonblocking(true).unwrap();
                    s
                })
                .collect();
            let mut buf = vec![0u8; 65536];
            let mut got = 0;
            let deadline = std::time::Instant::now() + Duration::from_secs(10);
            while got < want && std::time::Instant::now() < deadline {
                let mut idle = true;
                for s in &socks {
                    while s.recv(&mut buf).is_ok() {
                        got += 1;
                        idle = false;
                    }
                }
                if idle {
                    thread::sleep(Duration::from_micros(200));
                }
            }
            got
        });
        thread::sleep(Duration::from_millis(200));
        let (ip_a, ip_b) = (self.ips[0].clone(), self.ips[1].clone());
        let ports = dports.to_vec();
        self.run_in(0, move || {
            let s = UdpSocket::bind((ip_a.as_str(), sport)).unwrap();
            for _ in 0..n {
                for p in &ports {
                    s.send_to(&vec![7u8; len], (ip_b.as_str(), *p)).unwrap();
                    // Paced: the receiver's buffers never overflow (every datagram arrives).
                    thread::sleep(Duration::from_micros(50));
                }
            }
        })
        .join()
        .unwrap();
        rx.join().unwrap()
    }
}

impl Drop for Bridged {
    fn drop(&mut self) {
        for ns in &self.ns {
            let _ = Command::new("ip").args(["netns", "del", ns]).status();
        }
        for p in self.ports.iter().chain([&self.bridge]) {
            let _ = Command::new("ip")
                .args(["link", "del", p])
                .stderr(std::process::Stdio::null())
                .status();
        }
        let _ = &self.tag;
    }
}

/// A namespace's SNMP counter (`nstat -a`, absolute, not touching the history file).
fn nstat(ns: &str, counter: &str) -> u64 {
    let out = sh(&["ip", "netns", "exec", ns, "nstat", "-asz", counter]);
    out.lines()
        .find(|l| l.starts_with(counter))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("no {counter} in {out}"))
}

/// IPv6 off on a link of this namespace (no router solicitation or neighbour discovery on it).
fn no_ipv6(dev: &str) {
    let path = format!("/proc/sys/net/ipv6/conf/{dev}/disable_ipv6");
    std::fs::write(&path, "1").unwrap_or_else(|e| panic!("{path}: {e}"));
}

/// The `iface_flow` lines of one 5-tuple at one interface one way, summed.
fn flow_sum(lines: &[Value], iface: &str, dir: &str, proto: &str, dport: u16) -> (u64, u64, u64) {
    of_type(lines, "iface_flow")
        .into_iter()
        .filter(|f| {
            f["iface"] == iface && f["dir"] == dir && f["proto"] == proto && f["dport"] == dport
        })
        .fold((0, 0, 0), |(p, b, l), f| {
            (p + u(f, "packets"), b + u(f, "bytes"), l + u(f, "payload"))
        })
}

/// The last `iface` line of an interface direction (its totals since the start).
fn last_total<'a>(lines: &'a [Value], iface: &str, dir: &str) -> Option<&'a Value> {
    of_type(lines, "iface")
        .into_iter()
        .rfind(|t| t["iface"] == iface && t["dir"] == dir)
}

/// Bridged UDP and TCP between two namespaces, counted on both bridge ports: UDP exactly as
/// sent (datagrams, payload, wire bytes: 14 + 20 + 8 bytes of headers each); iperf3's TCP
/// transfer's payload at least what iperf3 sent and at most that plus its retransmitted
/// segments (GSO packets count their segments). A recording of the session replays the
/// same lines.
#[test]
fn bridged_traffic_between_two_namespaces_equals_the_senders_counts() {
    require_root();
    let _g = serial();
    let net = Bridged::new("u");
    let dir = tempfile::tempdir().unwrap();
    let rec = dir.path().join("iface.ebt");
    let iface_arg = format!("{},{}", net.ports[0], net.ports[1]);
    let ebtop = Ebtop::start(&[
        "--json",
        "--only",
        "iface,iface_flow,flow_stats",
        "--delay",
        "250ms",
        "--iface",
        &iface_arg,
        "-w",
        rec.to_str().unwrap(),
    ]);
    const N: usize = 500;
    const LEN: usize = 1000;
    let dport = 40_000 + (std::process::id() % 20_000) as u16;
    assert_eq!(
        net.udp_a_to_b(N, LEN, 0, dport),
        N,
        "every datagram arrives"
    );

    // iperf3's UDP test: every datagram it sent crosses the bridge (received or not).
    let uport = dport + 1;
    let mut server = Command::new("ip")
        .args(["netns", "exec", &net.ns[1], "iperf3", "-s", "-1", "-p"])
        .arg(uport.to_string())
        .stdout(std::process::Stdio::null())
        .spawn()
        .expect("iperf3 is installed");
    thread::sleep(Duration::from_millis(500));
    let out = sh(&[
        "ip",
        "netns",
        "exec",
        &net.ns[0],
        "iperf3",
        "-c",
        &net.ips[1],
        "-p",
        &uport.to_string(),
        "-u",
        "-b",
        "200M",
        "-l",
        "1200",
        "-n",
        "4M",
        "-J",
    ]);
    let _ = server.wait();
    let report: Value = serde_json::from_str(&out).expect("iperf3 -J");
    let iperf_bytes = u(&report["end"]["sum"], "bytes");
    let iperf_packets = u(&report["end"]["sum"], "packets");

    // TCP from a client that writes LEN bytes to a server that reads them all: the payload
    // on the wire is LEN (and the retransmitted segments' bytes, if any: bounded by the
    // namespace's TcpRetransSegs).
    let tport = dport + 2;
    const TCP_LEN: usize = 8 << 20;
    let ip_b = net.ips[1].clone();
    let srv = net.run_in(1, move || {
        use std::io::Read;
        let l = std::net::TcpListener::bind((ip_b.as_str(), tport)).unwrap();
        let (mut s, _) = l.accept().unwrap();
        let mut buf = vec![0u8; 65536];
        let mut n = 0u64;
        loop {
            match s.read(&mut buf).unwrap() {
                0 => break n,
                k => n += k as u64,
            }
        }
    });
    thread::sleep(Duration::from_millis(200));
    let retrans_before = nstat(&net.ns[0], "TcpRetransSegs");
    let ip_b = net.ips[1].clone();
    net.run_in(0, move || {
        use std::io::Write;
        let mut s = std::net::TcpStream::connect((ip_b.as_str(), tport)).unwrap();
        s.write_all(&vec![3u8; TCP_LEN]).unwrap();
        s.shutdown(std::net::Shutdown::Write).unwrap();
    })
    .join()
    .unwrap();
    assert_eq!(srv.join().unwrap(), TCP_LEN as u64);
    let retrans = nstat(&net.ns[0], "TcpRetransSegs") - retrans_before;
    thread::sleep(Duration::from_millis(600));
    let lines = ebtop.stop();

    let (pa, ba, la) = flow_sum(&lines, &net.ports[0], "ingress", "udp", dport);
    let (pb, bb, lb) = flow_sum(&lines, &net.ports[1], "egress", "udp", dport);
    for (what, p, b, l) in [
        ("port a ingress", pa, ba, la),
        ("port b egress", pb, bb, lb),
    ] {
        assert_eq!(p, N as u64, "{what}: datagrams");
        assert_eq!(l, (N * LEN) as u64, "{what}: payload");
        assert_eq!(b, (N * (LEN + 42)) as u64, "{what}: wire bytes");
    }
    let (ip_p, _, ip_l) = flow_sum(&lines, &net.ports[0], "ingress", "udp", uport);
    eprintln!("iperf3 UDP: {iperf_packets} datagrams, {iperf_bytes} bytes; ebtop {ip_p}, {ip_l}");
    // iperf3 opens a UDP test with one 4-byte datagram its server answers (its "connect"
    // message, UDP_CONNECT_MSG), which its counts leave out.
    assert_eq!(
        (ip_p, ip_l),
        (iperf_packets + 1, iperf_bytes + 4),
        "iperf3's UDP test"
    );
    let (tp, _, tl) = flow_sum(&lines, &net.ports[0], "ingress", "tcp", tport);
    eprintln!("TCP: {TCP_LEN} bytes written, {retrans} retransmitted segments; ebtop {tp} packets, {tl} bytes");
    assert!(
        tl >= TCP_LEN as u64 && tl <= TCP_LEN as u64 + retrans * 65_536,
        "TCP payload {tl} vs {TCP_LEN} written (+{retrans} retransmitted segments)"
    );
    // Totals add up: the last `iface` line's total is the sum of every interval's.
    let a_in = last_total(&lines, &net.ports[0], "ingress").expect("an iface line");
    let intervals: u64 = of_type(&lines, "iface")
        .into_iter()
        .filter(|t| t["iface"] == net.ports[0].as_str() && t["dir"] == "ingress")
        .map(|t| u(&t["interval"], "packets"))
        .sum();
    assert_eq!(u(&a_in["total"], "packets"), intervals);
    assert_eq!(u(&a_in["unattributed"], "packets"), 0);
    let stats = of_type(&lines, "flow_stats");
    let last = stats.last().expect("flow_stats");
    assert_eq!(last["iface"]["attach"], "tcx");
    let meta = &lines[0];
    assert!(
        meta["loaded"]
            .as_array()
            .unwrap()
            .iter()
            .any(|l| l == "iface_flows"),
        "{meta}"
    );
    assert_eq!(last["iface"]["attached"].as_array().unwrap().len(), 2);

    // The recording replays the same interface lines.
    let replayed: Vec<Value> = replay_json(&rec, &["--only", "iface,iface_flow"])
        .into_iter()
        .filter(|v| v["type"] == "iface" || v["type"] == "iface_flow")
        .collect();
    let live: Vec<&Value> = lines
        .iter()
        .filter(|v| v["type"] == "iface" || v["type"] == "iface_flow")
        .collect();
    assert_eq!(replayed.len(), live.len(), "replayed interface lines");
    for (r, l) in replayed.iter().zip(live) {
        assert_eq!(r, l);
    }

    // The terminal UI's Flows view, replaying the recording: an Iface line per bridge port;
    // while the UDP test ran, its rates and the busiest 5-tuple (iperf3's), then idle.
    let mut app = ebtop::tui::app::App::new("replay iface.ebt", Duration::from_secs(1), true);
    let (w, h) = (200u16, 30u16);
    app.set_size(w, h);
    app.handle_key(crossterm::event::KeyEvent::new(
        crossterm::event::KeyCode::Char('3'),
        crossterm::event::KeyModifiers::NONE,
    ));
    let iface_lines = |app: &ebtop::tui::app::App| -> Vec<String> {
        let mut term = ratatui::Terminal::new(ratatui::backend::TestBackend::new(w, h)).unwrap();
        term.draw(|f| ebtop::tui::render::draw(f, app)).unwrap();
        let buf = term.backend().buffer();
        (0..h)
            .map(|y| (0..w).map(|x| buf[(x, y)].symbol()).collect::<String>())
            .filter(|l| l.contains("Iface "))
            .map(|l| l.trim_end().to_string())
            .collect()
    };
    let busy = format!("Iface {}: in ", net.ports[0]);
    let top = format!("top udp {}:", net.ips[0]);
    let mut seen_busy = false;
    for m in ebtop::tui::collect_replay(&rec).unwrap() {
        app.apply(m);
        let lines = iface_lines(&app);
        seen_busy |= lines
            .iter()
            .any(|l| l.starts_with(&busy) && l.contains("pkt/s") && l.contains(&top));
    }
    assert!(seen_busy, "no interval showed {busy}… with {top}…");
    let last = iface_lines(&app);
    assert_eq!(last.len(), 2, "{last:?}");
    for port in &net.ports {
        assert!(
            last.iter()
                .any(|l| l.contains(&format!("Iface {port}: idle"))),
            "{last:?}"
        );
    }
}

/// A table too small for the interval's flows: what does not fit is counted per interface as
/// `unattributed`, and flows plus unattributed are exactly what was sent.
#[test]
fn a_full_table_counts_the_rest_as_unattributed() {
    require_root();
    let _g = serial();
    let net = Bridged::new("f");
    let ebtop = Ebtop::start(&[
        "--json",
        "--only",
        "iface,iface_flow",
        "--delay",
        "250ms",
        "--iface",
        &net.ports[0],
        "--max-iface-flows",
        "4",
    ]);
    let base = 41_000 + (std::process::id() % 10_000) as u16 * 2;
    let ports: Vec<u16> = (0..24).map(|i| base + i).collect();
    let sent = net.udp_a_to_b_ports(10, 100, 0, &ports) as u64;
    assert_eq!(sent, 240);
    thread::sleep(Duration::from_millis(600));
    let lines = ebtop.stop();
    let attributed: u64 = of_type(&lines, "iface_flow")
        .into_iter()
        .filter(|f| f["iface"] == net.ports[0].as_str() && f["dir"] == "ingress")
        .map(|f| u(f, "packets"))
        .sum();
    let totals: Vec<&Value> = of_type(&lines, "iface")
        .into_iter()
        .filter(|t| t["iface"] == net.ports[0].as_str() && t["dir"] == "ingress")
        .collect();
    let unattributed: u64 = totals
        .iter()
        .map(|t| u(&t["unattributed"], "packets"))
        .sum();
    let total = u(&totals.last().expect("iface lines")["total"], "packets");
    eprintln!("attributed {attributed}, unattributed {unattributed}, total {total}");
    assert_eq!(total, sent, "every datagram counted on the interface");
    assert_eq!(attributed + unattributed, total);
    assert!(
        unattributed > 0,
        "a table of 4 flows cannot hold 24 sent in one go"
    );
}

/// `--iface all` takes an interface created after the start; the clsact fallback (forced:
/// this kernel has tcx) counts the same and leaves no filter behind.
#[test]
fn all_takes_new_interfaces_and_clsact_counts_the_same() {
    require_root();
    let _g = serial();
    for mode in ["tcx", "clsact"] {
        let ebtop = Ebtop::start_with_env(
            &[
                "--json",
                "--only",
                "iface,iface_flow,flow_stats",
                "--delay",
                "250ms",
                "--iface",
                "all",
            ],
            &[("EBTOP_IFACE_ATTACH", mode)],
        );
        let net = Bridged::new(if mode == "tcx" { "n" } else { "c" });
        // An interval for the lookout to attach to the new ports.
        thread::sleep(Duration::from_millis(800));
        let dport = 42_000 + (std::process::id() % 10_000) as u16;
        assert_eq!(net.udp_a_to_b(100, 200, 0, dport), 100);
        thread::sleep(Duration::from_millis(600));
        let lines = ebtop.stop();
        let (p, _, l) = flow_sum(&lines, &net.ports[0], "ingress", "udp", dport);
        assert_eq!((p, l), (100, 100 * 200), "{mode}: the new port's flow");
        let stats = of_type(&lines, "flow_stats");
        assert_eq!(stats.last().unwrap()["iface"]["attach"], mode);
        if mode == "clsact" {
            for dir in ["ingress", "egress"] {
                let left = sh(&["tc", "filter", "show", "dev", &net.ports[0], dir]);
                assert!(
                    left.trim().is_empty(),
                    "a filter left on {}: {left}",
                    net.ports[0]
                );
            }
        }
    }
}

/// A name that is not an interface here ends the start with one line saying so.
#[test]
fn an_unknown_interface_is_a_one_line_error() {
    require_root();
    let out = Command::new(env!("CARGO_BIN_EXE_ebtop"))
        .args(["--json", "--iface", "nosuch0", "--duration", "5s"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    let lines: Vec<&str> = err.lines().filter(|l| !l.trim().is_empty()).collect();
    assert_eq!(lines.len(), 1, "{err}");
    assert!(
        lines[0].contains("nosuch0") && lines[0].contains("no such interface"),
        "{err}"
    );
}
