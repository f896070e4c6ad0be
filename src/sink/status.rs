//! A one-line live status on a terminal while recording without a UI (`-w FILE` on a
//! terminal), as tcpdump shows its packet count: what was captured, lost and written so far,
//! rewritten in place once per interval, ended with a newline.

use std::io::{self, Write};
use std::path::PathBuf;

use super::Sink;
use crate::report::IntervalReport;
use crate::summary::Summary;

/// 512 B, 2.0 KiB, 3.4 MiB, 1.2 GiB.
fn human_bytes(n: u64) -> String {
    const UNITS: [&str; 4] = ["KiB", "MiB", "GiB", "TiB"];
    if n < 1024 {
        return format!("{n} B");
    }
    let mut v = n as f64 / 1024.0;
    let mut unit = 0;
    while v >= 1024.0 && unit + 1 < UNITS.len() {
        v /= 1024.0;
        unit += 1;
    }
    format!("{v:.1} {}", UNITS[unit])
}

pub struct RecordingStatus<W: Write> {
    out: W,
    path: PathBuf,
    shown: bool,
}

impl<W: Write> RecordingStatus<W> {
    /// Writes to `out` (standard error) the status of the recording at `path`.
    pub fn new(out: W, path: PathBuf) -> Self {
        RecordingStatus {
            out,
            path,
            shown: false,
        }
    }

    pub fn into_inner(self) -> W {
        self.out
    }

    /// The status line for these totals and this many bytes on disk.
    pub fn line(path: &str, t: &Summary, file_bytes: u64) -> String {
        format!(
            "ebtop: recording {path}: {} events, {} calls, {} lost, {} written",
            t.events,
            t.calls,
            t.kernel.lost,
            human_bytes(file_bytes)
        )
    }

    fn show(&mut self, t: &Summary) -> io::Result<()> {
        let bytes = std::fs::metadata(&self.path).map_or(0, |m| m.len());
        let line = Self::line(&self.path.to_string_lossy(), t, bytes);
        // \r and erase-to-end: the line is rewritten in place.
        write!(self.out, "\r{line}\x1b[K")?;
        self.shown = true;
        self.out.flush()
    }
}

impl<W: Write> Sink for RecordingStatus<W> {
    fn warning(&mut self, _mono_ns: u64, w: &super::Warning) -> io::Result<()> {
        // The status line ends here; a cap's warning gets its own line (a recording failure
        // is written to standard error by the pipeline).
        if std::mem::take(&mut self.shown) {
            writeln!(self.out)?;
        }
        if w.cap.is_some() {
            writeln!(self.out, "ebtop: warning: {}", w.message)?;
        }
        self.out.flush()
    }
    fn interval(&mut self, r: &IntervalReport) -> io::Result<()> {
        self.show(&r.totals)
    }
    fn summary(&mut self, s: &Summary) -> io::Result<()> {
        self.show(s)?;
        writeln!(self.out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rewrites_one_line_and_ends_it() {
        let dir = std::env::temp_dir().join(format!("ebtop-status-{}", std::process::id()));
        std::fs::write(&dir, vec![0u8; 2048]).unwrap();
        let mut s = RecordingStatus::new(Vec::new(), dir.clone());
        let mut t = Summary {
            events: 10,
            calls: 4,
            ..Summary::default()
        };
        t.kernel.lost = 1;
        s.show(&t).unwrap();
        t.events = 20;
        s.summary(&t).unwrap();
        let out = String::from_utf8(s.into_inner()).unwrap();
        std::fs::remove_file(&dir).unwrap();
        assert_eq!(out.matches('\r').count(), 2);
        assert!(
            out.ends_with("20 events, 4 calls, 1 lost, 2.0 KiB written\x1b[K\n"),
            "{out:?}"
        );
    }
}
