//! UDP flood for the benchmark's packet scenario: a receiver and N senders on loopback, as fast
//! as they go for SECONDS. Prints one JSON object with datagrams sent and received.
//!
//!     cargo run --release --example udp_flood -- 5 2

use std::net::UdpSocket;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

fn main() -> anyhow::Result<()> {
    let a: Vec<String> = std::env::args().skip(1).collect();
    let secs: f64 = a.first().map_or(Ok(5.0), |s| s.parse())?;
    let senders: usize = a.get(1).map_or(Ok(1), |s| s.parse())?;
    let rx = UdpSocket::bind("127.0.0.1:0")?;
    rx.set_read_timeout(Some(Duration::from_millis(200)))?;
    let to = rx.local_addr()?;
    let stop = AtomicBool::new(false);
    let (sent, recvd) = (AtomicU64::new(0), AtomicU64::new(0));
    let start = Instant::now();
    std::thread::scope(|s| {
        s.spawn(|| {
            let mut buf = [0u8; 2048];
            while !stop.load(Ordering::Relaxed) {
                if rx.recv(&mut buf).is_ok() {
                    recvd.fetch_add(1, Ordering::Relaxed);
                }
            }
        });
        for _ in 0..senders {
            s.spawn(|| {
                let tx = UdpSocket::bind("127.0.0.1:0").unwrap();
                let payload = [0x5au8; 64];
                let mut n = 0u64;
                while start.elapsed().as_secs_f64() < secs {
                    for _ in 0..256 {
                        if tx.send_to(&payload, to).is_ok() {
                            n += 1;
                        }
                    }
                }
                sent.fetch_add(n, Ordering::Relaxed);
            });
        }
        std::thread::sleep(Duration::from_secs_f64(secs + 0.3));
        stop.store(true, Ordering::Relaxed);
    });
    let el = secs;
    println!(
        "{{\"seconds\":{el},\"sent\":{},\"received\":{},\"sent_per_s\":{:.0}}}",
        sent.load(Ordering::Relaxed),
        recvd.load(Ordering::Relaxed),
        sent.load(Ordering::Relaxed) as f64 / el
    );
    Ok(())
}
