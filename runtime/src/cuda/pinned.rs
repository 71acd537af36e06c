//! Page-locked ("pinned") host memory: the one pinned-buffer type of the runtime (results of
//! host atomics, the staging buffer of small host puts, the proxy's ring and control block).

use cudarc::driver::sys;

use crate::cuda::{check, Gpu};
use crate::error::Result;

/// Page-locked host memory (cuMemHostAlloc), optionally mapped into the GPU's address space.
pub(crate) struct Pinned {
    ptr: *mut u8,
    len: usize,
}

// SAFETY: the allocation is owned by this value and freed once; users synchronize access.
unsafe impl Send for Pinned {}
// SAFETY: as above; shared use goes through `&self` raw pointers the users order themselves.
unsafe impl Sync for Pinned {}

impl Pinned {
    /// `len` zeroed bytes; `mapped`: also in the GPU's address space (the same address, UVA).
    pub(crate) fn new(gpu: &Gpu, len: usize, mapped: bool, call: &'static str) -> Result<Pinned> {
        gpu.bind(call)?;
        let mut p: *mut std::ffi::c_void = std::ptr::null_mut();
        let flags = if mapped {
            sys::CU_MEMHOSTALLOC_DEVICEMAP | sys::CU_MEMHOSTALLOC_PORTABLE
        } else {
            0
        };
        // SAFETY: valid out-pointer; the driver allocates len bytes.
        let r = unsafe { sys::cuMemHostAlloc(&mut p, len, flags) };
        check(r, call, "cuMemHostAlloc")?;
        // SAFETY: p holds len freshly allocated bytes.
        unsafe { std::ptr::write_bytes(p.cast::<u8>(), 0, len) };
        Ok(Pinned { ptr: p.cast(), len })
    }

    /// The host address.
    pub(crate) fn ptr(&self) -> *mut u8 {
        self.ptr
    }

    /// Bytes.
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// The device address of mapped memory.
    pub(crate) fn device_ptr(&self, call: &'static str) -> Result<u64> {
        let mut d: sys::CUdeviceptr = 0;
        // SAFETY: ptr is a live mapped allocation from cuMemHostAlloc.
        let r = unsafe { sys::cuMemHostGetDevicePointer_v2(&mut d, self.ptr.cast(), 0) };
        check(r, call, "cuMemHostGetDevicePointer")?;
        Ok(d)
    }
}

impl Drop for Pinned {
    fn drop(&mut self) {
        // SAFETY: allocated by cuMemHostAlloc in `new`, freed once.
        unsafe { sys::cuMemFreeHost(self.ptr.cast()) };
    }
}
