//! The HTTP/1 parser driven as a connection would drive it, on real clients' and servers' bytes.

use super::*;
use crate::protocols::test_driver::stream_config;
use crate::protocols::HeadSecrets;

const OUT: Direction = Direction::Egress;
const IN: Direction = Direction::Ingress;

/// Drives a parser from the client's point of view with a fake clock (1 µs per syscall).
type Driver = crate::protocols::test_driver::Driver<Http1Parser>;

impl Driver {
    fn new() -> Self {
        Driver::keeping(0)
    }
    fn keeping(keep_head: usize) -> Self {
        Driver::with_parser(Http1Parser::new(&stream_config(keep_head)))
    }
    fn summary(&self) -> Vec<(String, String, Option<u32>, u64, u64)> {
        self.calls
            .iter()
            .map(|c| {
                (
                    c.method.clone(),
                    c.resource.clone(),
                    c.status,
                    c.req.bytes,
                    c.resp.bytes,
                )
            })
            .collect()
    }
}

fn call(m: &str, r: &str, s: u32, req: u64, resp: u64) -> (String, String, Option<u32>, u64, u64) {
    (m.into(), r.into(), Some(s), req, resp)
}

const REQ_A: &[u8] = b"GET /a HTTP/1.1\r\nHost: x\r\n\r\n";
const RESP_OK: &[u8] = b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello";

#[test]
fn lengths_near_2_to_the_64_saturate_the_counts() {
    let mut d = Driver::new();
    // Out of sync twice by (almost) 2^64 bytes, then a close-delimited body as long.
    d.seg_cut(OUT, b"", u64::MAX).seg_cut(OUT, b"", u64::MAX);
    d.seg(OUT, b"GET / HTTP/1.0\r\n\r\n");
    d.seg(IN, b"HTTP/1.0 200 OK\r\n\r\n")
        .seg_cut(IN, b"x", u64::MAX);
    d.seg_cut(IN, b"", u64::MAX).close();
    assert_eq!(d.stats.unparsed_bytes, u64::MAX);
    assert_eq!(d.calls.len(), 1);
    assert_eq!(d.calls[0].resp.bytes, u64::MAX);
}

#[test]
fn keep_alive_calls_pair_in_order_with_exact_bytes_and_timing() {
    let mut d = Driver::new();
    d.seg(OUT, REQ_A).seg(IN, RESP_OK);
    d.seg(OUT, b"GET /b HTTP/1.1\r\n\r\n")
        .seg(IN, b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n");
    assert_eq!(
        d.summary(),
        vec![
            call("GET", "/a", 200, REQ_A.len() as u64, RESP_OK.len() as u64),
            call("GET", "/b", 404, 19, 45)
        ]
    );
    let c = &d.calls[0];
    assert_eq!(c.request_dir, OUT);
    assert_eq!((c.req.first_start_ns, c.resp.last_end_ns), (1000, 2500));
    assert_eq!(c.details, vec![("host", "x".to_string())]);
    assert_eq!(d.calls[1].outcome, Outcome::ClientError);
    assert_eq!(d.stats, ParseStats::default());
}

#[test]
fn pipelined_requests_in_one_syscall() {
    let mut d = Driver::new();
    let reqs = b"GET /1 HTTP/1.1\r\n\r\nGET /2 HTTP/1.1\r\n\r\nGET /3 HTTP/1.1\r\n\r\n";
    d.seg(IN, reqs);
    let mut resps = Vec::new();
    for body in ["one", "two", "three"] {
        resps.extend_from_slice(
            format!(
                "HTTP/1.1 200 OK\r\nContent-Length: {}\r\n\r\n{body}",
                body.len()
            )
            .as_bytes(),
        );
    }
    d.seg(OUT, &resps[..50]).seg(OUT, &resps[50..]);
    let got: Vec<_> = d.calls.iter().map(|c| c.resource.as_str()).collect();
    assert_eq!(got, ["/1", "/2", "/3"]);
    assert!(d
        .calls
        .iter()
        .all(|c| c.request_dir == IN && c.status == Some(200)));
    let total: u64 = d.calls.iter().map(|c| c.resp.bytes).sum();
    assert_eq!(total, resps.len() as u64);
    assert_eq!(
        d.calls.iter().map(|c| c.req.bytes).sum::<u64>(),
        reqs.len() as u64
    );
}

#[test]
fn headers_split_byte_by_byte() {
    let mut d = Driver::new();
    for b in REQ_A.chunks(1) {
        d.seg(OUT, b);
    }
    for b in RESP_OK.chunks(3) {
        d.seg(IN, b);
    }
    assert_eq!(d.summary(), vec![call("GET", "/a", 200, 28, 43)]);
    assert_eq!(d.calls[0].req.syscalls, REQ_A.len() as u32);
    assert_eq!(d.calls[0].resp.syscalls, RESP_OK.len().div_ceil(3) as u32);
}

#[test]
fn chunked_response_over_several_syscalls_with_split_size_lines() {
    let mut d = Driver::new();
    d.seg(OUT, REQ_A);
    let resp: &[u8] = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5;ext=1\r\nhello\r\n1A\r\nabcdefghijklmnopqrstuvwxyz\r\n0\r\nX-Trailer: t\r\n\r\n";
    for cut in [[10usize, 60], [48, 49], [70, 95]] {
        let mut d = Driver::new();
        d.seg(OUT, REQ_A);
        d.seg(IN, &resp[..cut[0]])
            .seg(IN, &resp[cut[0]..cut[1]])
            .seg(IN, &resp[cut[1]..]);
        assert_eq!(
            d.summary(),
            vec![call("GET", "/a", 200, 28, resp.len() as u64)],
            "cut {cut:?}"
        );
    }
    d.seg(IN, resp);
    assert_eq!(d.calls.len(), 1);
}

#[test]
fn chunked_request_body() {
    let mut d = Driver::new();
    let req: &[u8] =
        b"POST /up HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n";
    d.seg(OUT, &req[..30]).seg(OUT, &req[30..]).seg(IN, RESP_OK);
    assert_eq!(
        d.summary(),
        vec![call("POST", "/up", 200, req.len() as u64, 43)]
    );
}

#[test]
fn body_beyond_snaplen_is_skipped_by_count() {
    let mut d = Driver::new();
    d.seg(OUT, REQ_A);
    let head = b"HTTP/1.1 200 OK\r\nContent-Length: 100000\r\n\r\n";
    let mut first = head.to_vec();
    first.resize(4096, b'x');
    // One syscall moved 60000 bytes, 4096 captured; a second moved the rest, 100 captured.
    let rest = head.len() as u64 + 100_000 - 60_000;
    d.seg_cut(IN, &first, 60_000)
        .seg_cut(IN, &[b'x'; 100], rest);
    d.seg(OUT, REQ_A).seg(IN, RESP_OK);
    assert_eq!(
        d.summary(),
        vec![
            call("GET", "/a", 200, 28, head.len() as u64 + 100_000),
            call("GET", "/a", 200, 28, 43)
        ]
    );
    assert!(d.calls[0].truncated);
    assert_eq!(d.stats, ParseStats::default());
}

#[test]
fn sendfile_body_with_no_captured_bytes() {
    let mut d = Driver::new();
    d.seg(IN, REQ_A);
    let head = b"HTTP/1.1 200 OK\r\nContent-Length: 300000\r\n\r\n";
    d.seg(OUT, head).seg_cut(OUT, b"", 300_000);
    assert_eq!(
        d.summary(),
        vec![call("GET", "/a", 200, 28, head.len() as u64 + 300_000)]
    );
    assert_eq!(d.calls[0].resp.syscalls, 2);
}

#[test]
fn head_204_304_have_no_body() {
    let mut d = Driver::new();
    d.seg(OUT, b"HEAD / HTTP/1.1\r\n\r\n")
        .seg(IN, b"HTTP/1.1 200 OK\r\nContent-Length: 612\r\n\r\n");
    d.seg(OUT, b"GET /n HTTP/1.1\r\n\r\n")
        .seg(IN, b"HTTP/1.1 204 No Content\r\n\r\n");
    d.seg(OUT, b"GET /c HTTP/1.1\r\nIf-None-Match: \"x\"\r\n\r\n")
        .seg(
            IN,
            b"HTTP/1.1 304 Not Modified\r\nContent-Length: 612\r\n\r\n",
        );
    d.seg(OUT, REQ_A).seg(IN, RESP_OK);
    let st: Vec<_> = d.calls.iter().map(|c| c.status.unwrap()).collect();
    assert_eq!(st, [200, 204, 304, 200]);
}

#[test]
fn expect_100_continue_counts_interim_bytes_and_keeps_final_status() {
    let mut d = Driver::new();
    d.seg(
        OUT,
        b"POST /u HTTP/1.1\r\nContent-Length: 4\r\nExpect: 100-continue\r\n\r\n",
    );
    d.seg(IN, b"HTTP/1.1 100 Continue\r\n\r\n");
    d.seg(OUT, b"data");
    d.seg(IN, b"HTTP/1.1 201 Created\r\nContent-Length: 0\r\n\r\n");
    assert_eq!(d.calls.len(), 1);
    let c = &d.calls[0];
    assert_eq!(c.status, Some(201));
    let interim = b"HTTP/1.1 100 Continue\r\n\r\n".len() as u64;
    let fin = b"HTTP/1.1 201 Created\r\nContent-Length: 0\r\n\r\n".len() as u64;
    assert_eq!(c.resp.bytes, interim + fin);
    let head = b"POST /u HTTP/1.1\r\nContent-Length: 4\r\nExpect: 100-continue\r\n\r\n";
    assert_eq!(c.req.bytes, head.len() as u64 + 4);
}

#[test]
fn http10_response_ends_at_close() {
    let mut d = Driver::new();
    d.seg(OUT, b"GET / HTTP/1.0\r\n\r\n")
        .seg(IN, b"HTTP/1.0 200 OK\r\nServer: x\r\n\r\n")
        .seg(IN, b"body bytes");
    assert!(d.calls.is_empty());
    d.close();
    assert_eq!(d.summary(), vec![call("GET", "/", 200, 18, 40)]);
    assert_eq!(d.calls[0].version, "1.0");
    assert!(!d.calls[0].end_inferred);
}

#[test]
fn chunked_framing_lost_to_snaplen_ends_at_next_request() {
    let mut d = Driver::new();
    d.seg(OUT, REQ_A);
    let mut big = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2000\r\n".to_vec();
    big.resize(4096, b'y');
    d.seg_cut(IN, &big, 9000).seg_cut(IN, b"12", 5000);
    assert!(d.calls.is_empty());
    d.seg(OUT, REQ_A);
    assert_eq!(d.calls.len(), 1);
    assert!(d.calls[0].end_inferred && d.calls[0].truncated);
    assert_eq!(d.calls[0].resp.bytes, 14000);
    d.seg(IN, RESP_OK);
    assert_eq!(d.calls.len(), 2);
    assert!(!d.calls[1].end_inferred);
    assert_eq!(d.stats.inferred_ends, 1);
}

#[test]
fn gap_inside_body_keeps_call_gap_elsewhere_damages() {
    let mut d = Driver::new();
    d.seg(OUT, REQ_A)
        .seg(IN, b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nab");
    d.p.on_gap(IN, Some(3), &mut d.stats);
    d.seg(IN, b"cdefg");
    assert_eq!(d.calls.len(), 1);
    let head = b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\n".len() as u64;
    assert_eq!(d.calls[0].resp.bytes, head + 10);

    // A lost record at a message boundary may hide a whole message: nothing is invented.
    d.seg(OUT, REQ_A);
    d.p.on_gap(IN, Some(43), &mut d.stats);
    d.seg(IN, RESP_OK);
    d.seg(OUT, REQ_A).seg(IN, RESP_OK);
    assert_eq!(d.calls.len(), 2, "only the call after resync");
    // The request before the gap is damaged; its response, seen after resync, is counted
    // as unmatched rather than paired with the next request.
    assert_eq!(d.stats.damaged_messages, 1);
    assert_eq!(d.stats.unmatched_responses, 1);
    d.close();
    assert_eq!(d.stats.unmatched_responses, 1);
}

#[test]
fn response_record_before_its_request_record_still_pairs() {
    let mut d = Driver::new();
    d.now = 10_000;
    // The response's record arrives first but happened after the request started.
    d.seg(IN, RESP_OK);
    d.now = 5_000;
    d.seg(OUT, REQ_A);
    assert_eq!(d.calls.len(), 1);
    // A response older than the next request (ebtop started mid-call) is not paired.
    let mut d = Driver::new();
    d.seg(IN, RESP_OK);
    d.seg(OUT, REQ_A);
    assert!(d.calls.is_empty());
    assert_eq!(d.stats.unmatched_responses, 1);
}

#[test]
fn upgrade_switches_to_tunnel() {
    let mut d = Driver::new();
    d.seg(
        OUT,
        b"GET /ws HTTP/1.1\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n",
    )
    .seg(
        IN,
        b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\n\r\n",
    )
    .seg(OUT, b"\x81\x05hello")
    .seg(IN, b"GET / HTTP/1.1\r\n\r\n");
    assert_eq!(d.calls.len(), 1);
    assert_eq!(d.calls[0].status, Some(101));
    assert_eq!(d.stats, ParseStats::default());
}

/// An HTTP/2 frame: 9-byte header and payload.
fn h2_frame(ty: u8, flags: u8, stream: u32, payload: &[u8]) -> Vec<u8> {
    let mut f = (payload.len() as u32).to_be_bytes()[1..].to_vec();
    f.extend([ty, flags]);
    f.extend(stream.to_be_bytes());
    f.extend(payload);
    f
}

#[test]
fn agreed_h2c_upgrade_hands_the_connection_to_http2() {
    // curl --http2 http://127.0.0.1:18080/index.html (curl 7.88), answered as RFC 7540
    // §3.2 says: 101, then the server's SETTINGS and the answer on stream 1 (`:status 200`
    // from the static table, 0x88), in one syscall.
    const REQ: &[u8] = b"GET /index.html HTTP/1.1\r\nHost: 127.0.0.1:18080\r\n\
User-Agent: curl/7.88.1\r\nAccept: */*\r\nConnection: Upgrade, HTTP2-Settings\r\n\
Upgrade: h2c\r\nHTTP2-Settings: AAMAAABkAAQCAAAAAAIAAAAA\r\n\r\n";
    let (headers, data, settings) = (1, 0, 4);
    let (end_stream, end_headers, ack) = (1, 4, 1);
    let mut answer =
        b"HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: h2c\r\n\r\n".to_vec();
    answer.extend(h2_frame(settings, 0, 0, &[]));
    answer.extend(h2_frame(headers, end_headers, 1, &[0x88]));
    answer.extend(h2_frame(data, end_stream, 1, b"hello\n"));
    let mut preface = crate::protocols::http2::PREFACE.to_vec();
    preface.extend(h2_frame(settings, 0, 0, &[]));
    preface.extend(h2_frame(settings, ack, 0, &[]));
    // GET http://…/ on stream 3: :method GET, :scheme http, :path /, :authority literal.
    let mut block = vec![0x82, 0x86, 0x84, 0x01, 15];
    block.extend(b"127.0.0.1:18080");
    let request = h2_frame(headers, end_headers | end_stream, 3, &block);
    let mut reply = h2_frame(headers, end_headers, 3, &[0x88]);
    reply.extend(h2_frame(data, end_stream, 3, b"root\n"));
    let mut d = Driver::new();
    d.seg(OUT, REQ)
        .seg(IN, &answer)
        .seg(OUT, &preface)
        .seg(IN, &h2_frame(settings, ack, 0, &[]))
        .seg(OUT, &request)
        .seg(IN, &reply)
        .close();
    let calls: Vec<_> = d
        .calls
        .iter()
        .map(|c| (c.proto, c.method.as_str(), c.resource.as_str(), c.status))
        .collect();
    assert_eq!(
        calls,
        [
            (Protocol::Http2, "GET", "/index.html", Some(200)),
            (Protocol::Http2, "GET", "/", Some(200)),
        ],
        "the upgrade request is stream 1's call, the 101 none of its own"
    );
    // Stream 1's request is the HTTP/1.1 one (no body: its head, as HTTP/1 counts it); its
    // response the HTTP/2 frames on the wire (HEADERS 9 + 1, DATA 9 + 6).
    assert_eq!(
        (d.calls[0].req.bytes, d.calls[0].resp.bytes),
        (REQ.len() as u64, 10 + 15)
    );
    assert_eq!(
        d.calls[0].req.first_start_ns, 1000,
        "from the HTTP/1.1 request"
    );
    assert_eq!(d.stats, ParseStats::default());
}

#[test]
fn h2c_upgrade_the_server_declines_stays_http1() {
    // The server answers in HTTP/1.1 (it ignores the Upgrade header): no hand-over.
    let mut d = Driver::new();
    d.seg(
        OUT,
        b"GET /a HTTP/1.1\r\nConnection: Upgrade, HTTP2-Settings\r\nUpgrade: h2c\r\n\r\n",
    )
    .seg(IN, b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
    .seg(OUT, b"GET /b HTTP/1.1\r\n\r\n")
    .seg(IN, b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n");
    let calls: Vec<_> = d.calls.iter().map(|c| (c.proto, c.status)).collect();
    assert_eq!(
        calls,
        [(Protocol::Http, Some(200)), (Protocol::Http, Some(404))]
    );
    // A 101 to another protocol (websocket) for an h2c request is a tunnel, as before.
    let mut d = Driver::new();
    d.seg(OUT, b"GET /ws HTTP/1.1\r\nUpgrade: h2c, websocket\r\n\r\n")
        .seg(
            IN,
            b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\n\r\n",
        )
        .seg(OUT, b"\x81\x05hello");
    assert_eq!(d.calls.len(), 1);
    assert_eq!(d.calls[0].status, Some(101));
}

#[test]
fn garbage_never_panics_and_makes_no_calls() {
    let mut d = Driver::new();
    d.seg(OUT, b"GET / HTTP/1.1\r\nBad Header Line\x00\r\n\r\n");
    d.seg(IN, b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03");
    d.seg(OUT, b"POST / HTTP/1.1\r\nContent-Length: -5\r\n\r\n");
    d.seg(
        IN,
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nZZ\r\n",
    );
    d.close();
    assert!(d.calls.is_empty());
    assert!(d.stats.damaged_messages >= 2);
}

#[test]
fn oversized_header_block_is_damaged_not_buffered_forever() {
    let mut d = Driver::new();
    d.seg(OUT, b"GET / HTTP/1.1\r\n");
    let filler = vec![b'a'; 8192];
    for _ in 0..10 {
        d.seg(OUT, b"X-Long: ").seg(OUT, &filler).seg(OUT, b"\r\n");
    }
    assert!(d.p.dirs[0].hdr_buf.len() <= MAX_HEADER_BYTES);
    assert_eq!(d.stats.damaged_messages, 1);
    d.seg(OUT, REQ_A).seg(IN, RESP_OK);
    assert_eq!(d.calls.len(), 1);
}

#[test]
fn detects_message_starts() {
    assert!(is_message_start(b"GET / HTTP/1.1"));
    assert!(is_message_start(b"HTTP/1.0 200"));
    assert!(!is_message_start(b"\x16\x03\x01"));
    assert!(is_message_start(b"OPTIONS * HTTP/1.1"));
    assert!(is_message_start(b"GET http://example.com/ HTTP/1.1"));
    assert!(is_message_start(b"CONNECT example.com:443 HTTP/1.1"));
    // A Redis inline command typed by hand.
    assert!(!is_message_start(b"GET user:1\r\n"));
    assert!(!is_message_start(b"GETX"));
}

#[test]
fn heads_are_kept_cut_and_redacted_when_asked() {
    let req =
        b"GET /a HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer s3cr3t\r\nCookie: id=42\r\n\r\n";
    let resp = b"HTTP/1.1 200 OK\r\nSet-Cookie: sid=abc\r\nContent-Length: 2\r\n\r\nok";
    let mut d = Driver::keeping(4096);
    d.seg(OUT, req).seg(IN, resp);
    let c = &d.calls[0];
    let text = String::from_utf8_lossy(&c.req_head.shown()).into_owned();
    assert!(text.starts_with("GET /a HTTP/1.1\r\nHost: x\r\n"), "{text}");
    assert!(
        !text.contains("s3cr3t") && !text.contains("id=42"),
        "{text}"
    );
    assert!(
        text.contains("Authorization: [redacted, 13 bytes]"),
        "{text}"
    );
    assert_eq!(c.req_head.len, req.len() as u64);
    let text = String::from_utf8_lossy(&c.resp_head.shown()).into_owned();
    assert!(
        text.contains("Set-Cookie: [redacted") && !text.contains("abc"),
        "{text}"
    );
    assert!(
        text.ends_with("\r\n\r\n"),
        "the body is not part of the head: {text}"
    );
    // Cut at the limit; nothing kept by default.
    let mut d = Driver::keeping(10);
    d.seg(OUT, req).seg(IN, resp);
    assert_eq!(d.calls[0].req_head.bytes, b"GET /a HTT");
    let mut d = Driver::new();
    d.seg(OUT, req).seg(IN, resp);
    assert!(d.calls[0].req_head.bytes.is_empty() && d.calls[0].req_head.len == 0);
}

#[test]
fn secret_query_values_never_reach_the_resource_or_the_head() {
    let req = b"GET /oauth/cb?code=AbC123&state=ok HTTP/1.1\r\nHost: x\r\n\r\n";
    let resp = b"HTTP/1.1 302 Found\r\nContent-Length: 0\r\n\r\n";
    for mut d in [Driver::keeping(4096), Driver::new()] {
        d.seg(OUT, req).seg(IN, resp);
        let c = &d.calls[0];
        assert_eq!(c.resource, "/oauth/cb?code=[redacted]&state=ok");
        let head = String::from_utf8_lossy(&c.req_head.shown()).into_owned();
        assert!(!head.contains("AbC123"), "{head}");
    }
    let mut d = Driver::keeping(4096);
    d.seg(OUT, req).seg(IN, resp);
    let head = &d.calls[0].req_head;
    assert!(head
        .shown()
        .starts_with(b"GET /oauth/cb?code=[redacted]&state=ok HTTP/1.1\r\nHost: x\r\n"));
    // Kept as sent, redacted when shown: nothing else reads a head.
    assert_eq!(head.secrets, HeadSecrets::Http1);
    assert!(head.bytes.starts_with(b"GET /oauth/cb?code=AbC123"));
}

#[test]
fn a_head_cut_inside_a_urls_credentials_shows_none_of_them() {
    // The cut falls between the password and the `@` that makes it one.
    let req = b"GET http://bob:s3cr3t@x/ HTTP/1.1\r\nHost: x\r\n\
            Referer: https://alice:hunter2@x/\r\n\r\n";
    let resp = b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n";
    let text = |c: &L7Call| String::from_utf8_lossy(&c.req_head.shown()).into_owned();
    let referer = req.windows(5).position(|w| w == b"@x/\r\n").unwrap();
    for keep in [20, referer - 1, referer] {
        let mut d = Driver::keeping(keep);
        d.seg(OUT, req).seg(IN, resp);
        let head = text(&d.calls[0]);
        assert!(
            !head.contains("s3cr3t") && !head.contains("hunter2"),
            "{keep}: {head}"
        );
        assert!(head.len() <= keep, "{keep}: {head}");
    }
    // Whole, it is kept as sent and redacted when shown.
    let mut d = Driver::keeping(4096);
    d.seg(OUT, req).seg(IN, resp);
    assert_eq!(d.calls[0].req_head.secrets, HeadSecrets::Http1);
    let head = text(&d.calls[0]);
    assert!(
        head.contains("Referer: https://alice:[redacted]@x/"),
        "{head}"
    );
    assert!(!head.contains("s3cr3t"), "{head}");
}

#[test]
fn urls_in_header_values_and_secret_looking_headers_are_redacted_in_heads() {
    let req = b"GET /next HTTP/1.1\r\nHost: x\r\nReferer: https://x/cb?token=Tok1&page=2\r\n\
            X-CSRF-Token: Csrf2\r\nX-Goog-Api-Key: Key3\r\nKeep-Alive: timeout=5\r\n\
            X-Original-URL: /admin?api_key=Key4\r\n\r\n";
    let resp = b"HTTP/1.1 302 Found\r\nLocation: /login?user=ann&password=Pw5\r\n\
            Content-Location: /r#access_token=Tok6&state=s\r\nRefresh: 0; url=/x?sig=Sig7\r\n\
            Link: <https://x/?page=3&session=Ses8>; rel=\"next\"\r\nContent-Length: 0\r\n\r\n";
    let mut d = Driver::keeping(4096);
    d.seg(OUT, req).seg(IN, resp);
    let c = &d.calls[0];
    let head = String::from_utf8_lossy(&c.req_head.shown()).into_owned()
        + &String::from_utf8_lossy(&c.resp_head.shown());
    for secret in [
        "Tok1", "Csrf2", "Key3", "Key4", "Pw5", "Tok6", "Sig7", "Ses8",
    ] {
        assert!(!head.contains(secret), "{secret} in {head}");
    }
    for kept in [
        "Referer: https://x/cb?token=[redacted]&page=2\r\n",
        "X-CSRF-Token: [redacted, 5 bytes]\r\n",
        "X-Goog-Api-Key: [redacted, 4 bytes]\r\n",
        "Keep-Alive: timeout=5\r\n",
        "X-Original-URL: /admin?api_key=[redacted]\r\n",
        "Location: /login?user=ann&password=[redacted]\r\n",
        "Content-Location: /r#access_token=[redacted]&state=s\r\n",
        "Refresh: 0; url=/x?sig=[redacted]\r\n",
        "Link: <https://x/?page=3&session=[redacted]>; rel=\"next\"\r\n",
    ] {
        assert!(head.contains(kept), "{kept:?} not in {head}");
    }
    assert!(head.ends_with("Content-Length: 0\r\n\r\n"), "{head}");
    assert_eq!(c.req_head.len, req.len() as u64);
}

#[test]
fn each_messages_own_version_when_they_differ() {
    let mut d = Driver::new();
    d.seg(OUT, b"GET / HTTP/1.1\r\nHost: h\r\n\r\n")
        .seg(IN, b"HTTP/1.0 200 OK\r\nContent-Length: 2\r\n\r\nok");
    let c = &d.calls[0];
    assert_eq!(c.version, "1.0");
    let detail = |k: &str| {
        c.details
            .iter()
            .find(|(n, _)| *n == k)
            .map(|(_, v)| v.as_str())
    };
    assert_eq!(detail("request_version"), Some("1.1"));
    assert_eq!(detail("response_version"), Some("1.0"));
    let mut d = Driver::new();
    d.seg(OUT, b"GET / HTTP/1.1\r\n\r\n")
        .seg(IN, b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n");
    assert!(d.calls[0]
        .details
        .iter()
        .all(|(n, _)| !n.ends_with("_version")));
}

/// A pipeline far deeper than the connection's own depth pairs exactly: the deeper requests
/// draw on the shared budget (issue 43: depth follows memory).
#[test]
fn a_pipeline_ten_times_the_depth_pairs_exactly() {
    let mut d = Driver::new();
    let n = MAX_PENDING * 10;
    let reqs: Vec<u8> = (0..n)
        .flat_map(|i| format!("GET /{i} HTTP/1.1\r\nHost: x\r\n\r\n").into_bytes())
        .collect();
    for chunk in reqs.chunks(6000) {
        d.seg(OUT, chunk);
    }
    let status = |i: usize| if i.is_multiple_of(3) { 404 } else { 200 };
    let resps: Vec<u8> = (0..n)
        .flat_map(|i| format!("HTTP/1.1 {} X\r\nContent-Length: 0\r\n\r\n", status(i)).into_bytes())
        .collect();
    for chunk in resps.chunks(9000) {
        d.seg(IN, chunk);
    }
    assert_eq!(d.calls.len(), n);
    for (i, c) in d.calls.iter().enumerate() {
        assert_eq!(
            (c.resource.as_str(), c.status),
            (&*format!("/{i}"), Some(status(i)))
        );
    }
    assert_eq!(d.stats.pending_dropped, 0);
}

/// With the depth and the shared budget spent, the oldest requests are dropped and counted,
/// and their answers — which come first, a HEAD's without its body — pair with no other
/// request: the requests kept get their own answers.
#[test]
fn dropped_requests_answers_pair_with_no_other_request() {
    static NO_BUDGET: crate::protocols::matching::SharedBudget =
        crate::protocols::matching::SharedBudget::new(0);
    let mut d = Driver::new();
    d.p.pending = InOrder::with_budget(4, &NO_BUDGET);
    let method = |i: usize| if i == 1 { "HEAD" } else { "GET" };
    for i in 0..10 {
        d.seg(
            OUT,
            format!("{} /{i} HTTP/1.1\r\n\r\n", method(i)).as_bytes(),
        );
    }
    for i in 0..10 {
        // A HEAD's answer names the length of the body it does not send.
        let body = if method(i) == "HEAD" { "" } else { "abc" };
        let head = format!("HTTP/1.1 {} X\r\nContent-Length: 3\r\n\r\n{body}", 400 + i);
        d.seg(IN, head.as_bytes());
    }
    let got: Vec<_> = d
        .calls
        .iter()
        .map(|c| (c.resource.clone(), c.status))
        .collect();
    let want: Vec<_> = (6..10)
        .map(|i| (format!("/{i}"), Some(400 + i as u32)))
        .collect();
    assert_eq!(got, want);
    assert_eq!(d.stats.pending_dropped, 6);
}

/// A chunked body in writes longer than the snaplen, each ending with a chunk's CRLF and the
/// last with the last chunk: the kernel's tails (each write's last bytes) continue the chunk
/// data counted past the unseen bytes, so the chunk framing stays exact and the last chunk
/// ends the response in the last write's tail (without tails, the framing goes out of sight
/// and the end is inferred at the next request).
#[test]
fn chunked_body_ends_exactly_in_the_last_writes_tail() {
    let chunk = |c: u8| [&b"4e20\r\n"[..], &[c; 20_000], b"\r\n"].concat();
    let head = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n".to_vec();
    let first = [head, chunk(b'a')].concat();
    let last = [chunk(b'b'), b"0\r\n\r\n".to_vec()].concat();
    let mut d = Driver::new();
    d.seg(OUT, REQ_A)
        .seg_snapped(IN, &first, 4096)
        .seg_snapped(IN, &last, 4096);
    assert_eq!(d.calls.len(), 1);
    let c = &d.calls[0];
    assert!(!c.end_inferred && c.truncated);
    assert_eq!(c.status, Some(200));
    assert_eq!(c.resp.bytes, (first.len() + last.len()) as u64);
    assert_eq!(c.resp.last_end_ns, d.now + 500);
    assert_eq!(d.stats.desyncs, 0);
    // The same writes without tails: the second chunk's size line goes unseen.
    let mut d = Driver::new();
    d.seg(OUT, REQ_A)
        .seg_cut(IN, &first[..4096], first.len() as u64)
        .seg_cut(IN, &last[..4096], last.len() as u64)
        .seg(OUT, REQ_A);
    assert!(d.calls[0].end_inferred);
}

/// A valid `traceparent` is kept (as the call's `traceparent` detail, for `--otlp` to join the
/// application's trace); an invalid one is not kept at all, and neither is it at shallow depth.
#[test]
fn a_valid_traceparent_header_is_kept_as_a_detail() {
    const TP: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
    let traceparent = |header: &str| {
        let mut d = Driver::new();
        let req = format!("GET /t HTTP/1.1\r\nHost: x\r\n{header}\r\n\r\n");
        d.seg(OUT, req.as_bytes()).seg(IN, RESP_OK);
        assert_eq!(d.calls.len(), 1);
        d.calls[0]
            .details
            .iter()
            .find(|(k, _)| *k == "traceparent")
            .map(|(_, v)| v.clone())
    };
    assert_eq!(
        traceparent(&format!("TraceParent: {TP}")).as_deref(),
        Some(TP)
    );
    // The first of two is the one taken.
    assert_eq!(
        traceparent(&format!(
            "traceparent: {TP}\r\ntraceparent: 00-11111111111111111111111111111111-2222222222222222-00"
        ))
        .as_deref(),
        Some(TP)
    );
    assert_eq!(traceparent("traceparent: 00-zz-00f067aa0ba902b7-01"), None);
    assert_eq!(
        traceparent(&format!("traceparent: {TP}{}", "x".repeat(4000))),
        None
    );
}

/// A connection seen from mid-stream (older than ebtop: wrk's keep-alive clients): its first
/// bytes answer a request sent before, held unpaired; the next request's turn is between
/// calls, so a CPU budget may still cut it (it never could: every such client of a busy
/// server stayed captured).
#[test]
fn an_answer_to_a_request_before_ebtop_leaves_no_call_under_way() {
    let mut d = Driver::new();
    d.seg(IN, RESP_OK)
        .seg(OUT, REQ_A)
        .seg(IN, RESP_OK)
        .seg(OUT, REQ_A)
        .seg(IN, RESP_OK);
    assert_eq!(d.calls.len(), 2);
    assert_eq!(d.p.request_direction(), Some(OUT));
}

/// Where a CPU budget may cut a connection (src/source/sampling.rs): the direction of its
/// requests while every call came alone; never once calls overlapped.
#[test]
fn a_turn_into_the_request_direction_starts_a_call_only_while_calls_came_alone() {
    let mut d = Driver::new();
    assert_eq!(d.p.request_direction(), None, "nothing seen yet");
    d.seg(OUT, REQ_A)
        .seg(IN, RESP_OK)
        .seg(OUT, REQ_A)
        .seg(IN, RESP_OK);
    assert_eq!(
        d.p.request_direction(),
        Some(OUT),
        "client, one call at a time"
    );
    // The server's side of the same traffic.
    let mut s = Driver::new();
    s.seg(IN, REQ_A).seg(OUT, RESP_OK).seg(IN, REQ_A);
    assert_eq!(s.p.request_direction(), Some(IN));

    // Pipelined: the second request goes out before the first response.
    let mut p = Driver::new();
    p.seg(OUT, REQ_A).seg(IN, &RESP_OK[..10]).seg(OUT, REQ_A);
    p.seg(IN, &RESP_OK[10..]).seg(IN, RESP_OK);
    assert_eq!(p.calls.len(), 2);
    assert_eq!(p.p.request_direction(), None, "pipelined");
    // Two requests in one segment: pipelining before any turn shows it.
    let mut b = Driver::new();
    b.seg(OUT, &[REQ_A, REQ_A].concat());
    assert_eq!(b.p.request_direction(), None, "two requests at once");
    let mut bs = Driver::new();
    bs.seg(IN, &[REQ_A, REQ_A].concat()).seg(OUT, RESP_OK);
    assert_eq!(
        bs.p.request_direction(),
        None,
        "a server reading two at once"
    );

    // A body after `100 Continue`: a turn into the request direction inside a call.
    let mut c = Driver::new();
    c.seg(
        OUT,
        b"POST /u HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\nContent-Length: 3\r\n\r\n",
    )
    .seg(IN, b"HTTP/1.1 100 Continue\r\n\r\n")
    .seg(OUT, b"abc")
    .seg(IN, RESP_OK);
    assert_eq!(c.calls.len(), 1);
    assert_eq!(c.p.request_direction(), None, "100 Continue");

    // Lost bytes hide turns.
    let mut g = Driver::new();
    g.seg(OUT, REQ_A)
        .seg(IN, RESP_OK)
        .gap(IN, Some(10))
        .seg(OUT, REQ_A);
    assert_eq!(g.p.request_direction(), None, "after a gap");
}
