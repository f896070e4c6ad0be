//! ns per call of the example plugins in wasmi (issue 46: the goal is under 1 µs per call),
//! measured on the guest calls ebtop makes, with ebtop's own input: the HTTP enrich plugin
//! (json_code.wat) on a 200 response with a 256-byte JSON body (without the code: the whole
//! body scanned; with it at the end), lenrpc.wat's frame and message calls, and, given its
//! built module, memcached.c's message call on a `get` line. Medians of 15 batches.
//!
//!   cargo run --release --example plugin_ns [-- memcached.wasm]

use std::sync::Arc;
use std::time::Instant;

use ebtop::plugins::abi::{self, off};
use ebtop::plugins::{Guest, Limits, Plugin};

fn load(bytes: &[u8], name: &str) -> Guest {
    let p = Plugin::from_bytes(bytes, name, Limits::default()).expect("the example loads");
    Guest::new(Arc::new(p))
}

fn wat(name: &str) -> Vec<u8> {
    let path = format!("{}/examples/plugins/{name}.wat", env!("CARGO_MANIFEST_DIR"));
    wat::parse_file(&path).expect("the example compiles")
}

/// Writes the header and `input` into the guest's buffer; the input's length.
fn put(g: &mut Guest, hook: u8, status: u32, head_len: usize, input: &[u8]) -> usize {
    let buf = g.buffer().expect("enabled");
    buf[..abi::HEADER_LEN].fill(0);
    buf[off::ABI..off::ABI + 2].copy_from_slice(&1u16.to_le_bytes());
    buf[off::HOOK] = hook;
    buf[off::CONN_ID..off::CONN_ID + 8].copy_from_slice(&7u64.to_le_bytes());
    buf[off::STATUS..off::STATUS + 4].copy_from_slice(&status.to_le_bytes());
    buf[off::HEAD_LEN..off::HEAD_LEN + 2].copy_from_slice(&(head_len as u16).to_le_bytes());
    buf[abi::HEADER_LEN..abi::HEADER_LEN + input.len()].copy_from_slice(input);
    input.len()
}

/// Median ns per call of `f` over 15 batches of `n`.
fn median_ns(n: u32, mut f: impl FnMut()) -> f64 {
    for _ in 0..n / 10 {
        f();
    }
    let mut v: Vec<f64> = (0..15)
        .map(|_| {
            let t = Instant::now();
            for _ in 0..n {
                f();
            }
            t.elapsed().as_nanos() as f64 / f64::from(n)
        })
        .collect();
    v.sort_by(f64::total_cmp);
    v[7]
}

fn main() {
    let head = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 256\r\n\r\n";
    let mut plain = br#"{"items": [1, 2, 3], "total": 3, "next": null, "note": ""#.to_vec();
    plain.resize(255, b'x');
    plain.push(b'}');
    let mut coded = plain.clone();
    coded.truncate(256 - 40);
    coded.extend_from_slice(br#"", "code": "E42", "message": "out"}"#);
    coded.resize(256, b' ');

    let mut json = load(&wat("json_code"), "json_code");
    for (what, body) in [
        (
            "json_code, 256-byte body, no code (whole body scanned)",
            &plain,
        ),
        ("json_code, 256-byte body, code at its end", &coded),
    ] {
        let input = [&head[..], &body[..]].concat();
        let n = put(&mut json, abi::HOOK_ENRICH, 200, head.len(), &input);
        let expect_answer = body == &coded;
        assert_eq!(json.enrich(n).expect("no fault") > 0, expect_answer);
        let ns = median_ns(200_000, || {
            std::hint::black_box(json.enrich(n).expect("no fault"));
        });
        println!("{what}: {ns:.0} ns/call");
    }

    let mut lenrpc = load(&wat("lenrpc"), "lenrpc");
    let msg = {
        let body = b"GET /orders/1234";
        let mut m = ((body.len() + 5) as u32).to_be_bytes().to_vec();
        m.push(1);
        m.extend_from_slice(&1234u32.to_be_bytes());
        m.extend_from_slice(body);
        m
    };
    let n = put(&mut lenrpc, abi::HOOK_FRAME, 0, 0, &msg[..9]);
    let ns = median_ns(200_000, || {
        std::hint::black_box(lenrpc.frame(n).expect("no fault"));
    });
    println!("lenrpc frame (9-byte header): {ns:.0} ns/call");
    let n = put(&mut lenrpc, abi::HOOK_MESSAGE, 0, 0, &msg);
    let ns = median_ns(200_000, || {
        // The answer overwrites the input's start: written again each time, as ebtop does.
        put(&mut lenrpc, abi::HOOK_MESSAGE, 0, 0, &msg);
        std::hint::black_box(lenrpc.message(n).expect("no fault"));
    });
    println!("lenrpc message (a request, answer written and decoded not): {ns:.0} ns/call");

    if let Some(path) = std::env::args().nth(1) {
        let mut mc = load(&std::fs::read(&path).expect("the module"), "memcached");
        let line = b"get user:1 user:2 user:3\r\n";
        let n = put(&mut mc, abi::HOOK_MESSAGE, 0, 0, line);
        let ns = median_ns(100_000, || {
            put(&mut mc, abi::HOOK_MESSAGE, 0, 0, line);
            std::hint::black_box(mc.message(n).expect("no fault"));
        });
        println!("memcached.c message (a 3-key get line): {ns:.0} ns/call");
    }
}
