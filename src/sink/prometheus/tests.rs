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

/// The metric names of a page with a row of every kind of call on both sides and every
/// optional gauge set.
fn every_name_exported() -> std::collections::BTreeSet<String> {
    use crate::event::Direction;
    use crate::protocols::Protocol;
    let mut t = EndpointTable::default().with_history(crate::aggregate::endpoints::WINDOW_1M_NS);
    for p in Protocol::all() {
        for dir in [Direction::Egress, Direction::Ingress] {
            let mut c = call("svc", 1, "GET", "/x", 5_000);
            c.l7.proto = p;
            c.l7.request_dir = dir;
            let c = crate::call::Call::new(c.l7, 1, 1, "svc".into(), 1, c.local, c.peer);
            t.observe(&c);
        }
    }
    t.end_interval(1_000_000_000);
    let w = t.windows();
    let model = Model {
        rows: w.since_start.into_iter().zip(w.latency_bins).collect(),
        rss_bytes: Some(1),
        cpu_ratio: Some(0.1),
        bpf_cpu_ratio: Some(0.1),
        ..Model::default()
    };
    let page = render(model);
    page.text
        .lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| l.split(['{', ' ']).next())
        .map(str::to_owned)
        .collect()
}

/// docs/grafana/ebtop.json (docs/fleet.md) queries only metrics ebtop exports: every metric
/// selector in its expressions (a name followed by `{` or `[`) is a series of the page.
#[test]
fn the_grafana_dashboard_queries_only_metrics_ebtop_exports() {
    let exported = every_name_exported();
    assert!(exported.contains("http_server_request_duration_seconds_bucket"));
    assert!(exported.contains("dns_lookup_duration_seconds_bucket"));
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/docs/grafana/ebtop.json");
    let dash: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    let mut exprs = Vec::new();
    for p in dash["panels"].as_array().unwrap() {
        for t in p["targets"].as_array().unwrap() {
            exprs.push(t["expr"].as_str().unwrap().to_owned());
        }
    }
    for t in dash["templating"]["list"].as_array().unwrap() {
        if let Some(q) = t["query"]
            .as_str()
            .filter(|q| q.starts_with("label_values("))
        {
            let metric = q["label_values(".len()..].split(',').next().unwrap();
            exprs.push(format!("{metric}{{}}"));
        }
    }
    assert!(exprs.len() >= 10);
    for e in &exprs {
        let bytes = e.as_bytes();
        let mut selectors = 0;
        let mut i = 0;
        while i < bytes.len() {
            if bytes[i].is_ascii_alphabetic() || bytes[i] == b'_' {
                let start = i;
                while i < bytes.len() && (bytes[i].is_ascii_alphanumeric() || bytes[i] == b'_') {
                    i += 1;
                }
                if matches!(bytes.get(i), Some(b'{' | b'[')) {
                    let name = &e[start..i];
                    assert!(exported.contains(name), "{name} (in {e}) is not exported");
                    selectors += 1;
                }
            } else {
                i += 1;
            }
        }
        assert!(selectors > 0, "no metric in {e}");
    }
}

/// A scan of distinct paths: its pages past the first few are one `{…}` series, and the
/// counter of segment-folded calls is that series' count, as the table counted it.
#[test]
fn a_scan_is_one_folded_series_and_its_calls_are_counted() {
    let mut t = EndpointTable::default().with_history(crate::aggregate::endpoints::WINDOW_1M_NS);
    for i in 0..500 {
        t.observe(&call("curl", 7, "GET", &format!("/missing/page{i}"), 5_000));
    }
    t.end_interval(1_000_000_000);
    let w = t.windows();
    let model = Model {
        rows: w.since_start.into_iter().zip(w.latency_bins).collect(),
        segment_folded_calls: t.stats().segment_folded_calls,
        ..Model::default()
    };
    let page = render(model);
    let folded = sample(
        &page.openmetrics,
        "http_client_request_duration_seconds_count",
        &["http_route=\"/missing/{…}\""],
    )
    .unwrap();
    let fold_after = crate::aggregate::fold::FOLD_AFTER as f64;
    assert_eq!(folded, 500.0 - fold_after);
    let counter = page
        .text
        .lines()
        .find_map(|l| l.strip_prefix("ebtop_endpoints_segment_folded_calls_total "))
        .unwrap();
    assert_eq!(counter.parse::<f64>().unwrap(), folded);
}
