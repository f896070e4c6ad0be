/* SPDX-License-Identifier: GPL-2.0 */
/* A socket's addresses (CO-RE), shared by the capture and flow-table programs. IPv4 fills the
 * first 4 bytes and leaves the rest as they are; IPv6 fills all 16. */
#ifndef EBTOP_SOCKADDR_H
#define EBTOP_SOCKADDR_H

#ifndef AF_INET
#define AF_INET 2
#endif

static __always_inline void sock_local_addr(struct sock *sk, __u16 family, __u8 *addr)
{
	if (family == AF_INET) {
		__u32 a = BPF_CORE_READ(sk, __sk_common.skc_rcv_saddr);
		__builtin_memcpy(addr, &a, 4);
	} else {
		BPF_CORE_READ_INTO((struct in6_addr *)addr, sk, __sk_common.skc_v6_rcv_saddr);
	}
}

static __always_inline void sock_remote_addr(struct sock *sk, __u16 family, __u8 *addr)
{
	if (family == AF_INET) {
		__u32 b = BPF_CORE_READ(sk, __sk_common.skc_daddr);
		__builtin_memcpy(addr, &b, 4);
	} else {
		BPF_CORE_READ_INTO((struct in6_addr *)addr, sk, __sk_common.skc_v6_daddr);
	}
}

/*
 * The same by plain loads (≈1 ns each, fault-safe) for a socket tp_btf handed over as a BTF
 * pointer; the probe reads above (≈35 ns each) stay for the syscall path's socket, found by an
 * fd walk the verifier cannot follow. `addr` is 4-byte aligned.
 */
static __always_inline void sock_local_addr_btf(struct sock *sk, __u16 family, __u8 *addr)
{
	__u32 *a = (__u32 *)addr;
	if (family == AF_INET) {
		a[0] = sk->__sk_common.skc_rcv_saddr;
		return;
	}
#pragma unroll
	for (int i = 0; i < 4; i++)
		a[i] = sk->__sk_common.skc_v6_rcv_saddr.in6_u.u6_addr32[i];
}

static __always_inline void sock_remote_addr_btf(struct sock *sk, __u16 family, __u8 *addr)
{
	__u32 *a = (__u32 *)addr;
	if (family == AF_INET) {
		a[0] = sk->__sk_common.skc_daddr;
		return;
	}
#pragma unroll
	for (int i = 0; i < 4; i++)
		a[i] = sk->__sk_common.skc_v6_daddr.in6_u.u6_addr32[i];
}

#endif
