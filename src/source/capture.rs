//! The live capture: loads the socket-data BPF programs (the socket layer, or the syscall
//! tracepoints: `--hooks`) with the session's settings, and reads their counters. The live
//! driver (src/driver/live.rs) feeds their ring-buffer records to the pipeline.

use std::mem::MaybeUninit;
use std::os::fd::AsFd;

use anyhow::{anyhow, Context, Result};
use libbpf_rs::skel::{OpenSkel, Skel, SkelBuilder};
use libbpf_rs::MapCore as _;

use crate::bpf::counter;
use crate::bpf::sockcap::{SockcapSkel, SockcapSkelBuilder};
use crate::bpf::sockdata::{SockdataSkel, SockdataSkelBuilder};
use crate::cli::Hooks;
use crate::filters::Filters;
use crate::kernel_counters::KernelCounters;
use crate::source::process_probe::ProcessProbe;
use crate::tls::TlsProbes;

/// The sys_exit_* tracepoints each shared exit program handles (see sockdata.bpf.c).
const EXIT_ATTACHMENTS: &[(&str, &[&str])] = &[
    ("exit_buf", &["write", "sendto"]),
    ("exit_iov", &["writev"]),
    ("exit_msg", &["sendmsg"]),
    ("exit_mmsg", &["sendmmsg"]),
    ("exit_none", &["sendfile64"]),
];

#[derive(Debug, Clone)]
pub struct LiveConfig {
    pub snaplen: u32,
    /// `--copy-whole`: sends/receives of Redis, Memcached, PostgreSQL and MySQL connections up to this long are
    /// copied whole (0: never; at most `EBTOP_DEEP_MAX`).
    pub copy_whole: u32,
    /// `--ringbuf-mb`: all event rings together (None: the default, `ring_layout`).
    pub ringbuf_bytes: Option<u32>,
    pub capture_all: bool,
    pub filters: Filters,
    pub verbose: bool,
    /// Capacity of the kernel flow table (`--max-flows`).
    pub max_flows: u32,
    /// Interface flows (`--iface`): which interfaces; None without the option.
    pub ifaces: Option<crate::source::flow_table::iface::IfaceSelection>,
    /// Capacity of the interface flow table (`--max-iface-flows`).
    pub max_iface_flows: u32,
    /// Where socket data is captured (`--hooks`).
    pub hooks: Hooks,
    /// How ebtop's BPF run time is measured (`--bpf-stats`).
    pub bpf_stats: crate::aggregate::StatsMode,
    /// Load the flow table (false when no output shows flows: `--json --only` without them).
    pub flow_table: bool,
    /// `--cgroup`/`--container`, resolved: compared in the kernel.
    pub cgroups: Vec<crate::cgroups::CgroupFilter>,
    /// Probe the TLS libraries for plaintext (`--tls`; never without `capture`).
    pub tls: bool,
    /// Attach the payload capture (false when no output uses calls: `--json --only` with
    /// flow or overhead lines alone). Its object is loaded either way — the session's ring
    /// and counters — but no program of it runs; nor are process events loaded.
    pub capture: bool,
    /// Connection-tracking threads (`--threads`): with more than one, each reads its own
    /// event ring (`ring_layout`).
    pub tracking_threads: usize,
    /// Connection sampling (`--max-cpu`, `--sample`): its first control entry is written
    /// before the programs are attached; the live driver moves it.
    pub sampling: crate::source::sampling::SamplingMode,
}

/// Event rings the capture objects have (`EBTOP_MAX_SHARDS` in src/bpf/capture.h): at most
/// this many tracking threads read their own ring.
pub const MAX_SHARDS: usize = 16;

/// The event rings of a skeleton's maps (or their open counterparts), shard 0 first.
macro_rules! event_rings {
    (mut $maps:expr) => {{
        let m = &mut $maps;
        [
            &mut m.events,
            &mut m.events_1,
            &mut m.events_2,
            &mut m.events_3,
            &mut m.events_4,
            &mut m.events_5,
            &mut m.events_6,
            &mut m.events_7,
            &mut m.events_8,
            &mut m.events_9,
            &mut m.events_10,
            &mut m.events_11,
            &mut m.events_12,
            &mut m.events_13,
            &mut m.events_14,
            &mut m.events_15,
        ]
    }};
    ($maps:expr) => {{
        let m = &$maps;
        [
            &m.events,
            &m.events_1,
            &m.events_2,
            &m.events_3,
            &m.events_4,
            &m.events_5,
            &m.events_6,
            &m.events_7,
            &m.events_8,
            &m.events_9,
            &m.events_10,
            &m.events_11,
            &m.events_12,
            &m.events_13,
            &m.events_14,
            &m.events_15,
        ]
    }};
}

impl LiveConfig {
    /// The event rings in use and each one's size (`ring_layout`).
    pub fn ring_layout(&self) -> (usize, u32) {
        ring_layout(self.capture, self.tracking_threads, self.ringbuf_bytes)
    }
}

/// The event rings in use and each one's size: one ring of `--ringbuf-mb` (16 MiB by default)
/// with one tracking thread (or without the capture); with more, one per thread (up to
/// `MAX_SHARDS`), sharing `--ringbuf-mb` (each a power of two, at least 256 KiB) or, by
/// default, 8 MiB each: 2 MiB each lost 0.06% of the records of ~1M spans/s over 60 s on 16
/// cores, 8 MiB nothing (docs/performance-history.md, "Many cores II").
fn ring_layout(capture: bool, threads: usize, ringbuf_bytes: Option<u32>) -> (usize, u32) {
    const DEFAULT_ONE: u32 = 16 << 20;
    const DEFAULT_EACH: u32 = 8 << 20;
    let shards = if capture {
        threads.clamp(1, MAX_SHARDS)
    } else {
        1
    };
    match (shards, ringbuf_bytes) {
        (1, bytes) => (1, bytes.unwrap_or(DEFAULT_ONE)),
        (n, None) => (n, DEFAULT_EACH),
        (n, Some(bytes)) => {
            let each = (bytes / n as u32).max(256 * 1024);
            (n, 1 << (31 - each.leading_zeros()))
        }
    }
}

/// The loaded capture programs: the socket layer or the syscall tracepoints. Both write the
/// same records into maps of the same names, with the same settings (src/bpf/capture.h).
/// Beside the skeleton: the receive programs, loaded in parallel from a second copy of the
/// object (`load_beside`).
pub(crate) enum Capture<'obj> {
    Socket(Box<SockcapSkel<'obj>>, &'static libbpf_rs::Object),
    Syscalls(Box<SockdataSkel<'obj>>, &'static libbpf_rs::Object),
}

impl Capture<'_> {
    /// The object whose maps are the capture's (and its send programs).
    pub(crate) fn object(&self) -> &libbpf_rs::Object {
        match self {
            Capture::Socket(s, _) => s.object(),
            Capture::Syscalls(s, _) => s.object(),
        }
    }

    /// The capture's loaded programs, of both copies of its object.
    pub(crate) fn programs(&self) -> impl Iterator<Item = libbpf_rs::Program<'_>> {
        let beside = match self {
            Capture::Socket(_, b) | Capture::Syscalls(_, b) => *b,
        };
        self.object()
            .progs()
            .chain(beside.progs())
            .filter(|p| p.autoload())
    }

    pub(crate) fn events(&self) -> &libbpf_rs::Map<'_> {
        self.event_rings()[0]
    }

    /// The event rings, one per shard (`events` is shard 0; src/bpf/capture.h).
    pub(crate) fn event_rings(&self) -> [&libbpf_rs::Map<'_>; MAX_SHARDS] {
        match self {
            Capture::Socket(s, _) => event_rings!(s.maps),
            Capture::Syscalls(s, _) => event_rings!(s.maps),
        }
    }

    pub(crate) fn tls_hits(&self) -> &libbpf_rs::Map<'_> {
        match self {
            Capture::Socket(s, _) => &s.maps.tls_hits,
            Capture::Syscalls(s, _) => &s.maps.tls_hits,
        }
    }

    /// Once a Go program is probed, the capture programs look up goroutines' TLS calls too.
    pub(crate) fn enable_go_tls(&self) {
        use libbpf_rs::MapCore;
        let map = match self {
            Capture::Socket(s, _) => &s.maps.tls_go_probed,
            Capture::Syscalls(s, _) => &s.maps.tls_go_probed,
        };
        if let Err(e) = map.update(
            &0u32.to_ne_bytes(),
            &1u32.to_ne_bytes(),
            libbpf_rs::MapFlags::ANY,
        ) {
            crate::diag!("ebtop: warning: Go TLS calls will not be placed on their sockets: {e}");
        }
    }

    /// Writes the sampling control entry the capture programs read (capture.h `sample_ctl`).
    pub(crate) fn set_sampling(&self, ctl: crate::source::sampling::SampleCtl) -> Result<()> {
        let map = match self {
            Capture::Socket(s, _) => &s.maps.sample_ctl,
            Capture::Syscalls(s, _) => &s.maps.sample_ctl,
        };
        write_sampling(map, ctl)
    }

    /// Names captured connections to cut at their next request (capture.h `sample_cuts`):
    /// socket id and the direction its requests take. Entries left from an earlier call stay
    /// (the kernel deletes what it cuts; the map is an LRU).
    pub(crate) fn name_cuts(&self, cuts: &[crate::source::sampling::CutName]) -> Result<()> {
        let map = match self {
            Capture::Socket(s, _) => &s.maps.sample_cuts,
            Capture::Syscalls(s, _) => &s.maps.sample_cuts,
        };
        for c in cuts {
            map.update(
                &c.sock_id.to_ne_bytes(),
                &c.value_bytes(),
                libbpf_rs::MapFlags::ANY,
            )
            .context("naming a connection to cut at its next request failed")?;
        }
        Ok(())
    }

    pub(crate) fn counters(&self) -> &libbpf_rs::Map<'_> {
        match self {
            Capture::Socket(s, _) => &s.maps.counters,
            Capture::Syscalls(s, _) => &s.maps.counters,
        }
    }

    /// The flow table's maps, when the capture program does the flow table's per-send work.
    pub(crate) fn flow_maps(&self) -> Option<crate::source::flow_table::SharedFlowMaps<'_>> {
        match self {
            Capture::Socket(s, _) => Some(crate::source::flow_table::SharedFlowMaps {
                flows: s.maps.flows.as_fd(),
                udp_flows: s.maps.udp_flows.as_fd(),
                udp_peer: s.maps.udp_peer.as_fd(),
                udp_peer_task: s.maps.udp_peer_task.as_fd(),
                counters: s.maps.flow_counters.as_fd(),
            }),
            Capture::Syscalls(..) => None,
        }
    }

    /// As the `meta` line names it.
    pub(crate) fn hooks(&self) -> &'static str {
        match self {
            Capture::Socket(..) => "socket",
            Capture::Syscalls(..) => "syscalls",
        }
    }
}

/// How many bytes a CPU puts in a ring between two looks at how full it is (`query_every_bytes`
/// in src/bpf/capture.h): all CPUs together leave at most half of `wakeup_bytes` unnoticed.
fn query_every_bytes(wakeup_bytes: u64, cpus: usize) -> u32 {
    (wakeup_bytes / (2 * cpus.max(1) as u64)).clamp(256, 64 * 1024) as u32
}

/// The settings both capture objects take before load (same rodata and map names).
macro_rules! configure_capture {
    ($open:expr, $cfg:expr) => {{
        let open = &mut $open;
        let cfg: &LiveConfig = $cfg;
        let (shards, ring_bytes) = cfg.ring_layout();
        let cpus = libbpf_rs::num_possible_cpus().context("reading the possible CPUs failed")?;
        let ro = open
            .maps
            .rodata_data
            .as_deref_mut()
            .ok_or_else(|| anyhow!("BPF object has no .rodata section"))?;
        ro.self_tgid = std::process::id();
        if let Some(pids) = &cfg.filters.pid {
            crate::bpf::set_list_filter(&mut ro.filter_tgids, &mut ro.filter_tgid_count, pids);
        }
        if let Some(ports) = &cfg.filters.port {
            crate::bpf::set_list_filter(&mut ro.filter_ports, &mut ro.filter_port_count, ports);
        }
        let protos = cfg.filters.protocols();
        if !protos.is_all() {
            // A protocol the kernel does not recognise is picked out in user space
            // (capture_all); a mask of 0 would mean "all", so an empty selection keeps a bit
            // no protocol uses.
            ro.proto_mask = protos.kernel_mask().max(1);
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
        ro.snaplen = cfg.snaplen;
        if cfg.copy_whole > cfg.snaplen {
            ro.deep_proto_mask = crate::protocols::copied_whole_kernel_mask();
            ro.deep_max = cfg.copy_whole;
        }
        ro.capture_all = cfg.capture_all;
        ro.tls_capture = cfg.tls;
        // Records of Go programs name their goroutine, for the call chains (gochain.h);
        // `EBTOP_GOROUTINES=0` leaves it out (for measuring its cost).
        ro.go_goroutines = crate::pipeline::chains_enabled()
            && std::env::var_os("EBTOP_GOROUTINES").is_none_or(|v| v != "0");
        ro.wakeup_bytes = (ring_bytes / 16) as u64;
        ro.query_every_bytes = query_every_bytes(ro.wakeup_bytes, cpus);
        ro.n_shards = shards as u32;
        // The TLS probes load apart, after the session's start (`tls_loader`).
        for mut prog in open.open_object_mut().progs_mut() {
            if crate::tls::is_tls_program(&prog.section().to_string_lossy()) {
                prog.set_autoload(false);
            }
        }
        open.maps
            .scratch_buf
            .set_max_entries(cpus as u32)
            .context("sizing the scratch map failed")?;
        // A whole copy's buffer per CPU (~290 KiB each) only when whole copies are on.
        open.maps
            .deep_buf
            .set_max_entries(if cfg.copy_whole > cfg.snaplen { cpus as u32 } else { 1 })
            .context("sizing the whole-copy map failed")?;
        // SAFETY: sysconf takes no pointer.
        let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) }.max(4096) as u32;
        for (k, ring) in event_rings!(mut open.maps).into_iter().enumerate() {
            ring.set_max_entries(if k < shards { ring_bytes } else { page })
                .context("sizing the ring buffer failed")?;
        }
    }};
}

/// Whether a capture program loads beside the others, from a second copy of the object, in
/// parallel (`load_beside`): the receive programs. The capture's verification is most of
/// ebtop's start (socket layer: two programs of ~100–250 ms each; syscall hooks: ten), and
/// the kernel verifies programs loaded by two threads at once on two CPUs.
fn loads_beside(name: &str) -> bool {
    name.starts_with("cap_recv") || name.starts_with("recv_exit")
}

/// A value handed to the thread that made it or back (`load_beside`).
struct Handed<T>(T);
// SAFETY: used for a leaked skeleton (and the descriptors of the maps it shares), which one
// thread loads and then hands to the one that started it; never used by two at once.
unsafe impl<T> Send for Handed<T> {}

/// Opens a second copy of a capture object in which only the programs `load` picks load, on
/// the first copy's maps (`maps`: every map, `.rodata` with the session's settings included,
/// is the first copy's own: the same rings, counters and per-connection state), and loads it.
/// The copy is leaked: its programs stay loaded as long as the process runs.
macro_rules! load_copy {
    ($builder:ty, $maps:expr, $load:expr, $multi_uprobes:expr) => {{
        let maps: &[(String, std::os::fd::OwnedFd)] = &$maps;
        let load: fn(&str, &str) -> bool = $load;
        let storage = Box::leak(Box::new(MaybeUninit::uninit()));
        let mut open = <$builder>::default()
            .open(storage)
            .context("opening a copy of the capture's BPF object failed")?;
        for mut prog in open.open_object_mut().progs_mut() {
            let picked = load(
                &prog.name().to_string_lossy(),
                &prog.section().to_string_lossy(),
            );
            prog.set_autoload(picked);
        }
        if $multi_uprobes {
            crate::tls::prefer_multi_links(open.open_object_mut().progs_mut());
        }
        for mut map in open.open_object_mut().maps_mut() {
            let name = map.name().to_string_lossy().into_owned();
            let (_, fd) = maps
                .iter()
                .find(|(n, _)| *n == name)
                .ok_or_else(|| anyhow!("the capture has no map {name}"))?;
            map.reuse_fd(fd.as_fd())
                .with_context(|| format!("sharing the capture's map {name} failed"))?;
        }
        anyhow::Ok(Box::leak(Box::new(open.load()?)))
    }};
}

/// Creates an opened object's maps (libbpf's `bpf_object__prepare`: all of a load but the
/// programs') and gives their descriptors by name (duplicates).
fn prepare_maps(open: &mut libbpf_rs::OpenObject) -> Result<Vec<(String, std::os::fd::OwnedFd)>> {
    use libbpf_rs::AsRawLibbpf;
    // SAFETY: the open object's own pointer; libbpf creates its maps.
    let rc =
        unsafe { libbpf_rs::libbpf_sys::bpf_object__prepare(open.as_libbpf_object().as_ptr()) };
    if rc != 0 {
        return Err(std::io::Error::from_raw_os_error(-rc).into());
    }
    open.maps()
        .map(|m| {
            let name = m.name().to_string_lossy().into_owned();
            // SAFETY: a map of the prepared object: its descriptor is open while it is.
            let fd = unsafe { libbpf_rs::libbpf_sys::bpf_map__fd(m.as_libbpf_object().as_ptr()) };
            if fd < 0 {
                return Err(anyhow!("map {name} was not created"));
            }
            // SAFETY: just checked: an open descriptor, borrowed for the duplication.
            let fd = unsafe { std::os::fd::BorrowedFd::borrow_raw(fd) }
                .try_clone_to_owned()
                .with_context(|| format!("duplicating map {name} failed"))?;
            Ok((name, fd))
        })
        .collect()
}

/// Loads an opened, configured capture object: its maps first, then in parallel its receive
/// programs (`loads_beside`, on a second copy of the object, on a thread of their own) and
/// the rest (here). `on_maps` gets the maps (by name) once they exist, before the programs
/// load: what loads on them may load meanwhile. Returns the loaded skeleton and the copy.
macro_rules! load_beside {
    ($open:expr, $builder:ty, $on_maps:expr) => {{
        let mut open = $open;
        for mut prog in open.open_object_mut().progs_mut() {
            if loads_beside(&prog.name().to_string_lossy()) {
                prog.set_autoload(false);
            }
        }
        let maps = Handed(prepare_maps(open.open_object_mut())?);
        ($on_maps)(&maps.0);
        let beside = std::thread::Builder::new()
            .name("ebtop-load".into())
            .spawn(move || {
                let maps = maps;
                load_copy!(
                    $builder,
                    maps.0,
                    |name, section| loads_beside(name) && !crate::tls::is_tls_program(section),
                    false
                )
                .map(Handed)
            })
            .context("starting a loading thread failed")?;
        let skel = open.load();
        let beside = beside
            .join()
            .map_err(|_| anyhow!("the loading thread panicked"))?;
        let (skel, beside) = (skel?, beside?.0);
        (skel, beside)
    }};
}

/// Attaches the loaded programs of a capture object (`object`), the TLS probes left out.
fn attach_capture(object: &mut libbpf_rs::Object) -> Result<Vec<libbpf_rs::Link>> {
    let mut links = Vec::new();
    for prog in object.progs_mut() {
        let name = prog.name().to_string_lossy().into_owned();
        let section = prog.section().to_string_lossy().into_owned();
        if crate::tls::is_tls_program(&section) || !prog.autoload() {
            continue; // attached to the TLS libraries (src/tls/), or not loaded here
        }
        if let Some(tp) = section.strip_prefix("tracepoint/") {
            let link = prog
                .attach()
                .map_err(|e| anyhow!("attaching probe {name} to {tp} failed: {e}"))?;
            links.push(link);
            continue;
        }
        if section.starts_with("tp_btf/") {
            if section.starts_with("tp_btf/sock_") && super::bench_length_hooks_left_out() {
                continue;
            }
            links.push(
                prog.attach()
                    .map_err(|e| anyhow!("attaching probe {name} to {section} failed: {e}"))?,
            );
            continue;
        }
        // Shared exit programs: attached to each syscall whose payload they understand.
        let exits = EXIT_ATTACHMENTS
            .iter()
            .find(|(prog_name, _)| *prog_name == name)
            .map(|(_, syscalls)| *syscalls)
            .ok_or_else(|| anyhow!("BPF program {name} has no attachment point"))?;
        for syscall in exits {
            let tp = format!("sys_exit_{syscall}");
            let link = prog
                .attach_tracepoint(libbpf_rs::TracepointCategory::Syscalls, &tp)
                .map_err(|e| anyhow!("attaching probe {name} to syscalls/{tp} failed: {e}"))?;
            links.push(link);
        }
    }
    Ok(links)
}

fn write_sampling(map: &libbpf_rs::Map<'_>, ctl: crate::source::sampling::SampleCtl) -> Result<()> {
    map.update(
        &0u32.to_ne_bytes(),
        &ctl.to_bytes(),
        libbpf_rs::MapFlags::ANY,
    )
    .context("writing the connection sampling's control entry failed")
}

/// Attaches both copies of a loaded capture (none without `capture`).
fn attach_both(
    cfg: &LiveConfig,
    first: &mut libbpf_rs::Object,
    beside: &mut libbpf_rs::Object,
) -> Result<Vec<libbpf_rs::Link>> {
    if !cfg.capture {
        return Ok(Vec::new());
    }
    let mut links = attach_capture(first)?;
    links.extend(attach_capture(beside)?);
    Ok(links)
}

/// The capture's maps by name, as they are created (before its programs load).
pub(crate) type CaptureMaps = [(String, std::os::fd::OwnedFd)];

/// Loads and attaches the socket-layer capture (sockcap.bpf.c: tp_btf only); `on_maps` as
/// `load_beside`'s.
fn load_socket_layer<'obj>(
    cfg: &LiveConfig,
    storage: &'obj mut MaybeUninit<libbpf_rs::OpenObject>,
    on_maps: &mut dyn FnMut(&CaptureMaps),
) -> Result<(Capture<'obj>, Vec<libbpf_rs::Link>)> {
    let mut open = SockcapSkelBuilder::default()
        .open(storage)
        .context("opening the socket-layer BPF object failed")?;
    configure_capture!(open, cfg);
    // The flow table's per-send work runs in the capture program, on the flow table's maps
    // (handed to the flow collector after load): one program per send or receive, not two.
    open.maps
        .flows
        .set_max_entries(cfg.max_flows.max(1))
        .context("sizing the flow table failed")?;
    let peer_in_task = crate::source::flow_table::peer_stash_in_task();
    if peer_in_task {
        open.maps
            .udp_peer
            .set_max_entries(1)
            .context("sizing the UDP peer hash failed")?;
    }
    let rodata = open
        .maps
        .rodata_data
        .as_deref_mut()
        .ok_or_else(|| anyhow!("BPF object has no .rodata section"))?;
    rodata.count_flows = cfg.flow_table && cfg.capture;
    rodata.peer_stash_in_task = peer_in_task;
    #[cfg(feature = "bench-cuts")]
    if let Some(rodata) = open.maps.rodata_data.as_deref_mut() {
        rodata.bench_cut = super::bench_cuts::kernel_cut();
    }
    let loaded = (|| Ok(load_beside!(open, SockcapSkelBuilder, on_maps)))();
    let (mut skel, beside) = loaded.map_err(|e: anyhow::Error| {
        anyhow!(
            "loading the socket-layer programs failed: {e:#} (needs tp_btf sock_send_length, \
             Linux >= 6.3 with BTF; --hooks syscalls works on older kernels)"
        )
    })?;
    write_sampling(
        &skel.maps.sample_ctl,
        crate::source::sampling::Sampler::new(cfg.sampling).ctl(),
    )?;
    let links = attach_both(cfg, skel.object_mut(), beside.object_mut())?;
    Ok((Capture::Socket(Box::new(skel), beside.object()), links))
}

/// Loads and attaches the syscall-tracepoint capture (sockdata.bpf.c).
fn load_syscall_hooks<'obj>(
    cfg: &LiveConfig,
    storage: &'obj mut MaybeUninit<libbpf_rs::OpenObject>,
) -> Result<(Capture<'obj>, Vec<libbpf_rs::Link>)> {
    let mut open = SockdataSkelBuilder::default()
        .open(storage)
        .context("opening the BPF object failed")?;
    configure_capture!(open, cfg);
    let loaded = (|| {
        Ok(load_beside!(
            open,
            SockdataSkelBuilder,
            |_: &CaptureMaps| {}
        ))
    })();
    let (mut skel, beside) = loaded.map_err(|e: anyhow::Error| {
        anyhow!(
            "loading the BPF programs failed: {e:#} (a kernel ≥ 5.8 with BTF is needed; \
             run with --verbose for the verifier's log)"
        )
    })?;
    write_sampling(
        &skel.maps.sample_ctl,
        crate::source::sampling::Sampler::new(cfg.sampling).ctl(),
    )?;
    let links = attach_both(cfg, skel.object_mut(), beside.object_mut())?;
    Ok((Capture::Syscalls(Box::new(skel), beside.object()), links))
}

/// Loads the TLS programs of the capture's object: a third copy of it on its maps
/// (`load_copy`). Their verification is the longest part of the load after the capture's
/// own: done on the TLS lookout's thread after `meta`, it no longer holds up the start, and
/// nothing is probed before the lookout finds files anyway.
macro_rules! load_tls_half {
    ($builder:ty, $maps:expr) => {{
        let skel = load_copy!(
            $builder,
            $maps,
            |_, section| crate::tls::is_tls_program(section),
            true
        )
        .context("loading the TLS programs failed")?;
        let object: &'static libbpf_rs::Object = skel.object();
        let progs: Vec<libbpf_rs::Program<'static>> =
            object.progs().filter(|p| p.autoload()).collect();
        let fds = progs
            .iter()
            .map(|p| {
                let fd = p.as_fd();
                // SAFETY: the object is leaked: its program descriptors stay open as long as
                // the process.
                let fd = unsafe {
                    std::os::fd::BorrowedFd::borrow_raw(std::os::fd::AsRawFd::as_raw_fd(&fd))
                };
                (p.name().to_string_lossy().into_owned(), fd)
            })
            .collect();
        Ok((crate::tls::TlsPrograms::of(&progs), fds))
    }};
}

/// What loads the TLS programs of `capture` (see `load_tls_half`), on the lookout's thread.
pub(crate) fn tls_loader(capture: &Capture) -> Result<crate::tls::ProgramLoader> {
    // Duplicates of the maps' descriptors: the thread holds its own (closed once loaded).
    let maps = capture
        .object()
        .maps()
        .map(|m| {
            let name = m.name().to_string_lossy().into_owned();
            let fd = m
                .as_fd()
                .try_clone_to_owned()
                .with_context(|| format!("duplicating map {name} failed"))?;
            Ok((name, fd))
        })
        .collect::<Result<Vec<_>>>()?;
    Ok(match capture {
        Capture::Socket(..) => Box::new(move || load_tls_half!(SockcapSkelBuilder, maps)),
        Capture::Syscalls(..) => Box::new(move || load_tls_half!(SockdataSkelBuilder, maps)),
    })
}

/// Loads and attaches the capture programs `--hooks` asks for. `on_socket_maps` gets the
/// socket layer's maps as soon as they exist (the flow table loads on some of them meanwhile);
/// it is not called for the syscall hooks, and may be called for a socket layer the kernel
/// then refuses.
pub(crate) fn load_capture<'obj>(
    cfg: &LiveConfig,
    socket_storage: &'obj mut MaybeUninit<libbpf_rs::OpenObject>,
    syscall_storage: &'obj mut MaybeUninit<libbpf_rs::OpenObject>,
    on_socket_maps: &mut dyn FnMut(&CaptureMaps),
) -> Result<(Capture<'obj>, Vec<libbpf_rs::Link>)> {
    Ok(match cfg.hooks {
        Hooks::Socket => load_socket_layer(cfg, socket_storage, on_socket_maps)?,
        Hooks::Syscalls => load_syscall_hooks(cfg, syscall_storage)?,
        // Probing is loading: a kernel without the socket-layer tracepoints (< 6.3) or their
        // BTF refuses the programs, and the syscall hooks take over.
        Hooks::Auto => match load_socket_layer(cfg, socket_storage, on_socket_maps) {
            Ok(c) => c,
            Err(e) => {
                if cfg.verbose {
                    crate::diag!("ebtop: socket-layer capture unavailable ({e:#}): syscall hooks");
                }
                load_syscall_hooks(cfg, syscall_storage)?
            }
        },
    })
}

pub(crate) fn quiet_libbpf(verbose: bool) {
    if verbose {
        libbpf_rs::set_print(Some((libbpf_rs::PrintLevel::Info, |_lvl, msg: String| {
            use std::io::Write as _;
            let _ = write!(std::io::stderr(), "{msg}");
        })));
    } else {
        libbpf_rs::set_print(None);
    }
}

pub(crate) fn read_counters(
    capture: &Capture,
    procs: Option<&ProcessProbe>,
    tls: Option<&TlsProbes>,
) -> KernelCounters {
    let sum = |idx: u32| -> (u64, Vec<u64>) {
        let per_cpu = crate::bpf::percpu_u64(capture.counters(), idx);
        (per_cpu.iter().sum(), per_cpu)
    };
    let (lost, lost_per_cpu) = sum(counter::LOST);
    let shed_fast = sum(counter::SHED_FAST).0;
    let (proc_events, proc_lost) = procs.map_or((0, 0), ProcessProbe::counters);
    let (tls_probe_hits, tls_probe_stepped_hits) =
        tls.map_or_else(Default::default, |t| t.hits_since_start(capture.tls_hits()));
    KernelCounters {
        events: sum(counter::EVENTS).0,
        lost,
        lost_bytes: sum(counter::LOST_BYTES).0,
        skipped_unknown_proto: sum(counter::SKIPPED_UNKNOWN).0,
        skipped_unknown_bytes: sum(counter::SKIPPED_BYTES).0,
        skipped_unexamined: sum(counter::SKIPPED_UNEXAMINED).0,
        inflight_full: sum(counter::INFLIGHT_FULL).0,
        socket_syscalls: sum(counter::SOCK_SYSCALLS).0 + shed_fast,
        truncated: sum(counter::TRUNCATED).0,
        lost_per_cpu,
        proc_events,
        proc_lost,
        missed_runs: crate::bpf::recursion_misses_of(capture.programs().map(|p| {
            let fd = p.as_fd();
            // SAFETY: the program's descriptor, open while `capture` lives (this call).
            unsafe { std::os::fd::BorrowedFd::borrow_raw(std::os::fd::AsRawFd::as_raw_fd(&fd)) }
        })) + procs.map_or(0, ProcessProbe::missed_runs)
            + tls.map_or(0, TlsProbes::missed_runs),
        tls_cipher_events: sum(counter::TLS_CIPHER).0,
        tls_cipher_bytes: sum(counter::TLS_CIPHER_BYTES).0,
        tls_calls: sum(counter::TLS_CALLS).0,
        tls_no_socket: sum(counter::TLS_NO_SOCKET).0,
        tls_no_socket_bytes: sum(counter::TLS_NO_SOCKET_BYTES).0,
        tls_membio_bound: sum(counter::TLS_MEMBIO_BOUND).0,
        tls_membio_reused: sum(counter::TLS_MEMBIO_REUSED).0,
        copied_whole: sum(counter::DEEP).0,
        copied_whole_bytes: sum(counter::DEEP_BYTES).0,
        not_copied_whole: sum(counter::DEEP_CUT).0,
        shed_runs: sum(counter::SHED_RUNS).0 + shed_fast,
        shed_connections: sum(counter::SHED_CONNS).0,
        kept_connections: sum(counter::KEPT_CONNS).0,
        tls_shed_calls: sum(counter::TLS_SHED).0,
        cut_connections: sum(counter::CUT_CONNS).0,
        rejoined_connections: sum(counter::REJOINED_CONNS).0,
        // The live driver sets it from what it wrote (the kernel does not say).
        sample_keep_ppm: None,
        tls_files_probed: tls.map_or(0, |t| t.status().files.len() as u64),
        tls_probe_failures: tls.map_or(0, |t| t.status().failures.len() as u64),
        tls_probe_hits,
        tls_probe_stepped_hits,
        tls_probe_hit_ns: tls.and_then(|t| t.hit_ns),
        tls_probe_stepped_hit_ns: tls.and_then(|t| t.stepped_hit_ns),
    }
}

/// Detaching waits for an RCU grace period per tracepoint; in parallel threads the kernel
/// overlaps part of it (measured here: 2.2 s sequential, 1.2 s parallel for 29 links).
pub(crate) fn detach_all(links: Vec<libbpf_rs::Link>) {
    std::thread::scope(|scope| {
        for link in links {
            scope.spawn(move || drop(link));
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rings_are_asked_how_full_they_are_often_enough_and_rarely() {
        // One 16 MiB ring (1 MiB wakeups) on 2 CPUs: 256 KiB each, held to 64 KiB.
        assert_eq!(query_every_bytes(1 << 20, 2), 64 * 1024);
        // 8 MiB rings on 16 CPUs: all CPUs together leave at most half of 512 KiB unnoticed.
        let q = query_every_bytes(512 << 10, 16);
        assert_eq!(q, 16 * 1024);
        assert!(u64::from(q) * 16 <= (512 << 10) / 2);
        // The smallest ring (256 KiB, 16 KiB wakeups) on many CPUs: asked every few records.
        assert_eq!(query_every_bytes(16 << 10, 256), 256);
        assert_eq!(query_every_bytes(0, 0), 256);
    }

    #[test]
    fn each_tracking_thread_gets_a_ring_of_a_power_of_two_bytes() {
        const MIB: u32 = 1 << 20;
        assert_eq!(ring_layout(true, 1, None), (1, 16 * MIB));
        assert_eq!(ring_layout(true, 1, Some(4 * MIB)), (1, 4 * MIB));
        assert_eq!(ring_layout(true, 8, None), (8, 8 * MIB));
        // A given size is shared out, rounded down to a power of two, at least 256 KiB.
        assert_eq!(ring_layout(true, 3, Some(16 * MIB)), (3, 4 * MIB));
        assert_eq!(ring_layout(true, 16, Some(MIB)), (16, 256 * 1024));
        // More threads than rings: at most MAX_SHARDS rings; without the capture, one.
        assert_eq!(ring_layout(true, 64, None).0, MAX_SHARDS);
        assert_eq!(ring_layout(false, 8, None), (1, 16 * MIB));
    }
}
