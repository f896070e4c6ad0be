//! Keys and resizes from the controlling terminal, and noticing when that terminal is gone.
//!
//! crossterm 0.29's event reader retries forever once the tty reads EOF or fails with EIO (a
//! closed SSH session, `tmux kill-session`): its thread spins at 100% CPU and never returns,
//! so a UI that waits for it hangs (upstream crossterm issue #793). ebtop therefore reads the
//! tty itself: one `poll(2)` on the tty, a SIGWINCH pipe and a wake pipe, with no timeout (an
//! idle UI costs nothing), `read(2)` of what is there, and terminput to decode the bytes. EOF,
//! EIO or POLLHUP/POLLERR/POLLNVAL on the tty is reported once as [`Input::TerminalLost`] and
//! the thread ends.

use std::io::{self, Read, Write};
use std::os::fd::{AsRawFd, BorrowedFd, OwnedFd, RawFd};
use std::os::unix::net::UnixStream;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{SyncSender, TrySendError};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use crossterm::event::{KeyCode, KeyEvent, KeyEventKind, KeyEventState, KeyModifiers};

/// What the input thread hands the UI.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Input {
    Key(KeyEvent),
    Resize(u16, u16),
    /// The terminal went away (EOF, EIO or hangup on the tty): the UI must end.
    TerminalLost(String),
    /// The input thread failed (a bug): the UI ends with an error.
    Failed(String),
}

/// The longest escape sequence kept while waiting for its end; anything longer is noise.
const PENDING_MAX: usize = 64;

/// Turns the bytes a terminal sends into key events. A sequence cut between two reads is kept
/// until the next read completes it.
#[derive(Debug, Default)]
pub struct KeyDecoder {
    pending: Vec<u8>,
}

impl KeyDecoder {
    /// Decodes one read's bytes; keys (presses only) go to `out`.
    pub fn feed(&mut self, bytes: &[u8], out: &mut Vec<KeyEvent>) {
        for (i, &b) in bytes.iter().enumerate() {
            self.pending.push(b);
            // A lone ESC is the Esc key only if nothing follows it in the same read; otherwise
            // it starts a sequence (an arrow key, Alt+key).
            if self.pending == [0x1b] && i + 1 < bytes.len() {
                continue;
            }
            match terminput::Event::parse_from(&self.pending) {
                Ok(Some(terminput::Event::Key(k))) => {
                    self.pending.clear();
                    if let Some(k) = to_crossterm(k) {
                        out.push(k);
                    }
                }
                Ok(Some(_)) | Err(_) => self.pending.clear(),
                Ok(None) if self.pending.len() >= PENDING_MAX => self.pending.clear(),
                Ok(None) => {}
            }
        }
    }
}

/// The UI's key type (crossterm's) from terminput's; None for releases and keys no view uses.
fn to_crossterm(k: terminput::KeyEvent) -> Option<KeyEvent> {
    use terminput::KeyCode as T;
    if k.kind == terminput::KeyEventKind::Release {
        return None;
    }
    let shift = k.modifiers.contains(terminput::KeyModifiers::SHIFT);
    let code = match k.code {
        T::Tab if shift => KeyCode::BackTab,
        T::Backspace => KeyCode::Backspace,
        T::Enter => KeyCode::Enter,
        T::Left => KeyCode::Left,
        T::Right => KeyCode::Right,
        T::Up => KeyCode::Up,
        T::Down => KeyCode::Down,
        T::Home => KeyCode::Home,
        T::End => KeyCode::End,
        T::PageUp => KeyCode::PageUp,
        T::PageDown => KeyCode::PageDown,
        T::Tab => KeyCode::Tab,
        T::Delete => KeyCode::Delete,
        T::Insert => KeyCode::Insert,
        T::F(n) => KeyCode::F(n),
        T::Char(c) => KeyCode::Char(c),
        T::Esc => KeyCode::Esc,
        _ => return None,
    };
    let mut modifiers = KeyModifiers::empty();
    for (from, to) in [
        (terminput::KeyModifiers::SHIFT, KeyModifiers::SHIFT),
        (terminput::KeyModifiers::ALT, KeyModifiers::ALT),
        (terminput::KeyModifiers::CTRL, KeyModifiers::CONTROL),
    ] {
        if k.modifiers.contains(from) {
            modifiers |= to;
        }
    }
    Some(KeyEvent {
        code,
        modifiers,
        kind: KeyEventKind::Press,
        state: KeyEventState::empty(),
    })
}

/// How often a key waiting for room in a full channel looks whether the UI is leaving.
const ROOM_POLL: Duration = Duration::from_millis(2);

/// Sends `msg`, waiting for room while the channel is full (keys are never dropped), until
/// `ending` says the UI is leaving: it will not read again, and it waits for this thread, so a
/// send that blocked would hang ebtop (a UI that panicked at start with the channel filled by
/// the collector, or one that quit while keys came in). False then, or once nobody listens.
pub fn send_waiting<M>(tx: &SyncSender<M>, mut msg: M, ending: &AtomicBool) -> bool {
    loop {
        match tx.try_send(msg) {
            Ok(()) => return true,
            Err(TrySendError::Disconnected(_)) => return false,
            Err(TrySendError::Full(back)) => {
                if ending.load(Ordering::Acquire) {
                    return false;
                }
                msg = back;
                std::thread::sleep(ROOM_POLL);
            }
        }
    }
}

/// The input thread; [`TtyInput::stop`] (or dropping it) ends and joins it.
pub struct TtyInput {
    /// Set before the thread is woken to end: a delivery waiting for room gives up.
    ending: Arc<AtomicBool>,
    wake: UnixStream,
    winch: Option<signal_hook::SigId>,
    thread: Option<JoinHandle<()>>,
}

/// Where keys come from: standard input if it is a terminal, else /dev/tty (as crossterm
/// does, so raw mode and input are the same terminal).
enum TtyFd {
    Stdin,
    Opened(OwnedFd),
}

impl TtyFd {
    fn open() -> io::Result<TtyFd> {
        // SAFETY: isatty only inspects the descriptor number.
        if unsafe { libc::isatty(libc::STDIN_FILENO) } == 1 {
            return Ok(TtyFd::Stdin);
        }
        let f = std::fs::OpenOptions::new()
            .read(true)
            .open("/dev/tty")
            .map_err(|e| io::Error::new(e.kind(), format!("opening /dev/tty for keys: {e}")))?;
        Ok(TtyFd::Opened(f.into()))
    }

    fn raw(&self) -> RawFd {
        match self {
            TtyFd::Stdin => libc::STDIN_FILENO,
            TtyFd::Opened(f) => f.as_raw_fd(),
        }
    }
}

impl TtyInput {
    /// Starts the thread; `deliver` gets every input and returns false once nobody listens. It
    /// may wait (for room to pass the input on) but must give up once its flag is set: the
    /// thread is then being ended and joined ([`send_waiting`] does both).
    pub fn spawn(
        mut deliver: impl FnMut(Input, &AtomicBool) -> bool + Send + 'static,
    ) -> io::Result<TtyInput> {
        let tty = TtyFd::open()?;
        let (wake, wake_rx) = UnixStream::pair()?;
        let (winch_tx, winch_rx) = UnixStream::pair()?;
        winch_tx.set_nonblocking(true)?;
        winch_rx.set_nonblocking(true)?;
        wake_rx.set_nonblocking(true)?;
        let winch = signal_hook::low_level::pipe::register(libc::SIGWINCH, winch_tx)?;
        let ending = Arc::new(AtomicBool::new(false));
        let ending_here = Arc::clone(&ending);
        let thread = std::thread::Builder::new()
            .name("ebtop-input".into())
            .spawn(move || {
                // A panic here must end the UI, not leave it without keys.
                let ending = &*ending_here;
                let mut deliver = |i: Input| deliver(i, ending);
                let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                    read_loop(&tty, &wake_rx, &winch_rx, &mut deliver)
                }));
                match outcome {
                    Ok(Ok(())) => {}
                    Ok(Err(why)) => {
                        deliver(Input::TerminalLost(why));
                    }
                    Err(_) => {
                        deliver(Input::Failed("the key reader panicked".to_owned()));
                    }
                }
            })?;
        Ok(TtyInput {
            ending,
            wake,
            winch: Some(winch),
            thread: Some(thread),
        })
    }

    /// Ends the thread and waits for it (it never blocks anywhere but in `poll`).
    pub fn stop(mut self) {
        self.shutdown();
    }

    fn shutdown(&mut self) {
        if let Some(id) = self.winch.take() {
            signal_hook::low_level::unregister(id);
        }
        self.ending.store(true, Ordering::Release);
        let _ = self.wake.write_all(b"x");
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl Drop for TtyInput {
    fn drop(&mut self) {
        self.shutdown();
    }
}

/// Reads until woken (Ok) or the terminal is gone (Err with the reason).
fn read_loop(
    tty: &TtyFd,
    wake: &UnixStream,
    mut winch: &UnixStream,
    deliver: &mut impl FnMut(Input) -> bool,
) -> Result<(), String> {
    if debug_panic_requested("input") {
        panic!("injected panic in the input thread (EBTOP_DEBUG_PANIC=input)");
    }
    let mut decoder = KeyDecoder::default();
    let mut keys = Vec::new();
    let mut buf = [0u8; 1024];
    loop {
        let mut fds = [
            pollfd(tty.raw()),
            pollfd(wake.as_raw_fd()),
            pollfd(winch.as_raw_fd()),
        ];
        // SAFETY: `fds` is a valid array of pollfd for its length; -1 waits without timeout.
        let n = unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, -1) };
        if n < 0 {
            let e = io::Error::last_os_error();
            if e.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return Err(format!("waiting for terminal input failed: {e}"));
        }
        if fds[1].revents != 0 {
            return Ok(());
        }
        if fds[2].revents != 0 {
            while winch.read(&mut buf).is_ok_and(|k| k > 0) {}
            if let Ok((w, h)) = crossterm::terminal::size() {
                if !deliver(Input::Resize(w, h)) {
                    return Ok(());
                }
            }
        }
        let r = fds[0].revents;
        if r & libc::POLLIN != 0 {
            // SAFETY: the tty descriptor stays open for the thread's life (stdin, or owned by
            // `tty`); BorrowedFd does not close it.
            let fd = unsafe { BorrowedFd::borrow_raw(tty.raw()) };
            match read_fd(fd, &mut buf) {
                Ok(0) => return Err("the terminal closed (end of input)".to_owned()),
                Ok(k) => {
                    decoder.feed(&buf[..k], &mut keys);
                    for k in keys.drain(..) {
                        if !deliver(Input::Key(k)) {
                            return Ok(());
                        }
                    }
                    continue;
                }
                Err(e)
                    if matches!(
                        e.kind(),
                        io::ErrorKind::Interrupted | io::ErrorKind::WouldBlock
                    ) =>
                {
                    continue
                }
                Err(e) => return Err(format!("the terminal is gone ({e})")),
            }
        }
        if r & (libc::POLLHUP | libc::POLLERR | libc::POLLNVAL) != 0 {
            return Err("the terminal hung up".to_owned());
        }
    }
}

fn pollfd(fd: RawFd) -> libc::pollfd {
    libc::pollfd {
        fd,
        events: libc::POLLIN,
        revents: 0,
    }
}

fn read_fd(fd: BorrowedFd<'_>, buf: &mut [u8]) -> io::Result<usize> {
    // SAFETY: reads at most buf.len() bytes into a buffer we own, from a descriptor that is open.
    let n = unsafe { libc::read(fd.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len()) };
    if n < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(n as usize)
    }
}

pub use crate::diag::debug_panic_requested;

#[cfg(test)]
mod tests {
    use super::*;

    fn decode(chunks: &[&[u8]]) -> Vec<KeyEvent> {
        let mut d = KeyDecoder::default();
        let mut out = Vec::new();
        for c in chunks {
            d.feed(c, &mut out);
        }
        out
    }

    fn key(code: KeyCode) -> KeyEvent {
        KeyEvent::new(code, KeyModifiers::empty())
    }

    #[test]
    fn keys_the_views_use_decode_from_xterm_bytes() {
        let keys = decode(&[
            b"q",
            b"\x1b[A",
            b"\x1bOB",
            b"\x1b[5~",
            b"\x1b[6~",
            b"\x1b[H",
            b"\x1b[F",
            b"\r",
            b"\t",
            b"\x1b[Z",
            b"\x7f",
            b"\x1bOP",
            b"\x1b[21~",
            b"\x1b",
        ]);
        assert_eq!(
            keys,
            vec![
                key(KeyCode::Char('q')),
                key(KeyCode::Up),
                key(KeyCode::Down),
                key(KeyCode::PageUp),
                key(KeyCode::PageDown),
                key(KeyCode::Home),
                key(KeyCode::End),
                key(KeyCode::Enter),
                key(KeyCode::Tab),
                KeyEvent::new(KeyCode::BackTab, KeyModifiers::SHIFT),
                key(KeyCode::Backspace),
                key(KeyCode::F(1)),
                key(KeyCode::F(10)),
                key(KeyCode::Esc),
            ]
        );
    }

    #[test]
    fn ctrl_c_and_keys_in_one_read_and_sequences_cut_between_reads() {
        let keys = decode(&[b"\x03jk\x1b[", b"B/x"]);
        assert_eq!(
            keys,
            vec![
                KeyEvent::new(KeyCode::Char('c'), KeyModifiers::CONTROL),
                key(KeyCode::Char('j')),
                key(KeyCode::Char('k')),
                key(KeyCode::Down),
                key(KeyCode::Char('/')),
                key(KeyCode::Char('x')),
            ]
        );
    }

    #[test]
    fn garbage_is_skipped_and_decoding_goes_on() {
        let mut noise = vec![0x1b, b'['];
        noise.extend(std::iter::repeat_n(b'1', 200));
        let keys = decode(&[&noise, b"q"]);
        assert_eq!(keys.last(), Some(&key(KeyCode::Char('q'))));
    }

    /// A pty in raw mode, as the UI sets it: (master, slave).
    fn raw_pty() -> (OwnedFd, OwnedFd) {
        let mut master = 0;
        let mut slave = 0;
        // SAFETY: openpty writes two descriptors into the given locations; the rest are null.
        let rc = unsafe {
            libc::openpty(
                &mut master,
                &mut slave,
                std::ptr::null_mut(),
                std::ptr::null(),
                std::ptr::null(),
            )
        };
        assert_eq!(rc, 0, "openpty: {}", io::Error::last_os_error());
        // SAFETY: both descriptors were just created and are owned here.
        let (master, slave) = unsafe {
            use std::os::fd::FromRawFd;
            (OwnedFd::from_raw_fd(master), OwnedFd::from_raw_fd(slave))
        };
        // Raw mode, as the UI sets it: each byte is readable at once.
        // SAFETY: termios is plain data, filled by tcgetattr on a valid descriptor.
        unsafe {
            let mut t: libc::termios = std::mem::zeroed();
            assert_eq!(libc::tcgetattr(slave.as_raw_fd(), &mut t), 0);
            libc::cfmakeraw(&mut t);
            assert_eq!(libc::tcsetattr(slave.as_raw_fd(), libc::TCSANOW, &t), 0);
        }
        (master, slave)
    }

    #[test]
    fn eof_on_the_tty_ends_the_thread_with_terminal_lost() {
        // A pty whose master is closed reads as EOF/EIO: the thread must report it once and end
        // (crossterm's reader spins here).
        let (master, slave) = raw_pty();
        let (wake, wake_rx) = UnixStream::pair().unwrap();
        let (_winch_tx, winch_rx) = UnixStream::pair().unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        let t = std::thread::spawn(move || {
            let tty = TtyFd::Opened(slave);
            let mut deliver = |i: Input| tx.send(i).is_ok();
            read_loop(&tty, &wake_rx, &winch_rx, &mut deliver)
        });
        let mut m = std::fs::File::from(master);
        m.write_all(b"j").unwrap();
        let got = rx.recv_timeout(std::time::Duration::from_secs(30)).unwrap();
        assert_eq!(got, Input::Key(key(KeyCode::Char('j'))));
        drop(m);
        let end = t.join().unwrap();
        assert!(end.is_err(), "{end:?}");
        drop(wake);
    }

    #[test]
    fn a_key_waits_for_room_and_gives_up_when_the_ui_leaves() {
        // The UI's channel full and nobody reading it: a key waits (it is not dropped) and
        // comes once there is room; when the UI leaves without reading, the thread must end
        // (a send that blocked hung ebtop at every UI panic or quit with the channel full).
        let (master, slave) = raw_pty();
        let (wake, wake_rx) = UnixStream::pair().unwrap();
        let (_winch_tx, winch_rx) = UnixStream::pair().unwrap();
        let (tx, rx) = std::sync::mpsc::sync_channel(1);
        tx.send(Input::Resize(1, 1)).unwrap();
        let ending = Arc::new(AtomicBool::new(false));
        let ending_there = Arc::clone(&ending);
        let t = std::thread::spawn(move || {
            let tty = TtyFd::Opened(slave);
            let mut deliver = |i: Input| send_waiting(&tx, i, &ending_there);
            read_loop(&tty, &wake_rx, &winch_rx, &mut deliver)
        });
        let mut m = std::fs::File::from(master);
        m.write_all(b"j").unwrap();
        let long = Duration::from_secs(30); // liveness bounds, not timing checks
        assert_eq!(rx.recv_timeout(long).unwrap(), Input::Resize(1, 1));
        assert_eq!(
            rx.recv_timeout(long).unwrap(),
            Input::Key(key(KeyCode::Char('j')))
        );
        // 'k' fills the channel again, 'l' waits for room that never comes.
        m.write_all(b"kl").unwrap();
        ending.store(true, Ordering::Release);
        (&wake).write_all(b"x").unwrap();
        let (done_tx, done_rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || done_tx.send(t.join().unwrap()).unwrap());
        let end = done_rx
            .recv_timeout(long)
            .expect("the input thread ends while its channel is full");
        assert_eq!(end, Ok(()));
        // Nothing was lost before the end: what was read in time is there, in order.
        let rest: Vec<Input> = rx.try_iter().collect();
        assert!(
            rest.is_empty() || rest == [Input::Key(key(KeyCode::Char('k')))],
            "{rest:?}"
        );
    }
}
