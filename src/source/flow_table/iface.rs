//! Interface flows (`--iface NAME|all`): src/bpf/ifaceflows.bpf.c's tcx programs attached to
//! interfaces of ebtop's network namespace (a clsact filter where the kernel has no tcx), and
//! the per-interval read of their per-CPU tables on the flow table's reader thread (data:
//! src/flows/iface.rs; design: docs/architecture.md, "Interface flows").
//!
//! The kernel counts into one of two tables; each interval the reader points the programs at
//! the other one — the update returns once no program can still be counting into the old one
//! — and then reads and empties the old one alone: exact, with no increment lost between a
//! read and a delete, and the kernel's memory bounded by one interval's flows.

use std::collections::BTreeMap;
use std::mem::MaybeUninit;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::os::fd::AsFd;

use anyhow::{anyhow, bail, Context, Result};
use compact_str::CompactString;
use libbpf_rs::skel::{OpenSkel, Skel, SkelBuilder};
use libbpf_rs::{MapCore, MapFlags, MapHandle, TcHookBuilder, TC_EGRESS, TC_INGRESS};
use rustc_hash::FxHashMap;

use crate::bpf::ifaceflows::{IfaceflowsSkel, IfaceflowsSkelBuilder};
use crate::flows::iface::{
    ethertype_name, ip_proto_name, IfaceCount, IfaceDir, IfaceFlow, IfaceStats, IfaceTotal,
};

/// `struct ebtop_iface_key` and `struct ebtop_iface_count` (ifaceflows.bpf.c).
pub const KEY_LEN: usize = 48;
pub const COUNT_LEN: usize = 32;

/// Default size of one interval's table (5-tuples per interface direction, all together).
pub const DEFAULT_MAX_IFACE_FLOWS: u32 = 65_536;

/// Interfaces `all` attaches to at most (a host with more is counted on the first ones).
const MAX_IFACES: usize = 1024;

/// Entries read per batch.
const BATCH: usize = 4096;

/// The clsact filter's handle and priority: ebtop's own, so a filter a killed ebtop left
/// behind is found (and replaced) by the next one.
const TC_HANDLE: u32 = 0xeb70;
const TC_PRIORITY: u32 = 0xeb70;

/// What `--iface` names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum IfaceSelection {
    /// Every interface of ebtop's network namespace, including ones that appear later.
    All,
    /// These, by name; one that goes away is attached again when it comes back.
    Named(Vec<String>),
}

impl IfaceSelection {
    /// From `--iface` values (each a name, a comma-separated list, or `all`).
    pub fn parse(values: &[String]) -> Result<Option<IfaceSelection>> {
        let mut names = Vec::new();
        for v in values {
            for n in v.split(',').map(str::trim).filter(|n| !n.is_empty()) {
                if n == "all" {
                    return Ok(Some(IfaceSelection::All));
                }
                if n.len() >= libc::IF_NAMESIZE || n.contains('/') {
                    bail!("--iface {n:?}: not an interface name");
                }
                if !names.iter().any(|m| m == n) {
                    names.push(n.to_string());
                }
            }
        }
        Ok((!names.is_empty()).then_some(IfaceSelection::Named(names)))
    }
}

/// How the programs are attached.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum AttachMode {
    Tcx,
    Clsact,
}

/// An interface the programs are attached to.
struct Attached {
    name: CompactString,
    /// tcx links (detached when dropped, or when the process ends however it ends).
    _links: Vec<libbpf_rs::Link>,
    /// clsact filters (ingress, egress): detached when dropped; a filter outlives a killed
    /// process, so the next ebtop replaces it (same handle and priority).
    hooks: Vec<libbpf_rs::TcHook>,
}

impl Drop for Attached {
    fn drop(&mut self) {
        for h in &mut self.hooks {
            let _ = h.detach();
        }
    }
}

/// An interface of this network namespace: index, name, and whether frames on it begin with
/// an Ethernet header (ARPHRD_ETHER, loopback) or with the IP header (tun, WireGuard, ipip).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Interface {
    pub ifindex: u32,
    pub name: CompactString,
    pub l2: bool,
}

/// The interfaces of ebtop's network namespace (at most [`MAX_IFACES`]); those whose link
/// type has no header this can read are left out.
pub fn interfaces() -> Vec<Interface> {
    let mut out = Vec::new();
    // SAFETY: if_nameindex returns an array ended by a zero entry (or NULL), freed below
    // with if_freenameindex and not used after.
    unsafe {
        let list = libc::if_nameindex();
        if list.is_null() {
            return out;
        }
        let mut p = list;
        while (*p).if_index != 0 && !(*p).if_name.is_null() && out.len() < MAX_IFACES {
            let name = std::ffi::CStr::from_ptr((*p).if_name).to_string_lossy();
            if let Some(l2) = link_has_l2(&name) {
                out.push(Interface {
                    ifindex: (*p).if_index,
                    name: name.as_ref().into(),
                    l2,
                });
            }
            p = p.add(1);
        }
        libc::if_freenameindex(list);
    }
    out
}

/// Whether an interface's frames start with an Ethernet header (`/sys/class/net/NAME/type`:
/// 1 Ethernet, 772 loopback) or with IP (65534 none: tun, WireGuard; 768 ipip; 769 ip6tnl;
/// 776 sit; 778 gre); None for another link type (not counted).
fn link_has_l2(name: &str) -> Option<bool> {
    if name.contains('/') || name.starts_with('.') {
        return None;
    }
    let ty = std::fs::read_to_string(format!("/sys/class/net/{name}/type")).ok()?;
    match ty.trim().parse::<u32>().ok()? {
        1 | 772 => Some(true),
        65534 | 768 | 769 | 776 | 778 => Some(false),
        _ => None,
    }
}

/// The programs, loaded, and the interfaces they are attached to (the session's thread owns
/// it; the reader thread reads the maps through an [`IfaceReader`]).
pub struct IfaceProgram {
    /// Leaked: the programs live as long as the process (their links detach on drop).
    skel: &'static IfaceflowsSkel<'static>,
    selection: IfaceSelection,
    mode: AttachMode,
    attached: BTreeMap<u32, Attached>,
    max_flows: u32,
    attach_failures: u64,
    /// Interfaces a warning was written for (once each).
    warned: Vec<CompactString>,
}

impl IfaceProgram {
    /// Loads the programs and attaches them to the interfaces `selection` names now; a name
    /// that is not an interface here is an error (a typo should not run silently).
    pub fn start(selection: IfaceSelection, max_flows: u32) -> Result<IfaceProgram> {
        let storage = Box::leak(Box::new(MaybeUninit::uninit()));
        let mut open = IfaceflowsSkelBuilder::default()
            .open(storage)
            .context("opening the interface flow programs")?;
        let max_flows = max_flows.max(1);
        for m in [&mut open.maps.iface_flows_a, &mut open.maps.iface_flows_b] {
            m.set_max_entries(max_flows)
                .context("sizing the interface flow tables")?;
        }
        // The benchmark's other designs' maps: as small as the kernel takes.
        open.maps
            .iface_flows_shared
            .set_max_entries(1)
            .context("sizing the interface flow tables")?;
        let skel: &'static IfaceflowsSkel<'static> =
            Box::leak(Box::new(open.load().map_err(|e| {
                anyhow!(
                    "loading the interface flow programs (tc, Linux >= 5.1 with BTF) failed: {e}"
                )
            })?));
        let mode = match std::env::var("EBTOP_IFACE_ATTACH").as_deref() {
            // Tests only: the fallback on a kernel that has tcx.
            Ok("clsact") => AttachMode::Clsact,
            _ => AttachMode::Tcx,
        };
        let mut p = IfaceProgram {
            skel,
            selection,
            mode,
            attached: BTreeMap::new(),
            max_flows,
            attach_failures: 0,
            warned: Vec::new(),
        };
        if let IfaceSelection::Named(names) = &p.selection {
            let have = interfaces();
            for n in names {
                if !have.iter().any(|i| i.name == n.as_str()) {
                    bail!(
                        "--iface {n}: no such interface in ebtop's network namespace (`ip link` lists them)"
                    );
                }
            }
        }
        let first = p.refresh();
        if let Some(w) = first.into_iter().next() {
            if p.attached.is_empty() {
                bail!("{w}");
            }
            crate::diag!("ebtop: warning: {w}");
        }
        Ok(p)
    }

    /// Attaches to interfaces selected that appeared since, forgets the ones gone (their
    /// links went with them). Returns a warning per interface it could not attach to (once
    /// per name). Once per interval, on the session's thread.
    pub fn refresh(&mut self) -> Vec<String> {
        let now = interfaces();
        self.attached.retain(|ifindex, a| {
            now.iter()
                .any(|i| i.ifindex == *ifindex && i.name == a.name)
        });
        let mut warnings = Vec::new();
        for i in now {
            let wanted = match &self.selection {
                IfaceSelection::All => true,
                IfaceSelection::Named(names) => names.iter().any(|n| n == i.name.as_str()),
            };
            if !wanted || self.attached.contains_key(&i.ifindex) {
                continue;
            }
            match self.attach(&i) {
                Ok(a) => {
                    self.attached.insert(i.ifindex, a);
                }
                Err(e) => {
                    self.attach_failures += 1;
                    if !self.warned.contains(&i.name) {
                        self.warned.push(i.name.clone());
                        warnings.push(format!("interface {} not counted: {e:#}", i.name));
                    }
                }
            }
        }
        warnings
    }

    fn attach(&mut self, i: &Interface) -> Result<Attached> {
        let progs = &self.skel.progs;
        let (ingress, egress) = if i.l2 {
            (&progs.iface_ingress_eth, &progs.iface_egress_eth)
        } else {
            (&progs.iface_ingress_l3, &progs.iface_egress_l3)
        };
        if self.mode == AttachMode::Tcx {
            match (
                crate::bpf::attach_tcx(ingress, i.ifindex),
                crate::bpf::attach_tcx(egress, i.ifindex),
            ) {
                (Ok(a), Ok(b)) => {
                    return Ok(Attached {
                        name: i.name.clone(),
                        _links: vec![a, b],
                        hooks: Vec::new(),
                    })
                }
                // No tcx in this kernel (before 6.6): clsact from now on.
                (Err(e), _) | (_, Err(e)) if is_unsupported(&e) && self.attached.is_empty() => {
                    self.mode = AttachMode::Clsact;
                }
                (Err(e), _) | (_, Err(e)) => return Err(e),
            }
        }
        let mut hooks = Vec::new();
        for (prog, point) in [(ingress, TC_INGRESS), (egress, TC_EGRESS)] {
            let mut hook = TcHookBuilder::new(prog.as_fd())
                .ifindex(i.ifindex as i32)
                .replace(true)
                .handle(TC_HANDLE)
                .priority(TC_PRIORITY)
                .hook(point);
            // The clsact qdisc may be there already (another tool's, or ours from before).
            let _ = hook.create();
            hook.attach()
                .with_context(|| format!("attaching a clsact filter to {}", i.name))?;
            hooks.push(hook);
        }
        Ok(Attached {
            name: i.name.clone(),
            _links: Vec::new(),
            hooks,
        })
    }

    /// The interfaces counted now, for the reader's names.
    pub fn names(&self) -> Vec<(u32, CompactString)> {
        self.attached
            .iter()
            .map(|(i, a)| (*i, a.name.clone()))
            .collect()
    }

    /// The reader's handles on the maps.
    pub fn reader(&self) -> Result<IfaceReader> {
        let h = |m: &libbpf_rs::Map, what: &str| {
            MapHandle::try_from(m)
                .with_context(|| format!("opening the interface flows' {what} map"))
        };
        let maps = &self.skel.maps;
        Ok(IfaceReader {
            outer: h(&maps.iface_tables, "tables")?,
            tables: [
                h(&maps.iface_flows_a, "first table")?,
                h(&maps.iface_flows_b, "second table")?,
            ],
            overflow: h(&maps.iface_overflow, "overflow")?,
            counting: 0,
            cpus: libbpf_rs::num_possible_cpus().unwrap_or(1),
            totals: BTreeMap::new(),
            overflow_prev: FxHashMap::default(),
            unattributed_packets: 0,
            buffers: Default::default(),
            max_flows: u64::from(self.max_flows),
            attach: match self.mode {
                AttachMode::Tcx => "tcx".into(),
                AttachMode::Clsact => "clsact".into(),
            },
        })
    }

    pub fn attach_failures(&self) -> u64 {
        self.attach_failures
    }

    /// The loaded programs (name, fd), for ebtop's overhead accounting.
    pub fn programs(&self) -> Vec<(String, std::os::fd::BorrowedFd<'static>)> {
        crate::bpf::program_fds(self.skel.object(), "iface")
    }
}

fn is_unsupported(e: &anyhow::Error) -> bool {
    e.chain().any(|c| {
        c.downcast_ref::<std::io::Error>()
            .and_then(|io| io.raw_os_error())
            .is_some_and(|n| n == libc::EINVAL || n == libc::EOPNOTSUPP || n == 524 /* ENOTSUPP, the kernel's own */)
    }) || e.to_string().contains("Invalid argument")
}

/// The interval read, on the flow table's reader thread.
pub struct IfaceReader {
    outer: MapHandle,
    tables: [MapHandle; 2],
    overflow: MapHandle,
    /// The table the programs count into now.
    counting: usize,
    cpus: usize,
    /// Since the start, per interface direction (bounded by the interfaces attached).
    totals: BTreeMap<(u32, IfaceDir), IfaceCount>,
    overflow_prev: FxHashMap<(u32, u32), IfaceCount>,
    unattributed_packets: u64,
    buffers: crate::bpf::BatchBuffers,
    max_flows: u64,
    attach: CompactString,
}

/// An interval's interface flows and totals.
pub struct IfaceRead {
    pub flows: Vec<IfaceFlow>,
    pub totals: Vec<IfaceTotal>,
    pub stats: IfaceStats,
}

impl IfaceReader {
    /// Swaps the tables and reads (and empties) the one counted into until now. `names`: the
    /// interfaces attached, by index (a packet of another is not reported: it was counted on
    /// an interface detached since, whose index may be another's now).
    pub fn read(&mut self, names: &[(u32, CompactString)], attach_failures: u64) -> IfaceRead {
        let started = std::time::Instant::now();
        // Looked up per flow read: a map, not a scan of up to 1,024 interfaces each time.
        let by_index: FxHashMap<u32, &CompactString> = names.iter().map(|(i, n)| (*i, n)).collect();
        let next = 1 - self.counting;
        let fd = self.tables[next].as_fd();
        use std::os::fd::AsRawFd;
        let swapped = self
            .outer
            .update(
                &0u32.to_ne_bytes(),
                &(fd.as_raw_fd() as u32).to_ne_bytes(),
                MapFlags::ANY,
            )
            .is_ok();
        let mut flows = Vec::new();
        let mut interval: BTreeMap<(u32, IfaceDir), (IfaceCount, u64)> = BTreeMap::new();
        if swapped {
            let old = &self.tables[self.counting];
            self.counting = next;
            let mut batches = crate::bpf::HashMapBatches::with_buffers(
                old,
                BATCH,
                std::mem::take(&mut self.buffers),
            )
            .per_cpu(self.cpus)
            .deleting();
            let stride = COUNT_LEN.next_multiple_of(8) * self.cpus;
            while let Some((keys, values)) = batches.next_batch() {
                for (k, v) in keys.chunks_exact(KEY_LEN).zip(values.chunks_exact(stride)) {
                    let Some(key) = RawKey::decode(k) else {
                        continue;
                    };
                    let Some(name) = by_index.get(&key.ifindex) else {
                        continue;
                    };
                    let count = sum_percpu(v);
                    let e = interval.entry((key.ifindex, key.dir)).or_default();
                    e.0.add(&count);
                    e.1 += 1;
                    flows.push(key.flow(name, count));
                }
            }
            self.buffers = batches.into_buffers();
        }
        // What did not fit: cumulative per interface direction, the change is the interval's.
        let mut unattributed: FxHashMap<(u32, IfaceDir), IfaceCount> = FxHashMap::default();
        let stride = COUNT_LEN.next_multiple_of(8) * self.cpus;
        let mut batches = crate::bpf::HashMapBatches::new(&self.overflow, 256).per_cpu(self.cpus);
        while let Some((keys, values)) = batches.next_batch() {
            for (k, v) in keys.chunks_exact(8).zip(values.chunks_exact(stride)) {
                let ifindex = u32::from_le_bytes(k[0..4].try_into().unwrap_or_default());
                let dir_raw = u32::from_le_bytes(k[4..8].try_into().unwrap_or_default());
                let now = sum_percpu(v);
                let prev = self
                    .overflow_prev
                    .insert((ifindex, dir_raw), now)
                    .unwrap_or_default();
                let delta = IfaceCount {
                    packets: now.packets.saturating_sub(prev.packets),
                    bytes: now.bytes.saturating_sub(prev.bytes),
                    payload: now.payload.saturating_sub(prev.payload),
                };
                if delta.is_zero() || !by_index.contains_key(&ifindex) {
                    continue;
                }
                let dir = IfaceDir::from_raw(dir_raw);
                self.unattributed_packets = self.unattributed_packets.saturating_add(delta.packets);
                unattributed.entry((ifindex, dir)).or_default().add(&delta);
                interval.entry((ifindex, dir)).or_default().0.add(&delta);
            }
        }
        // Totals of interfaces no longer attached are forgotten (an index may be reused).
        self.totals.retain(|(i, _), _| by_index.contains_key(i));
        let mut totals = Vec::with_capacity(interval.len());
        for ((ifindex, dir), (count, nflows)) in interval {
            let total = self.totals.entry((ifindex, dir)).or_default();
            total.add(&count);
            totals.push(IfaceTotal {
                iface: by_index
                    .get(&ifindex)
                    .map(|n| (*n).clone())
                    .unwrap_or_default(),
                ifindex,
                dir,
                total: *total,
                interval: count,
                interval_flows: nflows,
                unattributed: unattributed.remove(&(ifindex, dir)).unwrap_or_default(),
            });
        }
        // The busiest first, as the lines are read.
        flows.sort_by(|a, b| {
            b.count
                .bytes
                .cmp(&a.count.bytes)
                .then(a.ifindex.cmp(&b.ifindex))
        });
        IfaceRead {
            flows,
            totals,
            stats: IfaceStats {
                attached: names.iter().map(|(_, n)| n.clone()).collect(),
                attach: self.attach.clone(),
                max_flows: self.max_flows,
                unattributed_packets: self.unattributed_packets,
                attach_failures,
                read_ns: started.elapsed().as_nanos() as u64,
            },
        }
    }
}

/// Sums a per-CPU `struct ebtop_iface_count` (each CPU's copy 8-byte aligned).
fn sum_percpu(values: &[u8]) -> IfaceCount {
    let mut c = IfaceCount::default();
    let u = |b: &[u8], o: usize| u64::from_le_bytes(b[o..o + 8].try_into().unwrap_or_default());
    for cpu in values.chunks_exact(COUNT_LEN.next_multiple_of(8)) {
        c.add(&IfaceCount {
            packets: u(cpu, 0),
            bytes: u(cpu, 8),
            payload: u(cpu, 16),
        });
    }
    c
}

/// A decoded `struct ebtop_iface_key`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct RawKey {
    ifindex: u32,
    dir: IfaceDir,
    family: u8,
    proto: u8,
    sport: u16,
    dport: u16,
    ethertype: u16,
    saddr: [u8; 16],
    daddr: [u8; 16],
}

impl RawKey {
    fn decode(b: &[u8]) -> Option<RawKey> {
        if b.len() < KEY_LEN {
            return None;
        }
        let u16_at = |o: usize| u16::from_le_bytes([b[o], b[o + 1]]);
        Some(RawKey {
            ifindex: u32::from_le_bytes(b[0..4].try_into().ok()?),
            dir: IfaceDir::from_raw(u32::from(b[4])),
            family: b[5],
            proto: b[6],
            sport: u16_at(8),
            dport: u16_at(10),
            ethertype: u16_at(12),
            saddr: b[16..32].try_into().ok()?,
            daddr: b[32..48].try_into().ok()?,
        })
    }

    fn addr(&self, a: &[u8; 16]) -> Option<IpAddr> {
        match self.family {
            2 => Some(IpAddr::V4(Ipv4Addr::new(a[0], a[1], a[2], a[3]))),
            10 => Some(IpAddr::V6(Ipv6Addr::from(*a))),
            _ => None,
        }
    }

    fn flow(&self, name: &CompactString, count: IfaceCount) -> IfaceFlow {
        let ip = matches!(self.family, 2 | 10);
        // Ports only where the header has them (a later fragment's are 0 and not ports).
        let ports = ip && matches!(self.proto, 6 | 17) && (self.sport, self.dport) != (0, 0);
        IfaceFlow {
            iface: name.clone(),
            ifindex: self.ifindex,
            dir: self.dir,
            proto: if ip {
                ip_proto_name(self.proto)
            } else {
                ethertype_name(self.ethertype)
            },
            src: self.addr(&self.saddr),
            dst: self.addr(&self.daddr),
            sport: ports.then_some(self.sport),
            dport: ports.then_some(self.dport),
            count,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn selection_from_the_option() {
        assert_eq!(IfaceSelection::parse(&[]).unwrap(), None);
        assert_eq!(
            IfaceSelection::parse(&["eth0,veth1".into(), "eth0".into()]).unwrap(),
            Some(IfaceSelection::Named(vec!["eth0".into(), "veth1".into()]))
        );
        assert_eq!(
            IfaceSelection::parse(&["eth0".into(), "all".into()]).unwrap(),
            Some(IfaceSelection::All)
        );
        assert!(IfaceSelection::parse(&["../etc".into()]).is_err());
        assert!(IfaceSelection::parse(&["a-very-long-name-x".into()]).is_err());
    }

    #[test]
    fn a_key_decodes_as_the_kernel_lays_it_out() {
        let mut b = [0u8; KEY_LEN];
        b[0..4].copy_from_slice(&7u32.to_le_bytes());
        b[4] = 1;
        b[5] = 2;
        b[6] = 17;
        b[8..10].copy_from_slice(&5353u16.to_le_bytes());
        b[10..12].copy_from_slice(&53u16.to_le_bytes());
        b[12..14].copy_from_slice(&0x0800u16.to_le_bytes());
        b[16..20].copy_from_slice(&[10, 0, 0, 1]);
        b[32..36].copy_from_slice(&[10, 0, 0, 2]);
        let k = RawKey::decode(&b).unwrap();
        let f = k.flow(
            &"veth0".into(),
            IfaceCount {
                packets: 3,
                bytes: 300,
                payload: 216,
            },
        );
        assert_eq!(f.dir, IfaceDir::Egress);
        assert_eq!(f.proto, "udp");
        assert_eq!(f.src, Some("10.0.0.1".parse().unwrap()));
        assert_eq!(f.dst, Some("10.0.0.2".parse().unwrap()));
        assert_eq!((f.sport, f.dport), (Some(5353), Some(53)));
        // Not IP: no addresses, the ethertype names it.
        b[5] = 0;
        b[12..14].copy_from_slice(&0x0806u16.to_le_bytes());
        let f = RawKey::decode(&b)
            .unwrap()
            .flow(&"eth0".into(), IfaceCount::default());
        assert_eq!((f.proto.as_str(), f.src, f.sport), ("arp", None, None));
        assert!(RawKey::decode(&b[..40]).is_none());
    }

    #[test]
    fn per_cpu_counts_add_up() {
        let mut v = vec![0u8; COUNT_LEN * 2];
        for (cpu, n) in [(0usize, 1u64), (1, 2)] {
            let o = cpu * COUNT_LEN;
            v[o..o + 8].copy_from_slice(&n.to_le_bytes());
            v[o + 8..o + 16].copy_from_slice(&(n * 100).to_le_bytes());
            v[o + 16..o + 24].copy_from_slice(&(n * 50).to_le_bytes());
        }
        assert_eq!(
            sum_percpu(&v),
            IfaceCount {
                packets: 3,
                bytes: 300,
                payload: 150
            }
        );
    }
}
