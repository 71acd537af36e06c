//! User (and internal) CUDA modules that use the device library: compile with NVRTC, load into
//! this PE's context, install the device state, launch.

use std::sync::{Arc, Mutex};

use cudarc::driver::sys::CUstream;
use cudarc::driver::{CudaFunction, CudaModule};

use super::nvrtc::{compile_cubin, CompileOptions};
use super::DeviceState;
use crate::cuda::launch::Start;
use crate::cuda::Gpu;
use crate::error::{Error, Result};

/// Name of the device-state variable every module that includes the library defines.
pub const STATE_SYMBOL: &str = "rshmem_state";

/// A loaded CUDA module whose `rshmem_state` holds this PE's device state.
#[derive(Clone)]
pub struct Module {
    inner: Arc<CudaModule>,
    gpu: Arc<Gpu>,
    has_state: bool,
}

crate::debug_fields!(Module, |m| { has_state: m.has_state });

impl Module {
    /// Wraps an already loaded module (state installation, launches).
    pub fn wrap(gpu: &Arc<Gpu>, inner: Arc<CudaModule>) -> Module {
        Module {
            inner,
            gpu: gpu.clone(),
            has_state: true,
        }
    }

    /// Compiles `src` (which may `#include "rshmem/rshmem.cuh"`) for this GPU, loads it and
    /// installs the device state.
    pub fn load(
        gpu: &Arc<Gpu>,
        src: &str,
        name: &str,
        state: &Mutex<DeviceState>,
    ) -> Result<Module> {
        Self::load_with(gpu, src, name, &[], state)
    }

    /// [`load`](Module::load) with extra NVRTC options (e.g. `-DN=4`, `-lineinfo`).
    pub fn load_with(
        gpu: &Arc<Gpu>,
        src: &str,
        name: &str,
        options: &[String],
        state: &Mutex<DeviceState>,
    ) -> Result<Module> {
        let opts = CompileOptions {
            arch: gpu.arch.clone(),
            options: options.to_vec(),
            name: name.to_string(),
        };
        let cubin = compile_cubin(src, &opts)?;
        Self::from_cubin(gpu, cubin, state)
    }

    /// Loads an already compiled CUBIN/fatbin/PTX image and installs the device state.
    pub fn from_cubin(
        gpu: &Arc<Gpu>,
        image: Vec<u8>,
        state: &Mutex<DeviceState>,
    ) -> Result<Module> {
        let call = "load_module";
        gpu.bind(call)?;
        let inner = gpu
            .ctx
            .load_module(cudarc::nvrtc::Ptx::from_binary(image))
            .map_err(|e| Error::Cuda {
                call,
                what: "loading a module".into(),
                code: format!("{e:?}"),
            })?;
        let mut m = Module {
            inner,
            gpu: gpu.clone(),
            has_state: false,
        };
        let st = *state.lock().map_err(|_| Error::State {
            call,
            reason: "device state lock poisoned".into(),
        })?;
        m.has_state = m.install_state(&st)?;
        Ok(m)
    }

    /// Copies `st` into the module's `rshmem_state`; false if the module does not include the
    /// device library.
    pub fn install_state(&self, st: &DeviceState) -> Result<bool> {
        let call = "load_module";
        self.gpu.bind(call)?;
        let Ok(mut view) = self.inner.get_global(STATE_SYMBOL, &self.gpu.stream) else {
            return Ok(false);
        };
        let bytes = st.as_bytes();
        if cudarc::driver::DeviceSlice::len(&view) != bytes.len() {
            return Err(Error::invalid(
                call,
                format!(
                    "the module's rshmem_state is {} bytes but this runtime's device state is {} (device library and runtime versions differ)",
                    cudarc::driver::DeviceSlice::len(&view),
                    bytes.len()
                ),
            ));
        }
        self.gpu
            .stream
            .memcpy_htod(bytes, &mut view)
            .map_err(|e| Error::Cuda {
                call,
                what: "installing the device state".into(),
                code: format!("{e:?}"),
            })?;
        self.gpu.sync(call)?;
        Ok(true)
    }

    /// A kernel of the module.
    pub fn function(&self, name: &str) -> Result<CudaFunction> {
        self.inner.load_function(name).map_err(|e| Error::Cuda {
            call: "function",
            what: format!("looking up kernel {name:?}"),
            code: format!("{e:?}"),
        })
    }

    /// The cudarc module (for `CudaStream::launch_builder` and globals).
    pub fn cuda_module(&self) -> &Arc<CudaModule> {
        &self.inner
    }

    /// Launches `f` with raw kernel parameters.
    ///
    /// # Safety
    /// `args` must match the kernel's parameter list in number, order and types, and every
    /// pointer argument must be valid for what the kernel does with it.
    #[allow(clippy::too_many_arguments)]
    pub unsafe fn launch_raw(
        &self,
        call: &'static str,
        f: CudaFunction,
        grid: (u32, u32, u32),
        block: (u32, u32, u32),
        smem: u32,
        stream: CUstream,
        args: &mut [*mut std::ffi::c_void],
    ) -> Result<()> {
        self.gpu.bind(call)?;
        // SAFETY: forwarded from the caller (argument layout) and the function/stream are live
        // in this module's context, bound above.
        unsafe {
            crate::cuda::launch::launch_function(
                call,
                &f,
                grid,
                block,
                smem,
                stream,
                args,
                Start::AfterPrevious,
            )
        }
    }

    /// The GPU whose context holds this module.
    pub(crate) fn gpu(&self) -> &Arc<Gpu> {
        &self.gpu
    }
}
