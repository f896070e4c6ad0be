//! The linking rules on real bytes: records through the connection tracker and its parsers,
//! then through [`ServingLinker`] as the pipeline runs them, with blocks of known bounds.

use super::*;
use crate::conntrack::{ConnTracker, TrackerConfig};

const APP: u32 = 100;
/// Sockets: (inode, local port, peer port).
const K1: (u64, u16, u16) = (11, 8080, 40001);
const K2: (u64, u16, u16) = (12, 8080, 40002);
const R1: (u64, u16, u16) = (31, 50001, 6379);
const MS: u64 = 1_000_000;

const SLOW: &[u8] = b"GET /slow HTTP/1.1\r\nHost: x\r\n\r\n";
const FAST: &[u8] = b"GET /fast HTTP/1.1\r\nHost: x\r\n\r\n";
const OK: &[u8] = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok";

struct Sim {
    tracker: ConnTracker,
    linker: ServingLinker,
    now: u64,
    pos: std::collections::HashMap<(u64, u8), u64>,
    /// The goroutine the next records name (a Go program's).
    goroutine: Option<u64>,
}

impl Sim {
    fn new() -> Sim {
        Sim {
            tracker: ConnTracker::new(TrackerConfig::default()),
            linker: ServingLinker::new(0),
            now: 1_000 * MS,
            pos: Default::default(),
            goroutine: None,
        }
    }

    /// One syscall on socket `s` by thread `tid`, 10 µs after the last (1 µs long); returns
    /// its (entry, exit).
    fn io(&mut self, tid: u32, s: (u64, u16, u16), dir: Direction, bytes: &[u8]) -> (u64, u64) {
        self.now += 10_000;
        let seq = self.pos.entry((s.0, dir as u8)).or_insert(0);
        let ev = crate::event::loopback_stream_record(
            self.now,
            s,
            *seq,
            bytes.len() as u64,
            (APP, tid),
            dir,
            bytes,
            self.goroutine,
        );
        *seq += bytes.len() as u64;
        let mut calls = Vec::new();
        self.tracker.handle(&ev, &mut calls);
        self.linker.on_record(&ev);
        for c in &calls {
            self.linker.on_call(c);
        }
        (ev.start_ns, ev.end_ns)
    }

    /// Thread `tid` is off the CPU for `ns` from now (a block of that thread).
    fn block(&mut self, tid: u32, ns: u64, frames: &[&str]) -> Block {
        let start = self.now + 2_000;
        self.now = start + ns;
        Block {
            tgid: APP,
            tid,
            start_ns: start,
            end_ns: start + ns,
            kind: Kind::Interruptible,
            frames: frames.iter().map(|f| Frame::from(*f)).collect(),
        }
    }

    /// Everything settled: what was linked.
    fn take_all(&mut self, blocks: Vec<Block>) -> ServingProfile {
        self.linker.add_blocks(blocks);
        self.linker.take(self.now + SETTLE_NS, false)
    }
}

fn served<'a>(p: &'a ServingProfile, ep: &str) -> &'a Served {
    p.endpoints
        .get(&(APP, Arc::from(ep)))
        .unwrap_or_else(|| panic!("no {ep} in {:?}", p.endpoints.keys()))
}

/// Thread per request with keep-alive: the sleep inside /slow is linked to it, the wait for
/// the next request (a read that blocks) is not, /fast gets its call and no time.
#[test]
fn a_sleep_while_serving_is_linked_and_the_wait_between_calls_is_not() {
    let mut s = Sim::new();
    let mut blocks = Vec::new();
    s.io(7, K1, Direction::Ingress, SLOW);
    blocks.push(s.block(7, 20 * MS, &["main", "handle", "nanosleep"]));
    s.io(7, K1, Direction::Egress, OK);
    // Waiting for the next request on the kept-alive connection.
    blocks.push(s.block(7, 50 * MS, &["main", "read"]));
    s.io(7, K1, Direction::Ingress, FAST);
    s.io(7, K1, Direction::Egress, OK);
    blocks.push(s.block(7, 5 * MS, &["main", "read"]));
    let p = s.take_all(blocks);
    let slow = served(&p, "GET /slow");
    assert_eq!((slow.calls, slow.blocks, slow.ns), (1, 1, 20 * MS));
    let frames: Arc<[Frame]> = ["main", "handle", "nanosleep"]
        .iter()
        .map(|f| Frame::from(*f))
        .collect();
    assert_eq!(
        slow.stacks[&(Kind::Interruptible, frames)],
        Tally {
            count: 1,
            ns: 20 * MS
        }
    );
    let fast = served(&p, "GET /fast");
    assert_eq!((fast.calls, fast.blocks, fast.ns), (1, 0, 0));
    assert_eq!(p.stats.blocks_linked, 1);
    assert_eq!(p.stats.blocks_idle, 2);
    assert_eq!(p.stats.calls, 2);
    assert_eq!(p.stats.blocks_split, 0);
}

/// A block read before its call completes waits for it (the span is open), then is linked.
#[test]
fn a_block_waits_while_its_request_is_open() {
    let mut s = Sim::new();
    s.io(7, K1, Direction::Ingress, SLOW);
    let b = s.block(7, 30 * MS, &["sleep"]);
    s.linker.add_blocks(vec![b]);
    // Long after: the request is still open (no response yet).
    let early = s.linker.take(s.now + 5 * SETTLE_NS, false);
    assert!(
        early.endpoints.is_empty() && early.stats.is_zero(),
        "{early:?}"
    );
    s.io(7, K1, Direction::Egress, OK);
    let p = s.linker.take(s.now + SETTLE_NS, false);
    assert_eq!(served(&p, "GET /slow").ns, 30 * MS);
}

/// A request still open when the session ends: its blocks are unknown, not linked.
#[test]
fn the_session_end_leaves_an_open_requests_blocks_unknown() {
    let mut s = Sim::new();
    s.io(7, K1, Direction::Ingress, SLOW);
    let b = s.block(7, 30 * MS, &["sleep"]);
    s.linker.add_blocks(vec![b]);
    let p = s.linker.take(s.now, true);
    assert!(p.endpoints.is_empty());
    assert_eq!(p.stats.blocks_unknown, 1);
}

/// One thread with two requests open (an event loop): its blocks then are not linked; the
/// calls are named still.
#[test]
fn two_requests_open_on_one_thread_leave_its_blocks_unlinked() {
    let mut s = Sim::new();
    s.io(7, K1, Direction::Ingress, SLOW);
    s.io(7, K2, Direction::Ingress, FAST);
    let b = s.block(7, 10 * MS, &["epoll_wait"]);
    s.io(7, K1, Direction::Egress, OK);
    s.io(7, K2, Direction::Egress, OK);
    let p = s.take_all(vec![b]);
    assert_eq!(p.stats.blocks_ambiguous, 1);
    assert_eq!(p.stats.blocks_linked, 0);
    assert_eq!(served(&p, "GET /slow").ns, 0);
}

/// Read by one thread, answered by another: the call is not linked, nor the reader's block.
#[test]
fn a_request_handed_to_another_thread_is_not_linked() {
    let mut s = Sim::new();
    s.io(7, K1, Direction::Ingress, SLOW);
    let b = s.block(7, 10 * MS, &["epoll_wait"]);
    s.io(8, K1, Direction::Egress, OK);
    let p = s.take_all(vec![b]);
    assert_eq!(p.stats.calls_handed_off, 1);
    assert_eq!(p.stats.blocks_unnamed, 1);
    assert!(p.endpoints.is_empty());
}

/// The handler's own client call (to Redis): its wait for the reply is serving time, and the
/// client connection's turns do not count as a second request.
#[test]
fn a_client_call_made_while_serving_is_part_of_the_serving() {
    let mut s = Sim::new();
    let mut blocks = Vec::new();
    s.io(7, K1, Direction::Ingress, SLOW);
    s.io(7, R1, Direction::Egress, b"*1\r\n$4\r\nPING\r\n");
    blocks.push(s.block(7, 4 * MS, &["recv"]));
    s.io(7, R1, Direction::Ingress, b"+PONG\r\n");
    blocks.push(s.block(7, 6 * MS, &["nanosleep"]));
    s.io(7, K1, Direction::Egress, OK);
    let p = s.take_all(blocks);
    let slow = served(&p, "GET /slow");
    assert_eq!((slow.blocks, slow.ns), (2, 10 * MS), "{:?}", p.stats);
}

/// Blocks of a thread that never served anything are idle; a block of a thread whose spans
/// were forgotten (long after) is unknown, never idle.
#[test]
fn forgotten_spans_make_late_blocks_unknown() {
    let mut s = Sim::new();
    s.io(7, K1, Direction::Ingress, SLOW);
    let b = s.block(7, 10 * MS, &["sleep"]);
    s.io(7, K1, Direction::Egress, OK);
    // The spans are forgotten before the block comes.
    let _ = s.linker.take(s.now + 100 * SETTLE_NS, false);
    let p = s.take_all(vec![b]);
    assert_eq!(p.stats.blocks_unknown, 1, "{:?}", p.stats);
    let other = s.block(99, MS, &["x"]);
    let p = s.take_all(vec![other]);
    assert_eq!(p.stats.blocks_idle, 1);
}

/// A call shorter than the off-CPU threshold cannot hold a block: counted, its span not kept
/// (a fast endpoint's thousands of calls a second would fill the thread's spans).
#[test]
fn spans_too_short_for_a_block_are_counted_not_kept() {
    let mut s = Sim::new();
    s.linker.set_min_block(Some(MS));
    s.io(7, K1, Direction::Ingress, FAST);
    s.io(7, K1, Direction::Egress, OK);
    assert!(s.linker.threads[&(APP, 7)].spans.is_empty());
    s.io(7, K1, Direction::Ingress, SLOW);
    let b = s.block(7, 20 * MS, &["sleep"]);
    s.io(7, K1, Direction::Egress, OK);
    assert_eq!(s.linker.threads[&(APP, 7)].spans.len(), 1);
    let p = s.take_all(vec![b]);
    assert_eq!(served(&p, "GET /fast").calls, 1);
    assert_eq!(served(&p, "GET /slow").ns, 20 * MS);
}

/// A Go program's thread runs whichever goroutine is ready: a block between a request's read
/// and its response is the scheduler's parking, not that request's wait — never linked.
#[test]
fn a_go_programs_blocks_are_never_linked() {
    let mut s = Sim::new();
    s.goroutine = Some(0x00c0_0000_1000);
    let mut blocks = Vec::new();
    s.io(7, K1, Direction::Ingress, SLOW);
    blocks.push(s.block(7, 20 * MS, &["runtime.futex"]));
    s.io(7, K1, Direction::Egress, OK);
    let p = s.take_all(blocks);
    assert_eq!(p.stats.blocks_linked, 0);
    assert_eq!(p.stats.blocks_ambiguous, 1);
}
