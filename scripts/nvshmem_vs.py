#!/usr/bin/env python3
"""NVSHMEM's perftests side by side: NVSHMEM itself against rshmem, from the same source.

Called by `scripts/nvshmem-compat-check --vs-nvshmem NVSHMEM_PREFIX NVSHMEM_SRC [options]`
(see --help there, or `python3 scripts/nvshmem_vs.py --help`).

Every perftest that NVSHMEM's perftest/ CMake lists name (nvshmem_add_perftest) is built twice
with nvcc: once against NVSHMEM (NVSHMEM_PREFIX/include, -rdc=true, -lnvshmem_device
-l:libnvshmem_host.so.3; `auto` takes the nvidia-nvshmem wheel of this Python) and once against
rshmem's compatibility headers and librshmem.so. Both are built with -DNVSHMEMTEST_MPI_SUPPORT:
the NVSHMEM build runs under `mpirun -np N -x NVSHMEMTEST_USE_MPI_LAUNCHER=1` (NVSHMEM's MPI
start-up in perftest/common/utils.cu; there is no nvshmrun), the rshmem build under `rshmemrun -n
N`. Every line of each program's .args file (one run with no arguments when the file is missing
or empty) runs with both libraries in two rounds: NVSHMEM first in round 1, rshmem first in round
2. Point-to-point programs (a pt-to-pt folder) run on 2 PEs, the others on --np (default 4).

`--libs rshmem` builds and runs the rshmem side alone (no NVSHMEM install, no mpirun): every
.args line once (round 1; --round 2|both repeats it), a PASS/FAIL line per run, and a table of
the numbers without ratios. The rshmem build keeps a copy of librshmem.so and rshmemrun in
BUILD/lib, which the programs find through their rpath $ORIGIN/../../lib, so BUILD can be carried
to another machine; at run time --lib DIR uses another librshmem.so and rshmemrun. `--mps` starts
a CUDA MPS daemon of the script's own (scripts/cuda-mps) for the runs and stops it at the end, so
that several PEs share one GPU.

Every run has NVSHMEM_DISABLE_NVLS=1 NCCL_NVLS_ENABLE=0 (no NVLink multicast) and
NVSHMEM_MACHINE_READABLE_OUTPUT=1, which makes the perftests print each result as
`&&&& PERF <job>___<subjob>___size__<bytes>___<metric> <value> <+|-><units>` (perftest/common/
utils.cu, print_table_*; `+`: higher is better, `-`: lower is better). The ratio of a row is
NVSHMEM time / rshmem time, or rshmem bandwidth / NVSHMEM bandwidth: above 1 rshmem is faster.
A run that fails (exit status, timeout, no result) is a FAIL line with its log, never dropped.
Every run has a time limit (--timeout, 60 s); its processes are ended when it passes.

Outputs (--out DIR): runs.jsonl (one line per run), results.jsonl (one line per row and round),
side-by-side.md (the ratio table: per program, args line, table and size, both rounds, and the
geometric mean per table) or, with one library, results.md (every run's status and the numbers
per program, args line, table and size), logs/ (every run's output). Exit status: 0, 1 when a
run failed, 3 when --deadline left runs for --resume, 2 for bad arguments.
"""
import argparse
import concurrent.futures
import datetime
import json
import math
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
T_START = time.time()  # --deadline counts from here (the build included)
RUN_ENV = {"NVSHMEM_DISABLE_NVLS": "1", "NCCL_NVLS_ENABLE": "0",
           "NVSHMEM_MACHINE_READABLE_OUTPUT": "1"}
LIBS = ("nvshmem", "rshmem")


# How messages are prefixed (scripts/nvshmem_cmake.py, which shares the build helpers, sets its own).
TOOL = "nvshmem-compat-check --vs-nvshmem"


def die(msg):
    print(f"{TOOL}: {msg}", file=sys.stderr)
    sys.exit(2)


def note(msg):
    print(f"{TOOL}: {msg}", flush=True)


# ------------------------------------------------------------------------------------------
# NVSHMEM's perftest output (perftest/common/utils.cu, print_table_basic/_v1/_v2 with
# NVSHMEM_MACHINE_READABLE_OUTPUT=1):
#   printf("&&&& PERF %s___%s___size__%lu___%s %lf %c%s\n", job_name, subjob_name, size,
#          output_var, value, plus_minus, units);
# Each table starts with a line holding the job name alone.
PERF_RE = re.compile(r"^&&&& PERF (?P<key>\S.*?) (?P<value>[-+0-9.eEinfa]+) (?P<dir>[-+])(?P<units>\S*)\s*$")


def parse_perf(text):
    """Rows of one run's output: [(job, subjob, size, metric, value, better, units)].

    better is "lower" or "higher". A row printed again in the same output (several PEs that
    print, or a table printed twice) is kept once: the first.
    """
    rows, seen = [], set()
    for line in text.splitlines():
        m = PERF_RE.match(line.rstrip("\r"))
        if not m:
            continue
        parts = m.group("key").split("___")
        # job ___ subjob ___ size__N ___ metric; a job or subjob may hold single underscores.
        if len(parts) < 4 or not parts[-2].startswith("size__"):
            continue
        try:
            size = int(parts[-2][len("size__"):])
            value = float(m.group("value"))
        except ValueError:
            continue
        job, subjob, metric = parts[0], "___".join(parts[1:-2]), parts[-1]
        key = (job, subjob, size, metric)
        if key in seen:
            continue
        seen.add(key)
        better = "higher" if m.group("dir") == "+" else "lower"
        rows.append((job, subjob, size, metric, value, better, m.group("units")))
    return rows


def ratio(nv, rs, better):
    """NVSHMEM time / rshmem time, or rshmem bandwidth / NVSHMEM bandwidth (None: undefined)."""
    if not (nv > 0 and rs > 0) or math.isinf(nv) or math.isinf(rs):
        return None
    return nv / rs if better == "lower" else rs / nv


def geomean(xs):
    xs = [x for x in xs if x and x > 0]
    return math.exp(sum(math.log(x) for x in xs) / len(xs)) if xs else None


# ------------------------------------------------------------------------------------------
# The perftests: what NVSHMEM's perftest CMake lists name.
ADD_RE = re.compile(r"^\s*nvshmem_add_perftest\(\s*([A-Za-z0-9_.\-]+)\s*\)", re.M)


def discover(src):
    progs = []
    top = os.path.join(src, "perftest")
    for dirpath, dirnames, filenames in os.walk(top):
        dirnames.sort()
        if "CMakeLists.txt" not in filenames or dirpath == top:
            continue
        with open(os.path.join(dirpath, "CMakeLists.txt")) as f:
            for name in ADD_RE.findall(f.read()):
                path = os.path.join(dirpath, name)
                if not os.path.isfile(path):
                    continue
                rel = os.path.relpath(path, top)
                base = os.path.splitext(name)[0]
                args_path = os.path.splitext(path)[0] + ".args"
                lines = []
                if os.path.isfile(args_path):
                    with open(args_path) as a:
                        lines = [ln.strip() for ln in a.read().splitlines() if ln.strip()]
                progs.append({"name": base, "src": path, "rel": rel,
                              "p2p": "pt-to-pt" in rel.split(os.sep),
                              "args": lines or [""], "has_args_file": os.path.isfile(args_path)})
    names = [p["name"] for p in progs]
    dups = {n for n in names if names.count(n) > 1}
    for p in progs:  # perf_device_X / perf_host_X, as NVSHMEM's CMake names its targets
        if p["name"] in dups:
            p["name"] = ("host_" if p["rel"].startswith("host") else "device_") + p["name"]
    return progs


# ------------------------------------------------------------------------------------------
# Build
def find_nvcc(explicit):
    for c in [explicit, os.environ.get("NVCC"), "/usr/local/cuda/bin/nvcc", shutil.which("nvcc")]:
        if c and os.path.isfile(c) and os.access(c, os.X_OK):
            return os.path.abspath(c)
    try:
        d = subprocess.run([os.path.join(ROOT, "scripts/install-nvcc")], capture_output=True,
                           text=True, check=True).stdout.strip().splitlines()[-1]
        if os.path.isfile(os.path.join(d, "nvcc")):
            return os.path.join(d, "nvcc")
    except (OSError, subprocess.CalledProcessError, IndexError):
        pass
    die("no nvcc (pass --nvcc, set NVCC, or put nvcc on PATH)")


def find_nvml_include(nvcc, build):
    inc = os.path.join(os.path.dirname(os.path.dirname(nvcc)), "include")
    for d in [inc, os.environ.get("CUDA_HOME", "") + "/include", "/usr/local/cuda/include",
              os.path.join(build, "pip/nvidia/cu13/include")]:
        if os.path.isfile(os.path.join(d, "nvml.h")):
            return d
    note(f"installing nvml.h (pip: nvidia-nvml-dev) into {build}/pip")
    subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--disable-pip-version-check",
                    "--target", os.path.join(build, "pip"), "nvidia-nvml-dev==13.*"], check=False)
    for dirpath, _, files in os.walk(os.path.join(build, "pip")):
        if "nvml.h" in files:
            return dirpath
    die("no nvml.h (the perftests include it): CUDA toolkit without it and pip failed")


def find_mpi_include(explicit):
    cands = [explicit] if explicit else []
    if shutil.which("mpicxx"):
        try:
            out = subprocess.run(["mpicxx", "--showme:incdirs"], capture_output=True, text=True,
                                 check=True).stdout.split()
            cands += out
        except (OSError, subprocess.CalledProcessError):
            pass
    cands += ["/usr/lib/x86_64-linux-gnu/openmpi/include", "/usr/include/openmpi",
              "/usr/local/ompi/include", "/usr/include/x86_64-linux-gnu/openmpi/include"]
    for d in cands:
        if d and os.path.isfile(os.path.join(d, "mpi.h")):
            return d
    die("no mpi.h (the perftests' MPI start-up, -DNVSHMEMTEST_MPI_SUPPORT, needs Open MPI's "
        "header: install libopenmpi-dev, or pass --mpi-include DIR with a copy of Open MPI's "
        "include folder)")


def cuda_stub_dir(nvcc, build):
    """-L folder with libcuda.so for linking (the programs load the driver's at run time)."""
    top = os.path.dirname(os.path.dirname(nvcc))
    for d in [os.path.join(top, "lib64/stubs"), os.path.join(top, "lib/stubs"),
              "/usr/local/cuda/lib64/stubs"]:
        if os.path.isfile(os.path.join(d, "libcuda.so")):
            return d
    for d in ["/usr/lib/x86_64-linux-gnu", "/usr/lib64", "/usr/lib"]:
        if os.path.isfile(os.path.join(d, "libcuda.so")):
            return d
    # No driver and no toolkit stub (a build-only machine): a stub made from cuda.h.
    stub = os.path.join(build, "stub")
    os.makedirs(stub, exist_ok=True)
    pre = subprocess.run(["cc", "-E", "-I" + os.path.join(top, "include"), "-x", "c", "-"],
                         input="#include <cuda.h>\n", capture_output=True, text=True)
    names = sorted(set(re.findall(r"\b(cu[A-Z][A-Za-z0-9_]*)\s*\(", pre.stdout)))
    if not names:
        die("cannot make a libcuda stub (no cuda.h?)")
    with open(os.path.join(stub, "libcuda_stub.c"), "w") as f:
        f.writelines(f"void {n}(void) {{}}\n" for n in names)
    subprocess.run(["cc", "-shared", "-fPIC", "-Wl,-soname,libcuda.so.1", "-o",
                    os.path.join(stub, "libcuda.so"), os.path.join(stub, "libcuda_stub.c")], check=True)
    return stub


def nvshmem_prefix(arg):
    if arg != "auto":
        return os.path.abspath(arg)
    try:
        import nvidia.nvshmem  # noqa: F401 (the nvidia-nvshmem-cu13 wheel)
        return os.path.abspath(list(nvidia.nvshmem.__path__)[0])
    except ImportError:
        die("--vs-nvshmem auto: this Python has no nvidia.nvshmem (pip install nvidia-nvshmem-cu13)")


def run_cmd(cmd, log, **kw):
    """Runs cmd with its output appended to log after the command line; True when it exits 0.
    kw goes to subprocess.run (cwd, env)."""
    with open(log, "a") as f:
        f.write("$ " + " ".join(shlex.quote(c) for c in cmd) + "\n")
        f.flush()
        return subprocess.run(cmd, stdout=f, stderr=subprocess.STDOUT, **kw).returncode == 0


def copy_stripped(src, dst):
    """Copies src (links followed) to dst without its debug information, which a program or
    library carried to another machine does not need (a release build with it is tens of MB)."""
    shutil.copy2(os.path.realpath(src), dst + ".tmp")
    subprocess.run(["strip", "--strip-debug", dst + ".tmp"], check=False,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    os.replace(dst + ".tmp", dst)


def build(a, progs):
    nvcc = find_nvcc(a.nvcc)
    os.makedirs(a.build, exist_ok=True)
    blog = os.path.join(a.build, "build-logs")
    os.makedirs(blog, exist_ok=True)
    nvml = find_nvml_include(nvcc, a.build)
    mpi = find_mpi_include(a.mpi_include)
    stub = cuda_stub_dir(nvcc, a.build)
    nv = nv_lib = host_so = None
    if "nvshmem" in a.libs:
        nv = nvshmem_prefix(a.vs_nvshmem)
        nv_lib = os.path.join(nv, "lib")
        for need in [os.path.join(nv, "include/nvshmem.h"), os.path.join(nv_lib, "libnvshmem_device.a")]:
            if not os.path.isfile(need):
                die(f"NVSHMEM at {nv} has no {os.path.relpath(need, nv)}")
        host_so = "libnvshmem_host.so" if os.path.isfile(os.path.join(nv_lib, "libnvshmem_host.so")) \
            else "libnvshmem_host.so.3"
    lib = bld_lib = None
    if "rshmem" in a.libs:
        lib = a.lib or next((os.path.join(ROOT, "target", p) for p in ("release", "debug")
                             if os.path.isfile(os.path.join(ROOT, "target", p, "librshmem.so"))), None)
        if not lib or not os.path.isfile(os.path.join(lib, "librshmem.so")):
            die("no librshmem.so (cargo build --release -p rshmem-c -p rshmem-bootstrap, or pass --lib DIR)")
        lib = os.path.abspath(lib)
        # A copy in BUILD/lib, with rshmemrun, that the programs find through their rpath
        # $ORIGIN/../../lib: the build folder can be carried to another machine as a whole.
        bld_lib = os.path.join(a.build, "lib")
        os.makedirs(bld_lib, exist_ok=True)
        run = a.rshmemrun or os.path.join(lib, "rshmemrun")
        for f in [os.path.join(lib, "librshmem.so")] + ([run] if os.path.isfile(run) else []):
            copy_stripped(f, os.path.join(bld_lib, os.path.basename(f)))
        if not os.path.isfile(run):
            note(f"no rshmemrun next to {lib}: runs need --rshmemrun or rshmemrun on PATH")
    # The perftests reach MPI through dlopen (utils.cu) and need only mpi.h's C declarations:
    # no C++ bindings (Open MPI's would need libmpi_cxx at link time).
    common = [f"-arch={a.arch}", "-std=c++17", "-O3", "-DNVSHMEMTEST_MPI_SUPPORT",
              "-DOMPI_SKIP_MPICXX", "-DMPICH_SKIP_MPICXX",
              "-I" + nvml, "-I" + mpi, "-I" + os.path.join(a.src, "perftest/common")]
    flags = {
        "nvshmem": (common + ["-rdc=true", "-I" + os.path.join(nv, "include")],
                    ["-rdc=true", "-L" + nv_lib, "-lnvshmem_device", "-l:" + host_so,
                     "-Xlinker", "-rpath=" + nv_lib]) if nv else None,
        "rshmem": (common + ["-I" + os.path.join(ROOT, "capi/include/nvshmem"),
                             "-I" + os.path.join(ROOT, "capi/include"),
                             "-I" + os.path.join(ROOT, "device-lib/include"),
                             # Calls rshmem lacks, on paths the .args lines do not take (--mmap,
                             # cubin mode) compile and, if reached, end the run with a message.
                             "-DRSHMEM_NVSHMEM_UNSUPPORTED_ABORTS"],
                   ["-L" + bld_lib, "-lrshmem", "-Xlinker", "-rpath=$ORIGIN/../../lib"]) if lib else None,
    }
    flags = {k: v for k, v in flags.items() if v}
    if a.rshmem_rdc and "rshmem" in flags:
        flags["rshmem"][0].append("-rdc=true")
        flags["rshmem"][1][:0] = ["-rdc=true", os.path.abspath(a.rshmem_rdc)]
    with open(os.path.join(a.build, "BUILD-INFO.json"), "w") as f:
        json.dump({"nvcc": nvcc, "libs": list(a.libs), "nvshmem": nv, "librshmem": lib,
                   "librshmem_copy": bld_lib, "src": a.src, "arch": a.arch,
                   "rshmem_commit": git_describe(), "flags": flags,
                   "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")}, f, indent=1)

    def compile_one(libname, src, obj, log):
        os.makedirs(os.path.dirname(obj), exist_ok=True)
        return run_cmd([nvcc] + flags[libname][0] + ["-c", src, "-o", obj], log)

    def one(libname, p):
        log = os.path.join(blog, f"{libname}-{p['name']}.log")
        open(log, "w").close()
        obj = os.path.join(a.build, "obj", libname, p["name"] + ".o")
        ok = compile_one(libname, p["src"], obj, log)
        if ok:
            util = os.path.join(a.build, "obj", libname, "utils.o")
            exe = os.path.join(a.build, "bin", libname, p["name"])
            os.makedirs(os.path.dirname(exe), exist_ok=True)
            ok = run_cmd([nvcc, f"-arch={a.arch}", obj, util, "-o", exe] + flags[libname][1] +
                         ["-L" + stub, "-lcuda", "-ldl"], log)
        return libname, p["name"], ok, log

    t0 = time.time()
    util_ok = {}
    with concurrent.futures.ThreadPoolExecutor(max_workers=2) as ex:
        futs = {}
        for libname in a.libs:
            log = os.path.join(blog, f"{libname}-utils.log")
            open(log, "w").close()
            futs[ex.submit(compile_one, libname, os.path.join(a.src, "perftest/common/utils.cu"),
                           os.path.join(a.build, "obj", libname, "utils.o"), log)] = libname
        for fut in concurrent.futures.as_completed(futs):
            util_ok[futs[fut]] = fut.result()
    results = []
    with concurrent.futures.ThreadPoolExecutor(max_workers=a.jobs) as ex:
        futs = [ex.submit(one, libname, p) for p in progs for libname in a.libs if util_ok[libname]]
        for fut in concurrent.futures.as_completed(futs):
            results.append(fut.result())
    for libname in a.libs:
        if not util_ok[libname]:
            for p in progs:
                results.append((libname, p["name"], False, os.path.join(blog, f"{libname}-utils.log")))
    built = {(l, n) for l, n, ok, _ in results if ok}
    # What earlier builds into this folder made (other --only sets) stays listed.
    done = {p["name"] for p in progs}
    built_all = set(built) | {b for b in load_built(a.build) if b[1] not in done or b[0] not in a.libs}
    save_built(a.build, built_all)
    for l, n, ok, log in sorted(results):
        if not ok:
            print(f"BUILD FAIL {l} {n}: {first_error(log)} (log: {log})")
    note(f"built {len(built)} of {len(a.libs) * len(progs)} programs in {time.time() - t0:.0f} s "
         f"({a.jobs} at a time) into {a.build}/bin/{{{','.join(a.libs)}}}")
    return built


def save_built(build, built):
    """Writes BUILD/bin/BUILT.json: the (library, program) pairs built there."""
    os.makedirs(os.path.join(build, "bin"), exist_ok=True)
    with open(os.path.join(build, "bin", "BUILT.json"), "w") as f:
        json.dump({"built": sorted(f"{l}/{n}" for l, n in built)}, f)


def load_built(build):
    try:
        with open(os.path.join(build, "bin", "BUILT.json")) as f:
            return {tuple(x.split("/", 1)) for x in json.load(f)["built"]}
    except (OSError, ValueError, KeyError):
        return set()


def first_error(log):
    try:
        with open(log, errors="replace") as f:
            for line in f:
                if re.search(r"error|undefined reference|not supported", line, re.I):
                    return line.strip()[:200]
    except OSError:
        pass
    return "see log"


def git_describe():
    try:
        return subprocess.run(["git", "-C", ROOT, "describe", "--always", "--dirty"],
                              capture_output=True, text=True).stdout.strip() or "unknown"
    except OSError:
        return "unknown"


# ------------------------------------------------------------------------------------------
# Run
def kill_group(proc):
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(timeout=5)
            return
        except subprocess.TimeoutExpired:
            continue


def launch(a, libname, prog, args, np_, log):
    exe = os.path.join(a.build, "bin", libname, prog["name"])
    argv = shlex.split(args)
    env = dict(os.environ, **RUN_ENV)
    if libname == "nvshmem":
        cmd = ["mpirun", "-np", str(np_), "--oversubscribe"]
        if os.getuid() == 0:
            cmd.append("--allow-run-as-root")
        env["NVSHMEMTEST_USE_MPI_LAUNCHER"] = "1"
        # NVSHMEM opens its bootstrap plugin (nvshmem_bootstrap_mpi.so.3) by name.
        if a.nv_lib_for_run:
            env["LD_LIBRARY_PATH"] = a.nv_lib_for_run + (
                ":" + env["LD_LIBRARY_PATH"] if env.get("LD_LIBRARY_PATH") else "")
        env.setdefault("OMPI_MCA_btl_vader_single_copy_mechanism", "none")
        for k in list(RUN_ENV) + ["NVSHMEMTEST_USE_MPI_LAUNCHER", "LD_LIBRARY_PATH",
                                  "OMPI_MCA_btl_vader_single_copy_mechanism", "CUDA_MPS_PIPE_DIRECTORY"]:
            if k in env:
                cmd += ["-x", k]
        cmd += [exe] + argv
    else:
        lib_dir = os.path.dirname(a.lib_for_run)
        run = a.rshmemrun or (os.path.join(lib_dir, "rshmemrun")
                              if os.path.isfile(os.path.join(lib_dir, "rshmemrun"))
                              else shutil.which("rshmemrun") or os.path.join(lib_dir, "rshmemrun"))
        # The library the run reports (and --lib names) wins over the programs' rpath.
        env["LD_LIBRARY_PATH"] = lib_dir + (":" + env["LD_LIBRARY_PATH"] if env.get("LD_LIBRARY_PATH") else "")
        env.setdefault("RSHMEM_TIMEOUT", str(max(10, a.timeout - 5)))
        cmd = [run, "-n", str(np_), exe] + argv
    t0 = time.time()
    with open(log, "w") as f:
        f.write("$ " + " ".join(shlex.quote(c) for c in cmd) + "\n")
        f.flush()
        try:
            proc = subprocess.Popen(cmd, stdout=f, stderr=subprocess.STDOUT, env=env,
                                    start_new_session=True)
        except OSError as e:
            f.write(f"cannot start: {e}\n")
            return "FAIL", f"cannot start {cmd[0]}: {e}", 0.0
        try:
            rc = proc.wait(timeout=a.timeout)
        except subprocess.TimeoutExpired:
            kill_group(proc)
            return "FAIL", f"timed out after {a.timeout} s", time.time() - t0
        except BaseException:  # a signal (sys.exit) or ^C: end the run's processes too
            kill_group(proc)
            raise
    secs = time.time() - t0
    with open(log, errors="replace") as f:
        rows = parse_perf(f.read())
    if rc != 0:
        return "FAIL", f"exit status {rc}", secs
    if not rows:
        return "FAIL", "no result rows (&&&& PERF lines) in the output", secs
    return "PASS", f"{len(rows)} rows", secs


def run_key(r):
    return (r["round"], r["program"], r["line"], r["lib"])


def read_jsonl(path):
    out = []
    if os.path.isfile(path):
        with open(path) as f:
            out = [json.loads(line) for line in f if line.strip()]
    return out


def rounds_of(a):
    """The rounds to run: --round, or by default both with two libraries and 1 with one."""
    r = a.round or ("both" if len(a.libs) > 1 else "1")
    return [1, 2] if r == "both" else [int(r)]


def pes_of(p, np_):
    """PEs of a program's runs: 2 for point-to-point programs (a pt-to-pt folder), else --np."""
    return 2 if p["p2p"] else np_


def make_plan(progs, libs, rounds):
    """[(round, program, line, args, library)]: every .args line of every program with each
    library, round 1 in the order of libs, round 2 in the reverse order."""
    plan = []
    for rnd in rounds:
        for p in progs:
            for li, args in enumerate(p["args"]):
                order = tuple(libs) if rnd == 1 else tuple(reversed(libs))
                for libname in order:
                    plan.append((rnd, p, li, args, libname))
    return plan


# Programs that size what they use for one PE per GPU: with more PEs than GPUs (several PEs per
# GPU under MPS) they cannot run whatever the library, and are a SKIP with this reason.
NEEDS_GPU_PER_PE = {
    "malloc": "it sets NVSHMEM_SYMMETRIC_SIZE to 40 % of the GPU's memory in every PE",
}


def gpu_count():
    """GPUs nvidia-smi lists (0 without it)."""
    try:
        out = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, check=False).stdout
    except OSError:
        return 0
    return sum(1 for l in out.splitlines() if l.startswith("GPU "))


def skip_reason(name, np_, gpus):
    """Why program `name` cannot run on `np_` PEs with `gpus` GPUs, or None."""
    why = NEEDS_GPU_PER_PE.get(name)
    if why and np_ > gpus:
        return f"needs a GPU per PE ({why}); {np_} PEs, {gpus} GPU(s)"
    return None


def run_all(a, progs, built):
    """Runs the plan; returns the number of planned runs left (past --deadline)."""
    logdir = os.path.join(a.out, "logs")
    os.makedirs(logdir, exist_ok=True)
    runs_path = os.path.join(a.out, "runs.jsonl")
    rounds = rounds_of(a)
    plan = make_plan(progs, a.libs, rounds)
    # Every planned run is listed in plan.jsonl, so that a summary names those never run.
    planned = {run_key(r) for r in read_jsonl(os.path.join(a.out, "plan.jsonl"))}
    with open(os.path.join(a.out, "plan.jsonl"), "a") as f:
        for rnd, p, li, args, libname in plan:
            rec = {"round": rnd, "program": p["name"], "line": li, "args": args, "lib": libname,
                   "np": pes_of(p, a.np)}
            if run_key(rec) not in planned:
                f.write(json.dumps(rec) + "\n")
    if a.resume:
        done = {run_key(r) for r in read_jsonl(runs_path)}
        plan = [x for x in plan if (x[0], x[1]["name"], x[2], x[4]) not in done]
        note(f"--resume: {len(done)} runs already recorded in {runs_path}")
    note(f"{len(plan)} runs ({len(progs)} programs, rounds {rounds}), timeout {a.timeout} s each"
         + (f", no new run after {a.deadline} s" if a.deadline else ""))
    t_start = time.time()
    gpus = gpu_count()
    with open(runs_path, "a") as out:
        for i, (rnd, p, li, args, libname) in enumerate(plan):
            if a.deadline and time.time() - T_START > a.deadline:
                left = len(plan) - i
                note(f"stopped at --deadline {a.deadline} s (since start) with {left} runs left: run "
                     f"again with --run-only --resume --out {a.out} to go on")
                return left
            np_ = pes_of(p, a.np)
            log = os.path.join(logdir, f"r{rnd}-{p['name']}-{li}-{libname}.log")
            skip = skip_reason(p["name"], np_, gpus)
            if skip:
                status, why, secs = "SKIP", skip, 0.0
                with open(log, "w") as f:
                    f.write(f"not run: {skip}\n")
            elif (libname, p["name"]) not in built:
                status, why, secs = "FAIL", "not built (see the build log)", 0.0
                with open(log, "w") as f:
                    f.write("not built\n")
            else:
                status, why, secs = launch(a, libname, p, args, np_, log)
                if status != "PASS" and getattr(a, "mps_dir", None):
                    # Its processes may have been killed: let the MPS server drop their contexts.
                    subprocess.run([os.path.join(ROOT, "scripts/cuda-mps"), "idle", a.mps_dir], check=False)
            rec = {"round": rnd, "program": p["name"], "rel": p["rel"], "line": li, "args": args,
                   "lib": libname, "np": np_, "status": status, "why": why,
                   "secs": round(secs, 2), "log": os.path.relpath(log, a.out)}
            out.write(json.dumps(rec) + "\n")
            out.flush()
            print(f"[{i + 1}/{len(plan)} {time.time() - t_start:5.0f}s] {status} r{rnd} "
                  f"{p['name']} #{li} '{args}' {libname} np={np_} ({secs:.1f} s): {why}", flush=True)
    note(f"runs took {time.time() - t_start:.0f} s")
    return 0


# ------------------------------------------------------------------------------------------
# Summarize
def summarize(dirs, out_dir, title_info=""):
    runs = []
    for d in dirs:
        path = os.path.join(d, "runs.jsonl")
        if not os.path.isfile(path):
            die(f"{d} has no runs.jsonl")
        with open(path) as f:
            for line in f:
                if line.strip():
                    r = json.loads(line)
                    r["_dir"] = d
                    runs.append(r)
    # The last record of each (round, program, line, lib) wins (a run repeated later).
    last = {}
    for r in runs:
        last[(r["round"], r["program"], r["line"], r["lib"])] = r
    parsed = {}
    for k, r in last.items():
        rows = []
        if r["status"] == "PASS":
            try:
                with open(os.path.join(r["_dir"], r["log"]), errors="replace") as f:
                    rows = parse_perf(f.read())
            except OSError:
                pass
        parsed[k] = rows
    results, fails = [], []
    for k, r in sorted(last.items(), key=lambda kv: (kv[0][1], kv[0][2], kv[0][0], kv[0][3])):
        if r["status"] != "PASS":
            fails.append(r)
    not_run = set()
    for d in dirs:
        for p in read_jsonl(os.path.join(d, "plan.jsonl")):
            if run_key(p) not in last and run_key(p) not in not_run:
                not_run.add(run_key(p))
                fails.append(dict(p, status="NOT RUN", why="planned, not run (--deadline; go on with --resume)",
                                  log="-"))
    pairs = sorted({(k[0], k[1], k[2]) for k in last})
    for rnd, prog, li in pairs:
        nv = {(j, s, z, m): (v, b, u) for j, s, z, m, v, b, u in parsed.get((rnd, prog, li, "nvshmem"), [])}
        rs = {(j, s, z, m): (v, b, u) for j, s, z, m, v, b, u in parsed.get((rnd, prog, li, "rshmem"), [])}
        args = (last.get((rnd, prog, li, "nvshmem")) or last.get((rnd, prog, li, "rshmem")))["args"]
        for key in sorted(set(nv) | set(rs), key=lambda t: (t[0], t[1], t[3], t[2])):
            j, s, z, m = key
            a_, b_ = nv.get(key), rs.get(key)
            better = (a_ or b_)[1]
            units = (a_ or b_)[2]
            results.append({"round": rnd, "program": prog, "line": li, "args": args, "job": j,
                            "subjob": s, "size": z, "metric": m, "units": units, "better": better,
                            "nvshmem": a_[0] if a_ else None, "rshmem": b_[0] if b_ else None,
                            "ratio": ratio(a_[0], b_[0], better) if a_ and b_ else None})
    os.makedirs(out_dir, exist_ok=True)
    with open(os.path.join(out_dir, "results.jsonl"), "w") as f:
        for r in results:
            f.write(json.dumps(r) + "\n")
    libs = [x for x in LIBS if x in {k[3] for k in last} | {k[3] for k in not_run}]
    if len(libs) == 1:
        md, md_name = render_numbers(results, last, fails, libs[0], title_info), "results.md"
    else:
        md, md_name = render_md(results, fails, last, title_info), "side-by-side.md"
    with open(os.path.join(out_dir, md_name), "w") as f:
        f.write(md)
    return results, fails, md, md_name


def count_line(last, fails):
    """"N passed, N failed[, N not run]" over the last record of every run and the plan."""
    passed = sum(1 for r in last.values() if r["status"] == "PASS")
    skipped = sum(1 for r in last.values() if r["status"] == "SKIP")
    failed = len(last) - passed - skipped
    not_run = sum(1 for r in fails if r["status"] == "NOT RUN")
    return (f"{passed} passed, {failed} failed" + (f", {skipped} skipped" if skipped else "")
            + (f", {not_run} not run" if not_run else ""))


def render_numbers(results, last, fails, lib, title_info=""):
    """The table of one library's runs (no ratios): every run's status, then per program,
    .args line and table the value of each size in each round."""
    tables = {}
    for r in results:
        tables.setdefault((r["program"], r["line"], r["args"], r["job"], r["subjob"], r["metric"],
                           r["units"], r["better"]), {}).setdefault(r["size"], {})[r["round"]] = r
    rounds = sorted({k[0] for k in last} | {r["round"] for r in fails}) or [1]
    head = [f"# NVSHMEM perftests with {lib}", ""]
    if title_info:
        head += [title_info, ""]
    head += [f"**{count_line(last, fails)}**", "", "## Runs", "",
             "| program | args | PEs | round | status | s | rows / why | log |",
             "|---|---|---:|---:|---|---:|---|---|"]
    runs = [r for r in last.values()] + [r for r in fails if r["status"] == "NOT RUN"]
    for r in sorted(runs, key=lambda r: (r["program"], r["line"], r["round"])):
        head.append(f"| {r['program']} | #{r['line']} `{r['args'] or '-'}` | {r.get('np', '')} | "
                    f"{r['round']} | {r['status']} | {fmt(r.get('secs'), 1)} | {r['why']} | {r['log']} |")
    head.append("")
    body = []
    for (prog, li, args, job, subjob, metric, units, better), sizes in sorted(tables.items()):
        body += [f"### {prog} #{li} `{args or '(no arguments)'}`: {job} / {subjob} "
                 f"({metric}, {units}, {better} is better)", "",
                 "| size (B) | " + " | ".join(f"{lib} r{rnd}" for rnd in rounds) + " |",
                 "|---:|" + "---:|" * len(rounds)]
        for size in sorted(sizes):
            cells = [str(size)] + [fmt(sizes[size].get(rnd) and sizes[size][rnd][lib]) for rnd in rounds]
            body.append("| " + " | ".join(cells) + " |")
        body.append("")
    return "\n".join(head + ["## Tables", ""] + (body or ["(no result rows)", ""])) + "\n"


def fmt(x, nd=3):
    if x is None:
        return "–"
    return f"{x:.{nd}f}" if abs(x) < 1e4 else f"{x:.4g}"


# Tables of NVSHMEM's perftests that measure nothing comparable, by (program, table): shown, but
# left out of the geometric means, with the reason. Each entry names what was measured.
NOT_COMPARED = {
    ("sync_latency", "sync_all_device"):
        "the program launches its three sync_all kernels, which take (team, iter), with one "
        "argument ({&skip} or {&iter}): `iter` is read past the end of the host's argument array, "
        "so the number of sync_all calls is whatever the stack holds there (rshmem's build on "
        "2 x H200: every warm-up kernel made 1000 calls, every timed one none, so its latency "
        "rows read 0.008-0.03 us; in 30 of 40 runs the PEs' counts differed and the program hung "
        "in its next barrier)",
}


def render_md(results, fails, last, title_info=""):
    tables = {}
    for r in results:
        tables.setdefault((r["program"], r["line"], r["args"], r["job"], r["subjob"], r["metric"],
                           r["units"], r["better"]), {}).setdefault(r["size"], {})[r["round"]] = r
    head = ["# NVSHMEM perftests: NVSHMEM against rshmem, side by side", ""]
    if title_info:
        head += [title_info, ""]
    head += ["ratio = NVSHMEM time / rshmem time, or rshmem bandwidth / NVSHMEM bandwidth (above 1: "
             "rshmem faster). r1: NVSHMEM ran first, r2: rshmem ran first. gmean: geometric mean "
             "of the table's ratios over both rounds; lowest: its lowest ratio.", ""]
    body, summary = [], []
    for (prog, li, args, job, subjob, metric, units, better), sizes in sorted(tables.items()):
        body += [f"### {prog} #{li} `{args or '(no arguments)'}`: {job} / {subjob} "
                 f"({metric}, {units}, {better} is better)", "",
                 "| size (B) | NVSHMEM r1 | rshmem r1 | ratio r1 | NVSHMEM r2 | rshmem r2 | ratio r2 |",
                 "|---:|---:|---:|---:|---:|---:|---:|"]
        all_ratios = []
        for size in sorted(sizes):
            cells = [str(size)]
            for rnd in (1, 2):
                r = sizes[size].get(rnd)
                cells += [fmt(r and r["nvshmem"]), fmt(r and r["rshmem"]), fmt(r and r["ratio"], 2)]
                if r and r["ratio"]:
                    all_ratios.append(r["ratio"])
            body.append("| " + " | ".join(cells) + " |")
        why = NOT_COMPARED.get((prog, job))
        if why:
            body += ["", f"not compared: {why}", ""]
            summary.append((prog, li, args, job, subjob, None, None, 0, why))
            continue
        g = geomean(all_ratios)
        lo = min(all_ratios) if all_ratios else None
        body += ["", f"gmean {fmt(g, 2)}, lowest {fmt(lo, 2)} ({len(all_ratios)} ratios)", ""]
        summary.append((prog, li, args, job, subjob, g, lo, len(all_ratios), None))
    head += ["## Geometric mean per table", "",
             "| program | args | table | gmean | lowest | ratios |", "|---|---|---|---:|---:|---:|"]
    for prog, li, args, job, subjob, g, lo, n, why in summary:
        if why:
            head.append(f"| {prog} | #{li} `{args or '-'}` | {job} / {subjob} | not compared | - | - |")
            continue
        head.append(f"| {prog} | #{li} `{args or '-'}` | {job} / {subjob} | {fmt(g, 2)} | {fmt(lo, 2)} | {n} |")
    head.append("")
    excluded = sorted({(s[0], s[3], s[8]) for s in summary if s[8]})
    if excluded:
        head += ["Not compared (a defect of the program, the same in both builds):", ""]
        head += [f"* {prog} / {job}: {why}" for prog, job, why in excluded]
        head.append("")
    head += [f"Runs: {count_line(last, fails)}.", ""]
    if fails:
        head += ["## Failed runs", "", "| round | program | args | library | why | log |",
                 "|---|---|---|---|---|---|"]
        for r in fails:
            head.append(f"| {r['round']} | {r['program']} | #{r['line']} `{r['args'] or '-'}` | "
                        f"{r['lib']} | {r['why']} | {r['log']} |")
        head.append("")
    return "\n".join(head + ["## Tables", ""] + body) + "\n"


# ------------------------------------------------------------------------------------------
# Self-test of the parser and the table (no GPU): lines as perftest/common/utils.cu prints them.
SELF_TEST_NV = """\
mype: 0 mype_node: 0 device name: NVIDIA H100 80GB HBM3 bus id: 24
shmem_p_latency
&&&& PERF shmem_p_latency___None___size__4___latency 1.050000 -us
&&&& PERF shmem_p_latency___None___size__8___latency 2.000000 -us
Bandwidth
&&&& PERF Bandwidth___None___size__4___Bandwidth 10.000000 +GB
&&&& PERF Bandwidth___None___size__8___Bandwidth 20.000000 +GB
Stream_Latency
&&&& PERF Stream_Latency___with _on_stream___size__4___latency 4.000000 -us
&&&& PERF Stream_Latency___without _on_stream___size__4___latency 5.000000 -us
shmem_at_int_inc_ping_lat
&&&& PERF shmem_at_int_inc_ping_lat___None___size__4___latency 3.000000 -us
&&&& PERF shmem_p_latency___None___size__4___latency 9.000000 -us
"""
SELF_TEST_RS = """\
shmem_p_latency
&&&& PERF shmem_p_latency___None___size__4___latency 0.525000 -us
&&&& PERF shmem_p_latency___None___size__8___latency 4.000000 -us
Bandwidth
&&&& PERF Bandwidth___None___size__4___Bandwidth 15.000000 +GB
&&&& PERF Bandwidth___None___size__8___Bandwidth 10.000000 +GB
Stream_Latency
&&&& PERF Stream_Latency___with _on_stream___size__4___latency 2.000000 -us
"""


def self_test():
    import tempfile
    rows = parse_perf(SELF_TEST_NV)
    keys = [(j, s, z, m) for j, s, z, m, *_ in rows]
    assert ("shmem_p_latency", "None", 4, "latency") in keys, keys
    assert ("Stream_Latency", "with _on_stream", 4, "latency") in keys, keys
    assert ("shmem_at_int_inc_ping_lat", "None", 4, "latency") in keys, keys
    assert keys.count(("shmem_p_latency", "None", 4, "latency")) == 1, "a repeated row is kept once"
    first = [r for r in rows if r[:4] == ("shmem_p_latency", "None", 4, "latency")][0]
    assert first[4] == 1.05 and first[5] == "lower" and first[6] == "us", first
    bw = [r for r in rows if r[0] == "Bandwidth"][0]
    assert bw[5] == "higher" and bw[6] == "GB", bw
    assert parse_perf("size(B)  scope  latency (us)\n4  None  1.0\n") == [], "only &&&& PERF lines"
    assert abs(ratio(1.05, 0.525, "lower") - 2.0) < 1e-12
    assert abs(ratio(10.0, 15.0, "higher") - 1.5) < 1e-12
    assert ratio(0.0, 1.0, "lower") is None
    assert abs(geomean([2.0, 0.5]) - 1.0) < 1e-12
    # A program sized for a GPU per PE is skipped only with fewer GPUs than PEs, and a skip is
    # counted apart from passes and failures.
    assert "needs a GPU per PE" in skip_reason("malloc", 4, 1)
    assert skip_reason("malloc", 4, 4) is None and skip_reason("shmem_put_bw", 4, 1) is None
    runs = {1: {"status": "PASS"}, 2: {"status": "SKIP"}, 3: {"status": "FAIL"}}
    assert count_line(runs, []) == "1 passed, 1 failed, 1 skipped", count_line(runs, [])
    with tempfile.TemporaryDirectory() as d:
        os.makedirs(os.path.join(d, "logs"))
        recs = []
        for rnd in (1, 2):
            for lib, text in (("nvshmem", SELF_TEST_NV), ("rshmem", SELF_TEST_RS)):
                log = f"logs/r{rnd}-x-0-{lib}.log"
                with open(os.path.join(d, log), "w") as f:
                    f.write(text)
                recs.append({"round": rnd, "program": "x", "rel": "x.cu", "line": 0, "args": "-n 5",
                             "lib": lib, "np": 2, "status": "PASS", "why": "", "secs": 1.0, "log": log})
        recs.append({"round": 1, "program": "y", "rel": "y.cu", "line": 0, "args": "", "lib": "rshmem",
                     "np": 4, "status": "FAIL", "why": "exit status 1", "secs": 1.0, "log": "logs/y"})
        with open(os.path.join(d, "runs.jsonl"), "w") as f:
            f.writelines(json.dumps(r) + "\n" for r in recs)
        results, fails, md, md_name = summarize([d], d)
        assert md_name == "side-by-side.md" and os.path.isfile(os.path.join(d, md_name)), md_name
        assert "Runs: 4 passed, 1 failed." in md, md
        by = {(r["round"], r["job"], r["subjob"], r["size"]): r for r in results}
        assert abs(by[(1, "shmem_p_latency", "None", 4)]["ratio"] - 2.0) < 1e-12
        assert abs(by[(2, "shmem_p_latency", "None", 8)]["ratio"] - 0.5) < 1e-12
        assert abs(by[(1, "Bandwidth", "None", 8)]["ratio"] - 0.5) < 1e-12
        assert by[(1, "Stream_Latency", "without _on_stream", 4)]["ratio"] is None
        assert by[(1, "Stream_Latency", "without _on_stream", 4)]["rshmem"] is None
        assert len(fails) == 1 and fails[0]["program"] == "y"
        # shmem_p_latency: ratios 2.0 and 0.5 in both rounds: gmean 1.00, lowest 0.50.
        assert re.search(r"\| x \| #0 `-n 5` \| shmem_p_latency / None \| 1\.00 \| 0\.50 \| 4 \|", md), md
        assert "| 1 | y | #0 `-` | rshmem | exit status 1 | logs/y |" in md, md
        assert "not compared" not in md, md
        # A table of NOT_COMPARED is shown without a geometric mean, its reason listed.
        NOT_COMPARED[("x", "Bandwidth")] = "a test reason"
        try:
            md2 = render_md(results, fails, {}, "")
        finally:
            del NOT_COMPARED[("x", "Bandwidth")]
        assert "| x | #0 `-n 5` | Bandwidth / None | not compared | - | - |" in md2, md2
        assert "* x / Bandwidth: a test reason" in md2, md2
        assert re.search(r"\| x \| #0 `-n 5` \| shmem_p_latency / None \| 1\.00 \| 0\.50 \| 4 \|", md2)
        assert os.path.isfile(os.path.join(d, "results.jsonl"))
    # rshmem alone: its numbers without ratios, every run with its status, a planned run that
    # never ran counted and listed.
    with tempfile.TemporaryDirectory() as d:
        os.makedirs(os.path.join(d, "logs"))
        with open(os.path.join(d, "logs/r1-x-0-rshmem.log"), "w") as f:
            f.write(SELF_TEST_RS)
        recs = [{"round": 1, "program": "x", "rel": "x.cu", "line": 0, "args": "-n 5", "lib": "rshmem",
                 "np": 2, "status": "PASS", "why": "5 rows", "secs": 1.0, "log": "logs/r1-x-0-rshmem.log"},
                {"round": 1, "program": "y", "rel": "y.cu", "line": 0, "args": "", "lib": "rshmem",
                 "np": 4, "status": "FAIL", "why": "timed out after 60 s", "secs": 60.0, "log": "logs/y"}]
        with open(os.path.join(d, "runs.jsonl"), "w") as f:
            f.writelines(json.dumps(r) + "\n" for r in recs)
        with open(os.path.join(d, "plan.jsonl"), "w") as f:
            for prog, li in (("x", 0), ("y", 0), ("z", 1)):
                f.write(json.dumps({"round": 1, "program": prog, "line": li, "args": "-e 1M",
                                    "lib": "rshmem", "np": 4}) + "\n")
        results, fails, md, md_name = summarize([d], d)
        assert md_name == "results.md" and os.path.isfile(os.path.join(d, "results.md")), md_name
        assert not os.path.exists(os.path.join(d, "side-by-side.md"))
        assert all(r["ratio"] is None and r["nvshmem"] is None for r in results), results
        assert "**1 passed, 1 failed, 1 not run**" in md, md
        assert "| y | #0 `-` | 4 | 1 | FAIL | 60.0 | timed out after 60 s | logs/y |" in md, md
        assert re.search(r"\| z \| #1 `-e 1M` \| 4 \| 1 \| NOT RUN \|", md), md
        assert "| size (B) | rshmem r1 |" in md and "| 4 | 0.525 |" in md and "| 8 | 10.000 |" in md, md
        assert "ratio" not in md.lower(), md
    # The planner: every .args line once per library and round, round 2 in reverse order,
    # point-to-point programs on 2 PEs, the others on --np.
    progs = [{"name": "p", "p2p": True, "args": ["-a", "-b"]}, {"name": "c", "p2p": False, "args": [""]}]
    plan = [(rnd, p["name"], li, args, lib) for rnd, p, li, args, lib in make_plan(progs, ("rshmem",), [1])]
    assert plan == [(1, "p", 0, "-a", "rshmem"), (1, "p", 1, "-b", "rshmem"), (1, "c", 0, "", "rshmem")], plan
    plan = [(rnd, p["name"], li, lib) for rnd, p, li, _, lib in make_plan(progs[1:], LIBS, [1, 2])]
    assert plan == [(1, "c", 0, "nvshmem"), (1, "c", 0, "rshmem"), (2, "c", 0, "rshmem"),
                    (2, "c", 0, "nvshmem")], plan
    assert [pes_of(p, 4) for p in progs] == [2, 4]
    assert rounds_of(argparse.Namespace(round=None, libs=("rshmem",))) == [1]
    assert rounds_of(argparse.Namespace(round=None, libs=LIBS)) == [1, 2]
    assert rounds_of(argparse.Namespace(round="2", libs=("rshmem",))) == [2]
    assert plan_line(progs, ("rshmem",), [1]).startswith("2 programs, 3 .args lines: 3 runs"), plan_line(progs, ("rshmem",), [1])
    print("nvshmem_vs.py self-test: all passed")


# ------------------------------------------------------------------------------------------
def main():
    ap = argparse.ArgumentParser(
        prog="scripts/nvshmem-compat-check --vs-nvshmem",
        description=__doc__.split("\n\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__.split("\n\n", 1)[1])
    ap.add_argument("--vs-nvshmem", metavar="NVSHMEM_PREFIX",
                    help="NVSHMEM's install (include/, lib/), or auto: the nvidia-nvshmem wheel of this Python")
    ap.add_argument("src", nargs="?", help="unpacked NVSHMEM source (its perftest/ folder is read)")
    ap.add_argument("--build", default="./nvshmem-vs-build", help="build folder (bin/nvshmem, bin/rshmem, lib/: rshmem's copy of librshmem.so and rshmemrun, obj/, build-logs/)")
    ap.add_argument("--build-only", action="store_true", help="build, do not run (no GPU needed)")
    ap.add_argument("--run-only", action="store_true", help="do not build: run what --build holds")
    ap.add_argument("--out", default=None, help="results folder (default BUILD/results-<date>)")
    ap.add_argument("--only", default="", help="comma-separated program names (as in the table)")
    ap.add_argument("--skip", default="", help="comma-separated program names to leave out")
    ap.add_argument("--part", default="", help="K/N: the K-th of N parts of the program list (split a run)")
    ap.add_argument("--libs", default="nvshmem,rshmem",
                    help="which builds: nvshmem,rshmem (default: side by side), or one of them alone "
                         "(rshmem: no NVSHMEM needed; a table of the numbers, no ratios)")
    ap.add_argument("--round", default=None, choices=["1", "2", "both"],
                    help="which round(s) to run (default both with two libraries, 1 with one)")
    ap.add_argument("--mps", action="store_true",
                    help="start a CUDA MPS daemon of this script's own for the runs (several PEs per "
                         "GPU: scripts/cuda-mps) and stop it at the end")
    ap.add_argument("--np", type=int, default=4, help="PEs for programs outside pt-to-pt (default 4)")
    ap.add_argument("--timeout", type=int, default=60, help="seconds per run (default 60)")
    ap.add_argument("--deadline", type=int, default=0,
                    help="start no run S seconds after this command started (build included); "
                         "the rest is left for --resume")
    ap.add_argument("--resume", action="store_true",
                    help="skip the runs --out already records (go on after --deadline)")
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 2, help="parallel compiles")
    ap.add_argument("--arch", default="sm_90")
    ap.add_argument("--nvcc", default=None)
    ap.add_argument("--lib", default=None, help="folder of librshmem.so and rshmemrun (default target/release)")
    ap.add_argument("--rshmemrun", default=None)
    ap.add_argument("--mpi-include", default=None, help="folder with Open MPI's mpi.h")
    ap.add_argument("--rshmem-rdc", default=None, metavar="LIB.a",
                    help="build the rshmem side with -rdc=true and this device library")
    ap.add_argument("--plan", action="store_true", help="print the programs and .args lines, run nothing")
    ap.add_argument("--summarize", nargs="+", metavar="DIR", help="only make the table from the runs.jsonl of these folders")
    ap.add_argument("--self-test", action="store_true", help="test the output parser and the table")
    a = ap.parse_args()
    libs = [x for x in a.libs.split(",") if x]
    bad = [x for x in libs if x not in LIBS]
    if bad or not libs or len(set(libs)) != len(libs):
        die(f"--libs takes nvshmem, rshmem or nvshmem,rshmem, got '{a.libs}'")
    a.libs = tuple(x for x in LIBS if x in libs)
    if a.libs != LIBS:
        global TOOL
        TOOL = f"nvshmem-compat-check --libs {','.join(a.libs)}"

    if a.self_test:
        self_test()
        return 0
    if a.summarize:
        out = a.out or a.summarize[0]
        results, fails, md, md_name = summarize(a.summarize, out, info_line(a.summarize[0]))
        print(md)
        note(f"wrote {out}/{md_name} and {out}/results.jsonl")
        return 0
    if not a.src or not os.path.isfile(os.path.join(a.src, "perftest/common/utils.cu")):
        die("give the unpacked NVSHMEM source folder (with perftest/common/utils.cu)")
    a.src = os.path.abspath(a.src)
    a.build = os.path.abspath(a.build)
    progs = discover(a.src)
    names = {p["name"] for p in progs}
    for opt in (a.only, a.skip):
        bad = [n for n in opt.split(",") if n and n not in names]
        if bad:
            die(f"unknown program(s) {','.join(bad)}; known: {','.join(sorted(names))}")
    if a.only:
        progs = [p for p in progs if p["name"] in a.only.split(",")]
    if a.skip:
        progs = [p for p in progs if p["name"] not in a.skip.split(",")]
    if a.part:
        m = re.fullmatch(r"(\d+)/(\d+)", a.part)
        if not m or not 1 <= int(m.group(1)) <= int(m.group(2)):
            die(f"--part takes K/N with 1 <= K <= N, got '{a.part}'")
        k, n = int(m.group(1)), int(m.group(2))
        progs = [p for i, p in enumerate(progs) if i % n == k - 1]
    if a.plan:
        for p in progs:
            for li, args in enumerate(p["args"]):
                print(f"{p['name']:40s} np={pes_of(p, a.np)} #{li} {args or '(no arguments)'}")
        print(plan_line(progs, a.libs, rounds_of(a)))
        return 0
    if "nvshmem" in a.libs and not a.vs_nvshmem:
        die("--vs-nvshmem NVSHMEM_PREFIX (or auto) is needed (or --libs rshmem: rshmem alone)")
    if a.run_only:
        built = load_built(a.build)
        if not built:
            die(f"--run-only: {a.build}/bin/BUILT.json is missing (build first)")
    else:
        built = build(a, progs)
    if a.build_only:
        return 0 if len(built) == len(a.libs) * len(progs) else 1
    if "nvshmem" in a.libs and not shutil.which("mpirun"):
        die("no mpirun on PATH (the NVSHMEM side runs under mpirun)")
    # librshmem.so of the runs: --lib, else the build folder's copy (BUILD/lib), else the one an
    # older build linked.
    a.lib_for_run = os.path.join(a.lib or os.path.join(ROOT, "target/release"), "librshmem.so")
    a.nv_lib_for_run = None
    info = {}
    try:
        with open(os.path.join(a.build, "BUILD-INFO.json")) as f:
            info = json.load(f)
    except (OSError, ValueError):
        pass
    if not a.lib:
        if os.path.isfile(os.path.join(a.build, "lib", "librshmem.so")):
            a.lib_for_run = os.path.join(a.build, "lib", "librshmem.so")
        elif info.get("librshmem"):
            a.lib_for_run = os.path.join(info["librshmem"], "librshmem.so")
    if "nvshmem" in a.libs:
        # NVSHMEM's libraries of the runs: the build's, where it was built on this machine; else
        # the install --vs-nvshmem names here (a build made on another machine, carried here).
        built_lib = os.path.join(info["nvshmem"], "lib") if info.get("nvshmem") else None
        if built_lib and os.path.isfile(os.path.join(built_lib, "libnvshmem_host.so.3")):
            a.nv_lib_for_run = built_lib
        else:  # --vs-nvshmem is required with the NVSHMEM side (checked above)
            here = os.path.join(nvshmem_prefix(a.vs_nvshmem), "lib")
            if not os.path.isfile(os.path.join(here, "libnvshmem_host.so.3")):
                die(f"--vs-nvshmem {a.vs_nvshmem}: no libnvshmem_host.so.3 in {here}")
            a.nv_lib_for_run = here
    stamp = datetime.datetime.now(datetime.timezone.utc).strftime("%Y%m%d-%H%M%S")
    if a.resume and not a.out:
        die("--resume needs the --out folder of the run to go on with")
    a.out = os.path.abspath(a.out or os.path.join(a.build, f"results-{stamp}"))
    os.makedirs(a.out, exist_ok=True)
    with open(os.path.join(a.out, "INFO.txt"), "a") as f:
        f.write(info_text(a))
    mps_dir = None
    if a.mps:
        r = subprocess.run([os.path.join(ROOT, "scripts/cuda-mps"), "start", a.out],
                           stdout=subprocess.PIPE, text=True)
        if r.returncode != 0 or not r.stdout.strip():
            die("--mps: no MPS daemon (see above)")
        mps_dir = a.mps_dir = r.stdout.strip().splitlines()[-1]
        os.environ["CUDA_MPS_PIPE_DIRECTORY"] = os.path.join(mps_dir, "pipe")
        note(f"started a CUDA MPS daemon (pipe directory {mps_dir}/pipe)")
    # Stopped by a signal (an outer timeout): the run under way is ended and the MPS daemon
    # stopped on the way out (SystemExit unwinds through launch() and the finally below).
    for sig in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, lambda signum, _frame: sys.exit(128 + signum))
    try:
        left = run_all(a, progs, built)
    finally:
        if mps_dir:
            subprocess.run([os.path.join(ROOT, "scripts/cuda-mps"), "stop", mps_dir, a.out], check=False)
            note("stopped the CUDA MPS daemon")
    results, fails, md, md_name = summarize([a.out], a.out, info_line(a.out))
    print(md)
    note(f"wrote {a.out}/{md_name}, results.jsonl, runs.jsonl; logs in {a.out}/logs")
    any_failed = any(r["status"] not in ("PASS", "SKIP") for r in fails)
    return 3 if left else (1 if any_failed else 0)


def plan_line(progs, libs, rounds):
    lines = sum(len(p["args"]) for p in progs)
    return (f"{len(progs)} programs, {lines} .args lines: {len(make_plan(progs, libs, rounds))} runs "
            f"({'+'.join(libs)}, rounds {','.join(map(str, rounds))})")


def info_text(a):
    gpus = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True).stdout.strip() \
        if shutil.which("nvidia-smi") else "(no nvidia-smi)"
    return (f"date: {datetime.datetime.now(datetime.timezone.utc).strftime('%Y-%m-%d %H:%M UTC')}\n"
            f"host: {os.uname().nodename}\nrshmem: {git_describe()}\n"
            f"command: {' '.join(shlex.quote(x) for x in [os.path.relpath(sys.argv[0], ROOT)] + sys.argv[1:])}\n"
            f"libraries: {','.join(a.libs)}{' (under a CUDA MPS daemon of its own)' if a.mps else ''}\n"
            f"build: {a.build}/BUILD-INFO.json\ngpus:\n{gpus}\n")


def info_line(d):
    try:
        with open(os.path.join(d, "INFO.txt")) as f:
            lines = [ln for ln in f.read().splitlines() if ln.strip()]
        return "  \n".join(lines)
    except OSError:
        return ""


if __name__ == "__main__":
    sys.exit(main())
