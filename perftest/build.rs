//! Records the git commit of the build for the JSON rows (`RSHMEM_GIT_COMMIT`): `git describe
//! --always --dirty` of the checkout, or the variable's value when the build sets it (builds
//! outside a git checkout), or nothing (the rows then say "unknown").

use std::process::Command;

fn git(args: &[&str]) -> Option<String> {
    let o = Command::new("git").args(args).output().ok()?;
    if !o.status.success() {
        return None;
    }
    let s = String::from_utf8(o.stdout).ok()?.trim().to_string();
    (!s.is_empty()).then_some(s)
}

fn main() {
    println!("cargo:rerun-if-env-changed=RSHMEM_GIT_COMMIT");
    if let Ok(c) = std::env::var("RSHMEM_GIT_COMMIT") {
        println!("cargo:rustc-env=RSHMEM_GIT_COMMIT={c}");
        return;
    }
    // Rebuild when HEAD moves (a commit or a checkout) or the index changes (dirty state).
    for p in ["HEAD", "logs/HEAD", "index"] {
        if let Some(path) = git(&["rev-parse", "--git-path", p]) {
            println!("cargo:rerun-if-changed={path}");
        }
    }
    if let Some(c) = git(&["describe", "--always", "--dirty", "--abbrev=12"]) {
        println!("cargo:rustc-env=RSHMEM_GIT_COMMIT={c}");
    }
}
