//! Interval and since-start aggregates over the call stream: per-endpoint latency percentiles
//! ([`endpoints`]), per-process CPU/memory/traffic ([`process`]) and ebtop's own cost
//! ([`overhead`]). Pure bookkeeping: the pipeline feeds calls in and asks for snapshots at each
//! interval; sinks decide how to show them.

pub mod conns;
pub mod distinct;
pub mod endpoints;
pub mod fold;
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

/// Spins until this thread has used `d` of CPU time.
#[cfg(test)]
pub(crate) fn burn_cpu(d: std::time::Duration) {
    // CPU time of this thread, not wall time: on a loaded host a wall-clock burn gets only a
    // share of a core, and a test would then see less CPU than it asked for.
    let start = thread_cpu_time();
    let mut x = 1u64;
    while thread_cpu_time().saturating_sub(start) < d {
        for _ in 0..10_000 {
            x = std::hint::black_box(x.wrapping_mul(6364136223846793005).wrapping_add(1));
        }
    }
}

/// CPU time the calling thread has used.
#[cfg(test)]
pub(crate) fn thread_cpu_time() -> std::time::Duration {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec; CLOCK_THREAD_CPUTIME_ID always exists on
    // Linux.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    std::time::Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
}
