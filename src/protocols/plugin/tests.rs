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
