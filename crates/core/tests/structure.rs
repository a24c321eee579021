//! The module structure of corelay-core: no import circles between its
//! top-level modules (`codec`, `engine`, `offer`, `room`, ...).
//!
//! Reads `src/**/*.rs`, collects every `crate::X` a file names (in a `use`
//! or a path) as an edge from the file's top-level module to `X`, and fails
//! naming a cycle if the graph has one. A child module's edges count for its
//! top-level parent (`engine/forward.rs` is `engine`); `super::` inside
//! `engine/` stays inside `engine`, so it adds no edge. `lib.rs` (the crate
//! root and its re-exports) is not a module of its own and adds none.
//! Comments (and so doc links) are skipped; tests (`#[cfg(test)]` blocks at a
//! file's end) count like any other code: a test that imports across a
//! circle would still tie the modules together.
//!
//! And the engine's types stay small: no struct under `src/engine/` has
//! more than [`MAX_VISIBLE_FIELDS`] fields visible outside its module
//! (`pub`, `pub(super)`, `pub(crate)`, ...); state sits in small owned
//! types with their own methods, as `Participant` is split into `Session`,
//! `Publisher` and `Subscriber`.
//!
//! Std only: no parser, a scan for `crate::` followed by a name or a brace
//! group (`use crate::{a, b::C}`).

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};

/// Every `.rs` file under `dir`, sorted.
fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let mut entries: Vec<PathBuf> = fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("read {}: {e}", dir.display()))
        .map(|e| e.expect("dir entry").path())
        .collect();
    entries.sort();
    for path in entries {
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|x| x == "rs") {
            out.push(path);
        }
    }
}

/// The top-level module a source file belongs to (`None` for `lib.rs`).
fn top_module(src: &Path, file: &Path) -> Option<String> {
    let rel = file.strip_prefix(src).expect("file under src");
    let first = rel.components().next()?.as_os_str().to_str()?.to_owned();
    if first == "lib.rs" {
        return None;
    }
    Some(first.strip_suffix(".rs").unwrap_or(&first).to_owned())
}

/// The source without comments (line, doc and block comments) and
/// without the contents of string and char literals (plain and raw), so
/// that neither a doc link nor a string hides or adds an edge.
fn strip_comments(text: &str) -> String {
    let c: Vec<char> = text.chars().collect();
    let at = |i: usize| c.get(i).copied();
    let mut out = String::with_capacity(text.len());
    let mut i = 0;
    while let Some(ch) = at(i) {
        let prev_ident = i > 0 && at(i - 1).is_some_and(is_ident);
        if ch == '/' && at(i + 1) == Some('/') {
            while at(i).is_some_and(|x| x != '\n') {
                i += 1;
            }
        } else if ch == '/' && at(i + 1) == Some('*') {
            let mut depth = 0;
            while let Some(x) = at(i) {
                if x == '/' && at(i + 1) == Some('*') {
                    depth += 1;
                    i += 2;
                } else if x == '*' && at(i + 1) == Some('/') {
                    depth -= 1;
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    i += 1;
                }
            }
            out.push(' ');
        } else if ch == 'r' && !prev_ident && matches!(at(i + 1), Some('#' | '"')) {
            // A raw string: r"..." or r#"..."#, closed by the same hashes.
            let mut j = i + 1;
            let mut hashes = 0;
            while at(j) == Some('#') {
                hashes += 1;
                j += 1;
            }
            if at(j) != Some('"') {
                out.push(ch);
                i += 1;
                continue;
            }
            j += 1;
            loop {
                match at(j) {
                    None => break,
                    Some('"') if (1..=hashes).all(|k| at(j + k) == Some('#')) => {
                        j += 1 + hashes;
                        break;
                    }
                    Some(_) => j += 1,
                }
            }
            out.push_str("\"\"");
            i = j;
        } else if ch == '"' {
            i += 1;
            while let Some(x) = at(i) {
                i += if x == '\\' { 2 } else { 1 };
                if x == '"' {
                    break;
                }
            }
            out.push_str("\"\"");
        } else if ch == '\'' && at(i + 1) == Some('\\') {
            // An escaped char literal: '\'', '\\', '\u{..}'.
            i += 2;
            while at(i).is_some_and(|x| x != '\'') {
                i += 1;
            }
            i += 1;
            out.push_str("' '");
        } else if ch == '\'' && at(i + 2) == Some('\'') {
            // A plain char literal ('"'); a lifetime ('a) has no closing quote.
            i += 3;
            out.push_str("' '");
        } else {
            out.push(ch);
            i += 1;
        }
    }
    out
}

fn is_ident(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_'
}

/// The top-level modules named after each `crate::` in `code`: `crate::x`
/// names `x`; `crate::{x, y::z, self}` names `x` and `y`.
fn crate_targets(code: &str) -> BTreeSet<String> {
    let mut targets = BTreeSet::new();
    let mut rest = code;
    while let Some(at) = rest.find("crate::") {
        let before = rest[..at].chars().next_back();
        rest = &rest[at + "crate::".len()..];
        if before.is_some_and(|c| is_ident(c) || c == ':' || c == '$') {
            continue; // `$crate::`, `corelay_core::crate::` and the like
        }
        let tail = rest.trim_start();
        if let Some(group) = tail.strip_prefix('{') {
            // One level of braces is enough: the top-level names are the
            // first segment of each comma-separated item at depth 0.
            let mut depth = 0;
            let mut item_start = true;
            let mut name = String::new();
            for c in group.chars() {
                match c {
                    '{' => depth += 1,
                    '}' if depth == 0 => break,
                    '}' => depth -= 1,
                    ',' if depth == 0 => {
                        if item_start && !name.is_empty() && name != "self" {
                            targets.insert(name.clone());
                        }
                        item_start = true;
                        name.clear();
                        continue;
                    }
                    _ => {}
                }
                if depth == 0 && item_start {
                    if is_ident(c) {
                        name.push(c);
                    } else if !name.is_empty() {
                        if name != "self" {
                            targets.insert(name.clone());
                        }
                        item_start = false;
                        name.clear();
                    }
                }
            }
            if item_start && !name.is_empty() && name != "self" {
                targets.insert(name);
            }
        } else {
            let name: String = tail.chars().take_while(|&c| is_ident(c)).collect();
            if !name.is_empty() {
                targets.insert(name);
            }
        }
    }
    targets
}

/// Edges between top-level modules: module → the modules it names.
fn module_graph(src: &Path) -> BTreeMap<String, BTreeSet<String>> {
    let mut files = Vec::new();
    rust_files(src, &mut files);
    let mut graph: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for file in &files {
        let Some(module) = top_module(src, file) else {
            continue;
        };
        let text =
            fs::read_to_string(file).unwrap_or_else(|e| panic!("read {}: {e}", file.display()));
        let targets = crate_targets(&strip_comments(&text));
        let edges = graph.entry(module.clone()).or_default();
        edges.extend(targets.into_iter().filter(|t| *t != module));
    }
    // Only edges to modules of this crate (not `crate::SomeReexport`).
    let modules: BTreeSet<String> = graph.keys().cloned().collect();
    for edges in graph.values_mut() {
        edges.retain(|t| modules.contains(t));
    }
    graph
}

/// One cycle of `graph`, as the path around it (first node repeated at the
/// end), if there is any.
fn find_cycle(graph: &BTreeMap<String, BTreeSet<String>>) -> Option<Vec<String>> {
    #[derive(Clone, Copy, PartialEq)]
    enum Mark {
        New,
        Open,
        Done,
    }
    fn visit(
        node: &str,
        graph: &BTreeMap<String, BTreeSet<String>>,
        marks: &mut BTreeMap<String, Mark>,
        path: &mut Vec<String>,
    ) -> Option<Vec<String>> {
        marks.insert(node.to_owned(), Mark::Open);
        path.push(node.to_owned());
        for next in graph.get(node).into_iter().flatten() {
            match marks.get(next.as_str()).copied().unwrap_or(Mark::New) {
                Mark::Open => {
                    let from = path.iter().position(|n| n == next).expect("open on path");
                    let mut cycle = path[from..].to_vec();
                    cycle.push(next.clone());
                    return Some(cycle);
                }
                Mark::New => {
                    if let Some(c) = visit(next, graph, marks, path) {
                        return Some(c);
                    }
                }
                Mark::Done => {}
            }
        }
        path.pop();
        marks.insert(node.to_owned(), Mark::Done);
        None
    }
    let mut marks = BTreeMap::new();
    for node in graph.keys() {
        if marks.get(node.as_str()).copied().unwrap_or(Mark::New) == Mark::New
            && let Some(c) = visit(node, graph, &mut marks, &mut Vec::new())
        {
            return Some(c);
        }
    }
    None
}

fn src_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

fn describe(graph: &BTreeMap<String, BTreeSet<String>>) -> String {
    graph
        .iter()
        .map(|(m, e)| {
            format!(
                "  {m} -> {}",
                e.iter().cloned().collect::<Vec<_>>().join(", ")
            )
        })
        .collect::<Vec<_>>()
        .join("\n")
}

#[test]
fn core_modules_have_no_import_cycle() {
    let graph = module_graph(&src_dir());
    if let Some(cycle) = find_cycle(&graph) {
        panic!(
            "corelay-core's modules import each other in a circle: {}\n\
             move the shared definition to the module that owns it (or a leaf \
             both import).\nthe graph:\n{}",
            cycle.join(" -> "),
            describe(&graph)
        );
    }
}

/// The scan itself finds what it must: every module `lib.rs` declares, and
/// the edge every engine file starts from (`engine -> ids`). Guards against
/// a scan that silently sees nothing (and so never finds a cycle).
#[test]
fn the_scan_sees_every_module_and_a_known_edge() {
    let graph = module_graph(&src_dir());
    let lib = fs::read_to_string(src_dir().join("lib.rs")).expect("lib.rs");
    let declared: BTreeSet<String> = strip_comments(&lib)
        .lines()
        .filter_map(|l| {
            let l = l.trim();
            let l = l.strip_prefix("pub ").unwrap_or(l);
            let name = l.strip_prefix("mod ")?.strip_suffix(';')?;
            Some(name.trim().to_owned())
        })
        .collect();
    let scanned: BTreeSet<String> = graph.keys().cloned().collect();
    assert_eq!(declared, scanned, "modules declared vs scanned");
    assert!(
        graph.get("engine").is_some_and(|e| e.contains("ids")),
        "engine -> ids not seen:\n{}",
        describe(&graph)
    );
}

#[test]
fn the_scan_reads_groups_paths_and_skips_comments() {
    let code = strip_comments(
        r##"use crate::{a::X, b, self};
// use crate::c;
/// [`crate::d::Y`]
/* crate::e /* nested */ crate::e2 */
let x = crate::f::g(1);
use crate::{h::{I, J}, k::{self, L}};
macro_rules! m { () => { $crate::z::q() } }
let s = "crate::s \" // crate::s2";
let q = '"'; let t = crate::t::T;
let r = r#"crate::r " // "#; fn l<'a>(x: &'a u8) -> crate::u::U {}
"##,
    );
    let got: Vec<String> = crate_targets(&code).into_iter().collect();
    assert_eq!(got, ["a", "b", "f", "h", "k", "t", "u"]);

    let mut g: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    g.entry("a".into()).or_default().insert("b".into());
    g.entry("b".into()).or_default().insert("c".into());
    g.entry("c".into()).or_default();
    assert_eq!(find_cycle(&g), None);
    g.entry("c".into()).or_default().insert("a".into());
    assert_eq!(
        find_cycle(&g),
        Some(vec!["a".into(), "b".into(), "c".into(), "a".into()])
    );
}

/// The most fields an engine type shows outside its module.
const MAX_VISIBLE_FIELDS: usize = 8;

/// Each braced struct in `code` (comments stripped): its name, and how many
/// of its fields are visible outside its module (any `pub` form).
fn struct_fields(code: &str) -> Vec<(String, usize)> {
    let mut found = Vec::new();
    let mut rest = code;
    while let Some(at) = rest.find("struct ") {
        let before_ok = rest[..at].chars().next_back().is_none_or(|c| !is_ident(c));
        rest = &rest[at + "struct ".len()..];
        if !before_ok {
            continue;
        }
        let name: String = rest.chars().take_while(|&c| is_ident(c)).collect();
        // The body starts at the first `{` unless a `;` or `(` (a unit or
        // tuple struct) comes first.
        let Some(open) = rest.find(['{', ';', '(']) else {
            break;
        };
        if !rest[open..].starts_with('{') || name.is_empty() {
            continue;
        }
        let body = &rest[open + 1..];
        let mut depth = 0i32;
        let mut fields = Vec::new();
        let mut field = String::new();
        let mut end = body.len();
        let mut prev = ' ';
        for (i, c) in body.char_indices() {
            let arrow = prev == '-';
            prev = c;
            match c {
                '>' if arrow => {}
                '{' | '(' | '[' | '<' => depth += 1,
                '}' if depth == 0 => {
                    end = i;
                    break;
                }
                '}' | ')' | ']' | '>' => depth -= 1,
                ',' if depth == 0 => {
                    fields.push(std::mem::take(&mut field));
                    continue;
                }
                _ => {}
            }
            field.push(c);
        }
        fields.push(field);
        let visible = fields
            .iter()
            .map(|f| without_attributes(f))
            .filter(|f| f.contains(':') && f.starts_with("pub"))
            .count();
        found.push((name, visible));
        rest = &body[end..];
    }
    found
}

/// A field's text without its leading attributes (`#[cfg(...)]`), trimmed.
fn without_attributes(field: &str) -> &str {
    let mut f = field.trim_start();
    while let Some(attr) = f.strip_prefix("#[") {
        let mut depth = 1;
        let mut cut = attr.len();
        for (i, c) in attr.char_indices() {
            match c {
                '[' => depth += 1,
                ']' => {
                    depth -= 1;
                    if depth == 0 {
                        cut = i + 1;
                        break;
                    }
                }
                _ => {}
            }
        }
        f = attr[cut..].trim_start();
    }
    f
}

#[test]
fn no_engine_type_shows_more_than_eight_fields_outside_its_module() {
    let dir = src_dir().join("engine");
    let mut files = Vec::new();
    rust_files(&dir, &mut files);
    assert!(files.len() > 10, "the engine's files: {files:?}");
    let mut seen = 0;
    let mut over = Vec::new();
    for file in &files {
        let text = fs::read_to_string(file).expect("read source");
        for (name, visible) in struct_fields(&strip_comments(&text)) {
            seen += 1;
            if visible > MAX_VISIBLE_FIELDS {
                over.push(format!("{} {name}: {visible}", file.display()));
            }
        }
    }
    assert!(seen > 20, "the scan found {seen} structs");
    assert!(
        over.is_empty(),
        "engine types with more than {MAX_VISIBLE_FIELDS} fields visible outside their module \
         (split them by what each part owns):\n{}",
        over.join("\n")
    );
}

#[test]
fn the_field_count_sees_visibility_attributes_generics_and_nesting() {
    let code = "pub(super) struct Big {\n\
        pub(super) a: u8,\n\
        #[cfg(feature = \"x\")]\n\
        pub(super) b: Vec<(u8, u16)>,\n\
        c: HashMap<u8, [u8; 4]>,\n\
        pub d: Option<Box<dyn Fn(u8, u8) -> u8>>,\n\
        pub(crate) e: u8\n\
    }\n\
    struct Tuple(pub u8, pub u8);\n\
    struct Unit;\n\
    enum NotAStruct { A { x: u8 } }\n\
    struct Empty {}\n";
    assert_eq!(
        struct_fields(code),
        vec![("Big".to_owned(), 4), ("Empty".to_owned(), 0)]
    );
}
