#!/usr/bin/env python3
"""DeepEP's intranode dispatch and combine, built from DeepEP's public source and timed with
DeepEP's own test, for the comparison in docs/moe.md (the problem of perftest moe_bench).

  scripts/deepep-bench build [--out DIR] [--src DEEPEP_SRC | --tag TAG] [--python PY]
                             [--torch VERSION] [--nvcc PATH] [--jobs N]
  scripts/deepep-bench run DIR [-n N] [--tokens T] [--hidden H] [--topk K] [--experts E]
                           [--timeout S]

build (no GPU needed; downloads PyTorch and its CUDA libraries, about 3 GB): makes DIR (default
.gpu/deepep) with a virtual environment of PY (default python3; use the Python version of the GPU
machine: the extension is built for it) holding torch==VERSION (default 2.11.0; use the GPU
machine's), DeepEP's source (--src, or a clone of github.com/deepseek-ai/DeepEP at TAG, default
v1.2.1, the last release whose kernels are compiled ahead of time), and builds DeepEP's wheel for
sm_90 with nvcc (--nvcc, $NVCC, scripts/install-nvcc). DeepEP's setup.py builds its intranode
kernels only when NVSHMEM's Python package is absent; PyTorch depends on that package, so the
build hides it from setup.py: the wheel has DeepEP's intranode (NVLink) dispatch and combine and
no internode or low-latency kernels. DIR gets the wheel, DeepEP's tests/ folder and
BUILD-INFO.json.

run (a machine with N GPUs, default 4, and the same torch version): unpacks the wheel into
DIR/site and runs DeepEP's tests/test_intranode.py on N processes with the shape (default T 4096
tokens per rank, H 7168, top-8, 256 experts: moe_bench's), which checks DeepEP's results against
its own reference and then tunes and times dispatch (bf16 and fp8) and combine (bf16). Prints one
JSON row per best time DeepEP reports ({"bench":"deepep", "kernel": "dispatch_bf16" |
"dispatch_fp8" | "combine", "us", "nvl_gbps", "sms", "nvl_chunk", ...}); DeepEP's times are its
own: CUDA-event times of the call on rank 0 (its `bench` helper), after its tuning sweep over SM
counts and chunk sizes. The whole output goes to DIR/run-<date>.log. Exit status 1 when the test
failed or printed no best times.
"""

import argparse
import datetime
import glob
import json
import os
import re
import shutil
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import nvshmem_vs  # noqa: E402
from nvshmem_cmake import toolkit_root  # noqa: E402
from nvshmem_vs import ROOT, die, find_nvcc, note, run_cmd  # noqa: E402

nvshmem_vs.TOOL = "deepep-bench"
REPO = "https://github.com/deepseek-ai/DeepEP"

# Runs DeepEP's setup.py as on a machine without NVSHMEM's Python package: it then builds the
# intranode kernels only (its own switch, -DDISABLE_NVSHMEM).
HIDE_NVSHMEM = """import importlib.abc, runpy, sys
class Hide(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name == "nvidia.nvshmem" or name.startswith("nvidia.nvshmem."):
            raise ModuleNotFoundError(name)
        return None
sys.meta_path.insert(0, Hide())
sys.argv = ["setup.py", "bdist_wheel"]
runpy.run_path("setup.py", run_name="__main__")
"""

BEST = re.compile(r"\[tuning\] Best (dispatch \((BF16|FP8)\)|combine): SMs (\d+), NVL chunk (\S+?),?:? "
                  r"([\d.]+) GB/s \(NVL\), t: ([\d.]+) us")


def build(a):
    out = os.path.abspath(a.out)
    os.makedirs(out, exist_ok=True)
    log = os.path.join(out, "build.log")
    open(log, "w").close()
    nvcc = find_nvcc(a.nvcc)
    src = os.path.join(out, "src")
    if a.src:
        if os.path.exists(src):
            shutil.rmtree(src)
        shutil.copytree(os.path.abspath(a.src), src, symlinks=True)
    elif not os.path.isdir(src):
        note(f"cloning {REPO} at {a.tag}")
        if not run_cmd(["git", "clone", "-q", "--depth", "1", "--branch", a.tag, REPO, src], log):
            die(f"git clone of {REPO} at {a.tag} failed (log {log}); or pass --src")
    if not os.path.isfile(os.path.join(src, "setup.py")):
        die(f"{src} is not DeepEP's source (no setup.py)")
    venv = os.path.join(out, "venv")
    py = os.path.join(venv, "bin", "python")
    if not os.path.isfile(py):
        note(f"virtual environment with torch=={a.torch} in {venv} (about 3 GB)")
        if not run_cmd([a.python, "-m", "venv", venv], log):
            die(f"{a.python} -m venv failed (log {log})")
    if not run_cmd([py, "-m", "pip", "install", "-q", f"torch=={a.torch}", "numpy", "ninja", "wheel",
               "setuptools"], log):
        die(f"pip install torch=={a.torch} failed (log {log})")
    r = subprocess.run([py, "-c", "import torch, sys; print(torch.__version__, torch.version.cuda, "
                        "'%d.%d' % sys.version_info[:2])"], capture_output=True, text=True)
    if r.returncode != 0:
        die(f"torch does not import in {venv}: {r.stderr.strip()[-400:]}")
    torch_version, torch_cuda, py_version = r.stdout.split()
    # torch's headers include the CUDA libraries' headers (cusparse.h, ...), which a toolkit from
    # nvcc's wheels lacks and torch's CUDA wheels have.
    site = subprocess.run([py, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                          capture_output=True, text=True).stdout.strip()
    cuda_inc = sorted(glob.glob(os.path.join(site, "nvidia", "cu*", "include")))
    # GIT_CEILING_DIRECTORIES: setup.py names the wheel after `git rev-parse` in the source
    # folder, which must not find a repository around it (this one, when DIR is inside it).
    env = dict(os.environ, CUDA_HOME=toolkit_root(nvcc, out), TORCH_CUDA_ARCH_LIST="9.0",
               MAX_JOBS=str(a.jobs), PATH=os.path.dirname(nvcc) + os.pathsep + os.environ["PATH"],
               GIT_CEILING_DIRECTORIES=os.path.dirname(src))
    if cuda_inc:
        env["CPATH"] = os.pathsep.join(cuda_inc + [env["CPATH"]] if env.get("CPATH") else cuda_inc)
        env["NVCC_APPEND_FLAGS"] = " ".join(f"-I{d}" for d in cuda_inc)
    shutil.rmtree(os.path.join(src, "dist"), ignore_errors=True)
    note(f"building DeepEP's wheel (intranode kernels, sm_90, {a.jobs} jobs; log {log})")
    if not run_cmd([py, "-c", HIDE_NVSHMEM], log, cwd=src, env=env):
        die(f"DeepEP's build failed (log {log})")
    wheels = glob.glob(os.path.join(src, "dist", "deep_ep-*.whl"))
    if not wheels:
        die(f"DeepEP's build made no wheel (log {log})")
    for old in glob.glob(os.path.join(out, "deep_ep-*.whl")):
        os.remove(old)
    shutil.copy2(wheels[0], out)
    shutil.rmtree(os.path.join(out, "tests"), ignore_errors=True)
    shutil.copytree(os.path.join(src, "tests"), os.path.join(out, "tests"))
    # The version setup.py gave the wheel (deep_ep-VERSION-...whl).
    rev = f"{os.path.basename(wheels[0]).split('-')[1]} (source without git history)"
    if os.path.exists(os.path.join(src, ".git")):
        rev = subprocess.run(["git", "-C", src, "describe", "--tags", "--always"],
                             capture_output=True, text=True).stdout.strip() or rev
    info = {"deepep": rev, "wheel": os.path.basename(wheels[0]), "torch": torch_version,
            "torch_cuda": torch_cuda, "python": py_version, "nvcc": nvcc, "arch": "sm_90",
            "kernels": "intranode only (NVSHMEM's Python package hidden from setup.py)",
            "rshmem_commit": nvshmem_vs.git_describe(),
            "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")}
    with open(os.path.join(out, "BUILD-INFO.json"), "w") as f:
        json.dump(info, f, indent=1)
    note(f"built {info['wheel']} (DeepEP {rev}, torch {torch_version}, Python {py_version}) into {out}")
    return 0


def parse(text):
    """The best times DeepEP's test_intranode.py prints, as rows."""
    rows = []
    for m in BEST.finditer(text):
        kind, dtype, sms, chunk, gbps, us = m.groups()
        kernel = f"dispatch_{dtype.lower()}" if kind.startswith("dispatch") else "combine"
        rows.append({"kernel": kernel, "us": float(us), "nvl_gbps": float(gbps), "sms": int(sms),
                     "nvl_chunk": chunk})
    return rows


def run(a):
    d = os.path.abspath(a.dir)
    try:
        with open(os.path.join(d, "BUILD-INFO.json")) as f:
            info = json.load(f)
    except (OSError, ValueError):
        die(f"{d}/BUILD-INFO.json is missing (scripts/deepep-bench build --out {a.dir} first)")
    r = subprocess.run([sys.executable, "-c", "import torch, sys; print(torch.__version__, "
                        "'%d.%d' % sys.version_info[:2], torch.cuda.device_count())"],
                       capture_output=True, text=True)
    if r.returncode != 0:
        die(f"{sys.executable} has no working torch: {r.stderr.strip()[-400:]}")
    torch_version, py_version, ngpu = r.stdout.split()
    if torch_version.split("+")[0] != info["torch"].split("+")[0] or py_version != info["python"]:
        die(f"the wheel was built for torch {info['torch']} and Python {info['python']}; this "
            f"Python ({sys.executable}) is {py_version} with torch {torch_version}")
    if int(ngpu) < a.n:
        die(f"{a.n} processes need {a.n} GPUs; this machine has {ngpu}")
    site = os.path.join(d, "site")
    shutil.rmtree(site, ignore_errors=True)
    subprocess.run([sys.executable, "-m", "zipfile", "-e", os.path.join(d, info["wheel"]), site],
                   check=True)
    stamp = datetime.datetime.now(datetime.timezone.utc).strftime("%Y%m%d-%H%M%S")
    log = os.path.join(d, f"run-{stamp}.log")
    cmd = [sys.executable, os.path.join(d, "tests", "test_intranode.py"), "--num-processes",
           str(a.n), "--num-tokens", str(a.tokens), "--hidden", str(a.hidden), "--num-topk",
           str(a.topk), "--num-experts", str(a.experts)]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [site, os.path.join(d, "tests")] + ([os.environ["PYTHONPATH"]] if os.environ.get("PYTHONPATH") else [])))
    note(f"DeepEP {info['deepep']}: {' '.join(cmd[1:])} (log {log})")
    try:
        p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=a.timeout)
        text, rc = p.stdout + p.stderr, p.returncode
    except subprocess.TimeoutExpired as e:
        # The partial output: bytes, whatever `text` asked for (subprocess's TimeoutExpired).
        text = "".join(x.decode(errors="replace") if isinstance(x, bytes) else x
                       for x in (e.stdout or "", e.stderr or ""))
        rc = f"timed out after {a.timeout} s"
    with open(log, "w") as f:
        f.write("$ " + " ".join(cmd) + "\n" + text)
    rows = parse(text)
    for row in rows:
        print(json.dumps({"bench": "deepep", "deepep": info["deepep"], "ranks": a.n,
                          "tokens": a.tokens, "hidden": a.hidden, "topk": a.topk,
                          "experts": a.experts, **row}))
    if rc != 0 or not rows:
        note(f"DeepEP's test failed ({'exit status ' + str(rc) if isinstance(rc, int) else rc}; "
             f"{len(rows)} best times); see {log}")
        return 1
    return 0


def main():
    ap = argparse.ArgumentParser(prog="scripts/deepep-bench", description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog=__doc__.split("\n\n", 1)[1])
    sub = ap.add_subparsers(dest="cmd", required=True)
    b = sub.add_parser("build")
    b.add_argument("--out", default=os.path.join(ROOT, ".gpu", "deepep"))
    b.add_argument("--src")
    b.add_argument("--tag", default="v1.2.1")
    b.add_argument("--python", default="python3")
    b.add_argument("--torch", default="2.11.0")
    b.add_argument("--nvcc")
    b.add_argument("--jobs", type=int, default=os.cpu_count() or 2)
    r = sub.add_parser("run")
    r.add_argument("dir")
    r.add_argument("-n", type=int, default=4)
    r.add_argument("--tokens", type=int, default=4096)
    r.add_argument("--hidden", type=int, default=7168)
    r.add_argument("--topk", type=int, default=8)
    r.add_argument("--experts", type=int, default=256)
    r.add_argument("--timeout", type=int, default=900)
    sub.add_parser("self-test", help="check the parser of DeepEP's output")
    a = ap.parse_args()
    if a.cmd == "self-test":
        return self_test()
    return build(a) if a.cmd == "build" else run(a)


def self_test():
    """The parser against lines in the format of DeepEP v1.2.1's tests/test_intranode.py."""
    text = """[tuning] SMs 24, NVL chunk 4: 150.01 GB/s (NVL), avg_t: 900.00 us
[tuning] Best dispatch (FP8): SMs 24, NVL chunk 20, 310.52 GB/s (NVL), t: 398.01 us

[tuning] Best dispatch (BF16): SMs 24, NVL chunk 16, 327.77 GB/s (NVL), t: 702.33 us
[tuning] SMs 24, NVL chunk default: 120.00 GB/s (NVL), t: 1.00 us
[tuning] Best combine: SMs 24, NVL chunk 8: 301.10 GB/s (NVL), t: 764.57 us
"""
    rows = parse(text)
    want = [{"kernel": "dispatch_fp8", "us": 398.01, "nvl_gbps": 310.52, "sms": 24, "nvl_chunk": "20"},
            {"kernel": "dispatch_bf16", "us": 702.33, "nvl_gbps": 327.77, "sms": 24, "nvl_chunk": "16"},
            {"kernel": "combine", "us": 764.57, "nvl_gbps": 301.1, "sms": 24, "nvl_chunk": "8"}]
    if rows != want:
        print(f"deepep-bench self-test: FAIL\n got  {rows}\n want {want}")
        return 1
    if parse("[tuning] Best dispatch (BF16): SMs 24, NVL chunk 16, nan GB/s (NVL), t: 1 us"):
        print("deepep-bench self-test: FAIL (a line without numbers was taken)")
        return 1
    print("deepep-bench self-test: ok (3 best times, the sweep lines left out)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
