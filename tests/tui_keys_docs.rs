//! README.md ("## Keys") and man/ebtop.1 (".SH KEYS") name every key of the TUI's key table
//! (src/tui/keys.rs, the list the help overlay shows).

use ebtop::tui::keys::{all_keys, KEYS};

fn section<'a>(text: &'a str, start: &str, next: &str) -> &'a str {
    let i = text
        .find(start)
        .unwrap_or_else(|| panic!("no {start:?} section"));
    let rest = &text[i + start.len()..];
    &rest[..rest.find(next).unwrap_or(rest.len())]
}

#[test]
fn readme_keys_section_names_every_key() {
    let readme =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/README.md")).unwrap();
    let keys = section(&readme, "\n## Keys\n", "\n## ");
    for k in all_keys() {
        assert!(
            keys.contains(&format!("`{k}`")),
            "README.md ## Keys does not name `{k}`"
        );
    }
}

#[test]
fn man_page_keys_section_names_every_key() {
    let man = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/man/ebtop.1")).unwrap();
    let keys = section(&man, "\n.SH KEYS\n", "\n.SH ");
    let named: Vec<String> = keys
        .lines()
        .filter_map(|l| l.strip_prefix(".B "))
        .flat_map(|l| l.split(", "))
        .map(|k| k.trim().replace("\\-", "-"))
        .collect();
    for k in all_keys() {
        assert!(
            named.iter().any(|n| n == k),
            "man/ebtop.1 .SH KEYS does not name {k:?} (has {named:?})"
        );
    }
    // One entry per row of the table, in the same order.
    let entries: Vec<&str> = keys.lines().filter_map(|l| l.strip_prefix(".B ")).collect();
    assert_eq!(entries.len(), KEYS.len());
}
