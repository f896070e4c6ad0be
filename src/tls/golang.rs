//! Where a Go program's `crypto/tls` reads and writes its plaintext: the probe sites of
//! `(*Conn).Write`, `(*Conn).Read` and the handshakes, found without symbol tables (Go
//! binaries are often stripped) from the function table every Go program carries for its own
//! stack traces (`.gopclntab`), and without uretprobes (they rewrite return addresses on a
//! stack Go moves: the program crashes): an entry probe on each return instruction, found by
//! decoding the function.

use std::path::Path;

use super::elf::Elf;
use super::untrusted::{FoundFile, ReadAt};

/// The functions probed, by their Go names.
pub const WRITE: &str = "crypto/tls.(*Conn).Write";
pub const READ: &str = "crypto/tls.(*Conn).Read";
/// Called (through `handshakeFn`) only when a handshake runs: they name a connection's
/// socket before its first read, which may be served from what the handshake read ahead.
pub const HANDSHAKES: [&str; 2] = [
    "crypto/tls.(*Conn).serverHandshake",
    "crypto/tls.(*Conn).clientHandshake",
];

/// net/http's HTTP/1 client (call chains: src/bpf/gohttp.h): the goroutine that writes a
/// connection's requests, and the call by which a goroutine asks it for one.
pub const WRITE_LOOP: &str = "net/http.(*persistConn).writeLoop";
pub const CONN_WRITE: &str = "net/http.persistConnWriter.Write";
pub const ROUND_TRIP: &str = "net/http.(*persistConn).roundTrip";

/// Goroutine creation (call chains: src/bpf/gospawn.h): a `go` statement calls [`NEWPROC`],
/// which runs [`NEWPROC_FUNC1`] on the system stack: `newg := newproc1(...); runqput(pp,
/// newg, true)`. Every creator of a goroutine calls [`NEWPROC1`] from a runtime closure.
pub const NEWPROC: &str = "runtime.newproc";
pub const NEWPROC_FUNC1: &str = "runtime.newproc.func1";
pub const NEWPROC1: &str = "runtime.newproc1";
pub const RUNQPUT: &str = "runtime.runqput";

/// Why a Go program that uses crypto/tls cannot be probed.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum GoError {
    #[error("Go function table: {0}")]
    Table(&'static str),
    #[error("Go before 1.18 (arguments on the stack): not supported")]
    TooOld,
    #[error("Go on {0}: only x86-64 code is decoded")]
    Architecture(String),
    #[error("{0}: {1}")]
    Code(String, &'static str),
    /// The file could not be read within the bounds (an untrusted file: docs/security.md).
    #[error("skipped: {0}")]
    Skipped(String),
}

/// Names longer than this are not read (Go's longest, generic instantiations included, are
/// far shorter).
pub const MAX_NAME: usize = 4096;
/// The code of a function probed is read and decoded up to this size (crypto/tls's are a few
/// KiB).
pub const MAX_FUNCTION_BYTES: u32 = 1 << 20;
/// Most code of the runtime's closures read for goroutine creation's other sites ([`SpawnSites`]).
const MAX_CLOSURE_SCAN_BYTES: u64 = 1 << 20;

/// One function of a Go program's function table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GoFunc<'a> {
    pub name: &'a [u8],
    /// Offsets of its first instruction and of the end of its code, from the start of text.
    pub entry_off: u32,
    pub end_off: u32,
}

/// A Go ≥ 1.18 function table (`runtime.pclntab`), read where it lies in the file.
#[derive(Debug)]
pub struct Pclntab<'a> {
    data: &'a [u8],
    nfunc: usize,
    funcnames: usize,
    functab: usize,
}

fn u32_at(data: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_le_bytes(
        data.get(at..at.checked_add(4)?)?.try_into().ok()?,
    ))
}

fn u64_at(data: &[u8], at: usize) -> Option<u64> {
    Some(u64::from_le_bytes(
        data.get(at..at.checked_add(8)?)?.try_into().ok()?,
    ))
}

impl<'a> Pclntab<'a> {
    /// The table's header (runtime/symtab.go `pcHeader`, 64-bit little-endian): magic, two
    /// pad bytes, the instruction size quantum, the pointer size, then pointer-sized fields:
    /// nfunc, nfiles, textStart, and the offsets of the name, cu, file, pc and function
    /// tables from the header.
    pub fn parse(data: &'a [u8]) -> Result<Pclntab<'a>, GoError> {
        let magic = u32_at(data, 0).ok_or(GoError::Table("too short"))?;
        match magic {
            // Go 1.18–1.19, and 1.20 and later.
            0xffff_fff0 | 0xffff_fff1 => {}
            // Go 1.16–1.17 and older.
            0xffff_fff9..=0xffff_fffb => return Err(GoError::TooOld),
            _ => return Err(GoError::Table("unknown magic")),
        }
        if data.get(4..8) != Some(&[0, 0, 1, 8][..]) {
            return Err(GoError::Table("not a 64-bit x86 table"));
        }
        let field = |i: usize| -> Result<usize, GoError> {
            u64_at(data, 8 + 8 * i)
                .and_then(|v| usize::try_from(v).ok())
                .ok_or(GoError::Table("truncated header"))
        };
        let (nfunc, funcnames, functab) = (field(0)?, field(3)?, field(7)?);
        // nfunc + 1 entries of (entry offset, _func offset), u32 each.
        let functab_len = nfunc
            .checked_add(1)
            .and_then(|n| n.checked_mul(8))
            .ok_or(GoError::Table("function count overflows"))?;
        if functab
            .checked_add(functab_len)
            .is_none_or(|end| end > data.len())
            || funcnames >= data.len()
        {
            return Err(GoError::Table("tables outside the section"));
        }
        Ok(Pclntab {
            data,
            nfunc,
            funcnames,
            functab,
        })
    }

    /// The `i`th function's entry and end offsets and where its name begins in the data, or
    /// None where the table is inconsistent.
    fn extent(&self, i: usize) -> Option<(u32, u32, usize)> {
        if i >= self.nfunc {
            return None;
        }
        let at = self.functab + 8 * i;
        let entry_off = u32_at(self.data, at)?;
        let func_off = u32_at(self.data, at + 4)? as usize;
        let end_off = u32_at(self.data, at + 8)?;
        // The _func record: entryOff u32, nameOff i32 (into the name table).
        let func = self.functab.checked_add(func_off)?;
        if u32_at(self.data, func)? != entry_off || end_off < entry_off {
            return None;
        }
        let name_off = usize::try_from(i32::from_le_bytes(
            self.data
                .get(func + 4..func.checked_add(8)?)?
                .try_into()
                .ok()?,
        ))
        .ok()?;
        Some((entry_off, end_off, self.funcnames.checked_add(name_off)?))
    }

    /// The `i`th function (in address order), or None where the table is inconsistent or its
    /// name is longer than [`MAX_NAME`] (the name's end is looked for that far only: a table
    /// whose names have no end costs no more than one with short names).
    pub fn function(&self, i: usize) -> Option<GoFunc<'a>> {
        let (entry_off, end_off, name_at) = self.extent(i)?;
        let names = self.data.get(name_at..)?;
        let names = &names[..names.len().min(MAX_NAME + 1)];
        let len = names.iter().position(|&b| b == 0)?;
        Some(GoFunc {
            name: &names[..len],
            entry_off,
            end_off,
        })
    }

    pub fn len(&self) -> usize {
        self.nfunc
    }

    pub fn is_empty(&self) -> bool {
        self.nfunc == 0
    }

    /// The function of that name: each function's name is compared on the name's length and
    /// its end only, so the look is linear in the table (never rescans a name per function).
    pub fn find(&self, name: &str) -> Option<GoFunc<'a>> {
        let want = name.as_bytes();
        (0..self.nfunc).find_map(|i| {
            let (entry_off, end_off, at) = self.extent(i)?;
            let name = self.data.get(at..at.checked_add(want.len() + 1)?)?;
            (name[..want.len()] == *want && name[want.len()] == 0).then_some(GoFunc {
                name: &name[..want.len()],
                entry_off,
                end_off,
            })
        })
    }
}

/// Where one function is probed: file offsets of its entry site and its return instructions.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FuncSites {
    pub entry: u64,
    /// The entry site is the push after the stack check (the kernel emulates it), not the
    /// first instruction (which it single-steps).
    pub entry_emulated: bool,
    pub returns: Vec<u64>,
}

/// The probe sites of a Go program's crypto/tls.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GoSites {
    pub write: FuncSites,
    pub read: FuncSites,
    /// Those of the handshake functions the program has (a server only, a client only).
    pub handshakes: Vec<FuncSites>,
    /// net/http's client, where the program has it (its connection writer's entry,
    /// writeLoop's returns, roundTrip's entry), or why its code cannot be probed (the TLS probes go on).
    pub http: Result<Option<HttpSites>, String>,
    /// Goroutine creation, or why its code cannot be probed (no creation tracking for the
    /// file; the other probes go on).
    pub spawn: Result<SpawnSites, String>,
}

/// The probe sites of goroutine creation (src/bpf/gospawn.h), as file offsets.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SpawnSites {
    /// [`NEWPROC`]'s entry (the push after the stack check: the creating goroutine).
    pub newproc: FuncSites,
    /// [`NEWPROC_FUNC1`]'s call of [`RUNQPUT`], whose second argument register holds
    /// [`NEWPROC1`]'s result there (proved by [`queued_site`]).
    pub queued: u64,
    /// The instruction after each call of [`NEWPROC1`] in the runtime's other closures
    /// (coroutines, debugger calls, testing/synctest): a g made a goroutine of no known creator.
    pub others: Vec<u64>,
}

/// Instructions between newproc1's call and runqput's in [`queued_site`]: moves and no-ops
/// only, whose destination is their first operand (so a register's writes are seen).
fn plain_move(m: iced_x86::Mnemonic) -> bool {
    use iced_x86::Mnemonic::*;
    matches!(m, Mov | Movzx | Movsx | Movsxd | Lea | Nop | Xor | Xorps)
}

/// Where [`NEWPROC_FUNC1`] (code `code` at `addr`) calls runqput (at `runqput`) with
/// newproc1's (at `newproc1`) result as its second argument: the one call of newproc1, then
/// straight-line moves that copy RAX (the result) to RBX (the second argument) before
/// anything writes RAX and after which nothing writes RBX, then the call of runqput. Else
/// an error: the shape is not proved, so no site.
pub fn queued_site(
    code: &[u8],
    addr: u64,
    newproc1: u64,
    runqput: u64,
) -> Result<u64, &'static str> {
    use iced_x86::{Decoder, DecoderOptions, Mnemonic, OpKind, Register};
    let mut decoder = Decoder::with_ip(64, code, addr, DecoderOptions::NONE);
    let mut after_call = false;
    let mut copied = false;
    let mut site = None;
    for ins in decoder.iter() {
        if ins.is_invalid() {
            return Err("undecodable instruction");
        }
        let calls = |target| {
            ins.mnemonic() == Mnemonic::Call
                && ins.op0_kind() == OpKind::NearBranch64
                && ins.near_branch_target() == target
        };
        if calls(newproc1) {
            if after_call || site.is_some() {
                return Err("calls newproc1 more than once");
            }
            after_call = true;
            continue;
        }
        if !after_call {
            continue;
        }
        if calls(runqput) {
            if !copied {
                return Err("runqput's argument is not newproc1's result");
            }
            site = Some(ins.ip());
            after_call = false;
            continue;
        }
        if !plain_move(ins.mnemonic()) {
            return Err("more than moves between newproc1 and runqput");
        }
        // The 64-bit register the destination is part of (RAX or RBX: those that matter).
        let dest = (ins.op_count() > 0 && ins.op0_kind() == OpKind::Register).then(|| {
            match ins.op0_register() {
                Register::RAX | Register::EAX | Register::AX | Register::AL | Register::AH => {
                    Register::RAX
                }
                Register::RBX | Register::EBX | Register::BX | Register::BL | Register::BH => {
                    Register::RBX
                }
                r => r,
            }
        });
        if ins.mnemonic() == Mnemonic::Mov
            && !copied
            && dest == Some(Register::RBX)
            && ins.op1_kind() == OpKind::Register
            && ins.op1_register() == Register::RAX
        {
            copied = true;
        } else if dest == Some(if copied { Register::RBX } else { Register::RAX }) {
            return Err("newproc1's result is overwritten before runqput");
        }
    }
    site.ok_or("no call of newproc1 then runqput")
}

/// The instruction after each call of `newproc1` in code `code` at `addr`.
pub fn after_calls_of(code: &[u8], addr: u64, newproc1: u64) -> Result<Vec<u64>, &'static str> {
    use iced_x86::{Decoder, DecoderOptions, Mnemonic, OpKind};
    let mut decoder = Decoder::with_ip(64, code, addr, DecoderOptions::NONE);
    let mut sites = Vec::new();
    let mut pending = false;
    for ins in decoder.iter() {
        if ins.is_invalid() {
            return Err("undecodable instruction");
        }
        if pending {
            sites.push(ins.ip());
        }
        pending = ins.mnemonic() == Mnemonic::Call
            && ins.op0_kind() == OpKind::NearBranch64
            && ins.near_branch_target() == newproc1;
    }
    if pending {
        return Err("a call of newproc1 ends the function");
    }
    Ok(sites)
}

/// The probe sites of net/http's HTTP/1 client ([`CONN_WRITE`], [`WRITE_LOOP`],
/// [`ROUND_TRIP`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HttpSites {
    pub conn_write: FuncSites,
    pub write_loop: FuncSites,
    pub round_trip: FuncSites,
}

/// Where a function's code at `addr` (its bytes `code`) is probed, as addresses: the entry
/// site and each return instruction. The entry site is the `push %rbp` after Go's stack
/// check (`cmp 0x10(%r14),%rsp; jbe …`, or `lea -N(%rsp),%r12; cmp 0x10(%r14),%r12; jbe …`)
/// when the function starts so: the kernel emulates a push (about 1 µs here) but single-steps
/// a compare out of line (about 5–10 µs), and the arguments are still in their registers
/// there; else None (the first instruction is probed). Refused (an error) when the code cannot be decoded, or
/// jumps out of the function (a tail call would leave it by no return instruction).
pub fn function_sites(code: &[u8], addr: u64) -> Result<(Option<u64>, Vec<u64>), &'static str> {
    use iced_x86::{Decoder, DecoderOptions, Mnemonic, OpKind, Register};
    let end = addr.saturating_add(code.len() as u64);
    let mut decoder = Decoder::with_ip(64, code, addr, DecoderOptions::NONE);
    let mut entry = None;
    let mut prologue_open = true;
    let mut returns = Vec::new();
    for (n, ins) in decoder.iter().enumerate() {
        if ins.is_invalid() {
            // Go pads between functions with int3; anything else undecodable is refused.
            return Err("undecodable instruction");
        }
        if prologue_open {
            match ins.mnemonic() {
                Mnemonic::Push if ins.op0_register() == Register::RBP => {
                    entry = Some(ins.ip());
                    prologue_open = false;
                }
                Mnemonic::Cmp | Mnemonic::Lea | Mnemonic::Jbe | Mnemonic::Jb if n < 4 => {}
                _ => prologue_open = false,
            }
        }
        match ins.mnemonic() {
            Mnemonic::Ret => returns.push(ins.ip()),
            Mnemonic::Retf | Mnemonic::Iret | Mnemonic::Iretq | Mnemonic::Sysret => {
                return Err("unexpected return instruction")
            }
            Mnemonic::Call => {}
            _ if ins.op0_kind() == OpKind::NearBranch64 => {
                let target = ins.near_branch_target();
                if target < addr || target >= end {
                    return Err("jumps out of the function");
                }
            }
            _ => {}
        }
    }
    if returns.is_empty() {
        return Err("no return instruction");
    }
    Ok((entry, returns))
}

/// The crypto/tls probe sites of a Go program: None if it is no Go program or has no
/// crypto/tls (nothing to probe), an error if it has but they cannot be placed.
pub fn sites_of(path: &Path) -> Result<Option<GoSites>, GoError> {
    let Ok(file) = FoundFile::at(path).and_then(|f| f.open()) else {
        return Ok(None);
    };
    match Elf::parse(&file) {
        Ok(Some(elf)) => sites_of_elf(&elf),
        Ok(None) => Ok(None),
        Err(skip) => Err(GoError::Skipped(skip.0)),
    }
}

/// [`sites_of`] of any bytes (the fuzz target `elf`).
pub fn sites_in_bytes(data: &[u8]) -> Result<Option<GoSites>, GoError> {
    match Elf::parse(data) {
        Ok(Some(elf)) => sites_of_elf(&elf),
        Ok(None) => Ok(None),
        Err(skip) => Err(GoError::Skipped(skip.0)),
    }
}

/// [`sites_of`] of a parsed file: its function table read whole (bounded), then only the code
/// of the functions probed.
pub fn sites_of_elf<R: ReadAt + ?Sized>(elf: &Elf<R>) -> Result<Option<GoSites>, GoError> {
    let Some(table) = elf
        .section(".gopclntab")
        .or_else(|| elf.section(".data.rel.ro.gopclntab"))
    else {
        return Ok(None);
    };
    let data = elf
        .section_data(table)
        .map_err(|skip| GoError::Skipped(skip.0))?;
    let pcln = Pclntab::parse(&data)?;
    let (Some(write), Some(read)) = (pcln.find(WRITE), pcln.find(READ)) else {
        return Ok(None);
    };
    if !elf.is_x86_64() {
        return Err(GoError::Architecture(format!(
            "ELF machine {}",
            elf.machine
        )));
    }
    // Entry offsets count from the start of text (debug/gosym takes the .text section's
    // address, as the header's copy may be unrelocated).
    let text = elf
        .section(".text")
        .ok_or(GoError::Table("no .text section"))?;
    let (text_file_off, text_size) = text
        .file_range()
        .ok_or(GoError::Table(".text not in the file"))?;
    let text_addr = text.addr;
    // A function's code and its address.
    let code_of = |f: GoFunc| -> Result<(Vec<u8>, u64), GoError> {
        let name = String::from_utf8_lossy(f.name).into_owned();
        let len = f.end_off - f.entry_off;
        if len > MAX_FUNCTION_BYTES {
            return Err(GoError::Code(name, "longer than 1 MiB"));
        }
        if u64::from(f.end_off) > text_size {
            return Err(GoError::Code(name, "outside .text"));
        }
        let (Some(at), Some(addr), Some(_)) = (
            text_file_off.checked_add(u64::from(f.entry_off)),
            text_addr.checked_add(u64::from(f.end_off)),
            text_file_off.checked_add(text_size),
        ) else {
            return Err(GoError::Code(name, "outside the address space"));
        };
        let code = elf
            .file
            .read_at(at, u64::from(len))
            .map_err(|_| GoError::Code(name.clone(), "unreadable"))?;
        Ok((code, addr - u64::from(len)))
    };
    let file_off = |a: u64| a - text_addr + text_file_off;
    let sites = |f: GoFunc| -> Result<FuncSites, GoError> {
        let (code, addr) = code_of(f)?;
        let (entry, returns) = function_sites(&code, addr)
            .map_err(|why| GoError::Code(String::from_utf8_lossy(f.name).into_owned(), why))?;
        Ok(FuncSites {
            entry: file_off(entry.unwrap_or(addr)),
            entry_emulated: entry.is_some(),
            returns: returns.into_iter().map(file_off).collect(),
        })
    };
    let http = match (
        pcln.find(CONN_WRITE),
        pcln.find(WRITE_LOOP),
        pcln.find(ROUND_TRIP),
    ) {
        (Some(c), Some(w), Some(r)) => match (sites(c), sites(w), sites(r)) {
            (Ok(conn_write), Ok(write_loop), Ok(round_trip)) => Ok(Some(HttpSites {
                conn_write,
                write_loop,
                round_trip,
            })),
            (Err(e), ..) | (_, Err(e), _) | (.., Err(e)) => Err(e.to_string()),
        },
        _ => Ok(None),
    };
    let spawn =
        spawn_sites(&pcln, text_addr, &code_of, &sites, &file_off).map_err(|e| e.to_string());
    Ok(Some(GoSites {
        http,
        spawn,
        write: sites(write)?,
        read: sites(read)?,
        handshakes: HANDSHAKES
            .iter()
            .filter_map(|n| pcln.find(n))
            .map(sites)
            .collect::<Result<_, _>>()?,
    }))
}

/// A function's code and its address.
type CodeOf<'a> = dyn Fn(GoFunc) -> Result<(Vec<u8>, u64), GoError> + 'a;

/// Goroutine creation's sites ([`SpawnSites`]): [`NEWPROC`]'s entry, [`queued_site`] in
/// [`NEWPROC_FUNC1`], and the instruction after each call of [`NEWPROC1`] in the runtime's
/// other closures (`runtime.…func…`: every caller of newproc1 runs it on the system stack, from
/// a closure passed to systemstack, in Go 1.18–1.26). Go code only, decoded from its entry.
fn spawn_sites(
    pcln: &Pclntab,
    text_addr: u64,
    code_of: &CodeOf,
    sites: &dyn Fn(GoFunc) -> Result<FuncSites, GoError>,
    file_off: &dyn Fn(u64) -> u64,
) -> Result<SpawnSites, GoError> {
    let find = |name: &'static str| {
        pcln.find(name)
            .ok_or(GoError::Code(name.into(), "not found"))
    };
    let (newproc, func1) = (find(NEWPROC)?, find(NEWPROC_FUNC1)?);
    let addr_of = |f: GoFunc| text_addr + u64::from(f.entry_off);
    let (newproc1, runqput) = (addr_of(find(NEWPROC1)?), addr_of(find(RUNQPUT)?));
    let (code, addr) = code_of(func1)?;
    let queued = queued_site(&code, addr, newproc1, runqput)
        .map_err(|why| GoError::Code(NEWPROC_FUNC1.into(), why))?;
    let mut others = Vec::new();
    // A crafted table may name many large "closures" over the same code: the scan stops at a
    // bound far above any Go runtime's (Go 1.26's: 233 closures, 27 KB).
    let mut scanned = 0u64;
    for i in 0..pcln.len() {
        let Some(f) = pcln.function(i) else {
            continue;
        };
        let closure = f.name.starts_with(b"runtime.")
            && f.name.windows(5).any(|w| w == b".func")
            && f.name != NEWPROC_FUNC1.as_bytes();
        if !closure {
            continue;
        }
        let (code, addr) = code_of(f)?;
        scanned += code.len() as u64;
        if scanned > MAX_CLOSURE_SCAN_BYTES {
            return Err(GoError::Code(
                "runtime closures".into(),
                "more code than any Go runtime's",
            ));
        }
        let name = || String::from_utf8_lossy(f.name).into_owned();
        others.extend(
            after_calls_of(&code, addr, newproc1)
                .map_err(|why| GoError::Code(name(), why))?
                .into_iter()
                .map(file_off),
        );
    }
    Ok(SpawnSites {
        newproc: sites(newproc)?,
        queued: file_off(queued),
        others,
    })
}

/// The fuzz target `go_binary` (fuzz/fuzz_targets/go_binary.rs): what ebtop reads from a Go
/// program's file — its function table, and the code of the functions it probes — from any
/// bytes.
#[cfg(any(test, feature = "test-support"))]
pub mod fuzzing {
    use super::*;

    /// The first byte picks the reader: even, the function table (every function, and a
    /// lookup by name); odd, the code decoder (at an address from the next 8 bytes).
    pub fn drive(data: &[u8]) {
        let Some((&mode, rest)) = data.split_first() else {
            return;
        };
        if mode % 2 == 0 {
            if let Ok(t) = Pclntab::parse(rest) {
                for i in 0..t.len().min(100_000) + 1 {
                    let _ = t.function(i);
                }
                let _ = t.find(READ);
            }
        } else if let Some((addr, code)) = rest.split_first_chunk::<8>() {
            // Any address, but far enough from the top that the code fits below it.
            let addr = u64::from_le_bytes(*addr) >> 1;
            let _ = function_sites(code, addr);
        }
    }

    /// Seeds: a function table laid out as Go's linker does, and a function's code with
    /// Go's stack check, a push, returns and a jump back.
    pub fn seeds() -> Vec<(String, Vec<u8>)> {
        let mut t = vec![0u8];
        t.extend(table(
            &[("main.main", 0x10), (READ, 0x80), (WRITE, 0x200)],
            0x300,
        ));
        let mut code = vec![1u8];
        code.extend(0x40_1000u64.to_le_bytes());
        code.extend([
            0x49, 0x3b, 0x66, 0x10, 0x76, 0x05, 0x55, 0x48, 0x89, 0xe5, 0xc3, 0xe8, 0, 0, 0, 0,
            0xeb, 0xee, 0xcc, 0xcc,
        ]);
        vec![("pclntab".into(), t), ("code".into(), code)]
    }

    /// A table as Go's linker lays it out: header, function names, function table, _func
    /// records.
    pub fn table(funcs: &[(&str, u32)], text_end: u32) -> Vec<u8> {
        let mut names = Vec::new();
        let mut name_offs = Vec::new();
        for (n, _) in funcs {
            name_offs.push(names.len() as i32);
            names.extend_from_slice(n.as_bytes());
            names.push(0);
        }
        let header = 8 + 8 * 8;
        let funcnames = header;
        let functab = funcnames + names.len();
        let records = functab + 8 * (funcs.len() + 1);
        let mut out = vec![0xf1, 0xff, 0xff, 0xff, 0, 0, 1, 8];
        for v in [funcs.len(), 0, 0x401000, funcnames, 0, 0, 0, functab] {
            out.extend_from_slice(&(v as u64).to_le_bytes());
        }
        out.extend_from_slice(&names);
        for (i, (_, entry)) in funcs.iter().enumerate() {
            out.extend_from_slice(&entry.to_le_bytes());
            out.extend_from_slice(&((records - functab + 8 * i) as u32).to_le_bytes());
        }
        out.extend_from_slice(&text_end.to_le_bytes());
        out.extend_from_slice(&0u32.to_le_bytes());
        for (i, (_, entry)) in funcs.iter().enumerate() {
            out.extend_from_slice(&entry.to_le_bytes());
            out.extend_from_slice(&name_offs[i].to_le_bytes());
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use super::fuzzing::table;

    #[test]
    fn functions_are_found_by_name_with_their_extent() {
        let data = table(&[("main.main", 0x10), (READ, 0x80), (WRITE, 0x200)], 0x300);
        let t = Pclntab::parse(&data).expect("parses");
        assert_eq!(t.len(), 3);
        assert_eq!(
            t.find(READ),
            Some(GoFunc {
                name: READ.as_bytes(),
                entry_off: 0x80,
                end_off: 0x200
            })
        );
        assert_eq!(t.find(WRITE).map(|f| f.end_off), Some(0x300));
        assert_eq!(t.find("crypto/tls.(*Conn).Close"), None);
    }

    #[test]
    fn old_or_foreign_tables_are_refused_with_a_reason() {
        let mut data = table(&[(READ, 0)], 8);
        data[0] = 0xfa;
        assert_eq!(Pclntab::parse(&data).err(), Some(GoError::TooOld));
        data[0] = 0x00;
        assert!(matches!(Pclntab::parse(&data), Err(GoError::Table(_))));
        assert!(matches!(Pclntab::parse(&[]), Err(GoError::Table(_))));
        // A function count that runs past the data.
        let mut data = table(&[(READ, 0)], 8);
        data[8..16].copy_from_slice(&u64::MAX.to_le_bytes());
        assert!(matches!(Pclntab::parse(&data), Err(GoError::Table(_))));
    }

    /// A table whose names never end (issue 42): looking a name up, and reading every
    /// function, is linear in the table (each name read at most `MAX_NAME` bytes far), where
    /// a scan for each name's end was quadratic (tens of seconds for this one).
    #[test]
    fn names_without_an_end_cost_linear_time() {
        let (nfunc, name_len) = (20_000usize, 200_000usize);
        let mut data = table(&[], 0);
        data[8..16].copy_from_slice(&(nfunc as u64).to_le_bytes());
        let functab = data.len() + name_len;
        data[8 + 8 * 7..8 + 8 * 8].copy_from_slice(&(functab as u64).to_le_bytes());
        data.truncate(8 + 8 * 8);
        data.extend(std::iter::repeat_n(b'A', name_len));
        let records = functab + 8 * (nfunc + 1);
        for i in 0..nfunc {
            data.extend_from_slice(&((i * 16) as u32).to_le_bytes());
            data.extend_from_slice(&((records - functab + 8 * i) as u32).to_le_bytes());
        }
        data.extend_from_slice(&((nfunc * 16) as u32).to_le_bytes());
        data.extend_from_slice(&0u32.to_le_bytes());
        for i in 0..nfunc {
            data.extend_from_slice(&((i * 16) as u32).to_le_bytes());
            data.extend_from_slice(&0i32.to_le_bytes());
        }
        let t = Pclntab::parse(&data).expect("parses");
        let start = std::time::Instant::now();
        assert_eq!(t.find(READ), None);
        assert_eq!(t.function(0), None, "a name longer than MAX_NAME");
        for i in 0..nfunc {
            assert_eq!(t.function(i), None);
        }
        let took = start.elapsed();
        assert!(took < std::time::Duration::from_secs(2), "{took:?}");
    }

    #[test]
    fn every_prefix_of_a_table_parses_or_fails_without_panic() {
        let data = table(&[(READ, 0x80), (WRITE, 0x200)], 0x300);
        for n in 0..data.len() {
            if let Ok(t) = Pclntab::parse(&data[..n]) {
                for i in 0..t.len() + 1 {
                    let _ = t.function(i);
                }
            }
        }
    }

    #[test]
    fn sites_are_the_push_after_the_stack_check_and_each_return() {
        // cmp 0x10(%r14),%rsp; jbe +N; push %rbp; mov %rsp,%rbp; ret; (morestack:) call
        // rel32 0; jmp back to the start; int3 padding.
        let code = [
            0x49, 0x3b, 0x66, 0x10, // cmp
            0x76, 0x05, // jbe +5 → 0x100b
            0x55, // push %rbp (0x1006)
            0x48, 0x89, 0xe5, // mov %rsp,%rbp
            0xc3, // ret (0x100a)
            0xe8, 0, 0, 0, 0, // call (0x100b)
            0xeb, 0xee, // jmp 0x1000 (0x1010)
            0xcc, 0xcc,
        ];
        assert_eq!(
            function_sites(&code, 0x1000),
            Ok((Some(0x1006), vec![0x100a]))
        );
        // A large frame: lea -0x..(%rsp),%r12; cmp 0x10(%r14),%r12; jbe.
        let code = [
            0x4c, 0x8d, 0x64, 0x24, 0xd0, // lea -0x30(%rsp),%r12
            0x4d, 0x3b, 0x66, 0x10, // cmp 0x10(%r14),%r12
            0x76, 0x02, // jbe +2
            0x55, // push %rbp (0x100b)
            0xc3, // ret
            0xc3, // ret
        ];
        assert_eq!(
            function_sites(&code, 0x1000),
            Ok((Some(0x100b), vec![0x100c, 0x100d]))
        );
    }

    #[test]
    fn code_that_cannot_be_proved_is_refused() {
        // No stack check: the first instruction is the entry site.
        assert_eq!(function_sites(&[0x90, 0xc3], 0x10), Ok((None, vec![0x11])));
        // A tail call out of the function.
        assert!(function_sites(&[0x55, 0xe9, 0, 0x10, 0, 0, 0xc3], 0x10).is_err());
        // No return at all, and undecodable bytes.
        assert!(function_sites(&[0x55, 0x90], 0x10).is_err());
        assert!(function_sites(&[0x55, 0x0f, 0x0b, 0xc3], 0x10).is_ok()); // ud2 decodes
        assert!(function_sites(&[0x55, 0x0f], 0x10).is_err());
    }
    /// Go 1.26.8's `runtime.newproc.func1` (amd64), at 0x458000: newproc1 at 0x458080,
    /// runqput at 0x45d0e0 (the targets of its two calls).
    const NEWPROC_FUNC1_1_26: [u8; 0x62] = [
        0x49, 0x3b, 0x66, 0x10, 0x76, 0x53, 0x55, 0x48, 0x89, 0xe5, 0x48, 0x83, 0xec, 0x20, 0x48,
        0x8b, 0x5a, 0x10, 0x48, 0x8b, 0x4a, 0x18, 0x48, 0x8b, 0x42, 0x08, 0x31, 0xff, 0x31, 0xf6,
        0x66, 0x90, 0xe8, 0x5b, 0x00, 0x00, 0x00, 0x49, 0x8b, 0x56, 0x30, 0x48, 0x8b, 0x92, 0xd0,
        0x00, 0x00, 0x00, 0x48, 0x89, 0xc3, 0xb9, 0x01, 0x00, 0x00, 0x00, 0x48, 0x89, 0xd0, 0x0f,
        0x1f, 0x44, 0x00, 0x00, 0xe8, 0x9b, 0x50, 0x00, 0x00, 0x80, 0x3d, 0x7a, 0xe4, 0x32, 0x00,
        0x00, 0x74, 0x05, 0xe8, 0x0d, 0x96, 0x02, 0x00, 0x48, 0x83, 0xc4, 0x20, 0x5d, 0xc3, 0xe8,
        0x22, 0xe1, 0x02, 0x00, 0x66, 0x90, 0xeb, 0x9e,
    ];

    /// runqput's call in newproc.func1 is the site only where newproc1's result (RAX) is
    /// proved to be in runqput's second argument (RBX) there; any other shape: no site.
    #[test]
    fn the_new_goroutine_is_proved_in_runqputs_argument() {
        let code = NEWPROC_FUNC1_1_26;
        let (newproc1, runqput) = (0x458080, 0x45d0e0);
        assert_eq!(
            queued_site(&code, 0x458000, newproc1, runqput),
            Ok(0x458040)
        );
        // Other call targets: not the shape.
        assert!(queued_site(&code, 0x458000, newproc1 + 1, runqput).is_err());
        assert!(queued_site(&code, 0x458000, newproc1, runqput + 1).is_err());
        // `mov %rax,%rbx` made `mov %rax,%rcx`: RBX is not the result.
        let mut other = code;
        other[0x32] = 0xc1;
        assert!(queued_site(&other, 0x458000, newproc1, runqput).is_err());
        // `mov %rdx,%rax` before the copy (swap the two moves' order): RAX overwritten.
        let mut clobber = code;
        clobber[0x30..0x33].copy_from_slice(&[0x48, 0x89, 0xd0]);
        clobber[0x38..0x3b].copy_from_slice(&[0x48, 0x89, 0xc3]);
        assert!(queued_site(&clobber, 0x458000, newproc1, runqput).is_err());
        // A move into RBX after the copy (`mov %rdx,%rax` made `mov %rdx,%rbx`).
        let mut late = code;
        late[0x3a] = 0xd3;
        assert!(queued_site(&late, 0x458000, newproc1, runqput).is_err());
        // The other creators' site: the instruction after newproc1's call (here newproc.func1's
        // `movq 0x30(%r14),%rdx`); a call that ends the code leaves none.
        assert_eq!(
            after_calls_of(&code, 0x458000, newproc1),
            Ok(vec![0x458025])
        );
        assert_eq!(after_calls_of(&code[..0x25], 0x458000, newproc1).ok(), None);
    }
}
