/* SPDX-License-Identifier: GPL-2.0 */
/*
 * TLS plaintext from uprobes on OpenSSL's (and BoringSSL's) SSL_write / SSL_read and their
 * `_ex` variants, in a shared libssl or an executable that links it statically. User space
 * attaches the entry and return programs below (src/tls/); both capture paths include this
 * file and call `tls_note_io` for each send or receive on a socket of no known protocol or of
 * TLS, so a connection's plaintext goes out under its socket:
 *   - entry: the SSL object, the buffer and (for `_ex`) where the byte count will be written,
 *     per thread (`tls_calls`);
 *   - a send or receive the same thread makes on a socket during that call names the socket
 *     (no struct offsets of any OpenSSL version: the library's own syscall says it), and marks
 *     the socket TLS, so its ciphertext is counted and never copied;
 *   - return: what moved is copied as a data record of the socket flagged EBTOP_F_TLS, with
 *     its own byte positions per SSL object (`tls_conns`), which also remembers the socket for
 *     calls that make no syscall (a read served from OpenSSL's buffer);
 *   - a call on a socket never seen (a custom BIO) is counted, not guessed.
 * A thread's entry is overwritten by the next entry: should a library implement one function
 * by calling another (SSL_write → SSL_write_ex), the inner call reports and the outer finds
 * nothing, so nothing is counted twice.
 *
 * Go's crypto/tls ((*Conn).Write, (*Conn).Read, and the handshakes) the same way, with three
 * differences: a goroutine moves between threads while it waits (a read parks in the netpoller
 * and resumes elsewhere), so its call is keyed by the goroutine (`g`, in R14 on amd64, saved
 * in the user registers at every syscall too) rather than the thread; the arguments come in
 * Go's register ABI (receiver, buffer pointer, length); and never a uretprobe (it rewrites the
 * return address on the stack, which Go moves and inspects: the program crashes) — user space
 * places an entry probe on each of the function's return instructions instead.
 * Include after capture.h.
 */
#ifndef EBTOP_TLS_H
#define EBTOP_TLS_H

/* tls_call.dir of a handshake (SSL_do_handshake): it names the socket, moves no plaintext. */
#define TLS_HANDSHAKE 2

/* tls_call.has_sock: the call's I/O was on a socket --port leaves out. */
#define TLS_UNWATCHED 2
/* tls_call.has_sock: the call's I/O was on a socket the connection sample leaves out. */
#define TLS_SHED 3

/* Set by user space: the TLS probes are attached (--tls on). */
const volatile bool tls_capture = false;

#if defined(__TARGET_ARCH_arm64)
#define UPROBE_ARG1(c) ((c)->regs[0])
#define UPROBE_ARG2(c) ((c)->regs[1])
#define UPROBE_ARG4(c) ((c)->regs[3])
#define UPROBE_RET(c) ((c)->regs[0])
/* Go's ABIInternal: the goroutine, the first three integer arguments, the first result. */
#define GO_G(c) ((c)->regs[28])
#define GO_REG_G regs[28]
#define GO_ARG1(c) ((c)->regs[0])
#define GO_ARG2(c) ((c)->regs[1])
#define GO_ARG3(c) ((c)->regs[2])
#define GO_RET(c) ((c)->regs[0])
#else
#define UPROBE_ARG1(c) ((c)->di)
#define UPROBE_ARG2(c) ((c)->si)
#define UPROBE_ARG4(c) ((c)->cx)
#define UPROBE_RET(c) ((c)->ax)
#define GO_G(c) ((c)->r14)
#define GO_REG_G r14
#define GO_ARG1(c) ((c)->ax)
#define GO_ARG2(c) ((c)->bx)
#define GO_ARG3(c) ((c)->cx)
#define GO_RET(c) ((c)->ax)
#endif

/* The socket a TLS connection runs on, as its records carry it. */
struct tls_sock {
	__u64 sock_id;
	__u8 family;
	__u8 sock_type;
	__u16 lport;
	__u16 rport;
	__u16 _pad;
	__u8 laddr[16];
	__u8 raddr[16];
};

/* Per thread (per goroutine for Go): the SSL call in progress. */
struct tls_call {
	__u64 ssl;
	__u64 buf;
	__u64 count_at; /* _ex: the size_t * the byte count is written to; 0: the return value */
	__u64 start_ns;
	/* Go's Write: the plaintext's length, known at entry (0 otherwise). */
	__u64 write_len;
	__u8 dir;
	__u8 has_sock; /* 0: no socket I/O seen; 1: `sock`; TLS_UNWATCHED */
	__u8 emitted;  /* the plaintext went out already (Go's Write, at its first socket I/O) */
	__u8 _pad[5];
	struct tls_sock sock;
};

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 32768);
	__type(key, __u64); /* pid_tgid */
	__type(value, struct tls_call);
} tls_calls SEC(".maps");

/* A Go call in progress: per goroutine of a process. */
struct tls_go_key {
	__u64 g;
	__u32 tgid;
	__u32 _pad;
};

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 32768);
	__type(key, struct tls_go_key);
	__type(value, struct tls_call);
} tls_go_calls SEC(".maps");

/* Set by user space once a Go program is probed: until then a send or receive outside any
 * OpenSSL call costs no second lookup. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u32);
} tls_go_probed SEC(".maps");

struct tls_conn_key {
	__u64 ssl;
	__u32 tgid;
	__u32 _pad;
};

/* tls_conn.membio: how the object's socket was learned. */
#define TLS_MB_SYSCALL 0   /* from a send or receive inside its call (a socket BIO) */
#define TLS_MB_TENTATIVE 1 /* memory BIO, client: its ClientHello went out on the socket; not
			    * used until the object is the one to take the ServerHello */
#define TLS_MB_BOUND 2     /* memory BIO: both first flights proved it (tls_membio_io) */

/* Per SSL object: its socket and the plaintext's positions and protocol. */
struct tls_conn {
	struct tls_sock sock;
	__u64 seq[2];
	__u8 proto;
	__u8 membio; /* TLS_MB_* */
	__u8 _pad[6];
};

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 65536);
	__type(key, struct tls_conn_key);
	__type(value, struct tls_conn);
} tls_conns SEC(".maps");

/* Probe hits per process (entries and returns): what the probes cost each process. Those at
 * sites the kernel single-steps out of line (user space marks them with the attach cookie)
 * also under the key tgid | TLS_STEPPED_KEY: they cost several times more. */
#define TLS_STEPPED_KEY (1u << 31)
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 16384);
	__type(key, __u32);
	__type(value, __u64);
} tls_hits SEC(".maps");

static __always_inline void tls_count_key(__u32 tgid)
{
	__u64 *n = bpf_map_lookup_elem(&tls_hits, &tgid);
	if (n) {
		__sync_fetch_and_add(n, 1);
		return;
	}
	__u64 one = 1;
	if (bpf_map_update_elem(&tls_hits, &tgid, &one, BPF_NOEXIST)) {
		n = bpf_map_lookup_elem(&tls_hits, &tgid);
		if (n)
			__sync_fetch_and_add(n, 1);
	}
}

static __always_inline void tls_count_hit(void *ctx, __u32 tgid)
{
	tls_count_key(tgid);
	if (bpf_get_attach_cookie(ctx))
		tls_count_key(tgid | TLS_STEPPED_KEY);
}

/*
 * A send or receive on `sk` (a socket of no known protocol yet, or TLS: `*conn_proto`): if
 * the thread is inside an SSL call, that call runs on this socket, which is TLS from now on.
 */
/*
 * Whether sends and receives of a connection of protocol `proto` are shown to tls_note_io: no
 * protocol yet, TLS, or one that may turn to TLS in-band (PostgreSQL and MySQL start in
 * cleartext and switch after an SSLRequest). Costs one lookup per send or receive of those.
 */
static __always_inline bool tls_may_be(__u8 proto)
{
	return tls_capture && (proto == EBTOP_PROTO_UNKNOWN || proto == EBTOP_PROTO_TLS ||
			       proto == EBTOP_PROTO_POSTGRES || proto == EBTOP_PROTO_MYSQL);
}

/* The TLS call the current thread is in: an OpenSSL call of the thread, or a Go call of the
 * goroutine it runs (the g register as the syscall saved it). */
static __always_inline struct tls_call *tls_current_call(void)
{
	__u64 id = bpf_get_current_pid_tgid();
	struct tls_call *c = bpf_map_lookup_elem(&tls_calls, &id);
	if (c)
		return c;
	__u32 zero = 0;
	__u32 *go = bpf_map_lookup_elem(&tls_go_probed, &zero);
	if (!go || !*go)
		return NULL;
	struct pt_regs *regs = (struct pt_regs *)bpf_task_pt_regs(bpf_get_current_task_btf());
	if (!regs)
		return NULL;
	struct tls_go_key key = { .g = regs->GO_REG_G, .tgid = id >> 32 }; /* a BTF pointer: a plain load */
	return bpf_map_lookup_elem(&tls_go_calls, &key);
}

int tls_go_write_out(struct tls_call *c);

static __always_inline bool tls_note_io(struct sock *sk, __u64 sock_id, __u8 family,
					__u8 sock_type, __u8 *conn_proto)
{
	if (!tls_capture)
		return false;
	struct tls_call *c = tls_current_call();
	if (!c)
		return false;
	/* A connection of no known protocol yet, or one that switched to TLS in-band after a
	 * cleartext start (PostgreSQL's SSLRequest, MySQL's): TLS from now on. */
	*conn_proto = EBTOP_PROTO_TLS;
	if (c->has_sock == 1 && c->sock.sock_id == sock_id)
		return true;
	struct ebtop_event tuple = {};
	fill_tuple(&tuple, sk, family);
	c->sock.sock_id = sock_id;
	c->sock.family = family;
	c->sock.sock_type = sock_type;
	c->sock.lport = tuple.lport;
	c->sock.rport = tuple.rport;
	__builtin_memcpy(c->sock.laddr, tuple.laddr, 16);
	__builtin_memcpy(c->sock.raddr, tuple.raddr, 16);
	c->has_sock = 1;
	if (c->write_len && !c->emitted) {
		/* Go's Write: its plaintext goes out now, at its first socket I/O, not at its
		 * return — another goroutine may read the answer before this one returns, and the
		 * request must come first. */
		c->emitted = 1;
		tls_go_write_out(c);
	}
	return true;
}

/*
 * Memory BIOs (Node's TLSWrap, Python's ssl.MemoryBIO under asyncio): the library reads and
 * writes ciphertext in memory, and the program moves it to and from the socket itself, outside
 * any SSL call — no syscall inside the call names the socket. The SSL object is bound to its
 * socket once, by its handshake, from what one thread does in order (docs/architecture.md,
 * "TLS through memory BIOs"):
 *   - server: the thread receives a socket's first bytes, a ClientHello; its next SSL calls
 *     are all of one object never bound; its next send is that socket's first bytes, a
 *     ServerHello. The ServerHello answers that ClientHello, so it was made by the object that
 *     took it, after the receive and before the send: the only object that ran in between.
 *   - client: the thread's next send after a call of an object never bound (the last such
 *     call since its last socket op) is a socket's first bytes, a ClientHello: that object is
 *     bound TENTATIVE, which carries nothing. When the thread receives that socket's first
 *     bytes (a ServerHello), its next SSL call must be on that object — only the object that
 *     made the ClientHello can take the answer — and only then is it BOUND. Plaintext moves
 *     only after that.
 * Kept per thread in task storage, created only by a thread that receives a first flight
 * outside an SSL call or makes an SSL call on no socket: a program whose socket I/O happens
 * inside its SSL calls (a socket BIO: nginx, curl) never creates one and pays nothing.
 * What cannot be proved stays unbound and its calls are counted (tls_no_socket).
 */
#define TLS_HELLO_CLIENT 1
#define TLS_HELLO_SERVER 2
#define TLS_MB_MANY ((__u64)-1) /* more than one object ran: no binding from this window */
#ifndef BPF_F_NO_PREALLOC
#define BPF_F_NO_PREALLOC 1 /* required of local storage maps */
#endif

struct tls_mb_thread {
	/* The one SSL object never bound whose calls ran on this thread since its last socket
	 * op (send or receive on a socket of TLS or of no known protocol), or TLS_MB_MANY. */
	__u64 cand;
	/* The socket whose first bytes, a ClientHello, this thread received just before cand's
	 * first call (a server's bracket), or 0. */
	__u64 cand_rx;
	/* The thread's last socket op received this socket's first bytes, a hello (rx_kind), and
	 * no SSL call ran since; 0: not so. */
	__u64 rx_sock;
	/* An object whose call moved plaintext since the thread's last socket op: its handshake
	 * is over, so neither that call nor its calls after it in this window (the read that
	 * ends a read loop with "want read") are a candidate's (a connection open before ebtop,
	 * or on a port --port leaves out, would otherwise spoil the window of a new one). */
	__u64 moved;
	/* The last object never bound whose call moved no plaintext since the thread's last
	 * socket op: a client's ClientHello is made by the call right before its send. */
	__u64 last;
	__u8 rx_kind;
	__u8 _pad[7];
};

struct {
	__uint(type, BPF_MAP_TYPE_TASK_STORAGE);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, int);
	__type(value, struct tls_mb_thread);
} tls_mb_threads SEC(".maps");

/* A socket bound to a memory-BIO SSL object: its close unbinds the object, which the program
 * frees and the allocator hands out again for the next connection. */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 65536);
	__type(key, __u64); /* sock_id */
	__type(value, struct tls_conn_key);
} tls_mb_socks SEC(".maps");

/*
 * Whether a connection's first bytes in one direction are a ClientHello or ServerHello
 * record: content type 22, version 3.x, handshake type 1 or 2, and the handshake message's
 * 24-bit length within the record's (an encrypted record that happens to start so — TLS 1.2
 * renegotiation on a connection ebtop saw only from then on — fails that with odds of about
 * 2^-10 and would still need the other flight's adjacency). A global function: verified once.
 */
__noinline __u32 tls_hello_at(__u64 ptr, __u64 cnt, __u32 source, __u64 len)
{
	__u8 h[9] = {};
	__u64 base = ptr;
	if (len < sizeof(h)) /* bytes moved: a buffer holds nothing beyond them */
		return 0;
	if (source == SRC_IOV) {
		struct ebtop_iovec iov;
		if (cnt == 0 || bpf_probe_read_user(&iov, sizeof(iov), (void *)ptr))
			return 0;
		if (iov.iov_len < sizeof(h))
			return 0;
		base = (__u64)iov.iov_base;
	} else if (source != SRC_BUF) {
		return 0;
	}
	if (bpf_probe_read_user(h, sizeof(h), (void *)base))
		return 0;
	if (h[0] != 22 || h[1] != 3 || (h[5] != 1 && h[5] != 2))
		return 0;
	__u32 rec = ((__u32)h[3] << 8) | h[4];
	__u32 msg = ((__u32)h[6] << 16) | ((__u32)h[7] << 8) | h[8];
	if (msg + 4 > rec)
		return 0;
	return h[5] == 1 ? TLS_HELLO_CLIENT : TLS_HELLO_SERVER;
}

/*
 * A send or receive on a socket of TLS or no known protocol made outside any SSL call of the
 * thread: `hello` says whether it moved the socket's first bytes in that direction and they
 * are a ClientHello/ServerHello (tls_hello_at; 0 otherwise). Binds the thread's candidate
 * object when this send proves it (above). Returns whether it did: the socket's plaintext is
 * then delivered, and its close matters to user space.
 */
static __always_inline bool tls_membio_io(struct sock *sk, __u64 sock_id, __u8 family,
					  __u8 sock_type, __u8 dir, __u32 hello)
{
	struct task_struct *task = bpf_get_current_task_btf();
	bool first_in = hello && dir == EBTOP_DIR_INGRESS;
	struct tls_mb_thread *t = bpf_task_storage_get(
		&tls_mb_threads, task, 0, first_in ? BPF_LOCAL_STORAGE_GET_F_CREATE : 0);
	if (!t)
		return false;
	__u64 cand = t->cand;
	__u64 cand_rx = t->cand_rx;
	__u64 last = t->last;
	t->cand = 0;
	t->cand_rx = 0;
	t->moved = 0;
	t->last = 0;
	t->rx_sock = first_in ? sock_id : 0;
	t->rx_kind = first_in ? (__u8)hello : 0;
	if (dir != EBTOP_DIR_EGRESS || !hello)
		return false;
	__u8 state;
	if (hello == TLS_HELLO_SERVER && cand && cand != TLS_MB_MANY && cand_rx == sock_id) {
		state = TLS_MB_BOUND;
	} else if (hello == TLS_HELLO_CLIENT && last) {
		/* Only tentative: the proof is the ServerHello's taker (tls_membio_call). */
		state = TLS_MB_TENTATIVE;
		cand = last;
	} else {
		return false;
	}
	struct ebtop_event tuple = {};
	fill_tuple(&tuple, sk, family);
	struct tls_conn fresh = {};
	fresh.sock.sock_id = sock_id;
	fresh.sock.family = family;
	fresh.sock.sock_type = sock_type;
	fresh.sock.lport = tuple.lport;
	fresh.sock.rport = tuple.rport;
	__builtin_memcpy(fresh.sock.laddr, tuple.laddr, 16);
	__builtin_memcpy(fresh.sock.raddr, tuple.raddr, 16);
	fresh.membio = state;
	struct tls_conn_key key = { .ssl = cand, .tgid = bpf_get_current_pid_tgid() >> 32 };
	bpf_map_update_elem(&tls_conns, &key, &fresh, BPF_ANY);
	bpf_map_update_elem(&tls_mb_socks, &sock_id, &key, BPF_ANY);
	count(EBTOP_CNT_TLS_MEMBIO_BOUND, 1);
	return true;
}

/*
 * An OpenSSL call of object `ssl` that made no socket I/O returned: the memory-BIO side of the
 * binding (tls_membio_io). Runs before the call's plaintext goes out, so a client's binding is
 * proved before the first plaintext it could carry.
 */
static __always_inline void tls_membio_call(__u64 ssl, __u32 tgid, bool moved)
{
	struct task_struct *task = bpf_get_current_task_btf();
	struct tls_mb_thread *t = bpf_task_storage_get(&tls_mb_threads, task, 0, 0);
	__u64 rx = 0;
	__u8 kind = 0;
	if (t) {
		rx = t->rx_sock;
		kind = t->rx_kind;
		t->rx_sock = 0;
		t->rx_kind = 0;
		if (moved)
			t->moved = ssl;
	}
	struct tls_conn_key key = { .ssl = ssl, .tgid = tgid };
	struct tls_conn *conn = bpf_map_lookup_elem(&tls_conns, &key);
	if (conn && conn->membio != TLS_MB_SYSCALL && rx) {
		if (conn->sock.sock_id != rx) {
			/* A bound object taking another socket's first flight: a new object at
			 * the address of one freed before its socket's close was seen. */
			bpf_map_delete_elem(&tls_conns, &key);
			count(EBTOP_CNT_TLS_MEMBIO_REUSED, 1);
			conn = NULL;
		} else if (kind == TLS_HELLO_SERVER && conn->membio == TLS_MB_TENTATIVE) {
			conn->membio = TLS_MB_BOUND;
		}
	}
	if (conn)
		return;
	if (!t)
		t = bpf_task_storage_get(&tls_mb_threads, task, 0, BPF_LOCAL_STORAGE_GET_F_CREATE);
	if (!t)
		return;
	if (moved) {
		t->moved = ssl;
		return;
	}
	t->last = ssl;
	if (t->moved == ssl)
		return;
	if (!t->cand) {
		t->cand = ssl;
		t->cand_rx = kind == TLS_HELLO_CLIENT ? rx : 0;
	} else if (t->cand != ssl) {
		t->cand = TLS_MB_MANY;
	}
}

/* A TLS socket closed (`sock_id`): the memory-BIO object bound to it, if any, is unbound. */
static __always_inline void tls_membio_close(__u64 sock_id)
{
	struct tls_conn_key *owner = bpf_map_lookup_elem(&tls_mb_socks, &sock_id);
	if (!owner)
		return;
	struct tls_conn_key key = *owner;
	bpf_map_delete_elem(&tls_mb_socks, &sock_id);
	struct tls_conn *conn = bpf_map_lookup_elem(&tls_conns, &key);
	if (conn && conn->membio != TLS_MB_SYSCALL && conn->sock.sock_id == sock_id)
		bpf_map_delete_elem(&tls_conns, &key);
}

/*
 * A send or receive on a socket the connection sample leaves out (sample_keeps), `looks`
 * the socket's own byte for this: if inside an SSL call, that call's plaintext is of a
 * sampled-out connection — counted (EBTOP_CNT_TLS_SHED), never taken for a call of no
 * socket (tls_no_socket) nor of the socket its object ran on before. A socket is looked at
 * on its first TLS_SHED_LOOKS sampled-out sends and receives (a TLS socket does its first
 * I/O inside the handshake's call; PostgreSQL and MySQL switch after a cleartext
 * exchange of two), then only if one was inside an SSL call: a sampled-out socket that is not
 * TLS costs this lookup that many times, not per run. Memory-BIO TLS (its I/O outside the
 * calls) is not seen here: its plaintext stays counted as tls_no_socket.
 */
#define TLS_SHED_LOOKS 4
#define TLS_SHED_SEEN 0xff

static __always_inline void tls_note_shed(__u8 *looks)
{
	if (!tls_capture)
		return;
	if (*looks != TLS_SHED_SEEN) {
		if (*looks >= TLS_SHED_LOOKS)
			return;
		*looks += 1;
	}
	struct tls_call *c = tls_current_call();
	if (!c)
		return;
	*looks = TLS_SHED_SEEN;
	if (c->has_sock != 1)
		c->has_sock = TLS_SHED;
}

/*
 * A send or receive of a selected process on a socket --port leaves out: if inside an SSL
 * call, that call (and its SSL object, from now on) is not on a watched socket, and the
 * object's remembered socket — perhaps a watched one it ran on before (nginx reuses freed
 * objects) — must not take its bytes. Outside any, it is a socket op all the same: it ends
 * the thread's memory-BIO window (tls_membio_io), so what ran before it (say, the object of
 * an unwatched connection) is never taken for a watched socket's.
 */
static __always_inline void tls_note_unwatched_io(void)
{
	if (!tls_capture)
		return;
	struct tls_call *c = tls_current_call();
	if (c) {
		if (c->has_sock != 1)
			c->has_sock = TLS_UNWATCHED;
		return;
	}
	struct tls_mb_thread *t =
		bpf_task_storage_get(&tls_mb_threads, bpf_get_current_task_btf(), 0, 0);
	if (t) {
		t->cand = 0;
		t->cand_rx = 0;
		t->moved = 0;
		t->last = 0;
		t->rx_sock = 0;
		t->rx_kind = 0;
	}
}

/* A call begins: the thread's (`calls` = tls_calls) or the goroutine's (tls_go_calls). */
static __always_inline int tls_begin(void *ctx, void *calls, void *key, __u64 ssl, __u64 buf,
				     __u64 count_at, __u64 write_len, __u8 dir, __u32 tgid)
{
	if (!task_selected(tgid))
		return 0;
	tls_count_hit(ctx, tgid);
	if (dir == TLS_HANDSHAKE) {
		/* Should a read or write run the handshake (SSL_do_handshake; Go's Read and
		 * Write call it), the call in progress goes on (its own I/O names the socket). */
		struct tls_call *busy = bpf_map_lookup_elem(calls, key);
		if (busy && busy->ssl == ssl && busy->dir != TLS_HANDSHAKE)
			return 0;
	}
	struct tls_call c = {};
	c.ssl = ssl;
	c.buf = buf;
	c.count_at = count_at;
	c.write_len = write_len;
	c.start_ns = bpf_ktime_get_ns();
	c.dir = dir;
	bpf_map_update_elem(calls, key, &c, BPF_ANY);
	return 0;
}

static __always_inline int tls_enter(struct pt_regs *ctx, __u8 dir, bool ex)
{
	/* The arguments first, each a plain load from the context: the verifier refuses a
	 * context pointer the compiler offset to share one load between branches. */
	__u64 ssl = UPROBE_ARG1(ctx);
	__u64 buf = UPROBE_ARG2(ctx);
	__u64 count_at = ex ? UPROBE_ARG4(ctx) : 0;
	asm volatile("" : "+r"(ssl), "+r"(buf), "+r"(count_at));
	__u64 id = bpf_get_current_pid_tgid();
	return tls_begin(ctx, &tls_calls, &id, ssl, buf, count_at, 0, dir, id >> 32);
}

/* Go: func (c *Conn) Write(b []byte) (int, error), Read likewise (receiver, buffer, length);
 * func (c *Conn) serverHandshake(ctx) error, clientHandshake likewise. */
static __always_inline int tls_go_enter(struct pt_regs *ctx, __u8 dir)
{
	__u64 g = GO_G(ctx);
	__u64 conn = GO_ARG1(ctx);
	__u64 buf = GO_ARG2(ctx);
	__u64 len = GO_ARG3(ctx);
	asm volatile("" : "+r"(g), "+r"(conn), "+r"(buf), "+r"(len));
	__u32 tgid = bpf_get_current_pid_tgid() >> 32;
	struct tls_go_key key = { .g = g, .tgid = tgid };
	return tls_begin(ctx, &tls_go_calls, &key, conn, buf, 0,
			 dir == EBTOP_DIR_EGRESS ? len : 0, dir, tgid);
}

/*
 * A call `c` of thread/goroutine `id`'s process ended, having moved `len` plaintext bytes
 * (a read or write; 0: nothing moved), or a handshake ended (it names the socket).
 */
static __always_inline int tls_complete(struct tls_call *cp, __u64 len, __u64 id, __u64 now)
{
	struct tls_call c = *cp;
	__u32 tgid = id >> 32;
	struct tls_conn_key key = { .ssl = c.ssl, .tgid = tgid };
	if (c.has_sock == TLS_UNWATCHED || c.has_sock == TLS_SHED) {
		/* Its object may remember a socket it ran on before (nginx reuses freed ones). */
		bpf_map_delete_elem(&tls_conns, &key);
		if (c.has_sock == TLS_SHED && c.dir != TLS_HANDSHAKE && len)
			count(EBTOP_CNT_TLS_SHED, 1);
		return 0;
	}
	if (c.dir == TLS_HANDSHAKE) {
		/* The socket of this SSL object from now on, so that a first read served from
		 * what the handshake read ahead (nginx reads ahead) is placed, and an object
		 * reused for a new connection forgets the old one. */
		struct tls_conn *known = bpf_map_lookup_elem(&tls_conns, &key);
		if (c.has_sock == 1 && (!known || known->sock.sock_id != c.sock.sock_id)) {
			struct tls_conn fresh = {};
			fresh.sock = c.sock;
			bpf_map_update_elem(&tls_conns, &key, &fresh, BPF_ANY);
		}
		return 0;
	}
	if (len == 0)
		return 0;
	count(EBTOP_CNT_TLS_CALLS, 1);
	struct tls_conn *conn = bpf_map_lookup_elem(&tls_conns, &key);
	if (c.has_sock != 1 && conn && conn->membio == TLS_MB_TENTATIVE)
		conn = NULL; /* not proved yet: counted below */
	if (c.has_sock == 1 && (!conn || conn->sock.sock_id != c.sock.sock_id)) {
		/* A new SSL object, or one reused for another connection: positions restart. */
		struct tls_conn fresh = {};
		fresh.sock = c.sock;
		bpf_map_update_elem(&tls_conns, &key, &fresh, BPF_ANY);
		conn = bpf_map_lookup_elem(&tls_conns, &key);
	}
	if (!conn) {
		/* With --port, sockets of other ports are never named (their sends and receives
		 * are filtered out before tls_note_io): not counted as a loss. */
		if (filter_port_count)
			return 0;
		count(EBTOP_CNT_TLS_NO_SOCKET, 1);
		count(EBTOP_CNT_TLS_NO_SOCKET_BYTES, len);
		return 0;
	}
	if (filter_port_count && !u16_listed(conn->sock.lport, filter_ports, filter_port_count) &&
	    !u16_listed(conn->sock.rport, filter_ports, filter_port_count))
		return 0;
	__u8 dir = c.dir & 1; /* 0 or 1: handshakes returned above */
	__u64 seq = __sync_fetch_and_add(&conn->seq[dir], len);
	__u32 limit = len < snaplen ? (__u32)len : snaplen;
	bool deliver;
	__u8 proto = select_protocol(&conn->proto, SRC_BUF, c.buf, 0, limit, len,
				     conn->sock.sock_type == SOCK_DGRAM, seq, &deliver);
	if (!deliver)
		return 0;
	__u32 cpu = bpf_get_smp_processor_id();
	struct scratch *s = bpf_map_lookup_elem(&scratch_buf, &cpu);
	if (!s)
		return 0;
	struct ebtop_event *ev = &s->ev;
	ev->start_ns = c.start_ns;
	ev->end_ns = now;
	ev->sock_id = conn->sock.sock_id;
	ev->pid = tgid;
	ev->tid = (__u32)id;
	ev->fd = -1;
	ev->dir = dir;
	ev->syscall = EBTOP_SC_TLS;
	ev->family = conn->sock.family;
	ev->sock_type = conn->sock.sock_type;
	ev->flags = EBTOP_F_TLS;
	ev->tail_len = 0;
	ev->lport = conn->sock.lport;
	ev->rport = conn->sock.rport;
	__builtin_memcpy(ev->laddr, conn->sock.laddr, 16);
	__builtin_memcpy(ev->raddr, conn->sock.raddr, 16);
	current_comm(ev->comm);
	if (deep_sent(s, proto, seq, len, SRC_BUF, c.buf, 0, conn->sock.sock_type == SOCK_STREAM))
		return 0;
	__u32 cap = copy_payload(cpu, s->data, SRC_BUF, c.buf, 0, limit);
	__u32 tail = take_tail(SRC_BUF, c.buf, 0, len, &cap, conn->sock.sock_type == SOCK_STREAM);
	submit_data(s, proto, seq, len, cap, tail, NULL);
	return 0;
}

/* Go's Write at its first socket I/O (tls_note_io): its whole plaintext, as at a return. A
 * global function: the verifier checks it once, not inside each capture program that calls
 * it (together they exceed its budget). */
__noinline int tls_go_write_out(struct tls_call *c)
{
	if (!c)
		return 0;
	return tls_complete(c, c->write_len, bpf_get_current_pid_tgid(), bpf_ktime_get_ns());
}

static __always_inline int tls_exit(struct pt_regs *ctx)
{
	long ret = (long)UPROBE_RET(ctx);
	asm volatile("" : "+r"(ret));
	__u64 now = bpf_ktime_get_ns();
	__u64 id = bpf_get_current_pid_tgid();
	struct tls_call *cp = bpf_map_lookup_elem(&tls_calls, &id);
	if (!cp)
		return 0;
	tls_count_hit(ctx, id >> 32);
	struct tls_call c = *cp;
	bpf_map_delete_elem(&tls_calls, &id);
	__u64 len = 0;
	if (c.dir == TLS_HANDSHAKE) {
		/* moves nothing */
	} else if (c.count_at) {
		/* SSL_*_ex return 1, OpenSSL's internal functions > 0, with the count written. */
		if ((int)ret <= 0 || bpf_probe_read_user(&len, sizeof(len), (void *)c.count_at))
			len = 0;
	} else if ((int)ret > 0) {
		len = (__u64)(int)ret;
	}
	if (c.has_sock == 0)
		tls_membio_call(c.ssl, id >> 32, len > 0);
	return tls_complete(&c, len, id, now);
}

/*
 * A return instruction of a Go function probed (`handshake`: of serverHandshake or
 * clientHandshake). A handshake's return inside a Read or Write (which run it first) leaves
 * the read or write in progress, and the other way round.
 */
static __always_inline int tls_go_exit(struct pt_regs *ctx, bool handshake)
{
	__u64 g = GO_G(ctx);
	long ret = (long)GO_RET(ctx);
	asm volatile("" : "+r"(g), "+r"(ret));
	__u64 now = bpf_ktime_get_ns();
	__u64 id = bpf_get_current_pid_tgid();
	struct tls_go_key key = { .g = g, .tgid = id >> 32 };
	struct tls_call *cp = bpf_map_lookup_elem(&tls_go_calls, &key);
	if (!cp || (cp->dir == TLS_HANDSHAKE) != handshake)
		return 0;
	tls_count_hit(ctx, id >> 32);
	struct tls_call c = *cp;
	bpf_map_delete_elem(&tls_go_calls, &key);
	/* The byte count (int64) is the first result; an error comes with it. A write whose
	 * plaintext went out at its first socket I/O is done. */
	__u64 len = !handshake && !c.emitted && ret > 0 ? (__u64)ret : 0;
	return tls_complete(&c, len, id, now);
}

/* int SSL_write(SSL *, const void *, int) and int SSL_write_ex(SSL *, const void *, size_t,
 * size_t *written); the reads likewise. One return program serves each pair. */
SEC("uprobe")
int tls_write_enter(struct pt_regs *ctx)
{
	return tls_enter(ctx, EBTOP_DIR_EGRESS, false);
}

SEC("uprobe")
int tls_write_ex_enter(struct pt_regs *ctx)
{
	return tls_enter(ctx, EBTOP_DIR_EGRESS, true);
}

SEC("uprobe")
int tls_read_enter(struct pt_regs *ctx)
{
	return tls_enter(ctx, EBTOP_DIR_INGRESS, false);
}

SEC("uprobe")
int tls_read_ex_enter(struct pt_regs *ctx)
{
	return tls_enter(ctx, EBTOP_DIR_INGRESS, true);
}

/* int SSL_do_handshake(SSL *): SSL_accept and SSL_connect run through it. */
SEC("uprobe")
int tls_handshake_enter(struct pt_regs *ctx)
{
	return tls_enter(ctx, TLS_HANDSHAKE, false);
}

SEC("uretprobe")
int tls_return(struct pt_regs *ctx)
{
	return tls_exit(ctx);
}

/* Go crypto/tls: entry probes (after the stack check, where user space finds it: same
 * registers) and, on each return instruction, the return programs. */
SEC("uprobe")
int tls_go_write_enter(struct pt_regs *ctx)
{
	return tls_go_enter(ctx, EBTOP_DIR_EGRESS);
}

SEC("uprobe")
int tls_go_read_enter(struct pt_regs *ctx)
{
	return tls_go_enter(ctx, EBTOP_DIR_INGRESS);
}

SEC("uprobe")
int tls_go_handshake_enter(struct pt_regs *ctx)
{
	return tls_go_enter(ctx, TLS_HANDSHAKE);
}

SEC("uprobe")
int tls_go_return(struct pt_regs *ctx)
{
	return tls_go_exit(ctx, false);
}

SEC("uprobe")
int tls_go_handshake_return(struct pt_regs *ctx)
{
	return tls_go_exit(ctx, true);
}

/* The Go net/http client probes (call chains) are attached with Go programs' TLS probes. */
#include "gohttp.h"
#include "ngxchain.h"

#endif
