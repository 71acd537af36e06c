//! Compiles the device library with NVRTC (no GPU needed): `device-lib/tests/all_calls.cu`,
//! which calls every device function in every scope and type, and every `*.cu` file under the
//! repository's `examples/`, `tests/`, `perftest/` and `runtime/src/` folders, for sm_90.
//!
//! NVRTC is loaded at run time. Where it is missing, each test whose name ends in
//! `_or_skip` prints `SKIPPED: NVRTC not found (...)` to stderr and returns without checking
//! anything; set `RSHMEM_REQUIRE_NVRTC=1` to make them fail instead (CI machines that have
//! NVRTC should). To run them for real:
//!
//! ```sh
//! export LD_LIBRARY_PATH=$(scripts/install-nvrtc):$LD_LIBRARY_PATH
//! RSHMEM_REQUIRE_NVRTC=1 cargo test -p rshmem --test device_compile
//! ```
//!
//! A `.cu` file that is not meant for NVRTC (host code for nvcc, say) opts out with the line
//! `// rshmem: nvrtc-skip` among its first 20 lines.

use std::io::Write;
use std::path::{Path, PathBuf};

use rshmem::device::nvrtc::{compile_cubin_cached, nvrtc_version, Cache, CompileOptions};
use rshmem::Error;

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .map(Path::to_path_buf)
        .unwrap_or_else(|| PathBuf::from(".."))
}

/// Whether NVRTC is usable; prints the skip line (or panics under RSHMEM_REQUIRE_NVRTC=1) if not.
fn nvrtc_or_skip(test: &str) -> bool {
    match nvrtc_version() {
        Ok(_) => true,
        Err(e) => {
            if std::env::var("RSHMEM_REQUIRE_NVRTC").is_ok_and(|v| v == "1") {
                panic!("{test}: RSHMEM_REQUIRE_NVRTC=1 but NVRTC is unusable: {e}");
            }
            // Written to the stderr handle directly: libtest captures eprintln! of passing tests.
            let _ = writeln!(
                std::io::stderr(),
                "SKIPPED: NVRTC not found ({e}); {test} checked nothing"
            );
            false
        }
    }
}

fn opts(name: &str) -> CompileOptions {
    CompileOptions {
        arch: "sm_90".to_string(),
        options: Vec::new(),
        name: name.to_string(),
    }
}

/// Compiles without touching the user's cache.
fn compile_cubin(src: &str, opts: &CompileOptions) -> rshmem::Result<Vec<u8>> {
    compile_cubin_cached(src, opts, &Cache::Off)
}

fn assert_cubin(what: &str, cubin: &[u8]) {
    assert!(cubin.len() > 64, "{what}: CUBIN of {} bytes", cubin.len());
    assert_eq!(
        &cubin[..4],
        b"\x7fELF",
        "{what}: the CUBIN is not an ELF image"
    );
}

#[test]
fn all_calls_compile_or_skip() {
    if !nvrtc_or_skip("all_calls_compile_or_skip") {
        return;
    }
    let path = repo_root().join("device-lib/tests/all_calls.cu");
    let src =
        std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()));
    // Every call, for every type and scope, with the engines out of line: inlined at each of
    // its hundreds of call sites the file takes NVRTC over 7 minutes (and 12 MB of PTX) on two
    // cores; out of line, about 2. The inlined engines are compiled by nvcc in the register
    // budget programs (device-lib/tests/regbudget) and under NVRTC in the runtime's own kernels
    // (repo_cu_files_compile_or_skip).
    let mut o = opts("all_calls.cu");
    o.options.push("-DRSHMEM_OUTLINE_ENGINES".to_string());
    let cubin = compile_cubin(&src, &o).unwrap_or_else(|e| panic!("{e}"));
    assert_cubin("all_calls.cu", &cubin);
}

fn cu_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        let Ok(kind) = entry.file_type() else {
            continue;
        };
        if kind.is_dir() {
            if path
                .file_name()
                .is_some_and(|n| n != "target" && !n.to_string_lossy().starts_with('.'))
            {
                cu_files(&path, out);
            }
        } else if path.extension().is_some_and(|e| e == "cu") {
            out.push(path);
        }
    }
}

#[test]
fn repo_cu_files_compile_or_skip() {
    if !nvrtc_or_skip("repo_cu_files_compile_or_skip") {
        return;
    }
    let root = repo_root();
    let mut files = Vec::new();
    for dir in ["examples", "tests", "perftest", "runtime/src"] {
        cu_files(&root.join(dir), &mut files);
    }
    files.sort();
    let mut failures = Vec::new();
    let mut compiled = 0;
    for path in &files {
        let Ok(src) = std::fs::read_to_string(path) else {
            failures.push(format!("{}: unreadable", path.display()));
            continue;
        };
        if src
            .lines()
            .take(20)
            .any(|l| l.trim() == "// rshmem: nvrtc-skip")
        {
            eprintln!("{}: skipped (nvrtc-skip)", path.display());
            continue;
        }
        let name = path
            .strip_prefix(&root)
            .unwrap_or(path)
            .display()
            .to_string();
        let mut o = opts(&name);
        if let Some(dir) = path.parent() {
            o.options.push(format!("-I{}", dir.display()));
        }
        match compile_cubin(&src, &o) {
            Ok(cubin) => {
                assert_cubin(&name, &cubin);
                compiled += 1;
            }
            Err(e) => failures.push(format!("{name}: {e}")),
        }
    }
    eprintln!("compiled {compiled} of {} .cu files", files.len());
    assert!(
        failures.is_empty(),
        "{} file(s) failed:\n{}",
        failures.len(),
        failures.join("\n\n")
    );
}

#[test]
fn compile_error_carries_the_log_or_skip() {
    if !nvrtc_or_skip("compile_error_carries_the_log_or_skip") {
        return;
    }
    let src = r#"
#include "rshmem/rshmem.cuh"
extern "C" __global__ void broken(int* p) {
    rshmem_int_p(p, undeclared_identifier_xyz, 1);
}
"#;
    match compile_cubin(src, &opts("broken.cu")) {
        Ok(_) => panic!("a program with an undeclared identifier compiled"),
        Err(Error::InvalidArgument { call, reason }) => {
            assert_eq!(call, "compile");
            assert!(
                reason.contains("undeclared_identifier_xyz"),
                "the log is missing from: {reason}"
            );
            assert!(
                reason.contains("broken.cu"),
                "the program name is missing from: {reason}"
            );
        }
        Err(e) => panic!("unexpected error kind: {e}"),
    }
    // A bad option is reported with NVRTC's words, not a panic.
    let mut o = opts("ok.cu");
    o.options.push("--no-such-option".to_string());
    let err = compile_cubin("__global__ void k() {}", &o)
        .err()
        .map(|e| e.to_string())
        .unwrap_or_default();
    assert!(err.contains("compile"), "bad option: {err:?}");
}

#[test]
fn cache_serves_and_survives_corruption_or_skip() {
    if !nvrtc_or_skip("cache_serves_and_survives_corruption_or_skip") {
        return;
    }
    let dir = std::env::temp_dir().join(format!("rshmem-cubin-cache-test-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let src = r#"
#include "rshmem/rshmem.cuh"
extern "C" __global__ void ping(int* flag, int pe) {
    rshmem_int_p(flag, rshmem_my_pe(), pe);
    rshmem_int_wait_until(flag, RSHMEM_CMP_NE, 0);
}
"#;
    let o = opts("ping.cu");
    let cache = Cache::Dir(dir.clone());
    let first = compile_cubin_cached(src, &o, &cache).unwrap_or_else(|e| panic!("{e}"));
    let entries: Vec<PathBuf> = std::fs::read_dir(&dir)
        .map(|r| r.flatten().map(|e| e.path()).collect())
        .unwrap_or_default();
    assert_eq!(entries.len(), 1, "one cache entry expected: {entries:?}");
    let second = compile_cubin_cached(src, &o, &cache).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(first, second);
    // Damage the entry: it is compiled again, not trusted.
    std::fs::write(&entries[0], b"garbage").unwrap_or_else(|e| panic!("{e}"));
    let third = compile_cubin_cached(src, &o, &cache).unwrap_or_else(|e| panic!("{e}"));
    assert_cubin("recompiled", &third);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn bad_arch_is_rejected_without_nvrtc() {
    let o = CompileOptions {
        arch: "compute_90".to_string(),
        ..opts("x.cu")
    };
    match compile_cubin("", &o) {
        Err(Error::InvalidArgument {
            call: "compile",
            reason,
        }) => assert!(reason.contains("sm_XY"), "{reason}"),
        other => panic!("expected InvalidArgument, got {other:?}"),
    }
}

/// The host/device contract (`rshmem::contract::device_contract`: every wire code and shared
/// layout as a `static_assert`) compiled together with the device headers.
fn contract_source(contract: &str) -> String {
    format!(
        "#include \"rshmem/rshmem.cuh\"\n#include \"rshmem/coll.cuh\"\n{contract}\n\
         extern \"C\" __global__ void contract_probe(int* p) {{ *p = rshmem_my_pe(); }}\n"
    )
}

#[test]
fn device_contract_holds_or_skip() {
    if !nvrtc_or_skip("device_contract_holds_or_skip") {
        return;
    }
    let contract = rshmem::contract::device_contract();
    assert!(contract.matches("static_assert").count() > 60, "{contract}");
    if let Err(e) = compile_cubin(&contract_source(&contract), &opts("contract.cu")) {
        panic!("the device headers disagree with the host's wire codes or layouts:\n{e}");
    }
}

#[test]
fn device_contract_catches_a_one_sided_change_or_skip() {
    if !nvrtc_or_skip("device_contract_catches_a_one_sided_change_or_skip") {
        return;
    }
    // What a change of one side alone looks like: the host's ADD code, the proxy's timeout
    // failure code or the device state's size no longer matching the header.
    let contract = rshmem::contract::device_contract();
    for (from, to) in [
        (
            "(RSHMEM_PROXY_AMO_ADD) == 4ull",
            "(RSHMEM_PROXY_AMO_ADD) == 5ull",
        ),
        (
            "(RSHMEM_PROXY_FAIL_TIMEOUT) == 2ull",
            "(RSHMEM_PROXY_FAIL_TIMEOUT) == 3ull",
        ),
        (
            "(sizeof(rshmem_device_state)) == 136ull",
            "(sizeof(rshmem_device_state)) == 144ull",
        ),
    ] {
        assert!(contract.contains(from), "{from} missing from:\n{contract}");
        let changed = contract.replace(from, to);
        match compile_cubin(&contract_source(&changed), &opts("contract_changed.cu")) {
            Ok(_) => panic!("a contract with {to} compiled"),
            Err(e) => {
                let msg = e.to_string();
                assert!(msg.contains("rshmem host/device contract"), "{msg}");
            }
        }
    }
}

/// The expert-parallel kernels (`rshmem/ep.cuh` through the runtime's `runtime/src/ep/ep.cu`)
/// compile with NVRTC and define every kernel the host side launches; the header alone (twice,
/// without `RSHMEM_EP_KERNELS`) defines none, so several units may include it.
#[test]
fn ep_kernels_compile_or_skip() {
    if !nvrtc_or_skip("ep_kernels_compile_or_skip") {
        return;
    }
    let path = repo_root().join("runtime/src/ep/ep.cu");
    let src =
        std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()));
    let cubin = compile_cubin(&src, &opts("ep.cu")).unwrap_or_else(|e| panic!("{e}"));
    assert_cubin("ep.cu", &cubin);
    let has = |img: &[u8], name: &str| img.windows(name.len()).any(|w| w == name.as_bytes());
    for k in [
        "rshmem_ep_dispatch_send",
        "rshmem_ep_dispatch_recv",
        "rshmem_ep_combine_send_f32",
        "rshmem_ep_combine_send_bf16",
        "rshmem_ep_combine_recv_f32",
        "rshmem_ep_combine_recv_bf16",
        "rshmem_ep_ll_send",
        "rshmem_ep_ll_wait",
        "rshmem_ep_ll_send_per_pe",
        "rshmem_ep_ll_combine_send",
        "rshmem_ep_ll_combine_send_per_pe_f32",
        "rshmem_ep_ll_combine_send_per_pe_bf16",
        "rshmem_ep_ll_combine_recv_f32",
        "rshmem_ep_ll_combine_recv_bf16",
    ] {
        assert!(has(&cubin, k), "ep.cu: kernel {k} missing from the CUBIN");
    }
    let user = "#include \"rshmem/rshmem.cuh\"\n#include \"rshmem/ep.cuh\"\n#include \"rshmem/ep.cuh\"\n\
                extern \"C\" __global__ void my_ll_wait(rshmem_ep_params p) { rshmem_ep_ll_wait_dev(p); }\n";
    let cubin = compile_cubin(user, &opts("ep_user.cu")).unwrap_or_else(|e| panic!("{e}"));
    assert_cubin("ep_user.cu", &cubin);
    assert!(has(&cubin, "my_ll_wait"));
    assert!(
        !has(&cubin, "rshmem_ep_dispatch_send"),
        "ep.cuh defined its kernels without RSHMEM_EP_KERNELS"
    );
}

/// The reduction kernel of the stream collectives (`coll_reduce.cu`) compiled the way the
/// runtime compiles it for the 16-bit floats (`-DRSHMEM_RT=` the type's device name), which
/// needs no CUDA header.
#[test]
fn reduce_kernel_compiles_for_16_bit_floats_or_skip() {
    if !nvrtc_or_skip("reduce_kernel_compiles_for_16_bit_floats_or_skip") {
        return;
    }
    let path = repo_root().join("runtime/src/device/kernels/coll_reduce.cu");
    let src =
        std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()));
    for ty in [
        rshmem::wire::device_type::<rshmem::F16>(),
        rshmem::wire::device_type::<rshmem::BF16>(),
    ] {
        let ty = ty.unwrap_or_else(|| panic!("a 16-bit float has no device type"));
        let mut o = opts(&format!("coll_reduce_{ty}.cu"));
        o.options.push(format!("-DRSHMEM_RT={ty}"));
        let cubin = compile_cubin(&src, &o).unwrap_or_else(|e| panic!("RSHMEM_RT={ty}: {e}"));
        assert_cubin(&o.name, &cubin);
    }
}

/// CUDA's include folder (for <cuda_fp16.h> / <cuda_bf16.h>, which NVRTC does not carry):
/// `$CUDA_HOME/include`, `/usr/local/cuda/include`, or the folder of the pip-installed nvcc
/// (`scripts/install-nvcc`).
fn cuda_include() -> Option<PathBuf> {
    let mut dirs: Vec<PathBuf> = Vec::new();
    if let Some(h) = std::env::var_os("CUDA_HOME") {
        dirs.push(PathBuf::from(h).join("include"));
    }
    dirs.push(PathBuf::from("/usr/local/cuda/include"));
    if let Some(home) = std::env::var_os("HOME") {
        dirs.push(PathBuf::from(home).join(".local/share/rshmem/nvcc/nvidia/cu13/include"));
    }
    dirs.into_iter().find(|d| d.join("cuda_fp16.h").is_file())
}

/// Every half and bfloat16 reduction and reducescatter of the device library (sum, prod, min,
/// max; thread, warp and block scope), which exist when the module includes CUDA's 16-bit float
/// headers first. Skipped (with a line on stderr) where no CUDA include folder is found.
#[test]
fn half_reductions_compile_with_cuda_headers_or_skip() {
    if !nvrtc_or_skip("half_reductions_compile_with_cuda_headers_or_skip") {
        return;
    }
    let Some(inc) = cuda_include() else {
        let _ = writeln!(
            std::io::stderr(),
            "SKIPPED: no CUDA include folder with cuda_fp16.h (set CUDA_HOME); \
             half_reductions_compile_with_cuda_headers_or_skip checked nothing"
        );
        return;
    };
    let mut src = String::from(
        "#include <cuda_fp16.h>\n#include <cuda_bf16.h>\n#include \"rshmem/rshmem.cuh\"\n\
         #include \"rshmem/coll.cuh\"\n\
         extern \"C\" __global__ void half_reductions(rshmem_team_t team, void* d, const void* s, \
         size_t n) {\n",
    );
    for (name, ty) in [("half", "__half"), ("bfloat16", "__nv_bfloat16")] {
        for op in ["sum", "prod", "min", "max"] {
            for c in ["reduce", "reducescatter"] {
                for sfx in ["", "_warp", "_block"] {
                    src += &format!(
                        "    rshmem_{name}_{op}_{c}{sfx}(team, ({ty}*)d, (const {ty}*)s, n);\n"
                    );
                }
            }
        }
    }
    src += "}\n";
    let mut o = opts("half_reductions.cu");
    o.options.push(format!("-I{}", inc.display()));
    // Out of line, as all_calls.cu: 24 reductions inlined into one kernel are the slowest
    // compile of this file; the inlined form is compiled by reduce_kernel_compiles_for_16_bit_floats_or_skip.
    o.options.push("-DRSHMEM_OUTLINE_ENGINES".to_string());
    let cubin = compile_cubin(&src, &o).unwrap_or_else(|e| panic!("{e}"));
    assert_cubin("half_reductions.cu", &cubin);
}
