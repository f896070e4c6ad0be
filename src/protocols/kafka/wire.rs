//! Kafka's wire types and the tables ebtop reads requests and responses by: API names, the
//! version each API's messages turned flexible (compact strings and arrays, tagged fields),
//! error names. Everything reads through [`Reader`], which never reads past its bytes: a field
//! that is not there ends the walk (None), keeping what was read before it.

/// Reads Kafka's primitive types from a message's kept bytes.
#[derive(Clone, Copy)]
pub(super) struct Reader<'a> {
    pub b: &'a [u8],
    pub pos: usize,
    /// Compact strings, arrays and bytes (flexible versions), tagged fields.
    pub flexible: bool,
}

impl<'a> Reader<'a> {
    pub fn new(b: &'a [u8], flexible: bool) -> Self {
        Reader {
            b,
            pos: 0,
            flexible,
        }
    }

    pub fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        let end = self.pos.checked_add(n)?;
        let s = self.b.get(self.pos..end)?;
        self.pos = end;
        Some(s)
    }

    pub fn skip(&mut self, n: usize) -> Option<()> {
        self.take(n).map(|_| ())
    }

    pub fn i8(&mut self) -> Option<i8> {
        self.take(1).map(|s| s[0] as i8)
    }

    pub fn i16(&mut self) -> Option<i16> {
        self.take(2).map(|s| i16::from_be_bytes([s[0], s[1]]))
    }

    pub fn i32(&mut self) -> Option<i32> {
        self.take(4)
            .map(|s| i32::from_be_bytes([s[0], s[1], s[2], s[3]]))
    }

    pub fn uuid(&mut self) -> Option<[u8; 16]> {
        let mut id = [0; 16];
        id.copy_from_slice(self.take(16)?);
        Some(id)
    }

    /// An unsigned varint (at most 5 bytes: Kafka's are 32-bit).
    pub fn uvarint(&mut self) -> Option<u32> {
        let mut v: u32 = 0;
        for i in 0..5 {
            let c = self.take(1)?[0];
            v |= ((c & 0x7f) as u32) << (7 * i);
            if c & 0x80 == 0 {
                return Some(v);
            }
        }
        None
    }

    /// A length: an i16/i32 (classic, -1 for null) or a uvarint N+1 (compact, 0 for null).
    /// None: null (or not there).
    fn len(&mut self, wide: bool) -> Option<Option<usize>> {
        if self.flexible {
            let n = self.uvarint()?;
            Some(n.checked_sub(1).map(|n| n as usize))
        } else if wide {
            let n = self.i32()?;
            Some((n >= 0).then_some(n as usize))
        } else {
            let n = self.i16()?;
            Some((n >= 0).then_some(n as usize))
        }
    }

    /// A (nullable) string: its bytes, None for null.
    pub fn string(&mut self) -> Option<Option<&'a [u8]>> {
        match self.len(false)? {
            None => Some(None),
            Some(n) => Some(Some(self.take(n)?)),
        }
    }

    /// A string that is never compact (the request header's `client_id`).
    pub fn classic_string(&mut self) -> Option<Option<&'a [u8]>> {
        let n = self.i16()?;
        if n < 0 {
            return Some(None);
        }
        Some(Some(self.take(n as usize)?))
    }

    /// (Nullable) bytes: their length, None for null. The bytes are not read.
    pub fn bytes_len(&mut self) -> Option<Option<usize>> {
        self.len(true)
    }

    /// An array's element count, None for null.
    pub fn array(&mut self) -> Option<Option<usize>> {
        self.len(true)
    }

    /// Tagged fields (flexible versions only): skipped.
    pub fn tags(&mut self) -> Option<()> {
        if !self.flexible {
            return Some(());
        }
        let n = self.uvarint()?;
        for _ in 0..n {
            self.uvarint()?;
            let size = self.uvarint()? as usize;
            self.skip(size)?;
        }
        Some(())
    }
}

/// API names, by key (Kafka's `ApiKeys`, in snake case).
const API_NAMES: &[&str] = &[
    "produce",
    "fetch",
    "list_offsets",
    "metadata",
    "leader_and_isr",
    "stop_replica",
    "update_metadata",
    "controlled_shutdown",
    "offset_commit",
    "offset_fetch",
    "find_coordinator",
    "join_group",
    "heartbeat",
    "leave_group",
    "sync_group",
    "describe_groups",
    "list_groups",
    "sasl_handshake",
    "api_versions",
    "create_topics",
    "delete_topics",
    "delete_records",
    "init_producer_id",
    "offset_for_leader_epoch",
    "add_partitions_to_txn",
    "add_offsets_to_txn",
    "end_txn",
    "write_txn_markers",
    "txn_offset_commit",
    "describe_acls",
    "create_acls",
    "delete_acls",
    "describe_configs",
    "alter_configs",
    "alter_replica_log_dirs",
    "describe_log_dirs",
    "sasl_authenticate",
    "create_partitions",
    "create_delegation_token",
    "renew_delegation_token",
    "expire_delegation_token",
    "describe_delegation_token",
    "delete_groups",
    "elect_leaders",
    "incremental_alter_configs",
    "alter_partition_reassignments",
    "list_partition_reassignments",
    "offset_delete",
    "describe_client_quotas",
    "alter_client_quotas",
    "describe_user_scram_credentials",
    "alter_user_scram_credentials",
    "vote",
    "begin_quorum_epoch",
    "end_quorum_epoch",
    "describe_quorum",
    "alter_partition",
    "update_features",
    "envelope",
    "fetch_snapshot",
    "describe_cluster",
    "describe_producers",
    "broker_registration",
    "broker_heartbeat",
    "unregister_broker",
    "describe_transactions",
    "list_transactions",
    "allocate_producer_ids",
    "consumer_group_heartbeat",
    "consumer_group_describe",
    "controller_registration",
    "get_telemetry_subscriptions",
    "push_telemetry",
    "assign_replicas_to_dirs",
    "list_config_resources",
    "describe_topic_partitions",
    "share_group_heartbeat",
    "share_group_describe",
    "share_fetch",
    "share_acknowledge",
    "add_raft_voter",
    "remove_raft_voter",
    "update_raft_voter",
    "initialize_share_group_state",
    "read_share_group_state",
    "write_share_group_state",
    "delete_share_group_state",
    "read_share_group_state_summary",
    "streams_group_heartbeat",
    "streams_group_describe",
    "describe_share_group_offsets",
    "alter_share_group_offsets",
    "delete_share_group_offsets",
];

/// The highest API key ebtop knows by name (keys above it are `api_<key>`).
pub(super) const MAX_KNOWN_API: i16 = API_NAMES.len() as i16 - 1;

/// The first flexible version of each API (by key), from Kafka's message definitions
/// (`"flexibleVersions"`); 0: flexible from the start; `NEVER`: never.
const NEVER: u8 = u8::MAX;
const FIRST_FLEXIBLE: &[u8] = &[
    9,     // produce
    12,    // fetch
    6,     // list_offsets
    9,     // metadata
    4,     // leader_and_isr
    2,     // stop_replica
    6,     // update_metadata
    3,     // controlled_shutdown
    8,     // offset_commit
    6,     // offset_fetch
    3,     // find_coordinator
    6,     // join_group
    4,     // heartbeat
    4,     // leave_group
    4,     // sync_group
    5,     // describe_groups
    3,     // list_groups
    NEVER, // sasl_handshake
    3,     // api_versions
    5,     // create_topics
    4,     // delete_topics
    2,     // delete_records
    2,     // init_producer_id
    4,     // offset_for_leader_epoch
    3,     // add_partitions_to_txn
    3,     // add_offsets_to_txn
    3,     // end_txn
    1,     // write_txn_markers
    3,     // txn_offset_commit
    2,     // describe_acls
    2,     // create_acls
    2,     // delete_acls
    4,     // describe_configs
    2,     // alter_configs
    2,     // alter_replica_log_dirs
    2,     // describe_log_dirs
    2,     // sasl_authenticate
    2,     // create_partitions
    2,     // create_delegation_token
    2,     // renew_delegation_token
    2,     // expire_delegation_token
    2,     // describe_delegation_token
    2,     // delete_groups
    2,     // elect_leaders
    1,     // incremental_alter_configs
    0,     // alter_partition_reassignments
    0,     // list_partition_reassignments
    NEVER, // offset_delete
    1,     // describe_client_quotas
    1,     // alter_client_quotas
    0,     // describe_user_scram_credentials
    0,     // alter_user_scram_credentials
    0,     // vote
    1,     // begin_quorum_epoch
    1,     // end_quorum_epoch
    0,     // describe_quorum
    0,     // alter_partition
    0,     // update_features
    0,     // envelope
    0,     // fetch_snapshot
    0,     // describe_cluster
    0,     // describe_producers
    0,     // broker_registration
    0,     // broker_heartbeat
    0,     // unregister_broker
    0,     // describe_transactions
    0,     // list_transactions
    0,     // allocate_producer_ids
    0,     // consumer_group_heartbeat
    0,     // consumer_group_describe
    0,     // controller_registration
    0,     // get_telemetry_subscriptions
    0,     // push_telemetry
    0,     // assign_replicas_to_dirs
    0,     // list_config_resources
    0,     // describe_topic_partitions
    0,     // share_group_heartbeat
    0,     // share_group_describe
    0,     // share_fetch
    0,     // share_acknowledge
    0,     // add_raft_voter
    0,     // remove_raft_voter
    0,     // update_raft_voter
    0,     // initialize_share_group_state
    0,     // read_share_group_state
    0,     // write_share_group_state
    0,     // delete_share_group_state
    0,     // read_share_group_state_summary
    0,     // streams_group_heartbeat
    0,     // streams_group_describe
    0,     // describe_share_group_offsets
    0,     // alter_share_group_offsets
    0,     // delete_share_group_offsets
];

const _: () = assert!(API_NAMES.len() == FIRST_FLEXIBLE.len());

/// The API's name (`produce`), None for a key ebtop does not know.
pub(super) fn api_name(key: i16) -> Option<&'static str> {
    API_NAMES.get(usize::try_from(key).ok()?).copied()
}

/// Whether `version` of API `key` is flexible; None for a key ebtop does not know. Versions
/// above those ebtop knows are taken to stay flexible (Kafka never turns a flexible API back).
pub(super) fn flexible(key: i16, version: i16) -> Option<bool> {
    let first = *FIRST_FLEXIBLE.get(usize::try_from(key).ok()?)?;
    Some(first != NEVER && version >= first as i16)
}

/// Versions shown (`version` is a `&'static str`): 0–63, then `64+`.
pub(super) fn version_text(v: i16) -> &'static str {
    const V: [&str; 64] = [
        "0", "1", "2", "3", "4", "5", "6", "7", "8", "9", "10", "11", "12", "13", "14", "15", "16",
        "17", "18", "19", "20", "21", "22", "23", "24", "25", "26", "27", "28", "29", "30", "31",
        "32", "33", "34", "35", "36", "37", "38", "39", "40", "41", "42", "43", "44", "45", "46",
        "47", "48", "49", "50", "51", "52", "53", "54", "55", "56", "57", "58", "59", "60", "61",
        "62", "63",
    ];
    match usize::try_from(v) {
        Ok(i) if i < V.len() => V[i],
        Ok(_) => "64+",
        Err(_) => "negative",
    }
}

/// Error names by code (Kafka's `Errors`), code 0 (`NONE`) first.
const ERROR_NAMES: &[&str] = &[
    "NONE",
    "OFFSET_OUT_OF_RANGE",
    "CORRUPT_MESSAGE",
    "UNKNOWN_TOPIC_OR_PARTITION",
    "INVALID_FETCH_SIZE",
    "LEADER_NOT_AVAILABLE",
    "NOT_LEADER_OR_FOLLOWER",
    "REQUEST_TIMED_OUT",
    "BROKER_NOT_AVAILABLE",
    "REPLICA_NOT_AVAILABLE",
    "MESSAGE_TOO_LARGE",
    "STALE_CONTROLLER_EPOCH",
    "OFFSET_METADATA_TOO_LARGE",
    "NETWORK_EXCEPTION",
    "COORDINATOR_LOAD_IN_PROGRESS",
    "COORDINATOR_NOT_AVAILABLE",
    "NOT_COORDINATOR",
    "INVALID_TOPIC_EXCEPTION",
    "RECORD_LIST_TOO_LARGE",
    "NOT_ENOUGH_REPLICAS",
    "NOT_ENOUGH_REPLICAS_AFTER_APPEND",
    "INVALID_REQUIRED_ACKS",
    "ILLEGAL_GENERATION",
    "INCONSISTENT_GROUP_PROTOCOL",
    "INVALID_GROUP_ID",
    "UNKNOWN_MEMBER_ID",
    "INVALID_SESSION_TIMEOUT",
    "REBALANCE_IN_PROGRESS",
    "INVALID_COMMIT_OFFSET_SIZE",
    "TOPIC_AUTHORIZATION_FAILED",
    "GROUP_AUTHORIZATION_FAILED",
    "CLUSTER_AUTHORIZATION_FAILED",
    "INVALID_TIMESTAMP",
    "UNSUPPORTED_SASL_MECHANISM",
    "ILLEGAL_SASL_STATE",
    "UNSUPPORTED_VERSION",
    "TOPIC_ALREADY_EXISTS",
    "INVALID_PARTITIONS",
    "INVALID_REPLICATION_FACTOR",
    "INVALID_REPLICA_ASSIGNMENT",
    "INVALID_CONFIG",
    "NOT_CONTROLLER",
    "INVALID_REQUEST",
    "UNSUPPORTED_FOR_MESSAGE_FORMAT",
    "POLICY_VIOLATION",
    "OUT_OF_ORDER_SEQUENCE_NUMBER",
    "DUPLICATE_SEQUENCE_NUMBER",
    "INVALID_PRODUCER_EPOCH",
    "INVALID_TXN_STATE",
    "INVALID_PRODUCER_ID_MAPPING",
    "INVALID_TRANSACTION_TIMEOUT",
    "CONCURRENT_TRANSACTIONS",
    "TRANSACTION_COORDINATOR_FENCED",
    "TRANSACTIONAL_ID_AUTHORIZATION_FAILED",
    "SECURITY_DISABLED",
    "OPERATION_NOT_ATTEMPTED",
    "KAFKA_STORAGE_ERROR",
    "LOG_DIR_NOT_FOUND",
    "SASL_AUTHENTICATION_FAILED",
    "UNKNOWN_PRODUCER_ID",
    "REASSIGNMENT_IN_PROGRESS",
    "DELEGATION_TOKEN_AUTH_DISABLED",
    "DELEGATION_TOKEN_NOT_FOUND",
    "DELEGATION_TOKEN_OWNER_MISMATCH",
    "DELEGATION_TOKEN_REQUEST_NOT_ALLOWED",
    "DELEGATION_TOKEN_AUTHORIZATION_FAILED",
    "DELEGATION_TOKEN_EXPIRED",
    "INVALID_PRINCIPAL_TYPE",
    "NON_EMPTY_GROUP",
    "GROUP_ID_NOT_FOUND",
    "FETCH_SESSION_ID_NOT_FOUND",
    "INVALID_FETCH_SESSION_EPOCH",
    "LISTENER_NOT_FOUND",
    "TOPIC_DELETION_DISABLED",
    "FENCED_LEADER_EPOCH",
    "UNKNOWN_LEADER_EPOCH",
    "UNSUPPORTED_COMPRESSION_TYPE",
    "STALE_BROKER_EPOCH",
    "OFFSET_NOT_AVAILABLE",
    "MEMBER_ID_REQUIRED",
    "PREFERRED_LEADER_NOT_AVAILABLE",
    "GROUP_MAX_SIZE_REACHED",
    "FENCED_INSTANCE_ID",
    "ELIGIBLE_LEADERS_NOT_AVAILABLE",
    "ELECTION_NOT_NEEDED",
    "NO_REASSIGNMENT_IN_PROGRESS",
    "GROUP_SUBSCRIBED_TO_TOPIC",
    "INVALID_RECORD",
    "UNSTABLE_OFFSET_COMMIT",
    "THROTTLING_QUOTA_EXCEEDED",
    "PRODUCER_FENCED",
    "RESOURCE_NOT_FOUND",
    "DUPLICATE_RESOURCE",
    "UNACCEPTABLE_CREDENTIAL",
    "INCONSISTENT_VOTER_SET",
    "INVALID_UPDATE_VERSION",
    "FEATURE_UPDATE_FAILED",
    "PRINCIPAL_DESERIALIZATION_FAILURE",
    "SNAPSHOT_NOT_FOUND",
    "POSITION_OUT_OF_RANGE",
    "UNKNOWN_TOPIC_ID",
    "DUPLICATE_BROKER_REGISTRATION",
    "BROKER_ID_NOT_REGISTERED",
    "INCONSISTENT_TOPIC_ID",
    "INCONSISTENT_CLUSTER_ID",
    "TRANSACTIONAL_ID_NOT_FOUND",
    "FETCH_SESSION_TOPIC_ID_ERROR",
    "INELIGIBLE_REPLICA",
    "NEW_LEADER_ELECTED",
    "OFFSET_MOVED_TO_TIERED_STORAGE",
    "FENCED_MEMBER_EPOCH",
    "UNRELEASED_INSTANCE_ID",
    "UNSUPPORTED_ASSIGNOR",
    "STALE_MEMBER_EPOCH",
    "MISMATCHED_ENDPOINT_TYPE",
    "UNSUPPORTED_ENDPOINT_TYPE",
    "UNKNOWN_CONTROLLER_ID",
    "UNKNOWN_SUBSCRIPTION_ID",
    "TELEMETRY_TOO_LARGE",
    "INVALID_REGISTRATION",
    "TRANSACTION_ABORTABLE",
];

/// An error code's name (`UNKNOWN_TOPIC_OR_PARTITION`); codes ebtop does not know by name
/// are `ERROR_<code>`.
pub(super) fn error_name(code: i16) -> String {
    if code == -1 {
        return "UNKNOWN_SERVER_ERROR".to_owned();
    }
    match usize::try_from(code).ok().and_then(|i| ERROR_NAMES.get(i)) {
        Some(n) => (*n).to_owned(),
        None => format!("ERROR_{code}"),
    }
}

/// Errors that are the client's doing (a request the broker refuses as asked), the others the
/// broker's or the cluster's.
pub(super) fn is_client_error(code: i16) -> bool {
    matches!(
        code,
        1 | 3 | 4 | 10 | 12 | 17 | 18 | 21 | 22 | 23 | 24 | 25 | 26 | 28..=40 | 42..=44 | 58
            | 67 | 69 | 79 | 87 | 100
    )
}

/// Topic ids as Kafka's tools print them: URL-safe base64 without padding (22 characters).
pub(super) fn topic_id_text(id: &[u8; 16]) -> String {
    const A: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    let mut s = String::with_capacity(22);
    for chunk in id.chunks(3) {
        let mut w = [0u8; 3];
        w[..chunk.len()].copy_from_slice(chunk);
        let n = (w[0] as u32) << 16 | (w[1] as u32) << 8 | w[2] as u32;
        let chars = chunk.len() + 1;
        for i in 0..chars {
            s.push(A[(n >> (18 - 6 * i) & 63) as usize] as char);
        }
    }
    s
}

/// Compression codecs of a RecordBatch's attributes (bits 0–2).
pub(super) fn codec_name(attributes: i16) -> &'static str {
    match attributes & 7 {
        0 => "none",
        1 => "gzip",
        2 => "snappy",
        3 => "lz4",
        4 => "zstd",
        _ => "unknown",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn topic_ids_print_as_kafka_does() {
        // Uuid.ZERO_UUID prints as AAAAAAAAAAAAAAAAAAAAAA; METADATA_TOPIC_ID (…0001) as
        // AAAAAAAAAAAAAAAAAAAAAQ.
        assert_eq!(topic_id_text(&[0; 16]), "AAAAAAAAAAAAAAAAAAAAAA");
        let mut one = [0; 16];
        one[15] = 1;
        assert_eq!(topic_id_text(&one), "AAAAAAAAAAAAAAAAAAAAAQ");
    }

    #[test]
    fn versions_and_flexibility() {
        assert_eq!(flexible(0, 13), Some(true));
        assert_eq!(flexible(0, 8), Some(false));
        assert_eq!(flexible(17, 1), Some(false));
        assert_eq!(flexible(18, 3), Some(true));
        // A version ebtop has never seen stays flexible.
        assert_eq!(flexible(1, 40), Some(true));
        assert_eq!(flexible(999, 0), None);
        assert_eq!(version_text(13), "13");
        assert_eq!(version_text(200), "64+");
        assert_eq!(error_name(3), "UNKNOWN_TOPIC_OR_PARTITION");
        assert_eq!(error_name(-1), "UNKNOWN_SERVER_ERROR");
        assert_eq!(error_name(5000), "ERROR_5000");
    }

    #[test]
    fn reader_never_reads_past_its_bytes() {
        let mut r = Reader::new(&[0xff, 0xff, 0xff, 0xff, 0xff, 0xff], true);
        assert_eq!(r.uvarint(), None);
        let mut r = Reader::new(&[0, 5, b'a'], false);
        assert_eq!(r.string(), None);
        let mut r = Reader::new(&[0xff, 0xff], false);
        assert_eq!(r.string(), Some(None));
    }
}
