// SPDX-License-Identifier: GPL-2.0
/*
 * Flow table: per-flow TCP and per-(socket, peer) UDP counters aggregated in the kernel and read
 * by user space once per interval. Nothing here sends a per-packet record to user space; the
 * only ring-buffer record is one per TCP flow end.
 *
 * TCP (map `flows`, keyed by the `struct sock` address):
 *   - sock:inet_sock_set_state   creates the entry (SYN_SENT = client, SYN_RECV = server child),
 *                                stamps SYN/ESTABLISHED times (connect latency), notes the owner
 *                                at the state changes made by a syscall, and at TCP_CLOSE reads
 *                                the final tcp_sock counters, writes one `flow_ends` record and
 *                                deletes the entry (short flows are never lost to the interval).
 *   - tcp:tcp_retransmit_skb, tcp:tcp_send_reset, tcp:tcp_receive_reset   per-flow counters.
 *   - tcp:tcp_probe              (every incoming segment of an established socket) SRTT min/max
 *                                (tcp_sock srtt_us, one CO-RE read), and discovery of flows
 *                                that were open before ebtop started. One hash lookup per
 *                                segment: measured in docs/architecture.md.
 *   - `snapshot` (raw_tp, never attached): user space runs it with BPF_PROG_TEST_RUN once per
 *                                interval; it walks the table with bpf_for_each_map_elem and
 *                                copies bytes_acked/bytes_received/segs/retrans/srtt from each
 *                                tcp_sock (CO-RE) into the entry. This is the "iterator" a
 *                                tracepoint-only kernel allows: its cost is per flow per
 *                                interval, not per packet, and the hot path never reads
 *                                tcp_sock at all.
 * UDP (map `udp_flows`, LRU, keyed by (socket, peer)):
 *   - sock:sock_send_length / sock:sock_recv_length   one per datagram sent/received by a
 *                                syscall, with its length. The peer is the connected address,
 *                                or for unconnected sockets the address the cgroup/sendmsg* and
 *                                cgroup/recvmsg* hooks saw in the same syscall (stashed per
 *                                thread). Those hooks always allow the call.
 */
#include "vmlinux_min.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_core_read.h>
#include <bpf/bpf_endian.h>
#include "ebtop.h"
#include "fdwalk.h"
#include "sockaddr.h"

#define AF_INET 2
#define AF_INET6 10
#define IPPROTO_TCP 6
#define IPPROTO_UDP 17
#define MSG_PEEK 2
#define BPF_F_NO_PREALLOC 1

#define TCP_ESTABLISHED 1
#define TCP_SYN_SENT 2
#define TCP_SYN_RECV 3
#define TCP_FIN_WAIT1 4
#define TCP_CLOSE 7
#define TCP_LAST_ACK 9
#define TCP_CLOSE_WAIT 8
#define TCP_LISTEN 10

char LICENSE[] SEC("license") = "GPL";

/* Layout shared with src/flows/raw.rs (little-endian, fields only appended). */
enum ebtop_flow_role {
	EBTOP_ROLE_UNKNOWN = 0,
	EBTOP_ROLE_CLIENT = 1,
	EBTOP_ROLE_SERVER = 2,
};

enum ebtop_flow_flags {
	EBTOP_FLOW_PREEXISTING = 1 << 0, /* open before ebtop started (no SYN seen) */
	EBTOP_FLOW_SNAPPED = 1 << 1,     /* tcp_sock counters were read at least once */
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
	__u16 _pad2;
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
	__u64 last_ns;
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

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 16384);
	__type(key, __u64);
	__type(value, struct peer_stash);
} udp_peer SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, FC__MAX);
	__type(key, __u32);
	__type(value, __u64);
} flow_counters SEC(".maps");

/* Tracepoint records (stable formats, /sys/kernel/tracing/events/.../format). */
struct set_state_ctx {
	__u64 __common;
	const void *skaddr;
	int oldstate;
	int newstate;
	__u16 sport;
	__u16 dport;
	__u16 family;
	__u16 protocol;
	__u8 saddr[4];
	__u8 daddr[4];
	__u8 saddr_v6[16];
	__u8 daddr_v6[16];
};

struct retransmit_ctx {
	__u64 __common;
	const void *skbaddr;
	const void *skaddr;
	int state;
};

struct send_reset_ctx {
	__u64 __common;
	const void *skbaddr;
	const void *skaddr;
};

struct receive_reset_ctx {
	__u64 __common;
	const void *skaddr;
};

struct tcp_probe_ctx {
	__u64 __common;
	__u8 saddr[28]; /* struct sockaddr_in / sockaddr_in6 */
	__u8 daddr[28];
	__u16 sport;
	__u16 dport;
	__u16 family;
	__u32 mark;
	__u16 data_len;
	__u32 snd_nxt;
	__u32 snd_una;
	__u32 snd_cwnd;
	__u32 ssthresh;
	__u32 snd_wnd;
	__u32 srtt;
	__u32 rcv_wnd;
	__u64 sock_cookie;
	const void *skbaddr;
	const void *skaddr;
};

struct sock_length_ctx {
	__u64 __common;
	void *sk;
	__u16 family;
	__u16 protocol;
	int ret;
	int flags;
};

static __always_inline void fcount(__u32 idx)
{
	__u64 *v = bpf_map_lookup_elem(&flow_counters, &idx);
	if (v)
		*v += 1;
}

static __always_inline __u64 sock_inode(const void *skaddr)
{
	struct sock___flows *sk = (struct sock___flows *)skaddr;
	struct file *f = BPF_CORE_READ(sk, sk_socket, file);
	if (!f)
		return 0;
	return BPF_CORE_READ(f, f_inode, i_ino);
}

/* Reads the socket's own counters (CO-RE): exact totals, whatever happened in between. */
static __always_inline void read_tcp(const void *skaddr, struct ebtop_flow *f, __u64 now)
{
	struct tcp_sock *tp = (struct tcp_sock *)skaddr;
	f->bytes_acked = BPF_CORE_READ(tp, bytes_acked);
	f->bytes_received = BPF_CORE_READ(tp, bytes_received);
	f->bytes_retrans = BPF_CORE_READ(tp, bytes_retrans);
	f->segs_in = BPF_CORE_READ(tp, segs_in);
	f->segs_out = BPF_CORE_READ(tp, segs_out);
	f->data_segs_in = BPF_CORE_READ(tp, data_segs_in);
	f->data_segs_out = BPF_CORE_READ(tp, data_segs_out);
	f->total_retrans = BPF_CORE_READ(tp, total_retrans);
	f->srtt_us = BPF_CORE_READ(tp, srtt_us) >> 3;
	f->bytes_sent = BPF_CORE_READ(tp, bytes_sent);
	f->flags |= EBTOP_FLOW_SNAPPED;
	if (!f->inode)
		f->inode = sock_inode(skaddr);
}

static __always_inline void note_owner(struct ebtop_flow *f)
{
	f->pid = bpf_get_current_pid_tgid() >> 32;
	bpf_get_current_comm(f->comm, sizeof(f->comm));
}

/* Tuple from the socket itself (CO-RE), for entries created outside inet_sock_set_state. */
static __always_inline void tuple_from_sock(struct ebtop_flow *f, const void *skaddr)
{
	struct sock *sk = (struct sock *)skaddr;
	f->family = BPF_CORE_READ(sk, __sk_common.skc_family);
	f->lport = BPF_CORE_READ(sk, __sk_common.skc_num);
	f->rport = bpf_ntohs(BPF_CORE_READ(sk, __sk_common.skc_dport));
	sock_local_addr(sk, f->family, f->laddr);
	sock_remote_addr(sk, f->family, f->raddr);
}

/* Inserts a fresh entry; NULL when the table is full (counted). */
static __always_inline struct ebtop_flow *new_flow(__u64 key, __u64 now, __u8 role, __u8 flags,
						   __u8 state)
{
	struct ebtop_flow fresh = {};
	fresh.start_ns = now;
	fresh.role = role;
	fresh.flags = flags;
	fresh.state = state;
	fresh.sk = key;
	fresh.srtt_min_us = 0xffffffff;
	fresh.iv_srtt_min_us = 0xffffffff;
	tuple_from_sock(&fresh, (const void *)key);
	if (bpf_map_update_elem(&flows, &key, &fresh, BPF_NOEXIST)) {
		/* -EEXIST (a racing creator won) is fine; anything else is a full table. */
		struct ebtop_flow *f = bpf_map_lookup_elem(&flows, &key);
		if (!f)
			fcount(FC_TABLE_FULL);
		return f;
	}
	fcount(FC_CREATED);
	if (flags & EBTOP_FLOW_PREEXISTING)
		fcount(FC_PREEXISTING);
	return bpf_map_lookup_elem(&flows, &key);
}

/*
 * All TCP/UDP hooks are tp_btf (BTF-typed raw tracepoints), not classic tracepoints: a classic
 * tracepoint program is skipped whenever any other BPF program is running on the CPU (the
 * global bpf_prog_active guard), e.g. when a softirq closes a socket while a syscall program
 * runs — that lost about one flow end in 10,000 in tests. tp_btf programs are only skipped
 * when the same program is interrupted by itself; those misses are read from the kernel
 * (bpf_prog_info.recursion_misses) and reported as `missed_events`.
 */
SEC("tp_btf/inet_sock_set_state")
int flow_set_state(__u64 *args)
{
	struct set_state_ctx c = {};
	struct set_state_ctx *ctx = &c;
	struct sock___flows *s0 = (struct sock___flows *)args[0];
	ctx->skaddr = (const void *)args[0];
	ctx->oldstate = (int)args[1];
	ctx->newstate = (int)args[2];
	ctx->protocol = BPF_CORE_READ(s0, sk_protocol);
	ctx->family = BPF_CORE_READ(s0, __sk_common.skc_family);
	if (ctx->protocol != IPPROTO_TCP || (ctx->family != AF_INET && ctx->family != AF_INET6))
		return 0;
	int os = ctx->oldstate, ns = ctx->newstate;
	if (os == TCP_LISTEN || ns == TCP_LISTEN)
		return 0; /* listeners are not flows */
	__u64 key = (__u64)ctx->skaddr;
	__u64 now = bpf_ktime_get_ns();
	struct ebtop_flow *f = bpf_map_lookup_elem(&flows, &key);
	if (!f) {
		if (os == TCP_CLOSE && ns == TCP_CLOSE)
			return 0;
		__u8 role = EBTOP_ROLE_UNKNOWN, flags = 0;
		if (ns == TCP_SYN_SENT || os == TCP_SYN_SENT)
			role = EBTOP_ROLE_CLIENT;
		else if (ns == TCP_SYN_RECV || os == TCP_SYN_RECV)
			role = EBTOP_ROLE_SERVER;
		/* A server's child socket is born in SYN_RECV without a state change: its first
		 * event is SYN_RECV -> ESTABLISHED. Any other first event means the flow is older
		 * than ebtop. */
		if (os != TCP_CLOSE && os != TCP_SYN_RECV)
			flags |= EBTOP_FLOW_PREEXISTING;
		f = new_flow(key, now, role, flags, (__u8)os);
		if (!f)
			return 0;
	}
	f->state = ns;
	if (ns == TCP_SYN_SENT) {
		f->syn_ns = now;
		f->start_ns = now;
	}
	if (ns == TCP_ESTABLISHED && !f->established_ns) {
		f->established_ns = now;
		/* A client's local port is bound after SYN_SENT is set (inet_hash_connect). */
		tuple_from_sock(f, ctx->skaddr);
	}
	/*
	 * These transitions are made by the owning process's own syscall (connect, close,
	 * shutdown), never from softirq: `current` is the owner. Others may run in softirq
	 * context on behalf of whatever task was interrupted, so they do not name an owner.
	 */
	if (ns == TCP_SYN_SENT || (ns == TCP_FIN_WAIT1 && !f->pid) || (ns == TCP_LAST_ACK && !f->pid))
		note_owner(f);
	if (!f->inode)
		f->inode = sock_inode(ctx->skaddr);
	if (ns != TCP_CLOSE)
		return 0;

	read_tcp(ctx->skaddr, f, now);
	f->end_ns = now;
	f->close_state = (__u8)os;
	struct sock___flows *sk = (struct sock___flows *)ctx->skaddr;
	f->sk_err = BPF_CORE_READ(sk, sk_err);
	/* ESTABLISHED/CLOSE_WAIT -> CLOSE with no error and no reset received: the owner's
	 * close() aborted the connection (unread data, SO_LINGER 0; the reset follows). */
	if ((os == TCP_ESTABLISHED || os == TCP_CLOSE_WAIT) && !f->sk_err && !f->rst_received &&
	    !f->pid)
		note_owner(f);
	if (bpf_ringbuf_output(&flow_ends, f, sizeof(*f), 0))
		fcount(FC_ENDS_LOST);
	else
		fcount(FC_ENDS);
	bpf_map_delete_elem(&flows, &key);
	return 0;
}

SEC("tp_btf/tcp_retransmit_skb")
int flow_retransmit(__u64 *args)
{
	struct retransmit_ctx c = {};
	struct retransmit_ctx *ctx = &c;
	struct sock___flows *s0 = (struct sock___flows *)args[0];
	ctx->skaddr = (const void *)args[0];
	__u64 key = (__u64)ctx->skaddr;
	if (!key)
		return 0;
	ctx->state = BPF_CORE_READ(s0, __sk_common.skc_state);
	struct ebtop_flow *f = bpf_map_lookup_elem(&flows, &key);
	if (!f) {
		if (ctx->state == TCP_CLOSE || ctx->state == TCP_LISTEN)
			return 0;
		f = new_flow(key, bpf_ktime_get_ns(), EBTOP_ROLE_UNKNOWN, EBTOP_FLOW_PREEXISTING,
			     (__u8)ctx->state);
		if (!f)
			return 0;
	}
	__sync_fetch_and_add(&f->retrans_events, 1);
	return 0;
}

SEC("tp_btf/tcp_send_reset")
int flow_send_reset(__u64 *args)
{
	struct send_reset_ctx c = { .skaddr = (const void *)args[0] };
	struct send_reset_ctx *ctx = &c;
	/* skaddr may be NULL (reset for no socket) or a listener/time-wait socket: only flows
	 * already in the table count. */
	__u64 key = (__u64)ctx->skaddr;
	if (!key)
		return 0;
	struct ebtop_flow *f = bpf_map_lookup_elem(&flows, &key);
	if (f)
		__sync_fetch_and_add(&f->rst_sent, 1);
	return 0;
}

SEC("tp_btf/tcp_receive_reset")
int flow_receive_reset(__u64 *args)
{
	struct receive_reset_ctx c = { .skaddr = (const void *)args[0] };
	struct receive_reset_ctx *ctx = &c;
	__u64 key = (__u64)ctx->skaddr;
	if (!key)
		return 0;
	struct ebtop_flow *f = bpf_map_lookup_elem(&flows, &key);
	if (!f) {
		/* A full socket (tcp_reset): a flow open before ebtop started is closing (unless
		 * it is closed already: tcp_reset then ignores the reset). */
		struct sock___flows *sk = (struct sock___flows *)ctx->skaddr;
		if (BPF_CORE_READ(sk, __sk_common.skc_state) == TCP_CLOSE)
			return 0;
		f = new_flow(key, bpf_ktime_get_ns(), EBTOP_ROLE_UNKNOWN, EBTOP_FLOW_PREEXISTING,
			     TCP_ESTABLISHED);
		if (!f)
			return 0;
	}
	__sync_fetch_and_add(&f->rst_received, 1);
	return 0;
}

SEC("tp_btf/tcp_probe")
int flow_probe(__u64 *args)
{
	__u64 key = args[0];
	struct ebtop_flow *f = bpf_map_lookup_elem(&flows, &key);
	if (!f) {
		/* Only established sockets reach tcp_probe: this one predates ebtop. */
		f = new_flow(key, bpf_ktime_get_ns(), EBTOP_ROLE_UNKNOWN, EBTOP_FLOW_PREEXISTING,
			     TCP_ESTABLISHED);
		if (!f)
			return 0;
	}
	struct tcp_sock *tp = (struct tcp_sock *)key;
	__u32 srtt = BPF_CORE_READ(tp, srtt_us) >> 3; /* microseconds */
	if (srtt) {
		if (srtt < f->srtt_min_us)
			f->srtt_min_us = srtt;
		if (srtt > f->srtt_max_us)
			f->srtt_max_us = srtt;
	}
	return 0;
}

struct snap_ctx {
	__u64 now;
	__u64 flows;
};

static long snap_one(void *map, __u64 *key, struct ebtop_flow *f, struct snap_ctx *c)
{
	const void *skaddr = (const void *)*key;
	struct sock___flows *sk = (struct sock___flows *)skaddr;
	/* The address must still be this flow's socket (its close could have been missed). */
	__u16 num = BPF_CORE_READ(sk, __sk_common.skc_num);
	__u8 st = BPF_CORE_READ(sk, __sk_common.skc_state);
	if (!f->lport)
		tuple_from_sock(f, skaddr);
	if (num != f->lport || st == TCP_CLOSE || st == TCP_LISTEN) {
		bpf_map_delete_elem(map, key);
		fcount(FC_STALE);
		return 0;
	}
	read_tcp(skaddr, f, c->now);
	__u32 lo = f->srtt_min_us, hi = f->srtt_max_us;
	if (f->srtt_us) {
		if (f->srtt_us < lo)
			lo = f->srtt_us;
		if (f->srtt_us > hi)
			hi = f->srtt_us;
	}
	f->iv_srtt_min_us = lo;
	f->iv_srtt_max_us = hi;
	f->srtt_min_us = 0xffffffff;
	f->srtt_max_us = 0;
	c->flows++;
	return 0;
}

/*
 * Run by user space (BPF_PROG_TEST_RUN) at each interval's end; never attached. Returns the
 * number of flows read.
 */
SEC("raw_tp")
int snapshot(void *ctx)
{
	struct snap_ctx c = { .now = bpf_ktime_get_ns(), .flows = 0 };
	bpf_for_each_map_elem(&flows, snap_one, &c, 0);
	return (int)c.flows;
}

/* ---- UDP ---- */

static __always_inline int stash_peer(struct bpf_sock_addr *ctx, bool v6)
{
	if (ctx->protocol != IPPROTO_UDP)
		return 1;
	__u64 id = bpf_get_current_pid_tgid();
	struct peer_stash p = {};
	p.sk = (__u64)ctx->sk;
	p.port = bpf_ntohs((__u16)ctx->user_port);
	if (v6) {
		p.family = AF_INET6;
		__u32 a[4] = { ctx->user_ip6[0], ctx->user_ip6[1], ctx->user_ip6[2],
			       ctx->user_ip6[3] };
		__builtin_memcpy(p.addr, a, 16);
	} else {
		p.family = AF_INET;
		__u32 a = ctx->user_ip4;
		__builtin_memcpy(p.addr, &a, 4);
	}
	bpf_map_update_elem(&udp_peer, &id, &p, BPF_ANY);
	return 1; /* always allow */
}

SEC("cgroup/sendmsg4")
int udp_sendmsg4(struct bpf_sock_addr *ctx)
{
	return stash_peer(ctx, false);
}

SEC("cgroup/sendmsg6")
int udp_sendmsg6(struct bpf_sock_addr *ctx)
{
	return stash_peer(ctx, true);
}

SEC("cgroup/recvmsg4")
int udp_recvmsg4(struct bpf_sock_addr *ctx)
{
	return stash_peer(ctx, false);
}

SEC("cgroup/recvmsg6")
int udp_recvmsg6(struct bpf_sock_addr *ctx)
{
	return stash_peer(ctx, true);
}

/*
 * Set by user space when the accept() hooks are not attached (socket-layer capture attaches no
 * syscall tracepoint): a server flow's owner is then the first process that moves its data.
 */
const volatile bool owner_from_data = false;

static __always_inline int tcp_note_owner(struct sock_length_ctx *ctx)
{
	if (!owner_from_data || ctx->ret <= 0)
		return 0;
	__u64 key = (__u64)ctx->sk;
	struct ebtop_flow *f = bpf_map_lookup_elem(&flows, &key);
	if (!f || f->pid)
		return 0;
	note_owner(f);
	if (!f->inode)
		f->inode = sock_inode(ctx->sk);
	return 0;
}

static __always_inline int udp_count(struct sock_length_ctx *ctx, bool tx)
{
	if (ctx->protocol == IPPROTO_TCP)
		return tcp_note_owner(ctx);
	if (ctx->protocol != IPPROTO_UDP || ctx->ret <= 0 ||
	    (ctx->family != AF_INET && ctx->family != AF_INET6))
		return 0;
	if (!tx && (ctx->flags & MSG_PEEK))
		return 0;
	struct sock *sk = (struct sock *)ctx->sk;
	struct ebtop_udp_key k = {};
	k.sk = (__u64)ctx->sk;
	__u64 id = bpf_get_current_pid_tgid();
	struct peer_stash *p = bpf_map_lookup_elem(&udp_peer, &id);
	if (p && p->sk == k.sk) {
		__builtin_memcpy(k.raddr, p->addr, 16);
		k.rport = p->port;
		k.family = p->family;
		bpf_map_delete_elem(&udp_peer, &id);
	} else {
		__u16 dport = bpf_ntohs(BPF_CORE_READ(sk, __sk_common.skc_dport));
		if (dport) { /* connected socket */
			k.rport = dport;
			k.family = ctx->family;
			sock_remote_addr(sk, ctx->family, k.raddr);
		}
	}
	__u64 now = bpf_ktime_get_ns();
	struct ebtop_udp_flow *v = bpf_map_lookup_elem(&udp_flows, &k);
	if (!v) {
		struct ebtop_udp_flow fresh = {};
		fresh.first_ns = now;
		fresh.family = ctx->family;
		fresh.lport = BPF_CORE_READ(sk, __sk_common.skc_num);
		sock_local_addr(sk, ctx->family, fresh.laddr);
		bpf_map_update_elem(&udp_flows, &k, &fresh, BPF_NOEXIST);
		v = bpf_map_lookup_elem(&udp_flows, &k);
		if (!v) {
			fcount(FC_UDP_FULL);
			return 0;
		}
	}
	/* Syscall context: the caller owns the socket. */
	v->pid = id >> 32;
	bpf_get_current_comm(v->comm, sizeof(v->comm));
	v->last_ns = now;
	if (tx) {
		__sync_fetch_and_add(&v->tx_bytes, (__u64)ctx->ret);
		__sync_fetch_and_add(&v->tx_dgrams, 1);
	} else {
		__sync_fetch_and_add(&v->rx_bytes, (__u64)ctx->ret);
		__sync_fetch_and_add(&v->rx_dgrams, 1);
	}
	return 0;
}

static __always_inline int udp_hook(__u64 *args, bool tx)
{
	struct sock_length_ctx c = {};
	struct sock___flows *s0 = (struct sock___flows *)args[0];
	c.sk = (void *)args[0];
	c.ret = (int)args[1];
	c.flags = (int)args[2];
	c.protocol = BPF_CORE_READ(s0, sk_protocol);
	c.family = BPF_CORE_READ(s0, __sk_common.skc_family);
	return udp_count(&c, tx);
}

SEC("tp_btf/sock_send_length")
int udp_send_length(__u64 *args)
{
	return udp_hook(args, true);
}

SEC("tp_btf/sock_recv_length")
int udp_recv_length(__u64 *args)
{
	return udp_hook(args, false);
}

/*
 * accept()/accept4() returned a connection: the calling process owns it. A server's flow is
 * created in softirq context (no owner there), so without this its owner would be known only
 * at its close, and user space would walk every /proc/PID/fd for each new server flow (measured:
 * most of ebtop's CPU with 1K new connections/s among 100K). One map update, no record.
 */
static __always_inline int note_accepted(long fd)
{
	if (fd < 0)
		return 0;
	__u64 ino = 0;
	struct socket *sock = fd_to_socket((int)fd, &ino);
	if (!sock)
		return 0;
	__u64 key = (__u64)BPF_CORE_READ(sock, sk);
	struct ebtop_flow *f = bpf_map_lookup_elem(&flows, &key);
	if (!f || f->pid)
		return 0;
	note_owner(f);
	if (!f->inode)
		f->inode = ino;
	return 0;
}

SEC("tracepoint/syscalls/sys_exit_accept4")
int flow_accept4_exit(struct ebtop_sys_exit_ctx *ctx)
{
	return note_accepted(ctx->ret);
}

SEC("tracepoint/syscalls/sys_exit_accept")
int flow_accept_exit(struct ebtop_sys_exit_ctx *ctx)
{
	return note_accepted(ctx->ret);
}
