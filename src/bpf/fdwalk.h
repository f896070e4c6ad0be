/* SPDX-License-Identifier: GPL-2.0 */
/* The current task's fd -> socket walk, shared by the BPF programs that resolve fds. */
#ifndef EBTOP_FDWALK_H
#define EBTOP_FDWALK_H

#define S_IFMT 00170000
#define S_IFSOCK 0140000

/*
 * The current task's fd -> struct file; NULL if none. task->files->fdt->{max_fds, fd} are plain
 * loads through the task's BTF pointer (≈1 ns each, the verifier makes them fault-safe) rather
 * than probe reads (≈35 ns each); the fd array holds pointers to pointers, which the verifier
 * does not follow, so the slot itself is one probe read.
 */
static __always_inline struct file *fd_to_file(int fd)
{
	struct task_struct *task = bpf_get_current_task_btf();
	struct files_struct *files = task->files;
	if (!files)
		return NULL;
	struct fdtable *fdt = files->fdt;
	struct file *f = NULL;

	if (!fdt || fd < 0 || (unsigned int)fd >= fdt->max_fds)
		return NULL;
	struct file **fds = fdt->fd;
	if (bpf_probe_read_kernel(&f, sizeof(f), &fds[fd]))
		return NULL;
	return f;
}

/* fd -> struct socket; NULL unless the fd is a socket. */
static __always_inline struct socket *fd_to_socket(int fd, __u64 *ino)
{
	struct file *f = fd_to_file(fd);
	if (!f)
		return NULL;
	struct inode *inode = BPF_CORE_READ(f, f_inode);
	if ((BPF_CORE_READ(inode, i_mode) & S_IFMT) != S_IFSOCK)
		return NULL;
	*ino = BPF_CORE_READ(inode, i_ino);
	return BPF_CORE_READ(f, private_data);
}

/* Kernels ≥ 6.13 count a file's references in `f_ref` (one reference reads 0), older ones in
 * `f_count` (one reference reads 1): CO-RE flavours of both. */
struct file___fref {
	struct {
		struct {
			long counter;
		} refcnt;
	} f_ref;
} __attribute__((preserve_access_index));

struct file___fcount {
	struct {
		long counter;
	} f_count;
} __attribute__((preserve_access_index));

/*
 * Is the file behind the current task's `fd` referenced elsewhere too (another process after
 * fork, a dup)? Then closing this fd does not end the socket: dnsmasq's parent closes its copy
 * of a TCP connection it handed to a child, which goes on using it.
 */
static __always_inline bool fd_file_shared(int fd)
{
	struct file *f = fd_to_file(fd);
	if (!f)
		return false;
	if (bpf_core_field_exists(((struct file___fref *)f)->f_ref)) {
		long refs = BPF_CORE_READ((struct file___fref *)f, f_ref.refcnt.counter);
		/* 0: one reference; beyond 2^62: the dead/saturated ranges, not sharing. */
		return refs > 0 && refs < (1L << 62);
	}
	return BPF_CORE_READ((struct file___fcount *)f, f_count.counter) > 1;
}

#endif
