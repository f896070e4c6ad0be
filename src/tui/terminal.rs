//! The terminal as an output: raw mode and the alternate screen for the UI's life, restored on
//! every way out (return, panic, signal), and writes that can never hang ebtop: the UI writes
//! through [`TtyWriter`] (see `crate::tty`), which waits for a terminal that takes no output
//! only until ebtop is stopping.

use std::io::{self, Write};
use std::os::fd::OwnedFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

use crossterm::{cursor, queue, terminal};

use crate::tty::STALL_GRACE;

/// The terminal behind standard output, opened anew without blocking (None: output goes to
/// stdout, blocking).
fn tty_out() -> Option<&'static OwnedFd> {
    static OUT: OnceLock<Option<OwnedFd>> = OnceLock::new();
    OUT.get_or_init(|| crate::tty::reopen_nonblocking(libc::STDOUT_FILENO))
        .as_ref()
}

/// The UI's output: the terminal, never blocking past a stop (see the module's text).
pub struct TtyWriter {
    stop: Arc<AtomicBool>,
}

impl TtyWriter {
    pub fn new(stop: Arc<AtomicBool>) -> TtyWriter {
        TtyWriter { stop }
    }
}

impl Write for TtyWriter {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match tty_out() {
            Some(fd) => crate::tty::write_some(fd, buf, |stalled| {
                !self.stop.load(Ordering::Relaxed) || stalled < STALL_GRACE
            }),
            None => io::stdout().write(buf),
        }
    }

    fn flush(&mut self) -> io::Result<()> {
        match tty_out() {
            Some(_) => Ok(()),
            None => io::stdout().flush(),
        }
    }
}

static RESTORED: AtomicBool = AtomicBool::new(true);
/// Messages (panics) that came while the UI owned the screen, shown once it is restored.
static DEFERRED: Mutex<Vec<String>> = Mutex::new(Vec::new());

/// True while the UI owns the terminal (raw mode, alternate screen).
pub fn ui_active() -> bool {
    !RESTORED.load(Ordering::SeqCst)
}

/// Keeps `message` for standard error until the terminal is restored: written now it would land
/// on the alternate screen and vanish with it (or be drawn over).
pub fn defer_message(message: String) {
    DEFERRED
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .push(message);
}

/// Puts the terminal back: raw mode off, main screen, cursor shown; then writes the deferred
/// messages. Idempotent; never waits more than [`STALL_GRACE`] for a terminal that takes no
/// output, and ignores one that is gone.
pub fn restore_terminal() {
    if RESTORED.swap(true, Ordering::SeqCst) {
        return;
    }
    let _ = terminal::disable_raw_mode();
    let mut seq = Vec::new();
    let _ = queue!(seq, terminal::LeaveAlternateScreen, cursor::Show);
    match tty_out() {
        Some(fd) => {
            let _ = crate::tty::write_all_bounded(fd, &seq);
        }
        None => {
            let _ = io::stdout().write_all(&seq);
            let _ = io::stdout().flush();
        }
    }
    for m in DEFERRED.lock().unwrap_or_else(|e| e.into_inner()).drain(..) {
        crate::diag!("{m}");
    }
}

/// Raw mode and the alternate screen for as long as it lives (a panic in the UI thread drops it
/// too, while unwinding).
pub struct TerminalGuard(());

impl TerminalGuard {
    pub fn enter(out: &mut impl Write) -> io::Result<TerminalGuard> {
        RESTORED.store(false, Ordering::SeqCst);
        terminal::enable_raw_mode()?;
        let guard = TerminalGuard(());
        crossterm::execute!(out, terminal::EnterAlternateScreen, cursor::Hide)?;
        Ok(guard)
    }
}

impl Drop for TerminalGuard {
    fn drop(&mut self) {
        restore_terminal();
    }
}
