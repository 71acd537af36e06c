//! Raw kernel work on modules the runtime or the program loaded: launching a function with
//! raw parameters (`cuLaunchKernel`) and looking up a module's global variable
//! (`cuModuleGetGlobal`). Below `device/module.rs`, which launches through it.

use cudarc::driver::{sys, CudaFunction};

use crate::error::Result;

/// Launches kernel `f` (`cuLaunchKernel`): a `grid` of blocks of `block` threads with `smem`
/// bytes of dynamic shared memory, on `stream`, with raw kernel parameters.
///
/// # Safety
/// `f` and `stream` must belong to the context current on this thread; `args` must match the
/// kernel's parameter list in number, order and types, and every address in them must be
/// valid for what the kernel does with it.
#[allow(clippy::too_many_arguments)]
pub(crate) unsafe fn launch_function(
    call: &'static str,
    f: &CudaFunction,
    grid: (u32, u32, u32),
    block: (u32, u32, u32),
    smem: u32,
    stream: sys::CUstream,
    args: &mut [*mut std::ffi::c_void],
) -> Result<()> {
    // SAFETY: forwarded from the caller (argument layout, live function and stream).
    let r = unsafe {
        sys::cuLaunchKernel(
            f.cu_function(),
            grid.0,
            grid.1,
            grid.2,
            block.0,
            block.1,
            block.2,
            smem,
            stream,
            args.as_mut_ptr(),
            std::ptr::null_mut(),
        )
    };
    crate::cuda::check(r, call, "launching a kernel")
}

/// The address and size of the global variable `name` of a loaded module
/// (`cuModuleGetGlobal`), or None when the module has no such global.
///
/// # Safety
/// `module` must be a `CUmodule` handle loaded in the context current on this thread and not
/// unloaded.
pub(crate) unsafe fn module_global(
    call: &'static str,
    module: usize,
    name: &std::ffi::CStr,
) -> Result<Option<(u64, usize)>> {
    let mut dptr: sys::CUdeviceptr = 0;
    let mut size: usize = 0;
    // SAFETY: the module handle is live (the caller's contract); the out-pointers are live
    // locals; the name is a NUL-terminated string.
    let r = unsafe {
        sys::cuModuleGetGlobal_v2(&mut dptr, &mut size, module as sys::CUmodule, name.as_ptr())
    };
    if r == sys::CUresult::CUDA_ERROR_NOT_FOUND {
        return Ok(None);
    }
    crate::cuda::check(
        r,
        call,
        &format!(
            "looking up the module's {} (cuModuleGetGlobal)",
            name.to_string_lossy()
        ),
    )?;
    Ok(Some((dptr, size)))
}
