/* SPDX-License-Identifier: GPL-2.0 */
/* The current task's fd -> socket walk, shared by the BPF programs that resolve fds. */
#ifndef EBTOP_FDWALK_H
#define EBTOP_FDWALK_H

#define S_IFMT 00170000
#define S_IFSOCK 0140000

/* fd -> struct socket via task->files->fdt (CO-RE); NULL unless the fd is a socket. */
static __always_inline struct socket *fd_to_socket(int fd, __u64 *ino)
{
	struct task_struct *task = (struct task_struct *)bpf_get_current_task();
	struct fdtable *fdt = BPF_CORE_READ(task, files, fdt);
	struct file **fds;
	struct file *f = NULL;

	if (!fdt || fd < 0 || (unsigned int)fd >= BPF_CORE_READ(fdt, max_fds))
		return NULL;
	fds = BPF_CORE_READ(fdt, fd);
	if (bpf_probe_read_kernel(&f, sizeof(f), &fds[fd]) || !f)
		return NULL;
	struct inode *inode = BPF_CORE_READ(f, f_inode);
	if ((BPF_CORE_READ(inode, i_mode) & S_IFMT) != S_IFSOCK)
		return NULL;
	*ino = BPF_CORE_READ(inode, i_ino);
	return BPF_CORE_READ(f, private_data);
}

#endif
