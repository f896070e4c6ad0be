//! Any bytes as a session of kernel records (socket data, lifecycle, process exec/exit, raw
//! ring-buffer records) with interval ticks, fed through the whole pipeline as the live source
//! feeds it. Run: cargo +nightly fuzz run pipeline
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    ebtop::pipeline::fuzzing::drive(data);
});
