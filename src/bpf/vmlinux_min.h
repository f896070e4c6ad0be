/* SPDX-License-Identifier: GPL-2.0 */
/*
 * The few kernel types ebtop's BPF programs touch, marked preserve_access_index so libbpf
 * relocates every field access against the running kernel's BTF (CO-RE). Only the fields
 * used are declared: field offsets here do not matter, names and types do.
 */
#ifndef EBTOP_VMLINUX_MIN_H
#define EBTOP_VMLINUX_MIN_H

typedef unsigned char __u8;
typedef signed char __s8;
typedef unsigned short __u16;
typedef short __s16;
typedef unsigned int __u32;
typedef int __s32;
typedef unsigned long long __u64;
typedef long long __s64;
typedef __u8 u8;
typedef __u16 u16;
typedef __u32 u32;
typedef __u64 u64;
typedef __u16 __be16;
typedef __u32 __be32;
typedef __u32 __wsum;
typedef _Bool bool;
enum { false = 0, true = 1 };

enum bpf_map_type {
	BPF_MAP_TYPE_HASH = 1,
	BPF_MAP_TYPE_ARRAY = 2,
	BPF_MAP_TYPE_PERCPU_HASH = 5,
	BPF_MAP_TYPE_PERCPU_ARRAY = 6,
	BPF_MAP_TYPE_LRU_HASH = 9,
	BPF_MAP_TYPE_LRU_PERCPU_HASH = 10,
	BPF_MAP_TYPE_ARRAY_OF_MAPS = 12,
	BPF_MAP_TYPE_SK_STORAGE = 24,
	BPF_MAP_TYPE_RINGBUF = 27,
	BPF_MAP_TYPE_TASK_STORAGE = 29,
};

/* bpf_sk_storage_get / bpf_task_storage_get: create the entry if missing. */
enum {
	BPF_LOCAL_STORAGE_GET_F_CREATE = 1,
	BPF_SK_STORAGE_GET_F_CREATE = 1,
};

enum {
	BPF_RB_NO_WAKEUP = 1,
	BPF_RB_FORCE_WAKEUP = 2,
};

enum {
	BPF_RB_AVAIL_DATA = 0,
};

enum {
	BPF_ANY = 0,
	BPF_NOEXIST = 1,
	BPF_EXIST = 2,
};

/* Tracepoint record layouts of syscalls:sys_enter_* / sys_exit_* (stable ABI). */
struct ebtop_sys_enter_ctx {
	__u64 __common;
	long id;
	unsigned long args[6];
};

struct ebtop_sys_exit_ctx {
	__u64 __common;
	long id;
	long ret;
};

struct in6_addr {
	union {
		__u8 u6_addr8[16];
		__be16 u6_addr16[8];
		__be32 u6_addr32[4];
	} in6_u;
};

struct sock_common {
	union {
		struct {
			__be32 skc_daddr;
			__be32 skc_rcv_saddr;
		};
	};
	union {
		struct {
			__be16 skc_dport;
			__u16 skc_num;
		};
	};
	unsigned short skc_family;
	struct in6_addr skc_v6_daddr;
	struct in6_addr skc_v6_rcv_saddr;
} __attribute__((preserve_access_index));

struct sock {
	struct sock_common __sk_common;
} __attribute__((preserve_access_index));

struct socket {
	short type;
	struct sock *sk;
} __attribute__((preserve_access_index));

struct super_block {
	unsigned int s_dev;
} __attribute__((preserve_access_index));

struct inode {
	unsigned short i_mode;
	unsigned long i_ino;
	struct super_block *i_sb;
} __attribute__((preserve_access_index));

struct file {
	struct inode *f_inode;
	void *private_data;
} __attribute__((preserve_access_index));

struct fdtable {
	unsigned int max_fds;
	struct file **fd;
} __attribute__((preserve_access_index));

struct files_struct {
	struct fdtable *fdt;
} __attribute__((preserve_access_index));

typedef struct {
	int counter;
} atomic_t;

/* Threads of a thread group still alive: 0 once the last one is exiting. */
struct signal_struct {
	atomic_t live;
} __attribute__((preserve_access_index));

/* The argument strings of a process (user memory, NUL-separated). */
struct mm_struct {
	unsigned long arg_start;
	unsigned long arg_end;
	struct file *exe_file;
} __attribute__((preserve_access_index));

struct task_struct {
	struct files_struct *files;
	int pid;
	int tgid;
	int exit_code;
	struct task_struct *real_parent;
	struct mm_struct *mm;
	struct signal_struct *signal;
	char comm[16];
} __attribute__((preserve_access_index));

/* sched:sched_process_exec's record; the filename is a __data_loc string (offset | len << 16). */
struct trace_event_raw_sched_process_exec {
	__u64 ent;
	__u32 __data_loc_filename;
	int pid;
	int old_pid;
} __attribute__((preserve_access_index));

/*
 * The user registers saved at syscall entry: a receive's arguments are read from here at
 * syscall exit (the kernel leaves them as they were; on arm64 x0 takes the return value and
 * orig_x0 keeps the first argument).
 */
#if defined(__TARGET_ARCH_arm64)
struct pt_regs {
	__u64 regs[31];
	__u64 sp;
	__u64 orig_x0;
} __attribute__((preserve_access_index));
#else
struct pt_regs {
	unsigned long r14; /* a Go program's current goroutine (ABIInternal) */
	unsigned long r10;
	unsigned long r8;
	unsigned long ax;
	unsigned long bx;
	unsigned long cx;
	unsigned long dx;
	unsigned long si;
	unsigned long di;
	unsigned long sp; /* the user stack pointer (gochain.h: which stack the code runs on) */
} __attribute__((preserve_access_index));
#endif

/* User-space ABI structs (not kernel-internal: fixed layout, no relocation). */
struct ebtop_iovec {
	void *iov_base;
	__u64 iov_len;
};

struct ebtop_user_msghdr {
	void *msg_name;
	int msg_namelen;
	struct ebtop_iovec *msg_iov;
	__u64 msg_iovlen;
	void *msg_control;
	__u64 msg_controllen;
	unsigned int msg_flags;
};

struct ebtop_mmsghdr {
	struct ebtop_user_msghdr msg_hdr;
	unsigned int msg_len;
};

#endif

/*
 * Used by flows.bpf.c (TCP/UDP flow table). Appended: the `___flows` suffix is a CO-RE
 * "flavour" (libbpf strips it when matching kernel types), so these extend the structs above
 * without redefining them.
 */
#ifndef EBTOP_VMLINUX_MIN_FLOWS_H
#define EBTOP_VMLINUX_MIN_FLOWS_H

struct sock_common___flows {
	unsigned short skc_family;
	volatile unsigned char skc_state;
	__be16 skc_dport;
	__u16 skc_num;
} __attribute__((preserve_access_index));

struct socket___flows {
	struct file *file;
} __attribute__((preserve_access_index));

struct sock___flows {
	struct sock_common___flows __sk_common;
	struct socket___flows *sk_socket;
	int sk_err;
	__u16 sk_protocol;
} __attribute__((preserve_access_index));

/* sock_flag() bits: struct sock's sk_flags on older kernels, sock_common's skc_flags on newer ones (6.18). */
struct sock___flags_old {
	unsigned long sk_flags;
} __attribute__((preserve_access_index));

struct sock_common___flags_new {
	unsigned long skc_flags;
} __attribute__((preserve_access_index));

struct sock___flags_new {
	struct sock_common___flags_new __sk_common;
} __attribute__((preserve_access_index));

enum sock_flags {
	SOCK_DEAD = 0,
	SOCK_DONE = 1,
};

struct tcp_sock {
	__u64 bytes_acked;
	__u64 bytes_received;
	__u64 bytes_sent;
	__u64 bytes_retrans;
	__u32 segs_in;
	__u32 segs_out;
	__u32 data_segs_in;
	__u32 data_segs_out;
	__u32 total_retrans;
	__u32 srtt_us;
	__u32 snd_una;
	__u32 write_seq;
} __attribute__((preserve_access_index));

/* UAPI context of cgroup/sendmsg* and cgroup/recvmsg* programs (fixed layout, linux/bpf.h). */
struct bpf_sock_addr {
	__u32 user_family;
	__u32 user_ip4;
	__u32 user_ip6[4];
	__u32 user_port;
	__u32 family;
	__u32 type;
	__u32 protocol;
	__u32 msg_src_ip4;
	__u32 msg_src_ip6[4];
	union {
		struct bpf_sock *sk;
		__u64 :64;
	} __attribute__((aligned(8)));
};

#endif

/*
 * Used by sockcap.bpf.c (socket-layer capture), as CO-RE flavours like the ones above.
 */
#ifndef EBTOP_VMLINUX_MIN_CAP_H
#define EBTOP_VMLINUX_MIN_CAP_H

struct socket___cap {
	struct file *file;
} __attribute__((preserve_access_index));

struct sock___cap {
	struct socket___cap *sk_socket;
	__u16 sk_type;
} __attribute__((preserve_access_index));

struct task_struct___cap {
	unsigned int flags;
} __attribute__((preserve_access_index));

#if defined(__TARGET_ARCH_arm64)
struct pt_regs___cap {
	__s32 syscallno;
} __attribute__((preserve_access_index));
#else
struct pt_regs___cap {
	unsigned long orig_ax;
} __attribute__((preserve_access_index));
#endif

#endif
