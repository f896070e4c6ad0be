//! A completed call as every sink sees it: the parser's view plus connection and process.

use std::net::SocketAddr;

use crate::event::Direction;
use crate::protocols::L7Call;

/// Which end of the call the traced process was.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Side {
    /// The process sent the request.
    Client,
    /// The process received the request.
    Server,
}

impl Side {
    pub fn name(self) -> &'static str {
        match self {
            Side::Client => "client",
            Side::Server => "server",
        }
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct Call {
    pub l7: L7Call,
    pub side: Side,
    pub pid: u32,
    pub tid: u32,
    /// The process's name (its thread group leader's), as the process table knows it; the
    /// thread's own name until the pipeline has asked the table.
    pub comm: std::sync::Arc<str>,
    /// The name of the thread that made the call, when it differs from `comm` (a thread
    /// may name itself: dig's `isc-net-0000`).
    pub thread: Option<std::sync::Arc<str>>,
    pub sock_id: u64,
    /// The call's bytes are TLS plaintext, from the TLS library probes.
    pub tls: bool,
    /// Its connection lost bytes (a stream gap: records lost or not captured) since its
    /// previous call: calls in between may be missing (counted where they are read).
    pub after_loss: bool,
    pub local: SocketAddr,
    pub peer: SocketAddr,
    /// CLOCK_MONOTONIC time the call started for this side: the client's first request write
    /// (entry), the server's first request read (exit).
    pub start_ns: u64,
    /// Client: first request write entry → last response read exit. Server: last request read
    /// exit → first response write entry.
    pub latency_ns: u64,
    /// Its id in the session's call chains (src/chains.rs; 0 until the pipeline links it).
    pub id: u64,
    /// The call it was made for: the server call its thread was serving (a client call), the
    /// client call that reached it on this host (a server call). None: none known.
    pub parent_id: Option<u64>,
    /// The application's trace id (`traceparent`, request-id headers) of it or its parent.
    pub trace_id: Option<std::sync::Arc<str>>,
    /// The id of its chain's root as known when it goes out (0: not linked): the calls of one
    /// root share an exported trace when no application trace is known (src/chains.rs).
    /// Not an output field.
    pub root_id: u64,
    /// A server call reached by a client call of this host after children of it went out
    /// (they are in its own root's trace): that client call's id and root, a span link.
    pub caller: Option<(u64, u64)>,
}

impl Call {
    pub fn new(
        l7: L7Call,
        pid: u32,
        tid: u32,
        comm: std::sync::Arc<str>,
        sock_id: u64,
        local: SocketAddr,
        peer: SocketAddr,
    ) -> Call {
        let side = if l7.request_dir == Direction::Egress {
            Side::Client
        } else {
            Side::Server
        };
        let (start_ns, latency_ns) = match side {
            Side::Client => (
                l7.req.first_start_ns,
                l7.resp.last_end_ns.saturating_sub(l7.req.first_start_ns),
            ),
            Side::Server => (
                l7.req.first_end_ns,
                l7.resp.first_start_ns.saturating_sub(l7.req.last_end_ns),
            ),
        };
        Call {
            l7,
            side,
            pid,
            tid,
            comm,
            thread: None,
            sock_id,
            tls: false,
            after_loss: false,
            local,
            peer,
            start_ns,
            latency_ns,
            id: 0,
            parent_id: None,
            trace_id: None,
            root_id: 0,
            caller: None,
        }
    }
}
