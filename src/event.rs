//! Decoding of the records the BPF programs write (layout: `src/bpf/ebtop.h`).
//!
//! Records are decoded field by field from little-endian bytes rather than cast, so a short or
//! corrupt record (from a damaged recording) is an error, never undefined behaviour.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

/// Size of `struct ebtop_event`, the fixed header in front of every payload.
pub const HEADER_LEN: usize = 120;
/// Largest snaplen the kernel side accepts (`EBTOP_MAX_SNAPLEN`).
pub const MAX_SNAPLEN: u32 = 16384;

pub const AF_INET: u8 = 2;
pub const AF_INET6: u8 = 10;
pub const SOCK_STREAM: u8 = 1;
pub const SOCK_DGRAM: u8 = 2;

/// Flag: the payload was cut (snaplen or iovec limit); `cap_len < total_len`.
pub const FLAG_TRUNCATED: u16 = 1;
/// Flag: the peer address came from the syscall's sockaddr argument.
pub const FLAG_PEER_FROM_ARG: u16 = 2;
/// Set in [`Event::conn_key`] for a socket's TLS plaintext stream (socket inodes are far
/// below it).
pub const TLS_STREAM_BIT: u64 = 1 << 63;

/// Flag: `tail_len` bytes after the payload are the syscall's last bytes (a tail); those
/// between the payload (the head) and them went uncaptured. Kernel side: `take_tail`.
pub const FLAG_TAIL: u16 = 8;
/// Most bytes a tail holds (`EBTOP_TAIL_LEN`).
pub const TAIL_LEN: usize = 256;

/// Flag: 8 bytes after the payload and the tail name the Go goroutine (its `g`'s address)
/// that moved the bytes (`src/bpf/gochain.h`).
pub const FLAG_GOROUTINE: u16 = 16;

/// Flag: the first record of its direction since its connection, cut by a CPU budget, was
/// captured again (`EBTOP_F_REJOINED`): `seq` went on over the bytes shed since the cut, and
/// the record begins a request or follows one ([`crate::conntrack`] starts the connection's
/// parser over there, without counting a gap).
pub const FLAG_REJOINED: u16 = 32;

/// Flag: TLS plaintext of the socket, from the TLS library probes (its own byte positions);
/// on a close record: the socket was a TLS connection.
pub const FLAG_TLS: u16 = 4;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EventKind {
    Data,
    Connect,
    Accept,
    Close,
    /// A Go net/http client probe fired (`src/bpf/gohttp.h`): no socket; [`Event::go_http`]
    /// says which, on which connection object, by which goroutine.
    GoHttp,
}

/// `total_len` of an [`EventKind::GoHttp`] record from nginx's upstream writer
/// (`EBTOP_NGX_UPSTREAM_WRITE`, [`Event::nginx_upstream`]).
pub const NGX_UPSTREAM_WRITE: u64 = 6;

/// What an [`EventKind::GoHttp`] record says (`enum ebtop_go_http`): goroutine `g` of the
/// record's process ...
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GoHttp {
    /// ... writes connection object `pc`'s socket now (`persistConnWriter.Write` began: it
    /// runs that connection's writeLoop).
    ConnWrite { pc: u64, g: u64 },
    /// ... called `(*persistConn).roundTrip` on `pc`: it asks for `pc`'s next request.
    RoundTrip { pc: u64, g: u64 },
    /// ... returned from writeLoop (the goroutine ends; its `g` may be reused).
    WriteLoopEnd { g: u64 },
    /// ... ran a `go` statement that made goroutine `child` (`src/bpf/gospawn.h`).
    Spawn { parent: u64, child: u64 },
    /// ... is a new goroutine whose creator is not known (a coroutine, or a `go` statement
    /// whose creator was not seen): whatever its `g` was before is over.
    NewG { g: u64 },
}

/// Direction as seen by the traced process.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Direction {
    /// The process sent these bytes.
    Egress = 0,
    /// The process received these bytes.
    Ingress = 1,
}

impl Direction {
    pub fn index(self) -> usize {
        self as usize
    }
    pub fn opposite(self) -> Direction {
        match self {
            Direction::Egress => Direction::Ingress,
            Direction::Ingress => Direction::Egress,
        }
    }
}

/// Syscall that produced a record (`enum ebtop_syscall`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Syscall {
    Read,
    Write,
    Readv,
    Writev,
    Sendto,
    Recvfrom,
    Sendmsg,
    Recvmsg,
    Sendmmsg,
    Recvmmsg,
    Sendfile,
    Connect,
    Accept,
    Accept4,
    Close,
    /// Socket-layer capture: a send or receive made by no syscall whose buffer ebtop reads
    /// (io_uring, sendfile/splice, mmsg, a kernel thread): length only.
    Other,
    /// TLS plaintext: an `SSL_write`/`SSL_read` call (uprobes on the TLS library).
    Tls,
}

impl Syscall {
    fn from_raw(v: u8) -> Option<Syscall> {
        use Syscall::*;
        Some(match v {
            1 => Read,
            2 => Write,
            3 => Readv,
            4 => Writev,
            5 => Sendto,
            6 => Recvfrom,
            7 => Sendmsg,
            8 => Recvmsg,
            9 => Sendmmsg,
            10 => Recvmmsg,
            11 => Sendfile,
            12 => Connect,
            13 => Accept,
            14 => Accept4,
            15 => Close,
            16 => Other,
            17 => Tls,
            _ => return None,
        })
    }

    pub fn name(self) -> &'static str {
        use Syscall::*;
        match self {
            Read => "read",
            Write => "write",
            Readv => "readv",
            Writev => "writev",
            Sendto => "sendto",
            Recvfrom => "recvfrom",
            Sendmsg => "sendmsg",
            Recvmsg => "recvmsg",
            Sendmmsg => "sendmmsg",
            Recvmmsg => "recvmmsg",
            Sendfile => "sendfile",
            Connect => "connect",
            Accept => "accept",
            Accept4 => "accept4",
            Close => "close",
            Other => "other",
            Tls => "ssl",
        }
    }
}

/// Why a record could not be decoded.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum DecodeError {
    #[error("record of {0} bytes is shorter than the {HEADER_LEN}-byte header")]
    Short(usize),
    #[error("record says {cap_len} payload bytes but carries {have}")]
    PayloadLength { cap_len: u32, have: usize },
    #[error("unknown record kind {0}")]
    Kind(u8),
    #[error("unknown syscall id {0}")]
    Syscall(u8),
    #[error("unknown address family {0}")]
    Family(u8),
}

/// One decoded record; `payload` borrows from the raw bytes.
#[derive(Debug, Clone, Copy)]
pub struct Event<'a> {
    pub start_ns: u64,
    pub end_ns: u64,
    pub sock_id: u64,
    pub seq: u64,
    pub total_len: u64,
    pub pid: u32,
    pub tid: u32,
    pub fd: i32,
    pub kind: EventKind,
    pub dir: Direction,
    pub syscall: Syscall,
    pub family: u8,
    pub sock_type: u8,
    pub proto_hint: u8,
    pub flags: u16,
    pub lport: u16,
    pub rport: u16,
    pub laddr: [u8; 16],
    pub raddr: [u8; 16],
    pub comm: [u8; 16],
    pub payload: &'a [u8],
    /// The syscall's last bytes, apart from the payload (empty: none). `payload`, the bytes
    /// between (uncaptured) and `tail` make up `total_len`.
    pub tail: &'a [u8],
    /// The Go goroutine that made the syscall (its `g`, never 0), where the kernel proved one
    /// (`FLAG_GOROUTINE`): call chains follow goroutines, not threads, in Go programs.
    pub goroutine: Option<u64>,
}

fn u64_at(b: &[u8], off: usize) -> u64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[off..off + 8]);
    u64::from_le_bytes(a)
}
fn u32_at(b: &[u8], off: usize) -> u32 {
    let mut a = [0u8; 4];
    a.copy_from_slice(&b[off..off + 4]);
    u32::from_le_bytes(a)
}
fn u16_at(b: &[u8], off: usize) -> u16 {
    u16::from_le_bytes([b[off], b[off + 1]])
}
fn arr16(b: &[u8], off: usize) -> [u8; 16] {
    let mut a = [0u8; 16];
    a.copy_from_slice(&b[off..off + 16]);
    a
}

/// A record's kind byte.
fn kind_of(b: u8) -> Option<EventKind> {
    match b {
        1 => Some(EventKind::Data),
        2 => Some(EventKind::Connect),
        3 => Some(EventKind::Accept),
        4 => Some(EventKind::Close),
        5 => Some(EventKind::GoHttp),
        _ => None,
    }
}

/// A record's direction byte (bit 0: ingress).
fn dir_of(b: u8) -> Direction {
    if b & 1 == 0 {
        Direction::Egress
    } else {
        Direction::Ingress
    }
}

/// A test's record of one send or receive on a loopback stream socket `sock` (id, local port,
/// peer port) of process `app`, 1 µs long from `start_ns` (the chains' and the off-CPU
/// linking's unit tests drive their trackers with these).
#[cfg(test)]
#[allow(clippy::too_many_arguments)]
pub(crate) fn loopback_stream_record<'a>(
    start_ns: u64,
    sock: (u64, u16, u16),
    seq: u64,
    total_len: u64,
    (pid, tid): (u32, u32),
    dir: Direction,
    payload: &'a [u8],
    goroutine: Option<u64>,
) -> Event<'a> {
    let mut laddr = [0u8; 16];
    laddr[..4].copy_from_slice(&[127, 0, 0, 1]);
    Event {
        start_ns,
        end_ns: start_ns + 1_000,
        sock_id: sock.0,
        seq,
        total_len,
        pid,
        tid,
        fd: 3,
        kind: EventKind::Data,
        dir,
        syscall: if dir == Direction::Egress {
            Syscall::Sendto
        } else {
            Syscall::Recvfrom
        },
        family: AF_INET,
        sock_type: SOCK_STREAM,
        proto_hint: 0,
        flags: 0,
        lport: sock.1,
        rport: sock.2,
        laddr,
        raddr: laddr,
        comm: *b"app\0\0\0\0\0\0\0\0\0\0\0\0\0",
        payload,
        tail: &[],
        goroutine,
    }
}

/// What applying a record's results needs of the record (its times, process and size): taken
/// by a tracking thread from the record it decoded, and handed to the pipeline thread with the
/// results.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EventHead {
    pub start_ns: u64,
    pub end_ns: u64,
    pub total_len: u64,
    pub pid: u32,
    pub kind: EventKind,
    pub dir: Direction,
    pub comm: [u8; 16],
}

impl From<&Event<'_>> for EventHead {
    fn from(ev: &Event) -> EventHead {
        EventHead {
            start_ns: ev.start_ns,
            end_ns: ev.end_ns,
            total_len: ev.total_len,
            pid: ev.pid,
            kind: ev.kind,
            dir: ev.dir,
            comm: ev.comm,
        }
    }
}

impl<'a> Event<'a> {
    /// Decodes one ring-buffer record. Extra bytes after the payload are ignored so that a
    /// newer kernel side may append fields.
    pub fn decode(b: &'a [u8]) -> Result<Event<'a>, DecodeError> {
        if b.len() < HEADER_LEN {
            return Err(DecodeError::Short(b.len()));
        }
        let cap_len = u32_at(b, 52);
        let end = HEADER_LEN
            .checked_add(cap_len as usize)
            .filter(|&e| e <= b.len())
            .ok_or(DecodeError::PayloadLength {
                cap_len,
                have: b.len() - HEADER_LEN,
            })?;
        let flags = u16_at(b, 62);
        let total_len = u64_at(b, 32);
        // A tail only where the flag says so (older records have zeros here) and where it
        // fits: after the payload, within the record, not overlapping the head. Anything
        // else is no tail, so the record reads as a head cut at `cap_len`, as before.
        let tail_len = u32_at(b, 68) as usize;
        let tail_end = end.saturating_add(tail_len);
        let tail = if flags & FLAG_TAIL != 0
            && tail_len > 0
            && tail_end <= b.len()
            && (cap_len as u64).saturating_add(tail_len as u64) < total_len
        {
            &b[end..tail_end]
        } else {
            &[]
        };
        // The goroutine after the payload and the tail as the kernel wrote them (raw
        // `tail_len`: the kernel sets it only with a tail).
        let goroutine = end
            .checked_add(tail_len)
            .filter(|_| flags & FLAG_GOROUTINE != 0)
            .and_then(|at| b.get(at..at.checked_add(8)?))
            .map(|w| u64_at(w, 0))
            .filter(|&g| g != 0);
        let kind = kind_of(b[56]).ok_or(DecodeError::Kind(b[56]))?;
        let dir = dir_of(b[57]);
        let syscall = Syscall::from_raw(b[58]).ok_or(DecodeError::Syscall(b[58]))?;
        let family = b[59];
        if family != AF_INET && family != AF_INET6 {
            return Err(DecodeError::Family(family));
        }
        Ok(Event {
            start_ns: u64_at(b, 0),
            end_ns: u64_at(b, 8),
            sock_id: u64_at(b, 16),
            seq: u64_at(b, 24),
            total_len,
            pid: u32_at(b, 40),
            tid: u32_at(b, 44),
            fd: u32_at(b, 48) as i32,
            kind,
            dir,
            syscall,
            family,
            sock_type: b[60],
            proto_hint: b[61],
            flags,
            lport: u16_at(b, 64),
            rport: u16_at(b, 66),
            laddr: arr16(b, 72),
            raddr: arr16(b, 88),
            comm: arr16(b, 104),
            payload: &b[HEADER_LEN..end],
            tail,
            goroutine,
        })
    }

    pub fn local(&self) -> SocketAddr {
        SocketAddr::new(ip(self.family, &self.laddr), self.lport)
    }
    pub fn peer(&self) -> SocketAddr {
        SocketAddr::new(ip(self.family, &self.raddr), self.rport)
    }
    pub fn comm_str(&self) -> String {
        comm_to_string(&self.comm)
    }
    /// The first record of its direction since its connection was captured again after a
    /// cut ([`FLAG_REJOINED`]).
    pub fn is_rejoined(&self) -> bool {
        self.flags & FLAG_REJOINED != 0
    }

    /// TLS plaintext (or, on a close, the end of a TLS connection).
    pub fn is_tls(&self) -> bool {
        self.flags & FLAG_TLS != 0
    }

    /// The connection this record belongs to: the socket, or its TLS plaintext stream (a
    /// stream of its own, with its own byte positions).
    pub fn conn_key(&self) -> u64 {
        if self.is_tls() {
            self.sock_id | TLS_STREAM_BIT
        } else {
            self.sock_id
        }
    }

    /// A Go net/http client probe's record: which probe, its connection object and
    /// goroutine (None for any other record, or one that proved no goroutine or names an
    /// unknown probe: nothing to join).
    pub fn go_http(&self) -> Option<GoHttp> {
        if self.kind != EventKind::GoHttp {
            return None;
        }
        let g = self.goroutine?;
        match self.total_len {
            1 => Some(GoHttp::ConnWrite { pc: self.seq, g }),
            2 => Some(GoHttp::RoundTrip { pc: self.seq, g }),
            3 => Some(GoHttp::WriteLoopEnd { g }),
            4 if self.seq != 0 => Some(GoHttp::Spawn {
                parent: g,
                child: self.seq,
            }),
            5 if self.seq == g => Some(GoHttp::NewG { g }),
            _ => None,
        }
    }

    /// An nginx upstream write's record (src/bpf/ngxchain.h: `ngx_chain_writer` began, on
    /// the record's thread): (upstream socket, downstream socket) of the request being
    /// proxied, both socket inodes as the data records' `sock_id`. None for any other record,
    /// or one that names no socket.
    pub fn nginx_upstream(&self) -> Option<(u64, u64)> {
        if self.kind != EventKind::GoHttp || self.total_len != NGX_UPSTREAM_WRITE {
            return None;
        }
        let down = u64::from_le_bytes(self.payload.get(..8)?.try_into().ok()?);
        (self.seq != 0 && down != 0 && down != self.seq && self.goroutine.is_none())
            .then_some((self.seq, down))
    }

    /// Bytes the syscall moved that are not in `payload`.
    pub fn uncaptured(&self) -> u64 {
        self.total_len.saturating_sub(self.payload.len() as u64)
    }

    /// Bytes the syscall moved that are in neither `payload` nor `tail`.
    pub fn hidden(&self) -> u64 {
        self.uncaptured().saturating_sub(self.tail.len() as u64)
    }
}

pub fn comm_to_string(comm: &[u8; 16]) -> String {
    let n = comm.iter().position(|&c| c == 0).unwrap_or(comm.len());
    String::from_utf8_lossy(&comm[..n]).into_owned()
}

fn ip(family: u8, a: &[u8; 16]) -> IpAddr {
    if family == AF_INET {
        IpAddr::V4(Ipv4Addr::new(a[0], a[1], a[2], a[3]))
    } else {
        let v6 = Ipv6Addr::from(*a);
        // Dual-stack sockets carry IPv4 peers as ::ffff:a.b.c.d; show them as IPv4.
        match v6.to_ipv4_mapped() {
            Some(v4) => IpAddr::V4(v4),
            None => IpAddr::V6(v6),
        }
    }
}

/// Builds a raw record; the inverse of [`Event::decode`] (used by tests and fixtures).
#[derive(Debug, Clone)]
pub struct EventBuilder {
    pub header: [u8; HEADER_LEN],
}

impl EventBuilder {
    pub fn data(dir: Direction, sock_id: u64, seq: u64, total_len: u64) -> EventBuilder {
        let mut b = EventBuilder {
            header: [0; HEADER_LEN],
        };
        b.set_u64(16, sock_id);
        b.set_u64(24, seq);
        b.set_u64(32, total_len);
        b.header[56] = 1;
        b.header[57] = dir as u8;
        b.header[58] = if dir == Direction::Egress { 2 } else { 1 };
        b.header[59] = AF_INET;
        b.header[60] = SOCK_STREAM;
        // No kernel hint (as in --capture-all): user space's detection decides, unless a test
        // says what the kernel recognised (`proto_hint`).
        b.header[61] = 0;
        b
    }
    pub fn lifecycle(kind: EventKind, sock_id: u64) -> EventBuilder {
        let mut b = EventBuilder::data(Direction::Egress, sock_id, 0, 0);
        let (k, sc) = match kind {
            EventKind::Data => (1, 2),
            EventKind::Connect => (2, 12),
            EventKind::Accept => (3, 14),
            EventKind::Close => (4, 15),
            EventKind::GoHttp => (5, 16),
        };
        b.header[56] = k;
        b.header[58] = sc;
        b
    }
    fn set_u64(&mut self, off: usize, v: u64) {
        self.header[off..off + 8].copy_from_slice(&v.to_le_bytes());
    }
    pub fn times(mut self, start_ns: u64, end_ns: u64) -> Self {
        self.set_u64(0, start_ns);
        self.set_u64(8, end_ns);
        self
    }
    /// The first record of its direction since its connection was captured again after a
    /// cut ([`FLAG_REJOINED`]).
    pub fn rejoined(mut self) -> Self {
        let flags = u16_at(&self.header, 62) | FLAG_REJOINED;
        self.header[62..64].copy_from_slice(&flags.to_le_bytes());
        self
    }
    /// The protocol the kernel recognised the connection as (`enum ebtop_l7_proto`).
    pub fn proto_hint(mut self, id: u8) -> Self {
        self.header[61] = id;
        self
    }
    pub fn process(mut self, pid: u32, tid: u32, comm: &str) -> Self {
        self.header[40..44].copy_from_slice(&pid.to_le_bytes());
        self.header[44..48].copy_from_slice(&tid.to_le_bytes());
        let c = comm.as_bytes();
        let n = c.len().min(15);
        self.header[104..120].fill(0);
        self.header[104..104 + n].copy_from_slice(&c[..n]);
        self
    }
    pub fn v4(mut self, local: [u8; 4], lport: u16, peer: [u8; 4], rport: u16) -> Self {
        self.header[59] = AF_INET;
        self.header[64..66].copy_from_slice(&lport.to_le_bytes());
        self.header[66..68].copy_from_slice(&rport.to_le_bytes());
        self.header[72..76].copy_from_slice(&local);
        self.header[88..92].copy_from_slice(&peer);
        self
    }
    /// The record with head `payload` and `tail`, the last bytes of `total_len` (fewer than
    /// the bytes after the head), after it.
    pub fn build_with_tail(mut self, payload: &[u8], tail: &[u8]) -> Vec<u8> {
        let flags = u16_at(&self.header, 62) | FLAG_TAIL;
        self.header[62..64].copy_from_slice(&flags.to_le_bytes());
        self.header[68..72].copy_from_slice(&(tail.len() as u32).to_le_bytes());
        let mut v = self.build(payload);
        v.extend_from_slice(tail);
        v
    }

    /// A Go net/http client probe's record (`src/bpf/gohttp.h`): probe `what`
    /// (`enum ebtop_go_http`), connection object `pc`, at `ns` ([`EventBuilder::build_go_http`]
    /// adds the goroutine).
    pub fn go_http(what: u64, pc: u64, ns: u64) -> EventBuilder {
        let mut b = EventBuilder::lifecycle(EventKind::GoHttp, 0).times(ns, ns);
        b.set_u64(24, pc);
        b.set_u64(32, what);
        let flags = u16_at(&b.header, 62) | FLAG_GOROUTINE;
        b.header[62..64].copy_from_slice(&flags.to_le_bytes());
        b
    }

    /// An nginx upstream write's record (src/bpf/ngxchain.h) at `ns`: upstream socket `up`;
    /// `build(&down.to_le_bytes())` adds the downstream socket.
    pub fn nginx_upstream(up: u64, ns: u64) -> EventBuilder {
        let mut b = EventBuilder::lifecycle(EventKind::GoHttp, 0).times(ns, ns);
        b.set_u64(24, up);
        b.set_u64(32, NGX_UPSTREAM_WRITE);
        b
    }

    /// The goroutine after a header-only record ([`EventBuilder::go_http`]).
    pub fn build_go_http(self, g: u64) -> Vec<u8> {
        let mut v = self.build(b"");
        v.extend_from_slice(&g.to_le_bytes());
        v
    }

    /// The record with `payload` and then the goroutine `g` (a Go program's record).
    pub fn build_with_goroutine(mut self, payload: &[u8], g: u64) -> Vec<u8> {
        let flags = u16_at(&self.header, 62) | FLAG_GOROUTINE;
        self.header[62..64].copy_from_slice(&flags.to_le_bytes());
        let mut v = self.build(payload);
        v.extend_from_slice(&g.to_le_bytes());
        v
    }

    /// The record with `payload` (at most `total_len` bytes) appended.
    pub fn build(mut self, payload: &[u8]) -> Vec<u8> {
        let total = u64_at(&self.header, 32);
        if (payload.len() as u64) < total {
            let flags = u16_at(&self.header, 62) | FLAG_TRUNCATED;
            self.header[62..64].copy_from_slice(&flags.to_le_bytes());
        }
        self.header[52..56].copy_from_slice(&(payload.len() as u32).to_le_bytes());
        let mut v = Vec::with_capacity(HEADER_LEN + payload.len());
        v.extend_from_slice(&self.header);
        v.extend_from_slice(payload);
        v
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nginx_upstream_records_name_both_sockets() {
        let raw = EventBuilder::nginx_upstream(31, 500)
            .process(42, 43, "nginx")
            .build(&11u64.to_le_bytes());
        let ev = Event::decode(&raw).unwrap();
        assert_eq!(ev.nginx_upstream(), Some((31, 11)));
        assert_eq!(ev.go_http(), None, "no goroutine: no Go record");
        assert_eq!((ev.pid, ev.tid, ev.start_ns), (42, 43, 500));
        let none = EventBuilder::nginx_upstream(31, 500).build(&0u64.to_le_bytes());
        assert_eq!(Event::decode(&none).unwrap().nginx_upstream(), None);
        let short = EventBuilder::nginx_upstream(31, 500).build(&[1, 2, 3]);
        assert_eq!(Event::decode(&short).unwrap().nginx_upstream(), None);
        let same = EventBuilder::nginx_upstream(31, 500).build(&31u64.to_le_bytes());
        assert_eq!(Event::decode(&same).unwrap().nginx_upstream(), None);
    }

    #[test]
    fn round_trip() {
        let raw = EventBuilder::data(Direction::Ingress, 77, 10, 5)
            .times(100, 200)
            .process(42, 43, "nginx")
            .v4([127, 0, 0, 1], 8080, [127, 0, 0, 2], 5000)
            .build(b"GET /");
        let ev = Event::decode(&raw).unwrap();
        assert_eq!(ev.sock_id, 77);
        assert_eq!(ev.seq, 10);
        assert_eq!(ev.dir, Direction::Ingress);
        assert_eq!(ev.payload, b"GET /");
        assert_eq!(ev.comm_str(), "nginx");
        assert_eq!(ev.local().to_string(), "127.0.0.1:8080");
        assert_eq!(ev.peer().to_string(), "127.0.0.2:5000");
        assert_eq!(ev.end_ns - ev.start_ns, 100);
        assert_eq!(ev.uncaptured(), 0);
    }

    #[test]
    fn short_and_lying_records_are_errors() {
        assert_eq!(
            Event::decode(&[0u8; 10]).unwrap_err(),
            DecodeError::Short(10)
        );
        let mut raw = EventBuilder::data(Direction::Egress, 1, 0, 5).build(b"abcde");
        raw.truncate(HEADER_LEN + 2);
        assert!(matches!(
            Event::decode(&raw),
            Err(DecodeError::PayloadLength {
                cap_len: 5,
                have: 2
            })
        ));
        let mut raw = EventBuilder::data(Direction::Egress, 1, 0, 0).build(b"");
        raw[56] = 99;
        assert_eq!(Event::decode(&raw).unwrap_err(), DecodeError::Kind(99));
    }

    /// A Go net/http client probe's record: which probe, on which object, by which
    /// goroutine; one with no goroutine, or of a probe this ebtop does not know, says nothing.
    #[test]
    fn go_http_records_name_their_probe_object_and_goroutine() {
        let raw = EventBuilder::go_http(2, 0xc000_a000, 500)
            .process(7, 8, "app")
            .build_go_http(0xc000_1000);
        let ev = Event::decode(&raw).unwrap();
        assert_eq!(
            (ev.kind, ev.start_ns, ev.end_ns),
            (EventKind::GoHttp, 500, 500)
        );
        assert_eq!(
            ev.go_http(),
            Some(GoHttp::RoundTrip {
                pc: 0xc000_a000,
                g: 0xc000_1000
            })
        );
        let ev = Event::decode(&raw[..HEADER_LEN]).unwrap();
        assert_eq!(ev.go_http(), None, "no goroutine");
        let mut raw = raw.clone();
        raw[32] = 9;
        assert_eq!(
            Event::decode(&raw).unwrap().go_http(),
            None,
            "unknown probe"
        );
        let data = EventBuilder::data(Direction::Egress, 1, 2, 3).build_with_goroutine(b"abc", 9);
        assert_eq!(Event::decode(&data).unwrap().go_http(), None);
    }

    /// Goroutine creation records (src/bpf/gospawn.h): the creator after the record, the
    /// child in `seq`; a new g of no known creator names itself in both, else says nothing.
    #[test]
    fn go_spawn_records_name_the_creator_and_the_child() {
        let raw = EventBuilder::go_http(4, 0xc000_2000, 500).build_go_http(0xc000_1000);
        assert_eq!(
            Event::decode(&raw).unwrap().go_http(),
            Some(GoHttp::Spawn {
                parent: 0xc000_1000,
                child: 0xc000_2000
            })
        );
        let raw = EventBuilder::go_http(4, 0, 500).build_go_http(0xc000_1000);
        assert_eq!(Event::decode(&raw).unwrap().go_http(), None, "no child");
        let raw = EventBuilder::go_http(5, 0xc000_2000, 500).build_go_http(0xc000_2000);
        assert_eq!(
            Event::decode(&raw).unwrap().go_http(),
            Some(GoHttp::NewG { g: 0xc000_2000 })
        );
        let raw = EventBuilder::go_http(5, 0xc000_3000, 500).build_go_http(0xc000_2000);
        assert_eq!(Event::decode(&raw).unwrap().go_http(), None, "two g's");
    }

    #[test]
    fn a_tail_follows_the_head_and_only_with_its_flag() {
        let raw =
            EventBuilder::data(Direction::Ingress, 7, 0, 100).build_with_tail(b"head", b"end");
        let ev = Event::decode(&raw).unwrap();
        assert_eq!((ev.payload, ev.tail), (&b"head"[..], &b"end"[..]));
        assert_eq!((ev.uncaptured(), ev.hidden()), (96, 93));
        // Without the flag (an older record's zeros, or a reader before tails): a head only.
        let mut old = raw.clone();
        old[62] &= !(FLAG_TAIL as u8);
        let ev = Event::decode(&old).unwrap();
        assert_eq!((ev.payload, ev.tail), (&b"head"[..], &b""[..]));
        // A tail that would overlap the head, or run past the record, is none.
        let raw = EventBuilder::data(Direction::Ingress, 7, 0, 7).build_with_tail(b"head", b"end");
        assert_eq!(Event::decode(&raw).unwrap().tail, b"");
        let mut cut =
            EventBuilder::data(Direction::Ingress, 7, 0, 100).build_with_tail(b"head", b"end");
        cut.pop();
        assert_eq!(Event::decode(&cut).unwrap().tail, b"");
    }

    #[test]
    fn v4_mapped_v6_shows_as_v4() {
        let mut a = [0u8; 16];
        a[10] = 0xff;
        a[11] = 0xff;
        a[12..].copy_from_slice(&[10, 0, 0, 1]);
        assert_eq!(ip(AF_INET6, &a).to_string(), "10.0.0.1");
    }

    /// A Go program's record names its goroutine after the payload and the tail; a record
    /// without the flag, or too short to hold it, names none.
    #[test]
    fn the_goroutine_follows_the_payload_and_the_tail() {
        let head = || {
            EventBuilder::data(Direction::Egress, 5, 0, 600)
                .process(1, 2, "app")
                .v4([127, 0, 0, 1], 1, [127, 0, 0, 1], 2)
        };
        let raw = head().build_with_goroutine(b"GET /", 0xc000_1234_5678);
        let ev = Event::decode(&raw).unwrap();
        assert_eq!(
            (ev.payload, ev.goroutine),
            (&b"GET /"[..], Some(0xc000_1234_5678))
        );

        let mut with_tail = head().build_with_tail(b"GET /", b"tail!");
        let flags = u16_at(&with_tail, 62) | FLAG_GOROUTINE;
        with_tail[62..64].copy_from_slice(&flags.to_le_bytes());
        with_tail.extend_from_slice(&7u64.to_le_bytes());
        let ev = Event::decode(&with_tail).unwrap();
        assert_eq!((ev.tail, ev.goroutine), (&b"tail!"[..], Some(7)));

        let mut short = raw.clone();
        short.truncate(raw.len() - 1);
        assert_eq!(Event::decode(&short).unwrap().goroutine, None);
        let mut unflagged = raw.clone();
        unflagged[62..64].copy_from_slice(&0u16.to_le_bytes());
        assert_eq!(Event::decode(&unflagged).unwrap().goroutine, None);
        assert_eq!(
            Event::decode(&head().build(b"GET /")).unwrap().goroutine,
            None
        );
    }
}
