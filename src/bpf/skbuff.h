/* SPDX-License-Identifier: GPL-2.0 */
/* The UAPI context of tc/tcx programs (linux/bpf.h `struct __sk_buff`: a fixed layout the
 * kernel rewrites into its own skb loads), as far as ebtop's tc programs use it, and the tcx
 * verdicts. Shared by ifaceflows.bpf.c and the tests' testdrop.bpf.c. */
#ifndef EBTOP_SKBUFF_H
#define EBTOP_SKBUFF_H

struct __sk_buff {
	__u32 len;
	__u32 pkt_type;
	__u32 mark;
	__u32 queue_mapping;
	__u32 protocol;
	__u32 vlan_present;
	__u32 vlan_tci;
	__u32 vlan_proto;
	__u32 priority;
	__u32 ingress_ifindex;
	__u32 ifindex;
	__u32 tc_index;
	__u32 cb[5];
	__u32 hash;
	__u32 tc_classid;
	__u32 data;
	__u32 data_end;
	__u32 napi_id;
	__u32 family;
	__u32 remote_ip4;
	__u32 local_ip4;
	__u32 remote_ip6[4];
	__u32 local_ip6[4];
	__u32 remote_port;
	__u32 local_port;
	__u32 data_meta;
	__u64 flow_keys;
	__u64 tstamp;
	__u32 wire_len;
	__u32 gso_segs;
};

/* tcx verdicts (enum tcx_action_base); TC_ACT_UNSPEC (-1) means the same to a clsact filter:
 * go on as if this program were not there. */
#define TCX_NEXT -1
#define TCX_DROP 2
#define ETH_HLEN 14

#endif
