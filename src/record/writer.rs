//! Writes a recording on its own thread: the capture loop only appends to a batch; full batches
//! travel over a bounded channel to the writer, which compresses and writes whole frames.

use std::fs::{File, OpenOptions};
use std::io::{BufWriter, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::mpsc::{sync_channel, SyncSender, TrySendError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use anyhow::{anyhow, Context, Result};

use super::*;

/// A frame is cut at this many raw bytes or this age, whichever comes first: bounds what a
/// crash can lose and what replay must buffer.
const FRAME_BYTES: usize = 1 << 20;
/// Flows per kind-5 record: ~1 KB of JSON each, so a record stays near a frame's size.
pub const FLOWS_PER_RECORD: usize = 1024;
const FRAME_AGE: Duration = Duration::from_millis(500);
/// Frames in flight to the writer thread (×1 MiB).
const CHANNEL_FRAMES: usize = 64;

#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct WriterStats {
    pub frames: u64,
    pub events: u64,
    pub raw_bytes: u64,
    pub file_bytes: u64,
    /// Events dropped because the writer thread fell behind.
    pub dropped_events: u64,
}

pub struct Recorder {
    path: PathBuf,
    tx: Option<SyncSender<Vec<u8>>>,
    thread: Option<JoinHandle<Result<(u64, u64)>>>,
    batch: Vec<u8>,
    batch_events: u64,
    batch_started: Instant,
    stats: WriterStats,
}

/// The file header: magic, version, the header JSON.
pub(crate) fn encode_header(header: &RecordingHeader) -> serde_json::Result<Vec<u8>> {
    let json = serde_json::to_vec(header)?;
    let mut out = Vec::with_capacity(FILE_HEADER_LEN + json.len());
    out.extend_from_slice(MAGIC);
    out.extend_from_slice(&MAJOR.to_le_bytes());
    out.extend_from_slice(&MINOR.to_le_bytes());
    out.extend_from_slice(&(json.len() as u32).to_le_bytes());
    out.extend_from_slice(&json);
    Ok(out)
}

pub(crate) fn encode_frame(raw: &[u8]) -> std::io::Result<Vec<u8>> {
    let compressed = zstd::bulk::compress(raw, 1)?;
    let mut out = Vec::with_capacity(FRAME_HEADER_LEN + compressed.len());
    out.extend_from_slice(FRAME_MAGIC);
    out.extend_from_slice(&(compressed.len() as u32).to_le_bytes());
    out.extend_from_slice(&(raw.len() as u32).to_le_bytes());
    out.extend_from_slice(&crc32fast::hash(&compressed).to_le_bytes());
    out.extend_from_slice(&compressed);
    Ok(out)
}

impl Recorder {
    /// Creates `path` with mode 0600 (payloads may hold secrets); refuses an existing file
    /// unless `force`.
    pub fn create(path: &Path, header: &RecordingHeader, force: bool) -> Result<Recorder> {
        let mut opts = OpenOptions::new();
        opts.write(true).mode(0o600);
        if force {
            opts.create(true).truncate(true);
        } else {
            opts.create_new(true);
        }
        let file: File = opts.open(path).map_err(|e| {
            if e.kind() == std::io::ErrorKind::AlreadyExists {
                anyhow!(
                    "{} exists: choose another name or add --force to overwrite it",
                    path.display()
                )
            } else {
                anyhow!("cannot create recording {}: {e}", path.display())
            }
        })?;
        // `mode` applies only when the file is created: an overwritten one gets it here.
        use std::os::unix::fs::PermissionsExt;
        file.set_permissions(std::fs::Permissions::from_mode(0o600))
            .with_context(|| format!("cannot restrict {} to mode 0600", path.display()))?;
        let mut out = BufWriter::with_capacity(1 << 20, file);
        let head = encode_header(header)?;
        out.write_all(&head)?;
        out.flush()
            .with_context(|| format!("writing recording {}", path.display()))?;
        let (tx, rx) = sync_channel::<Vec<u8>>(CHANNEL_FRAMES);
        let thread = std::thread::Builder::new()
            .name("ebtop-recorder".into())
            .spawn(move || -> Result<(u64, u64)> {
                let mut frames = 0u64;
                let mut bytes = head.len() as u64;
                for raw in rx {
                    let frame = encode_frame(&raw)?;
                    out.write_all(&frame)?;
                    // Each frame reaches the file whole, so a reader sees only whole frames
                    // (plus at most one partial frame at the end).
                    out.flush()?;
                    frames += 1;
                    bytes += frame.len() as u64;
                }
                out.into_inner().map_err(|e| e.into_error())?.sync_all()?;
                Ok((frames, bytes))
            })?;
        Ok(Recorder {
            path: path.to_owned(),
            tx: Some(tx),
            thread: Some(thread),
            batch: Vec::with_capacity(FRAME_BYTES + 64 * 1024),
            batch_events: 0,
            batch_started: Instant::now(),
            stats: WriterStats::default(),
        })
    }

    pub(super) fn push(&mut self, kind: u8, bytes: &[u8]) {
        if self.batch.is_empty() {
            self.batch_started = Instant::now();
        }
        self.batch.push(kind);
        self.batch
            .extend_from_slice(&(bytes.len() as u32).to_le_bytes());
        self.batch.extend_from_slice(bytes);
        if self.batch.len() >= FRAME_BYTES {
            self.cut_frame();
        }
    }

    /// One raw kernel record, as delivered.
    pub fn event(&mut self, raw: &[u8]) {
        self.batch_events += 1;
        self.push(KIND_EVENT, raw);
    }

    /// One raw process exec/exit record, as delivered.
    pub fn proc_event(&mut self, raw: &[u8]) {
        self.push(KIND_PROC_EVENT, raw);
    }

    pub fn process(&mut self, info: &ProcInfo) {
        if let Ok(j) = serde_json::to_vec(info) {
            self.push(KIND_PROCESS, &j);
        }
    }

    pub fn interval(&mut self, rec: &IntervalRecord) {
        if let Ok(j) = serde_json::to_vec(rec) {
            self.push(KIND_INTERVAL, &j);
        }
    }

    /// The interval's flow report, or its first part (`more`: the others follow the
    /// interval's record, `flows_later`), in records of at most [`FLOWS_PER_RECORD`] flows.
    pub fn flows(&mut self, report: &crate::flows::FlowReport) {
        self.push_flow_records(KIND_FLOWS, report.first_parts(FLOWS_PER_RECORD));
    }

    /// A later part of the flow report of the interval recorded last (kind 7).
    pub fn flows_later(&mut self, part: &crate::flows::FlowReport) {
        self.push_flow_records(KIND_FLOWS_LATER, part.parts(FLOWS_PER_RECORD));
    }

    fn push_flow_records(&mut self, kind: u8, records: Vec<crate::flows::FlowReportPart<'_>>) {
        for record in records {
            if let Ok(j) = serde_json::to_vec(&record) {
                self.push(kind, &j);
            }
        }
    }

    /// Cuts a frame if the current one is old enough (call once per poll batch).
    pub fn tick(&mut self) {
        if !self.batch.is_empty() && self.batch_started.elapsed() >= FRAME_AGE {
            self.cut_frame();
        }
    }

    /// Ends the current frame now (also done by size and age).
    pub fn cut_frame(&mut self) {
        if self.batch.is_empty() {
            return;
        }
        let raw = std::mem::replace(&mut self.batch, Vec::with_capacity(FRAME_BYTES + 64 * 1024));
        let events = std::mem::take(&mut self.batch_events);
        let len = raw.len() as u64;
        match self.tx.as_ref().map(|tx| tx.try_send(raw)) {
            Some(Ok(())) => {
                self.stats.events += events;
                self.stats.raw_bytes += len;
            }
            Some(Err(TrySendError::Full(_))) | Some(Err(TrySendError::Disconnected(_))) | None => {
                self.stats.dropped_events += events;
            }
        }
    }

    pub fn dropped_events(&self) -> u64 {
        self.stats.dropped_events
    }

    /// Writes the end record, waits for the writer and returns what was written.
    pub fn finish(mut self, end: &EndRecord) -> Result<WriterStats> {
        let mut end = end.clone();
        self.cut_frame();
        end.dropped_events = self.stats.dropped_events;
        if let Ok(j) = serde_json::to_vec(&end) {
            self.push(KIND_END, &j);
        }
        // The end frame must not be dropped: block for it.
        let raw = std::mem::take(&mut self.batch);
        if let Some(tx) = self.tx.take() {
            let _ = tx.send(raw);
        }
        let (frames, bytes) = self
            .thread
            .take()
            .expect("finish runs once")
            .join()
            .map_err(|_| anyhow!("the recording thread panicked"))?
            .with_context(|| format!("writing recording {}", self.path.display()))?;
        self.stats.frames = frames;
        self.stats.file_bytes = bytes;
        Ok(self.stats)
    }
}
