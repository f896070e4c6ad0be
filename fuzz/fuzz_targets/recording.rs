//! Any bytes as a recording file, as the records of a well-formed frame, and as kernel event
//! records, replayed through the whole pipeline.
//! Run: cargo +nightly fuzz run recording
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    ebtop::record::fuzzing::drive(data);
});
