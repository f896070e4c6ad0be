//! The MongoDB parser on frames in the shapes real clients and servers send: OP_COMPRESSED
//! (snappy, zlib, zstd) built from the OP_MSGs pymongo sent in the captured fixture, moreToCome
//! requests (pymongo's `w=0`), exhaust replies (moreToCome chains), awaitable hello, a header
//! read apart from its body, and hostile bytes.

use super::*;
use crate::protocols::test_driver::stream_config;

const OUT: Direction = Direction::Egress;
const IN: Direction = Direction::Ingress;

type Driver = crate::protocols::test_driver::Driver<MongoParser>;

fn driver() -> Driver {
    Driver::with_parser(MongoParser::new(&stream_config(0)))
}

/// A tiny BSON writer for the tests.
#[derive(Default)]
struct Doc(Vec<u8>);

impl Doc {
    fn str(mut self, k: &str, v: &str) -> Self {
        self.key(0x02, k);
        self.0
            .extend_from_slice(&((v.len() + 1) as i32).to_le_bytes());
        self.0.extend_from_slice(v.as_bytes());
        self.0.push(0);
        self
    }
    fn f64(mut self, k: &str, v: f64) -> Self {
        self.key(0x01, k);
        self.0.extend_from_slice(&v.to_le_bytes());
        self
    }
    fn i32(mut self, k: &str, v: i32) -> Self {
        self.key(0x10, k);
        self.0.extend_from_slice(&v.to_le_bytes());
        self
    }
    fn i64(mut self, k: &str, v: i64) -> Self {
        self.key(0x12, k);
        self.0.extend_from_slice(&v.to_le_bytes());
        self
    }
    fn doc(mut self, k: &str, d: Doc) -> Self {
        self.key(0x03, k);
        self.0.extend_from_slice(&d.end());
        self
    }
    fn arr(mut self, k: &str, items: Vec<Doc>) -> Self {
        let mut a = Doc::default();
        for (i, d) in items.into_iter().enumerate() {
            a = a.doc(&i.to_string(), d);
        }
        self.key(0x04, k);
        self.0.extend_from_slice(&a.end());
        self
    }
    fn key(&mut self, ty: u8, k: &str) {
        self.0.push(ty);
        self.0.extend_from_slice(k.as_bytes());
        self.0.push(0);
    }
    fn end(self) -> Vec<u8> {
        let mut v = ((self.0.len() + 5) as i32).to_le_bytes().to_vec();
        v.extend_from_slice(&self.0);
        v.push(0);
        v
    }
}

fn message(request_id: i32, response_to: i32, opcode: i32, body: &[u8]) -> Vec<u8> {
    let mut m = ((body.len() + 16) as i32).to_le_bytes().to_vec();
    m.extend_from_slice(&request_id.to_le_bytes());
    m.extend_from_slice(&response_to.to_le_bytes());
    m.extend_from_slice(&opcode.to_le_bytes());
    m.extend_from_slice(body);
    m
}

fn op_msg(request_id: i32, response_to: i32, flags: u32, doc: Doc) -> Vec<u8> {
    let mut body = flags.to_le_bytes().to_vec();
    body.push(0);
    body.extend_from_slice(&doc.end());
    message(request_id, response_to, OP_MSG, &body)
}

fn ok() -> Doc {
    Doc::default().f64("ok", 1.0)
}

/// `msg` (a whole message) as OP_COMPRESSED by compressor `id`.
fn compressed(msg: &[u8], id: u8) -> Vec<u8> {
    let body = &msg[16..];
    let data = match id {
        1 => snap::raw::Encoder::new().compress_vec(body).unwrap(),
        2 => {
            use std::io::Write;
            let mut e = flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::default());
            e.write_all(body).unwrap();
            e.finish().unwrap()
        }
        3 => zstd::bulk::compress(body, 3).unwrap(),
        _ => body.to_vec(),
    };
    let mut b = msg[12..16].to_vec();
    b.extend_from_slice(&(body.len() as i32).to_le_bytes());
    b.push(id);
    b.extend_from_slice(&data);
    message(le_i32(msg, 4), le_i32(msg, 8), OP_COMPRESSED, &b)
}

/// The whole messages pymongo sent and FerretDB answered in the captured crud session.
fn captured() -> Vec<(Direction, Vec<u8>)> {
    let f = crate::protocols::fixture_support::load("mongodb", "pymongo_crud.client.seg");
    // Reassemble each direction's stream, then cut it into messages.
    let mut streams: [Vec<u8>; 2] = [Vec::new(), Vec::new()];
    for e in &f.entries {
        let d = usize::from(!e.to_server);
        streams[d].extend_from_slice(&e.bytes);
    }
    let mut out = Vec::new();
    let mut at = [0usize; 2];
    // Alternate: one request, then its reply (the session is request/reply).
    loop {
        let mut any = false;
        for d in 0..2 {
            let s = &streams[d];
            if at[d] + 16 <= s.len() {
                let len = le_i32(s, at[d]) as usize;
                out.push((
                    if d == 0 { OUT } else { IN },
                    s[at[d]..at[d] + len].to_vec(),
                ));
                at[d] += len;
                any = true;
            }
        }
        if !any {
            break;
        }
    }
    out
}

#[test]
fn detect_takes_headers_alone_and_whole_messages_and_nothing_else() {
    let hello = op_msg(7, 0, 0, Doc::default().i32("hello", 1).str("$db", "admin"));
    assert!(is_message_start(&hello));
    // A server reads the header apart from the body.
    assert!(is_message_start(&hello[..16]));
    assert!(!is_message_start(&hello[..15]));
    let reply = op_msg(9, 7, 0, ok());
    assert!(is_message_start(&reply));
    // Unknown flag bits, a section kind 3, an unknown opcode, a length out of bounds.
    let mut bad = hello.clone();
    bad[16] = 0x40;
    assert!(!is_message_start(&bad));
    let mut bad = hello.clone();
    bad[20] = 3;
    assert!(!is_message_start(&bad));
    let mut bad = hello.clone();
    bad[12] = 0x00;
    assert!(!is_message_start(&bad));
    let mut bad = hello.clone();
    bad[3] = 0x7f;
    assert!(!is_message_start(&bad));
    assert!(!is_message_start(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n"));
}

#[test]
fn a_request_and_its_reply_make_a_call_with_command_collection_and_db() {
    let mut t = driver();
    let find = op_msg(
        11,
        0,
        0,
        Doc::default()
            .str("find", "orders")
            .doc("filter", Doc::default().str("item", "secret-value"))
            .str("$db", "shop"),
    );
    // The header apart from the body, as servers read it.
    t.seg(IN, &find[..16]).seg(IN, &find[16..]);
    t.seg(
        OUT,
        &op_msg(
            12,
            11,
            0,
            Doc::default()
                .doc("cursor", Doc::default().i64("id", 0))
                .f64("ok", 1.0),
        ),
    );
    assert_eq!(t.calls.len(), 1, "{:?}", t.stats);
    let c = &t.calls[0];
    assert_eq!((c.method.as_str(), c.resource.as_str()), ("find", "orders"));
    assert_eq!(t.detail(0, "db"), Some("shop"));
    assert_eq!(c.outcome, Outcome::Ok);
    assert_eq!(c.request_dir, IN);
    assert_eq!(c.req.bytes, find.len() as u64);
    assert!(!format!("{c:?}").contains("secret-value"));
}

/// A message that names a request in `responseTo` but travels the request's own way answers
/// nothing (fuzzing found a 920-byte insert claimed as sent the other way): it is unmatched,
/// and the request still pairs with the reply that comes the other way.
#[test]
fn only_a_message_the_other_way_answers_a_request() {
    let mut t = driver();
    let insert = op_msg(
        7,
        0,
        0,
        Doc::default().str("insert", "orders").str("$db", "shop"),
    );
    t.seg(OUT, &insert);
    t.seg(OUT, &op_msg(8, 7, 0, ok()));
    assert!(t.calls.is_empty());
    assert_eq!(t.stats.unmatched_responses, 1);
    let reply = op_msg(9, 7, 0, ok());
    t.seg(IN, &reply);
    t.close();
    assert_eq!(t.calls.len(), 1);
    let c = &t.calls[0];
    assert_eq!(c.request_dir, OUT);
    assert_eq!(
        (c.req.bytes, c.resp.bytes),
        (insert.len() as u64, reply.len() as u64)
    );
    assert_eq!(t.stats.unanswered_requests, 0);
}

#[test]
fn replies_pair_by_response_to_in_any_order() {
    let mut t = driver();
    t.seg(
        OUT,
        &op_msg(1, 0, 0, Doc::default().str("find", "a").str("$db", "d")),
    );
    t.seg(
        OUT,
        &op_msg(2, 0, 0, Doc::default().str("count", "b").str("$db", "d")),
    );
    t.seg(IN, &op_msg(100, 2, 0, ok()));
    t.seg(
        IN,
        &op_msg(
            101,
            1,
            0,
            Doc::default()
                .f64("ok", 0.0)
                .str("errmsg", "bad {x: 1}")
                .i32("code", 2)
                .str("codeName", "BadValue"),
        ),
    );
    t.seg(IN, &op_msg(102, 77, 0, ok()));
    t.close();
    let got: Vec<_> = t
        .calls
        .iter()
        .map(|c| (c.method.as_str(), c.status_text.clone(), c.outcome))
        .collect();
    assert_eq!(
        got,
        vec![
            ("count", None, Outcome::Ok),
            ("find", Some("BadValue".to_owned()), Outcome::ClientError)
        ]
    );
    assert_eq!(t.detail(1, "error"), Some("bad"));
    assert_eq!(t.stats.unmatched_responses, 1);
}

#[test]
fn compressed_messages_of_every_compressor_give_the_same_calls() {
    let plain = captured();
    let calls_of = |msgs: &[(Direction, Vec<u8>)]| {
        let mut t = driver();
        for (d, m) in msgs {
            t.seg(*d, m);
        }
        t.close();
        let calls: Vec<_> = t
            .calls
            .iter()
            .map(|c| {
                (
                    c.method.clone(),
                    c.resource.clone(),
                    c.status_text.clone(),
                    c.outcome,
                )
            })
            .collect();
        (
            calls,
            t.calls
                .iter()
                .map(|c| c.details.clone())
                .collect::<Vec<_>>(),
            t.stats,
        )
    };
    let (want, want_details, _) = calls_of(&plain);
    assert_eq!(want.len(), 12, "{want:?}");
    for id in [1u8, 2, 3] {
        // Both ways compressed, as a client and server that agreed on a compressor send
        // everything but the handshake.
        let msgs: Vec<_> = plain
            .iter()
            .map(|(d, m)| {
                let op = le_i32(m, 12);
                (
                    *d,
                    if op == OP_MSG {
                        compressed(m, id)
                    } else {
                        m.clone()
                    },
                )
            })
            .collect();
        let (got, details, stats) = calls_of(&msgs);
        assert_eq!(got, want, "compressor {id}");
        assert_eq!(stats.unmatched_responses, 0);
        let name = inflate::compressor_name(id).unwrap();
        for (g, w) in details.iter().zip(&want_details).skip(1) {
            let mut w = w.clone();
            w.insert(
                w.iter()
                    .position(|(k, _)| k.starts_with("code") || *k == "error")
                    .unwrap_or(w.len()),
                ("compressor", name.to_owned()),
            );
            assert_eq!(g, &w, "compressor {id}");
        }
    }
}

#[test]
fn more_to_come_requests_are_one_way_and_counted() {
    // pymongo's w=0 insert: flagBits moreToCome, writeConcern {w: 0}; no reply comes.
    let mut t = driver();
    let insert = |id| {
        let mut body = MORE_TO_COME.to_le_bytes().to_vec();
        body.push(0);
        body.extend_from_slice(
            &Doc::default()
                .str("insert", "events")
                .doc("writeConcern", Doc::default().i32("w", 0))
                .str("$db", "log")
                .end(),
        );
        // The documents as a kind-1 sequence.
        let docs: Vec<u8> = (0..3)
            .flat_map(|i| Doc::default().i32("_id", i).end())
            .collect();
        body.push(1);
        body.extend_from_slice(&((4 + 10 + docs.len()) as i32).to_le_bytes());
        body.extend_from_slice(b"documents\0");
        body.extend_from_slice(&docs);
        message(id, 0, OP_MSG, &body)
    };
    t.seg(OUT, &insert(1)).seg(OUT, &insert(2));
    t.seg(
        OUT,
        &op_msg(3, 0, 0, Doc::default().i32("ping", 1).str("$db", "admin")),
    );
    t.seg(IN, &op_msg(50, 3, 0, ok()));
    t.close();
    assert_eq!(t.calls.len(), 1);
    assert_eq!(t.calls[0].method, "ping");
    assert_eq!(t.stats.unreplied_requests, 2);
    assert_eq!(t.stats.unanswered_requests, 0);
}

#[test]
fn exhaust_replies_make_one_call_and_count_the_rest() {
    // A find with exhaustAllowed: the server streams replies with moreToCome, each naming
    // the previous reply's requestID; the last has no moreToCome.
    let mut t = driver();
    t.seg(
        OUT,
        &op_msg(
            5,
            0,
            EXHAUST_ALLOWED,
            Doc::default()
                .str("getMore", "x")
                .str("collection", "logs")
                .str("$db", "d"),
        ),
    );
    let batch = |id, to, more: bool| {
        op_msg(
            id,
            to,
            if more { MORE_TO_COME } else { 0 },
            Doc::default()
                .doc("cursor", Doc::default().i64("id", 9))
                .f64("ok", 1.0),
        )
    };
    t.seg(IN, &batch(60, 5, true))
        .seg(IN, &batch(61, 60, true))
        .seg(IN, &batch(62, 61, false));
    // A reply after the stream ended pairs with nothing.
    t.seg(IN, &batch(63, 62, false));
    t.close();
    assert_eq!(t.calls.len(), 1);
    assert_eq!(
        (t.calls[0].method.as_str(), t.calls[0].resource.as_str()),
        ("getMore", "logs")
    );
    assert_eq!(t.stats.pushes, 2);
    assert_eq!(t.stats.unmatched_responses, 1);
}

#[test]
fn awaitable_hello_is_counted_not_timed() {
    let mut t = driver();
    let hello = Doc::default()
        .i32("hello", 1)
        .doc("topologyVersion", Doc::default().i64("counter", 0))
        .i64("maxAwaitTimeMS", 10000)
        .str("$db", "admin");
    t.seg(OUT, &op_msg(1, 0, EXHAUST_ALLOWED, hello));
    t.seg(
        IN,
        &op_msg(
            2,
            1,
            MORE_TO_COME,
            Doc::default().f64("isWritablePrimary", 1.0).f64("ok", 1.0),
        ),
    );
    t.seg(
        IN,
        &op_msg(
            3,
            2,
            MORE_TO_COME,
            Doc::default().f64("isWritablePrimary", 1.0).f64("ok", 1.0),
        ),
    );
    // A plain hello (the handshake) is a call.
    t.seg(
        OUT,
        &op_msg(4, 0, 0, Doc::default().i32("hello", 1).str("$db", "admin")),
    );
    t.seg(
        IN,
        &op_msg(
            5,
            4,
            0,
            Doc::default().f64("isWritablePrimary", 1.0).f64("ok", 1.0),
        ),
    );
    t.close();
    assert_eq!(t.calls.len(), 1);
    assert_eq!(t.calls[0].method, "hello");
    assert_eq!(t.stats.pushes, 2);
}

#[test]
fn ok_after_a_large_batch_is_read_in_the_kernel_tail() {
    // A reply of 100 KiB: the kernel copies its first 4096 bytes and its last 256.
    let docs: Vec<Doc> = (0..1000)
        .map(|i| Doc::default().i32("_id", i).str("pad", &"p".repeat(80)))
        .collect();
    let reply = op_msg(
        2,
        1,
        0,
        Doc::default()
            .doc(
                "cursor",
                Doc::default().arr("firstBatch", docs).i64("id", 0),
            )
            .f64("ok", 1.0),
    );
    assert!(reply.len() > 90_000);
    let mut t = driver();
    t.seg(
        OUT,
        &op_msg(1, 0, 0, Doc::default().str("find", "big").str("$db", "d")),
    );
    t.seg_snapped(IN, &reply, 4096);
    assert_eq!(t.calls.len(), 1);
    assert_eq!(t.calls[0].outcome, Outcome::Ok);
    assert_eq!(t.calls[0].resp.bytes, reply.len() as u64);
    // Without the tail: unknown, never ok.
    let mut t = driver();
    t.seg(
        OUT,
        &op_msg(1, 0, 0, Doc::default().str("find", "big").str("$db", "d")),
    );
    t.seg_cut(IN, &reply[..4096], reply.len() as u64);
    assert_eq!(t.calls.len(), 1);
    assert_eq!(t.calls[0].outcome, Outcome::Unknown);
}

#[test]
fn legacy_op_query_handshake_and_op_reply() {
    let mut body = 0i32.to_le_bytes().to_vec();
    body.extend_from_slice(b"admin.$cmd\0");
    body.extend_from_slice(&0i32.to_le_bytes());
    body.extend_from_slice(&(-1i32).to_le_bytes());
    body.extend_from_slice(&Doc::default().i32("isMaster", 1).end());
    let query = message(3, 0, OP_QUERY, &body);
    let mut rbody = 8i32.to_le_bytes().to_vec();
    rbody.extend_from_slice(&0i64.to_le_bytes());
    rbody.extend_from_slice(&0i32.to_le_bytes());
    rbody.extend_from_slice(&1i32.to_le_bytes());
    rbody.extend_from_slice(&Doc::default().f64("ismaster", 1.0).f64("ok", 1.0).end());
    let reply = message(4, 3, OP_REPLY, &rbody);
    let mut t = driver();
    t.seg(OUT, &query).seg(IN, &reply).close();
    assert_eq!(t.calls.len(), 1);
    let c = &t.calls[0];
    assert_eq!(
        (c.method.as_str(), c.version, c.outcome),
        ("isMaster", "OP_QUERY", Outcome::Ok)
    );
    assert_eq!(t.detail(0, "db"), Some("admin"));
}

#[test]
fn hostile_bytes_never_panic_and_stay_bounded() {
    let msgs = captured();
    let mut rng = crate::xorshift::XorShift(7);
    for round in 0..300 {
        let mut t = driver();
        for (d, m) in &msgs {
            let mut m = m.clone();
            for _ in 0..(round % 5) {
                let i = (rng.next() as usize) % m.len();
                m[i] ^= (rng.next() as u8) | 1;
            }
            let cut = (rng.next() as usize) % (m.len() + 1);
            t.seg(*d, &m[..cut]);
            t.seg(*d, &m[cut..]);
            if round % 7 == 0 {
                t.gap(*d, Some(rng.next() % 64));
            }
        }
        t.close();
        assert!(t.calls.len() <= msgs.len());
    }
    // A compressed message claiming a huge size inflates at most INFLATE_MAX.
    let bomb = {
        let body = vec![0u8; 1 << 20];
        let mut b = OP_MSG.to_le_bytes().to_vec();
        b.extend_from_slice(&(1i32 << 30).to_le_bytes());
        b.push(3);
        b.extend_from_slice(&zstd::bulk::compress(&body, 3).unwrap());
        message(1, 0, OP_COMPRESSED, &b)
    };
    let mut t = driver();
    t.seg(OUT, &bomb).close();
    assert!(t.p.bodies[1].head.len() <= KEEP && t.p.bodies[0].head.len() <= KEEP);
}
