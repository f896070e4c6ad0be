//! BPF skeletons built by build.rs from the `.bpf.c` files next to this one.

/// `pub mod $name` with the skeleton build.rs generated from `$name.bpf.c`.
macro_rules! skeleton {
    ($name:ident) => {
        #[allow(
            clippy::all,
            clippy::pedantic,
            non_camel_case_types,
            dead_code,
            unused_imports
        )]
        pub mod $name {
            include!(concat!(env!("OUT_DIR"), "/", stringify!($name), ".skel.rs"));
        }
    };
}

skeleton!(sockdata);
skeleton!(sockcap);
skeleton!(flows);
skeleton!(drops);
skeleton!(procs);
skeleton!(infer);
skeleton!(testdrop);

pub mod drop_injector;
skeleton!(profile);
skeleton!(ifaceflows);

/// Runs `f` with the kernel's protocol recognition (src/bpf/infer.h, the rule both capture
/// programs load) as a function of a connection's first bytes, whether its socket is a
/// datagram socket and the bytes' stream position → `enum ebtop_l7_proto` id. Loads a test-run-only program (needs root);
/// the tests build their confusion matrix on it.
pub fn with_kernel_infer<R>(
    f: impl FnOnce(&dyn Fn(&[u8], bool, u32) -> anyhow::Result<u8>) -> R,
) -> anyhow::Result<R> {
    use anyhow::Context;
    use libbpf_rs::skel::{OpenSkel, SkelBuilder};
    let mut storage = std::mem::MaybeUninit::uninit();
    let skel = infer::InferSkelBuilder::default()
        .open(&mut storage)
        .context("opening the recognition test program failed")?
        .load()
        .context("loading the recognition test program failed (root needed)")?;
    let run = |bytes: &[u8], dgram: bool, pos: u32| -> anyhow::Result<u8> {
        // struct infer_input: u32 length, 16 bytes, u32 datagram flag, u32 position.
        let mut input = [0u8; 28];
        let n = bytes.len().min(16);
        input[..4].copy_from_slice(&(bytes.len().min(u32::MAX as usize) as u32).to_ne_bytes());
        input[4..4 + n].copy_from_slice(&bytes[..n]);
        input[20..24].copy_from_slice(&u32::from(dgram).to_ne_bytes());
        input[24..].copy_from_slice(&pos.to_ne_bytes());
        let run_in = libbpf_rs::ProgramInput {
            context_in: Some(&mut input),
            ..Default::default()
        };
        let out = skel
            .progs
            .infer
            .test_run(run_in)
            .context("running the recognition test program failed")?;
        Ok(out.return_value as u8)
    };
    Ok(f(&run))
}

/// The programs of a leaked (`'static`) skeleton's object as (`prefix:name`, fd), for ebtop's
/// overhead accounting.
pub fn program_fds(
    object: &'static libbpf_rs::Object,
    prefix: &str,
) -> Vec<(String, std::os::fd::BorrowedFd<'static>)> {
    use std::os::fd::AsFd;
    object
        .progs()
        .map(|p| {
            let fd = p.as_fd();
            // SAFETY: the object is 'static (its skeleton is leaked), so its program fds live
            // as long as the process.
            let fd = unsafe {
                std::os::fd::BorrowedFd::borrow_raw(std::os::fd::AsRawFd::as_raw_fd(&fd))
            };
            (format!("{prefix}:{}", p.name().to_string_lossy()), fd)
        })
        .collect()
}

/// Runs of `object`'s programs the kernel skipped (`bpf_prog_info.recursion_misses`): a classic
/// tracepoint program is not run while the CPU's `bpf_prog_active` is held, which another BPF
/// program does and so does any process's bpf() map operation (preemptible, so it can be held
/// while other tasks run on that CPU); a tp_btf program only if it re-enters itself.
pub fn recursion_misses(object: &libbpf_rs::Object) -> u64 {
    use std::os::fd::AsFd;
    recursion_misses_of(object.progs().filter(|p| p.autoload()).map(|p| {
        let fd = p.as_fd();
        // SAFETY: the program's descriptor, open while `object` lives (this call).
        unsafe { std::os::fd::BorrowedFd::borrow_raw(std::os::fd::AsRawFd::as_raw_fd(&fd)) }
    }))
}

/// [`recursion_misses`] of programs given by their descriptors.
pub fn recursion_misses_of<'a>(progs: impl Iterator<Item = std::os::fd::BorrowedFd<'a>>) -> u64 {
    use std::os::fd::AsRawFd;
    progs
        .map(|fd| {
            let mut info = libbpf_rs::libbpf_sys::bpf_prog_info::default();
            let mut len = std::mem::size_of_val(&info) as u32;
            // SAFETY: the kernel writes at most `len` bytes into `info`.
            let rc = unsafe {
                libbpf_rs::libbpf_sys::bpf_prog_get_info_by_fd(
                    fd.as_raw_fd(),
                    &mut info as *mut _ as *mut _,
                    &mut len,
                )
            };
            if rc == 0 {
                info.recursion_misses
            } else {
                0
            }
        })
        .sum()
}

/// Writes `comm` (cut at the kernel's 15 bytes) into a NUL-padded rodata task-name filter.
pub fn set_comm_filter(dst: &mut [i8; 16], comm: &str) {
    dst.fill(0);
    for (d, s) in dst.iter_mut().zip(crate::filters::comm_prefix(comm)) {
        *d = *s as i8;
    }
}

/// Writes a list filter into a program's settings: the values (at most
/// `filters::MAX_FILTER_VALUES`, the command line's limit) and their count (0: no filter).
pub fn set_list_filter<T: Copy, const N: usize>(dst: &mut [T; N], count: &mut u32, values: &[T]) {
    let n = values.len().min(N);
    dst[..n].copy_from_slice(&values[..n]);
    *count = n as u32;
}

/// Writes the `--cgroup`/`--container` cgroups (id and depth each) into a program's settings.
pub fn set_cgroup_filters<const N: usize>(
    ids: &mut [u64; N],
    levels: &mut [u32; N],
    count: &mut u32,
    cgroups: &[crate::cgroups::CgroupFilter],
) {
    let n = cgroups.len().min(N);
    for (i, c) in cgroups.iter().take(n).enumerate() {
        ids[i] = c.id;
        levels[i] = c.level;
    }
    *count = n as u32;
}

/// Writes a `--comm` list into a program's settings.
pub fn set_comm_filters<const N: usize>(
    dst: &mut [[i8; 16]; N],
    count: &mut u32,
    comms: &[String],
) {
    let n = comms.len().min(N);
    for (d, c) in dst.iter_mut().zip(comms) {
        set_comm_filter(d, c);
    }
    *count = n as u32;
}

/// Slot `idx` of a per-CPU array of u64 counters, one value per CPU (empty if unreadable).
pub fn percpu_u64(map: &impl libbpf_rs::MapCore, idx: u32) -> Vec<u64> {
    map.lookup_percpu(&idx.to_ne_bytes(), libbpf_rs::MapFlags::ANY)
        .ok()
        .flatten()
        .unwrap_or_default()
        .iter()
        .map(|v| {
            v.get(..8)
                .map_or(0, |b| u64::from_ne_bytes(b.try_into().unwrap_or([0; 8])))
        })
        .collect()
}

/// Every entry of a hash map (plain or LRU), read batch by batch into buffers of its own
/// (memory for one batch, whatever the map's size). Not libbpf-rs's batch iterator: it ends
/// at the first batch shorter than asked, and the kernel returns a short batch whenever the
/// next bucket does not fit in what is left of it, so entries after it were missed
/// (measured: of 200,000 flows, most went unread at every poll).
pub struct HashMapBatches {
    /// The map's descriptor, borrowed: the caller keeps the map open while reading.
    fd: std::os::fd::RawFd,
    key_size: usize,
    value_size: usize,
    room: usize,
    keys: Vec<u8>,
    values: Vec<u8>,
    /// Where the next batch starts (a bucket index), None before the first.
    from: Option<u32>,
    done: bool,
    /// The map was read to its end (not cut short by an error).
    complete: bool,
    /// Each batch is deleted as it is read (`bpf_map_lookup_and_delete_batch`).
    delete: bool,
}

impl HashMapBatches {
    pub fn new(map: &impl libbpf_rs::MapCore, batch: usize) -> HashMapBatches {
        HashMapBatches::with_buffers(map, batch, BatchBuffers::default())
    }

    /// As [`HashMapBatches::new`], in the buffers of an earlier read ([`HashMapBatches::
    /// into_buffers`]): a reader that polls every second fills ~1 MB of fresh buffers with
    /// zeros otherwise, its largest cost on an idle host.
    pub fn with_buffers(
        map: &impl libbpf_rs::MapCore,
        batch: usize,
        buffers: BatchBuffers,
    ) -> HashMapBatches {
        use std::os::fd::AsRawFd;
        HashMapBatches {
            fd: map.as_fd().as_raw_fd(),
            key_size: map.key_size() as usize,
            value_size: map.value_size() as usize,
            room: batch.max(1),
            keys: buffers.keys,
            values: buffers.values,
            from: None,
            done: false,
            complete: false,
            delete: false,
        }
    }

    /// The next batch's keys and values (each an array of fixed-size entries; possibly
    /// empty), None once the map was read to its end or became unreadable.
    pub fn next_batch(&mut self) -> Option<(&[u8], &[u8])> {
        use libbpf_rs::libbpf_sys as sys;
        let opts = sys::bpf_map_batch_opts {
            sz: std::mem::size_of::<sys::bpf_map_batch_opts>() as _,
            ..Default::default()
        };
        loop {
            if self.done {
                return None;
            }
            self.keys.resize(self.room * self.key_size, 0);
            self.values.resize(self.room * self.value_size, 0);
            let mut count = self.room as u32;
            let mut next: u32 = 0;
            let mut from = self.from.unwrap_or(0);
            let from_ptr: *mut std::ffi::c_void = if self.from.is_some() {
                (&mut from as *mut u32).cast()
            } else {
                std::ptr::null_mut()
            };
            let batch_fn = if self.delete {
                sys::bpf_map_lookup_and_delete_batch
            } else {
                sys::bpf_map_lookup_batch
            };
            // SAFETY: the key and value buffers have room for `count` entries, the position
            // tokens are u32s that outlive the call, and the caller keeps the map open.
            let ret = unsafe {
                batch_fn(
                    self.fd,
                    from_ptr,
                    (&mut next as *mut u32).cast(),
                    self.keys.as_mut_ptr().cast(),
                    self.values.as_mut_ptr().cast(),
                    &mut count,
                    &opts,
                )
            };
            let errno = (ret < 0).then(|| std::io::Error::last_os_error().raw_os_error());
            let got = match errno {
                None => {
                    self.from = Some(next);
                    count as usize
                }
                // The end of the map, with the last entries.
                Some(Some(libc::ENOENT)) => {
                    self.done = true;
                    self.complete = true;
                    count as usize
                }
                // A bucket holds more entries than a batch: a larger one, same start.
                Some(Some(libc::ENOSPC)) if self.room < 1 << 20 => {
                    self.room *= 2;
                    continue;
                }
                Some(Some(libc::EINTR | libc::EAGAIN)) => continue,
                // Unreadable: no more.
                _ => {
                    self.done = true;
                    0
                }
            };
            return Some((
                &self.keys[..got * self.key_size],
                &self.values[..got * self.value_size],
            ));
        }
    }
}

impl HashMapBatches {
    /// For a per-CPU map: each value is the map's value (rounded up to 8 bytes) once per
    /// possible CPU, back to back.
    pub fn per_cpu(mut self, cpus: usize) -> HashMapBatches {
        self.value_size = self.value_size.next_multiple_of(8) * cpus.max(1);
        self
    }

    /// Deletes what it reads: for a map no program writes to any more (a table swapped out),
    /// so the read and the deletion see the same counts.
    pub fn deleting(mut self) -> HashMapBatches {
        self.delete = true;
        self
    }

    /// Whether the map was read to its end: false while batches remain, or after an error.
    pub fn complete(&self) -> bool {
        self.complete
    }

    /// The buffers, for the next read of the same map.
    pub fn into_buffers(self) -> BatchBuffers {
        BatchBuffers {
            keys: self.keys,
            values: self.values,
        }
    }
}

/// The key and value buffers of a [`HashMapBatches`], kept between reads.
#[derive(Default)]
pub struct BatchBuffers {
    keys: Vec<u8>,
    values: Vec<u8>,
}

/// Counter indexes (`enum ebtop_counter` in ebtop.h).
pub mod counter {
    pub const EVENTS: u32 = 0;
    pub const LOST: u32 = 1;
    pub const LOST_BYTES: u32 = 2;
    pub const SKIPPED_UNKNOWN: u32 = 3;
    pub const SKIPPED_BYTES: u32 = 4;
    pub const INFLIGHT_FULL: u32 = 5;
    pub const SOCK_SYSCALLS: u32 = 6;
    pub const TRUNCATED: u32 = 7;
    pub const TLS_CIPHER: u32 = 8;
    pub const TLS_CIPHER_BYTES: u32 = 9;
    pub const TLS_CALLS: u32 = 10;
    pub const TLS_NO_SOCKET: u32 = 11;
    pub const TLS_NO_SOCKET_BYTES: u32 = 12;
    pub const TLS_MEMBIO_BOUND: u32 = 13;
    pub const TLS_MEMBIO_REUSED: u32 = 14;
    pub const DEEP: u32 = 15;
    pub const DEEP_BYTES: u32 = 16;
    pub const DEEP_CUT: u32 = 17;
    pub const SHED_RUNS: u32 = 18;
    pub const SHED_CONNS: u32 = 19;
    pub const KEPT_CONNS: u32 = 20;
    pub const SKIPPED_UNEXAMINED: u32 = 21;
    pub const TLS_SHED: u32 = 22;
    pub const CUT_CONNS: u32 = 23;
    /// Counted once for a socket syscall that is also a shed run (both sums include it).
    pub const SHED_FAST: u32 = 24;
    pub const REJOINED_CONNS: u32 = 25;
    pub const COUNT: u32 = 26;
}

/// Attaches a loaded tc program to interface `ifindex`'s tcx hook (ingress or egress, as the
/// program's `SEC("tcx/…")` says), as the last program there: the link detaches when dropped
/// (or when the process ends, whatever ends it). An error names the interface.
pub fn attach_tcx(prog: &libbpf_rs::Program<'_>, ifindex: u32) -> anyhow::Result<libbpf_rs::Link> {
    use libbpf_rs::AsRawLibbpf;
    let opts = libbpf_rs::libbpf_sys::bpf_tcx_opts {
        sz: std::mem::size_of::<libbpf_rs::libbpf_sys::bpf_tcx_opts>() as _,
        ..Default::default()
    };
    // SAFETY: the program is loaded (a borrowed, live object); opts is plain data with its
    // size set.
    let link = unsafe {
        libbpf_rs::libbpf_sys::bpf_program__attach_tcx(
            prog.as_libbpf_object().as_ptr(),
            ifindex as i32,
            &opts,
        )
    };
    // SAFETY: libbpf_get_error only inspects the returned pointer.
    let err = unsafe { libbpf_rs::libbpf_sys::libbpf_get_error(link.cast()) };
    match std::ptr::NonNull::new(link) {
        Some(link) if err == 0 => {
            // SAFETY: a link libbpf just made, owned by nothing else from here on.
            Ok(unsafe { libbpf_rs::Link::from_ptr(link) })
        }
        _ => Err(anyhow::anyhow!(
            "attaching {} to tcx of ifindex {ifindex}: {}",
            prog.name().to_string_lossy(),
            std::io::Error::from_raw_os_error((-err) as i32)
        )),
    }
}
