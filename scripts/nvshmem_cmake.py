#!/usr/bin/env python3
"""NVSHMEM's own CMake projects (examples/ and perftest/) built unchanged against rshmem.

An NVSHMEM user builds NVSHMEM's examples and perftests with the CMake projects in NVSHMEM's
source: `find_package(NVSHMEM)`, the `nvshmem::nvshmem_host` / `nvshmem::nvshmem_device` targets,
`CUDA_SEPARABLE_COMPILATION ON`. This configures both projects with only the prefix pointing at an
rshmem install (its NVSHMEMConfig.cmake), builds every target with `make -k`, and checks that each
executable target of both projects was produced. No GPU is needed: nothing is run.

Known not to build, printed as KNOWN and not counted as failures:
  perftest/device/tile/*  NVSHMEM's tile-granular collectives (`nvshmemx::tile_*`, NVLS
                          algorithms, NVSHMEM's internal header device_host/nvshmem_common.cuh),
                          which rshmem does not provide.

Usage:
  scripts/nvshmem-cmake-check NVSHMEM_SRC [--prefix DIR] [--build DIR] [--nvcc PATH] [--jobs N]
                              [--arch 90] [--only examples|perftest] [--export DIR]

  NVSHMEM_SRC  an unpacked NVSHMEM source tree (examples/ and perftest/ are read; nothing is
               written there)
  --prefix     an rshmem install (scripts/install-c PREFIX, built with nvcc so that it has
               lib/librshmem_device.a); default: scripts/install-c into BUILD/prefix
  --build      build folder (default ./nvshmem-cmake-build)
  --export DIR copy what was built, with the install's librshmem.so and rshmemrun, into DIR in
               the layouts the run scripts take, so that the programs NVSHMEM's CMake built can be
               run on a GPU machine (DIR copied there):
                 DIR/bin/rshmem/NAME, DIR/lib, DIR/bin/BUILT.json: the perftests, for
                   `scripts/nvshmem-compat-check --libs rshmem --run-only --build DIR SRC`, or side
                   by side with NVSHMEM after an NVSHMEM-only build into the same DIR
                   (`--vs-nvshmem P SRC --build DIR --build-only --libs nvshmem`, either order;
                   BUILT.json keeps both) and `--vs-nvshmem auto SRC --run-only --build DIR`
                 DIR/examples/bin/NAME (with rshmemrun), DIR/examples/lib: the examples, for
                   `scripts/nvshmem-compat-check --bin DIR/examples/bin --examples --only
                   $(cat DIR/examples/programs.txt)`
               The programs find librshmem.so through LD_LIBRARY_PATH, which those scripts set.

What the configure step passes besides the prefix, and why (none of it is rshmem-specific):
  -DCUDAToolkit_ROOT, CMAKE_CUDA_COMPILER   the nvcc found (--nvcc, NVCC, /usr/local/cuda,
               PATH, scripts/install-nvcc). A toolkit installed from NVIDIA's pip wheels has no
               unversioned libcudart.so and no stub libcuda.so, which CMake's FindCUDAToolkit
               needs; for such a toolkit a folder of links (BUILD/cuda) stands in for it.
  -DCMAKE_CUDA_ARCHITECTURES=90             one architecture, to keep the build short.
  -DMPI_CXX_COMPILER_INCLUDE_DIRS          Open MPI's include folder (docs/nvshmem-porting.md:
               NVSHMEM's projects mis-handle Debian's two Open MPI include folders).
  -DOMPI_SKIP_MPICXX                        the perftests include mpi.h and load libmpi at run
               time (dlopen); Open MPI's C++ bindings would need libmpi at link time.
  -I<nvml.h folder>                         the perftests include nvml.h (pip: nvidia-nvml-dev
               when the toolkit has none).
Exit status: 0 when every executable target that is not KNOWN was built, 1 otherwise.
"""

import argparse
import glob
import json
import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import nvshmem_vs  # noqa: E402
from nvshmem_vs import ROOT, cuda_stub_dir, die, find_mpi_include, find_nvcc, find_nvml_include, note  # noqa: E402

nvshmem_vs.TOOL = "nvshmem-cmake-check"

PROJECTS = ("examples", "perftest")
# Source folders (relative to NVSHMEM_SRC) whose targets are known not to build, and why.
KNOWN = {"perftest/device/tile": "NVSHMEM's tile-granular collectives (nvshmemx::tile_*), not in rshmem"}


def toolkit_root(nvcc, build):
    """A CUDA toolkit folder CMake's FindCUDAToolkit accepts: nvcc's own, or BUILD/cuda, links
    to it with the unversioned libcudart.so and a libcuda.so stub it lacks."""
    top = os.path.dirname(os.path.dirname(nvcc))
    libs = [os.path.join(top, d) for d in ("lib64", "lib")]
    if any(os.path.isfile(os.path.join(d, "libcudart.so")) for d in libs) and any(
            os.path.isfile(os.path.join(d, "stubs", "libcuda.so")) for d in libs):
        return top
    shim = os.path.join(build, "cuda")
    lib64 = os.path.join(shim, "lib64")
    os.makedirs(os.path.join(lib64, "stubs"), exist_ok=True)
    for name in ("bin", "include", "nvvm"):
        src, dst = os.path.join(top, name), os.path.join(shim, name)
        if os.path.exists(src) and not os.path.lexists(dst):
            os.symlink(src, dst)
    for d in libs:
        for f in glob.glob(os.path.join(d, "*")):
            dst = os.path.join(lib64, os.path.basename(f))
            if os.path.isfile(f) and not os.path.lexists(dst):
                os.symlink(f, dst)
    cudart = sorted(glob.glob(os.path.join(lib64, "libcudart.so.*")))
    if not os.path.lexists(os.path.join(lib64, "libcudart.so")):
        if not cudart:
            die(f"no libcudart.so.* next to {nvcc}")
        os.symlink(cudart[0], os.path.join(lib64, "libcudart.so"))
    stub = os.path.join(lib64, "stubs", "libcuda.so")
    if not os.path.lexists(stub):
        os.symlink(os.path.join(cuda_stub_dir(nvcc, build), "libcuda.so"), stub)
    return shim


def install_prefix(nvcc, build):
    prefix = os.path.join(build, "prefix")
    note(f"installing rshmem into {prefix} (scripts/install-c)")
    env = dict(os.environ, NVCC=nvcc, PATH=os.path.dirname(nvcc) + os.pathsep + os.environ["PATH"])
    r = subprocess.run([os.path.join(ROOT, "scripts/install-c"), prefix], env=env,
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if r.returncode != 0:
        sys.stderr.write(r.stdout[-4000:])
        die("scripts/install-c failed")
    if not os.path.isfile(os.path.join(prefix, "lib", "librshmem_device.a")):
        die(f"{prefix} has no lib/librshmem_device.a (install-c found no nvcc?)")
    return prefix


def executables(bdir):
    """(name, source folder relative to the project's source root, artifact paths) of every
    executable target, from CMake's file API reply."""
    reply = os.path.join(bdir, ".cmake", "api", "v1", "reply")
    index = sorted(glob.glob(os.path.join(reply, "index-*.json")))
    if not index:
        die(f"no CMake file-API reply in {reply}")
    with open(index[-1]) as f:
        idx = json.load(f)
    model = next(o for o in idx["objects"] if o["kind"] == "codemodel")
    with open(os.path.join(reply, model["jsonFile"])) as f:
        cm = json.load(f)
    out = []
    for cfg in cm["configurations"][:1]:
        for t in cfg["targets"]:
            with open(os.path.join(reply, t["jsonFile"])) as f:
                tj = json.load(f)
            if tj["type"] != "EXECUTABLE":
                continue
            srcdir = tj["paths"]["source"]
            arts = [os.path.join(bdir, a["path"]) for a in tj.get("artifacts", [])]
            out.append((tj["name"], srcdir, arts))
    return out


def main():
    ap = argparse.ArgumentParser(prog="scripts/nvshmem-cmake-check", description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog=__doc__.split("\n\n", 1)[1])
    ap.add_argument("src")
    ap.add_argument("--prefix")
    ap.add_argument("--build", default="./nvshmem-cmake-build")
    ap.add_argument("--nvcc")
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 2)
    ap.add_argument("--arch", default="90")
    ap.add_argument("--only", choices=PROJECTS)
    ap.add_argument("--export")
    a = ap.parse_args()
    src = os.path.abspath(a.src)
    for p in PROJECTS:
        if not os.path.isfile(os.path.join(src, p, "CMakeLists.txt")):
            die(f"{src} is not an NVSHMEM source tree (no {p}/CMakeLists.txt)")
    build = os.path.abspath(a.build)
    os.makedirs(build, exist_ok=True)
    nvcc = find_nvcc(a.nvcc)
    tk = toolkit_root(nvcc, build)
    flags = f"-DOMPI_SKIP_MPICXX -I{find_nvml_include(nvcc, build)}"
    mpi_inc = find_mpi_include(None)
    prefix = os.path.abspath(a.prefix) if a.prefix else install_prefix(nvcc, build)
    built, failed, known = [], [], []
    made = {p: [] for p in PROJECTS}  # project -> artifact paths of the targets built
    for proj in [a.only] if a.only else PROJECTS:
        bdir = os.path.join(build, proj)
        q = os.path.join(bdir, ".cmake", "api", "v1", "query")
        os.makedirs(q, exist_ok=True)
        open(os.path.join(q, "codemodel-v2"), "w").close()
        log = os.path.join(build, f"{proj}.log")
        with open(log, "w") as lf:
            cfg = ["cmake", "-S", os.path.join(src, proj), "-B", bdir,
                   f"-DCMAKE_PREFIX_PATH={prefix}", f"-DNVSHMEM_PREFIX={prefix}",
                   f"-DCUDAToolkit_ROOT={tk}", f"-DCMAKE_CUDA_COMPILER={os.path.join(tk, 'bin', 'nvcc')}",
                   f"-DCMAKE_CUDA_ARCHITECTURES={a.arch}",
                   f"-DMPI_CXX_COMPILER_INCLUDE_DIRS={mpi_inc}",
                   f"-DCMAKE_CXX_FLAGS={flags}", f"-DCMAKE_CUDA_FLAGS={flags}"]
            lf.write("$ " + " ".join(cfg) + "\n")
            lf.flush()
            if subprocess.run(cfg, stdout=lf, stderr=subprocess.STDOUT).returncode != 0:
                print(f"FAIL {proj}: CMake configure failed (find_package(NVSHMEM) against {prefix}); log {log}")
                failed.append(proj)
                continue
            note(f"building NVSHMEM's {proj}/ ({a.jobs} jobs; log {log})")
            lf.flush()
            subprocess.run(["cmake", "--build", bdir, "-j", str(a.jobs), "--", "-k"],
                           stdout=lf, stderr=subprocess.STDOUT)
        for name, srcdir, arts in executables(bdir):
            rel = f"{proj}/{srcdir}" if srcdir != "." else proj
            why = next((w for k, w in KNOWN.items() if rel == k or rel.startswith(k + "/")), None)
            ok = bool(arts) and all(os.path.isfile(x) for x in arts)
            if ok:
                built.append(name)
                made[proj] += arts
                print(f"PASS {rel}/{name}")
            elif why:
                known.append(name)
                print(f"KNOWN {rel}/{name}: {why}")
            else:
                failed.append(name)
                print(f"FAIL {rel}/{name}: not built (log {log})")
    print(f"nvshmem-cmake-check: {len(built)} built, {len(failed)} failed, {len(known)} known not to build")
    if a.export:
        export(os.path.abspath(a.export), prefix, tk, made)
    return 1 if failed or not built else 0


def needed(binary):
    """The DT_NEEDED names of an ELF file (readelf -d)."""
    r = subprocess.run(["readelf", "-d", binary], capture_output=True, text=True)
    return [ln.split("[", 1)[1].rstrip("]") for ln in r.stdout.splitlines() if "(NEEDED)" in ln]


def export(out, prefix, tk, made):
    """Copies the built programs into OUT in the layouts of scripts/nvshmem_vs.py's build folder
    (perftests) and of scripts/nvshmem-compat-check --bin (examples), with rshmemrun and the
    shared libraries they load from the install or the CUDA toolkit (librshmem.so.0, and the
    CUDA runtime NVSHMEM's projects link dynamically); see --export in the usage."""
    run = os.path.join(prefix, "bin", "rshmemrun")
    if not os.path.isfile(run):
        die(f"--export: {run} is missing (the install at {prefix} is incomplete)")
    # Where a program's libraries are taken from: the install, then the toolkit; system
    # libraries (libc, libstdc++, libcuda: the driver's) are left to the GPU machine.
    search = [os.path.join(prefix, "lib")] + [os.path.join(tk, d) for d in ("lib64", "lib")]

    def copy(src, dst_dir, name=None):
        os.makedirs(dst_dir, exist_ok=True)
        dst = os.path.join(dst_dir, name or os.path.basename(src))
        nvshmem_vs.copy_stripped(src, dst)
        return dst

    def libs_for(programs, lib_dir, run_dir):
        names = sorted({n for p in programs for n in needed(p)})
        for n in names:
            src = next((os.path.join(d, n) for d in search if os.path.exists(os.path.join(d, n))), None)
            if src:
                copy(src, lib_dir, n)
        # The run scripts look for librshmem.so by that name.
        link = os.path.join(lib_dir, "librshmem.so")
        if not os.path.lexists(link):
            if not os.path.isfile(os.path.join(lib_dir, "librshmem.so.0")):
                die(f"--export: the programs do not load librshmem.so.0 from {prefix}/lib")
            os.symlink("librshmem.so.0", link)
        copy(run, run_dir)

    perf = [copy(art, os.path.join(out, "bin", "rshmem")) for art in made["perftest"]]
    if perf:
        # nvshmem_vs.py runs rshmemrun from the library's folder.
        libs_for(perf, os.path.join(out, "lib"), os.path.join(out, "lib"))
        # Entries of an NVSHMEM build in the same folder stay listed.
        built = {b for b in nvshmem_vs.load_built(out) if b[0] != "rshmem"}
        nvshmem_vs.save_built(out, built | {("rshmem", os.path.basename(p)) for p in perf})
        with open(os.path.join(out, "bin", "rshmem", "BUILT-BY"), "w") as f:
            f.write(f"NVSHMEM's perftest/ CMake project (scripts/nvshmem-cmake-check), rshmem "
                    f"{nvshmem_vs.git_describe()}\n")
    ex = [copy(art, os.path.join(out, "examples", "bin")) for art in made["examples"]]
    if ex:
        # nvshmem-compat-check --bin runs rshmemrun from the programs' folder.
        libs_for(ex, os.path.join(out, "examples", "lib"), os.path.join(out, "examples", "bin"))
        # For its --only (its list also names programs NVSHMEM's CMake project does not build).
        with open(os.path.join(out, "examples", "programs.txt"), "w") as f:
            f.write(",".join(sorted(os.path.basename(p) for p in ex)) + "\n")
    note(f"exported {len(perf)} perftests to {out}/bin/rshmem and {len(ex)} examples to "
         f"{out}/examples/bin, with their libraries")

if __name__ == "__main__":
    sys.exit(main())
