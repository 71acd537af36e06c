//! docs/architecture.md's module map names every source file of the runtime: a file added
//! under runtime/src (a module, a kernel source, a binary) without a line there fails this
//! test. Files are matched by name (`mod.rs` files by their folder, which the map names).

use std::path::{Path, PathBuf};

fn sources(dir: &Path, out: &mut Vec<PathBuf>) {
    let entries = std::fs::read_dir(dir).unwrap_or_else(|e| panic!("reading {dir:?}: {e}"));
    for e in entries {
        let p = e.expect("directory entry").path();
        if p.is_dir() {
            sources(&p, out);
        } else if matches!(p.extension().and_then(|x| x.to_str()), Some("rs" | "cu")) {
            out.push(p);
        }
    }
}

#[test]
fn architecture_md_names_every_runtime_source_file() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let map = std::fs::read_to_string(root.join("../docs/architecture.md"))
        .expect("docs/architecture.md");
    let src = root.join("src");
    let mut files = Vec::new();
    sources(&src, &mut files);
    assert!(
        files.len() > 40,
        "found only {} files under {src:?}",
        files.len()
    );
    let missing: Vec<String> = files
        .iter()
        .filter_map(|p| {
            let name = p.file_name()?.to_str()?;
            let key = if name == "mod.rs" {
                // A folder module: the map names the folder (`heap/`).
                format!("{}/", p.parent()?.file_name()?.to_str()?)
            } else {
                name.to_string()
            };
            (!map.contains(&key)).then(|| p.strip_prefix(&src).unwrap_or(p).display().to_string())
        })
        .collect();
    assert!(
        missing.is_empty(),
        "docs/architecture.md's module map does not name: {missing:?}"
    );
}
