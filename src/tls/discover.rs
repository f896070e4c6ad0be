//! Where OpenSSL's `SSL_write`/`SSL_read` live on this host: shared `libssl.so*` libraries in
//! the system's library directories and in the processes' memory maps, and executables that
//! link OpenSSL (or BoringSSL) statically. Files are told apart by device and inode, so a
//! library mapped by a thousand processes, or reached by several paths, is one target.

use std::collections::HashSet;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

/// The functions probed: the first two must be there; the `_ex` variants (OpenSSL ≥ 1.1.1)
/// are probed where they exist.
pub const WRITE: &str = "SSL_write";
pub const READ: &str = "SSL_read";
pub const WRITE_EX: &str = "SSL_write_ex";
pub const READ_EX: &str = "SSL_read_ex";
/// Probed where it exists: it names a connection's socket before its first read (which nginx's
/// read-ahead may serve without a syscall), and a new connection of a reused `SSL *`.
pub const HANDSHAKE: &str = "SSL_do_handshake";

/// A file to probe, as the kernel identifies it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Target {
    /// A path that opens it from ebtop's mount namespace (through `/proc/PID/root` for a
    /// process in a container).
    pub path: PathBuf,
    pub dev: u64,
    pub ino: u64,
    /// A shared library (else an executable with OpenSSL linked in).
    pub shared: bool,
}

impl Target {
    pub fn file_id(&self) -> (u64, u64) {
        (self.dev, self.ino)
    }
}

/// Which of the probed functions a file defines (`[write, read, write_ex, read_ex,
/// handshake]`).
pub type Symbols = [bool; 5];

/// Whether a file name is OpenSSL's libssl (`libssl.so`, `libssl.so.3`, `libssl.so.1.1`), not
/// NSS's `libssl3.so` or anything else that starts alike.
pub fn is_libssl_name(name: &str) -> bool {
    name == "libssl.so" || name.starts_with("libssl.so.")
}

/// The paths of the files a `/proc/PID/maps` text maps executable (`r-xp`) — libraries and the
/// program — each once, in order.
pub fn mapped_executable_files(maps: &str) -> Vec<&str> {
    let mut seen = HashSet::new();
    let mut out = Vec::new();
    for line in maps.lines() {
        // address perms offset dev inode path
        let mut fields = line.splitn(6, ' ');
        let (Some(_), Some(perms), Some(_), Some(_), Some(inode)) = (
            fields.next(),
            fields.next(),
            fields.next(),
            fields.next(),
            fields.next(),
        ) else {
            continue;
        };
        let path = fields.next().unwrap_or("").trim_start();
        if !perms.contains('x') || inode == "0" || !path.starts_with('/') {
            continue;
        }
        if seen.insert(path) {
            out.push(path);
        }
    }
    out
}

/// The probed functions a file defines, from its ELF symbol tables (`.dynsym`, then `.symtab`
/// for a static executable that keeps it). Not an ELF file, or unreadable: none.
pub fn symbols_of(path: &Path) -> Symbols {
    use object::{Object, ObjectSymbol};
    let mut found = [false; 5];
    let Ok(file) = std::fs::File::open(path) else {
        return found;
    };
    // SAFETY: the map is read-only and private; a file truncated under us could fault, which
    // is why only regular files of a process's maps or the library directories are read.
    let Ok(map) = (unsafe { memmap2::Mmap::map(&file) }) else {
        return found;
    };
    let Ok(elf) = object::File::parse(&*map) else {
        return found;
    };
    let names = [WRITE, READ, WRITE_EX, READ_EX, HANDSHAKE];
    for sym in elf.dynamic_symbols().chain(elf.symbols()) {
        if !sym.is_definition() {
            continue;
        }
        if let Ok(name) = sym.name() {
            if let Some(i) = names.iter().position(|n| *n == name) {
                found[i] = true;
            }
        }
    }
    found
}

/// Whether a file can be probed for TLS plaintext.
pub fn probeable(s: &Symbols) -> bool {
    s[0] && s[1]
}

/// The library directories of this host: the usual ones and those of `/etc/ld.so.conf.d`.
pub fn library_dirs() -> Vec<PathBuf> {
    let mut dirs: Vec<PathBuf> = [
        "/lib",
        "/lib64",
        "/usr/lib",
        "/usr/lib64",
        "/usr/local/lib",
        "/lib/x86_64-linux-gnu",
        "/usr/lib/x86_64-linux-gnu",
        "/lib/aarch64-linux-gnu",
        "/usr/lib/aarch64-linux-gnu",
    ]
    .iter()
    .map(PathBuf::from)
    .collect();
    if let Ok(entries) = std::fs::read_dir("/etc/ld.so.conf.d") {
        for e in entries.flatten() {
            if let Ok(text) = std::fs::read_to_string(e.path()) {
                dirs.extend(
                    text.lines()
                        .map(str::trim)
                        .filter(|l| l.starts_with('/'))
                        .map(PathBuf::from),
                );
            }
        }
    }
    dirs
}

/// A regular file's target, or None.
pub fn target_of(path: PathBuf, shared: bool) -> Option<Target> {
    let md = std::fs::metadata(&path).ok()?;
    md.is_file().then(|| Target {
        dev: md.dev(),
        ino: md.ino(),
        path,
        shared,
    })
}

/// The `libssl.so*` files in the library directories (symbolic links resolved by the inode).
pub fn system_libraries() -> Vec<Target> {
    let mut out: Vec<Target> = Vec::new();
    for dir in library_dirs() {
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for e in entries.flatten() {
            let name = e.file_name();
            if !is_libssl_name(&name.to_string_lossy()) {
                continue;
            }
            if let Some(t) = target_of(e.path(), true) {
                if !out.iter().any(|o| o.file_id() == t.file_id()) {
                    out.push(t);
                }
            }
        }
    }
    out
}

/// What a process maps that may hold OpenSSL: its `libssl.so*` libraries, or else its
/// executable (a program that links OpenSSL statically maps no libssl). Paths go through
/// `/proc/PID/root`, so a container's files are the container's.
pub fn process_candidates(pid: u32) -> Vec<Target> {
    let Ok(maps) = std::fs::read_to_string(format!("/proc/{pid}/maps")) else {
        return Vec::new();
    };
    let root = PathBuf::from(format!("/proc/{pid}/root"));
    let files = mapped_executable_files(&maps);
    let libs: Vec<Target> = files
        .iter()
        .filter(|p| {
            Path::new(p)
                .file_name()
                .is_some_and(|n| is_libssl_name(&n.to_string_lossy()))
        })
        .filter_map(|p| target_of(root.join(p.trim_start_matches('/')), true))
        .collect();
    if !libs.is_empty() {
        return libs;
    }
    // The executable: the first file mapped executable is the program itself.
    target_of(PathBuf::from(format!("/proc/{pid}/exe")), false)
        .into_iter()
        .collect()
}

/// The processes running now.
pub fn all_pids() -> Vec<u32> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse().ok())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_openssl_library_names_are_libssl() {
        for yes in [
            "libssl.so",
            "libssl.so.3",
            "libssl.so.1.1",
            "libssl.so.1.0.2k",
        ] {
            assert!(is_libssl_name(yes), "{yes}");
        }
        // NSS's libssl3.so is another library with other functions.
        for no in [
            "libssl3.so",
            "libssl.a",
            "libsslx.so.1",
            "libcrypto.so.3",
            "",
        ] {
            assert!(!is_libssl_name(no), "{no}");
        }
    }

    #[test]
    fn maps_yield_each_executable_file_once() {
        let maps = "\
55d0c0a00000-55d0c0a2a000 r--p 00000000 08:01 1054 /usr/sbin/nginx
55d0c0a2a000-55d0c0b3c000 r-xp 0002a000 08:01 1054 /usr/sbin/nginx
7f1c2a000000-7f1c2a021000 rw-p 00000000 00:00 0
7f1c2b0a0000-7f1c2b0c6000 r--p 00000000 08:01 2201 /usr/lib/x86_64-linux-gnu/libssl.so.3
7f1c2b0c6000-7f1c2b126000 r-xp 00026000 08:01 2201 /usr/lib/x86_64-linux-gnu/libssl.so.3
7f1c2b200000-7f1c2b300000 r-xp 00000000 08:01 2301 /usr/lib/x86_64-linux-gnu/libc.so.6
7f1c2b400000-7f1c2b401000 r-xp 00000000 08:01 2401 /tmp/lib with space.so (deleted)
7ffd1e9d5000-7ffd1e9d7000 r-xp 00000000 00:00 0                          [vdso]
";
        assert_eq!(
            mapped_executable_files(maps),
            vec![
                "/usr/sbin/nginx",
                "/usr/lib/x86_64-linux-gnu/libssl.so.3",
                "/usr/lib/x86_64-linux-gnu/libc.so.6",
                "/tmp/lib with space.so (deleted)",
            ]
        );
        assert!(mapped_executable_files("garbage\n\n1 2\n").is_empty());
    }

    #[test]
    fn symbols_of_a_file_without_openssl_are_none() {
        // This test binary has no OpenSSL; a text file is no ELF.
        let exe = std::env::current_exe().expect("test binary");
        assert!(!probeable(&symbols_of(&exe)));
        let text = std::env::temp_dir().join(format!("ebtop-tls-{}.txt", std::process::id()));
        std::fs::write(&text, b"SSL_write SSL_read").expect("write");
        assert_eq!(symbols_of(&text), [false; 5]);
        let _ = std::fs::remove_file(&text);
        assert_eq!(
            symbols_of(Path::new("/nonexistent/libssl.so.3")),
            [false; 5]
        );
    }

    #[test]
    fn the_system_libssl_defines_the_probed_functions() {
        // Where the host has OpenSSL's libssl (the suite installs libssl-dev), it is found in
        // the library directories and defines all four functions (OpenSSL ≥ 1.1.1).
        let libs = system_libraries();
        for t in &libs {
            let s = symbols_of(&t.path);
            assert!(
                probeable(&s),
                "{} lacks SSL_write/SSL_read: {s:?}",
                t.path.display()
            );
        }
        let ids: HashSet<_> = libs.iter().map(Target::file_id).collect();
        assert_eq!(ids.len(), libs.len(), "one target per file");
    }
}
