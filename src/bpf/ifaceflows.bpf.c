// SPDX-License-Identifier: GPL-2.0
/*
 * Interface flows (`--iface`): bytes and packets per {interface, direction, 5-tuple} of the
 * traffic crossing an interface, local or not (forwarded, bridged, container to container),
 * from tcx ingress/egress programs (a clsact filter where tcx is refused). Never changes a
 * packet's fate: every program returns TCX_NEXT.
 *
 * Counted in the kernel per CPU (the netobserv lesson: a record per packet through a ring does
 * not scale, a shared hash throttles a single-flow burst on its bucket lock and its atomic
 * adds), read by user space once per interval (src/source/flow_table/iface.rs):
 *
 *   - iface_tables[0] is the per-CPU hash counted into now: iface_flows_a or iface_flows_b.
 *     Each interval user space points it at the other one; the kernel waits for every
 *     program that may still hold the old one to finish before that update returns (an
 *     array-of-maps update, maybe_wait_bpf_programs), so user space then reads and empties
 *     the old one alone: no increment is lost between a read and a delete.
 *   - iface_overflow: per {interface, direction}, cumulative, what did not fit in a full
 *     table (counted, never dropped).
 *
 * Packets are segments: a GSO/GRO packet of n segments counts n (gso_segs), its wire bytes
 * include the headers of each segment, its payload the L4 payload once.
 *
 * map_design (read-only data, set by user space) is the map-design benchmark's switch
 * (examples/iface_map_bench.rs): 0 the design above, 1 one shared hash with atomic adds,
 * 2 a ring record per packet. ebtop itself only ever loads design 0.
 */
#include "vmlinux_min.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>

char LICENSE[] SEC("license") = "GPL";

#include "skbuff.h"

#define ETH_P_IP 0x0800
#define ETH_P_IPV6 0x86DD
#define ETH_P_8021Q 0x8100
#define ETH_P_8021AD 0x88A8
#define AF_INET 2
#define AF_INET6 10
#define IPPROTO_TCP 6
#define IPPROTO_UDP 17

/* Layout shared with src/source/flow_table/iface.rs (little-endian; fields only appended). */
struct ebtop_iface_key {
	__u32 ifindex;
	__u8 dir;       /* 0 ingress, 1 egress */
	__u8 family;    /* AF_INET / AF_INET6; 0: not IP (ethertype says what) */
	__u8 proto;     /* IP protocol; ports 0 unless TCP or UDP (or a later fragment) */
	__u8 _pad;
	__u16 sport;    /* host order */
	__u16 dport;
	__u16 ethertype; /* host order */
	__u16 _pad2;
	__u8 saddr[16]; /* IPv4 in the first 4 bytes */
	__u8 daddr[16];
};
_Static_assert(sizeof(struct ebtop_iface_key) == 48, "iface.rs KEY_LEN must match");

struct ebtop_iface_count {
	__u64 packets; /* segments */
	__u64 bytes;   /* on the wire: L2 headers (the interface's), every segment's headers */
	__u64 payload; /* L4 payload (TCP/UDP); the IP payload for other IP protocols */
	__u64 skbs;
};
_Static_assert(sizeof(struct ebtop_iface_count) == 32, "iface.rs COUNT_LEN must match");

struct ebtop_iface_dir {
	__u32 ifindex;
	__u32 dir;
};

struct iface_table {
	__uint(type, BPF_MAP_TYPE_PERCPU_HASH);
	__uint(max_entries, 65536);
	__uint(map_flags, 1); /* BPF_F_NO_PREALLOC: memory follows the flows seen */
	__type(key, struct ebtop_iface_key);
	__type(value, struct ebtop_iface_count);
};

struct iface_table iface_flows_a SEC(".maps");
struct iface_table iface_flows_b SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY_OF_MAPS);
	__uint(max_entries, 1);
	__type(key, __u32);
	__array(values, struct iface_table);
} iface_tables SEC(".maps") = {
	.values = { [0] = &iface_flows_a },
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_HASH);
	__uint(max_entries, 4096);
	__type(key, struct ebtop_iface_dir);
	__type(value, struct ebtop_iface_count);
} iface_overflow SEC(".maps");

/* Benchmark designs only (map_design 1 and 2); user space shrinks them when unused. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 65536);
	__type(key, struct ebtop_iface_key);
	__type(value, struct ebtop_iface_count);
} iface_flows_shared SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 4096);
} iface_ring SEC(".maps");

struct ebtop_iface_record {
	struct ebtop_iface_key key;
	struct ebtop_iface_count count;
};

const volatile __u8 map_design = 0;

static __always_inline void add(struct ebtop_iface_count *c, const struct ebtop_iface_count *n)
{
	c->packets += n->packets;
	c->bytes += n->bytes;
	c->payload += n->payload;
	c->skbs += 1;
}

static __always_inline void count_overflow(const struct ebtop_iface_key *k,
					   const struct ebtop_iface_count *n)
{
	struct ebtop_iface_dir d = { .ifindex = k->ifindex, .dir = k->dir };
	struct ebtop_iface_count *c = bpf_map_lookup_elem(&iface_overflow, &d);
	if (!c) {
		struct ebtop_iface_count zero = {};
		bpf_map_update_elem(&iface_overflow, &d, &zero, BPF_NOEXIST);
		c = bpf_map_lookup_elem(&iface_overflow, &d);
		if (!c)
			return; /* 4,096 interface directions: more than any host has */
	}
	add(c, n);
}

static __always_inline void count_per_cpu(const struct ebtop_iface_key *k,
					  const struct ebtop_iface_count *n)
{
	__u32 zero = 0;
	void *table = bpf_map_lookup_elem(&iface_tables, &zero);
	if (!table)
		return;
	/* Per CPU, and a tc program does not nest in itself on a CPU: plain adds. */
	struct ebtop_iface_count *c = bpf_map_lookup_elem(table, k);
	if (!c) {
		struct ebtop_iface_count fresh = {};
		bpf_map_update_elem(table, k, &fresh, BPF_NOEXIST);
		c = bpf_map_lookup_elem(table, k);
		if (!c) {
			count_overflow(k, n);
			return;
		}
	}
	add(c, n);
}

static __always_inline void count_shared(const struct ebtop_iface_key *k,
					 const struct ebtop_iface_count *n)
{
	struct ebtop_iface_count *c = bpf_map_lookup_elem(&iface_flows_shared, k);
	if (!c) {
		struct ebtop_iface_count fresh = {};
		bpf_map_update_elem(&iface_flows_shared, k, &fresh, BPF_NOEXIST);
		c = bpf_map_lookup_elem(&iface_flows_shared, k);
		if (!c)
			return;
	}
	__sync_fetch_and_add(&c->packets, n->packets);
	__sync_fetch_and_add(&c->bytes, n->bytes);
	__sync_fetch_and_add(&c->payload, n->payload);
	__sync_fetch_and_add(&c->skbs, 1);
}

static __always_inline void count_ring(const struct ebtop_iface_key *k,
				       const struct ebtop_iface_count *n)
{
	struct ebtop_iface_record *r = bpf_ringbuf_reserve(&iface_ring, sizeof(*r), 0);
	if (!r)
		return;
	r->key = *k;
	r->count = *n;
	bpf_ringbuf_submit(r, 0);
}

/* The packet's key and counts. `l2` is the length of the interface's link-layer header at
 * the start of the packet (14 on Ethernet and loopback, 0 on L3 devices: tun, WireGuard). */
static __always_inline int count_packet(struct __sk_buff *skb, __u8 dir, __u32 l2)
{
	struct ebtop_iface_key k = {};
	k.ifindex = skb->ifindex;
	k.dir = dir;
	__u32 len = skb->len;
	__u32 segs = skb->gso_segs;
	if (segs == 0)
		segs = 1;
	__u16 ethertype = bpf_ntohs((__be16)skb->protocol);
	__u32 off = l2;
	if (l2) {
		__be16 et;
		if (bpf_skb_load_bytes(skb, 12, &et, sizeof(et)) == 0) {
			ethertype = bpf_ntohs(et);
			if (ethertype == ETH_P_8021Q || ethertype == ETH_P_8021AD) {
				/* One VLAN tag in the packet (an offloaded one is not in it). */
				if (bpf_skb_load_bytes(skb, 16, &et, sizeof(et)) == 0)
					ethertype = bpf_ntohs(et);
				off += 4;
			}
		}
	}
	k.ethertype = ethertype;
	/* Headers of one segment and the payload they carry. Not IP: the whole frame after
	 * the link-layer header is its payload. */
	__u32 hdr = off;
	__u32 l3_payload = len > off ? len - off : 0;
	__u32 l4_off = 0;
	bool fragment_after_first = false;
	if (ethertype == ETH_P_IP) {
		__u8 ip[20];
		if (bpf_skb_load_bytes(skb, off, ip, sizeof(ip)) == 0 && (ip[0] >> 4) == 4) {
			__u32 ihl = (ip[0] & 0xf) << 2;
			k.family = AF_INET;
			k.proto = ip[9];
			__builtin_memcpy(k.saddr, &ip[12], 4);
			__builtin_memcpy(k.daddr, &ip[16], 4);
			fragment_after_first = (((ip[6] & 0x1f) << 8) | ip[7]) != 0;
			__u32 tot = ((__u32)ip[2] << 8) | ip[3];
			hdr = off + ihl;
			/* One segment: its own length (an Ethernet frame may carry padding after
			 * it); a GSO packet: everything after its one header. */
			if (segs == 1 && tot >= ihl)
				l3_payload = tot - ihl;
			else
				l3_payload = len > hdr ? len - hdr : 0;
			l4_off = hdr;
		}
	} else if (ethertype == ETH_P_IPV6) {
		struct {
			__be16 payload_len;
			__u8 nexthdr;
			__u8 hop_limit;
			__u8 saddr[16];
			__u8 daddr[16];
		} ip6;
		if (bpf_skb_load_bytes(skb, off + 4, &ip6, sizeof(ip6)) == 0) {
			k.family = AF_INET6;
			k.proto = ip6.nexthdr; /* extension headers not walked: no ports then */
			__builtin_memcpy(k.saddr, ip6.saddr, 16);
			__builtin_memcpy(k.daddr, ip6.daddr, 16);
			hdr = off + 40;
			__u32 pl = bpf_ntohs(ip6.payload_len);
			if (segs == 1 && pl)
				l3_payload = pl;
			else
				l3_payload = len > hdr ? len - hdr : 0;
			l4_off = hdr;
		}
	}
	__u32 payload = l3_payload;
	if (l4_off && !fragment_after_first && (k.proto == IPPROTO_TCP || k.proto == IPPROTO_UDP)) {
		__u8 l4[14];
		__u32 want = k.proto == IPPROTO_TCP ? 14 : 8;
		if (bpf_skb_load_bytes(skb, l4_off, l4, want == 14 ? 14 : 8) == 0) {
			k.sport = ((__u16)l4[0] << 8) | l4[1];
			k.dport = ((__u16)l4[2] << 8) | l4[3];
			__u32 l4h = k.proto == IPPROTO_TCP ? (__u32)(l4[12] >> 4) << 2 : 8;
			hdr += l4h;
			payload = l3_payload > l4h ? l3_payload - l4h : 0;
		}
	}
	struct ebtop_iface_count n = {
		.packets = segs,
		/* Each segment after the first carries the headers again on the wire. */
		.bytes = (__u64)len + (__u64)(segs - 1) * hdr,
		.payload = payload,
		.skbs = 1,
	};
	if (map_design == 1)
		count_shared(&k, &n);
	else if (map_design == 2)
		count_ring(&k, &n);
	else
		count_per_cpu(&k, &n);
	return TCX_NEXT;
}

SEC("tcx/ingress")
int iface_ingress_eth(struct __sk_buff *skb)
{
	return count_packet(skb, 0, ETH_HLEN);
}

SEC("tcx/egress")
int iface_egress_eth(struct __sk_buff *skb)
{
	return count_packet(skb, 1, ETH_HLEN);
}

SEC("tcx/ingress")
int iface_ingress_l3(struct __sk_buff *skb)
{
	return count_packet(skb, 0, 0);
}

SEC("tcx/egress")
int iface_egress_l3(struct __sk_buff *skb)
{
	return count_packet(skb, 1, 0);
}
