//! The runtime's limits on real guests (examples/plugins/*.wat, compiled by the tests).

use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};

use super::*;

/// The example guest `name` (examples/plugins/`name`.wat), compiled and loaded.
pub(crate) fn example(name: &str, limits: Limits) -> Arc<Plugin> {
    let path = format!("{}/examples/plugins/{name}.wat", env!("CARGO_MANIFEST_DIR"));
    let wasm = wat::parse_file(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
    Arc::new(Plugin::from_bytes(&wasm, &path, limits).unwrap_or_else(|e| panic!("{e:#}")))
}

pub(crate) fn guest(p: &Arc<Plugin>) -> SharedGuest {
    Arc::new(Mutex::new(Guest::new(p.clone())))
}

#[test]
fn the_examples_load_with_their_manifests() {
    let p = example("lenrpc", Limits::default());
    assert_eq!(p.name(), "lenrpc");
    assert_eq!(
        p.manifest.kind,
        PluginKind::Parse {
            ports: vec![7878, 7879],
            datagrams: false
        }
    );
    let e = example("json_code", Limits::default());
    assert_eq!(
        e.manifest.kind,
        PluginKind::Enrich {
            proto: EnrichProto::Http
        }
    );
}

#[test]
fn a_runaway_loop_is_stopped_by_its_fuel_and_disabled_at_the_third_time() {
    let limits = Limits::default();
    let p = example("runaway", limits);
    let g = guest(&p);
    let mut g = g.lock().unwrap();
    for i in 1..=3 {
        let t0 = std::time::Instant::now();
        assert_eq!(g.frame(1), Err(Fault::OutOfFuel), "call {i}");
        // Bounded by its fuel, not by the loop: well under a second even on a busy machine.
        assert!(t0.elapsed() < std::time::Duration::from_secs(5));
        assert_eq!(p.is_disabled(), i == 3);
    }
    assert_eq!(g.frame(1), Err(Fault::Disabled));
    assert!(g.buffer().is_none());
    let o = p.overhead();
    assert_eq!((o.calls, o.out_of_fuel, o.traps), (3, 3, 0));
    assert!(o.disabled);
    // Every call used its budget (fuel is taken per block: the last block may not fit).
    assert!(
        o.fuel_per_call.unwrap() > 0.99 * limits.fuel_per_call as f64,
        "{o:?}"
    );
    let warning = p.take_disabled_warning().expect("a warning");
    assert!(
        warning.contains("runaway disabled after 3 faults"),
        "{warning}"
    );
    assert_eq!(p.take_disabled_warning(), None, "warned once");
}

#[test]
fn a_memory_grow_bomb_traps_at_the_cap_and_is_disabled() {
    let limits = Limits {
        memory_bytes: 4 << 20,
        ..Limits::default()
    };
    let p = example("grow_bomb", limits);
    let g = guest(&p);
    let mut g = g.lock().unwrap();
    for _ in 0..3 {
        assert_eq!(g.frame(1), Err(Fault::Trap));
    }
    assert!(p.is_disabled());
    assert_eq!(p.counters.traps.load(Ordering::Relaxed), 3);
    // Its memory never passed the cap.
    let parts = g.parts.as_ref().unwrap();
    assert!(parts.memory.data_size(&parts.store) <= 4 << 20);
}

#[test]
fn an_answer_outside_the_buffer_or_the_abi_is_a_fault() {
    let p = example("lenrpc", Limits::default());
    let g = guest(&p);
    let mut g = g.lock().unwrap();
    assert_eq!(g.answer(abi::BUFFER_LEN as i32 + 1), Err(Fault::BadAnswer));
    g.buffer().unwrap()[0] = 9;
    assert_eq!(g.answer(24), Err(Fault::BadAnswer));
    assert_eq!(p.counters.bad_answers.load(Ordering::Relaxed), 2);
    assert!(!p.is_disabled());
}

#[test]
fn modules_that_are_no_plugin_are_refused_at_load() {
    let load = |wat: &str| {
        let wasm = wat::parse_str(wat).unwrap();
        Plugin::from_bytes(&wasm, "t.wasm", Limits::default())
            .map(|_| ())
            .map_err(|e| e.to_string())
    };
    let manifest = r#"(@custom "ebtop.plugin" "name=t\nabi=1\nkind=parse\nports=1")"#;
    let missing = load("(module)").unwrap_err();
    assert!(missing.contains("no `ebtop.plugin`"), "{missing}");
    let wasi = load(&format!(
        r#"(module {manifest} (import "wasi_snapshot_preview1" "fd_write" (func)))"#
    ))
    .unwrap_err();
    assert!(
        wasi.contains("imports wasi_snapshot_preview1.fd_write"),
        "{wasi}"
    );
    let no_exports = load(&format!(
        r#"(module {manifest} (memory (export "memory") 2))"#
    ))
    .unwrap_err();
    assert!(no_exports.contains("ebtop_buffer"), "{no_exports}");
    let outside = load(&format!(
        r#"(module {manifest} (memory (export "memory") 1)
             (func (export "ebtop_buffer") (result i32) (i32.const 1024)))"#
    ))
    .unwrap_err();
    assert!(outside.contains("outside its memory"), "{outside}");
    // A start function that never ends is stopped by the fuel given to start.
    let start = load(&format!(
        r#"(module {manifest} (memory (export "memory") 2)
             (func $s (loop $l (br $l))) (start $s))"#
    ))
    .unwrap_err();
    assert!(start.contains("instantiating"), "{start}");
    // An initial memory over the cap.
    let big = load(&format!(
        r#"(module {manifest} (memory (export "memory") 1024))"#
    ))
    .unwrap_err();
    assert!(big.contains("instantiating"), "{big}");
}

#[test]
fn attribute_keys_are_interned_once_per_plugin_and_key() {
    let a = intern_key("p", "order_id").unwrap();
    let b = intern_key("p", "order_id").unwrap();
    assert!(std::ptr::eq(a, b));
    assert_eq!(a, "p.order_id");
    assert_eq!(intern_key("ab", "c").unwrap(), "ab.c");
    assert_eq!(intern_key("a", "bc").unwrap(), "a.bc");
}

mod enrich {
    use super::*;
    use crate::event::Direction::{Egress, Ingress};
    use crate::protocols::test_driver::{stream_config, Driver};
    use crate::protocols::{http1, Outcome};

    fn driver() -> (Arc<Plugin>, Driver<super::super::enrich::Enriched>) {
        let p = example("json_code", Limits::default());
        let inner = (http1::DESCRIPTOR.new_parser)(&stream_config(0));
        let e =
            super::super::enrich::Enriched::new(inner, EnrichProto::Http, vec![guest(&p)], 1, 2);
        (p, Driver::with_parser(e))
    }

    const REQ: &[u8] = b"GET /orders/1 HTTP/1.1\r\nHost: a\r\n\r\n";

    fn resp(status: &str, body: &str) -> Vec<u8> {
        format!(
            "HTTP/1.1 {status}\r\nContent-Type: application/json\r\nSet-Cookie: s=secret\r\nContent-Length: {}\r\n\r\n{body}",
            body.len()
        )
        .into_bytes()
    }

    #[test]
    fn an_error_code_in_a_200_body_makes_the_call_an_error_with_that_status_text() {
        let (p, mut d) = driver();
        d.seg(Egress, REQ).seg(
            Ingress,
            &resp("200 OK", r#"{"code": "E42", "msg": "no stock"}"#),
        );
        // A 200 without a code, and a 404 with one (not a 2xx: left as it is).
        d.seg(Egress, REQ)
            .seg(Ingress, &resp("200 OK", r#"{"items": []}"#));
        d.seg(Egress, REQ)
            .seg(Ingress, &resp("404 Not Found", r#"{"code":"E1"}"#));
        let got: Vec<_> = d
            .calls
            .iter()
            .map(|c| (c.status, c.outcome, c.status_text.as_deref()))
            .collect();
        assert_eq!(
            got,
            [
                (Some(200), Outcome::ServerError, Some("E42")),
                (Some(200), Outcome::Ok, None),
                (Some(404), Outcome::ClientError, None),
            ]
        );
        assert_eq!(p.overhead().calls, 3);
        assert_eq!(p.overhead().enrich_skipped, 0);
    }

    #[test]
    fn a_response_split_over_syscalls_is_enriched_and_pipelined_ones_are_skipped() {
        let (p, mut d) = driver();
        let r = resp("200 OK", r#"{"code":"E7"}"#);
        d.seg(Egress, REQ)
            .seg(Ingress, &r[..20])
            .seg(Ingress, &r[20..]);
        assert_eq!(d.calls[0].status_text.as_deref(), Some("E7"));
        // Two responses in one read: whose bytes are whose is not handed to the plugin.
        d.seg(Egress, &[REQ, REQ].concat())
            .seg(Ingress, &[r.clone(), r.clone()].concat());
        assert_eq!(d.calls.len(), 3);
        assert!(d.calls[1..].iter().all(|c| c.outcome == Outcome::Ok));
        assert_eq!(p.overhead().enrich_skipped, 2);
        // After a loss in the response's direction: skipped too.
        d.gap(Ingress, Some(10));
        d.seg(Egress, REQ).seg(Ingress, &r);
        assert!(d.calls.iter().skip(3).all(|c| c.status_text.is_none()));
    }
}

/// A guest importing WASI: `ebtop_enrich` reads the clock into buffer[0..8], 8 random bytes
/// into buffer[8..16], writes 5 bytes to stderr, and exits when the input is 1 byte long.
const WASI_GUEST: &str = r#"(module
  (import "wasi_snapshot_preview1" "clock_time_get" (func $clock (param i32 i64 i32) (result i32)))
  (import "wasi_snapshot_preview1" "random_get" (func $random (param i32 i32) (result i32)))
  (import "wasi_snapshot_preview1" "fd_write" (func $write (param i32 i32 i32 i32) (result i32)))
  (import "wasi_snapshot_preview1" "proc_exit" (func $exit (param i32)))
  (@custom "ebtop.plugin" "name=wasi_t\nabi=1\nkind=enrich\nenrich=http\n")
  (memory (export "memory") 2)
  (data (i32.const 512) "hello")
  (func (export "ebtop_buffer") (result i32) (i32.const 1024))
  (func (export "ebtop_enrich") (param $len i32) (result i32)
    (if (i32.eq (local.get $len) (i32.const 1)) (then (call $exit (i32.const 3))))
    (drop (call $clock (i32.const 1) (i64.const 0) (i32.const 1024)))
    (drop (call $random (i32.const 1032) (i32.const 8)))
    ;; an iovec at 600: (512, 5); the count written at 608
    (i32.store (i32.const 600) (i32.const 512))
    (i32.store (i32.const 604) (i32.const 5))
    (drop (call $write (i32.const 2) (i32.const 600) (i32.const 1) (i32.const 608)))
    ;; a pointer outside memory: EFAULT, not a fault of the host
    (i32.store (i32.const 1040) (call $random (i32.const 0x7fff0000) (i32.const 8)))
    (i32.const 0)))"#;

#[test]
fn wasi_imports_are_refused_without_the_stubs_and_deterministic_with_them() {
    let wasm = wat::parse_str(WASI_GUEST).unwrap();
    let err = Plugin::from_bytes(&wasm, "w", Limits::default())
        .err()
        .expect("refused without --plugin-wasi-stubs")
        .to_string();
    assert!(err.contains("--plugin-wasi-stubs"), "{err}");
    let limits = Limits {
        wasi_stubs: true,
        ..Limits::default()
    };
    let p = Arc::new(Plugin::from_bytes(&wasm, "w", limits).unwrap());
    let run = |g: &SharedGuest| {
        let mut g = g.lock().unwrap();
        assert_eq!(g.enrich(100), Ok(0));
        let b = g.buffer().unwrap();
        let clock = u64::from_le_bytes(b[0..8].try_into().unwrap());
        let random: [u8; 8] = b[8..16].try_into().unwrap();
        let efault = u32::from_le_bytes(b[16..20].try_into().unwrap());
        (clock, random, efault)
    };
    let (g1, g2) = (guest(&p), guest(&p));
    let first = run(&g1);
    assert_eq!(first.0, 1_000, "the instance's own clock, 1 µs per reading");
    assert_ne!(first.1, [0; 8]);
    assert_eq!(first.2, 21, "EFAULT");
    assert_eq!(run(&g1).0, 2_000);
    // Another instance: the same sequence from the start.
    assert_eq!(run(&g2), first);
    assert_eq!(p.overhead().wasi_written_bytes, 15);
    // proc_exit is a trap (a fault).
    assert_eq!(g1.lock().unwrap().enrich(1), Err(Fault::Trap));
    assert_eq!(p.overhead().traps, 1);
}

/// A guest whose every call runs, until its fuel is out, a loop of many kinds of instruction
/// (integer and float arithmetic, conversions, loads and stores, bulk memory, select,
/// br_table, globals, direct, indirect and recursive calls). Run on a thread with a small
/// stack: whatever the dispatch of the build (wasmi's tail calls need every handler's call of
/// the next to be a sibling call), a call must end at its fuel with a fault, not grow the
/// host's stack with the instructions it runs (an abort of ebtop).
const BUSY: &str = r#"(module
  (@custom "ebtop.plugin" "name=busy\nabi=1\nkind=parse\nports=7881\n")
  (memory (export "memory") 2)
  (global $g (mut i64) (i64.const 1))
  (type $t (func (param i32) (result i32)))
  (table 2 funcref)
  (elem (i32.const 0) $inc $dec)
  (func $inc (type $t) (i32.add (local.get 0) (i32.const 1)))
  (func $dec (type $t) (i32.sub (local.get 0) (i32.const 1)))
  (func $deep (param $n i32) (result i32)
    (if (result i32) (i32.eqz (local.get $n))
      (then (i32.const 0))
      (else (i32.add (i32.const 1) (call $deep (i32.sub (local.get $n) (i32.const 1)))))))
  (func (export "ebtop_buffer") (result i32) (i32.const 1024))
  (func (export "ebtop_frame") (param $len i32) (result i64)
    (local $i i32) (local $f f64) (local $x i64)
    (loop $forever
      (local.set $i (i32.and (i32.add (local.get $i) (i32.const 7)) (i32.const 0xfff)))
      (i32.store (local.get $i) (i32.mul (local.get $i) (i32.load offset=4 (local.get $i))))
      (i64.store8 offset=8 (local.get $i) (i64.rotl (global.get $g) (i64.extend_i32_u (local.get $i))))
      (local.set $x (i64.div_u (i64.or (global.get $g) (i64.const 1)) (i64.const 3)))
      (global.set $g (i64.xor (local.get $x) (i64.shl (local.get $x) (i64.const 13))))
      (local.set $f (f64.add (f64.mul (local.get $f) (f64.const 0.5))
                             (f64.convert_i32_u (local.get $i))))
      (local.set $i (i32.add (local.get $i) (i32.trunc_sat_f64_u (f64.sqrt (local.get $f)))))
      (local.set $i (select (local.get $i) (i32.const 3) (i32.lt_u (local.get $i) (i32.const 4000))))
      (memory.copy (i32.const 8192) (i32.const 4096) (i32.const 64))
      (memory.fill (i32.const 9000) (local.get $i) (i32.const 16))
      (local.set $i (call_indirect (type $t) (local.get $i) (i32.and (local.get $i) (i32.const 1))))
      (local.set $i (i32.add (local.get $i) (call $deep (i32.const 50))))
      (block $b2 (block $b1 (block $b0
        (br_table $b0 $b1 $b2 (i32.and (local.get $i) (i32.const 3))))
        (local.set $i (i32.popcnt (local.get $i))))
        (local.set $i (i32.clz (local.get $i))))
      (br $forever))
    (i64.const -1))
  (func (export "ebtop_message") (param i32) (result i32) (i32.const 0))
)"#;

#[test]
fn a_busy_guest_ends_at_its_fuel_on_a_small_host_stack_in_every_build() {
    let wasm = wat::parse_str(BUSY).unwrap();
    let t = std::thread::Builder::new()
        // Far less than a million instructions would take if each grew the stack by a frame.
        .stack_size(256 << 10)
        .spawn(move || {
            let p = Arc::new(Plugin::from_bytes(&wasm, "busy", Limits::default()).unwrap());
            let g = guest(&p);
            let mut g = g.lock().unwrap();
            for i in 1..=3 {
                assert_eq!(g.frame(1), Err(Fault::OutOfFuel), "call {i}");
            }
            let o = p.overhead();
            assert!(o.disabled);
            o.fuel_per_call.unwrap()
        })
        .unwrap();
    let fuel = t
        .join()
        .expect("the guest's calls end cleanly on a 256 KiB stack");
    assert!(
        fuel > 0.99 * Limits::default().fuel_per_call as f64,
        "{fuel}"
    );
}
