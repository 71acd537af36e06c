// rshmem device library: the umbrella header. Include this one:
//
//     #include "rshmem/rshmem.cuh"
//
// Header-only CUDA C++ (every function is `static __device__ __forceinline__`), usable from
// NVRTC (the runtime embeds these headers; see runtime/src/device/nvrtc.rs) and from nvcc with
// `-I device-lib/include`, without -rdc. Each module that includes it gets its own
// `__constant__ rshmem_device_state rshmem_state`, which the host runtime fills before the
// module's kernels run. Reference: docs/device.md.
//
//   types.cuh    fixed-width integer types (NVRTC has no libc headers)
//   twin.cuh     host/device twins (the same call name in host code and kernels with rshmem.h)
//   state.cuh    rshmem_device_state and the rshmem_state constant
//   ptx.cuh      memory-model primitives: strong loads/stores, fences, system-scope atomics
//   util.cuh     rshmem_my_pe, rshmem_n_pes, rshmem_ptr, constants, translation, checks, scopes
//   rma.cuh      p, g, put, get, putmem, getmem (+ _nbi, _warp, _block)
//   amo.cuh      atomics
//   sync.cuh     rshmem_fence, rshmem_quiet, wait_until*, test*
//   signal.cuh   put_signal, signal_op, signal_fetch, signal_wait_until
//   barrier.cuh  barrier_all, sync_all (+ _warp, _block)
//   team.cuh     device team handles: team_my_pe, team_n_pes, team_translate_pe, team_sync,
//                barrier(team) (+ _warp, _block)
//
// The team collectives (alltoall, broadcast, fcollect, reduce, reducescatter) are in
// "rshmem/coll.cuh", which a module includes after this header when it uses them (it adds about
// a quarter of a second to every NVRTC compile, so modules that do not need it leave it out).
#pragma once

#include "rshmem/types.cuh"
#include "rshmem/twin.cuh"
#include "rshmem/state.cuh"
#include "rshmem/ptx.cuh"
#include "rshmem/util.cuh"
#include "rshmem/rma.cuh"
#include "rshmem/amo.cuh"
#include "rshmem/sync.cuh"
#include "rshmem/signal.cuh"
#include "rshmem/barrier.cuh"
#include "rshmem/team.cuh"
