//! The flow table's kernel collector: the programs of src/bpf/flows.bpf.c aggregate TCP flows
//! and UDP (socket, peer) pairs in the kernel; this reads them once per interval into a
//! [`FlowReport`] (the data: src/flows/; design and costs: docs/architecture.md, "Flow table").
//!
//! [`FlowCollector::start`] loads and attaches the programs; [`FlowCollector::consume`] drains
//! the flow-end ring (cheap, call it often); [`FlowCollector::request_poll`] ends an interval:
//! a thread of the collector's own runs the kernel snapshot, reads the tables and hands back
//! ([`FlowCollector::try_part`]) a [`FlowReport`], in parts, with the flows that were active
//! in the interval and the flows that ended. The snapshot walks every bucket of the flow hash
//! (5–15 ms at the default size, whatever its population): done on the ring's reader thread,
//! the capture ring filled up meanwhile.

pub mod drops;
pub mod ends;
pub mod iface;
pub mod listening;
pub mod owners;
pub mod prev;
pub mod raw;

use std::cell::RefCell;
use std::collections::HashMap;

use rustc_hash::FxHashMap;
use std::mem::MaybeUninit;
use std::net::SocketAddr;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::rc::Rc;
use std::sync::{mpsc, Arc, Mutex};

use crate::eventfd::Doorbell;

use anyhow::{anyhow, Context, Result};
use libbpf_rs::skel::{OpenSkel, Skel, SkelBuilder};
use libbpf_rs::{Link, MapCore, MapFlags, MapHandle, RingBuffer, RingBufferBuilder};

use crate::filters::Filters;
use crate::flows::names::{CloseReason, Role, TcpProto, TcpState};
use crate::flows::{FlowReport, FlowStats, TcpFlow, UdpFlow, DEFAULT_MAX_FLOWS, FLOWS_PER_PART};
use compact_str::CompactString;
use ends::EndsBuf;
use owners::Owners;
use prev::{Counters, Prev, PrevTable};
use raw::{RawFlow, RawUdp, RawUdpKey};

use crate::bpf::flows::{FlowsSkel, FlowsSkelBuilder};

/// UDP (socket, peer) pairs idle this long are dropped from the kernel table.
const UDP_IDLE_NS: u64 = 60_000_000_000;

#[derive(Debug, Clone)]
pub struct FlowConfig {
    pub max_flows: u32,
    /// `--pid`, `--comm`, `--port` (applied to reported flows in user space).
    pub filters: Filters,
    /// Attach the accept() exit hooks (syscall tracepoints) that name a server flow's owner.
    /// Without them (socket-layer capture) the owner is the first process moving its data.
    pub accept_hooks: bool,
}

/// The flow table's maps as another BPF object created them (the socket-layer capture, which
/// does the table's per-send work in its own program: src/bpf/flowtable.h). The collector
/// then uses these maps and attaches no send/receive hook of its own.
#[derive(Debug, Clone, Copy)]
pub struct SharedFlowMaps<'a> {
    pub flows: BorrowedFd<'a>,
    pub udp_flows: BorrowedFd<'a>,
    pub udp_peer: BorrowedFd<'a>,
    pub udp_peer_task: BorrowedFd<'a>,
    pub counters: BorrowedFd<'a>,
}

/// Whether the UDP peer stash is the thread's task storage (flowtable.h `peer_stash_in_task`):
/// cgroup sock_addr programs may call `bpf_task_storage_get` and `bpf_get_current_task_btf`
/// on newer kernels only; elsewhere the stash is a hash by thread (a lookup, a locked update
/// and a locked delete per datagram). Probed once.
pub(crate) fn peer_stash_in_task() -> bool {
    static IN_TASK: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *IN_TASK.get_or_init(|| {
        if crate::diag::debug_udp_peer_hash() {
            return false;
        }
        let allowed = |helper| {
            // SAFETY: libbpf loads and frees a two-instruction program of this type calling
            // the helper; no pointer is kept (null options).
            let rc = unsafe {
                libbpf_rs::libbpf_sys::libbpf_probe_bpf_helper(
                    libbpf_rs::libbpf_sys::BPF_PROG_TYPE_CGROUP_SOCK_ADDR,
                    helper,
                    std::ptr::null(),
                )
            };
            rc == 1
        };
        allowed(libbpf_rs::libbpf_sys::BPF_FUNC_task_storage_get)
            && allowed(libbpf_rs::libbpf_sys::BPF_FUNC_get_current_task_btf)
    })
}

impl Default for FlowConfig {
    fn default() -> Self {
        FlowConfig {
            max_flows: DEFAULT_MAX_FLOWS,
            filters: Filters::default(),
            accept_hooks: true,
        }
    }
}

#[derive(Debug, Clone, Copy)]
struct UdpPrev {
    id: u64,
    tx: (u64, u64),
    rx: (u64, u64),
    /// When its counts were last seen to change (monotonic ns): the kernel does not stamp
    /// each datagram, so an entry's idleness is measured here, between reads.
    changed_ns: u64,
}

/// Why a flow closed, from its counters and the socket error at close.
pub fn close_reason(r: &RawFlow) -> CloseReason {
    const EPIPE: i32 = 32;
    const ECONNRESET: i32 = 104;
    const ETIMEDOUT: i32 = 110;
    const ECONNREFUSED: i32 = 111;
    if r.flags & raw::FLAG_CLOSE_UNSEEN != 0 {
        // Its socket's close and destruction were both missed; what is known ends earlier.
        CloseReason::Unseen
    } else if r.rst_received > 0 || matches!(r.sk_err, ECONNRESET | EPIPE | ECONNREFUSED) {
        CloseReason::RstReceived
    } else if r.rst_sent > 0 {
        CloseReason::RstSent
    } else if r.sk_err == ETIMEDOUT {
        CloseReason::Timeout
    } else if r.sk_err != 0 {
        CloseReason::Error
    } else if matches!(r.close_state, 4 | 5 | 6 | 9 | 11) {
        // FIN_WAIT1/2, TIME_WAIT, LAST_ACK, CLOSING: FINs exchanged.
        CloseReason::Fin
    } else if matches!(r.close_state, 1 | 8) {
        // ESTABLISHED/CLOSE_WAIT → CLOSE without an error: aborted by close() (unread data,
        // SO_LINGER 0); the kernel sends the reset right after the state change.
        CloseReason::RstSent
    } else {
        CloseReason::Other
    }
}

/// Payload bytes (sent and acknowledged, received) from tcp_sock's bytes_acked and
/// bytes_received, which also count the sequence numbers SYN and FIN occupy: the active
/// opener's SYN (acknowledged once established), our FIN once acknowledged (judged from the
/// state) and the peer's FIN once received (at the end, the kernel's own flag: a socket
/// closed first goes FIN_WAIT2 → CLOSE whether the peer's FIN came or not). `ss -ti` shows
/// the raw counters.
pub fn payload_bytes(r: &RawFlow, active_opener: bool, ended: bool) -> (u64, u64) {
    let syn = u64::from(active_opener && r.bytes_acked > 0);
    let (fin_out, fin_in) = if ended {
        // FIN_WAIT2/LAST_ACK/CLOSING → CLOSE without an error: our FIN was acknowledged.
        (
            close_reason(r) == CloseReason::Fin && matches!(r.close_state, 5 | 9 | 11),
            r.flags & raw::FLAG_PEER_FIN != 0,
        )
    } else {
        (matches!(r.state, 5 | 6), matches!(r.state, 6 | 8 | 9 | 11))
    };
    (
        r.bytes_acked.saturating_sub(syn + u64::from(fin_out)),
        r.bytes_received.saturating_sub(u64::from(fin_in)),
    )
}

/// Loaded programs, the flow-end ring, and the thread that reads the table.
pub struct FlowCollector {
    skel: &'static FlowsSkel<'static>,
    links: Vec<Link>,
    ring: Arc<Mutex<EndsRing>>,
    /// Flow-end records drained since the last poll.
    ends: Arc<Mutex<EndsBuf>>,
    requests: Option<mpsc::SyncSender<PollRequest>>,
    reports: mpsc::Receiver<FlowReport>,
    thread: Option<std::thread::JoinHandle<()>>,
    /// Stops the thread that drains the flow-end ring in a burst.
    burst_drain: Option<(Doorbell, std::thread::JoinHandle<()>)>,
    /// Polls requested whose last part has not been handed back yet.
    outstanding: usize,
    /// The drop counter (tp_btf/kfree_skb), if the kernel took it.
    drop_program: Option<drops::DropProgram>,
    /// Interface flows (`--iface`): the programs and the interfaces they are on.
    iface: Option<iface::IfaceProgram>,
}

/// An interval's report as the reader thread makes it: full parts are sent on at once
/// (`more` set), the last one with the table's stats when the poll is done.
struct Parts<'a> {
    part: FlowReport,
    send: &'a mut dyn FnMut(FlowReport) -> bool,
    /// The receiver went away (the session is ending): parts are dropped.
    gone: bool,
    /// Time spent handing parts on (waiting for the session to take them): not the poll's.
    sending: std::time::Duration,
}

impl<'a> Parts<'a> {
    fn new(mono_ns: u64, send: &'a mut dyn FnMut(FlowReport) -> bool) -> Parts<'a> {
        Parts {
            part: FlowReport {
                mono_ns,
                ..Default::default()
            },
            send,
            gone: false,
            sending: std::time::Duration::ZERO,
        }
    }

    fn tcp(&mut self, f: TcpFlow) {
        self.part.flows.push(f);
        self.send_if_full();
    }

    fn end(&mut self, f: TcpFlow) {
        self.part.ends.push(f);
        self.send_if_full();
    }

    fn udp(&mut self, f: UdpFlow) {
        self.part.udp.push(f);
        self.send_if_full();
    }

    fn iface(&mut self, f: crate::flows::iface::IfaceFlow) {
        self.part.iface_flows.push(f);
        self.send_if_full();
    }

    fn send_if_full(&mut self) {
        let p = &self.part;
        if p.flows.len() + p.ends.len() + p.udp.len() + p.iface_flows.len() < FLOWS_PER_PART {
            return;
        }
        let next = FlowReport {
            mono_ns: p.mono_ns,
            ..Default::default()
        };
        let mut full = std::mem::replace(&mut self.part, next);
        full.more = true;
        let t = std::time::Instant::now();
        if !self.gone && !(self.send)(full) {
            self.gone = true;
        }
        self.sending += t.elapsed();
    }

    /// Sends the last part, with the table's stats; false if nobody took it.
    fn finish(mut self, stats: FlowStats) -> bool {
        self.part.stats = stats;
        !self.gone && (self.send)(self.part)
    }
}

/// The flow-end ring. The session's loop drains it between its other work; in a burst of
/// closes (100,000 connections torn down at once: more ends in a second than the ring holds)
/// that loop may be busy for that long writing the interval's report, so a thread of its own
/// drains it whenever the kernel says it is filling (a wakeup at a quarter full).
struct EndsRing(RingBuffer<'static>);

// SAFETY: libbpf's ring_buffer is memory mappings, descriptors and callbacks with no tie to
// the thread that made it (the callback appends to an `Arc<Mutex<_>>`); every use is under
// the `Mutex` that holds it, so one thread at a time consumes.
unsafe impl Send for EndsRing {}

impl EndsRing {
    /// Drains the ring into `ends` as far as its bound allows; the rest waits in the ring
    /// (which, when full, counts the ends it has no room for: `ends_lost`).
    fn consume(ring: &Mutex<EndsRing>, ends: &Mutex<EndsBuf>) {
        let r = ring.lock().unwrap_or_else(|e| e.into_inner());
        // Only this thread pushes (it holds the ring), and a poll only frees: the room
        // read now is there until the drain ends.
        let room = ends.lock().unwrap_or_else(|e| e.into_inner()).room();
        if room > 0 {
            // (libbpf reads one record when asked for none.)
            let _ = r.0.consume_raw_n(room);
        }
    }
}

/// The burst drain thread: waits for the ring's wakeups (edge-triggered: ends written without
/// one keep the ring readable, and the loop drains those) or `stop`.
///
/// The chunks it fills in a burst (up to the 16 MiB bound) are freed by the table's reader
/// once it has read them, an interval or more later, while this thread waits: mimalloc hands
/// pages freed by another thread back only when their own thread allocates or collects, and
/// after a teardown this one never drains again, so they stayed resident for good. After a
/// burst it looks once a second until at most one chunk is alive, and then returns what it
/// made and is freed ([`crate::allocator::release_freed`]).
fn drain_bursts((ring, ends): EndsSource, stop: Doorbell) -> Result<std::thread::JoinHandle<()>> {
    let epoll = crate::eventfd::new_epoll().context("waiting for flow ends")?;
    let ring_fd = ring.lock().unwrap_or_else(|e| e.into_inner()).0.epoll_fd();
    crate::eventfd::epoll_add_edge(epoll.as_raw_fd(), ring_fd, 0)
        .context("waiting for flow ends")?;
    crate::eventfd::epoll_add(epoll.as_raw_fd(), stop.as_fd(), 1)
        .context("waiting for flow ends")?;
    std::thread::Builder::new()
        .name("ebtop-flow-ends".into())
        .spawn(move || {
            let mut drained = false;
            loop {
                let timeout_ms = if drained { 1000 } else { -1 };
                match crate::eventfd::epoll_wait(epoll.as_raw_fd(), timeout_ms) {
                    Err(e) if e.kind() != std::io::ErrorKind::Interrupted => return,
                    Ok(false) => {
                        let held = ends.lock().unwrap_or_else(|e| e.into_inner()).held_bytes();
                        if held <= ends::CHUNK_BYTES {
                            crate::allocator::release_freed();
                            drained = false;
                        }
                        continue;
                    }
                    _ => {}
                }
                if stop.clear() {
                    return;
                }
                EndsRing::consume(&ring, &ends);
                drained = true;
            }
        })
        .context("starting the flow-end reader thread failed")
}

impl Drop for FlowCollector {
    fn drop(&mut self) {
        if let Some((stop, thread)) = self.burst_drain.take() {
            stop.ring();
            let _ = thread.join();
        }
    }
}

/// Every this many polls the snapshot reads every flow and the table is read whole (and the
/// first time); in between only the flows touched lately are read, and come through the
/// `flow_reads` ring. The whole read also forgets flows that left the table without an end.
const FULL_READ_EVERY: u64 = 8;

/// Times a poll drains the flow-end ring after reading the counters, at most (a flood of
/// ends could keep it there).
const LATE_DRAINS: usize = 8;

/// Flows read from the `flow_reads` ring at a time.
const READS_PER_BATCH: usize = 4096;

/// The `flow_reads` ring on the table reader's thread: what the last snapshot copied to it.
struct FlowReads<'a> {
    ring: RingBuffer<'a>,
    read: Rc<RefCell<Vec<u8>>>,
}

impl FlowReads<'_> {
    fn new(map: &MapHandle) -> Result<FlowReads<'_>> {
        let read: Rc<RefCell<Vec<u8>>> = Rc::default();
        let sink = read.clone();
        let mut builder = RingBufferBuilder::new();
        builder.add(map, move |data: &[u8]| {
            sink.borrow_mut().extend_from_slice(data);
            0
        })?;
        Ok(FlowReads {
            ring: builder.build()?,
            read,
        })
    }

    /// Reads up to `n` more of what the snapshot copied into memory (`take`); false when the
    /// ring is empty. A batch at a time: the ring holds up to 8 MiB, and copied whole its
    /// buffer grew by doubling to 16 MiB.
    fn next_batch(&self, n: usize) -> bool {
        self.read.borrow_mut().clear();
        self.ring.consume_raw_n(n) > 0
    }

    /// Empties the ring unread (the table is read whole instead): the next snapshot starts
    /// with an empty ring.
    fn discard(&self) {
        while self.next_batch(READS_PER_BATCH) {}
        self.read.borrow_mut().clear();
    }

    fn take(&self) -> Vec<u8> {
        std::mem::take(&mut *self.read.borrow_mut())
    }

    /// The buffer back, for its capacity.
    fn give_back(&self, mut buf: Vec<u8>) {
        buf.clear();
        *self.read.borrow_mut() = buf;
    }
}

/// One interval's end, for the table reader: when, and the flow ends drained since the last.
struct PollRequest {
    now_ns: u64,
    ends: EndsBuf,
    /// The interfaces counted now (`--iface`), and how many could not be attached so far.
    ifaces: Vec<(u32, CompactString)>,
    iface_attach_failures: u64,
}

/// The user-space half of the table (what was reported, owners), with its own handles on the
/// kernel maps: it runs on a thread of its own.
struct FlowTableReader {
    snapshot: OwnedFd,
    flows: MapHandle,
    udp_flows: MapHandle,
    counters: MapHandle,
    /// By socket address (FxHash inside: the table is probed for every flow read, SipHash
    /// was a fifth of the reader's time with 200,000 flows); compact, see prev.rs.
    prev: PrevTable,
    /// Previous counters of flows whose socket address a newer flow took before their end
    /// record came (by address and start): the end still finds its flow's id.
    replaced: FxHashMap<(u64, u64), Prev>,
    /// Owners resolved from /proc while a flow was open (kept for its flow_end), by socket
    /// address, with the flow's start (the address may be another flow's since).
    resolved: FxHashMap<u64, (u64, u32, CompactString)>,
    udp_prev: HashMap<RawUdpKey, UdpPrev>,
    owners: Owners,
    next_id: u64,
    cfg: FlowConfig,
    udp_peer_hooks: bool,
    udp_expired: u64,
    /// Polls so far.
    polls: u64,
    /// The poll that last read the whole table.
    last_whole_read: u64,
    /// Polls before this one read the whole table (the ring of changed flows overflowed).
    whole_reads_until: u64,
    /// The `flow_reads` ring's map, until the reader's thread opens it.
    reads_map: Option<MapHandle>,
    /// The whole-table reads' buffers, kept from poll to poll (one batch of the larger map).
    batch_buffers: crate::bpf::BatchBuffers,
    /// The flow-end ring and the buffer it drains into: read again after the counters, so
    /// the ends a report counts are never more than the ends it (or an earlier one) shows.
    late_ends: EndsSource,
    /// Packet drops, joined to the flows by address (None: not counted).
    drops: Option<drops::DropTracker>,
    /// Interface flows' interval read (None: no `--iface`).
    iface: Option<iface::IfaceReader>,
}

/// The flow-end ring and the buffer its records are drained into.
type EndsSource = (Arc<Mutex<EndsRing>>, Arc<Mutex<EndsBuf>>);

fn cgroup2_root() -> Option<std::fs::File> {
    let mounts = crate::procfs::read_self("mounts").ok()?;
    let dir = mounts
        .lines()
        .map(|l| l.split_whitespace().collect::<Vec<_>>())
        .find(|f| f.len() > 2 && f[2] == "cgroup2")
        .map(|f| f[1].to_string())?;
    std::fs::File::open(dir).ok()
}

/// Opens and loads the flow table's BPF object (leaked: one per run, it lives as long as
/// the process), with or without the owner iterator.
fn load_flows(
    cfg: &FlowConfig,
    shared: Option<SharedFlowMaps>,
    owner_iterator: bool,
) -> Result<&'static mut FlowsSkel<'static>> {
    let storage = Box::leak(Box::new(MaybeUninit::uninit()));
    let mut open = FlowsSkelBuilder::default()
        .open(storage)
        .context("opening the flows BPF object failed")?;
    open.maps
        .flows
        .set_max_entries(cfg.max_flows.max(1))
        .context("sizing the flow table failed")?;
    if let Some(maps) = shared {
        for (map, fd) in [
            (&mut open.maps.flows, maps.flows),
            (&mut open.maps.udp_flows, maps.udp_flows),
            (&mut open.maps.udp_peer, maps.udp_peer),
            (&mut open.maps.udp_peer_task, maps.udp_peer_task),
            (&mut open.maps.flow_counters, maps.counters),
        ] {
            map.reuse_fd(fd)
                .context("sharing the flow table's maps with the capture failed")?;
        }
    }
    if shared.is_none() && peer_stash_in_task() {
        open.maps
            .udp_peer
            .set_max_entries(1)
            .context("sizing the UDP peer hash failed")?;
    }
    if let Some(ro) = open.maps.rodata_data.as_deref_mut() {
        ro.peer_stash_in_task = peer_stash_in_task();
        ro.owner_from_data = !cfg.accept_hooks && shared.is_none();
        ro.debug_skip_close = crate::diag::debug_skip_close();
    }
    if !owner_iterator {
        open.progs.name_owners.set_autoload(false);
    }
    if let Some(bytes) = crate::diag::debug_flow_ends_bytes() {
        open.maps
            .flow_ends
            .set_max_entries(bytes)
            .context("sizing the flow-end ring failed")?;
        if let Some(ro) = open.maps.rodata_data.as_deref_mut() {
            ro.ends_wake_bytes = bytes / 4;
        }
    }
    if let Some(bytes) = crate::diag::debug_flow_reads_bytes() {
        open.maps
            .flow_reads
            .set_max_entries(bytes)
            .context("sizing the ring of changed flows failed")?;
    }
    let skel = open
        .load()
        .map_err(|e| anyhow!("loading the flows BPF programs failed: {e}"))?;
    Ok(Box::leak(Box::new(skel)))
}

/// The flow table's BPF object, loaded and not attached ([`FlowCollector::load`]): loaded on a
/// thread of its own while the capture loads, attached by the session's thread.
pub struct LoadedFlows {
    skel: &'static mut FlowsSkel<'static>,
    /// On the capture's maps: the capture program does the per-send work.
    shared: bool,
}

// SAFETY: a leaked skeleton (libbpf's object: pointers and descriptors with no tie to the
// thread that loaded it), handed once from the loading thread to the session's, which alone
// uses it from then on.
unsafe impl Send for LoadedFlows {}

impl FlowCollector {
    /// Loads and attaches the flow programs. The skeleton lives as long as the process (one
    /// collector per run); dropping the collector detaches every probe.
    pub fn start(cfg: &FlowConfig, shared: Option<SharedFlowMaps>) -> Result<FlowCollector> {
        Self::attach(Self::load(cfg, shared)?, cfg, None)
    }

    /// Loads the flow programs, on the capture's maps if `shared`.
    pub fn load(cfg: &FlowConfig, shared: Option<SharedFlowMaps>) -> Result<LoadedFlows> {
        // The owner iterator needs task-file iterators and bpf_sock_from_file (Linux 5.11):
        // where the kernel refuses it, the same object is loaded without it.
        // `EBTOP_FLOW_OWNERS=procfs` keeps to /proc (comparisons; the tests cover both).
        let procfs_owners = std::env::var_os("EBTOP_FLOW_OWNERS").is_some_and(|v| v == "procfs");
        let skel = match load_flows(cfg, shared, !procfs_owners) {
            Ok(skel) => skel,
            Err(_) if !procfs_owners => load_flows(cfg, shared, false)?,
            Err(e) => return Err(e),
        };
        Ok(LoadedFlows {
            skel,
            shared: shared.is_some(),
        })
    }

    /// Attaches loaded flow programs and starts the threads that read them.
    /// `ifaces`: the interface flow programs (`--iface`), attached already, read with the
    /// flow table's intervals.
    pub fn attach(
        loaded: LoadedFlows,
        cfg: &FlowConfig,
        ifaces: Option<iface::IfaceProgram>,
    ) -> Result<FlowCollector> {
        let LoadedFlows { skel, shared } = loaded;
        let mut links = Vec::new();
        let mut udp_peer_hooks = false;
        let mut owner_iterator = None;
        let cgroup = cgroup2_root();
        for prog in skel.object_mut().progs_mut() {
            let name = prog.name().to_string_lossy().into_owned();
            let section = prog.section().to_string_lossy().into_owned();
            if section.starts_with("tracepoint/syscalls/") && !cfg.accept_hooks {
                // A syscall tracepoint puts every task's syscalls on the slow path.
                continue;
            }
            if shared && section.starts_with("tp_btf/sock_") {
                // The capture program does this work on the same hook.
                continue;
            }
            if section.starts_with("tracepoint/") || section.starts_with("tp_btf/") {
                links.push(
                    prog.attach()
                        .map_err(|e| anyhow!("attaching {name} to {section} failed: {e}"))?,
                );
            } else if section.starts_with("cgroup/") && !crate::source::bench_no_peer_hooks() {
                // Optional: without them, peers of unconnected UDP sockets are unknown.
                if let Some(cg) = &cgroup {
                    use std::os::fd::AsRawFd;
                    if let Ok(l) = prog.attach_cgroup(cg.as_raw_fd()) {
                        links.push(l);
                        udp_peer_hooks = true;
                    }
                }
            } else if section.starts_with("iter/") {
                // Run on demand by the reader thread; without it, owners come from /proc.
                if let Ok(link) = prog.attach_iter_with_opts(libbpf_rs::IterOpts::None) {
                    owner_iterator = link
                        .as_fd()
                        .try_clone_to_owned()
                        .ok()
                        .map(owners::OwnerIterator::new);
                    links.push(link);
                }
            }
            // `snapshot` (raw_tp) is run on demand, never attached.
        }
        let skel: &'static FlowsSkel<'static> = skel;
        let held = crate::diag::debug_flow_ends_held_bytes().unwrap_or(ends::DEFAULT_HELD_BYTES);
        let ends = Arc::new(Mutex::new(EndsBuf::new(held)));
        let sink = ends.clone();
        let mut builder = RingBufferBuilder::new();
        builder
            .add(&skel.maps.flow_ends, move |data: &[u8]| {
                // Compact, in chunks, not an allocation each (200,000 at a teardown).
                sink.lock().unwrap_or_else(|e| e.into_inner()).push(data);
                0
            })
            .context("setting up the flow-end ring failed")?;
        let ring = Arc::new(Mutex::new(EndsRing(
            builder
                .build()
                .context("setting up the flow-end ring failed")?,
        )));
        let stop = Doorbell::new().context("waiting for flow ends")?;
        let burst_drain = Some((
            stop.try_clone().context("waiting for flow ends")?,
            drain_bursts((ring.clone(), ends.clone()), stop)?,
        ));
        let handle = |m: &libbpf_rs::Map, what: &str| {
            MapHandle::try_from(m).with_context(|| format!("opening the flow table's {what} map"))
        };
        // Optional: a kernel without drop reasons (before 5.17) still has the flow table.
        let drop_program = match drops::DropProgram::start() {
            Ok(p) => Some(p),
            Err(e) => {
                crate::diag!("ebtop: warning: packet drops not counted: {e:#}");
                None
            }
        };
        let drop_tracker = match drop_program.as_ref().map(|p| p.tracker()) {
            Some(Ok(t)) => Some(t),
            Some(Err(e)) => {
                crate::diag!("ebtop: warning: packet drops not counted: {e:#}");
                None
            }
            None => None,
        };
        let reader = FlowTableReader {
            snapshot: skel
                .progs
                .snapshot
                .as_fd()
                .try_clone_to_owned()
                .context("opening the flow table's snapshot program")?,
            flows: handle(&skel.maps.flows, "flows")?,
            udp_flows: handle(&skel.maps.udp_flows, "udp_flows")?,
            counters: handle(&skel.maps.flow_counters, "counters")?,
            prev: PrevTable::default(),
            replaced: FxHashMap::default(),
            resolved: FxHashMap::default(),
            udp_prev: HashMap::new(),
            owners: owner_iterator.map(Owners::in_kernel).unwrap_or_default(),
            next_id: 1,
            cfg: cfg.clone(),
            udp_peer_hooks,
            udp_expired: 0,
            polls: 0,
            last_whole_read: 0,
            whole_reads_until: 0,
            reads_map: MapHandle::try_from(&skel.maps.flow_reads).ok(),
            batch_buffers: Default::default(),
            late_ends: (ring.clone(), ends.clone()),
            drops: drop_tracker,
            iface: match ifaces.as_ref().map(|p| p.reader()) {
                Some(r) => Some(r?),
                None => None,
            },
        };
        // One request in flight at a time (the loop waits for a report's last part before
        // the next). Two parts in the channel at most: the reader waits for the session to
        // take them, so no more of a large report than that is held.
        let (requests, jobs) = mpsc::sync_channel::<PollRequest>(1);
        let (done, reports) = mpsc::sync_channel::<FlowReport>(2);
        let thread = std::thread::Builder::new()
            .name("ebtop-flows".into())
            .spawn(move || {
                crate::preflight::set_helper_priority();
                let mut reader = reader;
                reader.owners.scan();
                // Without the ring, every snapshot reads every flow and the table is read whole.
                let reads_map = reader.reads_map.take();
                let reads = reads_map.as_ref().and_then(|m| FlowReads::new(m).ok());
                let mut send = |part: FlowReport| done.send(part).is_ok();
                while let Ok(job) = jobs.recv() {
                    let parts = Parts::new(job.now_ns, &mut send);
                    let ifaces = (job.ifaces, job.iface_attach_failures);
                    if !reader.poll(job.ends, reads.as_ref(), &ifaces, parts) {
                        break;
                    }
                    // What the poll freed (a mass close's ends and counters, the parts the
                    // session wrote) back to the system now, not when this thread's heap
                    // next needs a page: a walk of its heap, microseconds.
                    crate::allocator::release_freed();
                }
            })
            .context("starting the flow table's reader thread failed")?;
        Ok(FlowCollector {
            skel,
            links,
            ring,
            ends,
            requests: Some(requests),
            reports,
            thread: Some(thread),
            burst_drain,
            outstanding: 0,
            drop_program,
            iface: ifaces,
        })
    }

    /// Whether interface flows are counted (`--iface`: the programs attached).
    pub fn counts_iface(&self) -> bool {
        self.iface.is_some()
    }

    /// Whether packet drops are counted (the kernel took the drop counter).
    pub fn counts_drops(&self) -> bool {
        self.drop_program.is_some()
    }

    /// The loaded programs (name, fd), for ebtop's overhead accounting.
    pub fn programs(&self) -> Vec<(String, std::os::fd::BorrowedFd<'static>)> {
        let mut progs = crate::bpf::program_fds(self.skel.object(), "flows");
        if let Some(d) = &self.drop_program {
            progs.extend(d.programs());
        }
        if let Some(i) = &self.iface {
            progs.extend(i.programs());
        }
        progs
    }

    fn recursion_misses(&self) -> u64 {
        crate::bpf::recursion_misses(self.skel.object())
            + self
                .drop_program
                .as_ref()
                .map_or(0, |d| d.recursion_misses())
    }

    /// Drains the flow-end ring into memory (cheap; call it every loop iteration so bursts of
    /// short connections do not fill the ring between intervals).
    pub fn consume(&mut self) {
        EndsRing::consume(&self.ring, &self.ends);
    }

    /// Ends an interval: the reader thread snapshots every flow's counters in the kernel and
    /// reads the tables; [`FlowCollector::try_part`] or [`FlowCollector::wait_part`] hand back
    /// what was active since the previous poll and what ended, in parts (`more` set on all but
    /// the last, which has the table's stats).
    pub fn request_poll(&mut self, now_ns: u64) -> Result<()> {
        // Ends drained after this are reported with the next interval.
        self.consume();
        let ends = self.ends.lock().unwrap_or_else(|e| e.into_inner()).take();
        // Interfaces that came (`--iface all`, or a named one back) are attached first.
        let (ifaces, iface_attach_failures) = match self.iface.as_mut() {
            Some(p) => {
                for w in p.refresh() {
                    crate::diag!("ebtop: warning: {w}");
                }
                (p.names(), p.attach_failures())
            }
            None => (Vec::new(), 0),
        };
        let request = PollRequest {
            now_ns,
            ends,
            ifaces,
            iface_attach_failures,
        };
        let sent = self
            .requests
            .as_ref()
            .is_some_and(|r| r.send(request).is_ok());
        if !sent {
            return Err(self.reader_failed());
        }
        self.outstanding += 1;
        Ok(())
    }

    /// Whether a requested poll has parts still to come.
    pub fn polling(&self) -> bool {
        self.outstanding > 0
    }

    /// The requested poll's next part if it is ready.
    pub fn try_part(&mut self) -> Result<Option<FlowReport>> {
        if self.outstanding == 0 {
            return Ok(None);
        }
        match self.reports.try_recv() {
            Ok(r) => Ok(Some(self.finish(r))),
            Err(mpsc::TryRecvError::Empty) => Ok(None),
            Err(mpsc::TryRecvError::Disconnected) => Err(self.reader_failed()),
        }
    }

    /// Waits for the requested poll's next part (None: no part is to come). Flow ends that
    /// come meanwhile in a burst are drained by the burst thread (`drain_bursts`).
    pub fn wait_part(&mut self) -> Result<Option<FlowReport>> {
        if self.outstanding == 0 {
            return Ok(None);
        }
        match self.reports.recv() {
            Ok(r) => Ok(Some(self.finish(r))),
            Err(_) => Err(self.reader_failed()),
        }
    }

    /// Requests a poll (the session's last interval) and hands `each` its parts in order,
    /// after those of a poll requested before and not taken (its flow ends are not lost).
    pub fn poll(
        &mut self,
        now_ns: u64,
        mut each: impl FnMut(FlowReport) -> std::io::Result<()>,
    ) -> Result<std::io::Result<()>> {
        let earlier = self.hand_on_parts(&mut each)?;
        if earlier.is_err() {
            return Ok(earlier);
        }
        self.request_poll(now_ns)?;
        self.hand_on_parts(&mut each)
    }

    /// Waits for every part still to come and hands each to `each` (its error stops it).
    fn hand_on_parts(
        &mut self,
        each: &mut impl FnMut(FlowReport) -> std::io::Result<()>,
    ) -> Result<std::io::Result<()>> {
        while let Some(part) = self.wait_part()? {
            if let Err(e) = each(part) {
                return Ok(Err(e));
            }
        }
        Ok(Ok(()))
    }

    fn finish(&mut self, mut r: FlowReport) -> FlowReport {
        if !r.more {
            self.outstanding -= 1;
            r.stats.missed_events = self.recursion_misses();
        }
        r
    }

    /// The reader thread is gone: its panic is re-raised here (a bug, reported as one).
    fn reader_failed(&mut self) -> anyhow::Error {
        self.requests = None;
        if let Some(t) = self.thread.take() {
            if let Err(p) = t.join() {
                std::panic::resume_unwind(p);
            }
        }
        anyhow!("the flow table's reader thread stopped")
    }

    /// Hands over the probes' links: dropping them detaches (live.rs detaches all probes of
    /// the session in parallel).
    pub fn links(&mut self) -> Vec<Link> {
        let mut links = std::mem::take(&mut self.links);
        if let Some(d) = &mut self.drop_program {
            links.extend(d.links());
        }
        links
    }
}

impl FlowTableReader {
    fn counters(&self) -> [u64; raw::counter::COUNT as usize] {
        let mut out = [0u64; raw::counter::COUNT as usize];
        for (i, slot) in out.iter_mut().enumerate() {
            *slot = crate::bpf::percpu_u64(&self.counters, i as u32)
                .iter()
                .sum();
        }
        out
    }

    fn selected(
        &self,
        local: &SocketAddr,
        peer: Option<&SocketAddr>,
        pid: Option<u32>,
        comm: Option<&str>,
    ) -> bool {
        self.cfg
            .filters
            .selects(local.port(), peer.map(|a| a.port()), pid, comm)
    }

    fn tcp_flow(&mut self, r: &RawFlow, now_ns: u64, ended: bool) -> TcpFlow {
        let prev = self
            .prev
            .get(r.sk)
            .copied()
            .filter(|p| p.start_ns == r.start_ns)
            .or_else(|| {
                ended
                    .then(|| self.replaced.remove(&(r.sk, r.start_ns)))
                    .flatten()
            });
        let id = match prev {
            Some(p) => p.id(),
            None => {
                self.next_id += 1;
                self.next_id - 1
            }
        };
        let local = raw::addr(r.family, &r.laddr, r.lport);
        let peer = raw::addr(r.family, &r.raddr, r.rport);
        let (mut role, mut role_inferred) = match r.role {
            raw::ROLE_CLIENT => (Some(Role::Client), false),
            raw::ROLE_SERVER => (Some(Role::Server), false),
            _ => (None, false),
        };
        if role.is_none() {
            role_inferred = true;
            role = Some(if self.owners.listens(r.lport) {
                Role::Server
            } else {
                Role::Client
            });
        }
        let (mut pid, mut comm) = if r.pid != 0 {
            (Some(r.pid), Some(raw::comm_str(&r.comm)))
        } else {
            (None, None)
        };
        if pid.is_none() {
            if let Some((_, p, c)) = self.resolved.get(&r.sk).filter(|o| o.0 == r.start_ns) {
                pid = Some(*p);
                comm = Some(c.clone());
            }
        }
        let mut inode = r.inode;
        if pid.is_none() && !ended && self.owners.names_in_kernel() {
            // Named in the kernel's entry, if the iterator ran since the table was read.
            if self.owners.unnamed_in_kernel() {
                if let Some(fresh) = self.reread(r).filter(|f| f.pid != 0) {
                    pid = Some(fresh.pid);
                    comm = Some(raw::comm_str(&fresh.comm));
                    inode = fresh.inode;
                } else {
                    // Not accepted yet, say: the next poll walks again (within its share).
                    self.owners.still_unnamed();
                }
            }
        } else if r.inode != 0 && pid.is_none() {
            // An ended flow's socket is gone from /proc: only the cache can name it.
            let hit = if ended {
                self.owners.cached(r.inode)
            } else {
                self.owners.lookup(r.inode)
            };
            if let Some((p, c)) = hit {
                let c = CompactString::from(c);
                if !ended {
                    self.resolved.insert(r.sk, (r.start_ns, p, c.clone()));
                }
                pid = Some(p);
                comm = Some(c);
            }
        }
        let p = prev.unwrap_or(Prev::new(id, Counters::default()));
        let (prev_out, prev_in) = p.bytes();
        let snapped = r.flags & raw::FLAG_SNAPPED != 0;
        let srtt = (snapped && r.srtt_us > 0).then_some(r.srtt_us);
        let (lo, hi) = if ended {
            // The final reading: range since the last snapshot and the final SRTT.
            let lo = if r.srtt_us > 0 {
                r.srtt_min_us.min(r.srtt_us)
            } else {
                r.srtt_min_us
            };
            (lo, r.srtt_max_us.max(r.srtt_us))
        } else {
            (r.iv_srtt_min_us, r.iv_srtt_max_us)
        };
        let end_ns = ended.then_some(r.end_ns);
        let (bytes_out, bytes_in) = payload_bytes(r, role == Some(Role::Client), ended);
        TcpFlow {
            proto: TcpProto::Tcp,
            flow_id: id,
            local,
            peer,
            role,
            role_inferred,
            preexisting: r.flags & raw::FLAG_PREEXISTING != 0,
            state: TcpState::from_kernel(r.state),
            pid,
            comm,
            sock_id: (inode != 0).then_some(inode),
            start_mono_ns: r.start_ns,
            age_ns: (r.flags & raw::FLAG_PREEXISTING == 0)
                .then(|| end_ns.unwrap_or(now_ns).saturating_sub(r.start_ns)),
            bytes_out,
            bytes_in,
            bytes_sent: r.bytes_sent,
            segs_out: r.segs_out as u64,
            segs_in: r.segs_in as u64,
            data_segs_out: r.data_segs_out as u64,
            data_segs_in: r.data_segs_in as u64,
            retrans_segs: r.total_retrans as u64,
            retrans_bytes: r.bytes_retrans,
            retrans_events: r.retrans_events as u64,
            rst_sent: r.rst_sent as u64,
            rst_received: r.rst_received as u64,
            interval_bytes_out: bytes_out.saturating_sub(prev_out),
            interval_bytes_in: bytes_in.saturating_sub(prev_in),
            interval_segs_out: u64::from(r.segs_out.saturating_sub(p.segs_out)),
            interval_segs_in: u64::from(r.segs_in.saturating_sub(p.segs_in)),
            interval_retrans_segs: u64::from(r.total_retrans.saturating_sub(p.retrans)),
            srtt_us: srtt,
            srtt_min_us: (lo != u32::MAX && lo > 0).then_some(lo),
            srtt_max_us: (hi > 0).then_some(hi),
            legacy_srtt_us: None,
            legacy_srtt_min_us: None,
            legacy_srtt_max_us: None,
            connect_latency_ns: (r.role == raw::ROLE_CLIENT
                && r.syn_ns > 0
                && r.established_ns >= r.syn_ns)
                .then(|| r.established_ns - r.syn_ns),
            end_mono_ns: end_ns,
            duration_ns: end_ns.map(|e| e.saturating_sub(r.start_ns)),
            close_reason: ended.then(|| close_reason(r)),
            close_state: ended.then(|| TcpState::from_kernel(r.close_state)),
            sk_err: (ended && r.sk_err != 0).then_some(r.sk_err),
            l7: None,
            tls: false,
            drops: None,
        }
    }

    /// `EBTOP_DEBUG_FLOW_MEMORY=1`: the reader's structures after a poll, on stderr.
    fn print_memory(&self, last_part: usize) {
        eprintln!(
            "flow memory: poll {} prev {} flows {} B, replaced {}, resolved {}, udp {}, \
             last part {} flows of {} B",
            self.polls,
            self.prev.len(),
            self.prev.allocated_bytes(),
            self.replaced.len(),
            self.resolved.len(),
            self.udp_prev.len(),
            last_part,
            std::mem::size_of::<TcpFlow>(),
        );
    }

    /// Whether drops wait for a UDP pair (reported for them though its counters are as
    /// they were).
    fn udp_drops_wait(&self, key: &RawUdpKey, u: &RawUdp) -> bool {
        let Some(d) = &self.drops else {
            return false;
        };
        if key.family == 0 {
            return false;
        }
        let local = raw::addr(u.family, &u.laddr, u.lport);
        let peer = raw::addr(key.family, &key.raddr, key.rport);
        d.has_pending(17, local, peer)
    }

    /// A flow's drops as reported now (its report's `drops`); an ended flow's are forgotten.
    fn flow_drops(
        &mut self,
        flow_id: u64,
        proto: u8,
        (local, peer): (SocketAddr, SocketAddr),
        owner: (Option<u32>, Option<&str>),
        ended: bool,
    ) -> Option<crate::flows::drops::FlowDrops> {
        let d = self.drops.as_mut()?;
        let got = d.claim(drops::FlowAt {
            flow_id,
            proto,
            local,
            peer,
            pid: owner.0,
            comm: owner.1,
        });
        if ended {
            d.forget(flow_id);
        }
        Some(got)
    }

    /// One flow's entry as read from the table: reported if its counters moved since its last
    /// report (or it is new).
    fn read_flow(&mut self, v: &[u8], now_ns: u64, parts: &mut Parts<'_>) {
        let Some(r) = RawFlow::decode(v) else {
            return;
        };
        let prev = match self.prev.get_mut(r.sk) {
            Some(p) if p.start_ns == r.start_ns => {
                p.seen = self.polls as u32;
                Some(*p)
            }
            _ => None,
        };
        let rst = r.rst_sent.wrapping_add(r.rst_received);
        let changed = match prev {
            None => true,
            Some(p) => {
                p.raw_out != r.bytes_acked
                    || p.raw_in != r.bytes_received
                    || p.segs_out != r.segs_out
                    || p.segs_in != r.segs_in
                    || p.retrans_events != r.retrans_events
                    || p.rst != rst
            }
        };
        if !changed {
            return;
        }
        let mut f = self.tcp_flow(&r, now_ns, false);
        let owner = (f.pid, f.comm.as_deref());
        f.drops = self.flow_drops(f.flow_id, 6, (f.local, f.peer), owner, false);
        let earlier = self.prev.insert(
            r.sk,
            Prev::new(
                f.flow_id,
                Counters {
                    seen: self.polls as u32,
                    start_ns: r.start_ns,
                    raw_out: r.bytes_acked,
                    raw_in: r.bytes_received,
                    bytes_out: f.bytes_out,
                    bytes_in: f.bytes_in,
                    segs_out: r.segs_out,
                    segs_in: r.segs_in,
                    retrans: r.total_retrans,
                    retrans_events: r.retrans_events,
                    rst,
                },
            ),
        );
        // Another flow's counters at this address: its end has not come yet.
        if let Some(p) = earlier.filter(|p| p.start_ns != r.start_ns) {
            self.replaced.insert((r.sk, p.start_ns), p);
        }
        if self.selected(&f.local, Some(&f.peer), f.pid, f.comm.as_deref()) {
            parts.tcp(f);
        }
    }

    /// One flow-end record: the flow's last report; its address forgotten unless a newer
    /// flow has it.
    fn end_flow(&mut self, r: &RawFlow, now_ns: u64, parts: &mut Parts<'_>) {
        let mut f = self.tcp_flow(r, now_ns, true);
        let owner = (f.pid, f.comm.as_deref());
        f.drops = self.flow_drops(f.flow_id, 6, (f.local, f.peer), owner, true);
        // Unless the address is already a newer flow's.
        if self
            .prev
            .get(r.sk)
            .is_some_and(|p| p.start_ns == r.start_ns)
        {
            self.prev.remove(r.sk);
        }
        if self.resolved.get(&r.sk).is_some_and(|o| o.0 == r.start_ns) {
            self.resolved.remove(&r.sk);
        }
        if self.selected(&f.local, Some(&f.peer), f.pid, f.comm.as_deref()) {
            parts.end(f);
        }
    }

    /// The table's entry for the same flow as `r` now (None: gone, or another flow since).
    fn reread(&self, r: &RawFlow) -> Option<RawFlow> {
        let v = self
            .flows
            .lookup(&r.sk.to_ne_bytes(), MapFlags::ANY)
            .ok()
            .flatten()?;
        RawFlow::decode(&v).filter(|fresh| fresh.start_ns == r.start_ns)
    }

    /// Ends an interval: snapshots every flow's counters in the kernel, reads the tables and
    /// hands `parts` what was active since the previous poll and what ended. False if the
    /// parts' receiver is gone.
    fn poll(
        &mut self,
        ends: EndsBuf,
        reads: Option<&FlowReads<'_>>,
        ifaces: &(Vec<(u32, CompactString)>, u64),
        mut parts: Parts<'_>,
    ) -> bool {
        let t0 = std::time::Instant::now();
        let now_ns = parts.part.mono_ns;
        self.polls += 1;
        // Owners first: the snapshot copies entries as they are then.
        self.owners.begin_poll();
        // The snapshot copies tcp_sock counters into the entries of the flows that may have
        // changed (every one at times), and copies those entries to the `flow_reads` ring.
        let all = reads.is_none()
            || self.polls % FULL_READ_EVERY == 1
            || self.polls < self.whole_reads_until;
        let snapped = run_snapshot(self.snapshot.as_fd(), all);
        // Drops before any flow is reported: each flow takes those at its addresses.
        if let Some(d) = &mut self.drops {
            d.begin(now_ns);
        }
        let mut tcp_count = snapped.map_or(0, |n| u64::from(n & 0x7fff_ffff));
        // The ring had no room, or the snapshot did not run: the table is read whole. After
        // a full ring, so are the next polls for a while (more flows change per interval than
        // the ring holds: copying them to it would be work thrown away).
        let reads_lost = snapped.is_none_or(|n| n & 0x8000_0000 != 0);
        if reads_lost && !all {
            self.whole_reads_until = self.polls + FULL_READ_EVERY;
        }
        // Ended flows first: a socket address can be reused by a new flow at once. Each chunk
        // of records is freed once read.
        ends.read(|r| self.end_flow(r, now_ns, &mut parts));

        let flow_len = self.flows.value_size() as usize;
        match reads {
            Some(reads) if !all && !reads_lost => {
                while reads.next_batch(READS_PER_BATCH) {
                    let read = reads.take();
                    for v in read.chunks_exact(flow_len) {
                        self.read_flow(v, now_ns, &mut parts);
                    }
                    reads.give_back(read);
                }
            }
            _ => {
                if let Some(reads) = reads {
                    reads.discard();
                }
                let mut batches = crate::bpf::HashMapBatches::with_buffers(
                    &self.flows,
                    4096,
                    std::mem::take(&mut self.batch_buffers),
                );
                let mut read = 0;
                while let Some((_, values)) = batches.next_batch() {
                    for v in values.chunks_exact(flow_len) {
                        self.read_flow(v, now_ns, &mut parts);
                        read += 1;
                    }
                }
                if snapped.is_none() {
                    tcp_count = read;
                }
                // Only a read that reached the table's end may forget flows it did not see.
                if all && batches.complete() {
                    // Flows gone from the table since the last whole read: their end
                    // records came meanwhile (the ring is drained on another thread; an end
                    // seen first would have found its id), unless lost.
                    let (since, now) = (self.last_whole_read, self.polls);
                    self.prev
                        .retain(|_, p| prev::seen_since(p.seen, since, now));
                    self.replaced
                        .retain(|_, p| prev::seen_since(p.seen, since, now));
                    self.resolved.retain(|sk, _| self.prev.contains_key(*sk));
                    // After a mass close: the memory back.
                    self.prev.shrink_if_sparse();
                    self.last_whole_read = self.polls;
                }
                self.batch_buffers = batches.into_buffers();
            }
        }

        // UDP pairs.
        let mut udp_count = 0u64;
        let mut expired: Vec<RawUdpKey> = Vec::new();
        let (key_len, udp_len) = (
            self.udp_flows.key_size() as usize,
            self.udp_flows.value_size() as usize,
        );
        let mut batches = crate::bpf::HashMapBatches::with_buffers(
            &self.udp_flows,
            4096,
            std::mem::take(&mut self.batch_buffers),
        );
        while let Some((keys, values)) = batches.next_batch() {
            let rows = keys.chunks_exact(key_len).zip(values.chunks_exact(udp_len));
            for (k, v) in rows {
                let (Some(key), Some(u)) = (RawUdpKey::decode(k), RawUdp::decode(v)) else {
                    continue;
                };
                udp_count += 1;
                let prev = self.udp_prev.get(&key).copied();
                let counts_unchanged = prev.is_some_and(|p| {
                    p.tx == (u.tx_dgrams, u.tx_bytes) && p.rx == (u.rx_dgrams, u.rx_bytes)
                });
                let changed_ns = match prev {
                    Some(p) if counts_unchanged => p.changed_ns,
                    _ => now_ns,
                };
                if now_ns.saturating_sub(changed_ns) > UDP_IDLE_NS {
                    expired.push(key);
                    continue;
                }
                let p = match prev {
                    Some(_) if counts_unchanged && !self.udp_drops_wait(&key, &u) => continue,
                    Some(p) => p,
                    None => {
                        self.next_id += 1;
                        UdpPrev {
                            id: self.next_id - 1,
                            tx: (0, 0),
                            rx: (0, 0),
                            changed_ns,
                        }
                    }
                };
                let local = raw::addr(u.family, &u.laddr, u.lport);
                let peer = (key.family != 0).then(|| raw::addr(key.family, &key.raddr, key.rport));
                let comm = raw::comm_str(&u.comm).into_string();
                let owner = (Some(u.pid), Some(comm.as_str()));
                let drops = match peer {
                    Some(peer) => self.flow_drops(p.id, 17, (local, peer), owner, false),
                    None => None,
                };
                let f = UdpFlow {
                    proto: "udp".into(),
                    flow_id: p.id,
                    local,
                    peer,
                    pid: u.pid,
                    comm,
                    start_mono_ns: u.first_ns,
                    dgrams_out: u.tx_dgrams,
                    dgrams_in: u.rx_dgrams,
                    bytes_out: u.tx_bytes,
                    bytes_in: u.rx_bytes,
                    interval_dgrams_out: u.tx_dgrams.saturating_sub(p.tx.0),
                    interval_dgrams_in: u.rx_dgrams.saturating_sub(p.rx.0),
                    interval_bytes_out: u.tx_bytes.saturating_sub(p.tx.1),
                    interval_bytes_in: u.rx_bytes.saturating_sub(p.rx.1),
                    l7: None,
                    drops,
                };
                self.udp_prev.insert(
                    key,
                    UdpPrev {
                        id: p.id,
                        tx: (u.tx_dgrams, u.tx_bytes),
                        rx: (u.rx_dgrams, u.rx_bytes),
                        changed_ns,
                    },
                );
                if self.selected(&f.local, f.peer.as_ref(), Some(f.pid), Some(&f.comm)) {
                    parts.udp(f);
                }
            }
        }
        self.batch_buffers = batches.into_buffers();
        for key in expired {
            let _ = self.udp_flows.delete(&key.encode());
            if let Some(p) = self.udp_prev.remove(&key) {
                if let Some(d) = &mut self.drops {
                    d.forget(p.id);
                }
            }
            self.udp_expired += 1;
            udp_count -= 1;
        }

        let c = self.counters();
        // Flows that ended after the session took this interval's ends and before the
        // counters were read are counted in `ends`: their records are read now and reported
        // with this interval (the session's last report would otherwise count an end it
        // never shows).
        // Read a bound's worth at a time (each read frees its room), until the ring is
        // empty: the ring holds 20,000 ends and the bound ~80,000 or more, but the ends
        // drained meanwhile for the next interval hold some of it.
        let (ring, buf) = self.late_ends.clone();
        for _ in 0..LATE_DRAINS {
            EndsRing::consume(&ring, &buf);
            let late = buf.lock().unwrap_or_else(|e| e.into_inner()).take();
            if late.is_empty() {
                break;
            }
            late.read(|r| self.end_flow(r, now_ns, &mut parts));
        }
        let stats = FlowStats {
            max_flows: self.cfg.max_flows as u64,
            tcp_flows: tcp_count,
            udp_flows: udp_count,
            created: c[raw::counter::CREATED as usize],
            preexisting: c[raw::counter::PREEXISTING as usize],
            table_full: c[raw::counter::TABLE_FULL as usize],
            ends: c[raw::counter::ENDS as usize],
            ends_lost: c[raw::counter::ENDS_LOST as usize],
            stale: c[raw::counter::STALE as usize],
            closes_recovered: c[raw::counter::CLOSES_RECOVERED as usize],
            udp_update_failures: c[raw::counter::UDP_FULL as usize],
            udp_expired: self.udp_expired,
            udp_peer_hooks: self.udp_peer_hooks,
            poll_ns: t0.elapsed().saturating_sub(parts.sending).as_nanos() as u64,
            // Read by the collector (it holds the programs).
            missed_events: 0,
            drops: None,
            iface: None,
        };
        let mut stats = stats;
        if let Some(d) = &mut self.drops {
            let (lines, drop_stats) = d.finish();
            parts.part.drops = lines;
            stats.drops = Some(drop_stats);
        }
        if let Some(r) = &mut self.iface {
            let read = r.read(&ifaces.0, ifaces.1);
            for f in read.flows {
                parts.iface(f);
            }
            parts.part.iface_totals = read.totals;
            stats.iface = Some(read.stats);
        }
        if crate::diag::debug_flow_memory() {
            self.print_memory(parts.part.flows.len() + parts.part.ends.len());
        }
        parts.finish(stats)
    }
}

/// Runs a program once with an empty context (BPF_PROG_TEST_RUN); a failure leaves the
/// snapshot's previous values, which the report then shows (no error path worth a line).
/// Runs the snapshot program once (BPF_PROG_TEST_RUN); `all`: every flow, not only the recent
/// ones. Its return value: the number of flows, bit 31 set if the ring of flows read was full
/// (None if the run failed).
fn run_snapshot(prog: BorrowedFd<'_>, all: bool) -> Option<u32> {
    let args: [u64; 1] = [u64::from(all)];
    // SAFETY: bpf_test_run_opts is plain data, valid zeroed with its size set; its context
    // points to `args`, which outlives the call, and the fd is a live program for the call's
    // duration.
    unsafe {
        let mut opts: libbpf_rs::libbpf_sys::bpf_test_run_opts = std::mem::zeroed();
        opts.sz = std::mem::size_of::<libbpf_rs::libbpf_sys::bpf_test_run_opts>() as _;
        opts.ctx_in = args.as_ptr().cast();
        opts.ctx_size_in = std::mem::size_of_val(&args) as _;
        if libbpf_rs::libbpf_sys::bpf_prog_test_run_opts(prog.as_raw_fd(), &mut opts) != 0 {
            return None;
        }
        Some(opts.retval)
    }
}
#[cfg(test)]
mod tests {
    use super::*;
    use crate::flows::test_reports::numbered;

    /// The reader thread's parts: full ones sent as they fill (`more`), the last with the
    /// stats; in order, nothing lost or repeated.
    #[test]
    fn a_report_is_sent_in_parts_as_they_fill() {
        let whole = numbered(5, 9_000, 1_000, 10);
        let mut sent: Vec<FlowReport> = Vec::new();
        let mut send = |p: FlowReport| {
            sent.push(p);
            true
        };
        let mut parts = Parts::new(5, &mut send);
        for f in whole.ends.iter().cloned() {
            parts.end(f);
        }
        for f in whole.flows.iter().cloned() {
            parts.tcp(f);
        }
        for f in whole.udp.iter().cloned() {
            parts.udp(f);
        }
        assert!(parts.finish(whole.stats.clone()));
        let sizes: Vec<usize> = sent
            .iter()
            .map(|p| p.flows.len() + p.ends.len() + p.udp.len())
            .collect();
        let full = 10_010 / FLOWS_PER_PART;
        let mut want = vec![FLOWS_PER_PART; full];
        want.push(10_010 - full * FLOWS_PER_PART);
        assert_eq!(sizes, want);
        let more: Vec<bool> = sent.iter().map(|p| p.more).collect();
        assert_eq!(more.iter().filter(|m| **m).count(), full);
        assert_eq!(more.last(), Some(&false));
        assert!(sent.iter().all(|p| p.mono_ns == 5));
        assert_eq!(sent[full].stats, whole.stats);
        let mut back = FlowReport {
            more: true,
            ..Default::default()
        };
        for p in sent {
            back.append_part(p);
        }
        assert_eq!(back, whole);
    }

    /// A report in flight holds at most four parts (one filling on the reader's thread, two
    /// in the channel, one the session writes): 4 MiB of flows, whatever the table holds.
    #[test]
    fn parts_in_flight_are_bounded() {
        let bytes = 4 * FLOWS_PER_PART * std::mem::size_of::<TcpFlow>();
        assert!(bytes <= 4 << 20, "{bytes}");
    }

    /// Once nobody takes the parts (the session ends), the rest are dropped, not sent.
    #[test]
    fn parts_nobody_takes_are_dropped() {
        let whole = numbered(5, 10_000, 0, 0);
        let mut offered = 0;
        let mut send = |_: FlowReport| {
            offered += 1;
            false
        };
        let mut parts = Parts::new(5, &mut send);
        for f in whole.flows {
            parts.tcp(f);
        }
        assert!(!parts.finish(FlowStats::default()));
        assert_eq!(offered, 1);
    }
}
