//! Builds the C programs in `tests/c/` against `shmem.h` and `libshmem` with `scripts/rshmemcc`
//! and runs each with 2 and 4 PEs under `rshmemrun`, checking exit status and output.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

#[path = "support/cprog.rs"]
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
    let dir = built();
    let out_dir = dir.join("capi-c-tests");
    std::fs::create_dir_all(&out_dir).expect("creating the C test directory");
    let src = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/c")
        .join(format!("{name}.c"));
    let bin = out_dir.join(name);
    let out = Command::new(workspace_root().join("scripts/rshmemcc"))
        .env("RSHMEM_LIB_DIR", dir)
        .args(["-std=c11", "-Wall", "-Wextra", "-Werror", "-O1"])
        .args(pre)
        .arg("-o")
        .arg(&bin)
        .arg(&src)
        .args(post)
        .output()
        .expect("running scripts/rshmemcc (is a C compiler installed?)");
    assert!(
        out.status.success(),
        "compiling {} failed:\n{}",
        src.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    bin
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

#[test]
fn setup_and_query() {
    passes("setup");
}

#[test]
fn memory() {
    passes("memory");
}

#[test]
fn rma() {
    passes("rma");
}

#[test]
fn atomics() {
    passes("amo");
}

#[test]
fn signals() {
    passes("signal");
}

#[test]
fn point_to_point_sync() {
    passes("sync");
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
fn teams() {
    passes("team");
}

/// A split that cannot make its team (no free team slot) returns non-zero with
/// `SHMEM_TEAM_INVALID` instead of ending the job; destroying teams frees slots again.
#[test]
fn failed_split_returns_team_invalid() {
    passes("team_full");
}

#[test]
fn collectives() {
    passes("coll");
}

#[test]
fn blocked_strided_rma() {
    passes("blocked");
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
fn scans() {
    passes("scan");
}

/// The small 1.6 routines and the ones that were inline in `shmem.h` (long double p/g, long
/// double and complex reductions, `shmem_pcontrol`), called through the library's symbols.
#[test]
fn openshmem_1_6_routines_and_former_inline_ones() {
    passes("v16");
}

#[test]
fn locks() {
    passes("lock");
}

#[test]
fn global_exit_ends_every_pe_with_the_status() {
    let bin = compile("global_exit");
    for n in [2, 4] {
        let r = run(&bin, n);
        assert_eq!(
            r.code,
            Some(3),
            "global_exit on {n} PEs:\n{}\n{}",
            r.stdout,
            r.stderr
        );
        assert!(
            !r.stdout.contains("NOT REACHED"),
            "a PE went on:\n{}",
            r.stdout
        );
    }
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
        let r = run_cmd(&[bin, "0", "0"], 4);
        assert!(
            r.code == Some(0) && !r.stderr.contains("is gone") && !r.stdout.contains("NOT REACHED"),
            "round {round}: global_exit(0) from PE 0 on 4 PEs ended {:?}:\n{}\n{}",
            r.code,
            r.stdout,
            r.stderr
        );
    }
}

/// PEs that block the exit signal (the real-time signals blocked in every thread) see PE 0 and
/// PE 1 leave while they hold the exit request pending: they end with its status (0), not with
/// "PE x is gone".
#[test]
fn global_exit_reaches_pes_that_block_its_signal() {
    let bin = compile("global_exit_blocked");
    let r = run(&bin, 4);
    assert!(
        r.code == Some(0) && !r.stderr.contains("is gone") && !r.stdout.contains("NOT REACHED"),
        "global_exit(0) with PEs 2 and 3 blocking the signal ended {:?}:\n{}\n{}",
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
    let dir = built().join("capi-c-tests");
    std::fs::create_dir_all(&dir).expect("creating the C test directory");
    let src = dir.join("headers.c");
    std::fs::write(&src, "#include <shmem.h>\n#include <pshmem.h>\n").expect("writing headers.c");
    let out = Command::new(workspace_root().join("scripts/rshmemcc"))
        .args(["-std=c11", "-E", "-P"])
        .arg(&src)
        .output()
        .expect("running scripts/rshmemcc -E");
    assert!(out.status.success(), "preprocessing the headers failed");
    cprog::declared_functions(&out.stdout)
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
    let dir = built();
    let out_dir = dir.join("capi-c-tests");
    std::fs::create_dir_all(&out_dir).expect("creating the C test directory");
    let c = |name: &str| {
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/c")
            .join(format!("{name}.c"))
    };
    let cc = |args: &[&str]| {
        let out = Command::new(workspace_root().join("scripts/rshmemcc"))
            .env("RSHMEM_LIB_DIR", dir)
            .args(["-std=c11", "-Wall", "-Wextra", "-Werror", "-O1"])
            .args(args)
            .output()
            .expect("running scripts/rshmemcc");
        assert!(
            out.status.success(),
            "compiling {args:?} failed:\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
    };
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
fn any_calls_return_every_satisfied_index() {
    passes("any_fair");
}

#[test]
fn team_contexts() {
    passes("team_ctx");
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
fn relro_stays_private_and_the_data_memfd_is_cloexec() {
    passes("relro");
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
    let bin = compile("extent");
    let bin = bin.to_str().expect("UTF-8 path");
    for (arg, call, elems, size) in [
        ("long_put", "shmem_long_put", "2305843009213693953", 8),
        ("long_put_huge", "shmem_long_put", "1152921504606846976", 8),
        ("int_put", "shmem_int_put", "4611686018427387904", 4),
        ("long_get", "shmem_long_get", "2305843009213693953", 8),
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
        (
            "long_put_nbi",
            "shmem_long_put_nbi",
            "2305843009213693953",
            8,
        ),
    ] {
        let r = run_cmd(&[bin, arg], 2);
        cprog::expect_abort(
            &format!("extent {arg}"),
            &r,
            2,
            call,
            &format!("transfer extent of {elems} elements of {size} bytes overflows"),
        );
    }
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
    let dir = built().join("capi-c-tests");
    let prefix = dir.join(format!("strace-{}", std::process::id()));
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
        let mut cmd = Command::new("timeout");
        cmd.args(["120", "mpirun", "--oversubscribe", "-np", &n.to_string()]);
        // SAFETY: getuid has no preconditions.
        if unsafe { libc::getuid() } == 0 {
            cmd.arg("--allow-run-as-root");
        }
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
        let out = cmd
            .arg(&bin)
            .env("OMPI_MCA_btl_vader_single_copy_mechanism", "none")
            .env_remove("RSHMEM_BOOTSTRAP_ADDR")
            .env_remove("RSHMEM_BOOTSTRAP_SECRET")
            .env_remove("RSHMEM_BOOTSTRAP")
            .env("RSHMEM_TIMEOUT", "60")
            .output()
            .expect("running mpirun");
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "hybrid_mpi under mpirun -np {n} (explicit address: {explicit}) exited with \
             {:?}\nstdout:\n{stdout}\nstderr:\n{}",
            out.status.code(),
            String::from_utf8_lossy(&out.stderr)
        );
        for pe in 0..n {
            let line = format!("OK hybrid_mpi PE {pe}");
            assert!(
                stdout.lines().any(|l| l == line),
                "no `{line}` in\n{stdout}"
            );
        }
    }
}
