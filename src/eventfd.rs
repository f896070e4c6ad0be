//! A Linux eventfd used as a doorbell between threads: one side rings, the other waits for it
//! in an epoll set and clears it.

use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd};

#[derive(Debug)]
pub struct Doorbell(OwnedFd);

impl Doorbell {
    /// A non-blocking eventfd.
    pub fn new() -> io::Result<Doorbell> {
        // SAFETY: eventfd takes no pointer; the result is checked before use.
        let fd = unsafe { libc::eventfd(0, libc::EFD_NONBLOCK | libc::EFD_CLOEXEC) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: a descriptor eventfd just returned, owned by nobody else.
        Ok(Doorbell(unsafe { OwnedFd::from_raw_fd(fd) }))
    }

    /// Another handle on the same eventfd (for the other thread).
    pub fn try_clone(&self) -> io::Result<Doorbell> {
        Ok(Doorbell(self.0.try_clone()?))
    }

    /// Makes it readable (waking whoever waits on it).
    pub fn ring(&self) {
        let one = 1u64;
        // SAFETY: writes 8 bytes from a local u64 to an eventfd this handle owns (a counter:
        // it cannot overflow at these rates; EAGAIN would only mean it is readable already).
        unsafe {
            libc::write(
                self.0.as_raw_fd(),
                (&one as *const u64).cast(),
                std::mem::size_of::<u64>(),
            );
        }
    }

    /// Makes it unreadable again; whether it had been rung (EAGAIN, nothing rung, is expected:
    /// false).
    pub fn clear(&self) -> bool {
        let mut n = 0u64;
        // SAFETY: reads 8 bytes into a local u64 from an eventfd this handle owns.
        let got = unsafe {
            libc::read(
                self.0.as_raw_fd(),
                (&mut n as *mut u64).cast(),
                std::mem::size_of::<u64>(),
            )
        };
        got == 8 && n > 0
    }
}

impl AsFd for Doorbell {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.0.as_fd()
    }
}

/// A new epoll instance.
pub fn new_epoll() -> io::Result<OwnedFd> {
    // SAFETY: epoll_create1 takes no pointer; the result is checked before use.
    let fd = unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: a descriptor epoll_create1 just returned, owned by nobody else.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Adds `fd` to the epoll set `epfd` for reading (`tag`: the event's data).
pub fn epoll_add(epfd: i32, fd: impl AsRawFd, tag: u64) -> io::Result<()> {
    epoll_add_events(epfd, fd, tag, libc::EPOLLIN as u32)
}

/// As [`epoll_add`], edge-triggered: `fd` wakes the waiter when it is signalled, not for as
/// long as it has data (a ring whose writers ask for a wakeup only now and then).
pub fn epoll_add_edge(epfd: i32, fd: impl AsRawFd, tag: u64) -> io::Result<()> {
    epoll_add_events(epfd, fd, tag, (libc::EPOLLIN | libc::EPOLLET) as u32)
}

fn epoll_add_events(epfd: i32, fd: impl AsRawFd, tag: u64, events: u32) -> io::Result<()> {
    let mut ev = libc::epoll_event { events, u64: tag };
    // SAFETY: epfd and fd are open descriptors (the caller's borrow); the kernel copies the
    // event.
    if unsafe { libc::epoll_ctl(epfd, libc::EPOLL_CTL_ADD, fd.as_raw_fd(), &mut ev) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Waits on the epoll set `epfd` for up to `timeout_ms` (at least 1 ms unless 0); the error
/// of an interrupted wait is EINTR, for the caller to ignore.
pub fn epoll_wait(epfd: i32, timeout_ms: i32) -> io::Result<bool> {
    let mut ev = libc::epoll_event { events: 0, u64: 0 };
    // SAFETY: epoll_wait on an open epoll descriptor with one valid output slot.
    let n = unsafe { libc::epoll_wait(epfd, &mut ev, 1, timeout_ms) };
    if n < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(n > 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_rung_doorbell_wakes_an_epoll_wait_until_cleared() {
        let bell = Doorbell::new().unwrap();
        let ep = new_epoll().unwrap();
        epoll_add(ep.as_raw_fd(), bell.as_fd(), 7).unwrap();
        assert!(!epoll_wait(ep.as_raw_fd(), 0).unwrap());
        bell.try_clone().unwrap().ring();
        assert!(epoll_wait(ep.as_raw_fd(), 0).unwrap());
        let _ = bell.clear();
        assert!(!epoll_wait(ep.as_raw_fd(), 0).unwrap());
    }
}
