//! Process lifecycle records from `procs.bpf.c` (layout: `struct ebtop_proc_event` in
//! `src/bpf/ebtop.h`): exec with the program's path and arguments, exit with the wait status.
//! Decoded field by field, so a damaged record from a recording is an error, never a panic.

use crate::procinfo::ProcInfo;

/// Size of `struct ebtop_proc_event`, the fixed header in front of an exec's strings.
pub const HEADER_LEN: usize = 56;

/// Size of `struct ebtop_exe_id`, after an exec's strings (absent from older records).
pub const EXE_ID_LEN: usize = 16;

/// The file a process exec'd, as the kernel knew it then: inode number and device.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ExeId {
    pub ino: u64,
    /// The kernel's encoding (`major << 20 | minor`), not `st_dev`'s.
    pub dev: u32,
}

impl ExeId {
    /// Whether `meta` is this file.
    pub fn is(&self, meta: &std::fs::Metadata) -> bool {
        use std::os::unix::fs::MetadataExt;
        self.is_file(meta.dev(), meta.ino())
    }

    /// Whether the file of `st_dev` and `ino` (as stat gives them) is this file.
    pub fn is_file(&self, st_dev: u64, ino: u64) -> bool {
        ino == self.ino
            && u64::from(libc::major(st_dev)) == u64::from(self.dev >> 20)
            && u64::from(libc::minor(st_dev)) == u64::from(self.dev & 0xf_ffff)
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProcEventKind {
    Exec,
    Exit,
    /// A dlopen() returned a library: live only (the TLS probes look at the process's maps
    /// again), never recorded.
    Loaded,
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ProcDecodeError {
    #[error("process record of {0} bytes is shorter than the {HEADER_LEN}-byte header")]
    Short(usize),
    #[error("process record says {cap_len} payload bytes but carries {have}")]
    PayloadLength { cap_len: u32, have: usize },
    #[error("process record's strings ({0} bytes) do not fit its payload")]
    Strings(u64),
    #[error("unknown process record kind {0}")]
    Kind(u32),
}

/// One decoded process record; the strings borrow from the raw bytes.
#[derive(Debug, Clone, Copy)]
pub struct ProcEvent<'a> {
    /// CLOCK_MONOTONIC.
    pub ts_ns: u64,
    pub kind: ProcEventKind,
    pub pid: u32,
    pub ppid: u32,
    /// Exit: the wait status (`code << 8`, or the signal, `0x80` if it dumped core).
    pub exit_code: i32,
    /// Exec: the path the program was run by (as given to execve).
    pub filename: &'a [u8],
    /// Exec: the argument strings, NUL-separated, as copied.
    pub args: &'a [u8],
    /// Exec: the whole argument area was longer than what was copied.
    pub args_cut: bool,
    /// Exec: the file it runs (None from an older ebtop's recording).
    pub exe_id: Option<ExeId>,
    pub comm: [u8; 16],
}

/// How a process ended, from its wait status.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ExitStatus {
    /// The code it exited with (`None` if a signal ended it).
    pub code: Option<i32>,
    pub signal: Option<i32>,
    pub core_dumped: bool,
}

fn u32_at(b: &[u8], off: usize) -> u32 {
    u32::from_le_bytes(b[off..off + 4].try_into().expect("4 bytes"))
}

impl<'a> ProcEvent<'a> {
    pub fn decode(b: &'a [u8]) -> Result<ProcEvent<'a>, ProcDecodeError> {
        if b.len() < HEADER_LEN {
            return Err(ProcDecodeError::Short(b.len()));
        }
        let cap_len = u32_at(b, 36);
        let payload = &b[HEADER_LEN..];
        if payload.len() != cap_len as usize {
            return Err(ProcDecodeError::PayloadLength {
                cap_len,
                have: payload.len(),
            });
        }
        let kind = match u32_at(b, 8) {
            1 => ProcEventKind::Exec,
            2 => ProcEventKind::Exit,
            3 => ProcEventKind::Loaded,
            k => return Err(ProcDecodeError::Kind(k)),
        };
        let (filename_len, args_len) = (u32_at(b, 24) as u64, u32_at(b, 28) as u64);
        let (filename, args, exe_id) = if kind == ProcEventKind::Exec {
            // filename, its NUL, the arguments, then the file's identity (as procs.bpf.c lays
            // them out).
            let strings = filename_len + 1 + args_len;
            if strings > payload.len() as u64 {
                return Err(ProcDecodeError::Strings(strings));
            }
            let (f, s) = (filename_len as usize, strings as usize);
            let exe_id = (payload.len() - s == EXE_ID_LEN).then(|| ExeId {
                ino: u64::from_le_bytes(payload[s..s + 8].try_into().expect("8 bytes")),
                dev: u32_at(payload, s + 8),
            });
            (&payload[..f], &payload[f + 1..s], exe_id)
        } else {
            (&payload[..0], &payload[..0], None)
        };
        let mut comm = [0u8; 16];
        comm.copy_from_slice(&b[40..56]);
        Ok(ProcEvent {
            ts_ns: u64::from_le_bytes(b[0..8].try_into().expect("8 bytes")),
            kind,
            pid: u32_at(b, 12),
            ppid: u32_at(b, 16),
            exit_code: u32_at(b, 20) as i32,
            filename,
            args,
            args_cut: (u32_at(b, 32) as u64) > args_len,
            exe_id,
            comm,
        })
    }

    pub fn comm_str(&self) -> String {
        crate::event::comm_to_string(&self.comm)
    }

    /// What an exec tells of the process, as `/proc` would have told it.
    pub fn proc_info(&self) -> ProcInfo {
        ProcInfo {
            pid: self.pid,
            comm: self.comm_str(),
            exe: (!self.filename.is_empty())
                .then(|| String::from_utf8_lossy(self.filename).into_owned()),
            cmdline: crate::procinfo::split_cmdline(self.args),
            cgroup: None,
            ppid: Some(self.ppid),
            pod: None,
        }
    }

    pub fn exit_status(&self) -> ExitStatus {
        let sig = self.exit_code & 0x7f;
        ExitStatus {
            code: (sig == 0).then_some((self.exit_code >> 8) & 0xff),
            signal: (sig != 0).then_some(sig),
            core_dumped: self.exit_code & 0x80 != 0,
        }
    }
}

/// A described process (one with a `proc` line) ended.
#[derive(Debug, Clone, Copy)]
pub struct ProcessExit<'a> {
    pub mono_ns: u64,
    pub info: &'a ProcInfo,
    pub ppid: u32,
    pub status: ExitStatus,
}

/// Builds a raw process record: the inverse of [`ProcEvent::decode`] (tests and fixtures).
pub fn build(
    kind: ProcEventKind,
    ts_ns: u64,
    pid: u32,
    comm: &str,
    exit_code: i32,
    filename: &[u8],
    args: &[u8],
) -> Vec<u8> {
    let mut b = vec![0u8; HEADER_LEN];
    b[0..8].copy_from_slice(&ts_ns.to_le_bytes());
    let k: u32 = match kind {
        ProcEventKind::Exec => 1,
        ProcEventKind::Exit => 2,
        ProcEventKind::Loaded => 3,
    };
    b[8..12].copy_from_slice(&k.to_le_bytes());
    b[12..16].copy_from_slice(&pid.to_le_bytes());
    b[20..24].copy_from_slice(&exit_code.to_le_bytes());
    let c = comm.as_bytes();
    b[40..40 + c.len().min(15)].copy_from_slice(&c[..c.len().min(15)]);
    if kind == ProcEventKind::Exec {
        b[24..28].copy_from_slice(&(filename.len() as u32).to_le_bytes());
        b[28..32].copy_from_slice(&(args.len() as u32).to_le_bytes());
        b[32..36].copy_from_slice(&(args.len() as u32).to_le_bytes());
        b.extend_from_slice(filename);
        b.push(0);
        b.extend_from_slice(args);
    }
    let cap = (b.len() - HEADER_LEN) as u32;
    b[36..40].copy_from_slice(&cap.to_le_bytes());
    b
}

/// Adds an exec record's file identity (which [`build`] leaves out, as older versions did).
pub fn add_exe_id(raw: &mut Vec<u8>, id: ExeId) {
    raw.extend_from_slice(&id.ino.to_le_bytes());
    raw.extend_from_slice(&id.dev.to_le_bytes());
    raw.extend_from_slice(&[0; 4]);
    let cap = (raw.len() - HEADER_LEN) as u32;
    raw[36..40].copy_from_slice(&cap.to_le_bytes());
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exec_round_trip() {
        let raw = build(
            ProcEventKind::Exec,
            5,
            42,
            "curl",
            0,
            b"/usr/bin/curl",
            b"curl\0-s\0http://x/\0",
        );
        let ev = ProcEvent::decode(&raw).unwrap();
        assert_eq!(ev.kind, ProcEventKind::Exec);
        let info = ev.proc_info();
        assert_eq!(info.exe.as_deref(), Some("/usr/bin/curl"));
        assert_eq!(info.cmdline, ["curl", "-s", "http://x/"]);
        assert_eq!(info.comm, "curl");
        assert!(!ev.args_cut);
    }

    #[test]
    fn exit_statuses() {
        let st = |code| {
            ProcEvent::decode(&build(ProcEventKind::Exit, 1, 1, "x", code, b"", b""))
                .unwrap()
                .exit_status()
        };
        assert_eq!(
            st(3 << 8),
            ExitStatus {
                code: Some(3),
                signal: None,
                core_dumped: false
            }
        );
        assert_eq!(
            st(9),
            ExitStatus {
                code: None,
                signal: Some(9),
                core_dumped: false
            }
        );
        assert!(st(11 | 0x80).core_dumped);
    }

    #[test]
    fn an_exec_carries_its_files_identity_or_none_from_an_older_version() {
        let mut raw = build(ProcEventKind::Exec, 5, 42, "curl", 0, b"/bin/x", b"x\0");
        assert_eq!(ProcEvent::decode(&raw).unwrap().exe_id, None);
        let id = ExeId {
            ino: 0x0123_4567_89ab_cdef,
            dev: (259 << 20) | 7,
        };
        add_exe_id(&mut raw, id);
        let ev = ProcEvent::decode(&raw).unwrap();
        assert_eq!(ev.exe_id, Some(id));
        assert_eq!((ev.filename, ev.args), (&b"/bin/x"[..], &b"x\0"[..]));
    }

    #[test]
    fn an_exe_id_is_the_file_stat_names() {
        use std::os::unix::fs::MetadataExt;
        let meta = std::fs::metadata("/proc/self/exe").unwrap();
        let (major, minor) = (libc::major(meta.dev()), libc::minor(meta.dev()));
        let id = ExeId {
            ino: meta.ino(),
            dev: (major << 20) | minor,
        };
        assert!(id.is(&meta));
        assert!(!ExeId {
            ino: id.ino + 1,
            ..id
        }
        .is(&meta));
        assert!(!ExeId {
            dev: id.dev ^ 1,
            ..id
        }
        .is(&meta));
    }

    #[test]
    fn damaged_records_are_errors() {
        let raw = build(ProcEventKind::Exec, 1, 1, "x", 0, b"/bin/x", b"x\0");
        for cut in 0..raw.len() {
            assert!(ProcEvent::decode(&raw[..cut]).is_err());
        }
        let mut lying = raw.clone();
        lying[28] = 200; // args_len beyond the payload
        assert!(matches!(
            ProcEvent::decode(&lying),
            Err(ProcDecodeError::Strings(_))
        ));
        let mut kind = raw;
        kind[8] = 9;
        assert_eq!(
            ProcEvent::decode(&kind).unwrap_err(),
            ProcDecodeError::Kind(9)
        );
    }
}
