//! Where records come from: the live BPF ring buffer (and, later, a recording).

pub mod live;
pub mod replay;
