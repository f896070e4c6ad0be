//! Where records come from: the live BPF ring buffer (and, later, a recording).

pub mod live;
pub mod process_probe;
pub mod replay;
pub mod ring_feed;
