//! Builds the C programs in `tests/c/` against `rshmem.h` and `librshmem` with the system C
//! compiler and runs them with 2 and 4 PEs under `rshmemrun` (on the CPU backend when the
//! machine has no GPU), checking exit status and output; checks that rshmem.h compiles as C
//! and C++ and declares exactly what librshmem exports.
//!
//! The programs land in `target/<profile>/rshmem-c-tests/` with an rpath of `$ORIGIN/..`, so
//! they can be carried with `librshmem.so` and `rshmemrun` to a GPU machine and run there (see
//! docs/c-cuda-api.md, "Tests").

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

#[path = "../../tests/support/cprog.rs"]
#[macro_use]
mod cprog;
use cprog::Ran;

fn crate_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn workspace_root() -> PathBuf {
    crate_dir()
        .parent()
        .and_then(Path::parent)
        .expect("capi/rshmem-c is inside the workspace")
        .to_path_buf()
}

fn include_dir() -> PathBuf {
    workspace_root().join("capi/include")
}

/// The compiler options that find rshmem.h and what it includes: capi/include and the device
/// library's folder (rshmem/type_lists.h, and the device library under nvcc).
fn include_flags() -> [String; 2] {
    [
        format!("-I{}", include_dir().display()),
        format!(
            "-I{}",
            workspace_root().join("device-lib/include").display()
        ),
    ]
}

/// Builds `librshmem` and `rshmemrun` into the profile directory (once per test binary).
fn built() -> &'static Path {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| cprog::build(&workspace_root(), "rshmem-c", None, "librshmem.so"))
}

fn out_dir() -> PathBuf {
    let d = built().join("rshmem-c-tests");
    std::fs::create_dir_all(&d).expect("creating the C test directory");
    d
}

fn cc() -> String {
    std::env::var("CC").unwrap_or_else(|_| "cc".into())
}

/// Compiles `tests/c/<name>.c` against rshmem.h and librshmem.so (`extra` after the source).
fn compile_with(name: &str, compiler: &str, extra: &[String]) -> PathBuf {
    let mut after = extra.to_vec();
    after.extend([
        "-L".into(),
        built().display().to_string(),
        "-Wl,-rpath,$ORIGIN/..".into(),
        "-lrshmem".into(),
    ]);
    compile_to(name, name, compiler, &after)
}

/// Compiles `tests/c/<name>.c` against rshmem.h into the program `bin` with `compiler`,
/// `after` (libraries) after the source.
fn compile_to(name: &str, bin: &str, compiler: &str, after: &[String]) -> PathBuf {
    let bin = out_dir().join(bin);
    cprog::stdout_of(
        Command::new(compiler)
            .args(["-std=c11", "-Wall", "-Wextra", "-Werror", "-O1"])
            .args(include_flags())
            .arg("-o")
            .arg(&bin)
            .arg(crate_dir().join("tests/c").join(format!("{name}.c")))
            .args(after),
        &format!("compiling {name}.c with {compiler} and {after:?}"),
    );
    bin
}

fn compile(name: &str) -> PathBuf {
    compile_with(name, &cc(), &[])
}

/// Runs `cmd` with `n` PEs under `rshmemrun` with the environment `env`.
fn run(cmd: &[&str], n: usize, env: &[(&str, &str)]) -> Ran {
    cprog::run(built(), cmd, n, env)
}

fn expect_ok(name: &str, r: &Ran, n: usize) {
    cprog::expect_ok(name, name, r, n);
}

/// Runs `name` with 2 and 4 PEs and expects "OK <name> PE p" from every PE.
fn passes(name: &str) {
    passes_env(name, &[]);
}

fn passes_env(name: &str, env: &[(&str, &str)]) {
    let bin = compile(name);
    for n in [2, 4] {
        let r = run(&[bin.to_str().expect("UTF-8 path")], n, env);
        expect_ok(name, &r, n);
    }
}

/// Runs `name` with 2 PEs and expects the job to fail with stderr naming `call` and `cause`.
fn aborts(name: &str, call: &str, cause: &str) {
    let bin = compile(name);
    let r = run(&[bin.to_str().expect("UTF-8 path")], 2, &[]);
    cprog::expect_abort(name, &r, 2, call, cause);
}

passing_programs! {
    init_memory_and_rma => "basics";
    atomics => "amo";
    signals_waits_and_tests => "signal";
    teams_and_host_collectives => "team";
    /// A failed split leaves `RSHMEM_TEAM_INVALID` in every output given: before init, with the
    /// other 2-D output NULL, and once the team slots run out.
    failed_split_sets_team_invalid => "team_full";
}

/// basics.c linked with librshmem.a instead of the shared library.
#[test]
fn static_library_links_and_runs() {
    let lib = built().join("librshmem.a");
    let mut after = vec![lib.display().to_string()];
    after.extend(["-lpthread", "-ldl", "-lm", "-lrt"].map(String::from));
    let bin = compile_to("basics", "basics_static", &cc(), &after);
    let r = run(&[bin.to_str().expect("UTF-8 path")], 2, &[]);
    expect_ok("basics", &r, 2);
}

/// Rank 0 makes the id and writes it to a file the others read.
#[test]
fn init_with_a_unique_id_passed_through_a_file() {
    let bin = compile("uid");
    for n in [2, 4] {
        let file = out_dir().join(format!("uid-{}-{n}.id", std::process::id()));
        let _ = std::fs::remove_file(&file);
        let r = run(
            &[
                bin.to_str().expect("UTF-8 path"),
                file.to_str().expect("UTF-8 path"),
            ],
            n,
            &[],
        );
        let _ = std::fs::remove_file(&file);
        expect_ok("uid", &r, n);
    }
}

#[test]
fn errors_return_codes_and_name_the_call() {
    let bin = compile("errors");
    let r = run(
        &[bin.to_str().expect("UTF-8 path")],
        2,
        &[("RSHMEM_BACKEND", "cpu")],
    );
    expect_ok("errors", &r, 2);
    for (call, cause) in [
        ("rshmem_finalize", "called before rshmem_init"),
        ("rshmem_malloc", "called before rshmem_init"),
        ("rshmemx_barrier_on_stream", "called before rshmem_init"),
        ("rshmem_get_uniqueid", "uid is NULL"),
        (
            "rshmem_init_attr",
            "set them with rshmem_set_attr_uniqueid_args",
        ),
        ("rshmem_init_attr", "unknown flags 0x100"),
        ("rshmem_init_attr", "attr->mpi_comm is NULL"),
        ("rshmem_init_attr", "MPI_Comm_rank is not in the process"),
        ("rshmem_init", "already initialized"),
        ("rshmemx_putmem_on_stream", "need the GPU backend"),
        ("rshmemx_int_sum_reduce_on_stream", "need the GPU backend"),
        ("rshmemx_barrier_all_on_stream", "need the GPU backend"),
        ("rshmemx_ep_create", "config is NULL"),
        ("rshmemx_ep_create", "config->dtype 7"),
        ("rshmemx_ep_create", "needs the GPU backend"),
        ("rshmemx_ep_dispatch_on_stream", "need the GPU backend"),
        ("rshmemx_ep_output", "ep is NULL"),
        ("rshmemx_ep_ll_dispatch_on_stream", "need the GPU backend"),
        ("rshmemx_ep_ll_output", "ep is NULL"),
        (
            "rshmemx_ep_create",
            "ep_new: hidden: 64 is not a multiple of 128",
        ),
        ("rshmemx_ep_dispatch_fp8_on_stream", "need the GPU backend"),
        (
            "rshmemx_ep_ll_dispatch_fp8_on_stream",
            "need the GPU backend",
        ),
        ("rshmemx_ep_output_scales", "ep is NULL"),
        ("rshmemx_ep_ll_output_scales", "ep is NULL"),
        ("rshmemx_ep_ll_per_pe", "ep is NULL"),
        ("rshmem_team_split_strided", "size 3 must be in 1..=2"),
        ("rshmem_team_split_strided", "team handle 42 names no team"),
        ("rshmem_team_get_config", "unknown bits"),
        ("rshmem_team_get_config", "config is NULL"),
        ("rshmem_align", "not a power of two"),
        ("rshmemx_cumodule_init", "called before rshmem_init"),
        ("rshmemx_buffer_register", "overlaps the registered buffer"),
        ("rshmemx_buffer_register", "addr is NULL"),
        ("rshmemx_buffer_register", "length is 0"),
        ("rshmemx_buffer_register", "symmetric memory"),
        ("rshmemx_buffer_unregister", "is not the start of a buffer"),
        (
            "rshmemx_buffer_register_symmetric",
            "called before rshmem_init",
        ),
        (
            "rshmemx_buffer_register_symmetric",
            "needs the GPU backend (this job runs on the CPU backend",
        ),
        ("rshmemx_buffer_register_symmetric", "flags is 1; only 0"),
        (
            "rshmemx_buffer_unregister_symmetric",
            "needs the GPU backend",
        ),
        (
            "rshmemx_cumodule_init",
            "not initialized on the GPU backend",
        ),
        (
            "rshmemx_cumodule_finalize",
            "not initialized on the GPU backend",
        ),
    ] {
        assert!(
            r.stderr.lines().any(|l| l.starts_with("rshmem: PE ")
                && l.contains(&format!("{call}: "))
                && l.contains(cause)),
            "no `rshmem: PE <pe>: {call}: ...{cause}...` line in stderr:\n{}",
            r.stderr
        );
    }
}

#[test]
fn bad_pe_ends_the_job_naming_the_call() {
    aborts("bad_pe", "rshmem_int_p", "PE 2 is out of range");
}

/// A typed put/get whose `count × element size` wraps ends the job naming the call and the
/// overflow; the blocking forms used to return normally after moving 8 bytes or none.
#[test]
fn typed_transfer_whose_extent_overflows_ends_the_job_naming_the_call() {
    cprog::expect_extent_overflow_aborts(built(), &compile("extent"), "rshmem_", &[]);
}

#[test]
fn call_before_init_ends_the_job_naming_it() {
    aborts(
        "before_init",
        "rshmem_barrier_all",
        "called before rshmem_init",
    );
}

#[test]
fn global_exit_ends_every_pe_with_the_status() {
    cprog::expect_global_exit(built(), &compile("global_exit"));
}

/// `rshmem_init_attr(RSHMEM_INIT_WITH_MPI_COMM)` under `mpirun` with 2 and 4 ranks: librshmem
/// finds MPI in the process (it does not link with it). Needs Open MPI (`mpicc`, `mpirun`):
/// without it the test says so on stderr and does nothing.
#[test]
fn init_with_an_mpi_communicator_under_mpirun() {
    let (Some(cflags), Some(ldflags)) = (cprog::mpicc_flags("compile"), cprog::mpicc_flags("link"))
    else {
        eprintln!(
            "init_with_an_mpi_communicator_under_mpirun: skipped: Open MPI's mpicc was not found"
        );
        return;
    };
    let mut extra = cflags;
    extra.extend(ldflags);
    let bin = compile_with("mpi_init", &cc(), &extra);
    for n in [2, 4] {
        let r = cprog::ran(cprog::mpirun(n).arg(&bin));
        cprog::expect_ok(&format!("mpi_init under mpirun -np {n}"), "mpi_init", &r, n);
    }
}

/// Compiles a file that includes only rshmem.h with `compiler` and `args`.
fn header_compiles(compiler: &str, ext: &str, args: &[&str]) {
    let src = out_dir().join(format!("header_only.{ext}"));
    std::fs::write(
        &src,
        "#include <rshmem.h>\nint main(void) { return rshmem_init() == RSHMEM_SUCCESS ? 0 : 1; }\n",
    )
    .expect("writing the header test");
    cprog::stdout_of(
        Command::new(compiler)
            .args(args)
            .args(include_flags())
            .arg("-fsyntax-only")
            .arg(&src),
        &format!("compiling rshmem.h alone with {compiler} {args:?}"),
    );
}

#[test]
fn header_compiles_as_c11() {
    header_compiles(
        &cc(),
        "c",
        &["-std=c11", "-Wall", "-Wextra", "-pedantic", "-Werror"],
    );
}

#[test]
fn header_compiles_as_cpp17() {
    let cxx = std::env::var("CXX").unwrap_or_else(|_| "c++".into());
    header_compiles(
        &cxx,
        "cpp",
        &["-std=c++17", "-Wall", "-Wextra", "-pedantic", "-Werror"],
    );
}

/// The calls `librshmem.so` exports: its defined dynamic text symbols (`nm -D`).
fn exported() -> BTreeSet<String> {
    cprog::exported_functions(&built().join("librshmem.so"))
}

/// The functions rshmem.h declares for a C compiler (inline functions and macros aside): the
/// names before the `(` of each top-level declaration of the preprocessed header.
fn declared() -> BTreeSet<String> {
    let src = out_dir().join("declared.c");
    std::fs::write(&src, "#include <rshmem.h>\n").expect("writing declared.c");
    let out = cprog::stdout_of(
        Command::new(cc())
            .args(["-std=c11", "-E", "-P"])
            .args(include_flags())
            .arg(&src),
        "preprocessing rshmem.h",
    );
    cprog::declared_functions(&out)
}

/// Exported by the runtime for the device library, which declares it (rshmem/state.cuh): the
/// nvcc translation units' state updaters register through it.
const DEVICE_LIB_SYMBOLS: [&str; 1] = ["rshmem_device_register_state_updater"];

#[test]
fn header_declares_exactly_the_exported_calls() {
    let decl = declared();
    let mut exp = exported();
    for s in DEVICE_LIB_SYMBOLS {
        assert!(
            exp.remove(s),
            "librshmem.so does not export {s}, which the device library calls"
        );
    }
    assert!(
        decl.contains("rshmem_int_put") && decl.contains("rshmemx_double_sum_reduce_on_stream"),
        "the header parser found too little: {} names",
        decl.len()
    );
    let undeclared: Vec<_> = exp.difference(&decl).collect();
    let missing: Vec<_> = decl.difference(&exp).collect();
    assert!(
        undeclared.is_empty() && missing.is_empty(),
        "exported by librshmem.so but not declared in rshmem.h: {undeclared:?}\n\
         declared but not exported: {missing:?}\n\
         (capi/core/src/types.rs (rshmem_*_types!) and the RSHMEM_FOR_* tables of rshmem/type_lists.h differ?)"
    );
}

/// A CUDA toolkit for the GPU programs: `CUDA_HOME` or `CUDA_PATH`, else the folder above the
/// `nvcc` on PATH, else /usr/local/cuda; `None` when it has no `include/cuda_runtime.h`.
fn cuda_root() -> Option<PathBuf> {
    let from_env = ["CUDA_HOME", "CUDA_PATH"]
        .iter()
        .find_map(|v| std::env::var_os(v).map(PathBuf::from));
    let from_nvcc = || {
        let out = Command::new("sh")
            .args(["-c", "command -v nvcc"])
            .output()
            .ok()?;
        let p = PathBuf::from(String::from_utf8_lossy(&out.stdout).trim());
        p.parent()?.parent().map(Path::to_path_buf)
    };
    let root = from_env
        .or_else(from_nvcc)
        .unwrap_or_else(|| PathBuf::from("/usr/local/cuda"));
    root.join("include/cuda_runtime.h")
        .is_file()
        .then_some(root)
}

/// The folder of the CUDA runtime libraries under `root` (lib64 or lib).
fn cuda_lib(root: &Path) -> PathBuf {
    let l64 = root.join("lib64");
    if l64.join("libcudart_static.a").is_file() {
        l64
    } else {
        root.join("lib")
    }
}

/// Builds `stream_gpu` (C with the CUDA runtime, linked statically with cudart) and
/// `collective_launch` (nvcc, no -rdc); `None` without a CUDA toolkit.
fn build_gpu_programs() -> Option<(PathBuf, PathBuf)> {
    let root = cuda_root()?;
    let lib = cuda_lib(&root);
    let stream = compile_with(
        "stream_gpu",
        &cc(),
        &[
            "-DRSHMEM_WITH_CUDA_RUNTIME".into(),
            format!("-I{}", root.join("include").display()),
            lib.join("libcudart_static.a").display().to_string(),
            "-ldl".into(),
            "-lpthread".into(),
            "-lrt".into(),
        ],
    );
    let nvcc = root.join("bin/nvcc");
    let launch = out_dir().join("collective_launch");
    cprog::stdout_of(
        Command::new(&nvcc)
            .args(["-std=c++17", "-arch=sm_90", "-Werror", "all-warnings"])
            .args(include_flags())
            .arg("-o")
            .arg(&launch)
            .arg(crate_dir().join("tests/c/collective_launch.cu"))
            .arg(format!("-L{}", lib.display()))
            .arg(format!("-L{}", built().display()))
            .args(["-Xlinker", "-rpath=$ORIGIN/..", "-lrshmem"]),
        "nvcc collective_launch.cu",
    );
    Some((stream, launch))
}

/// Builds the GPU programs (a CUDA toolkit is required), runs `name`, the one `pick` chooses,
/// with `n` PEs and expects `OK <name> PE <p>` from every PE.
fn gpu_program_passes(name: &str, pick: fn((PathBuf, PathBuf)) -> PathBuf, n: usize) -> Ran {
    let bin = pick(build_gpu_programs().expect("a CUDA toolkit (CUDA_HOME)"));
    let r = run(&[bin.to_str().expect("UTF-8 path")], n, &[]);
    expect_ok(name, &r, n);
    r
}

/// The GPU programs compile (C with the CUDA runtime; nvcc). Without a CUDA toolkit the test
/// says so on stderr and does nothing. Running them needs a GPU: see the ignored tests below.
#[test]
fn gpu_programs_build() {
    if build_gpu_programs().is_none() {
        eprintln!(
            "gpu_programs_build: skipped: no CUDA toolkit (set CUDA_HOME or put nvcc on PATH)"
        );
    }
}

/// The stream-ordered calls on the GPU backend (2 PEs; one GPU each, or one GPU under MPS).
#[test]
#[ignore = "needs a CUDA GPU and a CUDA toolkit"]
fn stream_calls_on_a_gpu() {
    gpu_program_passes("stream_gpu", |(stream, _)| stream, 2);
}

/// rshmemx_collective_launch on a GPU: a fitting grid runs (its kernel reads rshmem_my_pe()
/// through the device library), one block more is refused naming the call.
#[test]
#[ignore = "needs a CUDA GPU and a CUDA toolkit"]
fn collective_launch_on_a_gpu() {
    // One PE: a cooperative grid the size of the whole GPU (several PEs on one GPU under MPS
    // would compete for its SMs).
    let r = gpu_program_passes("collective_launch", |(_, launch)| launch, 1);
    assert!(
        r.stderr.contains("rshmemx_collective_launch: ") && r.stderr.contains("cannot be resident"),
        "no refusal naming rshmemx_collective_launch in stderr:\n{}",
        r.stderr
    );
}

/// `#define NAME value` lines of `text` whose NAME starts with one of `prefixes`.
fn defines(text: &str, prefixes: &[&str]) -> std::collections::BTreeMap<String, String> {
    text.lines()
        .filter_map(|l| {
            let mut w = l.split_whitespace();
            (w.next() == Some("#define")).then_some(())?;
            let name = w.next()?;
            let value: String = w.collect::<Vec<_>>().join(" ");
            (prefixes.iter().any(|p| name.starts_with(p)) && !value.is_empty())
                .then(|| (name.to_string(), value))
        })
        .collect()
}

/// The constants rshmem.h shares with the device library (team handles, comparisons, signal
/// operations, RSHMEM_SIZE_MAX) are defined once, in the device library's rshmem/type_lists.h,
/// which rshmem.h includes: no other header of either side defines one of them again (a second
/// copy could drift; the values themselves are checked against the runtime's codes by the
/// host/device contract and the rshmem-capi-core tests).
#[test]
fn constants_are_defined_once() {
    let prefixes = [
        "RSHMEM_CMP_",
        "RSHMEM_SIGNAL_",
        "RSHMEM_TEAM_",
        "RSHMEM_SIZE_MAX",
    ];
    let dev = workspace_root().join("device-lib/include/rshmem");
    let lists = std::fs::read_to_string(dev.join("type_lists.h")).expect("type_lists.h");
    let shared = defines(&lists, &prefixes);
    assert!(
        shared.len() >= 13,
        "too few constants found in rshmem/type_lists.h: {shared:?}"
    );
    let header = std::fs::read_to_string(include_dir().join("rshmem.h")).expect("rshmem.h");
    assert!(
        header.contains("#include \"rshmem/type_lists.h\""),
        "rshmem.h must include rshmem/type_lists.h"
    );
    let mut files = vec![include_dir().join("rshmem.h")];
    for dir in [dev, include_dir().join("nvshmem")] {
        for e in std::fs::read_dir(&dir).expect("a header folder") {
            files.push(e.expect("entry").path());
        }
    }
    for f in files.iter().filter(|f| !f.ends_with("type_lists.h")) {
        let text = std::fs::read_to_string(f).expect("a header");
        let again: Vec<_> = defines(&text, &prefixes)
            .into_keys()
            .filter(|k| shared.contains_key(k))
            .collect();
        assert!(
            again.is_empty(),
            "{} defines {again:?} again: they are defined once, in rshmem/type_lists.h",
            f.display()
        );
    }
}
