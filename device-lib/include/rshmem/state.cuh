// rshmem device state: the one struct the host runtime copies into every module that includes
// the device library (as the __constant__ variable `rshmem_state`). Its layout is mirrored by
// runtime/src/device/state.rs; both sides assert the size and every field offset.
#pragma once

#include "rshmem/types.cuh"

#define RSHMEM_DEVICE_STATE_VERSION 2u

// Offsets inside every PE's slice of the GPU heap reserved for the runtime (the user heap
// starts at heap_user_start).
#define RSHMEM_INTERNAL_BARRIER_EPOCH 0x0ull      // u64: this PE's device barrier epoch
#define RSHMEM_INTERNAL_BARRIER_FLAGS 0x1000ull   // u64[RSHMEM_MAX_LOCAL_PES], written by peers
#define RSHMEM_MAX_LOCAL_PES 512
#define RSHMEM_INTERNAL_TEAM_TABLE 0x10000ull     // rshmem_team_desc[RSHMEM_MAX_TEAMS] by team slot
#define RSHMEM_MAX_TEAMS 4096
#define RSHMEM_INTERNAL_PE_TABLE 0x100000ull      // int32[n_pes]: local index of each PE, -1 if remote
#define RSHMEM_INTERNAL_TEAM_SYNC 0x200000ull     // per-team sync blocks (team.cuh), by team slot
#define RSHMEM_TEAM_SYNC_STRIDE 0x2000ull         // bytes of one team sync block
// heap_user_start of a GPU heap: RSHMEM_INTERNAL_TEAM_SYNC + RSHMEM_MAX_TEAMS * stride = 34 MiB

// flags bits
#define RSHMEM_STATE_FLAG_DEBUG 0x1ull
// The PEs of this host are PEs (my_pe - my_local) .. (my_pe - my_local + n_local - 1) with local
// indices 0 .. n_local-1 in that order, and every other PE is on another host (true of every
// single-host job). Device calls then translate addresses without reading pe_local_table (the
// table read is an L2 round trip after every acquire, which invalidates L1). Optional: without
// it the table is used.
#define RSHMEM_STATE_FLAG_CONTIGUOUS 0x2ull

typedef struct rshmem_device_state {
    uint32_t version;          // RSHMEM_DEVICE_STATE_VERSION
    uint32_t size;             // sizeof(rshmem_device_state)
    int32_t my_pe;
    int32_t n_pes;
    int32_t my_local;          // index of this PE among the PEs of its host
    int32_t n_local;
    uint64_t heap_base;        // start of local PE 0's slice (same address in every process)
    uint64_t slice;            // bytes of address space per local PE (whole GiB, see slice_delta)
    uint64_t heap_user_start;  // first offset of the user heap in a slice
    uint64_t heap_mapped;      // bytes mapped per slice (grows)
    uint64_t pe_local_table;   // device address of int32[n_pes]
    uint64_t timeout_ns;       // device wait timeout (globaltimer ns); 0 waits forever
    uint64_t flags;            // RSHMEM_STATE_FLAG_*
    uint64_t proxy_fifo;       // host-mapped request ring of the proxy (0: no proxy)
    uint64_t proxy_ctrl;       // host-mapped proxy control block (counters)
    uint64_t proxy_slots;      // requests in the ring (a power of two; 0: no proxy)
    uint64_t team_table;       // device address of the team descriptors (0: none yet)
    uint64_t team_count;       // descriptors in the table
    uint64_t heap_reg_start;   // lowest slice offset of a registered user buffer (0: none)
    uint64_t reserved[1];
} rshmem_device_state;

static_assert(sizeof(rshmem_device_state) == 136, "rshmem_device_state size");
static_assert(offsetof(rshmem_device_state, my_pe) == 8, "my_pe offset");
static_assert(offsetof(rshmem_device_state, my_local) == 16, "my_local offset");
static_assert(offsetof(rshmem_device_state, heap_base) == 24, "heap_base offset");
static_assert(offsetof(rshmem_device_state, slice) == 32, "slice offset");
static_assert(offsetof(rshmem_device_state, heap_user_start) == 40, "heap_user_start offset");
static_assert(offsetof(rshmem_device_state, heap_mapped) == 48, "heap_mapped offset");
static_assert(offsetof(rshmem_device_state, pe_local_table) == 56, "pe_local_table offset");
static_assert(offsetof(rshmem_device_state, timeout_ns) == 64, "timeout_ns offset");
static_assert(offsetof(rshmem_device_state, flags) == 72, "flags offset");
static_assert(offsetof(rshmem_device_state, proxy_fifo) == 80, "proxy_fifo offset");
static_assert(offsetof(rshmem_device_state, proxy_ctrl) == 88, "proxy_ctrl offset");
static_assert(offsetof(rshmem_device_state, proxy_slots) == 96, "proxy_slots offset");
static_assert(offsetof(rshmem_device_state, team_table) == 104, "team_table offset");
static_assert(offsetof(rshmem_device_state, team_count) == 112, "team_count offset");
static_assert(offsetof(rshmem_device_state, heap_reg_start) == 120, "heap_reg_start offset");
static_assert(offsetof(rshmem_device_state, reserved) == 128, "reserved offset");

// Without separable compilation (nvcc without -rdc, and NVRTC) every module has its own copy;
// the host runtime fills each before the module's kernels run. The name is not mangled (global
// namespace variable), so the runtime also finds it in a module it loads itself
// (cuModuleGetGlobal). Before init it is all zero (version 0), and device calls that would touch
// memory trap with a message.
//
// With separable compilation (nvcc -rdc=true / -dc, __CUDACC_RDC__) the device link makes one
// program-wide module, so the state must exist exactly once: the header only declares it, and
// the static device library librshmem_device.a (device-lib/src/rshmem_device.cu, built by
// scripts/install-c) defines it together with the one state updater of the program. Such
// programs link it at their device link: nvcc -rdc=true a.o b.o -lrshmem_device -lrshmem
// (NVSHMEM's name, -lnvshmem_device, is the same archive in PREFIX/lib/nvshmem).
#if defined(__CUDACC_RDC__) && !defined(__CUDACC_RTC__) && !defined(RSHMEM_DEVICE_LIBRARY_BUILD)
#define RSHMEM_STATE_IN_DEVICE_LIBRARY 1
extern __constant__ rshmem_device_state rshmem_state;
// Every -rdc unit refers to this host symbol of librshmem_device.a, so the linker takes the
// library's host half (the registration of the state and its updater) into the program, and a
// program that forgot the library fails to link with this name in the message.
extern "C" int rshmem_rdc_program_needs_librshmem_device;
namespace {
__attribute__((used)) int* const rshmemi_device_library_ref =
    &rshmem_rdc_program_needs_librshmem_device;
}  // namespace
#else
#define RSHMEM_STATE_IN_DEVICE_LIBRARY 0
__constant__ rshmem_device_state rshmem_state;
#endif

// nvcc translation units (not NVRTC): each one registers, when the program starts, a function
// that copies a device state into its own rshmem_state with the program's CUDA runtime. The
// rshmem runtime (librshmem, or the Rust crate) keeps the list and calls every function at init,
// after every heap growth and at finalize (a zero state, so kernels launched after finalize trap
// instead of writing into unmapped memory), and at once for a unit registered later (a library
// loaded after init). So no call per module is needed. The registration function is a weak
// reference unless the C host API is included (RSHMEM_HOST_API): a program that drives the state
// itself without linking rshmem (device-lib/tests/gpu_selftest.cu) still links. Define
// RSHMEM_NO_STATE_REGISTRAR to leave a unit out. Under -rdc the units have no updater of their
// own: librshmem_device.a registers the program's one state, once.
#if defined(__CUDACC__) && !defined(__CUDACC_RTC__)
// Copies `size` bytes of device state into a unit's rshmem_state on `stream` (a cudaStream_t
// of the runtime's context, current on the calling thread) and waits for it. Returns a
// cudaError_t value, or -1 when `size` is not this unit's state size (device library and
// runtime versions differ). Declared in every nvcc unit (librshmem_device.a's registrar under
// -rdc uses the same type).
typedef int (*rshmem_state_updater_fn)(const void* state, size_t size, void* stream);
#endif
#if defined(__CUDACC__) && !defined(__CUDACC_RTC__) && !defined(RSHMEM_NO_STATE_REGISTRAR) && \
    !RSHMEM_STATE_IN_DEVICE_LIBRARY
#if defined(RSHMEM_HOST_API)
extern "C" int rshmem_device_register_state_updater(rshmem_state_updater_fn fn);
#else
extern "C" __attribute__((weak)) int rshmem_device_register_state_updater(
    rshmem_state_updater_fn fn);
#endif
namespace {
int rshmemi_update_state(const void* state, size_t size, void* stream) {
    if (size != sizeof(rshmem_device_state)) return -1;
    cudaError_t e = cudaMemcpyToSymbolAsync(rshmem_state, state, size, 0,
                                            cudaMemcpyHostToDevice, (cudaStream_t)stream);
    if (e == cudaSuccess) e = cudaStreamSynchronize((cudaStream_t)stream);
    return (int)e;
}
struct rshmemi_state_registrar {
    rshmemi_state_registrar() {
#if defined(RSHMEM_HOST_API)
        (void)rshmem_device_register_state_updater(&rshmemi_update_state);
#else
        if (&rshmem_device_register_state_updater != 0) {
            (void)rshmem_device_register_state_updater(&rshmemi_update_state);
        }
#endif
    }
};
rshmemi_state_registrar rshmemi_state_registrar_instance;
}  // namespace
#endif
