//! The fuzz targets' drivers in the normal suite: every crash input the fuzzers found
//! (tests/fixtures/fuzz-regressions/<target>/, kept there by scripts/fuzz) replayed through the
//! same library driver, and every driver run over the seed inputs made from the committed
//! fixtures, with the counts the drivers report checked against what the fixtures hold.

use std::path::{Path, PathBuf};

use ebtop::fuzzing::{self, TARGETS};

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn fixtures() -> PathBuf {
    root().join("tests/fixtures")
}

/// Runs `f`, turning a panic into its message.
fn outcome<T>(f: impl FnOnce() -> T) -> Result<T, String> {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)).map_err(|e| {
        e.downcast_ref::<String>()
            .cloned()
            .or_else(|| e.downcast_ref::<&str>().map(|s| s.to_string()))
            .unwrap_or_default()
    })
}

fn names_in(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| !n.starts_with('.'))
        .collect();
    names.sort();
    names
}

#[test]
fn every_fuzz_target_has_a_library_driver() {
    let dir = root().join("fuzz/fuzz_targets");
    let targets: Vec<String> = names_in(&dir)
        .into_iter()
        .filter_map(|n| n.strip_suffix(".rs").map(str::to_owned))
        .collect();
    assert!(targets.len() >= 3, "{targets:?}");
    for name in &targets {
        assert!(
            fuzzing::target(name).is_some(),
            "fuzz target {name} is not in ebtop::fuzzing::TARGETS: its crash inputs would not \
             be replayed"
        );
    }
    for t in TARGETS {
        assert!(
            targets.iter().any(|n| n == t.name),
            "no fuzz target {}",
            t.name
        );
    }
}

#[test]
fn crash_inputs_found_by_fuzzing_replay_cleanly() {
    let dir = fixtures().join("fuzz-regressions");
    let mut failures = Vec::new();
    let mut replayed = 0;
    for name in names_in(&dir) {
        let sub = dir.join(&name);
        if !sub.is_dir() {
            continue;
        }
        let target = fuzzing::target(&name).unwrap_or_else(|| {
            panic!("{}: no fuzz target {name} in ebtop::fuzzing", sub.display())
        });
        for file in names_in(&sub) {
            let bytes = std::fs::read(sub.join(&file)).unwrap();
            if let Err(msg) = outcome(|| (target.drive)(&bytes)) {
                failures.push(format!("{name}/{file}: {msg}"));
            }
            replayed += 1;
        }
    }
    assert!(failures.is_empty(), "{failures:#?}");
    eprintln!("{replayed} crash inputs replayed");
}

fn seeds(target: &str) -> Vec<(String, Vec<u8>)> {
    let seeds = fuzzing::seeds(target, &root()).unwrap();
    assert!(!seeds.is_empty(), "no seeds for {target}");
    seeds
}

/// Fixtures that hold no call.
fn holds_calls(name: &str) -> bool {
    !name.starts_with("garbage_tls")
}

/// Fixtures whose calls the pipeline finds: detection needs a Redis command in RESP form, and
/// inline.seg has only inline commands (its parser alone finds their calls).
fn pipeline_holds_calls(name: &str) -> bool {
    holds_calls(name) && name != "inline.seg"
}

#[test]
fn every_driver_returns_normally_on_its_seeds() {
    for t in TARGETS {
        for (name, bytes) in seeds(t.name) {
            if let Err(msg) = outcome(|| (t.drive)(&bytes)) {
                panic!("{} on seed {name}: {msg}", t.name);
            }
        }
    }
}

/// The live run's call lines that a replay of the recording reproduces.
fn recorded_calls() -> u64 {
    let lines = std::fs::read_to_string(fixtures().join("recordings/http_mix.calls.jsonl"));
    lines.unwrap().lines().count() as u64
}

#[test]
fn parsers_driver_finds_the_calls_of_real_traffic() {
    let segs = fuzzing::seg_files(&root()).unwrap();
    let mut whole = 0;
    for (name, seed) in seeds("parsers") {
        let calls = ebtop::protocols::fuzzing::drive(&seed);
        let (_, seg) = segs.iter().find(|(n, _)| *n == name).unwrap();
        // Seeds are cut at 8 KiB (a large body may leave its response out), and the driver's
        // uncaptured tails are not of the fixture's lengths (sendfile bodies).
        let cut = ebtop::protocols::fuzzing::seed_from_seg(seg, usize::MAX) != seed;
        let uncaptured = seg
            .entries
            .iter()
            .any(|e| e.total_len > e.bytes.len() as u64);
        if !cut && !uncaptured {
            assert_eq!(calls > 0, holds_calls(&name), "{name}: {calls} calls");
            whole += 1;
        }
    }
    assert!(whole >= 10, "{whole} fixtures whole");
}

#[test]
fn recording_driver_replays_the_recordings() {
    let seeds = seeds("recording");
    // Four recordings of traffic, two of profiles (one with its trigger records), and those
    // two's profile and trigger records alone.
    assert_eq!(seeds.len(), 8);
    for (name, seed) in seeds {
        if name.ends_with(".profile_records") {
            // Records without a recording's header: the driver wraps them in one (no summary
            // of the bytes as a whole).
            assert!(ebtop::record::fuzzing::drive(&seed).is_none(), "{name}");
            continue;
        }
        let summary =
            ebtop::record::fuzzing::drive(&seed).unwrap_or_else(|| panic!("{name}: not replayed"));
        assert_eq!(summary.decode_errors, 0, "{name}");
        if name.starts_with("profile_") {
            // A CPU burner's profile: no traffic to make calls of.
            continue;
        }
        assert!(summary.calls > 0, "{name}");
        assert!(summary.events > 0, "{name}");
        if name == "http_mix.ebt" {
            assert_eq!(summary.calls, recorded_calls());
        }
        if name == "dns_mix.ebt" {
            // 13 queries, each seen by the asking socket and by dnsmasq's.
            assert_eq!(summary.calls, 26);
        }
    }
}

#[test]
fn pipeline_driver_counts_agree_with_the_fixtures() {
    let segs = fuzzing::seg_files(&root()).unwrap();
    let mut per_file = std::collections::HashMap::new();
    let mut seen = 0;
    for (name, seed) in seeds("pipeline") {
        let out = ebtop::pipeline::fuzzing::drive(&seed);
        assert_eq!(out.summary.decode_errors, 0, "{name}");
        assert_eq!(out.summary.events, out.records + out.proc_records, "{name}");
        assert!(out.lines >= out.calls + 2, "{name}: meta, calls, summary");
        if let Some((_, seg)) = segs.iter().find(|(n, _)| *n == name) {
            // One record per syscall, one close; no gaps in a capture's stream positions.
            assert_eq!(out.records, seg.entries.len() as u64 + 1, "{name}");
            assert_eq!(out.summary.tracker.gaps, 0, "{name}");
            assert_eq!(
                out.calls > 0,
                pipeline_holds_calls(&name),
                "{name}: {} calls",
                out.calls
            );
            per_file.insert(name.clone(), out.calls);
            seen += 1;
        } else if name == "http_mix.ebt" {
            // The same records the recording driver replays: the same calls.
            assert_eq!(out.calls, recorded_calls());
            seen += 1;
        } else if name == "procs_mix.ebt" {
            assert!(out.summary.process_execs > 0 && out.summary.process_exits > 0);
            seen += 1;
        } else if name == "interleaved" {
            // Connections played together find what each finds alone.
            let small: u64 = segs
                .iter()
                .filter(|(_, s)| s.entries.iter().map(|e| e.bytes.len()).sum::<usize>() < 4096)
                .take(7)
                .map(|(n, _)| per_file[n])
                .sum();
            assert!(small > 0);
            assert_eq!(out.calls, small);
            seen += 1;
        }
    }
    assert_eq!(seen, segs.len() + 3);
}
