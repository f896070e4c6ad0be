//! Any bytes as what a Wasm plugin hands ebtop: a plugin file's manifest (the module's
//! section walk, the manifest text), a guest's answers (call halves, frame codes), and the
//! script of a real guest whose answers the host acts on (`drive_host`).
//! Run: cargo +nightly fuzz run plugin
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    ebtop::plugins::fuzzing::drive(data);
});
