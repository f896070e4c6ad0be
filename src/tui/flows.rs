//! The Flows view's table: the kernel flow table's interval reports folded into one row per
//! flow. A report only carries the flows whose counters changed, so the board keeps the others
//! (their rates drop to zero) until their `flow_end`; ended flows stay a little while so that
//! short connections can be seen at all.

use std::collections::HashMap;
use std::net::SocketAddr;

use compact_str::{format_compact, CompactString};

use super::table::{col, content, fit, human, proc_label, Column, Flag, Row, SortVal};
use crate::flows::names::CloseReason;
use crate::flows::{FlowReport, TcpFlow, UdpFlow};

/// Rows kept at most; ended flows go first, then the least recently active.
pub const MAX_FLOWS_SHOWN: usize = 20_000;
/// How long (recorded time) an ended flow stays on the board.
pub const ENDED_KEPT_NS: u64 = 10_000_000_000;

/// Columns of the flow table (index 4, the receive rate, is the view's default sort). The
/// addresses as wide as they are, so that PROTO (short, and what a flow is) stays at 80
/// columns; the spare width goes to the last column, as htop's Command.
pub const FLOW_TABLE_COLUMNS: &[Column] = &[
    fit("LOCAL", 21),
    fit("PEER", 21),
    content("PROCESS/PID", 32, 0),
    col("PROTO", 7, 1, false),
    col("IN B/s", 8, 0, true),
    col("OUT B/s", 8, 0, true),
    col("IN B", 8, 5, true),
    col("OUT B", 8, 6, true),
    col("SRTT ms", 7, 3, true),
    col("RETR", 5, 2, true),
    col("STATE", 11, 4, false),
    col("AGE s", 7, 7, true),
    Column {
        flex: true,
        ..col("L7", 9, 8, false)
    },
];

/// A row's key: `t` or `u` (TCP or UDP) and the flow id (inline: no allocation).
fn row_key(tcp: bool, id: u64) -> CompactString {
    format_compact!("{}{id}", if tcp { "t" } else { "u" })
}

/// One flow as the view shows it (TCP or UDP).
#[derive(Debug, Clone, PartialEq)]
pub struct FlowRow {
    pub tcp: bool,
    pub id: u64,
    pub local: SocketAddr,
    pub peer: Option<SocketAddr>,
    pub pid: Option<u32>,
    pub comm: Option<String>,
    /// `client`/`server` (TCP), if known.
    pub role: Option<String>,
    /// TCP state; for an ended flow `END` and the close reason.
    pub state: String,
    pub start_mono_ns: u64,
    /// Open before ebtop started: its age is at least the time since ebtop first saw it.
    pub preexisting: bool,
    pub bytes_in: u64,
    pub bytes_out: u64,
    /// Over the last interval (0 when the flow was idle in it).
    pub in_per_s: f64,
    pub out_per_s: f64,
    pub srtt_us: Option<u32>,
    pub retrans_segs: u64,
    /// Retransmits or a reset in the last interval: the row is marked.
    pub trouble: bool,
    /// The protocol of the calls seen on it, as the Calls view names it (`https`, `redis+tls`).
    pub l7: Option<String>,
    pub ended_ns: Option<u64>,
    /// Recorded time of its last report.
    pub seen_ns: u64,
    /// The flow table's last report of it (TCP), for its details.
    pub last: Option<Box<TcpFlow>>,
}

impl FlowRow {
    fn from_tcp(f: TcpFlow, per_s: impl Fn(u64) -> f64, now_ns: u64) -> FlowRow {
        let ended = f.end_mono_ns.is_some();
        let state = match (f.close_reason, ended) {
            (Some(CloseReason::RstReceived), true) => "END rst in".to_owned(),
            (Some(CloseReason::RstSent), true) => "END rst out".to_owned(),
            (Some(r), true) => format!("END {r}"),
            (None, true) => "END".to_owned(),
            _ => f.state.to_string(),
        };
        let reset = ended && f.close_reason.is_some_and(CloseReason::is_reset);
        FlowRow {
            tcp: true,
            id: f.flow_id,
            local: f.local,
            peer: Some(f.peer),
            pid: f.pid,
            comm: f.comm.as_ref().map(|c| c.to_string()),
            role: f.role.map(|r| r.as_str().to_owned()),
            state,
            start_mono_ns: f.start_mono_ns,
            preexisting: f.preexisting,
            bytes_in: f.bytes_in,
            bytes_out: f.bytes_out,
            in_per_s: per_s(f.interval_bytes_in),
            out_per_s: per_s(f.interval_bytes_out),
            srtt_us: f.srtt_us,
            retrans_segs: f.retrans_segs,
            trouble: f.interval_retrans_segs > 0
                || reset
                || f.drops
                    .as_ref()
                    .is_some_and(|d| d.interval_in + d.interval_out > 0),
            l7: f.l7.as_deref().map(|p| super::table::l7_label(p, f.tls)),
            ended_ns: f.end_mono_ns,
            seen_ns: now_ns,
            last: Some(Box::new(f)),
        }
    }

    fn from_udp(f: UdpFlow, per_s: impl Fn(u64) -> f64, now_ns: u64) -> FlowRow {
        FlowRow {
            tcp: false,
            id: f.flow_id,
            local: f.local,
            peer: f.peer,
            pid: Some(f.pid),
            comm: Some(f.comm),
            role: None,
            state: String::new(),
            start_mono_ns: f.start_mono_ns,
            preexisting: false,
            bytes_in: f.bytes_in,
            bytes_out: f.bytes_out,
            in_per_s: per_s(f.interval_bytes_in),
            out_per_s: per_s(f.interval_bytes_out),
            srtt_us: None,
            retrans_segs: 0,
            trouble: false,
            l7: f.l7,
            ended_ns: None,
            seen_ns: now_ns,
            last: None,
        }
    }

    fn key(&self) -> String {
        row_key(self.tcp, self.id).into()
    }

    /// The names `proto:` takes for the flow: its transport, and its L7 label and
    /// protocol (`https` and `http`).
    fn protocol_names(&self) -> Vec<String> {
        let mut names = vec![if self.tcp { "tcp" } else { "udp" }.to_owned()];
        if let Some(l7) = &self.l7 {
            names.push(l7.clone());
            let base = match l7.as_str() {
                "https" => "http",
                other => other.strip_suffix("+tls").unwrap_or(other),
            };
            if base != l7 {
                names.push(base.to_owned());
            }
        }
        names
    }

    pub fn row(&self, now_ns: u64) -> Row {
        let process = match (&self.comm, self.pid) {
            (Some(c), Some(p)) => proc_label(c, p),
            (None, Some(p)) => format!("?/{p}"),
            _ => "?".to_owned(),
        };
        let proto = match (self.tcp, self.role.as_deref()) {
            (true, Some("client")) => "tcp cli",
            (true, Some("server")) => "tcp srv",
            (true, _) => "tcp",
            (false, _) => "udp",
        };
        let peer = self.peer.map_or("*".to_owned(), |a| a.to_string());
        let end = self.ended_ns.unwrap_or(now_ns);
        let age_s = end.saturating_sub(self.start_mono_ns) as f64 / 1e9;
        let srtt_ms = self.srtt_us.map(|u| f64::from(u) / 1e3);
        Row {
            key: self.key(),
            cells: vec![
                self.local.to_string(),
                peer.clone(),
                process.clone(),
                proto.to_owned(),
                human(self.in_per_s.round()),
                human(self.out_per_s.round()),
                human(self.bytes_in as f64),
                human(self.bytes_out as f64),
                srtt_ms.map_or("-".to_owned(), |v| format!("{v:.2}")),
                if self.tcp {
                    self.retrans_segs.to_string()
                } else {
                    "-".to_owned()
                },
                self.state.clone(),
                if self.preexisting {
                    format!("≥{age_s:.1}")
                } else {
                    format!("{age_s:.1}")
                },
                self.l7.clone().unwrap_or_else(|| "-".to_owned()),
            ],
            sort: vec![
                SortVal::Text(self.local.to_string()),
                SortVal::Text(peer),
                SortVal::Text(process),
                SortVal::Text(proto.to_owned()),
                SortVal::Num(self.in_per_s),
                SortVal::Num(self.out_per_s),
                SortVal::Num(self.bytes_in as f64),
                SortVal::Num(self.bytes_out as f64),
                SortVal::Num(srtt_ms.unwrap_or(-1.0)),
                SortVal::Num(self.retrans_segs as f64),
                SortVal::Text(self.state.clone()),
                SortVal::Num(age_s),
                SortVal::Text(self.l7.clone().unwrap_or_default()),
            ],
            flag: if self.trouble {
                Flag::Error
            } else {
                Flag::None
            },
            facets: super::table::Facets {
                protocols: self.protocol_names(),
                outcomes: None,
                loss: false,
            },
        }
    }
}

/// Interface flows the board keeps per interval (the Iface lines show the top one per
/// interface).
pub const MAX_IFACE_TOP: usize = 16;

/// The flows known from the reports so far.
#[derive(Debug, Clone, Default)]
pub struct FlowBoard {
    /// A flow table report has arrived (else the view falls back to connections from calls).
    pub active: bool,
    pub flows: HashMap<String, FlowRow>,
    /// Recorded time of the last report.
    pub now_ns: u64,
    /// Rows dropped to stay under [`MAX_FLOWS_SHOWN`].
    pub evicted: u64,
    pub stats: crate::flows::FlowStats,
    /// The last interval's drops per {interface, reason}, the most first (the view's Drops
    /// lines).
    pub drops: Vec<crate::flows::drops::DropCount>,
    /// `--iface`: the last interval's interface totals (the view's Iface lines).
    pub iface: Vec<crate::flows::iface::IfaceTotal>,
    /// `--iface`: the last interval's busiest interface flows, the most bytes first (at most
    /// [`MAX_IFACE_TOP`], gathered over the report's parts).
    pub iface_top: Vec<crate::flows::iface::IfaceFlow>,
    /// The length of the last report's interval (for the rates of its later parts).
    period_ns: u64,
}

impl FlowBoard {
    /// Drops per second in the last interval.
    pub fn per_s(&self, n: u64) -> f64 {
        if self.period_ns == 0 {
            0.0
        } else {
            n as f64 * 1e9 / self.period_ns as f64
        }
    }

    /// Folds one interval's report in; `period_ns` is the interval's length (for the rates).
    /// The report's flows move into the rows. Which of them get a row is decided before any
    /// is made: a burst reports up to 200,000 flows and the board keeps [`MAX_FLOWS_SHOWN`]
    /// (making every row and then evicting held a row and a copy of every reported flow at
    /// once, and left the map that large).
    /// A report whose flows come in parts (`more`) gets its later ones through
    /// [`FlowBoard::apply_part`].
    pub fn apply(&mut self, report: FlowReport, period_ns: u64) {
        self.active = true;
        self.now_ns = report.mono_ns;
        self.period_ns = period_ns;
        // Flows not in this report were idle in the interval.
        for f in self.flows.values_mut() {
            f.in_per_s = 0.0;
            f.out_per_s = 0.0;
            f.trouble = false;
        }
        self.iface_top.clear();
        self.apply_part(report);
    }

    /// Folds in a later part of the report last applied (a report of many flows comes in
    /// parts: the board then never holds more than a part's flows besides its rows).
    pub fn apply_part(&mut self, part: FlowReport) {
        let now = self.now_ns;
        let period_ns = self.period_ns;
        let FlowReport {
            flows,
            ends,
            udp,
            stats,
            more,
            drops,
            iface_flows,
            iface_totals,
            ..
        } = part;
        if !more {
            self.stats = stats;
            self.drops = drops;
            self.iface = iface_totals;
        }
        // The busiest interface flows of the interval: a part's own are sorted (most bytes
        // first), so its first few are all it can add.
        self.iface_top
            .extend(iface_flows.into_iter().take(MAX_IFACE_TOP));
        self.iface_top
            .sort_by_key(|f| std::cmp::Reverse(f.count.bytes));
        self.iface_top.truncate(MAX_IFACE_TOP);
        let per_s = |n: u64| {
            if period_ns == 0 {
                0.0
            } else {
                n as f64 * 1e9 / period_ns as f64
            }
        };
        let kept =
            |ended_ns: Option<u64>| ended_ns.is_none_or(|e| now.saturating_sub(e) < ENDED_KEPT_NS);
        // The report's flows in row order: (TCP, id), when ended.
        let reported: Vec<((bool, u64), Option<u64>)> = flows
            .iter()
            .chain(&ends)
            .map(|f| ((true, f.flow_id), f.end_mono_ns))
            .chain(udp.iter().map(|f| ((false, f.flow_id), None)))
            .collect();
        // A flow reported twice gets its last entry's row; a reported flow replaces its row.
        let mut last: HashMap<(bool, u64), usize> = HashMap::with_capacity(reported.len());
        for (i, (id, _)) in reported.iter().enumerate() {
            last.insert(*id, i);
        }
        for &(tcp, id) in last.keys() {
            self.flows.remove(row_key(tcp, id).as_str());
        }
        let mut make: Vec<bool> = reported
            .iter()
            .enumerate()
            .map(|(i, (id, ended_ns))| last.get(id) == Some(&i) && kept(*ended_ns))
            .collect();
        drop(last);
        self.flows.retain(|_, f| kept(f.ended_ns));
        let rows = self.flows.len() + make.iter().filter(|m| **m).count();
        if rows > MAX_FLOWS_SHOWN {
            // Ended rows go first, then the least recently reported (then by key).
            let excess = rows - MAX_FLOWS_SHOWN;
            let mut order: Vec<(bool, u64, CompactString, Option<usize>)> = self
                .flows
                .iter()
                .map(|(k, f)| (f.ended_ns.is_none(), f.seen_ns, k.into(), None))
                .chain(reported.iter().enumerate().filter(|(i, _)| make[*i]).map(
                    |(i, ((tcp, id), ended_ns))| {
                        (ended_ns.is_none(), now, row_key(*tcp, *id), Some(i))
                    },
                ))
                .collect();
            order.select_nth_unstable(excess - 1);
            for (_, _, key, reported_at) in order.drain(..excess) {
                match reported_at {
                    Some(i) => make[i] = false,
                    None => {
                        self.flows.remove(key.as_str());
                    }
                }
                self.evicted += 1;
            }
        }
        let (make_tcp, make_udp) = make.split_at(flows.len() + ends.len());
        let tcp = flows
            .into_iter()
            .chain(ends)
            .zip(make_tcp)
            .filter(|(_, make)| **make)
            .map(|(f, _)| FlowRow::from_tcp(f, per_s, now));
        let udp = udp
            .into_iter()
            .zip(make_udp)
            .filter(|(_, make)| **make)
            .map(|(f, _)| FlowRow::from_udp(f, per_s, now));
        for r in tcp.chain(udp) {
            self.flows.insert(r.key(), r);
        }
    }

    pub fn rows(&self) -> Vec<Row> {
        self.flows.values().map(|f| f.row(self.now_ns)).collect()
    }

    /// Open and recently ended flows on the board.
    pub fn counts(&self) -> (usize, usize) {
        let ended = self.flows.values().filter(|f| f.ended_ns.is_some()).count();
        (self.flows.len() - ended, ended)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::xorshift::below;

    use crate::flows::test_flows::tcp;

    fn report(mono_ns: u64, flows: Vec<TcpFlow>, ends: Vec<TcpFlow>) -> FlowReport {
        FlowReport {
            mono_ns,
            flows,
            ends,
            ..FlowReport::default()
        }
    }

    #[test]
    fn idle_flows_stay_with_zero_rate_and_ended_ones_leave_after_a_while() {
        let mut b = FlowBoard::default();
        let s = 1_000_000_000;
        b.apply(
            report(
                2 * s,
                vec![tcp(1, 5000, 5000, None), tcp(2, 10, 10, None)],
                vec![],
            ),
            s,
        );
        assert_eq!(b.flows["t1"].in_per_s, 5000.0);
        // Flow 1 idle, flow 2 ends.
        b.apply(report(3 * s, vec![], vec![tcp(2, 10, 0, Some(3 * s))]), s);
        assert_eq!(b.counts(), (1, 1));
        assert_eq!(b.flows["t1"].in_per_s, 0.0);
        assert_eq!(b.flows["t1"].bytes_in, 5000);
        assert_eq!(b.flows["t2"].state, "END fin");
        b.apply(report(3 * s + ENDED_KEPT_NS, vec![], vec![]), s);
        assert_eq!(b.counts(), (1, 0));
    }

    fn udp(id: u64, interval_in: u64) -> UdpFlow {
        UdpFlow {
            proto: "udp".to_owned(),
            flow_id: id,
            local: "127.0.0.1:53".parse().unwrap(),
            peer: None,
            pid: 8,
            comm: "dns".to_owned(),
            start_mono_ns: 1_000_000_000,
            dgrams_out: 0,
            dgrams_in: 1,
            bytes_out: 0,
            bytes_in: interval_in,
            interval_dgrams_out: 0,
            interval_dgrams_in: 1,
            interval_bytes_out: 0,
            interval_bytes_in: interval_in,
            l7: Some("dns".to_owned()),
            drops: None,
        }
    }

    /// The board as it was folded before rows were chosen ahead: every reported flow made a
    /// row, then the old ended ones and the excess went.
    fn apply_making_every_row(b: &mut FlowBoard, report: FlowReport, period_ns: u64) {
        b.active = true;
        let now = report.mono_ns;
        b.now_ns = now;
        b.stats = report.stats;
        let per_s = |n: u64| n as f64 * 1e9 / period_ns as f64;
        for f in b.flows.values_mut() {
            f.in_per_s = 0.0;
            f.out_per_s = 0.0;
            f.trouble = false;
        }
        let rows = report
            .flows
            .into_iter()
            .chain(report.ends)
            .map(|f| FlowRow::from_tcp(f, per_s, now))
            .chain(
                report
                    .udp
                    .into_iter()
                    .map(|f| FlowRow::from_udp(f, per_s, now)),
            );
        for r in rows {
            b.flows.insert(r.key(), r);
        }
        b.flows.retain(|_, f| {
            f.ended_ns
                .is_none_or(|e| now.saturating_sub(e) < ENDED_KEPT_NS)
        });
        if b.flows.len() > MAX_FLOWS_SHOWN {
            let mut order: Vec<(bool, u64, String)> = b
                .flows
                .iter()
                .map(|(k, f)| (f.ended_ns.is_none(), f.seen_ns, k.clone()))
                .collect();
            order.sort();
            let excess = b.flows.len() - MAX_FLOWS_SHOWN;
            for (_, _, k) in order.into_iter().take(excess) {
                b.flows.remove(&k);
                b.evicted += 1;
            }
        }
    }

    #[test]
    fn rows_chosen_before_they_are_made_are_the_rows_kept_after_making_all() {
        let mut next = below(0x9e37_79b9_7f4a_7c15);
        let s: u64 = 1_000_000_000;
        let (mut chosen, mut all) = (FlowBoard::default(), FlowBoard::default());
        for step in 2..14 {
            let now = step * s;
            // Bursts past the bound, flows reported twice (open and ended), ends older than
            // the time ended flows stay, UDP pairs with the same ids as TCP flows.
            let burst = if step % 4 == 0 { 15_000 } else { 4_000 };
            let mut flows = Vec::new();
            let mut ends = Vec::new();
            for _ in 0..burst {
                let id = next(25_000);
                match next(10) {
                    0..=5 => flows.push(tcp(id, next(1000), next(1000), None)),
                    6 | 7 => {
                        let end = now.saturating_sub(next(3) * ENDED_KEPT_NS / 2);
                        ends.push(tcp(id, next(1000), next(1000), Some(end)));
                    }
                    _ => {
                        flows.push(tcp(id, 1, 1, None));
                        ends.push(tcp(id, 2, 2, Some(now)));
                    }
                }
            }
            let udp_flows = (0..burst / 10)
                .map(|_| udp(next(25_000), next(100)))
                .collect();
            let r = FlowReport {
                mono_ns: now,
                flows,
                ends,
                udp: udp_flows,
                ..FlowReport::default()
            };
            chosen.apply(r.clone(), s);
            apply_making_every_row(&mut all, r, s);
            assert_eq!(chosen.flows, all.flows, "step {step}");
            assert_eq!(chosen.evicted, all.evicted, "step {step}");
        }
        assert!(chosen.evicted > 0, "the bound was reached");
        assert!(chosen.flows.len() <= MAX_FLOWS_SHOWN);
    }

    /// A report applied in parts (its first part, then the others) leaves the board as the
    /// report whole does, where the bound is not reached (past it, which rows are evicted
    /// is decided per part).
    #[test]
    fn a_report_in_parts_makes_the_rows_the_report_whole_makes() {
        let mut next = below(0x2545_f491_4f6c_dd1d);
        let s: u64 = 1_000_000_000;
        let (mut whole, mut in_parts) = (FlowBoard::default(), FlowBoard::default());
        for step in 2..8 {
            let now = step * s;
            let (mut flows, mut ends) = (Vec::new(), Vec::new());
            for _ in 0..3_000 {
                let id = next(9_000);
                match next(10) {
                    0..=5 => flows.push(tcp(id, next(1000), next(1000), None)),
                    6 | 7 => ends.push(tcp(id, next(1000), next(1000), Some(now - s / 2))),
                    _ => {
                        flows.push(tcp(id, 1, 1, None));
                        ends.push(tcp(id, 2, 2, Some(now)));
                    }
                }
            }
            let r = FlowReport {
                mono_ns: now,
                flows,
                ends,
                udp: (0..300).map(|_| udp(next(9_000), next(100))).collect(),
                stats: crate::flows::FlowStats {
                    created: step,
                    ..Default::default()
                },
                drops: Vec::new(),
                iface_flows: Vec::new(),
                iface_totals: Vec::new(),
                more: false,
            };
            let mut parts = crate::flows::test_reports::owned_parts(&r, 700).into_iter();
            in_parts.apply(parts.next().unwrap(), s);
            for p in parts {
                in_parts.apply_part(p);
            }
            whole.apply(r, s);
            assert_eq!(in_parts.flows, whole.flows, "step {step}");
            assert_eq!(in_parts.stats, whole.stats, "step {step}");
            assert_eq!(in_parts.evicted, 0);
        }
    }

    #[test]
    fn the_board_is_bounded_and_evicts_ended_flows_first() {
        let mut b = FlowBoard::default();
        let s = 1_000_000_000;
        let open: Vec<TcpFlow> = (0..MAX_FLOWS_SHOWN as u64)
            .map(|i| tcp(i, 1, 1, None))
            .collect();
        let ended: Vec<TcpFlow> = (0..10)
            .map(|i| tcp(MAX_FLOWS_SHOWN as u64 + i, 1, 1, Some(2 * s)))
            .collect();
        b.apply(report(2 * s, open, ended), s);
        assert_eq!(b.flows.len(), MAX_FLOWS_SHOWN);
        assert_eq!(b.evicted, 10);
        assert_eq!(b.counts(), (MAX_FLOWS_SHOWN, 0));
    }
}
