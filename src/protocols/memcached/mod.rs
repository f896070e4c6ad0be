//! Memcached: the text protocol (storage, retrieval, meta commands) and the binary protocol,
//! over a byte stream, both directions.
//!
//! Framing: text commands and replies are lines; the data blocks that follow a storage command
//! (`set k 0 0 <bytes>`), an `ms`, a `VALUE` line or a `VA` line are framed by their byte count
//! and skipped by count beyond the snaplen, never buffered. Binary messages are a 24-byte header
//! and a body of the header's total body length (extras, key, value); the value is skipped.
//! All of it by the framing core ([`super::framing`]): a message's first byte says whether a
//! line ([`Header::Line`]) or a binary header follows, and a line or header says the frame
//! after it (a data block, a binary body); a reply's lines until `END` are one message. A
//! message whose end went out of sight stays open (its direction lost, the message kept) and
//! takes every byte until the other direction shows where it ended.
//!
//! Pairing is in order (the server answers in the order it reads), with commands that may get
//! no reply handled by what can answer them:
//! - text `noreply` and `quit`: no reply. memcached 1.6 sends nothing for a `noreply`
//!   command, errors included; a line it cannot parse may still get one: an error goes to
//!   the oldest pending command that must be answered, else to a `noreply` one;
//! - meta quiet mode (`q` flag): `mg` answers only a hit (`VA`, `HD`), `ms`/`md`/`ma` only a
//!   failure (`NS`, `EX`, `NF`, `EN`); `mn` (answered `MN`) marks where the silent ones ended;
//! - binary quiet opcodes (`getq`, `setq`, …): a response only on a miss-free get or a failure,
//!   carrying the request's opcode and opaque; `noop` marks where the silent ones ended.
//!
//! A reply pairs with the oldest pending command that can get it; the quiet commands before
//! that one got their answer by silence: they make no call and are counted in
//! [`ParseStats::unreplied_requests`] (a quiet get skipped so is a miss). Binary responses must
//! also carry the request's opcode and opaque, which confirms the pairing.
//!
//! Calls: `method` is the command in lower case as sent (`get`, `set`, `mg`), for the binary
//! protocol the opcode's name in the same style (`get`, `getq`, `setq`, `noop`, `sasl_auth`);
//! `resource` the (first) key as sent; `version` `text`, `meta` or `binary`. Values are never
//! kept: heads show command and reply lines, each data block replaced by `[value, N bytes]`.
//!
//! Other protocols: a Redis client typing inline commands (`get foo\r\n`) looks like memcached
//! until its server answers in RESP (`$3`, `+OK`, `-ERR`, `:1`, `*2`): at the first reply that
//! starts so, the connection is taken to be foreign and no call is ever made of it (counted
//! once in [`ParseStats::desyncs`], its bytes from then on in `unparsed_bytes`).

use super::framing::{self, Framer, Header, Loss, St, Streams};
use super::matching::InOrder;
use super::{
    BenchFixture, BytesSince, CallKind, CapturedHead, L7Call, MessageSpan, Outcome, ParseDepth,
    ParseStats, ParserConfig, Protocol, ProtocolDescriptor, ResourceKind, Segment, StreamParser,
};
use crate::event::Direction;
use crate::text::lossy_prefix;

/// The protocol's entry in [`super::REGISTRY`].
pub const DESCRIPTOR: ProtocolDescriptor = ProtocolDescriptor {
    folder: "memcached",
    title: "Memcached",
    calls: &[CallKind {
        proto: Protocol::Memcached,
        name: "memcached",
        resource: ResourceKind::Command,
        metrics: super::MetricNames::database("memcached"),
    }],
    kernel_id: Some(3),
    datagrams: false,
    copy_whole: true,
    detect: is_connection_start,
    new_parser: |cfg| Box::new(MemcachedParser::new(cfg)),
    benches: &[BenchFixture {
        file: "text.server.seg",
        what: "parse a text-protocol session",
        proto: Protocol::Memcached,
        calls: 27,
    }],
};

/// Commands waiting for replies on one connection before deeper pipelines draw on the shared
/// budget (`matching::SHARED_PENDING_BYTES`; beyond both, the oldest is dropped, counted).
const MAX_PENDING: usize = 256;
/// Longest text line framed; memcached itself closes a connection sending longer ones without
/// a newline (its limit is 2048 bytes for anything but a `get` of many keys).
const MAX_LINE: usize = 64 * 1024;
/// Memcached's longest key.
const MAX_KEY: usize = 250;
/// Longest command name kept as a method.
const MAX_NAME: usize = 32;
const MAX_ERROR_DETAIL: usize = 256;
/// Largest data block or binary body believed (memcached's item size limit is at most 1 GiB).
const MAX_VALUE: u64 = 1 << 32;
const BIN_HEADER: usize = 24;
const BIN_REQUEST: u8 = 0x80;
const BIN_RESPONSE: u8 = 0x81;
/// Binary extras are at most 20 bytes (`incr`: delta, initial, expiration).
const MAX_EXTRAS: u8 = 20;

// ---------------------------------------------------------------------------------------------
// Commands and replies

/// What a text command is, for framing and pairing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum TextKind {
    /// `set`/`add`/`replace`/`append`/`prepend`/`cas key flags exptime bytes [cas] [noreply]`,
    /// then a data block of `bytes`.
    Storage {
        cas: bool,
    },
    /// `get`/`gets key…`, `gat`/`gats exptime key…`: `VALUE` lines and blocks, then `END`.
    Retrieval {
        gat: bool,
    },
    /// `delete`, `incr`, `decr`, `touch`: one key first.
    Keyed,
    /// `stats …`, `lru_crawler metadump …`: lines until `END`.
    Listing,
    /// `quit`: closes the connection, no reply.
    Quit,
    /// Commands without a key (`version`, `verbosity`, `flush_all`, …).
    Plain,
    /// Meta commands: `mg`, `ms` (a data block), `md`, `ma`, `me` with a key, `mn` without.
    MetaGet,
    MetaSet,
    MetaDelete,
    MetaArithmetic,
    MetaDebug,
    MetaNoop,
}

fn text_command(word: &[u8]) -> Option<TextKind> {
    use TextKind::*;
    Some(match word {
        b"set" | b"add" | b"replace" | b"append" | b"prepend" => Storage { cas: false },
        b"cas" => Storage { cas: true },
        b"get" | b"gets" => Retrieval { gat: false },
        b"gat" | b"gats" => Retrieval { gat: true },
        b"delete" | b"incr" | b"decr" | b"touch" => Keyed,
        b"stats" => Listing,
        b"quit" => Quit,
        b"version" | b"verbosity" | b"flush_all" | b"shutdown" | b"cache_memlimit" | b"slabs"
        | b"lru_crawler" | b"lru" | b"misbehave" | b"debugtime" | b"extstore" => Plain,
        b"mg" => MetaGet,
        b"ms" => MetaSet,
        b"md" => MetaDelete,
        b"ma" => MetaArithmetic,
        b"me" => MetaDebug,
        b"mn" => MetaNoop,
        _ => return None,
    })
}

/// Single-line text replies (first word); `VALUE`/`STAT`/`ITEM` start listings, `VA` a block.
const REPLY_WORDS: &[&[u8]] = &[
    b"STORED",
    b"NOT_STORED",
    b"EXISTS",
    b"NOT_FOUND",
    b"DELETED",
    b"TOUCHED",
    b"OK",
    b"END",
    b"VALUE",
    b"STAT",
    b"ITEM",
    b"VERSION",
    b"RESET",
    b"BUSY",
    b"BADCLASS",
    b"NOSPARE",
    b"NOTFULL",
    b"UNSAFE",
    b"SAME",
    b"ERROR",
    b"CLIENT_ERROR",
    b"SERVER_ERROR",
    b"VA",
    b"HD",
    b"EN",
    b"NF",
    b"NS",
    b"EX",
    b"MN",
    b"ME",
];

/// Binary opcodes: (opcode, name, quiet, retrieval).
const OPCODES: &[(u8, &str, bool, bool)] = &[
    (0x00, "get", false, true),
    (0x01, "set", false, false),
    (0x02, "add", false, false),
    (0x03, "replace", false, false),
    (0x04, "delete", false, false),
    (0x05, "incr", false, false),
    (0x06, "decr", false, false),
    (0x07, "quit", false, false),
    (0x08, "flush", false, false),
    (0x09, "getq", true, true),
    (0x0a, "noop", false, false),
    (0x0b, "version", false, false),
    (0x0c, "getk", false, true),
    (0x0d, "getkq", true, true),
    (0x0e, "append", false, false),
    (0x0f, "prepend", false, false),
    (0x10, "stat", false, false),
    (0x11, "setq", true, false),
    (0x12, "addq", true, false),
    (0x13, "replaceq", true, false),
    (0x14, "deleteq", true, false),
    (0x15, "incrq", true, false),
    (0x16, "decrq", true, false),
    (0x17, "quitq", true, false),
    (0x18, "flushq", true, false),
    (0x19, "appendq", true, false),
    (0x1a, "prependq", true, false),
    (0x1b, "verbosity", false, false),
    (0x1c, "touch", false, false),
    (0x1d, "gat", false, true),
    (0x1e, "gatq", true, true),
    (0x20, "sasl_list_mechs", false, false),
    (0x21, "sasl_auth", false, false),
    (0x22, "sasl_step", false, false),
    (0x23, "gatk", false, true),
    (0x24, "gatkq", true, true),
];

fn opcode(op: u8) -> Option<(&'static str, bool, bool)> {
    OPCODES
        .iter()
        .find(|o| o.0 == op)
        .map(|&(_, name, quiet, retrieval)| (name, quiet, retrieval))
}

const OP_STAT: u8 = 0x10;

/// A binary status's name and class. Statuses the text protocol answers with a plain reply
/// (`NOT_FOUND`, `EXISTS`, `NOT_STORED`) are not errors here either; a request the server
/// refused as malformed or unknown is the client's error; the rest the server's.
fn status(code: u16) -> (&'static str, Outcome) {
    use Outcome::*;
    match code {
        0x00 => ("NO_ERROR", Ok),
        0x01 => ("KEY_ENOENT", Ok),
        0x02 => ("KEY_EEXISTS", Ok),
        0x05 => ("NOT_STORED", Ok),
        0x21 => ("AUTH_CONTINUE", Ok),
        0x04 => ("EINVAL", ClientError),
        0x06 => ("DELTA_BADVAL", ClientError),
        0x07 => ("NOT_MY_VBUCKET", ClientError),
        0x08 | 0x20 => ("AUTH_ERROR", ClientError),
        0x81 => ("UNKNOWN_COMMAND", ClientError),
        0x03 => ("E2BIG", ServerError),
        0x82 => ("ENOMEM", ServerError),
        0x83 => ("NOT_SUPPORTED", ServerError),
        0x84 => ("EINTERNAL", ServerError),
        0x85 => ("EBUSY", ServerError),
        0x86 => ("ETMPFAIL", ServerError),
        _ => ("UNKNOWN_STATUS", ServerError),
    }
}

// ---------------------------------------------------------------------------------------------
// Detection

/// Does this payload (the first one a connection shows in some direction) start Memcached?
///
/// Accepted: a text or meta command line, all of it captured and printable, whose first word
/// is a known command (lower case, as memcached requires) followed by a space or the line end,
/// with a storage command's numbers well formed; or a whole binary request header (magic 0x80,
/// a known opcode, raw data type, key ≤ 250 bytes, extras ≤ 20 bytes, a body that holds them).
/// Replies are not accepted (a connection that shows a reply first is recognised at its next
/// command), and `get foo` typed to Redis is (see the module's notes on foreign connections).
pub fn is_connection_start(p: &[u8]) -> bool {
    if p.first() == Some(&BIN_REQUEST) {
        return bin_header(p).is_some_and(|h| h.valid_request());
    }
    let Some(eol) = p.iter().position(|&c| c == b'\n') else {
        return false;
    };
    let line = p[..eol].strip_suffix(b"\r").unwrap_or(&p[..eol]);
    if !line.iter().all(|c| (0x20..0x7f).contains(c)) {
        return false;
    }
    let mut words = line.split(|&c| c == b' ');
    let Some(kind) = words.next().and_then(text_command) else {
        return false;
    };
    match kind {
        TextKind::Storage { .. } => storage_data_len(line, kind).is_some(),
        TextKind::Retrieval { .. }
        | TextKind::Keyed
        | TextKind::MetaGet
        | TextKind::MetaDelete
        | TextKind::MetaArithmetic
        | TextKind::MetaDebug => words.next().is_some_and(|k| !k.is_empty()),
        TextKind::MetaSet => meta_data_len(line).is_some(),
        _ => true,
    }
}

/// Could a command start at `p` (resynchronisation after lost bytes)?
fn looks_like_command(p: &[u8]) -> bool {
    if p.first() == Some(&BIN_REQUEST) {
        return p.len() >= 8 && early_header_ok(p, BIN_REQUEST);
    }
    let word_len = p
        .iter()
        .take_while(|c| c.is_ascii_lowercase() || **c == b'_')
        .count();
    matches!(p.get(word_len), Some(b' ' | b'\r' | b'\n')) && text_command(&p[..word_len]).is_some()
}

/// Could a reply start at `p`?
fn looks_like_reply(p: &[u8]) -> bool {
    if p.first() == Some(&BIN_RESPONSE) {
        return p.len() >= 8 && early_header_ok(p, BIN_RESPONSE);
    }
    let word_len = p
        .iter()
        .take_while(|c| c.is_ascii_uppercase() || **c == b'_')
        .count();
    if word_len > 0 {
        return matches!(p.get(word_len), Some(b' ' | b'\r' | b'\n'))
            && REPLY_WORDS.contains(&&p[..word_len]);
    }
    let digits = p.iter().take_while(|c| c.is_ascii_digit()).count();
    (1..=20).contains(&digits) && p[digits..].starts_with(b"\r\n")
}

/// The first 8 bytes of a binary header are sane: magic, known opcode, key and extras lengths,
/// raw data type.
fn early_header_ok(p: &[u8], magic: u8) -> bool {
    p[0] == magic
        && opcode(p[1]).is_some()
        && p[2] == 0
        && usize::from(p[3]) <= MAX_KEY
        && p[4] <= MAX_EXTRAS
        && p[5] == 0
}

/// Bytes that start a RESP value: a reply starting so is Redis, not memcached.
const RESP_TYPES: &[u8] = b"+-:$*_,#!=(%~>|";

// ---------------------------------------------------------------------------------------------
// Parsing lines and headers

fn words(line: &[u8]) -> impl Iterator<Item = &[u8]> {
    line.split(|&c| c == b' ').filter(|w| !w.is_empty())
}

fn parse_u64(b: &[u8]) -> Option<u64> {
    if b.is_empty() || b.len() > 20 || !b.iter().all(u8::is_ascii_digit) {
        return None;
    }
    std::str::from_utf8(b).ok()?.parse().ok()
}

fn parse_i64(b: &[u8]) -> Option<i64> {
    let digits = b.strip_prefix(b"-").unwrap_or(b);
    parse_u64(digits)?;
    std::str::from_utf8(b).ok()?.parse().ok()
}

/// A storage command's data length, if its line is well formed (else memcached answers
/// `CLIENT_ERROR` and reads no data).
fn storage_data_len(line: &[u8], kind: TextKind) -> Option<u64> {
    let w: Vec<&[u8]> = words(line).take(8).collect();
    let cas = kind == TextKind::Storage { cas: true };
    let need = if cas { 6 } else { 5 };
    if w.len() < need || w[1].len() > MAX_KEY {
        return None;
    }
    parse_u64(w[2]).filter(|&f| f <= u64::from(u32::MAX))?;
    parse_i64(w[3])?;
    if cas {
        parse_u64(w[5])?;
    }
    parse_u64(w[4]).filter(|&n| n <= MAX_VALUE)
}

/// `ms key datalen flags…`: the data length.
fn meta_data_len(line: &[u8]) -> Option<u64> {
    let mut w = words(line).skip(1);
    let key = w.next()?;
    if key.len() > MAX_KEY {
        return None;
    }
    parse_u64(w.next()?).filter(|&n| n <= MAX_VALUE)
}

/// Does a meta command carry the `q` (quiet) flag?
fn meta_quiet(line: &[u8], flags_from: usize) -> bool {
    words(line).skip(flags_from).any(|f| f == b"q")
}

fn lower(b: &[u8]) -> String {
    lossy_prefix(b, MAX_NAME).to_ascii_lowercase()
}

#[derive(Debug, Clone, Copy)]
struct BinHeader {
    magic: u8,
    opcode: u8,
    key_len: u16,
    extras_len: u8,
    data_type: u8,
    /// vbucket (request) or status (response).
    status: u16,
    body_len: u32,
    opaque: u32,
}

fn bin_header(p: &[u8]) -> Option<BinHeader> {
    let h = p.get(..BIN_HEADER)?;
    Some(BinHeader {
        magic: h[0],
        opcode: h[1],
        key_len: u16::from_be_bytes([h[2], h[3]]),
        extras_len: h[4],
        data_type: h[5],
        status: u16::from_be_bytes([h[6], h[7]]),
        body_len: u32::from_be_bytes([h[8], h[9], h[10], h[11]]),
        opaque: u32::from_be_bytes([h[12], h[13], h[14], h[15]]),
    })
}

impl BinHeader {
    fn lengths_ok(&self) -> bool {
        self.data_type == 0
            && self.extras_len <= MAX_EXTRAS
            && u64::from(self.body_len) >= u64::from(self.key_len) + u64::from(self.extras_len)
            && u64::from(self.body_len) <= MAX_VALUE
    }
    fn valid_request(&self) -> bool {
        self.magic == BIN_REQUEST
            && opcode(self.opcode).is_some()
            && usize::from(self.key_len) <= MAX_KEY
            && self.lengths_ok()
    }
    fn valid_response(&self) -> bool {
        // A server may return an error message body for any opcode, known or not.
        self.magic == BIN_RESPONSE && self.lengths_ok()
    }
}

// ---------------------------------------------------------------------------------------------
// Requests and replies

/// Which replies a command may get (pairing).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Answer {
    /// Always answered.
    Always,
    /// Never answered (`quit`).
    Never,
    /// `noreply`: only an error.
    ErrorsOnly,
    /// `mg … q`: only a hit (`VA`, `HD`) or an error.
    QuietGet,
    /// `ms`/`md`/`ma … q`: only a failure (`NS`, `EX`, `NF`, `EN`) or an error.
    QuietUpdate,
    /// A binary quiet opcode: only its own response.
    BinaryQuiet,
}

#[derive(Debug)]
struct Request {
    method: String,
    resource: String,
    version: &'static str,
    keys: u64,
    /// Text reply made of lines until `END`.
    listing: bool,
    /// A retrieval: hits and misses are counted.
    retrieval: bool,
    answer: Answer,
    /// Binary: opcode and opaque the response must carry.
    bin: Option<(u8, u32)>,
    span: MessageSpan,
    truncated: bool,
    head: CapturedHead,
    /// Binary `stat`: the responses so far (one per statistic, until an empty key).
    parts: Option<Reply>,
    /// Answered before it was all read: its call waits for its end.
    in_progress: bool,
}

/// A reply as framed.
#[derive(Debug)]
struct Reply {
    /// First word of a text reply (a number is `number`), a binary status's name.
    word: String,
    error: Option<ErrorReply>,
    /// `VALUE`/`VA` blocks (text), or a binary hit.
    values: u64,
    bin: Option<BinHeader>,
    span: MessageSpan,
    truncated: bool,
    inferred: bool,
    head: CapturedHead,
}

impl Request {
    /// Can reply `r` answer this request?
    fn accepts(&self, r: &Reply) -> bool {
        match (self.bin, r.bin) {
            (Some((op, opaque)), Some(h)) => h.opcode == op && h.opaque == opaque,
            (None, None) => {
                let w = r.word.as_str();
                match self.answer {
                    Answer::Always => true,
                    Answer::Never | Answer::BinaryQuiet => false,
                    Answer::ErrorsOnly => r.error.is_some(),
                    Answer::QuietGet => r.error.is_some() || matches!(w, "VA" | "HD"),
                    Answer::QuietUpdate => {
                        r.error.is_some() || matches!(w, "NS" | "EX" | "NF" | "EN")
                    }
                }
            }
            _ => false,
        }
    }
}

/// A text command line understood: the request, and the data block that follows it.
fn text_request(line: &[u8], cfg_depth: ParseDepth) -> Option<(Request, Option<u64>)> {
    let mut w = words(line);
    let word = w.next().unwrap_or_default();
    if word.is_empty()
        || word.len() > MAX_NAME
        || !word.iter().all(|c| c.is_ascii_alphanumeric() || *c == b'_')
    {
        return None;
    }
    let kind = text_command(word);
    let args: Vec<&[u8]> = w.collect();
    let noreply = args.last() == Some(&&b"noreply"[..]);
    let mut keys = 0u64;
    let mut data = None;
    let mut version = "text";
    let mut answer = if noreply {
        Answer::ErrorsOnly
    } else {
        Answer::Always
    };
    let key: Option<&[u8]> = match kind {
        Some(k @ TextKind::Storage { .. }) => {
            data = storage_data_len(line, k);
            args.first().copied()
        }
        Some(TextKind::Retrieval { gat }) => {
            let skip = usize::from(gat);
            keys = args.len().saturating_sub(skip) as u64;
            answer = Answer::Always;
            args.get(skip).copied()
        }
        Some(TextKind::Keyed) => args.first().copied(),
        Some(TextKind::Quit) => {
            answer = Answer::Never;
            None
        }
        Some(TextKind::Listing | TextKind::Plain) | None => None,
        Some(meta) => {
            version = "meta";
            answer = Answer::Always;
            let flags_from = match meta {
                TextKind::MetaNoop => 1,
                TextKind::MetaSet => 3,
                _ => 2,
            };
            if meta_quiet(line, flags_from) {
                answer = match meta {
                    TextKind::MetaGet => Answer::QuietGet,
                    TextKind::MetaSet | TextKind::MetaDelete | TextKind::MetaArithmetic => {
                        Answer::QuietUpdate
                    }
                    _ => Answer::Always,
                };
            }
            if meta == TextKind::MetaSet {
                data = meta_data_len(line);
            }
            (meta != TextKind::MetaNoop)
                .then(|| args.first().copied())
                .flatten()
        }
    };
    let listing = matches!(kind, Some(TextKind::Listing | TextKind::Retrieval { .. }))
        || (word == b"lru_crawler"
            && args
                .first()
                .is_some_and(|a| *a == b"metadump" || *a == b"mgdump"));
    Some((
        Request {
            method: lower(word),
            resource: key.map_or_else(String::new, |k| lossy_prefix(k, MAX_KEY)),
            version,
            keys: if cfg_depth == ParseDepth::Full {
                keys
            } else {
                0
            },
            listing,
            retrieval: matches!(kind, Some(TextKind::Retrieval { .. } | TextKind::MetaGet)),
            answer,
            bin: None,
            span: MessageSpan::default(),
            truncated: false,
            head: CapturedHead::default(),
            parts: None,
            in_progress: false,
        },
        data,
    ))
}

/// A text reply's first line understood: (word, error).
/// An error reply: its word (status text), class and message.
type ErrorReply = (String, Outcome, String);

fn text_reply_word(line: &[u8]) -> Option<(String, Option<ErrorReply>)> {
    let word_len = line.iter().position(|&c| c == b' ').unwrap_or(line.len());
    let word = &line[..word_len];
    if parse_u64(word).is_some() && word_len == line.len() {
        return Some(("number".to_owned(), None));
    }
    if !REPLY_WORDS.contains(&word) {
        return None;
    }
    let msg = || {
        lossy_prefix(
            line.get(word_len + 1..).unwrap_or_default(),
            MAX_ERROR_DETAIL,
        )
    };
    let error = match word {
        b"ERROR" => Some(("ERROR".to_owned(), Outcome::ServerError, msg())),
        b"CLIENT_ERROR" => Some(("CLIENT_ERROR".to_owned(), Outcome::ClientError, msg())),
        b"SERVER_ERROR" => Some(("SERVER_ERROR".to_owned(), Outcome::ServerError, msg())),
        _ => None,
    };
    Some((lossy_prefix(word, MAX_NAME), error))
}

// ---------------------------------------------------------------------------------------------
// Framing (by the framing core) and messages per direction

/// What a frame is: a text line alone, a text line and the data block after it, a binary
/// header and body.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Frame {
    #[default]
    Line,
    Data,
    Binary,
}

/// A message being framed (its span is the framing core's `acc`).
#[derive(Debug)]
struct Msg {
    /// The request being framed (request direction), or the one a text reply answers.
    req: Option<Request>,
    /// Reply direction: the first line's word and error, once seen.
    reply: Option<(String, Option<ErrorReply>)>,
    values: u64,
    /// The text reply runs until `END`.
    listing: bool,
    bin: Option<BinHeader>,
    /// A request already answered before it was all read, and its call waiting for its end.
    answered: bool,
    held: Option<(Request, Reply)>,
}

impl Msg {
    fn new() -> Msg {
        Msg {
            req: None,
            reply: None,
            values: 0,
            listing: false,
            bin: None,
            answered: false,
            held: None,
        }
    }
}

/// One direction's message under way and its captured head. A message whose end went out of
/// sight is open: its direction is lost (`St::Lost`) with the message kept, and takes every
/// byte until the other direction shows where it ended.
#[derive(Debug, Default)]
struct Dir {
    msg: Option<Msg>,
    head: Vec<u8>,
}

pub struct MemcachedParser {
    depth: ParseDepth,
    keep_head: usize,
    streams: Streams<Frame, ()>,
    dirs: [Dir; 2],
    /// Direction commands travel, once a message has shown it.
    request_dir: Option<usize>,
    pending: InOrder<Request>,
    /// Not memcached (a Redis server answered): nothing more is parsed.
    foreign: bool,
    /// Replies still to come for always-answered requests dropped from a full `pending`
    /// (the oldest: their replies come first), skipped rather than paired.
    replies_to_skip: u64,
    /// A request that may go unanswered was dropped: which replies are its is unknowable,
    /// so no reply is paired on this connection any more (counted as unmatched).
    blind: bool,
}

impl MemcachedParser {
    pub fn new(cfg: &ParserConfig) -> Self {
        MemcachedParser {
            depth: cfg.depth,
            keep_head: cfg.keep_head,
            streams: Streams::new(St::Header, 1),
            dirs: [Dir::default(), Dir::default()],
            request_dir: None,
            pending: InOrder::new(MAX_PENDING),
            foreign: false,
            replies_to_skip: 0,
            blind: false,
        }
    }

    fn is_request_dir(&self, d: usize) -> bool {
        self.request_dir == Some(d)
    }

    /// Direction d's message's end went out of sight: it takes everything until the other
    /// direction shows where it ended.
    fn is_open(&self, d: usize) -> bool {
        self.streams.dirs[d].st == St::Lost && self.dirs[d].msg.is_some()
    }

    fn keep(&mut self, d: usize, bytes: &[u8]) {
        let room = self.keep_head.saturating_sub(self.dirs[d].head.len());
        if room > 0 {
            self.dirs[d]
                .head
                .extend_from_slice(&bytes[..bytes.len().min(room)]);
        }
    }

    fn take_head(&mut self, d: usize, len: u64) -> CapturedHead {
        CapturedHead::redacted(std::mem::take(&mut self.dirs[d].head), len)
    }

    /// Loses direction d's place, keeping its message (and its span) if any.
    fn lose_place(&mut self, d: usize, stats: &mut ParseStats) {
        let s = &mut self.streams.dirs[d];
        if s.st != St::Lost {
            stats.desyncs += 1;
        }
        s.st = St::Lost;
        s.clear(1);
    }

    /// Drops direction d's message in progress as damaged (`counted`: the message itself
    /// already was, by the framing core).
    fn damage_current(&mut self, d: usize, counted: bool, stats: &mut ParseStats) {
        if let Some(m) = self.dirs[d].msg.take() {
            if !counted {
                stats.damaged_messages += 1;
            }
            // A text reply holds the request it answered: lost with it.
            if m.req.is_some() && self.request_dir != Some(d) {
                stats.damaged_messages += 1;
            }
        }
        self.dirs[d].head.clear();
        self.streams.dirs[d].acc = BytesSince::default();
    }

    /// Messages may have been lost in an unknown number: what is pending can no longer be
    /// paired.
    fn distrust_pairing(&mut self, stats: &mut ParseStats) {
        stats.damaged_messages += self.pending.len() as u64;
        self.pending.drain().for_each(drop);
        // Which replies are the dropped requests' is as unknowable now.
        self.replies_to_skip = 0;
    }

    /// A Redis server answered: the connection is not memcached (the framing core counts the
    /// desync).
    fn go_foreign(&mut self) {
        self.foreign = true;
        self.pending.drain().for_each(drop);
        for ds in &mut self.dirs {
            *ds = Dir::default();
        }
    }

    /// Starts a message in direction d at `first`, the byte it begins with: false if the
    /// connection is foreign.
    fn begin(
        &mut self,
        d: usize,
        first: u8,
        out: &mut Vec<L7Call>,
        stats: &mut ParseStats,
    ) -> bool {
        let replies = self.request_dir.is_some_and(|rd| rd != d);
        if replies && RESP_TYPES.contains(&first) {
            self.go_foreign();
            return false;
        }
        if replies {
            // A command whose end was out of sight ends, at the latest, when a reply comes.
            let rd = 1 - d;
            if self.is_open(rd) {
                self.request_done(rd, out, stats);
            }
        }
        let ds = &mut self.dirs[d];
        ds.head.clear();
        ds.msg = Some(Msg::new());
        true
    }

    /// A whole text line (without its line end) in direction d: the frame it starts.
    fn on_line(
        &mut self,
        d: usize,
        line: &[u8],
        out: &mut Vec<L7Call>,
        stats: &mut ParseStats,
    ) -> Header<Frame> {
        if self.request_dir.is_none() {
            // The first message decides which way commands go.
            if looks_like_command(line_with_end(line).as_slice()) {
                self.request_dir = Some(d);
            } else if text_reply_word(line).is_some() {
                self.request_dir = Some(1 - d);
            } else {
                return Header::NotAFrame;
            }
        }
        if self.is_request_dir(d) {
            return self.on_request_line(d, line, out, stats);
        }
        self.on_reply_line(d, line, out, stats)
    }

    fn on_request_line(
        &mut self,
        d: usize,
        line: &[u8],
        out: &mut Vec<L7Call>,
        stats: &mut ParseStats,
    ) -> Header<Frame> {
        if !line.iter().all(|c| (0x20..0x7f).contains(c)) {
            return Header::NotAFrame;
        }
        let Some((req, data)) = text_request(line, self.depth) else {
            return Header::NotAFrame;
        };
        let Some(m) = self.dirs[d].msg.as_mut() else {
            return LINE;
        };
        m.req = Some(req);
        match data {
            Some(n) => self.data_block(d, n),
            None => {
                self.request_done(d, out, stats);
                LINE
            }
        }
    }

    /// A data block of `n` bytes (and its CRLF) follows the line: skipped by count, marked in
    /// the head.
    fn data_block(&mut self, d: usize, n: u64) -> Header<Frame> {
        let mark = format!("[value, {n} bytes]\r\n");
        self.keep(d, mark.as_bytes());
        self.streams.dirs[d].start_body(0);
        Header::Frame {
            body_len: n + 2,
            kind: Frame::Data,
            more: false,
        }
    }

    fn on_reply_line(
        &mut self,
        d: usize,
        line: &[u8],
        out: &mut Vec<L7Call>,
        stats: &mut ParseStats,
    ) -> Header<Frame> {
        let first = self.dirs[d].msg.as_ref().is_some_and(|m| m.reply.is_none());
        let word_len = line.iter().position(|&c| c == b' ').unwrap_or(line.len());
        let word = &line[..word_len];
        if first {
            let Some((w, error)) = text_reply_word(line) else {
                return Header::NotAFrame;
            };
            let r = Reply {
                word: w.clone(),
                error: error.clone(),
                values: 0,
                bin: None,
                span: MessageSpan::default(),
                truncated: false,
                inferred: false,
                head: CapturedHead::default(),
            };
            let req = self.take_request_for(&r, stats);
            let listing = match &req {
                Some(q) => q.listing,
                None => matches!(word, b"VALUE" | b"STAT" | b"ITEM"),
            };
            let Some(m) = self.dirs[d].msg.as_mut() else {
                return LINE;
            };
            m.listing = listing && error.is_none() && !is_single_line_reply(word);
            m.req = req;
            m.reply = Some((w, error));
        }
        let Some(m) = self.dirs[d].msg.as_mut() else {
            return LINE;
        };
        let block = match word {
            b"VALUE" if m.listing => {
                m.values += 1;
                // VALUE key flags bytes [cas]
                words(line)
                    .nth(3)
                    .and_then(parse_u64)
                    .filter(|&n| n <= MAX_VALUE)
            }
            b"VA" if first => {
                m.values += 1;
                words(line)
                    .nth(1)
                    .and_then(parse_u64)
                    .filter(|&n| n <= MAX_VALUE)
            }
            b"VALUE" | b"VA" => return Header::NotAFrame,
            _ => None,
        };
        if matches!(word, b"VALUE" | b"VA") && block.is_none() {
            return Header::NotAFrame;
        }
        if let Some(n) = block {
            return self.data_block(d, n);
        }
        let ends = !m.listing
            || word == b"END"
            || (!first && matches!(word, b"ERROR" | b"CLIENT_ERROR" | b"SERVER_ERROR"));
        if ends {
            self.reply_done(d, false, out, stats);
        }
        LINE
    }

    /// A data block ended in direction d.
    fn on_data_done(&mut self, d: usize, out: &mut Vec<L7Call>, stats: &mut ParseStats) {
        if self.is_request_dir(d) {
            self.request_done(d, out, stats);
        } else if !self.dirs[d].msg.as_ref().is_some_and(|m| m.listing) {
            self.reply_done(d, false, out, stats);
        }
    }

    /// The binary header `hdr` in direction d is complete: its body's frame.
    fn on_bin_header(&mut self, d: usize, hdr: &[u8]) -> Header<Frame> {
        self.keep(d, hdr);
        let Some(h) = bin_header(hdr) else {
            return Header::NotAFrame;
        };
        let request = match self.request_dir {
            _ if h.valid_request() => true,
            _ if h.valid_response() => false,
            _ => return Header::NotAFrame,
        };
        let rd = *self
            .request_dir
            .get_or_insert(if request { d } else { 1 - d });
        if (rd == d) != request {
            return Header::NotAFrame;
        }
        if let Some(m) = self.dirs[d].msg.as_mut() {
            m.bin = Some(h);
        }
        // Extras and key are kept; the value is skipped.
        let keep = usize::from(h.extras_len) + usize::from(h.key_len);
        self.streams.dirs[d].start_body(keep);
        Header::Frame {
            body_len: u64::from(h.body_len),
            kind: Frame::Binary,
            more: false,
        }
    }

    /// A binary body ended in direction d, `body` its kept prefix (part of the head).
    fn on_bin_body(
        &mut self,
        d: usize,
        body: &[u8],
        out: &mut Vec<L7Call>,
        stats: &mut ParseStats,
    ) {
        self.keep(d, body);
        self.bin_done(d, body, out, stats);
    }

    /// A binary message ended in direction d, `body` its kept prefix.
    fn bin_done(&mut self, d: usize, body: &[u8], out: &mut Vec<L7Call>, stats: &mut ParseStats) {
        let Some(h) = self.dirs[d].msg.as_ref().and_then(|m| m.bin) else {
            return;
        };
        let key_start = usize::from(h.extras_len);
        let key = body.get(key_start..).unwrap_or_default();
        let key = &key[..key.len().min(usize::from(h.key_len))];
        if self.is_request_dir(d) && self.dirs[d].msg.as_ref().is_some_and(|m| m.answered) {
            self.request_done(d, out, stats);
        } else if self.is_request_dir(d) {
            let (name, quiet, retrieval) = opcode(h.opcode).unwrap_or(("unknown", false, false));
            let req = Request {
                method: name.to_owned(),
                resource: lossy_prefix(key, MAX_KEY),
                version: "binary",
                keys: 0,
                listing: false,
                retrieval,
                answer: if quiet {
                    Answer::BinaryQuiet
                } else {
                    Answer::Always
                },
                bin: Some((h.opcode, h.opaque)),
                span: MessageSpan::default(),
                truncated: false,
                head: CapturedHead::default(),
                parts: None,
                in_progress: false,
            };
            if let Some(m) = self.dirs[d].msg.as_mut() {
                m.req = Some(req);
            }
            self.request_done(d, out, stats);
        } else {
            if let Some(m) = self.dirs[d].msg.as_mut() {
                let (name, outcome) = status(h.status);
                let error = (outcome != Outcome::Ok).then(|| {
                    let msg = body
                        .get(key_start + usize::from(h.key_len)..)
                        .unwrap_or_default();
                    (
                        name.to_owned(),
                        outcome,
                        lossy_prefix(msg, MAX_ERROR_DETAIL),
                    )
                });
                m.values = u64::from(h.status == 0);
                m.reply = Some((name.to_owned(), error));
            }
            self.reply_done(d, false, out, stats);
        }
    }

    /// Direction d completed a request (or its end went out of sight).
    fn request_done(&mut self, d: usize, out: &mut Vec<L7Call>, stats: &mut ParseStats) {
        let keep = self.keep_head;
        let Some(m) = self.dirs[d].msg.take() else {
            return;
        };
        let (span, truncated) = self.streams.dirs[d].acc.take();
        let Some(mut req) = m.req else {
            match m.held {
                // Its reply came first: the call now has the request's whole span.
                Some((mut q, r)) => {
                    q.span = span;
                    q.truncated |= truncated;
                    q.in_progress = false;
                    self.emit(q, r, out);
                }
                None if !m.answered => stats.damaged_messages += 1,
                None => {}
            }
            return;
        };
        req.span = span;
        req.truncated = truncated;
        req.head = if keep > 0 {
            self.take_head(d, span.bytes)
        } else {
            CapturedHead::default()
        };
        // A reply whose end was out of sight ends, at the latest, when the client sends its
        // next command while waiting for it (nothing else pending). With more pending, the
        // unseen bytes held an unknown number of replies: none can be paired.
        let other = 1 - d;
        if self.is_open(other) {
            // A binary reply's request is still pending; a text reply holds its own.
            let its_own = self.dirs[other]
                .msg
                .as_ref()
                .is_some_and(|m| m.req.is_none() && m.bin.is_some());
            if self.pending.len() <= usize::from(its_own) {
                self.finish_open(other, out, stats);
                // The client sent its next command once it had the whole reply: the next
                // bytes that way start a reply.
                let s = &mut self.streams.dirs[other];
                s.st = St::Header;
                s.clear(1);
            } else {
                self.damage_current(other, false, stats);
                self.distrust_pairing(stats);
            }
        }
        if req.answer == Answer::Never && self.pending.is_empty() {
            stats.unreplied_requests += 1;
            return;
        }
        // Pipelined deeper than the connection's depth and the shared budget allow: the oldest
        // is dropped (counted), and its reply, which comes first, pairs with no other request.
        if let Some(old) = self.pending.push_or_drop(req) {
            stats.pending_dropped += 1;
            if old.answer == Answer::Always {
                self.replies_to_skip += 1;
            } else {
                self.blind = true;
            }
        }
    }

    /// The oldest pending request that reply `r` can answer; the quiet ones before it got
    /// their answer by silence (counted, no call).
    fn take_request_for(&mut self, r: &Reply, stats: &mut ParseStats) -> Option<Request> {
        if self.blind {
            return None;
        }
        if self.replies_to_skip > 0 {
            self.replies_to_skip -= 1;
            return None;
        }
        let mut at = self.pending.iter().position(|q| q.accepts(r));
        // memcached 1.6 answers a `noreply` command with nothing, errors included (checked:
        // a failed `incr … noreply`, a value too large, a bad data chunk); only a line it
        // cannot parse (where it cannot see the `noreply`) may get an error. So an error while
        // a command that must be answered waits behind `noreply` ones is that command's, and
        // the `noreply` ones before it were silent.
        if let Some(i) = at {
            let noreply_first = self
                .pending
                .iter()
                .nth(i)
                .is_some_and(|q| q.answer == Answer::ErrorsOnly);
            if noreply_first {
                if let Some(j) = self
                    .pending
                    .iter()
                    .skip(i + 1)
                    .position(|q| q.answer != Answer::ErrorsOnly && q.accepts(r))
                {
                    at = Some(i + 1 + j);
                }
            }
        }
        let upto = at.unwrap_or(self.pending.len());
        if self
            .pending
            .iter()
            .take(upto)
            .any(|q| q.answer == Answer::Always)
        {
            // An answered command would be skipped: the reply is not for any of them.
            return None;
        }
        let early = match at {
            Some(_) => None,
            None => Some(self.take_request_in_progress(r)?),
        };
        for _ in 0..upto {
            self.pending.pop();
            stats.unreplied_requests += 1;
        }
        early.or_else(|| self.pending.pop())
    }

    /// A reply may come before its request was all read: memcached refuses a value too large
    /// at once and reads (discards) the rest afterwards. The call is made when the request
    /// ends (or at the close), with the request's whole span.
    fn take_request_in_progress(&mut self, r: &Reply) -> Option<Request> {
        let rd = self.request_dir?;
        if !matches!(self.streams.dirs[rd].st, St::Body { .. }) {
            return None;
        }
        let m = self.dirs[rd].msg.as_mut()?;
        if !m.req.as_ref()?.accepts(r) {
            return None;
        }
        let mut q = m.req.take()?;
        m.answered = true;
        q.in_progress = true;
        Some(q)
    }

    /// Direction d completed a reply (`inferred`: its end was out of sight).
    fn reply_done(
        &mut self,
        d: usize,
        inferred: bool,
        out: &mut Vec<L7Call>,
        stats: &mut ParseStats,
    ) {
        let keep = self.keep_head;
        let Some(m) = self.dirs[d].msg.take() else {
            return;
        };
        let (span, truncated) = self.streams.dirs[d].acc.take();
        let head = if keep > 0 {
            self.take_head(d, span.bytes)
        } else {
            CapturedHead::default()
        };
        let Some((word, error)) = m.reply else {
            // Not even its first line was seen.
            stats.damaged_messages += 1;
            return;
        };
        let reply = Reply {
            word,
            error,
            values: m.values,
            bin: m.bin,
            span,
            truncated,
            inferred,
            head,
        };
        if inferred {
            stats.inferred_ends += 1;
        }
        let req = match (m.req, reply.bin) {
            (Some(q), _) => q,
            (None, Some(_)) => {
                let Some(q) = self.take_binary_request(&reply, stats) else {
                    return;
                };
                q
            }
            (None, None) => {
                stats.unmatched_responses += 1;
                return;
            }
        };
        self.emit(req, reply, out);
    }

    /// The request a binary response answers; `stat` responses accumulate until the last.
    fn take_binary_request(&mut self, r: &Reply, stats: &mut ParseStats) -> Option<Request> {
        let stat_part = r
            .bin
            .is_some_and(|h| h.opcode == OP_STAT && h.key_len > 0 && h.status == 0);
        if stat_part {
            let front_is_stat = self
                .pending
                .iter()
                .position(|q| q.accepts(r))
                .is_some_and(|at| {
                    self.pending
                        .iter()
                        .take(at)
                        .all(|q| q.answer != Answer::Always)
                });
            if front_is_stat {
                // Skip the quiet ones before it, then add this part to it.
                while self.pending.front().is_some_and(|q| !q.accepts(r)) {
                    self.pending.pop();
                    stats.unreplied_requests += 1;
                }
                if let Some(q) = self.pending.front_mut() {
                    match q.parts.as_mut() {
                        Some(p) => {
                            p.span.last_start_ns = r.span.last_start_ns;
                            p.span.last_end_ns = r.span.last_end_ns;
                            p.span.bytes = p.span.bytes.saturating_add(r.span.bytes);
                            p.span.syscalls += r.span.syscalls;
                            p.truncated |= r.truncated;
                        }
                        None => {
                            q.parts = Some(Reply {
                                word: r.word.clone(),
                                error: None,
                                values: 0,
                                bin: r.bin,
                                span: r.span,
                                truncated: r.truncated,
                                inferred: false,
                                head: r.head.clone(),
                            })
                        }
                    }
                }
                return None;
            }
        }
        let q = self.take_request_for(r, stats);
        if q.is_none() {
            stats.unmatched_responses += 1;
        }
        q
    }

    fn emit(&mut self, mut req: Request, mut r: Reply, out: &mut Vec<L7Call>) {
        if req.in_progress {
            if let Some(m) = self.request_dir.and_then(|rd| self.dirs[rd].msg.as_mut()) {
                if m.answered && m.held.is_none() {
                    m.held = Some((req, r));
                    return;
                }
            }
        }
        if let Some(p) = req.parts.take() {
            // Binary stat: the call's reply runs from the first statistic to the last packet.
            let mut span = p.span;
            span.last_start_ns = r.span.last_start_ns;
            span.last_end_ns = r.span.last_end_ns;
            span.bytes = span.bytes.saturating_add(r.span.bytes);
            span.syscalls += r.span.syscalls;
            r.span = span;
            r.truncated |= p.truncated;
            r.head = p.head;
        }
        let mut details = Vec::new();
        if self.depth == ParseDepth::Full {
            details.push(("reply", r.word.clone()));
            if req.keys > 1 {
                details.push(("keys", req.keys.to_string()));
            }
            if req.retrieval && !r.inferred && r.error.is_none() {
                let (asked, hits) = match req.version {
                    "text" => (req.keys, r.values.min(req.keys)),
                    "meta" => (1, u64::from(matches!(r.word.as_str(), "VA" | "HD"))),
                    _ => (1, r.values.min(1)),
                };
                details.push(("hits", hits.to_string()));
                details.push(("misses", (asked - hits).to_string()));
            }
            if let Some((_, _, msg)) = &r.error {
                if !msg.is_empty() {
                    details.push(("error", msg.clone()));
                }
            }
        }
        let request_dir = self.request_dir.unwrap_or(0);
        let (status_text, outcome) = match r.error {
            Some((word, outcome, _)) => (Some(word), outcome),
            None => (None, Outcome::Ok),
        };
        out.push(L7Call {
            proto: Protocol::Memcached,
            request_dir: if request_dir == 0 {
                Direction::Egress
            } else {
                Direction::Ingress
            },
            method: req.method,
            resource: req.resource,
            version: req.version,
            status: None,
            status_text,
            outcome,
            req: req.span,
            resp: r.span,
            truncated: req.truncated || r.truncated,
            end_inferred: r.inferred,
            details,
            req_head: req.head,
            resp_head: r.head,
        });
    }

    /// A message's first byte, or a whole binary header (its frame after it).
    fn message_start(
        &mut self,
        d: usize,
        hdr: &[u8],
        out: &mut Vec<L7Call>,
        stats: &mut ParseStats,
    ) -> Header<Frame> {
        if hdr.len() >= BIN_HEADER {
            return self.on_bin_header(d, hdr);
        }
        if !self.begin(d, hdr[0], out, stats) {
            return Header::NotAFrame;
        }
        if hdr[0] == BIN_REQUEST || hdr[0] == BIN_RESPONSE {
            Header::NeedMore(BIN_HEADER)
        } else {
            Header::Line { max: MAX_LINE }
        }
    }

    /// Direction d's open message (its end out of sight) ends here.
    fn finish_open(&mut self, d: usize, out: &mut Vec<L7Call>, stats: &mut ParseStats) {
        if self.dirs[d].msg.is_none() {
            return;
        }
        if self.is_request_dir(d) {
            self.request_done(d, out, stats);
        } else {
            self.reply_done(d, true, out, stats);
        }
    }
}

/// A text line with nothing after it.
const LINE: Header<Frame> = Header::Frame {
    body_len: 0,
    kind: Frame::Line,
    more: false,
};

impl Framer for MemcachedParser {
    type Kind = Frame;
    type State = ();
    /// The first byte says what follows: a binary header or a line.
    const MIN_HEADER: usize = 1;
    const FINISH_BODY_BEFORE_UNSEEN: bool = true;
    const TOUCH_UNSEEN: bool = true;

    fn streams(&mut self) -> &mut Streams<Frame, ()> {
        &mut self.streams
    }

    fn streams_ref(&self) -> &Streams<Frame, ()> {
        &self.streams
    }

    fn stopped(&self) -> bool {
        self.foreign
    }

    fn pending(&self) -> usize {
        self.pending.len()
    }

    /// A message's first byte (a listing reply's later lines are lines whatever they start
    /// with), or a whole binary header.
    #[inline]
    fn header(
        &mut self,
        d: usize,
        hdr: &[u8],
        out: &mut Vec<L7Call>,
        stats: &mut ParseStats,
    ) -> Header<Frame> {
        if hdr.len() < BIN_HEADER && self.dirs[d].msg.is_some() {
            return Header::Line { max: MAX_LINE };
        }
        self.message_start(d, hdr, out, stats)
    }

    #[inline]
    fn line(
        &mut self,
        d: usize,
        line: &[u8],
        out: &mut Vec<L7Call>,
        stats: &mut ParseStats,
    ) -> Header<Frame> {
        self.keep(d, line);
        let line = line.strip_suffix(b"\n").unwrap_or(line);
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        self.on_line(d, line, out, stats)
    }

    /// A line alone ends nothing (its message ended, if it did, when it was read).
    #[inline]
    fn frame_done(
        &mut self,
        d: usize,
        kind: Frame,
        body: &[u8],
        out: &mut Vec<L7Call>,
        stats: &mut ParseStats,
    ) {
        match kind {
            Frame::Line => {}
            Frame::Data => self.on_data_done(d, out, stats),
            Frame::Binary => self.on_bin_body(d, body, out, stats),
        }
    }

    fn resync(&self, d: usize, p: &[u8]) -> bool {
        // An open message takes everything; with none, a segment that starts like a message
        // resynchronises.
        self.dirs[d].msg.is_none()
            && match self.request_dir {
                Some(rd) if rd == d => looks_like_command(p),
                Some(_) => looks_like_reply(p) || p.first().is_some_and(|c| RESP_TYPES.contains(c)),
                None => looks_like_command(p) || looks_like_reply(p),
            }
    }

    fn still_lost(&mut self, d: usize, seg: &Segment, probed: u64, stats: &mut ParseStats) {
        if self.dirs[d].msg.is_some() {
            let seg_id = self.streams.seg_id;
            let acc = &mut self.streams.dirs[d].acc;
            acc.touch(seg_id, seg);
            acc.add(seg.total_len);
        } else {
            stats.skipped(seg.total_len.saturating_add(probed));
            self.distrust_pairing(stats);
        }
    }

    fn in_message(&self, d: usize) -> bool {
        self.dirs[d].msg.is_some()
    }

    fn lost(&mut self, d: usize, why: Loss, stats: &mut ParseStats) {
        match why {
            // The first byte of a reply that starts RESP: skipped with the rest.
            Loss::NotAFrame if self.foreign => stats.skipped(1),
            Loss::NotAFrame | Loss::Unseen => {
                self.damage_current(d, false, stats);
                self.distrust_pairing(stats);
            }
            // A gap outside a value may have hidden whole messages: what is in flight is
            // damaged and both directions resynchronise.
            Loss::Gap => {
                self.damage_current(d, true, stats);
                self.damage_current(1 - d, false, stats);
                framing::lose_sync(self, 1 - d, stats);
                self.distrust_pairing(stats);
            }
        }
    }

    /// Bytes beyond the snaplen where a line or binary header goes on or starts.
    fn header_unseen(
        &mut self,
        d: usize,
        seg: &Segment,
        n: u64,
        out: &mut Vec<L7Call>,
        stats: &mut ParseStats,
    ) -> bool {
        let partial = self.streams.dirs[d].header_bytes().to_vec();
        if self.dirs[d].msg.is_some() {
            // Its captured start is part of the head.
            self.keep(d, &partial);
        }
        let request = self.request_dir == Some(d);
        if !request {
            if let Some(&(op, opaque)) = self
                .pending
                .front()
                .filter(|q| q.parts.is_some())
                .and_then(|q| q.bin.as_ref())
            {
                // Between the responses of a binary `stat`, out of sight: they end where the
                // client shows it got them all (its next command), or at the close.
                let seg_id = self.streams.seg_id;
                let s = &mut self.streams.dirs[d];
                s.acc.touch(seg_id, seg);
                s.acc.add(n);
                s.acc.truncated = true;
                // Expected, not a loss of sync: no desync counted.
                s.st = St::Lost;
                s.clear(1);
                let m = self.dirs[d].msg.get_or_insert_with(Msg::new);
                m.reply = Some(("NO_ERROR".to_owned(), None));
                m.bin = Some(BinHeader {
                    magic: BIN_RESPONSE,
                    opcode: op,
                    key_len: 0,
                    extras_len: 0,
                    data_type: 0,
                    status: 0,
                    body_len: 0,
                    opaque,
                });
                return true;
            }
        }
        let Some(m) = self.dirs[d].msg.as_mut() else {
            // Unseen bytes where a message starts may hold whole messages.
            self.lose_place(d, stats);
            self.streams.dirs[d].acc = BytesSince::default();
            stats.skipped(n);
            self.distrust_pairing(stats);
            return true;
        };
        let acc = &mut self.streams.dirs[d].acc;
        acc.add(n);
        acc.truncated = true;
        // A text listing reply whose last block ended with exactly 5 bytes to go in the same
        // syscall: they can only be `END\r\n` (any other line and `END` is longer).
        if !request && partial.is_empty() && m.listing && n == 5 {
            self.reply_done(d, false, out, stats);
            return true;
        }
        // Framing went out of sight inside a message: it goes on until the other direction
        // shows where it ended, or the connection closes.
        let known = if request {
            if m.req.is_none() {
                // A command line cut: the words seen whole name it, if it is one that is always
                // answered (`noreply`, `q` may be among the words not seen).
                m.req = text_request(cut_line(&partial), self.depth)
                    .map(|(q, _)| q)
                    .filter(|q| q.listing || matches!(q.method.as_str(), "version" | "mn"));
            }
            m.req.is_some()
        } else {
            m.reply.is_some()
        };
        if !known {
            // Not even what it is was seen: which pending command it answers (or which reply
            // answers it) cannot be told.
            self.damage_current(d, false, stats);
            self.distrust_pairing(stats);
        }
        self.lose_place(d, stats);
        true
    }
}

/// `line` with a line end (for the detection helpers, which want one).
fn line_with_end(line: &[u8]) -> Vec<u8> {
    let mut v = Vec::with_capacity(line.len() + 2);
    v.extend_from_slice(&line[..line.len().min(MAX_NAME + 1)]);
    if v.len() == line.len() {
        v.extend_from_slice(b"\r\n");
    }
    v
}

/// The words of a line cut by the snaplen that were seen whole (the last may be cut).
fn cut_line(line: &[u8]) -> &[u8] {
    match line.iter().rposition(|&c| c == b' ') {
        Some(i) => &line[..i],
        None => &line[..0],
    }
}

/// Single-line replies that end a listing command's reply at once (`stats reset` → `RESET`).
fn is_single_line_reply(word: &[u8]) -> bool {
    !matches!(word, b"VALUE" | b"STAT" | b"ITEM" | b"END") && REPLY_WORDS.contains(&word)
}

impl StreamParser for MemcachedParser {
    fn on_segment(&mut self, seg: &Segment<'_>, out: &mut Vec<L7Call>, stats: &mut ParseStats) {
        framing::on_segment(self, seg, out, stats);
    }

    fn on_gap(&mut self, dir: Direction, len: Option<u64>, stats: &mut ParseStats) {
        framing::on_gap(self, dir, len, stats);
    }

    fn on_close(&mut self, out: &mut Vec<L7Call>, stats: &mut ParseStats) {
        if !self.foreign {
            for d in 0..2 {
                let open = self.is_open(d);
                if open && !self.is_request_dir(d) {
                    self.finish_open(d, out, stats);
                } else if open {
                    // A command never answered.
                    stats.unanswered_requests += 1;
                    self.dirs[d].msg = None;
                } else if self.dirs[d].msg.as_ref().is_some_and(|m| m.held.is_some()) {
                    // Answered before it was all sent: the call has what was seen (the kept
                    // start of a binary body too).
                    let body = std::mem::take(&mut self.streams.dirs[d].body);
                    self.keep(d, &body);
                    self.request_done(d, out, stats);
                } else {
                    self.damage_current(d, false, stats);
                }
            }
        }
        for q in self.pending.drain() {
            if q.answer == Answer::Always {
                stats.unanswered_requests += 1;
            } else {
                stats.unreplied_requests += 1;
            }
        }
    }
}

#[cfg(test)]
mod fixture_tests;
#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocols::test_driver::stream_config;
    use crate::segfile::SegFile;

    const OUT: Direction = Direction::Egress;
    const IN: Direction = Direction::Ingress;

    /// Drives a parser with a fake clock (1 µs per syscall).
    type Driver = crate::protocols::test_driver::Driver<MemcachedParser>;

    impl Driver {
        fn new() -> Self {
            Driver::with(0)
        }
        fn with(keep_head: usize) -> Self {
            Driver::with_parser(MemcachedParser::new(&stream_config(keep_head)))
        }
        fn play(&mut self, f: &SegFile) -> &mut Self {
            for e in &f.entries {
                let dir = crate::segfile::seg_direction(f, e.to_server);
                self.seg_cut(dir, &e.bytes, e.total_len);
            }
            self
        }
        /// (method, resource, status text) of each call.
        fn summary(&self) -> Vec<(String, String, Option<String>)> {
            self.calls
                .iter()
                .map(|c| (c.method.clone(), c.resource.clone(), c.status_text.clone()))
                .collect()
        }
        fn bytes(&self) -> u64 {
            self.calls.iter().map(|c| c.req.bytes + c.resp.bytes).sum()
        }
    }

    fn load(name: &str) -> SegFile {
        let path = format!(
            "{}/src/protocols/memcached/fixtures/{name}",
            env!("CARGO_MANIFEST_DIR")
        );
        SegFile::parse(&std::fs::read(&path).unwrap()).unwrap_or_else(|e| panic!("{path}: {e}"))
    }

    fn as_want(got: &[(String, String, Option<String>)]) -> Vec<(&str, &str, Option<&str>)> {
        got.iter()
            .map(|(m, r, s)| (m.as_str(), r.as_str(), s.as_deref()))
            .collect()
    }

    type Want = (&'static str, &'static str, Option<&'static str>);

    const TEXT_CALLS: &[Want] = &[
        ("set", "user:1", None),
        ("set", "user:2", None),
        ("add", "user:1", None),
        ("replace", "missing:1", None),
        ("append", "user:1", None),
        ("prepend", "user:1", None),
        ("gets", "user:1", None),
        ("cas", "user:1", None),
        ("cas", "missing:9", None),
        ("cas", "user:1", None),
        ("get", "user:1", None),
        ("get", "missing:2", None),
        ("delete", "user:2", None),
        ("delete", "user:2", None),
        ("incr", "counter:1", None),
        ("set", "counter:1", None),
        ("incr", "counter:1", None),
        ("decr", "counter:1", None),
        ("incr", "user:1", Some("CLIENT_ERROR")),
        ("touch", "user:1", None),
        ("gat", "user:1", None),
        ("set", "large:1", None),
        ("get", "large:1", None),
        ("bogus_command", "", Some("ERROR")),
        ("version", "", None),
        ("verbosity", "", None),
        ("stats", "", None),
    ];

    const META_CALLS: &[Want] = &[
        ("ms", "user:10", None),
        ("mg", "user:10", None),
        ("mg", "missing:10", None),
        ("mg", "user:10", None),
        ("mn", "", None),
        ("md", "missing:12", None),
        ("mn", "", None),
        ("ms", "counter:10", None),
        ("ma", "counter:10", None),
        ("ma", "counter:10", None),
        ("ma", "missing:13", None),
        ("ms", "user:12", Some("CLIENT_ERROR")),
        ("md", "user:10", None),
        ("mn", "", None),
    ];

    const BINARY_CALLS: &[Want] = &[
        ("get", "bin:1", None),
        ("set", "bin:1", None),
        ("get", "bin:1", None),
        ("add", "bin:1", None),
        ("getkq", "bin:1", None),
        ("noop", "", None),
        ("noop", "", None),
        ("incr", "bin:1", Some("DELTA_BADVAL")),
        ("set", "big:1", Some("E2BIG")),
        ("delete", "bin:1", None),
        ("version", "", None),
        ("stat", "", None),
        ("quit", "", None),
    ];

    /// Every fixture: (file, calls, unreplied requests).
    const FIXTURES: &[(&str, &[Want], u64)] = &[
        ("text.client.seg", TEXT_CALLS, 3),
        ("text.server.seg", TEXT_CALLS, 3),
        ("meta.client.seg", META_CALLS, 2),
        ("meta.server.seg", META_CALLS, 2),
        ("binary.client.seg", BINARY_CALLS, 3),
        ("binary.server.seg", BINARY_CALLS, 3),
    ];

    fn clean(s: &ParseStats) {
        assert_eq!(s.damaged_messages, 0, "{s:?}");
        assert_eq!(s.desyncs, 0, "{s:?}");
        assert_eq!(s.unmatched_responses, 0, "{s:?}");
        assert_eq!(s.unanswered_requests, 0, "{s:?}");
        assert_eq!(s.unparsed_bytes, 0, "{s:?}");
    }

    #[test]
    fn fixtures_give_their_calls_on_both_sides() {
        for &(name, want, unreplied) in FIXTURES {
            let f = load(name);
            let mut d = Driver::new();
            d.play(&f).close();
            assert_eq!(as_want(&d.summary()), want, "{name}");
            assert_eq!(d.stats.unreplied_requests, unreplied, "{name}");
            clean(&d.stats);
            let moved: u64 = f.entries.iter().map(|e| e.total_len).sum();
            // Every byte is in a call but those of commands without a reply.
            assert!(d.bytes() <= moved, "{name}");
            let version = if name.starts_with("meta") {
                "meta"
            } else if name.starts_with("binary") {
                "binary"
            } else {
                "text"
            };
            assert!(d.calls.iter().all(|c| c.version == version), "{name}");
        }
    }

    #[test]
    fn text_details_hits_misses_keys_and_errors() {
        let mut d = Driver::new();
        d.play(&load("text.client.seg"));
        let at = |m: &str, r: &str| {
            d.summary()
                .iter()
                .position(|(mm, rr, _)| mm == m && rr == r)
                .unwrap()
        };
        let get3 = at("get", "user:1");
        assert_eq!(d.detail(get3, "keys"), Some("3"));
        assert_eq!(d.detail(get3, "hits"), Some("2"));
        assert_eq!(d.detail(get3, "misses"), Some("1"));
        let gat = at("gat", "user:1");
        assert_eq!(
            (d.detail(gat, "hits"), d.detail(gat, "misses")),
            (Some("1"), Some("1"))
        );
        let miss = at("get", "missing:2");
        assert_eq!(d.detail(miss, "reply"), Some("END"));
        assert_eq!(d.detail(miss, "misses"), Some("1"));
        assert_eq!(d.detail(at("add", "user:1"), "reply"), Some("NOT_STORED"));
        assert_eq!(d.detail(at("cas", "missing:9"), "reply"), Some("NOT_FOUND"));
        assert_eq!(d.detail(at("decr", "counter:1"), "reply"), Some("number"));
        let err = at("incr", "user:1");
        assert_eq!(d.calls[err].outcome, Outcome::ClientError);
        assert!(d.detail(err, "error").unwrap().contains("non-numeric"));
        assert_eq!(
            d.calls[at("bogus_command", "")].outcome,
            Outcome::ServerError
        );
        // The 10000-byte value: framed by count beyond the 4096-byte capture, sizes exact.
        let big = &d.calls[at("get", "large:1")];
        assert!(big.truncated && !big.end_inferred);
        assert_eq!(
            big.resp.bytes,
            "VALUE large:1 0 10000\r\n".len() as u64 + 10002 + 5
        );
        let set = &d.calls[at("set", "large:1")];
        assert_eq!(
            set.req.bytes,
            "set large:1 0 0 10000\r\n".len() as u64 + 10002
        );
    }

    #[test]
    fn binary_statuses_misses_and_quiet_commands() {
        let mut d = Driver::new();
        d.play(&load("binary.client.seg"));
        let s = d.summary();
        let first_get = s.iter().position(|c| c.0 == "get").unwrap();
        assert_eq!(d.calls[first_get].outcome, Outcome::Ok);
        assert_eq!(d.detail(first_get, "reply"), Some("KEY_ENOENT"));
        assert_eq!(d.detail(first_get, "misses"), Some("1"));
        assert_eq!(d.detail(first_get + 2, "hits"), Some("1"));
        assert_eq!(d.detail(3, "reply"), Some("KEY_EEXISTS"));
        let e2big = s
            .iter()
            .position(|c| c.2.as_deref() == Some("E2BIG"))
            .unwrap();
        assert_eq!(d.calls[e2big].outcome, Outcome::ServerError);
        assert_eq!(d.calls[e2big].req.bytes, 24 + 8 + 5 + (2 << 20));
        let badval = s
            .iter()
            .position(|c| c.2.as_deref() == Some("DELTA_BADVAL"))
            .unwrap();
        assert_eq!(d.calls[badval].outcome, Outcome::ClientError);
        // stat: one call for all its responses.
        let stat = s.iter().position(|c| c.0 == "stat").unwrap();
        assert!(d.calls[stat].resp.bytes > 24 * 20);
    }

    #[test]
    fn split_at_every_byte_and_merged_the_calls_are_the_same() {
        for &(name, want, unreplied) in FIXTURES {
            let f = load(name);
            let mut whole = Driver::new();
            whole.play(&f).close();
            // One byte per segment (the snaplen cut stays on the last piece).
            let mut bytewise = Driver::new();
            for e in &f.entries {
                let dir = crate::segfile::seg_direction(&f, e.to_server);
                let n = e.bytes.len();
                for i in 0..n {
                    let extra = if i + 1 == n {
                        e.total_len - n as u64
                    } else {
                        0
                    };
                    bytewise.seg_cut(dir, &e.bytes[i..=i], 1 + extra);
                }
                if n == 0 {
                    bytewise.seg_cut(dir, &[], e.total_len);
                }
            }
            bytewise.close();
            assert_eq!(as_want(&bytewise.summary()), want, "{name} byte by byte");
            assert_eq!(bytewise.bytes(), whole.bytes(), "{name}");
            assert_eq!(bytewise.stats.unreplied_requests, unreplied, "{name}");
            clean(&bytewise.stats);
            // Consecutive segments of one direction merged into one (fully captured ones).
            let mut merged = Driver::new();
            let mut i = 0;
            while i < f.entries.len() {
                let e = &f.entries[i];
                let mut buf = e.bytes.clone();
                let mut total = e.total_len;
                while total == buf.len() as u64
                    && f.entries
                        .get(i + 1)
                        .is_some_and(|n| n.to_server == e.to_server)
                {
                    i += 1;
                    buf.extend_from_slice(&f.entries[i].bytes);
                    total += f.entries[i].total_len;
                }
                let dir = crate::segfile::seg_direction(&f, e.to_server);
                merged.seg_cut(dir, &buf, total);
                i += 1;
            }
            merged.close();
            assert_eq!(as_want(&merged.summary()), want, "{name} merged");
            assert_eq!(merged.bytes(), whole.bytes(), "{name} merged");
        }
    }

    #[test]
    fn pipelined_commands_in_one_write_pair_in_order() {
        let mut d = Driver::new();
        d.seg(
            OUT,
            b"get a:1\r\nset b:2 0 0 3\r\nxyz\r\nincr c:3 1\r\nmg d:4 v\r\n",
        )
        .seg(
            IN,
            b"VALUE a:1 0 1\r\nA\r\nEND\r\nSTORED\r\nNOT_FOUND\r\nEN\r\n",
        )
        .close();
        assert_eq!(
            as_want(&d.summary()),
            [
                ("get", "a:1", None),
                ("set", "b:2", None),
                ("incr", "c:3", None),
                ("mg", "d:4", None)
            ]
        );
        assert_eq!(d.detail(3, "misses"), Some("1"));
        clean(&d.stats);
    }

    #[test]
    fn noreply_error_still_answers_its_command() {
        // An error with nothing else waiting: the noreply command's (a line memcached could
        // not parse may get one).
        let mut d = Driver::new();
        d.seg(OUT, b"set a 0 0 1\r\nx\r\n")
            .seg(IN, b"STORED\r\n")
            .seg(OUT, b"incr a 1 noreply\r\n")
            .seg(
                IN,
                b"CLIENT_ERROR cannot increment or decrement non-numeric value\r\n",
            )
            .seg(OUT, b"get a\r\n")
            .seg(IN, b"VALUE a 0 1\r\nx\r\nEND\r\n")
            .close();
        assert_eq!(
            as_want(&d.summary()),
            [
                ("set", "a", None),
                ("incr", "a", Some("CLIENT_ERROR")),
                ("get", "a", None)
            ]
        );
        assert_eq!(d.stats.unreplied_requests, 0);
        clean(&d.stats);
        // memcached 1.6's own answers (recorded from it): `set q … noreply` is silent, the
        // error is the `incr` behind it (`a` holds no number), the `get` gets its value.
        let mut d = Driver::new();
        d.seg(OUT, b"set q 0 0 1 noreply\r\nx\r\nincr a 1\r\nget q\r\n")
            .seg(
                IN,
                b"CLIENT_ERROR cannot increment or decrement non-numeric value\r\n\
                  VALUE q 0 1\r\nx\r\nEND\r\n",
            )
            .close();
        assert_eq!(
            as_want(&d.summary()),
            [("incr", "a", Some("CLIENT_ERROR")), ("get", "q", None)]
        );
        assert_eq!(d.stats.unreplied_requests, 1, "the silent set");
        clean(&d.stats);
        // A noreply command that succeeded: silence, until the next reply shows it.
        let mut d = Driver::new();
        d.seg(OUT, b"delete a noreply\r\nget a\r\n")
            .seg(IN, b"END\r\n")
            .close();
        assert_eq!(as_want(&d.summary()), [("get", "a", None)]);
        assert_eq!(d.stats.unreplied_requests, 1);
        clean(&d.stats);
    }

    #[test]
    fn redis_inline_commands_are_released_not_parsed() {
        let mut d = Driver::new();
        d.seg(OUT, b"get foo\r\n")
            .seg(IN, b"$3\r\nbar\r\n")
            .seg(OUT, b"set foo 0 0 1\r\nx\r\n")
            .seg(IN, b"STORED\r\n")
            .close();
        assert!(d.calls.is_empty());
        assert_eq!(d.stats.desyncs, 1);
        assert_eq!(d.stats.unanswered_requests, 0);
        let mut d = Driver::new();
        d.seg(OUT, b"set foo bar\r\n").seg(IN, b"+OK\r\n").close();
        assert!(d.calls.is_empty());
    }

    #[test]
    fn gaps_inside_values_only_skip_and_others_resync() {
        let mut d = Driver::new();
        d.seg(OUT, b"set k:1 0 0 100\r\n")
            .seg(OUT, &[b'v'; 10])
            .gap(OUT, Some(50))
            .seg(OUT, &[b'v'; 40])
            .seg(OUT, b"\r\n")
            .seg(IN, b"STORED\r\n");
        assert_eq!(as_want(&d.summary()), [("set", "k:1", None)]);
        assert_eq!(d.calls[0].req.bytes, 17 + 102);
        assert!(d.calls[0].truncated);
        // An unknown loss: the call in flight is damaged, the stream resyncs at a command.
        d.seg(OUT, b"get k:2\r\n")
            .gap(IN, None)
            .seg(IN, &[b'z'; 30])
            .seg(OUT, b"get k:3\r\n")
            .seg(IN, b"END\r\n")
            .close();
        assert_eq!(
            as_want(&d.summary()),
            [("set", "k:1", None), ("get", "k:3", None)]
        );
        assert!(d.stats.damaged_messages >= 1 && d.stats.desyncs >= 1);
    }

    #[test]
    fn garbage_never_panics_and_resyncs() {
        let mut rng = crate::xorshift::XorShift(0x3e3c_ac4e);
        for _ in 0..300 {
            let mut d = Driver::with(64);
            for _ in 0..20 {
                let len = (rng.next() % 40) as usize;
                let bytes: Vec<u8> = (0..len).map(|_| rng.next() as u8).collect();
                let dir = if rng.next().is_multiple_of(2) {
                    OUT
                } else {
                    IN
                };
                match rng.next() % 6 {
                    0 => d.gap(dir, Some(rng.next() % 100)),
                    1 => d.seg_cut(dir, &bytes, len as u64 + rng.next() % 5000),
                    _ => d.seg(dir, &bytes),
                };
            }
            d.close();
        }
        // Garbage, then a clean exchange.
        let mut d = Driver::new();
        d.seg(OUT, b"get a\r\n").seg(IN, b"\x00\x01\xffjunk\r\n");
        d.seg(OUT, b"get b\r\n").seg(IN, b"END\r\n").close();
        assert_eq!(as_want(&d.summary()), [("get", "b", None)]);
        assert!(d.stats.desyncs >= 1);
    }

    #[test]
    fn heads_show_lines_never_values() {
        let mut d = Driver::with(512);
        d.seg(OUT, b"set user:1 0 0 6\r\nsecret\r\n")
            .seg(IN, b"STORED\r\n")
            .seg(OUT, b"get user:1\r\n")
            .seg(IN, b"VALUE user:1 0 6\r\nsecret\r\nEND\r\n");
        for c in &d.calls {
            for h in [&c.req_head.bytes, &c.resp_head.bytes] {
                let text = String::from_utf8_lossy(h);
                assert!(!text.contains("secret"), "{text}");
            }
        }
        assert_eq!(
            d.calls[1].resp_head.bytes,
            b"VALUE user:1 0 6\r\n[value, 6 bytes]\r\nEND\r\n"
        );
    }

    #[test]
    fn detects_commands_not_replies_nor_other_protocols() {
        for yes in [
            &b"get user:1 user:2\r\n"[..],
            b"set k 0 0 5\r\nhello\r\n",
            b"mg user:1 v t\r\n",
            b"mn\r\n",
            b"stats\r\n",
            b"lru_crawler metadump all\r\n",
            b"version\r\n",
            b"\x80\x00\x00\x05\x00\x00\x00\x00\x00\x00\x00\x05\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00hello",
        ] {
            assert!(is_connection_start(yes), "{:?}", String::from_utf8_lossy(yes));
        }
        for no in [
            &b"GET / HTTP/1.1\r\n"[..],
            b"get",
            b"get \x01\x02\r\n",
            b"set k x 0 5\r\n",
            b"VALUE k 0 5\r\nhello\r\nEND\r\n",
            b"STORED\r\n",
            b"*1\r\n$4\r\nPING\r\n",
            b"PING\r\n",
            b"\x81\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00",
            b"\x80\x00\x00\x05",
        ] {
            assert!(!is_connection_start(no), "{:?}", String::from_utf8_lossy(no));
        }
    }

    /// A pipeline ten times the connection's depth pairs exactly (the deeper requests draw
    /// on the shared budget, issue 43 item 2): each get its own key's reply.
    #[test]
    fn a_pipeline_ten_times_the_depth_pairs_exactly() {
        let mut d = Driver::new();
        let n = MAX_PENDING * 10;
        let reqs: Vec<u8> = (0..n)
            .flat_map(|i| format!("get k{i}\r\n").into_bytes())
            .collect();
        for chunk in reqs.chunks(4000) {
            d.seg(OUT, chunk);
        }
        // Odd keys hit (their value names the key), even ones miss.
        let replies: Vec<u8> = (0..n)
            .flat_map(|i| {
                let v = format!("k{i}");
                if i % 2 == 1 {
                    format!("VALUE k{i} 0 {}\r\n{v}\r\nEND\r\n", v.len()).into_bytes()
                } else {
                    b"END\r\n".to_vec()
                }
            })
            .collect();
        for chunk in replies.chunks(9000) {
            d.seg(IN, chunk);
        }
        assert_eq!(d.calls.len(), n);
        for (i, c) in d.calls.iter().enumerate() {
            assert_eq!(c.resource, format!("k{i}"));
            let hits = c
                .details
                .iter()
                .find(|(k, _)| *k == "hits")
                .map(|x| x.1.as_str());
            assert_eq!(hits, Some(if i % 2 == 1 { "1" } else { "0" }), "k{i}");
        }
        assert_eq!(d.stats.pending_dropped, 0);
    }

    /// Depth and budget spent: the oldest requests are dropped (counted) and their replies,
    /// which come first, pair with no other request; a dropped request that may go
    /// unanswered leaves the connection's replies unpaired from then on, never guessed.
    #[test]
    fn dropped_requests_replies_pair_with_no_other_request() {
        static NO_BUDGET: crate::protocols::matching::SharedBudget =
            crate::protocols::matching::SharedBudget::new(0);
        let mut d = Driver::new();
        d.p.pending = InOrder::with_budget(4, &NO_BUDGET);
        for i in 0..10 {
            d.seg(OUT, format!("incr n{i} 1\r\n").as_bytes());
        }
        for i in 0..10 {
            d.seg(IN, format!("{}\r\n", 100 + i).as_bytes());
        }
        let got: Vec<_> = d.calls.iter().map(|c| c.resource.clone()).collect();
        assert_eq!(got, ["n6", "n7", "n8", "n9"]);
        assert_eq!(d.stats.pending_dropped, 6);
        let mut d = Driver::new();
        d.p.pending = InOrder::with_budget(2, &NO_BUDGET);
        d.seg(OUT, b"mg q0 v q\r\n");
        for i in 1..5 {
            d.seg(OUT, format!("incr n{i} 1\r\n").as_bytes());
        }
        for i in 1..5 {
            d.seg(IN, format!("{i}\r\n").as_bytes());
        }
        assert!(d.calls.is_empty(), "{:?}", d.summary());
        assert_eq!(d.stats.pending_dropped, 3);
    }
}
