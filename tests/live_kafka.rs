//! Live Kafka: a real Kafka 4.4.0 broker (KRaft, from Maven Central's jars: scripts/kafka) and
//! real clients — kcat (librdkafka 2.0.2: Produce v7, Fetch v11) and the Java 4.4 console
//! producer and consumer (Produce v13 with topic ids, Fetch v18) — traced by ebtop on both
//! ends. Ground truth is the broker's request log (`kafka.request.logger` at DEBUG: one line
//! per request with its API key, version and correlation id): per API and version, ebtop's
//! client calls and its server calls are exactly the requests the broker completed on the
//! clients' listener, less the Fetches a client left in flight as it exited (counted as
//! unanswered) and an acks=0 Produce (no response: counted as unreplied, no call). Topic names must be right for every Produce and Fetch, the topic ids of
//! the Java clients' included. One broker serves the whole file (its start is most of the
//! test's time). Needs root, Java 17 and kcat (scripts/deps installs them); fails, never
//! skips, without them.

mod common;

use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::{assert_hops, calls, free_tcp_port, require_root, Ebtop, Peer};
use serde_json::Value;

/// Where scripts/kafka caches the broker's jars (it prints the folder).
fn kafka_lib() -> PathBuf {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/kafka");
    let out = Command::new(&script)
        .stderr(Stdio::inherit())
        .output()
        .unwrap_or_else(|e| panic!("{}: {e}", script.display()));
    assert!(
        out.status.success(),
        "scripts/kafka could not fetch the Kafka jars (it needs maven and Maven Central: scripts/deps)"
    );
    PathBuf::from(String::from_utf8(out.stdout).unwrap().trim())
}

fn require_tool(name: &str) {
    let found = Command::new("sh")
        .args(["-c", &format!("command -v {name}")])
        .stdout(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    assert!(
        found,
        "{name} is missing: scripts/deps installs it (openjdk-17-jre-headless, maven, kcat)"
    );
}

/// Two free ports in a row (the broker's listener and its controller's).
fn free_port_pair() -> u16 {
    loop {
        let p = free_tcp_port();
        if p < u16::MAX && std::net::TcpListener::bind(("127.0.0.1", p + 1)).is_ok() {
            return p;
        }
    }
}

struct Broker {
    port: u16,
    dir: tempfile::TempDir,
    _child: Peer,
}

impl Broker {
    fn start() -> Broker {
        let dir = tempfile::tempdir().unwrap();
        let port = free_port_pair();
        let log = std::fs::File::create(dir.path().join("broker.out")).unwrap();
        let child = Command::new(Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/kafka"))
            .arg("broker")
            .arg(dir.path())
            .arg(port.to_string())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            // The broker's own process group: the script execs java, killed on drop.
            .spawn()
            .expect("scripts/kafka runs");
        let child = Peer(child);
        let deadline = Instant::now() + Duration::from_secs(120);
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(
                Instant::now() < deadline,
                "the Kafka broker did not listen within 120 s: {}",
                std::fs::read_to_string(dir.path().join("broker.out")).unwrap_or_default()
            );
            std::thread::sleep(Duration::from_millis(200));
        }
        Broker {
            port,
            dir,
            _child: child,
        }
    }

    fn addr(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    /// The requests the broker completed on the clients' listener: (API name in lower case,
    /// version) of each, from its request log.
    fn requests(&self) -> Vec<(String, u64)> {
        let text = std::fs::read_to_string(self.dir.path().join("requests.log")).unwrap();
        let listener = format!("127.0.0.1:{}-", self.port);
        text.lines()
            .filter_map(|l| l.strip_prefix("Completed request:"))
            .map(|j| serde_json::from_str::<Value>(j).expect("a request log line is JSON"))
            .filter(|v| {
                v["connection"]
                    .as_str()
                    .is_some_and(|c| c.starts_with(&listener))
            })
            .map(|v| {
                let h = &v["requestHeader"];
                (
                    h["requestApiKeyName"].as_str().unwrap().to_lowercase(),
                    h["requestApiVersion"].as_u64().unwrap(),
                )
            })
            .collect()
    }
}

/// Runs a client to its end (at most 120 s), `input` on its stdin.
fn run_client(mut cmd: Command, input: &str, what: &str) {
    let mut child = cmd
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("{what}: {e}"));
    child
        .stdin
        .take()
        .unwrap()
        .write_all(input.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "{what} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

fn java(lib: &Path, class: &str, args: &[&str]) -> Command {
    let mut c = Command::new("java");
    c.args(["-XX:TieredStopAtLevel=1", "-XX:+UseSerialGC", "-cp"])
        .arg(format!("{}/*", lib.display()))
        .arg(class)
        .args(args);
    c
}

/// (method, version) → count, of `calls` on `side`.
fn by_api(calls: &[&Value], side: &str) -> BTreeMap<(String, u64), usize> {
    let mut m = BTreeMap::new();
    for c in calls.iter().filter(|c| c["side"] == side) {
        let v: u64 = c["version"].as_str().unwrap().parse().unwrap();
        *m.entry((c["method"].as_str().unwrap().to_owned(), v))
            .or_default() += 1;
    }
    m
}

#[test]
fn kafka_calls_equal_the_broker_request_log() {
    require_root();
    require_tool("java");
    require_tool("kcat");
    let t0 = Instant::now();
    let lib = kafka_lib();
    let broker = Broker::start();
    let setup = t0.elapsed();
    let addr = broker.addr();
    let port = broker.port.to_string();

    let ebtop = Ebtop::start(&["--json", "--proto", "kafka", "--port", &port]);
    let t1 = Instant::now();
    // kcat: Produce v7 (zstd batches), then a Fetch v11 consumer that exits at the end.
    let mut kcat = Command::new("kcat");
    kcat.args(["-P", "-b", &addr, "-t", "kc-orders", "-z", "zstd"]);
    run_client(kcat, "alpha\nbeta\ngamma\n", "kcat producer");
    // acks=0: a Produce the broker answers with nothing (one request: librdkafka sends a
    // one-record batch at the exit flush).
    let mut kcat = Command::new("kcat");
    kcat.args(["-P", "-b", &addr, "-t", "kc-orders", "-X", "acks=0"]);
    run_client(kcat, "delta\n", "kcat producer with acks=0");
    let mut kcat = Command::new("kcat");
    kcat.args([
        "-C",
        "-b",
        &addr,
        "-t",
        "kc-orders",
        "-o",
        "beginning",
        "-e",
    ]);
    run_client(kcat, "", "kcat consumer");
    // The Java console clients: Produce v13 (topic ids), Fetch v18, a consumer group.
    run_client(
        java(
            &lib,
            "org.apache.kafka.tools.ConsoleProducer",
            &["--bootstrap-server", &addr, "--topic", "jv-payments"],
        ),
        "one\ntwo\nthree\n",
        "Java console producer",
    );
    run_client(
        java(
            &lib,
            "org.apache.kafka.tools.consumer.ConsoleConsumer",
            &[
                "--bootstrap-server",
                &addr,
                "--topic",
                "jv-payments",
                "--from-beginning",
                "--max-messages",
                "3",
                "--group",
                "ebtop-test",
            ],
        ),
        "",
        "Java console consumer",
    );
    let clients = t1.elapsed();
    let lines = ebtop.stop();
    let calls = calls(&lines);
    let want: BTreeMap<(String, u64), usize> =
        broker
            .requests()
            .into_iter()
            .fold(BTreeMap::new(), |mut m, k| {
                *m.entry(k).or_default() += 1;
                m
            });
    assert!(!want.is_empty(), "the broker logged no request");
    // Each side's calls are the broker's requests, but for a Fetch a client left in flight
    // when it exited (kcat -e does): the broker completes and logs it, yet the client never
    // reads its response. Those are counted as unanswered.
    let mut unanswered = 0;
    let mut left_per_side = Vec::new();
    for side in ["client", "server"] {
        let got = by_api(&calls, side);
        assert!(
            got.keys().all(|k| want.contains_key(k)),
            "{side}: {got:?} vs {want:?}"
        );
        let mut left = BTreeMap::new();
        for (k, n) in &want {
            let g = got.get(k).copied().unwrap_or(0);
            assert!(g <= *n, "{side} {k:?}: {g} calls, {n} requests: {got:?}");
            if k.0 == "produce" && k.1 == 7 {
                // The acks=0 Produce: no call on either side.
                assert_eq!(n - g, 1, "{side}: {got:?} vs the broker's {want:?}");
            } else if g < *n {
                assert_eq!(k.0, "fetch", "{side}: {got:?} vs the broker's {want:?}");
                left.insert(k.clone(), n - g);
                unanswered += n - g;
            }
        }
        left_per_side.push(left);
    }
    // Whether the broker's write of that response still went through before the client's
    // close is a race: the server side may have it.
    for (k, n) in &left_per_side[1] {
        assert!(
            left_per_side[0].get(k).is_some_and(|c| c >= n),
            "in flight at the end, client {:?} vs server {:?}",
            left_per_side[0],
            left_per_side[1]
        );
    }
    // Both ends are on this host: every call is one hop (issue 50), but the server calls of
    // those Fetches whose client exited before reading them.
    let unread: usize =
        left_per_side[0].values().sum::<usize>() - left_per_side[1].values().sum::<usize>();
    let hops = assert_hops(&lines, broker.port, unread);
    assert_eq!(
        hops,
        want.values().sum::<usize>() - 1 - left_per_side[0].values().sum::<usize>(),
        "every request the broker logged, but the acks=0 one and those left unread"
    );
    let summary = lines.last().unwrap();
    assert_eq!(summary["type"], "summary");
    assert_eq!(
        summary["parse"]["unanswered_requests"], unanswered as u64,
        "{summary}"
    );
    assert_eq!(
        summary["parse"]["unreplied_requests"], 2,
        "acks=0, both sides: {summary}"
    );
    for counter in [
        "damaged_messages",
        "desyncs",
        "unmatched_responses",
        "unparsed_bytes",
    ] {
        assert_eq!(summary["parse"][counter], 0, "{counter}: {summary}");
    }

    // Topic names, the Java clients' topic ids resolved.
    let resources = |method: &str, version: &str| -> Vec<&str> {
        calls
            .iter()
            .filter(|c| c["method"] == method && c["version"] == version)
            .map(|c| c["resource"].as_str().unwrap())
            .collect()
    };
    for (method, version, topic) in [
        ("produce", "7", "kc-orders"),
        ("produce", "13", "jv-payments"),
        ("fetch", "11", "kc-orders"),
        ("fetch", "18", "jv-payments"),
    ] {
        let r = resources(method, version);
        let named = format!("{method} {topic}");
        assert!(
            !r.is_empty() && r.iter().all(|x| *x == named || *x == method),
            "{method} v{version}: {r:?}"
        );
        assert!(r.contains(&named.as_str()), "{method} v{version}: {r:?}");
    }
    // Every produced record with a response is counted, on both sides (kcat's 3, Java's 3).
    for side in ["client", "server"] {
        let produced: u64 = calls
            .iter()
            .filter(|c| c["side"] == side && c["method"] == "produce")
            .map(|c| c["records"].as_str().unwrap().parse::<u64>().unwrap())
            .sum();
        assert_eq!(produced, 6, "{side}");
        let fetched: u64 = calls
            .iter()
            .filter(|c| c["side"] == side && c["method"] == "fetch")
            .filter_map(|c| c["records"].as_str())
            .map(|n| n.parse::<u64>().unwrap())
            .sum();
        if side == "client" {
            // Each consumer read its topic's records once: kcat's 4 (the acks=0 one too),
            // Java's 3.
            assert_eq!(fetched, 7, "{side}: records fetched");
        }
    }
    // The broker sends record data with sendfile (its bytes are never copied): a Fetch
    // response whose records went unseen has no record count, never a guessed one.
    for c in calls
        .iter()
        .filter(|c| c["side"] == "server" && c["method"] == "fetch")
    {
        assert!(c["truncated"] == true || c["records"].is_string(), "{c}");
        if c["truncated"] == true {
            assert!(c["records"].is_null(), "{c}");
        }
    }
    // Every call of an API ebtop reads has a known status.
    for c in &calls {
        assert_ne!(c["outcome"], "unknown", "{c}");
    }
    old_connection_is_picked_up_on_both_sides(&broker, &lib);
    eprintln!(
        "kafka: setup (jars + broker) {:.1} s, clients {:.1} s, {} requests",
        setup.as_secs_f64(),
        clients.as_secs_f64(),
        want.values().sum::<usize>()
    );
}

/// A producer connected before ebtop started (production's long-lived connections), sending
/// batches above 4 KiB: the broker reads each request's length apart from its body, so the
/// first read ebtop sees on its side is a body without a length (kafka/infer.h takes those
/// mid-connection) and the parser picks up at the next length read alone, of any size. Both sides
/// count the same Produce requests but for those in flight when ebtop started or stopped (at
/// most `max.in.flight.requests.per.connection`, 5, at each edge); nothing desyncs; what went
/// by before a side picked up is counted as unparsed. User space takes the connection's
/// protocol from the kernel's recognition where its own first-payload rule cannot
/// (conntrack's `detect`).
fn old_connection_is_picked_up_on_both_sides(broker: &Broker, lib: &Path) {
    let addr = broker.addr();
    let port = broker.port.to_string();
    let mut producer = java(
        lib,
        "org.apache.kafka.tools.ProducerPerformance",
        &[
            "--bootstrap-server",
            &addr,
            "--topic",
            "old-conn",
            "--num-records",
            "100000",
            "--throughput",
            "1000",
            "--record-size",
            "100",
            "--command-property",
            "acks=1",
            "linger.ms=100",
            "client.id=old-conn",
        ],
    );
    let producer = Peer(
        producer
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("the Java producer runs"),
    );
    // Connected and producing before ebtop starts: its requests are in the broker's log.
    let deadline = Instant::now() + Duration::from_secs(120);
    let produced = || {
        std::fs::read_to_string(broker.dir.path().join("requests.log"))
            .unwrap_or_default()
            .lines()
            .filter(|l| l.contains("\"clientId\":\"old-conn\"") && l.contains("PRODUCE"))
            .count()
    };
    while produced() < 10 {
        assert!(Instant::now() < deadline, "the producer never produced");
        std::thread::sleep(Duration::from_millis(200));
    }
    let ebtop = Ebtop::start(&["--json", "--proto", "kafka", "--port", &port]);
    std::thread::sleep(Duration::from_secs(6));
    let lines = ebtop.stop();
    drop(producer);
    let calls = calls(&lines);
    let produce = |side: &str| {
        calls
            .iter()
            .filter(|c| c["side"] == side && c["method"] == "produce")
            .count()
    };
    let (client, server) = (produce("client"), produce("server"));
    assert!(
        server >= 20 && client.abs_diff(server) <= 10,
        "client {client}, server {server} Produce calls"
    );
    // Batches of ~100 records (linger 100 ms at 1,000 records/s): requests far above the
    // 4 KiB a connection's first length read alone is taken at.
    assert!(
        calls
            .iter()
            .any(|c| c["method"] == "produce" && c["req_bytes"].as_u64() > Some(4096)),
        "no Produce request above 4 KiB"
    );
    let summary = lines.last().unwrap();
    for counter in ["damaged_messages", "desyncs"] {
        assert_eq!(summary["parse"][counter], 0, "{counter}: {summary}");
    }
    // What went by before each side picked up is counted unparsed: the body of the request
    // whose length came before ebtop (and its response): at most one request's bytes and a
    // response's, on the broker's side.
    let largest = calls
        .iter()
        .filter_map(|c| c["req_bytes"].as_u64())
        .max()
        .unwrap_or(0);
    let unparsed = summary["parse"]["unparsed_bytes"].as_u64().unwrap();
    assert!(unparsed <= 2 * largest, "{unparsed} unparsed: {summary}");
}
