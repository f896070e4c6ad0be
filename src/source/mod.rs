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
