//! The flow ends drained from the kernel's ring and not yet read by an interval's poll, held
//! compact and within a bound.
//!
//! Every end is reported with the interval it was drained in, at that interval's end, so an
//! interval's ends wait in memory until then: a teardown of 100,000 connections is 200,000
//! ends in one interval (40 MB as the kernel's 200-byte records). Here each record is kept as
//! the difference from the one before it (varints; the addresses, the command name and the
//! many zero or equal fields of a burst cost a byte or nothing): ~46 bytes an end in such a
//! teardown, never more than [`MAX_RECORD`]. And the memory is bounded whatever comes: at most
//! `max_chunks` chunks of [`CHUNK_BYTES`] are held (counting the chunks a poll has taken and
//! not read yet); past that the ring is not drained, the kernel's ring fills and the ends it
//! has no room for are counted (`ends_lost`), never user-space memory grown.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use super::raw::{RawFlow, FLOW_LEN};

/// Bytes per chunk (allocated whole, freed by the poll once read).
pub const CHUNK_BYTES: usize = 64 * 1024;

/// The most one end takes: a tag byte and the kernel's record, when its compact form would
/// be longer.
pub const MAX_RECORD: usize = 1 + FLOW_LEN;

/// The default bound on the bytes of ends held: 16 MiB, ~350,000 ends of a teardown (the
/// default `--max-flows` table torn down at once fits), 83,000 at the worst.
pub const DEFAULT_HELD_BYTES: usize = 16 << 20;

// The tag byte's bits.
const LADDR_SAME: u8 = 1;
const RADDR_SAME: u8 = 2;
const LADDR_V4: u8 = 4;
const RADDR_V4: u8 = 8;
const COMM_SAME: u8 = 16;
/// The kernel's record follows as it was written.
const RAW: u8 = 0x80;

/// One chunk of encoded ends; the count of chunks alive goes down when it is dropped.
struct Chunk {
    bytes: Vec<u8>,
    alive: Arc<AtomicUsize>,
}

impl Drop for Chunk {
    fn drop(&mut self) {
        self.alive.fetch_sub(1, Ordering::Relaxed);
    }
}

/// Flow ends in the order drained, compact, in chunks.
pub struct EndsBuf {
    chunks: Vec<Chunk>,
    /// The last record pushed (the next one is encoded against it); reset at each chunk so
    /// a chunk decodes on its own.
    prev: RawFlow,
    records: usize,
    /// One record's encoding, before it is copied into its chunk.
    scratch: Vec<u8>,
    /// Chunks alive in this buffer and in those taken from it.
    alive: Arc<AtomicUsize>,
    max_chunks: usize,
}

impl EndsBuf {
    /// A buffer that holds at most `max_bytes` of ends (one chunk at least).
    pub fn new(max_bytes: usize) -> EndsBuf {
        EndsBuf {
            chunks: Vec::new(),
            prev: RawFlow::default(),
            records: 0,
            scratch: Vec::with_capacity(256),
            alive: Arc::default(),
            max_chunks: (max_bytes / CHUNK_BYTES).max(1),
        }
    }

    /// How many more ends may be pushed within the bound (each takes at most
    /// [`MAX_RECORD`], and a chunk is only left when the next one does not fit in it).
    pub fn room(&self) -> usize {
        let spare = self
            .chunks
            .last()
            .map_or(0, |c| c.bytes.capacity() - c.bytes.len());
        let free_chunks = self
            .max_chunks
            .saturating_sub(self.alive.load(Ordering::Relaxed));
        spare / MAX_RECORD + free_chunks * (CHUNK_BYTES / MAX_RECORD)
    }

    /// Bytes held by this buffer and those taken from it and not read yet.
    pub fn held_bytes(&self) -> usize {
        self.alive.load(Ordering::Relaxed) * CHUNK_BYTES
    }

    /// Ends in this buffer.
    pub fn len(&self) -> usize {
        self.records
    }

    pub fn is_empty(&self) -> bool {
        self.records == 0
    }

    /// Appends one record of the kernel's flow-end ring (another length is ignored). Past
    /// the bound it is still kept (a drained end is never dropped): callers drain no more
    /// than [`EndsBuf::room`].
    pub fn push(&mut self, data: &[u8]) {
        let Some(r) = RawFlow::decode(data).filter(|_| data.len() == FLOW_LEN) else {
            return;
        };
        let fits = self
            .chunks
            .last()
            .is_some_and(|c| c.bytes.capacity() - c.bytes.len() >= MAX_RECORD);
        if !fits {
            self.alive.fetch_add(1, Ordering::Relaxed);
            self.chunks.push(Chunk {
                bytes: Vec::with_capacity(CHUNK_BYTES),
                alive: self.alive.clone(),
            });
            self.prev = RawFlow::default();
        }
        let Some(chunk) = self.chunks.last_mut() else {
            return;
        };
        // Encoded aside: a chunk never grows past its capacity (the bound counts chunks).
        let scratch = &mut self.scratch;
        scratch.clear();
        if encode(&r, &self.prev, scratch) && scratch.len() <= MAX_RECORD {
            chunk.bytes.extend_from_slice(scratch);
        } else {
            chunk.bytes.push(RAW);
            chunk.bytes.extend_from_slice(&data[..FLOW_LEN]);
        }
        self.prev = r;
        self.records += 1;
    }

    /// The ends pushed so far, leaving this buffer empty (its bound shared with them until
    /// they are read).
    pub fn take(&mut self) -> EndsBuf {
        let taken = EndsBuf {
            chunks: std::mem::take(&mut self.chunks),
            prev: std::mem::take(&mut self.prev),
            records: self.records,
            scratch: Vec::new(),
            alive: self.alive.clone(),
            max_chunks: self.max_chunks,
        };
        self.records = 0;
        taken
    }

    /// Hands each end to `each` in the order pushed, freeing each chunk once read.
    pub fn read(self, mut each: impl FnMut(&RawFlow)) {
        for chunk in self.chunks {
            let mut prev = RawFlow::default();
            let mut at = 0;
            while at < chunk.bytes.len() {
                let Some(r) = decode(&chunk.bytes, &mut at, &prev) else {
                    // Not reached (the bytes are our own encoding); the chunk's rest is
                    // skipped rather than misread.
                    break;
                };
                each(&r);
                prev = r;
            }
        }
    }
}

fn zigzag(d: i64) -> u64 {
    ((d << 1) ^ (d >> 63)) as u64
}

fn unzigzag(v: u64) -> i64 {
    ((v >> 1) as i64) ^ -((v & 1) as i64)
}

fn put(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push(v as u8 | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

/// A value as its difference from `base` (wrapping, zigzag).
fn put_delta(out: &mut Vec<u8>, v: u64, base: u64) {
    put(out, zigzag(v.wrapping_sub(base) as i64));
}

/// A time that may be 0 (not reached): 0, or 1 + its zigzag difference from `base`. False
/// for the one difference that has no room for the 1 (the record is then kept raw).
fn put_time(out: &mut Vec<u8>, v: u64, base: u64) -> bool {
    if v == 0 {
        out.push(0);
        return true;
    }
    match zigzag(v.wrapping_sub(base) as i64).checked_add(1) {
        Some(z) => {
            put(out, z);
            true
        }
        None => false,
    }
}

/// An address: nothing if as the last record's, 4 bytes for IPv4, else 16.
fn put_addr(out: &mut Vec<u8>, a: &[u8; 16], prev: &[u8; 16], same: u8, v4: u8) -> u8 {
    if a == prev {
        same
    } else if a[4..].iter().all(|&b| b == 0) {
        out.extend_from_slice(&a[..4]);
        v4
    } else {
        out.extend_from_slice(a);
        0
    }
}

/// Appends `r` encoded against `prev` (see the module's comment); false if it cannot be
/// (what it appended is then to be dropped).
fn encode(r: &RawFlow, prev: &RawFlow, out: &mut Vec<u8>) -> bool {
    let at = out.len();
    out.push(0);
    put_delta(out, r.start_ns, prev.start_ns);
    for t in [r.syn_ns, r.established_ns, r.end_ns] {
        if !put_time(out, t, r.start_ns) {
            return false;
        }
    }
    put(out, r.bytes_sent);
    put_delta(out, r.inode, prev.inode);
    for v in [r.bytes_acked, r.bytes_received, r.bytes_retrans] {
        put(out, v);
    }
    for v in [
        r.segs_in,
        r.segs_out,
        r.data_segs_in,
        r.data_segs_out,
        r.total_retrans,
        r.retrans_events,
        r.rst_sent,
        r.rst_received,
        r.srtt_us,
        // u32::MAX (no sample yet) as 0.
        r.srtt_min_us.wrapping_add(1),
        r.srtt_max_us,
        r.iv_srtt_min_us.wrapping_add(1),
        r.iv_srtt_max_us,
        r.pid,
    ] {
        put(out, u64::from(v));
    }
    put(out, zigzag(i64::from(r.sk_err)));
    put(out, u64::from(r.lport));
    put(out, u64::from(r.rport));
    out.extend_from_slice(&[r.family, r.state, r.role, r.flags, r.close_state]);
    let mut tag = put_addr(out, &r.laddr, &prev.laddr, LADDR_SAME, LADDR_V4);
    tag |= put_addr(out, &r.raddr, &prev.raddr, RADDR_SAME, RADDR_V4);
    if r.comm == prev.comm {
        tag |= COMM_SAME;
    } else {
        let n = r.comm.iter().rposition(|&b| b != 0).map_or(0, |i| i + 1);
        out.push(n as u8);
        out.extend_from_slice(&r.comm[..n]);
    }
    put_delta(out, r.sk, prev.sk);
    out[at] = tag;
    true
}

/// Reads bytes of `b` from `at`, bounded.
struct Reader<'a> {
    b: &'a [u8],
    at: usize,
}

impl Reader<'_> {
    fn byte(&mut self) -> Option<u8> {
        let v = *self.b.get(self.at)?;
        self.at += 1;
        Some(v)
    }

    fn bytes(&mut self, n: usize) -> Option<&[u8]> {
        let s = self.b.get(self.at..self.at.checked_add(n)?)?;
        self.at += n;
        Some(s)
    }

    fn var(&mut self) -> Option<u64> {
        let mut v = 0u64;
        for shift in (0..64).step_by(7) {
            let b = self.byte()?;
            v |= u64::from(b & 0x7f) << shift;
            if b < 0x80 {
                return Some(v);
            }
        }
        None
    }

    fn var32(&mut self) -> Option<u32> {
        u32::try_from(self.var()?).ok()
    }

    fn delta(&mut self, base: u64) -> Option<u64> {
        Some(base.wrapping_add(unzigzag(self.var()?) as u64))
    }

    fn time(&mut self, base: u64) -> Option<u64> {
        match self.var()? {
            0 => Some(0),
            v => Some(base.wrapping_add(unzigzag(v - 1) as u64)),
        }
    }

    fn addr(&mut self, tag: u8, same: u8, v4: u8, prev: &[u8; 16]) -> Option<[u8; 16]> {
        let mut a = [0u8; 16];
        if tag & same != 0 {
            a = *prev;
        } else if tag & v4 != 0 {
            a[..4].copy_from_slice(self.bytes(4)?);
        } else {
            a.copy_from_slice(self.bytes(16)?);
        }
        Some(a)
    }
}

/// The record at `*at` (encoded against `prev`), moving `at` past it; None if malformed.
fn decode(b: &[u8], at: &mut usize, prev: &RawFlow) -> Option<RawFlow> {
    let mut rd = Reader { b, at: *at };
    let tag = rd.byte()?;
    if tag == RAW {
        let r = RawFlow::decode(rd.bytes(FLOW_LEN)?)?;
        *at = rd.at;
        return Some(r);
    }
    let start_ns = rd.delta(prev.start_ns)?;
    let mut r = RawFlow {
        start_ns,
        syn_ns: rd.time(start_ns)?,
        established_ns: rd.time(start_ns)?,
        end_ns: rd.time(start_ns)?,
        bytes_sent: rd.var()?,
        inode: rd.delta(prev.inode)?,
        bytes_acked: rd.var()?,
        bytes_received: rd.var()?,
        bytes_retrans: rd.var()?,
        segs_in: rd.var32()?,
        segs_out: rd.var32()?,
        data_segs_in: rd.var32()?,
        data_segs_out: rd.var32()?,
        total_retrans: rd.var32()?,
        retrans_events: rd.var32()?,
        rst_sent: rd.var32()?,
        rst_received: rd.var32()?,
        srtt_us: rd.var32()?,
        srtt_min_us: rd.var32()?.wrapping_sub(1),
        srtt_max_us: rd.var32()?,
        iv_srtt_min_us: rd.var32()?.wrapping_sub(1),
        iv_srtt_max_us: rd.var32()?,
        pid: rd.var32()?,
        sk_err: i32::try_from(unzigzag(rd.var()?)).ok()?,
        lport: u16::try_from(rd.var()?).ok()?,
        rport: u16::try_from(rd.var()?).ok()?,
        ..Default::default()
    };
    let five = rd.bytes(5)?;
    (r.family, r.state, r.role, r.flags, r.close_state) =
        (five[0], five[1], five[2], five[3], five[4]);
    r.laddr = rd.addr(tag, LADDR_SAME, LADDR_V4, &prev.laddr)?;
    r.raddr = rd.addr(tag, RADDR_SAME, RADDR_V4, &prev.raddr)?;
    r.comm = if tag & COMM_SAME != 0 {
        prev.comm
    } else {
        let n = usize::from(rd.byte()?);
        let mut c = [0u8; 16];
        c.get_mut(..n)?.copy_from_slice(rd.bytes(n)?);
        c
    };
    r.sk = rd.delta(prev.sk)?;
    *at = rd.at;
    Some(r)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `r` as the kernel writes it (`struct ebtop_flow`, src/bpf/flowtable.h), with the
    /// padding and the `touched` field that the decoder skips set to noise.
    fn kernel_bytes(r: &RawFlow) -> [u8; FLOW_LEN] {
        let mut b = [0u8; FLOW_LEN];
        let u64s = [
            r.start_ns,
            r.syn_ns,
            r.established_ns,
            r.end_ns,
            r.bytes_sent,
            r.inode,
            r.bytes_acked,
            r.bytes_received,
            r.bytes_retrans,
        ];
        for (i, v) in u64s.iter().enumerate() {
            b[i * 8..i * 8 + 8].copy_from_slice(&v.to_le_bytes());
        }
        let u32s = [
            r.segs_in,
            r.segs_out,
            r.data_segs_in,
            r.data_segs_out,
            r.total_retrans,
            r.retrans_events,
            r.rst_sent,
            r.rst_received,
            r.srtt_us,
            r.srtt_min_us,
            r.srtt_max_us,
            r.iv_srtt_min_us,
            r.iv_srtt_max_us,
            r.pid,
            r.sk_err as u32,
        ];
        for (i, v) in u32s.iter().enumerate() {
            b[72 + i * 4..76 + i * 4].copy_from_slice(&v.to_le_bytes());
        }
        b[132..134].copy_from_slice(&r.lport.to_le_bytes());
        b[134..136].copy_from_slice(&r.rport.to_le_bytes());
        b[136..141].copy_from_slice(&[r.family, r.state, r.role, r.flags, r.close_state]);
        b[141..144].copy_from_slice(&[0xa5, 0x17, 0x3c]);
        b[144..160].copy_from_slice(&r.laddr);
        b[160..176].copy_from_slice(&r.raddr);
        b[176..192].copy_from_slice(&r.comm);
        b[192..200].copy_from_slice(&r.sk.to_le_bytes());
        b
    }

    fn comm(s: &str) -> [u8; 16] {
        let mut c = [0u8; 16];
        c[..s.len()].copy_from_slice(s.as_bytes());
        c
    }

    /// The `i`th end of a teardown like scenario D's (examples/many_conns: 100,000 loopback
    /// connections held, then closed at once; the client's and the server's flow each end).
    fn teardown_end(i: u64) -> RawFlow {
        let conn = i / 2;
        let client = i.is_multiple_of(2);
        let start = 1_000_000_000_000 + conn * 9_731 + (conn % 7) * 1_000_003;
        let (lport, rport) = if client {
            (20_000 + (conn % 40_000) as u16, 8080)
        } else {
            (8080, 20_000 + (conn % 40_000) as u16)
        };
        RawFlow {
            start_ns: start,
            syn_ns: if client { start } else { 0 },
            established_ns: start + 41_000 + conn % 977,
            end_ns: 1_030_000_000_000 + i * 4_203,
            bytes_sent: 64 + conn % 3,
            inode: 3_000_000 + i * 2 + (i % 5),
            bytes_acked: 64 + u64::from(client) + conn % 3,
            bytes_received: 65,
            segs_in: 5,
            segs_out: 5,
            data_segs_in: 1,
            data_segs_out: 1,
            srtt_us: 40 + (conn % 60) as u32,
            srtt_min_us: u32::MAX,
            srtt_max_us: 0,
            iv_srtt_min_us: 38,
            iv_srtt_max_us: 95,
            pid: 4_000 + (conn % 11) as u32,
            lport,
            rport,
            family: 2,
            state: 7,
            role: if client { 1 } else { 2 },
            flags: 4 | 2,
            close_state: if client { 5 } else { 9 },
            laddr: [127, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0],
            raddr: [127, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0],
            comm: comm("many_conns"),
            sk: 0xffff_8881_0000_0000 + (i.wrapping_mul(0x9e37_79b9) % (1 << 30)) / 2304 * 2304,
            ..Default::default()
        }
    }

    /// Ends with every field at odd values: the extremes of each (zigzag and varint edges,
    /// a difference of i64::MIN, `u32::MAX` ranges, negative errors), IPv6 and IPv4-mapped
    /// addresses, full-length and empty command names.
    fn odd_ends() -> Vec<RawFlow> {
        let mut x: u64 = 0x2545_f491_4f6c_dd1d;
        let mut next = move || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        let mut out = Vec::new();
        for i in 0..2_000u64 {
            let pick = |v: u64, k: u64| match (v ^ k) % 6 {
                0 => 0,
                1 => u64::MAX,
                2 => 1 << 63,
                3 => v >> (v % 64),
                _ => v,
            };
            let a = next();
            let b = next();
            let mut addr = [0u8; 16];
            addr.copy_from_slice(&[a.to_le_bytes(), b.to_le_bytes()].concat());
            if i.is_multiple_of(3) {
                addr[4..].fill(0);
            }
            let c = next();
            let name = ["", "x", "a-long-command!!", "nginx: worker"][(c % 4) as usize];
            out.push(RawFlow {
                start_ns: pick(next(), 1),
                syn_ns: pick(next(), 2),
                established_ns: pick(next(), 3),
                end_ns: if i == 7 { 1 << 63 } else { pick(next(), 4) },
                bytes_sent: pick(next(), 5),
                inode: pick(next(), 6),
                bytes_acked: pick(next(), 7),
                bytes_received: pick(next(), 8),
                bytes_retrans: pick(next(), 9),
                segs_in: next() as u32,
                segs_out: u32::MAX,
                data_segs_in: 0,
                data_segs_out: next() as u32 >> (c % 32),
                total_retrans: next() as u32,
                retrans_events: 1,
                rst_sent: next() as u32,
                rst_received: u32::MAX - 1,
                srtt_us: next() as u32,
                srtt_min_us: [u32::MAX, 0, 5][(c % 3) as usize],
                srtt_max_us: next() as u32,
                iv_srtt_min_us: [u32::MAX, 0, 5][(c % 3) as usize],
                iv_srtt_max_us: u32::MAX,
                pid: next() as u32,
                sk_err: [i32::MIN, -1, 0, 104, i32::MAX][(c % 5) as usize],
                lport: next() as u16,
                rport: u16::MAX,
                family: [2, 10][(i % 2) as usize],
                state: next() as u8,
                role: next() as u8,
                flags: next() as u8,
                close_state: 255,
                laddr: if i.is_multiple_of(5) { [0; 16] } else { addr },
                raddr: if i.is_multiple_of(4) {
                    addr
                } else {
                    [0xff; 16]
                },
                comm: comm(name),
                sk: pick(next(), 10),
            });
        }
        out
    }

    fn read_all(buf: EndsBuf) -> Vec<RawFlow> {
        let mut got = Vec::new();
        buf.read(|r| got.push(r.clone()));
        got
    }

    /// Every end comes back as the kernel wrote it, in order, whatever its values; none
    /// takes more than `MAX_RECORD`.
    #[test]
    fn ends_come_back_exactly() {
        let mut ends: Vec<RawFlow> = odd_ends();
        ends.extend((0..3_000).map(teardown_end));
        ends.extend(odd_ends().into_iter().rev());
        let mut buf = EndsBuf::new(usize::MAX);
        let mut raw = 0;
        for r in &ends {
            let before = buf.chunks.last().map_or(0, |c| c.bytes.len());
            let chunks = buf.chunks.len();
            buf.push(&kernel_bytes(r));
            let c = &buf.chunks.last().unwrap().bytes;
            let used = if buf.chunks.len() == chunks {
                c.len() - before
            } else {
                c.len()
            };
            assert!(used <= MAX_RECORD, "{used} bytes for {r:?}");
            raw += usize::from(used == MAX_RECORD && c[c.len() - used] == RAW);
        }
        // Both forms were exercised.
        assert!(raw > 0 && raw < ends.len() / 2, "{raw} raw");
        assert_eq!(buf.len(), ends.len());
        // Records of another length are not flow ends: ignored.
        buf.push(&[0u8; FLOW_LEN - 1]);
        buf.push(&[0u8; FLOW_LEN + 8]);
        assert_eq!(buf.len(), ends.len());
        let got = read_all(buf.take());
        assert_eq!(got.len(), ends.len());
        for (i, (g, e)) in got.iter().zip(&ends).enumerate() {
            assert_eq!(g, e, "end {i}");
        }
        // The one time difference with no room in the compact form came back too (raw).
        assert!(ends.iter().any(|r| r.end_ns == 1 << 63 && r.start_ns == 0));
        assert!(read_all(buf.take()).is_empty());
    }

    /// Scenario D's teardown (200,000 ends in one interval) takes under 64 bytes an end, not
    /// the kernel's 200: 12.8 MB at most, not 40.
    #[test]
    fn a_teardown_is_held_compact() {
        let mut buf = EndsBuf::new(usize::MAX);
        for i in 0..200_000 {
            buf.push(&kernel_bytes(&teardown_end(i)));
        }
        let used: usize = buf.chunks.iter().map(|c| c.bytes.len()).sum();
        let held = buf.held_bytes();
        assert!(used < 64 * 200_000, "{} bytes an end", used / 200_000);
        assert!(
            held < used + used / 8 + CHUNK_BYTES,
            "held {held}, used {used}"
        );
        let got = read_all(buf.take());
        assert_eq!(got.len(), 200_000);
        assert!(got
            .iter()
            .enumerate()
            .all(|(i, r)| *r == teardown_end(i as u64)));
    }

    /// The bound: a drainer that pushes no more than `room()` never holds more than its
    /// bound, across the buffer being filled and the one a poll took and is reading (its
    /// chunks count until freed), and no chunk grows past its size; every end pushed is read
    /// once, in order.
    #[test]
    fn held_ends_stay_within_the_bound() {
        const BOUND: usize = 8 * CHUNK_BYTES;
        // Worst-case records (raw, mostly) then a teardown's, then worst again.
        let mut ends: Vec<RawFlow> = odd_ends();
        ends.extend((0..100_000).map(teardown_end));
        ends.extend(odd_ends());
        let mut buf = EndsBuf::new(BOUND);
        let mut taken: Option<EndsBuf> = None;
        let mut got: Vec<RawFlow> = Vec::new();
        let mut next = 0;
        let mut rounds = 0;
        let check = |buf: &EndsBuf, taken: &Option<EndsBuf>| {
            let mut capacity: usize = buf.chunks.iter().map(|c| c.bytes.capacity()).sum();
            if let Some(t) = taken {
                capacity += t.chunks.iter().map(|c| c.bytes.capacity()).sum::<usize>();
            }
            assert_eq!(capacity, buf.held_bytes());
            assert!(capacity <= BOUND, "{capacity} bytes held");
        };
        while next < ends.len() || taken.is_some() {
            rounds += 1;
            // The ring's drain: as many as there is room for.
            let room = buf.room();
            for r in ends.iter().skip(next).take(room) {
                buf.push(&kernel_bytes(r));
                check(&buf, &taken);
                next += 1;
            }
            // A poll reads what the previous interval took (freeing its chunks), and the
            // interval ends: its ends are taken for the next poll.
            if let Some(t) = taken.take() {
                got.extend(read_all(t));
            }
            if !buf.is_empty() {
                taken = Some(buf.take());
            }
            check(&buf, &taken);
            assert!(rounds < 1_000);
        }
        assert_eq!(got.len(), ends.len());
        assert!(got.iter().zip(&ends).all(|(g, e)| g == e));
        // Room for none once the bound is held; room again once the poll has read.
        let mut full = EndsBuf::new(BOUND);
        while full.room() > 0 {
            full.push(&kernel_bytes(&odd_ends()[3]));
        }
        assert!(full.held_bytes() <= BOUND);
        let t = full.take();
        assert_eq!(full.room(), 0);
        drop(t);
        assert_eq!(full.room(), 8 * (CHUNK_BYTES / MAX_RECORD));
    }
}
