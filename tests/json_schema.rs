//! docs/json.md documents every field ebtop writes: each key of each line type that the
//! committed recordings replay into is named (in backquotes) in that type's section.

use std::collections::{BTreeMap, BTreeSet};
use std::process::Command;

use serde_json::Value;

/// Recordings, by path from the repository's root.
const RECORDINGS: &[&str] = &[
    "tests/fixtures/recordings/http_mix.ebt",
    "tests/fixtures/recordings/flows_mix.ebt",
    "tests/fixtures/recordings/procs_mix.ebt",
    "src/protocols/dns/fixtures/dns_mix.ebt",
    "tests/fixtures/recordings/profile_burn.ebt",
    "tests/fixtures/recordings/profile_trigger.ebt",
];

/// The text of each `## \`type\`` section of docs/json.md.
fn sections() -> BTreeMap<String, String> {
    let doc = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/json.md"))
        .expect("docs/json.md");
    let mut out = BTreeMap::new();
    let mut current: Option<String> = None;
    for line in doc.lines() {
        if let Some(title) = line.strip_prefix("## ") {
            current = title
                .strip_prefix('`')
                .and_then(|t| t.strip_suffix('`'))
                .map(str::to_owned);
            continue;
        }
        if let Some(c) = &current {
            let s: &mut String = out.entry(c.clone()).or_default();
            s.push_str(line);
            s.push('\n');
        }
    }
    out
}

/// Whether `section` names `key` in backquotes, alone or as the last part of a dotted name
/// (`kernel.events`), or as the group of dotted names (`kernel` of `kernel.events`).
fn names(section: &str, key: &str) -> bool {
    section.contains(&format!("`{key}`"))
        || section.contains(&format!(".{key}`"))
        || section.contains(&format!("`{key}."))
}

#[test]
fn every_field_written_is_documented_for_its_line_type() {
    let docs = sections();
    let mut seen: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for name in RECORDINGS {
        let path = format!("{}/{name}", env!("CARGO_MANIFEST_DIR"));
        let out = Command::new(env!("CARGO_BIN_EXE_ebtop"))
            .args(["-r", &path, "--json"])
            .output()
            .unwrap();
        assert!(out.status.success(), "{name}");
        for line in String::from_utf8_lossy(&out.stdout).lines() {
            let v: Value = serde_json::from_str(line).unwrap();
            let ty = v["type"].as_str().unwrap().to_owned();
            let keys = seen.entry(ty).or_default();
            for (k, inner) in v.as_object().unwrap() {
                keys.insert(k.clone());
                // The summary's groups: their members are documented too.
                if let (Some(obj), true) = (inner.as_object(), v["type"] == "summary") {
                    keys.extend(obj.keys().cloned());
                }
            }
        }
    }
    for ty in [
        "meta",
        "proc",
        "call",
        "exit",
        "endpoint",
        "process",
        "flow",
        "flow_end",
        "flow_stats",
        "profile",
        "summary",
    ] {
        assert!(
            seen.contains_key(ty),
            "the recordings replay into {ty} lines"
        );
    }
    let mut missing = Vec::new();
    for (ty, keys) in &seen {
        let section = docs
            .get(ty)
            .unwrap_or_else(|| panic!("docs/json.md has no section for `{ty}`"));
        // A flow_end carries every flow field: both sections document it.
        let flow = docs.get("flow").cloned().unwrap_or_default();
        for k in keys {
            if k == "type" {
                continue;
            }
            let documented = names(section, k) || (ty == "flow_end" && names(&flow, k));
            if !documented {
                missing.push(format!("{ty}.{k}"));
            }
        }
    }
    assert!(
        missing.is_empty(),
        "fields not in docs/json.md: {missing:?}"
    );
}
