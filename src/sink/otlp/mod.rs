//! `--otlp URL`: calls as OpenTelemetry spans and ebtop's aggregates as OTLP metrics, sent
//! to a collector over OTLP/HTTP protobuf (issue 48, second part).
//!
//! **Export never stalls capture.** The pipeline's thread only copies what a span needs of
//! a call (a few strings) into a bounded queue with `try_send`; when the queue is full the
//! span is dropped and counted. Everything else — ids, attributes, protobuf encoding, the
//! HTTP requests, retries with backoff — is done by the export thread. A replay has no
//! capture to protect: it waits for room instead (`Mode::Replay`), so a recording is
//! exported whole unless the collector refuses it.
//!
//! Spans (one per call): kind SERVER or CLIENT from the call's side, start and end from the
//! call's own timestamps (a replay's recorded times), OpenTelemetry semantic-convention
//! attributes per protocol ([`span_of`]), trace and parent ids from the request's
//! `traceparent` header when it carried a valid one (the `traceparent` call detail, HTTP/1),
//! so the span joins the application's trace; otherwise the call's chain: span ids from
//! chain ids, parents from `parent_id`, one trace per chain root ([`chain_ids`]).
//!
//! Metrics: the Prometheus page's model (`super::prometheus::Model`: the endpoint table since
//! the start and ebtop's own counters), cumulative, every [`METRICS_EVERY`] of session time
//! and once at the end.
//!
//! Flow ends (`--otlp-flow-logs`): each TCP flow's end as a log record ([`flow_logs`]), on
//! the same queue and with the same rules as spans.
//!
//! What was not exported is counted (`Summary::otlp`): dropped because the queue was full,
//! given up after [`MAX_ATTEMPTS`], refused by the collector, or still queued at the end.

mod flow_logs;

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, SyncSender, TrySendError};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use opentelemetry_proto::tonic::collector::logs::v1::ExportLogsServiceResponse;
use opentelemetry_proto::tonic::collector::metrics::v1::{
    ExportMetricsServiceRequest, ExportMetricsServiceResponse,
};
use opentelemetry_proto::tonic::collector::trace::v1::{
    ExportTraceServiceRequest, ExportTraceServiceResponse,
};
use opentelemetry_proto::tonic::common::v1::{any_value, AnyValue, InstrumentationScope, KeyValue};
use opentelemetry_proto::tonic::metrics::v1 as pm;
use opentelemetry_proto::tonic::resource::v1::Resource;
use opentelemetry_proto::tonic::trace::v1::{
    span, status, ResourceSpans, ScopeSpans, Span, Status,
};
use prost::Message;

use self::flow_logs::FlowLog;
use super::prometheus::{self, Model};
use crate::call::{Call, Side};
use crate::protocols::trace_context::TraceParent;
use crate::protocols::{Outcome, Protocol};
use crate::report::IntervalReport;
use crate::session_meta::SessionMeta;

/// Spans waiting for the export thread; more are dropped (live) or wait (replay). ~300 bytes
/// each: a few MB at most.
pub const QUEUE_SPANS: usize = 16 * 1024;
/// Spans go to the export thread in chunks of this many (or fewer at the end of each batch of
/// events): one queue operation, and at most one wake-up, per chunk rather than per call.
const CHUNK_SPANS: usize = 64;
/// Spans per request.
pub const BATCH_SPANS: usize = 512;
/// A span waits at most this long for its batch to fill.
const BATCH_DELAY: Duration = Duration::from_secs(1);
/// Tries per request before its spans are given up (counted as dropped).
pub const MAX_ATTEMPTS: u32 = 5;
/// Backoff before the second try, doubled for each next one (100, 200, 400, 800 ms).
const FIRST_BACKOFF: Duration = Duration::from_millis(100);
/// One request (connect, send, answer) takes at most this long.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(5);
/// At the end, how long ebtop waits for the queue to be sent before it counts the rest as
/// dropped and exits (`OtlpOptions::final_wait`).
pub const FINAL_WAIT: Duration = Duration::from_secs(10);
/// Metrics are sent at most this often (session time), and once at the end.
pub const METRICS_EVERY: Duration = Duration::from_secs(10);
/// Longest attribute value sent (a resource is already cut at 1 KiB by its parser).
const MAX_VALUE: usize = 1024;

/// What ebtop's spans and metrics are labelled with as their instrumentation scope.
const SCOPE: &str = "ebtop";

/// How the queue behaves when it is full.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// Drop and count: capture never waits for export.
    Live,
    /// Wait for room: a replay exports every recorded call.
    Replay,
}

/// `--otlp` and its options.
#[derive(Debug, Clone)]
pub struct OtlpOptions {
    /// The collector's OTLP/HTTP base URL (`http://host:4318`): spans go to `/v1/traces`,
    /// metrics to `/v1/metrics`.
    pub url: String,
    /// `--otlp-query-text`: SQL statements as `db.query.text`, their passwords redacted.
    pub query_text: bool,
    pub mode: Mode,
    /// [`FINAL_WAIT`] but in tests.
    pub final_wait: Duration,
    /// `--otlp-flow-logs`: TCP flow ends as log records to `/v1/logs`.
    pub flow_logs: bool,
}

/// Export counts, shared with the export thread.
#[derive(Debug, Default)]
struct Counters {
    /// Spans handed to the exporter (one per call).
    offered: AtomicU64,
    /// Spans the collector accepted.
    exported: AtomicU64,
    /// Spans dropped because the queue was full.
    queue_full: AtomicU64,
    /// Spans given up after the last try, or refused by the collector.
    failed: AtomicU64,
    /// Requests that failed (each try).
    request_errors: AtomicU64,
    metric_exports: AtomicU64,
    metric_exports_failed: AtomicU64,
    /// The same for flow-end log records.
    logs_offered: AtomicU64,
    logs_exported: AtomicU64,
    logs_queue_full: AtomicU64,
    logs_failed: AtomicU64,
}

pub use crate::summary::OtlpStats;

enum Item {
    /// At most [`CHUNK_SPANS`].
    Spans(Vec<SpanCall>),
    Metrics(Box<MetricsBatch>),
    FlowEnds(Vec<FlowLog>),
    /// Send what is batched, then answer.
    Flush(mpsc::Sender<()>),
}

/// What a span needs of a call, copied on the pipeline's thread; the rest is made on the
/// export thread.
#[derive(Debug, Clone)]
struct SpanCall {
    proto: Protocol,
    side: Side,
    pid: u32,
    comm: Arc<str>,
    method: String,
    resource: String,
    version: &'static str,
    status: Option<u32>,
    status_text: Option<String>,
    outcome: Outcome,
    details: Vec<(&'static str, String)>,
    local: SocketAddr,
    peer: SocketAddr,
    start_unix_ns: u64,
    end_unix_ns: u64,
    tls: bool,
    /// Its chain (src/chains.rs): id, parent, root, the application's trace, a caller in
    /// another trace ([`Call::caller`]); id 0: chains off.
    id: u64,
    parent_id: Option<u64>,
    root_id: u64,
    app_trace: Option<Arc<str>>,
    caller: Option<(u64, u64)>,
}

struct MetricsBatch {
    model: Model,
    start_unix_ns: u64,
    time_unix_ns: u64,
}

/// The session's facts every request carries.
#[derive(Debug, Clone, Default)]
struct Session {
    host: String,
}

pub struct OtlpExporter {
    queue: Option<SyncSender<Item>>,
    flow_logs: bool,
    thread: Option<JoinHandle<()>>,
    counters: Arc<Counters>,
    mode: Mode,
    final_wait: Duration,
    session: Arc<std::sync::Mutex<Session>>,
    wall_offset_ns: i64,
    start_unix_ns: u64,
    /// The latest interval's metrics, and when (session time) metrics were last sent.
    latest: Option<(Model, u64)>,
    last_metrics_ns: Option<u64>,
    /// Spans not yet handed to the export thread (a chunk being filled).
    chunk: Vec<SpanCall>,
    finished: Option<OtlpStats>,
}

impl OtlpExporter {
    /// Checks the URL and starts the export thread (nothing is sent until the first call).
    pub fn start(opts: OtlpOptions) -> Result<OtlpExporter> {
        let base = endpoint_base(&opts.url)?;
        let (tx, rx) = mpsc::sync_channel(QUEUE_SPANS / CHUNK_SPANS);
        let counters = Arc::new(Counters::default());
        let session = Arc::new(std::sync::Mutex::new(Session::default()));
        let sender = Sender {
            agent: agent(),
            traces_url: format!("{base}/v1/traces"),
            metrics_url: format!("{base}/v1/metrics"),
            logs_url: format!("{base}/v1/logs"),
            counters: Arc::clone(&counters),
            session: Arc::clone(&session),
            query_text: opts.query_text,
            ids: IdSource::seeded(),
        };
        let thread = std::thread::Builder::new()
            .name("ebtop-otlp".into())
            .spawn(move || sender.run(rx))
            .context("starting the OTLP export thread")?;
        Ok(OtlpExporter {
            queue: Some(tx),
            flow_logs: opts.flow_logs,
            thread: Some(thread),
            counters,
            mode: opts.mode,
            final_wait: opts.final_wait,
            session,
            wall_offset_ns: 0,
            start_unix_ns: 0,
            latest: None,
            last_metrics_ns: None,
            chunk: Vec::with_capacity(CHUNK_SPANS),
            finished: None,
        })
    }

    /// The session's clock and host (live, or the recording's).
    pub fn meta(&mut self, meta: &SessionMeta) {
        self.wall_offset_ns = meta.wall_offset_ns;
        self.start_unix_ns = meta.start_unix_ns.max(0) as u64;
        *self.session.lock().unwrap_or_else(|p| p.into_inner()) = Session {
            host: meta.host.clone(),
        };
    }

    fn unix_ns(&self, mono_ns: u64) -> u64 {
        mono_ns.saturating_add_signed(self.wall_offset_ns)
    }

    /// One call: its span is queued, or dropped and counted when the queue is full (live).
    pub fn call(&mut self, call: &Call) {
        let start = self.unix_ns(call.start_ns);
        let l7 = &call.l7;
        let span = SpanCall {
            proto: l7.proto,
            side: call.side,
            pid: call.pid,
            comm: Arc::clone(&call.comm),
            method: l7.method.clone(),
            resource: l7.resource.clone(),
            version: l7.version,
            status: l7.status,
            status_text: l7.status_text.clone(),
            outcome: l7.outcome,
            details: l7.details.clone(),
            local: call.local,
            peer: call.peer,
            start_unix_ns: start,
            end_unix_ns: start.saturating_add(call.latency_ns),
            tls: call.tls,
            id: call.id,
            parent_id: call.parent_id,
            root_id: call.root_id,
            app_trace: call.trace_id.clone(),
            caller: call.caller,
        };
        self.counters.offered.fetch_add(1, Ordering::Relaxed);
        self.chunk.push(span);
        if self.chunk.len() >= CHUNK_SPANS {
            self.flush();
        }
    }

    /// Hands the spans gathered so far to the export thread (at the end of each batch of
    /// events, so none waits long): dropped and counted when the queue is full (live).
    pub fn flush(&mut self) {
        if self.chunk.is_empty() {
            return;
        }
        let chunk = std::mem::replace(&mut self.chunk, Vec::with_capacity(CHUNK_SPANS));
        let n = chunk.len() as u64;
        if !self.enqueue(Item::Spans(chunk)) {
            self.counters.queue_full.fetch_add(n, Ordering::Relaxed);
        }
    }

    /// False when the item was dropped (queue full, live) or the thread is gone.
    fn enqueue(&self, item: Item) -> bool {
        let Some(q) = &self.queue else { return false };
        match self.mode {
            Mode::Live => match q.try_send(item) {
                Ok(()) => true,
                Err(TrySendError::Full(_) | TrySendError::Disconnected(_)) => false,
            },
            Mode::Replay => q.send(item).is_ok(),
        }
    }

    /// TCP flow ends (a flow report's, or a part's): each a log record, queued as spans are
    /// (dropped and counted when the queue is full, live).
    pub fn flow_ends(&mut self, ends: &[crate::flows::TcpFlow]) {
        if !self.flow_logs || ends.is_empty() {
            return;
        }
        let c = &self.counters;
        for chunk in ends.chunks(CHUNK_SPANS) {
            let logs: Vec<FlowLog> = chunk
                .iter()
                .map(|f| FlowLog {
                    flow: f.clone(),
                    end_unix_ns: self.unix_ns(f.end_mono_ns.unwrap_or(f.start_mono_ns)),
                })
                .collect();
            let n = logs.len() as u64;
            c.logs_offered.fetch_add(n, Ordering::Relaxed);
            if !self.enqueue(Item::FlowEnds(logs)) {
                c.logs_queue_full.fetch_add(n, Ordering::Relaxed);
            }
        }
    }

    /// The interval that just ended: its metrics are kept, and sent when due.
    pub fn interval(&mut self, report: &IntervalReport) {
        self.flush();
        self.latest = Some((Model::of(report), report.mono_ns));
        let due = self.last_metrics_ns.is_none_or(|last| {
            report.mono_ns.saturating_sub(last) >= METRICS_EVERY.as_nanos() as u64
        });
        if due {
            self.send_metrics();
        }
    }

    fn send_metrics(&mut self) {
        let Some((model, mono_ns)) = self.latest.take() else {
            return;
        };
        self.last_metrics_ns = Some(mono_ns);
        let batch = MetricsBatch {
            model,
            start_unix_ns: self.start_unix_ns,
            time_unix_ns: self.unix_ns(mono_ns),
        };
        if !self.enqueue(Item::Metrics(Box::new(batch))) {
            self.counters
                .metric_exports_failed
                .fetch_add(1, Ordering::Relaxed);
        }
    }

    /// The counts so far (spans still queued are neither exported nor dropped yet).
    pub fn stats(&self) -> OtlpStats {
        if let Some(done) = self.finished {
            return done;
        }
        let c = &self.counters;
        OtlpStats {
            spans_exported: c.exported.load(Ordering::Relaxed),
            spans_dropped: c.queue_full.load(Ordering::Relaxed) + c.failed.load(Ordering::Relaxed),
            request_errors: c.request_errors.load(Ordering::Relaxed),
            metric_exports: c.metric_exports.load(Ordering::Relaxed),
            metric_exports_failed: c.metric_exports_failed.load(Ordering::Relaxed),
            flow_logs_exported: self
                .flow_logs
                .then(|| c.logs_exported.load(Ordering::Relaxed)),
            flow_logs_dropped: self.flow_logs.then(|| {
                c.logs_queue_full.load(Ordering::Relaxed) + c.logs_failed.load(Ordering::Relaxed)
            }),
        }
    }

    /// The end: the last metrics, then everything queued is sent, for at most `final_wait`;
    /// what is still unsent then is counted as dropped. The final counts.
    pub fn finish(&mut self) -> OtlpStats {
        if let Some(done) = self.finished {
            return done;
        }
        self.flush();
        self.send_metrics();
        if let Some(q) = self.queue.take() {
            let (done_tx, done_rx) = mpsc::channel();
            let deadline = Instant::now() + self.final_wait;
            // The flush marker waits its turn behind the queue, for the same deadline.
            let mut marker = Item::Flush(done_tx);
            loop {
                match q.try_send(marker) {
                    Ok(()) => {
                        let left = deadline.saturating_duration_since(Instant::now());
                        let _ = done_rx.recv_timeout(left);
                        break;
                    }
                    Err(TrySendError::Full(m)) if Instant::now() < deadline => {
                        marker = m;
                        std::thread::sleep(Duration::from_millis(10));
                    }
                    Err(_) => break,
                }
            }
            drop(q);
            // Joined only when it is done: a thread stuck on a dead collector is left to the
            // process's exit.
            if let Some(t) = self.thread.take().filter(|t| t.is_finished()) {
                let _ = t.join();
            }
        }
        let mut stats = self.stats();
        // Every span not exported by now never will be.
        let offered = self.counters.offered.load(Ordering::Relaxed);
        stats.spans_dropped = offered.saturating_sub(stats.spans_exported);
        if let Some(exported) = stats.flow_logs_exported {
            let offered = self.counters.logs_offered.load(Ordering::Relaxed);
            stats.flow_logs_dropped = Some(offered.saturating_sub(exported));
        }
        self.finished = Some(stats);
        stats
    }
}

/// The base of the OTLP/HTTP URLs: `http://host:port[/prefix]`, no trailing `/`; an error
/// for what ebtop cannot send to (checked before the session starts).
pub fn endpoint_base(url: &str) -> Result<String> {
    let Some(rest) = url.strip_prefix("http://") else {
        if url.starts_with("https://") {
            bail!(
                "--otlp {url}: ebtop is built without TLS; send to a local collector or agent over \
                 http://"
            );
        }
        bail!("--otlp {url}: expected an http:// URL, e.g. http://127.0.0.1:4318");
    };
    let authority = rest.split('/').next().unwrap_or("");
    if authority.is_empty() {
        bail!("--otlp {url}: no host");
    }
    let base = url.trim_end_matches('/');
    // A URL given with the traces path (as OTEL_EXPORTER_OTLP_TRACES_ENDPOINT is) means its base.
    Ok(base.strip_suffix("/v1/traces").unwrap_or(base).to_owned())
}

fn agent() -> ureq::Agent {
    ureq::Agent::config_builder()
        .timeout_global(Some(REQUEST_TIMEOUT))
        .http_status_as_error(false)
        .max_idle_connections(2)
        .build()
        .into()
}

/// The export thread: batches, encodes, sends, retries.
struct Sender {
    agent: ureq::Agent,
    traces_url: String,
    metrics_url: String,
    logs_url: String,
    counters: Arc<Counters>,
    session: Arc<std::sync::Mutex<Session>>,
    query_text: bool,
    ids: IdSource,
}

/// How a request ended.
enum Sent {
    /// Accepted; the collector refused this many of its items (`partial_success`).
    Accepted(u64),
    /// Refused for good (a 4xx other than 429), or every try failed.
    Failed,
}

impl Sender {
    fn run(mut self, rx: Receiver<Item>) {
        let mut batch: Vec<SpanCall> = Vec::with_capacity(BATCH_SPANS);
        let mut logs: Vec<FlowLog> = Vec::new();
        let mut first_at: Option<Instant> = None;
        loop {
            let wait = first_at.map_or(Duration::from_secs(3600), |t| {
                BATCH_DELAY.saturating_sub(t.elapsed())
            });
            match rx.recv_timeout(wait) {
                Ok(Item::Spans(spans)) => {
                    batch.extend(spans);
                    first_at.get_or_insert_with(Instant::now);
                    if batch.len() >= BATCH_SPANS {
                        self.send_spans(&mut batch);
                        first_at = None;
                    }
                }
                Ok(Item::Metrics(m)) => self.send_metrics(&m),
                Ok(Item::FlowEnds(ends)) => {
                    logs.extend(ends);
                    first_at.get_or_insert_with(Instant::now);
                    if logs.len() >= BATCH_SPANS {
                        self.send_logs(&mut logs);
                    }
                }
                Ok(Item::Flush(done)) => {
                    self.send_spans(&mut batch);
                    self.send_logs(&mut logs);
                    first_at = None;
                    let _ = done.send(());
                }
                Err(RecvTimeoutError::Timeout) => {
                    self.send_spans(&mut batch);
                    self.send_logs(&mut logs);
                    first_at = None;
                }
                Err(RecvTimeoutError::Disconnected) => {
                    self.send_spans(&mut batch);
                    self.send_logs(&mut logs);
                    return;
                }
            }
        }
    }

    fn session(&self) -> Session {
        self.session
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    fn send_spans(&mut self, batch: &mut Vec<SpanCall>) {
        if batch.is_empty() {
            return;
        }
        let n = batch.len() as u64;
        let request = traces_request(batch, &self.session(), self.query_text, &mut self.ids);
        batch.clear();
        let sent = self.post(&self.traces_url, &request.encode_to_vec(), |body| {
            ExportTraceServiceResponse::decode(body)
                .ok()
                .and_then(|r| r.partial_success)
                .map_or(0, |p| p.rejected_spans.max(0) as u64)
        });
        let c = &self.counters;
        count_sent(sent, n, &c.exported, &c.failed);
    }

    fn send_logs(&mut self, batch: &mut Vec<FlowLog>) {
        if batch.is_empty() {
            return;
        }
        let n = batch.len() as u64;
        let request = flow_logs::logs_request(batch, &self.session());
        batch.clear();
        let sent = self.post(&self.logs_url, &request.encode_to_vec(), |body| {
            ExportLogsServiceResponse::decode(body)
                .ok()
                .and_then(|r| r.partial_success)
                .map_or(0, |p| p.rejected_log_records.max(0) as u64)
        });
        let c = &self.counters;
        count_sent(sent, n, &c.logs_exported, &c.logs_failed);
    }

    fn send_metrics(&mut self, m: &MetricsBatch) {
        let request = metrics_request(m, &self.session());
        let c = Arc::clone(&self.counters);
        let sent = self.post(&self.metrics_url, &request.encode_to_vec(), |body| {
            ExportMetricsServiceResponse::decode(body)
                .ok()
                .and_then(|r| r.partial_success)
                .map_or(0, |p| p.rejected_data_points.max(0) as u64)
        });
        match sent {
            Sent::Accepted(0) => c.metric_exports.fetch_add(1, Ordering::Relaxed),
            _ => c.metric_exports_failed.fetch_add(1, Ordering::Relaxed),
        };
    }

    /// POSTs a protobuf body, with up to [`MAX_ATTEMPTS`] tries for what may pass later
    /// (no answer, 429, 502, 503, 504), backing off between them.
    fn post(&self, url: &str, body: &[u8], rejected: impl Fn(&[u8]) -> u64) -> Sent {
        let mut backoff = FIRST_BACKOFF;
        for attempt in 1..=MAX_ATTEMPTS {
            let answer = self
                .agent
                .post(url)
                .header("Content-Type", "application/x-protobuf")
                .send(body);
            let retry = match answer {
                Ok(mut resp) => {
                    let status = resp.status().as_u16();
                    if (200..300).contains(&status) {
                        let body = resp
                            .body_mut()
                            .with_config()
                            .limit(64 * 1024)
                            .read_to_vec()
                            .unwrap_or_default();
                        return Sent::Accepted(rejected(&body));
                    }
                    self.counters.request_errors.fetch_add(1, Ordering::Relaxed);
                    matches!(status, 429 | 502 | 503 | 504)
                }
                Err(_) => {
                    self.counters.request_errors.fetch_add(1, Ordering::Relaxed);
                    true
                }
            };
            if !retry || attempt == MAX_ATTEMPTS {
                break;
            }
            std::thread::sleep(backoff);
            backoff *= 2;
        }
        Sent::Failed
    }
}

/// A request of `n` items: those the collector took are exported, the rest failed.
fn count_sent(sent: Sent, n: u64, exported: &AtomicU64, failed: &AtomicU64) {
    let rejected = match sent {
        Sent::Accepted(rejected) => rejected.min(n),
        Sent::Failed => n,
    };
    exported.fetch_add(n - rejected, Ordering::Relaxed);
    failed.fetch_add(rejected, Ordering::Relaxed);
}

/// Random span and trace ids: xorshift from the kernel's random bytes (ids need to be unique,
/// not secret); and the session's salt for ids made from chain ids (which repeat from session
/// to session: a replay links the same calls with the same ids).
struct IdSource(u64, u64);

impl IdSource {
    fn seeded() -> IdSource {
        let mut seed = [0u8; 8];
        // SAFETY: getrandom writes at most `seed.len()` bytes into the buffer we own.
        let n = unsafe { libc::getrandom(seed.as_mut_ptr().cast(), seed.len(), 0) };
        let mut s = u64::from_ne_bytes(seed);
        if n != 8 || s == 0 {
            s = crate::clock::monotonic_ns() | 1;
        }
        let mut ids = IdSource(s, 0);
        ids.1 = ids.next();
        ids
    }

    /// The span id of the call of chain id `id` (not 0): the same for its parent reference.
    fn chain_span_id(&self, id: u64) -> [u8; 8] {
        (id ^ self.1).max(1).to_be_bytes()
    }

    /// The trace of the calls of chain root `root`: the same for all of them.
    fn chain_trace_id(&self, root: u64) -> [u8; 16] {
        let mut id = [0u8; 16];
        id[..8].copy_from_slice(&crate::chains::mix64(self.1, root, 1).to_be_bytes());
        id[8..].copy_from_slice(&crate::chains::mix64(self.1, root, 2).to_be_bytes());
        id
    }

    fn next(&mut self) -> u64 {
        // xorshift64*
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    fn span_id(&mut self) -> [u8; 8] {
        loop {
            let id = self.next();
            if id != 0 {
                return id.to_be_bytes();
            }
        }
    }

    fn trace_id(&mut self) -> [u8; 16] {
        let mut id = [0u8; 16];
        id[..8].copy_from_slice(&self.span_id());
        id[8..].copy_from_slice(&self.next().to_be_bytes());
        id
    }
}

fn kv(key: &str, value: any_value::Value) -> KeyValue {
    KeyValue {
        key: key.to_owned(),
        value: Some(AnyValue { value: Some(value) }),
        ..Default::default()
    }
}

fn kv_str(key: &str, value: &str) -> KeyValue {
    let cut = if value.len() > MAX_VALUE {
        let mut end = MAX_VALUE;
        while !value.is_char_boundary(end) {
            end -= 1;
        }
        &value[..end]
    } else {
        value
    };
    kv(key, any_value::Value::StringValue(cut.to_owned()))
}

fn kv_int(key: &str, value: i64) -> KeyValue {
    kv(key, any_value::Value::IntValue(value))
}

fn scope() -> InstrumentationScope {
    InstrumentationScope {
        name: SCOPE.to_owned(),
        version: env!("CARGO_PKG_VERSION").to_owned(),
        ..Default::default()
    }
}

/// The resource of a process's spans: the service is the process (its executable's name:
/// ebtop knows no service names), on this host.
fn process_resource(pid: u32, comm: &str, host: &str) -> Resource {
    Resource {
        attributes: vec![
            kv_str("service.name", comm),
            kv_str("process.executable.name", comm),
            kv_int("process.pid", i64::from(pid)),
            kv_str("host.name", host),
        ],
        ..Default::default()
    }
}

/// One request for a batch of spans, grouped by process (each its own resource).
fn traces_request(
    batch: &[SpanCall],
    session: &Session,
    query_text: bool,
    ids: &mut IdSource,
) -> ExportTraceServiceRequest {
    let mut by_pid: Vec<(u32, &str, Vec<Span>)> = Vec::new();
    for c in batch {
        let span = span_of(c, query_text, ids);
        match by_pid
            .iter_mut()
            .find(|(pid, comm, _)| *pid == c.pid && **comm == *c.comm)
        {
            Some((_, _, spans)) => spans.push(span),
            None => by_pid.push((c.pid, &c.comm, vec![span])),
        }
    }
    ExportTraceServiceRequest {
        resource_spans: by_pid
            .into_iter()
            .map(|(pid, comm, spans)| ResourceSpans {
                resource: Some(process_resource(pid, comm, &session.host)),
                scope_spans: vec![ScopeSpans {
                    scope: Some(scope()),
                    spans,
                    ..Default::default()
                }],
                ..Default::default()
            })
            .collect(),
    }
}

fn detail<'c>(c: &'c SpanCall, key: &str) -> Option<&'c str> {
    c.details
        .iter()
        .find(|(k, _)| *k == key)
        .map(|(_, v)| v.as_str())
}

/// A span's trace, span and parent ids, flags and links. Span ids are the chain's ids (salted
/// per session), so a parent's span is the span `parent_id` names. The trace: the request's
/// own `traceparent` (a server call's parent the client call on this host that sent it, else
/// the header's parent), else the chain's application trace when it is a `traceparent`'s, else one
/// trace per chain root (`Call::root_id`); a server call that keeps its own root while its
/// caller is in another trace links to the caller's span. Without chains: random, as before.
#[allow(clippy::type_complexity)]
fn chain_ids(
    c: &SpanCall,
    ids: &mut IdSource,
) -> ([u8; 16], [u8; 8], Vec<u8>, u32, Vec<span::Link>) {
    let own = detail(c, "traceparent").and_then(|t| TraceParent::parse(t.as_bytes()));
    if c.id == 0 {
        return match own {
            Some(p) => (
                p.trace_id,
                ids.span_id(),
                p.parent_id.to_vec(),
                u32::from(p.flags),
                Vec::new(),
            ),
            None => (ids.trace_id(), ids.span_id(), Vec::new(), 0, Vec::new()),
        };
    }
    let span_id = ids.chain_span_id(c.id);
    let parent = c.parent_id.map(|p| ids.chain_span_id(p).to_vec());
    let app = c.app_trace.as_deref().and_then(hex_trace);
    let root_trace = |root: u64| {
        if c.caller.is_none() {
            app.unwrap_or_else(|| ids.chain_trace_id(root))
        } else {
            ids.chain_trace_id(root)
        }
    };
    let links = match c.caller {
        Some((caller, root)) => vec![span::Link {
            trace_id: app.unwrap_or_else(|| ids.chain_trace_id(root)).to_vec(),
            span_id: ids.chain_span_id(caller).to_vec(),
            ..Default::default()
        }],
        None => Vec::new(),
    };
    match own {
        // A server call's hop parent sent this very header (same trace); a client call's
        // header names the application's own span, the parent in its trace.
        Some(p) => (
            p.trace_id,
            span_id,
            parent
                .filter(|_| c.caller.is_none() && c.side == Side::Server)
                .unwrap_or_else(|| p.parent_id.to_vec()),
            u32::from(p.flags),
            links,
        ),
        None => (
            root_trace(c.root_id),
            span_id,
            parent.filter(|_| c.caller.is_none()).unwrap_or_default(),
            0,
            links,
        ),
    }
}

/// A trace id written as 32 hex digits (a `traceparent`'s, as chains keep it), not all zero.
fn hex_trace(s: &str) -> Option<[u8; 16]> {
    if s.len() != 32 {
        return None;
    }
    let mut id = [0u8; 16];
    for (i, b) in id.iter_mut().enumerate() {
        *b = u8::from_str_radix(s.get(2 * i..2 * i + 2)?, 16).ok()?;
    }
    (id != [0; 16]).then_some(id)
}

/// A call's span: ids, kind, times, name, attributes and status (docs/fleet.md lists them).
fn span_of(c: &SpanCall, query_text: bool, ids: &mut IdSource) -> Span {
    let (trace_id, span_id, parent_span_id, flags, links) = chain_ids(c, ids);
    let (server, client) = match c.side {
        Side::Server => (c.local, c.peer),
        Side::Client => (c.peer, c.local),
    };
    let kind = c.proto.kind();
    let mut attrs: Vec<KeyValue> = Vec::with_capacity(12);
    let normalized = crate::aggregate::normalize::normalize(c.proto, &c.method, &c.resource, false);
    let name = match c.proto {
        Protocol::Http | Protocol::Http2 => {
            attrs.push(kv_str("http.request.method", &c.method));
            let path = c.resource.split(['?', '#']).next().unwrap_or("");
            attrs.push(kv_str("url.path", path));
            attrs.push(kv_str("http.route", &normalized));
            if let Some(s) = c.status {
                attrs.push(kv_int("http.response.status_code", i64::from(s)));
            }
            attrs.push(kv_str("network.protocol.name", "http"));
            attrs.push(kv_str("network.protocol.version", c.version));
            format!("{} {}", c.method, normalized)
        }
        Protocol::Grpc => {
            attrs.push(kv_str("rpc.system", "grpc"));
            // `/package.Service/Method`
            let full = c.resource.trim_start_matches('/');
            let (service, method) = full.rsplit_once('/').unwrap_or(("", full));
            attrs.push(kv_str("rpc.service", service));
            attrs.push(kv_str("rpc.method", method));
            if let Some(code) = detail(c, "grpc_status").and_then(|s| s.parse::<i64>().ok()) {
                attrs.push(kv_int("rpc.grpc.status_code", code));
            }
            full.to_owned()
        }
        Protocol::Postgres
        | Protocol::Mysql
        | Protocol::Redis
        | Protocol::Memcached
        | Protocol::Mongodb => {
            if let Some((_, system)) = kind.metrics.system {
                attrs.push(kv_str("db.system.name", system));
            }
            attrs.push(kv_str("db.operation.name", &c.method));
            attrs.push(kv_str("db.query.summary", &normalized));
            if query_text && matches!(c.proto, Protocol::Postgres | Protocol::Mysql) {
                // Literals stay (that is the point of the text), passwords do not.
                attrs.push(kv_str(
                    "db.query.text",
                    &crate::protocols::redact::redact_sql(&c.resource),
                ));
            }
            if c.proto == Protocol::Mongodb {
                // The conventions' span name for MongoDB: `find orders`.
                attrs.push(kv_str("db.collection.name", &c.resource));
                format!("{} {}", c.method, normalized).trim_end().to_owned()
            } else {
                normalized.clone()
            }
        }
        Protocol::Plugin => {
            // A plugin's protocol: an RPC system named after the plugin.
            attrs.push(kv_str(
                "rpc.system",
                detail(c, "plugin").unwrap_or("plugin"),
            ));
            attrs.push(kv_str("rpc.method", &c.method));
            format!("{} {}", c.method, normalized).trim_end().to_owned()
        }
        Protocol::Kafka => {
            // OpenTelemetry's messaging conventions: the destination is what the resource
            // names after the API (topics, a group), absent when it names none.
            attrs.push(kv_str("messaging.system", "kafka"));
            attrs.push(kv_str("messaging.operation.name", &c.method));
            if let Some((_, dest)) = c.resource.split_once(' ') {
                attrs.push(kv_str("messaging.destination.name", dest));
            }
            c.resource.clone()
        }
        Protocol::Dns => {
            attrs.push(kv_str("dns.question.type", &c.method));
            attrs.push(kv_str("dns.question.name", &normalized));
            format!("DNS {}", c.method)
        }
    };
    // The server's name where the request said it (HTTP/1 `Host`, HTTP/2 `:authority`).
    let host = detail(c, "host").or_else(|| detail(c, "authority"));
    let server_name = host.map(strip_port).unwrap_or_default();
    if server_name.is_empty() {
        attrs.push(kv_str("server.address", &server.ip().to_string()));
    } else {
        attrs.push(kv_str("server.address", server_name));
    }
    attrs.push(kv_int("server.port", i64::from(server.port())));
    attrs.push(kv_str("client.address", &client.ip().to_string()));
    attrs.push(kv_int("client.port", i64::from(client.port())));
    attrs.push(kv_str("network.peer.address", &c.peer.ip().to_string()));
    attrs.push(kv_int("network.peer.port", i64::from(c.peer.port())));
    attrs.push(kv_str("network.transport", kind_transport(c.proto)));
    if c.tls {
        attrs.push(kv("ebtop.tls", any_value::Value::BoolValue(true)));
    }
    // An error: the server's fault always; the client's too, seen from the client (the
    // conventions' rule for HTTP). Unknown outcomes stay unset, never taken for either.
    let error = match (c.outcome, c.side) {
        (Outcome::ServerError, _) | (Outcome::ClientError, Side::Client) => true,
        (Outcome::Unknown, _) => {
            attrs.push(kv_str("ebtop.outcome", "unknown"));
            false
        }
        _ => false,
    };
    let status = if error {
        let why = c
            .status_text
            .clone()
            .or_else(|| c.status.map(|s| s.to_string()))
            .unwrap_or_else(|| "error".to_owned());
        attrs.push(kv_str("error.type", &why));
        Some(Status {
            message: why,
            code: status::StatusCode::Error as i32,
        })
    } else {
        None
    };
    Span {
        trace_id: trace_id.to_vec(),
        span_id: span_id.to_vec(),
        parent_span_id,
        flags,
        links,
        name,
        kind: match c.side {
            Side::Server => span::SpanKind::Server,
            Side::Client => span::SpanKind::Client,
        } as i32,
        start_time_unix_nano: c.start_unix_ns,
        end_time_unix_nano: c.end_unix_ns,
        attributes: attrs,
        status,
        ..Default::default()
    }
}

fn kind_transport(p: Protocol) -> &'static str {
    match p {
        Protocol::Dns => "udp",
        _ => "tcp",
    }
}

/// `host:port`, `[v6]:port` → the host.
fn strip_port(authority: &str) -> &str {
    if let Some(rest) = authority.strip_prefix('[') {
        return rest.split(']').next().unwrap_or(rest);
    }
    match authority.rsplit_once(':') {
        Some((h, p)) if !h.contains(':') && p.bytes().all(|b| b.is_ascii_digit()) => h,
        _ => authority,
    }
}

/// A Prometheus label name as an OpenTelemetry attribute (`http_request_method` →
/// `http.request.method`: the names the protocols declare are all dotted this way).
fn attribute_name(label: &str) -> String {
    label.replace('_', ".")
}

/// The metrics request of a model: the same series as the Prometheus page, cumulative since
/// the session's start.
fn metrics_request(m: &MetricsBatch, session: &Session) -> ExportMetricsServiceRequest {
    let model = &m.model;
    let (start, time) = (m.start_unix_ns, m.time_unix_ns);
    let attrs = |labels: Vec<(&'static str, String)>| -> Vec<KeyValue> {
        labels
            .iter()
            .map(|(k, v)| kv_str(&attribute_name(k), v))
            .collect()
    };
    let mut metrics: Vec<pm::Metric> = Vec::new();
    // One histogram per name, its rows as data points.
    let bounds: Vec<f64> = (prometheus::FIRST_BOUND_LOG2..=prometheus::LAST_BOUND_LOG2)
        .map(|k| (1u64 << k) as f64 / 1e9)
        .collect();
    let mut histograms: std::collections::BTreeMap<&str, Vec<pm::HistogramDataPoint>> =
        Default::default();
    for (e, bins) in &model.rows {
        let counts: Vec<u64> = prometheus::buckets(bins.as_ref(), e.calls)
            .into_iter()
            .map(|(_, n)| n)
            .collect();
        histograms
            .entry(prometheus::histogram_name(e))
            .or_default()
            .push(pm::HistogramDataPoint {
                attributes: attrs(prometheus::endpoint_labels(e)),
                start_time_unix_nano: start,
                time_unix_nano: time,
                count: e.calls,
                sum: Some(e.latency_sum_ns as f64 / 1e9),
                bucket_counts: counts,
                explicit_bounds: bounds.clone(),
                ..Default::default()
            });
    }
    for (name, points) in histograms {
        let base = name.strip_suffix("_seconds").unwrap_or(name);
        metrics.push(pm::Metric {
            name: attribute_name(base),
            description: "Call latency (request start to response end) per endpoint".to_owned(),
            unit: "s".to_owned(),
            data: Some(pm::metric::Data::Histogram(pm::Histogram {
                data_points: points,
                aggregation_temporality: pm::AggregationTemporality::Cumulative as i32,
            })),
            ..Default::default()
        });
    }
    let point = |attributes: Vec<KeyValue>, v: pm::number_data_point::Value| pm::NumberDataPoint {
        attributes,
        start_time_unix_nano: start,
        time_unix_nano: time,
        value: Some(v),
        ..Default::default()
    };
    let sum = |name: &str, unit: &str, points: Vec<pm::NumberDataPoint>| pm::Metric {
        name: name.to_owned(),
        unit: unit.to_owned(),
        data: Some(pm::metric::Data::Sum(pm::Sum {
            data_points: points,
            aggregation_temporality: pm::AggregationTemporality::Cumulative as i32,
            is_monotonic: true,
        })),
        ..Default::default()
    };
    let int = |n: u64| pm::number_data_point::Value::AsInt(n.min(i64::MAX as u64) as i64);
    let mut calls = Vec::new();
    let mut req_bytes = Vec::new();
    let mut resp_bytes = Vec::new();
    for (e, _) in &model.rows {
        for (outcome, n) in prometheus::outcome_counts(e) {
            let mut labels = prometheus::generic_labels(e);
            labels.push(("outcome", outcome.to_owned()));
            calls.push(point(attrs(labels), int(n)));
        }
        req_bytes.push(point(
            attrs(prometheus::generic_labels(e)),
            int(e.req_bytes),
        ));
        resp_bytes.push(point(
            attrs(prometheus::generic_labels(e)),
            int(e.resp_bytes),
        ));
    }
    metrics.push(sum("ebtop.calls", "{call}", calls));
    metrics.push(sum("ebtop.request.bytes", "By", req_bytes));
    metrics.push(sum("ebtop.response.bytes", "By", resp_bytes));
    for (name, unit, v) in [
        ("ebtop.events", "{event}", model.events),
        ("ebtop.events.lost", "{event}", model.events_lost),
        ("ebtop.calls.seen", "{call}", model.calls),
        ("ebtop.endpoints.folded_calls", "{call}", model.folded_calls),
        (
            "ebtop.endpoints.segment_folded_calls",
            "{call}",
            model.segment_folded_calls,
        ),
    ] {
        metrics.push(sum(name, unit, vec![point(Vec::new(), int(v))]));
    }
    let gauge = |name: &str, unit: &str, v: pm::number_data_point::Value| pm::Metric {
        name: name.to_owned(),
        unit: unit.to_owned(),
        data: Some(pm::metric::Data::Gauge(pm::Gauge {
            data_points: vec![point(Vec::new(), v)],
        })),
        ..Default::default()
    };
    metrics.push(gauge("ebtop.endpoints", "{endpoint}", int(model.endpoints)));
    metrics.push(gauge(
        "ebtop.open_connections",
        "{connection}",
        int(model.open_connections),
    ));
    if let Some(rss) = model.rss_bytes {
        metrics.push(gauge("ebtop.resident_memory", "By", int(rss)));
    }
    for (name, v) in [
        ("ebtop.cpu", model.cpu_ratio),
        ("ebtop.bpf_cpu", model.bpf_cpu_ratio),
    ] {
        if let Some(v) = v {
            metrics.push(gauge(name, "1", pm::number_data_point::Value::AsDouble(v)));
        }
    }
    ExportMetricsServiceRequest {
        resource_metrics: vec![pm::ResourceMetrics {
            resource: Some(Resource {
                attributes: vec![
                    kv_str("service.name", "ebtop"),
                    kv_str("host.name", &session.host),
                ],
                ..Default::default()
            }),
            scope_metrics: vec![pm::ScopeMetrics {
                scope: Some(scope()),
                metrics,
                ..Default::default()
            }],
            ..Default::default()
        }],
    }
}

#[cfg(test)]
mod tests;
