//! Cut points of a benchmark build (`cargo build --release --features bench-cuts`): the
//! capture stops each data record at the stage `EBTOP_BENCH_CUT` names, so `bench/toggle.py`
//! can measure what each stage costs the traced load (docs/performance.md, "The capture's
//! cost, stage by stage"). A normal build has none of this: `bench_cut` stays 0 in the kernel.

/// The stages, in capture order: `hook` returns at the tracepoint's entry, `state` after the
/// socket's storage and byte positions, `select` after the protocol is chosen, `copy` after the
/// payload and header are made (nothing reaches the ring), `read` after the ring (user space
/// reads each record and drops it; one ring only, i.e. one tracking thread).
const CUTS: [&str; 5] = ["hook", "state", "select", "copy", "read"];

fn cut() -> Option<usize> {
    let name = std::env::var("EBTOP_BENCH_CUT").ok()?;
    match CUTS.iter().position(|c| *c == name) {
        Some(i) => {
            eprintln!("ebtop: benchmark build: records cut at \"{name}\" (EBTOP_BENCH_CUT)");
            Some(i)
        }
        None => {
            eprintln!(
                "ebtop: EBTOP_BENCH_CUT={name:?} ignored: one of {}",
                CUTS.join(", ")
            );
            None
        }
    }
}

/// `bench_cut` of src/bpf/capture.h: 1 to 4 for the kernel's stages, else 0.
pub fn kernel_cut() -> u32 {
    match cut() {
        Some(i) if i < 4 => i as u32 + 1,
        _ => 0,
    }
}

/// Whether user space drops each record as it is read.
pub fn drops_records() -> bool {
    std::env::var("EBTOP_BENCH_CUT").is_ok_and(|v| v == "read")
}
