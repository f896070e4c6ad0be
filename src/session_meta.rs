//! What describes a session: its first JSON line (`meta`) and a recording's header.

use crate::filters::Filters;

#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct SessionMeta {
    /// "live" or "replay".
    #[serde(deserialize_with = "crate::record::limits::string")]
    pub source: String,
    #[serde(deserialize_with = "crate::record::limits::string")]
    pub ebtop_version: String,
    #[serde(deserialize_with = "crate::record::limits::string")]
    pub host: String,
    #[serde(deserialize_with = "crate::record::limits::string")]
    pub kernel: String,
    /// Unix time (ns) the capture started.
    pub start_unix_ns: i64,
    /// Wall minus monotonic clock (ns) on the capturing host.
    pub wall_offset_ns: i64,
    pub snaplen: u32,
    pub filters: Filters,
    /// Where the live capture hooked: "socket" (socket layer) or "syscalls" (syscall
    /// tracepoints); absent in replays of recordings made before it existed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hooks: Option<String>,
    /// Live: the kernel parts loaded for this session (`capture`, `flow_table`,
    /// `process_events`): what the output asked for and the kernel allowed.
    #[serde(
        default,
        skip_serializing_if = "Vec::is_empty",
        deserialize_with = "crate::record::limits::strings"
    )]
    pub loaded: Vec<String>,
    /// Live with `--tls on`: the files probed for TLS plaintext at start (libraries, and
    /// executables linking OpenSSL statically), and those that could not be, with the reason.
    #[serde(
        default,
        skip_serializing_if = "Vec::is_empty",
        deserialize_with = "crate::record::limits::strings"
    )]
    pub tls_probed: Vec<String>,
    #[serde(
        default,
        skip_serializing_if = "Vec::is_empty",
        deserialize_with = "crate::record::limits::strings"
    )]
    pub tls_probe_failures: Vec<String>,
    /// Live: the event rings read, one per tracking thread.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub event_rings: Option<u32>,
}

impl SessionMeta {
    /// Kernel (CLOCK_MONOTONIC) time the session started; saturating, as a recording may
    /// carry any numbers.
    pub fn start_mono_ns(&self) -> u64 {
        self.start_unix_ns
            .saturating_sub(self.wall_offset_ns)
            .max(0) as u64
    }

    pub fn this_host(source: &str, snaplen: u32, filters: Filters, wall_offset_ns: i64) -> Self {
        SessionMeta {
            source: source.to_owned(),
            ebtop_version: env!("CARGO_PKG_VERSION").to_owned(),
            host: uname_field(|u| &u.nodename),
            kernel: uname_field(|u| &u.release),
            start_unix_ns: crate::clock::now_unix_ns(),
            wall_offset_ns,
            snaplen,
            filters,
            hooks: None,
            loaded: Vec::new(),
            tls_probed: Vec::new(),
            tls_probe_failures: Vec::new(),
            event_rings: None,
        }
    }
}

fn uname_field(pick: impl Fn(&libc::utsname) -> &[libc::c_char; 65]) -> String {
    // SAFETY: utsname is plain old data; uname fills it (zeroed first, so strings are
    // NUL-terminated even if it failed).
    let mut u: libc::utsname = unsafe { std::mem::zeroed() };
    // SAFETY: valid pointer to a utsname.
    unsafe { libc::uname(&mut u) };
    let f = pick(&u);
    let bytes: Vec<u8> = f
        .iter()
        .take_while(|&&c| c != 0)
        .map(|&c| c as u8)
        .collect();
    String::from_utf8_lossy(&bytes).into_owned()
}
