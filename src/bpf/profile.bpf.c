// SPDX-License-Identifier: GPL-2.0
/*
 * On-CPU and off-CPU profiles (`--profile`; loaded only then). Everything is counted in the
 * kernel: a per-CPU hash of {process, thread, user stack, kernel stack, kind} → samples and
 * nanoseconds, and a stack map the stack ids point into. User space reads both once per
 * interval (the counts are cumulative: it keeps the previous reading); no record per sample.
 *
 * On-CPU: a perf_event program on the software cpu-clock of every CPU (no hardware PMU is
 * needed), one sample per tick of the task then running.
 * Off-CPU: tp_btf/sched_switch. A selected task that blocks (not preempted, state not
 * running) gets the time and its two stack ids in task storage; when it is switched in
 * again the time it was off the CPU is added to that stack if it reaches `off_cpu_min_ns`.
 * The filter runs before any stack is taken, so unselected tasks cost one test per switch.
 */
#include "vmlinux_min.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include "ebtop.h"
#include "filters.h"

char LICENSE[] SEC("license") = "GPL";

#define EBTOP_MAP_TYPE_STACK_TRACE 7
#define EBTOP_F_USER_STACK (1ULL << 8)
#ifndef BPF_F_NO_PREALLOC
#define BPF_F_NO_PREALLOC 1
#endif

/* Which tasks: the session's filters (--pid, --comm, --cgroup); none set is every task. */
const volatile __u32 filter_tgids[EBTOP_MAX_FILTER_VALUES] = {};
const volatile __u32 filter_tgid_count = 0;
const volatile char filter_comms[EBTOP_MAX_FILTER_VALUES][EBTOP_TASK_COMM_LEN] = {};
const volatile __u32 filter_comm_count = 0;
const volatile __u64 filter_cgroup_ids[EBTOP_MAX_FILTER_VALUES] = {};
const volatile __u32 filter_cgroup_levels[EBTOP_MAX_FILTER_VALUES] = {};
const volatile __u32 filter_cgroup_count = 0;
/* ebtop's own process, never profiled (its reads of these maps would profile themselves). */
const volatile __u32 own_tgid = 0;
/* Shorter blocks are counted (`PROF_SHORT_BLOCKS`), not added to a stack. */
const volatile __u64 off_cpu_min_ns = 1000000;

/* Which of the tasks the filters select are profiled (src/profile/kernel.rs `Gate`): all,
 * none (loaded and attached, waiting for a trigger: one load per run), or only the processes
 * in `armed`. Written by user space while the programs run. */
#define EBTOP_GATE_OPEN 0
#define EBTOP_GATE_CLOSED 1
#define EBTOP_GATE_LISTED 2
volatile __u32 gate_mode = EBTOP_GATE_OPEN;

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 64);
	__type(key, __u32);
	__type(value, __u8);
} armed SEC(".maps");

/* Kinds of a count; src/profile/mod.rs `Kind`. */
enum ebtop_profile_kind {
	EBTOP_PROF_ON_CPU = 0,
	/* Off the CPU in TASK_INTERRUPTIBLE: sleeps, waits on sockets, futexes, pipes. */
	EBTOP_PROF_OFF_INTERRUPTIBLE = 1,
	/* TASK_UNINTERRUPTIBLE (D): disk I/O, some kernel locks and page faults. */
	EBTOP_PROF_OFF_UNINTERRUPTIBLE = 2,
	/* Any other state the kernel gave (stopped, traced, parked, ...). */
	EBTOP_PROF_OFF_OTHER = 3,
};

struct ebtop_profile_key {
	__u32 tgid;
	__u32 pid;
	/* Stack ids in `stacks`, or a negative error (-EFAULT: none, e.g. a kernel thread's user
	 * stack; -EEXIST: the stack's bucket held another stack; -ENOMEM: the map was full). */
	__s32 user_stack;
	__s32 kernel_stack;
	__u32 kind;
	char comm[EBTOP_TASK_COMM_LEN];
};

struct ebtop_profile_value {
	__u64 count; /* samples (on-CPU) or blocks (off-CPU) */
	__u64 ns;    /* off-CPU time */
};

/* Counters (per CPU); src/profile/mod.rs reads them by these indexes. */
enum {
	PROF_SAMPLES = 0,      /* on-CPU samples of selected tasks */
	PROF_BLOCKS = 1,       /* off-CPU blocks of selected tasks that ended */
	PROF_SHORT_BLOCKS = 2, /* ... shorter than off_cpu_min_ns (not added) */
	PROF_COUNTS_FULL = 3,  /* samples or blocks lost: the counts table was full */
	PROF_NO_STORAGE = 4,   /* blocks not timed: no task storage */
	PROF_BLOCKS_RING_FULL = 5, /* blocks not put in `serve_blocks`: the ring was full */
	PROF__MAX = 8,
};

struct {
	__uint(type, EBTOP_MAP_TYPE_STACK_TRACE);
	__uint(max_entries, 16384); /* set by user space before the load */
	__uint(key_size, sizeof(__u32));
	__uint(value_size, 127 * sizeof(__u64));
} stacks SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_HASH);
	__uint(max_entries, 32768);
	__type(key, struct ebtop_profile_key);
	__type(value, struct ebtop_profile_value);
} profile_counts SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, PROF__MAX);
	__type(key, __u32);
	__type(value, __u64);
} profile_counters SEC(".maps");

/* A selected task off the CPU: since when, where (stack ids), in which state. */
struct ebtop_blocked {
	__u64 since_ns;
	__s32 user_stack;
	__s32 kernel_stack;
	__u32 kind;
	__u32 _pad;
};

struct {
	__uint(type, BPF_MAP_TYPE_TASK_STORAGE);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, int);
	__type(value, struct ebtop_blocked);
} blocked SEC(".maps");

/* Each off-CPU block added to a stack, with its thread and its bounds (src/profile/serving.rs
 * places it inside the calls the thread served). Only blocks that reach off_cpu_min_ns of
 * selected tasks: a few hundred a second per busy thread at most. A full ring drops the block
 * from the linking (counted), never from the counts above. */
struct ebtop_block {
	__u32 tgid;
	__u32 pid;
	__u64 start_ns;
	__u64 end_ns;
	__s32 user_stack;
	__s32 kernel_stack;
	__u32 kind;
	__u32 _pad;
};

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 1 << 20);
} serve_blocks SEC(".maps");

static __always_inline void count(__u32 idx)
{
	__u64 *v = bpf_map_lookup_elem(&profile_counters, &idx);
	if (v)
		(*v)++;
}

/* Whether the current task is profiled (its tgid and name given). */
static __always_inline bool selected(__u32 tgid, const char *comm)
{
	__u32 gate = gate_mode;
	if (gate == EBTOP_GATE_CLOSED || tgid == 0 || tgid == own_tgid)
		return false;
	if (gate == EBTOP_GATE_LISTED && !bpf_map_lookup_elem(&armed, &tgid))
		return false;
	if (filter_tgid_count && !u32_listed(tgid, filter_tgids, filter_tgid_count))
		return false;
	if (filter_comm_count && !comm_listed(comm, filter_comms, filter_comm_count))
		return false;
	if (filter_cgroup_count &&
	    !cgroup_listed(filter_cgroup_ids, filter_cgroup_levels, filter_cgroup_count))
		return false;
	return true;
}

static __always_inline void add(struct ebtop_profile_key *key, __u64 ns)
{
	struct ebtop_profile_value *v = bpf_map_lookup_elem(&profile_counts, key);
	if (v) {
		v->count++;
		v->ns += ns;
		return;
	}
	struct ebtop_profile_value init = { .count = 1, .ns = ns };
	/* Two CPUs may insert the same key at once: the loser adds to the winner's entry. */
	if (bpf_map_update_elem(&profile_counts, key, &init, BPF_NOEXIST) == 0)
		return;
	v = bpf_map_lookup_elem(&profile_counts, key);
	if (v) {
		v->count++;
		v->ns += ns;
	} else {
		count(PROF_COUNTS_FULL);
	}
}

SEC("perf_event")
int on_cpu_sample(void *ctx)
{
	__u64 id = bpf_get_current_pid_tgid();
	struct ebtop_profile_key key = {};
	key.tgid = id >> 32;
	key.pid = (__u32)id;
	bpf_get_current_comm(key.comm, sizeof(key.comm));
	if (!selected(key.tgid, key.comm))
		return 0;
	count(PROF_SAMPLES);
	key.user_stack = bpf_get_stackid(ctx, &stacks, EBTOP_F_USER_STACK);
	key.kernel_stack = bpf_get_stackid(ctx, &stacks, 0);
	key.kind = EBTOP_PROF_ON_CPU;
	add(&key, 0);
	return 0;
}

/* prev_state bits (include/linux/sched.h). */
#define EBTOP_TASK_INTERRUPTIBLE 0x1
#define EBTOP_TASK_UNINTERRUPTIBLE 0x2

SEC("tp_btf/sched_switch")
int BPF_PROG(off_cpu_switch, bool preempt, struct task_struct *prev, struct task_struct *next,
	     unsigned int prev_state)
{
	__u64 now = 0;
	/* `prev` is still the current task here: its stacks are the current ones. Most switches
	 * are of unselected tasks: the cheap tests (the tgid list) come first. */
	if (!preempt && prev_state != 0 && selected(prev->tgid, prev->comm)) {
		now = bpf_ktime_get_ns();
		struct ebtop_blocked *b =
			bpf_task_storage_get(&blocked, prev, 0, BPF_LOCAL_STORAGE_GET_F_CREATE);
		if (b) {
			b->since_ns = now;
			b->user_stack = bpf_get_stackid(ctx, &stacks, EBTOP_F_USER_STACK);
			b->kernel_stack = bpf_get_stackid(ctx, &stacks, 0);
			if (prev_state & EBTOP_TASK_UNINTERRUPTIBLE)
				b->kind = EBTOP_PROF_OFF_UNINTERRUPTIBLE;
			else if (prev_state & EBTOP_TASK_INTERRUPTIBLE)
				b->kind = EBTOP_PROF_OFF_INTERRUPTIBLE;
			else
				b->kind = EBTOP_PROF_OFF_OTHER;
		} else {
			count(PROF_NO_STORAGE);
		}
	}
	/* Only tasks that blocked while selected have storage: one lookup per switch. */
	struct ebtop_blocked *b = bpf_task_storage_get(&blocked, next, 0, 0);
	if (!b || b->since_ns == 0)
		return 0;
	if (now == 0)
		now = bpf_ktime_get_ns();
	__u64 off_ns = now - b->since_ns;
	b->since_ns = 0;
	count(PROF_BLOCKS);
	if (off_ns < off_cpu_min_ns) {
		count(PROF_SHORT_BLOCKS);
		return 0;
	}
	struct ebtop_profile_key key = {};
	key.tgid = next->tgid;
	key.pid = next->pid;
	bpf_probe_read_kernel(key.comm, sizeof(key.comm), next->comm);
	key.user_stack = b->user_stack;
	key.kernel_stack = b->kernel_stack;
	key.kind = b->kind;
	add(&key, off_ns);
	struct ebtop_block *r = bpf_ringbuf_reserve(&serve_blocks, sizeof(*r), 0);
	if (!r) {
		count(PROF_BLOCKS_RING_FULL);
		return 0;
	}
	r->tgid = key.tgid;
	r->pid = key.pid;
	r->start_ns = now - off_ns;
	r->end_ns = now;
	r->user_stack = key.user_stack;
	r->kernel_stack = key.kernel_stack;
	r->kind = key.kind;
	r->_pad = 0;
	bpf_ringbuf_submit(r, 0);
	return 0;
}
