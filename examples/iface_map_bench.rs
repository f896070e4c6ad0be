//! The interface flow counter's map designs under a UDP flood through a veth (run by hand, as
//! root; bench/iface_maps.py runs it and keeps the result):
//!
//!     cargo run --release --example iface_map_bench -- [SECONDS_PER_WINDOW] [CYCLES] [SENDERS]
//!
//! A network namespace joined to this one by a veth pair; SENDERS threads in it send 64-byte
//! datagrams as fast as they go from one address and port (SO_REUSEPORT: one 5-tuple from
//! several CPUs, the burst a shared counter suffers most from) to a receiver here. Each cycle
//! runs one window per design, in a rotating order: none, per-CPU hash (ebtop's: design 0),
//! one shared hash with atomic adds (1), a ring record per packet read by a thread here (2).
//! The datagrams received per second in each window, paired with the cycle's window without a
//! program, make the ratios; then one window per design with the kernel's BPF statistics on
//! gives the program's ns per run. Prints one JSON object.

use std::mem::MaybeUninit;
use std::net::UdpSocket;
use std::os::fd::{AsFd, AsRawFd, FromRawFd};
use std::process::Command;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use libbpf_rs::skel::{OpenSkel, SkelBuilder};

use ebtop::bpf::ifaceflows::{IfaceflowsSkel, IfaceflowsSkelBuilder};

const NS: &str = "ebtmapbench";
const HOST_DEV: &str = "vmbh";
const NS_DEV: &str = "vmbn";
const HOST_IP: &str = "10.251.7.1";
const NS_IP: &str = "10.251.7.2";
const DESIGNS: [&str; 4] = ["none", "percpu_hash", "shared_hash", "ring"];

fn sh(args: &[&str]) -> Result<()> {
    let st = Command::new(args[0]).args(&args[1..]).status()?;
    if !st.success() {
        bail!("{args:?} failed");
    }
    Ok(())
}

fn setup() -> Result<()> {
    let _ = Command::new("ip").args(["netns", "del", NS]).status();
    sh(&["ip", "netns", "add", NS])?;
    sh(&[
        "ip", "link", "add", HOST_DEV, "type", "veth", "peer", "name", NS_DEV, "netns", NS,
    ])?;
    sh(&[
        "ip",
        "addr",
        "add",
        &format!("{HOST_IP}/24"),
        "dev",
        HOST_DEV,
    ])?;
    sh(&["ip", "link", "set", HOST_DEV, "up"])?;
    sh(&[
        "ip",
        "-n",
        NS,
        "addr",
        "add",
        &format!("{NS_IP}/24"),
        "dev",
        NS_DEV,
    ])?;
    sh(&["ip", "-n", NS, "link", "set", NS_DEV, "up"])?;
    Ok(())
}

fn teardown() {
    let _ = Command::new("ip").args(["netns", "del", NS]).status();
}

/// A program of one design attached to the host end's ingress, and its ring's reader.
struct Attached {
    _link: libbpf_rs::Link,
    skel: &'static IfaceflowsSkel<'static>,
    stop: &'static AtomicBool,
    reader: Option<std::thread::JoinHandle<u64>>,
}

fn attach(design: u8, ifindex: u32) -> Result<Attached> {
    let storage = Box::leak(Box::new(MaybeUninit::uninit()));
    let mut open = IfaceflowsSkelBuilder::default().open(storage)?;
    open.maps
        .rodata_data
        .as_deref_mut()
        .context("rodata")?
        .map_design = design;
    if design != 2 {
        open.maps.iface_ring.set_max_entries(4096)?;
    } else {
        open.maps.iface_ring.set_max_entries(16 << 20)?;
    }
    let skel: &'static IfaceflowsSkel<'static> = Box::leak(Box::new(open.load()?));
    let link = ebtop::bpf::attach_tcx(&skel.progs.iface_ingress_eth, ifindex)?;
    let stop: &'static AtomicBool = Box::leak(Box::new(AtomicBool::new(false)));
    let reader = (design == 2).then(|| {
        std::thread::spawn(move || {
            let seen = std::rc::Rc::new(std::cell::Cell::new(0u64));
            let s = seen.clone();
            let mut b = libbpf_rs::RingBufferBuilder::new();
            b.add(&skel.maps.iface_ring, move |_d: &[u8]| {
                s.set(s.get() + 1);
                0
            })
            .unwrap();
            let ring = b.build().unwrap();
            while !stop.load(Ordering::Relaxed) {
                let _ = ring.poll(Duration::from_millis(100));
            }
            let _ = ring.consume();
            seen.get()
        })
    });
    Ok(Attached {
        _link: link,
        skel,
        stop,
        reader,
    })
}

impl Attached {
    fn finish(self) -> u64 {
        self.stop.store(true, Ordering::Relaxed);
        self.reader.map_or(0, |r| r.join().unwrap_or(0))
    }
}

/// One window of flood: datagrams received per second.
fn flood(secs: f64, senders: usize, port: u16, rx: &UdpSocket) -> Result<f64> {
    let stop = AtomicBool::new(false);
    let got = AtomicU64::new(0);
    let start = Instant::now();
    std::thread::scope(|s| -> Result<()> {
        s.spawn(|| {
            let mut buf = [0u8; 2048];
            while !stop.load(Ordering::Relaxed) {
                if rx.recv(&mut buf).is_ok() {
                    got.fetch_add(1, Ordering::Relaxed);
                }
            }
        });
        let mut handles = Vec::new();
        for _ in 0..senders {
            handles.push(s.spawn(|| -> Result<()> {
                let ns = std::fs::File::open(format!("/var/run/netns/{NS}"))?;
                // SAFETY: setns with a valid namespace fd changes only this thread.
                if unsafe { libc::setns(ns.as_raw_fd(), libc::CLONE_NEWNET) } != 0 {
                    bail!("setns: {}", std::io::Error::last_os_error());
                }
                let tx = reuseport_socket(NS_IP, 40_000)?;
                let to: std::net::SocketAddr = format!("{HOST_IP}:{port}").parse()?;
                let payload = [0x5au8; 64];
                while start.elapsed().as_secs_f64() < secs {
                    for _ in 0..256 {
                        let _ = tx.send_to(&payload, to);
                    }
                }
                Ok(())
            }));
        }
        for h in handles {
            h.join().expect("sender")?;
        }
        stop.store(true, Ordering::Relaxed);
        Ok(())
    })?;
    Ok(got.load(Ordering::Relaxed) as f64 / start.elapsed().as_secs_f64())
}

/// A UDP socket bound to ip:port with SO_REUSEPORT (several senders, one 5-tuple).
fn reuseport_socket(ip: &str, port: u16) -> Result<UdpSocket> {
    // SAFETY: plain socket calls on a descriptor this function owns until it is wrapped.
    unsafe {
        let fd = libc::socket(libc::AF_INET, libc::SOCK_DGRAM, 0);
        if fd < 0 {
            bail!("socket: {}", std::io::Error::last_os_error());
        }
        let one: libc::c_int = 1;
        libc::setsockopt(
            fd,
            libc::SOL_SOCKET,
            libc::SO_REUSEPORT,
            (&one as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as u32,
        );
        let sock = UdpSocket::from_raw_fd(fd);
        let addr: std::net::Ipv4Addr = ip.parse()?;
        let sa = libc::sockaddr_in {
            sin_family: libc::AF_INET as u16,
            sin_port: port.to_be(),
            sin_addr: libc::in_addr {
                s_addr: u32::from(addr).to_be(),
            },
            sin_zero: [0; 8],
        };
        if libc::bind(
            sock.as_raw_fd(),
            (&sa as *const libc::sockaddr_in).cast(),
            std::mem::size_of::<libc::sockaddr_in>() as u32,
        ) != 0
        {
            bail!("bind: {}", std::io::Error::last_os_error());
        }
        Ok(sock)
    }
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    if v.is_empty() {
        return f64::NAN;
    }
    let m = v.len() / 2;
    if v.len() % 2 == 1 {
        v[m]
    } else {
        (v[m - 1] + v[m]) / 2.0
    }
}

fn main() -> Result<()> {
    let a: Vec<String> = std::env::args().skip(1).collect();
    let secs: f64 = a.first().map_or(Ok(3.0), |s| s.parse())?;
    let cycles: usize = a.get(1).map_or(Ok(5), |s| s.parse())?;
    let senders: usize = a.get(2).map_or(Ok(2), |s| s.parse())?;
    setup()?;
    let result = run(secs, cycles, senders);
    teardown();
    let out = result?;
    println!("{}", serde_json::to_string_pretty(&out)?);
    Ok(())
}

fn run(secs: f64, cycles: usize, senders: usize) -> Result<serde_json::Value> {
    let ifindex: u32 = std::fs::read_to_string(format!("/sys/class/net/{HOST_DEV}/ifindex"))?
        .trim()
        .parse()?;
    let rx = UdpSocket::bind((HOST_IP, 0))?;
    rx.set_read_timeout(Some(Duration::from_millis(100)))?;
    let port = rx.local_addr()?.port();
    let mut rates: Vec<Vec<f64>> = vec![Vec::new(); DESIGNS.len()];
    let mut ratios: Vec<Vec<f64>> = vec![Vec::new(); DESIGNS.len()];
    let mut ring_records = 0u64;
    for c in 0..cycles {
        let mut cycle = [0f64; 4];
        for k in 0..DESIGNS.len() {
            let d = (k + c) % DESIGNS.len();
            let attached = match d {
                0 => None,
                _ => Some(attach((d - 1) as u8, ifindex)?),
            };
            cycle[d] = flood(secs, senders, port, &rx)?;
            if let Some(a) = attached {
                ring_records += a.finish();
            }
        }
        for d in 0..DESIGNS.len() {
            rates[d].push(cycle[d]);
            ratios[d].push(cycle[d] / cycle[0]);
        }
        eprintln!("cycle {c}: {cycle:?}");
    }
    // ns per run of each design's program: statistics on for one window each.
    let mut ns_per_run = vec![serde_json::Value::Null];
    for d in 1..DESIGNS.len() {
        let a = attach((d - 1) as u8, ifindex)?;
        // SAFETY: BPF_ENABLE_STATS returns a descriptor that keeps statistics on while open.
        let stats_fd = unsafe {
            libbpf_rs::libbpf_sys::bpf_enable_stats(libbpf_rs::libbpf_sys::BPF_STATS_RUN_TIME)
        };
        if stats_fd < 0 {
            bail!("BPF_ENABLE_STATS failed");
        }
        // SAFETY: a descriptor just returned to this function, owned here.
        let stats = unsafe { std::os::fd::OwnedFd::from_raw_fd(stats_fd) };
        flood(secs, senders, port, &rx)?;
        let (_, cnt, ns) =
            ebtop::aggregate::overhead::read_prog_counters(a.skel.progs.iface_ingress_eth.as_fd())?;
        drop(stats);
        ring_records += a.finish();
        ns_per_run.push(serde_json::json!(if cnt > 0 {
            ns as f64 / cnt as f64
        } else {
            f64::NAN
        }));
    }
    let designs: Vec<serde_json::Value> = (0..DESIGNS.len())
        .map(|d| {
            serde_json::json!({
                "design": DESIGNS[d],
                "datagrams_per_s_median": median(rates[d].clone()),
                "ratio_to_none_median": median(ratios[d].clone()),
                "ratios": ratios[d],
                "bpf_ns_per_packet": ns_per_run[d],
            })
        })
        .collect();
    Ok(serde_json::json!({
        "window_s": secs,
        "cycles": cycles,
        "senders": senders,
        "payload_bytes": 64,
        "ring_records_read": ring_records,
        "designs": designs,
    }))
}
