//! Many-flows scenario for the benchmark: a server and a client of our own holding N concurrent
//! TCP connections on loopback (over several listening ports, as one address pair has only 64K
//! ports), a slow trickle of requests on them, plus NEW new short connections per second.
//!
//!     cargo run --release --example many_conns -- 100000 1000 20
//!     (connections, new connections/s, seconds)

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

const PORTS: usize = 4;

fn main() -> anyhow::Result<()> {
    let a: Vec<String> = std::env::args().skip(1).collect();
    let n: usize = a.first().map_or(Ok(100_000), |s| s.parse())?;
    let new_per_s: u64 = a.get(1).map_or(Ok(1000), |s| s.parse())?;
    let secs: u64 = a.get(2).map_or(Ok(20), |s| s.parse())?;
    // SAFETY: setrlimit with a valid struct; raising our own fd limit as far as allowed.
    unsafe {
        let lim = libc::rlimit {
            rlim_cur: (2 * n + 10_000) as u64,
            rlim_max: (2 * n + 10_000) as u64,
        };
        libc::setrlimit(libc::RLIMIT_NOFILE, &lim);
    }
    let listeners: Vec<TcpListener> = (0..PORTS)
        .map(|_| TcpListener::bind("127.0.0.1:0"))
        .collect::<Result<_, _>>()?;
    let addrs: Vec<_> = listeners.iter().map(|l| l.local_addr().unwrap()).collect();
    let stop = AtomicBool::new(false);
    let (held, trickled, short) = (AtomicU64::new(0), AtomicU64::new(0), AtomicU64::new(0));
    // Servers keep every accepted connection.
    let mut accepted: Vec<std::sync::Mutex<Vec<TcpStream>>> = Vec::new();
    accepted.resize_with(PORTS, Default::default);
    let start = Instant::now();
    std::thread::scope(|s| -> anyhow::Result<()> {
        for (l, store) in listeners.iter().zip(&accepted) {
            let stop = &stop;
            s.spawn(move || {
                l.set_nonblocking(true).unwrap();
                while !stop.load(Ordering::Relaxed) {
                    match l.accept() {
                        Ok((c, _)) => store.lock().unwrap().push(c),
                        Err(_) => std::thread::sleep(Duration::from_millis(1)),
                    }
                }
            });
        }
        let mut clients = Vec::with_capacity(n);
        for i in 0..n {
            match TcpStream::connect(addrs[i % PORTS]) {
                Ok(c) => clients.push(c),
                Err(e) => {
                    eprintln!("many_conns: stopped at {i} connections: {e}");
                    break;
                }
            }
        }
        held.store(clients.len() as u64, Ordering::Relaxed);
        eprintln!("many_conns: holding {} connections", clients.len());
        let (start, short) = (&start, &short);
        // New short connections at a fixed rate.
        s.spawn(move || {
            let mut k = 0u64;
            while start.elapsed() < Duration::from_secs(secs) {
                let due = *start + Duration::from_secs_f64(k as f64 / new_per_s as f64);
                if let Some(w) = due.checked_duration_since(Instant::now()) {
                    std::thread::sleep(w);
                }
                if TcpStream::connect(addrs[k as usize % PORTS]).is_ok() {
                    short.fetch_add(1, Ordering::Relaxed);
                }
                k += 1;
            }
        });
        // Trickle: one small write on a different held connection every millisecond.
        let mut i = 0;
        while start.elapsed() < Duration::from_secs(secs) {
            if !clients.is_empty() {
                let k = i % clients.len();
                let _ = clients[k].write_all(b"x");
                i += 1;
                trickled.fetch_add(1, Ordering::Relaxed);
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        stop.store(true, Ordering::Relaxed);
        let mut sink = [0u8; 64];
        for store in &accepted {
            for c in store.lock().unwrap().iter_mut() {
                c.set_nonblocking(true).ok();
                let _ = c.read(&mut sink);
            }
        }
        Ok(())
    })?;
    println!(
        "{{\"held\":{},\"trickle_writes\":{},\"short_connections\":{}}}",
        held.load(Ordering::Relaxed),
        trickled.load(Ordering::Relaxed),
        short.load(Ordering::Relaxed)
    );
    Ok(())
}
