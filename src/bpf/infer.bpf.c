// SPDX-License-Identifier: GPL-2.0
/*
 * Test harness, never attached: runs the kernel's protocol recognition (infer.h) on bytes
 * user space passes in (BPF_PROG_TEST_RUN), so the tests check the rule the capture programs
 * load, not a copy of it.
 */
#include "vmlinux_min.h"
#include <bpf/bpf_helpers.h>
#include "ebtop.h"
#include "infer.h"

char LICENSE[] SEC("license") = "GPL";

/* Layout shared with src/bpf/mod.rs (`kernel_infer`). */
struct infer_input {
	__u32 len; /* bytes captured; the rule sees at most 15 */
	__u8 bytes[16];
	__u32 dgram; /* 1: the first payload of a datagram socket */
	__u32 pos;   /* stream position of these bytes */
};

SEC("syscall")
int infer(struct infer_input *in)
{
	__u8 head[16] = {};
	__builtin_memcpy(head, in->bytes, 16);
	__u32 n = in->len < 15 ? in->len : 15;
	return infer_protocol(head, n, in->dgram != 0, in->pos);
}
