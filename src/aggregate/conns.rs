//! Per-connection call counts for a viewer that lists connections without a flow table (the
//! terminal UI's Flows view of a source without one): kept by the pipeline, from every call it
//! counts, only for a sink that shows them (`Sink::wants_windows`), so the rows hold the
//! numbers `--json` counts whatever calls the viewer had no time to take.

use std::net::SocketAddr;

use rustc_hash::FxHashMap;

use crate::call::{Call, Side};
use crate::protocols::Outcome;

/// Connections kept (the least recently used go first).
pub const MAX_CONNS: usize = 4096;

/// A connection's calls since it was first seen (or came back after being evicted).
#[derive(Debug, Clone, PartialEq)]
pub struct ConnStats {
    pub pid: u32,
    pub comm: String,
    pub sock_id: u64,
    pub side: Side,
    pub local: SocketAddr,
    pub peer: SocketAddr,
    pub calls: u64,
    pub server_errors: u64,
    pub client_errors: u64,
    pub req_bytes: u64,
    pub resp_bytes: u64,
    /// Calls that came right after the connection lost bytes (calls may be missing).
    pub calls_after_loss: u64,
    /// Calls whose outcome could not be known.
    pub unknown_outcomes: u64,
    /// The protocol of its last call, and whether over TLS.
    pub proto: crate::protocols::Protocol,
    pub tls: bool,
    /// Calls the table had seen when this connection's last came: the least recent go first.
    pub last_seq: u64,
}

/// Connections by (pid, socket), at most `MAX_CONNS`.
#[derive(Debug, Default)]
pub struct ConnTable {
    conns: FxHashMap<(u32, u64), ConnStats>,
    seq: u64,
}

impl ConnTable {
    /// Counts a call on its connection.
    pub fn observe(&mut self, call: &Call) {
        let seq = self.seq;
        self.seq += 1;
        let key = (call.pid, call.sock_id);
        if self.conns.len() >= MAX_CONNS && !self.conns.contains_key(&key) {
            self.evict();
        }
        let conn = self.conns.entry(key).or_insert_with(|| ConnStats {
            pid: call.pid,
            comm: call.comm.to_string(),
            sock_id: call.sock_id,
            side: call.side,
            local: call.local,
            peer: call.peer,
            calls: 0,
            server_errors: 0,
            client_errors: 0,
            req_bytes: 0,
            resp_bytes: 0,
            calls_after_loss: 0,
            unknown_outcomes: 0,
            proto: call.l7.proto,
            tls: call.tls,
            last_seq: seq,
        });
        conn.calls += 1;
        conn.calls_after_loss += u64::from(call.after_loss);
        conn.server_errors += u64::from(call.l7.outcome == Outcome::ServerError);
        conn.client_errors += u64::from(call.l7.outcome == Outcome::ClientError);
        conn.unknown_outcomes += u64::from(call.l7.outcome == Outcome::Unknown);
        conn.proto = call.l7.proto;
        conn.tls = call.tls;
        conn.req_bytes = conn.req_bytes.saturating_add(call.l7.req.bytes);
        conn.resp_bytes = conn.resp_bytes.saturating_add(call.l7.resp.bytes);
        conn.last_seq = seq;
        if *conn.comm != *call.comm {
            conn.comm = call.comm.to_string();
        }
    }

    /// Drops the least recently used eighth at once: a new connection in a full table costs
    /// one sort per `MAX_CONNS / 8` of them, not a scan each.
    fn evict(&mut self) {
        let mut seqs: Vec<u64> = self.conns.values().map(|c| c.last_seq).collect();
        let cut = MAX_CONNS / 8;
        let (_, &mut below, _) = seqs.select_nth_unstable(cut - 1);
        self.conns.retain(|_, c| c.last_seq > below);
    }

    /// Every connection kept.
    pub fn snapshot(&self) -> Vec<ConnStats> {
        self.conns.values().cloned().collect()
    }

    pub fn len(&self) -> usize {
        self.conns.len()
    }

    pub fn is_empty(&self) -> bool {
        self.conns.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::aggregate::endpoints::tests::call;

    #[test]
    fn counts_each_connections_calls_and_evicts_the_least_recent() {
        let mut t = ConnTable::default();
        for sock in 0..MAX_CONNS as u64 {
            let mut c = call("api", 1, "GET", "/", 1_000);
            c.sock_id = sock;
            t.observe(&c);
        }
        // Socket 0 again: now the most recent.
        let mut c = call("api", 1, "GET", "/", 1_000);
        c.sock_id = 0;
        c.l7.outcome = Outcome::ServerError;
        t.observe(&c);
        assert_eq!(t.len(), MAX_CONNS);
        let mut c = call("api", 1, "GET", "/", 1_000);
        c.sock_id = MAX_CONNS as u64;
        t.observe(&c);
        // The eighth least recently used went, socket 0 stayed, with both its calls.
        assert_eq!(t.len(), MAX_CONNS - MAX_CONNS / 8 + 1);
        let snap = t.snapshot();
        let zero = snap.iter().find(|c| c.sock_id == 0).unwrap();
        assert_eq!((zero.calls, zero.server_errors), (2, 1));
        assert!(snap
            .iter()
            .all(|c| c.sock_id == 0 || c.sock_id > MAX_CONNS as u64 / 8));
        assert_eq!(
            snap.iter().map(|c| c.calls).sum::<u64>(),
            MAX_CONNS as u64 * 7 / 8 + 2
        );
    }
}
