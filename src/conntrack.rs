//! Connection tracker: per-socket state, stream positions, gap detection and the protocol
//! parser of each connection. Bounded: idle connections expire and a cap evicts the oldest.

// Integer keys (socket inodes) from the kernel: a fast non-keyed hash is safe here.
use rustc_hash::FxHashMap as HashMap;
use std::net::SocketAddr;

use crate::call::Call;
use crate::event::{Event, EventKind, SOCK_DGRAM, TLS_STREAM_BIT};
use crate::plugins::{PluginHost, SharedGuest};
use crate::protocols::{
    self, L7Call, ParseDepth, ParseStats, ParserConfig, ProtoSet, Protocol, ProtocolDescriptor,
    StreamParser, Transport,
};
use crate::source::sampling::{sample_hash, CutBoard, CutName, CUT_BOARD};

#[derive(Debug, Clone, Copy)]
pub struct TrackerConfig {
    pub max_conns: usize,
    /// Connections with no event for this long are forgotten.
    pub idle_timeout_ns: u64,
    pub depth: ParseDepth,
    /// Bytes of each message head kept in calls (see `ParserConfig::keep_head`).
    pub keep_head: usize,
    /// Connections of other protocols are left out (`--proto`).
    pub protocols: ProtoSet,
}

impl Default for TrackerConfig {
    fn default() -> Self {
        TrackerConfig {
            max_conns: 65536,
            idle_timeout_ns: 120_000_000_000,
            depth: ParseDepth::Full,
            keep_head: 0,
            protocols: ProtoSet::default(),
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
    /// Calls of a protocol `--proto` leaves out on a connection it selects (HTTP/2 calls with
    /// `--proto grpc`, gRPC calls with `--proto http2`).
    pub filtered_calls: u64,
    /// Connections whose parser started over where a CPU budget captured them again after
    /// cutting them (`FLAG_REJOINED`): the bytes between were shed, not lost (no gap).
    pub rejoins: u64,
}

impl TrackerStats {
    /// Adds another tracker's counts (wrapping like the counts themselves).
    pub fn add(&mut self, o: &TrackerStats) {
        self.data_events = self.data_events.wrapping_add(o.data_events);
        self.data_bytes = self.data_bytes.wrapping_add(o.data_bytes);
        self.uncaptured_bytes = self.uncaptured_bytes.wrapping_add(o.uncaptured_bytes);
        self.gaps = self.gaps.wrapping_add(o.gaps);
        self.gap_bytes = self.gap_bytes.saturating_add(o.gap_bytes);
        self.unrecognised_events = self.unrecognised_events.wrapping_add(o.unrecognised_events);
        self.conns_opened = self.conns_opened.wrapping_add(o.conns_opened);
        self.conns_closed = self.conns_closed.wrapping_add(o.conns_closed);
        self.conns_expired = self.conns_expired.wrapping_add(o.conns_expired);
        self.conns_evicted = self.conns_evicted.wrapping_add(o.conns_evicted);
        self.filtered_calls = self.filtered_calls.wrapping_add(o.filtered_calls);
        self.rejoins = self.rejoins.wrapping_add(o.rejoins);
    }
}

enum ParserSlot {
    Undecided,
    Active(Box<dyn StreamParser>),
    /// Of a protocol not selected (`--proto`): remembered so its events are left out cheaply.
    NotSelected,
}

/// Whether an event belongs to what the session looks at (see [`ConnTracker::handle`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    Selected,
    /// Of a connection of a protocol `--proto` left out (or not known to be one it asked for).
    NotSelected,
}

struct Conn {
    pid: u32,
    tid: u32,
    comm: [u8; 16],
    /// `comm` as text, converted when it changes rather than once per call, and shared by
    /// the connection's calls: no allocation per call, and a reader of the calls (the
    /// pipeline thread) finds the same bytes in its cache call after call.
    comm_text: std::sync::Arc<str>,
    local: SocketAddr,
    peer: SocketAddr,
    transport: Transport,
    /// Expected `seq` of the next record in each direction.
    next_seq: [Option<u64>; 2],
    parser: ParserSlot,
    last_seen_ns: u64,
    /// Bytes of the connection were lost (a stream gap) since its last call was handed on:
    /// the calls it hands on next carry `after_loss` (calls in the gap may be missing).
    lost: bool,
    /// The generation of cuts it was last named under (0: never; [`ConnTracker::name_cuts`]).
    cut_generation: u32,
}

pub struct ConnTracker {
    cfg: TrackerConfig,
    conns: HashMap<u64, Conn>,
    pub stats: TrackerStats,
    pub parse: ParseStats,
    scratch: Vec<L7Call>,
    /// This tracker's instances of the session's Wasm plugins (src/plugins/).
    plugins: PluginHost,
}

/// What parses a new connection.
enum Choice {
    /// A Wasm plugin that claims one of its ports.
    Plugin(SharedGuest),
    Builtin(&'static ProtocolDescriptor),
    None,
}

impl ConnTracker {
    pub fn new(cfg: TrackerConfig) -> Self {
        Self::with_plugins(cfg, PluginHost::for_tracker())
    }

    /// With these plugin instances (tests; [`ConnTracker::new`] makes the session's).
    pub fn with_plugins(cfg: TrackerConfig, plugins: PluginHost) -> Self {
        ConnTracker {
            cfg,
            conns: HashMap::default(),
            stats: TrackerStats::default(),
            parse: ParseStats::default(),
            scratch: Vec::new(),
            plugins,
        }
    }

    /// The parser a connection whose first payload is `ev`'s gets: a parse plugin claiming
    /// its ports first (stream sockets), then the built-in protocols by their first bytes.
    fn choose(&self, ev: &Event) -> Choice {
        let dgram = ev.sock_type == SOCK_DGRAM;
        if let Some(g) = self
            .plugins
            .parser_for(ev.local().port(), ev.peer().port(), dgram)
        {
            return Choice::Plugin(g.clone());
        }
        match detect(ev) {
            Some(spec) => Choice::Builtin(spec),
            None => Choice::None,
        }
    }

    fn wants(&self, c: &Choice) -> bool {
        match c {
            Choice::Plugin(_) => self.cfg.protocols.contains(Protocol::Plugin),
            Choice::Builtin(spec) => self.cfg.protocols.wants_parser(spec),
            Choice::None => false,
        }
    }

    /// The configuration, with the protocol selection now in force.
    pub fn config(&self) -> &TrackerConfig {
        &self.cfg
    }

    /// Leaves out connections of other protocols from now on.
    pub fn select_protocols(&mut self, protocols: ProtoSet) {
        self.cfg.protocols = protocols;
    }

    /// Connections tracked now (of the selected protocols).
    pub fn open_conns(&self) -> usize {
        if self.cfg.protocols.is_all() {
            return self.conns.len();
        }
        self.conns.values().filter(|c| self.is_selected(c)).count()
    }

    /// Whether a connection is part of the session (not one `--proto` leaves out).
    fn is_selected(&self, c: &Conn) -> bool {
        match c.parser {
            ParserSlot::Active(_) => true,
            ParserSlot::Undecided => self.cfg.protocols.is_all(),
            ParserSlot::NotSelected => false,
        }
    }

    /// Feeds one event; completed calls are appended to `emit` (what it holds is kept: a
    /// caller may gather several records' calls in it). With a protocol selection, events of
    /// connections not (yet) known to be of a selected protocol are `NotSelected` and leave
    /// no trace in the counts (the caller counts them as filtered).
    pub fn handle(&mut self, ev: &Event, emit: &mut Vec<Call>) -> Verdict {
        let all = self.cfg.protocols.is_all();
        match ev.kind {
            EventKind::Data => self.on_data(ev, emit),
            EventKind::Close => match self.conns.remove(&ev.conn_key()) {
                Some(c) if matches!(c.parser, ParserSlot::NotSelected) => Verdict::NotSelected,
                Some(mut c) => {
                    if !all && matches!(c.parser, ParserSlot::Undecided) {
                        return Verdict::NotSelected;
                    }
                    self.stats.conns_closed += 1;
                    if let ParserSlot::Active(p) = &mut c.parser {
                        p.on_close(&mut self.scratch, &mut self.parse);
                    }
                    Self::flush(
                        &mut self.scratch,
                        &mut c,
                        ev.conn_key(),
                        self.cfg.protocols,
                        &mut self.stats.filtered_calls,
                        emit,
                    );
                    Verdict::Selected
                }
                // A TLS socket whose plaintext never came (probes not on that process, or
                // the connection carried none): nothing was opened, nothing closes.
                None if all && ev.is_tls() => Verdict::Selected,
                None if all => {
                    self.stats.conns_closed += 1;
                    Verdict::Selected
                }
                None => Verdict::NotSelected,
            },
            // In recordings made before connect/accept were dropped from the hooks: nothing to
            // do, connections are counted when their data starts.
            EventKind::Connect | EventKind::Accept if all => Verdict::Selected,
            EventKind::Connect | EventKind::Accept => Verdict::NotSelected,
            // No connection: for the call chains (src/chains.rs), which link HTTP client
            // calls through them, and recorded so a replay links the same.
            EventKind::GoHttp => Verdict::Selected,
        }
    }

    fn on_data(&mut self, ev: &Event, emit: &mut Vec<Call>) -> Verdict {
        let all = self.cfg.protocols.is_all();
        let key = ev.conn_key();
        let known = match self.conns.get_mut(&key) {
            Some(c) if matches!(c.parser, ParserSlot::NotSelected) => {
                c.last_seen_ns = c.last_seen_ns.max(ev.end_ns);
                return Verdict::NotSelected;
            }
            Some(_) => true,
            None => false,
        };
        if !known && !all {
            // Decide before anything is counted: a connection not (yet) known to be of a
            // selected protocol is not part of this session. Undecided ones are not tracked:
            // tracking starts with the first message of a selected protocol.
            match self.choose(ev) {
                c if self.wants(&c) => {}
                Choice::None => return Verdict::NotSelected,
                _ => {
                    self.insert_conn(ev).parser = ParserSlot::NotSelected;
                    return Verdict::NotSelected;
                }
            }
        }
        self.stats.data_events += 1;
        // Wrapping: the numbers come from the kernel or a recording, which may be crafted.
        self.stats.data_bytes = self.stats.data_bytes.wrapping_add(ev.total_len);
        self.stats.uncaptured_bytes = self.stats.uncaptured_bytes.wrapping_add(ev.hidden());
        if !known {
            self.stats.conns_opened += 1;
            self.insert_conn(ev);
        }
        let conn = self.conns.get_mut(&key).expect("inserted above");
        conn.pid = ev.pid;
        conn.tid = ev.tid;
        if conn.comm != ev.comm {
            conn.comm = ev.comm;
            conn.comm_text = crate::event::comm_to_string(&ev.comm).into();
        }
        conn.last_seen_ns = conn.last_seen_ns.max(ev.end_ns);
        if conn.transport == Transport::Datagram {
            conn.peer = ev.peer();
        }
        let d = ev.dir.index();

        // Captured again after a budget cut the connection at a call boundary: its positions
        // went on over the bytes it shed, and this record begins a request or follows one.
        // What the parser held ends as at a close; it starts over here as on a connection met
        // mid-stream (no gap: nothing was lost). A flagged record where the position was
        // expected (the other direction's started it over, or nothing was shed) is plain.
        if ev.is_rejoined() && conn.next_seq[d].is_some_and(|expected| expected != ev.seq) {
            self.stats.rejoins += 1;
            if let ParserSlot::Active(p) = &mut conn.parser {
                p.on_close(&mut self.scratch, &mut self.parse);
            }
            Self::flush(
                &mut self.scratch,
                conn,
                key,
                self.cfg.protocols,
                &mut self.stats.filtered_calls,
                emit,
            );
            conn.parser = ParserSlot::Undecided;
            conn.next_seq = [None, None];
        }

        // Stream position check: a record's seq must continue where the last one ended.
        let gap = match conn.next_seq[d] {
            Some(expected) if ev.seq > expected => Some(Some(ev.seq - expected)),
            Some(expected) if ev.seq < expected => Some(None),
            _ => None,
        };
        conn.next_seq[d] = Some(ev.seq.wrapping_add(ev.total_len));
        if let Some(len) = gap {
            self.stats.gaps += 1;
            // Saturating: a crafted seq may jump by up to 2^64 bytes, more than once.
            self.stats.gap_bytes = self.stats.gap_bytes.saturating_add(len.unwrap_or(0));
            conn.lost = true;
            if let ParserSlot::Active(p) = &mut conn.parser {
                p.on_gap(ev.dir, len, &mut self.parse);
            }
        }

        if let ParserSlot::Undecided = conn.parser {
            let choice = self
                .plugins
                .parser_for(
                    conn.local.port(),
                    conn.peer.port(),
                    conn.transport == Transport::Datagram,
                )
                .map(|g| Choice::Plugin(g.clone()))
                .unwrap_or_else(|| match detect(ev) {
                    Some(spec) => Choice::Builtin(spec),
                    None => Choice::None,
                });
            let wanted = match &choice {
                Choice::Plugin(_) => self.cfg.protocols.contains(Protocol::Plugin),
                Choice::Builtin(spec) => self.cfg.protocols.wants_parser(spec),
                Choice::None => false,
            };
            let pcfg = ParserConfig {
                depth: self.cfg.depth,
                transport: conn.transport,
                keep_head: self.cfg.keep_head,
            };
            match choice {
                Choice::Plugin(guest) if wanted => {
                    let info = protocols::plugin::ConnInfo {
                        conn_id: key & !TLS_STREAM_BIT,
                        pid: conn.pid,
                        comm: conn.comm,
                        local: conn.local,
                        peer: conn.peer,
                    };
                    conn.parser = ParserSlot::Active(Box::new(
                        protocols::plugin::PluginParser::new(guest, &info, &pcfg),
                    ));
                }
                Choice::Builtin(spec) if wanted => {
                    let parser = (spec.new_parser)(&pcfg);
                    let enrich = enrich_proto(spec.folder)
                        .and_then(|p| Some((p, self.plugins.enrichers(p)?)));
                    conn.parser = ParserSlot::Active(match enrich {
                        Some((proto, guests)) => Box::new(crate::plugins::enrich::Enriched::new(
                            parser,
                            proto,
                            guests.to_vec(),
                            key & !TLS_STREAM_BIT,
                            conn.pid,
                        )),
                        None => parser,
                    })
                }
                // With a selection, decided above before anything was counted.
                _ => {
                    self.stats.unrecognised_events += 1;
                    return Verdict::Selected;
                }
            }
        }
        if let ParserSlot::Active(p) = &mut conn.parser {
            let seg = protocols::Segment {
                dir: ev.dir,
                payload: ev.payload,
                tail: ev.tail,
                total_len: ev.total_len,
                start_ns: ev.start_ns,
                end_ns: ev.end_ns,
                peer: (conn.transport == Transport::Datagram).then_some(conn.peer),
                pos: ev.seq,
            };
            p.on_segment(&seg, &mut self.scratch, &mut self.parse);
        }
        Self::flush(
            &mut self.scratch,
            conn,
            key,
            self.cfg.protocols,
            &mut self.stats.filtered_calls,
            emit,
        );
        Verdict::Selected
    }

    /// A new connection of `ev`'s socket, undecided (evicting the oldest tenth at the cap).
    fn insert_conn(&mut self, ev: &Event) -> &mut Conn {
        if self.conns.len() >= self.cfg.max_conns {
            self.evict_oldest();
        }
        self.conns.entry(ev.conn_key()).or_insert_with(|| Conn {
            pid: ev.pid,
            tid: ev.tid,
            comm: ev.comm,
            comm_text: crate::event::comm_to_string(&ev.comm).into(),
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
            lost: false,
            cut_generation: 0,
        })
    }

    /// Hands the parser's calls on; those of a protocol `--proto` leaves out (HTTP/2 calls
    /// when only gRPC is selected, and the reverse) are counted in `filtered_calls`.
    fn flush(
        scratch: &mut Vec<L7Call>,
        c: &mut Conn,
        key: u64,
        selected: ProtoSet,
        filtered: &mut u64,
        emit: &mut Vec<Call>,
    ) {
        let mut handed = false;
        for l7 in scratch.drain(..) {
            if !selected.contains(l7.proto) {
                *filtered += 1;
                continue;
            }
            let mut call = Call::new(
                l7,
                c.pid,
                c.tid,
                c.comm_text.clone(),
                key & !TLS_STREAM_BIT,
                c.local,
                c.peer,
            );
            call.tls = key & TLS_STREAM_BIT != 0;
            call.after_loss = c.lost;
            handed = true;
            emit.push(call);
        }
        if handed {
            c.lost = false;
        }
    }

    /// Connections tracked now, per process.
    pub fn open_per_pid(&self) -> HashMap<u32, u64> {
        let mut n: HashMap<u32, u64> = HashMap::default();
        for c in self.conns.values().filter(|c| self.is_selected(c)) {
            *n.entry(c.pid).or_default() += 1;
        }
        n
    }

    /// Forgets connections idle since before `now_ns - idle_timeout`; names the connections
    /// a CPU budget asks to cut (the session's [`CUT_BOARD`]).
    pub fn expire(&mut self, now_ns: u64) {
        let cutoff = now_ns.saturating_sub(self.cfg.idle_timeout_ns);
        let before = self.open_conns();
        self.conns.retain(|_, c| c.last_seen_ns >= cutoff);
        self.stats.conns_expired += (before - self.open_conns()) as u64;
        self.name_cuts(&CUT_BOARD);
    }

    /// Offers `board` the captured connections to cut, when it asks: those above the share
    /// (by the kernel's sample hash of their socket) whose parser knows the direction their
    /// requests take and has seen one call at a time ([`StreamParser::request_direction`]);
    /// each once per generation. TLS plaintext streams are left alone (their socket's bytes
    /// are not what the kernel would cut).
    pub fn name_cuts(&mut self, board: &CutBoard) {
        let Some((from_hash, generation)) = board.asked() else {
            return;
        };
        let mut names = Vec::new();
        let room = board.room();
        for (&key, c) in self.conns.iter_mut() {
            if names.len() >= room {
                break;
            }
            if key & TLS_STREAM_BIT != 0
                || c.transport != Transport::Stream
                || c.cut_generation == generation
                || u64::from(sample_hash(key)) < from_hash
            {
                continue;
            }
            let ParserSlot::Active(p) = &c.parser else {
                continue;
            };
            let Some(dir) = p.request_direction() else {
                continue;
            };
            c.cut_generation = generation;
            names.push(CutName {
                sock_id: key,
                request_dir: dir as u8,
                generation,
            });
        }
        if !names.is_empty() {
            board.offer(&names);
        }
    }

    /// At the cap: drop the least recently seen tenth of the table (amortised O(1) per insert).
    fn evict_oldest(&mut self) {
        let mut ages: Vec<u64> = self.conns.values().map(|c| c.last_seen_ns).collect();
        let k = (ages.len() / 10).max(1);
        let (_, kth, _) = ages.select_nth_unstable(k - 1);
        let cutoff = *kth;
        let before = self.open_conns();
        self.conns.retain(|_, c| c.last_seen_ns > cutoff);
        self.stats.conns_evicted += (before - self.open_conns()) as u64;
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

/// The protocol of a connection's first record seen: what its bytes start (user space's rule,
/// `protocols::detect`), else what the kernel recognised the connection as (the record's
/// `proto_hint`): later in a connection the kernel also takes what a first payload never is (a
/// Kafka request's header read apart from its length, on a connection older than ebtop), and
/// the connection's first record user space sees may be another of its messages.
fn detect(ev: &Event) -> Option<&'static protocols::ProtocolDescriptor> {
    protocols::detect(ev.payload).or_else(|| {
        let hint = ev.proto_hint;
        protocols::REGISTRY
            .iter()
            .find(|d| hint != 0 && d.kernel_id == Some(hint))
    })
}

/// The protocol of the built-in parser in `protocols/<folder>/` as enrich plugins name it,
/// if plugins may enrich its calls.
fn enrich_proto(folder: &str) -> Option<crate::plugins::manifest::EnrichProto> {
    use crate::plugins::manifest::EnrichProto;
    if folder == crate::protocols::http1::DESCRIPTOR.folder {
        Some(EnrichProto::Http)
    } else if folder == crate::protocols::redis::DESCRIPTOR.folder {
        Some(EnrichProto::Redis)
    } else {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event::{Direction, EventBuilder};
    use crate::protocols::Protocol;

    /// An HTTP exchange on socket 1 and bytes of no known protocol on socket 2, then closes.
    fn traffic() -> Vec<Vec<u8>> {
        let req = b"GET /a HTTP/1.1\r\nHost: x\r\n\r\n".as_slice();
        let resp = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok".as_slice();
        let blob = b"\x16\x03\x01\x02\x00 not a protocol ebtop knows".as_slice();
        let data = |dir, sock, seq: u64, t: u64, p: &[u8]| {
            EventBuilder::data(dir, sock, seq, p.len() as u64)
                .times(t, t + 10)
                .process(7, 7, "app")
                .v4([127, 0, 0, 1], 4000 + sock as u16, [127, 0, 0, 1], 80)
                .build(p)
        };
        vec![
            data(Direction::Egress, 1, 0, 100, req),
            data(Direction::Egress, 2, 0, 110, blob),
            data(Direction::Ingress, 1, 0, 200, resp),
            data(Direction::Ingress, 2, 0, 210, blob),
            EventBuilder::lifecycle(EventKind::Close, 1).build(b""),
            EventBuilder::lifecycle(EventKind::Close, 2).build(b""),
        ]
    }

    fn run(protocols: ProtoSet) -> (Vec<Verdict>, usize, ConnTracker) {
        let mut t = ConnTracker::new(TrackerConfig {
            protocols,
            ..TrackerConfig::default()
        });
        let mut calls = Vec::new();
        let verdicts = traffic()
            .iter()
            .map(|raw| t.handle(&Event::decode(raw).unwrap(), &mut calls))
            .collect();
        (verdicts, calls.len(), t)
    }

    /// Issue 43 (loss where it is read): the calls a connection hands on right after it lost
    /// bytes carry `after_loss` (the endpoint, process and connection rows they are counted
    /// in are marked); later calls do not.
    #[test]
    fn the_calls_after_a_gap_carry_the_loss() {
        let mut t = ConnTracker::new(TrackerConfig::default());
        let req = b"GET /a HTTP/1.1\r\nHost: x\r\n\r\n".as_slice();
        let resp = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok".as_slice();
        let n = (req.len() as u64, resp.len() as u64);
        let mut calls = Vec::new();
        // Exchanges at these positions: the third one's bytes (req and resp) were lost.
        for (i, k) in [0u64, 1, 3, 4].into_iter().enumerate() {
            let t0 = 1_000 * (i as u64 + 1);
            for (dir, seq, p) in [
                (Direction::Egress, k * n.0, req),
                (Direction::Ingress, k * n.1, resp),
            ] {
                let raw = EventBuilder::data(dir, 1, seq, p.len() as u64)
                    .times(t0, t0 + 10)
                    .process(7, 7, "app")
                    .v4([127, 0, 0, 1], 4000, [127, 0, 0, 1], 80)
                    .build(p);
                t.handle(&Event::decode(&raw).unwrap(), &mut calls);
            }
        }
        // The parser may wait for the next message start after the gap (the third exchange
        // or the fourth): the first call after it is marked, none else.
        let marks: Vec<bool> = calls.iter().map(|c| c.after_loss).collect();
        assert!(marks.len() >= 3, "{marks:?}");
        assert_eq!(marks[..3], [false, false, true], "{marks:?}");
        assert!(marks[3..].iter().all(|m| !m), "{marks:?}");
        assert_eq!(t.stats.gaps, 2);
    }

    /// Issue 51: a connection a CPU budget cut and then captured again starts its parser over
    /// at its first flagged record (a request's start), the positions having gone on over the
    /// exchanges it shed: no gap, nothing marked after a loss, every exchange seen made whole.
    /// A flagged record where the position was expected is plain; an unflagged jump is a gap.
    #[test]
    fn a_connection_captured_again_after_a_cut_starts_over_without_a_gap() {
        let req = b"GET /a HTTP/1.1\r\nHost: x\r\n\r\n".as_slice();
        let resp = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok".as_slice();
        let n = (req.len() as u64, resp.len() as u64);
        // Exchanges 0 and 1 captured, 2 and 3 shed, 4 and 5 captured again (4's records
        // flagged); then on another connection exchange 2's bytes lost without a flag.
        let run = |sock: u64, flagged: &[u64]| {
            let mut t = ConnTracker::new(TrackerConfig::default());
            let mut calls = Vec::new();
            for (i, k) in [0u64, 1, 4, 5].into_iter().enumerate() {
                let t0 = 1_000 * (i as u64 + 1);
                for (dir, seq, p) in [
                    (Direction::Egress, k * n.0, req),
                    (Direction::Ingress, k * n.1, resp),
                ] {
                    let mut b = EventBuilder::data(dir, sock, seq, p.len() as u64)
                        .times(t0, t0 + 10)
                        .process(7, 7, "app")
                        .v4([127, 0, 0, 1], 4000, [127, 0, 0, 1], 80);
                    if flagged.contains(&k) {
                        b = b.rejoined();
                    }
                    t.handle(&Event::decode(&b.build(p)).unwrap(), &mut calls);
                }
            }
            (t, calls)
        };
        let (t, calls) = run(1, &[4]);
        assert_eq!(calls.len(), 4);
        assert!(calls.iter().all(|c| !c.after_loss));
        assert_eq!((t.stats.rejoins, t.stats.gaps), (1, 0));
        assert_eq!(
            (t.parse.unanswered_requests, t.parse.damaged_messages),
            (0, 0)
        );
        // Flagged records at the expected positions (nothing shed): nothing starts over.
        let (t, calls) = run(2, &[1]);
        assert_eq!(t.stats.rejoins, 0);
        assert_eq!(
            t.stats.gaps, 2,
            "the unflagged jumps at exchange 4 are gaps (each way)"
        );
        assert!(calls.iter().any(|c| c.after_loss));
    }

    /// A connection older than ebtop whose first record user space sees is a Kafka request's
    /// body read apart from its length (a broker's): user space's rule, made for first payloads,
    /// does not take it, the kernel did (the record's hint): the connection gets the Kafka
    /// parser, nothing is unrecognised. Without the hint it stays unrecognised.
    #[test]
    fn the_kernels_recognition_decides_what_a_first_payload_rule_cannot() {
        let mut body = vec![0, 0, 0, 13, 0, 0, 0x37, 0x7e, 0, 4];
        body.extend_from_slice(b"perf");
        body.extend_from_slice(&[0; 20]);
        let kafka = protocols::kafka::DESCRIPTOR.kernel_id.unwrap();
        for (hint, unrecognised) in [(kafka, 0), (0, 1)] {
            let mut t = ConnTracker::new(TrackerConfig::default());
            let raw = EventBuilder::data(Direction::Ingress, 9, 4, body.len() as u64)
                .times(100, 110)
                .process(7, 7, "java")
                .v4([127, 0, 0, 1], 9092, [127, 0, 0, 1], 40000)
                .proto_hint(hint)
                .build(&body);
            t.handle(&Event::decode(&raw).unwrap(), &mut Vec::new());
            assert_eq!(t.stats.unrecognised_events, unrecognised, "hint {hint}");
        }
    }

    #[test]
    fn without_a_selection_every_connection_is_tracked() {
        let (verdicts, calls, t) = run(ProtoSet::default());
        assert!(verdicts.iter().all(|v| *v == Verdict::Selected));
        assert_eq!(calls, 1);
        assert_eq!(t.stats.data_events, 4);
        assert_eq!(t.stats.unrecognised_events, 2);
        assert_eq!((t.stats.conns_opened, t.stats.conns_closed), (2, 2));
    }

    #[test]
    fn a_selection_leaves_other_connections_out_without_a_trace() {
        let (verdicts, calls, t) = run(ProtoSet::of(Some(&[Protocol::Http])));
        use Verdict::*;
        assert_eq!(
            verdicts,
            [
                Selected,
                NotSelected,
                Selected,
                NotSelected,
                Selected,
                NotSelected
            ]
        );
        assert_eq!(calls, 1);
        assert_eq!(t.stats.data_events, 2);
        assert_eq!(t.stats.unrecognised_events, 0);
        assert_eq!((t.stats.conns_opened, t.stats.conns_closed), (1, 1));
        assert_eq!(t.open_conns(), 0);
    }

    #[test]
    fn huge_stream_position_jumps_saturate_the_gap_count() {
        let mut t = ConnTracker::new(TrackerConfig::default());
        for seq in [0, u64::MAX / 2, u64::MAX - 1, 0, u64::MAX] {
            let raw = EventBuilder::data(Direction::Egress, 1, seq, 1).build(b"x");
            t.handle(&Event::decode(&raw).unwrap(), &mut Vec::new());
        }
        assert_eq!(t.stats.gaps, 4);
        assert_eq!(t.stats.gap_bytes, u64::MAX);
    }

    #[test]
    fn an_empty_selection_selects_nothing() {
        let (verdicts, calls, t) = run(ProtoSet::of(Some(&[])));
        assert!(verdicts.iter().all(|v| *v == Verdict::NotSelected));
        assert_eq!(calls, 0);
        assert_eq!(t.stats, TrackerStats::default());
    }
}
