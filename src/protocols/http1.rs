//! HTTP/1.0 and HTTP/1.1 over a byte stream: keep-alive, pipelining, Content-Length, chunked,
//! bodies larger than the snaplen (skipped by count), HEAD/1xx/204/304, 100-continue, upgrades.
//!
//! Framing follows RFC 9112 §6.3. Headers are parsed with httparse, straight from the syscall's
//! bytes when they arrive whole, from a bounded buffer when split over syscalls.

use super::http2::{Http2Parser, UpgradeRequest};
use super::matching::InOrder;
use super::redact;
use super::{
    CapturedHead, HeadSecrets, L7Call, MessageSpan, Outcome, ParseDepth, ParseStats, ParserConfig,
    Protocol, ProtocolSpec, Segment, StreamParser,
};
use crate::event::Direction;

pub static SPEC: ProtocolSpec = ProtocolSpec {
    proto: Protocol::Http,
    detect: is_message_start,
    new_parser: |cfg| Box::new(Http1Parser::new(cfg)),
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
const MAX_HEADERS: usize = 128;
/// Longest resource kept per call (bytes); longer ones are cut (memory stays bounded).
const MAX_RESOURCE: usize = 1024;
/// Requests waiting for responses on one connection (deep pipelining beyond this is evicted).
const MAX_PENDING: usize = 256;
const MAX_ORPHANS: usize = 4;
/// CRLF ending a chunk's data + "0\r\n\r\n", the last chunk without trailers.
const LAST_CHUNK_TAIL: u64 = 7;

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
enum Kind {
    Request,
    Response,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ChunkState {
    /// In a chunk-size line; `digits` hex digits read so far, `in_ext` past a ';'.
    Size {
        size: u64,
        digits: u8,
        in_ext: bool,
    },
    Data {
        remaining: u64,
    },
    /// The CRLF after a chunk's data.
    DataEnd,
    /// Trailer section after the last chunk; `line_len` bytes of the current line.
    Trailer {
        line_len: u32,
    },
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

/// What a parsed header block says.
struct Head {
    len: usize,
    /// The head's bytes as kept (`keep_head`), redacted now or when shown.
    captured: CapturedHead,
    kind: HeadKind,
    content_length: Option<u64>,
    chunked: bool,
    /// An `Upgrade` header names h2c.
    h2c: bool,
}

enum HeadKind {
    Request {
        method: String,
        resource: String,
        version: &'static str,
        host: Option<String>,
    },
    Response {
        status: u16,
        version: &'static str,
    },
}

enum HeadParse {
    Complete(Head),
    Partial,
    Invalid,
}

fn version_str(v: Option<u8>) -> &'static str {
    match v {
        Some(0) => "1.0",
        _ => "1.1",
    }
}

fn lossy_cut(b: &[u8], max: usize) -> String {
    let b = &b[..b.len().min(max)];
    // Valid UTF-8 (nearly always ASCII) is checked a word at a time; the lossy walk is slower.
    match std::str::from_utf8(b) {
        Ok(s) => s.to_owned(),
        Err(_) => String::from_utf8_lossy(b).into_owned(),
    }
}

/// A request target as shown: its secrets redacted, cut at `MAX_RESOURCE` bytes. httparse
/// has checked the target's text already; it is only read again when something was redacted
/// or cut.
fn request_resource(target: &str) -> String {
    match redact::redact_target(target.as_bytes()) {
        std::borrow::Cow::Borrowed(_) if target.len() <= MAX_RESOURCE => target.to_owned(),
        redacted => lossy_cut(&redacted, MAX_RESOURCE),
    }
}

/// Content-Length and chunked framing from headers; None when they contradict (damaged).
fn framing(headers: &[httparse::Header]) -> Option<(Option<u64>, bool)> {
    let mut cl: Option<u64> = None;
    let mut chunked = false;
    for h in headers {
        if h.name.eq_ignore_ascii_case("content-length") {
            let v = std::str::from_utf8(h.value.trim_ascii())
                .ok()?
                .parse::<u64>()
                .ok()?;
            if cl.is_some_and(|old| old != v) {
                return None;
            }
            cl = Some(v);
        } else if h.name.eq_ignore_ascii_case("transfer-encoding") {
            // Chunked is framing only when it is the final coding.
            chunked = h
                .value
                .rsplit(|&b| b == b',')
                .next()
                .is_some_and(|last| last.trim_ascii().eq_ignore_ascii_case(b"chunked"));
        }
    }
    // RFC 9112 §6.3: Transfer-Encoding overrides Content-Length.
    Some((if chunked { None } else { cl }, chunked))
}

/// Whether an `Upgrade` header lists `h2c` (HTTP/2 over clear text, RFC 7540 §3.2).
fn upgrades_to_h2c(headers: &[httparse::Header]) -> bool {
    headers.iter().any(|h| {
        h.name.eq_ignore_ascii_case("upgrade")
            && h.value
                .split(|&b| b == b',')
                .any(|t| t.trim_ascii().eq_ignore_ascii_case(b"h2c"))
    })
}

/// Up to `keep` bytes of a head of `len` bytes. A head that fits is kept as sent, its secrets
/// redacted when shown (`redact_head`). A longer one is redacted whole before it is cut: a cut
/// may fall inside a secret that is only recognised by what follows it (`user:pass@` of a
/// URL needs its `@`).
fn capture_head(buf: &[u8], len: usize, keep: usize) -> CapturedHead {
    if keep == 0 {
        return CapturedHead::default();
    }
    let head = &buf[..len.min(buf.len())];
    if head.len() > keep {
        let mut bytes = redact_head(head);
        bytes.truncate(keep);
        return CapturedHead::redacted(bytes, len as u64);
    }
    CapturedHead {
        bytes: head.to_vec(),
        len: len as u64,
        secrets: HeadSecrets::Http1,
    }
}

/// An HTTP/1 head with its secrets redacted: the request target's, secret headers' values,
/// and those of URLs in any other header's value.
pub fn redact_head(head: &[u8]) -> Vec<u8> {
    let mut bytes = Vec::with_capacity(head.len());
    for (i, line) in head.split_inclusive(|&b| b == b'\n').enumerate() {
        let colon = line.iter().position(|&b| b == b':');
        if i == 0 {
            // The request line: its target's secrets.
            bytes.extend_from_slice(&redact::redact_request_line(line));
        } else if let Some(colon) = colon.filter(|&c| redact::is_secret_header(&line[..c])) {
            bytes.extend_from_slice(&line[..=colon]);
            let value_len = line[colon + 1..].trim_ascii().len();
            bytes.extend_from_slice(format!(" [redacted, {value_len} bytes]\r\n").as_bytes());
        } else {
            // Any other header: the secrets of URLs in its value (Referer, Location,
            // Refresh's url=, …).
            let value_at = colon.map_or(0, |c| c + 1);
            bytes.extend_from_slice(&line[..value_at]);
            bytes.extend_from_slice(&redact::redact_urls_in(&line[value_at..]));
        }
    }
    bytes
}

fn parse_head(kind: Kind, buf: &[u8], depth: ParseDepth, keep: usize) -> HeadParse {
    // Left uninitialised: httparse writes the headers it finds, and zeroing 128 of them
    // (4 KiB) was the largest single cost of a parse.
    let mut headers = [const { std::mem::MaybeUninit::<httparse::Header>::uninit() }; MAX_HEADERS];
    let config = httparse::ParserConfig::default();
    match kind {
        Kind::Request => {
            let mut req = httparse::Request::new(&mut []);
            match config.parse_request_with_uninit_headers(&mut req, buf, &mut headers) {
                Ok(httparse::Status::Complete(len)) => {
                    let Some((content_length, chunked)) = framing(req.headers) else {
                        return HeadParse::Invalid;
                    };
                    let host = if depth == ParseDepth::Full {
                        req.headers
                            .iter()
                            .find(|h| h.name.eq_ignore_ascii_case("host"))
                            .map(|h| lossy_cut(h.value, 256))
                    } else {
                        None
                    };
                    HeadParse::Complete(Head {
                        len,
                        captured: capture_head(buf, len, keep),
                        content_length,
                        chunked,
                        h2c: upgrades_to_h2c(req.headers),
                        kind: HeadKind::Request {
                            method: req.method.unwrap_or("").to_owned(),
                            resource: request_resource(req.path.unwrap_or("")),
                            version: version_str(req.version),
                            host,
                        },
                    })
                }
                Ok(httparse::Status::Partial) => HeadParse::Partial,
                Err(_) => HeadParse::Invalid,
            }
        }
        Kind::Response => {
            let mut resp = httparse::Response::new(&mut []);
            match config.parse_response_with_uninit_headers(&mut resp, buf, &mut headers) {
                Ok(httparse::Status::Complete(len)) => {
                    let Some((content_length, chunked)) = framing(resp.headers) else {
                        return HeadParse::Invalid;
                    };
                    HeadParse::Complete(Head {
                        len,
                        captured: capture_head(buf, len, keep),
                        content_length,
                        chunked,
                        h2c: upgrades_to_h2c(resp.headers),
                        kind: HeadKind::Response {
                            status: resp.code.unwrap_or(0),
                            version: version_str(resp.version),
                        },
                    })
                }
                Ok(httparse::Status::Partial) => HeadParse::Partial,
                Err(_) => HeadParse::Invalid,
            }
        }
    }
}

/// Runs the chunked-body state machine over `data`. Returns (bytes consumed, new state,
/// finished); `Err(consumed)` when the bytes are not chunked encoding.
fn chunk_step(mut st: ChunkState, data: &[u8]) -> Result<(usize, ChunkState, bool), usize> {
    let mut i = 0;
    while i < data.len() {
        match &mut st {
            ChunkState::Data { remaining } => {
                let take = (*remaining).min((data.len() - i) as u64) as usize;
                i += take;
                *remaining -= take as u64;
                if *remaining == 0 {
                    st = ChunkState::DataEnd;
                }
            }
            ChunkState::Size {
                size,
                digits,
                in_ext,
            } => {
                let c = data[i];
                i += 1;
                match c {
                    b'\n' => {
                        if *digits == 0 {
                            return Err(i);
                        }
                        st = if *size == 0 {
                            ChunkState::Trailer { line_len: 0 }
                        } else {
                            ChunkState::Data { remaining: *size }
                        };
                    }
                    b'\r' => {}
                    _ if *in_ext => {}
                    b';' => *in_ext = true,
                    b' ' | b'\t' => {}
                    _ => {
                        let v = (c as char).to_digit(16).ok_or(i)?;
                        if *digits >= 16 {
                            return Err(i);
                        }
                        *size = (*size << 4) | v as u64;
                        *digits += 1;
                    }
                }
            }
            ChunkState::DataEnd => {
                let c = data[i];
                i += 1;
                match c {
                    b'\r' => {}
                    b'\n' => {
                        st = ChunkState::Size {
                            size: 0,
                            digits: 0,
                            in_ext: false,
                        }
                    }
                    _ => return Err(i),
                }
            }
            ChunkState::Trailer { line_len } => {
                let c = data[i];
                i += 1;
                match c {
                    b'\r' => {}
                    b'\n' => {
                        if *line_len == 0 {
                            return Ok((i, st, true));
                        }
                        *line_len = 0;
                    }
                    _ => *line_len = line_len.saturating_add(1),
                }
            }
        }
    }
    Ok((i, st, false))
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
        }
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
        let span = MessageSpan::starting(seg);
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
            } => {
                self.request_dir = Some(d);
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
                self.pending.push(Request {
                    id,
                    method,
                    resource,
                    version,
                    host,
                    head: captured,
                    span,
                    truncated,
                    complete: false,
                    h2c: head.h2c,
                    head_len: head.len as u64,
                });
                // An open-ended response in the other direction ends where a new request starts.
                let other = 1 - d;
                if self.dirs[other].state == State::Lost {
                    self.finish_open_ended(other, out, stats);
                }
                let ds = &mut self.dirs[d];
                ds.state = if head.chunked {
                    State::Chunked(ChunkState::Size {
                        size: 0,
                        digits: 0,
                        in_ext: false,
                    })
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
                let req_method = self.pending.front().map(|r| r.method.as_str());
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
                    State::Chunked(ChunkState::Size {
                        size: 0,
                        digits: 0,
                        in_ext: false,
                    })
                } else {
                    match head.content_length {
                        Some(0) => State::Start,
                        Some(n) => State::Body { remaining: n },
                        None => State::UntilClose,
                    }
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
                match self.pending.pop() {
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

impl StreamParser for Http1Parser {
    fn on_segment(&mut self, seg: &Segment<'_>, out: &mut Vec<L7Call>, stats: &mut ParseStats) {
        if let Some(h2) = self.h2.as_mut() {
            return h2.on_segment(seg, out, stats);
        }
        self.seg_counter += 1;
        let d = seg.dir.index();
        match self.dirs[d].state {
            State::Tunnel => return,
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
                    total_len: seg
                        .total_len
                        .saturating_sub((seg.payload.len() - data.len()) as u64),
                    ..*seg
                };
                if rest.total_len > 0 {
                    h2.on_segment(&rest, out, stats);
                }
                return;
            }
        }
        let uncaptured = seg.total_len.saturating_sub(seg.payload.len() as u64);
        if uncaptured > 0 {
            if self.dirs[d].state == State::Start && seg.payload.is_empty() {
                // Nothing captured at a message boundary (e.g. sendfile right after headers
                // that were already complete): no way to frame it.
                self.lose_sync(d, stats);
                stats.skipped(uncaptured);
                return;
            }
            if !matches!(self.dirs[d].cur, Current::None) {
                self.touch(d, seg);
            }
            self.skip(d, uncaptured, out, stats);
        }
    }

    fn on_gap(&mut self, dir: Direction, len: Option<u64>, stats: &mut ParseStats) {
        if let Some(h2) = self.h2.as_mut() {
            return h2.on_gap(dir, len, stats);
        }
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
mod tests {
    use super::*;
    use crate::protocols::Transport;

    const OUT: Direction = Direction::Egress;
    const IN: Direction = Direction::Ingress;

    /// Drives a parser from the client's point of view with a fake clock (1 µs per syscall).
    struct Driver {
        p: Http1Parser,
        calls: Vec<L7Call>,
        stats: ParseStats,
        now: u64,
    }

    impl Driver {
        fn new() -> Self {
            Driver::keeping(0)
        }
        fn keeping(keep_head: usize) -> Self {
            Driver {
                p: Http1Parser::new(&ParserConfig {
                    depth: ParseDepth::Full,
                    transport: Transport::Stream,
                    keep_head,
                }),
                calls: Vec::new(),
                stats: ParseStats::default(),
                now: 0,
            }
        }
        fn seg_cut(&mut self, dir: Direction, bytes: &[u8], total: u64) -> &mut Self {
            self.now += 1000;
            let seg = Segment {
                dir,
                payload: bytes,
                total_len: total,
                start_ns: self.now,
                end_ns: self.now + 500,
                peer: None,
            };
            self.p.on_segment(&seg, &mut self.calls, &mut self.stats);
            self
        }
        fn seg(&mut self, dir: Direction, bytes: &[u8]) -> &mut Self {
            self.seg_cut(dir, bytes, bytes.len() as u64)
        }
        fn close(&mut self) -> &mut Self {
            self.p.on_close(&mut self.calls, &mut self.stats);
            self
        }
        fn summary(&self) -> Vec<(String, String, Option<u32>, u64, u64)> {
            self.calls
                .iter()
                .map(|c| {
                    (
                        c.method.clone(),
                        c.resource.clone(),
                        c.status,
                        c.req.bytes,
                        c.resp.bytes,
                    )
                })
                .collect()
        }
    }

    fn call(
        m: &str,
        r: &str,
        s: u32,
        req: u64,
        resp: u64,
    ) -> (String, String, Option<u32>, u64, u64) {
        (m.into(), r.into(), Some(s), req, resp)
    }

    const REQ_A: &[u8] = b"GET /a HTTP/1.1\r\nHost: x\r\n\r\n";
    const RESP_OK: &[u8] = b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello";

    #[test]
    fn lengths_near_2_to_the_64_saturate_the_counts() {
        let mut d = Driver::new();
        // Out of sync twice by (almost) 2^64 bytes, then a close-delimited body as long.
        d.seg_cut(OUT, b"", u64::MAX).seg_cut(OUT, b"", u64::MAX);
        d.seg(OUT, b"GET / HTTP/1.0\r\n\r\n");
        d.seg(IN, b"HTTP/1.0 200 OK\r\n\r\n")
            .seg_cut(IN, b"x", u64::MAX);
        d.seg_cut(IN, b"", u64::MAX).close();
        assert_eq!(d.stats.unparsed_bytes, u64::MAX);
        assert_eq!(d.calls.len(), 1);
        assert_eq!(d.calls[0].resp.bytes, u64::MAX);
    }

    #[test]
    fn keep_alive_calls_pair_in_order_with_exact_bytes_and_timing() {
        let mut d = Driver::new();
        d.seg(OUT, REQ_A).seg(IN, RESP_OK);
        d.seg(OUT, b"GET /b HTTP/1.1\r\n\r\n")
            .seg(IN, b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n");
        assert_eq!(
            d.summary(),
            vec![
                call("GET", "/a", 200, REQ_A.len() as u64, RESP_OK.len() as u64),
                call("GET", "/b", 404, 19, 45)
            ]
        );
        let c = &d.calls[0];
        assert_eq!(c.request_dir, OUT);
        assert_eq!((c.req.first_start_ns, c.resp.last_end_ns), (1000, 2500));
        assert_eq!(c.details, vec![("host", "x".to_string())]);
        assert_eq!(d.calls[1].outcome, Outcome::ClientError);
        assert_eq!(d.stats, ParseStats::default());
    }

    #[test]
    fn pipelined_requests_in_one_syscall() {
        let mut d = Driver::new();
        let reqs = b"GET /1 HTTP/1.1\r\n\r\nGET /2 HTTP/1.1\r\n\r\nGET /3 HTTP/1.1\r\n\r\n";
        d.seg(IN, reqs);
        let mut resps = Vec::new();
        for body in ["one", "two", "three"] {
            resps.extend_from_slice(
                format!(
                    "HTTP/1.1 200 OK\r\nContent-Length: {}\r\n\r\n{body}",
                    body.len()
                )
                .as_bytes(),
            );
        }
        d.seg(OUT, &resps[..50]).seg(OUT, &resps[50..]);
        let got: Vec<_> = d.calls.iter().map(|c| c.resource.as_str()).collect();
        assert_eq!(got, ["/1", "/2", "/3"]);
        assert!(d
            .calls
            .iter()
            .all(|c| c.request_dir == IN && c.status == Some(200)));
        let total: u64 = d.calls.iter().map(|c| c.resp.bytes).sum();
        assert_eq!(total, resps.len() as u64);
        assert_eq!(
            d.calls.iter().map(|c| c.req.bytes).sum::<u64>(),
            reqs.len() as u64
        );
    }

    #[test]
    fn headers_split_byte_by_byte() {
        let mut d = Driver::new();
        for b in REQ_A.chunks(1) {
            d.seg(OUT, b);
        }
        for b in RESP_OK.chunks(3) {
            d.seg(IN, b);
        }
        assert_eq!(d.summary(), vec![call("GET", "/a", 200, 28, 43)]);
        assert_eq!(d.calls[0].req.syscalls, REQ_A.len() as u32);
        assert_eq!(d.calls[0].resp.syscalls, RESP_OK.len().div_ceil(3) as u32);
    }

    #[test]
    fn chunked_response_over_several_syscalls_with_split_size_lines() {
        let mut d = Driver::new();
        d.seg(OUT, REQ_A);
        let resp: &[u8] = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5;ext=1\r\nhello\r\n1A\r\nabcdefghijklmnopqrstuvwxyz\r\n0\r\nX-Trailer: t\r\n\r\n";
        for cut in [[10usize, 60], [48, 49], [70, 95]] {
            let mut d = Driver::new();
            d.seg(OUT, REQ_A);
            d.seg(IN, &resp[..cut[0]])
                .seg(IN, &resp[cut[0]..cut[1]])
                .seg(IN, &resp[cut[1]..]);
            assert_eq!(
                d.summary(),
                vec![call("GET", "/a", 200, 28, resp.len() as u64)],
                "cut {cut:?}"
            );
        }
        d.seg(IN, resp);
        assert_eq!(d.calls.len(), 1);
    }

    #[test]
    fn chunked_request_body() {
        let mut d = Driver::new();
        let req: &[u8] =
            b"POST /up HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n";
        d.seg(OUT, &req[..30]).seg(OUT, &req[30..]).seg(IN, RESP_OK);
        assert_eq!(
            d.summary(),
            vec![call("POST", "/up", 200, req.len() as u64, 43)]
        );
    }

    #[test]
    fn body_beyond_snaplen_is_skipped_by_count() {
        let mut d = Driver::new();
        d.seg(OUT, REQ_A);
        let head = b"HTTP/1.1 200 OK\r\nContent-Length: 100000\r\n\r\n";
        let mut first = head.to_vec();
        first.resize(4096, b'x');
        // One syscall moved 60000 bytes, 4096 captured; a second moved the rest, 100 captured.
        let rest = head.len() as u64 + 100_000 - 60_000;
        d.seg_cut(IN, &first, 60_000)
            .seg_cut(IN, &[b'x'; 100], rest);
        d.seg(OUT, REQ_A).seg(IN, RESP_OK);
        assert_eq!(
            d.summary(),
            vec![
                call("GET", "/a", 200, 28, head.len() as u64 + 100_000),
                call("GET", "/a", 200, 28, 43)
            ]
        );
        assert!(d.calls[0].truncated);
        assert_eq!(d.stats, ParseStats::default());
    }

    #[test]
    fn sendfile_body_with_no_captured_bytes() {
        let mut d = Driver::new();
        d.seg(IN, REQ_A);
        let head = b"HTTP/1.1 200 OK\r\nContent-Length: 300000\r\n\r\n";
        d.seg(OUT, head).seg_cut(OUT, b"", 300_000);
        assert_eq!(
            d.summary(),
            vec![call("GET", "/a", 200, 28, head.len() as u64 + 300_000)]
        );
        assert_eq!(d.calls[0].resp.syscalls, 2);
    }

    #[test]
    fn head_204_304_have_no_body() {
        let mut d = Driver::new();
        d.seg(OUT, b"HEAD / HTTP/1.1\r\n\r\n")
            .seg(IN, b"HTTP/1.1 200 OK\r\nContent-Length: 612\r\n\r\n");
        d.seg(OUT, b"GET /n HTTP/1.1\r\n\r\n")
            .seg(IN, b"HTTP/1.1 204 No Content\r\n\r\n");
        d.seg(OUT, b"GET /c HTTP/1.1\r\nIf-None-Match: \"x\"\r\n\r\n")
            .seg(
                IN,
                b"HTTP/1.1 304 Not Modified\r\nContent-Length: 612\r\n\r\n",
            );
        d.seg(OUT, REQ_A).seg(IN, RESP_OK);
        let st: Vec<_> = d.calls.iter().map(|c| c.status.unwrap()).collect();
        assert_eq!(st, [200, 204, 304, 200]);
    }

    #[test]
    fn expect_100_continue_counts_interim_bytes_and_keeps_final_status() {
        let mut d = Driver::new();
        d.seg(
            OUT,
            b"POST /u HTTP/1.1\r\nContent-Length: 4\r\nExpect: 100-continue\r\n\r\n",
        );
        d.seg(IN, b"HTTP/1.1 100 Continue\r\n\r\n");
        d.seg(OUT, b"data");
        d.seg(IN, b"HTTP/1.1 201 Created\r\nContent-Length: 0\r\n\r\n");
        assert_eq!(d.calls.len(), 1);
        let c = &d.calls[0];
        assert_eq!(c.status, Some(201));
        let interim = b"HTTP/1.1 100 Continue\r\n\r\n".len() as u64;
        let fin = b"HTTP/1.1 201 Created\r\nContent-Length: 0\r\n\r\n".len() as u64;
        assert_eq!(c.resp.bytes, interim + fin);
        let head = b"POST /u HTTP/1.1\r\nContent-Length: 4\r\nExpect: 100-continue\r\n\r\n";
        assert_eq!(c.req.bytes, head.len() as u64 + 4);
    }

    #[test]
    fn http10_response_ends_at_close() {
        let mut d = Driver::new();
        d.seg(OUT, b"GET / HTTP/1.0\r\n\r\n")
            .seg(IN, b"HTTP/1.0 200 OK\r\nServer: x\r\n\r\n")
            .seg(IN, b"body bytes");
        assert!(d.calls.is_empty());
        d.close();
        assert_eq!(d.summary(), vec![call("GET", "/", 200, 18, 40)]);
        assert_eq!(d.calls[0].version, "1.0");
        assert!(!d.calls[0].end_inferred);
    }

    #[test]
    fn chunked_framing_lost_to_snaplen_ends_at_next_request() {
        let mut d = Driver::new();
        d.seg(OUT, REQ_A);
        let mut big = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2000\r\n".to_vec();
        big.resize(4096, b'y');
        d.seg_cut(IN, &big, 9000).seg_cut(IN, b"12", 5000);
        assert!(d.calls.is_empty());
        d.seg(OUT, REQ_A);
        assert_eq!(d.calls.len(), 1);
        assert!(d.calls[0].end_inferred && d.calls[0].truncated);
        assert_eq!(d.calls[0].resp.bytes, 14000);
        d.seg(IN, RESP_OK);
        assert_eq!(d.calls.len(), 2);
        assert!(!d.calls[1].end_inferred);
        assert_eq!(d.stats.inferred_ends, 1);
    }

    #[test]
    fn gap_inside_body_keeps_call_gap_elsewhere_damages() {
        let mut d = Driver::new();
        d.seg(OUT, REQ_A)
            .seg(IN, b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nab");
        d.p.on_gap(IN, Some(3), &mut d.stats);
        d.seg(IN, b"cdefg");
        assert_eq!(d.calls.len(), 1);
        let head = b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\n".len() as u64;
        assert_eq!(d.calls[0].resp.bytes, head + 10);

        // A lost record at a message boundary may hide a whole message: nothing is invented.
        d.seg(OUT, REQ_A);
        d.p.on_gap(IN, Some(43), &mut d.stats);
        d.seg(IN, RESP_OK);
        d.seg(OUT, REQ_A).seg(IN, RESP_OK);
        assert_eq!(d.calls.len(), 2, "only the call after resync");
        // The request before the gap is damaged; its response, seen after resync, is counted
        // as unmatched rather than paired with the next request.
        assert_eq!(d.stats.damaged_messages, 1);
        assert_eq!(d.stats.unmatched_responses, 1);
        d.close();
        assert_eq!(d.stats.unmatched_responses, 1);
    }

    #[test]
    fn response_record_before_its_request_record_still_pairs() {
        let mut d = Driver::new();
        d.now = 10_000;
        // The response's record arrives first but happened after the request started.
        d.seg(IN, RESP_OK);
        d.now = 5_000;
        d.seg(OUT, REQ_A);
        assert_eq!(d.calls.len(), 1);
        // A response older than the next request (ebtop started mid-call) is not paired.
        let mut d = Driver::new();
        d.seg(IN, RESP_OK);
        d.seg(OUT, REQ_A);
        assert!(d.calls.is_empty());
        assert_eq!(d.stats.unmatched_responses, 1);
    }

    #[test]
    fn upgrade_switches_to_tunnel() {
        let mut d = Driver::new();
        d.seg(
            OUT,
            b"GET /ws HTTP/1.1\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n",
        )
        .seg(
            IN,
            b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\n\r\n",
        )
        .seg(OUT, b"\x81\x05hello")
        .seg(IN, b"GET / HTTP/1.1\r\n\r\n");
        assert_eq!(d.calls.len(), 1);
        assert_eq!(d.calls[0].status, Some(101));
        assert_eq!(d.stats, ParseStats::default());
    }

    /// An HTTP/2 frame: 9-byte header and payload.
    fn h2_frame(ty: u8, flags: u8, stream: u32, payload: &[u8]) -> Vec<u8> {
        let mut f = (payload.len() as u32).to_be_bytes()[1..].to_vec();
        f.extend([ty, flags]);
        f.extend(stream.to_be_bytes());
        f.extend(payload);
        f
    }

    #[test]
    fn agreed_h2c_upgrade_hands_the_connection_to_http2() {
        // curl --http2 http://127.0.0.1:18080/index.html (curl 7.88), answered as RFC 7540
        // §3.2 says: 101, then the server's SETTINGS and the answer on stream 1 (`:status 200`
        // from the static table, 0x88), in one syscall.
        const REQ: &[u8] = b"GET /index.html HTTP/1.1\r\nHost: 127.0.0.1:18080\r\n\
User-Agent: curl/7.88.1\r\nAccept: */*\r\nConnection: Upgrade, HTTP2-Settings\r\n\
Upgrade: h2c\r\nHTTP2-Settings: AAMAAABkAAQCAAAAAAIAAAAA\r\n\r\n";
        let (headers, data, settings) = (1, 0, 4);
        let (end_stream, end_headers, ack) = (1, 4, 1);
        let mut answer =
            b"HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: h2c\r\n\r\n"
                .to_vec();
        answer.extend(h2_frame(settings, 0, 0, &[]));
        answer.extend(h2_frame(headers, end_headers, 1, &[0x88]));
        answer.extend(h2_frame(data, end_stream, 1, b"hello\n"));
        let mut preface = crate::protocols::http2::PREFACE.to_vec();
        preface.extend(h2_frame(settings, 0, 0, &[]));
        preface.extend(h2_frame(settings, ack, 0, &[]));
        // GET http://…/ on stream 3: :method GET, :scheme http, :path /, :authority literal.
        let mut block = vec![0x82, 0x86, 0x84, 0x01, 15];
        block.extend(b"127.0.0.1:18080");
        let request = h2_frame(headers, end_headers | end_stream, 3, &block);
        let mut reply = h2_frame(headers, end_headers, 3, &[0x88]);
        reply.extend(h2_frame(data, end_stream, 3, b"root\n"));
        let mut d = Driver::new();
        d.seg(OUT, REQ)
            .seg(IN, &answer)
            .seg(OUT, &preface)
            .seg(IN, &h2_frame(settings, ack, 0, &[]))
            .seg(OUT, &request)
            .seg(IN, &reply)
            .close();
        let calls: Vec<_> = d
            .calls
            .iter()
            .map(|c| (c.proto, c.method.as_str(), c.resource.as_str(), c.status))
            .collect();
        assert_eq!(
            calls,
            [
                (Protocol::Http2, "GET", "/index.html", Some(200)),
                (Protocol::Http2, "GET", "/", Some(200)),
            ],
            "the upgrade request is stream 1's call, the 101 none of its own"
        );
        // Stream 1's request is the HTTP/1.1 one (no body); its response is DATA bytes.
        assert_eq!((d.calls[0].req.bytes, d.calls[0].resp.bytes), (0, 6));
        assert_eq!(
            d.calls[0].req.first_start_ns, 1000,
            "from the HTTP/1.1 request"
        );
        assert_eq!(d.stats, ParseStats::default());
    }

    #[test]
    fn h2c_upgrade_the_server_declines_stays_http1() {
        // The server answers in HTTP/1.1 (it ignores the Upgrade header): no hand-over.
        let mut d = Driver::new();
        d.seg(
            OUT,
            b"GET /a HTTP/1.1\r\nConnection: Upgrade, HTTP2-Settings\r\nUpgrade: h2c\r\n\r\n",
        )
        .seg(IN, b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
        .seg(OUT, b"GET /b HTTP/1.1\r\n\r\n")
        .seg(IN, b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n");
        let calls: Vec<_> = d.calls.iter().map(|c| (c.proto, c.status)).collect();
        assert_eq!(
            calls,
            [(Protocol::Http, Some(200)), (Protocol::Http, Some(404))]
        );
        // A 101 to another protocol (websocket) for an h2c request is a tunnel, as before.
        let mut d = Driver::new();
        d.seg(OUT, b"GET /ws HTTP/1.1\r\nUpgrade: h2c, websocket\r\n\r\n")
            .seg(
                IN,
                b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\n\r\n",
            )
            .seg(OUT, b"\x81\x05hello");
        assert_eq!(d.calls.len(), 1);
        assert_eq!(d.calls[0].status, Some(101));
    }

    #[test]
    fn garbage_never_panics_and_makes_no_calls() {
        let mut d = Driver::new();
        d.seg(OUT, b"GET / HTTP/1.1\r\nBad Header Line\x00\r\n\r\n");
        d.seg(IN, b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03");
        d.seg(OUT, b"POST / HTTP/1.1\r\nContent-Length: -5\r\n\r\n");
        d.seg(
            IN,
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nZZ\r\n",
        );
        d.close();
        assert!(d.calls.is_empty());
        assert!(d.stats.damaged_messages >= 2);
    }

    #[test]
    fn oversized_header_block_is_damaged_not_buffered_forever() {
        let mut d = Driver::new();
        d.seg(OUT, b"GET / HTTP/1.1\r\n");
        let filler = vec![b'a'; 8192];
        for _ in 0..10 {
            d.seg(OUT, b"X-Long: ").seg(OUT, &filler).seg(OUT, b"\r\n");
        }
        assert!(d.p.dirs[0].hdr_buf.len() <= MAX_HEADER_BYTES);
        assert_eq!(d.stats.damaged_messages, 1);
        d.seg(OUT, REQ_A).seg(IN, RESP_OK);
        assert_eq!(d.calls.len(), 1);
    }

    #[test]
    fn detects_message_starts() {
        assert!(is_message_start(b"GET / HTTP/1.1"));
        assert!(is_message_start(b"HTTP/1.0 200"));
        assert!(!is_message_start(b"\x16\x03\x01"));
        assert!(is_message_start(b"OPTIONS * HTTP/1.1"));
        assert!(is_message_start(b"GET http://example.com/ HTTP/1.1"));
        assert!(is_message_start(b"CONNECT example.com:443 HTTP/1.1"));
        // A Redis inline command typed by hand.
        assert!(!is_message_start(b"GET user:1\r\n"));
        assert!(!is_message_start(b"GETX"));
    }

    #[test]
    fn heads_are_kept_cut_and_redacted_when_asked() {
        let req =
            b"GET /a HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer s3cr3t\r\nCookie: id=42\r\n\r\n";
        let resp = b"HTTP/1.1 200 OK\r\nSet-Cookie: sid=abc\r\nContent-Length: 2\r\n\r\nok";
        let mut d = Driver::keeping(4096);
        d.seg(OUT, req).seg(IN, resp);
        let c = &d.calls[0];
        let text = String::from_utf8_lossy(&c.req_head.shown()).into_owned();
        assert!(text.starts_with("GET /a HTTP/1.1\r\nHost: x\r\n"), "{text}");
        assert!(
            !text.contains("s3cr3t") && !text.contains("id=42"),
            "{text}"
        );
        assert!(
            text.contains("Authorization: [redacted, 13 bytes]"),
            "{text}"
        );
        assert_eq!(c.req_head.len, req.len() as u64);
        let text = String::from_utf8_lossy(&c.resp_head.shown()).into_owned();
        assert!(
            text.contains("Set-Cookie: [redacted") && !text.contains("abc"),
            "{text}"
        );
        assert!(
            text.ends_with("\r\n\r\n"),
            "the body is not part of the head: {text}"
        );
        // Cut at the limit; nothing kept by default.
        let mut d = Driver::keeping(10);
        d.seg(OUT, req).seg(IN, resp);
        assert_eq!(d.calls[0].req_head.bytes, b"GET /a HTT");
        let mut d = Driver::new();
        d.seg(OUT, req).seg(IN, resp);
        assert!(d.calls[0].req_head.bytes.is_empty() && d.calls[0].req_head.len == 0);
    }

    #[test]
    fn secret_query_values_never_reach_the_resource_or_the_head() {
        let req = b"GET /oauth/cb?code=AbC123&state=ok HTTP/1.1\r\nHost: x\r\n\r\n";
        let resp = b"HTTP/1.1 302 Found\r\nContent-Length: 0\r\n\r\n";
        for mut d in [Driver::keeping(4096), Driver::new()] {
            d.seg(OUT, req).seg(IN, resp);
            let c = &d.calls[0];
            assert_eq!(c.resource, "/oauth/cb?code=[redacted]&state=ok");
            let head = String::from_utf8_lossy(&c.req_head.shown()).into_owned();
            assert!(!head.contains("AbC123"), "{head}");
        }
        let mut d = Driver::keeping(4096);
        d.seg(OUT, req).seg(IN, resp);
        let head = &d.calls[0].req_head;
        assert!(head
            .shown()
            .starts_with(b"GET /oauth/cb?code=[redacted]&state=ok HTTP/1.1\r\nHost: x\r\n"));
        // Kept as sent, redacted when shown: nothing else reads a head.
        assert_eq!(head.secrets, HeadSecrets::Http1);
        assert!(head.bytes.starts_with(b"GET /oauth/cb?code=AbC123"));
    }

    #[test]
    fn a_head_cut_inside_a_urls_credentials_shows_none_of_them() {
        // The cut falls between the password and the `@` that makes it one.
        let req = b"GET http://bob:s3cr3t@x/ HTTP/1.1\r\nHost: x\r\n\
            Referer: https://alice:hunter2@x/\r\n\r\n";
        let resp = b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n";
        let text = |c: &L7Call| String::from_utf8_lossy(&c.req_head.shown()).into_owned();
        let referer = req.windows(5).position(|w| w == b"@x/\r\n").unwrap();
        for keep in [20, referer - 1, referer] {
            let mut d = Driver::keeping(keep);
            d.seg(OUT, req).seg(IN, resp);
            let head = text(&d.calls[0]);
            assert!(
                !head.contains("s3cr3t") && !head.contains("hunter2"),
                "{keep}: {head}"
            );
            assert!(head.len() <= keep, "{keep}: {head}");
        }
        // Whole, it is kept as sent and redacted when shown.
        let mut d = Driver::keeping(4096);
        d.seg(OUT, req).seg(IN, resp);
        assert_eq!(d.calls[0].req_head.secrets, HeadSecrets::Http1);
        let head = text(&d.calls[0]);
        assert!(
            head.contains("Referer: https://alice:[redacted]@x/"),
            "{head}"
        );
        assert!(!head.contains("s3cr3t"), "{head}");
    }

    #[test]
    fn urls_in_header_values_and_secret_looking_headers_are_redacted_in_heads() {
        let req = b"GET /next HTTP/1.1\r\nHost: x\r\nReferer: https://x/cb?token=Tok1&page=2\r\n\
            X-CSRF-Token: Csrf2\r\nX-Goog-Api-Key: Key3\r\nKeep-Alive: timeout=5\r\n\
            X-Original-URL: /admin?api_key=Key4\r\n\r\n";
        let resp = b"HTTP/1.1 302 Found\r\nLocation: /login?user=ann&password=Pw5\r\n\
            Content-Location: /r#access_token=Tok6&state=s\r\nRefresh: 0; url=/x?sig=Sig7\r\n\
            Link: <https://x/?page=3&session=Ses8>; rel=\"next\"\r\nContent-Length: 0\r\n\r\n";
        let mut d = Driver::keeping(4096);
        d.seg(OUT, req).seg(IN, resp);
        let c = &d.calls[0];
        let head = String::from_utf8_lossy(&c.req_head.shown()).into_owned()
            + &String::from_utf8_lossy(&c.resp_head.shown());
        for secret in [
            "Tok1", "Csrf2", "Key3", "Key4", "Pw5", "Tok6", "Sig7", "Ses8",
        ] {
            assert!(!head.contains(secret), "{secret} in {head}");
        }
        for kept in [
            "Referer: https://x/cb?token=[redacted]&page=2\r\n",
            "X-CSRF-Token: [redacted, 5 bytes]\r\n",
            "X-Goog-Api-Key: [redacted, 4 bytes]\r\n",
            "Keep-Alive: timeout=5\r\n",
            "X-Original-URL: /admin?api_key=[redacted]\r\n",
            "Location: /login?user=ann&password=[redacted]\r\n",
            "Content-Location: /r#access_token=[redacted]&state=s\r\n",
            "Refresh: 0; url=/x?sig=[redacted]\r\n",
            "Link: <https://x/?page=3&session=[redacted]>; rel=\"next\"\r\n",
        ] {
            assert!(head.contains(kept), "{kept:?} not in {head}");
        }
        assert!(head.ends_with("Content-Length: 0\r\n\r\n"), "{head}");
        assert_eq!(c.req_head.len, req.len() as u64);
    }

    #[test]
    fn each_messages_own_version_when_they_differ() {
        let mut d = Driver::new();
        d.seg(OUT, b"GET / HTTP/1.1\r\nHost: h\r\n\r\n")
            .seg(IN, b"HTTP/1.0 200 OK\r\nContent-Length: 2\r\n\r\nok");
        let c = &d.calls[0];
        assert_eq!(c.version, "1.0");
        let detail = |k: &str| {
            c.details
                .iter()
                .find(|(n, _)| *n == k)
                .map(|(_, v)| v.as_str())
        };
        assert_eq!(detail("request_version"), Some("1.1"));
        assert_eq!(detail("response_version"), Some("1.0"));
        let mut d = Driver::new();
        d.seg(OUT, b"GET / HTTP/1.1\r\n\r\n")
            .seg(IN, b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n");
        assert!(d.calls[0]
            .details
            .iter()
            .all(|(n, _)| !n.ends_with("_version")));
    }
}
