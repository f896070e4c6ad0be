//! The Kafka parser on real bytes with real syscall boundaries (src/protocols/kafka/fixtures/
//! *.seg: kcat 1.7.1 / librdkafka 2.0.2 and the Java 4.4 console clients against a Kafka
//! 4.4.0 broker, captured with strace), through the whole user-space pipeline.

use crate::protocols::fixture_support::run;
use crate::protocols::Protocol;
use crate::segfile::SegFile;

fn load(name: &str) -> SegFile {
    crate::protocols::fixture_support::load("kafka", name)
}

/// Every fixture: (file, its calls as `method version resource status`, requests left
/// unanswered at the close, requests that get no response: Produce with acks=0).
type Fixture = (&'static str, &'static [&'static str], u64, u64);

const FIXTURES: &[Fixture] = &[
    (
        "kcat_zstd.client.seg",
        &[
            "api_versions 3 api_versions ok",
            "metadata 4 metadata events ok",
            "produce 7 produce events ok",
        ],
        0,
        0,
    ),
    (
        // acks=0: the Produce gets no response and makes no call, counted.
        "kcat_acks0_gzip.client.seg",
        &[
            "api_versions 3 api_versions ok",
            "metadata 4 metadata events UNKNOWN_TOPIC_OR_PARTITION",
            "metadata 4 metadata events ok",
        ],
        0,
        1,
    ),
    (
        "kcat_produce.client.seg",
        &[
            "api_versions 3 api_versions ok",
            // The topic does not exist yet: the broker creates it.
            "metadata 4 metadata orders UNKNOWN_TOPIC_OR_PARTITION",
            "metadata 4 metadata orders ok",
            "produce 7 produce orders ok",
        ],
        0,
        0,
    ),
    (
        // The broker's side: it reads each length (4 bytes) apart from its body.
        "kcat_produce.server.seg",
        &[
            "api_versions 3 api_versions ok",
            "metadata 4 metadata orders ok",
            "produce 7 produce orders ok",
        ],
        0,
        0,
    ),
    (
        "kcat_consume.client.seg",
        &[
            "api_versions 3 api_versions ok",
            "metadata 4 metadata orders ok",
            "metadata 4 metadata orders ok",
            "list_offsets 2 list_offsets orders ok",
            "fetch 11 fetch orders ok",
            "fetch 11 fetch orders ok",
        ],
        // kcat -e exits with a Fetch in flight.
        1,
        0,
    ),
    (
        "java_produce_bootstrap.client.seg",
        &[
            "api_versions 5 api_versions ok",
            "metadata 13 metadata payments UNKNOWN_TOPIC_OR_PARTITION",
            "init_producer_id 5 init_producer_id COORDINATOR_LOAD_IN_PROGRESS",
        ],
        0,
        0,
    ),
    (
        "java_produce.client.seg",
        &[
            "api_versions 5 api_versions ok",
            "metadata 13 metadata payments ok",
            "init_producer_id 5 init_producer_id ok",
            // v13 names the topic by id only: named from the Metadata above.
            "produce 13 produce payments ok",
        ],
        0,
        0,
    ),
    (
        "java_consume_bootstrap.client.seg",
        &[
            "api_versions 5 api_versions ok",
            "metadata 13 metadata payments ok",
            "find_coordinator 6 find_coordinator g1 COORDINATOR_NOT_AVAILABLE",
        ],
        0,
        0,
    ),
    (
        "java_consume.client.seg",
        &[
            "api_versions 5 api_versions ok",
            "metadata 13 metadata payments ok",
            "find_coordinator 6 find_coordinator g1 ok",
            "list_offsets 11 list_offsets payments ok",
            "fetch 18 fetch payments ok",
            "fetch 18 fetch payments ok",
            // An incremental fetch session's request names no topic, nor does an empty
            // response.
            "fetch 18 fetch ok",
        ],
        0,
        0,
    ),
    (
        "java_consume_coordinator.client.seg",
        &[
            "api_versions 5 api_versions ok",
            "join_group 9 join_group g1 MEMBER_ID_REQUIRED",
            "join_group 9 join_group g1 ok",
            "sync_group 5 sync_group g1 ok",
            "offset_fetch 9 offset_fetch g1 ok",
            "offset_commit 9 offset_commit g1 ok",
            "leave_group 5 leave_group g1 ok",
        ],
        0,
        0,
    ),
];

#[test]
fn every_fixture_is_listed() {
    crate::protocols::fixture_support::assert_fixtures_listed(
        "kafka",
        FIXTURES.iter().map(|f| f.0),
    );
}

#[test]
fn every_fixture_yields_its_calls_paired_and_every_byte_counted() {
    for &(name, want, unanswered, unreplied) in FIXTURES {
        let f = load(name);
        let (calls, summary) = run(&f, None);
        let got: Vec<String> = calls
            .iter()
            .map(|c| {
                assert_eq!(c.l7.proto, Protocol::Kafka);
                format!(
                    "{} {} {} {}",
                    c.l7.method,
                    c.l7.version,
                    c.l7.resource,
                    c.l7.status_text.as_deref().unwrap_or("-")
                )
            })
            .collect();
        assert_eq!(got, want, "{name}");
        let p = summary.parse;
        assert_eq!(
            (
                p.damaged_messages,
                p.desyncs,
                p.unparsed_bytes,
                p.unmatched_responses
            ),
            (0, 0, 0, 0),
            "{name}"
        );
        assert_eq!(p.unanswered_requests, unanswered, "{name}");
        assert_eq!(p.unreplied_requests, unreplied, "{name}");
        // Every byte of the connection is in a call, but for requests without a response.
        let in_calls: u64 = calls.iter().map(|c| c.l7.req.bytes + c.l7.resp.bytes).sum();
        let all: u64 = f.entries.iter().map(|e| e.total_len).sum();
        if unanswered + unreplied == 0 {
            assert_eq!(in_calls, all, "{name}");
        } else {
            assert!(in_calls < all, "{name}");
        }
    }
}

/// The details of Produce and Fetch: records from the RecordBatch headers, the long poll's
/// `max_wait_ms`, the client id.
#[test]
fn produce_and_fetch_count_records() {
    let detail = |c: &crate::call::Call, k: &str| {
        c.l7.details.iter().find(|d| d.0 == k).map(|d| d.1.clone())
    };
    let (calls, _) = run(&load("kcat_produce.client.seg"), None);
    let p = calls.iter().find(|c| c.l7.method == "produce").unwrap();
    for (k, v) in [
        ("records", "3"),
        ("partitions", "1"),
        ("acks", "-1"),
        ("codec", "none"),
        ("client_id", "rdkafka"),
    ] {
        assert_eq!(detail(p, k).as_deref(), Some(v), "{k}");
    }
    // librdkafka compresses a batch worth it: the codec from the batch's attributes, the
    // records from its header (never decompressed).
    let (calls, _) = run(&load("kcat_zstd.client.seg"), None);
    let p = calls.iter().find(|c| c.l7.method == "produce").unwrap();
    assert_eq!(detail(p, "codec").as_deref(), Some("zstd"));
    assert_eq!(detail(p, "records").as_deref(), Some("300"));
    let (calls, _) = run(&load("java_produce.client.seg"), None);
    let p = calls.iter().find(|c| c.l7.method == "produce").unwrap();
    assert_eq!(detail(p, "records").as_deref(), Some("3"));
    assert_eq!(detail(p, "client_id").as_deref(), Some("console-producer"));
    for name in ["kcat_consume.client.seg", "java_consume.client.seg"] {
        let (calls, _) = run(&load(name), None);
        let fetched: Vec<(Option<String>, Option<String>)> = calls
            .iter()
            .filter(|c| c.l7.method == "fetch")
            .map(|c| (detail(c, "records"), detail(c, "max_wait_ms")))
            .collect();
        assert_eq!(fetched[0], (Some("3".into()), Some("500".into())), "{name}");
        assert!(
            fetched[1..].iter().all(|f| f.0.as_deref() == Some("0")),
            "{name}"
        );
    }
}

/// Cut at a small snaplen, sizes and pairing stay exact; what was not seen is not reported.
#[test]
fn a_small_snaplen_keeps_sizes_and_pairs() {
    for &(name, want, _, _) in FIXTURES {
        let f = load(name);
        let (whole, _) = run(&f, None);
        let (cut, summary) = run(&f, Some(64));
        assert_eq!(cut.len(), want.len(), "{name}");
        for (a, b) in whole.iter().zip(&cut) {
            assert_eq!(a.l7.method, b.l7.method, "{name}");
            assert_eq!(
                (a.l7.req.bytes, a.l7.resp.bytes),
                (b.l7.req.bytes, b.l7.resp.bytes)
            );
            // A status is the uncut one's or unknown, never another.
            assert!(
                b.l7.status_text.is_none() || b.l7.status_text == a.l7.status_text,
                "{name}: {:?} vs {:?}",
                a.l7.status_text,
                b.l7.status_text
            );
        }
        assert_eq!(summary.parse.damaged_messages, 0, "{name}");
    }
}
