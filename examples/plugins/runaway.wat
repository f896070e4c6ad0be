;; runaway: a parse plugin whose frame function never returns. ebtop stops each call at its
;; fuel budget and disables the plugin after its third fault (docs/plugins.md, "Limits").
(module
  (@custom "ebtop.plugin" "name=runaway\nabi=1\nkind=parse\nports=7880\n")
  (memory (export "memory") 2)
  (func (export "ebtop_buffer") (result i32) (i32.const 1024))
  (func (export "ebtop_frame") (param i32) (result i64) (loop $forever (br $forever)) (i64.const -1))
  (func (export "ebtop_message") (param i32) (result i32) (i32.const 0))
)
