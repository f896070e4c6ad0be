//! Any bytes as a Go program's function table (.gopclntab) and as the code of a function
//! the TLS probes are placed in.
//! Run: cargo +nightly fuzz run go_binary
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    ebtop::tls::golang::fuzzing::drive(data);
});
