//! The core on a toy protocol: a kind byte (an upper-case letter) and a 2-byte big-endian body
//! length; kind `!` has an 8-byte length instead (a 9-byte header, asked for with `NeedMore`);
//! a frame of kind `M` continues in the next one; kind `#` is a line (at most 12 bytes) whose
//! digits are its body's length.

use super::*;
use crate::protocols::{MessageSpan, StreamParser};

const OUT: Direction = Direction::Egress;
const IN: Direction = Direction::Ingress;
const KEEP: usize = 4;

#[derive(Debug, Clone, PartialEq)]
struct Msg {
    d: usize,
    kind: u8,
    body: Vec<u8>,
    span: MessageSpan,
    truncated: bool,
}

struct Toy<const PROBE: usize = 0> {
    streams: Streams<u8, ()>,
    msgs: Vec<Msg>,
    losses: Vec<(usize, Loss)>,
    resyncs: usize,
}

impl<const PROBE: usize> Toy<PROBE> {
    fn new() -> Self {
        let start = if PROBE > 0 { St::Lost } else { St::Header };
        Toy {
            streams: Streams::new(start, Self::MIN_HEADER),
            msgs: Vec::new(),
            losses: Vec::new(),
            resyncs: 0,
        }
    }
}

impl<const PROBE: usize> Framer for Toy<PROBE> {
    type Kind = u8;
    type State = ();
    const MIN_HEADER: usize = 3;
    const RESYNC_PROBE: usize = PROBE;

    fn streams(&mut self) -> &mut Streams<u8, ()> {
        &mut self.streams
    }
    fn streams_ref(&self) -> &Streams<u8, ()> {
        &self.streams
    }
    fn stopped(&self) -> bool {
        false
    }
    fn pending(&self) -> usize {
        7
    }
    fn header(
        &mut self,
        d: usize,
        hdr: &[u8],
        _out: &mut Vec<L7Call>,
        _stats: &mut ParseStats,
    ) -> Header<u8> {
        let body_len = match hdr[0] {
            b'#' => return Header::Line { max: 12 },
            b'!' if hdr.len() < 9 => return Header::NeedMore(9),
            b'!' => u64::from_be_bytes(hdr[1..9].try_into().unwrap()),
            b'A'..=b'Z' => u64::from(u16::from_be_bytes([hdr[1], hdr[2]])),
            _ => return Header::NotAFrame,
        };
        if !self.streams.dirs[d].continued() {
            self.streams.dirs[d].start_body(KEEP);
        }
        Header::Frame {
            body_len,
            kind: hdr[0],
            more: hdr[0] == b'M',
        }
    }
    fn line(
        &mut self,
        d: usize,
        line: &[u8],
        _out: &mut Vec<L7Call>,
        _stats: &mut ParseStats,
    ) -> Header<u8> {
        let mut digits = line[1..line.len() - 1]
            .iter()
            .map(|&c| (c as char).to_digit(10));
        let Some(body_len) = digits.try_fold(0u64, |n, c| Some(n * 10 + u64::from(c?))) else {
            return Header::NotAFrame;
        };
        self.streams.dirs[d].start_body(KEEP);
        Header::Frame {
            body_len,
            kind: b'#',
            more: false,
        }
    }
    fn frame_done(
        &mut self,
        d: usize,
        kind: u8,
        body: &[u8],
        _out: &mut Vec<L7Call>,
        _stats: &mut ParseStats,
    ) {
        let (span, truncated) = self.streams.dirs[d].acc.take();
        self.msgs.push(Msg {
            d,
            kind,
            body: body.to_vec(),
            span,
            truncated,
        });
    }
    fn resync(&self, _d: usize, p: &[u8]) -> bool {
        p.first().is_some_and(|b| b.is_ascii_uppercase())
    }
    fn resynced(&mut self, _d: usize, _out: &mut Vec<L7Call>, _stats: &mut ParseStats) {
        self.resyncs += 1;
    }
    fn lost(&mut self, d: usize, why: Loss, _stats: &mut ParseStats) {
        self.losses.push((d, why));
    }
}

impl<const PROBE: usize> StreamParser for Toy<PROBE> {
    fn on_segment(&mut self, seg: &Segment<'_>, out: &mut Vec<L7Call>, stats: &mut ParseStats) {
        on_segment(self, seg, out, stats);
    }
    fn on_gap(&mut self, dir: Direction, len: Option<u64>, stats: &mut ParseStats) {
        on_gap(self, dir, len, stats);
    }
    fn on_close(&mut self, _out: &mut Vec<L7Call>, _stats: &mut ParseStats) {}
}

type Driver = crate::protocols::test_driver::Driver<Toy>;

fn driver() -> Driver {
    Driver::with_parser(Toy::new())
}

fn msg(kind: u8, body: &[u8]) -> Vec<u8> {
    let mut m = vec![kind];
    m.extend_from_slice(&(body.len() as u16).to_be_bytes());
    m.extend_from_slice(body);
    m
}

fn kinds(d: &Driver) -> Vec<(u8, Vec<u8>)> {
    d.p.msgs.iter().map(|m| (m.kind, m.body.clone())).collect()
}

#[test]
fn messages_in_one_segment_and_kept_prefixes() {
    let mut d = driver();
    let mut bytes = msg(b'A', b"hello");
    bytes.extend(msg(b'B', b""));
    bytes.extend(msg(b'C', b"xy"));
    d.seg(OUT, &bytes);
    assert_eq!(
        kinds(&d),
        vec![
            (b'A', b"hell".to_vec()),
            (b'B', vec![]),
            (b'C', b"xy".to_vec())
        ]
    );
    assert_eq!(d.p.msgs[0].span.bytes, 8);
    assert_eq!(d.p.msgs[0].span.syscalls, 1);
    assert_eq!(d.p.msgs[0].d, OUT.index());
    assert_eq!(d.stats, ParseStats::default());
}

#[test]
fn partial_header_split_across_segments() {
    let bytes = msg(b'A', b"abcdef");
    for cut in 1..bytes.len() {
        let mut d = driver();
        d.seg(IN, &bytes[..cut]).seg(IN, &bytes[cut..]);
        assert_eq!(kinds(&d), vec![(b'A', b"abcd".to_vec())], "cut at {cut}");
        assert_eq!(d.p.msgs[0].span.bytes, bytes.len() as u64);
        assert_eq!(d.p.msgs[0].span.syscalls, 2, "cut at {cut}");
        assert_eq!(d.stats, ParseStats::default());
    }
    // A longer header asked for with NeedMore, one byte per segment.
    let mut long = vec![b'!'];
    long.extend_from_slice(&3u64.to_be_bytes());
    long.extend_from_slice(b"xyz");
    let mut d = driver();
    for b in &long {
        d.seg(OUT, std::slice::from_ref(b));
    }
    assert_eq!(kinds(&d), vec![(b'!', b"xyz".to_vec())]);
    assert_eq!(d.p.msgs[0].span.syscalls, long.len() as u32);
}

#[test]
fn body_skipped_by_count_across_segments() {
    let body: Vec<u8> = (0..100).collect();
    let bytes = msg(b'D', &body);
    let mut d = driver();
    for chunk in bytes.chunks(7) {
        d.seg(OUT, chunk);
    }
    d.seg(OUT, &msg(b'E', b"e"));
    assert_eq!(
        kinds(&d),
        vec![(b'D', body[..KEEP].to_vec()), (b'E', b"e".to_vec())]
    );
    assert_eq!(d.p.msgs[0].span.bytes, 103);
    assert_eq!(d.p.msgs[0].span.syscalls, bytes.len().div_ceil(7) as u32);
    assert!(d.p.streams.dirs[0].body.capacity() <= 2 * KEEP);
}

#[test]
fn uncaptured_tails_are_skipped_by_count() {
    // 300-byte body written in one syscall, 10 bytes captured; then the next message whole.
    let bytes = msg(b'D', &[7; 300]);
    let mut d = driver();
    d.seg_cut(OUT, &bytes[..10], bytes.len() as u64);
    d.seg(OUT, &msg(b'E', b"ok"));
    assert_eq!(kinds(&d), vec![(b'D', vec![7; 4]), (b'E', b"ok".to_vec())]);
    assert!(d.p.msgs[0].truncated);
    assert!(!d.p.msgs[1].truncated);
    assert_eq!(d.p.msgs[0].span.bytes, 303);
    assert_eq!(d.stats, ParseStats::default());

    // A tail inside a body, then the body goes on in the next segment: keeping stops at the hole.
    let mut d = driver();
    d.seg_cut(OUT, &bytes[..5], 100);
    d.seg(OUT, &bytes[100..]);
    assert_eq!(kinds(&d), vec![(b'D', vec![7; 2])]);
    assert!(d.p.msgs[0].truncated);
    assert_eq!(d.p.msgs[0].span.syscalls, 2);

    // A tail over the next message's header: its place is lost.
    let mut two = msg(b'A', b"a");
    two.extend(msg(b'B', b"bbbb"));
    let mut d = driver();
    d.seg_cut(OUT, &two[..5], two.len() as u64);
    assert_eq!(kinds(&d), vec![(b'A', b"a".to_vec())]);
    assert_eq!(d.p.losses, vec![(0, Loss::Unseen)]);
    assert_eq!(d.stats.desyncs, 1);
    assert_eq!(d.stats.unparsed_bytes, two.len() as u64 - 5);
    assert_eq!(d.p.streams.dirs[0].lost_with, 7);
}

#[test]
fn gap_inside_a_body_only_skips() {
    let bytes = msg(b'D', &[1; 50]);
    let mut d = driver();
    d.seg(IN, &bytes[..13])
        .gap(IN, Some(20))
        .seg(IN, &bytes[33..]);
    assert_eq!(kinds(&d), vec![(b'D', vec![1; 4])]);
    assert!(d.p.msgs[0].truncated);
    assert_eq!(d.p.msgs[0].span.bytes, 53);
    assert_eq!(d.stats, ParseStats::default());
}

#[test]
fn gap_at_a_boundary_or_in_a_header_loses_the_place() {
    // At a boundary: nothing damaged, the direction waits for a message start.
    let mut d = driver();
    d.seg(OUT, &msg(b'A', b"a")).gap(OUT, Some(9));
    d.seg(OUT, b"zzzz").seg(OUT, &msg(b'B', b"b"));
    assert_eq!(
        kinds(&d),
        vec![(b'A', b"a".to_vec()), (b'B', b"b".to_vec())]
    );
    assert_eq!(d.stats.desyncs, 1);
    assert_eq!(d.stats.damaged_messages, 0);
    assert_eq!(d.stats.unparsed_bytes, 9 + 4);
    assert_eq!(d.p.losses, vec![(0, Loss::Gap)]);
    assert_eq!(d.p.resyncs, 1);

    // Inside a header: that message is damaged; unknown length too.
    let mut d = driver();
    d.seg(OUT, b"A").gap(OUT, None).seg(OUT, &msg(b'B', b""));
    assert_eq!(kinds(&d), vec![(b'B', vec![])]);
    assert_eq!(d.stats.damaged_messages, 1);
    assert_eq!(d.stats.desyncs, 1);

    // A gap as long as the body's rest ends no message: the header after it is unseen.
    let bytes = msg(b'D', &[1; 10]);
    let mut d = driver();
    d.seg(OUT, &bytes[..5]).gap(OUT, Some(8));
    assert_eq!(d.stats.damaged_messages, 1);
    assert_eq!(d.stats.desyncs, 1);
    // Lost twice counts once.
    d.gap(OUT, None);
    assert_eq!(d.stats.desyncs, 1);
}

#[test]
fn resync_after_garbage() {
    let mut d = driver();
    let mut bytes = b"\x01garbage".to_vec();
    bytes.extend(msg(b'A', b"a"));
    d.seg(OUT, &bytes);
    assert_eq!(d.p.losses, vec![(0, Loss::NotAFrame)]);
    assert_eq!(d.stats.desyncs, 1);
    assert_eq!(d.stats.unparsed_bytes, bytes.len() as u64 - 3);
    d.seg(OUT, b"more garbage").seg(OUT, &msg(b'C', b"c"));
    assert_eq!(kinds(&d), vec![(b'C', b"c".to_vec())]);
    assert_eq!(d.p.resyncs, 1);
    assert_eq!(d.stats.desyncs, 1);
    // The other direction was never touched.
    d.seg(IN, &msg(b'R', b"r"));
    assert_eq!(d.p.msgs.last().unwrap().d, IN.index());
}

#[test]
fn huge_crafted_lengths_neither_allocate_nor_overflow() {
    let mut hdr = vec![b'!'];
    hdr.extend_from_slice(&u64::MAX.to_be_bytes());
    hdr.extend_from_slice(&[9; 20]);
    let mut d = driver();
    d.seg_cut(OUT, &hdr, u64::MAX);
    assert_eq!(d.stats, ParseStats::default());
    d.gap(OUT, Some(u64::MAX - 1));
    d.gap(OUT, Some(u64::MAX));
    d.seg_cut(OUT, &[9; 8], u64::MAX);
    assert!(d.p.streams.dirs[0].body.capacity() <= 2 * KEEP);
    assert!(d.p.msgs.is_empty());
    assert_eq!(d.stats.desyncs, 1);
    assert_eq!(d.stats.damaged_messages, 1);
    assert_eq!(d.stats.unparsed_bytes, u64::MAX);
    assert_eq!(d.p.streams.dirs[0].st, St::Lost);
    // Picked up again; its tail beyond the snaplen hides the next header.
    d.seg_cut(OUT, b"A\x00\x00", u64::MAX);
    assert_eq!(kinds(&d), vec![(b'A', vec![])]);
    assert_eq!(d.stats.desyncs, 2);
}

#[test]
fn continued_frames_make_one_message() {
    let mut bytes = msg(b'M', b"abc");
    bytes.extend(msg(b'M', b"cd"));
    bytes.extend(msg(b'Z', b"ef"));
    let mut d = driver();
    d.seg(OUT, &bytes[..4])
        .gap(OUT, Some(1))
        .seg(OUT, &bytes[5..]);
    // The gap was inside the first frame's body: keeping stops there.
    assert_eq!(kinds(&d), vec![(b'Z', b"a".to_vec())]);
    assert!(d.p.msgs[0].truncated);
    assert_eq!(d.p.msgs[0].span.bytes, bytes.len() as u64);
    // A gap between two frames of one message damages it.
    let mut d = driver();
    d.seg(OUT, &bytes[..5]).gap(OUT, Some(3));
    assert!(d.p.msgs.is_empty());
    assert_eq!(d.stats.damaged_messages, 1);
    assert_eq!(d.stats.desyncs, 1);
}

#[test]
fn short_first_segments_are_judged_together() {
    let bytes = msg(b'A', b"abcdefgh");
    let mut d = crate::protocols::test_driver::Driver::<Toy<8>>::with_parser(Toy::new());
    d.seg(OUT, &bytes[..1])
        .seg(OUT, &bytes[1..2])
        .seg(OUT, &bytes[2..]);
    assert_eq!(d.p.msgs.len(), 1);
    assert_eq!(d.p.msgs[0].body, b"abcd");
    assert_eq!(d.p.resyncs, 1);
    assert_eq!(d.stats, ParseStats::default());
    // Garbage probed then dropped, counted with the segment that decided.
    let mut d = crate::protocols::test_driver::Driver::<Toy<8>>::with_parser(Toy::new());
    d.seg(IN, b"xy").seg(IN, b"zzzzzzzz").seg(IN, &bytes);
    assert_eq!(d.p.msgs.len(), 1);
    assert_eq!(d.stats.unparsed_bytes, 10);
    assert_eq!(d.stats.desyncs, 0);
}

#[test]
fn line_headers_end_at_their_newline() {
    let mut d = driver();
    let mut bytes = b"#0003\nabc".to_vec();
    bytes.extend(msg(b'A', b"a"));
    bytes.extend(b"#0\n");
    // Split anywhere, the same messages.
    for cut in 0..bytes.len() {
        let mut d = driver();
        d.seg(OUT, &bytes[..cut]).seg(OUT, &bytes[cut..]);
        assert_eq!(
            kinds(&d),
            vec![
                (b'#', b"abc".to_vec()),
                (b'A', b"a".to_vec()),
                (b'#', vec![])
            ],
            "cut at {cut}"
        );
        assert_eq!(d.p.msgs[0].span.bytes, 9);
        assert_eq!(d.stats, ParseStats::default());
    }
    // A line longer than its limit is no message: the place is lost, its bytes in this segment
    // skipped, and picked up again.
    d.seg(OUT, b"#1234567890123\n").seg(OUT, &msg(b'B', b"b"));
    assert_eq!(kinds(&d), vec![(b'B', b"b".to_vec())]);
    assert_eq!(d.stats.desyncs, 1);
    assert_eq!(d.stats.unparsed_bytes, 15);
    // Not a line of this protocol.
    d.seg(OUT, b"#x\n");
    assert_eq!(d.p.losses.last(), Some(&(OUT.index(), Loss::NotAFrame)));
}
