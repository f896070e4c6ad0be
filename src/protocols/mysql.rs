//! MySQL / MariaDB: the client/server protocol (4.1 and later) over a byte stream.
//!
//! Framing: every packet is a 3-byte little-endian payload length and a 1-byte sequence id; a
//! payload of 0xffffff bytes continues in the next packet (one logical message). Bodies are kept
//! up to a prefix ([`KEEP_CLIENT`], [`KEEP_SERVER`]); the rest, and anything beyond the snaplen,
//! is skipped by count, so a result set of any size goes through with flat memory.
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
//!   out of sight); parameters are never kept. `COM_STMT_FETCH`, `COM_STMT_RESET`: the
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

use super::matching::InOrder;
use super::postgres::{lossy, sql_keyword};
use super::{
    CapturedHead, L7Call, MessageSpan, Outcome, ParseDepth, ParseStats, ParserConfig, Protocol,
    ProtocolSpec, Segment, StreamParser,
};
use crate::event::Direction;

pub static SPEC: ProtocolSpec = ProtocolSpec {
    proto: Protocol::Mysql,
    detect: is_connection_start,
    new_parser: |cfg| Box::new(MysqlParser::new(cfg)),
};

/// Commands waiting for the server on one connection (deeper pipelining is evicted).
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
        _ if strict => false,
        COM_QUIT | COM_STATISTICS => len == 1,
        COM_STMT_EXECUTE => len >= 10 && body.get(5).is_some_and(|&f| f <= 0x0f),
        COM_STMT_CLOSE | COM_STMT_RESET => len == 5,
        COM_STMT_FETCH => len == 9,
        COM_FIELD_LIST => body.len() > 2 && body[1].is_ascii_graphic(),
        _ => false,
    }
}

/// Does `p`, the first bytes of a connection in some direction, start MySQL: the server's
/// greeting (protocol 10, a printable version string starting with a digit, NUL-terminated),
/// or a client's command (`COM_QUERY` or `COM_STMT_PREPARE` with SQL that starts with a word,
/// a parenthesis or a comment, `COM_PING`, `COM_INIT_DB`) whose length matches?
pub fn is_connection_start(p: &[u8]) -> bool {
    is_greeting(p) || plausible_command(p, true)
}

fn is_greeting(p: &[u8]) -> bool {
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
        && (end.is_some() || text.len() >= 8)
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
    Columns { left: u64 },
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
    code: u16,
    sqlstate: Option<String>,
    message: String,
}

impl MyError {
    fn status_text(&self) -> String {
        match &self.sqlstate {
            Some(s) => format!("{} ({s})", self.code),
            None => self.code.to_string(),
        }
    }
}

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
}

/// Bytes seen in one direction since a call last took them.
#[derive(Debug, Default)]
struct Acc {
    span: Option<MessageSpan>,
    last_seg: u64,
    truncated: bool,
}

impl Acc {
    fn touch(&mut self, seg_id: u64, seg: &Segment) {
        match self.span.as_mut() {
            None => {
                self.span = Some(MessageSpan::starting(seg));
                self.last_seg = seg_id;
            }
            Some(s) if self.last_seg != seg_id => {
                s.extend(seg);
                self.last_seg = seg_id;
            }
            Some(_) => {}
        }
    }
    fn add(&mut self, n: u64) {
        if let Some(s) = self.span.as_mut() {
            s.bytes = s.bytes.saturating_add(n);
        }
    }
    fn take(&mut self) -> (MessageSpan, bool) {
        let t = std::mem::take(self);
        (t.span.unwrap_or_default(), t.truncated)
    }
}

// ---------------------------------------------------------------------------------------------
// Framing state per direction

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum St {
    /// Reading a packet header (4 bytes).
    Header,
    /// Inside a packet's payload: `left` bytes to go.
    Body { left: u64 },
    /// Out of sync (or not yet in sync): waiting for a segment that starts with a message.
    Lost,
}

#[derive(Debug)]
struct Dir {
    st: St,
    hdr: [u8; 4],
    hdr_len: usize,
    /// Sequence id of the message's first packet, and of its latest.
    seq: u8,
    last_seq: u8,
    /// Payload bytes of the message so far (all its packets).
    len: u64,
    /// The packet being read has the maximum length: the message goes on in the next one.
    continues: bool,
    /// The message's kept prefix (at most `keep` bytes).
    body: Vec<u8>,
    keep: usize,
    acc: Acc,
    /// Ever in sync (the first sync after a pickup is no desync).
    synced: bool,
    /// Pending calls when this direction lost its place (server side).
    lost_with: usize,
}

impl Default for Dir {
    fn default() -> Self {
        Dir {
            st: St::Lost,
            hdr: [0; 4],
            hdr_len: 0,
            seq: 0,
            last_seq: 0,
            len: 0,
            continues: false,
            body: Vec::new(),
            keep: 0,
            acc: Acc::default(),
            synced: false,
            lost_with: 0,
        }
    }
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
    dirs: [Dir; 2],
    /// Index of the direction the client's packets travel, once known.
    client: Option<usize>,
    phase: Phase,
    server_caps: Option<u32>,
    /// CLIENT_DEPRECATE_EOF, from the handshake or inferred from a result set.
    deprecate_eof: Option<bool>,
    /// Compression was negotiated: parsing stops once authentication ends.
    compressed: bool,
    pending: InOrder<Call>,
    statements: BTreeMap<u32, String>,
    seg_counter: u64,
}

impl MysqlParser {
    pub fn new(cfg: &ParserConfig) -> Self {
        MysqlParser {
            depth: cfg.depth,
            keep_head: cfg.keep_head,
            dirs: [Dir::default(), Dir::default()],
            client: None,
            phase: Phase::Start,
            server_caps: None,
            deprecate_eof: None,
            compressed: false,
            pending: InOrder::new(MAX_PENDING),
            statements: BTreeMap::new(),
            seg_counter: 0,
        }
    }

    /// Bytes the parser holds for framing (kept prefixes), for the flat-memory test.
    #[cfg(test)]
    fn buffered_bytes(&self) -> usize {
        self.dirs.iter().map(|d| d.body.capacity()).sum::<usize>()
            + self.statements.values().map(String::capacity).sum::<usize>()
    }

    fn is_client(&self, d: usize) -> Option<bool> {
        self.client.map(|c| c == d)
    }

    fn lose_sync(&mut self, d: usize, stats: &mut ParseStats) {
        let pending = self.pending.len();
        let ds = &mut self.dirs[d];
        if ds.st != St::Lost {
            stats.desyncs += 1;
            ds.lost_with = pending;
        }
        ds.st = St::Lost;
        ds.hdr_len = 0;
        ds.continues = false;
        ds.body.clear();
        ds.acc = Acc::default();
    }

    /// Nothing pending can be paired any more (commands may have been lost in any number).
    fn distrust_pairing(&mut self, stats: &mut ParseStats) {
        stats.damaged_messages += self.pending.len() as u64;
        self.pending.drain().for_each(drop);
        for ds in &mut self.dirs {
            ds.lost_with = 0;
        }
    }

    /// The server's side came back after a loss: what it was answering then ended out of
    /// sight.
    fn resync_server(&mut self, d: usize, out: &mut Vec<L7Call>, stats: &mut ParseStats) {
        let n = std::mem::take(&mut self.dirs[d].lost_with);
        for _ in 0..n {
            match self.pending.pop() {
                Some(c) => {
                    stats.inferred_ends += 1;
                    self.emit(c, true, out);
                }
                None => break,
            }
        }
    }

    /// The rest of the connection cannot be read (TLS, compression, replication).
    fn stop(&mut self, stats: &mut ParseStats) {
        self.phase = Phase::Stopped;
        stats.desyncs += 1;
        self.pending.drain().for_each(drop);
        for ds in &mut self.dirs {
            *ds = Dir::default();
        }
    }

    /// Does segment `p` in direction d start where this direction can (re)sync?
    fn plausible_start(&self, d: usize, p: &[u8]) -> bool {
        match (self.is_client(d), self.phase) {
            (None, _) => is_greeting(p) || plausible_command(p, false),
            (Some(true), Phase::Greeted) => p.len() >= 5 && p[3] == 1,
            (Some(true), _) => plausible_command(p, false),
            (Some(false), Phase::Auth) => p.len() >= 5 && p[3] >= 2,
            (Some(false), _) => plausible_response(p),
        }
    }

    /// Frames the captured bytes of one segment in direction d.
    fn frame(
        &mut self,
        d: usize,
        seg: &Segment,
        mut data: &[u8],
        out: &mut Vec<L7Call>,
        stats: &mut ParseStats,
    ) {
        while !data.is_empty() && self.phase != Phase::Stopped {
            match self.dirs[d].st {
                St::Lost => {
                    stats.skipped(data.len() as u64);
                    return;
                }
                St::Header => {
                    let ds = &mut self.dirs[d];
                    ds.acc.touch(self.seg_counter, seg);
                    let take = (4 - ds.hdr_len).min(data.len());
                    ds.hdr[ds.hdr_len..ds.hdr_len + take].copy_from_slice(&data[..take]);
                    ds.hdr_len += take;
                    ds.acc.add(take as u64);
                    data = &data[take..];
                    if ds.hdr_len == 4 {
                        ds.hdr_len = 0;
                        let len = le24(&ds.hdr);
                        let seq = ds.hdr[3];
                        if ds.continues {
                            if seq != ds.last_seq.wrapping_add(1) {
                                self.lose_sync(d, stats);
                                if self.is_client(d) != Some(false) {
                                    self.distrust_pairing(stats);
                                }
                                stats.skipped(data.len() as u64);
                                return;
                            }
                        } else {
                            ds.seq = seq;
                            ds.len = 0;
                            ds.body.clear();
                        }
                        ds.last_seq = seq;
                        ds.continues = len == MAX_PACKET;
                        ds.len += u64::from(len);
                        ds.st = St::Body {
                            left: u64::from(len),
                        };
                        if len == 0 {
                            self.packet_done(d, out, stats);
                        }
                    }
                }
                St::Body { left } => {
                    let take = left.min(data.len() as u64) as usize;
                    let ds = &mut self.dirs[d];
                    ds.acc.touch(self.seg_counter, seg);
                    ds.acc.add(take as u64);
                    let room = ds.keep.saturating_sub(ds.body.len()).min(take);
                    ds.body.extend_from_slice(&data[..room]);
                    ds.st = St::Body {
                        left: left - take as u64,
                    };
                    data = &data[take..];
                    if left == take as u64 {
                        self.packet_done(d, out, stats);
                    }
                }
            }
        }
    }

    /// A packet's payload is in: the message ends with it unless it continues.
    fn packet_done(&mut self, d: usize, out: &mut Vec<L7Call>, stats: &mut ParseStats) {
        let ds = &mut self.dirs[d];
        ds.st = St::Header;
        if !ds.continues {
            self.message_done(d, out, stats);
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

    /// A whole message (body kept up to its prefix) in direction d.
    fn message_done(&mut self, d: usize, out: &mut Vec<L7Call>, stats: &mut ParseStats) {
        let body = std::mem::take(&mut self.dirs[d].body);
        let (seq, len) = (self.dirs[d].seq, self.dirs[d].len);
        if self.client.is_none() {
            if seq == 0 && body.first() == Some(&10) {
                self.client = Some(1 - d);
                self.greeting(&body);
            } else if seq == 0 && body.first().is_some_and(|&c| command_name(c).is_some()) {
                self.client = Some(d);
                self.phase = Phase::Commands;
            } else {
                self.dirs[d].acc = Acc::default();
            }
        }
        match self.is_client(d) {
            Some(true) => self.client_message(d, seq, &body, len, stats),
            Some(false) => self.server_message(d, seq, &body, len, out, stats),
            None => {}
        }
        let keep = self.keep_for(d);
        let ds = &mut self.dirs[d];
        ds.keep = keep;
        if ds.body.is_empty() && body.capacity() <= keep.max(64) * 2 {
            ds.body = body;
            ds.body.clear();
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

    fn client_message(
        &mut self,
        d: usize,
        seq: u8,
        body: &[u8],
        len: u64,
        stats: &mut ParseStats,
    ) {
        match self.phase {
            Phase::Greeted => {
                self.dirs[d].acc = Acc::default();
                let caps = le32(body, 0).unwrap_or(0);
                if caps & CLIENT_SSL != 0 && len == SSL_REQUEST_LEN {
                    self.stop(stats);
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
                self.dirs[d].acc = Acc::default();
                return;
            }
            Phase::Commands => {}
        }
        if seq != 0 {
            // LOCAL INFILE contents or CHANGE_USER's authentication data: part of the call
            // they answer, never shown.
            let (span, _) = self.dirs[d].acc.take();
            if let Some(c) = self.pending.back_mut() {
                c.req.bytes = c.req.bytes.saturating_add(span.bytes);
            }
            return;
        }
        let Some(&cmd) = body.first() else {
            self.dirs[d].acc = Acc::default();
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
                self.dirs[d].acc = Acc::default();
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
            COM_STMT_PREPARE => ("PREPARE".to_owned(), text(), Resp::First),
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
                    self.lose_sync(d, stats);
                    self.distrust_pairing(stats);
                    return;
                }
            },
        };
        let (req, truncated) = self.dirs[d].acc.take();
        let statement_id = match cmd {
            COM_STMT_EXECUTE | COM_STMT_FETCH | COM_STMT_RESET => statement,
            _ => None,
        };
        self.pending.push(Call {
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
        });
    }

    /// The SQL of a prepared statement (`EXECUTE <id>` when it was prepared out of sight).
    fn statement_sql(&self, id: Option<u32>) -> String {
        match id {
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
                self.dirs[d].acc = Acc::default();
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
                self.dirs[d].acc = Acc::default();
                return;
            }
        }
        // A possible trailing EOF of a prepare: this packet, or the end of the prepare.
        if let Some(c) = self.pending.front() {
            if c.state == Resp::PrepareTail {
                let eof = first == Some(0xfe) && len < 9 && seq == c.last_seq.wrapping_add(1);
                if let Some(mut c) = self.pending.pop() {
                    if eof {
                        self.deprecate_eof = Some(false);
                        let (more, truncated) = self.dirs[d].acc.take();
                        if let Some(r) = c.resp.as_mut() {
                            r.bytes = r.bytes.saturating_add(more.bytes);
                            r.last_start_ns = more.last_start_ns;
                            r.last_end_ns = more.last_end_ns;
                            r.syscalls += more.syscalls.saturating_sub(1);
                        }
                        c.truncated |= truncated;
                    }
                    self.emit(c, false, out);
                }
                if eof {
                    return;
                }
            }
        }
        if first == Some(0xff) && le16(body, 1) == Some(PROGRESS_REPORT) {
            return;
        }
        let deprecate_eof = self.deprecate_eof;
        let Some(c) = self.pending.front_mut() else {
            stats.unmatched_responses += 1;
            self.dirs[d].acc = Acc::default();
            return;
        };
        c.last_seq = seq;
        if first == Some(0xff) {
            c.error = Some(parse_error(body));
            self.finish(d, out);
            return;
        }
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
            let (resp, truncated) = self.dirs[d].acc.take();
            if let Some(c) = self.pending.front_mut() {
                c.resp = Some(resp);
                c.truncated |= truncated;
            }
        }
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
        if let Some(mut c) = self.pending.pop() {
            let (resp, truncated) = self.dirs[d].acc.take();
            c.resp = Some(resp);
            c.truncated |= truncated;
            self.emit(c, false, out);
        }
    }

    fn emit(&mut self, c: Call, end_inferred: bool, out: &mut Vec<L7Call>) {
        let mut details = Vec::new();
        let full = self.depth == ParseDepth::Full;
        let (status_text, outcome) = match &c.error {
            Some(e) => {
                if full && !e.message.is_empty() {
                    details.push(("error", e.message.clone()));
                }
                let outcome = match &e.sqlstate {
                    Some(s) => sqlstate_outcome(s),
                    None => Outcome::ServerError,
                };
                (Some(e.status_text()), outcome)
            }
            None => (None, Outcome::Ok),
        };
        if c.error.is_none() && !end_inferred && c.command != COM_STMT_PREPARE {
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
            if c.error.is_none() && !end_inferred {
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
            Some(e) => format!("ERROR {}: {}", e.status_text(), e.message),
            None if c.result_sets > 0 => format!("{} rows", c.rows),
            None => format!("OK, {} rows affected", c.affected_rows),
        };
        let req_head = self.head(c.resource.as_bytes(), c.req.bytes);
        let resp_head = self.head(resp_text.as_bytes(), c.resp.map_or(0, |r| r.bytes));
        out.push(L7Call {
            proto: Protocol::Mysql,
            request_dir: if client == 0 {
                Direction::Egress
            } else {
                Direction::Ingress
            },
            method: c.method,
            resource: c.resource,
            version: "4.1",
            status: None,
            status_text,
            outcome,
            req: c.req,
            resp: c.resp.unwrap_or_default(),
            truncated: c.truncated,
            end_inferred,
            details,
            req_head,
            resp_head,
        });
    }

    fn head(&self, text: &[u8], len: u64) -> CapturedHead {
        if self.keep_head == 0 {
            return CapturedHead::default();
        }
        CapturedHead {
            bytes: text[..text.len().min(self.keep_head)].to_vec(),
            len,
        }
    }

    /// `n` bytes of direction d were moved but not captured (snaplen).
    fn skip(&mut self, d: usize, n: u64, out: &mut Vec<L7Call>, stats: &mut ParseStats) {
        if let St::Body { left } = self.dirs[d].st {
            if n <= left {
                let ds = &mut self.dirs[d];
                ds.st = St::Body { left: left - n };
                ds.acc.add(n);
                ds.acc.truncated = true;
                if n == left {
                    self.packet_done(d, out, stats);
                }
                return;
            }
        }
        // A header went unseen: the next packet's place is unknown.
        stats.skipped(n);
        self.lose_sync(d, stats);
        if self.is_client(d) == Some(true) {
            self.distrust_pairing(stats);
        }
    }
}

/// An OK packet's (or an OK-format end of rows') affected rows, last insert id, status flags
/// and warnings; an EOF (5 bytes) has only the last two.
fn ok_fields(body: &[u8], len: u64) -> (u64, u64, u16, u16) {
    if len < 7 {
        return (
            0,
            0,
            le16(body, 3).unwrap_or(0),
            le16(body, 1).unwrap_or(0),
        );
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

/// An ERR packet: code, `#` and SQLSTATE (protocol 4.1), message.
fn parse_error(body: &[u8]) -> MyError {
    let code = le16(body, 1).unwrap_or(0);
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

impl StreamParser for MysqlParser {
    fn on_segment(&mut self, seg: &Segment<'_>, out: &mut Vec<L7Call>, stats: &mut ParseStats) {
        if self.phase == Phase::Stopped {
            stats.skipped(seg.total_len);
            return;
        }
        self.seg_counter += 1;
        let d = seg.dir.index();
        if self.dirs[d].st == St::Lost {
            if self.plausible_start(d, seg.payload) {
                let keep = self.keep_for(d);
                let ds = &mut self.dirs[d];
                ds.st = St::Header;
                ds.keep = keep;
                ds.synced = true;
                if self.is_client(d) == Some(false) {
                    self.resync_server(d, out, stats);
                }
            } else {
                stats.skipped(seg.total_len);
                return;
            }
        }
        self.frame(d, seg, seg.payload, out, stats);
        let uncaptured = seg.total_len.saturating_sub(seg.payload.len() as u64);
        if uncaptured > 0 && self.phase != Phase::Stopped {
            if self.dirs[d].st == St::Lost {
                stats.skipped(uncaptured);
            } else {
                self.skip(d, uncaptured, out, stats);
            }
        }
    }

    fn on_gap(&mut self, dir: Direction, len: Option<u64>, stats: &mut ParseStats) {
        if self.phase == Phase::Stopped {
            stats.skipped(len.unwrap_or(0));
            return;
        }
        let d = dir.index();
        // A gap strictly inside a payload of known length only skips bytes.
        if let (Some(n), St::Body { left }) = (len, self.dirs[d].st) {
            if n < left {
                let ds = &mut self.dirs[d];
                ds.st = St::Body { left: left - n };
                ds.acc.add(n);
                ds.acc.truncated = true;
                return;
            }
        }
        stats.skipped(len.unwrap_or(0));
        let ds = &self.dirs[d];
        if ds.st != St::Lost && (ds.hdr_len > 0 || ds.continues || matches!(ds.st, St::Body { .. }))
        {
            stats.damaged_messages += 1;
        }
        if self.dirs[d].synced {
            self.lose_sync(d, stats);
        }
        // Client packets lost: the server's answers can no longer be paired.
        if self.is_client(d) != Some(false) {
            self.distrust_pairing(stats);
        }
    }

    fn on_close(&mut self, out: &mut Vec<L7Call>, stats: &mut ParseStats) {
        // A prepare whose trailing EOF never came had none.
        if self
            .pending
            .front()
            .is_some_and(|c| c.state == Resp::PrepareTail)
        {
            if let Some(c) = self.pending.pop() {
                self.emit(c, false, out);
            }
        }
        stats.unanswered_requests += self.pending.len() as u64;
        self.pending.drain().for_each(drop);
    }
}
