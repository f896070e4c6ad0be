;; redis_code: an enrich plugin for Redis replies (ebtop ABI 1, `enrich=redis`,
;; docs/plugins.md): json_code.wat's scan on a RESP reply. A bulk string reply (a GET of a
;; JSON document) that holds "code": "X" makes the call a server error with status text X;
;; other replies are left as the built-in parser made them. The input is the reply's bytes
;; as captured (no head: head length 0).
(module
  (@custom "ebtop.plugin" "name=redis_code\nabi=1\nkind=enrich\nenrich=redis\n")
  (memory (export "memory") 2)
  (global $buf i32 (i32.const 1024))
  ;; Horspool's shifts for "code" with its quotes: 5 for ", 4 c, 3 o, 2 d, 1 e, 6 for the rest.
  (data (i32.const 0) "\06\06\06\06\06\06\06\06\06\06\06\06\06\06\06\06\06\06\06\06\06\06\06\06\06\06\06\06\06\06\06\06\06\06\05\06\06\06\06\06\06\06\06\06\06\06\06\06\06\06\06\06\06\06\06\06\06\06\06\06\06\06\06\06\06\06\06\06\06\06\06\06\06\06\06\06\06\06\06\06\06\06\06\06\06\06\06\06\06\06\06\06\06\06\06\06\06\06\06\04\02\01\06\06\06\06\06\06\06\06\06\03\06\06\06\06\06\06\06\06\06\06\06\06\06\06\06\06\06\06\06\06\06\06\06\06\06\06\06\06\06\06\06\06\06\06\06\06\06\06\06\06\06\06\06\06\06\06\06\06\06\06\06\06\06\06\06\06\06\06\06\06\06\06\06\06\06\06\06\06\06\06\06\06\06\06\06\06\06\06\06\06\06\06\06\06\06\06\06\06\06\06\06\06\06\06\06\06\06\06\06\06\06\06\06\06\06\06\06\06\06\06\06\06\06\06\06\06\06\06\06\06\06\06\06\06\06\06\06\06\06\06\06\06\06\06\06\06\06\06\06\06\06\06\06\06")
  (func (export "ebtop_buffer") (result i32) (global.get $buf))

  (func (export "ebtop_enrich") (param $len i32) (result i32)
    (local $b i32) (local $p i32) (local $end i32) (local $v i32)
    (local $n i32)
    (local.set $b (global.get $buf))
    ;; Bulk strings only (`$`): an error reply (`-`) is already the built-in parser's error.
    (if (i32.ne (i32.load8_u offset=96 (local.get $b)) (i32.const 0x24))
      (then (return (i32.const 0))))
    ;; The reply: after the head (its length at offset 6: 0 for Redis).
    (local.set $p (i32.add (i32.add (local.get $b) (i32.const 96))
                           (i32.load16_u offset=6 (local.get $b))))
    (local.set $end (i32.add (i32.add (local.get $b) (i32.const 96)) (local.get $len)))
    ;; Find "code" (6 bytes with its quotes: 0x22 c o d e 0x22), Horspool's way: the window's
    ;; last byte says how far the pattern can move on (a table at 0), so most of a body is
    ;; stepped over 6 bytes at a time rather than read byte by byte.
    (block $none
      (loop $scan
        (br_if $none (i32.gt_u (i32.add (local.get $p) (i32.const 6)) (local.get $end)))
        (if (i32.and
              (i32.eq (i32.load (local.get $p)) (i32.const 0x646f6322))
              (i32.eq (i32.load16_u offset=4 (local.get $p)) (i32.const 0x2265)))
          (then
            (local.set $p (i32.add (local.get $p) (i32.const 6)))
            ;; Spaces and one colon, then the value's opening quote.
            (block $val
              (loop $skip
                (br_if $none (i32.ge_u (local.get $p) (local.get $end)))
                (local.set $v (i32.load8_u (local.get $p)))
                (br_if $val (i32.eq (local.get $v) (i32.const 0x22)))
                (br_if $none (i32.and (i32.ne (local.get $v) (i32.const 0x20))
                                      (i32.ne (local.get $v) (i32.const 0x3a))))
                (local.set $p (i32.add (local.get $p) (i32.const 1)))
                (br $skip)))
            (local.set $p (i32.add (local.get $p) (i32.const 1)))
            ;; The value up to its closing quote, at most 64 bytes.
            (loop $str
              (br_if $none (i32.ge_u (i32.add (local.get $p) (local.get $n)) (local.get $end)))
              (if (i32.ne (i32.load8_u (i32.add (local.get $p) (local.get $n))) (i32.const 0x22))
                (then
                  (local.set $n (i32.add (local.get $n) (i32.const 1)))
                  (br_if $none (i32.gt_u (local.get $n) (i32.const 64)))
                  (br $str))))
            (memory.fill (local.get $b) (i32.const 0) (i32.const 24))
            ;; Outcome server_error, status text = the code.
            (i32.store8 offset=1 (local.get $b) (i32.const 2))
            (i32.store16 offset=20 (local.get $b) (local.get $n))
            (memory.copy (i32.add (local.get $b) (i32.const 24)) (local.get $p) (local.get $n))
            (return (i32.add (i32.const 24) (local.get $n)))))
        (local.set $p (i32.add (local.get $p)
                               (i32.load8_u (i32.load8_u offset=5 (local.get $p)))))
        (br $scan)))
    (i32.const 0))
)
