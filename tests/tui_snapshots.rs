//! Snapshots of every TUI view (and the help overlay, a call's details, a drill-down) drawn
//! from the committed recording, at 120×40 and 80×24, plus the empty screen. Text only: the
//! marks (`>`, `!`, `*`, brackets) carry the meaning, colours are extra.

use std::time::Duration;

use crossterm::event::{KeyCode, KeyEvent, KeyModifiers};
use ebtop::tui::{app::App, collect_replay, render};
use ratatui::backend::TestBackend;
use ratatui::Terminal;

const FIXTURE: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/tests/fixtures/recordings/http_mix.ebt"
);

const SIZES: [(u16, u16); 2] = [(120, 40), (80, 24)];

fn screen(app: &App, w: u16, h: u16) -> String {
    let mut term = Terminal::new(TestBackend::new(w, h)).unwrap();
    term.draw(|f| render::draw(f, app)).unwrap();
    let buf = term.backend().buffer();
    let mut out = String::new();
    for y in 0..h {
        let mut line = String::new();
        for x in 0..w {
            line.push_str(buf[(x, y)].symbol());
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out
}

/// A recording with the flow table's reports (TCP and UDP flows).
const FLOWS_FIXTURE: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/tests/fixtures/recordings/flows_mix.ebt"
);

fn app_of(path: &str) -> App {
    let name = path.rsplit('/').next().unwrap();
    let mut app = App::new(&format!("replay {name}"), Duration::from_secs(1), true);
    for m in collect_replay(path.as_ref()).unwrap() {
        app.apply(m);
    }
    app
}

fn keys(app: &mut App, ks: &[KeyCode]) {
    for &k in ks {
        app.handle_key(KeyEvent::new(k, KeyModifiers::NONE));
    }
}

fn snap(name: &str, setup: &[KeyCode]) {
    snap_of(FIXTURE, name, setup)
}

fn snap_of(path: &str, name: &str, setup: &[KeyCode]) {
    for (w, h) in SIZES {
        let mut app = app_of(path);
        app.set_size(w, h);
        keys(&mut app, setup);
        insta::assert_snapshot!(format!("{name}_{w}x{h}"), screen(&app, w, h));
    }
}

#[test]
fn calls_view() {
    snap("calls", &[]);
}

#[test]
fn calls_view_selection_moved_and_sorted_by_latency() {
    use KeyCode::*;
    snap(
        "calls_by_latency",
        &[
            Char('>'),
            Char('>'),
            Char('>'),
            Char('>'),
            Char('>'),
            Char('>'),
            Char('>'),
            Down,
        ],
    );
}

#[test]
fn call_detail() {
    snap("call_detail", &[KeyCode::Enter]);
}

#[test]
fn call_detail_scrolled_in_a_short_terminal() {
    // At 20 rows a call's details do not fit: they scroll, and the title says where.
    let mut app = app_of(FIXTURE);
    keys(&mut app, &[KeyCode::Enter]);
    let top = screen(&app, 100, 20);
    keys(&mut app, &[KeyCode::Char('j')]);
    let scrolled = screen(&app, 100, 20);
    keys(&mut app, &[KeyCode::Char('G')]);
    let end = screen(&app, 100, 20);
    assert_ne!(top, scrolled);
    assert!(top.contains("Call detail: lines 1-"), "{top}");
    assert!(scrolled.contains("lines 2-"), "{scrolled}");
    // Scrolling stops at the last line.
    keys(&mut app, &[KeyCode::PageDown, KeyCode::PageDown]);
    let paged = screen(&app, 100, 20);
    assert_eq!(paged, end);
    assert!(end.contains("Request head ("), "{end}");
    insta::assert_snapshot!("call_detail_scrolled_end", end);
}

#[test]
fn endpoints_view_windows() {
    // Default: the last 10 s; c cycles 1 min, since the start, the last interval.
    snap("endpoints", &[KeyCode::Char('2')]);
    snap(
        "endpoints_cumulative",
        &[KeyCode::Char('2'), KeyCode::Char('c'), KeyCode::Char('c')],
    );
    snap(
        "endpoints_interval",
        &[
            KeyCode::Char('2'),
            KeyCode::Char('c'),
            KeyCode::Char('c'),
            KeyCode::Char('c'),
        ],
    );
}

#[test]
fn endpoint_drill_down() {
    use KeyCode::*;
    snap(
        "drill_down",
        &[Char('2'), Char('c'), Char('c'), Down, Down, Enter],
    );
}

#[test]
fn flows_view() {
    snap("flows", &[KeyCode::Char('3')]);
}

#[test]
fn flows_view_from_the_flow_table() {
    snap_of(FLOWS_FIXTURE, "flow_table", &[KeyCode::Char('3')]);
    // Sorted by bytes received, most first: the 200 KB downloads lead.
    snap_of(
        FLOWS_FIXTURE,
        "flow_table_by_bytes_in",
        &[KeyCode::Char('3'), KeyCode::Char('>'), KeyCode::Char('>')],
    );
    // Wide enough for every column: L7 names the protocol of the calls seen on each flow.
    let (w, h) = (200, 16);
    let mut app = app_of(FLOWS_FIXTURE);
    app.set_size(w, h);
    keys(&mut app, &[KeyCode::Char('3')]);
    insta::assert_snapshot!("flow_table_200x16", screen(&app, w, h));
}

#[test]
fn processes_view() {
    snap("processes", &[KeyCode::Char('4')]);
}

#[test]
fn process_and_flow_details() {
    // A process: its command line, numbers, endpoints and flows.
    snap_of(
        FLOWS_FIXTURE,
        "process_detail",
        &[KeyCode::Char('4'), KeyCode::Enter],
    );
    // A flow: what the flow table said of it (the biggest download first).
    snap_of(
        FLOWS_FIXTURE,
        "flow_detail",
        &[
            KeyCode::Char('3'),
            KeyCode::Char('>'),
            KeyCode::Char('>'),
            KeyCode::Enter,
        ],
    );
}

#[test]
fn help_overlay() {
    snap("help", &[KeyCode::Char('?')]);
}

#[test]
fn filtered_and_paused() {
    use KeyCode::*;
    snap(
        "filtered_paused",
        &[
            Char('/'),
            Char('b'),
            Char('o'),
            Char('o'),
            Char('m'),
            Enter,
            Char('p'),
        ],
    );
}

#[test]
fn empty() {
    for (w, h) in SIZES {
        for (i, view) in ["calls", "endpoints", "flows", "processes"]
            .iter()
            .enumerate()
        {
            let mut app = App::new("live", Duration::from_secs(1), true);
            app.set_size(w, h);
            // A live session's meta: what it loaded shows in the overhead panel.
            let mut meta = ebtop::session_meta::SessionMeta::this_host(
                "live",
                4096,
                ebtop::filters::Filters::default(),
                0,
            );
            meta.start_unix_ns = 0;
            meta.host = "host".into();
            meta.kernel = "kernel".into();
            meta.loaded = vec!["capture".into(), "process_events".into()];
            app.apply(ebtop::tui::UiMsg::Meta(Box::new(meta)));
            keys(&mut app, &[KeyCode::Char((b'1' + i as u8) as char)]);
            insta::assert_snapshot!(format!("empty_{view}_{w}x{h}"), screen(&app, w, h));
        }
    }
}

#[test]
fn live_header_shows_the_wall_clock_and_uptime() {
    // Live, the first line starts as top's: the local time (to the second) and the uptime.
    let offset = 1_795_310_000_000_000_000i64;
    for (w, h) in SIZES {
        let mut app = App::new("live", Duration::from_secs(1), true);
        app.set_size(w, h);
        app.zone = ebtop::clock::TimeZone::Fixed(ebtop::clock::Zone {
            offset_s: 3600,
            name: "CET".into(),
        });
        let mut meta = ebtop::session_meta::SessionMeta::this_host(
            "live",
            4096,
            ebtop::filters::Filters::default(),
            offset,
        );
        meta.start_unix_ns = offset + 1_000_000_000_000;
        app.apply(ebtop::tui::UiMsg::Meta(Box::new(meta)));
        app.clock_ns = Some(1_000_000_000_000 + 3_725_000_000_000);
        let s = screen(&app, w, h);
        assert_eq!(
            s.lines().next().unwrap(),
            "ebtop  live  03:32:05 CET  up 1h02m05s  calls 0  lost 0",
            "{w}x{h}"
        );
    }
}

#[test]
fn filter_naming_a_field_the_view_lacks() {
    // Endpoints have no STATUS column: the filter is refused and says which fields there
    // are (in the prompt line too, which a narrow terminal does not cut first); no row hides.
    let mut setup = vec![KeyCode::Char('2'), KeyCode::Char('/')];
    setup.extend("status>=500".chars().map(KeyCode::Char));
    snap("filter_unknown_field", &setup);
    // The Processes view has the most fields: at 80 columns the prompt takes two rows, and
    // every field is in sight.
    let mut setup = vec![KeyCode::Char('4'), KeyCode::Char('/')];
    setup.extend("lat>100".chars().map(KeyCode::Char));
    snap("filter_unknown_field_processes", &setup);
    let (w, h) = (80, 24);
    let mut app = app_of(FIXTURE);
    app.set_size(w, h);
    keys(&mut app, &setup);
    let s = screen(&app, w, h);
    for field in ["pid", "cpu", "calls", "conns", "tls", "pod", "command)"] {
        assert!(s.contains(field), "{field} not in\n{s}");
    }
}

#[test]
fn calls_view_held_below_the_newest() {
    // The selection moved off the top: the title says the view holds it, and how many
    // calls are newer than the held one.
    use KeyCode::*;
    snap("calls_held", &[Down, Down, Down]);
}

#[test]
fn search_prompt() {
    // F3, typing: the words show in the prompt line, the rows are all still there.
    let mut setup = vec![KeyCode::F(3)];
    setup.extend("users".chars().map(KeyCode::Char));
    snap("search_prompt", &setup);
}

#[test]
fn endpoints_view_over_the_last_minute() {
    snap("endpoints_1min", &[KeyCode::Char('2'), KeyCode::Char('c')]);
}

#[test]
fn drill_down_into_client_errors() {
    // An endpoint answering 404: the 4xx line of the drill-down shows it.
    let mut setup = vec![KeyCode::Char('2'), KeyCode::F(3)];
    setup.extend("missing".chars().map(KeyCode::Char));
    setup.extend([KeyCode::Enter, KeyCode::Enter]);
    snap("drill_down_4xx", &setup);
}

#[test]
fn calls_across_midnight_carry_the_date() {
    // In a zone where the recording (02:02:25..27 UTC) crosses midnight, TIME shows the
    // month and day too; at 80 columns SIDE makes room for it.
    for (w, h) in SIZES {
        let mut app = app_of(FIXTURE);
        app.set_size(w, h);
        app.zone = ebtop::clock::TimeZone::Fixed(ebtop::clock::Zone {
            offset_s: -(2 * 3600 + 2 * 60 + 27),
            name: "XST".into(),
        });
        insta::assert_snapshot!(format!("calls_across_midnight_{w}x{h}"), screen(&app, w, h));
    }
}

#[test]
fn sort_menu() {
    use KeyCode::*;
    // F6: the view's columns down the left, the one sorted by with its arrow, the cursor
    // moved two rows down; the prompt line says the menu's keys.
    snap("sort_menu", &[F(6), Down, Down]);
    // The Processes view's, the longest list, opened on the column it is sorted by.
    snap("sort_menu_processes", &[Char('4'), F(6)]);
}

/// The header says what the session leaves out (capture filters, `--filter`) and where it
/// records, and an empty Calls view says why it is empty.
#[test]
fn header_shows_capture_filters_the_call_filter_and_the_recording() {
    for (w, h) in SIZES {
        let mut app = App::new("live", Duration::from_secs(1), true);
        app.set_size(w, h);
        app.fixed_filter = Some("lat>100ms or err".into());
        app.recording = Some(("incident.ebt".into(), 12_345_678));
        app.metrics = Some("127.0.0.1:9464".parse().unwrap());
        let filters = ebtop::filters::Filters {
            port: Some(vec![42999]),
            ..Default::default()
        };
        let mut meta = ebtop::session_meta::SessionMeta::this_host("live", 4096, filters, 0);
        meta.start_unix_ns = 0;
        app.apply(ebtop::tui::UiMsg::Meta(Box::new(meta)));
        let mut totals = ebtop::summary::Summary::default();
        totals.kernel.skipped_unknown_proto = 12;
        app.apply(ebtop::tui::UiMsg::Interval(Box::new(
            ebtop::report::IntervalReport {
                mono_ns: 1_000_000_000,
                period_ns: 1_000_000_000,
                endpoints: vec![],
                processes: vec![],
                overhead: None,
                totals,
                open_connections: 0,
                flows: None,
                windows: None,
                conns: None,
                sampling: None,
                profile: None,
                profile_status: None,
            },
        )));
        let s = screen(&app, w, h);
        assert!(
            s.contains("--port 42999")
                && s.contains("12 sends/receives")
                // Last on the line: cut at 80 columns.
                && (w < 120 || s.contains("metrics http://127.0.0.1:9464/metrics")),
            "{s}"
        );
        insta::assert_snapshot!(format!("header_scope_{w}x{h}"), s);
    }
}

/// DNS calls (`src/protocols/dns/fixtures`): process names and statuses longer than the
/// old fixed columns (`dnsmasq/NNNN`, `NXDOMAIN`).
const DNS_FIXTURE: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/src/protocols/dns/fixtures/dns_mix.ebt"
);

/// The header line of the table (the one naming the first column).
fn table_head<'a>(s: &'a str, first: &str) -> &'a str {
    s.lines()
        .find(|l| l.trim_start().starts_with(first))
        .unwrap_or_else(|| panic!("no table header starting {first}:\n{s}"))
}

/// Columns follow their content: PROCESS/PID and STATUS show their longest visible value
/// whole (never `NXDOM~`), RESOURCE takes the rest, and at 80×24 the Calls view keeps time,
/// process, proto, status, latency and resource, the Endpoints view calls, server errors,
/// p50 and p99.
#[test]
fn columns_follow_their_content_at_80x24_and_160x45() {
    for (w, h) in [(160, 45), (80, 24)] {
        let mut app = app_of(DNS_FIXTURE);
        app.set_size(w, h);
        let rows = app.rows();
        let s = screen(&app, w, h);
        insta::assert_snapshot!(format!("calls_dns_{w}x{h}"), s);
        let head = table_head(&s, "TIME");
        for title in [
            "TIME",
            "PROCESS/PID",
            "PROTO",
            "RESOURCE",
            "STATUS",
            "LAT ms",
        ] {
            assert!(head.contains(title), "{w}x{h}: {title} in\n{s}");
        }
        // Every process and status on screen is whole.
        let shown: Vec<&str> = s.lines().collect();
        for r in rows.iter().take(5) {
            for cell in [&r.cells[1], &r.cells[6]] {
                assert!(
                    shown.iter().any(|l| l.contains(&format!(" {cell} "))),
                    "{w}x{h}: {cell:?} cut:\n{s}"
                );
            }
        }
        assert!(!s.contains("NXDOM~") && !s.contains("NOERR~"), "{s}");
        // The resource takes the rest of the line: the last column ends at the edge when
        // a row is as wide as the terminal allows.
        keys(&mut app, &[KeyCode::Char('2')]);
        let s = screen(&app, w, h);
        insta::assert_snapshot!(format!("endpoints_dns_{w}x{h}"), s);
        let head = table_head(&s, "PROCESS");
        for title in ["CALLS", "SERR %", "P50 ms", "P99 ms", "RESOURCE"] {
            assert!(head.contains(title), "{w}x{h}: {title} in\n{s}");
        }
    }
    // The recording with HTTP calls: the Endpoints view at 80 columns keeps its key columns.
    let mut app = app_of(FIXTURE);
    keys(&mut app, &[KeyCode::Char('2')]);
    let s = screen(&app, 80, 24);
    let head = table_head(&s, "PROCESS");
    for title in ["CALLS", "SERR %", "P50 ms", "P99 ms"] {
        assert!(head.contains(title), "{title} in\n{s}");
    }
}

/// Right scrolls the long column's text (its title says by how much), Left brings it back;
/// the other columns stay where they are. (The Processes view at 80 columns: the command
/// lines are cut.)
#[test]
fn right_and_left_scroll_the_long_column() {
    let (w, h) = (80, 24);
    let mut app = app_of(FIXTURE);
    app.set_size(w, h);
    keys(&mut app, &[KeyCode::Char('4')]);
    let before = screen(&app, w, h);
    assert!(before.contains("python3 /tmp~"), "{before}");
    keys(&mut app, &[KeyCode::Right]);
    let scrolled = screen(&app, w, h);
    assert!(
        table_head(&scrolled, "PID").contains("COMMAND +8"),
        "{scrolled}"
    );
    insta::assert_snapshot!("processes_scrolled_80x24", scrolled);
    // The PID and numbers did not move; the command's text did.
    let first = |s: &str| -> (String, String) {
        let l = s.lines().find(|l| l.starts_with('>')).unwrap();
        let (a, b) = l.split_at(l.char_indices().nth(60).unwrap().0);
        (a.to_owned(), b.to_owned())
    };
    assert_eq!(first(&before).0, first(&scrolled).0);
    assert_ne!(first(&before).1, first(&scrolled).1);
    keys(&mut app, &[KeyCode::Left]);
    assert_eq!(screen(&app, w, h), before);
    // Scrolling stops where the longest visible text ends.
    for _ in 0..100 {
        keys(&mut app, &[KeyCode::Right]);
        screen(&app, w, h);
    }
    let end = screen(&app, w, h);
    keys(&mut app, &[KeyCode::Right]);
    assert_eq!(screen(&app, w, h), end);
    assert!(
        !end.contains('~'),
        "the longest line's end in sight:\n{end}"
    );
}

/// The screen line of the selected row and the row itself.
fn selected(s: &str) -> (usize, String) {
    s.lines()
        .enumerate()
        .find(|(_, l)| l.starts_with('>'))
        .map(|(i, l)| (i, l.to_owned()))
        .unwrap_or_else(|| panic!("no selected row:\n{s}"))
}

/// A held row stays on its line, with the rows around it, while newer calls arrive above
/// it; F3's match is shown mid-screen; Enter opens the selected row, in FOLLOW too, and holds
/// it.
#[test]
fn a_held_row_stays_on_its_line_while_calls_arrive() {
    for (w, h) in [(80, 24), (160, 45)] {
        let msgs = collect_replay(FIXTURE.as_ref()).unwrap();
        let mut app = App::new("replay", Duration::from_secs(1), true);
        app.set_size(w, h);
        let mut msgs = msgs.into_iter();
        // The first third of the calls.
        let mut calls = 0;
        for m in msgs.by_ref() {
            if let ebtop::tui::UiMsg::Calls(c, _) = &m {
                calls += c.len();
            }
            app.apply(m);
            if calls >= 20 {
                break;
            }
        }
        screen(&app, w, h);
        keys(&mut app, &[KeyCode::Char('j'), KeyCode::Char('j')]);
        let s = screen(&app, w, h);
        let (line, row) = selected(&s);
        let lines: Vec<&str> = s.lines().collect();
        let around: Vec<String> = lines[line - 1..=line + 1]
            .iter()
            .map(|l| l[1..].to_owned())
            .collect();
        for m in msgs {
            app.apply(m);
        }
        let s = screen(&app, w, h);
        assert!(s.contains("[HELD, "), "{s}");
        assert_eq!(selected(&s), (line, row.clone()), "{w}x{h}:\n{s}");
        let lines: Vec<&str> = s.lines().collect();
        let now: Vec<String> = lines[line - 1..=line + 1]
            .iter()
            .map(|l| l[1..].to_owned())
            .collect();
        assert_eq!(now, around, "the rows around it stay too:\n{s}");
        insta::assert_snapshot!(format!("calls_held_in_place_{w}x{h}"), s);

        // F3: each match lands mid-table (as near as the list's start allows), not on the
        // last line.
        let mut setup = vec![KeyCode::Char('g'), KeyCode::F(3)];
        setup.extend("users/1".chars().map(KeyCode::Char));
        setup.push(KeyCode::Enter);
        keys(&mut app, &setup);
        let mut centred = 0;
        for _ in 0..30 {
            let s = screen(&app, w, h);
            let (line, row) = selected(&s);
            assert!(row.contains("/api/users/1"), "{s}");
            let head = s
                .lines()
                .position(|l| l.trim_start().starts_with("TIME"))
                .unwrap();
            let body = usize::from(h) - head - 2;
            let at = line - head - 1;
            let rows = app.rows();
            let sel = app.selected_index(&rows).unwrap();
            let want = sel.min(body / 2);
            assert_eq!(
                at, want,
                "{w}x{h}: match {sel} on line {at} of {body}:\n{s}"
            );
            centred += usize::from(at == body / 2);
            keys(&mut app, &[KeyCode::F(3), KeyCode::F(3), KeyCode::Esc]);
        }
        assert!(centred > 0, "{w}x{h}: some match mid-table");
    }
}

/// In FOLLOW, Enter opens the selected (newest drawn) call and holds it: back from its
/// details it is still selected, though newer calls came.
#[test]
fn enter_in_follow_opens_the_selected_call_and_holds_it() {
    let msgs = collect_replay(FIXTURE.as_ref()).unwrap();
    let (w, h) = (80, 24);
    let mut app = App::new("replay", Duration::from_secs(1), true);
    app.set_size(w, h);
    let mut msgs = msgs.into_iter();
    for m in msgs.by_ref() {
        let calls = matches!(m, ebtop::tui::UiMsg::Calls(..));
        app.apply(m);
        if calls {
            break;
        }
    }
    let s = screen(&app, w, h);
    assert!(s.contains("[FOLLOW]"), "{s}");
    let (line, row) = selected(&s);
    for m in msgs {
        app.apply(m);
    }
    keys(&mut app, &[KeyCode::Enter]);
    let open = app.detail.expect("details open");
    let s = screen(&app, w, h);
    assert!(s.contains(&format!("Call #{open} ")), "{s}");
    keys(&mut app, &[KeyCode::Esc]);
    let s = screen(&app, w, h);
    assert!(s.contains("[HELD, "), "{s}");
    let (_, now) = selected(&s);
    assert_eq!(
        now, row,
        "the call drawn selected on line {line} is still selected:\n{s}"
    );
}

/// The number before `word` on `line` (`2 open` → 2).
fn count_before(line: &str, word: &str) -> usize {
    let words: Vec<&str> = line
        .split([' ', ',', ':'])
        .filter(|w| !w.is_empty())
        .collect();
    let i = words
        .iter()
        .position(|w| *w == word)
        .unwrap_or_else(|| panic!("no {word:?} in {line:?}"));
    words[i - 1].parse().unwrap()
}

/// Issue 44 item 10: with a filter, the Flows title's counts are those of the flows it keeps.
#[test]
fn the_flows_summary_counts_the_flows_the_filter_keeps() {
    for (w, h) in SIZES {
        let mut app = app_of(FLOWS_FIXTURE);
        app.set_size(w, h);
        keys(&mut app, &[KeyCode::Char('3')]);
        let all = app.rows().len();
        let mut setup = vec![KeyCode::Char('/')];
        setup.extend("proto:udp".chars().map(KeyCode::Char));
        setup.push(KeyCode::Enter);
        keys(&mut app, &setup);
        let rows = app.rows();
        assert!(
            !rows.is_empty() && rows.len() < all,
            "{} of {all}",
            rows.len()
        );
        let s = screen(&app, w, h);
        let title = s.lines().find(|l| l.starts_with("Flows")).unwrap();
        let (open, ended) = (count_before(title, "open"), count_before(title, "ended"));
        assert_eq!(open + ended, rows.len(), "{title}");
        insta::assert_snapshot!(format!("flow_table_udp_{w}x{h}"), s);
    }
}

/// A synthetic recording: an HTTP server answering a scan of distinct pages
/// (`/missing/pageN`) beside a few real paths, one exchange per 10 ms.
fn scan_recording(dir: &std::path::Path) -> String {
    use ebtop::event::{Direction, EventBuilder};
    use ebtop::record::{EndRecord, IntervalRecord, RecordOptions, RecordingHeader};
    let path = dir.join("scan.ebt");
    let mut meta = ebtop::session_meta::SessionMeta::this_host(
        "live",
        4096,
        ebtop::filters::Filters::default(),
        0,
    );
    (meta.host, meta.kernel, meta.ebtop_version) = ("test".into(), "test".into(), "test".into());
    meta.start_unix_ns = 0;
    let header = RecordingHeader {
        meta,
        options: RecordOptions::default(),
        processes: Vec::new(),
        sockets: Vec::new(),
    };
    let mut rec = ebtop::record::writer::Recorder::create(&path, &header, false).unwrap();
    let mut seq = [0u64; 2];
    let mut t = 1_000_000u64;
    for i in 0..200u64 {
        let target = match i % 4 {
            0 | 1 => format!("/missing/page{i}"),
            2 => "/api/users".to_owned(),
            _ => format!("/static/app{}.js", i % 3),
        };
        let req = format!("GET {target} HTTP/1.1\r\nHost: x\r\n\r\n");
        let resp = "HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n";
        for (dir, body) in [
            (Direction::Ingress, req.as_str()),
            (Direction::Egress, resp),
        ] {
            let d = dir as usize;
            t += 5_000_000;
            rec.event(
                &EventBuilder::data(dir, 7, seq[d], body.len() as u64)
                    .times(t, t + 1_000)
                    .process(4242, 4242, "python3")
                    .v4([127, 0, 0, 1], 8080, [127, 0, 0, 2], 40_000)
                    .build(body.as_bytes()),
            );
            seq[d] += body.len() as u64;
        }
        if i % 100 == 99 {
            rec.interval(&IntervalRecord {
                mono_ns: t,
                kernel: Default::default(),
            });
        }
    }
    rec.finish(&EndRecord {
        duration_ns: t,
        kernel: Default::default(),
        dropped_events: 0,
    })
    .unwrap();
    path.to_str().unwrap().to_owned()
}

/// The scan's pages past the first 16 are one `/missing/{…}` row, and the title counts the
/// keys folded into it; the other endpoints keep their rows. Since the start, the rows add up
/// to every call.
#[test]
fn endpoints_fold_a_scan_into_one_row_and_count_its_keys() {
    let dir = tempfile::tempdir().unwrap();
    let path = scan_recording(dir.path());
    for (w, h) in [(160, 45), (80, 24)] {
        let mut app = app_of(&path);
        app.set_size(w, h);
        keys(
            &mut app,
            &[KeyCode::Char('2'), KeyCode::Char('c'), KeyCode::Char('c')],
        );
        let s = screen(&app, w, h);
        assert!(s.contains("Endpoints, since the start"), "{s}");
        assert!(s.contains("/missing/{…}"), "{s}");
        let d = app.shown();
        let rows = &d.windows.since_start;
        assert_eq!(rows.iter().map(|r| r.calls).sum::<u64>(), 200);
        let folded = rows.iter().find(|r| r.resource == "/missing/{…}").unwrap();
        let table = d.ended.as_ref().unwrap().endpoint_table;
        assert_eq!(table.segment_folded_calls, folded.calls);
        let keys = table.segment_folded_keys_approx;
        assert!(
            keys > 0 && s.contains(&format!("~{keys} keys folded to {{…}}")),
            "{s}"
        );
        insta::assert_snapshot!(format!("endpoints_folded_scan_{w}x{h}"), s);
    }
}

/// A recording made with `--profile` (a program whose `hot` does 3× the work of `warm`, and
/// sleeps 20 ms per loop): its profile, symbolized at capture, replays into the Profile view.
const PROFILE_FIXTURE: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/tests/fixtures/recordings/profile_burn.ebt"
);

#[test]
fn profile_view() {
    // Opens on the hottest path; then off-CPU; then a search.
    snap_of(PROFILE_FIXTURE, "profile", &[KeyCode::Char('5')]);
    snap_of(
        PROFILE_FIXTURE,
        "profile_off_cpu",
        &[KeyCode::Char('5'), KeyCode::Char('o')],
    );
    let mut search = vec![KeyCode::Char('5'), KeyCode::Char('/')];
    search.extend("warm".chars().map(KeyCode::Char));
    search.push(KeyCode::Enter);
    snap_of(PROFILE_FIXTURE, "profile_search", &search);
}

#[test]
fn profile_view_expands_collapses_and_filters_by_process() {
    let mut app = app_of(PROFILE_FIXTURE);
    app.set_size(120, 40);
    keys(&mut app, &[KeyCode::Char('5')]);
    let s = screen(&app, 120, 40);
    assert!(
        s.contains("Profile: on-CPU samples of all processes"),
        "{s}"
    );
    let rows = |s: &str| s.lines().filter(|l| l.contains('%')).count();
    let opened = rows(&s);
    // The first row (the process) closed: one row left; opened again: as before.
    keys(&mut app, &[KeyCode::Home, KeyCode::Enter]);
    let closed = screen(&app, 120, 40);
    assert_eq!(rows(&closed), 1, "{closed}");
    assert!(closed.contains("▸ burn-"), "{closed}");
    keys(&mut app, &[KeyCode::Right]);
    assert!(rows(&screen(&app, 120, 40)) >= 2);
    // One process (`w`): the title names it; back to all after the last.
    keys(&mut app, &[KeyCode::Char('w')]);
    let one = screen(&app, 120, 40);
    assert!(one.contains("on-CPU samples of burn-"), "{one}");
    keys(&mut app, &[KeyCode::Char('w')]);
    assert!(screen(&app, 120, 40).contains("of all processes"));
    assert!(opened >= 3, "the hottest path opens: {s}");
    // Esc goes back to the view it was opened over.
    keys(&mut app, &[KeyCode::Esc]);
    assert!(!screen(&app, 120, 40).contains("Profile:"));
}

/// `P` on a process row asks for a profile of that process (the slot the session's triggers
/// read at the next interval); the header shows what the triggers do.
#[test]
fn p_on_a_process_row_asks_for_its_profile_and_the_header_shows_the_run() {
    let mut app = app_of(FIXTURE);
    app.set_size(120, 40);
    // Without --profile the key says why it does nothing.
    keys(&mut app, &[KeyCode::Char('4'), KeyCode::Char('P')]);
    assert!(screen(&app, 120, 40).contains("with --profile"));
    let slot = ebtop::profile::trigger::ProfileRequests::default();
    app.profile_requests = Some(slot.clone());
    keys(&mut app, &[KeyCode::Home, KeyCode::Char('P')]);
    let s = screen(&app, 120, 40);
    let row = s.lines().find(|l| l.starts_with('>')).unwrap().to_owned();
    let (pids, comm) = slot.lock().unwrap().take().expect("a request");
    assert_eq!(pids.len(), 1);
    assert!(
        row.contains(&pids[0].to_string()) && row.contains(&comm),
        "{row} {comm}"
    );
    // On the Calls view the key names the rows it works on.
    keys(&mut app, &[KeyCode::Char('1'), KeyCode::Char('P')]);
    assert!(screen(&app, 120, 40).contains("select a process (4) or an endpoint (2) row"));
    assert!(slot.lock().unwrap().is_none());

    app.apply(ebtop::tui::UiMsg::Interval(Box::new(
        ebtop::report::IntervalReport {
            mono_ns: u64::MAX / 2,
            period_ns: 1_000_000_000,
            endpoints: vec![],
            processes: vec![],
            overhead: None,
            totals: ebtop::summary::Summary::default(),
            open_connections: 0,
            flows: None,
            windows: None,
            conns: None,
            sampling: None,
            profile: None,
            profile_status: Some("PROFILING spin (42) 8s more [cpu>80%]".to_owned()),
        },
    )));
    assert!(screen(&app, 120, 40).contains("PROFILING spin (42) 8s more [cpu>80%]"));
}

/// A recording made with `--profile-when` (a C loop crossing `cpu>20%:2/3`, profiled 2 s,
/// then 60 s of silence): its trigger events (kind 9).
const TRIGGER_FIXTURE: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/tests/fixtures/recordings/profile_trigger.ebt"
);

/// The replay's header (its third line) shows the PROFILING line the live header showed
/// while the run lasted (process, pid and rule of the recorded start), then its silence; a snapshot of the
/// first screen with it.
#[test]
fn replay_header_shows_profiling_while_a_recorded_trigger_runs() {
    let mut app = App::new("replay profile_trigger.ebt", Duration::from_secs(1), true);
    app.set_size(120, 40);
    let (mut profiling, mut silent) = (None, false);
    for m in collect_replay(TRIGGER_FIXTURE.as_ref()).unwrap() {
        app.apply(m);
        let s = screen(&app, 120, 40);
        // The header's third line holds it (with REC and the capture filters).
        let header = s.lines().take(3).collect::<Vec<_>>().join("\n");
        if profiling.is_none() && header.contains("PROFILING") {
            profiling = Some(s);
        } else if profiling.is_some() && header.contains("profile: silent") {
            silent = true;
        }
        assert!(
            !(silent && header.contains("PROFILING")),
            "profiling again after the silence began: {header}"
        );
    }
    let shown = profiling.expect("a screen with PROFILING");
    let header = shown.lines().nth(2).unwrap();
    assert!(
        header.contains("PROFILING spin (25369)") && header.contains("[cpu>20%:2/3]"),
        "{header}"
    );
    assert!(silent, "the silence after the run is shown");
    insta::assert_snapshot!("replay_profiling_header_120x40", shown);
}
