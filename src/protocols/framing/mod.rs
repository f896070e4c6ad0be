//! One framing core for the parsers of length-framed protocols (issue 41, item 2).
//!
//! A protocol whose messages start with a header that says how long they are (PostgreSQL's
//! type byte and int32, MySQL's 3-byte length, Memcached's command lines and binary header,
//! HTTP/2's 9-byte frame header, MongoDB's 16-byte message header)
//! describes only that header to the core: a [`Framer`] says, from the buffered start of a
//! message, how long its header is ([`Header::NeedMore`], or [`Header::Line`]: up to a line
//! end), how long its body is and what kind of message it is
//! ([`Header::Frame`]), or that these bytes are no message of its ([`Header::NotAFrame`]); and
//! whether a segment starts where a lost direction can pick up again ([`Framer::resync`]).
//!
//! The core ([`on_segment`], [`on_gap`]) owns, per direction ([`FramedStream`]):
//! - the partial header, kept across segments in a fixed buffer of [`MAX_HEADER`] bytes (a
//!   line header in a buffer of its own, reused from line to line);
//! - the body: counted down across segments, its first `keep` bytes kept (in a buffer reused
//!   from message to message: no allocation per message), the rest skipped by count, bytes
//!   beyond the snaplen too;
//! - gaps: inside a body of known length they only skip bytes (the message is truncated),
//!   anywhere else the direction loses its place ([`ParseStats::desyncs`], a message cut
//!   counted in `damaged_messages`), and picks it up again at the first segment that starts
//!   with a plausible message; everything skipped meanwhile is counted in `unparsed_bytes`;
//! - the syscalls and bytes of the messages ([`BytesSince`]), for the protocol to take as a
//!   request's or response's [`super::MessageSpan`].
//!
//! Each complete message is handed to [`Framer::frame_done`] with its kind and its kept body.
//! In stream-body mode ([`Framer::STREAM_BODY`]) nothing of a body is kept: each part is handed
//! to [`Framer::body`] as it arrives ([`Body`]: the frame's start, captured bytes, bytes beyond
//! the snaplen, bytes lost), for a protocol that reads bodies as a stream (HTTP/2: gRPC's
//! message prefixes across DATA frames, header blocks fed to HPACK in wire order, which is why
//! a gap there is no skip: [`Framer::gap_skips`]).
//! What the protocol makes of it (pairing, calls) stays the protocol's. A protocol with states
//! of its own between messages (PostgreSQL's one-byte answer to SSLRequest, its search for a
//! response's end after losing its place inside rows, HTTP/2's connection preface, entered
//! where a direction picks up: [`Framer::resync_at`]) has them as [`St::Proto`], handled by
//! its hooks. HTTP/2's streams, HPACK and pairing by stream id stay its own grammar above the
//! frames; a protocol that cannot be framed this way at all implements
//! [`super::StreamParser`] itself: HTTP/1 (heads end at a blank line, bodies by three rules)
//! and RESP — a port of Redis onto this core (branch `framing-redis`) was byte-identical but
//! 20–38 % slower (a round trip through the core per type byte, length line and bulk, where
//! Redis's own loop takes a reply whole) and larger, and RESP's simple-string and error lines
//! have no length limit, so they cannot be held in a bounded header buffer.

use super::{BytesSince, L7Call, ParseStats, Segment};
use crate::event::Direction;

/// The longest fixed-length header a [`Framer`] may ask for (Memcached's binary header).
pub const MAX_HEADER: usize = 24;

/// Where a direction is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum St<P> {
    /// Reading a message's header (some of it may be buffered).
    Header,
    /// Inside a body: `left` bytes to go.
    Body { left: u64 },
    /// Out of sync (or not yet in sync): waiting for a segment that starts with a message.
    Lost,
    /// A state of the protocol's own, handled by its hooks.
    Proto(P),
}

/// What the buffered start of a message says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Header<K> {
    /// The header is this many bytes in all (more than buffered, at most [`MAX_HEADER`]).
    NeedMore(usize),
    /// The header is a line: it runs to the next `\n` (included), at most `max` bytes in all
    /// (a longer one is no message: the direction loses its place). The whole line is then
    /// handed to [`Framer::line`].
    Line { max: usize },
    /// A frame of kind `kind` whose body (after the header) is `body_len` bytes; `more`: the
    /// message goes on in the next frame (MySQL's packets of 0xffffff bytes), its kept body
    /// too.
    Frame { body_len: u64, kind: K, more: bool },
    /// Not a message of this protocol: the direction loses its place.
    NotAFrame,
}

/// A part of a frame's body, handed to [`Framer::body`] in stream-body mode.
#[derive(Debug, Clone, Copy)]
pub enum Body<'a> {
    /// The frame's header said its body (read in segment `seg`); zero-length bodies too.
    Start(&'a Segment<'a>),
    /// Captured bytes of the body, from segment `seg`.
    Bytes(&'a Segment<'a>, &'a [u8]),
    /// This many bytes of the body were moved in segment `seg` but not captured (snaplen).
    Unseen(&'a Segment<'a>, u64),
    /// This many bytes of the body were lost (ring buffer gap).
    Lost(u64),
}

/// Why a direction lost its place.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Loss {
    /// A header the framer rejected.
    NotAFrame,
    /// A header went unseen (beyond the snaplen).
    Unseen,
    /// Bytes were lost (ring buffer) outside a body of known length.
    Gap,
}

/// The turns of a connection's direction, for [`super::StreamParser::request_direction`]:
/// whether a turn into the request direction has always come between calls (so the first
/// bytes of such a turn start a new call: where a CPU budget may cut the connection,
/// src/source/sampling.rs).
#[derive(Debug, Default)]
pub struct Turns {
    last: Option<usize>,
    overlapped: bool,
}

impl Turns {
    /// A segment in direction `d`; `request_dir` as known now; `between`: nothing of a call
    /// is under way ([`between_calls`], asked before the segment is framed).
    pub fn note(&mut self, d: usize, request_dir: Option<usize>, between: bool) {
        if self.last == Some(1 - d) && request_dir == Some(d) && !between {
            self.overlapped = true;
        }
        self.last = Some(d);
    }

    /// Bytes were lost: turns inside them are unknown.
    pub fn lost(&mut self) {
        self.overlapped = true;
    }

    /// A request came while an earlier one awaited its answer (pipelining, even within one
    /// segment, before any turn showed it): a turn no longer marks a call's start.
    pub fn pipelined(&mut self) {
        self.overlapped = true;
    }

    /// The request direction while every turn into it came between calls.
    pub fn request_direction(&self, request_dir: Option<usize>) -> Option<Direction> {
        if self.overlapped {
            return None;
        }
        match request_dir? {
            0 => Some(Direction::Egress),
            _ => Some(Direction::Ingress),
        }
    }
}

/// Nothing of a call is under way on a framed connection: no request pending and both
/// directions at a message's start (a protocol state of its own is not one), or not yet in
/// sync at all (a connection's first bytes: nothing of it framed yet).
pub fn between_calls<F: Framer>(p: &F) -> bool {
    p.pending() == 0
        && p.streams_ref()
            .dirs
            .iter()
            .all(|s| !s.in_message() && (s.st == St::Header || (s.st == St::Lost && !s.synced)))
}

/// One direction's framing state.
#[derive(Debug)]
pub struct FramedStream<K, P> {
    pub st: St<P>,
    hdr: [u8; MAX_HEADER],
    hdr_len: u8,
    /// Header bytes needed before asking the framer (again).
    need: u8,
    /// The frame being read is not its message's last.
    more: bool,
    /// Ever in sync (the first pickup of a connection is no resync).
    pub synced: bool,
    /// A line header ([`Header::Line`]) being read: its bytes so far (the buffer is reused).
    line: Vec<u8>,
    /// Its longest length; 0: no line is being read.
    line_max: usize,
    /// The segment the line started in.
    line_seg: u64,
    /// The first bytes of a direction never in sync, while too few to judge
    /// ([`Framer::RESYNC_PROBE`]).
    probe: Vec<u8>,
    /// The kind of the message being read.
    pub kind: K,
    /// The message's kept body prefix (at most `keep` bytes).
    pub body: Vec<u8>,
    pub keep: usize,
    /// The syscalls and bytes since the protocol last took them.
    pub acc: BytesSince,
    /// The current message is the first of the bytes `acc` holds.
    pub opened_acc: bool,
    /// Stream position of the frame header being read or last read, where it started in a
    /// segment's bytes (None: a protocol's own buffer): for a protocol counting its own spans
    /// ([`Framer::SPANS`] off: HTTP/2's streams) to give their first byte.
    pub frame_pos: Option<u64>,
    /// Pending requests when this direction lost its place (for a protocol to end them).
    pub lost_with: usize,
}

impl<K: Copy + Default, P: Copy + PartialEq> FramedStream<K, P> {
    pub fn new(st: St<P>, min_header: usize) -> Self {
        FramedStream {
            st,
            hdr: [0; MAX_HEADER],
            hdr_len: 0,
            need: min_header.clamp(1, MAX_HEADER) as u8,
            more: false,
            synced: false,
            line: Vec::new(),
            line_max: 0,
            line_seg: 0,
            probe: Vec::new(),
            kind: K::default(),
            body: Vec::new(),
            keep: 0,
            acc: BytesSince::default(),
            opened_acc: false,
            frame_pos: None,
            lost_with: 0,
        }
    }

    /// Some of a header is buffered.
    pub fn partial_header(&self) -> bool {
        self.hdr_len > 0 || self.line_max > 0
    }

    /// The buffered bytes of a header in progress (a line's, or a fixed header's).
    pub fn header_bytes(&self) -> &[u8] {
        if self.line_max > 0 {
            &self.line
        } else {
            &self.hdr[..self.hdr_len as usize]
        }
    }

    /// The frame being read (or the last one) is not its message's last.
    pub fn continued(&self) -> bool {
        self.more
    }

    /// Inside a message (some of its header read, its body under way, or its next frame due).
    pub fn in_message(&self) -> bool {
        self.partial_header() || self.more || matches!(self.st, St::Body { .. })
    }

    /// Starts a message's kept body: its first `keep` bytes will be kept.
    pub fn start_body(&mut self, keep: usize) {
        self.body.clear();
        self.keep = keep;
    }

    /// A byte that starts a header, read by the protocol in a state of its own (and not
    /// counted in `acc`).
    pub fn push_header_byte(&mut self, b: u8) {
        if (self.hdr_len as usize) < MAX_HEADER {
            self.hdr[self.hdr_len as usize] = b;
            self.hdr_len += 1;
        }
    }

    /// Drops a partial header and the kept body.
    pub fn clear(&mut self, min_header: usize) {
        self.hdr_len = 0;
        self.line.clear();
        self.line_max = 0;
        self.need = min_header.clamp(1, MAX_HEADER) as u8;
        self.more = false;
        self.body.clear();
    }

    /// Loses this direction's place (counted once per loss); `pending`: the requests then
    /// pending, kept in `lost_with`.
    pub fn lose_sync(&mut self, pending: usize, min_header: usize, stats: &mut ParseStats) {
        if self.st != St::Lost {
            stats.desyncs += 1;
            self.lost_with = pending;
        }
        self.st = St::Lost;
        self.clear(min_header);
        self.acc = BytesSince::default();
    }

    /// `n` bytes of the body in progress (`n` ≤ `left`) went unseen.
    fn hole(&mut self, left: u64, n: u64, keep_after_hole: bool) {
        self.st = St::Body { left: left - n };
        self.acc.add(n);
        self.acc.truncated = true;
        if !keep_after_hole {
            // What follows the hole is not the kept prefix's continuation.
            self.keep = self.body.len();
        }
    }
}

/// Both directions, and the count of segments seen (a [`BytesSince`] counts each once).
#[derive(Debug)]
pub struct Streams<K, P> {
    pub dirs: [FramedStream<K, P>; 2],
    pub seg_id: u64,
    /// The bytes being framed are a segment's tail ([`Segment::tail`]): they start where the
    /// syscall's unseen bytes end, not where a message may start (a protocol's hooks must not
    /// take their start for one).
    pub in_tail: bool,
}

impl<K: Copy + Default, P: Copy + PartialEq> Streams<K, P> {
    pub fn new(st: St<P>, min_header: usize) -> Self {
        Streams {
            dirs: [
                FramedStream::new(st, min_header),
                FramedStream::new(st, min_header),
            ],
            seg_id: 0,
            in_tail: false,
        }
    }
}

/// A protocol's framing and its hooks; the core's functions drive it.
pub trait Framer: Sized {
    /// What a header says the message is (a type byte, a sequence id).
    type Kind: Copy + Default + std::fmt::Debug;
    /// The protocol's own states ([`St::Proto`]).
    type State: Copy + PartialEq + std::fmt::Debug;
    /// Header bytes buffered before [`Framer::header`] is first asked.
    const MIN_HEADER: usize;
    /// After a hole in a body (snaplen, a gap) the bytes that follow are still appended to the
    /// kept prefix (PostgreSQL's behaviour); otherwise keeping stops at the hole.
    const KEEP_AFTER_HOLE: bool = false;
    /// A segment carrying a header's later bytes counts in the message's span even when no
    /// body follows (otherwise only the segment where the header started does: PostgreSQL's
    /// behaviour).
    const TOUCH_HEADER_PIECES: bool = true;
    /// A direction never in sync whose first segments are shorter than this (short reads) is
    /// judged ([`Framer::resync`]) on them together (0: on each alone).
    const RESYNC_PROBE: usize = 0;
    /// Uncaptured bytes beyond a body's end finish it (the message is parsed from what was
    /// kept) before the header they hid goes unseen; otherwise the message is cut with them.
    const FINISH_BODY_BEFORE_UNSEEN: bool = false;
    /// A segment whose uncaptured tail belongs to a message under way counts in its span even
    /// when none of its bytes were captured.
    const TOUCH_UNSEEN: bool = false;

    /// The core counts each message's syscalls and bytes ([`FramedStream::acc`]) for the
    /// protocol to take as a [`super::MessageSpan`]; off for a protocol that counts its own
    /// (HTTP/2, per stream), which then pays nothing for it.
    const SPANS: bool = true;

    /// The protocol reads kernel tails ([`Segment::tail`], a long syscall's last bytes): after
    /// the unseen bytes before a tail, framing goes on in it where the place is known (a body
    /// of known length covered them: exact), a protocol state of its own gets it as a segment
    /// of its own ([`Streams::in_tail`] set), and a lost direction asks
    /// [`Framer::resync_tail`]. Otherwise a tail counts as unseen, as the bytes before it.
    const TAILS: bool = false;

    /// A body is handed to [`Framer::body`] as it arrives (HTTP/2's DATA carries gRPC's
    /// message prefixes, its header blocks go to HPACK in order), not kept by the core.
    const STREAM_BODY: bool = false;

    fn streams(&mut self) -> &mut Streams<Self::Kind, Self::State>;
    fn streams_ref(&self) -> &Streams<Self::Kind, Self::State>;
    /// Nothing more is parsed on this connection (encrypted, compressed).
    fn stopped(&self) -> bool;
    /// Requests pending (kept as [`FramedStream::lost_with`] when a direction loses its place).
    fn pending(&self) -> usize;

    /// The buffered start of a message in direction `d` (at least the bytes last asked for).
    /// On [`Header::Frame`] the framer starts the body it keeps ([`FramedStream::start_body`]).
    fn header(
        &mut self,
        d: usize,
        hdr: &[u8],
        out: &mut Vec<L7Call>,
        stats: &mut ParseStats,
    ) -> Header<Self::Kind>;
    /// A whole line header (after [`Header::Line`]) in direction `d`, its `\n` included:
    /// [`Header::Frame`] or [`Header::NotAFrame`].
    fn line(
        &mut self,
        _d: usize,
        _line: &[u8],
        _out: &mut Vec<L7Call>,
        _stats: &mut ParseStats,
    ) -> Header<Self::Kind> {
        Header::NotAFrame
    }
    /// A whole message of `kind` in direction `d`, `body` its kept prefix.
    fn frame_done(
        &mut self,
        d: usize,
        kind: Self::Kind,
        body: &[u8],
        out: &mut Vec<L7Call>,
        stats: &mut ParseStats,
    );
    /// Does segment `p` (captured bytes) start where lost direction `d` can pick up again?
    fn resync(&self, d: usize, p: &[u8]) -> bool;
    /// Where lost direction `d` picks up again at segment start `p`: by default reading a
    /// header where [`Framer::resync`] says so (a protocol may start in a state of its own
    /// there: HTTP/2's connection preface).
    fn resync_at(&mut self, d: usize, p: &[u8]) -> Option<St<Self::State>> {
        self.resync(d, p).then_some(St::Header)
    }
    /// How many bytes a direction never in sync needs to be judged, `start` its first bytes
    /// ([`Framer::RESYNC_PROBE`] unless they say otherwise).
    fn resync_probe(&self, _d: usize, _start: &[u8]) -> usize {
        Self::RESYNC_PROBE
    }
    /// Stream-body mode ([`Framer::STREAM_BODY`]): a part of the body under way in direction
    /// `d` (the frame's kind is [`FramedStream::kind`]).
    fn body(&mut self, _d: usize, _part: Body<'_>, _stats: &mut ParseStats) {}
    /// May a gap strictly inside the body under way in direction `d` only skip bytes (else the
    /// direction loses its place, as anywhere else)?
    fn gap_skips(&self, _d: usize) -> bool {
        true
    }
    /// Segment `seg` of lost direction `d` did not start where it picks up again (`probed`:
    /// bytes of earlier segments judged with it): by default all skipped.
    fn still_lost(&mut self, _d: usize, seg: &Segment, probed: u64, stats: &mut ParseStats) {
        stats.skipped(seg.total_len.saturating_add(probed));
    }
    /// Is a message under way in direction `d` (a gap there damages it)?
    fn in_message(&self, d: usize) -> bool {
        self.streams_ref().dirs[d].in_message()
    }
    /// Lost direction `d` got a tail `tail`, the last bytes of a syscall (the others unseen):
    /// where in it a message provably starts, framing going on from there (None: nowhere,
    /// the tail is skipped). The protocol proves it (a run of messages that ends exactly at
    /// the syscall's end, as only a real one does) and prepares its pairing: no
    /// [`Framer::resynced`] follows.
    fn resync_tail(
        &mut self,
        _d: usize,
        _tail: &[u8],
        _out: &mut Vec<L7Call>,
        _stats: &mut ParseStats,
    ) -> Option<usize> {
        None
    }
    /// Direction `d` picked up again after a loss.
    fn resynced(&mut self, _d: usize, _out: &mut Vec<L7Call>, _stats: &mut ParseStats) {}
    /// Direction `d` lost its place (the core has counted it): what it means for pairing.
    fn lost(&mut self, d: usize, why: Loss, stats: &mut ParseStats);
    /// A header in direction `d` went unseen (`n` bytes of `seg`): true if the protocol takes
    /// it from here (and counts the bytes) rather than losing its place (the bytes unparsed).
    fn header_unseen(
        &mut self,
        _d: usize,
        _seg: &Segment,
        _n: u64,
        _out: &mut Vec<L7Call>,
        _stats: &mut ParseStats,
    ) -> bool {
        false
    }
    /// Captured bytes `data` of `seg` in the protocol's state `s`: how many it consumed.
    fn in_state(
        &mut self,
        _d: usize,
        _s: Self::State,
        _seg: &Segment,
        data: &[u8],
        _out: &mut Vec<L7Call>,
        stats: &mut ParseStats,
    ) -> usize {
        stats.skipped(data.len() as u64);
        data.len()
    }
    /// A segment starts in the protocol's state `s`: where in its captured bytes framing goes
    /// on (None: nowhere, the protocol counted them).
    fn segment_in_state(
        &mut self,
        _d: usize,
        _s: Self::State,
        _seg: &Segment,
        _out: &mut Vec<L7Call>,
        _stats: &mut ParseStats,
    ) -> Option<usize> {
        Some(0)
    }
    /// `n` uncaptured bytes at a segment's end in the protocol's state `s`.
    fn uncaptured_in_state(
        &mut self,
        _d: usize,
        _s: Self::State,
        _seg: &Segment,
        n: u64,
        _out: &mut Vec<L7Call>,
        stats: &mut ParseStats,
    ) {
        stats.skipped(n);
    }
}

/// Direction `d` loses its place (counted once per loss).
pub fn lose_sync<F: Framer>(p: &mut F, d: usize, stats: &mut ParseStats) {
    let pending = p.pending();
    p.streams().dirs[d].lose_sync(pending, F::MIN_HEADER, stats);
}

/// One segment: picks a lost direction up again, frames the captured bytes, skips the rest.
/// A segment with a tail ([`Framer::TAILS`]) is its head (the payload and the unseen bytes
/// after it) and then its tail, in one syscall's span.
pub fn on_segment<F: Framer>(
    p: &mut F,
    seg: &Segment<'_>,
    out: &mut Vec<L7Call>,
    stats: &mut ParseStats,
) {
    let tail = seg.tail;
    let hidden = seg
        .total_len
        .checked_sub((seg.payload.len() + tail.len()) as u64)
        .filter(|&n| n > 0);
    let Some(hidden) = hidden.filter(|_| F::TAILS && !tail.is_empty()) else {
        return on_head(p, seg, out, stats);
    };
    let head = Segment {
        tail: &[],
        total_len: seg.payload.len() as u64 + hidden,
        ..*seg
    };
    on_head(p, &head, out, stats);
    if p.stopped() {
        stats.skipped(tail.len() as u64);
        return;
    }
    let piece = Segment {
        payload: tail,
        tail: &[],
        total_len: tail.len() as u64,
        pos: seg
            .pos
            .wrapping_add(seg.total_len.saturating_sub(tail.len() as u64)),
        ..*seg
    };
    let d = seg.dir.index();
    p.streams().in_tail = true;
    match p.streams_ref().dirs[d].st {
        St::Lost => match p.resync_tail(d, tail, out, stats) {
            Some(at) if at <= tail.len() => {
                stats.skipped(at as u64);
                let s = &mut p.streams().dirs[d];
                s.st = St::Header;
                s.synced = true;
                s.probe.clear();
                feed(p, d, &piece, &tail[at..], out, stats);
            }
            _ => stats.skipped(tail.len() as u64),
        },
        St::Proto(s) => {
            if let Some(at) = p.segment_in_state(d, s, &piece, out, stats) {
                feed(p, d, &piece, &tail[at.min(tail.len())..], out, stats);
            }
        }
        // The unseen bytes ended inside a body of known length, or at its end: the tail is
        // exactly what follows. A body's kept prefix stops at the hole whatever
        // KEEP_AFTER_HOLE says: its tail bytes are not the prefix's continuation (a long SQL
        // text would show its end spliced onto its start).
        St::Body { .. } => {
            let s = &mut p.streams().dirs[d];
            s.keep = s.body.len();
            feed(p, d, &piece, tail, out, stats);
        }
        St::Header => feed(p, d, &piece, tail, out, stats),
    }
    p.streams().in_tail = false;
}

/// A segment without a tail (or the head of one with a tail).
fn on_head<F: Framer>(p: &mut F, seg: &Segment<'_>, out: &mut Vec<L7Call>, stats: &mut ParseStats) {
    if p.stopped() {
        stats.skipped(seg.total_len);
        return;
    }
    p.streams().seg_id += 1;
    let d = seg.dir.index();
    let mut payload = seg.payload;
    match p.streams_ref().dirs[d].st {
        St::Proto(s) => match p.segment_in_state(d, s, seg, out, stats) {
            Some(at) => payload = &payload[at.min(payload.len())..],
            None => return,
        },
        St::Lost => {
            let s = &p.streams_ref().dirs[d];
            let whole = seg.total_len == seg.payload.len() as u64;
            let start = if s.probe.is_empty() {
                seg.payload
            } else {
                &s.probe
            };
            let probe_len = p.resync_probe(d, start);
            let s = &mut p.streams().dirs[d];
            if !s.synced && whole && s.probe.len() + seg.payload.len() < probe_len {
                // A first segment of a few bytes (a reader's short read): judged with more.
                s.probe.extend_from_slice(seg.payload);
                return;
            }
            let probe = std::mem::take(&mut s.probe);
            let at = if probe.is_empty() {
                p.resync_at(d, seg.payload)
            } else {
                p.resync_at(d, &[&probe[..], seg.payload].concat())
            };
            let Some(st) = at else {
                p.still_lost(d, seg, probe.len() as u64, stats);
                return;
            };
            let s = &mut p.streams().dirs[d];
            s.st = st;
            s.synced = true;
            p.resynced(d, out, stats);
            if !probe.is_empty() {
                feed(p, d, seg, &probe, out, stats);
            }
        }
        St::Header | St::Body { .. } => {}
    }
    feed(p, d, seg, payload, out, stats);
    let uncaptured = seg.total_len.saturating_sub(seg.payload.len() as u64);
    if uncaptured > 0 && !p.stopped() {
        match p.streams_ref().dirs[d].st {
            St::Lost => stats.skipped(uncaptured),
            St::Proto(s) => p.uncaptured_in_state(d, s, seg, uncaptured, out, stats),
            St::Header | St::Body { .. } => unseen(p, d, seg, uncaptured, out, stats),
        }
    }
}

/// Frames captured bytes `data` of `seg` in direction `d`.
pub fn feed<F: Framer>(
    p: &mut F,
    d: usize,
    seg: &Segment,
    mut data: &[u8],
    out: &mut Vec<L7Call>,
    stats: &mut ParseStats,
) {
    while !data.is_empty() && !p.stopped() {
        let seg_id = p.streams_ref().seg_id;
        match p.streams_ref().dirs[d].st {
            St::Lost => {
                stats.skipped(data.len() as u64);
                return;
            }
            St::Proto(s) => {
                let n = p.in_state(d, s, seg, data, out, stats);
                data = &data[n.min(data.len())..];
            }
            St::Header if p.streams_ref().dirs[d].line_max > 0 => {
                let s = &mut p.streams().dirs[d];
                if F::SPANS {
                    s.acc.touch(seg_id, seg);
                }
                let end = memchr::memchr(b'\n', data);
                let take = end.map_or(data.len(), |i| i + 1);
                if s.line.len() + take > s.line_max {
                    // Too long for a line: not a message. The line's bytes in this segment
                    // are skipped with the rest.
                    let started_here = if s.line_seg == seg_id {
                        s.line.len()
                    } else {
                        0
                    };
                    lose_sync(p, d, stats);
                    p.lost(d, Loss::NotAFrame, stats);
                    stats.skipped((started_here + data.len()) as u64);
                    return;
                }
                s.line.extend_from_slice(&data[..take]);
                if F::SPANS {
                    s.acc.add(take as u64);
                }
                data = &data[take..];
                if end.is_some() && !buffered_line_said(p, d, seg, data, out, stats) {
                    return;
                }
            }
            St::Header => {
                let s = &mut p.streams().dirs[d];
                if !F::SPANS && s.hdr_len == 0 {
                    s.frame_pos = seg.pos_of(data);
                }
                if F::SPANS && (s.hdr_len == 0 || F::TOUCH_HEADER_PIECES) {
                    if s.hdr_len == 0 {
                        s.opened_acc = s.acc.span.is_none();
                        // A header starts at `data`: the span's first byte if it opens here.
                        s.acc.touch_at(seg_id, seg, data);
                    } else {
                        s.acc.touch(seg_id, seg);
                    }
                }
                let (have, need) = (s.hdr_len as usize, s.need as usize);
                if have == 0 && data.len() >= need {
                    match header_in_place(p, d, seg, data, out, stats) {
                        Some(rest) => data = rest,
                        None => return,
                    }
                    continue;
                }
                let take = need.saturating_sub(have).min(data.len());
                s.hdr[have..have + take].copy_from_slice(&data[..take]);
                s.hdr_len += take as u8;
                if F::SPANS {
                    s.acc.add(take as u64);
                }
                data = &data[take..];
                if have + take < need {
                    continue;
                }
                let (hdr, n) = (s.hdr, have + take);
                match p.header(d, &hdr[..n], out, stats) {
                    Header::NeedMore(m) if m > n && m <= MAX_HEADER => {
                        p.streams().dirs[d].need = m as u8;
                    }
                    // A line that ended before the header's last byte contradicts the
                    // header's length (see header_in_place): not a message.
                    Header::Line { max } if max >= n && hdr[..n - 1].contains(&b'\n') => {
                        if !header_said(p, d, seg, Header::NotAFrame, data, out, stats) {
                            return;
                        }
                    }
                    Header::Line { max } if max >= n => {
                        let s = &mut p.streams().dirs[d];
                        s.line.extend_from_slice(&hdr[..n]);
                        s.line_max = max;
                        s.line_seg = seg_id;
                        s.hdr_len = 0;
                        s.need = F::MIN_HEADER.clamp(1, MAX_HEADER) as u8;
                        // The header asked for may already be the whole line.
                        if hdr[..n].contains(&b'\n')
                            && !buffered_line_said(p, d, seg, data, out, stats)
                        {
                            return;
                        }
                    }
                    h => {
                        if !header_said(p, d, seg, h, data, out, stats) {
                            return;
                        }
                    }
                }
            }
            St::Body { left } => {
                let take = left.min(data.len() as u64) as usize;
                let s = &mut p.streams().dirs[d];
                if F::SPANS {
                    s.acc.touch(seg_id, seg);
                    s.acc.add(take as u64);
                }
                if !F::STREAM_BODY {
                    let room = s.keep.saturating_sub(s.body.len()).min(take);
                    s.body.extend_from_slice(&data[..room]);
                }
                s.st = St::Body {
                    left: left - take as u64,
                };
                if F::STREAM_BODY {
                    p.body(d, Body::Bytes(seg, &data[..take]), stats);
                }
                data = &data[take..];
                if left == take as u64 {
                    frame_end(p, d, out, stats);
                }
            }
        }
    }
}

/// A header that starts at `data`'s start, judged where it lies (not copied) while `data` holds
/// all the framer asks for; a line header that ends in `data` is handed over in place too.
/// Returns the captured bytes after it (None: the direction lost its place).
fn header_in_place<'a, F: Framer>(
    p: &mut F,
    d: usize,
    seg: &Segment,
    data: &'a [u8],
    out: &mut Vec<L7Call>,
    stats: &mut ParseStats,
) -> Option<&'a [u8]> {
    let (mut n, seg_id) = (
        p.streams_ref().dirs[d].need as usize,
        p.streams_ref().seg_id,
    );
    // The header's bytes count in the message before the framer sees them (as when buffered).
    let mut counted = 0;
    loop {
        let s = &mut p.streams().dirs[d];
        if data.len() < n {
            // The rest of the header comes in a later segment: buffered.
            s.hdr[..data.len()].copy_from_slice(data);
            s.hdr_len = data.len() as u8;
            s.need = n as u8;
            if F::SPANS {
                s.acc.add((data.len() - counted) as u64);
            }
            return Some(&[]);
        }
        if F::SPANS {
            s.acc.add((n - counted) as u64);
        }
        counted = n;
        match p.header(d, &data[..n], out, stats) {
            Header::NeedMore(m) if m > n && m <= MAX_HEADER => n = m,
            Header::Line { max } if max >= n => {
                let end = memchr::memchr(b'\n', data);
                let take = end.map_or(data.len(), |i| i + 1);
                // A line that ended inside the n bytes the framer asked for as the header
                // contradicts it (those bytes are counted already): not a message, as a line
                // too long is (a plugin can answer so; fuzz target `plugin`).
                if take > max || take < n {
                    // Too long for a line: not a message; skipped with the rest.
                    lose_sync(p, d, stats);
                    p.lost(d, Loss::NotAFrame, stats);
                    stats.skipped(data.len() as u64);
                    return None;
                }
                let s = &mut p.streams().dirs[d];
                if F::SPANS {
                    s.acc.add((take - n) as u64);
                }
                if end.is_none() {
                    // The line goes on in a later segment: buffered.
                    s.line.extend_from_slice(data);
                    s.line_max = max;
                    s.line_seg = seg_id;
                    return Some(&[]);
                }
                let rest = &data[take..];
                let h = p.line(d, &data[..take], out, stats);
                return header_said(p, d, seg, h, rest, out, stats).then_some(rest);
            }
            h => {
                let rest = &data[n..];
                return header_said(p, d, seg, h, rest, out, stats).then_some(rest);
            }
        }
    }
}

/// The line buffered in direction d is whole: the framer says what it starts (its buffer is
/// kept for the next line); false when the segment's rest is not to be read (as
/// [`header_said`]).
fn buffered_line_said<F: Framer>(
    p: &mut F,
    d: usize,
    seg: &Segment,
    data: &[u8],
    out: &mut Vec<L7Call>,
    stats: &mut ParseStats,
) -> bool {
    let line = std::mem::take(&mut p.streams().dirs[d].line);
    let h = p.line(d, &line, out, stats);
    let s = &mut p.streams().dirs[d];
    s.line = line;
    s.line.clear();
    s.line_max = 0;
    header_said(p, d, seg, h, data, out, stats)
}

/// What a whole header said (`rest`: the captured bytes after it): false if the direction lost
/// its place.
#[inline(always)]
fn header_said<F: Framer>(
    p: &mut F,
    d: usize,
    seg: &Segment,
    h: Header<F::Kind>,
    rest: &[u8],
    out: &mut Vec<L7Call>,
    stats: &mut ParseStats,
) -> bool {
    match h {
        Header::Frame {
            body_len,
            kind,
            more,
        } => {
            let s = &mut p.streams().dirs[d];
            s.hdr_len = 0;
            s.need = F::MIN_HEADER.clamp(1, MAX_HEADER) as u8;
            s.kind = kind;
            s.more = more;
            s.st = St::Body { left: body_len };
            if F::STREAM_BODY {
                p.body(d, Body::Start(seg), stats);
            }
            if body_len == 0 {
                frame_end(p, d, out, stats);
            }
            true
        }
        // A framer asking for fewer bytes than it has, or more than fit, has no message here
        // either.
        Header::NeedMore(_) | Header::Line { .. } | Header::NotAFrame => {
            lose_sync(p, d, stats);
            p.lost(d, Loss::NotAFrame, stats);
            stats.skipped(rest.len() as u64);
            false
        }
    }
}

/// A frame in direction `d` is whole: its message too unless more frames follow.
#[inline(always)]
fn frame_end<F: Framer>(p: &mut F, d: usize, out: &mut Vec<L7Call>, stats: &mut ParseStats) {
    let s = &mut p.streams().dirs[d];
    s.st = St::Header;
    if !s.more {
        done(p, d, out, stats);
    }
}

/// The message in direction `d` is whole: handed to the protocol with its kept body (whose
/// buffer is reused for the next message).
#[inline(always)]
fn done<F: Framer>(p: &mut F, d: usize, out: &mut Vec<L7Call>, stats: &mut ParseStats) {
    let s = &mut p.streams().dirs[d];
    let kind = s.kind;
    if F::STREAM_BODY {
        // Nothing was kept: the protocol had the body as it came.
        return p.frame_done(d, kind, &[], out, stats);
    }
    let body = std::mem::take(&mut s.body);
    p.frame_done(d, kind, &body, out, stats);
    let s = &mut p.streams().dirs[d];
    if s.body.is_empty() {
        s.body = body;
        s.body.clear();
    }
}

/// `n` bytes of direction `d` were moved but not captured (snaplen).
pub fn unseen<F: Framer>(
    p: &mut F,
    d: usize,
    seg: &Segment,
    mut n: u64,
    out: &mut Vec<L7Call>,
    stats: &mut ParseStats,
) {
    if F::SPANS && F::TOUCH_UNSEEN {
        let seg_id = p.streams_ref().seg_id;
        let s = &mut p.streams().dirs[d];
        if s.acc.span.is_some() {
            s.acc.touch(seg_id, seg);
        }
    }
    if let St::Body { left } = p.streams_ref().dirs[d].st {
        if n <= left || F::FINISH_BODY_BEFORE_UNSEEN {
            let in_body = n.min(left);
            p.streams().dirs[d].hole(left, in_body, F::KEEP_AFTER_HOLE);
            if F::STREAM_BODY {
                p.body(d, Body::Unseen(seg, in_body), stats);
            }
            if in_body == left {
                // The frame ends with the syscall: parsed from what was kept.
                frame_end(p, d, out, stats);
            }
            n -= in_body;
            if n == 0 || p.stopped() {
                return;
            }
        }
    }
    // A header went unseen: the next message's place is unknown.
    if p.header_unseen(d, seg, n, out, stats) {
        return;
    }
    stats.skipped(n);
    lose_sync(p, d, stats);
    p.lost(d, Loss::Unseen, stats);
}

/// `len` bytes of `dir` were lost (None: an unknown amount).
pub fn on_gap<F: Framer>(p: &mut F, dir: Direction, len: Option<u64>, stats: &mut ParseStats) {
    if p.stopped() {
        stats.skipped(len.unwrap_or(0));
        return;
    }
    let d = dir.index();
    // A gap strictly inside a body of known length only skips bytes.
    if let (Some(n), St::Body { left }) = (len, p.streams_ref().dirs[d].st) {
        if n < left && p.gap_skips(d) {
            p.streams().dirs[d].hole(left, n, F::KEEP_AFTER_HOLE);
            if F::STREAM_BODY {
                p.body(d, Body::Lost(n), stats);
            }
            return;
        }
    }
    stats.skipped(len.unwrap_or(0));
    if p.in_message(d) {
        stats.damaged_messages += 1;
    }
    lose_sync(p, d, stats);
    p.lost(d, Loss::Gap, stats);
}

#[cfg(test)]
mod tests;
