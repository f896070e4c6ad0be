//! Live process exec/exit records (`procs.bpf.c`, its own small ring buffer). Optional: without
//! them the process table is read from /proc as calls appear, as before.

use std::cell::RefCell;
use std::mem::MaybeUninit;
use std::rc::Rc;

use anyhow::{anyhow, Context, Result};
use libbpf_rs::skel::{OpenSkel, Skel, SkelBuilder};
use libbpf_rs::{Link, RingBuffer, RingBufferBuilder};

use crate::bpf::procs::{ProcsSkel, ProcsSkelBuilder};
use crate::filters::Filters;
use crate::process_events::{ProcEvent, ProcEventKind};

/// The C libraries whose `dlopen` is watched: glibc (≥ 2.34 defines it in libc.so.6, older
/// ones in libdl.so.2) and musl (its loader is its C library).
fn is_dlopen_library(name: &str) -> bool {
    name == "libc.so.6"
        || name == "libdl.so.2"
        || (name.starts_with("ld-musl-") && name.ends_with(".so.1"))
}

/// Return probes on `dlopen` in the library directories' C libraries, each file once: a
/// library a running process loads from anywhere is then looked at by the TLS probes at
/// once, not at the program's next exec. A file that defines no `dlopen` (glibc's stub
/// libdl) is passed over; if no file takes the probe, that is said once.
fn watch_dlopen(prog: &libbpf_rs::ProgramMut) -> Vec<Link> {
    let mut seen = std::collections::HashSet::new();
    let mut links = Vec::new();
    let mut failures = Vec::new();
    for dir in crate::tls::discover::library_dirs() {
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for e in entries.flatten() {
            if !is_dlopen_library(&e.file_name().to_string_lossy()) {
                continue;
            }
            let Some(t) = crate::tls::discover::target_of(e.path(), true) else {
                continue;
            };
            if !seen.insert(t.file_id()) {
                continue;
            }
            let opts = libbpf_rs::UprobeOpts {
                retprobe: true,
                func_name: Some("dlopen".into()),
                ..Default::default()
            };
            match prog.attach_uprobe_with_opts(-1, &t.path, 0, opts) {
                Ok(l) => links.push(l),
                Err(err) => failures.push(format!("{}: {err}", t.path.display())),
            }
        }
    }
    if links.is_empty() {
        crate::diag!(
            "ebtop: TLS: dlopen() not watched ({}): a libssl a running program loads from \
             outside the library directories is probed at its next exec",
            if failures.is_empty() {
                "no C library found".to_owned()
            } else {
                failures.join("; ")
            }
        );
    }
    links
}

/// Process records handed over per pass of the capture loop.
const PROC_BATCH: usize = 16384;

pub struct ProcessProbe {
    /// Leaked: programs and maps live as long as the process (one probe per session).
    skel: &'static ProcsSkel<'static>,
    links: Vec<Link>,
    ring: RingBuffer<'static>,
    records: Rc<RefCell<Vec<Vec<u8>>>>,
    /// Exit records held back until the socket records read with them are handled.
    exits: Vec<Vec<u8>>,
}

/// The process probe's BPF object, loaded and not attached ([`ProcessProbe::load`]): loaded on
/// a thread of its own while the capture loads, attached by the session's thread.
pub struct LoadedProcs(&'static mut ProcsSkel<'static>);

// SAFETY: a leaked skeleton (libbpf's object: pointers and descriptors with no tie to the
// thread that loaded it), handed once from the loading thread to the session's, which alone
// uses it from then on.
unsafe impl Send for LoadedProcs {}

impl ProcessProbe {
    /// Loads the programs (`wake_on_exec`: an exec record wakes the session at once, for the
    /// TLS lookout; set when TLS probes are asked for).
    pub fn load(
        filters: &Filters,
        cgroups: &[crate::cgroups::CgroupFilter],
        wake_on_exec: bool,
    ) -> Result<LoadedProcs> {
        let storage = Box::leak(Box::new(MaybeUninit::uninit()));
        let mut open = ProcsSkelBuilder::default()
            .open(storage)
            .context("opening the process BPF object failed")?;
        let ro = open
            .maps
            .rodata_data
            .as_deref_mut()
            .ok_or_else(|| anyhow!("process BPF object has no .rodata section"))?;
        ro.wake_on_exec = wake_on_exec;
        if let Some(pids) = &filters.pid {
            crate::bpf::set_list_filter(&mut ro.filter_tgids, &mut ro.filter_tgid_count, pids);
        }
        if let Some(comms) = &filters.comm {
            crate::bpf::set_comm_filters(&mut ro.filter_comms, &mut ro.filter_comm_count, comms);
        }
        crate::bpf::set_cgroup_filters(
            &mut ro.filter_cgroup_ids,
            &mut ro.filter_cgroup_levels,
            &mut ro.filter_cgroup_count,
            cgroups,
        );
        let skel: &'static mut ProcsSkel<'static> =
            Box::leak(Box::new(open.load().map_err(|e| {
                anyhow!("loading the process BPF programs failed: {e}")
            })?));
        Ok(LoadedProcs(skel))
    }

    /// Attaches loaded programs (`tls_probes`: also the uretprobe on dlopen that tells the TLS
    /// lookout of a library loaded late) and opens the ring.
    pub fn attach(loaded: LoadedProcs, tls_probes: bool) -> Result<ProcessProbe> {
        let skel = loaded.0;
        let mut links = Vec::new();
        for prog in skel.object_mut().progs_mut() {
            let name = prog.name().to_string_lossy().into_owned();
            if prog.section().to_string_lossy().starts_with("uretprobe") {
                // on_dlopen_return: for the TLS probes only.
                if tls_probes {
                    links.extend(watch_dlopen(&prog));
                }
                continue;
            }
            links.push(
                prog.attach()
                    .map_err(|e| anyhow!("attaching process probe {name} failed: {e}"))?,
            );
        }
        let skel: &'static ProcsSkel<'static> = skel;
        let records: Rc<RefCell<Vec<Vec<u8>>>> = Rc::default();
        let sink = records.clone();
        let mut builder = RingBufferBuilder::new();
        builder
            .add(&skel.maps.proc_events, move |data: &[u8]| {
                sink.borrow_mut().push(data.to_vec());
                0
            })
            .context("setting up the process ring failed")?;
        let ring = builder
            .build()
            .context("setting up the process ring failed")?;
        Ok(ProcessProbe {
            skel,
            links,
            ring,
            records,
            exits: Vec::new(),
        })
    }

    /// Hands the exec records waiting in the ring to `f`, in order, and holds the exit records
    /// back for [`ProcessProbe::drain_exits`]: read before the socket records of the same
    /// pass, an exec precedes the new program's calls, and an exit follows the last calls of
    /// the process (which may be in those socket records).
    pub fn drain_execs(
        &mut self,
        mut f: impl FnMut(&[u8]) -> std::io::Result<()>,
    ) -> std::io::Result<()> {
        // Bounded: an exec storm cannot hold the loop (or grow this batch) without end.
        let _ = self.ring.consume_raw_n(PROC_BATCH);
        let records = std::mem::take(&mut *self.records.borrow_mut());
        for r in records {
            match ProcEvent::decode(&r) {
                Ok(ev) if ev.kind == ProcEventKind::Exit => self.exits.push(r),
                _ => f(&r)?,
            }
        }
        Ok(())
    }

    /// Hands the held-back exit records to `f`.
    pub fn drain_exits(
        &mut self,
        mut f: impl FnMut(&[u8]) -> std::io::Result<()>,
    ) -> std::io::Result<()> {
        std::mem::take(&mut self.exits)
            .iter()
            .try_for_each(|r| f(r))
    }

    /// The process ring's epoll descriptor: ready when records wait (an exec at once when
    /// `wake_on_exec`).
    pub fn epoll_fd(&self) -> i32 {
        self.ring.epoll_fd()
    }

    /// Records written and records the ring had no room for, since the start.
    pub fn counters(&self) -> (u64, u64) {
        let sum = |i: u32| {
            crate::bpf::percpu_u64(&self.skel.maps.proc_counters, i)
                .iter()
                .sum()
        };
        (sum(0), sum(1))
    }

    /// Program runs the kernel skipped (see `crate::bpf::recursion_misses`).
    pub fn missed_runs(&self) -> u64 {
        crate::bpf::recursion_misses(self.skel.object())
    }

    /// The loaded programs (name, fd), for ebtop's overhead accounting.
    pub fn programs(&self) -> Vec<(String, std::os::fd::BorrowedFd<'static>)> {
        crate::bpf::program_fds(self.skel.object(), "procs")
    }

    pub fn links(&mut self) -> Vec<Link> {
        std::mem::take(&mut self.links)
    }
}
