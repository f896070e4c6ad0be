//! Writing to a terminal without ever hanging on it.
//!
//! A terminal can stop taking output without going away (an SSH link stalled by a sleeping
//! laptop, a paused tmux pane, Ctrl-S): a blocking write then never returns and a SIGTERM is
//! never acted on. ebtop writes to a terminal through its own non-blocking open of it (the flag
//! belongs to that open alone, so the shell's descriptor keeps its mode) and waits for room in
//! slices, for as long as the caller allows.

use std::io;
use std::os::fd::{AsRawFd, OwnedFd};
use std::time::{Duration, Instant};

/// How long a write may make no progress once ebtop is stopping (or for a last message).
pub const STALL_GRACE: Duration = Duration::from_millis(500);
/// One wait for room in the terminal.
const POLL_SLICE_MS: i32 = 50;

/// A non-blocking open of the terminal behind descriptor `fd`; None if `fd` is no terminal or
/// it cannot be opened.
pub fn reopen_nonblocking(fd: i32) -> Option<OwnedFd> {
    // SAFETY: isatty only inspects the descriptor number.
    if unsafe { libc::isatty(fd) } != 1 {
        return None;
    }
    let path = crate::procfs::fd_target(fd).ok()?;
    use std::os::unix::fs::OpenOptionsExt;
    let f = std::fs::OpenOptions::new()
        .write(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_NOCTTY)
        .open(path)
        .ok()?;
    // SAFETY: isatty only inspects the descriptor.
    (unsafe { libc::isatty(f.as_raw_fd()) } == 1).then(|| f.into())
}

/// Writes some of `buf` to a non-blocking `fd`, waiting for room while
/// `keep_waiting(stalled_for)` says so; past that, a `TimedOut` error.
pub fn write_some(
    fd: &OwnedFd,
    buf: &[u8],
    mut keep_waiting: impl FnMut(Duration) -> bool,
) -> io::Result<usize> {
    let mut stalled_since: Option<Instant> = None;
    loop {
        // SAFETY: writes at most buf.len() bytes from a live buffer to an open descriptor.
        let n = unsafe { libc::write(fd.as_raw_fd(), buf.as_ptr().cast(), buf.len()) };
        if n >= 0 {
            return Ok(n as usize);
        }
        let e = io::Error::last_os_error();
        match e.kind() {
            io::ErrorKind::Interrupted => continue,
            io::ErrorKind::WouldBlock => {
                let since = *stalled_since.get_or_insert_with(Instant::now);
                if !keep_waiting(since.elapsed()) {
                    return Err(io::Error::new(
                        io::ErrorKind::TimedOut,
                        "the terminal takes no output",
                    ));
                }
                let mut p = libc::pollfd {
                    fd: fd.as_raw_fd(),
                    events: libc::POLLOUT,
                    revents: 0,
                };
                // SAFETY: one valid pollfd.
                unsafe { libc::poll(&mut p, 1, POLL_SLICE_MS) };
            }
            _ => return Err(e),
        }
    }
}

/// Writes all of `buf`, giving up once the terminal has taken nothing for [`STALL_GRACE`].
pub fn write_all_bounded(fd: &OwnedFd, mut buf: &[u8]) -> io::Result<()> {
    while !buf.is_empty() {
        match write_some(fd, buf, |stalled| stalled < STALL_GRACE)? {
            0 => return Err(io::ErrorKind::WriteZero.into()),
            n => buf = &buf[n..],
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};

    #[test]
    fn a_full_terminal_blocks_until_told_then_gives_up() {
        // A pipe nobody reads stands in for a stalled terminal.
        let (r, w) = std::io::pipe().unwrap();
        let w: OwnedFd = w.into();
        // SAFETY: F_SETFL on a descriptor owned here.
        unsafe {
            libc::fcntl(w.as_raw_fd(), libc::F_SETFL, libc::O_NONBLOCK);
        }
        let chunk = vec![b'x'; 1 << 16];
        // Fill it.
        while write_some(&w, &chunk, |_| false).is_ok() {}
        let stop = AtomicBool::new(false);
        let waits = AtomicU32::new(0);
        std::thread::scope(|s| {
            let t = s.spawn(|| {
                write_some(&w, &chunk, |stalled| {
                    waits.fetch_add(1, Ordering::Relaxed);
                    !stop.load(Ordering::Relaxed) || stalled < STALL_GRACE
                })
            });
            // Still waiting after several slices: nothing gave up early.
            while waits.load(Ordering::Relaxed) < 4 {
                std::thread::sleep(Duration::from_millis(10));
            }
            assert!(!t.is_finished());
            stop.store(true, Ordering::Relaxed);
            let e = t.join().unwrap().unwrap_err();
            assert_eq!(e.kind(), io::ErrorKind::TimedOut);
        });
        assert_eq!(
            write_all_bounded(&w, b"more").unwrap_err().kind(),
            io::ErrorKind::TimedOut
        );
        // Room again: everything goes through.
        drop(r);
        assert!(write_all_bounded(&w, b"x").is_err(), "no reader: EPIPE");
    }
}
