//! Profiling triggers (`--profile-when RULE`, the terminal UI's `P` key): the profile's
//! programs stay loaded with their gate closed (nothing selected, one load per program run)
//! and a rule that holds opens it for the processes it names, for `--profile-for`; then the
//! gate closes and no rule fires for `--profile-silence`. Like SkyWalking Rover's thresholds.
//!
//! Rules (a small hand parser, one-line errors):
//! - `cpu>80%` — a process's CPU time (all threads; 100% is one core);
//! - `p99(/api/*)>200ms` — the interval p99 latency of endpoints whose resource matches the
//!   glob (`*` any text, `?` one character); the processes of those rows;
//! - `errors>5%` — a process's calls that ended in an error (server or client), or with a glob
//!   `errors(/api/*)>5%` those endpoints';
//! - then optionally `:M/N` (true in M of the last N intervals) or `:M/Ns` (of the last N
//!   seconds, in intervals of `--delay`); without it, one interval is enough.
//!   Comparisons: `>`, `>=`, `<`, `<=`.
//!
//! Pure: the engine is fed each interval's numbers and answers what to start or end.

use std::collections::{HashMap, VecDeque};
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::record::limits::{CappedSeq, CappedString};

#[derive(Clone, Debug, PartialEq)]
pub enum Metric {
    Cpu,
    P99(String),
    Errors(Option<String>),
}

#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Cmp {
    Gt,
    Ge,
    Lt,
    Le,
}

impl Cmp {
    fn holds(self, v: f64, t: f64) -> bool {
        match self {
            Cmp::Gt => v > t,
            Cmp::Ge => v >= t,
            Cmp::Lt => v < t,
            Cmp::Le => v <= t,
        }
    }
}

#[derive(Clone, Debug, PartialEq)]
pub struct Rule {
    pub text: String,
    pub metric: Metric,
    pub cmp: Cmp,
    /// Percent (cpu, errors) or nanoseconds (p99).
    pub threshold: f64,
    /// True in `need` of the last `of` intervals.
    pub need: usize,
    pub of: usize,
}

/// Most intervals a rule looks back over (`:M/N`).
pub const MAX_WINDOW: usize = 3600;

/// Parses a rule; `interval` turns `:M/Ns` into intervals.
pub fn parse(text: &str, interval: Duration) -> Result<Rule, String> {
    let t = text.trim();
    let err = |why: &str| Err(format!("--profile-when {t:?}: {why}"));
    let (cond, window) = match t.split_once(':') {
        Some((c, w)) => (c.trim(), Some(w.trim())),
        None => (t, None),
    };
    let name_end = cond
        .find(|c: char| !c.is_ascii_alphanumeric())
        .unwrap_or(cond.len());
    let (name, mut rest) = cond.split_at(name_end);
    let mut arg = None;
    if let Some(r) = rest.strip_prefix('(') {
        let Some(close) = r.find(')') else {
            return err("no ')' after the argument");
        };
        let a = r[..close].trim();
        if a.is_empty() {
            return err("an empty argument: give a glob, as p99(/api/*)");
        }
        arg = Some(a.to_owned());
        rest = &r[close + 1..];
    }
    let metric = match (name.to_ascii_lowercase().as_str(), arg) {
        ("cpu", None) => Metric::Cpu,
        ("cpu", Some(_)) => return err("cpu takes no argument (cpu>80%)"),
        ("p99", Some(g)) => Metric::P99(g),
        ("p99", None) => return err("p99 needs the endpoints' resource glob: p99(/api/*)>200ms"),
        ("errors", g) => Metric::Errors(g),
        ("", _) => return err("no metric: use cpu, p99(GLOB) or errors"),
        (other, _) => {
            return err(&format!(
                "unknown metric {other:?}: use cpu, p99(GLOB) or errors"
            ))
        }
    };
    let rest = rest.trim_start();
    let (cmp, value) = if let Some(v) = rest.strip_prefix(">=") {
        (Cmp::Ge, v)
    } else if let Some(v) = rest.strip_prefix("<=") {
        (Cmp::Le, v)
    } else if let Some(v) = rest.strip_prefix('>') {
        (Cmp::Gt, v)
    } else if let Some(v) = rest.strip_prefix('<') {
        (Cmp::Lt, v)
    } else {
        return err("no comparison: use >, >=, < or <= and a value (cpu>80%)");
    };
    let value = value.trim();
    let threshold = match metric {
        Metric::Cpu | Metric::Errors(_) => {
            let Some(n) = value.strip_suffix('%') else {
                return err("a share is given in percent (80%)");
            };
            match n.trim().parse::<f64>() {
                Ok(v) if v.is_finite() && v >= 0.0 => v,
                _ => return err(&format!("{value:?} is not a percentage")),
            }
        }
        Metric::P99(_) => match parse_ns(value) {
            Some(ns) => ns as f64,
            None => return err(&format!("{value:?} is not a time (200ms, 1.5s, 800us)")),
        },
    };
    let (need, of) = match window {
        None => (1, 1),
        Some(w) => {
            let Some((m, n)) = w.split_once('/') else {
                return err("the window is M/N or M/Ns (3/5s: true in 3 of the last 5 s)");
            };
            let Ok(need) = m.trim().parse::<usize>() else {
                return err(&format!("{m:?} is not a count of intervals"));
            };
            let n = n.trim();
            let of = if let Some(secs) = n.strip_suffix('s') {
                match secs.parse::<f64>() {
                    Ok(s) if s.is_finite() && s > 0.0 => {
                        let per = interval.as_secs_f64().max(1e-3);
                        (s / per).round().max(1.0) as usize
                    }
                    _ => return err(&format!("{n:?} is not a number of seconds")),
                }
            } else {
                match n.parse::<usize>() {
                    Ok(v) => v,
                    Err(_) => return err(&format!("{n:?} is not a count of intervals")),
                }
            };
            if need == 0 || need > of {
                return err(&format!(
                    "{need} of {of} intervals: M must be from 1 to N (at --delay {:?})",
                    interval
                ));
            }
            if of > MAX_WINDOW {
                return err(&format!("a window of at most {MAX_WINDOW} intervals"));
            }
            (need, of)
        }
    };
    Ok(Rule {
        text: t.to_owned(),
        metric,
        cmp,
        threshold,
        need,
        of,
    })
}

/// `200ms`, `1.5s`, `800us`/`800µs`, `50ns`.
fn parse_ns(s: &str) -> Option<u64> {
    let units = [
        ("ms", 1e6),
        ("us", 1e3),
        ("µs", 1e3),
        ("ns", 1.0),
        ("s", 1e9),
    ];
    for (u, mul) in units {
        if let Some(n) = s.strip_suffix(u) {
            let v: f64 = n.trim().parse().ok()?;
            return (v.is_finite() && v >= 0.0).then_some((v * mul) as u64);
        }
    }
    None
}

/// `*` any text, `?` one character; the whole text must match. Linear in practice: the
/// backtracking keeps one star position (the classic wildcard match).
pub fn glob(pattern: &str, text: &str) -> bool {
    let p: Vec<char> = pattern.chars().collect();
    let t: Vec<char> = text.chars().collect();
    let (mut i, mut j) = (0, 0);
    let (mut star, mut mark) = (None, 0);
    while j < t.len() {
        if i < p.len() && (p[i] == '?' || p[i] == t[j]) {
            i += 1;
            j += 1;
        } else if i < p.len() && p[i] == '*' {
            star = Some(i);
            mark = j;
            i += 1;
        } else if let Some(s) = star {
            i = s + 1;
            mark += 1;
            j = mark;
        } else {
            return false;
        }
    }
    while i < p.len() && p[i] == '*' {
        i += 1;
    }
    i == p.len()
}

/// One interval's numbers the rules read.
#[derive(Debug, Default)]
pub struct Observed {
    /// Per process: pid, name, CPU % (of one core) over the interval.
    pub cpu: Vec<(u32, String, f64)>,
    pub processes: Vec<ProcessObs>,
    pub endpoints: Vec<EndpointObs>,
}

/// A process's calls in the interval (from `ProcessSnapshot`).
#[derive(Debug, Default, Clone)]
pub struct ProcessObs {
    pub pid: u32,
    pub comm: String,
    pub calls: u64,
    pub errors: u64,
}

/// An endpoint row in the interval (from `EndpointSnapshot`).
#[derive(Debug, Default, Clone)]
pub struct EndpointObs {
    pub comm: String,
    pub pid: Option<u32>,
    pub resource: String,
    pub calls: u64,
    pub errors: u64,
    pub p99_ns: u64,
}

impl Observed {
    pub fn of_report(
        cpu: Vec<(u32, String, f64)>,
        processes: &[crate::aggregate::ProcessSnapshot],
        endpoints: &[crate::aggregate::EndpointSnapshot],
    ) -> Observed {
        Observed {
            cpu,
            processes: processes
                .iter()
                .map(|p| ProcessObs {
                    pid: p.pid,
                    comm: p.comm.clone(),
                    calls: p.calls,
                    errors: p.server_errors + p.client_errors,
                })
                .collect(),
            endpoints: endpoints
                .iter()
                .map(|e| EndpointObs {
                    comm: e.comm.clone(),
                    pid: e.pid,
                    resource: e.resource.clone(),
                    calls: e.calls,
                    errors: e.server_errors + e.client_errors,
                    p99_ns: e.latency_p99_ns,
                })
                .collect(),
        }
    }
}

/// Something that happened to the profile's gate (a JSON `profile_trigger` line).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct TriggerEvent {
    /// `start`: profiling began; `end`: it ended and the silence began.
    pub event: &'static str,
    /// The rule (`--profile-when`'s text) or `key` (the terminal UI).
    pub rule: String,
    pub pids: Vec<u32>,
    pub comm: String,
    /// (`start`) the value that crossed the threshold (percent or ns).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub value: Option<f64>,
    /// (`start`) how long it profiles; (`end`) how long no rule fires now.
    pub duration_ns: u64,
}

/// A trigger event as a recording keeps it (`-w`, record kind 9, after its interval's kind 3
/// record): the line's fields and the interval's end, so `-r` writes the same line in the
/// same place.
#[derive(Serialize)]
pub struct RecordOut<'a> {
    pub mono_ns: u64,
    #[serde(flatten)]
    pub event: &'a TriggerEvent,
}

/// A kind 9 record read back: untrusted, every string and list within a cap.
#[derive(Deserialize)]
pub struct RecordIn {
    #[serde(default)]
    mono_ns: u64,
    event: CappedString<8>,
    #[serde(default, deserialize_with = "crate::record::limits::string")]
    rule: String,
    #[serde(default)]
    pids: CappedSeq<u32, { super::kernel::MAX_ARMED }>,
    #[serde(default, deserialize_with = "crate::record::limits::comm")]
    comm: String,
    #[serde(default)]
    value: Option<f64>,
    #[serde(default)]
    duration_ns: u64,
}

impl RecordIn {
    /// The interval's end and the event; None for one no ebtop writes (an unknown `event`,
    /// more processes than a trigger arms): never a line with a part left out.
    pub fn into_event(self) -> Option<(u64, TriggerEvent)> {
        let event = match self.event.0.as_str() {
            "start" => "start",
            "end" => "end",
            _ => return None,
        };
        if self.pids.dropped > 0 {
            return None;
        }
        Some((
            self.mono_ns,
            TriggerEvent {
                event,
                rule: self.rule,
                pids: self.pids.items,
                comm: self.comm,
                value: self.value.filter(|v| v.is_finite()),
                duration_ns: self.duration_ns,
            },
        ))
    }
}

/// The state between intervals.
#[derive(Debug)]
pub struct Triggers {
    rules: Vec<Rule>,
    for_ns: u64,
    silence_ns: u64,
    /// Per rule, per subject (pid, or a process name for endpoint rules): the last results.
    history: Vec<HashMap<Subject, VecDeque<bool>>>,
    state: State,
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
enum Subject {
    Pid(u32),
    Comm(String),
}

#[derive(Clone, Debug, PartialEq)]
pub enum State {
    Waiting,
    /// Profiling `pids` until `until_ns` (the rule's text or `key`).
    Running {
        until_ns: u64,
        rule: String,
        pids: Vec<u32>,
        comm: String,
    },
    Silent {
        until_ns: u64,
    },
}

/// Subjects a rule remembers (processes come and go: the oldest are forgotten beyond this).
const MAX_SUBJECTS: usize = 4096;

impl Triggers {
    pub fn new(rules: Vec<Rule>, run: Duration, silence: Duration) -> Triggers {
        Triggers {
            history: vec![HashMap::new(); rules.len()],
            rules,
            for_ns: run.as_nanos() as u64,
            silence_ns: silence.as_nanos() as u64,
            state: State::Waiting,
        }
    }

    pub fn state(&self) -> &State {
        &self.state
    }

    pub fn needs_cpu(&self) -> bool {
        self.rules.iter().any(|r| r.metric == Metric::Cpu)
    }

    /// Starts profiling `pids` now for the run duration, as asked by hand (the UI's key):
    /// whatever the state (a running profile is replaced; a silence does not hold a person
    /// back).
    pub fn start_by_hand(&mut self, now_ns: u64, pids: Vec<u32>, comm: String) -> TriggerEvent {
        self.state = State::Running {
            until_ns: now_ns + self.for_ns,
            rule: "key".to_owned(),
            pids: pids.clone(),
            comm: comm.clone(),
        };
        TriggerEvent {
            event: "start",
            rule: "key".to_owned(),
            pids,
            comm,
            value: None,
            duration_ns: self.for_ns,
        }
    }

    /// One interval's end at `now_ns`: the rules see its numbers; returns what changed.
    pub fn on_interval(&mut self, now_ns: u64, obs: &Observed) -> Vec<TriggerEvent> {
        let mut out = Vec::new();
        // Every rule keeps its history whatever the state: a window spans a silence too.
        let mut fired: Option<(usize, Vec<u32>, String, f64)> = None;
        for (ri, rule) in self.rules.iter().enumerate() {
            let values = values(rule, obs);
            let hist = &mut self.history[ri];
            for h in hist.values_mut() {
                if h.len() >= rule.of {
                    h.pop_front();
                }
            }
            // Subjects not seen this interval count as false.
            for h in hist.values_mut() {
                h.push_back(false);
            }
            for (subject, (pids, comm, v)) in &values {
                if !hist.contains_key(subject) && hist.len() >= MAX_SUBJECTS {
                    hist.clear();
                }
                let h = hist.entry(subject.clone()).or_default();
                let ok = rule.cmp.holds(*v, rule.threshold);
                // This interval's entry (pushed as false above, or new).
                match h.back_mut() {
                    Some(last) => *last = ok,
                    None => h.push_back(ok),
                }
                let count = h.iter().filter(|b| **b).count();
                if ok && count >= rule.need && fired.is_none() && !pids.is_empty() {
                    fired = Some((ri, pids.clone(), comm.clone(), *v));
                }
            }
            hist.retain(|_, h| h.iter().any(|b| *b));
        }
        match &self.state {
            State::Running {
                until_ns,
                rule,
                pids,
                comm,
            } if now_ns >= *until_ns => {
                out.push(TriggerEvent {
                    event: "end",
                    rule: rule.clone(),
                    pids: pids.clone(),
                    comm: comm.clone(),
                    value: None,
                    duration_ns: self.silence_ns,
                });
                self.state = State::Silent {
                    until_ns: now_ns + self.silence_ns,
                };
            }
            State::Silent { until_ns } if now_ns >= *until_ns => self.state = State::Waiting,
            _ => {}
        }
        if self.state == State::Waiting {
            if let Some((ri, pids, comm, v)) = fired {
                let rule = self.rules[ri].text.clone();
                self.state = State::Running {
                    until_ns: now_ns + self.for_ns,
                    rule: rule.clone(),
                    pids: pids.clone(),
                    comm: comm.clone(),
                };
                out.push(TriggerEvent {
                    event: "start",
                    rule,
                    pids,
                    comm,
                    value: Some(v),
                    duration_ns: self.for_ns,
                });
            }
        }
        out
    }
}

type Values = HashMap<Subject, (Vec<u32>, String, f64)>;

/// The rule's metric per subject this interval: (its processes, name, value).
fn values(rule: &Rule, obs: &Observed) -> Values {
    let mut out: Values = HashMap::new();
    match &rule.metric {
        Metric::Cpu => {
            for (pid, comm, pct) in &obs.cpu {
                out.insert(Subject::Pid(*pid), (vec![*pid], comm.clone(), *pct));
            }
        }
        Metric::Errors(None) => {
            for p in obs.processes.iter().filter(|p| p.calls > 0) {
                let pct = p.errors as f64 * 100.0 / p.calls as f64;
                out.insert(Subject::Pid(p.pid), (vec![p.pid], p.comm.clone(), pct));
            }
        }
        Metric::P99(g) | Metric::Errors(Some(g)) => {
            // Rows of the same process name are one subject: the worst row decides.
            for e in obs
                .endpoints
                .iter()
                .filter(|e| e.calls > 0 && glob(g, &e.resource))
            {
                let v = match rule.metric {
                    Metric::P99(_) => e.p99_ns as f64,
                    _ => e.errors as f64 * 100.0 / e.calls as f64,
                };
                let pids: Vec<u32> = match e.pid {
                    Some(pid) => vec![pid],
                    None => obs
                        .processes
                        .iter()
                        .filter(|p| p.comm == e.comm)
                        .map(|p| p.pid)
                        .collect(),
                };
                let entry = out
                    .entry(Subject::Comm(e.comm.clone()))
                    .or_insert_with(|| (Vec::new(), e.comm.clone(), f64::MIN));
                let worse = match rule.cmp {
                    Cmp::Gt | Cmp::Ge => v > entry.2,
                    Cmp::Lt | Cmp::Le => entry.2 == f64::MIN || v < entry.2,
                };
                if worse {
                    entry.2 = v;
                }
                for p in pids {
                    if !entry.0.contains(&p) {
                        entry.0.push(p);
                    }
                }
            }
        }
    }
    for v in out.values_mut() {
        v.0.sort_unstable();
        v.0.truncate(super::kernel::MAX_ARMED);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: Duration = Duration::from_secs(1);

    #[test]
    fn rules_parse_with_their_windows() {
        let r = parse("cpu>80%:3/5s", S).unwrap();
        assert_eq!(
            (r.metric, r.cmp, r.threshold, r.need, r.of),
            (Metric::Cpu, Cmp::Gt, 80.0, 3, 5)
        );
        let r = parse("p99(/api/*)>200ms", S).unwrap();
        assert_eq!(r.metric, Metric::P99("/api/*".into()));
        assert_eq!((r.threshold, r.need, r.of), (200e6, 1, 1));
        let r = parse(" errors >= 5% : 2/4 ", S).unwrap();
        assert_eq!(
            (r.metric, r.cmp, r.threshold, r.need, r.of),
            (Metric::Errors(None), Cmp::Ge, 5.0, 2, 4)
        );
        let r = parse("cpu>50%:2/10s", Duration::from_secs(2)).unwrap();
        assert_eq!(r.of, 5, "10 s at a 2 s interval");
        assert_eq!(parse("p99(/x)<1.5s", S).unwrap().threshold, 1.5e9);
        assert_eq!(
            parse("errors(/api/*)>1%", S).unwrap().metric,
            Metric::Errors(Some("/api/*".into()))
        );
    }

    #[test]
    fn bad_rules_say_why_in_one_line() {
        for (text, says) in [
            ("", "no metric"),
            ("mem>1%", "unknown metric \"mem\""),
            ("cpu=80%", "no comparison"),
            ("cpu>80", "in percent"),
            ("cpu>x%", "not a percentage"),
            ("p99>200ms", "needs the endpoints' resource glob"),
            ("p99(/a)>200", "not a time"),
            ("p99(/a>200ms", "no ')'"),
            ("cpu(x)>1%", "takes no argument"),
            ("cpu>80%:6/5", "M must be from 1 to N"),
            ("cpu>80%:0/5", "M must be from 1 to N"),
            ("cpu>80%:3", "the window is M/N"),
            ("cpu>80%:3/xs", "not a number of seconds"),
            ("cpu>80%:1/99999", "at most"),
        ] {
            let e = parse(text, S).unwrap_err();
            assert!(e.contains(says), "{text:?}: {e}");
            assert!(!e.contains('\n'), "{e}");
        }
    }

    #[test]
    fn globs_match_whole_resources() {
        assert!(glob("/api/*", "/api/users/7"));
        assert!(!glob("/api/*", "/static/api/x"));
        assert!(glob("*", ""));
        assert!(glob("/u?er", "/user"));
        assert!(glob("*a*b", "xxaxxb"));
        assert!(!glob("*a*b", "xxaxxbc"));
    }

    fn cpu(pct: f64) -> Vec<(u32, String, f64)> {
        vec![(42, "burn".into(), pct), (7, "idle".into(), 1.0)]
    }

    #[test]
    fn a_rule_fires_once_in_m_of_n_then_runs_then_stays_silent() {
        let rule = parse("cpu>80%:3/5", S).unwrap();
        let mut t = Triggers::new(vec![rule], Duration::from_secs(3), Duration::from_secs(10));
        let at = |i: u64| i * 1_000_000_000;
        let mut events = Vec::new();
        // Above the threshold in intervals 0, 2 and 3: the third (3 of the last 5) fires.
        for (i, pct) in [90.0, 10.0, 95.0, 99.0].iter().enumerate() {
            let obs = Observed {
                cpu: cpu(*pct),
                ..Default::default()
            };
            events.push((i, t.on_interval(at(i as u64), &obs)));
        }
        assert!(events[..3].iter().all(|(_, e)| e.is_empty()));
        let start = &events[3].1;
        assert_eq!(start.len(), 1);
        assert_eq!(
            (
                start[0].event,
                start[0].pids.clone(),
                start[0].comm.as_str(),
                start[0].value
            ),
            ("start", vec![42], "burn", Some(99.0))
        );
        assert!(matches!(t.state(), State::Running { until_ns, .. } if *until_ns == at(6)));
        // Still burning: runs to its end (3 s), then 10 s of silence with no start.
        let mut later = Vec::new();
        for i in 4..19u64 {
            let obs = Observed {
                cpu: cpu(99.0),
                ..Default::default()
            };
            for e in t.on_interval(at(i), &obs) {
                later.push((i, e.event));
            }
        }
        assert_eq!(later, vec![(6, "end"), (16, "start")]);
    }

    #[test]
    fn endpoint_rules_name_the_processes_of_their_rows() {
        let obs = Observed {
            cpu: vec![],
            processes: vec![ProcessObs {
                pid: 5,
                comm: "api".into(),
                calls: 10,
                errors: 1,
            }],
            endpoints: vec![EndpointObs {
                comm: "api".into(),
                pid: None,
                resource: "/api/users".into(),
                calls: 10,
                errors: 1,
                p99_ns: 300_000_000,
            }],
        };
        for (rule, fires) in [
            ("p99(/api/*)>200ms", true),
            ("p99(/api/*)>400ms", false),
            ("p99(/static/*)>1ms", false),
            ("errors>5%", true),
            ("errors(/api/*)>20%", false),
        ] {
            let mut t = Triggers::new(vec![parse(rule, S).unwrap()], S, S);
            let ev = t.on_interval(1, &obs);
            assert_eq!(!ev.is_empty(), fires, "{rule}");
            if fires {
                assert_eq!(ev[0].pids, vec![5], "{rule}");
            }
        }
    }
}

/// The live side of the triggers: the engine, where the gate is set, and the CPU readings.
pub struct TriggerCtl {
    pub triggers: Triggers,
    gate: std::sync::mpsc::Sender<super::kernel::Gate>,
    /// The gate between runs: closed with rules (nothing is profiled until one fires), open
    /// without (`--profile` alone: a run by hand narrows it for a while).
    idle: super::kernel::Gate,
    cpu: ProcCpu,
    /// The session's `--pid` and `--comm`: only their processes are profiled, so only theirs
    /// are read for `cpu` rules.
    filters: crate::filters::Filters,
    /// A run asked for by hand (the UI's key), taken at the next interval.
    pub requests: ProfileRequests,
}

/// Where a run by hand is asked for: the processes and their name (the newest ask wins).
pub type ProfileRequests = std::sync::Arc<std::sync::Mutex<Option<(Vec<u32>, String)>>>;

impl TriggerCtl {
    pub fn new(
        triggers: Triggers,
        gate: std::sync::mpsc::Sender<super::kernel::Gate>,
        idle: super::kernel::Gate,
    ) -> TriggerCtl {
        TriggerCtl {
            triggers,
            gate,
            idle,
            cpu: ProcCpu::default(),
            filters: Default::default(),
            requests: Default::default(),
        }
    }

    /// A viewer's requests (the terminal UI's `P`) reach the triggers through `r`.
    pub fn with_requests(mut self, r: Option<ProfileRequests>) -> Self {
        if let Some(r) = r {
            self.requests = r;
        }
        self
    }

    pub fn with_filters(mut self, filters: crate::filters::Filters) -> Self {
        self.filters = filters;
        self
    }

    /// The interval's end: reads the CPU times (if a rule needs them), runs the rules, takes
    /// a run asked for by hand, and sets the gate for what starts or ends.
    pub fn on_interval(
        &mut self,
        now_ns: u64,
        report: &crate::report::IntervalReport,
    ) -> Vec<TriggerEvent> {
        let cpu = if self.triggers.needs_cpu() {
            let f = &self.filters;
            let mut cpu = self.cpu.read(f.pid.as_deref());
            if f.comm.is_some() {
                cpu.retain(|(pid, comm, _)| {
                    let mut c = [0u8; 16];
                    let n = comm.len().min(15);
                    c[..n].copy_from_slice(&comm.as_bytes()[..n]);
                    f.selects_process(*pid, &c)
                });
            }
            cpu
        } else {
            Vec::new()
        };
        let obs = Observed::of_report(cpu, &report.processes, &report.endpoints);
        let mut events = self.triggers.on_interval(now_ns, &obs);
        let asked = self.requests.lock().ok().and_then(|mut r| r.take());
        if let Some((pids, comm)) = asked.filter(|(p, _)| !p.is_empty()) {
            events.retain(|e| e.event != "start");
            events.push(self.triggers.start_by_hand(now_ns, pids, comm));
        }
        for e in &events {
            let gate = match e.event {
                "start" => super::kernel::Gate::Processes(e.pids.clone()),
                _ => self.idle.clone(),
            };
            let _ = self.gate.send(gate);
        }
        events
    }

    /// What the header shows: the run going on (its processes, how long still), or the
    /// silence, or the rules waited for.
    pub fn status_line(&self, now_ns: u64) -> String {
        match self.triggers.state() {
            State::Running {
                until_ns,
                rule,
                pids,
                comm,
            } => running_line(comm, pids, rule, *until_ns, now_ns),
            State::Silent { until_ns } => silent_line(*until_ns, now_ns),
            State::Waiting if self.triggers.rules.is_empty() => "profiling".to_owned(),
            State::Waiting => format!(
                "profile: waiting for {}",
                self.triggers
                    .rules
                    .iter()
                    .map(|r| r.text.as_str())
                    .collect::<Vec<_>>()
                    .join(" | ")
            ),
        }
    }
}

fn left(until_ns: u64, now_ns: u64) -> String {
    format!("{:.0}s", until_ns.saturating_sub(now_ns) as f64 / 1e9)
}

/// The header's line while a run lasts.
fn running_line(comm: &str, pids: &[u32], rule: &str, until_ns: u64, now_ns: u64) -> String {
    let who = match pids {
        [one] => format!("{comm} ({one})"),
        many => format!("{comm} ({} processes)", many.len()),
    };
    format!("PROFILING {who} {} more [{rule}]", left(until_ns, now_ns))
}

fn silent_line(until_ns: u64, now_ns: u64) -> String {
    format!("profile: silent {} more", left(until_ns, now_ns))
}

/// The header's profile state in a replay, from the recorded trigger events (kind 9, at their
/// interval's end): the live run's `PROFILING …` line while a run lasts and its silence line
/// after, as the live header showed them at the same interval ends. The rules a live run
/// was waiting on are not recorded: no line then.
#[derive(Debug, Default)]
pub struct ReplayedStatus {
    last: Option<(u64, TriggerEvent)>,
}

impl ReplayedStatus {
    /// An event replayed at the end of the interval `now_ns`.
    pub fn on_event(&mut self, now_ns: u64, e: &TriggerEvent) {
        self.last = Some((now_ns, e.clone()));
    }

    /// The header's line at the end of the interval `now_ns` (after its events).
    pub fn status_line(&self, now_ns: u64) -> Option<String> {
        let (at, e) = self.last.as_ref()?;
        let until = at.saturating_add(e.duration_ns);
        match e.event {
            "start" => Some(running_line(&e.comm, &e.pids, &e.rule, until, now_ns)),
            _ if now_ns < until => Some(silent_line(until, now_ns)),
            _ => None,
        }
    }
}

/// CPU time of every process between two readings of /proc/PID/stat.
#[derive(Default)]
struct ProcCpu {
    last: HashMap<u32, (u64, u64, u64)>,
}

/// Processes read per interval at most.
const MAX_CPU_PROCESSES: usize = 65_536;

impl ProcCpu {
    /// (pid, name, CPU % of one core) of the processes read twice, since the last reading.
    /// Only `pids` where given.
    fn read(&mut self, pids: Option<&[u32]>) -> Vec<(u32, String, f64)> {
        let hz = crate::aggregate::procfs::clock_ticks_per_s().max(1) as f64;
        let mut out = Vec::new();
        let mut now = HashMap::new();
        let all: Box<dyn Iterator<Item = u32> + '_> = match pids {
            Some(p) => Box::new(p.iter().copied()),
            None => Box::new(crate::procfs::pids()),
        };
        for pid in all.take(MAX_CPU_PROCESSES) {
            let Ok(stat) = crate::procfs::read_pid(pid, "stat") else {
                continue;
            };
            let Some((ticks, start)) = crate::aggregate::procfs::parse_stat(&stat) else {
                continue;
            };
            let mono = crate::clock::monotonic_ns();
            if let Some(&(t0, s0, m0)) = self.last.get(&pid) {
                let elapsed = mono.saturating_sub(m0) as f64 / 1e9;
                if s0 == start && elapsed > 0.02 {
                    let pct = ticks.saturating_sub(t0) as f64 / hz / elapsed * 100.0;
                    let comm = stat
                        .find('(')
                        .zip(stat.rfind(')'))
                        .map(|(a, b)| stat[a + 1..b.max(a + 1)].to_owned())
                        .unwrap_or_default();
                    out.push((pid, comm, pct));
                }
            }
            now.insert(pid, (ticks, start, mono));
        }
        self.last = now;
        out
    }
}
