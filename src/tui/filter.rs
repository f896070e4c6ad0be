//! The row filter typed after `/` (or F4) in the Endpoints, Flows and Processes views: the
//! language of `crate::call_filter` (docs/filters.md) evaluated on a view's rows. The Calls
//! view evaluates it on the calls themselves (`CallFilter`), so it means the same there as in
//! `--filter`.
//!
//! - `word`: the row's text contains it (case-insensitive);
//! - `!word`: it does not;
//! - `field:text`: that column contains the text (`comm:nginx`, `resource:/api`);
//! - `field>=N`, `field>N`, `field<=N`, `field<N`, `field=N`: that column's number compares
//!   (`calls>=100`, `p99>100` in the column's own unit, `7.1k` and `2M` understood);
//! - `proto:NAME`, `err`, `outcome:WORD`, `loss`: what the row says of its calls
//!   ([`Facets`]), in every view that has it;
//! - `!` before a field term negates it too (`!serr=0`); words joined by `or` make groups;
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
use crate::call_filter::{comparison, number, split, Cmp, OutcomeClass};

#[derive(Debug, Clone, PartialEq)]
enum Test {
    /// Lower-case text anywhere in the row.
    Text(String),
    /// Lower-case text in one column.
    Field(usize, String),
    /// A column's number compared with a value.
    Number(usize, Cmp, f64),
    /// The row has calls of this protocol (a name as `proto:` takes it, lower case).
    Proto(String),
    /// The row has calls of this outcome.
    Outcome(OutcomeClass),
    /// The row's count is marked `≥`.
    Loss,
}

#[derive(Debug, Clone, PartialEq)]
struct Term {
    negated: bool,
    test: Test,
}

/// A parsed filter: groups of terms joined by `or`; the empty filter lets every row through.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct RowFilter {
    groups: Vec<Vec<Term>>,
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

/// Whether a view with these columns has outcomes to filter on (a server-error column).
fn has_outcomes(cols: &[Column]) -> bool {
    cols.iter().any(|c| field_name(c) == "serr")
}

fn parse_term(w: &crate::call_filter::Word, cols: &[Column]) -> Result<Test, String> {
    let lower = w.lower.as_str();
    let no_outcomes = || "no call outcomes in this view (its rows are not calls)".to_owned();
    match lower {
        "err" if has_outcomes(cols) => return Ok(Test::Outcome(OutcomeClass::Error)),
        "err" => return Err(no_outcomes()),
        "loss" => return Ok(Test::Loss),
        "slow" => return Err("slow is for calls (the Calls view; here compare p99, max)".into()),
        _ => {}
    }
    if let Some(value) = lower.strip_prefix("proto:") {
        return Ok(Test::Proto(value.to_owned()));
    }
    if let Some(value) = lower.strip_prefix("outcome:") {
        if !has_outcomes(cols) {
            return Err(no_outcomes());
        }
        return Ok(Test::Outcome(OutcomeClass::parse(value)?));
    }
    // A comparison: name, operator, number.
    if let Some((name, cmp, value)) = comparison(lower) {
        match (find_field(name, cols), number(value)) {
            (Ok(col), Some(v)) => return Ok(Test::Number(col, cmp, v)),
            (Ok(_), None) => return Err(format!("{value:?} is not a number")),
            // A number compared with no column: as text it would hide every row.
            (Err(e), Some(_)) => return Err(e),
            // `user=bob`: text.
            (Err(_), None) => {}
        }
    }
    if let Some((name, text)) = lower.split_once(':') {
        match find_field(name, cols) {
            Ok(col) => return Ok(Test::Field(col, text.to_owned())),
            Err(e) if is_known_field(name) => return Err(e),
            Err(_) => {}
        }
    }
    Ok(Test::Text(lower.to_owned()))
}

impl RowFilter {
    /// Parses what was typed, for a view with these columns; the error says why, and which
    /// word is wrong when there are several (the line is short).
    pub fn parse(text: &str, cols: &[Column]) -> Result<RowFilter, String> {
        let groups = split(text)?;
        let several = groups.iter().map(Vec::len).sum::<usize>() > 1;
        let groups = groups
            .iter()
            .map(|g| {
                g.iter()
                    .map(|w| {
                        parse_term(w, cols)
                            .map(|test| Term {
                                negated: w.negated,
                                test,
                            })
                            .map_err(|e| {
                                if several {
                                    format!("{}: {e}", w.typed)
                                } else {
                                    e
                                }
                            })
                    })
                    .collect::<Result<Vec<_>, _>>()
            })
            .collect::<Result<_, _>>()?;
        Ok(RowFilter { groups })
    }

    pub fn is_empty(&self) -> bool {
        self.groups.is_empty()
    }

    pub fn matches(&self, row: &Row) -> bool {
        if self.groups.is_empty() {
            return true;
        }
        let mut text: Option<String> = None;
        self.groups.iter().any(|g| {
            g.iter()
                .all(|t| term_matches(&t.test, row, &mut text) != t.negated)
        })
    }
}

fn term_matches(test: &Test, row: &Row, text: &mut Option<String>) -> bool {
    match test {
        Test::Text(w) => text
            .get_or_insert_with(|| row.cells.join(" ").to_lowercase())
            .contains(w.as_str()),
        Test::Field(c, w) => row
            .cells
            .get(*c)
            .is_some_and(|cell| cell.to_lowercase().contains(w.as_str())),
        Test::Number(c, cmp, v) => row
            .cells
            .get(*c)
            .and_then(|cell| number(cell.trim_start_matches('≥').trim_end_matches('?')))
            .is_some_and(|n| cmp.holds(n, *v)),
        Test::Proto(p) => row.facets.protocols.iter().any(|name| name == p),
        Test::Outcome(o) => row.facets.outcomes.is_some_and(|f| match o {
            OutcomeClass::Ok => f.ok,
            OutcomeClass::Error => f.server_errors || f.client_errors,
            OutcomeClass::ServerError => f.server_errors,
            OutcomeClass::ClientError => f.client_errors,
            OutcomeClass::Unknown => f.unknown,
        }),
        Test::Loss => row.facets.loss,
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
            facets: Default::default(),
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
            assert!(matches!(f.groups[0][0].test, Test::Text(_)), "{w}");
        }
    }

    #[test]
    fn proto_err_and_loss_in_views_whose_rows_are_not_calls() {
        use super::super::flows::FLOW_TABLE_COLUMNS;
        use super::super::table::{protocol_names, Facets, OutcomeFacets};
        use crate::protocols::Protocol;
        let endpoint = |proto: Protocol, serr: u64, cerr: u64, loss: bool| Row {
            facets: Facets {
                protocols: protocol_names(proto, false),
                outcomes: Some(OutcomeFacets::of(10, serr, cerr, 0)),
                loss,
            },
            ..row(&[
                "dnsmasq", "server", "QUERY", "A x", "≥10", "1.0", "0.0", "0.0",
            ])
        };
        let rows = [
            endpoint(Protocol::Dns, 0, 3, false),
            endpoint(Protocol::Redis, 2, 0, true),
            endpoint(Protocol::Http, 0, 0, false),
        ];
        let hits = |s: &str| {
            let f = RowFilter::parse(s, ENDPOINT_COLUMNS).unwrap_or_else(|e| panic!("{s}: {e}"));
            rows.iter().map(|r| f.matches(r)).collect::<Vec<_>>()
        };
        assert_eq!(hits("proto:dns"), [true, false, false]);
        assert_eq!(hits("err"), [true, true, false]);
        assert_eq!(hits("outcome:server_error"), [false, true, false]);
        assert_eq!(hits("!err"), [false, false, true]);
        assert_eq!(hits("loss"), [false, true, false]);
        assert_eq!(hits("proto:http or loss"), [false, true, true]);
        assert_eq!(
            hits("calls>=10"),
            [true, true, true],
            "a `≥` count is a number"
        );
        // The flow table's rows have no outcomes: refused, not a filter hiding every row.
        let e = RowFilter::parse("err", FLOW_TABLE_COLUMNS).unwrap_err();
        assert!(e.contains("outcomes"), "{e}");
        assert!(RowFilter::parse("proto:tcp or proto:dns", FLOW_TABLE_COLUMNS).is_ok());
        assert!(RowFilter::parse("or", ENDPOINT_COLUMNS).is_err());
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
