//! Reads recordings written by any ebtop of the same major version, from any machine: every
//! length is checked, a corrupt frame is skipped and counted, a truncated end is reported.

use std::fs::File;
use std::io::{ErrorKind, Read};
use std::path::Path;

use anyhow::{anyhow, bail, Context, Result};

use super::*;
use crate::session_meta::SessionMeta;

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
    /// A part of an interval's profile (those before an interval's record belong to it).
    Profile(Box<crate::profile::Profile>),
    /// A triggered profile's start or end at the end of the interval read last (its time).
    ProfileTrigger(u64, Box<crate::profile::trigger::TriggerEvent>),
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
    /// A window of the file: `buf[pos..]` not yet consumed.
    buf: Vec<u8>,
    pos: usize,
    eof: bool,
    /// `marks[k]`: the CRC-32 of `buf[..k * MARK_STEP]`, computed as far as needed, so the
    /// CRC of any range of the window costs O(MARK_STEP) ([`Self::range_crc`]).
    marks: Vec<u32>,
    pub stats: ReadStats,
}

/// File bytes read at a time.
const READ_CHUNK: usize = 1 << 20;
/// Window bytes per CRC mark.
const MARK_STEP: usize = 256;

/// The header as the file has it: its lists read within the caps.
#[derive(serde::Deserialize)]
struct WireHeader {
    meta: SessionMeta,
    options: RecordOptions,
    #[serde(default)]
    processes: limits::CappedSeq<ProcInfo, { limits::MAX_PROCESSES }>,
    #[serde(default)]
    sockets: limits::CappedSeq<OpenSocket, { limits::MAX_SOCKETS }>,
}

/// What a file that is not a regular one is, for the message refusing it.
fn file_kind(ft: std::fs::FileType) -> &'static str {
    use std::os::unix::fs::FileTypeExt;
    if ft.is_dir() {
        "a directory"
    } else if ft.is_fifo() {
        "a FIFO (named pipe)"
    } else if ft.is_char_device() {
        "a character device"
    } else if ft.is_block_device() {
        "a block device"
    } else if ft.is_socket() {
        "a socket"
    } else {
        "not a regular file"
    }
}

/// Opens `path` and reads its header; one clear error per way a file can be wrong. Only a
/// regular file is read (a FIFO or a device could feed bytes forever): it is opened without
/// blocking (a FIFO without a writer, a file under another process's lease) and checked on
/// the descriptor opened, not by name.
pub fn open(path: &Path) -> Result<RecordingReader<File>> {
    use std::os::unix::fs::OpenOptionsExt;
    let shown = path.display();
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_NOCTTY)
        .open(path)
        .map_err(|e| match e.raw_os_error() {
            Some(libc::EWOULDBLOCK) => anyhow!(
                "cannot read {shown}: another process holds a lease on it (it is being \
                 written): try again when it is done"
            ),
            _ => anyhow!("cannot read {shown}: {e}"),
        })?;
    let md = file
        .metadata()
        .map_err(|e| anyhow!("cannot read {shown}: {e}"))?;
    if !md.file_type().is_file() {
        bail!(
            "{shown} is {}, not an ebtop recording: -r reads regular files only",
            file_kind(md.file_type())
        );
    }
    if md.len() == 0 {
        bail!("{shown} is empty: not an ebtop recording (or nothing was recorded yet)");
    }
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
        if len > limits::MAX_HEADER {
            bail!(
                "corrupt recording header (it declares {len} bytes; at most {} are read)",
                limits::MAX_HEADER
            );
        }
        // Read before allocated: a header declaring more than the file holds costs nothing.
        let mut json = Vec::new();
        (&mut input).take(len as u64).read_to_end(&mut json)?;
        if json.len() != len {
            bail!("recording header is cut short");
        }
        let wire: WireHeader =
            serde_json::from_slice(&json).map_err(|e| anyhow!("corrupt recording header: {e}"))?;
        drop(json);
        let stats = ReadStats {
            capped_items: wire.processes.dropped + wire.sockets.dropped,
            ..ReadStats::default()
        };
        Ok(RecordingReader {
            header: RecordingHeader {
                meta: wire.meta,
                options: wire.options,
                processes: wire.processes.items,
                sockets: wire.sockets.items,
            },
            minor,
            input,
            buf: Vec::new(),
            pos: 0,
            eof: false,
            marks: Vec::new(),
            stats,
        })
    }

    /// Ensures `n` bytes are buffered from `pos`; false at end of input. The window is moved
    /// down only when at least half of it is consumed, so moving it costs no more than the
    /// bytes read (linear), and it holds at most about 2 × `n` + [`READ_CHUNK`] bytes.
    fn fill(&mut self, n: usize) -> std::io::Result<bool> {
        if self.buf.len() - self.pos >= n {
            return Ok(true);
        }
        if self.eof {
            return Ok(false);
        }
        if self.pos > 0 && self.pos >= self.buf.len() / 2 {
            self.buf.drain(..self.pos);
            self.pos = 0;
            self.marks.clear();
        }
        while self.buf.len() - self.pos < n && !self.eof {
            let want = (n - (self.buf.len() - self.pos)).max(READ_CHUNK);
            // Read into the buffer's spare room as the bytes come, not into a window zeroed
            // first: a short input (most fuzz inputs; a small recording) then costs what it
            // holds, not a megabyte of zeroes per fill (~85% of the fuzz target's time).
            let got = (&mut self.input)
                .take(want as u64)
                .read_to_end(&mut self.buf)?;
            if got < want {
                self.eof = true;
            }
        }
        Ok(self.buf.len() - self.pos >= n)
    }

    /// The CRC-32 of `buf[..x]`, from the marks (extended as needed).
    fn prefix_crc(&mut self, x: usize) -> u32 {
        let k = x / MARK_STEP;
        if self.marks.is_empty() {
            self.marks.push(0);
        }
        while self.marks.len() <= k {
            let i = self.marks.len();
            let mut h = crc32fast::Hasher::new_with_initial(self.marks[i - 1]);
            h.update(&self.buf[(i - 1) * MARK_STEP..i * MARK_STEP]);
            self.marks.push(h.finalize());
        }
        let mut h = crc32fast::Hasher::new_with_initial(self.marks[k]);
        h.update(&self.buf[k * MARK_STEP..x]);
        h.finalize()
    }

    /// The CRC-32 of `buf[a..b]` in O(MARK_STEP) (amortised): checking a frame claimed by a
    /// fake header costs the same however long it says it is, so a file of fake frame
    /// headers is read in time linear in its size.
    fn range_crc(&mut self, a: usize, b: usize) -> u32 {
        let (ca, cb) = (self.prefix_crc(a), self.prefix_crc(b));
        crc_shift(ca, (b - a) as u64) ^ cb
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
            let expands_too_much = rlen
                > clen
                    .saturating_mul(limits::MAX_EXPANSION)
                    .max(limits::MIN_EXPANSION_ALLOWED);
            if &h[..4] != FRAME_MAGIC
                || clen > limits::MAX_FRAME
                || rlen > limits::MAX_FRAME
                || expands_too_much
            {
                self.resync()?;
                continue;
            }
            if !self.fill(FRAME_HEADER_LEN + clen)? {
                // It claims more than the file holds: the last frame cut short, unless another
                // frame follows (then its length is damaged).
                if self.next_signature(self.pos + 1).is_some() {
                    self.resync()?;
                    continue;
                }
                self.stats.truncated_bytes += (self.buf.len() - self.pos) as u64;
                self.pos = self.buf.len();
                return Ok(None);
            }
            let body_at = self.pos + FRAME_HEADER_LEN;
            if self.range_crc(body_at, body_at + clen) != crc {
                self.resync()?;
                continue;
            }
            // The CRC vouches that these bytes were written as one frame: they are consumed
            // whole, decompressed or not (so no byte is decompressed twice).
            let raw =
                decompress(&self.buf[body_at..body_at + clen], rlen).filter(|r| r.len() == rlen);
            self.pos = body_at + clen;
            match raw {
                Some(raw) => {
                    self.stats.frames += 1;
                    return Ok(Some(raw));
                }
                None => {
                    self.stats.corrupt_frames += 1;
                    self.stats.skipped_bytes += (FRAME_HEADER_LEN + clen) as u64;
                }
            }
        }
    }

    /// Where the next frame signature at or after `from` is in the window.
    fn next_signature(&self, from: usize) -> Option<usize> {
        let hay = self.buf.get(from..)?;
        hay.windows(FRAME_MAGIC.len())
            .position(|w| w == FRAME_MAGIC)
            .map(|i| from + i)
    }

    /// The frame at `pos` is corrupt: count it and move to the next frame signature.
    fn resync(&mut self) -> Result<()> {
        self.stats.corrupt_frames += 1;
        let from = self.pos + 1;
        self.stats.skipped_bytes += 1;
        self.pos = from;
        loop {
            if let Some(i) = self.next_signature(self.pos) {
                self.stats.skipped_bytes += (i - self.pos) as u64;
                self.pos = i;
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
                    KIND_PROFILE => {
                        match serde_json::from_slice::<crate::profile::recorded::RecordIn>(body) {
                            Ok(rec) => {
                                let (profile, dropped) = rec.into_profile();
                                if dropped > 0 {
                                    self.stats.bad_records += 1;
                                }
                                f(Item::Profile(Box::new(profile)))?
                            }
                            Err(_) => self.stats.bad_records += 1,
                        }
                    }
                    KIND_PROFILE_TRIGGER => {
                        match serde_json::from_slice::<crate::profile::trigger::RecordIn>(body)
                            .ok()
                            .and_then(|r| r.into_event())
                        {
                            Some((mono_ns, e)) => f(Item::ProfileTrigger(mono_ns, Box::new(e)))?,
                            None => self.stats.bad_records += 1,
                        }
                    }
                    _ => self.stats.unknown_records += 1,
                }
            }
        }
        Ok(())
    }
}

/// `crc` as if followed by `n` zero bytes' worth of shift: `crc32(A ‖ B) = shift(crc32(A),
/// |B|) ^ crc32(B)` (zlib's `crc32_combine`), so `crc32(B)` follows from the CRCs of the
/// prefixes `A` and `A ‖ B`. Multiplication by x^(8n) modulo the CRC-32 polynomial, from a
/// table of x^(2^k): ≤ 64 products of 32 steps.
fn crc_shift(crc: u32, n: u64) -> u32 {
    const POLY: u32 = 0xedb8_8320;
    fn mult(a: u32, mut b: u32) -> u32 {
        let mut m = 1u32 << 31;
        let mut p = 0u32;
        while m != 0 {
            if a & m != 0 {
                p ^= b;
            }
            m >>= 1;
            b = if b & 1 != 0 { (b >> 1) ^ POLY } else { b >> 1 };
        }
        p
    }
    static X2N: std::sync::OnceLock<[u32; 32]> = std::sync::OnceLock::new();
    let table = X2N.get_or_init(|| {
        let mut t = [0u32; 32];
        let mut p = 1u32 << 30; // x^1
        for slot in &mut t {
            *slot = p;
            p = mult(p, p);
        }
        t
    });
    // x^(8n) = x^(n·2^3): the bits of n from k = 3.
    let mut p = 1u32 << 31; // x^0
    let (mut n, mut k) = (n, 3usize);
    while n != 0 {
        if n & 1 != 0 {
            p = mult(table[k & 31], p);
        }
        n >>= 1;
        k += 1;
    }
    mult(p, crc)
}

thread_local! {
    /// A decompression context per thread, reused frame after frame and reader after reader:
    /// creating one per frame was ~6% of the recording fuzz target's time per input.
    static DECOMPRESSOR: std::cell::RefCell<Option<zstd::bulk::Decompressor<'static>>> =
        const { std::cell::RefCell::new(None) };
}

/// A frame's bytes decompressed into at most `capacity` bytes (None: damaged, or larger).
fn decompress(frame: &[u8], capacity: usize) -> Option<Vec<u8>> {
    DECOMPRESSOR.with(|d| {
        let mut d = d.borrow_mut();
        if d.is_none() {
            *d = zstd::bulk::Decompressor::new().ok();
        }
        // Each frame is decompressed on its own: the context keeps no state from the last
        // one (a damaged frame included).
        d.as_mut()?.decompress(frame, capacity).ok()
    })
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn range_crcs_match_a_direct_hash() {
        let data: Vec<u8> = (0..5000u32)
            .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
            .collect();
        for (a, b) in [
            (0, 0),
            (0, 1),
            (3, 3000),
            (255, 257),
            (256, 512),
            (1000, 5000),
            (4999, 5000),
        ] {
            let mut r = RecordingReader {
                header: RecordingHeader {
                    meta: SessionMeta::this_host("t", 0, Default::default(), 0),
                    options: RecordOptions::default(),
                    processes: vec![],
                    sockets: vec![],
                },
                minor: MINOR,
                input: std::io::empty(),
                buf: data.clone(),
                pos: 0,
                eof: true,
                marks: vec![],
                stats: ReadStats::default(),
            };
            assert_eq!(r.range_crc(a, b), crc32fast::hash(&data[a..b]), "{a}..{b}");
        }
    }
}
