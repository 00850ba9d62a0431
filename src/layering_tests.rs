//! The import graph follows the data path (lib.rs): every `crate::` path in non-test code names a room of the
//! same or an earlier layer, and no two files of one room import each other (directly or around a cycle).
//! Read from the source tree, so a new `use` that breaks the order fails `cargo test`.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// The rooms in dependency order (lib.rs "Rooms"): a room may import only rooms listed before it.
#[rustfmt::skip]
const LAYERS: &[&str] = &[
    // platform and shared primitives: no data-path imports
    "error", "param", "sync", "stats", "rng", "topology", "cuda", "json", "annot", //
    // where bytes live (local files, objects behind URLs), beneath the sources
    "storage", //
    // the data path, in order
    "source", "plan", "decode", "augment", "sample", "staging", "gpu_decode", "transfer", "worker", "export", //
    // assembly: the validated configuration and the loader that runs it
    "config", "loader", //
    // tooling beside the data path, and the Python binding
    "synthetic", "pack", "py",
];

/// The rooms gpu_decode/ may use (a subset of the earlier layers): it decodes the windows of files decode/'s header
/// walk admitted, with the augment pipeline's taps, through cuda/, into staging's rows; never the source, the plan
/// or the topology (the worker and the loader hand it what it needs).
const GPU_DECODE_USES: &[&str] = &["error", "sync", "stats", "rng", "cuda", "decode", "augment", "sample", "staging"];

/// What transfer/ may name of gpu_decode/: the transfer thread's part of the path (`GpuRows`: start is the
/// loader's, the transfer thread resets, collects, finishes, releases, adjusts and closes) and the CPU fallback
/// it runs for the tasks the GPU could not decode. Nothing of the queue, the tasks, the threads or the pool.
const TRANSFER_SEES_OF_GPU_DECODE: &[&str] = &["GpuRows", "CpuFallback", "Patch"];

/// Rooms only tests may use.
const TEST_ONLY: &[&str] = &["test_data", "layering_tests"];

struct SourceFile {
    /// Module path: `src/a/b.rs` → ["a", "b"]; `src/a/mod.rs` → ["a"]; `src/lib.rs` → [].
    module: Vec<String>,
    /// Code lines without comments, test modules cut off.
    code: Vec<String>,
}

fn source_files() -> Vec<SourceFile> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut out = Vec::new();
    let mut stack = vec![root.clone()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).expect("src is readable") {
            let path = entry.expect("dir entry").path();
            if path.is_dir() {
                stack.push(path);
            } else if path.extension().is_some_and(|e| e == "rs")
                && let Some(f) = parse(&root, &path)
            {
                out.push(f);
            }
        }
    }
    out
}

fn parse(root: &Path, path: &PathBuf) -> Option<SourceFile> {
    let rel = path.strip_prefix(root).expect("under src");
    let mut module: Vec<String> = rel.iter().map(|c| c.to_string_lossy().trim_end_matches(".rs").to_string()).collect();
    let last = module.last().cloned().unwrap_or_default();
    if last == "tests" || last.ends_with("_tests") || TEST_ONLY.contains(&module[0].as_str()) {
        return None;
    }
    if last == "mod" || last == "lib" {
        module.pop();
    }
    let text = std::fs::read_to_string(path).expect("readable source");
    let mut code = Vec::new();
    let mut lines = text.lines().peekable();
    while let Some(line) = lines.next() {
        let t = line.trim_start();
        // An inline `#[cfg(test)] mod tests { … }` ends the production code of a file (house style: last).
        if t.starts_with("#[cfg(")
            && t.contains("test")
            && lines.peek().is_some_and(|n| n.trim_start().starts_with("mod "))
        {
            if lines.peek().is_some_and(|n| n.contains('{')) {
                break;
            }
            lines.next(); // `mod tests;` — a test-only file, skipped by name
            continue;
        }
        if t.starts_with("//") {
            continue;
        }
        code.push(line.split(" //").next().unwrap_or(line).to_string());
    }
    Some(SourceFile { module, code })
}

/// Paths named in `line` that start with `prefix` (`crate` or `super`), as identifier lists; `a::{b, c::d}`
/// yields `[a]` (the first group is enough to resolve a file).
fn paths(line: &str, prefix: &str) -> Vec<Vec<String>> {
    let mut out = Vec::new();
    let pat = format!("{prefix}::");
    let mut rest = line;
    while let Some(i) = rest.find(&pat) {
        let before = rest[..i].chars().last();
        rest = &rest[i + pat.len()..];
        if before.is_some_and(|c| c.is_alphanumeric() || c == '_') {
            continue; // e.g. `my_crate::`
        }
        let mut segs = Vec::new();
        let mut s = rest;
        loop {
            let end = s.find(|c: char| !(c.is_alphanumeric() || c == '_')).unwrap_or(s.len());
            if end == 0 {
                break;
            }
            segs.push(s[..end].to_string());
            s = &s[end..];
            if let Some(n) = s.strip_prefix("::") {
                s = n;
            } else {
                break;
            }
        }
        if !segs.is_empty() {
            out.push(segs);
        }
    }
    out
}

fn layer(room: &str) -> usize {
    LAYERS.iter().position(|l| *l == room).unwrap_or_else(|| panic!("room `{room}` is not in LAYERS: place it"))
}

#[test]
fn no_room_imports_a_later_layer() {
    let mut bad = Vec::new();
    for f in source_files() {
        let Some(room) = f.module.first() else { continue };
        let own = layer(room);
        for line in &f.code {
            for p in paths(line, "crate") {
                if p[0] == "Result" || p[0] == "ImageError" {
                    continue; // lib.rs's root re-exports of error.rs
                }
                if layer(&p[0]) > own {
                    bad.push(format!(
                        "{}: `crate::{}` is a later layer than `{room}`",
                        f.module.join("/"),
                        p.join("::")
                    ));
                }
            }
        }
    }
    assert!(bad.is_empty(), "imports against the data path:\n{}", bad.join("\n"));
}

#[test]
fn files_of_a_room_import_each_other_without_cycles() {
    let files = source_files();
    let modules: BTreeSet<Vec<String>> = files.iter().map(|f| f.module.clone()).collect();
    // The file a path lands in: its longest prefix that is a file module.
    let resolve = |mut p: Vec<String>| -> Option<Vec<String>> {
        while !p.is_empty() {
            if modules.contains(&p) {
                return Some(p);
            }
            p.pop();
        }
        None
    };
    let mut edges: BTreeMap<Vec<String>, BTreeSet<Vec<String>>> = BTreeMap::new();
    for f in &files {
        for line in &f.code {
            let t = line.trim_start();
            if t.starts_with("pub use") || t.starts_with("pub mod") || t.starts_with("mod ") {
                continue; // a parent re-exporting or declaring its children is structure, not use
            }
            let mut targets: Vec<Vec<String>> = paths(line, "crate");
            let parent: Vec<String> = f.module[..f.module.len().saturating_sub(1)].to_vec();
            for p in paths(line, "super") {
                targets.push(parent.iter().cloned().chain(p).collect());
            }
            for t in targets {
                let Some(to) = resolve(t) else { continue };
                // Edges to an ancestor (`super::Type` of the room's mod.rs) or the file itself are structure.
                if to != f.module && !f.module.starts_with(&to) && !to.starts_with(&f.module) {
                    edges.entry(f.module.clone()).or_default().insert(to);
                }
            }
        }
    }
    // Depth-first search for a back edge.
    fn visit(
        n: &Vec<String>,
        edges: &BTreeMap<Vec<String>, BTreeSet<Vec<String>>>,
        state: &mut BTreeMap<Vec<String>, u8>,
        path: &mut Vec<Vec<String>>,
    ) -> Option<Vec<Vec<String>>> {
        match state.get(n) {
            Some(1) => {
                let start = path.iter().position(|p| p == n).unwrap_or(0);
                return Some(path[start..].iter().cloned().chain([n.clone()]).collect());
            }
            Some(_) => return None,
            None => {}
        }
        state.insert(n.clone(), 1);
        path.push(n.clone());
        for m in edges.get(n).into_iter().flatten() {
            if let Some(c) = visit(m, edges, state, path) {
                return Some(c);
            }
        }
        path.pop();
        state.insert(n.clone(), 2);
        None
    }
    let mut state = BTreeMap::new();
    for n in edges.keys() {
        if let Some(cycle) = visit(n, &edges, &mut state, &mut Vec::new()) {
            let shown: Vec<String> = cycle.iter().map(|m| m.join("/")).collect();
            panic!("import cycle: {}", shown.join(" → "));
        }
    }
    // The check sees the tree: the rooms' files and a known edge are there.
    assert!(modules.contains(&vec!["transfer".to_string(), "engine".to_string()]));
    assert!(edges[&vec!["transfer".to_string(), "engine".to_string()]].contains(&vec!["staging".to_string()]));
}

#[test]
fn the_path_parser_reads_grouped_and_nested_paths() {
    assert_eq!(paths("use crate::transfer::{Station, Take};", "crate"), [vec!["transfer".to_string()]]);
    assert_eq!(
        paths("let x = crate::topology::pin_current_thread(&[c]); my_crate::y", "crate"),
        [vec!["topology".to_string(), "pin_current_thread".to_string()]]
    );
    assert_eq!(paths("use super::stream::X;", "super"), [vec!["stream".to_string(), "X".to_string()]]);
}

/// The items a line names after `prefix` (`crate::gpu_decode::`): `{A, b::C}` yields A and b; a bare `prefix`
/// without an item (`use crate::gpu_decode;`) yields `*`.
fn items_after(line: &str, prefix: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut rest = line;
    while let Some(i) = rest.find(prefix) {
        rest = &rest[i + prefix.len()..];
        let group = match rest.strip_prefix('{') {
            Some(g) => &g[..g.find('}').unwrap_or(g.len())],
            None => &rest[..rest.find(|c: char| !(c.is_alphanumeric() || c == '_')).unwrap_or(rest.len())],
        };
        for item in group.split(',') {
            let name = item.trim().split("::").next().unwrap_or("").split(' ').next().unwrap_or("");
            if !name.is_empty() {
                out.push(name.to_string());
            } else if !group.contains(',') {
                out.push("*".to_string());
            }
        }
    }
    out
}

#[test]
fn gpu_decode_uses_only_its_inputs() {
    let mut bad = Vec::new();
    let mut seen = 0;
    for f in source_files().into_iter().filter(|f| f.module.first().is_some_and(|r| r == "gpu_decode")) {
        seen += 1;
        for line in &f.code {
            for p in paths(line, "crate") {
                if p[0] != "gpu_decode" && !GPU_DECODE_USES.contains(&p[0].as_str()) {
                    bad.push(format!("{}: `crate::{}`", f.module.join("/"), p.join("::")));
                }
            }
        }
    }
    assert!(seen >= 8, "the room's files are seen: {seen}");
    assert!(bad.is_empty(), "gpu_decode/ uses only {GPU_DECODE_USES:?}:\n{}", bad.join("\n"));
}

#[test]
fn transfer_sees_gpu_decode_only_through_its_interface() {
    let mut bad = Vec::new();
    let mut named = BTreeSet::new();
    for f in source_files().into_iter().filter(|f| f.module.first().is_some_and(|r| r == "transfer")) {
        for line in &f.code {
            for item in items_after(line, "crate::gpu_decode::") {
                if !TRANSFER_SEES_OF_GPU_DECODE.contains(&item.as_str()) {
                    bad.push(format!("{}: names `gpu_decode::{item}`", f.module.join("/")));
                }
                named.insert(item);
            }
            if line.contains("crate::gpu_decode;") || line.contains("crate::gpu_decode as") {
                bad.push(format!("{}: names the room gpu_decode itself", f.module.join("/")));
            }
        }
    }
    assert!(bad.is_empty(), "transfer/ sees gpu_decode/ only as {TRANSFER_SEES_OF_GPU_DECODE:?}:\n{}", bad.join("\n"));
    // The check sees the tree: the engine does use the interface.
    assert!(named.contains("GpuRows"), "{named:?}");
}

#[test]
fn the_item_parser_reads_grouped_and_single_items() {
    let p = "crate::gpu_decode::";
    assert_eq!(items_after("use crate::gpu_decode::{CpuFallback, GpuRows};", p), ["CpuFallback", "GpuRows"]);
    assert_eq!(items_after("x: crate::gpu_decode::queue::DecodeQueue<T>,", p), ["queue"]);
    assert_eq!(items_after("use crate::gpu_decode::{task::GpuTask as T, Share};", p), ["task", "Share"]);
    assert!(items_after("use crate::transfer::Station;", p).is_empty());
}
