//! Several PEs on one GPU. At init every PE sends its GPU's UUID to the others; the PEs of this
//! host with the same UUID share the device. That is a supported mode (for tests and small
//! machines) when the CUDA MPS daemon serves the GPU: then the PEs' kernels run side by side on
//! the SMs. Without MPS the contexts of different processes time-slice, and a kernel that spins
//! waiting for another PE's kernel only progresses when the GPU switches to that PE's context:
//! correct but very slow, so rshmem warns. The stream collectives size their grids to the PE's
//! share of the SMs (see `docs/mps.md`).

use std::path::PathBuf;

use rshmem_bootstrap::Bootstrap;

use crate::cuda::Gpu;
use crate::error::Result;
use crate::node::Node;

/// How this PE's GPU is shared with the other PEs of its host.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GpuSharing {
    /// PEs of this host (this one included) whose GPU is this PE's GPU; 1 when it has its own.
    pub pes_on_gpu: usize,
    /// Whether an MPS control daemon was found for this process (its pipe directory, from
    /// `CUDA_MPS_PIPE_DIRECTORY` or the default `/tmp/nvidia-mps`, has the daemon's `control`
    /// entry). Only looked at when the GPU is shared; `false` otherwise.
    pub mps: bool,
}

impl Default for GpuSharing {
    fn default() -> Self {
        GpuSharing {
            pes_on_gpu: 1,
            mps: false,
        }
    }
}

/// The UUID of device `ordinal`, or the ordinal itself in the first bytes when the driver cannot
/// say (then PEs of one host compare ordinals, which is right unless they see different
/// device sets).
fn uuid(ordinal: usize) -> [u8; 16] {
    // The driver is initialized: the context of `ordinal` exists.
    crate::cuda::device_uuid("init", ordinal).unwrap_or_else(|_| {
        let mut out = [0u8; 16];
        out[..8].copy_from_slice(&(ordinal as u64).to_le_bytes());
        out[15] = 0xff;
        out
    })
}

/// Whether `id` is a device UUID from the driver (not the ordinal stand-in of [`uuid`]). A UUID
/// names one physical GPU, so equal UUIDs mean the same GPU on the same host even when the PEs
/// are not one node (`RSHMEM_DISABLE_P2P=1` makes every PE its own node).
fn real_uuid(id: &[u8]) -> bool {
    id[15] != 0xff || id[8..15].iter().any(|&b| b != 0)
}

/// Whether PE `p` is on this PE's node (the only PEs an ordinal stand-in can be compared with).
fn on_my_node(node: &Node, p: usize) -> bool {
    node.local_of.get(p).is_some_and(|l| l.is_some())
}

/// The MPS pipe directory this process's CUDA driver connects to.
pub fn mps_pipe_directory() -> PathBuf {
    std::env::var_os("CUDA_MPS_PIPE_DIRECTORY")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/tmp/nvidia-mps"))
}

/// Whether an MPS control daemon is running for this process: its pipe directory holds the
/// daemon's `control` entry (it is removed when the daemon quits). A CUDA context created while
/// it runs is an MPS client.
pub fn mps_daemon_running() -> bool {
    mps_pipe_directory().join("control").exists()
}

/// Collective over all PEs (every PE has a GPU): finds the PEs of this host on the same GPU and,
/// when there are several, whether MPS serves them; warns once per shared GPU (from its first
/// PE) when it does not.
pub(crate) fn detect(boot: &dyn Bootstrap, node: &Node, gpu: &Gpu) -> Result<GpuSharing> {
    let mine = uuid(gpu.ordinal);
    let all = boot.allgather(&mine)?;
    let me = boot.rank();
    let sharing: Vec<usize> = (0..all.len())
        .filter(|&p| all[p] == mine && (real_uuid(&mine) || on_my_node(node, p)))
        .collect();
    let pes_on_gpu = sharing.len().max(1);
    if pes_on_gpu == 1 {
        return Ok(GpuSharing::default());
    }
    let mps = mps_daemon_running();
    let first = sharing.first() == Some(&me);
    if !mps && first {
        tracing::warn!(
            target: "rshmem::init",
            "PEs {sharing:?} share GPU {} but no CUDA MPS daemon was found (no {}): without MPS \
             the processes' kernels time-slice and every wait for another PE crawls; start \
             `nvidia-cuda-mps-control -d` with the same CUDA_MPS_PIPE_DIRECTORY before launching \
             (see docs/mps.md)",
            gpu.ordinal,
            mps_pipe_directory().join("control").display()
        );
    } else if first {
        tracing::info!(
            target: "rshmem::init",
            "PEs {sharing:?} share GPU {} under CUDA MPS ({})",
            gpu.ordinal,
            mps_pipe_directory().display()
        );
    }
    Ok(GpuSharing { pes_on_gpu, mps })
}
