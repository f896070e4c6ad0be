//! Files another user controls — the libraries and programs the TLS probes are looked for in:
//! anything a process maps, anything under `/proc/PID/root`, the installed programs — opened
//! and read as untrusted input (docs/security.md, "Files on the host"):
//!
//! - Found first as an `O_PATH` descriptor, which opens nothing: no lease is broken, no FIFO or
//!   device is opened, no read permission is used. Only a regular file is then opened for
//!   reading, through that descriptor, with `O_NONBLOCK`: a file another process holds a write
//!   lease on fails at once (`EWOULDBLOCK`) instead of waiting the kernel's lease-break time
//!   (45 s), and is skipped.
//! - A path a process names (its memory map) is resolved inside that process's root
//!   (`openat2` with `RESOLVE_IN_ROOT`, never a magic link, never a symbolic link: the kernel
//!   writes the path of the very file mapped, so a link on it was planted since), so a link
//!   to `/etc/shadow` in a container is never followed to the host's.
//! - Never mapped: a file truncated under a mapping turns the next read of it into SIGBUS.
//!   Reads are `pread`s of what is needed into owned buffers, each bounded
//!   ([`MAX_READ_BYTES`]); a file that shrinks while read is a read error, skipped.

use std::ffi::CString;
use std::fs::File;
use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{FileExt, MetadataExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

/// Files larger than this are not read (the largest program seen here is ~200 MB).
pub const MAX_FILE_BYTES: u64 = 4 << 30;
/// The most one read takes into memory (a section: a symbol or string table, Go's function
/// table). A file that needs more is skipped.
pub const MAX_READ_BYTES: u64 = 128 << 20;
/// Reads are made in pieces of this size, between which a stop is noticed.
const READ_CHUNK: usize = 4 << 20;

/// Why a file was not read (it is skipped, counted and named once on stderr).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Skip(pub String);

/// Why a read was abandoned when ebtop stops: no fault of the file's.
const STOPPING: &str = "ebtop is stopping";

impl Skip {
    pub fn new(why: impl Into<String>) -> Skip {
        Skip(why.into())
    }

    /// A read given up because ebtop is stopping.
    pub fn stopping() -> Skip {
        Skip::new(STOPPING)
    }

    /// The file was not skipped for what it is, but because ebtop is stopping.
    pub fn is_stopping(&self) -> bool {
        self.0 == STOPPING
    }
}

impl std::fmt::Display for Skip {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// A file found (an `O_PATH` descriptor: nothing is opened yet) with its identity.
#[derive(Debug)]
pub struct FoundFile {
    pub fd: OwnedFd,
    pub dev: u64,
    pub ino: u64,
}

fn fstat(fd: BorrowedFd) -> io::Result<libc::stat> {
    // SAFETY: a zeroed stat is a valid output buffer; the descriptor is open.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: fstat writes into `st`, which outlives the call.
    if unsafe { libc::fstat(fd.as_raw_fd(), &mut st) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(st)
}

fn cstring(path: &Path) -> Result<CString, Skip> {
    CString::new(path.as_os_str().as_bytes()).map_err(|_| Skip::new("a NUL in its path"))
}

/// What an open's error means for the user.
fn open_error(e: io::Error) -> Skip {
    match e.raw_os_error() {
        Some(libc::ELOOP) => Skip::new("a symbolic link on its path (not followed)"),
        Some(libc::EXDEV) => Skip::new("its path leaves the process's root (not followed)"),
        Some(libc::EWOULDBLOCK) => {
            Skip::new("another process holds a lease on it (not waited for)")
        }
        Some(libc::ENOSYS) => Skip::new("the kernel has no openat2 (container paths not read)"),
        _ => Skip::new(e.to_string()),
    }
}

/// openat2's `struct open_how` (linux/openat2.h; the libc crate's cannot be built outside it).
#[repr(C)]
struct OpenHow {
    flags: u64,
    mode: u64,
    resolve: u64,
}

impl FoundFile {
    fn of(fd: OwnedFd) -> Result<FoundFile, Skip> {
        let st = fstat(fd.as_fd()).map_err(|e| Skip::new(e.to_string()))?;
        if st.st_mode & libc::S_IFMT != libc::S_IFREG {
            return Err(Skip::new("not a regular file"));
        }
        Ok(FoundFile {
            fd,
            dev: st.st_dev,
            ino: st.st_ino,
        })
    }

    /// A host path (the library and program directories, `/proc/PID/exe`): its links are
    /// followed (those directories are root's; `/proc/PID/exe` names the very file run).
    pub fn at(path: &Path) -> Result<FoundFile, Skip> {
        let c = cstring(path)?;
        // SAFETY: a path string that outlives the call; O_PATH opens nothing.
        let fd = unsafe { libc::open(c.as_ptr(), libc::O_PATH | libc::O_CLOEXEC) };
        if fd < 0 {
            return Err(open_error(io::Error::last_os_error()));
        }
        // SAFETY: a descriptor just opened, owned by nobody else.
        FoundFile::of(unsafe { OwnedFd::from_raw_fd(fd) })
    }

    /// `path` (absolute, as a process's memory map names it) inside the root `root` (an
    /// `O_PATH` descriptor of `/proc/PID/root`): resolved by the kernel within that root,
    /// following no link of any kind.
    pub fn in_root(root: BorrowedFd, path: &Path) -> Result<FoundFile, Skip> {
        let rel = path.strip_prefix("/").unwrap_or(path);
        let c = cstring(rel)?;
        let how = OpenHow {
            flags: (libc::O_PATH | libc::O_CLOEXEC) as u64,
            mode: 0,
            resolve: libc::RESOLVE_IN_ROOT
                | libc::RESOLVE_NO_MAGICLINKS
                | libc::RESOLVE_NO_SYMLINKS,
        };
        // SAFETY: openat2 with a valid directory descriptor, a path string and an open_how
        // that outlive the call, and the struct's size.
        let fd = unsafe {
            libc::syscall(
                libc::SYS_openat2,
                root.as_raw_fd(),
                c.as_ptr(),
                &how as *const OpenHow,
                std::mem::size_of::<OpenHow>(),
            )
        };
        if fd < 0 {
            return Err(open_error(io::Error::last_os_error()));
        }
        // SAFETY: a descriptor just opened, owned by nobody else.
        FoundFile::of(unsafe { OwnedFd::from_raw_fd(fd as i32) })
    }

    /// A found file again (another descriptor of the same file).
    pub fn try_clone(&self) -> Result<FoundFile, Skip> {
        Ok(FoundFile {
            fd: self.fd.try_clone().map_err(|e| Skip::new(e.to_string()))?,
            dev: self.dev,
            ino: self.ino,
        })
    }

    /// Opened for reading: read-only, non-blocking (a lease another process holds on it is
    /// an error at once, never a wait), never a controlling terminal; the same file as found.
    pub fn open(&self) -> Result<UntrustedFile, Skip> {
        let path = crate::procfs::fd_path(self.fd.as_raw_fd());
        let c = cstring(&path)?;
        // SAFETY: a path string that outlives the call.
        let fd = unsafe {
            libc::open(
                c.as_ptr(),
                libc::O_RDONLY | libc::O_NONBLOCK | libc::O_NOCTTY | libc::O_CLOEXEC,
            )
        };
        if fd < 0 {
            return Err(open_error(io::Error::last_os_error()));
        }
        // SAFETY: a descriptor just opened, owned by nobody else.
        let file = File::from(unsafe { OwnedFd::from_raw_fd(fd) });
        let md = file.metadata().map_err(|e| Skip::new(e.to_string()))?;
        if !md.is_file() || md.dev() != self.dev || md.ino() != self.ino {
            return Err(Skip::new("changed while opened"));
        }
        if md.len() > MAX_FILE_BYTES {
            return Err(Skip::new(format!(
                "larger than {} GiB ({} bytes)",
                MAX_FILE_BYTES >> 30,
                md.len()
            )));
        }
        Ok(UntrustedFile {
            file,
            len: md.len(),
            stop: None,
        })
    }
}

/// `/proc/PID/root` as an `O_PATH` descriptor (the process's root directory, in a container
/// the container's).
pub fn process_root(pid: u32) -> Result<OwnedFd, Skip> {
    let c = cstring(&crate::procfs::pid_path(pid, "root"))?;
    // SAFETY: a path string that outlives the call; O_PATH opens nothing.
    let fd = unsafe {
        libc::open(
            c.as_ptr(),
            libc::O_PATH | libc::O_DIRECTORY | libc::O_CLOEXEC,
        )
    };
    if fd < 0 {
        return Err(open_error(io::Error::last_os_error()));
    }
    // SAFETY: a descriptor just opened, owned by nobody else.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Reads at offsets of something of known length: an untrusted file, or bytes (the fuzz
/// targets and tests).
pub trait ReadAt {
    /// Its length when opened.
    fn len(&self) -> u64;
    /// Exactly `len` bytes at `offset` into an owned buffer (at most [`MAX_READ_BYTES`]); an
    /// error where they are not all there (a file that shrank).
    fn read_at(&self, offset: u64, len: u64) -> Result<Vec<u8>, Skip>;
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

fn check_range(total: u64, offset: u64, len: u64) -> Result<usize, Skip> {
    if len > MAX_READ_BYTES {
        return Err(Skip::new(format!(
            "a part of {len} bytes to read (at most {MAX_READ_BYTES})"
        )));
    }
    match offset.checked_add(len) {
        Some(end) if end <= total => Ok(len as usize),
        _ => Err(Skip::new("a part that lies outside the file")),
    }
}

impl ReadAt for [u8] {
    fn len(&self) -> u64 {
        <[u8]>::len(self) as u64
    }

    fn read_at(&self, offset: u64, len: u64) -> Result<Vec<u8>, Skip> {
        let n = check_range(ReadAt::len(self), offset, len)?;
        Ok(self[offset as usize..offset as usize + n].to_vec())
    }
}

/// A regular file opened by [`FoundFile::open`]: read with bounded `pread`s.
#[derive(Debug)]
pub struct UntrustedFile {
    file: File,
    len: u64,
    /// Set when ebtop stops: a long read ends at its next piece.
    stop: Option<Arc<AtomicBool>>,
}

impl UntrustedFile {
    /// Reads end early (an error) once `stop` is set.
    pub fn with_stop(mut self, stop: Arc<AtomicBool>) -> UntrustedFile {
        self.stop = Some(stop);
        self
    }

    pub fn file(&self) -> &File {
        &self.file
    }

    /// A path that names this very file (`/proc/self/fd/N`), for the probes' attach.
    pub fn fd_path(&self) -> PathBuf {
        crate::procfs::fd_path(self.file.as_raw_fd())
    }

    /// Whether it begins with the ELF magic.
    pub fn is_elf(&self) -> bool {
        self.read_at(0, 4).is_ok_and(|m| m == b"\x7fELF")
    }
}

impl ReadAt for UntrustedFile {
    fn len(&self) -> u64 {
        self.len
    }

    fn read_at(&self, offset: u64, len: u64) -> Result<Vec<u8>, Skip> {
        let n = check_range(self.len, offset, len)?;
        let mut buf = vec![0u8; n];
        let mut done = 0;
        while done < n {
            if self
                .stop
                .as_ref()
                .is_some_and(|s| s.load(Ordering::Relaxed))
            {
                return Err(Skip::stopping());
            }
            let piece = (n - done).min(READ_CHUNK);
            self.file
                .read_exact_at(&mut buf[done..done + piece], offset + done as u64)
                .map_err(|e| match e.kind() {
                    io::ErrorKind::UnexpectedEof => Skip::new("it shrank while read"),
                    _ => Skip::new(format!("reading it failed: {e}")),
                })?;
            done += piece;
        }
        Ok(buf)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_regular_files_are_found_and_a_fifo_never_blocks() {
        let dir = tempfile::tempdir().unwrap();
        let fifo = dir.path().join("libssl.so.3");
        let c = CString::new(fifo.as_os_str().as_bytes()).unwrap();
        // SAFETY: a path string that outlives the call.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o644) }, 0);
        assert_eq!(
            FoundFile::at(&fifo).err(),
            Some(Skip::new("not a regular file"))
        );
        assert!(FoundFile::at(dir.path()).is_err(), "a directory");
        assert!(FoundFile::at(Path::new("/dev/null")).is_err(), "a device");
        let file = dir.path().join("f");
        std::fs::write(&file, b"\x7fELF0123").unwrap();
        let f = FoundFile::at(&file).unwrap().open().unwrap();
        assert!(f.is_elf());
        assert_eq!(f.read_at(4, 4).unwrap(), b"0123");
        assert!(f.read_at(4, 5).is_err(), "past the end");
        assert!(f.read_at(u64::MAX, 2).is_err(), "an offset that overflows");
    }

    #[test]
    fn a_file_that_shrinks_while_read_is_an_error_not_a_crash() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        std::fs::write(&path, vec![7u8; 8192]).unwrap();
        let f = FoundFile::at(&path).unwrap().open().unwrap();
        std::fs::OpenOptions::new()
            .write(true)
            .open(&path)
            .unwrap()
            .set_len(100)
            .unwrap();
        assert_eq!(
            f.read_at(0, 8192).err(),
            Some(Skip::new("it shrank while read"))
        );
    }

    #[test]
    fn a_path_in_a_root_follows_no_link_out_of_it() {
        let root = tempfile::tempdir().unwrap();
        let lib = root.path().join("lib");
        std::fs::create_dir(&lib).unwrap();
        std::fs::write(lib.join("real.so"), b"\x7fELF").unwrap();
        let outside = tempfile::NamedTempFile::new().unwrap();
        std::os::unix::fs::symlink(outside.path(), lib.join("libssl.so.3")).unwrap();
        std::os::unix::fs::symlink("real.so", lib.join("libssl.so.1.1")).unwrap();
        let c = CString::new(root.path().as_os_str().as_bytes()).unwrap();
        // SAFETY: a path string that outlives the call.
        let fd = unsafe { libc::open(c.as_ptr(), libc::O_PATH | libc::O_DIRECTORY) };
        assert!(fd >= 0);
        // SAFETY: just opened, ours.
        let rootfd = unsafe { OwnedFd::from_raw_fd(fd) };
        assert!(FoundFile::in_root(rootfd.as_fd(), Path::new("/lib/real.so")).is_ok());
        for linked in ["/lib/libssl.so.3", "/lib/libssl.so.1.1"] {
            assert_eq!(
                FoundFile::in_root(rootfd.as_fd(), Path::new(linked)).err(),
                Some(Skip::new("a symbolic link on its path (not followed)")),
                "{linked}"
            );
        }
        // `..` stays inside the root: /../../etc/passwd is the root's /etc/passwd (none).
        assert!(FoundFile::in_root(rootfd.as_fd(), Path::new("/../../etc/passwd")).is_err());
    }
}
