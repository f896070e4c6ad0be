/* SPDX-License-Identifier: GPL-2.0 */
/*
 * nginx (and openresty, angie: any executable exporting `ngx_chain_writer` and
 * `ngx_http_upstream_init`) proxying a request: which downstream request an upstream write
 * is for, for the call chains (issue 50, src/chains.rs). An nginx worker serves many
 * requests at once on one thread, so the thread says nothing; nginx's own structures do.
 * Every upstream module (proxy, fastcgi, uwsgi, scgi, grpc) writes its request through
 * `ngx_chain_writer(void *data, ngx_chain_t *in)` (ngx_output_chain.c; directly, or as
 * `u->output.output_filter`), right before the send on the upstream socket:
 *   data: the upstream's ngx_chain_writer_ctx_t {out, last, connection, pool, limit}
 *         -> connection (+16): the upstream ngx_connection_t {data, read, write, fd, ...}
 *         -> its data (+0): the ngx_http_request_t proxied (ngx_http_upstream_connect:
 *            `c->data = r`), whose first fields are `uint32_t signature` ("HTTP") and
 *            `ngx_connection_t *connection` (+8): the downstream connection, its fd (+24).
 * These are the first fields of structs unchanged from nginx 1.0 to 1.27 (LP64 offsets:
 * pointers 8 bytes, `fd` an int after three pointers). Proved at run time as far as it
 * goes: the request's signature, both fds sockets of this process, inet, SOCK_STREAM. Else
 * no record. The record: header-only EBTOP_EV_GO_HTTP of `what` EBTOP_NGX_UPSTREAM_WRITE,
 * `seq` the upstream socket's inode, `fd` its fd, and 8 bytes of payload: the downstream
 * socket's inode (the sock_id of both sockets' data records): gohttp.h's probe_note_emit.
 * Include after tls.h and gohttp.h.
 */
#ifndef EBTOP_NGXCHAIN_H
#define EBTOP_NGXCHAIN_H

#include "fdwalk.h"

#define NGX_HTTP_SIGNATURE 0x50545448 /* "HTTP", little-endian */
#define NGX_WRITER_CONNECTION 16       /* ngx_chain_writer_ctx_t.connection */
#define NGX_CONNECTION_FD 24           /* ngx_connection_t.fd (after data, read, write) */
#define NGX_REQUEST_CONNECTION 8       /* ngx_http_request_t.connection */

/* The first fields of ngx_connection_t and ngx_http_request_t (LP64). */
struct ngx_conn_head {
	__u64 data;
	__u64 read;
	__u64 write;
	__s32 fd;
};
_Static_assert(__builtin_offsetof(struct ngx_conn_head, fd) == NGX_CONNECTION_FD, "fd");

struct ngx_req_head {
	__u32 signature;
	__u32 pad;
	__u64 connection;
};
_Static_assert(__builtin_offsetof(struct ngx_req_head, connection) == NGX_REQUEST_CONNECTION,
	       "connection");

/* The inode of the current task's `fd` if it is an inet stream socket, else 0. */
static __always_inline __u64 ngx_tcp_socket(int fd)
{
	__u64 ino = 0;
	if (fd < 0)
		return 0;
	struct socket *sock = fd_to_socket(fd, &ino);
	if (!sock || BPF_CORE_READ(sock, type) != SOCK_STREAM)
		return 0;
	struct sock *sk = BPF_CORE_READ(sock, sk);
	if (!sk)
		return 0;
	unsigned short family = BPF_CORE_READ(sk, __sk_common.skc_family);
	if (family != AF_INET && family != AF_INET6)
		return 0;
	return ino;
}

/* ngx_int_t ngx_chain_writer(void *data, ngx_chain_t *in): its entry (`push %r15`). */
SEC("uprobe")
int ngx_chain_writer_enter(struct pt_regs *ctx)
{
	__u64 id = bpf_get_current_pid_tgid();
	__u32 tgid = id >> 32;
	if (!task_selected(tgid))
		return 0;
	tls_count_hit(ctx, tgid);
	__u64 writer = UPROBE_ARG1(ctx);
	/* One read per struct (each probe read costs ~50-100 ns): the fields are adjacent. */
	struct ngx_conn_head up_conn = {};
	struct ngx_req_head req = {};
	__u64 up_ptr = 0;
	int down_fd = -1;
	if (bpf_probe_read_user(&up_ptr, sizeof(up_ptr), (void *)(writer + NGX_WRITER_CONNECTION)) ||
	    !up_ptr)
		return 0;
	if (bpf_probe_read_user(&up_conn, sizeof(up_conn), (void *)up_ptr) || !up_conn.data)
		return 0;
	if (bpf_probe_read_user(&req, sizeof(req), (void *)up_conn.data) ||
	    req.signature != NGX_HTTP_SIGNATURE || !req.connection)
		return 0; /* not an HTTP request's upstream (a stream or mail proxy's, say) */
	if (bpf_probe_read_user(&down_fd, sizeof(down_fd),
				(void *)(req.connection + NGX_CONNECTION_FD)))
		return 0;
	int up_fd = up_conn.fd;
	if (up_fd == down_fd)
		return 0;
	__u64 up = ngx_tcp_socket(up_fd);
	if (!up)
		return 0;
	__u64 down = ngx_tcp_socket(down_fd);
	if (!down)
		return 0;

	probe_note_emit(id, EBTOP_NGX_UPSTREAM_WRITE, up, up_fd, 0, sizeof(down), down);
	return 0;
}

#endif
