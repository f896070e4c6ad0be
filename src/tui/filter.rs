//! The row filter typed after `/` (or F4): words that must all match a row.
//!
//! - `word`: the row's text contains it (case-insensitive);
//! - `!word`: it does not;
//! - `field:text`: that column contains the text (`comm:nginx`, `resource:/api`);
//! - `field>=N`, `field>N`, `field<=N`, `field<N`, `field=N`: that column's number compares
//!   (`status>=500`, `lat>100` in the column's own unit, `7.1k` and `2M` understood);
//! - `!` before a field term negates it too (`!status=200`);
//! - a comparison whose field is no column here is an error that names the view's fields
//!   (`status>=500` in the Endpoints view, `bogus<3`), and so is `field:text` with a field
//!   of another view (`path:/api` in the Processes view): either would hide every row;
//! - other words are plain text: `http://x`, `localhost:8080`, `user:1000`, `user=bob`, and
//!   anything with a character no field name has before its operator (`?id=7`).
//!
//! Fields are named by their column's title, lower case, up to its first space or `/`
//! (`process`, `status`, `lat`, `calls/s` as `calls`), or by a prefix of it; `comm` names the
//! process column and `path` the resource column.

use super::table::{Column, Row, CALL_COLUMNS, CONN_COLUMNS, ENDPOINT_COLUMNS, PROCESS_COLUMNS};

#[derive(Debug, Clone, Copy, PartialEq)]
enum Cmp {
    Ge,
    Gt,
    Le,
    Lt,
    Eq,
}

#[derive(Debug, Clone, PartialEq)]
enum Test {
    /// Lower-case text anywhere in the row.
    Text(String),
    /// Lower-case text in one column.
    Field(usize, String),
    /// A column's number compared with a value.
    Number(usize, Cmp, f64),
}

#[derive(Debug, Clone, PartialEq)]
struct Term {
    negated: bool,
    test: Test,
}

/// A parsed filter; the empty filter lets every row through.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct RowFilter {
    terms: Vec<Term>,
}

/// A column's field name: its title in lower case up to a space or `/` (`PROCESS/PID` →
/// `process`, `LAT ms` → `lat`, `CALLS/s` → `calls`).
fn field_name(c: &Column) -> String {
    c.title
        .split([' ', '/'])
        .next()
        .unwrap_or("")
        .to_ascii_lowercase()
}

/// The column a field name means: exact name, an alias, or the only column it prefixes.
fn find_field(name: &str, cols: &[Column]) -> Result<usize, String> {
    let names: Vec<String> = cols.iter().map(field_name).collect();
    let want = match name {
        "comm" | "pid" if names.iter().any(|n| n == "process") => "process",
        "path" | "key" | "query" if names.iter().any(|n| n == "resource") => "resource",
        n => n,
    };
    if let Some(i) = names.iter().position(|n| n == want) {
        return Ok(i);
    }
    let prefixed: Vec<usize> = (0..names.len())
        .filter(|&i| names[i].starts_with(want))
        .collect();
    match prefixed[..] {
        [i] => Ok(i),
        _ => {
            let mut fields: Vec<&str> = Vec::new();
            for n in &names {
                // `CALLS` and `CALLS/s` are both `calls`: named once.
                if !n.is_empty() && !fields.contains(&n.as_str()) {
                    fields.push(n);
                }
            }
            Err(format!(
                "no column {name:?} here (fields: {})",
                fields.join(", ")
            ))
        }
    }
}

/// Could be a field's name: letters, digits, `_`, a letter first. A word with anything else
/// before its operator is text (`?id=7`, `10:00`).
fn is_field_like(name: &str) -> bool {
    name.starts_with(|c: char| c.is_ascii_alphabetic())
        && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// A field of some view (or an alias): `name:text` with it is meant as a field term even
/// where the view lacks it, while other `word:text` (`user:1000`, `localhost:8080`) is text.
fn is_known_field(name: &str) -> bool {
    matches!(name, "comm" | "pid" | "path" | "key" | "query")
        || [
            CALL_COLUMNS,
            ENDPOINT_COLUMNS,
            CONN_COLUMNS,
            PROCESS_COLUMNS,
            super::flows::FLOW_TABLE_COLUMNS,
        ]
        .iter()
        .flat_map(|cols| cols.iter())
        .any(|c| field_name(c) == name)
}

/// `12.5`, `7.1k`, `2M`, `1.5G` as numbers; `-` and other text: None.
fn number(text: &str) -> Option<f64> {
    let t = text.trim();
    let (digits, scale) = match t.as_bytes().last()? {
        b'k' | b'K' => (&t[..t.len() - 1], 1e3),
        b'M' => (&t[..t.len() - 1], 1e6),
        b'G' => (&t[..t.len() - 1], 1e9),
        _ => (t, 1.0),
    };
    digits
        .parse::<f64>()
        .ok()
        .filter(|v| v.is_finite())
        .map(|v| v * scale)
}

fn parse_term(word: &str, cols: &[Column]) -> Result<Term, String> {
    let (negated, body) = match word.strip_prefix('!') {
        Some(rest) if !rest.is_empty() => (true, rest),
        _ => (false, word),
    };
    let lower = body.to_ascii_lowercase();
    // A comparison: name, operator, number.
    if let Some(at) = lower.find(['<', '>', '=']) {
        let (name, rest) = lower.split_at(at);
        let (cmp, value) = if let Some(v) = rest.strip_prefix(">=") {
            (Cmp::Ge, v)
        } else if let Some(v) = rest.strip_prefix("<=") {
            (Cmp::Le, v)
        } else if let Some(v) = rest.strip_prefix('>') {
            (Cmp::Gt, v)
        } else if let Some(v) = rest.strip_prefix('<') {
            (Cmp::Lt, v)
        } else {
            (Cmp::Eq, rest.trim_start_matches('=')) // `=` or `==`
        };
        if is_field_like(name) {
            match (find_field(name, cols), number(value)) {
                (Ok(col), Some(v)) => {
                    return Ok(Term {
                        negated,
                        test: Test::Number(col, cmp, v),
                    })
                }
                (Ok(_), None) => return Err(format!("{value:?} is not a number")),
                // A number compared with no column: as text it would hide every row.
                (Err(e), Some(_)) => return Err(e),
                // `user=bob`: text.
                (Err(_), None) => {}
            }
        }
    }
    if let Some((name, text)) = lower.split_once(':') {
        match find_field(name, cols) {
            Ok(col) => {
                return Ok(Term {
                    negated,
                    test: Test::Field(col, text.to_owned()),
                })
            }
            Err(e) if is_known_field(name) => return Err(e),
            Err(_) => {}
        }
    }
    Ok(Term {
        negated,
        test: Test::Text(lower),
    })
}

impl RowFilter {
    /// Parses what was typed, for a view with these columns; the error says why, and which
    /// word is wrong when there are several (the line is short).
    pub fn parse(text: &str, cols: &[Column]) -> Result<RowFilter, String> {
        let several = text.split_whitespace().nth(1).is_some();
        let terms = text
            .split_whitespace()
            .map(|w| parse_term(w, cols).map_err(|e| if several { format!("{w}: {e}") } else { e }))
            .collect::<Result<_, _>>()?;
        Ok(RowFilter { terms })
    }

    pub fn is_empty(&self) -> bool {
        self.terms.is_empty()
    }

    pub fn matches(&self, row: &Row) -> bool {
        let mut text: Option<String> = None;
        self.terms.iter().all(|t| {
            let hit = match &t.test {
                Test::Text(w) => text
                    .get_or_insert_with(|| row.cells.join(" ").to_ascii_lowercase())
                    .contains(w.as_str()),
                Test::Field(c, w) => row
                    .cells
                    .get(*c)
                    .is_some_and(|cell| cell.to_ascii_lowercase().contains(w.as_str())),
                Test::Number(c, cmp, v) => row
                    .cells
                    .get(*c)
                    .and_then(|cell| number(cell))
                    .is_some_and(|n| match cmp {
                        Cmp::Ge => n >= *v,
                        Cmp::Gt => n > *v,
                        Cmp::Le => n <= *v,
                        Cmp::Lt => n < *v,
                        Cmp::Eq => n == *v,
                    }),
            };
            hit != t.negated
        })
    }
}

#[cfg(test)]
mod tests {
    use super::super::table::Flag;
    use super::*;

    fn row(cells: &[&str]) -> Row {
        Row {
            key: "k".into(),
            cells: cells.iter().map(|c| c.to_string()).collect(),
            sort: Vec::new(),
            flag: Flag::None,
        }
    }

    #[test]
    fn words_fields_comparisons_and_negation() {
        // TIME, PROCESS/PID, SIDE, PROTO, METHOD, RESOURCE, STATUS, LAT ms, REQ/RESP B
        let ok = row(&[
            "10:00:00.000",
            "nginx/12",
            "server",
            "http",
            "GET",
            "/health",
            "200",
            "0.31",
            "86/1.2k",
        ]);
        let err = row(&[
            "10:00:01.000",
            "curl/99",
            "client",
            "http",
            "POST",
            "/api/orders",
            "503",
            "120.50",
            "1.5k/40",
        ]);
        let f = |s: &str| RowFilter::parse(s, CALL_COLUMNS).unwrap();
        let hits = |s: &str| {
            [&ok, &err]
                .iter()
                .map(|r| f(s).matches(r))
                .collect::<Vec<_>>()
        };
        assert_eq!(hits(""), [true, true]);
        assert_eq!(hits("status>=500"), [false, true]);
        assert_eq!(hits("status=200"), [true, false]);
        assert_eq!(hits("!status=200"), [false, true]);
        assert_eq!(hits("lat>100"), [false, true]);
        assert_eq!(hits("lat<=0.31"), [true, false]);
        assert_eq!(hits("comm:nginx"), [true, false]);
        assert_eq!(hits("PROCESS:CURL"), [false, true]);
        assert_eq!(hits("!health"), [false, true]);
        assert_eq!(hits("http !health method:post"), [false, true]);
        assert_eq!(hits("path:/api"), [false, true]);
        assert_eq!(
            hits("res:/health"),
            [true, false],
            "a prefix names a column"
        );
        // Words that only look like field terms are text.
        assert_eq!(hits("/api/orders=x"), [false, false]);
        assert_eq!(hits("orders"), [false, true]);
        assert_eq!(hits("/api/orders?x=1"), [false, false]);
        assert_eq!(hits("user=bob"), [false, false]);
        assert_eq!(hits("10:00:01"), [false, true]);
        assert!(find_field("bogus", CALL_COLUMNS)
            .unwrap_err()
            .contains("status"));
        // A known field compared with what is not a number: said.
        let e = RowFilter::parse("status>=abc", CALL_COLUMNS).unwrap_err();
        assert!(e.contains("not a number"), "{e}");
        // A lone `!` or `:` is text.
        assert!(RowFilter::parse("! :x", CALL_COLUMNS).is_ok());
    }

    #[test]
    fn fields_the_view_lacks_are_errors_that_name_its_fields() {
        use super::super::flows::FLOW_TABLE_COLUMNS;
        // Endpoints have no status column: an error naming theirs, not a filter hiding all.
        let e = RowFilter::parse("status>=500", ENDPOINT_COLUMNS).unwrap_err();
        assert!(
            e.starts_with("no column \"status\" here (fields: process,"),
            "{e}"
        );
        assert!(e.contains("serr") && e.contains("p99"), "{e}");
        assert_eq!(e.matches("calls").count(), 1, "{e}");
        assert!(RowFilter::parse("serr>=1", ENDPOINT_COLUMNS).is_ok());
        // Among several words, the wrong one is named.
        let e = RowFilter::parse("comm:nginx status>=500", ENDPOINT_COLUMNS).unwrap_err();
        assert!(e.starts_with("status>=500: no column"), "{e}");
        // An unknown name compared with a number, negated or not.
        for w in ["bogus>3", "!bogus=0", "id=7", "latency<=1.5k"] {
            let e = RowFilter::parse(w, CALL_COLUMNS).unwrap_err();
            assert!(
                e.contains("no column") && e.contains("resource"),
                "{w}: {e}"
            );
        }
        // Another view's field with `:`.
        let e = RowFilter::parse("path:/api", PROCESS_COLUMNS).unwrap_err();
        assert!(
            e.contains("no column \"path\"") && e.contains("command"),
            "{e}"
        );
        let e = RowFilter::parse("method:get", FLOW_TABLE_COLUMNS).unwrap_err();
        assert!(e.contains("proto") && e.contains("local"), "{e}");
        // Text with `:` or `=` that names no field stays text.
        for w in [
            "http://x",
            "localhost:8080",
            "[::1]:80",
            "fe80::1",
            "user:1000",
            "session:abc",
            "?id=7",
            "user=bob",
            "x=y",
        ] {
            let f = RowFilter::parse(w, FLOW_TABLE_COLUMNS).unwrap();
            assert!(matches!(f.terms[0].test, Test::Text(_)), "{w}");
        }
    }

    #[test]
    fn numbers_as_the_columns_write_them() {
        assert_eq!(number("7.1k"), Some(7100.0));
        assert_eq!(number("2M"), Some(2e6));
        assert_eq!(number("-"), None);
        assert_eq!(number("n/a"), None);
        assert_eq!(number("inf"), None);
    }
}
