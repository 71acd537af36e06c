//! The device half of rshmem: the device state copied into user modules, the embedded
//! header-only CUDA device library (`device-lib/include/rshmem/*.cuh` and `type_lists.h`), [`nvrtc`], which
//! compiles user kernels against it, and [`module`], which loads them.

pub mod module;
pub mod nvrtc;
pub mod sharing;
pub mod state;
pub mod units;

pub use state::DeviceState;

/// The device library's headers, embedded so NVRTC can compile user kernels without the
/// source tree: (include name, contents). User code includes `rshmem/rshmem.cuh`.
pub const HEADERS: &[(&str, &str)] = &[
    (
        "rshmem/type_lists.h",
        include_str!("../../device-include/rshmem/type_lists.h"),
    ),
    (
        "rshmem/types.cuh",
        include_str!("../../device-include/rshmem/types.cuh"),
    ),
    (
        "rshmem/twin.cuh",
        include_str!("../../device-include/rshmem/twin.cuh"),
    ),
    (
        "rshmem/state.cuh",
        include_str!("../../device-include/rshmem/state.cuh"),
    ),
    (
        "rshmem/ptx.cuh",
        include_str!("../../device-include/rshmem/ptx.cuh"),
    ),
    (
        "rshmem/util.cuh",
        include_str!("../../device-include/rshmem/util.cuh"),
    ),
    (
        "rshmem/team.cuh",
        include_str!("../../device-include/rshmem/team.cuh"),
    ),
    (
        "rshmem/coll.cuh",
        include_str!("../../device-include/rshmem/coll.cuh"),
    ),
    (
        "rshmem/proxy.cuh",
        include_str!("../../device-include/rshmem/proxy.cuh"),
    ),
    (
        "rshmem/rma.cuh",
        include_str!("../../device-include/rshmem/rma.cuh"),
    ),
    (
        "rshmem/amo.cuh",
        include_str!("../../device-include/rshmem/amo.cuh"),
    ),
    (
        "rshmem/sync.cuh",
        include_str!("../../device-include/rshmem/sync.cuh"),
    ),
    (
        "rshmem/signal.cuh",
        include_str!("../../device-include/rshmem/signal.cuh"),
    ),
    (
        "rshmem/barrier.cuh",
        include_str!("../../device-include/rshmem/barrier.cuh"),
    ),
    (
        "rshmem/ep.cuh",
        include_str!("../../device-include/rshmem/ep.cuh"),
    ),
    (
        "rshmem/rshmem.cuh",
        include_str!("../../device-include/rshmem/rshmem.cuh"),
    ),
];
