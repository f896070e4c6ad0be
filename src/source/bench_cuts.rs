//! Cut points of a benchmark build (`cargo build --release --features bench-cuts`): the
//! capture stops each data record at the stage `EBTOP_BENCH_CUT` names, so `bench/toggle.py`
//! can measure what each stage costs the traced load (docs/performance.md, "The capture's
//! floor, stage by stage"; earlier runs: docs/performance-history.md). A normal build has
//! none of this: `bench_cut` stays 0 in the kernel.

/// The stages, in capture order: `hook` returns at the tracepoint's entry, `state` after the
/// socket's storage and byte positions, `select` after the protocol is chosen, `copy` after the
/// payload and header are made (nothing reaches the ring), `read` after the ring (user space
/// reads each record and drops it). `read-cpu` is `read` with each record in the ring of the CPU
/// that made it rather than of its socket (with `--threads` > 1: what sharing rings between CPUs
/// costs; order is not kept, so records can only be dropped). `unhooked` leaves the send and
/// receive length programs unattached: ebtop's presence without them (its threads, its other
/// probes), the floor below `hook`.
const CUTS: [&str; 7] = [
    "hook", "state", "select", "copy", "read", "read-cpu", "unhooked",
];

/// The stage named by `EBTOP_BENCH_CUT` (its index in [`CUTS`]), read and reported once.
fn cut() -> Option<usize> {
    static CUT: std::sync::OnceLock<Option<usize>> = std::sync::OnceLock::new();
    *CUT.get_or_init(|| {
        let name = std::env::var("EBTOP_BENCH_CUT").ok()?;
        let found = CUTS.iter().position(|c| *c == name);
        match found {
            Some(_) => {
                eprintln!("ebtop: benchmark build: records cut at \"{name}\" (EBTOP_BENCH_CUT)")
            }
            None => eprintln!(
                "ebtop: EBTOP_BENCH_CUT={name:?} ignored: one of {}",
                CUTS.join(", ")
            ),
        }
        found
    })
}

/// `bench_cut` of src/bpf/capture.h: 1 to 4 for the kernel's stages, 6 for `read-cpu`, else 0.
pub fn kernel_cut() -> u32 {
    match cut() {
        Some(i) if i < 4 => i as u32 + 1,
        Some(5) => 6,
        _ => 0,
    }
}

/// Whether user space drops each record as it is read (`read`, `read-cpu`).
pub fn drops_records() -> bool {
    cut().is_some_and(|i| i == 4 || i == 5)
}

/// Whether the capture's send and receive length programs are left unattached (`unhooked`).
pub fn length_hooks_left_out() -> bool {
    cut() == Some(6)
}

/// Whether the flow table's cgroup sendmsg/recvmsg hooks are left unattached
/// (`EBTOP_BENCH_NO_PEER_HOOKS` set): unconnected UDP peers are then unknown.
pub fn no_peer_hooks() -> bool {
    static NO: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *NO.get_or_init(|| {
        let no = std::env::var_os("EBTOP_BENCH_NO_PEER_HOOKS").is_some();
        if no {
            eprintln!(
                "ebtop: benchmark build: UDP peer hooks left out (EBTOP_BENCH_NO_PEER_HOOKS)"
            );
        }
        no
    })
}
