//! Writes a recording on its own thread: the capture loop only appends to a batch; full batches
//! travel over a bounded channel to the writer, which compresses and writes whole frames.

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::mpsc::{sync_channel, SyncSender, TrySendError};
use std::sync::{Arc, OnceLock};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context, Result};

use super::*;

/// A frame is cut at this many raw bytes or this age, whichever comes first: bounds what a
/// crash can lose and what replay must buffer.
const FRAME_BYTES: usize = 1 << 20;
/// Flows per kind-5 record: ~1 KB of JSON each, so a record stays near a frame's size.
pub const FLOWS_PER_RECORD: usize = 1024;
const FRAME_AGE: Duration = Duration::from_millis(500);
/// Frames in flight to the writer thread (×1 MiB).
const CHANNEL_FRAMES: usize = 64;

#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct WriterStats {
    pub frames: u64,
    pub events: u64,
    pub raw_bytes: u64,
    pub file_bytes: u64,
    /// Events dropped because the writer thread fell behind (or writing had failed).
    pub dropped_events: u64,
    /// Writing failed: the recording ends with its last whole frame.
    pub failure: Option<RecordingFailure>,
}

pub struct Recorder {
    path: PathBuf,
    tx: Option<SyncSender<Vec<u8>>>,
    thread: Option<JoinHandle<Result<(u64, u64)>>>,
    batch: Vec<u8>,
    batch_events: u64,
    batch_started: Instant,
    stats: WriterStats,
    /// Set once by the writer thread when writing failed (ENOSPC, EIO): the recording then
    /// ends with its last whole frame; nothing more is written.
    failure: Arc<OnceLock<RecordingFailure>>,
    failure_taken: bool,
}

/// Writing a recording failed: what the user is told, at once and at the end.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecordingFailure {
    pub path: PathBuf,
    /// The system's words (`No space left on device (os error 28)`).
    pub error: String,
    /// Whole frames in the file, and its length, after the failure (the partial frame cut).
    pub frames: u64,
    pub bytes: u64,
}

impl std::fmt::Display for RecordingFailure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "writing recording {} failed: {}; it ends with its last whole frame ({} frames, {} \
             bytes) and replays; stopping",
            self.path.display(),
            self.error,
            self.frames,
            self.bytes
        )
    }
}

impl std::error::Error for RecordingFailure {}

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

thread_local! {
    /// A compression context per thread (level 1), reused frame after frame: creating one
    /// per frame was ~5% of the recording fuzz target's time per input.
    static COMPRESSOR: std::cell::RefCell<Option<zstd::bulk::Compressor<'static>>> =
        const { std::cell::RefCell::new(None) };
}

pub(crate) fn encode_frame(raw: &[u8]) -> std::io::Result<Vec<u8>> {
    let compressed = COMPRESSOR.with(|c| {
        let mut slot = c.borrow_mut();
        let c = match &mut *slot {
            Some(c) => c,
            empty => empty.insert(zstd::bulk::Compressor::new(1)?),
        };
        c.compress(raw)
    })?;
    let mut out = Vec::with_capacity(FRAME_HEADER_LEN + compressed.len());
    out.extend_from_slice(FRAME_MAGIC);
    out.extend_from_slice(&(compressed.len() as u32).to_le_bytes());
    out.extend_from_slice(&(raw.len() as u32).to_le_bytes());
    out.extend_from_slice(&crc32fast::hash(&compressed).to_le_bytes());
    out.extend_from_slice(&compressed);
    Ok(out)
}

/// What is at a path `-w` was given, looked at without following a link.
fn refuse_unless_replaceable(path: &Path, force: bool) -> Result<bool> {
    use std::os::unix::fs::FileTypeExt;
    let shown = path.display();
    let md = match std::fs::symlink_metadata(path) {
        Ok(md) => md,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(false),
        Err(e) => bail!("cannot write recording {shown}: {e}"),
    };
    let ft = md.file_type();
    if ft.is_symlink() {
        bail!(
            "{shown} is a symbolic link: ebtop never writes a recording through a link (with \
             --force neither); name a file in a directory you trust"
        );
    }
    if !ft.is_file() {
        let what = if ft.is_dir() {
            "a directory"
        } else if ft.is_char_device() {
            "a character device"
        } else if ft.is_block_device() {
            "a block device"
        } else if ft.is_fifo() {
            "a FIFO (named pipe)"
        } else {
            "a socket"
        };
        bail!("{shown} is {what}: -w writes regular files only (with --force too)");
    }
    if !force {
        bail!("{shown} exists: choose another name or add --force to overwrite it");
    }
    // Only a recording (or an empty file) is replaced: --force is no way to clobber a file
    // of another kind by a slip of the keyboard.
    let mut magic = [0u8; 8];
    let n = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_NOCTTY)
        .open(path)
        .and_then(|mut f| {
            use std::io::Read;
            f.read(&mut magic)
        })
        .with_context(|| format!("cannot read {shown} to see what --force would replace"))?;
    let a_recording = n == MAGIC.len() && magic == *MAGIC;
    if n > 0 && !a_recording {
        bail!(
            "{shown} exists and is not an ebtop recording: --force replaces recordings only; \
             remove it or choose another name"
        );
    }
    Ok(true)
}

/// A new file at `path`, created exclusively (never an existing file, never through a
/// link) with mode 0600.
fn create_new(path: &Path) -> std::io::Result<File> {
    OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(path)
}

/// A random name for the new file that replaces `path` (`.NAME.XXXXXXXXXXXXXXXX.tmp`, in
/// the same directory, so the rename is atomic).
fn temp_beside(path: &Path) -> Result<PathBuf> {
    let name = path
        .file_name()
        .ok_or_else(|| anyhow!("{} names no file", path.display()))?;
    let mut random = [0u8; 8];
    // SAFETY: getrandom writes at most `random.len()` bytes into the buffer it is given.
    let got = unsafe { libc::getrandom(random.as_mut_ptr().cast(), random.len(), 0) };
    if got != random.len() as isize {
        bail!(
            "cannot pick a name for the new recording: {}",
            std::io::Error::last_os_error()
        );
    }
    let mut tmp = std::ffi::OsString::from(".");
    tmp.push(name);
    tmp.push(format!(".{:016x}.tmp", u64::from_le_bytes(random)));
    Ok(path.with_file_name(tmp))
}

impl Recorder {
    /// Creates `path` as a new file with mode 0600 (payloads may hold secrets), never through
    /// a symbolic link and never over anything but a regular file. An existing file is
    /// refused unless `force`, and then only a recording (or an empty file) is replaced: by a
    /// new file of a random name in the same directory, renamed over it. The existing file's
    /// inode is never opened for writing, truncated or chmod-ed (docs/security.md).
    pub fn create(path: &Path, header: &RecordingHeader, force: bool) -> Result<Recorder> {
        let shown = path.display();
        let replace = refuse_unless_replaceable(path, force)?;
        let head = encode_header(header)?;
        let (file, written_at) = if replace {
            let mut tries = 0;
            loop {
                let tmp = temp_beside(path)?;
                match create_new(&tmp) {
                    Ok(f) => break (f, Some(tmp)),
                    Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists && tries < 8 => {
                        tries += 1
                    }
                    Err(e) => bail!("cannot create a new recording beside {shown}: {e}"),
                }
            }
        } else {
            let f = create_new(path).map_err(|e| {
                if e.kind() == std::io::ErrorKind::AlreadyExists {
                    anyhow!(
                        "{shown} exists (it appeared just now): choose another name or add \
                         --force to overwrite it"
                    )
                } else {
                    anyhow!("cannot create recording {shown}: {e}")
                }
            })?;
            (f, None)
        };
        let mut file = file;
        let ready = file
            .write_all(&head)
            .with_context(|| format!("writing recording {shown}"))
            .and_then(|()| match &written_at {
                Some(tmp) => std::fs::rename(tmp, path)
                    .with_context(|| format!("cannot replace {shown} with the new recording")),
                None => Ok(()),
            });
        if let Err(e) = ready {
            let _ = std::fs::remove_file(written_at.as_deref().unwrap_or(path));
            return Err(e);
        }
        let (tx, rx) = sync_channel::<Vec<u8>>(CHANNEL_FRAMES);
        let failure = Arc::new(OnceLock::new());
        let failed = Arc::clone(&failure);
        let owned = path.to_owned();
        let thread = std::thread::Builder::new()
            .name("ebtop-recorder".into())
            .spawn(move || -> Result<(u64, u64)> {
                let mut frames = 0u64;
                let mut bytes = head.len() as u64;
                let mut error = None;
                for raw in rx.iter() {
                    // Each frame reaches the file whole (one write of the encoded frame), so a
                    // reader sees only whole frames (plus at most one partial frame at the end).
                    match encode_frame(&raw).and_then(|frame| {
                        file.write_all(&frame)?;
                        Ok(frame.len() as u64)
                    }) {
                        Ok(n) => {
                            frames += 1;
                            bytes += n;
                        }
                        Err(e) => {
                            error = Some(e);
                            break;
                        }
                    }
                }
                if error.is_none() {
                    if let Err(e) = file.sync_all() {
                        error = Some(e);
                    }
                }
                if let Some(e) = error {
                    // The partial frame goes, so the file ends with its last whole frame
                    // (cutting frees space: it works on a full disk).
                    let _ = file.set_len(bytes);
                    let _ = file.sync_all();
                    let _ = failed.set(RecordingFailure {
                        path: owned,
                        error: e.to_string(),
                        frames,
                        bytes,
                    });
                    // What the capture side still sends is dropped (it counts it).
                    for _ in rx.iter() {}
                }
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
            failure,
            failure_taken: false,
        })
    }

    /// The writing failure, the first time it is asked after it happened (to be shown at
    /// once); None before and after.
    pub fn take_failure(&mut self) -> Option<RecordingFailure> {
        if self.failure_taken {
            return None;
        }
        let f = self.failure.get().cloned()?;
        self.failure_taken = true;
        Some(f)
    }

    /// The writing failure, if any.
    pub fn failure(&self) -> Option<&RecordingFailure> {
        self.failure.get()
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

    /// An interval's profile (kind 8), in records of bounded size.
    pub fn profile(&mut self, p: &crate::profile::Profile) {
        for record in crate::profile::recorded::records(p) {
            if let Ok(j) = serde_json::to_vec(&record) {
                self.push(KIND_PROFILE, &j);
            }
        }
    }

    /// A triggered profile's start or end at the interval's end `mono_ns` (kind 9; after the
    /// interval's kind 3 record).
    pub fn profile_trigger(&mut self, mono_ns: u64, e: &crate::profile::trigger::TriggerEvent) {
        let rec = crate::profile::trigger::RecordOut { mono_ns, event: e };
        if let Ok(j) = serde_json::to_vec(&rec) {
            self.push(KIND_PROFILE_TRIGGER, &j);
        }
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
        if self.failure.get().is_some() {
            self.stats.dropped_events += events;
            return;
        }
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
            .ok_or_else(|| anyhow!("the recording was finished twice"))?
            .join()
            .map_err(|_| anyhow!("the recording thread panicked"))?
            .with_context(|| format!("writing recording {}", self.path.display()))?;
        self.stats.frames = frames;
        self.stats.file_bytes = bytes;
        self.stats.failure = self.failure.get().cloned();
        Ok(self.stats)
    }
}
