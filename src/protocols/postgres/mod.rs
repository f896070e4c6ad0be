//! PostgreSQL: the frontend/backend protocol, version 3, over a byte stream, both directions.
//!
//! Framing: every message is a type byte and an int32 length (the length counts itself, not
//! the type byte); the startup-family messages a client sends first (StartupMessage,
//! SSLRequest, GSSENCRequest, CancelRequest) have no type byte, and the server answers an
//! SSLRequest or GSSENCRequest with one bare byte (`N`, `S` or `G`). Bodies are kept up to
//! [`MAX_KEEP`] bytes; the rest, and anything beyond the snaplen, is skipped by count (the
//! framing core, [`super::framing`], does it: this parser is its [`Framer`]).
//!
//! Startup and authentication make no call. An SSLRequest answered `S` (or a GSSENCRequest
//! answered `G`) means the rest of the connection is encrypted: it is counted once in
//! [`ParseStats::desyncs`] and every byte from then on in `unparsed_bytes`.
//!
//! Calls:
//! - Simple query (`Q`): one call per `Q` message, whatever the number of statements in its
//!   text, ending at ReadyForQuery (`Z`). The SQL is not split (that needs a full lexer of
//!   quotes, dollar quotes and comments): the call's `statements` detail counts the results
//!   (CommandComplete and EmptyQueryResponse), `rows` sums their row counts, `tag` is the last
//!   tag. An error stops the server's run of the text: the call fails with its SQLSTATE.
//! - Extended query: one call per Execute (`E`), with the SQL its portal's statement was
//!   parsed from (statement name → SQL and portal → SQL kept per connection, across Syncs,
//!   until a Close or a reuse of the name). It ends at CommandComplete, EmptyQueryResponse,
//!   PortalSuspended or ErrorResponse. A Parse, Bind or Describe that fails makes a call too
//!   (the statement's SQL, the error), or a bad SQL text would never show; after any error the
//!   server skips every message until Sync: the Executes it skipped make no call and are
//!   counted in [`ParseStats::unreplied_requests`].
//! - `method` is the SQL's first keyword in upper case (`SELECT`, `INSERT`, `WITH`, `BEGIN`),
//!   `resource` the SQL text (cut at [`MAX_SQL`] bytes; the endpoint layer normalises it),
//!   `version` `3.0`. Parameters (Bind values) and rows are never kept.
//! - Errors: `status_text` is the SQLSTATE (`42P01`), the outcome `server_error` for the
//!   classes that are the server's (08 connection, 53 resources, 57 operator intervention,
//!   58 system, XX internal) and `client_error` for the rest (syntax, constraints, data).
//!
//! Asynchronous backend messages (ParameterStatus `S`, NoticeResponse `N`,
//! NotificationResponse `A`) answer nothing; a NotificationResponse (LISTEN/NOTIFY) is counted
//! in [`ParseStats::pushes`]. COPY data (`d`, `c`, `f` both ways) belongs to the command that
//! started the COPY.
//!
//! Large results: rows in writes longer than the snaplen hide their headers. The server's place
//! is then lost inside a response whose request is known, so its bytes still count into it and
//! what is captured is searched for the ReadyForQuery that ends it (with the CommandComplete
//! before it, for the row count); if that end too lies beyond the snaplen, the call ends when
//! the client sends its next request while waiting for that response alone, or at the close
//! (`end_inferred`, outcome `unknown`, no rows), and framing resumes at the next server segment
//! that starts like a reply's first message. With more requests pending when the place was
//! lost (pipelined), the unseen bytes may end any of them: none is paired until a
//! ReadyForQuery can only end one request.
//!
//! Pairing is in order: each frontend message that gets an answer (Parse, Bind, Describe,
//! Execute, Close, Sync, Query, FunctionCall, startup) queues an expectation; backend messages
//! answer the oldest. Connections already open when ebtop started are picked up at the first
//! segment that starts with a plausible message (a type byte valid for its direction, a
//! plausible length, and after it the segment's end or another plausible header).

use std::collections::HashMap;

use super::framing::{self, Framer, Header, Loss, St, Streams};
use super::matching::InOrder;
use super::{
    BenchFixture, BytesSince, CallKind, CapturedHead, L7Call, MessageSpan, Outcome, ParseDepth,
    ParseStats, ParserConfig, Protocol, ProtocolDescriptor, ResourceKind, Segment, StreamParser,
};
use crate::event::Direction;

/// The protocol's entry in [`super::REGISTRY`].
pub const DESCRIPTOR: ProtocolDescriptor = ProtocolDescriptor {
    folder: "postgres",
    title: "PostgreSQL",
    calls: &[CallKind {
        proto: Protocol::Postgres,
        name: "postgres",
        resource: ResourceKind::Sql,
        metrics: super::MetricNames::database("postgresql"),
    }],
    kernel_id: Some(5),
    datagrams: false,
    copy_whole: true,
    detect: is_connection_start,
    new_parser: |cfg| Box::new(PostgresParser::new(cfg)),
    benches: &[BenchFixture {
        file: "pgbench_prepared.seg",
        what: "parse pgbench -S -M prepared",
        proto: Protocol::Postgres,
        calls: 20,
    }],
};

/// Expectations waiting for the server on one connection before it draws on the shared budget
/// (`matching::SHARED_PENDING_BYTES`).
const MAX_PENDING: usize = 1024;
/// Body bytes of a message kept for parsing; the rest is skipped by count.
const MAX_KEEP: usize = 8 * 1024;
/// Longest SQL text kept as a resource.
pub const MAX_SQL: usize = 4096;
/// Prepared statements and portals remembered per connection (beyond: the oldest names are
/// forgotten and their Executes show `EXECUTE name`).
const MAX_NAMES: usize = 1024;
/// Largest message length believed (the server refuses messages over 1 GiB).
const MAX_LEN: u32 = 1 << 30;
/// Largest length believed when resynchronising or recognising a connection.
const MAX_LEN_RESYNC: u32 = 64 << 20;
const MAX_ERROR_DETAIL: usize = 256;
const PROTOCOL_3_0: u32 = 0x0003_0000;
const SSL_REQUEST: u32 = 80877103;
const GSSENC_REQUEST: u32 = 80877104;
const CANCEL_REQUEST: u32 = 80877102;
/// [`Expect::Unseen`]'s `after_ns` when what follows the unseen messages is never paired.
const NEVER: u64 = u64::MAX;

/// Message types a client sends.
const FRONTEND_TYPES: &[u8] = b"QPBEDCHSFXdcfp";
/// Message types a server sends.
const BACKEND_TYPES: &[u8] = b"RKSZTDCEINA123ntsGHWdcVv";
/// Types only a client sends (they decide which direction is the client's).
const FRONTEND_ONLY: &[u8] = b"QPBFXfp";
/// Types only a server sends.
const BACKEND_ONLY: &[u8] = b"RKZTIA123ntsGWVv";

/// Does `p`, the first bytes of a connection in some direction, start a PostgreSQL client's
/// conversation: a StartupMessage for protocol 3.0, an SSLRequest or GSSENCRequest, or a
/// simple-query or Parse message with a plausible length and SQL that starts printable? A
/// server's message alone never is.
pub fn is_connection_start(p: &[u8]) -> bool {
    if p.len() >= 8 {
        let len = be32(&p[0..4]);
        let code = be32(&p[4..8]);
        if (code == SSL_REQUEST || code == GSSENC_REQUEST) && len == 8 {
            return true;
        }
        // StartupMessage: "user\0" comes first in practice, and the parameters end with \0.
        if code == PROTOCOL_3_0 && (9..=10_000).contains(&len) {
            return p.len() < 9 || p[8].is_ascii_lowercase();
        }
    }
    if p.len() >= 6 && p[0] == b'B' {
        return is_bind(p);
    }
    if p.len() < 6 || !matches!(p[0], b'Q' | b'P') {
        return false;
    }
    let len = be32(&p[1..5]);
    if !(6..=MAX_LEN_RESYNC).contains(&len) {
        return false;
    }
    // Q: the SQL; P: the statement name (may be empty), then the SQL.
    let mut body = &p[5..p.len().min(len as usize + 1)];
    if p[0] == b'P' {
        match body.iter().position(|&c| c == 0) {
            Some(i) if body[..i].iter().all(|c| c.is_ascii_graphic()) => body = &body[i + 1..],
            _ => return false,
        }
    }
    let start: Vec<u8> = body
        .iter()
        .copied()
        .skip_while(|c| c.is_ascii_whitespace())
        .take(4)
        .collect();
    start.len() >= 2
        && start
            .iter()
            .all(|&c| c.is_ascii_alphabetic() || c == b'(' || c == b'-' || c == b'/')
        && start[0] != b'-'
}

/// A Bind (`B`) message: what a client that prepared its statements earlier (pgbench `-M
/// prepared`, JDBC, pgx) sends first once connected: a plausible length (≥ 12), a portal name
/// and a statement name (printable, each ended by NUL), then, if captured, a parameter format
/// count under 4096.
fn is_bind(p: &[u8]) -> bool {
    let len = be32(&p[1..5]);
    if !(12..=MAX_LEN_RESYNC).contains(&len) {
        return false;
    }
    let body = &p[5..p.len().min(len as usize + 1)];
    let mut at = 0;
    for _ in 0..2 {
        match body[at..].iter().position(|&c| c == 0) {
            Some(i) if body[at..at + i].iter().all(|c| c.is_ascii_graphic()) => at += i + 1,
            // The capture ends inside a name: what there is looks right.
            None if body.len() < len as usize - 4 => {
                return body[at..].iter().all(|c| c.is_ascii_graphic())
            }
            _ => return false,
        }
    }
    body.len() < at + 2 || body[at] < 0x10
}

/// What a Describe or Close names: `S` (statement) or `P` (portal), and the name.
fn target_of(body: &[u8]) -> (u8, String) {
    let kind = body.first().copied().unwrap_or(b'S');
    let name = cstr(body, &mut 1)
        .map(|n| lossy(n, 256))
        .unwrap_or_default();
    (kind, name)
}

fn be32(b: &[u8]) -> u32 {
    u32::from_be_bytes([b[0], b[1], b[2], b[3]])
}

/// Could a message of type `ty` and length `len` come this way?
fn plausible_header(ty: u8, len: u32, frontend: Option<bool>) -> bool {
    let types = match frontend {
        Some(true) => FRONTEND_TYPES,
        Some(false) => BACKEND_TYPES,
        None => b"QPBEDCHSFXdcfpRKZTINA123nstGWVv",
    };
    types.contains(&ty) && (4..=MAX_LEN_RESYNC).contains(&len)
}

/// Does `p` (a segment's start) begin with a plausible message, followed by the segment's end
/// or another plausible header?
fn plausible_start(p: &[u8], frontend: Option<bool>) -> bool {
    if frontend != Some(false) && p.len() >= 8 && p[0] == 0 {
        return is_connection_start(p);
    }
    if p.len() < 5 || !plausible_header(p[0], be32(&p[1..5]), frontend) {
        return false;
    }
    let next = 1 + be32(&p[1..5]) as usize;
    next >= p.len()
        || (p.len() - next >= 5
            && plausible_header(p[next], be32(&p[next + 1..next + 5]), frontend))
        || (p.len() - next < 5 && p.len() > next && plausible_header(p[next], 4, frontend))
}

/// The first keyword of an SQL text, upper case (`QUERY` when it has none).
pub(crate) fn sql_keyword(sql: &str) -> String {
    let mut s = sql.trim_start();
    // Leading comments and parentheses: `/* app */ SELECT`, `(SELECT 1) UNION …`.
    loop {
        if let Some(rest) = s.strip_prefix("--") {
            s = rest.split_once('\n').map_or("", |(_, r)| r).trim_start();
        } else if let Some(rest) = s.strip_prefix("/*") {
            s = rest.split_once("*/").map_or("", |(_, r)| r).trim_start();
        } else if let Some(rest) = s.strip_prefix('(') {
            s = rest.trim_start();
        } else {
            break;
        }
    }
    let word: String = s
        .chars()
        .take_while(|c| c.is_ascii_alphabetic() || *c == '_')
        .take(32)
        .collect();
    if word.is_empty() {
        "QUERY".to_owned()
    } else {
        word.to_ascii_uppercase()
    }
}

/// A CommandComplete's tag, if captured whole (a tag cut by the snaplen may have lost digits).
fn whole_tag(body: &[u8]) -> Option<String> {
    cstr(body, &mut 0).map(|t| lossy(t, 64))
}

/// `SELECT 7`, `INSERT 0 3`, `UPDATE 3` → the row count (the tag's last number), if any.
fn tag_rows(tag: &str) -> Option<u64> {
    let last = tag.rsplit(' ').next()?;
    if tag.contains(' ') {
        last.parse().ok()
    } else {
        None
    }
}

/// The outcome an SQLSTATE means (see the module doc).
pub(crate) fn sqlstate_outcome(code: &str) -> Outcome {
    match code.get(..2) {
        Some("08" | "53" | "57" | "58" | "XX") => Outcome::ServerError,
        _ => Outcome::ClientError,
    }
}

/// Reads a NUL-terminated string at `*at`, advancing past it (None if it does not end).
fn cstr<'a>(body: &'a [u8], at: &mut usize) -> Option<&'a [u8]> {
    let rest = body.get(*at..)?;
    let end = rest.iter().position(|&c| c == 0)?;
    *at += end + 1;
    Some(&rest[..end])
}

pub(crate) fn lossy(b: &[u8], max: usize) -> String {
    let mut s = crate::text::lossy_prefix(b, max);
    // A cut inside a multi-byte character leaves a replacement char at the end: drop it.
    let kept = s.trim_end_matches('\u{fffd}').len();
    s.truncate(kept);
    s
}

/// The status text of an error whose SQLSTATE went unseen: an error of unknown class.
const UNSEEN_SQLSTATE: &str = "ERROR";

/// ErrorResponse fields: (SQLSTATE, severity, message); the SQLSTATE is `ERROR` when it was
/// not seen (beyond the snaplen), and the call's outcome then unknown ([`sqlstate_known`]).
fn error_fields(body: &[u8]) -> (String, String, String) {
    let (mut code, mut sev, mut sev_v, mut msg) = (String::new(), String::new(), None, None);
    let mut at = 0;
    while at < body.len() && body[at] != 0 {
        let f = body[at];
        at += 1;
        let Some(v) = cstr(body, &mut at) else { break };
        match f {
            b'C' => code = lossy(v, 16),
            b'S' => sev = lossy(v, 16),
            b'V' => sev_v = Some(lossy(v, 16)),
            b'M' => msg = Some(lossy(v, MAX_ERROR_DETAIL)),
            _ => {}
        }
    }
    if code.is_empty() {
        code = UNSEEN_SQLSTATE.to_owned();
    }
    (code, sev_v.unwrap_or(sev), msg.unwrap_or_default())
}

// ---------------------------------------------------------------------------------------------
// Pairing

/// What a frontend message waits for.
#[derive(Debug)]
enum Expect {
    /// Startup (or an SSL/GSS request) until the first ReadyForQuery or error; `at_ns`: when
    /// the read that completed it began (as for Sync and FunctionCall).
    Startup {
        at_ns: u64,
    },
    /// SSLRequest/GSSENCRequest: one bare byte.
    EncryptionAnswer,
    Parse {
        sql: String,
        /// The request so far (the call's, should this step fail).
        req: MessageSpan,
    },
    Bind {
        sql: String,
        /// The request so far (the call's, should this step fail).
        req: MessageSpan,
    },
    Describe {
        sql: String,
        /// The request so far (the call's, should this step fail).
        req: MessageSpan,
    },
    Close,
    Execute(Box<Query>),
    Sync {
        at_ns: u64,
    },
    Query(Box<Query>),
    FunctionCall {
        at_ns: u64,
    },
    /// Client messages went unseen here (lost, or beyond the snaplen): how many, and so how
    /// many replies are theirs, is unknown. `after_ns`: when the first request seen after them
    /// began (0: none yet).
    Unseen {
        after_ns: u64,
    },
}

impl Expect {
    /// Does the server end its answer to this message with a ReadyForQuery?
    fn awaits_ready(&self) -> bool {
        self.read_at().is_some()
    }

    /// For a message the server ends its answer to with a ReadyForQuery: when the read that
    /// completed it began.
    fn read_at(&self) -> Option<u64> {
        match self {
            Expect::Startup { at_ns } | Expect::Sync { at_ns } | Expect::FunctionCall { at_ns } => {
                Some(*at_ns)
            }
            Expect::Query(q) => Some(q.req.last_start_ns),
            _ => None,
        }
    }
}

/// A call in the making.
#[derive(Debug)]
struct Query {
    sql: String,
    /// The named prepared statement it runs (extended protocol).
    statement: Option<String>,
    simple: bool,
    req: MessageSpan,
    truncated: bool,
    /// Response so far.
    resp: Option<MessageSpan>,
    rows: u64,
    data_rows: u64,
    statements: u64,
    tag: Option<String>,
    error: Option<(String, String, String)>,
    suspended: bool,
    /// Some of its response's messages went unseen (headers beyond the snaplen).
    partial: bool,
    /// The message that ends its response's last result (CommandComplete, EmptyQueryResponse,
    /// ErrorResponse) was seen since any part of the response went unseen.
    last_result_seen: bool,
    /// A row count it reported was not seen whole.
    rows_unknown: bool,
    /// Simple query: its SQL, seen whole, has no `;` but at its end (one statement, one
    /// result).
    single_statement: bool,
}

impl Query {
    fn new(
        sql: String,
        statement: Option<String>,
        simple: bool,
        req: MessageSpan,
        truncated: bool,
    ) -> Query {
        Query {
            sql,
            statement,
            simple,
            req,
            truncated,
            resp: None,
            rows: 0,
            data_rows: 0,
            statements: 0,
            tag: None,
            error: None,
            suspended: false,
            partial: false,
            last_result_seen: false,
            rows_unknown: false,
            single_statement: false,
        }
    }

    /// Its response's rest goes unseen from here (a header beyond the snaplen).
    fn lose_part(&mut self) {
        self.partial = true;
        self.last_result_seen = false;
        self.truncated = true;
    }

    /// A result of this call ended (CommandComplete with `tag`, None: EmptyQueryResponse).
    fn result(&mut self, tag: Option<Option<String>>) {
        self.last_result_seen = true;
        match tag {
            Some(Some(tag)) => {
                if self.simple {
                    self.rows += tag_rows(&tag).unwrap_or(0);
                } else {
                    match tag_rows(&tag) {
                        Some(n) => self.rows = n,
                        // A tag without a count: the rows seen, if all were.
                        None if self.partial => self.rows_unknown = true,
                        None => self.rows = self.data_rows,
                    }
                }
                self.tag = Some(tag);
            }
            Some(None) => self.rows_unknown = true,
            None => {}
        }
    }

    /// Its outcome: an error's class, unknown when its SQLSTATE or the end of its last result
    /// went unseen (an error stops a simple query's run, so it is the last result).
    fn outcome(&self, end_inferred: bool) -> Outcome {
        match &self.error {
            Some((code, _, _)) if code == UNSEEN_SQLSTATE => Outcome::Unknown,
            Some((code, _, _)) => sqlstate_outcome(code),
            None if end_inferred || (self.partial && !self.last_result_seen) => Outcome::Unknown,
            None => Outcome::Ok,
        }
    }

    /// Whether its `rows` (and a simple query's `statements`) are exact: every result seen, or
    /// the one result of a single statement.
    fn rows_known(&self) -> bool {
        !self.rows_unknown && (!self.partial || !self.simple || self.single_statement)
    }
}

/// Is `sql` (seen whole) one statement: no `;` but trailing ones? A `;` inside a literal or
/// comment only makes it count as several (rows then unreported when results go unseen).
fn one_statement(sql: &[u8]) -> bool {
    let text = sql.trim_ascii_end();
    let text = text.strip_suffix(b";").unwrap_or(text);
    !text.contains(&b';')
}

/// PostgreSQL's states of its own between messages ([`St::Proto`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PgSt {
    /// The server's one-byte answer to an SSLRequest or GSSENCRequest.
    EncryptionAnswer,
    /// The server's place lost inside the response to a known request (a message header
    /// beyond the snaplen: rows of a large result): its bytes still count into that response,
    /// and what is captured is searched for the response's end (ReadyForQuery).
    SeekEnd,
    /// The server's place lost inside a response whose end went unseen, and that response
    /// over (the client sent its next request while waiting for it alone): framing resumes
    /// at the next segment that starts with a plausible reply's first message.
    SeekStart,
}

/// Header bytes read before the first look: a type byte and the length (8 for an untyped
/// startup-family message, asked for when the first byte is 0).
const HEADER: usize = 5;

fn new_streams() -> Streams<u8, PgSt> {
    Streams::new(St::Header, HEADER)
}

pub struct PostgresParser {
    depth: ParseDepth,
    keep_head: usize,
    /// Framing per direction; a message's kind is its type byte (0: the startup family).
    streams: Streams<u8, PgSt>,
    /// Index of the direction the client's messages travel, once known.
    frontend: Option<usize>,
    pending: InOrder<Expect>,
    /// Turns of direction (where a CPU budget may cut: `request_direction`).
    turns: framing::Turns,
    statements: HashMap<String, String>,
    portals: HashMap<String, String>,
    /// The connection switched to TLS or GSS encryption: nothing more is parsed.
    encrypted: bool,
    /// Skipping the client's messages until Sync after an error (the server does).
    skipping_to_sync: bool,
    /// The server's place among its replies is lost (bytes of it lost or unparsable): no reply
    /// is paired until a ReadyForQuery can only end one request ([`Self::ready_unpaired`]).
    unaligned: bool,
}

impl PostgresParser {
    pub fn new(cfg: &ParserConfig) -> Self {
        PostgresParser {
            depth: cfg.depth,
            keep_head: cfg.keep_head,
            streams: new_streams(),
            frontend: None,
            pending: InOrder::new(MAX_PENDING),
            turns: framing::Turns::default(),
            statements: HashMap::new(),
            portals: HashMap::new(),
            encrypted: false,
            skipping_to_sync: false,
            unaligned: false,
        }
    }

    fn is_frontend(&self, d: usize) -> Option<bool> {
        self.frontend.map(|f| f == d)
    }

    /// Nothing pending can be paired any more (messages may have been lost in any number).
    fn distrust_pairing(&mut self, stats: &mut ParseStats) {
        stats.damaged_messages += self.pending.len() as u64;
        self.pending.drain().for_each(drop);
        self.skipping_to_sync = false;
        self.unaligned = false;
    }

    /// Does the traced process receive the requests (a server)? A PostgreSQL backend reads
    /// only when it has no whole message left, and flushes its replies at every
    /// ReadyForQuery: what it writes after a read began answers that read's messages or
    /// later ones, never earlier ones.
    fn server_side(&self) -> bool {
        self.frontend == Some(Direction::Ingress.index())
    }

    /// Client messages went unseen: the replies to the requests before them still pair in
    /// order; those after them only once the unseen ones are provably answered
    /// ([`Expect::Unseen`]). Seen from the client, that is never (how many requests were
    /// lost, and so how many replies are theirs, is unknown): its requests are no longer
    /// paired on this connection, and counted.
    fn client_unseen(&mut self) {
        self.skipping_to_sync = false;
        if !matches!(self.pending.back(), Some(Expect::Unseen { .. })) {
            let after_ns = if self.server_side() { 0 } else { NEVER };
            self.pending.push(Expect::Unseen { after_ns });
        }
    }

    /// Queues what a client message waits for (`at_ns`: when the read that completed it
    /// began). Behind unseen messages that can never be told apart from it, or when the queue
    /// is full (an evicted request would shift every reply onto the next), it is counted and
    /// no call is made of it.
    fn expect(&mut self, e: Expect, at_ns: u64, stats: &mut ParseStats) {
        let never = matches!(
            self.pending.back(),
            Some(Expect::Unseen { after_ns: NEVER })
        );
        let is_call = |e: &Expect| matches!(e, Expect::Query(_) | Expect::Execute(_));
        if self.unaligned
            && !matches!(e, Expect::Startup { .. })
            && matches!(self.pending.front(), Some(Expect::Startup { .. }))
        {
            // A client sends its first request only once startup's ReadyForQuery has come:
            // the startup burst whose end went unseen (beyond the snaplen) is over, and with
            // nothing else pending what the server sends next answers this request.
            self.pending.pop();
            self.unaligned = !self.pending.is_empty();
        }
        if never {
            if is_call(&e) {
                stats.damaged_messages += 1;
            }
            return;
        }
        if self.pending.is_full() {
            // No room for a marker either: the newest entry becomes one (pushing would evict
            // the oldest); both requests are counted.
            let back_is_call = self.pending.back().is_some_and(is_call);
            stats.pending_dropped += u64::from(is_call(&e)) + u64::from(back_is_call);
            if let Some(back) = self.pending.back_mut() {
                *back = Expect::Unseen { after_ns: NEVER };
            }
            return;
        }
        if let Some(Expect::Unseen { after_ns }) = self.pending.back_mut() {
            if *after_ns == 0 {
                *after_ns = at_ns.max(1);
            }
        }
        // A second exchange (a Sync or a simple query) while one awaits its ReadyForQuery:
        // pipelining, perhaps within one segment. An extended exchange's own messages
        // (Parse, Bind, Execute … Sync) are one exchange.
        if e.awaits_ready() && self.pending.iter().any(Expect::awaits_ready) {
            self.turns.pipelined();
        }
        self.pending.push(e);
    }

    /// Pops the pending messages up to and including the first that awaits a ReadyForQuery
    /// (the calls among them counted, not made); false if none does.
    fn drop_through_ready(&mut self, stats: &mut ParseStats) -> bool {
        if !self.pending.iter().any(Expect::awaits_ready) {
            return false;
        }
        while let Some(e) = self.pending.pop() {
            if matches!(e, Expect::Query(_) | Expect::Execute(_)) {
                stats.damaged_messages += 1;
            }
            if e.awaits_ready() {
                break;
            }
        }
        true
    }

    /// Seen from the server, a write that began at `at_ns`: every message completed by a read
    /// before the last read that began before it was processed, and its ReadyForQuery
    /// written, before that read began (the backend reads only when no whole message is
    /// left). The requests up to the last such one are answered: popped, their calls counted.
    fn drop_answered_before(&mut self, at_ns: u64, stats: &mut ParseStats) {
        let reads = || {
            self.pending
                .iter()
                .take_while(|e| !matches!(e, Expect::Unseen { .. }))
                .filter_map(Expect::read_at)
        };
        let Some(last_read) = reads().filter(|&t| t < at_ns).max() else {
            return;
        };
        let answered = reads().filter(|&t| t < last_read).count();
        for _ in 0..answered {
            self.drop_through_ready(stats);
        }
    }

    /// A ReadyForQuery (its write began at `at_ns`) while replies cannot be paired. Each
    /// ends one request that awaits it, in order: with one such request pending (and none
    /// unseen before it) it can only be that one's, and pairing resumes after it; with more,
    /// the first of them is answered (now or in the lost bytes), the rest may be. Behind
    /// unseen client messages, seen from the server, a ReadyForQuery written after the first
    /// request behind them was read ends that request's batch: pairing resumes after it.
    fn ready_unpaired(&mut self, at_ns: u64, stats: &mut ParseStats) {
        if let Some(&Expect::Unseen { after_ns }) = self.pending.front() {
            if after_ns == 0 || after_ns == NEVER || at_ns <= after_ns {
                return;
            }
            let rest = self.pending.iter().skip(1).any(Expect::awaits_ready);
            if rest {
                self.pending.pop();
                self.drop_through_ready(stats);
            }
            return;
        }
        if self.server_side() {
            self.drop_answered_before(at_ns, stats);
        }
        let ready_before_unseen = self
            .pending
            .iter()
            .take_while(|e| !matches!(e, Expect::Unseen { .. }))
            .filter(|e| e.awaits_ready())
            .count();
        let unseen = self
            .pending
            .iter()
            .any(|e| matches!(e, Expect::Unseen { .. }));
        if ready_before_unseen == 0 {
            if unseen {
                // Answers an unseen request: all before them are answered.
                while !matches!(self.pending.front(), Some(Expect::Unseen { .. }) | None) {
                    if let Some(Expect::Query(_) | Expect::Execute(_)) = self.pending.pop() {
                        stats.damaged_messages += 1;
                    }
                }
            } else {
                stats.unmatched_responses += 1;
            }
            return;
        }
        self.drop_through_ready(stats);
        if ready_before_unseen == 1 && !unseen {
            self.unaligned = false;
        }
    }

    /// The connection is encrypted from here on: not a loss (its TLS plaintext, when ebtop's
    /// TLS probes see it, is a connection of its own); what still arrives here is counted in
    /// `unparsed_bytes`.
    fn encrypted(&mut self) {
        self.encrypted = true;
        self.pending.drain().for_each(drop);
        self.streams.dirs = new_streams().dirs;
    }

    fn frontend_message(
        &mut self,
        d: usize,
        ty: u8,
        body: &[u8],
        at_ns: u64,
        stats: &mut ParseStats,
    ) {
        let mut at = 0;
        if self.skipping_to_sync && ty != b'S' && ty != b'Q' {
            // The server discards it: an Execute skipped so makes no call.
            if ty == b'E' {
                stats.unreplied_requests += 1;
            }
            self.streams.dirs[d].acc = BytesSince::default();
            return;
        }
        match ty {
            0 => {
                let code = if body.len() >= 4 {
                    be32(&body[0..4])
                } else {
                    0
                };
                self.streams.dirs[d].acc = BytesSince::default();
                match code {
                    SSL_REQUEST | GSSENC_REQUEST => {
                        self.expect(Expect::EncryptionAnswer, at_ns, stats);
                        let sd = 1 - d;
                        let server = &mut self.streams.dirs[sd];
                        if server.st == St::Header && !server.partial_header() {
                            server.st = St::Proto(PgSt::EncryptionAnswer);
                        }
                    }
                    CANCEL_REQUEST => {}
                    _ => self.expect(Expect::Startup { at_ns }, at_ns, stats),
                }
            }
            b'Q' => {
                let whole = cstr(body, &mut at);
                let sql = lossy(whole.unwrap_or(body), MAX_SQL);
                self.skipping_to_sync = false;
                let mut q = self.new_query(d, sql, None, true);
                q.single_statement = whole.is_some_and(one_statement);
                self.expect(Expect::Query(Box::new(q)), at_ns, stats);
            }
            b'P' => {
                let name = cstr(body, &mut at)
                    .map(|n| lossy(n, 256))
                    .unwrap_or_default();
                let sql = lossy(
                    cstr(body, &mut at).unwrap_or(&body[at.min(body.len())..]),
                    MAX_SQL,
                );
                remember(&mut self.statements, name, sql.clone());
                let req = self.streams.dirs[d].acc.span.unwrap_or_default();
                self.expect(Expect::Parse { sql, req }, at_ns, stats);
            }
            b'B' => {
                let portal = cstr(body, &mut at)
                    .map(|n| lossy(n, 256))
                    .unwrap_or_default();
                let stmt = cstr(body, &mut at)
                    .map(|n| lossy(n, 256))
                    .unwrap_or_default();
                let sql = self.statement_sql(&stmt);
                remember(&mut self.portals, portal, stmt);
                let req = self.streams.dirs[d].acc.span.unwrap_or_default();
                self.expect(Expect::Bind { sql, req }, at_ns, stats);
            }
            b'D' => {
                let (kind, name) = target_of(body);
                let sql = if kind == b'P' {
                    let stmt = self.portals.get(&name).cloned().unwrap_or_default();
                    self.statement_sql(&stmt)
                } else {
                    self.statement_sql(&name)
                };
                let req = self.streams.dirs[d].acc.span.unwrap_or_default();
                self.expect(Expect::Describe { sql, req }, at_ns, stats);
            }
            b'C' => {
                let (kind, name) = target_of(body);
                if kind == b'P' {
                    self.portals.remove(&name);
                } else {
                    self.statements.remove(&name);
                }
                self.expect(Expect::Close, at_ns, stats);
            }
            b'E' => {
                let portal = cstr(body, &mut at)
                    .map(|n| lossy(n, 256))
                    .unwrap_or_default();
                let stmt = self.portals.get(&portal).cloned();
                let (sql, statement) = match &stmt {
                    Some(s) => (self.statement_sql(s), (!s.is_empty()).then(|| s.clone())),
                    None if portal.is_empty() => ("EXECUTE <unnamed>".to_owned(), None),
                    None => (format!("EXECUTE {portal}"), None),
                };
                let q = self.new_query(d, sql, statement, false);
                self.expect(Expect::Execute(Box::new(q)), at_ns, stats);
            }
            b'S' => {
                self.skipping_to_sync = false;
                self.streams.dirs[d].acc = BytesSince::default();
                self.expect(Expect::Sync { at_ns }, at_ns, stats);
            }
            b'F' => {
                self.streams.dirs[d].acc = BytesSince::default();
                self.expect(Expect::FunctionCall { at_ns }, at_ns, stats);
            }
            b'X' => {
                self.streams.dirs[d].acc = BytesSince::default();
            }
            // Flush, COPY data, password/SASL messages: nothing answers them alone.
            _ => {
                if matches!(ty, b'd' | b'c' | b'f' | b'p') {
                    self.streams.dirs[d].acc = BytesSince::default();
                }
            }
        }
    }

    /// The SQL of a prepared statement (`EXECUTE name` when it was prepared out of sight).
    fn statement_sql(&self, name: &str) -> String {
        match self.statements.get(name) {
            Some(sql) => sql.clone(),
            None if name.is_empty() => "EXECUTE <unnamed>".to_owned(),
            None => format!("EXECUTE {name}"),
        }
    }

    fn new_query(
        &mut self,
        d: usize,
        sql: String,
        statement: Option<String>,
        simple: bool,
    ) -> Query {
        let (req, truncated) = self.streams.dirs[d].acc.take();
        Query::new(sql, statement, simple, req, truncated)
    }

    fn backend_message(
        &mut self,
        d: usize,
        ty: u8,
        body: &[u8],
        out: &mut Vec<L7Call>,
        stats: &mut ParseStats,
    ) {
        match ty {
            // Asynchronous: answer nothing.
            b'A' => {
                stats.pushes += 1;
                self.async_done(d);
                return;
            }
            b'S' | b'N' => {
                self.async_done(d);
                return;
            }
            _ => {}
        }
        if self.unaligned || matches!(self.pending.front(), Some(Expect::Unseen { .. })) {
            if ty == b'Z' {
                let at_ns = self.streams.dirs[d]
                    .acc
                    .span
                    .map_or(0, |s| s.first_start_ns);
                self.ready_unpaired(at_ns, stats);
            }
            self.streams.dirs[d].acc = BytesSince::default();
            return;
        }
        if matches!(self.pending.front(), Some(Expect::Startup { .. })) {
            match ty {
                b'Z' | b'E' => {
                    self.pending.pop();
                }
                _ => {}
            }
            self.streams.dirs[d].acc = BytesSince::default();
            return;
        }
        if matches!(self.pending.front(), Some(Expect::EncryptionAnswer)) {
            // The answer byte went unseen; what follows answers the startup.
            self.pending.pop();
        }
        let Some(front) = self.pending.front_mut() else {
            if !matches!(ty, b'd' | b'c' | b'G' | b'H' | b'W' | b'K' | b'R' | b'v') {
                stats.unmatched_responses += 1;
            }
            self.streams.dirs[d].acc = BytesSince::default();
            return;
        };
        match (ty, front) {
            (b'1', Expect::Parse { .. })
            | (b'2', Expect::Bind { .. })
            | (b'n' | b'T', Expect::Describe { .. })
            | (b'3', Expect::Close) => {
                self.pending.pop();
            }
            (b't', Expect::Describe { .. }) => {}
            (b'T' | b'n' | b't', Expect::Query(_) | Expect::Execute(_)) => {}
            (b'D', Expect::Query(q) | Expect::Execute(q)) => q.data_rows += 1,
            (b'C', Expect::Query(q)) => {
                q.statements += 1;
                q.result(Some(whole_tag(body)));
            }
            (b'I', Expect::Query(q)) => {
                q.statements += 1;
                q.result(None);
            }
            (b'E', Expect::Query(q)) => {
                q.last_result_seen = true;
                q.error = Some(error_fields(body));
            }
            (b'Z', Expect::Query(_)) => {
                if let Some(Expect::Query(mut q)) = self.pending.pop() {
                    let (resp, truncated) = self.streams.dirs[d].acc.take();
                    q.resp = Some(resp);
                    q.truncated |= truncated;
                    self.emit(*q, false, out);
                }
                return;
            }
            (b'C' | b'I' | b's' | b'E', Expect::Execute(_)) => {
                if let Some(Expect::Execute(mut q)) = self.pending.pop() {
                    q.last_result_seen = true;
                    match ty {
                        b'C' => q.result(Some(whole_tag(body))),
                        b's' => {
                            q.suspended = true;
                            q.rows = q.data_rows;
                            q.rows_unknown |= q.partial;
                        }
                        b'E' => {
                            q.error = Some(error_fields(body));
                            self.skip_to_sync(stats);
                        }
                        _ => {}
                    }
                    let (resp, truncated) = self.streams.dirs[d].acc.take();
                    q.resp = Some(resp);
                    q.truncated |= truncated;
                    self.emit(*q, false, out);
                }
                return;
            }
            (b'E', Expect::Parse { .. } | Expect::Bind { .. } | Expect::Describe { .. }) => {
                // A failed step of an extended query: a call for its statement.
                if let Some(
                    Expect::Parse { sql, req }
                    | Expect::Bind { sql, req }
                    | Expect::Describe { sql, req },
                ) = self.pending.pop()
                {
                    // The client's bytes stay where they are: later messages may be in them.
                    let mut q = Query::new(sql, None, false, req, false);
                    q.error = Some(error_fields(body));
                    let (resp, truncated) = self.streams.dirs[d].acc.take();
                    q.resp = Some(resp);
                    q.truncated |= truncated;
                    self.emit(q, false, out);
                }
                self.skip_to_sync(stats);
                return;
            }
            // An error at Sync (a deferred constraint failing at commit) or in a function
            // call: the ReadyForQuery that follows still ends it.
            (b'E', Expect::Sync { .. } | Expect::FunctionCall { .. }) => {}
            (b'E', _) => {
                self.pending.pop();
                self.skip_to_sync(stats);
            }
            (b'Z', _) => {
                // Ends a Sync (or a function call); anything still before it went unanswered.
                while let Some(e) = self.pending.pop() {
                    match e {
                        Expect::Sync { .. } | Expect::FunctionCall { .. } => break,
                        Expect::Execute(_) | Expect::Query(_) => stats.unanswered_requests += 1,
                        _ => {}
                    }
                    if matches!(self.pending.front(), Some(Expect::Unseen { .. })) {
                        break;
                    }
                }
                self.streams.dirs[d].acc = BytesSince::default();
                return;
            }
            (b'V', Expect::FunctionCall { .. }) => {}
            // COPY: the command's own data.
            (b'G' | b'H' | b'W' | b'd' | b'c', Expect::Query(_) | Expect::Execute(_)) => {}
            _ => {
                stats.unmatched_responses += 1;
            }
        }
        if self.pending.is_empty() {
            self.streams.dirs[d].acc = BytesSince::default();
        }
    }

    /// An asynchronous message: it starts no response (inside one, its bytes count).
    fn async_done(&mut self, d: usize) {
        if self.streams.dirs[d].opened_acc {
            self.streams.dirs[d].acc = BytesSince::default();
        }
    }

    /// After an error the server skips the client's messages up to Sync: those still queued
    /// are answered by nothing.
    fn skip_to_sync(&mut self, stats: &mut ParseStats) {
        let mut kept = Vec::new();
        let mut found_sync = false;
        while let Some(e) = self.pending.pop() {
            match e {
                Expect::Sync { .. } => {
                    kept.push(e);
                    found_sync = true;
                    break;
                }
                Expect::Execute(_) => stats.unreplied_requests += 1,
                Expect::Query(_) | Expect::FunctionCall { .. } => {
                    // A simple query cannot follow unsynced extended messages; keep it.
                    kept.push(e);
                    found_sync = true;
                    break;
                }
                _ => {}
            }
        }
        let rest: Vec<Expect> = self.pending.drain().collect();
        for e in kept.into_iter().chain(rest) {
            self.pending.push(e);
        }
        // The client may not have sent its Sync yet.
        self.skipping_to_sync = !found_sync;
    }

    fn emit(&mut self, q: Query, end_inferred: bool, out: &mut Vec<L7Call>) {
        let mut details = Vec::new();
        let outcome = q.outcome(end_inferred);
        let status_text = match &q.error {
            Some((code, sev, msg)) => {
                if self.depth == ParseDepth::Full {
                    if !sev.is_empty() {
                        details.push(("severity", sev.clone()));
                    }
                    if !msg.is_empty() {
                        details.push(("error", msg.clone()));
                    }
                }
                Some(code.clone())
            }
            None => None,
        };
        let rows_known = q.rows_known() && !end_inferred;
        if q.error.is_none() && outcome == Outcome::Ok && rows_known {
            details.push(("rows", q.rows.to_string()));
        }
        if self.depth == ParseDepth::Full {
            if let Some(tag) = &q.tag {
                details.push(("tag", tag.clone()));
            }
            if q.simple && rows_known {
                details.push(("statements", q.statements.to_string()));
            }
            if let Some(s) = &q.statement {
                details.push(("statement", s.clone()));
            }
            if q.suspended {
                details.push(("suspended", "true".to_owned()));
            }
            details.push((
                "query_protocol",
                if q.simple { "simple" } else { "extended" }.to_owned(),
            ));
        }
        let fe = self.frontend.unwrap_or(0);
        // Heads show what a person needs and nothing the wire had besides: the SQL (never the
        // Bind parameters) and the outcome (never rows).
        let resp_text = match (&q.error, &q.tag) {
            (Some((code, sev, msg)), _) => format!("{sev} {code}: {msg}"),
            (None, Some(tag)) => tag.clone(),
            (None, None) if q.suspended => "PortalSuspended".to_owned(),
            (None, None) => String::new(),
        };
        // Passwords in the SQL (`ALTER ROLE … PASSWORD '…'`) never reach the output.
        let redacted = match super::redact::redact_sql(&q.sql) {
            std::borrow::Cow::Borrowed(_) => None,
            std::borrow::Cow::Owned(shown) => Some(shown),
        };
        let sql = redacted.unwrap_or(q.sql);
        let req_head = self.head(sql.as_bytes(), q.req.bytes);
        let resp_head = self.head(resp_text.as_bytes(), q.resp.map_or(0, |r| r.bytes));
        out.push(L7Call {
            proto: Protocol::Postgres,
            request_dir: if fe == 0 {
                Direction::Egress
            } else {
                Direction::Ingress
            },
            method: sql_keyword(&sql),
            resource: sql,
            version: "3.0",
            status: None,
            status_text,
            outcome,
            req: q.req,
            resp: q.resp.unwrap_or_default(),
            truncated: q.truncated,
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
        CapturedHead::redacted(text[..text.len().min(self.keep_head)].to_vec(), len)
    }
}

impl Framer for PostgresParser {
    type Kind = u8;
    type State = PgSt;
    const MIN_HEADER: usize = HEADER;
    const TOUCH_HEADER_PIECES: bool = false;
    /// A result longer than the snaplen ends in a send's tail: CommandComplete and
    /// ReadyForQuery there end its call exactly (`seek_end`).
    const TAILS: bool = true;

    fn streams(&mut self) -> &mut Streams<u8, PgSt> {
        &mut self.streams
    }

    fn streams_ref(&self) -> &Streams<u8, PgSt> {
        &self.streams
    }

    fn stopped(&self) -> bool {
        self.encrypted
    }

    fn pending(&self) -> usize {
        self.pending.len()
    }

    /// A type byte and length (or the startup family's length and code): checked, and the
    /// message's kept body started.
    fn header(
        &mut self,
        d: usize,
        hdr: &[u8],
        _out: &mut Vec<L7Call>,
        _stats: &mut ParseStats,
    ) -> Header<u8> {
        let untyped = hdr[0] == 0;
        if untyped && hdr.len() < 8 {
            return Header::NeedMore(8);
        }
        let (ty, body_len) = if untyped {
            let len = be32(&hdr[0..4]);
            if !(8..=10_000).contains(&len) {
                return Header::NotAFrame;
            }
            (0, len as u64 - 8)
        } else {
            let len = be32(&hdr[1..5]);
            if !(4..=MAX_LEN).contains(&len) {
                return Header::NotAFrame;
            }
            (hdr[0], len as u64 - 4)
        };
        let role = self.frontend.map(|f| f == d);
        let ok = match (ty, role) {
            (0, Some(false)) => false,
            (0, _) => true,
            (t, Some(true)) => FRONTEND_TYPES.contains(&t),
            (t, Some(false)) => BACKEND_TYPES.contains(&t),
            (t, None) => FRONTEND_TYPES.contains(&t) || BACKEND_TYPES.contains(&t),
        };
        if !ok {
            return Header::NotAFrame;
        }
        if self.frontend.is_none() {
            if ty == 0 || FRONTEND_ONLY.contains(&ty) {
                self.frontend = Some(d);
            } else if BACKEND_ONLY.contains(&ty) {
                self.frontend = Some(1 - d);
            }
        }
        // Only messages whose contents matter are kept: not rows, not parameters.
        let keep_body = if self.frontend == Some(d) {
            matches!(ty, 0 | b'Q' | b'P' | b'B' | b'D' | b'C' | b'E')
        } else {
            matches!(ty, b'C' | b'E')
        };
        let ds = &mut self.streams.dirs[d];
        ds.start_body(if keep_body { MAX_KEEP } else { 0 });
        if untyped {
            // The code is part of the body for the startup family.
            ds.body.extend_from_slice(&hdr[4..8]);
        }
        Header::Frame {
            body_len,
            kind: ty,
            more: false,
        }
    }

    /// A whole message (body kept up to MAX_KEEP) in direction d.
    fn frame_done(
        &mut self,
        d: usize,
        ty: u8,
        body: &[u8],
        out: &mut Vec<L7Call>,
        stats: &mut ParseStats,
    ) {
        match self.is_frontend(d) {
            Some(true) => {
                let at_ns = self.streams.dirs[d].acc.span.map_or(0, |s| s.last_start_ns);
                let sd = 1 - d;
                let alone = self.streams.dirs[sd].st == St::Proto(PgSt::SeekEnd)
                    && !self.request_after_call_in_progress()
                    && !self
                        .pending
                        .iter()
                        .any(|e| matches!(e, Expect::Unseen { .. }));
                self.frontend_message(d, ty, body, at_ns, stats);
                if alone && self.request_after_call_in_progress() {
                    // A response whose end was out of sight ends, at the latest, when the
                    // client sends its next request while waiting for it alone (as
                    // Memcached's): its status unseen, the call is `unknown`, its end
                    // inferred. With more pending when the place was lost, the unseen bytes
                    // may end any of them: none is paired (`seek_end`).
                    self.end_unseen(sd, out, stats);
                    let ds = &mut self.streams.dirs[sd];
                    ds.st = St::Proto(PgSt::SeekStart);
                    ds.clear(HEADER);
                    ds.acc = BytesSince::default();
                }
            }
            Some(false) => self.backend_message(d, ty, body, out, stats),
            // Direction unknown (picked up in the middle of a session): framing only.
            None => self.streams.dirs[d].acc = BytesSince::default(),
        }
    }

    fn resync(&self, d: usize, p: &[u8]) -> bool {
        plausible_start(p, self.is_frontend(d))
    }

    fn lost(&mut self, d: usize, _why: Loss, stats: &mut ParseStats) {
        match self.is_frontend(d) {
            // What it answered meanwhile is known only by counting ReadyForQuery.
            Some(false) => self.unaligned = true,
            Some(true) => self.client_unseen(),
            None => self.distrust_pairing(stats),
        }
    }

    /// A server header beyond the snaplen inside a response in progress: its end is sought.
    fn header_unseen(
        &mut self,
        d: usize,
        _seg: &Segment,
        n: u64,
        _out: &mut Vec<L7Call>,
        stats: &mut ParseStats,
    ) -> bool {
        if self.is_frontend(d) == Some(false) && !self.unaligned && self.call_in_progress() {
            stats.skipped(n);
            if let Some(Expect::Query(q) | Expect::Execute(q)) = self.pending.front_mut() {
                q.lose_part();
            }
            let ds = &mut self.streams.dirs[d];
            ds.st = St::Proto(PgSt::SeekEnd);
            ds.clear(HEADER);
            ds.acc.add(n);
            ds.acc.truncated = true;
            return true;
        }
        false
    }

    fn in_state(
        &mut self,
        d: usize,
        s: PgSt,
        _seg: &Segment,
        data: &[u8],
        _out: &mut Vec<L7Call>,
        stats: &mut ParseStats,
    ) -> usize {
        if matches!(s, PgSt::SeekEnd | PgSt::SeekStart) {
            stats.skipped(data.len() as u64);
            return data.len();
        }
        let b = data[0];
        self.streams.dirs[d].st = St::Header;
        if matches!(self.pending.front(), Some(Expect::EncryptionAnswer)) {
            self.pending.pop();
        }
        match b {
            b'N' => {}
            b'S' | b'G' => {
                self.encrypted();
                stats.skipped(data.len() as u64 - 1);
                return data.len();
            }
            // Not an answer: maybe an error message (old servers).
            _ => self.streams.dirs[d].push_header_byte(b),
        }
        1
    }

    fn segment_in_state(
        &mut self,
        d: usize,
        s: PgSt,
        seg: &Segment,
        out: &mut Vec<L7Call>,
        stats: &mut ParseStats,
    ) -> Option<usize> {
        match s {
            PgSt::SeekEnd => self.seek_end(d, seg, out, stats),
            PgSt::SeekStart => self.seek_start(d, seg, stats),
            PgSt::EncryptionAnswer => Some(0),
        }
    }

    fn uncaptured_in_state(
        &mut self,
        d: usize,
        s: PgSt,
        seg: &Segment,
        n: u64,
        out: &mut Vec<L7Call>,
        stats: &mut ParseStats,
    ) {
        match s {
            PgSt::SeekEnd | PgSt::SeekStart => stats.skipped(n),
            PgSt::EncryptionAnswer => framing::unseen(self, d, seg, n, out, stats),
        }
    }
}

impl PostgresParser {
    /// The oldest expectation is a query or an Execute (its response may be under way).
    fn call_in_progress(&self) -> bool {
        matches!(
            self.pending.front(),
            Some(Expect::Query(_) | Expect::Execute(_))
        )
    }

    /// A server segment while its place is lost inside a response (`PgSt::SeekEnd`). Returns
    /// where in the captured bytes framing starts again, if it does in this segment.
    fn seek_end(
        &mut self,
        d: usize,
        seg: &Segment,
        _out: &mut Vec<L7Call>,
        stats: &mut ParseStats,
    ) -> Option<usize> {
        // A segment that starts like a reply after the client sent its next request may be
        // that request's reply (the end of the one in progress unseen) or the rest of the one
        // in progress: which, only ReadyForQuery can tell. Without a next request, the
        // response in progress goes on up to its ReadyForQuery.
        // A tail starts anywhere: never taken for a reply's start.
        let in_tail = self.streams.in_tail;
        let starts_reply = !in_tail
            && !matches!(seg.payload.first(), Some(b'D' | b'd'))
            && plausible_start(seg.payload, Some(false));
        if starts_reply && self.request_after_call_in_progress() {
            self.unaligned = true;
            let ds = &mut self.streams.dirs[d];
            ds.st = St::Header;
            ds.acc = BytesSince::default();
            return Some(0);
        }
        let end = if in_tail {
            tail_response_end(seg.payload)
        } else {
            response_end(seg.payload, seg.total_len)
        };
        if let Some((ready, completion)) = end {
            // The ReadyForQuery ends the call in progress only if no other request awaits
            // one (it may be any of theirs); what is right before it is that call's last
            // result only if the call is its batch's last.
            let awaiting = self.pending.iter().filter(|e| e.awaits_ready()).count();
            let unseen = self
                .pending
                .iter()
                .any(|e| matches!(e, Expect::Unseen { .. }));
            let last_of_batch = match self.pending.iter().nth(1) {
                _ if matches!(self.pending.front(), Some(Expect::Query(_))) => true,
                Some(next) => next.awaits_ready(),
                None => false,
            };
            let at = match completion {
                _ if awaiting != 1 || unseen => {
                    self.unaligned = true;
                    ready
                }
                Some(c) if last_of_batch => c,
                None if matches!(self.pending.front(), Some(Expect::Query(_))) => ready,
                _ => {
                    self.unaligned = true;
                    ready
                }
            };
            let ds = &mut self.streams.dirs[d];
            ds.acc.touch(self.streams.seg_id, seg);
            ds.acc.add(at as u64);
            ds.st = St::Header;
            stats.skipped(at as u64);
            return Some(at);
        }
        let ds = &mut self.streams.dirs[d];
        ds.acc.touch(self.streams.seg_id, seg);
        ds.acc.add(seg.total_len);
        stats.skipped(seg.total_len);
        None
    }

    /// A server segment once the response whose end went unseen is over (`PgSt::SeekStart`):
    /// framing resumes where a segment starts with a plausible first message of a reply (not
    /// a row or COPY data, which only continue one). Bytes before it are skipped (counted):
    /// part of a reply went unseen, so replies are paired again only once a ReadyForQuery can
    /// end one request alone ([`Self::ready_unpaired`]).
    fn seek_start(&mut self, d: usize, seg: &Segment, stats: &mut ParseStats) -> Option<usize> {
        let starts_reply = !self.streams.in_tail
            && !matches!(seg.payload.first(), Some(b'D' | b'd' | b'c'))
            && plausible_start(seg.payload, Some(false));
        if starts_reply {
            let ds = &mut self.streams.dirs[d];
            ds.st = St::Header;
            ds.clear(HEADER);
            ds.acc = BytesSince::default();
            return Some(0);
        }
        stats.skipped(seg.total_len);
        if !self.pending.is_empty() {
            self.unaligned = true;
        }
        None
    }

    /// Has the client sent a request beyond the batch of the call in progress (a simple query:
    /// anything after it; an Execute: anything after its Sync)?
    fn request_after_call_in_progress(&self) -> bool {
        let mut rest = self.pending.iter();
        match rest.next() {
            Some(Expect::Query(_)) => rest.next().is_some(),
            Some(Expect::Execute(_)) => rest
                .skip_while(|e| !matches!(e, Expect::Sync { .. }))
                .nth(1)
                .is_some(),
            _ => false,
        }
    }

    /// The response in progress ended out of sight: its call ends where its bytes were last
    /// seen; an extended query's batch is over up to its Sync.
    fn end_unseen(&mut self, d: usize, out: &mut Vec<L7Call>, stats: &mut ParseStats) {
        if !self.call_in_progress() {
            return;
        }
        let extended = match self.pending.pop() {
            Some(Expect::Query(mut q)) => {
                let (resp, _) = self.streams.dirs[d].acc.take();
                q.resp = Some(resp);
                q.truncated = true;
                stats.inferred_ends += 1;
                self.emit(*q, true, out);
                false
            }
            Some(Expect::Execute(mut q)) => {
                let (resp, _) = self.streams.dirs[d].acc.take();
                q.resp = Some(resp);
                q.truncated = true;
                stats.inferred_ends += 1;
                self.emit(*q, true, out);
                true
            }
            _ => false,
        };
        if extended {
            loop {
                match self.pending.pop() {
                    None | Some(Expect::Sync { .. }) => break,
                    Some(Expect::Execute(_) | Expect::Query(_)) => stats.damaged_messages += 1,
                    Some(_) => {}
                }
            }
        }
        self.streams.dirs[d].acc = BytesSince::default();
    }
}

/// Where the end of a response (a ReadyForQuery, with the CommandComplete or ErrorResponse
/// right before it when captured) lies in `p`, the captured start of a server segment of
/// `total` bytes: a ReadyForQuery (`Z`, length 5, status I/T/E) that ends the segment, or is
/// followed by a plausible server message. Row data may hold those 6 bytes too; only followed
/// by the segment's end or a message header is it taken.
fn response_end(p: &[u8], total: u64) -> Option<(usize, Option<usize>)> {
    const READY: [u8; 5] = [b'Z', 0, 0, 0, 5];
    let mut from = 0;
    while let Some(i) = p[from..]
        .windows(6)
        .position(|w| w[..5] == READY && matches!(w[5], b'I' | b'T' | b'E'))
        .map(|i| from + i)
    {
        let after = &p[i + 6..];
        let ends = if after.is_empty() {
            p.len() as u64 == total
        } else if after.len() >= 5 {
            plausible_header(after[0], be32(&after[1..5]), Some(false))
        } else {
            BACKEND_TYPES.contains(&after[0])
        };
        if ends {
            return Some((i, completion_before(p, i)));
        }
        from = i + 1;
    }
    None
}

/// A response's end in a tail `p` (a send's last bytes, after bytes unseen): a ReadyForQuery
/// that ends `p` exactly — the server flushes after each, so a real one ends its send — with a
/// CommandComplete or ErrorResponse right before it whose length ends exactly there too.
/// Stricter than [`response_end`] on a head (nothing after the ReadyForQuery to check, and no
/// message start known in `p`): the residual doubt is a row (or COPY data) whose value ends
/// with these very bytes exactly where a send ended, e.g. a text column holding a serialised
/// PostgreSQL response; the next send (more rows) would then still be read as the next reply's.
/// Returns where the ReadyForQuery and the completion start.
fn tail_response_end(p: &[u8]) -> Option<(usize, Option<usize>)> {
    let ready = p.len().checked_sub(6)?;
    let w = &p[ready..];
    if w[..5] != [b'Z', 0, 0, 0, 5] || !matches!(w[5], b'I' | b'T' | b'E') {
        return None;
    }
    let completion = completion_before(p, ready)?;
    Some((ready, Some(completion)))
}

/// The start of a CommandComplete (`C`, tag ≤ 64 bytes) or ErrorResponse (`E`, ≤ 2 KiB)
/// ending exactly at `end` in `p`, if one is captured whole.
fn completion_before(p: &[u8], end: usize) -> Option<usize> {
    if end == 0 || p[end - 1] != 0 {
        return None;
    }
    (6..=end.min(2048)).map(|n| end - n).find(|&at| {
        let len = be32(&p[at + 1..at + 5]) as usize;
        len + 1 == end - at && (p[at] == b'E' || (p[at] == b'C' && len <= 69))
    })
}

/// Keeps `name → value`, bounded: beyond MAX_NAMES, names are forgotten.
fn remember(map: &mut HashMap<String, String>, name: String, value: String) {
    if map.len() >= MAX_NAMES && !map.contains_key(&name) {
        map.clear();
    }
    map.insert(name, value);
}

impl StreamParser for PostgresParser {
    fn on_segment(&mut self, seg: &Segment<'_>, out: &mut Vec<L7Call>, stats: &mut ParseStats) {
        let between = framing::between_calls(self);
        self.turns.note(seg.dir.index(), self.frontend, between);
        framing::on_segment(self, seg, out, stats);
    }

    fn on_gap(&mut self, dir: Direction, len: Option<u64>, stats: &mut ParseStats) {
        self.turns.lost();
        framing::on_gap(self, dir, len, stats);
    }

    fn request_direction(&self) -> Option<Direction> {
        if self.encrypted {
            return None;
        }
        self.turns.request_direction(self.frontend)
    }

    fn on_close(&mut self, out: &mut Vec<L7Call>, stats: &mut ParseStats) {
        // A response whose end went unseen ended by the close at the latest.
        if let Some(d) = (0..2).find(|&d| self.streams.dirs[d].st == St::Proto(PgSt::SeekEnd)) {
            self.end_unseen(d, out, stats);
        }
        for e in self.pending.drain() {
            if matches!(e, Expect::Query(_) | Expect::Execute(_)) {
                stats.unanswered_requests += 1;
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

    const OUT: Direction = Direction::Egress;
    const IN: Direction = Direction::Ingress;

    /// Drives a parser with a fake clock (1 µs per syscall).
    type Driver = crate::protocols::test_driver::Driver<PostgresParser>;

    impl Driver {
        fn new() -> Self {
            Driver::with_parser(PostgresParser::new(&stream_config(0)))
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

    fn msg(ty: u8, body: &[u8]) -> Vec<u8> {
        let mut m = vec![ty];
        m.extend_from_slice(&(body.len() as u32 + 4).to_be_bytes());
        m.extend_from_slice(body);
        m
    }
    fn cs(parts: &[&[u8]]) -> Vec<u8> {
        let mut b = Vec::new();
        for p in parts {
            b.extend_from_slice(p);
            b.push(0);
        }
        b
    }
    fn startup() -> Vec<u8> {
        let mut body = PROTOCOL_3_0.to_be_bytes().to_vec();
        body.extend(cs(&[b"user", b"app", b"database", b"shop", b""]));
        let mut m = (body.len() as u32 + 4).to_be_bytes().to_vec();
        m.extend(body);
        m
    }
    fn startup_reply() -> Vec<u8> {
        [
            msg(b'R', &0u32.to_be_bytes()),
            msg(b'S', &cs(&[b"server_version", b"15.4"])),
            msg(b'K', &[0, 0, 0, 1, 0, 0, 0, 2]),
            msg(b'Z', b"I"),
        ]
        .concat()
    }
    fn q(sql: &str) -> Vec<u8> {
        msg(b'Q', &cs(&[sql.as_bytes()]))
    }
    fn complete(tag: &str) -> Vec<u8> {
        msg(b'C', &cs(&[tag.as_bytes()]))
    }
    fn row() -> Vec<u8> {
        msg(b'D', &[0, 1, 0, 0, 0, 1, b'7'])
    }
    fn rowdesc() -> Vec<u8> {
        msg(
            b'T',
            &[
                0, 1, b'x', 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 23, 0, 4, 0, 0, 0, 0, 0, 0,
            ],
        )
    }
    fn ready() -> Vec<u8> {
        msg(b'Z', b"I")
    }
    fn error(code: &str, text: &str) -> Vec<u8> {
        let mut b = Vec::new();
        for (f, v) in [(b'S', "ERROR"), (b'V', "ERROR"), (b'C', code), (b'M', text)] {
            b.push(f);
            b.extend_from_slice(v.as_bytes());
            b.push(0);
        }
        b.push(0);
        msg(b'E', &b)
    }
    fn parse(name: &str, sql: &str) -> Vec<u8> {
        msg(
            b'P',
            &[cs(&[name.as_bytes(), sql.as_bytes()]), vec![0, 0]].concat(),
        )
    }
    fn bind(portal: &str, stmt: &str) -> Vec<u8> {
        // One text parameter, "42": never shown.
        let mut b = cs(&[portal.as_bytes(), stmt.as_bytes()]);
        b.extend_from_slice(&[0, 0, 0, 1, 0, 0, 0, 2, b'4', b'2', 0, 0]);
        msg(b'B', &b)
    }
    fn execute(portal: &str) -> Vec<u8> {
        msg(b'E', &[cs(&[portal.as_bytes()]), vec![0, 0, 0, 0]].concat())
    }
    fn describe_portal(portal: &str) -> Vec<u8> {
        msg(b'D', &[vec![b'P'], cs(&[portal.as_bytes()])].concat())
    }
    fn sync() -> Vec<u8> {
        msg(b'S', b"")
    }
    /// A password in SQL (psql's `\\password`, `CREATE ROLE … PASSWORD`) never reaches a
    /// call: not its resource (JSON's `resource`, the TUI's lists) nor its head (the TUI's
    /// details), both made from the one redacted text.
    #[test]
    fn passwords_in_queries_reach_neither_resource_nor_head() {
        let mut d = Driver::with_parser(PostgresParser::new(&stream_config(4096)));
        d.seg(OUT, &startup()).seg(IN, &startup_reply());
        for sql in [
            "ALTER USER app PASSWORD 'Hunter2pg'",
            "CREATE ROLE r LOGIN ENCRYPTED PASSWORD 'Hunter2pg'",
        ] {
            d.seg(OUT, &q(sql))
                .seg(IN, &[complete("ALTER ROLE"), ready()].concat());
        }
        assert_eq!(d.calls.len(), 2);
        for c in &d.calls {
            assert!(
                c.resource.contains("PASSWORD '[redacted]'"),
                "{}",
                c.resource
            );
            let head = String::from_utf8_lossy(&c.req_head.shown()).into_owned();
            assert!(
                head.contains("[redacted]") && !head.contains("Hunter2pg"),
                "{head}"
            );
            assert!(!format!("{c:?}").contains("Hunter2pg"));
        }
    }

    fn simple_session() -> (Vec<u8>, Vec<u8>) {
        let client = [
            startup(),
            q("SELECT x FROM t WHERE id = 7"),
            q("UPDATE t SET x = 1"),
        ]
        .concat();
        let server = [
            startup_reply(),
            rowdesc(),
            row(),
            row(),
            complete("SELECT 2"),
            ready(),
            complete("UPDATE 3"),
            ready(),
        ]
        .concat();
        (client, server)
    }

    fn s(
        m: &str,
        r: &str,
        st: Option<&str>,
        rows: Option<&str>,
    ) -> (String, String, Option<String>, Option<String>) {
        (m.into(), r.into(), st.map(Into::into), rows.map(Into::into))
    }

    #[test]
    fn detection() {
        assert!(is_connection_start(&startup()));
        assert!(is_connection_start(&[0, 0, 0, 8, 4, 0xd2, 0x16, 0x2f]));
        assert!(is_connection_start(&q("SELECT 1")));
        assert!(is_connection_start(&parse("", "select 1")));
        assert!(is_connection_start(&bind("", "P0_1")));
        assert!(is_connection_start(&bind("", "")));
        assert!(is_connection_start(&bind("", "P0_1")[..9]));
        assert!(!is_connection_start(&msg(b'B', b"a b\0\0\0\0\0\0\0\0")));
        assert!(!is_connection_start(&msg(b'B', b"\0\0\xff\xff\0\0\0\0")));
        assert!(!is_connection_start(b"BEGIN;\n"));
        assert!(is_connection_start(&parse(
            "S_1",
            "  INSERT INTO t VALUES ($1)"
        )));
        assert!(!is_connection_start(&ready()));
        assert!(!is_connection_start(&startup_reply()));
        assert!(!is_connection_start(&complete("SELECT 1")));
        assert!(!is_connection_start(&msg(b'Q', &[0xff, 0xfe, 0])));
        assert!(!is_connection_start(b"QUIT\r\n"));
        assert!(!is_connection_start(b"GET / HTTP/1.1\r\n"));
        assert!(!is_connection_start(b"PING\r\n"));
    }

    #[test]
    fn simple_queries_with_startup() {
        let (c, sv) = simple_session();
        let mut d = Driver::new();
        d.seg(OUT, &c[..startup().len()])
            .seg(IN, &startup_reply())
            .seg(OUT, &c[startup().len()..])
            .seg(IN, &sv[startup_reply().len()..])
            .close();
        assert_eq!(
            d.summary(),
            vec![
                s("SELECT", "SELECT x FROM t WHERE id = 7", None, Some("2")),
                s("UPDATE", "UPDATE t SET x = 1", None, Some("3")),
            ]
        );
        assert_eq!(
            d.calls[0].req.bytes,
            q("SELECT x FROM t WHERE id = 7").len() as u64
        );
        let resp = [rowdesc(), row(), row(), complete("SELECT 2"), ready()].concat();
        assert_eq!(d.calls[0].resp.bytes, resp.len() as u64);
        assert_eq!(d.detail(0, "tag"), Some("SELECT 2"));
        assert_eq!(d.calls[0].version, "3.0");
        assert_eq!(d.stats, ParseStats::default());
    }

    /// Every split of both directions' bytes gives the same calls.
    #[test]
    fn every_byte_split() {
        let (c, sv) = simple_session();
        let want = {
            let mut d = Driver::new();
            d.seg(OUT, &c).seg(IN, &sv).close();
            d.summary()
        };
        assert_eq!(want.len(), 2);
        for i in 0..=c.len() {
            for j in (0..=sv.len()).step_by(3) {
                let mut d = Driver::new();
                d.seg(OUT, &c[..i])
                    .seg(OUT, &c[i..])
                    .seg(IN, &sv[..j])
                    .seg(IN, &sv[j..])
                    .close();
                assert_eq!(d.summary(), want, "split {i} {j}");
                assert_eq!(d.stats, ParseStats::default());
            }
        }
    }

    #[test]
    fn two_statements_in_one_query_make_one_call() {
        let mut d = Driver::new();
        d.seg(OUT, &q("INSERT INTO t VALUES (1); SELECT 1"))
            .seg(
                IN,
                &[
                    complete("INSERT 0 1"),
                    rowdesc(),
                    row(),
                    complete("SELECT 1"),
                    ready(),
                ]
                .concat(),
            )
            .close();
        assert_eq!(
            d.summary(),
            vec![s(
                "INSERT",
                "INSERT INTO t VALUES (1); SELECT 1",
                None,
                Some("2")
            )]
        );
        assert_eq!(d.detail(0, "statements"), Some("2"));
        assert_eq!(d.detail(0, "tag"), Some("SELECT 1"));
    }

    #[test]
    fn simple_query_error() {
        let mut d = Driver::new();
        d.seg(OUT, &q("SELECT * FROM nope"))
            .seg(
                IN,
                &[error("42P01", "relation \"nope\" does not exist"), ready()].concat(),
            )
            .seg(OUT, &q("SELECT 1"))
            .seg(
                IN,
                &[rowdesc(), row(), complete("SELECT 1"), ready()].concat(),
            );
        assert_eq!(
            d.summary(),
            vec![
                s("SELECT", "SELECT * FROM nope", Some("42P01"), None),
                s("SELECT", "SELECT 1", None, Some("1")),
            ]
        );
        assert_eq!(d.calls[0].outcome, Outcome::ClientError);
        assert_eq!(d.detail(0, "severity"), Some("ERROR"));
        assert_eq!(
            d.detail(0, "error"),
            Some("relation \"nope\" does not exist")
        );
        assert_eq!(sqlstate_outcome("57P01"), Outcome::ServerError);
    }

    /// Pipelined extended protocol: named statements prepared once, executed across Syncs.
    #[test]
    fn pipelined_extended_named_statements() {
        let client1 = [
            parse("s1", "SELECT abalance FROM accounts WHERE aid = $1"),
            parse(
                "s2",
                "UPDATE accounts SET abalance = abalance + $1 WHERE aid = $2",
            ),
            bind("", "s1"),
            describe_portal(""),
            execute(""),
            bind("p2", "s2"),
            execute("p2"),
            sync(),
        ]
        .concat();
        let server1 = [
            msg(b'1', b""),
            msg(b'1', b""),
            msg(b'2', b""),
            rowdesc(),
            row(),
            complete("SELECT 1"),
            msg(b'2', b""),
            complete("UPDATE 1"),
            ready(),
        ]
        .concat();
        // Later cycle: the statements by name only, and the unnamed statement.
        let client2 = [
            bind("", "s2"),
            execute(""),
            parse("", "DELETE FROM t"),
            bind("", ""),
            execute(""),
            sync(),
        ]
        .concat();
        let server2 = [
            msg(b'2', b""),
            complete("UPDATE 1"),
            msg(b'1', b""),
            msg(b'2', b""),
            complete("DELETE 4"),
            ready(),
        ]
        .concat();
        let mut d = Driver::new();
        d.seg(OUT, &client1)
            .seg(IN, &server1)
            .seg(OUT, &client2)
            .seg(IN, &server2)
            .close();
        assert_eq!(
            d.summary(),
            vec![
                s(
                    "SELECT",
                    "SELECT abalance FROM accounts WHERE aid = $1",
                    None,
                    Some("1")
                ),
                s(
                    "UPDATE",
                    "UPDATE accounts SET abalance = abalance + $1 WHERE aid = $2",
                    None,
                    Some("1")
                ),
                s(
                    "UPDATE",
                    "UPDATE accounts SET abalance = abalance + $1 WHERE aid = $2",
                    None,
                    Some("1")
                ),
                s("DELETE", "DELETE FROM t", None, Some("4")),
            ]
        );
        assert_eq!(d.detail(0, "statement"), Some("s1"));
        assert_eq!(d.detail(0, "query_protocol"), Some("extended"));
        // Parameters never show.
        assert!(d.calls.iter().all(|c| !c.resource.contains("42")));
        assert_eq!(d.stats, ParseStats::default());
        // Every byte belongs to a call except the Syncs and ReadyForQuerys.
        let req: u64 = d.calls.iter().map(|c| c.req.bytes).sum();
        assert_eq!(
            req,
            (client1.len() + client2.len() - 2 * sync().len()) as u64
        );
    }

    /// An error in the middle of a pipeline: the server skips the rest until Sync.
    #[test]
    fn error_in_pipeline_skips_to_sync() {
        let client = [
            parse("", "INSERT INTO t VALUES ($1)"),
            bind("", ""),
            execute(""),
            bind("", ""),
            execute(""),
            bind("", ""),
            execute(""),
            sync(),
            parse("", "SELECT 1"),
            bind("", ""),
            execute(""),
            sync(),
        ]
        .concat();
        let server = [
            msg(b'1', b""),
            msg(b'2', b""),
            complete("INSERT 0 1"),
            msg(b'2', b""),
            error(
                "23505",
                "duplicate key value violates unique constraint \"t_pkey\"",
            ),
            ready(),
            msg(b'1', b""),
            msg(b'2', b""),
            row(),
            complete("SELECT 1"),
            ready(),
        ]
        .concat();
        let mut d = Driver::new();
        d.seg(OUT, &client).seg(IN, &server).close();
        assert_eq!(
            d.summary(),
            vec![
                s("INSERT", "INSERT INTO t VALUES ($1)", None, Some("1")),
                s("INSERT", "INSERT INTO t VALUES ($1)", Some("23505"), None),
                s("SELECT", "SELECT 1", None, Some("1")),
            ]
        );
        assert_eq!(d.stats.unreplied_requests, 1);
        assert_eq!(d.stats.unmatched_responses, 0);
    }

    #[test]
    fn failed_parse_is_a_call() {
        let client = [parse("", "SELEC 1"), bind("", ""), execute(""), sync()].concat();
        let server = [error("42601", "syntax error at or near \"SELEC\""), ready()].concat();
        let mut d = Driver::new();
        d.seg(OUT, &client).seg(IN, &server).close();
        assert_eq!(
            d.summary(),
            vec![s("SELEC", "SELEC 1", Some("42601"), None)]
        );
        assert_eq!(d.stats.unreplied_requests, 1);
    }

    #[test]
    fn notify_is_a_push_and_notices_answer_nothing() {
        let notification = msg(
            b'A',
            &[vec![0, 0, 0, 9], cs(&[b"jobs", b"payload"])].concat(),
        );
        let mut d = Driver::new();
        d.seg(OUT, &q("LISTEN jobs"))
            .seg(IN, &[complete("LISTEN"), ready()].concat())
            .seg(IN, &notification)
            .seg(IN, &msg(b'N', &cs(&[b"SWARNING", b""])))
            .seg(OUT, &q("SELECT 1"))
            .seg(
                IN,
                &[
                    msg(b'S', &cs(&[b"TimeZone", b"UTC"])),
                    notification.clone(),
                    row(),
                    complete("SELECT 1"),
                    ready(),
                ]
                .concat(),
            )
            .close();
        assert_eq!(
            d.summary(),
            vec![
                s("LISTEN", "LISTEN jobs", None, Some("0")),
                s("SELECT", "SELECT 1", None, Some("1"))
            ]
        );
        assert_eq!(d.stats.pushes, 2);
        assert_eq!(d.stats.unmatched_responses, 0);
    }

    #[test]
    fn ssl_request_answered_s_stops_parsing() {
        let ssl = [0, 0, 0, 8, 4, 0xd2, 0x16, 0x2f];
        let mut d = Driver::new();
        d.seg(OUT, &ssl)
            .seg(IN, b"S")
            .seg(OUT, b"\x16\x03\x01 tls hello")
            .seg(OUT, &q("SELECT 1"));
        assert!(d.calls.is_empty());
        assert_eq!(d.stats.desyncs, 0, "TLS is no loss");
        assert!(d.stats.unparsed_bytes > 0);
        // Answered N: a plain startup follows.
        let mut d = Driver::new();
        d.seg(OUT, &ssl)
            .seg(IN, b"N")
            .seg(OUT, &startup())
            .seg(IN, &startup_reply());
        d.seg(OUT, &q("SELECT 1"))
            .seg(IN, &[row(), complete("SELECT 1"), ready()].concat());
        assert_eq!(d.summary(), vec![s("SELECT", "SELECT 1", None, Some("1"))]);
        assert_eq!(d.stats, ParseStats::default());
    }

    #[test]
    fn large_data_rows_and_query_skipped_by_length() {
        // A query of 100 kB captured 64 bytes, a 1 MB DataRow captured 64 bytes.
        let sql = format!("SELECT '{}'", "x".repeat(100_000));
        let big_q = q(&sql);
        let big_row = msg(b'D', &vec![b'y'; 1_000_000]);
        let resp = [big_row.clone(), complete("SELECT 1"), ready()].concat();
        let mut d = Driver::new();
        d.seg_cut(OUT, &big_q[..64], big_q.len() as u64)
            .seg_cut(IN, &big_row[..64], big_row.len() as u64)
            .seg(IN, &resp[big_row.len()..])
            .close();
        assert_eq!(d.calls.len(), 1);
        assert!(d.calls[0].truncated);
        assert!(d.calls[0].resource.starts_with("SELECT 'xxx"));
        assert_eq!(d.calls[0].req.bytes, big_q.len() as u64);
        assert_eq!(d.calls[0].resp.bytes, resp.len() as u64);
        assert_eq!(d.detail(0, "rows"), Some("1"));
        assert_eq!(d.stats, ParseStats::default());
    }

    /// `rows` DataRows of `width` bytes each as a server sends them: RowDescription, the rows,
    /// CommandComplete, ReadyForQuery.
    fn result_set(rows: usize, width: usize) -> Vec<u8> {
        let row = msg(
            b'D',
            &[
                &[0, 1][..],
                &(width as u32).to_be_bytes(),
                &vec![b'x'; width],
            ]
            .concat(),
        );
        let mut r = rowdesc();
        for _ in 0..rows {
            r.extend_from_slice(&row);
        }
        r.extend([complete(&format!("SELECT {rows}")), ready()].concat());
        r
    }

    /// Feeds `bytes` as server writes of `write` bytes, each captured up to `snap`.
    fn server_writes(d: &mut Driver, bytes: &[u8], write: usize, snap: usize) {
        for w in bytes.chunks(write) {
            d.seg_cut(IN, &w[..w.len().min(snap)], w.len() as u64);
        }
    }

    #[test]
    fn rows_whose_headers_are_beyond_the_snaplen_still_end_at_their_ready_for_query() {
        // 1011-byte rows in 8 KiB writes captured 4 KiB: most row headers go unseen. The
        // last write (its end captured) holds CommandComplete and ReadyForQuery.
        let resp = result_set(1000, 1000);
        let last = resp.len() % 8192;
        assert!(last < 4096, "the test needs the last write captured whole");
        let mut d = Driver::new();
        d.seg(
            OUT,
            &q("SELECT repeat('x', 1000) FROM generate_series(1, 1000)"),
        );
        server_writes(&mut d, &resp, 8192, 4096);
        d.seg(OUT, &q("SELECT 1"))
            .seg(IN, &result_set(1, 1))
            .close();
        assert_eq!(d.calls.len(), 2);
        assert_eq!(d.detail(0, "rows"), Some("1000"));
        assert_eq!(d.detail(0, "tag"), Some("SELECT 1000"));
        assert!(!d.calls[0].end_inferred);
        assert!(d.calls[0].truncated);
        assert_eq!(d.calls[0].resp.bytes, resp.len() as u64);
        assert_eq!(d.detail(1, "rows"), Some("1"));
        assert_eq!((d.stats.desyncs, d.stats.damaged_messages), (0, 0));
        assert_eq!(d.stats.unmatched_responses, 0);
    }

    #[test]
    fn an_extended_query_s_rows_beyond_the_snaplen_end_at_command_complete() {
        let sql = "SELECT x FROM t";
        let req = [
            parse("", sql),
            bind("", ""),
            describe_portal(""),
            execute(""),
            sync(),
        ]
        .concat();
        // ParseComplete, BindComplete, then the rows (RowDescription answers Describe).
        let resp = [msg(b'1', &[]), msg(b'2', &[]), result_set(500, 2000)].concat();
        let mut d = Driver::new();
        d.seg(OUT, &req);
        // The rows in 16 KiB writes captured 1 KiB, CommandComplete and ReadyForQuery apart.
        let tail = complete("SELECT 500").len() + ready().len();
        server_writes(&mut d, &resp[..resp.len() - tail], 16384, 1024);
        d.seg(IN, &resp[resp.len() - tail..]).close();
        assert_eq!(
            d.summary(),
            vec![s("SELECT", sql, None, Some("500"))],
            "{:?}",
            d.stats
        );
        assert!(!d.calls[0].end_inferred);
        assert_eq!((d.stats.desyncs, d.stats.unmatched_responses), (0, 0));
    }

    #[test]
    fn a_response_end_beyond_the_snaplen_ends_when_the_next_request_is_sent_alone() {
        // The whole response in one write captured 100 bytes, then the client's next query:
        // sent while waiting for that response alone, it ends it (its end inferred, its
        // status unseen: unknown, no rows) and the next reply pairs. Both views.
        let resp = result_set(20, 100);
        for (client, server) in [(OUT, IN), (IN, OUT)] {
            let mut d = Driver::new();
            d.seg(client, &q("SELECT a"))
                .seg_cut(server, &resp[..100], resp.len() as u64)
                .seg(client, &q("SELECT b"))
                .seg(server, &result_set(2, 3))
                .seg(client, &q("SELECT c"))
                .seg_cut(server, &resp[..100], resp.len() as u64)
                .close();
            assert_eq!(
                d.summary(),
                vec![
                    s("SELECT", "SELECT a", None, None),
                    s("SELECT", "SELECT b", None, Some("2")),
                    s("SELECT", "SELECT c", None, None),
                ]
            );
            for i in [0, 2] {
                assert!(d.calls[i].end_inferred);
                assert_eq!(d.calls[i].outcome, Outcome::Unknown);
                assert_eq!(d.calls[i].resp.bytes, resp.len() as u64);
            }
            assert!(!d.calls[1].end_inferred);
            assert_eq!(d.calls[1].outcome, Outcome::Ok);
            assert_eq!(d.stats.inferred_ends, 2);
            assert_eq!(
                (d.stats.damaged_messages, d.stats.unmatched_responses),
                (0, 0)
            );
        }
        // The next reply's start unseen too: bytes up to a plausible reply start are skipped,
        // and that reply (part of it unseen) is not paired: counted.
        let mut d = Driver::new();
        let next = result_set(2, 3);
        d.seg(OUT, &q("SELECT a"))
            .seg_cut(IN, &resp[..100], resp.len() as u64)
            .seg(OUT, &q("SELECT b"))
            .seg(IN, &next[3..next.len() - 20])
            .seg(IN, &next[next.len() - 20..])
            .seg(OUT, &q("SELECT c"))
            .seg(IN, &result_set(1, 3))
            .close();
        assert_eq!(
            d.summary(),
            vec![
                s("SELECT", "SELECT a", None, None),
                s("SELECT", "SELECT c", None, Some("1")),
            ]
        );
        assert_eq!(d.stats.damaged_messages, 1);
        // More than one request pending when the place was lost (a pipelining client): the
        // unseen bytes may end either: nothing is paired until a ReadyForQuery can end one
        // request alone, and each is counted.
        let mut d = Driver::new();
        d.seg(OUT, &[q("SELECT a"), q("SELECT b")].concat())
            .seg_cut(IN, &resp[..100], resp.len() as u64)
            .seg(OUT, &q("SELECT c"))
            .seg(IN, &result_set(2, 3))
            .seg(IN, &result_set(2, 3))
            .close();
        assert!(d.calls.is_empty(), "{:?}", d.summary());
        assert_eq!(d.stats.damaged_messages + d.stats.unanswered_requests, 3);
        // Without a next request, what follows is the rest of that response: it ends at its
        // ReadyForQuery; its last result is seen, so its outcome is known, but not its rows.
        let tail = resp.len() - complete("SELECT 20").len() - ready().len();
        let mut d = Driver::new();
        d.seg(OUT, &q("SELECT a; SELECT b"))
            .seg_cut(IN, &resp[..100], tail as u64)
            .seg(IN, &resp[tail..])
            .close();
        assert_eq!(
            d.summary(),
            vec![s("SELECT", "SELECT a; SELECT b", None, None)]
        );
        assert_eq!(d.calls[0].outcome, Outcome::Ok);
    }

    #[test]
    fn ready_for_query_bytes_inside_row_data_do_not_end_a_response() {
        // A bytea row holding `Z 0 0 0 5 I` in its middle: not followed by a message header.
        let mut value = vec![b'x'; 3000];
        value[2000..2006].copy_from_slice(b"Z\0\0\0\x05I");
        let row = msg(
            b'D',
            &[&[0, 1][..], &3000u32.to_be_bytes(), &value].concat(),
        );
        let resp = [rowdesc(), row.clone(), row, complete("SELECT 2"), ready()].concat();
        let mut d = Driver::new();
        d.seg(OUT, &q("SELECT b FROM blobs"));
        assert!(resp.len() % 2500 <= 1200, "the last write captured whole");
        server_writes(&mut d, &resp, 2500, 1200);
        d.close();
        assert_eq!(
            d.summary(),
            vec![s("SELECT", "SELECT b FROM blobs", None, Some("2"))]
        );
        assert!(!d.calls[0].end_inferred);
        assert_eq!(d.calls[0].resp.bytes, resp.len() as u64);
    }

    #[test]
    fn gap_inside_a_row_only_skips() {
        let big_row = msg(b'D', &vec![b'y'; 10_000]);
        let mut d = Driver::new();
        d.seg(OUT, &q("SELECT y FROM t"))
            .seg(IN, &big_row[..100])
            .gap(IN, Some(9000))
            .seg(
                IN,
                &[big_row[9100..].to_vec(), complete("SELECT 1"), ready()].concat(),
            );
        assert_eq!(
            d.summary(),
            vec![s("SELECT", "SELECT y FROM t", None, Some("1"))]
        );
        assert!(d.calls[0].truncated);
    }

    #[test]
    fn unknown_gap_resyncs_at_next_message() {
        let mut d = Driver::new();
        d.seg(OUT, &q("SELECT 1"))
            .gap(IN, None)
            .seg(IN, &[0x33, 0x44, 0x55, 0x99, 0x01, 0x02].repeat(3))
            .seg(IN, &[complete("SELECT 1"), ready()].concat())
            .seg(OUT, &q("SELECT 2"))
            .seg(IN, &[row(), complete("SELECT 1"), ready()].concat());
        // The first query's answer is partly lost: the ReadyForQuery after the resync can
        // only be its own (nothing else awaits one), so it makes no call (counted) and the
        // second query pairs.
        assert_eq!(d.summary(), vec![s("SELECT", "SELECT 2", None, Some("1"))]);
        assert_eq!(d.stats.desyncs, 1);
        assert_eq!(d.stats.damaged_messages, 1);
        // A known gap on the client side: the query before it still gets the next reply
        // (the server answers in order); the one after it cannot be told from the lost ones.
        let mut d = Driver::new();
        d.seg(OUT, &q("SELECT 1"))
            .gap(OUT, Some(100))
            .seg(OUT, &q("SELECT 2"));
        d.seg(IN, &[complete("SELECT 1"), ready()].concat())
            .seg(IN, &[complete("SELECT 1"), ready()].concat());
        assert_eq!(d.summary(), vec![s("SELECT", "SELECT 1", None, Some("1"))]);
        assert_eq!(d.stats.damaged_messages, 1);
    }

    #[test]
    fn picked_up_mid_session() {
        let mut d = Driver::new();
        // The tail of a reply, then a whole cycle.
        d.seg(IN, b"ome tail of a row\x00\x00")
            .seg(IN, &[complete("SELECT 1"), ready()].concat())
            .seg(OUT, &q("SELECT 2"))
            .seg(IN, &[row(), complete("SELECT 1"), ready()].concat())
            .seg(
                OUT,
                &[bind("", "known_before"), execute(""), sync()].concat(),
            )
            .seg(
                IN,
                &[msg(b'2', b""), complete("SELECT 0"), ready()].concat(),
            );
        assert_eq!(
            d.summary(),
            vec![
                s("SELECT", "SELECT 2", None, Some("1")),
                s("EXECUTE", "EXECUTE known_before", None, Some("0")),
            ]
        );
    }

    #[test]
    fn garbage_never_makes_calls() {
        let mut d = Driver::new();
        d.seg(OUT, b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
            .seg(IN, b"HTTP/1.1 200 OK\r\n\r\n")
            .close();
        assert!(d.calls.is_empty());
        assert!(d.stats.desyncs >= 1);
    }

    #[test]
    fn merged_messages_in_one_segment() {
        let (c, sv) = simple_session();
        let mut d = Driver::new();
        d.seg(OUT, &c).seg(IN, &sv).close();
        assert_eq!(d.calls.len(), 2);
        assert_eq!(d.calls[0].req.syscalls, 1);
        assert_eq!(d.stats, ParseStats::default());
    }

    #[test]
    fn copy_from_stdin() {
        let mut d = Driver::new();
        d.seg(OUT, &q("COPY t FROM STDIN"))
            .seg(IN, &msg(b'G', &[0, 0, 1, 0, 0]))
            .seg(
                OUT,
                &[msg(b'd', b"1\tx\n"), msg(b'd', b"2\ty\n"), msg(b'c', b"")].concat(),
            )
            .seg(IN, &[complete("COPY 2"), ready()].concat());
        assert_eq!(
            d.summary(),
            vec![s("COPY", "COPY t FROM STDIN", None, Some("2"))]
        );
        assert_eq!(d.stats, ParseStats::default());
    }

    #[test]
    fn notification_before_a_reply_does_not_start_it() {
        let notification = msg(b'A', &[vec![0, 0, 0, 9], cs(&[b"jobs", b""])].concat());
        let mut d = Driver::new();
        d.seg(OUT, &q("SELECT 1"))
            .seg(IN, &notification)
            .seg(IN, &[row(), complete("SELECT 1"), ready()].concat());
        assert_eq!(d.calls.len(), 1);
        assert_eq!(d.calls[0].resp.first_start_ns, 3000);
        assert_eq!(d.calls[0].resp.syscalls, 1);
        assert_eq!(d.stats.pushes, 1);
    }

    #[test]
    fn error_at_sync_ends_with_its_ready_for_query() {
        let client = [
            parse("", "INSERT INTO t VALUES (1)"),
            bind("", ""),
            execute(""),
            sync(),
        ]
        .concat();
        let server = [
            msg(b'1', b""),
            msg(b'2', b""),
            complete("INSERT 0 1"),
            error("23503", "deferred constraint"),
            ready(),
        ]
        .concat();
        let mut d = Driver::new();
        d.seg(OUT, &client)
            .seg(IN, &server)
            .seg(OUT, &q("SELECT 1"));
        d.seg(IN, &[row(), complete("SELECT 1"), ready()].concat())
            .close();
        assert_eq!(d.calls.len(), 2);
        assert_eq!(d.stats, ParseStats::default());
    }

    /// The extended protocol split at every byte of both directions gives the same calls.
    #[test]
    fn every_byte_split_extended() {
        let client = [
            parse("s1", "SELECT 1"),
            bind("", "s1"),
            describe_portal(""),
            execute(""),
            sync(),
        ]
        .concat();
        let server = [
            msg(b'1', b""),
            msg(b'2', b""),
            rowdesc(),
            row(),
            complete("SELECT 1"),
            ready(),
        ]
        .concat();
        for i in 0..=client.len() {
            for j in 0..=server.len() {
                let mut d = Driver::new();
                d.seg(OUT, &client[..i]).seg(OUT, &client[i..]);
                d.seg(IN, &server[..j]).seg(IN, &server[j..]).close();
                assert_eq!(
                    d.summary(),
                    vec![s("SELECT", "SELECT 1", None, Some("1"))],
                    "{i} {j}"
                );
                assert_eq!(d.calls[0].req.bytes, (client.len() - sync().len()) as u64);
                assert_eq!(d.stats, ParseStats::default());
            }
        }
    }

    #[test]
    fn keywords() {
        assert_eq!(sql_keyword("  /* app */ select 1"), "SELECT");
        assert_eq!(sql_keyword("-- c\n(SELECT 1)"), "SELECT");
        assert_eq!(sql_keyword(""), "QUERY");
        assert_eq!(tag_rows("INSERT 0 3"), Some(3));
        assert_eq!(tag_rows("BEGIN"), None);
    }

    #[test]
    fn a_startup_burst_beyond_the_snaplen_leaves_the_first_query_paired() {
        // The server's startup burst (ParameterStatus messages) in one write captured 256
        // bytes: its ReadyForQuery unseen. The client's first query proves it came (a client
        // waits for it), so what the server sends next answers that query.
        let mut burst = vec![msg(b'R', &0u32.to_be_bytes())];
        for i in 0..20 {
            let name = format!("param{i}");
            burst.push(msg(b'S', &cs(&[name.as_bytes(), b"some value"])));
        }
        burst.push(msg(b'K', &[0, 0, 0, 1, 0, 0, 0, 2]));
        burst.push(msg(b'Z', b"I"));
        let burst = burst.concat();
        let mut d = Driver::new();
        d.seg(OUT, &startup())
            .seg_cut(IN, &burst[..256], burst.len() as u64)
            .seg(OUT, &q("SELECT 1"))
            .seg(IN, &result_set(1, 1))
            .close();
        assert_eq!(d.summary(), vec![s("SELECT", "SELECT 1", None, Some("1"))]);
        assert_eq!(d.calls[0].outcome, Outcome::Ok);
        assert_eq!(
            (d.stats.damaged_messages, d.stats.unanswered_requests),
            (0, 0)
        );
    }

    /// A query text longer than the snaplen and a tail: the resource is its start, never its
    /// start with its tail's bytes spliced on (the kept prefix stops at the unseen bytes); a
    /// response whose rows hide their headers ends in the last write's tail, with the tag's
    /// rows; a ReadyForQuery in a tail without a completion right before it is no end.
    #[test]
    fn tails_end_responses_and_never_splice_a_kept_prefix() {
        let mut d = Driver::new();
        d.seg(OUT, &startup()).seg(IN, &startup_reply());
        // Every place of the text its own: its end spliced onto its start would show.
        let text: String = (0..2000).map(|i| format!("{i:05}")).collect();
        let sql = format!("SELECT '{text}' AS long_text");
        let rows: Vec<u8> = (0..3000).flat_map(|_| row()).collect();
        let resp = [rowdesc(), rows, complete("SELECT 3000"), ready()].concat();
        let (first, last) = resp.split_at(resp.len() / 2);
        d.seg_snapped(OUT, &q(&sql), 4096)
            .seg_snapped(IN, first, 1024)
            .seg_snapped(IN, last, 1024);
        assert_eq!(d.calls.len(), 1);
        let c = &d.calls[0];
        assert!(
            sql.starts_with(&c.resource) && c.resource.len() > 4000,
            "{}",
            c.resource
        );
        assert_eq!((c.outcome, c.end_inferred), (Outcome::Ok, false));
        assert_eq!(c.resp.bytes, resp.len() as u64);
        // Rows not reported: a text seen cut may hold several statements, of which only the
        // last's tag was seen.
        assert_eq!(d.detail(0, "rows"), None);
        d.seg(OUT, &q("SELECT x"))
            .seg_snapped(IN, first, 1024)
            .seg_snapped(IN, last, 1024);
        assert_eq!(d.detail(1, "rows"), Some("3000"));
        assert_eq!(d.calls[1].resp.bytes, resp.len() as u64);
        assert_eq!(d.calls[1].resp.last_end_ns, d.now + 500);

        // Row data that ends a write with a ReadyForQuery's bytes but no completion before.
        let mut d = Driver::new();
        d.seg(OUT, &startup()).seg(IN, &startup_reply());
        let mut fake = rows_of(3000);
        fake.extend(ready());
        d.seg(OUT, &q("SELECT x"))
            .seg_snapped(IN, &[rowdesc(), fake].concat(), 1024);
        assert!(d.calls.is_empty());
    }

    fn rows_of(n: usize) -> Vec<u8> {
        (0..n).flat_map(|_| row()).collect()
    }

    /// Where a CPU budget may cut a connection (src/source/sampling.rs): a query's first
    /// bytes after the last one's ReadyForQuery; never once the client sent while a query
    /// was under way (COPY FROM STDIN's data, pipelining) or bytes were lost.
    #[test]
    fn a_turn_to_the_frontend_starts_a_call_only_while_queries_came_alone() {
        let mut d = Driver::new();
        d.seg(OUT, &startup()).seg(IN, &startup_reply());
        for _ in 0..2 {
            d.seg(OUT, &q("SELECT 1"));
            d.seg(
                IN,
                &[rowdesc(), row(), complete("SELECT 1"), ready()].concat(),
            );
        }
        assert_eq!(d.calls.len(), 2);
        assert_eq!(d.p.request_direction(), Some(OUT));

        // The next query before the last one's ReadyForQuery.
        let mut p = Driver::new();
        p.seg(OUT, &startup()).seg(IN, &startup_reply());
        p.seg(OUT, &q("SELECT 1"))
            .seg(IN, &[rowdesc(), row()].concat());
        p.seg(OUT, &q("SELECT 2"));
        p.seg(
            IN,
            &[complete("SELECT 1"), ready(), complete("SELECT 2"), ready()].concat(),
        );
        assert_eq!(p.p.request_direction(), None);

        // Two queries in one segment: pipelining before any turn shows it.
        let mut b = Driver::new();
        b.seg(OUT, &startup()).seg(IN, &startup_reply());
        b.seg(OUT, &[q("SELECT 1"), q("SELECT 2")].concat());
        assert_eq!(b.p.request_direction(), None);
        // An extended exchange (Parse, Bind, Execute, Sync at once) is one call.
        let mut e = Driver::new();
        e.seg(OUT, &startup()).seg(IN, &startup_reply());
        e.seg(
            OUT,
            &[parse("", "SELECT 1"), bind("", ""), execute(""), sync()].concat(),
        );
        assert_eq!(e.p.request_direction(), Some(OUT));

        let mut g = Driver::new();
        g.seg(OUT, &startup())
            .seg(IN, &startup_reply())
            .gap(IN, Some(3));
        assert_eq!(g.p.request_direction(), None);
    }
}
