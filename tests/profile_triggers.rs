//! `--profile-when`: a CPU burner crosses a `cpu` rule once; the profile runs for
//! `--profile-for`, then stays silent for `--profile-silence` although the rule still holds.
//! Asserted from the JSON lines: the `profile_trigger` lines (when, which rule, which process,
//! how long) and the interval `profile` lines (samples only from readings that overlap the
//! run: the gate is closed before and after). The recording made meanwhile replays the same
//! `profile` and `profile_trigger` lines, in the same order, without BPF.
mod common;

use std::path::Path;
use std::process::Command;
use std::time::{Duration, SystemTime};

use common::{replay_json, require_root, Ebtop};
use serde_json::Value;

const SPIN: &str = r#"
volatile unsigned long sink;
__attribute__((noinline)) void spin(void) { for (;;) sink++; }
int main(void) { spin(); }
"#;

fn build_spin(dir: &Path) -> std::path::PathBuf {
    let src = dir.join("spin.c");
    std::fs::write(&src, SPIN).unwrap();
    let bin = dir.join("spin");
    let mut cc = Command::new("cc");
    cc.args(["-O1", "-fno-omit-frame-pointer", "-o"])
        .arg(&bin)
        .arg(&src);
    common::compile(cc, "cc spin.c");
    bin
}

fn at(v: &Value) -> SystemTime {
    humantime::parse_rfc3339(v["ts"].as_str().unwrap()).unwrap()
}

fn secs(a: SystemTime, b: SystemTime) -> f64 {
    match a.duration_since(b) {
        Ok(d) => d.as_secs_f64(),
        Err(e) => -e.duration().as_secs_f64(),
    }
}

#[test]
fn a_cpu_rule_fires_once_then_stays_silent() {
    require_root();
    let dir = tempfile::tempdir().unwrap();
    let bin = build_spin(dir.path());
    let mut spin = Command::new(&bin).spawn().expect("spin starts");
    let pid = spin.id();
    let rec = dir.path().join("trig.ebt");
    let rule = "cpu>20%:2/3";
    let mut ebtop = Ebtop::start(&[
        "--json",
        "--only",
        "profile",
        "--profile",
        "--profile-off-cpu-min",
        "off",
        "--pid",
        &pid.to_string(),
        "--profile-when",
        rule,
        "--profile-for",
        "2s",
        "--profile-silence",
        "60s",
        "-w",
        rec.to_str().unwrap(),
    ]);
    let is_trigger = |v: &Value| v["type"] == "profile_trigger";
    let start = ebtop
        .wait_for(Duration::from_secs(30), is_trigger)
        .expect("the rule fires within 30 s");
    let end = ebtop
        .wait_for(Duration::from_secs(15), is_trigger)
        .expect("the run ends");
    // The burner still burns: the rule holds, the silence keeps it from firing.
    let again = ebtop.wait_for(Duration::from_secs(4), is_trigger);
    let lines = ebtop.stop();
    spin.kill().unwrap();
    spin.wait().unwrap();
    assert!(again.is_none(), "no trigger during the silence: {again:?}");

    assert_eq!(start["event"], "start", "{start}");
    assert_eq!(start["rule"], rule);
    assert_eq!(start["pids"], serde_json::json!([pid]));
    assert_eq!(start["comm"], "spin");
    assert_eq!(start["duration_ns"], 2_000_000_000u64);
    assert!(start["value"].as_f64().unwrap() > 20.0, "{start}");
    assert_eq!(end["event"], "end", "{end}");
    assert_eq!(end["pids"], serde_json::json!([pid]));
    assert_eq!(end["duration_ns"], 60_000_000_000u64);
    // The run ends at the first interval's end at or after its 2 s.
    let ran = secs(at(&end), at(&start));
    assert!((2.0..6.0).contains(&ran), "ran {ran} s");
    assert_eq!(lines.iter().filter(|v| is_trigger(v)).count(), 2);

    // Samples only in readings that overlap the run (the gate opens and closes within the
    // profile thread's 20 ms poll; 100 ms of slack).
    let intervals: Vec<&Value> = lines
        .iter()
        .filter(|v| v["type"] == "profile" && v["span"] == "interval")
        .collect();
    let mut samples = 0;
    for l in &intervals {
        assert_eq!(l["pid"], pid, "only --pid's process: {l}");
        let read = at(l);
        let period = l["period_ns"].as_u64().unwrap() as f64 / 1e9;
        assert!(
            secs(read, at(&start)) > -0.1 && secs(read, at(&end)) - period < 0.1,
            "a reading from {period} s before {} is outside the run {} .. {}",
            l["ts"],
            start["ts"],
            end["ts"]
        );
        samples += l["samples"].as_u64().unwrap();
    }
    assert!(samples > 0, "the run profiled the burner");
    let session: Vec<&Value> = lines
        .iter()
        .filter(|v| v["type"] == "profile" && v["span"] == "session")
        .collect();
    assert_eq!(session.len(), 1);
    assert_eq!(
        session[0]["samples"].as_u64().unwrap(),
        samples,
        "the session adds up its intervals"
    );

    // The recording holds the same profiles, names and all (the symbol cache's counts are
    // the live session's, not recorded), and the same trigger lines, each before its
    // interval's profile lines as live.
    let replayed = replay_json(&rec, &["--only", "profile"]);
    let profiles = |ls: &[Value]| -> Vec<Value> {
        ls.iter()
            .filter(|v| v["type"] == "profile" || is_trigger(v))
            .cloned()
            .map(|mut v| {
                v.as_object_mut().unwrap().remove("symbol_cache");
                v
            })
            .collect()
    };
    let live = profiles(&lines);
    assert_eq!(live.iter().filter(|v| is_trigger(v)).count(), 2);
    assert_eq!(profiles(&replayed), live);
}

/// The committed recording of a triggered run (tests/fixtures/recordings/regenerate.sh
/// profile_trigger; format minor 9) replays the `profile_trigger` and `profile` lines its live
/// run printed, in the same order (no root: no BPF).
#[test]
fn a_recorded_trigger_replays_its_lines() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/recordings");
    let live: Vec<Value> = std::fs::read_to_string(dir.join("profile_trigger.lines.jsonl"))
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let triggers = live.iter().filter(|v| v["type"] == "profile_trigger");
    assert_eq!(triggers.count(), 2, "a start and an end");
    let replayed: Vec<Value> =
        replay_json(&dir.join("profile_trigger.ebt"), &["--only", "profile"])
            .into_iter()
            .filter(|v| v["type"] == "profile" || v["type"] == "profile_trigger")
            .collect();
    assert_eq!(replayed, live);
}
