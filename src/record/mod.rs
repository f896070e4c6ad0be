//! Recordings (`-w FILE`, `-r FILE`): what the probes delivered, replayable offline through the
//! same pipeline. Format (docs/recording.md):
//!
//! ```text
//! "EBTOPREC" major:u16 minor:u16 header_len:u32 header:JSON
//! then frames: "EBFR" compressed_len:u32 raw_len:u32 crc32:u32 zstd(records)
//! record: kind:u8 len:u32 bytes   (kind 1 raw kernel record, 2 process JSON,
//!                                   3 interval JSON, 4 end JSON, 5 flow table JSON,
//!                                   6 raw process exec/exit record, 7 a later flow part,
//!                                   8 an interval's profile JSON, 9 a profile trigger JSON;
//!                                   unknown kinds are skipped)
//! ```
//! Frames are independent, so a truncated file replays up to its last whole frame and a corrupt
//! frame is skipped and counted.

#[cfg(any(test, feature = "test-support"))]
pub mod fuzzing;
pub mod limits;
pub mod read_stats;
pub mod reader;
pub mod writer;

pub use read_stats::ReadStats;

use serde::{Deserialize, Serialize};

use crate::filters::Filters;
use crate::kernel_counters::KernelCounters;
use crate::procinfo::ProcInfo;
use crate::session_meta::SessionMeta;

pub const MAGIC: &[u8; 8] = b"EBTOPREC";
pub const FRAME_MAGIC: &[u8; 4] = b"EBFR";
pub const MAJOR: u16 = 1;
/// 1: kind 5 (the flow table's report per interval). 2: kind 6 (process exec/exit records).
/// 3: kind 1 records may name syscall 16 (`other`: socket-layer capture, length only), the
/// interval's kernel counters carry `missed_runs`. 4: an exec's kind 6 record ends with the
/// file's identity (`struct ebtop_exe_id`). 5: an interval's kind 5 report may come in parts
/// (`more: true` on all but the last), read back as one. 6: a report streamed in parts: its
/// first part as kind 5 (the last record `continued: true` in place of `more`, so an older
/// reader takes it for the whole report), the others after the interval's kind 3, as kind 7.
/// 7: a kind 1 record may carry a tail, the syscall's last bytes (flag 8, `tail_len` at
/// offset 68, its bytes after the payload): an older reader takes the record for a head cut at
/// `cap_len`, as records always were. 8: kind 8 (an interval's profile, symbolized; several
/// records for one interval add up). 9: kind 9 (a `profile_trigger` event, after its interval's
/// kind 3 record; an older reader skips it). 10: a kind 1 data record of a Go program may name
/// its goroutine (flag 16, 8 bytes after the payload and the tail): an older reader ignores
/// them, as any bytes after a record's payload. 11: a kind 8 record may carry the reading's
/// off-CPU blocks with their bounds (`blocks`), and the header's options `serving_links`.
/// 12: a kind 1 record may be of kind 5 (`EBTOP_EV_GO_HTTP`: a Go net/http client probe, for
/// the call chains): an older reader counts it as a decode error and links no such call.
/// 13: a kind 1 data record may carry flag 32 (`EBTOP_F_REJOINED`: the first of its direction
/// since a CPU budget captured its connection again after a cut; its `seq` is past the bytes
/// shed): an older reader counts the jump as a gap.
/// 14: a kind 1 record of event kind 5 (`EBTOP_EV_GO_HTTP`) may say probe 4 (`EBTOP_GO_SPAWN`:
/// a goroutine's creation, the child's g in `seq`) or 5 (`EBTOP_GO_NEW_G`) in `total_len`: an
/// older reader ignores them (a probe it does not know) and links no started goroutine's call.
/// 15: a kind 1 record of event kind 5 may say probe 6 (`EBTOP_NGX_UPSTREAM_WRITE`: nginx's
/// `ngx_chain_writer` began, src/bpf/ngxchain.h; no goroutine, `seq` the upstream socket, 8
/// payload bytes the downstream socket): an older reader ignores it (a probe it does not
/// know) and links nginx's upstream calls by thread alone, as before.
pub const MINOR: u16 = 15;
pub const FILE_HEADER_LEN: usize = 16;
pub const FRAME_HEADER_LEN: usize = 16;
/// Largest frame a reader accepts (a corrupt length must not allocate gigabytes).
pub const MAX_FRAME: usize = limits::MAX_FRAME;

pub const KIND_EVENT: u8 = 1;
pub const KIND_PROCESS: u8 = 2;
pub const KIND_INTERVAL: u8 = 3;
pub const KIND_END: u8 = 4;
/// The flow table's report of one interval: read from kernel maps, not from events, so it is
/// recorded as the report itself.
pub const KIND_FLOWS: u8 = 5;
/// A process lifecycle record (exec, exit) as `procs.bpf.c` delivered it.
pub const KIND_PROC_EVENT: u8 = 6;
/// A later part of the flow report of the interval recorded last (kind 5 `continued`); the
/// same form as kind 5. Older readers skip it (an unknown kind): they show the first part.
pub const KIND_FLOWS_LATER: u8 = 7;
/// A part of an interval's profile (`--profile`), names not addresses
/// ([`crate::profile::recorded`]); those before an interval's record belong to it.
pub const KIND_PROFILE: u8 = 8;
/// A triggered profile's start or end (`profile_trigger`, [`crate::profile::trigger`]), written
/// after the kind 3 record of the interval whose end it happened at.
pub const KIND_PROFILE_TRIGGER: u8 = 9;

/// The options of the recording run.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RecordOptions {
    pub snaplen: u32,
    pub filters: Filters,
    pub capture_all: bool,
    pub delay_ns: u64,
    /// Off-CPU blocks are recorded with their bounds (kind 8 `blocks`, minor ≥ 11): a
    /// replay links them to the calls their threads served, as the live run did.
    #[serde(default)]
    pub serving_links: bool,
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
    for pid in crate::procfs::pids().take(max_procs) {
        procs.push(ProcInfo::read(pid, &crate::procfs::read_comm(pid)));
        sockets.extend(crate::procfs::socket_inodes(pid).map(|inode| OpenSocket { pid, inode }));
    }
    (procs, sockets)
}

#[cfg(test)]
mod tests {
    use super::reader::{Item, RecordingReader};
    use super::writer::Recorder;
    use super::*;
    use crate::session_meta::SessionMeta;

    fn header() -> RecordingHeader {
        RecordingHeader {
            meta: SessionMeta::this_host("live", 4096, Filters::default(), 0),
            options: RecordOptions::default(),
            processes: vec![],
            sockets: vec![],
        }
    }

    /// A recording with `frames` frames of 10 events each; events are `[frame, i, ...]`.
    fn write(path: &std::path::Path, frames: u8) {
        let mut r = Recorder::create(path, &header(), false).unwrap();
        for f in 0..frames {
            for i in 0..10u8 {
                r.event(&[f, i, 0xAA, 0xBB]);
            }
            r.cut_frame();
        }
        let stats = r
            .finish(&EndRecord {
                duration_ns: 5,
                kernel: KernelCounters::default(),
                dropped_events: 0,
            })
            .unwrap();
        assert_eq!(stats.events, frames as u64 * 10);
    }

    fn read(bytes: &[u8]) -> anyhow::Result<(Vec<Vec<u8>>, bool, ReadStats)> {
        let mut rd = RecordingReader::new(bytes)?;
        let mut events = Vec::new();
        let mut end = false;
        rd.for_each(|it| {
            match it {
                Item::Event(e) => events.push(e.to_vec()),
                Item::End(_) => end = true,
                _ => {}
            }
            Ok(())
        })?;
        Ok((events, end, rd.stats))
    }

    #[test]
    fn round_trip_mode_and_no_overwrite() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("a.ebt");
        write(&path, 3);
        use std::os::unix::fs::PermissionsExt;
        assert_eq!(
            std::fs::metadata(&path).unwrap().permissions().mode() & 0o777,
            0o600
        );
        let (events, end, stats) = read(&std::fs::read(&path).unwrap()).unwrap();
        assert_eq!(events.len(), 30);
        assert!(end);
        assert_eq!(stats.frames, 4);
        let err = Recorder::create(&path, &header(), false).err().unwrap();
        assert!(err.to_string().contains("--force"), "{err}");
        assert!(Recorder::create(&path, &header(), true).is_ok());
    }

    #[test]
    fn corrupt_frame_is_skipped_and_counted() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("a.ebt");
        write(&path, 3);
        let mut bytes = std::fs::read(&path).unwrap();
        // Find the second frame and flip a byte in its compressed body.
        let starts: Vec<usize> = bytes
            .windows(4)
            .enumerate()
            .filter(|(_, w)| w == FRAME_MAGIC)
            .map(|(i, _)| i)
            .collect();
        bytes[starts[1] + FRAME_HEADER_LEN + 3] ^= 0xff;
        let (events, end, stats) = read(&bytes).unwrap();
        assert_eq!(events.len(), 20);
        assert!(events.iter().all(|e| e[0] != 1), "frame 1 dropped whole");
        assert!(end);
        assert_eq!(stats.corrupt_frames, 1);
        // A corrupt frame header is skipped the same way.
        let mut bytes2 = std::fs::read(&path).unwrap();
        bytes2[starts[0]] = b'X';
        let (events, _, stats) = read(&bytes2).unwrap();
        assert_eq!(events.len(), 20);
        assert_eq!(stats.corrupt_frames, 1);
    }

    #[test]
    fn truncated_file_replays_whole_frames() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("a.ebt");
        write(&path, 3);
        let bytes = std::fs::read(&path).unwrap();
        let first_frame = bytes.windows(4).position(|w| w == FRAME_MAGIC).unwrap();
        for cut in first_frame..bytes.len() {
            let (events, end, stats) = read(&bytes[..cut]).unwrap();
            assert_eq!(events.len() % 10, 0, "only whole frames, cut at {cut}");
            assert!(!end || cut == bytes.len());
            assert!(stats.truncated_bytes > 0 || stats.frames * 10 >= events.len() as u64);
        }
    }

    #[test]
    fn wrong_magic_and_future_major_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("a.ebt");
        write(&path, 1);
        let mut bytes = std::fs::read(&path).unwrap();
        bytes[8] = 2; // major 2
        let err = read(&bytes).err().unwrap().to_string();
        assert!(err.contains("format 2.") && err.contains("newer"), "{err}");
        let err = read(b"PK\x03\x04 this is a zip file....")
            .err()
            .unwrap()
            .to_string();
        assert!(err.contains("not an ebtop recording"), "{err}");
        // Unknown record kinds (a newer minor version) are skipped.
        let mut r = Recorder::create(&dir.path().join("b.ebt"), &header(), false).unwrap();
        r.event(&[1]);
        r.push(200, b"a record of a kind from the future");
        r.event(&[2]);
        r.cut_frame();
        drop(r.finish(&EndRecord {
            duration_ns: 0,
            kernel: KernelCounters::default(),
            dropped_events: 0,
        }));
        let (events, _, stats) = read(&std::fs::read(dir.path().join("b.ebt")).unwrap()).unwrap();
        assert_eq!((events.len(), stats.unknown_records), (2, 1));
    }

    /// A flow report of more flows than a record holds is stored in parts and read back in
    /// parts that make the report it was (a burst of 200,000 connections made a single record
    /// larger than any frame a reader accepts: the replay skipped it as corrupt).
    #[test]
    fn a_large_flow_report_is_recorded_in_parts_and_read_back_whole() {
        use crate::flows::test_reports;
        let big = test_reports::numbered(77, 2500, 1200, 30);
        let parts = big.parts(writer::FLOWS_PER_RECORD);
        assert!(parts.len() > 3, "{} parts", parts.len());
        for p in &parts {
            assert!(serde_json::to_vec(p).unwrap().len() < MAX_FRAME / 16);
        }
        let small = &test_reports::fixture()[0];
        assert_eq!(
            serde_json::to_string(&small.parts(writer::FLOWS_PER_RECORD)[0]).unwrap(),
            serde_json::to_string(small).unwrap(),
            "a report that fits one record is stored as before"
        );

        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("big.ebt");
        let mut r = Recorder::create(&path, &header(), false).unwrap();
        r.flows(small);
        r.flows(&big);
        r.event(&[1]);
        drop(r.finish(&EndRecord {
            duration_ns: 0,
            kernel: KernelCounters::default(),
            dropped_events: 0,
        }));
        let (back, stats) = test_reports::recorded(&path);
        assert_eq!(back.len(), 2);
        assert_eq!(&back[0], small);
        assert_eq!(back[1], big);
        assert_eq!(stats.bad_records, 0);
    }

    /// The first part of a streamed report, as recorded before its interval's record, reads
    /// as a whole report to a reader that knows nothing of `continued` (minor 5: it then skips
    /// the later parts, kind 7, rather than adding them to the next interval's report).
    #[test]
    fn a_streamed_reports_first_part_is_a_whole_report_to_older_readers() {
        use crate::flows::{test_reports, FlowReport};
        let mut first = test_reports::numbered(5, 2_500, 0, 0);
        first.more = true;
        let records = first.first_parts(writer::FLOWS_PER_RECORD);
        assert_eq!(records.len(), 3);
        let as_read: Vec<FlowReport> = records
            .iter()
            .map(|p| serde_json::from_slice(&serde_json::to_vec(p).unwrap()).unwrap())
            .collect();
        let more: Vec<bool> = as_read.iter().map(|r| r.more).collect();
        assert_eq!(more, vec![true, true, false]);
        let last = serde_json::to_value(records.last().unwrap()).unwrap();
        assert_eq!(last["continued"], true);
    }

    #[test]
    fn arbitrary_bytes_never_panic_the_reader() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("a.ebt");
        write(&path, 2);
        let good = std::fs::read(&path).unwrap();
        let mut next = crate::xorshift::sequence(0x1234_5678_9abc_def0);
        for _ in 0..400 {
            let mut b = good.clone();
            for _ in 0..4 {
                let x = next();
                let i = (x as usize) % b.len();
                b[i] = (x >> 32) as u8;
            }
            let _ = read(&b);
        }
    }
}
