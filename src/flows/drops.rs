//! Packet drops with the kernel's reason (src/bpf/drops.bpf.c, read by
//! src/source/flow_table/drops.rs): the counts per {network namespace, interface, reason} an
//! interval's report carries (`drop` lines), a flow's own drops (`drops` in `flow`,
//! `flow_end` and UDP `flow` lines), and the counter's health (`flow_stats.drops`).

use std::collections::BTreeMap;

use compact_str::CompactString;
use serde::{Deserialize, Serialize};

/// Drops of one flow's packets the kernel counted since ebtop started (packets are segments:
/// a GSO/GRO packet of n segments counts n), told apart by direction: `in` toward the flow's
/// local socket, `out` from it. Matched by address: the packet's headers name the flow (most
/// drops happen before the kernel looks for a socket).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct FlowDrops {
    #[serde(rename = "in")]
    pub packets_in: u64,
    #[serde(rename = "out")]
    pub packets_out: u64,
    /// Since the flow's previous report.
    pub interval_in: u64,
    pub interval_out: u64,
    /// Both directions, by the kernel's reason name (`TC_INGRESS`, `NO_SOCKET`, …).
    pub by_reason: BTreeMap<CompactString, u64>,
}

impl FlowDrops {
    pub fn total(&self) -> u64 {
        self.packets_in + self.packets_out
    }
}

/// A flow a reason's drops hit in the interval (at most [`MAX_HITS`] per `drop` line, the
/// most packets first).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DropHit {
    pub flow_id: u64,
    /// `tcp` or `udp`.
    pub proto: CompactString,
    pub pid: Option<u32>,
    pub comm: Option<CompactString>,
    pub packets: u64,
}

/// Flows named per `drop` line.
pub const MAX_HITS: usize = 8;

/// Drops with one reason at one interface (a `drop` line), since ebtop started and in the
/// interval; only written for an interval in which it changed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DropCount {
    /// The kernel's name for it (`enum skb_drop_reason` in its BTF, less the
    /// `SKB_DROP_REASON_` prefix), or `reason_N` where the kernel's BTF does not name N.
    pub reason: CompactString,
    /// Its number in this kernel's enum (numbers differ between kernels; names do not).
    pub reason_code: u32,
    /// The interface's name when it is in ebtop's network namespace, else `null`.
    pub iface: Option<CompactString>,
    /// `null`: the packet had no device when dropped.
    pub ifindex: Option<u32>,
    /// Inode of the device's network namespace (as in `/proc/PID/ns/net`).
    pub netns: Option<u32>,
    pub packets: u64,
    pub bytes: u64,
    pub interval_packets: u64,
    pub interval_bytes: u64,
    /// The flows hit in the interval (the most packets first, at most [`MAX_HITS`]).
    pub flows: Vec<DropHit>,
}

/// The drop counters' own health, since the start (in `flow_stats`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct DropStats {
    /// Reason names come from the kernel's BTF (else every reason is `reason_N`).
    pub reason_names: bool,
    /// kfree_skb() calls without a reason (NOT_SPECIFIED): not counted as drops (most free a
    /// packet for other reasons).
    pub unspecified: u64,
    /// Drops not counted at all: the per-interface table was full.
    pub uncounted: u64,
    /// Drops counted per interface but not per flow: the per-address table was full.
    pub without_flow_table_full: u64,
    /// Drops counted per interface but not per flow: no IP header to read.
    pub without_headers: u64,
}
