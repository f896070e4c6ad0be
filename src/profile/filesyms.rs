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
//! ([`CacheStats`]). A table larger than the whole budget is not kept (its frames are
//! `[unknown]`, the file counted as skipped).

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

/// A function: where it starts in the file's addresses, its length (0: unknown, it runs to
/// the next), and its name in [`SymTable::names`].
#[derive(Clone, Copy, Debug)]
struct Sym {
    addr: u64,
    size: u64,
    name_at: u32,
    name_len: u32,
}

/// One file's functions, sorted by address.
#[derive(Debug, Default)]
pub struct SymTable {
    syms: Vec<Sym>,
    names: Vec<u8>,
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
    /// Reads a file's function names: Go's function table where there is one, and the ELF
    /// symbol tables (a Go program's C parts, every other program). Ok(None): no ELF file.
    pub fn read<R: ReadAt + ?Sized>(file: &R) -> Result<Option<SymTable>, Skip> {
        let Some(elf) = Elf::parse(file)? else {
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
        // Stable: the first added at an address wins (Go's, then .symtab's, then .dynsym's).
        t.syms.sort_by_key(|s| s.addr);
        t.syms.dedup_by_key(|s| s.addr);
        t.syms.shrink_to_fit();
        t.names.shrink_to_fit();
        Ok(Some(t))
    }

    /// Reads a file's Go function table (Go ≥ 1.18, x86-64). Whether there was one.
    fn read_go<R: ReadAt + ?Sized>(&mut self, elf: &Elf<R>) -> Result<bool, Skip> {
        let Some(table) = elf
            .section(".gopclntab")
            .or_else(|| elf.section(".data.rel.ro.gopclntab"))
        else {
            return Ok(false);
        };
        let Some(text) = elf.section(".text") else {
            return Ok(false);
        };
        let text = text.addr;
        let data = elf.section_data(table)?;
        // An older or other table: the ELF symbols (if any) name what they can.
        let Ok(pcln) = Pclntab::parse(&data) else {
            return Ok(false);
        };
        for i in 0..pcln.len() {
            let Some(f) = pcln.function(i) else {
                continue;
            };
            let Some(addr) = text.checked_add(u64::from(f.entry_off)) else {
                continue;
            };
            self.push(addr, u64::from(f.end_off - f.entry_off), f.name)?;
        }
        Ok(true)
    }

    /// Adds the function symbols of the first table of `kind` (linear in its symbols, read in
    /// pieces; its string table read whole, capped).
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
        let strings = elf.file.read_at(str_off, str_size)?;
        let mut at = 0;
        while at < count {
            let n = (count - at).min(SYMBOL_PIECE);
            let piece = elf.file.read_at(off + at * SYM_SIZE, n * SYM_SIZE)?;
            for sym in piece.chunks_exact(SYM_SIZE as usize) {
                let info = sym[4] & 0xf;
                let shndx = u16::from_le_bytes([sym[6], sym[7]]);
                let value = u64::from_le_bytes(sym[8..16].try_into().unwrap_or_default());
                let size = u64::from_le_bytes(sym[16..24].try_into().unwrap_or_default());
                if !(info == STT_FUNC || info == STT_GNU_IFUNC)
                    || shndx == 0
                    || shndx >= 0xff00
                    || value == 0
                {
                    continue;
                }
                let name_off = u32::from_le_bytes(sym[0..4].try_into().unwrap_or_default());
                let name = strings.get(name_off as usize..).unwrap_or_default();
                let name = &name[..name.len().min(MAX_NAME)];
                let len = name.iter().position(|&b| b == 0).unwrap_or(name.len());
                if len > 0 {
                    self.push(value, size, &name[..len])?;
                }
            }
            at += n;
        }
        Ok(())
    }

    fn push(&mut self, addr: u64, size: u64, name: &[u8]) -> Result<(), Skip> {
        let (Ok(name_at), Ok(name_len)) =
            (u32::try_from(self.names.len()), u32::try_from(name.len()))
        else {
            return Err(Skip::new("names past 4 GiB"));
        };
        self.names.extend_from_slice(name);
        self.syms.push(Sym {
            addr,
            size,
            name_at,
            name_len,
        });
        Ok(())
    }

    /// The address a file offset is loaded at (in an executable section).
    fn address_of(&self, file_off: u64) -> Option<u64> {
        self.sections.iter().find_map(|&(off, size, addr)| {
            let rel = file_off.checked_sub(off)?;
            (rel < size).then(|| addr.checked_add(rel)).flatten()
        })
    }

    /// The name of the function at file offset `file_off`, demangled (Rust, C++), or None.
    pub fn name(&mut self, file_off: u64) -> Option<Frame> {
        let va = self.address_of(file_off)?;
        let i = self.syms.partition_point(|s| s.addr <= va).checked_sub(1)?;
        let s = self.syms[i];
        if s.size != 0 && va - s.addr >= s.size {
            return None;
        }
        if let Some(f) = self.frames.get(&(i as u32)) {
            return Some(f.clone());
        }
        let raw = &self.names[s.name_at as usize..(s.name_at + s.name_len) as usize];
        let f = demangle(raw);
        self.frame_bytes += f.len() + FRAME_OVERHEAD;
        self.frames.insert(i as u32, f.clone());
        Some(f)
    }

    /// Memory it holds (an estimate from its buffers' capacities).
    pub fn bytes(&self) -> usize {
        std::mem::size_of::<SymTable>()
            + self.syms.capacity() * std::mem::size_of::<Sym>()
            + self.names.capacity()
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
        if let Ok(d) = cpp_demangle::Symbol::new(s.as_bytes()).map(|sym| sym.demangle()) {
            if let Ok(d) = d {
                return Frame::from(d);
            }
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
    /// Memory the cached tables hold now, and the budget.
    pub bytes: u64,
    pub budget_bytes: u64,
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
    pub fn name<F>(&mut self, key: FileKey, file_off: u64, read: F) -> Option<Frame>
    where
        F: FnOnce() -> Result<Option<SymTable>, Skip>,
    {
        self.tick += 1;
        if !self.files.contains_key(&key) {
            let table = match read() {
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
        while self.used > self.budget {
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

    fn table(names: &[(&str, u64, u64)]) -> SymTable {
        let mut t = SymTable {
            sections: vec![(0x1000, 0x10_0000, 0x40_1000)],
            ..Default::default()
        };
        for (n, a, s) in names {
            t.push(*a, *s, n.as_bytes()).unwrap();
        }
        t.syms.sort_by_key(|s| s.addr);
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
                Ok(Some(table(&[("f", 0x40_1000, 0x10)])))
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
                c.name(key(9), 0x1000, || Err(Skip::new("unreadable"))),
                None
            );
        }
        assert_eq!(c.stats().files_skipped, 1);
        // A table over the whole budget is not kept.
        let mut small = FileCache::new(16);
        assert_eq!(
            small.name(key(1), 0x1000, || Ok(Some(table(&[("f", 0x40_1000, 16)])))),
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
        let t = SymTable::read(&f).unwrap().unwrap();
        assert!(t.len() > 1000, "{} functions", t.len());
        assert!(!t.go);
    }

    #[test]
    fn garbage_is_no_table_and_no_panic() {
        let bytes = crate::tls::elf::minimal();
        // Every truncation of a valid file.
        for n in 0..bytes.len() {
            let _ = SymTable::read(&bytes[..n]);
        }
        let mut t = SymTable::read(&bytes[..]).unwrap().unwrap();
        let _ = t.name(0);
        assert!(
            SymTable::read(&b"not an elf file at all, just some bytes.................."[..])
                .unwrap()
                .is_none()
        );
    }
}
