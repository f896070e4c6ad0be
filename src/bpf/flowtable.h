/* SPDX-License-Identifier: GPL-2.0 */
/*
 * The flow table's records and maps, and the work each socket send or receive does on them
 * (UDP counters, naming a server flow's owner). flows.bpf.c owns the maps; on the socket-layer
 * capture path sockcap.bpf.c includes this too and user space hands it the flow table's maps
 * (libbpf reuse_fd), so the capture program does this work in its own run on
 * sock_send_length/sock_recv_length instead of a second program on every send and receive.
 */
#ifndef EBTOP_FLOWTABLE_H
#define EBTOP_FLOWTABLE_H

#include "sockaddr.h"
#include "taskcomm.h"

#ifndef AF_INET6
#define AF_INET6 10
#endif
#ifndef IPPROTO_UDP
#define IPPROTO_UDP 17
#endif
#ifndef BPF_F_NO_PREALLOC
#define BPF_F_NO_PREALLOC 1
#endif

/* Layout shared with src/flows/raw.rs (little-endian, fields only appended). */
enum ebtop_flow_role {
	EBTOP_ROLE_UNKNOWN = 0,
	EBTOP_ROLE_CLIENT = 1,
	EBTOP_ROLE_SERVER = 2,
};

enum ebtop_flow_flags {
	EBTOP_FLOW_PREEXISTING = 1 << 0, /* open before ebtop started (no SYN seen) */
	EBTOP_FLOW_SNAPPED = 1 << 1,     /* tcp_sock counters were read at least once */
	EBTOP_FLOW_PEER_FIN = 1 << 2,    /* at close: the peer's FIN was received (SOCK_DONE) */
	EBTOP_FLOW_CLOSE_UNSEEN = 1 << 3, /* ended when a new socket took its address: its close
					   * and its socket's destruction were both missed, its
					   * counters are as last read */
};

struct ebtop_flow {
	__u64 start_ns;       /* SYN sent/received, or first seen (pre-existing) */
	__u64 syn_ns;         /* client: SYN_SENT */
	__u64 established_ns;
	__u64 end_ns;         /* TCP_CLOSE */
	__u64 bytes_sent;     /* payload bytes transmitted, retransmissions included */
	__u64 inode;          /* socket inode (0: no file, e.g. not yet accepted) */
	__u64 bytes_acked;    /* sent and acknowledged */
	__u64 bytes_received;
	__u64 bytes_retrans;
	__u32 segs_in;
	__u32 segs_out;
	__u32 data_segs_in;
	__u32 data_segs_out;
	__u32 total_retrans;  /* retransmitted segments (tcp_sock) */
	__u32 retrans_events; /* tcp_retransmit_skb hits */
	__u32 rst_sent;
	__u32 rst_received;
	__u32 srtt_us;        /* at snap_ns */
	__u32 srtt_min_us;    /* since the last snapshot (running) */
	__u32 srtt_max_us;
	__u32 iv_srtt_min_us; /* over the last completed interval (set by the snapshot) */
	__u32 iv_srtt_max_us;
	__u32 pid;            /* 0: unknown (user space resolves the inode) */
	__s32 sk_err;         /* at close */
	__u16 lport;
	__u16 rport;
	__u8 family;
	__u8 state;
	__u8 role;
	__u8 flags;
	__u8 close_state;     /* state the socket left for TCP_CLOSE */
	__u8 _pad1;
	__u16 touched;        /* snapshots begun (low bits) when a segment, retransmit or reset
			       * last touched the flow: the snapshot reads it while recent */
	__u8 laddr[16];
	__u8 raddr[16];
	char comm[EBTOP_TASK_COMM_LEN];
	__u64 sk;             /* the key (for flow_ends records) */
};
_Static_assert(sizeof(struct ebtop_flow) == 200, "src/flows/raw.rs FLOW_LEN must match");

struct ebtop_udp_key {
	__u64 sk;
	__u8 raddr[16];
	__u16 rport;
	__u8 family; /* of the peer; 0 = peer unknown */
	__u8 _pad[5];
};

struct ebtop_udp_flow {
	__u64 first_ns;
	__u64 _reserved; /* user space ages entries by their counts: no clock read per datagram */
	__u64 tx_bytes;
	__u64 rx_bytes;
	__u64 tx_dgrams;
	__u64 rx_dgrams;
	__u32 pid;
	__u16 lport;
	__u8 family;
	__u8 _pad;
	__u8 laddr[16];
	char comm[EBTOP_TASK_COMM_LEN];
};
_Static_assert(sizeof(struct ebtop_udp_flow) == 88, "src/flows/raw.rs UDP_LEN must match");

struct peer_stash {
	__u64 sk;
	__u8 addr[16];
	__u16 port;
	__u8 family;
};

enum ebtop_flow_counter {
	FC_CREATED = 0,   /* flows entered into the table */
	FC_PREEXISTING,   /* of which open before ebtop started */
	FC_TABLE_FULL,    /* flows not tracked: table at --max-flows */
	FC_ENDS,          /* flow_end records written */
	FC_ENDS_LOST,     /* flow_end records the ring had no room for */
	FC_STALE,         /* entries dropped by the snapshot: socket no longer that flow */
	FC_UDP_FULL,      /* UDP updates that failed */
	FC_CLOSES_RECOVERED, /* flows whose close was missed, ended exactly from their closed socket */
	FC__MAX,
};

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 262144); /* --max-flows */
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, __u64);
	__type(value, struct ebtop_flow);
} flows SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 4 * 1024 * 1024);
} flow_ends SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 65536);
	__type(key, struct ebtop_udp_key);
	__type(value, struct ebtop_udp_flow);
} udp_flows SEC(".maps");

/*
 * The peer of an unconnected UDP socket's datagram, from the cgroup sendmsg/recvmsg hooks to
 * the sock_send_length/sock_recv_length run of the same syscall on the same thread: in the
 * thread's task storage where the kernel lets cgroup programs use it (user space probes it and
 * sets `peer_stash_in_task`: one slot per thread, no hash, no lock), else in a hash by thread
 * (LRU: a thread that exits leaves its entry). Every run of the length hooks on a UDP socket
 * takes the stash and clears it, whatever the call returned, so a stash never outlives its
 * syscall (a failed send's peer is not the next connected send's).
 */
const volatile bool peer_stash_in_task = false;

struct {
	__uint(type, BPF_MAP_TYPE_TASK_STORAGE);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, int);
	__type(value, struct peer_stash);
} udp_peer_task SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 16384); /* 1 when the task storage holds the stash */
	__type(key, __u64);
	__type(value, struct peer_stash);
} udp_peer SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, FC__MAX);
	__type(key, __u32);
	__type(value, __u64);
} flow_counters SEC(".maps");

static __always_inline void fcount(__u32 idx)
{
	__u64 *v = bpf_map_lookup_elem(&flow_counters, &idx);
	/* Atomic: the flow programs run in softirq and in process context, one inside the other
	 * on a CPU (see count() in capture.h). */
	if (v)
		__sync_fetch_and_add(v, 1);
}

static __always_inline __u64 sock_inode(const void *skaddr)
{
	struct sock___flows *sk = (struct sock___flows *)skaddr;
	struct file *f = BPF_CORE_READ(sk, sk_socket, file);
	if (!f)
		return 0;
	return BPF_CORE_READ(f, f_inode, i_ino);
}

static __always_inline void note_owner(struct ebtop_flow *f)
{
	f->pid = bpf_get_current_pid_tgid() >> 32;
	bpf_get_current_comm(f->comm, sizeof(f->comm));
}

/*
 * A TCP socket moved data in a syscall: its flow's owner is the caller, if not known yet (a
 * server flow is created in softirq context, with no owner). True once the flow has an owner:
 * the caller may remember that and skip the lookup for this socket from then on.
 */
static __always_inline bool flow_note_owner(struct sock *sk)
{
	__u64 key = (__u64)sk;
	struct ebtop_flow *f = bpf_map_lookup_elem(&flows, &key);
	if (!f)
		return false;
	if (f->pid)
		return true;
	note_owner(f);
	if (!f->inode)
		f->inode = sock_inode(sk);
	return true;
}

/*
 * Takes the stashed peer of `task` (the current one) (see udp_peer_task) into `*out` if it was stashed for `sk`
 * (else `out->family` stays 0), and clears the stash. Runs on every length-hook run of a UDP
 * socket, failed calls and MSG_PEEK included.
 */
static __always_inline void udp_take_peer(struct sock *sk, struct task_struct *task,
					  struct peer_stash *out)
{
	if (peer_stash_in_task) {
		struct peer_stash *p = bpf_task_storage_get(&udp_peer_task, task, 0, 0);
		if (!p || !p->sk)
			return;
		if (p->sk == (__u64)sk)
			*out = *p;
		p->sk = 0;
		return;
	}
	__u64 id = bpf_get_current_pid_tgid();
	struct peer_stash *p = bpf_map_lookup_elem(&udp_peer, &id);
	if (!p)
		return;
	if (p->sk == (__u64)sk)
		*out = *p;
	bpf_map_delete_elem(&udp_peer, &id);
}

/*
 * A UDP datagram of `len` bytes was sent (tx) or received by a syscall of `task` on `sk`:
 * counted per (socket, peer). The peer is `stashed` (udp_take_peer: the address the cgroup
 * hooks saw in this syscall, for unconnected sockets; family 0 if none), else the connected
 * address, else unknown. Only a flow's first datagram reads the clock: user space ages
 * entries out by their counts (it reads them every interval), since the clock source costs
 * a guest ~50 ns a read and this runs per datagram (docs/performance.md, the UDP flood).
 */
static __always_inline void flow_count_udp(struct sock *sk, __u16 family, int len, bool tx,
					   const struct peer_stash *stashed,
					   struct task_struct *task)
{
	struct ebtop_udp_key k = {};
	k.sk = (__u64)sk;
	if (stashed->family) {
		__builtin_memcpy(k.raddr, stashed->addr, 16);
		k.rport = stashed->port;
		k.family = stashed->family;
	} else {
		/* Plain loads, not probe reads (≈35 ns each): both callers run on tp_btf, which
		 * hands them the socket as a BTF pointer (sockaddr.h's `_btf` helpers). */
		__u16 dport = bpf_ntohs(sk->__sk_common.skc_dport);
		if (dport) { /* connected socket */
			k.rport = dport;
			k.family = family;
			sock_remote_addr_btf(sk, family, k.raddr);
		}
	}
	struct ebtop_udp_flow *v = bpf_map_lookup_elem(&udp_flows, &k);
	if (!v) {
		struct ebtop_udp_flow fresh = {};
		fresh.first_ns = bpf_ktime_get_ns();
		fresh.family = family;
		fresh.lport = sk->__sk_common.skc_num;
		sock_local_addr_btf(sk, family, fresh.laddr);
		bpf_map_update_elem(&udp_flows, &k, &fresh, BPF_NOEXIST);
		v = bpf_map_lookup_elem(&udp_flows, &k);
		if (!v) {
			fcount(FC_UDP_FULL);
			return;
		}
	}
	/* Syscall context: the caller owns the socket. Plain loads of its name, no helper. */
	v->pid = task->tgid;
	task_comm(task, v->comm);
	if (tx) {
		__sync_fetch_and_add(&v->tx_bytes, (__u64)len);
		__sync_fetch_and_add(&v->tx_dgrams, 1);
	} else {
		__sync_fetch_and_add(&v->rx_bytes, (__u64)len);
		__sync_fetch_and_add(&v->rx_dgrams, 1);
	}
}

#endif
