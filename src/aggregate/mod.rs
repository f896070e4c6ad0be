//! Interval and since-start aggregates over the call stream: per-endpoint latency percentiles
//! ([`endpoints`]), per-process CPU/memory/traffic ([`process`]) and ebtop's own cost
//! ([`overhead`]). Pure bookkeeping: the pipeline feeds calls in and asks for snapshots at each
//! interval; sinks decide how to show them.

pub mod conns;
pub mod distinct;
pub mod endpoints;
pub mod normalize;
pub mod normalize_memo;
pub mod overhead;
pub mod process;
pub mod procfs;

pub use endpoints::{
    EndpointSnapshot, EndpointTable, EndpointTableStats, EndpointWindows, LatencyBins, RowRef,
};
pub use normalize::normalize;
pub use overhead::{BpfStats, Overhead, OverheadSnapshot, RingCounters, StatsMode};
pub use process::{ProcessSnapshot, ProcessStats};

/// Tests that measure this process's CPU run one at a time, so one's burn is not in another's
/// window.
#[cfg(test)]
pub(crate) fn cpu_test_serial() -> std::sync::MutexGuard<'static, ()> {
    static LOCK: std::sync::Mutex<()> = std::sync::Mutex::new(());
    LOCK.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// Spins for `d` of CPU-bound work.
#[cfg(test)]
pub(crate) fn burn_cpu(d: std::time::Duration) {
    let start = std::time::Instant::now();
    let mut x = 1u64;
    while start.elapsed() < d {
        for _ in 0..10_000 {
            x = std::hint::black_box(x.wrapping_mul(6364136223846793005).wrapping_add(1));
        }
    }
}
