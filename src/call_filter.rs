//! The filter language of `--filter` and of the terminal UI's `/`, and its evaluation on a
//! call. The pipeline applies it to the calls it hands to sinks; the UI's Calls view shows
//! the calls it keeps with it; the UI's other views evaluate the same words on their rows
//! (`tui::filter`), so an expression means the same everywhere.
//!
//! An expression is words that must all match, in groups joined by `or`:
//! `lat>100ms or err`, `proto:redis !status:OK`. A word is
//! - `field:text`, `field<op>number` (`>=`, `>`, `<=`, `<`, `=`), a keyword (`err`, `slow`,
//!   `loss`), or plain text anywhere in the call (case-insensitive);
//! - negated by a `!` before it.
//!
//! What `err` means is the call's own `outcome`, as its protocol's parser set it (the
//! table of docs/filters.md): never derived again here.

use std::borrow::Cow;

use crate::call::Call;
use crate::protocols::{Outcome, Protocol};

/// A call at least this slow is `slow` (and marked `*` in the Calls view).
pub const SLOW_NS: u64 = 50_000_000;

/// Words in an expression at most: a filter is typed, and each word costs every call a test.
pub const MAX_WORDS: usize = 64;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cmp {
    Ge,
    Gt,
    Le,
    Lt,
    Eq,
}

impl Cmp {
    pub fn holds(self, a: f64, b: f64) -> bool {
        match self {
            Cmp::Ge => a >= b,
            Cmp::Gt => a > b,
            Cmp::Le => a <= b,
            Cmp::Lt => a < b,
            Cmp::Eq => a == b,
        }
    }
}

/// A word as typed, without its `!`.
#[derive(Debug, Clone, PartialEq)]
pub struct Word {
    pub negated: bool,
    /// As typed (the error messages name it so).
    pub typed: String,
    /// Lower case.
    pub lower: String,
}

/// Splits an expression into groups of words joined by `or` (case-insensitive), at most
/// [`MAX_WORDS`] words. An `or` with nothing on one side is an error, not a word.
pub fn split(text: &str) -> Result<Vec<Vec<Word>>, String> {
    let mut groups: Vec<Vec<Word>> = vec![Vec::new()];
    let mut words = 0;
    for w in text.split_whitespace() {
        if w.eq_ignore_ascii_case("or") {
            if groups.last().is_some_and(Vec::is_empty) {
                return Err("`or` needs words on both sides".into());
            }
            groups.push(Vec::new());
            continue;
        }
        words += 1;
        if words > MAX_WORDS {
            return Err(format!("more than {MAX_WORDS} words"));
        }
        let (negated, body) = match w.strip_prefix('!') {
            Some(rest) if !rest.is_empty() => (true, rest),
            _ => (false, w),
        };
        if let Some(g) = groups.last_mut() {
            g.push(Word {
                negated,
                typed: w.to_owned(),
                lower: body.to_lowercase(),
            });
        }
    }
    match groups.as_slice() {
        [only] if only.is_empty() => Ok(Vec::new()),
        [.., last] if last.is_empty() => Err("`or` needs words on both sides".into()),
        _ => Ok(groups),
    }
}

/// Could be a field's name: letters, digits, `_`, a letter first. A word with anything else
/// before its operator is text (`?id=7`, `10:00`).
pub fn is_field_like(name: &str) -> bool {
    name.starts_with(|c: char| c.is_ascii_alphabetic())
        && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// `name`, operator, value of a comparison word (lower case), when its name could be a field.
pub fn comparison(lower: &str) -> Option<(&str, Cmp, &str)> {
    let at = lower.find(['<', '>', '='])?;
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
    is_field_like(name).then_some((name, cmp, value))
}

/// `12.5`, `7.1k`, `2M`, `1.5G` as numbers; `-` and other text: None.
pub fn number(text: &str) -> Option<f64> {
    let t = text.trim();
    let (digits, scale) = match t.as_bytes().last()? {
        b'k' | b'K' => (&t[..t.len() - 1], 1e3),
        // Typed words are lower-cased: `2m` is 2M.
        b'M' | b'm' => (&t[..t.len() - 1], 1e6),
        b'G' | b'g' => (&t[..t.len() - 1], 1e9),
        _ => (t, 1.0),
    };
    digits
        .parse::<f64>()
        .ok()
        .filter(|v| v.is_finite())
        .map(|v| v * scale)
}

/// A latency in milliseconds: a number in ms, or with a unit (`250us`, `250µs`, `100ms`,
/// `1.5s`).
pub fn duration_ms(text: &str) -> Option<f64> {
    let t = text.trim();
    let units: [(&str, f64); 5] = [
        ("us", 1e-3),
        ("µs", 1e-3),
        ("ns", 1e-6),
        ("ms", 1.0),
        ("s", 1e3),
    ];
    for (unit, scale) in units {
        if let Some(digits) = t.strip_suffix(unit) {
            return digits
                .parse::<f64>()
                .ok()
                .filter(|v| v.is_finite())
                .map(|v| v * scale);
        }
    }
    number(t)
}

/// What `outcome:` (and `err`) select: the call's outcome as its parser set it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OutcomeClass {
    Ok,
    /// A client or a server error.
    Error,
    ServerError,
    ClientError,
    Unknown,
}

impl OutcomeClass {
    pub const WORDS: &'static str = "ok, error, server_error, client_error, unknown";

    pub fn parse(word: &str) -> Result<OutcomeClass, String> {
        Ok(match word {
            "ok" => OutcomeClass::Ok,
            "error" | "err" => OutcomeClass::Error,
            "server_error" | "server" | "serr" => OutcomeClass::ServerError,
            "client_error" | "client" | "cerr" => OutcomeClass::ClientError,
            "unknown" => OutcomeClass::Unknown,
            _ => return Err(format!("outcome is one of {}", Self::WORDS)),
        })
    }

    pub fn holds(self, o: Outcome) -> bool {
        match self {
            OutcomeClass::Ok => o == Outcome::Ok,
            OutcomeClass::Error => matches!(o, Outcome::ServerError | Outcome::ClientError),
            OutcomeClass::ServerError => o == Outcome::ServerError,
            OutcomeClass::ClientError => o == Outcome::ClientError,
            OutcomeClass::Unknown => o == Outcome::Unknown,
        }
    }
}

/// Whether `value` names this protocol: its name (`http`, `grpc`) or its name as the views
/// write it over TLS (`https`, `redis+tls`).
pub fn names_protocol(value: &str, proto: Protocol, tls: bool) -> bool {
    let name = proto.name();
    if value.eq_ignore_ascii_case(name) {
        return true;
    }
    tls && match name {
        "http" => value.eq_ignore_ascii_case("https"),
        _ => value
            .strip_suffix("+tls")
            .is_some_and(|v| v.eq_ignore_ascii_case(name)),
    }
}

/// Whether a status written `status` (a number, a word, `?` or `-`) is what `status:value`
/// asks for: the same word (case-insensitive; `status:ERR` is not `NOERROR`), or a class of
/// numbers (`5xx`).
pub fn status_is(value: &str, status: &str) -> bool {
    if let Some(class) = value
        .strip_suffix("xx")
        .filter(|c| c.len() == 1 && c.as_bytes()[0].is_ascii_digit())
    {
        return status.len() == 3
            && status.starts_with(class)
            && status.bytes().all(|b| b.is_ascii_digit());
    }
    value.eq_ignore_ascii_case(status)
}

/// A call's status as written in the Calls view and matched by `status:`: the number (HTTP),
/// the word (an error's name, a DNS rcode, a gRPC status), `?` when unknown, else `-`.
pub fn status_cell(l7: &crate::protocols::L7Call) -> Cow<'_, str> {
    match (l7.status, &l7.status_text) {
        (Some(s), _) => Cow::Owned(s.to_string()),
        (None, Some(t)) => Cow::Borrowed(t),
        (None, None) if l7.outcome == Outcome::Unknown => Cow::Borrowed("?"),
        (None, None) => Cow::Borrowed("-"),
    }
}

/// The call fields the language names, as the Calls view's columns do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum CallField {
    Process,
    Pid,
    Side,
    Proto,
    Method,
    Resource,
    Status,
    Lat,
    Req,
    Resp,
    Outcome,
}

const CALL_FIELDS: [(&str, CallField); 11] = [
    ("process", CallField::Process),
    ("pid", CallField::Pid),
    ("side", CallField::Side),
    ("proto", CallField::Proto),
    ("method", CallField::Method),
    ("resource", CallField::Resource),
    ("status", CallField::Status),
    ("lat", CallField::Lat),
    ("req", CallField::Req),
    ("resp", CallField::Resp),
    ("outcome", CallField::Outcome),
];

/// The field a name means: exact, an alias, or the only field it begins.
fn call_field(name: &str) -> Result<CallField, String> {
    let name = match name {
        "comm" => "process",
        "path" | "key" | "query" => "resource",
        n => n,
    };
    if let Some((_, f)) = CALL_FIELDS.iter().find(|(n, _)| *n == name) {
        return Ok(*f);
    }
    let mut begun = CALL_FIELDS.iter().filter(|(n, _)| n.starts_with(name));
    match (begun.next(), begun.next()) {
        (Some((_, f)), None) if !name.is_empty() => Ok(*f),
        _ => Err(format!(
            "no field {name:?} for calls (fields: {})",
            CALL_FIELDS.map(|(n, _)| n).join(", ")
        )),
    }
}

/// Names of other views' fields: `name:text` with one of them is meant as a field (an error
/// for calls), while other `word:text` (`user:1000`, `localhost:8080`) is text.
pub const OTHER_VIEW_FIELDS: &[&str] = &[
    "time", "calls", "serr", "cerr", "p50", "p90", "p99", "max", "local", "peer", "conns", "cpu",
    "rss", "in", "out", "sysc", "tls", "pod", "command", "state", "age", "srtt", "retr", "l7",
];

#[derive(Debug, Clone, PartialEq)]
enum Test {
    /// Lower-case text in the call's fields as shown.
    Text(String),
    /// Process label (`comm/pid`) or resource containing lower-case text.
    Contains(CallField, String),
    Pid(Cmp, f64),
    Side(crate::call::Side),
    Proto(String),
    Method(String),
    Status(String),
    StatusNumber(Cmp, f64),
    /// Latency compared in ms.
    Lat(Cmp, f64),
    Req(Cmp, f64),
    Resp(Cmp, f64),
    Outcome(OutcomeClass),
    Slow,
    Loss,
}

#[derive(Debug, Clone, PartialEq)]
struct Term {
    negated: bool,
    test: Test,
}

/// A parsed expression over calls; the empty one lets every call through.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct CallFilter {
    groups: Vec<Vec<Term>>,
    text: String,
}

fn field_term(field: CallField, value: &str) -> Result<Test, String> {
    Ok(match field {
        CallField::Process | CallField::Resource => Test::Contains(field, value.to_owned()),
        CallField::Pid => Test::Pid(
            Cmp::Eq,
            number(value).ok_or_else(|| format!("{value:?} is not a number"))?,
        ),
        CallField::Side => match value {
            "client" => Test::Side(crate::call::Side::Client),
            "server" => Test::Side(crate::call::Side::Server),
            _ => return Err("side is client or server".into()),
        },
        CallField::Proto => {
            let known = Protocol::all().any(|p| names_protocol(value, p, true));
            if !known {
                let names: Vec<&str> = Protocol::all().map(Protocol::name).collect();
                return Err(format!(
                    "no protocol {value:?} (protocols: {})",
                    names.join(", ")
                ));
            }
            Test::Proto(value.to_owned())
        }
        CallField::Method => Test::Method(value.to_owned()),
        CallField::Status => Test::Status(value.to_owned()),
        CallField::Outcome => Test::Outcome(OutcomeClass::parse(value)?),
        CallField::Lat | CallField::Req | CallField::Resp => {
            return Err("compare it with a number (`lat>100ms`, `req>=1k`)".into())
        }
    })
}

fn compare_term(field: CallField, cmp: Cmp, value: &str) -> Result<Test, String> {
    let not_a_number = || format!("{value:?} is not a number");
    Ok(match field {
        CallField::Lat => Test::Lat(cmp, duration_ms(value).ok_or_else(not_a_number)?),
        CallField::Req => Test::Req(cmp, number(value).ok_or_else(not_a_number)?),
        CallField::Resp => Test::Resp(cmp, number(value).ok_or_else(not_a_number)?),
        CallField::Pid => Test::Pid(cmp, number(value).ok_or_else(not_a_number)?),
        CallField::Status => match number(value) {
            Some(v) => Test::StatusNumber(cmp, v),
            // `status=NOERROR`: the word, exactly.
            None if cmp == Cmp::Eq => Test::Status(value.to_owned()),
            None => return Err(not_a_number()),
        },
        other if cmp == Cmp::Eq => field_term(other, value)?,
        _ => return Err("not a number to compare".into()),
    })
}

fn parse_term(w: &Word) -> Result<Test, String> {
    let lower = w.lower.as_str();
    match lower {
        "err" => return Ok(Test::Outcome(OutcomeClass::Error)),
        "slow" => return Ok(Test::Slow),
        "loss" => return Ok(Test::Loss),
        _ => {}
    }
    if let Some((name, cmp, value)) = comparison(lower) {
        match call_field(name) {
            Ok(f) => return compare_term(f, cmp, value),
            // A number compared with no field: as text it would match nothing.
            Err(e) if number(value).is_some() || OTHER_VIEW_FIELDS.contains(&name) => {
                return Err(e)
            }
            Err(_) => {}
        }
    }
    if let Some((name, value)) = lower.split_once(':') {
        if is_field_like(name) {
            match call_field(name) {
                Ok(f) => return field_term(f, value),
                Err(e) if OTHER_VIEW_FIELDS.contains(&name) => return Err(e),
                Err(_) => {}
            }
        }
    }
    Ok(Test::Text(lower.to_owned()))
}

impl CallFilter {
    /// Parses an expression; the error says why, naming the word when there are several.
    pub fn parse(text: &str) -> Result<CallFilter, String> {
        let groups = split(text)?;
        let several = groups.iter().map(Vec::len).sum::<usize>() > 1;
        let groups = groups
            .iter()
            .map(|g| {
                g.iter()
                    .map(|w| {
                        parse_term(w)
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
            .collect::<Result<Vec<_>, _>>()?;
        Ok(CallFilter {
            groups,
            text: text.split_whitespace().collect::<Vec<_>>().join(" "),
        })
    }

    pub fn is_empty(&self) -> bool {
        self.groups.is_empty()
    }

    /// The expression as given (words joined by single spaces).
    pub fn text(&self) -> &str {
        &self.text
    }

    pub fn matches(&self, call: &Call) -> bool {
        if self.groups.is_empty() {
            return true;
        }
        let mut text: Option<String> = None;
        self.groups.iter().any(|g| {
            g.iter()
                .all(|t| test(&t.test, call, &mut text) != t.negated)
        })
    }
}

/// The text plain words are looked for in: the Calls view's cells but the time.
fn call_text(c: &Call) -> String {
    let proto = if c.tls {
        match c.l7.proto.name() {
            "http" => "https".to_owned(),
            p => format!("{p}+tls"),
        }
    } else {
        c.l7.proto.name().to_owned()
    };
    format!(
        "{}/{} {} {} {} {} {}",
        c.comm,
        c.pid,
        c.side.name(),
        proto,
        c.l7.method,
        c.l7.resource,
        status_cell(&c.l7)
    )
    .to_lowercase()
}

fn contains_lower(hay: &str, needle: &str) -> bool {
    hay.to_lowercase().contains(needle)
}

fn test(t: &Test, c: &Call, text: &mut Option<String>) -> bool {
    match t {
        Test::Text(w) => text
            .get_or_insert_with(|| call_text(c))
            .contains(w.as_str()),
        Test::Contains(CallField::Process, w) => {
            contains_lower(&format!("{}/{}", c.comm, c.pid), w)
        }
        Test::Contains(_, w) => contains_lower(&c.l7.resource, w),
        Test::Pid(cmp, v) => cmp.holds(f64::from(c.pid), *v),
        Test::Side(s) => c.side == *s,
        Test::Proto(p) => names_protocol(p, c.l7.proto, c.tls),
        Test::Method(m) => c.l7.method.eq_ignore_ascii_case(m),
        Test::Status(s) => status_is(s, &status_cell(&c.l7)),
        Test::StatusNumber(cmp, v) => c.l7.status.is_some_and(|s| cmp.holds(f64::from(s), *v)),
        Test::Lat(cmp, v) => cmp.holds(c.latency_ns as f64 / 1e6, *v),
        Test::Req(cmp, v) => cmp.holds(c.l7.req.bytes as f64, *v),
        Test::Resp(cmp, v) => cmp.holds(c.l7.resp.bytes as f64, *v),
        Test::Outcome(o) => o.holds(c.l7.outcome),
        Test::Slow => c.latency_ns >= SLOW_NS,
        Test::Loss => c.after_loss,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::call::Side;

    fn call(proto: Protocol, status: Option<u32>, word: Option<&str>, outcome: Outcome) -> Call {
        let l7 = crate::protocols::L7Call {
            proto,
            request_dir: crate::event::Direction::Egress,
            method: "GET".into(),
            resource: "/api/orders".into(),
            version: "1.1",
            status,
            status_text: word.map(str::to_owned),
            outcome,
            req: Default::default(),
            resp: Default::default(),
            truncated: false,
            end_inferred: false,
            details: Vec::new(),
            req_head: Default::default(),
            resp_head: Default::default(),
        };
        let addr = "127.0.0.1:80".parse().unwrap();
        let mut c = Call::new(l7, 42, 42, "curl".into(), 1, addr, addr);
        c.latency_ns = 2_000_000;
        c
    }

    fn hits(expr: &str, calls: &[Call]) -> Vec<bool> {
        let f = CallFilter::parse(expr).unwrap_or_else(|e| panic!("{expr}: {e}"));
        calls.iter().map(|c| f.matches(c)).collect()
    }

    #[test]
    fn err_is_the_outcome_the_parser_set_in_every_protocol() {
        let calls = [
            call(Protocol::Http, Some(503), None, Outcome::ServerError),
            call(Protocol::Http, Some(404), None, Outcome::ClientError),
            call(Protocol::Http, Some(200), None, Outcome::Ok),
            call(Protocol::Redis, None, Some("ERR"), Outcome::ServerError),
            call(Protocol::Dns, None, Some("NOERROR"), Outcome::Ok),
            call(Protocol::Dns, None, Some("SERVFAIL"), Outcome::ServerError),
            call(Protocol::Grpc, None, Some("INTERNAL"), Outcome::ServerError),
            call(Protocol::Http2, None, None, Outcome::Unknown),
        ];
        let want_err = [true, true, false, true, false, true, true, false];
        assert_eq!(hits("err", &calls), want_err);
        assert_eq!(hits("outcome:error", &calls), want_err);
        assert_eq!(
            hits("outcome:server_error", &calls),
            [true, false, false, true, false, true, true, false]
        );
        assert_eq!(
            hits("outcome:unknown", &calls),
            [false, false, false, false, false, false, false, true]
        );
        let not_err: Vec<bool> = want_err.iter().map(|e| !e).collect();
        assert_eq!(hits("!err", &calls), not_err);
        // Status words compare exactly: ERR is not NOERROR.
        assert_eq!(
            hits("status:ERR", &calls),
            [false, false, false, true, false, false, false, false]
        );
        assert_eq!(
            hits("status:noerror", &calls),
            [false, false, false, false, true, false, false, false]
        );
        assert_eq!(
            hits("status:5xx", &calls),
            [true, false, false, false, false, false, false, false]
        );
        assert_eq!(
            hits("status>=400", &calls),
            [true, true, false, false, false, false, false, false]
        );
        assert_eq!(
            hits("status:?", &calls),
            [false, false, false, false, false, false, false, true]
        );
    }

    #[test]
    fn or_groups_units_and_fields() {
        let mut slow = call(Protocol::Http, Some(200), None, Outcome::Ok);
        slow.latency_ns = 400_000_000;
        let mut tls = call(Protocol::Http, Some(200), None, Outcome::Ok);
        tls.tls = true;
        tls.side = Side::Server;
        tls.after_loss = true;
        let failed = call(
            Protocol::Redis,
            None,
            Some("WRONGTYPE"),
            Outcome::ServerError,
        );
        let calls = [slow, tls, failed];
        assert_eq!(hits("lat>100ms or err", &calls), [true, false, true]);
        assert_eq!(hits("lat>100 OR err", &calls), [true, false, true]);
        assert_eq!(hits("lat>0.1s", &calls), [true, false, false]);
        assert_eq!(hits("lat<=2000us", &calls), [false, true, true]);
        assert_eq!(hits("slow", &calls), [true, false, false]);
        assert_eq!(hits("loss", &calls), [false, true, false]);
        assert_eq!(hits("proto:http", &calls), [true, true, false]);
        assert_eq!(hits("proto:https", &calls), [false, true, false]);
        assert_eq!(
            hits("proto:redis side:client", &calls),
            [false, false, true]
        );
        assert_eq!(
            hits("side:server or proto:redis", &calls),
            [false, true, true]
        );
        assert_eq!(hits("comm:cur pid=42", &calls), [true, true, true]);
        assert_eq!(hits("pid>42", &calls), [false, false, false]);
        assert_eq!(hits("curl/42", &calls), [true, true, true]);
        assert_eq!(hits("path:/api method:get", &calls), [true, true, true]);
        assert_eq!(hits("res:/none", &calls), [false, false, false]);
        assert_eq!(hits("https", &calls), [false, true, false]);
        assert_eq!(hits("", &calls), [true, true, true]);
        // Text that only looks like a field stays text.
        assert_eq!(
            hits("user:1000 or localhost:80", &calls),
            [false, false, false]
        );
        assert_eq!(hits("?id=7", &calls), [false, false, false]);
    }

    #[test]
    fn errors_name_the_word_and_what_is_understood() {
        let e = |s: &str| CallFilter::parse(s).unwrap_err();
        assert!(
            e("bogus>3").contains("fields: process, pid"),
            "{}",
            e("bogus>3")
        );
        assert!(e("lat>abc").contains("not a number"));
        assert!(e("proto:smtp").contains("protocols: http"));
        assert!(e("outcome:bad").contains("server_error"));
        assert!(e("side:up").contains("client or server"));
        assert!(e("p99>3").contains("no field"), "another view's field");
        assert!(e("lat:5").contains("compare"));
        assert!(e("or err").contains("`or`"));
        assert!(e("err or").contains("`or`"));
        assert!(e("err or or slow").contains("`or`"));
        assert!(e("err lat>x").starts_with("lat>x: "), "{}", e("err lat>x"));
        let many = vec!["x"; MAX_WORDS + 1].join(" ");
        assert!(e(&many).contains("words"));
        assert!(CallFilter::parse("  ").unwrap().is_empty());
        assert_eq!(
            CallFilter::parse(" err   or  slow ").unwrap().text(),
            "err or slow"
        );
    }

    #[test]
    fn numbers_and_durations_as_typed() {
        assert_eq!(number("7.1k"), Some(7100.0));
        assert_eq!(number("2M"), Some(2e6));
        assert_eq!(number("-"), None);
        assert_eq!(number("inf"), None);
        assert_eq!(duration_ms("100ms"), Some(100.0));
        assert_eq!(duration_ms("1.5s"), Some(1500.0));
        assert_eq!(duration_ms("250us"), Some(0.25));
        assert_eq!(duration_ms("7"), Some(7.0));
        assert_eq!(duration_ms("fast"), None);
    }
}
