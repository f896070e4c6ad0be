//! Addresses → function names. User addresses: through the process's memory map
//! (`/proc/PID/maps`) to a mapped file and an offset in it, then that file's function table
//! ([`super::filesyms`]: ELF symbols, Go's `.gopclntab`), cached per file — not per process —
//! within a byte budget, so a thousand processes of one program cost one table. A file is
//! opened through `/proc/PID/map_files/START-END`: the very file mapped (a container's, a
//! deleted or replaced binary), never a path resolved again, so no link leads out of a
//! container's root. JIT code (an anonymous mapping) is named from `/tmp/perf-PID.map` by
//! blazesym, as are kernel addresses (kallsyms).

use std::collections::HashMap;
use std::io::Read;
use std::os::fd::AsFd;
use std::time::{Duration, Instant};

use blazesym::symbolize::source::{Kernel, Process, Source};
use blazesym::symbolize::{Input, Symbolized, Symbolizer};
use blazesym::{MaybeDefault, Pid};

use super::filesyms::{CacheStats, FileCache, FileKey, SymTable, DEFAULT_BUDGET_BYTES};
use super::Frame;
use crate::tls::untrusted::FoundFile;

/// A frame's name where no symbol covers its address.
pub const UNKNOWN: &str = "[unknown]";

/// Most kernel addresses cached (past this the cache starts over).
const MAX_CACHED_KERNEL: usize = 65_536;
/// Most JIT addresses cached per process (past this its cache starts over).
const MAX_CACHED_JIT: usize = 4_096;
/// A process's memory map read at most (`vm.max_map_count` lines).
const MAX_MAPS_BYTES: u64 = 16 << 20;
/// A process's memory map is read again for a new stack at most this often (a program that
/// loads a library, or execs, maps new code).
const MAPS_REFRESH: Duration = Duration::from_secs(1);

/// ... and for an address none of its mappings covers, at most this often.
const MAPS_REFRESH_ON_MISS: Duration = Duration::from_millis(100);

/// What an executable mapping holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Target {
    File(FileKey),
    /// Anonymous memory: JIT code, named from a perf map if the program writes one.
    Anon,
    /// A file that could not be found (gone), or `[vdso]`-like memory: no names.
    None,
}

#[derive(Clone, Copy, Debug)]
struct Mapping {
    start: u64,
    end: u64,
    offset: u64,
    /// The maps line's inode: a mapping still at the same place and inode keeps its target.
    ino: u64,
    target: Target,
}

/// A process's executable mappings (sorted by start) and its JIT names.
struct ProcessMaps {
    maps: Vec<Mapping>,
    read_at: Instant,
    jit: HashMap<u64, Frame>,
}

impl ProcessMaps {
    fn covers(&self, a: u64) -> bool {
        let i = self.maps.partition_point(|m| m.start <= a);
        i.checked_sub(1).is_some_and(|i| a < self.maps[i].end)
    }
}

pub struct Symbols {
    symbolizer: Symbolizer,
    files: FileCache,
    processes: HashMap<u32, ProcessMaps>,
    kernel: HashMap<u64, Frame>,
    unknown: Frame,
}

impl Default for Symbols {
    fn default() -> Self {
        Self::new()
    }
}

impl Symbols {
    pub fn new() -> Symbols {
        Symbols::with_budget(DEFAULT_BUDGET_BYTES)
    }

    /// Names with the files' tables held within `budget` bytes.
    pub fn with_budget(budget: usize) -> Symbols {
        Symbols {
            // No file:line (not shown yet) and no inlined functions: a stack's frames are
            // the functions its return addresses are in.
            symbolizer: Symbolizer::builder()
                .enable_code_info(false)
                .enable_inlined_fns(false)
                .enable_demangling(true)
                .build(),
            files: FileCache::new(budget),
            processes: HashMap::new(),
            kernel: HashMap::new(),
            unknown: Frame::from(UNKNOWN),
        }
    }

    pub fn cache_stats(&self) -> CacheStats {
        self.files.stats()
    }

    /// Names of the user addresses `addrs` of process `tgid`, in order.
    pub fn user(&mut self, tgid: u32, addrs: &[u64]) -> Vec<Frame> {
        // Read again once a second, and sooner for an address no mapping covers (code mapped
        // since; a stack cut short by code without frame pointers holds such garbage too,
        // hence the shorter bound rather than none).
        let stale = self.processes.get(&tgid).is_none_or(|p| {
            let age = p.read_at.elapsed();
            age >= MAPS_REFRESH
                || (age >= MAPS_REFRESH_ON_MISS && addrs.iter().any(|a| !p.covers(*a)))
        });
        if stale {
            let old = self.processes.remove(&tgid);
            let (old_maps, jit) = old.map_or_else(Default::default, |p| (p.maps, p.jit));
            self.processes.insert(
                tgid,
                ProcessMaps {
                    maps: read_maps(tgid, &old_maps),
                    read_at: Instant::now(),
                    jit,
                },
            );
        }
        let Some(p) = self.processes.get_mut(&tgid) else {
            return vec![self.unknown.clone(); addrs.len()];
        };
        let mut out = Vec::with_capacity(addrs.len());
        let mut jit_missing = Vec::new();
        for &a in addrs {
            let i = p.maps.partition_point(|m| m.start <= a);
            let m = i.checked_sub(1).map(|i| p.maps[i]).filter(|m| a < m.end);
            let name = match m.map(|m| m.target) {
                Some(Target::File(key)) => {
                    let m = m.expect("a mapping");
                    let file_off = a - m.start + m.offset;
                    self.files.name(key, file_off, || {
                        let path = crate::procfs::pid_path(
                            tgid,
                            &format!("map_files/{:x}-{:x}", m.start, m.end),
                        );
                        // Gone with its process, or unmapped since: not the file's fault.
                        let found = FoundFile::at(&path).ok()?;
                        // The file mapped then, not one put at its place since.
                        if FileKey::of_fd(found.fd.as_fd()) != Some(key) {
                            return None;
                        }
                        Some(found.open().and_then(SymTable::read))
                    })
                }
                Some(Target::Anon) => match p.jit.get(&a) {
                    Some(f) => Some(f.clone()),
                    None => {
                        jit_missing.push(a);
                        None
                    }
                },
                _ => None,
            };
            out.push(name);
        }
        if !jit_missing.is_empty() {
            jit_missing.sort_unstable();
            jit_missing.dedup();
            if p.jit.len() + jit_missing.len() > MAX_CACHED_JIT {
                p.jit.clear();
            }
            // A symbolizer of its own: blazesym keeps every perf map it reads, per process.
            let symbolizer = Symbolizer::builder()
                .enable_code_info(false)
                .enable_inlined_fns(false)
                .build();
            let mut process = Process::new(Pid::from(tgid));
            process.debug_syms = false;
            let names = resolve(&symbolizer, &Source::Process(process), &jit_missing);
            for (a, n) in jit_missing.iter().zip(names) {
                p.jit.insert(*a, n.unwrap_or_else(|| self.unknown.clone()));
            }
            for (a, o) in addrs.iter().zip(out.iter_mut()) {
                if o.is_none() {
                    *o = p.jit.get(a).cloned();
                }
            }
        }
        out.into_iter()
            .map(|n| n.unwrap_or_else(|| self.unknown.clone()))
            .collect()
    }

    /// Names of kernel addresses, in order (kallsyms; no vmlinux search).
    pub fn kernel(&mut self, addrs: &[u64]) -> Vec<Frame> {
        let mut missing: Vec<u64> = addrs
            .iter()
            .copied()
            .filter(|a| !self.kernel.contains_key(a))
            .collect();
        missing.sort_unstable();
        missing.dedup();
        if !missing.is_empty() {
            if self.kernel.len() + missing.len() > MAX_CACHED_KERNEL {
                self.kernel.clear();
            }
            let src = Source::Kernel(Kernel {
                vmlinux: MaybeDefault::None,
                ..Default::default()
            });
            let names = resolve(&self.symbolizer, &src, &missing);
            for (a, n) in missing.iter().zip(names) {
                let name = n
                    .map(|n| Frame::from(format!("{n}_[k]")))
                    .unwrap_or_else(|| Frame::from("[unknown]_[k]"));
                self.kernel.insert(*a, name);
            }
        }
        addrs
            .iter()
            .map(|a| {
                self.kernel
                    .get(a)
                    .cloned()
                    .unwrap_or_else(|| Frame::from("[unknown]_[k]"))
            })
            .collect()
    }

    /// Forgets a process's names (it exited: its addresses may mean other code in a process
    /// that reuses its id).
    pub fn forget(&mut self, tgid: u32) {
        self.processes.remove(&tgid);
    }

    pub fn cached_processes(&self) -> impl Iterator<Item = u32> + '_ {
        self.processes.keys().copied()
    }
}

/// One name per address (`None`: no symbol, or the source could not be read). A batch that
/// fails as a whole (one file of the process that cannot be read fails every address with
/// it) is asked again address by address, so that one bad file costs only its own frames.
fn resolve(symbolizer: &Symbolizer, src: &Source, addrs: &[u64]) -> Vec<Option<Frame>> {
    let name = |s: Symbolized| match s {
        Symbolized::Sym(sym) => Some(Frame::from(sym.name.as_ref())),
        Symbolized::Unknown(_) => None,
    };
    match symbolizer.symbolize(src, Input::AbsAddr(addrs)) {
        Ok(syms) if syms.len() == addrs.len() => syms.into_iter().map(name).collect(),
        _ if addrs.len() == 1 => vec![None],
        _ => addrs
            .iter()
            .map(|a| {
                symbolizer
                    .symbolize_single(src, Input::AbsAddr(*a))
                    .ok()
                    .and_then(name)
            })
            .collect(),
    }
}

/// A process's executable mappings, sorted by start; a mapping unchanged since `old` (same
/// place, offset and inode) keeps its target, others are found through `map_files`.
fn read_maps(tgid: u32, old: &[Mapping]) -> Vec<Mapping> {
    let mut text = String::new();
    let read = std::fs::File::open(crate::procfs::pid_path(tgid, "maps"))
        .and_then(|f| f.take(MAX_MAPS_BYTES).read_to_string(&mut text));
    if read.is_err() {
        return Vec::new();
    }
    let mut maps: Vec<Mapping> = parse_maps(&text)
        .map(|(mut m, path)| {
            m.target = match old
                .iter()
                .find(|o| (o.start, o.end, o.offset, o.ino) == (m.start, m.end, m.offset, m.ino))
            {
                Some(o) => o.target,
                None if path.is_empty() => Target::Anon,
                None if m.ino == 0 => Target::None,
                None => {
                    let p = crate::procfs::pid_path(
                        tgid,
                        &format!("map_files/{:x}-{:x}", m.start, m.end),
                    );
                    FoundFile::at(&p)
                        .ok()
                        .and_then(|f| FileKey::of_fd(f.fd.as_fd()))
                        .map_or(Target::None, Target::File)
                }
            };
            m
        })
        .collect();
    maps.sort_by_key(|m| m.start);
    maps
}

/// The executable mappings of a `/proc/PID/maps` text, with their paths (empty: anonymous).
fn parse_maps(text: &str) -> impl Iterator<Item = (Mapping, &str)> {
    text.lines().filter_map(|l| {
        let mut f = l.splitn(6, ' ');
        let (range, perms, offset, _dev, ino) =
            (f.next()?, f.next()?, f.next()?, f.next()?, f.next()?);
        let path = f.next().unwrap_or("").trim_start();
        if perms.as_bytes().get(2) != Some(&b'x') {
            return None;
        }
        let (start, end) = range.split_once('-')?;
        let m = Mapping {
            start: u64::from_str_radix(start, 16).ok()?,
            end: u64::from_str_radix(end, 16).ok()?,
            offset: u64::from_str_radix(offset, 16).ok()?,
            ino: ino.parse().ok()?,
            target: Target::None,
        };
        (m.start < m.end).then_some((m, path))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_executable_mappings_are_kept_with_their_paths() {
        let maps = "\
55d0c0a00000-55d0c0a01000 r--p 00000000 08:01 1234 /usr/bin/hot
55d0c0a01000-55d0c0a02000 r-xp 00001000 08:01 1234 /usr/bin/hot
7f0000000000-7f0000100000 r-xp 00000000 00:00 0 
7f1000000000-7f1000001000 r-xp 00028000 08:01 99 /usr/lib/x86_64-linux-gnu/libc.so.6 (deleted)
7ffd00000000-7ffd00002000 r-xp 00000000 00:00 0                          [vdso]
garbage line
ffffffffff600000-ffffffffff601000 --xp 00000000 00:00 0                  [vsyscall]
";
        let got: Vec<(u64, u64, u64, u64, &str)> = parse_maps(maps)
            .map(|(m, p)| (m.start, m.end, m.offset, m.ino, p))
            .collect();
        assert_eq!(
            got,
            [
                (0x55d0c0a01000, 0x55d0c0a02000, 0x1000, 1234, "/usr/bin/hot"),
                (0x7f0000000000, 0x7f0000100000, 0, 0, ""),
                (
                    0x7f1000000000,
                    0x7f1000001000,
                    0x28000,
                    99,
                    "/usr/lib/x86_64-linux-gnu/libc.so.6 (deleted)"
                ),
                (0x7ffd00000000, 0x7ffd00002000, 0, 0, "[vdso]"),
                (0xffffffffff600000, 0xffffffffff601000, 0, 0, "[vsyscall]"),
            ]
        );
    }

    #[test]
    fn this_process_names_its_own_code_through_its_maps() {
        let mut s = Symbols::new();
        let here = this_process_names_its_own_code_through_its_maps as fn() as usize as u64;
        let names = s.user(std::process::id(), &[here, 8]);
        assert!(
            names[0].ends_with("this_process_names_its_own_code_through_its_maps"),
            "{names:?}"
        );
        assert_eq!(&*names[1], UNKNOWN, "an address nothing maps");
        assert_eq!(s.cache_stats().files_read, 1);
    }
}
