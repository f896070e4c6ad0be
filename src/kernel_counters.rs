//! The kernel side's counters, per interval and for the whole session.

/// Counters the kernel side keeps (per-CPU array `counters`, summed; lost also per CPU).
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct KernelCounters {
    pub events: u64,
    pub lost: u64,
    pub lost_bytes: u64,
    pub skipped_unknown_proto: u64,
    pub skipped_unknown_bytes: u64,
    /// Of `skipped_unknown_proto`: datagrams of sockets judged to carry no known protocol
    /// (32 unknown in a row), skipped without being examined (one in 32 still is). 0 in
    /// recordings made before it existed.
    #[serde(default)]
    pub skipped_unexamined: u64,
    pub inflight_full: u64,
    pub socket_syscalls: u64,
    pub truncated: u64,
    #[serde(deserialize_with = "crate::record::limits::numbers")]
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
    /// SSL objects driven through memory BIOs (Node, Python's asyncio) bound to their socket
    /// by their handshake's first flights (docs/architecture.md, "TLS through memory BIOs"),
    /// and such bindings dropped because a new object took a freed one's address.
    #[serde(default)]
    pub tls_membio_bound: u64,
    #[serde(default)]
    pub tls_membio_reused: u64,
    /// Sends/receives longer than the snaplen on connections of a protocol copied whole
    /// (Redis, Memcached, PostgreSQL, MySQL: `ProtocolDescriptor::copy_whole`) that were copied
    /// whole, and the bytes that added beyond the snaplen; and those that were not (longer than
    /// the bound, or no room in the ring for the whole): delivered as a head and a tail.
    #[serde(default)]
    pub copied_whole: u64,
    #[serde(default)]
    pub copied_whole_bytes: u64,
    #[serde(default)]
    pub not_copied_whole: u64,
    /// Connection sampling (`--max-cpu`, `--sample`): data sends and receives on connections
    /// sampled out (not captured), connections decided out and decided in while sampling was
    /// on, and the share of connections the sample keeps now (parts per million; absent when
    /// every connection is captured). 0 and absent in recordings made before they existed.
    #[serde(default)]
    pub shed_runs: u64,
    #[serde(default)]
    pub shed_connections: u64,
    #[serde(default)]
    pub kept_connections: u64,
    /// SSL calls that moved plaintext on connections sampled out (their plaintext not
    /// captured, as their bytes are not; OpenSSL and Go, whose socket I/O runs inside the
    /// calls). 0 in recordings made before it existed.
    #[serde(default)]
    pub tls_shed_calls: u64,
    /// Captured connections a budget cut at a call boundary (their calls before it whole,
    /// none after). 0 in recordings made before it existed.
    #[serde(default)]
    pub cut_connections: u64,
    /// Cut connections captured again at a call boundary once the share was raised over
    /// them. 0 in recordings made before it existed.
    #[serde(default)]
    pub rejoined_connections: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sample_keep_ppm: Option<u64>,
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
