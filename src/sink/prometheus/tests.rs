use super::*;
use crate::aggregate::endpoints::tests::call;
use crate::aggregate::EndpointTable;
use crate::protocols::Outcome;

/// A model from a real endpoint table: `calls` (resource, latency ns, outcome) by one client.
fn model_of(calls: &[(&str, u64, Outcome)]) -> Model {
    let mut t = EndpointTable::default().with_history(crate::aggregate::endpoints::WINDOW_1M_NS);
    for &(resource, ns, outcome) in calls {
        let mut c = call("curl", 7, "GET", resource, ns);
        c.l7.outcome = outcome;
        t.observe(&c);
    }
    t.end_interval(1_000_000_000);
    let w = t.windows();
    Model {
        rows: w.since_start.into_iter().zip(w.latency_bins).collect(),
        ..Model::default()
    }
}

/// The value of the sample `name{…}` whose labels include every one of `labels`.
fn sample(page: &str, name: &str, labels: &[&str]) -> Option<f64> {
    page.lines().find_map(|l| {
        let (series, value) = l.rsplit_once(' ')?;
        let rest = series.strip_prefix(name)?;
        (rest.starts_with('{') && labels.iter().all(|x| rest.contains(x)))
            .then(|| value.parse().ok())
            .flatten()
    })
}

#[test]
fn a_latency_histogram_per_endpoint_whose_buckets_count_every_call_once() {
    let mut calls = Vec::new();
    // 1.5 µs … 3 s, two decades apart, and a server error.
    for (i, ns) in [1_500u64, 150_000, 15_000_000, 3_000_000_000]
        .iter()
        .enumerate()
    {
        for _ in 0..=i {
            calls.push(("/a", *ns, Outcome::Ok));
        }
    }
    calls.push(("/a", 40_000, Outcome::ServerError));
    let sum_ns: u64 = calls.iter().map(|c| c.1).sum();
    let page = render(model_of(&calls));
    let name = "http_client_request_duration_seconds";
    let labels = [
        "process_executable_name=\"curl\"",
        "network_protocol_version=\"1.1\"",
        "http_request_method=\"GET\"",
        "http_route=\"/a\"",
    ];
    let n = calls.len() as f64;
    assert_eq!(
        sample(&page.openmetrics, &format!("{name}_count"), &labels),
        Some(n)
    );
    let sum = sample(&page.openmetrics, &format!("{name}_sum"), &labels).unwrap();
    assert!((sum - sum_ns as f64 / 1e9).abs() < 1e-9, "{sum}");
    // Cumulative buckets: never decreasing, +Inf the count; each call under the first bound
    // at or above its latency (the test's latencies are far from the bounds).
    let mut last = 0.0;
    for k in FIRST_BOUND_LOG2..=LAST_BOUND_LOG2 {
        let bound_ns = 1u64 << k;
        let want = calls.iter().filter(|c| c.1 < bound_ns).count() as f64;
        let got = page
            .openmetrics
            .lines()
            .filter(|l| l.starts_with(&format!("{name}_bucket{{")))
            .nth((k - FIRST_BOUND_LOG2) as usize)
            .and_then(|l| l.rsplit_once(' '))
            .map(|(_, v)| v.parse::<f64>().unwrap())
            .unwrap();
        assert_eq!(got, want, "bucket 2^{k} ns");
        assert!(got >= last);
        last = got;
    }
    assert_eq!(
        sample(
            &page.openmetrics,
            &format!("{name}_bucket"),
            &["le=\"+Inf\""]
        ),
        Some(n)
    );
    // Calls by outcome, exact.
    let outcome = |o: &str| {
        sample(
            &page.openmetrics,
            "ebtop_calls_total",
            &["resource=\"/a\"", &format!("outcome=\"{o}\"")],
        )
    };
    assert_eq!(outcome("ok"), Some(n - 1.0));
    assert_eq!(outcome("server_error"), Some(1.0));
    assert_eq!(outcome("unknown"), Some(0.0));
    // The same numbers in the classic text format; OpenMetrics ends with # EOF.
    assert_eq!(
        sample(&page.text, &format!("{name}_count"), &labels),
        Some(n)
    );
    assert!(page.openmetrics.ends_with("# EOF\n"));
    assert!(page.openmetrics.contains(&format!("# UNIT {name} seconds")));
}

#[test]
fn label_values_from_payloads_are_escaped_and_series_stay_apart() {
    let page = render(model_of(&[
        ("/q\"x\\y", 5_000, Outcome::Ok),
        ("/q\nx", 5_000, Outcome::Ok),
    ]));
    for text in [&page.openmetrics, &page.text] {
        assert!(text.contains(r#"http_route="/q\"x\\y""#), "{text}");
        assert!(text.contains(r#"http_route="/q\nx""#), "{text}");
        // No raw newline inside a sample: each line is a comment or starts with a name.
        for l in text.lines().filter(|l| !l.starts_with('#')) {
            let name = l.split(['{', ' ']).next().unwrap();
            assert!(
                !name.is_empty() && name.bytes().all(|c| c.is_ascii_lowercase() || c == b'_'),
                "{l:?}"
            );
        }
    }
}

#[test]
fn every_kind_of_call_is_apart_from_the_others_under_a_shared_metric() {
    use crate::protocols::Protocol;
    // Kinds that share a histogram must be told apart by a system label of the same name.
    for a in Protocol::all() {
        for b in Protocol::all() {
            let (ma, mb) = (a.kind().metrics, b.kind().metrics);
            if a == b {
                continue;
            }
            for (na, nb) in [(ma.server, mb.server), (ma.client, mb.client)] {
                if na != nb {
                    continue;
                }
                let (Some(sa), Some(sb)) = (ma.system, mb.system) else {
                    panic!("{a:?} and {b:?} share {na} without a system label");
                };
                assert_eq!(sa.0, sb.0, "{a:?} {b:?}");
                assert_ne!(sa.1, sb.1, "{a:?} {b:?}");
                assert_eq!((ma.method, ma.resource), (mb.method, mb.resource));
            }
            assert!(na_ok(ma.server) && na_ok(ma.client), "{a:?}");
        }
    }
    fn na_ok(name: &str) -> bool {
        name.ends_with("_seconds")
            && name
                .bytes()
                .all(|c| c.is_ascii_lowercase() || c == b'_' || c.is_ascii_digit())
    }
}

fn get(addr: SocketAddr, request: &str) -> String {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s.write_all(request.as_bytes()).unwrap();
    let mut out = String::new();
    let _ = s.read_to_string(&mut out);
    out
}

#[test]
fn the_server_answers_scrapes_in_either_format_and_refuses_the_rest() {
    let e = PrometheusExporter::serve("127.0.0.1:0").unwrap();
    let addr = e.local_addr();
    let empty = get(addr, "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n");
    assert!(empty.starts_with("HTTP/1.1 200 OK"), "{empty}");
    assert!(!empty.contains("http_route"));
    *e.page.lock().unwrap() = Arc::new(render(model_of(&[("/a", 5_000, Outcome::Ok)])));
    let text = get(addr, "GET /metrics HTTP/1.1\r\n\r\n");
    assert!(
        text.contains("Content-Type: text/plain; version=0.0.4"),
        "{text}"
    );
    assert!(text.contains("http_route=\"/a\""));
    let om = get(
        addr,
        "GET /metrics HTTP/1.1\r\nAccept: application/openmetrics-text;version=1.0.0,text/plain;q=0.5\r\n\r\n",
    );
    assert!(om.contains("application/openmetrics-text"), "{om}");
    assert!(om.ends_with("# EOF\n"));
    assert!(get(addr, "GET /other HTTP/1.1\r\n\r\n").starts_with("HTTP/1.1 404"));
    assert!(get(addr, "POST /metrics HTTP/1.1\r\n\r\n").starts_with("HTTP/1.1 405"));
    let huge = format!("GET /metrics HTTP/1.1\r\nX: {}\r\n\r\n", "a".repeat(20_000));
    assert!(get(addr, &huge).starts_with("HTTP/1.1 431"));
}

/// Scrapers that connect and send nothing hold only their own threads (at most
/// MAX_SCRAPERS); a scrape after their timeout is answered.
#[test]
fn silent_scrapers_cannot_stop_the_server() {
    let e = PrometheusExporter::serve("127.0.0.1:0").unwrap();
    let addr = e.local_addr();
    let silent: Vec<_> = (0..MAX_SCRAPERS * 2)
        .map(|_| TcpStream::connect(addr).unwrap())
        .collect();
    let t = std::time::Instant::now();
    loop {
        let r = get(addr, "GET /metrics HTTP/1.1\r\n\r\n");
        if r.starts_with("HTTP/1.1 200") {
            break;
        }
        assert!(
            t.elapsed() < SCRAPE_TIMEOUT * 3,
            "no answer {:?} after silent scrapers connected",
            t.elapsed()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    drop(silent);
}
