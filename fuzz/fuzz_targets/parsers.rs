//! Any bytes, split into segments, gaps and uncaptured tails, fed to every protocol parser.
//! Run: cargo +nightly fuzz run parsers
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    ebtop::protocols::fuzzing::drive(data);
});
