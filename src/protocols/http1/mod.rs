//! HTTP/1.0 and HTTP/1.1 over a byte stream: keep-alive, pipelining, Content-Length, chunked,
//! bodies larger than the snaplen (skipped by count), HEAD/1xx/204/304, 100-continue, upgrades.
//!
//! Framing follows RFC 9112 §6.3. Headers are parsed with httparse (`head.rs`), straight from
//! the syscall's bytes when they arrive whole, from a bounded buffer when split over syscalls;
//! chunked bodies by a byte-wise state machine (`chunked.rs`). This file follows each direction
//! of a connection through its messages and pairs requests with responses.

mod chunked;
mod head;

use super::http2::{Http2Parser, UpgradeRequest};
use super::matching::InOrder;
use super::{
    BenchFixture, CallKind, CapturedHead, L7Call, MessageSpan, Outcome, ParseDepth, ParseStats,
    ParserConfig, Protocol, ProtocolDescriptor, ResourceKind, Segment, StreamParser,
};
use crate::event::Direction;
use chunked::{chunk_step, ChunkState, LAST_CHUNK_TAIL};
pub use head::redact_head;
use head::{parse_head, Head, HeadKind, HeadParse, Kind};

/// The protocol's entry in [`super::REGISTRY`].
pub const DESCRIPTOR: ProtocolDescriptor = ProtocolDescriptor {
    folder: "http1",
    title: "HTTP/1.x",
    calls: &[CallKind {
        proto: Protocol::Http,
        name: "http",
        resource: ResourceKind::UrlPath,
        metrics: super::MetricNames::http("1.1"),
    }],
    kernel_id: Some(1),
    datagrams: false,
    copy_whole: false,
    detect: is_message_start,
    new_parser: |cfg| Box::new(Http1Parser::new(cfg)),
    benches: &[BenchFixture {
        file: "wrk_nginx.seg",
        what: "parse wrk against nginx",
        proto: Protocol::Http,
        calls: 20,
    }],
};

const METHODS: &[&[u8]] = &[
    b"GET ",
    b"POST ",
    b"PUT ",
    b"HEAD ",
    b"DELETE ",
    b"PATCH ",
    b"OPTIONS ",
    b"CONNECT ",
    b"TRACE ",
];
/// Largest header block kept while waiting for its end; beyond it the message is damaged.
const MAX_HEADER_BYTES: usize = 64 * 1024;
/// Requests waiting for responses on one connection before deeper pipelines draw on the
/// shared budget (`matching::SHARED_PENDING_BYTES`).
const MAX_PENDING: usize = 256;
const MAX_ORPHANS: usize = 4;

/// A method, a space, and the start of a request target: origin form (`/x`), asterisk form
/// (`*`), absolute form (`http://…`), or for CONNECT an authority (`host:port`). A word after
/// the method (`GET key`: a Redis inline command) is not HTTP.
pub fn is_request_start(p: &[u8]) -> bool {
    METHODS.iter().any(|m| {
        p.strip_prefix(*m)
            .is_some_and(|target| match target.first() {
                None => true, // the capture ends here
                Some(b'/' | b'*' | b'h' | b'H') => true,
                Some(_) => *m == b"CONNECT ",
            })
    })
}
pub fn is_response_start(p: &[u8]) -> bool {
    p.starts_with(b"HTTP/1.")
}
/// Does `p` begin an HTTP/1.x request or response?
pub fn is_message_start(p: &[u8]) -> bool {
    is_request_start(p) || is_response_start(p)
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// The next byte starts a message.
    Start,
    /// Accumulating the header block.
    Headers,
    Body {
        remaining: u64,
    },
    Chunked(ChunkState),
    /// Response body delimited by the connection's close.
    UntilClose,
    /// Out of sync: skip until a syscall starts with a message start.
    Lost,
    /// Not HTTP any more (101 Switching Protocols, CONNECT tunnel).
    Tunnel,
}

#[derive(Debug, Clone)]
struct Request {
    id: u64,
    method: String,
    resource: String,
    version: &'static str,
    host: Option<String>,
    /// Its valid `traceparent` header (`head::HeadKind::Request`).
    traceparent: Option<String>,
    head: CapturedHead,
    span: MessageSpan,
    truncated: bool,
    complete: bool,
    /// Asks to switch to HTTP/2 in clear text (`Upgrade: h2c`).
    h2c: bool,
    /// Bytes of its head (the rest of `span.bytes` is its body).
    head_len: u64,
}

#[derive(Debug, Clone)]
struct Response {
    status: u16,
    version: &'static str,
    head: CapturedHead,
    span: MessageSpan,
    truncated: bool,
    tunnel_after: bool,
    /// Agrees to switch to HTTP/2 in clear text (`101` with `Upgrade: h2c`).
    h2c: bool,
}

/// The message a direction is in the middle of.
#[derive(Debug, Clone)]
enum Current {
    None,
    /// The request with this id, kept in `pending` (responses need its method early).
    Request {
        id: u64,
        span: MessageSpan,
        truncated: bool,
    },
    Response(Response),
}

#[derive(Debug)]
struct DirStream {
    state: State,
    hdr_buf: Vec<u8>,
    cur: Current,
    /// Segment counter value that last extended `cur`'s span.
    cur_seg: u64,
    /// Bytes of interim (1xx) responses, counted into the final response.
    interim_bytes: u64,
    kind: Option<Kind>,
    /// The body length of a response whose request was not seen (so whether it answers a
    /// HEAD is unknown), while none of that body has come.
    unsure_body: Option<u64>,
}

impl DirStream {
    fn new() -> Self {
        DirStream {
            state: State::Start,
            hdr_buf: Vec::new(),
            cur: Current::None,
            cur_seg: 0,
            interim_bytes: 0,
            kind: None,
            unsure_body: None,
        }
    }
    fn span_mut(&mut self) -> Option<&mut MessageSpan> {
        match &mut self.cur {
            Current::None => None,
            Current::Request { span, .. } => Some(span),
            Current::Response(r) => Some(&mut r.span),
        }
    }
    /// Saturating, as every byte count here: lengths come from the kernel or a recording,
    /// which may claim up to 2^64 bytes per syscall or gap.
    fn add_bytes(&mut self, n: u64) {
        if let Some(s) = self.span_mut() {
            s.bytes = s.bytes.saturating_add(n);
        }
    }
    fn mark_truncated(&mut self) {
        match &mut self.cur {
            Current::None => {}
            Current::Request { truncated, .. } => *truncated = true,
            Current::Response(r) => r.truncated = true,
        }
    }
}

pub struct Http1Parser {
    depth: ParseDepth,
    keep_head: usize,
    dirs: [DirStream; 2],
    pending: InOrder<Request>,
    next_id: u64,
    orphans: std::collections::VecDeque<Response>,
    seg_counter: u64,
    /// Direction requests travel, once a message has shown it.
    request_dir: Option<usize>,
    /// After `Upgrade: h2c` was agreed: the HTTP/2 parser the connection is handed to.
    h2: Option<Box<Http2Parser>>,
    /// Answers still to come for requests dropped from a full `pending` (the oldest): they
    /// come before the pending requests' and are skipped, framed without their method.
    answers_to_skip: u64,
    /// Direction of the last segment (turns: [`StreamParser::request_direction`]).
    last_dir: Option<usize>,
    /// A turn into the request direction came while a call was under way (pipelining, a
    /// body after `100 Continue`, a gap): a turn does not mark a call's start here.
    calls_overlapped: bool,
}

impl Http1Parser {
    pub fn new(cfg: &ParserConfig) -> Self {
        Http1Parser {
            depth: cfg.depth,
            keep_head: cfg.keep_head,
            dirs: [DirStream::new(), DirStream::new()],
            pending: InOrder::new(MAX_PENDING),
            next_id: 0,
            orphans: Default::default(),
            seg_counter: 0,
            request_dir: None,
            h2: None,
            answers_to_skip: 0,
            last_dir: None,
            calls_overlapped: false,
        }
    }

    /// Nothing of a call is under way for a segment starting at `start_ns`: the next byte in
    /// either direction starts a message, and every request seen was answered. A response
    /// held for a request not seen (`orphans`) that ended before the segment answered one sent
    /// before ebtop saw the connection: no call under way (one that ended later may be this
    /// very request's, its record crossing it from another CPU: under way).
    fn between_calls(&self, start_ns: u64) -> bool {
        self.dirs.iter().all(|ds| ds.state == State::Start)
            && self.pending.is_empty()
            && self.orphans.iter().all(|o| o.span.last_end_ns < start_ns)
            && self.answers_to_skip == 0
    }

    /// Makes `seg` part of direction d's current message span.
    fn touch(&mut self, d: usize, seg: &Segment) {
        let counter = self.seg_counter;
        let ds = &mut self.dirs[d];
        if ds.cur_seg != counter {
            ds.cur_seg = counter;
            if let Some(s) = ds.span_mut() {
                s.extend(seg);
            }
        }
    }

    fn lose_sync(&mut self, d: usize, stats: &mut ParseStats) {
        let ds = &mut self.dirs[d];
        if ds.state != State::Lost {
            stats.desyncs += 1;
        }
        ds.state = State::Lost;
        ds.hdr_buf.clear();
    }

    /// Drops direction d's message in progress as damaged.
    fn damage_current(&mut self, d: usize, stats: &mut ParseStats) {
        let ds = &mut self.dirs[d];
        match std::mem::replace(&mut ds.cur, Current::None) {
            Current::None => {}
            Current::Request { id, .. } => {
                stats.damaged_messages += 1;
                if self.pending.back().is_some_and(|r| r.id == id) {
                    self.pending.pop_back();
                }
            }
            Current::Response(_) => {
                stats.damaged_messages += 1;
                // The damaged response answered the oldest pending request; which later ones
                // its lost bytes also answered is unknowable, so none is paired by guesswork.
                self.distrust_pairing(stats);
            }
        }
        self.dirs[d].interim_bytes = 0;
    }

    /// Responses were lost in an unknown number: pending requests can no longer be paired.
    fn distrust_pairing(&mut self, stats: &mut ParseStats) {
        let n = self.pending.len() as u64;
        self.pending.drain().for_each(drop);
        stats.damaged_messages += n;
        // Which answers are the dropped requests' is as unknowable now.
        self.answers_to_skip = 0;
    }

    /// Completes an open-ended message (end not visible) at its last seen syscall.
    fn finish_open_ended(&mut self, d: usize, out: &mut Vec<L7Call>, stats: &mut ParseStats) {
        if !matches!(self.dirs[d].cur, Current::None) {
            stats.inferred_ends += 1;
            self.complete(d, true, out, stats);
        }
    }

    fn start_message(&mut self, d: usize, data: &[u8], seg: &Segment) {
        let kind = match self.request_dir {
            Some(rd) if rd == d => Kind::Request,
            Some(_) => Kind::Response,
            None if is_response_start(data) || b"HTTP/1.".starts_with(data) => Kind::Response,
            None => Kind::Request,
        };
        let ds = &mut self.dirs[d];
        ds.kind = Some(kind);
        ds.state = State::Headers;
        ds.hdr_buf.clear();
        ds.cur_seg = self.seg_counter;
        let span = MessageSpan::starting_at(seg, data);
        ds.cur = match kind {
            // The id is assigned when the header block is complete.
            Kind::Request => Current::Request {
                id: u64::MAX,
                span,
                truncated: false,
            },
            Kind::Response => Current::Response(Response {
                status: 0,
                version: "1.1",
                head: CapturedHead::default(),
                span,
                truncated: false,
                tunnel_after: false,
                h2c: false,
            }),
        };
    }

    /// Header block of direction d complete: decide the body framing.
    fn on_head(&mut self, d: usize, head: Head, out: &mut Vec<L7Call>, stats: &mut ParseStats) {
        self.dirs[d].add_bytes(head.len as u64);
        let captured = head.captured;
        match head.kind {
            HeadKind::Request {
                method,
                resource,
                version,
                host,
                traceparent,
            } => {
                self.request_dir = Some(d);
                // A request while an earlier one awaits its answer: pipelining (perhaps in
                // the very segment that carried both, before any turn could show it).
                if !self.pending.is_empty() || self.answers_to_skip > 0 {
                    self.calls_overlapped = true;
                }
                let id = self.next_id;
                self.next_id += 1;
                let (span, truncated) = match &mut self.dirs[d].cur {
                    Current::Request {
                        id: cur_id,
                        span,
                        truncated,
                    } => {
                        *cur_id = id;
                        (*span, *truncated)
                    }
                    _ => (MessageSpan::default(), false),
                };
                let dropped = self.pending.push_or_drop(Request {
                    id,
                    method,
                    resource,
                    version,
                    host,
                    traceparent,
                    head: captured,
                    span,
                    truncated,
                    complete: false,
                    h2c: head.h2c,
                    head_len: head.len as u64,
                });
                if dropped.is_some() {
                    stats.pending_dropped += 1;
                    self.answers_to_skip += 1;
                }
                // An open-ended response in the other direction ends where a new request starts.
                let other = 1 - d;
                if self.dirs[other].state == State::Lost {
                    self.finish_open_ended(other, out, stats);
                }
                let ds = &mut self.dirs[d];
                ds.state = if head.chunked {
                    State::Chunked(ChunkState::FIRST_SIZE)
                } else {
                    match head.content_length {
                        Some(n) if n > 0 => State::Body { remaining: n },
                        _ => State::Start,
                    }
                };
                if ds.state == State::Start {
                    self.complete(d, false, out, stats);
                }
            }
            HeadKind::Response { status, version } => {
                self.request_dir = Some(1 - d);
                let ds = &mut self.dirs[d];
                if (100..200).contains(&status) && status != 101 {
                    // Interim response: its bytes count into the final response.
                    if let Current::Response(r) = &ds.cur {
                        ds.interim_bytes = ds.interim_bytes.saturating_add(r.span.bytes);
                    }
                    ds.cur = Current::None;
                    ds.state = State::Start;
                    return;
                }
                let req_method = if self.answers_to_skip > 0 {
                    None // a dropped request's: its method is gone
                } else {
                    self.pending.front().map(|r| r.method.as_str())
                };
                let no_body = req_method == Some("HEAD")
                    || status == 204
                    || status == 304
                    || status == 101
                    || (req_method == Some("CONNECT") && (200..300).contains(&status));
                let tunnel_after = status == 101
                    || (req_method == Some("CONNECT") && (200..300).contains(&status));
                if let Current::Response(r) = &mut ds.cur {
                    r.status = status;
                    r.version = version;
                    r.tunnel_after = tunnel_after;
                    r.h2c = status == 101 && head.h2c;
                    r.head = captured;
                }
                ds.state = if no_body {
                    State::Start
                } else if head.chunked {
                    State::Chunked(ChunkState::FIRST_SIZE)
                } else {
                    match head.content_length {
                        Some(0) => State::Start,
                        Some(n) => State::Body { remaining: n },
                        None => State::UntilClose,
                    }
                };
                ds.unsure_body = match ds.state {
                    State::Body { remaining } if req_method.is_none() => Some(remaining),
                    _ => None,
                };
                if ds.state == State::Start {
                    self.complete(d, false, out, stats);
                }
            }
        }
    }

    /// Direction d's current message is complete.
    fn complete(
        &mut self,
        d: usize,
        inferred: bool,
        out: &mut Vec<L7Call>,
        stats: &mut ParseStats,
    ) {
        let ds = &mut self.dirs[d];
        ds.unsure_body = None;
        if ds.state != State::Tunnel && ds.state != State::Lost {
            ds.state = State::Start;
        }
        let interim = std::mem::take(&mut ds.interim_bytes);
        match std::mem::replace(&mut ds.cur, Current::None) {
            Current::None => {}
            Current::Request {
                id,
                span,
                truncated,
            } => {
                let mut paired = None;
                if let Some(r) = self.pending.back_mut().filter(|r| r.id == id) {
                    r.span = span;
                    r.truncated = truncated;
                    r.complete = true;
                    // A response that arrived before its request's record (records from two
                    // CPUs can cross) pairs now, if its timing allows it.
                    if self.pending.len() == 1 {
                        while let Some(o) = self.orphans.pop_front() {
                            if o.span.last_end_ns >= span.first_start_ns {
                                paired = Some(o);
                                break;
                            }
                            stats.unmatched_responses += 1;
                        }
                    }
                }
                if let Some(resp) = paired {
                    let req = self.pending.pop().expect("checked above");
                    self.emit(d, req, resp, false, out);
                }
            }
            Current::Response(mut resp) => {
                resp.span.bytes = resp.span.bytes.saturating_add(interim);
                let tunnel = resp.tunnel_after;
                // A request whose end was out of sight ends, at the latest, when its response
                // is complete.
                if self.dirs[1 - d].state == State::Lost
                    && matches!(self.dirs[1 - d].cur, Current::Request { .. })
                {
                    self.finish_open_ended(1 - d, out, stats);
                }
                // A response that ended before the oldest waiting request began answers an
                // unseen one (its request lost): it is no answer to that request.
                let before_request = self
                    .pending
                    .front()
                    .is_some_and(|r| r.complete && resp.span.last_end_ns < r.span.first_start_ns);
                // A dropped request's answer (counted in `pending_dropped`) pairs with none.
                let dropped_answer = self.answers_to_skip > 0;
                self.answers_to_skip = self.answers_to_skip.saturating_sub(1);
                let req = if before_request || dropped_answer {
                    None
                } else {
                    self.pending.pop()
                };
                match req {
                    Some(req) if tunnel && resp.h2c && req.h2c => {
                        // The answer to this request comes as HTTP/2, on stream 1: the
                        // connection is the HTTP/2 parser's from here on, and that request
                        // is its first call (the 101 is no call of its own).
                        let body = req.span.bytes.saturating_sub(req.head_len);
                        let upgrade = UpgradeRequest {
                            method: req.method,
                            path: req.resource,
                            authority: req.host,
                            span: req.span,
                            body_bytes: body,
                        };
                        let client = if d == 0 {
                            Direction::Ingress
                        } else {
                            Direction::Egress
                        };
                        let cfg = ParserConfig {
                            depth: self.depth,
                            transport: super::Transport::Stream,
                            keep_head: self.keep_head,
                        };
                        self.h2 = Some(Box::new(Http2Parser::after_upgrade(&cfg, client, upgrade)));
                    }
                    Some(req) => self.emit(1 - d, req, resp, inferred, out),
                    None if dropped_answer => {}
                    None => {
                        if self.orphans.len() >= MAX_ORPHANS {
                            self.orphans.pop_front();
                            stats.unmatched_responses += 1;
                        }
                        self.orphans.push_back(resp);
                    }
                }
                if tunnel {
                    for ds in &mut self.dirs {
                        ds.state = State::Tunnel;
                        ds.cur = Current::None;
                    }
                }
            }
        }
    }

    fn emit(
        &self,
        req_d: usize,
        req: Request,
        resp: Response,
        inferred: bool,
        out: &mut Vec<L7Call>,
    ) {
        let outcome = match resp.status {
            500.. => Outcome::ServerError,
            400..=499 => Outcome::ClientError,
            _ => Outcome::Ok,
        };
        let mut details = Vec::new();
        if let Some(h) = req.host {
            details.push(("host", h));
        }
        if let Some(t) = req.traceparent {
            details.push(("traceparent", t));
        }
        if resp.version != req.version && self.depth == ParseDepth::Full {
            // `version` is what both spoke (the lower); each message's own, when they differ.
            details.push(("request_version", req.version.to_owned()));
            details.push(("response_version", resp.version.to_owned()));
        }
        out.push(L7Call {
            proto: Protocol::Http,
            request_dir: if req_d == 0 {
                Direction::Egress
            } else {
                Direction::Ingress
            },
            method: req.method,
            resource: req.resource,
            version: resp.version.min(req.version),
            status: Some(resp.status as u32),
            status_text: None,
            outcome,
            req: req.span,
            resp: resp.span,
            truncated: req.truncated || resp.truncated,
            end_inferred: inferred,
            details,
            req_head: req.head,
            resp_head: resp.head,
        });
    }

    /// Consumes from `data` in direction d according to the state; returns bytes consumed.
    fn step(
        &mut self,
        d: usize,
        data: &[u8],
        seg: &Segment,
        out: &mut Vec<L7Call>,
        stats: &mut ParseStats,
    ) -> usize {
        match self.dirs[d].state {
            State::Start => {
                // Stray CRLFs between messages are allowed (RFC 9112 §2.2).
                let skip = data
                    .iter()
                    .take_while(|&&c| c == b'\r' || c == b'\n')
                    .count();
                if skip > 0 {
                    return skip;
                }
                self.start_message(d, data, seg);
                0
            }
            State::Headers => {
                let kind = self.dirs[d].kind.unwrap_or(Kind::Request);
                let ds = &mut self.dirs[d];
                let (parsed, old) = if ds.hdr_buf.is_empty() {
                    (parse_head(kind, data, self.depth, self.keep_head), 0)
                } else {
                    let old = ds.hdr_buf.len();
                    let room = MAX_HEADER_BYTES.saturating_sub(old);
                    ds.hdr_buf.extend_from_slice(&data[..data.len().min(room)]);
                    (
                        parse_head(kind, &ds.hdr_buf, self.depth, self.keep_head),
                        old,
                    )
                };
                match parsed {
                    HeadParse::Complete(head) => {
                        let used = head.len - old;
                        self.dirs[d].hdr_buf.clear();
                        self.on_head(d, head, out, stats);
                        used
                    }
                    HeadParse::Partial => {
                        let ds = &mut self.dirs[d];
                        if ds.hdr_buf.is_empty() {
                            ds.hdr_buf
                                .extend_from_slice(&data[..data.len().min(MAX_HEADER_BYTES)]);
                        }
                        if ds.hdr_buf.len() >= MAX_HEADER_BYTES {
                            self.damage_current(d, stats);
                            self.lose_sync(d, stats);
                        }
                        data.len()
                    }
                    HeadParse::Invalid => {
                        self.damage_current(d, stats);
                        self.lose_sync(d, stats);
                        stats.skipped(data.len() as u64);
                        data.len()
                    }
                }
            }
            State::Body { remaining } => {
                let take = remaining.min(data.len() as u64);
                let ds = &mut self.dirs[d];
                ds.add_bytes(take);
                ds.state = State::Body {
                    remaining: remaining - take,
                };
                if remaining == take {
                    self.complete(d, false, out, stats);
                }
                take as usize
            }
            State::Chunked(cs) => match chunk_step(cs, data) {
                Ok((used, st, done)) => {
                    let ds = &mut self.dirs[d];
                    ds.add_bytes(used as u64);
                    ds.state = State::Chunked(st);
                    if done {
                        self.complete(d, false, out, stats);
                    }
                    used
                }
                Err(used) => {
                    self.damage_current(d, stats);
                    self.lose_sync(d, stats);
                    stats.skipped((data.len() - used) as u64);
                    data.len()
                }
            },
            State::UntilClose => {
                self.dirs[d].add_bytes(data.len() as u64);
                data.len()
            }
            State::Lost => {
                stats.skipped(data.len() as u64);
                self.dirs[d].add_bytes(data.len() as u64);
                data.len()
            }
            State::Tunnel => data.len(),
        }
    }

    /// `n` bytes of direction d were moved but not captured (snaplen, sendfile).
    fn skip(&mut self, d: usize, n: u64, out: &mut Vec<L7Call>, stats: &mut ParseStats) {
        let ds = &mut self.dirs[d];
        match ds.state {
            State::Body { remaining } => {
                ds.mark_truncated();
                let take = remaining.min(n);
                ds.add_bytes(take);
                ds.state = State::Body {
                    remaining: remaining - take,
                };
                if take == remaining {
                    self.complete(d, false, out, stats);
                    if n > take {
                        // Bytes after the message that we could not see: the next message's
                        // start is unknown.
                        self.lose_sync(d, stats);
                        stats.skipped(n - take);
                    }
                }
            }
            State::Chunked(ChunkState::Data { remaining }) if n < remaining => {
                ds.mark_truncated();
                ds.add_bytes(n);
                ds.state = State::Chunked(ChunkState::Data {
                    remaining: remaining - n,
                });
            }
            State::Chunked(ChunkState::Data { remaining }) if n - remaining == LAST_CHUNK_TAIL => {
                // The unseen rest of the syscall is exactly "\r\n0\r\n\r\n": a body written in
                // one go (data, then the last chunk). Exact, not inferred.
                ds.mark_truncated();
                ds.add_bytes(n);
                self.complete(d, false, out, stats);
            }
            State::Chunked(_) => {
                // Chunk framing went out of sight: the message goes on until the next message
                // starts or the connection closes (end inferred then).
                ds.mark_truncated();
                ds.add_bytes(n);
                ds.state = State::Lost;
                stats.desyncs += 1;
            }
            State::UntilClose => {
                ds.mark_truncated();
                ds.add_bytes(n);
            }
            State::Headers => {
                self.damage_current(d, stats);
                self.lose_sync(d, stats);
                stats.skipped(n);
            }
            State::Start => {
                self.lose_sync(d, stats);
                stats.skipped(n);
                if self.request_dir == Some(1 - d) {
                    // Unseen bytes where a response starts may hold whole responses.
                    self.distrust_pairing(stats);
                }
            }
            State::Lost => {
                stats.skipped(n);
                ds.add_bytes(n);
            }
            State::Tunnel => {}
        }
    }
}

impl Http1Parser {
    /// `seg`'s tail, its last bytes, after the unseen bytes before it were skipped: read as
    /// the rest of the message where the place is exact (inside a body or chunk data of known
    /// length, or at a message's start: the unseen bytes ended a body), so a chunked body's
    /// last chunk there ends it exactly; else counted as the unseen bytes were.
    fn on_tail(&mut self, d: usize, seg: &Segment, out: &mut Vec<L7Call>, stats: &mut ParseStats) {
        let exact = matches!(
            self.dirs[d].state,
            State::Start | State::Body { .. } | State::Chunked(ChunkState::Data { .. })
        );
        if !exact || self.h2.is_some() {
            self.skip(d, seg.tail.len() as u64, out, stats);
            return;
        }
        // The same syscall: its span is not extended again (seg_counter unchanged).
        let piece = Segment {
            payload: seg.tail,
            tail: &[],
            total_len: seg.tail.len() as u64,
            pos: seg
                .pos
                .wrapping_add(seg.total_len.saturating_sub(seg.tail.len() as u64)),
            ..*seg
        };
        let mut data = seg.tail;
        while !data.is_empty() {
            if !matches!(self.dirs[d].cur, Current::None) {
                self.touch(d, &piece);
            }
            let used = self.step(d, data, &piece, out, stats);
            data = &data[used.min(data.len())..];
            if self.h2.is_some() {
                // An upgrade's first HTTP/2 bytes after unseen ones: not its start.
                stats.skipped(data.len() as u64);
                return;
            }
        }
    }
}

impl StreamParser for Http1Parser {
    fn request_direction(&self) -> Option<Direction> {
        if self.h2.is_some()
            || self.calls_overlapped
            || self.dirs.iter().any(|ds| ds.state == State::Tunnel)
        {
            return None;
        }
        match self.request_dir? {
            0 => Some(Direction::Egress),
            _ => Some(Direction::Ingress),
        }
    }

    fn on_segment(&mut self, seg: &Segment<'_>, out: &mut Vec<L7Call>, stats: &mut ParseStats) {
        if let Some(h2) = self.h2.as_mut() {
            return h2.on_segment(seg, out, stats);
        }
        self.seg_counter += 1;
        let d = seg.dir.index();
        if self.last_dir == Some(1 - d)
            && self.request_dir == Some(d)
            && !self.between_calls(seg.start_ns)
        {
            self.calls_overlapped = true;
        }
        self.last_dir = Some(d);
        match self.dirs[d].state {
            State::Tunnel => return,
            // A response to an unseen request, none of its body come, and a segment that
            // starts a response: it answered a HEAD (its Content-Length is the resource's);
            // read as a body, it would take the next responses' bytes.
            State::Body { remaining }
                if self.dirs[d].unsure_body == Some(remaining)
                    && is_response_start(seg.payload) =>
            {
                self.dirs[d].state = State::Start;
                self.complete(d, false, out, stats);
            }
            State::Lost => {
                if is_message_start(seg.payload) {
                    self.finish_open_ended(d, out, stats);
                    self.dirs[d].state = State::Start;
                } else {
                    self.touch(d, seg);
                }
            }
            _ => {}
        }
        let mut data = seg.payload;
        while !data.is_empty() {
            let before = self.dirs[d].state;
            if !matches!(self.dirs[d].cur, Current::None) {
                self.touch(d, seg);
            }
            let used = self.step(d, data, seg, out, stats);
            debug_assert!(used > 0 || self.dirs[d].state != before);
            data = &data[used.min(data.len())..];
            if let Some(h2) = self.h2.as_mut() {
                // The server's first HTTP/2 frames may share the 101's syscall.
                let rest = Segment {
                    payload: data,
                    tail: &[],
                    total_len: seg
                        .total_len
                        .saturating_sub((seg.payload.len() - data.len()) as u64),
                    pos: seg
                        .pos
                        .wrapping_add((seg.payload.len() - data.len()) as u64),
                    ..*seg
                };
                if rest.total_len > 0 {
                    h2.on_segment(&rest, out, stats);
                }
                return;
            }
        }
        let uncaptured = seg.total_len.saturating_sub(seg.payload.len() as u64);
        // A kernel tail (the syscall's last bytes) after bytes unseen: those are skipped, then
        // the tail read where the place is still known.
        let hidden = uncaptured.saturating_sub(seg.tail.len() as u64);
        let with_tail = !seg.tail.is_empty() && hidden > 0;
        if uncaptured > 0 {
            if self.dirs[d].state == State::Start && seg.payload.is_empty() {
                // Nothing captured at a message boundary (e.g. sendfile right after headers
                // that were already complete): no way to frame it.
                self.lose_sync(d, stats);
                stats.skipped(uncaptured);
                if self.request_dir != Some(d) {
                    // Unseen bytes where a response starts may hold whole responses: the
                    // requests waiting can no longer be paired in order.
                    self.distrust_pairing(stats);
                }
                return;
            }
            if !matches!(self.dirs[d].cur, Current::None) {
                self.touch(d, seg);
            }
            if with_tail {
                self.skip(d, hidden, out, stats);
                self.on_tail(d, seg, out, stats);
            } else {
                self.skip(d, uncaptured, out, stats);
            }
        }
    }

    fn on_gap(&mut self, dir: Direction, len: Option<u64>, stats: &mut ParseStats) {
        if let Some(h2) = self.h2.as_mut() {
            return h2.on_gap(dir, len, stats);
        }
        // Turns inside lost bytes are unknown.
        self.calls_overlapped = true;
        let d = dir.index();
        let ds = &mut self.dirs[d];
        // A gap strictly inside a body of known length only skips bytes: the message's end is
        // still ahead and will be seen.
        match (ds.state, len) {
            (State::Body { remaining }, Some(n)) if n < remaining => {
                ds.add_bytes(n);
                ds.state = State::Body {
                    remaining: remaining - n,
                };
                return;
            }
            (State::Chunked(ChunkState::Data { remaining }), Some(n)) if n < remaining => {
                ds.add_bytes(n);
                ds.state = State::Chunked(ChunkState::Data {
                    remaining: remaining - n,
                });
                return;
            }
            (State::Tunnel, _) => return,
            _ => {}
        }
        // Anything else may have hidden whole messages, so in-order pairing can no longer be
        // trusted: everything in flight is damaged and both directions resynchronise.
        stats.skipped(len.unwrap_or(0));
        for d in 0..2 {
            self.damage_current(d, stats);
            self.lose_sync(d, stats);
        }
        self.distrust_pairing(stats);
    }

    fn on_close(&mut self, out: &mut Vec<L7Call>, stats: &mut ParseStats) {
        if let Some(h2) = self.h2.as_mut() {
            return h2.on_close(out, stats);
        }
        for d in 0..2 {
            match self.dirs[d].state {
                State::UntilClose => self.complete(d, false, out, stats),
                State::Lost => self.finish_open_ended(d, out, stats),
                State::Headers | State::Body { .. } | State::Chunked(_) => {
                    self.damage_current(d, stats)
                }
                State::Start | State::Tunnel => {}
            }
        }
        stats.unanswered_requests += self.pending.drain().filter(|r| r.complete).count() as u64;
        stats.unmatched_responses += self.orphans.len() as u64;
        self.orphans.clear();
    }
}

#[cfg(test)]
mod fixture_tests;
#[cfg(test)]
mod tests;
