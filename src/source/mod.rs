//! Where records come from, live: the capture programs and their rings, the flow table, the
//! process probe. The drivers that feed them to the pipeline: src/driver/.

#[cfg(feature = "bench-cuts")]
mod bench_cuts;
pub mod capture;
pub mod flow_table;
pub mod process_probe;
pub mod ring_feed;
pub mod sampling;

/// Whether a benchmark build's cut (`read`, `read-cpu`) has user space drop each record as it
/// is read; never in a normal build.
pub(crate) fn bench_drops_records() -> bool {
    #[cfg(feature = "bench-cuts")]
    return bench_cuts::drops_records();
    #[cfg(not(feature = "bench-cuts"))]
    false
}

/// Whether a benchmark build leaves the capture's length programs unattached (the cut
/// `unhooked`); never in a normal build.
pub(crate) fn bench_length_hooks_left_out() -> bool {
    #[cfg(feature = "bench-cuts")]
    return bench_cuts::length_hooks_left_out();
    #[cfg(not(feature = "bench-cuts"))]
    false
}

/// Whether a benchmark build leaves out the flow table's cgroup hooks that stash an
/// unconnected UDP socket's peer (`EBTOP_BENCH_NO_PEER_HOOKS`: bench/udp_toggle.py's
/// `nopeerhooks`, what the kernel's socket lock around them costs); never in a normal build.
pub(crate) fn bench_no_peer_hooks() -> bool {
    #[cfg(feature = "bench-cuts")]
    return bench_cuts::no_peer_hooks();
    #[cfg(not(feature = "bench-cuts"))]
    false
}
