//! A bounded ELF reader for untrusted files (64-bit little-endian: x86-64 and arm64): the
//! section headers, the sections named, the symbols named — each part read on its own with a
//! bounded `pread` ([`ReadAt`]), never the whole file, never a mapping. Linear in what it
//! reads; caps on the section count, the symbol count and the string table's size.

use super::untrusted::{ReadAt, Skip};

/// Sections read at most (a program has tens).
pub const MAX_SECTIONS: usize = 4096;
/// Section names are compared on at most this many bytes (ours are short).
const MAX_SECTION_NAME: usize = 64;
/// Symbols read per table at most (read in pieces of [`SYMBOL_PIECE`] entries).
pub const MAX_SYMBOLS: u64 = 4 << 20;
/// A symbol table's string table read at most.
pub const MAX_STRINGS: u64 = 64 << 20;
const SYMBOL_PIECE: u64 = 4096;
const SYM_SIZE: u64 = 24;

pub const SHT_SYMTAB: u32 = 2;
pub const SHT_NOBITS: u32 = 8;
pub const SHT_DYNSYM: u32 = 11;
const SHF_ALLOC: u64 = 2;
pub const EM_X86_64: u16 = 62;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Section {
    pub name: Vec<u8>,
    pub kind: u32,
    pub flags: u64,
    pub addr: u64,
    pub offset: u64,
    pub size: u64,
    pub link: u32,
}

impl Section {
    /// Where its bytes lie in the file (None: it has none there).
    pub fn file_range(&self) -> Option<(u64, u64)> {
        (self.kind != SHT_NOBITS).then_some((self.offset, self.size))
    }
}

/// A symbol found by name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Symbol {
    pub value: u64,
    pub size: u64,
    pub section: usize,
}

/// An ELF file's header and section headers, and the file to read the rest from.
pub struct Elf<'a, R: ReadAt + ?Sized> {
    pub file: &'a R,
    pub machine: u16,
    pub sections: Vec<Section>,
}

fn u16_at(b: &[u8], at: usize) -> u16 {
    u16::from_le_bytes([b[at], b[at + 1]])
}
fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(b[at..at + 4].try_into().unwrap_or_default())
}
fn u64_at(b: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(b[at..at + 8].try_into().unwrap_or_default())
}

impl<'a, R: ReadAt + ?Sized> Elf<'a, R> {
    /// Ok(None): not a 64-bit little-endian ELF file (nothing to look for in it). Err: an ELF
    /// file that cannot be read within the bounds (skipped, with the reason).
    pub fn parse(file: &'a R) -> Result<Option<Elf<'a, R>>, Skip> {
        if file.len() < 64 {
            return Ok(None);
        }
        let h = file.read_at(0, 64)?;
        if &h[..4] != b"\x7fELF" || h[4] != 2 || h[5] != 1 {
            return Ok(None);
        }
        let machine = u16_at(&h, 18);
        let shoff = u64_at(&h, 40);
        let shentsize = u16_at(&h, 58);
        let shnum = usize::from(u16_at(&h, 60));
        let shstrndx = usize::from(u16_at(&h, 62));
        if shnum == 0 {
            return Ok(None); // no sections (or more than 65279: not ours)
        }
        if shentsize != 64 {
            return Err(Skip::new("ELF section headers of an unexpected size"));
        }
        if shnum > MAX_SECTIONS {
            return Err(Skip::new(format!(
                "{shnum} ELF sections (at most {MAX_SECTIONS} are read)"
            )));
        }
        let table = file.read_at(shoff, shnum as u64 * 64)?;
        let mut sections: Vec<Section> = table
            .chunks_exact(64)
            .map(|s| Section {
                name: Vec::new(),
                kind: u32_at(s, 4),
                flags: u64_at(s, 8),
                addr: u64_at(s, 16),
                offset: u64_at(s, 24),
                size: u64_at(s, 32),
                link: u32_at(s, 40),
            })
            .collect();
        // Section names, from the section-name string table (if there is one).
        let names_at: Vec<u32> = table.chunks_exact(64).map(|s| u32_at(s, 0)).collect();
        if let Some((off, size)) = sections.get(shstrndx).and_then(Section::file_range) {
            let size = size.min(1 << 20);
            if let Ok(names) = file.read_at(off, size) {
                for (sec, at) in sections.iter_mut().zip(names_at) {
                    let from = names.get(at as usize..).unwrap_or_default();
                    let from = &from[..from.len().min(MAX_SECTION_NAME)];
                    let end = from.iter().position(|&b| b == 0).unwrap_or(from.len());
                    sec.name = from[..end].to_vec();
                }
            }
        }
        Ok(Some(Elf {
            file,
            machine,
            sections,
        }))
    }

    pub fn is_x86_64(&self) -> bool {
        self.machine == EM_X86_64
    }

    /// The first section of that name.
    pub fn section(&self, name: &str) -> Option<&Section> {
        self.sections.iter().find(|s| s.name == name.as_bytes())
    }

    /// A section's bytes (at most [`super::untrusted::MAX_READ_BYTES`]).
    pub fn section_data(&self, sec: &Section) -> Result<Vec<u8>, Skip> {
        let (off, size) = sec
            .file_range()
            .ok_or_else(|| Skip::new("a section with no bytes in the file"))?;
        self.file.read_at(off, size)
    }

    /// `len` bytes of the code at `addr` in section `index` (fewer where the section ends
    /// first), or None.
    pub fn code_at(&self, index: usize, addr: u64, len: u64) -> Option<Vec<u8>> {
        let sec = self.sections.get(index)?;
        let (off, size) = sec.file_range()?;
        let rel = addr.checked_sub(sec.addr)?;
        let len = len.min(size.checked_sub(rel)?);
        if len == 0 {
            return None;
        }
        self.file.read_at(off.checked_add(rel)?, len).ok()
    }

    /// The file offset of address `addr` (in an allocated section with bytes in the file).
    pub fn file_offset(&self, addr: u64) -> Option<u64> {
        self.sections.iter().find_map(|s| {
            let (off, size) = s.file_range()?;
            (s.flags & SHF_ALLOC != 0 && addr >= s.addr && addr - s.addr < size)
                .then(|| (addr - s.addr).checked_add(off))
                .flatten()
        })
    }

    /// The definitions of the symbols `names`, each the first found in `.dynsym` then
    /// `.symtab` (as the loader and libbpf would take them). A table over the caps is an error.
    /// Time: linear in the symbols read, times the names' total length.
    pub fn find_symbols<const N: usize>(
        &self,
        names: [&str; N],
    ) -> Result<[Option<Symbol>; N], Skip> {
        let mut found = [None; N];
        for kind in [SHT_DYNSYM, SHT_SYMTAB] {
            let Some(table) = self.sections.iter().find(|s| s.kind == kind) else {
                continue;
            };
            let Some((off, size)) = table.file_range() else {
                continue;
            };
            let count = size / SYM_SIZE;
            if count > MAX_SYMBOLS {
                return Err(Skip::new(format!(
                    "{count} symbols in one table (at most {MAX_SYMBOLS} are read)"
                )));
            }
            let Some((str_off, str_size)) = self
                .sections
                .get(table.link as usize)
                .and_then(Section::file_range)
            else {
                continue;
            };
            if str_size > MAX_STRINGS {
                return Err(Skip::new(format!(
                    "a symbol string table of {str_size} bytes (at most {MAX_STRINGS} are read)"
                )));
            }
            let strings = self.file.read_at(str_off, str_size)?;
            let mut at = 0;
            while at < count {
                let n = (count - at).min(SYMBOL_PIECE);
                let piece = self.file.read_at(off + at * SYM_SIZE, n * SYM_SIZE)?;
                for sym in piece.chunks_exact(SYM_SIZE as usize) {
                    let info = sym[4];
                    let shndx = u16_at(sym, 6);
                    let size = u64_at(sym, 16);
                    // Defined in a section of the file (not undefined, absolute, common…),
                    // a function or data (or untyped with a size).
                    let defined = shndx != 0
                        && shndx < 0xff00
                        && match info & 0xf {
                            0 => size != 0,
                            1 | 2 => true,
                            _ => false,
                        };
                    if !defined {
                        continue;
                    }
                    let name = strings.get(u32_at(sym, 0) as usize..).unwrap_or_default();
                    for (i, want) in names.iter().enumerate() {
                        let w = want.as_bytes();
                        if found[i].is_none()
                            && name.get(..w.len()) == Some(w)
                            && name.get(w.len()) == Some(&0)
                        {
                            found[i] = Some(Symbol {
                                value: u64_at(sym, 8),
                                size,
                                section: usize::from(shndx),
                            });
                        }
                    }
                }
                at += n;
            }
        }
        Ok(found)
    }
}

/// A little ELF file: header, a text section with a function, a symbol table naming it
/// `SSL_write` and `SSL_read`, their strings and the section names.
#[cfg(any(test, feature = "test-support"))]
pub fn minimal() -> Vec<u8> {
    let mut f = vec![0u8; 64];
    f[..8].copy_from_slice(b"\x7fELF\x02\x01\x01\x00");
    f[18..20].copy_from_slice(&EM_X86_64.to_le_bytes());
    let text_off = f.len() as u64;
    f.extend([0x55, 0x48, 0x89, 0xe5, 0xc3, 0x55, 0xc3, 0x90]);
    let strtab_off = f.len() as u64;
    let strtab = b"\0SSL_write\0SSL_read\0";
    f.extend(strtab);
    let symtab_off = f.len() as u64;
    let sym = |name: u32, value: u64| {
        let mut s = vec![0u8; 24];
        s[..4].copy_from_slice(&name.to_le_bytes());
        s[4] = 0x12; // global function
        s[6..8].copy_from_slice(&1u16.to_le_bytes());
        s[8..16].copy_from_slice(&value.to_le_bytes());
        s[16..24].copy_from_slice(&4u64.to_le_bytes());
        s
    };
    f.extend(vec![0u8; 24]);
    f.extend(sym(1, 0x1000));
    f.extend(sym(11, 0x1005));
    let shstr_off = f.len() as u64;
    let shstr = b"\0.text\0.dynsym\0.dynstr\0.shstrtab\0";
    f.extend(shstr);
    let shoff = f.len() as u64;
    let sh = |name: u32, kind: u32, flags: u64, addr: u64, off: u64, size: u64, link: u32| {
        let mut s = vec![0u8; 64];
        s[..4].copy_from_slice(&name.to_le_bytes());
        s[4..8].copy_from_slice(&kind.to_le_bytes());
        s[8..16].copy_from_slice(&flags.to_le_bytes());
        s[16..24].copy_from_slice(&addr.to_le_bytes());
        s[24..32].copy_from_slice(&off.to_le_bytes());
        s[32..40].copy_from_slice(&size.to_le_bytes());
        s[40..44].copy_from_slice(&link.to_le_bytes());
        s
    };
    f.extend(vec![0u8; 64]);
    f.extend(sh(1, 1, 6, 0x1000, text_off, 8, 0));
    f.extend(sh(7, SHT_DYNSYM, 2, 0, symtab_off, 72, 3));
    f.extend(sh(15, 3, 2, 0, strtab_off, strtab.len() as u64, 0));
    f.extend(sh(23, 3, 0, 0, shstr_off, shstr.len() as u64, 0));
    f[40..48].copy_from_slice(&shoff.to_le_bytes());
    f[58..60].copy_from_slice(&64u16.to_le_bytes());
    f[60..62].copy_from_slice(&5u16.to_le_bytes());
    f[62..64].copy_from_slice(&4u16.to_le_bytes());
    f
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_minimal_file_yields_its_sections_and_symbols() {
        let data = minimal();
        let elf = Elf::parse(&data[..]).unwrap().expect("an ELF file");
        assert!(elf.is_x86_64());
        assert_eq!(elf.section(".text").map(|s| s.addr), Some(0x1000));
        let [w, r, x] = elf
            .find_symbols(["SSL_write", "SSL_read", "SSL_peek"])
            .unwrap();
        assert_eq!(w.map(|s| s.value), Some(0x1000));
        assert_eq!(r.map(|s| (s.value, s.section)), Some((0x1005, 1)));
        assert_eq!(x, None);
        assert_eq!(elf.code_at(1, 0x1005, 16), Some(vec![0x55, 0xc3, 0x90]));
        assert_eq!(elf.file_offset(0x1005), Some(64 + 5));
        assert_eq!(elf.file_offset(0x2000), None);
    }

    #[test]
    fn every_prefix_and_damage_of_a_file_is_refused_or_read_without_panic() {
        let data = minimal();
        for n in 0..data.len() {
            if let Ok(Some(e)) = Elf::parse(&data[..n]) {
                let _ = e.find_symbols(["SSL_write"]);
            }
        }
        for i in 0..data.len() {
            let mut d = data.clone();
            d[i] ^= 0xff;
            if let Ok(Some(e)) = Elf::parse(&d[..]) {
                let _ = e.find_symbols(["SSL_write", "SSL_read"]);
            }
        }
        assert!(
            Elf::parse(&b"not an ELF file at all, but long enough to have a header......"[..])
                .unwrap()
                .is_none()
        );
    }

    #[test]
    fn a_table_over_the_caps_is_refused_before_it_is_read() {
        let mut data = minimal();
        // Section 2 (.dynsym) claims 2^40 bytes of symbols.
        let shoff = u64_at(&data, 40) as usize;
        let at = shoff + 2 * 64 + 32;
        data[at..at + 8].copy_from_slice(&(1u64 << 40).to_le_bytes());
        let elf = Elf::parse(&data[..]).unwrap().unwrap();
        assert!(elf.find_symbols(["SSL_write"]).is_err());
    }
}
