//! The crate's layers point one way: a module imports only from modules below it (docs/ARCHITECTURE.md).
//!
//! Reads every file of `src/`, takes each `crate::` and `super::` path outside comments and test
//! modules, and fails when one names a module of a higher layer, or reaches an item through the crate
//! root (`crate::Report` rather than `crate::report::Report`), which hides which layer it comes from.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// The top-level modules of `src/`, bottom first. A module may import from itself and from those
/// before it, never from those after it.
const LAYERS: &[&str] = &[
    // Leaves: no imports from the crate (but `sync`'s atomics, in `fork`'s locks).
    "sync",
    "fork",
    "format",
    "estimate",
    "process",
    "loader",
    "reentry",
    "usdt",
    // What a group of samples adds up to (a site's, a scope's).
    "tally",
    // The counters (with the size classes), frag's own work apart from the program's, the sampler
    // and what it feeds (origin, sites, scopes), and a sample's life.
    "stats",
    "own",
    "sampler",
    "origin",
    "sites",
    "scope",
    "sample_life",
    // The allocators, then the allocation path that wraps them, and the hooks that sample inside
    // jemalloc.
    "backend",
    "tracked",
    "hooked",
    // What reads the counters and the allocator: tuning, the report (with its diagnosis), outputs.
    "tune",
    "report",
    "history",
    "profile",
    "watch",
    "publish",
    // What acts on the allocator on its own, publishing as the publisher does.
    "reclaim",
];

fn rank(module: &str) -> Option<usize> {
    LAYERS.iter().position(|m| *m == module)
}

/// The file's module path: `src/backend/jemalloc/mod.rs` is `["backend", "jemalloc"]`.
fn module_path(file: &Path, src: &Path) -> Vec<String> {
    let rel = file.strip_prefix(src).expect("under src");
    let mut parts: Vec<String> = rel.iter().map(|p| p.to_string_lossy().into_owned()).collect();
    let last = parts.pop().expect("a file name");
    let stem = last.trim_end_matches(".rs");
    if stem != "mod" && stem != "lib" {
        parts.push(stem.to_owned());
    }
    parts
}

/// The code without comments, string contents, and the `#[cfg(test)] mod tests` block.
fn code_of(text: &str) -> String {
    let text = match text.find("#[cfg(test)]\nmod tests {") {
        Some(i) => &text[..i],
        None => text,
    };
    let mut out = String::with_capacity(text.len());
    // Strings run across lines (`\` continuations); comments end with theirs.
    let mut in_str = false;
    for line in text.lines() {
        let mut chars = line.char_indices().peekable();
        while let Some((i, c)) = chars.next() {
            if in_str {
                if c == '\\' {
                    chars.next();
                } else if c == '"' {
                    in_str = false;
                    out.push('"');
                }
                continue;
            }
            if c == '/' && line[i..].starts_with("//") {
                break;
            }
            if c == '\'' && line[i..].starts_with("'\"'") {
                chars.next();
                chars.next();
                continue; // the character literal '"'
            }
            if c == '"' {
                in_str = true;
            }
            out.push(c);
        }
        out.push('\n');
    }
    out
}

/// Every path the code names from the crate root: `crate::a::b`, `super::x` resolved against
/// `module`, and each branch of `use crate::{a, b::{c, d}}`.
fn paths(code: &str, module: &[String]) -> Vec<String> {
    let mut found = Vec::new();
    let bytes = code.as_bytes();
    for (prefix, base) in [("crate::", 0usize), ("super::", 1)] {
        let mut from = 0;
        while let Some(at) = code[from..].find(prefix) {
            let start = from + at;
            from = start + prefix.len();
            let before = start.checked_sub(1).map(|i| bytes[i]);
            if before.is_some_and(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'$' || b == b':') {
                continue; // `$crate::` (a macro's public path), or the middle of a longer path
            }
            let mut root: Vec<String> = if base == 0 { Vec::new() } else { enclosing(code, start, module) };
            let mut rest = &code[start..];
            // Walk `super::super::...`.
            loop {
                if let Some(r) = rest.strip_prefix("super::") {
                    root.pop();
                    rest = r;
                } else if let Some(r) = rest.strip_prefix("crate::") {
                    rest = r;
                } else {
                    break;
                }
            }
            expand(rest, &root, &mut found);
        }
    }
    found
}

/// The module that encloses byte `at` of a file whose module is `module`: inline `mod x { .. }`
/// blocks add to it.
fn enclosing(code: &str, at: usize, module: &[String]) -> Vec<String> {
    let mut path = module.to_vec();
    let mut from = 0;
    while let Some(i) = code[from..at].find("mod ") {
        let start = from + i;
        from = start + 4;
        let name: String = code[from..].chars().take_while(|c| c.is_ascii_alphanumeric() || *c == '_').collect();
        let open = from + name.len();
        if name.is_empty() || !code[open..].trim_start().starts_with('{') {
            continue;
        }
        let body = open + code[open..].find('{').expect("an opening brace");
        let mut depth = 0usize;
        let close = code[body..].char_indices().find_map(|(j, c)| {
            match c {
                '{' => depth += 1,
                '}' => {
                    depth -= 1;
                    if depth == 0 {
                        return Some(body + j);
                    }
                }
                _ => {}
            }
            None
        });
        if close.is_none_or(|c| c > at) {
            path.push(name);
            from = body + 1;
        }
    }
    path
}

/// Appends the paths `rest` (the text after `crate::` or `super::`) names below `root`.
fn expand(rest: &str, root: &[String], found: &mut Vec<String>) {
    let ident: String = rest.chars().take_while(|c| c.is_ascii_alphanumeric() || *c == '_').collect();
    if ident.is_empty() {
        if let Some(group) = rest.strip_prefix('{') {
            // `{a, b::{c, d}}`: split at top-level commas.
            let (mut depth, mut item_start) = (0usize, 0usize);
            for (i, c) in group.char_indices() {
                match c {
                    '{' => depth += 1,
                    '}' if depth == 0 => {
                        expand(group[item_start..i].trim(), root, found);
                        return;
                    }
                    '}' => depth -= 1,
                    ',' if depth == 0 => {
                        expand(group[item_start..i].trim(), root, found);
                        item_start = i + 1;
                    }
                    _ => {}
                }
            }
        }
        return;
    }
    let mut path = root.to_vec();
    path.push(ident.clone());
    if ident.starts_with(|c: char| c.is_ascii_uppercase()) {
        found.push(path.join("::")); // a type or constant: the path ends here
        return;
    }
    let after = &rest[ident.len()..];
    match after.strip_prefix("::") {
        Some(more) if more.starts_with(|c: char| c.is_ascii_lowercase() || c == '{') => expand(more, &path, found),
        _ => found.push(path.join("::")),
    }
}

fn files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).expect("read src") {
        let path = entry.expect("entry").path();
        if path.is_dir() {
            files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

fn violations() -> BTreeSet<String> {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut all = Vec::new();
    files(&src, &mut all);
    let mut bad = BTreeSet::new();
    for file in all {
        let module = module_path(&file, &src);
        let Some(own) = module.first() else { continue }; // lib.rs: the public re-exports
        let own_rank = rank(own).unwrap_or_else(|| panic!("src/{own}: a top-level module missing from LAYERS"));
        let code = code_of(&std::fs::read_to_string(&file).expect("read"));
        for path in paths(&code, &module) {
            let first = path.split("::").next().unwrap_or_default();
            let shown = file.strip_prefix(&src).unwrap().display();
            match rank(first) {
                Some(r) if r > own_rank => {
                    bad.insert(format!("src/{shown}: {own} imports crate::{path} from a higher layer ({first})"));
                }
                Some(_) => {}
                None => {
                    bad.insert(format!("src/{shown}: crate::{path} reaches through the crate root"));
                }
            }
        }
    }
    bad
}

/// The paths a file names through its own child modules (`mod x;`, then `x::...`), from the crate
/// root.
fn child_paths(code: &str, module: &[String]) -> Vec<String> {
    let mut found = Vec::new();
    let bytes = code.as_bytes();
    for decl in code.split("mod ").skip(1) {
        let name: String = decl.chars().take_while(|c| c.is_ascii_alphanumeric() || *c == '_').collect();
        if name.is_empty() || !decl[name.len()..].trim_start().starts_with(';') {
            continue;
        }
        let prefix = format!("{name}::");
        let mut from = 0;
        while let Some(at) = code[from..].find(&prefix) {
            let start = from + at;
            from = start + prefix.len();
            let before = start.checked_sub(1).map(|i| bytes[i]);
            if before.is_some_and(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'$' || b == b':') {
                continue;
            }
            expand(&code[start..], module, &mut found);
        }
    }
    found
}

/// Each file's module and the file modules it imports from (the longest prefix of each path that
/// is a file), itself left out.
fn file_imports() -> BTreeMap<String, BTreeSet<String>> {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut all = Vec::new();
    files(&src, &mut all);
    let modules: BTreeSet<String> = all.iter().map(|f| module_path(f, &src).join("::")).collect();
    let mut graph = BTreeMap::new();
    for file in &all {
        let module = module_path(file, &src);
        let code = code_of(&std::fs::read_to_string(file).expect("read"));
        let me = module.join("::");
        let mut deps = BTreeSet::new();
        for path in paths(&code, &module).into_iter().chain(child_paths(&code, &module)) {
            let parts: Vec<&str> = path.split("::").collect();
            let file_of = (1..=parts.len()).rev().map(|n| parts[..n].join("::")).find(|m| modules.contains(m));
            if let Some(dep) = file_of.filter(|d| *d != me && !d.is_empty()) {
                deps.insert(dep);
            }
        }
        graph.insert(me, deps);
    }
    graph
}

/// The groups of files that import each other, each sorted.
fn circles(graph: &BTreeMap<String, BTreeSet<String>>) -> BTreeSet<Vec<String>> {
    let reach = |from: &String| {
        let mut seen = BTreeSet::new();
        let mut todo = vec![from.clone()];
        while let Some(m) = todo.pop() {
            for d in graph.get(&m).into_iter().flatten() {
                if seen.insert(d.clone()) {
                    todo.push(d.clone());
                }
            }
        }
        seen
    };
    let reached: BTreeMap<&String, BTreeSet<String>> = graph.keys().map(|m| (m, reach(m))).collect();
    graph
        .keys()
        .filter(|m| reached[m].contains(*m))
        .map(|m| {
            let mut group: Vec<String> =
                graph.keys().filter(|o| reached[m].contains(*o) && reached[o].contains(m)).cloned().collect();
            group.sort();
            group
        })
        .collect()
}

/// No two files import each other, directly or through others.
#[test]
fn no_file_imports_itself_through_others() {
    let found: Vec<String> = circles(&file_imports()).iter().map(|c| c.join(" <-> ")).collect();
    assert!(found.is_empty(), "import circles between files:\n{}", found.join("\n"));
}

#[test]
fn every_import_points_down() {
    let bad = violations();
    assert!(bad.is_empty(), "imports against the layers:\n{}", bad.into_iter().collect::<Vec<_>>().join("\n"));
}

/// The checker itself sees the paths it must: a `super::` chain, a nested group, the crate root.
#[test]
fn the_checker_reads_paths() {
    let module = ["report".to_owned(), "collect".to_owned()];
    let code = code_of(
        "use crate::{backend::{self, Backend}, sync};\nuse super::super::tune::x; // crate::publish\n\
         let s = \"crate::watch\"; crate::Report::new(); $crate::tune::y;\n\
         mod inner { use super::Row; mod deeper { use super::super::super::Z; } }\nuse super::Row;\n",
    );
    let mut got = paths(&code, &module);
    got.sort();
    assert_eq!(
        got,
        [
            "Report",
            "backend::Backend",
            "backend::self",
            "report::Row",
            "report::Z",
            "report::collect::Row",
            "sync",
            "tune::x"
        ]
    );
}
