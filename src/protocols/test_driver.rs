//! The parser driver the protocols' unit tests share: a stream parser fed segments as a
//! connection would feed them, with a fake clock (1 µs per syscall).

use super::Transport;
use super::{Direction, L7Call, ParseDepth, ParseStats, ParserConfig, Segment, StreamParser};

/// What the tests build a stream parser with: full depth, `keep_head` bytes of heads kept.
pub(crate) fn stream_config(keep_head: usize) -> ParserConfig {
    ParserConfig {
        depth: ParseDepth::Full,
        transport: Transport::Stream,
        keep_head,
    }
}

pub(crate) struct Driver<P> {
    pub p: P,
    pub calls: Vec<L7Call>,
    pub stats: ParseStats,
    pub now: u64,
    /// Bytes fed per direction (captured or not).
    pub fed: [u64; 2],
}

impl<P: StreamParser> Driver<P> {
    pub fn with_parser(p: P) -> Self {
        Driver {
            p,
            calls: Vec::new(),
            stats: ParseStats::default(),
            now: 0,
            fed: [0; 2],
        }
    }

    /// A segment of `total` bytes of which `bytes` were captured.
    pub fn seg_cut(&mut self, dir: Direction, bytes: &[u8], total: u64) -> &mut Self {
        self.now += 1000;
        let seg = Segment {
            dir,
            payload: bytes,
            tail: &[],
            total_len: total,
            start_ns: self.now,
            end_ns: self.now + 500,
            peer: None,
            pos: self.fed[dir.index()],
        };
        self.fed[dir.index()] = self.fed[dir.index()].saturating_add(total);
        self.p.on_segment(&seg, &mut self.calls, &mut self.stats);
        self
    }

    /// A syscall of `bytes` as the kernel delivers it at `snaplen`: the first `snaplen`
    /// bytes, and of a longer one its last bytes too (a tail), the whole syscall when those
    /// reach the head (`take_tail` in src/bpf/capture.h).
    pub fn seg_snapped(&mut self, dir: Direction, bytes: &[u8], snaplen: usize) -> &mut Self {
        let (head, tail) = super::kernel_cut(bytes, snaplen);
        self.now += 1000;
        let seg = Segment {
            dir,
            payload: head,
            tail,
            total_len: bytes.len() as u64,
            start_ns: self.now,
            end_ns: self.now + 500,
            peer: None,
            pos: self.fed[dir.index()],
        };
        self.fed[dir.index()] = self.fed[dir.index()].saturating_add(bytes.len() as u64);
        self.p.on_segment(&seg, &mut self.calls, &mut self.stats);
        self
    }

    pub fn seg(&mut self, dir: Direction, bytes: &[u8]) -> &mut Self {
        self.seg_cut(dir, bytes, bytes.len() as u64)
    }

    pub fn gap(&mut self, dir: Direction, len: Option<u64>) -> &mut Self {
        self.p.on_gap(dir, len, &mut self.stats);
        self
    }

    pub fn close(&mut self) -> &mut Self {
        self.p.on_close(&mut self.calls, &mut self.stats);
        self
    }

    /// Call `i`'s detail `key`.
    pub fn detail(&self, i: usize, key: &str) -> Option<&str> {
        self.calls[i]
            .details
            .iter()
            .find(|(k, _)| *k == key)
            .map(|(_, v)| v.as_str())
    }
}
