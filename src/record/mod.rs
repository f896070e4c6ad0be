//! Recordings (`-w FILE`, `-r FILE`): what the probes delivered, replayable offline through the
//! same pipeline. Format (docs/recording.md):
//!
//! ```text
//! "EBTOPREC" major:u16 minor:u16 header_len:u32 header:JSON
//! then frames: "EBFR" compressed_len:u32 raw_len:u32 crc32:u32 zstd(records)
//! record: kind:u8 len:u32 bytes   (kind 1 raw kernel record, 2 process JSON,
//!                                   3 interval JSON, 4 end JSON; unknown kinds are skipped)
//! ```
//! Frames are independent, so a truncated file replays up to its last whole frame and a corrupt
//! frame is skipped and counted.

pub mod reader;
pub mod writer;

use serde::{Deserialize, Serialize};

use crate::procinfo::ProcInfo;
use crate::session::{Filters, KernelCounters, SessionMeta};

pub const MAGIC: &[u8; 8] = b"EBTOPREC";
pub const FRAME_MAGIC: &[u8; 4] = b"EBFR";
pub const MAJOR: u16 = 1;
pub const MINOR: u16 = 0;
pub const FILE_HEADER_LEN: usize = 16;
pub const FRAME_HEADER_LEN: usize = 16;
/// Largest frame a reader accepts (a corrupt length must not allocate gigabytes).
pub const MAX_FRAME: usize = 64 << 20;

pub const KIND_EVENT: u8 = 1;
pub const KIND_PROCESS: u8 = 2;
pub const KIND_INTERVAL: u8 = 3;
pub const KIND_END: u8 = 4;

/// The options of the recording run.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RecordOptions {
    pub snaplen: u32,
    pub filters: Filters,
    pub capture_all: bool,
    pub delay_ns: u64,
}

/// A socket open when recording started (from /proc/PID/fd).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct OpenSocket {
    pub pid: u32,
    pub inode: u64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RecordingHeader {
    pub meta: SessionMeta,
    pub options: RecordOptions,
    /// Processes running at start.
    #[serde(default)]
    pub processes: Vec<ProcInfo>,
    #[serde(default)]
    pub sockets: Vec<OpenSocket>,
}

/// Periodic kernel counters, so a replay reports losses exactly when the live run did.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct IntervalRecord {
    pub mono_ns: u64,
    pub kernel: KernelCounters,
}

/// Written last by a recording that ended normally.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EndRecord {
    pub duration_ns: u64,
    pub kernel: KernelCounters,
    /// Events the writer thread could not keep up with (never expected; counted if it happens).
    pub dropped_events: u64,
}

/// Processes and their sockets from /proc, for the header. Bounded; unreadable entries skipped.
pub fn scan_proc(max_procs: usize) -> (Vec<ProcInfo>, Vec<OpenSocket>) {
    let mut procs = Vec::new();
    let mut sockets = Vec::new();
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return (procs, sockets);
    };
    for entry in dir.flatten() {
        if procs.len() >= max_procs {
            break;
        }
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|s| s.parse::<u32>().ok())
        else {
            continue;
        };
        let comm = std::fs::read_to_string(format!("/proc/{pid}/comm")).unwrap_or_default();
        procs.push(ProcInfo::read(pid, comm.trim_end()));
        if let Ok(fds) = std::fs::read_dir(format!("/proc/{pid}/fd")) {
            for fd in fds.flatten() {
                if let Ok(target) = std::fs::read_link(fd.path()) {
                    let t = target.to_string_lossy();
                    if let Some(ino) = t.strip_prefix("socket:[").and_then(|s| s.strip_suffix(']'))
                    {
                        if let Ok(inode) = ino.parse() {
                            sockets.push(OpenSocket { pid, inode });
                        }
                    }
                }
            }
        }
    }
    (procs, sockets)
}
