//! Reader for `.seg` fixtures: real traffic captured per syscall (src/protocols/http1/fixtures/README.md).
//!
//! Header lines `# ...` (one says `# side: client|server`), then per syscall a line
//! `<C|S> <total_len> <captured_len>` followed by the captured bytes and a newline. `C` is
//! client→server. The segments can be turned into raw records as the kernel would deliver them
//! for the traced side, so fixtures exercise the whole user-space path.

use crate::event::{Direction, EventBuilder};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Side {
    Client,
    Server,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SegEntry {
    /// Client→server when true.
    pub to_server: bool,
    pub total_len: u64,
    pub bytes: Vec<u8>,
}

#[derive(Debug, Clone)]
pub struct SegFile {
    pub side: Side,
    pub comments: Vec<String>,
    pub entries: Vec<SegEntry>,
}

#[derive(Debug, thiserror::Error)]
#[error("segment file, byte {offset}: {what}")]
pub struct SegError {
    pub offset: usize,
    pub what: String,
}

fn err(offset: usize, what: impl Into<String>) -> SegError {
    SegError {
        offset,
        what: what.into(),
    }
}

impl SegFile {
    pub fn parse(data: &[u8]) -> Result<SegFile, SegError> {
        let mut pos = 0;
        let mut comments = Vec::new();
        let mut side = None;
        let mut entries = Vec::new();
        while pos < data.len() {
            let eol = data[pos..]
                .iter()
                .position(|&c| c == b'\n')
                .map(|i| pos + i)
                .ok_or_else(|| err(pos, "line without newline"))?;
            let line =
                std::str::from_utf8(&data[pos..eol]).map_err(|_| err(pos, "header not UTF-8"))?;
            if let Some(c) = line.strip_prefix('#') {
                let c = c.trim();
                if let Some(s) = c.strip_prefix("side:") {
                    side = match s.split_whitespace().next() {
                        Some("client") => Some(Side::Client),
                        Some("server") => Some(Side::Server),
                        _ => return Err(err(pos, format!("unknown side in {line:?}"))),
                    };
                }
                comments.push(c.to_owned());
                pos = eol + 1;
                continue;
            }
            if line.trim().is_empty() {
                pos = eol + 1;
                continue;
            }
            let mut f = line.split_whitespace();
            let to_server = match f.next() {
                Some("C") => true,
                Some("S") => false,
                other => return Err(err(pos, format!("expected C or S, found {other:?}"))),
            };
            let num = |v: Option<&str>| -> Result<u64, SegError> {
                v.and_then(|s| s.parse().ok())
                    .ok_or_else(|| err(pos, format!("bad lengths in {line:?}")))
            };
            let total_len = num(f.next())?;
            let cap = num(f.next())? as usize;
            let start = eol + 1;
            let end = start + cap;
            if end > data.len() || cap as u64 > total_len {
                return Err(err(
                    pos,
                    "captured bytes run past the end or exceed the total",
                ));
            }
            entries.push(SegEntry {
                to_server,
                total_len,
                bytes: data[start..end].to_vec(),
            });
            pos = end + 1;
        }
        let side = side.ok_or_else(|| err(0, "no '# side: client|server' line"))?;
        Ok(SegFile {
            side,
            comments,
            entries,
        })
    }

    /// Raw records for the traced side, with consecutive stream positions and a fake clock
    /// (each syscall 10 µs after the previous, lasting 1 µs), optionally cut at `snaplen` (the
    /// head only, as a kernel side without tails copied).
    pub fn records(&self, sock_id: u64, snaplen: Option<usize>) -> Vec<Vec<u8>> {
        self.make_records(sock_id, snaplen, false)
    }

    /// As [`SegFile::records`] cut at `snaplen` as the kernel side does: the head, and of a
    /// stream syscall longer than it by more than a tail its last bytes (`take_tail` in
    /// src/bpf/capture.h). The entries must be whole for the tails to be their last bytes.
    pub fn kernel_records(&self, sock_id: u64, snaplen: usize) -> Vec<Vec<u8>> {
        self.make_records(sock_id, Some(snaplen), true)
    }

    fn make_records(&self, sock_id: u64, snaplen: Option<usize>, tails: bool) -> Vec<Vec<u8>> {
        let mut seq = [0u64; 2];
        let mut now = 1_000_000u64;
        let (local, peer) = match self.side {
            Side::Client => (([127, 0, 0, 1], 40000), ([127, 0, 0, 1], 8080)),
            Side::Server => (([127, 0, 0, 1], 8080), ([127, 0, 0, 1], 40000)),
        };
        let (comm, pid) = match self.side {
            Side::Client => ("client", 100),
            Side::Server => ("server", 200),
        };
        self.entries
            .iter()
            .map(|e| {
                let egress = e.to_server == (self.side == Side::Client);
                let dir = if egress {
                    Direction::Egress
                } else {
                    Direction::Ingress
                };
                let cap = snaplen.map_or(e.bytes.len(), |s| s.min(e.bytes.len()));
                now += 10_000;
                let b = EventBuilder::data(dir, sock_id, seq[dir.index()], e.total_len)
                    .times(now, now + 1_000)
                    .process(pid, pid, comm)
                    .v4(local.0, local.1, peer.0, peer.1);
                let whole = e.bytes.len() as u64 == e.total_len;
                let rec = match snaplen {
                    Some(s) if tails && whole => {
                        let (head, tail) = crate::protocols::kernel_cut(&e.bytes, s);
                        if tail.is_empty() {
                            b.build(head)
                        } else {
                            b.build_with_tail(head, tail)
                        }
                    }
                    _ => b.build(&e.bytes[..cap]),
                };
                seq[dir.index()] += e.total_len;
                rec
            })
            .collect()
    }
}

/// Whether the traced side sent a `.seg` entry.
pub fn seg_direction(seg: &SegFile, to_server: bool) -> Direction {
    if to_server == (seg.side == Side::Client) {
        Direction::Egress
    } else {
        Direction::Ingress
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_and_rejects() {
        let f = SegFile::parse(b"# side: server\nC 3 3\nabc\nS 10 2\nxy\n").unwrap();
        assert_eq!(f.side, Side::Server);
        assert_eq!(f.entries.len(), 2);
        assert_eq!(f.entries[1].total_len, 10);
        assert_eq!(f.records(1, None).len(), 2);
        assert!(SegFile::parse(b"C 3 3\nabc\n").is_err());
        assert!(SegFile::parse(b"# side: server\nC 3 9\nabc\n").is_err());
        assert!(SegFile::parse(b"# side: server\nX 3 3\nabc\n").is_err());
    }
}
