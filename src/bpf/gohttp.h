/* SPDX-License-Identifier: GPL-2.0 */
/*
 * Go net/http's HTTP/1 client, for the call chains (issue 50, src/chains.rs): a request made
 * with `http.Get`/`Client.Do` is written to its socket by the connection's
 * `persistConn.writeLoop` goroutine, not by the goroutine that asked, so the write's
 * goroutine (gochain.h) says nothing of the request it serves. Three uprobes say who asked:
 *   - entry of `persistConnWriter.Write(w)` (w is one pointer, pc: the register holds it),
 *     where writeLoop's buffered writer flushes a request to the socket, right before the
 *     write: goroutine W writes for pc (also on connections older than ebtop);
 *   - each return instruction of writeLoop: W ends (its g may then run another goroutine);
 *   - entry of `(*persistConn).roundTrip(pc, req)`, once per request: the calling goroutine
 *     asks pc for its next request (pc carries one request at a time: Go's client never
 *     pipelines, and hands a connection to a new request only once the last was written).
 * Each is a header-only record (EBTOP_EV_GO_HTTP) with the proved goroutine after it, on the
 * first ring, in the records' clock; user space joins them to W's writes. Entry sites are the
 * push after Go's stack check (src/tls/golang.rs): the receiver is still in its register.
 * Only with go_goroutines (the chains are on) and on a goroutine proved as gochain.h does.
 * Include after tls.h.
 */
#ifndef EBTOP_GOHTTP_H
#define EBTOP_GOHTTP_H

/* A probe's record (EBTOP_EV_GO_HTTP): the header and 8 bytes after it. */
struct probe_note_rec {
	struct ebtop_event ev;
	__u64 extra;
};

/*
 * One probe record: probe `what` (in total_len), object `seq`, `fd`, and 8 bytes after the
 * header — the goroutine (`flags` EBTOP_F_GOROUTINE, `cap_len` 0) or a payload (`cap_len` 8,
 * ngxchain.h). On the first ring, in the records' clock.
 */
static __always_inline void probe_note_emit(__u64 id, __u64 what, __u64 seq, __s32 fd,
					    __u16 flags, __u32 cap_len, __u64 extra)
{
	struct probe_note_rec r = {};
	__u64 now = bpf_ktime_get_ns();
	r.ev.start_ns = now;
	r.ev.end_ns = now;
	r.ev.seq = seq;
	r.ev.total_len = what;
	r.ev.cap_len = cap_len;
	r.ev.pid = id >> 32;
	r.ev.tid = (__u32)id;
	r.ev.fd = fd;
	r.ev.kind = EBTOP_EV_GO_HTTP;
	r.ev.syscall = EBTOP_SC_OTHER;
	r.ev.family = AF_INET;
	r.ev.sock_type = SOCK_STREAM;
	r.ev.flags = flags;
	current_comm(r.ev.comm);
	r.extra = extra;
	__u32 cpu = bpf_get_smp_processor_id();
	struct scratch *s = bpf_map_lookup_elem(&scratch_buf, &cpu);
	__u64 wake = s ? ring_flags_for(s, 0, sizeof(r)) : BPF_RB_NO_WAKEUP;
	if (ring_output(0, &r, sizeof(r), wake))
		count(EBTOP_CNT_LOST, 1);
	else
		count(EBTOP_CNT_EVENTS, 1);
}

/* One header-only record: probe `what`, object `pc` (in seq), goroutine `g` after it. */
static __always_inline void go_http_emit(__u64 id, __u64 what, __u64 pc, __u64 g)
{
	probe_note_emit(id, what, pc, -1, EBTOP_F_GOROUTINE, 0, g);
}

static __always_inline int go_http_note(struct pt_regs *ctx, __u64 what, __u64 pc)
{
	__u64 id = bpf_get_current_pid_tgid();
	__u32 tgid = id >> 32;
	if (!go_goroutines || !task_selected(tgid))
		return 0;
	tls_count_hit(ctx, tgid);
	__u64 g = go_prove(bpf_get_current_task_btf());
	if (!g)
		return 0; /* no goroutine proved: nothing user space could join */
	go_http_emit(id, what, pc, g);
	return 0;
}

/* func (w persistConnWriter) Write(p []byte) (int, error); persistConnWriter{pc} */
SEC("uprobe")
int go_http_conn_write_enter(struct pt_regs *ctx)
{
	__u64 pc = GO_ARG1(ctx);
	asm volatile("" : "+r"(pc));
	return go_http_note(ctx, EBTOP_GO_HTTP_CONN_WRITE, pc);
}

/* func (pc *persistConn) writeLoop(): its return instructions */
SEC("uprobe")
int go_http_write_loop_return(struct pt_regs *ctx)
{
	return go_http_note(ctx, EBTOP_GO_HTTP_WRITE_LOOP_END, 0);
}

/* func (pc *persistConn) roundTrip(req *transportRequest) (*Response, error) */
SEC("uprobe")
int go_http_round_trip_enter(struct pt_regs *ctx)
{
	__u64 pc = GO_ARG1(ctx);
	asm volatile("" : "+r"(pc));
	return go_http_note(ctx, EBTOP_GO_HTTP_ROUND_TRIP, pc);
}

#include "gospawn.h"

#endif
