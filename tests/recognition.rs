//! Protocol recognition without false positives: the kernel's rule (src/bpf/infer.h, run with
//! BPF_PROG_TEST_RUN: the code the capture programs load) and user space's `protocols::detect`
//! on a labelled corpus of first payloads — captured from real clients and servers
//! (tests/fixtures/recognition/corpus.tsv, made by capture.py there) plus rows written from the
//! specifications and rows placed at the rules' edges (corpus-spec.tsv) — and on random bytes.
//! The confusion matrix must have nothing off its diagonal. Needs root (loads BPF).

mod common;

use std::collections::BTreeMap;

use ebtop::protocols::{detect, Protocol};
use ebtop::xorshift::XorShift;

/// `enum ebtop_l7_proto` (src/bpf/ebtop.h).
const KERNEL_UNKNOWN: u8 = 0;
/// The kernel recognises TLS records (their ciphertext is counted, never copied); user space
/// never sees ciphertext, so `detect` knows no TLS.
const KERNEL_TLS: u8 = 8;

/// What the kernel must say of a row labelled `label`: its protocol's id, TLS's, or unknown.
fn kernel_expected(label: &str) -> u8 {
    if label == "tls" {
        return KERNEL_TLS;
    }
    supported(label)
        .and_then(|p| p.kernel_id())
        .unwrap_or(KERNEL_UNKNOWN)
}

struct Row {
    label: String,
    origin: String,
    /// Who sent these bytes first on their connection: "client" or "server".
    speaker: String,
    bytes: Vec<u8>,
    /// From a real program (corpus.tsv), not written by hand.
    real: bool,
    /// Sent on a datagram socket (its origin says `udp`): the kernel's rule is told so.
    dgram: bool,
}

fn load(file: &str, real: bool) -> Vec<Row> {
    let path = format!(
        "{}/tests/fixtures/recognition/{file}",
        env!("CARGO_MANIFEST_DIR")
    );
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
    text.lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
        .map(|l| {
            let f: Vec<&str> = l.split('\t').collect();
            assert_eq!(f.len(), 4, "{path}: bad row {l:?}");
            let hex = f[3];
            let bytes = (0..hex.len())
                .step_by(2)
                .map(|i| u8::from_str_radix(&hex[i..i + 2], 16).expect("hex"))
                .collect();
            Row {
                label: f[0].to_owned(),
                origin: f[1].to_owned(),
                speaker: f[2].to_owned(),
                bytes,
                real,
                dgram: f[1].to_ascii_lowercase().contains("udp"),
            }
        })
        .collect()
}

fn corpus() -> Vec<Row> {
    let mut rows = load("corpus.tsv", true);
    rows.extend(load("corpus-spec.tsv", false));
    rows
}

/// Protocols user space recognises whose kernel rule (infer.h) is not written yet: the kernel
/// leaves their first payloads unknown (never another protocol), user space must recognise them.
const KERNEL_RULE_PENDING: &[Protocol] = &[];

/// The protocol a label names, if ebtop parses it.
fn supported(label: &str) -> Option<Protocol> {
    Protocol::from_name(match label {
        "http1" => "http",
        other => other,
    })
}

#[test]
fn no_first_payload_is_taken_for_another_protocol() {
    common::require_root();
    let rows = corpus();
    let labels: std::collections::BTreeSet<&str> = rows.iter().map(|r| r.label.as_str()).collect();
    for needed in [
        "http1", "redis", "tls", "ssh", "postgres", "mysql", "dns", "http2",
    ] {
        assert!(labels.contains(needed), "the corpus has no {needed} row");
    }
    // (label, what recognised it) → rows; printed whole if anything is off the diagonal.
    let mut matrix: BTreeMap<(String, String), usize> = BTreeMap::new();
    let mut wrong = Vec::new();
    ebtop::bpf::with_kernel_infer(|kernel| {
        for r in &rows {
            let expected = supported(&r.label);
            let k = kernel(&r.bytes, r.dgram, 0).expect("test run");
            let k_proto = Protocol::all().find(|p| p.kernel_id() == Some(k));
            let user = detect(&r.bytes).map(|d| d.calls[0].proto);
            *matrix
                .entry((r.label.clone(), format!("kernel:{k}:{k_proto:?}")))
                .or_default() += 1;
            *matrix
                .entry((r.label.clone(), format!("user:{user:?}")))
                .or_default() += 1;
            // Never another protocol; unsupported ones never anything (TLS is recognised
            // by the kernel alone).
            let kernel_wrong = k != KERNEL_UNKNOWN && k != kernel_expected(&r.label);
            if kernel_wrong
                || (r.label == "tls" && r.real && k != KERNEL_TLS)
                || (user.is_some() && user != expected)
            {
                wrong.push(format!(
                    "{} ({}, {}): kernel {k} ({k_proto:?}), user space {user:?}",
                    r.label, r.origin, r.speaker
                ));
            }
            // On the other kind of socket, never another protocol either.
            let other = kernel(&r.bytes, !r.dgram, 0).expect("test run");
            if other != KERNEL_UNKNOWN && other != kernel_expected(&r.label) {
                wrong.push(format!(
                    "{} ({}, {}): kernel {other} on a {} socket",
                    r.label,
                    r.origin,
                    r.speaker,
                    if r.dgram { "stream" } else { "datagram" }
                ));
            }
            // What real clients send first is recognised by both, so capture starts at once.
            if let Some(p) = expected {
                let kernel_ok = k_proto == Some(p) || KERNEL_RULE_PENDING.contains(&p);
                if r.real && r.speaker == "client" && (!kernel_ok || user != Some(p)) {
                    wrong.push(format!(
                        "{} ({}): a real client's first bytes not recognised: kernel \
                         {k_proto:?}, user space {user:?}",
                        r.label, r.origin
                    ));
                }
            }
        }
    })
    .expect("loading the recognition test program");
    assert!(
        wrong.is_empty(),
        "confusion matrix {matrix:#?}\nwrong:\n{}",
        wrong.join("\n")
    );
}

#[test]
fn random_bytes_are_recognised_as_nothing() {
    common::require_root();
    let mut rng = XorShift(0x5eed_ebd0);
    let mut hits = Vec::new();
    ebtop::bpf::with_kernel_infer(|kernel| {
        for _ in 0..20_000 {
            let len = 1 + (rng.next() % 16) as usize;
            let bytes: Vec<u8> = (0..len).map(|_| rng.next() as u8).collect();
            let user = detect(&bytes).map(|d| d.calls[0].proto);
            for dgram in [false, true] {
                let k = kernel(&bytes, dgram, 0).expect("test run");
                if k != KERNEL_UNKNOWN || user.is_some() {
                    hits.push(format!(
                        "{bytes:02x?} (datagram: {dgram}): kernel {k}, user space {user:?}"
                    ));
                }
            }
        }
    })
    .expect("loading the recognition test program");
    assert!(
        hits.is_empty(),
        "random bytes recognised:\n{}",
        hits.join("\n")
    );
}

/// Later in a connection (position > 0) the kernel also takes a Kafka request's header read
/// without its length: a broker reads a request's length apart from its body, so on a
/// connection older than ebtop its first read may be a body. Every Kafka request of the corpus
/// with its 4-byte length cut off is Kafka there; mid-connection no row of another protocol is
/// taken for Kafka (or for anything but its own), nor are random bytes.
#[test]
fn kafka_bodies_read_alone_are_recognised_mid_connection_only() {
    common::require_root();
    let rows = corpus();
    let kafka = Protocol::from_name("kafka").and_then(|p| p.kernel_id());
    let mut wrong = Vec::new();
    let mut bodies = 0;
    ebtop::bpf::with_kernel_infer(|kernel| {
        for r in &rows {
            let mid = kernel(&r.bytes, r.dgram, 4096).expect("test run");
            if mid != KERNEL_UNKNOWN && mid != kernel_expected(&r.label) {
                wrong.push(format!(
                    "{} ({}, {}): kernel {mid} mid-connection",
                    r.label, r.origin, r.speaker
                ));
            }
            if r.label == "kafka" && r.speaker == "client" && r.bytes.len() > 4 + 10 {
                bodies += 1;
                let body = &r.bytes[4..];
                let k = kernel(body, false, 4096).expect("test run");
                if Some(k) != kafka {
                    wrong.push(format!("kafka ({}): its body alone gave {k}", r.origin));
                }
            }
        }
        let mut rng = XorShift(0x6b61_666b);
        for _ in 0..20_000 {
            let len = 1 + (rng.next() % 16) as usize;
            let bytes: Vec<u8> = (0..len).map(|_| rng.next() as u8).collect();
            let k = kernel(&bytes, false, 4096).expect("test run");
            if k != KERNEL_UNKNOWN {
                wrong.push(format!("{bytes:02x?}: kernel {k} mid-connection"));
            }
        }
    })
    .expect("loading the recognition test program");
    assert!(bodies >= 3, "the corpus has {bodies} Kafka requests");
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}
