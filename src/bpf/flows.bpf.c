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
 *                                thread). Those hooks always allow the call. On the
 *                                socket-layer capture path the capture program does this (and
 *                                names server flows' owners) on these maps: flowtable.h.
 */
#include "vmlinux_min.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_core_read.h>
#include <bpf/bpf_endian.h>
#include "ebtop.h"
#include "fdwalk.h"
#include "flowtable.h"

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
#define TCP_FIN_WAIT2 5
#define TCP_CLOSE 7
#define TCP_LAST_ACK 9
#define TCP_CLOSE_WAIT 8
#define TCP_LISTEN 10

char LICENSE[] SEC("license") = "GPL";

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


/*
 * A socket known by its address (a map key, a tracepoint's field) is read field by field.
 * Where the kernel has bpf_rdonly_cast (≥ 6.2) the address becomes a read-only BTF pointer
 * and each field a plain, fault-safe load (≈1 ns); elsewhere a probe read (≈35 ns). The
 * snapshot reads a dozen fields of every flow every interval: with 100K flows that is
 * ~40 ms of probe reads per second.
 */
#define PLAIN_LOAD(p, field) ((p)->field)
#define READ_TCP_COUNTERS(f, tp, READ)                                                     \
	do {                                                                               \
		(f)->bytes_acked = READ(tp, bytes_acked);                                  \
		(f)->bytes_received = READ(tp, bytes_received);                            \
		(f)->bytes_retrans = READ(tp, bytes_retrans);                              \
		(f)->segs_in = READ(tp, segs_in);                                          \
		(f)->segs_out = READ(tp, segs_out);                                        \
		(f)->data_segs_in = READ(tp, data_segs_in);                                \
		(f)->data_segs_out = READ(tp, data_segs_out);                              \
		(f)->total_retrans = READ(tp, total_retrans);                              \
		(f)->srtt_us = READ(tp, srtt_us) >> 3;                                     \
		(f)->bytes_sent = READ(tp, bytes_sent);                                    \
	} while (0)

/* Reads the socket's own counters: exact totals, whatever happened in between. */
static __always_inline void read_tcp(const void *skaddr, struct ebtop_flow *f, __u64 now)
{
	if (bpf_ksym_exists(bpf_rdonly_cast)) {
		struct tcp_sock *tp = bpf_core_cast(skaddr, struct tcp_sock);
		READ_TCP_COUNTERS(f, tp, PLAIN_LOAD);
	} else {
		struct tcp_sock *tp = (struct tcp_sock *)skaddr;
		READ_TCP_COUNTERS(f, tp, BPF_CORE_READ);
	}
	f->flags |= EBTOP_FLOW_SNAPPED;
	if (!f->inode)
		f->inode = sock_inode(skaddr);
}

/* The socket's sock_flag() bits, wherever this kernel keeps them. */
static __always_inline unsigned long sock_flags(const void *skaddr)
{
	struct sock___flags_new *sn = (struct sock___flags_new *)skaddr;
	if (bpf_core_field_exists(sn->__sk_common.skc_flags))
		return BPF_CORE_READ(sn, __sk_common.skc_flags);
	struct sock___flags_old *so = (struct sock___flags_old *)skaddr;
	return BPF_CORE_READ(so, sk_flags);
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

/* A quarter of the flow-end ring (4 MiB): ~5,000 ends waiting (user space sets it for a ring
 * sized otherwise). */
const volatile __u32 ends_wake_bytes = 1024 * 1024;

/*
 * A flow is over: its last numbers go to user space (or are counted lost), its entry goes.
 * Whoever deletes the entry reports it, once: a snapshot may find a missed close just as the
 * socket's destruction ends it on another CPU.
 */
static __always_inline void end_flow(struct ebtop_flow *f, __u64 key)
{
	struct ebtop_flow *rec = bpf_ringbuf_reserve(&flow_ends, sizeof(*f), 0);
	if (rec)
		__builtin_memcpy(rec, f, sizeof(*f));
	if (bpf_map_delete_elem(&flows, &key)) {
		if (rec)
			bpf_ringbuf_discard(rec, BPF_RB_NO_WAKEUP);
		return;
	}
	if (rec) {
		/* User space drains the ring on its own timer (100 ms); a burst of closes (100,000
		 * connections torn down at once) wakes it before the ring fills. Not every end: a
		 * wakeup per short connection would cost the reader more than the end itself. */
		__u64 wake = bpf_ringbuf_query(&flow_ends, BPF_RB_AVAIL_DATA) > ends_wake_bytes
				     ? BPF_RB_FORCE_WAKEUP
				     : BPF_RB_NO_WAKEUP;
		bpf_ringbuf_submit(rec, wake);
		fcount(FC_ENDS);
	} else {
		fcount(FC_ENDS_LOST);
	}
}

/* The socket reached TCP_CLOSE from `close_state`: its final numbers go into the flow. */
static __always_inline void close_flow(struct ebtop_flow *f, const void *skaddr, __u64 now,
				       __u8 close_state)
{
	read_tcp(skaddr, f, now);
	f->end_ns = now;
	f->close_state = close_state;
	struct sock___flows *sk = (struct sock___flows *)skaddr;
	f->sk_err = BPF_CORE_READ(sk, sk_err);
	/*
	 * Whether bytes_received counts the peer's FIN: tcp_fin() sets SOCK_DONE as the FIN
	 * takes its sequence number. The state left does not say: an orphaned socket goes from
	 * FIN_WAIT2 to CLOSE (into time-wait) when its own FIN is acknowledged, FIN or not.
	 */
	if (sock_flags(skaddr) & (1UL << bpf_core_enum_value(enum sock_flags, SOCK_DONE)))
		f->flags |= EBTOP_FLOW_PEER_FIN;
}

/* Tests only (debug builds, EBTOP_DEBUG_SKIP_CLOSE): every change to CLOSE goes unseen, as
 * the kernel's skipped runs leave it, so every flow ends through end_unseen_close. */
const volatile bool debug_skip_close = false;

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
	if (debug_skip_close && ns == TCP_CLOSE)
		return 0;
	__u64 key = (__u64)ctx->skaddr;
	__u64 now = bpf_ktime_get_ns();
	struct ebtop_flow *f = bpf_map_lookup_elem(&flows, &key);
	bool birth = (os == TCP_CLOSE && ns == TCP_SYN_SENT) ||
		     (os == TCP_SYN_RECV && ns == TCP_ESTABLISHED);
	if (f && birth && (f->syn_ns || f->established_ns)) {
		/*
		 * A new socket at the address of a flow that already lived: that flow's socket
		 * closed unseen (seen once in 20,000 short connections under load). It is reported
		 * ended now, with what was last read of it, and counted; the new one starts fresh.
		 */
		f->end_ns = now;
		f->close_state = f->state;
		f->flags |= EBTOP_FLOW_CLOSE_UNSEEN;
		fcount(FC_STALE);
		end_flow(f, key);
		f = NULL;
	}
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

	close_flow(f, ctx->skaddr, now, (__u8)os);
	/* ESTABLISHED/CLOSE_WAIT -> CLOSE with no error and no reset received: the owner's
	 * close() aborted the connection (unread data, SO_LINGER 0; the reset follows). */
	if ((os == TCP_ESTABLISHED || os == TCP_CLOSE_WAIT) && !f->sk_err && !f->rst_received &&
	    !f->pid)
		note_owner(f);
	end_flow(f, key);
	return 0;
}

/*
 * The socket reached TCP_CLOSE unseen: the kernel skips a tp_btf program that interrupts
 * itself on a CPU, e.g. a softirq acknowledging an orphaned socket's FIN (FIN_WAIT1 ->
 * FIN_WAIT2 -> CLOSE of a server closing first) while flow_set_state runs in a syscall there.
 * A closed socket's counters are final, so the flow still ends exactly. The states it went
 * through unseen were changes made by incoming segments; the one its byte counts depend on is
 * whether its own FIN was acknowledged, which the sequence numbers say.
 */
static __always_inline void end_unseen_close(struct ebtop_flow *f, __u64 key, __u64 now)
{
	__u8 close_state = f->state;
	struct tcp_sock *tp = (struct tcp_sock *)key;
	/* FIN_WAIT1 with its FIN acknowledged went on through FIN_WAIT2 or CLOSING, the states
	 * that say so (a FIN sent but unacknowledged keeps FIN_WAIT1). */
	if (close_state == TCP_FIN_WAIT1 && BPF_CORE_READ(tp, snd_una) == BPF_CORE_READ(tp, write_seq))
		close_state = TCP_FIN_WAIT2;
	close_flow(f, (const void *)key, now, close_state);
	f->state = TCP_CLOSE;
	fcount(FC_CLOSES_RECOVERED);
	end_flow(f, key);
}

/* Every TCP socket is destroyed after it reached TCP_CLOSE, so a flow still in the table here
 * is one whose close flow_set_state never saw. */
SEC("tp_btf/tcp_destroy_sock")
int flow_destroy(__u64 *args)
{
	__u64 key = args[0];
	struct ebtop_flow *f = bpf_map_lookup_elem(&flows, &key);
	if (f)
		end_unseen_close(f, key, bpf_ktime_get_ns());
	return 0;
}

/*
 * Snapshots begun so far (written by `snapshot` alone). A hook that is about to change a flow's
 * counters stamps the flow with it; a snapshot reads the counters of the ESTABLISHED flows
 * stamped since the one two snapshots back, and skips the others (nothing changed them): its
 * cost follows the active flows, not all of them (100,000 idle connections cost ~250 ns each to
 * read at every interval). Two, not one: the segment's counters are updated just after
 * tcp_probe, and a snapshot may read the flow in between; the snapshot after it cannot, being
 * an interval later.
 */
volatile __u32 snap_gen = 0;

static __always_inline void touch(struct ebtop_flow *f)
{
	/* Written only when it changes: a segment's probe then reads the flow's line and leaves it
	 * clean (no write back, no line taken from the CPU that last wrote it). */
	__u16 gen = (__u16)snap_gen;
	if (f->touched != gen)
		f->touched = gen;
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
	touch(f);
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
	if (f) {
		__sync_fetch_and_add(&f->rst_sent, 1);
		touch(f);
	}
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
	touch(f);
	return 0;
}

/*
 * Per socket, what its flow entry already holds for the snapshot generation `gen`: the flow was
 * touched in it and its running smoothed-RTT range is at least [srtt_min, srtt_max]. A segment
 * that changes neither (most of them) is done after the socket's storage, without the flow
 * table's hash lookup (a socket storage lookup is a few loads; the hash's bucket and element
 * are cache misses: ~80 ns of flow_probe's ~165 per segment here, statistics on).
 */
struct flow_mark {
	__u32 gen;
	__u32 srtt_min;
	__u32 srtt_max;
	__u32 set; /* 0: new storage, nothing written yet */
};

struct {
	__uint(type, BPF_MAP_TYPE_SK_STORAGE);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, int);
	__type(value, struct flow_mark);
} flow_marks SEC(".maps");

SEC("tp_btf/tcp_probe")
int flow_probe(__u64 *args)
{
	struct sock *sk = (struct sock *)args[0];
	__u64 key = (__u64)sk;
	/* Once per received segment: a plain load where the kernel can cast (≈1 ns, against
	 * ≈35 for a probe read). */
	__u32 srtt; /* microseconds */
	if (bpf_ksym_exists(bpf_rdonly_cast))
		srtt = bpf_core_cast((const void *)key, struct tcp_sock)->srtt_us >> 3;
	else
		srtt = BPF_CORE_READ((struct tcp_sock *)key, srtt_us) >> 3;
	__u32 gen = snap_gen;
	struct flow_mark *m =
		bpf_sk_storage_get(&flow_marks, sk, 0, BPF_SK_STORAGE_GET_F_CREATE);
	if (m && m->set && m->gen == gen &&
	    (!srtt || (srtt >= m->srtt_min && srtt <= m->srtt_max)))
		return 0;
	struct ebtop_flow *f = bpf_map_lookup_elem(&flows, &key);
	if (!f) {
		/* Only established sockets reach tcp_probe: this one predates ebtop. */
		f = new_flow(key, bpf_ktime_get_ns(), EBTOP_ROLE_UNKNOWN, EBTOP_FLOW_PREEXISTING,
			     TCP_ESTABLISHED);
		if (!f)
			return 0;
	}
	/* Before the segment updates the counters: the snapshot reads the flow while recent. */
	touch(f);
	if (srtt) {
		if (srtt < f->srtt_min_us)
			f->srtt_min_us = srtt;
		if (srtt > f->srtt_max_us)
			f->srtt_max_us = srtt;
	}
	/* What the entry now holds, under `gen` (a snapshot that begins meanwhile resets the
	 * flow's range and moves snap_gen on: the next segment finds its mark old and comes
	 * here). */
	if (m) {
		m->set = 1;
		m->gen = gen;
		m->srtt_min = f->srtt_min_us;
		m->srtt_max = f->srtt_max_us;
	}
	return 0;
}

struct snap_ctx {
	__u64 now;
	__u64 flows;
	__u16 gen;
	bool all;
	bool overflow;
};

/*
 * The flows a partial snapshot found new or changed, copied for user space: drained after each
 * snapshot (nothing else writes here), so 8 MiB holds ~40,000 flows changed in one interval;
 * past that the snapshot says so and user space reads the whole table.
 */
struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 8 * 1024 * 1024);
} flow_reads SEC(".maps");

static long snap_one(void *map, __u64 *key, struct ebtop_flow *f, struct snap_ctx *c)
{
	/* Untouched since two snapshots back, established and read before: unchanged, and its
	 * socket is not even looked at (a cache miss per idle flow). Sockets in other states are
	 * read every time: segments there do not pass tcp_probe, and they are few. A close this
	 * table missed is found by the next snapshot of every flow. */
	if (!c->all && f->state == TCP_ESTABLISHED && (f->flags & EBTOP_FLOW_SNAPPED) &&
	    (__u16)(c->gen - f->touched) > 2) {
		c->flows++;
		return 0;
	}
	const void *skaddr = (const void *)*key;
	/* The address must still be this flow's socket (its close could have been missed). */
	__u16 num, dport;
	__u8 st;
	if (bpf_ksym_exists(bpf_rdonly_cast)) {
		struct sock___flows *sk = bpf_core_cast(skaddr, struct sock___flows);
		num = sk->__sk_common.skc_num;
		st = sk->__sk_common.skc_state;
		dport = sk->__sk_common.skc_dport;
	} else {
		struct sock___flows *sk = (struct sock___flows *)skaddr;
		num = BPF_CORE_READ(sk, __sk_common.skc_num);
		st = BPF_CORE_READ(sk, __sk_common.skc_state);
		dport = BPF_CORE_READ(sk, __sk_common.skc_dport);
	}
	/* A client's port is bound after SYN_SENT (inet_hash_connect) and the ESTABLISHED
	 * transition writes the tuple; while the socket has no port yet, writing it here could
	 * land after that and put port 0 back. */
	if (!f->lport && num)
		tuple_from_sock(f, skaddr);
	if (st == TCP_CLOSE && (num == f->lport || !num) && f->rport &&
	    bpf_ntohs(dport) == f->rport) {
		/* Its close was missed and its process still holds it (else its destruction
		 * would have ended it). Closing gave its local port back (0 here) but kept the
		 * peer's: a new socket at this address has neither. */
		end_unseen_close(f, *key, c->now);
		return 0;
	}
	if (num != f->lport || st == TCP_CLOSE || st == TCP_LISTEN) {
		bpf_map_delete_elem(map, key);
		fcount(FC_STALE);
		return 0;
	}
	c->flows++;
	bool was_snapped = f->flags & EBTOP_FLOW_SNAPPED;
	__u64 acked = f->bytes_acked, received = f->bytes_received;
	__u32 segs_in = f->segs_in, segs_out = f->segs_out;
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
	if (c->all)
		return 0;
	/* What user space reports: new flows and moved counters (a retransmit or reset is
	 * counted by its hook, which touched the flow in the last interval). */
	bool moved = f->bytes_acked != acked || f->bytes_received != received ||
		     f->segs_in != segs_in || f->segs_out != segs_out ||
		     ((__u16)(c->gen - f->touched) <= 1 &&
		      (f->retrans_events || f->rst_sent || f->rst_received));
	if ((!was_snapped || moved) &&
	    bpf_ringbuf_output(&flow_reads, f, sizeof(*f), BPF_RB_NO_WAKEUP))
		c->overflow = true;
	return 0;
}

/*
 * Run by user space (BPF_PROG_TEST_RUN) at each interval's end; never attached. ctx[0]: read
 * every flow (user space then reads the whole table) rather than the recent ones (copied to
 * `flow_reads`). Returns the number of flows, with bit 31 set if `flow_reads` had no room.
 */
SEC("raw_tp")
int snapshot(__u64 *ctx)
{
	__u32 gen = snap_gen + 1;
	snap_gen = gen;
	struct snap_ctx c = { .now = bpf_ktime_get_ns(), .gen = (__u16)gen, .all = ctx[0] != 0 };
	bpf_for_each_map_elem(&flows, snap_one, &c, 0);
	return (int)((c.flows & 0x7fffffff) | (c.overflow ? 0x80000000u : 0));
}

/* ---- UDP ---- */

static __always_inline int stash_peer(struct bpf_sock_addr *ctx, bool v6)
{
	if (ctx->protocol != IPPROTO_UDP)
		return 1;
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
	if (peer_stash_in_task) {
		struct peer_stash *slot =
			bpf_task_storage_get(&udp_peer_task, bpf_get_current_task_btf(), 0,
					     BPF_LOCAL_STORAGE_GET_F_CREATE);
		if (slot)
			*slot = p;
	} else {
		__u64 id = bpf_get_current_pid_tgid();
		bpf_map_update_elem(&udp_peer, &id, &p, BPF_ANY);
	}
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
 * Set by user space when the accept() hooks are not attached and the capture program does not
 * do this work itself (see flowtable.h): a server flow's owner is then the first process that
 * moves its data.
 */
const volatile bool owner_from_data = false;

/* One program per hook for both jobs; attached only when the capture program does not do them. */
static __always_inline int length_hook(__u64 *args, bool tx)
{
	struct sock *sk = (struct sock *)args[0];
	int ret = (int)args[1];
	int flags = (int)args[2];
	if (!sk)
		return 0;
	struct sock___flows *s0 = (struct sock___flows *)sk;
	__u16 protocol = BPF_CORE_READ(s0, sk_protocol);
	if (protocol == IPPROTO_TCP) {
		if (owner_from_data && ret > 0)
			flow_note_owner(sk);
		return 0;
	}
	if (protocol != IPPROTO_UDP)
		return 0;
	/* Taken whatever the call returned: the stash is this syscall's only. */
	struct task_struct *task = bpf_get_current_task_btf();
	struct peer_stash peer = {};
	udp_take_peer(sk, task, &peer);
	if (ret <= 0 || (!tx && (flags & MSG_PEEK)))
		return 0;
	__u16 family = BPF_CORE_READ(s0, __sk_common.skc_family);
	if (family != AF_INET && family != AF_INET6)
		return 0;
	flow_count_udp(sk, family, ret, tx, &peer, task);
	return 0;
}

SEC("tp_btf/sock_send_length")
int udp_send_length(__u64 *args)
{
	return length_hook(args, true);
}

SEC("tp_btf/sock_recv_length")
int udp_recv_length(__u64 *args)
{
	return length_hook(args, false);
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

/*
 * The context of a task_file iterator (kernel/bpf/task_iter.c): one run per open file of every
 * process (threads sharing their files are visited once).
 */
struct bpf_iter_meta {
	void *seq;
} __attribute__((preserve_access_index));

struct bpf_iter__task_file {
	struct bpf_iter_meta *meta;
	struct task_struct *task;
	__u32 fd;
	struct file *file;
} __attribute__((preserve_access_index));

/*
 * Names the owners of flows no hook has named: user space runs this iterator (never attached
 * to an event) when open flows have no owner, instead of reading every /proc/PID/fd. On the
 * socket-layer path an accepted connection that has not moved data yet has no owner otherwise.
 * The first process found holding the socket (the lowest pid, as in /proc) owns it.
 */
SEC("iter/task_file")
int name_owners(struct bpf_iter__task_file *ctx)
{
	struct task_struct *task = ctx->task;
	struct file *file = ctx->file;
	if (!task || !file)
		return 0;
	struct socket *sock = bpf_sock_from_file(file);
	if (!sock)
		return 0;
	__u64 key = (__u64)sock->sk;
	struct ebtop_flow *f = bpf_map_lookup_elem(&flows, &key);
	if (!f || f->pid)
		return 0;
	f->pid = task->tgid;
	const __u64 *name = (const __u64 *)task->comm;
	__u64 lo = name[0], hi = name[1];
	__builtin_memcpy(f->comm, &lo, 8);
	__builtin_memcpy(f->comm + 8, &hi, 8);
	if (!f->inode)
		f->inode = file->f_inode->i_ino;
	return 0;
}
