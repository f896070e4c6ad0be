// SPDX-License-Identifier: GPL-2.0
/*
 * Socket data capture at the socket layer (`--hooks socket`, the default where the kernel has
 * these tracepoints with BTF): tp_btf `sock:sock_send_length` / `sock:sock_recv_length` fire
 * once per socket send/receive, after the protocol moved the bytes, with the `struct sock *`
 * and the byte count. No `syscalls:*` tracepoint is attached, so unrelated syscalls of every
 * task stay on the fast path; no enter hook, no per-thread hash, no fd walk:
 *   - per-connection state (stream positions, protocol, owner) lives in socket storage and is
 *     freed with the socket;
 *   - the user buffer comes from the syscall's arguments in the task's saved user registers
 *     (`bpf_task_pt_regs`): the syscall number says where the bytes are (buffer, iovec,
 *     msghdr, a message of an mmsghdr vector). A send or receive made by no such syscall
 *     (io_uring, sendfile/splice, a kernel thread) becomes a length-only record: positions
 *     stay exact and user space counts the bytes as not captured;
 *   - a TCP send is stamped at its start by tp_btf `tcp:tcp_sendmsg_locked` (in its socket's
 *     storage, taken at the send's end by the same thread), so a send is stamped at its start
 *     as on the syscall path; UDP sends and receives are stamped when they complete;
 *   - a TCP connection ends at tp_btf `sock:inet_sock_set_state` → TCP_CLOSE.
 * tp_btf programs are skipped only when they re-enter themselves on a CPU (counted), never
 * because another BPF program or a bpf() call holds the CPU, as classic tracepoints are.
 */
#include "vmlinux_min.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_core_read.h>
#include <bpf/bpf_endian.h>
#include <bpf/bpf_tracing.h>
#include "ebtop.h"
#include "filters.h"
#include "capture.h"
#include "flowtable.h"
#include "tls.h"

#define TCP_CLOSE 7
#define IPPROTO_TCP 6
#define PF_IO_WORKER 0x00000010
#define PF_KTHREAD 0x00200000
#define BPF_F_NO_PREALLOC 1

/* Syscall numbers whose arguments say where a send's or receive's bytes are. */
#if defined(__TARGET_ARCH_arm64)
#define NR_READ 63
#define NR_WRITE 64
#define NR_READV 65
#define NR_WRITEV 66
#define NR_SENDTO 206
#define NR_RECVFROM 207
#define NR_SENDMSG 211
#define NR_RECVMSG 212
#define NR_RECVMMSG 243
#define NR_SENDMMSG 269
#else
#define NR_READ 0
#define NR_WRITE 1
#define NR_READV 19
#define NR_WRITEV 20
#define NR_SENDTO 44
#define NR_RECVFROM 45
#define NR_SENDMSG 46
#define NR_RECVMSG 47
#define NR_RECVMMSG 299
#define NR_SENDMMSG 307
#endif

char LICENSE[] SEC("license") = "GPL";

/* Per socket, freed with it. */
struct sk_state {
	__u64 seq[2];
	__u64 sock_id;
	__u32 pid;
	__u8 proto;
	__u8 delivered; /* a record of this socket reached user space: its close matters */
	__u8 flow_owner_known; /* its flow-table entry has an owner: no lookup per send */
	__u8 dgram_unknown; /* datagram verdict: see dgram_unexamined() */
	__u8 shed_tls_looks; /* sampled out: tls_note_shed() */
	__u8 go_hint; /* GO_TASK_NOT_GO: its records come from no Go program (gochain.h) */
	struct ebtop_sample_state sample; /* captured, sampled out, cut, undecided (capture.h) */
	/* The start of the TCP send in progress (0: none) and the thread making it: taken and
	 * cleared by the send's length hook, whatever becomes of the send (shed, failed), so a
	 * stamp is never another send's. A thread's send whose stamp another thread's send
	 * replaced (two threads writing one stream at once) has none: stamped at its end. */
	__u64 send_ns;
	__u32 send_tid;
	char comm[EBTOP_TASK_COMM_LEN];
};

struct {
	__uint(type, BPF_MAP_TYPE_SK_STORAGE);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, int);
	__type(value, struct sk_state);
} sk_states SEC(".maps");

/*
 * Per task: the message of a sendmmsg/recvmmsg vector the next datagram is. The socket layer
 * sees one send or receive per message, in vector order, but not where a call starts: the
 * cursor restarts when the vector, socket or direction changes, after the last message
 * (vlen), and after a send or receive that failed (the kernel's loop stops there).
 */
struct mmsg_cursor {
	__u64 vec;
	__u64 sk;
	__u32 next;
	__u8 dir;
};

struct {
	__uint(type, BPF_MAP_TYPE_TASK_STORAGE);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, int);
	__type(value, struct mmsg_cursor);
} mmsg_cursors SEC(".maps");

/* What the syscall in progress says about the bytes (SRC_NONE: not a syscall we know). */
struct call_args {
	__u64 arg;
	__u64 arg2;
	__u64 peer_arg;
	__s32 fd;
	__u8 syscall;
	__u8 source;
};

/*
 * Plain loads, not probe reads: tp_btf hands this object BTF pointers (the socket; the task and
 * its saved user registers come from helpers that return them too), whose fields the verifier
 * lets a program load directly, fault-safe, at ≈1 ns each instead of ≈35 ns per
 * bpf_probe_read_kernel (BPF_CORE_READ) — about ten of those per record before (sockaddr.h's
 * `_btf` helpers). capture.h's fill_tuple and sockaddr.h's other helpers keep probe reads for
 * the socket: the syscall path's comes from an fd walk, which the verifier cannot follow.
 */
/* The record's ports and addresses, from the socket (plain loads, see above). */
static __always_inline void fill_tuple_btf(struct ebtop_event *ev, struct sock *sk, __u8 family)
{
	ev->lport = sk->__sk_common.skc_num;
	ev->rport = bpf_ntohs(sk->__sk_common.skc_dport);
	__builtin_memset(ev->laddr, 0, sizeof(ev->laddr));
	__builtin_memset(ev->raddr, 0, sizeof(ev->raddr));
	sock_local_addr_btf(sk, family, ev->laddr);
	sock_remote_addr_btf(sk, family, ev->raddr);
}

/*
 * The current task's saved user registers, or NULL where no syscall of ours can be in progress
 * (a kernel thread, an io_uring worker).
 */
static __always_inline struct pt_regs *syscall_regs(struct task_struct___cap *task)
{
	if (task->flags & (PF_KTHREAD | PF_IO_WORKER))
		return NULL;
	return (struct pt_regs *)bpf_task_pt_regs((struct task_struct *)task);
}

/* The number of the syscall whose registers these are (-1: none). */
static __always_inline long syscall_nr(struct pt_regs *regs)
{
	if (!regs)
		return -1;
#if defined(__TARGET_ARCH_arm64)
	return ((struct pt_regs___cap *)regs)->syscallno;
#else
	return ((struct pt_regs___cap *)regs)->orig_ax;
#endif
}

/*
 * A send or receive that moved nothing (ret 0) or failed (ret < 0): an empty datagram of a
 * vector moves the cursor on; a failure, or anything outside sendmmsg/recvmmsg, restarts it.
 * Only tasks that made such a call have a cursor; for the rest this is one failed lookup.
 */
static __always_inline void mmsg_cursor_on_nothing_moved(struct task_struct___cap *task, int ret)
{
	struct mmsg_cursor *cur = bpf_task_storage_get(&mmsg_cursors, (struct task_struct *)task,
						       0, 0);
	if (!cur || !cur->vec)
		return;
	long nr = ret == 0 ? syscall_nr(syscall_regs(task)) : -1;
	if (nr == NR_SENDMMSG || nr == NR_RECVMMSG)
		cur->next++;
	else
		cur->vec = 0;
}

/*
 * The message of a sendmmsg/recvmmsg vector (arg = its first struct mmsghdr, vlen messages)
 * this send or receive of `len` bytes on `sk` is; NULL if unknown. A datagram is sent whole,
 * so a send whose message does not hold `len` bytes in one buffer is taken as a new call.
 */
static __always_inline __u64 mmsg_entry(struct task_struct *task, __u64 vec, __u32 vlen,
					 struct sock *sk, __u8 dir, __u64 len)
{
	struct mmsg_cursor *cur = bpf_task_storage_get(&mmsg_cursors, task, 0,
						       BPF_LOCAL_STORAGE_GET_F_CREATE);
	if (!cur || !vlen)
		return 0;
	if (cur->vec != vec || cur->sk != (__u64)sk || cur->dir != dir || cur->next >= vlen) {
		cur->vec = vec;
		cur->sk = (__u64)sk;
		cur->dir = dir;
		cur->next = 0;
	}
	__u32 idx = cur->next;
	if (dir == EBTOP_DIR_EGRESS && idx) {
		struct ebtop_user_msghdr m;
		struct ebtop_iovec iov;
		__u64 at = vec + (__u64)idx * sizeof(struct ebtop_mmsghdr);
		if (!bpf_probe_read_user(&m, sizeof(m), (void *)at) && m.msg_iovlen == 1 &&
		    !bpf_probe_read_user(&iov, sizeof(iov), m.msg_iov) && iov.iov_len != len)
			idx = 0;
	}
	cur->next = idx + 1;
	return vec + (__u64)idx * sizeof(struct ebtop_mmsghdr);
}

static __always_inline void syscall_args(struct call_args *c, struct task_struct___cap *task,
					 __u8 dir, struct sock *sk, __u64 len)
{
	c->fd = -1;
	c->syscall = EBTOP_SC_OTHER;
	c->source = SRC_NONE;
	struct pt_regs *regs = syscall_regs(task);
	long nr = syscall_nr(regs);
	if (nr < 0 || !regs) /* !regs implies nr < 0; the verifier needs it said */
		return;
	__u8 sc = 0, src = SRC_NONE;
	bool tx = dir == EBTOP_DIR_EGRESS;
	switch (nr) {
	case NR_READ:
		if (!tx) { sc = EBTOP_SC_READ; src = SRC_BUF; }
		break;
	case NR_WRITE:
		if (tx) { sc = EBTOP_SC_WRITE; src = SRC_BUF; }
		break;
	case NR_READV:
		if (!tx) { sc = EBTOP_SC_READV; src = SRC_IOV; }
		break;
	case NR_WRITEV:
		if (tx) { sc = EBTOP_SC_WRITEV; src = SRC_IOV; }
		break;
	case NR_SENDTO:
		if (tx) { sc = EBTOP_SC_SENDTO; src = SRC_BUF; }
		break;
	case NR_RECVFROM:
		if (!tx) { sc = EBTOP_SC_RECVFROM; src = SRC_BUF; }
		break;
	case NR_SENDMSG:
		if (tx) { sc = EBTOP_SC_SENDMSG; src = SRC_MSG; }
		break;
	case NR_RECVMSG:
		if (!tx) { sc = EBTOP_SC_RECVMSG; src = SRC_MSG; }
		break;
	case NR_SENDMMSG:
		if (tx) { sc = EBTOP_SC_SENDMMSG; src = SRC_MMSG; }
		break;
	case NR_RECVMMSG:
		if (!tx) { sc = EBTOP_SC_RECVMMSG; src = SRC_MMSG; }
		break;
	}
	if (!sc)
		return;
	c->syscall = sc;
	c->source = src;
	c->fd = (__s32)REG_ARG0(regs);
	c->arg = REG_ARG1(regs);
	if (src == SRC_IOV)
		c->arg2 = REG_ARG2(regs);
	if (sc == EBTOP_SC_SENDTO || sc == EBTOP_SC_RECVFROM)
		c->peer_arg = REG_ARG4(regs);
	if (src == SRC_MMSG) {
		/* This datagram's message of the vector: then as sendmsg/recvmsg. */
		c->arg = mmsg_entry((struct task_struct *)task, c->arg, (__u32)REG_ARG2(regs), sk,
				    dir, len);
		src = SRC_MSG;
		if (!c->arg) {
			c->source = SRC_NONE;
			return;
		}
	}
	if (src == SRC_MSG) {
		/* The msghdr's iovec is the payload; its name the peer of an unconnected socket. */
		struct ebtop_user_msghdr msg;
		if (bpf_probe_read_user(&msg, sizeof(msg), (void *)c->arg)) {
			c->source = SRC_NONE;
			return;
		}
		c->source = SRC_IOV;
		c->arg = (__u64)msg.msg_iov;
		c->arg2 = msg.msg_iovlen;
		c->peer_arg = (__u64)msg.msg_name;
	}
}

static __always_inline void fill_header(struct ebtop_event *ev, struct task_struct *task,
					__u64 id, struct sock *sk, const struct sk_state *st,
					__u8 family, __u8 sock_type, __u64 start_ns, __u64 end_ns)
{
	ev->start_ns = start_ns;
	ev->end_ns = end_ns;
	ev->sock_id = st->sock_id;
	ev->pid = id >> 32;
	ev->tid = (__u32)id;
	ev->family = family;
	ev->sock_type = sock_type;
	ev->flags = 0;
	ev->tail_len = 0;
	fill_tuple_btf(ev, sk, family);
	task_comm(task, ev->comm);
}

/*
 * Set when the flow table is loaded: this program then does the flow table's per-send work
 * (flowtable.h) on the flow table's own maps, which user space hands over before load.
 */
const volatile bool count_flows = false;

/*
 * The per-socket verdict on datagrams (a stream's protocol is decided by its first bytes; a
 * datagram socket's is looked for in every datagram until one is recognised, since any may be
 * the first of a DNS exchange). After DGRAM_VERDICT_AFTER datagrams of no known protocol in a
 * row, a socket is judged to carry none: only one datagram in DGRAM_RECHECK is examined after
 * that (a protocol that appears later is still found, from the next datagram examined), the
 * others are skipped unread and counted (EBTOP_CNT_SKIPPED_UNEXAMINED, within
 * EBTOP_CNT_SKIPPED_UNKNOWN). This is most of the capture's cost on a flood of unknown
 * datagrams (QUIC, RTP, statsd, a game's traffic): the syscall's arguments, a user-memory read
 * and the rules. The counter in the socket's storage is updated without atomics: two threads
 * racing on one socket may examine one datagram more or less, never deliver a wrong one.
 */
#define DGRAM_VERDICT_AFTER 32
#define DGRAM_RECHECK 32

/* True when this datagram of a socket judged to carry no known protocol is not examined. */
static __always_inline bool dgram_unexamined(struct sk_state *st)
{
	__u8 n = st->dgram_unknown;
	if (n < DGRAM_VERDICT_AFTER)
		return false;
	/* Judged: n cycles through VERDICT_AFTER .. VERDICT_AFTER + RECHECK - 1; the first of
	 * each cycle is examined. */
	st->dgram_unknown = n + 1 < DGRAM_VERDICT_AFTER + DGRAM_RECHECK ? n + 1 : DGRAM_VERDICT_AFTER;
	return n != DGRAM_VERDICT_AFTER;
}

/* A datagram examined was of no known protocol. */
static __always_inline void dgram_note_unknown(struct sk_state *st)
{
	if (st->dgram_unknown < DGRAM_VERDICT_AFTER)
		st->dgram_unknown++;
}

/*
 * A send or receive on a connection sampled out (or cut): what the full path below does for
 * it, without its clock read and checks — the socket's storage and, when bytes moved, one
 * count (bench/notes.md: the sampled-out run's cost); a cut connection's stream position
 * and direction go on (sample_keeps); a send's stamp is cleared (a store: struct sk_state).
 * A run that moved nothing (an event loop's EAGAIN) needs nothing more. Only a connection
 * decided out can be (the decision is made below, on the full path); streams only: a
 * datagram's flow entry is counted per datagram. False: the full path runs.
 */
static __always_inline bool shed_stream_run(struct sock *sk, __u8 dir, int moved)
{
	struct sk_state *st = bpf_sk_storage_get(&sk_states, sk, 0, 0);
	if (!st || !st->sock_id || !sample_sheds(&st->sample, dir))
		return false;
	if (dir == EBTOP_DIR_EGRESS)
		st->send_ns = 0;
	if (moved <= 0)
		return true;
	if (st->sample.state == EBTOP_SAMPLE_CUT) {
		st->sample.last_dir = dir + 1;
		__sync_fetch_and_add(&st->seq[dir & 1], (__u64)moved);
	}
	if (!task_selected(bpf_get_current_pid_tgid() >> 32)) {
		if (count_flows)
			flow_note_owner(sk);
		return true;
	}
	if (count_flows && !st->flow_owner_known)
		st->flow_owner_known = flow_note_owner(sk);
	count(EBTOP_CNT_SHED_FAST, 1);
	tls_note_shed(&st->shed_tls_looks);
	return true;
}

static __always_inline int on_length(struct sock *sk, int ret, int flags, __u8 dir)
{
	if (bench_cut == 1)
		return 0;
	bool dgram = sk && ((struct sock___cap *)sk)->sk_type == SOCK_DGRAM;
	bool peek = dir == EBTOP_DIR_INGRESS && (flags & MSG_PEEK);
	if (!dgram && sk && shed_stream_run(sk, dir, peek ? 0 : ret))
		return 0;
	/* Helpers taken once per run: each call is a return through this VM's (and any
	 * SRSO-mitigated CPU's) return thunk. */
	struct task_struct___cap *task = (struct task_struct___cap *)bpf_get_current_task_btf();
	if (ret <= 0 || !sk || peek) {
		/* A send's start is taken whatever the outcome, so a failed send leaves no stale
		 * start behind. */
		if (dir == EBTOP_DIR_EGRESS && !dgram && sk) {
			struct sk_state *st = bpf_sk_storage_get(&sk_states, sk, 0, 0);
			if (st)
				st->send_ns = 0;
		}
		if (ret <= 0)
			mmsg_cursor_on_nothing_moved(task, ret);
		/* A UDP peer the cgroup hooks stashed in this syscall is this call's only. */
		if (count_flows && sk && ((struct sock___flows *)sk)->sk_protocol == IPPROTO_UDP) {
			struct peer_stash stale = {};
			udp_take_peer(sk, (struct task_struct *)task, &stale);
		}
		return 0; /* a peek's bytes are read again later */
	}
	__u8 family = sk->__sk_common.skc_family;
	if (family != AF_INET && family != AF_INET6)
		return 0;
	__u8 sock_type = ((struct sock___cap *)sk)->sk_type;
	if (sock_type != SOCK_STREAM && sock_type != SOCK_DGRAM)
		return 0;
	/* The clock only for bytes that moved on an Internet socket (an event loop's empty
	 * receives, EAGAIN, are one per request for nginx). A datagram is stamped once it is to
	 * be delivered: most are not (no known protocol, another process's), and reading the
	 * clock source costs a guest ~50 ns per datagram. */
	__u64 now = dgram ? 0 : bpf_ktime_get_ns();
	__u64 start = now;
	bool tcp_flow = count_flows && sock_type == SOCK_STREAM;
	/* The flow table counts every process's datagrams, selected or not. */
	struct peer_stash dgram_peer = {};
	if (count_flows && sock_type == SOCK_DGRAM &&
	    ((struct sock___flows *)sk)->sk_protocol == IPPROTO_UDP) {
		udp_take_peer(sk, (struct task_struct *)task, &dgram_peer);
		flow_count_udp(sk, family, ret, dir == EBTOP_DIR_EGRESS, &dgram_peer,
			       (struct task_struct *)task);
	}
	__u64 id = bpf_get_current_pid_tgid();
	bool selected = task_selected(id >> 32);
	if (selected && filter_port_count) {
		__u16 lport = sk->__sk_common.skc_num;
		__u16 rport = bpf_ntohs(sk->__sk_common.skc_dport);
		/* An unconnected datagram socket: the port of this datagram's peer. */
		if (!rport && dgram_peer.family)
			rport = dgram_peer.port;
		selected = u16_listed(lport, filter_ports, filter_port_count) ||
			   u16_listed(rport, filter_ports, filter_port_count);
		if (!selected)
			tls_note_unwatched_io();
	}
	if (!selected) {
		/* Not captured, but its flow is listed (and filtered) by owner in user space. */
		if (tcp_flow)
			flow_note_owner(sk);
		return 0;
	}
	struct sk_state *st = bpf_sk_storage_get(&sk_states, sk, 0, BPF_SK_STORAGE_GET_F_CREATE);
	if (!st) {
		count(EBTOP_CNT_INFLIGHT_FULL, 1);
		if (tcp_flow)
			flow_note_owner(sk);
		return 0;
	}
	if (tcp_flow && !st->flow_owner_known)
		st->flow_owner_known = flow_note_owner(sk);
	/* A send's start is the TCP layer's (tcp_sendmsg_locked): a datagram's is its hook. Taken
	 * (and the stamp cleared) now, used if the connection is captured. */
	if (dir == EBTOP_DIR_EGRESS && !dgram) {
		if (st->send_ns && st->send_ns <= now && st->send_tid == (__u32)id)
			start = st->send_ns;
		st->send_ns = 0;
	}
	count(EBTOP_CNT_SOCK_SYSCALLS, 1);
	if (!st->sock_id)
		st->sock_id = sock_inode(sk);
	/* Sampled out: nothing more than the hook and the socket's storage (the flow's bytes
	 * were counted above). */
	if (!sample_keeps(&st->sample, dir, st->sock_id)) {
		if (st->sample.state == EBTOP_SAMPLE_CUT)
			__sync_fetch_and_add(&st->seq[dir & 1], (__u64)ret);
		if (sock_type == SOCK_STREAM)
			tls_note_shed(&st->shed_tls_looks);
		return 0;
	}
	__u64 len = (__u64)ret;
	__u64 seq = __sync_fetch_and_add(&st->seq[dir & 1], len);
	if (st->proto == EBTOP_PROTO_FILTERED || bench_cut == 2)
		return 0;
	if (sock_type == SOCK_DGRAM && st->proto == EBTOP_PROTO_UNKNOWN && !capture_all &&
	    dgram_unexamined(st)) {
		count(EBTOP_CNT_SKIPPED_UNKNOWN, 1);
		count(EBTOP_CNT_SKIPPED_BYTES, len);
		count(EBTOP_CNT_SKIPPED_UNEXAMINED, 1);
		return 0;
	}
	struct call_args c = {};
	bool have_args = false;
	/* TLS runs over streams (DTLS is not decoded): a datagram socket skips its checks. */
	if (sock_type == SOCK_STREAM && tls_may_be(st->proto)) {
		/* Inside an SSL call of this thread: a TLS socket, whose plaintext the TLS probes
		 * deliver; its close then matters to user space. Outside any: perhaps the
		 * ciphertext of a memory BIO, which the socket's first bytes may bind (tls.h). */
		bool tls = tls_note_io(sk, st->sock_id, family, sock_type, &st->proto);
		if (!tls) {
			__u32 hello = 0;
			if (seq == 0) {
				syscall_args(&c, task, dir, sk, len);
				have_args = true;
				hello = tls_hello_at(c.arg, c.arg2, c.source, len);
			}
			tls = tls_membio_io(sk, st->sock_id, family, sock_type, dir, hello);
		}
		if (tls && !st->delivered) {
			st->delivered = 1;
			st->pid = id >> 32;
			task_comm((struct task_struct *)task, st->comm);
		}
		if (st->proto == EBTOP_PROTO_TLS) {
			count(EBTOP_CNT_TLS_CIPHER, 1);
			count(EBTOP_CNT_TLS_CIPHER_BYTES, len);
			return 0;
		}
	}

	if (!have_args)
		syscall_args(&c, task, dir, sk, len);
	__u32 limit = len < snaplen ? (__u32)len : snaplen;
	/* A length-only first send cannot be recognised: counted as skipped. */
	bool deliver;
	__u8 proto = select_protocol(&st->proto, c.source, c.arg, c.arg2, limit, len,
				     sock_type == SOCK_DGRAM, seq, &deliver);
	if (sock_type == SOCK_DGRAM && st->proto == EBTOP_PROTO_UNKNOWN)
		dgram_note_unknown(st);
	if (!deliver || bench_cut == 3)
		return 0;
	if (!now)
		start = now = bpf_ktime_get_ns();
	if (!st->delivered) {
		st->delivered = 1;
		st->pid = id >> 32;
		task_comm((struct task_struct *)task, st->comm);
	}

	__u32 cpu = bpf_get_smp_processor_id();
	struct scratch *s = bpf_map_lookup_elem(&scratch_buf, &cpu);
	if (!s)
		return 0;
	struct ebtop_event *ev = &s->ev;
	fill_header(ev, (struct task_struct *)task, id, sk, st, family, sock_type, start, now);
	ev->dir = dir;
	ev->syscall = c.syscall;
	ev->fd = c.fd;
	if (sock_type == SOCK_DGRAM && !ev->rport) {
		/* Unconnected: the peer the cgroup hooks saw; else a send's destination argument.
		 * A receive's address argument is not filled yet (the syscall copies it out after
		 * this tracepoint): without the hooks its sender stays unknown, never stale. */
		if (dgram_peer.family == family) {
			__builtin_memcpy(ev->raddr, dgram_peer.addr, 16);
			ev->rport = dgram_peer.port;
			ev->flags |= EBTOP_F_PEER_FROM_ARG;
		} else if (dir == EBTOP_DIR_EGRESS) {
			peer_from_sockaddr(ev, c.peer_arg);
		}
	}
	__u8 rejoined = sample_mark_rejoined(&st->sample, ev, dir);
	bool sent = deep_sent(s, proto, seq, len, c.source, c.arg, c.arg2, sock_type == SOCK_STREAM);
	if (!sent) {
		__u32 cap = copy_payload(cpu, s->data, c.source, c.arg, c.arg2, limit);
		__u32 tail =
			take_tail(c.source, c.arg, c.arg2, len, &cap, sock_type == SOCK_STREAM);
		sent = submit_data(s, proto, seq, len, cap, tail, &st->go_hint);
	}
	if (sent && rejoined)
		st->sample.rejoined &= ~rejoined;
	return 0;
}

SEC("tp_btf/sock_send_length")
int BPF_PROG(cap_send_length, struct sock *sk, int ret, int flags)
{
	return on_length(sk, ret, flags, EBTOP_DIR_EGRESS);
}

SEC("tp_btf/sock_recv_length")
int BPF_PROG(cap_recv_length, struct sock *sk, int ret, int flags)
{
	return on_length(sk, ret, flags, EBTOP_DIR_INGRESS);
}

/* The start of a TCP send (it may fire again per segment of a large one: the first counts). */
SEC("tp_btf/tcp_sendmsg_locked")
int BPF_PROG(cap_tcp_send_start, struct sock *sk)
{
	/* A connection sampled out or left out by --proto needs no start: a lookup of its state
	 * instead of a clock read and a write per send (measured: 452 ns of BPF per nginx request
	 * with every connection sampled out, docs/performance.md). */
	struct sk_state *st = bpf_sk_storage_get(&sk_states, sk, 0, 0);
	if (st && (st->proto == EBTOP_PROTO_FILTERED || sample_sheds(&st->sample, EBTOP_DIR_EGRESS)))
		return 0;
	__u64 id = bpf_get_current_pid_tgid();
	if (!st) {
		/* A socket's first send: its state is made here if its length hook would make it. */
		if (!task_selected(id >> 32))
			return 0;
		if (filter_port_count &&
		    !u16_listed(sk->__sk_common.skc_num, filter_ports, filter_port_count) &&
		    !u16_listed(bpf_ntohs(sk->__sk_common.skc_dport), filter_ports,
				filter_port_count))
			return 0;
		st = bpf_sk_storage_get(&sk_states, sk, 0, BPF_SK_STORAGE_GET_F_CREATE);
		if (!st)
			return 0;
	}
	/* The first segment's stamp stands (the length hook clears it). */
	if (st->send_ns && st->send_tid == (__u32)id)
		return 0;
	st->send_ns = bpf_ktime_get_ns();
	st->send_tid = (__u32)id;
	return 0;
}

/*
 * A TCP connection whose data user space saw is over: one close record. Often in softirq, so
 * possibly inside a capture program of this CPU: the record is made on the stack, never in the
 * CPU's scratch record (emit_stack_record).
 */
SEC("tp_btf/inet_sock_set_state")
int BPF_PROG(cap_set_state, struct sock *sk, int oldstate, int newstate)
{
	if (newstate != TCP_CLOSE)
		return 0;
	struct sk_state *st = bpf_sk_storage_get(&sk_states, sk, 0, 0);
	if (!st || !st->delivered || st->proto == EBTOP_PROTO_FILTERED)
		return 0;
	st->delivered = 0;
	if (st->proto == EBTOP_PROTO_TLS)
		tls_membio_close(st->sock_id);
	struct ebtop_event ev = {};
	__u8 family = sk->__sk_common.skc_family;
	__u64 now = bpf_ktime_get_ns();
	fill_header(&ev, bpf_get_current_task_btf(), bpf_get_current_pid_tgid(), sk, st, family,
		    SOCK_STREAM, now, now);
	/* Often in softirq context: the owner is the process that moved the data. */
	ev.pid = st->pid;
	ev.tid = st->pid;
	__builtin_memcpy(ev.comm, st->comm, sizeof(ev.comm));
	/* Direction, position and lengths stay 0 (the record starts zeroed). */
	ev.kind = EBTOP_EV_CLOSE;
	ev.syscall = EBTOP_SC_CLOSE;
	ev.fd = -1;
	ev.proto = EBTOP_PROTO_UNKNOWN;
	if (st->proto == EBTOP_PROTO_TLS)
		ev.flags |= EBTOP_F_TLS; /* ends the connection's plaintext stream */
	if (emit_stack_record(&ev))
		count(EBTOP_CNT_LOST, 1);
	else
		count(EBTOP_CNT_EVENTS, 1);
	return 0;
}
