/* SPDX-License-Identifier: GPL-2.0 */
/*
 * Records shared by the BPF programs and user space (src/event.rs decodes them field by
 * field; a recording stores them as delivered). Layout is little-endian, 8-byte aligned,
 * and fields are only ever appended: bump EBTOP_EVENT_VERSION when the layout changes.
 */
#ifndef EBTOP_H
#define EBTOP_H

#define EBTOP_EVENT_VERSION 1
#define EBTOP_TASK_COMM_LEN 16

/* Largest --snaplen the kernel side accepts: a power of two (the verifier bounds copies by mask). */
#define EBTOP_MAX_SNAPLEN 16384
/*
 * How many iovec entries of one readv/writev/sendmsg/recvmsg are copied from (the copy also
 * stops at the snaplen). gRPC's C core writes a HEADERS frame as one iovec per name, value and
 * length prefix (30 and more): a header block cut short forgets the connection's HPACK table.
 */
#define EBTOP_MAX_IOV 128
/* How many messages of one sendmmsg/recvmmsg become events. */
#define EBTOP_MAX_MMSG 8

enum ebtop_event_kind {
	EBTOP_EV_DATA = 1,    /* bytes moved on a socket; payload follows the header */
	EBTOP_EV_CONNECT = 2, /* connect() returned (total_len holds its return value) */
	EBTOP_EV_ACCEPT = 3,  /* accept()/accept4() returned a new socket */
	EBTOP_EV_CLOSE = 4,   /* close() of a socket fd */
};

enum ebtop_direction {
	EBTOP_DIR_EGRESS = 0,  /* this process sent the bytes */
	EBTOP_DIR_INGRESS = 1, /* this process received the bytes */
};

enum ebtop_syscall {
	EBTOP_SC_READ = 1,
	EBTOP_SC_WRITE,
	EBTOP_SC_READV,
	EBTOP_SC_WRITEV,
	EBTOP_SC_SENDTO,
	EBTOP_SC_RECVFROM,
	EBTOP_SC_SENDMSG,
	EBTOP_SC_RECVMSG,
	EBTOP_SC_SENDMMSG,
	EBTOP_SC_RECVMMSG,
	EBTOP_SC_SENDFILE,
	EBTOP_SC_CONNECT,
	EBTOP_SC_ACCEPT,
	EBTOP_SC_ACCEPT4,
	EBTOP_SC_CLOSE,
	EBTOP_SC_OTHER, /* socket layer: a send/receive of no syscall whose buffer ebtop reads */
	EBTOP_SC_TLS,   /* TLS plaintext: an SSL_write/SSL_read(_ex) call (uprobes, tls.h) */
};

/* Protocol guessed in the kernel from a connection's first bytes. */
enum ebtop_l7_proto {
	EBTOP_PROTO_UNKNOWN = 0,
	EBTOP_PROTO_HTTP1 = 1,
	EBTOP_PROTO_REDIS = 2,
	EBTOP_PROTO_MEMCACHED = 3,
	EBTOP_PROTO_DNS = 4,
	/* User space only for now: no kernel rule in infer.h yet (PostgreSQL, MySQL). */
	EBTOP_PROTO_POSTGRES = 5,
	EBTOP_PROTO_MYSQL = 6,
	/* HTTP/2 and gRPC over it (told apart in user space). */
	EBTOP_PROTO_HTTP2 = 7,
	/* Kernel-side state only: a TLS connection (its ciphertext is counted, never copied; its
	 * plaintext comes from the TLS library probes as records flagged EBTOP_F_TLS). */
	EBTOP_PROTO_TLS = 8,
	/* Kernel-side state only (never in a record): recognised, but not selected by --proto. */
	EBTOP_PROTO_FILTERED = 255,
};

enum ebtop_event_flags {
	EBTOP_F_TRUNCATED = 1 << 0, /* cap_len < total_len: snaplen or iovec limit cut the copy */
	EBTOP_F_PEER_FROM_ARG = 1 << 1, /* raddr/rport came from the syscall's sockaddr (unconnected UDP) */
	/* TLS plaintext of the socket (its own byte positions); on a close: the socket was TLS. */
	EBTOP_F_TLS = 1 << 2,
};

/* Indexes of the per-CPU counter array `counters`. */
enum ebtop_counter {
	EBTOP_CNT_EVENTS = 0,        /* records written to the ring buffer */
	EBTOP_CNT_LOST,              /* records the ring buffer had no room for */
	EBTOP_CNT_LOST_BYTES,        /* payload bytes in those lost data records */
	EBTOP_CNT_SKIPPED_UNKNOWN,   /* data syscalls on connections of no known protocol */
	EBTOP_CNT_SKIPPED_BYTES,     /* bytes moved by those syscalls */
	EBTOP_CNT_INFLIGHT_FULL,     /* syscalls missed because the in-flight table was full */
	EBTOP_CNT_SOCK_SYSCALLS,     /* traced syscalls on inet sockets (after filters) */
	EBTOP_CNT_TRUNCATED,         /* data records whose payload was cut at snaplen */
	EBTOP_CNT_TLS_CIPHER,        /* sends/receives of TLS ciphertext (counted, never copied) */
	EBTOP_CNT_TLS_CIPHER_BYTES,  /* their bytes */
	EBTOP_CNT_TLS_CALLS,         /* SSL_write/SSL_read calls that moved plaintext */
	EBTOP_CNT_TLS_NO_SOCKET,     /* of those, calls on no socket ebtop knows (custom BIO) */
	EBTOP_CNT_TLS_NO_SOCKET_BYTES, /* their plaintext bytes */
	EBTOP_CNT__MAX,
};

struct ebtop_event {
	__u64 start_ns;  /* CLOCK_MONOTONIC at syscall entry */
	__u64 end_ns;    /* CLOCK_MONOTONIC at syscall exit */
	__u64 sock_id;   /* inode number of the socket: stable across fd reuse */
	__u64 seq;       /* bytes already moved in this direction on this socket since first seen */
	__u64 total_len; /* bytes the syscall moved (data), or its return value (connect/accept) */
	__u32 pid;       /* thread group id */
	__u32 tid;
	__s32 fd;
	__u32 cap_len;   /* payload bytes that follow this header */
	__u8 kind;       /* enum ebtop_event_kind */
	__u8 dir;        /* enum ebtop_direction */
	__u8 syscall;    /* enum ebtop_syscall */
	__u8 family;     /* AF_INET or AF_INET6 */
	__u8 sock_type;  /* SOCK_STREAM or SOCK_DGRAM */
	__u8 proto;      /* enum ebtop_l7_proto */
	__u16 flags;     /* enum ebtop_event_flags */
	__u16 lport;     /* host byte order */
	__u16 rport;     /* host byte order */
	__u32 _pad;
	__u8 laddr[16];  /* IPv4 in the first 4 bytes, network order */
	__u8 raddr[16];
	char comm[EBTOP_TASK_COMM_LEN];
};

_Static_assert(sizeof(struct ebtop_event) == 120, "src/event.rs HEADER_LEN must match");

/* Process lifecycle records (procs.bpf.c, their own ring buffer `proc_events`). */
enum ebtop_proc_kind {
	/* a process ran execve(); payload: filename NUL argv (NUL-separated), then struct
	 * ebtop_exe_id (which records of older versions lack) */
	EBTOP_PROC_EXEC = 1,
	EBTOP_PROC_EXIT = 2, /* the last thread of a process exited */
	EBTOP_PROC_LOADED = 3, /* a dlopen() of the process returned a handle: new code mapped */
};

/* How much of an exec's filename and arguments is copied. */
#define EBTOP_PROC_MAX_FILENAME 512
#define EBTOP_PROC_MAX_ARGS 2048

/* Indexes of the per-CPU counter array `proc_counters`. */
enum ebtop_proc_counter {
	EBTOP_PCNT_EVENTS = 0, /* records written */
	EBTOP_PCNT_LOST,       /* records the ring buffer had no room for */
	EBTOP_PCNT__MAX,
};

struct ebtop_proc_event {
	__u64 ts_ns;        /* CLOCK_MONOTONIC */
	__u32 kind;         /* enum ebtop_proc_kind */
	__u32 pid;          /* thread group id */
	__u32 ppid;         /* parent's thread group id */
	__s32 exit_code;    /* exit: the wait status (code << 8 | signal, 0x80 = core dumped) */
	__u32 filename_len; /* exec: bytes of filename at the start of the payload (no NUL) */
	__u32 args_len;     /* exec: bytes of argv copied after the filename's NUL */
	__u32 args_total;   /* exec: bytes of the whole argv area (args_len < args_total: cut) */
	__u32 cap_len;      /* payload bytes that follow this header */
	char comm[EBTOP_TASK_COMM_LEN];
};

_Static_assert(sizeof(struct ebtop_proc_event) == 56, "src/procevent.rs HEADER_LEN must match");

/* The file an exec runs (the trailer of an exec record's payload): a program gone before user
 * space handled its exec is probed from the file its path names, if that is the same one. */
struct ebtop_exe_id {
	__u64 ino;
	__u32 dev; /* the kernel's encoding: major << 20 | minor */
	__u32 pad;
};

_Static_assert(sizeof(struct ebtop_exe_id) == 16, "src/process_events.rs EXE_ID_LEN must match");

#endif
