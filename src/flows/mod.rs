//! The flow table's data: TCP flows (5-tuple, owner, role, state, bytes/segments each way,
//! SRTT, retransmits, resets, connect latency, close reason) and UDP (socket, peer) pairs, as
//! an interval's [`FlowReport`] (`flow`, `flow_end`, `udp_flow`, `flow_stats` lines) carries
//! them, live or from a recording. The kernel collector that makes the reports:
//! src/source/flow_table/ (design and costs: docs/architecture.md, "Flow table").

pub mod drops;
pub mod iface;
pub mod names;

use std::net::SocketAddr;

use compact_str::CompactString;
use serde::{Deserialize, Serialize};

use crate::filters::Filters;
use drops::{DropCount, DropStats, FlowDrops};
use names::{CloseReason, Role, TcpProto, TcpState};

/// Default `--max-flows`.
pub const DEFAULT_MAX_FLOWS: u32 = 262_144;

/// The L7 protocol of the calls seen per (local, peer) address pair: its name and whether
/// over TLS (the pipeline keeps it, `FlowReport::tag_l7` reads it).
pub type L7Seen = rustc_hash::FxHashMap<(SocketAddr, SocketAddr), (&'static str, bool)>;

/// One TCP flow: a `flow` line (active in the interval) or a `flow_end` line (closed).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TcpFlow {
    pub proto: TcpProto,
    /// Assigned by ebtop, unique within the session.
    pub flow_id: u64,
    pub local: SocketAddr,
    pub peer: SocketAddr,
    /// `client` (sent the SYN) or `server`; `null` if unknown.
    pub role: Option<Role>,
    /// The role was inferred (flow open before ebtop started: server if the local port listens).
    pub role_inferred: bool,
    /// Open before ebtop started: no handshake seen, counters are still since the flow began.
    pub preexisting: bool,
    pub state: TcpState,
    pub pid: Option<u32>,
    /// Inline up to 24 bytes (a task name is at most 15): no allocation per flow.
    pub comm: Option<CompactString>,
    /// Socket inode (as in /proc/PID/fd → socket:[N]); `null` before accept().
    pub sock_id: Option<u64>,
    /// Kernel (CLOCK_MONOTONIC) time the flow started (SYN) or was first seen.
    pub start_mono_ns: u64,
    /// Time since the start; None for a flow open before ebtop started (`preexisting`): its
    /// real start was not seen, and the time since ebtop first saw it would understate it.
    pub age_ns: Option<u64>,
    /// Totals since the flow started (tcp_sock counters): bytes sent and acknowledged, bytes
    /// received, segments each way (with and without data), retransmitted segments and bytes.
    pub bytes_out: u64,
    pub bytes_in: u64,
    /// Payload bytes transmitted, retransmissions included (tcp_sock bytes_sent).
    pub bytes_sent: u64,
    pub segs_out: u64,
    pub segs_in: u64,
    pub data_segs_out: u64,
    pub data_segs_in: u64,
    pub retrans_segs: u64,
    pub retrans_bytes: u64,
    /// tcp_retransmit_skb hits seen by ebtop (one per retransmitted skb, possibly several
    /// segments each); counts only from when ebtop started.
    pub retrans_events: u64,
    pub rst_sent: u64,
    pub rst_received: u64,
    /// Changes since the previous report of this flow (the whole flow if first reported).
    pub interval_bytes_out: u64,
    pub interval_bytes_in: u64,
    pub interval_segs_out: u64,
    pub interval_segs_in: u64,
    pub interval_retrans_segs: u64,
    /// Smoothed RTT at the interval's end, µs as the kernel keeps it; written (JSON lines,
    /// recordings) in ns, as every duration ebtop writes.
    #[serde(rename = "srtt_ns", with = "us_as_ns", default)]
    pub srtt_us: Option<u32>,
    /// SRTT range over the interval (every incoming segment's SRTT, tcp_probe).
    #[serde(rename = "srtt_min_ns", with = "us_as_ns", default)]
    pub srtt_min_us: Option<u32>,
    #[serde(rename = "srtt_max_ns", with = "us_as_ns", default)]
    pub srtt_max_us: Option<u32>,
    /// Recordings made before JSON schema 3 carry the SRTTs in µs under these names: read,
    /// taken over by `FlowReport::upgrade`, never written.
    #[serde(rename = "srtt_us", default, skip_serializing)]
    pub legacy_srtt_us: Option<u32>,
    #[serde(rename = "srtt_min_us", default, skip_serializing)]
    pub legacy_srtt_min_us: Option<u32>,
    #[serde(rename = "srtt_max_us", default, skip_serializing)]
    pub legacy_srtt_max_us: Option<u32>,
    /// SYN sent → ESTABLISHED (client flows that started while ebtop ran).
    pub connect_latency_ns: Option<u64>,
    /// flow_end only.
    pub end_mono_ns: Option<u64>,
    pub duration_ns: Option<u64>,
    pub close_reason: Option<CloseReason>,
    /// State the socket left for CLOSE.
    pub close_state: Option<TcpState>,
    /// Socket error at close (errno, e.g. 104 ECONNRESET, 110 ETIMEDOUT); `null` if none.
    pub sk_err: Option<i32>,
    /// The protocol of the calls seen on the flow (as `call` lines name it), and whether they
    /// were TLS plaintext; absent while no call was seen.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub l7: Option<CompactString>,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub tls: bool,
    /// The flow's packets the kernel dropped (src/flows/drops.rs); `null` where drops are not
    /// counted (the kernel refused the drop program, or a recording made without it).
    #[serde(default)]
    pub drops: Option<FlowDrops>,
}

/// One UDP (socket, peer) pair with datagrams in the interval.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct UdpFlow {
    pub proto: String,
    pub flow_id: u64,
    pub local: SocketAddr,
    /// `null`: an unconnected socket received without asking for the sender's address.
    pub peer: Option<SocketAddr>,
    pub pid: u32,
    pub comm: String,
    pub start_mono_ns: u64,
    pub dgrams_out: u64,
    pub dgrams_in: u64,
    pub bytes_out: u64,
    pub bytes_in: u64,
    pub interval_dgrams_out: u64,
    pub interval_dgrams_in: u64,
    pub interval_bytes_out: u64,
    pub interval_bytes_in: u64,
    /// As `TcpFlow::l7`: the protocol of the calls seen with this peer.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub l7: Option<String>,
    /// As `TcpFlow::drops`: this (socket, peer) pair's datagrams dropped; `null` if the peer
    /// is unknown or drops are not counted.
    #[serde(default)]
    pub drops: Option<FlowDrops>,
}

/// The flow table's own health, since the start (`flow_stats` line).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct FlowStats {
    pub max_flows: u64,
    /// TCP flows in the kernel table now.
    pub tcp_flows: u64,
    pub udp_flows: u64,
    pub created: u64,
    pub preexisting: u64,
    /// Flows not tracked because the table was at `--max-flows`.
    pub table_full: u64,
    pub ends: u64,
    /// Flow ends the ring buffer had no room for (their flow_end is missing).
    pub ends_lost: u64,
    /// Entries dropped because their socket was gone (a missed close).
    pub stale: u64,
    /// Flows whose close the kernel skipped (see `missed_events`), ended exactly from their
    /// closed socket: at its destruction, or at the next snapshot that read it.
    #[serde(default)]
    pub closes_recovered: u64,
    pub udp_update_failures: u64,
    /// UDP pairs dropped after being idle 60 s.
    pub udp_expired: u64,
    /// Peers of unconnected UDP sockets are known (cgroup sendmsg/recvmsg hooks attached).
    pub udp_peer_hooks: bool,
    /// Time the kernel snapshot and the table reads took this interval.
    pub poll_ns: u64,
    /// Probe hits the kernel skipped because the same program was already running on that
    /// CPU (bpf_prog_info.recursion_misses, all flow programs): events possibly not counted.
    pub missed_events: u64,
    /// The drop counters' health; `null` where drops are not counted.
    #[serde(default)]
    pub drops: Option<DropStats>,
    /// The interface counters' health (`--iface`); absent without it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub iface: Option<iface::IfaceStats>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct FlowReport {
    pub mono_ns: u64,
    pub flows: Vec<TcpFlow>,
    pub ends: Vec<TcpFlow>,
    pub udp: Vec<UdpFlow>,
    pub stats: FlowStats,
    /// Drops per {interface, reason} that changed in the interval (the report's last part).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub drops: Vec<DropCount>,
    /// Interface flows (`--iface`): the interval's 5-tuples per interface and direction.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub iface_flows: Vec<iface::IfaceFlow>,
    /// Interface totals (`--iface`) of the interface directions with traffic in the interval
    /// (the report's last part).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub iface_totals: Vec<iface::IfaceTotal>,
    /// This is a part of the interval's report and more parts follow: the reader thread
    /// hands a report on in parts ([`FLOWS_PER_PART`]), a recording stores it in parts
    /// ([`FlowReport::parts`]). Never set on a whole report or its last part.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub more: bool,
}

/// A part of a [`FlowReport`] as a recording stores it: the same fields, borrowed.
#[derive(Debug, Serialize)]
pub struct FlowReportPart<'a> {
    mono_ns: u64,
    flows: &'a [TcpFlow],
    ends: &'a [TcpFlow],
    udp: &'a [UdpFlow],
    stats: &'a FlowStats,
    #[serde(skip_serializing_if = "<[DropCount]>::is_empty")]
    drops: &'a [DropCount],
    #[serde(skip_serializing_if = "<[iface::IfaceFlow]>::is_empty")]
    iface_flows: &'a [iface::IfaceFlow],
    #[serde(skip_serializing_if = "<[iface::IfaceTotal]>::is_empty")]
    iface_totals: &'a [iface::IfaceTotal],
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    more: bool,
    /// Its report goes on after the interval's record (the recording's kind 7): said apart
    /// from `more` so that an older reader takes the part for the whole report.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    continued: bool,
}

/// SRTTs kept in µs (the kernel's unit) and written in ns: one unit for every duration.
mod us_as_ns {
    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(us: &Option<u32>, s: S) -> Result<S::Ok, S::Error> {
        match us {
            Some(v) => s.serialize_u64(u64::from(*v) * 1000),
            None => s.serialize_none(),
        }
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<u32>, D::Error> {
        Ok(Option::<u64>::deserialize(d)?.map(|ns| (ns / 1000).min(u64::from(u32::MAX)) as u32))
    }
}

impl FlowReport {
    /// The report in parts of at most `max` flows each (TCP, UDP, ended; at least one part),
    /// every part but the last marked `more` (the last as the report itself: it may be a
    /// part too). A recording stores a report of 200,000 flows
    /// (a burst of connections) this way: as one record it made a frame larger than a reader
    /// accepts, and held its whole JSON text in memory twice over.
    pub fn parts(&self, max: usize) -> Vec<FlowReportPart<'_>> {
        let max = max.max(1);
        let total = self.flows.len() + self.ends.len() + self.udp.len() + self.iface_flows.len();
        let part = |flows, ends, udp, more| FlowReportPart {
            mono_ns: self.mono_ns,
            flows,
            ends,
            udp,
            stats: &self.stats,
            drops: &[],
            iface_flows: &[],
            iface_totals: &[],
            more,
            continued: false,
        };
        if total <= max {
            let mut whole = part(&self.flows[..], &self.ends[..], &self.udp[..], self.more);
            whole.drops = &self.drops;
            whole.iface_flows = &self.iface_flows;
            whole.iface_totals = &self.iface_totals;
            return vec![whole];
        }
        let mut parts: Vec<FlowReportPart<'_>> = Vec::with_capacity(total.div_ceil(max) + 2);
        // In the order the JSON lines of a report are written (a replay writes the same).
        for c in self.flows.chunks(max) {
            parts.push(part(c, &[], &[], true));
        }
        for c in self.udp.chunks(max) {
            parts.push(part(&[], &[], c, true));
        }
        for c in self.ends.chunks(max) {
            parts.push(part(&[], c, &[], true));
        }
        for c in self.iface_flows.chunks(max) {
            let mut p = part(&[], &[], &[], true);
            p.iface_flows = c;
            parts.push(p);
        }
        if let Some(last) = parts.last_mut() {
            last.more = self.more;
            last.drops = &self.drops;
            last.iface_totals = &self.iface_totals;
        }
        parts
    }

    /// The report's first part as a recording stores it before the interval's record: in
    /// parts like [`FlowReport::parts`], the last one `continued` rather than `more` (the
    /// report's other parts follow the interval's record).
    pub fn first_parts(&self, max: usize) -> Vec<FlowReportPart<'_>> {
        let mut parts = self.parts(max);
        if let Some(last) = parts.last_mut() {
            last.continued = last.more;
            last.more = false;
        }
        parts
    }

    /// Appends a later part of the same interval's report (see [`FlowReport::parts`]).
    /// A report gathered from parts holds at most `record::limits::MAX_REPORT_FLOWS` flows
    /// (a recording may declare parts without end); the rest are left out.
    pub fn append_part(&mut self, mut later: FlowReport) {
        let max = crate::record::limits::MAX_REPORT_FLOWS;
        let held = |r: &FlowReport| r.flows.len() + r.ends.len() + r.udp.len();
        later.flows.truncate(max.saturating_sub(held(self)));
        self.flows.append(&mut later.flows);
        later.ends.truncate(max.saturating_sub(held(self)));
        self.ends.append(&mut later.ends);
        later.udp.truncate(max.saturating_sub(held(self)));
        self.udp.append(&mut later.udp);
        later
            .iface_flows
            .truncate(max.saturating_sub(held(self) + self.iface_flows.len()));
        self.iface_flows.append(&mut later.iface_flows);
        later
            .iface_totals
            .truncate(max.saturating_sub(self.iface_totals.len()));
        self.iface_totals.append(&mut later.iface_totals);
        // A recording's parts are untrusted: their drop lines are held under the same bound.
        later.drops.truncate(max.saturating_sub(self.drops.len()));
        self.drops.append(&mut later.drops);
        self.mono_ns = later.mono_ns;
        self.stats = later.stats;
        self.more = later.more;
    }

    /// A report read from a recording made before schema 3: its SRTTs (µs, old names) moved
    /// to where newer ones are read.
    pub fn upgrade(&mut self) {
        for f in self.flows.iter_mut().chain(self.ends.iter_mut()) {
            f.srtt_us = f.srtt_us.or(f.legacy_srtt_us.take());
            f.srtt_min_us = f.srtt_min_us.or(f.legacy_srtt_min_us.take());
            f.srtt_max_us = f.srtt_max_us.or(f.legacy_srtt_max_us.take());
        }
    }

    /// Keeps the flows `filters` select (a replay with filters, a filtered copy). The table's
    /// own stats stay whole: they describe the kernel table, not the selection.
    /// Names each flow's L7 protocol from the calls seen on it (`seen`: by local and peer
    /// address, the protocol's name and whether over TLS).
    pub fn tag_l7(&mut self, seen: &L7Seen) {
        for f in self.flows.iter_mut().chain(self.ends.iter_mut()) {
            if let Some((proto, tls)) = seen.get(&(f.local, f.peer)) {
                f.l7 = Some(CompactString::const_new(proto));
                f.tls = *tls;
            }
        }
        for f in &mut self.udp {
            if let Some((proto, _)) = f.peer.and_then(|p| seen.get(&(f.local, p))) {
                f.l7 = Some((*proto).to_owned());
            }
        }
    }

    pub fn retain_selected(&mut self, filters: &Filters) {
        let tcp = |f: &TcpFlow| {
            filters.selects(
                f.local.port(),
                Some(f.peer.port()),
                f.pid,
                f.comm.as_deref(),
            )
        };
        self.flows.retain(tcp);
        self.ends.retain(tcp);
        self.udp.retain(|f| {
            filters.selects(
                f.local.port(),
                f.peer.map(|a| a.port()),
                Some(f.pid),
                Some(&f.comm),
            )
        });
    }
}

/// Flows (TCP, ended and UDP together) per part of an interval's report: the reader thread
/// hands the report on in parts of at most this many as it makes it, so a burst of 200,000
/// new or ended flows is never held whole. A `TcpFlow` is 480 bytes and up to four parts are
/// alive at once (one filling, two in the channel, one being written): 3.9 MB at 2,048 (it
/// was 7.9 MB at 4,096, a fifth of ebtop's own memory with 100,000 connections held).
pub const FLOWS_PER_PART: usize = 2048;

/// Flow reports for tests: real flows (those of the committed recording flows_mix.ebt),
/// copied and renumbered to any size.
#[cfg(test)]
pub(crate) mod test_reports {
    use super::*;
    use crate::record::reader::{self, Item};

    /// The flow reports of the recording at `path` (each put together from its parts).
    pub fn recorded(path: &std::path::Path) -> (Vec<FlowReport>, crate::record::ReadStats) {
        let mut rd = reader::open(path).unwrap();
        let mut reports: Vec<FlowReport> = Vec::new();
        rd.for_each(|it| {
            if let Item::Flows(r) = it {
                match reports.last_mut().filter(|last| last.more) {
                    Some(last) => last.append_part(*r),
                    None => reports.push(*r),
                }
            }
            Ok(())
        })
        .unwrap();
        (reports, rd.stats)
    }

    /// The fixture's reports.
    pub fn fixture() -> Vec<FlowReport> {
        let path = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/tests/fixtures/recordings/flows_mix.ebt"
        );
        recorded(std::path::Path::new(path)).0
    }

    /// A report at `mono_ns` of `tcp` active flows, `ends` ended ones and `udp` UDP pairs,
    /// each a fixture flow under an id of its own, with the fixture's last stats.
    pub fn numbered(mono_ns: u64, tcp: usize, ends: usize, udp: usize) -> FlowReport {
        let reports = fixture();
        let tcp_flow = reports.iter().find_map(|r| r.flows.first()).unwrap();
        let end_flow = reports.iter().find_map(|r| r.ends.first()).unwrap();
        let udp_flow = reports.iter().find_map(|r| r.udp.first()).unwrap();
        let renumbered = |f: &TcpFlow, id: usize| TcpFlow {
            flow_id: id as u64,
            ..f.clone()
        };
        FlowReport {
            mono_ns,
            flows: (0..tcp).map(|i| renumbered(tcp_flow, i)).collect(),
            ends: (0..ends)
                .map(|i| renumbered(end_flow, 100_000 + i))
                .collect(),
            udp: (0..udp)
                .map(|i| UdpFlow {
                    flow_id: 200_000 + i as u64,
                    ..udp_flow.clone()
                })
                .collect(),
            stats: reports.last().unwrap().stats.clone(),
            drops: Vec::new(),
            iface_flows: Vec::new(),
            iface_totals: Vec::new(),
            more: false,
        }
    }

    /// `report` in parts of at most `max` flows, owned (as a recording reads them back).
    pub fn owned_parts(report: &FlowReport, max: usize) -> Vec<FlowReport> {
        report
            .parts(max)
            .iter()
            .map(|p| serde_json::from_slice(&serde_json::to_vec(p).unwrap()).unwrap())
            .collect()
    }
}

/// Flows for unit tests.
#[cfg(test)]
pub mod test_flows {
    use super::TcpFlow;

    /// A server flow 127.0.0.1:5000 ← 127.0.0.1:(40000 + id) of process 7 `srv`, ended at
    /// `end` (monotonic ns) if given, with `bytes_in` in all and `interval_in` in its interval.
    pub fn tcp(id: u64, bytes_in: u64, interval_in: u64, end: Option<u64>) -> TcpFlow {
        TcpFlow {
            proto: crate::flows::names::TcpProto::Tcp,
            flow_id: id,
            local: "127.0.0.1:5000".parse().unwrap(),
            peer: format!("127.0.0.1:{}", 40000 + id).parse().unwrap(),
            role: Some(crate::flows::names::Role::Server),
            role_inferred: false,
            preexisting: false,
            state: crate::flows::names::TcpState::Established,
            pid: Some(7),
            comm: Some("srv".into()),
            sock_id: Some(99),
            start_mono_ns: 1_000_000_000,
            age_ns: Some(0),
            bytes_out: 0,
            bytes_in,
            bytes_sent: 0,
            segs_out: 0,
            segs_in: 0,
            data_segs_out: 0,
            data_segs_in: 0,
            retrans_segs: 0,
            retrans_bytes: 0,
            retrans_events: 0,
            rst_sent: 0,
            rst_received: 0,
            interval_bytes_out: 0,
            interval_bytes_in: interval_in,
            interval_segs_out: 0,
            interval_segs_in: 0,
            interval_retrans_segs: 0,
            srtt_us: Some(40),
            srtt_min_us: None,
            srtt_max_us: None,
            legacy_srtt_us: None,
            legacy_srtt_min_us: None,
            legacy_srtt_max_us: None,
            connect_latency_ns: None,
            end_mono_ns: end,
            duration_ns: None,
            close_reason: end.map(|_| crate::flows::names::CloseReason::Fin),
            close_state: None,
            sk_err: None,
            l7: None,
            tls: false,
            drops: None,
        }
    }
}
