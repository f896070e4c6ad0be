//! The man page and README document exactly the options `--help` shows.

use std::collections::BTreeSet;
use std::process::Command;

fn long_options(text: &str, escaped: bool) -> BTreeSet<String> {
    let dash = if escaped { "\\-\\-" } else { "--" };
    let mut out = BTreeSet::new();
    for (i, _) in text.match_indices(dash) {
        let rest = &text[i + dash.len()..];
        let name: String = rest
            .replace("\\-", "-")
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '-')
            .collect();
        if name.len() > 1 {
            out.insert(name);
        }
    }
    out
}

#[test]
fn man_page_matches_help() {
    let help = Command::new(env!("CARGO_BIN_EXE_ebtop"))
        .arg("--help")
        .output()
        .unwrap();
    let help = String::from_utf8(help.stdout).unwrap();
    let man = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/man/ebtop.1")).unwrap();
    let man_opts: BTreeSet<String> = man
        .lines()
        .filter(|l| l.starts_with(".B") || l.starts_with(".TP"))
        .flat_map(|l| long_options(l, true))
        .collect();
    let help_opts = long_options(&help, false);
    assert_eq!(help_opts, man_opts, "options in --help vs man/ebtop.1");
}

/// The paragraph of `text` that starts at the first line containing `marker` (to the next
/// blank line or list item).
fn paragraph_at<'a>(text: &'a str, marker: &str) -> &'a str {
    let start = text
        .find(marker)
        .unwrap_or_else(|| panic!("no `{marker}` in the text"));
    let start = text[..start].rfind('\n').map_or(0, |i| i + 1);
    let rest = &text[start..];
    let end = rest[1..]
        .find("\n\n")
        .into_iter()
        .chain(rest[1..].find("\n- "))
        .min()
        .map_or(rest.len(), |i| i + 1);
    &rest[..end]
}

fn doc(path: &str) -> String {
    std::fs::read_to_string(format!("{}/{path}", env!("CARGO_MANIFEST_DIR"))).unwrap()
}

/// README, the man page, docs/json.md and docs/architecture.md name every protocol of the
/// registry, and the sentences that say which ones the kernel recognises name each that has a
/// kernel rule.
#[test]
fn docs_name_every_protocol_in_the_registry() {
    use ebtop::protocols::{Protocol, REGISTRY};
    let readme = doc("README.md");
    let man = doc("man/ebtop.1").replace("\\-", "-").replace("\\&", "");
    let json = doc("docs/json.md");
    let arch = doc("docs/architecture.md");
    let mut missing = Vec::new();
    for d in REGISTRY {
        for (name, text) in [("README.md", &readme), ("man/ebtop.1", &man)] {
            if !text.contains(d.title) {
                missing.push(format!("{name} does not name {}", d.title));
            }
        }
        if d.kernel_id.is_some() {
            for (name, text, marker) in [
                ("README.md", &readme, "The kernel recognises"),
                ("docs/architecture.md", &arch, "protocol recognition ("),
            ] {
                if !paragraph_at(text, marker).contains(d.title) {
                    missing.push(format!(
                        "{name}: the paragraph of `{marker}` does not name {}",
                        d.title
                    ));
                }
            }
        }
    }
    let json_proto = json
        .lines()
        .find(|l| l.starts_with("| `proto` |"))
        .expect("docs/json.md documents the call line's `proto`");
    let man_proto = paragraph_at(&man, "--proto");
    for p in Protocol::all() {
        let quoted = format!("`{}`", p.name());
        if !json_proto.contains(&quoted) {
            missing.push(format!("docs/json.md's `proto` row lacks {quoted}"));
        }
        if !man_proto.contains(p.name()) {
            missing.push(format!("man/ebtop.1's --proto lacks {}", p.name()));
        }
    }
    assert!(missing.is_empty(), "{missing:#?}");
}
