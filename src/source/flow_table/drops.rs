//! Packet drops, read once per interval from src/bpf/drops.bpf.c's per-CPU maps on the flow
//! table's reader thread, and joined to the table's flows by address (data:
//! src/flows/drops.rs; design: docs/architecture.md, "Packet drops").
//!
//! Reason names come from the running kernel's BTF (`enum skb_drop_reason`): the numbers
//! change between kernels, the names do not, and no table here could know a later kernel's.

use std::mem::MaybeUninit;
use std::net::SocketAddr;

use anyhow::{anyhow, Context, Result};
use compact_str::CompactString;
use libbpf_rs::skel::{OpenSkel, Skel, SkelBuilder};
use libbpf_rs::{Link, MapCore, MapHandle};
use rustc_hash::FxHashMap;

use crate::bpf::drops::{DropsSkel, DropsSkelBuilder};
use crate::flows::drops::{DropCount, DropHit, DropStats, FlowDrops, MAX_HITS};

/// `struct ebtop_drop_key`, `ebtop_drop_tuple`, `ebtop_drop_count` (drops.bpf.c).
pub const KEY_LEN: usize = 12;
pub const TUPLE_LEN: usize = 52;
pub const COUNT_LEN: usize = 32;

/// Indexes of the per-CPU `drop_counters` array.
mod counter {
    pub const UNSPECIFIED: u32 = 0;
    pub const TOTALS_FULL: u32 = 1;
    pub const TUPLES_FULL: u32 = 2;
    pub const NO_HEADERS: u32 = 3;
}

/// Per-address counts idle this long are removed from the kernel table.
const TUPLE_IDLE_NS: u64 = 60_000_000_000;

/// Polls a flow's drops wait for the flow to be reported (a dropped packet's flow is
/// usually reported in the same interval: its sender retransmits, its receiver's counters
/// move; one that is not within this many is counted unmatched).
const PENDING_POLLS: u8 = 3;

/// The kernel's names of its drop reasons.
#[derive(Debug, Clone, Default)]
pub struct ReasonNames {
    names: FxHashMap<u32, CompactString>,
}

impl ReasonNames {
    /// From an enum's members (name, value): `SKB_DROP_REASON_NO_SOCKET` → `NO_SOCKET`.
    pub fn from_members<'a>(members: impl IntoIterator<Item = (&'a str, i64)>) -> ReasonNames {
        let names = members
            .into_iter()
            .filter_map(|(name, value)| {
                let short = name.strip_prefix("SKB_DROP_REASON_").unwrap_or(name);
                Some((u32::try_from(value).ok()?, CompactString::from(short)))
            })
            .collect();
        ReasonNames { names }
    }

    /// The running kernel's (`/sys/kernel/btf/vmlinux`); None if its BTF has no
    /// `enum skb_drop_reason`.
    pub fn from_kernel() -> Option<ReasonNames> {
        let btf = libbpf_rs::btf::Btf::from_vmlinux().ok()?;
        let e: libbpf_rs::btf::types::Enum<'_> = btf.type_by_name("skb_drop_reason")?;
        let members: Vec<(String, i64)> = e
            .iter()
            .filter_map(|m| Some((m.name?.to_str()?.to_owned(), m.value)))
            .collect();
        let names = ReasonNames::from_members(members.iter().map(|(n, v)| (n.as_str(), *v)));
        (!names.names.is_empty()).then_some(names)
    }

    /// The reason's name, `reason_N` if unnamed (a subsystem's reason, or no BTF).
    pub fn name(&self, code: u32) -> CompactString {
        self.names
            .get(&code)
            .cloned()
            .unwrap_or_else(|| compact_str::format_compact!("reason_{code}"))
    }
}

/// Where a drop happened: {network namespace, interface, reason}.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct DropKey {
    pub netns: u32,
    pub ifindex: u32,
    pub reason: u32,
}

impl DropKey {
    pub fn decode(b: &[u8]) -> Option<DropKey> {
        let u = |o: usize| u32::from_le_bytes(b[o..o + 4].try_into().unwrap());
        (b.len() >= KEY_LEN).then(|| DropKey {
            netns: u(0),
            ifindex: u(4),
            reason: u(8),
        })
    }
}

/// A dropped packet's flow as its headers name it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct DropTuple {
    pub at: DropKey,
    /// 6 TCP, 17 UDP, else another protocol (ports 0).
    pub proto: u8,
    pub src: SocketAddr,
    pub dst: SocketAddr,
}

impl DropTuple {
    pub fn decode(b: &[u8]) -> Option<DropTuple> {
        if b.len() < TUPLE_LEN {
            return None;
        }
        let at = DropKey::decode(b)?;
        let family = b[12];
        let proto = b[13];
        let port = |o: usize| u16::from_le_bytes([b[o], b[o + 1]]);
        let addr = |o: usize| -> [u8; 16] { b[o..o + 16].try_into().unwrap() };
        if family != 2 && family != 10 {
            return None;
        }
        Some(DropTuple {
            at,
            proto,
            src: super::raw::addr(family, &addr(20), port(14)),
            dst: super::raw::addr(family, &addr(36), port(16)),
        })
    }
}

/// One per-CPU value: the sums over the CPUs of packets, skbs, bytes, and the latest time.
fn sum_percpu(values: &[u8]) -> (u64, u64, u64, u64) {
    let mut sum = (0u64, 0u64, 0u64, 0u64);
    for v in values.chunks_exact(COUNT_LEN) {
        let u = |o: usize| u64::from_le_bytes(v[o..o + 8].try_into().unwrap());
        sum.0 += u(0);
        sum.1 += u(8);
        sum.2 += u(16);
        sum.3 = sum.3.max(u(24));
    }
    sum
}

/// Drops at one pair of addresses not yet taken by the flows there: the flow whose local
/// address is the packets' source takes them as `out`, the one at their destination as `in`
/// (both ends may be on this host).
#[derive(Debug, Default)]
struct Pending {
    for_src: Vec<(DropKey, u64)>,
    for_dst: Vec<(DropKey, u64)>,
    /// Polls since packets last came.
    polls: u8,
}

fn add_to(v: &mut Vec<(DropKey, u64)>, at: DropKey, n: u64) {
    match v.iter_mut().find(|(key, _)| *key == at) {
        Some((_, m)) => *m += n,
        None => v.push((at, n)),
    }
}

/// The drop program, loaded and attached (leaked: one per run).
pub struct DropProgram {
    skel: &'static DropsSkel<'static>,
    links: Vec<Link>,
}

impl DropProgram {
    /// Loads and attaches tp_btf/kfree_skb. An error: the kernel has no reasons in its
    /// kfree_skb tracepoint (before 5.17), or refuses the program.
    pub fn start() -> Result<DropProgram> {
        let storage = Box::leak(Box::new(MaybeUninit::uninit()));
        let open = DropsSkelBuilder::default()
            .open(storage)
            .context("opening the drops BPF object failed")?;
        let skel = open
            .load()
            .map_err(|e| anyhow!("loading the drop counter (tp_btf/kfree_skb) failed: {e}"))?;
        let link = skel
            .progs
            .packet_drop
            .attach()
            .map_err(|e| anyhow!("attaching the drop counter to kfree_skb failed: {e}"))?;
        let skel: &'static DropsSkel<'static> = Box::leak(Box::new(skel));
        Ok(DropProgram {
            skel,
            links: vec![link],
        })
    }

    /// The reader of its maps (for the flow table's reader thread).
    pub fn tracker(&self) -> Result<DropTracker> {
        let handle = |m: &libbpf_rs::Map, what: &str| {
            MapHandle::try_from(m).with_context(|| format!("opening the drops' {what} map"))
        };
        let names = ReasonNames::from_kernel();
        Ok(DropTracker {
            totals: handle(&self.skel.maps.drop_totals, "totals")?,
            tuples: handle(&self.skel.maps.drop_tuples, "tuples")?,
            counters: handle(&self.skel.maps.drop_counters, "counters")?,
            reason_names: names.is_some(),
            join: DropJoin::new(names.unwrap_or_default()),
            own_netns: own_netns(),
            cpus: libbpf_rs::num_possible_cpus().unwrap_or(1).max(1),
            prev_totals: FxHashMap::default(),
            prev_tuples: FxHashMap::default(),
            changed: Vec::new(),
            iface_names: FxHashMap::default(),
        })
    }

    /// The loaded program (name, fd), for ebtop's overhead accounting.
    pub fn programs(&self) -> Vec<(String, std::os::fd::BorrowedFd<'static>)> {
        crate::bpf::program_fds(self.skel.object(), "drops")
    }

    /// Runs the kernel skipped (see `crate::bpf::recursion_misses`).
    pub fn recursion_misses(&self) -> u64 {
        crate::bpf::recursion_misses(self.skel.object())
    }

    /// Hands over the link: dropping it detaches.
    pub fn links(&mut self) -> Vec<Link> {
        std::mem::take(&mut self.links)
    }
}

fn own_netns() -> Option<u32> {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata(crate::procfs::self_path("ns/net"))
        .ok()
        .map(|m| m.ino() as u32)
}

/// A {namespace, interface, reason} whose count changed in the interval: totals and the
/// interval's share, (packets, bytes) each.
struct Changed {
    key: DropKey,
    total: (u64, u64),
    interval: (u64, u64),
}

/// A flow's drops as the interval's report gives them, and the flow to name in `drop` lines.
pub struct FlowAt<'a> {
    pub flow_id: u64,
    pub proto: u8,
    pub local: SocketAddr,
    pub peer: SocketAddr,
    pub pid: Option<u32>,
    pub comm: Option<&'a str>,
}

/// The join of drops to flows by address (pure: what [`DropTracker`] read goes in, flows'
/// drops and the flows each reason hit come out).
pub struct DropJoin {
    names: ReasonNames,
    /// By (protocol, source, destination).
    pending: FxHashMap<(u8, SocketAddr, SocketAddr), Pending>,
    /// Drops of each flow reported so far, by flow id (removed at its end).
    per_flow: FxHashMap<u64, FlowDrops>,
    /// The flows each key's drops hit in this interval.
    hits: FxHashMap<DropKey, Vec<DropHit>>,
}

impl DropJoin {
    pub fn new(names: ReasonNames) -> DropJoin {
        DropJoin {
            names,
            pending: FxHashMap::default(),
            per_flow: FxHashMap::default(),
            hits: FxHashMap::default(),
        }
    }

    /// `n` more packets dropped at `t`'s addresses: they wait for the flows there.
    pub fn add(&mut self, t: DropTuple, n: u64) {
        let p = self.pending.entry((t.proto, t.src, t.dst)).or_default();
        add_to(&mut p.for_src, t.at, n);
        add_to(&mut p.for_dst, t.at, n);
        p.polls = 0;
    }

    /// The drops of a flow reported in this interval: its totals with those of the pairs of
    /// addresses it is at that came since its last report.
    pub fn claim(&mut self, f: FlowAt<'_>) -> FlowDrops {
        let mut took = (0u64, 0u64);
        for (out, key) in [
            (true, (f.proto, f.local, f.peer)),
            (false, (f.proto, f.peer, f.local)),
        ] {
            let Some(p) = self.pending.get_mut(&key) else {
                continue;
            };
            let side = std::mem::take(if out { &mut p.for_src } else { &mut p.for_dst });
            if p.for_src.is_empty() && p.for_dst.is_empty() {
                self.pending.remove(&key);
            }
            if side.is_empty() {
                continue;
            }
            let entry = self.per_flow.entry(f.flow_id).or_default();
            for (at, n) in side {
                if out {
                    took.0 += n;
                } else {
                    took.1 += n;
                }
                *entry
                    .by_reason
                    .entry(self.names.name(at.reason))
                    .or_default() += n;
                let hits = self.hits.entry(at).or_default();
                match hits.iter_mut().find(|h| h.flow_id == f.flow_id) {
                    Some(h) => h.packets += n,
                    None => hits.push(DropHit {
                        flow_id: f.flow_id,
                        proto: CompactString::const_new(if f.proto == 6 { "tcp" } else { "udp" }),
                        pid: f.pid,
                        comm: f.comm.map(CompactString::from),
                        packets: n,
                    }),
                }
            }
        }
        match self.per_flow.get_mut(&f.flow_id) {
            Some(d) => {
                d.packets_out += took.0;
                d.packets_in += took.1;
                d.interval_out = took.0;
                d.interval_in = took.1;
                d.clone()
            }
            None => FlowDrops::default(),
        }
    }

    /// Whether drops at a flow's addresses wait for it (a UDP pair whose counters did not
    /// move is reported for them).
    pub fn has_pending(&self, proto: u8, local: SocketAddr, peer: SocketAddr) -> bool {
        let waits = |k, out: bool| {
            self.pending
                .get(&k)
                .is_some_and(|p: &Pending| !(if out { &p.for_src } else { &p.for_dst }).is_empty())
        };
        waits((proto, local, peer), true) || waits((proto, peer, local), false)
    }

    /// The flow ended (or expired): its drops are forgotten.
    pub fn forget(&mut self, flow_id: u64) {
        self.per_flow.remove(&flow_id);
    }

    /// The flows `key`'s drops hit in this interval, the most packets first (at most
    /// [`MAX_HITS`]).
    pub fn take_hits(&mut self, key: &DropKey) -> Vec<DropHit> {
        let mut flows = self.hits.remove(key).unwrap_or_default();
        flows.sort_by(|a, b| b.packets.cmp(&a.packets).then(a.flow_id.cmp(&b.flow_id)));
        flows.truncate(MAX_HITS);
        flows
    }

    /// Ends an interval: drops no flow took within a few polls stay unmatched.
    pub fn end_interval(&mut self) {
        self.hits.clear();
        self.pending.retain(|_, p| {
            p.polls += 1;
            p.polls < PENDING_POLLS
        });
    }
}

/// Reads the drop maps and joins them to flows (on the flow table's reader thread).
pub struct DropTracker {
    totals: MapHandle,
    tuples: MapHandle,
    counters: MapHandle,
    join: DropJoin,
    reason_names: bool,
    own_netns: Option<u32>,
    cpus: usize,
    prev_totals: FxHashMap<DropKey, (u64, u64)>,
    /// Packets per address pair as last read (the kernel's key bytes).
    prev_tuples: FxHashMap<Vec<u8>, u64>,
    /// This interval's changes.
    changed: Vec<Changed>,
    iface_names: FxHashMap<u32, Option<CompactString>>,
}

impl DropTracker {
    /// Starts an interval's report: reads the kernel's counts (a poll's first step, before any
    /// flow is reported).
    pub fn begin(&mut self, now_ns: u64) {
        self.changed.clear();
        let stride = COUNT_LEN.next_multiple_of(8) * self.cpus;
        let mut totals = crate::bpf::HashMapBatches::new(&self.totals, 1024).per_cpu(self.cpus);
        while let Some((keys, values)) = totals.next_batch() {
            for (k, v) in keys.chunks_exact(KEY_LEN).zip(values.chunks_exact(stride)) {
                let Some(key) = DropKey::decode(k) else {
                    continue;
                };
                let (packets, _, bytes, _) = sum_percpu(v);
                let prev = self.prev_totals.insert(key, (packets, bytes));
                let (p0, b0) = prev.unwrap_or((0, 0));
                if packets != p0 || prev.is_none() {
                    let delta = (packets.saturating_sub(p0), bytes.saturating_sub(b0));
                    self.changed.push(Changed {
                        key,
                        total: (packets, bytes),
                        interval: delta,
                    });
                }
            }
        }
        let mut expired: Vec<Vec<u8>> = Vec::new();
        let mut tuples = crate::bpf::HashMapBatches::new(&self.tuples, 4096).per_cpu(self.cpus);
        while let Some((keys, values)) = tuples.next_batch() {
            for (k, v) in keys
                .chunks_exact(TUPLE_LEN)
                .zip(values.chunks_exact(stride))
            {
                let (packets, _, _, last_ns) = sum_percpu(v);
                let p0 = self.prev_tuples.get(k).copied().unwrap_or(0);
                if packets == p0 {
                    if now_ns.saturating_sub(last_ns) > TUPLE_IDLE_NS {
                        expired.push(k.to_vec());
                    }
                    continue;
                }
                self.prev_tuples.insert(k.to_vec(), packets);
                let Some(t) = DropTuple::decode(k) else {
                    continue;
                };
                self.join.add(t, packets.saturating_sub(p0));
            }
        }
        for k in expired {
            let _ = self.tuples.delete(&k);
            self.prev_tuples.remove(&k);
        }
    }

    /// See [`DropJoin::claim`].
    pub fn claim(&mut self, f: FlowAt<'_>) -> FlowDrops {
        self.join.claim(f)
    }

    /// See [`DropJoin::has_pending`].
    pub fn has_pending(&self, proto: u8, local: SocketAddr, peer: SocketAddr) -> bool {
        self.join.has_pending(proto, local, peer)
    }

    /// See [`DropJoin::forget`].
    pub fn forget(&mut self, flow_id: u64) {
        self.join.forget(flow_id);
    }

    fn iface(&mut self, key: &DropKey) -> Option<CompactString> {
        if key.ifindex == 0 || self.own_netns != Some(key.netns) {
            return None;
        }
        self.iface_names
            .entry(key.ifindex)
            .or_insert_with(|| iface_name(key.ifindex))
            .clone()
    }

    /// Ends the interval's report: the `drop` lines of the keys that changed, and the
    /// counters' health.
    pub fn finish(&mut self) -> (Vec<DropCount>, DropStats) {
        let mut lines = Vec::with_capacity(self.changed.len());
        let changed = std::mem::take(&mut self.changed);
        for Changed {
            key,
            total: (packets, bytes),
            interval: (interval_packets, interval_bytes),
        } in changed
        {
            let flows = self.join.take_hits(&key);
            lines.push(DropCount {
                reason: self.join.names.name(key.reason),
                reason_code: key.reason,
                iface: self.iface(&key),
                ifindex: (key.ifindex != 0).then_some(key.ifindex),
                netns: (key.netns != 0).then_some(key.netns),
                packets,
                bytes,
                interval_packets,
                interval_bytes,
                flows,
            });
        }
        lines.sort_by(|a, b| {
            b.interval_packets
                .cmp(&a.interval_packets)
                .then(a.reason.cmp(&b.reason))
                .then(a.ifindex.cmp(&b.ifindex))
        });
        self.join.end_interval();
        let c = |i: u32| -> u64 { crate::bpf::percpu_u64(&self.counters, i).iter().sum() };
        let stats = DropStats {
            reason_names: self.reason_names,
            unspecified: c(counter::UNSPECIFIED),
            uncounted: c(counter::TOTALS_FULL),
            without_flow_table_full: c(counter::TUPLES_FULL),
            without_headers: c(counter::NO_HEADERS),
        };
        (lines, stats)
    }
}

/// An interface's name in this network namespace.
fn iface_name(ifindex: u32) -> Option<CompactString> {
    let mut buf = [0 as libc::c_char; libc::IF_NAMESIZE];
    // SAFETY: the buffer has IF_NAMESIZE bytes, as if_indextoname requires; it writes a
    // NUL-terminated name there or returns NULL.
    let p = unsafe { libc::if_indextoname(ifindex, buf.as_mut_ptr()) };
    if p.is_null() {
        return None;
    }
    // SAFETY: if_indextoname succeeded: `buf` holds a NUL-terminated string.
    let name = unsafe { std::ffi::CStr::from_ptr(buf.as_ptr()) };
    Some(CompactString::from(name.to_string_lossy()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reason_names_lose_their_prefix_and_unknown_codes_say_their_number() {
        let names = ReasonNames::from_members([
            ("SKB_NOT_DROPPED_YET", 0),
            ("SKB_DROP_REASON_NO_SOCKET", 3),
            ("SKB_DROP_REASON_TC_INGRESS", 73),
        ]);
        assert_eq!(names.name(3), "NO_SOCKET");
        assert_eq!(names.name(73), "TC_INGRESS");
        assert_eq!(names.name(0), "SKB_NOT_DROPPED_YET");
        assert_eq!(names.name(0x1_0001), "reason_65537");
        assert_eq!(ReasonNames::default().name(3), "reason_3");
    }

    #[test]
    fn a_tuple_key_decodes_as_the_kernel_lays_it_out() {
        let mut b = [0u8; TUPLE_LEN];
        b[0..4].copy_from_slice(&4026531840u32.to_le_bytes());
        b[4..8].copy_from_slice(&7u32.to_le_bytes());
        b[8..12].copy_from_slice(&73u32.to_le_bytes());
        b[12] = 2;
        b[13] = 6;
        b[14..16].copy_from_slice(&40000u16.to_le_bytes());
        b[16..18].copy_from_slice(&5201u16.to_le_bytes());
        b[20..24].copy_from_slice(&[10, 9, 0, 2]);
        b[36..40].copy_from_slice(&[10, 9, 0, 1]);
        let t = DropTuple::decode(&b).unwrap();
        assert_eq!(t.at.reason, 73);
        assert_eq!(t.at.ifindex, 7);
        assert_eq!(t.proto, 6);
        assert_eq!(t.src, "10.9.0.2:40000".parse().unwrap());
        assert_eq!(t.dst, "10.9.0.1:5201".parse().unwrap());
        b[12] = 0;
        assert!(DropTuple::decode(&b).is_none());
        assert!(DropTuple::decode(&b[..20]).is_none());
    }

    fn tuple(reason: u32, src: &str, dst: &str) -> DropTuple {
        DropTuple {
            at: DropKey {
                netns: 1,
                ifindex: 2,
                reason,
            },
            proto: 6,
            src: src.parse().unwrap(),
            dst: dst.parse().unwrap(),
        }
    }

    fn flow(id: u64, local: &str, peer: &str) -> FlowAt<'static> {
        FlowAt {
            flow_id: id,
            proto: 6,
            local: local.parse().unwrap(),
            peer: peer.parse().unwrap(),
            pid: Some(7),
            comm: Some("srv"),
        }
    }

    /// Both ends of a local connection take the same drops, the sender as `out`, the receiver
    /// as `in`, each once; totals grow, interval counts restart; a flow elsewhere takes none.
    #[test]
    fn each_end_of_a_connection_takes_its_side_of_the_drops_once() {
        let names = ReasonNames::from_members([
            ("SKB_DROP_REASON_TC_INGRESS", 73),
            ("SKB_DROP_REASON_TCP_OLD_DATA", 33),
        ]);
        let mut j = DropJoin::new(names);
        let (cli, srv) = ("10.0.0.2:40000", "10.0.0.1:80");
        j.add(tuple(73, cli, srv), 5);
        j.add(tuple(33, cli, srv), 1);
        j.add(tuple(73, srv, cli), 2);
        assert!(j.has_pending(6, srv.parse().unwrap(), cli.parse().unwrap()));
        let s = j.claim(flow(1, srv, cli));
        assert_eq!((s.packets_in, s.packets_out), (6, 2));
        assert_eq!((s.interval_in, s.interval_out), (6, 2));
        assert_eq!(s.by_reason["TC_INGRESS"], 7);
        assert_eq!(s.by_reason["TCP_OLD_DATA"], 1);
        // Taken once: the server reported again gets nothing new.
        let again = j.claim(flow(1, srv, cli));
        assert_eq!((again.packets_in, again.interval_in), (6, 0));
        let c = j.claim(flow(2, cli, srv));
        assert_eq!((c.packets_in, c.packets_out), (2, 6));
        assert!(!j.has_pending(6, cli.parse().unwrap(), srv.parse().unwrap()));
        let other = j.claim(flow(3, "10.0.0.1:81", cli));
        assert_eq!(other, FlowDrops::default());
        // The drop line's flows: the most packets first.
        let key = tuple(73, cli, srv).at;
        let hits = j.take_hits(&key);
        let ids: Vec<(u64, u64)> = hits.iter().map(|h| (h.flow_id, h.packets)).collect();
        assert_eq!(ids, vec![(1, 7), (2, 7)]);
        j.end_interval();
        // The next interval: totals go on, interval counts are the new drops.
        j.add(tuple(73, cli, srv), 3);
        let s = j.claim(flow(1, srv, cli));
        assert_eq!((s.packets_in, s.interval_in, s.interval_out), (9, 3, 0));
        j.forget(1);
        let s = j.claim(flow(1, srv, cli));
        assert_eq!(s, FlowDrops::default());
    }

    /// Drops no flow takes are let go after a few intervals (bounded memory).
    #[test]
    fn drops_no_flow_takes_are_let_go() {
        let mut j = DropJoin::new(ReasonNames::default());
        j.add(tuple(3, "10.0.0.2:1", "10.0.0.1:2"), 4);
        for _ in 0..PENDING_POLLS {
            j.end_interval();
        }
        assert!(j.pending.is_empty());
        let s = j.claim(flow(1, "10.0.0.1:2", "10.0.0.2:1"));
        assert_eq!(s, FlowDrops::default());
    }

    #[test]
    fn per_cpu_values_are_summed_and_the_latest_time_kept() {
        let mut v = vec![0u8; COUNT_LEN * 2];
        v[0..8].copy_from_slice(&3u64.to_le_bytes());
        v[24..32].copy_from_slice(&50u64.to_le_bytes());
        v[32..40].copy_from_slice(&4u64.to_le_bytes());
        v[48..56].copy_from_slice(&1000u64.to_le_bytes());
        v[56..64].copy_from_slice(&20u64.to_le_bytes());
        assert_eq!(sum_percpu(&v), (7, 0, 1000, 50));
    }
}
