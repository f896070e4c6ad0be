// SPDX-License-Identifier: GPL-2.0
/*
 * Tests only (never loaded by ebtop): a tcx program that drops every `every`-th IPv4 packet
 * carrying payload to `port` (TCP or UDP), and counts what it dropped. This kernel has no
 * sch_netem, so tests make loss with it: the kernel then frees those skbs with the reason
 * TC_INGRESS / TC_EGRESS, and ebtop's drop counts must equal the ones here.
 * (src/bpf/drop_injector.rs attaches it.)
 */
#include "vmlinux_min.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>

char LICENSE[] SEC("license") = "GPL";

#include "skbuff.h"

#define ETH_P_IP 0x0800
#define IPPROTO_TCP 6
#define IPPROTO_UDP 17

const volatile __u16 port = 0;  /* destination port to drop from */
const volatile __u8 proto = IPPROTO_TCP;
const volatile __u32 every = 8; /* drop every n-th packet with payload */

__u64 matched = 0;      /* packets with payload to `port` seen */
__u64 dropped_skbs = 0;
__u64 dropped_segs = 0; /* segments of the skbs dropped (a GSO skb carries several) */

SEC("tcx/ingress")
int drop_every_nth(struct __sk_buff *skb)
{
	if (skb->protocol != bpf_htons(ETH_P_IP))
		return TCX_NEXT;
	struct {
		__u8 vihl;
		__u8 tos;
		__be16 tot_len;
		__be16 id;
		__be16 frag_off;
		__u8 ttl;
		__u8 protocol;
	} ip;
	if (bpf_skb_load_bytes(skb, ETH_HLEN, &ip, sizeof(ip)))
		return TCX_NEXT;
	if (ip.protocol != proto || (bpf_ntohs(ip.frag_off) & 0x1fff))
		return TCX_NEXT;
	__u32 ihl = (ip.vihl & 0xf) << 2;
	__u8 l4[14];
	if (bpf_skb_load_bytes(skb, ETH_HLEN + ihl, l4, sizeof(l4)))
		return TCX_NEXT;
	if ((((__u16)l4[2] << 8) | l4[3]) != port)
		return TCX_NEXT;
	__u32 l4_len = proto == IPPROTO_TCP ? (__u32)(l4[12] >> 4) << 2 : 8;
	/* Handshakes, bare ACKs and FINs pass: only payload is lost. */
	if (bpf_ntohs(ip.tot_len) <= ihl + l4_len)
		return TCX_NEXT;
	__u64 n = __sync_fetch_and_add(&matched, 1) + 1;
	if (every == 0 || n % every != 0)
		return TCX_NEXT;
	__sync_fetch_and_add(&dropped_skbs, 1);
	__sync_fetch_and_add(&dropped_segs, skb->gso_segs ? skb->gso_segs : 1);
	return TCX_DROP;
}
