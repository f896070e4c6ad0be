//! What describes a session (first JSON line, recording header) and how it ended.

use crate::conntrack::TrackerStats;
use crate::protocols::{ParseStats, ProtoSet, Protocol};

/// Filters of a run; applied in the kernel when live, by the pipeline when replaying.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Filters {
    pub pid: Option<u32>,
    pub comm: Option<String>,
    pub port: Option<u16>,
    /// Only connections of these application protocols (`--proto`); flows are not affected.
    #[serde(default)]
    pub proto: Option<Vec<Protocol>>,
}

/// The kernel keeps 15 bytes of a task name: a longer `--comm` matches on that prefix (bytes,
/// not characters: a name may be cut inside a UTF-8 sequence).
pub fn comm_prefix(c: &str) -> &[u8] {
    &c.as_bytes()[..c.len().min(15)]
}

impl Filters {
    /// Whether a flow (or anything else known by its ports and owner) passes the filters.
    /// The comm filter compares the kernel's 15-byte task name.
    pub fn selects(
        &self,
        local_port: u16,
        peer_port: Option<u16>,
        pid: Option<u32>,
        comm: Option<&str>,
    ) -> bool {
        self.port
            .is_none_or(|p| local_port == p || peer_port == Some(p))
            && self.pid.is_none_or(|p| pid == Some(p))
            && self
                .comm
                .as_deref()
                .is_none_or(|c| comm.is_some_and(|have| have.as_bytes() == comm_prefix(c)))
    }

    /// Whether a process (pid, kernel task name NUL-padded) passes `--pid` and `--comm`.
    pub fn selects_process(&self, pid: u32, comm: &[u8; 16]) -> bool {
        self.pid.is_none_or(|p| p == pid)
            && self.comm.as_deref().is_none_or(|c| {
                let have = comm.iter().position(|&b| b == 0).unwrap_or(16);
                &comm[..have] == comm_prefix(c)
            })
    }

    /// Whether the filters that apply to flows (all but `proto`) are all unset.
    pub fn is_empty(&self) -> bool {
        self.pid.is_none() && self.comm.is_none() && self.port.is_none()
    }

    pub fn protocols(&self) -> ProtoSet {
        ProtoSet::of(self.proto.as_deref())
    }

    /// These filters narrowed by `more` (a filtered copy of a filtered recording): a filter
    /// set on both sides keeps both (pid, port, comm: the new one when they differ, as the
    /// recording holds only the old; protocols: the intersection).
    pub fn narrowed_by(&self, more: &Filters) -> Filters {
        Filters {
            pid: more.pid.or(self.pid),
            comm: more.comm.clone().or_else(|| self.comm.clone()),
            port: more.port.or(self.port),
            proto: match (&self.proto, &more.proto) {
                (Some(a), Some(b)) => Some(a.iter().copied().filter(|p| b.contains(p)).collect()),
                (a, b) => b.clone().or_else(|| a.clone()),
            },
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct SessionMeta {
    /// "live" or "replay".
    pub source: String,
    pub ebtop_version: String,
    pub host: String,
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
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub loaded: Vec<String>,
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

/// Counters the kernel side keeps (per-CPU array `counters`, summed; lost also per CPU).
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct KernelCounters {
    pub events: u64,
    pub lost: u64,
    pub lost_bytes: u64,
    pub skipped_unknown_proto: u64,
    pub skipped_unknown_bytes: u64,
    pub inflight_full: u64,
    pub socket_syscalls: u64,
    pub truncated: u64,
    pub lost_per_cpu: Vec<u64>,
    /// Process exec/exit records written to their own ring buffer, and those it had no room
    /// for (absent in recordings made before they existed).
    #[serde(default)]
    pub proc_events: u64,
    #[serde(default)]
    pub proc_lost: u64,
    /// Runs of the capture programs (socket data, process exec/exit) the kernel skipped
    /// (`crate::bpf::recursion_misses`): each may be a send, receive or exec/exit never seen.
    #[serde(default)]
    pub missed_runs: u64,
}

#[derive(Debug, Clone, Default, PartialEq, serde::Serialize)]
pub struct Summary {
    pub duration_ns: u64,
    pub calls: u64,
    pub calls_client: u64,
    pub calls_server: u64,
    /// Records received from the kernel (or the recording).
    pub events: u64,
    /// Records that did not decode (corrupt recording).
    pub decode_errors: u64,
    /// Records the user-space filters dropped (replay with --pid/--comm/--port).
    pub filtered_events: u64,
    pub kernel: KernelCounters,
    pub tracker: TrackerStats,
    pub parse: ParseStats,
    /// Since-start numbers of every endpoint (the RED table of the whole session).
    pub endpoints: Vec<crate::aggregate::EndpointSnapshot>,
    pub endpoint_table: crate::aggregate::EndpointTableStats,
    /// Process exec and exit records (after filters).
    pub process_execs: u64,
    pub process_exits: u64,
    /// Times the process table (16384 processes) was full and started over.
    pub process_table_resets: u64,
    /// With -w: events the recording thread could not keep up with.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub recording_dropped_events: Option<u64>,
    /// With -r: what reading the recording met.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub replay: Option<crate::record::reader::ReadStats>,
}
