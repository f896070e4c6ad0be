//! Decoding of the kernel's flow records (`struct ebtop_flow`, `ebtop_udp_key`,
//! `ebtop_udp_flow` in src/bpf/flows.bpf.c). Little-endian, fixed offsets.

pub const FLOW_LEN: usize = 200;
pub const UDP_KEY_LEN: usize = 32;
pub const UDP_LEN: usize = 88;

pub const ROLE_CLIENT: u8 = 1;
pub const ROLE_SERVER: u8 = 2;
pub const FLAG_PREEXISTING: u8 = 1;
pub const FLAG_SNAPPED: u8 = 2;
/// At close: the peer's FIN was received (and counted in `bytes_received`).
pub const FLAG_PEER_FIN: u8 = 4;
/// Ended when a new socket took its address: its close was never seen, its counters are as
/// last read.
pub const FLAG_CLOSE_UNSEEN: u8 = 8;

/// Indexes of the per-CPU `flow_counters` array.
pub mod counter {
    pub const CREATED: u32 = 0;
    pub const PREEXISTING: u32 = 1;
    pub const TABLE_FULL: u32 = 2;
    pub const ENDS: u32 = 3;
    pub const ENDS_LOST: u32 = 4;
    pub const STALE: u32 = 5;
    pub const UDP_FULL: u32 = 6;
    pub const CLOSES_RECOVERED: u32 = 7;
    pub const COUNT: u32 = 8;
}

fn u64_at(b: &[u8], o: usize) -> u64 {
    u64::from_le_bytes(b[o..o + 8].try_into().unwrap())
}
fn u32_at(b: &[u8], o: usize) -> u32 {
    u32::from_le_bytes(b[o..o + 4].try_into().unwrap())
}
fn u16_at(b: &[u8], o: usize) -> u16 {
    u16::from_le_bytes(b[o..o + 2].try_into().unwrap())
}

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RawFlow {
    pub start_ns: u64,
    pub syn_ns: u64,
    pub established_ns: u64,
    pub end_ns: u64,
    pub bytes_sent: u64,
    pub inode: u64,
    pub bytes_acked: u64,
    pub bytes_received: u64,
    pub bytes_retrans: u64,
    pub segs_in: u32,
    pub segs_out: u32,
    pub data_segs_in: u32,
    pub data_segs_out: u32,
    pub total_retrans: u32,
    pub retrans_events: u32,
    pub rst_sent: u32,
    pub rst_received: u32,
    pub srtt_us: u32,
    /// Running range since the last snapshot (what a flow end has seen since).
    pub srtt_min_us: u32,
    pub srtt_max_us: u32,
    pub iv_srtt_min_us: u32,
    pub iv_srtt_max_us: u32,
    pub pid: u32,
    pub sk_err: i32,
    pub lport: u16,
    pub rport: u16,
    pub family: u8,
    pub state: u8,
    pub role: u8,
    pub flags: u8,
    pub close_state: u8,
    pub laddr: [u8; 16],
    pub raddr: [u8; 16],
    pub comm: [u8; 16],
    pub sk: u64,
}

impl RawFlow {
    pub fn decode(b: &[u8]) -> Option<RawFlow> {
        if b.len() < FLOW_LEN {
            return None;
        }
        let arr = |o: usize| -> [u8; 16] { b[o..o + 16].try_into().unwrap() };
        Some(RawFlow {
            start_ns: u64_at(b, 0),
            syn_ns: u64_at(b, 8),
            established_ns: u64_at(b, 16),
            end_ns: u64_at(b, 24),
            bytes_sent: u64_at(b, 32),
            inode: u64_at(b, 40),
            bytes_acked: u64_at(b, 48),
            bytes_received: u64_at(b, 56),
            bytes_retrans: u64_at(b, 64),
            segs_in: u32_at(b, 72),
            segs_out: u32_at(b, 76),
            data_segs_in: u32_at(b, 80),
            data_segs_out: u32_at(b, 84),
            total_retrans: u32_at(b, 88),
            retrans_events: u32_at(b, 92),
            rst_sent: u32_at(b, 96),
            rst_received: u32_at(b, 100),
            srtt_us: u32_at(b, 104),
            srtt_min_us: u32_at(b, 108),
            srtt_max_us: u32_at(b, 112),
            iv_srtt_min_us: u32_at(b, 116),
            iv_srtt_max_us: u32_at(b, 120),
            pid: u32_at(b, 124),
            sk_err: u32_at(b, 128) as i32,
            lport: u16_at(b, 132),
            rport: u16_at(b, 134),
            family: b[136],
            state: b[137],
            role: b[138],
            flags: b[139],
            close_state: b[140],
            laddr: arr(144),
            raddr: arr(160),
            comm: arr(176),
            sk: u64_at(b, 192),
        })
    }
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct RawUdpKey {
    pub sk: u64,
    pub raddr: [u8; 16],
    pub rport: u16,
    /// 0: peer unknown (unconnected socket, address not requested by the receiver).
    pub family: u8,
}

impl RawUdpKey {
    pub fn decode(b: &[u8]) -> Option<RawUdpKey> {
        if b.len() < UDP_KEY_LEN {
            return None;
        }
        Some(RawUdpKey {
            sk: u64_at(b, 0),
            raddr: b[8..24].try_into().unwrap(),
            rport: u16_at(b, 24),
            family: b[26],
        })
    }
    pub fn encode(&self) -> [u8; UDP_KEY_LEN] {
        let mut b = [0u8; UDP_KEY_LEN];
        b[0..8].copy_from_slice(&self.sk.to_le_bytes());
        b[8..24].copy_from_slice(&self.raddr);
        b[24..26].copy_from_slice(&self.rport.to_le_bytes());
        b[26] = self.family;
        b
    }
}

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RawUdp {
    pub first_ns: u64,
    pub tx_bytes: u64,
    pub rx_bytes: u64,
    pub tx_dgrams: u64,
    pub rx_dgrams: u64,
    pub pid: u32,
    pub lport: u16,
    pub family: u8,
    pub laddr: [u8; 16],
    pub comm: [u8; 16],
}

impl RawUdp {
    pub fn decode(b: &[u8]) -> Option<RawUdp> {
        if b.len() < UDP_LEN {
            return None;
        }
        Some(RawUdp {
            first_ns: u64_at(b, 0),
            tx_bytes: u64_at(b, 16),
            rx_bytes: u64_at(b, 24),
            tx_dgrams: u64_at(b, 32),
            rx_dgrams: u64_at(b, 40),
            pid: u32_at(b, 48),
            lport: u16_at(b, 52),
            family: b[54],
            laddr: b[56..72].try_into().unwrap(),
            comm: b[72..88].try_into().unwrap(),
        })
    }
}

pub fn addr(family: u8, a: &[u8; 16], port: u16) -> std::net::SocketAddr {
    use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
    let ip = if family == 10 {
        let v6 = Ipv6Addr::from(*a);
        match v6.to_ipv4_mapped() {
            Some(v4) => IpAddr::V4(v4),
            None => IpAddr::V6(v6),
        }
    } else {
        IpAddr::V4(Ipv4Addr::new(a[0], a[1], a[2], a[3]))
    };
    SocketAddr::new(ip, port)
}

pub fn comm_str(c: &[u8; 16]) -> compact_str::CompactString {
    let n = c.iter().position(|&b| b == 0).unwrap_or(16);
    compact_str::CompactString::from_utf8_lossy(&c[..n])
}
