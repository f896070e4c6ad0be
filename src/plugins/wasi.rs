//! Deterministic WASI stubs for guests that import `wasi_snapshot_preview1` (Go's
//! `GOOS=wasip1`), given only with `--plugin-wasi-stubs` (docs/plugins.md). Nothing reaches the
//! host: no arguments, no environment, a clock that starts at 0 and moves only by the guest's
//! own sleeps and 1 µs per reading, "random" bytes from a fixed seed, writes to any descriptor
//! discarded and counted, `proc_exit` a trap. So an instance's answers depend only on the bytes
//! it is handed: a replay gives the same calls as the capture did.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use wasmi::{Caller, Extern, Linker, StoreLimits};

/// The WASI module name Go's `wasip1` port imports from.
pub const MODULE: &str = "wasi_snapshot_preview1";

/// The functions stubbed (a guest importing any other is refused at load).
pub const FUNCS: &[&str] = &[
    "args_get",
    "args_sizes_get",
    "environ_get",
    "environ_sizes_get",
    "clock_time_get",
    "random_get",
    "fd_write",
    "poll_oneoff",
    "sched_yield",
    "proc_exit",
];

/// WASI errno values used.
const OK: i32 = 0;
const EFAULT: i32 = 21;

/// An instance's host-side state: its limits and its stubs' state.
pub struct HostState {
    pub limits: StoreLimits,
    /// The stub clock, ns.
    clock_ns: u64,
    /// xorshift64 state of `random_get`.
    rng: u64,
    /// Bytes the guest wrote (the plugin's counter, shared by its instances).
    written: Arc<AtomicU64>,
}

impl HostState {
    pub fn new(limits: StoreLimits, written: Arc<AtomicU64>) -> HostState {
        HostState {
            limits,
            clock_ns: 0,
            rng: 0x9E37_79B9_7F4A_7C15,
            written,
        }
    }
}

/// The guest's memory and the host state, for a stub.
fn mem<'a>(caller: &'a mut Caller<'_, HostState>) -> Option<(&'a mut [u8], &'a mut HostState)> {
    let m = caller.get_export("memory").and_then(Extern::into_memory)?;
    Some(m.data_and_store_mut(caller))
}

/// `n` bytes at guest address `p`, if inside its memory.
fn at(m: &mut [u8], p: i32, n: usize) -> Option<&mut [u8]> {
    let p = p as u32 as usize;
    m.get_mut(p..p.checked_add(n)?)
}

fn put_u32(m: &mut [u8], p: i32, v: u32) -> bool {
    at(m, p, 4)
        .map(|b| b.copy_from_slice(&v.to_le_bytes()))
        .is_some()
}

fn put_u64(m: &mut [u8], p: i32, v: u64) -> bool {
    at(m, p, 8)
        .map(|b| b.copy_from_slice(&v.to_le_bytes()))
        .is_some()
}

fn errno(ok: bool) -> i32 {
    if ok {
        OK
    } else {
        EFAULT
    }
}

type R = Result<i32, wasmi::Error>;

/// Defines the stubs in `linker`.
pub fn define(linker: &mut Linker<HostState>) -> Result<(), wasmi::errors::LinkerError> {
    // No arguments, no environment: counts of 0.
    for (get, sizes) in [
        ("args_get", "args_sizes_get"),
        ("environ_get", "environ_sizes_get"),
    ] {
        linker.func_wrap(
            MODULE,
            get,
            |_: Caller<'_, HostState>, _: i32, _: i32| -> R { Ok(OK) },
        )?;
        linker.func_wrap(
            MODULE,
            sizes,
            |mut c: Caller<'_, HostState>, n: i32, size: i32| -> R {
                Ok(match mem(&mut c) {
                    Some((m, _)) => errno(put_u32(m, n, 0) && put_u32(m, size, 0)),
                    None => EFAULT,
                })
            },
        )?;
    }
    linker.func_wrap(
        MODULE,
        "clock_time_get",
        |mut c: Caller<'_, HostState>, _id: i32, _precision: i64, out: i32| -> R {
            Ok(match mem(&mut c) {
                Some((m, s)) => {
                    // Time moves on by a microsecond per reading: a guest waiting for it to
                    // change does not spin forever.
                    s.clock_ns += 1_000;
                    errno(put_u64(m, out, s.clock_ns))
                }
                None => EFAULT,
            })
        },
    )?;
    linker.func_wrap(
        MODULE,
        "random_get",
        |mut c: Caller<'_, HostState>, p: i32, n: i32| -> R {
            Ok(match mem(&mut c) {
                Some((m, s)) => match at(m, p, n as u32 as usize) {
                    Some(b) => {
                        for x in b {
                            s.rng ^= s.rng << 13;
                            s.rng ^= s.rng >> 7;
                            s.rng ^= s.rng << 17;
                            *x = s.rng as u8;
                        }
                        OK
                    }
                    None => EFAULT,
                },
                None => EFAULT,
            })
        },
    )?;
    linker.func_wrap(
        MODULE,
        "fd_write",
        |mut c: Caller<'_, HostState>, _fd: i32, iovs: i32, n: i32, out: i32| -> R {
            Ok(match mem(&mut c) {
                Some((m, s)) => {
                    // Discarded, counted: the sum of the iovecs' lengths (each 8 bytes: ptr,
                    // len), as if written whole.
                    let mut total: u32 = 0;
                    let mut ok = true;
                    for i in 0..(n as u32).min(1024) {
                        match at(m, iovs.wrapping_add((i * 8) as i32), 8) {
                            Some(v) => {
                                let len = u32::from_le_bytes([v[4], v[5], v[6], v[7]]);
                                total = total.saturating_add(len);
                            }
                            None => ok = false,
                        }
                    }
                    s.written.fetch_add(u64::from(total), Ordering::Relaxed);
                    errno(ok && put_u32(m, out, total))
                }
                None => EFAULT,
            })
        },
    )?;
    linker.func_wrap(
        MODULE,
        "poll_oneoff",
        |mut c: Caller<'_, HostState>, subs: i32, events: i32, n: i32, out: i32| -> R {
            Ok(match mem(&mut c) {
                Some((m, s)) => {
                    // Every subscription fires at once; a clock one moves the clock on by its
                    // timeout (a sleep takes no time and stays deterministic).
                    let n = (n as u32).min(64);
                    let mut ok = true;
                    for i in 0..n {
                        let sub = subs.wrapping_add((i * 48) as i32);
                        let Some(b) = at(m, sub, 48) else {
                            ok = false;
                            break;
                        };
                        let userdata = u64::from_le_bytes(b[0..8].try_into().expect("8 bytes"));
                        let tag = b[8];
                        if tag == 0 {
                            let timeout = u64::from_le_bytes(b[24..32].try_into().expect("8"));
                            s.clock_ns = s.clock_ns.saturating_add(timeout.min(1 << 40));
                        }
                        let Some(e) = at(m, events.wrapping_add((i * 32) as i32), 32) else {
                            ok = false;
                            break;
                        };
                        e.fill(0);
                        e[0..8].copy_from_slice(&userdata.to_le_bytes());
                        e[10] = tag;
                    }
                    errno(ok && put_u32(m, out, n))
                }
                None => EFAULT,
            })
        },
    )?;
    linker.func_wrap(MODULE, "sched_yield", |_: Caller<'_, HostState>| -> R {
        Ok(OK)
    })?;
    linker.func_wrap(
        MODULE,
        "proc_exit",
        |_: Caller<'_, HostState>, code: i32| -> Result<(), wasmi::Error> {
            Err(wasmi::Error::i32_exit(code))
        },
    )?;
    Ok(())
}
