//! The runtime's layers, checked from its sources: every `crate::` and `super::` path of every
//! file under runtime/src (test modules left out) is an import edge to the file of the module
//! it names. No edge may point to a higher layer, the files must not import each other in a
//! cycle, and only the world and the API files write `impl World`. The layers are listed in
//! docs/architecture.md ("Layers"); a file matched by no rule below is an API file (the top).

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

mod common;

/// (path prefix under runtime/src, layer), first match wins; higher layers may import lower.
const LAYERS: &[(&str, usize, &str)] = &[
    // The world's subsystem state, below the world (which holds them).
    ("team/handle.rs", 3, "subsystems"),
    ("region/memory.rs", 3, "subsystems"),
    ("coll/modules.rs", 3, "subsystems"),
    // The world's stream calls to PEs that the proxy serves (an API file).
    ("proxy/ordered.rs", 5, "api"),
    ("world.rs", 4, "world"),
    ("contract.rs", 5, "api"),
    ("lib.rs", 5, "api"),
    ("error.rs", 0, "base"),
    ("types.rs", 0, "base"),
    ("float16.rs", 0, "base"),
    ("wire.rs", 0, "base"),
    ("frame.rs", 0, "base"),
    ("seqlock.rs", 0, "base"),
    ("cloexec.rs", 0, "base"),
    ("logging.rs", 0, "base"),
    ("config", 0, "base"),
    ("uid.rs", 0, "base"),
    ("exit.rs", 0, "base"),
    ("hang.rs", 0, "base"),
    ("cuda/", 1, "platform"),
    ("node.rs", 1, "platform"),
    ("wait.rs", 1, "platform"),
    ("heap/", 1, "platform"),
    ("device/", 1, "platform"),
    ("transport/", 2, "transports"),
    ("proxy/", 3, "subsystems"),
];

const API: usize = 5;

fn layer(rel: &str) -> (usize, &'static str) {
    LAYERS
        .iter()
        .find(|(p, _, _)| rel == *p || rel.starts_with(p))
        .map_or((API, "api"), |&(_, l, n)| (l, n))
}

/// The module path of a file (`transport/tcp/mod.rs` -> [transport, tcp]; lib.rs -> []).
fn module_of(rel: &str) -> Vec<String> {
    let mut parts: Vec<String> = rel
        .trim_end_matches(".rs")
        .split('/')
        .map(str::to_string)
        .collect();
    if parts.last().is_some_and(|p| p == "mod" || p == "lib") {
        parts.pop();
    }
    parts
}

/// The source without its test modules and comments.
fn code(src: &str) -> String {
    let src = match src.find("#[cfg(test)]\nmod tests") {
        Some(i) => &src[..i],
        None => src,
    };
    src.lines()
        .map(|l| match l.find("//") {
            Some(i) => &l[..i],
            None => l,
        })
        .collect::<Vec<_>>()
        .join("\n")
}

fn ident_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_'
}

/// The module paths `text` names after `crate::` / `super::` (`crate::{a::B, c}` names both),
/// as absolute module paths (segments up to the first that is not a lowercase identifier).
fn paths(text: &str, module: &[String]) -> Vec<Vec<String>> {
    let mut out = Vec::new();
    // `super` is the parent of the file's module (for a mod.rs, of its folder's module).
    let parent = module[..module.len().saturating_sub(1)].to_vec();
    for (anchor, base) in [("crate::", Vec::new()), ("super::", parent)] {
        let mut rest = text;
        while let Some(i) = rest.find(anchor) {
            let before = rest[..i].chars().last();
            rest = &rest[i + anchor.len()..];
            if before.is_some_and(|c| ident_char(c) || c == ':') {
                continue; // part of a longer path (`foo::crate::`, `super::super::`)
            }
            let mut base = base.clone();
            let mut after = rest;
            while let Some(r) = after.strip_prefix("super::") {
                base.pop();
                after = r;
            }
            if let Some(group) = after.strip_prefix('{') {
                let end = group.find('}').unwrap_or(group.len());
                for item in group[..end].split(',') {
                    out.push(segments(item.trim(), &base));
                }
            } else {
                out.push(segments(after, &base));
            }
        }
    }
    out
}

/// `base` followed by the leading lowercase segments of the path `s` (`heap::Heap` -> heap).
fn segments(s: &str, base: &[String]) -> Vec<String> {
    let mut p = base.to_vec();
    for seg in s.split("::") {
        let id: String = seg.chars().take_while(|&c| ident_char(c)).collect();
        if !id.starts_with(|c: char| c.is_ascii_lowercase()) {
            break;
        }
        let whole = id.len() == seg.len();
        p.push(id);
        if !whole {
            break; // the path ends inside this segment (`heap;`, `say!(`)
        }
    }
    p
}

struct Tree {
    /// File (relative to runtime/src) -> the files it imports.
    edges: BTreeMap<String, BTreeSet<String>>,
    /// File -> its source without tests and comments.
    code: BTreeMap<String, String>,
}

fn tree() -> Tree {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let bin = src.join("bin");
    let files: Vec<_> = common::rust_sources(&src)
        .into_iter()
        .filter(|p| !p.starts_with(&bin))
        .collect();
    assert!(
        files.len() > 60,
        "found only {} files under {src:?}",
        files.len()
    );
    let rel = |p: &Path| {
        p.strip_prefix(&src)
            .expect("under src")
            .display()
            .to_string()
    };
    let by_module: BTreeMap<Vec<String>, String> =
        files.iter().map(|p| (module_of(&rel(p)), rel(p))).collect();
    let mut edges = BTreeMap::new();
    let mut codes = BTreeMap::new();
    for p in &files {
        let r = rel(p);
        let text = code(&std::fs::read_to_string(p).expect("source file"));
        let module = module_of(&r);
        let mut out = BTreeSet::new();
        for path in paths(&text, &module) {
            // The longest prefix that is a module with a file of its own.
            if let Some(f) = (1..=path.len())
                .rev()
                .find_map(|k| by_module.get(&path[..k]))
            {
                if *f != r {
                    out.insert(f.clone());
                }
            }
        }
        edges.insert(r.clone(), out);
        codes.insert(r, text);
    }
    Tree { edges, code: codes }
}

#[test]
fn no_file_imports_a_higher_layer() {
    let t = tree();
    let up: Vec<String> = t
        .edges
        .iter()
        .flat_map(|(a, bs)| bs.iter().map(move |b| (a, b)))
        .filter(|(a, b)| layer(b).0 > layer(a).0)
        .map(|(a, b)| format!("{a} ({}) -> {b} ({})", layer(a).1, layer(b).1))
        .collect();
    assert!(up.is_empty(), "imports pointing up the layers: {up:#?}");
    // The check sees real imports: the world imports the heap, the API imports the world.
    assert!(t.edges["world.rs"].contains("heap/mod.rs"));
    assert!(t.edges["rma.rs"].contains("world.rs"));
    assert!(t.edges["transport/remote.rs"].contains("transport/tcp/mod.rs"));
}

#[test]
fn no_import_cycle() {
    let t = tree();
    // Depth-first search; a back edge is a cycle.
    fn visit<'a>(
        f: &'a str,
        t: &'a Tree,
        state: &mut BTreeMap<&'a str, u8>,
        stack: &mut Vec<&'a str>,
    ) -> Option<Vec<String>> {
        state.insert(f, 1);
        stack.push(f);
        for g in t.edges.get(f).into_iter().flatten() {
            match state.get(g.as_str()) {
                Some(1) => {
                    let at = stack.iter().position(|s| s == g).unwrap_or(0);
                    let mut c: Vec<String> = stack[at..].iter().map(|s| s.to_string()).collect();
                    c.push(g.clone());
                    return Some(c);
                }
                Some(_) => {}
                None => {
                    if let Some(c) = visit(g, t, state, stack) {
                        return Some(c);
                    }
                }
            }
        }
        stack.pop();
        state.insert(f, 2);
        None
    }
    let mut state = BTreeMap::new();
    for f in t.edges.keys() {
        if !state.contains_key(f.as_str()) {
            if let Some(c) = visit(f, &t, &mut state, &mut Vec::new()) {
                panic!("import cycle: {}", c.join(" -> "));
            }
        }
    }
}

#[test]
fn only_the_world_and_api_files_write_impl_world() {
    let t = tree();
    let below: Vec<&String> = t
        .code
        .iter()
        .filter(|(f, c)| layer(f).0 < 4 && c.contains("impl World"))
        .map(|(f, _)| f)
        .collect();
    assert!(
        below.is_empty(),
        "impl World below the world's layer: {below:?}"
    );
    assert!(t.code["world.rs"].contains("impl World"));
}

#[test]
fn the_path_reader_follows_groups_and_super() {
    let m = vec!["transport".to_string(), "tcp".to_string()];
    let p = paths(
        "use crate::{heap::Heap, error::Result};\nuse super::select::Via; let x = super::super::wait::W;",
        &m,
    );
    let s = |v: &[&str]| v.iter().map(|x| x.to_string()).collect::<Vec<_>>();
    assert!(p.contains(&s(&["heap"])), "{p:?}");
    assert!(p.contains(&s(&["error"])), "{p:?}");
    assert!(p.contains(&s(&["transport", "select"])), "{p:?}");
    assert!(p.contains(&s(&["wait"])), "{p:?}");
    assert_eq!(layer("transport/ucx/ucp.rs").1, "transports");
    assert_eq!(layer("rma.rs").1, "api");
}
