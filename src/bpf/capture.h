/* SPDX-License-Identifier: GPL-2.0 */
/*
 * What both capture paths share (sockdata.bpf.c: syscall tracepoints; sockcap.bpf.c: the
 * socket layer): the settings user space writes before load, the ring buffer, counters and
 * per-CPU scratch record, the filters, protocol recognition from a message's first bytes and
 * the user-memory payload copy. Include after vmlinux_min.h, the libbpf headers, ebtop.h and
 * filters.h.
 */
#ifndef EBTOP_CAPTURE_H
#define EBTOP_CAPTURE_H

#define AF_INET 2
#define AF_INET6 10
#define SOCK_STREAM 1
#define SOCK_DGRAM 2
/* A receive that leaves the bytes queued: it moves no stream position. */
#define MSG_PEEK 2

#include "sockaddr.h"
#include "taskcomm.h"
#include "infer.h"
#include "gochain.h"

/* Set by user space before load. Filters run here so filtered-out traffic is never copied. */
const volatile __u32 self_tgid = 0;
/* Each filter: any of its first `*_count` values; a count of 0 lets everything through. */
const volatile __u32 filter_tgids[EBTOP_MAX_FILTER_VALUES] = {};
const volatile __u32 filter_tgid_count = 0;
const volatile __u16 filter_ports[EBTOP_MAX_FILTER_VALUES] = {};
const volatile __u32 filter_port_count = 0;
const volatile char filter_comms[EBTOP_MAX_FILTER_VALUES][EBTOP_TASK_COMM_LEN] = {};
const volatile __u32 filter_comm_count = 0;
const volatile __u64 filter_cgroup_ids[EBTOP_MAX_FILTER_VALUES] = {};
const volatile __u32 filter_cgroup_levels[EBTOP_MAX_FILTER_VALUES] = {};
const volatile __u32 filter_cgroup_count = 0;
const volatile __u32 snaplen = 4096;
/* When set, payload of every connection is delivered, not only of recognised protocols. */
const volatile bool capture_all = false;
/* --proto: bit (1 << enum ebtop_l7_proto) set for each protocol to deliver; 0 = all. */
const volatile __u32 proto_mask = 0;
/*
 * Wake the consumer only once this much data waits: under load one wakeup per batch instead
 * of one per record (user space also polls on a short timeout, so little data never waits long).
 */
const volatile __u64 wakeup_bytes = 256 * 1024;


enum payload_source {
	SRC_NONE = 0, /* sendfile: length only */
	SRC_BUF,      /* arg = buffer */
	SRC_IOV,      /* arg = struct iovec *, arg2 = count */
	SRC_MSG,      /* arg = struct user_msghdr * */
	SRC_MMSG,     /* arg = struct mmsghdr *, arg2 = vlen */
};

/*
 * The event rings: one per tracking thread (`--threads`), each read by its own thread. A
 * socket's records all go to one ring (its id hashed, as user space's `shard_of` does), so a
 * connection's records stay in order and no thread reads for another. User space sizes the
 * `n_shards` rings in use and gives the others one page.
 */
#define EBTOP_MAX_SHARDS 16
const volatile __u32 n_shards = 1;

struct scratch {
	/* Bytes this CPU put in each ring since it last asked how full that ring is. Before the
	 * record, on its page: behind the 32 KiB of data it cost a TLB miss per record. */
	__u32 unqueried[EBTOP_MAX_SHARDS];
	struct ebtop_event ev;
	/* Twice the largest copy, so `offset < MAX && len <= MAX` is provably in bounds; and a
	 * tail's room after it (masked offset + masked place in the tail + length). */
	__u8 data[2 * EBTOP_MAX_SNAPLEN + 2 * EBTOP_TAIL_LEN];
};

#define EVENT_RING(name)                                                                           \
	struct {                                                                                   \
		__uint(type, BPF_MAP_TYPE_RINGBUF);                                                \
		__uint(max_entries, 16 * 1024 * 1024);                                             \
	} name SEC(".maps")
EVENT_RING(events);
EVENT_RING(events_1);
EVENT_RING(events_2);
EVENT_RING(events_3);
EVENT_RING(events_4);
EVENT_RING(events_5);
EVENT_RING(events_6);
EVENT_RING(events_7);
EVENT_RING(events_8);
EVENT_RING(events_9);
EVENT_RING(events_10);
EVENT_RING(events_11);
EVENT_RING(events_12);
EVENT_RING(events_13);
EVENT_RING(events_14);
EVENT_RING(events_15);

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, EBTOP_CNT__MAX);
	__type(key, __u32);
	__type(value, __u64);
} counters SEC(".maps");

/*
 * One scratch record per CPU, indexed by CPU id (user space sizes it to the possible CPUs).
 * A plain array because per-CPU map values are limited to 32 KiB.
 */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct scratch);
} scratch_buf SEC(".maps");

/*
 * How often a CPU asks a ring how much data waits: bpf_ringbuf_query reads the positions that
 * the reader and every other CPU write, a shared cache line that cost more per record than the
 * record's copy. Asked once per this many bytes a CPU put in that ring, at most (CPUs × this)
 * bytes go unnoticed; user space sets it to a fraction of `wakeup_bytes` (half of it over all
 * CPUs), and the reader polls on a timeout besides.
 */
const volatile __u32 query_every_bytes = 16 * 1024;
/*
 * Where a benchmark build stops a data record (bench/toggle.py, feature `bench-cuts`): 0 never;
 * 1 at the hook's entry, 2 after the per-connection state, 3 after the protocol is chosen, 4
 * before the ring (payload and header made). Always 0 in a normal build, so the verifier
 * drops the branches.
 */
const volatile __u32 bench_cut = 0;

/* The ring of a socket's records: src/pipeline/shards.rs `shard_of` computes the same. */
static __always_inline __u32 shard_of(__u64 sock_id)
{
	if (n_shards <= 1)
		return 0;
	return (__u32)((sock_id * 0x9E3779B97F4A7C15ULL) >> 32) % n_shards;
}

/*
 * The wakeup flag of a record for ring `shard`: whether `wakeup_bytes` wait in it (asked once
 * per query_every_bytes, see ring_flags_for). A global function, verified once rather than on
 * every path to each place a record is sent.
 */
__noinline __u64 ring_wake_flags(__u32 shard)
{
	__u64 avail;
	switch (shard) {
	case 1: avail = bpf_ringbuf_query(&events_1, BPF_RB_AVAIL_DATA); break;
	case 2: avail = bpf_ringbuf_query(&events_2, BPF_RB_AVAIL_DATA); break;
	case 3: avail = bpf_ringbuf_query(&events_3, BPF_RB_AVAIL_DATA); break;
	case 4: avail = bpf_ringbuf_query(&events_4, BPF_RB_AVAIL_DATA); break;
	case 5: avail = bpf_ringbuf_query(&events_5, BPF_RB_AVAIL_DATA); break;
	case 6: avail = bpf_ringbuf_query(&events_6, BPF_RB_AVAIL_DATA); break;
	case 7: avail = bpf_ringbuf_query(&events_7, BPF_RB_AVAIL_DATA); break;
	case 8: avail = bpf_ringbuf_query(&events_8, BPF_RB_AVAIL_DATA); break;
	case 9: avail = bpf_ringbuf_query(&events_9, BPF_RB_AVAIL_DATA); break;
	case 10: avail = bpf_ringbuf_query(&events_10, BPF_RB_AVAIL_DATA); break;
	case 11: avail = bpf_ringbuf_query(&events_11, BPF_RB_AVAIL_DATA); break;
	case 12: avail = bpf_ringbuf_query(&events_12, BPF_RB_AVAIL_DATA); break;
	case 13: avail = bpf_ringbuf_query(&events_13, BPF_RB_AVAIL_DATA); break;
	case 14: avail = bpf_ringbuf_query(&events_14, BPF_RB_AVAIL_DATA); break;
	case 15: avail = bpf_ringbuf_query(&events_15, BPF_RB_AVAIL_DATA); break;
	default: avail = bpf_ringbuf_query(&events, BPF_RB_AVAIL_DATA); break;
	}
	return avail >= wakeup_bytes ? BPF_RB_FORCE_WAKEUP : BPF_RB_NO_WAKEUP;
}

/* Puts `size` bytes at `data` in ring `shard`; 0 or an error. */
static __always_inline long ring_output(__u32 shard, void *data, __u64 size, __u64 flags)
{
	switch (shard) {
	case 1: return bpf_ringbuf_output(&events_1, data, size, flags);
	case 2: return bpf_ringbuf_output(&events_2, data, size, flags);
	case 3: return bpf_ringbuf_output(&events_3, data, size, flags);
	case 4: return bpf_ringbuf_output(&events_4, data, size, flags);
	case 5: return bpf_ringbuf_output(&events_5, data, size, flags);
	case 6: return bpf_ringbuf_output(&events_6, data, size, flags);
	case 7: return bpf_ringbuf_output(&events_7, data, size, flags);
	case 8: return bpf_ringbuf_output(&events_8, data, size, flags);
	case 9: return bpf_ringbuf_output(&events_9, data, size, flags);
	case 10: return bpf_ringbuf_output(&events_10, data, size, flags);
	case 11: return bpf_ringbuf_output(&events_11, data, size, flags);
	case 12: return bpf_ringbuf_output(&events_12, data, size, flags);
	case 13: return bpf_ringbuf_output(&events_13, data, size, flags);
	case 14: return bpf_ringbuf_output(&events_14, data, size, flags);
	case 15: return bpf_ringbuf_output(&events_15, data, size, flags);
	default: return bpf_ringbuf_output(&events, data, size, flags);
	}
}

/*
 * The wakeup flag for a record of `size` bytes to ring `shard`, counting it in this CPU's bytes
 * put there since the ring was last asked how full it is (see query_every_bytes).
 */
static __always_inline __u64 ring_flags_for(struct scratch *s, __u32 shard, __u64 size)
{
	__u64 unqueried = (__u64)s->unqueried[shard] + (__u32)size;
	/* All ones while under the step, else 0: no branch here (one per place a record is
	 * sent would multiply the verifier's paths). */
	__u64 under = (__u64)((__s64)(unqueried - query_every_bytes) >> 63);
	s->unqueried[shard] = (__u32)(unqueried & under);
	/* The call only when asking: most records skip it (a BPF-to-BPF call and its return). */
	return under ? BPF_RB_NO_WAKEUP : ring_wake_flags(shard);
}

/* Sends the CPU's scratch record (its header first) to its socket's ring; 0 or an error. */
static __always_inline long emit_record(struct scratch *s, __u64 size)
{
	__u32 shard = shard_of(s->ev.sock_id) & (EBTOP_MAX_SHARDS - 1);
	/* A benchmark build's `read-cpu` cut: the CPU's ring, whatever the socket (no order kept:
	 * user space drops the records), to measure what sharing a ring between CPUs costs. */
	if (bench_cut == 6 && n_shards > 1)
		shard = (bpf_get_smp_processor_id() % n_shards) & (EBTOP_MAX_SHARDS - 1);
	return ring_output(shard, &s->ev, size, ring_flags_for(s, shard, size));
}

/*
 * Sends a header-only record made on the program's stack. A program that can run in softirq
 * (a TCP close on a received segment) may interrupt a capture program between the header it
 * wrote in the CPU's scratch record and that record's output: it must not write that record.
 * It still counts its bytes toward the reader's wakeup (a burst of closes alone must wake it
 * before the ring fills); an interrupted program's own count may then overwrite this one,
 * which only moves the next question a record later.
 */
static __always_inline long emit_stack_record(struct ebtop_event *ev)
{
	__u32 shard = shard_of(ev->sock_id) & (EBTOP_MAX_SHARDS - 1);
	__u32 cpu = bpf_get_smp_processor_id();
	struct scratch *s = bpf_map_lookup_elem(&scratch_buf, &cpu);
	__u64 flags = s ? ring_flags_for(s, shard, sizeof(*ev)) : BPF_RB_NO_WAKEUP;
	return ring_output(shard, ev, sizeof(*ev), flags);
}

static __always_inline void count(__u32 idx, __u64 n)
{
	__u64 *v = bpf_map_lookup_elem(&counters, &idx);
	/* Atomic although the slot is this CPU's: a program that runs in softirq (the close of
	 * cap_set_state) can interrupt another between its load and its store, and a count lost
	 * so would be a loss or an event not counted. An uncontended locked add costs a few ns. */
	if (v)
		__sync_fetch_and_add(v, n);
}

/*
 * Connection sampling (--max-cpu, --sample): which connections are captured, decided in the
 * kernel once per connection, before any copy or ring write. User space writes the one entry
 * (src/source/sampling.rs); all zero (the default) is no sampling: every connection captured.
 *   keep_below: a connection is kept when its hash (sample_hash, 32 bits) is below this
 *               (0 .. 2^32: none .. all);
 *   epoch:      raised when user space raises keep_below: connections sampled out under an
 *               older epoch are decided again (they join mid-stream, as a connection older
 *               than ebtop does); lowering it leaves every decision as it was, so a connection
 *               being captured is never cut;
 *   active:     sampling is on (else every connection is kept, one map lookup per new one);
 *   cuts:       user space has put connections in sample_cuts (below): a captured
 *               connection looks there when its direction turns, nothing more otherwise.
 */
struct ebtop_sample_ctl {
	__u64 keep_below;
	__u32 epoch;
	__u32 active;
	__u32 cuts;
	__u32 _pad;
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct ebtop_sample_ctl);
} sample_ctl SEC(".maps");

/*
 * Captured connections a budget sheds at a call boundary (src/source/sampling.rs, issue 51):
 * user space names a connection here when its parser has seen it carry one call at a time,
 * with the direction its requests take (EBTOP_DIR_*). The connection is cut at its next turn
 * into that direction — the first bytes of its next request, its previous response whole —
 * and stays out until it closes (its close still reaches user space). An LRU: a name left by
 * a connection that closed first is pushed out, never found by another (socket ids are inode
 * numbers, not reused while user space may hold the name).
 */
struct ebtop_cut_name {
	__u32 generation; /* ebtop_sample_ctl.cuts when named: an older ask's names are ignored */
	__u8 dir;
	__u8 _pad[3];
};

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 16384);
	__type(key, __u64);
	__type(value, struct ebtop_cut_name);
} sample_cuts SEC(".maps");

/* The one control entry (NULL only if the map is missing it, which an array never is). */
static __always_inline struct ebtop_sample_ctl *sample_ctl_now(void)
{
	__u32 zero = 0;
	return bpf_map_lookup_elem(&sample_ctl, &zero);
}

#define EBTOP_SAMPLE_UNDECIDED 0
#define EBTOP_SAMPLE_IN 1
#define EBTOP_SAMPLE_OUT 2
/* Cut at a call boundary while captured (sample_cuts): out until the share is raised over it
 * (a later epoch) and its requests' next turn — the next call boundary — and then captured
 * again, its stream positions having gone on counting the bytes it shed. */
#define EBTOP_SAMPLE_CUT 3

/* A connection's place in the sample, in its socket's state (sockcap.bpf.c, sockdata.bpf.c). */
struct ebtop_sample_state {
	__u32 epoch;   /* of its last decision (a cut: of the cut) */
	__u8 state;    /* EBTOP_SAMPLE_* */
	__u8 last_dir; /* EBTOP_DIR_* + 1 of its last run that moved bytes, captured or cut (0: none) */
	__u8 cut_dir;  /* cut: EBTOP_DIR_* + 1 of its requests (it may rejoin at their next turn) */
	/* Captured again after a cut: bit (1 << dir) while that direction's first record since
	 * has not gone out (it carries EBTOP_F_REJOINED: user space starts its parser over). */
	__u8 rejoined;
};

/* A connection's place in the sample: src/source/sampling.rs `sample_hash` is the same. */
static __always_inline __u32 sample_hash(__u64 id)
{
	id ^= id >> 33;
	id *= 0xff51afd7ed558ccdULL;
	id ^= id >> 33;
	id *= 0xc4ceb9fe1a85ec53ULL;
	id ^= id >> 33;
	return (__u32)id;
}

/* Whether a cut connection's run in direction `dir` turns to its requests: where it may be
 * captured again. */
static __always_inline bool sample_cut_turns(const struct ebtop_sample_state *s, __u8 dir)
{
	return s->cut_dir == dir + 1 && s->last_dir != dir + 1;
}

/* Whether a run in direction `dir` of a connection decided out or cut is shed as it stands
 * (sample_keeps would shed it): its state alone, no count. */
static __always_inline bool sample_sheds(const struct ebtop_sample_state *s, __u8 dir)
{
	if (s->state == EBTOP_SAMPLE_CUT && !sample_cut_turns(s, dir))
		return true;
	if (s->state != EBTOP_SAMPLE_OUT && s->state != EBTOP_SAMPLE_CUT)
		return false;
	struct ebtop_sample_ctl *ctl = sample_ctl_now();
	return ctl && ctl->active && s->epoch == ctl->epoch;
}

/* A captured connection whose direction just turned to `dir`: whether user space asked to
 * cut it at a request in that direction (sample_cuts). One array lookup per turn; the hash
 * only while cuts are asked for. */
static __always_inline bool sample_cut_here(struct ebtop_sample_state *s, __u8 dir, __u64 sock_id)
{
	struct ebtop_sample_ctl *ctl = sample_ctl_now();
	if (!ctl || !ctl->cuts)
		return false;
	struct ebtop_cut_name *name = bpf_map_lookup_elem(&sample_cuts, &sock_id);
	if (!name || name->dir != dir || name->generation != ctl->cuts)
		return false;
	bpf_map_delete_elem(&sample_cuts, &sock_id);
	s->state = EBTOP_SAMPLE_CUT;
	s->epoch = ctl->epoch;
	s->cut_dir = dir + 1;
	s->rejoined = 0;
	count(EBTOP_CNT_CUT_CONNS, 1);
	count(EBTOP_CNT_SHED_RUNS, 1);
	return true;
}

/*
 * Whether this send or receive (direction `dir`, having moved bytes) of connection `sock_id`
 * is captured; `s` is the connection's own (socket storage or its entry in sock_states). A
 * connection captured stays captured unless cut at a call boundary: one byte compared per
 * run, and at a turn of direction one array lookup (sample_cut_here). Else one array lookup
 * (inlined by the verifier). A run not captured of a connection left EBTOP_SAMPLE_CUT must
 * still advance its stream position (the caller's), so that when it is captured again its
 * records' positions say how many bytes it shed.
 */
static __always_inline bool sample_keeps(struct ebtop_sample_state *s, __u8 dir, __u64 sock_id)
{
	if (s->state == EBTOP_SAMPLE_IN) {
		if (s->last_dir == dir + 1)
			return true;
		s->last_dir = dir + 1;
		return !sample_cut_here(s, dir, sock_id);
	}
	bool cut = s->state == EBTOP_SAMPLE_CUT;
	if (cut) {
		bool turns = sample_cut_turns(s, dir);
		s->last_dir = dir + 1;
		if (!turns) {
			count(EBTOP_CNT_SHED_RUNS, 1);
			return false;
		}
	}
	struct ebtop_sample_ctl *ctl = sample_ctl_now();
	if (!ctl || !ctl->active) {
		/* Decided under this epoch (sampling off: nothing is decided against it). */
		if (ctl)
			s->epoch = ctl->epoch;
		if (cut) {
			s->rejoined = 3;
			count(EBTOP_CNT_REJOINED_CONNS, 1);
		}
		s->state = EBTOP_SAMPLE_IN;
		s->last_dir = dir + 1;
		return true;
	}
	if ((s->state == EBTOP_SAMPLE_OUT || cut) && s->epoch == ctl->epoch) {
		count(EBTOP_CNT_SHED_RUNS, 1);
		return false;
	}
	s->epoch = ctl->epoch;
	if ((__u64)sample_hash(sock_id) < ctl->keep_below) {
		if (cut) {
			s->rejoined = 3;
			count(EBTOP_CNT_REJOINED_CONNS, 1);
		} else {
			count(EBTOP_CNT_KEPT_CONNS, 1);
		}
		s->state = EBTOP_SAMPLE_IN;
		s->last_dir = dir + 1;
		return true;
	}
	if (s->state == EBTOP_SAMPLE_UNDECIDED)
		count(EBTOP_CNT_SHED_CONNS, 1);
	if (!cut)
		s->state = EBTOP_SAMPLE_OUT;
	count(EBTOP_CNT_SHED_RUNS, 1);
	return false;
}

/* A record of direction `dir` about to go out: marked when it is the first since its
 * connection was captured again after a cut. Returns the bit to clear once it went out. */
static __always_inline __u8 sample_mark_rejoined(const struct ebtop_sample_state *s,
						 struct ebtop_event *ev, __u8 dir)
{
	__u8 bit = s->rejoined & (1 << (dir & 1));
	if (bit)
		ev->flags |= EBTOP_F_REJOINED;
	return bit;
}

static __always_inline bool task_selected(__u32 tgid)
{
	if (tgid == self_tgid)
		return false;
	if (filter_tgid_count && !u32_listed(tgid, filter_tgids, filter_tgid_count))
		return false;
	if (filter_cgroup_count &&
	    !cgroup_listed(filter_cgroup_ids, filter_cgroup_levels, filter_cgroup_count))
		return false;
	if (filter_comm_count) {
		char comm[EBTOP_TASK_COMM_LEN];
		bpf_get_current_comm(comm, sizeof(comm));
		if (!comm_listed(comm, filter_comms, filter_comm_count))
			return false;
	}
	return true;
}

/* For unconnected datagram sockets the peer is the sockaddr passed to the call. */
static __always_inline void peer_from_sockaddr(struct ebtop_event *ev, __u64 sa)
{
	__u16 fam = 0;
	if (!sa || ev->rport || bpf_probe_read_user(&fam, sizeof(fam), (void *)sa))
		return;
	__u16 port = 0;
	bpf_probe_read_user(&port, sizeof(port), (void *)(sa + 2));
	if (fam == AF_INET) {
		bpf_probe_read_user(ev->raddr, 4, (void *)(sa + 4));
	} else if (fam == AF_INET6) {
		bpf_probe_read_user(ev->raddr, 16, (void *)(sa + 8));
	} else {
		return;
	}
	ev->rport = bpf_ntohs(port);
	ev->flags |= EBTOP_F_PEER_FROM_ARG;
}

/* v & mask, in a form the compiler cannot drop as redundant (the verifier needs it). */
static __always_inline __u64 verifier_mask(__u64 v, __u64 mask)
{
	asm volatile("%[v] &= %[m]" : [v] "+r"(v) : [m] "i"(mask));
	return v;
}

/*
 * Reads the first (up to 15) payload bytes of the first buffer and recognises the protocol.
 * A first iovec of exactly 2 bytes (a length prefix written apart, as DNS-over-TCP clients do
 * with writev) is read together with the start of the second. `pos` is the stream position
 * of these bytes. A global function: verified once on its own, not again on every path that
 * reaches it (it runs once per connection; inlined, its literal matches were most of what the
 * verifier walked in the capture programs, which sit near its million-instruction limit).
 */
__noinline __u32 infer_protocol_at_packed(__u64 ptr, __u64 cnt, __u32 how, __u64 pos)
{
	/* Five arguments at most: `how` holds the limit (bits 0–15), the source (16–23) and
	 * whether it is a datagram (bit 24). */
	__u32 limit = how & 0xffff;
	__u8 source = (how >> 16) & 0xff;
	bool dgram = (how >> 24) & 1;
	__u8 head[32] = {}; /* room for 2 + a masked 15 */
	__u64 base = ptr;
	__u64 n = limit < 15 ? limit : 15;
	if (source == SRC_IOV) {
		struct ebtop_iovec iov;
		if (cnt == 0 || bpf_probe_read_user(&iov, sizeof(iov), (void *)ptr))
			return EBTOP_PROTO_UNKNOWN;
		base = (__u64)iov.iov_base;
		if (iov.iov_len == 2 && cnt > 1 && n > 2) {
			struct ebtop_iovec next;
			if (bpf_probe_read_user(head, 2, (void *)base) ||
			    bpf_probe_read_user(&next, sizeof(next), (void *)(ptr + sizeof(iov))))
				return EBTOP_PROTO_UNKNOWN;
			__u64 more = n - 2;
			if (next.iov_len < more)
				more = next.iov_len;
			if (more && bpf_probe_read_user(head + 2, verifier_mask(more, 15),
							(void *)next.iov_base))
				return EBTOP_PROTO_UNKNOWN;
			return infer_protocol(head, 2 + more, dgram, pos);
		}
		if (iov.iov_len < n)
			n = iov.iov_len;
	} else if (source != SRC_BUF) {
		return EBTOP_PROTO_UNKNOWN;
	}
	if (n == 0 || bpf_probe_read_user(head, verifier_mask(n, 15), (void *)base))
		return EBTOP_PROTO_UNKNOWN;
	return infer_protocol(head, n, dgram, pos);
}

struct iov_walk {
	const struct ebtop_iovec *iovp;
	__u64 iovcnt;
	__u32 limit;
	__u32 off;
	__u32 cpu;
};

/*
 * One buffer of an iovec whose entry is already read, at `off` of the data: the new offset (at
 * most `limit`, which is at most EBTOP_MAX_SNAPLEN), or EBTOP_MAX_SNAPLEN + 1 when the copy
 * failed.
 */
static __always_inline __u32 copy_iov_entry(__u8 *data, const struct ebtop_iovec *iov, __u32 off,
					    __u32 limit)
{
	if (off >= limit || off >= EBTOP_MAX_SNAPLEN)
		return off;
	__u64 n = limit - off;
	if (iov->iov_len < n)
		n = iov->iov_len;
	if (n > EBTOP_MAX_SNAPLEN)
		n = EBTOP_MAX_SNAPLEN;
	if (n == 0)
		return off;
	if (bpf_probe_read_user(data + verifier_mask(off, EBTOP_MAX_SNAPLEN - 1), n, iov->iov_base))
		return EBTOP_MAX_SNAPLEN + 1;
	return off + n;
}

/* One iovec entry: bpf_loop verifies this once instead of once per unrolled iteration. */
static long copy_one_iov(__u64 i, void *ctx)
{
	struct iov_walk *w = ctx;
	struct ebtop_iovec iov;

	if (i >= w->iovcnt || w->off >= w->limit || w->off >= EBTOP_MAX_SNAPLEN)
		return 1;
	struct scratch *s = bpf_map_lookup_elem(&scratch_buf, &w->cpu);
	if (!s || bpf_probe_read_user(&iov, sizeof(iov), &w->iovp[i]))
		return 1;
	__u32 off = copy_iov_entry(s->data, &iov, w->off, w->limit);
	if (off > EBTOP_MAX_SNAPLEN)
		return 1;
	w->off = off;
	return 0;
}

/*
 * Copies up to `limit` bytes spread over an iovec array into the CPU's scratch record. The
 * first two entries (a server's writev of a response's head and body) are read in one user
 * copy and handled here; only longer arrays go on in a bpf_loop, entry by entry: each user copy
 * and each callback costs about 100 ns, most of a small writev's capture.
 */
static __always_inline __u32 copy_iov(__u32 cpu, __u8 *data, const struct ebtop_iovec *iovp,
				      __u64 iovcnt, __u32 limit)
{
	struct ebtop_iovec first[2];
	if (iovcnt == 0)
		return 0;
	if (iovcnt == 1) {
		if (bpf_probe_read_user(&first[0], sizeof(first[0]), iovp))
			return 0;
	} else if (bpf_probe_read_user(first, sizeof(first), iovp)) {
		return 0;
	}
	__u32 off = copy_iov_entry(data, &first[0], 0, limit);
	if (off > EBTOP_MAX_SNAPLEN)
		return 0;
	if (iovcnt == 1)
		return off;
	__u32 after_first = off;
	off = copy_iov_entry(data, &first[1], off, limit);
	if (off > EBTOP_MAX_SNAPLEN)
		return after_first;
	if (iovcnt == 2 || off >= limit)
		return off;
	struct iov_walk w = { .iovp = iovp + 2, .iovcnt = iovcnt - 2, .limit = limit, .off = off,
			      .cpu = cpu };
	bpf_loop(EBTOP_MAX_IOV - 2, copy_one_iov, &w, 0);
	return w.off;
}

static __always_inline __u32 copy_payload(__u32 cpu, __u8 *data, __u8 source, __u64 ptr,
					  __u64 cnt, __u32 limit)
{
	if (limit > EBTOP_MAX_SNAPLEN)
		limit = EBTOP_MAX_SNAPLEN;
	if (source == SRC_BUF) {
		/* Masked as well as clamped: the verifier may lose the clamp's bound on another
		 * path through the program (it did once --cgroup's loop came before). The mask
		 * keeps every clamped value and `data` holds twice the largest. */
		__u64 n = verifier_mask(limit, 2 * EBTOP_MAX_SNAPLEN - 1);
		if (n == 0 || bpf_probe_read_user(data, n, (void *)ptr))
			return 0;
		return (__u32)n;
	}
	if (source == SRC_IOV)
		return copy_iov(cpu, data, (const struct ebtop_iovec *)ptr, cnt, limit);
	return 0;
}

struct tail_walk {
	const struct ebtop_iovec *iovp;
	__u64 iovcnt;
	__u64 at;   /* byte offset of entry i in the syscall's bytes */
	__u64 from; /* offset of the tail's first byte */
	__u64 end;  /* offset past the last byte moved */
	__u32 off;  /* where the tail goes in the scratch data (after the head) */
	__u32 got;  /* tail bytes copied so far */
	__u32 cpu;
	__u32 failed;
};

/* Copies `n` bytes at user `src` to the tail's place `rel` (bytes into the tail). */
static __always_inline long tail_piece(struct scratch *s, __u32 off, __u64 rel, __u64 n, __u64 src)
{
	n = verifier_mask(n, 2 * EBTOP_TAIL_LEN - 1);
	if (n == 0 || n > EBTOP_TAIL_LEN)
		return -1;
	return bpf_probe_read_user(s->data + verifier_mask(off, 2 * EBTOP_MAX_SNAPLEN - 1) +
					   verifier_mask(rel, EBTOP_TAIL_LEN - 1),
				   n, (void *)src);
}

/* One iovec entry of a tail (bpf_loop): the part of it in [from, end), if any. */
static long copy_tail_iov(__u64 i, void *ctx)
{
	struct tail_walk *w = ctx;
	struct ebtop_iovec iov;

	if (i >= w->iovcnt || w->at >= w->end)
		return 1;
	if (bpf_probe_read_user(&iov, sizeof(iov), &w->iovp[i])) {
		w->failed = 1;
		return 1;
	}
	__u64 a = w->at;
	/* The entries' lengths are the caller's: clamped, never summed past the end. */
	__u64 len = iov.iov_len < w->end - a ? iov.iov_len : w->end - a;
	__u64 b = a + len;
	w->at = b;
	if (b <= w->from)
		return 0;
	__u64 lo = a > w->from ? a : w->from;
	struct scratch *s = bpf_map_lookup_elem(&scratch_buf, &w->cpu);
	if (!s || tail_piece(s, w->off, lo - w->from, b - lo, (__u64)iov.iov_base + (lo - a))) {
		w->failed = 1;
		return 1;
	}
	w->got += b - lo;
	return 0;
}

/*
 * The last bytes of a send/receive of `len` bytes whose first `cap` (the head, `how` bits
 * 0–15; the payload source bits 16–23) are copied: copies bytes [max(cap, len − TAIL), len)
 * to the scratch data right after the head. Returns how many (0: none, a copy failed or the
 * iovec array ends before `len`: never part of a tail). A global function, verified once, and
 * called only for sends longer than the head: a short one pays one comparison.
 */
__noinline __u32 copy_tail(__u32 how, __u64 ptr, __u64 cnt, __u64 len)
{
	__u32 cap = how & 0xffff;
	__u8 source = (how >> 16) & 0xff;
	__u32 cpu = bpf_get_smp_processor_id();
	struct scratch *s = bpf_map_lookup_elem(&scratch_buf, &cpu);
	if (!s || cap > EBTOP_MAX_SNAPLEN || len <= cap)
		return 0;
	__u64 from = len - cap > EBTOP_TAIL_LEN ? len - EBTOP_TAIL_LEN : cap;
	if (source == SRC_BUF) {
		if (tail_piece(s, cap, 0, len - from, ptr + from))
			return 0;
		return len - from;
	}
	if (source != SRC_IOV)
		return 0;
	struct tail_walk w = { .iovp = (const struct ebtop_iovec *)ptr, .iovcnt = cnt, .from = from,
			       .end = len, .off = cap, .cpu = cpu };
	bpf_loop(EBTOP_MAX_IOV, copy_tail_iov, &w, 0);
	if (w.failed || w.got != len - from)
		return 0;
	return w.got;
}

/*
 * A tail for a stream send/receive longer than its head `*cap` (see copy_tail): its length,
 * or 0 when there is none — also when the rest of the bytes fit in it, which then simply
 * lengthen the head (`*cap`): the record is whole.
 */
static __always_inline __u32 take_tail(__u8 source, __u64 ptr, __u64 cnt, __u64 len, __u32 *cap,
				       bool stream)
{
	__u32 head = *cap;
	if (head >= len || !stream)
		return 0;
	__u32 got = copy_tail((head & 0xffff) | ((__u32)source << 16), ptr, cnt, len);
	if (!got)
		return 0;
	if (head + got == len) {
		*cap = head + got;
		return 0;
	}
	return got;
}

/*
 * Connections whose sends/receives are copied whole (up to EBTOP_DEEP_MAX): bit
 * (1 << enum ebtop_l7_proto), set by user space from the protocols' descriptors (`copy_whole`).
 */
const volatile __u32 deep_proto_mask = 0;
/* --copy-whole: the longest send/receive copied whole (at most EBTOP_DEEP_MAX). */
const volatile __u32 deep_max = EBTOP_DEEP_MAX;

/* A record copied whole: its own per-CPU buffer, the header first (as the scratch record's). */
struct deep_record {
	struct ebtop_event ev;
	/* Room for a masked offset below EBTOP_DEEP_MAX plus a masked piece. */
	__u8 data[EBTOP_DEEP_MAX + 2 * EBTOP_MAX_SNAPLEN];
};

/* One per CPU, indexed by CPU id (user space sizes it to the possible CPUs). */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct deep_record);
} deep_buf SEC(".maps");

struct deep_walk {
	const struct ebtop_iovec *iovp;
	__u64 iovcnt;
	__u64 base;  /* user address of the next byte to copy */
	__u64 left;  /* bytes left in the buffer at `base` */
	__u64 entry; /* the next iovec entry */
	__u32 off;   /* bytes copied */
	__u32 len;   /* bytes to copy: the whole send/receive */
	__u32 cpu;
	__u32 failed;
};

/* One piece (bpf_loop): the next iovec entry read, or up to EBTOP_MAX_SNAPLEN bytes copied. */
static long deep_piece(__u64 i, void *ctx)
{
	struct deep_walk *w = ctx;

	if (w->off >= w->len)
		return 1;
	if (!w->left) {
		struct ebtop_iovec iov;
		if (!w->iovp || w->entry >= w->iovcnt ||
		    bpf_probe_read_user(&iov, sizeof(iov), &w->iovp[w->entry])) {
			w->failed = 1;
			return 1;
		}
		w->entry++;
		w->base = (__u64)iov.iov_base;
		w->left = iov.iov_len;
		return 0;
	}
	__u64 n = w->len - w->off;
	if (w->left < n)
		n = w->left;
	if (n > EBTOP_MAX_SNAPLEN)
		n = EBTOP_MAX_SNAPLEN;
	struct deep_record *d = bpf_map_lookup_elem(&deep_buf, &w->cpu);
	if (!d || bpf_probe_read_user(d->data + verifier_mask(w->off, EBTOP_DEEP_MAX - 1),
				      verifier_mask(n, 2 * EBTOP_MAX_SNAPLEN - 1), (void *)w->base)) {
		w->failed = 1;
		return 1;
	}
	w->off += n;
	w->base += n;
	w->left -= n;
	return 0;
}

/*
 * Sends the CPU's scratch record, whose header is complete but for the payload's fields, with
 * the whole `len` bytes of the send/receive as its payload (a connection of `deep_proto_mask`,
 * snaplen < len <= EBTOP_DEEP_MAX). Returns 1 when sent; 0 when not (a failed user copy, no
 * room in the ring for the whole: counted in EBTOP_CNT_DEEP_CUT), and the caller then sends a
 * head and a tail as for any other connection. A global function, verified once.
 */
__noinline int deep_submit(__u32 source, __u64 ptr, __u64 cnt, __u64 len)
{
	__u32 cpu = bpf_get_smp_processor_id();
	struct scratch *s = bpf_map_lookup_elem(&scratch_buf, &cpu);
	struct deep_record *d = bpf_map_lookup_elem(&deep_buf, &cpu);
	if (!s || !d || len > EBTOP_DEEP_MAX || len > deep_max || len <= snaplen)
		return 0;
	struct deep_walk w = { .len = len, .cpu = cpu };
	if (source == SRC_BUF) {
		w.base = ptr;
		w.left = len;
	} else if (source == SRC_IOV) {
		w.iovp = (const struct ebtop_iovec *)ptr;
		w.iovcnt = cnt;
	} else {
		return 0;
	}
	/* Pieces of a buffer, plus one step per iovec entry (IOV_MAX is 1024). */
	bpf_loop(EBTOP_DEEP_MAX / EBTOP_MAX_SNAPLEN + 2048, deep_piece, &w, 0);
	if (w.failed || w.off != len) {
		count(EBTOP_CNT_DEEP_CUT, 1);
		return 0;
	}
	__builtin_memcpy(&d->ev, &s->ev, sizeof(d->ev));
	d->ev.cap_len = len;
	d->ev.tail_len = 0;
	d->ev.flags &= ~(EBTOP_F_TRUNCATED | EBTOP_F_TAIL);
	__u64 size = sizeof(d->ev) + verifier_mask(len, 2 * EBTOP_DEEP_MAX - 1);
	if (size > sizeof(*d))
		return 0;
	__u32 shard = shard_of(d->ev.sock_id) & (EBTOP_MAX_SHARDS - 1);
	if (ring_output(shard, d, size, ring_flags_for(s, shard, size))) {
		count(EBTOP_CNT_DEEP_CUT, 1);
		return 0;
	}
	count(EBTOP_CNT_EVENTS, 1);
	count(EBTOP_CNT_DEEP, 1);
	count(EBTOP_CNT_DEEP_BYTES, len - snaplen);
	return 1;
}

/*
 * Whether a data record of connection protocol `proto` goes out whole (deep_submit): the
 * header in the scratch record must be complete but for the payload's fields, which this
 * fills (kind, proto, seq, total_len) in case it does.
 */
static __always_inline bool deep_sent(struct scratch *s, __u8 proto, __u64 seq, __u64 len,
				      __u8 source, __u64 ptr, __u64 cnt, bool stream)
{
	if (!stream || len <= snaplen || !((deep_proto_mask >> (proto & 31)) & 1))
		return false;
	if (len > deep_max) {
		count(EBTOP_CNT_DEEP_CUT, 1);
		return false;
	}
	s->ev.kind = EBTOP_EV_DATA;
	s->ev.proto = proto;
	s->ev.seq = seq;
	s->ev.total_len = len;
	return deep_submit(source, ptr, cnt, len);
}

/*
 * The protocol a data record goes out under. `*conn_proto` is the connection's state: a new
 * connection's protocol is recognised from its first bytes (no known protocol: counted as
 * skipped, nothing copied) and remembered; one --proto did not select is marked and dropped.
 * Returns EBTOP_PROTO_UNKNOWN when nothing is to be delivered (unless capture_all).
 */
static __always_inline __u8 select_protocol(__u8 *conn_proto, __u8 source, __u64 ptr, __u64 cnt,
					    __u32 limit, __u64 len, bool dgram, __u64 pos,
					    bool *deliver)
{
	__u8 proto = *conn_proto;
	*deliver = false;
	if (proto == EBTOP_PROTO_FILTERED)
		return proto;
	if (proto == EBTOP_PROTO_TLS) {
		count(EBTOP_CNT_TLS_CIPHER, 1);
		count(EBTOP_CNT_TLS_CIPHER_BYTES, len);
		return proto;
	}
	if (!capture_all && proto == EBTOP_PROTO_UNKNOWN) {
		proto = infer_protocol_at_packed(ptr, cnt,
						 (limit & 0xffff) | ((__u32)source << 16) |
							 ((__u32)dgram << 24),
						 pos);
		if (proto == EBTOP_PROTO_UNKNOWN) {
			count(EBTOP_CNT_SKIPPED_UNKNOWN, 1);
			count(EBTOP_CNT_SKIPPED_BYTES, len);
			return proto;
		}
		if (proto == EBTOP_PROTO_TLS) {
			/* Ciphertext: counted, never copied; its plaintext comes from the TLS probes,
			 * whatever --proto selects (that applies to the plaintext's protocol). */
			*conn_proto = proto;
			count(EBTOP_CNT_TLS_CIPHER, 1);
			count(EBTOP_CNT_TLS_CIPHER_BYTES, len);
			return proto;
		}
		if (proto_mask && !((proto_mask >> (proto & 31)) & 1)) {
			/* Not asked for (--proto): like another process's traffic, not a loss. */
			*conn_proto = EBTOP_PROTO_FILTERED;
			return EBTOP_PROTO_FILTERED;
		}
		*conn_proto = proto;
	}
	*deliver = true;
	return proto;
}

/*
 * Completes a data record whose header is filled (all but these fields) and sends it; `tail`:
 * bytes of a tail after the `cap` bytes of the head (take_tail); `go_hint`: the socket's byte
 * for go_goroutine (gochain.h), or NULL. Whether it went out.
 */
static __always_inline bool submit_data(struct scratch *s, __u8 proto, __u64 seq, __u64 len,
					__u32 cap, __u32 tail, __u8 *go_hint)
{
	struct ebtop_event *ev = &s->ev;
	ev->kind = EBTOP_EV_DATA;
	ev->proto = proto;
	ev->seq = seq;
	ev->total_len = len;
	ev->cap_len = cap;
	ev->tail_len = tail;
	if (cap < len) {
		ev->flags |= EBTOP_F_TRUNCATED;
		count(EBTOP_CNT_TRUNCATED, 1);
	}
	if (tail)
		ev->flags |= EBTOP_F_TAIL;
	__u64 size = sizeof(*ev) + (cap & (2 * EBTOP_MAX_SNAPLEN - 1)) +
		     (tail & (2 * EBTOP_TAIL_LEN - 1));
	/* A Go program's goroutine, after the payload and the tail (call chains: gochain.h). */
	__u64 g = go_goroutine(go_hint);
	__u32 at = cap + tail;
	if (g && at < 2 * EBTOP_MAX_SNAPLEN && size == sizeof(*ev) + at) {
		/* Masked in the register that indexes (the compiler would reuse the sum). */
		asm volatile("" : "+r"(at));
		at &= 2 * EBTOP_MAX_SNAPLEN - 1;
		__builtin_memcpy(&s->data[at], &g, sizeof(g));
		ev->flags |= EBTOP_F_GOROUTINE;
		size = sizeof(*ev) + at + sizeof(g); /* from the masked offset: provably bounded */
	}
	if (size > sizeof(s->ev) + sizeof(s->data))
		return false;
	if (bench_cut == 4)
		return false;
	if (emit_record(s, size)) {
		count(EBTOP_CNT_LOST, 1);
		count(EBTOP_CNT_LOST_BYTES, len);
		return false;
	}
	count(EBTOP_CNT_EVENTS, 1);
	return true;
}

/* The record's ports and addresses, from the socket (CO-RE). */
static __always_inline void fill_tuple(struct ebtop_event *ev, struct sock *sk, __u8 family)
{
	ev->lport = BPF_CORE_READ(sk, __sk_common.skc_num);
	ev->rport = bpf_ntohs(BPF_CORE_READ(sk, __sk_common.skc_dport));
	__builtin_memset(ev->laddr, 0, sizeof(ev->laddr));
	__builtin_memset(ev->raddr, 0, sizeof(ev->raddr));
	sock_local_addr(sk, family, ev->laddr);
	sock_remote_addr(sk, family, ev->raddr);
}

/*
 * A syscall's arguments in the user registers saved at its entry. `r` comes from
 * bpf_task_pt_regs(), a BTF pointer: plain loads (≈1 ns each, fault-safe) instead of probe
 * reads (≈35 ns each).
 */
#if defined(__TARGET_ARCH_arm64)
#define REG_ARG0(r) ((r)->orig_x0)
#define REG_ARG1(r) ((r)->regs[1])
#define REG_ARG2(r) ((r)->regs[2])
#define REG_ARG3(r) ((r)->regs[3])
#define REG_ARG4(r) ((r)->regs[4])
#else
#define REG_ARG0(r) ((r)->di)
#define REG_ARG1(r) ((r)->si)
#define REG_ARG2(r) ((r)->dx)
#define REG_ARG3(r) ((r)->r10) /* the syscall ABI's 4th argument */
#define REG_ARG4(r) ((r)->r8)
#endif

#endif
