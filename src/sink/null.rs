//! A sink that shows nothing: recording alone (`-w` without `--json`).

use std::io;

use super::Sink;
use crate::call::Call;
use crate::procinfo::ProcInfo;
use crate::session_meta::SessionMeta;
use crate::summary::Summary;

#[derive(Debug, Default)]
pub struct NullSink;

impl Sink for NullSink {
    fn meta(&mut self, _: &SessionMeta) -> io::Result<()> {
        Ok(())
    }
    fn process(&mut self, _: &ProcInfo) -> io::Result<()> {
        Ok(())
    }
    fn call(&mut self, _: &Call) -> io::Result<()> {
        Ok(())
    }
    fn lost(&mut self, _: u64, _: &super::Loss) -> io::Result<()> {
        Ok(())
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
    fn summary(&mut self, _: &Summary) -> io::Result<()> {
        Ok(())
    }
}
