//! Kafka: the binary protocol of brokers and clients, over a byte stream.
//!
//! Framing: every message is a 4-byte big-endian length and a body of that length, framed by
//! the framing core ([`super::framing`]); brokers and the Java clients read the length apart
//! from the body (a read of exactly 4 bytes), which the core's header buffer joins. The first
//! [`KEEP`] bytes of a body are kept and read; the rest is skipped by count.
//!
//! A request's header: api key, api version, correlation id, client id (a classic string),
//! then — in the API's flexible versions — tagged fields (header v2). A response's header is
//! its correlation id, then tagged fields when the request's version is flexible, except for
//! ApiVersions (its responses always use header v0, so a client can read them whatever it
//! asked). Which versions are flexible comes from a per-API table ([`wire`]); a version newer
//! than any ebtop knows is taken to stay flexible, and **no version is rejected**: an API or a
//! version ebtop cannot read still makes a call with its name (`api_<key>` for a key it does
//! not know), latency and sizes, its status `unknown` unless the error code sits where every
//! version puts it.
//!
//! Pairing is by correlation id ([`ById`]): a response names its request, so pipelined
//! requests (the Java producer keeps 5 in flight) pair whatever the order. A Produce with
//! `acks=0` gets no response: no call is made of it, counted in
//! [`ParseStats::unreplied_requests`].
//!
//! Calls: `method` is the API's name in snake case (`produce`, `fetch`, `join_group`),
//! `resource` the method and what it acts on (`produce orders`, `fetch orders,payments`,
//! `join_group my-group`, `sasl_handshake PLAIN`), `version` the API version. Topic ids (Produce
//! v13+, Fetch v13+, OffsetCommit v10+) are shown by name when a Metadata v10+ response on any
//! connection told it ([`TOPIC_NAMES`], bounded), else as Kafka's tools print ids. Status
//! (`status_text`): `ok`, or the first error code's name (`UNKNOWN_TOPIC_OR_PARTITION`)
//! among the response's top-level and per-partition codes; `unknown` (no status) when the
//! codes were not all seen. Record counts and codecs come from RecordBatch headers
//! (magic 2), never from decompressing. SASL tokens are never read nor kept.

mod wire;

use std::collections::HashMap;
use std::sync::Mutex;

use super::framing::{self, Framer, Header, Loss, St, Streams};
use super::matching::ById;
use super::{
    BenchFixture, CallKind, CapturedHead, L7Call, MetricNames, Outcome, ParseDepth, ParseStats,
    ParserConfig, Protocol, ProtocolDescriptor, ResourceKind, Segment, StreamParser,
};
use crate::event::Direction;
use crate::text::lossy_prefix;
use wire::Reader;

/// The protocol's entry in [`super::REGISTRY`].
pub const DESCRIPTOR: ProtocolDescriptor = ProtocolDescriptor {
    folder: "kafka",
    title: "Kafka",
    calls: &[CallKind {
        proto: Protocol::Kafka,
        name: "kafka",
        // Topic and group names are names, kept as they are (never folded like ids).
        resource: ResourceKind::RpcMethod,
        metrics: MetricNames {
            server: "messaging_server_operation_duration_seconds",
            client: "messaging_client_operation_duration_seconds",
            system: Some(("messaging_system", "kafka")),
            method: "messaging_operation_name",
            resource: "messaging_destination_name",
        },
    }],
    kernel_id: Some(9),
    datagrams: false,
    copy_whole: false,
    detect: is_connection_start,
    new_parser: |cfg| Box::new(KafkaParser::new(cfg)),
    benches: &[BenchFixture {
        file: "java_consume.client.seg",
        what: "parse a Java consumer's fetch session",
        proto: Protocol::Kafka,
        calls: 7,
    }],
};

/// Bytes of a message's body kept and read: headers, topic names, the first RecordBatch
/// headers. Beyond them sizes stay exact; counts that need the rest are left unknown.
const KEEP: usize = 16 * 1024;
/// Largest message believed (brokers refuse requests over `socket.request.max.bytes`, 100 MiB
/// by default; a Fetch response is bounded by the client's `fetch.max.bytes`).
const MAX_MESSAGE: u64 = 1 << 30;
/// Requests awaiting responses per connection (the Java clients keep at most 5 in flight).
const MAX_PENDING: usize = 1024;
/// Topics named per call (the others counted in the `topics` detail).
const MAX_TOPICS: usize = 4;
/// Kafka's longest topic name.
const MAX_NAME: usize = 249;
/// Topic ids remembered by name, for all connections together.
const MAX_TOPIC_IDS: usize = 4096;
/// Bytes of a request's header kept for a person to read (never its body: SASL tokens).
const MAX_HEAD: usize = 64;

/// Topic names by topic id, learnt from Metadata v10+ responses on any connection (a client's
/// Produce v13 goes on another connection than the Metadata that named its topic). Bounded:
/// when full, an entry is dropped for each new one.
static TOPIC_NAMES: Mutex<Option<HashMap<[u8; 16], Box<str>>>> = Mutex::new(None);

fn remember_topic(id: [u8; 16], name: &str) {
    if id == [0; 16] || name.is_empty() {
        return;
    }
    let mut g = TOPIC_NAMES.lock().unwrap_or_else(|e| e.into_inner());
    let map = g.get_or_insert_with(HashMap::new);
    if map.get(&id).is_some_and(|n| &**n == name) {
        return;
    }
    if map.len() >= MAX_TOPIC_IDS && !map.contains_key(&id) {
        if let Some(old) = map.keys().next().copied() {
            map.remove(&old);
        }
    }
    map.insert(id, name.into());
}

fn topic_name(id: &[u8; 16]) -> Option<String> {
    let g = TOPIC_NAMES.lock().unwrap_or_else(|e| e.into_inner());
    g.as_ref()?.get(id).map(|n| n.to_string())
}

/// A topic as a message names it.
#[derive(Debug, Clone, PartialEq, Eq)]
enum TopicRef {
    Name(String),
    Id([u8; 16]),
}

impl TopicRef {
    fn shown(&self) -> String {
        match self {
            TopicRef::Name(n) => n.clone(),
            TopicRef::Id(id) => topic_name(id).unwrap_or_else(|| wire::topic_id_text(id)),
        }
    }
}

/// The topics a message names: the first [`MAX_TOPICS`], and how many in all.
#[derive(Debug, Default, Clone)]
struct Topics {
    list: Vec<TopicRef>,
    total: u64,
}

impl Topics {
    fn push(&mut self, t: TopicRef) {
        self.total += 1;
        if self.list.len() < MAX_TOPICS && !self.list.contains(&t) {
            self.list.push(t);
        }
    }

    fn name(r: &mut Reader) -> Option<TopicRef> {
        let n = r.string()?.unwrap_or_default();
        Some(TopicRef::Name(lossy_prefix(n, MAX_NAME)))
    }
}

/// What a request says.
#[derive(Debug, Default)]
struct Req {
    client_id: Option<String>,
    topics: Topics,
    /// The group, coordinator key or SASL mechanism the request names.
    subject: Option<String>,
    acks: Option<i16>,
    max_wait_ms: Option<i32>,
    /// Produce: partitions, records and codec of the whole request (walked to its end).
    partitions: Option<u64>,
    records: Option<u64>,
    codec: Option<&'static str>,
}

/// What a response says.
#[derive(Debug, Default)]
struct Resp {
    topics: Topics,
    /// The first non-zero error code.
    first_error: Option<i16>,
    /// Every error code of the response was read (else, with none non-zero, the status is
    /// unknown).
    all_codes: bool,
    /// Fetch: record bytes and records (complete batches) of the whole response.
    record_bytes: Option<u64>,
    records: Option<u64>,
}

impl Resp {
    fn code(&mut self, c: i16) {
        if c != 0 && self.first_error.is_none() {
            self.first_error = Some(c);
        }
    }
}

/// A request awaiting its response.
#[derive(Debug)]
struct Pending {
    api_key: i16,
    version: i16,
    /// Its version is flexible (None: an API ebtop does not know).
    flexible: Option<bool>,
    dir: Direction,
    req: super::MessageSpan,
    truncated: bool,
    info: Req,
    head: Vec<u8>,
}

/// Per-connection state.
pub struct KafkaParser {
    streams: Streams<(), ()>,
    depth: ParseDepth,
    keep_head: usize,
    /// The direction (index) requests go in, once a message showed it.
    request_dir: Option<usize>,
    /// The body length of the message being read, per direction.
    body_len: [u64; 2],
    pending: ById<Pending>,
}

impl KafkaParser {
    pub fn new(cfg: &ParserConfig) -> Self {
        KafkaParser {
            streams: Streams::new(St::Lost, 4),
            depth: cfg.depth,
            keep_head: cfg.keep_head,
            request_dir: None,
            body_len: [0; 2],
            pending: ById::new(MAX_PENDING),
        }
    }

    fn on_request(&mut self, d: usize, body: &[u8], complete: bool, stats: &mut ParseStats) {
        let (span, truncated) = self.streams.dirs[d].acc.take();
        let Some(h) = request_header(body) else {
            // Too little of it seen to pair it.
            stats.damaged_messages += 1;
            return;
        };
        let mut r = Reader::new(body, h.flexible == Some(true));
        r.pos = h.body_at;
        let mut info = Req {
            client_id: h.client_id,
            ..Req::default()
        };
        if h.flexible.is_some() {
            let _ = read_request(&mut r, h.api_key, h.version, complete, &mut info);
        }
        if h.api_key == 0 && info.acks == Some(0) {
            // acks=0: the broker sends nothing back.
            stats.unreplied_requests += 1;
            return;
        }
        let head = if self.keep_head > 0 {
            body[..h.body_at.min(MAX_HEAD).min(self.keep_head)].to_vec()
        } else {
            Vec::new()
        };
        self.pending.insert(
            h.correlation_id as u32 as u64,
            Pending {
                api_key: h.api_key,
                version: h.version,
                flexible: h.flexible,
                dir: if d == 0 {
                    Direction::Egress
                } else {
                    Direction::Ingress
                },
                req: span,
                truncated,
                info,
                head,
            },
        );
        if self.pending.evicted > 0 {
            stats.unanswered_requests += self.pending.evicted;
            self.pending.evicted = 0;
        }
    }

    fn on_response(
        &mut self,
        d: usize,
        body: &[u8],
        complete: bool,
        out: &mut Vec<L7Call>,
        stats: &mut ParseStats,
    ) {
        let (span, truncated) = self.streams.dirs[d].acc.take();
        let Some(corr) = body.get(..4) else {
            stats.damaged_messages += 1;
            return;
        };
        let corr = u32::from_be_bytes([corr[0], corr[1], corr[2], corr[3]]) as u64;
        let Some(p) = self.pending.take(corr) else {
            stats.unmatched_responses += 1;
            return;
        };
        let mut resp = Resp::default();
        if let Some(flexible) = p.flexible {
            // ApiVersions responses keep header v0 (no tagged fields) in every version.
            let mut r = Reader::new(body, flexible);
            r.pos = 4;
            if !(flexible && p.api_key != 18) || r.tags().is_some() {
                let _ = read_response(&mut r, p.api_key, p.version, complete, &mut resp);
            }
        }
        out.push(self.call(p, resp, span, truncated, body));
    }

    fn call(
        &self,
        p: Pending,
        resp: Resp,
        span: super::MessageSpan,
        truncated: bool,
        body: &[u8],
    ) -> L7Call {
        let method = match wire::api_name(p.api_key) {
            Some(n) => n.to_owned(),
            None => format!("api_{}", p.api_key),
        };
        let mut resource = method.clone();
        let topics = if p.info.topics.list.is_empty() {
            &resp.topics
        } else {
            &p.info.topics
        };
        if !topics.list.is_empty() {
            resource.push(' ');
            for (i, t) in topics.list.iter().enumerate() {
                if i > 0 {
                    resource.push(',');
                }
                resource.push_str(&t.shown());
            }
        } else if let Some(s) = &p.info.subject {
            resource.push(' ');
            resource.push_str(s);
        }
        let (status_text, outcome) = match resp.first_error {
            Some(c) => (
                Some(wire::error_name(c)),
                if wire::is_client_error(c) {
                    Outcome::ClientError
                } else {
                    Outcome::ServerError
                },
            ),
            None if resp.all_codes => (Some("ok".to_owned()), Outcome::Ok),
            None => (None, Outcome::Unknown),
        };
        let mut details = Vec::new();
        if self.depth == ParseDepth::Full {
            if let Some(c) = &p.info.client_id {
                details.push(("client_id", c.clone()));
            }
            if topics.total > topics.list.len() as u64 {
                details.push(("topics", topics.total.to_string()));
            }
            if let Some(a) = p.info.acks {
                details.push(("acks", a.to_string()));
            }
            if let Some(n) = p.info.partitions {
                details.push(("partitions", n.to_string()));
            }
            if let Some(n) = p.info.records.or(resp.records) {
                details.push(("records", n.to_string()));
            }
            if let Some(c) = p.info.codec {
                details.push(("codec", c.to_owned()));
            }
            if let Some(n) = resp.record_bytes {
                details.push(("record_bytes", n.to_string()));
            }
            if let Some(w) = p.info.max_wait_ms {
                details.push(("max_wait_ms", w.to_string()));
            }
        }
        let resp_head = if self.keep_head > 0 {
            body[..body.len().min(4)].to_vec()
        } else {
            Vec::new()
        };
        L7Call {
            proto: Protocol::Kafka,
            request_dir: p.dir,
            method,
            resource,
            version: wire::version_text(p.version),
            status: None,
            status_text,
            outcome,
            req_head: CapturedHead::redacted(p.head, p.req.bytes),
            resp_head: CapturedHead::redacted(resp_head, span.bytes),
            req: p.req,
            resp: span,
            truncated: p.truncated || truncated,
            end_inferred: false,
            details,
        }
    }
}

/// A request's header as read.
struct RequestHeader {
    api_key: i16,
    version: i16,
    correlation_id: i32,
    client_id: Option<String>,
    flexible: Option<bool>,
    /// Where the request's body starts (after the header's tagged fields).
    body_at: usize,
}

fn request_header(body: &[u8]) -> Option<RequestHeader> {
    let mut r = Reader::new(body, false);
    let api_key = r.i16()?;
    let version = r.i16()?;
    let correlation_id = r.i32()?;
    let flexible = wire::flexible(api_key, version);
    let mut h = RequestHeader {
        api_key,
        version,
        correlation_id,
        client_id: None,
        flexible,
        body_at: r.pos,
    };
    // ControlledShutdown v0 alone has no client id (header v0); every other request has one.
    if api_key == 7 && version == 0 {
        return Some(h);
    }
    let Some(Some(cid)) = r.classic_string() else {
        return Some(h);
    };
    h.client_id = Some(lossy_prefix(cid, 256));
    h.body_at = r.pos;
    if flexible == Some(true) {
        r.flexible = true;
        if r.tags().is_some() {
            h.body_at = r.pos;
        } else {
            // The body's start is not known.
            h.flexible = None;
        }
    }
    Some(h)
}

/// The highest version of each API whose body ebtop walks field by field (Kafka 4.4's): a
/// later one may have moved its fields, so its topics, counts and per-partition codes are
/// not read (its status `unknown`), never misread. The APIs read only up to a first field
/// that every version keeps in place (a group name, an error code after the throttle time)
/// are read in every version.
fn walked_version_known(api: i16, v: i16) -> bool {
    let max = match api {
        0 => 13,
        1 => 18,
        2 => 11,
        3 => 13,
        8 => 10,
        9 => 10,
        10 => 6,
        _ => return true,
    };
    v <= max
}

/// Reads a request's body (what ebtop shows of it) into `info`; None where it ended early.
fn read_request(r: &mut Reader, api: i16, v: i16, complete: bool, info: &mut Req) -> Option<()> {
    // A group's name comes first in every version of offset_commit and offset_fetch.
    if !walked_version_known(api, v) && !matches!(api, 8 | 9) {
        return None;
    }
    match api {
        0 => {
            if v >= 3 {
                r.string()?; // transactional_id
            }
            info.acks = Some(r.i16()?);
            r.i32()?; // timeout_ms
            let n = r.array()?.unwrap_or(0);
            let (mut partitions, mut records, mut codec) = (0u64, 0u64, None);
            for _ in 0..n {
                info.topics.push(if v >= 13 {
                    TopicRef::Id(r.uuid()?)
                } else {
                    Topics::name(r)?
                });
                let np = r.array()?.unwrap_or(0);
                partitions += np as u64;
                for _ in 0..np {
                    r.i32()?; // index
                    if let Some(len) = r.bytes_len()? {
                        let (count, c) = batches(r.take(len)?, false)?;
                        records += count;
                        codec = match (codec, c) {
                            (None, c) => c,
                            (Some(a), Some(b)) if a != b => Some("mixed"),
                            (a, _) => a,
                        };
                    }
                    r.tags()?;
                }
                r.tags()?;
            }
            if complete {
                info.partitions = Some(partitions);
                info.records = Some(records);
                info.codec = codec;
            }
        }
        1 => {
            if v <= 14 {
                r.i32()?; // replica_id
            }
            info.max_wait_ms = Some(r.i32()?);
            r.i32()?; // min_bytes
            if v >= 3 {
                r.i32()?; // max_bytes
            }
            if v >= 4 {
                r.i8()?; // isolation_level
            }
            if v >= 7 {
                r.skip(8)?; // session id and epoch
            }
            let n = r.array()?.unwrap_or(0);
            for _ in 0..n {
                info.topics.push(if v >= 13 {
                    TopicRef::Id(r.uuid()?)
                } else {
                    Topics::name(r)?
                });
                let np = r.array()?.unwrap_or(0);
                for _ in 0..np {
                    // partition, current_leader_epoch (9+), fetch_offset, last_fetched_epoch
                    // (12+), log_start_offset (5+), partition_max_bytes
                    let fixed = 4
                        + if v >= 9 { 4 } else { 0 }
                        + 8
                        + if v >= 12 { 4 } else { 0 }
                        + if v >= 5 { 8 } else { 0 }
                        + 4;
                    r.skip(fixed)?;
                    r.tags()?;
                }
                r.tags()?;
            }
        }
        2 => {
            r.i32()?; // replica_id
            if v >= 2 {
                r.i8()?;
            }
            let n = r.array()?.unwrap_or(0);
            for _ in 0..n {
                info.topics.push(Topics::name(r)?);
                let np = r.array()?.unwrap_or(0);
                for _ in 0..np {
                    let fixed = 4 + if v >= 4 { 4 } else { 0 } + 8 + if v == 0 { 4 } else { 0 };
                    r.skip(fixed)?;
                    r.tags()?;
                }
                r.tags()?;
            }
        }
        3 => {
            let n = r.array()?.unwrap_or(0);
            for _ in 0..n {
                if v >= 10 {
                    let id = r.uuid()?;
                    match r.string()? {
                        Some(name) => info
                            .topics
                            .push(TopicRef::Name(lossy_prefix(name, MAX_NAME))),
                        None => info.topics.push(TopicRef::Id(id)),
                    }
                } else {
                    info.topics.push(Topics::name(r)?);
                }
                r.tags()?;
            }
        }
        // Requests that name their group first: offset_commit, offset_fetch (v0–7),
        // join_group, heartbeat, leave_group, sync_group, consumer_group_heartbeat,
        // share_group_heartbeat, streams_group_heartbeat.
        8 | 11 | 12 | 13 | 14 | 68 | 76 | 88 => info.subject = name(r),
        9 if v <= 7 => info.subject = name(r),
        // v8+: a list of groups; the first is shown.
        9 if r.array()?.unwrap_or(0) > 0 => info.subject = name(r),
        10 => {
            if v <= 3 {
                info.subject = name(r);
            } else {
                r.i8()?; // key_type
                if r.array()?.unwrap_or(0) > 0 {
                    info.subject = name(r);
                }
            }
        }
        // The mechanism; never the tokens of sasl_authenticate.
        17 => info.subject = name(r),
        _ => {}
    }
    Some(())
}

/// A string field as shown (None: null or not there).
fn name(r: &mut Reader) -> Option<String> {
    r.string().flatten().map(|s| lossy_prefix(s, MAX_NAME))
}

/// Record counts of the RecordBatches in `records`, and their codec (None: no batch; several
/// codecs: `mixed`). `trailing_cut`: a last batch cut short is no error (Fetch responses end
/// so) and is not counted; otherwise the bytes must hold whole batches exactly. None when they
/// are not RecordBatches (magic 0/1 message sets).
fn batches(records: &[u8], trailing_cut: bool) -> Option<(u64, Option<&'static str>)> {
    let (mut off, mut count, mut codec) = (0usize, 0u64, None);
    while off < records.len() {
        let b = &records[off..];
        if b.len() < 61 {
            return trailing_cut.then_some((count, codec));
        }
        let batch_len = i32::from_be_bytes([b[8], b[9], b[10], b[11]]);
        if b[16] != 2 || batch_len < 49 {
            return None;
        }
        let end = 12 + batch_len as usize;
        if end > b.len() {
            return trailing_cut.then_some((count, codec));
        }
        let n = i32::from_be_bytes([b[57], b[58], b[59], b[60]]);
        count += n.max(0) as u64;
        let c = wire::codec_name(i16::from_be_bytes([b[21], b[22]]));
        codec = match codec {
            None => Some(c),
            Some(a) if a != c => Some("mixed"),
            a => a,
        };
        off += end;
    }
    Some((count, codec))
}

/// Reads a response's body (after its header) into `resp`; None where it ended early.
fn read_response(r: &mut Reader, api: i16, v: i16, complete: bool, resp: &mut Resp) -> Option<()> {
    if !walked_version_known(api, v) {
        return None;
    }
    match api {
        0 => {
            let n = r.array()?.unwrap_or(0);
            for i in 0..n {
                resp.topics.push(if v >= 13 {
                    TopicRef::Id(r.uuid()?)
                } else {
                    Topics::name(r)?
                });
                let np = r.array()?.unwrap_or(0);
                for j in 0..np {
                    r.i32()?;
                    resp.code(r.i16()?);
                    resp.all_codes = i + 1 == n && j + 1 == np;
                    r.skip(8 + if v >= 2 { 8 } else { 0 } + if v >= 5 { 8 } else { 0 })?;
                    if v >= 8 {
                        let ne = r.array()?.unwrap_or(0);
                        for _ in 0..ne {
                            r.i32()?;
                            r.string()?;
                            r.tags()?;
                        }
                        r.string()?;
                    }
                    r.tags()?;
                }
                if np == 0 {
                    resp.all_codes = i + 1 == n;
                }
                r.tags()?;
            }
            if n == 0 {
                resp.all_codes = true;
            }
        }
        1 => {
            if v >= 1 {
                r.i32()?;
            }
            if v >= 7 {
                resp.code(r.i16()?);
                r.i32()?; // session_id
            }
            let n = r.array()?.unwrap_or(0);
            let (mut bytes, mut records) = (0u64, 0u64);
            for i in 0..n {
                resp.topics.push(if v >= 13 {
                    TopicRef::Id(r.uuid()?)
                } else {
                    Topics::name(r)?
                });
                let np = r.array()?.unwrap_or(0);
                for j in 0..np {
                    r.i32()?;
                    resp.code(r.i16()?);
                    resp.all_codes = i + 1 == n && j + 1 == np;
                    r.skip(8 + if v >= 4 { 8 } else { 0 } + if v >= 5 { 8 } else { 0 })?;
                    if v >= 4 {
                        let na = r.array()?.unwrap_or(0);
                        for _ in 0..na {
                            r.skip(16)?;
                            r.tags()?;
                        }
                    }
                    if v >= 11 {
                        r.i32()?;
                    }
                    if let Some(len) = r.bytes_len()? {
                        bytes += len as u64;
                        records += batches(r.take(len)?, true)?.0;
                    }
                    r.tags()?;
                }
                if np == 0 {
                    resp.all_codes = i + 1 == n;
                }
                r.tags()?;
            }
            if n == 0 {
                resp.all_codes = true;
            }
            if complete {
                resp.record_bytes = Some(bytes);
                resp.records = Some(records);
            }
        }
        2 => {
            if v >= 2 {
                r.i32()?;
            }
            let n = r.array()?.unwrap_or(0);
            for _ in 0..n {
                resp.topics.push(Topics::name(r)?);
                let np = r.array()?.unwrap_or(0);
                for _ in 0..np {
                    r.i32()?;
                    resp.code(r.i16()?);
                    if v == 0 {
                        let k = r.array()?.unwrap_or(0);
                        r.skip(k.checked_mul(8)?)?;
                    } else {
                        r.skip(16 + if v >= 4 { 4 } else { 0 })?;
                    }
                    r.tags()?;
                }
                r.tags()?;
            }
            resp.all_codes = true;
        }
        3 => {
            if v >= 3 {
                r.i32()?;
            }
            let nb = r.array()?.unwrap_or(0);
            for _ in 0..nb {
                r.i32()?;
                r.string()?;
                r.i32()?;
                if v >= 1 {
                    r.string()?;
                }
                r.tags()?;
            }
            if v >= 2 {
                r.string()?;
            }
            if v >= 1 {
                r.i32()?;
            }
            let n = r.array()?.unwrap_or(0);
            for _ in 0..n {
                resp.code(r.i16()?);
                let name = r.string()?.map(|s| lossy_prefix(s, MAX_NAME));
                let id = if v >= 10 { Some(r.uuid()?) } else { None };
                if let (Some(name), Some(id)) = (&name, id) {
                    remember_topic(id, name);
                }
                if let Some(name) = name {
                    resp.topics.push(TopicRef::Name(name));
                }
                if v >= 1 {
                    r.i8()?;
                }
                let np = r.array()?.unwrap_or(0);
                for _ in 0..np {
                    resp.code(r.i16()?);
                    r.skip(8 + if v >= 7 { 4 } else { 0 })?;
                    let arrays = if v >= 5 { 3 } else { 2 };
                    for _ in 0..arrays {
                        let k = r.array()?.unwrap_or(0);
                        r.skip(k.checked_mul(4)?)?;
                    }
                    r.tags()?;
                }
                if v >= 8 {
                    r.i32()?;
                }
                r.tags()?;
            }
            resp.all_codes = true;
        }
        8 => {
            if v >= 3 {
                r.i32()?;
            }
            let n = r.array()?.unwrap_or(0);
            for _ in 0..n {
                if v >= 10 {
                    r.uuid()?;
                } else {
                    r.string()?;
                }
                let np = r.array()?.unwrap_or(0);
                for _ in 0..np {
                    r.i32()?;
                    resp.code(r.i16()?);
                    r.tags()?;
                }
                r.tags()?;
            }
            resp.all_codes = true;
        }
        9 => {
            if v >= 8 {
                r.i32()?;
                let ng = r.array()?.unwrap_or(0);
                for _ in 0..ng {
                    r.string()?;
                    offset_fetch_topics(r, v, resp)?;
                    resp.code(r.i16()?);
                    r.tags()?;
                }
            } else {
                if v >= 3 {
                    r.i32()?;
                }
                offset_fetch_topics(r, v, resp)?;
                if v >= 2 {
                    resp.code(r.i16()?);
                }
            }
            resp.all_codes = true;
        }
        10 if v >= 4 => {
            r.i32()?;
            let n = r.array()?.unwrap_or(0);
            for _ in 0..n {
                r.string()?;
                r.i32()?;
                r.string()?;
                r.i32()?;
                resp.code(r.i16()?);
                r.string()?;
                r.tags()?;
            }
            resp.all_codes = true;
        }
        _ => {
            let Some(throttle_since) = error_after_throttle(api) else {
                return Some(());
            };
            if throttle_since.is_some_and(|s| v >= s) {
                r.i32()?;
            }
            resp.code(r.i16()?);
            resp.all_codes = true;
        }
    }
    let _ = complete;
    Some(())
}

fn offset_fetch_topics(r: &mut Reader, v: i16, resp: &mut Resp) -> Option<()> {
    let n = r.array()?.unwrap_or(0);
    for _ in 0..n {
        if v >= 10 {
            r.uuid()?;
        } else {
            r.string()?;
        }
        let np = r.array()?.unwrap_or(0);
        for _ in 0..np {
            r.skip(4 + 8 + if v >= 5 { 4 } else { 0 })?;
            r.string()?;
            resp.code(r.i16()?);
            r.tags()?;
        }
        r.tags()?;
    }
    Some(())
}

/// APIs whose response starts with its error code, after a throttle time from some version
/// on: Some(None) when never after one, Some(Some(v)) from version v, None for the others.
fn error_after_throttle(api: i16) -> Option<Option<i16>> {
    Some(match api {
        // find_coordinator v0–3, join_group, heartbeat, leave_group, sync_group, list_groups
        10 | 12 | 13 | 14 | 16 => Some(1),
        11 => Some(2),
        // sasl_handshake, api_versions, sasl_authenticate, vote, begin/end_quorum_epoch,
        // describe_quorum: the error code first.
        17 | 18 | 36 | 52 | 53 | 54 | 55 => None,
        // init_producer_id, add_offsets_to_txn, end_txn, list/alter_partition_reassignments,
        // describe_user_scram_credentials, alter_partition, update_features, fetch_snapshot,
        // describe_cluster, broker_registration, broker_heartbeat, unregister_broker,
        // allocate_producer_ids, the group heartbeats, controller_registration, telemetry.
        22 | 25 | 26 | 45 | 46 | 50 | 56 | 57 | 59 | 60 | 62 | 63 | 64 | 67 | 68 | 70 | 71 | 72
        | 76 | 88 => Some(0),
        _ => return None,
    })
}

/// Could `p` (a connection's first payload: the 4-byte length, then a request header) be a
/// Kafka request? The kernel's rule (kafka/infer.h) on the same bytes: a length alone (a
/// read of exactly 4 bytes: brokers read it apart) of 10 bytes to 4 KiB, or a length of 8
/// bytes to 16 MiB and a header
/// with a known API key, a version under 64, a correlation id ≥ 0 and a client id that is
/// null or printable.
pub fn is_connection_start(p: &[u8]) -> bool {
    p.first() == Some(&0) && request_start(p, 4096)
}

/// Does `p` start a request (a length and a plausible header), or is it a length alone under
/// `alone_max`?
fn request_start(p: &[u8], alone_max: u32) -> bool {
    if p.len() < 4 {
        return false;
    }
    let len = u32::from_be_bytes([p[0], p[1], p[2], p[3]]);
    if len < 8 || len as u64 > MAX_MESSAGE {
        return false;
    }
    if p.len() == 4 {
        // A connection's first request (ApiVersions, SaslHandshake, Metadata) is small.
        return (10..alone_max).contains(&len);
    }
    if p.len() < 14 {
        return false;
    }
    let api = i16::from_be_bytes([p[4], p[5]]);
    let version = i16::from_be_bytes([p[6], p[7]]);
    if !(0..=wire::MAX_KNOWN_API).contains(&api) || !(0..64).contains(&version) || p[8] >= 0x80 {
        return false;
    }
    let cid = i16::from_be_bytes([p[12], p[13]]);
    if cid == -1 {
        return true;
    }
    if !(1..=255).contains(&cid) || 10 + cid as u32 > len {
        return false;
    }
    p.len() == 14 || p[14].is_ascii_graphic()
}

impl Framer for KafkaParser {
    type Kind = ();
    type State = ();
    const MIN_HEADER: usize = 4;
    const FINISH_BODY_BEFORE_UNSEEN: bool = true;

    fn streams(&mut self) -> &mut Streams<(), ()> {
        &mut self.streams
    }

    fn streams_ref(&self) -> &Streams<(), ()> {
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
        d: usize,
        hdr: &[u8],
        _out: &mut Vec<L7Call>,
        _stats: &mut ParseStats,
    ) -> Header<()> {
        let Some(l) = hdr.get(..4) else {
            return Header::NeedMore(4);
        };
        let len = i32::from_be_bytes([l[0], l[1], l[2], l[3]]);
        // The smallest message is a response of a correlation id alone.
        if len < 4 || len as u64 > MAX_MESSAGE {
            return Header::NotAFrame;
        }
        self.body_len[d] = len as u64;
        self.streams.dirs[d].start_body(KEEP.min(len as usize));
        Header::Frame {
            body_len: len as u64,
            kind: (),
            more: false,
        }
    }

    fn line(
        &mut self,
        _d: usize,
        _line: &[u8],
        _out: &mut Vec<L7Call>,
        _stats: &mut ParseStats,
    ) -> Header<()> {
        Header::NotAFrame
    }

    fn frame_done(
        &mut self,
        d: usize,
        _kind: (),
        body: &[u8],
        out: &mut Vec<L7Call>,
        stats: &mut ParseStats,
    ) {
        let complete = body.len() as u64 == self.body_len[d];
        if self.request_dir.is_none() {
            let mut start = (self.body_len[d] as u32).to_be_bytes().to_vec();
            start.extend_from_slice(&body[..body.len().min(11)]);
            self.request_dir = Some(if is_connection_start(&start) {
                d
            } else {
                1 - d
            });
        }
        if self.request_dir == Some(d) {
            self.on_request(d, body, complete, stats);
        } else {
            self.on_response(d, body, complete, out, stats);
        }
    }

    fn resync(&self, d: usize, p: &[u8]) -> bool {
        if p.len() < 4 {
            return false;
        }
        let len = u32::from_be_bytes([p[0], p[1], p[2], p[3]]) as u64;
        if !(4..=MAX_MESSAGE).contains(&len) {
            return false;
        }
        match self.request_dir {
            // Past a connection's start, a length read alone may be a large request's.
            Some(rd) if rd == d => request_start(p, MAX_MESSAGE as u32),
            // A response: a correlation id ≥ 0.
            Some(_) => p.len() < 5 || p[4] < 0x80,
            // Roles not known yet (a connection older than ebtop): a length read alone of any
            // size also picks up (brokers and the Java clients read lengths apart, and a
            // saturated producer's batches are far above 4 KiB); the message it frames then
            // tells which way requests go (`frame_done`).
            None => is_connection_start(p) || (p.len() == 4 && len >= 8),
        }
    }

    fn lost(&mut self, _d: usize, _why: Loss, _stats: &mut ParseStats) {
        // Pairing is by id: requests still pending may yet get their responses.
    }
}

impl StreamParser for KafkaParser {
    fn on_segment(&mut self, seg: &Segment<'_>, out: &mut Vec<L7Call>, stats: &mut ParseStats) {
        framing::on_segment(self, seg, out, stats);
    }

    fn on_gap(&mut self, dir: Direction, len: Option<u64>, stats: &mut ParseStats) {
        framing::on_gap(self, dir, len, stats);
    }

    fn on_close(&mut self, _out: &mut Vec<L7Call>, stats: &mut ParseStats) {
        stats.unanswered_requests += self.pending.len() as u64;
        self.pending.retain(|_| false);
    }
}

#[cfg(test)]
mod fixture_tests;
#[cfg(test)]
mod tests;
