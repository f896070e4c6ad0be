;; grow_bomb: a parse plugin whose frame function grows its memory without end. Growth past
;; ebtop's memory cap traps; the plugin is disabled after its third fault.
(module
  (@custom "ebtop.plugin" "name=grow_bomb\nabi=1\nkind=parse\nports=7881\n")
  (memory (export "memory") 2)
  (func (export "ebtop_buffer") (result i32) (i32.const 1024))
  (func (export "ebtop_frame") (param i32) (result i64)
    (loop $more (drop (memory.grow (i32.const 16))) (br $more))
    (i64.const -1))
  (func (export "ebtop_message") (param i32) (result i32) (i32.const 0))
)
