//! Where records come from: the live BPF ring buffer (and, later, a recording).

#[cfg(feature = "bench-cuts")]
mod bench_cuts;
pub mod live;
pub mod process_probe;
pub mod replay;
pub mod ring_feed;
