//! MongoDB's wire protocol over a byte stream, both directions.
//!
//! Framing: every message is a 16-byte header (messageLength, requestID, responseTo, opCode)
//! and a body of messageLength − 16 bytes, framed by the framing core ([`super::framing`]).
//! Servers read the header apart from the body, so a first read of exactly 16 bytes is a
//! message start like any other. The body is handed over as it arrives (stream-body mode) and
//! only its first [`KEEP`] bytes and its last [`TAIL_KEEP`] bytes are kept, each at its offset:
//! the BSON walk ([`bson`]) goes on in the last bytes when the element it skips ends there (a
//! reply's `ok` after a large first batch, when the kernel copied the syscall's tail).
//!
//! Messages: OP_MSG (flagBits checksumPresent, moreToCome, exhaustAllowed; sections of kind 0,
//! the command document, and kind 1, document sequences, counted), OP_QUERY and OP_REPLY (the
//! legacy handshake, `admin.$cmd`), OP_COMPRESSED (snappy, zlib, zstd: only the first
//! [`INFLATE_MAX`] bytes are inflated, enough for the command's name, collection and `$db`).
//!
//! Pairing: by id, a reply's `responseTo` naming its request's `requestID`. A request with
//! moreToCome gets no reply: no call, counted in [`ParseStats::unreplied_requests`]. A reply
//! with moreToCome (an exhaust cursor, a streaming `hello`) is followed by replies each naming
//! the previous reply's `requestID`: the first reply makes the call, each later one is counted
//! as a stream continuation in [`ParseStats::pushes`]. An awaitable `hello` (one carrying
//! `maxAwaitTimeMS`: the server answers when the topology changes or the wait ends) makes no
//! call either: its reply is counted in `pushes`, so waits by design never show as latency.
//!
//! Calls: `method` the command (the command document's first key, as sent: `find`, `insert`,
//! `getMore`, `hello`), `resource` its collection (the first key's value when a string;
//! `getMore`'s `collection`), details `db` (`$db`, or the namespace's database for OP_QUERY),
//! the documents of an insert, update or delete (`documents`, `updates`, `deletes`: in a kind-1
//! sequence or the command's array) when all of them were captured, `compressor`, `code` and
//! `error` of a failure. Document values are never kept: only names, counts and the server's
//! error message cut before its first `{` (where MongoDB quotes the offending values).
//! `status_text`: absent when the command succeeded (`ok: 1` and no `writeErrors`), else the
//! error's `codeName` (or its code); `unknown` when the reply's `ok` was not seen.

mod bson;
#[cfg(test)]
mod fixture_tests;
mod inflate;

use super::framing::{self, Body, Framer, Header, Loss, St, Streams};
use super::matching::ById;
use super::{
    BenchFixture, CallKind, CapturedHead, L7Call, MessageSpan, Outcome, ParseDepth, ParseStats,
    ParserConfig, Protocol, ProtocolDescriptor, ResourceKind, Segment, StreamParser,
};
use crate::event::Direction;
use crate::text::lossy_prefix;
use bson::Sparse;

/// The protocol's entry in [`super::REGISTRY`].
pub const DESCRIPTOR: ProtocolDescriptor = ProtocolDescriptor {
    folder: "mongodb",
    title: "MongoDB",
    calls: &[CallKind {
        proto: Protocol::Mongodb,
        name: "mongodb",
        resource: ResourceKind::Command,
        metrics: super::MetricNames::database("mongodb"),
    }],
    kernel_id: Some(10),
    datagrams: false,
    copy_whole: false,
    detect: is_message_start,
    new_parser: |cfg| Box::new(MongoParser::new(cfg)),
    benches: &[BenchFixture {
        file: "pymongo_crud.client.seg",
        what: "parse a pymongo session (insert_many, find, getMore, aggregate)",
        proto: Protocol::Mongodb,
        calls: 12,
    }],
};

const HEADER: usize = 16;
/// MongoDB's `maxMessageSizeBytes` is 48,000,000; larger lengths are no message.
const MAX_MESSAGE: u32 = 48_000_000;
/// The smallest message with a body: the header, 4 bytes of flags or length, a 5-byte document.
const MIN_MESSAGE: u32 = 21;
/// Bytes kept of a body's start: the command document's first keys and `$db` fit many times.
const KEEP: usize = 16 * 1024;
/// Bytes kept of a body's end (a reply's `ok`, `code` after a large batch).
const TAIL_KEEP: usize = 512;
/// Bytes of an OP_COMPRESSED body inflated at most.
const INFLATE_MAX: usize = 16 * 1024;
/// Requests waiting for their reply on one connection (the oldest is dropped beyond).
const MAX_PENDING: usize = 1024;
/// Exhaust streams followed at once on one connection.
const MAX_STREAMS: usize = 64;
const MAX_NAME: usize = 64;
const MAX_COLLECTION: usize = 256;
const MAX_ERROR: usize = 256;
/// Sections of one OP_MSG walked at most (real ones have one or two).
const MAX_SECTIONS: usize = 64;

const OP_REPLY: i32 = 1;
const OP_UPDATE: i32 = 2001;
const OP_INSERT: i32 = 2002;
const OP_QUERY: i32 = 2004;
const OP_GET_MORE: i32 = 2005;
const OP_DELETE: i32 = 2006;
const OP_KILL_CURSORS: i32 = 2007;
const OP_COMPRESSED: i32 = 2012;
const OP_MSG: i32 = 2013;

const CHECKSUM_PRESENT: u32 = 0x1;
const MORE_TO_COME: u32 = 0x2;
const EXHAUST_ALLOWED: u32 = 0x1_0000;

fn opcode_name(op: i32) -> Option<&'static str> {
    Some(match op {
        OP_REPLY => "OP_REPLY",
        OP_UPDATE => "OP_UPDATE",
        OP_INSERT => "OP_INSERT",
        OP_QUERY => "OP_QUERY",
        OP_GET_MORE => "OP_GET_MORE",
        OP_DELETE => "OP_DELETE",
        OP_KILL_CURSORS => "OP_KILL_CURSORS",
        OP_COMPRESSED => "OP_COMPRESSED",
        OP_MSG => "OP_MSG",
        _ => return None,
    })
}

/// A message header.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct MsgHeader {
    len: u32,
    request_id: i32,
    response_to: i32,
    opcode: i32,
}

fn le_i32(p: &[u8], at: usize) -> i32 {
    i32::from_le_bytes([p[at], p[at + 1], p[at + 2], p[at + 3]])
}

/// A plausible header at `p`'s start (at least 16 bytes).
fn header_of(p: &[u8]) -> Option<MsgHeader> {
    if p.len() < HEADER {
        return None;
    }
    let len = le_i32(p, 0);
    let h = MsgHeader {
        len: u32::try_from(len).ok()?,
        request_id: le_i32(p, 4),
        response_to: le_i32(p, 8),
        opcode: le_i32(p, 12),
    };
    if !(MIN_MESSAGE..=MAX_MESSAGE).contains(&h.len) {
        return None;
    }
    opcode_name(h.opcode)?;
    Some(h)
}

/// Does `p` (the first payload a connection shows in some direction) start a MongoDB message?
/// A request (responseTo 0: OP_MSG, OP_QUERY, OP_COMPRESSED) or a reply (responseTo set:
/// OP_MSG, OP_COMPRESSED, OP_REPLY), its header alone (a server reads it apart from the body)
/// or with the body's first bytes, which must then agree: OP_MSG flag bits MongoDB defines, a
/// known section kind and a document length within the message.
pub fn is_message_start(p: &[u8]) -> bool {
    let Some(h) = header_of(p) else {
        return false;
    };
    let request = h.response_to == 0;
    let ok_op = match h.opcode {
        OP_MSG | OP_COMPRESSED => true,
        OP_QUERY => request,
        OP_REPLY => !request,
        _ => false,
    };
    if !ok_op {
        return false;
    }
    let body = &p[HEADER..];
    match h.opcode {
        OP_MSG => {
            if body.len() >= 4 {
                let flags = le_i32(body, 0) as u32;
                if flags & !(CHECKSUM_PRESENT | MORE_TO_COME | EXHAUST_ALLOWED) & 0xffff != 0 {
                    return false;
                }
            }
            if body.len() >= 5 && body[4] > 2 {
                return false;
            }
            if body.len() >= 9 {
                let n = le_i32(body, 5);
                if n < 5 || n as u32 > h.len {
                    return false;
                }
            }
            true
        }
        OP_COMPRESSED => {
            if body.len() >= 4 && !matches!(le_i32(body, 0), OP_MSG | OP_QUERY | OP_REPLY) {
                return false;
            }
            body.len() < 9 || inflate::compressor_name(body[8]).is_some()
        }
        _ => true,
    }
}

/// A request waiting for its reply.
#[derive(Debug)]
struct Request {
    method: String,
    collection: String,
    db: Option<String>,
    /// (which, how many) documents it carries.
    docs: Option<(&'static str, u64)>,
    version: &'static str,
    compressor: Option<&'static str>,
    /// An awaitable hello: its reply comes when the server wants (counted, no call).
    awaitable: bool,
    span: MessageSpan,
    truncated: bool,
    /// The direction it was sent in: only a message the other way answers it.
    dir: usize,
}

/// What a message says, decoded from its kept bytes.
#[derive(Debug, Default)]
struct Decoded {
    /// The opcode of the message proper (inside OP_COMPRESSED: the original one).
    opcode: i32,
    flags: u32,
    compressor: Option<&'static str>,
    // A command's:
    command: Option<String>,
    collection: Option<String>,
    db: Option<String>,
    docs: Option<(&'static str, u64)>,
    awaitable: bool,
    // A reply's:
    status: Status,
}

/// A reply's outcome as its document says.
#[derive(Debug, Default, Clone, PartialEq)]
enum Status {
    /// `ok` not seen (beyond what was captured, damaged).
    #[default]
    Unknown,
    Ok,
    Error {
        code: Option<i64>,
        name: Option<String>,
        message: Option<String>,
    },
}

/// One direction's kept body: its first [`KEEP`] bytes and its last captured bytes.
#[derive(Debug, Default)]
struct BodyKeep {
    pos: u64,
    head: Vec<u8>,
    tail: Vec<u8>,
    tail_start: u64,
}

impl BodyKeep {
    fn start(&mut self) {
        self.pos = 0;
        self.head.clear();
        self.tail.clear();
        self.tail_start = 0;
    }

    fn bytes(&mut self, mut b: &[u8]) {
        if self.head.len() as u64 == self.pos && self.head.len() < KEEP {
            let n = (KEEP - self.head.len()).min(b.len());
            self.head.extend_from_slice(&b[..n]);
            self.pos += n as u64;
            b = &b[n..];
        }
        if b.is_empty() {
            return;
        }
        if self.tail_start + self.tail.len() as u64 != self.pos {
            self.tail.clear();
            self.tail_start = self.pos;
        }
        let b_keep = &b[b.len().saturating_sub(TAIL_KEEP)..];
        if b_keep.len() < b.len() {
            self.tail.clear();
            self.tail_start = self.pos + (b.len() - b_keep.len()) as u64;
        }
        self.tail.extend_from_slice(b_keep);
        if self.tail.len() > 2 * TAIL_KEEP {
            let cut = self.tail.len() - TAIL_KEEP;
            self.tail.drain(..cut);
            self.tail_start += cut as u64;
        }
        self.pos += b.len() as u64;
    }

    fn sparse(&self) -> Sparse<'_> {
        Sparse {
            head: &self.head,
            tail: &self.tail,
            tail_start: usize::try_from(self.tail_start).unwrap_or(usize::MAX),
        }
    }
}

pub struct MongoParser {
    streams: Streams<MsgHeader, ()>,
    bodies: [BodyKeep; 2],
    pending: ById<Request>,
    /// Exhaust streams: the `requestID` of the last reply of each (its successor continues it).
    streaming: ById<()>,
    depth: ParseDepth,
    keep_head: usize,
}

impl MongoParser {
    pub fn new(cfg: &ParserConfig) -> Self {
        MongoParser {
            streams: Streams::new(St::Lost, HEADER),
            bodies: [BodyKeep::default(), BodyKeep::default()],
            pending: ById::new(MAX_PENDING),
            streaming: ById::new(MAX_STREAMS),
            depth: cfg.depth,
            keep_head: cfg.keep_head,
        }
    }

    fn head(&self, text: String, len: u64) -> CapturedHead {
        if self.keep_head == 0 {
            return CapturedHead::default();
        }
        let b = text.into_bytes();
        CapturedHead::redacted(b[..b.len().min(self.keep_head)].to_vec(), len)
    }

    fn on_request(&mut self, d: usize, h: MsgHeader, m: Decoded, stats: &mut ParseStats) {
        let (span, truncated) = self.streams.dirs[d].acc.take();
        let one_way = match m.opcode {
            OP_MSG => m.flags & MORE_TO_COME != 0,
            OP_INSERT | OP_UPDATE | OP_DELETE | OP_KILL_CURSORS => true,
            _ => false,
        };
        if one_way {
            stats.unreplied_requests += 1;
            return;
        }
        let version = opcode_name(m.opcode).unwrap_or("OP_MSG");
        let req = Request {
            method: m.command.unwrap_or_else(|| match m.opcode {
                OP_GET_MORE => "getMore".to_owned(),
                _ => String::new(),
            }),
            collection: m.collection.unwrap_or_default(),
            db: m.db,
            docs: m.docs,
            version,
            compressor: m.compressor,
            awaitable: m.awaitable,
            span,
            truncated,
            dir: d,
        };
        let before = self.pending.evicted;
        self.pending.insert(h.request_id as u32 as u64, req);
        stats.pending_dropped += self.pending.evicted - before;
    }

    fn on_reply(
        &mut self,
        d: usize,
        h: MsgHeader,
        m: Decoded,
        out: &mut Vec<L7Call>,
        stats: &mut ParseStats,
    ) {
        let (span, truncated) = self.streams.dirs[d].acc.take();
        let more = m.opcode == OP_MSG && m.flags & MORE_TO_COME != 0;
        let key = h.response_to as u32 as u64;
        let mut paired = self.pending.take(key);
        if let Some(req) = paired.take_if(|r| r.dir == d) {
            // Sent the same way as the request it names: no answer to it (a request's id
            // reused in a response's field by chance, or bytes not where they seemed).
            self.pending.insert(key, req);
        }
        if paired.is_none() && self.streaming.take(key).is_none() {
            stats.unmatched_responses += 1;
            return;
        }
        if more {
            self.streaming.insert(h.request_id as u32 as u64, ());
        }
        let Some(req) = paired.filter(|r| !r.awaitable) else {
            // A stream's later reply, or an awaitable hello's answer.
            stats.pushes += 1;
            return;
        };
        let mut details = Vec::new();
        let full = self.depth == ParseDepth::Full;
        if full {
            if let Some(db) = &req.db {
                details.push(("db", db.clone()));
            }
            if let Some((which, n)) = req.docs {
                details.push((which, n.to_string()));
            }
            if let Some(c) = req.compressor.or(m.compressor) {
                details.push(("compressor", c.to_owned()));
            }
        }
        let (status_text, outcome) = match &m.status {
            Status::Unknown => (None, Outcome::Unknown),
            Status::Ok => (None, Outcome::Ok),
            Status::Error {
                code,
                name,
                message,
            } => {
                if full {
                    if let Some(c) = code {
                        details.push(("code", c.to_string()));
                    }
                    if let Some(msg) = message {
                        details.push(("error", msg.clone()));
                    }
                }
                let text = name
                    .clone()
                    .or_else(|| code.map(|c| code_name(c).map_or(c.to_string(), str::to_owned)));
                (text, error_outcome(*code))
            }
        };
        let req_head = self.head(
            format!("{} {} {}", req.version, req.method, req.collection),
            req.span.bytes,
        );
        let resp_head = self.head(
            format!(
                "{} {}",
                opcode_name(m.opcode).unwrap_or("?"),
                status_text.as_deref().unwrap_or("ok")
            ),
            span.bytes,
        );
        out.push(L7Call {
            proto: Protocol::Mongodb,
            request_dir: if d == 1 {
                Direction::Egress
            } else {
                Direction::Ingress
            },
            method: req.method,
            resource: req.collection,
            version: req.version,
            status: None,
            status_text,
            outcome,
            req: req.span,
            resp: span,
            truncated: req.truncated || truncated,
            end_inferred: false,
            details,
            req_head,
            resp_head,
        });
    }
}

/// Error codes that say the request was wrong rather than the server (MongoDB's error_codes.yml);
/// a failure whose code went unseen is `unknown` (whose fault it was is not known).
fn error_outcome(code: Option<i64>) -> Outcome {
    match code {
        None => Outcome::Unknown,
        Some(
            2 | 9 | 11 | 13 | 14 | 18 | 26 | 27 | 40 | 48 | 59 | 61 | 66 | 72 | 73 | 115 | 121,
        )
        | Some(166 | 11000 | 11001 | 12587 | 17280 | 10334 | 16755 | 31249 | 51024) => {
            Outcome::ClientError
        }
        Some(_) => Outcome::ServerError,
    }
}

/// Names of common codes, for replies that carry only the number (`writeErrors`).
fn code_name(code: i64) -> Option<&'static str> {
    Some(match code {
        2 => "BadValue",
        9 => "FailedToParse",
        11 => "UserNotFound",
        13 => "Unauthorized",
        14 => "TypeMismatch",
        18 => "AuthenticationFailed",
        26 => "NamespaceNotFound",
        43 => "CursorNotFound",
        48 => "NamespaceExists",
        50 => "MaxTimeMSExpired",
        59 => "CommandNotFound",
        91 => "ShutdownInProgress",
        112 => "WriteConflict",
        121 => "DocumentValidationFailure",
        189 => "PrimarySteppedDown",
        10107 => "NotWritablePrimary",
        11000 => "DuplicateKey",
        11600 => "InterruptedAtShutdown",
        13435 => "NotPrimaryNoSecondaryOk",
        _ => return None,
    })
}

/// The server's message, cut before its first `{` (where values are quoted) and at
/// [`MAX_ERROR`] bytes.
fn error_text(b: &[u8]) -> String {
    let end = memchr::memchr(b'{', b).unwrap_or(b.len());
    lossy_prefix(&b[..end], MAX_ERROR).trim_end().to_owned()
}

fn name_text(b: &[u8], max: usize) -> String {
    lossy_prefix(b, max)
}

/// Decodes a message of header `h` from its kept body `s` (`len` bytes on the wire).
fn decode(h: &MsgHeader, s: &Sparse, len: usize) -> Decoded {
    let mut m = Decoded {
        opcode: h.opcode,
        ..Decoded::default()
    };
    if h.opcode == OP_COMPRESSED {
        let (Some(orig), Some(size), Some(id)) = (s.i32(0), s.i32(4), s.u8(8)) else {
            return m;
        };
        m.opcode = orig;
        m.compressor = inflate::compressor_name(id);
        if orig == OP_COMPRESSED || opcode_name(orig).is_none() {
            return m;
        }
        let Ok(size) = usize::try_from(size) else {
            return m;
        };
        // The compressed bytes captured in one piece from the body's start.
        let data = s.head.get(9..).unwrap_or(&[]);
        let Some(plain) = inflate::inflate_prefix(id, data, INFLATE_MAX.min(size)) else {
            return m;
        };
        let inner = Sparse::whole(&plain);
        let mut d = decode_plain(orig, &inner, size.min(MAX_MESSAGE as usize));
        d.compressor = m.compressor;
        return d;
    }
    decode_plain(h.opcode, s, len)
}

fn decode_plain(opcode: i32, s: &Sparse, len: usize) -> Decoded {
    let mut m = Decoded {
        opcode,
        ..Decoded::default()
    };
    match opcode {
        OP_MSG => decode_msg(&mut m, s, len),
        OP_QUERY => decode_query(&mut m, s, len),
        OP_REPLY => decode_reply(&mut m, s, len),
        _ => {}
    }
    m
}

/// OP_MSG: flagBits, then sections to the end (less the checksum).
fn decode_msg(m: &mut Decoded, s: &Sparse, len: usize) {
    let Some(flags) = s.i32(0) else {
        return;
    };
    m.flags = flags as u32;
    let end = len.saturating_sub(if m.flags & CHECKSUM_PRESENT != 0 {
        4
    } else {
        0
    });
    let mut at = 4;
    for _ in 0..MAX_SECTIONS {
        if at >= end {
            break;
        }
        let Some(kind) = s.u8(at) else {
            break;
        };
        match kind {
            0 => {
                body_document(m, s, at + 1, end);
                match bson::doc_end(s, at + 1, end) {
                    Ok(e) => at = e,
                    Err(_) => break,
                }
            }
            1 => {
                let Some(size) = s.i32(at + 1).and_then(|n| usize::try_from(n).ok()) else {
                    break;
                };
                let seq_end = at + 1 + size;
                if size < 5 || seq_end > end {
                    break;
                }
                if let Some((ident, docs_at)) = s.cstr(at + 5, size - 4) {
                    if let Some(which) = docs_name(ident) {
                        m.docs = sequence_count(s, docs_at, seq_end).map(|n| (which, n));
                    }
                }
                at = seq_end;
            }
            _ => break,
        }
    }
}

/// The detail name of a command's documents (an insert's `documents`, …).
fn docs_name(ident: &[u8]) -> Option<&'static str> {
    match ident {
        b"documents" => Some("documents"),
        b"updates" => Some("updates"),
        b"deletes" => Some("deletes"),
        _ => None,
    }
}

/// Documents of a kind-1 sequence from `at` to `end`, when every one's length was captured.
fn sequence_count(s: &Sparse, mut at: usize, end: usize) -> Option<u64> {
    let mut n = 0;
    while at < end {
        at = bson::doc_end(s, at, end).ok()?;
        n += 1;
    }
    Some(n)
}

/// The command document (a request's) or the reply document of an OP_MSG's kind-0 section.
fn body_document(m: &mut Decoded, s: &Sparse, at: usize, end: usize) {
    let mut first = true;
    let mut reply = ReplyFields::default();
    let walked = bson::walk(s, at, end, |e| {
        if first {
            first = false;
            // A command's name is its first key; a reply's first key is a field of its own.
            if !matches!(
                e.name,
                b"ok" | b"cursor" | b"n" | b"errmsg" | b"$err" | b"nModified"
            ) {
                m.command = Some(name_text(e.name, MAX_NAME));
                if let Some(c) = bson::string(s, e) {
                    m.collection = Some(name_text(c, MAX_COLLECTION));
                }
            }
        }
        match e.name {
            b"$db" => m.db = bson::string(s, e).map(|v| name_text(v, MAX_COLLECTION)),
            b"collection" if m.command.as_deref() == Some("getMore") => {
                m.collection = bson::string(s, e).map(|v| name_text(v, MAX_COLLECTION));
            }
            b"maxAwaitTimeMS" => m.awaitable = true,
            b"documents" | b"updates" | b"deletes" if e.ty == bson::ARRAY => {
                if let Some(which) = docs_name(e.name) {
                    m.docs = bson::count(s, e.value, e.value + e.value_len).map(|n| (which, n));
                }
            }
            _ => reply.field(s, e),
        }
        true
    });
    // `maxAwaitTimeMS` makes a hello (or isMaster) awaitable; on a getMore it only bounds a
    // tailable cursor's wait, which is the call's own latency.
    m.awaitable &= matches!(
        m.command.as_deref(),
        Some("hello" | "isMaster" | "ismaster")
    );
    m.status = reply.status(walked.is_ok());
}

/// The fields of a reply document that say how it went.
#[derive(Debug, Default)]
struct ReplyFields {
    ok: Option<f64>,
    code: Option<i64>,
    name: Option<String>,
    message: Option<String>,
    /// The first of `writeErrors` (or the `writeConcernError`): code and message.
    write_error: Option<(Option<i64>, Option<String>)>,
    /// `writeErrors` present but its first entry not captured.
    write_error_unseen: bool,
}

impl ReplyFields {
    fn field(&mut self, s: &Sparse, e: &bson::Element) {
        match e.name {
            b"ok" => self.ok = bson::number(s, e),
            b"code" => self.code = bson::number(s, e).map(|n| n as i64),
            b"codeName" => self.name = bson::string(s, e).map(|v| name_text(v, MAX_NAME)),
            b"errmsg" | b"$err" => self.message = bson::string(s, e).map(error_text),
            b"writeErrors" | b"writeConcernError"
                if matches!(e.ty, bson::ARRAY | bson::DOCUMENT) && self.write_error.is_none() =>
            {
                let limit = e.value + e.value_len;
                // writeErrors: [ {index, code, errmsg}, … ]; writeConcernError: {code, errmsg}.
                let mut entry = (e.ty == bson::DOCUMENT).then_some(e.value);
                if entry.is_none() {
                    let _ = bson::walk(s, e.value, limit, |first| {
                        if first.ty == bson::DOCUMENT {
                            entry = Some(first.value);
                        }
                        false
                    });
                }
                let Some(at) = entry else {
                    // An empty writeErrors array is no error; a cut one is unknown.
                    if bson::count(s, e.value, limit) != Some(0) {
                        self.write_error_unseen = true;
                    }
                    return;
                };
                let (mut code, mut msg) = (None, None);
                let _ = bson::walk(s, at, limit, |f| {
                    match f.name {
                        b"code" => code = bson::number(s, f).map(|n| n as i64),
                        b"errmsg" => msg = bson::string(s, f).map(error_text),
                        _ => {}
                    }
                    true
                });
                self.write_error = Some((code, msg));
            }
            _ => {}
        }
    }

    /// The status, `whole`: the walk reached the document's end.
    fn status(self, whole: bool) -> Status {
        match self.ok {
            Some(ok) if ok != 1.0 => Status::Error {
                code: self.code,
                name: self.name,
                message: self.message,
            },
            Some(_) => match self.write_error {
                Some((code, message)) => Status::Error {
                    code,
                    name: code.and_then(code_name).map(str::to_owned),
                    message,
                },
                None if whole && !self.write_error_unseen => Status::Ok,
                None => Status::Unknown,
            },
            None => Status::Unknown,
        }
    }
}

/// OP_QUERY: flags, `db.collection` (`admin.$cmd` for a command), skip, return, the query.
fn decode_query(m: &mut Decoded, s: &Sparse, len: usize) {
    let Some((ns, after)) = s.cstr(4, MAX_COLLECTION * 2) else {
        return;
    };
    let (db, coll) = match memchr::memchr(b'.', ns) {
        Some(i) => (&ns[..i], &ns[i + 1..]),
        None => (ns, &b""[..]),
    };
    m.db = Some(name_text(db, MAX_COLLECTION));
    let doc = after + 8;
    if coll != b"$cmd" {
        // A legacy query on a collection.
        m.command = Some("find".to_owned());
        m.collection = Some(name_text(coll, MAX_COLLECTION));
        return;
    }
    // A command, possibly wrapped: {$query: {cmd…}, $readPreference: …}.
    let mut inner = None;
    let _ = bson::walk(s, doc, len, |e| {
        if e.name == b"$query" && e.ty == bson::DOCUMENT {
            inner = Some(e.value);
        }
        false
    });
    let mut sub = Decoded::default();
    body_document(&mut sub, s, inner.unwrap_or(doc), len);
    m.command = sub.command;
    m.collection = sub.collection;
    m.awaitable = sub.awaitable;
}

/// OP_REPLY: flags (QueryFailure 0x2), cursor, start, count, then the documents.
fn decode_reply(m: &mut Decoded, s: &Sparse, len: usize) {
    let Some(flags) = s.i32(0) else {
        return;
    };
    let mut sub = Decoded::default();
    body_document(&mut sub, s, 20, len);
    m.status = match sub.status {
        Status::Unknown if flags & 0x2 != 0 => Status::Error {
            code: None,
            name: None,
            message: None,
        },
        st => st,
    };
}

impl Framer for MongoParser {
    type Kind = MsgHeader;
    type State = ();
    const MIN_HEADER: usize = HEADER;
    const FINISH_BODY_BEFORE_UNSEEN: bool = true;
    const TOUCH_UNSEEN: bool = true;
    const TAILS: bool = true;
    const STREAM_BODY: bool = true;
    const RESYNC_PROBE: usize = HEADER;

    fn streams(&mut self) -> &mut Streams<MsgHeader, ()> {
        &mut self.streams
    }

    fn streams_ref(&self) -> &Streams<MsgHeader, ()> {
        &self.streams
    }

    fn stopped(&self) -> bool {
        false
    }

    fn pending(&self) -> usize {
        self.pending.len()
    }

    fn header(
        &mut self,
        _d: usize,
        hdr: &[u8],
        _out: &mut Vec<L7Call>,
        _stats: &mut ParseStats,
    ) -> Header<MsgHeader> {
        match header_of(hdr) {
            Some(h) => Header::Frame {
                body_len: u64::from(h.len) - HEADER as u64,
                kind: h,
                more: false,
            },
            None => Header::NotAFrame,
        }
    }

    fn body(&mut self, d: usize, part: Body<'_>, _stats: &mut ParseStats) {
        let b = &mut self.bodies[d];
        match part {
            Body::Start(_) => b.start(),
            Body::Bytes(_, bytes) => b.bytes(bytes),
            Body::Unseen(_, n) | Body::Lost(n) => b.pos = b.pos.saturating_add(n),
        }
    }

    fn frame_done(
        &mut self,
        d: usize,
        h: MsgHeader,
        _body: &[u8],
        out: &mut Vec<L7Call>,
        stats: &mut ParseStats,
    ) {
        let len = h.len as usize - HEADER;
        let m = decode(&h, &self.bodies[d].sparse(), len);
        let request = h.response_to == 0 && m.opcode != OP_REPLY;
        if request {
            self.on_request(d, h, m, stats);
        } else {
            self.on_reply(d, h, m, out, stats);
        }
    }

    fn resync(&self, _d: usize, p: &[u8]) -> bool {
        is_message_start(p)
    }

    fn lost(&mut self, _d: usize, _why: Loss, _stats: &mut ParseStats) {
        // Pairing is by id: what follows pairs by its own ids; a request whose reply was
        // lost stays pending until the connection ends (then counted unanswered).
    }
}

impl StreamParser for MongoParser {
    fn on_segment(&mut self, seg: &Segment<'_>, out: &mut Vec<L7Call>, stats: &mut ParseStats) {
        framing::on_segment(self, seg, out, stats);
    }

    fn on_gap(&mut self, dir: Direction, len: Option<u64>, stats: &mut ParseStats) {
        framing::on_gap(self, dir, len, stats);
    }

    fn on_close(&mut self, _out: &mut Vec<L7Call>, stats: &mut ParseStats) {
        for d in 0..2 {
            if self.streams.dirs[d].in_message() {
                stats.damaged_messages += 1;
            }
        }
        let awaiting = self.pending.len() as u64;
        stats.unanswered_requests += awaiting;
        self.pending = ById::new(MAX_PENDING);
    }
}

#[cfg(test)]
mod tests;
