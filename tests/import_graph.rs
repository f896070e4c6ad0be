//! No import circle in `src/` (issue 41): builds the file-level import graph of the library
//! and fails listing every cycle (strongly connected component of more than one file).
//!
//! A node is a `.rs` file under `src/`. An edge `a.rs → b.rs` is a path in `a.rs` that names
//! an item of the module defined by `b.rs`: `use crate::x::y`, `crate::x::y::Z` in code,
//! `super::`, `self::`, a child module's name (`fed::Fed`), or a name a `use` bound to a
//! module (`use crate::record::{self, ..}` then `record::Header`). A path resolves to the
//! longest prefix that is a module; an inline `mod m { .. }` belongs to its file. A
//! re-export is an edge like any `use` (`pub use raw::X` in `flows/mod.rs` points at
//! `flows/raw.rs`).
//!
//! Not a circle: a module and its own submodules using one another (see [`one_module`]).
//!
//! Ignored: comments and string literals; every item under `#[cfg(test)]` (test modules,
//! test-only functions and `#[cfg(test)] mod x;` files); `src/main.rs` (the binary, its own
//! crate, which nothing in the library can import); macros called by their bare name
//! (`macro_rules!` textual scope) and `pub(in path)` visibilities.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};

#[derive(Clone, Debug, PartialEq)]
enum Tok {
    Ident(String),
    Sep, // `::`
    Punct(char),
}

#[derive(Clone, Debug)]
struct Token {
    tok: Tok,
    line: usize,
}

fn is_ident_start(c: char) -> bool {
    c.is_alphabetic() || c == '_'
}

fn is_ident_char(c: char) -> bool {
    c.is_alphanumeric() || c == '_'
}

/// Rust tokens with comments, strings and char literals dropped.
fn tokenize(src: &str) -> Vec<Token> {
    let s: Vec<char> = src.chars().collect();
    let mut out = Vec::new();
    let mut i = 0;
    let mut line = 1;
    let n = s.len();
    // Skips a quoted string starting at s[i] == '"'; returns the index after it.
    let skip_str = |mut i: usize, line: &mut usize| -> usize {
        i += 1;
        while i < n {
            match s[i] {
                '\\' => i += 2,
                '"' => return i + 1,
                c => {
                    if c == '\n' {
                        *line += 1;
                    }
                    i += 1;
                }
            }
        }
        n
    };
    while i < n {
        let c = s[i];
        if c == '\n' {
            line += 1;
            i += 1;
        } else if c.is_whitespace() {
            i += 1;
        } else if c == '/' && i + 1 < n && s[i + 1] == '/' {
            while i < n && s[i] != '\n' {
                i += 1;
            }
        } else if c == '/' && i + 1 < n && s[i + 1] == '*' {
            let mut depth = 0;
            while i < n {
                if s[i] == '/' && i + 1 < n && s[i + 1] == '*' {
                    depth += 1;
                    i += 2;
                } else if s[i] == '*' && i + 1 < n && s[i + 1] == '/' {
                    depth -= 1;
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    if s[i] == '\n' {
                        line += 1;
                    }
                    i += 1;
                }
            }
        } else if c == '"' {
            i = skip_str(i, &mut line);
        } else if c == '\'' {
            // Char literal or lifetime.
            if i + 1 < n && s[i + 1] == '\\' {
                i += 2;
                while i < n && s[i] != '\'' {
                    i += 1;
                }
                i += 1;
            } else if i + 2 < n && s[i + 2] == '\'' {
                i += 3;
            } else {
                i += 1; // lifetime: its name follows as an identifier
            }
        } else if is_ident_start(c) {
            let start = i;
            while i < n && is_ident_char(s[i]) {
                i += 1;
            }
            let word: String = s[start..i].iter().collect();
            // Raw and prefixed strings: r"..", r#".."#, b"..", br#".."#, c"..".
            if matches!(word.as_str(), "r" | "br" | "cr") && i < n && (s[i] == '#' || s[i] == '"') {
                let mut hashes = 0;
                while i < n && s[i] == '#' {
                    hashes += 1;
                    i += 1;
                }
                if i < n && s[i] == '"' {
                    i += 1;
                    loop {
                        if i >= n {
                            break;
                        }
                        if s[i] == '\n' {
                            line += 1;
                        }
                        if s[i] == '"' && (0..hashes).all(|k| i + 1 + k < n && s[i + 1 + k] == '#')
                        {
                            i += 1 + hashes;
                            break;
                        }
                        i += 1;
                    }
                    continue;
                }
                // `r#ident` (raw identifier)
                let start = i;
                while i < n && is_ident_char(s[i]) {
                    i += 1;
                }
                let word: String = s[start..i].iter().collect();
                out.push(Token {
                    tok: Tok::Ident(word),
                    line,
                });
                continue;
            }
            if matches!(word.as_str(), "b" | "c") && i < n && s[i] == '"' {
                i = skip_str(i, &mut line);
                continue;
            }
            if word == "b" && i < n && s[i] == '\'' {
                continue; // the char literal is skipped next round
            }
            out.push(Token {
                tok: Tok::Ident(word),
                line,
            });
        } else if c.is_ascii_digit() {
            while i < n && (is_ident_char(s[i]) || s[i] == '.') {
                // `1..2` is a range, not a float
                if s[i] == '.' && i + 1 < n && s[i + 1] == '.' {
                    break;
                }
                i += 1;
            }
        } else if c == ':' && i + 1 < n && s[i + 1] == ':' {
            out.push(Token {
                tok: Tok::Sep,
                line,
            });
            i += 2;
        } else {
            out.push(Token {
                tok: Tok::Punct(c),
                line,
            });
            i += 1;
        }
    }
    out
}

fn ident(t: &Token) -> Option<&str> {
    match &t.tok {
        Tok::Ident(s) => Some(s),
        _ => None,
    }
}

fn punct(t: &Token, c: char) -> bool {
    t.tok == Tok::Punct(c)
}

/// Index after the bracket group opening at `toks[i]`.
fn skip_group(toks: &[Token], mut i: usize) -> usize {
    let mut depth = 0i32;
    while i < toks.len() {
        match toks[i].tok {
            Tok::Punct('(' | '[' | '{') => depth += 1,
            Tok::Punct(')' | ']' | '}') => {
                depth -= 1;
                if depth == 0 {
                    return i + 1;
                }
            }
            _ => {}
        }
        i += 1;
    }
    i
}

/// Drops every item under `#[cfg(test)]`; returns the kept tokens, the names of
/// `#[cfg(test)] mod name;` children, and whether the file is `#![cfg(test)]` itself.
fn strip_cfg_test(toks: &[Token]) -> (Vec<Token>, Vec<String>, bool) {
    let is_cfg_test = |inner: &[Token]| {
        inner.len() == 4
            && ident(&inner[0]) == Some("cfg")
            && punct(&inner[1], '(')
            && ident(&inner[2]) == Some("test")
            && punct(&inner[3], ')')
    };
    let mut out = Vec::new();
    let mut test_mods = Vec::new();
    let mut whole_file = false;
    let mut i = 0;
    while i < toks.len() {
        if punct(&toks[i], '#') && i + 1 < toks.len() {
            let inner_attr = punct(&toks[i + 1], '!');
            let open = if inner_attr { i + 2 } else { i + 1 };
            if open < toks.len() && punct(&toks[open], '[') {
                let end = skip_group(toks, open);
                if is_cfg_test(&toks[open + 1..end - 1]) {
                    if inner_attr {
                        whole_file = true;
                        i = end;
                        continue;
                    }
                    // Skip further attributes, then the item.
                    let mut j = end;
                    while j + 1 < toks.len() && punct(&toks[j], '#') && punct(&toks[j + 1], '[') {
                        j = skip_group(toks, j + 1);
                    }
                    let item_start = j;
                    let mut depth = 0i32;
                    while j < toks.len() {
                        match toks[j].tok {
                            Tok::Punct('(' | '[' | '{') => depth += 1,
                            Tok::Punct(')' | ']' | '}') => {
                                if depth == 0 {
                                    break; // the enclosing group's closer: keep it
                                }
                                depth -= 1;
                                if depth == 0 && punct(&toks[j], '}') {
                                    j += 1;
                                    break;
                                }
                            }
                            // `;` ends an item; `,` a field, an argument or a match arm
                            // (and, too early, `impl<A, B>`: then the rest is kept).
                            Tok::Punct(';' | ',') if depth == 0 => {
                                j += 1;
                                break;
                            }
                            _ => {}
                        }
                        j += 1;
                    }
                    let item: Vec<&str> = toks[item_start..j].iter().filter_map(ident).collect();
                    if let Some(k) = item.iter().position(|w| *w == "mod") {
                        if k + 1 < item.len() && punct(&toks[j - 1], ';') {
                            test_mods.push(item[k + 1].to_string());
                        }
                    }
                    i = j;
                    continue;
                }
            }
        }
        out.push(toks[i].clone());
        i += 1;
    }
    (out, test_mods, whole_file)
}

type ModPath = Vec<String>;

struct SrcFile {
    rel: String,
    module: ModPath,
    toks: Vec<Token>,
    test_mods: Vec<String>,
    test_only: bool,
}

fn module_of(rel: &str) -> ModPath {
    let stem = rel.strip_suffix(".rs").unwrap();
    let mut parts: Vec<String> = stem.split('/').map(str::to_string).collect();
    if parts.last().map(String::as_str) == Some("mod") || stem == "lib" {
        parts.pop();
    }
    parts
}

fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
    for e in fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            walk(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

/// For each token, the module path of the (inline) module it sits in, relative to the file's
/// module; and every inline module found.
fn inline_scopes(toks: &[Token]) -> (Vec<ModPath>, Vec<ModPath>) {
    let mut scope_of = Vec::with_capacity(toks.len());
    let mut stack: Vec<(String, i32)> = Vec::new();
    let mut inline = Vec::new();
    let mut depth = 0i32;
    let mut i = 0;
    while i < toks.len() {
        let here: ModPath = stack.iter().map(|(n, _)| n.clone()).collect();
        scope_of.push(here.clone());
        match toks[i].tok {
            Tok::Punct('{') => depth += 1,
            Tok::Punct('}') => {
                if stack.last().is_some_and(|(_, d)| *d == depth) {
                    stack.pop();
                }
                depth -= 1;
            }
            _ => {}
        }
        if ident(&toks[i]) == Some("mod") && i + 2 < toks.len() && punct(&toks[i + 2], '{') {
            if let Some(name) = ident(&toks[i + 1]) {
                let mut p = here;
                p.push(name.to_string());
                inline.push(p);
                stack.push((name.to_string(), depth + 1));
            }
        }
        i += 1;
    }
    (scope_of, inline)
}

/// The paths a `use` tree starting at `toks[i]` names, and the index after it; `aliases`
/// gets each name the tree binds (`x`, `x as y`, `self`).
fn parse_use_tree(
    toks: &[Token],
    mut i: usize,
    prefix: &[String],
    out: &mut Vec<(ModPath, usize)>,
    aliases: &mut Vec<(String, ModPath)>,
) -> usize {
    let mut path: Vec<String> = prefix.to_vec();
    let line = toks.get(i).map_or(0, |t| t.line);
    loop {
        if i >= toks.len() {
            return i;
        }
        if punct(&toks[i], '{') {
            i += 1;
            loop {
                if i >= toks.len() {
                    return i;
                }
                if punct(&toks[i], '}') {
                    return i + 1;
                }
                if punct(&toks[i], ',') {
                    i += 1;
                    continue;
                }
                i = parse_use_tree(toks, i, &path, out, aliases);
            }
        }
        if punct(&toks[i], '*') {
            out.push((path.clone(), line));
            return i + 1;
        }
        if toks[i].tok == Tok::Sep {
            i += 1;
            continue;
        }
        match ident(&toks[i]) {
            Some("self") if !path.is_empty() => {
                i += 1;
                let name = path.last().unwrap().clone();
                let bound = alias_after(toks, &mut i).unwrap_or(name);
                aliases.push((bound, path.clone()));
                out.push((path.clone(), line));
                return i;
            }
            Some(w) => {
                path.push(w.to_string());
                i += 1;
                if i < toks.len() && toks[i].tok == Tok::Sep {
                    continue;
                }
                let bound = alias_after(toks, &mut i).unwrap_or_else(|| w.to_string());
                aliases.push((bound, path.clone()));
                out.push((path.clone(), line));
                return i;
            }
            None => return i,
        }
    }
}

fn alias_after(toks: &[Token], i: &mut usize) -> Option<String> {
    if *i + 1 < toks.len() && ident(&toks[*i]) == Some("as") {
        let name = ident(&toks[*i + 1]).map(str::to_string);
        *i += 2;
        return name;
    }
    None
}

struct Graph {
    files: Vec<String>,
    modules: Vec<ModPath>,
    /// (from, to) → first reference: line and the path as written
    edges: BTreeMap<(usize, usize), (usize, String)>,
}

fn build_graph(src: &Path) -> Graph {
    let mut paths = Vec::new();
    walk(src, &mut paths);
    paths.sort();
    let mut files: Vec<SrcFile> = Vec::new();
    for p in &paths {
        let rel = p
            .strip_prefix(src)
            .unwrap()
            .to_string_lossy()
            .replace('\\', "/");
        if rel == "main.rs" {
            continue;
        }
        let text = fs::read_to_string(p).unwrap();
        let (toks, test_mods, test_only) = strip_cfg_test(&tokenize(&text));
        files.push(SrcFile {
            module: module_of(&rel),
            rel,
            toks,
            test_mods,
            test_only,
        });
    }
    // Test-only files: `#[cfg(test)] mod x;` children and everything under them.
    let test_roots: Vec<ModPath> = files
        .iter()
        .flat_map(|f| {
            f.test_mods.iter().map(|m| {
                let mut p = f.module.clone();
                p.push(m.clone());
                p
            })
        })
        .collect();
    files.retain(|f| !f.test_only && !test_roots.iter().any(|r| f.module.starts_with(r)));

    // Every module, file or inline, and the file that holds it.
    let mut module_file: BTreeMap<ModPath, usize> = BTreeMap::new();
    let mut scopes = Vec::new();
    for (idx, f) in files.iter().enumerate() {
        module_file.insert(f.module.clone(), idx);
        let (scope_of, inline) = inline_scopes(&f.toks);
        for m in inline {
            let mut p = f.module.clone();
            p.extend(m);
            module_file.insert(p, idx);
        }
        scopes.push(scope_of);
    }

    let mut edges = BTreeMap::new();
    for (idx, f) in files.iter().enumerate() {
        let toks = &f.toks;
        let abs_scope = |i: usize| -> ModPath {
            let mut p = f.module.clone();
            p.extend(scopes[idx][i].iter().cloned());
            p
        };
        // Resolves a written path to an absolute module path (None: external or local item).
        let resolve = |written: &[String], scope: &ModPath, aliases: &BTreeMap<String, ModPath>| {
            let mut base: ModPath;
            let mut rest = written;
            match written.first().map(String::as_str) {
                Some("crate") => {
                    base = Vec::new();
                    rest = &written[1..];
                }
                Some("self") => {
                    base = scope.clone();
                    rest = &written[1..];
                }
                Some("super") => {
                    base = scope.clone();
                    while rest.first().map(String::as_str) == Some("super") {
                        base.pop()?;
                        rest = &rest[1..];
                    }
                }
                Some(first) => {
                    let mut child = scope.clone();
                    child.push(first.to_string());
                    if module_file.contains_key(&child) {
                        base = child;
                    } else if let Some(m) = aliases.get(first) {
                        base = m.clone();
                    } else {
                        return None;
                    }
                    rest = &written[1..];
                }
                None => return None,
            }
            base.extend(rest.iter().cloned());
            Some(base)
        };
        let target_file = |abs: &ModPath| -> Option<usize> {
            (0..=abs.len())
                .rev()
                .find_map(|k| module_file.get(&abs[..k]).copied())
        };

        // Pass 1: `use` items, collecting names bound to modules.
        let mut uses: Vec<(ModPath, usize, ModPath)> = Vec::new(); // written, line, scope
        let mut aliases: BTreeMap<String, ModPath> = BTreeMap::new();
        let mut in_use = vec![false; toks.len()];
        let mut i = 0;
        while i < toks.len() {
            if ident(&toks[i]) == Some("use") {
                let mut found = Vec::new();
                let mut bound = Vec::new();
                let start = i;
                let scope = abs_scope(i);
                let end = parse_use_tree(toks, i + 1, &[], &mut found, &mut bound);
                for flag in in_use.iter_mut().take(end.min(toks.len())).skip(start) {
                    *flag = true;
                }
                for (w, line) in found {
                    uses.push((w, line, scope.clone()));
                }
                for (name, w) in bound {
                    if let Some(abs) = resolve(&w, &scope, &aliases) {
                        if module_file.contains_key(&abs) {
                            aliases.insert(name, abs);
                        }
                    }
                }
                i = end.max(i + 1);
            } else {
                i += 1;
            }
        }
        let mut add = |abs: Option<ModPath>, line: usize, written: &[String]| {
            if let Some(to) = abs.as_ref().and_then(&target_file) {
                if to != idx {
                    edges.entry((idx, to)).or_insert((line, written.join("::")));
                }
            }
        };
        for (w, line, scope) in &uses {
            add(resolve(w, scope, &aliases), *line, w);
        }
        // Pass 2: paths in code, `a::b::c` with at least one `::`.
        let mut i = 0;
        while i < toks.len() {
            let starts_path = !in_use[i]
                && ident(&toks[i]).is_some()
                && i + 1 < toks.len()
                && toks[i + 1].tok == Tok::Sep
                && (i == 0 || toks[i - 1].tok != Tok::Sep);
            if !starts_path {
                i += 1;
                continue;
            }
            let mut written = vec![ident(&toks[i]).unwrap().to_string()];
            let mut j = i + 1;
            while j + 1 < toks.len() && toks[j].tok == Tok::Sep {
                match ident(&toks[j + 1]) {
                    Some(w) => written.push(w.to_string()),
                    None => break,
                }
                j += 2;
            }
            add(
                resolve(&written, &abs_scope(i), &aliases),
                toks[i].line,
                &written,
            );
            i = j;
        }
    }
    Graph {
        modules: files.iter().map(|f| f.module.clone()).collect(),
        files: files.into_iter().map(|f| f.rel).collect(),
        edges,
    }
}

/// Tarjan's strongly connected components.
fn sccs(n: usize, adj: &[Vec<usize>]) -> Vec<Vec<usize>> {
    struct St<'a> {
        adj: &'a [Vec<usize>],
        index: Vec<Option<usize>>,
        low: Vec<usize>,
        on: Vec<bool>,
        stack: Vec<usize>,
        next: usize,
        out: Vec<Vec<usize>>,
    }
    fn visit(st: &mut St, v: usize) {
        st.index[v] = Some(st.next);
        st.low[v] = st.next;
        st.next += 1;
        st.stack.push(v);
        st.on[v] = true;
        for k in 0..st.adj[v].len() {
            let w = st.adj[v][k];
            match st.index[w] {
                None => {
                    visit(st, w);
                    st.low[v] = st.low[v].min(st.low[w]);
                }
                Some(iw) if st.on[w] => st.low[v] = st.low[v].min(iw),
                _ => {}
            }
        }
        if Some(st.low[v]) == st.index[v] {
            let mut comp = Vec::new();
            loop {
                let w = st.stack.pop().unwrap();
                st.on[w] = false;
                comp.push(w);
                if w == v {
                    break;
                }
            }
            st.out.push(comp);
        }
    }
    let mut st = St {
        adj,
        index: vec![None; n],
        low: vec![0; n],
        on: vec![false; n],
        stack: Vec::new(),
        next: 0,
        out: Vec::new(),
    };
    for v in 0..n {
        if st.index[v].is_none() {
            visit(&mut st, v);
        }
    }
    st.out
}

/// Rust's module idiom is not a circle: a module and some of its own submodules using one
/// another (a child's `super::`, the parent's `pub use child::X`). A strongly connected set
/// is that when it holds the file of the module that is the common ancestor of all its files,
/// and that module is not the crate root; a set that reaches outside, or siblings that use
/// one another without their parent, is a circle.
fn one_module(comp: &[usize], modules: &[ModPath]) -> bool {
    let mut common: &[String] = &modules[comp[0]];
    for &v in comp {
        let m = &modules[v];
        let k = common
            .iter()
            .zip(m.iter())
            .take_while(|(a, b)| a == b)
            .count();
        common = &common[..k];
    }
    !common.is_empty() && comp.iter().any(|&v| modules[v] == common)
}

/// A shortest cycle through `start` inside `comp`, as file indices (start .. back to start).
fn a_cycle(start: usize, comp: &BTreeSet<usize>, adj: &[Vec<usize>]) -> Vec<usize> {
    let mut prev: BTreeMap<usize, usize> = BTreeMap::new();
    let mut queue = std::collections::VecDeque::from([start]);
    while let Some(v) = queue.pop_front() {
        for &w in &adj[v] {
            if !comp.contains(&w) {
                continue;
            }
            if w == start {
                let mut path = vec![v];
                let mut cur = v;
                while cur != start {
                    cur = prev[&cur];
                    path.push(cur);
                }
                path.reverse();
                path.push(start);
                return path;
            }
            if let std::collections::btree_map::Entry::Vacant(e) = prev.entry(w) {
                e.insert(v);
                queue.push_back(w);
            }
        }
    }
    vec![start]
}

/// Edges left out of the graph, each with why (none now). Each must still exist; once it is
/// gone, take it off this list.
const PENDING: &[(&str, &str, &str)] = &[];

#[test]
fn no_import_circle_in_src() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let g = build_graph(&src);
    let n = g.files.len();
    let mut adj = vec![Vec::new(); n];
    let pending = |a: usize, b: usize| {
        PENDING
            .iter()
            .any(|(from, to, _)| g.files[a] == *from && g.files[b] == *to)
    };
    for &(a, b) in g.edges.keys() {
        if !pending(a, b) {
            adj[a].push(b);
        }
    }
    for (from, to, why) in PENDING {
        let gone = !g
            .edges
            .keys()
            .any(|&(a, b)| g.files[a] == *from && g.files[b] == *to);
        assert!(!gone, "{from} → {to} is gone: take it off PENDING ({why})");
    }
    assert!(
        n > 50 && g.edges.len() > 100,
        "graph too small: {n} files, {} edges",
        g.edges.len()
    );

    let mut report = String::new();
    let mut comps: Vec<Vec<usize>> = sccs(n, &adj)
        .into_iter()
        .filter(|c| c.len() > 1 && !one_module(c, &g.modules))
        .collect();
    for c in &mut comps {
        c.sort_by(|a, b| g.files[*a].cmp(&g.files[*b]));
    }
    comps.sort_by(|a, b| g.files[a[0]].cmp(&g.files[b[0]]));
    for comp in &comps {
        let set: BTreeSet<usize> = comp.iter().copied().collect();
        let names: Vec<&str> = comp.iter().map(|&v| g.files[v].as_str()).collect();
        report += &format!("\ncircle of {} files: {}\n", comp.len(), names.join(", "));
        let cycle = a_cycle(comp[0], &set, &adj);
        let shown: Vec<&str> = cycle.iter().map(|&v| g.files[v].as_str()).collect();
        report += &format!("  e.g. {}\n", shown.join(" → "));
        for &a in comp {
            for &b in &adj[a] {
                if set.contains(&b) {
                    let (line, written) = &g.edges[&(a, b)];
                    report += &format!("  {}:{line} → {}   ({written})\n", g.files[a], g.files[b]);
                }
            }
        }
    }
    assert!(
        comps.is_empty(),
        "import circles in src/ ({}):{report}",
        comps.len()
    );
}

#[test]
fn the_graph_sees_each_kind_of_reference() {
    let toks = tokenize(
        "use crate::a::{self, b::C as D}; // crate::z::y\nfn f() { let s = \"crate::q::r\"; super::x::y(); crate::m::n::f(); }",
    );
    let words: Vec<String> = toks
        .iter()
        .filter_map(|t| ident(t).map(str::to_string))
        .collect();
    assert!(!words.contains(&"z".to_string()) && !words.contains(&"q".to_string()));
    let (kept, mods, _) = strip_cfg_test(&tokenize(
        "struct S { #[cfg(test)] a: u8, b: u8 }\n#[cfg(test)]\nmod tests;\n#[cfg(test)]\nmod t2 { use crate::x; }\nfn g() {}",
    ));
    let kept: Vec<&str> = kept.iter().filter_map(ident).collect();
    assert_eq!(kept, ["struct", "S", "b", "u8", "fn", "g"]);
    assert_eq!(mods, ["tests"]);
    let mut found = Vec::new();
    let mut bound = Vec::new();
    let t = tokenize("crate::a::{self, b::{C as D, *}, e};");
    parse_use_tree(&t, 0, &[], &mut found, &mut bound);
    let found: Vec<String> = found.iter().map(|(p, _)| p.join("::")).collect();
    assert_eq!(
        found,
        ["crate::a", "crate::a::b::C", "crate::a::b", "crate::a::e"]
    );
    let bound: Vec<String> = bound
        .iter()
        .map(|(n, p)| format!("{n}={}", p.join("::")))
        .collect();
    assert_eq!(bound, ["a=crate::a", "D=crate::a::b::C", "e=crate::a::e"]);
}

/// The graph of src/ has the edges of each kind of reference (a parser that sees none would
/// find no circle either).
#[test]
fn the_graph_of_src_has_each_kind_of_edge() {
    let g = build_graph(&Path::new(env!("CARGO_MANIFEST_DIR")).join("src"));
    let has = |from: &str, to: &str| {
        g.edges
            .keys()
            .any(|&(a, b)| g.files[a] == from && g.files[b] == to)
    };
    for (from, to, kind) in [
        ("driver/live.rs", "pipeline.rs", "use crate::"),
        ("pipeline.rs", "flows/mod.rs", "crate:: path in code"),
        ("record/reader.rs", "record/mod.rs", "use super::*"),
        ("pipeline.rs", "pipeline/fed.rs", "a child module by name"),
        (
            "record/mod.rs",
            "record/read_stats.rs",
            "pub use of a child",
        ),
    ] {
        assert!(has(from, to), "no edge {from} → {to} ({kind})");
    }
    // Test-only files are no nodes.
    assert!(!g.files.iter().any(|f| f == "test_rng.rs"));
}
