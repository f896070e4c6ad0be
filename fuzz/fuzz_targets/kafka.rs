//! Arbitrary bytes split into segments, gaps and uncaptured tails, fed to the kafka parser only.
//! Run: cargo +nightly fuzz run kafka
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    ebtop::protocols::fuzzing::drive_protocol("kafka", data);
});
