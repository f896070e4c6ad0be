//! MySQL / MariaDB: the client/server protocol (4.1 and later) over a byte stream.
//!
//! Framing: every packet is a 3-byte little-endian payload length and a 1-byte sequence id; a
//! payload of 0xffffff bytes continues in the next packet (one logical message). Bodies are kept
//! up to a prefix ([`KEEP_CLIENT`], [`KEEP_SERVER`]); the rest, and anything beyond the snaplen,
//! is skipped by count, so a result set of any size goes through with flat memory (the framing
//! core, [`super::framing`], does it: this parser is its [`Framer`]).
//!
//! Handshake and authentication make no call and nothing of them is kept beyond the
//! capability flags: the server's greeting (protocol 10), the client's HandshakeResponse, auth
//! switches and more-data packets, until the server's OK or ERR. An SSLRequest (a 32-byte
//! HandshakeResponse with CLIENT_SSL) means the rest is TLS, and a negotiated CLIENT_COMPRESS
//! (or zstd) means the rest is compressed packets: either stops parsing, counted once in
//! [`ParseStats::desyncs`] and every byte from then on in `unparsed_bytes`.
//!
//! Calls: one per command packet (sequence id 0) that gets a response.
//! - `COM_QUERY`: `method` the SQL's first keyword upper case, `resource` the SQL (cut at
//!   [`MAX_SQL`] bytes). A multi-statement query or a `CALL` answers with several results
//!   (each but the last flags SERVER_MORE_RESULTS_EXISTS): one call for all of them, `rows`
//!   summed, `result_sets` counted.
//! - `COM_STMT_PREPARE`: a call of its own (`method` `PREPARE`, `resource` the SQL); its OK
//!   names the statement id, remembered per connection (at most [`MAX_STATEMENTS`]: the oldest
//!   id is forgotten first) until `COM_STMT_CLOSE`.
//! - `COM_STMT_EXECUTE`: shown with its statement's SQL (`EXECUTE <id>` when it was prepared
//!   out of sight); parameters are never kept. Statement id 0xFFFFFFFF (MariaDB's pipelines:
//!   Connector/J sends a prepare and its executes before any answer) is the statement the
//!   connection's last `COM_STMT_PREPARE` prepared, named by that request's SQL. `COM_STMT_FETCH`, `COM_STMT_RESET`: the
//!   statement's SQL, method `STMT_FETCH`, `STMT_RESET`.
//! - No response, no call (counted in [`ParseStats::unreplied_requests`]): `COM_STMT_CLOSE`,
//!   `COM_STMT_SEND_LONG_DATA`, `COM_QUIT`.
//! - Other commands by name (`PING`, `INIT_DB` with the database as resource, `FIELD_LIST`
//!   with the table, `STATISTICS`, `CHANGE_USER`, …).
//! - Errors: `status_text` is the error code and SQLSTATE as the mysql client prints them,
//!   `1062 (23000)`; the outcome follows the SQLSTATE class as for PostgreSQL, and the general
//!   class `HY` is the server's.
//!
//! Result sets: column count (with MariaDB's metadata cache, a byte after it says whether
//! column definitions follow), the definitions, an EOF unless CLIENT_DEPRECATE_EOF, rows (text
//! or binary), and an EOF or OK (header 0xFE) or ERR at the end. Whether EOFs are deprecated is
//! learned from the handshake; without it, from the packets: a 0xFE packet shorter than
//! 0xffffff bytes ends a row run, and one of exactly 5 bytes is an EOF (an OK is at least 7).
//!
//! Pairing is in order. A connection picked up mid-stream syncs at the next command packet
//! (sequence id 0, a known command, a plausible length) and the server at the first packet
//! after it with sequence id 1.

use std::collections::BTreeMap;

use super::framing::{self, Framer, Header, Loss, St, Streams};
use super::matching::InOrder;
use super::postgres::{lossy, sql_keyword};
use super::{
    BenchFixture, BytesSince, CallKind, CapturedHead, L7Call, MessageSpan, Outcome, ParseDepth,
    ParseStats, ParserConfig, Protocol, ProtocolDescriptor, ResourceKind, Segment, StreamParser,
};
use crate::event::Direction;

/// The protocol's entry in [`super::REGISTRY`].
pub const DESCRIPTOR: ProtocolDescriptor = ProtocolDescriptor {
    folder: "mysql",
    title: "MySQL",
    calls: &[CallKind {
        proto: Protocol::Mysql,
        name: "mysql",
        resource: ResourceKind::Sql,
        metrics: super::MetricNames::database("mysql"),
    }],
    kernel_id: Some(6),
    datagrams: false,
    copy_whole: true,
    detect: is_connection_start,
    new_parser: |cfg| Box::new(MysqlParser::new(cfg)),
    benches: &[BenchFixture {
        file: "perl_prepared.seg",
        what: "parse DBD::MariaDB prepared statements",
        proto: Protocol::Mysql,
        calls: 17,
    }],
};

/// Commands waiting for the server on one connection before it draws on the shared budget
/// (`matching::SHARED_PENDING_BYTES`).
const MAX_PENDING: usize = 1024;
/// Longest SQL text kept as a resource.
pub const MAX_SQL: usize = 4096;
/// Bytes of a client message kept for parsing (the command byte and the SQL).
const KEEP_CLIENT: usize = MAX_SQL + 16;
/// Bytes of a server message kept: enough for an OK, an ERR's message, a greeting.
const KEEP_SERVER: usize = 512;
/// Bytes of the client's HandshakeResponse kept: the capability flags, nothing of the login.
const KEEP_HANDSHAKE: usize = 4;
/// Prepared statements remembered per connection (beyond: the oldest ids are forgotten).
const MAX_STATEMENTS: usize = 1024;
const MAX_ERROR_DETAIL: usize = 256;
/// Bytes a direction's first segment needs to be judged (shorter ones wait for the next).
const PROBE_LEN: usize = 8;
/// A packet of this payload length continues in the next one.
const MAX_PACKET: u32 = 0xff_ffff;

const CLIENT_COMPRESS: u32 = 0x20;
const CLIENT_PROTOCOL_41: u32 = 0x200;
const CLIENT_SSL: u32 = 0x800;
const CLIENT_DEPRECATE_EOF: u32 = 1 << 24;
const CLIENT_ZSTD_COMPRESSION: u32 = 1 << 26;
const SERVER_MORE_RESULTS_EXISTS: u16 = 0x0008;
/// The length of an SSLRequest: a HandshakeResponse cut after its fixed part.
const SSL_REQUEST_LEN: u64 = 32;
/// MariaDB's progress report travels as an ERR with this code; it is no error.
const PROGRESS_REPORT: u16 = 0xffff;

const COM_QUIT: u8 = 0x01;
const COM_INIT_DB: u8 = 0x02;
const COM_QUERY: u8 = 0x03;
const COM_FIELD_LIST: u8 = 0x04;
const COM_STATISTICS: u8 = 0x09;
const COM_PROCESS_INFO: u8 = 0x0a;
const COM_PING: u8 = 0x0e;
const COM_CHANGE_USER: u8 = 0x11;
const COM_BINLOG_DUMP: u8 = 0x12;
const COM_STMT_PREPARE: u8 = 0x16;
const COM_STMT_EXECUTE: u8 = 0x17;
/// The statement id MariaDB reads as "the statement this connection prepared last" (sent by
/// pipelining clients before the prepare's answer names the real id).
const LAST_PREPARED: u32 = u32::MAX;
const COM_STMT_SEND_LONG_DATA: u8 = 0x18;
const COM_STMT_CLOSE: u8 = 0x19;
const COM_STMT_RESET: u8 = 0x1a;
const COM_STMT_FETCH: u8 = 0x1c;
const COM_BINLOG_DUMP_GTID: u8 = 0x1e;

/// A command's name (method and `command` detail), for the commands a client sends.
fn command_name(cmd: u8) -> Option<&'static str> {
    Some(match cmd {
        0x01 => "QUIT",
        0x02 => "INIT_DB",
        0x03 => "QUERY",
        0x04 => "FIELD_LIST",
        0x05 => "CREATE_DB",
        0x06 => "DROP_DB",
        0x07 => "REFRESH",
        0x08 => "SHUTDOWN",
        0x09 => "STATISTICS",
        0x0a => "PROCESS_INFO",
        0x0c => "PROCESS_KILL",
        0x0d => "DEBUG",
        0x0e => "PING",
        0x11 => "CHANGE_USER",
        0x12 => "BINLOG_DUMP",
        0x15 => "REGISTER_SLAVE",
        0x16 => "STMT_PREPARE",
        0x17 => "STMT_EXECUTE",
        0x18 => "STMT_SEND_LONG_DATA",
        0x19 => "STMT_CLOSE",
        0x1a => "STMT_RESET",
        0x1b => "SET_OPTION",
        0x1c => "STMT_FETCH",
        0x1e => "BINLOG_DUMP_GTID",
        0x1f => "RESET_CONNECTION",
        _ => return None,
    })
}

fn le16(b: &[u8], at: usize) -> Option<u16> {
    Some(u16::from_le_bytes(b.get(at..at + 2)?.try_into().ok()?))
}

fn le32(b: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_le_bytes(b.get(at..at + 4)?.try_into().ok()?))
}

fn le24(b: &[u8]) -> u32 {
    u32::from(b[0]) | u32::from(b[1]) << 8 | u32::from(b[2]) << 16
}

/// A length-encoded integer at `*at`, advancing past it (None: NULL, 0xff, or cut).
fn lenenc(b: &[u8], at: &mut usize) -> Option<u64> {
    let first = *b.get(*at)?;
    let width = match first {
        0..=0xfa => {
            *at += 1;
            return Some(u64::from(first));
        }
        0xfc => 2,
        0xfd => 3,
        0xfe => 8,
        _ => return None,
    };
    let bytes = b.get(*at + 1..*at + 1 + width)?;
    *at += 1 + width;
    Some(bytes.iter().rev().fold(0, |v, &x| v << 8 | u64::from(x)))
}

/// Does `text` (a COM_QUERY's or COM_STMT_PREPARE's) start like SQL: a keyword of two letters
/// or more, a parenthesis or a comment, printable as far as it goes?
fn sql_start(text: &[u8]) -> bool {
    let t = text.trim_ascii_start();
    let head = &t[..t.len().min(16)];
    let printable = head
        .iter()
        .all(|&c| c >= 0x20 && c != 0x7f || matches!(c, b'\t' | b'\r' | b'\n'));
    let starts = match t {
        [a, b, ..] if a.is_ascii_alphabetic() => b.is_ascii_alphabetic(),
        [b'(', ..] => true,
        [b'/', b'*', ..] => true,
        _ => false,
    };
    printable && starts
}

/// Does `p` (the start of a segment) begin with a client's command packet: sequence id 0, a
/// command ebtop knows with a body of plausible size, whole in `p` or cut by it?
fn plausible_command(p: &[u8], strict: bool) -> bool {
    if p.len() < 5 || p[3] != 0 {
        return false;
    }
    let len = le24(p) as usize;
    let body = &p[4..p.len().min(4 + len)];
    let whole = p.len() == len + 4;
    // Cut by the capture (snaplen, or a first read's length): only commands that can be long.
    let cut = p.len() >= 16 && p.len() < len + 4;
    // Pipelined: another command's header follows.
    let more = !strict && p.len() >= len + 4 + 5 && p[len + 4 + 3] == 0;
    if len == 0 || !(whole || cut || more) {
        return false;
    }
    match p[4] {
        COM_QUERY | COM_STMT_PREPARE => len >= 3 && sql_start(&body[1..]),
        COM_PING => len == 1,
        COM_INIT_DB => {
            whole
                && (2..=65).contains(&len)
                && body[1..]
                    .iter()
                    .all(|&c| c.is_ascii_alphanumeric() || c == b'_' || c == b'$')
        }
        // A statement prepared before ebtop started (a pool's connection): the iteration
        // count, always 1, makes it certain enough to start with.
        COM_STMT_EXECUTE => {
            len >= 10
                && body.get(5).is_some_and(|&f| f <= 0x0f)
                && (!strict || body.get(6..10) == Some(&[1, 0, 0, 0][..]))
        }
        _ if strict => false,
        COM_QUIT | COM_STATISTICS => len == 1,
        COM_STMT_CLOSE | COM_STMT_RESET => len == 5,
        COM_STMT_FETCH => len == 9,
        COM_FIELD_LIST => body.len() > 2 && body[1].is_ascii_graphic(),
        _ => false,
    }
}

/// Does `p`, the first bytes of a connection in some direction, start MySQL: the server's
/// greeting (protocol 10, a printable version string starting with a digit, NUL-terminated),
/// or a client's command (`COM_QUERY` or `COM_STMT_PREPARE` with SQL that starts with a word,
/// a parenthesis or a comment, `COM_PING`, `COM_INIT_DB`, `COM_STMT_EXECUTE` of one
/// iteration) whose length matches? Or a server's answer that leaves no doubt: a result set's
/// start (its column count, then the first column definition with catalog `def`) or an ERR
/// with its SQLSTATE. A server reads a command's 4-byte header apart from its body (libmariadb,
/// libmysqlclient), so on a connection open before ebtop started its side is recognised by
/// what it sends; the parser starts pairing at the next command.
pub fn is_connection_start(p: &[u8]) -> bool {
    is_greeting(p, true) || plausible_command(p, true) || is_result_start(p)
}

/// The start of a server's reply to a command (sequence id 1): a column count (1–250; MariaDB:
/// and a byte 1) followed by a column definition packet (sequence id 2) whose catalog is `def`,
/// or an ERR (0xFF, a code, `#` and a 5-character SQLSTATE).
fn is_result_start(p: &[u8]) -> bool {
    if p.len() < 13 || p[3] != 1 {
        return false;
    }
    let len = le24(p);
    match p[4] {
        0xff => {
            (9..=4096).contains(&len)
                && p[7] == b'#'
                && p[8..13].iter().all(|c| c.is_ascii_alphanumeric())
        }
        // MariaDB adds a byte to the count (1: the definitions follow, metadata caching).
        1..=250 if len == 1 || (len == 2 && p[5] == 1) => {
            let def = 4 + len as usize;
            p.len() >= def + 8
                && p[def + 3] == 2
                && le24(&p[def..]) >= 20
                && p[def + 4..def + 8] == *b"\x03def"
        }
        _ => false,
    }
}

/// `strict`: the version string ends in `p` or is long (recognition); else its start will do.
fn is_greeting(p: &[u8], strict: bool) -> bool {
    if p.len() < 8 || p[3] != 0 || p[4] != 10 {
        return false;
    }
    let len = le24(p) as usize;
    if !(20..=1024).contains(&len) || p.len() > len + 4 {
        return false;
    }
    let version = &p[5..];
    let end = version.iter().position(|&c| c == 0);
    let text = &version[..end.unwrap_or(version.len())];
    version[0].is_ascii_digit()
        && text.iter().all(|c| (0x20..0x7f).contains(c))
        && (1..=64).contains(&text.len())
        && (end.is_some() || text.len() >= 8 || !strict)
}

/// Could `p` (a segment's start) begin the server's response to a command: sequence id 1, a
/// first byte that starts a response (OK, ERR, LOCAL INFILE, a column count), and after it
/// the segment's end or the next packet of the same response?
fn plausible_response(p: &[u8]) -> bool {
    if p.len() < 5 || p[3] != 1 {
        return false;
    }
    let len = le24(p) as usize;
    let ok = match p[4] {
        0x00 => len >= 7,
        0xff => len >= 3,
        0xfb => len >= 1,
        0x01..=0xfa => len == 1 || len == 2,
        _ => false,
    };
    let next = len + 4;
    ok && (next >= p.len() || (p.len() >= next + 4 && p[next + 3] == 2))
}

// ---------------------------------------------------------------------------------------------
// Calls

/// Where a response stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Resp {
    /// The first packet of a result: OK, ERR, LOCAL INFILE or a column count.
    First,
    /// Column definitions still to come.
    Columns {
        left: u64,
    },
    /// After the definitions: an EOF (rows follow), a row, or the end (EOF deprecated).
    AfterColumns,
    Rows,
    /// A prepare's parameter and column definitions, and the EOFs after each group.
    PrepareDefs {
        params: u64,
        columns: u64,
        defs_seen: u64,
        eofs_seen: u64,
    },
    /// A prepare whose definitions are all in, when it is unknown whether an EOF follows.
    PrepareTail,
    /// COM_FIELD_LIST: definitions until an EOF.
    FieldList,
    /// COM_STMT_FETCH: rows until an EOF.
    Fetch,
    /// One packet answers (OK, ERR, EOF or a text).
    Single,
    /// COM_CHANGE_USER: authentication again, until OK or ERR.
    Auth,
}

#[derive(Debug)]
struct MyError {
    /// None: cut before it (a snaplen, a hole).
    code: Option<u16>,
    sqlstate: Option<String>,
    /// The packet was cut before its SQLSTATE could be read: which error class it is, and so
    /// its outcome, is unknown.
    cut: bool,
    message: String,
}

impl MyError {
    fn status_text(&self) -> Option<String> {
        let code = self.code?;
        Some(match &self.sqlstate {
            Some(s) => format!("{code} ({s})"),
            None => code.to_string(),
        })
    }
}

/// Client packets went unseen behind the first `before` pending calls: the responses to those
/// still pair in order; a call queued after them pairs only once the unseen commands are
/// provably answered (`after_ns`).
#[derive(Debug, Clone, Copy)]
struct Unseen {
    before: usize,
    /// When the first call after the unseen packets was read (0: none yet). Seen from the
    /// server, which answers a command before it reads the next, a response written after
    /// that read began answers that call. [`NEVER`]: seen from the client (which may have
    /// sent any number of commands) or after a request the full queue dropped.
    after_ns: u64,
}

const NEVER: u64 = u64::MAX;

/// A call in the making.
#[derive(Debug)]
struct Call {
    command: u8,
    method: String,
    resource: String,
    /// The SQL a prepare names (remembered under the id its OK gives).
    prepare_sql: Option<String>,
    statement_id: Option<u32>,
    req: MessageSpan,
    truncated: bool,
    resp: Option<MessageSpan>,
    state: Resp,
    /// Sequence id of the last response packet (an EOF that may follow comes next).
    last_seq: u8,
    rows: u64,
    affected_rows: u64,
    last_insert_id: u64,
    warnings: u64,
    result_sets: u64,
    error: Option<MyError>,
    /// A packet of the response was seen (its first must have sequence id 1).
    started: bool,
    /// Packets of its rows went unseen (their headers beyond the snaplen): `rows` is not
    /// their count, and is not reported.
    rows_unseen: bool,
    /// An end packet (OK, EOF) was cut before its status: whether the response ended there,
    /// and what it said, is unknown.
    unsure: bool,
}

/// A direction's message beyond its framing: its packets' sequence ids and length.
#[derive(Debug, Default, Clone, Copy)]
struct Packets {
    /// Sequence id of the message's first packet, and of its latest.
    seq: u8,
    last_seq: u8,
    /// Payload bytes of the message so far (all its packets).
    len: u64,
}

/// A packet header: 3-byte length, sequence id.
const HEADER: usize = 4;

fn new_streams() -> Streams<(), MyState> {
    Streams::new(St::Lost, HEADER)
}

/// MySQL's framing state of its own ([`St::Proto`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MyState {
    /// The server's place lost among the rows of the one response awaited (a packet header
    /// beyond the snaplen): its bytes still count into it, and the end of each syscall
    /// (a kernel tail, or a segment captured whole) is searched for the rows' end
    /// ([`tail_rows_end`]). A command the client sends meanwhile makes it an ordinary loss.
    SeekEnd,
}

/// Where the connection stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    /// Nothing recognised yet.
    Start,
    /// The server's greeting seen; the client's HandshakeResponse next.
    Greeted,
    /// Authentication, until the server's OK or ERR.
    Auth,
    Commands,
    /// TLS, compression or replication: nothing more is parsed.
    Stopped,
}

pub struct MysqlParser {
    depth: ParseDepth,
    keep_head: usize,
    /// Framing per direction (not in sync at first: a connection may be picked up anywhere).
    streams: Streams<(), MyState>,
    packets: [Packets; 2],
    /// Index of the direction the client's packets travel, once known.
    client: Option<usize>,
    phase: Phase,
    server_caps: Option<u32>,
    /// CLIENT_DEPRECATE_EOF, from the handshake or inferred from a result set.
    deprecate_eof: Option<bool>,
    /// Compression was negotiated: parsing stops once authentication ends.
    compressed: bool,
    pending: InOrder<Call>,
    /// Turns of direction (where a CPU budget may cut: `request_direction`).
    turns: framing::Turns,
    unseen: Option<Unseen>,
    statements: BTreeMap<u32, String>,
    /// The SQL of the connection's last `COM_STMT_PREPARE` (what statement id 0xFFFFFFFF
    /// executes), once one was seen.
    last_prepare: Option<String>,
    /// In `MyState::SeekEnd`: an end of rows shaped at the end of the server's last syscall
    /// but not proven there ([`tail_end_shaped`]). The client's next command, before any
    /// more server bytes, proves it (a client sends one only once it has read the whole
    /// response); more server bytes first disprove it.
    end_candidate: Option<EndCandidate>,
}

/// An end of rows found where a syscall ended, awaiting proof (see `end_candidate`).
#[derive(Debug)]
struct EndCandidate {
    seq: u8,
    body: Vec<u8>,
}

impl MysqlParser {
    pub fn new(cfg: &ParserConfig) -> Self {
        MysqlParser {
            depth: cfg.depth,
            keep_head: cfg.keep_head,
            streams: new_streams(),
            packets: [Packets::default(); 2],
            client: None,
            phase: Phase::Start,
            server_caps: None,
            deprecate_eof: None,
            compressed: false,
            pending: InOrder::new(MAX_PENDING),
            turns: framing::Turns::default(),
            unseen: None,
            end_candidate: None,
            statements: BTreeMap::new(),
            last_prepare: None,
        }
    }

    /// Bytes the parser holds for framing (kept prefixes), for the flat-memory test.
    #[cfg(test)]
    fn buffered_bytes(&self) -> usize {
        self.streams
            .dirs
            .iter()
            .map(|d| d.body.capacity())
            .sum::<usize>()
            + self
                .statements
                .values()
                .map(String::capacity)
                .sum::<usize>()
    }

    fn is_client(&self, d: usize) -> Option<bool> {
        self.client.map(|c| c == d)
    }

    /// Nothing pending can be paired any more (commands may have been lost in any number).
    fn distrust_pairing(&mut self, stats: &mut ParseStats) {
        stats.damaged_messages += self.pending.len() as u64;
        self.pending.drain().for_each(drop);
        self.unseen = None;
        for ds in &mut self.streams.dirs {
            ds.lost_with = 0;
        }
    }

    /// Does the traced process receive the commands (a server)?
    fn server_side(&self) -> bool {
        self.client == Some(Direction::Ingress.index())
    }

    /// The front call leaves the queue (answered, or dropped).
    fn pop_front(&mut self) -> Option<Call> {
        let c = self.pending.pop();
        if c.is_some() {
            if let Some(u) = self.unseen.as_mut() {
                u.before = u.before.saturating_sub(1);
            }
        }
        c
    }

    /// Client packets went unseen: see [`Unseen`]. Calls queued after an earlier marker
    /// are now between two unseen stretches and are counted, not made.
    fn client_unseen(&mut self, stats: &mut ParseStats) {
        let after_ns = if self.server_side() { 0 } else { NEVER };
        match self.unseen.as_mut() {
            Some(u) => {
                while self.pending.len() > u.before {
                    self.pending.pop_back();
                    stats.damaged_messages += 1;
                }
                u.after_ns = after_ns;
            }
            None => {
                self.unseen = Some(Unseen {
                    before: self.pending.len(),
                    after_ns,
                })
            }
        }
    }

    /// Queues a command. Behind unseen packets that can never be told apart from it, or when
    /// the queue is full (evicting the oldest would shift every reply onto the next call), it
    /// is counted and no call is made of it.
    fn expect(&mut self, c: Call, stats: &mut ParseStats) {
        if self.unseen.is_some_and(|u| u.after_ns == NEVER) {
            stats.damaged_messages += 1;
            return;
        }
        if self.pending.is_full() {
            stats.pending_dropped += 1;
            match self.unseen.as_mut() {
                Some(u) => u.after_ns = NEVER,
                None => {
                    self.unseen = Some(Unseen {
                        before: self.pending.len(),
                        after_ns: NEVER,
                    })
                }
            }
            return;
        }
        if let Some(u) = self.unseen.as_mut() {
            if u.after_ns == 0 && self.pending.len() == u.before {
                u.after_ns = c.req.first_start_ns.max(1);
            }
        }
        if !self.pending.is_empty() {
            self.turns.pipelined();
        }
        self.pending.push(c);
    }

    /// A server packet while unseen commands are next to be answered: true if it starts the
    /// response of the call queued after them (the marker goes), false if it answers an
    /// unseen command (counted, skipped).
    fn past_unseen(&mut self, d: usize, seq: u8, stats: &mut ParseStats) -> bool {
        let Some(u) = self.unseen else {
            return true;
        };
        if u.before > 0 {
            return true;
        }
        let began = self.streams.dirs[d]
            .acc
            .span
            .map_or(0, |s| s.first_start_ns);
        let answers_next = seq == 1
            && u.after_ns != 0
            && u.after_ns != NEVER
            && began >= u.after_ns
            && !self.pending.is_empty();
        if answers_next {
            self.unseen = None;
            return true;
        }
        if seq == 1 {
            stats.unmatched_responses += 1;
        }
        self.streams.dirs[d].acc = BytesSince::default();
        false
    }

    /// The server's side came back after a loss (at a response's first packet, with a call
    /// queued since: see [`MysqlParser::plausible_start`]): the calls it was answering then
    /// ended out of sight, with a status and an end never seen: counted, not made.
    fn resync_server(&mut self, d: usize, stats: &mut ParseStats) {
        let n = std::mem::take(&mut self.streams.dirs[d].lost_with);
        for _ in 0..n {
            if self.pop_front().is_none() {
                break;
            }
            stats.damaged_messages += 1;
        }
    }

    /// The rest of the connection cannot be read (TLS, compression, replication).
    /// Parsing ends here, counted as a desync (the stream is one ebtop cannot follow).
    fn stop(&mut self, stats: &mut ParseStats) {
        stats.desyncs += 1;
        self.stop_parsing();
    }

    fn stop_parsing(&mut self) {
        self.phase = Phase::Stopped;
        self.pending.drain().for_each(drop);
        self.unseen = None;
        self.streams.dirs = new_streams().dirs;
    }

    /// Does segment `p` in direction d start where this direction can (re)sync?
    fn plausible_start(&self, d: usize, p: &[u8]) -> bool {
        match (self.is_client(d), self.phase) {
            (None, _) => is_greeting(p, false) || plausible_command(p, false),
            (Some(true), Phase::Greeted) => p.len() >= 5 && p[3] == 1,
            (Some(true), _) => plausible_command(p, false),
            (Some(false), Phase::Auth) => p.len() >= 5 && p[3] >= 2,
            // A response's first packet, and a command queued since the loss for it to
            // answer (the client sends one only once it has read the whole previous answer):
            // a row packet whose sequence id wrapped to 1 may look the same.
            (Some(false), _) => {
                plausible_response(p) && self.pending.len() > self.streams.dirs[d].lost_with
            }
        }
    }

    /// How much of the next message in direction d is kept.
    fn keep_for(&self, d: usize) -> usize {
        match (self.is_client(d), self.phase) {
            (Some(true), Phase::Greeted | Phase::Auth) => KEEP_HANDSHAKE,
            (Some(false), _) => KEEP_SERVER,
            _ => KEEP_CLIENT,
        }
    }

    fn greeting(&mut self, body: &[u8]) {
        self.phase = Phase::Greeted;
        // Protocol 10, version\0, thread id (4), scramble (8), filler, caps low (2), charset,
        // status (2), caps high (2).
        let Some(nul) = body.iter().position(|&c| c == 0) else {
            return;
        };
        let at = nul + 1 + 4 + 8 + 1;
        if let (Some(low), Some(high)) = (le16(body, at), le16(body, at + 5)) {
            self.server_caps = Some(u32::from(low) | u32::from(high) << 16);
        }
    }

    fn client_message(&mut self, d: usize, seq: u8, body: &[u8], len: u64, stats: &mut ParseStats) {
        match self.phase {
            Phase::Greeted => {
                self.streams.dirs[d].acc = BytesSince::default();
                let caps = le32(body, 0).unwrap_or(0);
                if caps & CLIENT_SSL != 0 && len == SSL_REQUEST_LEN {
                    // TLS follows: no loss (its plaintext, when ebtop's TLS probes see it, is
                    // a connection of its own).
                    self.stop_parsing();
                    return;
                }
                if caps & CLIENT_PROTOCOL_41 == 0 {
                    // The pre-4.1 protocol frames results differently: not parsed.
                    self.stop(stats);
                    return;
                }
                let negotiated = caps & self.server_caps.unwrap_or(u32::MAX);
                self.deprecate_eof = Some(negotiated & CLIENT_DEPRECATE_EOF != 0);
                self.compressed = negotiated & (CLIENT_COMPRESS | CLIENT_ZSTD_COMPRESSION) != 0;
                self.phase = Phase::Auth;
                return;
            }
            Phase::Auth | Phase::Start | Phase::Stopped => {
                self.streams.dirs[d].acc = BytesSince::default();
                return;
            }
            Phase::Commands => {}
        }
        if seq != 0 {
            // LOCAL INFILE contents or CHANGE_USER's authentication data: part of the call
            // they answer, never shown.
            let (span, _) = self.streams.dirs[d].acc.take();
            if let Some(c) = self.pending.back_mut() {
                c.req.bytes = c.req.bytes.saturating_add(span.bytes);
            }
            return;
        }
        let Some(&cmd) = body.first() else {
            self.streams.dirs[d].acc = BytesSince::default();
            return;
        };
        let text = || lossy(&body[1..], MAX_SQL);
        let statement = le32(body, 1);
        let (method, resource, state) = match cmd {
            COM_QUIT | COM_STMT_SEND_LONG_DATA | COM_STMT_CLOSE => {
                if cmd == COM_STMT_CLOSE {
                    if let Some(id) = statement {
                        self.statements.remove(&id);
                    }
                }
                stats.unreplied_requests += 1;
                self.streams.dirs[d].acc = BytesSince::default();
                return;
            }
            COM_BINLOG_DUMP | COM_BINLOG_DUMP_GTID => {
                // A replication stream follows: events, not responses.
                self.stop(stats);
                return;
            }
            COM_QUERY => {
                let sql = text();
                (sql_keyword(&sql), sql, Resp::First)
            }
            COM_STMT_PREPARE => {
                let sql = text();
                self.last_prepare = Some(sql.clone());
                ("PREPARE".to_owned(), sql, Resp::First)
            }
            COM_STMT_EXECUTE => {
                let sql = self.statement_sql(statement);
                (sql_keyword(&sql), sql, Resp::First)
            }
            COM_STMT_FETCH | COM_STMT_RESET => (
                command_name(cmd).unwrap_or_default().to_owned(),
                self.statement_sql(statement),
                if cmd == COM_STMT_FETCH {
                    Resp::Fetch
                } else {
                    Resp::Single
                },
            ),
            COM_INIT_DB | 0x05 | 0x06 => (
                command_name(cmd).unwrap_or_default().to_owned(),
                lossy(&body[1..], 256),
                Resp::Single,
            ),
            COM_FIELD_LIST => {
                let table = body[1..].split(|&c| c == 0).next().unwrap_or_default();
                ("FIELD_LIST".to_owned(), lossy(table, 256), Resp::FieldList)
            }
            COM_PROCESS_INFO => ("PROCESS_INFO".to_owned(), String::new(), Resp::First),
            COM_CHANGE_USER => ("CHANGE_USER".to_owned(), String::new(), Resp::Auth),
            COM_STATISTICS => ("STATISTICS".to_owned(), String::new(), Resp::Single),
            c => match command_name(c) {
                Some(name) => (name.to_owned(), String::new(), Resp::Single),
                None => {
                    // Not a command: the stream is not where it seemed.
                    framing::lose_sync(self, d, stats);
                    self.client_unseen(stats);
                    return;
                }
            },
        };
        let (req, truncated) = self.streams.dirs[d].acc.take();
        let statement_id = match cmd {
            COM_STMT_EXECUTE | COM_STMT_FETCH | COM_STMT_RESET => statement,
            _ => None,
        };
        self.expect(
            Call {
                command: cmd,
                method,
                prepare_sql: (cmd == COM_STMT_PREPARE).then(|| resource.clone()),
                resource,
                statement_id,
                req,
                truncated,
                resp: None,
                state,
                last_seq: 0,
                rows: 0,
                affected_rows: 0,
                last_insert_id: 0,
                warnings: 0,
                result_sets: 0,
                error: None,
                started: false,
                rows_unseen: false,
                unsure: false,
            },
            stats,
        );
    }

    /// The SQL of a prepared statement (`EXECUTE <id>` when it was prepared out of sight).
    fn statement_sql(&self, id: Option<u32>) -> String {
        match id {
            Some(LAST_PREPARED) => match &self.last_prepare {
                Some(sql) => sql.clone(),
                None => "EXECUTE (last prepared)".to_owned(),
            },
            Some(id) => match self.statements.get(&id) {
                Some(sql) => sql.clone(),
                None => format!("EXECUTE {id}"),
            },
            None => "EXECUTE".to_owned(),
        }
    }

    fn remember(&mut self, id: u32, sql: String) {
        if self.statements.len() >= MAX_STATEMENTS && !self.statements.contains_key(&id) {
            // Ids grow per connection: the smallest is the oldest.
            self.statements.pop_first();
        }
        self.statements.insert(id, sql);
    }

    fn server_message(
        &mut self,
        d: usize,
        seq: u8,
        body: &[u8],
        len: u64,
        out: &mut Vec<L7Call>,
        stats: &mut ParseStats,
    ) {
        let first = body.first().copied();
        match self.phase {
            Phase::Auth => {
                self.streams.dirs[d].acc = BytesSince::default();
                if matches!(first, Some(0x00 | 0xff)) {
                    self.phase = Phase::Commands;
                    if self.compressed && first == Some(0x00) {
                        self.stop(stats);
                    }
                }
                return;
            }
            Phase::Commands => {}
            _ => {
                self.streams.dirs[d].acc = BytesSince::default();
                return;
            }
        }
        // A possible trailing EOF of a prepare: this packet, or the end of the prepare.
        if let Some(c) = self.pending.front() {
            if c.state == Resp::PrepareTail {
                let eof = first == Some(0xfe) && len < 9 && seq == c.last_seq.wrapping_add(1);
                if let Some(mut c) = self.pop_front() {
                    if eof {
                        self.deprecate_eof = Some(false);
                        let (more, truncated) = self.streams.dirs[d].acc.take();
                        if let Some(r) = c.resp.as_mut() {
                            r.bytes = r.bytes.saturating_add(more.bytes);
                            r.last_start_ns = more.last_start_ns;
                            r.last_end_ns = more.last_end_ns;
                            r.syscalls += more.syscalls.saturating_sub(1);
                        }
                        c.truncated |= truncated;
                    }
                    self.emit(c, out);
                }
                if eof {
                    return;
                }
            }
        }
        if first == Some(0xff) && le16(body, 1) == Some(PROGRESS_REPORT) {
            // Its response's first packet when it comes first.
            if let Some(c) = self.pending.front_mut() {
                c.started |= seq == 1 && self.unseen.is_none_or(|u| u.before > 0);
            }
            return;
        }
        if !self.past_unseen(d, seq, stats) {
            return;
        }
        let deprecate_eof = self.deprecate_eof;
        let Some(c) = self.pending.front_mut() else {
            stats.unmatched_responses += 1;
            self.streams.dirs[d].acc = BytesSince::default();
            return;
        };
        if !c.started && seq != 1 && c.state != Resp::Auth {
            // A response starts at sequence id 1: this packet answers no queued call (the
            // rest of a response whose end was taken for another packet, or lost).
            stats.unmatched_responses += 1;
            self.streams.dirs[d].acc = BytesSince::default();
            return;
        }
        c.started = true;
        c.last_seq = seq;
        if first == Some(0xff) {
            c.error = Some(parse_error(body, len));
            self.finish(d, out);
            return;
        }
        // An OK or EOF whose status flags went unseen: whether more results follow is unknown.
        let cut_end = matches!(first, Some(0x00 | 0xfe))
            && (body.len() as u64) < len
            && ok_fields_cut(body, len);
        // 0xFE shorter than a maximum packet: an EOF, or an OK in its place.
        let end_marker = first == Some(0xfe) && len < u64::from(MAX_PACKET);
        let mut done = false;
        let mut learned_deprecate = None;
        let mut prepared = false;
        match c.state {
            Resp::First => match first {
                Some(0x00) | Some(0xfe) => {
                    let (affected, insert_id, status, warnings) = ok_fields(body, len);
                    c.affected_rows = c.affected_rows.saturating_add(affected);
                    if insert_id != 0 {
                        c.last_insert_id = insert_id;
                    }
                    c.warnings = c.warnings.saturating_add(u64::from(warnings));
                    if c.command == COM_STMT_PREPARE && first == Some(0x00) && len >= 12 {
                        prepared = true;
                    } else {
                        done = status & SERVER_MORE_RESULTS_EXISTS == 0;
                    }
                }
                // LOCAL INFILE: the client sends the file, then the server's OK or ERR.
                Some(0xfb) => {}
                _ => {
                    let mut at = 0;
                    let columns = lenenc(body, &mut at).unwrap_or(0);
                    // MariaDB's metadata cache: a byte after the count, 0 = no definitions.
                    let defs = if len == at as u64 + 1 && body.get(at) == Some(&0) {
                        0
                    } else {
                        columns
                    };
                    c.result_sets += 1;
                    c.state = if defs == 0 {
                        Resp::AfterColumns
                    } else {
                        Resp::Columns { left: defs }
                    };
                }
            },
            Resp::Columns { left } => {
                c.state = if left <= 1 {
                    Resp::AfterColumns
                } else {
                    Resp::Columns { left: left - 1 }
                };
            }
            Resp::AfterColumns if end_marker => {
                let is_eof = match deprecate_eof {
                    Some(deprecated) => !deprecated,
                    None => len == 5,
                };
                learned_deprecate = Some(!is_eof);
                if is_eof {
                    c.state = Resp::Rows;
                } else {
                    done = result_end(c, body, len);
                }
            }
            Resp::AfterColumns => {
                learned_deprecate = Some(true);
                c.rows = c.rows.saturating_add(1);
                c.state = Resp::Rows;
            }
            Resp::Rows if end_marker => done = result_end(c, body, len),
            Resp::Rows => c.rows = c.rows.saturating_add(1),
            Resp::Fetch if end_marker => done = true,
            Resp::Fetch => c.rows = c.rows.saturating_add(1),
            Resp::FieldList => done = end_marker,
            Resp::PrepareDefs {
                params,
                columns,
                mut defs_seen,
                mut eofs_seen,
            } => {
                if end_marker && len < 9 {
                    eofs_seen += 1;
                    learned_deprecate = Some(false);
                } else {
                    defs_seen += 1;
                }
                c.state = Resp::PrepareDefs {
                    params,
                    columns,
                    defs_seen,
                    eofs_seen,
                };
            }
            Resp::PrepareTail => done = true,
            Resp::Single => {
                if first == Some(0x00) {
                    let (affected, _, _, warnings) = ok_fields(body, len);
                    c.affected_rows = affected;
                    c.warnings = u64::from(warnings);
                }
                done = true;
            }
            Resp::Auth => done = first == Some(0x00),
        }
        let read_as_end = match c.state {
            Resp::First | Resp::Single => true,
            Resp::AfterColumns | Resp::Rows => end_marker,
            _ => false,
        };
        if cut_end && read_as_end && (done || c.state == Resp::First) {
            c.unsure = true;
        }
        let defs = matches!(c.state, Resp::PrepareDefs { .. });
        if learned_deprecate.is_some() && deprecate_eof.is_none() {
            self.deprecate_eof = learned_deprecate;
        }
        if prepared {
            done = self.prepare_ok(body);
        } else if defs {
            done = self.prepare_progress();
        }
        if done {
            self.finish(d, out);
        } else if self
            .pending
            .front()
            .is_some_and(|c| c.state == Resp::PrepareTail && c.resp.is_none())
        {
            // Its response so far; an EOF that follows is added to it.
            let (resp, truncated) = self.streams.dirs[d].acc.take();
            if let Some(c) = self.pending.front_mut() {
                c.resp = Some(resp);
                c.truncated |= truncated;
            }
        }
    }

    /// A client message while server direction `sd` seeks the end of the rows of the one
    /// response awaited, an end found where the server's last syscall ended: the client
    /// read the whole response, so that was its end (no more server bytes came since). The
    /// call ends there, exactly; the server's next bytes start a response.
    fn end_proven(&mut self, sd: usize, out: &mut Vec<L7Call>, stats: &mut ParseStats) {
        if self.streams.dirs[sd].st != St::Proto(MyState::SeekEnd)
            || self.pending.len() != 1
            || self.unseen.is_some()
        {
            return;
        }
        let Some(end) = self.end_candidate.take() else {
            return;
        };
        self.streams.dirs[sd].st = St::Header;
        let len = end.body.len() as u64;
        self.server_message(sd, end.seq, &end.body, len, out, stats);
    }

    /// A prepare's OK: the statement is remembered; its definitions follow. True: done.
    fn prepare_ok(&mut self, body: &[u8]) -> bool {
        let id = le32(body, 1);
        let columns = u64::from(le16(body, 5).unwrap_or(0));
        let params = u64::from(le16(body, 7).unwrap_or(0));
        let Some(c) = self.pending.front_mut() else {
            return true;
        };
        c.statement_id = id;
        let sql = c.prepare_sql.take().unwrap_or_default();
        c.state = Resp::PrepareDefs {
            params,
            columns,
            defs_seen: 0,
            eofs_seen: 0,
        };
        if let Some(id) = id {
            self.remember(id, sql);
        }
        self.prepare_progress()
    }

    /// Has the prepare's response ended? (It may turn to PrepareTail: an EOF may follow.)
    fn prepare_progress(&mut self) -> bool {
        let deprecate_eof = self.deprecate_eof;
        let Some(c) = self.pending.front_mut() else {
            return true;
        };
        let Resp::PrepareDefs {
            params,
            columns,
            defs_seen,
            eofs_seen,
        } = c.state
        else {
            return true;
        };
        let groups = u64::from(params > 0) + u64::from(columns > 0);
        if defs_seen < params.saturating_add(columns) {
            return false;
        }
        match deprecate_eof {
            Some(true) => true,
            Some(false) => eofs_seen >= groups,
            // Two groups and no EOF between them: EOFs are deprecated.
            None if groups == 2 || groups == 0 => true,
            None => {
                c.state = Resp::PrepareTail;
                false
            }
        }
    }

    /// The front call's response is complete.
    fn finish(&mut self, d: usize, out: &mut Vec<L7Call>) {
        if let Some(mut c) = self.pop_front() {
            let (resp, truncated) = self.streams.dirs[d].acc.take();
            c.resp = Some(resp);
            c.truncated |= truncated;
            self.emit(c, out);
        }
    }

    fn emit(&mut self, c: Call, out: &mut Vec<L7Call>) {
        let mut details = Vec::new();
        let full = self.depth == ParseDepth::Full;
        let (status_text, outcome) = match &c.error {
            Some(e) => {
                if full && !e.message.is_empty() {
                    details.push(("error", e.message.clone()));
                }
                let outcome = match &e.sqlstate {
                    _ if e.cut => Outcome::Unknown,
                    Some(s) => sqlstate_outcome(s),
                    None => Outcome::ServerError,
                };
                (e.status_text(), outcome)
            }
            None if c.unsure => (None, Outcome::Unknown),
            None => (None, Outcome::Ok),
        };
        let exact = c.error.is_none() && !c.unsure && !c.rows_unseen;
        if exact && c.command != COM_STMT_PREPARE {
            details.push(("rows", c.rows.saturating_add(c.affected_rows).to_string()));
        }
        if full {
            details.push((
                "command",
                command_name(c.command)
                    .unwrap_or_default()
                    .to_ascii_lowercase(),
            ));
            if let Some(id) = c.statement_id {
                details.push(("statement_id", id.to_string()));
            }
            if exact {
                if c.affected_rows > 0 {
                    details.push(("affected_rows", c.affected_rows.to_string()));
                }
                if c.last_insert_id > 0 {
                    details.push(("last_insert_id", c.last_insert_id.to_string()));
                }
                if c.result_sets > 0 {
                    details.push(("result_sets", c.result_sets.to_string()));
                }
            }
            if c.warnings > 0 {
                details.push(("warnings", c.warnings.to_string()));
            }
        }
        let client = self.client.unwrap_or(0);
        // Heads show the SQL (never parameters) and the outcome (never rows).
        let resp_text = match &c.error {
            Some(e) => format!(
                "ERROR {}: {}",
                e.status_text().as_deref().unwrap_or("?"),
                e.message
            ),
            None if c.unsure => "?".to_owned(),
            None if c.result_sets > 0 => format!("{} rows", c.rows),
            None => format!("OK, {} rows affected", c.affected_rows),
        };
        // Passwords in the SQL (`… IDENTIFIED BY '…'`) never reach the output.
        let redacted = match super::redact::redact_sql(&c.resource) {
            std::borrow::Cow::Borrowed(_) => None,
            std::borrow::Cow::Owned(shown) => Some(shown),
        };
        let resource = redacted.unwrap_or(c.resource);
        let req_head = self.head(resource.as_bytes(), c.req.bytes);
        let resp_head = self.head(resp_text.as_bytes(), c.resp.map_or(0, |r| r.bytes));
        out.push(L7Call {
            proto: Protocol::Mysql,
            request_dir: if client == 0 {
                Direction::Egress
            } else {
                Direction::Ingress
            },
            method: c.method,
            resource,
            version: "4.1",
            status: None,
            status_text,
            outcome,
            req: c.req,
            resp: c.resp.unwrap_or_default(),
            truncated: c.truncated,
            end_inferred: false,
            details,
            req_head,
            resp_head,
        });
    }

    fn head(&self, text: &[u8], len: u64) -> CapturedHead {
        if self.keep_head == 0 {
            return CapturedHead::default();
        }
        CapturedHead::redacted(text[..text.len().min(self.keep_head)].to_vec(), len)
    }
}

/// An OK packet's (or an OK-format end of rows') affected rows, last insert id, status flags
/// and warnings; an EOF (5 bytes) has only the last two.
fn ok_fields(body: &[u8], len: u64) -> (u64, u64, u16, u16) {
    if len < 7 {
        return (0, 0, le16(body, 3).unwrap_or(0), le16(body, 1).unwrap_or(0));
    }
    let mut at = 1;
    let affected = lenenc(body, &mut at).unwrap_or(0);
    let insert_id = lenenc(body, &mut at).unwrap_or(0);
    (
        affected,
        insert_id,
        le16(body, at).unwrap_or(0),
        le16(body, at + 2).unwrap_or(0),
    )
}

/// Where the packet that ends a result set's rows starts in `t`, the last bytes of a syscall
/// (a kernel tail), if they prove it: an end of rows (0xFE: an EOF of 5 bytes, or with
/// CLIENT_DEPRECATE_EOF an OK of at least 7) whose length runs exactly to `t`'s end, right
/// after a whole packet whose length runs exactly to it and whose sequence id is one less.
/// A real end is the last packet of its send (the server flushes there). The residual doubt:
/// a row whose value ends with bytes shaped as such two packets exactly where a send ended.
/// Rows longer than `t` leave no packet before the end in it: not proven (the call then ends
/// as after any loss).
fn tail_rows_end(t: &[u8], deprecate_eof: Option<bool>) -> Option<usize> {
    end_packets(t, deprecate_eof).find(|&f| {
        (0..f.saturating_sub(HEADER)).any(|g| {
            let glen = le24(&t[g..]) as usize;
            glen > 0
                && g + HEADER + glen == f
                && t[g + 3].wrapping_add(1) == t[f + 3]
                && !matches!(t[g + HEADER], 0xfe | 0xff)
        })
    })
}

/// Where in `t`, a syscall's last bytes, a packet shaped as the last end of rows (see
/// [`end_packets`]) starts, the shortest first: a candidate only, the bytes before it unread
/// (rows longer than a tail), to be proven by the client's next command.
fn tail_end_shaped(t: &[u8], deprecate_eof: Option<bool>) -> Option<usize> {
    end_packets(t, deprecate_eof).next()
}

/// The starts of packets in `t` shaped as the end of a response's last rows and running
/// exactly to `t`'s end, shortest first: header 0xFE, an EOF of 5 bytes or (with
/// CLIENT_DEPRECATE_EOF) an OK of at least 7, its status without SERVER_MORE_RESULTS_EXISTS
/// (more would follow).
fn end_packets(t: &[u8], deprecate_eof: Option<bool>) -> impl Iterator<Item = usize> + '_ {
    let n = t.len();
    (HEADER + 5..=n)
        .map(move |size| n - size)
        .filter(move |&f| {
            let len = le24(&t[f..]) as usize;
            let body = &t[f + HEADER..];
            len + HEADER == n - f
                && body[0] == 0xfe
                && match deprecate_eof {
                    Some(false) => len == 5,
                    Some(true) => len >= 7,
                    None => len == 5 || len >= 7,
                }
                && !ok_fields_cut(body, len as u64)
                && ok_fields(body, len as u64).2 & SERVER_MORE_RESULTS_EXISTS == 0
        })
}

/// The end of a result set's rows: true when no further result follows.
fn result_end(c: &mut Call, body: &[u8], len: u64) -> bool {
    let (_, _, status, warnings) = ok_fields(body, len);
    c.warnings = c.warnings.saturating_add(u64::from(warnings));
    if status & SERVER_MORE_RESULTS_EXISTS != 0 {
        c.state = Resp::First;
        false
    } else {
        true
    }
}

/// Whether an OK's (or EOF's) status flags and warnings lie beyond the kept bytes `body` of
/// a packet of `len` bytes.
fn ok_fields_cut(body: &[u8], len: u64) -> bool {
    let need = if len < 7 {
        5
    } else {
        let mut at = 1;
        if lenenc(body, &mut at).is_none() || lenenc(body, &mut at).is_none() {
            return true;
        }
        at + 4
    };
    body.len() < need
}

/// An ERR packet of `len` bytes (`body` what was kept of it): code, `#` and SQLSTATE
/// (protocol 4.1), message.
fn parse_error(body: &[u8], len: u64) -> MyError {
    let code = le16(body, 1);
    // A 4.1 ERR has its SQLSTATE in bytes 3..9; fewer kept than that of a longer packet: cut.
    let cut = (body.len() as u64) < len.min(9);
    let (sqlstate, msg) = match body.get(3..9) {
        Some([b'#', state @ ..]) if state.iter().all(u8::is_ascii_alphanumeric) => (
            Some(String::from_utf8_lossy(state).into_owned()),
            &body[9..],
        ),
        _ => (None, body.get(3..).unwrap_or_default()),
    };
    MyError {
        code,
        sqlstate,
        cut,
        message: lossy(msg, MAX_ERROR_DETAIL),
    }
}

/// The outcome an SQLSTATE means: PostgreSQL's classes (08, 53, 57, 58, XX are the
/// server's), and MySQL's general class HY (lock wait timeouts, full tables, out of memory).
fn sqlstate_outcome(code: &str) -> Outcome {
    if code.starts_with("HY") {
        Outcome::ServerError
    } else {
        super::postgres::sqlstate_outcome(code)
    }
}

impl Framer for MysqlParser {
    type Kind = ();
    type State = MyState;
    const MIN_HEADER: usize = HEADER;
    const RESYNC_PROBE: usize = PROBE_LEN;
    /// A result set longer than the snaplen ends in a send's tail: its final EOF/OK there
    /// ends its call exactly (`MyState::SeekEnd`).
    const TAILS: bool = true;

    fn streams(&mut self) -> &mut Streams<(), MyState> {
        &mut self.streams
    }

    fn streams_ref(&self) -> &Streams<(), MyState> {
        &self.streams
    }

    fn stopped(&self) -> bool {
        self.phase == Phase::Stopped
    }

    fn pending(&self) -> usize {
        self.pending.len()
    }

    /// A packet header: a message's first packet starts its kept prefix; a continuation
    /// must follow its predecessor's sequence id.
    fn header(
        &mut self,
        d: usize,
        hdr: &[u8],
        _out: &mut Vec<L7Call>,
        _stats: &mut ParseStats,
    ) -> Header<()> {
        // Decided per message: the phase may have changed since the last one.
        let keep = self.keep_for(d);
        let len = le24(hdr);
        let seq = hdr[3];
        let m = &mut self.packets[d];
        if self.streams.dirs[d].continued() {
            if seq != m.last_seq.wrapping_add(1) {
                return Header::NotAFrame;
            }
        } else {
            m.seq = seq;
            m.len = 0;
            self.streams.dirs[d].start_body(keep);
        }
        m.last_seq = seq;
        m.len += u64::from(len);
        Header::Frame {
            body_len: u64::from(len),
            kind: (),
            more: len == MAX_PACKET,
        }
    }

    /// A whole message (body kept up to its prefix) in direction d.
    fn frame_done(
        &mut self,
        d: usize,
        _kind: (),
        body: &[u8],
        out: &mut Vec<L7Call>,
        stats: &mut ParseStats,
    ) {
        let Packets { seq, len, .. } = self.packets[d];
        if self.client.is_none() {
            if seq == 0 && body.first() == Some(&10) {
                self.client = Some(1 - d);
                self.greeting(body);
            } else if seq == 0 && body.first().is_some_and(|&c| command_name(c).is_some()) {
                self.client = Some(d);
                self.phase = Phase::Commands;
            } else {
                self.streams.dirs[d].acc = BytesSince::default();
            }
        }
        match self.is_client(d) {
            Some(true) => {
                self.end_proven(1 - d, out, stats);
                self.client_message(d, seq, body, len, stats)
            }
            Some(false) => self.server_message(d, seq, body, len, out, stats),
            None => {}
        }
    }

    fn resync(&self, d: usize, p: &[u8]) -> bool {
        self.plausible_start(d, p)
    }

    /// A server packet header beyond the snaplen among the rows of the one response awaited:
    /// its end is sought at each syscall's end (`MyState::SeekEnd`), its bytes counted.
    fn header_unseen(
        &mut self,
        d: usize,
        _seg: &Segment,
        n: u64,
        _out: &mut Vec<L7Call>,
        stats: &mut ParseStats,
    ) -> bool {
        // Among rows only: with EOFs, the one after the column definitions is shaped as the
        // rows' end (and may end a write), so a loss before it stays an ordinary one.
        let deprecated = self.deprecate_eof == Some(true);
        let awaiting_rows_end = self.is_client(d) == Some(false)
            && self.phase == Phase::Commands
            && self.pending.len() == 1
            && self.unseen.is_none()
            && self.pending.front().is_some_and(|c| {
                c.started
                    && match c.state {
                        Resp::Rows | Resp::Fetch => true,
                        Resp::AfterColumns => deprecated,
                        _ => false,
                    }
            });
        if !awaiting_rows_end {
            return false;
        }
        stats.skipped(n);
        self.end_candidate = None;
        if let Some(c) = self.pending.front_mut() {
            c.rows_unseen = true;
        }
        let ds = &mut self.streams.dirs[d];
        ds.st = St::Proto(MyState::SeekEnd);
        ds.clear(HEADER);
        ds.acc.add(n);
        ds.acc.truncated = true;
        true
    }

    fn segment_in_state(
        &mut self,
        d: usize,
        _s: MyState,
        seg: &Segment,
        _out: &mut Vec<L7Call>,
        stats: &mut ParseStats,
    ) -> Option<usize> {
        let seg_id = self.streams.seg_id;
        if !self.streams.in_tail && self.pending.len() > 1 {
            // The client sent its next command: the response ended out of sight. As after
            // any loss, the server picks up at a response's first packet, the call it was
            // answering counted, not made.
            stats.desyncs += 1;
            let ds = &mut self.streams.dirs[d];
            ds.st = St::Lost;
            ds.lost_with = 1;
            ds.acc = BytesSince::default();
            if self.plausible_start(d, seg.payload) {
                self.resync_server(d, stats);
                self.streams.dirs[d].st = St::Header;
                return Some(0);
            }
            stats.skipped(seg.total_len);
            return None;
        }
        // More server bytes: an end found before was row data.
        self.end_candidate = None;
        // The syscall's last bytes: a tail, or a segment captured whole.
        let ends_syscall = self.streams.in_tail || seg.payload.len() as u64 == seg.total_len;
        let deprecate_eof = self.deprecate_eof;
        let from = seg.payload.len().saturating_sub(crate::event::TAIL_LEN);
        let last = &seg.payload[from..];
        let end = ends_syscall
            .then(|| tail_rows_end(last, deprecate_eof))
            .flatten();
        if end.is_none() && ends_syscall {
            self.end_candidate = tail_end_shaped(last, deprecate_eof).map(|f| EndCandidate {
                seq: last[f + 3],
                body: last[f + HEADER..].to_vec(),
            });
        }
        let ds = &mut self.streams.dirs[d];
        ds.acc.touch(seg_id, seg);
        match end {
            Some(at) => {
                let at = from + at;
                ds.acc.add(at as u64);
                ds.st = St::Header;
                stats.skipped(at as u64);
                Some(at)
            }
            None => {
                ds.acc.add(seg.total_len);
                stats.skipped(seg.total_len);
                None
            }
        }
    }

    /// Counted in the state's segment already (`segment_in_state` took the whole syscall).
    fn uncaptured_in_state(
        &mut self,
        _d: usize,
        _s: MyState,
        _seg: &Segment,
        n: u64,
        _out: &mut Vec<L7Call>,
        stats: &mut ParseStats,
    ) {
        stats.skipped(n);
    }

    fn resynced(&mut self, d: usize, _out: &mut Vec<L7Call>, stats: &mut ParseStats) {
        if self.is_client(d) == Some(false) {
            self.resync_server(d, stats);
        }
    }

    fn lost(&mut self, d: usize, why: Loss, stats: &mut ParseStats) {
        // Client packets unseen or lost: the server's answers can no longer be paired.
        let distrust = match why {
            Loss::Unseen => self.is_client(d) == Some(true),
            Loss::NotAFrame | Loss::Gap => self.is_client(d) != Some(false),
        };
        if distrust && self.is_client(d) == Some(true) {
            self.client_unseen(stats);
        } else if distrust {
            self.distrust_pairing(stats);
        }
    }
}

impl StreamParser for MysqlParser {
    fn on_segment(&mut self, seg: &Segment<'_>, out: &mut Vec<L7Call>, stats: &mut ParseStats) {
        let between = framing::between_calls(self);
        self.turns.note(seg.dir.index(), self.client, between);
        framing::on_segment(self, seg, out, stats);
    }

    fn on_gap(&mut self, dir: Direction, len: Option<u64>, stats: &mut ParseStats) {
        self.turns.lost();
        framing::on_gap(self, dir, len, stats);
    }

    fn request_direction(&self) -> Option<Direction> {
        if self.phase != Phase::Commands || self.end_candidate.is_some() || self.unseen.is_some() {
            return None;
        }
        self.turns.request_direction(self.client)
    }

    fn on_close(&mut self, out: &mut Vec<L7Call>, stats: &mut ParseStats) {
        // A prepare whose trailing EOF never came had none.
        if self
            .pending
            .front()
            .is_some_and(|c| c.state == Resp::PrepareTail)
        {
            if let Some(c) = self.pop_front() {
                self.emit(c, out);
            }
        }
        stats.unanswered_requests += self.pending.len() as u64;
        self.pending.drain().for_each(drop);
        self.unseen = None;
    }
}

#[cfg(test)]
mod fixture_tests;
#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocols::test_driver::stream_config;

    const OUT: Direction = Direction::Egress;
    const IN: Direction = Direction::Ingress;
    /// Capabilities a MariaDB client negotiates (no DEPRECATE_EOF, no SSL, no compression).
    const CAPS: u32 = 0x80be_a28e;

    /// Drives a parser with a fake clock (1 µs per syscall).
    type Driver = crate::protocols::test_driver::Driver<MysqlParser>;

    impl Driver {
        fn new() -> Self {
            Driver::with_parser(MysqlParser::new(&stream_config(0)))
        }
        /// The handshake of a connection with these client capabilities.
        fn connected(caps: u32) -> Self {
            let mut d = Driver::new();
            d.seg(IN, &greeting())
                .seg(OUT, &handshake_response(caps))
                .seg(IN, &ok(2, 0, 0, 2));
            d
        }
        /// (method, resource, status text, rows) of each call.
        fn summary(&self) -> Vec<(String, String, Option<String>, Option<String>)> {
            self.calls
                .iter()
                .map(|c| {
                    let rows = c.details.iter().find(|(k, _)| *k == "rows");
                    (
                        c.method.clone(),
                        c.resource.clone(),
                        c.status_text.clone(),
                        rows.map(|r| r.1.clone()),
                    )
                })
                .collect()
        }
    }

    fn s(
        m: &str,
        r: &str,
        st: Option<&str>,
        rows: Option<&str>,
    ) -> (String, String, Option<String>, Option<String>) {
        (m.into(), r.into(), st.map(Into::into), rows.map(Into::into))
    }

    fn pkt(seq: u8, body: &[u8]) -> Vec<u8> {
        let len = body.len() as u32;
        let mut p = vec![len as u8, (len >> 8) as u8, (len >> 16) as u8, seq];
        p.extend_from_slice(body);
        p
    }
    fn greeting() -> Vec<u8> {
        let mut b = vec![10];
        b.extend_from_slice(b"5.5.5-10.11.19-MariaDB\0");
        b.extend_from_slice(&[5, 0, 0, 0]);
        b.extend_from_slice(b"abcdefgh\0");
        // Caps (all the server offers, DEPRECATE_EOF and COMPRESS included), charset, status.
        b.extend_from_slice(&[0xfe, 0xf7, 0x08, 0x02, 0x00, 0xff, 0x81]);
        b.extend_from_slice(&[21, 0, 0, 0, 0, 0, 0, 0x1d, 0, 0, 0]);
        b.extend_from_slice(b"ijklmnopqrst\0mysql_native_password\0");
        pkt(0, &b)
    }
    fn handshake_response(caps: u32) -> Vec<u8> {
        let mut b = caps.to_le_bytes().to_vec();
        b.extend_from_slice(&[0, 0, 0, 1, 33]);
        b.extend_from_slice(&[0; 23]);
        b.extend_from_slice(b"root\0\x14secretsecretsecret12shop\0mysql_native_password\0");
        pkt(1, &b)
    }
    fn ok(seq: u8, affected: u8, insert_id: u8, status: u16) -> Vec<u8> {
        let mut b = vec![0, affected, insert_id];
        b.extend_from_slice(&status.to_le_bytes());
        b.extend_from_slice(&[0, 0]);
        pkt(seq, &b)
    }
    fn err(seq: u8, code: u16, state: &str, msg: &str) -> Vec<u8> {
        let mut b = vec![0xff];
        b.extend_from_slice(&code.to_le_bytes());
        b.push(b'#');
        b.extend_from_slice(state.as_bytes());
        b.extend_from_slice(msg.as_bytes());
        pkt(seq, &b)
    }
    fn eof(seq: u8, status: u16) -> Vec<u8> {
        let mut b = vec![0xfe, 0, 0];
        b.extend_from_slice(&status.to_le_bytes());
        pkt(seq, &b)
    }
    /// The OK that ends rows under CLIENT_DEPRECATE_EOF (header 0xFE).
    fn ok_fe(seq: u8, status: u16) -> Vec<u8> {
        let mut b = vec![0xfe, 0, 0];
        b.extend_from_slice(&status.to_le_bytes());
        b.extend_from_slice(&[0, 0]);
        pkt(seq, &b)
    }
    fn query(sql: &str) -> Vec<u8> {
        pkt(0, &[&[COM_QUERY][..], sql.as_bytes()].concat())
    }
    fn command(cmd: u8, arg: &[u8]) -> Vec<u8> {
        pkt(0, &[&[cmd][..], arg].concat())
    }

    /// A password in SQL (`IDENTIFIED BY`, `SET PASSWORD`) never reaches a call: not its
    /// resource (JSON's `resource`, the TUI's lists) nor its head (the TUI's details).
    #[test]
    fn passwords_in_queries_reach_neither_resource_nor_head() {
        let mut d = Driver::with_parser(MysqlParser::new(&stream_config(4096)));
        d.seg(IN, &greeting())
            .seg(OUT, &handshake_response(CAPS))
            .seg(IN, &ok(2, 0, 0, 2));
        for sql in [
            "CREATE USER 'bob'@'%' IDENTIFIED BY 'Hunter2my'",
            "SET PASSWORD FOR 'bob'@'%' = 'Hunter2my'",
        ] {
            d.seg(OUT, &query(sql)).seg(IN, &ok(1, 0, 0, 2));
        }
        assert_eq!(d.calls.len(), 2);
        for c in &d.calls {
            assert!(c.resource.contains("'[redacted]'"), "{}", c.resource);
            let head = String::from_utf8_lossy(&c.req_head.shown()).into_owned();
            assert!(
                head.contains("[redacted]") && !head.contains("Hunter2my"),
                "{head}"
            );
            assert!(!format!("{c:?}").contains("Hunter2my"));
        }
    }
    fn coldef(seq: u8) -> Vec<u8> {
        pkt(
            seq,
            b"\x03def\x04shop\x05items\x05items\x02id\x02id\x00\x0c\x3f\x00\x0b\x00\x00\x00\x03\x03\x50\x00\x00\x00",
        )
    }
    /// A text result set of one column starting at `seq`: (bytes, the next seq).
    fn result_set(seq: u8, rows: &[&str], deprecate_eof: bool, status: u16) -> (Vec<u8>, u8) {
        let mut out = pkt(seq, &[1]);
        out.extend(coldef(seq.wrapping_add(1)));
        let mut n = seq.wrapping_add(2);
        if !deprecate_eof {
            out.extend(eof(n, 2));
            n = n.wrapping_add(1);
        }
        for r in rows {
            out.extend(pkt(n, &[&[r.len() as u8][..], r.as_bytes()].concat()));
            n = n.wrapping_add(1);
        }
        out.extend(if deprecate_eof {
            ok_fe(n, status)
        } else {
            eof(n, status)
        });
        (out, n.wrapping_add(1))
    }
    fn rs(rows: &[&str]) -> Vec<u8> {
        result_set(1, rows, false, 2).0
    }
    /// A prepare's OK: statement id, columns, params, then their definitions and EOFs.
    fn prepare_ok(id: u32, columns: u16, params: u16, deprecate_eof: bool) -> Vec<u8> {
        let mut b = vec![0];
        b.extend_from_slice(&id.to_le_bytes());
        b.extend_from_slice(&columns.to_le_bytes());
        b.extend_from_slice(&params.to_le_bytes());
        b.extend_from_slice(&[0, 0, 0]);
        let mut out = pkt(1, &b);
        let mut seq = 2;
        for n in [params, columns] {
            for _ in 0..n {
                out.extend(coldef(seq));
                seq += 1;
            }
            if n > 0 && !deprecate_eof {
                out.extend(eof(seq, 2));
                seq += 1;
            }
        }
        out
    }
    fn execute(id: u32) -> Vec<u8> {
        // One parameter, the integer 42: never shown.
        let mut b = id.to_le_bytes().to_vec();
        b.extend_from_slice(&[0, 1, 0, 0, 0, 0, 1, 3, 0, 42, 0, 0, 0]);
        command(COM_STMT_EXECUTE, &b)
    }
    fn binary_rows(n: usize) -> Vec<u8> {
        // Column count 1, one definition, EOF, n binary rows, EOF.
        let mut out = [pkt(1, &[1]), coldef(2), eof(3, 2)].concat();
        let mut seq = 4u8;
        for _ in 0..n {
            out.extend(pkt(seq, &[0, 0, 7, 0, 0, 0]));
            seq = seq.wrapping_add(1);
        }
        out.extend(eof(seq, 2));
        out
    }

    #[test]
    fn detection() {
        assert!(is_connection_start(&greeting()));
        assert!(is_connection_start(&greeting()[..64]));
        assert!(!is_connection_start(&greeting()[..10]));
        assert!(is_greeting(&greeting()[..8], false));
        assert!(is_connection_start(&query("select 1")));
        assert!(is_connection_start(&query("  SELECT * FROM t")));
        assert!(is_connection_start(&query("/* app */ select 1")));
        assert!(is_connection_start(&query("(select 1) union (select 2)")));
        assert!(is_connection_start(&command(
            COM_STMT_PREPARE,
            b"insert into kv values (?, ?)"
        )));
        assert!(is_connection_start(&[1, 0, 0, 0, COM_PING]));
        // A server's reply on a connection picked up mid-stream: a result set, an error.
        assert!(is_connection_start(&rs(&["a"])[..13]));
        assert!(!is_connection_start(&rs(&["a"])[..12]));
        // MariaDB's count with its metadata byte (a real reply of mariadbd 10.11).
        let mariadb = b"\x02\x00\x00\x01\x01\x01\x29\x00\x00\x02\x03def\x04shop";
        assert!(is_connection_start(mariadb));
        assert!(is_connection_start(&err(
            1,
            1064,
            "42000",
            "You have an error"
        )));
        assert!(!is_connection_start(&err(
            2,
            1064,
            "42000",
            "You have an error"
        )));
        assert!(is_connection_start(&command(COM_INIT_DB, b"shop")));
        // A long query cut by the capture.
        let long = query(&format!("select '{}'", "x".repeat(200)));
        assert!(is_connection_start(&long[..64]));
        // Not MySQL, or not a start: responses, other commands, other protocols.
        assert!(!is_connection_start(&ok(1, 0, 0, 2)));
        assert!(!is_connection_start(&handshake_response(CAPS)));
        // An execute of a statement prepared out of sight: one iteration, flags ≤ 0x0f.
        assert!(is_connection_start(&execute(1)));
        let mut two_iterations = execute(1);
        two_iterations[10] = 2;
        assert!(!is_connection_start(&two_iterations));
        assert!(!is_connection_start(&query("1")));
        assert!(!is_connection_start(&query("\u{1}\u{2}ab")));
        assert!(!is_connection_start(&query("select 1")[..8]));
        assert!(!is_connection_start(&[1, 0, 0, 0, COM_QUIT]));
        assert!(!is_connection_start(b"GET / HTTP/1.1\r\n\r\n"));
        assert!(!is_connection_start(b"*1\r\n$4\r\nPING\r\n"));
        assert!(!is_connection_start(b"get user:1\r\n"));
        assert!(!is_connection_start(b"Q\0\0\0\x0dSELECT 1\0"));
        assert!(!is_connection_start(&[0, 0, 0, 8, 4, 0xd2, 0x16, 0x2f]));
        assert!(!is_connection_start(&[0x16, 3, 1, 0, 0xa5, 1, 0, 0]));
        assert!(!is_connection_start(&[0; 16]));
        assert!(!is_connection_start(&[0xff; 16]));
    }

    fn cli_session() -> (Vec<u8>, Vec<u8>) {
        let client = [
            handshake_response(CAPS),
            query("select * from items where id > 1"),
            query("update items set name = 'z' where id < 3"),
            query("selec 1"),
            query("insert into items values (4, 'd')"),
            command(COM_QUIT, b""),
        ]
        .concat();
        let server = [
            greeting(),
            ok(2, 0, 0, 2),
            rs(&["b", "c"]),
            ok(1, 2, 0, 2),
            err(1, 1064, "42000", "You have an error in your SQL syntax"),
            ok(1, 1, 4, 2),
        ]
        .concat();
        (client, server)
    }

    #[test]
    fn handshake_queries_errors() {
        let (c, sv) = cli_session();
        let hs = handshake_response(CAPS).len();
        let greet = greeting().len();
        let mut d = Driver::new();
        d.seg(IN, &sv[..greet])
            .seg(OUT, &c[..hs])
            .seg(IN, &sv[greet..greet + 11])
            .seg(OUT, &c[hs..])
            .seg(IN, &sv[greet + 11..])
            .close();
        assert_eq!(
            d.summary(),
            vec![
                s(
                    "SELECT",
                    "select * from items where id > 1",
                    None,
                    Some("2")
                ),
                s(
                    "UPDATE",
                    "update items set name = 'z' where id < 3",
                    None,
                    Some("2")
                ),
                s("SELEC", "selec 1", Some("1064 (42000)"), None),
                s(
                    "INSERT",
                    "insert into items values (4, 'd')",
                    None,
                    Some("1")
                ),
            ]
        );
        assert_eq!(d.calls[0].req.bytes, 37);
        assert_eq!(d.calls[0].resp.bytes, rs(&["b", "c"]).len() as u64);
        assert_eq!(d.detail(0, "result_sets"), Some("1"));
        assert_eq!(d.detail(0, "command"), Some("query"));
        assert_eq!(d.detail(1, "affected_rows"), Some("2"));
        assert_eq!(d.calls[2].outcome, Outcome::ClientError);
        assert_eq!(
            d.detail(2, "error"),
            Some("You have an error in your SQL syntax")
        );
        assert_eq!(d.detail(3, "last_insert_id"), Some("4"));
        assert_eq!(d.calls[3].version, "4.1");
        // The login (user, scramble) is in no call.
        assert!(d
            .calls
            .iter()
            .all(|c| !c.resource.contains("root") && !c.resource.contains("secret")));
        assert_eq!(d.p.deprecate_eof, Some(false));
        // QUIT gets no reply.
        assert_eq!(
            d.stats,
            ParseStats {
                unreplied_requests: 1,
                ..ParseStats::default()
            }
        );
    }

    /// Every split of both directions' bytes gives the same calls, the handshake's too.
    #[test]
    fn every_byte_split() {
        let (c, sv) = cli_session();
        let hs = handshake_response(CAPS).len();
        let (greet, auth_ok) = (greeting().len(), 11);
        let want = {
            let mut d = Driver::connected(CAPS);
            d.seg(OUT, &c[hs..]).seg(IN, &sv[greet + auth_ok..]).close();
            d.summary()
        };
        assert_eq!(want.len(), 4);
        let check = |d: &Driver, what: &str| {
            assert_eq!(d.summary(), want, "{what}");
            assert_eq!(d.stats.unreplied_requests, 1, "{what}");
            assert_eq!(
                d.stats.desyncs + d.stats.damaged_messages + d.stats.unparsed_bytes,
                0,
                "{what}"
            );
        };
        for i in 0..=c.len() - hs {
            for j in 0..=sv.len() - greet - auth_ok {
                let (c, sv) = (&c[hs..], &sv[greet + auth_ok..]);
                let mut d = Driver::connected(CAPS);
                d.seg(OUT, &c[..i])
                    .seg(OUT, &c[i..])
                    .seg(IN, &sv[..j])
                    .seg(IN, &sv[j..])
                    .close();
                check(&d, &format!("split {i} {j}"));
            }
        }
        // The handshake: greeting, response and OK each split anywhere.
        for i in 1..greet {
            for k in 1..hs {
                let mut d = Driver::new();
                d.seg(IN, &sv[..i])
                    .seg(IN, &sv[i..greet])
                    .seg(OUT, &c[..k])
                    .seg(OUT, &c[k..hs])
                    .seg(IN, &sv[greet..greet + 5])
                    .seg(IN, &sv[greet + 5..greet + auth_ok])
                    .seg(OUT, &c[hs..])
                    .seg(IN, &sv[greet + auth_ok..])
                    .close();
                check(&d, &format!("handshake split {i} {k}"));
            }
        }
    }

    /// A CALL (or a multi-statement query): several results, one call.
    #[test]
    fn more_results_make_one_call() {
        let (first, next) = result_set(1, &["1", "2", "3"], false, 0x2a);
        let (second, next) = result_set(next, &["3"], false, 0x2a);
        let server = [first, second, ok(next, 0, 0, 0x22)].concat();
        let mut d = Driver::connected(CAPS);
        d.seg(OUT, &query("call two()"))
            .seg(IN, &server)
            .seg(OUT, &query("select 1"))
            .seg(IN, &rs(&["1"]));
        assert_eq!(
            d.summary(),
            vec![
                s("CALL", "call two()", None, Some("4")),
                s("SELECT", "select 1", None, Some("1")),
            ]
        );
        assert_eq!(d.detail(0, "result_sets"), Some("2"));
        assert_eq!(d.calls[0].resp.bytes, server.len() as u64);
        // An error after a first result ends the call, failed.
        let (first, next) = result_set(1, &["1"], false, 0x0a);
        let mut d = Driver::connected(CAPS);
        d.seg(OUT, &query("select 1; selec 2"))
            .seg(IN, &[first, err(next, 1064, "42000", "syntax")].concat())
            .seg(OUT, &query("select 1"))
            .seg(IN, &rs(&["1"]));
        assert_eq!(
            d.summary(),
            vec![
                s("SELECT", "select 1; selec 2", Some("1064 (42000)"), None),
                s("SELECT", "select 1", None, Some("1")),
            ]
        );
        assert_eq!(d.stats, ParseStats::default());
    }

    /// MariaDB Connector/J's pipeline: a prepare and executes of statement id 0xFFFFFFFF
    /// ("the one prepared last") in one write, before any answer. Each execute is a call with
    /// the prepare's SQL, paired in order with its answer.
    #[test]
    fn executes_of_the_last_prepared_statement_name_its_sql() {
        let sql = "INSERT INTO pipe (k, v) VALUES (?, ?)";
        let mut d = Driver::connected(CAPS);
        let mut w = command(COM_STMT_PREPARE, sql.as_bytes());
        for _ in 0..3 {
            w.extend(execute(u32::MAX));
        }
        d.seg(OUT, &w);
        let mut r = prepare_ok(12, 0, 2, false);
        for _ in 0..3 {
            r.extend(ok(1, 1, 0, 2));
        }
        d.seg(IN, &r).close();
        let insert = s("INSERT", sql, None, Some("1"));
        assert_eq!(
            d.summary(),
            vec![
                s("PREPARE", sql, None, None),
                insert.clone(),
                insert.clone(),
                insert
            ]
        );
        // Before any prepare, such an execute says so.
        let mut d = Driver::connected(CAPS);
        d.seg(OUT, &execute(u32::MAX))
            .seg(IN, &ok(1, 1, 0, 2))
            .close();
        assert_eq!(
            d.summary(),
            vec![s("EXECUTE", "EXECUTE (last prepared)", None, Some("1"))]
        );
    }

    #[test]
    fn prepared_statements() {
        let mut d = Driver::connected(CAPS);
        d.seg(
            OUT,
            &command(COM_STMT_PREPARE, b"select v from kv where k >= ?"),
        )
        .seg(IN, &prepare_ok(7, 1, 1, false))
        .seg(OUT, &execute(7))
        .seg(IN, &binary_rows(3))
        .seg(
            OUT,
            &command(COM_STMT_SEND_LONG_DATA, &[7, 0, 0, 0, 0, 0, b'x']),
        )
        .seg(OUT, &command(COM_STMT_RESET, &[7, 0, 0, 0]))
        .seg(IN, &ok(1, 0, 0, 2))
        .seg(OUT, &execute(7))
        .seg(
            IN,
            &err(1, 1062, "23000", "Duplicate entry '42' for key 'PRIMARY'"),
        )
        .seg(OUT, &command(COM_STMT_CLOSE, &[7, 0, 0, 0]))
        .seg(OUT, &execute(7))
        .seg(IN, &ok(1, 1, 0, 2))
        .close();
        let sql = "select v from kv where k >= ?";
        assert_eq!(
            d.summary(),
            vec![
                s("PREPARE", sql, None, None),
                s("SELECT", sql, None, Some("3")),
                s("STMT_RESET", sql, None, Some("0")),
                s("SELECT", sql, Some("1062 (23000)"), None),
                s("EXECUTE", "EXECUTE 7", None, Some("1")),
            ]
        );
        assert_eq!(d.detail(0, "statement_id"), Some("7"));
        assert_eq!(d.detail(1, "statement_id"), Some("7"));
        assert_eq!(d.detail(1, "command"), Some("stmt_execute"));
        assert_eq!(d.calls[3].outcome, Outcome::ClientError);
        // Parameters (42) never show.
        assert!(d.calls.iter().all(|c| !c.resource.contains("42")));
        assert_eq!(
            d.calls[0].resp.bytes,
            prepare_ok(7, 1, 1, false).len() as u64
        );
        assert_eq!(d.stats.unreplied_requests, 2);
        assert_eq!(d.stats.unmatched_responses + d.stats.desyncs, 0);
        assert_eq!(d.stats.unanswered_requests, 0);
    }

    #[test]
    fn prepare_failure_and_no_definitions() {
        let mut d = Driver::connected(CAPS);
        d.seg(OUT, &command(COM_STMT_PREPARE, b"select * from nope"))
            .seg(
                IN,
                &err(1, 1146, "42S02", "Table 'shop.nope' doesn't exist"),
            )
            .seg(OUT, &command(COM_STMT_PREPARE, b"create table t (k int)"))
            .seg(IN, &prepare_ok(1, 0, 0, false))
            .seg(OUT, &execute(1))
            .seg(IN, &ok(1, 0, 0, 2));
        assert_eq!(
            d.summary(),
            vec![
                s("PREPARE", "select * from nope", Some("1146 (42S02)"), None),
                s("PREPARE", "create table t (k int)", None, None),
                s("CREATE", "create table t (k int)", None, Some("0")),
            ]
        );
    }

    /// CLIENT_DEPRECATE_EOF negotiated: no EOF after the definitions, an OK (0xFE) at the end.
    #[test]
    fn deprecate_eof_from_the_handshake() {
        let caps = CAPS | CLIENT_DEPRECATE_EOF;
        let mut d = Driver::connected(caps);
        assert_eq!(d.p.deprecate_eof, Some(true));
        let (empty, _) = result_set(1, &[], true, 2);
        d.seg(OUT, &query("select id from items"))
            .seg(IN, &result_set(1, &["1", "2"], true, 2).0)
            .seg(OUT, &query("select id from items where 0"))
            .seg(IN, &empty)
            .seg(
                OUT,
                &command(COM_STMT_PREPARE, b"select id from items where id = ?"),
            )
            .seg(IN, &prepare_ok(1, 1, 1, true))
            .seg(OUT, &query("select 1"))
            .seg(IN, &result_set(1, &["1"], true, 2).0);
        assert_eq!(
            d.summary(),
            vec![
                s("SELECT", "select id from items", None, Some("2")),
                s("SELECT", "select id from items where 0", None, Some("0")),
                s("PREPARE", "select id from items where id = ?", None, None),
                s("SELECT", "select 1", None, Some("1")),
            ]
        );
        assert_eq!(d.stats, ParseStats::default());
    }

    /// Without the handshake, EOFs are told from OKs by their length, both ways.
    #[test]
    fn deprecate_eof_inferred_mid_stream() {
        for deprecate in [false, true] {
            let mut d = Driver::new();
            d.seg(OUT, &query("select id from items where 0"))
                .seg(IN, &result_set(1, &[], deprecate, 2).0)
                .seg(OUT, &query("select id from items"))
                .seg(IN, &result_set(1, &["1", "2"], deprecate, 2).0)
                .seg(OUT, &command(COM_STMT_PREPARE, b"select ? + 1"))
                .seg(IN, &prepare_ok(2, 1, 1, deprecate))
                .seg(OUT, &query("select 1"))
                .seg(IN, &result_set(1, &["1"], deprecate, 2).0)
                .close();
            assert_eq!(
                d.summary(),
                vec![
                    s("SELECT", "select id from items where 0", None, Some("0")),
                    s("SELECT", "select id from items", None, Some("2")),
                    s("PREPARE", "select ? + 1", None, None),
                    s("SELECT", "select 1", None, Some("1")),
                ],
                "deprecate_eof {deprecate}"
            );
            assert_eq!(d.p.deprecate_eof, Some(deprecate));
            assert_eq!(d.stats, ParseStats::default(), "deprecate_eof {deprecate}");
        }
    }

    /// A prepare of one group of definitions, EOF use unknown: the next packet tells.
    #[test]
    fn prepare_tail_when_eof_use_is_unknown() {
        for deprecate in [false, true] {
            let resp = prepare_ok(3, 0, 2, deprecate);
            let mut d = Driver::new();
            d.seg(
                OUT,
                &command(COM_STMT_PREPARE, b"insert into kv values (?, ?)"),
            )
            .seg(IN, &resp)
            .seg(OUT, &execute(3))
            .seg(IN, &ok(1, 1, 0, 2))
            .close();
            assert_eq!(
                d.summary(),
                vec![
                    s("PREPARE", "insert into kv values (?, ?)", None, None),
                    s("INSERT", "insert into kv values (?, ?)", None, Some("1")),
                ],
                "deprecate_eof {deprecate}"
            );
            assert_eq!(d.calls[0].resp.bytes, resp.len() as u64);
            assert_eq!(d.stats, ParseStats::default());
            // The last thing on the connection: made at close.
            let mut d = Driver::new();
            d.seg(
                OUT,
                &command(COM_STMT_PREPARE, b"insert into kv values (?, ?)"),
            )
            .seg(IN, &resp)
            .close();
            assert_eq!(d.calls.len(), 1);
            assert_eq!(d.stats, ParseStats::default());
        }
    }

    /// MariaDB's metadata cache: a column count followed by 0 has no definitions.
    #[test]
    fn mariadb_metadata_skipped() {
        let server = [
            pkt(1, &[2, 0]),
            eof(2, 2),
            pkt(3, &[0, 0, 2, 0, 0, 0, 2, b'v', b'2']),
            pkt(4, &[0, 0, 3, 0, 0, 0, 2, b'v', b'3']),
            eof(5, 2),
        ]
        .concat();
        let mut d = Driver::connected(CAPS);
        d.seg(
            OUT,
            &command(COM_STMT_PREPARE, b"select k, v from kv where k >= ?"),
        )
        .seg(IN, &prepare_ok(3, 2, 1, false))
        .seg(OUT, &execute(3))
        .seg(IN, &server);
        assert_eq!(d.calls.len(), 2);
        assert_eq!(d.detail(1, "rows"), Some("2"));
        assert_eq!(d.stats, ParseStats::default());
    }

    #[test]
    fn simple_commands() {
        let mut d = Driver::connected(CAPS);
        d.seg(OUT, &[1, 0, 0, 0, COM_PING])
            .seg(IN, &ok(1, 0, 0, 2))
            .seg(OUT, &command(COM_INIT_DB, b"shop"))
            .seg(IN, &ok(1, 0, 0, 2))
            .seg(OUT, &command(COM_INIT_DB, b"nope"))
            .seg(IN, &err(1, 1049, "42000", "Unknown database 'nope'"))
            .seg(OUT, &command(COM_FIELD_LIST, b"items\0"))
            .seg(IN, &[coldef(1), coldef(2), eof(3, 2)].concat())
            .seg(OUT, &command(COM_STATISTICS, b""))
            .seg(IN, &pkt(1, b"Uptime: 10  Threads: 1  Questions: 9"))
            .seg(OUT, &command(0x1f, b""))
            .seg(IN, &ok(1, 0, 0, 2))
            // CHANGE_USER with an auth switch: the client's answer is no command.
            .seg(
                OUT,
                &command(COM_CHANGE_USER, b"app\0\x14secretsecretsecret12"),
            )
            .seg(IN, &pkt(2, b"\xfemysql_native_password\0scramble"))
            .seg(OUT, &pkt(3, b"secretsecretsecret12"))
            .seg(IN, &ok(4, 0, 0, 2))
            .seg(OUT, &command(COM_QUIT, b""))
            .close();
        assert_eq!(
            d.summary(),
            vec![
                s("PING", "", None, Some("0")),
                s("INIT_DB", "shop", None, Some("0")),
                s("INIT_DB", "nope", Some("1049 (42000)"), None),
                s("FIELD_LIST", "items", None, Some("0")),
                s("STATISTICS", "", None, Some("0")),
                s("RESET_CONNECTION", "", None, Some("0")),
                s("CHANGE_USER", "", None, Some("0")),
            ]
        );
        assert!(d.calls.iter().all(|c| !c.resource.contains("secret")));
        assert_eq!(d.stats.unreplied_requests, 1);
        assert_eq!(d.stats.unmatched_responses + d.stats.desyncs, 0);
    }

    #[test]
    fn auth_switch_and_more_data() {
        let mut d = Driver::new();
        d.seg(IN, &greeting())
            .seg(OUT, &handshake_response(CAPS))
            .seg(
                IN,
                &pkt(2, b"\xfecaching_sha2_password\0scramble12345678901\0"),
            )
            .seg(OUT, &pkt(3, b"secretsecretsecretsecretsecret12"))
            .seg(IN, &pkt(4, b"\x01\x04"))
            .seg(OUT, &pkt(5, b"password\0"))
            .seg(IN, &ok(6, 0, 0, 2))
            .seg(OUT, &query("select 1"))
            .seg(IN, &rs(&["1"]));
        assert_eq!(d.summary(), vec![s("SELECT", "select 1", None, Some("1"))]);
        assert_eq!(d.stats, ParseStats::default());
        // Access denied: the connection ends; nothing is a call.
        let mut d = Driver::new();
        d.seg(IN, &greeting())
            .seg(OUT, &handshake_response(CAPS))
            .seg(IN, &err(2, 1045, "28000", "Access denied for user 'root'"))
            .close();
        assert!(d.calls.is_empty());
        assert_eq!(d.stats, ParseStats::default());
    }

    #[test]
    fn ssl_request_and_compression_stop_parsing() {
        // SSLRequest: the fixed part only, CLIENT_SSL set; TLS follows.
        let ssl = pkt(1, &handshake_response(CAPS | CLIENT_SSL)[4..36]);
        let mut d = Driver::new();
        d.seg(IN, &greeting())
            .seg(OUT, &ssl)
            .seg(OUT, b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03")
            .seg(IN, b"\x16\x03\x03\x00\x7a\x02")
            .seg(OUT, &query("select 1"))
            .close();
        assert!(d.calls.is_empty());
        assert_eq!(d.stats.desyncs, 0, "TLS is no loss");
        assert_eq!(d.stats.unparsed_bytes, 11 + 6 + 13);
        // CLIENT_COMPRESS negotiated: compressed packets after the OK are not parsed.
        let mut d = Driver::connected(CAPS | CLIENT_COMPRESS);
        let compressed = [&[13, 0, 0, 0, 0, 0, 0][..], &query("select 1")].concat();
        d.seg(OUT, &compressed)
            .seg(IN, &[&[40, 0, 0, 1, 0, 0, 0][..], &rs(&["1"])].concat())
            .close();
        assert!(d.calls.is_empty());
        assert_eq!(d.stats.desyncs, 1);
        // Offered by the client alone (the server did not): plain packets.
        let mut d = Driver::new();
        let mut g = greeting();
        g[4 + 1 + 23 + 4 + 9] &= !(CLIENT_COMPRESS as u8);
        d.seg(IN, &g)
            .seg(OUT, &handshake_response(CAPS | CLIENT_COMPRESS))
            .seg(IN, &ok(2, 0, 0, 2))
            .seg(OUT, &query("select 1"))
            .seg(IN, &rs(&["1"]));
        assert_eq!(d.calls.len(), 1);
    }

    #[test]
    fn picked_up_mid_stream() {
        let mut d = Driver::new();
        // The tail of a result set, then whole exchanges.
        d.seg(IN, b"\x02v3\x05\x00\x00\x09\xfe\x00\x00\x02\x00")
            .seg(OUT, &execute(9))
            .seg(IN, &binary_rows(2))
            .seg(OUT, &query("select 2"))
            .seg(IN, &rs(&["2"]))
            .close();
        assert_eq!(
            d.summary(),
            vec![
                s("EXECUTE", "EXECUTE 9", None, Some("2")),
                s("SELECT", "select 2", None, Some("2").map(|_| "1")),
            ]
        );
        assert_eq!(d.stats.desyncs, 0);
        assert_eq!(d.stats.unmatched_responses, 0);
        // The client's bytes start inside a packet: synced at the next command.
        let mut d = Driver::new();
        d.seg(OUT, b"re id > 7")
            .seg(IN, &rs(&["1"]))
            .seg(OUT, &query("select 3"))
            .seg(IN, &rs(&["3"]));
        assert_eq!(d.summary(), vec![s("SELECT", "select 3", None, Some("1"))]);
    }

    #[test]
    fn pipelined_commands() {
        let client = [
            query("select 1"),
            query("update t set x = 1"),
            command(COM_STMT_CLOSE, &[1, 0, 0, 0]),
            [1, 0, 0, 0, COM_PING].to_vec(),
        ]
        .concat();
        let server = [rs(&["1"]), ok(1, 3, 0, 2), ok(1, 0, 0, 2)].concat();
        let mut d = Driver::connected(CAPS);
        d.seg(OUT, &client).seg(IN, &server).close();
        assert_eq!(
            d.summary(),
            vec![
                s("SELECT", "select 1", None, Some("1")),
                s("UPDATE", "update t set x = 1", None, Some("3")),
                s("PING", "", None, Some("0")),
            ]
        );
        assert_eq!(d.calls[0].req.syscalls, 1);
        let req: u64 = d.calls.iter().map(|c| c.req.bytes).sum();
        assert_eq!(req, (client.len() - 9) as u64);
        let resp: u64 = d.calls.iter().map(|c| c.resp.bytes).sum();
        assert_eq!(resp, server.len() as u64);
    }

    #[test]
    fn local_infile() {
        let mut d = Driver::connected(CAPS);
        d.seg(
            OUT,
            &query("load data local infile '/tmp/x.csv' into table t"),
        )
        .seg(IN, &pkt(1, b"\xfb/tmp/x.csv"))
        .seg(OUT, &pkt(2, b"1,a\n2,b\n"))
        .seg(OUT, &pkt(3, b""))
        .seg(IN, &ok(4, 2, 0, 2))
        .seg(OUT, &query("select 1"))
        .seg(IN, &rs(&["1"]));
        assert_eq!(
            d.summary(),
            vec![
                s(
                    "LOAD",
                    "load data local infile '/tmp/x.csv' into table t",
                    None,
                    Some("2")
                ),
                s("SELECT", "select 1", None, Some("1")),
            ]
        );
        // The file's packets count in the request.
        let q = query("load data local infile '/tmp/x.csv' into table t");
        assert_eq!(d.calls[0].req.bytes, (q.len() + 12 + 4) as u64);
        assert_eq!(d.stats, ParseStats::default());
    }

    #[test]
    fn progress_reports_are_no_errors() {
        let progress = pkt(1, b"\xff\xff\xff\x01\x01\x01\x10\x27\x00\x00\x05stage");
        let mut d = Driver::connected(CAPS);
        d.seg(OUT, &query("alter table t add column y int"))
            .seg(IN, &progress)
            .seg(IN, &ok(2, 0, 0, 2));
        assert_eq!(
            d.summary(),
            vec![s(
                "ALTER",
                "alter table t add column y int",
                None,
                Some("0")
            )]
        );
    }

    #[test]
    fn gaps() {
        // Inside a row of known length: bytes skipped, the call goes on.
        let big = pkt(4, &[&[0xfc, 0x10, 0x27][..], &[b'y'; 10_000]].concat());
        let server = [pkt(1, &[1]), coldef(2), eof(3, 2), big.clone(), eof(5, 2)].concat();
        let head = server.len() - big.len() - 9;
        let mut d = Driver::connected(CAPS);
        d.seg(OUT, &query("select y from t"))
            .seg(IN, &server[..head + 100])
            .gap(IN, Some(9000))
            .seg(IN, &server[head + 9100..]);
        assert_eq!(
            d.summary(),
            vec![s("SELECT", "select y from t", None, Some("1"))]
        );
        assert!(d.calls[0].truncated);
        assert_eq!(d.calls[0].resp.bytes, server.len() as u64);
        // An unknown loss in the server's stream: resync at the next response; the call it
        // was answering ended (with a status) out of sight: counted, not made.
        let mut d = Driver::connected(CAPS);
        d.seg(OUT, &query("select 1"))
            .seg(IN, &rs(&["1"])[..10])
            .gap(IN, None)
            .seg(IN, b"\x01xyz garbage")
            .seg(OUT, &query("select 2"))
            .seg(IN, &rs(&["2"]));
        assert_eq!(d.summary(), vec![s("SELECT", "select 2", None, Some("1"))]);
        // Damaged: the response cut by the gap, and its call.
        assert_eq!((d.stats.desyncs, d.stats.damaged_messages), (1, 2));
        assert_eq!(d.stats.inferred_ends, 0);
        // The client's stream: the call before the unseen bytes still pairs; seen from the
        // client, none after them can (how many commands went unseen is unknown).
        let mut d = Driver::connected(CAPS);
        d.seg(OUT, &query("select 1"))
            .gap(OUT, Some(100))
            .seg(OUT, &query("select 2"))
            .seg(IN, &rs(&["1"]))
            .seg(IN, &rs(&["2"]));
        assert_eq!(d.summary(), vec![s("SELECT", "select 1", None, Some("1"))]);
        assert_eq!(d.stats.damaged_messages, 1);
    }

    #[test]
    fn garbage_never_makes_calls() {
        let mut d = Driver::new();
        d.seg(OUT, b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
            .seg(IN, b"HTTP/1.1 200 OK\r\n\r\n")
            .seg(OUT, b"*1\r\n$4\r\nPING\r\n")
            .close();
        assert!(d.calls.is_empty());
        // In sync, then an unknown command byte: out of sync, nothing made of it.
        let mut d = Driver::connected(CAPS);
        d.seg(OUT, &command(0x77, b"xyz")).seg(IN, &ok(1, 0, 0, 2));
        assert!(d.calls.is_empty());
        assert_eq!(d.stats.desyncs, 1);
    }

    /// A query and a row of more than 0xffffff bytes: continued in further packets.
    #[test]
    fn continuation_packets() {
        let sql_len = MAX_PACKET as usize + 100;
        // The query: a full packet and a 101-byte one, captured 64 bytes of each syscall.
        let mut first = pkt(0, b"\x03select '");
        first[0..3].copy_from_slice(&[0xff, 0xff, 0xff]);
        let second = pkt(1, &[b'x'; 101]);
        let mut d = Driver::connected(CAPS);
        d.seg_cut(OUT, &first, MAX_PACKET as u64 + 4)
            .seg(OUT, &second);
        // The response: one row of 0xffffff + 5 bytes.
        let head = [pkt(1, &[1]), coldef(2), eof(3, 2)].concat();
        let mut row1 = vec![0xff, 0xff, 0xff, 4, 0xfd, 0x04, 0x00, 0x00];
        row1.extend_from_slice(b"yyyy");
        let row2 = pkt(5, b"yyyyy");
        d.seg(IN, &head)
            .seg_cut(IN, &row1, MAX_PACKET as u64 + 4)
            .seg(IN, &row2)
            .seg(IN, &eof(6, 2))
            .close();
        assert_eq!(d.summary(), vec![s("SELECT", "select '", None, Some("1"))]);
        assert_eq!(d.calls[0].req.bytes, (sql_len + 4 + 5) as u64);
        assert!(d.calls[0].truncated);
        assert_eq!(d.stats, ParseStats::default());
    }

    /// 100 MB of rows through the parser, fully captured: its buffers stay small.
    #[test]
    fn huge_result_set_in_flat_memory() {
        // 256 rows of 4000 bytes (sequence ids wrap), repeated: about 1 MB a chunk.
        let mut chunk = Vec::new();
        for i in 0..256u32 {
            let seq = (i + 4) as u8;
            chunk.extend(pkt(seq, &[&[0xfc, 0x9d, 0x0f][..], &[b'r'; 3997]].concat()));
        }
        let mut d = Driver::connected(CAPS);
        d.seg(OUT, &query("select r from big"))
            .seg(IN, &[pkt(1, &[1]), coldef(2), eof(3, 2)].concat());
        let mut peak = 0;
        for _ in 0..100 {
            for piece in chunk.chunks(65536) {
                d.seg(IN, piece);
                peak = peak.max(d.p.buffered_bytes());
            }
        }
        d.seg(IN, &eof(4, 2));
        assert_eq!(d.detail(0, "rows"), Some("25600"));
        assert!(d.calls[0].resp.bytes > 100_000_000);
        assert!(peak <= 2 * KEEP_CLIENT, "peak {peak}");
        assert_eq!(d.stats, ParseStats::default());
    }

    #[test]
    fn statement_cache_is_bounded() {
        let mut d = Driver::connected(CAPS);
        for id in 1..=MAX_STATEMENTS as u32 + 1 {
            d.seg(
                OUT,
                &command(COM_STMT_PREPARE, format!("select {id}").as_bytes()),
            )
            .seg(IN, &prepare_ok(id, 1, 0, false));
        }
        assert_eq!(d.p.statements.len(), MAX_STATEMENTS);
        d.seg(OUT, &execute(1))
            .seg(IN, &ok(1, 0, 0, 2))
            .seg(OUT, &execute(2))
            .seg(IN, &ok(1, 0, 0, 2));
        let n = d.calls.len();
        assert_eq!(d.calls[n - 2].resource, "EXECUTE 1");
        assert_eq!(d.calls[n - 1].resource, "select 2");
    }

    #[test]
    fn error_codes_and_outcomes() {
        let packet = err(1, 1205, "HY000", "Lock wait timeout exceeded");
        let e = parse_error(&packet[4..], packet.len() as u64 - 4);
        assert_eq!(e.status_text().as_deref(), Some("1205 (HY000)"));
        assert_eq!(sqlstate_outcome("HY000"), Outcome::ServerError);
        assert_eq!(sqlstate_outcome("08S01"), Outcome::ServerError);
        assert_eq!(sqlstate_outcome("23000"), Outcome::ClientError);
        assert_eq!(sqlstate_outcome("42S02"), Outcome::ClientError);
        // Without the 4.1 SQLSTATE marker: the code alone.
        let body = b"\xff\x10\x04Too many connections";
        let e = parse_error(body, body.len() as u64);
        assert_eq!(
            (e.status_text().as_deref(), e.message.as_str()),
            (Some("1040"), "Too many connections")
        );
        let mut at = 0;
        assert_eq!(lenenc(&[0xfc, 0x10, 0x27], &mut at), Some(10_000));
        assert_eq!(at, 3);
        assert_eq!(lenenc(&[0xfe, 1, 2], &mut 0), None);
    }

    // Issue 43 item 1: after a loss, no reply paired unless provably its command's.

    /// Seen from the server: the greeting goes out, commands come in.
    fn served() -> Driver {
        let mut d = Driver::new();
        d.seg(OUT, &greeting())
            .seg(IN, &handshake_response(CAPS))
            .seg(OUT, &ok(2, 0, 0, 2));
        d
    }

    #[test]
    fn a_lost_error_makes_no_ok_call() {
        // The write that held SELEC's ERR went unseen: the call is counted, not made (its
        // status never seen); the next command pairs with its own response.
        let mut d = served();
        d.seg(IN, &query("selec 1"))
            .seg_cut(OUT, &[], 60)
            .seg(IN, &query("select 2"))
            .seg(OUT, &rs(&["2"]));
        assert_eq!(d.summary(), vec![s("SELECT", "select 2", None, Some("1"))]);
        assert_eq!((d.stats.desyncs, d.stats.damaged_messages), (1, 1));
    }

    #[test]
    fn an_error_cut_before_its_sqlstate_is_unknown() {
        let e = err(1, 1062, "23000", "Duplicate entry '1'");
        let mut d = Driver::connected(CAPS);
        d.seg(OUT, &query("insert into t values (1)"))
            .seg_cut(IN, &e[..7], e.len() as u64)
            .seg(OUT, &query("insert into t values (1)"))
            .seg(IN, &e);
        let got: Vec<_> = d
            .calls
            .iter()
            .map(|c| (c.status_text.as_deref(), c.outcome))
            .collect();
        assert_eq!(
            got,
            vec![
                (Some("1062"), Outcome::Unknown),
                (Some("1062 (23000)"), Outcome::ClientError)
            ]
        );
    }

    #[test]
    fn an_ok_cut_before_its_status_is_unknown() {
        // CALL's first OK says more results follow, but its flags went unseen: the call is
        // unknown (no rows); the next result's packets answer no command (not sequence id 1).
        let first = ok(1, 1, 0, 2 | SERVER_MORE_RESULTS_EXISTS);
        let mut d = Driver::connected(CAPS);
        d.seg(OUT, &query("call p()"))
            .seg_cut(IN, &first[..7], first.len() as u64)
            .seg(IN, &ok(2, 0, 0, 2))
            .seg(OUT, &query("select 2"))
            .seg(IN, &rs(&["2"]));
        assert_eq!(
            d.summary(),
            vec![
                s("CALL", "call p()", None, None),
                s("SELECT", "select 2", None, Some("1"))
            ]
        );
        assert_eq!(d.calls[0].outcome, Outcome::Unknown);
        assert_eq!(d.stats.unmatched_responses, 1);
    }

    #[test]
    fn unseen_commands_are_a_marker_in_the_queue() {
        // Seen from the server: the command before the unseen one still pairs; the unseen
        // one's answer pairs with none; a response written after the next command's read
        // answers it.
        let mut d = served();
        d.seg(IN, &query("select 1"))
            .seg(OUT, &rs(&["1"]))
            .gap(IN, Some(20))
            .seg(OUT, &ok(1, 0, 0, 2))
            .seg(IN, &query("select 3"))
            .seg(OUT, &rs(&["3", "4"]));
        assert_eq!(
            d.summary(),
            vec![
                s("SELECT", "select 1", None, Some("1")),
                s("SELECT", "select 3", None, Some("2"))
            ]
        );
        assert_eq!(d.stats.unmatched_responses, 1);
        // Seen from the client, any number of commands may have gone unseen: nothing after
        // them pairs, and each such command is counted.
        let mut d = Driver::connected(CAPS);
        d.seg(OUT, &query("select 1"))
            .gap(OUT, Some(20))
            .seg(IN, &rs(&["1"]))
            .seg(IN, &ok(1, 0, 0, 2))
            .seg(OUT, &query("select 3"))
            .seg(IN, &rs(&["3", "4"]));
        assert_eq!(d.summary(), vec![s("SELECT", "select 1", None, Some("1"))]);
        assert_eq!(d.stats.damaged_messages, 1);
    }

    #[test]
    fn a_full_queue_counts_the_new_command_and_never_shifts_replies() {
        static NO_BUDGET: crate::protocols::matching::SharedBudget =
            crate::protocols::matching::SharedBudget::new(0);
        let mut d = Driver::connected(CAPS);
        d.p.pending = InOrder::with_budget(2, &NO_BUDGET);
        d.seg(OUT, &query("select 1"))
            .seg(OUT, &query("select 2"))
            .seg(OUT, &query("select 3"))
            .seg(OUT, &query("select 4"))
            .seg(IN, &rs(&["1"]))
            .seg(IN, &rs(&["2", "2"]))
            .seg(IN, &rs(&["3", "3", "3"]))
            .seg(IN, &rs(&["4", "4", "4", "4"]));
        assert_eq!(
            d.summary(),
            vec![
                s("SELECT", "select 1", None, Some("1")),
                s("SELECT", "select 2", None, Some("2"))
            ]
        );
        assert_eq!((d.stats.pending_dropped, d.stats.damaged_messages), (1, 1));
    }

    /// A result set of one column: the column count, its definition, an EOF, `rows` (each
    /// a length-encoded string) and the final EOF, sequence ids from 1.
    fn wide_result(rows: &[Vec<u8>]) -> Vec<u8> {
        let mut out = pkt(1, &[1]);
        out.extend(coldef(2));
        out.extend(eof(3, 2));
        let mut n = 4u8;
        for r in rows {
            let mut body = if r.len() < 251 {
                vec![r.len() as u8]
            } else {
                vec![0xfc, r.len() as u8, (r.len() >> 8) as u8]
            };
            body.extend_from_slice(r);
            out.extend(pkt(n, &body));
            n = n.wrapping_add(1);
        }
        out.extend(eof(n, 2));
        out
    }

    /// A row longer than the snaplen and the tail: its body covers the bytes unseen, so the
    /// tail is framed exactly where it lies (the next row and the final EOF): every header was
    /// seen, the rows are counted.
    #[test]
    fn a_body_over_the_unseen_bytes_leads_exactly_into_the_tail() {
        let mut d = Driver::connected(CAPS);
        let rs = wide_result(&[vec![b'x'; 20_000], b"y".to_vec()]);
        d.seg(OUT, &query("select big")).seg_snapped(IN, &rs, 4096);
        assert_eq!(
            d.summary(),
            vec![s("SELECT", "select big", None, Some("2"))]
        );
        assert_eq!(d.calls[0].resp.bytes, rs.len() as u64);
        assert_eq!(d.calls[0].resp.last_end_ns, d.now + 500);
    }

    /// Narrow rows beyond the snaplen: the final EOF is proven in the tail by the row before
    /// it, and ends the call at once with the response's exact bytes; the rows whose headers
    /// went unseen are not counted, so none are reported. A syscall without that end counts
    /// into the response and ends nothing.
    #[test]
    fn narrow_rows_end_in_the_tail_proven_by_the_row_before() {
        let mut d = Driver::connected(CAPS);
        let rows: Vec<Vec<u8>> = (0..2000).map(|i| format!("row {i}").into_bytes()).collect();
        let rs = wide_result(&rows);
        let (first, last) = rs.split_at(rs.len() / 2);
        d.seg(OUT, &query("select many"))
            .seg_snapped(IN, first, 4096);
        assert!(d.calls.is_empty());
        d.seg_snapped(IN, last, 4096);
        assert_eq!(d.summary(), vec![s("SELECT", "select many", None, None)]);
        assert_eq!(d.calls[0].outcome, Outcome::Ok);
        assert_eq!(d.calls[0].resp.bytes, rs.len() as u64);
        assert_eq!(d.calls[0].resp.syscalls, 2);
        assert_eq!((d.stats.desyncs, d.stats.damaged_messages), (0, 0));
    }

    /// Rows longer than a tail: the final EOF at a syscall's end is only a candidate, proven
    /// by the client's next command (the call then ends where that syscall did), disproved by
    /// more server bytes (an EOF-shaped end of a row's value), and never taken at the close.
    #[test]
    fn an_end_after_rows_longer_than_a_tail_waits_for_the_next_command() {
        let long = |c: u8| vec![c; 1000];
        // Proven: the next command comes before any more server bytes.
        let mut d = Driver::connected(CAPS);
        let big = wide_result(&[long(b'a'), long(b'b'), long(b'c'), long(b'd'), long(b'e')]);
        d.seg(OUT, &query("select wide"))
            .seg_snapped(IN, &big, 1024);
        let end = d.now + 500;
        assert!(d.calls.is_empty());
        d.seg(OUT, &query("select 1")).seg(IN, &rs(&["1"]));
        assert_eq!(
            d.summary(),
            vec![
                s("SELECT", "select wide", None, None),
                s("SELECT", "select 1", None, Some("1"))
            ]
        );
        assert_eq!(d.calls[0].resp.last_end_ns, end);
        assert_eq!(d.calls[0].resp.bytes, big.len() as u64);
        assert_eq!(d.calls[0].outcome, Outcome::Ok);

        // Disproved: a row whose value ends with an EOF's bytes where a write ends, then
        // the rest of the rows; the real end then comes, proven by the next command.
        let mut d = Driver::connected(CAPS);
        let mut fake = long(b'f');
        let at = fake.len() - 9;
        fake[at..].copy_from_slice(&eof(7, 2));
        let big = wide_result(&[long(b'a'), long(b'b'), fake, long(b'g'), long(b'h')]);
        let cut = 4 + 5 + coldef(2).len() + 9 + 3 * (4 + 3 + 1000);
        d.seg(OUT, &query("select wide"))
            .seg_snapped(IN, &big[..cut], 1024)
            .seg_snapped(IN, &big[cut..], 1024);
        let end = d.now + 500;
        d.seg(OUT, &query("select 1")).seg(IN, &rs(&["1"]));
        assert_eq!(d.calls.len(), 2);
        assert_eq!(d.calls[0].resp.last_end_ns, end);
        assert_eq!(d.calls[0].resp.bytes, big.len() as u64);

        // At the close, the candidate is no proof: the call is unanswered, as before.
        let mut d = Driver::connected(CAPS);
        let big = wide_result(&[long(b'a'), long(b'b'), long(b'c')]);
        d.seg(OUT, &query("select wide"))
            .seg_snapped(IN, &big, 1024)
            .close();
        assert!(d.calls.is_empty());
        assert_eq!(d.stats.unanswered_requests, 1);
    }

    /// Where a CPU budget may cut a connection (src/source/sampling.rs): a command's first
    /// bytes after the last one's answer, once authenticated; never once a command went out
    /// before the last answer or bytes were lost.
    #[test]
    fn a_turn_to_the_client_starts_a_call_only_while_commands_came_alone() {
        let mut d = Driver::connected(CAPS);
        d.seg(OUT, &query("UPDATE t SET a = 1"))
            .seg(IN, &ok(1, 1, 0, 2));
        d.seg(OUT, &query("UPDATE t SET a = 2"))
            .seg(IN, &ok(1, 1, 0, 2));
        assert_eq!(d.calls.len(), 2);
        assert_eq!(d.p.request_direction(), Some(OUT));

        let mut p = Driver::connected(CAPS);
        p.seg(OUT, &query("UPDATE t SET a = 1"))
            .seg(IN, &ok(1, 1, 0, 2)[..3]);
        p.seg(OUT, &query("UPDATE t SET a = 2"));
        assert_eq!(p.p.request_direction(), None);
        // Two commands in one segment: pipelining before any turn shows it.
        let mut b = Driver::connected(CAPS);
        b.seg(
            OUT,
            &[query("UPDATE t SET a = 1"), query("UPDATE t SET a = 2")].concat(),
        );
        assert_eq!(b.p.request_direction(), None);

        let mut g = Driver::connected(CAPS);
        g.seg(OUT, &query("UPDATE t SET a = 1")).gap(IN, Some(5));
        assert_eq!(g.p.request_direction(), None);
    }
}
