//! Drives every protocol parser from arbitrary bytes: the cargo-fuzz targets (fuzz/) and a
//! stable-toolchain randomized test share it, so "no input panics a parser" is checked in CI too.

use super::{ParseDepth, ParseStats, ParserConfig, Segment, Transport, REGISTRY};
use crate::event::Direction;

/// Splits `data` into segments, gaps and uncaptured tails by its own bytes, feeds them to a
/// fresh parser of each protocol, and checks the invariants that must hold for any input.
/// Returns the calls the parsers emitted (all protocols and depths).
pub fn drive(data: &[u8]) -> usize {
    REGISTRY.iter().map(|spec| drive_spec(spec, data)).sum()
}

/// As `drive`, through the parser of the protocol in `src/protocols/<folder>/` only: a target
/// per protocol runs many more inputs a second on that parser than `drive` gives each one.
/// Panics for a folder not in the registry (a target's name is fixed in its source).
pub fn drive_protocol(folder: &str, data: &[u8]) -> usize {
    let spec = REGISTRY
        .iter()
        .find(|s| s.folder == folder)
        .unwrap_or_else(|| panic!("no protocol in src/protocols/{folder}"));
    drive_spec(spec, data)
}

fn drive_spec(spec: &super::ProtocolDescriptor, data: &[u8]) -> usize {
    let mut calls = 0;
    {
        // Datagram framing only means something to datagram protocols: each segment is a whole
        // message.
        for (depth, transport) in [
            (ParseDepth::Shallow, Transport::Stream),
            (ParseDepth::Full, Transport::Stream),
            (ParseDepth::Full, Transport::Datagram),
        ] {
            if transport == Transport::Datagram && !spec.datagrams {
                continue;
            }
            let mut p = (spec.new_parser)(&ParserConfig {
                depth,
                transport,
                // Full depth also keeps (and redacts) message heads, as the TUI asks.
                keep_head: if depth == ParseDepth::Full { 64 } else { 0 },
            });
            let mut out = Vec::new();
            let mut stats = ParseStats::default();
            let mut fed = [0u64; 2];
            let mut rest = data;
            let mut now = 0u64;
            while let Some((&ctl, tail)) = rest.split_first() {
                let dir = if ctl & 1 == 0 {
                    Direction::Egress
                } else {
                    Direction::Ingress
                };
                let len = ((ctl >> 1) & 0x3f) as usize;
                let (payload, tail) = tail.split_at(len.min(tail.len()));
                rest = tail;
                now += 1000;
                match ctl >> 7 {
                    // Top bit: this syscall moved more than was captured, or bytes were lost.
                    1 if ctl & 2 == 0 => {
                        let extra = (len as u64 + 1) * 97;
                        // Every third such length: the captured bytes' second half is a
                        // kernel tail (the syscall's last bytes, the uncaptured ones before).
                        let (head, end) = if len % 6 == 4 {
                            payload.split_at(payload.len() / 2)
                        } else {
                            (payload, &[][..])
                        };
                        let seg = Segment {
                            dir,
                            payload: head,
                            tail: end,
                            total_len: payload.len() as u64 + extra,
                            start_ns: now,
                            end_ns: now + 10,
                            peer: None,
                            pos: 0,
                        };
                        fed[dir.index()] += seg.total_len;
                        p.on_segment(&seg, &mut out, &mut stats);
                    }
                    1 => {
                        let lost = if len.is_multiple_of(5) {
                            None
                        } else {
                            Some(len as u64 * 13)
                        };
                        fed[dir.index()] += lost.unwrap_or(0);
                        p.on_gap(dir, lost, &mut stats);
                    }
                    _ => {
                        let seg = Segment {
                            dir,
                            payload,
                            tail: &[],
                            total_len: payload.len() as u64,
                            start_ns: now,
                            end_ns: now + 10,
                            peer: None,
                            pos: 0,
                        };
                        fed[dir.index()] += seg.total_len;
                        p.on_segment(&seg, &mut out, &mut stats);
                    }
                }
            }
            p.on_close(&mut out, &mut stats);
            calls += out.len();
            let (mut req, mut resp) = ([0u64; 2], [0u64; 2]);
            for c in &out {
                let d = c.request_dir.index();
                req[d] += c.req.bytes;
                resp[1 - d] += c.resp.bytes;
                assert!(c.req.first_start_ns <= c.req.last_end_ns);
                assert!(c.resp.first_start_ns <= c.resp.last_end_ns);
            }
            for d in 0..2 {
                // Calls never claim more bytes than the stream carried.
                assert!(
                    req[d] + resp[d] <= fed[d],
                    "{} {depth:?} {transport:?}: dir {d}: {} + {} > {}",
                    spec.folder,
                    req[d],
                    resp[d],
                    fed[d]
                );
            }
        }
    }
    calls
}

/// A driver input playing a `.seg` fixture's syscalls in order (each cut into 63-byte
/// segments; bytes moved but not captured as an uncaptured tail), up to about `max_len` bytes.
pub fn seed_from_seg(seg: &crate::segfile::SegFile, max_len: usize) -> Vec<u8> {
    let mut out = Vec::new();
    for e in &seg.entries {
        if out.len() >= max_len {
            break;
        }
        let dir = crate::segfile::seg_direction(seg, e.to_server) as u8;
        for piece in e.bytes.chunks(63) {
            out.push((piece.len() as u8) << 1 | dir);
            out.extend_from_slice(piece);
        }
        if e.total_len > e.bytes.len() as u64 {
            // Top bit, even length: an uncaptured tail of (len + 1) * 97 bytes.
            out.push(0x80 | dir);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::xorshift::XorShift as Rng;

    #[test]
    fn random_and_mutated_inputs_never_panic() {
        let seeds: &[&[u8]] = &[
            b"GET / HTTP/1.1\r\nHost: a\r\n\r\n",
            b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello",
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n",
            b"POST /x HTTP/1.1\r\nContent-Length: 3\r\nExpect: 100-continue\r\n\r\nabc",
            b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 101 Switching\r\n\r\n",
            b"*3\r\n$3\r\nSET\r\n$4\r\nk:12\r\n$5\r\nvalue\r\n*1\r\n$4\r\nPING\r\n",
            b"+OK\r\n$5\r\nhello\r\n$-1\r\n:42\r\n-ERR no\r\n*2\r\n$1\r\na\r\n*-1\r\n",
            b"%1\r\n+a\r\n~2\r\n,1.5\r\n#t\r\n|1\r\n+k\r\n(12\r\n_\r\n=7\r\ntxt:abc\r\n",
            b">3\r\n$7\r\nmessage\r\n$1\r\nc\r\n$1\r\nm\r\n!3\r\nERR\r\n",
            b"*3\r\n$9\r\nsubscribe\r\n$1\r\nc\r\n:1\r\n$?\r\n;2\r\nab\r\n;0\r\n",
            b"*?\r\n:1\r\n.\r\nHELLO 3 AUTH u p\r\nMULTI\r\n\r\nEXEC\r\n",
            b"*2\r\n$6\r\nCLIENT\r\n$5\r\nREPLY\r\n*1\r\n$7\r\nMONITOR\r\n",
            // DNS: a query (EDNS), then a length-prefixed answer with a compressed name.
            b"\x12\x34\x01\x20\x00\x01\x00\x00\x00\x00\x00\x01\x01a\x04test\x00\x00\x01\x00\x01\x00\x00\x29\x04\xd0\x00\x00\x00\x00\x00\x00",
            b"\x00\x28\x12\x34\x85\x80\x00\x01\x00\x01\x00\x00\x00\x00\x01a\x04test\x00\x00\x01\x00\x01\xc0\x0c\x00\x01\x00\x01\x00\x00\x00\x3c\x00\x04\xc0\x00\x02\x0a",
            // MySQL: a greeting's start, a COM_QUERY, a result set of one row, an OK and an ERR.
            b"\x64\x00\x00\x00\x0a\x35\x2e\x35\x2e\x35\x00\x05\x00\x00\x00abcdefgh\x00\xfe\xf7\x08\x02\x00\xff\x81",
            b"\x09\x00\x00\x00\x03SELECT 1\x01\x00\x00\x01\x01\x05\x00\x00\x02\x03def\x00\x05\x00\x00\x03\xfe\x00\x00\x0a\x00\x02\x00\x00\x04\x011\x05\x00\x00\x05\xfe\x00\x00\x02\x00",
            b"\x07\x00\x00\x01\x00\x01\x02\x02\x00\x00\x00\x0c\x00\x00\x01\x00\x07\x00\x00\x00\x01\x00\x01\x00\x00\x00\x00\x08\x00\x00\x01\xff\x26\x04#23000",
            // HTTP/2: the preface, SETTINGS, a padded HEADERS with priority and a CONTINUATION
            // (literals with indexing), DATA with a gRPC message; a response, trailers, RST.
            b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\x00\x00\x06\x04\x00\x00\x00\x00\x00\x00\x01\x00\x00\x10\x00\x00\x00\x0d\x01\x28\x00\x00\x00\x01\x02\x80\x00\x00\x00\x10\x83\x86\x44\x03/ab\x00\x00\x00\x00\x05\x09\x04\x00\x00\x00\x01\x5f\x10\x00\x00\x07\x00\x01\x00\x00\x00\x01\x00\x00\x00\x00\x02hi",
            b"\x00\x00\x02\x01\x04\x00\x00\x00\x01\x88\xbe\x00\x00\x07\x00\x00\x00\x00\x00\x01\x00\x00\x00\x00\x02ok\x00\x00\x10\x01\x05\x00\x00\x00\x01\x40\x0bgrpc-status\x012\x00\x00\x04\x03\x00\x00\x00\x00\x03\x00\x00\x00\x08\x00\x00\x08\x07\x00\x00\x00\x00\x00\x00\x00\x01\x00\x00\x00\x02",
        ];
        let mut rng = Rng(0x9e3779b97f4a7c15);
        for _ in 0..3000 {
            let mut input = Vec::new();
            for _ in 0..(rng.next() % 8) {
                let seed = seeds[(rng.next() % seeds.len() as u64) as usize];
                let cut = (rng.next() % (seed.len() as u64 + 1)) as usize;
                let piece = &seed[..cut.min(63)];
                let mut ctl = (piece.len() as u8) << 1 | (rng.next() & 1) as u8;
                if rng.next().is_multiple_of(6) {
                    ctl |= 0x80;
                }
                input.push(ctl);
                input.extend_from_slice(piece);
            }
            for _ in 0..(rng.next() % 4) {
                if !input.is_empty() {
                    let i = (rng.next() % input.len() as u64) as usize;
                    input[i] = rng.next() as u8;
                }
            }
            drive(&input);
        }
        for _ in 0..2000 {
            let n = (rng.next() % 300) as usize;
            let input: Vec<u8> = (0..n).map(|_| rng.next() as u8).collect();
            drive(&input);
        }
    }
}
