//! `--prometheus ADDR`: ebtop's own aggregates served for Prometheus to scrape (issue 48).
//!
//! Never raw calls: at the end of each interval the pipeline's endpoint table (since the
//! start: its rows are never evicted, so every series only grows) and its totals are turned
//! into one page, in both the OpenMetrics text format and Prometheus's classic text format
//! (which a scraper gets follows its `Accept` header), and a small HTTP server on its own
//! thread serves the latest page. A scrape never touches the pipeline: it copies an `Arc`.
//!
//! Series per endpoint row (a call kind's metric names come from its protocol's
//! [`crate::protocols::MetricNames`], OpenTelemetry's semantic conventions):
//! - a latency histogram (`http_server_request_duration_seconds`, …) whose buckets are the
//!   table's power-of-two latency bins (`le` = 2^k ns, k = 10..=37: 1.024 µs … 137 s), exact
//!   to the table's histogram precision (±0.4 %), its sum and count exact;
//! - `ebtop_calls_total` by outcome (`ok`, `client_error`, `server_error`, `unknown`), and
//!   `ebtop_request_bytes_total` / `ebtop_response_bytes_total`.
//!
//! Cardinality is the endpoint table's: at most `--max-endpoints` rows and their `other` rows
//! (resource `other`), whose folded calls `ebtop_endpoints_folded_calls_total` counts.

use std::collections::BTreeMap;
use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::{Context, Result};
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, NoLabelSet};
use prometheus_client::metrics::MetricType;
use prometheus_client::registry::{Registry, Unit};

use crate::aggregate::{EndpointSnapshot, LatencyBins};
use crate::call::Side;
use crate::report::IntervalReport;

/// Histogram bucket bounds: 2^k ns for these k (1.024 µs … 137 s; the table keeps 1 µs – 100 s).
pub(super) const FIRST_BOUND_LOG2: u32 = 10;
pub(super) const LAST_BOUND_LOG2: u32 = 37;

/// Scrapes served at once; more wait in the listener's backlog.
const MAX_SCRAPERS: usize = 4;
/// A scraper that sends its request or reads the page slower than this is dropped.
const SCRAPE_TIMEOUT: Duration = Duration::from_secs(5);
/// The longest request head read.
const MAX_REQUEST_BYTES: usize = 8 * 1024;

/// One rendering of the metrics, in both formats.
#[derive(Debug, Default)]
struct Page {
    openmetrics: String,
    text: String,
}

/// The exporter: its server runs until the process ends (a thread that only accepts).
pub struct PrometheusExporter {
    page: Arc<Mutex<Arc<Page>>>,
    addr: SocketAddr,
}

impl PrometheusExporter {
    /// Listens on `addr` (`host:port`; port 0 picks a free one) and serves from now on: an
    /// empty page until the first interval ends.
    pub fn serve(addr: &str) -> Result<PrometheusExporter> {
        let listener = TcpListener::bind(addr)
            .with_context(|| format!("--prometheus {addr}: cannot listen there"))?;
        let addr = listener.local_addr()?;
        let page = Arc::new(Mutex::new(Arc::new(render(Model::default()))));
        let served = Arc::clone(&page);
        std::thread::Builder::new()
            .name("ebtop-metrics".into())
            .spawn(move || accept_loop(listener, served))
            .context("starting the metrics server")?;
        Ok(PrometheusExporter { page, addr })
    }

    /// Where it listens.
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// The interval that just ended: the page scrapes get from now on.
    pub fn update(&mut self, report: &IntervalReport) {
        let page = Arc::new(render(Model::of(report)));
        *self.page.lock().unwrap_or_else(|p| p.into_inner()) = page;
    }
}

/// What one page shows, taken from an interval's report.
#[derive(Debug, Default, Clone)]
pub(super) struct Model {
    pub(super) rows: Vec<(EndpointSnapshot, Option<LatencyBins>)>,
    pub(super) events: u64,
    pub(super) events_lost: u64,
    pub(super) calls: u64,
    pub(super) folded_calls: u64,
    pub(super) segment_folded_calls: u64,
    pub(super) endpoints: u64,
    pub(super) open_connections: u64,
    pub(super) rss_bytes: Option<u64>,
    pub(super) cpu_ratio: Option<f64>,
    pub(super) bpf_cpu_ratio: Option<f64>,
}

impl Model {
    pub(super) fn of(report: &IntervalReport) -> Model {
        let rows = report.windows.as_ref().map_or_else(Vec::new, |w| {
            w.since_start
                .iter()
                .cloned()
                .zip(w.latency_bins.iter().cloned())
                .collect()
        });
        let t = &report.totals;
        let overhead = report.overhead.as_ref();
        Model {
            rows,
            events: t.events,
            events_lost: t.kernel.lost,
            calls: t.calls,
            folded_calls: t.endpoint_table.folded_calls,
            segment_folded_calls: t.endpoint_table.segment_folded_calls,
            endpoints: t.endpoint_table.endpoints,
            open_connections: report.open_connections,
            rss_bytes: overhead.and_then(|o| o.rss_bytes),
            cpu_ratio: overhead.and_then(|o| o.user_cpu_pct).map(|p| p / 100.0),
            bpf_cpu_ratio: overhead.and_then(|o| o.bpf_cpu_pct).map(|p| p / 100.0),
        }
    }
}

impl Collector for Model {
    fn encode(&self, mut encoder: DescriptorEncoder) -> std::fmt::Result {
        // One family per metric name, its series together.
        let mut histograms: BTreeMap<&str, Vec<&(EndpointSnapshot, Option<LatencyBins>)>> =
            BTreeMap::new();
        for r in &self.rows {
            histograms.entry(histogram_name(&r.0)).or_default().push(r);
        }
        for (name, rows) in histograms {
            let base = name.strip_suffix("_seconds").unwrap_or(name);
            let mut family = encoder.encode_descriptor(
                base,
                "Call latency (from request start to response end) per endpoint, as ebtop saw it",
                Some(&Unit::Seconds),
                MetricType::Histogram,
            )?;
            for (e, bins) in rows {
                let labels = endpoint_labels(e);
                let buckets = buckets(bins.as_ref(), e.calls);
                family
                    .encode_family(&labels)?
                    .encode_histogram::<NoLabelSet>(
                        e.latency_sum_ns as f64 / 1e9,
                        e.calls,
                        &buckets,
                        None,
                    )?;
            }
        }
        let mut calls = encoder.encode_descriptor(
            "ebtop_calls",
            "Calls per endpoint by outcome in the protocol's own terms (unknown: not decodable)",
            None,
            MetricType::Counter,
        )?;
        for (e, _) in &self.rows {
            for (outcome, n) in outcome_counts(e) {
                let mut labels = generic_labels(e);
                labels.push(("outcome", outcome.to_owned()));
                calls
                    .encode_family(&labels)?
                    .encode_counter::<NoLabelSet, _, u64>(&n, None)?;
            }
        }
        for (name, help, bytes) in [
            (
                "ebtop_request_bytes",
                "Bytes of requests per endpoint (heads and bodies, as moved by the kernel)",
                (|e: &EndpointSnapshot| e.req_bytes) as fn(&EndpointSnapshot) -> u64,
            ),
            (
                "ebtop_response_bytes",
                "Bytes of responses per endpoint (heads and bodies, as moved by the kernel)",
                |e: &EndpointSnapshot| e.resp_bytes,
            ),
        ] {
            let mut family = encoder.encode_descriptor(name, help, None, MetricType::Counter)?;
            for (e, _) in &self.rows {
                family
                    .encode_family(&generic_labels(e))?
                    .encode_counter::<NoLabelSet, _, u64>(&bytes(e), None)?;
            }
        }
        for (name, help, v) in [
            ("ebtop_events", "Kernel records ebtop handled", self.events),
            (
                "ebtop_events_lost",
                "Kernel records the ring buffers had no room for: calls may be missing",
                self.events_lost,
            ),
            (
                "ebtop_calls_seen",
                "Calls ebtop made of what it captured",
                self.calls,
            ),
            (
                "ebtop_endpoints_folded_calls",
                "Calls folded into `other` rows: the endpoint table was full (--max-endpoints)",
                self.folded_calls,
            ),
            (
                "ebtop_endpoints_segment_folded_calls",
                "Calls counted in rows whose resource has a too-varied segment folded to {…}",
                self.segment_folded_calls,
            ),
        ] {
            encoder
                .encode_descriptor(name, help, None, MetricType::Counter)?
                .encode_counter::<NoLabelSet, _, u64>(&v, None)?;
        }
        for (name, help, v) in [
            (
                "ebtop_endpoints",
                "Endpoint rows in the table",
                self.endpoints as i64,
            ),
            (
                "ebtop_open_connections",
                "Connections ebtop follows now",
                self.open_connections as i64,
            ),
        ] {
            encoder
                .encode_descriptor(name, help, None, MetricType::Gauge)?
                .encode_gauge(&v)?;
        }
        if let Some(rss) = self.rss_bytes {
            encoder
                .encode_descriptor(
                    "ebtop_resident_memory",
                    "ebtop's resident memory",
                    Some(&Unit::Bytes),
                    MetricType::Gauge,
                )?
                .encode_gauge(&(rss as i64))?;
        }
        for (name, help, v) in [
            (
                "ebtop_cpu",
                "ebtop's own CPU time over the last interval's length (user space)",
                self.cpu_ratio,
            ),
            (
                "ebtop_bpf_cpu",
                "CPU time of ebtop's BPF programs over the last interval's length (sampled)",
                self.bpf_cpu_ratio,
            ),
        ] {
            if let Some(v) = v {
                // OpenMetrics's unit name is `ratio` (prometheus-client's `Ratios` says `ratios`).
                let ratio = Unit::Other("ratio".to_owned());
                encoder
                    .encode_descriptor(name, help, Some(&ratio), MetricType::Gauge)?
                    .encode_gauge(&v)?;
            }
        }
        Ok(())
    }
}

/// The latency histogram's name of an endpoint's calls.
pub(super) fn histogram_name(e: &EndpointSnapshot) -> &'static str {
    let names = e.proto.kind().metrics;
    match e.side {
        Side::Server => names.server,
        Side::Client => names.client,
    }
}

/// The labels of an endpoint's latency histogram, in its kind's conventional names.
pub(super) fn endpoint_labels(e: &EndpointSnapshot) -> Vec<(&'static str, String)> {
    let names = e.proto.kind().metrics;
    let mut labels = vec![("process_executable_name", e.comm.clone())];
    if let Some((k, v)) = names.system {
        labels.push((k, v.to_owned()));
    }
    labels.push((names.method, e.method.clone()));
    labels.push((names.resource, e.resource.clone()));
    labels
}

/// An endpoint's calls by outcome label: ok, client_error, server_error, unknown (an outcome
/// that could not be decoded is never ok). The `outcome` label's values, here and in OTLP.
pub(super) fn outcome_counts(e: &EndpointSnapshot) -> [(&'static str, u64); 4] {
    let known_errors = e.server_errors + e.client_errors + e.unknown_outcomes;
    [
        ("ok", e.calls.saturating_sub(known_errors)),
        ("client_error", e.client_errors),
        ("server_error", e.server_errors),
        ("unknown", e.unknown_outcomes),
    ]
}

/// The labels of an endpoint's generic series (the same for every protocol).
pub(super) fn generic_labels(e: &EndpointSnapshot) -> Vec<(&'static str, String)> {
    vec![
        ("process_executable_name", e.comm.clone()),
        ("protocol", e.proto.name().to_owned()),
        ("side", e.side.name().to_owned()),
        ("method", e.method.clone()),
        ("resource", e.resource.clone()),
    ]
}

/// Per-bucket (not cumulative) counts at the fixed bounds, `+Inf` last; the calls without bins
/// (none, unless the table kept no histogram of them) are counted in `+Inf` only.
pub(super) fn buckets(bins: Option<&LatencyBins>, calls: u64) -> Vec<(f64, u64)> {
    let bounds = FIRST_BOUND_LOG2..=LAST_BOUND_LOG2;
    let mut counts = vec![0u64; bounds.clone().count() + 1];
    let mut binned = 0;
    for (_low, high, n) in bins.map(LatencyBins::bins).unwrap_or_default() {
        // A bin [2^k, 2^(k+1)) lies under the first bound at or above its high end.
        let log2 = high.max(1).ilog2();
        let i = log2.saturating_sub(FIRST_BOUND_LOG2) as usize;
        let slot = if log2 > LAST_BOUND_LOG2 {
            counts.len() - 1
        } else {
            i
        };
        counts[slot] += n;
        binned += n;
    }
    *counts.last_mut().expect("+Inf") += calls.saturating_sub(binned);
    bounds
        .map(|k| (1u64 << k) as f64 / 1e9)
        .chain([f64::INFINITY])
        .zip(counts)
        .collect()
}

/// Both formats of the model's page.
fn render(model: Model) -> Page {
    let mut registry = Registry::default();
    registry.register_collector(Box::new(Arc::new(model)));
    let mut page = Page::default();
    // Writing into a String fails only on a collector error, which `Model` never returns.
    let _ = prometheus_client::encoding::text::encode(&mut page.openmetrics, &registry);
    let _ = prometheus_client::encoding::prometheus_text::encode(&mut page.text, &registry);
    page
}

fn accept_loop(listener: TcpListener, page: Arc<Mutex<Arc<Page>>>) {
    let busy = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    for stream in listener.incoming() {
        let Ok(stream) = stream else {
            // EMFILE and the like: wait rather than spin.
            std::thread::sleep(Duration::from_millis(50));
            continue;
        };
        if busy.load(std::sync::atomic::Ordering::Relaxed) >= MAX_SCRAPERS {
            continue; // dropped: the scraper retries at its next interval
        }
        busy.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let current = Arc::clone(&page.lock().unwrap_or_else(|p| p.into_inner()));
        let busy = Arc::clone(&busy);
        let spawned = std::thread::Builder::new()
            .name("ebtop-scrape".into())
            .spawn(move || {
                let _ = answer(stream, &current);
                busy.fetch_sub(1, std::sync::atomic::Ordering::Relaxed);
            });
        if spawned.is_err() {
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

/// One scrape: the request head (bounded, timed), then the page or an error status.
fn answer(mut stream: TcpStream, page: &Page) -> io::Result<()> {
    stream.set_read_timeout(Some(SCRAPE_TIMEOUT))?;
    stream.set_write_timeout(Some(SCRAPE_TIMEOUT))?;
    let mut head = Vec::with_capacity(1024);
    let mut buf = [0u8; 1024];
    while !head.windows(4).any(|w| w == b"\r\n\r\n") {
        let n = stream.read(&mut buf)?;
        if n == 0 {
            return Ok(());
        }
        head.extend_from_slice(&buf[..n]);
        if head.len() > MAX_REQUEST_BYTES {
            return respond(
                &mut stream,
                "431 Request Header Fields Too Large",
                "text/plain",
                b"",
            );
        }
    }
    let head = String::from_utf8_lossy(&head);
    let mut words = head.split_ascii_whitespace();
    let (method, path) = (words.next().unwrap_or(""), words.next().unwrap_or(""));
    if method != "GET" && method != "HEAD" {
        return respond(&mut stream, "405 Method Not Allowed", "text/plain", b"");
    }
    if path != "/metrics" && path != "/" {
        return respond(
            &mut stream,
            "404 Not Found",
            "text/plain",
            b"see /metrics\n",
        );
    }
    let openmetrics = head.lines().any(|l| {
        l.split_once(':').is_some_and(|(k, v)| {
            k.eq_ignore_ascii_case("accept") && v.contains("application/openmetrics-text")
        })
    });
    let (kind, body) = if openmetrics {
        (
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
            page.openmetrics.as_bytes(),
        )
    } else {
        (
            "text/plain; version=0.0.4; charset=utf-8",
            page.text.as_bytes(),
        )
    };
    write_head(&mut stream, "200 OK", kind, body.len())?;
    if method == "GET" {
        stream.write_all(body)?;
    }
    stream.flush()
}

fn respond(stream: &mut TcpStream, status: &str, kind: &str, body: &[u8]) -> io::Result<()> {
    write_head(stream, status, kind, body.len())?;
    stream.write_all(body)?;
    stream.flush()
}

fn write_head(stream: &mut TcpStream, status: &str, kind: &str, len: usize) -> io::Result<()> {
    write!(
        stream,
        "HTTP/1.1 {status}\r\nContent-Type: {kind}\r\nContent-Length: {len}\r\n\
         Connection: close\r\n\r\n"
    )
}

#[cfg(test)]
mod tests;
