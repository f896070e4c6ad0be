//! The TUI's state, without a terminal: views, per-view selection, sort, filter, pause, help.
//! [`App::apply`] hands what the collector sends to its [`Data`] (`data.rs`) and takes keys
//! and resizes itself ([`App::handle_key`]); [`crate::tui::render`] draws it.

use std::cmp::Ordering;
use std::collections::HashMap;
use std::rc::Rc;
use std::time::Duration;

use crossterm::event::{KeyCode, KeyEvent, KeyEventKind, KeyModifiers};

use super::data::{Data, Taken};
use super::filter::RowFilter;
use super::table::{
    call_row_cached, command_groups, conn_row, endpoint_key, endpoint_row, exited_groups,
    group_member_key, is_group_key, members_under_groups, process_command_row, process_group_row,
    process_row, tree_order, CallEntry, Column, SharedRow, SortVal, CALL_COLUMNS,
    CALL_COLUMNS_DATED, CONN_COLUMNS, ENDPOINT_COLUMNS, GROUP_KEY_PREFIX, PROCESS_COLUMNS,
};
use super::{CallReturner, UiMsg};
use crate::aggregate::endpoints::OTHER_RESOURCE;
use crate::aggregate::{EndpointSnapshot, RowRef};
use crate::call::Side;
use crate::call_filter::CallFilter;
use crate::pipeline::LiveCallFilter;
use crate::protocols::Protocol;

/// How far `.` skips a replay ahead and `,` back (recorded time).
pub const SKIP_NS: u64 = 10_000_000_000;
/// Characters Left/Right scroll the flexible column's text by.
pub const HSCROLL_STEP: usize = 8;
pub const MIN_REFRESH: Duration = Duration::from_millis(100);
pub const MAX_REFRESH: Duration = Duration::from_secs(10);

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum View {
    Calls,
    Endpoints,
    Flows,
    Processes,
}

impl View {
    pub const ALL: [View; 4] = [View::Calls, View::Endpoints, View::Flows, View::Processes];

    pub fn index(self) -> usize {
        View::ALL.iter().position(|v| *v == self).unwrap_or(0)
    }

    pub fn title(self) -> &'static str {
        match self {
            View::Calls => "Calls",
            View::Endpoints => "Endpoints",
            View::Flows => "Flows",
            View::Processes => "Processes",
        }
    }
}

/// What the caller should do after a key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    None,
    Redraw,
    Quit,
}

/// Per-view (and drill-down) navigation state.
#[derive(Debug, Clone, Default)]
pub struct ViewState {
    /// Identity of the selected row.
    pub selected: Option<String>,
    /// Its last known position, used when the row goes away.
    pub index: usize,
    pub sort_col: usize,
    pub ascending: bool,
    pub filter: String,
    /// The selected row's line in the table as last drawn: rows arriving above it (newer
    /// calls over a held one) move nothing on screen; only the selection keys move it.
    pub line: std::cell::Cell<usize>,
    /// Characters of the flexible column's text (RESOURCE, COMMAND, L7) scrolled out on the
    /// left (Left/Right).
    pub hscroll: usize,
}

/// The endpoint whose calls the calls view shows (Enter on an endpoint).
#[derive(Debug, Clone, PartialEq)]
pub struct Drill {
    pub comm: String,
    pub side: Side,
    pub proto: Protocol,
    pub method: String,
    pub resource: String,
    pub other: bool,
    /// The pipeline's row of the endpoint: its calls are those counted in it.
    pub row: RowRef,
    /// On a row by process, its process's calls only (`Some(0)`: those of the processes
    /// without a row of their own, `pids_with_rows`).
    pub pid: Option<u32>,
    pub pids_with_rows: Vec<u32>,
}

impl Drill {
    /// The key of its endpoint row (as `table::endpoint_key`).
    pub fn endpoint_key(&self) -> String {
        super::table::endpoint_key_of(
            &self.comm,
            self.side,
            self.proto,
            &self.method,
            &self.resource,
            self.pid,
        )
    }

    /// Whether the call was counted in this endpoint's row (by the row the pipeline gave it:
    /// no call is normalised again), and on a row by process made by its process. A folded
    /// row's calls are those folded into it.
    pub fn matches(&self, e: &CallEntry) -> bool {
        e.endpoint == Some(self.row)
            && match self.pid {
                None => true,
                Some(0) => !self.pids_with_rows.contains(&e.call.pid),
                Some(pid) => e.call.pid == pid,
            }
    }

    pub fn label(&self) -> String {
        let process = super::table::endpoint_process_of(&self.comm, self.pid);
        format!(
            "{process} {} {} {}",
            self.side.name(),
            self.method,
            self.resource
        )
    }
}

/// The drilled-into endpoint's time by downstream endpoint ([`App::drill_downstream`]).
#[derive(Debug, Default)]
pub struct Downstream {
    /// The endpoint's calls kept, and those of them with children kept.
    pub calls: u64,
    pub calls_with_children: u64,
    /// Their durations added, and their self times (less their children's spans).
    pub time_ns: u64,
    pub self_ns: u64,
    /// Most time first.
    pub rows: Vec<DownstreamRow>,
}

/// One downstream endpoint: its calls made by the drilled-into endpoint's calls, and their
/// durations added (concurrent children can add up past their parent's duration).
#[derive(Debug)]
pub struct DownstreamRow {
    pub endpoint: String,
    pub calls: u64,
    pub time_ns: u64,
}

/// A view's columns; the Flows view's depend on whether the source has a flow table.
pub fn columns(view: View, flow_table: bool) -> &'static [Column] {
    match view {
        View::Calls => CALL_COLUMNS,
        View::Endpoints => ENDPOINT_COLUMNS,
        View::Flows if flow_table => super::flows::FLOW_TABLE_COLUMNS,
        View::Flows => CONN_COLUMNS,
        View::Processes => PROCESS_COLUMNS,
    }
}

/// The Calls view's state as its title says it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Following {
    /// The selection stays on the newest call.
    Newest,
    /// The selection stays on its call; `newer` calls arrived above it.
    Held { newer: usize },
}

/// The period the Endpoints view's numbers cover (`c` cycles through them). Percentiles over
/// one short interval are a handful of samples at low rates: the default is 10 s.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EndpointWindow {
    Last10s,
    Last1m,
    SinceStart,
    Interval,
}

impl EndpointWindow {
    pub fn next(self) -> EndpointWindow {
        match self {
            EndpointWindow::Last10s => EndpointWindow::Last1m,
            EndpointWindow::Last1m => EndpointWindow::SinceStart,
            EndpointWindow::SinceStart => EndpointWindow::Interval,
            EndpointWindow::Interval => EndpointWindow::Last10s,
        }
    }

    pub fn label(self) -> &'static str {
        match self {
            EndpointWindow::Last10s => "last 10 s",
            EndpointWindow::Last1m => "last 1 min",
            EndpointWindow::SinceStart => "since the start",
            EndpointWindow::Interval => "last interval",
        }
    }

    /// The rows of this window: by process (`by_process`, where the pipeline split them) or
    /// by command.
    pub fn rows(self, d: &Data, by_process: bool) -> &[EndpointSnapshot] {
        if let Some(p) = d.windows.by_process.as_ref().filter(|_| by_process) {
            return match self {
                EndpointWindow::Last10s => &p.windows.last_10s,
                EndpointWindow::Last1m => &p.windows.last_1m,
                EndpointWindow::SinceStart => &p.windows.since_start,
                EndpointWindow::Interval => &p.interval,
            };
        }
        match self {
            EndpointWindow::Last10s => &d.windows.last_10s,
            EndpointWindow::Last1m => &d.windows.last_1m,
            EndpointWindow::SinceStart => &d.windows.since_start,
            EndpointWindow::Interval => d.report.as_ref().map_or(&[], |r| &r.endpoints),
        }
    }
}

/// Default sort column and direction of each view.
fn default_sort(view: View) -> (usize, bool) {
    match view {
        // Newest first.
        View::Calls => (0, false),
        // Busiest first: by CALLS, which ranks as CALLS/s does in a window and is a key
        // column (CALLS/s gives way at 80 columns).
        View::Endpoints => (4, false),
        View::Flows => (4, false),
        View::Processes => (3, false),
    }
}

pub struct App {
    pub source_label: String,
    pub view: View,
    pub states: [ViewState; 4],
    pub drill: Option<Drill>,
    pub drill_state: ViewState,
    /// Seq of the call whose details are open.
    pub detail: Option<u64>,
    /// Calls whose details were open before Enter followed a relative in their chain (the
    /// newest last): Esc/Backspace goes back to them one by one.
    pub detail_back: Vec<u64>,
    /// In call details: which of the call's chain relatives Tab picked (an index into
    /// [`App::chain_targets`]).
    pub chain_pick: Option<usize>,
    /// F3's search: typed while `search_prompt`, then the next matching row is selected.
    pub last_search: Option<String>,
    pub search_prompt: bool,
    /// (view, key) of the flow or process whose details are open.
    pub row_detail: Option<(View, String)>,
    /// Commands whose exited processes' group row is expanded in the Processes view.
    pub expanded_groups: std::collections::HashSet<String>,
    /// Endpoints split by process (pid), not grouped by command name (`b`).
    pub endpoints_by_process: bool,
    /// Processes grouped by command name, not one row per pid (`b`).
    pub procs_by_command: bool,
    /// The Processes view as a tree of parents and children (F5, `t`: htop's).
    pub procs_tree: bool,
    /// A replay's pace and skips (None live).
    pub replay: Option<std::sync::Arc<super::ReplayControl>>,
    /// The time zone times are shown in (local unless `--utc`; tests: UTC).
    pub zone: crate::clock::TimeZone,
    /// (view, key) of the selected row as last drawn: Enter opens what the user sees, even
    /// when calls arrived since the screen was drawn.
    pub drawn_selection: std::cell::RefCell<Option<(View, String)>>,
    /// First line of the details shown (scrolled with the movement keys).
    pub detail_scroll: u16,
    /// The largest useful `detail_scroll`, as the last drawing found it.
    pub detail_max_scroll: std::cell::Cell<u16>,
    pub help: bool,
    /// The Profile view (`5`; open over the view it was opened from).
    pub profile: super::profile::ProfileUi,
    /// F6's "Sort by" menu is open, its cursor on this column of the view.
    pub sort_menu: Option<usize>,
    /// Typing a filter.
    pub prompt: bool,
    /// What period the Endpoints view's numbers cover.
    pub window: EndpointWindow,
    pub follow: bool,
    pub refresh: Duration,
    /// Rows a page holds (set from the terminal size).
    pub page_rows: usize,
    /// Rows the table showed when last drawn (0: not drawn yet; `page_rows` stands in).
    pub table_height: std::cell::Cell<usize>,
    /// How far the flexible column's text can scroll, as the last drawing found it.
    pub hscroll_max: std::cell::Cell<usize>,
    /// Monotonic "now" for a live uptime; None: the latest recorded time.
    pub clock_ns: Option<u64>,
    pub no_color: bool,
    /// The pipeline's end of the Calls filter: set when Enter keeps it (None: a UI without a
    /// collector, as in tests of the state alone).
    pub live_filter: Option<std::sync::Arc<LiveCallFilter>>,
    /// Live with `--profile`: where `P` asks for a profile of the selected row's processes.
    pub profile_requests: Option<crate::profile::trigger::ProfileRequests>,
    /// The Calls filter the pipeline applies now (what Enter last kept).
    pub applied_filter: String,
    /// `--filter`, as given (the header shows it).
    pub fixed_filter: Option<String>,
    /// `-w FILE`: where the session is recorded, and its size as last looked at.
    pub recording: Option<(String, u64)>,
    /// `--prometheus`: where the metrics are served.
    pub metrics: Option<std::net::SocketAddr>,
    /// A replay's last recorded time, once read (the header's progress bar); kept when the
    /// replay starts over.
    pub replay_end_ns: Option<u64>,
    /// The `:` command line being typed (None: closed).
    pub command: Option<String>,
    /// Why the last command was refused (shown until the next key).
    pub command_error: Option<String>,
    data: Data,
    frozen: Option<Box<Data>>,
    /// Paused without a frozen copy: a paused replay reading its file again for a new Calls
    /// filter (it stops where it was, so the data shown holds still).
    replay_paused: bool,
    /// Where calls pushed out of the list go (freed on the thread that made them).
    call_returner: CallReturner,
}

impl App {
    pub fn new(source_label: &str, refresh: Duration, no_color: bool) -> App {
        let mut states: [ViewState; 4] = Default::default();
        for v in View::ALL {
            let (c, asc) = default_sort(v);
            states[v.index()].sort_col = c;
            states[v.index()].ascending = asc;
        }
        let (c, asc) = default_sort(View::Calls);
        App {
            source_label: source_label.to_owned(),
            view: View::Calls,
            states,
            drill: None,
            drill_state: ViewState {
                sort_col: c,
                ascending: asc,
                ..ViewState::default()
            },
            detail: None,
            detail_back: Vec::new(),
            chain_pick: None,
            row_detail: None,
            expanded_groups: Default::default(),
            endpoints_by_process: false,
            procs_by_command: false,
            procs_tree: false,
            last_search: None,
            search_prompt: false,
            drawn_selection: Default::default(),
            zone: crate::clock::TimeZone::utc(),
            replay: None,
            detail_scroll: 0,
            detail_max_scroll: std::cell::Cell::new(0),
            help: false,
            profile: Default::default(),
            sort_menu: None,
            prompt: false,
            window: EndpointWindow::Last10s,
            follow: false,
            refresh: refresh.clamp(MIN_REFRESH, MAX_REFRESH),
            page_rows: 10,
            table_height: std::cell::Cell::new(0),
            hscroll_max: std::cell::Cell::new(0),
            clock_ns: None,
            no_color,
            live_filter: None,
            profile_requests: None,
            applied_filter: String::new(),
            fixed_filter: None,
            recording: None,
            metrics: None,
            replay_end_ns: None,
            command: None,
            command_error: None,
            data: Data::default(),
            frozen: None,
            replay_paused: false,
            call_returner: CallReturner::default(),
        }
    }

    /// Calls pushed out of the list are handed back through `r`.
    pub fn set_call_returner(&mut self, r: CallReturner) {
        self.call_returner = r;
    }

    pub fn paused(&self) -> bool {
        self.frozen.is_some() || self.replay_paused
    }

    /// What the views show: the data as it was when paused, else the latest.
    pub fn shown(&self) -> &Data {
        self.frozen.as_deref().unwrap_or(&self.data)
    }

    pub fn set_paused(&mut self, paused: bool) {
        if paused && !self.paused() {
            self.frozen = Some(Box::new(self.data.clone()));
        } else if !paused {
            self.frozen = None;
            self.replay_paused = false;
        }
    }

    /// Sets the terminal size (rows per page follow from it).
    pub fn set_size(&mut self, _w: u16, h: u16) {
        self.page_rows = (h as usize).saturating_sub(8).max(1);
    }

    /// Takes in one message from the collector (keys and resizes go to `handle_key`).
    pub fn apply(&mut self, msg: UiMsg) -> Action {
        match msg {
            UiMsg::Key(k) => self.handle_key(k),
            UiMsg::Resize(w, h) => {
                self.set_size(w, h);
                Action::Redraw
            }
            UiMsg::TerminalLost(_) | UiMsg::InputFailed(_) => Action::Quit,
            UiMsg::ReplayEnd(ns) => {
                self.replay_end_ns = Some(ns);
                Action::None
            }
            msg => match self.data.take_in(msg, &mut self.call_returner) {
                Taken::Added => Action::None,
                Taken::StartedOver => Action::Redraw,
            },
        }
    }

    fn state(&self) -> &ViewState {
        if self.view == View::Calls && self.drill.is_some() {
            &self.drill_state
        } else {
            &self.states[self.view.index()]
        }
    }

    fn state_mut(&mut self) -> &mut ViewState {
        if self.view == View::Calls && self.drill.is_some() {
            &mut self.drill_state
        } else {
            &mut self.states[self.view.index()]
        }
    }

    /// The current view's columns.
    pub fn columns(&self) -> &'static [Column] {
        match self.view {
            View::Calls if self.calls_dated() => CALL_COLUMNS_DATED,
            v => columns(v, self.shown().flows.active),
        }
    }

    /// Whether the calls kept span more than one local date (a live session across midnight,
    /// a replay of a night): then their times carry the date. Decided on all the calls kept,
    /// not those a filter or drill-down shows, so the column does not change as one types.
    pub fn calls_dated(&self) -> bool {
        let d = self.shown();
        let starts = d.calls.iter().map(|e| e.call.start_ns);
        let (Some(lo), Some(hi)) = (starts.clone().min(), starts.max()) else {
            return false;
        };
        let date = |t: u64| {
            let s = super::table::date_time(d.meta.as_ref(), &self.zone, t);
            s.get(..10).unwrap_or_default().to_owned()
        };
        date(lo) != date(hi)
    }

    /// The current view's state (sort, filter, selection).
    pub fn view_state(&self) -> &ViewState {
        self.state()
    }

    /// The Calls view's filter as typed (in a drill-down, the drill-down's).
    fn call_filter(&self) -> Result<CallFilter, String> {
        CallFilter::parse(&self.state().filter)
    }

    /// The current view's rows, unsorted; unfiltered but in the Calls view, whose filter
    /// applies to the calls themselves.
    fn build_rows(&self) -> Vec<SharedRow> {
        let d = self.shown();
        match self.view {
            View::Calls => {
                let dated = self.calls_dated();
                // The filter is evaluated on the calls, as the pipeline does (`--filter`).
                let filter = self.call_filter().unwrap_or_default();
                d.calls
                    .iter()
                    .filter(|e| self.drill.as_ref().is_none_or(|dr| dr.matches(e)))
                    .filter(|e| filter.matches(&e.call))
                    .map(|e| call_row_cached(d.meta.as_ref(), &self.zone, dated, e))
                    .collect()
            }
            View::Endpoints => self
                .endpoint_rows()
                .iter()
                .map(|e| Rc::new(endpoint_row(e)))
                .collect(),
            View::Flows if d.flows.active => d.flows.rows().into_iter().map(Rc::new).collect(),
            View::Flows => d.conns.iter().map(|c| Rc::new(conn_row(c))).collect(),
            View::Processes => {
                let Some(r) = d.report.as_ref() else {
                    return Vec::new();
                };
                let per_s = |n: u64| {
                    if r.period_ns == 0 {
                        0.0
                    } else {
                        n as f64 * 1e9 / r.period_ns as f64
                    }
                };
                // Socket throughput: every flow of the process from the flow table, else the
                // bytes of its traced connections as they moved.
                let bytes = |p: &crate::aggregate::ProcessSnapshot| match &d.flow_bytes_by_pid {
                    Some(m) => m
                        .get(&p.pid)
                        .map_or((0.0, 0.0), |&(i, o)| (per_s(i), per_s(o))),
                    None => (p.socket_bytes_in_per_s, p.socket_bytes_out_per_s),
                };
                if self.procs_by_command {
                    return command_groups(&r.processes)
                        .into_iter()
                        .map(|(comm, members)| {
                            let (bytes_in, bytes_out) = members
                                .iter()
                                .map(|p| bytes(p))
                                .fold((0.0, 0.0), |(i, o), (pi, po)| (i + pi, o + po));
                            Rc::new(process_command_row(comm, &members, bytes_in, bytes_out))
                        })
                        .collect();
                }
                let grouped = exited_groups(&r.processes);
                let mut rows = Vec::with_capacity(r.processes.len());
                for p in &r.processes {
                    let (bytes_in, bytes_out) = bytes(p);
                    let mut row = process_row(p, bytes_in, bytes_out, d.procs.get(&p.pid));
                    if p.exited && grouped.iter().any(|(c, _)| *c == p.comm) {
                        if !self.expanded_groups.contains(&p.comm) {
                            continue;
                        }
                        row.key = group_member_key(&p.comm, p.pid);
                    }
                    rows.push(Rc::new(row));
                }
                for (comm, members) in grouped {
                    let (bytes_in, bytes_out) = members
                        .iter()
                        .map(|p| bytes(p))
                        .fold((0.0, 0.0), |(i, o), (pi, po)| (i + pi, o + po));
                    let expanded = self.expanded_groups.contains(comm);
                    rows.push(Rc::new(process_group_row(
                        comm, &members, bytes_in, bytes_out, expanded,
                    )));
                }
                rows
            }
        }
    }

    /// The current view's rows as shown: filtered, then sorted.
    pub fn rows(&self) -> Vec<SharedRow> {
        let st = self.state();
        // A filter that does not parse filters nothing (the header says why).
        let filter = match self.view {
            View::Calls => RowFilter::default(),
            _ => RowFilter::parse(&st.filter, self.columns()).unwrap_or_default(),
        };
        let mut rows: Vec<SharedRow> = self
            .build_rows()
            .into_iter()
            .filter(|r| filter.is_empty() || filter.matches(r))
            .collect();
        let c = st.sort_col;
        rows.sort_by(|a, b| {
            let o = match (a.sort.get(c), b.sort.get(c)) {
                (Some(x), Some(y)) => x.cmp(y),
                _ => Ordering::Equal,
            };
            let o = o.then_with(|| a.key.cmp(&b.key));
            if st.ascending {
                o
            } else {
                o.reverse()
            }
        });
        if self.view == View::Processes && self.procs_tree && !self.procs_by_command {
            let procs = &self.shown().procs;
            rows = tree_order(rows, |pid| procs.get(&pid).and_then(|p| p.ppid));
        }
        if self.view == View::Processes && !self.expanded_groups.is_empty() {
            rows = members_under_groups(rows);
        }
        rows
    }

    /// The Endpoints view's rows in the window shown: by process where chosen (`b`) and the
    /// pipeline split them, else by command.
    pub fn endpoint_rows(&self) -> &[EndpointSnapshot] {
        self.window.rows(self.shown(), self.endpoints_by_process)
    }

    /// Whether the Endpoints view shows rows by process (chosen, and the pipeline made them).
    pub fn shows_endpoints_by_process(&self) -> bool {
        self.endpoints_by_process && self.shown().windows.by_process.is_some()
    }

    /// The drilled-into endpoint's latency bins since the start, as the pipeline sent them
    /// (`EndpointWindows::latency_bins`): (low ns, high ns, calls).
    /// Where the drilled-into endpoint's time goes, among the calls kept: its calls' children
    /// (src/chains.rs) by their endpoint, and its calls' self time. None without a drill-down
    /// or when none of its calls kept has a child kept.
    pub fn drill_downstream(&self) -> Option<Downstream> {
        let dr = self.drill.as_ref()?;
        let d = self.shown();
        let mut children: HashMap<u64, Vec<&CallEntry>> = HashMap::new();
        for e in &d.calls {
            if let Some(p) = e.call.parent_id {
                children.entry(p).or_default().push(e);
            }
        }
        if children.is_empty() {
            return None;
        }
        // A child's endpoint as its row names it (normalised), else as the call does.
        let labels: HashMap<RowRef, String> = d
            .windows
            .since_start
            .iter()
            .map(|s| {
                (
                    s.row,
                    format!("{} {} {}", s.proto.name(), s.method, s.resource),
                )
            })
            .collect();
        let mut out = Downstream::default();
        let mut by: HashMap<String, (u64, u64)> = HashMap::new();
        for e in d.calls.iter().filter(|e| dr.matches(e)) {
            out.calls += 1;
            out.time_ns += e.call.latency_ns;
            let kids = (e.call.id != 0).then(|| children.get(&e.call.id)).flatten();
            let Some(kids) = kids else {
                out.self_ns += e.call.latency_ns;
                continue;
            };
            out.calls_with_children += 1;
            out.self_ns += super::data::self_time_ns(&e.call, kids.iter().map(|k| &*k.call));
            for k in kids {
                let label = k
                    .endpoint
                    .and_then(|r| labels.get(&r).cloned())
                    .unwrap_or_else(|| {
                        format!(
                            "{} {} {}",
                            k.call.l7.proto.name(),
                            k.call.l7.method,
                            k.call.l7.resource
                        )
                    });
                let v = by.entry(label).or_default();
                v.0 += 1;
                v.1 += k.call.latency_ns;
            }
        }
        if out.calls_with_children == 0 {
            return None;
        }
        out.rows = by
            .into_iter()
            .map(|(endpoint, (calls, time_ns))| DownstreamRow {
                endpoint,
                calls,
                time_ns,
            })
            .collect();
        out.rows
            .sort_by(|a, b| b.time_ns.cmp(&a.time_ns).then(a.endpoint.cmp(&b.endpoint)));
        Some(out)
    }

    pub fn drill_latency_bins(&self) -> Option<Vec<(u64, u64, u64)>> {
        let d = self.drill.as_ref()?;
        if d.other {
            return None;
        }
        let w = &self.shown().windows;
        let bins = match d.pid {
            Some(_) => w
                .by_process
                .as_ref()?
                .windows
                .latency_bins_of(d.row, d.pid)?,
            None => w.latency_bins_of(d.row, None)?,
        };
        Some(bins.bins())
    }

    /// Why the current view's filter does not parse (None: it does, or there is none).
    pub fn filter_error(&self) -> Option<String> {
        match self.view {
            View::Calls => self.call_filter().err(),
            _ => RowFilter::parse(&self.state().filter, self.columns()).err(),
        }
    }

    /// Enter kept the Calls filter (or Esc cleared it): from now on the pipeline hands over
    /// only the calls it matches, and a replay is read again from its start up to where it
    /// was, so the list holds the matching calls of the whole file.
    fn apply_calls_filter(&mut self) {
        if self.view != View::Calls || self.drill.is_some() {
            return;
        }
        let text = self.states[View::Calls.index()].filter.clone();
        if text == self.applied_filter {
            return;
        }
        let Some(live) = &self.live_filter else {
            return;
        };
        // One that does not parse lets every call through (the header says why).
        live.set(CallFilter::parse(&text).ok());
        self.applied_filter = text;
        if let Some(r) = &self.replay {
            let d = self.shown();
            r.rewind_to(d.position_ns.max(d.start_mono_ns().unwrap_or(0)));
            // Paused, the replay rebuilds up to the same point and waits there: what is shown
            // is then the rebuilt data, not the copy frozen before it.
            if self.frozen.is_some() {
                self.frozen = None;
                self.replay_paused = true;
            }
        }
    }

    /// Whether the Calls view follows the newest call, or holds a row with `newer` calls
    /// above it (None outside the Calls view).
    pub fn calls_follow(&self, rows: &[SharedRow]) -> Option<Following> {
        if self.view != View::Calls {
            return None;
        }
        if self.follow || self.state().selected.is_none() {
            return Some(Following::Newest);
        }
        let held: u64 = self
            .selected_index(rows)
            .and_then(|i| rows[i].key.parse().ok())?;
        let newer = rows
            .iter()
            .filter(|r| r.key.parse::<u64>().is_ok_and(|s| s > held))
            .count();
        Some(Following::Held { newer })
    }

    /// Index of the selected row in `rows`.
    pub fn selected_index(&self, rows: &[SharedRow]) -> Option<usize> {
        if rows.is_empty() {
            return None;
        }
        if self.view == View::Calls && self.follow {
            return Some(0);
        }
        let st = self.state();
        if let Some(k) = &st.selected {
            if let Some(i) = rows.iter().position(|r| &r.key == k) {
                return Some(i);
            }
        }
        Some(st.index.min(rows.len() - 1))
    }

    /// Selects the row with this identity (if shown).
    pub fn select_key(&mut self, key: &str) {
        let rows = self.rows();
        if let Some(i) = rows.iter().position(|r| r.key == key) {
            let st = self.state_mut();
            st.selected = Some(key.to_owned());
            st.index = i;
        }
    }

    /// The selection moves to the next row (after the selected one, wrapping) that matches
    /// the search's words (the filter language), hiding none — htop's F3.
    fn find_next(&mut self) {
        let Some(search) = self.last_search.clone() else {
            return;
        };
        // In the Calls view the words are tried on the calls, as its filter is.
        let matches: Box<dyn Fn(&SharedRow) -> bool + '_> = if self.view == View::Calls {
            let Ok(f) = CallFilter::parse(&search) else {
                return;
            };
            let d = self.shown();
            Box::new(move |r: &SharedRow| {
                r.key
                    .parse::<u64>()
                    .ok()
                    .and_then(|seq| d.find_call(seq))
                    .is_some_and(|c| f.matches(c))
            })
        } else {
            let Ok(f) = RowFilter::parse(&search, self.columns()) else {
                return;
            };
            Box::new(move |r: &SharedRow| f.matches(r))
        };
        // The rows as shown, but unfiltered by the search itself.
        let rows = self.rows();
        let start = self.selected_index(&rows).map_or(0, |i| i + 1);
        let n = rows.len();
        let found = (0..n).map(|k| (start + k) % n).find(|&i| matches(&rows[i]));
        drop(matches);
        if let Some(i) = found {
            self.move_selection(|_, _| i);
            // A match is shown mid-screen, with the rows around it, not on the last line.
            let mid = self.rows_on_screen() / 2;
            self.state().line.set(mid);
        }
    }

    /// Rows the table holds on screen (as last drawn; before that, a page).
    fn rows_on_screen(&self) -> usize {
        match self.table_height.get() {
            0 => self.page_rows,
            h => h,
        }
        .max(1)
    }

    /// Back to the top row; in the Calls view that follows the newest call again.
    fn select_top(&mut self) {
        if self.view == View::Calls {
            let st = self.state_mut();
            st.selected = None;
            st.index = 0;
            st.line.set(0);
        } else {
            self.move_selection(|_, _| 0);
        }
    }

    fn move_selection(&mut self, to: impl FnOnce(usize, usize) -> usize) {
        let rows = self.rows();
        let Some(cur) = self.selected_index(&rows) else {
            return;
        };
        let i = to(cur, rows.len()).min(rows.len() - 1);
        self.follow = false;
        let last_line = self.rows_on_screen() - 1;
        let st = self.state_mut();
        st.index = i;
        st.selected = Some(rows[i].key.clone());
        // The selection's line moves as far as the selection did, within the screen; past
        // its edge the rows scroll instead.
        let line = st.line.get().min(last_line);
        let line = if i >= cur {
            (line + (i - cur)).min(last_line)
        } else {
            line.saturating_sub(cur - i)
        };
        st.line.set(line);
    }

    fn switch_view(&mut self, v: View) {
        self.view = v;
        self.drill = None;
        self.close_details();
    }

    fn close_details(&mut self) {
        self.detail = None;
        self.detail_back.clear();
        self.chain_pick = None;
        self.row_detail = None;
    }

    /// The open call's chain relatives Tab can pick ([`super::data::ChainRelatives::targets`]).
    pub fn chain_targets(&self) -> Vec<u64> {
        let d = self.shown();
        let Some(c) = self.detail.and_then(|seq| d.find_call(seq)) else {
            return Vec::new();
        };
        d.chain_relatives(c).targets()
    }

    /// The seq of the relative Tab picked, if it is still among the targets.
    pub fn chain_picked(&self) -> Option<u64> {
        self.chain_pick
            .and_then(|i| self.chain_targets().get(i).copied())
    }

    /// Opens the details of another call, the open one kept to go back to.
    fn follow_chain(&mut self, seq: u64) {
        if let Some(cur) = self.detail.replace(seq) {
            self.detail_back.push(cur);
        }
        self.chain_pick = None;
        self.detail_scroll = 0;
    }

    /// `P`: a profile of the selected process row's process, or of the selected endpoint
    /// row's processes, for `--profile-for` (live with `--profile`); the header shows it.
    fn ask_profile(&mut self) {
        let Some(requests) = self.profile_requests.clone() else {
            self.command_error =
                Some("P profiles a row's processes live, with --profile".to_owned());
            return;
        };
        let rows = self.rows();
        let Some(i) = self.selected_index(&rows) else {
            return;
        };
        let key = rows[i].key.clone();
        let d = self.shown();
        let processes = d
            .report
            .as_ref()
            .map(|r| r.processes.as_slice())
            .unwrap_or(&[]);
        let of_comm = |comm: &str| -> Vec<u32> {
            processes
                .iter()
                .filter(|p| p.comm == comm)
                .map(|p| p.pid)
                .collect()
        };
        let (pids, comm) = match self.view {
            View::Processes => match super::table::pid_of_process_key(&key) {
                Some(pid) => (
                    vec![pid],
                    processes
                        .iter()
                        .find(|p| p.pid == pid)
                        .map(|p| p.comm.clone())
                        .unwrap_or_default(),
                ),
                None => {
                    let comm = key
                        .strip_prefix(super::table::GROUP_KEY_PREFIX)
                        .unwrap_or(&key)
                        .to_owned();
                    (of_comm(&comm), comm)
                }
            },
            View::Endpoints => match self.endpoint_rows().iter().find(|e| endpoint_key(e) == key) {
                Some(e) => match e.pid.filter(|p| *p != 0) {
                    Some(pid) => (vec![pid], e.comm.clone()),
                    None => (of_comm(&e.comm), e.comm.clone()),
                },
                None => (Vec::new(), String::new()),
            },
            _ => {
                self.command_error =
                    Some("P: select a process (4) or an endpoint (2) row".to_owned());
                return;
            }
        };
        if pids.is_empty() {
            self.command_error = Some("P: no running process on this row".to_owned());
            return;
        }
        if let Ok(mut r) = requests.lock() {
            *r = Some((pids, comm));
        };
    }

    fn enter(&mut self) {
        let rows = self.rows();
        let drawn = self.drawn_selection.borrow().clone();
        let on_screen = drawn
            .filter(|(v, _)| *v == self.view)
            .and_then(|(_, k)| rows.iter().position(|r| r.key == k));
        let Some(i) = on_screen.or_else(|| self.selected_index(&rows)) else {
            return;
        };
        let key = rows[i].key.clone();
        // The row opened is held: back from its details, it is where it was, not wherever
        // the newest calls pushed the list.
        self.follow = false;
        {
            let st = self.state_mut();
            st.selected = Some(key.clone());
            st.index = i;
        }
        match self.view {
            View::Calls => {
                self.detail = key.parse().ok();
                self.detail_back.clear();
                self.chain_pick = None;
                self.detail_scroll = 0;
            }
            View::Endpoints => {
                let d = self.shown();
                if let Some(e) = self.endpoint_rows().iter().find(|e| endpoint_key(e) == key) {
                    // The processes whose calls of this endpoint have rows of their own: a
                    // pid-0 row's calls are the others'.
                    let pids_with_rows = match (e.pid, &d.windows.by_process) {
                        (Some(0), Some(p)) => p
                            .windows
                            .since_start
                            .iter()
                            .filter(|o| o.row == e.row)
                            .filter_map(|o| o.pid.filter(|&pid| pid != 0))
                            .collect(),
                        _ => Vec::new(),
                    };
                    self.drill = Some(Drill {
                        pid: e.pid,
                        pids_with_rows,
                        comm: e.comm.clone(),
                        side: e.side,
                        proto: e.proto,
                        method: e.method.clone(),
                        resource: e.resource.clone(),
                        other: e.other || e.resource == OTHER_RESOURCE,
                        row: e.row,
                    });
                    let (c, asc) = default_sort(View::Calls);
                    self.drill_state = ViewState {
                        sort_col: c,
                        ascending: asc,
                        ..ViewState::default()
                    };
                    self.view = View::Calls;
                }
            }
            View::Processes if is_group_key(&key) => {
                // A group of exited processes opens into its members (Enter again: closed).
                let comm = &key[GROUP_KEY_PREFIX.len()..];
                if !self.expanded_groups.remove(comm) {
                    self.expanded_groups.insert(comm.to_owned());
                }
            }
            View::Flows | View::Processes => {
                self.row_detail = Some((self.view, key));
                self.detail_scroll = 0;
            }
        }
    }

    fn back(&mut self) -> Action {
        if self.detail.is_some() {
            // Back along the chain followed, then out of the details.
            self.detail = self.detail_back.pop();
            self.chain_pick = None;
            self.detail_scroll = 0;
            return Action::Redraw;
        }
        if self.row_detail.take().is_some() {
            return Action::Redraw;
        }
        if self.drill.take().is_some() {
            self.view = View::Endpoints;
            return Action::Redraw;
        }
        Action::None
    }

    /// Sorts the view by column `col`: text A→Z first, numbers largest first (as htop does);
    /// the column it is sorted by already keeps its direction. The selection stays on its row
    /// (it is kept by identity).
    fn sort_by(&mut self, col: usize) {
        let cols = self.columns();
        if col >= cols.len() || col == self.state().sort_col {
            return;
        }
        let text = match self.build_rows().first().and_then(|r| r.sort.get(col)) {
            Some(v) => matches!(v, SortVal::Text(_)),
            None => !cols[col].right,
        };
        let st = self.state_mut();
        st.sort_col = col;
        st.ascending = text;
    }

    /// A key while the "Sort by" menu is open (cursor on column `at`): it moves the cursor,
    /// chooses (Enter) or closes the menu (Esc, F6); other keys do nothing, `q` included, so
    /// a stray key neither quits nor acts on the view behind.
    fn sort_menu_key(&mut self, code: KeyCode, at: usize) -> Action {
        let last = self.columns().len().saturating_sub(1);
        let at = at.min(last);
        self.sort_menu = match code {
            KeyCode::Up | KeyCode::Char('k') => Some(at.saturating_sub(1)),
            KeyCode::Down | KeyCode::Char('j') => Some((at + 1).min(last)),
            KeyCode::PageUp | KeyCode::Home | KeyCode::Char('g') => Some(0),
            KeyCode::PageDown | KeyCode::End | KeyCode::Char('G') => Some(last),
            KeyCode::Enter => {
                self.sort_by(at);
                None
            }
            KeyCode::Esc | KeyCode::F(6) => None,
            _ => return Action::None,
        };
        Action::Redraw
    }

    /// A `:` command (k9s hands): a view (`calls`, `endpoints`, `flows`, `procs`), `filter
    /// EXPR` and `sort COLUMN` for the view shown, `quit`; in a replay `goto TIME` (see
    /// [`goto_target`]), `start`, `end` (back: read again from its start up to it; ahead: the
    /// records between replayed at once, so every number counts them). A verb may be cut to a
    /// prefix that names one ([`command_verb`]).
    fn run_command(&mut self, text: &str) -> Result<Action, String> {
        let text = text.trim();
        let (typed, rest) = text.split_once(' ').unwrap_or((text, ""));
        let rest = rest.trim();
        if typed.is_empty() {
            return Ok(Action::Redraw);
        }
        let verb = command_verb(typed)?;
        let view = match verb {
            "calls" => Some(View::Calls),
            "endpoints" => Some(View::Endpoints),
            "flows" => Some(View::Flows),
            "procs" => Some(View::Processes),
            _ => None,
        };
        if let Some(v) = view {
            self.switch_view(v);
            return Ok(Action::Redraw);
        }
        match verb {
            "quit" => return Ok(Action::Quit),
            "filter" => {
                self.state_mut().filter = rest.to_owned();
                self.apply_calls_filter();
                return Ok(Action::Redraw);
            }
            "sort" => {
                let cols = self.columns();
                let col = pick_by_prefix("column", rest, cols.iter().map(|c| c.title))
                    .map_err(|e| format!("sort: {e}"))?;
                let i = cols.iter().position(|c| c.title == col).unwrap_or(0);
                self.sort_by(i);
                return Ok(Action::Redraw);
            }
            _ => {}
        }
        let Some(r) = self.replay.clone() else {
            return Err(format!(
                "{verb}: a live session cannot move in time (replays only: -r FILE)"
            ));
        };
        let d = &self.data;
        let start = d.start_mono_ns().unwrap_or(0);
        let at = d.position_ns.max(start);
        let target = match verb {
            "start" => start,
            "end" => u64::MAX,
            _ => {
                let meta = d
                    .meta
                    .as_ref()
                    .ok_or("goto: the recording's start is not known yet")?;
                goto_target(rest, meta, &self.zone)?
            }
        };
        if target < at {
            r.rewind_to(target.max(start));
        } else {
            r.skip_to(target);
        }
        Ok(Action::Redraw)
    }

    /// What the command being typed could become: the verbs it is a prefix of, or after
    /// `sort ` the view's columns (for the hint line and Tab).
    pub fn command_completions(&self, text: &str) -> Vec<&'static str> {
        match text.split_once(' ') {
            None => COMMANDS
                .iter()
                .map(|c| c.verb)
                .filter(|v| v.starts_with(text))
                .collect(),
            Some((typed, arg)) if command_verb(typed) == Ok("sort") => {
                let arg = arg.trim_start().to_ascii_uppercase();
                self.columns()
                    .iter()
                    .map(|c| c.title)
                    .filter(|t| t.starts_with(&arg))
                    .collect()
            }
            Some(_) => Vec::new(),
        }
    }

    /// Tab on the command line: the text completed as far as its completions agree (a verb
    /// that takes an argument gets its space).
    fn complete_command(&mut self) {
        let Some(text) = self.command.clone() else {
            return;
        };
        let options = self.command_completions(&text);
        let Some(common) = common_prefix(&options) else {
            return;
        };
        let head = match text.split_once(' ') {
            Some((verb, _)) => format!("{verb} "),
            None => String::new(),
        };
        let mut done = format!("{head}{common}");
        if options.len() == 1 && head.is_empty() {
            let takes_argument = COMMANDS
                .iter()
                .any(|c| c.verb == common && !c.argument.is_empty());
            if takes_argument {
                done.push(' ');
            }
        }
        if done.len() >= text.len() {
            self.command = Some(done);
        }
    }

    pub fn handle_key(&mut self, key: KeyEvent) -> Action {
        if key.kind == KeyEventKind::Release {
            return Action::None;
        }
        let ctrl = key.modifiers.contains(KeyModifiers::CONTROL);
        if ctrl && key.code == KeyCode::Char('c') {
            return Action::Quit;
        }
        if key.code != KeyCode::Enter {
            // Whatever this key changes, Enter then means the selection it leaves.
            self.drawn_selection.replace(None);
        }
        self.command_error = None;
        if let Some(text) = self.command.as_mut() {
            match key.code {
                KeyCode::Char('u') if ctrl => text.clear(),
                KeyCode::Char(c) if !ctrl => text.push(c),
                KeyCode::Backspace => {
                    text.pop();
                }
                KeyCode::Enter => {
                    let text = self.command.take().unwrap_or_default();
                    match self.run_command(&text) {
                        Ok(Action::Quit) => return Action::Quit,
                        Ok(_) => {}
                        Err(e) => self.command_error = Some(e),
                    }
                }
                KeyCode::Tab => self.complete_command(),
                KeyCode::Esc => self.command = None,
                _ => return Action::None,
            }
            return Action::Redraw;
        }
        if self.search_prompt {
            let text = self.last_search.get_or_insert_with(String::new);
            match key.code {
                KeyCode::Char('u') if ctrl => text.clear(),
                KeyCode::Char(c) if !ctrl => text.push(c),
                KeyCode::Backspace => {
                    text.pop();
                }
                // Enter (or F3 again) finds the next match; the search stays for the next F3.
                KeyCode::Enter | KeyCode::F(3) => {
                    self.search_prompt = key.code == KeyCode::F(3);
                    self.find_next();
                }
                KeyCode::Esc => self.search_prompt = false,
                _ => return Action::None,
            }
            return Action::Redraw;
        }
        if self.prompt {
            let st = self.state_mut();
            match key.code {
                KeyCode::Char('u') if ctrl => st.filter.clear(),
                KeyCode::Char(c) if !ctrl => st.filter.push(c),
                KeyCode::Backspace => {
                    st.filter.pop();
                }
                KeyCode::Enter => {
                    if st.filter.trim().is_empty() {
                        st.filter.clear();
                    }
                    self.prompt = false;
                }
                KeyCode::Esc => {
                    st.filter.clear();
                    self.prompt = false;
                }
                _ => return Action::None,
            }
            if !self.prompt {
                self.apply_calls_filter();
            }
            return Action::Redraw;
        }
        if let Some(at) = self.sort_menu {
            return self.sort_menu_key(key.code, at);
        }
        if self.help {
            self.help = false;
            return match key.code {
                KeyCode::F(10) => Action::Quit,
                _ => Action::Redraw,
            };
        }
        if self.profile.open {
            let page = self.page_rows;
            let shown = self.frozen.as_deref().unwrap_or(&self.data);
            let profile = shown.profile.clone();
            if self.profile.key(key.code, profile.as_deref(), page) {
                return Action::Redraw;
            }
            match key.code {
                KeyCode::Esc | KeyCode::Backspace | KeyCode::Char('q') | KeyCode::Char('5') => {
                    self.profile.open = false;
                    return Action::Redraw;
                }
                KeyCode::Tab | KeyCode::BackTab | KeyCode::Char('1'..='4') => {
                    self.profile.open = false;
                    if key.code == KeyCode::Tab || key.code == KeyCode::BackTab {
                        return Action::Redraw;
                    }
                }
                _ => {}
            }
        }
        match key.code {
            KeyCode::F(10) => return Action::Quit,
            // k9s and htop hands: `q` closes what is open (details, a drill-down) and quits
            // only at the top level, so a history is not lost by a key meant for an overlay.
            KeyCode::Char('q') => {
                return match self.back() {
                    Action::None => Action::Quit,
                    closed => closed,
                };
            }
            KeyCode::Char('?') | KeyCode::F(1) => self.help = true,
            KeyCode::Esc | KeyCode::Backspace => return self.back(),
            _ if self.detail.is_some() || self.row_detail.is_some() => {
                let max = self.detail_max_scroll.get();
                let page = u16::try_from(self.page_rows).unwrap_or(u16::MAX);
                let s = self.detail_scroll;
                self.detail_scroll = match key.code {
                    KeyCode::Enter => {
                        match self.chain_picked() {
                            Some(seq) => self.follow_chain(seq),
                            None => self.close_details(),
                        }
                        return Action::Redraw;
                    }
                    KeyCode::Tab | KeyCode::BackTab if self.detail.is_some() => {
                        let n = self.chain_targets().len();
                        if n == 0 {
                            return Action::None;
                        }
                        self.chain_pick = Some(match (self.chain_pick, key.code) {
                            (None, KeyCode::Tab) => 0,
                            (None, _) => n - 1,
                            (Some(i), KeyCode::Tab) => (i + 1) % n,
                            (Some(i), _) => (i + n - 1) % n,
                        });
                        return Action::Redraw;
                    }
                    KeyCode::Up | KeyCode::Char('k') => s.saturating_sub(1),
                    KeyCode::Down | KeyCode::Char('j') => s.saturating_add(1).min(max),
                    KeyCode::PageUp => s.saturating_sub(page),
                    KeyCode::PageDown => s.saturating_add(page).min(max),
                    KeyCode::Home | KeyCode::Char('g') => 0,
                    KeyCode::End | KeyCode::Char('G') => max,
                    _ => return Action::None,
                };
                return Action::Redraw;
            }
            KeyCode::Tab => self.switch_view(View::ALL[(self.view.index() + 1) % 4]),
            KeyCode::BackTab => self.switch_view(View::ALL[(self.view.index() + 3) % 4]),
            KeyCode::Char(c @ '1'..='4') => {
                self.switch_view(View::ALL[c as usize - '1' as usize]);
            }
            KeyCode::Char('5') => self.profile.open = true,
            KeyCode::Char('P') => self.ask_profile(),
            KeyCode::Up | KeyCode::Char('k') => self.move_selection(|i, _| i.saturating_sub(1)),
            KeyCode::Down | KeyCode::Char('j') => self.move_selection(|i, _| i + 1),
            KeyCode::PageUp => {
                let p = self.page_rows;
                self.move_selection(|i, _| i.saturating_sub(p));
            }
            KeyCode::PageDown => {
                let p = self.page_rows;
                self.move_selection(|i, _| i + p);
            }
            KeyCode::Home | KeyCode::Char('g') => self.select_top(),
            KeyCode::End | KeyCode::Char('G') => self.move_selection(|_, n| n.saturating_sub(1)),
            KeyCode::Enter => self.enter(),
            KeyCode::Char('/') | KeyCode::F(4) => self.prompt = true,
            KeyCode::Char(':') => self.command = Some(String::new()),
            KeyCode::Char('{') => {
                if let Err(e) = self.run_command("start") {
                    self.command_error = Some(e);
                }
            }
            KeyCode::Char('}') => {
                if let Err(e) = self.run_command("end") {
                    self.command_error = Some(e);
                }
            }
            KeyCode::F(3) => self.search_prompt = true,
            // htop's hands: F5 (or `t`) shows the processes as a tree.
            KeyCode::F(5) | KeyCode::Char('t') if self.view == View::Processes => {
                self.procs_tree = !self.procs_tree;
            }
            // Group by process or by command name (the title says which).
            KeyCode::Char('b') if self.view == View::Endpoints => {
                self.endpoints_by_process = !self.endpoints_by_process;
            }
            KeyCode::Char('b') if self.view == View::Processes => {
                self.procs_by_command = !self.procs_by_command;
            }
            KeyCode::Char('<') | KeyCode::Char('>') => {
                let n = self.columns().len();
                let cur = self.state().sort_col;
                let col = if key.code == KeyCode::Char('>') {
                    (cur + 1) % n
                } else {
                    (cur + n - 1) % n
                };
                self.sort_by(col);
            }
            KeyCode::F(6) => self.sort_menu = Some(self.state().sort_col),
            KeyCode::Char('I') => {
                let st = self.state_mut();
                st.ascending = !st.ascending;
            }
            KeyCode::Char('c') if self.view == View::Endpoints => {
                self.window = self.window.next();
            }
            KeyCode::Char('f') if self.view == View::Calls => self.follow = !self.follow,
            KeyCode::Char('p') | KeyCode::Char(' ') => self.set_paused(!self.paused()),
            KeyCode::Right => {
                let max = self.hscroll_max.get();
                let st = self.state_mut();
                st.hscroll = (st.hscroll + HSCROLL_STEP).min(max);
            }
            KeyCode::Left => {
                let st = self.state_mut();
                st.hscroll = st.hscroll.saturating_sub(HSCROLL_STEP);
            }
            KeyCode::Char(']') | KeyCode::Char('[') | KeyCode::Char('.') | KeyCode::Char(',') => {
                let Some(r) = &self.replay else {
                    return Action::None;
                };
                match key.code {
                    KeyCode::Char(']') => r.scale_speed(2.0),
                    KeyCode::Char('[') => r.scale_speed(0.5),
                    KeyCode::Char(',') => {
                        let d = &self.data;
                        let start = d.start_mono_ns().unwrap_or(0);
                        let at = d.position_ns.max(start);
                        r.rewind_to(at.saturating_sub(SKIP_NS).max(start));
                    }
                    _ => {
                        let d = &self.data;
                        let at = d.position_ns.max(d.start_mono_ns().unwrap_or(0));
                        r.skip_to(at.saturating_add(SKIP_NS));
                    }
                }
            }
            KeyCode::Char('+') => {
                self.refresh = (self.refresh * 2).clamp(MIN_REFRESH, MAX_REFRESH);
            }
            KeyCode::Char('-') => {
                self.refresh = (self.refresh / 2).clamp(MIN_REFRESH, MAX_REFRESH);
            }
            _ => return Action::None,
        }
        Action::Redraw
    }
}

/// A verb of the `:` command line.
#[derive(Debug, Clone, Copy)]
pub struct Command {
    pub verb: &'static str,
    /// What it takes after a space ("" for nothing).
    pub argument: &'static str,
    /// Other names it answers to (k9s's and htop's words).
    pub aliases: &'static [&'static str],
}

/// The `:` command line's verbs, in the order the hint line lists them.
pub const COMMANDS: &[Command] = &[
    Command {
        verb: "calls",
        argument: "",
        aliases: &["call"],
    },
    Command {
        verb: "endpoints",
        argument: "",
        aliases: &["endpoint", "ep"],
    },
    Command {
        verb: "flows",
        argument: "",
        aliases: &["flow", "conns"],
    },
    Command {
        verb: "procs",
        argument: "",
        aliases: &["processes", "process", "proc", "ps"],
    },
    Command {
        verb: "filter",
        argument: "EXPR",
        aliases: &[],
    },
    Command {
        verb: "sort",
        argument: "COLUMN",
        aliases: &[],
    },
    Command {
        verb: "goto",
        argument: "TIME",
        aliases: &["go"],
    },
    Command {
        verb: "start",
        argument: "",
        aliases: &[],
    },
    Command {
        verb: "end",
        argument: "",
        aliases: &[],
    },
    Command {
        verb: "quit",
        argument: "",
        aliases: &["q", "exit"],
    },
];

/// The verb a typed word names: a verb or alias as typed, else the one verb it is a prefix
/// of (`:endp` is `endpoints`; `:e` names two, which the error lists).
pub fn command_verb(typed: &str) -> Result<&'static str, String> {
    let typed_lower = typed.to_ascii_lowercase();
    if let Some(c) = COMMANDS
        .iter()
        .find(|c| c.verb == typed_lower || c.aliases.contains(&typed_lower.as_str()))
    {
        return Ok(c.verb);
    }
    pick_by_prefix("command", &typed_lower, COMMANDS.iter().map(|c| c.verb)).map_err(|e| {
        let verbs: Vec<String> = COMMANDS
            .iter()
            .map(|c| match c.argument {
                "" => c.verb.to_owned(),
                a => format!("{} {a}", c.verb),
            })
            .collect();
        format!("{e} (commands: {})", verbs.join(", "))
    })
}

/// The one name `typed` names, case aside: a name as typed or the only one it begins.
fn pick_by_prefix(
    what: &str,
    typed: &str,
    names: impl Iterator<Item = &'static str> + Clone,
) -> Result<&'static str, String> {
    if typed.is_empty() {
        let all: Vec<&str> = names.collect();
        return Err(format!("name one of {}", all.join(", ")));
    }
    if let Some(n) = names.clone().find(|n| n.eq_ignore_ascii_case(typed)) {
        return Ok(n);
    }
    let lower = typed.to_ascii_lowercase();
    let matching: Vec<&'static str> = names
        .filter(|n| n.to_ascii_lowercase().starts_with(&lower))
        .collect();
    match matching[..] {
        [one] => Ok(one),
        [] => Err(format!("unknown {what} {typed:?}")),
        _ => Err(format!("{typed:?} could be {}", matching.join(", "))),
    }
}

/// The longest start every option shares (None without options).
fn common_prefix<'a>(options: &[&'a str]) -> Option<&'a str> {
    let first = *options.first()?;
    let mut len = first.len();
    for o in &options[1..] {
        len = first
            .bytes()
            .zip(o.bytes())
            .take(len)
            .take_while(|(a, b)| a == b)
            .count();
    }
    Some(&first[..len])
}

/// The recorded time `:goto` names: what `--from`/`--to` take (`driver::replay::ReplayTime`:
/// RFC 3339, `+30s` from the start) or a time of day `HH:MM[:SS]` in the zone shown, the
/// first such moment at or after the recording's start.
pub fn goto_target(
    text: &str,
    meta: &crate::session_meta::SessionMeta,
    zone: &crate::clock::TimeZone,
) -> Result<u64, String> {
    use crate::driver::replay::ReplayTime;
    let text = text.trim();
    let time_of_day = {
        let parts: Vec<&str> = text.split(':').collect();
        (2..=3).contains(&parts.len())
            && parts.iter().all(|p| {
                let whole = p.split('.').next().unwrap_or("");
                !whole.is_empty()
                    && whole.len() <= 2
                    && p.chars().all(|c| c.is_ascii_digit() || c == '.')
            })
    };
    if !time_of_day {
        return ReplayTime::parse(text)
            .map(|t| t.mono_ns(meta))
            .map_err(|e| format!("goto {e}"));
    }
    // That time on the recording's first date, as the zone then says it.
    let start = meta.start_mono_ns();
    let start_unix = super::table::unix_ns(Some(meta), start);
    let date = zone.date_time(start_unix);
    let with_secs = if text.matches(':').count() == 1 {
        format!("{text}:00")
    } else {
        text.to_owned()
    };
    let as_utc = ReplayTime::parse(&format!("{} {with_secs}Z", date.get(..10).unwrap_or("")))
        .map_err(|e| format!("goto {e}"))?;
    let ReplayTime::At(utc_ns) = as_utc else {
        return Err(format!("goto {text:?}: not a time of day"));
    };
    let offset_ns = zone.at(start_unix).offset_s * 1_000_000_000;
    let mut unix = utc_ns - offset_ns;
    const HALF_DAY_NS: i64 = 12 * 3600 * 1_000_000_000;
    if unix < start_unix - HALF_DAY_NS {
        // Long before the start on its first date: the next day's (a night's recording).
        unix += 2 * HALF_DAY_NS;
    }
    // Minutes before the start (`14:32` for a recording begun at 14:32:40): the start.
    Ok(ReplayTime::At(unix.max(start_unix)).mono_ns(meta))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::call::Call;
    use crate::tui::collect_replay;
    use crate::tui::data::{flow_bytes_by_pid, BytesByPid, CALL_RING, HEAD_BUDGET};

    const FIXTURE: &str = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/fixtures/recordings/http_mix.ebt"
    );

    fn msgs() -> Vec<UiMsg> {
        collect_replay(FIXTURE.as_ref()).unwrap()
    }

    fn app_with(msgs: Vec<UiMsg>) -> App {
        let mut app = App::new("replay test", Duration::from_secs(1), true);
        for m in msgs {
            app.apply(m);
        }
        app
    }

    fn key(app: &mut App, code: KeyCode) -> Action {
        app.handle_key(KeyEvent::new(code, KeyModifiers::NONE))
    }

    fn typed(app: &mut App, s: &str) {
        for c in s.chars() {
            key(app, KeyCode::Char(c));
        }
    }

    fn col_values(app: &App, col: usize) -> Vec<SortVal> {
        app.rows().iter().map(|r| r.sort[col].clone()).collect()
    }

    #[test]
    fn calls_are_newest_first_and_sort_column_moves_and_inverts() {
        let mut app = app_with(msgs());
        let seqs = col_values(&app, 0);
        assert_eq!(seqs.len(), 62);
        assert!(seqs
            .windows(2)
            .all(|w| w[0].cmp(&w[1]) == Ordering::Greater));
        // Sort by latency (column 7), descending, then inverted.
        for _ in 0..7 {
            key(&mut app, KeyCode::Char('>'));
        }
        assert_eq!(app.view_state().sort_col, 7);
        let lat = col_values(&app, 7);
        assert!(lat.windows(2).all(|w| w[0].cmp(&w[1]) != Ordering::Less));
        key(&mut app, KeyCode::Char('I'));
        let lat = col_values(&app, 7);
        assert!(lat.windows(2).all(|w| w[0].cmp(&w[1]) != Ordering::Greater));
        // `<` wraps around.
        for _ in 0..8 {
            key(&mut app, KeyCode::Char('<'));
        }
        assert_eq!(app.view_state().sort_col, 8);
    }

    #[test]
    fn f6_menu_enter_sorts_by_the_chosen_column_and_esc_leaves_the_sort() {
        let mut app = app_with(msgs());
        // Hold a row: it stays selected whatever the sort.
        key(&mut app, KeyCode::Down);
        key(&mut app, KeyCode::Down);
        let held = app.view_state().selected.clone().unwrap();
        // F6 opens the menu on the column sorted by; q neither quits nor closes it.
        key(&mut app, KeyCode::F(6));
        assert_eq!(app.sort_menu, Some(0));
        assert_eq!(key(&mut app, KeyCode::Char('q')), Action::None);
        assert_eq!(app.sort_menu, Some(0));
        // Esc: the menu closes, the sort is as it was.
        key(&mut app, KeyCode::Down);
        key(&mut app, KeyCode::Char('j'));
        assert_eq!(app.sort_menu, Some(2));
        key(&mut app, KeyCode::Esc);
        assert_eq!(app.sort_menu, None);
        assert_eq!(
            (app.view_state().sort_col, app.view_state().ascending),
            (0, false)
        );
        // Enter on LAT ms (column 7): largest first; the held row still selected.
        key(&mut app, KeyCode::F(6));
        for _ in 0..8 {
            key(&mut app, KeyCode::Down);
        }
        key(&mut app, KeyCode::Char('k'));
        assert_eq!(app.sort_menu, Some(7));
        assert_eq!(key(&mut app, KeyCode::Enter), Action::Redraw);
        assert_eq!(app.sort_menu, None);
        assert_eq!(
            (app.view_state().sort_col, app.view_state().ascending),
            (7, false)
        );
        let lat = col_values(&app, 7);
        assert!(lat.windows(2).all(|w| w[0].cmp(&w[1]) != Ordering::Less));
        let rows = app.rows();
        assert_eq!(rows[app.selected_index(&rows).unwrap()].key, held);
        // Text sorts A→Z; choosing the column sorted by keeps its direction (I inverted it).
        key(&mut app, KeyCode::F(6));
        key(&mut app, KeyCode::Home);
        key(&mut app, KeyCode::Down);
        key(&mut app, KeyCode::Enter);
        assert_eq!(
            (app.view_state().sort_col, app.view_state().ascending),
            (1, true)
        );
        key(&mut app, KeyCode::Char('I'));
        key(&mut app, KeyCode::F(6));
        key(&mut app, KeyCode::Enter);
        assert_eq!(
            (app.view_state().sort_col, app.view_state().ascending),
            (1, false)
        );
        // F6 closes it too.
        key(&mut app, KeyCode::F(6));
        key(&mut app, KeyCode::F(6));
        assert_eq!(app.sort_menu, None);
        // Every view with columns: the menu lists them all, the last one chosen with End.
        for v in ['2', '3', '4'] {
            key(&mut app, KeyCode::Char(v));
            let last = app.columns().len() - 1;
            key(&mut app, KeyCode::F(6));
            key(&mut app, KeyCode::End);
            assert_eq!(app.sort_menu, Some(last), "view {v}");
            key(&mut app, KeyCode::Enter);
            assert_eq!(app.view_state().sort_col, last, "view {v}");
        }
    }

    #[test]
    fn filter_is_case_insensitive_kept_on_enter_and_esc_and_cleared_when_empty() {
        let mut app = app_with(msgs());
        key(&mut app, KeyCode::Char('/'));
        assert!(app.prompt);
        typed(&mut app, "USERS");
        key(&mut app, KeyCode::Enter);
        assert!(!app.prompt);
        let rows = app.rows();
        assert!(!rows.is_empty() && rows.len() < 62);
        assert!(rows.iter().all(|r| r.cells[5].contains("users")));
        // q in the prompt is text, not quit.
        key(&mut app, KeyCode::Char('/'));
        assert_eq!(key(&mut app, KeyCode::Char('q')), Action::Redraw);
        assert_eq!(app.view_state().filter, "USERSq");
        key(&mut app, KeyCode::Backspace);
        key(&mut app, KeyCode::Enter);
        assert_eq!(app.view_state().filter, "USERS");
        assert_eq!(app.rows().len(), rows.len());
        // Esc clears it; Ctrl-U clears the text being typed.
        key(&mut app, KeyCode::F(4));
        assert!(app.prompt);
        key(&mut app, KeyCode::Esc);
        assert!(app.view_state().filter.is_empty() && !app.prompt);
        assert_eq!(app.rows().len(), 62);
        key(&mut app, KeyCode::Char('/'));
        typed(&mut app, "x");
        app.handle_key(KeyEvent::new(KeyCode::Char('u'), KeyModifiers::CONTROL));
        assert!(app.view_state().filter.is_empty() && app.prompt);
        // Fields: the server errors only.
        typed(&mut app, "status>=500");
        key(&mut app, KeyCode::Enter);
        let rows = app.rows();
        assert!(!rows.is_empty() && rows.iter().all(|r| r.cells[6] == "500"));
        assert!(app.filter_error().is_none());
        key(&mut app, KeyCode::Char('/'));
        typed(&mut app, "x");
        assert!(app.filter_error().unwrap().contains("not a number"));
        assert_eq!(
            app.rows().len(),
            62,
            "a filter that does not parse filters nothing"
        );
        key(&mut app, KeyCode::Esc);
        // Filters are per view.
        key(&mut app, KeyCode::Char('2'));
        assert!(app.view_state().filter.is_empty());
    }

    #[test]
    fn selection_follows_the_row_across_refreshes() {
        let all = msgs();
        let split = all
            .iter()
            .position(|m| matches!(m, UiMsg::Calls(..)))
            .unwrap()
            + 1;
        let mut rest = all;
        let tail = rest.split_off(split);
        let mut app = app_with(rest);
        key(&mut app, KeyCode::Down);
        key(&mut app, KeyCode::Down);
        let rows = app.rows();
        let sel = app.selected_index(&rows).unwrap();
        assert_eq!(sel, 2);
        let chosen = rows[sel].key.clone();
        for m in tail {
            app.apply(m);
        }
        let rows = app.rows();
        let sel = app.selected_index(&rows).unwrap();
        assert_eq!(rows[sel].key, chosen, "same call still selected");
        assert!(sel > 2, "newer calls came in above it");
        // Endpoints: select by identity, a new interval keeps it.
        let mut app = app_with(msgs());
        key(&mut app, KeyCode::Char('2'));
        key(&mut app, KeyCode::End);
        let rows = app.rows();
        let last = rows.last().unwrap().key.clone();
        assert_eq!(app.selected_index(&rows), Some(rows.len() - 1));
        key(&mut app, KeyCode::Char('c'));
        let rows = app.rows();
        assert_eq!(rows[app.selected_index(&rows).unwrap()].key, last);
    }

    /// The Endpoints view's numbers, in every window, and the connections' are the
    /// pipeline's: a UI that got none of the call batches (all dropped, UI behind) shows the
    /// same rows as one that got them all, and since the start they add up to the summary's
    /// calls.
    #[test]
    fn calls_the_ui_never_got_change_no_number() {
        let mut full = app_with(msgs());
        let mut starved = app_with(
            msgs()
                .into_iter()
                .filter(|m| !matches!(m, UiMsg::Calls(..)))
                .collect(),
        );
        assert_eq!(starved.shown().calls.len(), 0);
        assert_eq!(full.shown().calls.len(), 62);
        let cells = |app: &App| -> Vec<Vec<String>> {
            app.rows().iter().map(|r| r.cells.clone()).collect()
        };
        for app in [&mut full, &mut starved] {
            key(app, KeyCode::Char('2'));
        }
        for _ in 0..4 {
            assert_eq!(full.window, starved.window);
            let rows = cells(&full);
            assert!(!rows.is_empty(), "{:?}", full.window);
            assert_eq!(rows, cells(&starved), "{:?}", full.window);
            for app in [&mut full, &mut starved] {
                key(app, KeyCode::Char('c'));
            }
        }
        // The Flows view of a source without a flow table: its connections.
        for app in [&mut full, &mut starved] {
            key(app, KeyCode::Char('3'));
        }
        let conns = cells(&full);
        assert!(!conns.is_empty());
        assert_eq!(conns, cells(&starved));
        let d = starved.shown();
        assert_eq!(d.conns.iter().map(|c| c.calls).sum::<u64>(), 62);
        let summary = d.ended.as_ref().unwrap();
        let since_start: u64 = d.windows.since_start.iter().map(|e| e.calls).sum();
        assert_eq!((since_start, summary.calls), (62, 62));
        assert_eq!(d.windows.since_start, summary.endpoints);
    }

    #[test]
    fn drill_down_to_an_endpoints_calls_and_back_keeps_the_selection() {
        let mut app = app_with(msgs());
        key(&mut app, KeyCode::Char('2'));
        key(&mut app, KeyCode::Char('c'));
        let rows = app.rows();
        let i = rows
            .iter()
            .position(|r| r.cells[3] == "/api/users/{id}" && r.cells[1] == "server")
            .unwrap();
        let want_calls: usize = rows[i].cells[4].parse().unwrap();
        let k = rows[i].key.clone();
        app.select_key(&k);
        key(&mut app, KeyCode::Enter);
        assert_eq!(app.view, View::Calls);
        assert!(app.drill.is_some());
        let calls = app.rows();
        assert_eq!(calls.len(), want_calls);
        assert!(calls
            .iter()
            .all(|r| r.cells[5].starts_with("/api/users/") && r.cells[2] == "server"));
        // Details of a call, then back to the list, then back to the endpoints.
        key(&mut app, KeyCode::Enter);
        assert!(app.detail.is_some());
        key(&mut app, KeyCode::Esc);
        assert!(app.detail.is_none() && app.drill.is_some());
        key(&mut app, KeyCode::Backspace);
        assert_eq!(app.view, View::Endpoints);
        assert!(app.drill.is_none());
        let rows = app.rows();
        assert_eq!(rows[app.selected_index(&rows).unwrap()].key, k);
    }

    #[test]
    fn q_closes_details_and_a_drill_down_before_it_quits() {
        let mut app = app_with(msgs());
        key(&mut app, KeyCode::Char('2'));
        key(&mut app, KeyCode::Enter);
        assert!(app.drill.is_some());
        key(&mut app, KeyCode::Enter);
        assert!(app.detail.is_some());
        // q: the details close, then the drill-down, then ebtop quits.
        assert_eq!(key(&mut app, KeyCode::Char('q')), Action::Redraw);
        assert!(app.detail.is_none() && app.drill.is_some());
        assert_eq!(key(&mut app, KeyCode::Char('q')), Action::Redraw);
        assert!(app.drill.is_none());
        assert_eq!(app.view, View::Endpoints);
        assert_eq!(key(&mut app, KeyCode::Char('q')), Action::Quit);
        // F10 and Ctrl-C quit from anywhere.
        key(&mut app, KeyCode::Enter);
        key(&mut app, KeyCode::Enter);
        assert!(app.detail.is_some());
        assert_eq!(key(&mut app, KeyCode::F(10)), Action::Quit);
    }

    #[test]
    fn pause_freezes_the_display_while_data_accumulates() {
        let all = msgs();
        let mut app = App::new("t", Duration::from_secs(1), true);
        let mut it = all.into_iter();
        for m in it.by_ref() {
            let is_calls = matches!(m, UiMsg::Calls(..));
            app.apply(m);
            if is_calls {
                break;
            }
        }
        let before = app.shown().calls.len();
        assert!(before > 0 && before < 62);
        key(&mut app, KeyCode::Char('p'));
        assert!(app.paused());
        for m in it {
            app.apply(m);
        }
        assert_eq!(app.shown().calls.len(), before);
        key(&mut app, KeyCode::Char('p'));
        assert!(!app.paused());
        assert_eq!(app.shown().calls.len(), 62);
    }

    #[test]
    fn keys_quit_help_views_and_refresh_bounds() {
        let mut app = app_with(msgs());
        assert_eq!(key(&mut app, KeyCode::Char('q')), Action::Quit);
        assert_eq!(key(&mut app, KeyCode::F(10)), Action::Quit);
        assert_eq!(
            app.handle_key(KeyEvent::new(KeyCode::Char('c'), KeyModifiers::CONTROL)),
            Action::Quit
        );
        key(&mut app, KeyCode::Char('?'));
        assert!(app.help);
        key(&mut app, KeyCode::Char('x'));
        assert!(!app.help);
        key(&mut app, KeyCode::Tab);
        assert_eq!(app.view, View::Endpoints);
        key(&mut app, KeyCode::Char('4'));
        assert_eq!(app.view, View::Processes);
        for _ in 0..10 {
            key(&mut app, KeyCode::Char('-'));
        }
        assert_eq!(app.refresh, MIN_REFRESH);
        for _ in 0..10 {
            key(&mut app, KeyCode::Char('+'));
        }
        assert_eq!(app.refresh, MAX_REFRESH);
    }

    #[test]
    fn call_ring_keeps_the_newest() {
        let call = msgs()
            .into_iter()
            .find_map(|m| match m {
                UiMsg::Calls(c, _) => c.into_iter().next(),
                _ => None,
            })
            .unwrap();
        let mut app = App::new("t", Duration::from_secs(1), true);
        app.apply(UiMsg::Calls(vec![call; CALL_RING + 5], vec![]));
        let d = app.shown();
        assert_eq!(d.calls.len(), CALL_RING);
        assert_eq!(d.calls.front().unwrap().seq, 5);
        assert!(d.find_call(4).is_none());
        assert!(d.find_call(5).is_some());
        assert_eq!(d.total_calls(), CALL_RING as u64 + 5);
    }

    #[test]
    fn kept_heads_stay_within_their_budget_oldest_dropped_first() {
        let mut call = msgs()
            .into_iter()
            .find_map(|m| match m {
                UiMsg::Calls(c, _) => c.into_iter().next(),
                _ => None,
            })
            .unwrap();
        let head = 1 << 20;
        call.l7.req_head.bytes = vec![b'a'; head];
        call.l7.resp_head.bytes = vec![b'b'; head / 2];
        let per_call = head + head / 2;
        let mut app = App::new("t", Duration::from_secs(1), true);
        app.apply(UiMsg::Calls(vec![call.clone(); 10], vec![]));
        let fit = HEAD_BUDGET / per_call;
        let d = app.shown();
        assert!(d.head_bytes <= HEAD_BUDGET);
        assert_eq!(d.head_bytes, fit * per_call);
        assert_eq!(d.heads_dropped_before, (10 - fit) as u64);
        let kept: Vec<bool> = d
            .calls
            .iter()
            .map(|e| !e.call.l7.req_head.bytes.is_empty())
            .collect();
        assert_eq!(kept.iter().filter(|k| **k).count(), fit);
        assert!(
            kept[10 - fit..].iter().all(|k| *k),
            "the newest keep theirs"
        );
        // Calls leaving the ring give their bytes back.
        call.l7.req_head.bytes = Vec::new();
        call.l7.resp_head.bytes = Vec::new();
        app.apply(UiMsg::Calls(vec![call; CALL_RING], vec![]));
        assert_eq!(app.shown().head_bytes, 0);
    }

    #[test]
    fn calls_follow_the_newest_until_a_row_is_held_and_enter_opens_what_was_drawn() {
        let calls: Vec<Box<Call>> = msgs()
            .into_iter()
            .filter_map(|m| match m {
                UiMsg::Calls(c, _) => Some(c),
                _ => None,
            })
            .flatten()
            .collect();
        let mut app = App::new("t", Duration::from_secs(1), true);
        app.apply(UiMsg::Calls(calls[..10].to_vec(), vec![]));
        let rows = app.rows();
        assert_eq!(app.calls_follow(&rows), Some(Following::Newest));
        // The screen shows call 9 selected; two calls arrive before Enter is pressed.
        let drawn: u64 = rows[0].key.parse().unwrap();
        app.drawn_selection
            .replace(Some((View::Calls, rows[0].key.clone())));
        app.apply(UiMsg::Calls(calls[10..12].to_vec(), vec![]));
        assert_ne!(app.rows()[0].key, rows[0].key, "newer calls on top now");
        key(&mut app, KeyCode::Enter);
        assert_eq!(
            app.detail,
            Some(drawn),
            "the call on screen, not the newest"
        );
        key(&mut app, KeyCode::Esc);
        // Moving down holds that row; newer calls are counted above it.
        key(&mut app, KeyCode::Down);
        app.apply(UiMsg::Calls(calls[12..15].to_vec(), vec![]));
        let rows = app.rows();
        let held = app.calls_follow(&rows);
        assert!(
            matches!(held, Some(Following::Held { newer }) if newer >= 4),
            "{held:?}"
        );
        // g follows again.
        key(&mut app, KeyCode::Char('g'));
        let rows = app.rows();
        assert_eq!(app.calls_follow(&rows), Some(Following::Newest));
        assert_eq!(app.selected_index(&rows), Some(0));
        app.apply(UiMsg::Calls(calls[15..16].to_vec(), vec![]));
        let rows = app.rows();
        assert_eq!(
            app.selected_index(&rows),
            Some(0),
            "the newest start on top"
        );
    }

    #[test]
    fn processes_show_socket_throughput_from_the_flow_table() {
        let flows = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/tests/fixtures/recordings/flows_mix.ebt"
        );
        let mut app = App::new("t", Duration::from_secs(1), true);
        let mut checked = 0;
        // The sums of the report on screen and its interval's length: an interval of no time
        // leaves the one before on screen.
        let mut shown: Option<(BytesByPid, u64)> = None;
        let mut reported = false;
        for m in collect_replay(flows.as_ref()).unwrap() {
            let UiMsg::Interval(r) = &m else {
                app.apply(m);
                continue;
            };
            if r.period_ns > 0 || !reported {
                shown = r
                    .flows
                    .as_ref()
                    .map(|fr| (flow_bytes_by_pid(fr), r.period_ns));
            }
            reported = true;
            app.apply(m);
            assert!(
                app.shown()
                    .report
                    .as_ref()
                    .is_some_and(|r| r.flows.is_none()),
                "the flows went to the Flows view, not into the kept report"
            );
            let Some((want, period_ns)) = &shown else {
                continue;
            };
            app.view = View::Processes;
            for row in app.rows() {
                let pid: u32 = row.cells[0].parse().unwrap();
                let (i, o) = want.get(&pid).copied().unwrap_or_default();
                let rate = |n: u64| {
                    if *period_ns == 0 {
                        0.0
                    } else {
                        n as f64 * 1e9 / *period_ns as f64
                    }
                };
                assert_eq!(row.sort[6], SortVal::Num(rate(i)), "pid {pid} in");
                assert_eq!(row.sort[7], SortVal::Num(rate(o)), "pid {pid} out");
                checked += usize::from(i + o > 0);
            }
        }
        assert!(checked > 0, "the fixture's flows moved bytes");
        // The whole download is in the flow table's bytes of some interval.
        let total: u64 = collect_replay(flows.as_ref())
            .unwrap()
            .into_iter()
            .filter_map(|m| match m {
                UiMsg::Interval(r) => r
                    .flows
                    .map(|fr| flow_bytes_by_pid(&fr).values().map(|(i, _)| i).sum::<u64>()),
                _ => None,
            })
            .sum();
        assert!(total >= 200_000, "{total}");
    }

    /// Exited processes that share a command name are one row with their numbers added;
    /// Enter opens it into its members (right under it, whatever the sort) and closes it.
    #[test]
    fn exited_processes_of_one_command_are_one_row_that_opens() {
        let mut app = app_with(msgs());
        let mut r = (**app.shown().report.as_ref().expect("an interval")).clone();
        let template = r.processes[0].clone();
        let proc_ = |pid: u32, comm: &str, exited: bool, calls: u64| {
            let mut p = template.clone();
            p.pid = pid;
            p.comm = comm.to_owned();
            p.exited = exited;
            p.calls = calls;
            p.calls_per_s = calls as f64;
            p.server_errors = 1;
            p
        };
        r.processes = vec![
            proc_(10, "nginx", false, 500),
            proc_(11, "curl", true, 1),
            proc_(12, "curl", true, 2),
            proc_(13, "curl", true, 4),
            proc_(14, "curl", false, 8),
            proc_(15, "dig", true, 1),
        ];
        app.apply(UiMsg::Interval(Box::new(r)));
        app.view = View::Processes;
        let keys = |app: &App| app.rows().iter().map(|r| r.key.clone()).collect::<Vec<_>>();
        let rows = app.rows();
        // nginx, the live curl and the lone exited dig keep their rows; three curls are one.
        assert_eq!(rows.len(), 4, "{:?}", keys(&app));
        let group = rows
            .iter()
            .find(|r| is_group_key(&r.key))
            .expect("a group row");
        assert_eq!(group.key, "exited:curl");
        assert_eq!(group.cells[0], "×3");
        assert_eq!(group.sort[3], SortVal::Num(7.0), "calls/s added");
        assert!(group.cells.last().unwrap().contains("curl ×3 exited"));
        assert!(
            keys(&app).contains(&"14".to_owned()),
            "a live curl is not grouped"
        );

        // Enter on the group: its members follow it, each its own row.
        let at = keys(&app).iter().position(|k| k == "exited:curl").unwrap();
        app.state_mut().selected = Some("exited:curl".to_owned());
        app.state_mut().index = at;
        key(&mut app, KeyCode::Enter);
        assert!(app.row_detail.is_none(), "a group opens in place");
        let k = keys(&app);
        assert_eq!(k.len(), 7, "{k:?}");
        let g = k.iter().position(|k| k == "exited:curl").unwrap();
        let under: Vec<u32> = k[g + 1..g + 4]
            .iter()
            .map(|k| super::super::table::pid_of_process_key(k).unwrap())
            .collect();
        let mut sorted = under.clone();
        sorted.sort();
        assert_eq!(sorted, [11, 12, 13], "{k:?}");
        // A member opens its own details.
        app.state_mut().selected = Some(k[g + 1].clone());
        app.state_mut().index = g + 1;
        key(&mut app, KeyCode::Enter);
        assert_eq!(
            app.row_detail.as_ref().map(|(_, k)| k.clone()),
            Some(k[g + 1].clone())
        );
        key(&mut app, KeyCode::Esc);

        // Enter on the group again closes it.
        app.state_mut().selected = Some("exited:curl".to_owned());
        app.state_mut().index = g;
        key(&mut app, KeyCode::Enter);
        assert_eq!(keys(&app).len(), 4);
    }

    #[test]
    fn call_times_carry_the_date_when_the_calls_span_two_dates() {
        // In UTC the recording (02:02:25..27) is on one date: times of day only.
        let mut app = app_with(msgs());
        assert!(!app.calls_dated());
        assert_eq!(app.columns()[0].width, 12);
        assert_eq!(app.rows()[0].cells[0], "02:02:27.142");
        // Where it crosses midnight, every TIME carries the month and day, and the column
        // is as wide as they are.
        app.zone = crate::clock::TimeZone::Fixed(crate::clock::Zone {
            offset_s: -(2 * 3600 + 2 * 60 + 27),
            name: "XST".into(),
        });
        assert!(app.calls_dated());
        assert_eq!(app.columns()[0].width, 18);
        let rows = app.rows();
        assert_eq!(rows[0].cells[0], "11-22 00:00:00.142");
        assert_eq!(rows[rows.len() - 1].cells[0].get(..6), Some("11-21 "));
        // A filter or drill-down does not change the format: all the calls kept decide.
        typed(&mut app, "/slow");
        key(&mut app, KeyCode::Enter);
        let rows = app.rows();
        assert!(!rows.is_empty() && rows.len() < 62);
        assert!(rows
            .iter()
            .all(|r| r.cells[0].len() == "11-22 00:00:00.142".len()));
        assert!(app.calls_dated());
    }

    /// Issue 44 item 4: `:` names a view, a filter or a sort as k9s does — by its verb, an
    /// alias or a prefix that names one; Tab completes verbs and columns; a word that names
    /// none or several says which there are; `:quit` quits, live or not.
    #[test]
    fn command_line_switches_views_filters_and_sorts() {
        let mut app = app_with(msgs());
        typed(&mut app, ":endpoints");
        key(&mut app, KeyCode::Enter);
        assert_eq!(
            (app.view, app.command_error.as_deref()),
            (View::Endpoints, None)
        );
        for (typed_verb, view) in [
            ("ps", View::Processes),
            ("FLOWS", View::Flows),
            ("endp", View::Endpoints),
            ("c", View::Calls),
        ] {
            typed(&mut app, &format!(":{typed_verb}"));
            key(&mut app, KeyCode::Enter);
            assert_eq!(app.view, view, ":{typed_verb} {:?}", app.command_error);
        }
        // Tab completes as far as the verbs agree, then the whole verb and its space.
        typed(&mut app, ":f");
        assert_eq!(app.command_completions("f"), vec!["flows", "filter"]);
        key(&mut app, KeyCode::Tab);
        assert_eq!(app.command.as_deref(), Some("f"));
        typed(&mut app, "i");
        key(&mut app, KeyCode::Tab);
        assert_eq!(app.command.as_deref(), Some("filter "));
        typed(&mut app, "lat>100ms");
        key(&mut app, KeyCode::Enter);
        assert_eq!(app.view_state().filter, "lat>100ms");
        // Columns complete after `sort `, by any case; the sort is the view's own.
        typed(&mut app, ":sort la");
        key(&mut app, KeyCode::Tab);
        assert_eq!(app.command.as_deref(), Some("sort LAT ms"));
        key(&mut app, KeyCode::Enter);
        let lat = app.columns().iter().position(|c| c.title == "LAT ms");
        assert_eq!(Some(app.view_state().sort_col), lat);
        // `:e` is `end` or `endpoints`; `:zz` nothing; a column that is not there neither.
        typed(&mut app, ":e");
        key(&mut app, KeyCode::Enter);
        let e = app.command_error.clone().unwrap_or_default();
        assert!(
            e.contains("endpoints, end") && e.contains("commands:"),
            "{e}"
        );
        typed(&mut app, ":zz");
        key(&mut app, KeyCode::Enter);
        assert!(app
            .command_error
            .as_deref()
            .unwrap_or("")
            .contains("unknown command \"zz\""));
        typed(&mut app, ":sort nope");
        key(&mut app, KeyCode::Enter);
        assert!(app
            .command_error
            .as_deref()
            .unwrap_or("")
            .starts_with("sort: unknown column"));
        // A live session cannot move in time; it can quit.
        app.replay = None;
        typed(&mut app, ":start");
        key(&mut app, KeyCode::Enter);
        assert!(app
            .command_error
            .as_deref()
            .unwrap_or("")
            .contains("live session"));
        typed(&mut app, ":q");
        assert_eq!(key(&mut app, KeyCode::Enter), Action::Quit);
    }

    /// Issue 44 item 8: `:goto` takes a time of day, an offset from the start or an RFC 3339
    /// time; back means the replay is read again up to it, ahead that it skips there; `{`
    /// and `}` go to the start and the end; a live session refuses, saying why.
    #[test]
    fn goto_start_and_end_move_a_replay_in_recorded_time() {
        use crate::driver::replay::ReplayTime;
        let mut app = app_with(msgs());
        let control = std::sync::Arc::new(crate::tui::ReplayControl::new(1.0));
        app.replay = Some(std::sync::Arc::clone(&control));
        let meta = app.shown().meta.clone().unwrap();
        let start = meta.start_mono_ns();
        let at = |t: &str| ReplayTime::parse(t).unwrap().mono_ns(&meta);
        // The replay is at its end: an offset of 0.5 s is behind it.
        typed(&mut app, ":goto +0.5s");
        assert_eq!(app.command.as_deref(), Some("goto +0.5s"));
        key(&mut app, KeyCode::Enter);
        assert_eq!(app.command, None);
        assert_eq!(app.command_error, None);
        assert_eq!(control.take_rewind(), Some(start + 500_000_000));
        // A time of day in the zone shown (UTC here; the recording runs 02:02:25..27).
        typed(&mut app, ":goto 02:02:26.5");
        key(&mut app, KeyCode::Enter);
        assert_eq!(
            control.take_rewind(),
            Some(at("2026-11-22T02:02:26.5Z")),
            "{:?}",
            app.command_error
        );
        // In another zone, the same instant by its clock; before the start: the start.
        app.zone = crate::clock::TimeZone::Fixed(crate::clock::Zone {
            offset_s: -5 * 3600,
            name: "EST".into(),
        });
        for (typed_at, want) in [
            ("21:02:26.5", at("2026-11-22T02:02:26.5Z")),
            ("21:01", start),
            ("2026-11-22T03:02:26.5+01:00", at("2026-11-22T02:02:26.5Z")),
        ] {
            typed(&mut app, &format!(":goto {typed_at}"));
            key(&mut app, KeyCode::Enter);
            assert_eq!(control.take_rewind(), Some(want), "{typed_at}");
        }
        // `}`: to the end (everything replayed at once); `{`: back to the start.
        key(&mut app, KeyCode::Char('}'));
        assert!(!control.rewind_pending());
        assert_eq!(
            control
                .skip_until_ns
                .load(std::sync::atomic::Ordering::Relaxed),
            u64::MAX
        );
        key(&mut app, KeyCode::Char('{'));
        assert_eq!(control.take_rewind(), Some(start));
        // Nonsense is refused with the forms it takes; Esc leaves the command line.
        typed(&mut app, ":goto soon");
        key(&mut app, KeyCode::Enter);
        assert!(
            app.command_error
                .as_deref()
                .is_some_and(|e| e.contains("+30s")),
            "{:?}",
            app.command_error
        );
        assert!(!control.rewind_pending());
        typed(&mut app, ":sta");
        key(&mut app, KeyCode::Esc);
        assert_eq!(app.command, None);
        assert!(!control.rewind_pending());
        // Live: nothing to move in.
        app.replay = None;
        key(&mut app, KeyCode::Char('{'));
        assert!(app
            .command_error
            .as_deref()
            .is_some_and(|e| e.contains("live")));
    }

    #[test]
    fn f3_search_selects_the_next_match_and_hides_nothing() {
        let mut app = app_with(msgs());
        key(&mut app, KeyCode::F(3));
        assert!(app.search_prompt);
        typed(&mut app, "status=500");
        key(&mut app, KeyCode::Enter);
        assert!(!app.search_prompt);
        let rows = app.rows();
        assert_eq!(rows.len(), 62, "nothing hidden");
        let first = app.selected_index(&rows).unwrap();
        assert_eq!(rows[first].cells[6], "500");
        // F3 twice: the search prompt again with the same words, then the next match.
        key(&mut app, KeyCode::F(3));
        key(&mut app, KeyCode::F(3));
        let rows = app.rows();
        let second = app.selected_index(&rows).unwrap();
        assert_ne!(second, first);
        assert_eq!(rows[second].cells[6], "500");
        key(&mut app, KeyCode::Esc);
        assert!(!app.search_prompt && app.view_state().filter.is_empty());
    }
}
