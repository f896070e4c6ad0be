//! DNS over UDP (one message per datagram) and TCP (each message after a 2-byte length).
//!
//! A call is a query paired with its response by transaction id — and, on a datagram socket,
//! by the peer the datagram came from or went to (a server socket answers many clients, whose
//! ids may collide) — and confirmed by the question: a response whose question differs from
//! the query's is not its answer. Several queries may be in flight on one socket (glibc sends
//! A and AAAA together) and TCP answers may come in any order (RFC 7766), so pairing never
//! depends on order or time.
//!
//! Resource: query type and name (`A example.com`, lowercased; class shown unless IN). Status:
//! the rcode's name (`NOERROR`, `NXDOMAIN`, `SERVFAIL`; EDNS extended rcodes included).
//! Outcome: NOERROR is ok; NXDOMAIN, FORMERR, REFUSED, YXDOMAIN… are the asker's (client
//! errors, like HTTP 4xx); SERVFAIL, NOTIMP and unknown rcodes the server's.
//!
//! A query that gets no response is counted in [`ParseStats::unanswered_requests`]: when its
//! socket closes, when the same query (id, peer) is sent again (a retry), when the pending
//! table is full, or once a later message on the socket is [`QUERY_TIMEOUT_NS`] newer.
//!
//! Only the header, the question and the answer records are decoded; a message cut by the
//! snaplen is used as far as it was captured (the header and question suffice for a call).
//! Decoding is written here rather than taken from a DNS crate because those reject a
//! truncated message outright, and a capture is often one.

use std::hash::{Hash, Hasher};
use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr};

use super::matching::ById;
use super::{
    CallKind, CapturedHead, L7Call, MessageSpan, Outcome, ParseDepth, ParseStats, ParserConfig,
    Protocol, ProtocolDescriptor, ResourceKind, Segment, StreamParser, Transport,
};
use crate::event::Direction;

/// The protocol's entry in [`super::REGISTRY`].
pub const DESCRIPTOR: ProtocolDescriptor = ProtocolDescriptor {
    folder: "dns",
    title: "DNS",
    calls: &[CallKind {
        proto: Protocol::Dns,
        name: "dns",
        resource: ResourceKind::DnsQuestion,
        metrics: super::MetricNames {
            server: "dns_server_duration_seconds",
            client: "dns_lookup_duration_seconds",
            system: None,
            method: "dns_question_type",
            resource: "dns_question_name",
        },
    }],
    kernel_id: Some(4),
    datagrams: true,
    copy_whole: false,
    detect: is_connection_start,
    new_parser: |cfg| Box::new(DnsParser::new(cfg)),
    benches: &[],
};

/// Queries awaiting a response on one socket (a busy server socket has many).
const MAX_PENDING: usize = 4096;
/// A query with no response after this long (of capture time) is counted unanswered:
/// resolvers give up after 5 s (glibc, dig) and retry with the same id.
pub const QUERY_TIMEOUT_NS: u64 = 10_000_000_000;
/// Bytes of a TCP message kept for decoding (header, question, first answers).
const TCP_KEEP: usize = 4096;
/// Smallest message: header (12) and a question for the root (1 + 4).
const MIN_MESSAGE: usize = 17;
/// Addresses listed in a call's details.
const MAX_ADDRESSES: usize = 8;

// ---------------------------------------------------------------------------------------------
// Wire format

/// The 12-byte header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Header {
    id: u16,
    flags: u16,
    qdcount: u16,
    ancount: u16,
    nscount: u16,
    arcount: u16,
}

impl Header {
    fn parse(m: &[u8]) -> Option<Header> {
        let w = |i: usize| u16::from_be_bytes([m[i], m[i + 1]]);
        (m.len() >= 12).then(|| Header {
            id: w(0),
            flags: w(2),
            qdcount: w(4),
            ancount: w(6),
            nscount: w(8),
            arcount: w(10),
        })
    }
    fn is_response(&self) -> bool {
        self.flags & 0x8000 != 0
    }
    fn opcode(&self) -> u8 {
        ((self.flags >> 11) & 0xf) as u8
    }
    fn rcode(&self) -> u8 {
        (self.flags & 0xf) as u8
    }
    fn z(&self) -> bool {
        self.flags & 0x0040 != 0
    }
    /// The flags set, as dig names them.
    fn flag_names(&self) -> String {
        const NAMES: [(u16, &str); 7] = [
            (0x8000, "qr"),
            (0x0400, "aa"),
            (0x0200, "tc"),
            (0x0100, "rd"),
            (0x0080, "ra"),
            (0x0020, "ad"),
            (0x0010, "cd"),
        ];
        let set: Vec<&str> = NAMES
            .iter()
            .filter(|(bit, _)| self.flags & bit != 0)
            .map(|(_, n)| *n)
            .collect();
        set.join(" ")
    }
}

/// A question: name (lowercase, no trailing dot; `.` for the root), type and class.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Question {
    name: String,
    qtype: u16,
    qclass: u16,
}

impl Question {
    /// `A example.com`, with the class when it is not IN (`TXT version.bind CH`).
    fn resource(&self) -> String {
        let mut s = format!("{} {}", type_name(self.qtype), self.name);
        if self.qclass != 1 {
            s.push(' ');
            s.push_str(&class_name(self.qclass));
        }
        s
    }
}

/// Most labels a name may have (255 bytes of wire name).
const MAX_LABELS: usize = 128;

/// Reads the name at `off`: its text (lowercase) and the offset just past it where it sits
/// (compression pointers are followed backwards only, so any input ends).
fn read_name(m: &[u8], mut off: usize, text: &mut String) -> Option<usize> {
    let mut end = None;
    let mut wire_len = 0usize;
    for _ in 0..MAX_LABELS {
        let len = *m.get(off)? as usize;
        match len {
            0 => {
                if text.is_empty() {
                    text.push('.');
                }
                return Some(end.unwrap_or(off + 1));
            }
            1..=63 => {
                let label = m.get(off + 1..off + 1 + len)?;
                wire_len += len + 1;
                if wire_len > 255 {
                    return None;
                }
                if !text.is_empty() {
                    text.push('.');
                }
                for &c in label {
                    match c {
                        b'.' | b'\\' => {
                            text.push('\\');
                            text.push(c as char);
                        }
                        0x21..=0x7e => text.push(c.to_ascii_lowercase() as char),
                        _ => text.push_str(&format!("\\{c:03}")),
                    }
                }
                off += 1 + len;
            }
            0xc0..=0xff => {
                let target = ((len & 0x3f) << 8) | *m.get(off + 1)? as usize;
                if target >= off {
                    return None;
                }
                end.get_or_insert(off + 2);
                off = target;
            }
            _ => return None,
        }
    }
    None
}

/// Skips the name at `off` without decoding it.
fn skip_name(m: &[u8], mut off: usize) -> Option<usize> {
    for _ in 0..MAX_LABELS {
        let len = *m.get(off)? as usize;
        match len {
            0 => return Some(off + 1),
            1..=63 => off += 1 + len,
            0xc0..=0xff => return (off + 2 <= m.len()).then_some(off + 2),
            _ => return None,
        }
    }
    None
}

fn read_question(m: &[u8]) -> Option<(Question, usize)> {
    let mut name = String::new();
    let off = read_name(m, 12, &mut name)?;
    let f = m.get(off..off + 4)?;
    Some((
        Question {
            name,
            qtype: u16::from_be_bytes([f[0], f[1]]),
            qclass: u16::from_be_bytes([f[2], f[3]]),
        },
        off + 4,
    ))
}

/// A resource record's fixed part and where its data lies.
struct Record {
    owner_off: usize,
    rtype: u16,
    class: u16,
    ttl: u32,
    data: std::ops::Range<usize>,
}

fn read_record(m: &[u8], off: usize) -> Option<(Record, usize)> {
    let after_name = skip_name(m, off)?;
    let f = m.get(after_name..after_name + 10)?;
    let rdlen = u16::from_be_bytes([f[8], f[9]]) as usize;
    let start = after_name + 10;
    let end = start + rdlen;
    // The data may be cut by the snaplen: the record's fields are still known.
    Some((
        Record {
            owner_off: off,
            rtype: u16::from_be_bytes([f[0], f[1]]),
            class: u16::from_be_bytes([f[2], f[3]]),
            ttl: u32::from_be_bytes([f[4], f[5], f[6], f[7]]),
            data: start..end,
        },
        end,
    ))
}

/// What a message's records say, as far as they were captured.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
struct Records {
    /// A/AAAA addresses among the answers.
    addresses: Vec<String>,
    /// Answer records as text (`example.com. 300 IN A 192.0.2.1`), the first few.
    answers: Vec<String>,
    /// EDNS: the OPT record's UDP size and extended rcode bits (high 8 of 12).
    edns: Option<(u16, u8)>,
    /// All records were captured and well formed.
    complete: bool,
}

/// The length of the whole message at the start of `m`, if all of it is there and well
/// formed (questions and records walked).
fn message_len(m: &[u8]) -> Option<usize> {
    let h = Header::parse(m)?;
    let mut off = 12;
    for _ in 0..h.qdcount {
        off = skip_name(m, off)? + 4;
    }
    let records = h.ancount as usize + h.nscount as usize + h.arcount as usize;
    for _ in 0..records {
        off = read_record(m, off)?.1;
    }
    (off <= m.len()).then_some(off)
}

/// Could a DNS message start with this header? (Framing check of a TCP message, whose
/// length alone says nothing.)
fn plausible_header(h: &Header) -> bool {
    matches!(h.opcode(), 0 | 1 | 2 | 4 | 5 | 6) && !h.z() && h.qdcount <= 1
}

fn read_records(m: &[u8], h: &Header, mut off: usize, want_text: bool) -> Records {
    let mut r = Records::default();
    let total = h.ancount as usize + h.nscount as usize + h.arcount as usize;
    for i in 0..total {
        let Some((rec, next)) = read_record(m, off) else {
            return r;
        };
        let data = m.get(rec.data.clone());
        if i < h.ancount as usize {
            match (rec.rtype, data) {
                (1, Some(d)) if d.len() == 4 && r.addresses.len() < MAX_ADDRESSES => r
                    .addresses
                    .push(Ipv4Addr::new(d[0], d[1], d[2], d[3]).to_string()),
                (28, Some(d)) if d.len() == 16 && r.addresses.len() < MAX_ADDRESSES => {
                    let a: [u8; 16] = d.try_into().expect("16 bytes");
                    r.addresses.push(Ipv6Addr::from(a).to_string())
                }
                _ => {}
            }
            if want_text && r.answers.len() < 16 {
                r.answers.push(record_text(m, &rec, data));
            }
        } else if rec.rtype == 41 {
            r.edns = Some((rec.class, (rec.ttl >> 24) as u8));
        }
        off = next;
    }
    r.complete = off <= m.len();
    r
}

/// A record as dig shows it; data of types other than these as its length.
fn record_text(m: &[u8], rec: &Record, data: Option<&[u8]>) -> String {
    let mut owner = String::new();
    if read_name(m, rec.owner_off, &mut owner).is_none() {
        owner.push('?');
    }
    let value = match (rec.rtype, data) {
        (1, Some(d)) if d.len() == 4 => Ipv4Addr::new(d[0], d[1], d[2], d[3]).to_string(),
        (28, Some(d)) if d.len() == 16 => {
            Ipv6Addr::from(<[u8; 16]>::try_from(d).expect("16 bytes")).to_string()
        }
        (2 | 5 | 12, Some(_)) => {
            let mut t = String::new();
            match read_name(m, rec.data.start, &mut t) {
                Some(_) => t,
                None => "?".to_owned(),
            }
        }
        (_, Some(d)) => format!("({} bytes)", d.len()),
        (_, None) => "(not captured)".to_owned(),
    };
    format!(
        "{owner} {} {} {} {value}",
        rec.ttl,
        class_name(rec.class),
        type_name(rec.rtype)
    )
}

pub fn type_name(t: u16) -> String {
    let name = match t {
        1 => "A",
        2 => "NS",
        5 => "CNAME",
        6 => "SOA",
        12 => "PTR",
        13 => "HINFO",
        15 => "MX",
        16 => "TXT",
        28 => "AAAA",
        33 => "SRV",
        35 => "NAPTR",
        39 => "DNAME",
        41 => "OPT",
        43 => "DS",
        46 => "RRSIG",
        47 => "NSEC",
        48 => "DNSKEY",
        50 => "NSEC3",
        52 => "TLSA",
        64 => "SVCB",
        65 => "HTTPS",
        99 => "SPF",
        251 => "IXFR",
        252 => "AXFR",
        255 => "ANY",
        257 => "CAA",
        _ => return format!("TYPE{t}"),
    };
    name.to_owned()
}

fn class_name(c: u16) -> String {
    match c {
        1 => "IN".to_owned(),
        3 => "CH".to_owned(),
        4 => "HS".to_owned(),
        254 => "NONE".to_owned(),
        255 => "ANY".to_owned(),
        _ => format!("CLASS{c}"),
    }
}

/// The rcode's name (RFC 6895's registry); 12 bits with EDNS.
pub fn rcode_name(rcode: u16) -> String {
    let name = match rcode {
        0 => "NOERROR",
        1 => "FORMERR",
        2 => "SERVFAIL",
        3 => "NXDOMAIN",
        4 => "NOTIMP",
        5 => "REFUSED",
        6 => "YXDOMAIN",
        7 => "YXRRSET",
        8 => "NXRRSET",
        9 => "NOTAUTH",
        10 => "NOTZONE",
        11 => "DSOTYPENI",
        16 => "BADVERS",
        23 => "BADCOOKIE",
        _ => return format!("RCODE{rcode}"),
    };
    name.to_owned()
}

/// The rcode: the header's 4 bits, with EDNS the OPT record's 8 above them.
fn full_rcode(h: &Header, recs: &Records) -> u16 {
    u16::from(h.rcode()) | recs.edns.map_or(0, |(_, hi)| u16::from(hi) << 4)
}

/// Whose fault an rcode is.
fn rcode_outcome(rcode: u16) -> Outcome {
    match rcode {
        0 => Outcome::Ok,
        // The asker's: a malformed query, a name that does not exist, a refused or
        // inconsistent request, a stale cookie.
        1 | 3 | 5..=10 | 16 | 23 => Outcome::ClientError,
        _ => Outcome::ServerError,
    }
}

fn opcode_name(op: u8) -> &'static str {
    match op {
        0 => "QUERY",
        1 => "IQUERY",
        2 => "STATUS",
        4 => "NOTIFY",
        5 => "UPDATE",
        6 => "DSO",
        _ => "OPCODE?",
    }
}

// ---------------------------------------------------------------------------------------------
// Detection

/// Does this payload start a DNS message, as a datagram or after TCP's 2-byte length?
///
/// Accepted: opcode QUERY, Z bit clear, exactly one question whose name, type and class are
/// all captured and well formed (class IN, CH, HS, NONE or ANY; type not 0); a query also has
/// no answer or authority records, at most 2 additional ones (EDNS OPT, TSIG), rcode 0 and no
/// AA, TC or RA flag; a response at most 1024 records. Text protocols never match (the
/// question count is `\0\x01`).
pub fn is_connection_start(p: &[u8]) -> bool {
    is_message_start(p) || is_length_prefixed_start(p)
}

/// A TCP message start: the 2-byte length, then a message start.
fn is_length_prefixed_start(p: &[u8]) -> bool {
    match p {
        [hi, lo, rest @ ..] => {
            let len = u16::from_be_bytes([*hi, *lo]) as usize;
            len >= MIN_MESSAGE && is_message_start(&rest[..rest.len().min(len)])
        }
        _ => false,
    }
}

fn is_message_start(m: &[u8]) -> bool {
    let Some(h) = Header::parse(m) else {
        return false;
    };
    if h.opcode() != 0 || h.z() || h.qdcount != 1 {
        return false;
    }
    if h.is_response() {
        if h.ancount as usize + h.nscount as usize + h.arcount as usize > 1024 {
            return false;
        }
    } else if h.flags & 0x0680 != 0
        || h.rcode() != 0
        || h.ancount != 0
        || h.nscount != 0
        || h.arcount > 2
    {
        return false;
    }
    let Some((q, _)) = read_question(m) else {
        return false;
    };
    q.qtype != 0 && matches!(q.qclass, 1 | 3 | 4 | 254 | 255)
}

// ---------------------------------------------------------------------------------------------
// Parser

/// A query waiting for its response.
struct Query {
    question: Question,
    dir: Direction,
    span: MessageSpan,
    header: Header,
    edns_udp: Option<u16>,
    truncated: bool,
    head: CapturedHead,
}

/// TCP framing of one direction.
#[derive(Debug)]
enum Framing {
    /// Expecting a message's 2-byte length (`first`: its first byte, already seen).
    Length { first: Option<(u8, MessageSpan)> },
    /// Inside a message of `len` bytes, `got` of them seen, the first `TCP_KEEP` kept.
    Body {
        len: usize,
        got: usize,
        kept: Vec<u8>,
        span: MessageSpan,
        /// Bytes inside it were lost (the message is not used).
        damaged: bool,
        /// Bytes inside it were moved but not captured (snaplen).
        cut: bool,
        /// Its length prefix was seen (2 bytes of it on the wire), or went by uncaptured (0).
        prefix_seen: bool,
    },
    /// Lost track of message boundaries: waits for a segment starting a message.
    Lost,
}

pub struct DnsParser {
    depth: ParseDepth,
    keep_head: usize,
    transport: Transport,
    pending: ById<Query>,
    tcp: [Framing; 2],
    /// A direction's first segment was seen.
    started: [bool; 2],
    /// Segments seen so far (a TCP message's span is extended once per segment).
    seg_counter: u64,
    body_seg: [u64; 2],
    /// Newest timestamp seen, and when pending queries were last checked for timeouts.
    newest_ns: u64,
    expired_at_ns: u64,
}

impl DnsParser {
    pub fn new(cfg: &ParserConfig) -> Self {
        DnsParser {
            depth: cfg.depth,
            keep_head: cfg.keep_head,
            transport: cfg.transport,
            pending: ById::new(MAX_PENDING),
            tcp: [
                Framing::Length { first: None },
                Framing::Length { first: None },
            ],
            started: [false; 2],
            seg_counter: 0,
            body_seg: [u64::MAX; 2],
            newest_ns: 0,
            expired_at_ns: 0,
        }
    }

    /// Pairing key: the id, and on a datagram socket the peer too.
    fn key(id: u16, peer: Option<SocketAddr>) -> u64 {
        let peer_hash = peer.map_or(0, |p| {
            let mut h = rustc_hash::FxHasher::default();
            p.hash(&mut h);
            h.finish()
        });
        peer_hash << 16 | u64::from(id)
    }

    /// Counts queries older than the timeout as unanswered (at most once a second).
    fn expire(&mut self, now_ns: u64, stats: &mut ParseStats) {
        self.newest_ns = self.newest_ns.max(now_ns);
        if self.newest_ns < self.expired_at_ns.saturating_add(1_000_000_000) {
            return;
        }
        self.expired_at_ns = self.newest_ns;
        let cutoff = self.newest_ns.saturating_sub(QUERY_TIMEOUT_NS);
        stats.unanswered_requests += self.pending.retain(|q| q.span.last_end_ns >= cutoff) as u64;
    }

    /// One whole message: `m` its captured bytes, `wire_len` its size on the wire.
    #[allow(clippy::too_many_arguments)]
    fn on_message(
        &mut self,
        m: &[u8],
        wire_len: u64,
        span: MessageSpan,
        dir: Direction,
        peer: Option<SocketAddr>,
        cut: bool,
        out: &mut Vec<L7Call>,
        stats: &mut ParseStats,
    ) {
        let mut span = span;
        span.bytes = wire_len;
        let Some(h) = Header::parse(m) else {
            stats.damaged_messages += 1;
            return;
        };
        let question = (h.qdcount == 1).then(|| read_question(m)).flatten();
        if !h.is_response() {
            let Some((question, qend)) = question else {
                // Not a query ebtop can name (no question, or not captured): nothing to pair.
                stats.damaged_messages += 1;
                return;
            };
            let recs = read_records(m, &h, qend, false);
            let key = Self::key(h.id, peer);
            if self.pending.take(key).is_some() {
                // Sent again with the same id: the first went unanswered (a retry).
                stats.unanswered_requests += 1;
            }
            let head = self.head(m, &h, Some(&question), &recs);
            let evicted = self.pending.evicted;
            self.pending.insert(
                key,
                Query {
                    question,
                    dir,
                    span,
                    header: h,
                    edns_udp: recs.edns.map(|(size, _)| size),
                    truncated: cut,
                    head,
                },
            );
            stats.unanswered_requests += self.pending.evicted - evicted;
            return;
        }
        let key = Self::key(h.id, peer);
        let Some(query) = self.pending.take(key) else {
            stats.unmatched_responses += 1;
            return;
        };
        // The answer to this query must repeat its question (names compare case-blind:
        // resolvers randomise case) and travel the other way.
        let qend = match &question {
            Some((q, qend)) if *q == query.question => *qend,
            None if h.qdcount == 0 => 12,
            _ => {
                self.pending.insert(key, query);
                stats.unmatched_responses += 1;
                return;
            }
        };
        if query.dir == dir {
            self.pending.insert(key, query);
            stats.unmatched_responses += 1;
            return;
        }
        let want_text = self.keep_head > 0;
        let recs = read_records(m, &h, qend, want_text);
        let rcode = full_rcode(&h, &recs);
        let mut details = Vec::new();
        if self.depth == ParseDepth::Full {
            details.push(("answers", h.ancount.to_string()));
            details.push(("authority", h.nscount.to_string()));
            details.push(("additional", h.arcount.to_string()));
            details.push(("flags", h.flag_names()));
            if !recs.addresses.is_empty() {
                details.push(("addresses", recs.addresses.join(",")));
            }
            if let Some(size) = query.edns_udp {
                details.push(("edns_udp_size", size.to_string()));
            }
            details.push(("txid", h.id.to_string()));
        }
        let resp_head = self.head(m, &h, question.as_ref().map(|(q, _)| q), &recs);
        out.push(L7Call {
            proto: Protocol::Dns,
            request_dir: query.dir,
            method: opcode_name(query.header.opcode()).to_owned(),
            resource: query.question.resource(),
            version: match self.transport {
                Transport::Datagram => "udp",
                Transport::Stream => "tcp",
            },
            status: None,
            status_text: Some(rcode_name(rcode)),
            outcome: rcode_outcome(rcode),
            req: query.span,
            resp: span,
            truncated: query.truncated || cut,
            end_inferred: false,
            details,
            req_head: query.head,
            resp_head,
        });
    }

    /// The message as dig would summarise it, for a person to read (when heads are kept).
    fn head(&self, m: &[u8], h: &Header, q: Option<&Question>, recs: &Records) -> CapturedHead {
        if self.keep_head == 0 {
            return CapturedHead::default();
        }
        let mut t = format!(
            ";; {} id {} {}, flags: {}\n",
            opcode_name(h.opcode()),
            h.id,
            if h.is_response() {
                rcode_name(full_rcode(h, recs))
            } else {
                "query".to_owned()
            },
            h.flag_names()
        );
        if let Some(q) = q {
            t.push_str(&format!(
                ";; question: {}. {} {}\n",
                q.name.trim_end_matches('.'),
                class_name(q.qclass),
                type_name(q.qtype)
            ));
        }
        if h.is_response() {
            t.push_str(&format!(
                ";; answers {}, authority {}, additional {}\n",
                h.ancount, h.nscount, h.arcount
            ));
        }
        if let Some((size, _)) = recs.edns {
            t.push_str(&format!(";; EDNS udp size {size}\n"));
        }
        for a in &recs.answers {
            t.push_str(a);
            t.push('\n');
        }
        let mut bytes = t.into_bytes();
        bytes.truncate(self.keep_head);
        CapturedHead::redacted(bytes, m.len() as u64)
    }

    fn on_tcp(&mut self, seg: &Segment, out: &mut Vec<L7Call>, stats: &mut ParseStats) {
        let d = seg.dir.index();
        let mut p = seg.payload;
        if !std::mem::replace(&mut self.started[d], true)
            && !is_length_prefixed_start(p)
            && is_message_start(p)
            && seg.total_len <= u64::from(u16::MAX)
        {
            // A server that reads the length apart (dnsmasq reads it a byte at a time) shows
            // its first message without it: the kernel recognised the connection only at the
            // message, so the length went by uncaptured. Its length is where its records end
            // (or, if they were not all captured, this read).
            let len = message_len(p).unwrap_or(seg.total_len as usize);
            self.start_body(d, len, MessageSpan::starting(seg), false, stats);
        }
        if matches!(self.tcp[d], Framing::Lost) {
            if is_connection_start(p) {
                self.tcp[d] = Framing::Length { first: None };
            } else {
                stats.skipped(seg.total_len);
                return;
            }
        }
        while !p.is_empty() {
            match &mut self.tcp[d] {
                Framing::Length { first: None } => {
                    if p.len() == 1 {
                        self.tcp[d] = Framing::Length {
                            first: Some((p[0], MessageSpan::starting(seg))),
                        };
                        p = &[];
                        continue;
                    }
                    let len = u16::from_be_bytes([p[0], p[1]]) as usize;
                    p = &p[2..];
                    self.start_body(d, len, MessageSpan::starting(seg), true, stats);
                }
                Framing::Length {
                    first: Some((hi, span)),
                } => {
                    let (len, mut span) = (u16::from_be_bytes([*hi, p[0]]) as usize, *span);
                    span.extend(seg);
                    p = &p[1..];
                    self.start_body(d, len, span, true, stats);
                }
                Framing::Body {
                    len,
                    got,
                    kept,
                    span,
                    damaged,
                    ..
                } => {
                    if self.body_seg[d] != self.seg_counter {
                        self.body_seg[d] = self.seg_counter;
                        span.extend(seg);
                    }
                    let n = (*len - *got).min(p.len());
                    let room = TCP_KEEP.saturating_sub(kept.len()).min(n);
                    let had_header = kept.len() >= 12;
                    kept.extend_from_slice(&p[..room]);
                    *got += n;
                    p = &p[n..];
                    if !had_header
                        && !*damaged
                        && !Header::parse(kept).is_none_or(|h| plausible_header(&h))
                    {
                        // The length was not a DNS message's: lost sync.
                        stats.desyncs += 1;
                        stats.skipped((*got + p.len()) as u64);
                        self.tcp[d] = Framing::Lost;
                        p = &[];
                        continue;
                    }
                    if *got == *len {
                        self.finish_body(d, out, stats);
                    }
                }
                Framing::Lost => {
                    stats.skipped(p.len() as u64);
                    p = &[];
                }
            }
        }
        let uncaptured = seg.total_len.saturating_sub(seg.payload.len() as u64);
        if uncaptured > 0 {
            self.skip(d, uncaptured, false, out, stats);
        }
    }

    fn start_body(
        &mut self,
        d: usize,
        len: usize,
        span: MessageSpan,
        prefix_seen: bool,
        stats: &mut ParseStats,
    ) {
        if len < 12 {
            stats.desyncs += 1;
            self.tcp[d] = Framing::Lost;
            return;
        }
        self.body_seg[d] = self.seg_counter;
        self.tcp[d] = Framing::Body {
            len,
            got: 0,
            kept: Vec::new(),
            span,
            damaged: false,
            cut: false,
            prefix_seen,
        };
    }

    /// Direction d's message is complete: decoded unless bytes inside it were lost.
    fn finish_body(&mut self, d: usize, out: &mut Vec<L7Call>, stats: &mut ParseStats) {
        let Framing::Body {
            len,
            kept,
            span,
            damaged,
            cut,
            prefix_seen,
            ..
        } = std::mem::replace(&mut self.tcp[d], Framing::Length { first: None })
        else {
            return;
        };
        if damaged {
            stats.damaged_messages += 1;
            return;
        }
        let cut = cut || kept.len() < len;
        let dir = if d == Direction::Egress.index() {
            Direction::Egress
        } else {
            Direction::Ingress
        };
        let wire_len = len as u64 + if prefix_seen { 2 } else { 0 };
        self.on_message(&kept, wire_len, span, dir, None, cut, out, stats);
    }

    /// `n` bytes of direction d went by unseen: not captured (snaplen), or lost (`lost`).
    fn skip(
        &mut self,
        d: usize,
        n: u64,
        lost: bool,
        out: &mut Vec<L7Call>,
        stats: &mut ParseStats,
    ) {
        match &mut self.tcp[d] {
            Framing::Body {
                len,
                got,
                damaged,
                cut,
                ..
            } if n <= (*len - *got) as u64 => {
                *got += n as usize;
                if lost {
                    *damaged = true;
                } else {
                    *cut = true;
                }
                if *got == *len {
                    self.finish_body(d, out, stats);
                }
            }
            Framing::Lost => stats.skipped(n),
            other => {
                // The next length prefix went by unseen: boundaries are lost.
                if matches!(other, Framing::Body { .. }) {
                    stats.damaged_messages += 1;
                }
                stats.desyncs += 1;
                stats.skipped(n);
                self.tcp[d] = Framing::Lost;
            }
        }
    }
}

impl StreamParser for DnsParser {
    fn on_segment(&mut self, seg: &Segment<'_>, out: &mut Vec<L7Call>, stats: &mut ParseStats) {
        self.seg_counter += 1;
        self.expire(seg.end_ns, stats);
        match self.transport {
            Transport::Datagram => {
                let cut = (seg.payload.len() as u64) < seg.total_len;
                let mut span = MessageSpan::starting(seg);
                span.bytes = seg.total_len;
                if seg.payload.len() < MIN_MESSAGE.min(seg.total_len as usize) {
                    stats.damaged_messages += 1;
                    return;
                }
                self.on_message(
                    seg.payload,
                    seg.total_len,
                    span,
                    seg.dir,
                    seg.peer,
                    cut,
                    out,
                    stats,
                );
            }
            Transport::Stream => self.on_tcp(seg, out, stats),
        }
    }

    fn on_gap(&mut self, dir: Direction, len: Option<u64>, stats: &mut ParseStats) {
        // Datagrams stand alone: a lost one is simply not seen (its query stays unanswered).
        if self.transport == Transport::Stream {
            match len {
                // A gap never completes a message usefully: its calls would be damaged.
                Some(n) => self.skip(dir.index(), n, true, &mut Vec::new(), stats),
                None => {
                    if matches!(self.tcp[dir.index()], Framing::Body { .. }) {
                        stats.damaged_messages += 1;
                    }
                    if !matches!(self.tcp[dir.index()], Framing::Lost) {
                        stats.desyncs += 1;
                    }
                    self.tcp[dir.index()] = Framing::Lost;
                }
            }
        }
    }

    fn on_close(&mut self, _out: &mut Vec<L7Call>, stats: &mut ParseStats) {
        for framing in &self.tcp {
            if matches!(framing, Framing::Body { .. }) {
                // Ended inside a message: its rest never came.
                stats.damaged_messages += 1;
            }
        }
        stats.unanswered_requests += self.pending.len() as u64;
        self.pending.retain(|_| false);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const P1: &str = "127.0.0.1:40001";
    const P2: &str = "127.0.0.1:40002";

    /// A message: header flags, one question, A records in the answer, an optional OPT
    /// record (UDP size, extended rcode bits).
    fn msg(
        id: u16,
        flags: u16,
        name: &str,
        qtype: u16,
        answers: &[[u8; 4]],
        opt: Option<(u16, u8)>,
    ) -> Vec<u8> {
        let mut m = Vec::new();
        for v in [
            id,
            flags,
            1,
            answers.len() as u16,
            0,
            u16::from(opt.is_some()),
        ] {
            m.extend_from_slice(&v.to_be_bytes());
        }
        for label in name.split('.') {
            m.push(label.len() as u8);
            m.extend_from_slice(label.as_bytes());
        }
        m.push(0);
        m.extend_from_slice(&qtype.to_be_bytes());
        m.extend_from_slice(&1u16.to_be_bytes());
        for a in answers {
            // Owner: a pointer to the question's name.
            m.extend_from_slice(&[0xc0, 12, 0, 1, 0, 1, 0, 0, 0, 60, 0, 4]);
            m.extend_from_slice(a);
        }
        if let Some((size, ext)) = opt {
            m.push(0);
            m.extend_from_slice(&41u16.to_be_bytes());
            m.extend_from_slice(&size.to_be_bytes());
            m.extend_from_slice(&[ext, 0, 0, 0, 0, 0]);
        }
        m
    }

    const QUERY: u16 = 0x0100; // RD
    const ANSWER: u16 = 0x8180; // QR RD RA

    struct Run {
        p: DnsParser,
        out: Vec<L7Call>,
        stats: ParseStats,
    }

    impl Run {
        fn udp() -> Run {
            Run {
                p: DnsParser::new(&ParserConfig {
                    depth: ParseDepth::Full,
                    transport: Transport::Datagram,
                    keep_head: 256,
                }),
                out: Vec::new(),
                stats: ParseStats::default(),
            }
        }
        fn seg(&mut self, dir: Direction, m: &[u8], t_ms: u64, peer: &str) -> &mut Self {
            let seg = Segment {
                dir,
                payload: m,
                tail: &[],
                total_len: m.len() as u64,
                start_ns: t_ms * 1_000_000,
                end_ns: t_ms * 1_000_000 + 1000,
                peer: Some(peer.parse().unwrap()),
                pos: 0,
            };
            self.p.on_segment(&seg, &mut self.out, &mut self.stats);
            self
        }
    }

    #[test]
    fn detection_takes_queries_and_answers_in_both_framings_and_nothing_else() {
        let q = msg(7, QUERY, "example.com", 1, &[], Some((1232, 0)));
        let a = msg(7, ANSWER, "example.com", 1, &[[192, 0, 2, 1]], None);
        assert!(is_connection_start(&q) && is_connection_start(&a));
        let mut tcp = (q.len() as u16).to_be_bytes().to_vec();
        tcp.extend_from_slice(&q);
        assert!(is_connection_start(&tcp));
        // Cut inside the question; two questions; a query carrying an answer; text.
        assert!(!is_connection_start(&q[..20]));
        let mut two = q.clone();
        two[5] = 2;
        assert!(!is_connection_start(&two));
        let mut with_answer = q.clone();
        with_answer[7] = 1;
        assert!(!is_connection_start(&with_answer));
        assert!(!is_connection_start(
            b"GET / HTTP/1.1\r\nHost: example.com\r\n\r\n"
        ));
        assert_eq!(message_len(&q), Some(q.len()));
        assert_eq!(message_len(&a), Some(a.len()));
    }

    #[test]
    fn compression_pointers_that_loop_or_point_forward_end_the_name() {
        let mut m = msg(1, QUERY, "a.test", 1, &[], None);
        // The question's first label replaced by a pointer to itself, then one forward.
        m[12] = 0xc0;
        m[13] = 12;
        assert_eq!(read_name(&m, 12, &mut String::new()), None);
        m[13] = 40;
        assert_eq!(read_name(&m, 12, &mut String::new()), None);
        assert!(!is_connection_start(&m));
    }

    #[test]
    fn answers_pair_by_id_peer_and_question_in_any_order() {
        let mut r = Run::udp();
        r.seg(
            Direction::Egress,
            &msg(1, QUERY, "a.test", 1, &[], None),
            0,
            P1,
        )
        .seg(
            Direction::Egress,
            &msg(2, QUERY, "a.test", 28, &[], None),
            0,
            P1,
        )
        .seg(
            Direction::Egress,
            &msg(1, QUERY, "b.test", 1, &[], None),
            1,
            P2,
        )
        // Same id from the other peer, then another question under id 2: not answers.
        .seg(
            Direction::Ingress,
            &msg(1, ANSWER, "a.test", 1, &[], None),
            2,
            P2,
        )
        .seg(
            Direction::Ingress,
            &msg(2, ANSWER, "a.test", 1, &[], None),
            2,
            P1,
        )
        .seg(
            Direction::Ingress,
            &msg(2, ANSWER, "A.Test", 28, &[], None),
            3,
            P1,
        )
        .seg(
            Direction::Ingress,
            &msg(1, ANSWER, "b.test", 1, &[[192, 0, 2, 9]], None),
            4,
            P2,
        )
        .seg(
            Direction::Ingress,
            &msg(1, ANSWER, "a.test", 1, &[[192, 0, 2, 1]], None),
            5,
            P1,
        );
        let got: Vec<(&str, u64)> = r
            .out
            .iter()
            .map(|c| (c.resource.as_str(), c.resp.first_start_ns / 1_000_000))
            .collect();
        assert_eq!(got, [("AAAA a.test", 3), ("A b.test", 4), ("A a.test", 5)]);
        assert_eq!(r.stats.unmatched_responses, 2);
        let addrs = |i: usize| {
            r.out[i]
                .details
                .iter()
                .find(|(k, _)| *k == "addresses")
                .map(|(_, v)| v.clone())
        };
        assert_eq!(addrs(1).as_deref(), Some("192.0.2.9"));
        assert!(r
            .out
            .iter()
            .all(|c| c.request_dir == Direction::Egress && c.outcome == Outcome::Ok));
    }

    #[test]
    fn retries_timeouts_and_close_count_unanswered_queries_once() {
        let mut r = Run::udp();
        let q = msg(9, QUERY, "slow.test", 1, &[], None);
        // Sent, retried 5 s later with the same id, answered: one call, timed from the retry.
        r.seg(Direction::Egress, &q, 0, P1)
            .seg(Direction::Egress, &q, 5000, P1)
            .seg(
                Direction::Ingress,
                &msg(9, ANSWER, "slow.test", 1, &[], None),
                5001,
                P1,
            );
        assert_eq!(r.out.len(), 1);
        assert_eq!(r.out[0].req.first_start_ns, 5_000_000_000);
        assert_eq!(r.stats.unanswered_requests, 1);
        // Never answered: counted once a later message is 10 s newer, or at the close.
        r.seg(
            Direction::Egress,
            &msg(10, QUERY, "lost.test", 1, &[], None),
            6000,
            P1,
        )
        .seg(
            Direction::Egress,
            &msg(11, QUERY, "late.test", 1, &[], None),
            17000,
            P1,
        );
        assert_eq!(r.stats.unanswered_requests, 2);
        r.p.on_close(&mut r.out, &mut r.stats);
        assert_eq!(r.stats.unanswered_requests, 3);
        assert_eq!(r.out.len(), 1);
    }

    #[test]
    fn rcodes_are_named_with_their_extended_bits_and_blamed_right() {
        let mut r = Run::udp();
        for (id, rcode, ext) in [(1u16, 3u16, 0u8), (2, 2, 0), (3, 0, 1), (4, 5, 0)] {
            let name = format!("n{id}.test");
            r.seg(
                Direction::Ingress,
                &msg(id, QUERY, &name, 1, &[], Some((4096, 0))),
                0,
                P1,
            )
            .seg(
                Direction::Egress,
                &msg(id, ANSWER | rcode, &name, 1, &[], Some((1232, ext))),
                1,
                P1,
            );
        }
        let got: Vec<(&str, Outcome)> = r
            .out
            .iter()
            .map(|c| (c.status_text.as_deref().unwrap(), c.outcome))
            .collect();
        assert_eq!(
            got,
            [
                ("NXDOMAIN", Outcome::ClientError),
                ("SERVFAIL", Outcome::ServerError),
                ("BADVERS", Outcome::ClientError),
                ("REFUSED", Outcome::ClientError),
            ]
        );
        // Received queries: the server's side, with the size the query advertised.
        assert!(r.out.iter().all(|c| c.request_dir == Direction::Ingress));
        assert!(r.out[0]
            .details
            .contains(&("edns_udp_size", "4096".to_owned())));
        let head = String::from_utf8_lossy(&r.out[0].resp_head.bytes).into_owned();
        assert!(
            head.contains("NXDOMAIN") && head.contains("n1.test"),
            "{head}"
        );
    }
}
