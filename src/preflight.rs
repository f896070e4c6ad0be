//! Checks before loading BPF, each failing with one line a user can act on.

use std::path::Path;

use anyhow::{bail, Result};

const CAP_SYS_ADMIN: u32 = 21;
const CAP_PERFMON: u32 = 38;
const CAP_BPF: u32 = 39;

fn effective_caps() -> u64 {
    crate::procfs::read_self("status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("CapEff:"))
                .and_then(|v| u64::from_str_radix(v.trim(), 16).ok())
        })
        .unwrap_or(0)
}

/// Root, or CAP_BPF + CAP_PERFMON (or CAP_SYS_ADMIN).
pub fn check_privileges() -> Result<()> {
    let caps = effective_caps();
    let has = |c: u32| caps & (1u64 << c) != 0;
    if has(CAP_SYS_ADMIN) || (has(CAP_BPF) && has(CAP_PERFMON)) {
        return Ok(());
    }
    bail!(
        "ebtop needs root to load eBPF programs (or CAP_BPF and CAP_PERFMON): run it with sudo, \
         or replay a recording with -r (no root needed)"
    )
}

pub fn check_btf() -> Result<()> {
    if Path::new("/sys/kernel/btf/vmlinux").exists() {
        return Ok(());
    }
    bail!(
        "this kernel exposes no BTF (/sys/kernel/btf/vmlinux is missing): ebtop needs a kernel \
         built with CONFIG_DEBUG_INFO_BTF=y (most distribution kernels since 2020)"
    )
}

const TRACEFS: &str = "/sys/kernel/tracing";

/// Tracepoint attach needs tracefs; mount it when it is missing (root can).
pub fn ensure_tracefs() -> Result<()> {
    let events = |base: &str| Path::new(base).join("events/syscalls").is_dir();
    if events(TRACEFS) || events("/sys/kernel/debug/tracing") {
        return Ok(());
    }
    let src = c"nodev";
    let target = c"/sys/kernel/tracing";
    let fstype = c"tracefs";
    // SAFETY: all pointers are valid NUL-terminated strings; data is null (no options).
    let rc = unsafe {
        libc::mount(
            src.as_ptr(),
            target.as_ptr(),
            fstype.as_ptr(),
            0,
            std::ptr::null(),
        )
    };
    let mount_error = (rc != 0).then(std::io::Error::last_os_error);
    // Another process (a second ebtop) may be mounting it at the same moment: our mount then
    // fails or the event directories appear a little later, so wait briefly before judging.
    for _ in 0..40 {
        if events(TRACEFS) {
            return Ok(());
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    if Path::new(TRACEFS).join("events").is_dir() {
        bail!("tracefs is mounted at {TRACEFS} but has no syscall tracepoints: the kernel lacks CONFIG_FTRACE_SYSCALLS")
    }
    bail!(
        "tracefs is not mounted and mounting it failed ({}): run \
         'mount -t tracefs nodev {TRACEFS}' and start ebtop again",
        mount_error.map_or_else(
            || "no syscall events appeared".to_string(),
            |e| e.to_string()
        )
    )
}

/// Sets the calling thread's nice value; threads it starts afterwards inherit it (Linux keeps
/// the value per thread). A failure (no CAP_SYS_NICE) is one warning: capture goes on.
pub fn set_capture_priority(nice: i32) {
    if nice == 0 {
        return;
    }
    if !set_thread_nice(nice) {
        crate::diag!(
            "ebtop: warning: could not set the capture threads' priority to nice {nice}: {} \
             (under load they may fall behind: losses are counted)",
            std::io::Error::last_os_error()
        );
    }
}

/// How far above the tracking threads the thread that applies their results runs.
const APPLYING_PRIORITY_STEP: i32 = 5;

/// Puts the calling thread (the one that merges and applies what the tracking threads send)
/// a step above the capture's priority, where that was raised: it is the one stage all of them
/// wait on, and at the same priority it waited for a CPU a third of its time under load on 16
/// CPUs (docs/performance-history.md, "Many cores IV"). A failure changes nothing.
pub fn raise_applying_priority() {
    if let Some(now) = thread_nice().filter(|&n| n < 0) {
        set_thread_nice((now - APPLYING_PRIORITY_STEP).max(-20));
    }
}

/// Gives the calling thread the load's priority (nice 0) where the capture threads run above
/// it. For a helper thread whose work can wait (the flow table's reader): at the capture's
/// priority, woken on the ring reader's CPU it ran first and held the reader up for its whole
/// run (5 ms of flow snapshot at every tick on a 2-CPU host).
pub fn set_helper_priority() {
    if thread_nice().is_some_and(|n| n < 0) {
        set_thread_nice(0);
    }
}

/// The calling thread's nice value (None: it could not be read).
fn thread_nice() -> Option<i32> {
    // SAFETY: plain syscall on the calling thread (who = 0); getpriority's -1 is a value, so
    // an error shows only in errno, cleared first.
    unsafe {
        *libc::__errno_location() = 0;
        let now = libc::getpriority(libc::PRIO_PROCESS, 0);
        (*libc::__errno_location() == 0).then_some(now)
    }
}

/// Sets the calling thread's nice value; whether it could.
fn set_thread_nice(nice: i32) -> bool {
    // SAFETY: plain syscall on the calling thread (who = 0).
    unsafe { libc::setpriority(libc::PRIO_PROCESS, 0, nice) == 0 }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn own_nice() -> i32 {
        thread_nice().expect("the thread's nice value")
    }

    /// On a thread of its own: nice values are per thread on Linux.
    fn on_a_thread<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> T {
        std::thread::spawn(f).join().expect("the test thread")
    }

    #[test]
    fn the_applying_thread_runs_a_step_above_the_capture_threads_and_never_below_the_load() {
        // SAFETY: plain syscall.
        let root = unsafe { libc::geteuid() } == 0;
        assert!(
            root,
            "raising a thread's priority needs root (CAP_SYS_NICE): run as root"
        );
        let (capture, applying) = on_a_thread(|| {
            set_capture_priority(-10);
            let capture = own_nice();
            raise_applying_priority();
            (capture, own_nice())
        });
        assert_eq!((capture, applying), (-10, -15));
        // Near the top it stops at -20.
        let top = on_a_thread(|| {
            set_capture_priority(-18);
            raise_applying_priority();
            own_nice()
        });
        assert_eq!(top, -20);
        // Where the capture keeps the load's priority (`--nice 0`), so does the applying thread.
        let load = on_a_thread(|| {
            set_thread_nice(0);
            raise_applying_priority();
            own_nice()
        });
        assert_eq!(load, 0);
    }
}
