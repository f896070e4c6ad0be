//! One place reads /proc (issue 41): no file of `src/` but `src/procfs.rs` names a `/proc`
//! path in its code. Comments and `#[cfg(test)] mod tests` (a file's tests, at its end) are
//! not looked at: a test may look at /proc on its own.

use std::fs;
use std::path::Path;

/// Files that still read /proc on their own, each with why; each must still do so (once one
/// does not, take it off this list).
const PENDING: &[(&str, &str)] = &[];

fn walk(dir: &Path, out: &mut Vec<std::path::PathBuf>) {
    for e in fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            walk(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

/// The lines of `text`'s code that name a /proc path (1-based line numbers).
fn proc_lines(text: &str) -> Vec<(usize, String)> {
    let code = match text.find("#[cfg(test)]\nmod tests") {
        Some(i) => &text[..i],
        None => text,
    };
    code.lines()
        .enumerate()
        .filter(|(_, l)| !l.trim_start().starts_with("//"))
        .filter(|(_, l)| l.contains("\"/proc"))
        .map(|(i, l)| (i + 1, l.trim().to_string()))
        .collect()
}

#[test]
fn only_procfs_reads_proc() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    walk(&src, &mut files);
    files.sort();
    let mut found = String::new();
    let mut pending_seen = Vec::new();
    for p in &files {
        let rel = p
            .strip_prefix(&src)
            .unwrap()
            .to_string_lossy()
            .replace('\\', "/");
        if rel == "procfs.rs" {
            continue;
        }
        let lines = proc_lines(&fs::read_to_string(p).unwrap());
        if lines.is_empty() {
            continue;
        }
        if PENDING.iter().any(|(f, _)| *f == rel) {
            pending_seen.push(rel);
            continue;
        }
        for (n, l) in lines {
            found += &format!("\n  src/{rel}:{n}: {l}");
        }
    }
    assert!(
        found.is_empty(),
        "/proc read outside src/procfs.rs (add a function there):{found}"
    );
    for (f, why) in PENDING {
        assert!(
            pending_seen.iter().any(|s| s == f),
            "src/{f} no longer reads /proc: take it off PENDING ({why})"
        );
    }
}

#[test]
fn comments_and_unit_tests_are_not_looked_at() {
    let text =
        "// \"/proc/x\"\nlet a = \"/proc/self\";\n#[cfg(test)]\nmod tests {\n \"/proc/1\"\n}\n";
    assert_eq!(
        proc_lines(text),
        [(2, "let a = \"/proc/self\";".to_string())]
    );
}
