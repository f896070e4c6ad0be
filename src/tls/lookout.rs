//! The TLS lookout: a thread of its own that finds what to probe and places the probes. Reading
//! a process's memory map and a file's symbol tables and code takes from microseconds to well
//! over 100 ms (a large executable exec'd for the first time), placing a Go program's probes
//! tens of ms: done on the ring's reader thread, the capture ring filled up meanwhile. The
//! reader only takes in the links and what was probed ([`Lookout::take_probed`]); it is woken
//! through [`Lookout::wake_fd`].

use std::collections::{HashMap, HashSet, VecDeque};
use std::fs::File;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

use super::discover::{self, SslSites, Target};
use super::elf::Elf;
use super::golang::{self, GoSites};
use super::untrusted::{FoundFile, Skip, UntrustedFile};
use super::TlsPrograms;
use crate::eventfd::Doorbell;
use crate::process_events::ExeId;

/// What a file offers to probe.
#[derive(Debug)]
pub(super) enum Plan {
    Ssl(SslSites),
    Go(GoSites),
    /// A Go program whose crypto/tls could not be located: the reason.
    GoFailed(String),
    /// No TLS library: only nginx's upstream writes ([`Found::nginx`]).
    NginxOnly,
}

/// A file to probe, held open (its `target.path` is `/proc/self/fd/N` of `held`): a process
/// that exits meanwhile takes its `/proc/PID/exe` with it, not the file.
#[derive(Debug)]
pub(super) struct Found {
    pub held: UntrustedFile,
    pub target: Target,
    /// The process the probes are for (`--pid`), or -1: every process.
    pub pid: i32,
    /// How the file is named in messages: its path (and the process).
    pub name: String,
    pub plan: Plan,
    /// nginx's `ngx_chain_writer`, for the call chains (src/tls/nginx.rs).
    pub nginx: Option<super::discover::FunctionSite>,
}

enum Job {
    /// The system's libraries and every running process (`--pid`: those).
    Start,
    /// A process to look at after each delay; `exe`: its executable, opened at its exec.
    Look {
        pid: u32,
        after: &'static [Duration],
        exe: Option<HeldExe>,
    },
}

/// Executables held at once, at most.
pub const MAX_HELD_EXES: usize = 64;

/// A new program's executable, found when its exec was reported: a program that has exited
/// by the time the lookout gets to it took its `/proc/PID/exe` with it, but not this file, so
/// a short-lived program is still probed (its next runs then traced from their first call).
/// An `O_PATH` descriptor: finding it opens nothing, so it never waits (on the ring's reader).
struct HeldExe {
    file: FoundFile,
    /// Where it was (`/proc/PID/exe`'s link, or the exec's path), for messages.
    path: PathBuf,
}

/// What an exec record tells of the file a process runs.
pub struct ExecdFile<'a> {
    /// As given to execve().
    pub path: &'a [u8],
    /// The file the kernel ran (None from a record without it).
    pub id: Option<ExeId>,
}

impl HeldExe {
    /// `/proc/PID/exe` opened now. A program gone already (its exec handled late, on a busy
    /// host: a few ms are enough for a short one) is opened by the exec's path, if that is
    /// absolute and still names the very file the kernel ran (not one replaced since, nor one
    /// of another mount namespace). None: neither.
    fn open(pid: u32, execd: &ExecdFile) -> Option<HeldExe> {
        let link = crate::procfs::pid_path(pid, "exe");
        if let Ok(file) = FoundFile::at(&link) {
            let path = std::fs::read_link(&link).unwrap_or(link);
            return Some(HeldExe { file, path });
        }
        let path = PathBuf::from(std::ffi::OsStr::from_bytes(execd.path));
        if !path.is_absolute() {
            return None;
        }
        let file = FoundFile::at(&path).ok()?;
        let id = execd.id?;
        id.is_file(file.dev, file.ino)
            .then_some(HeldExe { file, path })
    }
}

/// A file probed, or not: its links, how it is named, which sites (or why not).
pub struct Probed {
    pub links: Vec<libbpf_rs::Link>,
    pub name: String,
    pub result: Result<&'static str, String>,
}

enum Message {
    Probed(Probed),
    /// The TLS programs are loaded (their descriptors, for ebtop's own-cost figures), or
    /// could not be (why): loaded on this thread, after the session's start.
    Loaded(Result<super::ProgramFds, String>),
    /// What a probe hit costs here, measured first thing on the lookout's thread.
    Calibrated(Option<u64>, Option<u64>),
    /// The look at the system's libraries and the running processes is done.
    StartDone,
}

/// Files skipped as untrusted input could not be read within the bounds (docs/security.md):
/// counted, each named once on stderr (the first [`NAMED_SKIPS`]; then only counted).
#[derive(Default)]
struct Skips {
    named: HashSet<String>,
    count: Arc<AtomicUsize>,
}

/// Skipped files named on stderr at most (then one line says the rest are only counted).
const NAMED_SKIPS: usize = 32;

impl Skips {
    fn note(&mut self, name: &str, why: &Skip) {
        if why.is_stopping() {
            // Not an untrusted file: the read was cut short on the way out (a line on stderr
            // then would land in the output of `ebtop ... | head`).
            return;
        }
        if self.named.len() > NAMED_SKIPS || !self.named.insert(name.to_owned()) {
            if self.named.len() > NAMED_SKIPS {
                self.count.fetch_add(1, Ordering::Relaxed);
            }
            return;
        }
        self.count.fetch_add(1, Ordering::Relaxed);
        if self.named.len() > NAMED_SKIPS {
            crate::diag!("ebtop: TLS: more files skipped: counted only (tls_files_skipped)");
        } else {
            crate::diag!("ebtop: TLS: skipped {name}: {why}");
        }
    }
}

/// What [`Lookout::take_probed`] hands over.
#[derive(Default)]
pub struct Taken {
    pub probed: Vec<Probed>,
    pub calibrated: Option<(Option<u64>, Option<u64>)>,
    pub start_done: bool,
    pub loaded: Option<Result<super::ProgramFds, String>>,
}

pub struct Lookout {
    /// Set to stop: the thread ends its look at the next file, or the next piece of a read.
    stop: Arc<AtomicBool>,
    /// Files skipped as untrusted (see [`Skips`]).
    skipped: Arc<AtomicUsize>,
    /// Executables opened at an exec and not yet looked at (see [`HeldExe`]).
    exes_held: Arc<AtomicUsize>,
    /// Every installed program was looked at (see [`Lookout::installed_done`]).
    installed_done: Arc<AtomicBool>,
    jobs: Option<mpsc::Sender<Job>>,
    probed: mpsc::Receiver<Message>,
    /// Readable while probed files wait to be taken (an eventfd).
    wake: Doorbell,
    thread: Option<std::thread::JoinHandle<()>>,
}

/// The lookout thread's state.
struct Scout {
    stop: Arc<AtomicBool>,
    skips: Skips,
    /// `--pid`: probes in these processes only.
    pids: Option<Vec<u32>>,
    /// Files looked at already (probed or not), by (device, inode); with `--pid`, per process
    /// (a process's probes stay through its exec: the kernel filters by task).
    seen: HashSet<(u32, (u64, u64))>,
    /// Processes to look at, and when.
    pending: Vec<(Instant, u32)>,
    /// Executables held from their exec until their process's first look (`scan_process`).
    held_exes: HashMap<u32, HeldExe>,
    /// How many are held (shared with the Lookout, which holds no more past [`MAX_HELD_EXES`]).
    exes_held: Arc<AtomicUsize>,
    /// Added to every look's delay (a test hook: `diag::debug_lookout_delay`).
    extra_delay: Duration,
    /// The installed programs' look ([`discover::installed_programs`]), after the start's.
    installed: Installed,
    /// Set once every installed program was looked at (shared with the Lookout).
    installed_done: Arc<AtomicBool>,
    public_only: bool,
    programs: TlsPrograms,
    out: mpsc::Sender<Message>,
    /// The Lookout's eventfd (a duplicate).
    wake: Doorbell,
}

impl Lookout {
    /// Starts the thread. `pids`: `--pid`.
    /// The thread loads the TLS programs (`load`), measures what a probe hit costs, then
    /// looks at the system's libraries and the running processes (`Message::StartDone` when
    /// done), then the installed programs; nothing here waits for it.
    pub fn start(pids: Option<Vec<u32>>, load: super::ProgramLoader) -> std::io::Result<Lookout> {
        let wake = Doorbell::new()?;
        let stop = Arc::new(AtomicBool::new(false));
        let thread_stop = Arc::clone(&stop);
        let skips = Skips::default();
        let skipped = Arc::clone(&skips.count);
        let thread_wake = wake.try_clone()?;
        let (jobs, job_rx) = mpsc::channel::<Job>();
        let exes_held = Arc::new(AtomicUsize::new(0));
        let thread_exes_held = Arc::clone(&exes_held);
        let installed_done = Arc::new(AtomicBool::new(false));
        let thread_installed_done = Arc::clone(&installed_done);
        let (out, probed) = mpsc::channel::<Message>();
        // EBTOP_TLS_SITES=public keeps to OpenSSL's public functions (troubleshooting; the
        // tests cover both kinds of site with it).
        let public_only = std::env::var_os("EBTOP_TLS_SITES").is_some_and(|v| v == "public");
        let thread = std::thread::Builder::new()
            .name("ebtop-tls".into())
            .spawn(move || {
                // At the capture's priority (inherited): a new program's first calls wait on
                // it. It wakes only at execs and dlopens.
                // The programs' verification (the longest part of ebtop's start: hundreds of
                // ms) happens here, after the session's start, not before it.
                let programs = match load() {
                    Ok((programs, fds)) => {
                        if out.send(Message::Loaded(Ok(fds))).is_err() {
                            return;
                        }
                        thread_wake.ring();
                        programs
                    }
                    Err(e) => {
                        // Nothing to probe: the look at the start is done, at once.
                        let _ = out.send(Message::Loaded(Err(format!("{e:#}"))));
                        let _ = out.send(Message::StartDone);
                        thread_installed_done.store(true, Ordering::Relaxed);
                        thread_wake.ring();
                        return;
                    }
                };
                // Before any probe is placed: no two attaches at once.
                let (hit_ns, stepped_hit_ns) = super::calibrate_hit_ns(&programs);
                if out
                    .send(Message::Calibrated(hit_ns, stepped_hit_ns))
                    .is_err()
                {
                    return;
                }
                let mut scout = Scout {
                    stop: thread_stop,
                    skips,
                    pids,
                    seen: HashSet::new(),
                    pending: Vec::new(),
                    held_exes: HashMap::new(),
                    exes_held: thread_exes_held,
                    extra_delay: crate::diag::debug_lookout_delay(),
                    installed: Installed::Waiting,
                    installed_done: thread_installed_done,
                    public_only,
                    programs,
                    out,
                    wake: thread_wake,
                };
                scout.run(job_rx);
            })?;
        // The first job: nothing is waiting for it (the session starts meanwhile).
        let _ = jobs.send(Job::Start);
        Ok(Lookout {
            stop,
            skipped,
            exes_held,
            installed_done,
            jobs: Some(jobs),
            probed,
            wake,
            thread: Some(thread),
        })
    }

    /// Looks at a process after each delay (`--pid` leaving it out: not at all). `execd`: the
    /// file it exec'd, opened now for a process that may be gone by then (at most
    /// [`MAX_HELD_EXES`] at a time: a burst of execs while the lookout is busy holds no more
    /// descriptors than that).
    pub fn look_at(&mut self, pid: u32, after: &'static [Duration], execd: Option<ExecdFile>) {
        let exe = match execd {
            Some(e) if self.exes_held.load(Ordering::Relaxed) < MAX_HELD_EXES => {
                HeldExe::open(pid, &e)
            }
            _ => None,
        };
        if exe.is_some() {
            self.exes_held.fetch_add(1, Ordering::Relaxed);
        }
        self.send(Job::Look { pid, after, exe });
    }

    /// Whether every installed program (those of the program directories and `PATH`) was
    /// looked at: after the start, the lookout probes them one at a time between the looks at
    /// new processes, so a program run later is traced from its first call.
    pub fn installed_done(&self) -> bool {
        self.installed_done.load(Ordering::Relaxed)
    }

    /// What was probed since the last call, the probe hit costs once measured, and whether
    /// the look at the start is done now; never waits.
    pub fn take_probed(&mut self) -> Taken {
        self.clear_wake();
        let mut taken = Taken::default();
        loop {
            match self.probed.try_recv() {
                Ok(Message::Probed(p)) => taken.probed.push(p),
                Ok(Message::Calibrated(a, b)) => taken.calibrated = Some((a, b)),
                Ok(Message::StartDone) => taken.start_done = true,
                Ok(Message::Loaded(l)) => taken.loaded = Some(l),
                Err(mpsc::TryRecvError::Empty) => break,
                Err(mpsc::TryRecvError::Disconnected) => {
                    self.check_thread();
                    break;
                }
            }
        }
        taken
    }

    /// Files skipped as untrusted so far.
    pub fn skipped(&self) -> usize {
        self.skipped.load(Ordering::Relaxed)
    }

    /// Stops the thread (it finishes the look it is in) and hands back what it probed since
    /// the last take.
    pub fn stop(&mut self) -> Vec<Probed> {
        self.stop.store(true, Ordering::Relaxed);
        self.jobs = None;
        if let Some(t) = self.thread.take() {
            // A panic was reported by the thread's own hook; nothing to add at the end.
            let _ = t.join();
        }
        let mut all = Vec::new();
        while let Ok(m) = self.probed.try_recv() {
            if let Message::Probed(p) = m {
                all.push(p);
            }
        }
        all
    }

    /// Readable while probed files wait to be taken.
    pub fn wake_fd(&self) -> BorrowedFd<'_> {
        self.wake.as_fd()
    }

    fn send(&mut self, job: Job) -> bool {
        let sent = self.jobs.as_ref().is_some_and(|j| j.send(job).is_ok());
        if !sent {
            self.check_thread();
        }
        sent
    }

    /// The thread is gone: only a panic ends it while the Lookout lives (re-raised here: a
    /// bug, reported as one).
    fn check_thread(&mut self) {
        self.jobs = None;
        if let Some(t) = self.thread.take() {
            if let Err(p) = t.join() {
                std::panic::resume_unwind(p);
            }
        }
    }

    fn clear_wake(&self) {
        let _ = self.wake.clear();
    }
}

impl Drop for Lookout {
    /// The thread uses the capture object's programs: it ends before the object does.
    fn drop(&mut self) {
        drop(self.stop());
    }
}

impl Scout {
    fn run(&mut self, jobs: mpsc::Receiver<Job>) {
        loop {
            if self.stopping() {
                return;
            }
            let now = Instant::now();
            let next = self.pending.iter().map(|(at, _)| *at).min();
            let scanning = matches!(self.installed, Installed::ToList | Installed::Left(_));
            if !scanning && next.is_none_or(|at| at > now) {
                // About to wait: what the looks read (symbol and string tables) goes back.
                crate::allocator::release_freed();
            }
            let job = match next {
                Some(at) if at <= now => None,
                // Installed programs wait: one of them whenever no job waits.
                _ if scanning => match jobs.try_recv() {
                    Ok(j) => Some(j),
                    Err(mpsc::TryRecvError::Empty) => {
                        self.scan_installed();
                        None
                    }
                    Err(mpsc::TryRecvError::Disconnected) => return,
                },
                Some(at) => match jobs.recv_timeout(at - now) {
                    Ok(j) => Some(j),
                    Err(mpsc::RecvTimeoutError::Timeout) => None,
                    Err(mpsc::RecvTimeoutError::Disconnected) => return,
                },
                None => match jobs.recv() {
                    Ok(j) => Some(j),
                    Err(_) => return,
                },
            };
            match job {
                Some(Job::Start) => {
                    self.start();
                    if self.out.send(Message::StartDone).is_err() {
                        return;
                    }
                    self.wake.ring();
                }
                Some(Job::Look { pid, after, exe })
                    if self.pids.as_ref().is_none_or(|p| p.contains(&pid)) =>
                {
                    let now = Instant::now() + self.extra_delay;
                    self.pending.extend(after.iter().map(|d| (now + *d, pid)));
                    // A second exec before the first look: the newer program is held.
                    if let Some(exe) = exe {
                        if self.held_exes.insert(pid, exe).is_some() {
                            self.exes_held.fetch_sub(1, Ordering::Relaxed);
                        }
                    }
                }
                // Not a process of `--pid`.
                Some(Job::Look { exe: Some(_), .. }) => {
                    self.exes_held.fetch_sub(1, Ordering::Relaxed);
                }
                Some(Job::Look { exe: None, .. }) | None => {}
            }
            if !self.look_due() {
                return;
            }
        }
    }

    fn stopping(&self) -> bool {
        self.stop.load(Ordering::Relaxed)
    }

    fn start(&mut self) {
        if self.pids.is_none() {
            for lib in discover::system_libraries() {
                if self.stopping() {
                    return;
                }
                self.consider(lib, None, None);
            }
        }
        let running = self.pids.clone().unwrap_or_else(discover::all_pids);
        for pid in running {
            if self.stopping() {
                return;
            }
            self.scan_process(pid);
        }
        // Then the installed programs, a file at a time between the looks (`scan_installed`);
        // with `--pid`, none: probes are placed per process.
        self.installed = if self.pids.is_none() {
            Installed::ToList
        } else {
            self.installed_done.store(true, Ordering::Relaxed);
            Installed::Done
        };
    }

    /// One step of the look at the installed programs: their list, or one of them (probed if
    /// it holds OpenSSL or Go's crypto/tls; a file that cannot be probed is left for its first
    /// exec to report, not reported for a program that may never run).
    fn scan_installed(&mut self) {
        match &mut self.installed {
            Installed::ToList => {
                self.installed = Installed::Left(discover::installed_programs().into());
            }
            Installed::Left(left) => match left.pop_front() {
                Some(target) => {
                    if self.consider_installed(target) {
                        self.wake.ring();
                    }
                }
                None => {
                    self.installed = Installed::Done;
                    self.installed_done.store(true, Ordering::Relaxed);
                    // The reader learns of it at its next interval; a ring makes it look now.
                    self.wake.ring();
                }
            },
            Installed::Waiting | Installed::Done => {}
        }
    }

    /// [`Scout::consider`] for an installed program, not running: only what could be probed
    /// is reported (a failure is looked at again when a process runs the file).
    fn consider_installed(&mut self, target: Target) -> bool {
        self.look_at(target, None, None, true)
    }

    /// Looks at the processes whose time has come. False: the reader is gone.
    fn look_due(&mut self) -> bool {
        let now = Instant::now();
        let mut due: Vec<u32> = self
            .pending
            .iter()
            .filter(|(at, _)| *at <= now)
            .map(|(_, pid)| *pid)
            .collect();
        if due.is_empty() {
            return true;
        }
        self.pending.retain(|(at, _)| *at > now);
        // A program importing many extension modules dlopens in bursts: its maps once.
        due.sort_unstable();
        due.dedup();
        let mut found = false;
        for pid in due {
            if self.stopping() {
                break;
            }
            found |= self.scan_process(pid);
        }
        if found {
            self.wake.ring();
        }
        true
    }

    /// Whether anything was found to probe.
    fn scan_process(&mut self, pid: u32) -> bool {
        // An executable held at its exec serves this first look only: the process is then
        // looked at through /proc, or it is gone and looked at through the held file.
        let exe = self.held_exes.remove(&pid);
        if exe.is_some() {
            self.exes_held.fetch_sub(1, Ordering::Relaxed);
        }
        let mut found = false;
        let per_process = self.pids.is_some().then_some(pid);
        let mut skipped = Vec::new();
        let candidates = discover::process_candidates(pid, &mut skipped);
        for (name, why) in skipped {
            self.skips.note(&name, &why);
        }
        if candidates.is_empty() {
            // Gone already (or never readable): its executable, if it was held.
            if let Some((target, exe)) = exe.and_then(|e| Some((held_target(&e)?, e))) {
                let name = exe.path.display().to_string();
                return self.consider(target, per_process, Some(name));
            }
        }
        for target in candidates {
            found |= self.consider(target, per_process, None);
        }
        found
    }

    /// Looks at a file once (for all processes, or per process with `--pid`). Whether it
    /// offers anything to probe.
    /// `name`: how to call it in messages, where its path does not say (a held file).
    fn consider(&mut self, target: Target, pid: Option<u32>, name: Option<String>) -> bool {
        self.look_at(target, pid, name, false)
    }

    /// [`Scout::consider`], and with `installed` for a program no process runs yet.
    fn look_at(
        &mut self,
        mut target: Target,
        pid: Option<u32>,
        name: Option<String>,
        installed: bool,
    ) -> bool {
        let key = (pid.unwrap_or(0), target.file_id());
        if !self.seen.insert(key) {
            return false;
        }
        let name = name.unwrap_or_else(|| target.path.display().to_string());
        let name = match pid {
            Some(p) => format!("{name} (pid {p})"),
            None => name,
        };
        // Opened as untrusted: never waits (a lease another process holds, a FIFO), reads
        // bounded parts, follows no link out of a process's root (`untrusted`).
        let opened = target.find().and_then(|f| f.open());
        let file = match opened {
            Ok(f) => f.with_stop(Arc::clone(&self.stop)),
            Err(why) => {
                // Gone (a process's /proc/PID/exe whose process exited): nothing was decided
                // about the file, which the next process running it brings back.
                self.seen.remove(&key);
                if !installed && !why.0.contains("No such file") {
                    self.skips.note(&name, &why);
                }
                return false;
            }
        };
        // Not running, a file can be rewritten in place while it is read: it is read under a
        // read lease, or skipped while someone has it open for writing.
        if installed && matches!(ReadLease::take(file.file()), ReadLease::Writing) {
            self.seen.remove(&key);
            return false;
        }
        match self.plan(&target, pid, name, file) {
            Opened::Nothing => false,
            // An installed program's failures are not reported: the file is looked at
            // again when a process runs it.
            Opened::Found(f) if !(installed && matches!(f.plan, Plan::GoFailed(_))) => {
                let probed = super::attach_found(&self.programs, *f);
                if installed && probed.result.is_err() {
                    self.seen.remove(&key);
                    return false;
                }
                self.out.send(Message::Probed(probed)).is_ok()
            }
            // An installed program's Go failure: decided when a process runs it.
            Opened::Found(_) => {
                self.seen.remove(&key);
                false
            }
        }
    }

    /// What `target` offers to probe, read through `file` (opened as untrusted).
    fn plan(
        &mut self,
        target: &Target,
        pid: Option<u32>,
        name: String,
        file: UntrustedFile,
    ) -> Opened {
        let nginx;
        let plan = match Elf::parse(&file) {
            Ok(None) => return Opened::Nothing,
            Err(why) => {
                self.skips.note(&name, &why);
                return Opened::Nothing;
            }
            Ok(Some(elf)) => {
                // nginx's upstream writes (an executable's own, for the call chains).
                nginx = match (!target.shared && super::discover::nginx_wanted())
                    .then(|| super::nginx::chain_writer_site(&elf))
                {
                    Some(Ok(site)) => site,
                    Some(Err(why)) => {
                        self.skips.note(&name, &why);
                        return Opened::Nothing;
                    }
                    None => None,
                };
                match discover::ssl_sites_of(&elf, !self.public_only) {
                    Ok(Some(sites)) => Plan::Ssl(sites),
                    Err(why) => {
                        self.skips.note(&name, &why);
                        return Opened::Nothing;
                    }
                    Ok(None) if target.shared => return Opened::Nothing,
                    Ok(None) => match golang::sites_of_elf(&elf) {
                        Ok(None) if nginx.is_some() => Plan::NginxOnly,
                        Ok(None) => return Opened::Nothing,
                        Ok(Some(sites)) => Plan::Go(sites),
                        Err(golang::GoError::Skipped(why)) => {
                            self.skips.note(&name, &Skip(why));
                            return Opened::Nothing;
                        }
                        Err(e) => Plan::GoFailed(e.to_string()),
                    },
                }
            }
        };
        let opened = Target {
            path: file.fd_path(),
            dev: target.dev,
            ino: target.ino,
            shared: target.shared,
            found: None,
        };
        Opened::Found(Box::new(Found {
            held: file,
            target: opened,
            pid: pid.map_or(-1, |p| p as i32),
            name,
            plan,
            nginx,
        }))
    }
}

/// A held executable as a file to consider (opened again through this process's descriptor).
fn held_target(exe: &HeldExe) -> Option<Target> {
    let file = exe.file.try_clone().ok()?;
    Some(Target {
        path: exe.path.clone(),
        dev: file.dev,
        ino: file.ino,
        shared: false,
        found: Some(file),
    })
}

/// A read lease on a file (`fcntl(F_SETLEASE, F_RDLCK)`): while it is held, another process's
/// open for writing or truncation of the file waits (up to the kernel's lease-break time, 45 s
/// by default) until it is let go, so a file cannot shrink under the lookout's mapping of it
/// (which would raise SIGBUS). Let go when dropped (the descriptor closed).
enum ReadLease {
    /// On the descriptor: let go when it is closed.
    Held,
    /// Someone has the file open for writing now.
    Writing,
    /// The file system or the file gives no lease (NFS, no `CAP_LEASE`…): read as it is.
    Unavailable,
}

/// fcntl's F_SETSIG (10 on every Linux architecture; not in the libc crate).
const F_SETSIG: libc::c_int = 10;

impl ReadLease {
    /// On `file` (opened for reading: the lease goes with the descriptor, let go when it is
    /// closed).
    fn take(file: &File) -> ReadLease {
        let fd = file.as_raw_fd();
        // A writer's open makes the kernel signal the lease holder (SIGIO by default, which
        // would end ebtop): SIGURG instead, which is ignored unless handled (ebtop does not).
        // SAFETY: fcntl on a descriptor this function owns, with integer arguments.
        if unsafe { libc::fcntl(fd, F_SETSIG, libc::SIGURG) } != 0 {
            return ReadLease::Unavailable;
        }
        // SAFETY: as above.
        if unsafe { libc::fcntl(fd, libc::F_SETLEASE, libc::F_RDLCK) } == 0 {
            return ReadLease::Held;
        }
        match std::io::Error::last_os_error().raw_os_error() {
            Some(libc::EAGAIN) => ReadLease::Writing,
            _ => ReadLease::Unavailable,
        }
    }
}

/// Where the look at the installed programs is.
enum Installed {
    /// Until the start's look is done.
    Waiting,
    ToList,
    Left(VecDeque<Target>),
    Done,
}

enum Opened {
    /// Nothing to probe in it.
    Nothing,
    Found(Box<Found>),
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::MetadataExt;

    #[test]
    fn a_read_cut_short_by_the_stop_is_no_skipped_file() {
        let mut skips = Skips::default();
        skips.note("/lib/libssl.so.3", &Skip::stopping());
        assert_eq!(skips.count.load(Ordering::Relaxed), 0);
        assert!(skips.named.is_empty());
        skips.note("/lib/libssl.so.3", &Skip::new("it shrank while read"));
        assert_eq!(skips.count.load(Ordering::Relaxed), 1);
    }

    /// No process has this pid (above the kernel's PID_MAX_LIMIT): `/proc/PID/exe` fails.
    const GONE: u32 = 1 << 23;

    fn id_of(path: &std::path::Path) -> ExeId {
        let m = std::fs::metadata(path).unwrap();
        ExeId {
            ino: m.ino(),
            dev: (libc::major(m.dev()) << 20) | libc::minor(m.dev()),
        }
    }

    /// A library whose symbol table is over the cap (issue 42 item 7): refused before it is
    /// read, and counted as a skipped file — what the live loop turns into a `tls_files`
    /// warning line and the TUI's "tls_files cap hit" mark (`driver::live`,
    /// `tls_skips_warning`; tests/hostile_files.rs checks that line).
    #[test]
    fn a_library_over_the_symbol_cap_is_a_skipped_file() {
        let dir = tempfile::tempdir().unwrap();
        let lib = dir.path().join("libssl.so.3");
        let mut data = crate::tls::elf::minimal();
        // Section 2 (.dynsym) claims 2^40 bytes of symbols (section header: size at 32).
        let shoff = u64::from_le_bytes(data[40..48].try_into().unwrap()) as usize;
        let at = shoff + 2 * 64 + 32;
        data[at..at + 8].copy_from_slice(&(1u64 << 40).to_le_bytes());
        std::fs::write(&lib, &data).unwrap();
        let m = std::fs::metadata(&lib).unwrap();
        let (out, _probed) = mpsc::channel();
        let wake = Doorbell::new().unwrap();
        let mut scout = Scout {
            stop: Arc::new(AtomicBool::new(false)),
            skips: Skips::default(),
            pids: None,
            seen: HashSet::new(),
            pending: Vec::new(),
            held_exes: HashMap::new(),
            exes_held: Arc::new(AtomicUsize::new(0)),
            extra_delay: Duration::ZERO,
            installed: Installed::Done,
            installed_done: Arc::new(AtomicBool::new(true)),
            public_only: false,
            programs: TlsPrograms(Vec::new()),
            out,
            wake,
        };
        let target = Target {
            path: lib.clone(),
            dev: m.dev(),
            ino: m.ino(),
            shared: true,
            found: None,
        };
        assert!(!scout.consider(target, None, None), "nothing probed");
        assert_eq!(scout.skips.count.load(Ordering::Relaxed), 1);
        assert!(scout.skips.named.contains(&lib.display().to_string()));
    }

    #[test]
    fn a_gone_program_is_held_by_its_path_only_where_that_names_the_file_it_ran() {
        let dir = tempfile::tempdir().unwrap();
        let ran = dir.path().join("ran");
        std::fs::write(&ran, b"\x7fELF").unwrap();
        let other = dir.path().join("other");
        std::fs::write(&other, b"\x7fELF").unwrap();
        let path = ran.as_os_str().as_bytes();
        let held = |path: &[u8], id: Option<ExeId>| HeldExe::open(GONE, &ExecdFile { path, id });

        let exe = held(path, Some(id_of(&ran))).expect("the same file");
        assert_eq!(exe.path, ran);
        assert_eq!(exe.file.ino, id_of(&ran).ino);
        assert!(held(path, Some(id_of(&other))).is_none(), "another file");
        assert!(held(path, None).is_none(), "nothing to check it by");
        assert!(held(b"ran", Some(id_of(&ran))).is_none(), "a relative path");
        // Replaced since the exec: the path names a new file.
        let ran_id = id_of(&ran);
        std::fs::rename(&other, &ran).unwrap();
        assert!(held(path, Some(ran_id)).is_none(), "a file replaced");
    }

    #[test]
    fn an_installed_file_open_for_writing_is_not_read_and_one_leased_cannot_be_rewritten() {
        use std::io::Write;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("tool");
        std::fs::write(&path, b"\x7fELF and the rest").unwrap();
        let writer = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
        let reader = || File::open(&path).unwrap();
        assert!(matches!(ReadLease::take(&reader()), ReadLease::Writing));
        drop(writer);
        let lease = reader();
        assert!(
            matches!(ReadLease::take(&lease), ReadLease::Held),
            "a lease on a file nobody writes"
        );
        // Another process rewrites the file in place (`: > FILE`, an open with O_TRUNC): it
        // waits for the lease to be let go (however long it sleeps here, the file is whole).
        let len = std::fs::metadata(&path).unwrap().len();
        let mut child = std::process::Command::new("sh")
            .arg("-c")
            .arg(format!(": > '{}'", path.display()))
            .spawn()
            .expect("sh runs");
        std::thread::sleep(Duration::from_millis(300));
        assert_eq!(
            std::fs::metadata(&path).unwrap().len(),
            len,
            "not truncated while leased"
        );
        drop(lease);
        assert!(child.wait().unwrap().success());
        assert_eq!(std::fs::metadata(&path).unwrap().len(), 0);
        let mut w = std::fs::OpenOptions::new()
            .append(true)
            .open(&path)
            .unwrap();
        w.write_all(b"x").unwrap();
    }

    #[test]
    fn a_running_program_is_held_by_its_proc_link() {
        let me = std::process::id();
        let exe = HeldExe::open(
            me,
            &ExecdFile {
                path: b"",
                id: None,
            },
        )
        .expect("this test");
        assert_eq!(exe.path, std::fs::read_link("/proc/self/exe").unwrap());
    }
}
