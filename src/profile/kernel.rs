//! The profile's kernel side (src/bpf/profile.bpf.c): loaded only with `--profile`, on a
//! thread of its own that reads and symbolizes the counts once per interval.

use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::mem::MaybeUninit;
use std::os::fd::{AsRawFd, FromRawFd, IntoRawFd, OwnedFd};
use std::rc::Rc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{Receiver, Sender};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context, Result};
use libbpf_rs::skel::{OpenSkel, SkelBuilder};
use libbpf_rs::{Link, MapCore, MapFlags, RingBuffer, RingBufferBuilder};

use super::symbols::Symbols;
use super::{Block, Frame, Kind, Profile, StackKey, Tally};
use crate::bpf::profile::{ProfileSkel, ProfileSkelBuilder};
use crate::cgroups::CgroupFilter;
use crate::filters::Filters;

/// What to profile and how.
#[derive(Clone, Debug)]
pub struct ProfileConfig {
    /// On-CPU samples per second per CPU (software cpu-clock).
    pub hz: u32,
    /// Off-CPU: the shortest block added to a stack; `None`: no off-CPU profile.
    pub off_cpu_min: Option<Duration>,
    pub filters: Filters,
    pub cgroups: Vec<CgroupFilter>,
    /// What the programs select from the start: everything the filters do (`--profile`), or
    /// nothing until a trigger arms them (`--profile-when`, the TUI's key).
    pub gate: Gate,
    /// Stacks kept per thread (`--profile-threads`): the kernel's key always holds the
    /// thread; without it, a process's threads' counts of a stack are added up here.
    pub threads: bool,
}

/// Which of the tasks the filters select the loaded programs profile (`gate_mode` in
/// profile.bpf.c). The programs stay attached; a closed gate costs one load per run.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Gate {
    /// Every task the session's filters select.
    Open,
    /// None.
    Closed,
    /// Only these processes (and only if the filters select them too).
    Processes(Vec<u32>),
}

/// Most processes a gate can list (`armed` in profile.bpf.c).
pub const MAX_ARMED: usize = 64;

/// Stacks the kernel's stack map holds (user and kernel stacks share it; 1 KiB each,
/// preallocated: 16 MiB).
const STACK_MAP_ENTRIES: u32 = 16_384;
/// Frames per stack (the kernel's `perf_event_max_stack` default).
const MAX_FRAMES: usize = 127;
/// `struct ebtop_profile_key`: tgid, pid, user and kernel stack ids, kind, comm.
const KEY_LEN: usize = 36;
/// `bpf_get_stackid`'s answer for a task with no stack of that kind (a kernel thread's user
/// stack; a sample taken in user mode has no kernel stack).
const NO_STACK: i32 = -libc::EFAULT;

/// The profile's counters (`PROF_*` in profile.bpf.c).
const PROF_SAMPLES: usize = 0;
const PROF_BLOCKS: usize = 1;
const PROF_SHORT_BLOCKS: usize = 2;
const PROF_COUNTS_FULL: usize = 3;
const PROF_NO_STORAGE: usize = 4;
const PROF_BLOCKS_RING_FULL: usize = 5;

/// `struct ebtop_block`: tgid, pid, start, end, user and kernel stack ids, kind.
const BLOCK_LEN: usize = 40;
/// Blocks an interval's part carries at most (each ~64 bytes here); beyond, counted in
/// `ProfileLosses::blocks_unlinked_full` and left out of the linking.
pub const MAX_BLOCKS: usize = 1 << 16;

/// A running profile: started with [`ProfileProbe::spawn`], ended with [`ProfileProbe::finish`].
pub struct ProfileProbe {
    stop: Arc<AtomicBool>,
    thread: std::thread::JoinHandle<Result<Profile>>,
    intervals: Option<Receiver<Profile>>,
    gate: Sender<Gate>,
}

impl ProfileProbe {
    /// Loads and attaches the profile's programs on a thread of its own and returns once they
    /// run (or failed to load: the error). The thread reads the counts every `interval`.
    pub fn spawn(cfg: ProfileConfig, interval: Duration) -> Result<ProfileProbe> {
        let stop = Arc::new(AtomicBool::new(false));
        let (started_tx, started_rx) = std::sync::mpsc::channel::<Result<()>>();
        let (interval_tx, interval_rx) = std::sync::mpsc::channel::<Profile>();
        let (gate_tx, gate_rx) = std::sync::mpsc::channel::<Gate>();
        let thread_stop = Arc::clone(&stop);
        let thread = std::thread::Builder::new()
            .name("ebtop-profile".into())
            .spawn(move || {
                let mut reader = match Reader::start(&cfg) {
                    Ok(r) => {
                        let _ = started_tx.send(Ok(()));
                        r
                    }
                    Err(e) => {
                        let _ = started_tx.send(Err(e));
                        return Ok(Profile::default());
                    }
                };
                let mut next = Instant::now() + interval;
                while !thread_stop.load(Ordering::Relaxed) {
                    // The newest gate asked for wins (a trigger's start, its end).
                    if let Some(gate) = gate_rx.try_iter().last() {
                        reader.set_gate(&gate)?;
                    }
                    reader.drain_blocks();
                    let now = Instant::now();
                    if now >= next {
                        let _ = interval_tx.send(reader.poll()?);
                        next += interval;
                        continue;
                    }
                    std::thread::sleep((next - now).min(Duration::from_millis(20)));
                }
                let _ = interval_tx.send(reader.poll()?);
                reader.profile.duration_ns = reader.started.elapsed().as_nanos() as u64;
                Ok(std::mem::take(&mut reader.profile))
            })
            .context("starting the profile's thread failed")?;
        match started_rx.recv() {
            Ok(Ok(())) => Ok(ProfileProbe {
                stop,
                thread,
                intervals: Some(interval_rx),
                gate: gate_tx,
            }),
            Ok(Err(e)) => {
                let _ = thread.join();
                Err(e)
            }
            Err(_) => match thread.join() {
                Ok(Err(e)) => Err(e),
                _ => bail!("the profile's thread ended before it started"),
            },
        }
    }

    /// Each interval's profile (what the kernel counted since the previous reading), as the
    /// thread reads it; the last one is sent before [`Self::finish`] returns.
    pub fn take_intervals(&mut self) -> Option<Receiver<Profile>> {
        self.intervals.take()
    }

    /// Where the gate is set from (the thread applies the newest within ~20 ms).
    pub fn gate(&self) -> Sender<Gate> {
        self.gate.clone()
    }

    /// Reads the last counts, detaches and returns the session's profile.
    pub fn finish(self) -> Result<Profile> {
        self.stop.store(true, Ordering::Relaxed);
        self.thread
            .join()
            .map_err(|_| anyhow!("the profile's thread panicked"))?
    }
}

struct Reader {
    skel: ProfileSkel<'static>,
    /// Kept for their lifetime: dropping them detaches (and closes the perf events).
    _links: Vec<Link>,
    /// Each kernel key's counts at the last read: the counts are cumulative.
    previous: HashMap<[u8; KEY_LEN], Tally>,
    symbols: Symbols,
    user_stacks: HashMap<(u32, i32), Arc<[Frame]>>,
    kernel_stacks: HashMap<i32, Arc<[Frame]>>,
    comms: HashMap<u32, String>,
    /// `ProfileConfig::threads`.
    threads: bool,
    /// The off-CPU blocks' ring (`serve_blocks`), drained every 20 ms into `raw_blocks`
    /// (at most [`MAX_BLOCKS`] per reading; the rest counted in `blocks_over`).
    blocks_ring: Option<RingBuffer<'static>>,
    raw_blocks: Rc<RefCell<Vec<[u8; BLOCK_LEN]>>>,
    blocks_over: Rc<Cell<u64>>,
    profile: Profile,
    /// What the current reading adds (sent on as the interval's profile).
    interval: Profile,
    last_read: Instant,
    started: Instant,
}

/// Opens the software cpu-clock event of `cpu` sampling at `hz` (all tasks on that CPU).
fn open_cpu_clock(cpu: i32, hz: u32) -> std::io::Result<OwnedFd> {
    let mut attr = libbpf_rs::libbpf_sys::perf_event_attr {
        type_: libbpf_rs::libbpf_sys::PERF_TYPE_SOFTWARE,
        size: std::mem::size_of::<libbpf_rs::libbpf_sys::perf_event_attr>() as u32,
        config: libbpf_rs::libbpf_sys::PERF_COUNT_SW_CPU_CLOCK as u64,
        ..Default::default()
    };
    attr.__bindgen_anon_1.sample_freq = u64::from(hz);
    attr.set_freq(1);
    // SAFETY: `attr` is a valid, initialised perf_event_attr of the size it states; the
    // kernel only reads it.
    let fd = unsafe {
        libc::syscall(
            libc::SYS_perf_event_open,
            &attr as *const _,
            -1 as libc::pid_t,
            cpu,
            -1 as libc::c_int,
            libbpf_rs::libbpf_sys::PERF_FLAG_FD_CLOEXEC as libc::c_ulong,
        )
    };
    if fd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: a descriptor the kernel just returned, owned by nothing else.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as i32) })
}

impl Reader {
    fn start(cfg: &ProfileConfig) -> Result<Reader> {
        let storage = Box::leak(Box::new(MaybeUninit::uninit()));
        let mut open = ProfileSkelBuilder::default()
            .open(storage)
            .context("opening the profile's BPF object failed")?;
        let ro = open
            .maps
            .rodata_data
            .as_deref_mut()
            .ok_or_else(|| anyhow!("profile BPF object has no .rodata section"))?;
        ro.own_tgid = std::process::id();
        ro.off_cpu_min_ns = cfg.off_cpu_min.map_or(0, |d| d.as_nanos() as u64);
        if let Some(pids) = &cfg.filters.pid {
            crate::bpf::set_list_filter(&mut ro.filter_tgids, &mut ro.filter_tgid_count, pids);
        }
        if let Some(comms) = &cfg.filters.comm {
            crate::bpf::set_comm_filters(&mut ro.filter_comms, &mut ro.filter_comm_count, comms);
        }
        crate::bpf::set_cgroup_filters(
            &mut ro.filter_cgroup_ids,
            &mut ro.filter_cgroup_levels,
            &mut ro.filter_cgroup_count,
            &cfg.cgroups,
        );
        open.maps
            .stacks
            .set_max_entries(STACK_MAP_ENTRIES)
            .context("sizing the profile's stack map failed")?;
        if cfg.off_cpu_min.is_none() {
            open.progs.off_cpu_switch.set_autoload(false);
        }
        open.maps
            .bss_data
            .as_deref_mut()
            .ok_or_else(|| anyhow!("profile BPF object has no .bss section"))?
            .gate_mode = gate_mode(&cfg.gate);
        let skel = open
            .load()
            .map_err(|e| anyhow!("loading the profile's BPF programs failed: {e}"))?;
        let mut links = Vec::new();
        let mut events = 0;
        let cpus = libbpf_rs::num_possible_cpus().context("counting the CPUs failed")?;
        let mut refusal = None;
        for cpu in 0..cpus {
            match open_cpu_clock(cpu as i32, cfg.hz) {
                Ok(fd) => {
                    links.push(
                        skel.progs
                            .on_cpu_sample
                            .attach_perf_event(fd.as_raw_fd())
                            .map_err(|e| anyhow!("attaching the on-CPU sampler failed: {e}"))?,
                    );
                    // The link owns the event now: libbpf closes it when the link goes.
                    let _ = fd.into_raw_fd();
                    events += 1;
                }
                // An offline CPU has no event to open.
                Err(e) if e.raw_os_error() == Some(libc::ENODEV) => {}
                Err(e) => refusal = Some(e),
            }
        }
        if events == 0 {
            bail!(
                "the kernel refused the cpu-clock sampling event: {}",
                refusal.map_or_else(|| "no CPU online".to_owned(), |e| e.to_string())
            );
        }
        if cfg.off_cpu_min.is_some() {
            links.push(
                skel.progs.off_cpu_switch.attach().map_err(|e| {
                    anyhow!("attaching the off-CPU tracer (sched_switch) failed: {e}")
                })?,
            );
        }
        let raw_blocks: Rc<RefCell<Vec<[u8; BLOCK_LEN]>>> = Rc::default();
        let blocks_over: Rc<Cell<u64>> = Rc::default();
        let blocks_ring = if cfg.off_cpu_min.is_some() {
            let (into, over) = (Rc::clone(&raw_blocks), Rc::clone(&blocks_over));
            let mut b = RingBufferBuilder::new();
            b.add(&skel.maps.serve_blocks, move |data: &[u8]| {
                let mut v = into.borrow_mut();
                match <[u8; BLOCK_LEN]>::try_from(data) {
                    Ok(r) if v.len() < MAX_BLOCKS => v.push(r),
                    _ => over.set(over.get() + 1),
                }
                0
            })
            .context("setting up the off-CPU blocks' ring failed")?;
            Some(
                b.build()
                    .context("setting up the off-CPU blocks' ring failed")?,
            )
        } else {
            None
        };
        let mut reader = Reader {
            skel,
            _links: links,
            blocks_ring,
            raw_blocks,
            blocks_over,
            previous: HashMap::new(),
            symbols: Symbols::new(),
            user_stacks: HashMap::new(),
            kernel_stacks: HashMap::new(),
            comms: HashMap::new(),
            threads: cfg.threads,
            profile: Profile {
                hz: cfg.hz,
                off_cpu_min_ns: cfg.off_cpu_min.map(|d| d.as_nanos() as u64),
                start_unix_ns: crate::clock::now_unix_ns().max(0) as u64,
                ..Default::default()
            },
            interval: Profile::default(),
            last_read: Instant::now(),
            started: Instant::now(),
        };
        reader.set_gate(&cfg.gate)?;
        Ok(reader)
    }

    /// Opens, closes or narrows what the programs profile: the process list first, then the
    /// mode, so a narrowed gate never selects a process of the previous list.
    fn set_gate(&mut self, gate: &Gate) -> Result<()> {
        let keys: Vec<Vec<u8>> = self.skel.maps.armed.keys().collect();
        if let Gate::Processes(pids) = gate {
            let bss = self
                .skel
                .maps
                .bss_data
                .as_deref_mut()
                .ok_or_else(|| anyhow!("profile BPF object has no .bss section"))?;
            bss.gate_mode = GATE_CLOSED;
            for k in &keys {
                let _ = self.skel.maps.armed.delete(k);
            }
            for pid in pids.iter().take(MAX_ARMED) {
                self.skel
                    .maps
                    .armed
                    .update(&pid.to_ne_bytes(), &[1u8], MapFlags::ANY)
                    .context("arming the profile for a process failed")?;
            }
        }
        self.skel
            .maps
            .bss_data
            .as_deref_mut()
            .ok_or_else(|| anyhow!("profile BPF object has no .bss section"))?
            .gate_mode = gate_mode(gate);
        Ok(())
    }

    /// Adds what the kernel counted since the last read to the profile; returns that part
    /// alone (the interval's profile).
    fn poll(&mut self) -> Result<Profile> {
        let now = Instant::now();
        self.interval = Profile {
            hz: self.profile.hz,
            off_cpu_min_ns: self.profile.off_cpu_min_ns,
            start_unix_ns: crate::clock::now_unix_ns().max(0) as u64,
            duration_ns: now.duration_since(self.last_read).as_nanos() as u64,
            ..Default::default()
        };
        self.last_read = now;
        let losses_before = self.profile.losses;
        let keys: Vec<Vec<u8>> = self.skel.maps.profile_counts.keys().collect();
        for raw in keys {
            let Ok(key) = <[u8; KEY_LEN]>::try_from(raw.as_slice()) else {
                continue;
            };
            let Some(per_cpu) = self
                .skel
                .maps
                .profile_counts
                .lookup_percpu(&key, MapFlags::ANY)
                .context("reading the profile's counts failed")?
            else {
                continue;
            };
            let mut now = Tally::default();
            for v in &per_cpu {
                now.count += u64_at(v, 0);
                now.ns += u64_at(v, 8);
            }
            let before = self.previous.insert(key, now).unwrap_or_default();
            let delta = Tally {
                count: now.count.saturating_sub(before.count),
                ns: now.ns.saturating_sub(before.ns),
            };
            if delta.count == 0 && delta.ns == 0 {
                continue;
            }
            self.add(&key, delta);
        }
        let mut counters = [0u64; 8];
        for (i, c) in counters.iter_mut().enumerate() {
            if let Ok(Some(per_cpu)) = self
                .skel
                .maps
                .profile_counters
                .lookup_percpu(&(i as u32).to_ne_bytes(), MapFlags::ANY)
            {
                *c = per_cpu.iter().map(|v| u64_at(v, 0)).sum();
            }
        }
        let _ = (counters[PROF_SAMPLES], counters[PROF_BLOCKS]);
        self.profile.losses.counts_table_full = counters[PROF_COUNTS_FULL];
        self.profile.losses.short_blocks = counters[PROF_SHORT_BLOCKS];
        self.profile.losses.blocks_untimed = counters[PROF_NO_STORAGE];
        self.drain_blocks();
        let raw = std::mem::take(&mut *self.raw_blocks.borrow_mut());
        self.profile.losses.blocks_unlinked_full =
            counters[PROF_BLOCKS_RING_FULL] + self.blocks_over.get();
        for r in &raw {
            self.add_block(r);
        }
        self.profile.symbol_cache = self.symbols.cache_stats();
        // Names of processes gone are dropped: their ids may come back as other programs.
        let gone: Vec<u32> = self
            .symbols
            .cached_processes()
            .filter(|t| !crate::procfs::exists(*t))
            .collect();
        for tgid in gone {
            self.symbols.forget(tgid);
            self.user_stacks.retain(|(t, _), _| *t != tgid);
        }
        let (l, b) = (self.profile.losses, losses_before);
        self.interval.losses = super::ProfileLosses {
            counts_table_full: l.counts_table_full.saturating_sub(b.counts_table_full),
            stacks_lost: l.stacks_lost.saturating_sub(b.stacks_lost),
            short_blocks: l.short_blocks.saturating_sub(b.short_blocks),
            blocks_untimed: l.blocks_untimed.saturating_sub(b.blocks_untimed),
            blocks_unlinked_full: l
                .blocks_unlinked_full
                .saturating_sub(b.blocks_unlinked_full),
        };
        // The cache's counts are the session's so far (a state, not a delta): each part
        // carries them as of its reading.
        self.interval.symbol_cache = self.profile.symbol_cache;
        self.interval.mono_ns = crate::clock::monotonic_ns();
        Ok(std::mem::take(&mut self.interval))
    }

    /// Moves the blocks waiting in the ring to `raw_blocks` (bounded there).
    fn drain_blocks(&mut self) {
        if let Some(ring) = &self.blocks_ring {
            let _ = ring.consume();
        }
    }

    /// One off-CPU block, named, for the interval's part (not the session's profile: the
    /// pipeline places it inside the calls its thread served and keeps only the sums).
    fn add_block(&mut self, r: &[u8; BLOCK_LEN]) {
        let tgid = u32_at(r, 0);
        let Some(kind) = Kind::from_kernel(u32_at(r, 32)) else {
            return;
        };
        let mut lost = false;
        let user = self.user_frames(tgid, u32_at(r, 24) as i32, &mut lost);
        let kernel = self.kernel_frames(u32_at(r, 28) as i32, &mut lost);
        let frames: Arc<[Frame]> = user.iter().chain(kernel.iter()).cloned().collect();
        let comm = self
            .comms
            .entry(tgid)
            .or_insert_with(|| crate::procfs::read_comm(tgid));
        self.interval.note_process(tgid, comm);
        self.interval.blocks.push(Block {
            tgid,
            tid: u32_at(r, 4),
            start_ns: u64_at(r, 8),
            end_ns: u64_at(r, 16),
            kind,
            frames,
        });
    }

    fn add(&mut self, key: &[u8; KEY_LEN], delta: Tally) {
        let tgid = u32_at(key, 0);
        let user_id = u32_at(key, 8) as i32;
        let kernel_id = u32_at(key, 12) as i32;
        let Some(kind) = Kind::from_kernel(u32_at(key, 16)) else {
            return;
        };
        let thread_comm = comm_of(&key[20..36]);
        let mut lost = false;
        let user = self.user_frames(tgid, user_id, &mut lost);
        let kernel = self.kernel_frames(kernel_id, &mut lost);
        if lost {
            self.profile.losses.stacks_lost += delta.count;
        }
        let frames: Arc<[Frame]> = user.iter().chain(kernel.iter()).cloned().collect();
        let comm = self
            .comms
            .entry(tgid)
            .or_insert_with(|| {
                let comm = crate::procfs::read_comm(tgid);
                if comm.is_empty() {
                    thread_comm
                } else {
                    comm
                }
            })
            .clone();
        let tid = self.threads.then(|| u32_at(key, 4));
        let key = StackKey {
            tgid,
            tid,
            kind,
            frames,
        };
        self.interval.add(key.clone(), &comm, delta);
        self.profile.add(key, &comm, delta);
    }

    /// A user stack's frames, root first.
    fn user_frames(&mut self, tgid: u32, id: i32, lost: &mut bool) -> Arc<[Frame]> {
        if id < 0 {
            return lost_stack(id, lost);
        }
        if let Some(f) = self.user_stacks.get(&(tgid, id)) {
            return f.clone();
        }
        let addrs = self.stack_addrs(id);
        let mut frames = self.symbols.user(tgid, &addrs);
        frames.reverse();
        let frames: Arc<[Frame]> = frames.into();
        self.user_stacks.insert((tgid, id), frames.clone());
        frames
    }

    fn kernel_frames(&mut self, id: i32, lost: &mut bool) -> Arc<[Frame]> {
        if id < 0 {
            return lost_stack(id, lost);
        }
        if let Some(f) = self.kernel_stacks.get(&id) {
            return f.clone();
        }
        let addrs = self.stack_addrs(id);
        let mut frames = self.symbols.kernel(&addrs);
        frames.reverse();
        // An off-CPU stack is taken inside the sched_switch tracepoint: its leaf frames are
        // the tracepoint's and the BPF program's own, not the task's (which end in
        // `__schedule`).
        while frames.last().is_some_and(|f| is_tracing_frame(f)) {
            frames.pop();
        }
        let frames: Arc<[Frame]> = frames.into();
        self.kernel_stacks.insert(id, frames.clone());
        frames
    }

    /// A stack's addresses, leaf first. Every frame but the leaf is a return address, which
    /// points past its call: one byte back is inside the call (and inside the calling
    /// function even when the call is its last instruction).
    fn stack_addrs(&self, id: i32) -> Vec<u64> {
        let Ok(Some(bytes)) = self
            .skel
            .maps
            .stacks
            .lookup(&(id as u32).to_ne_bytes(), MapFlags::ANY)
        else {
            return Vec::new();
        };
        bytes
            .chunks_exact(8)
            .take(MAX_FRAMES)
            .map(|c| u64::from_ne_bytes(c.try_into().expect("8 bytes")))
            .take_while(|a| *a != 0)
            .enumerate()
            .map(|(i, a)| if i == 0 { a } else { a - 1 })
            .collect()
    }
}

/// `gate_mode` values (profile.bpf.c `EBTOP_GATE_*`).
const GATE_OPEN: u32 = 0;
const GATE_CLOSED: u32 = 1;
const GATE_LISTED: u32 = 2;

fn gate_mode(g: &Gate) -> u32 {
    match g {
        Gate::Open => GATE_OPEN,
        Gate::Closed => GATE_CLOSED,
        Gate::Processes(_) => GATE_LISTED,
    }
}

/// The frames of a stack the kernel did not keep: none where there was no stack to take,
/// else one `[stack lost]` frame (the time still counts).
fn lost_stack(id: i32, lost: &mut bool) -> Arc<[Frame]> {
    if id == NO_STACK {
        return Arc::from([]);
    }
    *lost = true;
    Arc::from([Frame::from("[stack lost]")])
}

/// Kernel frames of the tracepoint machinery and of BPF programs (names from kallsyms, with
/// the `_[k]` suffix; a program's own frame is `bpf_prog_<tag>_<name>`).
fn is_tracing_frame(f: &str) -> bool {
    let name = f.strip_suffix("_[k]").unwrap_or(f);
    name.starts_with("bpf_trace_run")
        || name.starts_with("__bpf_trace_")
        || name.starts_with("__traceiter_")
        || name.starts_with("bpf_prog_")
        || name.starts_with("trace_call_bpf")
}

fn u64_at(b: &[u8], at: usize) -> u64 {
    b.get(at..at + 8)
        .map_or(0, |s| u64::from_ne_bytes(s.try_into().expect("8 bytes")))
}

fn u32_at(b: &[u8], at: usize) -> u32 {
    b.get(at..at + 4)
        .map_or(0, |s| u32::from_ne_bytes(s.try_into().expect("4 bytes")))
}

fn comm_of(b: &[u8]) -> String {
    let end = b.iter().position(|c| *c == 0).unwrap_or(b.len());
    String::from_utf8_lossy(&b[..end]).into_owned()
}
