//! tmux as a real terminal for end-to-end TUI tests: start ebtop in a pane, type, read the
//! screen, and take the terminal away (`kill-server`).

use std::process::{Command, Output};
use std::time::{Duration, Instant};

pub struct Tmux {
    socket: String,
}

impl Tmux {
    /// A tmux server of its own (a new socket each time: a server being killed by an earlier
    /// test must not take the next one's session with it).
    pub fn new() -> Tmux {
        static NEXT: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        Tmux {
            socket: format!("ebtop-test-{}-{n}", std::process::id()),
        }
    }

    /// Runs `ebtop ARGS` in window "ui" (120×40, NO_COLOR); afterwards the shell says how it
    /// ended and whether the terminal is back in cooked mode, and stays for a minute.
    pub fn start_ebtop(&self, args: &str) {
        self.start_ebtop_with_env("", args);
    }

    /// Same, with `env` (e.g. `EBTOP_DEBUG_PANIC=ui`) before the command.
    pub fn start_ebtop_with_env(&self, env: &str, args: &str) {
        self.start_ebtop_sized(120, 40, env, args);
    }

    /// Same, in a terminal of `w`×`h` (the layout at 80×24 and on a wide screen).
    pub fn start_ebtop_sized(&self, w: u16, h: u16, env: &str, args: &str) {
        let (w, h) = (w.to_string(), h.to_string());
        let cmd = format!(
            "NO_COLOR=1 {env} '{}' {args} {}; echo \"ebtop exited $?\"; \
             if stty -a | grep -q -- -icanon; then echo 'tty raw'; else echo 'tty cooked'; fi; \
             sleep 60",
            env!("CARGO_BIN_EXE_ebtop"),
            if args.starts_with("-r ") || args.contains(" -r ") {
                super::replay_args()
            } else {
                super::hooks_args()
            }
            .join(" "),
        );
        self.run(&[
            "new-session",
            "-d",
            "-s",
            "ui",
            "-x",
            &w,
            "-y",
            &h,
            "sh",
            "-c",
            &cmd,
        ]);
    }

    pub fn run(&self, args: &[&str]) -> Output {
        let out = Command::new("tmux")
            .arg("-L")
            .arg(&self.socket)
            .args(args)
            .env("TERM", "xterm-256color")
            .output()
            .expect("tmux is needed for this test (scripts/deps installs it)");
        assert!(
            out.status.success(),
            "tmux {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        out
    }

    pub fn screen(&self) -> String {
        String::from_utf8_lossy(&self.run(&["capture-pane", "-p", "-t", "ui"]).stdout).into_owned()
    }

    pub fn keys(&self, keys: &[&str]) {
        for k in keys {
            self.run(&["send-keys", "-t", "ui", k]);
        }
    }

    pub fn literal(&self, text: &str) {
        self.run(&["send-keys", "-t", "ui", "-l", text]);
    }

    /// Waits (up to 30 s: a liveness bound, not a timing check) for the screen to satisfy `ok`; returns it.
    pub fn wait(&self, what: &str, ok: impl Fn(&str) -> bool) -> String {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let s = self.screen();
            if ok(&s) {
                return s;
            }
            if Instant::now() > deadline {
                panic!("timed out waiting for {what}; screen:\n{s}");
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    pub fn wait_for(&self, text: &str) -> String {
        self.wait(text, |s| s.contains(text))
    }
}

impl Drop for Tmux {
    fn drop(&mut self) {
        let _ = Command::new("tmux")
            .args(["-L", &self.socket, "kill-server"])
            .output();
    }
}

impl Tmux {
    /// The pid of ebtop running in the pane (the shell's child).
    pub fn ebtop_pid(&self) -> u32 {
        let pane = self.run(&["display-message", "-p", "-t", "ui", "#{pane_pid}"]);
        let pane = String::from_utf8_lossy(&pane.stdout).trim().to_owned();
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let children = Command::new("pgrep").args(["-P", &pane]).output().unwrap();
            let found = String::from_utf8_lossy(&children.stdout)
                .lines()
                .filter_map(|l| l.trim().parse::<u32>().ok())
                .find(|pid| {
                    std::fs::read_to_string(format!("/proc/{pid}/comm"))
                        .is_ok_and(|c| c.trim() == "ebtop")
                });
            if let Some(pid) = found {
                return pid;
            }
            assert!(Instant::now() < deadline, "ebtop does not run in the pane");
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// The terminal goes away as on an SSH drop: the tmux server and its ptys are closed.
    pub fn kill_server(&self) {
        let _ = Command::new("tmux")
            .args(["-L", &self.socket, "kill-server"])
            .output();
    }

    /// Waits for the exit line and tty mode the shell prints after ebtop; returns the screen.
    pub fn wait_exit(&self) -> String {
        self.wait("the exit status and tty mode", |s| {
            s.contains("ebtop exited") && s.contains("tty ")
        })
    }
}
