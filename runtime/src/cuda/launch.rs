//! Raw kernel work on modules the runtime or the program loaded: launching a function with
//! raw parameters (`cuLaunchKernel`, or `cuLaunchKernelEx` for a programmatic dependent launch)
//! and looking up a module's global variable (`cuModuleGetGlobal`). Below `device/module.rs`
//! and `cuda/kernels.rs`, which launch through it.

use cudarc::driver::{sys, CudaFunction};

use crate::error::Result;

/// When a launched kernel may start relative to the work before it on its stream.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Start {
    /// After the previous work on the stream has finished (`cuLaunchKernel`).
    AfterPrevious,
    /// Programmatic dependent launch (compute capability 9.0 and later; `cuLaunchKernelEx` with
    /// programmatic stream serialization): the kernel may start once every block of the kernel
    /// before it has run `griddepcontrol.launch_dependents` (or exited). It must not read what
    /// that kernel writes except through its own synchronization, and must run
    /// `griddepcontrol.wait` before it exits, so that the work after it on the stream still
    /// starts after both. Needs compute capability 9.0 or later (`Kernels::launch` falls back
    /// to `AfterPrevious` on older GPUs).
    Overlapping,
}

/// Launches kernel `f`: a `grid` of blocks of `block` threads with `smem` bytes of dynamic
/// shared memory, on `stream`, with raw kernel parameters, starting as `start` says.
///
/// # Safety
/// `f` and `stream` must belong to the context current on this thread; `args` must match the
/// kernel's parameter list in number, order and types, and every address in them must be
/// valid for what the kernel does with it. With [`Start::Overlapping`] the kernel must keep
/// that variant's rules.
#[allow(clippy::too_many_arguments)]
pub(crate) unsafe fn launch_function(
    call: &'static str,
    f: &CudaFunction,
    grid: (u32, u32, u32),
    block: (u32, u32, u32),
    smem: u32,
    stream: sys::CUstream,
    args: &mut [*mut std::ffi::c_void],
    start: Start,
) -> Result<()> {
    let r = if start == Start::Overlapping {
        let mut attr = sys::CUlaunchAttribute {
            id: sys::CUlaunchAttributeID::CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION,
            pad: [0; 4],
            // SAFETY: an all-zero union is a valid value of every member (plain integers).
            value: unsafe { std::mem::zeroed() },
        };
        attr.value.programmaticStreamSerializationAllowed = 1;
        let config = sys::CUlaunchConfig {
            gridDimX: grid.0,
            gridDimY: grid.1,
            gridDimZ: grid.2,
            blockDimX: block.0,
            blockDimY: block.1,
            blockDimZ: block.2,
            sharedMemBytes: smem,
            hStream: stream,
            attrs: &mut attr,
            numAttrs: 1,
        };
        // SAFETY: forwarded from the caller (argument layout, live function and stream); the
        // configuration and its one attribute are live locals.
        unsafe {
            sys::cuLaunchKernelEx(
                &config,
                f.cu_function(),
                args.as_mut_ptr(),
                std::ptr::null_mut(),
            )
        }
    } else {
        // SAFETY: forwarded from the caller (argument layout, live function and stream).
        unsafe {
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
        }
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
