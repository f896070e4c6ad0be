/* SPDX-License-Identifier: GPL-2.0 */
/* A task's name read with plain loads through its BTF pointer (the capture's records and the
 * flow table's UDP entries). */
#ifndef EBTOP_TASKCOMM_H
#define EBTOP_TASKCOMM_H

/*
 * A word of a task name with the bytes from its first NUL on zeroed (little-endian), without
 * a branch: the lowest flag of the zero-byte test is exact (bit 8k+7 for the first zero byte
 * k), and no flag leaves the word whole.
 */
static __always_inline __u64 comm_word_mask(__u64 w)
{
	__u64 zero = (w - 0x0101010101010101ULL) & ~w & 0x8080808080808080ULL;
	return ((zero & -zero) >> 7) - 1;
}

/*
 * The task's name as bpf_get_current_comm gives it (zeroed after its NUL), read with two plain
 * loads through the task's BTF pointer: the helper's strscpy and padding cost about as much as
 * the rest of a record's header.
 */
static __always_inline void task_comm(struct task_struct *task, char *dst)
{
	const __u64 *name = (const __u64 *)task->comm;
	__u64 lo = name[0], hi = name[1];
	__u64 lo_mask = comm_word_mask(lo);
	/* The second word counts only if the first held no NUL (its mask all ones, bit 63 set:
	 * a NUL at byte k leaves bits 8k and up clear). */
	__u64 hi_mask = comm_word_mask(hi) & (__u64)((__s64)lo_mask >> 63);
	lo &= lo_mask;
	hi &= hi_mask;
	__builtin_memcpy(dst, &lo, 8);
	__builtin_memcpy(dst + 8, &hi, 8);
}

/* The current task's name (see task_comm). */
static __always_inline void current_comm(char *dst)
{
	task_comm(bpf_get_current_task_btf(), dst);
}

#endif
