"""Host-issued calls on a stream from Python, timed exactly as `gpu_perftest --calls` times the
same calls from Rust: an 8-byte put to PE 1 followed by quiet (both on the stream), and an
alltoall on the world team at 8 B, 64 KiB and 1 MiB per PE. Each row is wall clock over
`--iters` calls and one stream synchronize, best of 5, in µs per call, so it holds what the
binding adds (argument checks, the stream handle) as well as the runtime's own cost.

Run on a machine with one GPU per PE (torch installed):
    rshmemrun -n 2 python examples/python/calls_bench.py [--json] [--iters 2000] [--sizes 8,65536]
    rshmemrun -n 2 target/release/gpu_perftest --calls [--json]     (the same rows from Rust)
scripts/python-vs-rust runs both in turn and prints them side by side.
"""

import argparse
import json
import sys
import time

import torch

import rshmem


def best_of_5(call, iters, stream):
    """µs per call: 3 warm-up calls, then the best of 5 timed loops of `iters` calls."""
    for _ in range(3):
        call()
    stream.synchronize()
    best = float("inf")
    for _ in range(5):
        rshmem.barrier_all(stream=stream)
        stream.synchronize()
        t0 = time.perf_counter()
        for _ in range(iters):
            call()
        stream.synchronize()
        best = min(best, (time.perf_counter() - t0) * 1e6 / iters)
    return best


def row(args, bench, size, us, note):
    if args.json:
        line = json.dumps({"bench": bench, "size": size, "value": round(us, 4), "unit": "us",
                           "note": note, "pes": rshmem.n_pes(), "lang": "python"})
    else:
        line = f"{bench:<28} {size:>12} {us:>12.3} us    {note}"
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--iters", type=int, default=2000)
    ap.add_argument("--sizes", default="8,65536,1048576", help="alltoall bytes per PE")
    ap.add_argument("--json", action="store_true", help="one JSON object per row")
    args = ap.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    with rshmem.init():
        me, n = rshmem.my_pe(), rshmem.n_pes()
        if rshmem.backend() != "gpu" or n < 2:
            raise SystemExit("calls_bench.py: needs the GPU backend and at least 2 PEs")
        stream = torch.cuda.Stream()
        biggest = max(sizes + [8])
        src = rshmem.empty(biggest * n, torch.uint8)
        dst = rshmem.zeros(biggest * n, torch.uint8)
        src.copy_((torch.arange(biggest * n, device=src.device) + me) % 251)
        torch.cuda.synchronize()
        d8, s8 = dst[:8], src[:8]

        def put8():
            rshmem.put(d8, s8, 1, stream=stream)
            rshmem.quiet(stream=stream)

        rshmem.barrier_all(stream=stream)
        stream.synchronize()
        if me == 0:
            us = best_of_5(put8, args.iters, stream)
            row(args, "put8_quiet_on_stream", 8, us,
                f"put + quiet on a torch stream, wall clock, best of 5 x {args.iters}")
        else:
            for _ in range(5):  # PE 0's barriers in best_of_5
                rshmem.barrier_all(stream=stream)
                stream.synchronize()
        rshmem.barrier_all(stream=stream)
        stream.synchronize()
        if me == 1:  # PE 0's first 8 source bytes are 0..7
            want = torch.arange(8, dtype=torch.uint8)
            if not torch.equal(dst[:8].cpu(), want):
                raise SystemExit(f"calls_bench.py: PE 1 got {dst[:8].tolist()}, want "
                                 f"{want.tolist()}")
        for size in sizes:
            # The alltoalls write every PE's dst, which every PE has just read (the put's and
            # the last size's checks): the first PE to start them must wait for the others.
            rshmem.barrier_all(stream=stream)
            stream.synchronize()
            d, s = dst[:size * n], src[:size * n]

            def alltoall():
                rshmem.alltoall(rshmem.TEAM_WORLD, d, s, stream=stream)

            us = best_of_5(alltoall, args.iters, stream)
            got = d.view(n, size).cpu().to(torch.int64)
            for pe in range(n):
                want = (torch.arange(size) + me * size + pe) % 251
                if not torch.equal(got[pe], want):
                    raise SystemExit(f"calls_bench.py: alltoall block from PE {pe} wrong at "
                                     f"{size} B per PE")
            if me == 0:
                row(args, "alltoall_on_stream_call", size, us,
                    f"{n} PEs, wall clock per call, best of 5 x {args.iters}")
        rshmem.barrier_all(stream=stream)
        stream.synchronize()
        rshmem.free(dst)
        rshmem.free(src)


if __name__ == "__main__":
    main()
