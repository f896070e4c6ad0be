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

/// The profile records (kind 8) of recording `ebt` as a frame's record stream: a seed whose
/// bytes reach the profile record's reader directly (the driver's second way).
pub fn profile_record_seed(ebt: &[u8]) -> Option<Vec<u8>> {
    let mut reader = RecordingReader::new(ebt).ok()?;
    let mut out = Vec::new();
    reader
        .for_each(|item| {
            if let super::reader::Item::Profile(p) = item {
                for rec in crate::profile::recorded::records(&p) {
                    let json = serde_json::to_vec(&rec)?;
                    out.push(super::KIND_PROFILE);
                    out.extend_from_slice(&(json.len() as u32).to_le_bytes());
                    out.extend_from_slice(&json);
                }
            }
            Ok(())
        })
        .ok()?;
    (!out.is_empty()).then_some(out)
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
