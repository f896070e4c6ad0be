;; lenrpc: a length-prefixed RPC protocol that only this plugin parses (ebtop ABI 1,
;; docs/plugins.md). A message is a 4-byte big-endian length L of what follows, a type byte
;; (1 request, 2 response), a 4-byte big-endian id; a request's body is "METHOD RESOURCE", a
;; response's body a status byte (0: ok) and optional text. Requests pair with responses by id.
(module
  (@custom "ebtop.plugin" "name=lenrpc\nabi=1\nkind=parse\nports=7878,7879\n")
  (memory (export "memory") 2)
  ;; The buffer ebtop writes into: 64 KiB from 1024; inputs start after the 96-byte header.
  (global $buf i32 (i32.const 1024))
  (func (export "ebtop_buffer") (result i32) (global.get $buf))

  ;; A big-endian u32 at $p.
  (func $be32 (param $p i32) (result i32)
    (i32.or
      (i32.or (i32.shl (i32.load8_u (local.get $p)) (i32.const 24))
              (i32.shl (i32.load8_u offset=1 (local.get $p)) (i32.const 16)))
      (i32.or (i32.shl (i32.load8_u offset=2 (local.get $p)) (i32.const 8))
              (i32.load8_u offset=3 (local.get $p)))))

  ;; The header is 9 bytes; its body L - 5.
  (func (export "ebtop_frame") (param $len i32) (result i64)
    (local $l i32) (local $t i32)
    (if (i32.lt_u (local.get $len) (i32.const 9))
      (then (return (i64.or (i64.const 0x100000000000000) (i64.const 9)))))
    (local.set $l (call $be32 (i32.add (global.get $buf) (i32.const 96))))
    (local.set $t (i32.load8_u offset=100 (global.get $buf)))
    (if (i32.or (i32.lt_u (local.get $l) (i32.const 5))
                (i32.gt_u (local.get $l) (i32.const 0x100000)))
      (then (return (i64.const -1))))
    (if (i32.and (i32.ne (local.get $t) (i32.const 1)) (i32.ne (local.get $t) (i32.const 2)))
      (then (return (i64.const -1))))
    (i64.extend_i32_u (i32.sub (local.get $l) (i32.const 5))))

  ;; A call half: the answer's fixed 24 bytes at the buffer's start, then its strings.
  (func (export "ebtop_message") (param $len i32) (result i32)
    (local $b i32) (local $in i32) (local $body i32) (local $n i32) (local $i i32)
    (local $m i32) (local $t i32) (local $id i32)
    (local.set $b (global.get $buf))
    (local.set $in (i32.add (local.get $b) (i32.const 96)))
    (local.set $body (i32.add (local.get $in) (i32.const 9)))
    (local.set $n (i32.sub (local.get $len) (i32.const 9)))
    (local.set $t (i32.load8_u offset=4 (local.get $in)))
    (local.set $id (call $be32 (i32.add (local.get $in) (i32.const 5))))
    ;; Cleared fixed part; pair key = id + 1 (0 would mean "in order").
    (memory.fill (local.get $b) (i32.const 0) (i32.const 24))
    (i64.store offset=8 (local.get $b) (i64.add (i64.extend_i32_u (local.get $id)) (i64.const 1)))
    (if (i32.eq (local.get $t) (i32.const 1))
      (then
        ;; METHOD up to the first space (at most 64 bytes), RESOURCE after it.
        (local.set $m (local.get $n))
        (block $found
          (loop $scan
            (br_if $found (i32.ge_u (local.get $i) (local.get $n)))
            (if (i32.eq (i32.load8_u (i32.add (local.get $body) (local.get $i))) (i32.const 32))
              (then (local.set $m (local.get $i)) (br $found)))
            (local.set $i (i32.add (local.get $i) (i32.const 1)))
            (br $scan)))
        (if (i32.gt_u (local.get $m) (i32.const 64)) (then (return (i32.const -1))))
        (i32.store8 (local.get $b) (i32.const 1))
        (i32.store16 offset=16 (local.get $b) (local.get $m))
        (local.set $n (i32.sub (local.get $n) (i32.add (local.get $m) (i32.const 1))))
        (if (i32.lt_s (local.get $n) (i32.const 0)) (then (local.set $n (i32.const 0))))
        (if (i32.gt_u (local.get $n) (i32.const 1024)) (then (local.set $n (i32.const 1024))))
        (i32.store16 offset=18 (local.get $b) (local.get $n))
        (memory.copy (i32.add (local.get $b) (i32.const 24)) (local.get $body) (local.get $m))
        (memory.copy (i32.add (local.get $b) (i32.add (i32.const 24) (local.get $m)))
                     (i32.add (local.get $body) (i32.add (local.get $m) (i32.const 1)))
                     (local.get $n))
        (return (i32.add (i32.const 24) (i32.add (local.get $m) (local.get $n))))))
    ;; A response: its status byte; an error when not 0.
    (if (i32.lt_s (local.get $n) (i32.const 1)) (then (return (i32.const -1))))
    (local.set $m (i32.load8_u (local.get $body)))
    (i32.store8 (local.get $b) (i32.const 2))
    (i32.store8 offset=1 (local.get $b) (select (i32.const 2) (i32.const 0) (local.get $m)))
    (i32.store8 offset=3 (local.get $b) (i32.const 1))
    (i32.store offset=4 (local.get $b) (local.get $m))
    (i32.const 24))
)
