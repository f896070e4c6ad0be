use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpListener;
use std::sync::Mutex;

use super::*;
use crate::aggregate::endpoints::tests::call;
use crate::event::Direction;
use crate::filters::Filters;
use opentelemetry_proto::tonic::collector::logs::v1::ExportLogsServiceRequest;
use opentelemetry_proto::tonic::logs::v1::LogRecord;

const TP: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

/// (path, body) of each request received.
type Requests = Mutex<Vec<(String, Vec<u8>)>>;

/// What a tiny OTLP/HTTP receiver got, each request answered 200.
struct Receiver {
    url: String,
    got: Arc<Requests>,
}

impl Receiver {
    fn start() -> Receiver {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let got = Arc::new(Mutex::new(Vec::new()));
        let kept = Arc::clone(&got);
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(stream) = stream else { return };
                let kept = Arc::clone(&kept);
                std::thread::spawn(move || serve(stream, &kept));
            }
        });
        Receiver { url, got }
    }

    fn spans(&self) -> Vec<(Resource, Span)> {
        let got = self.got.lock().unwrap();
        let mut out = Vec::new();
        for (path, body) in got.iter().filter(|(p, _)| p == "/v1/traces") {
            assert_eq!(path, "/v1/traces");
            let req = ExportTraceServiceRequest::decode(&body[..]).unwrap();
            for rs in req.resource_spans {
                for ss in rs.scope_spans {
                    assert_eq!(ss.scope.as_ref().unwrap().name, "ebtop");
                    for s in ss.spans {
                        out.push((rs.resource.clone().unwrap(), s));
                    }
                }
            }
        }
        out
    }

    fn logs(&self) -> Vec<(Resource, LogRecord)> {
        let got = self.got.lock().unwrap();
        let mut out = Vec::new();
        for (_, body) in got.iter().filter(|(p, _)| p == "/v1/logs") {
            let req = ExportLogsServiceRequest::decode(&body[..]).unwrap();
            for rl in req.resource_logs {
                for sl in rl.scope_logs {
                    assert_eq!(sl.scope.as_ref().unwrap().name, "ebtop");
                    for r in sl.log_records {
                        out.push((rl.resource.clone().unwrap(), r));
                    }
                }
            }
        }
        out
    }

    fn metrics(&self) -> Vec<ExportMetricsServiceRequest> {
        let got = self.got.lock().unwrap();
        got.iter()
            .filter(|(p, _)| p == "/v1/metrics")
            .map(|(_, b)| ExportMetricsServiceRequest::decode(&b[..]).unwrap())
            .collect()
    }
}

/// Keep-alive HTTP/1.1: each request's body (Content-Length), answered 200 with an empty body.
fn serve(stream: std::net::TcpStream, got: &Requests) {
    let mut out = stream.try_clone().unwrap();
    let mut r = BufReader::new(stream);
    loop {
        let mut line = String::new();
        if r.read_line(&mut line).unwrap_or(0) == 0 {
            return;
        }
        let path = line.split_whitespace().nth(1).unwrap_or("").to_owned();
        let mut len = 0usize;
        let mut kind = String::new();
        loop {
            let mut h = String::new();
            if r.read_line(&mut h).unwrap_or(0) == 0 {
                return;
            }
            let h = h.trim_end();
            if h.is_empty() {
                break;
            }
            let (k, v) = h.split_once(':').unwrap();
            if k.eq_ignore_ascii_case("content-length") {
                len = v.trim().parse().unwrap();
            }
            if k.eq_ignore_ascii_case("content-type") {
                kind = v.trim().to_owned();
            }
        }
        assert_eq!(kind, "application/x-protobuf");
        let mut body = vec![0; len];
        r.read_exact(&mut body).unwrap();
        got.lock().unwrap().push((path, body));
        out.write_all(
            b"HTTP/1.1 200 OK\r\nContent-Type: application/x-protobuf\r\nContent-Length: 0\r\n\r\n",
        )
        .unwrap();
    }
}

fn exporter(url: &str, mode: Mode, query_text: bool, final_wait: Duration) -> OtlpExporter {
    exporter_with(url, mode, query_text, final_wait, false)
}

fn exporter_with(
    url: &str,
    mode: Mode,
    query_text: bool,
    final_wait: Duration,
    flow_logs: bool,
) -> OtlpExporter {
    let mut e = OtlpExporter::start(OtlpOptions {
        url: url.to_owned(),
        query_text,
        mode,
        final_wait,
        flow_logs,
    })
    .unwrap();
    let mut meta = SessionMeta::this_host("live", 0, Filters::default(), 0);
    meta.host = "h1".to_owned();
    // Unix time = monotonic + 1e18: span times are the call's times shifted by it.
    meta.wall_offset_ns = 1_000_000_000_000_000_000;
    meta.start_unix_ns = 1_000_000_000_000_000_000;
    e.meta(&meta);
    e
}

fn attr<'s>(s: &'s Span, key: &str) -> Option<&'s any_value::Value> {
    s.attributes
        .iter()
        .find(|kv| kv.key == key)
        .and_then(|kv| kv.value.as_ref()?.value.as_ref())
}

fn str_attr<'s>(s: &'s Span, key: &str) -> Option<&'s str> {
    match attr(s, key)? {
        any_value::Value::StringValue(v) => Some(v),
        _ => None,
    }
}

fn int_attr(s: &Span, key: &str) -> Option<i64> {
    match attr(s, key)? {
        any_value::Value::IntValue(v) => Some(*v),
        _ => None,
    }
}

/// An HTTP server call carrying a `traceparent`, from `comm` pid `pid`.
fn server_call_with_traceparent(pid: u32) -> Call {
    let mut c = call("nginx", pid, "GET", "/users/42?token=x", 5_000);
    c.l7.request_dir = Direction::Ingress;
    c.l7.details = vec![
        ("host", "api.local:8080".to_owned()),
        ("traceparent", TP.to_owned()),
    ];
    let (local, peer) = (
        "10.0.0.1:8080".parse().unwrap(),
        "10.0.0.2:50000".parse().unwrap(),
    );
    let mut c = Call::new(c.l7, pid, pid, "nginx".into(), 1, local, peer);
    c.start_ns = 2_000;
    c.latency_ns = 5_000;
    c
}

#[test]
fn calls_become_spans_with_the_conventions_attributes_and_the_applications_trace() {
    let rx = Receiver::start();
    let mut e = exporter(&rx.url, Mode::Replay, true, FINAL_WAIT);
    e.call(&server_call_with_traceparent(10));
    // A client call without a traceparent, a server error.
    let mut client = call("curl", 11, "POST", "/orders", 7_000);
    client.l7.status = Some(503);
    client.l7.outcome = Outcome::ServerError;
    e.call(&client);
    // A PostgreSQL query with a password (query text asked for: redacted).
    let mut pg = call(
        "psql",
        12,
        "ALTER",
        "ALTER ROLE r PASSWORD 'hunter2'",
        1_000,
    );
    pg.l7.proto = Protocol::Postgres;
    pg.l7.status = None;
    e.call(&pg);
    let stats = e.finish();
    assert_eq!(
        (
            stats.spans_exported,
            stats.spans_dropped,
            stats.request_errors
        ),
        (3, 0, 0)
    );
    let spans = rx.spans();
    assert_eq!(spans.len(), 3);
    let by_name = |pid: i64| {
        spans
            .iter()
            .find(|(r, _)| {
                r.attributes.iter().any(|kv| {
                    kv.key == "process.pid"
                        && kv.value.as_ref().unwrap().value == Some(any_value::Value::IntValue(pid))
                })
            })
            .map(|(r, s)| (r, s))
            .unwrap()
    };

    let (res, s) = by_name(10);
    assert!(res.attributes.iter().any(|kv| kv.key == "host.name"
        && kv.value.as_ref().unwrap().value == Some(any_value::Value::StringValue("h1".into()))));
    let tp = TraceParent::parse(TP.as_bytes()).unwrap();
    assert_eq!(s.trace_id, tp.trace_id);
    assert_eq!(s.parent_span_id, tp.parent_id);
    assert_eq!(s.span_id.len(), 8);
    assert_eq!(s.kind, span::SpanKind::Server as i32);
    assert_eq!(s.start_time_unix_nano, 1_000_000_000_000_002_000);
    assert_eq!(s.end_time_unix_nano, 1_000_000_000_000_007_000);
    assert_eq!(s.name, "GET /users/{id}");
    assert_eq!(str_attr(s, "http.request.method"), Some("GET"));
    assert_eq!(str_attr(s, "url.path"), Some("/users/42"));
    assert_eq!(str_attr(s, "http.route"), Some("/users/{id}"));
    assert_eq!(int_attr(s, "http.response.status_code"), Some(200));
    assert_eq!(str_attr(s, "server.address"), Some("api.local"));
    assert_eq!(int_attr(s, "server.port"), Some(8080));
    assert_eq!(str_attr(s, "client.address"), Some("10.0.0.2"));
    assert_eq!(s.status, None);

    let (_, s) = by_name(11);
    assert_eq!(s.kind, span::SpanKind::Client as i32);
    assert!(s.parent_span_id.is_empty());
    assert_eq!(s.trace_id.len(), 16);
    assert_ne!(s.trace_id, tp.trace_id);
    assert_eq!(int_attr(s, "http.response.status_code"), Some(503));
    assert_eq!(str_attr(s, "error.type"), Some("503"));
    assert_eq!(
        s.status.as_ref().map(|st| st.code),
        Some(status::StatusCode::Error as i32)
    );

    let (_, s) = by_name(12);
    assert_eq!(str_attr(s, "db.system.name"), Some("postgresql"));
    assert_eq!(str_attr(s, "db.operation.name"), Some("ALTER"));
    let text = str_attr(s, "db.query.text").unwrap();
    assert!(
        !text.contains("hunter2") && text.contains("[redacted]"),
        "{text}"
    );
}

#[test]
fn query_text_is_sent_only_when_asked_for() {
    let rx = Receiver::start();
    let mut e = exporter(&rx.url, Mode::Replay, false, FINAL_WAIT);
    let mut pg = call("psql", 12, "SELECT", "SELECT * FROM t WHERE id = 42", 1_000);
    pg.l7.proto = Protocol::Postgres;
    e.call(&pg);
    assert_eq!(e.finish().spans_exported, 1);
    let spans = rx.spans();
    assert_eq!(str_attr(&spans[0].1, "db.query.text"), None);
    // The summary is the normalised statement: no literal.
    assert_eq!(
        str_attr(&spans[0].1, "db.query.summary"),
        Some("SELECT * FROM t WHERE id = ?")
    );
}

/// A collector that is not there: every span is counted as dropped, none is lost from the
/// count, and the live queue never makes a call wait (it would hang here: nothing drains
/// faster than the retries).
#[test]
fn a_collector_that_is_down_costs_counted_drops_and_never_blocks() {
    // A port that refuses: bound, then closed.
    let url = {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        format!("http://{}", l.local_addr().unwrap())
    };
    let mut e = exporter(&url, Mode::Live, false, Duration::from_millis(200));
    let calls = QUEUE_SPANS as u64 + 1000;
    for i in 0..calls {
        e.call(&call("curl", 1, "GET", "/a", i));
    }
    let stats = e.finish();
    assert_eq!(stats.spans_exported, 0);
    assert_eq!(stats.spans_dropped, calls);
    assert!(stats.request_errors >= 1, "{stats:?}");
}

#[test]
fn metrics_are_the_prometheus_series_cumulative() {
    let rx = Receiver::start();
    let mut e = exporter(&rx.url, Mode::Replay, false, FINAL_WAIT);
    let mut t = crate::aggregate::EndpointTable::default()
        .with_history(crate::aggregate::endpoints::WINDOW_1M_NS);
    for ns in [1_500u64, 150_000, 15_000_000] {
        t.observe(&call("curl", 7, "GET", "/a", ns));
    }
    t.end_interval(1_000_000_000);
    let model = Model {
        rows: {
            let w = t.windows();
            w.since_start.into_iter().zip(w.latency_bins).collect()
        },
        calls: 3,
        ..Model::default()
    };
    e.latest = Some((model, 5_000_000_000));
    let stats = e.finish();
    assert_eq!((stats.metric_exports, stats.metric_exports_failed), (1, 0));
    let got = rx.metrics();
    assert_eq!(got.len(), 1);
    let metrics = &got[0].resource_metrics[0].scope_metrics[0].metrics;
    let hist = metrics
        .iter()
        .find(|m| m.name == "http.client.request.duration")
        .unwrap();
    assert_eq!(hist.unit, "s");
    let Some(pm::metric::Data::Histogram(h)) = &hist.data else {
        panic!("{hist:?}")
    };
    assert_eq!(
        h.aggregation_temporality,
        pm::AggregationTemporality::Cumulative as i32
    );
    let p = &h.data_points[0];
    assert_eq!(p.count, 3);
    assert_eq!(p.bucket_counts.iter().sum::<u64>(), 3);
    assert_eq!(p.bucket_counts.len(), p.explicit_bounds.len() + 1);
    assert_eq!(p.time_unix_nano, 1_000_000_005_000_000_000);
    assert!(p.attributes.iter().any(|kv| kv.key == "http.route"
        && kv.value.as_ref().unwrap().value == Some(any_value::Value::StringValue("/a".into()))));
    let calls = metrics.iter().find(|m| m.name == "ebtop.calls").unwrap();
    let Some(pm::metric::Data::Sum(sum)) = &calls.data else {
        panic!()
    };
    assert!(sum.is_monotonic);
    let ok: i64 = sum
        .data_points
        .iter()
        .filter(|p| {
            p.attributes.iter().any(|kv| {
                kv.key == "outcome"
                    && kv.value.as_ref().unwrap().value
                        == Some(any_value::Value::StringValue("ok".into()))
            })
        })
        .map(|p| match p.value {
            Some(pm::number_data_point::Value::AsInt(n)) => n,
            _ => 0,
        })
        .sum();
    assert_eq!(ok, 3);
}

#[test]
fn urls_ebtop_cannot_send_to_are_refused_at_the_start() {
    assert_eq!(
        endpoint_base("http://127.0.0.1:4318/").unwrap(),
        "http://127.0.0.1:4318"
    );
    assert_eq!(
        endpoint_base("http://c:4318/v1/traces").unwrap(),
        "http://c:4318"
    );
    for bad in ["https://c:4318", "c:4318", "http://", "grpc://c:4317"] {
        assert!(endpoint_base(bad).is_err(), "{bad}");
    }
}

#[test]
fn authorities_lose_their_port() {
    assert_eq!(strip_port("a.b:80"), "a.b");
    assert_eq!(strip_port("a.b"), "a.b");
    assert_eq!(strip_port("[::1]:80"), "::1");
    assert_eq!(strip_port("::1"), "::1");
}

fn record_attr<'r>(r: &'r LogRecord, key: &str) -> Option<&'r any_value::Value> {
    r.attributes
        .iter()
        .find(|kv| kv.key == key)
        .and_then(|kv| kv.value.as_ref()?.value.as_ref())
}

#[test]
fn flow_ends_become_log_records_only_when_asked_for() {
    let rx = Receiver::start();
    let mut owned = crate::flows::test_flows::tcp(1, 300, 300, Some(2_000_000_000));
    owned.bytes_out = 1200;
    owned.rst_received = 1;
    let mut unowned = crate::flows::test_flows::tcp(2, 5, 5, Some(3_000_000_000));
    unowned.pid = None;
    unowned.comm = None;
    let mut e = exporter_with(&rx.url, Mode::Replay, false, Duration::from_secs(5), true);
    e.flow_ends(&[owned.clone(), unowned.clone()]);
    let stats = e.finish();
    assert_eq!(stats.flow_logs_exported, Some(2), "{stats:?}");
    assert_eq!(stats.flow_logs_dropped, Some(0), "{stats:?}");
    let logs = rx.logs();
    assert_eq!(logs.len(), 2);
    let (res, r) = logs
        .iter()
        .find(|(_, r)| {
            record_attr(r, "network.peer.port") == Some(&any_value::Value::IntValue(40001))
        })
        .unwrap();
    assert!(res.attributes.iter().any(|kv| kv.key == "process.pid"
        && kv.value.as_ref().unwrap().value == Some(any_value::Value::IntValue(7))));
    assert_eq!(r.event_name, "ebtop.flow.end");
    // The session's clock: monotonic + 1e18.
    assert_eq!(r.time_unix_nano, 1_000_000_002_000_000_000);
    assert_eq!(r.severity_text, "WARN", "a reset received");
    assert_eq!(
        record_attr(r, "ebtop.flow.bytes_out"),
        Some(&any_value::Value::IntValue(1200))
    );
    assert_eq!(
        record_attr(r, "ebtop.flow.bytes_in"),
        Some(&any_value::Value::IntValue(300))
    );
    assert_eq!(
        record_attr(r, "network.local.port"),
        Some(&any_value::Value::IntValue(5000))
    );
    // The flow no process was named for: the host's resource alone.
    let (res, r) = logs
        .iter()
        .find(|(_, r)| {
            record_attr(r, "network.peer.port") == Some(&any_value::Value::IntValue(40002))
        })
        .unwrap();
    assert!(res.attributes.iter().all(|kv| kv.key != "process.pid"));
    assert_eq!(r.severity_text, "INFO");

    // Without the option: nothing sent, no counts in the summary.
    let rx = Receiver::start();
    let mut e = exporter(&rx.url, Mode::Replay, false, Duration::from_secs(5));
    e.flow_ends(&[owned, unowned]);
    let stats = e.finish();
    assert_eq!(stats.flow_logs_exported, None);
    assert!(rx.logs().is_empty());
}

/// Chains as spans (issue 50): span ids are the chain's ids and parents the spans their
/// `parent_id` names; the calls of one root share a trace without an application trace (an
/// app request, its Redis call, Redis's server call of it), another root is another trace;
/// a server call that kept its own root (its children went out before its hop was known)
/// links to its caller's span in the caller's trace; an application trace id in the chain
/// is the trace of the calls that carry it.
#[test]
fn a_chain_is_one_trace_with_its_parents() {
    let rx = Receiver::start();
    let mut e = exporter(&rx.url, Mode::Replay, false, FINAL_WAIT);
    let linked = |pid: u32, side: Direction, id: u64, parent: Option<u64>, root: u64| {
        let mut c = call("app", pid, "GET", "/x", 1_000);
        c.l7.request_dir = side;
        let mut c = Call::new(
            c.l7,
            pid,
            pid,
            "app".into(),
            1,
            "127.0.0.1:8080".parse().unwrap(),
            "127.0.0.1:50000".parse().unwrap(),
        );
        (c.id, c.parent_id, c.root_id) = (id, parent, root);
        c
    };
    let (srv, cli) = (Direction::Ingress, Direction::Egress);
    let app = linked(1, srv, 10, None, 10);
    let redis_call = linked(2, cli, 11, Some(10), 10);
    let redis = linked(3, srv, 12, Some(11), 10);
    let other = linked(4, srv, 20, None, 20);
    let caller = linked(5, cli, 31, None, 31);
    let mut kept = linked(6, srv, 30, Some(31), 30);
    kept.caller = Some((31, 31));
    // A request-id, not a trace id: the root's trace.
    let mut with_request_id = linked(8, cli, 41, None, 41);
    with_request_id.trace_id = Some("req-42".into());
    // A request whose header carried the application's trace (not kept as a detail here)
    // and its call: both in that trace.
    let mut app_traced = linked(9, srv, 50, None, 50);
    app_traced.trace_id = Some("4bf92f3577b34da6a3ce929d0e0e4736".into());
    let mut in_app_trace = linked(7, cli, 51, Some(50), 50);
    in_app_trace.trace_id = app_traced.trace_id.clone();
    for c in [
        &with_request_id,
        &app_traced,
        &redis,
        &redis_call,
        &app,
        &other,
        &kept,
        &caller,
        &in_app_trace,
    ] {
        e.call(c);
    }
    assert_eq!(e.finish().spans_exported, 9);
    let spans = rx.spans();
    let by_pid = |pid: i64| -> &Span {
        spans
            .iter()
            .find(|(r, _)| {
                r.attributes.iter().any(|kv| {
                    kv.key == "process.pid"
                        && kv.value.as_ref().unwrap().value == Some(any_value::Value::IntValue(pid))
                })
            })
            .map(|(_, s)| s)
            .unwrap()
    };
    let (app, redis_call, redis) = (by_pid(1), by_pid(2), by_pid(3));
    let (other, caller, kept, in_app) = (by_pid(4), by_pid(5), by_pid(6), by_pid(7));
    assert_eq!(app.trace_id.len(), 16);
    assert_eq!(
        (&redis_call.trace_id, &redis.trace_id),
        (&app.trace_id, &app.trace_id)
    );
    assert!(app.parent_span_id.is_empty());
    assert_eq!(redis_call.parent_span_id, app.span_id);
    assert_eq!(redis.parent_span_id, redis_call.span_id);
    let ids: std::collections::HashSet<_> = [app, redis_call, redis, other, caller, kept]
        .iter()
        .map(|s| s.span_id.clone())
        .collect();
    assert_eq!(ids.len(), 6, "span ids differ");
    assert_ne!(other.trace_id, app.trace_id);
    assert_ne!(kept.trace_id, caller.trace_id);
    assert!(kept.parent_span_id.is_empty());
    assert_eq!(kept.links.len(), 1);
    assert_eq!(
        (&kept.links[0].trace_id, &kept.links[0].span_id),
        (&caller.trace_id, &caller.span_id)
    );
    let tp = TraceParent::parse(TP.as_bytes()).unwrap();
    let app_traced = by_pid(9);
    assert_eq!(
        (&in_app.trace_id, &app_traced.trace_id),
        (&tp.trace_id.to_vec(), &tp.trace_id.to_vec())
    );
    assert_eq!(in_app.parent_span_id, app_traced.span_id);
    let rid = by_pid(8);
    assert_eq!(rid.trace_id.len(), 16);
    assert!(![&app.trace_id, &other.trace_id, &tp.trace_id.to_vec()].contains(&&rid.trace_id));
}
