//! Call chains on one host (issue 50): which call was made while serving which, and which
//! client call reached which server call. Runs on the pipeline's thread, after tracking, over
//! every record (in kernel time order, whichever thread tracked it) and every completed call,
//! so a live session and the replay of its recording link the same calls.
//!
//! Two kinds of link, both exact or none:
//! - **Within a process** (thread per request): a client call is the child of the server
//!   request its thread was serving when the client call's first request write began. A
//!   thread serves a request from the read that starts it (a record read on a connection
//!   whose first bytes after the other direction's are a whole HTTP/1 request line) until
//!   the first response write on that connection (by any thread). The state lives here, not
//!   in the parsers: it spans connections (a thread's server connection and its client
//!   connections may be tracked by different threads), and the parsers make calls only when
//!   they complete — after their children. So the parent's id is fixed when its request
//!   starts (its connection and the request's stream position, [`server_id`]), and the call
//!   the parser completes later gets the same id when its first request read is that record
//!   (else a new id, and no child named the old one but those counted `unconfirmed`). A
//!   thread with two requests open at once (an event loop: nginx, Node, asyncio) gives no
//!   link from then on (counted `ambiguous`): which of its requests a call serves is not in
//!   the syscalls.
//!   In a Go program the same holds per goroutine: a record the kernel proved a goroutine
//!   for (`Event::goroutine`, src/bpf/gochain.h) is that goroutine's, whatever thread ran
//!   it, so a handler's own calls are linked to the request its goroutine read. A goroutine
//!   a request's goroutine starts (src/bpf/gospawn.h: creation records, [`GoHttp::Spawn`];
//!   and the goroutines those start) serves that request while it is open, and nothing
//!   after (`spawn_after_parent`); one of unknown creation serves nothing (`spawn_unknown`).
//!   A request made through net/http's HTTP/1 client is written by its connection's
//!   `persistConn.writeLoop` goroutine, not by the goroutine that asked: uprobes
//!   (src/bpf/gohttp.h, [`GoHttp`]) say which goroutine W writes for which connection
//!   object P (at each flush, right before the write: connections older than ebtop too),
//!   when W's writeLoop ends, and which goroutine H called `P.roundTrip` when. A connection
//!   carries one request at a time (Go's client never pipelines, and gives a connection to
//!   the next request only once the last one's write is done), so the request whose first
//!   write W makes after a read (or first of all) is the one H asked for, when exactly one
//!   roundTrip on P came since W's previous such write: it is H's call, linked to what H was
//!   serving when it asked. None, or two, or one stamped before the previous request's
//!   write (its record came late): no link (`http_unproved`). W's other writes (a body
//!   after `100 Continue`, or after an early response) begin no request. A writeLoop that
//!   returned, or whose goroutine is seen serving a request, asking, or writing on another
//!   connection, writes for nothing (its g may run another goroutine since).
//! - **Across processes** (one hop): a client call and the server call it reached, on the
//!   two sockets of one connection seen on this host (client local/peer = server peer/local),
//!   are matched by the stream positions of the request's first byte and the response's
//!   first byte, both exact (the parsers of HTTP/1, Redis and the framing core's protocols
//!   give them). Positions count from where ebtop first saw each socket; a server's count of the request stream can only start
//!   earlier than its client's (it reads what the client wrote) and a client's count of the
//!   response stream only earlier than its server's, so two different exchanges cannot agree
//!   on both positions: equality on both proves one exchange. Never matched by time. The
//!   server call completes first: it is held (not yet handed to the sink) while a traced
//!   socket of this host is its peer, until its client call completes ([`HOLD_NS`] at most).

use std::net::SocketAddr;
use std::sync::Arc;

use rustc_hash::{FxHashMap as HashMap, FxHashSet as HashSet};
use std::collections::VecDeque;

use crate::call::{Call, Side};
use crate::event::{Direction, Event, EventKind, GoHttp, SOCK_STREAM};
use crate::protocols::trace_context::TraceParent;
use crate::protocols::Protocol;

/// Longest a server call waits for the client call that reached it (kernel time).
pub const HOLD_NS: u64 = 2_000_000_000;
/// Server calls held at most at once; beyond, the oldest goes out unlinked (counted).
const MAX_HELD: usize = 16_384;
/// Connections and threads followed at most; beyond, the state starts over (counted).
const MAX_CONNS: usize = 65_536;
const MAX_THREADS: usize = 65_536;
/// Per connection: request starts remembered (server side) and parent changes (client side).
const MAX_STARTS: usize = 64;
const MAX_PARENTS: usize = 64;
/// Go HTTP client connection objects followed at most (beyond, they start over, counted).
const MAX_GO_CONNS: usize = 65_536;
/// roundTrip calls remembered per connection object: one is all a proof takes.
const MAX_ASKS: usize = 4;
/// Longest request-id header value taken as a trace id.
const MAX_REQUEST_ID: usize = 128;
/// Server requests remembered as parents, and hop-linked server calls' roots (for their
/// late children), at most.
const MAX_ROOTS: usize = 65_536;

/// What the chains did, all counted (`summary.chains`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct ChainStats {
    /// Client calls linked to the server request their thread was serving.
    pub linked: u64,
    /// Server calls linked to the client call that reached them (a hop on this host).
    pub hops: u64,
    /// Client calls made on a thread serving more than one request (now or before: an event
    /// loop): no link.
    pub ambiguous: u64,
    /// Of `linked`: client calls of Go programs, linked by their goroutine.
    pub goroutine_linked: u64,
    /// Client calls of a Go goroutine serving no request it read itself (one a handler
    /// started, an HTTP client's connection goroutines): no link.
    pub goroutine_unlinked: u64,
    /// Client calls of a Go program made where the kernel proved no goroutine (cgo's C
    /// code): no link (the thread says nothing of the goroutine).
    pub goroutine_unknown: u64,
    /// Client calls whose first request write ebtop has no state for (a connection's state
    /// started over, or beyond the per-connection memory): no link.
    pub unknown_start: u64,
    /// Server requests that children were linked to whose call never came with that first
    /// read (a request read ebtop took for one that was not): those children's parent is not
    /// a call of the output. Expected 0.
    pub unconfirmed: u64,
    /// Server calls held for their client call that went out without it (no client call
    /// with both positions equal within `HOLD_NS`, or too many held).
    pub hop_unmatched: u64,
    /// Client calls whose server call was held with the same request position but another
    /// response position: not one exchange (positions counted from different points).
    pub hop_disproved: u64,
    /// Of `goroutine_linked`: client calls written by net/http's connection goroutine
    /// (`persistConn.writeLoop`), linked through the goroutine whose roundTrip asked for them.
    pub http_client_linked: u64,
    /// Client calls written by net/http's connection goroutine whose asking goroutine is not
    /// proved (no roundTrip on the connection since its previous request, two, or one whose
    /// record came after the request's write): no link.
    pub http_unproved: u64,
    /// Of `goroutine_linked`: client calls of goroutines a request's goroutine started
    /// (directly, or through goroutines it started: `go func()`, errgroup fan-out), made
    /// while that request was open (src/bpf/gospawn.h).
    pub spawn_linked: u64,
    /// Of `goroutine_unlinked`: client calls of goroutines started while a request was
    /// served, made after its response began (a goroutine that outlives its request, or a
    /// pool's that one request started and others use): no link.
    pub spawn_after_parent: u64,
    /// Of `goroutine_unlinked`: client calls, in a program whose goroutine creation is
    /// probed, of goroutines whose creation ebtop did not see (created before ebtop, a lost
    /// record, a coroutine, a creator of unknown descent, or more than 32 creations below
    /// the request's goroutine): no link.
    pub spawn_unknown: u64,
    /// HTTP/2 and gRPC client calls of goroutines that inherit a request from their
    /// creation: no link. One connection multiplexes many requests and is written by its own
    /// goroutines, started by whichever request opened it (grpc-go's loopyWriter), which
    /// would inherit that request for every other's.
    pub spawn_multiplexed: u64,
    /// Of `linked`: nginx's upstream requests (src/bpf/ngxchain.h), linked under the
    /// downstream request they proxy, whatever else the worker serves.
    pub proxy_linked: u64,
    /// nginx upstream requests whose downstream request is not proved: no HTTP/1 request
    /// open on the downstream socket by that worker (an HTTP/2 downstream, a request read
    /// before ebtop), or a record older than the upstream's last read (a record lost): no link.
    pub proxy_unproved: u64,
    /// Times the connection or thread state was cleared at its cap.
    pub state_resets: u64,
    /// Server calls held now (counted in the aggregates, not yet written: they go out with
    /// their client call or within 2 s).
    pub held_now: u64,
}

/// A call's place in a chain, set by [`Chains::link`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ChainIds {
    /// Unique in the session (and the same in a replay of its recording).
    pub id: u64,
    pub parent_id: Option<u64>,
    /// The application's trace: a `traceparent`'s trace id (32 hex digits), else an
    /// `x-request-id`/`x-correlation-id`/`request-id` value, of this call's request or
    /// its parent's.
    pub trace_id: Option<Arc<str>>,
}

/// What the thread was serving when a client call started.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Parent {
    None,
    One {
        conn: u64,
        id: u64,
        trace: Option<Arc<str>>,
        /// Found by the goroutine (a Go program), not the thread.
        goroutine: bool,
        /// Through the roundTrip that asked net/http's connection goroutine for it.
        http: bool,
        /// By a goroutine the request's goroutine started (directly or not).
        spawned: bool,
    },
    Ambiguous,
    /// A Go goroutine that serves no request.
    GoroutineNone,
    /// A Go program's write of no proved goroutine.
    GoroutineUnknown,
    /// A request written by net/http's connection goroutine whose asker is not proved.
    HttpUnproved,
    /// A goroutine started while a request was served, after that request's response began.
    SpawnAfterRequest,
    /// A goroutine whose creation is not known, in a program whose creations are probed.
    SpawnUnknown,
    /// An nginx upstream request, under the downstream request it proxies (connection
    /// `conn`'s open request `id`).
    Proxy {
        conn: u64,
        id: u64,
        trace: Option<Arc<str>>,
    },
    /// An nginx upstream request whose downstream request is not proved.
    ProxyUnproved,
}

/// What a goroutine's creation (src/bpf/gospawn.h) gave it.
#[derive(Debug, Clone)]
enum Spawned {
    /// Its creator served request `id` (read by goroutine `server` on connection `conn`)
    /// when it ran the `go` statement, itself or through its own creation (`depth`
    /// creations below `server`): the goroutine serves that request while it is open.
    Inherits {
        server: Ctx,
        conn: u64,
        id: u64,
        trace: Option<Arc<str>>,
        depth: u8,
    },
    /// Its creator served no request (or more than one: no link).
    Nothing,
    /// Its creator is not known (a coroutine, a creator not proved, one itself of unknown
    /// creation, or too deep).
    Unknown,
}

/// Creations followed below a request's goroutine at most (each is looked up once, at the
/// creation: the inheritance is copied down, so the depth costs nothing per call).
const MAX_SPAWN_DEPTH: u8 = 32;

/// A Go net/http client connection object (`*persistConn`) whose writer ebtop saw write, or
/// that a roundTrip named (its writer writes after).
#[derive(Debug, Default)]
struct GoConnObj {
    /// The goroutine running its writeLoop.
    writer: Option<Ctx>,
    /// The connection its writer writes on (its first write's): a write on another proves
    /// the goroutine is no longer its writer.
    conn: Option<u64>,
    /// roundTrip calls not yet taken by a request write: (time, what the asker served then).
    asks: VecDeque<(u64, Parent)>,
    /// Start of the last request write (an ask stamped before it came late).
    last_write_ns: u64,
}

/// Whose requests and calls a record is: (process, thread id) or, in a Go program,
/// (process, [`GOROUTINE`] | the goroutine's g).
type Ctx = (u32, u64);
/// Marks a goroutine's context (a g is a user address: bit 63 is never set).
const GOROUTINE: u64 = 1 << 63;

/// A request a server connection started (by its first read).
#[derive(Debug, Clone)]
struct ReqStart {
    start_ns: u64,
    end_ns: u64,
    seq: u64,
    id: u64,
    trace: Option<Arc<str>>,
    /// Children were linked to it (it must be confirmed by its call).
    parent_of: bool,
}

#[derive(Debug)]
struct ConnChain {
    local: SocketAddr,
    peer: SocketAddr,
    tls: bool,
    last_dir: Option<Direction>,
    /// The thread whose open request this connection holds.
    open_on: Option<Ctx>,
    /// A short read that may begin a request line (Go's net/http reads a request's first
    /// byte in a goroutine of its own, `backgroundRead`, while the previous response goes
    /// out): the record that completes the line starts the request at this read's position,
    /// served by whoever read the rest.
    prefix: Option<Prefix>,
    starts: VecDeque<ReqStart>,
    /// Client side: (egress record start, the thread's parent then), pushed when it changes.
    parents: VecDeque<(u64, Parent)>,
    /// End of the last read (an nginx upstream record older than it is not this request's).
    last_in_ns: u64,
}

/// An nginx upstream write's record (src/bpf/ngxchain.h), waiting for its thread's next
/// write: the upstream socket, the downstream socket, its time.
#[derive(Debug, Clone, Copy)]
struct NgxPending {
    up: u64,
    down: u64,
    ns: u64,
}

#[derive(Debug)]
struct Prefix {
    start_ns: u64,
    end_ns: u64,
    seq: u64,
    bytes: Vec<u8>,
}

/// A request line's prefix is at most this long (a method and a little more).
const MAX_PREFIX: usize = 16;
/// Bytes of a record joined to a prefix to find the request line and its headers in.
const MAX_HEAD: usize = 8192;

/// Whether a read may be the first bytes of a request line and no more: whole (not cut),
/// short, with no line end, starting with a method's letter.
fn may_begin_request(ev: &Event) -> bool {
    let p = ev.payload;
    !p.is_empty()
        && p.len() <= MAX_PREFIX
        && p.len() as u64 == ev.total_len
        && p[0].is_ascii_uppercase()
        && !p.contains(&b'\n')
}

#[derive(Debug, Default)]
struct ThreadChain {
    /// Requests open on this thread: (connection, request id, trace, start of the read
    /// that began it).
    open: Vec<(u64, u64, Option<Arc<str>>, u64)>,
    /// It had two requests open at once: an event loop, whose calls are never linked.
    multiplexed: bool,
}

/// Where a held server call waits: its socket pair, TLS or not, request position.
type HopKey = (SocketAddr, SocketAddr, bool, u64);

/// What the caller does with a call [`Chains::link`] linked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Disposition {
    /// Hand it on now (after any server calls [`Chains::link`] released).
    Now,
    /// Hold it ([`Chains::hold`]): a server call whose client call may still come.
    Hold,
}

/// A client call that completed before the server call it reached (its read of the response
/// may end before the server's write returns): what that server call needs of it.
struct Recent {
    id: u64,
    root: u64,
    resp_pos: Option<u64>,
    method: String,
    resource: String,
    trace: Option<Arc<str>>,
    due_ns: u64,
}

struct Held<T> {
    call: Call,
    extra: T,
    resp_pos: Option<u64>,
    due_ns: u64,
}

pub struct Chains<T> {
    conns: HashMap<u64, ConnChain>,
    threads: HashMap<Ctx, ThreadChain>,
    /// Processes a record proved a goroutine for (Go programs): their records without one
    /// (cgo's C code) link nothing, for their thread is not what serves in them.
    go_pids: HashSet<u32>,
    /// Go net/http client connection objects by (process, address), and their writers'
    /// goroutines (→ the object's address).
    go_conns: HashMap<(u32, u64), GoConnObj>,
    go_writers: HashMap<Ctx, u64>,
    /// Processes whose goroutine creation is probed (a creation record came), and each
    /// goroutine's creation: the newest of its g wins (a g is reused once its goroutine
    /// ended, and every reuse is a creation).
    spawn_pids: HashSet<u32>,
    spawned: Bounded<Spawned, Ctx>,
    /// Processes whose net/http client probes report (a record came).
    http_pids: HashSet<u32>,
    /// nginx upstream records by (process, thread), taken by the thread's next write.
    ngx_pending: HashMap<(u32, u32), NgxPending>,
    /// Stream connections by (local, peer, tls): the client socket of a server's peer.
    by_addr: HashMap<(SocketAddr, SocketAddr, bool), u64>,
    held: HashMap<HopKey, Held<T>>,
    /// Held keys in the order they were held (with their due time), for expiry.
    held_order: VecDeque<(u64, HopKey)>,
    /// Client calls to a traced socket of this host whose server call has not come yet.
    recent: HashMap<HopKey, Recent>,
    recent_order: VecDeque<(u64, HopKey)>,
    /// Calls without a request-start id: numbered in order (deterministic in a replay).
    next: u64,
    /// Server requests that a client call was linked under (their trace is their own once
    /// a child went out with it), in the order marked.
    parented: Bounded<()>,
    /// Hop-linked server calls without children when they went out: the root they joined
    /// (a child completing after its parent takes it).
    joined: Bounded<u64>,
    pub stats: ChainStats,
}

/// A map of at most [`MAX_ROOTS`] entries, the oldest (first inserted) forgotten first.
struct Bounded<V, K = u64> {
    map: HashMap<K, V>,
    order: VecDeque<K>,
}

impl<V, K> Default for Bounded<V, K> {
    fn default() -> Self {
        Bounded {
            map: HashMap::default(),
            order: VecDeque::new(),
        }
    }
}

impl<V, K: std::hash::Hash + Eq + Copy> Bounded<V, K> {
    fn insert(&mut self, k: K, v: V) {
        if self.map.insert(k, v).is_none() {
            if self.order.len() >= MAX_ROOTS {
                if let Some(old) = self.order.pop_front() {
                    self.map.remove(&old);
                }
            }
            self.order.push_back(k);
        }
    }
}

impl<T> Default for Chains<T> {
    fn default() -> Self {
        Chains {
            conns: HashMap::default(),
            threads: HashMap::default(),
            go_pids: HashSet::default(),
            go_conns: HashMap::default(),
            go_writers: HashMap::default(),
            spawn_pids: HashSet::default(),
            spawned: Bounded::default(),
            http_pids: HashSet::default(),
            ngx_pending: HashMap::default(),
            by_addr: HashMap::default(),
            held: HashMap::default(),
            held_order: VecDeque::new(),
            recent: HashMap::default(),
            recent_order: VecDeque::new(),
            next: 0,
            parented: Bounded::default(),
            joined: Bounded::default(),
            stats: ChainStats::default(),
        }
    }
}

/// [`mix`] for other users of chain ids (the OTLP exporter's trace ids of chain roots).
pub fn mix64(tag: u64, a: u64, b: u64) -> u64 {
    mix(tag, a, b)
}

/// A 64-bit mix (splitmix64's finaliser) of a tag and two values: ids of different kinds
/// never meet but by a 2^-64 chance, and never 0.
fn mix(tag: u64, a: u64, b: u64) -> u64 {
    let mut z = tag
        .wrapping_mul(0x9e37_79b9_7f4a_7c15)
        .wrapping_add(a)
        .rotate_left(29)
        .wrapping_add(b.wrapping_mul(0xbf58_476d_1ce4_e5b9));
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^= z >> 31;
    z.max(1)
}

/// The id of the server request that started on connection `conn` at stream position `seq`.
pub fn server_id(conn: u64, seq: u64) -> u64 {
    mix(1, conn, seq)
}

/// An id as the outputs write it: 16 hex digits (an OpenTelemetry span id's form).
pub fn hex_id(id: u64) -> String {
    format!("{id:016x}")
}

/// Whether `p` starts with a whole HTTP/1 request line (`METHOD SP target SP HTTP/1.x`).
fn is_request_line(p: &[u8]) -> bool {
    let Some(sp) = p.iter().take(24).position(|&c| c == b' ') else {
        return false;
    };
    if sp == 0 || !p[..sp].iter().all(|c| c.is_ascii_uppercase() || *c == b'-') {
        return false;
    }
    let rest = &p[sp + 1..];
    let Some(eol) = rest.iter().position(|&c| c == b'\n') else {
        return false;
    };
    let line = rest[..eol].strip_suffix(b"\r").unwrap_or(&rest[..eol]);
    match line.iter().rposition(|&c| c == b' ') {
        Some(i) if i > 0 => line[i + 1..].starts_with(b"HTTP/1."),
        _ => false,
    }
}

/// The application's trace id in an HTTP/1 request head (as captured): a valid
/// `traceparent`'s trace id, else the first request-id header's value (printable, bounded).
pub fn request_trace(head: &[u8]) -> Option<Arc<str>> {
    let end = head
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .unwrap_or(head.len());
    let mut request_id = None;
    for line in head[..end].split(|&c| c == b'\n').skip(1) {
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        let Some(colon) = line.iter().position(|&c| c == b':') else {
            continue;
        };
        let (name, value) = (&line[..colon], line[colon + 1..].trim_ascii());
        if name.eq_ignore_ascii_case(b"traceparent") {
            if let Some(tp) = TraceParent::parse(value) {
                return Some(trace_hex(&tp.trace_id).into());
            }
        } else if request_id.is_none()
            && [&b"x-request-id"[..], b"x-correlation-id", b"request-id"]
                .iter()
                .any(|n| name.eq_ignore_ascii_case(n))
            && !value.is_empty()
            && value.len() <= MAX_REQUEST_ID
            && value.iter().all(|c| c.is_ascii_graphic())
        {
            request_id = std::str::from_utf8(value).ok().map(Arc::from);
        }
    }
    request_id
}

fn trace_hex(id: &[u8; 16]) -> String {
    id.iter().map(|b| format!("{b:02x}")).collect()
}

/// A call's own trace id: its `traceparent` detail (HTTP/1, HTTP/2), else its request-id
/// detail.
fn own_trace(call: &Call) -> Option<Arc<str>> {
    for (k, v) in &call.l7.details {
        if *k == "traceparent" {
            if let Some(tp) = TraceParent::parse(v.as_bytes()) {
                return Some(trace_hex(&tp.trace_id).into());
            }
        }
    }
    None
}

impl<T> Chains<T> {
    pub fn new() -> Self {
        Self::default()
    }

    /// One record (after the user-space filters, of a selected connection), in kernel time
    /// order.
    pub fn on_record(&mut self, ev: &Event) {
        let key = ev.conn_key();
        match ev.kind {
            EventKind::Data if ev.sock_type == SOCK_STREAM => {}
            EventKind::Close => {
                self.forget(key);
                return;
            }
            EventKind::GoHttp => {
                if let Some((up, down)) = ev.nginx_upstream() {
                    if self.ngx_pending.len() >= MAX_THREADS {
                        self.ngx_pending.clear();
                        self.stats.state_resets += 1;
                    }
                    let ns = ev.start_ns;
                    self.ngx_pending
                        .insert((ev.pid, ev.tid), NgxPending { up, down, ns });
                } else if let Some(h) = ev.go_http() {
                    self.on_go_http(ev.pid, ev.start_ns, h);
                }
                return;
            }
            _ => return,
        }
        if self.conns.len() >= MAX_CONNS && !self.conns.contains_key(&key) {
            self.conns.clear();
            self.by_addr.clear();
            self.threads.clear();
            self.stats.state_resets += 1;
        }
        let (local, peer, tls) = (ev.local(), ev.peer(), ev.is_tls());
        let conn = self.conns.entry(key).or_insert_with(|| ConnChain {
            local,
            peer,
            tls,
            last_dir: None,
            open_on: None,
            prefix: None,
            starts: VecDeque::new(),
            parents: VecDeque::new(),
            last_in_ns: 0,
        });
        let turned = conn.last_dir != Some(ev.dir);
        conn.last_dir = Some(ev.dir);
        if turned && conn.starts.is_empty() && conn.parents.is_empty() {
            self.by_addr.insert((local, peer, tls), key);
        }
        let thread: Ctx = match ev.goroutine {
            Some(g) => (ev.pid, GOROUTINE | g),
            None => (ev.pid, u64::from(ev.tid)),
        };
        if ev.goroutine.is_some() && !self.go_pids.contains(&ev.pid) {
            if self.go_pids.len() >= MAX_THREADS {
                self.go_pids.clear();
                self.stats.state_resets += 1;
            }
            self.go_pids.insert(ev.pid);
        }
        let unproved = ev.goroutine.is_none() && self.go_pids.contains(&ev.pid);
        match ev.dir {
            Direction::Ingress => {
                conn.last_in_ns = conn.last_in_ns.max(ev.end_ns);
                let pending = conn.prefix.take();
                let (start_ns, end_ns, seq, trace) = if turned {
                    if is_request_line(ev.payload) {
                        (ev.start_ns, ev.end_ns, ev.seq, request_trace(ev.payload))
                    } else {
                        if may_begin_request(ev) {
                            conn.prefix = Some(Prefix {
                                start_ns: ev.start_ns,
                                end_ns: ev.end_ns,
                                seq: ev.seq,
                                bytes: ev.payload.to_vec(),
                            });
                        }
                        return;
                    }
                } else if let Some(p) = pending {
                    // The rest of a request line whose first bytes another read took.
                    if p.seq.checked_add(p.bytes.len() as u64) != Some(ev.seq) {
                        return;
                    }
                    let mut head = p.bytes;
                    head.extend_from_slice(&ev.payload[..ev.payload.len().min(MAX_HEAD)]);
                    if !is_request_line(&head) {
                        return;
                    }
                    (p.start_ns, p.end_ns, p.seq, request_trace(&head))
                } else {
                    return;
                };
                // A request starts here: this thread serves it until a response write.
                let id = server_id(key, seq);
                if conn.starts.len() >= MAX_STARTS {
                    conn.starts.pop_front();
                }
                conn.starts.push_back(ReqStart {
                    start_ns,
                    end_ns,
                    seq,
                    id,
                    trace: trace.clone(),
                    parent_of: false,
                });
                // A Go program's read of no proved goroutine: served by no context known.
                let before = std::mem::replace(&mut conn.open_on, (!unproved).then_some(thread));
                if let Some(t) = before {
                    close_open(&mut self.threads, t, key);
                }
                if unproved {
                    return;
                }
                if self.threads.len() >= MAX_THREADS && !self.threads.contains_key(&thread) {
                    self.threads.clear();
                    self.stats.state_resets += 1;
                }
                // A goroutine serving a request runs no writeLoop (its g was reused).
                if thread.1 & GOROUTINE != 0 {
                    self.drop_writer(thread);
                }
                let t = self.threads.entry(thread).or_default();
                // Since this read (the rest of a request line another goroutine began, too):
                // a roundTrip stamped before it was asked for an earlier request.
                t.open.push((key, id, trace, ev.start_ns));
                if t.open.len() > 1 {
                    t.multiplexed = true;
                }
            }
            Direction::Egress => {
                conn.prefix = None;
                // An nginx upstream record is for its thread's next write, whichever.
                let ngx = match ev.goroutine {
                    None => self.ngx_pending.remove(&(ev.pid, ev.tid)),
                    Some(_) => None,
                };
                if let Some(t) = conn.open_on.take() {
                    // The response starts: the request is no longer being served.
                    close_open(&mut self.threads, t, key);
                    return;
                }
                if !conn.starts.is_empty() {
                    return; // a server connection's later response writes
                }
                let ngx = ngx.filter(|p| p.up == ev.sock_id);
                let parent = if let Some(p) = ngx {
                    if !turned {
                        return; // the request being written goes on: its parent stands
                    }
                    if p.ns < conn.last_in_ns {
                        Parent::ProxyUnproved // a record older than the last response's read
                    } else {
                        self.proxy_parent((ev.pid, u64::from(ev.tid)), p.down)
                    }
                } else {
                    match self.writer_parent(thread, key, turned, ev.start_ns) {
                        Some(Some(p)) => p,
                        // A continuation of the request being written: its parent stands.
                        Some(None) => return,
                        None => match self.parent_of(thread, unproved, None) {
                            // An HTTP/1 request a started goroutine writes itself, in a program
                            // whose net/http client is probed: net/http's writeLoop (started by
                            // a request, writing for any) whose write record was lost, as far
                            // as ebtop can tell. Its requests link only through roundTrip.
                            Parent::One { spawned: true, .. }
                                if turned
                                    && self.http_pids.contains(&ev.pid)
                                    && is_request_line(ev.payload) =>
                            {
                                Parent::HttpUnproved
                            }
                            p => p,
                        },
                    }
                };
                let Some(conn) = self.conns.get_mut(&key) else {
                    return;
                };
                if conn.parents.back().map(|(_, p)| p) != Some(&parent) {
                    if conn.parents.len() >= MAX_PARENTS {
                        conn.parents.pop_front();
                    }
                    conn.parents.push_back((ev.start_ns, parent));
                }
            }
        }
    }

    /// The downstream request an nginx upstream request of worker `thread` proxies: the
    /// HTTP/1 request open on downstream socket `down` (its TLS plaintext if ebtop sees
    /// that), read by that worker. nginx handles a connection's requests one at a time (a
    /// pipelined one waits in its buffer until the last is finalised), so the one open is
    /// the one the record's request belongs to. None open: unproved.
    fn proxy_parent(&self, thread: Ctx, down: u64) -> Parent {
        let tls = down | crate::event::TLS_STREAM_BIT;
        let key = if self.conns.contains_key(&tls) {
            tls
        } else {
            down
        };
        let open = self
            .conns
            .get(&key)
            .filter(|c| c.open_on == Some(thread))
            .and_then(|c| c.starts.back())
            .filter(|s| self.serves(thread, s.id));
        match open {
            Some(s) => Parent::Proxy {
                conn: key,
                id: s.id,
                trace: s.trace.clone(),
            },
            None => Parent::ProxyUnproved,
        }
    }

    /// What thread (or goroutine) `thread` serves now: its one open request, or why none.
    /// `asked_ns`: for a roundTrip at that time, a request that began after it is not the
    /// one it served then (the ask's record came late): unproved.
    fn parent_of(&self, thread: Ctx, unproved: bool, asked_ns: Option<u64>) -> Parent {
        let goroutine = thread.1 & GOROUTINE != 0;
        let none = if goroutine {
            Parent::GoroutineNone
        } else {
            Parent::None
        };
        match self.threads.get(&thread) {
            _ if unproved => Parent::GoroutineUnknown,
            Some(t) if t.multiplexed => Parent::Ambiguous,
            Some(t) => match t.open.as_slice() {
                [] if goroutine => self.spawn_parent(thread, asked_ns.is_some()),
                [] => none,
                [(_, _, _, opened)] if asked_ns.is_some_and(|at| *opened > at) => {
                    Parent::HttpUnproved
                }
                [(conn, id, trace, _)] => Parent::One {
                    conn: *conn,
                    id: *id,
                    trace: trace.clone(),
                    goroutine,
                    http: asked_ns.is_some(),
                    spawned: false,
                },
                _ => Parent::Ambiguous,
            },
            None if goroutine => self.spawn_parent(thread, asked_ns.is_some()),
            None => none,
        }
    }

    /// What goroutine `g` (serving no request it read) serves by its creation: the request
    /// its creator served then, while that is open.
    fn spawn_parent(&self, g: Ctx, http: bool) -> Parent {
        match self.spawned.map.get(&g) {
            Some(Spawned::Inherits {
                server,
                conn,
                id,
                trace,
                ..
            }) => {
                if self.serves(*server, *id) {
                    Parent::One {
                        conn: *conn,
                        id: *id,
                        trace: trace.clone(),
                        goroutine: true,
                        http,
                        spawned: true,
                    }
                } else {
                    Parent::SpawnAfterRequest
                }
            }
            Some(Spawned::Nothing) => Parent::GoroutineNone,
            Some(Spawned::Unknown) => Parent::SpawnUnknown,
            None if self.spawn_pids.contains(&g.0) => Parent::SpawnUnknown,
            None => Parent::GoroutineNone,
        }
    }

    /// Whether `thread` has request `id` open (read, its response not begun).
    fn serves(&self, thread: Ctx, id: u64) -> bool {
        self.threads
            .get(&thread)
            .is_some_and(|t| t.open.iter().any(|o| o.1 == id))
    }

    /// What a goroutine created now by goroutine `parent` inherits.
    fn inheritance(&self, parent: Ctx) -> Spawned {
        if let Some(t) = self.threads.get(&parent) {
            match t.open.as_slice() {
                _ if t.multiplexed => return Spawned::Nothing,
                [(conn, id, trace, _)] => {
                    return Spawned::Inherits {
                        server: parent,
                        conn: *conn,
                        id: *id,
                        trace: trace.clone(),
                        depth: 1,
                    }
                }
                [] => {}
                _ => return Spawned::Nothing,
            }
        }
        match self.spawned.map.get(&parent) {
            Some(Spawned::Inherits {
                server,
                conn,
                id,
                trace,
                depth,
            }) if *depth < MAX_SPAWN_DEPTH => Spawned::Inherits {
                server: *server,
                conn: *conn,
                id: *id,
                trace: trace.clone(),
                depth: depth + 1,
            },
            Some(Spawned::Inherits { .. }) | Some(Spawned::Unknown) | None => Spawned::Unknown,
            Some(Spawned::Nothing) => Spawned::Nothing,
        }
    }

    /// Goroutine `g` was created now (by a creator whose request it inherits, or not):
    /// whatever ran at its g before has ended.
    fn new_goroutine(&mut self, g: Ctx, from: Spawned) {
        if !self.spawn_pids.contains(&g.0) {
            if self.spawn_pids.len() >= MAX_THREADS {
                self.spawn_pids.clear();
                self.stats.state_resets += 1;
            }
            self.spawn_pids.insert(g.0);
        }
        self.drop_writer(g);
        self.threads.remove(&g);
        self.spawned.insert(g, from);
    }

    /// A write by `thread` on connection `key` when that goroutine runs a net/http client
    /// connection's writeLoop: `Some(Some(parent))` for a request's first write (after a
    /// read, or the first), `Some(None)` for a later write of the same request; None when
    /// the goroutine writes for no such connection (or no longer: its state is dropped).
    fn writer_parent(
        &mut self,
        thread: Ctx,
        key: u64,
        turned: bool,
        start_ns: u64,
    ) -> Option<Option<Parent>> {
        let pc = *self.go_writers.get(&thread)?;
        let serving = self
            .threads
            .get(&thread)
            .is_some_and(|t| !t.open.is_empty());
        let obj = self
            .go_conns
            .get_mut(&(thread.0, pc))
            .filter(|o| o.writer == Some(thread))?;
        if serving || obj.conn.is_some_and(|c| c != key) {
            self.drop_writer(thread);
            return None;
        }
        obj.conn = Some(key);
        if !turned {
            return Some(None);
        }
        let taken = obj
            .asks
            .iter()
            .take_while(|(at, _)| *at <= start_ns)
            .count();
        let mut asks = obj.asks.drain(..taken);
        let parent = match (asks.next(), asks.next()) {
            (Some((_, p)), None) => p,
            _ => Parent::HttpUnproved,
        };
        drop(asks);
        obj.last_write_ns = start_ns;
        Some(Some(parent))
    }

    /// Goroutine `thread` runs no writeLoop (any more).
    fn drop_writer(&mut self, thread: Ctx) {
        if let Some(pc) = self.go_writers.remove(&thread) {
            if self
                .go_conns
                .get(&(thread.0, pc))
                .is_some_and(|o| o.writer == Some(thread))
            {
                self.go_conns.remove(&(thread.0, pc));
            }
        }
    }

    /// A Go net/http client probe's record (src/bpf/gohttp.h) of process `pid` at `ns`.
    fn on_go_http(&mut self, pid: u32, ns: u64, h: GoHttp) {
        if matches!(
            h,
            GoHttp::ConnWrite { .. } | GoHttp::RoundTrip { .. } | GoHttp::WriteLoopEnd { .. }
        ) && !self.http_pids.contains(&pid)
        {
            if self.http_pids.len() >= MAX_THREADS {
                self.http_pids.clear();
                self.stats.state_resets += 1;
            }
            self.http_pids.insert(pid);
        }
        match h {
            GoHttp::Spawn { parent, child } => {
                let from = self.inheritance((pid, GOROUTINE | parent));
                self.new_goroutine((pid, GOROUTINE | child), from);
            }
            GoHttp::NewG { g } => self.new_goroutine((pid, GOROUTINE | g), Spawned::Unknown),
            GoHttp::ConnWrite { pc, g } => {
                let writer = (pid, GOROUTINE | g);
                // Each flush of a request says so again: the writer of pc already.
                if self.go_writers.get(&writer) == Some(&pc) {
                    return;
                }
                self.drop_writer(writer);
                self.bound_go_conns(pid, pc);
                let obj = self.go_conns.entry((pid, pc)).or_default();
                // An object at a reused address: its old writer writes for it no more (the
                // asks stay: more than one makes the next write's asker unproved).
                if let Some(old) = obj.writer.replace(writer) {
                    obj.conn = None;
                    self.go_writers.remove(&old);
                }
                self.go_writers.insert(writer, pc);
            }
            GoHttp::WriteLoopEnd { g } => self.drop_writer((pid, GOROUTINE | g)),
            GoHttp::RoundTrip { pc, g } => {
                let asker = (pid, GOROUTINE | g);
                // A goroutine that asks runs no writeLoop (its g was reused).
                self.drop_writer(asker);
                // What it serves now: its records came before this one (time order).
                let parent = self.parent_of(asker, false, Some(ns));
                self.bound_go_conns(pid, pc);
                let obj = self.go_conns.entry((pid, pc)).or_default();
                let parent = if ns < obj.last_write_ns {
                    Parent::HttpUnproved // came after a later request's write
                } else {
                    parent
                };
                if obj.asks.len() >= MAX_ASKS {
                    // More than one makes the next write's asker unproved: one stands for
                    // those forgotten (taken with that write, whatever its time).
                    obj.asks.clear();
                    obj.asks.push_back((0, Parent::HttpUnproved));
                }
                obj.asks.push_back((ns, parent));
            }
        }
    }

    /// Starts the Go client state over before a new object would pass its cap (counted).
    fn bound_go_conns(&mut self, pid: u32, pc: u64) {
        if self.go_conns.len() >= MAX_GO_CONNS && !self.go_conns.contains_key(&(pid, pc)) {
            self.go_conns.clear();
            self.go_writers.clear();
            self.stats.state_resets += 1;
        }
    }

    fn forget(&mut self, key: u64) {
        if let Some(c) = self.conns.remove(&key) {
            if let Some(t) = c.open_on {
                close_open(&mut self.threads, t, key);
            }
            if self.by_addr.get(&(c.local, c.peer, c.tls)) == Some(&key) {
                self.by_addr.remove(&(c.local, c.peer, c.tls));
            }
            self.stats.unconfirmed += c.starts.iter().filter(|s| s.parent_of).count() as u64;
        }
    }

    /// Sets `call`'s id, parent and trace. A client call may complete a hop: the server
    /// call it reached, if held, is pushed to `released` (to go out before this one). A
    /// server call whose client call may still come is to be held (`Disposition::Hold`).
    pub fn link(&mut self, call: &mut Call, released: &mut Vec<(Call, T)>) -> Disposition {
        let key = call.sock_id
            | if call.tls {
                crate::event::TLS_STREAM_BIT
            } else {
                0
            };
        let own = own_trace(call);
        match call.side {
            Side::Server => {
                let start = self.conns.get_mut(&key).and_then(|c| {
                    let i = c.starts.iter().rposition(|s| {
                        s.start_ns == call.l7.req.first_start_ns
                            && s.end_ns == call.l7.req.first_end_ns
                            && Some(s.seq) == call.l7.req.first_pos
                    })?;
                    // Confirmed; earlier unconfirmed starts will not be.
                    let unconfirmed = c.starts.drain(..i).filter(|s| s.parent_of).count();
                    Some((c.starts.pop_front()?, unconfirmed as u64))
                });
                let (id, start_trace) = match start {
                    Some((s, unconfirmed)) => {
                        self.stats.unconfirmed += unconfirmed;
                        (s.id, s.trace)
                    }
                    None => (self.fresh_id(), None),
                };
                call.id = id;
                call.parent_id = None;
                call.trace_id = own.or(start_trace);
                call.root_id = id;
                call.caller = None;
                if let Some(req_pos) = call.l7.req.first_pos {
                    let hop = (call.local, call.peer, call.tls, req_pos);
                    if let Some(c) = self.recent.remove(&hop) {
                        // Its client call is out already.
                        if c.resp_pos.is_some()
                            && c.resp_pos == call.l7.resp.first_pos
                            && c.method == call.l7.method
                            && c.resource == call.l7.resource
                        {
                            self.stats.hops += 1;
                            self.join(call, c.id, c.root, c.trace);
                        } else {
                            self.stats.hop_disproved += 1;
                        }
                        return Disposition::Now;
                    }
                }
                let peer_traced = call.l7.req.first_pos.is_some()
                    && call.l7.resp.first_pos.is_some()
                    && self
                        .by_addr
                        .contains_key(&(call.peer, call.local, call.tls));
                if peer_traced {
                    Disposition::Hold
                } else {
                    Disposition::Now
                }
            }
            Side::Client => {
                call.id = self.fresh_id();
                let parent = self.conns.get(&key).and_then(|c| {
                    let i = c
                        .parents
                        .partition_point(|(ns, _)| *ns <= call.l7.req.first_start_ns);
                    (i > 0).then(|| c.parents[i - 1].1.clone())
                });
                let parent = match parent {
                    Some(Parent::One { spawned: true, .. })
                        if matches!(call.l7.proto, Protocol::Http2 | Protocol::Grpc) =>
                    {
                        self.stats.spawn_multiplexed += 1;
                        Some(Parent::None)
                    }
                    p => p,
                };
                let (parent_id, trace) = match parent {
                    Some(Parent::One {
                        conn,
                        id,
                        trace,
                        goroutine,
                        http,
                        spawned,
                    }) => {
                        self.stats.linked += 1;
                        self.stats.goroutine_linked += u64::from(goroutine);
                        self.stats.http_client_linked += u64::from(http);
                        self.stats.spawn_linked += u64::from(spawned);
                        self.mark_parent(conn, id);
                        (Some(id), trace)
                    }
                    Some(Parent::Proxy { conn, id, trace }) => {
                        self.stats.linked += 1;
                        self.stats.proxy_linked += 1;
                        self.mark_parent(conn, id);
                        (Some(id), trace)
                    }
                    Some(Parent::ProxyUnproved) => {
                        self.stats.proxy_unproved += 1;
                        (None, None)
                    }
                    Some(Parent::Ambiguous) => {
                        self.stats.ambiguous += 1;
                        (None, None)
                    }
                    Some(Parent::None) => (None, None),
                    Some(Parent::GoroutineNone) => {
                        self.stats.goroutine_unlinked += 1;
                        (None, None)
                    }
                    Some(Parent::GoroutineUnknown) => {
                        self.stats.goroutine_unknown += 1;
                        (None, None)
                    }
                    Some(Parent::HttpUnproved) => {
                        self.stats.http_unproved += 1;
                        (None, None)
                    }
                    Some(Parent::SpawnAfterRequest) => {
                        self.stats.goroutine_unlinked += 1;
                        self.stats.spawn_after_parent += 1;
                        (None, None)
                    }
                    Some(Parent::SpawnUnknown) => {
                        self.stats.goroutine_unlinked += 1;
                        self.stats.spawn_unknown += 1;
                        (None, None)
                    }
                    None => {
                        self.stats.unknown_start += 1;
                        (None, None)
                    }
                };
                call.parent_id = parent_id;
                call.trace_id = own.or(trace);
                call.caller = None;
                call.root_id = match parent_id {
                    // A parent that went out already joined its caller's root.
                    Some(p) => self.joined.map.get(&p).copied().unwrap_or(p),
                    None => call.id,
                };
                if let Some(req_pos) = call.l7.req.first_pos {
                    let hop = (call.peer, call.local, call.tls, req_pos);
                    if let Some(mut h) = self.held.remove(&hop) {
                        // Both positions, and the request as both sides read it (a client
                        // pipelining across ebtop's start may pair a reply with the wrong
                        // command: its call's server call is not this one).
                        if h.resp_pos.is_some()
                            && h.resp_pos == call.l7.resp.first_pos
                            && h.call.l7.method == call.l7.method
                            && h.call.l7.resource == call.l7.resource
                        {
                            self.stats.hops += 1;
                            self.join(&mut h.call, call.id, call.root_id, call.trace_id.clone());
                        } else {
                            self.stats.hop_disproved += 1;
                        }
                        released.push((h.call, h.extra));
                    } else if call.l7.resp.first_pos.is_some()
                        && self
                            .by_addr
                            .contains_key(&(call.peer, call.local, call.tls))
                    {
                        // Its server call may still come (its write returned after this
                        // read): kept for it a while.
                        while self.recent.len() >= MAX_HELD {
                            match self.recent_order.pop_front() {
                                Some((_, k)) => {
                                    self.recent.remove(&k);
                                }
                                None => break,
                            }
                        }
                        let due_ns = call.l7.resp.last_end_ns.saturating_add(HOLD_NS);
                        self.recent.insert(
                            hop,
                            Recent {
                                id: call.id,
                                root: call.root_id,
                                resp_pos: call.l7.resp.first_pos,
                                method: call.l7.method.clone(),
                                resource: call.l7.resource.clone(),
                                trace: call.trace_id.clone(),
                                due_ns,
                            },
                        );
                        self.recent_order.push_back((due_ns, hop));
                    }
                }
                Disposition::Now
            }
        }
    }

    /// Server call `server` was reached by client call `client` (of root `root`, trace
    /// `trace`): its parent. It joins the client's root when none of its children went out
    /// yet (they would be in its own root's trace); else it keeps its own, the client call
    /// its `caller`.
    fn join(&mut self, server: &mut Call, client: u64, root: u64, trace: Option<Arc<str>>) {
        server.parent_id = Some(client);
        if server.trace_id.is_none() {
            server.trace_id = trace;
        }
        if self.parented.map.contains_key(&server.id) {
            server.caller = Some((client, root));
        } else {
            server.root_id = root;
            self.joined.insert(server.id, root);
        }
    }

    /// Marks the request start `id` of connection `conn` as a parent (its call must
    /// confirm it).
    fn mark_parent(&mut self, conn: u64, id: u64) {
        self.parented.insert(id, ());
        if let Some(s) = self
            .conns
            .get_mut(&conn)
            .and_then(|c| c.starts.iter_mut().rev().find(|s| s.id == id))
        {
            s.parent_of = true;
        }
    }

    fn fresh_id(&mut self) -> u64 {
        self.next += 1;
        mix(2, self.next, 0)
    }

    /// Holds a server call [`Chains::link`] said to hold, until its client call or `now_ns`
    /// + [`HOLD_NS`]; the oldest held goes to `released` beyond the cap.
    pub fn hold(&mut self, call: Call, extra: T, now_ns: u64, released: &mut Vec<(Call, T)>) {
        let Some(req_pos) = call.l7.req.first_pos else {
            released.push((call, extra));
            return;
        };
        let key = (call.local, call.peer, call.tls, req_pos);
        while self.held.len() >= MAX_HELD {
            match self.held_order.pop_front() {
                Some((_, k)) => self.release(&k, released),
                None => break,
            }
        }
        let due_ns = now_ns.saturating_add(HOLD_NS);
        let resp_pos = call.l7.resp.first_pos;
        if let Some(old) = self.held.insert(
            key,
            Held {
                call,
                extra,
                resp_pos,
                due_ns,
            },
        ) {
            // Same socket pair and position: an older connection's (ports reused).
            self.stats.hop_unmatched += 1;
            released.push((old.call, old.extra));
        }
        self.held_order.push_back((due_ns, key));
    }

    fn release(&mut self, key: &HopKey, released: &mut Vec<(Call, T)>) {
        if let Some(h) = self.held.remove(key) {
            self.stats.hop_unmatched += 1;
            released.push((h.call, h.extra));
        }
    }

    /// Server calls held past their due time at `now_ns` (kernel time), in the order held.
    pub fn expire(&mut self, now_ns: u64, released: &mut Vec<(Call, T)>) {
        while let Some(&(due, key)) = self.recent_order.front() {
            if due > now_ns {
                break;
            }
            self.recent_order.pop_front();
            if self.recent.get(&key).is_some_and(|c| c.due_ns == due) {
                self.recent.remove(&key);
            }
        }
        while let Some(&(due, key)) = self.held_order.front() {
            if due > now_ns {
                break;
            }
            self.held_order.pop_front();
            if self.held.get(&key).is_some_and(|h| h.due_ns == due) {
                self.release(&key, released);
            }
        }
    }

    /// Every held call (the session ends, or output is flushed).
    pub fn release_all(&mut self, released: &mut Vec<(Call, T)>) {
        while let Some((_, key)) = self.held_order.pop_front() {
            self.release(&key, released);
        }
    }

    /// Server calls held now (counted, not yet handed to the sink).
    pub fn held_count(&self) -> u64 {
        self.held.len() as u64
    }

    /// Whether any call is held or client call kept (something [`Chains::expire`] may do).
    pub fn holding(&self) -> bool {
        !self.held.is_empty() || !self.recent.is_empty()
    }
}

/// Closes the open request of connection `conn` on `thread`.
fn close_open(threads: &mut HashMap<Ctx, ThreadChain>, thread: Ctx, conn: u64) {
    if let Some(t) = threads.get_mut(&thread) {
        t.open.retain(|(c, ..)| *c != conn);
    }
}

#[cfg(test)]
mod tests;
