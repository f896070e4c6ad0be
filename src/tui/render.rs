//! Drawing [`App`] into a frame. Nothing here is conveyed by colour alone: the selected row has
//! a `>` marker, server errors a `!`, slow calls a `*`, the current view is in brackets.

use ratatui::layout::{Alignment, Constraint, Layout, Rect};
use ratatui::style::{Color, Modifier, Style};
use ratatui::text::{Line, Span};
use ratatui::widgets::{Block, Borders, Cell, Clear, Paragraph, Row as TRow, Table, Wrap};
use ratatui::Frame;

use super::app::{App, View};
use super::keys::{FOOTER, KEYS};
use super::table::{
    date_time, date_time_named, human, human_rate, proc_label, unix_ns, Column, Flag, SLOW_NS,
};
use crate::call::Call;

fn style(app: &App, s: Style) -> Style {
    if app.no_color {
        // Keep only what survives NO_COLOR terminals' rendering: bold.
        Style::default().add_modifier(s.add_modifier & Modifier::BOLD)
    } else {
        s
    }
}

/// A byte count in the details, SI-scaled as the tables' columns (`201.2k B`).
fn bytes(n: u64) -> String {
    format!("{} B", human(n as f64))
}

fn duration_str(ns: u64) -> String {
    let s = ns / 1_000_000_000;
    if s >= 3600 {
        format!("{}h{:02}m{:02}s", s / 3600, s / 60 % 60, s % 60)
    } else if s >= 60 {
        format!("{}m{:02}s", s / 60, s % 60)
    } else {
        format!("{:.1}s", ns as f64 / 1e9)
    }
}

pub fn draw(f: &mut Frame, app: &App) {
    let area = f.area();
    let drilled = app.view == View::Calls && app.drill.is_some();
    // Once a frame: it walks the calls kept.
    let downstream = if drilled {
        app.drill_downstream()
    } else {
        None
    };
    let footer_h = if app.view == View::Flows {
        2 + drop_lines_shown(app) + iface_lines_shown(app)
    } else if app.view == View::Processes {
        2
    } else if downstream.is_some() {
        // Room for the downstream lines too.
        (area.height * 2 / 5).clamp(3, 15)
    } else if drilled {
        // Leave the calls most of a small screen.
        (area.height / 3).clamp(3, 10)
    } else {
        0
    };
    let hint_h = u16::try_from(hint_lines(app, area.width).len()).unwrap_or(1);
    let header_h = if scope_line(app).is_empty() { 2 } else { 3 };
    let [header, body, panel, hint] = Layout::vertical([
        Constraint::Length(header_h),
        Constraint::Min(3),
        Constraint::Length(footer_h),
        Constraint::Length(hint_h),
    ])
    .areas(area);
    draw_header(f, app, header);
    if app.profile.open {
        let d = app.shown();
        let body = Rect {
            height: body.height + panel.height,
            ..body
        };
        app.profile
            .draw(f, body, d.profile.as_deref(), app.no_color);
        draw_hint(f, app, hint);
        if app.help {
            draw_help(f, app, area);
        }
        return;
    }
    draw_table(f, app, body);
    match app.view {
        View::Processes => draw_overhead(f, app, panel),
        View::Flows => f.render_widget(Paragraph::new(flow_panel(app, panel.width)), panel),
        View::Calls if drilled => f.render_widget(
            Paragraph::new(endpoint_panel(
                app,
                downstream.as_ref(),
                panel.width,
                panel.height,
            )),
            panel,
        ),
        _ => {}
    }
    draw_hint(f, app, hint);
    if app.detail.is_some() || app.row_detail.is_some() {
        draw_detail(f, app, area);
    }
    if app.sort_menu.is_some() {
        draw_sort_menu(f, app, body);
    }
    if app.help {
        draw_help(f, app, area);
    }
}

/// F6's "Sort by" menu, as htop's: the view's columns down the left of the table, the cursor
/// marked `>` (and reversed), the column sorted by now with its arrow.
fn draw_sort_menu(f: &mut Frame, app: &App, body: Rect) {
    let Some(cursor) = app.sort_menu else {
        return;
    };
    let cols = app.columns();
    let cursor = cursor.min(cols.len().saturating_sub(1));
    let st = app.view_state();
    let arrow = if st.ascending { "↑" } else { "↓" };
    let title = " Sort by ";
    let widest = cols
        .iter()
        .map(|c| c.title.chars().count())
        .max()
        .unwrap_or(0);
    // Marker, title, arrow, and the borders; at least the title's width.
    let w = u16::try_from((widest + 5).max(title.len()) + 2).unwrap_or(u16::MAX);
    let r = Rect {
        width: w.min(body.width),
        height: u16::try_from(cols.len() + 2)
            .unwrap_or(u16::MAX)
            .min(body.height),
        ..body
    };
    // Where the columns do not all fit, the list scrolls with the cursor.
    let visible = usize::from(r.height.saturating_sub(2)).max(1);
    let first = cursor.saturating_sub(visible - 1);
    let lines: Vec<Line> = cols
        .iter()
        .enumerate()
        .skip(first)
        .take(visible)
        .map(|(i, c)| {
            let mark = if i == cursor { '>' } else { ' ' };
            let sorted = if i == st.sort_col { arrow } else { " " };
            let text = format!("{mark} {:<widest$} {sorted}", c.title);
            if i == cursor {
                Line::styled(
                    text,
                    style(app, Style::new().add_modifier(Modifier::REVERSED)),
                )
            } else {
                Line::from(text)
            }
        })
        .collect();
    f.render_widget(Clear, r);
    f.render_widget(
        Paragraph::new(lines).block(
            Block::default()
                .borders(Borders::ALL)
                .title(title)
                .style(style(app, Style::new())),
        ),
        r,
    );
}

/// How much of the header's first line to write: each step down sheds a detail, so that a
/// narrow terminal keeps the position and the losses rather than cutting the line's end.
#[derive(Clone, Copy)]
struct HeaderDetail {
    millis: bool,
    since_start: bool,
    rate: bool,
    at: bool,
    zone: bool,
    year: bool,
    date: bool,
}

impl HeaderDetail {
    /// From the fullest to the tersest: step `n` sheds the first `n` details, in this order.
    const STEPS: [HeaderDetail; 8] = {
        let mut steps = [HeaderDetail::shedding(0); 8];
        let mut n = 1;
        while n < 8 {
            steps[n] = HeaderDetail::shedding(n);
            n += 1;
        }
        steps
    };

    const fn shedding(n: usize) -> HeaderDetail {
        HeaderDetail {
            millis: n < 1,
            since_start: n < 2,
            rate: n < 3,
            at: n < 4,
            zone: n < 5,
            year: n < 6,
            date: n < 7,
        }
    }
}

/// The header's first line at this level of detail, without the sparkline: who, what state,
/// where in time (a replay's recorded date and position, or live the wall clock and uptime
/// as top's first line), then the counts with the losses.
fn header_top(app: &App, k: HeaderDetail) -> Vec<Span<'static>> {
    let d = app.shown();
    let mut top = vec![
        Span::styled(
            "ebtop",
            style(app, Style::new().add_modifier(Modifier::BOLD)),
        ),
        Span::raw(format!("  {}", app.source_label)),
    ];
    if let Some(r) = &app.replay {
        // Shortest exact form: 0.02x, 2x, 1000x (halving and doubling keep it short).
        top.push(Span::raw(format!("  speed {}x", r.speed())));
    }
    if app.paused() {
        top.push(Span::styled(
            "  PAUSED",
            style(
                app,
                Style::new().fg(Color::Yellow).add_modifier(Modifier::BOLD),
            ),
        ));
    }
    if let Some(sm) = d.report.as_ref().and_then(|r| r.sampling.as_ref()) {
        // The last interval's numbers are of a sample of connections (rows marked `~`).
        let share = sm
            .ratio
            .map_or("?".to_owned(), |r| format!("{:.0}%", r * 100.0));
        top.push(Span::styled(
            format!("  SAMPLED {share}"),
            style(
                app,
                Style::new().fg(Color::Yellow).add_modifier(Modifier::BOLD),
            ),
        ));
    }
    if d.ended.is_some() {
        top.push(Span::raw("  [ENDED]"));
    }
    for w in &d.warnings {
        top.push(Span::styled(
            format!("  ! {w}"),
            style(
                app,
                Style::new().fg(Color::Red).add_modifier(Modifier::BOLD),
            ),
        ));
    }
    // The zone's name at the instant shown (CET in winter, CEST in summer).
    let zone = |mono_ns: u64| {
        if k.zone {
            format!(" {}", app.zone.at(unix_ns(d.meta.as_ref(), mono_ns)).name)
        } else {
            String::new()
        }
    };
    // `YYYY-MM-DD HH:MM:SS.mmm`, cut to what the level keeps.
    let when = |mono_ns: u64, date: bool| {
        let s = date_time(d.meta.as_ref(), &app.zone, mono_ns);
        let from = match (date, k.year) {
            (false, _) => 11,
            (true, false) => 5,
            (true, true) => 0,
        };
        let to = if k.millis { s.len() } else { 19 };
        s.get(from..to).unwrap_or(&s).to_owned()
    };
    match (app.clock_ns, d.start_mono_ns()) {
        (Some(now), Some(s)) => {
            // Live: today's time, to the second, as top's clock.
            top.push(Span::raw(format!(
                "  {}{}",
                when(now, false).get(..8).unwrap_or_default(),
                zone(now)
            )));
            top.push(Span::raw(format!(
                "  up {}",
                duration_str(now.saturating_sub(s))
            )));
        }
        (None, Some(s)) if d.position_ns > 0 => {
            // Ended, at the session's end as the progress line says, not at the last event.
            let pos = replay_ended_at(app).unwrap_or(d.position_ns);
            top.push(Span::raw(format!(
                "  {}{}{}",
                if k.at { "at " } else { "" },
                when(pos, k.date),
                zone(pos)
            )));
            if k.since_start {
                top.push(Span::raw(format!(
                    " (+{})",
                    duration_str(pos.saturating_sub(s))
                )));
            }
        }
        _ => {}
    }
    // Losses right after the counts: they must stay in sight.
    top.push(Span::raw(format!("  calls {}", d.total_calls())));
    if let Some(r) = d.calls_per_s().filter(|_| k.rate) {
        top.push(Span::raw(format!(" ({r:.1}/s)")));
    }
    top.push(Span::raw(format!("  lost {}", d.total_lost())));
    // Events are not calls: say how many calls are missing, at least (rows marked `≥`).
    match d.calls_missing() {
        Some(0) => top.push(Span::raw(" (calls may be missing)")),
        Some(n) => top.push(Span::raw(format!(" (≥{n} calls missing)"))),
        None => {}
    }
    if d.ui_dropped > 0 {
        top.push(Span::raw(format!("  ui-dropped {}", d.ui_dropped)));
    }
    // Spans the OTLP export could not send: calls missing from the collector's traces.
    if let Some(n) = d.otlp_dropped().filter(|&n| n > 0) {
        top.push(Span::raw(format!("  otlp-dropped {n}")));
    }
    top
}

fn draw_header(f: &mut Frame, app: &App, area: Rect) {
    let d = app.shown();
    let width = usize::from(area.width);
    let steps = HeaderDetail::STEPS;
    let mut top = steps
        .iter()
        .map(|&k| header_top(app, k))
        .find(|t| Line::from(t.clone()).width() <= width)
        .unwrap_or_else(|| header_top(app, steps[steps.len() - 1]));
    // The call-rate sparkline last, in what width is left (its newest values), named: a
    // line of blocks alone does not say what it plots.
    const LABEL: &str = "calls/s ";
    let left = width.saturating_sub(Line::from(top.clone()).width() + 2 + LABEL.len());
    if d.rate_history.len() > 1 && left >= 2 {
        let skip = d.rate_history.len().saturating_sub(left);
        top.push(Span::raw(format!(
            "  {LABEL}{}",
            super::table::sparkline(d.rate_history.iter().skip(skip).copied())
        )));
    }
    let mut tabs = Vec::new();
    for v in View::ALL {
        let label = format!("{} {}", v.index() + 1, v.title());
        if v == app.view && !app.profile.open {
            tabs.push(Span::styled(
                format!("[{label}]"),
                style(
                    app,
                    Style::new().fg(Color::Cyan).add_modifier(Modifier::BOLD),
                ),
            ));
        } else {
            tabs.push(Span::raw(format!(" {label} ")));
        }
        tabs.push(Span::raw(" "));
    }
    // The Profile view opens over the others (5; Esc: back to the one under it).
    if app.profile.open {
        tabs.push(Span::styled(
            "[5 Profile]",
            style(
                app,
                Style::new().fg(Color::Cyan).add_modifier(Modifier::BOLD),
            ),
        ));
        tabs.push(Span::raw(" "));
    }
    let st = app.view_state();
    let cols = app.columns();
    if let Some(c) = cols.get(st.sort_col) {
        let arrow = if st.ascending { "↑" } else { "↓" };
        tabs.push(Span::raw(format!(" sort {}{arrow}", c.title)));
    }
    // Where the window goes if the line has room for it (the view's title always says it).
    let window_at = tabs.len();
    if app.search_prompt {
        tabs.push(Span::raw(format!(
            "  search \"{}\" (Enter/F3: next)",
            app.last_search.as_deref().unwrap_or("")
        )));
    }
    if !st.filter.is_empty() || app.prompt {
        tabs.push(Span::raw(format!("  filter \"{}\"", st.filter)));
        if let Some(e) = app.filter_error() {
            tabs.push(Span::raw(format!(" ({e})")));
        }
    }
    tabs.push(Span::raw(format!(
        "  refresh {:.1}s",
        app.refresh.as_secs_f64()
    )));
    if app.view == View::Endpoints {
        let window = Span::raw(format!("  window: {}", app.window.label()));
        if Line::from(tabs.clone()).width() + window.width() <= width {
            tabs.insert(window_at, window);
        }
    }
    let mut lines = vec![Line::from(top), Line::from(tabs)];
    let scope = scope_line(app);
    if !scope.is_empty() {
        lines.push(Line::from(scope));
    }
    f.render_widget(Paragraph::new(lines), area);
}

/// The header's third line, when there is something to say: what the session leaves out
/// (the capture filters, `--filter`) and where it is recorded, so an empty or quiet screen
/// says why.
fn scope_line(app: &App) -> Vec<Span<'static>> {
    let mut line = Vec::new();
    if let Some(p) = replay_progress(app) {
        line.push(Span::raw(p));
    }
    if let Some((path, bytes)) = &app.recording {
        line.push(Span::styled(
            format!("REC {path} {}B", super::table::human(*bytes as f64)),
            style(
                app,
                Style::new().fg(Color::Red).add_modifier(Modifier::BOLD),
            ),
        ));
    }
    // What the profile's triggers do (live with --profile): PROFILING marked like REC.
    if let Some(status) = app
        .shown()
        .report
        .as_ref()
        .and_then(|r| r.profile_status.clone())
    {
        if !line.is_empty() {
            line.push(Span::raw("  "));
        }
        line.push(Span::styled(
            status,
            style(
                app,
                Style::new().fg(Color::Yellow).add_modifier(Modifier::BOLD),
            ),
        ));
    }
    let mut say = |text: String| {
        if !line.is_empty() {
            line.push(Span::raw("  "));
        }
        line.push(Span::raw(text));
    };
    if let Some(capture) = capture_filters(app) {
        say(format!("capture {capture}"));
    }
    if let Some(f) = &app.fixed_filter {
        say(format!("--filter '{f}'"));
    }
    if let Some(addr) = app.metrics {
        say(format!("metrics http://{addr}/metrics"));
    }
    line
}

/// Bar cells of a replay's progress.
const PROGRESS_CELLS: usize = 20;

/// Where an ended replay is: the session's end (past its last call: the summary's length).
/// None live or before the end.
fn replay_ended_at(app: &App) -> Option<u64> {
    let d = app.shown();
    let meta = d.meta.as_ref().filter(|m| m.source == "replay")?;
    let s = d.ended.as_ref()?;
    Some(meta.start_mono_ns().saturating_add(s.duration_ns))
}

/// Where a replay is in its recording: a bar, the recorded time since the start and the
/// recording's length (`replay [██████··············] +0.6s of 2.0s`); the length is
/// `reading…` until it is known. None live.
fn replay_progress(app: &App) -> Option<String> {
    let d = app.shown();
    let meta = d.meta.as_ref().filter(|m| m.source == "replay")?;
    let start = meta.start_mono_ns();
    let ended = replay_ended_at(app);
    let end = app.replay_end_ns.or(ended).map(|e| e.max(d.position_ns));
    let pos = match (ended, end) {
        (Some(_), Some(end)) => end,
        _ => d.position_ns.max(start),
    };
    let since = duration_str(pos - start);
    Some(match end {
        Some(end) => {
            let total = end - start;
            let done = if total == 0 {
                PROGRESS_CELLS
            } else {
                ((pos - start) as f64 / total as f64 * PROGRESS_CELLS as f64).round() as usize
            };
            format!(
                "replay [{}{}] +{since} of {}",
                "█".repeat(done),
                "·".repeat(PROGRESS_CELLS - done),
                duration_str(total)
            )
        }
        None => format!("replay +{since} of (reading…)"),
    })
}

/// The session's capture filters as options (`--port 42999`), None when there are none.
fn capture_filters(app: &App) -> Option<String> {
    let options = app.shown().meta.as_ref()?.filters.as_options();
    (!options.is_empty()).then_some(options)
}

/// Why the Calls view has no calls: what filters leave out, what was seen but not
/// recognised.
fn no_calls_reason(app: &App) -> String {
    let d = app.shown();
    let totals = d.ended.as_deref().or(d.report.as_ref().map(|r| &r.totals));
    if d.total_calls() > 0 {
        // Calls were seen; none passed the filters.
        let left_out = totals.map_or(0, |t| t.calls_filtered_out);
        return format!("no calls match the filter ({left_out} left out)");
    }
    let mut parts = vec![if d.ended.is_some() {
        "no calls".to_owned()
    } else {
        "no calls yet".to_owned()
    }];
    if let Some(capture) = capture_filters(app) {
        parts[0] = format!("{}: {capture}", parts[0]);
    }
    if let Some(t) = totals {
        let unrecognised = t
            .kernel
            .skipped_unknown_proto
            .saturating_add(t.tracker.unrecognised_events);
        if unrecognised > 0 {
            let unexamined = t.kernel.skipped_unexamined;
            parts.push(if unexamined > 0 {
                format!(
                    "{unrecognised} sends/receives of no recognised protocol skipped \
                     ({unexamined} datagrams of sockets judged to carry none, unexamined)"
                )
            } else {
                format!("{unrecognised} sends/receives of no recognised protocol skipped")
            });
        }
        if t.kernel.tls_cipher_events > 0 {
            parts.push(format!(
                "{} of TLS ciphertext (its plaintext probe not placed)",
                t.kernel.tls_cipher_events
            ));
        }
    }
    parts.join("; ")
}

/// Which columns fit in `width` (the marker column and spacing included), and their widths.
/// `rows` are the rows on screen (never all of them: a frame's cost stays that of a page).
/// Content-sized columns (`Column::cap`) are as wide as their widest cell up to their cap,
/// and never narrower while the line holds them; address columns (`Column::fit`) take their
/// widest cell (at most their `width` while columns are dropped, up to `FIT_MAX` from the
/// spare); the flexible column the rest. Columns are dropped by their `drop` rank; those of
/// rank 0 (a view's key columns) never are: where even they do not fit, the flexible column
/// shrinks first, then the widest content-sized ones (cut with `~`).
fn fit_columns(cols: &[Column], rows: &[super::table::SharedRow], width: u16) -> Vec<(usize, u16)> {
    let widest = |i: usize| -> usize {
        rows.iter()
            .filter_map(|r| r.cells.get(i))
            .map(|s| s.chars().count())
            .max()
            .unwrap_or(0)
    };
    // Natural width of each sized column: its widest cell, or its title and the sort arrow
    // (so sorting does not move the columns).
    let natural: Vec<u16> = cols
        .iter()
        .enumerate()
        .map(|(i, c)| {
            let cap = if c.cap > 0 {
                c.cap
            } else if c.fit {
                super::table::FIT_MAX
            } else {
                return c.width;
            };
            let title = c.title.chars().count() + 1;
            u16::try_from(widest(i).max(title))
                .unwrap_or(u16::MAX)
                .min(cap)
        })
        .collect();
    let base = |i: usize| {
        if cols[i].cap > 0 {
            natural[i]
        } else {
            natural[i].min(cols[i].width)
        }
    };
    // A column that may be dropped and says nothing in any row ("-": no container, no TLS)
    // gives its width to the others (the command line, first).
    let empty = |i: usize| {
        cols[i].drop > 0
            && !rows.is_empty()
            && rows
                .iter()
                .all(|r| r.cells.get(i).is_none_or(|s| s == "-" || s.is_empty()))
    };
    let mut keep: Vec<usize> = (0..cols.len()).filter(|&i| !empty(i)).collect();
    let need = |keep: &[usize]| -> u16 { 2 + keep.iter().map(|&i| base(i) + 1).sum::<u16>() };
    while need(&keep) > width {
        let victim = keep
            .iter()
            .enumerate()
            .filter(|(_, &i)| cols[i].drop > 0)
            .max_by_key(|(_, &i)| cols[i].drop)
            .map(|(pos, _)| pos);
        match victim {
            Some(pos) => {
                keep.remove(pos);
            }
            None => break,
        }
    }
    let mut spare = width.saturating_sub(need(&keep));
    let mut out: Vec<(usize, u16)> = keep
        .iter()
        .map(|&i| {
            let grow = natural[i].saturating_sub(base(i)).min(spare);
            spare -= grow;
            (i, base(i) + grow)
        })
        .collect();
    for (i, w) in &mut out {
        if cols[*i].flex {
            *w += spare;
        }
    }
    // The key columns alone are wider than the terminal: the flexible column gives up to
    // all but a few characters, then the widest sized column one at a time.
    let mut over = need(&keep).saturating_sub(width);
    const FLEX_MIN: u16 = 6;
    for (i, w) in &mut out {
        if over > 0 && cols[*i].flex {
            let give = w.saturating_sub(FLEX_MIN).min(over);
            *w -= give;
            over -= give;
        }
    }
    while over > 0 {
        let Some((_, w)) = out
            .iter_mut()
            .filter(|(i, w)| (cols[*i].cap > 0 || cols[*i].fit) && *w > 4)
            .max_by_key(|(_, w)| *w)
        else {
            break;
        };
        *w -= 1;
        over -= 1;
    }
    out
}

/// Below the Flows view: the flow table's health, or why there is no flow table. Each line
/// in the fullest wording that fits the width: a cut would hide the last counts (`lost`).
fn flow_panel(app: &App, width: u16) -> Vec<Line<'static>> {
    let b = &app.shown().flows;
    if !b.active {
        return vec![
            Line::from("Connections as the calls show them (L7 bytes only)."),
            Line::from(first_fitting(
                vec![
                    "No flow table in this source (flow programs unavailable, or an older \
                     recording)."
                        .to_owned(),
                    "No flow table in this source.".to_owned(),
                ],
                width,
            )),
        ];
    }
    let s = &b.stats;
    let mut lines = vec![
        Line::from(first_fitting(
            vec![
                format!(
                    "Kernel flow table: {} TCP of max {}, {} UDP; created {} ({} open before \
                     start), ended {}",
                    s.tcp_flows, s.max_flows, s.udp_flows, s.created, s.preexisting, s.ends
                ),
                format!(
                    "Flow table: {} TCP of {}, {} UDP; created {} ({} before start), ended {}",
                    s.tcp_flows, s.max_flows, s.udp_flows, s.created, s.preexisting, s.ends
                ),
                format!(
                    "Flows: {}/{} TCP, {} UDP; new {} ({} old), ended {}",
                    s.tcp_flows, s.max_flows, s.udp_flows, s.created, s.preexisting, s.ends
                ),
            ],
            width,
        )),
        Line::from(first_fitting(
            vec![
                format!(
                    "Not counted: table full {}, ends lost {}, stale {}, missed probe hits {} \
                     ({} closes recovered); rows evicted {}",
                    s.table_full,
                    s.ends_lost,
                    s.stale,
                    s.missed_events,
                    s.closes_recovered,
                    b.evicted
                ),
                format!(
                    "Not counted: full {}, ends lost {}, stale {}, missed {} ({} recovered); \
                     evicted {}",
                    s.table_full,
                    s.ends_lost,
                    s.stale,
                    s.missed_events,
                    s.closes_recovered,
                    b.evicted
                ),
                format!(
                    "Uncounted: full {}, lost {}, stale {}, missed {} ({} back), evicted {}",
                    s.table_full,
                    s.ends_lost,
                    s.stale,
                    s.missed_events,
                    s.closes_recovered,
                    b.evicted
                ),
            ],
            width,
        )),
    ];
    lines.extend(drop_lines(app, width));
    lines.extend(iface_lines(app, width));
    lines
}

/// The Flows view's Iface lines (`--iface`): one per interface that carried traffic in the
/// last interval, the busiest first.
const MAX_IFACE_LINES: usize = 2;

/// The interfaces with traffic in the last interval, the most bytes first: (name, ingress,
/// egress, unattributed packets).
fn iface_rows(app: &App) -> Vec<(String, [crate::flows::iface::IfaceCount; 2], u64)> {
    use crate::flows::iface::IfaceDir;
    let b = &app.shown().flows;
    let mut rows: Vec<(String, [crate::flows::iface::IfaceCount; 2], u64)> = Vec::new();
    for t in &b.iface {
        let i = match rows.iter().position(|r| r.0 == t.iface.as_str()) {
            Some(i) => i,
            None => {
                rows.push((t.iface.to_string(), Default::default(), 0));
                rows.len() - 1
            }
        };
        let d = usize::from(t.dir == IfaceDir::Egress);
        rows[i].1[d].add(&t.interval);
        rows[i].2 += t.unattributed.packets;
    }
    rows.sort_by_key(|r| std::cmp::Reverse(r.1[0].bytes + r.1[1].bytes));
    // Interfaces counted but idle in the interval come last (they are counted all the same).
    if let Some(st) = &b.stats.iface {
        for name in &st.attached {
            if !rows.iter().any(|r| r.0 == name.as_str()) {
                rows.push((name.to_string(), Default::default(), 0));
            }
        }
    }
    rows
}

fn iface_lines_shown(app: &App) -> u16 {
    if !app.shown().flows.active {
        return 0;
    }
    iface_rows(app).len().min(MAX_IFACE_LINES) as u16
}

/// `Iface veth1: in 12.1 MB/s 8.6k pkt/s, out 1.2 kB/s 20 pkt/s; top udp 10.0.0.2:5353 →
/// 10.0.0.1:53 in 11.9 MB/s`, for the busiest interfaces of the last interval.
fn iface_lines(app: &App, width: u16) -> Vec<Line<'static>> {
    use crate::flows::iface::IfaceDir;
    let b = &app.shown().flows;
    iface_rows(app)
        .into_iter()
        .take(MAX_IFACE_LINES)
        .map(|(name, [i, o], unattributed)| {
            if i.packets + o.packets + unattributed == 0 {
                return Line::from(first_fitting(vec![format!("Iface {name}: idle")], width));
            }
            let head = format!(
                "Iface {name}: in {}B/s {} pkt/s, out {}B/s {} pkt/s",
                human_rate(b.per_s(i.bytes)),
                human_rate(b.per_s(i.packets)),
                human_rate(b.per_s(o.bytes)),
                human_rate(b.per_s(o.packets)),
            );
            let head = if unattributed > 0 {
                format!(
                    "{head} ({} pkt/s without 5-tuple: table full)",
                    human_rate(b.per_s(unattributed))
                )
            } else {
                head
            };
            let top = b
                .iface_top
                .iter()
                .find(|f| f.iface == name.as_str())
                .map(|f| {
                    let end = |a: Option<std::net::IpAddr>, p: Option<u16>| match (a, p) {
                        (Some(a), Some(p)) => std::net::SocketAddr::new(a, p).to_string(),
                        (Some(a), None) => a.to_string(),
                        _ => "-".to_owned(),
                    };
                    format!(
                        "; top {} {} → {} {} {}B/s",
                        f.proto,
                        end(f.src, f.sport),
                        end(f.dst, f.dport),
                        if f.dir == IfaceDir::Ingress {
                            "in"
                        } else {
                            "out"
                        },
                        human_rate(b.per_s(f.count.bytes))
                    )
                });
            let full = format!("{head}{}", top.unwrap_or_default());
            Line::from(first_fitting(vec![full, head], width))
        })
        .collect()
}

/// The Flows view's Drops lines: one per {interface, reason} that dropped packets in the
/// last interval, the most first.
const MAX_DROP_LINES: usize = 3;

fn drop_lines_shown(app: &App) -> u16 {
    let b = &app.shown().flows;
    if !b.active {
        return 0;
    }
    let n = b.drops.iter().filter(|d| d.interval_packets > 0).count();
    n.min(MAX_DROP_LINES) as u16
}

/// `Drops NO_SOCKET at lo: 30.6k/s (skipped 12 more) → curl/123 #7 2.1k/s, …`, for the top
/// reasons of the last interval, with the flows they hit.
fn drop_lines(app: &App, width: u16) -> Vec<Line<'static>> {
    let b = &app.shown().flows;
    let hit = b.drops.iter().filter(|d| d.interval_packets > 0);
    hit.take(MAX_DROP_LINES)
        .map(|d| {
            let at = match (&d.iface, d.ifindex) {
                (Some(name), _) => name.to_string(),
                (None, Some(i)) => format!("if{i} netns {}", d.netns.unwrap_or(0)),
                (None, None) => "no device".to_owned(),
            };
            let head = format!(
                "Drops {} at {at}: {}/s",
                d.reason,
                human_rate(b.per_s(d.interval_packets))
            );
            let flows: Vec<String> = d
                .flows
                .iter()
                .map(|h| {
                    let who = match (&h.comm, h.pid) {
                        (Some(c), Some(p)) => proc_label(c, p),
                        (None, Some(p)) => format!("?/{p}"),
                        _ => "?".to_owned(),
                    };
                    format!(
                        "{who} {} #{} {}/s",
                        h.proto,
                        h.flow_id,
                        human_rate(b.per_s(h.packets))
                    )
                })
                .collect();
            let full = if flows.is_empty() {
                format!("{head}, no flow of the table")
            } else {
                format!("{head} → {}", flows.join(", "))
            };
            Line::from(first_fitting(vec![full, head], width))
        })
        .collect()
}

/// The first of `titles` (fullest first) that fits in `width`, else the last.
fn first_fitting(titles: Vec<String>, width: u16) -> String {
    let fits = |t: &String| t.chars().count() <= usize::from(width);
    match titles.iter().position(fits) {
        Some(i) => titles[i].clone(),
        None => titles.last().cloned().unwrap_or_default(),
    }
}

/// The view's title line; the hints and legends go first where the width is short, so that
/// a cut never hides the counts or a state (nor shortens a number).
fn view_title(app: &App, rows: &[super::table::SharedRow], width: u16) -> String {
    let d = app.shown();
    let shown = rows.len();
    match app.view {
        View::Calls => {
            let state = match app.calls_follow(rows) {
                Some(super::app::Following::Held { newer }) => {
                    format!("[HELD, {newer} newer: g follows]")
                }
                _ => "[FOLLOW]".to_owned(),
            };
            let legend = format!("  ! 5xx  ? 4xx  * slow (>= {} ms)", SLOW_NS / 1_000_000);
            let title = |back: bool, legend: &str| {
                let what = match &app.drill {
                    Some(dr) if back => format!("Calls of {} (Backspace: back)", dr.label()),
                    Some(dr) => format!("Calls of {}", dr.label()),
                    None => "Calls".to_owned(),
                };
                // With a filter the pipeline applies, what is kept is the matching calls.
                let matching = if app.applied_filter.is_empty() && app.fixed_filter.is_none() {
                    ""
                } else {
                    " matching"
                };
                format!(
                    "{what} {state}: {shown} of the last {}{matching}{legend}",
                    d.calls.len()
                )
            };
            first_fitting(
                vec![title(true, &legend), title(true, ""), title(false, "")],
                width,
            )
        }
        View::Endpoints => {
            use super::app::EndpointWindow;
            let period = match (app.window, &d.report) {
                (_, None) => "no interval yet".to_owned(),
                (EndpointWindow::Interval, Some(r)) => {
                    format!("last interval ({:.2}s)", r.period_ns as f64 / 1e9)
                }
                (w, Some(_)) => w.label().to_owned(),
            };
            // The pipeline's count of keys whose too-varied segments became `{…}` (since the
            // start), so a `{…}` row says how many endpoints it stands for.
            let table = d
                .ended
                .as_deref()
                .or(d.report.as_ref().map(|r| &r.totals))
                .map(|t| t.endpoint_table);
            let folded = match table.map_or(0, |t| t.segment_folded_keys_approx) {
                0 => String::new(),
                n => format!(", ~{n} keys folded to {}", crate::aggregate::fold::FOLD),
            };
            let by = if app.shows_endpoints_by_process() {
                "by process"
            } else {
                "by command"
            };
            first_fitting(
                vec![
                    format!(
                        "Endpoints, {period}, {by}: {shown}{folded}  (c: 10 s / 1 min / since \
                         start / interval, b: by process/command, Enter: calls)"
                    ),
                    format!(
                        "Endpoints, {period}, {by}: {shown}{folded}  (c: window, b: group, \
                         Enter: calls)"
                    ),
                    format!("Endpoints, {period}, {by}: {shown}{folded}"),
                ],
                width,
            )
        }
        View::Flows if d.flows.active => {
            // The flows shown: with a filter, the numbers are the matching flows' too.
            let (open, ended, rate_in, rate_out) = rows
                .iter()
                .filter_map(|r| d.flows.flows.get(r.key.as_str()))
                .fold((0, 0, 0.0, 0.0), |(o, e, i, out), f| {
                    let ended = usize::from(f.ended_ns.is_some());
                    (o + 1 - ended, e + ended, i + f.in_per_s, out + f.out_per_s)
                });
            let period = d.report.as_ref().map_or(0.0, |r| r.period_ns as f64 / 1e9);
            let (rate_in, rate_out) = (human(rate_in.round()), human(rate_out.round()));
            // The words go before the numbers where the width is short.
            first_fitting(
                vec![
                    format!(
                        "Flows, rates over the last interval ({period:.2}s): {shown} shown, \
                         {open} open, {ended} ended, in {rate_in} B/s, out {rate_out} B/s  \
                         ! retransmit/reset"
                    ),
                    format!(
                        "Flows, last {period:.2}s: {shown} shown, {open} open, {ended} ended, \
                         in {rate_in} B/s, out {rate_out} B/s"
                    ),
                    format!(
                        "Flows ({period:.2}s): {shown}, {open} open, {ended} ended, \
                         in {rate_in}/s out {rate_out}/s"
                    ),
                ],
                width,
            )
        }
        View::Flows => format!("Connections seen in calls (no flow table in this source): {shown}"),
        View::Processes => {
            let how = match (app.procs_by_command, app.procs_tree) {
                (true, _) => ", by command",
                (false, true) => ", tree",
                (false, false) => "",
            };
            match &d.report {
                Some(r) => {
                    let period = r.period_ns as f64 / 1e9;
                    let source = if d.flow_bytes_by_pid.is_some() {
                        "all flows, from the flow table"
                    } else {
                        "traced connections"
                    };
                    first_fitting(
                        vec![
                            format!(
                                "Processes, last interval ({period:.2}s){how}: {shown}  \
                                 IN/OUT: socket bytes ({source})  (b: by command/pid, F5: tree)"
                            ),
                            format!(
                                "Processes, last interval ({period:.2}s){how}: {shown}  \
                                 IN/OUT: socket bytes ({source})"
                            ),
                            format!("Processes ({period:.2}s){how}: {shown}"),
                        ],
                        width,
                    )
                }
                None => format!("Processes{how}: no interval yet"),
            }
        }
    }
}

fn draw_table(f: &mut Frame, app: &App, area: Rect) {
    let rows = app.rows();
    let sel = app.selected_index(&rows);
    *app.drawn_selection.borrow_mut() = sel.map(|i| (app.view, rows[i].key.clone()));
    let [title, table] = Layout::vertical([Constraint::Length(1), Constraint::Min(1)]).areas(area);
    f.render_widget(
        Paragraph::new(Line::from(view_title(app, &rows, area.width))),
        title,
    );
    let cols = app.columns();
    let st = app.view_state();
    let height = table.height.saturating_sub(1) as usize;
    app.table_height.set(height);
    // The selected row stays on the line it was on (`ViewState::line`): rows arriving above
    // a held row move nothing on screen, even where the list then ends above the screen's
    // bottom; the line moves only with the selection keys (and no further up than the row).
    let offset = match sel {
        Some(i) if height > 0 => {
            let line = st.line.get().min(height - 1).min(i);
            st.line.set(line);
            i - line
        }
        _ => 0,
    };
    let visible = &rows[offset.min(rows.len())..(offset + height).min(rows.len())];
    let fitted = fit_columns(cols, visible, area.width);
    // Left/Right scroll the flexible column's text (a long resource or command line); how far
    // it can go is what its longest visible cell has beyond its width.
    let hscroll_max = fitted
        .iter()
        .find(|&&(i, _)| cols[i].flex)
        .map_or(0, |&(i, w)| {
            visible
                .iter()
                .filter_map(|r| r.cells.get(i))
                .map(|s| s.chars().count().saturating_sub(usize::from(w)))
                .max()
                .unwrap_or(0)
        });
    app.hscroll_max.set(hscroll_max);
    let hscroll = st.hscroll.min(hscroll_max);
    let head_style = style(
        app,
        Style::new().add_modifier(Modifier::BOLD | Modifier::UNDERLINED),
    );
    let mut head = vec![Cell::from("")];
    for &(i, _) in &fitted {
        let mut t = cols[i].title.to_owned();
        if i == st.sort_col {
            t.push(if st.ascending { '↑' } else { '↓' });
        }
        if cols[i].flex && hscroll > 0 {
            // Where the scrolled text starts, so a cut start is not taken for the value.
            t.push_str(&format!(" +{hscroll}"));
        }
        head.push(align(t, cols[i].right));
    }
    let mut out = Vec::new();
    for (n, r) in rows.iter().enumerate().skip(offset).take(height) {
        let selected = sel == Some(n);
        let marker = format!("{}{}", if selected { '>' } else { ' ' }, r.flag.marker());
        let mut cells = vec![Cell::from(marker)];
        for &(i, w) in &fitted {
            let cell = r.cells.get(i).map_or("", String::as_str);
            let text = if cols[i].flex && hscroll > 0 {
                fit_text(&cell.chars().skip(hscroll).collect::<String>(), w)
            } else {
                fit_text(cell, w)
            };
            cells.push(align(text, cols[i].right));
        }
        let mut s = match r.flag {
            Flag::Error => Style::new().fg(Color::Red),
            Flag::ClientError => Style::new().fg(Color::Magenta),
            Flag::Slow => Style::new().fg(Color::Yellow),
            Flag::None => Style::new(),
        };
        if selected {
            s = s.add_modifier(Modifier::REVERSED);
        }
        out.push(TRow::new(cells).style(style(app, s)));
    }
    let mut widths = vec![Constraint::Length(2)];
    widths.extend(fitted.iter().map(|&(_, w)| Constraint::Length(w)));
    let empty = rows.is_empty();
    f.render_widget(
        Table::new(out, widths)
            .header(TRow::new(head).style(head_style))
            .column_spacing(1),
        table,
    );
    if empty && table.height > 1 {
        let msg = if !st.filter.is_empty() {
            "no rows match the filter".to_owned()
        } else {
            match app.view {
                View::Calls if app.drill.is_none() => no_calls_reason(app),
                View::Calls => "no calls yet".to_owned(),
                View::Endpoints | View::Processes if app.shown().report.is_none() => {
                    "waiting for the first interval".to_owned()
                }
                _ => "nothing to show yet".to_owned(),
            }
        };
        // The reason may take a few lines on a narrow screen.
        let r = Rect {
            y: table.y + 1,
            height: (table.height - 1).min(3),
            ..table
        };
        f.render_widget(
            Paragraph::new(format!("  {msg}")).wrap(ratatui::widgets::Wrap { trim: false }),
            r,
        );
    }
}

/// `s` cut to `w` characters, ending in `~` when cut (so a cut is visible).
fn fit_text(s: &str, w: u16) -> String {
    let w = w as usize;
    if s.chars().count() <= w {
        return s.to_owned();
    }
    let mut out: String = s.chars().take(w.saturating_sub(1)).collect();
    out.push('~');
    out
}

fn align(s: String, right: bool) -> Cell<'static> {
    let line = Line::from(s);
    Cell::from(if right {
        line.alignment(Alignment::Right)
    } else {
        line
    })
}

/// An endpoint per line: side, method, resource, rate and p99 (`none` without any).
fn endpoint_lines(eps: &[&crate::aggregate::EndpointSnapshot]) -> Vec<String> {
    if eps.is_empty() {
        return vec!["  none".to_owned()];
    }
    // Resources as wide as the longest listed (up to 40), so the lines fit at 80 columns.
    let res_w = eps
        .iter()
        .map(|e| e.resource.chars().count())
        .max()
        .unwrap_or(0)
        .min(40);
    eps.iter()
        .map(|e| {
            format!(
                "  {:<6} {:<6} {:<res_w$} {:>8}/s  p99 {} ms",
                e.side.name(),
                e.method,
                e.resource,
                human_rate(e.calls_per_s),
                super::table::ms(e.latency_p99_ns)
            )
        })
        .collect()
}

/// The processes of a command name (the Processes view grouped by command): which they are,
/// their calls, and the name's endpoints.
fn command_detail_lines(app: &App, comm: &str) -> Vec<Line<'static>> {
    let d = app.shown();
    let procs: Vec<&crate::aggregate::ProcessSnapshot> = d
        .report
        .as_ref()
        .map(|r| r.processes.iter().filter(|p| p.comm == comm).collect())
        .unwrap_or_default();
    if procs.is_empty() {
        return vec![Line::from(format!(
            "No process named {comm} is in the last interval."
        ))];
    }
    let pids: Vec<String> = procs.iter().map(|p| p.pid.to_string()).collect();
    let calls: u64 = procs.iter().map(|p| p.calls).sum();
    let (serr, cerr) = procs.iter().fold((0, 0), |(s, c), p| {
        (s + p.server_errors, c + p.client_errors)
    });
    let mut v = vec![
        format!("Command {comm}: {} processes", procs.len()),
        format!("Pids       {}", pids.join(" ")),
        format!(
            "Calls      {}  server errors {}  client errors {}",
            human(calls as f64),
            human(serr as f64),
            human(cerr as f64)
        ),
        format!("Endpoints of {comm} ({}):", app.window.label()),
    ];
    let eps: Vec<&crate::aggregate::EndpointSnapshot> = app
        .window
        .rows(d, false)
        .iter()
        .filter(|e| e.comm == comm)
        .collect();
    v.extend(endpoint_lines(&eps));
    v.into_iter().map(Line::from).collect()
}

/// A process: who it is (command line, executable), its numbers of the last interval, its
/// endpoints (by its name, as endpoints are keyed) and its flows.
fn process_detail_lines(app: &App, key: &str) -> Vec<Line<'static>> {
    let d = app.shown();
    if let Some(comm) = key.strip_prefix(super::table::COMMAND_KEY_PREFIX) {
        return command_detail_lines(app, comm);
    }
    let Some(p) = d.report.as_ref().and_then(|r| {
        let pid = super::table::pid_of_process_key(key)?;
        r.processes.iter().find(|p| p.pid == pid)
    }) else {
        return vec![Line::from("This process is not in the last interval.")];
    };
    let info = d.procs.get(&p.pid);
    let mut v = vec![
        format!("Process {}  {}", p.pid, p.comm),
        format!(
            "Command    {}",
            info.map_or("(not known)".to_owned(), |i| i.cmdline.join(" "))
        ),
        format!(
            "Executable {}",
            info.and_then(|i| i.exe.clone())
                .unwrap_or_else(|| "(not known)".to_owned())
        ),
        format!(
            "Cgroup     {}{}",
            info.and_then(|i| i.cgroup.clone())
                .unwrap_or_else(|| "(not known)".to_owned()),
            info.map_or(String::new(), cgroup_owner)
        ),
        format!(
            "CPU        {}   RSS {}",
            p.cpu_pct.map_or("n/a".to_owned(), |c| format!("{c:.1}%")),
            p.rss_bytes.map_or("n/a".to_owned(), |b| format!(
                "{:.1} MiB",
                b as f64 / 1048576.0
            ))
        ),
        format!(
            "Calls      {} ({}/s)  server errors {}  client errors {}",
            human(p.calls as f64),
            human_rate(p.calls_per_s),
            human(p.server_errors as f64),
            human(p.client_errors as f64)
        ),
        format!(
            "Sockets    in {}  out {} (traced connections)  open connections {}",
            bytes(p.socket_bytes_in),
            bytes(p.socket_bytes_out),
            p.open_connections.unwrap_or(p.connections_active)
        ),
    ];
    // Its own endpoints where the pipeline split them by process; else its name's.
    let eps: Vec<&crate::aggregate::EndpointSnapshot> = match d.windows.by_process {
        Some(_) => {
            v.push(format!(
                "Endpoints of this process ({}):",
                app.window.label()
            ));
            app.window
                .rows(d, true)
                .iter()
                .filter(|e| e.pid == Some(p.pid))
                .collect()
        }
        None => {
            v.push(format!(
                "Endpoints of {} (all its processes, {}):",
                p.comm,
                app.window.label()
            ));
            app.window
                .rows(d, false)
                .iter()
                .filter(|e| e.comm == p.comm)
                .collect()
        }
    };
    v.extend(endpoint_lines(&eps));
    v.push("Flows:".to_owned());
    let mut flows: Vec<_> = d
        .flows
        .flows
        .values()
        .filter(|f| f.pid == Some(p.pid))
        .collect();
    flows.sort_by_key(|f| f.start_mono_ns);
    if flows.is_empty() {
        v.push(if d.flows.active {
            "  none".to_owned()
        } else {
            "  (no flow table in this source)".to_owned()
        });
    }
    for f in flows {
        v.push(format!(
            "  {} {} -> {}  in {}  out {}  {}",
            if f.tcp { "tcp" } else { "udp" },
            f.local,
            f.peer.map_or("*".to_owned(), |a| a.to_string()),
            bytes(f.bytes_in),
            bytes(f.bytes_out),
            f.state
        ));
    }
    v.into_iter().map(Line::from).collect()
}

/// A flow: everything the flow table said of it last.
fn flow_detail_lines(app: &App, key: &str) -> Vec<Line<'static>> {
    let d = app.shown();
    let Some(row) = d.flows.flows.get(key) else {
        return vec![Line::from(
            "This flow is no longer shown (or this source has no flow table).",
        )];
    };
    let mut v = vec![
        format!(
            "Flow {}  {} {} -> {}",
            row.id,
            if row.tcp { "TCP" } else { "UDP" },
            row.local,
            row.peer.map_or("*".to_owned(), |a| a.to_string())
        ),
        format!(
            "Process    {}",
            match (&row.comm, row.pid) {
                (Some(c), Some(p)) => proc_label(c, p),
                _ => "?".to_owned(),
            }
        ),
        format!(
            "Started    {}",
            date_time_named(d.meta.as_ref(), &app.zone, row.start_mono_ns)
        ),
        format!(
            "Bytes      in {}  out {}",
            bytes(row.bytes_in),
            bytes(row.bytes_out)
        ),
    ];
    if let Some(f) = &row.last {
        let opt = |o: Option<String>| o.unwrap_or_else(|| "-".to_owned());
        v.extend([
            format!(
                "Role       {}{}{}",
                f.role.map_or("unknown", |r| r.as_str()),
                if f.role_inferred { " (inferred)" } else { "" },
                if f.preexisting {
                    ", open before ebtop started"
                } else {
                    ""
                }
            ),
            format!("State      {}", row.state),
            format!(
                "Segments   out {} (data {})  in {} (data {})",
                human(f.segs_out as f64),
                human(f.data_segs_out as f64),
                human(f.segs_in as f64),
                human(f.data_segs_in as f64)
            ),
            format!(
                "Retransmits {} segments, {} ({} seen by ebtop)",
                human(f.retrans_segs as f64),
                bytes(f.retrans_bytes),
                f.retrans_events
            ),
            format!(
                "Resets     sent {}  received {}",
                f.rst_sent, f.rst_received
            ),
            match &f.drops {
                Some(d) => format!(
                    "Drops      in {}  out {}{}",
                    human(d.packets_in as f64),
                    human(d.packets_out as f64),
                    if d.by_reason.is_empty() {
                        String::new()
                    } else {
                        let reasons: Vec<String> = d
                            .by_reason
                            .iter()
                            .map(|(r, n)| format!("{r} {n}"))
                            .collect();
                        format!(" ({})", reasons.join(", "))
                    }
                ),
                None => "Drops      not counted".to_owned(),
            },
            format!(
                "SRTT       {} (interval {} .. {})",
                opt(f.srtt_us.map(|u| format!("{:.2} ms", f64::from(u) / 1e3))),
                opt(f.srtt_min_us.map(|u| format!("{:.2}", f64::from(u) / 1e3))),
                opt(f
                    .srtt_max_us
                    .map(|u| format!("{:.2} ms", f64::from(u) / 1e3)))
            ),
            format!(
                "Connect    {}",
                opt(f
                    .connect_latency_ns
                    .map(|n| format!("{:.3} ms (SYN to ESTABLISHED)", n as f64 / 1e6)))
            ),
            format!(
                "Closed     {}{}",
                opt(f.close_reason.map(|r| r.to_string())),
                match (&f.close_state, f.sk_err) {
                    (Some(s), Some(e)) => format!(" from {s}, socket error {e}"),
                    (Some(s), None) => format!(" from {s}"),
                    _ => String::new(),
                }
            ),
        ]);
    }
    v.into_iter().map(Line::from).collect()
}

/// 512 ns, 64 µs, 2.1 ms, 1.07 s: a bin's bound in its own unit.
fn short_duration(ns: u64) -> String {
    match ns {
        0..=999 => format!("{ns} ns"),
        1_000..=999_999 => format!("{:.0} µs", ns as f64 / 1e3),
        1_000_000..=999_999_999 => format!("{:.1} ms", ns as f64 / 1e6),
        _ => format!("{:.2} s", ns as f64 / 1e9),
    }
}

/// The drilled-into endpoint in pictures: rate, p99, server and client errors over the last
/// intervals, where its time goes downstream (the chains of the calls kept: self time, the
/// endpoints its calls called — share of its time, calls per call, mean duration), and its
/// latency distribution since the start.
fn endpoint_panel(
    app: &App,
    downstream: Option<&super::app::Downstream>,
    width: u16,
    height: u16,
) -> Vec<Line<'static>> {
    let Some(dr) = &app.drill else {
        return Vec::new();
    };
    let mut lines = Vec::new();
    if let Some(h) = app.shown().endpoint_history.get(&dr.endpoint_key()) {
        // Two series a line, each as many of the newest intervals as fit (the history holds
        // `RATE_HISTORY`); the title says how many are drawn, not "the session".
        let n = h
            .len()
            .min((usize::from(width).saturating_sub(46) / 2).max(1));
        let series = |i: usize| h.iter().skip(h.len() - n).map(move |v| v[i]);
        let max = |i: usize| series(i).fold(0.0f64, f64::max);
        let cell = |label: &str, i: usize, most: String| {
            let spark = super::table::sparkline(series(i));
            format!("{label:<7} {spark:<n$} max {most:<8}")
        };
        let pct = |v: f64| format!("{:.1}", v * 100.0);
        lines.push(Line::from(format!(
            "Last {n} interval{}, oldest to newest:",
            if n == 1 { "" } else { "s" }
        )));
        lines.push(Line::from(format!(
            "  {}  {}",
            cell("calls/s", 0, human_rate(max(0))),
            cell("p99 ms", 1, super::table::ms(max(1) as u64))
        )));
        lines.push(Line::from(format!(
            "  {}  {}",
            cell("5xx %", 2, pct(max(2))),
            cell("4xx %", 3, pct(max(3)))
        )));
    }
    // Where its time goes: self time, and the downstream endpoints that took most.
    if let Some(ds) = downstream {
        let pct = |ns: u64| ns as f64 * 100.0 / ds.time_ns.max(1) as f64;
        lines.push(Line::from(format!(
            "Time of its {} call{} kept with calls downstream ({} in all): self {:.0}%",
            ds.calls_with_children,
            if ds.calls_with_children == 1 { "" } else { "s" },
            ds.calls,
            pct(ds.self_ns)
        )));
        let shown = ds.rows.len().min(3);
        for r in &ds.rows[..shown] {
            lines.push(Line::from(format!(
                "  {:>5.1}%  {:>6.2} per call  {:>9}  {}",
                pct(r.time_ns),
                r.calls as f64 / ds.calls.max(1) as f64,
                format!("{:.3} ms", r.time_ns as f64 / 1e6 / r.calls.max(1) as f64),
                r.endpoint
            )));
        }
        if ds.rows.len() > shown {
            lines.push(Line::from(format!(
                "  … {} more downstream endpoints",
                ds.rows.len() - shown
            )));
        }
    }
    let Some(bins) = app.drill_latency_bins() else {
        if dr.other {
            lines.push(Line::from(
                "Latency distribution: not kept for folded endpoints ({other})",
            ));
        }
        return lines;
    };
    // The bins fit the panel: neighbours merged until they do.
    let rows = usize::from(height).saturating_sub(lines.len() + 1).max(1);
    let per = bins.len().div_ceil(rows);
    let merged: Vec<(u64, u64, u64)> = bins
        .chunks(per)
        .map(|c| (c[0].0, c[c.len() - 1].1, c.iter().map(|b| b.2).sum()))
        .collect();
    let total: u64 = merged.iter().map(|b| b.2).sum();
    let most = merged.iter().map(|b| b.2).max().unwrap_or(0).max(1);
    lines.push(Line::from(format!(
        "Latency since the start ({total} call{}):",
        if total == 1 { "" } else { "s" }
    )));
    for (lo, hi, n) in merged {
        let bar = "█".repeat(((n * 40).div_ceil(most)) as usize * usize::from(n > 0));
        lines.push(Line::from(format!(
            "  {:>8} – {:>8} {bar:<40} {n}",
            short_duration(lo),
            short_duration(hi)
        )));
    }
    lines
}

fn draw_overhead(f: &mut Frame, app: &App, area: Rect) {
    let d = app.shown();
    let line = match d.report.as_ref().map(|r| &r.overhead) {
        None if d.meta.as_ref().is_some_and(|m| m.source == "replay") => "n/a (replay)".to_owned(),
        None => "waiting for the first interval".to_owned(),
        Some(None) => "n/a (replay)".to_owned(),
        Some(Some(o)) => {
            let opt = |v: Option<f64>, unit: &str| {
                v.map_or("n/a".to_owned(), |v| format!("{v:.1}{unit}"))
            };
            let bpf_cpu = match (o.bpf_cpu_pct, &o.bpf_stats_error) {
                (Some(v), _) => format!("{v:.2}%"),
                (None, Some(_)) => "n/a (no BPF stats)".to_owned(),
                (None, None) => "n/a".to_owned(),
            };
            // With TLS probes: the files probed, and whether the installed programs were all
            // looked at (until then ebtop is still busy starting).
            let tls = match (o.tls_files_probed, o.tls_installed_scanned) {
                (Some(n), Some(true)) => format!("  TLS: {n} files probed"),
                (Some(n), _) => format!("  TLS: {n} files probed, scanning programs"),
                (None, _) => String::new(),
            };
            // With --plugin: each plugin's cost per call, or that it was disabled.
            let plugins: String = o
                .plugins
                .iter()
                .map(|p| match (p.disabled, p.ns_per_call) {
                    (true, _) => format!("  plugin {}: DISABLED", p.name),
                    (false, Some(ns)) => format!("  plugin {}: {ns:.0} ns/call", p.name),
                    (false, None) => format!("  plugin {}: no calls", p.name),
                })
                .collect();
            // With a budget: it, and whether the interval went over it with nothing captured
            // (the hooks' own cost at this load: sampling can go no lower).
            let budget = match (o.max_cpu_pct, o.over_budget_at_floor) {
                (Some(b), Some(true)) => format!(" (budget {b:.0}%: over with nothing captured)"),
                (Some(b), _) => format!(" (budget {b:.0}%)"),
                (None, _) => String::new(),
            };
            format!(
                "BPF {} ns/run  BPF CPU {}  ebtop CPU {}{budget}  RSS {} MiB  events {}/s  lost {}{tls}{plugins}",
                o.bpf_ns_per_run
                    .map_or("n/a".to_owned(), |v| format!("{v:.0}")),
                bpf_cpu,
                opt(o.ebtop_cpu_pct, "%"),
                opt(o.rss_bytes.map(|b| b as f64 / 1048576.0), ""),
                human(o.ring_events_per_s.round()),
                o.ring_lost
            )
        }
    };
    f.render_widget(
        Paragraph::new(vec![
            Line::from(vec![
                Span::styled(
                    "ebtop's own overhead",
                    style(app, Style::new().add_modifier(Modifier::BOLD)),
                ),
                Span::raw(match d.meta.as_ref().map(|m| &m.loaded) {
                    Some(l) if !l.is_empty() => format!("  (loaded: {})", l.join(", ")),
                    _ => String::new(),
                }),
            ]),
            Line::from(line),
        ]),
        area,
    );
}

/// Rows the prompt line may take: a refused filter names the view's fields, more than 80
/// columns hold.
const PROMPT_ROWS_MAX: usize = 3;

/// The bottom line: the keys' hint, or what is being typed.
fn hint_text(app: &App) -> String {
    if let Some(text) = &app.command {
        let options = app.command_completions(text);
        if text.is_empty() || options.is_empty() {
            format!(
                ":{text}_   (calls, endpoints, flows, procs, filter EXPR, sort COLUMN, goto 14:32 | +30s, start, end, quit; Tab: complete, Esc: cancel)"
            )
        } else {
            format!(":{text}_   {}   (Tab: complete)", options.join("  "))
        }
    } else if let Some(e) = &app.command_error {
        e.clone()
    } else if app.profile.open && !app.help {
        if app.profile.searching {
            format!(
                "/{}_   (frames holding it; Enter: keep, Esc: clear)",
                app.profile.search
            )
        } else {
            "Enter/→/← open/close  o on/off-CPU  w one process/all  / search  Esc/q back".to_owned()
        }
    } else if app.prompt {
        // While typing, the reason a filter is refused shows here too: the header's end is
        // cut on a narrow terminal.
        match app.filter_error() {
            Some(e) => format!("/{}_  {e}", app.view_state().filter),
            None => format!(
                "/{}_   (Enter: keep, Esc: clear, Ctrl-U: erase)",
                app.view_state().filter
            ),
        }
    } else if app.sort_menu.is_some() {
        "Sort by: Up/Down/j/k move  Enter: sort by it  Esc/F6: cancel".to_owned()
    } else if app.search_prompt {
        // Here, not only in the header, whose end a narrow terminal cuts.
        format!(
            "F3 search: {}_   (Enter/F3: next match, Esc: done)",
            app.last_search.as_deref().unwrap_or("")
        )
    } else if app.detail.is_some() {
        let back = match app.detail_back.len() {
            0 => "Esc/Backspace: back".to_owned(),
            n => format!("Esc/Backspace: back to the call before ({n})"),
        };
        let targets = app.chain_targets();
        if app.chain_pick.is_some_and(|i| i < targets.len()) {
            format!("Enter: follow the call marked ▶  Tab: next  {back}  q: quit")
        } else if targets.is_empty() {
            format!("{back}  Enter: close  q: quit")
        } else {
            format!("Tab: pick the parent or a child  {back}  Enter: close  q: quit")
        }
    } else {
        FOOTER.to_owned()
    }
}

/// The bottom rows: one for the hint; a filter or search being typed wraps at spaces onto up
/// to [`PROMPT_ROWS_MAX`] rows (the last cut with `…`), so the fields a refused filter names
/// are all in sight.
fn hint_lines(app: &App, width: u16) -> Vec<String> {
    let text = hint_text(app);
    if !(app.prompt || app.search_prompt || app.command.is_some()) {
        return vec![text];
    }
    let width = usize::from(width).max(1);
    let mut lines = wrap_at_spaces(&text, width);
    if lines.len() > PROMPT_ROWS_MAX {
        lines.truncate(PROMPT_ROWS_MAX);
        if let Some(last) = lines.last_mut() {
            *last = last.chars().take(width - 1).collect::<String>() + "…";
        }
    }
    lines
}

/// `text` in lines of at most `width` characters, broken at spaces (the spaces at a break
/// dropped); a word longer than a line is cut where the line ends.
fn wrap_at_spaces(text: &str, width: usize) -> Vec<String> {
    let width = width.max(1);
    let mut lines = vec![String::new()];
    let mut rest = text;
    while !rest.is_empty() {
        // The next word with the spaces before it.
        let word_at = rest.len() - rest.trim_start_matches(' ').len();
        let end = rest[word_at..]
            .find(' ')
            .map_or(rest.len(), |i| word_at + i);
        let (token, tail) = rest.split_at(end);
        rest = tail;
        let line = lines.last_mut().expect("lines starts with one");
        if line.chars().count() + token.chars().count() <= width {
            line.push_str(token);
            continue;
        }
        let mut word = &token[word_at..];
        if word.is_empty() {
            continue;
        }
        if !line.is_empty() {
            lines.push(String::new());
        }
        while word.chars().count() > width {
            let cut = word
                .char_indices()
                .nth(width)
                .map_or(word.len(), |(i, _)| i);
            lines.last_mut().expect("a line").push_str(&word[..cut]);
            lines.push(String::new());
            word = &word[cut..];
        }
        lines.last_mut().expect("a line").push_str(word);
    }
    lines
}

fn draw_hint(f: &mut Frame, app: &App, area: Rect) {
    let lines: Vec<Line> = hint_lines(app, area.width)
        .into_iter()
        .map(Line::from)
        .collect();
    f.render_widget(
        Paragraph::new(lines).style(style(app, Style::new().add_modifier(Modifier::REVERSED))),
        area,
    );
}

fn popup(area: Rect, w: u16, h: u16) -> Rect {
    let w = w.min(area.width);
    let h = h.min(area.height);
    Rect {
        x: area.x + (area.width - w) / 2,
        y: area.y + (area.height - h) / 2,
        width: w,
        height: h,
    }
}

fn draw_help(f: &mut Frame, app: &App, area: Rect) {
    let mut lines = Vec::new();
    for k in KEYS {
        lines.push(Line::from(format!("{:<22} {}", k.keys.join(" "), k.action)));
    }
    // The blank line before the legend only where the terminal has a row for it (80×24 has
    // none).
    if lines.len() + 5 <= usize::from(area.height) {
        lines.push(Line::from(""));
    }
    lines.push(Line::from(format!(
        "Marks: > selected  ! server error  ? client error  * slow (>= {} ms)",
        SLOW_NS / 1_000_000
    )));
    lines.push(Line::from(
        "SERR/CERR: server (5xx, error replies) / client errors (4xx)",
    ));
    let r = popup(area, 90, lines.len() as u16 + 2);
    f.render_widget(Clear, r);
    f.render_widget(
        Paragraph::new(lines).block(
            Block::default()
                .borders(Borders::ALL)
                .title(" Keys (any key closes) ")
                .style(style(app, Style::new())),
        ),
        r,
    );
}

fn call_detail_lines(app: &App, c: &Call, seq: u64) -> Vec<Line<'static>> {
    let meta = app.shown().meta.as_ref();
    let l7 = &c.l7;
    let base = l7.req.first_start_ns;
    let rel = |t: u64| format!("{:+.3} ms", (t as f64 - base as f64) / 1e6);
    // First and last syscall of a message, relative to the first request syscall.
    let span_line = |label: &str, m: &crate::protocols::MessageSpan| {
        format!(
            "  {label} first {} .. {}   last {} .. {}",
            rel(m.first_start_ns),
            rel(m.first_end_ns),
            rel(m.last_start_ns),
            rel(m.last_end_ns)
        )
    };
    let mut v = vec![
        format!(
            "Call #{seq}  {} (tid {})  {}",
            proc_label(&c.comm, c.pid),
            c.tid,
            c.side.name()
        ),
        format!(
            "Request    {} {}  {}/{}{}",
            l7.method,
            l7.resource,
            l7.proto.name(),
            l7.version,
            if c.tls {
                "  over TLS (plaintext from the TLS library)"
            } else {
                ""
            }
        ),
        format!(
            "Status     {}  ({})",
            super::table::status_text(l7),
            match l7.outcome {
                crate::protocols::Outcome::Ok => "ok",
                crate::protocols::Outcome::ClientError => "client error",
                crate::protocols::Outcome::ServerError => "server error",
                crate::protocols::Outcome::Unknown => "unknown: not decodable",
            }
        ),
        format!(
            "Latency    {:.3} ms   started {}",
            c.latency_ns as f64 / 1e6,
            date_time_named(meta, &app.zone, c.start_ns)
        ),
        format!(
            "Connection {} -> {}  (socket {})",
            c.local, c.peer, c.sock_id
        ),
        "Timing (from the first request syscall's entry)".to_owned(),
        span_line("request ", &l7.req),
        span_line("response", &l7.resp),
        format!(
            "Sizes      request {} B in {} syscall(s), response {} B in {} syscall(s)",
            l7.req.bytes, l7.req.syscalls, l7.resp.bytes, l7.resp.syscalls
        ),
        format!(
            "Flags      truncated: {}  end inferred: {}",
            if l7.truncated { "yes" } else { "no" },
            if l7.end_inferred { "yes" } else { "no" }
        ),
    ];
    for (k, val) in &l7.details {
        v.push(format!("Detail     {k}: {val}"));
    }
    v.extend(chain_lines(app, c));
    v.extend(serving_lines(app, c));
    let dropped = seq < app.shown().heads_dropped_before;
    for (what, head, body) in [
        ("Request", &l7.req_head, l7.req.bytes),
        ("Response", &l7.resp_head, l7.resp.bytes),
    ] {
        if dropped && head.bytes.is_empty() && head.len > 0 {
            v.push(format!(
                "{what:<10} head dropped: the Calls view keeps {} MiB of heads, newest first",
                super::data::HEAD_BUDGET >> 20
            ));
        } else {
            v.extend(head_lines(what, head, body));
        }
    }
    v.into_iter().map(Line::from).collect()
}

/// A server call's endpoint's off-CPU time while serving (src/profile/serving.rs), since the
/// start: per call on average, and its heaviest stack's top frames. Kept per endpoint, not
/// per call (a call's blocks are placed after it is shown).
fn serving_lines(app: &App, c: &Call) -> Vec<String> {
    if c.side != crate::call::Side::Server {
        return Vec::new();
    }
    let Some(p) = app.shown().profile.as_deref() else {
        return Vec::new();
    };
    let endpoint = crate::profile::serving::endpoint_name(c);
    let Some((s, top)) = p.serving.top_of(c.pid, &endpoint) else {
        return Vec::new();
    };
    let per_call = |ns: u64| ns as f64 / 1e6 / s.calls.max(1) as f64;
    let mut v = vec![format!(
        "Off-CPU    while serving {endpoint}: {:.3} ms per call ({} calls, {} blocks, since the start)",
        per_call(s.ns),
        s.calls,
        s.blocks
    )];
    if let Some((frames, ns)) = top {
        // The leaf end: where the thread blocked.
        let from = frames.len().saturating_sub(4);
        v.push(format!(
            "  top      {}  {:.3} ms per call",
            frames[from..].join(" > "),
            per_call(ns)
        ));
    }
    v
}

/// The call's place in its chain (src/chains.rs): its ids, its parent, and its children as a
/// waterfall — each one's offset from the call's start, its duration and a bar on the call's
/// time line — and the call's self time (its duration less the time its children covered).
/// Parent and children are looked up among the calls the view keeps.
fn chain_lines(app: &App, c: &Call) -> Vec<String> {
    if c.id == 0 {
        return Vec::new();
    }
    let d = app.shown();
    let hex = |id: u64| format!("{id:016x}");
    let mut v = vec![format!(
        "Chain      id {}  parent {}  trace {}",
        hex(c.id),
        c.parent_id.map_or("none".to_owned(), hex),
        c.trace_id.as_deref().unwrap_or("none")
    )];
    let label = |p: &Call| {
        format!(
            "{} {} {} {} ({:.3} ms)",
            proc_label(&p.comm, p.pid),
            p.side.name(),
            p.l7.method,
            p.l7.resource,
            p.latency_ns as f64 / 1e6
        )
    };
    let rel = d.chain_relatives(c);
    // The relative Tab picked (Enter follows it) is marked.
    let picked = app.chain_pick.and_then(|i| rel.targets().get(i).copied());
    let mark = |seq: u64| if picked == Some(seq) { '▶' } else { ' ' };
    if c.parent_id.is_some() {
        match rel.parent {
            Some((seq, p)) => v.push(format!("{} parent   #{seq} {}", mark(seq), label(p))),
            None => v.push("  parent   not among the calls kept".to_owned()),
        }
    }
    let children = rel.children;
    if children.is_empty() {
        return v;
    }
    let (start, end) = (c.start_ns, c.start_ns.saturating_add(c.latency_ns));
    let self_ns = super::data::self_time_ns(c, children.iter().map(|(_, k)| *k));
    let lo = children
        .iter()
        .map(|(_, k)| k.start_ns)
        .min()
        .unwrap_or(start)
        .min(start);
    let hi = children
        .iter()
        .map(|(_, k)| k.start_ns.saturating_add(k.latency_ns))
        .max()
        .unwrap_or(end)
        .max(end);
    const BAR: usize = 32;
    let span = (hi - lo).max(1) as f64;
    let bar = |a: u64, b: u64| {
        let x0 = ((((a - lo) as f64 / span) * BAR as f64).floor() as usize).min(BAR - 1);
        let x1 = ((((b - lo) as f64 / span) * BAR as f64).ceil() as usize).clamp(x0 + 1, BAR);
        format!(
            "{}{}{}",
            " ".repeat(x0),
            "█".repeat(x1 - x0),
            " ".repeat(BAR - x1)
        )
    };
    v.push(format!(
        "  {} children, self time {:.3} ms of {:.3} ms",
        children.len(),
        self_ns as f64 / 1e6,
        c.latency_ns as f64 / 1e6
    ));
    v.push(format!("  |{}|  this call", bar(start, end.max(start + 1))));
    for (seq, k) in children.iter().take(super::data::MAX_CHAIN_CHILDREN) {
        let k_end = k.start_ns.saturating_add(k.latency_ns);
        v.push(format!(
            "{} |{}|  {:+.3} ms  {:.3} ms  #{seq} {} {} {}",
            mark(*seq),
            bar(k.start_ns, k_end.max(k.start_ns + 1)),
            (k.start_ns as f64 - start as f64) / 1e6,
            k.latency_ns as f64 / 1e6,
            k.l7.proto.name(),
            k.l7.method,
            k.l7.resource
        ));
    }
    if children.len() > super::data::MAX_CHAIN_CHILDREN {
        v.push(format!(
            "  … {} more children",
            children.len() - super::data::MAX_CHAIN_CHILDREN
        ));
    }
    v
}

/// A message head as captured: text (control bytes escaped) or, if it is not text, hex;
/// what was cut or not captured is said.
fn head_lines(what: &str, head: &crate::protocols::CapturedHead, msg_bytes: u64) -> Vec<String> {
    if head.bytes.is_empty() {
        return vec![format!("{what:<10} head not captured")];
    }
    // Bytes of the head as sent that were kept; shown with its secrets redacted.
    let kept = head.bytes.len() as u64;
    let cut = if kept < head.len {
        format!(", cut at {kept}")
    } else {
        String::new()
    };
    let mut v = vec![format!(
        "{what} head ({} B{cut}; secret header values redacted; body {} B not kept):",
        head.len,
        msg_bytes.saturating_sub(head.len)
    )];
    let bytes = head.shown();
    let printable = bytes
        .iter()
        .filter(|&&b| b == b'\r' || b == b'\n' || b == b'\t' || (0x20..0x7f).contains(&b))
        .count();
    let body: Vec<String> = if printable * 10 >= bytes.len() * 9 {
        bytes
            .split(|&b| b == b'\n')
            .map(|line| {
                let line = line.strip_suffix(b"\r").unwrap_or(line);
                let text: String = line.escape_ascii().to_string();
                format!("  {text}")
            })
            .filter(|l| l.trim() != "")
            .collect()
    } else {
        bytes
            .chunks(16)
            .enumerate()
            .map(|(i, chunk)| {
                let hex: Vec<String> = chunk.iter().map(|b| format!("{b:02x}")).collect();
                let text: String = chunk
                    .iter()
                    .map(|&b| {
                        if (0x20..0x7f).contains(&b) {
                            b as char
                        } else {
                            '.'
                        }
                    })
                    .collect();
                format!("  {:04x}  {:<47}  |{text}|", i * 16, hex.join(" "))
            })
            .collect()
    };
    v.extend(body);
    v
}

fn draw_detail(f: &mut Frame, app: &App, area: Rect) {
    let (lines, what) = match (app.detail, &app.row_detail) {
        (Some(seq), _) => (
            match app.shown().find_call(seq) {
                Some(c) => call_detail_lines(app, c, seq),
                None => vec![Line::from("This call is no longer in the buffer.")],
            },
            "Call",
        ),
        (None, Some((View::Processes, key))) => (process_detail_lines(app, key), "Process"),
        (None, Some((_, key))) => (flow_detail_lines(app, key), "Flow"),
        (None, None) => return,
    };
    let inner_w = usize::from(area.width.min(96).saturating_sub(2)).max(1);
    // Rows the lines take once wrapped.
    let rows: usize = lines
        .iter()
        .map(|l| l.width().max(1).div_ceil(inner_w))
        .sum();
    let r = popup(area, 96, u16::try_from(rows + 2).unwrap_or(u16::MAX));
    let visible = usize::from(r.height.saturating_sub(2));
    let max = u16::try_from(rows.saturating_sub(visible)).unwrap_or(u16::MAX);
    app.detail_max_scroll.set(max);
    let scroll = app.detail_scroll.min(max);
    let title = if max > 0 {
        format!(
            " {what} detail: lines {}-{} of {rows} (↑↓ PgUp PgDn g G scroll, Esc: back) ",
            scroll + 1,
            (usize::from(scroll) + visible).min(rows)
        )
    } else {
        format!(" {what} detail (Esc: back) ")
    };
    f.render_widget(Clear, r);
    f.render_widget(
        Paragraph::new(lines)
            .wrap(Wrap { trim: false })
            .scroll((scroll, 0))
            .block(
                Block::default()
                    .borders(Borders::ALL)
                    .title(title)
                    .style(style(app, Style::new())),
            ),
        r,
    );
}

/// What a cgroup path says of a process, for its detail: `  (container ID, pod NS/NAME)`.
fn cgroup_owner(info: &crate::procinfo::ProcInfo) -> String {
    let parts: Vec<String> = [
        info.container().map(|c| format!("container {c}")),
        info.pod
            .as_ref()
            .map(|p| format!("pod {}/{}", p.namespace, p.name)),
    ]
    .into_iter()
    .flatten()
    .collect();
    if parts.is_empty() {
        String::new()
    } else {
        format!("  ({})", parts.join(", "))
    }
}

#[cfg(test)]
mod tests {
    use super::super::flows::FLOW_TABLE_COLUMNS;
    use super::super::table::{Flag, Row};
    use super::*;

    fn flow_rows(local: &str, peer: &str) -> Vec<super::super::table::SharedRow> {
        let mut cells = vec![local.to_owned(), peer.to_owned()];
        cells.extend(FLOW_TABLE_COLUMNS[2..].iter().map(|_| "x".to_owned()));
        vec![std::rc::Rc::new(Row {
            key: "k".into(),
            cells,
            sort: Vec::new(),
            flag: Flag::None,
            facets: Default::default(),
        })]
    }

    fn titles(fitted: &[(usize, u16)]) -> Vec<&'static str> {
        fitted
            .iter()
            .map(|&(i, _)| FLOW_TABLE_COLUMNS[i].title)
            .collect()
    }

    /// A `warning` (a cap hit, the recording failing) reaches the header, once per kind,
    /// as the JSON line reaches `--json` (the sink hands the UI the same `Warning`).
    #[test]
    fn warnings_are_shown_in_the_header() {
        use crate::sink::{Sink, Warning};
        let (tx, rx) = std::sync::mpsc::sync_channel(crate::tui::CHANNEL_CAP);
        let mut sink = crate::tui::TuiSink::new(tx);
        let mut app = App::new("test", std::time::Duration::from_secs(1), true);
        let cap = Warning {
            kind: Warning::CAP,
            cap: Some("flows"),
            limit: Some(3),
            count: Some(7),
            message: "7 TCP flows not tracked".into(),
        };
        let failed = Warning {
            kind: Warning::RECORDING_ERROR,
            cap: None,
            limit: None,
            count: None,
            message: "writing recording x failed: No space left on device".into(),
        };
        for w in [&cap, &cap, &failed] {
            sink.warning(1, w).unwrap();
        }
        sink.flush().unwrap();
        for m in rx.try_iter() {
            app.apply(m);
        }
        let text = fullest_header(&app);
        assert!(text.contains("! flows cap hit"), "{text}");
        assert!(text.contains("! RECORDING FAILED"), "{text}");
        assert_eq!(text.matches("flows cap hit").count(), 1, "{text}");
    }

    /// The header's first line at its fullest, as text.
    fn fullest_header(app: &App) -> String {
        header_top(app, HeaderDetail::STEPS[0])
            .iter()
            .map(|s| s.content.to_string())
            .collect()
    }

    /// Spans `--otlp` could not export are shown beside the other losses; nothing without
    /// drops.
    #[test]
    fn otlp_drops_are_shown_in_the_header() {
        use crate::sink::Sink;
        for (dropped, shown) in [(0, false), (42, true)] {
            let (tx, rx) = std::sync::mpsc::sync_channel(crate::tui::CHANNEL_CAP);
            let mut sink = crate::tui::TuiSink::new(tx);
            let mut app = App::new("test", std::time::Duration::from_secs(1), true);
            let summary = crate::summary::Summary {
                otlp: Some(crate::summary::OtlpStats {
                    spans_exported: 7,
                    spans_dropped: dropped,
                    ..Default::default()
                }),
                ..Default::default()
            };
            sink.summary(&summary).unwrap();
            for m in rx.try_iter() {
                app.apply(m);
            }
            let text = fullest_header(&app);
            assert_eq!(text.contains("otlp-dropped 42"), shown, "{text}");
            assert!(!text.contains("otlp-dropped 0"), "{text}");
        }
    }

    #[test]
    fn addresses_take_the_width_they_need_and_the_last_column_the_rest() {
        // Loopback IPv4: narrow addresses (and a short process, its column as wide as its
        // title) leave room for PROTO and RETR at 80 columns.
        let rows = flow_rows("127.0.0.1:18482", "127.0.0.1:36406");
        let f = fit_columns(FLOW_TABLE_COLUMNS, &rows, 80);
        assert_eq!(
            titles(&f),
            [
                "LOCAL",
                "PEER",
                "PROCESS/PID",
                "PROTO",
                "IN B/s",
                "OUT B/s",
                "RETR"
            ]
        );
        assert_eq!((f[0].1, f[1].1), (15, 15));
        // Wide: every column, the spare width to the last (L7), none to LOCAL.
        let f = fit_columns(FLOW_TABLE_COLUMNS, &rows, 200);
        assert_eq!(f.len(), FLOW_TABLE_COLUMNS.len());
        assert_eq!(f[0].1, 15);
        let used: u16 = 2 + f.iter().map(|&(_, w)| w + 1).sum::<u16>();
        assert_eq!(used, 200);
        assert!(f[f.len() - 1].1 > 9);
        // IPv6 grows past 21 where there is room; where there is not, columns are dropped
        // for 21 and the address takes only what is left after that (21 + 5, cut).
        let v6 = "[2001:db8:85a3::8a2e:370:7334]:443";
        let rows = flow_rows(v6, "[2001:db8::1]:55000");
        let f = fit_columns(FLOW_TABLE_COLUMNS, &rows, 200);
        assert_eq!((f[0].1, f[1].1), (34, 19));
        let f = fit_columns(FLOW_TABLE_COLUMNS, &rows, 80);
        assert_eq!((f[0].1, f[1].1), (26, 19));
        assert_eq!(
            titles(&f),
            ["LOCAL", "PEER", "PROCESS/PID", "IN B/s", "OUT B/s"]
        );
    }

    /// A call row with this process and status (the other cells as short as they come).
    fn call_row(process: &str, status: &str) -> super::super::table::SharedRow {
        let cells = [
            "02:02:27.142",
            process,
            "client",
            "redis",
            "GET",
            "session:8f0a6b3c2d1e4f0a6b3c2d1e",
            status,
            "0.31",
            "90/123",
        ];
        std::rc::Rc::new(Row {
            key: process.into(),
            cells: cells.iter().map(|c| c.to_string()).collect(),
            sort: Vec::new(),
            flag: Flag::None,
            facets: Default::default(),
        })
    }

    /// Issue 44 item 6: PROCESS/PID and STATUS are as wide as their longest value on screen
    /// (never `redis-server/~`, `SERVF~`), RESOURCE takes the rest, and at 80 columns the key
    /// columns stay while SIDE and the sizes go.
    #[test]
    fn processes_and_statuses_are_whole_and_the_resource_takes_the_rest() {
        use super::super::table::CALL_COLUMNS;
        let rows = vec![
            call_row("redis-server/41327", "SERVFAIL"),
            call_row("dig/7", "NOERROR"),
        ];
        for width in [160u16, 120, 80] {
            let f = fit_columns(CALL_COLUMNS, &rows, width);
            let w = |t: &str| {
                f.iter()
                    .find(|&&(i, _)| CALL_COLUMNS[i].title == t)
                    .map(|&(_, w)| w)
            };
            assert_eq!(w("PROCESS/PID"), Some(18), "{width}");
            assert_eq!(w("STATUS"), Some(8), "{width}");
            for key in ["TIME", "PROTO", "METHOD", "RESOURCE", "LAT ms"] {
                assert!(w(key).is_some(), "{width}: {key}");
            }
            let used: u16 = 2 + f.iter().map(|&(_, w)| w + 1).sum::<u16>();
            assert_eq!(used, width, "the resource takes the rest");
            if width == 80 {
                assert_eq!((w("SIDE"), w("REQ/RESP B")), (None, None));
            } else {
                // Every column shown; what the others leave is the resource's.
                assert_eq!(f.len(), CALL_COLUMNS.len(), "{width}: {f:?}");
                assert!(w("RESOURCE").unwrap() >= width - 89, "{width}: {f:?}");
            }
        }
        // Shorter values, narrower columns: the title and its sort arrow at least.
        let f = fit_columns(CALL_COLUMNS, &[call_row("dig/7", "-")], 120);
        assert_eq!(f[1].1, "PROCESS/PID".len() as u16 + 1);
        // Too narrow for even the key columns: the resource gives up all but 6 first.
        let f = fit_columns(CALL_COLUMNS, &rows, 60);
        let res = f.iter().find(|&&(i, _)| CALL_COLUMNS[i].flex).unwrap();
        assert_eq!(res.1, 6);
    }

    #[test]
    fn a_processs_container_and_pod_are_named_in_its_detail() {
        use crate::procinfo::ProcInfo;
        let id = "4f0a6b3c2d1e".repeat(5) + "abcd";
        let mut info = ProcInfo {
            cgroup: Some(format!(
                "/kubepods/besteffort/pod0b5a7c2e-1f3d-4e6a-9b8c-7d6e5f4a3b2c/{id}"
            )),
            ..Default::default()
        };
        assert_eq!(cgroup_owner(&info), "  (container 4f0a6b3c2d1e)");
        info.pod = Some(crate::pods::Pod {
            namespace: "shop".into(),
            name: "web-0".into(),
        });
        assert_eq!(
            cgroup_owner(&info),
            "  (container 4f0a6b3c2d1e, pod shop/web-0)"
        );
        assert_eq!(cgroup_owner(&ProcInfo::default()), "");
    }

    #[test]
    fn prompts_wrap_at_spaces_and_cut_only_past_their_rows() {
        let fields = "/status>=500_  no column \"status\" here (fields: process, side, method, \
                      resource, calls, serr, cerr, p50, p90, p99, max)";
        let lines = wrap_at_spaces(fields, 80);
        assert_eq!(
            lines,
            [
                "/status>=500_  no column \"status\" here (fields: process, side, method, resource,",
                "calls, serr, cerr, p50, p90, p99, max)"
            ]
        );
        assert_eq!(
            lines.join(" "),
            fields,
            "nothing lost but the spaces at a break"
        );
        assert_eq!(wrap_at_spaces("abc", 80), ["abc"]);
        assert_eq!(wrap_at_spaces("abcdefgh ij", 3), ["abc", "def", "gh", "ij"]);
        assert_eq!(wrap_at_spaces("ab  ", 2), ["ab"]);
        assert_eq!(wrap_at_spaces("", 5), [""]);
        // Typed past three rows: the third ends with `…`.
        let mut app = App::new("t", std::time::Duration::from_secs(1), true);
        app.handle_key(crossterm::event::KeyEvent::from(
            crossterm::event::KeyCode::Char('/'),
        ));
        for c in "x ".repeat(60).chars() {
            app.handle_key(crossterm::event::KeyEvent::from(
                crossterm::event::KeyCode::Char(c),
            ));
        }
        let lines = hint_lines(&app, 40);
        assert_eq!(lines.len(), PROMPT_ROWS_MAX);
        assert!(lines.iter().all(|l| l.chars().count() <= 40), "{lines:?}");
        assert!(lines[2].ends_with('…'), "{lines:?}");
        // The keys' hint is one row, as it was.
        app.handle_key(crossterm::event::KeyEvent::from(
            crossterm::event::KeyCode::Enter,
        ));
        assert_eq!(hint_lines(&app, 40), [FOOTER]);
    }
}
