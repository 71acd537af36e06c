//! The device half of rshmem: the device state copied into user modules and the embedded
//! header-only CUDA device library (`device-lib/include/rshmem/*.cuh`).

pub mod module;
pub mod nvrtc;
pub mod state;

pub use state::DeviceState;

/// The device library's headers, embedded so NVRTC can compile user kernels without the
/// source tree: (include name, contents).
pub const HEADERS: &[(&str, &str)] = &[
    ("rshmem/types.cuh", include_str!("../../../device-lib/include/rshmem/types.cuh")),
    ("rshmem/state.cuh", include_str!("../../../device-lib/include/rshmem/state.cuh")),
];
