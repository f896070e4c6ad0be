//! Addresses → function names, with blazesym: a process's addresses through its
//! `/proc/PID/maps` and `map_files` (so a container's files are read through the process's
//! own mounts, and a deleted or replaced binary is still the one mapped), ELF symbol tables
//! (not DWARF: see `user`), `/tmp/perf-PID.map` for JIT code; kernel addresses from kallsyms.
//! Names are cached per process and address: a stack seen again costs hash lookups only.
//!
//! blazesym maps the files it reads (no read of unbounded length into memory) and opens only
//! the regular files a process maps (`map_files` links), never a FIFO a path could name.

use std::collections::HashMap;

use blazesym::symbolize::source::{Kernel, Process, Source};
use blazesym::symbolize::{Input, Symbolized, Symbolizer};
use blazesym::{MaybeDefault, Pid};

use super::Frame;

/// A frame's name where no symbol covers its address.
pub const UNKNOWN: &str = "[unknown]";

/// Most addresses cached per process and for the kernel (a process's names are dropped with
/// it; past this a process's cache starts over).
const MAX_CACHED_PER_PROCESS: usize = 65_536;

pub struct Symbols {
    symbolizer: Symbolizer,
    user: HashMap<u32, HashMap<u64, Frame>>,
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
        Symbols {
            // No file:line (not shown yet) and no inlined functions: a stack's frames are
            // the functions its return addresses are in.
            symbolizer: Symbolizer::builder()
                .enable_code_info(false)
                .enable_inlined_fns(false)
                .enable_demangling(true)
                .build(),
            user: HashMap::new(),
            kernel: HashMap::new(),
            unknown: Frame::from(UNKNOWN),
        }
    }

    /// Names of the user addresses `addrs` of process `tgid`, in order.
    pub fn user(&mut self, tgid: u32, addrs: &[u64]) -> Vec<Frame> {
        let cache = self.user.entry(tgid).or_default();
        let missing: Vec<u64> = {
            let mut m: Vec<u64> = addrs
                .iter()
                .copied()
                .filter(|a| !cache.contains_key(a))
                .collect();
            m.sort_unstable();
            m.dedup();
            m
        };
        if !missing.is_empty() {
            if cache.len() + missing.len() > MAX_CACHED_PER_PROCESS {
                cache.clear();
            }
            // ELF symbols only: a process's DWARF (librustc_driver's is hundreds of MB) costs
            // seconds and memory per file, and names no more functions where a symbol table
            // is present.
            let mut process = Process::new(Pid::from(tgid));
            process.debug_syms = false;
            let src = Source::Process(process);
            let names = resolve(&self.symbolizer, &src, &missing);
            for (a, n) in missing.iter().zip(names) {
                cache.insert(*a, n.unwrap_or_else(|| self.unknown.clone()));
            }
        }
        addrs
            .iter()
            .map(|a| {
                cache
                    .get(a)
                    .cloned()
                    .unwrap_or_else(|| self.unknown.clone())
            })
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
            if self.kernel.len() + missing.len() > MAX_CACHED_PER_PROCESS {
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
        self.user.remove(&tgid);
    }

    pub fn cached_processes(&self) -> impl Iterator<Item = u32> + '_ {
        self.user.keys().copied()
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
