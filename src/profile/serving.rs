//! Off-CPU time linked to the server calls its threads were serving (issue 47): per endpoint,
//! the time a server's threads spent blocked while serving that endpoint's calls, by stack
//! and blocked state. Pure and deterministic: fed the records and calls in the pipeline's
//! order and the blocks of each reading (recorded with it), a replay links the same.
//!
//! How, and why it is exact or nothing:
//! - **Serving spans** (from the records, in kernel time order): on a server connection —
//!   its first record seen was a read (a request), or a server call completed on it — a
//!   read that turns the direction (the first read after a write, or the first record)
//!   starts a request: its thread serves it from that read's exit; the connection's next
//!   write (the response's first) ends the span at its entry. These are the bounds of the
//!   server call's own `req.first_end_ns` and `resp.first_start_ns`.
//! - **Named by the call**: a server call completing names the span of its connection with
//!   exactly those bounds, if the thread that read the request also wrote the response
//!   (else `calls_handed_off`: a hand-off to another thread, never linked); no such span
//!   (pipelined requests, a connection seen mid-request) is `calls_thread_unknown`. A
//!   client call completing on a connection makes it a client connection: its spans (a
//!   response read up to the next request) are dropped.
//! - **Blocks** (the off-CPU program's, each with its thread and switch-out/switch-in
//!   times, the same clock as the records') are placed once their thread's spans around
//!   them are settled: none overlaps → `blocks_idle` (accept, epoll, keep-alive reads:
//!   never linked); two → `blocks_ambiguous` (an event loop serving two requests then; every
//!   block of a thread that read a request for a Go goroutine: the thread runs whichever
//!   goroutine is ready, and its blocks are the scheduler's parking);
//!   one named → linked, the overlap only (a block crossing the span's bounds is split,
//!   `blocks_split`: the bounds are the syscalls' stamps, and a thread may block inside a
//!   syscall before its stamp — a send waiting for its socket's lock — or the two programs'
//!   clocks may disagree); one unnamed → `blocks_unnamed`. A block whose span is still open
//!   after [`MAX_WAIT_NS`], or whose spans were forgotten, is `blocks_unknown`.
//!
//! Bounded: connections, threads, spans per thread, pending blocks and endpoint names are
//! capped; state dropped at a cap is counted and its blocks are `blocks_unknown`.

use std::collections::{HashMap, VecDeque};

use rustc_hash::FxHashMap;
use std::sync::Arc;

use serde::Serialize;

use super::{Block, Frame, Kind, Profile, ProfileLine, ProfileStack, Span, Tally};
use crate::call::{Call, Side};
use crate::event::{Direction, Event, EventKind, SOCK_STREAM, TLS_STREAM_BIT};

/// A block is placed once the records have reached this long past its end (a call whose
/// span holds it has completed by then: its response's first write came before the block's
/// end was seen plus this, and records arrive in time order within well under it).
pub const SETTLE_NS: u64 = 1_000_000_000;
/// Longest a block waits for the request span around it to end; then `blocks_unknown`.
pub const MAX_WAIT_NS: u64 = 30_000_000_000;
const MAX_CONNS: usize = 65_536;
const MAX_THREADS: usize = 16_384;
const MAX_SPANS_PER_THREAD: usize = 16_384;
const MAX_PENDING: usize = 1 << 17;
/// Endpoint names kept; beyond, calls are named [`OTHER`].
const MAX_ENDPOINTS: usize = 1_024;
const OTHER: &str = "[other]";
/// Threads of a connection's recent spans remembered (for its calls to find them).
const RECENT_THREADS: usize = 8;
const OPEN: u64 = u64::MAX;

/// How blocks and calls were linked (counted, never guessed).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct ServingStats {
    /// Blocks linked to the endpoint of the call their thread was serving.
    pub blocks_linked: u64,
    /// ... of them, linked in part (the block crossed its span's bounds: only the part
    /// inside is given).
    pub blocks_split: u64,
    /// Blocks of a thread serving no request then (accept, epoll, keep-alive waits).
    pub blocks_idle: u64,
    /// Blocks of a thread with two requests open then (an event loop): not linked.
    pub blocks_ambiguous: u64,
    /// Blocks inside a request span no call named (not parsed as a call, handed off to
    /// another thread, or a connection's state started over).
    pub blocks_unnamed: u64,
    /// Blocks not placed: their span stayed open past 30 s or the session ended first, or
    /// the thread's spans were forgotten at a cap.
    pub blocks_unknown: u64,
    /// Server calls whose serving thread is known (their blocks are linked).
    pub calls: u64,
    /// Server calls with no request span of those bounds (pipelined requests, a connection
    /// seen from mid-request): not linked.
    pub calls_thread_unknown: u64,
    /// Server calls whose response another thread wrote: not linked.
    pub calls_handed_off: u64,
    /// Times the connection or thread state was cleared at its cap.
    pub state_resets: u64,
}

impl ServingStats {
    fn add(&mut self, o: &ServingStats) {
        self.blocks_linked += o.blocks_linked;
        self.blocks_split += o.blocks_split;
        self.blocks_idle += o.blocks_idle;
        self.blocks_ambiguous += o.blocks_ambiguous;
        self.blocks_unnamed += o.blocks_unnamed;
        self.blocks_unknown += o.blocks_unknown;
        self.calls += o.calls;
        self.calls_thread_unknown += o.calls_thread_unknown;
        self.calls_handed_off += o.calls_handed_off;
        self.state_resets += o.state_resets;
    }

    pub fn is_zero(&self) -> bool {
        *self == ServingStats::default()
    }
}

/// Off-CPU time while serving one endpoint, in one process.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Served {
    pub comm: String,
    /// Server calls of the endpoint whose serving thread was known.
    pub calls: u64,
    pub blocks: u64,
    pub ns: u64,
    pub stacks: HashMap<(Kind, Arc<[Frame]>), Tally>,
}

/// An endpoint's heaviest stack: its frames and nanoseconds.
pub type TopStack<'a> = (&'a [Frame], u64);

/// Per (process, endpoint): the off-CPU time linked; and how the linking went.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ServingProfile {
    pub endpoints: HashMap<(u32, Arc<str>), Served>,
    pub stats: ServingStats,
}

impl ServingProfile {
    pub fn merge(&mut self, o: &ServingProfile) {
        for (k, s) in &o.endpoints {
            let e = self.endpoints.entry(k.clone()).or_default();
            if e.comm.is_empty() {
                e.comm = s.comm.clone();
            }
            e.calls += s.calls;
            e.blocks += s.blocks;
            e.ns = e.ns.saturating_add(s.ns);
            for (sk, t) in &s.stacks {
                let et = e.stacks.entry(sk.clone()).or_default();
                et.count += t.count;
                et.ns = et.ns.saturating_add(t.ns);
            }
        }
        self.stats.add(&o.stats);
    }

    /// One `off_cpu` line per process and endpoint, its stacks heaviest first.
    pub fn lines(&self, p: &Profile, span: Span, period_ns: Option<u64>) -> Vec<ProfileLine> {
        let mut keys: Vec<&(u32, Arc<str>)> = self.endpoints.keys().collect();
        keys.sort();
        keys.into_iter()
            .map(|k| {
                let s = &self.endpoints[k];
                let mut stacks: Vec<ProfileStack> = s
                    .stacks
                    .iter()
                    .map(|((kind, frames), t)| ProfileStack {
                        tid: None,
                        state: Some(*kind),
                        frames: frames.iter().map(|f| f.to_string()).collect(),
                        samples: None,
                        blocks: Some(t.count),
                        ns: Some(t.ns),
                    })
                    .collect();
                stacks.sort_by(|a, b| (b.ns, &a.frames, a.state).cmp(&(a.ns, &b.frames, b.state)));
                ProfileLine {
                    span,
                    period_ns,
                    kind: "off_cpu",
                    pid: k.0,
                    comm: s.comm.clone(),
                    hz: None,
                    samples: None,
                    samples_reaching_entry: None,
                    blocks: Some(s.blocks),
                    off_cpu_ns: Some(s.ns),
                    min_block_ns: p.off_cpu_min_ns,
                    losses: p.losses,
                    symbol_cache: p.symbol_cache,
                    endpoint: Some(k.1.to_string()),
                    calls: Some(s.calls),
                    links: Some(self.stats),
                    stacks,
                }
            })
            .collect()
    }

    /// The endpoint's heaviest stack and its time, and the endpoint's total and calls (the
    /// terminal UI's call details).
    pub fn top_of(&self, pid: u32, endpoint: &str) -> Option<(&Served, Option<TopStack<'_>>)> {
        let s = self.endpoints.get(&(pid, Arc::from(endpoint)))?;
        let top = s
            .stacks
            .iter()
            .max_by(|a, b| (a.1.ns, &b.0 .1[..]).cmp(&(b.1.ns, &a.0 .1[..])))
            .map(|((_, f), t)| (&f[..], t.ns));
        Some((s, top))
    }
}

/// How long a serving span waits for the blocks inside it, readings coming every `delay_ns`:
/// a block comes with the reading after its end.
pub fn retain_for_delay(delay_ns: u64) -> u64 {
    delay_ns.saturating_mul(2).saturating_add(2 * SETTLE_NS)
}

/// The name a call's endpoint has in the linking: `METHOD resource`, the resource
/// normalised as the endpoint rows do.
pub fn endpoint_name(call: &Call) -> String {
    let l7 = &call.l7;
    let resource =
        crate::aggregate::normalize::normalize(l7.proto, &l7.method, &l7.resource, false);
    if l7.method.is_empty() {
        resource
    } else {
        format!("{} {}", l7.method, resource)
    }
}

#[derive(Debug)]
struct Conn {
    last_dir: Option<Direction>,
    server: bool,
    /// The thread whose request span is open on it.
    open: Option<(u32, u32)>,
    /// Threads of its recent spans, newest last.
    recent: VecDeque<(u32, u32)>,
}

#[derive(Debug, Clone)]
struct SpanRec {
    conn: u64,
    start_ns: u64,
    /// [`OPEN`] while its response has not begun.
    end_ns: u64,
    /// Another thread wrote the response.
    handed_off: bool,
    /// The call that named it: its endpoint and process name.
    named: Option<(Arc<str>, Arc<str>)>,
}

#[derive(Debug, Default)]
struct ThreadSpans {
    /// In the order they opened (by start).
    spans: VecDeque<SpanRec>,
    /// When it first opened a span while another was open (an event loop): its spans
    /// overlap from then on, and its blocks ending later are ambiguous. Before, its spans
    /// are disjoint, so sorted by their ends too (a block's spans are found by a search).
    multiplexed_since: Option<u64>,
    /// Spans that ended before this were forgotten: a block starting earlier is unknown.
    forgotten_until: u64,
}

enum Placed {
    Linked {
        endpoint: Arc<str>,
        comm: Arc<str>,
        ns: u64,
        split: bool,
    },
    Idle,
    Ambiguous,
    Unnamed,
    Unknown,
}

/// The linking's state (on the pipeline's thread).
pub struct ServingLinker {
    conns: FxHashMap<u64, Conn>,
    threads: FxHashMap<(u32, u32), ThreadSpans>,
    pending: VecDeque<Block>,
    names: FxHashMap<String, Arc<str>>,
    /// Blocks that started before this were of state cleared at a cap.
    reset_until: u64,
    /// The latest end of the spans of the threads forgotten (nothing left to place): a
    /// block of a thread not known now that starts before it may have been in one.
    dropped_until: u64,
    /// Spans are kept this long after their end (the blocks of a reading come up to a
    /// reading's period after their end).
    retain_ns: u64,
    /// The off-CPU threshold (from the readings; 0 until the first): a named span shorter
    /// than it cannot hold a block (the thread runs at both its bounds), so it is not kept.
    min_block_ns: u64,
    out: ServingProfile,
}

impl ServingLinker {
    /// `retain_ns`: how long after its end a span may still receive a block (at least the
    /// profile's reading period plus [`SETTLE_NS`]).
    pub fn new(retain_ns: u64) -> ServingLinker {
        ServingLinker {
            conns: FxHashMap::default(),
            threads: FxHashMap::default(),
            pending: VecDeque::new(),
            names: FxHashMap::default(),
            reset_until: 0,
            dropped_until: 0,
            retain_ns: retain_ns.max(2 * SETTLE_NS),
            min_block_ns: 0,
            out: ServingProfile::default(),
        }
    }

    /// One record (of a selected connection), in kernel time order.
    pub fn on_record(&mut self, ev: &Event) {
        let key = ev.conn_key();
        match ev.kind {
            EventKind::Data if ev.sock_type == SOCK_STREAM => {}
            EventKind::Close => {
                if let Some(c) = self.conns.remove(&key) {
                    if let Some(t) = c.open {
                        // A request never answered: its span ends unnamed.
                        self.close(t, key, ev.start_ns, true);
                    }
                }
                return;
            }
            _ => return,
        }
        if self.conns.len() >= MAX_CONNS && !self.conns.contains_key(&key) {
            self.reset(ev.start_ns);
        }
        let c = self.conns.entry(key).or_insert_with(|| Conn {
            last_dir: None,
            server: ev.dir == Direction::Ingress,
            open: None,
            recent: VecDeque::new(),
        });
        let turned = c.last_dir != Some(ev.dir);
        c.last_dir = Some(ev.dir);
        if !turned || !c.server {
            return;
        }
        let thread = (ev.pid, ev.tid);
        match ev.dir {
            Direction::Ingress => {
                let before = c.open.replace(thread);
                if c.recent.back() != Some(&thread) {
                    if c.recent.len() >= RECENT_THREADS {
                        c.recent.pop_front();
                    }
                    c.recent.push_back(thread);
                }
                if let Some(t) = before {
                    self.close(t, key, ev.start_ns, true);
                }
                if self.threads.len() >= MAX_THREADS && !self.threads.contains_key(&thread) {
                    self.reset(ev.start_ns);
                }
                let t = self.threads.entry(thread).or_default();
                if ev.goroutine.is_some() {
                    // A Go program's thread runs whichever goroutine is ready: its blocks are
                    // the scheduler's parking, not a request's wait, and between a request's
                    // read and its response another goroutine's request may run on it.
                    t.multiplexed_since = Some(0);
                } else if t.multiplexed_since.is_none()
                    && t.spans.back().is_some_and(|s| s.end_ns == OPEN)
                {
                    t.multiplexed_since = Some(ev.end_ns);
                }
                if t.spans.len() >= MAX_SPANS_PER_THREAD {
                    if let Some(old) = t.spans.pop_front() {
                        t.forgotten_until = t.forgotten_until.max(old.end_ns);
                    }
                }
                t.spans.push_back(SpanRec {
                    conn: key,
                    start_ns: ev.end_ns,
                    end_ns: OPEN,
                    handed_off: false,
                    named: None,
                });
            }
            Direction::Egress => {
                if let Some(t) = c.open.take() {
                    self.close(t, key, ev.start_ns, t != thread);
                }
            }
        }
    }

    /// Ends thread `t`'s open span on connection `conn` at `end_ns`.
    fn close(&mut self, t: (u32, u32), conn: u64, end_ns: u64, handed_off: bool) {
        if let Some(s) = self
            .threads
            .get_mut(&t)
            .and_then(|ts| ts.spans.iter_mut().rev().find(|s| s.conn == conn))
            .filter(|s| s.end_ns == OPEN)
        {
            s.end_ns = end_ns.max(s.start_ns);
            s.handed_off = handed_off;
        }
    }

    /// All state cleared at a cap: blocks before `now_ns` are unknown from then on.
    fn reset(&mut self, now_ns: u64) {
        self.conns.clear();
        self.threads.clear();
        self.reset_until = self.reset_until.max(now_ns);
        self.out.stats.state_resets += 1;
    }

    /// A completed call (after the record that completed it).
    pub fn on_call(&mut self, call: &Call) {
        let key = call.sock_id | if call.tls { TLS_STREAM_BIT } else { 0 };
        if call.side == Side::Client {
            // A client connection: its spans are a response read up to the next request.
            if let Some(c) = self.conns.get_mut(&key).filter(|c| c.server) {
                c.server = false;
                c.open = None;
                for t in c.recent.drain(..) {
                    if let Some(ts) = self.threads.get_mut(&t) {
                        ts.spans.retain(|s| s.conn != key);
                    }
                }
            }
            return;
        }
        let (start, end) = (call.l7.req.first_end_ns, call.l7.resp.first_start_ns);
        let Some(c) = self.conns.get_mut(&key) else {
            self.out.stats.calls_thread_unknown += 1;
            return;
        };
        c.server = true;
        // Newest first, down to the spans that opened before it (in start order).
        let at = |spans: &VecDeque<SpanRec>| {
            spans
                .iter()
                .rev()
                .take_while(|s| s.start_ns >= start)
                .position(|s| s.conn == key && s.start_ns == start && s.end_ns == end)
                .map(|i| spans.len() - 1 - i)
        };
        let found = c.recent.iter().rev().find_map(|t| {
            let i = at(&self.threads.get(t)?.spans)?;
            Some((*t, i))
        });
        let Some((t, i)) = found else {
            self.out.stats.calls_thread_unknown += 1;
            return;
        };
        let Some(ts) = self.threads.get_mut(&t) else {
            return;
        };
        if ts.spans[i].handed_off {
            self.out.stats.calls_handed_off += 1;
            return;
        }
        let short = ts.spans[i].end_ns - ts.spans[i].start_ns < self.min_block_ns;
        if short && ts.multiplexed_since.is_none() {
            // Too short to hold a block: counted, not kept (a fast endpoint's calls would
            // fill the thread's spans). Kept on a multiplexed thread: ambiguous there anyway.
            ts.spans.remove(i);
        }
        let endpoint = self.name(call);
        if !short {
            if let Some(span) = self.threads.get_mut(&t).and_then(|ts| ts.spans.get_mut(i)) {
                span.named = Some((endpoint, call.comm.clone()));
            }
        }
    }

    /// The interned endpoint of server call `call`, the call counted.
    fn name(&mut self, call: &Call) -> Arc<str> {
        let name = endpoint_name(call);
        let endpoint = match self.names.get(&name) {
            Some(n) => n.clone(),
            None if self.names.len() < MAX_ENDPOINTS => {
                let n: Arc<str> = Arc::from(name.as_str());
                self.names.insert(name, n.clone());
                n
            }
            None => Arc::from(OTHER),
        };
        self.out.stats.calls += 1;
        let e = self
            .out
            .endpoints
            .entry((call.pid, endpoint.clone()))
            .or_default();
        if e.comm.is_empty() {
            e.comm = call.comm.to_string();
        }
        e.calls += 1;
        endpoint
    }

    /// The off-CPU threshold, as the readings give it.
    pub fn set_min_block(&mut self, ns: Option<u64>) {
        if let Some(ns) = ns {
            self.min_block_ns = ns;
        }
    }

    /// A reading's blocks, to be placed once settled.
    pub fn add_blocks(&mut self, blocks: Vec<Block>) {
        for b in blocks {
            if self.pending.len() >= MAX_PENDING {
                self.pending.pop_front();
                self.out.stats.blocks_unknown += 1;
            }
            self.pending.push_back(b);
        }
    }

    /// Places the blocks settled at `now_ns` (the records' time); `last`: the session ends,
    /// every block is placed (those still waiting for a span's end are unknown). Returns
    /// what was linked since the last call, and forgets spans no block can reach anymore.
    pub fn take(&mut self, now_ns: u64, last: bool) -> ServingProfile {
        let mut waiting = VecDeque::new();
        while let Some(b) = self.pending.pop_front() {
            match self.place(&b, now_ns, last) {
                None => waiting.push_back(b),
                Some(p) => self.count(&b, p),
            }
        }
        self.pending = waiting;
        let retain = self.retain_ns;
        for ts in self.threads.values_mut() {
            while let Some(s) = ts.spans.front() {
                if s.end_ns == OPEN || s.end_ns.saturating_add(retain) >= now_ns {
                    break;
                }
                ts.forgotten_until = ts.forgotten_until.max(s.end_ns);
                ts.spans.pop_front();
            }
        }
        // Threads with nothing left to place: dropped once their last span is long gone.
        let mut dropped_until = self.dropped_until;
        self.threads.retain(|_, ts| {
            let keep = !ts.spans.is_empty() || ts.forgotten_until.saturating_add(retain) >= now_ns;
            if !keep {
                dropped_until = dropped_until.max(ts.forgotten_until);
            }
            keep
        });
        self.dropped_until = dropped_until;
        std::mem::take(&mut self.out)
    }

    fn place(&self, b: &Block, now_ns: u64, last: bool) -> Option<Placed> {
        let settled = last || now_ns >= b.end_ns.saturating_add(SETTLE_NS);
        if !settled {
            return None;
        }
        let given_up = last || now_ns >= b.end_ns.saturating_add(MAX_WAIT_NS);
        if b.start_ns < self.reset_until {
            return Some(Placed::Unknown);
        }
        let Some(ts) = self.threads.get(&(b.tgid, b.tid)) else {
            return Some(if b.start_ns < self.dropped_until {
                Placed::Unknown
            } else {
                Placed::Idle
            });
        };
        if b.start_ns < ts.forgotten_until {
            return Some(Placed::Unknown);
        }
        if ts.multiplexed_since.is_some_and(|t| b.end_ns > t) {
            return Some(Placed::Ambiguous);
        }
        // Disjoint spans before it multiplexed: those opened before the block's end, back to
        // the first that ended before its start.
        let opened = ts.spans.partition_point(|s| s.start_ns < b.end_ns);
        let over: Vec<&SpanRec> = ts
            .spans
            .range(..opened)
            .rev()
            .take_while(|s| s.end_ns > b.start_ns)
            .collect();
        // A span still open, or closed but its call may still come: wait.
        let unsettled = over.iter().any(|s| {
            s.end_ns == OPEN
                || (s.named.is_none()
                    && !s.handed_off
                    && now_ns < s.end_ns.saturating_add(SETTLE_NS))
        });
        if unsettled && !last {
            return (given_up).then_some(Placed::Unknown);
        }
        match over.as_slice() {
            [] => Some(Placed::Idle),
            [s] if s.end_ns == OPEN => Some(Placed::Unknown),
            [s] => match (&s.named, s.handed_off) {
                (Some((endpoint, comm)), false) => {
                    let from = b.start_ns.max(s.start_ns);
                    let to = b.end_ns.min(s.end_ns);
                    Some(Placed::Linked {
                        endpoint: endpoint.clone(),
                        comm: comm.clone(),
                        ns: to - from,
                        split: from != b.start_ns || to != b.end_ns,
                    })
                }
                _ => Some(Placed::Unnamed),
            },
            _ => Some(Placed::Ambiguous),
        }
    }

    fn count(&mut self, b: &Block, p: Placed) {
        let st = &mut self.out.stats;
        match p {
            Placed::Idle => st.blocks_idle += 1,
            Placed::Ambiguous => st.blocks_ambiguous += 1,
            Placed::Unnamed => st.blocks_unnamed += 1,
            Placed::Unknown => st.blocks_unknown += 1,
            Placed::Linked {
                endpoint,
                comm,
                ns,
                split,
            } => {
                st.blocks_linked += 1;
                st.blocks_split += u64::from(split);
                let e = self.out.endpoints.entry((b.tgid, endpoint)).or_default();
                if e.comm.is_empty() {
                    e.comm = comm.to_string();
                }
                // Saturating: a hostile recording's bounds may be anything.
                e.blocks += 1;
                e.ns = e.ns.saturating_add(ns);
                let t = e.stacks.entry((b.kind, b.frames.clone())).or_default();
                t.count += 1;
                t.ns = t.ns.saturating_add(ns);
            }
        }
    }
}

#[cfg(test)]
mod tests;
