//! Where OpenSSL's `SSL_write`/`SSL_read` live on this host: shared `libssl.so*` libraries in
//! the system's library directories and in the processes' memory maps, and executables that
//! link OpenSSL (or BoringSSL) statically. Files are told apart by device and inode, so a
//! library mapped by a thousand processes, or reached by several paths, is one target.

use std::collections::HashSet;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use super::elf::{Elf, Symbol};
use super::untrusted::{FoundFile, ReadAt, Skip};

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
#[derive(Debug)]
pub struct Target {
    /// How it is named: for a file of the library or program directories, the host path it
    /// is found by again; else the path a process names it by (in its own root).
    pub path: PathBuf,
    pub dev: u64,
    pub ino: u64,
    /// A shared library (else an executable with OpenSSL linked in).
    pub shared: bool,
    /// Found already (inside a process's root, or its executable): never looked up by its
    /// path again. None: found by `path` on the host when looked at.
    pub found: Option<FoundFile>,
}

impl Target {
    pub fn file_id(&self) -> (u64, u64) {
        (self.dev, self.ino)
    }

    /// The file found (see [`Target::found`]); it must still be the one listed.
    pub fn find(&mut self) -> Result<FoundFile, Skip> {
        if let Some(f) = self.found.take() {
            return Ok(f);
        }
        let f = FoundFile::at(&self.path)?;
        if (f.dev, f.ino) != self.file_id() {
            return Err(Skip::new("replaced since it was listed"));
        }
        Ok(f)
    }
}

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

/// Where a file's plaintext reads and writes pass through one function each that the kernel
/// can probe cheaply: file offsets of OpenSSL's internal `ssl_read_internal` and
/// `ssl_write_internal`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct InternalSites {
    pub read: u64,
    pub write: u64,
}

/// How `SSL_read_ex`/`SSL_write_ex` begin (after an `endbr64`, if any) when all they do before
/// calling the internal function is align the stack: `sub $8,%rsp; call`, or with frame
/// pointers (distributions that build with them, OpenSSL built by the `cc` crate)
/// `push %rbp; mov %rsp,%rbp; call` (either encoding of the `mov`). None of them touches the
/// argument registers. Each ends with the call's opcode, 4 bytes from its start.
const WRAPPER_PROLOGUES: [&[u8]; 3] = [
    &[0x48, 0x83, 0xec, 0x08, 0xe8],
    &[0x55, 0x48, 0x89, 0xe5, 0xe8],
    &[0x55, 0x48, 0x8b, 0xec, 0xe8],
];

/// OpenSSL (1.1.1, 3.x) implements `SSL_read`/`SSL_read_ex` (and the writes) as thin wrappers
/// around one internal function taking `(SSL *, buf, num, size_t *count)` and returning > 0
/// on success. Probing that function instead of the four public ones is the same data for
/// much less: the public ones begin with `sub $N,%rsp`, which the kernel single-steps out of
/// line (~10 µs per call with its return here), the internal ones with `push` (emulated:
/// ~1.5 µs). Taken only when the code proves it: `SSL_read_ex` is `[endbr64] sub $8,%rsp;
/// call X` or its frame-pointer form ([`WRAPPER_PROLOGUES`]: its arguments reach X untouched,
/// so X has the `_ex` contract), and `SSL_read` calls
/// the same X (so probing X sees both, once); likewise for the writes. Else None, and the
/// public functions are probed.
pub fn internal_sites(path: &Path) -> Option<InternalSites> {
    let file = FoundFile::at(path).ok()?.open().ok()?;
    let elf = Elf::parse(&file).ok()??;
    internal_sites_in(&elf, &elf.find_symbols(NAMES).ok()?)
}

/// [`internal_sites`] of a file already parsed, whose symbols `NAMES` are `syms`.
fn internal_sites_in<R: ReadAt + ?Sized>(
    elf: &Elf<R>,
    syms: &[Option<Symbol>; 5],
) -> Option<InternalSites> {
    if !elf.is_x86_64() {
        return None;
    }
    // A function's address and its bytes (at most 256).
    let func = |i: usize| -> Option<(u64, Vec<u8>)> {
        let sym = syms[i]?;
        let len = sym.size.clamp(1, 256);
        let code = elf.code_at(sym.section, sym.value, len)?;
        (code.len() as u64 == len).then_some((sym.value, code))
    };
    let internal = |plain: usize, ex: usize| -> Option<u64> {
        let (ex_addr, ex_code) = func(ex)?;
        let target = wrapped_call(ex_addr, &ex_code)?;
        let (plain_addr, plain_code) = func(plain)?;
        let plain_calls_it = (0..plain_code.len().saturating_sub(4)).any(|i| {
            plain_code[i] == 0xe8
                && call_target(plain_addr + i as u64, &plain_code[i + 1..i + 5]) == Some(target)
        });
        plain_calls_it.then_some(target)
    };
    let read = elf.file_offset(internal(1, 3)?)?;
    let write = elf.file_offset(internal(0, 2)?)?;
    (read != write).then_some(InternalSites { read, write })
}

/// The function a wrapper at `addr` whose code is `code` calls right away, having only aligned
/// the stack ([`WRAPPER_PROLOGUES`]); None if it does anything else first.
fn wrapped_call(addr: u64, code: &[u8]) -> Option<u64> {
    let body = code.strip_prefix(&[0xf3, 0x0f, 0x1e, 0xfa]).unwrap_or(code);
    let rel = WRAPPER_PROLOGUES
        .iter()
        .find_map(|p| body.strip_prefix(*p))?
        .get(..4)?;
    // The call's opcode is the byte before its displacement.
    let call_at = addr + (code.len() - body.len()) as u64 + 4;
    call_target(call_at, rel)
}

/// Whether nginx's upstream writes are probed (src/tls/nginx.rs): for the call chains, when
/// they are on; `EBTOP_NGINX=0` leaves them out (for measuring what the probe costs:
/// docs/performance.md).
pub fn nginx_wanted() -> bool {
    crate::pipeline::chains_enabled() && std::env::var_os("EBTOP_NGINX").is_none_or(|v| v != "0")
}

/// Whether x86-64 uprobes emulate the instruction `code` begins with (arch/x86/kernel/
/// uprobes.c: push of a register, call and jmp with a displacement, conditional jumps, nop).
pub fn first_instruction_emulated(code: &[u8]) -> bool {
    use iced_x86::{Decoder, DecoderOptions, Mnemonic, OpKind};
    let ins = Decoder::new(64, code, DecoderOptions::NONE).decode();
    if ins.is_invalid() {
        return false;
    }
    match ins.mnemonic() {
        Mnemonic::Push => ins.op0_kind() == OpKind::Register,
        Mnemonic::Nop => ins.len() == 1,
        _ => ins.op0_kind() == OpKind::NearBranch64,
    }
}

/// The target of a `call rel32` at `at` whose 4 displacement bytes are `rel`.
fn call_target(at: u64, rel: &[u8]) -> Option<u64> {
    let rel = i32::from_le_bytes(rel.try_into().ok()?);
    (at + 5).checked_add_signed(i64::from(rel))
}

/// Where to probe a file for OpenSSL, read from the file once: per function (`[write, read,
/// write_ex, read_ex, handshake]`) the file offset of its code and whether the kernel
/// single-steps its first instruction (`first_instruction_emulated`: a single-stepped hit
/// costs several times more; unknown, as off x86-64, counts as stepped so the cost is not
/// understated); and OpenSSL's internal sites
/// where the code proves them (`internal_sites`; not looked for with `want_internal` false).
/// The offsets let the probes be placed without libbpf reading the symbol table again.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SslSites {
    pub functions: [Option<FunctionSite>; 5],
    pub internal: Option<InternalSites>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FunctionSite {
    pub offset: u64,
    pub stepped: bool,
}

/// The functions looked for, in [`SslSites::functions`]' order.
const NAMES: [&str; 5] = [WRITE, READ, WRITE_EX, READ_EX, HANDSHAKE];

/// A file's [`SslSites`]; None when it does not define both `SSL_write` and `SSL_read` (or is
/// no ELF file, or unreadable). Read as untrusted ([`FoundFile`]).
pub fn ssl_sites(path: &Path, want_internal: bool) -> Option<SslSites> {
    let file = FoundFile::at(path).ok()?.open().ok()?;
    ssl_sites_in(&file, want_internal).ok()?
}

/// [`ssl_sites`] of any bytes (the fuzz target `elf`).
pub fn ssl_sites_in_bytes(data: &[u8], want_internal: bool) -> Result<Option<SslSites>, Skip> {
    ssl_sites_in(data, want_internal)
}

/// [`ssl_sites`] of a file opened (Ok(None): nothing to probe; Err: skipped, with why).
pub fn ssl_sites_in<R: ReadAt + ?Sized>(
    file: &R,
    want_internal: bool,
) -> Result<Option<SslSites>, Skip> {
    let Some(elf) = Elf::parse(file)? else {
        return Ok(None);
    };
    ssl_sites_of(&elf, want_internal)
}

/// [`ssl_sites`] of a parsed file.
pub fn ssl_sites_of<R: ReadAt + ?Sized>(
    elf: &Elf<R>,
    want_internal: bool,
) -> Result<Option<SslSites>, Skip> {
    let syms = elf.find_symbols(NAMES)?;
    if syms[0].is_none() || syms[1].is_none() {
        return Ok(None);
    }
    let x86 = elf.is_x86_64();
    let mut functions: [Option<FunctionSite>; 5] = [None; 5];
    for (site, sym) in functions.iter_mut().zip(syms) {
        let Some(sym) = sym else {
            continue;
        };
        let Some(sec) = elf.sections.get(sym.section) else {
            continue;
        };
        let (Some((file_off, _)), Some(rel)) = (sec.file_range(), sym.value.checked_sub(sec.addr))
        else {
            continue;
        };
        let code = elf.code_at(sym.section, sym.value, 16);
        let stepped = !(x86 && code.is_some_and(|c| first_instruction_emulated(&c)));
        let Some(offset) = file_off.checked_add(rel) else {
            continue;
        };
        *site = Some(FunctionSite { offset, stepped });
    }
    if functions[0].is_none() || functions[1].is_none() {
        return Ok(None);
    }
    Ok(Some(SslSites {
        functions,
        internal: want_internal
            .then(|| internal_sites_in(elf, &syms))
            .flatten(),
    }))
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

/// Where installed programs live: the usual directories, then those of ebtop's own `PATH`
/// (under sudo, its secure path: much the same).
pub fn program_dirs() -> Vec<PathBuf> {
    let mut dirs: Vec<PathBuf> = [
        "/usr/local/sbin",
        "/usr/local/bin",
        "/usr/sbin",
        "/usr/bin",
        "/sbin",
        "/bin",
    ]
    .iter()
    .map(PathBuf::from)
    .collect();
    if let Some(path) = std::env::var_os("PATH") {
        dirs.extend(std::env::split_paths(&path).filter(|d| d.is_absolute()));
    }
    let mut seen = HashSet::new();
    // /bin and /usr/bin are often one directory: each is read once.
    dirs.retain(|d| std::fs::metadata(d).is_ok_and(|m| seen.insert((m.dev(), m.ino()))));
    dirs
}

/// The executable files of the program directories ([`program_dirs`]) that may hold a copy of
/// OpenSSL or Go's `crypto/tls`: regular files with an execute bit and the ELF magic, one
/// target per file (symbolic links resolved by the inode). Probed at start, a program run
/// later is traced from its first call, not from when its exec was handled (a short command
/// such as a CLI client can be over by then).
pub fn installed_programs() -> Vec<Target> {
    programs_in(&program_dirs())
}

/// The ELF executables of `dirs` (see [`installed_programs`]), each looked at as untrusted
/// (a FIFO or a leased file is passed over, never waited for).
fn programs_in(dirs: &[PathBuf]) -> Vec<Target> {
    use std::os::unix::fs::PermissionsExt;
    let mut out: Vec<Target> = Vec::new();
    let mut ids = HashSet::new();
    for dir in dirs {
        let Ok(entries) = std::fs::read_dir(dir) else {
            continue;
        };
        for e in entries.flatten() {
            let Ok(found) = FoundFile::at(&e.path()) else {
                continue;
            };
            if !ids.insert((found.dev, found.ino)) {
                continue;
            }
            let Ok(file) = found.open() else {
                continue;
            };
            let executable = file
                .file()
                .metadata()
                .is_ok_and(|m| m.permissions().mode() & 0o111 != 0);
            if !executable || !file.is_elf() {
                continue;
            }
            out.push(Target {
                path: e.path(),
                dev: found.dev,
                ino: found.ino,
                shared: false,
                found: None,
            });
        }
    }
    out
}

/// A regular file's target (found now, as untrusted), or None.
pub fn target_of(path: PathBuf, shared: bool) -> Option<Target> {
    let found = FoundFile::at(&path).ok()?;
    Some(Target {
        dev: found.dev,
        ino: found.ino,
        path,
        shared,
        found: Some(found),
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
            if let Some(mut t) = target_of(e.path(), true) {
                if !out.iter().any(|o| o.file_id() == t.file_id()) {
                    // Found again by its path when looked at: no descriptor held meanwhile.
                    t.found = None;
                    out.push(t);
                }
            }
        }
    }
    out
}

/// A process's memory map read at most (a process has at most `vm.max_map_count` maps, 65530
/// by default, of one line each).
const MAX_MAPS_BYTES: u64 = 16 << 20;

/// What a process maps that may hold OpenSSL: its `libssl.so*` libraries, or else its
/// executable (a program that links OpenSSL statically maps no libssl); with nginx's
/// upstream probe wanted (the call chains), the executable in any case. The libraries are
/// found inside the process's root (a container's files are the container's) following no
/// link ([`FoundFile::in_root`]); `skipped` gets those that could not be, with why.
pub fn process_candidates(pid: u32, skipped: &mut Vec<(String, Skip)>) -> Vec<Target> {
    use std::io::Read;
    let mut maps = String::new();
    let read = std::fs::File::open(crate::procfs::pid_path(pid, "maps"))
        .and_then(|f| f.take(MAX_MAPS_BYTES).read_to_string(&mut maps));
    if read.is_err() {
        return Vec::new();
    }
    let files = mapped_executable_files(&maps);
    let libs: Vec<&str> = files
        .iter()
        .copied()
        .filter(|p| {
            Path::new(p)
                .file_name()
                .is_some_and(|n| is_libssl_name(&n.to_string_lossy()))
        })
        .collect();
    if !libs.is_empty() {
        let root = match super::untrusted::process_root(pid) {
            Ok(r) => r,
            Err(_) => return Vec::new(), // gone
        };
        let mut out = Vec::new();
        for p in libs {
            match FoundFile::in_root(std::os::fd::AsFd::as_fd(&root), Path::new(p)) {
                Ok(found) => out.push(Target {
                    path: PathBuf::from(p),
                    dev: found.dev,
                    ino: found.ino,
                    shared: true,
                    found: Some(found),
                }),
                // A library deleted since it was mapped (an upgrade) is not there to read.
                Err(_) if p.ends_with(" (deleted)") => {}
                Err(why) => skipped.push((format!("{p} (pid {pid})"), why)),
            }
        }
        // nginx maps libssl and exports its upstream writer (src/tls/nginx.rs): its
        // executable too, for the call chains.
        if nginx_wanted() {
            out.extend(target_of(crate::procfs::pid_path(pid, "exe"), false));
        }
        return out;
    }
    // The executable: the file the process runs (its `/proc/PID/exe` names that very file).
    target_of(crate::procfs::pid_path(pid, "exe"), false)
        .into_iter()
        .collect()
}

/// The processes running now.
pub fn all_pids() -> Vec<u32> {
    crate::procfs::pids().collect()
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
    fn a_file_without_openssl_has_no_ssl_sites() {
        // This test binary has no OpenSSL; a text file is no ELF.
        let exe = std::env::current_exe().expect("test binary");
        assert_eq!(ssl_sites(&exe, true), None);
        let text = std::env::temp_dir().join(format!("ebtop-tls-{}.txt", std::process::id()));
        std::fs::write(&text, b"SSL_write SSL_read").expect("write");
        assert_eq!(ssl_sites(&text, true), None);
        let _ = std::fs::remove_file(&text);
        assert_eq!(ssl_sites(Path::new("/nonexistent/libssl.so.3"), true), None);
    }

    /// The offsets `ssl_sites` gives (from sections) hold each function's code as the loader
    /// maps it (from the program headers: another way to the same bytes), and a site is
    /// stepped exactly when its first instruction is not one the kernel emulates.
    #[test]
    fn ssl_sites_of_the_system_libssl_point_at_each_functions_code() {
        use object::{Object, ObjectSegment, ObjectSymbol};
        let libs = system_libraries();
        assert!(
            !libs.is_empty(),
            "no libssl.so* in the library directories (install libssl3)"
        );
        for t in libs {
            let sites = ssl_sites(&t.path, true).expect("libssl defines SSL_write and SSL_read");
            let data = std::fs::read(&t.path).expect("read libssl");
            let elf = object::File::parse(&*data).expect("libssl is ELF");
            let names = [WRITE, READ, WRITE_EX, READ_EX, HANDSHAKE];
            for (i, name) in names.iter().enumerate() {
                let sym = elf
                    .dynamic_symbols()
                    .find(|s| s.is_definition() && s.name() == Ok(name));
                let Some(site) = sites.functions[i] else {
                    assert!(sym.is_none(), "{name} is defined but has no site");
                    continue;
                };
                let sym = sym.unwrap_or_else(|| panic!("{name} has a site but no symbol"));
                let seg = elf
                    .segments()
                    .find(|g| (g.address()..g.address() + g.size()).contains(&sym.address()))
                    .expect("a segment maps the function");
                let via_segment = sym.address() - seg.address() + seg.file_range().0;
                assert_eq!(site.offset, via_segment, "{name}");
                let code = &data[site.offset as usize..site.offset as usize + 16];
                assert_eq!(site.stepped, !first_instruction_emulated(code), "{name}");
            }
            assert!(sites.functions[..2].iter().all(Option::is_some));
            assert_eq!(sites.internal, internal_sites(&t.path));
            assert_eq!(ssl_sites(&t.path, false).map(|s| s.internal), Some(None));
        }
    }

    #[test]
    fn openssl_3_internal_read_and_write_are_found_and_differ() {
        // Where the system's libssl is OpenSSL 3 (the suite's hosts), its wrappers have the
        // shape `internal_sites` proves; a file without OpenSSL has none.
        for t in system_libraries() {
            if let Some(sites) = internal_sites(&t.path) {
                assert_ne!(sites.read, sites.write);
                assert!(sites.read > 0 && sites.write > 0);
            }
        }
        let exe = std::env::current_exe().expect("test binary");
        assert_eq!(internal_sites(&exe), None);
        assert_eq!(call_target(0x1000, &[0x10, 0, 0, 0]), Some(0x1015));
        assert_eq!(call_target(0x1000, &(-0x20i32).to_le_bytes()), Some(0xfe5));
    }

    #[test]
    fn installed_programs_are_the_elf_executables_once_each() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        let elf = d.join("tool");
        std::fs::copy("/proc/self/exe", &elf).unwrap();
        std::os::unix::fs::symlink(&elf, d.join("tool-link")).unwrap();
        let script = d.join("script");
        std::fs::write(&script, b"#!/bin/sh\nexit 0\n").unwrap();
        std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
        let not_exec = d.join("data.elf");
        std::fs::copy("/proc/self/exe", &not_exec).unwrap();
        std::fs::set_permissions(&not_exec, std::fs::Permissions::from_mode(0o644)).unwrap();
        std::fs::create_dir(d.join("subdir")).unwrap();
        std::fs::write(d.join("empty"), b"").unwrap();

        // The directory twice (as /bin and /usr/bin often are): each file still once.
        let found = programs_in(&[d.to_path_buf(), d.to_path_buf()]);
        assert_eq!(found.len(), 1, "{found:?}");
        let t = &found[0];
        assert!(t.path == elf || t.path == d.join("tool-link"), "{t:?}");
        assert!(!t.shared);
        assert_eq!(t.file_id(), target_of(elf, false).unwrap().file_id());
        assert!(programs_in(&[d.join("nonexistent")]).is_empty());
    }

    #[test]
    fn program_dirs_are_each_read_once() {
        let dirs = program_dirs();
        let ids: HashSet<(u64, u64)> = dirs
            .iter()
            .map(|d| {
                let m = std::fs::metadata(d).unwrap();
                (m.dev(), m.ino())
            })
            .collect();
        assert_eq!(ids.len(), dirs.len(), "{dirs:?}");
        assert!(dirs.iter().any(|d| d.ends_with("bin")), "{dirs:?}");
    }

    #[test]
    fn wrappers_that_only_align_the_stack_are_seen_through() {
        let call = |disp: i32| -> Vec<u8> {
            let mut c = vec![0xe8];
            c.extend_from_slice(&disp.to_le_bytes());
            c
        };
        let with = |prefix: &[u8], disp: i32| -> Vec<u8> {
            let mut c = prefix.to_vec();
            c.extend(call(disp));
            c.extend_from_slice(&[0x31, 0xd2, 0xc3]); // xor %edx,%edx; ret
            c
        };
        const ENDBR: [u8; 4] = [0xf3, 0x0f, 0x1e, 0xfa];
        // OpenSSL 3 on Debian 12: endbr64; sub $8,%rsp; call X.
        let debian = with(&[&ENDBR[..], &[0x48, 0x83, 0xec, 0x08]].concat(), 0x100);
        assert_eq!(wrapped_call(0x1000, &debian), Some(0x1000 + 8 + 5 + 0x100));
        // OpenSSL 1.1.1 built with frame pointers (seen here): push %rbp; mov %rsp,%rbp; call X.
        let fp = with(&[0x55, 0x48, 0x89, 0xe5], -0x189);
        assert_eq!(wrapped_call(0x5a210, &fp), Some(0x5a090));
        let fp_endbr = with(&[&ENDBR[..], &[0x55, 0x48, 0x8b, 0xec]].concat(), 0);
        assert_eq!(wrapped_call(0x2000, &fp_endbr), Some(0x2000 + 13));
        // Anything done to the arguments first: not a wrapper of this kind.
        let moves = with(&[0x55, 0x48, 0x89, 0xe5, 0x48, 0x89, 0xf7], 0); // mov %rsi,%rdi
        assert_eq!(wrapped_call(0x1000, &moves), None);
        let sub16 = with(&[0x48, 0x83, 0xec, 0x10], 0);
        assert_eq!(wrapped_call(0x1000, &sub16), None);
        assert_eq!(
            wrapped_call(0x1000, &[0x55, 0x48, 0x89, 0xe5, 0xe8, 0]),
            None
        );
    }

    #[test]
    fn emulated_first_instructions_are_told_from_stepped_ones() {
        assert!(first_instruction_emulated(&[0x55])); // push %rbp
        assert!(first_instruction_emulated(&[0x41, 0x55])); // push %r13
        assert!(first_instruction_emulated(&[0xe8, 0, 0, 0, 0])); // call
        assert!(first_instruction_emulated(&[0xeb, 0x02])); // jmp
        assert!(first_instruction_emulated(&[0x90])); // nop
        assert!(!first_instruction_emulated(&[0x48, 0x83, 0xec, 0x18])); // sub $0x18,%rsp
        assert!(!first_instruction_emulated(&[0x49, 0x3b, 0x66, 0x10])); // cmp (Go's check)
        assert!(!first_instruction_emulated(&[0xf3, 0x0f, 0x1e, 0xfa])); // endbr64
        assert!(!first_instruction_emulated(&[0xc3])); // ret
        assert!(!first_instruction_emulated(&[]));
    }

    #[test]
    fn the_system_libssl_defines_the_probed_functions() {
        // Where the host has OpenSSL's libssl (the suite installs libssl-dev), it is found in
        // the library directories and defines all four functions (OpenSSL ≥ 1.1.1).
        let libs = system_libraries();
        for t in &libs {
            let s = ssl_sites(&t.path, false);
            assert!(
                s.as_ref()
                    .is_some_and(|s| s.functions[..4].iter().all(Option::is_some)),
                "{} lacks SSL_write/SSL_read or their _ex: {s:?}",
                t.path.display()
            );
        }
        let ids: HashSet<_> = libs.iter().map(Target::file_id).collect();
        assert_eq!(ids.len(), libs.len(), "one target per file");
    }
}
