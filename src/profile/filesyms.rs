//! The profile's user-space names, per mapped file: a file's function symbols (`.symtab`,
//! `.dynsym`) and, for Go programs, its function table (`.gopclntab`: a stripped Go binary
//! still names every function), read once per file and shared by every process that maps it.
//!
//! Files are another user's (docs/security.md, "Files on the host"): read with the bounded
//! ELF reader of src/tls/ ([`Elf`], [`crate::tls::untrusted`]): `pread`s of the tables only,
//! never a mapping (a file truncated under a mapping would turn a read into SIGBUS), capped
//! sizes, opened `O_NONBLOCK`. The cache is keyed by the file's identity — device, inode,
//! size and modification time, so a file rewritten in place is read again — and bounded by a
//! byte budget: the least recently used files are dropped first, each drop counted
//! ([`CacheStats`]). A table holds 24 bytes per function and the names asked for: the names
//! themselves stay in the file (kept open, read one `pread` each when first asked for), as
//! the string tables of large programs are tens of MB (librustc_driver's: 20 MB). A table
//! larger than the whole budget is not kept (its frames are `[unknown]`, the file counted as
//! skipped).

use std::collections::HashMap;

use serde::Serialize;

use super::Frame;
use crate::tls::elf::{Elf, MAX_STRINGS, MAX_SYMBOLS, SHT_DYNSYM, SHT_SYMTAB};
use crate::tls::golang::{Pclntab, MAX_NAME};
use crate::tls::untrusted::{ReadAt, Skip};

/// Memory the cached tables may hold in all, by default.
pub const DEFAULT_BUDGET_BYTES: usize = 64 << 20;

const SYM_SIZE: u64 = 24;
const SYMBOL_PIECE: u64 = 4096;
const SHF_ALLOC: u64 = 2;
const SHF_EXECINSTR: u64 = 4;
const STT_FUNC: u8 = 2;
const STT_GNU_IFUNC: u8 = 10;
/// What a cached name costs beyond its bytes (the map entry, the `Arc`'s counts).
const FRAME_OVERHEAD: usize = 48;

/// A file's identity: the same (device, inode) rewritten in place has another size or time.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct FileKey {
    pub dev: u64,
    pub ino: u64,
    pub size: u64,
    pub mtime_ns: i64,
}

impl FileKey {
    /// The identity of an open (or `O_PATH`) descriptor's file.
    pub fn of_fd(fd: std::os::fd::BorrowedFd) -> Option<FileKey> {
        use std::os::fd::AsRawFd;
        // SAFETY: a zeroed stat is a valid output buffer; the descriptor is open.
        let mut st: libc::stat = unsafe { std::mem::zeroed() };
        // SAFETY: fstat writes into `st`, which outlives the call.
        if unsafe { libc::fstat(fd.as_raw_fd(), &mut st) } != 0 {
            return None;
        }
        Some(FileKey {
            dev: st.st_dev,
            ino: st.st_ino,
            size: st.st_size as u64,
            mtime_ns: st.st_mtime.saturating_mul(1_000_000_000) + st.st_mtime_nsec,
        })
    }
}

/// Files kept open at most (each cached table holds its file, to read names from).
pub const MAX_FILES: usize = 256;

/// A function: where it starts in the file's addresses, its length (0: unknown, it runs to
/// the next), and where its name lies in the file (in string table `strings`).
#[derive(Clone, Copy, Debug)]
struct Sym {
    addr: u64,
    name: u64,
    size: u32,
    strings: u16,
}

/// One file's functions, sorted by address, and the file to read their names from.
#[derive(Default)]
pub struct SymTable {
    file: Option<Box<dyn ReadAt>>,
    syms: Vec<Sym>,
    /// The string tables names lie in: (file offset, end).
    strings: Vec<(u64, u64)>,
    /// The executable sections: (file offset, size, address), to turn a file offset into the
    /// address the symbols are given at.
    sections: Vec<(u64, u64, u64)>,
    /// Names demangled so far, by symbol index.
    frames: HashMap<u32, Frame>,
    frame_bytes: usize,
    /// Whether its names came from a Go function table.
    pub go: bool,
}

impl SymTable {
    /// Reads a file's functions: Go's function table where there is one, and the ELF
    /// symbol tables (a Go program's C parts, every other program). Ok(None): no ELF file.
    pub fn read<R: ReadAt + 'static>(file: R) -> Result<Option<SymTable>, Skip> {
        let mut t = {
            let Some(elf) = Elf::parse(&file)? else {
                return Ok(None);
            };
            let mut t = SymTable {
                sections: elf
                    .sections
                    .iter()
                    .filter(|s| s.flags & (SHF_ALLOC | SHF_EXECINSTR) == SHF_ALLOC | SHF_EXECINSTR)
                    .filter_map(|s| s.file_range().map(|(off, size)| (off, size, s.addr)))
                    .collect(),
                ..Default::default()
            };
            // Go first: at an address both name, the first added is kept.
            t.go = t.read_go(&elf)?;
            for kind in [SHT_SYMTAB, SHT_DYNSYM] {
                t.read_symbols(&elf, kind)?;
            }
            t
        };
        // Stable: the first added at an address wins (Go's, then .symtab's, then .dynsym's).
        t.syms.sort_by_key(|s| s.addr);
        t.syms.dedup_by_key(|s| s.addr);
        t.syms.shrink_to_fit();
        t.file = Some(Box::new(file));
        Ok(Some(t))
    }

    /// A string table's index in [`SymTable::strings`].
    fn add_strings(&mut self, off: u64, size: u64) -> Result<u16, Skip> {
        let end = off
            .checked_add(size)
            .ok_or_else(|| Skip::new("a string table past the end of the address space"))?;
        self.strings.push((off, end));
        u16::try_from(self.strings.len() - 1).map_err(|_| Skip::new("too many string tables"))
    }

    /// Reads a file's Go function table (Go ≥ 1.18, x86-64): read whole (bounded) to walk it,
    /// then dropped. Whether there was one.
    fn read_go<R: ReadAt + ?Sized>(&mut self, elf: &Elf<R>) -> Result<bool, Skip> {
        let Some(table) = elf
            .section(".gopclntab")
            .or_else(|| elf.section(".data.rel.ro.gopclntab"))
        else {
            return Ok(false);
        };
        let (Some(text), Some((table_off, table_size))) =
            (elf.section(".text"), table.file_range())
        else {
            return Ok(false);
        };
        let text = text.addr;
        let data = elf.section_data(table)?;
        // An older or other table: the ELF symbols (if any) name what they can.
        let Ok(pcln) = Pclntab::parse(&data) else {
            return Ok(false);
        };
        let strings = self.add_strings(table_off, table_size)?;
        for i in 0..pcln.len() {
            let Some(f) = pcln.function(i) else {
                continue;
            };
            let Some(addr) = text.checked_add(u64::from(f.entry_off)) else {
                continue;
            };
            // The name's place in the section (a slice of `data`).
            let at = f.name.as_ptr() as usize - data.as_ptr() as usize;
            self.syms.push(Sym {
                addr,
                name: table_off + at as u64,
                size: f.end_off - f.entry_off,
                strings,
            });
        }
        Ok(true)
    }

    /// Adds the function symbols of the first table of `kind` (linear in its symbols, read in
    /// pieces; its string table is not read: names are read when asked for).
    fn read_symbols<R: ReadAt + ?Sized>(&mut self, elf: &Elf<R>, kind: u32) -> Result<(), Skip> {
        let Some(table) = elf.sections.iter().find(|s| s.kind == kind) else {
            return Ok(());
        };
        let Some((off, size)) = table.file_range() else {
            return Ok(());
        };
        let count = size / SYM_SIZE;
        if count > MAX_SYMBOLS {
            return Err(Skip::new(format!(
                "{count} symbols in one table (at most {MAX_SYMBOLS} are read)"
            )));
        }
        let Some((str_off, str_size)) = elf
            .sections
            .get(table.link as usize)
            .and_then(|s| s.file_range())
        else {
            return Ok(());
        };
        if str_size > MAX_STRINGS {
            return Err(Skip::new(format!(
                "a symbol string table of {str_size} bytes (at most {MAX_STRINGS} are read)"
            )));
        }
        let strings = self.add_strings(str_off, str_size)?;
        let mut at = 0;
        while at < count {
            let n = (count - at).min(SYMBOL_PIECE);
            let piece = elf.file.read_at(off + at * SYM_SIZE, n * SYM_SIZE)?;
            for sym in piece.chunks_exact(SYM_SIZE as usize) {
                let info = sym[4] & 0xf;
                let shndx = u16::from_le_bytes([sym[6], sym[7]]);
                let value = u64::from_le_bytes(sym[8..16].try_into().unwrap_or_default());
                let size = u64::from_le_bytes(sym[16..24].try_into().unwrap_or_default());
                let name_off = u32::from_le_bytes(sym[0..4].try_into().unwrap_or_default());
                if !(info == STT_FUNC || info == STT_GNU_IFUNC)
                    || shndx == 0
                    || shndx >= 0xff00
                    || value == 0
                    || name_off == 0
                    || u64::from(name_off) >= str_size
                {
                    continue;
                }
                self.syms.push(Sym {
                    addr: value,
                    name: str_off + u64::from(name_off),
                    size: u32::try_from(size).unwrap_or(u32::MAX),
                    strings,
                });
            }
            at += n;
        }
        Ok(())
    }

    /// The address a file offset is loaded at (in an executable section).
    fn address_of(&self, file_off: u64) -> Option<u64> {
        self.sections.iter().find_map(|&(off, size, addr)| {
            let rel = file_off.checked_sub(off)?;
            (rel < size).then(|| addr.checked_add(rel)).flatten()
        })
    }

    /// The name of the function at file offset `file_off`, demangled (Rust, C++), or None
    /// (no function there, or its name could not be read).
    pub fn name(&mut self, file_off: u64) -> Option<Frame> {
        let va = self.address_of(file_off)?;
        let i = self.syms.partition_point(|s| s.addr <= va).checked_sub(1)?;
        let s = self.syms[i];
        if s.size != 0 && va - s.addr >= u64::from(s.size) {
            return None;
        }
        if let Some(f) = self.frames.get(&(i as u32)) {
            return Some(f.clone());
        }
        let (_, end) = *self.strings.get(usize::from(s.strings))?;
        let len = end.checked_sub(s.name)?.min(MAX_NAME as u64);
        let raw = self.file.as_ref()?.read_at(s.name, len).ok()?;
        let raw = &raw[..raw.iter().position(|&b| b == 0).unwrap_or(raw.len())];
        if raw.is_empty() {
            return None;
        }
        let f = demangle(raw);
        self.frame_bytes += f.len() + FRAME_OVERHEAD;
        self.frames.insert(i as u32, f.clone());
        Some(f)
    }

    /// Memory it holds (an estimate from its buffers' capacities).
    pub fn bytes(&self) -> usize {
        std::mem::size_of::<SymTable>()
            + self.syms.capacity() * std::mem::size_of::<Sym>()
            + self.strings.capacity() * 16
            + self.sections.capacity() * 24
            + self.frame_bytes
    }

    pub fn len(&self) -> usize {
        self.syms.len()
    }

    pub fn is_empty(&self) -> bool {
        self.syms.is_empty()
    }
}

/// A symbol's name as shown: Rust's (legacy and v0) and C++'s demangled, others as they are.
fn demangle(raw: &[u8]) -> Frame {
    let s = String::from_utf8_lossy(raw);
    if let Ok(d) = rustc_demangle::try_demangle(&s) {
        return Frame::from(format!("{d:#}"));
    }
    if s.starts_with("_Z") {
        if let Ok(Ok(d)) = cpp_demangle::Symbol::new(s.as_bytes()).map(|sym| sym.demangle()) {
            return Frame::from(d);
        }
    }
    Frame::from(s.as_ref())
}

/// The cache's counts over the session (JSON `profile` lines' `symbol_cache`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct CacheStats {
    /// Files whose tables were read (again after an eviction: counted again).
    pub files_read: u64,
    /// Tables dropped to stay within the budget.
    pub evictions: u64,
    /// Files not read: unreadable, over a cap, larger than the whole budget.
    pub files_skipped: u64,
    /// Frames whose file was not cached and could not be reached (the process gone, the
    /// code unmapped): `[unknown]`; the file is read for the next process that maps it.
    pub files_gone: u64,
    /// Memory the cached tables hold now, and the budget.
    pub bytes: u64,
    pub budget_bytes: u64,
}

impl CacheStats {
    /// Not known: a profile replayed from a recording (the cache ran while it was recorded;
    /// its budget is never 0 live).
    pub fn is_unknown(&self) -> bool {
        self.budget_bytes == 0
    }
}

struct Cached {
    /// None: the file was skipped (not asked again while cached).
    table: Option<SymTable>,
    bytes: usize,
    last_used: u64,
}

/// Tables of the files processes map, shared across processes, least recently used dropped
/// first past the budget.
pub struct FileCache {
    files: HashMap<FileKey, Cached>,
    budget: usize,
    used: usize,
    tick: u64,
    stats: CacheStats,
}

impl FileCache {
    pub fn new(budget: usize) -> FileCache {
        FileCache {
            files: HashMap::new(),
            budget,
            used: 0,
            tick: 0,
            stats: CacheStats {
                budget_bytes: budget as u64,
                ..Default::default()
            },
        }
    }

    pub fn stats(&self) -> CacheStats {
        CacheStats {
            bytes: self.used as u64,
            ..self.stats
        }
    }

    /// The name at `file_off` of the file `key`, its table read with `read` if not cached.
    /// `read` answers None where the file could not be reached (the process is gone): that
    /// is not the file's fault, and nothing is cached.
    pub fn name<F>(&mut self, key: FileKey, file_off: u64, read: F) -> Option<Frame>
    where
        F: FnOnce() -> Option<Result<Option<SymTable>, Skip>>,
    {
        self.tick += 1;
        if !self.files.contains_key(&key) {
            let Some(read) = read() else {
                self.stats.files_gone += 1;
                return None;
            };
            let table = match read {
                Ok(Some(t)) if t.bytes() <= self.budget => {
                    self.stats.files_read += 1;
                    Some(t)
                }
                // Not ELF: nothing to name, nothing to count.
                Ok(None) => None,
                _ => {
                    self.stats.files_skipped += 1;
                    None
                }
            };
            let bytes = table.as_ref().map_or(0, SymTable::bytes) + 64;
            self.used += bytes;
            self.files.insert(
                key,
                Cached {
                    table,
                    bytes,
                    last_used: 0,
                },
            );
        }
        let c = self.files.get_mut(&key)?;
        c.last_used = self.tick;
        let name = c.table.as_mut().and_then(|t| t.name(file_off));
        if let Some(t) = &c.table {
            let now = t.bytes() + 64;
            self.used = self.used + now - c.bytes;
            c.bytes = now;
        }
        self.evict(key);
        name
    }

    /// Drops the least recently used tables until the cache is within its budget (`keep`
    /// last: the one in use goes only when it alone is over).
    fn evict(&mut self, keep: FileKey) {
        while self.used > self.budget || self.files.len() > MAX_FILES {
            let victim = self
                .files
                .iter()
                .filter(|(k, _)| **k != keep)
                .min_by_key(|(_, c)| c.last_used)
                .map(|(k, _)| *k)
                .unwrap_or(keep);
            let Some(c) = self.files.remove(&victim) else {
                break;
            };
            self.used -= c.bytes;
            self.stats.evictions += 1;
        }
    }
}

/// The fuzz target `symbols` (fuzz/fuzz_targets/symbols.rs): the profile's reader of a
/// mapped file's function names — ELF `.symtab`/`.dynsym`, a Go program's `.gopclntab`, the
/// names read back and demangled — on any bytes.
#[cfg(any(test, feature = "test-support"))]
pub mod fuzzing {
    use super::*;
    use std::path::Path;

    /// Names asked of one table at most (each a `pread` and a demangling).
    const MAX_LOOKUPS: usize = 4096;
    /// Where the wrapper puts `.text` (a Go table's entries are offsets into it).
    const TEXT_ADDR: u64 = 0x40_1000;

    /// Bytes as a file.
    pub struct Owned(pub Vec<u8>);

    impl ReadAt for Owned {
        fn len(&self) -> u64 {
            self.0.len() as u64
        }
        fn read_at(&self, offset: u64, len: u64) -> Result<Vec<u8>, Skip> {
            self.0[..].read_at(offset, len)
        }
    }

    /// The first byte picks what the rest is: even, a whole file; odd, a `.gopclntab`'s
    /// bytes, put in an ELF file beside a `.text` (so mutations reach the Go table without
    /// first having to keep an ELF file's headers whole). The table read, every function's
    /// name is asked for at its first byte, its last and one past its end. Returns the names
    /// found.
    pub fn drive(data: &[u8]) -> Vec<Frame> {
        let Some((&mode, rest)) = data.split_first() else {
            return Vec::new();
        };
        let file = if mode % 2 == 0 {
            rest.to_vec()
        } else {
            go_file(rest)
        };
        let Ok(Some(mut t)) = SymTable::read(Owned(file)) else {
            return Vec::new();
        };
        let mut out = Vec::new();
        let syms: Vec<Sym> = t.syms.iter().take(MAX_LOOKUPS).copied().collect();
        for s in syms {
            let Some(off) = t.sections.iter().find_map(|&(off, size, addr)| {
                let rel = s.addr.checked_sub(addr)?;
                (rel < size).then(|| off.checked_add(rel)).flatten()
            }) else {
                continue;
            };
            let first = t.name(off);
            // Asked again: the cached name, the same.
            assert_eq!(t.name(off), first, "a name that changed when asked again");
            let last = u64::from(s.size.max(1)) - 1;
            let _ = t.name(off.saturating_add(last));
            let _ = t.name(off.saturating_add(u64::from(s.size)));
            out.extend(first);
        }
        out
    }

    /// An ELF file with a `.text` at [`TEXT_ADDR`] (its bytes are never read: it claims
    /// 16 MiB past the file's end) and `table` as its `.gopclntab`.
    pub fn go_file(table: &[u8]) -> Vec<u8> {
        let shstr = b"\0.text\0.gopclntab\0.shstrtab\0";
        let mut f = vec![0u8; 64];
        f[..8].copy_from_slice(b"\x7fELF\x02\x01\x01\x00");
        f[18..20].copy_from_slice(&crate::tls::elf::EM_X86_64.to_le_bytes());
        let table_off = f.len() as u64;
        f.extend_from_slice(table);
        let shstr_off = f.len() as u64;
        f.extend_from_slice(shstr);
        let shoff = f.len() as u64;
        let sh = |name: u32, kind: u32, flags: u64, addr: u64, off: u64, size: u64| {
            let mut s = vec![0u8; 64];
            s[..4].copy_from_slice(&name.to_le_bytes());
            s[4..8].copy_from_slice(&kind.to_le_bytes());
            s[8..16].copy_from_slice(&flags.to_le_bytes());
            s[16..24].copy_from_slice(&addr.to_le_bytes());
            s[24..32].copy_from_slice(&off.to_le_bytes());
            s[32..40].copy_from_slice(&size.to_le_bytes());
            s
        };
        f.extend(vec![0u8; 64]);
        f.extend(sh(
            1,
            1,
            SHF_ALLOC | SHF_EXECINSTR,
            TEXT_ADDR,
            0x1000,
            16 << 20,
        ));
        f.extend(sh(
            7,
            1,
            SHF_ALLOC,
            0x80_0000,
            table_off,
            table.len() as u64,
        ));
        f.extend(sh(18, 3, 0, 0, shstr_off, shstr.len() as u64));
        f[40..48].copy_from_slice(&shoff.to_le_bytes());
        f[58..60].copy_from_slice(&64u16.to_le_bytes());
        f[60..62].copy_from_slice(&4u16.to_le_bytes());
        f[62..64].copy_from_slice(&3u16.to_le_bytes());
        f
    }

    /// The fixtures the seeds are made of (tests/fixtures/profile/symbols/, made by its
    /// make.sh from real builds).
    pub const FIXTURES: &str = "tests/fixtures/profile/symbols";

    /// Seeds: a small shared object (C, C++ and Rust names; with its symbol tables and
    /// stripped to `.dynsym`), a stripped Go program's function table cut to 25 of its
    /// functions, as a table and as a whole file, and the TLS reader's minimal ELF file.
    pub fn seeds(root: &Path) -> std::io::Result<Vec<(String, Vec<u8>)>> {
        let dir = root.join(FIXTURES);
        let mut out = Vec::new();
        for name in ["syms.so", "syms.stripped.so"] {
            let mut d = vec![0u8];
            d.extend(std::fs::read(dir.join(name))?);
            out.push((name.to_string(), d));
        }
        let table = std::fs::read(dir.join("go_stripped.pclntab"))?;
        let mut d = vec![1u8];
        d.extend_from_slice(&table);
        out.push(("go_stripped.pclntab".into(), d));
        let mut d = vec![0u8];
        d.extend(go_file(&table));
        out.push(("go_stripped.elf".into(), d));
        let mut d = vec![0u8];
        d.extend(crate::tls::elf::minimal());
        out.push(("minimal.elf".into(), d));
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tls::untrusted::FoundFile;
    use std::path::Path;

    fn key(ino: u64) -> FileKey {
        FileKey {
            dev: 1,
            ino,
            size: 0,
            mtime_ns: 0,
        }
    }

    /// Bytes as a file.
    struct Bytes(Vec<u8>);

    impl ReadAt for Bytes {
        fn len(&self) -> u64 {
            self.0.len() as u64
        }
        fn read_at(&self, offset: u64, len: u64) -> Result<Vec<u8>, Skip> {
            self.0[..].read_at(offset, len)
        }
    }

    /// A table of functions (name, address, size) in a text section at file offset 0x1000,
    /// address 0x40_1000; their names in a "file" of their own.
    fn table(names: &[(&str, u64, u64)]) -> SymTable {
        let mut file = vec![0u8];
        let mut t = SymTable {
            sections: vec![(0x1000, 0x10_0000, 0x40_1000)],
            ..Default::default()
        };
        for (n, a, s) in names {
            t.syms.push(Sym {
                addr: *a,
                name: file.len() as u64,
                size: *s as u32,
                strings: 0,
            });
            file.extend_from_slice(n.as_bytes());
            file.push(0);
        }
        t.strings.push((0, file.len() as u64));
        t.syms.sort_by_key(|s| s.addr);
        t.file = Some(Box::new(Bytes(file)));
        t
    }

    #[test]
    fn offsets_name_the_function_that_covers_them() {
        let mut t = table(&[
            ("b", 0x40_2000, 0x100),
            ("a", 0x40_1000, 0x10),
            ("_ZN4core3fmt5write17h0123456789abcdefE", 0x40_3000, 0),
            ("_ZN3foo3barEv", 0x40_4000, 8),
        ]);
        assert_eq!(t.name(0x1000).as_deref(), Some("a"));
        assert_eq!(t.name(0x100f).as_deref(), Some("a"));
        assert_eq!(t.name(0x1010), None, "past a's end, before b");
        assert_eq!(t.name(0x20ff).as_deref(), Some("b"));
        assert_eq!(t.name(0x3fff).as_deref(), Some("core::fmt::write"));
        assert_eq!(t.name(0x4000).as_deref(), Some("foo::bar()"));
        assert_eq!(t.name(0x500), None, "outside the executable sections");
        assert_eq!(t.name(0x20_0000), None);
    }

    #[test]
    fn the_cache_stays_within_its_budget_and_counts_what_it_drops() {
        let one = table(&[("f", 0x40_1000, 0x10)]).bytes() + 64;
        // Room for two tables, not three.
        let mut c = FileCache::new(2 * one + one / 2);
        let mut reads = 0;
        let mut look = |c: &mut FileCache, ino: u64| {
            c.name(key(ino), 0x1000, || {
                reads += 1;
                Some(Ok(Some(table(&[("f", 0x40_1000, 0x10)]))))
            })
        };
        for ino in [1, 2, 1, 3] {
            assert_eq!(look(&mut c, ino).as_deref(), Some("f"));
            assert!(c.stats().bytes <= c.stats().budget_bytes);
        }
        // 2 was the least recently used when 3 came.
        let s = c.stats();
        assert_eq!((s.files_read, s.evictions), (3, 1));
        assert!(c.files.contains_key(&key(1)) && c.files.contains_key(&key(3)));
        look(&mut c, 1);
        assert_eq!(c.stats().files_read, 3, "1 was kept");
        look(&mut c, 2);
        assert_eq!(c.stats().files_read, 4, "2 is read again");
        assert_eq!(reads, 4);
        // Skipped files are not read again while cached, and counted once.
        for _ in 0..3 {
            assert_eq!(
                c.name(key(9), 0x1000, || Some(Err(Skip::new("unreadable")))),
                None
            );
        }
        assert_eq!(c.stats().files_skipped, 1);
        // A file out of reach (its process gone) is asked for again next time.
        assert_eq!(c.name(key(10), 0x1000, || None), None);
        assert_eq!(
            c.name(key(10), 0x1000, || Some(Ok(Some(table(&[(
                "g", 0x40_1000, 16
            )])))))
            .as_deref(),
            Some("g")
        );
        assert_eq!(c.stats().files_gone, 1);
        // A table over the whole budget is not kept.
        let mut small = FileCache::new(16);
        assert_eq!(
            small.name(key(1), 0x1000, || Some(Ok(Some(table(&[(
                "f", 0x40_1000, 16
            )]))))),
            None
        );
        assert_eq!(small.stats().files_skipped, 1);
    }

    #[test]
    fn this_test_binary_names_its_own_functions() {
        let f = FoundFile::at(Path::new("/proc/self/exe"))
            .unwrap()
            .open()
            .unwrap();
        let mut t = SymTable::read(f).unwrap().unwrap();
        assert!(t.len() > 1000, "{} functions", t.len());
        assert!(!t.go);
        // This very function, by the file offset of its own code.
        let here = this_test_binary_names_its_own_functions as fn() as usize as u64;
        let maps = std::fs::read_to_string("/proc/self/maps").unwrap();
        let off = maps
            .lines()
            .find_map(|l| {
                let (range, rest) = l.split_once(' ')?;
                let (a, b) = range.split_once('-')?;
                let (a, b) = (
                    u64::from_str_radix(a, 16).ok()?,
                    u64::from_str_radix(b, 16).ok()?,
                );
                let off = u64::from_str_radix(rest.split(' ').nth(1)?, 16).ok()?;
                (a <= here && here < b).then_some(here - a + off)
            })
            .unwrap();
        let name = t.name(off).unwrap();
        assert!(
            name.ends_with("this_test_binary_names_its_own_functions"),
            "{name}"
        );
    }

    #[test]
    fn garbage_is_no_table_and_no_panic() {
        let bytes = crate::tls::elf::minimal();
        // Every truncation of a valid file, every offset asked.
        for n in 0..bytes.len() {
            if let Ok(Some(mut t)) = SymTable::read(Bytes(bytes[..n].to_vec())) {
                for off in 0..n as u64 {
                    let _ = t.name(off);
                }
            }
        }
        let mut t = SymTable::read(Bytes(bytes.clone())).unwrap().unwrap();
        assert_eq!(t.len(), 2, "SSL_write and SSL_read");
        let _ = t.name(0);
        let text = b"not an elf file at all, just some bytes..................".to_vec();
        assert!(SymTable::read(Bytes(text)).unwrap().is_none());
    }

    /// The fuzz target's seeds, real builds' tables: every function named as its symbol
    /// says, mangled names demangled; a stripped Go program named from its table alone.
    #[test]
    fn the_fuzz_seeds_name_their_functions() {
        let root = Path::new(env!("CARGO_MANIFEST_DIR"));
        let seeds = fuzzing::seeds(root).unwrap();
        let names = |seed: &str| -> Vec<String> {
            let (_, d) = seeds.iter().find(|(n, _)| n == seed).unwrap();
            let mut v: Vec<String> = fuzzing::drive(d).iter().map(|f| f.to_string()).collect();
            v.sort();
            v
        };
        assert_eq!(
            names("syms.so"),
            [
                "core::fmt::write",
                "foo::Bar::method(int)",
                "hot_loop",
                "impl_a",
                "local_step",
                "mycrate::work",
                // The IFUNC `picked` and its resolver share an address: .symtab lists the
                // (local) resolver first, and the first at an address is kept.
                "resolve_pick",
            ]
        );
        // .dynsym only: the exported functions (the IFUNC by its own name).
        assert_eq!(
            names("syms.stripped.so"),
            [
                "core::fmt::write",
                "foo::Bar::method(int)",
                "hot_loop",
                "mycrate::work",
                "picked",
            ]
        );
        for seed in ["go_stripped.pclntab", "go_stripped.elf"] {
            let go = names(seed);
            assert_eq!(go.len(), 25, "{seed}: {go:?}");
            assert!(go.iter().any(|n| n == "main.main"), "{seed}");
            assert!(go.iter().any(|n| n == "runtime.cmpstring"), "{seed}");
        }
        assert_eq!(names("minimal.elf"), ["SSL_read", "SSL_write"]);
    }

    /// Every byte of the small seeds damaged in turn: read or refused, never a panic.
    #[test]
    fn damaged_seeds_are_driven_without_panic() {
        let root = Path::new(env!("CARGO_MANIFEST_DIR"));
        for (_, seed) in fuzzing::seeds(root).unwrap() {
            for i in 1..seed.len() {
                let mut d = seed.clone();
                d[i] ^= 0xff;
                fuzzing::drive(&d);
                d.truncate(i);
                fuzzing::drive(&d);
            }
        }
    }
}
