//! What runs a session: reads a source (the live capture, a recording) and feeds its records
//! to the pipeline until the end. Above the sources and the pipeline; neither imports it.

pub mod live;
pub mod replay;
