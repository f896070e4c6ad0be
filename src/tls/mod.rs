//! TLS plaintext capture: attaches the capture object's TLS programs (src/bpf/tls.h) to
//! OpenSSL's `SSL_write`/`SSL_read` (and `_ex`) wherever they live on the host, and keeps
//! doing so as programs start.
//!
//! A uprobe belongs to a file (its inode), not to a process: once a library is probed, every
//! process that maps it — running now, started later, or loading it later with `dlopen` — is
//! traced from its first call, with no delay and no rescan. So ebtop probes, at start, the
//! `libssl.so*` files of the system's library directories and of every running process (a
//! container's own libraries through `/proc/PID/root`), and each executable that links
//! OpenSSL statically; later, each program that is exec'd is looked at (at once, and again a
//! little later, when its loader has mapped its libraries). With `--pid`, probes are placed in
//! those processes only (the kernel then leaves other processes' code untouched); otherwise
//! once per file for all processes, and `--comm`/`--cgroup` are applied by the programs.

pub mod discover;
pub mod elf;
#[cfg(any(test, feature = "test-support"))]
#[doc(hidden)]
pub mod elf_fuzzing;
pub mod golang;
pub mod lookout;
pub mod nginx;
pub mod untrusted;

use std::collections::BTreeMap;
use std::ptr::NonNull;
use std::time::Duration;

use discover::{SslSites, Target};
use lookout::{ExecdFile, Found, Lookout, Plan, Probed};

use crate::process_events::ProcEvent;

/// The capture object's TLS programs (`tls.h`): entry programs per function and one return.
const ENTRIES: [(&str, &str); 5] = [
    (discover::WRITE, "tls_write_enter"),
    (discover::READ, "tls_read_enter"),
    (discover::WRITE_EX, "tls_write_ex_enter"),
    (discover::READ_EX, "tls_read_ex_enter"),
    (discover::HANDSHAKE, "tls_handshake_enter"),
];
const RETURN: &str = "tls_return";

/// When an exec'd program is looked at again: its loader maps its libraries after the exec.
const EXEC_RESCANS: [Duration; 3] = [
    Duration::from_millis(0),
    Duration::from_millis(100),
    Duration::from_millis(1000),
];

/// What the TLS probes found and did, for the `meta`/summary and the overhead panel.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TlsStatus {
    /// Files probed (libraries and executables).
    pub files: Vec<String>,
    /// Files that define the functions but could not be probed, with the reason.
    pub failures: Vec<String>,
}

pub struct TlsProbes {
    /// Finds what to probe, on a thread of its own.
    lookout: Lookout,
    links: Vec<libbpf_rs::Link>,
    status: TlsStatus,
    /// What a probe hit costs a process here, measured at start (`calibrate_hit_ns`): one at
    /// a site the kernel emulates, or a return; and one it single-steps out of line.
    pub hit_ns: Option<u64>,
    pub stepped_hit_ns: Option<u64>,
    /// Go programs probed (the capture programs then look up goroutines' calls).
    go_files: usize,
    /// Probe hits per process since the start, exited processes included (the kernel's map
    /// forgets them): all hits, and those at single-stepped sites.
    hits: std::cell::RefCell<(BTreeMap<u32, u64>, BTreeMap<u32, u64>)>,
    /// The lookout's look at the system's libraries and the running processes is done (the
    /// session started without waiting for it: `TlsProbes::start_done`).
    start_done: bool,
    /// Slept before an exec (of files of that name, if given) is handed over (a test hook:
    /// `diag::debug_exec_lag`).
    exec_lag: (Duration, Option<Vec<u8>>),
    /// The TLS programs, once the lookout loaded them.
    program_fds: ProgramFds,
    /// Loaded since the last [`TlsProbes::take_new_programs`].
    new_programs: bool,
}

/// The TLS programs' descriptors by name, for ebtop's own-cost figures and skipped runs (their
/// object is leaked: they live as long as the process).
pub type ProgramFds = Vec<(String, std::os::fd::BorrowedFd<'static>)>;

/// Loads the TLS programs (on the lookout's thread, after the session's start: their
/// verification is the longest part of loading, and nothing is probed before the lookout
/// finds files anyway): the programs to attach and their descriptors.
pub type ProgramLoader = Box<dyn FnOnce() -> anyhow::Result<(TlsPrograms, ProgramFds)> + Send>;

/// Exited processes whose hits are remembered at most (then only the running ones are).
const MAX_HIT_PROCESSES: usize = 65536;

/// The TLS programs, by name, as libbpf knows them: what the lookout thread attaches
/// (libbpf-rs's `Program` is not `Send`).
pub struct TlsPrograms(Vec<(String, NonNull<libbpf_rs::libbpf_sys::bpf_program>)>);

// SAFETY: the pointers are to programs of the TLS programs' own object (a second copy of the
// capture's, `source::capture::tls_loader`), leaked: it outlives every holder. Only the
// lookout thread, which loaded it, calls libbpf on that object (attaches, which read a
// program's fd, name and type).
unsafe impl Send for TlsPrograms {}

impl TlsPrograms {
    pub fn of(progs: &[libbpf_rs::Program]) -> TlsPrograms {
        use libbpf_rs::AsRawLibbpf;
        TlsPrograms(
            progs
                .iter()
                .map(|p| {
                    (
                        p.name().to_string_lossy().into_owned(),
                        p.as_libbpf_object(),
                    )
                })
                .collect(),
        )
    }
}

/// A program of the capture object, by name.
#[derive(Clone, Copy)]
struct Prog<'a> {
    name: &'a str,
    ptr: NonNull<libbpf_rs::libbpf_sys::bpf_program>,
}

fn program<'a>(progs: &'a TlsPrograms, name: &str) -> Option<Prog<'a>> {
    progs
        .0
        .iter()
        .find(|(n, _)| n == name)
        .map(|(name, ptr)| Prog { name, ptr: *ptr })
}

/// Whether a program of the capture object is one of the TLS probes (attached here, not with
/// the capture's tracepoints).
pub fn is_tls_program(section: &str) -> bool {
    section.starts_with("uprobe") || section.starts_with("uretprobe")
}

/// Whether the kernel attaches a program to many uprobes with one link (`BPF_TRACE_UPROBE_MULTI`,
/// Linux 6.6), tried as libbpf tries it: a two-instruction program loaded for that attach
/// type, linked to offset 0 of `/` (a directory: `EBADF` from a kernel that has such links).
/// With them a file's probes are a few links, not one perf event per site: each perf event's
/// release waits for an RCU grace period under a global mutex (measured here: ~70 ms each,
/// serialised, so 300 sites took 20 s to detach), a link's waits once for all its sites.
pub fn uprobe_multi_supported() -> bool {
    use libbpf_rs::libbpf_sys as sys;
    static SUPPORTED: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *SUPPORTED.get_or_init(|| {
        // SAFETY: a plain-data struct; all zero is a valid instruction (r0 = r0 + 0, patched).
        let mut insns: [sys::bpf_insn; 2] = unsafe { std::mem::zeroed() };
        insns[0].code = 0xb7; // r0 = 0
        insns[1].code = 0x95; // exit
        let mut load = sys::bpf_prog_load_opts {
            sz: std::mem::size_of::<sys::bpf_prog_load_opts>() as _,
            expected_attach_type: sys::BPF_TRACE_UPROBE_MULTI,
            ..Default::default()
        };
        // SAFETY: the instructions, the licence string and the options outlive the call.
        let prog = unsafe {
            sys::bpf_prog_load(
                sys::BPF_PROG_TYPE_KPROBE,
                std::ptr::null(),
                c"GPL".as_ptr(),
                insns.as_ptr(),
                insns.len() as _,
                &mut load,
            )
        };
        if prog < 0 {
            return false;
        }
        let offset: std::os::raw::c_ulong = 0;
        let mut opts = sys::bpf_link_create_opts {
            sz: std::mem::size_of::<sys::bpf_link_create_opts>() as _,
            ..Default::default()
        };
        opts.__bindgen_anon_1.uprobe_multi =
            sys::bpf_link_create_opts__bindgen_ty_1__bindgen_ty_3 {
                cnt: 1,
                path: c"/".as_ptr(),
                offsets: &offset,
                ..Default::default()
            };
        // SAFETY: the program descriptor is ours, and the options and what they point to
        // outlive the call.
        let link = unsafe { sys::bpf_link_create(prog, -1, sys::BPF_TRACE_UPROBE_MULTI, &opts) };
        let err = std::io::Error::last_os_error().raw_os_error();
        // SAFETY: descriptors this function opened, closed once.
        unsafe {
            if link >= 0 {
                libc::close(link);
            }
            libc::close(prog);
        }
        link >= 0 || err == Some(libc::EBADF)
    })
}

/// Has the TLS programs of a capture object about to be loaded attached by multi-uprobe links
/// where the kernel has them ([`uprobe_multi_supported`]): the attach type is fixed at load.
/// `EBTOP_UPROBE_LINKS=single` keeps to a link per site, as on kernels without them
/// (troubleshooting; the tests cover both).
pub fn prefer_multi_links<'a>(progs: impl Iterator<Item = libbpf_rs::OpenProgramMut<'a>>) {
    let single = std::env::var_os("EBTOP_UPROBE_LINKS").is_some_and(|v| v == "single");
    if single || !uprobe_multi_supported() {
        return;
    }
    for mut prog in progs {
        if is_tls_program(&prog.section().to_string_lossy()) {
            prog.set_attach_type(libbpf_rs::ProgramAttachType::TraceUprobeMulti);
        }
    }
}

impl TlsProbes {
    /// Starts the lookout, which loads the TLS programs (`load`), then probes the system's
    /// libraries and every running process's OpenSSL (`pids`: `--pid`) on its own thread:
    /// nothing here waits for it (the programs' verification, a host of many programs, or a
    /// file that is slow to read never holds up the session's start). What it probes is
    /// taken in by [`TlsProbes::poll`]; [`TlsProbes::start_done`] says when the running
    /// processes are covered. Should the kernel refuse the programs, that is said once and
    /// listed in the `tls` line's failures, and the session goes on without TLS plaintext.
    pub fn start(load: ProgramLoader, pids: Option<Vec<u32>>) -> std::io::Result<TlsProbes> {
        Ok(TlsProbes {
            lookout: Lookout::start(pids, load)?,
            links: Vec::new(),
            status: TlsStatus::default(),
            hit_ns: None,
            stepped_hit_ns: None,
            go_files: 0,
            hits: Default::default(),
            start_done: false,
            exec_lag: crate::diag::debug_exec_lag(),
            program_fds: Vec::new(),
            new_programs: false,
        })
    }

    /// The TLS programs' descriptors, once, when they were loaded since the last call.
    pub fn take_new_programs(&mut self) -> Option<&ProgramFds> {
        std::mem::take(&mut self.new_programs).then_some(&self.program_fds)
    }

    /// Runs of the TLS programs the kernel skipped (`bpf::recursion_misses`).
    pub fn missed_runs(&self) -> u64 {
        crate::bpf::recursion_misses_of(self.program_fds.iter().map(|(_, fd)| *fd))
    }

    /// Whether the look at the system's libraries and the processes running at the start is
    /// done (its files probed and taken in).
    pub fn start_done(&self) -> bool {
        self.start_done
    }

    /// Files skipped as untrusted input so far (each named once on stderr).
    pub fn skipped(&self) -> usize {
        self.lookout.skipped()
    }

    /// A process ran execve(): looked at now and again shortly (its libraries). Its
    /// executable is opened here, at once, for the lookout: a short-lived program may be gone
    /// before the lookout gets to it (a few µs on this thread, once per exec).
    pub fn on_exec(&mut self, exec: &ProcEvent) {
        let (lag, lagged_name) = &self.exec_lag;
        let named = |n: &[u8]| exec.filename.rsplit(|&b| b == b'/').next() == Some(n);
        if !lag.is_zero() && lagged_name.as_deref().is_none_or(named) {
            std::thread::sleep(*lag);
        }
        let file = ExecdFile {
            path: exec.filename,
            id: exec.exe_id,
        };
        self.lookout.look_at(exec.pid, &EXEC_RESCANS, Some(file));
    }

    /// A process's dlopen() returned: a library it loaded (from anywhere: the library
    /// directories' files are probed already) is looked at now.
    pub fn on_dlopen(&mut self, pid: u32) {
        self.lookout.look_at(pid, &[Duration::ZERO], None);
    }

    /// Readable when the lookout probed files: the live loop waits on it with the rings, so
    /// what was probed is taken in at once.
    pub fn wake_fd(&self) -> std::os::fd::BorrowedFd<'_> {
        self.lookout.wake_fd()
    }

    /// Whether every installed program was looked at (see `Lookout::installed_done`).
    pub fn installed_done(&self) -> bool {
        self.lookout.installed_done()
    }

    /// Takes in what the lookout probed since the last call (never waits).
    pub fn poll(&mut self) {
        let taken = self.lookout.take_probed();
        for probed in taken.probed {
            self.note(probed);
        }
        if let Some((hit, stepped)) = taken.calibrated {
            self.hit_ns = hit;
            self.stepped_hit_ns = stepped;
        }
        match taken.loaded {
            Some(Ok(fds)) => {
                self.program_fds = fds;
                self.new_programs = true;
            }
            Some(Err(e)) => {
                crate::diag!(
                    "ebtop: warning: TLS probes unavailable, going on without TLS plaintext: {e}"
                );
                self.status
                    .failures
                    .push(format!("TLS programs: the kernel refused them: {e}"));
            }
            None => {}
        }
        self.start_done |= taken.start_done;
    }

    fn note(&mut self, probed: Probed) {
        match probed.result {
            Ok(sites) => {
                self.links.extend(probed.links);
                if sites.starts_with("go") {
                    self.go_files += 1;
                }
                self.status.files.push(format!("{} [{sites}]", probed.name));
            }
            Err(e) => {
                crate::diag!("ebtop: TLS: cannot probe {}: {e}", probed.name);
                self.status.failures.push(format!("{}: {e}", probed.name));
            }
        }
    }

    /// Probe hits per process since the start (`read_hits` of the capture's map), exited
    /// processes included.
    pub fn hits_since_start(
        &self,
        map: &libbpf_rs::Map,
    ) -> (BTreeMap<u32, u64>, BTreeMap<u32, u64>) {
        let (now, stepped_now) = read_hits(map);
        let mut acc = self.hits.borrow_mut();
        if acc.0.len() > MAX_HIT_PROCESSES {
            acc.0.retain(|pid, _| now.contains_key(pid));
            acc.1.retain(|pid, _| now.contains_key(pid));
        }
        acc.0.extend(now);
        acc.1.extend(stepped_now);
        acc.clone()
    }

    /// Whether a Go program is probed.
    pub fn go_probed(&self) -> bool {
        self.go_files > 0
    }

    pub fn status(&self) -> &TlsStatus {
        &self.status
    }

    /// The probes' links, to detach with the rest at the end (the lookout stopped first).
    pub fn links(&mut self) -> Vec<libbpf_rs::Link> {
        for probed in self.lookout.stop() {
            self.links.extend(probed.links);
        }
        std::mem::take(&mut self.links)
    }
}

/// Places the probes a file needs, as the lookout found them (on the lookout's thread).
fn attach_found(progs: &TlsPrograms, found: Found) -> Probed {
    let Found {
        held,
        target,
        pid,
        name,
        plan,
        nginx,
    } = found;
    let result = match &plan {
        Plan::Ssl(sites) => attach(progs, &target, pid, sites).map(|(links, internal)| {
            // Which sites: OpenSSL's internal read/write, or the public functions.
            (links, if internal { "internal" } else { "public" })
        }),
        Plan::Go(sites) => attach_go(progs, &target, pid, sites).map(|mut links| {
            // net/http's client too, for the call chains: apart (its failure leaves TLS on).
            let (client_known, label) = match (&sites.http, go_http_wanted()) {
                (Ok(Some(http)), true) => match attach_go_http(progs, &target, pid, http) {
                    Ok(more) => {
                        links.extend(more);
                        (true, "go+http")
                    }
                    Err(e) => {
                        crate::diag!("ebtop: Go HTTP client probes not placed on {name}: {e:#}");
                        (false, "go")
                    }
                },
                (Err(e), true) => {
                    crate::diag!("ebtop: Go HTTP client probes not placed on {name}: {e}");
                    (false, "go")
                }
                (Ok(None), _) => (true, "go"),
                (Ok(Some(_)) | Err(_), false) => (false, "go"),
            };
            // Goroutine creation, for the call chains: apart (its failure leaves the rest
            // on); only where net/http's client is probed or absent — its connection
            // goroutines, started by one request, write every request's: without the client
            // probes they would inherit the first.
            let why = match (&sites.spawn, go_spawn_wanted(), client_known) {
                (_, false, _) => None,
                (_, true, false) => Some("net/http's client is not probed".to_owned()),
                (Err(e), true, true) => Some(e.clone()),
                (Ok(spawn), true, true) => match attach_go_spawn(progs, &target, pid, spawn) {
                    Ok(more) => {
                        links.extend(more);
                        None
                    }
                    Err(e) => Some(format!("{e:#}")),
                },
            };
            if let Some(why) = why {
                crate::diag!(
                    "ebtop: Go goroutine creation not probed on {name}: {why} (calls of \
                     goroutines a handler starts are linked to no request)"
                );
            }
            (links, label)
        }),
        Plan::GoFailed(e) => Err(anyhow::anyhow!("{e}")),
        Plan::NginxOnly => Ok((Vec::new(), "nginx")),
    };
    // nginx's upstream writes, for the call chains: apart (their failure leaves TLS on).
    let result = match (result, nginx) {
        (Ok((mut links, label)), Some(site)) => match attach_nginx(progs, &target, pid, site) {
            Ok(more) => {
                links.extend(more);
                let label = match label {
                    "internal" => "internal+nginx",
                    "public" => "public+nginx",
                    other => other,
                };
                Ok((links, label))
            }
            Err(e) if label == "nginx" => Err(e),
            Err(e) => {
                crate::diag!("ebtop: nginx upstream probe not placed on {name}: {e:#}");
                Ok((links, label))
            }
        },
        (result, _) => result,
    };
    // The file stays open until its probes are placed (the path is its descriptor).
    drop(held);
    match result {
        Ok((links, sites)) => Probed {
            links,
            name,
            result: Ok(sites),
        },
        Err(e) => Probed {
            links: Vec::new(),
            name,
            result: Err(format!("{e:#}")),
        },
    }
}

/// Entry and return probes on each function the file defines (or on OpenSSL's internal read
/// and write, and the handshake); all or nothing. Says whether the internal sites were used.
fn attach(
    progs: &TlsPrograms,
    target: &Target,
    pid: i32,
    sites: &SslSites,
) -> anyhow::Result<(Vec<libbpf_rs::Link>, bool)> {
    use anyhow::Context;
    let ret = program(progs, RETURN).context("the TLS return program is missing")?;
    let mut probes = Probes::default();
    // Reads and writes through OpenSSL's internal functions where the code proves it (the
    // same data, ~7x cheaper per call: see `discover::internal_sites`), else the public ones.
    if let Some(internal) = sites.internal {
        for (offset, prog_name) in [
            (internal.read, "tls_read_ex_enter"),
            (internal.write, "tls_write_ex_enter"),
        ] {
            let entry = program(progs, prog_name).context("a TLS entry program is missing")?;
            let offset = usize::try_from(offset)?;
            // Both functions begin with a push: emulated (`internal_sites`).
            probes.add(entry, false, offset, false);
            probes.add(ret, true, offset, false);
        }
    }
    for (i, (func, prog_name)) in ENTRIES.iter().enumerate() {
        // With the internal sites, only the handshake is probed by name.
        let Some(site) = sites.functions[i] else {
            continue;
        };
        if sites.internal.is_some() && *func != discover::HANDSHAKE {
            continue;
        }
        let entry = program(progs, prog_name).context("a TLS entry program is missing")?;
        let offset = usize::try_from(site.offset)?;
        probes.add(entry, false, offset, site.stepped);
        probes.add(ret, true, offset, false);
    }
    Ok((probes.place(pid, &target.path)?, sites.internal.is_some()))
}

/// Entry probes on a Go program's crypto/tls functions and on each of their return
/// instructions (never uretprobes: see `golang`); all or nothing.
fn attach_go(
    progs: &TlsPrograms,
    target: &Target,
    pid: i32,
    sites: &golang::GoSites,
) -> anyhow::Result<Vec<libbpf_rs::Link>> {
    use anyhow::Context;
    let funcs = [
        (&sites.write, "tls_go_write_enter", "tls_go_return"),
        (&sites.read, "tls_go_read_enter", "tls_go_return"),
    ]
    .into_iter()
    .chain(
        sites
            .handshakes
            .iter()
            .map(|h| (h, "tls_go_handshake_enter", "tls_go_handshake_return")),
    );
    // The returns first: an entry that fires is then sure to meet its return. The kernel
    // single-steps a `ret`; the entry is emulated where it is the push after the stack check.
    let (mut returns, mut entries) = (Probes::default(), Probes::default());
    for (func, enter, ret) in funcs {
        let enter = program(progs, enter).context("a Go TLS program is missing")?;
        let ret = program(progs, ret).context("a Go TLS program is missing")?;
        for r in &func.returns {
            returns.add(ret, false, usize::try_from(*r)?, true);
        }
        entries.add(
            enter,
            false,
            usize::try_from(func.entry)?,
            !func.entry_emulated,
        );
    }
    let mut links = returns.place(pid, &target.path)?;
    links.extend(entries.place(pid, &target.path)?);
    Ok(links)
}

/// The entry probe on nginx's `ngx_chain_writer` (src/bpf/ngxchain.h).
fn attach_nginx(
    progs: &TlsPrograms,
    target: &Target,
    pid: i32,
    site: discover::FunctionSite,
) -> anyhow::Result<Vec<libbpf_rs::Link>> {
    use anyhow::Context;
    let prog = program(progs, "ngx_chain_writer_enter")
        .context("the nginx upstream program is missing")?;
    let mut probes = Probes::default();
    probes.add(prog, false, usize::try_from(site.offset)?, site.stepped);
    probes.place(pid, &target.path)
}

/// Whether Go programs' net/http client is probed: for the call chains, when they are on;
/// `EBTOP_GO_HTTP=0` leaves it out (for measuring what its probes cost: docs/performance.md).
fn go_http_wanted() -> bool {
    crate::pipeline::chains_enabled() && std::env::var_os("EBTOP_GO_HTTP").is_none_or(|v| v != "0")
}

/// Entry probes on a Go program's net/http client (`golang::HttpSites`, src/bpf/gohttp.h):
/// the connection writer's entry, writeLoop's return instructions, roundTrip's entry; all or
/// nothing. The returns first, as for crypto/tls: a writeLoop seen to write is seen to end.
fn attach_go_http(
    progs: &TlsPrograms,
    target: &Target,
    pid: i32,
    sites: &golang::HttpSites,
) -> anyhow::Result<Vec<libbpf_rs::Link>> {
    use anyhow::Context;
    let prog = |n| program(progs, n).context("a Go HTTP client program is missing");
    let (mut returns, mut entries) = (Probes::default(), Probes::default());
    let ret = prog("go_http_write_loop_return")?;
    for r in &sites.write_loop.returns {
        returns.add(ret, false, usize::try_from(*r)?, true);
    }
    for (func, enter) in [
        (&sites.conn_write, "go_http_conn_write_enter"),
        (&sites.round_trip, "go_http_round_trip_enter"),
    ] {
        entries.add(
            prog(enter)?,
            false,
            usize::try_from(func.entry)?,
            !func.entry_emulated,
        );
    }
    let mut links = returns.place(pid, &target.path)?;
    links.extend(entries.place(pid, &target.path)?);
    Ok(links)
}

/// Whether Go programs' goroutine creation is probed: for the call chains, when they are on;
/// `EBTOP_GO_SPAWN=0` leaves it out (for measuring what its probes cost: docs/performance.md).
fn go_spawn_wanted() -> bool {
    crate::pipeline::chains_enabled() && std::env::var_os("EBTOP_GO_SPAWN").is_none_or(|v| v != "0")
}

/// Probes on a Go program's goroutine creation (`golang::SpawnSites`, src/bpf/gospawn.h);
/// all or nothing. Those that end a creation first (runqput's call, the other creators'),
/// then newproc's entry: a creator kept is sure to be taken.
fn attach_go_spawn(
    progs: &TlsPrograms,
    target: &Target,
    pid: i32,
    sites: &golang::SpawnSites,
) -> anyhow::Result<Vec<libbpf_rs::Link>> {
    use anyhow::Context;
    let prog = |n| program(progs, n).context("a Go goroutine creation program is missing");
    let (mut ends, mut entries) = (Probes::default(), Probes::default());
    // A call instruction: the kernel emulates it.
    ends.add(
        prog("go_spawn_queued")?,
        false,
        usize::try_from(sites.queued)?,
        false,
    );
    for o in &sites.others {
        // Whatever follows a call: single-stepped (rare paths: coroutines, debuggers).
        ends.add(prog("go_spawn_other")?, false, usize::try_from(*o)?, true);
    }
    entries.add(
        prog("go_spawn_enter")?,
        false,
        usize::try_from(sites.newproc.entry)?,
        !sites.newproc.entry_emulated,
    );
    let mut links = ends.place(pid, &target.path)?;
    links.extend(entries.place(pid, &target.path)?);
    Ok(links)
}

/// Uprobes to place on one file: per program and kind (entry, or return: a uretprobe), the
/// file offsets and whether the kernel single-steps each (the attach cookie: such hits are
/// counted apart, they cost more), in the order they were added.
#[derive(Default)]
struct Probes<'a> {
    groups: Vec<(Prog<'a>, bool, Vec<usize>, Vec<u64>)>,
}

impl<'a> Probes<'a> {
    fn add(&mut self, prog: Prog<'a>, retprobe: bool, offset: usize, stepped: bool) {
        let cookie = u64::from(stepped);
        match self
            .groups
            .iter_mut()
            .find(|(p, r, ..)| p.ptr == prog.ptr && *r == retprobe)
        {
            Some((_, _, offsets, cookies)) => {
                offsets.push(offset);
                cookies.push(cookie);
            }
            None => self
                .groups
                .push((prog, retprobe, vec![offset], vec![cookie])),
        }
    }

    /// Places them on `path` (for process `pid`, or -1: all): one link per program and kind
    /// where the programs were loaded for multi-uprobe links, else one per site. All or
    /// nothing: on an error the links made are dropped (detached).
    fn place(self, pid: i32, path: &std::path::Path) -> anyhow::Result<Vec<libbpf_rs::Link>> {
        use anyhow::Context;
        let mut links = Vec::new();
        for (prog, retprobe, offsets, cookies) in self.groups {
            if prog.multi() {
                links.push(
                    attach_uprobe_multi(prog, retprobe, pid, path, &offsets, &cookies)
                        .with_context(|| format!("{} at offsets {offsets:#x?}", prog.name))?,
                );
                continue;
            }
            for (offset, cookie) in offsets.into_iter().zip(cookies) {
                links.push(
                    attach_uprobe(prog, retprobe, pid, path, offset, cookie)
                        .with_context(|| format!("{} at offset {offset:#x}", prog.name))?,
                );
            }
        }
        Ok(links)
    }
}

impl Prog<'_> {
    /// Loaded for multi-uprobe links ([`prefer_multi_links`]).
    fn multi(&self) -> bool {
        // SAFETY: the program pointer is valid while the object lives (`TlsPrograms`).
        let t =
            unsafe { libbpf_rs::libbpf_sys::bpf_program__expected_attach_type(self.ptr.as_ptr()) };
        t == libbpf_rs::libbpf_sys::BPF_TRACE_UPROBE_MULTI
    }
}

/// libbpf's uprobe attach at a file offset, on a program of the loaded capture object.
/// libbpf-rs offers it only on a mutably borrowed program, which the live loop (holding the
/// object's programs for the overhead figures) cannot lend; attaching does not change the
/// program, so it is called on the shared one. Offsets, not function names: the lookout read
/// the symbols already (libbpf would read the whole symbol table again, on the reader).
fn attach_uprobe(
    prog: Prog,
    retprobe: bool,
    pid: i32,
    path: &std::path::Path,
    offset: usize,
    cookie: u64,
) -> anyhow::Result<libbpf_rs::Link> {
    use libbpf_rs::libbpf_sys;
    use std::os::unix::ffi::OsStrExt;
    let path = std::ffi::CString::new(path.as_os_str().as_bytes())?;
    let opts = libbpf_sys::bpf_uprobe_opts {
        sz: std::mem::size_of::<libbpf_sys::bpf_uprobe_opts>() as _,
        retprobe,
        bpf_cookie: cookie,
        ..Default::default()
    };
    // SAFETY: the program pointer is valid while the object lives (`TlsPrograms`), the
    // strings and options outlive the call, and libbpf copies what it keeps.
    let link = unsafe {
        libbpf_sys::bpf_program__attach_uprobe_opts(
            prog.ptr.as_ptr(),
            pid,
            path.as_ptr(),
            offset as _,
            &opts,
        )
    };
    link_of(link)
}

/// [`attach_uprobe`] at many offsets of one file with one link (`offsets` and `cookies` alike
/// long), on a program loaded for multi-uprobe links.
fn attach_uprobe_multi(
    prog: Prog,
    retprobe: bool,
    pid: i32,
    path: &std::path::Path,
    offsets: &[usize],
    cookies: &[u64],
) -> anyhow::Result<libbpf_rs::Link> {
    use libbpf_rs::libbpf_sys;
    use std::os::unix::ffi::OsStrExt;
    assert_eq!(offsets.len(), cookies.len());
    let path = std::ffi::CString::new(path.as_os_str().as_bytes())?;
    let opts = libbpf_sys::bpf_uprobe_multi_opts {
        sz: std::mem::size_of::<libbpf_sys::bpf_uprobe_multi_opts>() as _,
        offsets: offsets.as_ptr().cast(),
        cookies: cookies.as_ptr(),
        cnt: offsets.len() as _,
        retprobe,
        ..Default::default()
    };
    // SAFETY: as in `attach_uprobe`; the offset and cookie arrays outlive the call (the kernel
    // copies them).
    let link = unsafe {
        libbpf_sys::bpf_program__attach_uprobe_multi(
            prog.ptr.as_ptr(),
            pid,
            path.as_ptr(),
            std::ptr::null(),
            &opts,
        )
    };
    link_of(link)
}

/// A link libbpf returned, or the error it left in errno.
fn link_of(link: *mut libbpf_rs::libbpf_sys::bpf_link) -> anyhow::Result<libbpf_rs::Link> {
    match std::ptr::NonNull::new(link) {
        // SAFETY: a link libbpf just made, owned by nobody else.
        Some(ptr) => Ok(unsafe { libbpf_rs::Link::from_ptr(ptr) }),
        None => Err(std::io::Error::last_os_error().into()),
    }
}

/// Probe hits per process since the start (the `tls_hits` map: entries and returns), and those
/// of them at single-stepped sites (`tls.h` TLS_STEPPED_KEY). Entries of processes that are
/// gone are removed from the map (it holds 16384), after being read.
pub fn read_hits(map: &libbpf_rs::Map) -> (BTreeMap<u32, u64>, BTreeMap<u32, u64>) {
    use libbpf_rs::MapCore;
    const STEPPED: u32 = 1 << 31;
    let (mut out, mut stepped) = (BTreeMap::new(), BTreeMap::new());
    for key in map.keys() {
        let Ok(k) = <[u8; 4]>::try_from(key.as_slice()) else {
            continue;
        };
        let k = u32::from_ne_bytes(k);
        let Ok(Some(v)) = map.lookup(&key, libbpf_rs::MapFlags::ANY) else {
            continue;
        };
        let Ok(v) = <[u8; 8]>::try_from(v.as_slice()) else {
            continue;
        };
        let pid = k & !STEPPED;
        let into = if k & STEPPED != 0 {
            &mut stepped
        } else {
            &mut out
        };
        into.insert(pid, u64::from_ne_bytes(v));
        if !crate::procfs::exists(pid) {
            let _ = map.delete(&key);
        }
    }
    (out, stepped)
}

// Functions like the probe sites, on which what a probe hit costs is measured: one whose first
// instruction the kernel must single-step out of line, as OpenSSL 3's public SSL_write/SSL_read
// (`sub $0x18,%rsp`), and one whose first instruction it emulates, as OpenSSL's internal
// read/write functions (`push %r13`).
#[cfg(target_arch = "x86_64")]
std::arch::global_asm!(
    ".text",
    ".globl ebtop_tls_probe_calibration",
    ".type ebtop_tls_probe_calibration,@function",
    "ebtop_tls_probe_calibration:",
    "sub $0x18, %rsp",
    "add $0x18, %rsp",
    "ret",
    ".globl ebtop_tls_probe_calibration_emulated",
    ".type ebtop_tls_probe_calibration_emulated,@function",
    "ebtop_tls_probe_calibration_emulated:",
    "push %r13",
    "pop %r13",
    "ret",
    options(att_syntax)
);
#[cfg(target_arch = "aarch64")]
std::arch::global_asm!(
    ".text",
    ".globl ebtop_tls_probe_calibration",
    ".type ebtop_tls_probe_calibration,%function",
    "ebtop_tls_probe_calibration:",
    "sub sp, sp, #16",
    "add sp, sp, #16",
    "ret",
    ".globl ebtop_tls_probe_calibration_emulated",
    ".type ebtop_tls_probe_calibration_emulated,%function",
    "ebtop_tls_probe_calibration_emulated:",
    "nop",
    "ret",
);

#[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
extern "C" {
    fn ebtop_tls_probe_calibration();
    fn ebtop_tls_probe_calibration_emulated();
}

/// What one TLS probe hit costs the probed process on this host, in ns: the mean of an entry
/// at a site the kernel emulates and a return (`push`, as OpenSSL's internal functions and
/// Go's after the stack check begin, with a uretprobe), and one hit at a site it single-steps
/// out of line (`sub`, as OpenSSL 3's public functions begin; Go's `ret`). The programs are
/// attached to functions of ebtop's own (they return at once for ebtop's own process, as for
/// any process not selected: the cost is the trap), timed with and without them (the median
/// of 5 rounds each). None if it cannot be measured. Load inflates it, as it inflates the real
/// probes' cost.
pub fn calibrate_hit_ns(progs: &TlsPrograms) -> (Option<u64>, Option<u64>) {
    #[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
    {
        let measure = |target: unsafe extern "C" fn(), with_return: bool| -> Option<u64> {
            let addr = target as *const () as usize as u64;
            let offset = file_offset_of(addr)?;
            let entry = program(progs, "tls_write_enter")?;
            let ret = program(progs, RETURN)?;
            let exe = crate::procfs::self_path("exe");
            let me = std::process::id() as i32;
            const CALLS: u32 = 200;
            let time = || {
                let t = std::time::Instant::now();
                for _ in 0..CALLS {
                    // SAFETY: the function only moves the stack pointer and back, then returns.
                    unsafe { std::hint::black_box(target)() };
                }
                t.elapsed().as_nanos() as u64
            };
            let median = |mut v: Vec<u64>| {
                v.sort_unstable();
                v[v.len() / 2]
            };
            let off = median((0..5).map(|_| time()).collect());
            let mut probes = Probes::default();
            probes.add(entry, false, offset, false);
            if with_return {
                probes.add(ret, true, offset, false);
            }
            let links = probes.place(me, &exe).ok()?;
            let on = median((0..5).map(|_| time()).collect());
            let hits = u64::from(CALLS) * links.len() as u64;
            // Detaching a uprobe waits for the kernel (~0.2 s): not on the way to the session.
            std::thread::spawn(move || drop(links));
            Some(on.saturating_sub(off) / hits)
        };
        (
            measure(ebtop_tls_probe_calibration_emulated, true),
            measure(ebtop_tls_probe_calibration, false),
        )
    }
    #[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
    {
        let _ = progs;
        (None, None)
    }
}

/// The offset in ebtop's executable file of the code at `addr` (from /proc/self/maps).
fn file_offset_of(addr: u64) -> Option<usize> {
    let maps = crate::procfs::read_self("maps").ok()?;
    maps.lines().find_map(|line| {
        let mut f = line.split_whitespace();
        let (range, _perms, off) = (f.next()?, f.next()?, f.next()?);
        let (start, end) = range.split_once('-')?;
        let start = u64::from_str_radix(start, 16).ok()?;
        let end = u64::from_str_radix(end, 16).ok()?;
        let off = u64::from_str_radix(off, 16).ok()?;
        (start..end)
            .contains(&addr)
            .then(|| (addr - start + off) as usize)
    })
}
