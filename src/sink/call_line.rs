//! The `call` line, written by hand: it is the one line per call, the hot path of `--json`
//! and of replays, where serde's generic string escaping and number formatting took a third of
//! ebtop's user-space time. Same bytes as the serde struct of docs/json.md (tested against it).

use std::net::SocketAddr;
use std::sync::Arc;

use crate::call::{Call, Side};
use crate::protocols::{Outcome, Protocol};

/// The date-and-seconds part of the last timestamp written: calls arrive in time order, so
/// most share it and only the nanoseconds change.
#[derive(Debug, Default)]
struct TimestampCache {
    sec: Option<i64>,
    /// `2026-11-21T10:00:00.`
    prefix: Vec<u8>,
}

impl TimestampCache {
    /// Appends `"2026-11-21T10:00:00.123456789Z"` (quoted), as `clock::rfc3339` formats it.
    fn write(&mut self, out: &mut Vec<u8>, unix_ns: i64) {
        let unix_ns = unix_ns.max(0);
        let sec = unix_ns / 1_000_000_000;
        let nanos = (unix_ns % 1_000_000_000) as u32;
        if self.sec != Some(sec) {
            let full = crate::clock::rfc3339(sec * 1_000_000_000);
            // "YYYY-MM-DDTHH:MM:SS.000000000Z": keep up to the dot. Another shape (a year
            // beyond 9999 in a crafted recording) is written whole each time.
            match full.find('.') {
                Some(dot) if full.len() == dot + 11 => {
                    self.prefix.clear();
                    self.prefix.extend_from_slice(&full.as_bytes()[..=dot]);
                    self.sec = Some(sec);
                }
                _ => {
                    self.sec = None;
                    out.push(b'"');
                    out.extend_from_slice(crate::clock::rfc3339(unix_ns).as_bytes());
                    out.push(b'"');
                    return;
                }
            }
        }
        out.push(b'"');
        out.extend_from_slice(&self.prefix);
        let mut digits = [b'0'; 9];
        let mut n = nanos;
        for d in digits.iter_mut().rev() {
            *d = b'0' + (n % 10) as u8;
            n /= 10;
        }
        out.extend_from_slice(&digits);
        out.extend_from_slice(b"Z\"");
    }
}

/// A JSON string: copied as is when nothing needs escaping (the usual case), else escaped
/// by serde_json so the rules are the same as on every other line.
fn string(out: &mut Vec<u8>, s: &str) {
    if s.bytes().all(|b| b >= 0x20 && b != b'"' && b != b'\\') {
        out.push(b'"');
        out.extend_from_slice(s.as_bytes());
        out.push(b'"');
    } else {
        // Writing into a Vec cannot fail.
        let _ = serde_json::to_writer(&mut *out, s);
    }
}

fn number(out: &mut Vec<u8>, n: impl itoa::Integer) {
    out.extend_from_slice(itoa::Buffer::new().format(n).as_bytes());
}

fn addr(out: &mut Vec<u8>, a: &SocketAddr) {
    match a {
        SocketAddr::V4(v4) => {
            // `"255.255.255.255:65535"` at most: built on the stack, copied once.
            let mut buf = [0u8; 23];
            let mut n = 0;
            let mut put = |b: u8| {
                buf[n] = b;
                n += 1;
            };
            put(b'"');
            for (i, &o) in v4.ip().octets().iter().enumerate() {
                if i > 0 {
                    put(b'.');
                }
                if o >= 100 {
                    put(b'0' + o / 100);
                }
                if o >= 10 {
                    put(b'0' + o / 10 % 10);
                }
                put(b'0' + o % 10);
            }
            put(b':');
            let port = v4.port();
            let mut started = false;
            for div in [10_000u16, 1_000, 100, 10, 1] {
                let d = (port / div % 10) as u8;
                if started || d != 0 || div == 1 {
                    put(b'0' + d);
                    started = true;
                }
            }
            put(b'"');
            out.extend_from_slice(&buf[..n]);
        }
        SocketAddr::V6(_) => string(out, &a.to_string()),
    }
}

/// The outcome as a JSON string, quotes included.
fn outcome_json(o: Outcome) -> &'static [u8] {
    match o {
        Outcome::Ok => b"\"ok\"",
        Outcome::ClientError => b"\"client_error\"",
        Outcome::ServerError => b"\"server_error\"",
        Outcome::Unknown => b"\"unknown\"",
    }
}

fn boolean(out: &mut Vec<u8>, b: bool) {
    out.extend_from_slice(if b { b"true" } else { b"false" });
}

/// What a connection's calls have in common on their lines: the fields from `"proto"` to
/// `"peer"`. Two calls with equal keys get the same bytes there.
#[derive(Debug, Clone)]
struct ConnFieldsKey {
    sock_id: u64,
    pid: u32,
    tid: u32,
    side: Side,
    proto: Protocol,
    tls: bool,
    local: SocketAddr,
    peer: SocketAddr,
    comm: Arc<str>,
    thread: Option<Arc<str>>,
}

impl ConnFieldsKey {
    fn of(c: &Call) -> ConnFieldsKey {
        ConnFieldsKey {
            sock_id: c.sock_id,
            pid: c.pid,
            tid: c.tid,
            side: c.side,
            proto: c.l7.proto,
            tls: c.tls,
            local: c.local,
            peer: c.peer,
            comm: Arc::clone(&c.comm),
            thread: c.thread.clone(),
        }
    }

    fn matches(&self, c: &Call) -> bool {
        self.sock_id == c.sock_id
            && self.pid == c.pid
            && self.tid == c.tid
            && self.side == c.side
            && self.proto == c.l7.proto
            && self.tls == c.tls
            && self.local == c.local
            && self.peer == c.peer
            // A connection's calls share one name (pointer equal); a renamed process not.
            && (Arc::ptr_eq(&self.comm, &c.comm) || *self.comm == *c.comm)
            && self.thread.as_deref() == c.thread.as_deref()
    }
}

/// Slots of [`ConnFieldsCache`]: a power of two.
const CONN_FIELDS_SLOTS: usize = 256;

/// The connection fields of recent calls, already written: formatting them (two addresses,
/// three integers, the process name) was about a third of a line's cost, and a connection
/// carries many calls in a row. A slot per (socket, thread) hash; a collision just writes the
/// fields again.
#[derive(Debug, Default)]
struct ConnFieldsCache {
    slots: Vec<Option<(ConnFieldsKey, Vec<u8>)>>,
}

impl ConnFieldsCache {
    fn write(&mut self, out: &mut Vec<u8>, c: &Call) {
        if self.slots.is_empty() {
            self.slots.resize_with(CONN_FIELDS_SLOTS, || None);
        }
        let hash = (c.sock_id ^ (u64::from(c.tid) << 32)).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        let slot = &mut self.slots[(hash >> 56) as usize % CONN_FIELDS_SLOTS];
        match slot {
            Some((key, bytes)) if key.matches(c) => out.extend_from_slice(bytes),
            _ => {
                let mut bytes = Vec::with_capacity(160 + c.comm.len());
                conn_fields(&mut bytes, c);
                out.extend_from_slice(&bytes);
                *slot = Some((ConnFieldsKey::of(c), bytes));
            }
        }
    }
}

/// `,"proto":…` through `,"peer":…`: the fields [`ConnFieldsKey`] holds.
fn conn_fields(out: &mut Vec<u8>, c: &Call) {
    out.extend_from_slice(b",\"proto\":");
    string(out, c.l7.proto.name());
    if c.tls {
        out.extend_from_slice(b",\"tls\":true");
    }
    out.extend_from_slice(b",\"side\":");
    string(out, c.side.name());
    out.extend_from_slice(b",\"pid\":");
    number(out, c.pid);
    out.extend_from_slice(b",\"tid\":");
    number(out, c.tid);
    out.extend_from_slice(b",\"comm\":");
    string(out, &c.comm);
    if let Some(t) = &c.thread {
        out.extend_from_slice(b",\"thread\":");
        string(out, t);
    }
    out.extend_from_slice(b",\"sock_id\":");
    number(out, c.sock_id);
    out.extend_from_slice(b",\"local\":");
    addr(out, &c.local);
    out.extend_from_slice(b",\"peer\":");
    addr(out, &c.peer);
}

/// Writes `call` lines with a session's clock: what a tracking thread uses to format the
/// lines of the calls it completes (`--threads`), so the JSON sink only copies them.
#[derive(Debug, Default)]
pub struct CallFormatter {
    pub clock: crate::clock::WallClock,
    ts: TimestampCache,
    conns: ConnFieldsCache,
}

impl CallFormatter {
    pub fn new(clock: crate::clock::WallClock) -> CallFormatter {
        CallFormatter {
            clock,
            ts: TimestampCache::default(),
            conns: ConnFieldsCache::default(),
        }
    }

    /// Appends `c`'s line (with its newline).
    pub fn write(&mut self, out: &mut Vec<u8>, c: &Call) {
        let unix_ns = self.clock.unix_ns(c.start_ns);
        write(out, &mut self.ts, &mut self.conns, c, unix_ns);
    }
}

/// Appends one `call` line (with its newline) for `c`, whose start is `unix_ns`.
fn write(
    out: &mut Vec<u8>,
    ts: &mut TimestampCache,
    conns: &mut ConnFieldsCache,
    c: &Call,
    unix_ns: i64,
) {
    // The fixed part of a line is under 512 bytes: one capacity check instead of one per
    // field's growth.
    let details: usize =
        c.l7.details
            .iter()
            .map(|(k, v)| k.len() + v.len() + 8)
            .sum();
    out.reserve(
        512 + c.comm.len()
            + c.l7.method.len()
            + c.l7.resource.len()
            + details
            + c.l7.status_text.as_ref().map_or(0, String::len),
    );
    out.extend_from_slice(b"{\"type\":\"call\",\"ts\":");
    ts.write(out, unix_ns);
    conns.write(out, c);
    out.extend_from_slice(b",\"method\":");
    string(out, &c.l7.method);
    out.extend_from_slice(b",\"resource\":");
    string(out, &c.l7.resource);
    out.extend_from_slice(b",\"version\":");
    string(out, c.l7.version);
    out.extend_from_slice(b",\"status\":");
    match c.l7.status {
        Some(s) => number(out, s),
        None => out.extend_from_slice(b"null"),
    }
    if let Some(text) = &c.l7.status_text {
        out.extend_from_slice(b",\"status_text\":");
        string(out, text);
    }
    out.extend_from_slice(b",\"outcome\":");
    out.extend_from_slice(outcome_json(c.l7.outcome));
    out.extend_from_slice(b",\"latency_ns\":");
    number(out, c.latency_ns);
    out.extend_from_slice(b",\"req_bytes\":");
    number(out, c.l7.req.bytes);
    out.extend_from_slice(b",\"resp_bytes\":");
    number(out, c.l7.resp.bytes);
    out.extend_from_slice(b",\"req_syscalls\":");
    number(out, c.l7.req.syscalls);
    out.extend_from_slice(b",\"resp_syscalls\":");
    number(out, c.l7.resp.syscalls);
    out.extend_from_slice(b",\"truncated\":");
    boolean(out, c.l7.truncated);
    out.extend_from_slice(b",\"end_inferred\":");
    boolean(out, c.l7.end_inferred);
    // Optional details (`--depth full`), as string fields: HTTP `host`, Redis `reply`, `error`…
    for (key, value) in &c.l7.details {
        out.push(b',');
        string(out, key);
        out.push(b':');
        string(out, value);
    }
    if c.id != 0 {
        chain_fields(out, c);
    }
    out.extend_from_slice(b"}\n");
}

/// The call's place in its chain (src/chains.rs): `id`, `parent_id`, `trace_id`, last in
/// its line. Calls tracked on other threads are linked on the pipeline's thread after their
/// line was written (id 0 then): [`with_chain_fields`] adds these to it.
pub fn chain_fields(out: &mut Vec<u8>, c: &Call) {
    let hex = |out: &mut Vec<u8>, id: u64| {
        out.push(b'"');
        for i in (0..16).rev() {
            out.push(b"0123456789abcdef"[(id >> (i * 4)) as usize & 15]);
        }
        out.push(b'"');
    };
    out.extend_from_slice(b",\"id\":");
    hex(out, c.id);
    out.extend_from_slice(b",\"parent_id\":");
    match c.parent_id {
        Some(p) => hex(out, p),
        None => out.extend_from_slice(b"null"),
    }
    out.extend_from_slice(b",\"trace_id\":");
    match &c.trace_id {
        Some(t) => string(out, t),
        None => out.extend_from_slice(b"null"),
    }
}

/// `line` (a call line written before `c` was linked) with `c`'s chain fields, into `out`.
pub fn with_chain_fields(out: &mut Vec<u8>, line: &[u8], c: &Call) {
    out.clear();
    let body = line.strip_suffix(b"}\n").unwrap_or(line);
    out.extend_from_slice(body);
    chain_fields(out, c);
    out.extend_from_slice(b"}\n");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timestamps_match_the_general_formatter_across_seconds_and_odd_values() {
        let mut cache = TimestampCache::default();
        for ns in [
            0i64,
            1,
            999_999_999,
            1_000_000_000,
            1_700_000_000_123_456_789,
            1_700_000_000_999_999_999,
            1_700_000_001_000_000_000,
            1_700_000_000_000_000_007,
            -5,
            i64::MAX,
        ] {
            let mut got = Vec::new();
            cache.write(&mut got, ns);
            let want = format!("\"{}\"", crate::clock::rfc3339(ns));
            assert_eq!(String::from_utf8(got).unwrap(), want, "{ns}");
        }
    }

    #[test]
    fn status_text_and_details_are_fields_of_the_line() {
        let mut http = crate::aggregate::endpoints::tests::call("curl", 1, "GET", "/a", 5_000);
        http.l7.details = vec![("host", "example.com".to_owned())];
        let mut redis = crate::aggregate::endpoints::tests::call("app", 2, "GET", "k:1", 5_000);
        redis.l7.proto = crate::protocols::Protocol::Redis;
        redis.l7.version = "3";
        redis.l7.status = None;
        redis.l7.status_text = Some("WRONGTYPE".to_owned());
        redis.l7.outcome = Outcome::ServerError;
        redis.l7.details = vec![
            ("reply", "error".to_owned()),
            (
                "error",
                "WRONGTYPE Operation against a key \"x\"".to_owned(),
            ),
        ];
        let mut f = CallFormatter::default();
        let line = |f: &mut CallFormatter, c: &Call| {
            let mut out = Vec::new();
            f.write(&mut out, c);
            serde_json::from_slice::<serde_json::Value>(&out).unwrap()
        };
        let h = line(&mut f, &http);
        assert_eq!(
            (h["status"].as_u64(), h["host"].as_str()),
            (Some(200), Some("example.com"))
        );
        assert!(h.get("status_text").is_none());
        let r = line(&mut f, &redis);
        assert_eq!(r["proto"], "redis");
        assert_eq!(r["version"], "3");
        assert!(r["status"].is_null());
        assert_eq!(r["status_text"], "WRONGTYPE");
        assert_eq!(r["outcome"], "server_error");
        assert_eq!(r["reply"], "error");
        assert_eq!(r["error"], "WRONGTYPE Operation against a key \"x\"");
    }

    #[test]
    fn a_connections_fields_are_written_anew_when_any_of_them_changes() {
        // Each call differs from the one before it in one of the fields kept per connection
        // (or in none): every line must be what a formatter that never saw a call writes.
        let base = crate::aggregate::endpoints::tests::call("app", 7, "GET", "/a", 5_000);
        let mut calls = vec![base.clone(), base.clone()];
        let mut next = |f: &dyn Fn(&mut Call)| {
            let mut c = calls.last().unwrap().clone();
            f(&mut c);
            calls.push(c);
        };
        next(&|c| c.sock_id += 1);
        next(&|c| c.pid += 1);
        next(&|c| c.tid += 1);
        next(&|c| c.side = Side::Server);
        next(&|c| c.l7.proto = Protocol::Redis);
        next(&|c| c.tls = true);
        next(&|c| c.local.set_port(c.local.port() + 1));
        next(&|c| c.peer = "[2001:db8::1]:443".parse().unwrap());
        // The same name in another allocation: same bytes; then another name.
        next(&|c| c.comm = Arc::from(c.comm.to_string()));
        next(&|c| c.comm = Arc::from("other\"name"));
        next(&|c| c.thread = Some(Arc::from("isc-net-0000")));
        next(&|c| c.thread = Some(Arc::from("isc-net-0001")));
        next(&|c| c.thread = None);
        next(&|c| c.l7.resource = "/b".to_owned());
        // Back to the first connection, and many sockets sharing slots.
        calls.push(base.clone());
        for i in 0..(4 * CONN_FIELDS_SLOTS as u64) {
            let mut c = base.clone();
            c.sock_id = i * 977;
            calls.push(c);
        }
        calls.push(base);
        let mut cached = CallFormatter::default();
        for (i, c) in calls.iter().enumerate() {
            let mut got = Vec::new();
            cached.write(&mut got, c);
            let mut want = Vec::new();
            CallFormatter::default().write(&mut want, c);
            assert_eq!(
                String::from_utf8(got).unwrap(),
                String::from_utf8(want).unwrap(),
                "call {i}"
            );
        }
    }

    #[test]
    fn addresses_are_written_as_their_display() {
        let v4 = |a: [u8; 4], port: u16| SocketAddr::from((a, port));
        let v6: SocketAddr = "[2001:db8::1]:443".parse().unwrap();
        for a in [
            v4([0, 0, 0, 0], 0),
            v4([127, 0, 0, 1], 8080),
            v4([255, 255, 255, 255], 65535),
            v4([10, 99, 100, 9], 10),
            v4([1, 20, 200, 101], 10_000),
            v4([192, 168, 1, 255], 9),
            v6,
        ]
        .into_iter()
        // Every port, and every octet value in every position.
        .chain((0..=65535u32).map(|p| {
            let o = (p % 256) as u8;
            v4([o, o.wrapping_add(1), o.wrapping_mul(7), 255 - o], p as u16)
        })) {
            let mut got = Vec::new();
            addr(&mut got, &a);
            assert_eq!(String::from_utf8(got).unwrap(), format!("\"{a}\""));
        }
    }

    #[test]
    fn strings_needing_escapes_are_escaped_like_serde() {
        for s in [
            "plain",
            "",
            "a\"b",
            "back\\slash",
            "tab\there",
            "nl\n",
            "\u{1}",
            "é ✓",
        ] {
            let mut got = Vec::new();
            string(&mut got, s);
            assert_eq!(got, serde_json::to_vec(s).unwrap(), "{s:?}");
        }
    }
}
