//! A PostgreSQL cluster of a test's own (live_postgres, live_chains).

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use super::{free_tcp_port, self_signed_cert, wait_for_listener};

/// The user the server runs as: PostgreSQL refuses to run as root.
const NOBODY: u32 = 65534;

/// The directory holding `initdb` and `postgres`: Debian keeps them out of PATH.
fn server_bindir() -> PathBuf {
    let mut versions: Vec<(u32, PathBuf)> = std::fs::read_dir("/usr/lib/postgresql")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| Some((e.file_name().to_str()?.parse().ok()?, e.path().join("bin"))))
        .filter(|(_, bin): &(u32, PathBuf)| bin.join("postgres").exists())
        .collect();
    versions.sort();
    versions
        .pop()
        .map(|(_, bin)| bin)
        .expect("PostgreSQL is installed (scripts/deps installs it): /usr/lib/postgresql/*/bin")
}

/// A PostgreSQL cluster of the test's own on a free port (trust auth, no fsync), with the
/// pgbench tables in database `bench`; stopped and removed on drop.
pub struct PgServer {
    child: Child,
    pub port: u16,
    pub dir: PathBuf,
}

impl PgServer {
    pub fn start() -> PgServer {
        PgServer::launch(false, false)
    }

    /// The same with pg_stat_statements in database `bench`: the server's count of each
    /// statement it executed.
    pub fn start_with_statement_stats() -> PgServer {
        let server = PgServer::launch(false, true);
        let out = server.psql("bench", "CREATE EXTENSION pg_stat_statements");
        assert!(out.status.success(), "{out:?}");
        server
    }

    /// The same with SSL on: a self-signed certificate for `localhost` made in its directory.
    /// (Clients that do not ask otherwise, `sslmode=prefer`, then use TLS too.)
    pub fn start_tls() -> PgServer {
        PgServer::launch(true, false)
    }

    fn launch(tls: bool, statement_stats: bool) -> PgServer {
        use std::os::unix::fs::PermissionsExt;
        use std::os::unix::process::CommandExt;
        let bin = server_bindir();
        // Tests run as threads of one process: each cluster its own directory.
        static CLUSTERS: AtomicUsize = AtomicUsize::new(0);
        let dir = std::env::temp_dir().join(format!(
            "ebtop-pg-{}-{}",
            std::process::id(),
            CLUSTERS.fetch_add(1, Ordering::Relaxed)
        ));
        let _ = std::fs::remove_dir_all(&dir);
        let data = dir.join("data");
        std::fs::create_dir_all(&data).unwrap();
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
        std::os::unix::fs::chown(&data, Some(NOBODY), Some(NOBODY)).unwrap();
        let out = Command::new(bin.join("initdb"))
            .arg("-D")
            .arg(&data)
            .args(["-U", "postgres", "-A", "trust", "--no-sync"])
            .uid(NOBODY)
            .gid(NOBODY)
            .current_dir(&dir)
            .output()
            .expect("initdb runs");
        assert!(out.status.success(), "initdb: {out:?}");
        let ssl: Vec<String> = if tls {
            let (cert, key) = self_signed_cert(&dir);
            // The server reads the key as the user it runs as, and refuses one others can read.
            std::os::unix::fs::chown(&key, Some(NOBODY), Some(NOBODY)).unwrap();
            std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o600)).unwrap();
            std::fs::set_permissions(&cert, std::fs::Permissions::from_mode(0o644)).unwrap();
            vec![
                "ssl=on".into(),
                format!("ssl_cert_file={}", cert.display()),
                format!("ssl_key_file={}", key.display()),
            ]
        } else {
            vec!["ssl=off".into()]
        };
        let port = free_tcp_port();
        let child = Command::new(bin.join("postgres"))
            .arg("-D")
            .arg(&data)
            .args(["-p", &port.to_string(), "-h", "127.0.0.1"])
            .args(["-c", "unix_socket_directories=", "-c", "fsync=off"])
            .args(["-c", "max_connections=20"])
            .args(ssl.iter().flat_map(|c| ["-c", c.as_str()]))
            .args(
                statement_stats
                    .then_some(["-c", "shared_preload_libraries=pg_stat_statements"])
                    .into_iter()
                    .flatten(),
            )
            .uid(NOBODY)
            .gid(NOBODY)
            .current_dir(&dir)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("postgres starts");
        let server = PgServer { child, port, dir };
        // Accepting TCP is not accepting queries yet: wait for a query to succeed.
        wait_for_listener("127.0.0.1", port, "postgres");
        let deadline = Instant::now() + Duration::from_secs(30);
        while !server.psql("postgres", "select 1").status.success() {
            assert!(Instant::now() < deadline, "postgres did not accept queries");
            std::thread::sleep(Duration::from_millis(100));
        }
        assert!(server
            .psql("postgres", "create database bench")
            .status
            .success());
        let init = server.pgbench(&["-i", "-s", "1", "-q"]);
        assert!(init.status.success(), "pgbench -i: {init:?}");
        server
    }

    pub fn conn_args(&self) -> Vec<String> {
        [
            "-h",
            "127.0.0.1",
            "-p",
            &self.port.to_string(),
            "-U",
            "postgres",
        ]
        .map(String::from)
        .to_vec()
    }

    pub fn psql(&self, db: &str, sql: &str) -> Output {
        Command::new("psql")
            .args(["-X", "-q", "-A", "-t"])
            .args(self.conn_args())
            .args(["-d", db, "-c", sql])
            .output()
            .expect("psql is installed")
    }

    pub fn pgbench(&self, args: &[&str]) -> Output {
        Command::new("pgbench")
            .args(self.conn_args())
            .args(args)
            .arg("bench")
            .output()
            .expect("pgbench is installed")
    }
}

impl Drop for PgServer {
    fn drop(&mut self) {
        // SIGINT: PostgreSQL's fast shutdown (its backends exit too).
        // SAFETY: kill with the pid of our own child.
        unsafe { libc::kill(self.child.id() as i32, libc::SIGINT) };
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(Path::new(&self.dir));
    }
}
