//! Diagnostics on standard error that cannot fail: stderr may be a terminal that is gone (an
//! SSH session closed under ebtop), and `eprintln!` panics when its write fails.

/// Like `eprintln!`, but a failed write is ignored, and a terminal that takes no output is
/// waited for [`crate::tty::STALL_GRACE`] at most.
#[macro_export]
macro_rules! diag {
    ($($arg:tt)*) => {
        $crate::diag::write_line(format_args!($($arg)*))
    };
}

/// One line to standard error (see [`diag!`]).
pub fn write_line(args: std::fmt::Arguments<'_>) {
    use std::io::Write as _;
    static TTY: std::sync::OnceLock<Option<std::os::fd::OwnedFd>> = std::sync::OnceLock::new();
    let line = format!("{args}\n");
    match TTY.get_or_init(|| crate::tty::reopen_nonblocking(libc::STDERR_FILENO)) {
        Some(fd) => {
            let _ = crate::tty::write_all_bounded(fd, line.as_bytes());
        }
        None => {
            let _ = std::io::stderr().write_all(line.as_bytes());
        }
    }
}

/// Debug builds only: `EBTOP_DEBUG_LOOKOUT_DELAY_MS=<ms>` holds every look of the TLS lookout
/// back by that long, so the tests can have a new program exit before it is looked at.
/// Always zero in release builds.
pub fn debug_lookout_delay() -> std::time::Duration {
    debug_ms("EBTOP_DEBUG_LOOKOUT_DELAY_MS")
}

/// Debug builds only: `EBTOP_DEBUG_EXEC_LAG_MS=<ms>` has the capture thread sleep that long
/// before it hands an exec to the TLS lookout, so the tests can have a new program exit before
/// its exec is handled; with `EBTOP_DEBUG_EXEC_LAG_NAME=<file name>`, only the execs of files
/// of that name (other tests' programs running meanwhile must not stall the capture thread for
/// a second each). Always zero in release builds.
pub fn debug_exec_lag() -> (std::time::Duration, Option<Vec<u8>>) {
    let name = if cfg!(debug_assertions) {
        std::env::var_os("EBTOP_DEBUG_EXEC_LAG_NAME").map(|n| {
            use std::os::unix::ffi::OsStringExt as _;
            n.into_vec()
        })
    } else {
        None
    };
    (debug_ms("EBTOP_DEBUG_EXEC_LAG_MS"), name)
}

/// Debug builds only: `EBTOP_DEBUG_SAMPLE_SCHEDULE=<pct>,<pct>,...` has a CPU budget
/// (`--max-cpu`) set the share of connections to these values, one per interval (the last
/// one stays), instead of from the measured load, so the tests can lower the share under
/// captured connections at a known time and see them cut at a call boundary. None in
/// release builds and when unset or malformed.
pub fn debug_sample_schedule() -> Option<Vec<f64>> {
    if !cfg!(debug_assertions) {
        return None;
    }
    let v = std::env::var("EBTOP_DEBUG_SAMPLE_SCHEDULE").ok()?;
    let shares: Option<Vec<f64>> = v
        .split(',')
        .map(|p| {
            p.trim()
                .parse::<f64>()
                .ok()
                .filter(|x| (0.0..=100.0).contains(x))
        })
        .map(|p| p.map(|x| x / 100.0))
        .collect();
    shares.filter(|s| !s.is_empty())
}

/// Debug builds only: `EBTOP_DEBUG_SAMPLE_GATE=<path>` holds `EBTOP_DEBUG_SAMPLE_SCHEDULE` at
/// its first share until that file exists (its next entry comes at the interval after), so a
/// test lowers the share once its connections are captured, not after a time that load can
/// stretch; a file that holds a number N holds the schedule at its entry N (from 0) until the
/// number changes. None in release builds and when unset.
pub fn debug_sample_gate() -> Option<std::path::PathBuf> {
    if !cfg!(debug_assertions) {
        return None;
    }
    std::env::var_os("EBTOP_DEBUG_SAMPLE_GATE").map(std::path::PathBuf::from)
}

/// `EBTOP_DEBUG_FLOW_MEMORY=1` (release builds too: it is for measuring them) has the flow
/// table's reader print its structures' sizes on stderr after each poll
/// (bench/teardown_mem.py `--diag`), to tell which holds ebtop's memory with many flows.
pub fn debug_flow_memory() -> bool {
    static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ON.get_or_init(|| std::env::var_os("EBTOP_DEBUG_FLOW_MEMORY").is_some_and(|v| v == "1"))
}

/// Debug builds only: `EBTOP_DEBUG_FLOW_READS_KIB=<KiB>` sizes the ring of changed flows
/// (`flow_reads`, 8 MiB) down, so the tests can have it overflow with a few hundred flows and
/// the table read whole instead. None in release builds.
pub fn debug_flow_reads_bytes() -> Option<u32> {
    debug_ring_bytes("EBTOP_DEBUG_FLOW_READS_KIB")
}

/// Debug builds only: `EBTOP_DEBUG_SKIP_CLOSE=1` has the flow table miss every socket's change
/// to CLOSE, as it misses one when the kernel skips a program run, so the tests can check that
/// such flows still end exactly. Always false in release builds.
pub fn debug_skip_close() -> bool {
    cfg!(debug_assertions) && std::env::var_os("EBTOP_DEBUG_SKIP_CLOSE").is_some_and(|v| v == "1")
}

/// Debug builds only: `EBTOP_DEBUG_UDP_PEER_HASH=1` keeps the UDP peer stash in its hash by
/// thread, as on kernels whose cgroup programs cannot use task storage (flowtable.h), so the
/// tests cover both. Always false in release builds.
pub fn debug_udp_peer_hash() -> bool {
    cfg!(debug_assertions)
        && std::env::var_os("EBTOP_DEBUG_UDP_PEER_HASH").is_some_and(|v| v == "1")
}

/// Debug builds only: `EBTOP_DEBUG_FLOW_ENDS_KIB=<KiB>` sizes the flow-end ring (4 MiB)
/// down, and `EBTOP_DEBUG_INTERVAL_STALL_MS=<ms>` has the session's loop stop that long at
/// each interval's end (as writing a huge report does), so the tests can see that ends do not
/// wait for that loop. None and zero in release builds.
pub fn debug_flow_ends_bytes() -> Option<u32> {
    debug_ring_bytes("EBTOP_DEBUG_FLOW_ENDS_KIB")
}

/// Debug builds only: `EBTOP_DEBUG_FLOW_ENDS_HELD_KIB=<KiB>` bounds the flow ends held in
/// memory between two intervals (16 MiB; at least one 64 KiB chunk), so the tests can see the
/// ring take the rest and count what it has no room for. None in release builds.
pub fn debug_flow_ends_held_bytes() -> Option<usize> {
    if !cfg!(debug_assertions) {
        return None;
    }
    let kib: usize = std::env::var("EBTOP_DEBUG_FLOW_ENDS_HELD_KIB")
        .ok()?
        .parse()
        .ok()?;
    Some(kib.saturating_mul(1024))
}

/// A ring size in KiB from `var` (debug builds), as a ring must be: a power of two pages.
fn debug_ring_bytes(var: &str) -> Option<u32> {
    if !cfg!(debug_assertions) {
        return None;
    }
    let kib: u32 = std::env::var(var).ok()?.parse().ok()?;
    Some((kib.clamp(4, 1 << 20) * 1024).next_power_of_two())
}

/// See [`debug_flow_ends_bytes`].
pub fn debug_interval_stall() -> std::time::Duration {
    debug_ms("EBTOP_DEBUG_INTERVAL_STALL_MS")
}

/// Debug builds only: `EBTOP_DEBUG_FEED_LAG_MS=<ms>` has each tracking thread that reads a
/// ring of its own (live, `--threads` > 1) hold the records a read found that long before it
/// sends them on: the lag of threads a busy host starves, under which an interval's flow
/// report reaches the pipeline before the records of calls made before it.
pub fn debug_feed_lag() -> std::time::Duration {
    debug_ms("EBTOP_DEBUG_FEED_LAG_MS")
}

fn debug_ms(var: &str) -> std::time::Duration {
    if !cfg!(debug_assertions) {
        return std::time::Duration::ZERO;
    }
    let ms = std::env::var(var)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    std::time::Duration::from_millis(ms)
}

/// Debug builds only: `EBTOP_DEBUG_PANIC=<place>` makes that place panic (`collector`: the
/// first ring-buffer record; `ui`: the UI thread; `input`: the key reader; `tracker`: a
/// tracking thread of `--threads`, at its first batch), so the tests can
/// check that a panic in any thread still ends ebtop cleanly. Always false in release builds.
pub fn debug_panic_requested(place: &str) -> bool {
    if !cfg!(debug_assertions) {
        return false;
    }
    static WANTED: std::sync::OnceLock<Option<String>> = std::sync::OnceLock::new();
    WANTED
        .get_or_init(|| std::env::var("EBTOP_DEBUG_PANIC").ok())
        .as_deref()
        == Some(place)
}
