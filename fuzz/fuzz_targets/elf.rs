//! Any bytes as a file the TLS probes look at: the bounded ELF reader (section headers,
//! symbol tables) and what is looked for with it — OpenSSL's functions and their code, a Go
//! program's function table and code. A per-input time limit (scripts/fuzz) catches
//! super-linear paths.
//! Run: cargo +nightly fuzz run elf
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    ebtop::tls::elf_fuzzing::drive(data);
});
