//! What describes a session (first JSON line, recording header) and how it ended.

use crate::conntrack::TrackerStats;
use crate::protocols::{ParseStats, ProtoSet, Protocol};

/// Filters of a run; applied in the kernel when live, by the pipeline when replaying.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Filters {
    /// Any of these processes (`--pid`, a list; recordings before lists hold one number).
    #[serde(default, deserialize_with = "one_or_many")]
    pub pid: Option<Vec<u32>>,
    /// Any of these task names.
    #[serde(default, deserialize_with = "one_or_many")]
    pub comm: Option<Vec<String>>,
    /// Any of these local or remote ports.
    #[serde(default, deserialize_with = "one_or_many")]
    pub port: Option<Vec<u16>>,
    /// Live: only processes in these cgroups (v2 paths) or beneath them (`--cgroup`,
    /// `--container`); applied in the kernel to calls and process records, not to flows.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cgroup: Option<Vec<String>>,
    /// Only connections of these application protocols (`--proto`); flows are not affected.
    #[serde(default)]
    pub proto: Option<Vec<Protocol>>,
}

/// Most values of one filter (`--pid`, `--comm`, `--port`): the kernel compares each in
/// every program run.
pub const MAX_FILTER_VALUES: usize = 8;

/// `null`, one value (recordings made before filters took lists) or a list.
fn one_or_many<'de, D, T>(d: D) -> Result<Option<Vec<T>>, D::Error>
where
    D: serde::Deserializer<'de>,
    T: serde::Deserialize<'de>,
{
    #[derive(serde::Deserialize)]
    #[serde(untagged)]
    enum OneOrMany<T> {
        One(T),
        Many(Vec<T>),
    }
    Ok(
        match <Option<OneOrMany<T>> as serde::Deserialize>::deserialize(d)? {
            None => None,
            Some(OneOrMany::One(v)) => Some(vec![v]),
            Some(OneOrMany::Many(v)) => Some(v),
        },
    )
}

/// Whether an optional list filter lets `v` through (unset: everything).
fn passes<T: PartialEq>(filter: &Option<Vec<T>>, v: impl Fn(&T) -> bool) -> bool {
    filter.as_ref().is_none_or(|list| list.iter().any(v))
}

/// Both lists' common values; one list if the other is unset.
fn intersect<T: PartialEq + Clone>(a: &Option<Vec<T>>, b: &Option<Vec<T>>) -> Option<Vec<T>> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.iter().filter(|v| b.contains(v)).cloned().collect()),
        (a, b) => b.clone().or_else(|| a.clone()),
    }
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
        passes(&self.port, |&p| local_port == p || peer_port == Some(p))
            && passes(&self.pid, |&p| pid == Some(p))
            && passes(&self.comm, |c| {
                comm.is_some_and(|have| have.as_bytes() == comm_prefix(c))
            })
    }

    /// Whether a connection between these ports passes `--port`.
    pub fn selects_ports(&self, a: u16, b: u16) -> bool {
        passes(&self.port, |&p| p == a || p == b)
    }

    /// Whether a process (pid, kernel task name NUL-padded) passes `--pid` and `--comm`.
    pub fn selects_process(&self, pid: u32, comm: &[u8; 16]) -> bool {
        let have = comm.iter().position(|&b| b == 0).unwrap_or(16);
        passes(&self.pid, |&p| p == pid) && passes(&self.comm, |c| &comm[..have] == comm_prefix(c))
    }

    /// Whether the filters that apply to flows (all but `proto`) are all unset.
    pub fn is_empty(&self) -> bool {
        self.pid.is_none() && self.comm.is_none() && self.port.is_none()
    }

    pub fn protocols(&self) -> ProtoSet {
        ProtoSet::of(self.proto.as_deref())
    }

    /// These filters narrowed by `more` (a filtered copy of a filtered recording): a filter
    /// set on both sides keeps the values both allow (none in common: nothing passes).
    pub fn narrowed_by(&self, more: &Filters) -> Filters {
        Filters {
            pid: intersect(&self.pid, &more.pid),
            comm: intersect(&self.comm, &more.comm),
            port: intersect(&self.port, &more.port),
            cgroup: intersect(&self.cgroup, &more.cgroup),
            proto: intersect(&self.proto, &more.proto),
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
    /// Live with `--tls on`: the files probed for TLS plaintext at start (libraries, and
    /// executables linking OpenSSL statically), and those that could not be, with the reason.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tls_probed: Vec<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
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
    /// Sends and receives of TLS ciphertext (and their bytes): counted, never copied.
    #[serde(default)]
    pub tls_cipher_events: u64,
    #[serde(default)]
    pub tls_cipher_bytes: u64,
    /// SSL_write/SSL_read calls that moved plaintext (TLS probes).
    #[serde(default)]
    pub tls_calls: u64,
    /// Of those, calls on no socket ebtop could name (a custom BIO): counted, not delivered.
    #[serde(default)]
    pub tls_no_socket: u64,
    #[serde(default)]
    pub tls_no_socket_bytes: u64,
    /// Files probed for TLS plaintext since the start (those at start and those found later:
    /// programs exec'd, libraries dlopen'd), and files that define the functions but could
    /// not be probed (each also a line on stderr; the `meta` line names those of the start).
    #[serde(default)]
    pub tls_files_probed: u64,
    #[serde(default)]
    pub tls_probe_failures: u64,
    /// TLS probe hits per process since the start (pid → entries and returns); a process's
    /// hits in an interval are the difference. Absent when no probe fired.
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub tls_probe_hits: std::collections::BTreeMap<u32, u64>,
    /// Of those, hits at sites the kernel single-steps out of line (pid → hits): OpenSSL's
    /// public functions, Go's return instructions.
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub tls_probe_stepped_hits: std::collections::BTreeMap<u32, u64>,
    /// What one TLS probe hit costs a process on this host (ns), measured at start: at a site
    /// the kernel emulates, or a return.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tls_probe_hit_ns: Option<u64>,
    /// What one hit at a site the kernel single-steps costs (ns), measured at start.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tls_probe_stepped_hit_ns: Option<u64>,
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn filters_take_lists_and_read_recordings_that_held_one_value() {
        let old: Filters =
            serde_json::from_str(r#"{"pid":42,"comm":"nginx","port":null}"#).unwrap();
        assert_eq!(old.pid, Some(vec![42]));
        assert_eq!(old.comm, Some(vec!["nginx".to_owned()]));
        assert_eq!(old.port, None);
        assert_eq!(old.proto, None);
        let new: Filters =
            serde_json::from_str(r#"{"pid":[1,2],"comm":null,"port":[80,443]}"#).unwrap();
        assert_eq!(new.pid, Some(vec![1, 2]));
        let back: Filters = serde_json::from_str(&serde_json::to_string(&new).unwrap()).unwrap();
        assert_eq!(back, new);

        assert!(new.selects(443, None, Some(2), None));
        assert!(new.selects(5000, Some(80), Some(1), Some("x")));
        assert!(!new.selects(5000, Some(81), Some(1), None));
        assert!(!new.selects(80, None, Some(3), None));
        let mut comm = [0u8; 16];
        comm[..5].copy_from_slice(b"nginx");
        assert!(old.selects_process(42, &comm));
        assert!(!old.selects_process(43, &comm));

        // Narrowing keeps what both allow.
        let n = new.narrowed_by(&Filters {
            port: Some(vec![443, 8080]),
            ..Filters::default()
        });
        assert_eq!((n.pid, n.port), (Some(vec![1, 2]), Some(vec![443])));
        let none = old.narrowed_by(&Filters {
            pid: Some(vec![7]),
            ..Filters::default()
        });
        assert_eq!(none.pid, Some(vec![]));
        assert!(!none.selects_process(42, &comm) && !none.selects_process(7, &comm));
    }
}
