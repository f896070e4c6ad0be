//! The Kafka parser on hand-made frames at the edges the fixtures do not reach.

use super::*;
use crate::protocols::test_driver::stream_config;

const OUT: Direction = Direction::Egress;
const IN: Direction = Direction::Ingress;

type Driver = crate::protocols::test_driver::Driver<KafkaParser>;

fn driver() -> Driver {
    Driver::with_parser(KafkaParser::new(&stream_config(0)))
}

/// A message: its length and `body`.
fn frame(body: &[u8]) -> Vec<u8> {
    let mut m = (body.len() as u32).to_be_bytes().to_vec();
    m.extend_from_slice(body);
    m
}

/// A request header v1 (`client_id` "t") for `api` `version`, correlation id `corr`.
fn request(api: i16, version: i16, corr: i32, rest: &[u8]) -> Vec<u8> {
    let mut b = api.to_be_bytes().to_vec();
    b.extend_from_slice(&version.to_be_bytes());
    b.extend_from_slice(&corr.to_be_bytes());
    b.extend_from_slice(&[0, 1, b't']);
    if wire::flexible(api, version) == Some(true) {
        b.push(0);
    }
    b.extend_from_slice(rest);
    frame(&b)
}

#[test]
fn the_kernel_rule_and_detect_know_the_same_api_keys() {
    // infer.h hard-codes the highest API key.
    assert_eq!(wire::MAX_KNOWN_API, 92);
}

#[test]
fn an_unknown_api_still_makes_a_call_with_unknown_status() {
    let mut d = driver();
    // The connection starts as every client's does; then an API Kafka may add one day,
    // its length read apart from its body (as brokers read).
    d.seg(OUT, &request(18, 3, 1, &[1, 1, 0]));
    d.seg(IN, &frame(&[0, 0, 0, 1, 0, 0, 1, 0, 0, 0, 0]));
    let req = request(200, 3, 7, b"whatever");
    d.seg(OUT, &req[..4]).seg(OUT, &req[4..]);
    d.seg(IN, &frame(&[0, 0, 0, 7, 0, 0]));
    assert_eq!(d.calls.len(), 2);
    let c = &d.calls[1];
    assert_eq!(c.method, "api_200");
    assert_eq!(c.outcome, Outcome::Unknown);
    assert_eq!(c.status_text, None);
    assert_eq!(c.req.bytes, req.len() as u64);
    assert_eq!(c.resp.bytes, 10);
}

#[test]
fn a_version_newer_than_known_keeps_its_error_code() {
    let mut d = driver();
    // Heartbeat v40 (flexible, as every version since 4): group "g".
    d.seg(OUT, &request(12, 40, 1, &[2, b'g', 0]));
    // Response header v1 (tags), throttle, error 25 (UNKNOWN_MEMBER_ID), tags.
    d.seg(IN, &frame(&[0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 25, 0]));
    let c = &d.calls[0];
    assert_eq!(
        (c.method.as_str(), c.resource.as_str()),
        ("heartbeat", "heartbeat g")
    );
    assert_eq!(c.version, "40");
    assert_eq!(c.status_text.as_deref(), Some("UNKNOWN_MEMBER_ID"));
    assert_eq!(c.outcome, Outcome::ClientError);
}

#[test]
fn api_versions_responses_keep_header_v0() {
    let mut d = driver();
    d.seg(OUT, &request(18, 3, 1, &[1, 1, 0]));
    // No tagged fields after the correlation id: the error code follows at once (35:
    // UNSUPPORTED_VERSION).
    d.seg(IN, &frame(&[0, 0, 0, 1, 0, 35, 1, 0, 0, 0, 0]));
    assert_eq!(
        d.calls[0].status_text.as_deref(),
        Some("UNSUPPORTED_VERSION")
    );
}

#[test]
fn pipelined_responses_pair_by_correlation_id_in_any_order() {
    let mut d = driver();
    let mut both = request(12, 4, 5, &[2, b'a', 0]);
    both.extend(request(12, 4, 6, &[2, b'b', 0]));
    d.seg(OUT, &both);
    d.seg(IN, &frame(&[0, 0, 0, 6, 0, 0, 0, 0, 0, 0, 0, 0]));
    d.seg(IN, &frame(&[0, 0, 0, 5, 0, 0, 0, 0, 0, 0, 27, 0]));
    let got: Vec<_> = d
        .calls
        .iter()
        .map(|c| (c.resource.as_str(), c.status_text.as_deref()))
        .collect();
    assert_eq!(
        got,
        [
            ("heartbeat b", Some("ok")),
            ("heartbeat a", Some("REBALANCE_IN_PROGRESS"))
        ]
    );
}

#[test]
fn acks_0_produce_is_one_way_and_counted() {
    let mut d = driver();
    // Produce v7: transactional_id null, acks 0, timeout, one topic "t" with no partitions.
    let body = [
        0xff, 0xff, 0, 0, 0, 0, 0x75, 0x30, 0, 0, 0, 1, 0, 1, b't', 0, 0, 0, 0,
    ];
    d.seg(OUT, &request(0, 7, 1, &body));
    d.close();
    assert!(d.calls.is_empty());
    assert_eq!(d.stats.unreplied_requests, 1);
    assert_eq!(d.stats.unanswered_requests, 0);
}

#[test]
fn a_response_without_its_request_is_counted() {
    let mut d = driver();
    d.seg(OUT, &request(12, 4, 1, &[2, b'a', 0]));
    d.seg(IN, &frame(&[0, 0, 0, 9, 0, 0, 0, 0, 0, 0, 0, 0]));
    d.close();
    assert!(d.calls.is_empty());
    assert_eq!(d.stats.unmatched_responses, 1);
    assert_eq!(d.stats.unanswered_requests, 1);
}

#[test]
fn sasl_tokens_are_never_kept() {
    let mut d = Driver::with_parser(KafkaParser::new(&stream_config(4096)));
    let token = b"\0alice\0secret-password";
    let mut body = vec![(token.len() + 1) as u8];
    body.extend_from_slice(token);
    body.push(0);
    d.seg(OUT, &request(36, 2, 3, &body));
    d.seg(
        IN,
        &frame(&[0, 0, 0, 3, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0]),
    );
    let c = &d.calls[0];
    assert_eq!(c.resource, "sasl_authenticate");
    assert_eq!(c.status_text.as_deref(), Some("ok"));
    let shown = format!("{c:?}");
    assert!(!shown.contains("password"), "{shown}");
    assert!(!String::from_utf8_lossy(&c.req_head.bytes).contains("alice"));
}

#[test]
fn never_panics_on_any_bytes() {
    let mut rng = crate::xorshift::XorShift(45);
    for _ in 0..2000 {
        let mut d = driver();
        for _ in 0..6 {
            let n = (rng.next() % 40) as usize;
            let mut b: Vec<u8> = (0..n).map(|_| rng.next() as u8).collect();
            if rng.next().is_multiple_of(2) && b.len() >= 4 {
                b[0] = 0;
                b[1] = 0;
            }
            let dir = if rng.next().is_multiple_of(2) {
                OUT
            } else {
                IN
            };
            d.seg(dir, &b);
        }
        d.close();
    }
}

#[test]
fn a_topic_id_never_named_shows_as_kafka_prints_it() {
    let mut d = driver();
    // Produce v13: transactional_id null, acks 1, timeout, one topic by id, no partitions.
    let mut body = vec![0, 0, 1, 0, 0, 0x75, 0x30, 2];
    body.extend_from_slice(&[0xee; 16]);
    body.extend_from_slice(&[1, 0, 0]);
    d.seg(OUT, &request(0, 13, 1, &body));
    // Response: one topic (the id), no partitions, throttle, tags.
    let mut resp = vec![0, 0, 0, 1, 0, 2];
    resp.extend_from_slice(&[0xee; 16]);
    resp.extend_from_slice(&[1, 0, 0, 0, 0, 0, 0, 0]);
    d.seg(IN, &frame(&resp));
    let c = &d.calls[0];
    assert_eq!(
        c.resource,
        format!("produce {}", wire::topic_id_text(&[0xee; 16]))
    );
    assert_eq!(c.status_text.as_deref(), Some("ok"));
    assert_eq!(d.detail(0, "acks"), Some("1"));
}

#[test]
fn topic_ids_are_named_from_a_metadata_response_on_another_connection() {
    let id = [0x5a; 16];
    let mut d = driver();
    // Metadata v12 request for "named-by-id"; response: throttle, no brokers, cluster id
    // null, controller, one topic (error 0, name, id, internal, no partitions, authorized
    // operations, tags), tags.
    d.seg(OUT, &request(3, 12, 1, &[1, 0, 0, 0, 0]));
    let mut resp = vec![0, 0, 0, 1, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 1, 2, 0, 0];
    resp.extend_from_slice(&[12]);
    resp.extend_from_slice(b"named-by-id");
    resp.extend_from_slice(&id);
    resp.extend_from_slice(&[0, 1, 0, 0, 0, 0, 0, 0]);
    d.seg(IN, &frame(&resp));
    assert_eq!(d.calls[0].resource, "metadata named-by-id");
    // Another connection's Fetch v18 by that id.
    let mut other = driver();
    // max_wait_ms 500, min_bytes 1, max_bytes, isolation, session id and epoch, one topic.
    let mut body = vec![
        0, 0, 1, 0xf4, 0, 0, 0, 1, 0, 0x32, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2,
    ];
    body.extend_from_slice(&id);
    body.extend_from_slice(&[1, 0, 1, 1, 0]);
    other.seg(OUT, &request(1, 18, 9, &body));
    other.seg(
        IN,
        &frame(&[0, 0, 0, 9, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0]),
    );
    assert_eq!(other.calls[0].resource, "fetch named-by-id");
    assert_eq!(other.detail(0, "max_wait_ms"), Some("500"));
    assert_eq!(other.calls[0].status_text.as_deref(), Some("ok"));
}

#[test]
fn a_walked_api_in_a_version_past_those_known_is_not_misread() {
    let mut d = driver();
    // "Produce v14": whatever its fields are, neither topics nor codes are read from them.
    d.seg(
        OUT,
        &request(0, 14, 1, &[0, 0, 1, 0, 0, 0x75, 0x30, 2, 1, 2, 3]),
    );
    d.seg(IN, &frame(&[0, 0, 0, 1, 0, 2, 0, 0, 0, 0, 0, 0, 0, 0]));
    let c = &d.calls[0];
    assert_eq!(
        (c.method.as_str(), c.resource.as_str()),
        ("produce", "produce")
    );
    assert_eq!(c.version, "14");
    assert_eq!(c.outcome, Outcome::Unknown);
    assert_eq!(c.status_text, None);
}

/// A broker's side of a producer's connection older than ebtop, at saturation: the first read
/// seen is a request's body without its length, then each request comes as a length read
/// alone (16 KiB batches, far above a connection's first requests) and its body. The parser
/// picks up at the next length, takes the roles from the message it frames, and pairs the
/// rest; the response naming the request it never saw is unmatched.
#[test]
fn an_old_connection_is_picked_up_at_a_large_length_read_alone() {
    for start_corr in [70_000, 14_206] {
        let mut d = driver();
        let first = request(0, 9, start_corr, &[7u8; 16_000]);
        d.seg(IN, &first[4..]);
        let mut resp = start_corr.to_be_bytes().to_vec();
        resp.extend_from_slice(&[0, 0, 0, 0]);
        d.seg(OUT, &frame(&resp));
        for corr in start_corr + 1..start_corr + 4 {
            let req = request(0, 9, corr, &[7u8; 16_000]);
            d.seg(IN, &req[..4]).seg(IN, &req[4..]);
            let mut resp = corr.to_be_bytes().to_vec();
            resp.extend_from_slice(&[0, 0, 0, 0]);
            d.seg(OUT, &frame(&resp));
        }
        d.close();
        assert_eq!(d.calls.len(), 3, "{start_corr}: {:?}", d.stats);
        assert!(d
            .calls
            .iter()
            .all(|c| c.method == "produce" && c.request_dir == IN));
    }
}
