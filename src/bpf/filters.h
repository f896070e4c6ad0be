/* SPDX-License-Identifier: GPL-2.0 */
/* Filter helpers shared by the BPF programs (each keeps its own `const volatile` settings). */
#ifndef EBTOP_FILTERS_H
#define EBTOP_FILTERS_H

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

#endif
