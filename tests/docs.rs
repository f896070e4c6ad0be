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
