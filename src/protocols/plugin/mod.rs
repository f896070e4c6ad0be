//! The calls of protocols parsed by Wasm plugins (`--plugin`, src/plugins/, docs/plugins.md).
//!
//! A parse plugin says only what a message is: through the framing core ([`framing`]) it is
//! asked, from a message's buffered start, how long its header is and then its body
//! (`ebtop_frame`), and given each whole message (header and kept body) to answer with a call
//! half (`ebtop_message`): a request or a response, with a pairing key. Everything else is
//! this parser's, as for built-in protocols: bytes across syscalls, bodies past the snaplen
//! skipped by count, gaps, spans and timing, pairing (in order for key 0, by key otherwise:
//! [`matching`]), and what a loss means for pairing: after one, in-order pairing makes no
//! more calls on the connection (a response could be an earlier request's), by-key pairing
//! goes on.
//!
//! Connections are given to a plugin by port (its manifest's `ports`), never by
//! [`detect`](super::detect): the descriptor's `detect` accepts nothing.

use std::net::SocketAddr;

use super::framing::{self, Header, Loss, Streams};
use super::matching::{ById, InOrder};
use super::{
    CallKind, L7Call, MessageSpan, MetricNames, Outcome, ParseStats, ParserConfig, Protocol,
    ProtocolDescriptor, ResourceKind, Segment, StreamParser,
};
use crate::event::Direction;
use crate::plugins::abi::{self, off, FrameAnswer};
use crate::plugins::{Fault, SharedGuest};

pub const DESCRIPTOR: ProtocolDescriptor = ProtocolDescriptor {
    folder: "plugin",
    title: "Wasm plugins",
    calls: &[CallKind {
        proto: Protocol::Plugin,
        name: "plugin",
        // A plugin's method and resource are kept as it names them.
        resource: ResourceKind::RpcMethod,
        metrics: MetricNames {
            server: "rpc_server_duration_seconds",
            client: "rpc_client_duration_seconds",
            system: Some(("rpc_system", "ebtop_plugin")),
            method: "http_request_method",
            resource: "rpc_method",
        },
    }],
    kernel_id: None,
    datagrams: false,
    copy_whole: false,
    // Plugins take connections by port (conntrack), not by their first bytes.
    detect: |_| false,
    new_parser: |_| Box::new(NoPlugin),
    benches: &[],
};

/// The registry's parser for the `plugin` kind: never chosen (`detect` accepts nothing);
/// connections get a [`PluginParser`] from the tracker.
struct NoPlugin;

impl StreamParser for NoPlugin {
    fn on_segment(&mut self, seg: &Segment<'_>, _: &mut Vec<L7Call>, stats: &mut ParseStats) {
        stats.skipped(seg.total_len);
    }
    fn on_gap(&mut self, _: Direction, _: Option<u64>, _: &mut ParseStats) {}
    fn on_close(&mut self, _: &mut Vec<L7Call>, _: &mut ParseStats) {}
}

/// Pending requests per connection (each way of pairing); on a datagram socket, per peer.
const DEPTH: usize = 256;
/// Datagram requests pending on one socket, all peers together (a server socket answers
/// many): the built-in DNS parser's bound.
const DGRAM_PENDING: usize = 4096;

/// A datagram socket's requests waiting for their responses, per peer, oldest first (pairing
/// key and half). A request leaves unanswered — counted in `unanswered_requests`, as the
/// built-in DNS parser counts its queries — when it is sent again with its key (a retry),
/// when the socket closes, or once a later datagram of the socket is
/// [`dns::QUERY_TIMEOUT_NS`](super::dns::QUERY_TIMEOUT_NS) newer (checked at most once a
/// second of capture time, as DNS does); past [`DEPTH`] of one peer or [`DGRAM_PENDING`] in
/// all, the oldest (of the peer, or of the socket) is dropped (`pending_dropped`).
#[derive(Default)]
struct DgramPending {
    peers: rustc_hash::FxHashMap<Option<SocketAddr>, std::collections::VecDeque<(u64, Half)>>,
    len: usize,
    newest_ns: u64,
    expired_at_ns: u64,
}

/// What leaving a datagram request did: how many left, and whether one was of key 0 (whose
/// response, should it still come, would pair with a later request in order).
#[derive(Default, Clone, Copy)]
struct Left {
    n: u64,
    key0: bool,
}

impl DgramPending {
    /// Requests older than the timeout, once `now_ns` is a second past the last check.
    fn expire(&mut self, now_ns: u64) -> Left {
        self.newest_ns = self.newest_ns.max(now_ns);
        if self.newest_ns < self.expired_at_ns.saturating_add(1_000_000_000) {
            return Left::default();
        }
        self.expired_at_ns = self.newest_ns;
        let cutoff = self.newest_ns.saturating_sub(super::dns::QUERY_TIMEOUT_NS);
        self.remove_where(|_, h| h.span.last_end_ns < cutoff)
    }

    /// Removes the requests `gone` says, in every peer's queue.
    fn remove_where(&mut self, mut gone: impl FnMut(u64, &Half) -> bool) -> Left {
        let mut left = Left::default();
        self.peers.retain(|_, q| {
            q.retain(|(k, h)| {
                let g = gone(*k, h);
                if g {
                    left.n += 1;
                    left.key0 |= *k == 0;
                }
                !g
            });
            !q.is_empty()
        });
        self.len -= left.n as usize;
        left
    }

    /// Adds a request of `peer`: first takes out one of the same (non-zero) key from that
    /// peer (`retried`), then the peer's oldest when it has [`DEPTH`], or the socket's oldest
    /// at [`DGRAM_PENDING`] (`dropped`).
    fn push(&mut self, peer: Option<SocketAddr>, key: u64, half: Half) -> (Left, Left) {
        let (mut retried, mut dropped) = (Left::default(), Left::default());
        let q = self.peers.entry(peer).or_default();
        if key != 0 {
            if let Some(i) = q.iter().position(|(k, _)| *k == key) {
                q.remove(i);
                self.len -= 1;
                retried = Left { n: 1, key0: false };
            }
        }
        if q.len() >= DEPTH {
            if let Some((k, _)) = q.pop_front() {
                self.len -= 1;
                dropped = Left { n: 1, key0: k == 0 };
            }
        } else if self.len >= DGRAM_PENDING {
            // The socket's oldest: the earliest of the peers' oldest (bounded: the peers with
            // a request pending, at most DGRAM_PENDING).
            let oldest = self
                .peers
                .iter()
                .filter_map(|(p, q)| q.front().map(|(_, h)| (h.span.first_start_ns, *p)))
                .min_by_key(|(t, _)| *t)
                .map(|(_, p)| p);
            if let Some(p) = oldest {
                let q = self.peers.get_mut(&p).expect("a peer just seen");
                let (k, _) = q.pop_front().expect("a peer with a request");
                if q.is_empty() {
                    self.peers.remove(&p);
                }
                self.len -= 1;
                dropped = Left { n: 1, key0: k == 0 };
            }
        }
        self.peers.entry(peer).or_default().push_back((key, half));
        self.len += 1;
        (retried, dropped)
    }

    /// The request a response of `peer` with `key`, travelling `dir`, answers: the oldest
    /// of its key from that peer, sent the other way. Key 0 (in order) only when it is the
    /// peer's one key-0 request pending: with two, a datagram went unseen or unanswered and
    /// which the response answers is unknown (`Err`).
    fn take(
        &mut self,
        peer: Option<SocketAddr>,
        key: u64,
        dir: Direction,
    ) -> Result<Option<Half>, ()> {
        let Some(q) = self.peers.get_mut(&peer) else {
            return Ok(None);
        };
        let Some(i) = q.iter().position(|(k, _)| *k == key) else {
            return Ok(None);
        };
        if key == 0 && q.iter().filter(|(k, _)| *k == 0).count() > 1 {
            return Err(());
        }
        if q[i].1.dir == dir {
            return Ok(None);
        }
        let (_, half) = q.remove(i).expect("a position just found");
        if q.is_empty() {
            self.peers.remove(&peer);
        }
        self.len -= 1;
        Ok(Some(half))
    }

    fn clear(&mut self) -> u64 {
        let n = self.len as u64;
        self.peers.clear();
        self.len = 0;
        n
    }
}

/// What the plugin is told of a connection (fixed for its life).
#[derive(Debug, Clone, Copy)]
pub struct ConnInfo {
    pub conn_id: u64,
    pub pid: u32,
    pub comm: [u8; 16],
    pub local: SocketAddr,
    pub peer: SocketAddr,
}

/// The fixed part of every input header of a connection.
fn header_template(c: &ConnInfo) -> [u8; abi::HEADER_LEN] {
    let mut h = [0u8; abi::HEADER_LEN];
    h[off::ABI..off::ABI + 2].copy_from_slice(&1u16.to_le_bytes());
    h[off::FAMILY] = if c.local.is_ipv4() { 4 } else { 6 };
    h[off::CONN_ID..off::CONN_ID + 8].copy_from_slice(&c.conn_id.to_le_bytes());
    h[off::PID..off::PID + 4].copy_from_slice(&c.pid.to_le_bytes());
    h[off::LOCAL_PORT..off::LOCAL_PORT + 2].copy_from_slice(&c.local.port().to_le_bytes());
    h[off::PEER_PORT..off::PEER_PORT + 2].copy_from_slice(&c.peer.port().to_le_bytes());
    h[off::COMM..off::COMM + 16].copy_from_slice(&c.comm);
    let ip16 = |a: &SocketAddr| match a.ip() {
        std::net::IpAddr::V4(v4) => v4.to_ipv6_mapped().octets(),
        std::net::IpAddr::V6(v6) => v6.octets(),
    };
    h[off::LOCAL_IP..off::LOCAL_IP + 16].copy_from_slice(&ip16(&c.local));
    h[off::PEER_IP..off::PEER_IP + 16].copy_from_slice(&ip16(&c.peer));
    h
}

/// A call half the plugin answered.
#[derive(Debug)]
struct Half {
    method: String,
    resource: String,
    attrs: Vec<(String, String)>,
    span: MessageSpan,
    truncated: bool,
    dir: Direction,
}

pub struct PluginParser {
    guest: SharedGuest,
    plugin: std::sync::Arc<crate::plugins::Plugin>,
    name: String,
    template: [u8; abi::HEADER_LEN],
    streams: Streams<(), ()>,
    /// The header (or line) of the message being read in each direction.
    head: [Vec<u8>; 2],
    /// Its body's length.
    body_len: [u64; 2],
    in_order: InOrder<Half>,
    by_key: ById<Half>,
    /// A loss made in-order pairing unprovable: no more in-order calls on this connection.
    in_order_broken: bool,
    /// The plugin was disabled: the connection's bytes are counted, not parsed.
    stopped: bool,
    /// A datagram socket (`transport=udp`): each datagram one message, no framing.
    datagrams: bool,
    /// Datagram requests pending, per peer ([`DgramPending`]).
    dgram_pending: DgramPending,
    /// Datagram parts (kind 3) waiting for the next half of their direction.
    dgram_part: [Option<MessageSpan>; 2],
}

const DIRS: [Direction; 2] = [Direction::Egress, Direction::Ingress];

impl PluginParser {
    pub fn new(guest: SharedGuest, conn: &ConnInfo, cfg: &ParserConfig) -> PluginParser {
        let plugin = guest
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .plugin
            .clone();
        PluginParser {
            guest,
            name: plugin.name().to_owned(),
            plugin,
            template: header_template(conn),
            streams: Streams::new(framing::St::Header, 1),
            head: [Vec::new(), Vec::new()],
            body_len: [0; 2],
            in_order: InOrder::new(DEPTH),
            by_key: ById::new(DEPTH),
            in_order_broken: false,
            stopped: false,
            datagrams: cfg.transport == super::Transport::Datagram,
            dgram_pending: Default::default(),
            dgram_part: [None, None],
        }
    }

    /// Writes the header and `input` (cut at the ABI's room) into the guest's buffer and
    /// calls `hook`; None when the plugin faulted or is disabled (then `stopped`).
    fn call<R>(
        &mut self,
        hook: u8,
        d: usize,
        flags: u8,
        msg_len: u64,
        input: [&[u8]; 2],
        f: impl FnOnce(&mut crate::plugins::Guest, usize) -> Result<R, Fault>,
    ) -> Option<(R, Option<abi::Answer>)>
    where
        R: Copy + Into<i64>,
    {
        let mut guest = self.guest.lock().unwrap_or_else(|e| e.into_inner());
        let Some(buf) = guest.buffer() else {
            self.stopped = true;
            return None;
        };
        let (hdr, room) = buf.split_at_mut(abi::HEADER_LEN);
        hdr.copy_from_slice(&self.template);
        hdr[off::HOOK] = hook;
        hdr[off::DIR] = d as u8;
        let mut n = 0;
        let mut truncated = false;
        for part in input {
            let take = part.len().min(room.len() - n);
            room[n..n + take].copy_from_slice(&part[..take]);
            truncated |= take < part.len();
            n += take;
        }
        hdr[off::FLAGS] = flags | if truncated { abi::FLAG_TRUNCATED } else { 0 };
        hdr[off::MSG_LEN..off::MSG_LEN + 8].copy_from_slice(&msg_len.to_le_bytes());
        hdr[off::INPUT_LEN..off::INPUT_LEN + 4].copy_from_slice(&(n as u32).to_le_bytes());
        let r = match f(&mut guest, n) {
            Ok(r) => r,
            Err(Fault::Disabled) => {
                self.stopped = true;
                return None;
            }
            Err(_) => {
                self.stopped = guest.plugin.is_disabled();
                return None;
            }
        };
        if hook != abi::HOOK_MESSAGE || r.into() <= 0 {
            return Some((r, None));
        }
        match guest.answer(r.into() as i32) {
            Ok(a) => Some((r, Some(a))),
            Err(_) => {
                self.stopped = guest.plugin.is_disabled();
                None
            }
        }
    }

    /// Asks `ebtop_frame` about a header (`line`: a whole line header).
    fn frame(&mut self, d: usize, hdr: &[u8], line: bool) -> Header<()> {
        let flags = if line { FLAG_LINE } else { 0 };
        let Some((r, _)) = self.call(abi::HOOK_FRAME, d, flags, 0, [hdr, &[]], |g, n| g.frame(n))
        else {
            return Header::NotAFrame;
        };
        match abi::frame_answer(r, framing::MAX_HEADER) {
            FrameAnswer::NotAFrame => Header::NotAFrame,
            FrameAnswer::NeedHeader(m) if !line && m > hdr.len() => Header::NeedMore(m),
            FrameAnswer::Line(max) if !line && max >= hdr.len() => Header::Line { max },
            FrameAnswer::Body(body_len) => {
                self.head[d].clear();
                self.head[d].extend_from_slice(hdr);
                self.body_len[d] = body_len;
                let keep = abi::KEEP.saturating_sub(hdr.len());
                self.streams.dirs[d].start_body(keep.min(body_len as usize));
                Header::Frame {
                    body_len,
                    kind: (),
                    more: false,
                }
            }
            // Asked for what it was given, or outside the ABI: a fault of the plugin.
            _ => {
                self.plugin.bad_frame_answer();
                Header::NotAFrame
            }
        }
    }

    fn message(&mut self, d: usize, body: &[u8], out: &mut Vec<L7Call>, stats: &mut ParseStats) {
        let head = std::mem::take(&mut self.head[d]);
        let body_len = self.body_len[d];
        let body_cut = (body.len() as u64) < body_len;
        let msg_len = (head.len() as u64).saturating_add(body_len);
        let flags = if body_cut || self.streams.dirs[d].acc.truncated {
            abi::FLAG_TRUNCATED
        } else {
            0
        };
        let answered = self.call(
            abi::HOOK_MESSAGE,
            d,
            flags,
            msg_len,
            [&head, body],
            |g, n| g.message(n),
        );
        self.head[d] = head;
        if let Some((_, Some(a))) = &answered {
            if a.kind == abi::HALF_PART {
                // Its bytes stay counted for the next half of this direction.
                return;
            }
        }
        // The call is truncated when bytes were not captured; a body captured whole but
        // longer than the guest's share (`abi::KEEP`) is flagged to the guest only.
        let (span, truncated) = self.streams.dirs[d].acc.take();
        let Some((r, answer)) = answered else {
            stats.damaged_messages += 1;
            return;
        };
        if r < 0 {
            // The plugin says it is no message of its protocol.
            stats.damaged_messages += 1;
            return;
        }
        let Some(a) = answer else {
            // Neither request nor response (a heartbeat): no call.
            return;
        };
        let dir = DIRS[d];
        match a.kind {
            abi::HALF_REQUEST => {
                let half = Half {
                    method: a.method,
                    resource: a.resource,
                    attrs: a.attrs,
                    span,
                    truncated,
                    dir,
                };
                if a.pair_key != 0 {
                    self.by_key.insert(a.pair_key, half);
                } else if self.in_order_broken {
                    stats.unanswered_requests += 1;
                } else if self.in_order.push_or_drop(half).is_some() {
                    // Its answer would come first and pair with the next request.
                    stats.pending_dropped += 1;
                    self.break_in_order(stats);
                }
            }
            abi::HALF_RESPONSE => {
                let req = if a.pair_key != 0 {
                    self.by_key.take(a.pair_key)
                } else if self.in_order_broken {
                    None
                } else {
                    self.in_order.pop()
                };
                let Some(req) = req.filter(|r| r.dir != dir) else {
                    stats.unmatched_responses += 1;
                    return;
                };
                out.push(self.make_call(req, a, span, truncated));
            }
            _ => {}
        }
    }

    /// The call of a request half and the response's answer.
    fn make_call(&self, req: Half, a: abi::Answer, span: MessageSpan, truncated: bool) -> L7Call {
        let mut details = Vec::with_capacity(1 + req.attrs.len() + a.attrs.len());
        details.push(("plugin", self.name.clone()));
        for (k, v) in req.attrs.into_iter().chain(a.attrs) {
            if let Some(key) = crate::plugins::intern_key(&self.name, &k) {
                details.push((key, v));
            }
        }
        L7Call {
            proto: Protocol::Plugin,
            request_dir: req.dir,
            method: req.method,
            resource: req.resource,
            version: "",
            status: a.status,
            status_text: a.status_text,
            // A plugin that leaves it unsaid is not taken to mean success.
            outcome: a.outcome.unwrap_or(Outcome::Unknown),
            req: req.span,
            resp: span,
            truncated: req.truncated || truncated,
            end_inferred: false,
            details,
            req_head: Default::default(),
            resp_head: Default::default(),
        }
    }

    /// One datagram: one whole message, handed to `ebtop_message` as captured (flag
    /// datagram; truncated when the datagram was longer than its capture), the header's peer
    /// being the datagram's. Pairing is per peer: by key, or in order of that peer's requests.
    fn on_datagram(&mut self, seg: &Segment<'_>, out: &mut Vec<L7Call>, stats: &mut ParseStats) {
        let d = seg.dir.index();
        let expired = self.dgram_pending.expire(seg.end_ns);
        stats.unanswered_requests += expired.n;
        if expired.key0 {
            // Its response, should it still come, would pair with a later request.
            self.break_in_order_dgram(stats);
        }
        if let Some(peer) = seg.peer {
            let ip = match peer.ip() {
                std::net::IpAddr::V4(v4) => v4.to_ipv6_mapped().octets(),
                std::net::IpAddr::V6(v6) => v6.octets(),
            };
            self.template[off::PEER_PORT..off::PEER_PORT + 2]
                .copy_from_slice(&peer.port().to_le_bytes());
            self.template[off::PEER_IP..off::PEER_IP + 16].copy_from_slice(&ip);
        }
        let cut = (seg.payload.len() as u64) < seg.total_len;
        let flags = abi::FLAG_DATAGRAM | if cut { abi::FLAG_TRUNCATED } else { 0 };
        let answered = self.call(
            abi::HOOK_MESSAGE,
            d,
            flags,
            seg.total_len,
            [seg.payload, &[]],
            |g, n| g.message(n),
        );
        let mut span = MessageSpan::starting(seg);
        span.bytes = seg.total_len;
        let Some((r, answer)) = answered else {
            stats.damaged_messages += 1;
            return;
        };
        if r < 0 {
            stats.damaged_messages += 1;
            return;
        }
        let Some(a) = answer else { return };
        if a.kind == abi::HALF_PART {
            // Joins the next half of its direction, as a part does on a stream.
            let joined = match self.dgram_part[d].take() {
                Some(p) => join(p, span),
                None => span,
            };
            self.dgram_part[d] = Some(joined);
            return;
        }
        if let Some(p) = self.dgram_part[d].take() {
            span = join(p, span);
        }
        let dir = DIRS[d];
        let half = |a: abi::Answer| Half {
            method: a.method,
            resource: a.resource,
            attrs: a.attrs,
            span,
            truncated: cut,
            dir,
        };
        match a.kind {
            abi::HALF_REQUEST => {
                let key = a.pair_key;
                if key == 0 && self.in_order_broken {
                    stats.unanswered_requests += 1;
                    return;
                }
                let (retried, dropped) = self.dgram_pending.push(seg.peer, key, half(a));
                // Sent again with the same key to the same peer: the first went unanswered.
                stats.unanswered_requests += retried.n;
                stats.pending_dropped += dropped.n;
                if dropped.key0 {
                    // Its answer would pair with a later request of that peer.
                    self.break_in_order_dgram(stats);
                }
            }
            abi::HALF_RESPONSE => {
                let key = a.pair_key;
                let req = if key == 0 && self.in_order_broken {
                    Ok(None)
                } else {
                    self.dgram_pending.take(seg.peer, key, dir)
                };
                match req {
                    Ok(Some(req)) => out.push(self.make_call(req, a, span, cut)),
                    Ok(None) => stats.unmatched_responses += 1,
                    Err(()) => {
                        stats.unmatched_responses += 1;
                        self.break_in_order_dgram(stats);
                    }
                }
            }
            _ => {}
        }
    }

    /// After a loss on a datagram socket no request is paired in order any more.
    fn break_in_order_dgram(&mut self, stats: &mut ParseStats) {
        if !self.in_order_broken {
            self.in_order_broken = true;
            stats.unanswered_requests += self.dgram_pending.remove_where(|k, _| k == 0).n;
        }
    }

    fn break_in_order(&mut self, stats: &mut ParseStats) {
        if !self.in_order_broken {
            self.in_order_broken = true;
            stats.unanswered_requests += self.in_order.len() as u64;
            self.in_order.drain().for_each(drop);
        }
    }
}

/// Header flag of a frame call: the input is a whole line header (after `FRAME_LINE`).
pub const FLAG_LINE: u8 = 2;

/// A part's span joined to the span of the half that follows it in its direction.
fn join(part: MessageSpan, next: MessageSpan) -> MessageSpan {
    MessageSpan {
        first_start_ns: part.first_start_ns,
        first_end_ns: part.first_end_ns,
        first_pos: part.first_pos,
        bytes: part.bytes.saturating_add(next.bytes),
        syscalls: part.syscalls.saturating_add(next.syscalls),
        ..next
    }
}

impl framing::Framer for PluginParser {
    type Kind = ();
    type State = ();
    const MIN_HEADER: usize = 1;
    const FINISH_BODY_BEFORE_UNSEEN: bool = true;

    fn streams(&mut self) -> &mut Streams<(), ()> {
        &mut self.streams
    }

    fn streams_ref(&self) -> &Streams<(), ()> {
        &self.streams
    }

    fn stopped(&self) -> bool {
        self.stopped
    }

    fn pending(&self) -> usize {
        self.in_order.len() + self.by_key.len()
    }

    fn header(
        &mut self,
        d: usize,
        hdr: &[u8],
        _out: &mut Vec<L7Call>,
        _stats: &mut ParseStats,
    ) -> Header<()> {
        self.frame(d, hdr, false)
    }

    fn line(
        &mut self,
        d: usize,
        line: &[u8],
        _out: &mut Vec<L7Call>,
        _stats: &mut ParseStats,
    ) -> Header<()> {
        self.frame(d, line, true)
    }

    fn frame_done(
        &mut self,
        d: usize,
        _kind: (),
        body: &[u8],
        out: &mut Vec<L7Call>,
        stats: &mut ParseStats,
    ) {
        self.message(d, body, out, stats);
    }

    fn resync(&self, _d: usize, _p: &[u8]) -> bool {
        // Where a message starts is the plugin's to say: a lost direction tries each segment.
        true
    }

    fn lost(&mut self, _d: usize, _why: Loss, stats: &mut ParseStats) {
        // In order, a later response may answer a request of the lost bytes: none is paired
        // from here on. By key, pending requests may still get theirs.
        self.break_in_order(stats);
    }
}

impl StreamParser for PluginParser {
    fn on_segment(&mut self, seg: &Segment<'_>, out: &mut Vec<L7Call>, stats: &mut ParseStats) {
        if self.stopped || self.plugin.is_disabled() {
            self.stopped = true;
            stats.skipped(seg.total_len);
            return;
        }
        if self.datagrams {
            self.on_datagram(seg, out, stats);
        } else {
            framing::on_segment(self, seg, out, stats);
        }
    }

    fn on_gap(&mut self, dir: Direction, len: Option<u64>, stats: &mut ParseStats) {
        if self.datagrams {
            // Datagrams were lost: a later response of a peer could answer one of them.
            self.break_in_order_dgram(stats);
        } else {
            framing::on_gap(self, dir, len, stats);
        }
    }

    fn on_close(&mut self, _out: &mut Vec<L7Call>, stats: &mut ParseStats) {
        stats.unanswered_requests += (self.in_order.len() + self.by_key.len()) as u64;
        stats.unanswered_requests += self.dgram_pending.clear();
        self.in_order.drain().for_each(drop);
        self.by_key.retain(|_| false);
    }
}

#[cfg(test)]
mod tests;
