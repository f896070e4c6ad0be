//! Protocol parsers: one folder per protocol, all behind [`StreamParser`].
//!
//! The connection tracker hands a parser each syscall's bytes in order per direction
//! ([`Segment`]), the bytes it did not see ([`StreamParser::on_gap`]), and the connection's end.
//! The parser frames messages, pairs requests with responses — in order (HTTP/1, Redis, Memcached,
//! PostgreSQL, MySQL), by id (DNS, Kafka: see [`matching`]) or by stream (HTTP/2) — and emits
//! [`L7Call`]s.
//!
//! A protocol is its folder, `src/protocols/<folder>/`: the parser (`mod.rs`) with its
//! [`ProtocolDescriptor`], the kernel's recognition rule (`infer.h`, gathered by build.rs into
//! one generated header in [`REGISTRY`] order), fixtures of real traffic (`fixtures/`) and the
//! tests that run them (`fixture_tests.rs`). [`REGISTRY`] lists the descriptors; everything
//! else that needs the list of protocols (`--proto` names, resource kinds, the kernel's
//! recognition order and ids, the fuzzers' seeds, the benchmarks, the docs' test) reads it from
//! there. docs/architecture.md walks through adding one.

#[cfg(test)]
mod desync_tests;
pub mod dns;
#[cfg(test)]
pub(crate) mod fixture_support;
pub mod framing;
#[doc(hidden)]
#[cfg(any(test, feature = "test-support"))]
pub mod fuzzing;
pub mod http1;
pub mod http2;
pub mod kafka;
pub mod matching;
pub mod memcached;
pub mod mongodb;
pub mod mysql;
pub mod outcome;
pub mod plugin;
pub mod postgres;
pub mod redact;
pub mod redis;
#[cfg(test)]
mod registry_tests;
#[cfg(test)]
pub(crate) mod test_driver;
pub mod trace_context;

use crate::event::Direction;

/// Every protocol ebtop knows, tried in this order on a connection's first bytes (by the
/// kernel's rules and by user space's `detect`): a new protocol's folder and one line here.
pub const REGISTRY: &[ProtocolDescriptor] = &[
    http1::DESCRIPTOR,
    redis::DESCRIPTOR,
    memcached::DESCRIPTOR,
    dns::DESCRIPTOR,
    postgres::DESCRIPTOR,
    mysql::DESCRIPTOR,
    // After PostgreSQL and MySQL: a StartupMessage may pass its header rule.
    kafka::DESCRIPTOR,
    mongodb::DESCRIPTOR,
    // Last: its mid-connection frame rule is the loosest.
    http2::DESCRIPTOR,
    // Calls of protocols parsed by Wasm plugins, which take connections by port: never
    // detected from bytes.
    plugin::DESCRIPTOR,
];

/// What the rest of ebtop knows of one protocol: all of it is here.
#[derive(Clone, Copy)]
pub struct ProtocolDescriptor {
    /// Its folder under src/protocols/ (parser, kernel rule `infer.h`, `fixtures/`).
    pub folder: &'static str,
    /// Its name as the docs write it ("PostgreSQL").
    pub title: &'static str,
    /// The kinds of calls its parser makes (HTTP/2's: `http2` and `grpc`).
    pub calls: &'static [CallKind],
    /// The kernel's id for its connections (`enum ebtop_l7_proto`, the `id=` of its
    /// `infer.h`), None when the kernel has no rule for it.
    pub kernel_id: Option<u8>,
    /// Whether it runs over datagram sockets too (DNS), not only streams.
    pub datagrams: bool,
    /// Whether the kernel copies its connections' stream sends/receives whole (up to
    /// `EBTOP_DEEP_MAX`, 256 KiB) rather than a head and a tail: pipelines put many small
    /// messages in one syscall, and a reply that names no request cannot be paired once a
    /// request may have been hidden past the snaplen (docs/architecture.md, "Copied whole").
    pub copy_whole: bool,
    /// Does this payload (the first a connection shows in some direction) start this protocol?
    pub detect: fn(&[u8]) -> bool,
    pub new_parser: fn(&ParserConfig) -> Box<dyn StreamParser>,
    /// Its fixtures (`<folder>/fixtures/*.seg`) that benches/parsers.rs times.
    pub benches: &'static [BenchFixture],
}

/// A `.seg` fixture the parser benchmarks time whole, per pass.
#[derive(Debug, Clone, Copy)]
pub struct BenchFixture {
    /// File name in the protocol's `fixtures/`.
    pub file: &'static str,
    /// The benchmark's name: what the fixture holds.
    pub what: &'static str,
    /// The kind of call it holds (the benchmark's group).
    pub proto: Protocol,
    /// Calls the parser makes of it (the benchmark checks it measures them).
    pub calls: usize,
}

/// One kind of call a parser makes.
#[derive(Debug, Clone, Copy)]
pub struct CallKind {
    pub proto: Protocol,
    /// Its name in `--proto`, the JSON `proto` field and the views.
    pub name: &'static str,
    /// How its resources are shaped, which decides how endpoints are normalised.
    pub resource: ResourceKind,
    /// Its names in exported metrics (`--prometheus`).
    pub metrics: MetricNames,
}

/// How a kind of call is named in exported metrics: OpenTelemetry's semantic conventions as
/// Prometheus writes them (`http.server.request.duration` → `http_server_request_duration_seconds`).
#[derive(Debug, Clone, Copy)]
pub struct MetricNames {
    /// The latency histograms of the server's and of the client's side.
    pub server: &'static str,
    pub client: &'static str,
    /// A label with the same value on every series of this kind: what tells it apart from
    /// other kinds under the same metric (`db_system_name="redis"`); None for a metric of
    /// its own.
    pub system: Option<(&'static str, &'static str)>,
    /// The labels that carry the call's method and its (normalised) resource.
    pub method: &'static str,
    pub resource: &'static str,
}

impl MetricNames {
    /// A database's calls (`db_client_operation_duration_seconds`); the server's side, which
    /// the conventions do not name, as `db_server_operation_duration_seconds`.
    pub const fn database(system: &'static str) -> MetricNames {
        MetricNames {
            server: "db_server_operation_duration_seconds",
            client: "db_client_operation_duration_seconds",
            system: Some(("db_system_name", system)),
            method: "db_operation_name",
            resource: "db_query_summary",
        }
    }

    /// HTTP's (both versions under one metric, told apart by `network_protocol_version`).
    pub const fn http(version: &'static str) -> MetricNames {
        MetricNames {
            server: "http_server_request_duration_seconds",
            client: "http_client_request_duration_seconds",
            system: Some(("network_protocol_version", version)),
            method: "http_request_method",
            resource: "http_route",
        }
    }
}

/// How a protocol's resource is shaped, which decides the normalisation applied
/// (`aggregate::normalize`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ResourceKind {
    /// A URL path (HTTP): identifier segments → `{id}`, query dropped.
    UrlPath,
    /// SQL text: literals → `?`, lists collapsed.
    Sql,
    /// A command and its key (Redis, Memcached): `COMMAND key-template`.
    Command,
    /// A DNS question, `TYPE name`: names are kept (they are what is looked up), except the
    /// address labels of reverse lookups (`PTR {addr}.in-addr.arpa`).
    DnsQuestion,
    /// An RPC method (gRPC `/package.Service/Method`): a name from a schema, never an id, kept
    /// as it is (`grpc.health.v1.Health` is no identifier).
    RpcMethod,
}

/// Kinds of calls ebtop makes: one per [`CallKind`] of the [`REGISTRY`] (checked when
/// compiling: [`KIND_INDEX`]).
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize, serde::Deserialize,
)]
#[serde(rename_all = "lowercase")]
pub enum Protocol {
    Http,
    Redis,
    Memcached,
    Dns,
    Postgres,
    Mysql,
    /// HTTP/2 calls that are not gRPC.
    Http2,
    /// gRPC calls (HTTP/2 streams of content-type `application/grpc*`): parsed by the HTTP/2
    /// parser, told apart per call.
    Grpc,
    Kafka,
    Mongodb,
    /// Calls of a protocol a Wasm plugin parses (`--plugin`; the plugin's name in the call's
    /// `plugin` detail).
    Plugin,
}

/// Number of [`Protocol`] variants (the last one's value plus one).
const PROTOCOL_COUNT: usize = Protocol::Plugin as usize + 1;

/// For each [`Protocol`] (by value), where its [`CallKind`] is in the [`REGISTRY`]: (descriptor,
/// call kind). Built when compiling, which fails if a variant has no kind, or two.
const KIND_INDEX: [(u8, u8); PROTOCOL_COUNT] = {
    let mut index = [(u8::MAX, u8::MAX); PROTOCOL_COUNT];
    let mut d = 0;
    while d < REGISTRY.len() {
        let mut k = 0;
        while k < REGISTRY[d].calls.len() {
            let p = REGISTRY[d].calls[k].proto as usize;
            assert!(
                index[p].0 == u8::MAX,
                "a Protocol has two CallKinds in REGISTRY"
            );
            index[p] = (d as u8, k as u8);
            k += 1;
        }
        d += 1;
    }
    let mut p = 0;
    while p < PROTOCOL_COUNT {
        assert!(
            index[p].0 != u8::MAX,
            "a Protocol has no CallKind in REGISTRY"
        );
        p += 1;
    }
    index
};

impl Protocol {
    /// Every kind of call, in [`REGISTRY`] order.
    pub fn all() -> impl Iterator<Item = Protocol> {
        REGISTRY
            .iter()
            .flat_map(|d| d.calls.iter().map(|k| k.proto))
    }

    /// Its entry in the registry.
    pub fn kind(self) -> &'static CallKind {
        let (d, k) = KIND_INDEX[self as usize];
        &REGISTRY[d as usize].calls[k as usize]
    }

    /// The descriptor of the protocol whose parser makes these calls (gRPC: HTTP/2's).
    pub fn descriptor(self) -> &'static ProtocolDescriptor {
        &REGISTRY[KIND_INDEX[self as usize].0 as usize]
    }

    pub fn name(self) -> &'static str {
        self.kind().name
    }

    pub fn resource_kind(self) -> ResourceKind {
        self.kind().resource
    }

    pub fn from_name(name: &str) -> Option<Protocol> {
        Protocol::all().find(|p| p.name().eq_ignore_ascii_case(name))
    }

    /// The kernel's id for it (`enum ebtop_l7_proto`), if the kernel recognises it.
    pub fn kernel_id(self) -> Option<u8> {
        self.descriptor().kernel_id
    }
}

/// The kernel's mask (bit = `enum ebtop_l7_proto` id) of the protocols whose connections'
/// sends/receives are copied whole (`ProtocolDescriptor::copy_whole`).
pub fn copied_whole_kernel_mask() -> u32 {
    REGISTRY
        .iter()
        .filter(|d| d.copy_whole)
        .filter_map(|d| d.kernel_id)
        .fold(0, |m, id| m | 1 << id)
}

/// A set of protocols (`--proto`); the default holds them all.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProtoSet(u64);

impl Default for ProtoSet {
    fn default() -> Self {
        ProtoSet(u64::MAX)
    }
}

impl ProtoSet {
    /// The set of `only`, or every protocol when `None`.
    pub fn of(only: Option<&[Protocol]>) -> ProtoSet {
        match only {
            None => ProtoSet::default(),
            Some(list) => ProtoSet(list.iter().fold(0, |m, p| m | 1 << *p as u32)),
        }
    }

    /// No protocol.
    pub fn empty() -> ProtoSet {
        ProtoSet(0)
    }

    pub fn insert(&mut self, p: Protocol) {
        self.0 |= 1 << p as u32;
    }

    pub fn contains(self, p: Protocol) -> bool {
        self.0 & (1 << p as u32) != 0
    }

    /// Whether connections that `p`'s parser reads are wanted (HTTP/2 ones for `grpc` too);
    /// their calls are then filtered by [`ProtoSet::contains`].
    pub fn wants_parser(self, d: &ProtocolDescriptor) -> bool {
        d.calls.iter().any(|k| self.contains(k.proto))
    }

    /// No selection: every protocol, and connections of none ebtop knows (`--capture-all`).
    pub fn is_all(self) -> bool {
        self.0 == u64::MAX
    }

    /// The kernel's mask (bit = `enum ebtop_l7_proto` id) of the protocols it recognises.
    pub fn kernel_mask(self) -> u32 {
        Protocol::all()
            .filter(|p| self.contains(*p))
            .filter_map(|p| p.kernel_id())
            .fold(0, |m, id| m | 1 << id)
    }
}

/// How deep a parser looks: `Shallow` extracts only what identifies a call (method, resource,
/// status) and what framing needs; `Full` also keeps optional details (e.g. HTTP Host).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ParseDepth {
    Shallow,
    #[default]
    Full,
}

/// Transport a connection uses; datagram parsers treat each segment as one whole message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Transport {
    Stream,
    Datagram,
}

#[derive(Debug, Clone, Copy)]
pub struct ParserConfig {
    pub depth: ParseDepth,
    pub transport: Transport,
    /// Keep up to this many bytes of each message's head (secrets redacted) in the call, for
    /// a person to read (the TUI's call details); 0 keeps none (JSON, replay to JSON).
    pub keep_head: usize,
}

/// The start of a message as captured: the head (e.g. HTTP request line and headers), cut
/// at `keep_head` bytes, shown with its secrets redacted (`shown`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CapturedHead {
    pub bytes: Vec<u8>,
    /// Length of the whole head on the wire (`bytes` may be shorter).
    pub len: u64,
    pub secrets: HeadSecrets,
}

/// Where a captured head's secrets are hidden.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum HeadSecrets {
    /// By the parser: `bytes` hold none.
    #[default]
    Redacted,
    /// When shown: `bytes` are an HTTP/1 head as sent. Redacting every head of every call
    /// (each header name against the secret names, each value's URLs) cost more than the
    /// rest of the call's parse, for heads that are nearly never looked at.
    Http1,
}

impl CapturedHead {
    /// A head whose secrets the parser has already taken out.
    pub fn redacted(bytes: Vec<u8>, len: u64) -> CapturedHead {
        CapturedHead {
            bytes,
            len,
            secrets: HeadSecrets::Redacted,
        }
    }

    /// The head as shown: without its secrets.
    pub fn shown(&self) -> std::borrow::Cow<'_, [u8]> {
        match self.secrets {
            HeadSecrets::Redacted => std::borrow::Cow::Borrowed(&self.bytes),
            HeadSecrets::Http1 => std::borrow::Cow::Owned(http1::redact_head(&self.bytes)),
        }
    }
}

/// One syscall's bytes in one direction. `payload` is the captured prefix of the `total_len`
/// bytes the syscall moved.
#[derive(Debug, Clone, Copy)]
pub struct Segment<'a> {
    pub dir: Direction,
    pub payload: &'a [u8],
    /// The syscall's last bytes, captured apart from the prefix (a kernel tail: sends longer
    /// than the snaplen; empty: none). `payload.len() + tail.len() < total_len` when present:
    /// the bytes between went unseen. Parsers that read no tails treat them as unseen too.
    pub tail: &'a [u8],
    pub total_len: u64,
    pub start_ns: u64,
    pub end_ns: u64,
    /// The peer a datagram came from or went to (datagram sockets; None on streams, where
    /// the connection has one peer).
    pub peer: Option<std::net::SocketAddr>,
    /// Stream position of `payload[0]`: bytes the socket moved in this direction before this
    /// syscall since ebtop first saw it (the record's `seq`); 0 in tests that do not care.
    pub pos: u64,
}

impl Segment<'_> {
    /// The stream position of the byte `at` points to, when `at` starts inside this
    /// segment's head or tail (a parser's view of its bytes); None for bytes of a parser's
    /// own buffer (a header joined across syscalls).
    pub fn pos_of(&self, at: &[u8]) -> Option<u64> {
        let p = at.as_ptr() as usize;
        let within = |s: &[u8]| {
            let b = s.as_ptr() as usize;
            (b <= p && p < b + s.len()).then(|| (p - b) as u64)
        };
        if let Some(off) = within(self.payload) {
            return Some(self.pos.wrapping_add(off));
        }
        let tail_at = self.total_len.checked_sub(self.tail.len() as u64)?;
        within(self.tail).map(|off| self.pos.wrapping_add(tail_at).wrapping_add(off))
    }
}

/// The head and tail the kernel side copies of a stream syscall of `bytes` at `snaplen` (no
/// tail: empty; the whole syscall when its rest fits one): `copy_tail`/`take_tail` in
/// src/bpf/capture.h. For tests, fixtures and tools that replay whole syscalls.
pub fn kernel_cut(bytes: &[u8], snaplen: usize) -> (&[u8], &[u8]) {
    let tail_len = crate::event::TAIL_LEN;
    if bytes.len() <= snaplen.saturating_add(tail_len) {
        (bytes, &[])
    } else {
        (&bytes[..snaplen], &bytes[bytes.len() - tail_len..])
    }
}

/// When and how much: the syscalls that carried one message.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct MessageSpan {
    /// Entry and exit of the first syscall carrying the message.
    pub first_start_ns: u64,
    pub first_end_ns: u64,
    /// Entry and exit of the last syscall carrying the message.
    pub last_start_ns: u64,
    pub last_end_ns: u64,
    /// Bytes of the message (headers and body) as moved by the kernel.
    pub bytes: u64,
    pub syscalls: u32,
    /// Stream position of the message's first byte, where its parser knows it
    /// ([`MessageSpan::starting_at`]: HTTP/1, Redis, and the framing core's protocols —
    /// PostgreSQL, MySQL, Memcached, Kafka, MongoDB — whose spans open at a header's first
    /// byte, [`BytesSince::touch_at`]): what matches a client call to the server call it
    /// reached (src/chains.rs). Not an output field.
    #[serde(skip)]
    pub first_pos: Option<u64>,
}

impl MessageSpan {
    pub fn starting(seg: &Segment) -> MessageSpan {
        MessageSpan {
            first_start_ns: seg.start_ns,
            first_end_ns: seg.end_ns,
            last_start_ns: seg.start_ns,
            last_end_ns: seg.end_ns,
            bytes: 0,
            syscalls: 1,
            first_pos: None,
        }
    }
    /// A message whose first byte is `at`, a slice of `seg`'s bytes (its position kept).
    pub fn starting_at(seg: &Segment, at: &[u8]) -> MessageSpan {
        MessageSpan {
            first_pos: seg.pos_of(at),
            ..MessageSpan::starting(seg)
        }
    }
    /// Records that `seg` (a later syscall) carried part of this message.
    pub fn extend(&mut self, seg: &Segment) {
        self.last_start_ns = seg.start_ns;
        self.last_end_ns = seg.end_ns;
        self.syscalls += 1;
    }
}

/// The syscalls and bytes seen in one direction since a call last took them: for parsers whose
/// request or response spreads over several messages (PostgreSQL's Parse, Bind, Execute; a
/// MySQL result set's packets).
#[derive(Debug, Default)]
pub struct BytesSince {
    pub span: Option<MessageSpan>,
    /// The segment (a parser's own count) last counted in `span`.
    pub last_seg: u64,
    /// Bytes of it were not captured (beyond the snaplen, lost).
    pub truncated: bool,
}

impl BytesSince {
    /// Segment `seg_id` carries a message starting at `at` (a slice of `seg`'s bytes): the
    /// span's first byte when it opens here ([`MessageSpan::first_pos`]); else as `touch`.
    pub fn touch_at(&mut self, seg_id: u64, seg: &Segment, at: &[u8]) {
        if self.span.is_none() {
            self.span = Some(MessageSpan::starting_at(seg, at));
            self.last_seg = seg_id;
        } else {
            self.touch(seg_id, seg);
        }
    }

    /// Segment `seg_id` carries some of these bytes (once per segment however often called).
    /// A span opened here has no first position (its first byte is not known to be here).
    pub fn touch(&mut self, seg_id: u64, seg: &Segment) {
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
    pub fn add(&mut self, n: u64) {
        if let Some(s) = self.span.as_mut() {
            s.bytes = s.bytes.saturating_add(n);
        }
    }
    /// The span so far (empty if none) and whether it was truncated; starts over.
    pub fn take(&mut self) -> (MessageSpan, bool) {
        let t = std::mem::take(self);
        (t.span.unwrap_or_default(), t.truncated)
    }
}

pub use outcome::Outcome;

/// A request paired with its response, as a parser sees it.
#[derive(Debug, Clone, PartialEq)]
pub struct L7Call {
    pub proto: Protocol,
    /// Direction (relative to the traced process) the request travelled.
    pub request_dir: Direction,
    pub method: String,
    pub resource: String,
    /// Protocol version as shown (e.g. "1.1"; Redis: "2" or "3", the RESP version).
    pub version: &'static str,
    /// Numeric status (HTTP).
    pub status: Option<u32>,
    /// Status as a word, for protocols whose statuses are named rather than numbered (Redis:
    /// the error reply's prefix, `WRONGTYPE`, None when the call succeeded; DNS: the rcode's
    /// name, `NOERROR` included); None for protocols with a numeric `status`.
    pub status_text: Option<String>,
    pub outcome: Outcome,
    pub req: MessageSpan,
    pub resp: MessageSpan,
    /// Part of the request or response payload was not captured (snaplen); framing still exact.
    pub truncated: bool,
    /// The response's end was not visible and was inferred from the next message or the close.
    pub end_inferred: bool,
    /// Optional protocol details (`Full` depth only), e.g. ("host", "example.com"). Each is
    /// a field of the JSON `call` line, so a key must not be one of that line's field names.
    pub details: Vec<(&'static str, String)>,
    /// The request's and response's heads, when the parser was asked to keep them.
    pub req_head: CapturedHead,
    pub resp_head: CapturedHead,
}

/// Problems a parser met, all counted and reported, none fatal.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct ParseStats {
    /// Messages dropped because bytes were lost inside them (ring buffer loss, garbage).
    pub damaged_messages: u64,
    /// Times a stream stopped making sense and the parser waited for a message start.
    pub desyncs: u64,
    /// Bytes skipped while out of sync.
    pub unparsed_bytes: u64,
    /// Responses with no request to pair with (e.g. request sent before ebtop started).
    pub unmatched_responses: u64,
    /// Requests still waiting for a response when the connection ended (DNS: also queries
    /// unanswered after `dns::QUERY_TIMEOUT_NS`, retried with the same id, or evicted).
    pub unanswered_requests: u64,
    /// Calls whose response end was inferred rather than seen.
    pub inferred_ends: u64,
    /// Messages the server sent unasked, counted and not paired (Redis pub/sub messages, RESP3
    /// pushes, MONITOR lines; MongoDB's exhaust replies after the first and awaitable `hello`
    /// answers).
    pub pushes: u64,
    /// Requests sent with their replies switched off (Redis `CLIENT REPLY OFF`/`SKIP`, MongoDB
    /// moreToCome): no call is made of them.
    pub unreplied_requests: u64,
    /// HTTP/2 connections picked up mid-way (or whose header compression state was lost):
    /// some header fields could not be decoded and show as `?`.
    pub partial_headers: u64,
    /// HTTP/2 RST_STREAM frames, and GOAWAY frames with an error code (not NO_ERROR).
    pub stream_resets: u64,
    /// Requests dropped unpaired because a pipeline was deeper than its connection's depth
    /// and the shared budget allow (`matching::SHARED_PENDING_BYTES`): a `warning` cap.
    pub pending_dropped: u64,
}

impl ParseStats {
    /// `n` bytes skipped while out of sync (saturating: a crafted length may be near 2^64).
    pub fn skipped(&mut self, n: u64) {
        self.unparsed_bytes = self.unparsed_bytes.saturating_add(n);
    }

    pub fn add(&mut self, o: &ParseStats) {
        self.damaged_messages += o.damaged_messages;
        self.desyncs += o.desyncs;
        self.skipped(o.unparsed_bytes);
        self.unmatched_responses += o.unmatched_responses;
        self.unanswered_requests += o.unanswered_requests;
        self.inferred_ends += o.inferred_ends;
        self.pushes += o.pushes;
        self.unreplied_requests += o.unreplied_requests;
        self.partial_headers += o.partial_headers;
        self.stream_resets += o.stream_resets;
        self.pending_dropped += o.pending_dropped;
    }
}

/// Per-connection parser state. Implementations must accept any bytes without panicking.
pub trait StreamParser: Send {
    /// Bytes of one syscall, in order within its direction.
    fn on_segment(&mut self, seg: &Segment<'_>, out: &mut Vec<L7Call>, stats: &mut ParseStats);
    /// `len` bytes in `dir` were lost before the next segment (None: unknown amount).
    fn on_gap(&mut self, dir: Direction, len: Option<u64>, stats: &mut ParseStats);
    /// The connection ended; complete what can be completed, count the rest.
    fn on_close(&mut self, out: &mut Vec<L7Call>, stats: &mut ParseStats);
    /// The direction this connection's requests take, when every call so far came alone (its
    /// request after the previous response had begun: no pipelining, no multiplexing, no
    /// stream of replies), so that the first bytes of a turn into that direction start a
    /// new call: where a CPU budget may stop capturing it without cutting a call
    /// (src/source/sampling.rs). None when not known or not so (the default).
    fn request_direction(&self) -> Option<Direction> {
        None
    }
}

/// The protocol whose start `payload` looks like, if any.
pub fn detect(payload: &[u8]) -> Option<&'static ProtocolDescriptor> {
    REGISTRY.iter().find(|p| (p.detect)(payload))
}
