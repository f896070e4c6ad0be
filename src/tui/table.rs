//! The views' tables: columns, the rows built from calls, endpoints, connections and
//! processes, their marks and sort keys, and how numbers and times are written in them.

use std::cell::RefCell;
use std::cmp::Ordering;
use std::rc::Rc;

use crate::aggregate::EndpointSnapshot;
use crate::call::{Call, Side};
use crate::clock::TimeZone;
use crate::protocols::Outcome;
use crate::session_meta::SessionMeta;

/// A call at least this slow is marked `*` (and is `slow` to the filter).
pub use crate::call_filter::SLOW_NS;

#[derive(Debug, Clone)]
pub struct CallEntry {
    /// Arrival number: the call's identity in the UI.
    pub seq: u64,
    pub call: Box<Call>,
    /// The pipeline's endpoint row the call was counted in (None: not given): a drill-down
    /// lists the calls of its row by it, never normalising a call again.
    pub endpoint: Option<crate::aggregate::RowRef>,
    /// The call's row, built once for the time format it was built with (`call_row_cached`):
    /// the Calls view lists up to `CALL_RING` calls at every frame, and building each row
    /// anew (about twenty strings) was the UI thread's largest cost under load.
    row: RefCell<Option<(RowTimeFormat, SharedRow)>>,
}

impl CallEntry {
    pub fn new(seq: u64, call: Box<Call>, endpoint: Option<crate::aggregate::RowRef>) -> CallEntry {
        CallEntry {
            seq,
            call,
            endpoint,
            row: RefCell::new(None),
        }
    }
}

/// A row as views hand it around: shared, so a row kept from one frame to the next is not
/// copied.
pub type SharedRow = Rc<Row>;

/// What a call's TIME cell depends on besides the call: the session's wall-clock offset,
/// the zone, and whether the date is shown.
#[derive(Debug, Clone)]
struct RowTimeFormat {
    wall_offset_ns: i64,
    zone: TimeZone,
    dated: bool,
}

/// `call_row`, kept in the entry while the time format stays the same.
pub(crate) fn call_row_cached(
    meta: Option<&SessionMeta>,
    zone: &TimeZone,
    dated: bool,
    e: &CallEntry,
) -> SharedRow {
    let wall_offset_ns = unix_ns(meta, 0);
    let mut cached = e.row.borrow_mut();
    match cached.as_ref() {
        Some((f, row))
            if f.wall_offset_ns == wall_offset_ns && f.dated == dated && f.zone == *zone =>
        {
            row.clone()
        }
        _ => {
            let row = Rc::new(call_row(meta, zone, dated, e));
            let format = RowTimeFormat {
                wall_offset_ns,
                zone: zone.clone(),
                dated,
            };
            *cached = Some((format, row.clone()));
            row
        }
    }
}

/// A connection's row of the Flows view without a flow table: the pipeline's numbers.
pub use crate::aggregate::conns::ConnStats as ConnEntry;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Flag {
    None,
    /// Server errors (HTTP 5xx, error replies).
    Error,
    /// Client errors (HTTP 4xx, requests the server rejected).
    ClientError,
    Slow,
}

impl Flag {
    pub fn marker(self) -> char {
        match self {
            Flag::None => ' ',
            Flag::Error => '!',
            Flag::ClientError => '?',
            Flag::Slow => '*',
        }
    }
}

#[derive(Debug, Clone, PartialEq)]
pub enum SortVal {
    Num(f64),
    /// Exact integers (times in ns with a tie-breaker) that f64 would round.
    Int(u128),
    Text(String),
}

impl SortVal {
    pub(crate) fn cmp(&self, o: &SortVal) -> Ordering {
        // Numbers before text; each kind in its own order.
        let rank = |v: &SortVal| match v {
            SortVal::Num(_) => 0,
            SortVal::Int(_) => 1,
            SortVal::Text(_) => 2,
        };
        match (self, o) {
            (SortVal::Num(a), SortVal::Num(b)) => a.total_cmp(b),
            (SortVal::Int(a), SortVal::Int(b)) => a.cmp(b),
            (SortVal::Text(a), SortVal::Text(b)) => a.cmp(b),
            _ => rank(self).cmp(&rank(o)),
        }
    }
}

/// A column of a view's table.
#[derive(Debug, Clone, Copy)]
pub struct Column {
    pub title: &'static str,
    pub width: u16,
    /// Columns with a higher number are dropped first when the terminal is narrow; 0 stays.
    pub drop: u8,
    /// Takes the width left over (at least `width`).
    pub flex: bool,
    /// As wide as its widest cell, not `width`: narrower when the cells are (IPv4 addresses
    /// need 9 to 21 characters), wider up to `fit_max` when the line has room (IPv6).
    pub fit: bool,
    /// Sized to its widest visible cell and never cut below it, up to this many characters
    /// (0: not so sized). For the short texts an incident is read by (`redis-server/41327`,
    /// `SERVFAIL`): a fixed width cut them while the flexible column had room to spare.
    pub cap: u16,
    pub right: bool,
}

pub(crate) const fn col(title: &'static str, width: u16, drop: u8, right: bool) -> Column {
    Column {
        title,
        width,
        drop,
        flex: false,
        fit: false,
        cap: 0,
        right,
    }
}

/// A text column as wide as its widest visible cell (or its title and sort arrow), up to
/// `cap`: never cut below that, whatever the terminal's width (`width` is what it takes
/// with no rows).
pub(crate) const fn content(title: &'static str, cap: u16, drop: u8) -> Column {
    Column {
        cap,
        width: title.len() as u16 + 1,
        ..col(title, 0, drop, false)
    }
}

/// The most a content-sized column grows to: `[` 8 groups of 4 hex digits `]:65535`.
pub const FIT_MAX: u16 = 47;

/// A column sized to its cells (addresses): at most `width` wide where the line is short.
pub(crate) const fn fit(title: &'static str, width: u16) -> Column {
    Column {
        fit: true,
        ..col(title, width, 0, false)
    }
}

pub(crate) const fn flex(title: &'static str, width: u16) -> Column {
    Column {
        title,
        width,
        drop: 0,
        flex: true,
        fit: false,
        cap: 0,
        right: false,
    }
}

pub const CALL_COLUMNS: &[Column] = &CALL_COLUMN_ARRAY;

/// What an incident is read by stays at 80 columns (time, process, proto, status, latency,
/// resource: drop 0); SIDE and the sizes go first. Process, proto, method and status are as
/// wide as their widest visible value (up to a cap); RESOURCE takes the rest and scrolls
/// (Left/Right).
const CALL_COLUMN_ARRAY: [Column; 9] = [
    col("TIME", 12, 0, false),
    content("PROCESS/PID", 32, 0),
    col("SIDE", 6, 4, false),
    content("PROTO", 12, 0),
    content("METHOD", 12, 0),
    flex("RESOURCE", 12),
    Column {
        right: true,
        ..content("STATUS", 24, 0)
    },
    col("LAT ms", 8, 0, true),
    col("REQ/RESP B", 13, 5, true),
];

/// The Calls view when its calls span more than one local date: TIME carries the date
/// (`11-26 23:59:59.123`); at 80 columns SIDE makes room for it.
pub const CALL_COLUMNS_DATED: &[Column] = &{
    let mut c = CALL_COLUMN_ARRAY;
    c[0] = col("TIME", 18, 0, false);
    c
};

/// At 80 columns an endpoint keeps its calls, server errors, p50 and p99 (drop 0); the rate,
/// client errors, p90 and max go first, in that order from the last.
pub const ENDPOINT_COLUMNS: &[Column] = &[
    content("PROCESS", 24, 0),
    col("SIDE", 6, 0, false),
    content("METHOD", 12, 0),
    flex("RESOURCE", 14),
    col("CALLS", 7, 0, true),
    col("CALLS/s", 8, 3, true),
    col("SERR %", 6, 0, true),
    col("CERR %", 6, 4, true),
    col("P50 ms", 7, 0, true),
    col("P90 ms", 7, 5, true),
    col("P99 ms", 7, 0, true),
    col("MAX ms", 7, 6, true),
];

/// The Flows view without a flow table (a replay of an old recording, flows unavailable):
/// the connections the calls went over.
pub const CONN_COLUMNS: &[Column] = &[
    fit("LOCAL", 21),
    fit("PEER", 21),
    content("PROCESS/PID", 32, 0),
    col("SIDE", 6, 3, false),
    col("CALLS", 6, 0, true),
    col("SERR", 5, 4, true),
    col("CERR", 5, 4, true),
    col("REQ B", 9, 2, true),
    col("RESP B", 9, 1, true),
];

/// The command line last and flexible, as htop's Command: two processes of the same name
/// are told apart, and the PID is never cut.
pub const PROCESS_COLUMNS: &[Column] = &[
    col("PID", 7, 0, false),
    col("CPU %", 6, 0, true),
    col("RSS MiB", 7, 0, true),
    col("CALLS/s", 8, 0, true),
    col("SERR/s", 7, 2, true),
    col("CERR/s", 7, 2, true),
    col("IN B/s", 8, 3, true),
    col("OUT B/s", 8, 3, true),
    col("CONNS", 6, 1, true),
    col("SYSC/s", 8, 4, true),
    col("TLS %", 6, 4, true),
    // The pod (`namespace/name`) where there is one, else the container's id.
    col("POD/CONTAINER", 16, 3, false),
    flex("COMMAND", 12),
];

#[derive(Debug, Clone)]
pub struct Row {
    pub key: String,
    pub cells: Vec<String>,
    pub sort: Vec<SortVal>,
    pub flag: Flag,
    /// What the filter knows of the row's calls beyond its cells.
    pub facets: Facets,
}

/// What a row says of its calls for the filter's `proto:`, `err`, `outcome:` and `loss`
/// (`tui::filter`), whether or not a column shows it.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Facets {
    /// The names `proto:` takes for the row, lower case: protocols' names and their TLS labels
    /// (`http`, `https`), a flow's transport (`tcp`, `udp`).
    pub protocols: Vec<String>,
    /// None: the row's view has no call outcomes (the kernel's flow table).
    pub outcomes: Option<OutcomeFacets>,
    /// Its count is marked `≥`: calls may be missing.
    pub loss: bool,
}

/// Which outcomes a row's calls had.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct OutcomeFacets {
    pub ok: bool,
    pub server_errors: bool,
    pub client_errors: bool,
    pub unknown: bool,
}

impl OutcomeFacets {
    pub fn of(calls: u64, server_errors: u64, client_errors: u64, unknown: u64) -> OutcomeFacets {
        let failed_or_unknown = server_errors
            .saturating_add(client_errors)
            .saturating_add(unknown);
        OutcomeFacets {
            ok: calls > failed_or_unknown,
            server_errors: server_errors > 0,
            client_errors: client_errors > 0,
            unknown: unknown > 0,
        }
    }
}

/// The names `proto:` takes for a protocol: its name, and over TLS its label too.
pub fn protocol_names(proto: crate::protocols::Protocol, tls: bool) -> Vec<String> {
    let mut names = vec![proto.name().to_owned()];
    if tls {
        names.push(l7_label(proto.name(), true));
    }
    names
}

/// A call's protocol as the Calls view shows it: over TLS, `https` for HTTP/1 and `+tls`
/// after the others' names.
pub fn proto_label(c: &Call) -> String {
    l7_label(c.l7.proto.name(), c.tls)
}

/// A protocol's name as the views show it (`Protocol::name`, and whether over TLS).
pub fn l7_label(name: &str, tls: bool) -> String {
    match (tls, name) {
        (false, p) => p.to_owned(),
        (true, "http") => "https".to_owned(),
        (true, p) => format!("{p}+tls"),
    }
}

pub(crate) fn ms(ns: u64) -> String {
    format!("{:.2}", ns as f64 / 1e6)
}

/// 1234 → "1234", 12345 → "12.3k", ... (units in the column header).
pub fn human(v: f64) -> String {
    // One scale for every column: below 1000 as is, then k, M, G with one decimal (a
    // rounding up to the next unit moves to it: 999.96k is 1.0M, never 1000.0k).
    let a = v.abs();
    if a < 999.95 {
        if v.fract() == 0.0 {
            format!("{v:.0}")
        } else {
            format!("{v:.1}")
        }
    } else if a < 999_950.0 {
        format!("{:.1}k", v / 1e3)
    } else if a < 999_950_000.0 {
        format!("{:.1}M", v / 1e6)
    } else {
        format!("{:.1}G", v / 1e9)
    }
}

/// A rate of events per second (calls, errors): one decimal below 1000, so a column's
/// values align (`0.0` next to `12.5`, never `0` next to `12.5`), SI-scaled above as `human`.
pub fn human_rate(v: f64) -> String {
    if v.abs() < 999.95 {
        format!("{v:.1}")
    } else {
        human(v)
    }
}

/// Values as a line of block characters, each scaled to the largest (▁ lowest, █ highest;
/// a space for zero): a sparkline that fits in a line of text.
pub fn sparkline(values: impl IntoIterator<Item = f64> + Clone) -> String {
    const BLOCKS: [char; 8] = ['▁', '▂', '▃', '▄', '▅', '▆', '▇', '█'];
    let max = values.clone().into_iter().fold(0.0f64, f64::max);
    values
        .into_iter()
        .map(|v| {
            if !(v > 0.0 && max > 0.0) {
                ' '
            } else {
                let i = ((v / max) * 7.0).round() as usize;
                BLOCKS[i.min(7)]
            }
        })
        .collect()
}

/// Unix time (ns) of a recorded kernel time.
pub fn unix_ns(meta: Option<&SessionMeta>, mono_ns: u64) -> i64 {
    let off = meta.map_or(0, |m| m.wall_offset_ns);
    (mono_ns as i64).saturating_add(off)
}

/// Date and time with milliseconds, in `zone` as it was then, of a recorded kernel time.
pub fn date_time(meta: Option<&SessionMeta>, zone: &TimeZone, mono_ns: u64) -> String {
    zone.date_time(unix_ns(meta, mono_ns))
}

/// `date_time` and the name of the zone then (`2026-07-01 12:00:00.000 CEST`).
pub fn date_time_named(meta: Option<&SessionMeta>, zone: &TimeZone, mono_ns: u64) -> String {
    let t = unix_ns(meta, mono_ns);
    let z = zone.at(t);
    format!("{} {}", z.date_time(t), z.name)
}

/// A call's TIME cell: the time of day with milliseconds, after the month and day when
/// `dated` (the calls shown span more than one date).
pub fn call_time(meta: Option<&SessionMeta>, zone: &TimeZone, mono_ns: u64, dated: bool) -> String {
    let s = date_time(meta, zone, mono_ns);
    s.get(if dated { 5.. } else { 11.. })
        .unwrap_or(&s)
        .to_owned()
}

pub fn proc_label(comm: &str, pid: u32) -> String {
    format!("{comm}/{pid}")
}

pub(crate) fn endpoint_key(e: &EndpointSnapshot) -> String {
    endpoint_key_of(&e.comm, e.side, e.proto, &e.method, &e.resource, e.pid)
}

/// An endpoint row's PROCESS: its command name, and on a row by process the pid (`*` for
/// the processes that did not fit a row of their own).
pub(crate) fn endpoint_process(e: &EndpointSnapshot) -> String {
    endpoint_process_of(&e.comm, e.pid)
}

/// [`endpoint_process`] of a command name and, on a row by process, its pid.
pub(crate) fn endpoint_process_of(comm: &str, pid: Option<u32>) -> String {
    match pid {
        Some(0) => format!("{comm}/*"),
        Some(pid) => proc_label(comm, pid),
        None => comm.to_owned(),
    }
}

/// The identity of an endpoint row, from its key's parts.
pub(crate) fn endpoint_key_of(
    comm: &str,
    side: Side,
    proto: crate::protocols::Protocol,
    method: &str,
    resource: &str,
    pid: Option<u32>,
) -> String {
    let key = format!(
        "{comm}\u{1f}{}\u{1f}{}\u{1f}{method}\u{1f}{resource}",
        side.name(),
        proto.name()
    );
    match pid {
        Some(pid) => format!("{key}\u{1f}{pid}"),
        None => key,
    }
}

/// A call's status as shown: the number (HTTP), the error's name (Redis), or `-`.
pub fn status_text(l7: &crate::protocols::L7Call) -> String {
    match (l7.status, &l7.status_text) {
        (Some(s), _) => s.to_string(),
        (None, Some(t)) => t.clone(),
        (None, None) if l7.outcome == crate::protocols::Outcome::Unknown => "?".to_owned(),
        (None, None) => "-".to_owned(),
    }
}

/// A count of calls, marked `≥` when connections it was counted on lost bytes (records lost or
/// not captured): calls may be missing from it.
/// A number of a sample of connections (`--max-cpu`, `--sample`): `~` before it, as the
/// header's SAMPLED says.
fn sampled(of_sample: bool, cell: String) -> String {
    if of_sample {
        format!("~{cell}")
    } else {
        cell
    }
}

fn at_least(lossy: bool, cell: String) -> String {
    if lossy {
        format!("≥{cell}")
    } else {
        cell
    }
}

/// An error rate in % of the calls whose outcome is known: followed by `?` when some calls'
/// outcome is unknown (not counted as ok), `?` alone when none is known.
fn rate_cell(rate: Option<f64>, unknown: u64) -> String {
    match rate {
        None => "?".to_owned(),
        Some(r) if unknown > 0 => format!("{:.1}?", r * 100.0),
        Some(r) => format!("{:.1}", r * 100.0),
    }
}

/// The mark of a row whose calls include these errors (server errors first).
fn error_flag(server_errors: u64, client_errors: u64) -> Flag {
    if server_errors > 0 {
        Flag::Error
    } else if client_errors > 0 {
        Flag::ClientError
    } else {
        Flag::None
    }
}

/// A call's row; `dated`: its TIME with the date (see `call_time`).
pub(crate) fn call_row(
    meta: Option<&SessionMeta>,
    zone: &TimeZone,
    dated: bool,
    e: &CallEntry,
) -> Row {
    let c = &e.call;
    let flag = if c.l7.outcome == Outcome::ServerError {
        Flag::Error
    } else if c.l7.outcome == Outcome::ClientError {
        Flag::ClientError
    } else if c.latency_ns >= SLOW_NS {
        Flag::Slow
    } else {
        Flag::None
    };
    let status = status_text(&c.l7);
    Row {
        key: e.seq.to_string(),
        cells: vec![
            call_time(meta, zone, c.start_ns, dated),
            proc_label(&c.comm, c.pid),
            c.side.name().to_owned(),
            proto_label(c),
            c.l7.method.clone(),
            c.l7.resource.clone(),
            status,
            ms(c.latency_ns),
            format!(
                "{}/{}",
                human(c.l7.req.bytes as f64),
                human(c.l7.resp.bytes as f64)
            ),
        ],
        sort: vec![
            // The time the column shows (the call's start); arrival breaks ties.
            SortVal::Int((u128::from(c.start_ns) << 64) | u128::from(e.seq)),
            SortVal::Text(proc_label(&c.comm, c.pid)),
            SortVal::Text(c.side.name().to_owned()),
            SortVal::Text(proto_label(c)),
            SortVal::Text(c.l7.method.clone()),
            SortVal::Text(c.l7.resource.clone()),
            SortVal::Num(c.l7.status.map_or(-1.0, f64::from)),
            SortVal::Num(c.latency_ns as f64),
            SortVal::Num((c.l7.req.bytes + c.l7.resp.bytes) as f64),
        ],
        flag,
        // The Calls view filters the calls themselves (`CallFilter`), not their rows.
        facets: Facets::default(),
    }
}

pub(crate) fn endpoint_row(e: &EndpointSnapshot) -> Row {
    let flag = error_flag(e.server_errors, e.client_errors);
    Row {
        key: endpoint_key(e),
        cells: vec![
            endpoint_process(e),
            e.side.name().to_owned(),
            e.method.clone(),
            e.resource.clone(),
            sampled(e.sampled, at_least(e.conn_loss, human(e.calls as f64))),
            sampled(e.sampled, human_rate(e.calls_per_s)),
            rate_cell(e.server_error_rate, e.unknown_outcomes),
            rate_cell(e.client_error_rate, e.unknown_outcomes),
            ms(e.latency_p50_ns),
            ms(e.latency_p90_ns),
            ms(e.latency_p99_ns),
            ms(e.latency_max_ns),
        ],
        sort: vec![
            SortVal::Text(e.comm.clone()),
            SortVal::Text(e.side.name().to_owned()),
            SortVal::Text(e.method.clone()),
            SortVal::Text(e.resource.clone()),
            SortVal::Num(e.calls as f64),
            SortVal::Num(e.calls_per_s),
            SortVal::Num(e.server_error_rate.unwrap_or(-1.0)),
            SortVal::Num(e.client_error_rate.unwrap_or(-1.0)),
            SortVal::Num(e.latency_p50_ns as f64),
            SortVal::Num(e.latency_p90_ns as f64),
            SortVal::Num(e.latency_p99_ns as f64),
            SortVal::Num(e.latency_max_ns as f64),
        ],
        flag,
        facets: Facets {
            protocols: protocol_names(e.proto, false),
            outcomes: Some(OutcomeFacets::of(
                e.calls,
                e.server_errors,
                e.client_errors,
                e.unknown_outcomes,
            )),
            loss: e.conn_loss,
        },
    }
}

pub(crate) fn conn_row(c: &ConnEntry) -> Row {
    Row {
        key: format!("{}/{}", c.pid, c.sock_id),
        cells: vec![
            c.local.to_string(),
            c.peer.to_string(),
            proc_label(&c.comm, c.pid),
            c.side.name().to_owned(),
            at_least(c.calls_after_loss > 0, human(c.calls as f64)),
            c.server_errors.to_string(),
            c.client_errors.to_string(),
            human(c.req_bytes as f64),
            human(c.resp_bytes as f64),
        ],
        sort: vec![
            SortVal::Text(c.local.to_string()),
            SortVal::Text(c.peer.to_string()),
            SortVal::Text(proc_label(&c.comm, c.pid)),
            SortVal::Text(c.side.name().to_owned()),
            SortVal::Num(c.calls as f64),
            SortVal::Num(c.server_errors as f64),
            SortVal::Num(c.client_errors as f64),
            SortVal::Num(c.req_bytes as f64),
            SortVal::Num(c.resp_bytes as f64),
        ],
        flag: error_flag(c.server_errors, c.client_errors),
        facets: Facets {
            protocols: protocol_names(c.proto, c.tls),
            outcomes: Some(OutcomeFacets::of(
                c.calls,
                c.server_errors,
                c.client_errors,
                c.unknown_outcomes,
            )),
            loss: c.calls_after_loss > 0,
        },
    }
}

/// A command line as htop shows it: the program's file name, then the arguments
/// (`python3 server.py --port 8080`, not `/root/.pyenv/versions/3.11.7/bin/python3 ...`),
/// so that what tells two processes apart is in sight; the details show the full line.
pub(crate) fn command_line(args: &[String]) -> String {
    let Some((argv0, rest)) = args.split_first() else {
        return String::new();
    };
    // A program may write its arguments into argv[0] (`nginx: worker process`): the path
    // is what comes before the first space.
    let (path, tail) = argv0.split_once(' ').unwrap_or((argv0, ""));
    let name = match path.rsplit('/').next() {
        Some(n) if !n.is_empty() => n,
        _ => path,
    };
    let mut out = name.to_owned();
    for a in std::iter::once(tail)
        .filter(|t| !t.is_empty())
        .chain(rest.iter().map(String::as_str))
    {
        out.push(' ');
        out.push_str(a);
    }
    out
}

/// The POD/CONTAINER cell: the pod (`namespace/name`) where there is one — what a
/// Kubernetes user knows it by — else the container's id, else `-`.
fn pod_or_container(info: Option<&crate::procinfo::ProcInfo>) -> String {
    match info {
        Some(crate::procinfo::ProcInfo { pod: Some(pod), .. }) => {
            format!("{}/{}", pod.namespace, pod.name)
        }
        _ => info.and_then(|i| i.container()).unwrap_or("-").to_owned(),
    }
}

/// A process's row; `bytes_in_per_s`/`bytes_out_per_s`: its socket throughput; `info`: its
/// command line and container if known (else its name is shown).
pub(crate) fn process_row(
    p: &crate::aggregate::ProcessSnapshot,
    bytes_in_per_s: f64,
    bytes_out_per_s: f64,
    info: Option<&crate::procinfo::ProcInfo>,
) -> Row {
    let container = pod_or_container(info);
    let command = match info.map(|i| i.cmdline.as_slice()).filter(|c| !c.is_empty()) {
        Some(args) => command_line(args),
        None => p.comm.clone(),
    };
    let command = if p.exited {
        format!("{command} (exited)")
    } else {
        command
    };
    let per_s = |n: u64| {
        if p.period_ns == 0 {
            0.0
        } else {
            n as f64 * 1e9 / p.period_ns as f64
        }
    };
    let conns = p.open_connections.unwrap_or(p.connections_active);
    // What the TLS probes cost the process, as % of a core (estimated: hits × one hit's cost).
    let tls_probe_pct = (p.tls_probe_hits > 0 && p.period_ns > 0)
        .then(|| {
            p.tls_probe_est_ns
                .map(|ns| ns as f64 * 100.0 / p.period_ns as f64)
        })
        .flatten();
    let opt = |v: Option<f64>, f: fn(f64) -> String| v.map_or("n/a".to_owned(), f);
    Row {
        key: p.pid.to_string(),
        cells: vec![
            p.pid.to_string(),
            opt(p.cpu_pct, |v| format!("{v:.1}")),
            opt(p.rss_bytes.map(|b| b as f64), |v| {
                format!("{:.1}", v / 1048576.0)
            }),
            sampled(p.sampled, at_least(p.conn_loss, human_rate(p.calls_per_s))),
            human_rate(per_s(p.server_errors)),
            human_rate(per_s(p.client_errors)),
            human(bytes_in_per_s.round()),
            human(bytes_out_per_s.round()),
            conns.to_string(),
            human(p.traced_syscalls_per_s.round()),
            tls_probe_pct.map_or("-".to_owned(), |v| format!("{v:.1}")),
            container.clone(),
            command.clone(),
        ],
        sort: vec![
            SortVal::Num(f64::from(p.pid)),
            SortVal::Num(p.cpu_pct.unwrap_or(-1.0)),
            SortVal::Num(p.rss_bytes.map_or(-1.0, |b| b as f64)),
            SortVal::Num(p.calls_per_s),
            SortVal::Num(per_s(p.server_errors)),
            SortVal::Num(per_s(p.client_errors)),
            SortVal::Num(bytes_in_per_s),
            SortVal::Num(bytes_out_per_s),
            SortVal::Num(conns as f64),
            SortVal::Num(p.traced_syscalls_per_s),
            SortVal::Num(tls_probe_pct.unwrap_or(-1.0)),
            SortVal::Text(container),
            SortVal::Text(command),
        ],
        flag: error_flag(p.server_errors, p.client_errors),
        facets: Facets {
            protocols: crate::protocols::Protocol::all()
                .filter(|proto| p.protocols.contains(*proto))
                .map(|proto| proto.name().to_owned())
                .collect(),
            outcomes: Some(OutcomeFacets::of(
                p.calls,
                p.server_errors,
                p.client_errors,
                p.unknown_outcomes,
            )),
            loss: p.conn_loss,
        },
    }
}

/// The key of a group row of exited processes: this prefix, then their command name.
pub(crate) const GROUP_KEY_PREFIX: &str = "exited:";
/// Between a group's key and a member's pid in the member's key.
const MEMBER_SEP: char = '\u{1f}';

/// Whether `key` is a group row's (not a member's, not a process's).
pub(crate) fn is_group_key(key: &str) -> bool {
    key.starts_with(GROUP_KEY_PREFIX) && !key.contains(MEMBER_SEP)
}

/// The key of process `pid`'s row shown under the group of `comm`.
pub(crate) fn group_member_key(comm: &str, pid: u32) -> String {
    format!("{GROUP_KEY_PREFIX}{comm}{MEMBER_SEP}{pid}")
}

/// The pid of a process row's key (a member's too); None for a group row.
pub(crate) fn pid_of_process_key(key: &str) -> Option<u32> {
    match key.rsplit_once(MEMBER_SEP) {
        Some((_, pid)) => pid.parse().ok(),
        None => key.parse().ok(),
    }
}

/// Processes that exited in the interval, by command name, where two or more share one: a
/// loop of short-lived `curl`s or `dig`s is one row (htop's hands: Enter opens it), not a
/// screen of rows whose CPU is `n/a`. In the order the interval lists them.
pub(crate) fn exited_groups(
    procs: &[crate::aggregate::ProcessSnapshot],
) -> Vec<(&str, Vec<&crate::aggregate::ProcessSnapshot>)> {
    let mut groups: Vec<(&str, Vec<&crate::aggregate::ProcessSnapshot>)> = Vec::new();
    let mut at: std::collections::HashMap<&str, usize> = Default::default();
    for p in procs.iter().filter(|p| p.exited) {
        let i = *at.entry(p.comm.as_str()).or_insert_with(|| {
            groups.push((p.comm.as_str(), Vec::new()));
            groups.len() - 1
        });
        groups[i].1.push(p);
    }
    groups.retain(|(_, members)| members.len() >= 2);
    groups
}

/// A group's row: its members' numbers added (each the pipeline's, exact); CPU and memory
/// unknown (gone processes); the command says how many and that Enter opens it.
pub(crate) fn process_group_row(
    comm: &str,
    members: &[&crate::aggregate::ProcessSnapshot],
    bytes_in_per_s: f64,
    bytes_out_per_s: f64,
    expanded: bool,
) -> Row {
    let first = members[0];
    let mut sum = first.clone();
    sum.cpu_pct = None;
    sum.rss_bytes = None;
    for p in &members[1..] {
        sum.calls += p.calls;
        sum.calls_per_s += p.calls_per_s;
        sum.server_errors += p.server_errors;
        sum.client_errors += p.client_errors;
        sum.unknown_outcomes += p.unknown_outcomes;
        sum.conn_loss |= p.conn_loss;
        sum.connections_active += p.connections_active;
        sum.open_connections = match (sum.open_connections, p.open_connections) {
            (Some(a), Some(b)) => Some(a + b),
            _ => None,
        };
        sum.traced_syscalls += p.traced_syscalls;
        sum.traced_syscalls_per_s += p.traced_syscalls_per_s;
        sum.tls_probe_hits += p.tls_probe_hits;
        sum.tls_probe_hits_per_s += p.tls_probe_hits_per_s;
        sum.tls_probe_est_ns = match (sum.tls_probe_est_ns, p.tls_probe_est_ns) {
            (Some(a), Some(b)) => Some(a + b),
            (a, b) => a.or(b),
        };
        for proto in crate::protocols::Protocol::all() {
            if p.protocols.contains(proto) {
                sum.protocols.insert(proto);
            }
        }
    }
    let mut row = process_row(&sum, bytes_in_per_s, bytes_out_per_s, None);
    let n = members.len();
    row.key = format!("{GROUP_KEY_PREFIX}{comm}");
    row.cells[0] = format!("×{n}");
    row.sort[0] = SortVal::Num(-1.0);
    let mark = if expanded { '▾' } else { '▸' };
    let command = format!("{mark} {comm} ×{n} exited");
    let last = row.cells.len() - 1;
    row.cells[last] = command.clone();
    row.sort[last] = SortVal::Text(command);
    row
}

/// The key of a Processes row that stands for every process of a command name (`b`).
pub(crate) const COMMAND_KEY_PREFIX: &str = "command:";

/// Every process of the interval by command name, in the order the interval lists them
/// (the Processes view grouped by command, `b`).
pub(crate) fn command_groups(
    procs: &[crate::aggregate::ProcessSnapshot],
) -> Vec<(&str, Vec<&crate::aggregate::ProcessSnapshot>)> {
    let mut groups: Vec<(&str, Vec<&crate::aggregate::ProcessSnapshot>)> = Vec::new();
    let mut at: std::collections::HashMap<&str, usize> = Default::default();
    for p in procs {
        let i = *at.entry(p.comm.as_str()).or_insert_with(|| {
            groups.push((p.comm.as_str(), Vec::new()));
            groups.len() - 1
        });
        groups[i].1.push(p);
    }
    groups
}

/// The row of every process of a command name: their numbers added (each the pipeline's);
/// CPU and memory the sum of those known (`n/a` when none is); PID the count.
pub(crate) fn process_command_row(
    comm: &str,
    members: &[&crate::aggregate::ProcessSnapshot],
    bytes_in_per_s: f64,
    bytes_out_per_s: f64,
) -> Row {
    let known_sum = |v: &dyn Fn(&crate::aggregate::ProcessSnapshot) -> Option<f64>| {
        members
            .iter()
            .filter_map(|p| v(p))
            .fold(None, |acc: Option<f64>, x| Some(acc.unwrap_or(0.0) + x))
    };
    let cpu = known_sum(&|p| p.cpu_pct);
    let rss = known_sum(&|p| p.rss_bytes.map(|b| b as f64));
    let mut row = process_group_row(comm, members, bytes_in_per_s, bytes_out_per_s, false);
    let n = members.len();
    row.key = format!("{COMMAND_KEY_PREFIX}{comm}");
    row.cells[0] = if n == 1 {
        members[0].pid.to_string()
    } else {
        format!("×{n}")
    };
    row.sort[0] = SortVal::Num(n as f64);
    row.cells[1] = cpu.map_or("n/a".to_owned(), |v| format!("{v:.1}"));
    row.sort[1] = SortVal::Num(cpu.unwrap_or(-1.0));
    row.cells[2] = rss.map_or("n/a".to_owned(), |v| format!("{:.1}", v / 1048576.0));
    row.sort[2] = SortVal::Num(rss.unwrap_or(-1.0));
    let exited = members.iter().filter(|p| p.exited).count();
    let command = match exited {
        0 => format!("{comm} ×{n}"),
        e => format!("{comm} ×{n} ({e} exited)"),
    };
    let last = row.cells.len() - 1;
    row.cells[last] = command.clone();
    row.sort[last] = SortVal::Text(command);
    row
}

/// Deepest a tree's indentation goes (deeper rows are drawn at this depth).
const TREE_DEPTH_MAX: usize = 16;

/// `rows` (sorted) as htop's tree: each process right under its parent when the parent has
/// a row, siblings in the sorted order, the command prefixed with the branch (`├─ `, `└─ `).
/// Rows without a pid (groups) and those whose parent has no row are roots. Linear in the
/// rows; a parent loop (pids reused) cannot hang it: each row is placed once.
pub(crate) fn tree_order(
    rows: Vec<SharedRow>,
    parent_of: impl Fn(u32) -> Option<u32>,
) -> Vec<SharedRow> {
    let tree_pid = |r: &Row| {
        (!r.key.starts_with(GROUP_KEY_PREFIX))
            .then(|| pid_of_process_key(&r.key))
            .flatten()
    };
    let at: std::collections::HashMap<u32, usize> = rows
        .iter()
        .enumerate()
        .filter_map(|(i, r)| Some((tree_pid(r)?, i)))
        .collect();
    let parent: Vec<Option<usize>> = rows
        .iter()
        .enumerate()
        .map(|(i, r)| {
            let p = at.get(&parent_of(tree_pid(r)?)?).copied()?;
            (p != i).then_some(p)
        })
        .collect();
    let mut children: Vec<Vec<usize>> = vec![Vec::new(); rows.len()];
    for (i, p) in parent.iter().enumerate() {
        if let Some(p) = p {
            children[*p].push(i);
        }
    }
    let mut placed = vec![false; rows.len()];
    let mut out = Vec::with_capacity(rows.len());
    // Roots first; then whatever a parent loop left unplaced, as roots too.
    let roots: Vec<usize> = (0..rows.len())
        .filter(|&i| parent[i].is_none())
        .chain(0..rows.len())
        .collect();
    for root in roots {
        if placed[root] {
            continue;
        }
        // (row, the branch drawn before it: for each ancestor below the root, whether it
        // was the last of its siblings).
        let mut stack: Vec<(usize, Vec<bool>)> = vec![(root, Vec::new())];
        while let Some((i, lasts)) = stack.pop() {
            if placed[i] {
                continue;
            }
            placed[i] = true;
            let mut row = rows[i].clone();
            if !lasts.is_empty() {
                let mut prefix = String::new();
                for &last in &lasts[..lasts.len() - 1] {
                    prefix.push_str(if last { "   " } else { "│  " });
                }
                prefix.push_str(if lasts[lasts.len() - 1] {
                    "└─ "
                } else {
                    "├─ "
                });
                let mut r = (*row).clone();
                if let Some(cell) = r.cells.last_mut() {
                    *cell = format!("{prefix}{cell}");
                }
                row = Rc::new(r);
            }
            out.push(row);
            let kids: Vec<usize> = children[i]
                .iter()
                .copied()
                .filter(|&c| !placed[c])
                .collect();
            for (k, &c) in kids.iter().enumerate().rev() {
                let mut l = lasts.clone();
                l.push(k + 1 == kids.len());
                if l.len() > TREE_DEPTH_MAX {
                    l.remove(0);
                }
                stack.push((c, l));
            }
        }
    }
    out
}

/// `rows` as sorted, with each expanded group's members moved right under its row (sorted
/// among themselves as the view is).
pub(crate) fn members_under_groups(rows: Vec<SharedRow>) -> Vec<SharedRow> {
    let (members, mut out): (Vec<SharedRow>, Vec<SharedRow>) = rows
        .into_iter()
        .partition(|r| r.key.starts_with(GROUP_KEY_PREFIX) && r.key.contains(MEMBER_SEP));
    let mut i = 0;
    while i < out.len() {
        if is_group_key(&out[i].key) {
            let group = out[i].key.clone();
            let under: Vec<SharedRow> = members
                .iter()
                .filter(|m| m.key.rsplit_once(MEMBER_SEP).map(|(g, _)| g) == Some(&group))
                .cloned()
                .collect();
            let n = under.len();
            out.splice(i + 1..i + 1, under);
            i += n;
        }
        i += 1;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn proc_row(key: &str, command: &str) -> SharedRow {
        Rc::new(Row {
            key: key.to_owned(),
            cells: vec![key.to_owned(), command.to_owned()],
            sort: Vec::new(),
            flag: Flag::None,
            facets: Facets::default(),
        })
    }

    /// Issue 44 item 10 (htop's F5): children right under their parent in the sorted order,
    /// the branch drawn before the command; a parent without a row leaves its children
    /// roots; groups stay roots; a parent loop (reused pids) places every row once.
    #[test]
    fn the_tree_puts_children_under_parents_with_branches() {
        let parents = [
            (1u32, 0u32),
            (10, 1),
            (11, 1),
            (12, 10),
            (20, 99),
            (30, 31),
            (31, 30),
        ];
        let parent_of = |pid: u32| parents.iter().find(|p| p.0 == pid).map(|p| p.1);
        // Sorted as the view had them: the tree keeps that order among siblings.
        let rows: Vec<SharedRow> = [
            ("11", "b"),
            ("30", "loop-a"),
            ("12", "c"),
            ("exited:curl", "▸ curl ×3 exited"),
            ("1", "init"),
            ("20", "orphan"),
            ("10", "a"),
            ("31", "loop-b"),
        ]
        .iter()
        .map(|(k, c)| proc_row(k, c))
        .collect();
        let out = tree_order(rows, parent_of);
        let shown: Vec<(&str, &str)> = out
            .iter()
            .map(|r| (r.key.as_str(), r.cells[1].as_str()))
            .collect();
        assert_eq!(
            shown,
            vec![
                ("exited:curl", "▸ curl ×3 exited"),
                ("1", "init"),
                ("11", "├─ b"),
                ("10", "└─ a"),
                ("12", "   └─ c"),
                ("20", "orphan"),
                ("30", "loop-a"),
                ("31", "└─ loop-b"),
            ]
        );
        // A chain deeper than the indentation's cap is drawn at the cap, every row once.
        let n = 200u32;
        let chain: Vec<SharedRow> = (1..=n).map(|pid| proc_row(&pid.to_string(), "x")).collect();
        let out = tree_order(chain, |pid| (pid > 1).then(|| pid - 1));
        assert_eq!(out.len(), n as usize);
        let widest = out.iter().map(|r| r.cells[1].chars().count()).max();
        assert_eq!(widest, Some(3 * TREE_DEPTH_MAX + 1));
    }

    /// An unknown outcome is neither ok nor an error: the rate is of the known calls, marked.
    #[test]
    fn error_rates_say_when_outcomes_are_unknown() {
        assert_eq!(rate_cell(Some(0.25), 0), "25.0");
        assert_eq!(rate_cell(Some(0.0), 3), "0.0?");
        assert_eq!(rate_cell(None, 5), "?");
    }

    #[test]
    fn counts_over_lossy_connections_are_lower_bounds() {
        assert_eq!(at_least(false, "1.2K".into()), "1.2K");
        assert_eq!(at_least(true, "1.2K".into()), "≥1.2K");
    }

    #[test]
    fn rates_keep_one_decimal_below_a_thousand() {
        assert_eq!(human_rate(0.0), "0.0");
        assert_eq!(human_rate(12.0), "12.0");
        assert_eq!(human_rate(12.46), "12.5");
        assert_eq!(human_rate(999.96), "1.0k");
        assert_eq!(human_rate(7_254_700.0), "7.3M");
    }

    #[test]
    fn numbers_use_one_si_scale() {
        for (v, want) in [
            (0.0, "0"),
            (12.5, "12.5"),
            (999.0, "999"),
            (1470.0, "1.5k"),
            (999_949.0, "999.9k"),
            (999_960.0, "1.0M"),
            (7_254_700.0, "7.3M"),
            (2.5e9, "2.5G"),
            (-1470.0, "-1.5k"),
        ] {
            assert_eq!(human(v), want, "{v}");
        }
    }

    #[test]
    fn a_process_is_placed_by_its_pod_else_its_container() {
        use crate::procinfo::ProcInfo;
        let id = "4f0a6b3c2d1e".repeat(5) + "abcd";
        let mut info = ProcInfo {
            cgroup: Some(format!("/system.slice/docker-{id}.scope")),
            ..Default::default()
        };
        assert_eq!(pod_or_container(Some(&info)), "4f0a6b3c2d1e");
        info.pod = Some(crate::pods::Pod {
            namespace: "shop".into(),
            name: "web-0".into(),
        });
        assert_eq!(pod_or_container(Some(&info)), "shop/web-0");
        assert_eq!(pod_or_container(Some(&ProcInfo::default())), "-");
        assert_eq!(pod_or_container(None), "-");
    }

    #[test]
    fn commands_show_the_program_name_then_the_arguments() {
        let c =
            |args: &[&str]| command_line(&args.iter().map(|a| a.to_string()).collect::<Vec<_>>());
        assert_eq!(
            c(&[
                "/root/.pyenv/versions/3.11.7/bin/python3",
                "server.py",
                "--port",
                "8080"
            ]),
            "python3 server.py --port 8080"
        );
        // Arguments keep their paths; only the program's is shortened.
        assert_eq!(c(&["curl", "-o", "/dev/null"]), "curl -o /dev/null");
        assert_eq!(
            c(&["line_io_tools/binary_backend", "--uid", "0"]),
            "binary_backend --uid 0"
        );
        // argv[0] rewritten by the program, arguments and all.
        assert_eq!(c(&["nginx: worker process"]), "nginx: worker process");
        assert_eq!(
            c(&["/usr/sbin/nginx -c /etc/nginx.conf"]),
            "nginx -c /etc/nginx.conf"
        );
        assert_eq!(c(&["/"]), "/");
        assert_eq!(c(&[]), "");
    }

    #[test]
    fn times_take_the_local_offset_of_their_own_instant() {
        // The local zone is the process's TZ, read by the C library: it is set for a child
        // running this test alone, never here (setenv would race the other tests' threads).
        const CHILD: &str = "EBTOP_TEST_TZ_CHILD";
        const NAME: &str = "tui::table::tests::times_take_the_local_offset_of_their_own_instant";
        if std::env::var_os(CHILD).is_none() {
            let out = std::process::Command::new(std::env::current_exe().unwrap())
                .args([NAME, "--exact", "--test-threads=1"])
                .env(CHILD, "1")
                // Europe/Berlin's rule, written out: no zone files needed.
                .env("TZ", "CET-1CEST,M3.5.0,M10.5.0/3")
                .output()
                .unwrap();
            let text = String::from_utf8_lossy(&out.stdout);
            assert!(
                out.status.success() && text.contains("1 passed"),
                "{text}{}",
                String::from_utf8_lossy(&out.stderr)
            );
            return;
        }
        let local = TimeZone::Local;
        // No meta: kernel time is Unix time. A summer and a winter instant, each shown at
        // its own offset, whatever the date today.
        let summer = 1_782_907_200_000_000_000u64; // 2026-07-01 12:00:00 UTC
        let winter = 1_795_312_947_584_000_000u64; // 2026-11-22 02:02:27.584 UTC
        assert_eq!(
            date_time_named(None, &local, summer),
            "2026-07-01 14:00:00.000 CEST"
        );
        assert_eq!(
            date_time_named(None, &local, winter),
            "2026-11-22 03:02:27.584 CET"
        );
        // Across the change back (2026-10-25 01:00 UTC): 02:59:59 CEST, then 02:00:00 CET.
        let change = 1_792_890_000_000_000_000u64;
        assert_eq!(
            date_time_named(None, &local, change - 1_000_000_000),
            "2026-10-25 02:59:59.000 CEST"
        );
        assert_eq!(
            date_time_named(None, &local, change),
            "2026-10-25 02:00:00.000 CET"
        );
        assert_eq!(call_time(None, &local, summer, false), "14:00:00.000");
        assert_eq!(call_time(None, &local, winter, true), "11-22 03:02:27.584");
    }

    #[test]
    fn sparklines_scale_to_the_largest_value() {
        assert_eq!(sparkline([0.0, 1.0, 2.0, 4.0, 8.0]), " ▂▃▅█");
        assert_eq!(sparkline([3.0, 3.0]), "██");
        assert_eq!(sparkline([0.0, 0.0]), "  ");
        assert_eq!(sparkline([f64::NAN, 1.0]), " █");
        assert_eq!(sparkline(Vec::<f64>::new()), "");
    }
}
