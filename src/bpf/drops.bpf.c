// SPDX-License-Identifier: GPL-2.0
/*
 * Packet drops with the kernel's reason: tp_btf/kfree_skb (Linux >= 5.17 for the reason) fires
 * for every skb the kernel frees as dropped (consumed skbs go to consume_skb). Counted in the
 * kernel per CPU, never a record per packet; user space reads the maps once per interval
 * (src/source/flow_table/drops.rs) and names the reasons from the kernel's BTF enum
 * skb_drop_reason.
 *
 *   - drop_totals  per {netns, ifindex, reason}: every drop with a reason beyond
 *                  NOT_SPECIFIED (those are counted apart: any kfree_skb() without a reason,
 *                  most of them no loss at all).
 *   - drop_tuples  per {netns, ifindex, reason, L4 5-tuple from the packet's headers}: what
 *                  user space joins to the flow table's flows by address (a drop before the
 *                  socket lookup has no socket; the headers name the flow). Full map: the drop
 *                  still counts in drop_totals and in DC_TUPLES_FULL.
 *
 * Packets are segments: a GSO/GRO skb of n segments counts n (skb_shinfo()->gso_segs).
 * Loopback is included (the netobserv agent skips it).
 */
#include "vmlinux_min.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_core_read.h>
#include <bpf/bpf_endian.h>

char LICENSE[] SEC("license") = "GPL";

#define ETH_P_IP 0x0800
#define ETH_P_IPV6 0x86DD
#define AF_INET 2
#define AF_INET6 10
#define IPPROTO_TCP 6
#define IPPROTO_UDP 17
#define SKB_DROP_REASON_NOT_SPECIFIED 2

struct ns_common___drops {
	unsigned int inum;
} __attribute__((preserve_access_index));

struct net___drops {
	struct ns_common___drops ns;
} __attribute__((preserve_access_index));

struct possible_net___drops {
	struct net___drops *net;
} __attribute__((preserve_access_index));

struct net_device___drops {
	int ifindex;
	struct possible_net___drops nd_net;
} __attribute__((preserve_access_index));

struct sk_buff___drops {
	unsigned int len;
	__u16 transport_header;
	__u16 network_header;
	__be16 protocol;
	unsigned int end; /* an offset from head on 64-bit kernels (NET_SKBUFF_DATA_USES_OFFSET) */
	unsigned char *head;
	struct net_device___drops *dev;
} __attribute__((preserve_access_index));

struct skb_shared_info___drops {
	unsigned short gso_segs;
} __attribute__((preserve_access_index));

/* Layout shared with src/source/flow_table/drops.rs (little-endian, fields only appended). */
struct ebtop_drop_key {
	__u32 netns;   /* inode of the device's network namespace; 0: no device */
	__u32 ifindex; /* 0: no device */
	__u32 reason;  /* enum skb_drop_reason */
};

struct ebtop_drop_tuple {
	struct ebtop_drop_key at;
	__u8 family; /* AF_INET / AF_INET6 */
	__u8 proto;  /* IPPROTO_TCP / IPPROTO_UDP / other (ports 0) */
	__u16 sport; /* host order */
	__u16 dport;
	__u16 _pad;
	__u8 saddr[16]; /* IPv4 in the first 4 bytes */
	__u8 daddr[16];
};
_Static_assert(sizeof(struct ebtop_drop_tuple) == 52, "drops.rs TUPLE_LEN must match");

struct ebtop_drop_count {
	__u64 packets; /* segments */
	__u64 skbs;
	__u64 bytes;   /* skb->len: headers included */
	__u64 last_ns;
};

enum ebtop_drop_counter {
	DC_UNSPECIFIED = 0, /* kfree_skb without a reason (NOT_SPECIFIED): not counted as drops */
	DC_TOTALS_FULL,     /* drops not counted at all: drop_totals full */
	DC_TUPLES_FULL,     /* drops counted without their flow: drop_tuples full */
	DC_NO_HEADERS,      /* drops whose packet had no IP header to read (counted without flow) */
	DC__MAX,
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_HASH);
	__uint(max_entries, 4096);
	__type(key, struct ebtop_drop_key);
	__type(value, struct ebtop_drop_count);
} drop_totals SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_HASH);
	__uint(max_entries, 16384);
	__uint(map_flags, 1); /* BPF_F_NO_PREALLOC: memory follows the tuples seen */
	__type(key, struct ebtop_drop_tuple);
	__type(value, struct ebtop_drop_count);
} drop_tuples SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, DC__MAX);
	__type(key, __u32);
	__type(value, __u64);
} drop_counters SEC(".maps");

static __always_inline void dcount(__u32 idx, __u64 n)
{
	__u64 *v = bpf_map_lookup_elem(&drop_counters, &idx);
	/* Per CPU, and this program does not nest in itself on a CPU (tp_btf's recursion
	 * guard): a plain add. */
	if (v)
		*v += n;
}

/* Adds the drop to `key`'s count in `map`; false if the map had no room. */
static __always_inline bool add_drop(void *map, const void *key, __u64 segs, __u64 len,
				     __u64 now)
{
	struct ebtop_drop_count *c = bpf_map_lookup_elem(map, key);
	if (!c) {
		struct ebtop_drop_count fresh = {};
		bpf_map_update_elem(map, key, &fresh, BPF_NOEXIST);
		c = bpf_map_lookup_elem(map, key);
		if (!c)
			return false;
	}
	c->packets += segs;
	c->skbs += 1;
	c->bytes += len;
	c->last_ns = now;
	return true;
}

struct l4_ports {
	__be16 source;
	__be16 dest;
};

/* The packet's addresses and ports from its IP header (at skb->head + network_header); false
 * if it has none this can read. IPv6 extension headers are not walked: ports stay 0. */
static __always_inline bool read_tuple(struct sk_buff___drops *skb, struct ebtop_drop_tuple *t)
{
	__u16 nh = skb->network_header;
	if (nh == (__u16)~0U)
		return false;
	unsigned char *head = skb->head;
	__u16 proto = bpf_ntohs(skb->protocol);
	unsigned char *l4;
	if (proto == ETH_P_IP) {
		/* Byte by byte: a struct would be padded to align its addresses. */
		__u8 ip[20];
		if (bpf_probe_read_kernel(ip, sizeof(ip), head + nh))
			return false;
		if ((ip[0] >> 4) != 4)
			return false;
		t->family = AF_INET;
		t->proto = ip[9];
		__builtin_memcpy(t->saddr, &ip[12], 4);
		__builtin_memcpy(t->daddr, &ip[16], 4);
		/* A fragment after the first carries no ports. */
		if (((ip[6] & 0x1f) << 8 | ip[7]) != 0)
			return true;
		l4 = head + nh + ((ip[0] & 0xf) << 2);
	} else if (proto == ETH_P_IPV6) {
		struct {
			__u8 nexthdr;
			__u8 hop_limit;
			__u8 saddr[16];
			__u8 daddr[16];
		} ip6;
		if (bpf_probe_read_kernel(&ip6, sizeof(ip6), head + nh + 6))
			return false;
		t->family = AF_INET6;
		t->proto = ip6.nexthdr;
		__builtin_memcpy(t->saddr, ip6.saddr, 16);
		__builtin_memcpy(t->daddr, ip6.daddr, 16);
		l4 = head + nh + 40;
	} else {
		return false;
	}
	if (t->proto == IPPROTO_TCP || t->proto == IPPROTO_UDP) {
		struct l4_ports p;
		if (bpf_probe_read_kernel(&p, sizeof(p), l4) == 0) {
			t->sport = bpf_ntohs(p.source);
			t->dport = bpf_ntohs(p.dest);
		}
	}
	return true;
}

SEC("tp_btf/kfree_skb")
int packet_drop(__u64 *args)
{
	struct sk_buff___drops *skb = (struct sk_buff___drops *)args[0];
	__u32 reason = (__u32)args[2];
	if (!skb)
		return 0;
	if (reason <= SKB_DROP_REASON_NOT_SPECIFIED) {
		dcount(DC_UNSPECIFIED, 1);
		return 0;
	}
	struct ebtop_drop_tuple t = {};
	t.at.reason = reason;
	/* The skb is a BTF pointer here: its fields, and the device's, are plain loads (a fault
	 * reads 0), not probe reads (≈35 ns each). */
	struct net_device___drops *dev = skb->dev;
	if (dev) {
		t.at.ifindex = dev->ifindex;
		struct net___drops *net = dev->nd_net.net;
		if (net)
			t.at.netns = net->ns.inum;
	}
	unsigned char *head = skb->head;
	unsigned int end = skb->end;
	__u16 gso_segs = 0;
	struct skb_shared_info___drops *sh = (struct skb_shared_info___drops *)(head + end);
	bpf_probe_read_kernel(&gso_segs, sizeof(gso_segs), &sh->gso_segs);
	__u64 segs = gso_segs ? gso_segs : 1;
	__u64 len = skb->len;
	__u64 now = bpf_ktime_get_ns();
	if (!add_drop(&drop_totals, &t.at, segs, len, now)) {
		dcount(DC_TOTALS_FULL, segs);
		return 0;
	}
	if (!read_tuple(skb, &t)) {
		dcount(DC_NO_HEADERS, segs);
		return 0;
	}
	if (!add_drop(&drop_tuples, &t, segs, len, now))
		dcount(DC_TUPLES_FULL, segs);
	return 0;
}
