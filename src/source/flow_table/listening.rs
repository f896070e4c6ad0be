//! The local TCP ports that listen, asked of the kernel over sock_diag netlink with a state
//! filter: the kernel walks only its listening sockets. (Reading /proc/net/tcp formats every
//! socket of the host and restarts its hash walk at each read: with 100K connections that cost
//! ebtop half a core.)

use std::collections::HashSet;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

const SOCK_DIAG_BY_FAMILY: u16 = 20;
const TCP_LISTEN: u32 = 10;
const NLMSG_HDR_LEN: usize = 16;
/// `struct inet_diag_req_v2`: family, protocol, ext, pad, states, then a 48-byte socket id.
const REQ_LEN: usize = 56;
/// `struct inet_diag_msg` up to and including its socket id's ports.
const MSG_MIN_LEN: usize = 8;

/// Every TCP port (IPv4 and IPv6) a socket listens on.
pub fn listening_tcp_ports() -> io::Result<HashSet<u16>> {
    // SAFETY: socket() has no memory preconditions; the result is checked.
    let fd = unsafe {
        libc::socket(
            libc::AF_NETLINK,
            libc::SOCK_DGRAM | libc::SOCK_CLOEXEC,
            libc::NETLINK_SOCK_DIAG,
        )
    };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: fd is a fresh descriptor this function owns.
    let sock = unsafe { OwnedFd::from_raw_fd(fd) };
    let mut ports = HashSet::new();
    for (seq, family) in [(1u32, libc::AF_INET), (2, libc::AF_INET6)] {
        dump_family(&sock, seq, family as u8, &mut ports)?;
    }
    Ok(ports)
}

fn dump_family(sock: &OwnedFd, seq: u32, family: u8, ports: &mut HashSet<u16>) -> io::Result<()> {
    let mut req = [0u8; NLMSG_HDR_LEN + REQ_LEN];
    req[0..4].copy_from_slice(&((NLMSG_HDR_LEN + REQ_LEN) as u32).to_ne_bytes());
    req[4..6].copy_from_slice(&SOCK_DIAG_BY_FAMILY.to_ne_bytes());
    let flags = (libc::NLM_F_REQUEST | libc::NLM_F_DUMP) as u16;
    req[6..8].copy_from_slice(&flags.to_ne_bytes());
    req[8..12].copy_from_slice(&seq.to_ne_bytes());
    req[16] = family;
    req[17] = libc::IPPROTO_TCP as u8;
    req[20..24].copy_from_slice(&(1u32 << TCP_LISTEN).to_ne_bytes());
    // SAFETY: sending a buffer we own, of its own length, on an open socket (to the kernel:
    // no address needed on a netlink datagram socket's default destination).
    let sent = unsafe { libc::send(sock.as_raw_fd(), req.as_ptr().cast(), req.len(), 0) };
    if sent < 0 {
        return Err(io::Error::last_os_error());
    }
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        // SAFETY: receiving into a buffer we own, bounded by its length.
        let n = unsafe { libc::recv(sock.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len(), 0) };
        if n < 0 {
            let e = io::Error::last_os_error();
            if e.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return Err(e);
        }
        if n == 0 {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "sock_diag closed",
            ));
        }
        if parse_messages(&buf[..n as usize], seq, ports)? {
            return Ok(());
        }
    }
}

/// Adds the listening ports of one datagram of replies; true once the dump is done.
fn parse_messages(mut b: &[u8], seq: u32, ports: &mut HashSet<u16>) -> io::Result<bool> {
    let ne_u32 = |b: &[u8], at: usize| u32::from_ne_bytes(b[at..at + 4].try_into().expect("4"));
    while b.len() >= NLMSG_HDR_LEN {
        let len = ne_u32(b, 0) as usize;
        if len < NLMSG_HDR_LEN || len > b.len() {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                "sock_diag reply with a bad length",
            ));
        }
        let kind = u16::from_ne_bytes([b[4], b[5]]);
        let msg_seq = ne_u32(b, 8);
        let body = &b[NLMSG_HDR_LEN..len];
        if msg_seq == seq {
            match kind as i32 {
                libc::NLMSG_DONE => return Ok(true),
                libc::NLMSG_ERROR => {
                    let errno = body
                        .get(..4)
                        .map_or(0, |e| i32::from_ne_bytes(e.try_into().expect("4")));
                    return Err(io::Error::from_raw_os_error(errno.saturating_neg().max(1)));
                }
                // idiag_state at 1; the socket id's source port (big-endian) at 4.
                _ if kind == SOCK_DIAG_BY_FAMILY
                    && body.len() >= MSG_MIN_LEN
                    && body[1] as u32 == TCP_LISTEN =>
                {
                    ports.insert(u16::from_be_bytes([body[4], body[5]]));
                }
                _ => {}
            }
        }
        // Messages are 4-byte aligned.
        let next = (len + 3) & !3;
        b = &b[next.min(b.len())..];
    }
    Ok(false)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn listeners_are_found_and_connections_are_not() {
        let v4 = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let v6 = std::net::TcpListener::bind("[::1]:0").ok();
        let client = std::net::TcpStream::connect(v4.local_addr().unwrap()).unwrap();
        let ports = listening_tcp_ports().unwrap();
        assert!(ports.contains(&v4.local_addr().unwrap().port()));
        if let Some(l) = &v6 {
            assert!(ports.contains(&l.local_addr().unwrap().port()));
        }
        assert!(!ports.contains(&client.local_addr().unwrap().port()));
    }

    #[test]
    fn damaged_replies_are_errors_not_panics() {
        let mut ports = HashSet::new();
        let mut msg = vec![0u8; 24];
        msg[0..4].copy_from_slice(&200u32.to_ne_bytes()); // longer than the datagram
        assert!(parse_messages(&msg, 1, &mut ports).is_err());
        msg[0..4].copy_from_slice(&3u32.to_ne_bytes()); // shorter than a header
        assert!(parse_messages(&msg, 1, &mut ports).is_err());
        // A short body of the right kind is skipped.
        msg[0..4].copy_from_slice(&20u32.to_ne_bytes());
        msg[4..6].copy_from_slice(&SOCK_DIAG_BY_FAMILY.to_ne_bytes());
        msg[8..12].copy_from_slice(&1u32.to_ne_bytes());
        assert!(!parse_messages(&msg[..20], 1, &mut ports).unwrap());
        assert!(ports.is_empty());
    }
}
