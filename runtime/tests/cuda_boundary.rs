//! The runtime calls the CUDA driver only inside runtime/src/cuda/, through its checked
//! wrappers (docs/architecture.md, `cuda/`): a raw driver function (`sys::cuMemcpyAsync(…)`,
//! a `cu…` function imported from `cudarc::driver::sys` and called by name) or cudarc's raw
//! `driver::result` layer in any other runtime source file fails this test. Types
//! (`sys::CUstream`, `sys::CUresult`) may pass through; comments and string literals are not
//! code and are skipped.

use std::path::Path;

mod common;

/// Whether the `r` at `i` starts a raw string literal's prefix (`r`, `br`, `cr`), not the end of
/// an identifier.
fn prefix_ok(c: &[char], i: usize) -> bool {
    let ident = |k: usize| c[k].is_alphanumeric() || c[k] == '_';
    i == 0 || !ident(i - 1) || (matches!(c[i - 1], 'b' | 'c') && (i == 1 || !ident(i - 2)))
}

/// `src` with comments, string literals and char literals blanked (newlines kept, so line
/// numbers stay right).
fn code_only(src: &str) -> String {
    let c: Vec<char> = src.chars().collect();
    let mut out = String::with_capacity(src.len());
    let blank = |out: &mut String, ch: char| out.push(if ch == '\n' { '\n' } else { ' ' });
    let mut i = 0;
    while i < c.len() {
        let next = c.get(i + 1).copied();
        if c[i] == '/' && next == Some('/') {
            while i < c.len() && c[i] != '\n' {
                blank(&mut out, c[i]);
                i += 1;
            }
        } else if c[i] == '/' && next == Some('*') {
            let mut depth = 0;
            while i < c.len() {
                if c[i] == '/' && c.get(i + 1) == Some(&'*') {
                    depth += 1;
                    out.push_str("  ");
                    i += 2;
                } else if c[i] == '*' && c.get(i + 1) == Some(&'/') {
                    depth -= 1;
                    out.push_str("  ");
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    blank(&mut out, c[i]);
                    i += 1;
                }
            }
        } else if c[i] == 'r' && (next == Some('"') || next == Some('#')) && prefix_ok(&c, i) {
            // A raw string r"…" or r#"…"#, also br"…" and cr"…".
            let mut j = i + 1;
            let mut hashes = 0;
            while c.get(j) == Some(&'#') {
                hashes += 1;
                j += 1;
            }
            if c.get(j) != Some(&'"') {
                out.push(c[i]);
                i += 1;
                continue;
            }
            j += 1;
            loop {
                match c.get(j) {
                    None => break,
                    Some('"') if (1..=hashes).all(|k| c.get(j + k) == Some(&'#')) => {
                        j += 1 + hashes;
                        break;
                    }
                    _ => j += 1,
                }
            }
            for &ch in &c[i..j.min(c.len())] {
                blank(&mut out, ch);
            }
            i = j;
        } else if c[i] == '"' {
            blank(&mut out, c[i]);
            i += 1;
            while i < c.len() && c[i] != '"' {
                let n = if c[i] == '\\' { 2 } else { 1 };
                for &ch in &c[i..(i + n).min(c.len())] {
                    blank(&mut out, ch);
                }
                i += n;
            }
            if i < c.len() {
                blank(&mut out, c[i]);
                i += 1;
            }
        } else if c[i] == '\'' {
            // A char literal ('x', '\n', '\u{1F600}'), else a lifetime or label ('a).
            let end = if next == Some('\\') {
                (i + 3..c.len()).find(|&j| c[j] == '\'')
            } else if c.get(i + 2) == Some(&'\'') {
                Some(i + 2)
            } else {
                None
            };
            match end {
                Some(e) => {
                    for &ch in &c[i..=e] {
                        blank(&mut out, ch);
                    }
                    i = e + 1;
                }
                None => {
                    out.push(c[i]);
                    i += 1;
                }
            }
        } else {
            out.push(c[i]);
            i += 1;
        }
    }
    out
}

/// The raw driver calls in `src`: (line number, what was found).
fn raw_driver_calls(src: &str) -> Vec<(usize, String)> {
    let code = code_only(src);
    let mut found = Vec::new();
    for (n, line) in code.lines().enumerate() {
        let ch: Vec<char> = line.chars().collect();
        let ident = |k: usize| ch.get(k).is_some_and(|c| c.is_alphanumeric() || *c == '_');
        if line.contains("driver::result") {
            found.push((n + 1, "cudarc::driver::result".to_string()));
        }
        for i in 0..ch.len() {
            // An identifier cuX… (X upper case): a driver function, named by path or imported.
            let starts = ch[i] == 'c'
                && ch.get(i + 1) == Some(&'u')
                && ch.get(i + 2).is_some_and(|c| c.is_ascii_uppercase())
                && (i == 0 || !ident(i - 1));
            if !starts {
                continue;
            }
            let mut end = i + 2;
            while ident(end) {
                end += 1;
            }
            let name: String = ch[i..end].iter().collect();
            let before: String = ch[..i].iter().collect();
            let called = ch[end..].iter().find(|c| !c.is_whitespace()) == Some(&'(');
            if before.trim_end().ends_with("sys::") || called {
                found.push((n + 1, name));
            }
        }
    }
    found
}

#[test]
fn the_scanner_finds_raw_driver_calls_and_skips_comments_strings_and_types() {
    let hit = "let r = unsafe { sys::cuMemcpyAsync(d, s, n, st) };\n";
    assert_eq!(
        raw_driver_calls(hit),
        vec![(1, "cuMemcpyAsync".to_string())]
    );
    let path = "x(cudarc::driver::sys::cuMemsetD8Async(p, 0, 16, s));";
    assert_eq!(raw_driver_calls(path).len(), 1, "{path}");
    let imported = "use cudarc::driver::sys::{cuLaunchKernel, CUstream};\n\nfn f() {\n    unsafe { cuLaunchKernel (a) };\n}\n";
    assert_eq!(
        raw_driver_calls(imported),
        vec![(4, "cuLaunchKernel".to_string())]
    );
    assert_eq!(
        raw_driver_calls("use cudarc::driver::result::memcpy_htod_async;").len(),
        1
    );
    let fine = r##"// sys::cuMemcpyAsync(a, b)
/* cuMemcpy(a) /* nested */ cuInit(0) */
let s: sys::CUstream = st.cu_stream();
let t = "cuMemGetHandleForAddressRange(DMA_BUF_FD) returned \" cuInit(0)";
let u = r#"sys::cuInit(0)"#;
let c = '"'; let q = '\''; fn g<'a>(x: &'a u8) {}
let b = br"cuInit(0)";
let r = sys::CUresult::CUDA_SUCCESS;
"##;
    assert_eq!(raw_driver_calls(fine), vec![], "{fine}");
}

#[test]
fn no_raw_cuda_driver_call_outside_the_cuda_module() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let cuda = root.join("cuda");
    let files = common::rust_sources(&root);
    assert!(
        files.len() > 40,
        "found only {} files under {root:?}",
        files.len()
    );
    let mut inside = 0;
    let mut outside = Vec::new();
    for f in &files {
        let src = std::fs::read_to_string(f).unwrap_or_else(|e| panic!("reading {f:?}: {e}"));
        let calls = raw_driver_calls(&src);
        if f.starts_with(&cuda) {
            inside += calls.len();
            continue;
        }
        let rel = f.strip_prefix(&root).unwrap_or(f).display().to_string();
        outside.extend(
            calls
                .into_iter()
                .map(|(l, what)| format!("{rel}:{l}: {what}")),
        );
    }
    // The scanner sees the wrappers' own calls (else it is blind, and the check below vacuous).
    assert!(
        inside >= 20,
        "only {inside} driver calls found under {cuda:?}"
    );
    assert!(
        outside.is_empty(),
        "raw CUDA driver calls outside runtime/src/cuda/ (call the driver through a checked \
         wrapper of cuda/: copy.rs, kernels.rs, mod.rs; add one there if none fits):\n{}",
        outside.join("\n")
    );
}
