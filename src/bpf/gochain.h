/* SPDX-License-Identifier: GPL-2.0 */
/*
 * Which Go goroutine made a syscall (call chains, issue 50): a goroutine moves between threads
 * (a read parks in the netpoller and resumes elsewhere; many goroutines take turns on one
 * thread), so the thread says nothing of which request a Go program's call serves.
 *
 * Go's register ABI (1.17+) keeps the running goroutine's `g` in a register (R14 on amd64, R28
 * on arm64) in all Go code, and a syscall saves it with the other user registers: the g of
 * the goroutine that made it is in the task's saved registers, at the syscall and at a uprobe
 * trap alike — no probe on the scheduler (runtime.execute, casgstatus), so nothing is paid
 * per goroutine switch. It is trusted only when proved: a g begins with its stack's bounds
 * (`g.stack.lo`, `g.stack.hi`, the first two words in every Go version), and the user stack
 * pointer at the syscall must lie between them — goroutine stacks never overlap, so only the
 * running goroutine's g passes, whatever put its address in the register. Code that is not Go (C, or a Go program's cgo
 * calls) has no reason to keep such a pointer in R14; when it does, the pointer names a
 * structure that bounds the very stack the code runs on — that stack's execution context,
 * so still never two threads' at once. Costs one user read of 16 bytes per record (only
 * with `go_goroutines` set), and a thread whose first GO_TASK_TRIES records in a row had no
 * goroutine is not asked again (per task: a thread of a program that is not Go pays a
 * task-storage lookup from then on). A Go thread never stops being asked once it had one.
 * A Go program's thread whose first records were all cgo's C code is then never asked: its
 * records carry no goroutine, which the chains count and never link (src/chains.rs).
 */
#ifndef EBTOP_GOCHAIN_H
#define EBTOP_GOCHAIN_H

/* Set by user space: records carry the goroutine (EBTOP_F_GOROUTINE) where one is proved. */
const volatile bool go_goroutines = false;

#if defined(__TARGET_ARCH_arm64)
#define GOCHAIN_G(r) ((r)->regs[28])
#else
#define GOCHAIN_G(r) ((r)->r14)
#endif

#ifndef BPF_F_NO_PREALLOC
#define BPF_F_NO_PREALLOC 1 /* required of local storage maps */
#endif

/* Per task: whether its records had a goroutine. */
#define GO_TASK_UNKNOWN 0
#define GO_TASK_GO 1
#define GO_TASK_NOT_GO 2
#define GO_TASK_TRIES 16

struct go_task {
	__u8 state;
	__u8 misses; /* records without a goroutine while UNKNOWN */
};

struct {
	__uint(type, BPF_MAP_TYPE_TASK_STORAGE);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, int);
	__type(value, struct go_task);
} go_tasks SEC(".maps");

/* Goroutine stacks are at least 2 KiB and, in every Go so far, at most 1 GiB. */
#define GOCHAIN_MIN_STACK 2048ULL
#define GOCHAIN_MAX_STACK (1ULL << 30)

/* The goroutine `task` runs (its g's address), or 0 when none is proved. */
static __always_inline __u64 go_prove(struct task_struct *task)
{
	struct pt_regs *regs = (struct pt_regs *)bpf_task_pt_regs(task);
	if (!regs)
		return 0;
	__u64 g = GOCHAIN_G(regs); /* a BTF pointer: plain loads */
	__u64 sp = regs->sp;
	if (!g || (g & 7))
		return 0;
	__u64 bounds[2];
	if (bpf_probe_read_user(bounds, sizeof(bounds), (void *)g))
		return 0;
	__u64 size = bounds[1] - bounds[0];
	if (bounds[1] <= bounds[0] || size < GOCHAIN_MIN_STACK || size > GOCHAIN_MAX_STACK ||
	    sp < bounds[0] || sp >= bounds[1])
		return 0;
	return g;
}

/*
 * The current task's goroutine, or 0: none proved, or a thread that is no Go program's.
 * `sock_hint` (or NULL): the socket's own byte, GO_TASK_NOT_GO once a record of it came from a
 * thread known not to be a Go program's — its later records spare the task-storage lookup (a
 * socket is one program's; one handed to a Go program by another, rare, then names no
 * goroutine: the chains count such calls unknown, never link them wrongly).
 */
static __always_inline __u64 go_goroutine(__u8 *sock_hint)
{
	if (!go_goroutines || (sock_hint && *sock_hint == GO_TASK_NOT_GO))
		return 0;
	struct task_struct *task = bpf_get_current_task_btf();
	struct go_task *t =
		bpf_task_storage_get(&go_tasks, task, 0, BPF_LOCAL_STORAGE_GET_F_CREATE);
	if (t && t->state == GO_TASK_NOT_GO) {
		if (sock_hint)
			*sock_hint = GO_TASK_NOT_GO;
		return 0;
	}
	__u64 g = go_prove(task);
	if (t && t->state == GO_TASK_UNKNOWN) {
		if (g)
			t->state = GO_TASK_GO;
		else if (++t->misses >= GO_TASK_TRIES)
			t->state = GO_TASK_NOT_GO;
	}
	return g;
}

#endif
