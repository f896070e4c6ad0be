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

#endif
