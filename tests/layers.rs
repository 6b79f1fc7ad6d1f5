//! The crate's modules form layers: no file's imports lead back to itself, and the bottom layers
//! (the plain data that reads and inference share, and inference itself) import nothing above them.
//! docs/ARCHITECTURE.md, "Layers", says which module sits where; this test keeps the code to it.
//!
//! Read from the source text: every `crate::a::b` path outside a file's `#[cfg(test)]` part names
//! the longest module it reaches (`use crate::a::{b::c, d}` too), and that is an edge of the graph.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// What each bottom module may import (besides itself and its own submodules).
const BOTTOM: &[(&str, &[&str])] = &[
    ("addr", &[]),
    ("decimal", &[]),
    ("observed", &["addr"]),
    ("error", &[]),
    ("infer", &["addr", "observed"]),
];

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// `src/python/attach.rs` → `python::attach`; `src/cli/mod.rs` → `cli`.
fn module_of(src: &Path, file: &Path) -> String {
    let relative = file.strip_prefix(src).unwrap().with_extension("");
    let mut parts: Vec<String> = relative
        .components()
        .map(|c| c.as_os_str().to_string_lossy().into_owned())
        .collect();
    if parts.last().is_some_and(|p| p == "mod") {
        parts.pop();
    }
    parts.join("::")
}

/// The module paths a piece of source names through `crate::`, braces expanded one level.
fn paths_named(code: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut rest = code;
    while let Some(at) = rest.find("crate::") {
        rest = &rest[at + "crate::".len()..];
        let end = rest
            .find(|c: char| !(c.is_alphanumeric() || c == '_' || c == ':'))
            .unwrap_or(rest.len());
        let prefix = &rest[..end];
        if rest[end..].starts_with('{') && prefix.ends_with("::") {
            let close = rest[end..].find('}').map_or(rest.len(), |c| end + c);
            for item in rest[end + 1..close].split(',') {
                let item = item.split(" as ").next().unwrap().trim();
                out.push(format!("{prefix}{item}"));
            }
        } else {
            out.push(prefix.trim_end_matches(':').to_string());
        }
    }
    out
}

fn graph() -> BTreeMap<String, BTreeSet<String>> {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    let modules: BTreeMap<String, PathBuf> = files
        .iter()
        .filter(|f| !f.ends_with("main.rs") && !f.ends_with("lib.rs"))
        .map(|f| (module_of(&src, f), f.clone()))
        .collect();
    assert!(
        modules.contains_key("infer::engine") && modules.contains_key("observed"),
        "the module list was not read from {}",
        src.display()
    );
    let mut edges = BTreeMap::new();
    for (module, file) in &modules {
        let text = std::fs::read_to_string(file).unwrap();
        let code = text.split("#[cfg(test)]").next().unwrap();
        let mut reached = BTreeSet::new();
        for path in paths_named(code) {
            let segments: Vec<&str> = path.split("::").filter(|s| !s.is_empty()).collect();
            let longest = (1..=segments.len())
                .rev()
                .map(|n| segments[..n].join("::"))
                .find(|m| modules.contains_key(m));
            if let Some(target) = longest.filter(|t| t != module) {
                reached.insert(target);
            }
        }
        edges.insert(module.clone(), reached);
    }
    edges
}

/// A cycle through `from`, if there is one: the path back to it.
fn cycle_through(edges: &BTreeMap<String, BTreeSet<String>>, from: &str) -> Option<Vec<String>> {
    let mut stack = vec![(from.to_string(), vec![from.to_string()])];
    let mut seen = BTreeSet::new();
    while let Some((at, path)) = stack.pop() {
        for next in edges.get(&at).into_iter().flatten() {
            if next == from {
                let mut cycle = path.clone();
                cycle.push(from.to_string());
                return Some(cycle);
            }
            if seen.insert(next.clone()) {
                let mut longer = path.clone();
                longer.push(next.clone());
                stack.push((next.clone(), longer));
            }
        }
    }
    None
}

#[test]
fn no_file_imports_lead_back_to_itself() {
    let edges = graph();
    let cycles: Vec<String> = edges
        .keys()
        .filter_map(|m| cycle_through(&edges, m))
        .map(|c| c.join(" -> "))
        .collect();
    assert!(cycles.is_empty(), "import cycles:\n{}", cycles.join("\n"));
}

#[test]
fn the_bottom_layers_import_nothing_above_them() {
    let edges = graph();
    let top_of = |m: &str| m.split("::").next().unwrap().to_string();
    let mut wrong = Vec::new();
    for (module, reached) in &edges {
        let Some((_, allowed)) = BOTTOM.iter().find(|(m, _)| *m == top_of(module)) else {
            continue;
        };
        for target in reached {
            let layer = top_of(target);
            if layer != top_of(module) && !allowed.contains(&layer.as_str()) {
                wrong.push(format!("{module} imports {target}"));
            }
        }
    }
    assert!(
        edges.keys().any(|m| m.starts_with("infer::")),
        "no infer module was read"
    );
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

#[test]
fn the_reader_sees_an_edge_where_there_is_one() {
    // The parser's own check: a grouped import names each module it reaches.
    let named = paths_named(
        "use crate::python::{attach::Target, gil_span};\nlet x = crate::addr::RemoteAddr(1);",
    );
    assert_eq!(
        named,
        [
            "python::attach::Target",
            "python::gil_span",
            "addr::RemoteAddr"
        ]
    );
    let edges = graph();
    assert!(edges["python::attach"].contains("python::target"));
}
