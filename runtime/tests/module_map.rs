//! docs/architecture.md checked against the tree it describes.
//!
//! - The module map ("Crates and modules") is a tree: every file under runtime/src must be
//!   listed under its own folder, and every file or folder the map lists must exist. The test
//!   reads both the map and the tree, so it keeps working when files move: a move fails it until
//!   the map says where the file went.
//! - The method lists of `TransportOps` (architecture.md, transports.md) must be the trait's
//!   methods, read from its source.
//! - Every `Type::method` the page names in backticks must be declared in a file that has an
//!   `impl` of that type (a name check: it catches removed and renamed methods).
//! - Every relative link in README.md and docs/ (docs/bench/ included) must name a file that
//!   exists and, for `file.md#anchor`, a heading of that file.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("runtime/ has a parent")
        .to_path_buf()
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("reading {path:?}: {e}"))
}

/// Every file under `dir` (recursively), as paths relative to `root` with `/` separators.
fn files_under(root: &Path, dir: &Path, out: &mut Vec<String>) {
    let entries = std::fs::read_dir(dir).unwrap_or_else(|e| panic!("reading {dir:?}: {e}"));
    for e in entries {
        let p = e.expect("directory entry").path();
        let name = p.file_name().and_then(|n| n.to_str()).unwrap_or("");
        if name.starts_with('.') {
            continue;
        }
        if p.is_dir() {
            files_under(root, &p, out);
        } else {
            let rel = p.strip_prefix(root).expect("under the root");
            out.push(rel.to_string_lossy().replace('\\', "/"));
        }
    }
}

/// The text of the first fenced block after the heading `heading`.
fn block_after<'a>(doc: &'a str, heading: &str) -> Vec<(usize, &'a str)> {
    let mut lines = doc.lines().enumerate().skip_while(|(_, l)| *l != heading);
    assert!(
        lines.next().is_some(),
        "docs/architecture.md has no heading {heading:?}"
    );
    lines
        .skip_while(|(_, l)| !l.starts_with("```"))
        .skip(1)
        .take_while(|(_, l)| !l.starts_with("```"))
        .map(|(i, l)| (i + 1, l))
        .collect()
}

/// An entry of the map's tree: a name that starts the line at an even indent (two spaces per
/// level), at most one level deeper than the folder above it; anything else (a description's
/// continuation, indented to the description column) is skipped.
/// A name ends in `/` (a folder, possibly several levels: `runtime/src/`) or has an extension.
fn entry(line: &str, depth_limit: usize) -> Option<(usize, &str)> {
    let indent = line.len() - line.trim_start_matches(' ').len();
    let rest = &line[indent..];
    let end = rest.find(' ').unwrap_or(rest.len());
    let name = &rest[..end];
    let after = &rest[end..];
    let name_ok = !name.is_empty()
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "_.-/".contains(c))
        && (name.ends_with('/') || name.rsplit('/').next().is_some_and(|b| b.contains('.')));
    let depth = indent / 2;
    (indent % 2 == 0
        && depth <= depth_limit
        && name_ok
        && (after.is_empty() || after.starts_with(' ')))
    .then_some((depth, name))
}

/// The map's entries as repository paths (folders end in `/`), with their line numbers.
fn map_entries(doc: &str) -> Vec<(String, usize)> {
    let mut folders: Vec<String> = Vec::new(); // folders[d]: the open folder at depth d
    let mut out = Vec::new();
    for (line_no, line) in block_after(doc, "## Crates and modules") {
        let Some((depth, name)) = entry(line, folders.len()) else {
            continue; // a description's continuation
        };
        folders.truncate(depth);
        let path = format!("{}{name}", folders.last().map_or("", String::as_str));
        if name.ends_with('/') {
            folders.push(path.clone());
        }
        out.push((path, line_no));
    }
    out
}

#[test]
fn module_map_lists_every_runtime_file_under_its_folder() {
    let root = repo();
    let doc = read(&root.join("docs/architecture.md"));
    let entries = map_entries(&doc);
    let mut listed = BTreeMap::new();
    let mut problems = Vec::new();
    for (path, line) in &entries {
        if listed.insert(path.clone(), *line).is_some() {
            problems.push(format!("line {line}: {path} is listed twice"));
        }
        let p = root.join(path);
        let exists = if path.ends_with('/') {
            p.is_dir()
        } else {
            p.is_file()
        };
        if !exists {
            problems.push(format!("line {line}: {path} does not exist"));
        }
    }
    let mut files = Vec::new();
    files_under(&root, &root.join("runtime/src"), &mut files);
    assert!(files.len() > 40, "found only {} files", files.len());
    for f in &files {
        if !listed.contains_key(f) {
            let folder = f.rsplit_once('/').map_or("", |(d, _)| d);
            problems.push(format!("{f} is not listed under {folder}/"));
        }
    }
    assert!(
        problems.is_empty(),
        "docs/architecture.md's module map (a tree: an entry's name starts its line, two spaces \
         deeper than its folder's) disagrees with the tree:\n  {}",
        problems.join("\n  ")
    );
}

#[test]
fn module_map_parser_reads_folders_and_continuations() {
    let doc = "## Crates and modules\n\n```\ntop/src/  a crate\n  a.rs     one\n             \
               b.rs  is a continuation (odd indent)\n  sub/\n    c.rs   two\n  d.cu\n\
               other/   x\n```\n";
    let got: Vec<String> = map_entries(doc).into_iter().map(|(p, _)| p).collect();
    assert_eq!(
        got,
        [
            "top/src/",
            "top/src/a.rs",
            "top/src/sub/",
            "top/src/sub/c.rs",
            "top/src/d.cu",
            "other/"
        ]
    );
}

/// The names of the methods declared in `trait NAME` anywhere under runtime/src.
fn trait_methods(name: &str) -> (String, BTreeSet<String>) {
    let root = repo();
    let mut files = Vec::new();
    files_under(&root, &root.join("runtime/src"), &mut files);
    let decl = format!("trait {name} ");
    for f in files.iter().filter(|f| f.ends_with(".rs")) {
        let src = read(&root.join(f));
        let Some(start) = src.lines().position(|l| {
            let l = l.trim_start();
            let l = l.strip_prefix("pub(crate) ").unwrap_or(l);
            l.strip_prefix("pub ").unwrap_or(l).starts_with(&decl)
        }) else {
            continue;
        };
        let lines: Vec<&str> = src.lines().collect();
        let indent = lines[start].len() - lines[start].trim_start().len();
        let close = format!("{}}}", " ".repeat(indent));
        let member = " ".repeat(indent + 4);
        let mut methods = BTreeSet::new();
        for l in lines[start + 1..].iter().take_while(|l| **l != close) {
            let Some(body) = l.strip_prefix(&member) else {
                continue;
            };
            let body = body.strip_prefix("unsafe ").unwrap_or(body);
            if let Some(sig) = body.strip_prefix("fn ") {
                let end = sig.find(['(', '<']).unwrap_or(sig.len());
                methods.insert(sig[..end].to_string());
            }
        }
        return (f.clone(), methods);
    }
    panic!("no `trait {name}` under runtime/src");
}

/// The method names listed in `doc` right after the sentence containing `intro`: the first
/// bullet list or table after it, each item's backticked names before its first ": " (a
/// bullet) or in its first cell (a table row), argument lists (`amo(at, a)`) dropped.
fn documented_methods(doc: &str, intro: &str) -> BTreeSet<String> {
    let at = doc
        .find(intro)
        .unwrap_or_else(|| panic!("the page has no {intro:?}"));
    let mut names = BTreeSet::new();
    let items = doc[at..]
        .lines()
        .skip_while(|l| !l.starts_with("- ") && !l.starts_with('|'))
        .take_while(|l| l.starts_with("- ") || l.starts_with('|'));
    for l in items {
        let head = match l.strip_prefix("- ") {
            Some(bullet) => bullet.split(": ").next().unwrap_or(""),
            None => l.split('|').nth(1).unwrap_or(""),
        };
        for (i, part) in head.split('`').enumerate() {
            if i % 2 == 1 {
                names.insert(part.split('(').next().unwrap_or(part).to_string());
            }
        }
    }
    names
}

#[test]
fn transport_ops_method_lists_match_the_trait() {
    let (file, code) = trait_methods("TransportOps");
    assert!(code.len() >= 5, "read only {code:?} from {file}");
    for page in ["docs/architecture.md", "docs/transports.md"] {
        let doc = read(&repo().join(page));
        let listed = documented_methods(&doc, "implements `transport::TransportOps`");
        let missing: Vec<_> = code.difference(&listed).collect();
        let extra: Vec<_> = listed.difference(&code).collect();
        assert!(
            missing.is_empty() && extra.is_empty(),
            "{page}'s TransportOps list disagrees with {file}: not listed {missing:?}, listed \
             but not in the trait {extra:?}"
        );
    }
}

#[test]
fn method_lists_are_read_from_bullets_and_tables() {
    let bullets = "x implements `T`, with\n\n- `a`, `b`: one `c`\n- `d`: two\n\nafter `e`\n";
    let table = "x implements `T`:\n\n| op | meaning |\n|---|---|\n| `a(x, y)`, `b` | `c` |\n";
    let names = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<BTreeSet<_>>();
    assert_eq!(
        documented_methods(bullets, "implements `T`"),
        names(&["a", "b", "d"])
    );
    assert_eq!(
        documented_methods(table, "implements `T`"),
        names(&["a", "b"])
    );
}

/// GitHub's anchor for a heading: lower case, spaces to `-`, other punctuation dropped.
fn slug(heading: &str) -> String {
    heading
        .trim()
        .to_lowercase()
        .chars()
        .filter_map(|c| match c {
            ' ' => Some('-'),
            c if c.is_alphanumeric() || c == '-' || c == '_' => Some(c),
            _ => None,
        })
        .collect()
}

/// Lines outside fenced code blocks, with their numbers.
fn prose(md: &str) -> Vec<(usize, &str)> {
    let mut fenced = false;
    let mut out = Vec::new();
    for (i, l) in md.lines().enumerate() {
        if l.trim_start().starts_with("```") {
            fenced = !fenced;
        } else if !fenced {
            out.push((i + 1, l));
        }
    }
    out
}

fn anchors(md: &str) -> BTreeSet<String> {
    let mut seen: BTreeMap<String, usize> = BTreeMap::new();
    let mut out = BTreeSet::new();
    for (_, l) in prose(md) {
        let hashes = l.len() - l.trim_start_matches('#').len();
        if (1..=6).contains(&hashes) && l[hashes..].starts_with(' ') {
            let s = slug(&l[hashes..]);
            let n = seen.entry(s.clone()).or_insert(0);
            out.insert(if *n == 0 {
                s.clone()
            } else {
                format!("{s}-{n}")
            });
            *n += 1;
        }
    }
    out
}

/// The `](target)` link targets of a line, with inline code spans left out.
fn link_targets(line: &str) -> Vec<&str> {
    let mut out = Vec::new();
    for (i, part) in line.split('`').enumerate() {
        if i % 2 == 1 {
            continue;
        }
        let mut rest = part;
        while let Some(at) = rest.find("](") {
            let t = &rest[at + 2..];
            let end = t.find([')', ' ']).unwrap_or(t.len());
            out.push(&t[..end]);
            rest = &t[end..];
        }
    }
    out
}

#[test]
fn relative_links_in_readme_and_docs_resolve() {
    let root = repo();
    let mut pages = vec!["README.md".to_string()];
    for dir in ["docs", "docs/bench"] {
        let mut names: Vec<String> = std::fs::read_dir(root.join(dir))
            .expect("docs folder")
            .filter_map(|e| e.ok()?.file_name().into_string().ok())
            .filter(|n| n.ends_with(".md"))
            .map(|n| format!("{dir}/{n}"))
            .collect();
        names.sort();
        pages.extend(names);
    }
    assert!(
        pages.iter().any(|p| p == "docs/BENCHMARKS.md") && pages.len() > 10,
        "pages: {pages:?}"
    );
    let mut broken = Vec::new();
    for page in &pages {
        let md = read(&root.join(page));
        let dir = Path::new(page).parent().unwrap_or(Path::new(""));
        for (line, text) in prose(&md) {
            for t in link_targets(text) {
                if t.contains("://") || t.starts_with("mailto:") || t.is_empty() {
                    continue;
                }
                let (file, anchor) = t.split_once('#').unwrap_or((t, ""));
                let target = if file.is_empty() {
                    root.join(page)
                } else {
                    root.join(dir).join(file)
                };
                if !target.exists() {
                    broken.push(format!("{page}:{line}: {t} (no such file)"));
                } else if !anchor.is_empty()
                    && target.extension().is_some_and(|e| e == "md")
                    && !anchors(&read(&target)).contains(anchor)
                {
                    broken.push(format!("{page}:{line}: {t} (no such heading)"));
                }
            }
        }
    }
    assert!(
        broken.is_empty(),
        "broken links:\n  {}",
        broken.join("\n  ")
    );
}

#[test]
fn slugs_follow_github() {
    assert_eq!(
        slug(" GPU collectives on stream (4 × H200)"),
        "gpu-collectives-on-stream-4--h200"
    );
    assert_eq!(
        slug(" Python: `rshmem.alltoall` against `torch.distributed.all_to_all_single`"),
        "python-rshmemalltoall-against-torchdistributedall_to_all_single"
    );
    assert_eq!(
        link_targets("see [a](b.md#c) and `[x](y)` [d](e)"),
        ["b.md#c", "e"]
    );
}

/// The `Type::method` names in backticks in `doc` (a capitalized type, a lower-case method).
fn method_refs(doc: &str) -> BTreeSet<(String, String)> {
    let mut out = BTreeSet::new();
    for (i, span) in doc.split('`').enumerate() {
        let Some((ty, method)) = span.split_once("::").filter(|_| i % 2 == 1) else {
            continue;
        };
        let ident = |s: &str| !s.is_empty() && s.chars().all(|c| c.is_alphanumeric() || c == '_');
        if ident(ty)
            && ident(method)
            && ty.starts_with(|c: char| c.is_ascii_uppercase())
            && method.starts_with(|c: char| c.is_ascii_lowercase() || c == '_')
        {
            out.insert((ty.to_string(), method.to_string()));
        }
    }
    out
}

/// Whether a file under runtime/src or bootstrap/src has an `impl` block of `ty` and a
/// `fn method`.
fn has_method(sources: &[(String, String)], ty: &str, method: &str) -> bool {
    let fn_decl = |src: &str| {
        src.contains(&format!("fn {method}(")) || src.contains(&format!("fn {method}<"))
    };
    sources.iter().any(|(_, src)| {
        fn_decl(src)
            && src.lines().any(|l| {
                let l = l.trim_start();
                l.starts_with("impl")
                    && (l.contains(&format!(" {ty} ")) || l.contains(&format!(" {ty}<")))
            })
    })
}

#[test]
fn methods_named_in_architecture_md_exist() {
    let root = repo();
    let doc = read(&root.join("docs/architecture.md"));
    let mut files = Vec::new();
    for dir in ["runtime/src", "bootstrap/src"] {
        files_under(&root, &root.join(dir), &mut files);
    }
    let sources: Vec<(String, String)> = files
        .iter()
        .filter(|f| f.ends_with(".rs"))
        .map(|f| (f.clone(), read(&root.join(f))))
        .collect();
    let refs = method_refs(&doc);
    assert!(refs.len() >= 5, "found only {refs:?}");
    let missing: Vec<String> = refs
        .iter()
        .filter(|(ty, m)| !has_method(&sources, ty, m))
        .map(|(ty, m)| format!("{ty}::{m}"))
        .collect();
    assert!(
        missing.is_empty(),
        "docs/architecture.md names methods that no `impl` of their type under runtime/src or \
         bootstrap/src declares: {missing:?}"
    );
}
