// SPDX-License-Identifier: GPL-2.0
/*
 * Process lifecycle: exec (with the program's path and arguments, read in the kernel while the
 * process exists) and exit (of the last thread, with its wait status). Rare events, so one
 * record each; they keep the process table right for short-lived processes that /proc no
 * longer knows by the time user space looks, and they are recorded (-w) so a replay knows
 * them too.
 */
#include "vmlinux_min.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_core_read.h>
#include "ebtop.h"
#include "filters.h"

char LICENSE[] SEC("license") = "GPL";

/* The same process filters as sockdata.bpf.c (--pid, --comm). */
const volatile __u32 filter_tgids[EBTOP_MAX_FILTER_VALUES] = {};
const volatile __u32 filter_tgid_count = 0;
const volatile char filter_comms[EBTOP_MAX_FILTER_VALUES][EBTOP_TASK_COMM_LEN] = {};
const volatile __u32 filter_comm_count = 0;
const volatile __u64 filter_cgroup_ids[EBTOP_MAX_FILTER_VALUES] = {};
const volatile __u32 filter_cgroup_levels[EBTOP_MAX_FILTER_VALUES] = {};
const volatile __u32 filter_cgroup_count = 0;
/* Wake the consumer only once this much waits (it also polls on a short timeout). */
const volatile __u64 wakeup_bytes = 64 * 1024;
/* An exec wakes user space at once (the TLS probes look at each new program: the sooner,
 * the fewer of its first calls go by unprobed). */
const volatile bool wake_on_exec = false;

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 1024 * 1024);
} proc_events SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, EBTOP_PCNT__MAX);
	__type(key, __u32);
	__type(value, __u64);
} proc_counters SEC(".maps");

struct proc_scratch {
	struct ebtop_proc_event ev;
	/* The filename at 0 (offset of the arguments bounded by 2 * MAX_FILENAME for the verifier),
	 * the arguments, then the file's identity. */
	char data[2 * EBTOP_PROC_MAX_FILENAME + EBTOP_PROC_MAX_ARGS + sizeof(struct ebtop_exe_id)];
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct proc_scratch);
} proc_scratch_buf SEC(".maps");

static __always_inline void count(__u32 idx)
{
	__u64 *v = bpf_map_lookup_elem(&proc_counters, &idx);
	if (v)
		*v += 1; /* per-CPU slot: no other writer */
}

static __always_inline bool selected(__u32 tgid, const char *comm)
{
	if (filter_tgid_count && !u32_listed(tgid, filter_tgids, filter_tgid_count))
		return false;
	if (filter_cgroup_count &&
	    !cgroup_listed(filter_cgroup_ids, filter_cgroup_levels, filter_cgroup_count))
		return false;
	return !filter_comm_count || comm_listed(comm, filter_comms, filter_comm_count);
}

/* The scratch record with the common fields filled, or NULL if the process is filtered out. */
static __always_inline struct proc_scratch *start_record(__u32 kind, struct task_struct *task)
{
	__u32 zero = 0;
	struct proc_scratch *s = bpf_map_lookup_elem(&proc_scratch_buf, &zero);
	if (!s)
		return NULL;
	struct ebtop_proc_event *ev = &s->ev;
	bpf_get_current_comm(ev->comm, sizeof(ev->comm));
	__u32 tgid = bpf_get_current_pid_tgid() >> 32;
	if (!selected(tgid, ev->comm))
		return NULL;
	ev->ts_ns = bpf_ktime_get_ns();
	ev->kind = kind;
	ev->pid = tgid;
	ev->ppid = BPF_CORE_READ(task, real_parent, tgid);
	ev->exit_code = 0;
	ev->filename_len = 0;
	ev->args_len = 0;
	ev->args_total = 0;
	ev->cap_len = 0;
	return s;
}

static __always_inline void emit(struct proc_scratch *s, __u32 cap, bool wake)
{
	if (cap > sizeof(s->data))
		return;
	__u64 size = sizeof(s->ev) + cap;
	__u64 flags = wake || bpf_ringbuf_query(&proc_events, BPF_RB_AVAIL_DATA) >= wakeup_bytes
			      ? BPF_RB_FORCE_WAKEUP
			      : BPF_RB_NO_WAKEUP;
	if (bpf_ringbuf_output(&proc_events, s, size, flags))
		count(EBTOP_PCNT_LOST);
	else
		count(EBTOP_PCNT_EVENTS);
}

SEC("tracepoint/sched/sched_process_exec")
int on_exec(struct trace_event_raw_sched_process_exec *ctx)
{
	struct task_struct *task = (struct task_struct *)bpf_get_current_task();
	struct proc_scratch *s = start_record(EBTOP_PROC_EXEC, task);
	if (!s)
		return 0;
	struct ebtop_proc_event *ev = &s->ev;

	__u32 loc = ctx->__data_loc_filename;
	long n = bpf_probe_read_kernel_str(s->data, EBTOP_PROC_MAX_FILENAME,
					   (void *)ctx + (loc & 0xffff));
	__u32 name_len = n > 0 ? (__u32)n - 1 : 0; /* without its NUL */
	if (n <= 0)
		s->data[0] = 0;
	ev->filename_len = name_len;

	/* The new program's argv: still in place at the top of its stack. */
	struct mm_struct *mm = BPF_CORE_READ(task, mm);
	__u64 start = BPF_CORE_READ(mm, arg_start);
	__u64 end = BPF_CORE_READ(mm, arg_end);
	__u64 total = end > start ? end - start : 0;
	__u32 len = total < EBTOP_PROC_MAX_ARGS - 1 ? (__u32)total : EBTOP_PROC_MAX_ARGS - 1;
	__u32 off = (name_len + 1) & (2 * EBTOP_PROC_MAX_FILENAME - 1);
	len &= EBTOP_PROC_MAX_ARGS - 1;
	if (len && bpf_probe_read_user(s->data + off, len, (void *)start))
		len = 0;
	ev->args_len = len;
	ev->args_total = total > 0xffffffff ? 0xffffffff : (__u32)total;

	struct inode *inode = BPF_CORE_READ(mm, exe_file, f_inode);
	struct ebtop_exe_id id = {
		.ino = BPF_CORE_READ(inode, i_ino),
		.dev = BPF_CORE_READ(inode, i_sb, s_dev),
	};
	__u32 cap = off + len;
	if (cap > 2 * EBTOP_PROC_MAX_FILENAME + EBTOP_PROC_MAX_ARGS)
		return 0; /* never: for the verifier */
	__builtin_memcpy(s->data + cap, &id, sizeof(id));
	ev->cap_len = cap + sizeof(id);
	emit(s, cap + sizeof(id), wake_on_exec);
	return 0;
}

SEC("tracepoint/sched/sched_process_exit")
int on_exit(void *ctx)
{
	struct task_struct *task = (struct task_struct *)bpf_get_current_task();
	/* Every thread passes here; the process ends with the last one. */
	if (BPF_CORE_READ(task, signal, live.counter) != 0)
		return 0;
	struct proc_scratch *s = start_record(EBTOP_PROC_EXIT, task);
	if (!s)
		return 0;
	s->ev.exit_code = BPF_CORE_READ(task, exit_code);
	emit(s, 0, false);
	return 0;
}

/*
 * A dlopen() returned a library (uretprobe on the C library's dlopen, placed with the TLS
 * probes): the process may now map a libssl from anywhere — an application's own directory,
 * a virtualenv — which the TLS probes look at at once. No record when dlopen failed.
 */
#if defined(__TARGET_ARCH_arm64)
#define DLOPEN_RET(c) ((c)->regs[0])
#else
#define DLOPEN_RET(c) ((c)->ax)
#endif

SEC("uretprobe")
int on_dlopen_return(struct pt_regs *ctx)
{
	if (!DLOPEN_RET(ctx))
		return 0;
	struct task_struct *task = (struct task_struct *)bpf_get_current_task();
	struct proc_scratch *s = start_record(EBTOP_PROC_LOADED, task);
	if (!s)
		return 0;
	emit(s, 0, true);
	return 0;
}
