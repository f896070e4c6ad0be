//! The linking rules on real bytes: records through the connection tracker and its parsers,
//! then through [`Chains`] as the pipeline runs them.

use super::*;
use crate::conntrack::{ConnTracker, TrackerConfig};

const APP: u32 = 100;
const REDIS: u32 = 200;
const CLIENT: u32 = 300;

/// Sockets: (inode, local port, peer port).
const K1: (u64, u16, u16) = (11, 8080, 40001); // app's server side of client 1's connection
const K2: (u64, u16, u16) = (12, 8080, 40002);
const C1: (u64, u16, u16) = (21, 40001, 8080); // the client's side of K1
const R1: (u64, u16, u16) = (31, 50001, 6379); // app → redis, client side
const RS1: (u64, u16, u16) = (41, 6379, 50001); // redis's side of R1
const R2: (u64, u16, u16) = (32, 50002, 6379);

struct Sim {
    tracker: ConnTracker,
    chains: Chains<()>,
    out: Vec<Call>,
    now: u64,
    pos: HashMap<(u64, u8), u64>,
    /// The Go goroutine the next records carry (None: not a Go program's).
    goroutine: Option<u64>,
}

impl Sim {
    fn new() -> Sim {
        Sim {
            tracker: ConnTracker::new(TrackerConfig::default()),
            chains: Chains::new(),
            out: Vec::new(),
            now: 1_000_000,
            pos: HashMap::default(),
            goroutine: None,
        }
    }

    /// One syscall of `bytes` on socket `s` by thread `tid` of `pid`.
    fn io(&mut self, pid: u32, tid: u32, s: (u64, u16, u16), dir: Direction, bytes: &[u8]) {
        self.io_of(pid, tid, s, dir, bytes, bytes.len() as u64);
    }

    /// One syscall that moved `total` bytes, of which `bytes` were captured.
    fn io_of(
        &mut self,
        pid: u32,
        tid: u32,
        s: (u64, u16, u16),
        dir: Direction,
        bytes: &[u8],
        total: u64,
    ) {
        self.now += 10_000;
        let seq = self.pos.entry((s.0, dir as u8)).or_insert(0);
        let ev = crate::event::loopback_stream_record(
            self.now,
            s,
            *seq,
            total,
            (pid, tid),
            dir,
            bytes,
            self.goroutine,
        );
        *seq += total;
        let mut calls = Vec::new();
        self.tracker.handle(&ev, &mut calls);
        self.chains.on_record(&ev);
        let mut released = Vec::new();
        self.chains.expire(ev.end_ns, &mut released);
        self.out.extend(released.drain(..).map(|(c, ())| c));
        for mut c in calls {
            match self.chains.link(&mut c, &mut released) {
                Disposition::Hold => self.chains.hold(c, (), ev.end_ns, &mut released),
                Disposition::Now => {
                    self.out.extend(released.drain(..).map(|(c, ())| c));
                    self.out.push(c);
                }
            }
            self.out.extend(released.drain(..).map(|(c, ())| c));
        }
    }

    /// One syscall of goroutine `g` of a Go program, run by thread `tid`.
    fn go_io(&mut self, tid: u32, g: u64, s: (u64, u16, u16), dir: Direction, bytes: &[u8]) {
        self.goroutine = Some(g);
        self.io(APP, tid, s, dir, bytes);
        self.goroutine = None;
    }

    /// A Go net/http client probe's record (src/bpf/gohttp.h) of the app: probe `what`,
    /// connection object `pc`, goroutine `g`, stamped `back_ns` before now (0: now).
    fn go_http(&mut self, what: u64, pc: u64, g: u64, back_ns: u64) {
        self.now += 10_000;
        let raw = crate::event::EventBuilder::go_http(what, pc, self.now - back_ns)
            .process(APP, 7, "app")
            .build_go_http(g);
        let ev = Event::decode(&raw).expect("decodes");
        let mut calls = Vec::new();
        assert_eq!(
            self.tracker.handle(&ev, &mut calls),
            crate::conntrack::Verdict::Selected
        );
        assert!(calls.is_empty());
        self.chains.on_record(&ev);
    }

    /// An nginx upstream write's record (src/bpf/ngxchain.h) of thread `tid` of `pid`:
    /// upstream socket `up`, downstream socket `down`.
    fn ngx(&mut self, pid: u32, tid: u32, up: u64, down: u64) {
        self.now += 10_000;
        let raw = crate::event::EventBuilder::nginx_upstream(up, self.now)
            .process(pid, tid, "nginx")
            .build(&down.to_le_bytes());
        let ev = Event::decode(&raw).expect("decodes");
        let mut calls = Vec::new();
        assert_eq!(
            self.tracker.handle(&ev, &mut calls),
            crate::conntrack::Verdict::Selected
        );
        assert!(calls.is_empty());
        self.chains.on_record(&ev);
    }

    fn finish(&mut self) {
        let mut released = Vec::new();
        self.chains.release_all(&mut released);
        self.out.extend(released.into_iter().map(|(c, ())| c));
    }

    fn calls(&self, side: Side, method: &str, resource: &str) -> Vec<&Call> {
        self.out
            .iter()
            .filter(|c| c.side == side && c.l7.method == method && c.l7.resource == resource)
            .collect()
    }

    fn one(&self, side: Side, method: &str, resource: &str) -> &Call {
        let v = self.calls(side, method, resource);
        assert_eq!(v.len(), 1, "{side:?} {method} {resource}: {:#?}", self.out);
        v[0]
    }
}

use Direction::{Egress as OUT, Ingress as IN};

fn get(path: &str, extra: &str) -> Vec<u8> {
    format!("GET {path} HTTP/1.1\r\nHost: app\r\n{extra}\r\n").into_bytes()
}
const OK: &[u8] = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok";

fn redis_get(key: &str) -> Vec<u8> {
    format!("*2\r\n$3\r\nGET\r\n${}\r\n{key}\r\n", key.len()).into_bytes()
}

/// A request served by one thread, which calls Redis twice meanwhile: both calls are its
/// children; the server call's id is the one they name; a call after the response is none's.
#[test]
fn a_threads_client_calls_are_children_of_the_request_it_serves() {
    let mut s = Sim::new();
    s.io(APP, 7, K1, IN, &get("/a", ""));
    s.io(APP, 7, R1, OUT, &redis_get("a1"));
    s.io(APP, 7, R1, IN, b"$-1\r\n");
    s.io(APP, 7, R1, OUT, &redis_get("a2"));
    s.io(APP, 7, R1, IN, b"$1\r\nx\r\n");
    s.io(APP, 7, K1, OUT, OK);
    s.io(APP, 7, R1, OUT, &redis_get("after"));
    s.io(APP, 7, R1, IN, b"$-1\r\n");
    s.finish();
    let server = s.one(Side::Server, "GET", "/a");
    assert_eq!(server.id, server_id(K1.0, 0));
    assert_eq!(server.parent_id, None);
    for key in ["a1", "a2"] {
        let c = s.one(Side::Client, "GET", key);
        assert_eq!(c.parent_id, Some(server.id), "{key}");
        assert_ne!(c.id, server.id);
    }
    assert_eq!(s.one(Side::Client, "GET", "after").parent_id, None);
    assert_eq!(s.chains.stats.linked, 2);
    assert_eq!(s.chains.stats.unconfirmed, 0);
}

/// A thread reused for the next request on the same connection, then on another
/// connection: each request's calls go under it, never under the one before.
#[test]
fn a_reused_thread_links_each_call_to_its_own_request() {
    let mut s = Sim::new();
    for (i, k) in [(1, K1), (2, K1), (3, K2)] {
        let path = format!("/r{i}");
        s.io(APP, 7, k, IN, &get(&path, ""));
        s.io(APP, 7, R1, OUT, &redis_get(&format!("k{i}")));
        s.io(APP, 7, R1, IN, b"$-1\r\n");
        s.io(APP, 7, k, OUT, OK);
    }
    s.finish();
    for i in 1..=3 {
        let server = s.one(Side::Server, "GET", &format!("/r{i}"));
        let c = s.one(Side::Client, "GET", &format!("k{i}"));
        assert_eq!(c.parent_id, Some(server.id), "request {i}");
    }
    let ids: std::collections::HashSet<u64> = s.out.iter().map(|c| c.id).collect();
    assert_eq!(ids.len(), s.out.len(), "ids unique");
}

/// An event loop: one thread with two requests open gives no link, and none from then on
/// (which request a later call serves is not in its syscalls); counted.
#[test]
fn a_thread_with_two_requests_open_links_nothing() {
    let mut s = Sim::new();
    s.io(APP, 9, K1, IN, &get("/x", ""));
    s.io(APP, 9, K2, IN, &get("/y", ""));
    s.io(APP, 9, R1, OUT, &redis_get("both"));
    s.io(APP, 9, R1, IN, b"$-1\r\n");
    s.io(APP, 9, K1, OUT, OK);
    s.io(APP, 9, K2, OUT, OK);
    // Later, one request open: still an event loop's thread.
    s.io(APP, 9, K1, IN, &get("/z", ""));
    s.io(APP, 9, R2, OUT, &redis_get("later"));
    s.io(APP, 9, R2, IN, b"$-1\r\n");
    s.io(APP, 9, K1, OUT, OK);
    s.finish();
    assert_eq!(s.one(Side::Client, "GET", "both").parent_id, None);
    assert_eq!(s.one(Side::Client, "GET", "later").parent_id, None);
    assert_eq!(s.chains.stats.ambiguous, 2);
    assert_eq!(s.chains.stats.linked, 0);
}

/// Two threads of one process, each serving its own request, interleaved: each thread's
/// calls under its own request (a connection pool's connection used by both in turn).
#[test]
fn interleaved_threads_each_link_to_their_own_request() {
    let mut s = Sim::new();
    s.io(APP, 7, K1, IN, &get("/t7", ""));
    s.io(APP, 8, K2, IN, &get("/t8", ""));
    s.io(APP, 8, R1, OUT, &redis_get("by8"));
    s.io(APP, 8, R1, IN, b"$-1\r\n");
    s.io(APP, 7, R1, OUT, &redis_get("by7"));
    s.io(APP, 7, R1, IN, b"$-1\r\n");
    s.io(APP, 8, K2, OUT, OK);
    s.io(APP, 7, K1, OUT, OK);
    s.finish();
    let t7 = s.one(Side::Server, "GET", "/t7").id;
    let t8 = s.one(Side::Server, "GET", "/t8").id;
    assert_eq!(s.one(Side::Client, "GET", "by7").parent_id, Some(t7));
    assert_eq!(s.one(Side::Client, "GET", "by8").parent_id, Some(t8));
}

/// A hop on this host: the app's Redis call and Redis's server call of the same command,
/// matched by both stream positions; Redis's call goes out (held) just before the app's.
#[test]
fn a_client_call_and_the_server_call_it_reached_are_one_hop() {
    let mut s = Sim::new();
    s.io(APP, 7, K1, IN, &get("/h", TRACE));
    for key in ["h1", "h2"] {
        s.io(APP, 7, R1, OUT, &redis_get(key));
        s.io(REDIS, 1, RS1, IN, &redis_get(key));
        s.io(REDIS, 1, RS1, OUT, b"$-1\r\n");
        s.io(APP, 7, R1, IN, b"$-1\r\n");
    }
    s.io(APP, 7, K1, OUT, OK);
    s.finish();
    let server = s.one(Side::Server, "GET", "/h");
    for key in ["h1", "h2"] {
        let c = s.one(Side::Client, "GET", key);
        let redis = s
            .out
            .iter()
            .find(|x| x.side == Side::Server && x.l7.resource == key)
            .unwrap();
        assert_eq!(c.parent_id, Some(server.id));
        assert_eq!(redis.parent_id, Some(c.id), "{key}");
        // The trace id goes down the chain: the request's header, its calls, their hop.
        assert_eq!(redis.trace_id.as_deref(), Some(TRACE_ID));
        let at = |id| s.out.iter().position(|x| x.id == id).unwrap();
        assert_eq!(at(redis.id) + 1, at(c.id));
    }
    assert_eq!(server.trace_id.as_deref(), Some(TRACE_ID));
    assert_eq!(s.chains.stats.hops, 2);
    assert_eq!(s.chains.stats.hop_unmatched, 0);
}

const TRACE: &str = "traceparent: 00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01\r\n";
const TRACE_ID: &str = "4bf92f3577b34da6a3ce929d0e0e4736";

/// The hop's two sides counted from different points of the request stream: a pipelining
/// client wrote "old" before ebtop saw its socket and "new" after, the server read both
/// after. The server's call of "old" and the client's of "new" (paired, unavoidably, with
/// the reply to "old") agree on both positions; the command tells them apart — no link,
/// counted.
#[test]
fn positions_counted_from_different_points_are_no_hop() {
    let mut s = Sim::new();
    s.io(APP, 7, R1, OUT, &redis_get("new"));
    let both = [redis_get("old"), redis_get("new")].concat();
    s.io(REDIS, 1, RS1, IN, &both);
    s.io(REDIS, 1, RS1, OUT, b"$-1\r\n");
    s.io(REDIS, 1, RS1, OUT, b"$1\r\nx\r\n");
    s.io(APP, 7, R1, IN, b"$-1\r\n");
    s.finish();
    let old = s.one(Side::Server, "GET", "old");
    let new = s.one(Side::Client, "GET", "new");
    assert_eq!(
        (old.l7.req.first_pos, new.l7.req.first_pos),
        (Some(0), Some(0))
    );
    assert_eq!(
        (old.l7.resp.first_pos, new.l7.resp.first_pos),
        (Some(0), Some(0))
    );
    assert!(s.out.iter().all(|c| c.parent_id.is_none()), "{:#?}", s.out);
    assert_eq!(s.chains.stats.hop_disproved, 1);
    assert_eq!(s.chains.stats.hops, 0);
}

/// A server call whose client never completes goes out unlinked after `HOLD_NS`.
#[test]
fn a_held_server_call_goes_out_without_its_client_call() {
    let mut s = Sim::new();
    s.io(APP, 7, R1, OUT, &redis_get("lost"));
    s.io(REDIS, 1, RS1, IN, &redis_get("lost"));
    s.io(REDIS, 1, RS1, OUT, b"$-1\r\n");
    assert!(s.calls(Side::Server, "GET", "lost").is_empty(), "held");
    s.now += HOLD_NS;
    s.io(APP, 7, R2, OUT, &redis_get("later"));
    let redis = s.one(Side::Server, "GET", "lost");
    assert_eq!(redis.parent_id, None);
    assert_eq!(s.chains.stats.hop_unmatched, 1);
}

/// A request-id header is the trace id when no `traceparent` is; a client calling from the
/// request carries it; a malformed `traceparent` is none.
#[test]
fn request_ids_and_traceparents_give_the_trace_id() {
    let mut s = Sim::new();
    s.io(APP, 7, K1, IN, &get("/rid", "X-Request-Id: req-42\r\n"));
    s.io(APP, 7, R1, OUT, &redis_get("rid"));
    s.io(APP, 7, R1, IN, b"$-1\r\n");
    s.io(APP, 7, K1, OUT, OK);
    s.io(
        APP,
        7,
        K1,
        IN,
        &get("/bad", "traceparent: 00-zz-00f067aa0ba902b7-01\r\n"),
    );
    s.io(APP, 7, K1, OUT, OK);
    s.finish();
    assert_eq!(
        s.one(Side::Server, "GET", "/rid").trace_id.as_deref(),
        Some("req-42")
    );
    assert_eq!(
        s.one(Side::Client, "GET", "rid").trace_id.as_deref(),
        Some("req-42")
    );
    assert_eq!(s.one(Side::Server, "GET", "/bad").trace_id, None);
    assert_eq!(
        request_trace(format!("GET / HTTP/1.1\r\n{TRACE}X-Request-Id: r\r\n\r\n").as_bytes())
            .as_deref(),
        Some(TRACE_ID)
    );
}

/// The client side of an HTTP exchange on this host, under the app's request, and the hop
/// from the client's call to it (the load generator's call is the app call's parent).
#[test]
fn an_http_hop_links_the_app_call_under_its_callers_call() {
    let mut s = Sim::new();
    let req = get("/up", "");
    s.io(CLIENT, 1, C1, OUT, &req);
    s.io(APP, 7, K1, IN, &req);
    s.io(APP, 7, R1, OUT, &redis_get("u"));
    s.io(APP, 7, R1, IN, b"$-1\r\n");
    s.io(APP, 7, K1, OUT, OK);
    s.io(CLIENT, 1, C1, IN, OK);
    s.finish();
    let caller = s.one(Side::Client, "GET", "/up");
    let app = s.one(Side::Server, "GET", "/up");
    assert_eq!(app.parent_id, Some(caller.id));
    assert_eq!(s.one(Side::Client, "GET", "u").parent_id, Some(app.id));
    // Roots (an exported chain's trace): the app call's child went out before the hop was
    // known, in the app call's root; so the app call keeps it, its caller a link.
    assert_eq!(s.one(Side::Client, "GET", "u").root_id, app.id);
    assert_eq!(app.root_id, app.id);
    assert_eq!(app.caller, Some((caller.id, caller.id)));
    assert_eq!(caller.root_id, caller.id);
}

/// A chain's calls share a root where the hops allow it: a leaf server call (Redis's) joins
/// its caller's root whether it completes before or after it, so the request, the app's
/// Redis calls and Redis's calls are one exported trace.
#[test]
fn leaf_hops_join_their_callers_root() {
    let mut s = Sim::new();
    s.io(APP, 7, K1, IN, &get("/r", ""));
    s.io(APP, 7, R1, OUT, &redis_get("a"));
    s.io(REDIS, 1, RS1, IN, &redis_get("a"));
    s.io(REDIS, 1, RS1, OUT, b"$-1\r\n");
    s.io(APP, 7, R1, IN, b"$-1\r\n");
    s.io(APP, 7, R1, OUT, &redis_get("b"));
    s.io(REDIS, 1, RS1, IN, &redis_get("b"));
    s.io(APP, 7, R1, IN, b"$-1\r\n"); // the client's read returns first
    s.io(REDIS, 1, RS1, OUT, b"$-1\r\n");
    s.io(APP, 7, K1, OUT, OK);
    s.finish();
    let app = s.one(Side::Server, "GET", "/r");
    assert_eq!(app.root_id, app.id);
    for key in ["a", "b"] {
        let c = s.one(Side::Client, "GET", key);
        let redis = s
            .out
            .iter()
            .find(|x| x.side == Side::Server && x.l7.resource == key)
            .unwrap();
        assert_eq!(redis.parent_id, Some(c.id), "{key}");
        assert_eq!((c.root_id, redis.root_id), (app.id, app.id), "{key}");
        assert_eq!(redis.caller, None);
    }
}

#[test]
fn request_lines_are_told_from_bodies_and_responses() {
    assert!(is_request_line(b"GET / HTTP/1.1\r\n"));
    assert!(is_request_line(b"M-SEARCH * HTTP/1.1\r\n"));
    assert!(!is_request_line(b"HTTP/1.1 200 OK\r\n"));
    assert!(!is_request_line(b"GET / HTTP/1.1")); // the line not whole
    assert!(!is_request_line(b"{\"GET / HTTP/1.1\r\n"));
    assert!(!is_request_line(b""));
}

/// The client's read of the reply may return before the server's write does (the reader
/// wakes inside the writer's send): the client call completes first and the server call,
/// when it comes, still finds it.
#[test]
fn a_client_call_completed_before_its_server_call_is_still_one_hop() {
    let mut s = Sim::new();
    s.io(APP, 7, R1, OUT, &redis_get("early"));
    s.io(REDIS, 1, RS1, IN, &redis_get("early"));
    s.io(APP, 7, R1, IN, b"$-1\r\n");
    s.io(REDIS, 1, RS1, OUT, b"$-1\r\n");
    s.finish();
    let c = s.one(Side::Client, "GET", "early");
    let redis = s.one(Side::Server, "GET", "early");
    assert_eq!(redis.parent_id, Some(c.id));
    assert_eq!(s.chains.stats.hops, 1);
}

/// Every call of a protocol's captured traffic (real bytes, its fixtures) is one hop when
/// both ends are on this host: the fixture's syscalls replayed as the client's, the same
/// bytes read and written by the server in other syscall boundaries (cut at `cuts`, cycled:
/// a server reading a length apart from its body, a byte at a time, or more at once), the
/// two views interleaved as the exchange goes. The parsers must give both sides the same
/// request and response positions (and method and resource): every server call under the
/// client call of the same exchange, none unmatched or disproved. A syscall captured in
/// part is the same syscall on both sides.
/// `starts(request, at)`: the request (true) or response stream's bytes from a call's position
/// start a message of that kind (the positions are message starts, not merely agreed on).
fn hops_of_fixture(
    folder: &str,
    name: &str,
    port: u16,
    cuts: &[usize],
    starts: fn(bool, &[u8]) -> bool,
) -> usize {
    let f = crate::protocols::fixture_support::load(folder, name);
    let client = (61, 40000, port);
    let server = (62, port, 40000);
    let mut s = Sim::new();
    let mut cut = cuts.iter().copied().cycle();
    let mut seen = [false; 2];
    for e in &f.entries {
        let (c_dir, s_dir) = if e.to_server { (OUT, IN) } else { (IN, OUT) };
        if e.bytes.len() as u64 != e.total_len {
            // Captured in part (beyond the fixture's snaplen): the same syscall both ways.
            let (first, then) = if e.to_server {
                ((APP, 7, client, c_dir), (REDIS, 1, server, s_dir))
            } else {
                ((REDIS, 1, server, s_dir), (APP, 7, client, c_dir))
            };
            for (pid, tid, sock, dir) in [first, then] {
                s.io_of(pid, tid, sock, dir, &e.bytes, e.total_len);
            }
            seen[s_dir.index()] = true;
            continue;
        }
        // The server's view: its first syscall each way whole (what detection reads), then
        // cut.
        let mut pieces = Vec::new();
        let mut rest = &e.bytes[..];
        while !rest.is_empty() {
            let n = if seen[s_dir.index()] {
                cut.next().unwrap().clamp(1, rest.len())
            } else {
                rest.len()
            };
            seen[s_dir.index()] = true;
            pieces.push(&rest[..n]);
            rest = &rest[n..];
        }
        if e.to_server {
            s.io(APP, 7, client, c_dir, &e.bytes);
            for p in pieces {
                s.io(REDIS, 1, server, s_dir, p);
            }
        } else {
            for p in pieces {
                s.io(REDIS, 1, server, s_dir, p);
            }
            s.io(APP, 7, client, c_dir, &e.bytes);
        }
    }
    s.finish();
    // Each direction's bytes as the client moved them (unseen bytes as zeros).
    let mut stream = [Vec::new(), Vec::new()];
    for e in &f.entries {
        let st = &mut stream[usize::from(!e.to_server)];
        st.extend_from_slice(&e.bytes);
        st.resize(st.len() + (e.total_len as usize - e.bytes.len()), 0);
    }
    let side = |side: Side| -> Vec<&Call> { s.out.iter().filter(|c| c.side == side).collect() };
    let (clients, servers) = (side(Side::Client), side(Side::Server));
    assert!(!clients.is_empty(), "{name}: calls");
    assert_eq!(clients.len(), servers.len(), "{name}: {:#?}", s.out);
    let by_id: HashMap<u64, &Call> = clients.iter().map(|c| (c.id, *c)).collect();
    for sc in &servers {
        let Some(cc) = sc.parent_id.and_then(|p| by_id.get(&p)) else {
            panic!("{name}: server call without its client call: {sc:#?}");
        };
        let (Some(req), Some(resp)) = (sc.l7.req.first_pos, sc.l7.resp.first_pos) else {
            panic!("{name}: positions: {sc:#?}");
        };
        assert!(
            starts(true, &stream[0][req as usize..]) && starts(false, &stream[1][resp as usize..]),
            "{name}: {} {} at {req}/{resp} is no message start",
            sc.l7.method,
            sc.l7.resource
        );
        assert_eq!(
            (
                &cc.l7.method,
                &cc.l7.resource,
                cc.l7.req.first_pos,
                cc.l7.resp.first_pos
            ),
            (
                &sc.l7.method,
                &sc.l7.resource,
                sc.l7.req.first_pos,
                sc.l7.resp.first_pos
            ),
            "{name}"
        );
    }
    let st = s.chains.stats;
    assert_eq!(
        (st.hops, st.hop_unmatched, st.hop_disproved),
        (servers.len() as u64, 0, 0),
        "{name}"
    );
    servers.len()
}

/// Server syscall boundaries the hop tests replay: lengths read apart, single bytes, more.
const CUTS: &[usize] = &[4, 1, 9, 300, 2, 4096, 5];

fn fixtures_of(folder: &str) -> Vec<String> {
    let dir = format!(
        "{}/src/protocols/{folder}/fixtures",
        env!("CARGO_MANIFEST_DIR")
    );
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".seg"))
        .collect();
    v.sort();
    v
}

#[test]
fn postgres_calls_are_hops_on_both_sides() {
    for name in fixtures_of("postgres") {
        hops_of_fixture("postgres", &name, 5432, CUTS, |req, b| {
            // A frontend message that begins a call, a backend message of a reply.
            let ty = b[0];
            (if req {
                &b"QPBDEF"[..]
            } else {
                &b"123tnTDCIEsZ"[..]
            })
            .contains(&ty)
                && u32::from_be_bytes([b[1], b[2], b[3], b[4]]) >= 4
        });
    }
}

#[test]
fn mysql_calls_are_hops_on_both_sides() {
    for name in fixtures_of("mysql") {
        hops_of_fixture("mysql", &name, 3306, CUTS, |req, b| {
            // A packet's sequence id: 0 starts a command, 1 its reply.
            b.len() > 4 && b[3] == u8::from(!req)
        });
    }
}

#[test]
fn memcached_calls_are_hops_on_both_sides() {
    for name in fixtures_of("memcached") {
        hops_of_fixture("memcached", &name, 11211, CUTS, |req, b| {
            // Binary: the request or response magic; text: a command word or a reply line.
            let word = b
                .iter()
                .take_while(|c| c.is_ascii_alphanumeric() || **c == b'_')
                .count();
            b[0] == if req { 0x80 } else { 0x81 }
                || (word > 0 && matches!(b.get(word), Some(b' ' | b'\r' | b'\n')))
        });
    }
}

#[test]
fn kafka_calls_are_hops_on_both_sides() {
    for name in fixtures_of("kafka") {
        hops_of_fixture("kafka", &name, 9092, CUTS, |req, b| {
            // A length, then a request's api key and version or a response's correlation id.
            let len = u32::from_be_bytes([b[0], b[1], b[2], b[3]]) as usize;
            len >= 4 && len <= b.len() - 4 && (!req || (b[4] == 0 && b[6] == 0))
        });
    }
}

#[test]
fn mongodb_calls_are_hops_on_both_sides() {
    for name in fixtures_of("mongodb") {
        hops_of_fixture("mongodb", &name, 27017, CUTS, |_, b| {
            // The message header: its length and an opcode (OP_MSG, OP_QUERY, OP_REPLY).
            let len = u32::from_le_bytes([b[0], b[1], b[2], b[3]]) as usize;
            let op = i32::from_le_bytes([b[12], b[13], b[14], b[15]]);
            len >= 16 && len <= b.len() && [1, 2004, 2013].contains(&op)
        });
    }
}

#[test]
fn http2_calls_are_hops_on_both_sides() {
    for name in fixtures_of("http2") {
        hops_of_fixture("http2", &name, 8443, CUTS, |_, b| {
            // A frame header: a HEADERS frame (type 1) of a client-opened stream (odd id).
            b.len() >= 9 && b[3] == 1 && b[8] & 1 == 1
        });
    }
}

/// Go: goroutines take turns on threads and move between them. Each goroutine's calls go
/// under the request it read, whichever thread ran them; a thread that ran two goroutines
/// serving two requests is no event loop.
#[test]
fn a_goroutines_calls_go_under_its_request_whichever_thread_runs_them() {
    let mut s = Sim::new();
    const G1: u64 = 0xc000_1000;
    const G2: u64 = 0xc000_2000;
    s.go_io(7, G1, K1, IN, &get("/g1", ""));
    s.go_io(7, G2, K2, IN, &get("/g2", ""));
    s.go_io(8, G1, R1, OUT, &redis_get("by-g1"));
    s.go_io(7, G1, R1, IN, b"$-1\r\n");
    s.go_io(7, G2, R2, OUT, &redis_get("by-g2"));
    s.go_io(8, G2, R2, IN, b"$-1\r\n");
    s.go_io(9, G1, K1, OUT, OK);
    s.go_io(9, G2, K2, OUT, OK);
    s.finish();
    let g1 = s.one(Side::Server, "GET", "/g1").id;
    let g2 = s.one(Side::Server, "GET", "/g2").id;
    assert_eq!(s.one(Side::Client, "GET", "by-g1").parent_id, Some(g1));
    assert_eq!(s.one(Side::Client, "GET", "by-g2").parent_id, Some(g2));
    let st = s.chains.stats;
    assert_eq!((st.linked, st.goroutine_linked, st.ambiguous), (2, 2, 0));
}

/// A goroutine the handler started serves no request it read: its call is no one's, counted, even on the thread that runs the handler. A record
/// of a Go program without a proved goroutine (cgo's C code) links nothing, not even to a
/// request its own thread read without one: the thread is not what serves in Go.
#[test]
fn a_goroutine_serving_nothing_links_nothing_and_is_counted() {
    let mut s = Sim::new();
    const HANDLER: u64 = 0xc000_1000;
    const STARTED: u64 = 0xc000_3000;
    s.go_io(7, HANDLER, K1, IN, &get("/h", ""));
    s.go_io(7, STARTED, R1, OUT, &redis_get("fanout"));
    s.go_io(7, STARTED, R1, IN, b"$-1\r\n");
    s.io(APP, 7, R2, OUT, &redis_get("cgo"));
    s.io(APP, 7, R2, IN, b"$-1\r\n");
    s.go_io(7, HANDLER, R1, OUT, &redis_get("own"));
    s.go_io(7, HANDLER, R1, IN, b"$-1\r\n");
    s.go_io(7, HANDLER, K1, OUT, OK);
    s.io(APP, 7, K2, IN, &get("/cgo", ""));
    s.io(APP, 7, R2, OUT, &redis_get("cgo-2"));
    s.io(APP, 7, R2, IN, b"$-1\r\n");
    s.io(APP, 7, K2, OUT, OK);
    s.finish();
    assert_eq!(s.one(Side::Client, "GET", "cgo-2").parent_id, None);
    let h = s.one(Side::Server, "GET", "/h").id;
    assert_eq!(s.one(Side::Client, "GET", "fanout").parent_id, None);
    assert_eq!(s.one(Side::Client, "GET", "cgo").parent_id, None);
    assert_eq!(s.one(Side::Client, "GET", "own").parent_id, Some(h));
    let st = s.chains.stats;
    assert_eq!(
        (st.linked, st.goroutine_linked, st.goroutine_unlinked),
        (1, 1, 1)
    );
    assert_eq!(st.goroutine_unknown, 2);
}

/// Go's net/http reads the next request's first byte in a goroutine of its own
/// (`backgroundRead`) while the previous response goes out; the serving goroutine reads the
/// rest. The request starts at the first byte's position (its call's id) and is served by
/// the goroutine that read the rest of its line.
#[test]
fn a_request_line_split_across_two_reads_is_served_by_the_second_reader() {
    let mut s = Sim::new();
    const SERVE: u64 = 0xc000_1000;
    const BACKGROUND: u64 = 0xc000_4000;
    s.go_io(7, SERVE, K1, IN, &get("/first", ""));
    s.go_io(7, SERVE, K1, OUT, OK);
    let next = get("/second", "");
    s.go_io(8, BACKGROUND, K1, IN, &next[..1]);
    s.go_io(7, SERVE, K1, IN, &next[1..]);
    s.go_io(7, SERVE, R1, OUT, &redis_get("for-second"));
    s.go_io(7, SERVE, R1, IN, b"$-1\r\n");
    s.go_io(7, SERVE, K1, OUT, OK);
    // A short read that is no request line's start starts nothing.
    s.go_io(8, BACKGROUND, K1, IN, b"x");
    s.go_io(7, SERVE, K1, IN, &get("/third", "")[1..]);
    s.go_io(7, SERVE, R2, OUT, &redis_get("after-junk"));
    s.go_io(7, SERVE, R2, IN, b"$-1\r\n");
    s.finish();
    let second = s.one(Side::Server, "GET", "/second");
    let at = get("/first", "").len() as u64;
    assert_eq!(
        second.id,
        server_id(K1.0, at),
        "its id: the first byte's position"
    );
    assert_eq!(
        s.one(Side::Client, "GET", "for-second").parent_id,
        Some(second.id)
    );
    assert_eq!(s.one(Side::Client, "GET", "after-junk").parent_id, None);
    assert_eq!(s.chains.stats.unconfirmed, 0);
}

/// net/http's client: `GoHttp` probes' `what`.
const CONN_WRITE: u64 = 1;
const ROUND_TRIP: u64 = 2;
const WRITE_LOOP_END: u64 = 3;
/// The app's client connections to a backend on port 9000, and the backend's sides.
const B1: (u64, u16, u16) = (51, 50010, 9000);
const B2: (u64, u16, u16) = (52, 50011, 9000);
/// Connection objects (`*persistConn`) and goroutines of the app.
const P1: u64 = 0xc000_a000;
const P2: u64 = 0xc000_b000;
const H1: u64 = 0xc000_1000;
const H2: u64 = 0xc000_2000;
const W1: u64 = 0xc000_5000;
const W2: u64 = 0xc000_6000;
const R: u64 = 0xc000_7000; // readLoop: reads the responses

/// A request made through net/http's client is written by its connection's writeLoop
/// goroutine: it is the call of the goroutine whose roundTrip asked for it (the one since the
/// connection's previous request), under the request that goroutine serves — two handlers
/// taking turns on one keep-alive connection older than ebtop, each request in two writes
/// (head, body; the writer's flush says it writes for that connection before each).
#[test]
fn an_http_client_request_is_the_call_of_the_goroutine_that_asked_for_it() {
    let mut s = Sim::new();
    s.go_io(7, H1, K1, IN, &get("/a", ""));
    s.go_io(8, H2, K2, IN, &get("/b", ""));
    // A connection older than ebtop: its writer wrote before any probe record.
    s.go_io(9, W1, B1, OUT, &get("/before", ""));
    s.go_io(9, R, B1, IN, OK);
    // H1 asks; its writer says so at its first flush, right before the write.
    s.go_http(ROUND_TRIP, P1, H1, 0);
    s.go_http(CONN_WRITE, P1, W1, 0);
    let post = b"POST /for-a HTTP/1.1\r\nHost: b\r\nContent-Length: 4\r\n\r\n";
    s.go_io(9, W1, B1, OUT, post);
    s.go_io(9, W1, B1, OUT, b"body");
    s.go_io(7, R, B1, IN, OK);
    s.go_http(ROUND_TRIP, P1, H2, 0);
    s.go_http(CONN_WRITE, P1, W1, 0);
    s.go_io(7, W1, B1, OUT, &get("/for-b", ""));
    s.go_io(9, R, B1, IN, OK);
    s.go_io(7, H1, K1, OUT, OK);
    s.go_io(8, H2, K2, OUT, OK);
    s.finish();
    let a = s.one(Side::Server, "GET", "/a").id;
    let b = s.one(Side::Server, "GET", "/b").id;
    assert_eq!(s.one(Side::Client, "POST", "/for-a").parent_id, Some(a));
    assert_eq!(s.one(Side::Client, "GET", "/for-b").parent_id, Some(b));
    let st = s.chains.stats;
    assert_eq!(
        (st.linked, st.goroutine_linked, st.http_client_linked),
        (2, 2, 2)
    );
    assert_eq!(
        (st.http_unproved, st.goroutine_unlinked),
        (0, 1),
        "/before: no asker"
    );
    assert_eq!(s.one(Side::Client, "GET", "/before").parent_id, None);
}

/// Whenever which roundTrip asked is not proved, no link, counted: no roundTrip since the
/// connection's previous request (a probe record lost, or the connection older than ebtop),
/// two of them, or one stamped before the previous request's write (its record came late).
/// A goroutine the handler started asks for nothing its handler serves.
#[test]
fn an_http_client_request_whose_asker_is_not_proved_links_nothing() {
    let mut s = Sim::new();
    s.go_io(7, H1, K1, IN, &get("/a", ""));
    s.go_io(8, H2, K2, IN, &get("/b", ""));
    s.go_http(CONN_WRITE, P1, W1, 0);
    // No ask.
    s.go_io(9, W1, B1, OUT, &get("/unasked", ""));
    s.go_io(9, R, B1, IN, OK);
    // Two asks, one write: whose is it?
    s.go_http(ROUND_TRIP, P1, H1, 0);
    s.go_http(ROUND_TRIP, P1, H2, 0);
    s.go_io(9, W1, B1, OUT, &get("/two-asks", ""));
    s.go_io(9, R, B1, IN, OK);
    // The next write takes none of those.
    s.go_io(9, W1, B1, OUT, &get("/after-two", ""));
    s.go_io(9, R, B1, IN, OK);
    // An ask stamped before the last write, whose record came after it.
    s.go_http(ROUND_TRIP, P1, H1, 25_000);
    s.go_io(9, W1, B1, OUT, &get("/late", ""));
    s.go_io(9, R, B1, IN, OK);
    // A goroutine the handler started asks.
    const STARTED: u64 = 0xc000_3000;
    s.go_http(ROUND_TRIP, P1, STARTED, 0);
    s.go_io(9, W1, B1, OUT, &get("/fanout", ""));
    s.go_io(9, R, B1, IN, OK);
    // Asked before the request its goroutine serves began (its record came late).
    s.go_io(7, H1, K1, OUT, OK);
    s.go_io(7, H1, K1, IN, &get("/a2", ""));
    s.go_http(ROUND_TRIP, P1, H1, 15_000);
    s.go_io(9, W1, B1, OUT, &get("/before-a2", ""));
    s.go_io(9, R, B1, IN, OK);
    s.go_io(7, H1, K1, OUT, OK);
    s.go_io(8, H2, K2, OUT, OK);
    s.finish();
    for r in [
        "/unasked",
        "/two-asks",
        "/after-two",
        "/late",
        "/fanout",
        "/before-a2",
    ] {
        assert_eq!(s.one(Side::Client, "GET", r).parent_id, None, "{r}");
    }
    let st = s.chains.stats;
    assert_eq!((st.linked, st.http_client_linked), (0, 0));
    assert_eq!((st.http_unproved, st.goroutine_unlinked), (5, 1));
}

/// A writeLoop goroutine writes for its connection only while it runs: once it returned, or
/// once its goroutine (its `g`, which Go reuses) is seen serving a request or writing on
/// another connection, its writes are its own again; and a connection object at a reused
/// address has a new writer.
#[test]
fn a_writeloop_that_ended_or_whose_goroutine_was_reused_writes_for_no_asker() {
    let mut s = Sim::new();
    s.go_io(7, H1, K1, IN, &get("/a", ""));
    s.go_http(CONN_WRITE, P1, W1, 0);
    s.go_http(ROUND_TRIP, P1, H1, 0);
    s.go_io(9, W1, B1, OUT, &get("/by-w1", ""));
    s.go_io(9, R, B1, IN, OK);
    s.go_http(WRITE_LOOP_END, 0, W1, 0);
    // W1's g runs a goroutine the handler started, which calls Redis: no asker's.
    s.go_http(ROUND_TRIP, P1, H1, 0);
    s.go_io(9, W1, R1, OUT, &redis_get("w1-reused"));
    s.go_io(9, W1, R1, IN, b"$-1\r\n");
    // A writeLoop on P2 whose goroutine then writes elsewhere: no longer P2's writer.
    s.go_http(CONN_WRITE, P2, W2, 0);
    s.go_http(ROUND_TRIP, P2, H1, 0);
    s.go_io(9, W2, B2, OUT, &get("/by-w2", ""));
    s.go_io(9, R, B2, IN, OK);
    s.go_http(ROUND_TRIP, P2, H1, 0);
    s.go_io(9, W2, R2, OUT, &redis_get("w2-elsewhere"));
    s.go_io(9, W2, R2, IN, b"$-1\r\n");
    s.go_io(9, W2, B2, OUT, &get("/w2-dropped", ""));
    s.go_io(9, R, B2, IN, OK);
    // P1's address reused by a new object whose writeLoop is W2: the old asks on P1 (one,
    // H1's, never written) and a new one make two: unproved.
    s.go_http(CONN_WRITE, P1, W2, 0);
    s.go_http(ROUND_TRIP, P1, H1, 0);
    s.go_io(9, W2, B2, OUT, &get("/p1-reused", ""));
    s.go_io(9, R, B2, IN, OK);
    s.go_io(7, H1, K1, OUT, OK);
    s.finish();
    let a = s.one(Side::Server, "GET", "/a").id;
    assert_eq!(s.one(Side::Client, "GET", "/by-w1").parent_id, Some(a));
    assert_eq!(s.one(Side::Client, "GET", "/by-w2").parent_id, Some(a));
    for (m, r) in [
        ("GET", "w1-reused"),
        ("GET", "w2-elsewhere"),
        ("GET", "/w2-dropped"),
        ("GET", "/p1-reused"),
    ] {
        assert_eq!(s.one(Side::Client, m, r).parent_id, None, "{r}");
    }
    let st = s.chains.stats;
    assert_eq!((st.http_client_linked, st.goroutine_unlinked), (2, 3));
    assert_eq!(st.http_unproved, 1);
}

/// Untrusted records (a crafted recording): Go HTTP client probe records of ever new objects
/// and goroutines keep the state bounded (started over at its cap, counted), in linear time.
#[test]
fn go_http_records_without_end_keep_the_state_bounded() {
    let mut s = Sim::new();
    let n = MAX_GO_CONNS as u64 * 2 + 10;
    for i in 0..n {
        s.go_http(CONN_WRITE, 0x1000 + i * 8, 0xc100_0000 + i * 8, 0);
        s.go_http(ROUND_TRIP, 0x9000_0000 + i * 8, 0xc900_0000 + i * 8, 0);
        for _ in 0..MAX_ASKS {
            s.go_http(ROUND_TRIP, 0x1000 + i * 8, H1, 0);
        }
        assert!(s.chains.go_conns.len() <= MAX_GO_CONNS);
        assert!(s.chains.go_writers.len() <= s.chains.go_conns.len());
    }
    assert!(s
        .chains
        .go_conns
        .values()
        .all(|o| o.asks.len() <= MAX_ASKS + 1));
    assert!(s.chains.stats.state_resets >= 2);
}

/// Goroutine creation records (src/bpf/gospawn.h): `GoHttp` probes' `what`.
const SPAWN: u64 = 4;
const NEW_G: u64 = 5;

impl Sim {
    /// Goroutine `parent` of the app ran a `go` statement that made goroutine `child`.
    fn spawn(&mut self, parent: u64, child: u64) {
        self.go_http(SPAWN, child, parent, 0);
    }

    /// A Redis GET of `key` and its reply, by goroutine `g` on connection `r`.
    fn go_redis(&mut self, g: u64, r: (u64, u16, u16), key: &str) {
        self.go_io(9, g, r, OUT, &redis_get(key));
        self.go_io(9, g, r, IN, b"$-1\r\n");
    }
}

/// Redis connections of the app's goroutines (each its own, as a pool hands them out).
const R3: (u64, u16, u16) = (33, 50003, 6379);
const R4: (u64, u16, u16) = (34, 50004, 6379);
const R5: (u64, u16, u16) = (35, 50005, 6379);

/// A handler's fan-out: goroutines its request's goroutine starts (and one they start in
/// turn) make calls for its request while it is open, under it — two requests served at
/// once, each with its own; the calls of a request's goroutine itself are linked as before.
#[test]
fn goroutines_a_handler_starts_serve_its_request_while_it_is_open() {
    let mut s = Sim::new();
    const F1: u64 = 0xc001_0000;
    const F2: u64 = 0xc001_1000;
    const NESTED: u64 = 0xc001_2000;
    const G1: u64 = 0xc002_0000;
    s.go_io(7, H1, K1, IN, &get("/a", ""));
    s.go_io(8, H2, K2, IN, &get("/b", ""));
    s.spawn(H1, F1);
    s.spawn(H2, G1);
    s.spawn(H1, F2);
    s.spawn(F1, NESTED);
    // Interleaved, on any thread.
    s.go_redis(F2, R1, "a-f2");
    s.go_redis(G1, R2, "b-g1");
    s.go_redis(NESTED, R3, "a-nested");
    s.go_redis(F1, R4, "a-f1");
    s.go_redis(H1, R5, "a-own");
    s.go_io(7, H1, K1, OUT, OK);
    s.go_io(8, H2, K2, OUT, OK);
    s.finish();
    let a = s.one(Side::Server, "GET", "/a").id;
    let b = s.one(Side::Server, "GET", "/b").id;
    for k in ["a-f1", "a-f2", "a-nested", "a-own"] {
        assert_eq!(s.one(Side::Client, "GET", k).parent_id, Some(a), "{k}");
    }
    assert_eq!(s.one(Side::Client, "GET", "b-g1").parent_id, Some(b));
    let st = s.chains.stats;
    assert_eq!((st.linked, st.goroutine_linked, st.spawn_linked), (5, 5, 4));
    assert_eq!(
        (
            st.goroutine_unlinked,
            st.spawn_after_parent,
            st.spawn_unknown
        ),
        (0, 0, 0)
    );
    assert_eq!(st.unconfirmed, 0);
}

/// A goroutine started while its creator served request S1 serves S1 only: its call made
/// after S1's response began — while the same goroutine serves the next request S2 of its
/// keep-alive connection — is linked to nothing (counted), never to S2; and a goroutine
/// started during S2 serves S2.
#[test]
fn a_goroutine_started_in_one_request_never_serves_its_creators_next() {
    let mut s = Sim::new();
    const LATE: u64 = 0xc001_0000;
    const EARLY: u64 = 0xc001_1000;
    const IN_S2: u64 = 0xc001_2000;
    s.go_io(7, H1, K1, IN, &get("/s1", ""));
    s.spawn(H1, LATE);
    s.spawn(H1, EARLY);
    s.go_redis(EARLY, R1, "early");
    s.go_io(7, H1, K1, OUT, OK);
    // S1's response began: LATE's calls serve nothing.
    s.go_redis(LATE, R2, "late-between");
    s.go_io(7, H1, K1, IN, &get("/s2", ""));
    s.spawn(H1, IN_S2);
    s.go_redis(LATE, R3, "late-in-s2");
    s.go_redis(IN_S2, R4, "in-s2");
    s.go_io(7, H1, K1, OUT, OK);
    s.finish();
    let s1 = s.one(Side::Server, "GET", "/s1").id;
    let s2 = s.one(Side::Server, "GET", "/s2").id;
    assert_eq!(s.one(Side::Client, "GET", "early").parent_id, Some(s1));
    assert_eq!(s.one(Side::Client, "GET", "in-s2").parent_id, Some(s2));
    for k in ["late-between", "late-in-s2"] {
        assert_eq!(s.one(Side::Client, "GET", k).parent_id, None, "{k}");
    }
    let st = s.chains.stats;
    assert_eq!((st.spawn_linked, st.spawn_after_parent), (2, 2));
    assert_eq!(st.goroutine_unlinked, 2);
}

/// A g is reused once its goroutine ended, and the newest creation of it wins: a goroutine
/// of request A whose g is made a goroutine of request B serves B; made a goroutine of no
/// known creator (a coroutine) or of a creator serving nothing, it serves nothing. In a
/// program whose creations are probed, a goroutine of unknown creation (older than ebtop)
/// links nothing, and counts so; a goroutine serving a request it read is unaffected.
#[test]
fn the_newest_creation_of_a_g_wins_and_unknown_creations_link_nothing() {
    let mut s = Sim::new();
    const C: u64 = 0xc001_0000;
    const OLD: u64 = 0xc009_0000;
    const IDLE: u64 = 0xc00a_0000;
    s.go_io(7, H1, K1, IN, &get("/a", ""));
    s.go_io(8, H2, K2, IN, &get("/b", ""));
    s.spawn(H1, C);
    s.go_redis(C, R1, "a-c");
    s.spawn(H2, C);
    s.go_redis(C, R2, "b-c");
    s.go_http(NEW_G, C, C, 0);
    s.go_redis(C, R3, "coroutine");
    // A goroutine serving nothing (the server's accept loop, say) starts one.
    s.spawn(IDLE, C);
    s.go_redis(C, R4, "idle-child");
    s.go_redis(OLD, R5, "older-than-ebtop");
    s.go_io(7, H1, K1, OUT, OK);
    s.go_io(8, H2, K2, OUT, OK);
    s.finish();
    let a = s.one(Side::Server, "GET", "/a").id;
    let b = s.one(Side::Server, "GET", "/b").id;
    assert_eq!(s.one(Side::Client, "GET", "a-c").parent_id, Some(a));
    assert_eq!(s.one(Side::Client, "GET", "b-c").parent_id, Some(b));
    for k in ["coroutine", "idle-child", "older-than-ebtop"] {
        assert_eq!(s.one(Side::Client, "GET", k).parent_id, None, "{k}");
    }
    let st = s.chains.stats;
    assert_eq!(st.spawn_linked, 2);
    // The idle goroutine's creation is unknown: its child's too.
    assert_eq!(st.spawn_unknown, 3, "{st:?}");
    assert_eq!(st.goroutine_unlinked, 3);
}

/// A request's goroutine that a served goroutine's g is reused for serves its own request:
/// a creation ends what ran at that g before (its open request, its writeLoop).
#[test]
fn a_creation_ends_what_its_g_ran_before() {
    let mut s = Sim::new();
    const C: u64 = 0xc001_0000;
    // H2's goroutine ended (its client went away mid-request) and its g was reused.
    s.go_io(8, H2, K2, IN, &get("/abandoned", ""));
    s.go_io(7, H1, K1, IN, &get("/a", ""));
    s.spawn(H1, H2);
    s.go_redis(H2, R1, "a-child");
    // A writeLoop's g reused by a child of H1: its writes are no longer the writer's.
    s.go_http(CONN_WRITE, P1, W1, 0);
    s.spawn(H1, W1);
    s.go_redis(W1, R2, "a-child-2");
    s.spawn(H1, C);
    s.go_io(7, H1, K1, OUT, OK);
    s.finish();
    let a = s.one(Side::Server, "GET", "/a").id;
    assert_eq!(s.one(Side::Client, "GET", "a-child").parent_id, Some(a));
    assert_eq!(s.one(Side::Client, "GET", "a-child-2").parent_id, Some(a));
    assert!(s.chains.go_writers.is_empty());
}

/// net/http's Transport starts a connection's goroutines (dialConnFor, then readLoop and
/// writeLoop) from the request that first needs it: they must never serve that request's
/// successors. The writeLoop's requests link through the roundTrip that asked (another
/// request's, while the first is still open); a started goroutine's own ask links to the
/// request it inherits; and a writeLoop whose write record was lost (an HTTP/1 request
/// written by a started goroutine, in a program whose client probes report) links nothing.
#[test]
fn a_connection_goroutine_one_request_started_never_inherits_it() {
    let mut s = Sim::new();
    const DIAL: u64 = 0xc003_0000;
    const G: u64 = 0xc003_1000;
    const W3: u64 = 0xc003_2000;
    s.go_io(7, H1, K1, IN, &get("/a", ""));
    s.go_io(8, H2, K2, IN, &get("/b", ""));
    s.spawn(H1, DIAL);
    s.spawn(DIAL, W1);
    s.spawn(DIAL, R);
    s.go_http(ROUND_TRIP, P1, H1, 0);
    s.go_http(CONN_WRITE, P1, W1, 0);
    s.go_io(9, W1, B1, OUT, &get("/for-a", ""));
    s.go_io(9, R, B1, IN, OK);
    // /a still open: H2's request on the same connection is /b's.
    s.go_http(ROUND_TRIP, P1, H2, 0);
    s.go_http(CONN_WRITE, P1, W1, 0);
    s.go_io(9, W1, B1, OUT, &get("/for-b", ""));
    s.go_io(9, R, B1, IN, OK);
    // A goroutine /b's handler started asks.
    s.spawn(H2, G);
    s.go_http(ROUND_TRIP, P1, G, 0);
    s.go_http(CONN_WRITE, P1, W1, 0);
    s.go_io(9, W1, B1, OUT, &get("/for-b-by-g", ""));
    s.go_io(9, R, B1, IN, OK);
    // Another connection's writeLoop, started from /a, whose write record is lost.
    s.spawn(DIAL, W3);
    s.go_http(ROUND_TRIP, P2, H2, 0);
    s.go_io(9, W3, B2, OUT, &get("/lost-write-record", ""));
    s.go_io(9, R, B2, IN, OK);
    s.go_io(7, H1, K1, OUT, OK);
    s.go_io(8, H2, K2, OUT, OK);
    s.finish();
    let a = s.one(Side::Server, "GET", "/a").id;
    let b = s.one(Side::Server, "GET", "/b").id;
    assert_eq!(s.one(Side::Client, "GET", "/for-a").parent_id, Some(a));
    assert_eq!(s.one(Side::Client, "GET", "/for-b").parent_id, Some(b));
    assert_eq!(s.one(Side::Client, "GET", "/for-b-by-g").parent_id, Some(b));
    assert_eq!(
        s.one(Side::Client, "GET", "/lost-write-record").parent_id,
        None
    );
    let st = s.chains.stats;
    assert_eq!((st.http_client_linked, st.spawn_linked), (3, 1));
    assert_eq!(st.http_unproved, 1);
}

/// Creations are followed down at most MAX_SPAWN_DEPTH below the request's goroutine
/// (beyond: unknown, counted); untrusted creation records of ever new goroutines keep the
/// state bounded (the oldest creation forgotten first), in linear time.
#[test]
fn creations_are_bounded_in_depth_and_memory() {
    let mut s = Sim::new();
    s.go_io(7, H1, K1, IN, &get("/a", ""));
    let mut g = H1;
    for i in 0..u64::from(MAX_SPAWN_DEPTH) + 1 {
        let child = 0xc010_0000 + i * 0x1000;
        s.spawn(g, child);
        g = child;
        if i + 1 == u64::from(MAX_SPAWN_DEPTH) {
            s.go_redis(g, R1, "deepest");
        }
    }
    s.go_redis(g, R2, "too-deep");
    s.go_io(7, H1, K1, OUT, OK);
    s.finish();
    let a = s.one(Side::Server, "GET", "/a").id;
    assert_eq!(s.one(Side::Client, "GET", "deepest").parent_id, Some(a));
    assert_eq!(s.one(Side::Client, "GET", "too-deep").parent_id, None);
    assert_eq!(s.chains.stats.spawn_unknown, 1);
    for i in 0..MAX_ROOTS as u64 * 2 + 10 {
        s.spawn(0xd000_0000 + i * 8, 0xe000_0000 + i * 8);
    }
    assert!(s.chains.spawned.map.len() <= MAX_ROOTS);
    assert_eq!(s.chains.spawned.map.len(), s.chains.spawned.order.len());
}

/// An HTTP/2 (or gRPC) client connection carries many requests at once and is written by
/// its own goroutines, started by whichever request opened it (grpc-go's loopyWriter): a
/// call written by a goroutine that inherits a request from its creation links nothing.
#[test]
fn a_started_goroutines_http2_calls_link_nothing() {
    let mut s = Sim::new();
    const LOOPY: u64 = 0xc004_0000;
    const H2C: (u64, u16, u16) = (61, 50020, 9001);
    s.go_io(7, H1, K1, IN, &get("/a", ""));
    s.spawn(H1, LOOPY);
    // HPACK by hand: :method GET, :scheme http (static entries), :path and :authority
    // literals with indexed names; the answer :status 200 (static).
    let mut block = vec![0x82, 0x86, 0x04, 7];
    block.extend_from_slice(b"/via-h2");
    block.extend_from_slice(&[0x01, 1, b'b']);
    let mut out = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n".to_vec();
    out.extend(h2_frame(4, 0, 0, &[]));
    out.extend(h2_frame(1, 5, 1, &block));
    s.go_io(9, LOOPY, H2C, OUT, &out);
    let mut back = h2_frame(4, 0, 0, &[]);
    back.extend(h2_frame(1, 5, 1, &[0x88]));
    s.go_io(9, LOOPY, H2C, IN, &back);
    s.go_io(7, H1, K1, OUT, OK);
    s.finish();
    assert_eq!(s.one(Side::Client, "GET", "/via-h2").parent_id, None);
    let st = s.chains.stats;
    assert_eq!(
        (st.spawn_multiplexed, st.spawn_linked, st.linked),
        (1, 0, 0)
    );
}

/// An HTTP/2 frame: type, flags, stream, payload.
fn h2_frame(ty: u8, flags: u8, stream: u32, payload: &[u8]) -> Vec<u8> {
    let n = payload.len() as u32;
    let mut f = vec![(n >> 16) as u8, (n >> 8) as u8, n as u8, ty, flags];
    f.extend_from_slice(&stream.to_be_bytes());
    f.extend_from_slice(payload);
    f
}

const NGINX: u32 = 400;
/// nginx's upstream sockets (to the app: its side of K1/K2 as seen from nginx).
const U1: (u64, u16, u16) = (51, 40001, 8080);
const U2: (u64, u16, u16) = (52, 40002, 8080);
/// nginx's downstream sockets (clients → nginx on port 80).
const D1: (u64, u16, u16) = (61, 80, 30001);
const D2: (u64, u16, u16) = (62, 80, 30002);

/// nginx's worker serves two downstream requests at once (an event loop: its thread says
/// nothing) and proxies each: its upstream record says which downstream socket each upstream
/// request is for, and each upstream call goes under its own downstream request, whatever
/// the order; a later write of the same request keeps its parent.
#[test]
fn nginx_upstream_requests_go_under_the_downstream_request_they_proxy() {
    let mut s = Sim::new();
    s.io(NGINX, 5, D1, IN, &get("/one", ""));
    s.io(NGINX, 5, D2, IN, &get("/two", ""));
    s.ngx(NGINX, 5, U2.0, D2.0);
    s.io(NGINX, 5, U2, OUT, &get("/two", ""));
    s.ngx(NGINX, 5, U1.0, D1.0);
    s.io(NGINX, 5, U1, OUT, b"GET /one HTTP/1.1\r\n");
    // The rest of /one's head, in a write of its own (after an EAGAIN, say).
    s.ngx(NGINX, 5, U1.0, D1.0);
    s.io(NGINX, 5, U1, OUT, b"Host: app\r\n\r\n");
    s.io(NGINX, 5, U2, IN, OK);
    s.io(NGINX, 5, D2, OUT, OK);
    s.io(NGINX, 5, U1, IN, OK);
    s.io(NGINX, 5, D1, OUT, OK);
    // Keep-alive: the next request on D1, proxied on U2 (an idle upstream connection).
    s.io(NGINX, 5, D1, IN, &get("/three", ""));
    s.ngx(NGINX, 5, U2.0, D1.0);
    s.io(NGINX, 5, U2, OUT, &get("/three", ""));
    s.io(NGINX, 5, U2, IN, OK);
    s.io(NGINX, 5, D1, OUT, OK);
    s.finish();
    for path in ["/one", "/two", "/three"] {
        let down = s.one(Side::Server, "GET", path);
        let up = s.one(Side::Client, "GET", path);
        assert_eq!(up.parent_id, Some(down.id), "{path}");
    }
    assert_eq!(s.chains.stats.proxy_linked, 3);
    assert_eq!(s.chains.stats.linked, 3);
    assert_eq!(s.chains.stats.ambiguous, 0);
    assert_eq!(s.chains.stats.unconfirmed, 0);
}

/// Never a wrong link: a record whose downstream socket has no request open (its response
/// began; an HTTP/2 downstream carries no HTTP/1 request line), a record another write took
/// first, and a record older than the upstream's last read link nothing.
#[test]
fn nginx_upstream_requests_without_a_proved_downstream_request_link_nothing() {
    let mut s = Sim::new();
    // The downstream request's response began before the upstream write.
    s.io(NGINX, 5, D1, IN, &get("/a", ""));
    s.io(NGINX, 5, D1, OUT, OK);
    s.ngx(NGINX, 5, U1.0, D1.0);
    s.io(NGINX, 5, U1, OUT, &get("/a-late", ""));
    s.io(NGINX, 5, U1, IN, OK);
    // An HTTP/2 downstream: its preface and frames start no HTTP/1 request.
    s.io(NGINX, 5, D2, IN, b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n");
    s.ngx(NGINX, 5, U2.0, D2.0);
    s.io(NGINX, 5, U2, OUT, &get("/h2", ""));
    s.io(NGINX, 5, U2, IN, OK);
    // A record whose write another write came before (its own record lost): the thread's
    // next write takes it, and the write on the upstream after has none.
    s.io(NGINX, 5, D1, IN, &get("/b", ""));
    s.ngx(NGINX, 5, U1.0, D1.0);
    s.io(NGINX, 5, D2, OUT, b"\x00\x00\x00\x04\x01\x00\x00\x00\x00");
    s.io(NGINX, 5, U1, OUT, &get("/b-unrecorded", ""));
    s.io(NGINX, 5, U1, IN, OK);
    s.io(NGINX, 5, D1, OUT, OK);
    s.finish();
    assert_eq!(s.one(Side::Client, "GET", "/a-late").parent_id, None);
    assert_eq!(s.one(Side::Client, "GET", "/h2").parent_id, None);
    // The worker had one request open: its thread alone links it (as without the probe).
    let b = s.one(Side::Server, "GET", "/b").id;
    assert_eq!(
        s.one(Side::Client, "GET", "/b-unrecorded").parent_id,
        Some(b)
    );
    assert_eq!(s.chains.stats.proxy_unproved, 2);
    assert_eq!(s.chains.stats.proxy_linked, 0);
}

/// A record older than the upstream connection's last read (the record of an earlier
/// request whose write record was lost) is not the next request's.
#[test]
fn an_nginx_record_older_than_the_upstreams_last_read_is_unproved() {
    let mut s = Sim::new();
    s.io(NGINX, 5, D1, IN, &get("/x", ""));
    s.io(NGINX, 5, D2, IN, &get("/y", ""));
    s.ngx(NGINX, 5, U1.0, D1.0);
    // /x's write record lost; its response read on U1; then /y on U1 with its record lost
    // and the thread's pending record still /x's.
    s.io(
        NGINX,
        6,
        U1,
        IN,
        b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n",
    );
    s.io(NGINX, 5, U1, OUT, &get("/y", ""));
    s.io(NGINX, 5, U1, IN, OK);
    s.io(NGINX, 5, D2, OUT, OK);
    s.finish();
    assert_eq!(s.one(Side::Client, "GET", "/y").parent_id, None);
    assert_eq!(s.chains.stats.proxy_unproved, 1);
    assert_eq!(s.chains.stats.linked, 0);
}
