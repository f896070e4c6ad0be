//! Where records come from: the live BPF ring buffer (and, later, a recording).

#[cfg(feature = "bench-cuts")]
mod bench_cuts;
pub mod flow_table;
pub mod live;
pub mod process_probe;
pub mod replay;
pub mod ring_feed;

/// Whether a benchmark build's cut (`read`, `read-cpu`) has user space drop each record as it
/// is read; never in a normal build.
fn bench_drops_records() -> bool {
    #[cfg(feature = "bench-cuts")]
    return bench_cuts::drops_records();
    #[cfg(not(feature = "bench-cuts"))]
    false
}
