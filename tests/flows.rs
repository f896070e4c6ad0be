//! The flow table against real traffic: byte counts vs iperf3 and `ss -ti`, retransmits vs
//! `nstat` across a lossy link between two network namespaces, connect latency across a
//! delayed link, 10K short connections, UDP datagrams, and what is attached when only flow
//! lines are asked for. Needs root (loads BPF, creates network namespaces).

mod common;

use std::collections::HashMap;
use std::io::{Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream, UdpSocket};
use std::process::Command;
use std::sync::Mutex;
use std::thread;
use std::time::Duration;

use common::*;
use serde_json::Value;

/// The tests measure timing and load the machine: one at a time.
static SERIAL: Mutex<()> = Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

/// Waits until no TCP socket on `port` is open (TIME-WAIT aside: it is no flow), as `ss`
/// sees them; panics after `limit`.
fn wait_closed(port: u16, limit: Duration) {
    let t0 = std::time::Instant::now();
    let filter = format!("( sport = :{port} or dport = :{port} )");
    loop {
        let open = sh(&["ss", "-Htan", "exclude", "time-wait", &filter]);
        if open.trim().is_empty() {
            return;
        }
        assert!(
            t0.elapsed() < limit,
            "sockets on port {port} still open after {limit:?}:\n{open}"
        );
        thread::sleep(Duration::from_millis(100));
    }
}

fn port_of(v: &Value) -> u16 {
    v.as_str().unwrap().parse::<SocketAddr>().unwrap().port()
}

/// Two network namespaces joined by a link with impairments on the A → B direction (delay,
/// loss), removed on drop (also on panic).
///
/// The link is two TUN devices (one per namespace) and a forwarder in this process, not veth +
/// `tc netem`: this machine's kernel has no netem (CONFIG_NET_SCH_NETEM unset) and no fq for
/// EDT delays, so the impairment is done in user space, packet by packet, exactly as netem
/// would: A → B packets are dropped with probability `loss` or held for `delay`; B → A
/// packets pass at once.
struct NetPair {
    a: String,
    b: String,
    ip_a: String,
    ip_b: String,
}

#[repr(C)]
struct IfReq {
    name: [u8; 16],
    flags: i16,
    _pad: [u8; 22],
}

fn open_tun(name: &str) -> std::fs::File {
    use std::os::fd::AsRawFd;
    let f = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/net/tun")
        .expect("/dev/net/tun");
    let mut req = IfReq {
        name: [0; 16],
        flags: 0x0001 | 0x1000, // IFF_TUN | IFF_NO_PI
        _pad: [0; 22],
    };
    req.name[..name.len()].copy_from_slice(name.as_bytes());
    const TUNSETIFF: libc::c_ulong = 0x4004_54ca;
    // SAFETY: TUNSETIFF reads one struct ifreq from the valid pointer.
    let rc = unsafe { libc::ioctl(f.as_raw_fd(), TUNSETIFF, &mut req) };
    assert_eq!(
        rc,
        0,
        "TUNSETIFF {name}: {}",
        std::io::Error::last_os_error()
    );
    f
}

/// Copies packets from `from` to `to` until the device goes away.
fn forward(mut from: std::fs::File, to: std::fs::File, delay: Duration, loss_pct: u32) {
    let (tx, rx) = std::sync::mpsc::channel::<(std::time::Instant, Vec<u8>)>();
    thread::spawn(move || {
        let mut to = to;
        for (due, pkt) in rx {
            let now = std::time::Instant::now();
            if due > now {
                thread::sleep(due - now);
            }
            if to.write_all(&pkt).is_err() {
                return;
            }
        }
    });
    let mut rng: u64 = 0x9E37_79B9_7F4A_7C15 ^ std::process::id() as u64;
    let mut buf = vec![0u8; 65536];
    loop {
        let n = match from.read(&mut buf) {
            Ok(n) if n > 0 => n,
            _ => return,
        };
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        if (rng % 10_000) < loss_pct as u64 * 100 {
            continue;
        }
        if tx
            .send((std::time::Instant::now() + delay, buf[..n].to_vec()))
            .is_err()
        {
            return;
        }
    }
}

impl NetPair {
    fn new(tag: &str, delay: Duration, loss_pct: u32) -> NetPair {
        let id = std::process::id() % 100_000;
        let n = NetPair {
            a: format!("ebt{tag}a{id}"),
            b: format!("ebt{tag}b{id}"),
            ip_a: format!("10.{}.{}.1", 200 + tag.len(), id % 250),
            ip_b: format!("10.{}.{}.2", 200 + tag.len(), id % 250),
        };
        sh(&["ip", "netns", "add", &n.a]);
        sh(&["ip", "netns", "add", &n.b]);
        let (dev_a, dev_b) = (format!("t{tag}a{id}"), format!("t{tag}b{id}"));
        let da = dev_a.clone();
        let tun_a = NetPair::run_in(&n.a, move || open_tun(&da)).join().unwrap();
        let db = dev_b.clone();
        let tun_b = NetPair::run_in(&n.b, move || open_tun(&db)).join().unwrap();
        for (ns, dev, ip) in [(&n.a, &dev_a, &n.ip_a), (&n.b, &dev_b, &n.ip_b)] {
            sh(&[
                "ip",
                "-n",
                ns,
                "addr",
                "add",
                &format!("{ip}/24"),
                "dev",
                dev,
            ]);
            sh(&["ip", "-n", ns, "link", "set", dev, "up"]);
            sh(&["ip", "-n", ns, "link", "set", "lo", "up"]);
        }
        let (a_in, b_in) = (tun_a.try_clone().unwrap(), tun_b.try_clone().unwrap());
        thread::spawn(move || forward(a_in, tun_b, delay, loss_pct));
        thread::spawn(move || forward(b_in, tun_a, Duration::ZERO, 0));
        n
    }

    /// Runs `f` on a thread inside namespace `ns`.
    fn run_in<T: Send + 'static>(
        ns: &str,
        f: impl FnOnce() -> T + Send + 'static,
    ) -> thread::JoinHandle<T> {
        let path = format!("/var/run/netns/{ns}");
        thread::spawn(move || {
            let fd = std::fs::File::open(&path).expect("netns handle");
            use std::os::fd::AsRawFd;
            // SAFETY: setns on a valid namespace fd affects only this thread.
            let rc = unsafe { libc::setns(fd.as_raw_fd(), libc::CLONE_NEWNET) };
            assert_eq!(rc, 0, "setns {path}");
            f()
        })
    }

    fn nstat(&self, ns: &str, counter: &str) -> u64 {
        // -a absolute, -s do not touch the history file, -z print zeros.
        let out = sh(&["ip", "netns", "exec", ns, "nstat", "-asz", counter]);
        out.lines()
            .find(|l| l.starts_with(counter))
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| panic!("no {counter} in {out}"))
    }
}

impl Drop for NetPair {
    fn drop(&mut self) {
        // Deleting a namespace removes its TUN device; the forwarders then stop.
        for ns in [&self.a, &self.b] {
            let _ = Command::new("ip").args(["netns", "del", ns]).status();
        }
    }
}

/// `ss -tin` for sockets with this port: (local, peer) → (bytes_acked, bytes_received).
fn ss_bytes(port: u16) -> HashMap<(u16, u16), (u64, u64)> {
    let out = sh(&[
        "ss",
        "-tinH",
        "state",
        "established",
        &format!("( sport = :{port} or dport = :{port} )"),
    ]);
    let mut m = HashMap::new();
    let mut key = None;
    for line in out.lines() {
        let f: Vec<&str> = line.split_whitespace().collect();
        // Socket lines start in column 0, their TCP info lines are indented.
        if !line.starts_with(char::is_whitespace) && f.len() >= 4 {
            let p = |s: &str| s.rsplit(':').next().unwrap().parse::<u16>().unwrap();
            key = Some((p(f[2]), p(f[3])));
            continue;
        }
        if let Some(k) = key.take() {
            let get = |name: &str| -> u64 {
                f.iter()
                    .find_map(|t| t.strip_prefix(&format!("{name}:")))
                    .and_then(|v| v.parse().ok())
                    .unwrap_or(0)
            };
            m.insert(k, (get("bytes_acked"), get("bytes_received")));
        }
    }
    m
}

#[test]
fn tcp_bytes_match_iperf3_and_ss() {
    require_root();
    let _g = serial();
    assert!(
        Command::new("iperf3").arg("--version").output().is_ok(),
        "iperf3 is missing: run scripts/deps"
    );
    // A connection open before ebtop starts: found through its packets, owner via /proc.
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let lport = listener.local_addr().unwrap().port();
    let mut client = TcpStream::connect(("127.0.0.1", lport)).unwrap();
    let (mut server, _) = listener.accept().unwrap();
    let cport = client.local_addr().unwrap().port();

    let ebtop = Ebtop::start(&["--json", "--delay", "200ms"]);

    // 50 MiB one way, 300 KB back, then quiet for several intervals.
    let up = vec![7u8; 50 << 20];
    let down = vec![9u8; 300_000];
    let reader = thread::spawn(move || {
        let mut buf = vec![0u8; 50 << 20];
        server.read_exact(&mut buf).unwrap();
        server.write_all(&down).unwrap();
        server
    });
    client.write_all(&up).unwrap();
    let mut back = vec![0u8; 300_000];
    client.read_exact(&mut back).unwrap();
    let server = reader.join().unwrap();
    thread::sleep(Duration::from_millis(800));
    let ss = ss_bytes(lport);

    // iperf3: a fixed-size transfer on its own port.
    let port = 20_000 + (std::process::id() % 10_000) as u16;
    let mut srv = Command::new("iperf3")
        .args(["-s", "-1", "-p", &port.to_string()])
        .stdout(std::process::Stdio::null())
        .spawn()
        .unwrap();
    thread::sleep(Duration::from_millis(300));
    let out = Command::new("iperf3")
        .args([
            "-c",
            "127.0.0.1",
            "-p",
            &port.to_string(),
            "-n",
            "50M",
            "-J",
        ])
        .output()
        .unwrap();
    assert!(out.status.success(), "iperf3 client failed");
    let _ = srv.wait();
    let j: Value = serde_json::from_slice(&out.stdout).unwrap();
    let sent = u(&j["end"]["sum_sent"], "bytes");
    let received = u(&j["end"]["sum_received"], "bytes");
    assert_eq!(sent, 50 * 1024 * 1024);

    let lines = ebtop.stop();
    drop((client, server));

    // iperf3's data connection: the flow to/from `port` that moved the most.
    let ends = of_type(&lines, "flow_end");
    let data_client = ends
        .iter()
        .filter(|f| f["proto"] == "tcp" && port_of(&f["peer"]) == port)
        .max_by_key(|f| u(f, "bytes_out"))
        .expect("iperf3 client flow_end");
    let data_server = ends
        .iter()
        .filter(|f| f["proto"] == "tcp" && port_of(&f["local"]) == port)
        .max_by_key(|f| u(f, "bytes_in"))
        .expect("iperf3 server flow_end");
    eprintln!(
        "iperf3 sent {sent} received {received}; ebtop client bytes_sent {} bytes_out {} \
         retrans_bytes {}, server bytes_in {}",
        data_client["bytes_sent"],
        data_client["bytes_out"],
        data_client["retrans_bytes"],
        data_server["bytes_in"]
    );
    // iperf3 -n ends the test as soon as the client has *written* the bytes: its server then
    // closes the data socket with data still queued or in flight and the client gets a reset
    // (close_reason rst_received), so the application counts bracket the kernel's:
    // server read ≤ server kernel received ≤ client kernel transmitted ≤ client wrote.
    // (How much was in flight at the reset has no bound: the congestion window's worth.)
    // The data connection also carries iperf3's 37-byte session cookie, sent first.
    const COOKIE: u64 = 37;
    let transmitted = u(data_client, "bytes_sent") - u(data_client, "retrans_bytes") - COOKIE;
    let got = u(data_server, "bytes_in") - COOKIE;
    assert!(
        transmitted <= sent,
        "client transmitted {transmitted} vs iperf3 sent {sent}"
    );
    assert!(
        got >= received,
        "server bytes_in {got} vs iperf3 received {received}"
    );
    assert!(
        got <= transmitted,
        "server received {got} vs client transmitted {transmitted}"
    );
    if data_client["close_reason"] == "fin" {
        // A clean end: everything written was received.
        assert_eq!(got, sent);
        assert_eq!(u(data_client, "bytes_out") - COOKIE, sent);
    }
    assert_eq!(data_client["role"], "client");
    assert_eq!(data_server["role"], "server");
    assert!(data_client["close_reason"] == "fin" || data_client["close_reason"] == "rst_received");
    assert!(data_client["connect_latency_ns"].as_u64().unwrap() > 0);
    assert!(data_client["srtt_ns"]
        .as_u64()
        .is_some_and(|ns| ns % 1000 == 0));
    assert_eq!(data_client["comm"], "iperf3");
    assert_eq!(data_server["comm"], "iperf3");

    // The pre-existing pair: the last `flow` report of each side equals ss (raw counters:
    // ss's bytes_acked also counts the client's SYN).
    let flows = of_type(&lines, "flow");
    let last = |local: u16, peer: u16| -> &Value {
        flows
            .iter()
            .rev()
            .find(|f| {
                f["proto"] == "tcp" && port_of(&f["local"]) == local && port_of(&f["peer"]) == peer
            })
            .unwrap_or_else(|| panic!("no flow {local}->{peer}"))
    };
    let c = last(cport, lport);
    let s = last(lport, cport);
    eprintln!("ss {ss:?}\nclient {c}\nserver {s}");
    let (c_acked, c_recv) = ss[&(cport, lport)];
    let (s_acked, s_recv) = ss[&(lport, cport)];
    assert_eq!(u(c, "bytes_out"), 50 << 20);
    assert_eq!(u(c, "bytes_in"), 300_000);
    assert_eq!(u(s, "bytes_in"), 50 << 20);
    assert_eq!(u(s, "bytes_out"), 300_000);
    assert_eq!(
        u(c, "bytes_out") + 1,
        c_acked,
        "client vs ss bytes_acked (SYN)"
    );
    assert_eq!(u(c, "bytes_in"), c_recv);
    assert_eq!(u(s, "bytes_out"), s_acked);
    assert_eq!(u(s, "bytes_in"), s_recv);
    for f in [c, s] {
        assert_eq!(f["preexisting"], true, "{f}");
        // Its real start was not seen: no age, rather than the time since ebtop saw it.
        assert!(f["age_ns"].is_null(), "{f}");
        assert_eq!(f["pid"], std::process::id(), "{f}");
        assert_eq!(f["role_inferred"], true, "{f}");
    }
    assert_eq!(c["role"], "client");
    assert_eq!(s["role"], "server");

    let stats = of_type(&lines, "flow_stats");
    let st = stats.last().expect("flow_stats");
    assert_eq!(st["ends_lost"], 0, "{st}");
    assert_eq!(st["table_full"], 0, "{st}");
}

#[test]
fn retransmits_match_nstat_on_a_lossy_link() {
    require_root();
    let _g = serial();
    let net = NetPair::new("r", Duration::ZERO, 5);
    let ebtop = Ebtop::start(&["--json", "--delay", "250ms"]);
    let (ip_a, ip_b) = (net.ip_a.clone(), net.ip_b.clone());
    let bind_b = ip_b.clone();
    let (tx, rx) = std::sync::mpsc::channel();
    let srv = NetPair::run_in(&net.b, move || {
        let l = TcpListener::bind((bind_b.as_str(), 0)).unwrap();
        tx.send(l.local_addr().unwrap().port()).unwrap();
        let (mut s, _) = l.accept().unwrap();
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
    let port = rx.recv().unwrap();
    const LEN: usize = 8 << 20;
    let cli = NetPair::run_in(&net.a, move || {
        let mut s = TcpStream::connect((ip_b.as_str(), port)).unwrap();
        s.write_all(&vec![1u8; LEN]).unwrap();
        s.shutdown(Shutdown::Write).unwrap();
        let mut rest = Vec::new();
        s.read_to_end(&mut rest).unwrap();
    });
    cli.join().unwrap();
    assert_eq!(srv.join().unwrap(), LEN as u64);
    thread::sleep(Duration::from_millis(300));
    let nstat_a = net.nstat(&net.a, "TcpRetransSegs");
    let nstat_b = net.nstat(&net.b, "TcpRetransSegs");
    let lines = ebtop.stop();
    let ends = of_type(&lines, "flow_end");
    let in_ns = |ip: &str| -> Vec<&&Value> {
        ends.iter()
            .filter(|f| f["local"].as_str().unwrap().starts_with(&format!("{ip}:")))
            .collect()
    };
    let (fa, fb) = (in_ns(&ip_a), in_ns(&net.ip_b));
    assert_eq!(fa.len(), 1, "one client flow: {fa:?}");
    assert_eq!(fb.len(), 1, "one server flow: {fb:?}");
    let (c, s) = (fa[0], fb[0]);
    let retrans = u(c, "retrans_segs");
    eprintln!(
        "nstat A {nstat_a} B {nstat_b}; ebtop client retrans_segs {retrans} events {} server {}",
        c["retrans_events"], s["retrans_segs"]
    );
    assert!(retrans > 0, "5% loss must cause retransmits: {c}");
    assert_eq!(retrans, nstat_a, "client retrans vs nstat in its namespace");
    assert_eq!(u(s, "retrans_segs"), nstat_b);
    assert!(u(c, "retrans_events") > 0 && u(c, "retrans_events") <= retrans);
    assert_eq!(u(c, "bytes_out"), LEN as u64);
    assert_eq!(u(s, "bytes_in"), LEN as u64);
    // The interval lines add up to the total.
    let iv: u64 = of_type(&lines, "flow")
        .iter()
        .filter(|f| f["flow_id"] == c["flow_id"])
        .map(|f| u(f, "interval_retrans_segs"))
        .sum::<u64>()
        + u(c, "interval_retrans_segs");
    assert_eq!(iv, retrans);
}

#[test]
fn connect_latency_across_a_delayed_link() {
    require_root();
    let _g = serial();
    // 20 ms on A's egress: the SYN is delayed, the SYN/ACK is not, so SYN sent → established
    // is 20 ms plus a few µs of processing.
    let net = NetPair::new("d", Duration::from_millis(20), 0);
    let bind_b = net.ip_b.clone();
    let (tx, rx) = std::sync::mpsc::channel();
    let srv = NetPair::run_in(&net.b, move || {
        let l = TcpListener::bind((bind_b.as_str(), 0)).unwrap();
        tx.send(l.local_addr().unwrap().port()).unwrap();
        for _ in 0..11 {
            let (s, _) = l.accept().unwrap();
            drop(s);
        }
    });
    let port = rx.recv().unwrap();
    let ip_b = net.ip_b.clone();
    // One connection before ebtop starts: the first packets over a fresh link pay one-off
    // costs (forwarder threads waking up) that are not the link's delay.
    let warm = ip_b.clone();
    NetPair::run_in(&net.a, move || {
        let mut s = TcpStream::connect((warm.as_str(), port)).unwrap();
        let _ = s.read_to_end(&mut Vec::new());
    })
    .join()
    .unwrap();
    let ebtop = Ebtop::start(&["--json"]);
    // The client's own view of each connect(), by its local port: the link's real delay plus
    // whatever the forwarder and the scheduler added on a loaded machine.
    let measured: std::collections::HashMap<u16, u64> = NetPair::run_in(&net.a, move || {
        let mut m = std::collections::HashMap::new();
        for _ in 0..10 {
            let t = std::time::Instant::now();
            let mut s = TcpStream::connect((ip_b.as_str(), port)).unwrap();
            let took = t.elapsed().as_nanos() as u64;
            m.insert(s.local_addr().unwrap().port(), took);
            let mut v = Vec::new();
            let _ = s.read_to_end(&mut v);
        }
        m
    })
    .join()
    .unwrap();
    srv.join().unwrap();
    thread::sleep(Duration::from_millis(100));
    let lines = ebtop.stop();
    let lat: Vec<(u16, u64)> = of_type(&lines, "flow_end")
        .iter()
        .filter(|f| f["role"] == "client" && port_of(&f["peer"]) == port)
        .map(|f| (port_of(&f["local"]), u(f, "connect_latency_ns")))
        .collect();
    eprintln!("connect latencies (ns): ebtop {lat:?}, connect() {measured:?}");
    assert_eq!(lat.len(), 10);
    for (local, l) in &lat {
        // The same connection as the client saw it: never less than the link's delay (the SYN
        // waits 20 ms in netem), never more than the connect() call around it took. Both bounds
        // hold however busy the machine is.
        let m = measured
            .get(local)
            .unwrap_or_else(|| panic!("flow from port {local} is not one of the client's"));
        assert!(
            *l >= 20_000_000 && l <= m,
            "connect latency {l} ns vs connect() {m} ns (port {local})"
        );
    }
}

/// Which side closes first changes how each socket reaches CLOSE, never its payload count:
/// the side closing first goes FIN_WAIT2 → CLOSE when its own FIN is acknowledged (closed,
/// so handed to time-wait), with or without the peer's FIN; the other side goes LAST_ACK →
/// CLOSE; a side that only shut down its sending goes FIN_WAIT2 → CLOSE on the peer's FIN.
/// Each flow_end counts exactly the bytes each application wrote and read.
#[test]
fn flow_end_bytes_are_exact_whichever_side_closes_first() {
    flow_end_bytes_are_exact(&[]);
}

/// The kernel skips a program run that interrupts the same program on its CPU: a softirq that
/// closes a socket (the acknowledgement of an orphaned socket's FIN) while flow_set_state runs
/// in a syscall there. Such a flow still ends exactly, from its closed socket's counters, when
/// the socket is destroyed or read closed. The debug knob has every close go unseen.
#[test]
fn flow_end_bytes_are_exact_when_the_close_goes_unseen() {
    let stats = flow_end_bytes_are_exact(&[("EBTOP_DEBUG_SKIP_CLOSE", "1")]);
    let last = stats.last().expect("flow_stats lines");
    // 16 connections, two sockets each (other sockets on the host may add to it).
    assert!(u(last, "closes_recovered") >= 32, "{last}");
}

/// Runs the connections of the two tests above; returns ebtop's flow_stats lines.
fn flow_end_bytes_are_exact(env: &[(&str, &str)]) -> Vec<Value> {
    require_root();
    let _g = serial();
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let lport = listener.local_addr().unwrap().port();
    let ebtop = Ebtop::start_with_env(&["--json"], env);
    const ROUNDS: usize = 8;
    // Request and answer sizes differ per connection, so no count can stand in for another.
    let sizes = |i: usize| (1000 + 37 * i, 5000 + 101 * i);
    let srv = thread::spawn(move || {
        for i in 0..2 * ROUNDS {
            let (mut s, _) = listener.accept().unwrap();
            let (req, resp) = sizes(i);
            let mut buf = vec![0u8; req];
            s.read_exact(&mut buf).unwrap();
            if i % 2 == 1 {
                // The client shut down its sending: its FIN follows the request.
                assert_eq!(s.read(&mut [0u8; 1]).unwrap(), 0, "EOF after the request");
            }
            s.write_all(&vec![1u8; resp]).unwrap();
            // Closes first when i is even (the client is still open).
            drop(s);
        }
    });
    let mut ports = Vec::new();
    for i in 0..2 * ROUNDS {
        let (req, resp) = sizes(i);
        let mut c = TcpStream::connect(("127.0.0.1", lport)).unwrap();
        ports.push(c.local_addr().unwrap().port());
        c.write_all(&vec![2u8; req]).unwrap();
        if i % 2 == 1 {
            c.shutdown(Shutdown::Write).unwrap();
        }
        let mut got = Vec::new();
        c.read_to_end(&mut got).unwrap();
        assert_eq!(got.len(), resp);
        if i % 2 == 0 {
            // Past our delayed ACK of the server's FIN (at most 200 ms): the server's socket
            // is then gone into time-wait before our FIN is sent.
            thread::sleep(Duration::from_millis(250));
        }
        drop(c);
    }
    srv.join().unwrap();
    wait_closed(lport, Duration::from_secs(120));
    thread::sleep(Duration::from_millis(200));
    let lines = ebtop.stop();
    let ends = of_type(&lines, "flow_end");
    for (i, port) in ports.iter().enumerate() {
        let (req, resp) = sizes(i);
        let one = |local: u16, peer: u16| -> &Value {
            let found: Vec<&&Value> = ends
                .iter()
                .filter(|f| port_of(&f["local"]) == local && port_of(&f["peer"]) == peer)
                .collect();
            assert_eq!(found.len(), 1, "one flow_end {local} -> {peer}: {found:?}");
            found[0]
        };
        let client = one(*port, lport);
        let server = one(lport, *port);
        for (f, out, inb) in [(client, req, resp), (server, resp, req)] {
            assert_eq!(f["close_reason"], "fin", "{f}");
            assert_eq!(u(f, "bytes_out"), out as u64, "connection {i}: {f}");
            assert_eq!(u(f, "bytes_in"), inb as u64, "connection {i}: {f}");
        }
    }
    of_type(&lines, "flow_stats").into_iter().cloned().collect()
}

/// Flow ends do not wait for the session's loop: when it is busy (a report of 200,000 flows
/// to write takes it a second), a thread drains the flow-end ring as the kernel asks (a
/// wakeup once a quarter of it waits). Here the ring holds ~2,500 ends and the loop stops
/// 3 s at every interval's end; 6,000 ends come in batches of 1,000, 300 ms apart, so the
/// loop alone would lose thousands, and the ring holds two and a half batches.
#[test]
fn flow_ends_do_not_wait_for_a_busy_loop() {
    require_root();
    let _g = serial();
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let lport = listener.local_addr().unwrap().port();
    let ebtop = Ebtop::start_with_env(
        &["--json"],
        &[
            ("EBTOP_DEBUG_FLOW_ENDS_KIB", "512"),
            ("EBTOP_DEBUG_INTERVAL_STALL_MS", "3000"),
        ],
    );
    const N: usize = 3_000;
    const BATCH: usize = 500;
    let srv = thread::spawn(move || {
        (0..N)
            .map(|_| listener.accept().unwrap().0)
            .collect::<Vec<_>>()
    });
    let clients: Vec<TcpStream> = (0..N)
        .map(|_| TcpStream::connect(("127.0.0.1", lport)).unwrap())
        .collect();
    let servers = srv.join().unwrap();
    let ports: Vec<u16> = clients
        .iter()
        .map(|c| c.local_addr().unwrap().port())
        .collect();
    let mut pairs = clients.into_iter().zip(servers);
    for _ in 0..N / BATCH {
        for (c, s) in pairs.by_ref().take(BATCH) {
            drop(c);
            drop(s);
        }
        thread::sleep(Duration::from_millis(300));
    }
    // Every connection closed as `ss` sees it (on a loaded host a close can take longer than
    // the batches' pace), then two interval ends (each stalled) report what was drained.
    wait_closed(lport, Duration::from_secs(120));
    thread::sleep(Duration::from_secs(8));
    let lines = ebtop.stop();
    let stats = of_type(&lines, "flow_stats");
    let last = stats.last().expect("flow_stats lines");
    assert_eq!(u(last, "ends_lost"), 0, "{last}");
    let ends = of_type(&lines, "flow_end");
    for port in &ports {
        for (local, peer) in [(*port, lport), (lport, *port)] {
            let n = ends
                .iter()
                .filter(|f| port_of(&f["local"]) == local && port_of(&f["peer"]) == peer)
                .count();
            if n != 1 {
                // What was seen of that connection, for the reader of a failure.
                let of_port: Vec<&Value> = lines
                    .iter()
                    .filter(|v| v["type"] == "flow" || v["type"] == "flow_end")
                    .filter(|v| port_of(&v["local"]) == *port || port_of(&v["peer"]) == *port)
                    .collect();
                panic!(
                    "{n} flow ends {local} -> {peer} ({} flow_end lines in all); {last}; \
                     lines of port {port}: {of_port:#?}",
                    ends.len()
                );
            }
        }
    }
}

/// The flow ends held in memory between two intervals are bounded (16 MiB; here one 64 KiB
/// chunk, ~300 ends at the worst, ~1,300 as these are): past the bound the kernel's ring
/// keeps them (here 16 KiB, ~75 ends), and what it has no room for is counted (`ends_lost`),
/// never user-space memory grown. 2,000 connections that each sent a few bytes close at
/// once (4,000 ends) while the session's loop stops 2 s at every interval's end: every
/// connection's end is shown once with its exact bytes, or counted as lost.
#[test]
fn flow_ends_past_the_held_bound_wait_in_the_ring_or_are_counted_lost() {
    require_root();
    let _g = serial();
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let lport = listener.local_addr().unwrap().port();
    let ebtop = Ebtop::start_with_env(
        &["--json"],
        &[
            ("EBTOP_DEBUG_FLOW_ENDS_HELD_KIB", "64"),
            ("EBTOP_DEBUG_FLOW_ENDS_KIB", "16"),
            ("EBTOP_DEBUG_INTERVAL_STALL_MS", "2000"),
        ],
    );
    const N: usize = 2_000;
    let size = |i: usize| 1 + i % 97;
    let srv = thread::spawn(move || {
        (0..N)
            .map(|_| listener.accept().unwrap().0)
            .collect::<Vec<_>>()
    });
    let clients: Vec<TcpStream> = (0..N)
        .map(|i| {
            let mut c = TcpStream::connect(("127.0.0.1", lport)).unwrap();
            c.write_all(&vec![b'x'; size(i)]).unwrap();
            c
        })
        .collect();
    let mut servers = srv.join().unwrap();
    let ports: HashMap<u16, usize> = clients
        .iter()
        .enumerate()
        .map(|(i, c)| (c.local_addr().unwrap().port(), size(i)))
        .collect();
    // Each server side reads what its client sent (accepted in any order: by peer port).
    for s in &mut servers {
        let want = ports[&s.peer_addr().unwrap().port()];
        let mut got = vec![0u8; want];
        s.read_exact(&mut got).unwrap();
    }
    drop(clients);
    drop(servers);
    wait_closed(lport, Duration::from_secs(120));
    thread::sleep(Duration::from_secs(6));
    let lines = ebtop.stop();
    let last = of_type(&lines, "flow_stats")
        .last()
        .cloned()
        .cloned()
        .unwrap();
    let (lost, missed) = (u(&last, "ends_lost"), u(&last, "missed_events"));
    let mut seen = 0u64;
    let mut per_side: HashMap<(u16, u16), u32> = HashMap::new();
    for f in of_type(&lines, "flow_end") {
        let (local, peer) = (port_of(&f["local"]), port_of(&f["peer"]));
        let (port, client) = match (ports.get(&local), ports.get(&peer)) {
            (Some(_), _) if peer == lport => (local, true),
            (_, Some(_)) if local == lport => (peer, false),
            _ => continue,
        };
        let n = ports[&port] as u64;
        let (out, inb) = if client { (n, 0) } else { (0, n) };
        assert_eq!((u(f, "bytes_out"), u(f, "bytes_in")), (out, inb), "{f}");
        *per_side.entry((local, peer)).or_default() += 1;
        seen += 1;
    }
    assert!(per_side.values().all(|&n| n == 1), "an end shown twice");
    let missing = 2 * N as u64 - seen;
    eprintln!("{seen} ends shown, {lost} lost (counted), {missed} probe hits missed");
    assert!(
        missing <= lost + missed,
        "{missing} ends neither shown nor counted: {last}"
    );
}

#[test]
fn ten_thousand_short_connections_each_end_once() {
    require_root();
    let _g = serial();
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let lport = listener.local_addr().unwrap().port();
    let ebtop = Ebtop::start(&["--json"]);
    const N: usize = 10_000;
    let srv = thread::spawn(move || {
        for _ in 0..N {
            let (s, _) = listener.accept().unwrap();
            drop(s);
        }
    });
    let mut ports = Vec::with_capacity(N);
    for _ in 0..N {
        let mut s = TcpStream::connect(("127.0.0.1", lport)).unwrap();
        ports.push(s.local_addr().unwrap().port());
        let mut v = Vec::new();
        let _ = s.read_to_end(&mut v);
    }
    srv.join().unwrap();
    let lines = ebtop.stop();
    let ends = of_type(&lines, "flow_end");
    // A client port can be reused by a later connection: compare multisets of ports.
    let mut want: HashMap<u16, u32> = HashMap::new();
    for p in &ports {
        *want.entry(*p).or_default() += 1;
    }
    let mut client: HashMap<u16, u32> = HashMap::new();
    let mut server: HashMap<u16, u32> = HashMap::new();
    for f in &ends {
        if port_of(&f["peer"]) == lport {
            *client.entry(port_of(&f["local"])).or_default() += 1;
        } else if port_of(&f["local"]) == lport {
            *server.entry(port_of(&f["peer"])).or_default() += 1;
        }
    }
    let stats = of_type(&lines, "flow_stats");
    eprintln!("flow_stats: {}", stats.last().unwrap());
    for f in &ends {
        if port_of(&f["peer"]) != lport
            && port_of(&f["local"]) != lport
            && f["local"].as_str().unwrap().starts_with("127.")
        {
            eprintln!("unclassified flow_end: {f}");
        }
    }
    for (p, n) in &want {
        if server.get(p) != Some(n) {
            eprintln!("server port {p}: want {n} got {:?}", server.get(p));
        }
    }
    // The kernel skips a tp_btf program that would nest in itself on one CPU (a softirq
    // state change arriving while the program runs for a syscall): rare (about one in 50,000
    // state changes here), and counted in `missed_events`. Nothing may go missing uncounted,
    // and nothing may be reported twice.
    let missed = u(stats.last().unwrap(), "missed_events") as usize;
    let seen = (client.values().sum::<u32>() + server.values().sum::<u32>()) as usize;
    assert!(
        seen <= 2 * N && 2 * N - seen <= missed,
        "{} flow ends missing, {missed} counted as missed",
        2 * N - seen.min(2 * N)
    );
    assert!(missed <= 10, "missed probe hits stay rare: {missed}");
    for (side, got) in [("client", &client), ("server", &server)] {
        for (p, n) in got {
            assert!(
                want.get(p).is_some_and(|w| n <= w),
                "{side} port {p}: {n} ends for {:?} connections",
                want.get(p)
            );
        }
    }
    if missed == 0 {
        assert_eq!(client, want, "each client connection ends exactly once");
        assert_eq!(server, want, "each server connection ends exactly once");
    }
    let ids: std::collections::HashSet<u64> = ends.iter().map(|f| u(f, "flow_id")).collect();
    assert_eq!(ids.len(), ends.len(), "flow ids are unique");
    assert_eq!(stats.last().unwrap()["ends_lost"], 0);
}

#[test]
fn udp_datagrams_counted_exactly_both_ways() {
    require_root();
    let _g = serial();
    udp_datagrams_exact(&[]);
}

/// The same where the kernel's cgroup programs cannot keep the peer in task storage (before
/// Linux 6.13 or so): the hash by thread.
#[test]
fn udp_datagrams_counted_exactly_with_the_peer_hash() {
    require_root();
    let _g = serial();
    udp_datagrams_exact(&[("EBTOP_DEBUG_UDP_PEER_HASH", "1")]);
}

/// Datagrams both ways on unconnected sockets (peers from the cgroup hooks) and a connected
/// one; a failed send stashes a peer no later datagram may take.
fn udp_datagrams_exact(env: &[(&str, &str)]) {
    let a = UdpSocket::bind("127.0.0.1:0").unwrap();
    let b = UdpSocket::bind("127.0.0.1:0").unwrap();
    let (pa, pb) = (a.local_addr().unwrap(), b.local_addr().unwrap());
    // A connected socket too: its peer comes from the socket, not the call.
    let c = UdpSocket::bind("127.0.0.1:0").unwrap();
    c.connect(pb).unwrap();
    let pc = c.local_addr().unwrap();
    // Unconnected at first: its failed sends (broadcast without SO_BROADCAST: refused after
    // the cgroup hook saw the address) leave the thread a stashed peer that its later
    // connected sends must not take.
    let d = UdpSocket::bind("127.0.0.1:0").unwrap();
    let pd = d.local_addr().unwrap();
    let ebtop = Ebtop::start_with_env(&["--json", "--delay", "200ms"], env);
    let (mut a_out, mut b_out, mut c_out) = (0u64, 0u64, 0u64);
    let mut buf = [0u8; 2048];
    d.connect(pb).unwrap();
    for _ in 0..20 {
        let refused = d.send_to(b"x", "255.255.255.255:9");
        assert!(
            refused.is_err(),
            "a broadcast without SO_BROADCAST was sent"
        );
        d.send(b"yy").unwrap();
        let (_, from) = b.recv_from(&mut buf).unwrap();
        assert_eq!(from, pd);
    }
    for i in 0..1000usize {
        let n = 1 + i % 1400;
        a.send_to(&vec![1u8; n], pb).unwrap();
        a_out += n as u64;
        let (k, from) = b.recv_from(&mut buf).unwrap();
        assert_eq!((k, from), (n, pa));
        if i % 2 == 0 {
            b.send_to(&buf[..k / 2 + 1], pa).unwrap();
            b_out += (k / 2 + 1) as u64;
            a.recv_from(&mut buf).unwrap();
        }
    }
    for i in 0..100usize {
        c.send(&vec![2u8; 10 + i]).unwrap();
        c_out += (10 + i) as u64;
        let (_, from) = b.recv_from(&mut buf).unwrap();
        assert_eq!(from, pc);
    }
    thread::sleep(Duration::from_millis(600));
    let lines = ebtop.stop();
    let flows: Vec<&Value> = of_type(&lines, "flow")
        .into_iter()
        .filter(|f| f["proto"] == "udp")
        .collect();
    let last = |local: SocketAddr, peer: SocketAddr| -> &Value {
        flows
            .iter()
            .rev()
            .find(|f| f["local"] == local.to_string() && f["peer"] == peer.to_string())
            .unwrap_or_else(|| panic!("no udp flow {local} -> {peer}: {flows:#?}"))
    };
    let ab = last(pa, pb);
    assert_eq!(
        (u(ab, "dgrams_out"), u(ab, "bytes_out")),
        (1000, a_out),
        "{ab}"
    );
    assert_eq!(
        (u(ab, "dgrams_in"), u(ab, "bytes_in")),
        (500, b_out),
        "{ab}"
    );
    let ba = last(pb, pa);
    assert_eq!(
        (u(ba, "dgrams_in"), u(ba, "bytes_in")),
        (1000, a_out),
        "{ba}"
    );
    assert_eq!(
        (u(ba, "dgrams_out"), u(ba, "bytes_out")),
        (500, b_out),
        "{ba}"
    );
    let cb = last(pc, pb);
    assert_eq!(
        (u(cb, "dgrams_out"), u(cb, "bytes_out")),
        (100, c_out),
        "{cb}"
    );
    let bc = last(pb, pc);
    assert_eq!(u(bc, "dgrams_in"), 100, "{bc}");
    let db = last(pd, pb);
    assert_eq!((u(db, "dgrams_out"), u(db, "bytes_out")), (20, 40), "{db}");
    let strays: Vec<_> = flows
        .iter()
        .filter(|f| f["local"] == pd.to_string() && f["peer"] != pb.to_string())
        .collect();
    assert!(
        strays.is_empty(),
        "datagrams under a failed send's peer: {strays:#?}"
    );
    assert_eq!(ab["pid"], std::process::id());
    // Interval counts add up to the totals.
    let sum: u64 = flows
        .iter()
        .filter(|f| f["flow_id"] == ab["flow_id"])
        .map(|f| u(f, "interval_dgrams_out"))
        .sum();
    assert_eq!(sum, 1000);
}

/// What the output asks for decides what is attached: flow lines alone attach the flow table
/// only (no capture program runs: the kernel writes no record; no process events, no TLS
/// probe), and its counts are as exact as ever — TCP bytes both ways, UDP datagrams, owners
/// named from their data by the flow table's own programs.
#[test]
fn flow_lines_alone_attach_only_the_flow_table() {
    require_root();
    let _g = serial();
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let lport = listener.local_addr().unwrap().port();
    let ebtop = Ebtop::start(&["--json", "--only", "flow,flow_end,flow_stats"]);
    let meta = ebtop.collected[0].clone();
    // The packet drop counter comes with the flow table.
    assert_eq!(
        meta["loaded"],
        serde_json::json!(["flow_table", "packet_drops"]),
        "{meta}"
    );
    // An HTTP exchange: the capture would recognise it, were it attached.
    let srv = thread::spawn(move || {
        let (mut s, _) = listener.accept().unwrap();
        let mut req = vec![0u8; 3000];
        s.read_exact(&mut req).unwrap();
        s.write_all(&[b'x'; 1500]).unwrap();
        s.shutdown(Shutdown::Write).unwrap();
        let _ = s.read_to_end(&mut Vec::new());
    });
    let mut c = TcpStream::connect(("127.0.0.1", lport)).unwrap();
    let cport = c.local_addr().unwrap().port();
    let mut req = b"GET / HTTP/1.1\r\nHost: x\r\n\r\n".to_vec();
    req.resize(3000, b'a');
    c.write_all(&req).unwrap();
    let mut got = Vec::new();
    c.read_to_end(&mut got).unwrap();
    assert_eq!(got.len(), 1500);
    drop(c);
    srv.join().unwrap();
    let a = UdpSocket::bind("127.0.0.1:0").unwrap();
    let b = UdpSocket::bind("127.0.0.1:0").unwrap();
    let pb = b.local_addr().unwrap();
    let mut buf = [0u8; 256];
    for i in 0..50usize {
        a.send_to(&[7u8; 100][..10 + i], pb).unwrap();
        b.recv_from(&mut buf).unwrap();
    }
    thread::sleep(Duration::from_millis(1200));
    let lines = ebtop.stop();

    let types: std::collections::BTreeSet<&str> =
        lines.iter().map(|v| v["type"].as_str().unwrap()).collect();
    assert!(
        types.is_subset(
            &["meta", "flow", "flow_end", "flow_stats", "lost", "summary"]
                .into_iter()
                .collect()
        ),
        "{types:?}"
    );
    let summary = lines.last().unwrap();
    assert_eq!(
        summary["kernel"]["events"], 0,
        "no capture record: {summary}"
    );
    let ends = of_type(&lines, "flow_end");
    let client = ends
        .iter()
        .find(|f| port_of(&f["local"]) == cport && port_of(&f["peer"]) == lport)
        .unwrap_or_else(|| panic!("the client's flow_end: {ends:#?}"));
    assert_eq!(
        (u(client, "bytes_out"), u(client, "bytes_in")),
        (3000, 1500)
    );
    assert_eq!(client["pid"], std::process::id(), "{client}");
    assert!(client.get("l7").is_none(), "no call, no l7: {client}");
    let server = ends
        .iter()
        .find(|f| port_of(&f["local"]) == lport && port_of(&f["peer"]) == cport)
        .unwrap_or_else(|| panic!("the server's flow_end: {ends:#?}"));
    assert_eq!(
        (u(server, "bytes_out"), u(server, "bytes_in")),
        (1500, 3000)
    );
    assert_eq!(server["pid"], std::process::id(), "{server}");
    let udp = of_type(&lines, "flow")
        .into_iter()
        .rev()
        .find(|f| f["proto"] == "udp" && f["peer"] == pb.to_string())
        .unwrap_or_else(|| panic!("the UDP flow: {lines:#?}"));
    let want: u64 = (0..50).map(|i| 10 + i).sum();
    assert_eq!((u(udp, "dgrams_out"), u(udp, "bytes_out")), (50, want));
}

/// `--proto dns` alone places no TLS probe (no other process pays a breakpoint for it);
/// `--tls on` still asks for DNS over TLS.
#[test]
fn dns_alone_places_no_tls_probe_unless_asked() {
    require_root();
    let _g = serial();
    for (args, tls) in [
        (&["--json", "--proto", "dns"][..], false),
        (&["--json", "--proto", "dns", "--tls", "on"][..], true),
        (&["--json", "--proto", "dns,http"][..], true),
    ] {
        let ebtop = Ebtop::start(args);
        let meta = ebtop.collected[0].clone();
        let loaded = meta["loaded"].as_array().unwrap().clone();
        drop(ebtop.stop());
        assert!(loaded.contains(&"capture".into()), "{args:?}: {meta}");
        assert_eq!(
            loaded.contains(&"tls_probes".into()),
            tls,
            "{args:?}: {meta}"
        );
    }
}

/// A server of its own process: listens on a port it prints, then takes commands on stdin
/// (`accept N`, `send I`, `close`), answering each with a line once done.
const HOLDING_SERVER: &str = r#"
import socket, sys
srv = socket.socket()
srv.bind(("127.0.0.1", 0))
srv.listen(64)
print(srv.getsockname()[1], flush=True)
conns = []
for line in sys.stdin:
    cmd = line.split()
    if cmd[0] == "accept":
        conns += [srv.accept()[0] for _ in range(int(cmd[1]))]
    elif cmd[0] == "send":
        conns[int(cmd[1])].sendall(b"x" * 100)
    elif cmd[0] == "close":
        for c in conns:
            c.close()
        conns = []
    print("ok", flush=True)
"#;

struct HoldingServer {
    peer: Peer,
    out: std::io::BufReader<std::process::ChildStdout>,
    port: u16,
}

impl HoldingServer {
    fn start() -> HoldingServer {
        let mut child = Command::new("python3")
            .args(["-c", HOLDING_SERVER])
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .spawn()
            .expect("python3 runs");
        let mut out = std::io::BufReader::new(child.stdout.take().unwrap());
        let mut line = String::new();
        std::io::BufRead::read_line(&mut out, &mut line).unwrap();
        let port = line.trim().parse().expect("the server's port");
        HoldingServer {
            peer: Peer(child),
            out,
            port,
        }
    }

    fn pid(&self) -> u32 {
        self.peer.0.id()
    }

    fn command(&mut self, cmd: &str) {
        let stdin = self.peer.0.stdin.as_mut().unwrap();
        writeln!(stdin, "{cmd}").unwrap();
        stdin.flush().unwrap();
        let mut line = String::new();
        std::io::BufRead::read_line(&mut self.out, &mut line).unwrap();
        assert_eq!(line.trim(), "ok", "{cmd}");
    }
}

/// Owners of flows no hook names: a connection open before ebtop started whose client never
/// makes a syscall on it (found through its packets), and a server's accepted connections
/// that never move data themselves. Run with the kernel's owner iterator (the default) and
/// with the /proc walk (`EBTOP_FLOW_OWNERS=procfs`).
fn flows_no_hook_names_get_their_owners(env: &[(&str, &str)]) {
    require_root();
    let _g = serial();
    let mut server = HoldingServer::start();
    let lport = server.port;
    let pre = TcpStream::connect(("127.0.0.1", lport)).unwrap();
    server.command("accept 1");
    let pre_port = pre.local_addr().unwrap().port();
    let mut ebtop = Ebtop::start_with_env(&["--json", "--only", "flow,flow_end"], env);
    for _ in 0..3 {
        server.command("send 0");
        thread::sleep(Duration::from_millis(300));
    }
    let idle: Vec<TcpStream> = (0..10)
        .map(|_| TcpStream::connect(("127.0.0.1", lport)).unwrap())
        .collect();
    server.command("accept 10");
    let idle_ports: Vec<u16> = idle
        .iter()
        .map(|c| c.local_addr().unwrap().port())
        .collect();
    // A few intervals: the walks are at least 0.5 s apart.
    let pid = std::process::id();
    let pre_named = ebtop.wait_for(Duration::from_secs(10), |v| {
        v["type"] == "flow" && port_of(&v["local"]) == pre_port && v["pid"] == pid
    });
    thread::sleep(Duration::from_millis(2500));
    // A byte to each server socket, which it never reads: its flow is reported again (its
    // counters moved), named by then, and no syscall of the server named it.
    for mut c in &idle {
        c.write_all(b"x").unwrap();
    }
    thread::sleep(Duration::from_millis(1500));
    server.command("close");
    drop(idle);
    drop(pre);
    thread::sleep(Duration::from_millis(1500));
    let lines = ebtop.stop();

    let pre_named =
        pre_named.unwrap_or_else(|| panic!("the pre-existing client flow named: {lines:#?}"));
    assert_eq!(pre_named["preexisting"], true, "{pre_named}");
    assert!(pre_named["sock_id"].as_u64().is_some(), "{pre_named}");
    let server_pid = server.pid();
    for port in idle_ports {
        let of_flow: Vec<&Value> = lines
            .iter()
            .filter(|v| {
                (v["type"] == "flow" || v["type"] == "flow_end")
                    && port_of(&v["local"]) == lport
                    && port_of(&v["peer"]) == port
            })
            .collect();
        assert!(
            of_flow.iter().any(|v| v["type"] == "flow_end"),
            "the idle server flow from port {port} ended: {of_flow:#?}"
        );
        let named = of_flow
            .iter()
            .find(|v| v["type"] == "flow" && u(v, "bytes_in") == 1)
            .unwrap_or_else(|| panic!("server flow from port {port} with its byte: {of_flow:#?}"));
        assert_eq!(named["pid"], server_pid, "named before its close: {named}");
        assert_eq!(named["comm"], "python3", "{named}");
        assert!(named["sock_id"].as_u64().is_some(), "{named}");
        assert!(
            of_flow
                .iter()
                .all(|v| v["pid"].is_null() || v["pid"] == server_pid),
            "one owner: {of_flow:#?}"
        );
    }
}

#[test]
fn flows_no_hook_names_get_owners_from_the_kernel_iterator() {
    flows_no_hook_names_get_their_owners(&[]);
}

#[test]
fn flows_no_hook_names_get_owners_from_proc_without_the_iterator() {
    flows_no_hook_names_get_their_owners(&[("EBTOP_FLOW_OWNERS", "procfs")]);
}

/// Reading a hash map whole: every entry once, however the kernel cuts the batches (it
/// returns a short batch whenever the next bucket does not fit in the rest of one).
#[test]
fn a_hash_map_is_read_whole_in_batches() {
    require_root();
    use libbpf_rs::{MapCore, MapFlags, MapHandle, MapType};
    const N: u64 = 50_000;
    let opts = libbpf_rs::libbpf_sys::bpf_map_create_opts {
        sz: std::mem::size_of::<libbpf_rs::libbpf_sys::bpf_map_create_opts>() as _,
        ..Default::default()
    };
    let map = MapHandle::create(MapType::Hash, Some("readwhole"), 8, 16, 2 * N as u32, &opts)
        .expect("a BPF hash map");
    for k in 0..N {
        let v = [k.to_ne_bytes(), (!k).to_ne_bytes()].concat();
        map.update(&k.to_ne_bytes(), &v, MapFlags::ANY).unwrap();
    }
    for batch in [1, 7, 512, 4096, 100_000] {
        let (mut keys, mut values) = (Vec::new(), Vec::new());
        let mut batches = ebtop::bpf::HashMapBatches::new(&map, batch);
        while let Some((k, v)) = batches.next_batch() {
            keys.extend_from_slice(k);
            values.extend_from_slice(v);
        }
        assert_eq!(keys.len(), 8 * N as usize, "batch {batch}");
        let mut seen = vec![false; N as usize];
        for (k, v) in keys.chunks_exact(8).zip(values.chunks_exact(16)) {
            let k = u64::from_ne_bytes(k.try_into().unwrap());
            assert_eq!(
                v,
                [k.to_ne_bytes(), (!k).to_ne_bytes()].concat(),
                "its own value"
            );
            assert!(!std::mem::replace(&mut seen[k as usize], true), "{k} once");
        }
    }
}

/// Raises this process's open-file limit to at least `want`, within the hard limit.
fn allow_open_files(want: u64) {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit/setrlimit with a valid struct.
    unsafe {
        assert_eq!(libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim), 0);
        assert!(
            lim.rlim_max >= want,
            "this test needs {want} open files; the hard limit is {}",
            lim.rlim_max
        );
        if lim.rlim_cur < want {
            lim.rlim_cur = want;
            assert_eq!(
                libc::setrlimit(libc::RLIMIT_NOFILE, &lim),
                0,
                "RLIMIT_NOFILE"
            );
        }
    }
}

/// With more flows than one batch of the table's read and sockets reused by new connections
/// between polls, a flow keeps the id of its first line to its end, and the bytes its lines
/// report per interval add up to its totals: nothing counted twice.
#[test]
fn a_flow_keeps_its_id_and_its_interval_bytes_add_up() {
    a_flow_keeps_its_id_and_its_interval_bytes_add_up_with(&[]);
}

/// The same when more flows change in an interval than the ring of changed flows holds (a
/// ring of 64 KiB, ~300 flows): those polls read the whole table instead.
#[test]
fn a_flow_keeps_its_id_and_its_interval_bytes_add_up_past_the_ring_of_changes() {
    a_flow_keeps_its_id_and_its_interval_bytes_add_up_with(&[("EBTOP_DEBUG_FLOW_READS_KIB", "64")]);
}

fn a_flow_keeps_its_id_and_its_interval_bytes_add_up_with(env: &[(&str, &str)]) {
    require_root();
    let _g = serial();
    const HELD: usize = 5000;
    allow_open_files(2 * HELD as u64 + 2000);
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let lport = listener.local_addr().unwrap().port();
    let marker_listener = TcpListener::bind("127.0.0.1:0").unwrap();
    // A table of 16,384 buckets, over half full: the table's read comes in several
    // batches, some cut short where the next bucket holds more entries than fit.
    let mut ebtop = Ebtop::start_with_env(
        &[
            "--json",
            "--only",
            "flow,flow_end,flow_stats",
            "--max-flows",
            "16384",
        ],
        env,
    );
    const SHORT_PER_ROUND: usize = 300;
    const ROUNDS: usize = 4;
    let (accepted_tx, accepted_rx) = std::sync::mpsc::channel();
    let srv = thread::spawn(move || {
        // Held connections are kept; the short ones closed at once.
        let mut held = Vec::new();
        for _ in 0..HELD {
            held.push(listener.accept().unwrap().0);
        }
        accepted_tx.send(()).unwrap();
        for _ in 0..ROUNDS * SHORT_PER_ROUND {
            drop(listener.accept().unwrap());
        }
        held
    });
    let mut clients: Vec<TcpStream> = (0..HELD)
        .map(|_| TcpStream::connect(("127.0.0.1", lport)).unwrap())
        .collect();
    accepted_rx.recv().unwrap();
    for round in 0..ROUNDS {
        for (i, c) in clients.iter_mut().enumerate() {
            if i % 2 == round % 2 {
                c.write_all(&[b'x'; 10]).unwrap();
            }
        }
        for _ in 0..SHORT_PER_ROUND {
            drop(TcpStream::connect(("127.0.0.1", lport)).unwrap());
        }
        thread::sleep(Duration::from_millis(700));
    }
    let held = srv.join().unwrap();
    // A connection made after the last writes: ebtop's lines up to its first `flow` line
    // (read meanwhile) are at most as recent as the writes; two intervals after it (counted in
    // `flow_stats` lines, not seconds), well before the next snapshot of every flow, each held
    // connection's latest `flow` line has its 20 bytes, whether the changes came through the
    // ring or, past it, the whole table.
    let marker_port = marker_listener.local_addr().unwrap().port();
    let _marker = TcpStream::connect(("127.0.0.1", marker_port)).unwrap();
    ebtop
        .wait_for(Duration::from_secs(30), |v| {
            v["type"] == "flow" && port_of(&v["peer"]) == marker_port
        })
        .expect("the marker connection's flow");
    for _ in 0..2 {
        ebtop
            .wait_for(Duration::from_secs(30), |v| v["type"] == "flow_stats")
            .expect("an interval");
    }
    let mut latest_out: HashMap<u16, u64> = HashMap::new();
    for v in &ebtop.collected {
        if v["type"] == "flow" && v["proto"] == "tcp" && port_of(&v["peer"]) == lport {
            latest_out.insert(port_of(&v["local"]), u(v, "bytes_out"));
        }
    }
    let behind: Vec<(u16, Option<&u64>)> = clients
        .iter()
        .map(|c| c.local_addr().unwrap().port())
        .map(|p| (p, latest_out.get(&p)))
        .filter(|(_, out)| *out != Some(&20))
        .collect();
    // A probe the kernel skipped (its recursion guard, counted in `missed_events`) can leave
    // a flow unread until the next snapshot of every flow.
    let missed_so_far = ebtop
        .collected
        .iter()
        .rev()
        .find(|v| v["type"] == "flow_stats")
        .map_or(0, |v| u(v, "missed_events") as usize);
    assert!(
        behind.len() <= missed_so_far,
        "{} of {HELD} held flows not reported with their 20 bytes ({missed_so_far} probe runs \
         missed), e.g. {:?}",
        behind.len(),
        &behind[..behind.len().min(5)]
    );
    drop(clients);
    drop(held);
    thread::sleep(Duration::from_millis(1500));
    let lines = ebtop.stop();

    let mut by_flow: HashMap<(String, String, u64), Vec<&Value>> = HashMap::new();
    for v in &lines {
        if (v["type"] == "flow" || v["type"] == "flow_end")
            && v["proto"] == "tcp"
            && (port_of(&v["local"]) == lport || port_of(&v["peer"]) == lport)
        {
            let key = (
                v["local"].as_str().unwrap().to_string(),
                v["peer"].as_str().unwrap().to_string(),
                u(v, "start_mono_ns"),
            );
            by_flow.entry(key).or_default().push(v);
        }
    }
    let mut ended_with_bytes = 0;
    for (key, seen) in &by_flow {
        let id = u(seen[0], "flow_id");
        assert!(
            seen.iter().all(|v| u(v, "flow_id") == id),
            "one id for {key:?}: {seen:#?}"
        );
        let Some(end) = seen.iter().find(|v| v["type"] == "flow_end") else {
            continue;
        };
        let sum = |k: &str| seen.iter().map(|v| u(v, k)).sum::<u64>();
        assert_eq!(
            (sum("interval_bytes_out"), sum("interval_bytes_in")),
            (u(end, "bytes_out"), u(end, "bytes_in")),
            "interval bytes add up for {key:?}: {seen:#?}"
        );
        if u(end, "bytes_out") + u(end, "bytes_in") > 0 {
            ended_with_bytes += 1;
        }
    }
    // Every held connection moved 20 bytes, counted on both sides (a few may be missed by
    // the kernel's recursion guard, counted; see ten_thousand_short_connections_each_end_once).
    let stats = of_type(&lines, "flow_stats");
    let missed = u(stats.last().unwrap(), "missed_events") as usize;
    assert!(
        ended_with_bytes + missed >= 2 * HELD,
        "{ended_with_bytes} held flows ended with bytes, {missed} missed"
    );
}

/// Most snapshots read only the flows touched lately (the others' counters cannot have
/// moved); an idle connection that moves again is reported with its new counters in the
/// interval of the move or the next, never only at the next snapshot of every flow (every
/// 8th). Counted in intervals (`flow_stats` lines), not seconds: five moves two intervals
/// apart fall at different places between two full snapshots.
#[test]
fn an_idle_flow_that_moves_again_is_reported_at_once() {
    require_root();
    let _g = serial();
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let lport = listener.local_addr().unwrap().port();
    let mut ebtop = Ebtop::start(&["--json", "--only", "flow,flow_end,flow_stats"]);
    let mut client = TcpStream::connect(("127.0.0.1", lport)).unwrap();
    let (server, _) = listener.accept().unwrap();
    let cport = client.local_addr().unwrap().port();
    // Idle for a few intervals: read once, then no longer touched.
    for _ in 0..3 {
        ebtop
            .wait_for(Duration::from_secs(10), |v| v["type"] == "flow_stats")
            .expect("an interval");
    }
    for i in 1..=5u64 {
        ebtop
            .wait_for(Duration::from_secs(10), |v| v["type"] == "flow_stats")
            .expect("an interval");
        let written = unix_now_ns();
        client.write_all(&[b'x'; 100]).unwrap();
        // Intervals that ended after the write (their `ts`: lines still queued from before
        // it do not count).
        let intervals = std::cell::Cell::new(0u32);
        let line = ebtop.wait_for(Duration::from_secs(30), |v| {
            if v["type"] == "flow_stats" && ts_unix_ns(&v["ts"]) > written {
                intervals.set(intervals.get() + 1);
            }
            v["type"] == "flow"
                && port_of(&v["local"]) == cport
                && v["bytes_out"].as_u64() == Some(100 * i)
        });
        assert!(line.is_some(), "move {i} reported");
        // In the first interval ending after the move or the next (a full snapshot would come
        // up to 7 intervals later): at most one such interval's report before the line.
        assert!(
            intervals.get() <= 1,
            "move {i} reported after {} intervals",
            intervals.get()
        );
    }
    drop(client);
    drop(server);
    ebtop.stop();
}

/// Now, in ns since the Unix epoch.
fn unix_now_ns() -> i128 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos() as i128
}

/// A line's `ts` (`YYYY-MM-DDTHH:MM:SS.fffffffffZ`, UTC) in ns since the Unix epoch.
fn ts_unix_ns(ts: &Value) -> i128 {
    let t = ts.as_str().unwrap_or_else(|| panic!("ts {ts}"));
    let num = |a: usize, b: usize| -> i128 { t[a..b].parse().unwrap_or_else(|_| panic!("ts {t}")) };
    let (y, m, d) = (num(0, 4), num(5, 7), num(8, 10));
    // Days from 1970-01-01 to y-m-d (proleptic Gregorian; March-based years).
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    let secs = days * 86_400 + num(11, 13) * 3600 + num(14, 16) * 60 + num(17, 19);
    let frac = &t[20..t.len() - 1];
    let nanos: i128 = format!("{frac:0<9}")[..9].parse().unwrap();
    secs * 1_000_000_000 + nanos
}
