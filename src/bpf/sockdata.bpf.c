// SPDX-License-Identifier: GPL-2.0
/*
 * Socket data capture from syscall tracepoints (no kprobes, no fentry: neither is available on
 * every kernel ebtop must run on). Sends: the entry program remembers the call's arguments per
 * thread once the fd is known to be an AF_INET/AF_INET6 socket (sends are stamped at entry);
 * the exit program copies up to `snaplen` bytes of what really moved into the ring buffer with
 * the byte count and both timestamps. Receives are stamped at exit and need nothing from entry:
 * their exit programs read the arguments from the registers saved at syscall entry, so a
 * receive costs one program run instead of two, and a failed one (EAGAIN) costs almost nothing.
 */
#include "vmlinux_min.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_core_read.h>
#include <bpf/bpf_endian.h>
#include "ebtop.h"
#include "filters.h"
#include "fdwalk.h"
#include "capture.h"
#include "tls.h"

char LICENSE[] SEC("license") = "GPL";

struct inflight {
	__u64 start_ns;
	__u64 sk;
	__u64 sock_id;
	__u64 arg;
	__u64 arg2;
	__u64 peer_arg; /* sockaddr * given to sendto/recvfrom, if any */
	__s32 fd;
	__u8 syscall;
	__u8 source;
	__u8 dir;
	__u8 family;
	__u8 sock_type;
	/* --port: an unconnected datagram socket of no listed local port; each datagram's own
	 * peer (its sockaddr) decides, in emit_data. */
	__u8 peer_port_decides;
};

struct sock_state {
	__u64 seq[2];
	__u8 proto;
	__u8 shed_tls_looks; /* sampled out: tls_note_shed() (tls.h) */
	__u8 go_hint; /* GO_TASK_NOT_GO: its records come from no Go program (gochain.h) */
	struct ebtop_sample_state sample; /* captured, sampled out, cut, undecided (capture.h) */
};

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 32768);
	__type(key, __u64);
	__type(value, struct inflight);
} inflight SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 131072);
	__type(key, __u64);
	__type(value, struct sock_state);
} sock_states SEC(".maps");

/* Resolves fd to an inet stream/datagram socket and applies the port filter. */
static __always_inline bool inet_socket(int fd, struct inflight *inf)
{
	__u64 ino = 0;
	struct socket *sock = fd_to_socket(fd, &ino);
	if (!sock)
		return false;
	short type = BPF_CORE_READ(sock, type);
	if (type != SOCK_STREAM && type != SOCK_DGRAM)
		return false;
	struct sock *sk = BPF_CORE_READ(sock, sk);
	if (!sk)
		return false;
	unsigned short family = BPF_CORE_READ(sk, __sk_common.skc_family);
	if (family != AF_INET && family != AF_INET6)
		return false;
	if (filter_port_count) {
		__u16 lport = BPF_CORE_READ(sk, __sk_common.skc_num);
		__u16 rport = bpf_ntohs(BPF_CORE_READ(sk, __sk_common.skc_dport));
		if (!u16_listed(lport, filter_ports, filter_port_count) &&
		    !u16_listed(rport, filter_ports, filter_port_count)) {
			if (type != SOCK_DGRAM || rport) {
				tls_note_unwatched_io();
				return false;
			}
			inf->peer_port_decides = 1;
		}
	}
	inf->sk = (__u64)sk;
	inf->sock_id = ino;
	inf->family = family;
	inf->sock_type = type;
	inf->fd = fd;
	return true;
}

static __always_inline int on_enter(__u8 syscall, __u8 source, __u8 dir, int fd, __u64 arg,
				    __u64 arg2, __u64 peer_arg)
{
	__u64 id = bpf_get_current_pid_tgid();
	if (!task_selected(id >> 32))
		return 0;
	struct inflight inf = {};
	if (!inet_socket(fd, &inf))
		return 0;
	inf.start_ns = bpf_ktime_get_ns();
	inf.syscall = syscall;
	inf.source = source;
	inf.dir = dir;
	inf.arg = arg;
	inf.arg2 = arg2;
	inf.peer_arg = peer_arg;
	if (bpf_map_update_elem(&inflight, &id, &inf, BPF_ANY))
		count(EBTOP_CNT_INFLIGHT_FULL, 1);
	else
		count(EBTOP_CNT_SOCK_SYSCALLS, 1);
	return 0;
}

static __always_inline void fill_common(struct ebtop_event *ev, const struct inflight *inf,
					__u64 end_ns)
{
	__u64 id = bpf_get_current_pid_tgid();
	struct sock *sk = (struct sock *)inf->sk;

	ev->start_ns = inf->start_ns;
	ev->end_ns = end_ns;
	ev->sock_id = inf->sock_id;
	ev->pid = id >> 32;
	ev->tid = (__u32)id;
	ev->fd = inf->fd;
	ev->syscall = inf->syscall;
	ev->dir = inf->dir;
	ev->family = inf->family;
	ev->sock_type = inf->sock_type;
	ev->flags = 0;
	ev->tail_len = 0;
	fill_tuple(ev, sk, inf->family);
	current_comm(ev->comm);
}

/*
 * One data record: `len` bytes moved; payload described by (source, ptr, cnt).
 * Returns 0 always (tracepoint convention).
 */
static __always_inline int emit_data(const struct inflight *inf, __u64 end_ns, __u64 len,
				     __u8 source, __u64 ptr, __u64 cnt, __u64 peer_sa)
{
	if (inf->peer_port_decides) {
		/* The datagram's peer as the syscall gave it (a send's destination, a receive's
		 * source, filled by the time of its exit); none given or not inet: not listed. */
		__u16 fam = 0, port = 0;
		if (!peer_sa || bpf_probe_read_user(&fam, sizeof(fam), (void *)peer_sa) ||
		    (fam != AF_INET && fam != AF_INET6) ||
		    bpf_probe_read_user(&port, sizeof(port), (void *)(peer_sa + 2)) ||
		    !u16_listed(bpf_ntohs(port), filter_ports, filter_port_count))
			return 0;
	}
	__u32 cpu = bpf_get_smp_processor_id();
	struct sock_state *st = bpf_map_lookup_elem(&sock_states, &inf->sock_id);
	if (!st) {
		struct sock_state fresh = {};
		bpf_map_update_elem(&sock_states, &inf->sock_id, &fresh, BPF_NOEXIST);
		st = bpf_map_lookup_elem(&sock_states, &inf->sock_id);
		if (!st)
			return 0;
	}
	/* Sampled out: the hooks and the socket's state only. */
	if (!sample_keeps(&st->sample, inf->dir, inf->sock_id)) {
		if (st->sample.state == EBTOP_SAMPLE_CUT)
			__sync_fetch_and_add(&st->seq[inf->dir & 1], len);
		if (inf->sock_type == SOCK_STREAM)
			tls_note_shed(&st->shed_tls_looks);
		return 0;
	}
	__u8 dir = inf->dir & 1;
	__u64 seq = __sync_fetch_and_add(&st->seq[dir], len);

	struct scratch *s = bpf_map_lookup_elem(&scratch_buf, &cpu);
	if (!s)
		return 0;
	struct ebtop_event *ev = &s->ev;

	if (tls_may_be(st->proto)) {
		/* Inside an SSL call of this thread: a TLS socket (tls.h). Outside any: perhaps
		 * the ciphertext of a memory BIO, which the socket's first bytes may bind. */
		if (!tls_note_io((struct sock *)inf->sk, inf->sock_id, inf->family, inf->sock_type,
				 &st->proto)) {
			__u32 hello = seq == 0
					      ? tls_hello_at(ptr, cnt, source, len)
					      : 0;
			tls_membio_io((struct sock *)inf->sk, inf->sock_id, inf->family,
				      inf->sock_type, inf->dir, hello);
		}
	}
	__u32 limit = len < snaplen ? (__u32)len : snaplen;
	bool deliver;
	__u8 proto = select_protocol(&st->proto, source, ptr, cnt, limit, len,
				     inf->sock_type == SOCK_DGRAM, seq, &deliver);
	if (!deliver)
		return 0;
	fill_common(ev, inf, end_ns);
	if (inf->sock_type == SOCK_DGRAM)
		peer_from_sockaddr(ev, peer_sa);
	__u8 rejoined = sample_mark_rejoined(&st->sample, ev, dir);
	bool sent = deep_sent(s, proto, seq, len, source, ptr, cnt, inf->sock_type == SOCK_STREAM);
	if (!sent) {
		__u32 cap = copy_payload(cpu, s->data, source, ptr, cnt, limit);
		__u32 tail =
			take_tail(source, ptr, cnt, len, &cap, inf->sock_type == SOCK_STREAM);
		sent = submit_data(s, proto, seq, len, cap, tail, &st->go_hint);
	}
	if (sent && rejoined)
		st->sample.rejoined &= ~rejoined;
	return 0;
}

static __always_inline int emit_lifecycle(const struct inflight *inf, __u8 kind, long ret,
					  __u64 end_ns, __u16 flags)
{
	__u32 cpu = bpf_get_smp_processor_id();
	struct scratch *s = bpf_map_lookup_elem(&scratch_buf, &cpu);
	if (!s)
		return 0;
	struct ebtop_event *ev = &s->ev;
	fill_common(ev, inf, end_ns);
	ev->kind = kind;
	ev->flags = flags;
	ev->proto = EBTOP_PROTO_UNKNOWN;
	ev->seq = 0;
	ev->total_len = (__u64)ret;
	ev->cap_len = 0;
	if (emit_record(s, sizeof(*ev)))
		count(EBTOP_CNT_LOST, 1);
	else
		count(EBTOP_CNT_EVENTS, 1);
	return 0;
}

struct mmsg_walk {
	struct inflight *inf;
	__u64 now;
	long count;
};

static long mmsg_one(__u64 i, void *ctx)
{
	struct mmsg_walk *w = ctx;
	struct ebtop_mmsghdr m;
	if ((long)i >= w->count)
		return 1;
	if (bpf_probe_read_user(&m, sizeof(m), (struct ebtop_mmsghdr *)w->inf->arg + i))
		return 1;
	if (m.msg_len)
		emit_data(w->inf, w->now, m.msg_len, SRC_IOV, (__u64)m.msg_hdr.msg_iov,
			  m.msg_hdr.msg_iovlen, (__u64)m.msg_hdr.msg_name);
	return 0;
}

/* The data of one finished call (ret > 0 bytes, or messages for mmsg). */
static __always_inline int emit_call_data(struct inflight *inf, long ret, __u64 now,
					  const __u8 source)
{
	if (source == SRC_MSG) {
		struct ebtop_user_msghdr msg;
		if (bpf_probe_read_user(&msg, sizeof(msg), (void *)inf->arg))
			return 0;
		return emit_data(inf, now, (__u64)ret, SRC_IOV, (__u64)msg.msg_iov, msg.msg_iovlen,
				 (__u64)msg.msg_name);
	}
	if (source == SRC_MMSG) {
		/* ret is the number of messages; each carries its own length. bpf_loop keeps the
		 * verifier's work to one pass over the per-message body. */
		struct mmsg_walk w = { .inf = inf, .now = now, .count = ret };
		bpf_loop(EBTOP_MAX_MMSG, mmsg_one, &w, 0);
		return 0;
	}
	return emit_data(inf, now, (__u64)ret, source, inf->arg, inf->arg2, inf->peer_arg);
}

static __always_inline int on_exit(long ret, const __u8 source)
{
	__u64 id = bpf_get_current_pid_tgid();
	struct inflight *p = bpf_map_lookup_elem(&inflight, &id);
	if (!p)
		return 0;
	struct inflight inf = *p;
	bpf_map_delete_elem(&inflight, &id);
	__u64 now = bpf_ktime_get_ns();

	if (ret <= 0)
		return 0;
	return emit_call_data(&inf, ret, now, source);
}


/* A receive, at its exit only: arguments from the registers saved at entry, stamped now. */
static __always_inline int on_recv_exit(long ret, __u8 syscall, const __u8 source)
{
	if (ret <= 0)
		return 0;
	__u64 id = bpf_get_current_pid_tgid();
	if (!task_selected(id >> 32))
		return 0;
	struct pt_regs *regs = (struct pt_regs *)bpf_task_pt_regs(bpf_get_current_task_btf());
	if (!regs)
		return 0;
	/*
	 * MSG_PEEK leaves the bytes queued: the receive that takes them comes later. Counted
	 * here, they would move the stream position twice (curl peeks one byte to see whether a
	 * kept-alive connection is still open).
	 */
	__u64 flags = 0;
	if (syscall == EBTOP_SC_RECVMSG)
		flags = REG_ARG2(regs);
	else if (syscall == EBTOP_SC_RECVFROM || syscall == EBTOP_SC_RECVMMSG)
		flags = REG_ARG3(regs);
	if (flags & MSG_PEEK)
		return 0;
	struct inflight inf = {};
	if (!inet_socket((int)REG_ARG0(regs), &inf))
		return 0;
	count(EBTOP_CNT_SOCK_SYSCALLS, 1);
	__u64 now = bpf_ktime_get_ns();
	inf.start_ns = now;
	inf.syscall = syscall;
	inf.source = source;
	inf.dir = EBTOP_DIR_INGRESS;
	inf.arg = REG_ARG1(regs);
	if (source == SRC_IOV || source == SRC_MMSG)
		inf.arg2 = REG_ARG2(regs);
	if (syscall == EBTOP_SC_RECVFROM)
		inf.peer_arg = REG_ARG4(regs);
	return emit_call_data(&inf, ret, now, source);
}

#define ARG(i) (ctx->args[i])

#define ENTER(name, sc, src, dir, a, a2, peer)                                             \
	SEC("tracepoint/syscalls/sys_enter_" #name)                                        \
	int enter_##name(struct ebtop_sys_enter_ctx *ctx)                                  \
	{                                                                                  \
		return on_enter(sc, src, dir, (int)ARG(0), a, a2, peer);                   \
	}

ENTER(write, EBTOP_SC_WRITE, SRC_BUF, EBTOP_DIR_EGRESS, ARG(1), 0, 0)
ENTER(writev, EBTOP_SC_WRITEV, SRC_IOV, EBTOP_DIR_EGRESS, ARG(1), ARG(2), 0)
ENTER(sendto, EBTOP_SC_SENDTO, SRC_BUF, EBTOP_DIR_EGRESS, ARG(1), 0, ARG(4))
ENTER(sendmsg, EBTOP_SC_SENDMSG, SRC_MSG, EBTOP_DIR_EGRESS, ARG(1), 0, 0)
ENTER(sendmmsg, EBTOP_SC_SENDMMSG, SRC_MMSG, EBTOP_DIR_EGRESS, ARG(1), ARG(2), 0)
/*
 * connect/accept are not hooked: a record per connection bought only a count, and a burst of
 * connections (10K/s) filled the ring for nothing. The flow table sees every connection's
 * lifecycle; the tracker starts following a connection at its first recognised data.
 */
/* sendfile(out_fd, in_fd, offset, count): the socket is out_fd; only the length is known. */
ENTER(sendfile64, EBTOP_SC_SENDFILE, SRC_NONE, EBTOP_DIR_EGRESS, 0, 0, 0)

/*
 * Exit programs are shared by the syscalls whose payload has the same shape (the syscall and
 * direction travel in `inflight`): fewer programs load faster. User space attaches each to the
 * sys_exit_* tracepoints listed in src/source/live.rs.
 */
#define EXIT(name, src)                                                                    \
	SEC("tracepoint")                                                                  \
	int exit_##name(struct ebtop_sys_exit_ctx *ctx)                                    \
	{                                                                                  \
		return on_exit(ctx->ret, src);                                             \
	}

EXIT(buf, SRC_BUF)   /* write, sendto */
EXIT(iov, SRC_IOV)   /* writev */
EXIT(msg, SRC_MSG)   /* sendmsg */
EXIT(mmsg, SRC_MMSG) /* sendmmsg */
EXIT(none, SRC_NONE) /* sendfile64 */

#define RECV_EXIT(name, sc, src)                                                           \
	SEC("tracepoint/syscalls/sys_exit_" #name)                                         \
	int recv_exit_##name(struct ebtop_sys_exit_ctx *ctx)                               \
	{                                                                                  \
		return on_recv_exit(ctx->ret, sc, src);                                    \
	}

RECV_EXIT(read, EBTOP_SC_READ, SRC_BUF)
RECV_EXIT(recvfrom, EBTOP_SC_RECVFROM, SRC_BUF)
RECV_EXIT(readv, EBTOP_SC_READV, SRC_IOV)
RECV_EXIT(recvmsg, EBTOP_SC_RECVMSG, SRC_MSG)
RECV_EXIT(recvmmsg, EBTOP_SC_RECVMMSG, SRC_MMSG)

SEC("tracepoint/syscalls/sys_enter_close")
int enter_close(struct ebtop_sys_enter_ctx *ctx)
{
	__u64 id = bpf_get_current_pid_tgid();
	if (!task_selected(id >> 32))
		return 0;
	struct inflight inf = {};
	if (!inet_socket((int)ARG(0), &inf))
		return 0;
	/* Another holder goes on using the socket (a child after fork, a dup): not its end. */
	if (fd_file_shared((int)ARG(0)))
		return 0;
	/* Only sockets whose data user space saw matter to it: not those of no known protocol
	 * (their closes come in bursts, e.g. a pool of 100K idle connections torn down). */
	struct sock_state *st = bpf_map_lookup_elem(&sock_states, &inf.sock_id);
	if (!st)
		return 0;
	bool delivered = st->proto != EBTOP_PROTO_FILTERED && st->sample.state != EBTOP_SAMPLE_OUT &&
			 (capture_all || st->proto != EBTOP_PROTO_UNKNOWN);
	/* A TLS socket's close ends its plaintext stream (user space ignores the close of one
	 * whose plaintext it never saw). */
	__u16 flags = st->proto == EBTOP_PROTO_TLS ? EBTOP_F_TLS : 0;
	if (flags)
		tls_membio_close(inf.sock_id);
	bpf_map_delete_elem(&sock_states, &inf.sock_id);
	if (!delivered)
		return 0;
	inf.start_ns = bpf_ktime_get_ns();
	inf.syscall = EBTOP_SC_CLOSE;
	return emit_lifecycle(&inf, EBTOP_EV_CLOSE, 0, inf.start_ns, flags);
}
