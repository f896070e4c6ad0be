//! Packet drops against ground truth: a network namespace joined to the host by a veth pair,
//! loss made by a tcx program that counts what it drops (this kernel has no netem), UDP to a
//! closed port in the namespace and on loopback. Needs root (loads BPF, creates a namespace).

mod common;

use std::io::{Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream, UdpSocket};
use std::process::Command;
use std::sync::Mutex;
use std::thread;
use std::time::Duration;

use common::*;
use ebtop::bpf::drop_injector::DropInjector;
use serde_json::Value;

/// The tests load the machine and read namespace-wide counters: one at a time.
static SERIAL: Mutex<()> = Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

/// A network namespace joined to this one by a veth pair (`host_dev` here, with `host_ip`;
/// `ns_ip` inside), removed on drop (also on panic).
struct Veth {
    ns: String,
    host_dev: String,
    host_ip: String,
    ns_ip: String,
}

impl Veth {
    fn new(tag: &str) -> Veth {
        let id = std::process::id() % 100_000;
        let v = Veth {
            ns: format!("ebtd{tag}{id}"),
            host_dev: format!("vd{tag}h{id}"),
            host_ip: format!("10.{}.{}.1", 230 + tag.len(), id % 250),
            ns_ip: format!("10.{}.{}.2", 230 + tag.len(), id % 250),
        };
        let ns_dev = format!("vd{tag}n{id}");
        sh(&["ip", "netns", "add", &v.ns]);
        sh(&[
            "ip",
            "link",
            "add",
            &v.host_dev,
            "type",
            "veth",
            "peer",
            "name",
            &ns_dev,
            "netns",
            &v.ns,
        ]);
        sh(&[
            "ip",
            "addr",
            "add",
            &format!("{}/24", v.host_ip),
            "dev",
            &v.host_dev,
        ]);
        sh(&["ip", "link", "set", &v.host_dev, "up"]);
        sh(&[
            "ip",
            "-n",
            &v.ns,
            "addr",
            "add",
            &format!("{}/24", v.ns_ip),
            "dev",
            &ns_dev,
        ]);
        sh(&["ip", "-n", &v.ns, "link", "set", &ns_dev, "up"]);
        sh(&["ip", "-n", &v.ns, "link", "set", "lo", "up"]);
        v
    }

    fn host_ifindex(&self) -> u32 {
        std::fs::read_to_string(format!("/sys/class/net/{}/ifindex", self.host_dev))
            .unwrap()
            .trim()
            .parse()
            .unwrap()
    }

    /// The namespace's inode (what `drop` lines call `netns`).
    fn netns_inode(&self) -> u64 {
        use std::os::unix::fs::MetadataExt;
        std::fs::metadata(format!("/var/run/netns/{}", self.ns))
            .unwrap()
            .ino()
    }

    /// Runs `f` on a thread inside the namespace (setns affects only the calling thread).
    fn run_in<T: Send + 'static>(
        &self,
        f: impl FnOnce() -> T + Send + 'static,
    ) -> thread::JoinHandle<T> {
        let path = format!("/var/run/netns/{}", self.ns);
        thread::spawn(move || {
            let fd = std::fs::File::open(&path).expect("netns handle");
            use std::os::fd::AsRawFd;
            // SAFETY: setns on a valid namespace fd affects only this thread.
            let rc = unsafe { libc::setns(fd.as_raw_fd(), libc::CLONE_NEWNET) };
            assert_eq!(rc, 0, "setns {path}");
            f()
        })
    }

    /// A permanent neighbour entry for `ns_ip`: nothing sent there waits for ARP.
    fn static_neighbour(&self) {
        let id = std::process::id() % 100_000;
        let tag = &self.host_dev[2..self.host_dev.len() - format!("h{id}").len()];
        let ns_dev = format!("vd{tag}n{id}");
        let link = sh(&["ip", "-n", &self.ns, "-br", "link", "show", "dev", &ns_dev]);
        let mac = link
            .split_whitespace()
            .nth(2)
            .expect("the namespace end's MAC");
        sh(&[
            "ip",
            "neigh",
            "replace",
            &self.ns_ip,
            "lladdr",
            mac,
            "dev",
            &self.host_dev,
            "nud",
            "permanent",
        ]);
    }

    fn nstat(&self, counter: &str) -> u64 {
        // -a absolute, -s do not touch the history file, -z print zeros.
        let out = sh(&["ip", "netns", "exec", &self.ns, "nstat", "-asz", counter]);
        out.lines()
            .find(|l| l.starts_with(counter))
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| panic!("no {counter} in {out}"))
    }
}

impl Drop for Veth {
    fn drop(&mut self) {
        // Deleting the namespace deletes its end of the pair, and with it this one.
        let _ = Command::new("ip").args(["netns", "del", &self.ns]).status();
        let _ = Command::new("ip")
            .args(["link", "del", &self.host_dev])
            .stderr(std::process::Stdio::null())
            .status();
    }
}

/// The `drop` lines' packets for (reason, where): the last line's total, and the sum of the
/// lines' interval counts (they must agree).
fn drop_packets(lines: &[Value], reason: &str, at: impl Fn(&Value) -> bool) -> (u64, u64) {
    let matching: Vec<&Value> = of_type(lines, "drop")
        .into_iter()
        .filter(|d| d["reason"] == reason && at(d))
        .collect();
    let total = matching.last().map_or(0, |d| u(d, "packets"));
    let sum = matching.iter().map(|d| u(d, "interval_packets")).sum();
    (total, sum)
}

fn reason_count(f: &Value, reason: &str) -> u64 {
    f["drops"]["by_reason"][reason].as_u64().unwrap_or(0)
}

/// A TCP transfer from the namespace to the host that loses every 8th data segment at the
/// host's veth: the kernel frees each with reason TC_INGRESS, and ebtop's counts equal what
/// the drop program dropped (in segments: veth passes GSO packets whole), on the interface's
/// `drop` lines and on both flows (`in` on the receiver, `out` on the sender); the sender's
/// retransmitted segments equal the namespace's TcpRetransSegs and cover every drop.
#[test]
fn tcp_drops_per_reason_equal_what_the_drop_program_dropped() {
    require_root();
    let _g = serial();
    let net = Veth::new("t");
    let listener = TcpListener::bind((net.host_ip.as_str(), 0)).unwrap();
    let port = listener.local_addr().unwrap().port();
    let injector = DropInjector::attach(net.host_ifindex(), 6, port, 8).expect("tcx drop program");
    let ebtop = Ebtop::start(&[
        "--json",
        "--only",
        "flow,flow_end,flow_stats,drop",
        "--delay",
        "250ms",
    ]);
    let srv = thread::spawn(move || {
        let (mut s, _) = listener.accept().unwrap();
        let mut n = 0u64;
        let mut buf = vec![0u8; 65536];
        loop {
            match s.read(&mut buf).unwrap() {
                0 => break,
                k => n += k as u64,
            }
        }
        n
    });
    const LEN: usize = 16 << 20;
    let host_ip = net.host_ip.clone();
    let retrans_before = net.nstat("TcpRetransSegs");
    let cli = net.run_in(move || {
        let mut s = TcpStream::connect((host_ip.as_str(), port)).unwrap();
        s.write_all(&vec![1u8; LEN]).unwrap();
        s.shutdown(Shutdown::Write).unwrap();
        let mut rest = Vec::new();
        s.read_to_end(&mut rest).unwrap();
    });
    cli.join().unwrap();
    assert_eq!(srv.join().unwrap(), LEN as u64);
    let injected = injector.counts();
    let retrans = net.nstat("TcpRetransSegs") - retrans_before;
    let lines = ebtop.stop();
    drop(injector);
    eprintln!("injected {injected:?}, TcpRetransSegs {retrans}");
    assert!(
        injected.skbs > 0,
        "the drop program dropped nothing: {injected:?}"
    );

    let ifindex = net.host_ifindex();
    let (total, sum) = drop_packets(&lines, "TC_INGRESS", |d| d["ifindex"] == ifindex);
    assert_eq!(total, injected.segments, "TC_INGRESS total at the veth");
    assert_eq!(sum, total, "interval counts add up to the total");
    let at_veth: Vec<&Value> = of_type(&lines, "drop")
        .into_iter()
        .filter(|d| d["ifindex"] == ifindex)
        .collect();
    assert!(
        at_veth.iter().all(|d| d["iface"] == net.host_dev.as_str()),
        "{at_veth:?}"
    );
    // (Other reasons may show there too: a spurious retransmission's copy is dropped by the
    // receiver as TCP_OLD_DATA.)

    let ends = of_type(&lines, "flow_end");
    let end_at = |local: &str| -> &Value {
        let found: Vec<&&Value> = ends.iter().filter(|f| f["local"] == local).collect();
        assert_eq!(found.len(), 1, "one flow_end at {local}: {found:?}");
        found[0]
    };
    let server = end_at(&format!("{}:{port}", net.host_ip));
    let client_local = server["peer"].as_str().unwrap();
    let client = end_at(client_local);
    // The receiver's in, the sender's out; by reason, the drop program's exactly.
    assert_eq!(
        reason_count(server, "TC_INGRESS"),
        injected.segments,
        "{server}"
    );
    assert_eq!(
        reason_count(client, "TC_INGRESS"),
        injected.segments,
        "{client}"
    );
    assert!(u(&server["drops"], "in") >= injected.segments, "{server}");
    assert!(u(&client["drops"], "out") >= injected.segments, "{client}");
    for f in [server, client] {
        let by_reason: u64 = f["drops"]["by_reason"]
            .as_object()
            .unwrap()
            .values()
            .map(|n| n.as_u64().unwrap())
            .sum();
        assert_eq!(
            by_reason,
            u(&f["drops"], "in") + u(&f["drops"], "out"),
            "{f}"
        );
    }
    // Every interval's share adds up to the total.
    let client_id = &client["flow_id"];
    let iv: u64 = of_type(&lines, "flow")
        .iter()
        .filter(|f| &f["flow_id"] == client_id)
        .map(|f| u(&f["drops"], "interval_out"))
        .sum::<u64>()
        + u(&client["drops"], "interval_out");
    assert_eq!(iv, u(&client["drops"], "out"));
    // The drop lines name the flows they hit.
    let hit: Vec<u64> = at_veth
        .iter()
        .filter(|d| d["reason"] == "TC_INGRESS")
        .flat_map(|d| d["flows"].as_array().unwrap().iter())
        .filter(|h| &h["flow_id"] == client_id)
        .map(|h| u(h, "packets"))
        .collect();
    assert_eq!(hit.iter().sum::<u64>(), injected.segments, "{at_veth:?}");
    // Retransmits in segments: the namespace's own counter, and each drop resent.
    assert_eq!(u(client, "retrans_segs"), retrans, "{client}");
    assert!(retrans >= injected.segments, "{retrans} < {injected:?}");
    let stats = of_type(&lines, "flow_stats");
    let last = stats.last().expect("flow_stats");
    assert_eq!(last["drops"]["reason_names"], true, "{last}");
}

/// UDP to a port nothing listens on: the receiving kernel drops each datagram with reason
/// NO_SOCKET, in the namespace (its `drop` line names the namespace, not an interface here)
/// and on loopback (counted too); the sender's UDP flow has them as `out`.
#[test]
fn udp_to_a_closed_port_is_dropped_with_no_socket() {
    require_root();
    let _g = serial();
    let net = Veth::new("u");
    // A port nothing listens on in the namespace or on loopback here: one bound a moment ago.
    let closed = {
        let s = UdpSocket::bind("127.0.0.1:0").unwrap();
        s.local_addr().unwrap().port()
    };
    let ebtop = Ebtop::start(&[
        "--json",
        "--only",
        "flow,flow_end,flow_stats,drop",
        "--delay",
        "250ms",
    ]);
    const N: usize = 20;
    let to_ns = UdpSocket::bind((net.host_ip.as_str(), 0)).unwrap();
    let to_lo = UdpSocket::bind("127.0.0.1:0").unwrap();
    // The namespace's address resolved beforehand (a datagram waiting for ARP could be
    // dropped for another reason).
    net.static_neighbour();
    for _ in 0..N {
        to_ns
            .send_to(b"dropped", (net.ns_ip.as_str(), closed))
            .unwrap();
        to_lo.send_to(b"dropped", ("127.0.0.1", closed)).unwrap();
    }
    let netns = net.netns_inode();
    // Both drops are counted once the interval that saw them is written.
    let mut ebtop = ebtop;
    ebtop.wait_for(Duration::from_secs(10), |v| {
        v["type"] == "drop"
            && v["netns"] == netns
            && v["reason"] == "NO_SOCKET"
            && u(v, "packets") >= N as u64
    });
    let lines = ebtop.stop();
    let (total, sum) = drop_packets(&lines, "NO_SOCKET", |d| d["netns"] == netns);
    assert_eq!(total, N as u64, "NO_SOCKET in the namespace");
    assert_eq!(sum, total);
    assert!(of_type(&lines, "drop")
        .iter()
        .filter(|d| d["netns"] == netns)
        .all(|d| d["iface"].is_null()));
    let (lo_total, _) = drop_packets(&lines, "NO_SOCKET", |d| d["iface"] == "lo");
    assert!(
        lo_total >= N as u64,
        "loopback's NO_SOCKET drops are counted: {lo_total}"
    );
    let stats = of_type(&lines, "flow_stats");
    if stats.last().is_some_and(|s| s["udp_peer_hooks"] == true) {
        for (sock, peer) in [
            (&to_ns, format!("{}:{closed}", net.ns_ip)),
            (&to_lo, format!("127.0.0.1:{closed}")),
        ] {
            let local = sock.local_addr().unwrap().to_string();
            let last = of_type(&lines, "flow")
                .into_iter()
                .rev()
                .find(|f| {
                    f["proto"] == "udp"
                        && f["local"] == local.as_str()
                        && f["peer"] == peer.as_str()
                })
                .unwrap_or_else(|| panic!("a udp flow {local} → {peer}"));
            assert_eq!(u(&last["drops"], "out"), N as u64, "{last}");
            assert_eq!(reason_count(last, "NO_SOCKET"), N as u64, "{last}");
        }
    }
}
