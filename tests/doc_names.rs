//! The docs name only what exists: every backticked code path (`module::Type::method`,
//! `Trait::method`, `frag::report::Sites`) and every file path (`src/tracked/mod.rs`) in README.md
//! and docs/*.md resolves against the repository, or the test fails naming the doc and the name.
//!
//! Code paths resolve against an index read from the Rust sources (`src/`, `tests/`, `examples/`,
//! `benches/`): modules (by file and inline `mod`), their items and re-exports, and each type's
//! members (methods of its `impl` blocks or of the trait, fields, variants, associated items). What
//! `#[cfg(test)]` hides is not in it: a doc may not cite a test-only helper as the crate's code. A
//! path whose first segment is another crate's (`std::`, `tokio::`) is not checked; one whose first
//! segment is neither the crate's nor a known crate's fails, so that a renamed module cannot hide
//! behind an unknown name.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// First segments that are other crates, or standard types and traits a doc names.
const EXTERNAL: &[&str] = &[
    "std",
    "core",
    "alloc",
    "tikv_jemallocator",
    "tikv_jemalloc_ctl",
    "tikv_jemalloc_sys",
    "jemalloc_ctl",
    "tokio",
    "http",
    "http_body",
    "http_body_util",
    "hyper",
    "axum",
    "metrics",
    "metrics_exporter_prometheus",
    "metrics_util",
    "tracing",
    "tracing_subscriber",
    "gimli",
    "addr2line",
    "object",
    "libc",
    "serde",
    "serde_json",
    "mimalloc",
    "libmimalloc_sys",
    "snmalloc_rs",
    "snmalloc",
    "corosensei",
    "stacker",
    "serde_stacker",
    "recursive",
    "probe",
    "backtrace",
    "criterion",
    "proptest",
    "seccompiler",
    "loom",
    "plotters",
    "rustc_demangle",
    "opentelemetry",
    "crossbeam",
    "parking_lot",
    "bytes",
    "tcmalloc",
    "jemalloc",
    "glibc",
    "runtime",
    "pprof",
    "net",
    "prometheus",
    "libm",
    // Standard types and traits.
    "GlobalAlloc",
    "Layout",
    "Vec",
    "Box",
    "String",
    "Arc",
    "Rc",
    "Cell",
    "RefCell",
    "Mutex",
    "RwLock",
    "Condvar",
    "Ordering",
    "AtomicU64",
    "AtomicUsize",
    "AtomicBool",
    "AtomicPtr",
    "AtomicU32",
    "AtomicU8",
    "Instant",
    "Duration",
    "SystemTime",
    "Option",
    "Result",
    "HashMap",
    "BTreeMap",
    "Once",
    "OnceLock",
    "LazyLock",
    "Thread",
    "JoinHandle",
    "Sender",
    "Receiver",
    "File",
    "Path",
    "PathBuf",
    "Command",
    "Iterator",
    "Future",
    "Pin",
    "Poll",
    "Waker",
    "Drop",
    "Clone",
    "Default",
    "Display",
    "Debug",
    "Send",
    "Sync",
    "Fn",
    "FnMut",
    "FnOnce",
    "MaybeUninit",
    "NonNull",
    "ManuallyDrop",
    "PhantomData",
    "System",
    "Request",
    "Response",
    "StatusCode",
    "Jemalloc",
    "MiMalloc",
    "SnMalloc",
    "Self",
    "Semaphore",
    "Runtime",
    "Handle",
    "TcpListener",
    "Router",
    "Counter",
    "Gauge",
    "Histogram",
    "VacantEntry",
    "SpecFromIterNested",
    "LocalKey",
    "ValueVisitor",
    "u8",
    "u16",
    "u32",
    "u64",
    "usize",
    "i32",
    "i64",
    "f64",
    "str",
];

#[derive(Default)]
struct Index {
    /// Module path (`report::diagnosis`; the root is `""`) to the names defined or re-exported there.
    modules: BTreeMap<String, BTreeSet<String>>,
    /// Type or trait name to its members, over every `impl` and definition of that name.
    members: BTreeMap<String, BTreeSet<String>>,
    /// `pub use crate::backend::jemalloc::knobs as jemalloc` in `tune`: (`tune::jemalloc`, the
    /// target's path), made a module of its own once every file is read.
    aliases: Vec<(String, String)>,
}

impl Index {
    fn module(&mut self, path: &str) -> &mut BTreeSet<String> {
        self.modules.entry(path.to_owned()).or_default()
    }

    /// Each alias of a module becomes a module with the target's names and sub-modules.
    fn resolve_aliases(&mut self) {
        for (alias, target) in std::mem::take(&mut self.aliases) {
            let copies: Vec<(String, BTreeSet<String>)> = self
                .modules
                .iter()
                .filter_map(|(k, v)| {
                    let rest = if *k == target { "" } else { k.strip_prefix(&format!("{target}::"))? };
                    let path = if rest.is_empty() { alias.clone() } else { format!("{alias}::{rest}") };
                    Some((path, v.clone()))
                })
                .collect();
            for (path, names) in copies {
                self.module(&path).extend(names);
            }
        }
    }

    fn children(&self, module: &str) -> impl Iterator<Item = &str> {
        let prefix = if module.is_empty() { String::new() } else { format!("{module}::") };
        self.modules.keys().filter_map(move |k| {
            let rest = k.strip_prefix(&prefix)?;
            (!rest.is_empty() && !rest.contains("::")).then_some(rest)
        })
    }

    /// Whether `segs` names something from `module` down.
    fn walk(&self, module: &str, segs: &[&str]) -> bool {
        let Some((first, rest)) = segs.split_first() else { return true };
        if self.children(module).any(|c| c == *first) {
            let child = if module.is_empty() { first.to_string() } else { format!("{module}::{first}") };
            if self.walk(&child, rest) {
                return true;
            }
        }
        let Some(items) = self.modules.get(module) else { return false };
        items.contains(*first) && self.member_path(first, rest)
    }

    /// Whether `rest` names a member of the type or trait `name` (nothing: the type itself).
    fn member_path(&self, name: &str, rest: &[&str]) -> bool {
        match rest {
            [] => true,
            [member] => self.members.get(name).is_some_and(|m| m.contains(*member)),
            _ => false,
        }
    }

    fn resolve(&self, path: &[&str]) -> Resolution {
        let segs: Vec<&str> =
            path.iter().copied().skip_while(|s| matches!(*s, "frag" | "crate" | "self" | "super")).collect();
        let Some(first) = segs.first() else { return Resolution::Found };
        if segs.len() < 2 && path.len() < 2 {
            return Resolution::Found;
        }
        let modules: Vec<&String> =
            self.modules.keys().filter(|k| k.rsplit("::").next() == Some(*first) && !k.is_empty()).collect();
        let is_type = self.members.contains_key(*first);
        let at_root = self.modules.get("").is_some_and(|r| r.contains(*first));
        let found = modules.iter().any(|m| self.walk(m, &segs[1..]))
            || (is_type && self.member_path(first, &segs[1..]))
            || (at_root && self.walk("", &segs));
        match (found, EXTERNAL.contains(first)) {
            (true, _) => Resolution::Found,
            // `mimalloc::MiMalloc` is the crate's, though the backend has a module of that name.
            (false, true) => Resolution::External,
            (false, false) => Resolution::Missing,
        }
    }
}

enum Resolution {
    Found,
    External,
    Missing,
}

/// The module path of a Rust file: `src/backend/jemalloc/mod.rs` is `backend::jemalloc`, the
/// crate root `""`; `tests/common/service.rs` is `common::service`, `tests/scopes.rs` `scopes`.
fn module_of(root: &Path, file: &Path) -> String {
    let rel = file.strip_prefix(root).unwrap();
    let mut parts: Vec<String> = rel.iter().skip(1).map(|p| p.to_string_lossy().into_owned()).collect();
    let last = parts.pop().unwrap();
    let stem = last.trim_end_matches(".rs");
    if !matches!(stem, "mod" | "lib" | "main") {
        parts.push(stem.to_owned());
    }
    parts.join("::")
}

/// Where the lexer is at a line's end: in code, in a string, a raw string (with its `#`s) or a
/// block comment.
#[derive(Clone, Copy, PartialEq)]
enum Lex {
    Code,
    Str,
    Raw(usize),
    Comment,
}

/// A line's code: no comment, no string or character contents; `lex` carries what runs across lines.
fn code(line: &str, lex: &mut Lex) -> String {
    let chars: Vec<char> = line.chars().collect();
    let mut out = String::new();
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        let next = chars.get(i + 1).copied();
        match *lex {
            Lex::Comment => {
                if c == '*' && next == Some('/') {
                    *lex = Lex::Code;
                    i += 1;
                }
            }
            Lex::Str => match c {
                '\\' => i += 1,
                '"' => {
                    *lex = Lex::Code;
                    out.push('"');
                }
                _ => {}
            },
            Lex::Raw(hashes) => {
                if c == '"' && chars[i + 1..].iter().take(hashes).filter(|h| **h == '#').count() == hashes {
                    *lex = Lex::Code;
                    out.push('"');
                    i += hashes;
                }
            }
            Lex::Code => match c {
                '/' if next == Some('/') => break,
                '/' if next == Some('*') => {
                    *lex = Lex::Comment;
                    i += 1;
                }
                '"' => {
                    *lex = Lex::Str;
                    out.push('"');
                }
                'r' if (next == Some('"') || next == Some('#'))
                    && !out.ends_with(|p: char| p.is_alphanumeric() || p == '_') =>
                {
                    let hashes = chars[i + 1..].iter().take_while(|h| **h == '#').count();
                    if chars.get(i + 1 + hashes) == Some(&'"') {
                        *lex = Lex::Raw(hashes);
                        out.push('"');
                        i += 1 + hashes;
                    } else {
                        out.push(c);
                    }
                }
                '\'' => {
                    // A character literal ('{', '\n', '\'') or a lifetime ('a): skip the literal only.
                    if next == Some('\\') {
                        i += 2;
                        while i < chars.len() && chars[i] != '\'' {
                            i += 1;
                        }
                    } else if chars.get(i + 2) == Some(&'\'') {
                        i += 2;
                    } else {
                        out.push(c);
                    }
                }
                _ => out.push(c),
            },
        }
        i += 1;
    }
    out
}

/// The identifier after `keyword` in `line`, if `keyword` is there as a word.
fn name_after<'a>(line: &'a str, keyword: &str) -> Option<&'a str> {
    let mut from = 0;
    while let Some(i) = line[from..].find(keyword) {
        let at = from + i;
        let before_ok = at == 0 || !line[..at].ends_with(|c: char| c.is_alphanumeric() || c == '_');
        let after = &line[at + keyword.len()..];
        if before_ok && after.starts_with(' ') {
            let name = after.trim_start();
            let end = name.find(|c: char| !(c.is_alphanumeric() || c == '_')).unwrap_or(name.len());
            if end > 0 {
                return Some(&name[..end]);
            }
        }
        from = at + keyword.len();
    }
    None
}

/// A `use path as alias;` of one path: (the path without `crate::`, the alias).
fn use_alias(stmt: &str) -> Option<(String, String)> {
    let body = stmt.trim().trim_end_matches(';');
    let body = body[body.find("use ")? + 4..].trim();
    if body.contains('{') {
        return None;
    }
    let (path, alias) = body.split_once(" as ")?;
    Some((path.trim().trim_start_matches("crate::").to_owned(), alias.trim().to_owned()))
}

/// The names a `use` statement brings in: the last segment of each path, or its alias.
fn use_names(stmt: &str) -> Vec<String> {
    let body = stmt.trim().trim_end_matches(';');
    let body = body[body.find("use ").map_or(0, |i| i + 4)..].trim();
    let mut out = Vec::new();
    // Split at commas outside nothing but the innermost braces: each piece ends in a name.
    let flat: String = body.chars().map(|c| if c == '{' || c == '}' { ',' } else { c }).collect();
    for piece in flat.split(',') {
        let piece = piece.trim();
        if piece.is_empty() || piece.ends_with("::") {
            continue;
        }
        let name = match piece.split_once(" as ") {
            Some((_, alias)) => alias.trim(),
            None => piece.rsplit("::").next().unwrap_or(piece).trim(),
        };
        if name != "self" && name != "*" && !name.is_empty() {
            out.push(name.to_owned());
        }
    }
    out
}

#[derive(Debug)]
enum Scope {
    Module(String),
    Type(String),
    Skip,
    Other,
}

/// The type an `impl` line is for: `impl<T> Trait for Type<T> {` is `(Type, Some(Trait))`.
fn impl_target(line: &str) -> Option<(String, Option<String>)> {
    let at = line.find("impl")?;
    let mut rest = line[at + 4..].trim_start();
    if rest.starts_with('<') {
        let mut depth = 0;
        for (i, c) in rest.char_indices() {
            match c {
                '<' => depth += 1,
                '>' => {
                    depth -= 1;
                    if depth == 0 {
                        rest = rest[i + 1..].trim_start();
                        break;
                    }
                }
                _ => {}
            }
        }
    }
    let head = rest.split(" where").next().unwrap_or(rest).trim_end_matches('{').trim();
    let last_name = |s: &str| -> String {
        let s = s.trim().trim_start_matches("unsafe ").trim_start_matches('!');
        let s = s.split('<').next().unwrap_or(s);
        s.rsplit("::").next().unwrap_or(s).trim().to_owned()
    };
    match head.split_once(" for ") {
        Some((tr, ty)) => Some((last_name(ty), Some(last_name(tr)))),
        None => Some((last_name(head), None)),
    }
}

fn index_file(index: &mut Index, module: &str, text: &str) {
    index.module(module);
    let mut stack: Vec<(i32, Scope)> = Vec::new();
    let mut depth = 0i32;
    let mut skip_next = false;
    let mut pending_use: Option<String> = None;
    let mut lex = Lex::Code;
    for raw in text.lines() {
        let line = code(raw, &mut lex);
        let t = line.trim();
        let skipping = stack.iter().any(|(_, s)| matches!(s, Scope::Skip));
        let current_module = stack
            .iter()
            .rev()
            .find_map(|(_, s)| if let Scope::Module(m) = s { Some(m.clone()) } else { None })
            .unwrap_or_else(|| module.to_owned());
        let owner = stack.last().and_then(|(d, s)| if let Scope::Type(n) = s { Some((*d, n.clone())) } else { None });
        let mut opened: Option<Scope> = None;

        if let Some(u) = pending_use.as_mut() {
            u.push(' ');
            u.push_str(t);
            if t.ends_with(';') {
                let stmt = pending_use.take().unwrap();
                if !skipping {
                    for n in use_names(&stmt) {
                        index.module(&current_module).insert(n);
                    }
                }
            }
        } else if t.starts_with("#[cfg(") && t.contains("test") && !t.contains("not(test") && !t.contains("doctest") {
            skip_next = true;
        } else if t.starts_with("#[") || t.is_empty() {
            // Attributes keep a pending cfg for the item below them.
        } else {
            let skip = std::mem::take(&mut skip_next);
            let item_line = t.trim_start_matches("pub(crate) ").trim_start_matches("pub(super) ");
            let item_line = item_line.trim_start_matches("pub ");
            if item_line.starts_with("use ") {
                if t.ends_with(';') {
                    if !skip && !skipping {
                        for n in use_names(t) {
                            index.module(&current_module).insert(n);
                        }
                        if let Some((target, alias)) = use_alias(t) {
                            let path =
                                if current_module.is_empty() { alias } else { format!("{current_module}::{alias}") };
                            index.aliases.push((path, target));
                        }
                    }
                } else {
                    pending_use = Some(t.to_owned());
                }
            } else if skip {
                // A test module is named (a doc may say where a proof lives), its contents are not.
                if let Some(name) = name_after(item_line, "mod").filter(|_| item_line.starts_with("mod ")) {
                    let path =
                        if current_module.is_empty() { name.to_owned() } else { format!("{current_module}::{name}") };
                    index.module(&path);
                }
                opened = Some(Scope::Skip);
            } else if !skipping {
                let record = |index: &mut Index, name: &str| match &owner {
                    Some((d, ty)) if *d == depth => {
                        index.members.entry(ty.clone()).or_default().insert(name.to_owned());
                    }
                    _ => {
                        index.module(&current_module).insert(name.to_owned());
                    }
                };
                if let Some(name) = name_after(item_line, "mod") {
                    if item_line.trim_start().starts_with("mod ") {
                        let path = if current_module.is_empty() {
                            name.to_owned()
                        } else {
                            format!("{current_module}::{name}")
                        };
                        index.module(&path);
                        opened = Some(Scope::Module(path));
                    }
                } else if item_line.starts_with("impl") || item_line.starts_with("unsafe impl") {
                    // A trait's methods count as the type's too (`Tracked::alloc`).
                    if let Some((ty, _)) = impl_target(item_line) {
                        opened = Some(Scope::Type(ty));
                    }
                } else if let Some(name) = ["struct", "enum", "trait", "union"]
                    .iter()
                    .find_map(|k| name_after(item_line, k).filter(|_| item_line.contains(&format!("{k} "))))
                {
                    record(index, name);
                    index.members.entry(name.to_owned()).or_default();
                    opened = Some(Scope::Type(name.to_owned()));
                } else if let Some(name) = name_after(item_line, "fn") {
                    record(index, name);
                } else if let Some(name) = ["const", "static", "type"]
                    .iter()
                    .find_map(|k| item_line.starts_with(&format!("{k} ")).then(|| name_after(item_line, k)).flatten())
                {
                    record(index, name);
                } else if let Some(name) = item_line.strip_prefix("macro_rules! ") {
                    let name = name.trim_end_matches('{').trim();
                    index.module("").insert(name.to_owned());
                    index.module(&current_module).insert(name.to_owned());
                } else if let Some((d, ty)) = &owner {
                    // A field (`name: Type`) or a variant (`Name`, `Name(..)`, `Name { .. }`) of the
                    // type whose body this is.
                    if *d == depth {
                        let end =
                            item_line.find(|c: char| !(c.is_alphanumeric() || c == '_')).unwrap_or(item_line.len());
                        let name = &item_line[..end];
                        let next = item_line[end..].trim_start();
                        if !name.is_empty()
                            && (next.is_empty() || [",", ":", "(", "{", "="].iter().any(|p| next.starts_with(p)))
                        {
                            index.members.entry(ty.clone()).or_default().insert(name.to_owned());
                        }
                    }
                }
            }
        }

        let opens = line.matches('{').count() as i32;
        let closes = line.matches('}').count() as i32;
        if opens > closes {
            stack.push((depth + 1, opened.unwrap_or(Scope::Other)));
            for _ in 1..opens - closes {
                stack.push((depth + 1, Scope::Other));
            }
        } else if matches!(opened, Some(Scope::Skip)) && opens == 0 && !t.ends_with(';') {
            // A skipped item whose body opens on a later line (a `fn` signature over several lines).
            skip_next = true;
        }
        depth += opens - closes;
        while stack.last().is_some_and(|(d, _)| *d > depth) {
            stack.pop();
        }
    }
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else { return };
    for entry in entries.flatten() {
        let path = entry.path();
        if path.is_dir() {
            if path.file_name().is_some_and(|n| n != "target") {
                rust_files(&path, out);
            }
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

fn build_index(root: &Path) -> Index {
    let mut index = Index::default();
    for top in ["src", "tests", "examples", "benches"] {
        let mut files = Vec::new();
        rust_files(&root.join(top), &mut files);
        for file in files {
            let text = std::fs::read_to_string(&file).unwrap();
            index_file(&mut index, &module_of(root, &file), &text);
        }
    }
    index.resolve_aliases();
    index
}

/// The inline code spans of a Markdown text, outside fenced blocks, with their line numbers.
fn spans(text: &str) -> Vec<(usize, String)> {
    let mut out = Vec::new();
    let mut fenced = false;
    for (n, line) in text.lines().enumerate() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
            continue;
        }
        if fenced {
            continue;
        }
        let mut parts = line.split('`');
        parts.next();
        while let (Some(inside), Some(_)) = (parts.next(), parts.next()) {
            out.push((n + 1, inside.to_owned()));
        }
    }
    out
}

/// `a::{b, c::d}` as `a::b` and `a::c::d` (one level of braces).
fn expand_braces(s: &str) -> Vec<String> {
    match (s.find("::{"), s.rfind('}')) {
        (Some(i), Some(j)) if j > i => {
            let prefix = &s[..i];
            s[i + 3..j].split(',').map(|p| format!("{prefix}::{}", p.trim())).collect()
        }
        _ => vec![s.to_owned()],
    }
}

/// The Rust paths (two segments or more) in a code span, generics and arguments left out.
fn code_paths(span: &str) -> Vec<Vec<String>> {
    let mut flat = String::new();
    let mut angle = 0;
    for c in span.chars() {
        match c {
            '<' => angle += 1,
            '>' if angle > 0 => angle -= 1,
            _ if angle > 0 => {}
            _ => flat.push(c),
        }
    }
    let mut out = Vec::new();
    for piece in expand_braces(&flat) {
        let mut token = String::new();
        for c in piece.chars().chain(std::iter::once(' ')) {
            if c.is_alphanumeric() || c == '_' || c == ':' {
                token.push(c);
                continue;
            }
            let t = token.trim_matches(':');
            let segs: Vec<String> = t.split("::").map(str::to_owned).collect();
            if segs.len() >= 2
                && segs.iter().all(|s| s.starts_with(|c: char| c.is_alphabetic() || c == '_'))
                && !t.contains(":::")
                && t.split("::").all(|s| !s.is_empty())
            {
                out.push(segs);
            }
            token.clear();
        }
    }
    out
}

/// `tests/limit_{glibc,jemalloc}.rs` as `tests/limit_glibc.rs` and `tests/limit_jemalloc.rs`.
fn expand_file_braces(path: &str) -> Vec<String> {
    match (path.find('{'), path.find('}')) {
        (Some(i), Some(j)) if j > i => {
            path[i + 1..j].split(',').map(|p| format!("{}{}{}", &path[..i], p.trim(), &path[j + 1..])).collect()
        }
        _ => vec![path.to_owned()],
    }
}

/// A span that is a path in the repository: `src/...`, `docs/X.md`, `tests/x.rs:12`, `list.rs`.
fn file_path(span: &str) -> Option<String> {
    let s = span.trim();
    if s.contains(char::is_whitespace) || s.contains('*') || s.contains('<') || s.contains("::") {
        return None;
    }
    let s = s.split(':').next().unwrap_or(s).trim_end_matches(',');
    const TOPS: &[&str] = &["src/", "tests/", "docs/", "examples/", "benches/", "scripts/", ".ci/", ".config/"];
    const EXTENSIONS: &[&str] = &[".rs", ".md", ".toml", ".py", ".sh"];
    if TOPS.iter().any(|t| s.starts_with(t)) || (!s.contains('/') && EXTENSIONS.iter().any(|e| s.ends_with(e))) {
        return Some(s.to_owned());
    }
    None
}

fn all_files(root: &Path, dir: &Path, out: &mut BTreeSet<String>) {
    let Ok(entries) = std::fs::read_dir(dir) else { return };
    for entry in entries.flatten() {
        let path = entry.path();
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        if name == "target" || name == ".git" {
            continue;
        }
        if path.is_dir() {
            all_files(root, &path, out);
        } else {
            out.insert(name);
        }
    }
    let _ = root;
}

/// What is wrong in one doc: `doc:line: name` for each name that does not resolve; and how many
/// names of the crate's (files, code paths) it checked.
fn check(index: &Index, root: &Path, basenames: &BTreeSet<String>, doc: &Path) -> (Vec<String>, usize) {
    let text = std::fs::read_to_string(doc).unwrap();
    let rel = doc.strip_prefix(root).unwrap_or(doc).display().to_string();
    let mut wrong = Vec::new();
    let mut checked = 0;
    for (line, span) in spans(&text) {
        if let Some(path) = file_path(&span) {
            for path in expand_file_braces(&path) {
                checked += 1;
                let exists = if path.contains('/') { root.join(&path).exists() } else { basenames.contains(&path) };
                if !exists {
                    wrong.push(format!("{rel}:{line}: no file `{path}`"));
                }
            }
            continue;
        }
        for path in code_paths(&span) {
            let segs: Vec<&str> = path.iter().map(String::as_str).collect();
            match index.resolve(&segs) {
                Resolution::Missing => {
                    wrong.push(format!("{rel}:{line}: no `{}` in the sources (in `{span}`)", path.join("::")));
                }
                Resolution::Found => checked += 1,
                Resolution::External => {}
            }
        }
    }
    (wrong, checked)
}

fn docs(root: &Path) -> Vec<PathBuf> {
    let mut docs = vec![root.join("README.md")];
    let mut in_docs: Vec<PathBuf> = std::fs::read_dir(root.join("docs"))
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|e| e == "md"))
        .collect();
    in_docs.sort();
    docs.extend(in_docs);
    docs
}

#[test]
fn every_name_in_the_docs_exists() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let index = build_index(root);
    let mut basenames = BTreeSet::new();
    all_files(root, root, &mut basenames);
    let (mut wrong, mut checked) = (Vec::new(), 0);
    for doc in docs(root) {
        let (w, c) = check(&index, root, &basenames, &doc);
        wrong.extend(w);
        checked += c;
    }
    // The docs name some 440 paths and files of the crate's (2026-12): a reader that found few
    // would pass on nothing.
    eprintln!("{checked} names checked");
    assert!(checked > 250, "only {checked} names of the crate's found in the docs");
    assert!(wrong.is_empty(), "{} names in the docs that do not exist:\n{}", wrong.len(), wrong.join("\n"));
}

/// The index and the checks on names planted in a doc of their own: each kind of wrong name is
/// caught, and the right ones pass.
#[test]
fn planted_names_are_caught() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let index = build_index(root);
    let resolves = |p: &str| matches!(index.resolve(&p.split("::").collect::<Vec<_>>()), Resolution::Found);
    // Right: a root item, a module path, a method, a trait's method, a field, a variant, a private fn.
    for good in [
        "frag::Tracked",
        "frag::report::Sites",
        "Tracked::new",
        "report::diagnosis::Breakdown",
        "KnownIntrospect::split_heap",
        "Serving::max_seconds",
        "Sampling::EveryBlock",
        "pool::slow",
        "sites::unwind::tables",
    ] {
        assert!(resolves(good), "{good} should resolve");
    }
    // Wrong: a test-only method, a method that never was, a method of another trait, a moved item.
    for bad in [
        "Clock::count_down",
        "Tracked::deallocate_maybe_marked",
        "KnownAllocator::split_heap",
        "frag::report::Tracked",
        "nonexistent_module::thing",
    ] {
        assert!(!resolves(bad), "{bad} should not resolve");
    }
    let basenames: BTreeSet<String> = ["mod.rs".to_owned()].into();
    let dir = std::env::temp_dir().join(format!("frag-doc-names-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let doc = dir.join("PLANTED.md");
    std::fs::write(&doc, "See `src/tracked/mod.rs` and `src/tracked/gone.rs`, `nowhere.rs`, `Tracked::new`.\n")
        .unwrap();
    let (wrong, _) = check(&index, root, &basenames, &doc);
    let _ = std::fs::remove_dir_all(&dir);
    let wrong: Vec<&str> = wrong.iter().map(|w| w.split(": ").nth(1).unwrap()).collect();
    assert_eq!(wrong, ["no file `src/tracked/gone.rs`", "no file `nowhere.rs`"]);
}
