//! JSON lines: one object per line, `type` on every line (schema: docs/json.md).

use std::io::{self, Write};

use serde::Serialize;

use super::Sink;
use crate::call::Call;
use crate::clock::WallClock;
use crate::procinfo::ProcInfo;
use crate::report::IntervalReport;
use crate::session::{Filters, SessionMeta, Summary};

pub struct JsonSink<W: Write> {
    out: W,
    clock: WallClock,
    /// Unix time the session started (recorded time when replaying).
    start_unix_ns: i64,
    /// Reused for each call line.
    buf: Vec<u8>,
    /// Writes the call lines, with `clock`.
    calls: super::call_line::CallFormatter,
}

impl<W: Write> JsonSink<W> {
    pub fn new(out: W) -> Self {
        JsonSink {
            out,
            clock: WallClock { offset_ns: 0 },
            start_unix_ns: 0,
            buf: Vec::with_capacity(1024),
            calls: Default::default(),
        }
    }
    fn line<T: Serialize>(&mut self, v: &T) -> io::Result<()> {
        serde_json::to_writer(&mut self.out, v)?;
        self.out.write_all(b"\n")
    }
    /// A `flow` line (an active flow, TCP or UDP).
    fn flow_line<T: Serialize>(&mut self, ts: &str, start_mono_ns: u64, f: &T) -> io::Result<()> {
        let start = self.clock.rfc3339(start_mono_ns);
        self.line(&FlowLine {
            ty: "flow",
            ts,
            start,
            end: None,
            body: f,
        })
    }
    pub fn into_inner(self) -> W {
        self.out
    }
}

#[derive(Serialize)]
struct MetaLine<'a> {
    #[serde(rename = "type")]
    ty: &'static str,
    schema: u32,
    source: &'a str,
    ebtop_version: &'a str,
    host: &'a str,
    kernel: &'a str,
    start: String,
    snaplen: u32,
    filters: &'a Filters,
    /// Live only: "socket" or "syscalls".
    #[serde(skip_serializing_if = "Option::is_none")]
    hooks: Option<&'a str>,
}

#[derive(Serialize)]
struct ProcLine<'a> {
    #[serde(rename = "type")]
    ty: &'static str,
    pid: u32,
    comm: &'a str,
    exe: Option<&'a str>,
    cmdline: &'a [String],
}

#[derive(Serialize)]
struct ExitLine<'a> {
    #[serde(rename = "type")]
    ty: &'static str,
    ts: String,
    pid: u32,
    ppid: u32,
    comm: &'a str,
    exit_code: Option<i32>,
    signal: Option<i32>,
    core_dumped: bool,
}

#[derive(Serialize)]
struct LostLine {
    #[serde(rename = "type")]
    ty: &'static str,
    ts: String,
    events: u64,
    bytes: u64,
    missed_runs: u64,
}

/// An aggregate line: `type`, `ts` (interval end), then the snapshot's own fields.
#[derive(Serialize)]
struct TaggedLine<'a, T: Serialize> {
    #[serde(rename = "type")]
    ty: &'static str,
    ts: &'a str,
    #[serde(flatten)]
    body: &'a T,
}

/// A `flow` / `flow_end` line: `type`, `ts`, wall-clock `start` (and `end`), then the flow.
#[derive(Serialize)]
struct FlowLine<'a, T: Serialize> {
    #[serde(rename = "type")]
    ty: &'static str,
    ts: &'a str,
    start: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    end: Option<String>,
    #[serde(flatten)]
    body: &'a T,
}

#[derive(Serialize)]
struct SummaryLine<'a> {
    #[serde(rename = "type")]
    ty: &'static str,
    ts: String,
    #[serde(flatten)]
    summary: &'a Summary,
}

impl<W: Write> Sink for JsonSink<W> {
    fn meta(&mut self, m: &SessionMeta) -> io::Result<()> {
        self.clock = WallClock {
            offset_ns: m.wall_offset_ns,
        };
        self.calls = super::call_line::CallFormatter::new(self.clock);
        self.start_unix_ns = m.start_unix_ns;
        self.line(&MetaLine {
            ty: "meta",
            schema: 2,
            source: &m.source,
            ebtop_version: &m.ebtop_version,
            host: &m.host,
            kernel: &m.kernel,
            start: crate::clock::rfc3339(m.start_unix_ns),
            snaplen: m.snaplen,
            filters: &m.filters,
            hooks: m.hooks.as_deref(),
        })?;
        self.out.flush()
    }

    fn process(&mut self, p: &ProcInfo) -> io::Result<()> {
        self.line(&ProcLine {
            ty: "proc",
            pid: p.pid,
            comm: &p.comm,
            exe: p.exe.as_deref(),
            cmdline: &p.cmdline,
        })
    }

    fn call(&mut self, c: &Call) -> io::Result<()> {
        self.buf.clear();
        self.calls.write(&mut self.buf, c);
        self.out.write_all(&self.buf)
    }

    fn call_formatter(&self) -> Option<super::call_line::CallFormatter> {
        Some(super::call_line::CallFormatter::new(self.clock))
    }

    fn call_formatted(&mut self, _c: &Call, line: &[u8]) -> io::Result<()> {
        self.out.write_all(line)
    }

    fn process_exit(&mut self, e: &crate::process_events::ProcessExit) -> io::Result<()> {
        let ts = self.clock.rfc3339(e.mono_ns);
        self.line(&ExitLine {
            ty: "exit",
            ts,
            pid: e.info.pid,
            ppid: e.ppid,
            comm: &e.info.comm,
            exit_code: e.status.code,
            signal: e.status.signal,
            core_dumped: e.status.core_dumped,
        })
    }

    fn lost(&mut self, mono_ns: u64, loss: &super::Loss) -> io::Result<()> {
        let ts = self.clock.rfc3339(mono_ns);
        self.line(&LostLine {
            ty: "lost",
            ts,
            events: loss.events,
            bytes: loss.bytes,
            missed_runs: loss.missed_runs,
        })
    }

    fn interval(&mut self, r: &IntervalReport) -> io::Result<()> {
        let ts = self.clock.rfc3339(r.mono_ns);
        for e in &r.endpoints {
            self.line(&TaggedLine {
                ty: "endpoint",
                ts: &ts,
                body: e,
            })?;
        }
        for p in &r.processes {
            self.line(&TaggedLine {
                ty: "process",
                ts: &ts,
                body: p,
            })?;
        }
        if let Some(o) = &r.overhead {
            self.line(&TaggedLine {
                ty: "overhead",
                ts: &ts,
                body: o,
            })?;
        }
        if let Some(fr) = &r.flows {
            for f in &fr.flows {
                self.flow_line(&ts, f.start_mono_ns, f)?;
            }
            for f in &fr.udp {
                self.flow_line(&ts, f.start_mono_ns, f)?;
            }
            for f in &fr.ends {
                let start = self.clock.rfc3339(f.start_mono_ns);
                let end = f.end_mono_ns.map(|e| self.clock.rfc3339(e));
                self.line(&FlowLine {
                    ty: "flow_end",
                    ts: &ts,
                    start,
                    end,
                    body: f,
                })?;
            }
            self.line(&TaggedLine {
                ty: "flow_stats",
                ts: &ts,
                body: &fr.stats,
            })?;
        }
        Ok(())
    }

    fn flush(&mut self) -> io::Result<()> {
        self.out.flush()
    }

    fn summary(&mut self, s: &Summary) -> io::Result<()> {
        self.line(&SummaryLine {
            ty: "summary",
            // Session end in the session's own time (a replay shows the recorded time).
            // Saturating: a recording may carry any start and duration.
            ts: crate::clock::rfc3339(
                self.start_unix_ns
                    .saturating_add(i64::try_from(s.duration_ns).unwrap_or(i64::MAX)),
            ),
            summary: s,
        })?;
        self.out.flush()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn any_start_and_duration_give_a_summary_line() {
        for (start, duration) in [
            (i64::MAX, u64::MAX),
            (i64::MAX - 1, 5),
            (i64::MIN, u64::MAX),
        ] {
            let mut sink = JsonSink::new(Vec::new());
            let mut meta = SessionMeta::this_host("replay", 0, Filters::default(), 0);
            meta.start_unix_ns = start;
            sink.meta(&meta).unwrap();
            sink.summary(&Summary {
                duration_ns: duration,
                ..Summary::default()
            })
            .unwrap();
            let out = String::from_utf8(sink.into_inner()).unwrap();
            let last: serde_json::Value =
                serde_json::from_str(out.lines().last().unwrap()).unwrap();
            assert_eq!(last["type"], "summary");
        }
    }
}
