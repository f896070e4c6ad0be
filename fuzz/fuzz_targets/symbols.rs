//! Any bytes as a file a profiled process maps: the profile's symbol reader (ELF .symtab and
//! .dynsym, a Go program's .gopclntab), every function's name read back and demangled.
//! Run: cargo +nightly fuzz run symbols
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    ebtop::profile::filesyms::fuzzing::drive(data);
});
