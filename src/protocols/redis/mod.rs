//! Redis: RESP2 and RESP3 over a byte stream, both directions.
//!
//! Framing follows the RESP lengths (`$<len>`, `*<n>`, `%<n>`, …), so a value larger than the
//! snaplen is skipped by count and never buffered; only the first bytes of a command's first
//! arguments (name, key) and of a reply's first elements are kept. Inline commands (`PING\r\n`
//! typed by hand) are framed on the command side.
//!
//! Pairing is by message count per direction ([`InOrder`]), never by time:
//! - pipelining: the n-th reply answers the n-th command sent;
//! - `MULTI`/`EXEC`: one call per command sent. Commands queued in a transaction are answered
//!   `+QUEUED` (their calls show the queueing, detail `reply: queued`); `EXEC`'s call carries the
//!   array of results (`nested_errors` counts the error replies inside it);
//! - pub/sub: `SUBSCRIBE a b` is one call answered by one confirmation per channel (an
//!   argument-less `UNSUBSCRIBE` by confirmations until the subscription count reaches 0 or
//!   another reply comes); `message`/`pmessage`/`smessage` arrays (RESP2, once subscribed) and
//!   RESP3 `>` pushes are not replies: they are counted in [`ParseStats::pushes`];
//! - `MONITOR`: the call ends at `+OK`; the lines that follow are counted as pushes;
//! - `CLIENT REPLY OFF`/`SKIP`: commands that get no reply make no call (counted in
//!   [`ParseStats::unreplied_requests`]);
//! - `HELLO 3` switches the connection to RESP3 (the calls' `version`), `RESET` back;
//! - `SYNC`/`PSYNC`: the connection becomes a replication stream and is no longer parsed.
//!
//! After a loss that may have hidden whole messages (a gap, bytes unseen or not RESP where a
//! message starts, the unseen tail of a command cut by the snaplen) no call is made on the
//! connection any more: a RESP reply names no command, and no later point can be proven to
//! realign the counts (the argument: [`RedisParser::unpaired`]). What is proven still pairs:
//! after lost commands, the commands pending before them get the next replies (the server
//! answers in order). The commands seen after the loss are counted in `damaged_messages`, the
//! replies nothing is left to pair with in `unmatched_responses`. A loss inside a value of
//! known length only skips bytes, and a reply whose end alone went out of sight ends where
//! the next command starts (`end_inferred`); a command cut so ends at its reply, but makes no
//! call (its size is not known).
//!
//! Timestamps are used only where the byte counts cannot decide: a reply seen before any
//! command (records of two CPUs can cross, or capture began mid-call) pairs with the next
//! command only if it ended after that command started.
//!
//! Secrets: the password arguments of `AUTH`, `HELLO … AUTH`, `MIGRATE … AUTH/AUTH2`,
//! `CONFIG SET`/`SENTINEL SET` of password parameters and `ACL SETUSER` rules are replaced by
//! `[redacted, N bytes]` in kept heads, and they are never a resource (those commands have no
//! key). Replies to `CONFIG GET`, `ACL` and `SENTINEL` commands are not kept at all.

use crate::text::lossy_prefix;
use std::collections::VecDeque;

use super::matching::InOrder;
use super::{
    BenchFixture, CallKind, CapturedHead, L7Call, MessageSpan, Outcome, ParseDepth, ParseStats,
    ParserConfig, Protocol, ProtocolDescriptor, ResourceKind, Segment, StreamParser,
};
use crate::event::Direction;

/// The protocol's entry in [`super::REGISTRY`].
pub const DESCRIPTOR: ProtocolDescriptor = ProtocolDescriptor {
    folder: "redis",
    title: "Redis",
    calls: &[CallKind {
        proto: Protocol::Redis,
        name: "redis",
        resource: ResourceKind::Command,
        metrics: super::MetricNames::database("redis"),
    }],
    kernel_id: Some(2),
    datagrams: false,
    copy_whole: true,
    detect: is_connection_start,
    new_parser: |cfg| Box::new(RedisParser::new(cfg)),
    benches: &[BenchFixture {
        file: "benchmark_p16.server.seg",
        what: "parse redis-benchmark -P 16",
        proto: Protocol::Redis,
        calls: 49,
    }],
};

/// Commands waiting for replies on one connection before deeper pipelines draw on the shared
/// budget (`matching::SHARED_PENDING_BYTES`; beyond both, the oldest is dropped, counted).
const MAX_PENDING: usize = 256;
/// Replies held while no command is pending (their command's record may come next).
const MAX_ORPHANS: usize = 16;
/// Deepest nesting of aggregates framed; deeper is taken as garbage (no server sends it).
const MAX_DEPTH: usize = 32;
/// Largest bulk string and aggregate believed; larger lengths are garbage (Redis' own
/// `proto-max-bulk-len` defaults to 512 MiB).
const MAX_BULK_LEN: u64 = 1 << 40;
const MAX_AGGREGATE_LEN: u64 = 1 << 32;
/// First elements of a message kept (a command's arguments, a reply's first elements).
const MAX_ELEMS: usize = 16;
/// Bytes kept of each of those elements.
const ELEM_KEEP: usize = 256;
/// Redis' limit for an inline command line (PROTO_INLINE_MAX_SIZE); bytes of it kept.
const MAX_INLINE: u32 = 64 * 1024;
const INLINE_KEEP: usize = 1024;
/// Longest number line: sign and 20 digits.
const MAX_NUMBER_LINE: u32 = 24;
/// Longest command name in detection, method (bytes), resource (key) and error detail kept.
const MAX_NAME: usize = 32;
const MAX_RESOURCE: usize = 256;
const MAX_ERROR_DETAIL: usize = 256;

// ---------------------------------------------------------------------------------------------
// Detection

/// Does this payload (the first one a connection shows in some direction) start Redis?
///
/// Accepted: a command in RESP form, `*<n>\r\n$<len>\r\n<name>\r\n` (1 ≤ n < 10^7, 1 ≤ len
/// ≤ 32, the name a letter followed by letters, digits or `._-|:`, as module commands like
/// `JSON.GET` have), which also covers a RESP2 pub/sub message (`*3\r\n$7\r\nmessage\r\n…`); or
/// a RESP3 push, `><n>\r\n$<len>\r\n<kind>\r\n` with a pub/sub or tracking kind. All of it must
/// be captured. Not accepted: replies (`+OK`, `-ERR`, `:1`, `$5` start POP3, SMTP and many
/// other protocols too; a connection whose first bytes are a reply is recognised at its next
/// command) and inline commands (`PING\r\n` is plain text).
pub fn is_connection_start(p: &[u8]) -> bool {
    command_start(p, b'*').is_some_and(|name| {
        name[0].is_ascii_alphabetic()
            && name
                .iter()
                .all(|c| c.is_ascii_alphanumeric() || b"._-|:".contains(c))
    }) || command_start(p, b'>').is_some_and(|kind| push_kind(kind) != PushKind::Other)
}

/// The first element of `<marker><n>\r\n$<len>\r\n<elem>\r\n`, if `p` starts so.
fn command_start(p: &[u8], marker: u8) -> Option<&[u8]> {
    let rest = p.strip_prefix(&[marker])?;
    let (n, rest) = number_line(rest, 7)?;
    let rest = rest.strip_prefix(b"$")?;
    let (len, rest) = number_line(rest, 2)?;
    if n == 0 || len == 0 || len as usize > MAX_NAME {
        return None;
    }
    let (name, rest) = rest.split_at_checked(len as usize)?;
    rest.starts_with(b"\r\n").then_some(name)
}

/// `<digits>\r\n` with 1..=max_digits digits.
fn number_line(p: &[u8], max_digits: usize) -> Option<(u64, &[u8])> {
    let digits = p.iter().take_while(|c| c.is_ascii_digit()).count();
    if digits == 0 || digits > max_digits {
        return None;
    }
    let rest = p[digits..].strip_prefix(b"\r\n")?;
    let n = p[..digits]
        .iter()
        .fold(0u64, |n, &c| n * 10 + u64::from(c - b'0'));
    Some((n, rest))
}

/// Could a command start at `p` (resynchronisation after lost bytes)? A RESP command as in
/// detection, or an inline command naming a known command.
fn looks_like_command(p: &[u8]) -> bool {
    if command_start(p, b'*').is_some_and(|name| name[0].is_ascii_alphabetic()) {
        return true;
    }
    let word_len = p.iter().take_while(|c| c.is_ascii_alphabetic()).count();
    let word = &p[..word_len];
    (1..=MAX_NAME).contains(&word_len)
        && matches!(p.get(word_len), Some(b' ' | b'\r' | b'\n'))
        && command_spec(Upper::new(word).as_bytes()).known
}

/// Could a reply start at `p`? Its type byte and a well-formed first line, all captured.
fn looks_like_reply(p: &[u8]) -> bool {
    let Some((&ty, rest)) = p.split_first() else {
        return false;
    };
    let Some(eol) = rest.windows(2).position(|w| w == b"\r\n") else {
        return false;
    };
    let line = &rest[..eol];
    let after = rest.get(eol + 2).copied();
    let digits = |s: &[u8]| !s.is_empty() && s.len() <= 20 && s.iter().all(u8::is_ascii_digit);
    let signed = |s: &[u8]| digits(s.strip_prefix(b"-").unwrap_or(s));
    // An aggregate's first element starts right after its line, if captured.
    let element_follows = |n: &[u8]| n == b"0" || after.is_none_or(|c| VALUE_TYPES.contains(&c));
    match ty {
        b'+' => line.iter().all(|c| (0x20..0x7f).contains(c)),
        b'-' => line.first().is_some_and(u8::is_ascii_uppercase),
        b':' | b'(' => signed(line),
        b'$' => line == b"-1" || digits(line),
        b'*' => line == b"-1" || (digits(line) && element_follows(line)),
        b'%' | b'~' | b'>' | b'|' => digits(line) && element_follows(line),
        b'!' | b'=' => digits(line),
        b'_' => line.is_empty(),
        b'#' => line == b"t" || line == b"f",
        b',' => {
            !line.is_empty()
                && line
                    .iter()
                    .all(|c| c.is_ascii_alphanumeric() || b".+-".contains(c))
        }
        _ => false,
    }
}

/// Bytes that start a RESP2/RESP3 value.
const VALUE_TYPES: &[u8] = b"+-:$*_,#!=(%~>|";

// ---------------------------------------------------------------------------------------------
// Commands: names, keys, secrets

/// A command name (or word) in upper case, cut at [`MAX_NAME`] bytes; no allocation.
struct Upper {
    buf: [u8; MAX_NAME],
    len: usize,
}

impl Upper {
    fn new(b: &[u8]) -> Upper {
        let mut buf = [0u8; MAX_NAME];
        let len = b.len().min(MAX_NAME);
        for (d, s) in buf.iter_mut().zip(b) {
            *d = s.to_ascii_uppercase();
        }
        Upper { buf, len }
    }
    fn as_bytes(&self) -> &[u8] {
        &self.buf[..self.len]
    }
    fn text(&self) -> String {
        String::from_utf8_lossy(self.as_bytes()).into_owned()
    }
}

/// Where a command's first key is (argument indices: 0 is the command name).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum KeyAt {
    None,
    Arg(usize),
    /// The argument at this index is numkeys; the keys follow it.
    AfterNumkeys(usize),
    /// The keys follow this token (`XREAD … STREAMS key …`).
    AfterToken(&'static [u8]),
    /// A container command whose keyed subcommands take the key after the subcommand.
    Sub,
}

/// How many keys a command names (the `keys` detail, for multi-key commands only).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum KeyCount {
    One,
    /// Every argument.
    All,
    /// Key-value pairs.
    Pairs,
    /// Every argument but a last timeout.
    AllButLast,
    /// The numkeys argument.
    Numkeys,
    /// Half the arguments after `STREAMS`.
    Streams,
}

#[derive(Debug, Clone, Copy)]
struct CommandSpec {
    key: KeyAt,
    count: KeyCount,
    /// The second word names the subcommand (`CLIENT SETNAME`): part of the method.
    container: bool,
    known: bool,
}

const fn keyed(key: KeyAt, count: KeyCount) -> CommandSpec {
    CommandSpec {
        key,
        count,
        container: false,
        known: true,
    }
}
const fn container(key: KeyAt) -> CommandSpec {
    CommandSpec {
        key,
        count: KeyCount::One,
        container: true,
        known: true,
    }
}

/// What ebtop knows of a command (upper-case name). Unknown commands (modules, renamed ones)
/// are taken to name their key first, as nearly all commands do.
fn command_spec(name: &[u8]) -> CommandSpec {
    use KeyAt::*;
    use KeyCount::*;
    match name {
        b"ACL" | b"CLIENT" | b"CLUSTER" | b"COMMAND" | b"CONFIG" | b"FUNCTION" | b"LATENCY"
        | b"MODULE" | b"PUBSUB" | b"SCRIPT" | b"SENTINEL" | b"SLOWLOG" => container(None),
        b"OBJECT" | b"XINFO" | b"XGROUP" | b"MEMORY" | b"DEBUG" => container(Sub),
        b"ASKING" | b"AUTH" | b"BGREWRITEAOF" | b"BGSAVE" | b"DBSIZE" | b"DISCARD" | b"ECHO"
        | b"EXEC" | b"FAILOVER" | b"FLUSHALL" | b"FLUSHDB" | b"HELLO" | b"INFO" | b"LASTSAVE"
        | b"LOLWUT" | b"MONITOR" | b"MULTI" | b"PING" | b"PSYNC" | b"QUIT" | b"RANDOMKEY"
        | b"READONLY" | b"READWRITE" | b"REPLCONF" | b"REPLICAOF" | b"RESET" | b"ROLE"
        | b"SAVE" | b"SCAN" | b"SELECT" | b"SHUTDOWN" | b"SLAVEOF" | b"SWAPDB" | b"SYNC"
        | b"TIME" | b"UNWATCH" | b"WAIT" | b"WAITAOF" => keyed(None, One),
        b"MGET" | b"DEL" | b"UNLINK" | b"EXISTS" | b"TOUCH" | b"WATCH" | b"SINTER" | b"SUNION"
        | b"SDIFF" | b"SINTERSTORE" | b"SUNIONSTORE" | b"SDIFFSTORE" | b"PFCOUNT" | b"PFMERGE" => {
            keyed(Arg(1), All)
        }
        b"MSET" | b"MSETNX" => keyed(Arg(1), Pairs),
        b"BLPOP" | b"BRPOP" | b"BZPOPMIN" | b"BZPOPMAX" => keyed(Arg(1), AllButLast),
        b"ZUNION" | b"ZINTER" | b"ZDIFF" | b"SINTERCARD" | b"ZINTERCARD" | b"LMPOP" | b"ZMPOP" => {
            keyed(AfterNumkeys(1), Numkeys)
        }
        b"EVAL" | b"EVALSHA" | b"EVAL_RO" | b"EVALSHA_RO" | b"FCALL" | b"FCALL_RO" | b"BLMPOP"
        | b"BZMPOP" => keyed(AfterNumkeys(2), Numkeys),
        b"XREAD" | b"XREADGROUP" => keyed(AfterToken(b"STREAMS"), Streams),
        b"BITOP" => keyed(Arg(2), One),
        b"MIGRATE" => keyed(Arg(3), One),
        // Pub/sub: the channel (or pattern) is the resource; a message never is.
        b"SUBSCRIBE" | b"PSUBSCRIBE" | b"SSUBSCRIBE" | b"UNSUBSCRIBE" | b"PUNSUBSCRIBE"
        | b"SUNSUBSCRIBE" | b"PUBLISH" | b"SPUBLISH" | b"KEYS" => keyed(Arg(1), One),
        b"APPEND"
        | b"BITCOUNT"
        | b"BITFIELD"
        | b"BITFIELD_RO"
        | b"BITPOS"
        | b"BLMOVE"
        | b"BRPOPLPUSH"
        | b"COPY"
        | b"DECR"
        | b"DECRBY"
        | b"DUMP"
        | b"EXPIRE"
        | b"EXPIREAT"
        | b"EXPIRETIME"
        | b"GEOADD"
        | b"GEODIST"
        | b"GEOHASH"
        | b"GEOPOS"
        | b"GEORADIUS"
        | b"GEORADIUS_RO"
        | b"GEORADIUSBYMEMBER"
        | b"GEORADIUSBYMEMBER_RO"
        | b"GEOSEARCH"
        | b"GEOSEARCHSTORE"
        | b"GET"
        | b"GETBIT"
        | b"GETDEL"
        | b"GETEX"
        | b"GETRANGE"
        | b"GETSET"
        | b"HDEL"
        | b"HEXISTS"
        | b"HGET"
        | b"HGETALL"
        | b"HINCRBY"
        | b"HINCRBYFLOAT"
        | b"HKEYS"
        | b"HLEN"
        | b"HMGET"
        | b"HMSET"
        | b"HRANDFIELD"
        | b"HSCAN"
        | b"HSET"
        | b"HSETNX"
        | b"HSTRLEN"
        | b"HVALS"
        | b"INCR"
        | b"INCRBY"
        | b"INCRBYFLOAT"
        | b"LCS"
        | b"LINDEX"
        | b"LINSERT"
        | b"LLEN"
        | b"LMOVE"
        | b"LPOP"
        | b"LPOS"
        | b"LPUSH"
        | b"LPUSHX"
        | b"LRANGE"
        | b"LREM"
        | b"LSET"
        | b"LTRIM"
        | b"MOVE"
        | b"PERSIST"
        | b"PEXPIRE"
        | b"PEXPIREAT"
        | b"PEXPIRETIME"
        | b"PFADD"
        | b"PSETEX"
        | b"PTTL"
        | b"RENAME"
        | b"RENAMENX"
        | b"RESTORE"
        | b"RPOP"
        | b"RPOPLPUSH"
        | b"RPUSH"
        | b"RPUSHX"
        | b"SADD"
        | b"SCARD"
        | b"SET"
        | b"SETBIT"
        | b"SETEX"
        | b"SETNX"
        | b"SETRANGE"
        | b"SISMEMBER"
        | b"SMEMBERS"
        | b"SMISMEMBER"
        | b"SMOVE"
        | b"SORT"
        | b"SORT_RO"
        | b"SPOP"
        | b"SRANDMEMBER"
        | b"SREM"
        | b"SSCAN"
        | b"STRLEN"
        | b"SUBSTR"
        | b"TTL"
        | b"TYPE"
        | b"XACK"
        | b"XADD"
        | b"XAUTOCLAIM"
        | b"XCLAIM"
        | b"XDEL"
        | b"XLEN"
        | b"XPENDING"
        | b"XRANGE"
        | b"XREVRANGE"
        | b"XSETID"
        | b"XTRIM"
        | b"ZADD"
        | b"ZCARD"
        | b"ZCOUNT"
        | b"ZDIFFSTORE"
        | b"ZINCRBY"
        | b"ZINTERSTORE"
        | b"ZLEXCOUNT"
        | b"ZMSCORE"
        | b"ZPOPMAX"
        | b"ZPOPMIN"
        | b"ZRANDMEMBER"
        | b"ZRANGE"
        | b"ZRANGEBYLEX"
        | b"ZRANGEBYSCORE"
        | b"ZRANGESTORE"
        | b"ZRANK"
        | b"ZREM"
        | b"ZREMRANGEBYLEX"
        | b"ZREMRANGEBYRANK"
        | b"ZREMRANGEBYSCORE"
        | b"ZREVRANGE"
        | b"ZREVRANGEBYLEX"
        | b"ZREVRANGEBYSCORE"
        | b"ZREVRANK"
        | b"ZSCAN"
        | b"ZSCORE"
        | b"ZUNIONSTORE" => keyed(Arg(1), One),
        _ => CommandSpec {
            key: KeyAt::Arg(1),
            count: KeyCount::One,
            container: false,
            known: false,
        },
    }
}

/// Parameters whose values are passwords (`CONFIG SET`, `SENTINEL SET`/`CONFIG SET`).
const SECRET_PARAMS: &[&[u8]] = &[
    b"requirepass",
    b"masterauth",
    b"primaryauth",
    b"auth-pass",
    b"sentinel-pass",
    b"tls-key-file-pass",
    b"tls-client-key-file-pass",
];

/// Is argument `i` of a command (of `nargs` arguments, the first ones in `args`) a secret?
fn is_secret_arg(args: &Elems, i: usize, nargs: u64) -> bool {
    let Some(cmd) = args.get(0) else {
        return false;
    };
    let arg_is = |j: usize, word: &[u8]| args.get(j).is_some_and(|a| a.eq_ignore_ascii_case(word));
    match Upper::new(cmd).as_bytes() {
        // AUTH password | AUTH username password
        b"AUTH" => i >= 1 && (nargs != 3 || i == 2),
        // HELLO protover AUTH username password …
        b"HELLO" => i >= 4 && arg_is(i - 2, b"AUTH"),
        // MIGRATE … AUTH password | AUTH2 username password
        b"MIGRATE" => (i >= 1 && arg_is(i - 1, b"AUTH")) || (i >= 2 && arg_is(i - 2, b"AUTH2")),
        b"CONFIG" | b"SENTINEL" => {
            i >= 1
                && args
                    .get(i - 1)
                    .is_some_and(|p| SECRET_PARAMS.iter().any(|s| p.eq_ignore_ascii_case(s)))
        }
        // ACL SETUSER name rule…: rules may hold passwords (`>pw`, `#hash`).
        b"ACL" => i >= 3 && arg_is(1, b"SETUSER"),
        _ => false,
    }
}

/// What a command's reply looks like, from the pairing's point of view.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Expect {
    /// This many replies (pub/sub subscriptions: one per channel).
    Count(u64),
    /// Confirmations until the subscription count reaches 0 or another reply comes
    /// (`UNSUBSCRIBE` without channels).
    UntilDone,
}

/// The pub/sub (un)subscription commands and the kinds of their confirmations.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Family {
    Subscribe,
    PSubscribe,
    SSubscribe,
    Unsubscribe,
    PUnsubscribe,
    SUnsubscribe,
}

/// The first element of a push (or of a reply shaped like one).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum PushKind {
    /// `message`, `pmessage`, `smessage`: a published message.
    Message,
    Confirmation(Family),
    /// `invalidate` (client-side caching).
    Invalidate,
    Other,
}

fn push_kind(word: &[u8]) -> PushKind {
    match word {
        b"message" | b"pmessage" | b"smessage" => PushKind::Message,
        b"subscribe" => PushKind::Confirmation(Family::Subscribe),
        b"psubscribe" => PushKind::Confirmation(Family::PSubscribe),
        b"ssubscribe" => PushKind::Confirmation(Family::SSubscribe),
        b"unsubscribe" => PushKind::Confirmation(Family::Unsubscribe),
        b"punsubscribe" => PushKind::Confirmation(Family::PUnsubscribe),
        b"sunsubscribe" => PushKind::Confirmation(Family::SUnsubscribe),
        b"invalidate" => PushKind::Invalidate,
        _ => PushKind::Other,
    }
}

/// What a command changes on the connection once it is answered without error.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Effect {
    None,
    Monitor,
    Hello(u8),
    Replication,
    Reset,
}

/// A command as understood: what the call shows and how its reply is paired.
struct Command {
    method: String,
    resource: String,
    keys: Option<u64>,
    family: Option<Family>,
    expect: Expect,
    effect: Effect,
    /// Its reply may hold secrets (`CONFIG GET requirepass`): not kept.
    secret_reply: bool,
    /// A transaction's bounds, and `CLIENT REPLY` switches.
    multi: Option<bool>,
    client_reply: Option<ReplyMode>,
    /// `SYNC`: the stream becomes replication at once (its reply is an RDB file).
    sync: bool,
}

fn parse_u64(b: &[u8]) -> Option<u64> {
    std::str::from_utf8(b).ok()?.parse().ok()
}

/// A command from its first arguments (`args`, of `nargs` in all); None when what names it
/// (the name, a container's subcommand) was not seen in full.
fn command(args: &Elems, nargs: u64, depth: ParseDepth) -> Option<Command> {
    if !args.whole(0) {
        return None;
    }
    let name = Upper::new(args.get(0).unwrap_or_default());
    let name_b = name.as_bytes();
    let spec = command_spec(name_b);
    if spec.container && nargs >= 2 && !args.whole(1) {
        return None;
    }
    let sub = args.get(1).map(Upper::new);
    let sub_b = sub.as_ref().map_or(&b""[..], Upper::as_bytes);
    let mut method = name.text();
    if spec.container
        && !sub_b.is_empty()
        && sub_b
            .iter()
            .all(|c| c.is_ascii_alphanumeric() || b"-_|".contains(c))
    {
        method.push(' ');
        method.push_str(&String::from_utf8_lossy(sub_b));
    }
    let key_index = match spec.key {
        KeyAt::None => None,
        KeyAt::Arg(i) => Some(i),
        KeyAt::AfterNumkeys(i) => args
            .get(i)
            .and_then(parse_u64)
            .filter(|&n| n > 0)
            .map(|_| i + 1),
        KeyAt::AfterToken(t) => (1..args.len())
            .find(|&j| args.get(j).is_some_and(|a| a.eq_ignore_ascii_case(t)))
            .map(|j| j + 1),
        KeyAt::Sub => match (name_b, sub_b) {
            (_, b"HELP") => None,
            (b"MEMORY", b"USAGE") | (b"DEBUG", b"OBJECT") => Some(2),
            (b"MEMORY" | b"DEBUG", _) => None,
            _ => Some(2),
        },
    };
    let mut key = key_index.and_then(|i| args.get(i));
    if name_b == b"MIGRATE" && key.is_some_and(<[u8]>::is_empty) {
        // MIGRATE host port "" db timeout … KEYS key…
        key = (1..args.len())
            .find(|&j| args.get(j).is_some_and(|a| a.eq_ignore_ascii_case(b"KEYS")))
            .and_then(|j| args.get(j + 1));
    }
    let keys = if depth == ParseDepth::Full {
        match spec.count {
            KeyCount::One => None,
            KeyCount::All => Some(nargs.saturating_sub(1)),
            KeyCount::Pairs => Some(nargs.saturating_sub(1) / 2),
            KeyCount::AllButLast => Some(nargs.saturating_sub(2)),
            KeyCount::Numkeys => match spec.key {
                KeyAt::AfterNumkeys(i) => args.get(i).and_then(parse_u64),
                _ => None,
            },
            KeyCount::Streams => key_index.map(|i| nargs.saturating_sub(i as u64) / 2),
        }
    } else {
        None
    };
    let channels = nargs.saturating_sub(1);
    let family = match name_b {
        b"SUBSCRIBE" => Some(Family::Subscribe),
        b"PSUBSCRIBE" => Some(Family::PSubscribe),
        b"SSUBSCRIBE" => Some(Family::SSubscribe),
        b"UNSUBSCRIBE" => Some(Family::Unsubscribe),
        b"PUNSUBSCRIBE" => Some(Family::PUnsubscribe),
        b"SUNSUBSCRIBE" => Some(Family::SUnsubscribe),
        _ => None,
    };
    let expect = match family {
        Some(Family::Unsubscribe | Family::PUnsubscribe | Family::SUnsubscribe)
            if channels == 0 =>
        {
            Expect::UntilDone
        }
        Some(_) => Expect::Count(channels.max(1)),
        None => Expect::Count(1),
    };
    let effect = match name_b {
        b"MONITOR" => Effect::Monitor,
        b"HELLO" => match args.get(1) {
            Some(b"3") => Effect::Hello(3),
            Some(b"2") => Effect::Hello(2),
            _ => Effect::None,
        },
        b"PSYNC" => Effect::Replication,
        b"RESET" => Effect::Reset,
        _ => Effect::None,
    };
    let client_reply = match (name_b, sub_b) {
        (b"CLIENT", b"REPLY") => match args.get(2).map(Upper::new) {
            Some(m) if m.as_bytes() == b"ON" => Some(ReplyMode::On),
            Some(m) if m.as_bytes() == b"OFF" => Some(ReplyMode::Off),
            Some(m) if m.as_bytes() == b"SKIP" => Some(ReplyMode::SkipNext),
            _ => None,
        },
        _ => None,
    };
    Some(Command {
        method,
        resource: key.map_or_else(String::new, |k| lossy_prefix(k, MAX_RESOURCE)),
        keys,
        family,
        expect,
        effect,
        secret_reply: matches!(name_b, b"ACL" | b"SENTINEL")
            || (name_b == b"CONFIG" && sub_b == b"GET"),
        multi: match name_b {
            b"MULTI" => Some(true),
            b"EXEC" | b"DISCARD" | b"RESET" => Some(false),
            _ => None,
        },
        client_reply,
        sync: name_b == b"SYNC",
    })
}

// ---------------------------------------------------------------------------------------------
// Framing

/// The first elements of a message being framed: a command's arguments, a reply's first
/// elements (or a scalar reply itself), each cut at [`ELEM_KEEP`] bytes.
#[derive(Debug, Default)]
struct Elems {
    text: Vec<u8>,
    items: Vec<Elem>,
}

#[derive(Debug, Clone, Copy)]
struct Elem {
    ty: u8,
    start: usize,
    len: usize,
    /// Read to its end with every byte captured (a name can be trusted).
    whole: bool,
}

impl Elems {
    fn clear(&mut self) {
        self.text.clear();
        self.items.clear();
    }
    fn len(&self) -> usize {
        self.items.len()
    }
    fn get(&self, i: usize) -> Option<&[u8]> {
        self.items
            .get(i)
            .map(|e| &self.text[e.start..e.start + e.len])
    }
    fn ty(&self, i: usize) -> Option<u8> {
        self.items.get(i).map(|e| e.ty)
    }
    /// A new element; None when enough are kept.
    fn push(&mut self, ty: u8) -> Option<usize> {
        if self.items.len() >= MAX_ELEMS {
            return None;
        }
        self.items.push(Elem {
            ty,
            start: self.text.len(),
            len: 0,
            whole: false,
        });
        Some(self.items.len() - 1)
    }
    /// Is element i known in full (read to its end, nothing uncaptured)?
    fn whole(&self, i: usize) -> bool {
        self.items.get(i).is_some_and(|e| e.whole)
    }
    /// The last element was read to its end (`captured`: every byte of it seen).
    fn end_last(&mut self, captured: bool) {
        if let Some(e) = self.items.last_mut() {
            e.whole = captured;
        }
    }
    /// More bytes of the last element.
    fn append(&mut self, bytes: &[u8]) {
        if let Some(e) = self.items.last_mut() {
            let room = ELEM_KEEP - e.len;
            let take = bytes.len().min(room);
            self.text.extend_from_slice(&bytes[..take]);
            e.len += take;
        }
    }
}

/// An aggregate being framed.
#[derive(Debug, Clone, Copy)]
struct Frame {
    /// Elements still to come (for a streamed aggregate: until `.`).
    left: u64,
    streamed: bool,
    /// An attribute (`|`): metadata for the value that follows, not a value itself.
    attr: bool,
}

/// A number line's value as read so far.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct Num {
    neg: bool,
    val: u64,
    digits: u32,
    /// `?` (streamed length), or a character no number has.
    question: bool,
    bad: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum St {
    /// The next byte starts a value (its type byte), a message start included.
    Type,
    /// The rest of the line after type byte `kind`; `cr` once its `\r` is read.
    Line {
        kind: u8,
        num: Num,
        len: u32,
        cr: bool,
    },
    /// Bytes of a bulk value still to come, its CRLF included; `chunk`: of a streamed string.
    Bulk { left: u64, chunk: bool },
    /// An inline command line (until `\n`).
    Inline { len: u32 },
    /// Out of sync: waiting for a segment that starts a message.
    Lost,
}

/// The message a direction is in the middle of.
#[derive(Debug, Clone, Copy)]
struct Msg {
    span: MessageSpan,
    truncated: bool,
    /// Type byte of the message's value (an attribute before it aside), 0 before it starts.
    top: u8,
    /// Its length: elements of an aggregate, bytes of a bulk string, -1 for null, -2 streamed.
    top_len: i64,
    inline: bool,
    /// Every element is a bulk string directly inside the top array: a command's shape.
    all_bulk: bool,
    /// Values started directly inside the top aggregate (a command's argument index).
    children: u64,
    /// Error values inside aggregates (results in an EXEC reply).
    nested_errors: u32,
    resp3: bool,
    /// The bulk being read is a secret argument: its bytes are not kept in the head.
    secret_bulk: bool,
    /// A redaction mark is due in the head after the bytes just consumed.
    redact_mark: Option<u64>,
    /// No more bytes go to the head (some were not captured).
    head_done: bool,
}

/// What one framing step ran into.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Ev {
    None,
    /// The message is complete.
    Done,
    /// Not RESP.
    Invalid,
}

/// One direction's framing state.
#[derive(Debug, Default)]
struct Dir {
    st: Option<St>,
    stack: Vec<Frame>,
    /// Inside a streamed string (`$?`): chunks (`;<len>`) until `;0`.
    streamed_str: bool,
    /// Attribute frames on the stack: what is inside them is not recorded.
    attrs: u32,
    /// The value being read is recorded as an element (its text kept).
    rec: bool,
    /// Bytes of the bulk being read were not captured (or lost).
    bulk_cut: bool,
    msg: Option<Msg>,
    /// Segment counter value that last extended the message's span.
    cur_seg: u64,
    elems: Elems,
    head: Vec<u8>,
    inline: Vec<u8>,
}

/// What framing needs to know about the connection.
#[derive(Clone, Copy)]
struct Cx<'a> {
    /// This direction may carry commands (inline ones; secret arguments).
    commands: bool,
    seg: &'a Segment<'a>,
    seg_counter: u64,
}

impl Dir {
    fn state(&self) -> St {
        self.st.unwrap_or(St::Type)
    }

    fn reset_framing(&mut self) {
        self.stack.clear();
        self.streamed_str = false;
        self.attrs = 0;
        self.rec = false;
    }

    /// Forgets the message in progress and its buffers.
    fn clear_message(&mut self) {
        self.msg = None;
        self.elems.clear();
        self.head.clear();
        self.inline.clear();
        self.reset_framing();
    }

    /// A message starts at `at` (the parser's view of the segment's bytes).
    fn begin(&mut self, at: &[u8], cx: &Cx) {
        self.clear_message();
        self.cur_seg = cx.seg_counter;
        self.msg = Some(Msg {
            span: MessageSpan::starting_at(cx.seg, at),
            truncated: false,
            top: 0,
            top_len: 0,
            inline: false,
            all_bulk: true,
            children: 0,
            nested_errors: 0,
            resp3: false,
            secret_bulk: false,
            redact_mark: None,
            head_done: false,
        });
    }

    /// Consumes from `data` by the state; returns the bytes used and what happened.
    fn step(&mut self, data: &[u8], cx: &Cx) -> (usize, Ev) {
        match self.state() {
            St::Type => self.type_byte(data, cx),
            St::Line { kind, num, len, cr } => self.line(data, kind, num, len, cr, cx),
            St::Bulk { left, chunk } => self.bulk(data, left, chunk),
            St::Inline { len } => self.inline_line(data, len),
            St::Lost => (data.len(), Ev::None),
        }
    }

    fn type_byte(&mut self, data: &[u8], cx: &Cx) -> (usize, Ev) {
        let c = data[0];
        if self.msg.is_none() {
            // Redis skips empty inline lines between commands.
            if cx.commands && (c == b'\r' || c == b'\n') {
                return (1, Ev::None);
            }
            self.begin(data, cx);
        }
        if self.streamed_str {
            if c != b';' {
                return (0, Ev::Invalid);
            }
            self.st = Some(St::Line {
                kind: c,
                num: Num::default(),
                len: 0,
                cr: false,
            });
            return (1, Ev::None);
        }
        let msg = self.msg.as_mut().expect("begun above");
        let depth = self.stack.len();
        if c == b'.' && self.stack.last().is_some_and(|f| f.streamed) {
            self.st = Some(St::Line {
                kind: c,
                num: Num::default(),
                len: 0,
                cr: false,
            });
            return (1, Ev::None);
        }
        if !VALUE_TYPES.contains(&c) {
            if cx.commands && depth == 0 && msg.top == 0 && c.is_ascii_alphabetic() {
                msg.inline = true;
                msg.top = b'*';
                self.st = Some(St::Inline { len: 0 });
                return (0, Ev::None);
            }
            return (0, Ev::Invalid);
        }
        if !b"+-:$*".contains(&c) {
            msg.resp3 = true;
        }
        self.rec = false;
        if self.attrs == 0 && c != b'|' {
            if depth == 0 {
                msg.top = c;
                // Scalars whose text matters: errors, status lines, numbers.
                if b"+-!(,#:".contains(&c) {
                    self.rec = self.elems.push(c).is_some();
                }
            } else if depth == 1 {
                msg.children += 1;
                self.rec = self.elems.push(c).is_some();
                if c != b'$' {
                    msg.all_bulk = false;
                }
            } else {
                msg.all_bulk = false;
            }
        }
        if depth > 0 && (c == b'-' || c == b'!') {
            msg.nested_errors = msg.nested_errors.saturating_add(1);
        }
        self.st = Some(St::Line {
            kind: c,
            num: Num::default(),
            len: 0,
            cr: false,
        });
        (1, Ev::None)
    }

    fn line(
        &mut self,
        data: &[u8],
        kind: u8,
        mut num: Num,
        mut len: u32,
        mut cr: bool,
        cx: &Cx,
    ) -> (usize, Ev) {
        let text_kind = matches!(kind, b'+' | b'-' | b',');
        let mut i = 0;
        while i < data.len() {
            let b = data[i];
            if cr {
                if b != b'\n' {
                    return (i, Ev::Invalid);
                }
                let ev = self.end_line(kind, num, len, cx);
                return (i + 1, ev);
            }
            if b == b'\r' {
                cr = true;
                i += 1;
                continue;
            }
            if b == b'\n' {
                return (i, Ev::Invalid);
            }
            if text_kind {
                // The text up to the line's end in one go.
                let end = data[i..]
                    .iter()
                    .position(|&c| c == b'\r' || c == b'\n')
                    .map_or(data.len(), |p| i + p);
                let text = &data[i..end];
                if kind == b','
                    && !text
                        .iter()
                        .all(|c| c.is_ascii_alphanumeric() || b".+-".contains(c))
                {
                    return (i, Ev::Invalid);
                }
                if self.rec {
                    self.elems.append(text);
                }
                len = len.saturating_add(text.len() as u32);
                i = end;
                continue;
            }
            len = len.saturating_add(1);
            // Big numbers have as many digits as they need.
            if len > MAX_NUMBER_LINE && kind != b'(' {
                return (i, Ev::Invalid);
            }
            match b {
                b'0'..=b'9' => {
                    match num
                        .val
                        .checked_mul(10)
                        .and_then(|v| v.checked_add(u64::from(b - b'0')))
                    {
                        Some(v) => num.val = v,
                        None => num.bad = true,
                    }
                    num.digits += 1;
                }
                b'-' if len == 1 => num.neg = true,
                b'?' if len == 1 => num.question = true,
                b't' | b'f' if kind == b'#' && len == 1 => num.val = u64::from(b == b't'),
                _ => return (i, Ev::Invalid),
            }
            if (kind == b':' || kind == b'(') && self.rec {
                self.elems.append(&[b]);
            }
            i += 1;
        }
        self.st = Some(St::Line { kind, num, len, cr });
        (data.len(), Ev::None)
    }

    /// A line after type byte `kind` ended with `num` read from it.
    fn end_line(&mut self, kind: u8, num: Num, len: u32, cx: &Cx) -> Ev {
        self.st = Some(St::Type);
        if self.rec && kind != b'$' && kind != b'=' && kind != b'!' {
            // A scalar line, all of it seen (an uncaptured byte in it loses the framing).
            self.elems.end_last(true);
        }
        // A plain count: digits only, no sign, no `?`.
        let count = (!num.neg && !num.question && !num.bad && num.digits > 0).then_some(num.val);
        let minus_one = num.neg && num.digits == 1 && num.val == 1 && !num.question;
        let streamed = num.question && num.digits == 0 && !num.neg;
        let top_level = self.stack.is_empty() && self.attrs == 0;
        match kind {
            b'+' | b'-' | b',' => self.value_done(false),
            b':' | b'(' => {
                if num.digits == 0 || num.question || (kind == b':' && num.bad) {
                    return Ev::Invalid;
                }
                self.value_done(false)
            }
            b'#' => {
                if len != 1 || num.digits != 0 || num.neg || num.question {
                    return Ev::Invalid;
                }
                self.value_done(false)
            }
            b'_' | b'.' => {
                if len != 0 {
                    return Ev::Invalid;
                }
                if kind == b'.' {
                    // The end of a streamed aggregate: a value of its parent.
                    let f = self.stack.pop().expect("checked at its type byte");
                    return self.value_done(f.attr);
                }
                if top_level {
                    self.set_top_len(-1);
                }
                self.value_done(false)
            }
            b'$' | b'=' | b'!' | b';' => {
                if kind == b'$' && minus_one {
                    if top_level {
                        self.set_top_len(-1);
                    }
                    if self.rec {
                        // A null element (RESP2's `$-1`), told apart from an empty string.
                        if let Some(e) = self.elems.items.last_mut() {
                            e.ty = b'_';
                        }
                    }
                    return self.value_done(false);
                }
                if kind == b'$' && streamed {
                    if top_level {
                        self.set_top_len(-2);
                    }
                    self.streamed_str = true;
                    return Ev::None;
                }
                let Some(n) = count.filter(|&n| n <= MAX_BULK_LEN) else {
                    return Ev::Invalid;
                };
                if kind == b';' {
                    if n == 0 {
                        self.streamed_str = false;
                        return self.value_done(false);
                    }
                    self.st = Some(St::Bulk {
                        left: n + 2,
                        chunk: true,
                    });
                    return Ev::None;
                }
                if top_level {
                    self.set_top_len(n as i64);
                }
                if cx.commands && self.stack.len() == 1 && self.attrs == 0 {
                    let (i, nargs) = self.msg.map_or((0, 0), |m| {
                        (m.children.saturating_sub(1), m.top_len.max(0) as u64)
                    });
                    let secret = is_secret_arg(&self.elems, i as usize, nargs);
                    if let Some(m) = self.msg.as_mut() {
                        m.secret_bulk = secret;
                        m.redact_mark = secret.then_some(n);
                    }
                }
                self.bulk_cut = false;
                self.st = Some(St::Bulk {
                    left: n + 2,
                    chunk: false,
                });
                Ev::None
            }
            b'*' | b'%' | b'~' | b'>' | b'|' => {
                if kind == b'*' && minus_one {
                    if top_level {
                        self.set_top_len(-1);
                    }
                    return self.value_done(false);
                }
                let attr = kind == b'|';
                let left = if streamed && kind != b'>' {
                    u64::MAX
                } else {
                    let Some(n) = count.filter(|&n| n <= MAX_AGGREGATE_LEN) else {
                        return Ev::Invalid;
                    };
                    if matches!(kind, b'%' | b'|') {
                        n * 2
                    } else {
                        n
                    }
                };
                if top_level && !attr {
                    self.set_top_len(if streamed {
                        -2
                    } else {
                        count.unwrap_or(0) as i64
                    });
                }
                if left == 0 {
                    return self.value_done(attr);
                }
                if self.stack.len() >= MAX_DEPTH {
                    return Ev::Invalid;
                }
                self.stack.push(Frame {
                    left,
                    streamed,
                    attr,
                });
                self.attrs += u32::from(attr);
                Ev::None
            }
            _ => Ev::Invalid,
        }
    }

    fn set_top_len(&mut self, n: i64) {
        if let Some(m) = self.msg.as_mut() {
            m.top_len = n;
        }
    }

    /// A value ended (an attribute's end if `attr`); Done if it completed the message.
    fn value_done(&mut self, mut attr: bool) -> Ev {
        loop {
            let Some(f) = self.stack.last_mut() else {
                // An attribute before the top-level value leaves the message open.
                return if attr { Ev::None } else { Ev::Done };
            };
            if attr || f.streamed {
                // An attribute takes no place; a streamed aggregate ends at its `.`.
                return Ev::None;
            }
            f.left -= 1;
            if f.left > 0 {
                return Ev::None;
            }
            let f = self.stack.pop().expect("non-empty");
            if f.attr {
                self.attrs -= 1;
            }
            attr = f.attr;
        }
    }

    fn bulk(&mut self, data: &[u8], left: u64, chunk: bool) -> (usize, Ev) {
        let take = left.min(data.len() as u64) as usize;
        // The CRLF after the payload, where it is captured.
        for (j, want) in [(left.wrapping_sub(2), b'\r'), (left.wrapping_sub(1), b'\n')] {
            if j < take as u64 && data[j as usize] != want {
                return (j as usize, Ev::Invalid);
            }
        }
        if !chunk && self.rec {
            let payload = take.min(left.saturating_sub(2) as usize);
            self.elems.append(&data[..payload]);
        }
        let left = left - take as u64;
        self.st = Some(St::Bulk { left, chunk });
        if left > 0 {
            return (take, Ev::None);
        }
        (take, self.after_bulk(chunk))
    }

    /// A bulk value (or a streamed string's chunk) was read to its end.
    fn after_bulk(&mut self, chunk: bool) -> Ev {
        self.st = Some(St::Type);
        if let Some(m) = self.msg.as_mut() {
            m.secret_bulk = false;
        }
        if self.rec && !chunk {
            self.elems.end_last(!self.bulk_cut);
        }
        if chunk {
            // The next chunk header follows.
            Ev::None
        } else {
            self.value_done(false)
        }
    }

    fn inline_line(&mut self, data: &[u8], len: u32) -> (usize, Ev) {
        let end = data.iter().position(|&c| c == b'\n');
        let part = &data[..end.unwrap_or(data.len())];
        let room = INLINE_KEEP.saturating_sub(self.inline.len());
        self.inline.extend_from_slice(&part[..part.len().min(room)]);
        let len = len.saturating_add(part.len() as u32);
        if len > MAX_INLINE {
            return (data.len(), Ev::Invalid);
        }
        match end {
            Some(e) => {
                self.st = Some(St::Type);
                self.split_inline(len as usize <= INLINE_KEEP);
                (e + 1, Ev::Done)
            }
            None => {
                self.st = Some(St::Inline { len });
                (data.len(), Ev::None)
            }
        }
    }

    /// The inline line's words (double or single quotes group, as redis-cli and Redis do);
    /// `complete`: the whole line was kept (else its last word may be cut).
    fn split_inline(&mut self, complete: bool) {
        let line = std::mem::take(&mut self.inline);
        let line_s = line.strip_suffix(b"\r").unwrap_or(&line);
        let mut i = 0;
        while i < line_s.len() {
            while i < line_s.len() && line_s[i].is_ascii_whitespace() {
                i += 1;
            }
            if i >= line_s.len() {
                break;
            }
            if self.elems.push(b'$').is_none() {
                break;
            }
            match line_s[i] {
                q @ (b'"' | b'\'') => {
                    i += 1;
                    let start = i;
                    while i < line_s.len() && line_s[i] != q {
                        i += if line_s[i] == b'\\' { 2 } else { 1 };
                    }
                    self.elems.append(&line_s[start..i.min(line_s.len())]);
                    i += 1;
                }
                _ => {
                    let start = i;
                    while i < line_s.len() && !line_s[i].is_ascii_whitespace() {
                        i += 1;
                    }
                    self.elems.append(&line_s[start..i]);
                }
            }
            self.elems.end_last(true);
        }
        if !complete {
            self.elems.end_last(false);
        }
        self.inline = line;
        self.inline.clear();
        if let Some(m) = self.msg.as_mut() {
            m.top_len = self.elems.len() as i64;
        }
    }

    /// The kept head of an inline command: its words, secrets redacted.
    fn inline_head(&self, keep: usize, len: u64) -> CapturedHead {
        let mut bytes = Vec::new();
        let n = self.elems.len() as u64;
        for i in 0..self.elems.len() {
            let w = self.elems.get(i).unwrap_or_default();
            if i > 0 {
                bytes.push(b' ');
            }
            if is_secret_arg(&self.elems, i, n) {
                bytes.extend_from_slice(format!("[redacted, {} bytes]", w.len()).as_bytes());
            } else if w.is_empty() || w.iter().any(u8::is_ascii_whitespace) {
                bytes.push(b'"');
                bytes.extend_from_slice(w);
                bytes.push(b'"');
            } else {
                bytes.extend_from_slice(w);
            }
        }
        bytes.extend_from_slice(b"\r\n");
        bytes.truncate(keep);
        CapturedHead::redacted(bytes, len)
    }
}

// ---------------------------------------------------------------------------------------------
// Pairing

/// `CLIENT REPLY` state of the connection, as the commands sent so far set it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ReplyMode {
    On,
    Off,
    SkipNext,
}

/// A complete message as framing saw it.
struct Framed {
    span: MessageSpan,
    truncated: bool,
    head: CapturedHead,
    top: u8,
    top_len: i64,
    inline: bool,
    all_bulk: bool,
    nested_errors: u32,
    resp3: bool,
}

impl Framed {
    /// A command's shape: an inline line or an array of bulk strings.
    fn is_command(&self) -> bool {
        self.inline || (self.top == b'*' && self.all_bulk && self.top_len >= 1)
    }
}

/// A reply, classified.
#[derive(Debug, Clone)]
struct Reply {
    span: MessageSpan,
    truncated: bool,
    inferred: bool,
    head: CapturedHead,
    top: u8,
    top_len: i64,
    /// What its first element says, for arrays and pushes of strings.
    kind: PushKind,
    /// A pub/sub confirmation's subscription count; its channel was null.
    sub_count: Option<i64>,
    channel_nil: bool,
    /// A monitor line (`+<timestamp> [db addr] "cmd" …`).
    monitor_line: bool,
    queued: bool,
    /// Error code and message.
    error: Option<(String, String)>,
    nested_errors: u32,
    resp3: bool,
}

impl Reply {
    fn new(f: Framed, elems: &Elems, inferred: bool) -> Reply {
        let first = elems.get(0).unwrap_or_default();
        let aggregate = matches!(f.top, b'*' | b'>');
        let kind = if aggregate && elems.ty(0).is_some_and(|t| t == b'$' || t == b'+') {
            push_kind(first)
        } else {
            PushKind::Other
        };
        let error = match f.top {
            b'-' | b'!' => {
                let code_len = first.iter().position(|&c| c == b' ').unwrap_or(first.len());
                let code = &first[..code_len];
                let code = if !code.is_empty()
                    && code.len() <= MAX_NAME
                    && code.iter().all(|c| {
                        c.is_ascii_uppercase() || c.is_ascii_digit() || *c == b'_' || *c == b'-'
                    }) {
                    String::from_utf8_lossy(code).into_owned()
                } else {
                    "ERR".to_owned()
                };
                Some((code, lossy_prefix(first, MAX_ERROR_DETAIL)))
            }
            _ => None,
        };
        Reply {
            span: f.span,
            truncated: f.truncated,
            inferred,
            head: f.head,
            top: f.top,
            top_len: f.top_len,
            kind,
            sub_count: match kind {
                PushKind::Confirmation(_) if elems.ty(2) == Some(b':') => elems
                    .get(2)
                    .and_then(|t| std::str::from_utf8(t).ok()?.parse().ok()),
                _ => None,
            },
            channel_nil: matches!(kind, PushKind::Confirmation(_)) && elems.ty(1) == Some(b'_'),
            monitor_line: f.top == b'+' && first.first().is_some_and(u8::is_ascii_digit),
            queued: f.top == b'+' && first == b"QUEUED",
            error,
            nested_errors: f.nested_errors,
            resp3: f.resp3,
        }
    }

    /// The reply's shape, as the `reply` detail says it.
    fn shape(&self) -> String {
        let n = self.top_len;
        let agg = |name: &str| match n {
            -1 => "nil".to_owned(),
            -2 => format!("{name}(?)"),
            _ => format!("{name}({n})"),
        };
        match self.top {
            b'+' if self.queued => "queued".to_owned(),
            b'+' => "simple".to_owned(),
            b'-' => "error".to_owned(),
            b':' => "integer".to_owned(),
            b'$' if n == -1 => "nil".to_owned(),
            b'$' => "bulk".to_owned(),
            b'*' => agg("array"),
            b'%' => agg("map"),
            b'~' => agg("set"),
            b'>' => agg("push"),
            b'_' => "null".to_owned(),
            b',' => "double".to_owned(),
            b'#' => "boolean".to_owned(),
            b'(' => "big_number".to_owned(),
            b'=' => "verbatim".to_owned(),
            b'!' => "blob_error".to_owned(),
            _ => "unknown".to_owned(),
        }
    }
}

/// The replies a command got so far.
#[derive(Debug, Clone)]
struct Replies {
    first: Reply,
    span: MessageSpan,
    count: u64,
    truncated: bool,
    inferred: bool,
    nested_errors: u32,
    resp3: bool,
    /// The first error among them.
    error: Option<(String, String)>,
}

#[derive(Debug)]
struct Request {
    method: String,
    resource: String,
    keys: Option<u64>,
    family: Option<Family>,
    expect: Expect,
    effect: Effect,
    secret_reply: bool,
    span: MessageSpan,
    truncated: bool,
    head: CapturedHead,
    replies: Option<Replies>,
}

impl Request {
    /// Takes `r` as (part of) the answer; true when the answer is complete.
    fn add(&mut self, r: Reply) -> bool {
        let is_error = r.error.is_some();
        let confirmation = matches!(r.kind, PushKind::Confirmation(_));
        let ends_unsubscribe = !confirmation || r.sub_count == Some(0) || r.channel_nil;
        match &mut self.replies {
            None => {
                self.replies = Some(Replies {
                    span: r.span,
                    count: 1,
                    truncated: r.truncated,
                    inferred: r.inferred,
                    nested_errors: r.nested_errors,
                    resp3: r.resp3,
                    error: r.error.clone(),
                    first: r,
                })
            }
            Some(acc) => {
                // A syscall carrying several replies counts once.
                let same_syscall = r.span.first_start_ns == acc.span.last_start_ns
                    && r.span.first_end_ns == acc.span.last_end_ns;
                acc.span.syscalls += r.span.syscalls - u32::from(same_syscall);
                acc.span.last_start_ns = r.span.last_start_ns;
                acc.span.last_end_ns = r.span.last_end_ns;
                acc.span.bytes = acc.span.bytes.saturating_add(r.span.bytes);
                acc.count += 1;
                acc.truncated |= r.truncated;
                acc.inferred |= r.inferred;
                acc.nested_errors = acc.nested_errors.saturating_add(r.nested_errors);
                acc.resp3 |= r.resp3;
                if acc.error.is_none() {
                    acc.error = r.error;
                }
            }
        }
        let count = self.replies.as_ref().map_or(0, |a| a.count);
        is_error
            || match self.expect {
                Expect::Count(n) => count >= n,
                Expect::UntilDone => ends_unsubscribe,
            }
    }
}

pub struct RedisParser {
    depth: ParseDepth,
    keep_head: usize,
    dirs: [Dir; 2],
    /// Direction commands travel, once a message has shown it.
    request_dir: Option<usize>,
    pending: InOrder<Request>,
    orphans: VecDeque<Reply>,
    seg_counter: u64,
    // What the commands sent so far set.
    in_multi: bool,
    reply_mode: ReplyMode,
    // What the replies so far set.
    subscribed: bool,
    monitor: bool,
    resp3: bool,
    /// Replication stream (after SYNC/PSYNC): nothing more is parsed.
    tunnel: bool,
    /// Replies still due to commands dropped for want of room.
    skip_replies: u64,
    /// Messages were lost in an unknown number (see [`Self::distrust_pairing`]): commands
    /// seen from then on make no call (counted in `damaged_messages`), replies beyond those
    /// of the commands still pending are counted in `unmatched_responses`, for the rest of
    /// the connection. No later point can be proven to realign: a RESP reply names no
    /// command, so after k lost commands (k unknown, each with 0 replies after a lost
    /// `CLIENT REPLY OFF`, n after a lost `SUBSCRIBE`, 1 otherwise) every later reply is as
    /// consistent with k+1 — a lost `GET`'s bulk reply looks like any other — and timestamps
    /// only say which replies came too early to be a later command's, never that a lost
    /// command's reply is not still to come (a pipelining client, a blocked `BLPOP`); after
    /// lost replies, the bytes after the loss may be the rest of one (an element of an array
    /// reply looks like a reply), so not even the replies' count is known. An idle
    /// connection proves nothing either: "nothing pending" is itself a count.
    unpaired: bool,
    /// Direction of the last segment (turns: [`StreamParser::request_direction`]).
    last_dir: Option<usize>,
    /// A turn into the command direction came while a command or reply was under way
    /// (pipelining, a gap): a turn does not mark a call's start here.
    calls_overlapped: bool,
}

impl RedisParser {
    pub fn new(cfg: &ParserConfig) -> Self {
        RedisParser {
            depth: cfg.depth,
            keep_head: cfg.keep_head,
            dirs: [Dir::default(), Dir::default()],
            request_dir: None,
            pending: InOrder::new(MAX_PENDING),
            orphans: VecDeque::new(),
            seg_counter: 0,
            in_multi: false,
            reply_mode: ReplyMode::On,
            subscribed: false,
            monitor: false,
            resp3: false,
            tunnel: false,
            skip_replies: 0,
            unpaired: false,
            last_dir: None,
            calls_overlapped: false,
        }
    }

    /// Nothing of a call is under way for a segment starting at `start_ns`: no message begun
    /// in either direction, every command answered, replies one per command. A reply held for
    /// a command not seen (`orphans`) that ended before the segment answered one sent before
    /// ebtop saw the connection: no call under way (one that ended later may be this very
    /// command's, its record crossing it from another CPU: under way).
    fn between_calls(&self, start_ns: u64) -> bool {
        self.dirs
            .iter()
            .all(|ds| ds.msg.is_none() && matches!(ds.st, None | Some(St::Type)))
            && self.pending.is_empty()
            && self.orphans.iter().all(|o| o.span.last_end_ns < start_ns)
            && self.skip_replies == 0
    }

    /// May direction d carry commands (as far as is known)?
    fn carries_commands(&self, d: usize) -> bool {
        self.request_dir.is_none_or(|rd| rd == d)
    }

    /// Makes `seg` part of direction d's current message span.
    fn touch(&mut self, d: usize, seg: &Segment) {
        let counter = self.seg_counter;
        let ds = &mut self.dirs[d];
        if ds.cur_seg != counter {
            ds.cur_seg = counter;
            if let Some(m) = ds.msg.as_mut() {
                m.span.extend(seg);
            }
        }
    }

    fn lose_sync(&mut self, d: usize, stats: &mut ParseStats) {
        let ds = &mut self.dirs[d];
        if ds.st != Some(St::Lost) {
            stats.desyncs += 1;
        }
        ds.st = Some(St::Lost);
        ds.reset_framing();
    }

    /// Drops direction d's message in progress as damaged.
    fn damage_current(&mut self, d: usize, stats: &mut ParseStats) {
        if self.dirs[d].msg.is_some() {
            stats.damaged_messages += 1;
        }
        self.dirs[d].clear_message();
    }

    /// Forgets what is pending and held (counted): the first message misled about the
    /// directions, and the connection is taken as seen from here, as at capture's start.
    fn restart_pairing(&mut self, stats: &mut ParseStats) {
        self.skip_replies = 0;
        stats.damaged_messages += self.pending.len() as u64;
        self.pending.drain().for_each(drop);
        stats.unmatched_responses += self.orphans.len() as u64;
        self.orphans.clear();
    }

    /// Messages of direction d may have been lost in an unknown number (a gap, bytes unseen
    /// or not RESP where a message starts): from here on no call is made on this connection
    /// (see [`Self::unpaired`] for why no later point can realign). Lost replies (or an
    /// unknown direction): what is pending can no longer be paired either. Lost commands
    /// only: the commands pending before them still pair with the next replies — the server
    /// answers in order, so theirs come before any lost command's, and the reply direction
    /// lost nothing — as do the replies owed to commands dropped for want of room
    /// (`skip_replies`), which come first. Replies held before any command may answer the
    /// lost ones: dropped.
    fn distrust_pairing(&mut self, d: usize, stats: &mut ParseStats) {
        self.unpaired = true;
        if self.request_dir == Some(d) {
            stats.unmatched_responses += self.orphans.len() as u64;
            self.orphans.clear();
        } else {
            self.restart_pairing(stats);
        }
    }

    /// Bytes that are not RESP in direction d: what was in flight is lost.
    fn garbage(&mut self, d: usize, stats: &mut ParseStats) {
        self.damage_current(d, stats);
        self.lose_sync(d, stats);
        self.distrust_pairing(d, stats);
    }

    /// Direction d's message as framed so far; its buffers are kept for reading (elems).
    fn take_framed(&mut self, d: usize) -> Option<Framed> {
        let keep = self.keep_head;
        let ds = &mut self.dirs[d];
        let m = ds.msg.take()?;
        let head = if keep == 0 {
            CapturedHead::default()
        } else if m.inline {
            ds.inline_head(keep, m.span.bytes)
        } else {
            CapturedHead::redacted(std::mem::take(&mut ds.head), m.span.bytes)
        };
        Some(Framed {
            span: m.span,
            truncated: m.truncated,
            head,
            top: m.top,
            top_len: m.top_len,
            inline: m.inline,
            all_bulk: m.all_bulk,
            nested_errors: m.nested_errors,
            resp3: m.resp3,
        })
    }

    /// Direction d completed a message.
    fn message_done(
        &mut self,
        d: usize,
        inferred: bool,
        out: &mut Vec<L7Call>,
        stats: &mut ParseStats,
    ) {
        if inferred && self.dirs[d].msg.is_some_and(|m| m.inline) {
            // An inline line longer than what was seen: its first words.
            self.dirs[d].split_inline(false);
        }
        let Some(f) = self.take_framed(d) else {
            return;
        };
        let elems = std::mem::take(&mut self.dirs[d].elems);
        if !inferred {
            self.dirs[d].reset_framing();
        }
        if self.request_dir.is_none() {
            // The first message decides: a command's shape (not a pub/sub message) or a reply.
            let push = f.top == b'*'
                && elems.ty(0) == Some(b'$')
                && push_kind(elems.get(0).unwrap_or_default()) == PushKind::Message
                && (3..=4).contains(&f.top_len);
            let command = (f.is_command() && !push) || (inferred && f.top == b'*' && f.all_bulk);
            self.request_dir = Some(if command { d } else { 1 - d });
        }
        if self.request_dir == Some(d) {
            if f.is_command() || (inferred && f.top == b'*' && f.all_bulk) {
                self.on_command(d, f, &elems, out, stats);
            } else if !(f.top == b'*' && f.top_len <= 0) {
                // A reply where commands go: the first message misled; replies flow this way.
                stats.desyncs += 1;
                self.restart_pairing(stats);
                self.request_dir = Some(1 - d);
                self.on_reply(Reply::new(f, &elems, inferred), out, stats);
            }
            // `*0`/`*-1` from a client: Redis ignores it (no reply).
        } else {
            self.on_reply(Reply::new(f, &elems, inferred), out, stats);
        }
        let ds = &mut self.dirs[d];
        ds.elems = elems;
        ds.elems.clear();
        ds.head.clear();
    }

    fn on_command(
        &mut self,
        d: usize,
        f: Framed,
        args: &Elems,
        out: &mut Vec<L7Call>,
        stats: &mut ParseStats,
    ) {
        let nargs = f.top_len.max(args.len() as i64) as u64;
        let Some(cmd) = command(args, nargs, self.depth) else {
            // Its name was not seen in full (an open command lost inside it).
            stats.damaged_messages += 1;
            return;
        };
        self.end_open_reply(1 - d, out, stats);
        if self.unpaired {
            // Behind lost messages: never paired (see `unpaired`). A replication stream is
            // still left alone.
            stats.damaged_messages += 1;
            self.tunnel |= cmd.sync;
            return;
        }
        let queued = self.in_multi && cmd.multi.is_none();
        let mut expect = if queued { Expect::Count(1) } else { cmd.expect };
        // CLIENT REPLY: OFF and SKIP are not answered, nor is what they silence.
        match self.reply_mode {
            ReplyMode::Off if cmd.client_reply != Some(ReplyMode::On) => expect = Expect::Count(0),
            ReplyMode::SkipNext => {
                expect = Expect::Count(0);
                self.reply_mode = ReplyMode::On;
            }
            _ => {}
        }
        if !queued {
            match cmd.client_reply {
                Some(ReplyMode::On) => self.reply_mode = ReplyMode::On,
                Some(ReplyMode::Off) => {
                    self.reply_mode = ReplyMode::Off;
                    expect = Expect::Count(0);
                }
                Some(ReplyMode::SkipNext) => {
                    if self.reply_mode != ReplyMode::Off {
                        self.reply_mode = ReplyMode::SkipNext;
                    }
                    expect = Expect::Count(0);
                }
                None => {}
            }
            if let Some(m) = cmd.multi {
                self.in_multi = m;
            }
            if cmd.effect == Effect::Reset {
                self.reply_mode = ReplyMode::On;
            }
        }
        if expect == Expect::Count(0) {
            stats.unreplied_requests += 1;
            return;
        }
        if cmd.sync && !queued {
            // SYNC's reply is an RDB file without a CRLF, then the replication stream.
            self.tunnel = true;
            return;
        }
        // A command while an earlier one awaits its reply: pipelining (perhaps in the very
        // segment that carried both, before any turn could show it).
        if !self.pending.is_empty() || self.skip_replies > 0 {
            self.calls_overlapped = true;
        }
        if self.pending.is_full() {
            // Pipelined deeper than the connection's depth and the shared budget allow: the
            // oldest command is dropped, and its replies, which come first, are skipped so the
            // others still pair.
            if let Some(old) = self.pending.pop() {
                let got = old.replies.as_ref().map_or(0, |r| r.count);
                self.skip_replies += match old.expect {
                    Expect::Count(n) => n.saturating_sub(got),
                    Expect::UntilDone => u64::from(got == 0),
                };
                stats.pending_dropped += 1;
            }
        }
        self.pending.push(Request {
            method: cmd.method,
            resource: cmd.resource,
            keys: cmd.keys,
            family: cmd.family,
            expect,
            effect: if queued { Effect::None } else { cmd.effect },
            secret_reply: cmd.secret_reply,
            span: f.span,
            truncated: f.truncated,
            head: f.head,
            replies: None,
        });
        // Replies that came before this command's record pair with it if they ended after it
        // started; older ones answered something never seen.
        while self.pending.len() == 1 {
            let Some(o) = self.orphans.pop_front() else {
                break;
            };
            let start = self.pending.front().map_or(0, |r| r.span.first_start_ns);
            if o.span.last_end_ns >= start {
                self.answer(o, out);
            } else {
                stats.unmatched_responses += 1;
            }
        }
    }

    /// A reply (in direction `rd`) whose end was out of sight ends, at the latest, when the
    /// next command starts, sent by a client that waits for it (one command pending; none: it
    /// answered nothing seen, dropped). With more pending, the unseen bytes held an unknown
    /// number of their replies: none can be paired.
    fn end_open_reply(&mut self, rd: usize, out: &mut Vec<L7Call>, stats: &mut ParseStats) {
        if self.dirs[rd].st != Some(St::Lost) || self.dirs[rd].msg.is_none() {
            return;
        }
        match self.pending.len() {
            0 => self.damage_current(rd, stats),
            1 => self.finish_open(rd, out, stats),
            _ => {
                self.damage_current(rd, stats);
                self.distrust_pairing(rd, stats);
            }
        }
    }

    /// Is `r` a push (not a reply to any command)?
    fn is_push(&mut self, r: &Reply) -> bool {
        // A confirmation answers a pending (un)subscription of its kind (an argument-less
        // UNSUBSCRIBE may still be in front of it).
        let confirms_front = match r.kind {
            PushKind::Confirmation(f) => self.pending.iter().any(|q| q.family == Some(f)),
            _ => false,
        };
        match r.top {
            b'>' => !confirms_front,
            b'+' => self.monitor && r.monitor_line,
            b'*' if !self.resp3 => match r.kind {
                PushKind::Message if (3..=4).contains(&r.top_len) => {
                    if self.pending.is_empty() {
                        // Capture began while subscribed.
                        self.subscribed = true;
                    }
                    self.subscribed
                }
                // A confirmation nothing asked for: the server unsubscribed (cluster slot
                // moved), or capture began mid-way.
                PushKind::Confirmation(_) => !confirms_front,
                _ => false,
            },
            _ => false,
        }
    }

    fn on_reply(&mut self, r: Reply, out: &mut Vec<L7Call>, stats: &mut ParseStats) {
        if self.is_push(&r) {
            stats.pushes += 1;
            if let (PushKind::Confirmation(_), Some(n)) = (r.kind, r.sub_count) {
                self.subscribed = n > 0;
            }
            return;
        }
        if self.skip_replies > 0 {
            // It answers a command dropped (and counted) for want of room.
            self.skip_replies -= 1;
            return;
        }
        // An argument-less UNSUBSCRIBE takes confirmations until another reply comes.
        if let Some(front) = self.pending.front() {
            let waiting = front.expect == Expect::UntilDone && front.replies.is_some();
            if waiting && !matches!(r.kind, PushKind::Confirmation(f) if front.family == Some(f)) {
                let req = self.pending.pop().expect("front exists");
                self.emit(req, out);
            }
        }
        if self.pending.is_empty() {
            // A command whose end was out of sight ends, at the latest, when a reply comes (the
            // server answers a command once it has all of it), and this reply is its own: it
            // is the oldest unanswered. But its unseen tail may have held more commands (a
            // pipeline cut by the snaplen), so neither its size nor the replies after this one
            // are known: no call (counted), and lost commands.
            if let Some(rd) = self.request_dir {
                if self.dirs[rd].st == Some(St::Lost) && self.dirs[rd].msg.is_some() {
                    self.damage_current(rd, stats);
                    self.distrust_pairing(rd, stats);
                    return;
                }
            }
        }
        if self.pending.is_empty() {
            if self.unpaired {
                // It answers a command lost, or one seen after the loss: never paired.
                stats.unmatched_responses += 1;
                return;
            }
            if self.orphans.len() >= MAX_ORPHANS {
                self.orphans.pop_front();
                stats.unmatched_responses += 1;
            }
            self.orphans.push_back(r);
            return;
        }
        self.answer(r, out);
    }

    /// `r` answers the oldest pending command.
    fn answer(&mut self, r: Reply, out: &mut Vec<L7Call>) {
        if let (PushKind::Confirmation(_), Some(n)) = (r.kind, r.sub_count) {
            self.subscribed = n > 0;
        }
        let Some(req) = self.pending.front_mut() else {
            return;
        };
        if !req.add(r) {
            return;
        }
        let req = self.pending.pop().expect("front exists");
        self.emit(req, out);
    }

    /// Direction d's open message (its end out of sight) ends here.
    fn finish_open(&mut self, d: usize, out: &mut Vec<L7Call>, stats: &mut ParseStats) {
        if self.dirs[d].msg.is_none() {
            return;
        }
        if self.request_dir != Some(d) {
            stats.inferred_ends += 1;
        }
        self.message_done(d, true, out, stats);
    }

    fn emit(&mut self, req: Request, out: &mut Vec<L7Call>) {
        let Some(acc) = req.replies else {
            return;
        };
        if acc.error.is_none() {
            match req.effect {
                Effect::Monitor => self.monitor = true,
                Effect::Hello(v) => self.resp3 = v == 3,
                Effect::Replication => self.tunnel = true,
                Effect::Reset => {
                    self.monitor = false;
                    self.subscribed = false;
                    self.resp3 = false;
                }
                Effect::None => {}
            }
        }
        self.resp3 |= acc.resp3;
        let mut details = Vec::new();
        if self.depth == ParseDepth::Full {
            details.push(("reply", acc.first.shape()));
            if acc.count > 1 {
                details.push(("replies", acc.count.to_string()));
            }
            if let Some((_, msg)) = &acc.error {
                details.push(("error", msg.clone()));
            }
            if let Some(k) = req.keys {
                details.push(("keys", k.to_string()));
            }
            if acc.nested_errors > 0 {
                details.push(("nested_errors", acc.nested_errors.to_string()));
            }
        }
        let resp_head = if req.secret_reply && !acc.first.head.bytes.is_empty() {
            CapturedHead::redacted(b"[not kept: may hold secrets]".to_vec(), acc.first.head.len)
        } else {
            acc.first.head
        };
        let request_dir = self.request_dir.unwrap_or(0);
        out.push(L7Call {
            proto: Protocol::Redis,
            request_dir: if request_dir == 0 {
                Direction::Egress
            } else {
                Direction::Ingress
            },
            method: req.method,
            resource: req.resource,
            version: if self.resp3 { "3" } else { "2" },
            status: None,
            status_text: acc.error.as_ref().map(|(code, _)| code.clone()),
            outcome: if acc.error.is_some() {
                Outcome::ServerError
            } else {
                Outcome::Ok
            },
            req: req.span,
            resp: acc.span,
            truncated: req.truncated || acc.truncated,
            end_inferred: acc.inferred,
            details,
            req_head: req.head,
            resp_head,
        });
    }

    /// `n` bytes of direction d were moved but not captured (snaplen).
    fn skip(&mut self, d: usize, mut n: u64, out: &mut Vec<L7Call>, stats: &mut ParseStats) {
        if let Some(St::Bulk { left, chunk }) = self.dirs[d].st {
            let ds = &mut self.dirs[d];
            let take = left.min(n);
            ds.bulk_cut = true;
            if let Some(m) = ds.msg.as_mut() {
                m.span.bytes = m.span.bytes.saturating_add(take);
                m.truncated = true;
                m.head_done = true;
            }
            n -= take;
            ds.st = Some(St::Bulk {
                left: left - take,
                chunk,
            });
            if left > take {
                return;
            }
            if ds.after_bulk(chunk) == Ev::Done {
                self.message_done(d, false, out, stats);
            }
            if n == 0 {
                return;
            }
        }
        let ds = &mut self.dirs[d];
        match ds.state() {
            St::Lost => match ds.msg.as_mut() {
                Some(m) => m.span.bytes = m.span.bytes.saturating_add(n),
                None => stats.skipped(n),
            },
            _ if ds.msg.is_none() => {
                // Unseen bytes where a message starts may hold whole messages.
                self.lose_sync(d, stats);
                stats.skipped(n);
                self.distrust_pairing(d, stats);
            }
            _ => {
                // Framing went out of sight inside a message: it goes on until the next message
                // starts or the connection closes (end inferred then).
                if let Some(m) = ds.msg.as_mut() {
                    m.span.bytes = m.span.bytes.saturating_add(n);
                    m.truncated = true;
                    m.head_done = true;
                    if m.top == 0 {
                        // Not even its type is known.
                        self.damage_current(d, stats);
                    }
                }
                self.lose_sync(d, stats);
                if self.request_dir.is_none() {
                    // An open first message: a command if it is an array of bulk strings so
                    // far (a client sends no nested aggregates; a reply may), else a reply.
                    let command = self.dirs[d]
                        .msg
                        .is_some_and(|m| m.top == b'*' && m.all_bulk);
                    self.request_dir = Some(if command { d } else { 1 - d });
                }
            }
        }
    }

    /// Appends what the last step consumed to direction d's head, as kept.
    fn keep_head_bytes(&mut self, d: usize, bytes: &[u8], was_secret: bool, was_inline: bool) {
        let keep = self.keep_head;
        let ds = &mut self.dirs[d];
        let Some(m) = ds.msg.as_mut() else {
            return;
        };
        if !m.head_done && !was_secret && !was_inline {
            let room = keep.saturating_sub(ds.head.len());
            ds.head.extend_from_slice(&bytes[..bytes.len().min(room)]);
        }
        if let Some(n) = m.redact_mark.take() {
            if !m.head_done {
                let mark = format!("[redacted, {n} bytes]\r\n");
                let room = keep.saturating_sub(ds.head.len());
                ds.head
                    .extend_from_slice(&mark.as_bytes()[..mark.len().min(room)]);
            }
        }
    }
}

impl StreamParser for RedisParser {
    /// Commands and replies one for one, in turn: not after a subscription, `MONITOR`,
    /// `CLIENT REPLY OFF|SKIP` or a replication stream (replies that no command asked for),
    /// nor once pairing is distrusted.
    fn request_direction(&self) -> Option<Direction> {
        if self.calls_overlapped
            || self.tunnel
            || self.subscribed
            || self.monitor
            || self.unpaired
            || self.reply_mode != ReplyMode::On
        {
            return None;
        }
        match self.request_dir? {
            0 => Some(Direction::Egress),
            _ => Some(Direction::Ingress),
        }
    }

    fn on_segment(&mut self, seg: &Segment<'_>, out: &mut Vec<L7Call>, stats: &mut ParseStats) {
        if self.tunnel {
            return;
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
        if self.request_dir == Some(d)
            && self.dirs[d].msg.is_none()
            && self.dirs[d].st != Some(St::Lost)
        {
            // A command starts: a reply whose end was out of sight ended before it (not only
            // once it is complete, which for a command cut by the snaplen is at its reply).
            self.end_open_reply(1 - d, out, stats);
        }
        if self.dirs[d].st == Some(St::Lost) {
            // A message whose end went out of sight takes everything until the other
            // direction shows where it ended (see `on_command`, `on_reply`): bytes that look
            // like a message start inside a large reply are more likely part of it.
            let start = self.dirs[d].msg.is_none()
                && match self.request_dir {
                    Some(rd) if rd == d => looks_like_command(seg.payload),
                    Some(_) => looks_like_reply(seg.payload),
                    None => looks_like_command(seg.payload) || looks_like_reply(seg.payload),
                };
            if start {
                self.dirs[d].clear_message();
                self.dirs[d].st = Some(St::Type);
            } else {
                self.touch(d, seg);
                match self.dirs[d].msg.as_mut() {
                    Some(m) => m.span.bytes = m.span.bytes.saturating_add(seg.total_len),
                    None => {
                        // Skipped bytes may hold whole messages: counts no longer pair.
                        stats.skipped(seg.total_len);
                        self.distrust_pairing(d, stats);
                    }
                }
                return;
            }
        }
        let mut data = seg.payload;
        while !data.is_empty() && !self.tunnel {
            if self.dirs[d].msg.is_some() {
                self.touch(d, seg);
            }
            let cx = Cx {
                commands: self.carries_commands(d),
                seg,
                seg_counter: self.seg_counter,
            };
            let before = self.dirs[d].state();
            let was_secret = matches!(before, St::Bulk { .. })
                && self.dirs[d].msg.is_some_and(|m| m.secret_bulk);
            let (used, ev) = self.dirs[d].step(data, &cx);
            let used = used.min(data.len());
            if let Some(m) = self.dirs[d].msg.as_mut() {
                m.span.bytes = m.span.bytes.saturating_add(used as u64);
            }
            if self.keep_head > 0 {
                let was_inline = matches!(before, St::Inline { .. })
                    || self.dirs[d].msg.is_some_and(|m| m.inline);
                self.keep_head_bytes(d, &data[..used], was_secret, was_inline);
            }
            data = &data[used..];
            match ev {
                Ev::None => {}
                Ev::Done => self.message_done(d, false, out, stats),
                Ev::Invalid => {
                    self.garbage(d, stats);
                    stats.skipped(data.len() as u64);
                    let uncaptured = seg.total_len.saturating_sub(seg.payload.len() as u64);
                    stats.skipped(uncaptured);
                    return;
                }
            }
            debug_assert!(used > 0 || self.dirs[d].state() != before || ev != Ev::None);
        }
        let uncaptured = seg.total_len.saturating_sub(seg.payload.len() as u64);
        if uncaptured > 0 && !self.tunnel {
            if self.dirs[d].msg.is_some() {
                self.touch(d, seg);
            }
            self.skip(d, uncaptured, out, stats);
        }
    }

    fn on_gap(&mut self, dir: Direction, len: Option<u64>, stats: &mut ParseStats) {
        if self.tunnel {
            return;
        }
        // Turns inside lost bytes are unknown.
        self.calls_overlapped = true;
        let d = dir.index();
        let ds = &mut self.dirs[d];
        // A gap strictly inside a value of known length only skips bytes.
        if let (Some(St::Bulk { left, chunk }), Some(n)) = (ds.st, len) {
            if n < left {
                ds.bulk_cut = true;
                if let Some(m) = ds.msg.as_mut() {
                    m.span.bytes = m.span.bytes.saturating_add(n);
                    m.head_done = true;
                }
                ds.st = Some(St::Bulk {
                    left: left - n,
                    chunk,
                });
                return;
            }
        }
        // Anything else may have hidden whole messages: the message in flight is damaged and
        // the direction resynchronises (both while it is unknown which carries commands). The
        // other direction keeps its place: after lost commands, the replies to those before
        // them still pair (`distrust_pairing`).
        stats.skipped(len.unwrap_or(0));
        for e in 0..2 {
            if e == d || self.request_dir.is_none() {
                self.damage_current(e, stats);
                self.lose_sync(e, stats);
            }
        }
        self.distrust_pairing(d, stats);
    }

    fn on_close(&mut self, out: &mut Vec<L7Call>, stats: &mut ParseStats) {
        if !self.tunnel {
            for d in 0..2 {
                match self.dirs[d].st {
                    Some(St::Lost) => {
                        if self.request_dir != Some(d) {
                            self.finish_open(d, out, stats);
                        } else if self.dirs[d].msg.is_some() {
                            // A command never answered.
                            stats.unanswered_requests += 1;
                            self.dirs[d].clear_message();
                        }
                    }
                    _ => self.damage_current(d, stats),
                }
            }
            // An argument-less UNSUBSCRIBE answered until the end.
            if let Some(front) = self.pending.front() {
                if front.expect == Expect::UntilDone && front.replies.is_some() {
                    let req = self.pending.pop().expect("front exists");
                    self.emit(req, out);
                }
            }
        }
        stats.unanswered_requests += self.pending.len() as u64;
        self.pending.drain().for_each(drop);
        stats.unmatched_responses += self.orphans.len() as u64;
        self.orphans.clear();
    }
}

#[cfg(test)]
mod fixture_tests;
#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocols::Transport;
    use crate::segfile::SegFile;

    const OUT: Direction = Direction::Egress;
    const IN: Direction = Direction::Ingress;

    /// Drives a parser with a fake clock (1 µs per syscall).
    type Driver = crate::protocols::test_driver::Driver<RedisParser>;

    impl Driver {
        fn new() -> Self {
            Driver::with(ParseDepth::Full, 0)
        }
        fn with(depth: ParseDepth, keep_head: usize) -> Self {
            Driver::with_parser(RedisParser::new(&ParserConfig {
                depth,
                transport: Transport::Stream,
                keep_head,
            }))
        }
        /// Plays a fixture's syscalls as the traced side saw them.
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
        /// Bytes the calls claim per direction (requests and replies).
        fn claimed(&self) -> [u64; 2] {
            let mut n = [0u64; 2];
            for c in &self.calls {
                let d = c.request_dir.index();
                n[d] += c.req.bytes;
                n[1 - d] += c.resp.bytes;
            }
            n
        }
    }

    fn load(name: &str) -> SegFile {
        let path = format!(
            "{}/src/protocols/redis/fixtures/{name}",
            env!("CARGO_MANIFEST_DIR")
        );
        SegFile::parse(&std::fs::read(&path).unwrap()).unwrap_or_else(|e| panic!("{path}: {e}"))
    }

    type Want = (&'static str, &'static str, Option<&'static str>);

    fn ok(m: &'static str, r: &'static str) -> Want {
        (m, r, None)
    }
    fn err(m: &'static str, r: &'static str, code: &'static str) -> Want {
        (m, r, Some(code))
    }
    fn as_want(got: &[(String, String, Option<String>)]) -> Vec<(&str, &str, Option<&str>)> {
        got.iter()
            .map(|(m, r, s)| (m.as_str(), r.as_str(), s.as_deref()))
            .collect()
    }

    /// The calls redis-cli's session makes (cli_session.*.seg), after AUTH and COMMAND DOCS.
    fn cli_calls() -> Vec<Want> {
        let session = "session:9f86d081884c7d659a2feaa0c55ad015";
        vec![
            ok("AUTH", ""),
            ok("COMMAND DOCS", ""),
            ok("SET", "user:1234"),
            ok("GET", "user:1234"),
            ok("GET", "missing:1"),
            ok("INCR", "counter:visits"),
            ok("LPUSH", "queue:jobs"),
            ok("LRANGE", "queue:jobs"),
            err("GET", "queue:jobs", "WRONGTYPE"),
            ok("HSET", session),
            ok("HGETALL", session),
            ok("MGET", "user:1234"),
            ok("DEL", "counter:visits"),
            err("NOSUCHCMD", "arg", "ERR"),
            ok("CLIENT SETNAME", ""),
            ok("CONFIG GET", ""),
            ok("ACL SETUSER", ""),
            ok("MULTI", ""),
            ok("INCR", "tx:counter"),
            ok("INCR", "tx:counter"),
            ok("EXEC", ""),
            ok("EXPIRE", "user:1234"),
            ok("TTL", "user:1234"),
            ok("PING", ""),
        ]
    }

    #[test]
    fn redis_cli_session_both_sides() {
        for (name, dir) in [
            ("cli_session.client.seg", OUT),
            ("cli_session.server.seg", IN),
        ] {
            let f = load(name);
            let mut d = Driver::new();
            d.play(&f).close();
            assert_eq!(as_want(&d.summary()), cli_calls(), "{name}");
            assert!(d.calls.iter().all(|c| c.request_dir == dir), "{name}");
            // COMMAND DOCS' 172 KB reply was captured 4 KiB per syscall: its framing went out
            // of sight, and it ended where redis-cli sent the next command.
            let docs = &d.calls[1];
            assert!(docs.end_inferred && docs.truncated, "{name}");
            assert_eq!(docs.resp.bytes, 172_298, "{name}");
            assert_eq!(d.detail(1, "reply"), Some("array(480)"));
            assert_eq!(
                (
                    d.stats.desyncs,
                    d.stats.inferred_ends,
                    d.stats.damaged_messages
                ),
                (1, 1, 0),
                "{name}"
            );
            assert_eq!(
                (d.stats.unmatched_responses, d.stats.unanswered_requests),
                (0, 0)
            );
            // Every byte of the connection belongs to a call.
            assert_eq!(d.claimed(), d.fed, "{name}");
            assert!(d.calls[2..].iter().all(|c| !c.end_inferred && !c.truncated));
            assert_eq!(d.calls[8].outcome, Outcome::ServerError);
            assert_eq!(
                d.detail(8, "error"),
                Some("WRONGTYPE Operation against a key holding the wrong kind of value")
            );
            assert_eq!(d.detail(4, "reply"), Some("nil"));
            assert_eq!(d.detail(11, "keys"), Some("3"));
            assert_eq!(d.detail(12, "keys"), Some("2"));
            // MULTI/EXEC: one call per command; the queued ones are answered +QUEUED.
            assert_eq!(d.detail(18, "reply"), Some("queued"));
            assert_eq!(d.detail(20, "reply"), Some("array(2)"));
            assert!(d.calls.iter().all(|c| c.version == "2"));
        }
    }

    #[test]
    fn benchmark_pipelining_pairs_exactly_on_both_sides() {
        for (name, dir) in [
            ("benchmark_p16.client.seg", OUT),
            ("benchmark_p16.server.seg", IN),
        ] {
            let f = load(name);
            let mut d = Driver::new();
            d.play(&f).close();
            let mut want = vec![ok("AUTH", "")];
            want.extend(std::iter::repeat_n(ok("SET", "key:__rand_int__"), 48));
            assert_eq!(as_want(&d.summary()), want, "{name}");
            assert_eq!(d.stats, ParseStats::default(), "{name}");
            assert_eq!(d.claimed(), d.fed, "{name}");
            assert!(d.calls.iter().all(|c| c.request_dir == dir
                && c.req.syscalls == 1
                && c.resp.syscalls == 1
                && c.resp.bytes == 5));
            // 17 commands in the first write, answered by one read: each call's request and
            // reply are that write and that read.
            let first = d.calls[0].req;
            assert!(d.calls[..17].iter().all(|c| c.req
                == MessageSpan {
                    bytes: c.req.bytes,
                    first_pos: c.req.first_pos,
                    ..first
                }));
            assert_eq!(d.calls[1].req.bytes, 45);
            assert_ne!(d.calls[17].req.first_start_ns, first.first_start_ns);
            assert_eq!(
                d.calls[16].resp.first_start_ns,
                d.calls[0].resp.first_start_ns
            );
        }
    }

    #[test]
    fn pipelined_replies_beyond_the_snaplen_are_damaged_never_mispaired() {
        // 16 GETs per write (3 writes); their 16 replies of 1009 bytes come in one read, 4096
        // bytes captured: the first 5 are framed (the 5th across the uncaptured bytes), the
        // rest are out of sight. How many of them the unseen bytes held is unknown, so no later
        // reply is paired: the other 11 GETs of the batch and the 32 of the next batches are
        // counted damaged, the replies framed after the loss unmatched.
        let mut d = Driver::new();
        d.play(&load("benchmark_p16_d1000.client.seg")).close();
        assert_eq!(d.calls.len(), 1 + 5);
        assert_eq!(d.calls[0].method, "AUTH");
        assert!(d.calls[1..]
            .iter()
            .all(|c| c.method == "GET" && c.resp.bytes == 1009 && c.resp.syscalls == 1));
        assert_eq!(d.calls.iter().filter(|c| c.truncated).count(), 1);
        assert_eq!(
            (
                d.stats.damaged_messages,
                d.stats.desyncs,
                d.stats.unmatched_responses
            ),
            (11 + 32, 3, 10)
        );
    }

    #[test]
    fn python_resp2_session() {
        let mut d = Driver::new();
        d.play(&load("python_resp2.seg")).close();
        let session = "session:9f86d081884c7d659a2feaa0c55ad015";
        let mut want = vec![
            ok("AUTH", ""),
            err("CLIENT SETINFO", "", "ERR"),
            err("CLIENT SETINFO", "", "ERR"),
            ok("SET", "user:1234"),
            ok("GET", "user:1234"),
            ok("GET", "missing:1"),
            ok("HSET", session),
            ok("HGETALL", session),
        ];
        let counters: Vec<String> = (0..10).map(|i| format!("counter:{i}")).collect();
        for c in &counters {
            want.push(("INCRBY", c.as_str(), None));
        }
        want.extend([
            ok("MULTI", ""),
            ok("SET", "tx:a"),
            ok("INCRBY", "tx:a"),
            ok("LPUSH", "tx:a"),
            ok("EXEC", ""),
            ok("LPUSH", "queue:jobs"),
            err("GET", "queue:jobs", "WRONGTYPE"),
            err("NOSUCHCMD", "x", "ERR"),
            ok("BLPOP", "queue:wake"),
            ok("MGET", "user:1234"),
            ok("DEL", "tx:a"),
        ]);
        assert_eq!(as_want(&d.summary()), want);
        assert_eq!(d.stats, ParseStats::default());
        assert_eq!(d.claimed(), d.fed);
        // The pipeline of 10: one write, one read, each call its own bytes.
        assert!(d.calls[8..18].iter().all(|c| c.req.bytes == 38
            && c.resp.bytes == 4
            && c.req
                == MessageSpan {
                    bytes: 38,
                    first_pos: c.req.first_pos,
                    ..d.calls[8].req
                }));
        // EXEC's results hold the WRONGTYPE of the LPUSH queued before it.
        assert_eq!(d.detail(22, "reply"), Some("array(3)"));
        assert_eq!(d.detail(22, "nested_errors"), Some("1"));
        assert_eq!(d.calls[22].outcome, Outcome::Ok);
        assert_eq!(d.detail(19, "reply"), Some("queued"));
        assert_eq!(d.detail(27, "keys"), Some("3"));
        assert_eq!(d.detail(28, "keys"), Some("3"));
    }

    #[test]
    fn python_resp3_session_with_an_invalidation_push() {
        let mut d = Driver::new();
        d.play(&load("python_resp3.seg")).close();
        let want = vec![
            ok("HELLO", ""),
            err("CLIENT MAINT_NOTIFICATIONS", "", "ERR"),
            err("CLIENT SETINFO", "", "ERR"),
            err("CLIENT SETINFO", "", "ERR"),
            ok("SET", "user:1234"),
            ok("HSET", "user:profile:1234"),
            ok("HGETALL", "user:profile:1234"),
            ok("SADD", "tags:1234"),
            ok("SMEMBERS", "tags:1234"),
            ok("ZADD", "scores"),
            ok("ZSCORE", "scores"),
            ok("GET", "missing:1"),
            ok("DEBUG PROTOCOL", ""),
            ok("DEBUG PROTOCOL", ""),
            ok("DEBUG PROTOCOL", ""),
            ok("DEBUG PROTOCOL", ""),
            ok("CLIENT TRACKING", ""),
            ok("GET", "user:1234"),
            ok("PING", ""),
        ];
        assert_eq!(as_want(&d.summary()), want);
        assert_eq!(
            ParseStats {
                pushes: 1,
                ..Default::default()
            },
            d.stats
        );
        let replies: Vec<_> = (0..d.calls.len())
            .map(|i| d.detail(i, "reply").unwrap())
            .collect();
        assert_eq!(
            replies[6..16],
            [
                "map(2)",
                "integer",
                "set(2)",
                "integer",
                "double",
                "null",
                "boolean",
                "big_number",
                "verbatim",
                "double"
            ]
        );
        assert!(d.calls.iter().all(|c| c.version == "3"));
        // The push (40 bytes) is counted, not part of PING's reply.
        assert_eq!(d.calls[18].resp.bytes, 7);
        assert_eq!(d.claimed()[0], d.fed[0]);
        assert_eq!(d.claimed()[1] + 40, d.fed[1]);
    }

    #[test]
    fn every_resp3_type_in_one_pipelined_read() {
        let mut d = Driver::new();
        d.play(&load("resp3_types.seg")).close();
        assert_eq!(d.calls.len(), 14);
        let replies: Vec<_> = (1..14).map(|i| d.detail(i, "reply").unwrap()).collect();
        assert_eq!(
            replies,
            [
                "bulk",
                "integer",
                "double",
                "big_number",
                "null",
                "array(3)",
                "set(3)",
                "map(3)",
                // attrib: an attribute, then the bulk it describes, is one reply
                "bulk",
                // push: a push (counted), then a bulk reply
                "bulk",
                "verbatim",
                "boolean",
                "boolean"
            ]
        );
        assert_eq!(d.calls[9].resp.bytes, 93);
        assert_eq!(
            ParseStats {
                pushes: 1,
                ..Default::default()
            },
            d.stats
        );
    }

    #[test]
    fn pubsub_subscriptions_are_calls_and_messages_are_pushes() {
        for (name, version, confirmation) in [
            ("pubsub_resp2.seg", "2", "array(3)"),
            ("pubsub_resp3.seg", "3", "push(3)"),
        ] {
            let mut d = Driver::new();
            d.play(&load(name)).close();
            let got = d.summary();
            let n = got.len();
            assert_eq!(
                as_want(&got[n - 5..]),
                [
                    ok("SUBSCRIBE", "news"),
                    ok("PSUBSCRIBE", "user:*"),
                    ok("PING", ""),
                    ok("UNSUBSCRIBE", ""),
                    ok("PUNSUBSCRIBE", ""),
                ],
                "{name}"
            );
            // message, message, pmessage
            assert_eq!(
                ParseStats {
                    pushes: 3,
                    ..Default::default()
                },
                d.stats,
                "{name}"
            );
            let sub = n - 5;
            assert_eq!(d.detail(sub, "replies"), Some("2"), "{name}");
            assert_eq!(d.detail(sub, "reply"), Some(confirmation), "{name}");
            assert_eq!(d.calls[sub].resp.bytes, 68, "{name}");
            // UNSUBSCRIBE without channels: one confirmation per channel (the count stays
            // above 0 with the pattern left), ended by PUNSUBSCRIBE's confirmation.
            assert_eq!(d.detail(n - 2, "replies"), Some("2"), "{name}");
            assert_eq!(d.calls[n - 2].resp.bytes, 74, "{name}");
            assert_eq!(d.calls[n - 1].resp.bytes, 39, "{name}");
            assert!(d.calls.iter().all(|c| c.version == version), "{name}");
        }
        // RESP2 PING while subscribed answers with an array.
        let mut d = Driver::new();
        d.play(&load("pubsub_resp2.seg"));
        assert_eq!(d.detail(5, "reply"), Some("array(2)"));
    }

    #[test]
    fn monitor_lines_are_pushes() {
        let mut d = Driver::new();
        d.play(&load("monitor.seg")).close();
        assert_eq!(as_want(&d.summary()), [ok("AUTH", ""), ok("MONITOR", "")]);
        assert_eq!(
            ParseStats {
                pushes: 6,
                ..Default::default()
            },
            d.stats
        );
    }

    #[test]
    fn client_reply_off_and_skip_make_no_calls() {
        let mut d = Driver::new();
        d.play(&load("client_reply.seg")).close();
        assert_eq!(
            as_want(&d.summary()),
            [
                ok("AUTH", ""),
                ok("GET", "quiet:1"),
                ok("CLIENT REPLY", ""),
                ok("MGET", "quiet:1"),
            ]
        );
        // CLIENT REPLY SKIP, the SET it silenced, CLIENT REPLY OFF, SET, INCR.
        assert_eq!(
            ParseStats {
                unreplied_requests: 5,
                ..Default::default()
            },
            d.stats
        );
        assert_eq!(d.calls[1].resp.bytes, 7);
    }

    #[test]
    fn a_3_mib_value_is_framed_from_256_byte_prefixes() {
        for (name, req_syscalls, resp_syscalls) in [
            ("large_value.client.seg", 3, 95),
            ("large_value.server.seg", 6, 1),
        ] {
            let f = load(name);
            assert!(f.entries.iter().all(|e| e.bytes.len() <= 256));
            let mut d = Driver::new();
            d.play(&f).close();
            assert_eq!(
                as_want(&d.summary()[3..]),
                [
                    ok("SET", "blob:1"),
                    ok("GET", "blob:1"),
                    ok("SET", "small:1"),
                    ok("GET", "small:1"),
                    ok("DEL", "blob:1"),
                ],
                "{name}"
            );
            assert_eq!(d.stats, ParseStats::default(), "{name}");
            assert_eq!(d.claimed(), d.fed, "{name}");
            let (set, get) = (&d.calls[3], &d.calls[4]);
            assert_eq!(set.req.bytes, 35 + 3_145_728 - 131_072 + 2, "{name}");
            assert_eq!(get.resp.bytes, 3_014_668, "{name}");
            assert_eq!(
                (set.req.syscalls, get.resp.syscalls),
                (req_syscalls, resp_syscalls)
            );
            assert!(set.truncated && get.truncated && !d.calls[5].truncated);
        }
    }

    #[test]
    fn inline_commands_typed_by_hand() {
        let mut d = Driver::with(ParseDepth::Full, 512);
        d.play(&load("inline.seg")).close();
        assert_eq!(
            as_want(&d.summary()),
            [
                ok("AUTH", ""),
                ok("PING", ""),
                ok("SET", "greeting"),
                ok("GET", "greeting"),
                err("FOO", "bar", "ERR"),
                ok("QUIT", ""),
            ]
        );
        // The empty line is skipped by Redis and by the parser alike.
        assert_eq!(d.stats, ParseStats::default());
        assert!(d.calls.iter().all(|c| c.request_dir == IN));
        assert_eq!(d.calls[0].req_head.bytes, b"AUTH [redacted, 11 bytes]\r\n");
        assert_eq!(
            d.calls[2].req_head.bytes,
            b"SET greeting \"hello world\"\r\n"
        );
        assert_eq!(d.calls[2].req.bytes, 28);
        assert_eq!(d.fed[1] - d.claimed()[1], 2, "the empty line");
    }

    #[test]
    fn no_secret_reaches_any_output() {
        let secrets: [&[u8]; 2] = [b"s3cr3t-pass", b"app-pass"];
        let dir = format!(
            "{}/src/protocols/redis/fixtures",
            env!("CARGO_MANIFEST_DIR")
        );
        let mut files: Vec<_> = std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| p.extension().is_some_and(|e| e == "seg"))
            .collect();
        files.sort();
        assert!(files.len() >= 14);
        let mut checked = 0;
        for path in files {
            let f = SegFile::parse(&std::fs::read(&path).unwrap()).unwrap();
            let mut d = Driver::with(ParseDepth::Full, 1 << 20);
            d.play(&f).close();
            for c in &d.calls {
                let mut text = Vec::new();
                text.extend_from_slice(c.method.as_bytes());
                text.extend_from_slice(c.resource.as_bytes());
                for (_, v) in &c.details {
                    text.extend_from_slice(v.as_bytes());
                }
                text.extend_from_slice(&c.req_head.bytes);
                text.extend_from_slice(&c.resp_head.bytes);
                for s in secrets {
                    assert!(
                        !text.windows(s.len()).any(|w| w == s),
                        "{}: {} {:?}",
                        path.display(),
                        c.method,
                        String::from_utf8_lossy(&text)
                    );
                }
                checked += 1;
            }
        }
        assert!(checked > 150);
    }

    #[test]
    fn heads_are_raw_resp_cut_and_redacted() {
        let mut d = Driver::with(ParseDepth::Full, 4096);
        d.play(&load("cli_session.client.seg"));
        let acl = &d.calls[16];
        assert_eq!(acl.method, "ACL SETUSER");
        assert!(acl.req_head.bytes.starts_with(b"*8\r\n$3\r\nACL\r\n$7\r\nSETUSER\r\n$3\r\napp\r\n$2\r\n[redacted, 2 bytes]\r\n$9\r\n[redacted, 9 bytes]\r\n"));
        assert_eq!(acl.req_head.len, 85);
        // CONFIG GET's reply may hold a password: not kept.
        assert_eq!(d.calls[15].resp_head.bytes, b"[not kept: may hold secrets]");
        assert_eq!(d.calls[3].resp_head.bytes, b"$5\r\nalice\r\n");
        let mut d = Driver::with(ParseDepth::Full, 10);
        d.play(&load("python_resp3.seg"));
        assert_eq!(d.calls[0].req_head.bytes, b"*5\r\n$5\r\nHE");
        assert_eq!(d.calls[0].req_head.len, 55);
        let mut d = Driver::new();
        d.play(&load("python_resp3.seg"));
        assert!(d.calls[0].req_head.bytes.is_empty());
    }

    #[test]
    fn split_at_every_byte_the_calls_are_the_same() {
        for name in [
            "python_resp2.seg",
            "resp3_types.seg",
            "pubsub_resp2.seg",
            "pubsub_resp3.seg",
            "inline.seg",
            "client_reply.seg",
        ] {
            let f = load(name);
            let mut whole = Driver::new();
            whole.play(&f).close();
            for step in [1, 2, 3, 7] {
                let mut d = Driver::new();
                for e in &f.entries {
                    let dir = crate::segfile::seg_direction(&f, e.to_server);
                    for piece in e.bytes.chunks(step) {
                        d.seg(dir, piece);
                    }
                }
                d.close();
                assert_eq!(d.summary(), whole.summary(), "{name} / {step}");
                assert_eq!(d.stats, whole.stats, "{name} / {step}");
                let bytes = |d: &Driver| -> Vec<(u64, u64)> {
                    d.calls
                        .iter()
                        .map(|c| (c.req.bytes, c.resp.bytes))
                        .collect()
                };
                assert_eq!(bytes(&d), bytes(&whole), "{name} / {step}");
            }
        }
    }

    #[test]
    fn detects_commands_and_pushes_not_other_protocols() {
        let yes: &[&[u8]] = &[
            b"*1\r\n$4\r\nPING\r\n",
            b"*3\r\n$3\r\nSET\r\n$9\r\nuser:1234\r\n$5\r\nalice\r\n",
            b"*2\r\n$3\r\nget\r\n$1\r\nk\r\n",
            b"*3\r\n$8\r\nJSON.GET\r\n$3\r\ndoc\r\n$1\r\n$\r\n",
            b"*3\r\n$7\r\nmessage\r\n$4\r\nnews\r\n$5\r\nhello\r\n",
            b">3\r\n$7\r\nmessage\r\n$4\r\nnews\r\n$5\r\nhello\r\n",
            b">2\r\n$10\r\ninvalidate\r\n*1\r\n$1\r\nk\r\n",
        ];
        let no: &[&[u8]] = &[
            b"GET / HTTP/1.1\r\nHost: a\r\n\r\n",
            b"HTTP/1.1 200 OK\r\n\r\n",
            b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03",
            b"SSH-2.0-OpenSSH_9.2p1\r\n",
            // PostgreSQL startup, MySQL greeting, Kafka ApiVersions
            b"\x00\x00\x00\x08\x04\xd2\x16\x2f",
            b"\x4a\x00\x00\x00\x0a8.0.36\x00",
            b"\x00\x00\x00\x23\x00\x12\x00\x03\x00\x00\x00\x01\x00\x07client",
            // replies and inline commands: other protocols start so too
            b"+OK\r\n",
            b"-ERR unknown command\r\n",
            b":1\r\n",
            b"$5\r\nhello\r\n",
            b"PING\r\n",
            b"*1\r\n",
            b"*1\r\n$4\r\nPI",
            b"*1\r\n$4\r\nPING",
            b"*0\r\n",
            b"*1\r\n$0\r\n\r\n",
            b"*1\r\n$4\r\n1234\r\n",
            b"*1\r\n$4\r\nPI G\r\n",
            b"*12345678\r\n$4\r\nPING\r\n",
            b"*1\r\n$33\r\nAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA\r\n",
            b">3\r\n$5\r\nhello\r\n$4\r\nnews\r\n",
            b"* 1\r\n$4\r\nPING\r\n",
            b"",
        ];
        for p in yes {
            assert!(is_connection_start(p), "{:?}", String::from_utf8_lossy(p));
            assert!(crate::protocols::detect(p).is_some_and(|d| d.folder == "redis"));
        }
        for p in no {
            assert!(!is_connection_start(p), "{:?}", String::from_utf8_lossy(p));
        }
        let mut rng = crate::xorshift::XorShift(7);
        for _ in 0..10_000 {
            let junk: Vec<u8> = (0..32).map(|_| rng.next() as u8).collect();
            assert!(!is_connection_start(&junk));
        }
    }

    #[test]
    fn error_replies_name_their_status() {
        let mut d = Driver::with(ParseDepth::Full, 0);
        d.seg(OUT, b"*2\r\n$3\r\nGET\r\n$3\r\nk:1\r\n")
            .seg(IN, b"-MOVED 3999 127.0.0.1:6381\r\n");
        d.seg(OUT, b"*2\r\n$3\r\nGET\r\n$3\r\nk:2\r\n")
            .seg(IN, b"!21\r\nSYNTAX invalid syntax\r\n");
        d.seg(OUT, b"*1\r\n$4\r\nPING\r\n")
            .seg(IN, b"-lowercase message\r\n");
        d.seg(OUT, b"*1\r\n$4\r\nEXEC\r\n").seg(
            IN,
            b"-EXECABORT Transaction discarded because of previous errors.\r\n",
        );
        d.seg(OUT, b"*1\r\n$4\r\nEXEC\r\n").seg(IN, b"*-1\r\n");
        assert_eq!(
            as_want(&d.summary()),
            [
                err("GET", "k:1", "MOVED"),
                err("GET", "k:2", "SYNTAX"),
                err("PING", "", "ERR"),
                err("EXEC", "", "EXECABORT"),
                ok("EXEC", ""),
            ]
        );
        assert_eq!(d.detail(1, "error"), Some("SYNTAX invalid syntax"));
        assert_eq!(d.detail(1, "reply"), Some("blob_error"));
        assert_eq!(d.detail(4, "reply"), Some("nil"));
        assert!(d.calls[..4]
            .iter()
            .all(|c| c.outcome == Outcome::ServerError));
        // Shallow: no details, the status stays.
        let mut d = Driver::with(ParseDepth::Shallow, 0);
        d.seg(OUT, b"*3\r\n$4\r\nMGET\r\n$1\r\na\r\n$1\r\nb\r\n")
            .seg(IN, b"-WRONGTYPE x\r\n");
        assert_eq!(as_want(&d.summary()), [err("MGET", "a", "WRONGTYPE")]);
        assert!(d.calls[0].details.is_empty());
    }

    #[test]
    fn keys_of_commands_that_do_not_name_them_first() {
        let cmd = |args: &[&str]| -> Vec<u8> {
            let mut out = format!("*{}\r\n", args.len()).into_bytes();
            for a in args {
                out.extend_from_slice(format!("${}\r\n{a}\r\n", a.len()).as_bytes());
            }
            out
        };
        let cases: &[(&[&str], &str, &str, Option<&str>)] = &[
            (
                &["EVALSHA", "abc", "2", "k:1", "k:2", "v"],
                "EVALSHA",
                "k:1",
                Some("2"),
            ),
            (&["EVAL", "return 1", "0"], "EVAL", "", Some("0")),
            (
                &["XREAD", "COUNT", "2", "STREAMS", "s:1", "s:2", "0", "0"],
                "XREAD",
                "s:1",
                Some("2"),
            ),
            (&["ZUNION", "2", "z:1", "z:2"], "ZUNION", "z:1", Some("2")),
            (
                &["BLMPOP", "0", "1", "l:1", "LEFT"],
                "BLMPOP",
                "l:1",
                Some("1"),
            ),
            (&["BLPOP", "q:1", "q:2", "0"], "BLPOP", "q:1", Some("2")),
            (&["MSET", "a", "1", "b", "2"], "MSET", "a", Some("2")),
            (&["BITOP", "AND", "dest", "a", "b"], "BITOP", "dest", None),
            (
                &["OBJECT", "ENCODING", "o:1"],
                "OBJECT ENCODING",
                "o:1",
                None,
            ),
            (&["XINFO", "STREAM", "s:1"], "XINFO STREAM", "s:1", None),
            (&["MEMORY", "USAGE", "m:1"], "MEMORY USAGE", "m:1", None),
            (&["MEMORY", "STATS"], "MEMORY STATS", "", None),
            (
                &["MIGRATE", "h", "6379", "", "0", "5", "KEYS", "a", "b"],
                "MIGRATE",
                "a",
                None,
            ),
            (
                &["PUBLISH", "news", "message body"],
                "PUBLISH",
                "news",
                None,
            ),
            (
                &["CONFIG", "SET", "requirepass", "hunter2"],
                "CONFIG SET",
                "",
                None,
            ),
            (&["JSON.GET", "doc:1", "$"], "JSON.GET", "doc:1", None),
            (&["get", "lower"], "GET", "lower", None),
        ];
        for (args, method, key, keys) in cases {
            let mut d = Driver::new();
            d.seg(OUT, &cmd(args)).seg(IN, b"+OK\r\n");
            assert_eq!(d.calls.len(), 1, "{args:?}");
            let c = &d.calls[0];
            assert_eq!(
                (c.method.as_str(), c.resource.as_str()),
                (*method, *key),
                "{args:?}"
            );
            assert_eq!(d.detail(0, "keys"), *keys, "{args:?}");
        }
    }

    #[test]
    fn secrets_of_every_kind_are_redacted_in_heads() {
        let cases: &[&[u8]] = &[
            b"*2\r\n$4\r\nAUTH\r\n$7\r\nhunter2\r\n",
            b"*3\r\n$4\r\nAUTH\r\n$5\r\nalice\r\n$7\r\nhunter2\r\n",
            b"*7\r\n$5\r\nHELLO\r\n$1\r\n3\r\n$4\r\nAUTH\r\n$5\r\nalice\r\n$7\r\nhunter2\r\n$7\r\nSETNAME\r\n$1\r\nx\r\n",
            b"*4\r\n$6\r\nCONFIG\r\n$3\r\nSET\r\n$10\r\nmasterauth\r\n$7\r\nhunter2\r\n",
            b"*5\r\n$8\r\nSENTINEL\r\n$3\r\nSET\r\n$1\r\nm\r\n$9\r\nauth-pass\r\n$7\r\nhunter2\r\n",
            b"*8\r\n$7\r\nMIGRATE\r\n$1\r\nh\r\n$1\r\n1\r\n$1\r\nk\r\n$1\r\n0\r\n$1\r\n5\r\n$4\r\nAUTH\r\n$7\r\nhunter2\r\n",
            b"*4\r\n$3\r\nACL\r\n$7\r\nSETUSER\r\n$1\r\nu\r\n$8\r\n>hunter2\r\n",
            b"AUTH hunter2\r\n",
            b"HELLO 3 AUTH alice hunter2\r\n",
        ];
        for req in cases {
            for keep in [16, 4096] {
                let mut d = Driver::with(ParseDepth::Full, keep);
                // Also split in two, the secret across the cut.
                let cut = req.len() - 9;
                d.seg(OUT, &req[..cut])
                    .seg(OUT, &req[cut..])
                    .seg(IN, b"+OK\r\n");
                assert_eq!(d.calls.len(), 1, "{:?}", String::from_utf8_lossy(req));
                let c = &d.calls[0];
                let head = String::from_utf8_lossy(&c.req_head.bytes).into_owned();
                assert!(
                    !head.contains("hunter2") && !head.contains("hunter"),
                    "{head}"
                );
                assert!(!c.resource.contains("hunter2"));
                if keep == 4096 {
                    assert!(head.contains("[redacted, "), "{head}");
                }
            }
        }
    }

    #[test]
    fn gaps_inside_a_value_keep_the_call_elsewhere_damage() {
        let mut d = Driver::new();
        d.seg(OUT, b"*2\r\n$3\r\nGET\r\n$1\r\na\r\n")
            .seg(IN, b"$10\r\nab");
        d.gap(IN, Some(5));
        d.seg(IN, b"fgh\r\n");
        assert_eq!(d.calls.len(), 1);
        assert_eq!(d.calls[0].resp.bytes, 17);
        assert_eq!(d.stats.desyncs, 0);
        // A lost record at a message boundary may hide whole replies: nothing is invented, and
        // no later reply can be told to be its command's (`unpaired`): counted, no call.
        d.seg(OUT, b"*2\r\n$3\r\nGET\r\n$1\r\nb\r\n");
        d.gap(IN, Some(7));
        d.seg(IN, b"$1\r\nx\r\n");
        d.seg(OUT, b"*2\r\n$3\r\nGET\r\n$1\r\nc\r\n")
            .seg(IN, b"$1\r\ny\r\n");
        d.close();
        assert_eq!(as_want(&d.summary()), [ok("GET", "a")]);
        // GET b (pending at the loss) and GET c (after it); both replies.
        assert_eq!(d.stats.damaged_messages, 2);
        assert_eq!(d.stats.unmatched_responses, 2);
        assert!(d.claimed()[0] <= d.fed[0] && d.claimed()[1] <= d.fed[1]);
    }

    #[test]
    fn after_lost_commands_only_those_before_them_pair() {
        // Two GETs pending, then a record of commands lost (a `CLIENT REPLY OFF` among them, or
        // a GET): the next two replies are the pending GETs' (the server answers in order),
        // each with its own bytes; nothing after them is paired, whatever it looks like.
        let mut d = Driver::new();
        d.seg(
            OUT,
            b"*2\r\n$3\r\nGET\r\n$1\r\na\r\n*2\r\n$3\r\nGET\r\n$1\r\nb\r\n",
        );
        d.gap(OUT, Some(36));
        d.seg(OUT, b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$1\r\nv\r\n");
        d.seg(OUT, b"*3\r\n$6\r\nCLIENT\r\n$5\r\nREPLY\r\n$2\r\nON\r\n");
        d.seg(IN, b"$2\r\naa\r\n$-1\r\n+OK\r\n");
        d.seg(OUT, b"*2\r\n$4\r\nINCR\r\n$1\r\nn\r\n");
        d.seg(
            IN,
            b"-WRONGTYPE Operation against a key holding the wrong kind of value\r\n",
        );
        d.close();
        assert_eq!(as_want(&d.summary()), [ok("GET", "a"), ok("GET", "b")]);
        assert_eq!((d.calls[0].resp.bytes, d.calls[1].resp.bytes), (8, 5));
        assert_eq!(d.detail(1, "reply"), Some("nil"));
        // SET, CLIENT REPLY ON, INCR; `+OK` and the error.
        assert_eq!(d.stats.damaged_messages, 3);
        assert_eq!(d.stats.unmatched_responses, 2);
        assert_eq!(d.stats.desyncs, 1);
    }

    #[test]
    fn a_pipeline_cut_by_the_snaplen_pairs_up_to_the_cut() {
        // Four GETs in one write (22 bytes each), 59 bytes captured: two whole, the third cut
        // inside its key's length line, the fourth unseen. The third ends at its reply (the
        // oldest unanswered) but the unseen tail may hold more commands: neither its size nor
        // whose the fourth reply is are known.
        let (reqs, replies) = deep_pipeline(4);
        let mut d = Driver::new();
        d.seg_cut(OUT, &reqs[..59], reqs.len() as u64);
        d.seg(IN, &replies);
        d.seg(OUT, b"*2\r\n$3\r\nGET\r\n$1\r\nz\r\n")
            .seg(IN, b"$1\r\nz\r\n");
        d.close();
        assert_eq!(as_want(&d.summary()), [ok("GET", "k:0"), ok("GET", "k:1")]);
        assert!(d.calls.iter().all(|c| c.resp.bytes == 7));
        // The cut GET (its reply taken, no call) and GET z; the fourth reply and z's.
        assert_eq!(d.stats.damaged_messages, 2);
        assert_eq!(d.stats.unmatched_responses, 2);
    }

    #[test]
    fn an_open_reply_that_nests_is_no_command() {
        // Capture recognises the connection mid-reply, at an element that looks like a command
        // (COMMAND DOCS: `restore` then its docs), cut by the snaplen: the nested array seen
        // says it is a reply, so the client's commands are the commands.
        let reply = b"*4\r\n$7\r\nrestore\r\n*2\r\n$7\r\nsummary\r\n";
        let mut d = Driver::new();
        d.seg_cut(IN, reply, 4096);
        d.seg(OUT, b"*2\r\n$3\r\nGET\r\n$1\r\na\r\n")
            .seg(IN, b"$1\r\nx\r\n")
            .close();
        assert_eq!(as_want(&d.summary()), [ok("GET", "a")]);
        assert_eq!(d.calls[0].request_dir, OUT);
    }

    #[test]
    fn reply_record_before_its_command_record_still_pairs() {
        let mut d = Driver::new();
        d.now = 10_000;
        d.seg(IN, b"+PONG\r\n");
        d.now = 5_000;
        d.seg(OUT, b"*1\r\n$4\r\nPING\r\n");
        assert_eq!(as_want(&d.summary()), [ok("PING", "")]);
        // A reply older than the next command (capture began mid-call) is not paired.
        let mut d = Driver::new();
        d.seg(OUT, b"*1\r\n$4\r\nPING\r\n").seg(IN, b"+PONG\r\n");
        d.seg(IN, b"+PONG\r\n");
        d.seg(OUT, b"*1\r\n$4\r\nPING\r\n");
        d.close();
        assert_eq!(d.calls.len(), 1);
        assert_eq!(
            (d.stats.unmatched_responses, d.stats.unanswered_requests),
            (1, 1)
        );
    }

    /// `n` pipelined GETs of `k:i` and their replies (`i` as a bulk string).
    fn deep_pipeline(n: usize) -> (Vec<u8>, Vec<u8>) {
        let mut reqs = Vec::new();
        let mut replies = Vec::new();
        for i in 0..n {
            let key = format!("k:{i}");
            reqs.extend_from_slice(
                format!("*2\r\n$3\r\nGET\r\n${}\r\n{key}\r\n", key.len()).as_bytes(),
            );
            replies.extend_from_slice(format!("${}\r\n{i}\r\n", i.to_string().len()).as_bytes());
        }
        (reqs, replies)
    }

    /// 10,000 commands in one pipeline (redis-py's, `redis-benchmark -P`) pair exactly: the
    /// commands beyond the connection's depth draw on the shared budget (issue 43 item 2).
    #[test]
    fn a_pipeline_of_ten_thousand_pairs_exactly() {
        let (reqs, replies) = deep_pipeline(10_000);
        let mut d = Driver::new();
        for chunk in reqs.chunks(6 * 1024) {
            d.seg(OUT, chunk);
        }
        for chunk in replies.chunks(18 * 1024) {
            d.seg(IN, chunk);
        }
        d.close();
        assert_eq!(d.calls.len(), 10_000);
        for (i, c) in d.calls.iter().enumerate() {
            assert_eq!(c.resource, format!("k:{i}"));
            let reply = format!("${}\r\n{i}\r\n", i.to_string().len());
            assert_eq!(c.resp.bytes, reply.len() as u64);
        }
        assert_eq!(d.stats.pending_dropped, 0);
    }

    /// With the depth and the shared budget spent, the oldest commands are dropped (counted)
    /// and their replies skipped: the others still pair, each with its own reply.
    #[test]
    fn pipelining_deeper_than_depth_and_budget_still_pairs() {
        static NO_BUDGET: crate::protocols::matching::SharedBudget =
            crate::protocols::matching::SharedBudget::new(0);
        let n = MAX_PENDING + 44;
        let (reqs, replies) = deep_pipeline(n);
        let mut d = Driver::new();
        d.p.pending = InOrder::with_budget(MAX_PENDING, &NO_BUDGET);
        d.seg(OUT, &reqs).seg(IN, &replies).close();
        assert_eq!(d.calls.len(), MAX_PENDING);
        assert_eq!(d.stats.pending_dropped, 44);
        for (j, c) in d.calls.iter().enumerate() {
            let i = j + 44;
            assert_eq!(c.resource, format!("k:{i}"));
            let reply = format!("${}\r\n{i}\r\n", i.to_string().len());
            assert_eq!(c.resp.bytes, reply.len() as u64);
        }
    }

    /// Commands lost after a pipeline deeper than depth and budget: the replies owed to the
    /// dropped commands still come first and are skipped, the pending ones still pair.
    #[test]
    fn lost_commands_keep_the_skipped_replies_and_the_pending_pairs() {
        static NO_BUDGET: crate::protocols::matching::SharedBudget =
            crate::protocols::matching::SharedBudget::new(0);
        let n = MAX_PENDING + 2;
        let (reqs, replies) = deep_pipeline(n + 1);
        // The last command, `GET k:258`, is 24 bytes: lost.
        let last = reqs.len() - 24;
        let mut d = Driver::new();
        d.p.pending = InOrder::with_budget(MAX_PENDING, &NO_BUDGET);
        d.seg(OUT, &reqs[..last]).gap(OUT, Some(24));
        d.seg(OUT, b"*2\r\n$3\r\nGET\r\n$1\r\nz\r\n");
        d.seg(IN, &replies).close();
        assert_eq!(d.calls.len(), MAX_PENDING);
        for (j, c) in d.calls.iter().enumerate() {
            let i = j + 2;
            assert_eq!(c.resource, format!("k:{i}"));
            let reply = format!("${}\r\n{i}\r\n", i.to_string().len());
            assert_eq!(c.resp.bytes, reply.len() as u64);
        }
        assert_eq!(d.stats.pending_dropped, 2);
        // The lost GET's reply; GET z's never came.
        assert_eq!(
            (d.stats.unmatched_responses, d.stats.damaged_messages),
            (1, 1)
        );
    }

    #[test]
    fn an_open_command_ends_at_its_reply_and_makes_no_call() {
        // An MSET of 600 pairs: 4096 bytes captured of its one write, framing lost inside.
        let mut req = b"*1201\r\n$4\r\nMSET\r\n".to_vec();
        for i in 0..600 {
            let (k, v) = (format!("k:{i}"), format!("v{i}"));
            req.extend_from_slice(
                format!("${}\r\n{k}\r\n${}\r\n{v}\r\n", k.len(), v.len()).as_bytes(),
            );
        }
        let mut d = Driver::new();
        d.seg_cut(OUT, &req[..4096], req.len() as u64);
        // Its reply: the oldest unanswered command's. But the unseen tail of the write may have
        // held more commands: the MSET's size is not known, nor whose the next replies are.
        d.seg(IN, b"+OK\r\n");
        d.seg(OUT, b"*2\r\n$3\r\nGET\r\n$3\r\nk:1\r\n")
            .seg(IN, b"$2\r\nv1\r\n");
        d.close();
        assert!(d.calls.is_empty());
        assert_eq!(d.stats.desyncs, 1);
        assert_eq!(
            (d.stats.damaged_messages, d.stats.unmatched_responses),
            (2, 1)
        );
    }

    #[test]
    fn an_open_reply_ends_where_the_next_command_starts() {
        // A reply cut by the snaplen inside its structure, then a command cut so too (complete
        // only at its reply): the open reply ends where the command starts, so it does not
        // take the command's reply as its own.
        let mut d = Driver::new();
        d.seg(OUT, b"*2\r\n$6\r\nLRANGE\r\n$1\r\nl\r\n");
        d.seg_cut(IN, b"*100\r\n$1\r\na\r\n$1\r", 700);
        let mset = b"*5\r\n$4\r\nMSET\r\n$1\r\na\r\n$1\r\n1\r\n$1\r";
        d.seg_cut(OUT, mset, 4000);
        d.seg(IN, b"+OK\r\n").close();
        assert_eq!(as_want(&d.summary()), [ok("LRANGE", "l")]);
        assert!(d.calls[0].end_inferred);
        assert_eq!(d.calls[0].resp.bytes, 700);
        assert_eq!(d.calls[0].resp.syscalls, 1);
    }

    #[test]
    fn streamed_resp3_values() {
        let mut d = Driver::new();
        d.seg(OUT, b"*1\r\n$1\r\nX\r\n")
            .seg(IN, b"$?\r\n;4\r\nHell\r\n;1\r\no\r\n;0\r\n");
        d.seg(OUT, b"*1\r\n$1\r\nY\r\n").seg(
            IN,
            b"*?\r\n:1\r\n*2\r\n:2\r\n:3\r\n%?\r\n+a\r\n:1\r\n.\r\n.\r\n",
        );
        d.seg(OUT, b"*1\r\n$1\r\nZ\r\n").seg(
            IN,
            b"|1\r\n+ttl\r\n:3\r\n*2\r\n|1\r\n+a\r\n+b\r\n:1\r\n:2\r\n",
        );
        assert_eq!(
            as_want(&d.summary()),
            [ok("X", ""), ok("Y", ""), ok("Z", "")]
        );
        assert_eq!(d.detail(0, "reply"), Some("bulk"));
        assert_eq!(d.detail(1, "reply"), Some("array(?)"));
        assert_eq!(d.detail(2, "reply"), Some("array(2)"));
        assert_eq!(d.stats, ParseStats::default());
        assert_eq!(d.claimed(), d.fed);
    }

    #[test]
    fn hostile_lengths_and_nesting_are_bounded() {
        let cases: &[&[u8]] = &[
            b"$99999999999999999999\r\n",
            b"$18446744073709551615\r\n",
            b"$1099511627777\r\n",
            b"*4294967297\r\n",
            b"%4294967297\r\n",
            b"$-5\r\n",
            b"*-2\r\n",
            b":\r\n",
            b":12a\r\n",
            b"#x\r\n",
            b"#\r\n",
            b"_x\r\n",
            b"+OK\rX",
            b"$3\r\nabcXY",
            b"$?x\r\n",
            b">?\r\n",
            b".\r\n",
            b"+OK\n",
        ];
        for reply in cases {
            let mut d = Driver::new();
            d.seg(OUT, b"*1\r\n$4\r\nPING\r\n").seg(IN, reply);
            d.seg(OUT, b"*1\r\n$4\r\nPING\r\n").seg(IN, b"+PONG\r\n");
            d.close();
            // Where the garbage ended, whole replies may have been: nothing pairs after it.
            assert!(d.calls.is_empty(), "{:?}", String::from_utf8_lossy(reply));
            assert_eq!(d.stats.desyncs, 1, "{:?}", String::from_utf8_lossy(reply));
            assert!(d.stats.damaged_messages >= 2);
        }
        // Nesting: 32 levels framed, 33 are garbage.
        for (levels, framed) in [(MAX_DEPTH, true), (MAX_DEPTH + 1, false), (10_000, false)] {
            let mut reply = b"*1\r\n".repeat(levels);
            reply.extend_from_slice(b":1\r\n");
            let mut d = Driver::new();
            d.seg(OUT, b"*1\r\n$1\r\nX\r\n").seg(IN, &reply).close();
            assert_eq!(d.calls.len(), usize::from(framed), "{levels}");
            assert!(d.p.dirs[1].stack.capacity() <= MAX_DEPTH * 2);
        }
        // A huge aggregate claimed by a few bytes stays a counter, never an allocation.
        let mut d = Driver::new();
        d.seg(OUT, b"*1\r\n$4\r\nKEYS\r\n")
            .seg(IN, b"*4294967296\r\n:1\r\n:2\r\n");
        d.seg_cut(IN, b"", u64::MAX)
            .seg_cut(IN, b"", u64::MAX)
            .close();
        assert!(d.calls.is_empty() || d.calls[0].resp.bytes == u64::MAX);
    }

    #[test]
    fn lengths_near_2_to_the_64_saturate_the_counts() {
        let mut d = Driver::new();
        d.seg_cut(OUT, b"", u64::MAX).seg_cut(OUT, b"", u64::MAX);
        d.seg(OUT, b"*1\r\n$3\r\nGET\r\n");
        d.seg(IN, b"$1000000000000\r\nabc")
            .seg_cut(IN, b"x", u64::MAX);
        d.close();
        assert_eq!(d.stats.unparsed_bytes, u64::MAX);
        assert!(d.claimed()[1] <= d.fed[1]);
    }

    #[test]
    fn first_message_that_misleads_is_corrected() {
        // Capture began with a reply that looks like a command (LRANGE of ["GET", "x"]): it
        // and the command after it make one wrong call, then a reply where commands go shows
        // the directions, and pairing is right from there on.
        let mut d = Driver::new();
        d.seg(IN, b"*2\r\n$3\r\nGET\r\n$1\r\nx\r\n");
        d.seg(OUT, b"*2\r\n$3\r\nGET\r\n$1\r\na\r\n")
            .seg(IN, b"$1\r\n1\r\n");
        d.seg(OUT, b"*2\r\n$3\r\nGET\r\n$1\r\nb\r\n")
            .seg(IN, b"$1\r\n2\r\n");
        d.close();
        assert_eq!(as_want(&d.summary()), [ok("GET", "x"), ok("GET", "b")]);
        assert_eq!(d.calls[1].request_dir, OUT);
        assert_eq!(d.calls[1].resp.bytes, 7);
        assert_eq!((d.stats.desyncs, d.stats.unmatched_responses), (1, 1));
        // A connection seen from its middle: first a pub/sub message, then commands.
        let mut d = Driver::new();
        d.seg(IN, b"*3\r\n$7\r\nmessage\r\n$1\r\nc\r\n$1\r\nm\r\n");
        d.seg(OUT, b"*1\r\n$4\r\nPING\r\n")
            .seg(IN, b"*2\r\n$4\r\npong\r\n$0\r\n\r\n");
        assert_eq!(as_want(&d.summary()), [ok("PING", "")]);
        assert_eq!(d.stats.pushes, 1);
    }

    #[test]
    fn psync_hands_the_connection_to_replication() {
        let mut d = Driver::new();
        d.seg(OUT, b"*3\r\n$5\r\nPSYNC\r\n$1\r\n?\r\n$2\r\n-1\r\n")
            .seg(
                IN,
                b"+FULLRESYNC 8de1787ba490483314a4d30f1c628bc5025eb761 0\r\n$5\r\nREDIS",
            );
        d.seg(IN, b"*1\r\n$4\r\nPING\r\n")
            .seg(OUT, b"garbage")
            .close();
        assert_eq!(as_want(&d.summary()), [ok("PSYNC", "")]);
        assert_eq!(d.stats, ParseStats::default());
    }

    /// Where a CPU budget may cut a connection (src/source/sampling.rs): commands one at a
    /// time, each answered before the next goes out; never once they overlapped or replies
    /// come that no command asked for.
    #[test]
    fn a_turn_into_the_command_direction_starts_a_call_only_while_calls_came_alone() {
        const GET: &[u8] = b"*2\r\n$3\r\nGET\r\n$1\r\nk\r\n";
        let mut d = Driver::new();
        assert_eq!(d.p.request_direction(), None);
        d.seg(OUT, GET)
            .seg(IN, b"$1\r\nv\r\n")
            .seg(OUT, GET)
            .seg(IN, b"$-1\r\n");
        assert_eq!(d.calls.len(), 2);
        assert_eq!(d.p.request_direction(), Some(OUT));
        // A batch written at once: pipelining, even read whole — a client that batches may
        // write its next batch before it read the last one's replies, so the turn a cut
        // would come at may be inside a call.
        d.seg(OUT, &[GET, GET].concat())
            .seg(IN, b"$1\r\nv\r\n$1\r\nv\r\n");
        assert_eq!(d.calls.len(), 4);
        assert_eq!(d.p.request_direction(), None);

        // The next command before the last reply: never.
        let mut p = Driver::new();
        p.seg(OUT, GET)
            .seg(IN, b"$1\r")
            .seg(OUT, GET)
            .seg(IN, b"\nv\r\n$-1\r\n");
        assert_eq!(p.calls.len(), 2);
        assert_eq!(p.p.request_direction(), None);

        // Pushes after SUBSCRIBE: replies no command asked for.
        let mut s = Driver::new();
        s.seg(OUT, b"*2\r\n$9\r\nSUBSCRIBE\r\n$1\r\nc\r\n")
            .seg(IN, b"*3\r\n$9\r\nsubscribe\r\n$1\r\nc\r\n:1\r\n");
        assert_eq!(s.p.request_direction(), None);

        let mut g = Driver::new();
        g.seg(OUT, GET).seg(IN, b"$1\r\nv\r\n").gap(IN, Some(4));
        assert_eq!(g.p.request_direction(), None);

        // Seen from mid-stream: the first bytes answer a command sent before ebtop saw the
        // connection (held unpaired); the next command's turn is still between calls.
        let mut m = Driver::new();
        m.seg(IN, b"$1\r\nv\r\n")
            .seg(OUT, GET)
            .seg(IN, b"$1\r\nv\r\n")
            .seg(OUT, GET)
            .seg(IN, b"$-1\r\n");
        assert_eq!(m.calls.len(), 2);
        assert_eq!(m.p.request_direction(), Some(OUT));
    }
}
