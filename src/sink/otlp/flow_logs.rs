//! `--otlp-flow-logs`: each TCP flow's end as an OTLP log record (`/v1/logs`), the numbers of
//! its `flow_end` line as attributes (docs/fleet.md lists them).

use opentelemetry_proto::tonic::collector::logs::v1::ExportLogsServiceRequest;
use opentelemetry_proto::tonic::common::v1::{any_value, AnyValue, KeyValue};
use opentelemetry_proto::tonic::logs::v1::{LogRecord, ResourceLogs, ScopeLogs, SeverityNumber};
use opentelemetry_proto::tonic::resource::v1::Resource;

use super::{kv_int, kv_str, process_resource, scope, Session};
use crate::flows::TcpFlow;

/// The event name of every record (`event_name`, and the `event.name` attribute for
/// collectors that predate the field).
pub const EVENT_NAME: &str = "ebtop.flow.end";

/// What a flow-end record needs, copied on the pipeline's thread.
#[derive(Debug, Clone)]
pub struct FlowLog {
    pub flow: TcpFlow,
    pub end_unix_ns: u64,
}

/// A flow's process (pid, name), if one was named.
type Owner<'a> = Option<(u32, &'a str)>;

/// One request for a batch of flow ends, grouped by process (each its own resource; flows
/// no process was named for share the host's).
pub fn logs_request(batch: &[FlowLog], session: &Session) -> ExportLogsServiceRequest {
    let mut by_owner: Vec<(Owner<'_>, Vec<LogRecord>)> = Vec::new();
    for l in batch {
        let owner = l.flow.pid.zip(l.flow.comm.as_deref());
        let record = record_of(l);
        match by_owner.iter_mut().find(|(o, _)| *o == owner) {
            Some((_, records)) => records.push(record),
            None => by_owner.push((owner, vec![record])),
        }
    }
    ExportLogsServiceRequest {
        resource_logs: by_owner
            .into_iter()
            .map(|(owner, log_records)| ResourceLogs {
                resource: Some(match owner {
                    Some((pid, comm)) => process_resource(pid, comm, &session.host),
                    None => Resource {
                        attributes: vec![kv_str("host.name", &session.host)],
                        ..Default::default()
                    },
                }),
                scope_logs: vec![ScopeLogs {
                    scope: Some(scope()),
                    log_records,
                    ..Default::default()
                }],
                ..Default::default()
            })
            .collect(),
    }
}

fn kv_u64(key: &str, value: u64) -> KeyValue {
    kv_int(key, i64::try_from(value).unwrap_or(i64::MAX))
}

/// A flow end's record: at its end time, INFO (a reset or a socket error WARN), a one-line
/// body, and the `flow_end` line's numbers as attributes.
fn record_of(l: &FlowLog) -> LogRecord {
    let f = &l.flow;
    let reason = f.close_reason.map_or("unknown", |r| r.as_str());
    let troubled = f.sk_err.is_some() || f.rst_sent + f.rst_received > 0;
    let mut attrs = vec![
        kv_str("event.name", EVENT_NAME),
        kv_str("network.transport", "tcp"),
        kv_str(
            "network.type",
            if f.local.is_ipv4() { "ipv4" } else { "ipv6" },
        ),
        kv_str("network.local.address", &f.local.ip().to_string()),
        kv_int("network.local.port", i64::from(f.local.port())),
        kv_str("network.peer.address", &f.peer.ip().to_string()),
        kv_int("network.peer.port", i64::from(f.peer.port())),
        kv_u64("ebtop.flow.id", f.flow_id),
        kv_u64("ebtop.flow.bytes_out", f.bytes_out),
        kv_u64("ebtop.flow.bytes_in", f.bytes_in),
        kv_u64("ebtop.flow.segs_out", f.segs_out),
        kv_u64("ebtop.flow.segs_in", f.segs_in),
        kv_u64("ebtop.flow.retrans_segs", f.retrans_segs),
        kv_u64("ebtop.flow.rst_sent", f.rst_sent),
        kv_u64("ebtop.flow.rst_received", f.rst_received),
        kv_str("ebtop.flow.close_reason", reason),
        KeyValue {
            key: "ebtop.flow.preexisting".to_owned(),
            value: Some(AnyValue {
                value: Some(any_value::Value::BoolValue(f.preexisting)),
            }),
            ..Default::default()
        },
    ];
    if let Some(r) = f.role {
        attrs.push(kv_str("ebtop.flow.role", r.as_str()));
    }
    if let Some(d) = f.duration_ns.filter(|_| !f.preexisting) {
        attrs.push(kv_u64("ebtop.flow.duration_ns", d));
    }
    if let Some(c) = f.connect_latency_ns {
        attrs.push(kv_u64("ebtop.flow.connect_latency_ns", c));
    }
    if let Some(s) = f.srtt_us {
        attrs.push(kv_u64("ebtop.flow.srtt_ns", u64::from(s) * 1000));
    }
    if let Some(e) = f.sk_err {
        attrs.push(kv_int("ebtop.flow.sk_err", i64::from(e)));
    }
    if let Some(p) = f.l7.as_deref() {
        attrs.push(kv_str("ebtop.flow.l7", p));
    }
    LogRecord {
        time_unix_nano: l.end_unix_ns,
        observed_time_unix_nano: l.end_unix_ns,
        severity_number: if troubled {
            SeverityNumber::Warn
        } else {
            SeverityNumber::Info
        } as i32,
        severity_text: if troubled { "WARN" } else { "INFO" }.to_owned(),
        body: Some(AnyValue {
            value: Some(any_value::Value::StringValue(format!(
                "tcp flow {} -> {} ended ({reason}): {} bytes out, {} in",
                f.local, f.peer, f.bytes_out, f.bytes_in
            ))),
        }),
        attributes: attrs,
        event_name: EVENT_NAME.to_owned(),
        ..Default::default()
    }
}
