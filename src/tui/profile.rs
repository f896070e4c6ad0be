//! The Profile view (`5`): the session's profile (`--profile`, or a recording that holds one)
//! as a top-down tree — a flame graph as text — with each frame's total and self share,
//! expand/collapse, search, the on-CPU / off-CPU toggle and a one-process filter. The tree is
//! made by `profile::tree` from the profile the intervals brought (`Data::profile`).

use std::collections::HashSet;

use crossterm::event::KeyCode;
use ratatui::layout::Rect;
use ratatui::style::{Modifier, Style};
use ratatui::text::Line;
use ratatui::widgets::Paragraph;
use ratatui::Frame;

use crate::profile::tree::{percent, Row, Tree, TreeOptions};
use crate::profile::Profile;

/// The view's state (kept while it is closed).
#[derive(Debug, Clone, Default)]
pub struct ProfileUi {
    pub open: bool,
    pub opts: TreeOptions,
    /// Paths of the open nodes; none yet: the hottest path opens on the first drawing.
    pub expanded: HashSet<String>,
    touched: bool,
    /// The selected row's path (its position when it goes away).
    pub selected: Option<String>,
    pub index: usize,
    pub search: String,
    pub searching: bool,
    pub first_row: std::cell::Cell<usize>,
}

impl ProfileUi {
    pub fn tree(&self, p: &Profile) -> Tree {
        Tree::build(p, &self.opts)
    }

    /// The rows shown, the hottest path opened while the user has opened or closed nothing.
    pub fn rows(&self, tree: &Tree) -> Vec<Row> {
        if !self.touched {
            let hot: HashSet<String> = tree.hottest_paths().into_iter().collect();
            return tree.rows(&hot, &self.search);
        }
        tree.rows(&self.expanded, &self.search)
    }

    fn selected_at(&self, tree: &Tree, rows: &[Row]) -> usize {
        self.selected
            .as_ref()
            .and_then(|s| rows.iter().position(|r| &tree.path(r.node) == s))
            .unwrap_or(self.index.min(rows.len().saturating_sub(1)))
    }

    fn select(&mut self, tree: &Tree, rows: &[Row], i: usize) {
        let i = i.min(rows.len().saturating_sub(1));
        self.index = i;
        self.selected = rows.get(i).map(|r| tree.path(r.node));
    }

    /// A key while the view is open; false: not the view's (the caller's usual handling).
    pub fn key(&mut self, code: KeyCode, profile: Option<&Profile>, page: usize) -> bool {
        if self.searching {
            match code {
                KeyCode::Char(c) => self.search.push(c),
                KeyCode::Backspace => {
                    self.search.pop();
                }
                KeyCode::Enter => self.searching = false,
                KeyCode::Esc => {
                    self.search.clear();
                    self.searching = false;
                }
                _ => {}
            }
            return true;
        }
        let empty = Profile::default();
        let tree = self.tree(profile.unwrap_or(&empty));
        let rows = self.rows(&tree);
        let at = self.selected_at(&tree, &rows);
        let path = rows.get(at).map(|r| tree.path(r.node));
        match code {
            KeyCode::Up | KeyCode::Char('k') => self.select(&tree, &rows, at.saturating_sub(1)),
            KeyCode::Down | KeyCode::Char('j') => self.select(&tree, &rows, at + 1),
            KeyCode::PageUp => self.select(&tree, &rows, at.saturating_sub(page)),
            KeyCode::PageDown => self.select(&tree, &rows, at + page),
            KeyCode::Home | KeyCode::Char('g') => self.select(&tree, &rows, 0),
            KeyCode::End | KeyCode::Char('G') => self.select(&tree, &rows, usize::MAX),
            KeyCode::Enter
            | KeyCode::Right
            | KeyCode::Char('l')
            | KeyCode::Left
            | KeyCode::Char('h') => {
                let Some(row) = rows.get(at) else {
                    return true;
                };
                if !self.touched {
                    self.expanded = tree.hottest_paths().into_iter().collect();
                    self.touched = true;
                }
                let path = path.unwrap_or_default();
                let open = self.expanded.contains(&path);
                match code {
                    KeyCode::Enter if open => {
                        self.expanded.remove(&path);
                    }
                    KeyCode::Enter | KeyCode::Right | KeyCode::Char('l') if row.has_children => {
                        self.expanded.insert(path);
                    }
                    KeyCode::Left | KeyCode::Char('h') if open => {
                        self.expanded.remove(&path);
                    }
                    // Left on a closed node: to its parent.
                    KeyCode::Left | KeyCode::Char('h') => {
                        if let Some(parent) = rows[..at].iter().rposition(|r| r.depth < row.depth) {
                            self.select(&tree, &rows, parent);
                        }
                    }
                    _ => {}
                }
            }
            KeyCode::Char('o') => {
                self.opts.off_cpu = !self.opts.off_cpu;
                self.reset_expansion();
            }
            KeyCode::Char('w') => {
                (self.opts.pid, self.opts.tid) =
                    next_subject(profile, self.opts.pid, self.opts.tid);
                self.reset_expansion();
            }
            KeyCode::Char('/') | KeyCode::F(4) => {
                self.searching = true;
                self.search.clear();
            }
            _ => return false,
        }
        true
    }

    fn reset_expansion(&mut self) {
        self.expanded.clear();
        self.touched = false;
        self.selected = None;
        self.index = 0;
    }

    /// The header line of the view (also the hint while typing a search).
    pub fn title(&self, profile: Option<&Profile>, tree: &Tree) -> String {
        let side = if self.opts.off_cpu {
            "off-CPU time"
        } else {
            "on-CPU samples"
        };
        let who = match (self.opts.pid, profile) {
            (Some(pid), Some(p)) => format!(
                "{}-{pid}{}",
                p.processes.get(&pid).map_or("?", |t| t.comm.as_str()),
                self.opts
                    .tid
                    .map_or(String::new(), |t| format!(" thread {t}"))
            ),
            _ => "all processes".to_owned(),
        };
        let total = tree.root_total();
        let amount = if self.opts.off_cpu {
            time_str(total)
        } else {
            format!("{total} samples")
        };
        let mut s = String::new();
        // The search first: a narrow terminal cuts the line's end.
        if !self.search.is_empty() || self.searching {
            let m = tree.matched_total(&self.search);
            s.push_str(&format!(
                "search \"{}\": {}% of the total  ",
                self.search,
                percent(m, total)
            ));
        }
        s.push_str(&format!(
            "Profile: {side} of {who}, since the start: {amount}"
        ));
        s
    }

    pub fn draw(&self, f: &mut Frame, area: Rect, profile: Option<&Profile>, no_color: bool) {
        let empty = Profile::default();
        let p = profile.unwrap_or(&empty);
        let tree = self.tree(p);
        let rows = self.rows(&tree);
        let mut lines = vec![Line::from(self.title(profile, &tree))];
        if profile.is_none_or(|p| p.is_empty()) {
            lines.push(Line::from(""));
            lines.push(Line::from(
                "No profile: start ebtop with --profile (or --profile-when RULE), or replay a \
                 recording made with it.",
            ));
            f.render_widget(Paragraph::new(lines), area);
            return;
        }
        if rows.is_empty() {
            lines.push(Line::from(""));
            lines.push(Line::from(if self.search.is_empty() {
                "Nothing on this side yet (o: the other side; w: another process)."
            } else {
                "No frame matches the search."
            }));
            f.render_widget(Paragraph::new(lines), area);
            return;
        }
        lines.push(Line::from(format!(
            "  {:>6} {:>6} {:>9}  FRAME",
            "TOTAL",
            "SELF",
            if self.opts.off_cpu { "TIME" } else { "SAMPLES" }
        )));
        let at = self.selected_at(&tree, &rows);
        let height = usize::from(area.height).saturating_sub(2).max(1);
        // The selection stays in view; the first row moves only when it must.
        let mut first = self.first_row.get().min(rows.len().saturating_sub(1));
        if at < first {
            first = at;
        } else if at >= first + height {
            first = at + 1 - height;
        }
        self.first_row.set(first);
        let total = tree.root_total();
        let width = usize::from(area.width);
        for (i, r) in rows.iter().enumerate().skip(first).take(height) {
            let mark = if i == at { ">" } else { " " };
            let fold = match (r.has_children, r.expanded) {
                (false, _) => " ",
                (true, true) => "▾",
                (true, false) => "▸",
            };
            let value = if self.opts.off_cpu {
                time_str(r.total)
            } else {
                r.total.to_string()
            };
            let hit = if r.matched { "*" } else { " " };
            let text = format!(
                "{mark} {:>5.1}% {:>5.1}% {value:>9} {hit}{}{fold} {}",
                percent(r.total, total),
                percent(r.self_value, total),
                "  ".repeat(r.depth.min(40)),
                r.name
            );
            let text: String = text.chars().take(width).collect();
            let line = if i == at {
                let s = Style::new().add_modifier(Modifier::REVERSED);
                Line::styled(text, if no_color { Style::default() } else { s })
            } else {
                Line::from(text)
            };
            lines.push(line);
        }
        f.render_widget(Paragraph::new(lines), area);
    }
}

/// A time in the unit that suits it.
fn time_str(ns: u64) -> String {
    match ns {
        n if n >= 1_000_000_000 => format!("{:.2}s", n as f64 / 1e9),
        n if n >= 1_000_000 => format!("{:.1}ms", n as f64 / 1e6),
        n => format!("{}µs", n / 1000),
    }
}

/// The process after `current` in the profile (by pid), then all again.
/// The next of: all processes, then each process, each followed by its threads when the
/// stacks are kept per thread (`--profile-threads`), then all again.
fn next_subject(
    profile: Option<&Profile>,
    pid: Option<u32>,
    tid: Option<u32>,
) -> (Option<u32>, Option<u32>) {
    let Some(p) = profile else {
        return (None, None);
    };
    let mut pids: Vec<u32> = p.processes.keys().copied().collect();
    pids.sort_unstable();
    let threads = |pid: u32| -> Vec<u32> {
        let mut t: Vec<u32> = p
            .stacks
            .keys()
            .filter(|k| k.tgid == pid)
            .filter_map(|k| k.tid)
            .collect();
        t.sort_unstable();
        t.dedup();
        t
    };
    let next_pid = |after: Option<u32>| match after {
        None => pids.first().copied(),
        Some(c) => pids.iter().copied().find(|p| *p > c),
    };
    match pid {
        None => (next_pid(None), None),
        Some(pid) => {
            let next_tid = match tid {
                None => threads(pid).first().copied(),
                Some(t) => threads(pid).into_iter().find(|x| *x > t),
            };
            match next_tid {
                Some(t) => (Some(pid), Some(t)),
                None => (next_pid(Some(pid)), None),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::profile::{Frame, Kind, StackKey, Tally};

    /// `w` goes all → each process → its threads (when kept per thread) → all again.
    #[test]
    fn w_steps_through_processes_and_their_threads() {
        let mut p = Profile::default();
        for (tgid, tid) in [(3, Some(3)), (3, Some(4)), (9, None)] {
            p.add(
                StackKey {
                    tgid,
                    tid,
                    kind: Kind::OnCpu,
                    frames: [Frame::from("main")].into_iter().collect(),
                },
                "x",
                Tally { count: 1, ns: 0 },
            );
        }
        let mut at = (None, None);
        let mut seen = Vec::new();
        for _ in 0..6 {
            at = next_subject(Some(&p), at.0, at.1);
            seen.push(at);
        }
        assert_eq!(
            seen,
            [
                (Some(3), None),
                (Some(3), Some(3)),
                (Some(3), Some(4)),
                (Some(9), None),
                (None, None),
                (Some(3), None),
            ]
        );
        assert_eq!(next_subject(None, Some(3), None), (None, None));
    }
}
