//! Interface flows (`--iface`): what crossed an interface in an interval, by 5-tuple and
//! direction, whether or not a local socket sent or received it (forwarded, bridged, container
//! to container). Counted by tcx programs (src/bpf/ifaceflows.bpf.c), read once per interval
//! by src/source/flow_table/iface.rs, carried by the interval's [`super::FlowReport`]
//! (`iface_flow` and `iface` lines; recordings keep them).

use std::net::IpAddr;

use compact_str::CompactString;
use serde::{Deserialize, Serialize};

/// Which way a packet crossed the interface.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum IfaceDir {
    /// Arrived on the interface (tcx ingress).
    Ingress,
    /// Left through it (tcx egress).
    Egress,
}

impl IfaceDir {
    /// From the kernel's direction (ifaceflows.bpf.c: 0 ingress, else egress).
    pub fn from_raw(dir: u32) -> IfaceDir {
        if dir == 0 {
            IfaceDir::Ingress
        } else {
            IfaceDir::Egress
        }
    }
}

/// Packets, bytes and payload: an interval's or since the start.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct IfaceCount {
    /// Segments: a GSO/GRO packet of n segments counts n.
    pub packets: u64,
    /// On the wire: the link-layer header and every segment's own headers included.
    pub bytes: u64,
    /// TCP/UDP payload (the IP payload for other IP protocols; the frame after its
    /// link-layer header for what is not IP).
    pub payload: u64,
}

impl IfaceCount {
    pub fn add(&mut self, o: &IfaceCount) {
        self.packets = self.packets.saturating_add(o.packets);
        self.bytes = self.bytes.saturating_add(o.bytes);
        self.payload = self.payload.saturating_add(o.payload);
    }

    pub fn is_zero(&self) -> bool {
        self.packets == 0 && self.bytes == 0 && self.payload == 0
    }
}

/// One 5-tuple's traffic through one interface one way in one interval (an `iface_flow` line).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct IfaceFlow {
    /// The interface's name when the interval was read.
    pub iface: CompactString,
    pub ifindex: u32,
    pub dir: IfaceDir,
    /// `tcp`, `udp`, `icmp`, `icmpv6`, `ip_N` for another IP protocol, or for what is not IP
    /// the ethertype's name (`arp`, `ethertype_0x88cc`).
    pub proto: CompactString,
    /// Source and destination addresses; `null` for what is not IP.
    pub src: Option<IpAddr>,
    pub dst: Option<IpAddr>,
    /// Ports: `null` unless TCP or UDP (and `null` for an IPv4 fragment after the first).
    pub sport: Option<u16>,
    pub dport: Option<u16>,
    /// In the interval.
    #[serde(flatten)]
    pub count: IfaceCount,
}

/// One interface one way: totals since ebtop attached to it and in the interval (an `iface`
/// line, one per interface direction that carried traffic in the interval).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct IfaceTotal {
    pub iface: CompactString,
    pub ifindex: u32,
    pub dir: IfaceDir,
    /// Since ebtop attached to the interface (flows and `unattributed` together).
    pub total: IfaceCount,
    /// In the interval.
    pub interval: IfaceCount,
    /// 5-tuples seen in the interval (its `iface_flow` lines).
    pub interval_flows: u64,
    /// Of `interval`, what was counted without its 5-tuple: the kernel's table of the
    /// interval's flows was full (`iface_stats.max_flows`).
    pub unattributed: IfaceCount,
}

/// The interface counter's health (`flow_stats.iface`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct IfaceStats {
    /// The interfaces counted now, by name.
    pub attached: Vec<CompactString>,
    /// `tcx`, or `clsact` (a kernel before 6.6: a tc filter, removed again at exit).
    pub attach: CompactString,
    /// 5-tuples one interval's table holds (per direction and interface together).
    pub max_flows: u64,
    /// Packets counted without their 5-tuple since the start (the table was full).
    pub unattributed_packets: u64,
    /// Interfaces that could not be attached (a warning line said why), since the start.
    pub attach_failures: u64,
    /// Time the interval's read took (swapping the tables, reading and emptying one).
    pub read_ns: u64,
}

/// The protocol's name for an IP protocol number.
pub fn ip_proto_name(proto: u8) -> CompactString {
    match proto {
        6 => "tcp".into(),
        17 => "udp".into(),
        1 => "icmp".into(),
        58 => "icmpv6".into(),
        132 => "sctp".into(),
        47 => "gre".into(),
        50 => "esp".into(),
        n => compact_str::format_compact!("ip_{n}"),
    }
}

/// The name of what a frame that is not IP carries, by its ethertype.
pub fn ethertype_name(ethertype: u16) -> CompactString {
    match ethertype {
        0x0806 => "arp".into(),
        0x88cc => "lldp".into(),
        n => compact_str::format_compact!("ethertype_0x{n:04x}"),
    }
}
