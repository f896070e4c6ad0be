//! HTTP/2 over cleartext (h2c with prior knowledge, or after `Upgrade: h2c` from HTTP/1.1: see
//! [`Http2Parser::after_upgrade`]), over TLS (ALPN h2, from the TLS probes), and gRPC over it.
//!
//! Framing: each direction is a sequence of frames (a 9-byte header: 24-bit length, type,
//! flags, 31-bit stream id), after the client's 24-byte preface, framed by the framing core
//! ([`super::framing`], in stream-body mode: each payload part is handed here as it arrives;
//! the preface is a state of HTTP/2's own). Frames are read in capture
//! order per direction across any segment boundaries; DATA payloads are never kept (counted,
//! and for gRPC their 5-byte message prefixes read), so bytes beyond the snaplen are skipped by
//! length. HEADERS, CONTINUATION and PUSH_PROMISE payloads are kept (up to [`MAX_BLOCK`] per
//! header block) and decoded by one HPACK decoder per direction ([`hpack`]), in wire order.
//!
//! Calls: one per client-initiated stream. Request: `:method`, `:path` (`:authority` for
//! CONNECT), from the first HEADERS; response: `:status` from the first final HEADERS;
//! latency from the first request HEADERS to the response's END_STREAM. `req.bytes` and
//! `resp.bytes` are each side's frames of the stream on the wire (HEADERS, CONTINUATION, DATA,
//! with frame headers and padding), as HTTP/1 counts a head and a body. A stream reset (RST_STREAM) or
//! refused by a GOAWAY ends as an error call (`status_text` `RST_STREAM CANCEL`, `GOAWAY
//! NO_ERROR`, …; a reset sent by the client is the client's error). Streams still open when
//! the connection ends: those with a response started are calls with an inferred end, the
//! others unanswered requests.
//!
//! gRPC (`content-type: application/grpc*`): protocol `grpc`, resource `/package.Service/Method`,
//! `status_text` the name of `grpc-status` (from the trailers, or a Trailers-Only response),
//! `grpc_message` a detail; a streaming RPC is one call with its message counts each way
//! (`req_messages`, `resp_messages`: 5-byte length-prefixed messages across DATA frames).
//!
//! A connection picked up mid-way (no preface seen) syncs each direction at a segment that
//! starts with a plausible frame header; its HPACK tables are partially unknown: what the
//! static table and literals give is decoded, the rest is `?` (never guessed), counted once in
//! [`ParseStats::partial_headers`]. A lost byte range inside a header block or a frame header
//! forgets that direction's table the same way.

pub mod hpack;

use crate::text::lossy_prefix;
use std::collections::BTreeMap;

use super::framing::{self, Body, Framer, Header, Loss, St, Streams};
use super::{
    BenchFixture, CallKind, CapturedHead, L7Call, MessageSpan, Outcome, ParseDepth, ParseStats,
    ParserConfig, Protocol, ProtocolDescriptor, ResourceKind, Segment, StreamParser,
};
use crate::event::Direction;
use hpack::Field;

/// The protocol's entry in [`super::REGISTRY`].
pub const DESCRIPTOR: ProtocolDescriptor = ProtocolDescriptor {
    folder: "http2",
    title: "HTTP/2",
    calls: &[
        CallKind {
            proto: Protocol::Http2,
            name: "http2",
            resource: ResourceKind::UrlPath,
            metrics: super::MetricNames::http("2"),
        },
        // gRPC is HTTP/2 to the kernel: its calls are told apart per stream.
        CallKind {
            proto: Protocol::Grpc,
            name: "grpc",
            resource: ResourceKind::RpcMethod,
            metrics: super::MetricNames {
                server: "rpc_server_duration_seconds",
                client: "rpc_client_duration_seconds",
                system: Some(("rpc_system", "grpc")),
                method: "http_request_method",
                resource: "rpc_method",
            },
        },
    ],
    kernel_id: Some(7),
    datagrams: false,
    copy_whole: false,
    detect: is_connection_start,
    new_parser: |cfg| Box::new(Http2Parser::new(cfg)),
    benches: &[
        BenchFixture {
            file: "h2load_nghttpd.seg",
            what: "parse h2load -m 4 (HPACK, 4 streams at a time)",
            proto: Protocol::Http2,
            calls: 25,
        },
        BenchFixture {
            file: "grpc_python.seg",
            what: "parse grpcio unary, streaming and bidi calls",
            proto: Protocol::Grpc,
            calls: 8,
        },
    ],
};

/// The client connection preface.
pub const PREFACE: &[u8; 24] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
/// Bytes of the preface the kernel compares (its window is 15 bytes).
const PREFACE_PROBE: usize = 15;
/// Largest header block (HEADERS + CONTINUATION payloads) kept; a larger one is not decoded.
pub const MAX_BLOCK: usize = 64 * 1024;
/// Streams tracked per connection; beyond, the oldest is dropped (counted).
const MAX_STREAMS: usize = 1024;
/// Longest `:path` or `:authority` kept.
const MAX_VALUE: usize = 4096;
/// Longest `grpc-message` kept.
const MAX_MESSAGE: usize = 256;
/// Largest frame length recognition accepts (the default SETTINGS_MAX_FRAME_SIZE).
const PLAUSIBLE_LEN: u32 = 16384;

const DATA: u8 = 0;
const HEADERS: u8 = 1;
const RST_STREAM: u8 = 3;
const SETTINGS: u8 = 4;
const PUSH_PROMISE: u8 = 5;
const PING: u8 = 6;
const GOAWAY: u8 = 7;
const WINDOW_UPDATE: u8 = 8;
const CONTINUATION: u8 = 9;

const END_STREAM: u8 = 0x1;
const END_HEADERS: u8 = 0x4;
const PADDED: u8 = 0x8;
const PRIORITY_FLAG: u8 = 0x20;

const SETTINGS_HEADER_TABLE_SIZE: u16 = 1;

fn be24(b: &[u8]) -> u32 {
    u32::from(b[0]) << 16 | u32::from(b[1]) << 8 | u32::from(b[2])
}

fn be32(b: &[u8]) -> u32 {
    u32::from_be_bytes([b[0], b[1], b[2], b[3]])
}

/// Could `p` start with a frame a connection shows first, or first after ebtop started: the
/// server's SETTINGS (stream 0, a multiple of 6 bytes; an ACK empty), a WINDOW_UPDATE (4
/// bytes), a PING (8 bytes, stream 0), or HEADERS or DATA on a client-initiated (odd) stream,
/// at most 16384 bytes long (HEADERS at least 1), with only the flags their type defines? The
/// kernel's rule (`is_http2` in bpf/infer.h) is the same on the first 15 bytes.
pub fn plausible_frame(p: &[u8]) -> bool {
    if p.len() < 9 || p[5] & 0x80 != 0 {
        return false;
    }
    let len = be24(p);
    let (ty, flags) = (p[3], p[4]);
    let stream = be32(&p[5..9]);
    let odd = stream & 1 == 1;
    match ty {
        DATA => odd && flags & !(END_STREAM | PADDED) == 0 && len <= PLAUSIBLE_LEN,
        HEADERS => {
            odd && flags & !(END_STREAM | END_HEADERS | PADDED | PRIORITY_FLAG) == 0
                && (1..=PLAUSIBLE_LEN).contains(&len)
        }
        SETTINGS => {
            stream == 0
                && len.is_multiple_of(6)
                && len <= 60
                && (flags == 0 || (flags == 1 && len == 0))
        }
        WINDOW_UPDATE => len == 4 && flags == 0 && (stream == 0 || odd),
        PING => len == 8 && flags & !1 == 0 && stream == 0,
        _ => false,
    }
}

/// Could `p` start with a frame of any type (a segment after a snaplen cut)?
fn frame_like(p: &[u8]) -> bool {
    p.len() >= 9 && p[3] <= CONTINUATION && p[5] & 0x80 == 0
}

/// Does `p`, the first bytes of a connection in some direction, start HTTP/2: the client's
/// preface (at least its first 15 bytes, and all of what follows as far as `p` goes), or a
/// frame by [`plausible_frame`]?
pub fn is_connection_start(p: &[u8]) -> bool {
    if p.len() >= PREFACE_PROBE && p[..p.len().min(PREFACE.len())] == PREFACE[..p.len().min(24)] {
        return true;
    }
    plausible_frame(p)
}

/// The name of an HTTP/2 error code (RFC 9113 7).
fn error_name(code: u32) -> String {
    let name = match code {
        0x0 => "NO_ERROR",
        0x1 => "PROTOCOL_ERROR",
        0x2 => "INTERNAL_ERROR",
        0x3 => "FLOW_CONTROL_ERROR",
        0x4 => "SETTINGS_TIMEOUT",
        0x5 => "STREAM_CLOSED",
        0x6 => "FRAME_SIZE_ERROR",
        0x7 => "REFUSED_STREAM",
        0x8 => "CANCEL",
        0x9 => "COMPRESSION_ERROR",
        0xa => "CONNECT_ERROR",
        0xb => "ENHANCE_YOUR_CALM",
        0xc => "INADEQUATE_SECURITY",
        0xd => "HTTP_1_1_REQUIRED",
        _ => return format!("0x{code:x}"),
    };
    name.to_owned()
}

/// A gRPC status code's name, and whose fault it is.
fn grpc_status(code: u32) -> (String, Outcome) {
    let (name, outcome) = match code {
        0 => ("OK", Outcome::Ok),
        1 => ("CANCELLED", Outcome::ClientError),
        2 => ("UNKNOWN", Outcome::ServerError),
        3 => ("INVALID_ARGUMENT", Outcome::ClientError),
        4 => ("DEADLINE_EXCEEDED", Outcome::ServerError),
        5 => ("NOT_FOUND", Outcome::ClientError),
        6 => ("ALREADY_EXISTS", Outcome::ClientError),
        7 => ("PERMISSION_DENIED", Outcome::ClientError),
        8 => ("RESOURCE_EXHAUSTED", Outcome::ServerError),
        9 => ("FAILED_PRECONDITION", Outcome::ClientError),
        10 => ("ABORTED", Outcome::ServerError),
        11 => ("OUT_OF_RANGE", Outcome::ClientError),
        12 => ("UNIMPLEMENTED", Outcome::ServerError),
        13 => ("INTERNAL", Outcome::ServerError),
        14 => ("UNAVAILABLE", Outcome::ServerError),
        15 => ("DATA_LOSS", Outcome::ServerError),
        16 => ("UNAUTHENTICATED", Outcome::ClientError),
        _ => return (code.to_string(), Outcome::ServerError),
    };
    (name.to_owned(), outcome)
}

// ---------------------------------------------------------------------------------------------
// gRPC messages

/// Counts gRPC length-prefixed messages (1 byte flag, 4 bytes length, the message) in one
/// direction of a stream's DATA.
#[derive(Debug, Default)]
struct GrpcMessages {
    count: u64,
    prefix: [u8; 5],
    have: usize,
    /// Bytes of the current message still to come.
    left: u64,
    /// Bytes of a prefix were not captured: the count stops being exact.
    lost: bool,
}

impl GrpcMessages {
    fn feed(&mut self, mut b: &[u8]) {
        while !b.is_empty() && !self.lost {
            if self.left > 0 {
                let n = self.left.min(b.len() as u64);
                self.left -= n;
                b = &b[n as usize..];
                continue;
            }
            let take = (5 - self.have).min(b.len());
            self.prefix[self.have..self.have + take].copy_from_slice(&b[..take]);
            self.have += take;
            b = &b[take..];
            if self.have == 5 {
                self.have = 0;
                self.count += 1;
                self.left = u64::from(be32(&self.prefix[1..5]));
            }
        }
    }

    /// `n` bytes not captured.
    fn skip(&mut self, n: u64) {
        if self.left >= n && self.have == 0 {
            self.left -= n;
        } else {
            self.lost = true;
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Streams

/// What one side of a stream carried.
#[derive(Debug, Default)]
struct Half {
    span: Option<MessageSpan>,
    last_seg: u64,
    /// DATA payload bytes (padding excluded): what gRPC's message count reads.
    data: u64,
    /// The side's bytes on the wire: its HEADERS and CONTINUATION frames (trailers too) and
    /// non-empty DATA frames, each with its 9-byte frame header and padding
    /// (`req_bytes`/`resp_bytes`, as HTTP/1 counts a message's head and body).
    wire: u64,
    msgs: GrpcMessages,
    ended: bool,
    /// Some header field of this side was unknown (HPACK entry from before ebtop started).
    partial: bool,
    truncated: bool,
}

/// Segment `seg_id` carried some of what `span` covers (once per segment however often called).
fn touch(span: &mut Option<MessageSpan>, last: &mut u64, seg_id: u64, seg: &Segment) {
    match span.as_mut() {
        None => {
            *span = Some(MessageSpan::starting(seg));
            *last = seg_id;
        }
        Some(s) if *last != seg_id => {
            s.extend(seg);
            *last = seg_id;
        }
        Some(_) => {}
    }
}

impl Half {
    fn touch(&mut self, seg_id: u64, seg: &Segment) {
        touch(&mut self.span, &mut self.last_seg, seg_id, seg);
    }

    /// The syscalls of a header block (`block`, from segment `first` to segment `last`; its
    /// `bytes`: the block's frames on the wire).
    fn add_block(&mut self, block: MessageSpan, first: u64, last: u64) {
        self.wire += block.bytes;
        match self.span.as_mut() {
            None => self.span = Some(block),
            Some(s) => {
                s.last_start_ns = block.last_start_ns;
                s.last_end_ns = block.last_end_ns;
                let shared = u32::from(self.last_seg == first);
                s.syscalls += block.syscalls - shared;
            }
        }
        self.last_seg = last;
    }
}

#[derive(Debug, Default)]
struct Stream {
    method: Option<String>,
    path: Option<String>,
    authority: Option<String>,
    /// A valid W3C `traceparent` of the request, in its version-00 form.
    traceparent: Option<String>,
    grpc: bool,
    /// A `content-type` was decoded in the request or the response (so `grpc` is known).
    content_type_seen: bool,
    /// Final `:status` (1xx responses are skipped).
    status: Option<u32>,
    /// A final response HEADERS was seen (what follows is DATA or trailers).
    resp_headers: bool,
    grpc_status: Option<u32>,
    grpc_message: Option<String>,
    req: Half,
    resp: Half,
}

/// The fields of a header block ebtop reads.
#[derive(Debug, Default)]
struct Headers {
    method: Option<String>,
    path: Option<String>,
    authority: Option<String>,
    status: Option<u32>,
    content_type: Option<String>,
    grpc_status: Option<u32>,
    grpc_message: Option<String>,
    /// The first valid `traceparent` (W3C Trace Context), as `--otlp` joins traces by it.
    traceparent: Option<String>,
    /// Fields whose name was not known (so any of the above may be among them).
    unknown: usize,
    /// The block could not be decoded at all (too large, cut, or bad).
    damaged: bool,
}

impl Headers {
    fn from_fields(fields: &[Field], damaged: bool) -> Headers {
        let mut h = Headers {
            damaged,
            ..Headers::default()
        };
        for f in fields {
            let Field::Known { name, value } = f else {
                h.unknown += 1;
                continue;
            };
            let text = || lossy_prefix(value, MAX_VALUE);
            match name.as_slice() {
                b":method" => h.method = Some(text()),
                // A path's secrets never leave the parser (as HTTP/1's).
                b":path" => {
                    h.path = Some(lossy_prefix(
                        &super::redact::redact_target(value),
                        MAX_VALUE,
                    ))
                }
                b":authority" => h.authority = Some(text()),
                b":status" => {
                    h.status = std::str::from_utf8(value).ok().and_then(|s| s.parse().ok())
                }
                b"content-type" => h.content_type = Some(lossy_prefix(value, 128)),
                b"grpc-status" => {
                    h.grpc_status = std::str::from_utf8(value).ok().and_then(|s| s.parse().ok())
                }
                b"grpc-message" => h.grpc_message = Some(lossy_prefix(value, MAX_MESSAGE)),
                b"traceparent" if h.traceparent.is_none() => {
                    h.traceparent =
                        super::trace_context::TraceParent::parse(value).map(|t| t.to_header())
                }
                _ => {}
            }
        }
        h
    }

    /// Whether the block is a request's (pseudo-headers only a request has), as far as known.
    fn is_request(&self) -> Option<bool> {
        if self.method.is_some() || self.path.is_some() {
            Some(true)
        } else if self.status.is_some() {
            Some(false)
        } else {
            None
        }
    }

    /// Some field that matters may be hidden.
    fn partial(&self) -> bool {
        self.unknown > 0 || self.damaged
    }
}

// ---------------------------------------------------------------------------------------------
// Framing per direction

/// HTTP/2's own state of a direction (the framing core's `St::Proto`): reading the client's
/// connection preface, `0` bytes of it seen.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Preface(usize);

/// A frame's header: its kind to the framing core.
#[derive(Debug, Clone, Copy, Default)]
pub struct FrameHeader {
    len: u32,
    ty: u8,
    flags: u8,
    stream: u32,
}

const FRAME_HEADER: usize = 9;

/// What a direction keeps of the frame under way and of its header block (the framing core
/// keeps its place: header bytes, the body's count, sync).
#[derive(Debug, Default)]
struct Dir {
    frame: FrameHeader,
    /// Payload bytes of the current frame read so far.
    pos: u64,
    /// DATA: padding length (from the first payload byte when PADDED).
    pad: u64,
    /// Kept payload of a control frame or the current header block fragment.
    body: Vec<u8>,
    /// The header block being assembled (HEADERS/PUSH_PROMISE + CONTINUATIONs) and its stream.
    block: Vec<u8>,
    block_stream: Option<u32>,
    block_flags: u8,
    block_type: u8,
    /// Bytes of the block were lost or it was too large: not decodable.
    block_damaged: bool,
    /// The syscalls that carried the block.
    block_span: Option<MessageSpan>,
    block_first_seg: u64,
    block_seg: u64,
    /// The block's frames on the wire so far (frame headers included).
    block_wire: u64,
    /// Bytes of the current frame were not captured.
    frame_cut: bool,
    /// Lost at a syscall's end (frames cut by the snaplen): the next segment most likely
    /// starts a frame, of any type.
    resume: bool,
    decoder: Option<hpack::Decoder>,
}

pub struct Http2Parser {
    depth: ParseDepth,
    keep_head: usize,
    framing: Streams<FrameHeader, Preface>,
    dirs: [Dir; 2],
    /// Index of the direction the client's frames travel, once known.
    client: Option<usize>,
    /// The preface was seen: both HPACK tables are seen from their start.
    from_start: bool,
    /// Counted in `partial_headers` already.
    partial_counted: bool,
    streams: BTreeMap<u32, Stream>,
    /// Streams whose request was not seen: their frames are ignored until they end.
    orphans: BTreeMap<u32, ()>,
    fields: Vec<Field>,
}

/// The HTTP/1.1 request that asked to switch to HTTP/2 in clear text (`Upgrade: h2c`) and was
/// answered `101 Switching Protocols`: its answer comes as HTTP/2, on stream 1 (RFC 7540
/// §3.2), so it is that stream's request.
#[derive(Debug)]
pub struct UpgradeRequest {
    pub method: String,
    pub path: String,
    pub authority: Option<String>,
    /// The syscalls that carried it.
    pub span: MessageSpan,
    /// Its body's bytes (an HTTP/2 call counts DATA bytes).
    pub body_bytes: u64,
}

impl Http2Parser {
    /// The parser of a connection the HTTP/1 parser hands over after an agreed `Upgrade: h2c`:
    /// the client's direction goes on with the connection preface, the server's with its
    /// SETTINGS, both HPACK tables from their start, and stream 1 is the upgrade request.
    pub fn after_upgrade(cfg: &ParserConfig, client: Direction, req: UpgradeRequest) -> Self {
        let mut p = Http2Parser::new(cfg);
        let c = client.index();
        p.client = Some(c);
        p.from_start = true;
        p.framing.dirs[c].st = St::Proto(Preface(0));
        p.framing.dirs[1 - c].st = St::Header;
        for d in &mut p.framing.dirs {
            d.synced = true;
        }
        let mut s = Stream {
            method: Some(req.method),
            path: Some(req.path),
            authority: req.authority,
            ..Stream::default()
        };
        s.req.span = Some(req.span);
        s.req.data = req.body_bytes;
        // As HTTP/1 counted it: the request's head and body.
        s.req.wire = req.span.bytes;
        s.req.ended = true;
        p.streams.insert(1, s);
        p
    }

    pub fn new(cfg: &ParserConfig) -> Self {
        Http2Parser {
            depth: cfg.depth,
            keep_head: cfg.keep_head,
            framing: Streams::new(St::Lost, FRAME_HEADER),
            dirs: [Dir::default(), Dir::default()],
            client: None,
            from_start: false,
            partial_counted: false,
            streams: BTreeMap::new(),
            orphans: BTreeMap::new(),
            fields: Vec::new(),
        }
    }

    /// Bytes the parser holds (for the flat-memory tests).
    #[cfg(test)]
    fn buffered_bytes(&self) -> usize {
        self.dirs
            .iter()
            .map(|d| {
                d.body.capacity()
                    + d.block.capacity()
                    + d.decoder.as_ref().map_or(0, hpack::Decoder::held_bytes)
            })
            .sum()
    }

    /// Header blocks of direction d may have gone by unseen: its HPACK table is unknown.
    fn forget_table(&mut self, d: usize, stats: &mut ParseStats) {
        if let Some(dec) = self.dirs[d].decoder.as_mut() {
            dec.lose();
            if !self.partial_counted {
                self.partial_counted = true;
                stats.partial_headers += 1;
            }
        }
    }

    /// A frame header is in: what it says, or that it makes no sense (a header block is
    /// continued by CONTINUATION frames of its stream and nothing else).
    #[inline]
    fn frame_start(&mut self, d: usize, h: FrameHeader) -> Header<FrameHeader> {
        let ds = &mut self.dirs[d];
        let in_block = ds.block_stream.is_some();
        if in_block != (h.ty == CONTINUATION) || (in_block && ds.block_stream != Some(h.stream)) {
            return Header::NotAFrame;
        }
        ds.frame = h;
        ds.pos = 0;
        ds.pad = 0;
        ds.frame_cut = false;
        ds.body.clear();
        if h.ty == HEADERS || h.ty == PUSH_PROMISE {
            ds.block.clear();
            ds.block_stream = Some(h.stream);
            ds.block_flags = h.flags;
            ds.block_type = h.ty;
            ds.block_damaged = false;
            ds.block_span = None;
            ds.block_wire = 0;
            ds.block_first_seg = self.framing.seg_id;
        }
        Header::Frame {
            body_len: u64::from(h.len),
            kind: h,
            more: false,
        }
    }

    /// The frame just started came in segment `seg`: it counts in its stream's or header
    /// block's syscalls. Its 9-byte header counts in their bytes on the wire now, its payload
    /// as it passes (`payload`, `data_lost`): a frame the connection ends inside counts only
    /// what crossed.
    #[inline]
    fn frame_seen(&mut self, d: usize, seg: &Segment) {
        let seg_id = self.framing.seg_id;
        let f = self.dirs[d].frame;
        let wire = FRAME_HEADER as u64;
        if f.ty == DATA {
            if let Some(half) = self.half(d, f.stream) {
                half.touch(seg_id, seg);
                // An empty DATA frame only ends its side, often after the answer (a gRPC
                // client half-closes once the server has replied): the call may be made before
                // it comes on one side and after on the other. Not counted, so both sides agree.
                if f.len > 0 {
                    half.wire += wire;
                }
            }
        }
        let ds = &mut self.dirs[d];
        // Only a header block's frames come while a block is open (`frame_start`).
        if ds.block_stream.is_some() {
            let opens = ds.block_span.is_none();
            touch(&mut ds.block_span, &mut ds.block_seg, seg_id, seg);
            if opens {
                // The block's first frame header: a stream's first block is where its
                // request or response starts (what a hop matches, src/chains.rs).
                if let Some(b) = ds.block_span.as_mut() {
                    b.first_pos = self.framing.dirs[d].frame_pos;
                }
            }
            ds.block_wire += wire;
        }
    }

    /// Frame headers of direction d not captured (a write of several frames cut by the
    /// snaplen): what they were is unknown, but a writer ends its syscall at a frame's end,
    /// so the next segment is tried as a frame start. The stream whose DATA ran into the hole
    /// may have ended in it; header blocks may have gone by.
    fn headers_unseen(&mut self, d: usize, n: u64, stats: &mut ParseStats) {
        stats.skipped(n);
        let s = &mut self.framing.dirs[d];
        s.st = St::Lost;
        s.clear(FRAME_HEADER);
        self.dirs[d].resume = true;
        let f = self.dirs[d].frame;
        self.forget_table(d, stats);
        if f.ty == DATA {
            if let Some(half) = self.half(d, f.stream) {
                half.truncated = true;
                half.msgs.lost = true;
            }
        }
    }

    /// `n` bytes inside the DATA payload under way in direction d were lost (a gap).
    fn data_lost(&mut self, d: usize, n: u64) {
        let ds = &mut self.dirs[d];
        let f = ds.frame;
        let start = ds.pos;
        ds.pos += n;
        let data_start = u64::from(f.flags & PADDED != 0);
        if start < data_start {
            ds.frame_cut = true;
        }
        let data_end = u64::from(f.len).saturating_sub(ds.pad).max(data_start);
        let lo = start.max(data_start);
        let hi = (start + n).min(data_end);
        if let Some(half) = self.half(d, f.stream) {
            half.truncated = true;
            half.wire += n;
            if hi > lo {
                half.data += hi - lo;
                half.msgs.skip(hi - lo);
            }
        }
    }
}

impl Http2Parser {
    fn is_client(&self, d: usize) -> Option<bool> {
        self.client.map(|c| c == d)
    }

    /// The half of stream `id` that direction d sends, if the stream is followed.
    fn half(&mut self, d: usize, id: u32) -> Option<&mut Half> {
        let client = self.is_client(d)?;
        let s = self.streams.get_mut(&id)?;
        Some(if client { &mut s.req } else { &mut s.resp })
    }

    /// Payload bytes of the current frame: `bytes` captured (None: `n` bytes not captured).
    fn payload(&mut self, d: usize, seg: &Segment, bytes: Option<&[u8]>, n: u64) {
        let seg_id = self.framing.seg_id;
        let ds = &mut self.dirs[d];
        let f = ds.frame;
        let start = ds.pos;
        ds.pos += n;
        if ds.block_stream.is_some() && n > 0 {
            touch(&mut ds.block_span, &mut ds.block_seg, seg_id, seg);
            ds.block_wire += n;
        }
        match f.ty {
            DATA => {
                let mut from = 0u64;
                if f.flags & PADDED != 0 && start == 0 && n > 0 {
                    match bytes {
                        Some(b) => ds.pad = u64::from(b[0]),
                        None => ds.frame_cut = true,
                    }
                    from = 1;
                }
                // The data lies in [data_start, len - pad) of the payload.
                let data_start = u64::from(f.flags & PADDED != 0);
                let data_end = u64::from(f.len).saturating_sub(ds.pad).max(data_start);
                let lo = (start + from).max(data_start);
                let hi = (start + n).min(data_end);
                let Some(half) = self.half(d, f.stream) else {
                    return;
                };
                // Padding too: the frame's bytes on the wire (n > 0: not an empty frame).
                half.wire += n;
                if hi <= lo {
                    return;
                }
                half.touch(seg_id, seg);
                half.data += hi - lo;
                match bytes {
                    Some(b) => half
                        .msgs
                        .feed(&b[(lo - start) as usize..(hi - start) as usize]),
                    None => {
                        half.msgs.skip(hi - lo);
                        half.truncated = true;
                    }
                }
            }
            HEADERS | CONTINUATION | PUSH_PROMISE => match bytes {
                Some(b) if !ds.block_damaged && ds.block.len() + b.len() <= MAX_BLOCK => {
                    ds.block.extend_from_slice(b)
                }
                _ => {
                    ds.block_damaged = true;
                    ds.block.clear();
                }
            },
            _ => match bytes {
                // Control frames: only their first bytes matter (RST_STREAM, GOAWAY, SETTINGS).
                Some(b) => {
                    let room = 64usize.saturating_sub(ds.body.len()).min(b.len());
                    ds.body.extend_from_slice(&b[..room]);
                }
                None => ds.frame_cut = true,
            },
        }
    }

    /// The current frame of direction d is complete.
    fn frame_end(&mut self, d: usize, out: &mut Vec<L7Call>, stats: &mut ParseStats) {
        let f = self.dirs[d].frame;
        if f.ty == DATA && self.dirs[d].frame_cut {
            // The padding length was not captured: the DATA count may hold padding.
            if let Some(half) = self.half(d, f.stream) {
                half.truncated = true;
            }
        }
        match f.ty {
            DATA if f.flags & END_STREAM != 0 => self.end_of_side(d, f.stream, out),
            // A header block ends with its END_HEADERS frame; padding and priority fields come
            // off then.
            HEADERS | CONTINUATION | PUSH_PROMISE => {
                if f.ty != CONTINUATION {
                    self.strip_fields(d);
                }
                if f.flags & END_HEADERS != 0 {
                    self.block_done(d, out, stats)
                }
            }
            RST_STREAM => {
                let code = self.dirs[d].body.get(..4).map(be32);
                stats.stream_resets += 1;
                let why = format!("RST_STREAM {}", code.map_or("?".into(), error_name));
                self.reset(d, f.stream, why, out);
            }
            GOAWAY => {
                let body = &self.dirs[d].body;
                if let (Some(last), Some(code)) = (body.get(..4), body.get(4..8)) {
                    let (last, code) = (be32(last) & 0x7fff_ffff, be32(code));
                    if code != 0 {
                        stats.stream_resets += 1;
                    }
                    // The server's GOAWAY names the last client stream it processed: those above
                    // never will be. (A client's names server-initiated streams: none are calls.)
                    let refused: Vec<u32> = if self.is_client(d) == Some(false) {
                        self.streams.range(last + 1..).map(|(k, _)| *k).collect()
                    } else {
                        Vec::new()
                    };
                    for id in refused {
                        self.reset(d, id, format!("GOAWAY {}", error_name(code)), out);
                    }
                }
            }
            SETTINGS if f.flags & 1 == 0 => {
                // SETTINGS_HEADER_TABLE_SIZE bounds the table of what the other side sends.
                let body = std::mem::take(&mut self.dirs[d].body);
                for s in body.chunks_exact(6) {
                    if u16::from_be_bytes([s[0], s[1]]) == SETTINGS_HEADER_TABLE_SIZE {
                        if let Some(dec) = self.dirs[1 - d].decoder.as_mut() {
                            dec.allow(be32(&s[2..6]));
                        }
                    }
                }
                self.dirs[d].body = body;
            }
            // PING, PRIORITY, WINDOW_UPDATE, unknown types: nothing to a call.
            _ => {}
        }
    }

    /// A HEADERS or PUSH_PROMISE frame is in (the block holds its payload alone): its padding
    /// and the fields before the block fragment (priority; the promised stream) come off.
    fn strip_fields(&mut self, d: usize) {
        let ds = &mut self.dirs[d];
        if ds.block_damaged {
            return;
        }
        let f = ds.frame;
        let mut start = 0;
        let mut pad = 0;
        if f.flags & PADDED != 0 {
            match ds.block.first() {
                Some(&p) => {
                    pad = p as usize;
                    start = 1;
                }
                None => ds.block_damaged = true,
            }
        }
        start += match f.ty {
            HEADERS if f.flags & PRIORITY_FLAG != 0 => 5,
            PUSH_PROMISE => 4,
            _ => 0,
        };
        if ds.block_damaged || ds.block.len() < start + pad {
            ds.block_damaged = true;
            ds.block.clear();
            return;
        }
        let end = ds.block.len() - pad;
        ds.block.truncate(end);
        ds.block.drain(..start);
    }

    /// A whole header block from direction d.
    fn block_done(&mut self, d: usize, out: &mut Vec<L7Call>, stats: &mut ParseStats) {
        let ds = &mut self.dirs[d];
        let Some(id) = ds.block_stream.take() else {
            return;
        };
        let (flags, ty) = (ds.block_flags, ds.block_type);
        let span = ds.block_span.take();
        let block_wire = ds.block_wire;
        let (first_seg, last_seg) = (ds.block_first_seg, ds.block_seg);
        let block = std::mem::take(&mut ds.block);
        let mut damaged = ds.block_damaged;
        let b = &block[..];
        if self.dirs[d].decoder.is_none() {
            self.dirs[d].decoder = Some(hpack::Decoder::new(self.from_start));
            if !self.from_start && !self.partial_counted {
                self.partial_counted = true;
                stats.partial_headers += 1;
            }
        }
        let mut fields = std::mem::take(&mut self.fields);
        fields.clear();
        let dec = self.dirs[d].decoder.as_mut().expect("set above");
        if damaged {
            dec.lose();
            stats.damaged_messages += 1;
        } else if dec.decode(b, &mut fields).is_err() {
            damaged = true;
            stats.damaged_messages += 1;
        }
        let h = Headers::from_fields(&fields, damaged);
        self.fields = fields;
        // Keep the block's buffer for the next one unless a huge block grew it.
        if block.capacity() <= 16 * 1024 {
            self.dirs[d].block = block;
            self.dirs[d].block.clear();
        }
        if ty == PUSH_PROMISE {
            // A server push: no request of the client's; its stream is the server's.
            stats.pushes += 1;
            return;
        }
        if self.client.is_none() {
            self.client = Some(match h.is_request() {
                Some(true) | None => d,
                Some(false) => 1 - d,
            });
        }
        let client = self.is_client(d) == Some(true);
        // Set when the block's first frame started (`frame_seen`).
        let span = MessageSpan {
            bytes: block_wire,
            ..span.unwrap_or_default()
        };
        if client {
            self.request_headers(id, &h, span, first_seg, last_seg, stats);
        } else {
            self.response_headers(id, &h, span, first_seg, last_seg, stats);
        }
        if flags & END_STREAM != 0 {
            self.end_of_side(d, id, out);
        }
    }

    fn request_headers(
        &mut self,
        id: u32,
        h: &Headers,
        span: MessageSpan,
        first: u64,
        last: u64,
        stats: &mut ParseStats,
    ) {
        if self.orphans.contains_key(&id) {
            return;
        }
        if let Some(s) = self.streams.get_mut(&id) {
            // Trailers of the request.
            s.req.add_block(span, first, last);
            s.req.partial |= h.partial();
            return;
        }
        if self.streams.len() >= MAX_STREAMS {
            // The oldest stream is given up: its call is lost, counted.
            if self.streams.pop_first().is_some() {
                stats.damaged_messages += 1;
            }
        }
        let grpc = h
            .content_type
            .as_deref()
            .is_some_and(|c| c.starts_with("application/grpc"));
        let mut s = Stream {
            method: h.method.clone(),
            path: h.path.clone(),
            authority: h.authority.clone(),
            traceparent: h.traceparent.clone(),
            grpc,
            content_type_seen: h.content_type.is_some(),
            ..Stream::default()
        };
        s.req.add_block(span, first, last);
        s.req.partial = h.partial();
        self.streams.insert(id, s);
    }

    fn response_headers(
        &mut self,
        id: u32,
        h: &Headers,
        span: MessageSpan,
        first: u64,
        last: u64,
        stats: &mut ParseStats,
    ) {
        let Some(s) = self.streams.get_mut(&id) else {
            // A pushed stream (even id) answers no request: counted in `pushes` already.
            if id % 2 == 1 && !self.orphans.contains_key(&id) {
                stats.unmatched_responses += 1;
                if self.orphans.len() >= MAX_STREAMS {
                    self.orphans.pop_first();
                }
                self.orphans.insert(id, ());
            }
            return;
        };
        // An informational response (1xx) is no answer yet.
        if !s.resp_headers && h.status.is_some_and(|c| (100..200).contains(&c)) {
            s.resp.add_block(span, first, last);
            return;
        }
        s.resp.add_block(span, first, last);
        s.resp.partial |= h.partial();
        if !s.resp_headers {
            s.resp_headers = true;
            s.status = h.status;
            s.content_type_seen |= h.content_type.is_some();
            if h.content_type
                .as_deref()
                .is_some_and(|c| c.starts_with("application/grpc"))
            {
                s.grpc = true;
            }
        }
        if h.grpc_status.is_some() {
            // Only gRPC sends it: the call is gRPC even when its content-type was hidden.
            s.grpc = true;
            s.grpc_status = h.grpc_status;
            s.grpc_message = h.grpc_message.clone();
        }
    }

    /// Direction d sent END_STREAM on stream `id`: the response's end completes the call.
    fn end_of_side(&mut self, d: usize, id: u32, out: &mut Vec<L7Call>) {
        if self.is_client(d) == Some(true) {
            if let Some(s) = self.streams.get_mut(&id) {
                s.req.ended = true;
            }
            return;
        }
        if self.orphans.remove(&id).is_some() {
            return;
        }
        if let Some(s) = self.streams.remove(&id) {
            self.emit(s, None, false, out);
        }
    }

    /// Stream `id` was reset by direction d (RST_STREAM) or refused (GOAWAY).
    fn reset(&mut self, d: usize, id: u32, why: String, out: &mut Vec<L7Call>) {
        self.orphans.remove(&id);
        if let Some(s) = self.streams.remove(&id) {
            let outcome = if self.is_client(d) == Some(true) {
                Outcome::ClientError
            } else {
                Outcome::ServerError
            };
            self.emit(s, Some((why, outcome)), false, out);
        }
    }

    fn head(&self, text: String, len: u64) -> CapturedHead {
        if self.keep_head == 0 {
            return CapturedHead::default();
        }
        let mut bytes = text.into_bytes();
        bytes.truncate(self.keep_head);
        CapturedHead::redacted(bytes, len)
    }

    fn emit(
        &mut self,
        s: Stream,
        error: Option<(String, Outcome)>,
        end_inferred: bool,
        out: &mut Vec<L7Call>,
    ) {
        let full = self.depth == ParseDepth::Full;
        let method = s.method.clone().unwrap_or_else(|| "?".to_owned());
        let resource = match (s.method.as_deref(), &s.path, &s.authority) {
            (Some("CONNECT"), None, Some(a)) => a.clone(),
            (_, Some(p), _) => p.clone(),
            _ => "?".to_owned(),
        };
        let mut details = Vec::new();
        // Whether the call is gRPC (whose outcome is `grpc-status`, not `:status`): known when
        // a content-type or a `grpc-status` was decoded, when the method is not POST, or when
        // either side's header blocks were decoded in full (gRPC always sends its
        // content-type); else unknown (HPACK entries from before ebtop started hid them).
        let grpc_known = if s.grpc {
            Some(true)
        } else if s.content_type_seen
            || s.method.as_deref().is_some_and(|m| m != "POST")
            || !s.req.partial
            || !s.resp.partial
        {
            Some(false)
        } else {
            None
        };
        let by_http = |status: Option<u32>| match status {
            Some(c) if c >= 500 => Outcome::ServerError,
            Some(c) if c >= 400 => Outcome::ClientError,
            Some(_) => Outcome::Ok,
            None => Outcome::Unknown,
        };
        let mut maybe_grpc_status = false;
        let (status, status_text, outcome) = match (&error, grpc_known, s.grpc_status) {
            (Some((why, o)), _, _) => (s.status, Some(why.clone()), *o),
            (None, Some(true), Some(code)) => {
                let (name, o) = grpc_status(code);
                (None, Some(name), o)
            }
            // gRPC without a decoded `grpc-status`: its trailers had fields that could not be
            // decoded (an entry indexed before ebtop started: grpcio indexes every status),
            // or were not seen (lost, or the stream ended out of sight). A 5xx is an error
            // either way.
            (None, Some(true), None) => match s.status {
                Some(c) if c >= 500 => (s.status, None, Outcome::ServerError),
                _ => (None, None, Outcome::Unknown),
            },
            // Maybe gRPC, maybe not: only a 5xx is an error either way (gRPC maps 5xx to
            // UNAVAILABLE/UNKNOWN/INTERNAL); else the HTTP status tells nothing sure.
            (None, None, _) => match s.status {
                Some(c) if c >= 500 => (s.status, None, Outcome::ServerError),
                _ => {
                    maybe_grpc_status = true;
                    (None, None, Outcome::Unknown)
                }
            },
            (None, _, _) => (s.status, None, by_http(s.status)),
        };
        if maybe_grpc_status && full {
            if let Some(c) = s.status {
                details.push(("http_status", c.to_string()));
            }
        }
        if s.grpc && full {
            if let Some(c) = s.status.filter(|_| status.is_none()) {
                details.push(("http_status", c.to_string()));
            }
            if let Some(c) = s.grpc_status {
                details.push(("grpc_status", c.to_string()));
            }
            if !s.req.msgs.lost && !s.req.truncated {
                details.push(("req_messages", s.req.msgs.count.to_string()));
            }
            if !s.resp.msgs.lost && !s.resp.truncated {
                details.push(("resp_messages", s.resp.msgs.count.to_string()));
            }
        }
        if full {
            if let Some(a) = &s.authority {
                details.push(("authority", a.clone()));
            }
            if let Some(t) = &s.traceparent {
                details.push(("traceparent", t.clone()));
            }
            if let Some(m) = s.grpc_message.as_ref().filter(|m| !m.is_empty()) {
                details.push(("grpc_message", m.clone()));
            }
        }
        if s.req.partial || s.resp.partial {
            details.push(("headers", "partial".to_owned()));
        }
        let client = self.client.unwrap_or(0);
        let req_text = format!("{method} {resource} HTTP/2");
        let resp_text = match &status_text {
            Some(t) => t.clone(),
            None => s.status.map_or("?".to_owned(), |c| c.to_string()),
        };
        let req = s.req.span.unwrap_or_default();
        let resp = s.resp.span.unwrap_or_default();
        let req_head = self.head(req_text, s.req.data);
        let resp_head = self.head(resp_text, s.resp.data);
        out.push(L7Call {
            proto: if s.grpc {
                Protocol::Grpc
            } else {
                Protocol::Http2
            },
            request_dir: if client == 0 {
                Direction::Egress
            } else {
                Direction::Ingress
            },
            method,
            resource,
            version: "2",
            status,
            status_text,
            outcome,
            req: MessageSpan {
                bytes: s.req.wire,
                ..req
            },
            resp: MessageSpan {
                bytes: s.resp.wire,
                ..resp
            },
            truncated: s.req.truncated || s.resp.truncated,
            end_inferred,
            details,
            req_head,
            resp_head,
        });
    }
}

impl Framer for Http2Parser {
    type Kind = FrameHeader;
    type State = Preface;
    const MIN_HEADER: usize = FRAME_HEADER;
    /// DATA is counted (and its gRPC prefixes read) and header blocks kept as they arrive.
    const STREAM_BODY: bool = true;
    /// A frame that ends inside a syscall's uncaptured bytes is done before the frame headers
    /// that follow it go unseen.
    const FINISH_BODY_BEFORE_UNSEEN: bool = true;
    /// Each stream counts its own syscalls and bytes.
    const SPANS: bool = false;

    fn streams(&mut self) -> &mut Streams<FrameHeader, Preface> {
        &mut self.framing
    }

    fn streams_ref(&self) -> &Streams<FrameHeader, Preface> {
        &self.framing
    }

    fn stopped(&self) -> bool {
        false
    }

    fn pending(&self) -> usize {
        self.streams.len()
    }

    #[inline(always)]
    fn header(
        &mut self,
        d: usize,
        hdr: &[u8],
        _out: &mut Vec<L7Call>,
        _stats: &mut ParseStats,
    ) -> Header<FrameHeader> {
        self.frame_start(
            d,
            FrameHeader {
                len: be24(hdr),
                ty: hdr[3],
                flags: hdr[4],
                stream: be32(&hdr[5..9]) & 0x7fff_ffff,
            },
        )
    }

    #[inline(always)]
    fn body(&mut self, d: usize, part: Body<'_>, _stats: &mut ParseStats) {
        match part {
            Body::Start(seg) => self.frame_seen(d, seg),
            Body::Bytes(seg, b) => self.payload(d, seg, Some(b), b.len() as u64),
            Body::Unseen(seg, n) => self.payload(d, seg, None, n),
            Body::Lost(n) => self.data_lost(d, n),
        }
    }

    #[inline]
    fn frame_done(
        &mut self,
        d: usize,
        _kind: FrameHeader,
        _body: &[u8],
        out: &mut Vec<L7Call>,
        stats: &mut ParseStats,
    ) {
        self.frame_end(d, out, stats);
    }

    /// A gap inside a DATA payload of known length only skips bytes; anywhere else (a header
    /// block, HPACK's order) the direction loses its place.
    fn gap_skips(&self, d: usize) -> bool {
        self.dirs[d].frame.ty == DATA
    }

    fn resync(&self, d: usize, p: &[u8]) -> bool {
        plausible_frame(p) || (self.dirs[d].resume && frame_like(p))
    }

    /// The client's preface starts a connection seen from its start; else a frame header.
    fn resync_at(&mut self, d: usize, p: &[u8]) -> Option<St<Preface>> {
        let preface = !self.framing.dirs[d].synced
            && p.len() >= PREFACE_PROBE
            && p[..p.len().min(24)] == PREFACE[..p.len().min(24)];
        if preface {
            self.client = Some(d);
            self.from_start = true;
            return Some(St::Proto(Preface(0)));
        }
        let at = self.resync(d, p).then_some(St::Header);
        self.dirs[d].resume = false;
        at
    }

    /// The preface is judged on 15 bytes, a frame header on 9.
    fn resync_probe(&self, _d: usize, start: &[u8]) -> usize {
        if start.first() == Some(&b'P') {
            PREFACE_PROBE
        } else {
            FRAME_HEADER
        }
    }

    /// A frame or a header block under way (a direction lost at unseen frame headers keeps
    /// its block's stream until it picks up again, but is in no message).
    fn in_message(&self, d: usize) -> bool {
        let s = &self.framing.dirs[d];
        s.st != St::Lost && (s.in_message() || self.dirs[d].block_stream.is_some())
    }

    /// The core counted the loss (and, for a gap, the message it cut); a header block under
    /// way is damaged, and blocks may have gone by: the HPACK table is unknown.
    fn lost(&mut self, d: usize, why: Loss, stats: &mut ParseStats) {
        let ds = &mut self.dirs[d];
        if why == Loss::NotAFrame && ds.block_stream.is_some() {
            stats.damaged_messages += 1;
        }
        ds.body.clear();
        ds.block.clear();
        ds.block_stream = None;
        ds.block_damaged = false;
        self.forget_table(d, stats);
    }

    fn header_unseen(
        &mut self,
        d: usize,
        _seg: &Segment,
        n: u64,
        _out: &mut Vec<L7Call>,
        stats: &mut ParseStats,
    ) -> bool {
        self.headers_unseen(d, n, stats);
        true
    }

    fn in_state(
        &mut self,
        d: usize,
        Preface(n): Preface,
        _seg: &Segment,
        data: &[u8],
        _out: &mut Vec<L7Call>,
        stats: &mut ParseStats,
    ) -> usize {
        let take = (PREFACE.len() - n).min(data.len());
        if data[..take] != PREFACE[n..n + take] {
            framing::lose_sync(self, d, stats);
            self.lost(d, Loss::NotAFrame, stats);
            return 0;
        }
        self.framing.dirs[d].st = if n + take == PREFACE.len() {
            St::Header
        } else {
            St::Proto(Preface(n + take))
        };
        take
    }

    fn uncaptured_in_state(
        &mut self,
        d: usize,
        _s: Preface,
        _seg: &Segment,
        n: u64,
        _out: &mut Vec<L7Call>,
        stats: &mut ParseStats,
    ) {
        self.headers_unseen(d, n, stats);
    }
}

impl StreamParser for Http2Parser {
    fn on_segment(&mut self, seg: &Segment<'_>, out: &mut Vec<L7Call>, stats: &mut ParseStats) {
        framing::on_segment(self, seg, out, stats);
    }

    fn on_gap(&mut self, dir: Direction, len: Option<u64>, stats: &mut ParseStats) {
        framing::on_gap(self, dir, len, stats);
    }

    fn on_close(&mut self, out: &mut Vec<L7Call>, stats: &mut ParseStats) {
        for d in 0..2 {
            if self.in_message(d) {
                stats.damaged_messages += 1;
            }
        }
        let streams = std::mem::take(&mut self.streams);
        for (_, s) in streams {
            if s.resp_headers {
                stats.inferred_ends += 1;
                self.emit(s, None, true, out);
            } else {
                stats.unanswered_requests += 1;
            }
        }
        self.orphans.clear();
    }
}

#[cfg(test)]
mod fixture_tests;
#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocols::Transport;

    const C: Direction = Direction::Egress;
    const S: Direction = Direction::Ingress;

    fn frame(ty: u8, flags: u8, stream: u32, payload: &[u8]) -> Vec<u8> {
        let len = payload.len() as u32;
        let mut f = vec![(len >> 16) as u8, (len >> 8) as u8, len as u8, ty, flags];
        f.extend_from_slice(&stream.to_be_bytes());
        f.extend_from_slice(payload);
        f
    }

    /// `GET path` (static :method, :scheme; :path a literal with indexing, :authority too).
    fn get(path: &str) -> Vec<u8> {
        let mut b = vec![0x82, 0x86, 0x44, path.len() as u8];
        b.extend_from_slice(path.as_bytes());
        b.extend_from_slice(b"\x41\x06h.test");
        b
    }

    /// A unary gRPC call on stream 1 up to its trailers: the request (POST /pkg.Svc/Get,
    /// content-type application/grpc, one message) and the response's head and message.
    fn grpc_unary_until_trailers(r: &mut Run) {
        let mut h = get("/pkg.Svc/Get");
        h[0] = 0x83; // POST
        h.extend_from_slice(b"\x5f\x10application/grpc");
        r.seg(C, &frame(HEADERS, END_HEADERS, 1, &h));
        r.seg(C, &frame(DATA, END_STREAM, 1, &grpc_msg(b"q")));
        let mut h = vec![0x88];
        h.extend_from_slice(b"\x5f\x10application/grpc");
        r.seg(S, &frame(HEADERS, END_HEADERS, 1, &h));
        r.seg(S, &frame(DATA, 0, 1, &grpc_msg(b"r")));
    }

    /// A gRPC message: flag 0, 4-byte length, the bytes.
    fn grpc_msg(body: &[u8]) -> Vec<u8> {
        let mut m = vec![0];
        m.extend_from_slice(&(body.len() as u32).to_be_bytes());
        m.extend_from_slice(body);
        m
    }

    struct Run {
        p: Http2Parser,
        calls: Vec<L7Call>,
        stats: ParseStats,
        t: u64,
    }

    impl Run {
        fn new(depth: ParseDepth) -> Run {
            Run {
                p: Http2Parser::new(&ParserConfig {
                    depth,
                    transport: Transport::Stream,
                    keep_head: 0,
                }),
                calls: Vec::new(),
                stats: ParseStats::default(),
                t: 0,
            }
        }
        fn seg(&mut self, dir: Direction, b: &[u8]) {
            self.cut(dir, b, b.len());
        }
        /// A segment of which only the first `cap` bytes were captured.
        fn cut(&mut self, dir: Direction, b: &[u8], cap: usize) {
            self.t += 10;
            let seg = Segment {
                dir,
                payload: &b[..cap.min(b.len())],
                tail: &[],
                total_len: b.len() as u64,
                start_ns: self.t,
                end_ns: self.t + 1,
                peer: None,
                pos: 0,
            };
            self.p.on_segment(&seg, &mut self.calls, &mut self.stats);
        }
        fn close(&mut self) {
            self.p.on_close(&mut self.calls, &mut self.stats);
        }
        fn start(&mut self) {
            let mut b = PREFACE.to_vec();
            b.extend(frame(SETTINGS, 0, 0, &[]));
            self.seg(C, &b);
            self.seg(S, &frame(SETTINGS, 0, 0, &[0, 3, 0, 0, 0, 100]));
        }
    }

    fn detail<'a>(c: &'a L7Call, k: &str) -> Option<&'a str> {
        c.details
            .iter()
            .find(|(key, _)| *key == k)
            .map(|(_, v)| v.as_str())
    }

    #[test]
    fn secret_query_values_are_redacted_in_the_resource() {
        let mut r = Run::new(ParseDepth::Full);
        r.start();
        // HEADERS (END_STREAM | END_HEADERS) on stream 1, then the response :status 200.
        r.seg(C, &frame(HEADERS, 5, 1, &get("/cb?code=s3cr3t&x=1")));
        r.seg(S, &frame(HEADERS, 5, 1, &[0x88]));
        assert_eq!(r.calls.len(), 1);
        assert_eq!(r.calls[0].resource, "/cb?code=[redacted]&x=1");
    }

    #[test]
    fn recognition() {
        assert!(is_connection_start(PREFACE));
        assert!(is_connection_start(&PREFACE[..15]));
        assert!(!is_connection_start(&PREFACE[..14]));
        assert!(!is_connection_start(b"PRI * HTTP/2.0\r\nXX"));
        assert!(is_connection_start(&frame(SETTINGS, 0, 0, &[0; 12])));
        assert!(is_connection_start(&frame(HEADERS, 5, 3, &[0x82])));
        assert!(!is_connection_start(&frame(HEADERS, 5, 2, &[0x82])));
        assert!(!is_connection_start(&frame(HEADERS, 0x40, 3, &[0x82])));
        assert!(!is_connection_start(&frame(DATA, 0, 0, b"x")));
        assert!(!is_connection_start(&frame(
            RST_STREAM,
            0,
            1,
            &[0, 0, 0, 8]
        )));
    }

    /// Every byte its own segment: frames, the preface and header blocks split anywhere.
    #[test]
    fn frames_split_at_every_byte() {
        let mut r = Run::new(ParseDepth::Full);
        let mut c = PREFACE.to_vec();
        c.extend(frame(SETTINGS, 0, 0, &[]));
        c.extend(frame(HEADERS, END_HEADERS, 1, &get("/a")));
        c.extend(frame(DATA, END_STREAM, 1, b"hello"));
        let mut s = frame(SETTINGS, 0, 0, &[]);
        s.extend(frame(HEADERS, END_HEADERS, 1, &[0x88]));
        s.extend(frame(DATA, 0, 1, b"wor"));
        s.extend(frame(DATA, END_STREAM, 1, b"ld!"));
        for b in &c {
            r.seg(C, &[*b]);
        }
        for b in &s {
            r.seg(S, &[*b]);
        }
        assert_eq!(r.calls.len(), 1);
        let call = &r.calls[0];
        assert_eq!(
            (call.method.as_str(), call.resource.as_str(), call.status),
            ("GET", "/a", Some(200))
        );
        // Each side's frames on the wire (SETTINGS belong to no stream), as HTTP/1 counts a
        // message's head and body.
        let req_wire = frame(HEADERS, END_HEADERS, 1, &get("/a")).len() + 9 + 5;
        assert_eq!(
            (call.req.bytes, call.resp.bytes),
            (req_wire as u64, 10 + 12 + 12)
        );
        assert_eq!(detail(call, "authority"), Some("h.test"));
        assert_eq!(detail(call, "traceparent"), None);
        assert_eq!(call.proto, Protocol::Http2);
        assert_eq!(call.request_dir, C);
        assert_eq!(r.stats, ParseStats::default());
    }

    /// Many streams in one segment each way, answered out of order; the second request refers
    /// to the first one's `:path` entry in the dynamic table.
    #[test]
    fn many_frames_in_one_segment_out_of_order() {
        let mut r = Run::new(ParseDepth::Full);
        r.start();
        let mut c = frame(HEADERS, END_HEADERS | END_STREAM, 1, &get("/x"));
        // :method GET, :scheme http, :path from the table (62 is authority now, 63 the path).
        c.extend(frame(
            HEADERS,
            END_HEADERS | END_STREAM,
            3,
            &[0x82, 0x86, 0xbf, 0xbe],
        ));
        r.seg(C, &c);
        let mut s = frame(HEADERS, END_HEADERS | END_STREAM, 3, &[0x8d]);
        s.extend(frame(HEADERS, END_HEADERS | END_STREAM, 1, &[0x88]));
        r.seg(S, &s);
        let got: Vec<_> = r
            .calls
            .iter()
            .map(|c| (c.resource.as_str(), c.status, c.outcome))
            .collect();
        assert_eq!(
            got,
            vec![
                ("/x", Some(404), Outcome::ClientError),
                ("/x", Some(200), Outcome::Ok)
            ]
        );
    }

    /// PADDED and PRIORITY on HEADERS, a block continued in CONTINUATION, padded DATA.
    #[test]
    fn padding_priority_and_continuation() {
        let mut r = Run::new(ParseDepth::Full);
        r.start();
        let block = get("/padded");
        let mut first = vec![3]; // pad length
        first.extend_from_slice(&[0x80, 0, 0, 1, 16]); // priority: exclusive, depends on 1
        first.extend_from_slice(&block[..4]);
        first.extend_from_slice(&[0, 0, 0]);
        let mut c = frame(HEADERS, PADDED | PRIORITY_FLAG, 1, &first);
        c.extend(frame(CONTINUATION, 0, 1, &block[4..6]));
        c.extend(frame(CONTINUATION, END_HEADERS, 1, &block[6..]));
        let mut data = vec![4];
        data.extend_from_slice(b"body");
        data.extend_from_slice(&[0; 4]);
        c.extend(frame(DATA, PADDED | END_STREAM, 1, &data));
        r.seg(C, &c);
        r.seg(S, &frame(HEADERS, END_HEADERS | END_STREAM, 1, &[0x88]));
        assert_eq!(r.calls.len(), 1);
        assert_eq!(r.calls[0].resource, "/padded");
        // Padding, priority fields and frame headers are on the wire too.
        let wire = 9 + first.len() + 9 + 2 + 9 + (block.len() - 6) + 9 + data.len();
        assert_eq!(r.calls[0].req.bytes, wire as u64);
        assert_eq!(r.stats, ParseStats::default());
    }

    /// A connection that ends inside a DATA frame: the call counts the bytes that crossed
    /// (frame header and the payload sent), never the frame's declared length (fuzzing found
    /// a response of 16,496 bytes on a stream that carried 3,911).
    #[test]
    fn a_frame_cut_by_the_close_counts_what_crossed() {
        let mut r = Run::new(ParseDepth::Full);
        r.start();
        let req = frame(HEADERS, END_HEADERS | END_STREAM, 1, &get("/big"));
        r.seg(C, &req);
        let head = frame(HEADERS, END_HEADERS, 1, &[0x88]);
        r.seg(S, &head);
        // A DATA frame of 16,384 bytes of which 100 came before the close.
        let data = frame(DATA, END_STREAM, 1, &[7u8; 16_384]);
        r.seg(S, &data[..9 + 100]);
        r.close();
        assert_eq!(r.calls.len(), 1, "{:?}", r.calls);
        let c = &r.calls[0];
        assert_eq!(c.req.bytes, req.len() as u64);
        assert_eq!(c.resp.bytes, (head.len() + 9 + 100) as u64);
    }

    /// A frame other than CONTINUATION inside a header block is a protocol error: sync lost.
    #[test]
    fn interrupted_header_block_loses_sync() {
        let mut r = Run::new(ParseDepth::Full);
        r.start();
        let mut c = frame(HEADERS, 0, 1, &get("/a")[..3]);
        c.extend(frame(DATA, 0, 1, b"x"));
        r.seg(C, &c);
        assert_eq!(r.stats.desyncs, 1);
        assert!(r.calls.is_empty());
    }

    /// DATA beyond the snaplen is skipped by length; gRPC messages are counted across frames.
    #[test]
    fn grpc_streaming_and_data_beyond_the_snaplen() {
        let mut r = Run::new(ParseDepth::Full);
        r.start();
        let mut h = get("/pkg.Svc/Chat");
        h[0] = 0x83; // POST
        h.extend_from_slice(b"\x5f\x10application/grpc"); // content-type (31), indexed
        let h_req_len = h.len();
        r.seg(C, &frame(HEADERS, END_HEADERS, 1, &h));
        // Two messages in one DATA frame, a third split over two frames, a big fourth cut.
        let mut d = grpc_msg(b"a");
        d.extend(grpc_msg(b"bb"));
        r.seg(C, &frame(DATA, 0, 1, &d));
        let m3 = grpc_msg(b"cccc");
        r.seg(C, &frame(DATA, 0, 1, &m3[..3]));
        r.seg(C, &frame(DATA, 0, 1, &m3[3..]));
        let big = grpc_msg(&vec![7; 10_000]);
        r.cut(C, &frame(DATA, END_STREAM, 1, &big), 100);
        let mut h = vec![0x88];
        h.extend_from_slice(b"\x5f\x10application/grpc");
        r.seg(S, &frame(HEADERS, END_HEADERS, 1, &h));
        r.seg(S, &frame(DATA, 0, 1, &grpc_msg(b"r1")));
        let mut t = b"\x40\x0bgrpc-status\x015".to_vec();
        t.extend_from_slice(b"\x40\x0cgrpc-message\x04gone");
        r.seg(S, &frame(HEADERS, END_HEADERS | END_STREAM, 1, &t));
        assert_eq!(r.calls.len(), 1);
        let c = &r.calls[0];
        assert_eq!(c.proto, Protocol::Grpc);
        assert_eq!(c.resource, "/pkg.Svc/Chat");
        assert_eq!(c.status, None);
        assert_eq!(c.status_text.as_deref(), Some("NOT_FOUND"));
        assert_eq!(c.outcome, Outcome::ClientError);
        assert_eq!(detail(c, "grpc_status"), Some("5"));
        assert_eq!(detail(c, "http_status"), Some("200"));
        assert_eq!(detail(c, "grpc_message"), Some("gone"));
        // The request's cut part was a message body: counted exactly; truncated says so.
        assert!(c.truncated);
        assert_eq!(detail(c, "resp_messages"), Some("1"));
        let req_wire = 9 + h_req_len + 9 + d.len() + 9 + 3 + 9 + (m3.len() - 3) + 9 + big.len();
        assert_eq!(c.req.bytes, req_wire as u64);
        assert_eq!(r.stats.damaged_messages, 0);
    }

    /// Shallow depth: method, path, status; no optional details.
    #[test]
    fn shallow_mode_keeps_only_what_identifies_a_call() {
        let mut r = Run::new(ParseDepth::Shallow);
        r.start();
        r.seg(C, &frame(HEADERS, END_HEADERS | END_STREAM, 1, &get("/s")));
        r.seg(S, &frame(HEADERS, END_HEADERS | END_STREAM, 1, &[0x88]));
        let c = &r.calls[0];
        assert_eq!(
            (c.method.as_str(), c.resource.as_str(), c.status),
            ("GET", "/s", Some(200))
        );
        assert_eq!(detail(c, "authority"), None);
        assert!(c.details.is_empty());
    }

    /// A call's times: its request from the segment of the stream's first HEADERS (not the
    /// preface, not another stream's frames between) to its END_STREAM, its response from its
    /// HEADERS to the segment carrying END_STREAM; the latency each side derives from them
    /// (call.rs) is then first HEADERS to the response's END_STREAM.
    #[test]
    fn a_call_spans_its_first_headers_to_the_responses_end_stream() {
        let mut r = Run::new(ParseDepth::Full);
        r.start(); // t = 10, 20
        r.seg(C, &frame(HEADERS, END_HEADERS, 1, &get("/t"))); // 30
        r.seg(
            C,
            &frame(HEADERS, END_HEADERS | END_STREAM, 3, &get("/other")),
        ); // 40
        r.seg(C, &frame(DATA, END_STREAM, 1, b"body")); // 50
        r.seg(S, &frame(HEADERS, END_HEADERS | END_STREAM, 3, &[0x88])); // 60
        r.seg(S, &frame(HEADERS, END_HEADERS, 1, &[0x88])); // 70
        r.seg(S, &frame(DATA, 0, 1, b"part")); // 80
        r.seg(S, &frame(DATA, END_STREAM, 1, b"end")); // 90
        assert_eq!(r.calls.len(), 2);
        let c = r.calls.iter().find(|c| c.resource == "/t").unwrap();
        let times = |m: &MessageSpan| (m.first_start_ns, m.last_end_ns);
        assert_eq!((times(&c.req), times(&c.resp)), ((30, 51), (70, 91)));
        let head = frame(HEADERS, END_HEADERS, 1, &get("/t")).len();
        assert_eq!(
            (c.req.bytes, c.resp.bytes),
            ((head + 9 + 4) as u64, 10 + 13 + 12)
        );
        let o = r.calls.iter().find(|c| c.resource == "/other").unwrap();
        assert_eq!((times(&o.req), times(&o.resp)), ((40, 41), (60, 61)));
    }

    /// Shallow depth on gRPC: the method, and the status from the trailers; no details.
    #[test]
    fn shallow_grpc_keeps_method_and_trailer_status() {
        let mut r = Run::new(ParseDepth::Shallow);
        r.start();
        grpc_unary_until_trailers(&mut r);
        let t = b"\x40\x0bgrpc-status\x015".to_vec();
        r.seg(S, &frame(HEADERS, END_HEADERS | END_STREAM, 1, &t));
        assert_eq!(r.calls.len(), 1);
        let c = &r.calls[0];
        assert_eq!(
            (c.proto, c.method.as_str(), c.resource.as_str()),
            (Protocol::Grpc, "POST", "/pkg.Svc/Get")
        );
        assert_eq!(
            (c.status_text.as_deref(), c.outcome),
            (Some("NOT_FOUND"), Outcome::ClientError)
        );
        assert!(c.details.is_empty(), "{:?}", c.details);
        assert_eq!(r.stats, ParseStats::default());
    }

    /// RST_STREAM from the client ends its stream as the client's error; a GOAWAY refuses the
    /// streams above its last id; streams open at the close are counted.
    #[test]
    fn resets_goaway_and_streams_open_at_close() {
        let mut r = Run::new(ParseDepth::Full);
        r.start();
        for id in [1, 3, 5, 7] {
            r.seg(C, &frame(HEADERS, END_HEADERS | END_STREAM, id, &get("/r")));
        }
        r.seg(C, &frame(RST_STREAM, 0, 1, &[0, 0, 0, 8]));
        r.seg(S, &frame(HEADERS, END_HEADERS, 3, &[0x88]));
        let mut goaway = vec![0, 0, 0, 3];
        goaway.extend_from_slice(&[0, 0, 0, 0]);
        r.seg(S, &frame(GOAWAY, 0, 0, &goaway));
        r.close();
        let got: Vec<_> = r
            .calls
            .iter()
            .map(|c| (c.status_text.as_deref(), c.outcome, c.end_inferred))
            .collect();
        assert_eq!(
            got,
            vec![
                (Some("RST_STREAM CANCEL"), Outcome::ClientError, false),
                (Some("GOAWAY NO_ERROR"), Outcome::ServerError, false),
                (Some("GOAWAY NO_ERROR"), Outcome::ServerError, false),
                (None, Outcome::Ok, true),
            ]
        );
        assert_eq!(r.stats.stream_resets, 1);
        assert_eq!(r.stats.inferred_ends, 1);
        assert_eq!(r.stats.unanswered_requests, 0);
    }

    /// A client's GOAWAY (last stream 0: it names server-initiated streams) ends no request.
    #[test]
    fn a_clients_goaway_refuses_nothing() {
        let mut r = Run::new(ParseDepth::Full);
        r.start();
        r.seg(
            C,
            &frame(HEADERS, END_HEADERS | END_STREAM, 1, &get("/slow")),
        );
        r.seg(C, &frame(GOAWAY, 0, 0, &[0; 8]));
        r.seg(S, &frame(HEADERS, END_HEADERS | END_STREAM, 1, &[0x88]));
        assert_eq!(r.calls.len(), 1);
        assert_eq!(r.calls[0].status, Some(200));
        assert_eq!(r.calls[0].outcome, Outcome::Ok);
    }

    /// Picked up mid-way: the static table and literals decode, the rest is `?`, counted once;
    /// a response whose request was not seen is unmatched, never a call.
    #[test]
    fn pickup_mid_connection_never_invents() {
        let mut r = Run::new(ParseDepth::Full);
        // Stream 9's request from before ebtop: only its response is seen.
        r.seg(S, &frame(HEADERS, END_HEADERS | END_STREAM, 9, &[0x88]));
        // :method GET, :path from a dynamic entry of before.
        r.seg(
            C,
            &frame(HEADERS, END_HEADERS | END_STREAM, 11, &[0x82, 0xc5]),
        );
        r.seg(S, &frame(HEADERS, END_HEADERS | END_STREAM, 11, &[0x88]));
        // A literal path.
        r.seg(
            C,
            &frame(HEADERS, END_HEADERS | END_STREAM, 13, &get("/new")),
        );
        r.seg(S, &frame(HEADERS, END_HEADERS | END_STREAM, 13, &[0x8d]));
        let got: Vec<_> = r
            .calls
            .iter()
            .map(|c| {
                (
                    c.method.as_str(),
                    c.resource.as_str(),
                    c.status,
                    detail(c, "headers"),
                )
            })
            .collect();
        assert_eq!(
            got,
            vec![
                ("GET", "?", Some(200), Some("partial")),
                ("GET", "/new", Some(404), None)
            ]
        );
        assert_eq!(r.stats.partial_headers, 1);
        assert_eq!(r.stats.unmatched_responses, 1);
    }

    /// One stream of a connection picked up mid-way: the request block, then the response's
    /// blocks (the last with END_STREAM), each direction's HPACK table unknown.
    fn picked_up_call(req: &[u8], resp: &[&[u8]]) -> L7Call {
        let mut r = Run::new(ParseDepth::Full);
        r.seg(C, &frame(HEADERS, END_HEADERS, 1, req));
        r.seg(C, &frame(DATA, END_STREAM, 1, &grpc_msg(b"q")));
        for (i, b) in resp.iter().enumerate() {
            let flags = END_HEADERS | if i + 1 == resp.len() { END_STREAM } else { 0 };
            r.seg(S, &frame(HEADERS, flags, 1, b));
            if i == 0 && resp.len() > 1 {
                r.seg(S, &frame(DATA, 0, 1, &grpc_msg(b"r")));
            }
        }
        assert_eq!(r.calls.len(), 1, "{:?}", r.calls);
        r.calls.pop().unwrap()
    }

    /// A gRPC call whose trailers never came (the connection ended, or their bytes were
    /// lost): its grpc-status is not known, whatever `:status` 200 says.
    #[test]
    fn grpc_without_its_trailers_is_unknown() {
        let mut r = Run::new(ParseDepth::Full);
        r.start();
        grpc_unary_until_trailers(&mut r);
        r.close();
        assert_eq!(r.calls.len(), 1);
        let c = &r.calls[0];
        assert_eq!(
            (c.proto, c.status, c.outcome, c.end_inferred),
            (Protocol::Grpc, None, Outcome::Unknown, true)
        );
    }

    /// Issue 43: gRPC on a channel opened before ebtop was `http2 POST ? 200 ok` whatever it
    /// returned. The status comes from what decodes (a literal `grpc-status`, as grpcio and Go
    /// send every code but the commonest), what does not is `unknown`, never `ok`.
    #[test]
    fn picked_up_grpc_status_is_decoded_or_unknown_never_ok() {
        // POST (static), :path, content-type and te from dynamic entries of before.
        let req: &[u8] = &[0x83, 0x86, 0xbe, 0xbf, 0xc0];
        // :status 200 (static), content-type from a dynamic entry.
        let head: &[u8] = &[0x88, 0xbe];
        let outcome = |c: &L7Call| {
            (
                c.proto,
                c.status,
                c.status_text.clone(),
                c.outcome,
                detail(c, "http_status").map(str::to_owned),
            )
        };
        let grpc = |name: &str, o| {
            (
                Protocol::Grpc,
                None,
                Some(name.to_owned()),
                o,
                Some("200".into()),
            )
        };
        // grpc-status 5 as a literal without indexing (name a literal): NOT_FOUND.
        let c = picked_up_call(
            req,
            &[
                head,
                b"\x00\x0bgrpc-status\x015\x00\x0cgrpc-message\x04gone",
            ],
        );
        assert_eq!(outcome(&c), grpc("NOT_FOUND", Outcome::ClientError));
        assert_eq!(detail(&c, "grpc_message"), Some("gone"));
        // grpc-status 13 as a literal with incremental indexing: INTERNAL.
        let c = picked_up_call(req, &[head, b"\x40\x0bgrpc-status\x0213"]);
        assert_eq!(outcome(&c), grpc("INTERNAL", Outcome::ServerError));
        // grpc-status 0 from a dynamic entry of before (grpcio indexes OK): unknown.
        let unknown = (
            Protocol::Http2,
            None,
            None,
            Outcome::Unknown,
            Some("200".into()),
        );
        let c = picked_up_call(req, &[head, &[0xc1]]);
        assert_eq!(outcome(&c), unknown);
        assert_eq!(detail(&c, "headers"), Some("partial"));
        // Its value known but its name from an entry of before: still unknown.
        let c = picked_up_call(req, &[head, b"\x0f\x2f\x010"]);
        assert_eq!(outcome(&c), unknown);
        // A Trailers-Only answer, grpc-status literal.
        let c = picked_up_call(req, &[b"\x88\xbe\x00\x0bgrpc-status\x0214"]);
        assert_eq!(outcome(&c), grpc("UNAVAILABLE", Outcome::ServerError));
        // Known to be gRPC (content-type decoded), grpc-status hidden: unknown, proto grpc.
        let c = picked_up_call(req, &[b"\x88\x5f\x10application/grpc", &[0xc1]]);
        assert_eq!(
            outcome(&c),
            (
                Protocol::Grpc,
                None,
                None,
                Outcome::Unknown,
                Some("200".into())
            )
        );
        // Maybe gRPC, answered 503: an error either way.
        let c = picked_up_call(req, &[&[0x48, 0x03, b'5', b'0', b'3', 0xbe]]);
        assert_eq!((c.status, c.outcome), (Some(503), Outcome::ServerError));
        // Plain HTTP/2 whose :status is a dynamic entry of before: unknown, not ok.
        let c = picked_up_call(&[0x82, 0x86, 0xbe], &[&[0xbe]]);
        assert_eq!(
            (c.proto, c.method.as_str(), c.status, c.outcome),
            (Protocol::Http2, "GET", None, Outcome::Unknown)
        );
        // Plain HTTP/2 (a GET is never gRPC) with its :status known: by the status.
        let c = picked_up_call(&[0x82, 0x86, 0xbe], &[&[0x88, 0xbf]]);
        assert_eq!((c.status, c.outcome), (Some(200), Outcome::Ok));
        // The request decoded in full without a gRPC content-type: not gRPC, by the status.
        let c = picked_up_call(&get("/x"), &[&[0x8d, 0xbe]]);
        assert_eq!((c.status, c.outcome), (Some(404), Outcome::ClientError));
    }

    /// A lost range inside a DATA payload only skips bytes; one inside a header block forgets
    /// that direction's table.
    #[test]
    fn gaps() {
        let mut r = Run::new(ParseDepth::Full);
        r.start();
        r.seg(C, &frame(HEADERS, END_HEADERS, 1, &get("/g")));
        let d = frame(DATA, END_STREAM, 1, &[1; 100]);
        r.seg(C, &d[..30]);
        r.p.on_gap(C, Some(50), &mut r.stats);
        r.seg(C, &d[80..]);
        r.seg(S, &frame(HEADERS, END_HEADERS | END_STREAM, 1, &[0x88]));
        assert_eq!(r.calls.len(), 1);
        assert!(r.calls[0].truncated);
        let head = frame(HEADERS, END_HEADERS, 1, &get("/g")).len();
        assert_eq!(r.calls[0].req.bytes, (head + d.len()) as u64);
        assert_eq!(r.stats.desyncs, 0);
        r.p.on_gap(C, None, &mut r.stats);
        assert_eq!(r.stats.desyncs, 1);
        assert_eq!(r.stats.partial_headers, 1);
    }

    #[test]
    fn garbage_never_panics_and_memory_stays_flat() {
        let mut rng = crate::xorshift::XorShift(0x4242);
        for _ in 0..300 {
            let mut r = Run::new(ParseDepth::Full);
            r.start();
            for _ in 0..20 {
                let len = (rng.next() % 64) as usize;
                let mut b: Vec<u8> = (0..len).map(|_| rng.next() as u8).collect();
                if rng.next().is_multiple_of(2) {
                    let ty = (rng.next() % 10) as u8;
                    let mut f = frame(ty, rng.next() as u8, (rng.next() % 8) as u32, &b);
                    f.truncate((rng.next() % 80) as usize);
                    b = f;
                }
                let dir = if rng.next().is_multiple_of(2) { C } else { S };
                r.cut(dir, &b, (rng.next() % 70) as usize);
            }
            r.close();
        }
        // A header block never ending, and huge literal tables: bounded.
        let mut r = Run::new(ParseDepth::Full);
        r.start();
        r.seg(C, &frame(HEADERS, 0, 1, &[0x82]));
        for _ in 0..200 {
            r.seg(C, &frame(CONTINUATION, 0, 1, &[0x40; 1000]));
        }
        assert!(r.p.buffered_bytes() <= 2 * MAX_BLOCK + 2 * hpack::MAX_TABLE);
        let mut r = Run::new(ParseDepth::Full);
        r.start();
        for i in 0..2000u32 {
            let mut b = vec![0x40, 0x7f, 0x81, 0x07];
            b.extend(std::iter::repeat_n(b'n', 1000));
            b.extend_from_slice(&[0x01, b'v']);
            r.seg(C, &frame(HEADERS, END_HEADERS, 2 * i + 1, &b));
        }
        assert!(r.p.buffered_bytes() <= 2 * MAX_BLOCK + 2 * hpack::MAX_TABLE + 64 * 1024);
        assert!(r.p.streams.len() <= MAX_STREAMS);
    }

    /// A request's valid `traceparent` is kept as the call's detail (for `--otlp`).
    #[test]
    fn a_valid_traceparent_is_kept_as_a_detail() {
        const TP: &[u8] = b"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
        let mut r = Run::new(ParseDepth::Full);
        let mut h = get("/a");
        // A literal field without indexing, new name: `traceparent`.
        h.extend_from_slice(&[0x00, 11]);
        h.extend_from_slice(b"traceparent");
        h.push(TP.len() as u8);
        h.extend_from_slice(TP);
        let mut c = PREFACE.to_vec();
        c.extend(frame(SETTINGS, 0, 0, &[]));
        c.extend(frame(HEADERS, END_HEADERS | END_STREAM, 1, &h));
        r.seg(C, &c);
        let mut s = frame(SETTINGS, 0, 0, &[]);
        s.extend(frame(HEADERS, END_HEADERS | END_STREAM, 1, &[0x88]));
        r.seg(S, &s);
        assert_eq!(r.calls.len(), 1);
        assert_eq!(
            detail(&r.calls[0], "traceparent").map(str::as_bytes),
            Some(TP)
        );
    }
}
