//! Drives the recording reader, and the replay pipeline behind it, from arbitrary bytes: the
//! cargo-fuzz target `recording` (fuzz/) and a stable-toolchain randomized unit test share it.
//! A recording is the one input ebtop reads from other machines, so no bytes may panic it.

use std::sync::atomic::AtomicBool;

use super::reader::RecordingReader;
use super::writer::{encode_frame, encode_header};
use super::{RecordOptions, RecordingHeader};
use crate::conntrack::TrackerConfig;
use crate::filters::Filters;
use crate::pipeline::Pipeline;
use crate::procinfo::ProcessTable;
use crate::session_meta::SessionMeta;
use crate::sink::json::JsonSink;
use crate::summary::Summary;

/// Replays `data` three ways: as a whole file; as the records of one well-formed frame (so the
/// CRC and zstd layers pass and the record, JSON and event decoders see the bytes); and as
/// kernel event records cut at lengths taken from the bytes themselves. The well-formed files'
/// header takes its clock numbers from the first 16 bytes. Returns the summary of the first
/// replay (of `data` as a whole file), if it was a readable recording.
pub fn drive(data: &[u8]) -> Option<Summary> {
    let whole = replay_bytes(data);
    let mut meta = SessionMeta::this_host("live", 4096, Filters::default(), 0);
    // Clock numbers from the bytes: a header may carry any.
    if let (Some(a), Some(b)) = (data.get(..8), data.get(8..16)) {
        meta.start_unix_ns = i64::from_le_bytes(a.try_into().unwrap_or_default());
        meta.wall_offset_ns = i64::from_le_bytes(b.try_into().unwrap_or_default());
    }
    let header = RecordingHeader {
        meta,
        options: RecordOptions::default(),
        processes: vec![],
        sockets: vec![],
    };
    let Ok(head) = encode_header(&header) else {
        return whole;
    };
    let mut file = head.clone();
    if let Ok(frame) = encode_frame(data) {
        file.extend_from_slice(&frame);
    }
    replay_bytes(&file);

    let mut records = Vec::new();
    let mut rest = data;
    while let Some((&len, tail)) = rest.split_first() {
        // Mostly event-sized records (the 120-byte header plus payload), some short ones.
        let want = if len & 0x80 != 0 {
            usize::from(len & 0x7f)
        } else {
            120 + usize::from(len)
        };
        let (body, tail) = tail.split_at(want.min(tail.len()));
        records.push(super::KIND_EVENT);
        records.extend_from_slice(&(body.len() as u32).to_le_bytes());
        records.extend_from_slice(body);
        rest = tail;
    }
    let mut file = head;
    if let Ok(frame) = encode_frame(&records) {
        file.extend_from_slice(&frame);
    }
    replay_bytes(&file);
    whole
}

/// The profile records (kind 8) and profile trigger records (kind 9, each after its
/// interval's kind 3 record) of recording `ebt` as a frame's record stream: a seed whose bytes
/// reach those records' readers directly (the driver's second way). None without either.
pub fn profile_record_seed(ebt: &[u8]) -> Option<Vec<u8>> {
    use super::reader::Item;
    let mut reader = RecordingReader::new(ebt).ok()?;
    let mut out = Vec::new();
    let mut profiled = false;
    let mut push = |kind: u8, json: Vec<u8>| {
        out.push(kind);
        out.extend_from_slice(&(json.len() as u32).to_le_bytes());
        out.extend_from_slice(&json);
    };
    reader
        .for_each(|item| {
            match item {
                Item::Profile(p) => {
                    for rec in crate::profile::recorded::records(&p) {
                        push(super::KIND_PROFILE, serde_json::to_vec(&rec)?);
                    }
                    profiled = true;
                }
                Item::Interval(iv) => push(super::KIND_INTERVAL, serde_json::to_vec(&iv)?),
                Item::ProfileTrigger(mono_ns, e) => {
                    let rec = crate::profile::trigger::RecordOut { mono_ns, event: &e };
                    push(super::KIND_PROFILE_TRIGGER, serde_json::to_vec(&rec)?);
                    profiled = true;
                }
                _ => {}
            }
            Ok(())
        })
        .ok()?;
    profiled.then_some(out)
}

fn replay_bytes(bytes: &[u8]) -> Option<Summary> {
    let Ok(mut reader) = RecordingReader::new(bytes) else {
        return None;
    };
    let meta = crate::driver::replay::replay_meta(&reader);
    let mut pipeline = Pipeline::new(
        TrackerConfig::default(),
        ProcessTable::new(false),
        // The JSON sink: it turns recorded numbers into timestamps and text.
        JsonSink::new(std::io::sink()),
    );
    pipeline.start(&meta).ok()?;
    let stop = AtomicBool::new(false);
    let end = crate::driver::replay::run(&mut reader, &mut pipeline, &stop).ok()?;
    let (_, summary) = pipeline.finish(&end.kernel, end.duration_ns).ok()?;
    Some(summary)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The profile seed replays its profiles through the second way, and mutated it never
    /// panics the profile record's reader.
    #[test]
    fn profile_records_seed_and_mutations_never_panic() {
        let ebt = std::fs::read(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/tests/fixtures/recordings/profile_burn.ebt"
        ))
        .unwrap();
        let seed = profile_record_seed(&ebt).expect("the fixture holds profiles");
        drive(&seed);
        let mut next = crate::xorshift::sequence(0x0005_eed0_f9f0_f11e);
        for _ in 0..200 {
            let mut b = seed.clone();
            for _ in 0..3 {
                let x = next();
                let i = (x as usize) % b.len();
                b[i] = (x >> 32) as u8;
            }
            drive(&b);
        }
    }

    /// Kind 9 records replay as `profile_trigger` lines before their interval's lines (where
    /// the live run wrote them); one after no interval of its time still replays; ones no
    /// ebtop writes (an unknown event, more processes than a trigger arms, bad JSON) are
    /// counted as bad records, never written in part.
    #[test]
    fn trigger_records_replay_in_place_and_bad_ones_are_counted() {
        use crate::kernel_counters::KernelCounters;
        use crate::profile::trigger::{RecordOut, TriggerEvent};
        let header = RecordingHeader {
            meta: SessionMeta::this_host("live", 4096, Filters::default(), 0),
            options: RecordOptions::default(),
            processes: vec![],
            sockets: vec![],
        };
        let start_ns = header.meta.start_mono_ns();
        let mut records = Vec::new();
        let mut push = |kind: u8, json: Vec<u8>| {
            records.push(kind);
            records.extend_from_slice(&(json.len() as u32).to_le_bytes());
            records.extend_from_slice(&json);
        };
        let interval = |n: u64| {
            serde_json::to_vec(&super::super::IntervalRecord {
                mono_ns: start_ns + n * 1_000_000_000,
                kernel: KernelCounters::default(),
            })
            .unwrap()
        };
        let event = |event, pids: Vec<u32>| TriggerEvent {
            event,
            rule: "cpu>20%:2/3".into(),
            pids,
            comm: "spin".into(),
            value: (event == "start").then_some(97.5),
            duration_ns: 2_000_000_000,
        };
        let trigger = |n: u64, e: &TriggerEvent| {
            let mono_ns = start_ns + n * 1_000_000_000;
            serde_json::to_vec(&RecordOut { mono_ns, event: e }).unwrap()
        };
        push(super::super::KIND_INTERVAL, interval(1));
        // Interval 2's profile: its `profile` line follows the interval's trigger lines.
        let profile = serde_json::json!({
            "mono_ns": start_ns + 2_000_000_000u64, "period_ns": 1_000_000_000u64, "hz": 99,
            "processes": [{"pid": 42, "comm": "spin"}], "names": ["main", "spin"],
            "stacks": [{"pid": 42, "kind": "on_cpu", "frames": [0, 1], "count": 10}],
        });
        push(
            super::super::KIND_PROFILE,
            serde_json::to_vec(&profile).unwrap(),
        );
        push(super::super::KIND_INTERVAL, interval(2));
        push(
            super::super::KIND_PROFILE_TRIGGER,
            trigger(2, &event("start", vec![42])),
        );
        push(
            super::super::KIND_PROFILE_TRIGGER,
            trigger(2, &event("x", vec![42])),
        );
        push(
            super::super::KIND_PROFILE_TRIGGER,
            trigger(2, &event("start", (0..65).collect())),
        );
        push(super::super::KIND_PROFILE_TRIGGER, b"{\"event\":".to_vec());
        push(super::super::KIND_INTERVAL, interval(3));
        push(super::super::KIND_INTERVAL, interval(4));
        // After its interval, apart from it (as a recording damaged between them leaves it).
        push(
            super::super::KIND_PROFILE_TRIGGER,
            trigger(5, &event("end", vec![42])),
        );
        let mut file = encode_header(&header).unwrap();
        file.extend(encode_frame(&records).unwrap());

        let mut reader = RecordingReader::new(&file[..]).unwrap();
        let meta = crate::driver::replay::replay_meta(&reader);
        let mut pipeline = Pipeline::new(
            TrackerConfig::default(),
            ProcessTable::new(false),
            JsonSink::new(Vec::new()),
        );
        pipeline.start(&meta).unwrap();
        let stop = AtomicBool::new(false);
        let end = crate::driver::replay::run(&mut reader, &mut pipeline, &stop).unwrap();
        let (sink, summary) = pipeline.finish(&end.kernel, end.duration_ns).unwrap();
        assert_eq!(summary.replay.unwrap().bad_records, 3);
        let out = String::from_utf8(sink.into_inner()).unwrap();
        let lines: Vec<serde_json::Value> = out
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        let types: Vec<&str> = lines.iter().map(|v| v["type"].as_str().unwrap()).collect();
        let triggers: Vec<&serde_json::Value> = lines
            .iter()
            .filter(|v| v["type"] == "profile_trigger")
            .collect();
        assert_eq!(triggers.len(), 2, "{out}");
        assert_eq!(triggers[0]["event"], "start");
        assert_eq!(triggers[0]["pids"], serde_json::json!([42]));
        assert_eq!(triggers[0]["value"], 97.5);
        assert_eq!(triggers[0]["rule"], "cpu>20%:2/3");
        assert_eq!(triggers[0]["comm"], "spin");
        assert_eq!(triggers[1]["event"], "end");
        assert!(triggers[1].get("value").is_none());
        // The start at interval 2's end, then that interval's profile (as live), then the
        // end, then the session's profile and the summary.
        assert_eq!(
            types,
            [
                "meta",
                "profile_trigger",
                "profile",
                "profile_trigger",
                "profile",
                "summary"
            ],
            "{out}"
        );
        assert_eq!(lines[1]["ts"], lines[2]["ts"]);
        assert_eq!(lines[2]["span"], "interval");
        assert_eq!(lines[2]["samples"], 10);
    }

    /// The same driver as the fuzz target, on random and event-shaped inputs (stable toolchain).
    #[test]
    fn random_recordings_never_panic_the_replay() {
        let mut next = crate::xorshift::sequence(0x9e37_79b9_7f4a_7c15);
        for round in 0..300 {
            let len = (next() % 2048) as usize;
            let mut data: Vec<u8> = (0..len).map(|_| next() as u8).collect();
            if round % 3 == 0 {
                // Plausible event headers: small numbers in the first fields.
                for b in data.iter_mut().step_by(3) {
                    *b &= 0x07;
                }
            }
            drive(&data);
        }
    }
}
