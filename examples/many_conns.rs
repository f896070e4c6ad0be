//! Many-flows scenario for the benchmark: a server and a client of our own holding N concurrent
//! TCP connections on loopback (over several listening ports, as one address pair has only 64K
//! ports), a slow trickle of requests on them, plus NEW new short connections per second.
//!
//!     cargo run --release --example many_conns -- 100000 1000 20
//!     (connections, new connections/s, seconds)
//!
//! A process may hold only as many fds as its hard RLIMIT_NOFILE (raising it needs
//! CAP_SYS_RESOURCE), so the connections are spread over worker processes (this program
//! re-run with `--worker`), each holding both ends of its share; the totals are summed.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

const PORTS: usize = 4;

fn main() -> anyhow::Result<()> {
    let mut a: Vec<String> = std::env::args().skip(1).collect();
    let worker = a.first().is_some_and(|s| s == "--worker");
    if worker {
        a.remove(0);
    }
    let n: usize = a.first().map_or(Ok(100_000), |s| s.parse())?;
    let new_per_s: u64 = a.get(1).map_or(Ok(1000), |s| s.parse())?;
    let secs: u64 = a.get(2).map_or(Ok(20), |s| s.parse())?;
    // The soft fd limit up to the hard one (raising the hard one needs CAP_SYS_RESOURCE).
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit/setrlimit with a valid struct.
    unsafe {
        libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim);
        lim.rlim_cur = lim.rlim_max;
        libc::setrlimit(libc::RLIMIT_NOFILE, &lim);
    }
    if worker {
        return hold(n, new_per_s, secs);
    }
    // Each connection costs two fds (client and accepted end), plus some slack per worker.
    let per_worker = ((lim.rlim_max as usize).saturating_sub(200) / 2).clamp(1, 60_000);
    let workers = n.div_ceil(per_worker).max(1);
    let exe = std::env::current_exe()?;
    let children: Vec<std::process::Child> = (0..workers)
        .map(|w| {
            let share = n / workers + usize::from(w < n % workers);
            let rate =
                new_per_s / workers as u64 + u64::from((w as u64) < new_per_s % workers as u64);
            std::process::Command::new(&exe)
                .args([
                    "--worker",
                    &share.to_string(),
                    &rate.to_string(),
                    &secs.to_string(),
                ])
                .stdout(std::process::Stdio::piped())
                .spawn()
        })
        .collect::<Result<_, _>>()?;
    let mut totals = [0u64; 3];
    for c in children {
        let out = c.wait_with_output()?;
        let text = String::from_utf8_lossy(&out.stdout);
        for (i, key) in ["held", "trickle_writes", "short_connections"]
            .iter()
            .enumerate()
        {
            totals[i] += field(&text, key);
        }
    }
    println!(
        "{{\"held\":{},\"trickle_writes\":{},\"short_connections\":{},\"workers\":{workers}}}",
        totals[0], totals[1], totals[2]
    );
    Ok(())
}

/// A number from a worker's one-line JSON.
fn field(json: &str, key: &str) -> u64 {
    json.split(&format!("\"{key}\":"))
        .nth(1)
        .and_then(|r| r.split(|c: char| !c.is_ascii_digit()).next())
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

/// One worker: holds `n` connections (both ends), trickles writes, opens short connections.
fn hold(n: usize, new_per_s: u64, secs: u64) -> anyhow::Result<()> {
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
            if new_per_s == 0 {
                return;
            }
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
