//! User CUDA kernels from Python: compiled with the runtime's NVRTC path
//! (`World::load_module_with`, which puts the device library on the include path and installs
//! the device state) and launched on the caller's stream with packed arguments.

use std::ffi::c_void;

use pyo3::prelude::*;

use rt::cudarc::driver::sys;

use crate::{err, rt_err, state};

/// A loaded CUDA module (`rshmem.Kernel` holds one).
#[pyclass(module = "rshmem._rshmem", name = "Module", frozen)]
pub(crate) struct Module {
    inner: rt::Module,
}

/// Compiles `source` (which may `#include "rshmem/rshmem.cuh"`) with NVRTC for this PE's GPU
/// and loads it (local). `options` are extra NVRTC options (`-DN=4`, `-lineinfo`).
#[pyfunction]
#[pyo3(signature = (source, options=Vec::new()))]
pub(crate) fn load_module(
    py: Python<'_>,
    source: String,
    options: Vec<String>,
) -> PyResult<Module> {
    let call = "rshmem.Kernel";
    let st = state(call)?;
    if st.world.gpu().is_none() {
        return Err(err(
            call,
            "kernels need the GPU backend, and this PE runs on the CPU backend (no CUDA GPU \
             visible, or RSHMEM_BACKEND=cpu)",
        ));
    }
    let w = &st.world;
    let inner = crate::detached(py, || w.load_module_with(&source, &options))?;
    Ok(Module { inner })
}

#[pymethods]
impl Module {
    /// The byte size of each parameter of kernel `name`, in order.
    fn param_sizes(&self, name: &str) -> PyResult<Vec<usize>> {
        let f = self.inner.function(name).map_err(rt_err)?;
        let mut sizes = Vec::new();
        for i in 0.. {
            let (mut off, mut size) = (0usize, 0usize);
            // SAFETY: a live function handle and valid out-pointers; an index past the last
            // parameter returns CUDA_ERROR_INVALID_VALUE.
            let r = unsafe { sys::cuFuncGetParamInfo(f.cu_function(), i, &mut off, &mut size) };
            if r != sys::CUresult::CUDA_SUCCESS {
                break;
            }
            sizes.push(size);
        }
        Ok(sizes)
    }

    /// Launches kernel `name` on the stream `stream` (a `CUstream` handle) with `args`, each the
    /// bytes of one parameter (the Python half packs them to `param_sizes`).
    #[pyo3(signature = (name, grid, block, args, shared_mem=0, stream=0))]
    #[allow(clippy::too_many_arguments)]
    fn launch(
        &self,
        py: Python<'_>,
        name: &str,
        grid: (u32, u32, u32),
        block: (u32, u32, u32),
        args: Vec<Vec<u8>>,
        shared_mem: u32,
        stream: usize,
    ) -> PyResult<()> {
        let call = "rshmem.Kernel.launch";
        let sizes = self.param_sizes(name)?;
        if sizes.len() != args.len() {
            return Err(err(
                call,
                format!(
                    "kernel {name} takes {} parameters, {} given",
                    sizes.len(),
                    args.len()
                ),
            ));
        }
        for (i, (a, &s)) in args.iter().zip(&sizes).enumerate() {
            if a.len() != s {
                return Err(err(
                    call,
                    format!(
                        "parameter {i} of kernel {name} is {s} bytes, the argument {}",
                        a.len()
                    ),
                ));
            }
        }
        if [grid.0, grid.1, grid.2, block.0, block.1, block.2].contains(&0) {
            return Err(err(call, "grid and block dimensions must be at least 1"));
        }
        let f = self.inner.function(name).map_err(rt_err)?;
        // Parameters copied into 8-byte aligned storage (cuLaunchKernel reads each through its
        // pointer).
        let mut store: Vec<Vec<u64>> = args
            .iter()
            .map(|a| {
                let mut v = vec![0u64; a.len().div_ceil(8).max(1)];
                // SAFETY: `v` holds at least `a.len()` bytes; u64 storage has no invalid bytes.
                unsafe {
                    std::ptr::copy_nonoverlapping(a.as_ptr(), v.as_mut_ptr().cast::<u8>(), a.len())
                };
                v
            })
            .collect();
        let mut ptrs: Vec<*mut c_void> = store.iter_mut().map(|v| v.as_mut_ptr().cast()).collect();
        let m = &self.inner;
        crate::detached(py, || {
            // SAFETY: the argument count and sizes match the kernel's parameters (checked
            // above); pointer arguments are the data pointers of the tensors the caller passed
            // (kept alive by the caller for the kernel's duration, as with any CUDA launch).
            unsafe {
                m.launch_raw(
                    "rshmem.Kernel.launch",
                    f,
                    grid,
                    block,
                    shared_mem,
                    stream as sys::CUstream,
                    &mut ptrs,
                )
            }
        })
    }
}
