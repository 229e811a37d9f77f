//! The shape of the code: no two files of `src/` import each other, directly or round a
//! circle (docs/ARCHITECTURE.md, "The house"). A circle makes every file in it a place
//! where a change to any of them can break, and hides which one owns what.
//!
//! Read from the code itself: every `crate::`, `super::` and `self::` path outside comments
//! and test modules, resolved to the file that defines it (the longest module path that is a
//! file). A path that names an item of a module resolves to the module's file.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// The library's files by module path (`store::sqlite::writer` → its file).
fn modules(src: &Path) -> BTreeMap<Vec<String>, PathBuf> {
    let mut out = BTreeMap::new();
    let mut stack = vec![src.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                // The load generator is a binary of its own, not a module of the library.
                if path.file_name().is_some_and(|n| n != "bin") {
                    stack.push(path);
                }
                continue;
            }
            if path.extension().is_none_or(|e| e != "rs") {
                continue;
            }
            let rel = path.strip_prefix(src).unwrap();
            let mut parts: Vec<String> = rel
                .components()
                .map(|c| c.as_os_str().to_string_lossy().into_owned())
                .collect();
            let last = parts.pop().unwrap();
            match last.as_str() {
                "lib.rs" | "main.rs" if parts.is_empty() => {}
                "mod.rs" => {}
                file => parts.push(file.trim_end_matches(".rs").to_owned()),
            }
            out.insert(parts, path);
        }
    }
    out
}

/// The code of a file without comments and without its `#[cfg(test)]` module (tests may
/// reach anywhere; what they reach is not the house's shape).
fn code(text: &str) -> String {
    let text = match text.find("#[cfg(test)]\nmod tests") {
        Some(i) => &text[..i],
        None => text,
    };
    text.lines()
        .map(|l| match l.find("//") {
            Some(i) => &l[..i],
            None => l,
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// Every module path a file's code names, as written: `crate::a::b`, `super::c`, and the
/// paths inside `use x::{…}` groups, one level of braces deep.
fn paths(code: &str) -> Vec<Vec<String>> {
    let mut out = Vec::new();
    let is_ident = |c: char| c.is_ascii_alphanumeric() || c == '_';
    let bytes: Vec<char> = code.chars().collect();
    let mut i = 0;
    while i < bytes.len() {
        let rest: String = bytes[i..bytes.len().min(i + 8)].iter().collect();
        let starts = ["crate::", "super::", "self::"]
            .iter()
            .any(|p| rest.starts_with(p));
        let boundary = i == 0 || !is_ident(bytes[i - 1]) && bytes[i - 1] != ':';
        if !(starts && boundary) {
            i += 1;
            continue;
        }
        // A path: identifiers joined by `::`, perhaps ending in a `{…}` group.
        let mut segments = Vec::new();
        let mut current = String::new();
        while i < bytes.len() {
            let c = bytes[i];
            if is_ident(c) {
                current.push(c);
                i += 1;
            } else if c == ':' && bytes.get(i + 1) == Some(&':') {
                segments.push(std::mem::take(&mut current));
                i += 2;
            } else if c == '{' && current.is_empty() {
                let end = bytes[i..]
                    .iter()
                    .position(|&c| c == '}')
                    .map_or(bytes.len(), |p| i + p);
                let group: String = bytes[i + 1..end].iter().collect();
                for item in group.split(',') {
                    let item = item.trim().split(" as ").next().unwrap_or("").trim();
                    let mut path = segments.clone();
                    path.extend(
                        item.split("::")
                            .map(str::trim)
                            .filter(|s| !s.is_empty())
                            .map(str::to_owned),
                    );
                    out.push(path);
                }
                i = end;
                segments.clear();
                break;
            } else {
                break;
            }
        }
        if !current.is_empty() {
            segments.push(current);
        }
        if !segments.is_empty() {
            out.push(segments);
        }
    }
    out
}

/// The file a path written in the module `at` names: the longest prefix of it (made
/// absolute) that is a module of the library.
fn resolve(
    at: &[String],
    path: &[String],
    modules: &BTreeMap<Vec<String>, PathBuf>,
) -> Option<PathBuf> {
    let mut absolute: Vec<String> = Vec::new();
    let mut rest = path;
    match rest.first().map(String::as_str) {
        Some("crate") => rest = &rest[1..],
        Some("self") => {
            absolute = at.to_vec();
            rest = &rest[1..];
        }
        Some("super") => {
            absolute = at.to_vec();
            while rest.first().map(String::as_str) == Some("super") {
                absolute.pop();
                rest = &rest[1..];
            }
        }
        _ => return None,
    }
    absolute.extend(rest.iter().filter(|s| *s != "self").cloned());
    (1..=absolute.len())
        .rev()
        .find_map(|n| modules.get(&absolute[..n]).cloned())
}

/// Circles in the graph: its strongly connected components of more than one file
/// (Tarjan's algorithm).
fn circles(graph: &BTreeMap<PathBuf, BTreeSet<PathBuf>>) -> Vec<Vec<PathBuf>> {
    struct Walk<'g> {
        graph: &'g BTreeMap<PathBuf, BTreeSet<PathBuf>>,
        index: BTreeMap<&'g PathBuf, usize>,
        low: BTreeMap<&'g PathBuf, usize>,
        stack: Vec<&'g PathBuf>,
        on_stack: BTreeSet<&'g PathBuf>,
        out: Vec<Vec<PathBuf>>,
    }
    impl<'g> Walk<'g> {
        fn visit(&mut self, v: &'g PathBuf) {
            let n = self.index.len();
            self.index.insert(v, n);
            self.low.insert(v, n);
            self.stack.push(v);
            self.on_stack.insert(v);
            for w in self.graph.get(v).into_iter().flatten() {
                if !self.index.contains_key(w) {
                    self.visit(w);
                    let low = self.low[v].min(self.low[w]);
                    self.low.insert(v, low);
                } else if self.on_stack.contains(w) {
                    let low = self.low[v].min(self.index[w]);
                    self.low.insert(v, low);
                }
            }
            if self.low[v] == self.index[v] {
                let mut component = Vec::new();
                while let Some(w) = self.stack.pop() {
                    self.on_stack.remove(w);
                    component.push(w.clone());
                    if w == v {
                        break;
                    }
                }
                if component.len() > 1 {
                    component.sort();
                    self.out.push(component);
                }
            }
        }
    }
    let mut walk = Walk {
        graph,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        on_stack: BTreeSet::new(),
        out: Vec::new(),
    };
    for v in graph.keys() {
        if !walk.index.contains_key(v) {
            walk.visit(v);
        }
    }
    walk.out
}

fn imports() -> BTreeMap<PathBuf, BTreeSet<PathBuf>> {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let modules = modules(&src);
    let mut graph: BTreeMap<PathBuf, BTreeSet<PathBuf>> = BTreeMap::new();
    for (at, file) in &modules {
        let text = std::fs::read_to_string(file).unwrap();
        let arrows = graph.entry(file.clone()).or_default();
        for path in paths(&code(&text)) {
            if let Some(to) = resolve(at, &path, &modules)
                && &to != file
                && !to.ends_with("lib.rs")
            {
                arrows.insert(to);
            }
        }
    }
    graph
}

#[test]
fn no_two_files_import_each_other_round_a_circle() {
    let graph = imports();
    assert!(
        graph.len() > 50 && graph.values().map(BTreeSet::len).sum::<usize>() > 100,
        "the reader found too little to judge: {} files",
        graph.len()
    );
    let found = circles(&graph);
    let src = Path::new(env!("CARGO_MANIFEST_DIR"));
    let name = |p: &PathBuf| p.strip_prefix(src).unwrap_or(p).display().to_string();
    // Each circle as the arrows between its files.
    let shown: Vec<Vec<String>> = found
        .iter()
        .map(|c| {
            c.iter()
                .flat_map(|from| {
                    graph[from]
                        .iter()
                        .filter(|to| c.contains(to))
                        .map(move |to| format!("{} -> {}", name(from), name(to)))
                })
                .collect()
        })
        .collect();
    assert!(
        found.is_empty(),
        "import circles (files that import each other, directly or round): {shown:#?}"
    );
}

/// The reader itself: a circle it is shown is a circle it reports, so that the test above
/// cannot pass by reading nothing.
#[test]
fn the_circle_reader_finds_a_circle() {
    let graph: BTreeMap<PathBuf, BTreeSet<PathBuf>> = [
        ("a.rs", vec!["b.rs"]),
        ("b.rs", vec!["c.rs"]),
        ("c.rs", vec!["a.rs"]),
        ("d.rs", vec!["a.rs"]),
    ]
    .into_iter()
    .map(|(f, to)| (f.into(), to.into_iter().map(PathBuf::from).collect()))
    .collect();
    assert_eq!(
        circles(&graph),
        [vec![
            PathBuf::from("a.rs"),
            PathBuf::from("b.rs"),
            PathBuf::from("c.rs")
        ]]
    );
    assert_eq!(
        paths("use crate::store::{self, Db, views::events::Range};\nlet x = super::y::z();"),
        [
            vec!["crate", "store", "self"],
            vec!["crate", "store", "Db"],
            vec!["crate", "store", "views", "events", "Range"],
            vec!["super", "y", "z"],
        ]
        .map(|p| p.into_iter().map(str::to_owned).collect::<Vec<_>>())
    );
}
