//! An interval's profile as a recording keeps it (`-w`, record kind 8): already symbolized —
//! frame names, not addresses — so `-r` shows the same profile without the binaries, the
//! kernel or BPF. Each record is self-contained (its own table of names) and holds at most
//! [`RECORD_BYTES`] of names and frames, so a large interval is several records; a replay adds
//! every record before an interval's record to that interval.
//!
//! The reader is untrusted input: every list is read within a cap ([`crate::record::limits`]),
//! a frame index outside the record's names drops its stack (counted), nothing it declares
//! sizes an allocation.

use std::collections::HashMap;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use super::{Block, Frame, Kind, Profile, ProfileLosses, StackKey, Tally};
use crate::record::limits::{CappedSeq, CappedString};

/// Bytes of names and frame indexes after which a record is cut (a frame of the recording
/// holds ~1 MiB; a record never nears the reader's 16 MiB frame cap).
pub const RECORD_BYTES: usize = 256 << 10;
/// Longest frame name kept (C++ templates and Rust closures run long).
pub const MAX_NAME: usize = 1024;
/// Names, stacks and processes one record may hold; frames per stack (127 user + 127
/// kernel, with room for the `[stack lost]` markers).
pub const MAX_NAMES: usize = 1 << 16;
pub const MAX_STACKS: usize = 1 << 16;
pub const MAX_PROCESSES: usize = 1 << 14;
pub const MAX_FRAMES: usize = 256;
/// Off-CPU blocks one record may hold (a reading holds at most
/// [`super::kernel::MAX_BLOCKS`], cut into records by size like its stacks).
pub const MAX_BLOCKS: usize = 1 << 16;

#[derive(Serialize)]
pub struct RecordOut<'a> {
    mono_ns: u64,
    period_ns: u64,
    hz: u32,
    off_cpu_min_ns: Option<u64>,
    losses: ProfileLosses,
    processes: Vec<ProcessOut<'a>>,
    names: Vec<&'a str>,
    stacks: Vec<StackOut>,
    /// The reading's off-CPU blocks with their bounds (format minor ≥ 11).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    blocks: Vec<BlockOut>,
}

#[derive(Serialize)]
struct BlockOut {
    pid: u32,
    tid: u32,
    start_ns: u64,
    end_ns: u64,
    kind: Kind,
    frames: Vec<u32>,
}

#[derive(Serialize)]
struct ProcessOut<'a> {
    pid: u32,
    comm: &'a str,
}

#[derive(Serialize)]
struct StackOut {
    pid: u32,
    /// The thread (`--profile-threads`; format minor ≥ 9).
    #[serde(skip_serializing_if = "Option::is_none")]
    tid: Option<u32>,
    kind: Kind,
    frames: Vec<u32>,
    count: u64,
    #[serde(skip_serializing_if = "is_zero")]
    ns: u64,
}

fn is_zero(v: &u64) -> bool {
    *v == 0
}

/// A record being filled: its names' indexes, the processes it names, its size so far.
struct Filling<'a> {
    cur: RecordOut<'a>,
    index: HashMap<&'a str, u32>,
    pids: HashMap<u32, ()>,
    bytes: usize,
}

impl<'a> Filling<'a> {
    /// Hands the record on and starts the next when it is full (by size, or `full`).
    fn roll_if(
        &mut self,
        full: bool,
        out: &mut Vec<RecordOut<'a>>,
        new: &impl Fn(bool) -> RecordOut<'a>,
    ) {
        if self.bytes >= RECORD_BYTES || full {
            out.push(std::mem::replace(&mut self.cur, new(false)));
            self.index.clear();
            self.pids.clear();
            self.bytes = 0;
        }
    }

    /// Names process `pid` in the record (once).
    fn process(&mut self, p: &'a Profile, pid: u32) {
        if self.pids.insert(pid, ()).is_none() {
            let comm = p.processes.get(&pid).map_or("", |pr| pr.comm.as_str());
            self.cur.processes.push(ProcessOut { pid, comm });
        }
    }

    /// A stack's frames as indexes into the record's names (each name written once).
    fn frames(&mut self, frames: &'a [Frame]) -> Vec<u32> {
        let mut out = Vec::with_capacity(frames.len().min(MAX_FRAMES));
        for f in frames.iter().take(MAX_FRAMES) {
            let name = crate::text::cut(f, MAX_NAME);
            let next = self.index.len() as u32;
            let i = *self.index.entry(name).or_insert_with(|| {
                self.bytes += name.len() + 3;
                self.cur.names.push(name);
                next
            });
            out.push(i);
            self.bytes += 6;
        }
        out
    }
}

/// The records of an interval's profile (the first carries the losses; none for an empty
/// profile with no losses).
pub fn records(p: &Profile) -> Vec<RecordOut<'_>> {
    let mut keys: Vec<(&StackKey, &Tally)> = p.stacks.iter().collect();
    keys.sort_by(|a, b| {
        (a.0.tgid, a.0.tid, a.0.kind, &a.0.frames[..]).cmp(&(
            b.0.tgid,
            b.0.tid,
            b.0.kind,
            &b.0.frames[..],
        ))
    });
    let new = |first: bool| RecordOut {
        mono_ns: p.mono_ns,
        period_ns: p.duration_ns,
        hz: p.hz,
        off_cpu_min_ns: p.off_cpu_min_ns,
        losses: if first {
            p.losses
        } else {
            ProfileLosses::default()
        },
        processes: Vec::new(),
        names: Vec::new(),
        stacks: Vec::new(),
        blocks: Vec::new(),
    };
    let mut out = Vec::new();
    let mut f = Filling {
        cur: new(true),
        index: HashMap::new(),
        pids: HashMap::new(),
        bytes: 0,
    };
    for (k, t) in keys {
        f.roll_if(f.cur.stacks.len() >= MAX_STACKS, &mut out, &new);
        f.process(p, k.tgid);
        let frames = f.frames(&k.frames);
        f.cur.stacks.push(StackOut {
            pid: k.tgid,
            tid: k.tid,
            kind: k.kind,
            frames,
            count: t.count,
            ns: t.ns,
        });
    }
    for b in &p.blocks {
        f.roll_if(f.cur.blocks.len() >= MAX_BLOCKS, &mut out, &new);
        f.process(p, b.tgid);
        let frames = f.frames(&b.frames);
        f.bytes += 64;
        f.cur.blocks.push(BlockOut {
            pid: b.tgid,
            tid: b.tid,
            start_ns: b.start_ns,
            end_ns: b.end_ns,
            kind: b.kind,
            frames,
        });
    }
    let cur = f.cur;
    if !cur.stacks.is_empty()
        || !cur.blocks.is_empty()
        || cur.losses != ProfileLosses::default()
        || out.is_empty()
    {
        out.push(cur);
    }
    out
}

#[derive(Deserialize)]
pub struct RecordIn {
    #[serde(default)]
    mono_ns: u64,
    #[serde(default)]
    period_ns: u64,
    #[serde(default)]
    hz: u32,
    #[serde(default)]
    off_cpu_min_ns: Option<u64>,
    #[serde(default)]
    losses: ProfileLosses,
    #[serde(default)]
    processes: CappedSeq<ProcessIn, MAX_PROCESSES>,
    #[serde(default)]
    names: CappedSeq<CappedString<MAX_NAME>, MAX_NAMES>,
    #[serde(default)]
    stacks: CappedSeq<StackIn, MAX_STACKS>,
    #[serde(default)]
    blocks: CappedSeq<BlockIn, MAX_BLOCKS>,
}

#[derive(Deserialize)]
struct BlockIn {
    pid: u32,
    tid: u32,
    start_ns: u64,
    end_ns: u64,
    kind: Kind,
    frames: CappedSeq<u32, MAX_FRAMES>,
}

#[derive(Deserialize)]
struct ProcessIn {
    pid: u32,
    #[serde(deserialize_with = "crate::record::limits::comm")]
    comm: String,
}

#[derive(Deserialize)]
struct StackIn {
    pid: u32,
    #[serde(default)]
    tid: Option<u32>,
    kind: Kind,
    frames: CappedSeq<u32, MAX_FRAMES>,
    count: u64,
    #[serde(default)]
    ns: u64,
}

impl RecordIn {
    /// The profile the record holds, and how many of its stacks or lists were left out
    /// (beyond a cap, or naming a frame the record has no name for).
    pub fn into_profile(self) -> (Profile, u64) {
        let mut dropped =
            self.processes.dropped + self.names.dropped + self.stacks.dropped + self.blocks.dropped;
        let names: Vec<Frame> = self
            .names
            .items
            .into_iter()
            .map(|n| Frame::from(n.0))
            .collect();
        let comms: HashMap<u32, String> = self
            .processes
            .items
            .into_iter()
            .map(|p| (p.pid, p.comm))
            .collect();
        let mut p = Profile {
            hz: self.hz,
            off_cpu_min_ns: self.off_cpu_min_ns,
            duration_ns: self.period_ns,
            mono_ns: self.mono_ns,
            losses: self.losses,
            ..Default::default()
        };
        for s in self.stacks.items {
            let frames: Option<Arc<[Frame]>> = s
                .frames
                .items
                .iter()
                .map(|i| names.get(*i as usize).cloned())
                .collect();
            let Some(frames) = frames.filter(|_| s.frames.dropped == 0) else {
                dropped += 1;
                continue;
            };
            let comm = comms.get(&s.pid).map_or("?", String::as_str);
            p.add(
                StackKey {
                    tgid: s.pid,
                    tid: s.tid,
                    kind: s.kind,
                    frames,
                },
                comm,
                Tally {
                    count: s.count,
                    ns: s.ns,
                },
            );
        }
        for b in self.blocks.items {
            let frames: Option<Arc<[Frame]>> = b
                .frames
                .items
                .iter()
                .map(|i| names.get(*i as usize).cloned())
                .collect();
            // A block's bounds out of order, or an on-CPU kind, is not a block.
            let Some(frames) = frames
                .filter(|_| b.frames.dropped == 0 && b.start_ns <= b.end_ns && !b.kind.is_on_cpu())
            else {
                dropped += 1;
                continue;
            };
            p.note_process(b.pid, comms.get(&b.pid).map_or("?", String::as_str));
            p.blocks.push(Block {
                tgid: b.pid,
                tid: b.tid,
                start_ns: b.start_ns,
                end_ns: b.end_ns,
                kind: b.kind,
                frames,
            });
        }
        (p, dropped)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    pub(crate) fn sample() -> Profile {
        let mut p = Profile {
            hz: 99,
            off_cpu_min_ns: Some(1_000_000),
            mono_ns: 5_000_000_000,
            duration_ns: 1_000_000_000,
            losses: ProfileLosses {
                stacks_lost: 2,
                ..Default::default()
            },
            ..Default::default()
        };
        let key = |tgid, kind, f: &[&str]| StackKey {
            tgid,
            tid: None,
            kind,
            frames: f.iter().map(|s| Frame::from(*s)).collect(),
        };
        p.add(
            key(7, Kind::OnCpu, &["_start", "main", "hot"]),
            "burn",
            Tally { count: 40, ns: 0 },
        );
        p.add(
            key(7, Kind::OnCpu, &["_start", "main", "cold"]),
            "burn",
            Tally { count: 10, ns: 0 },
        );
        p.add(
            key(
                7,
                Kind::Interruptible,
                &["main", "nanosleep", "do_nanosleep_[k]"],
            ),
            "burn",
            Tally {
                count: 3,
                ns: 60_000_000,
            },
        );
        p.add(
            key(9, Kind::OnCpu, &["[stack lost]"]),
            "other",
            Tally { count: 2, ns: 0 },
        );
        p
    }

    fn round_trip(p: &Profile) -> Profile {
        let mut back = Profile::default();
        for r in records(p) {
            let json = serde_json::to_vec(&r).unwrap();
            let rec: RecordIn = serde_json::from_slice(&json).unwrap();
            let (part, dropped) = rec.into_profile();
            assert_eq!(dropped, 0);
            back.merge(&part);
        }
        back
    }

    #[test]
    fn a_profile_reads_back_as_it_was_recorded() {
        let p = sample();
        let back = round_trip(&p);
        assert_eq!(back.stacks, p.stacks);
        assert_eq!(back.losses, p.losses);
        assert_eq!(
            (back.hz, back.off_cpu_min_ns, back.mono_ns),
            (99, Some(1_000_000), p.mono_ns)
        );
        assert_eq!(back.processes[&7].comm, "burn");
        assert_eq!(back.processes[&7].on_cpu_reaching_entry, 50);
        assert_eq!(back.processes[&7].off_cpu_ns, 60_000_000);
    }

    /// Stacks kept per thread (`--profile-threads`) read back per thread; a record without
    /// `tid` (format minor < 9, or a run without the option) reads back per process.
    #[test]
    fn threads_read_back_as_recorded_and_old_records_have_none() {
        let mut p = Profile::default();
        for (tid, count) in [(7, 30), (8, 12)] {
            p.add(
                StackKey {
                    tgid: 7,
                    tid: Some(tid),
                    kind: Kind::OnCpu,
                    frames: ["main", "hot"].iter().map(|s| Frame::from(*s)).collect(),
                },
                "burn",
                Tally { count, ns: 0 },
            );
        }
        let back = round_trip(&p);
        assert_eq!(back.stacks, p.stacks);
        assert_eq!(back.stacks.len(), 2);
        let json = r#"{"names":["main"],"processes":[{"pid":1,"comm":"a"}],
                       "stacks":[{"pid":1,"kind":"on_cpu","frames":[0],"count":3}]}"#;
        let (old, _) = serde_json::from_str::<RecordIn>(json)
            .unwrap()
            .into_profile();
        assert!(old.stacks.keys().all(|k| k.tid.is_none()));
    }

    #[test]
    fn a_large_profile_is_cut_into_records_that_add_up() {
        let mut p = Profile::default();
        for i in 0..3000u32 {
            let frames: Arc<[Frame]> = (0..40)
                .map(|j| Frame::from(format!("function_number_{i}_{j}_with_a_long_name")))
                .collect();
            p.add(
                StackKey {
                    tgid: 1 + i % 5,
                    tid: None,
                    kind: Kind::OnCpu,
                    frames,
                },
                "many",
                Tally { count: 1, ns: 0 },
            );
        }
        let recs = records(&p);
        assert!(recs.len() > 5, "{} records", recs.len());
        for r in &recs {
            assert!(serde_json::to_vec(r).unwrap().len() < 2 * RECORD_BYTES + 64 * 1024);
        }
        let back = round_trip(&p);
        assert_eq!(back.stacks, p.stacks);
        assert_eq!(back.processes[&3].on_cpu_samples, 600);
    }

    #[test]
    fn a_hostile_record_is_read_within_its_caps() {
        // An index past the names, a huge count of frames, unknown fields: no panic, the bad
        // stacks dropped and counted.
        let many: Vec<String> = (0..5000).map(|i| i.to_string()).collect();
        let json = format!(
            r#"{{"names":["a","b"],"processes":[{{"pid":1,"comm":"{}"}}],
               "stacks":[{{"pid":1,"kind":"on_cpu","frames":[0,1],"count":3}},
                         {{"pid":1,"kind":"on_cpu","frames":[0,7],"count":1}},
                         {{"pid":1,"kind":"on_cpu","frames":[{}],"count":1}}],
               "future":1}}"#,
            "x".repeat(10_000),
            many.join(",")
        );
        let rec: RecordIn = serde_json::from_str(&json).unwrap();
        let (p, dropped) = rec.into_profile();
        assert_eq!(dropped, 2);
        assert_eq!(p.stacks.len(), 1);
        assert!(p.processes[&1].comm.len() <= crate::record::limits::MAX_COMM);
        assert!(serde_json::from_str::<RecordIn>(r#"{"stacks":[{"pid":1}]}"#).is_err());
    }

    /// A reading's blocks (minor ≥ 11) read back with their bounds, threads and frames, in
    /// order, across the records a large reading is cut into; a block whose bounds are out
    /// of order or whose kind is on-CPU is dropped and counted.
    #[test]
    fn blocks_read_back_in_order_across_records() {
        let mut p = sample();
        for i in 0..20_000u64 {
            p.blocks.push(Block {
                tgid: 7,
                tid: 8 + (i % 3) as u32,
                start_ns: i * 10,
                end_ns: i * 10 + 5,
                kind: Kind::Interruptible,
                frames: ["main", &format!("f{}", i % 500)]
                    .iter()
                    .map(|s| Frame::from(*s))
                    .collect(),
            });
        }
        let recs = records(&p);
        assert!(recs.len() > 1, "cut by size");
        let mut back = Vec::new();
        for r in recs {
            let json = serde_json::to_vec(&r).unwrap();
            let (part, dropped) = serde_json::from_slice::<RecordIn>(&json)
                .unwrap()
                .into_profile();
            assert_eq!(dropped, 0);
            back.extend(part.blocks);
        }
        assert_eq!(back, p.blocks);
        let json = r#"{"names":["main"],"blocks":[
            {"pid":1,"tid":2,"start_ns":9,"end_ns":3,"kind":"interruptible","frames":[0]},
            {"pid":1,"tid":2,"start_ns":1,"end_ns":3,"kind":"on_cpu","frames":[0]},
            {"pid":1,"tid":2,"start_ns":1,"end_ns":3,"kind":"interruptible","frames":[5]},
            {"pid":1,"tid":2,"start_ns":1,"end_ns":3,"kind":"interruptible","frames":[0]}]}"#;
        let (part, dropped) = serde_json::from_str::<RecordIn>(json)
            .unwrap()
            .into_profile();
        assert_eq!((part.blocks.len(), dropped), (1, 3));
    }
}
