//! Kernels as the host sees them: the checked launch of any kernel of a runtime module
//! (through `cuda/launch.rs`, whose `cuLaunchKernel`/`cuLaunchKernelEx` and
//! `cuModuleGetGlobal` calls are the runtime's only ones); rshmem's own GPU kernels: the internal module
//! (`device/kernels/internal.cu`: host atomics, the stream barrier and signals, the proxy's
//! stream-ordered calls), the one kernel cache every runtime module uses ([`Kernels`]: a loaded
//! module and its kernels looked up once, optionally loaded up front), and the launch of the
//! one-thread atomic kernel shared by the p2p transport and the request target.

use std::sync::{Arc, Mutex, OnceLock};

use cudarc::driver::{sys, CudaFunction, CudaStream, DriverError, LaunchConfig, PushKernelArg};

use crate::cuda::launch::Start;
use crate::cuda::Gpu;
use crate::device::module::Module;
use crate::device::DeviceState;
use crate::error::{Error, Result};
use crate::wire::Amo;

/// Source of the internal module.
pub(crate) const INTERNAL_SOURCE: &str = include_str!("../device/kernels/internal.cu");

/// Every kernel of [`INTERNAL_SOURCE`] (what [`Kernels::preload`] loads when a proxy runs).
pub(crate) const INTERNAL_NAMES: &[&str] = &[
    "rshmem_internal_amo",
    "rshmem_internal_barrier_all",
    "rshmem_internal_signal",
    "rshmem_internal_signal_wait",
    "rshmem_internal_proxy_copy",
    "rshmem_internal_proxy_p",
    "rshmem_internal_quiet",
];

/// A loaded module and its kernels, each looked up once.
pub(crate) struct Kernels {
    /// The module (its device state is kept current by the runtime).
    pub(crate) module: Module,
    funcs: Mutex<Vec<(&'static str, CudaFunction)>>,
}

impl Kernels {
    /// Wraps a loaded module.
    pub(crate) fn new(module: Module) -> Kernels {
        Kernels {
            module,
            funcs: Mutex::new(Vec::new()),
        }
    }

    /// Compiles and loads the internal module for `gpu`.
    pub(crate) fn internal(gpu: &Arc<Gpu>, state: &Mutex<DeviceState>) -> Result<Kernels> {
        Module::load(gpu, INTERNAL_SOURCE, "rshmem_internal", state).map(Kernels::new)
    }

    /// Kernel `name` of the module (looked up on first use).
    pub(crate) fn func(&self, call: &'static str, name: &'static str) -> Result<CudaFunction> {
        let mut f = self.funcs.lock().map_err(|_| Error::State {
            call,
            reason: "kernel cache lock poisoned".into(),
        })?;
        if let Some((_, k)) = f.iter().find(|(n, _)| *n == name) {
            return Ok(k.clone());
        }
        let k = self.module.function(name)?;
        f.push((name, k.clone()));
        Ok(k)
    }

    /// Looks up and loads every kernel in `names` now. CUDA loads kernels lazily, at their first
    /// launch, and loading one may wait until the kernels running on the GPU finish: a first
    /// launch next to a long-running user kernel (or next to a kernel that waits for the proxy,
    /// whose own CUDA calls then wait too) would wait for it. Loading them with the module
    /// moves that wait to the module's first use.
    pub(crate) fn preload(&self, call: &'static str, names: &[&'static str]) -> Result<()> {
        for &name in names {
            let f = self.func(call, name)?;
            // SAFETY: a function handle of a loaded module of the current context; cuFuncLoad
            // only loads it.
            let r = unsafe { sys::cuFuncLoad(f.cu_function()) };
            crate::cuda::check(r, call, &format!("loading kernel {name} (cuFuncLoad)"))?;
        }
        Ok(())
    }

    /// Launches kernel `name` with raw parameters: `blocks` blocks of `threads` threads (one
    /// dimension, no dynamic shared memory) on `stream`, starting as `start` says.
    ///
    /// # Safety
    /// `args` must match the kernel's parameter list, and every address in them must be valid
    /// for what the kernel does with it; a kernel launched [`Start::Overlapping`] keeps that
    /// variant's rules.
    #[allow(clippy::too_many_arguments)]
    pub(crate) unsafe fn launch(
        &self,
        call: &'static str,
        name: &'static str,
        blocks: u32,
        threads: u32,
        stream: &CudaStream,
        args: &mut [*mut std::ffi::c_void],
        start: Start,
    ) -> Result<()> {
        let f = self.func(call, name)?;
        let gpu = self.module.gpu();
        gpu.bind(call)?;
        // Overlapping only where the GPU has programmatic dependent launch.
        let start = if start == Start::Overlapping && !gpu.programmatic_launch() {
            Start::AfterPrevious
        } else {
            start
        };
        let (grid, block) = ((blocks, 1, 1), (threads, 1, 1));
        // SAFETY: forwarded from the caller; the function and stream are live in the module's
        // context, bound above.
        unsafe {
            crate::cuda::launch::launch_function(
                call,
                &f,
                grid,
                block,
                0,
                stream.cu_stream(),
                args,
                start,
            )
        }
    }

    /// Launches `rshmem_internal_amo` (a module built from [`INTERNAL_SOURCE`]) as one thread
    /// on `stream`: the atomic `a` on the aligned word at `addr`, system scope, the old value
    /// written to `out`.
    ///
    /// # Safety
    /// `addr` must be GPU memory of this context (or device-accessible memory) and `out`
    /// device-accessible memory valid for 8 bytes until the kernel finished.
    pub(crate) unsafe fn launch_amo(
        &self,
        call: &'static str,
        stream: &CudaStream,
        a: Amo,
        addr: u64,
        out: u64,
    ) -> Result<()> {
        let name = "rshmem_internal_amo";
        let f = self.func(call, name)?;
        let (op_u, size_u) = (a.op.code() as u32, a.size as u32);
        let mut b = stream.launch_builder(&f);
        b.arg(&op_u)
            .arg(&size_u)
            .arg(&addr)
            .arg(&a.value)
            .arg(&a.cond)
            .arg(&out);
        // SAFETY: rshmem_internal_amo(u32, u32, u64, u64, u64, u64*) in internal.cu; the
        // addresses are the caller's promise.
        launched(call, name, unsafe { b.launch(ONE_THREAD) })
    }
}

/// One thread: the launch of the internal kernels that make one device call.
pub(crate) const ONE_THREAD: LaunchConfig = LaunchConfig {
    grid_dim: (1, 1, 1),
    block_dim: (1, 1, 1),
    shared_mem_bytes: 0,
};

/// The result of a launch through cudarc's launch builder (`stream.launch_builder(&f)
/// .arg(..).launch(cfg)`), as this crate's error naming the call and the kernel.
pub(crate) fn launched<E>(
    call: &'static str,
    name: &str,
    r: std::result::Result<E, DriverError>,
) -> Result<()> {
    r.map(drop).map_err(|e| Error::Cuda {
        call,
        what: format!("launching {name}"),
        code: format!("{e:?}"),
    })
}

/// The internal kernels kept in `cell`, loaded on first use for `gpu` (see [`loaded`]).
pub(crate) fn load_internal<'a>(
    cell: &'a OnceLock<std::result::Result<Kernels, String>>,
    call: &'static str,
    gpu: &Arc<Gpu>,
    state: &Arc<Mutex<DeviceState>>,
) -> Result<&'a Kernels> {
    let k = cell.get_or_init(|| Kernels::internal(gpu, state).map_err(|e| e.to_string()));
    loaded(call, k, "internal")
}

/// An internal module that may have failed to load: the error text is kept and reported to
/// every caller as `Unsupported`.
pub(crate) fn loaded<'a>(
    call: &'static str,
    k: &'a std::result::Result<Kernels, String>,
    what: &str,
) -> Result<&'a Kernels> {
    k.as_ref().map_err(|e| Error::Unsupported {
        call,
        reason: format!("rshmem's {what} GPU kernels are unavailable: {e}"),
    })
}
