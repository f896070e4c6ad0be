//! Reads recordings written by any ebtop of the same major version, from any machine: every
//! length is checked, a corrupt frame is skipped and counted, a truncated end is reported.

use std::fs::File;
use std::io::{ErrorKind, Read};
use std::path::Path;

use anyhow::{anyhow, bail, Context, Result};

use super::*;

/// One item of a recording, in order.
pub enum Item<'a> {
    Event(&'a [u8]),
    Process(ProcInfo),
    Interval(IntervalRecord),
    End(EndRecord),
    /// The flow table's report of an interval, or a part of it (`more`: parts follow). Parts
    /// before the interval's record belong to it; since reports are streamed, those after it
    /// too, up to the part without `more`.
    Flows(Box<crate::flows::FlowReport>),
    /// A process exec/exit record as the kernel delivered it.
    ProcEvent(&'a [u8]),
}

/// A kind 5 or 7 record: a flow report or a part of one (`continued`: see
/// [`crate::flows::FlowReport::first_parts`]).
#[derive(serde::Deserialize)]
struct RecordedFlows {
    #[serde(flatten)]
    report: crate::flows::FlowReport,
    #[serde(default)]
    continued: bool,
}

pub struct RecordingReader<R: Read> {
    pub header: RecordingHeader,
    pub minor: u16,
    input: R,
    buf: Vec<u8>,
    pos: usize,
    eof: bool,
    pub stats: ReadStats,
}

/// Opens `path` and reads its header; one clear error per way a file can be wrong.
pub fn open(path: &Path) -> Result<RecordingReader<File>> {
    let shown = path.display();
    let md = std::fs::metadata(path).map_err(|e| anyhow!("cannot read {shown}: {e}"))?;
    if md.is_dir() {
        bail!("{shown} is a directory, not an ebtop recording");
    }
    if md.len() == 0 {
        bail!("{shown} is empty: not an ebtop recording (or nothing was recorded yet)");
    }
    let file = File::open(path).map_err(|e| anyhow!("cannot read {shown}: {e}"))?;
    RecordingReader::new(file).with_context(|| shown.to_string())
}

impl<R: Read> RecordingReader<R> {
    pub fn new(mut input: R) -> Result<Self> {
        let mut head = [0u8; FILE_HEADER_LEN];
        read_full(&mut input, &mut head)
            .ok()
            .filter(|&n| n == FILE_HEADER_LEN)
            .ok_or_else(|| anyhow!("not an ebtop recording (too short)"))?;
        if &head[..8] != MAGIC {
            bail!("not an ebtop recording (no EBTOPREC signature)");
        }
        let major = u16::from_le_bytes([head[8], head[9]]);
        let minor = u16::from_le_bytes([head[10], head[11]]);
        if major != MAJOR {
            bail!(
                "recording format {major}.{minor} is not readable by this ebtop (reads {MAJOR}.x): \
                 use the ebtop version that wrote it, or a newer one"
            );
        }
        let len = u32::from_le_bytes([head[12], head[13], head[14], head[15]]) as usize;
        if len > MAX_FRAME {
            bail!("corrupt recording header (length {len})");
        }
        let mut json = vec![0u8; len];
        if read_full(&mut input, &mut json)? != len {
            bail!("recording header is cut short");
        }
        let header: RecordingHeader =
            serde_json::from_slice(&json).map_err(|e| anyhow!("corrupt recording header: {e}"))?;
        Ok(RecordingReader {
            header,
            minor,
            input,
            buf: Vec::new(),
            pos: 0,
            eof: false,
            stats: ReadStats::default(),
        })
    }

    /// Ensures `n` bytes are buffered from `pos`; false at end of input.
    fn fill(&mut self, n: usize) -> std::io::Result<bool> {
        if self.buf.len() - self.pos >= n {
            return Ok(true);
        }
        if self.pos > 0 {
            self.buf.drain(..self.pos);
            self.pos = 0;
        }
        while self.buf.len() < n && !self.eof {
            let want = (n - self.buf.len()).max(1 << 20);
            let old = self.buf.len();
            self.buf.resize(old + want, 0);
            let got = read_full(&mut self.input, &mut self.buf[old..])?;
            self.buf.truncate(old + got);
            if got < want {
                self.eof = true;
            }
        }
        Ok(self.buf.len() >= n)
    }

    /// Next whole, valid frame's records (decompressed), or None at the end.
    fn next_frame(&mut self) -> Result<Option<Vec<u8>>> {
        loop {
            if !self.fill(FRAME_HEADER_LEN)? {
                self.stats.truncated_bytes += (self.buf.len() - self.pos) as u64;
                self.pos = self.buf.len();
                return Ok(None);
            }
            let h = &self.buf[self.pos..self.pos + FRAME_HEADER_LEN];
            let word = |i: usize| u32::from_le_bytes([h[i], h[i + 1], h[i + 2], h[i + 3]]) as usize;
            let (clen, rlen, crc) = (word(4), word(8), word(12) as u32);
            if &h[..4] != FRAME_MAGIC || clen > MAX_FRAME || rlen > MAX_FRAME {
                self.resync()?;
                continue;
            }
            if !self.fill(FRAME_HEADER_LEN + clen)? {
                self.stats.truncated_bytes += (self.buf.len() - self.pos) as u64;
                self.pos = self.buf.len();
                return Ok(None);
            }
            let body = &self.buf[self.pos + FRAME_HEADER_LEN..self.pos + FRAME_HEADER_LEN + clen];
            let ok = crc32fast::hash(body) == crc;
            let raw = if ok {
                zstd::bulk::decompress(body, rlen)
                    .ok()
                    .filter(|r| r.len() == rlen)
            } else {
                None
            };
            match raw {
                Some(raw) => {
                    self.pos += FRAME_HEADER_LEN + clen;
                    self.stats.frames += 1;
                    return Ok(Some(raw));
                }
                None => self.resync()?,
            }
        }
    }

    /// The frame at `pos` is corrupt: count it and move to the next frame signature.
    fn resync(&mut self) -> Result<()> {
        self.stats.corrupt_frames += 1;
        self.pos += 1;
        loop {
            if let Some(i) = self.buf[self.pos..]
                .windows(FRAME_MAGIC.len())
                .position(|w| w == FRAME_MAGIC)
            {
                self.pos += i;
                break;
            }
            // Keep the last 3 bytes: a signature may straddle the refill.
            let keep = (self.buf.len() - self.pos).min(FRAME_MAGIC.len() - 1);
            self.stats.skipped_bytes += (self.buf.len() - self.pos - keep) as u64;
            self.pos = self.buf.len() - keep;
            if !self.fill(keep + 1)? {
                self.stats.skipped_bytes += (self.buf.len() - self.pos) as u64;
                self.pos = self.buf.len();
                return Ok(());
            }
        }
        Ok(())
    }

    /// Calls `f` for every item in order; stops early if `f` returns an error.
    pub fn for_each(&mut self, mut f: impl FnMut(Item<'_>) -> Result<()>) -> Result<()> {
        while let Some(frame) = self.next_frame()? {
            let mut p = 0usize;
            while p < frame.len() {
                if frame.len() - p < 5 {
                    self.stats.bad_records += 1;
                    break;
                }
                let kind = frame[p];
                let len =
                    u32::from_le_bytes([frame[p + 1], frame[p + 2], frame[p + 3], frame[p + 4]])
                        as usize;
                p += 5;
                if len > frame.len() - p {
                    self.stats.bad_records += 1;
                    break;
                }
                let body = &frame[p..p + len];
                p += len;
                match kind {
                    KIND_EVENT => f(Item::Event(body))?,
                    KIND_PROCESS => match serde_json::from_slice(body) {
                        Ok(v) => f(Item::Process(v))?,
                        Err(_) => self.stats.bad_records += 1,
                    },
                    KIND_INTERVAL => match serde_json::from_slice(body) {
                        Ok(v) => f(Item::Interval(v))?,
                        Err(_) => self.stats.bad_records += 1,
                    },
                    KIND_END => match serde_json::from_slice(body) {
                        Ok(v) => f(Item::End(v))?,
                        Err(_) => self.stats.bad_records += 1,
                    },
                    KIND_FLOWS | KIND_FLOWS_LATER => {
                        match serde_json::from_slice::<RecordedFlows>(body) {
                            Ok(RecordedFlows {
                                mut report,
                                continued,
                            }) => {
                                report.upgrade();
                                report.more |= continued;
                                f(Item::Flows(Box::new(report)))?
                            }
                            Err(_) => self.stats.bad_records += 1,
                        }
                    }
                    KIND_PROC_EVENT => f(Item::ProcEvent(body))?,
                    _ => self.stats.unknown_records += 1,
                }
            }
        }
        Ok(())
    }
}

fn read_full(r: &mut impl Read, buf: &mut [u8]) -> std::io::Result<usize> {
    let mut n = 0;
    while n < buf.len() {
        match r.read(&mut buf[n..]) {
            Ok(0) => break,
            Ok(k) => n += k,
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(n)
}
