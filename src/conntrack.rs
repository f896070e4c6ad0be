//! Connection tracker: per-socket state, stream positions, gap detection and the protocol
//! parser of each connection. Bounded: idle connections expire and a cap evicts the oldest.

// Integer keys (socket inodes) from the kernel: a fast non-keyed hash is safe here.
use rustc_hash::FxHashMap as HashMap;
use std::net::SocketAddr;

use crate::call::Call;
use crate::event::{Event, EventKind, SOCK_DGRAM};
use crate::protocols::{
    self, L7Call, ParseDepth, ParseStats, ParserConfig, StreamParser, Transport,
};

#[derive(Debug, Clone, Copy)]
pub struct TrackerConfig {
    pub max_conns: usize,
    /// Connections with no event for this long are forgotten.
    pub idle_timeout_ns: u64,
    pub depth: ParseDepth,
    /// Bytes of each message head kept in calls (see `ParserConfig::keep_head`).
    pub keep_head: usize,
}

impl Default for TrackerConfig {
    fn default() -> Self {
        TrackerConfig {
            max_conns: 65536,
            idle_timeout_ns: 120_000_000_000,
            depth: ParseDepth::Full,
            keep_head: 0,
        }
    }
}

/// What the tracker saw and did, all counted.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct TrackerStats {
    pub data_events: u64,
    pub data_bytes: u64,
    /// Bytes moved whose payload was not captured (snaplen, sendfile).
    pub uncaptured_bytes: u64,
    /// Stream positions that jumped: events lost between two records of one direction.
    pub gaps: u64,
    pub gap_bytes: u64,
    /// Data on connections whose protocol user space did not recognise.
    pub unrecognised_events: u64,
    pub conns_opened: u64,
    pub conns_closed: u64,
    pub conns_expired: u64,
    pub conns_evicted: u64,
}

enum ParserSlot {
    Undecided,
    Active(Box<dyn StreamParser>),
}

struct Conn {
    pid: u32,
    tid: u32,
    comm: [u8; 16],
    local: SocketAddr,
    peer: SocketAddr,
    transport: Transport,
    /// Expected `seq` of the next record in each direction.
    next_seq: [Option<u64>; 2],
    parser: ParserSlot,
    last_seen_ns: u64,
}

pub struct ConnTracker {
    cfg: TrackerConfig,
    conns: HashMap<u64, Conn>,
    pub stats: TrackerStats,
    pub parse: ParseStats,
    scratch: Vec<L7Call>,
}

impl ConnTracker {
    pub fn new(cfg: TrackerConfig) -> Self {
        ConnTracker {
            cfg,
            conns: HashMap::default(),
            stats: TrackerStats::default(),
            parse: ParseStats::default(),
            scratch: Vec::new(),
        }
    }

    pub fn open_conns(&self) -> usize {
        self.conns.len()
    }

    /// Feeds one event; completed calls go to `emit`.
    pub fn handle(&mut self, ev: &Event, emit: &mut dyn FnMut(Call)) {
        match ev.kind {
            EventKind::Data => self.on_data(ev, emit),
            EventKind::Close => {
                self.stats.conns_closed += 1;
                if let Some(mut c) = self.conns.remove(&ev.sock_id) {
                    if let ParserSlot::Active(p) = &mut c.parser {
                        p.on_close(&mut self.scratch, &mut self.parse);
                    }
                    Self::flush(&mut self.scratch, &c, ev.sock_id, emit);
                }
            }
            // In recordings made before connect/accept were dropped from the hooks: nothing to
            // do, connections are counted when their data starts.
            EventKind::Connect | EventKind::Accept => {}
        }
    }

    fn on_data(&mut self, ev: &Event, emit: &mut dyn FnMut(Call)) {
        self.stats.data_events += 1;
        // Wrapping: the numbers come from the kernel or a recording, which may be crafted.
        self.stats.data_bytes = self.stats.data_bytes.wrapping_add(ev.total_len);
        self.stats.uncaptured_bytes = self.stats.uncaptured_bytes.wrapping_add(ev.uncaptured());
        if !self.conns.contains_key(&ev.sock_id) && self.conns.len() >= self.cfg.max_conns {
            self.evict_oldest();
        }
        if !self.conns.contains_key(&ev.sock_id) {
            self.stats.conns_opened += 1;
        }
        let conn = self.conns.entry(ev.sock_id).or_insert_with(|| Conn {
            pid: ev.pid,
            tid: ev.tid,
            comm: ev.comm,
            local: ev.local(),
            peer: ev.peer(),
            transport: if ev.sock_type == SOCK_DGRAM {
                Transport::Datagram
            } else {
                Transport::Stream
            },
            next_seq: [None, None],
            parser: ParserSlot::Undecided,
            last_seen_ns: ev.end_ns,
        });
        conn.pid = ev.pid;
        conn.tid = ev.tid;
        conn.comm = ev.comm;
        conn.last_seen_ns = conn.last_seen_ns.max(ev.end_ns);
        if conn.transport == Transport::Datagram {
            conn.peer = ev.peer();
        }
        let d = ev.dir.index();

        // Stream position check: a record's seq must continue where the last one ended.
        let gap = match conn.next_seq[d] {
            Some(expected) if ev.seq > expected => Some(Some(ev.seq - expected)),
            Some(expected) if ev.seq < expected => Some(None),
            _ => None,
        };
        conn.next_seq[d] = Some(ev.seq.wrapping_add(ev.total_len));
        if let Some(len) = gap {
            self.stats.gaps += 1;
            self.stats.gap_bytes += len.unwrap_or(0);
            if let ParserSlot::Active(p) = &mut conn.parser {
                p.on_gap(ev.dir, len, &mut self.parse);
            }
        }

        if let ParserSlot::Undecided = conn.parser {
            match protocols::detect(ev.payload) {
                Some(spec) => {
                    conn.parser = ParserSlot::Active((spec.new_parser)(&ParserConfig {
                        depth: self.cfg.depth,
                        transport: conn.transport,
                        keep_head: self.cfg.keep_head,
                    }))
                }
                None => {
                    self.stats.unrecognised_events += 1;
                    return;
                }
            }
        }
        if let ParserSlot::Active(p) = &mut conn.parser {
            let seg = protocols::Segment {
                dir: ev.dir,
                payload: ev.payload,
                total_len: ev.total_len,
                start_ns: ev.start_ns,
                end_ns: ev.end_ns,
            };
            p.on_segment(&seg, &mut self.scratch, &mut self.parse);
        }
        let conn = &self.conns[&ev.sock_id];
        Self::flush(&mut self.scratch, conn, ev.sock_id, emit);
    }

    fn flush(scratch: &mut Vec<L7Call>, c: &Conn, sock_id: u64, emit: &mut dyn FnMut(Call)) {
        for l7 in scratch.drain(..) {
            emit(Call::new(
                l7,
                c.pid,
                c.tid,
                crate::event::comm_to_string(&c.comm),
                sock_id,
                c.local,
                c.peer,
            ));
        }
    }

    /// Forgets connections idle since before `now_ns - idle_timeout`.
    /// Connections tracked now, per process.
    pub fn open_per_pid(&self) -> HashMap<u32, u64> {
        let mut n: HashMap<u32, u64> = HashMap::default();
        for c in self.conns.values() {
            *n.entry(c.pid).or_default() += 1;
        }
        n
    }

    pub fn expire(&mut self, now_ns: u64) {
        let cutoff = now_ns.saturating_sub(self.cfg.idle_timeout_ns);
        let before = self.conns.len();
        self.conns.retain(|_, c| c.last_seen_ns >= cutoff);
        self.stats.conns_expired += (before - self.conns.len()) as u64;
    }

    /// At the cap: drop the least recently seen tenth of the table (amortised O(1) per insert).
    fn evict_oldest(&mut self) {
        let mut ages: Vec<u64> = self.conns.values().map(|c| c.last_seen_ns).collect();
        let k = (ages.len() / 10).max(1);
        let (_, kth, _) = ages.select_nth_unstable(k - 1);
        let cutoff = *kth;
        let before = self.conns.len();
        self.conns.retain(|_, c| c.last_seen_ns > cutoff);
        self.stats.conns_evicted += (before - self.conns.len()) as u64;
    }

    /// The session is over: counts what was still waiting for an answer. Close-delimited
    /// responses are not completed — the connection did not end, ebtop did.
    pub fn end_session(&mut self) {
        for (_, mut c) in self.conns.drain() {
            if let ParserSlot::Active(p) = &mut c.parser {
                let mut discard = Vec::new();
                let mut st = ParseStats::default();
                p.on_close(&mut discard, &mut st);
                self.parse.unanswered_requests += st.unanswered_requests;
            }
        }
    }
}
