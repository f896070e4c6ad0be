//! The plugin parser with the example guest `lenrpc` (examples/plugins/lenrpc.wat): framing
//! across syscalls, bodies past the snaplen, pairing by key, losses.

use super::*;
use crate::plugins::tests::{example, guest};
use crate::plugins::Limits;
use crate::protocols::test_driver::{stream_config, Driver};
use Direction::{Egress, Ingress};

/// A lenrpc message: length, type, id, body.
fn msg(kind: u8, id: u32, body: &[u8]) -> Vec<u8> {
    let mut m = ((body.len() + 5) as u32).to_be_bytes().to_vec();
    m.push(kind);
    m.extend_from_slice(&id.to_be_bytes());
    m.extend_from_slice(body);
    m
}

fn req(id: u32, call: &str) -> Vec<u8> {
    msg(1, id, call.as_bytes())
}

fn resp(id: u32, status: u8) -> Vec<u8> {
    msg(2, id, &[status, b'x', b'y'])
}

fn driver() -> Driver<PluginParser> {
    let p = example("lenrpc", Limits::default());
    let conn = ConnInfo {
        conn_id: 7,
        pid: 42,
        comm: *b"client\0\0\0\0\0\0\0\0\0\0",
        local: "127.0.0.1:40000".parse().unwrap(),
        peer: "127.0.0.1:7878".parse().unwrap(),
    };
    Driver::with_parser(PluginParser::new(guest(&p), &conn, &stream_config(0)))
}

#[test]
fn requests_and_responses_pair_by_key_out_of_order_and_across_syscalls() {
    let mut d = driver();
    let both = [req(1, "GET /orders/1"), req(2, "PUT /orders/2")].concat();
    d.seg(Egress, &both);
    // Answered in the other order; the second response split inside its header.
    let r2 = resp(2, 0);
    d.seg(Ingress, &r2);
    let r1 = resp(1, 7);
    d.seg(Ingress, &r1[..3]).seg(Ingress, &r1[3..]);
    assert_eq!(d.calls.len(), 2);
    let (a, b) = (&d.calls[0], &d.calls[1]);
    assert_eq!(
        (a.method.as_str(), a.resource.as_str()),
        ("PUT", "/orders/2")
    );
    assert_eq!((a.status, a.outcome), (Some(0), Outcome::Ok));
    assert_eq!(
        (b.method.as_str(), b.resource.as_str()),
        ("GET", "/orders/1")
    );
    assert_eq!((b.status, b.outcome), (Some(7), Outcome::ServerError));
    assert_eq!(a.proto, Protocol::Plugin);
    assert_eq!(a.request_dir, Egress);
    assert_eq!(d.detail(0, "plugin"), Some("lenrpc"));
    // Spans: both requests in one syscall; the second response in two.
    assert_eq!(a.req.bytes, req(2, "PUT /orders/2").len() as u64);
    assert_eq!((b.resp.bytes, b.resp.syscalls), (r1.len() as u64, 2));
    assert_eq!(d.stats, ParseStats::default());
}

#[test]
fn a_body_past_the_snaplen_is_skipped_by_count_and_the_call_is_truncated() {
    let mut d = driver();
    let big = req(5, &format!("POST /blob{}", "x".repeat(10_000)));
    d.seg_cut(Egress, &big[..4096], big.len() as u64);
    d.seg(Ingress, &resp(5, 0));
    assert_eq!(d.calls.len(), 1);
    assert_eq!(d.calls[0].method, "POST");
    assert!(d.calls[0].truncated);
    assert_eq!(d.calls[0].req.bytes, big.len() as u64);
}

#[test]
fn after_a_gap_a_direction_picks_up_at_the_next_message_and_keys_still_pair() {
    let mut d = driver();
    d.seg(Egress, &req(1, "GET /a"));
    d.gap(Egress, Some(100));
    // Garbage (no message start) is skipped; the next message picks the direction up.
    d.seg(Egress, b"\xff\xff\xff\xff garbage");
    d.seg(Egress, &req(2, "GET /b"));
    d.seg(Ingress, &resp(1, 0)).seg(Ingress, &resp(2, 0));
    let resources: Vec<&str> = d.calls.iter().map(|c| c.resource.as_str()).collect();
    assert_eq!(resources, ["/a", "/b"]);
    assert!(d.stats.desyncs >= 1);
    assert!(d.stats.unparsed_bytes > 0);
}

#[test]
fn an_unanswered_request_is_counted_at_close_and_an_unasked_response_as_unmatched() {
    let mut d = driver();
    d.seg(Egress, &req(1, "GET /a"));
    d.seg(Ingress, &resp(9, 0));
    d.close();
    assert!(d.calls.is_empty());
    assert_eq!(d.stats.unmatched_responses, 1);
    assert_eq!(d.stats.unanswered_requests, 1);
}

#[test]
fn a_disabled_plugin_leaves_its_connections_counted_not_parsed() {
    let mut d = driver();
    d.p.guest
        .lock()
        .unwrap()
        .plugin
        .counters
        .disabled
        .store(true, std::sync::atomic::Ordering::Relaxed);
    d.seg(Egress, &req(1, "GET /a")).seg(Ingress, &resp(1, 0));
    assert!(d.calls.is_empty());
    assert_eq!(
        d.stats.unparsed_bytes,
        (req(1, "GET /a").len() + resp(1, 0).len()) as u64
    );
}

/// A `transport=udp` plugin answering `answers` in turn, on a datagram socket.
fn datagram_driver(answers: &[abi::Answer]) -> Driver<PluginParser> {
    let p = crate::plugins::fuzzing::scripted_plugin(
        &[],
        answers,
        "name=dg\nabi=1\nkind=parse\nports=5353\ntransport=udp\n",
        Limits::default(),
    );
    let conn = ConnInfo {
        conn_id: 9,
        pid: 1,
        comm: [0; 16],
        local: "127.0.0.1:5353".parse().unwrap(),
        peer: "0.0.0.0:0".parse().unwrap(),
    };
    let cfg = ParserConfig {
        transport: super::super::Transport::Datagram,
        ..stream_config(0)
    };
    Driver::with_parser(PluginParser::new(guest(&p), &conn, &cfg))
}

fn half(kind: u8, key: u64, resource: &str) -> abi::Answer {
    abi::Answer {
        kind,
        outcome: (kind == abi::HALF_RESPONSE).then_some(Outcome::Ok),
        pair_key: key,
        method: if kind == abi::HALF_REQUEST { "Q" } else { "" }.into(),
        resource: resource.into(),
        ..Default::default()
    }
}

/// A datagram from or to `peer`.
fn dgram<'a>(dir: Direction, peer: &str, bytes: &'a [u8], at: u64) -> Segment<'a> {
    Segment {
        dir,
        payload: bytes,
        tail: &[],
        total_len: bytes.len() as u64,
        start_ns: at,
        end_ns: at + 10,
        peer: Some(peer.parse().unwrap()),
        pos: 0,
    }
}

#[test]
fn datagrams_pair_per_peer_by_key_and_in_order_and_a_loss_stops_in_order_pairing() {
    use abi::{HALF_REQUEST as REQ, HALF_RESPONSE as RESP};
    // Two peers ask with key 5 at once; answered in the other order. Then in order (key 0):
    // a request of each peer, answered in the other order too.
    let mut d = datagram_driver(&[
        half(REQ, 5, "/a"),
        half(REQ, 5, "/b"),
        half(RESP, 5, ""),
        half(RESP, 5, ""),
        half(REQ, 0, "/c"),
        half(REQ, 0, "/d"),
        half(RESP, 0, ""),
        half(RESP, 0, ""),
        // After a loss: an in-order request stays unpaired, a keyed one pairs.
        half(REQ, 0, "/e"),
        half(REQ, 7, "/f"),
        half(RESP, 0, ""),
        half(RESP, 7, ""),
    ]);
    let (a, b) = ("10.0.0.1:1000", "10.0.0.2:2000");
    let mut out = Vec::new();
    let mut t = 0;
    let mut feed = |d: &mut Driver<PluginParser>, dir, peer, n: usize| {
        t += 100;
        let bytes = vec![b'x'; n];
        d.p.on_segment(&dgram(dir, peer, &bytes, t), &mut out, &mut d.stats);
    };
    feed(&mut d, Ingress, a, 10);
    feed(&mut d, Ingress, b, 11);
    feed(&mut d, Egress, b, 20);
    feed(&mut d, Egress, a, 21);
    feed(&mut d, Ingress, a, 12);
    feed(&mut d, Ingress, b, 13);
    feed(&mut d, Egress, b, 22);
    feed(&mut d, Egress, a, 23);
    d.p.on_gap(Ingress, Some(40), &mut d.stats);
    feed(&mut d, Ingress, a, 14);
    feed(&mut d, Ingress, a, 15);
    feed(&mut d, Egress, a, 24);
    feed(&mut d, Egress, a, 25);
    d.p.on_close(&mut out, &mut d.stats);
    let stats = &d.stats;
    let got: Vec<(&str, u64, u64)> = out
        .iter()
        .map(|c| (c.resource.as_str(), c.req.bytes, c.resp.bytes))
        .collect();
    assert_eq!(
        got,
        [
            ("/b", 11, 20),
            ("/a", 10, 21),
            ("/d", 13, 22),
            ("/c", 12, 23),
            ("/f", 15, 25)
        ]
    );
    assert!(out.iter().all(|c| c.request_dir == Ingress));
    // /e: unanswered (in order after the loss); its response: unmatched.
    assert_eq!(
        (stats.unanswered_requests, stats.unmatched_responses),
        (1, 1)
    );
}

/// Issue 46: a datagram request that gets no response leaves by the built-in DNS parser's
/// rule (a later datagram of the socket `QUERY_TIMEOUT_NS` newer), counted in
/// `unanswered_requests`, and its response, should it come late, pairs with nothing: by key
/// it is unmatched; in order (key 0) the timeout stops in-order pairing on the socket.
#[test]
fn unanswered_datagram_requests_time_out_and_never_pair_with_a_later_response() {
    use abi::{HALF_REQUEST as REQ, HALF_RESPONSE as RESP};
    let mut d = datagram_driver(&[
        half(REQ, 1, "/lost"),
        half(REQ, 2, "/b"),
        half(RESP, 1, ""),
        half(RESP, 2, ""),
        half(REQ, 0, "/c"),
        half(REQ, 9, "/x"),
        half(RESP, 0, ""),
        half(REQ, 0, "/d"),
    ]);
    let (a, b) = ("10.0.0.1:1000", "10.0.0.2:2000");
    let mut out = Vec::new();
    let s = 1_000_000_000;
    let mut feed = |d: &mut Driver<PluginParser>, dir, peer, n: usize, t: u64| {
        let bytes = vec![b'x'; n];
        d.p.on_segment(&dgram(dir, peer, &bytes, t), &mut out, &mut d.stats);
    };
    feed(&mut d, Ingress, a, 10, 0);
    // 11 s later: /lost is gone, counted; its late response (key 1) pairs with nothing.
    feed(&mut d, Ingress, a, 11, 11 * s);
    assert_eq!(d.stats.unanswered_requests, 1);
    feed(&mut d, Egress, a, 20, 11 * s + 100);
    feed(&mut d, Egress, a, 21, 11 * s + 200);
    // In order: /c unanswered 11 s; its late answer pairs with nothing, nor with /d.
    feed(&mut d, Ingress, a, 12, 12 * s);
    feed(&mut d, Ingress, b, 13, 23 * s);
    assert_eq!(d.stats.unanswered_requests, 2);
    feed(&mut d, Egress, a, 22, 23 * s + 100);
    feed(&mut d, Ingress, a, 14, 23 * s + 200);
    d.p.on_close(&mut out, &mut d.stats);
    let got: Vec<(&str, u64, u64)> = out
        .iter()
        .map(|c| (c.resource.as_str(), c.req.bytes, c.resp.bytes))
        .collect();
    assert_eq!(got, [("/b", 11, 21)]);
    // /lost and /c by the timeout, /d (in order after it), /x at the close; the responses
    // of key 1 and 0.
    let st = &d.stats;
    assert_eq!(
        (
            st.unanswered_requests,
            st.unmatched_responses,
            st.pending_dropped
        ),
        (4, 2, 0)
    );
}

/// In order (key 0) a response pairs only with its peer's one pending key-0 request: with
/// two, one datagram went unseen or unanswered and which this answers is unknown.
#[test]
fn a_key0_response_while_its_peer_has_two_requests_pending_pairs_with_neither() {
    use abi::{HALF_REQUEST as REQ, HALF_RESPONSE as RESP};
    let mut d = datagram_driver(&[
        half(REQ, 0, "/a"),
        half(REQ, 0, "/b"),
        half(RESP, 0, ""),
        half(REQ, 4, "/k"),
        half(RESP, 4, ""),
    ]);
    let a = "10.0.0.1:1000";
    let mut out = Vec::new();
    for (i, dir) in [Ingress, Ingress, Egress, Ingress, Egress]
        .into_iter()
        .enumerate()
    {
        let bytes = vec![b'x'; 10 + i];
        let seg = dgram(dir, a, &bytes, i as u64 * 1000);
        d.p.on_segment(&seg, &mut out, &mut d.stats);
    }
    d.p.on_close(&mut out, &mut d.stats);
    // Keyed pairing goes on.
    assert_eq!(
        out.iter().map(|c| c.resource.as_str()).collect::<Vec<_>>(),
        ["/k"]
    );
    assert_eq!(
        (d.stats.unanswered_requests, d.stats.unmatched_responses),
        (2, 1)
    );
}

/// Pending datagram requests: at most `DEPTH` per peer and `DGRAM_PENDING` per socket; past
/// either the oldest (of the peer, of the socket) is dropped, counted.
#[test]
fn datagram_requests_pending_are_bounded_per_peer_and_per_socket() {
    let half_at = |t: u64| Half {
        method: "Q".into(),
        resource: String::new(),
        attrs: Vec::new(),
        span: MessageSpan {
            first_start_ns: t,
            last_end_ns: t + 10,
            ..Default::default()
        },
        truncated: false,
        dir: Ingress,
    };
    let start = |h: Result<Option<Half>, ()>| h.map(|h| h.map(|h| h.span.first_start_ns));
    let mut p = DgramPending::default();
    let a: Option<SocketAddr> = Some("10.0.0.1:1".parse().unwrap());
    for k in 1..=DEPTH as u64 {
        assert_eq!(p.push(a, k, half_at(k)).1.n, 0);
    }
    let (_, dropped) = p.push(a, 1000, half_at(1000));
    assert_eq!((dropped.n, dropped.key0, p.len), (1, false, DEPTH));
    assert_eq!(start(p.take(a, 1, Egress)), Ok(None));
    assert_eq!(start(p.take(a, 2, Egress)), Ok(Some(2)));
    // A response the request's own way answers nothing.
    assert_eq!(start(p.take(a, 3, Ingress)), Ok(None));
    assert_eq!(p.clear(), DEPTH as u64 - 1);
    let peer = |i: usize| Some(SocketAddr::from(([10, 0, (i >> 8) as u8, i as u8], 1000)));
    for i in 0..DGRAM_PENDING {
        assert_eq!(p.push(peer(i), 7, half_at(5000 + i as u64)).1.n, 0);
    }
    let (_, dropped) = p.push(peer(DGRAM_PENDING), 0, half_at(9_999_999));
    assert_eq!(
        (dropped.n, p.len, p.peers.len()),
        (1, DGRAM_PENDING, DGRAM_PENDING)
    );
    assert_eq!(
        start(p.take(peer(0), 7, Egress)),
        Ok(None),
        "the oldest went"
    );
    assert_eq!(start(p.take(peer(1), 7, Egress)), Ok(Some(5001)));
    // The timeout: all but the newest are 10 s older than it.
    let gone = p.expire(9_999_999 + 10 + crate::protocols::dns::QUERY_TIMEOUT_NS);
    assert_eq!(
        (gone.n, gone.key0, p.len),
        (DGRAM_PENDING as u64 - 2, false, 1)
    );
}

/// Found by the `plugin` fuzz target: a plugin asks for a 4-byte header, then says the header
/// is a line, which already ended inside those 4 bytes. The framing core subtracted the bytes
/// counted from the line's length (an overflow: a panic in debug builds, a byte count of
/// ~2^64 in release ones); now the answer contradicts itself and is no message.
#[test]
fn a_line_answer_for_a_header_that_already_ended_is_no_message() {
    let p = crate::plugins::fuzzing::scripted_plugin(
        &[abi::FRAME_NEED | 4, abi::FRAME_LINE | 100],
        &[],
        "name=lines\nabi=1\nkind=parse\nports=7878\n",
        Limits::default(),
    );
    let conn = ConnInfo {
        conn_id: 7,
        pid: 42,
        comm: [0; 16],
        local: "127.0.0.1:40000".parse().unwrap(),
        peer: "127.0.0.1:7878".parse().unwrap(),
    };
    for split in [false, true] {
        let mut d = Driver::with_parser(PluginParser::new(guest(&p), &conn, &stream_config(0)));
        if split {
            // The header buffered across segments.
            d.seg(Egress, b"a").seg(Egress, b"\nbc");
        } else {
            d.seg(Egress, b"a\nbcdef");
        }
        assert!(d.calls.is_empty());
        assert!(d.stats.desyncs >= 1, "{:?}", d.stats);
        assert!(d.stats.unparsed_bytes <= 7, "{:?}", d.stats);
    }
}
