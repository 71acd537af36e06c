//! Builds the C programs in `tests/c/` against `shmem.h` and `libshmem` with `scripts/rshmemcc`
//! and runs each with 2 and 4 PEs under `rshmemrun`, checking exit status and output.

use std::collections::BTreeSet;
use std::ffi::{OsStr, OsString};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

#[path = "support/cprog.rs"]
#[macro_use]
mod cprog;
use cprog::Ran;

fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("capi is inside the workspace")
        .to_path_buf()
}

/// Builds `libshmem` and `rshmemrun` into the profile directory (once per test binary), with
/// MPI when these tests were built with it.
fn built() -> &'static Path {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    let features = cfg!(feature = "mpi").then_some("rshmem-capi/mpi");
    DIR.get_or_init(|| cprog::build(&workspace_root(), "rshmem-capi", features, "libshmem.so"))
}

/// Compiles `tests/c/<name>.c` with `scripts/rshmemcc`.
fn compile(name: &str) -> PathBuf {
    compile_with(name, &[], &[])
}

/// Compiles `tests/c/<name>.c` with `scripts/rshmemcc`, `pre` before the source and `post`
/// after it.
fn compile_with(name: &str, pre: &[String], post: &[String]) -> PathBuf {
    let bin = c_out_dir().join(name);
    let mut args: Vec<OsString> = pre.iter().map(OsString::from).collect();
    args.extend(["-o".into(), bin.clone().into(), c_source(name).into()]);
    args.extend(post.iter().map(OsString::from));
    rshmemcc(&args);
    bin
}

/// `tests/c/<name>.c`.
fn c_source(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/c")
        .join(format!("{name}.c"))
}

/// Where the C programs are built (created): `capi-c-tests` in the profile directory.
fn c_out_dir() -> PathBuf {
    let d = built().join("capi-c-tests");
    std::fs::create_dir_all(&d).expect("creating the C test directory");
    d
}

/// Runs `scripts/rshmemcc` (with libshmem from the profile directory and the tests' warning
/// flags) with `args`; panics with the compiler's messages when it fails.
fn rshmemcc<S: AsRef<OsStr>>(args: &[S]) {
    let shown: Vec<_> = args.iter().map(|a| a.as_ref().to_string_lossy()).collect();
    cprog::stdout_of(
        Command::new(workspace_root().join("scripts/rshmemcc"))
            .env("RSHMEM_LIB_DIR", built())
            .args(["-std=c11", "-Wall", "-Wextra", "-Werror", "-O1"])
            .args(args),
        &format!("rshmemcc {shown:?}"),
    );
}

fn run(bin: &Path, n: usize) -> Ran {
    run_cmd(&[bin.to_str().expect("UTF-8 path")], n)
}

/// Runs `cmd` (program and arguments) with `n` PEs under `rshmemrun`.
fn run_cmd(cmd: &[&str], n: usize) -> Ran {
    cprog::run(built(), cmd, n, &[])
}

/// Runs `name` with 2 and 4 PEs and expects success and "OK <name> PE p" from every PE.
fn passes(name: &str) {
    let bin = compile(name);
    for n in [2, 4] {
        cprog::expect_ok(name, name, &run(&bin, n), n);
    }
}

/// Runs `name` with 2 and 4 PEs and expects the job to abort with stderr naming `call` and
/// containing `cause`.
fn aborts(name: &str, call: &str, cause: &str) {
    let bin = compile(name);
    for n in [2, 4] {
        let r = run(&bin, n);
        cprog::expect_abort(name, &r, n, call, cause);
    }
}

passing_programs! {
    setup_and_query => "setup";
    memory => "memory";
    rma => "rma";
    atomics => "amo";
    signals => "signal";
    point_to_point_sync => "sync";
    teams => "team";
    /// A split that cannot make its team (no free team slot) returns non-zero with
    /// `SHMEM_TEAM_INVALID` instead of ending the job; destroying teams frees slots again.
    failed_split_returns_team_invalid => "team_full";
    collectives => "coll";
    blocked_strided_rma => "blocked";
    scans => "scan";
    /// The small 1.6 routines and the ones that were inline in `shmem.h` (long double p/g, long
    /// double and complex reductions, `shmem_pcontrol`), called through the library's symbols.
    openshmem_1_6_routines_and_former_inline_ones => "v16";
    locks => "lock";
    any_calls_return_every_satisfied_index => "any_fair";
    team_contexts => "team_ctx";
    relro_stays_private_and_the_data_memfd_is_cloexec => "relro";
}

#[test]
fn bad_pe_aborts_naming_the_call() {
    aborts("bad_pe", "shmem_int_p", "out of range");
}

#[test]
fn non_symmetric_address_aborts_naming_the_call() {
    aborts(
        "not_symmetric",
        "shmem_long_put",
        "outside this PE's symmetric heap",
    );
}

#[test]
fn blocked_stride_below_the_block_size_aborts_naming_the_call() {
    aborts(
        "blocked_bad_stride",
        "shmem_int_ibput",
        "dst 2 is less than bsize 3",
    );
}

#[test]
fn negative_nreduce_aborts_naming_the_call() {
    aborts(
        "bad_nreduce",
        "shmem_int_sum_to_all",
        "nreduce -1 is negative",
    );
    aborts(
        "bad_nreduce_ld",
        "shmem_longdouble_sum_to_all",
        "nreduce -1 is negative",
    );
}

#[test]
fn global_exit_ends_every_pe_with_the_status() {
    cprog::expect_global_exit(built(), &compile("global_exit"));
}

/// PE 0 calls `shmem_global_exit(0)` on 4 PEs, many times over (the pattern of tests-sos's
/// `unit/global_exit`): a PE that sees another PE leave (on its way out after the exit signal)
/// before its own signal is handled must still end with status 0, not fail the job with "PE x is
/// gone" (status 1). The race shows about once in 25 runs with optimized libraries; the
/// deterministic form is the next test.
#[test]
fn global_exit_status_wins_over_peers_leaving() {
    let bin = compile("global_exit");
    let bin = bin.to_str().expect("UTF-8 path");
    for round in 0..30 {
        let what = format!("round {round}: global_exit(0) from PE 0 on 4 PEs");
        expect_clean_global_exit(&run_cmd(&[bin, "0", "0"], 4), &what);
    }
}

/// PEs that block the exit signal (the real-time signals blocked in every thread) see PE 0 and
/// PE 1 leave while they hold the exit request pending: they end with its status (0), not with
/// "PE x is gone".
#[test]
fn global_exit_reaches_pes_that_block_its_signal() {
    let r = run(&compile("global_exit_blocked"), 4);
    expect_clean_global_exit(&r, "global_exit(0) with PEs 2 and 3 blocking the signal");
}

/// A job ended by `shmem_global_exit(0)`: status 0, no PE reported another gone, none went on.
fn expect_clean_global_exit(r: &Ran, what: &str) {
    assert!(
        r.code == Some(0) && !r.stderr.contains("is gone") && !r.stdout.contains("NOT REACHED"),
        "{what} ended {:?}:\n{}\n{}",
        r.code,
        r.stdout,
        r.stderr
    );
}

/// The routines `libshmem.so` exports: its defined dynamic text symbols (`nm -D`), less the
/// runtime's entry for the device library's nvcc translation units
/// (`rshmem_device_register_state_updater`, declared in device-lib's rshmem/state.cuh), which
/// every library built on the runtime exports and no OpenSHMEM header declares.
fn exported_routines() -> BTreeSet<String> {
    let mut exported = cprog::exported_functions(&built().join("libshmem.so"));
    exported.remove("rshmem_device_register_state_updater");
    exported
}

/// The functions that `shmem.h` and `pshmem.h` declare (inline functions and macros aside):
/// the names before the `(` of each top-level declaration of the preprocessed headers.
fn declared_routines() -> BTreeSet<String> {
    let src = c_out_dir().join("headers.c");
    std::fs::write(&src, "#include <shmem.h>\n#include <pshmem.h>\n").expect("writing headers.c");
    let out = cprog::stdout_of(
        Command::new(workspace_root().join("scripts/rshmemcc"))
            .args(["-std=c11", "-E", "-P"])
            .arg(&src),
        "preprocessing shmem.h and pshmem.h",
    );
    cprog::declared_functions(&out)
}

#[test]
fn header_declares_exactly_the_exported_routines() {
    let exported = exported_routines();
    let declared = declared_routines();
    assert!(
        declared.contains("shmem_int_put") && declared.contains("pshmem_barrier_all"),
        "the header parser found too little: {declared:?}"
    );
    let undeclared: Vec<_> = exported.difference(&declared).collect();
    let missing: Vec<_> = declared.difference(&exported).collect();
    assert!(
        undeclared.is_empty() && missing.is_empty(),
        "exported by libshmem.so but not declared in shmem.h/pshmem.h: {undeclared:?}\n\
         declared but not exported: {missing:?}\n\
         (the tables of capi/gen.py and capi/src/typed.rs differ, or a header is stale: \
         python3 capi/gen.py)"
    );
}

#[test]
fn every_routine_has_a_profiling_twin() {
    let exported = exported_routines();
    let lacking: Vec<_> = exported
        .iter()
        .filter(|n| n.starts_with("shmem_") && !exported.contains(&format!("p{n}")))
        .collect();
    let orphans: Vec<_> = exported
        .iter()
        .filter(|n| n.starts_with("pshmem_") && !exported.contains(&n[1..]))
        .collect();
    assert!(
        exported.len() > 3000 && lacking.is_empty() && orphans.is_empty(),
        "shmem_ routines without pshmem_ (add them to capi/src/profiling.rs): {lacking:?}\n\
         pshmem_ without shmem_: {orphans:?}"
    );
}

/// Runs `profiling.c` with `profiling_tool.c`'s library found before libshmem: linked before
/// it, and preloaded; the tool must see and forward every call. Without the tool the program
/// must notice.
#[test]
fn profiling_tool_interposes_shmem_routines() {
    let out_dir = c_out_dir();
    let c = c_source;
    let cc = |args: &[&str]| rshmemcc(args);
    let tool = out_dir.join("libprofiling_tool.so");
    let tool_s = tool.to_str().expect("UTF-8 path");
    cc(&[
        "-shared",
        "-fPIC",
        "-o",
        tool_s,
        c("profiling_tool").to_str().expect("UTF-8"),
    ]);
    let linked = out_dir.join("profiling_linked");
    let plain = out_dir.join("profiling");
    let src = c("profiling");
    let src_s = src.to_str().expect("UTF-8 path");
    let dir_s = out_dir.to_str().expect("UTF-8 path");
    cc(&[
        "-o",
        linked.to_str().expect("UTF-8"),
        src_s,
        "-L",
        dir_s,
        &format!("-Wl,-rpath,{dir_s}"),
        "-lprofiling_tool",
    ]);
    cc(&["-o", plain.to_str().expect("UTF-8"), src_s]);
    let preload = format!("LD_PRELOAD={tool_s}");
    for (how, cmd) in [
        (
            "linked before libshmem",
            vec![linked.to_str().expect("UTF-8")],
        ),
        (
            "LD_PRELOAD",
            vec!["env", &preload, plain.to_str().expect("UTF-8")],
        ),
    ] {
        for n in [2, 4] {
            let r = run_cmd(&cmd, n);
            cprog::expect_ok(&format!("profiling ({how})"), "profiling", &r, n);
        }
    }
    let r = run_cmd(&[plain.to_str().expect("UTF-8")], 2);
    assert!(
        !r.ok && r.stderr.contains("the profiling tool is not loaded"),
        "profiling without the tool should fail:\n{}\n{}",
        r.stdout,
        r.stderr
    );
}

#[test]
fn pe_outside_a_contexts_team_aborts_naming_the_call() {
    aborts(
        "team_ctx_bad_pe",
        "shmem_ctx_int_p",
        "out of range: the context's team has 1 PEs",
    );
}

#[test]
fn put_into_a_peers_dynamic_section_aborts_naming_the_call() {
    aborts("relro_put", "shmem_putmem", "PT_GNU_RELRO");
}

#[test]
fn put_past_the_end_of_a_global_aborts_naming_the_call() {
    aborts(
        "overrun",
        "shmem_int_put",
        "runs past the end of the symmetric variable `a`",
    );
}

/// A typed put/get whose `count × element size` wraps (or exceeds `isize::MAX` bytes) ends the
/// job naming the call and the overflow, in every form: the blocking ones used to return
/// normally after moving 8 bytes or none.
#[test]
fn typed_transfer_whose_extent_overflows_aborts_naming_the_call() {
    cprog::expect_extent_overflow_aborts(
        built(),
        &compile("extent"),
        "shmem_",
        &[
            ("long_put_huge", "shmem_long_put", "1152921504606846976", 8),
            (
                "long_put_signal",
                "shmem_long_put_signal",
                "2305843009213693953",
                8,
            ),
            (
                "ctx_long_put",
                "shmem_ctx_long_put",
                "2305843009213693953",
                8,
            ),
            ("put64", "shmem_put64", "2305843009213693953", 8),
        ],
    );
}

/// A fatal message is one `write(2)`: two PEs failing at once never interleave their lines
/// (libshmem wrote each line in 7 pieces). Checked with `strace` (skipped without it): the
/// failing PE writes the whole line `rshmem: PE 0: shmem_long_put: …; aborting the job\n` in
/// one call.
#[test]
fn fatal_message_is_one_write() {
    if Command::new("strace").arg("-V").output().is_err() {
        eprintln!("SKIPPED: no strace here");
        return;
    }
    let bin = compile("extent");
    let prefix = c_out_dir().join(format!("strace-{}", std::process::id()));
    let prefix_s = prefix.to_str().expect("UTF-8 path");
    let r = run_cmd(
        &[
            "strace",
            "-f",
            "-qq",
            "-s",
            "1024",
            "-e",
            "trace=write",
            "-o",
            prefix_s,
            bin.to_str().expect("UTF-8 path"),
            "long_put",
        ],
        1,
    );
    let trace = std::fs::read_to_string(&prefix).unwrap_or_default();
    let _ = std::fs::remove_file(&prefix);
    assert!(!r.ok, "the program must fail:\n{}", r.stderr);
    let pieces: Vec<&str> = trace.lines().filter(|l| l.contains("write(2, ")).collect();
    assert!(
        pieces.iter().any(|l| l.contains(
            "rshmem: PE 0: shmem_long_put: transfer extent of 2305843009213693953 elements of 8 bytes overflows; aborting the job\\n\""
        )),
        "the fatal line was not written in one piece; writes to stderr:\n{}",
        pieces.join("\n")
    );
}

/// A hybrid MPI + OpenSHMEM program (`MPI_Init`, then `shmem_init`) under `mpirun` with 2 and
/// 4 ranks: PE numbers are MPI ranks and both libraries work. libshmem built with the `mpi`
/// feature bootstraps through `MPI_COMM_WORLD`; the default build through the program's MPI
/// found at run time with nothing set (which must leave MPI initialized for the program), and
/// through TCP with the address and secret passed by `mpirun -x`. Needs Open MPI (`mpicc`,
/// `mpirun`): without it the test says so on stderr and does nothing.
#[test]
fn hybrid_mpi_program_under_mpirun() {
    let (Some(cflags), Some(ldflags)) = (cprog::mpicc_flags("compile"), cprog::mpicc_flags("link"))
    else {
        eprintln!("hybrid_mpi_program_under_mpirun: skipped: Open MPI's mpicc was not found");
        return;
    };
    let bin = compile_with("hybrid_mpi", &cflags, &ldflags);
    let explicit = if cfg!(feature = "mpi") {
        vec![false]
    } else {
        vec![false, true]
    };
    for (n, explicit) in [2, 4]
        .into_iter()
        .flat_map(|n| explicit.iter().map(move |&e| (n, e)))
    {
        let mut cmd = cprog::mpirun(n);
        if explicit {
            let port = std::net::TcpListener::bind("127.0.0.1:0")
                .and_then(|l| l.local_addr())
                .expect("a free port")
                .port();
            let mut key = [0u8; 16];
            std::io::Read::read_exact(
                &mut std::fs::File::open("/dev/urandom").expect("opening /dev/urandom"),
                &mut key,
            )
            .expect("reading /dev/urandom");
            let secret: String = key.iter().map(|b| format!("{b:02x}")).collect();
            cmd.args(["-x", &format!("RSHMEM_BOOTSTRAP_ADDR=127.0.0.1:{port}")]);
            cmd.args(["-x", &format!("RSHMEM_BOOTSTRAP_SECRET={secret}")]);
        }
        let r = cprog::ran(
            cmd.arg(&bin)
                .env_remove("RSHMEM_BOOTSTRAP_ADDR")
                .env_remove("RSHMEM_BOOTSTRAP_SECRET")
                .env_remove("RSHMEM_BOOTSTRAP"),
        );
        let what = format!("hybrid_mpi under mpirun -np {n} (explicit address: {explicit})");
        cprog::expect_ok(&what, "hybrid_mpi", &r, n);
    }
}
