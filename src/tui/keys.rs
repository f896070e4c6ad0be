//! The one list of the TUI's keys: the help overlay shows it, the footer picks from it, and a
//! test checks README.md ("## Keys") and man/ebtop.1 (".SH KEYS") name every key in it.

/// Keys (as a user types them, separated by spaces) and what they do.
#[derive(Debug, Clone, Copy)]
pub struct KeyHelp {
    pub keys: &'static [&'static str],
    pub action: &'static str,
}

pub const KEYS: &[KeyHelp] = &[
    KeyHelp {
        keys: &["q", "Ctrl-C", "F10"],
        action: "quit (q first closes details or a drill-down)",
    },
    KeyHelp {
        keys: &["?", "F1"],
        action: "help (any key closes it)",
    },
    KeyHelp {
        keys: &["Tab", "Shift-Tab", "1", "2", "3", "4", "5"],
        action: "next/prev view, 1-5 (5 profile); details: parent/child",
    },
    KeyHelp {
        keys: &["Up", "Down", "j", "k"],
        action: "move the selection; in call details: scroll",
    },
    KeyHelp {
        keys: &["PgUp", "PgDn"],
        action: "move by a page",
    },
    KeyHelp {
        keys: &["g", "G", "Home", "End", "f"],
        action: "first / last row; calls: g or f follow the newest call",
    },
    KeyHelp {
        keys: &["Enter"],
        action: "details (call, flow, process, ▸ group); endpoint: calls",
    },
    KeyHelp {
        keys: &["Backspace", "Esc"],
        action: "back (selection kept; along a chain followed)",
    },
    KeyHelp {
        keys: &["/", "F4"],
        action: "filter: lat>100ms or err, proto:dns !status:NOERROR (Esc clears)",
    },
    KeyHelp {
        keys: &["F3"],
        action: "search: select the next match (Enter/F3: next)",
    },
    KeyHelp {
        keys: &["F6"],
        action: "sort by: pick a column from a menu (Esc: cancel)",
    },
    KeyHelp {
        keys: &["<", ">", "I"],
        action: "previous / next sort column; I: invert the order",
    },
    KeyHelp {
        keys: &["F5", "t"],
        action: "processes: as a tree (children under parents)",
    },
    KeyHelp {
        keys: &["b"],
        action: "endpoints: by process / command; processes: by command / pid",
    },
    KeyHelp {
        keys: &["c"],
        action: "endpoints: 10 s / 1 min / since start / interval",
    },
    KeyHelp {
        keys: &["o", "w", "P"],
        action: "profile: on/off-CPU; w: a process/all; P: profile a row",
    },
    KeyHelp {
        keys: &["p", "Space"],
        action: "pause the display (collection goes on; replay waits)",
    },
    KeyHelp {
        keys: &["[", "]", ".", ",", "{", "}"],
        action: "replay: pace ½× / 2×, 10 s ahead / back, start / end",
    },
    KeyHelp {
        keys: &["Left", "Right"],
        action: "scroll the long column (resource, command) left / right",
    },
    KeyHelp {
        keys: &[":"],
        action: "command line: views, filter, sort, goto, quit (Tab)",
    },
    KeyHelp {
        keys: &["+", "-"],
        action: "slower / faster display refresh (at least 100 ms)",
    },
];

/// The one-line hint shown at the bottom.
pub const FOOTER: &str =
    "q quit  ? help  1-4/Tab view  / filter  < > sort  I invert  Enter open  p pause";

/// Every key name in [`KEYS`].
pub fn all_keys() -> impl Iterator<Item = &'static str> {
    KEYS.iter().flat_map(|k| k.keys.iter().copied())
}
