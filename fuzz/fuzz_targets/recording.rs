//! Any bytes as a recording file, as the records of a well-formed frame, and as kernel event
//! records, replayed through the whole pipeline.
//! Run: cargo +nightly fuzz run recording
#![no_main]

libfuzzer_sys::fuzz_target!(
    init: {
        // Most inputs are no recording, and each such is an error (anyhow), which captures a
        // backtrace (a walk of the stack) when RUST_BACKTRACE is set: the errors are expected
        // here and their backtraces are not what the target tests. Panics keep theirs.
        if std::env::var_os("RUST_LIB_BACKTRACE").is_none() {
            std::env::set_var("RUST_LIB_BACKTRACE", "0");
        }
    },
    |data: &[u8]| {
        ebtop::record::fuzzing::drive(data);
    }
);
