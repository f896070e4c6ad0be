//! The fuzz target `elf` (fuzz/fuzz_targets/elf.rs): the ELF reader and what the TLS probes
//! look for with it (libssl's functions, Go's), on any bytes. Apart from `elf.rs`, which the
//! discovery code it drives imports.

pub fn drive(data: &[u8]) {
    let _ = super::discover::ssl_sites_in_bytes(data, true);
    let _ = super::golang::sites_in_bytes(data);
}

/// Seeds: the system's libssl (when there is one), cut to its first 64 KiB (the fuzzer's
/// inputs are small), and a minimal ELF file.
pub fn seeds() -> Vec<(String, Vec<u8>)> {
    let mut out = vec![("minimal".to_string(), super::elf::minimal())];
    for t in super::discover::system_libraries() {
        if let Ok(mut d) = std::fs::read(&t.path) {
            d.truncate(64 << 10);
            out.push(("libssl-head".into(), d));
            break;
        }
    }
    out
}

#[cfg(test)]
mod tests {
    /// Every byte of the minimal file damaged in turn: refused or read, never a panic.
    #[test]
    fn damaged_files_are_driven_without_panic() {
        let data = super::super::elf::minimal();
        for i in 0..data.len() {
            let mut d = data.clone();
            d[i] ^= 0xff;
            super::drive(&d);
        }
    }
}
