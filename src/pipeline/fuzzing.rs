//! Drives the whole user-space pipeline from arbitrary bytes, as the live source feeds it: ring
//! buffer records (decode → filters → connection tracker → protocol parsers → calls →
//! aggregates → sink), process exec/exit records, interval ticks, flushes and the final
//! summary. The kernel's bytes are input too: a record may be anything. The cargo-fuzz target
//! `pipeline` (fuzz/) and a stable-toolchain randomized unit test share this driver.
//!
//! The input is a session: a few configuration bytes, then a sequence of operations, each a tag
//! byte and its fields (missing bytes read as zeros):
//!
//! ```text
//! input  := c0:u8 c1:u8 clock:u8 [start_unix_ns:i64 wall_offset_ns:i64 if clock == 0xff] op*
//! op     := tag:u8 ...   (tag % 8)
//!   0-2  a data record built from fields:  a:u8 b:u8
//!          a: bits 0-2 socket (7: sock_id:u64 follows), bit 3 ingress, bits 4-5 seq mode
//!             (0 continue, 1 jump forward skip:u16, 2 any seq:u64, 3 back by:u8),
//!             bit 6 uncaptured bytes (extra:u32 after the payload), bit 7 datagram socket
//!          b: bits 0-1 pid (3: pid:u32 follows), bits 2-3 comm (3: comm:[u8;16] follows),
//!             bit 4 IPv6, bits 5-7 time step (7: step:u32 µs follows)
//!          then len:u8 [len:u16 if len == 255] payload [extra:u32]
//!   3    a connect/accept/close record:     a:u8 (bits 0-1 kind, bits 2-4 socket)
//!   4    a raw ring-buffer record:           len:u16 bytes
//!   5    a process record:                   a:u8; bit 0: raw (len:u16 bytes), else exec
//!          (bit 1 clear) or exit: pid as in data records (bits 2-3), comm (bits 4-5),
//!          code:u16, filename len:u8 bytes, args len:u8 bytes, bit 6: args_len_full:u32
//!   6    an interval tick:                   a:u8 (bits 0-1 time: 0 one second, 1 step:u32 µs,
//!          2 any now:u64, 3 same time; bit 2: losses lost:u16 lost_bytes:u32 more; bit 3:
//!          counters lost:u64 lost_bytes:u64 as given; bits 4-5 CPUs in lost_per_cpu; bit 6:
//!          an (empty) flow table report first)
//!   7    a flush (end of a ring-buffer batch)
//! c0: bit 0 shallow parsing, bit 1 raw resources, bit 2 keep message heads, bit 3 exit
//!     records (the process probe loaded), bit 4 a 4-connection table, bit 5 a 1 ms idle
//!     timeout, bits 6-7 filters (0 none, 1 --proto, 2 --port/--pid, 3 --comm; c1 picks values)
//! ```
//!
//! Sockets 0-6 get their own stream positions, ports and process, so one input interleaves
//! several connections; the fuzzer controls every seq and length. Besides "no panic", the driver
//! checks what must hold for any input: the sink sees the meta first and the summary last, every
//! call's process is described before it, interval reports add up to the summary, the counts are
//! consistent with the records fed, and every output line is JSON.

use std::collections::HashMap;
use std::io;

use super::Pipeline;
use crate::call::{Call, Side};
use crate::conntrack::TrackerConfig;
use crate::event::{Direction, EventBuilder, EventKind, AF_INET6, SOCK_DGRAM};
use crate::filters::Filters;
use crate::kernel_counters::KernelCounters;
use crate::process_events::{self, ProcEventKind, ProcessExit};
use crate::procinfo::{ProcInfo, ProcessTable};
use crate::protocols::{ParseDepth, Protocol};
use crate::report::IntervalReport;
use crate::session_meta::SessionMeta;
use crate::sink::json::JsonSink;
use crate::sink::Sink;
use crate::summary::Summary;

/// Operation tags (the low 3 bits of a tag byte).
pub mod op {
    pub const DATA: u8 = 0;
    pub const LIFECYCLE: u8 = 3;
    pub const RAW: u8 = 4;
    pub const PROC: u8 = 5;
    pub const INTERVAL: u8 = 6;
    pub const FLUSH: u8 = 7;
}

/// Session start in kernel time for the default clock (1000 s after boot).
const START_MONO_NS: u64 = 1_000_000_000_000;
const PIDS: [u32; 3] = [100, 200, 300];
const COMMS: [&[u8]; 3] = [b"curl", b"nginx", b""];

/// What one run of the driver fed and saw (for tests that want more than "no panic").
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Outcome {
    /// Socket records and process records fed, interval ticks.
    pub records: u64,
    pub proc_records: u64,
    pub intervals: u64,
    /// Calls the sink received.
    pub calls: u64,
    /// JSON lines written.
    pub lines: u64,
    pub summary: Summary,
}

/// The input, read front to back; reads past the end give zeros.
struct Input<'a>(&'a [u8]);

impl<'a> Input<'a> {
    fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
    fn take(&mut self, n: usize) -> &'a [u8] {
        let (head, tail) = self.0.split_at(n.min(self.0.len()));
        self.0 = tail;
        head
    }
    fn array<const N: usize>(&mut self) -> [u8; N] {
        let mut a = [0u8; N];
        let b = self.take(N);
        a[..b.len()].copy_from_slice(b);
        a
    }
    fn u8(&mut self) -> u8 {
        self.array::<1>()[0]
    }
    fn u16(&mut self) -> u16 {
        u16::from_le_bytes(self.array())
    }
    fn u32(&mut self) -> u32 {
        u32::from_le_bytes(self.array())
    }
    fn u64(&mut self) -> u64 {
        u64::from_le_bytes(self.array())
    }
    fn pid(&mut self, sel: u8) -> u32 {
        match sel & 3 {
            3 => self.u32(),
            i => PIDS[usize::from(i)],
        }
    }
    fn comm(&mut self, sel: u8) -> [u8; 16] {
        match sel & 3 {
            3 => self.array(),
            i => {
                let mut c = [0u8; 16];
                let s = COMMS[usize::from(i)];
                c[..s.len()].copy_from_slice(s);
                c
            }
        }
    }
}

/// A sink that checks what every sink may rely on, then hands everything to the JSON sink.
struct Checked {
    json: JsonSink<Vec<u8>>,
    met: bool,
    summarised: bool,
    calls: u64,
    calls_at_last_interval: u64,
    /// The comm of the latest `process` line of each pid.
    described: HashMap<u32, String>,
}

impl Checked {
    fn live(&self) {
        assert!(self.met, "output before the meta line");
        assert!(!self.summarised, "output after the summary");
    }

    fn check_call(&mut self, call: &Call) {
        self.live();
        assert_eq!(
            self.described.get(&call.pid).map(String::as_str),
            Some(&*call.comm),
            "a call of a process not described (as it is now) before it"
        );
        self.calls += 1;
    }
}

impl Sink for Checked {
    fn meta(&mut self, meta: &SessionMeta) -> io::Result<()> {
        assert!(!self.met, "a second meta line");
        self.met = true;
        self.json.meta(meta)
    }
    fn process(&mut self, info: &ProcInfo) -> io::Result<()> {
        self.live();
        self.described.insert(info.pid, info.comm.clone());
        self.json.process(info)
    }
    fn call(&mut self, call: &Call) -> io::Result<()> {
        self.check_call(call);
        self.json.call(call)
    }
    fn call_formatter(&self) -> Option<crate::sink::call_line::CallFormatter> {
        self.json.call_formatter()
    }
    fn call_formatted(&mut self, call: &Call, line: &[u8]) -> io::Result<()> {
        self.check_call(call);
        self.json.call_formatted(call, line)
    }
    fn process_exit(&mut self, exit: &ProcessExit) -> io::Result<()> {
        self.live();
        assert!(
            self.described.contains_key(&exit.info.pid),
            "the exit of a process never described"
        );
        self.json.process_exit(exit)
    }
    fn lost(&mut self, mono_ns: u64, loss: &crate::sink::Loss) -> io::Result<()> {
        self.live();
        assert!(
            loss.events > 0 || loss.missed_runs > 0,
            "a loss line of no events and no missed runs"
        );
        self.json.lost(mono_ns, loss)
    }
    fn interval(&mut self, report: &IntervalReport) -> io::Result<()> {
        self.live();
        // Server calls the chains hold are counted already and written later (with their
        // client call, or when due).
        let held = report.totals.chains.map_or(0, |c| c.held_now);
        assert_eq!(
            report.totals.calls,
            self.calls + held,
            "interval totals vs calls written and held"
        );
        let in_interval: u64 = report.endpoints.iter().map(|e| e.calls).sum();
        assert_eq!(
            in_interval,
            self.calls + held - self.calls_at_last_interval,
            "the interval's endpoints vs its calls"
        );
        self.calls_at_last_interval = self.calls + held;
        self.json.interval(report)
    }
    fn flush(&mut self) -> io::Result<()> {
        self.live();
        self.json.flush()
    }
    fn summary(&mut self, summary: &Summary) -> io::Result<()> {
        self.live();
        self.summarised = true;
        self.json.summary(summary)
    }
}

/// Per socket id, the next stream position of each direction.
type Sockets = HashMap<u64, [u64; 2]>;

/// Feeds the session `data` describes to a fresh pipeline (see the module docs) and checks the
/// invariants that must hold for any input. Panics on a violation. For a quarter of the inputs
/// (two bits of the second byte) the same session also goes through a pipeline tracking on 2 or 3
/// worker threads, whose output must be the serial one byte for byte (unless the input set
/// a connection cap so small that sharing it out between workers changes what is evicted).
pub fn drive(data: &[u8]) -> Outcome {
    let (out, json) = drive_with(data, 1);
    let (c0, c1) = (
        data.first().copied().unwrap_or(0),
        data.get(1).copied().unwrap_or(0),
    );
    if c1 & 0xc0 == 0xc0 && c0 & 16 == 0 {
        let threads = 2 + usize::from((c1 >> 5) & 1);
        let (_, sharded) = drive_with(data, threads);
        if sharded != json {
            panic!(
                "{threads} tracking threads changed the output:\n--- serial\n{}\n--- sharded\n{}",
                String::from_utf8_lossy(&json),
                String::from_utf8_lossy(&sharded)
            );
        }
    }
    out
}

fn drive_with(data: &[u8], threads: usize) -> (Outcome, Vec<u8>) {
    let mut input = Input(data);
    let (c0, c1, clock) = (input.u8(), input.u8(), input.u8());
    let (start_unix_ns, wall_offset_ns) = if clock == 0xff {
        (input.u64() as i64, input.u64() as i64)
    } else {
        let unix = 1_700_000_000_000_000_000 + i64::from(clock) * 1_000_000_000;
        (unix, unix - START_MONO_NS as i64)
    };
    let filters = match c0 >> 6 {
        0 => Filters::default(),
        1 => Filters {
            proto: Some(if c1 & 1 == 0 {
                vec![Protocol::Http]
            } else {
                vec![]
            }),
            ..Filters::default()
        },
        2 => Filters {
            port: (c1 & 1 == 0).then(|| vec![8080, 5432]),
            pid: (c1 & 2 == 0).then(|| vec![PIDS[0]]),
            ..Filters::default()
        },
        _ => Filters {
            comm: Some(vec![["curl", "nginx", "", "a-name-longer-than-15-bytes"]
                [usize::from(c1 & 3)]
            .into()]),
            ..Filters::default()
        },
    };
    let meta = SessionMeta {
        source: "live".into(),
        ebtop_version: "fuzz".into(),
        host: "fuzz".into(),
        kernel: "fuzz".into(),
        start_unix_ns,
        wall_offset_ns,
        snaplen: 4096,
        filters: filters.clone(),
        hooks: Some("socket".into()),
        loaded: Vec::new(),
        tls_probed: Vec::new(),
        tls_probe_failures: Vec::new(),
        event_rings: None,
    };
    let cfg = TrackerConfig {
        depth: if c0 & 1 != 0 {
            ParseDepth::Shallow
        } else {
            ParseDepth::Full
        },
        keep_head: if c0 & 4 != 0 { 256 } else { 0 },
        max_conns: if c0 & 16 != 0 { 4 } else { 65536 },
        idle_timeout_ns: if c0 & 32 != 0 {
            1_000_000
        } else {
            120_000_000_000
        },
        ..TrackerConfig::default()
    };
    let sink = Checked {
        json: JsonSink::new(Vec::new()),
        met: false,
        summarised: false,
        calls: 0,
        calls_at_last_interval: 0,
        described: HashMap::new(),
    };
    // Not reading /proc (as a replay): the fuzzer's pids are not this machine's processes.
    let mut pipeline = Pipeline::new(cfg, ProcessTable::new(false), sink)
        .with_raw_resources(c0 & 2 != 0)
        .with_filters(filters)
        .with_threads(threads);
    if c0 & 8 != 0 {
        pipeline.use_exit_records();
    }
    pipeline.start(&meta).expect("the sink does not fail");

    let mut out = Outcome::default();
    let mut socks = Sockets::new();
    let mut now = meta.start_mono_ns();
    let mut kernel = KernelCounters::default();
    while !input.is_empty() {
        let tag = input.u8();
        match tag & 7 {
            op::LIFECYCLE => {
                let a = input.u8();
                let kind = match a & 3 {
                    0 => EventKind::Connect,
                    1 => EventKind::Accept,
                    _ => EventKind::Close,
                };
                let sock_id = u64::from((a >> 2) & 7) + 1;
                if kind == EventKind::Close {
                    socks.remove(&sock_id);
                }
                now = now.saturating_add(1_000);
                let raw = EventBuilder::lifecycle(kind, sock_id)
                    .times(now, now.saturating_add(500))
                    .build(b"");
                out.records += 1;
                pipeline.on_record(&raw).expect("the sink does not fail");
            }
            op::RAW => {
                let len = input.u16();
                let raw = input.take(usize::from(len));
                out.records += 1;
                pipeline.on_record(raw).expect("the sink does not fail");
            }
            op::PROC => {
                let raw = proc_record(&mut input, &mut now);
                out.proc_records += 1;
                pipeline
                    .on_proc_record(&raw)
                    .expect("the sink does not fail");
            }
            op::INTERVAL => {
                let a = input.u8();
                now = match a & 3 {
                    0 => now.saturating_add(1_000_000_000),
                    1 => now.saturating_add(u64::from(input.u32()) * 1_000),
                    2 => input.u64(),
                    _ => now,
                };
                kernel.events = out.records;
                kernel.proc_events = out.proc_records;
                if a & 4 != 0 {
                    kernel.lost = kernel.lost.saturating_add(u64::from(input.u16()));
                    kernel.lost_bytes = kernel.lost_bytes.saturating_add(u64::from(input.u32()));
                }
                if a & 8 != 0 {
                    kernel.lost = input.u64();
                    kernel.lost_bytes = input.u64();
                }
                kernel.lost_per_cpu = vec![kernel.lost; usize::from((a >> 4) & 3)];
                if a & 64 != 0 {
                    pipeline
                        .set_flows(crate::flows::FlowReport {
                            mono_ns: now,
                            ..Default::default()
                        })
                        .expect("the sink does not fail");
                }
                out.intervals += 1;
                pipeline
                    .on_interval(now, &kernel, None)
                    .expect("the sink does not fail");
            }
            op::FLUSH => pipeline.flush().expect("the sink does not fail"),
            _ => {
                let raw = data_record(&mut input, &mut socks, &mut now);
                out.records += 1;
                pipeline.on_record(&raw).expect("the sink does not fail");
            }
        }
    }
    pipeline.flush().expect("the sink does not fail");
    let duration_ns = now.saturating_sub(meta.start_mono_ns());
    let (sink, summary) = pipeline
        .finish(&kernel, duration_ns)
        .expect("the sink does not fail");
    assert!(sink.summarised, "no summary line");
    check_summary(&out, sink.calls, &summary);
    let json = sink.json.into_inner();
    for line in json.split(|&b| b == b'\n').filter(|l| !l.is_empty()) {
        if let Err(e) = serde_json::from_slice::<serde::de::IgnoredAny>(line) {
            panic!(
                "output line is not JSON ({e}): {}",
                String::from_utf8_lossy(line)
            );
        }
        out.lines += 1;
    }
    out.calls = sink.calls;
    out.summary = summary;
    (out, json)
}

fn check_summary(out: &Outcome, calls: u64, s: &Summary) {
    assert_eq!(s.calls, calls, "summary calls vs the sink's");
    assert_eq!(s.calls_client + s.calls_server, s.calls, "client + server");
    assert_eq!(s.events, out.records + out.proc_records, "records counted");
    assert!(s.decode_errors + s.filtered_events <= s.events);
    assert!(s.process_execs + s.process_exits <= out.proc_records);
    assert!(s.tracker.data_events <= out.records);
    let by_endpoint: u64 = s.endpoints.iter().map(|e| e.calls).sum();
    assert_eq!(by_endpoint, s.calls, "the endpoints' calls vs all calls");
    let (client, server) = s.endpoints.iter().fold((0, 0), |(c, v), e| match e.side {
        Side::Client => (c + e.calls, v),
        Side::Server => (c, v + e.calls),
    });
    assert_eq!((client, server), (s.calls_client, s.calls_server));
}

/// The data record of a data operation (see the module docs).
fn data_record(input: &mut Input, socks: &mut Sockets, now: &mut u64) -> Vec<u8> {
    let (a, b) = (input.u8(), input.u8());
    let sock = a & 7;
    let sock_id = if sock == 7 {
        input.u64()
    } else {
        u64::from(sock) + 1
    };
    let dir = if a & 8 == 0 {
        Direction::Egress
    } else {
        Direction::Ingress
    };
    let next = socks.entry(sock_id).or_default();
    let expected = next[dir.index()];
    let seq = match (a >> 4) & 3 {
        0 => expected,
        1 => expected.wrapping_add(u64::from(input.u16())),
        2 => input.u64(),
        _ => expected.wrapping_sub(u64::from(input.u8())),
    };
    let pid = input.pid(b);
    let comm = input.comm(b >> 2);
    let step = match b >> 5 {
        7 => u64::from(input.u32()) * 1_000,
        s => u64::from(s) * u64::from(s) * 10_000,
    };
    *now = now.saturating_add(step);
    let mut len = usize::from(input.u8());
    if len == 255 {
        len = usize::from(input.u16());
    }
    let payload = input.take(len);
    let extra = if a & 64 != 0 {
        u64::from(input.u32())
    } else {
        0
    };
    let total_len = payload.len() as u64 + extra;
    next[dir.index()] = seq.wrapping_add(total_len);
    // Sockets of odd index are the traced process's client side, the others its server side.
    let port = 40000u16.wrapping_add(sock_id as u16);
    let (lport, rport) = if sock % 2 == 1 {
        (port, 8080)
    } else {
        (8080, port)
    };
    let mut ev = EventBuilder::data(dir, sock_id, seq, total_len)
        .times(*now, now.saturating_add(1_000))
        .process(pid, pid, "")
        .v4([127, 0, 0, 1], lport, [10, 0, 0, sock], rport);
    ev.header[104..120].copy_from_slice(&comm);
    if b & 16 != 0 {
        ev.header[59] = AF_INET6;
        ev.header[88..104]
            .copy_from_slice(&[0x20, 1, 0xd, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, sock]);
    }
    if a & 128 != 0 {
        ev.header[60] = SOCK_DGRAM;
    }
    ev.build(payload)
}

/// The raw record of a process operation (see the module docs).
fn proc_record(input: &mut Input, now: &mut u64) -> Vec<u8> {
    let a = input.u8();
    if a & 1 != 0 {
        let len = input.u16();
        return input.take(usize::from(len)).to_vec();
    }
    let kind = if a & 2 == 0 {
        ProcEventKind::Exec
    } else {
        ProcEventKind::Exit
    };
    let pid = input.pid(a >> 2);
    let comm = input.comm(a >> 4);
    let code = i32::from(input.u16());
    let filename_len = input.u8();
    let filename = input.take(usize::from(filename_len));
    let args_len = input.u8();
    let args = input.take(usize::from(args_len));
    *now = now.saturating_add(1_000);
    let mut raw = process_events::build(kind, *now, pid, "", code, filename, args);
    raw[40..56].copy_from_slice(&comm);
    if a & 64 != 0 {
        raw[32..36].copy_from_slice(&input.array::<4>());
    }
    raw
}

/// Writes driver inputs: seeds from fixtures, and tests.
#[derive(Debug, Clone)]
pub struct Encoder {
    pub bytes: Vec<u8>,
}

impl Default for Encoder {
    fn default() -> Self {
        Encoder::new(0, 0, None)
    }
}

impl Encoder {
    /// A session with configuration bytes `c0`, `c1` and the given (or default) clock.
    pub fn new(c0: u8, c1: u8, clock: Option<(i64, i64)>) -> Encoder {
        let mut bytes = vec![c0, c1];
        match clock {
            Some((unix, offset)) => {
                bytes.push(0xff);
                bytes.extend_from_slice(&unix.to_le_bytes());
                bytes.extend_from_slice(&offset.to_le_bytes());
            }
            None => bytes.push(0),
        }
        Encoder { bytes }
    }

    /// A data record on socket `sock` (0-6) continuing its stream, `total_len` at least the
    /// payload's length (more: bytes moved but not captured), after a time step (0-6).
    pub fn data(&mut self, sock: u8, dir: Direction, payload: &[u8], total_len: u64, step: u8) {
        let extra = total_len.saturating_sub(payload.len() as u64);
        let payload = &payload[..payload.len().min(usize::from(u16::MAX))];
        let mut a = (sock % 7) | (dir as u8) << 3;
        if extra > 0 {
            a |= 64;
        }
        self.bytes
            .extend_from_slice(&[op::DATA, a, ((sock % 3) * 5) | ((step % 7) << 5)]);
        if payload.len() >= 255 {
            self.bytes.push(255);
            self.bytes
                .extend_from_slice(&(payload.len() as u16).to_le_bytes());
        } else {
            self.bytes.push(payload.len() as u8);
        }
        self.bytes.extend_from_slice(payload);
        if extra > 0 {
            let extra = u32::try_from(extra).unwrap_or(u32::MAX);
            self.bytes.extend_from_slice(&extra.to_le_bytes());
        }
    }

    /// A close record of socket `sock`.
    pub fn close(&mut self, sock: u8) {
        self.bytes
            .extend_from_slice(&[op::LIFECYCLE, 2 | (sock % 7) << 2]);
    }

    /// A ring-buffer record as is (cut at 64 KiB).
    pub fn raw(&mut self, raw: &[u8]) {
        self.raw_op(op::RAW, raw);
    }

    /// A process record as is (cut at 64 KiB).
    pub fn raw_proc(&mut self, raw: &[u8]) {
        self.bytes.extend_from_slice(&[op::PROC, 1]);
        let raw = &raw[..raw.len().min(usize::from(u16::MAX))];
        self.bytes
            .extend_from_slice(&(raw.len() as u16).to_le_bytes());
        self.bytes.extend_from_slice(raw);
    }

    fn raw_op(&mut self, tag: u8, raw: &[u8]) {
        let raw = &raw[..raw.len().min(usize::from(u16::MAX))];
        self.bytes.push(tag);
        self.bytes
            .extend_from_slice(&(raw.len() as u16).to_le_bytes());
        self.bytes.extend_from_slice(raw);
    }

    /// An interval tick one second later.
    pub fn tick(&mut self) {
        self.bytes.extend_from_slice(&[op::INTERVAL, 0]);
    }

    /// An interval tick at `now_ns` with the kernel's loss counters as given.
    pub fn interval_at(&mut self, now_ns: u64, lost: u64, lost_bytes: u64) {
        self.bytes.extend_from_slice(&[op::INTERVAL, 2 | 8 | 16]);
        for v in [now_ns, lost, lost_bytes] {
            self.bytes.extend_from_slice(&v.to_le_bytes());
        }
    }

    pub fn flush(&mut self) {
        self.bytes.push(op::FLUSH);
    }
}

/// A driver input replaying a recording's records (events, process records, intervals) in
/// its order, with its clock; `None` if `bytes` is not a readable recording.
pub fn seed_from_recording(bytes: &[u8]) -> Option<Vec<u8>> {
    use crate::record::reader::{Item, RecordingReader};
    let mut reader = RecordingReader::new(bytes).ok()?;
    let meta = &reader.header.meta;
    let mut enc = Encoder::new(0, 0, Some((meta.start_unix_ns, meta.wall_offset_ns)));
    reader
        .for_each(|item| {
            match item {
                Item::Event(raw) => enc.raw(raw),
                Item::ProcEvent(raw) => enc.raw_proc(raw),
                Item::Interval(iv) => {
                    enc.interval_at(iv.mono_ns, iv.kernel.lost, iv.kernel.lost_bytes)
                }
                Item::Process(_)
                | Item::Flows(_)
                | Item::Profile(_)
                | Item::ProfileTrigger(..)
                | Item::End(_) => {}
            }
            Ok(())
        })
        .ok()?;
    Some(enc.bytes)
}

/// A driver input playing `.seg` fixtures (real traffic, one connection each) interleaved
/// syscall by syscall, with a tick every `tick_every` records and closes at the end.
pub fn seed_from_segs(files: &[crate::segfile::SegFile], tick_every: usize) -> Vec<u8> {
    let mut enc = Encoder::default();
    let longest = files.iter().map(|f| f.entries.len()).max().unwrap_or(0);
    let mut n = 0;
    for i in 0..longest {
        for (sock, f) in files.iter().enumerate().take(7) {
            let Some(e) = f.entries.get(i) else {
                continue;
            };
            let dir = crate::segfile::seg_direction(f, e.to_server);
            enc.data(sock as u8, dir, &e.bytes, e.total_len, 1);
            n += 1;
            if tick_every > 0 && n % tick_every == 0 {
                enc.tick();
            }
        }
        enc.flush();
    }
    for sock in 0..files.len().min(7) {
        enc.close(sock as u8);
    }
    enc.tick();
    enc.bytes
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::xorshift::XorShift as Rng;

    fn http_session(c0: u8) -> Vec<u8> {
        let mut e = Encoder::new(c0, 0, None);
        let req = b"GET /a/1 HTTP/1.1\r\nHost: x\r\n\r\n";
        let resp = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok";
        for sock in 0..4 {
            e.data(sock, Direction::Egress, req, req.len() as u64, 1);
            e.data(sock, Direction::Ingress, resp, resp.len() as u64, 2);
        }
        e.tick();
        e.data(5, Direction::Ingress, req, req.len() as u64, 1);
        e.data(5, Direction::Egress, resp, resp.len() as u64, 1);
        e.close(5);
        e.flush();
        e.bytes
    }

    #[test]
    fn a_well_formed_session_gives_its_calls() {
        let out = drive(&http_session(0));
        assert_eq!(out.records, 11);
        assert_eq!(out.calls, 5);
        assert_eq!(out.summary.calls_client, 4);
        assert_eq!(out.summary.calls_server, 1);
        assert_eq!(out.summary.tracker.gaps, 0);
        assert_eq!(out.intervals, 1);
        // meta, 3 process lines (pids 100, 200, 300), 5 calls, endpoint and process lines
        // of two intervals, the summary.
        assert!(out.lines > 10, "{} lines", out.lines);
    }

    #[test]
    fn random_and_mutated_inputs_never_panic() {
        let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
        let seeds: Vec<Vec<u8>> = (0..8u8).map(|c0| http_session(c0 << 3 | c0)).collect();
        for _ in 0..1500 {
            let mut input = seeds[(rng.next() % seeds.len() as u64) as usize].clone();
            for _ in 0..(rng.next() % 6) {
                let i = (rng.next() % input.len() as u64) as usize;
                match rng.next() % 3 {
                    0 => input[i] = rng.next() as u8,
                    1 => input.truncate(i.max(3)),
                    _ => {
                        let j = (rng.next() % input.len() as u64) as usize;
                        let piece = input[i.min(j)..i.max(j)].to_vec();
                        input.splice(i..i, piece);
                    }
                }
            }
            drive(&input);
        }
        for _ in 0..1500 {
            let n = (rng.next() % 400) as usize;
            let mut input: Vec<u8> = (0..n).map(|_| rng.next() as u8).collect();
            // Mostly small tags and lengths, so records are often well formed.
            for b in input.iter_mut().skip(3).step_by(2) {
                *b &= 0x1f;
            }
            drive(&input);
        }
    }
}
