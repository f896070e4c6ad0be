//! A sink that shows nothing: recording alone (`-w` without `--json`).

use super::Sink;

#[derive(Debug, Default)]
pub struct NullSink;

impl Sink for NullSink {}
