"""Ring shift from Python: every PE puts its PE number into a symmetric int on the next PE, then
all meet at a barrier and print what arrived; the same lines as the Rust ring_shift
("N: received message M").

With GPUs (one per PE) the put is a device `p` from a kernel compiled at run time (the device
library, NVRTC) and the barrier is ordered on the current torch stream; without, a host `p` and
a barrier on the CPU backend's shared-memory heap (NumPy).

Run:  rshmemrun -n 4 python examples/python/ring_shift.py
      torchrun --nproc-per-node 4 examples/python/ring_shift.py
"""

import sys

import rshmem

KERNEL = r"""
#include "rshmem/rshmem.cuh"
extern "C" __global__ void ring_shift(int *message) {
    int me = rshmem_my_pe();
    int n = rshmem_n_pes();
    rshmem_int_p(message, me, (me + 1) % n);
}
"""


def main():
    with rshmem.init():
        me, n = rshmem.my_pe(), rshmem.n_pes()
        message = rshmem.zeros(1, "int32")
        if rshmem.backend() == "gpu":
            import torch
            rshmem.Kernel(KERNEL, "ring_shift")(1, 1, message)
            rshmem.barrier_all()  # ordered on the current torch stream
            torch.cuda.synchronize()
            got = int(message.item())
        else:
            rshmem.p(message, me, (me + 1) % n)
            rshmem.barrier_all()
            got = int(message[0])
        # One write per line: the PEs share stdout, and print() writes the text and its newline
        # separately when Python runs unbuffered (PYTHONUNBUFFERED), so lines could interleave.
        sys.stdout.write(f"{me}: received message {got}\n")
        sys.stdout.flush()
        rshmem.free(message)
    expected = (me + n - 1) % n
    if got != expected:
        print(f"ring_shift: PE {me} expected {expected}, got {got}", file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    main()
