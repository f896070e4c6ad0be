/* SPDX-License-Identifier: GPL-2.0 */
/*
 * Which goroutine started which (call chains, issue 50, src/chains.rs): the calls a goroutine
 * makes that a request's handler started (`go func()`, errgroup fan-out) serve that request
 * while it is open. Creation events only, never a probe per goroutine switch, and no
 * uretprobe (Go moves goroutine stacks: a rewritten return address kills the program).
 *
 * A `go` statement is a call to `runtime.newproc(fn)`, on the goroutine that runs it, which
 * runs `newg := newproc1(fn, gp, pc, ...); runqput(pp, newg, true)` on the system stack
 * (the closure `runtime.newproc.func1`, called through `systemstack`: the same thread, no
 * goroutine switch in between). Two probes, both of instructions the kernel emulates (no
 * single step):
 *   - go_spawn_enter, at newproc's entry (the push after the stack check): the creating
 *     goroutine, proved as every record's (gochain.h: its stack bounds hold the stack
 *     pointer; newproc1's own `callergp` argument could not be proved, its stack pointer is
 *     the system stack's), kept per thread;
 *   - go_spawn_queued, at newproc.func1's call of runqput: its second argument is the new g
 *     (src/tls/golang.rs proves the register holds newproc1's result there, else no creation
 *     tracking for that file). One record: EBTOP_GO_SPAWN, the child's g in seq, the creator's
 *     after the record. Without a creator kept (probes placed in between): EBTOP_GO_NEW_G.
 * newproc1's other callers (runtime closures: coroutines `newcoro`, debugger call injection,
 * `testing/synctest`) reuse dead g's too: go_spawn_other, right after each of their calls to
 * newproc1 (single-stepped: rare paths), says the g in RAX (newproc1's result) is a new
 * goroutine of no known creator (EBTOP_GO_NEW_G), so a g's older creation is never taken for
 * it. Only with go_goroutines (the chains are on) and for selected processes, as gohttp.h.
 * arm64: the programs build (argument registers per Go's ABI) but src/tls/golang.rs decodes
 * only x86-64, so no sites are found there.
 */
#ifndef EBTOP_GOSPAWN_H
#define EBTOP_GOSPAWN_H

/* Per thread: the goroutine whose newproc runs (0: none). */
struct {
	__uint(type, BPF_MAP_TYPE_TASK_STORAGE);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, int);
	__type(value, __u64);
} go_spawners SEC(".maps");

/* func newproc(fn *funcval): the push after the stack check, on the creating goroutine. */
SEC("uprobe")
int go_spawn_enter(struct pt_regs *ctx)
{
	__u32 tgid = bpf_get_current_pid_tgid() >> 32;
	if (!go_goroutines || !task_selected(tgid))
		return 0;
	tls_count_hit(ctx, tgid);
	struct task_struct *task = bpf_get_current_task_btf();
	__u64 *parent =
		bpf_task_storage_get(&go_spawners, task, 0, BPF_LOCAL_STORAGE_GET_F_CREATE);
	if (parent)
		*parent = go_prove(task); /* 0 when none is proved: the child's creator unknown */
	return 0;
}

/* newproc.func1's `CALL runqput(pp, newg, next)`: newg in the second argument register. */
SEC("uprobe")
int go_spawn_queued(struct pt_regs *ctx)
{
	__u64 id = bpf_get_current_pid_tgid();
	__u32 tgid = id >> 32;
	if (!go_goroutines || !task_selected(tgid))
		return 0;
	tls_count_hit(ctx, tgid);
	__u64 child = GO_ARG2(ctx);
	asm volatile("" : "+r"(child));
	if (!child)
		return 0;
	__u64 *kept = bpf_task_storage_get(&go_spawners, bpf_get_current_task_btf(), 0, 0);
	__u64 parent = kept ? *kept : 0;
	if (kept)
		*kept = 0; /* taken: one creation per newproc */
	if (parent)
		go_http_emit(id, EBTOP_GO_SPAWN, child, parent);
	else
		go_http_emit(id, EBTOP_GO_NEW_G, child, child);
	return 0;
}

/* Right after another runtime closure's call of newproc1: its result (the new g) in RAX. */
SEC("uprobe")
int go_spawn_other(struct pt_regs *ctx)
{
	__u64 id = bpf_get_current_pid_tgid();
	__u32 tgid = id >> 32;
	if (!go_goroutines || !task_selected(tgid))
		return 0;
	tls_count_hit(ctx, tgid);
	__u64 g = GO_ARG1(ctx);
	asm volatile("" : "+r"(g));
	if (g)
		go_http_emit(id, EBTOP_GO_NEW_G, g, g);
	return 0;
}

#endif
