/* SPDX-License-Identifier: GPL-2.0 */
/* Filter helpers shared by the BPF programs (each keeps its own `const volatile` settings). */
#ifndef EBTOP_FILTERS_H
#define EBTOP_FILTERS_H

/* Most values of one filter (`--pid`, `--comm`, `--port`); filters::MAX_FILTER_VALUES. */
#define EBTOP_MAX_FILTER_VALUES 8

/* Whether task name `comm` equals `want` (both NUL-padded, at most 16 bytes). */
static __always_inline bool comm_equals(const char *comm, const volatile char *want)
{
	for (int i = 0; i < EBTOP_TASK_COMM_LEN; i++) {
		if (comm[i] != want[i])
			return false;
		if (comm[i] == 0)
			break;
	}
	return true;
}

/* Whether `v` is one of the first `n` values of `list`. */
static __always_inline bool u32_listed(__u32 v, const volatile __u32 *list, __u32 n)
{
	for (int i = 0; i < EBTOP_MAX_FILTER_VALUES; i++) {
		if (i >= n)
			break;
		if (list[i] == v)
			return true;
	}
	return false;
}

static __always_inline bool u16_listed(__u16 v, const volatile __u16 *list, __u32 n)
{
	for (int i = 0; i < EBTOP_MAX_FILTER_VALUES; i++) {
		if (i >= n)
			break;
		if (list[i] == v)
			return true;
	}
	return false;
}

/*
 * Whether the current task is inside one of the first `n` cgroups (v2 ids, each with its
 * depth below the root): the cgroup itself or any cgroup beneath it.
 */
static __always_inline bool cgroup_listed(const volatile __u64 *ids, const volatile __u32 *levels,
					  __u32 n)
{
	for (int i = 0; i < EBTOP_MAX_FILTER_VALUES; i++) {
		if (i >= n)
			break;
		if (bpf_get_current_ancestor_cgroup_id(levels[i]) == ids[i])
			return true;
	}
	return false;
}

/* Whether task name `comm` is one of the first `n` names of `list`. */
static __always_inline bool comm_listed(const char *comm,
					const volatile char (*list)[EBTOP_TASK_COMM_LEN], __u32 n)
{
	for (int i = 0; i < EBTOP_MAX_FILTER_VALUES; i++) {
		if (i >= n)
			break;
		if (comm_equals(comm, list[i]))
			return true;
	}
	return false;
}

#endif
