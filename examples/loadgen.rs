//! Fixed-rate HTTP/1.1 load generator for the benchmark (bench/run): open loop, latency measured
//! from each request's *scheduled* send time, so a slow server cannot hide its queueing
//! (no coordinated omission). Prints one JSON object.
//!
//!     cargo run --release --example loadgen -- 127.0.0.1:8080 / 20000 10 16
//!     (address, path, requests/s, seconds, connections)

use std::io::{Read, Write};
use std::net::TcpStream;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use hdrhistogram::Histogram;

/// Reads one response with a Content-Length body (what the benchmark's nginx sends).
fn read_response(s: &mut TcpStream, buf: &mut Vec<u8>) -> Result<()> {
    loop {
        if let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            let head = std::str::from_utf8(&buf[..end]).context("response head")?;
            let len: usize = head
                .lines()
                .find_map(|l| {
                    let (k, v) = l.split_once(':')?;
                    k.eq_ignore_ascii_case("content-length")
                        .then(|| v.trim().parse().ok())?
                })
                .unwrap_or(0);
            let total = end + 4 + len;
            while buf.len() < total {
                let mut tmp = [0u8; 16384];
                let n = s.read(&mut tmp)?;
                anyhow::ensure!(n > 0, "connection closed");
                buf.extend_from_slice(&tmp[..n]);
            }
            buf.drain(..total);
            return Ok(());
        }
        let mut tmp = [0u8; 16384];
        let n = s.read(&mut tmp)?;
        anyhow::ensure!(n > 0, "connection closed");
        buf.extend_from_slice(&tmp[..n]);
    }
}

fn main() -> Result<()> {
    let a: Vec<String> = std::env::args().skip(1).collect();
    anyhow::ensure!(a.len() == 5, "usage: loadgen ADDR PATH RATE SECONDS CONNS");
    let (addr, path) = (a[0].clone(), a[1].clone());
    let rate: f64 = a[2].parse()?;
    let secs: f64 = a[3].parse()?;
    let conns: usize = a[4].parse()?;
    let hist = Mutex::new(Histogram::<u64>::new_with_bounds(1_000, 60_000_000_000, 3)?);
    let errors = Mutex::new(0u64);
    let start = Instant::now() + Duration::from_millis(50);
    let per_conn = rate / conns as f64;
    let n_per_conn = (per_conn * secs) as u64;
    std::thread::scope(|sc| {
        for _ in 0..conns {
            let (addr, path, hist, errors) = (&addr, &path, &hist, &errors);
            sc.spawn(move || {
                let Ok(mut s) = TcpStream::connect(addr.as_str()) else {
                    *errors.lock().unwrap() += n_per_conn;
                    return;
                };
                s.set_nodelay(true).ok();
                let req = format!("GET {path} HTTP/1.1\r\nHost: bench\r\n\r\n");
                let mut buf = Vec::new();
                let mut local =
                    Histogram::<u64>::new_with_bounds(1_000, 60_000_000_000, 3).unwrap();
                let interval = Duration::from_secs_f64(1.0 / per_conn);
                // Spread the connections' schedules over one interval.
                let offset = interval.mul_f64(rand_fraction());
                for k in 0..n_per_conn {
                    let due = start + offset + interval.mul_f64(k as f64);
                    let now = Instant::now();
                    if due > now {
                        std::thread::sleep(due - now);
                    }
                    if s.write_all(req.as_bytes()).is_err()
                        || read_response(&mut s, &mut buf).is_err()
                    {
                        *errors.lock().unwrap() += n_per_conn - k;
                        // What completed before the connection failed still counts.
                        hist.lock().unwrap().add(&local).unwrap();
                        return;
                    }
                    // Past the histogram's bound (60 s) a value is clamped, never dropped: `sent` counts all.
                    local.saturating_record(due.elapsed().as_nanos() as u64);
                }
                hist.lock().unwrap().add(&local).unwrap();
            });
        }
    });
    let h = hist.into_inner()?;
    let elapsed = start.elapsed().as_secs_f64();
    println!(
        "{{\"rate\":{rate},\"sent\":{},\"errors\":{},\"achieved_rps\":{:.0},\"p50_ns\":{},\"p90_ns\":{},\"p99_ns\":{},\"max_ns\":{}}}",
        h.len(),
        errors.into_inner()?,
        h.len() as f64 / elapsed,
        h.value_at_quantile(0.5),
        h.value_at_quantile(0.9),
        h.value_at_quantile(0.99),
        h.max()
    );
    Ok(())
}

/// A fraction in [0, 1) from the clock: enough to spread schedules, no RNG dependency.
fn rand_fraction() -> f64 {
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    (t.wrapping_mul(2654435761) % 1000) as f64 / 1000.0
}
