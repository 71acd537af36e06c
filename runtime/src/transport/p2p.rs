//! The GPU peer-to-peer transport for host-issued operations on the GPU heap.
//!
//! Puts and gets from the host are copy-engine transfers (`cuMemcpy*Async`) on rshmem's internal
//! stream, straight into (or out of) the target GPU's memory mapped in this process; `quiet`
//! synchronizes that stream. Host-issued atomics run as a one-thread kernel on the same stream,
//! so they are atomic with respect to device atomics on the same word (system scope); the old
//! value comes back through pinned host memory.

use std::sync::{Arc, Mutex, OnceLock};

use cudarc::driver::sys;

use super::AmoOp;
use crate::cuda::{check, Gpu};
use crate::device::module::Module;
use crate::error::{Error, Result};

/// Source of rshmem's internal kernels (compiled by NVRTC on first use, then cached on disk).
pub const INTERNAL_KERNELS: &str = include_str!("../device/kernels/internal.cu");

/// Pinned host memory for results of host-issued atomics.
struct Pinned(*mut u64);

// SAFETY: the pointer is to page-locked host memory owned by this struct, used under a Mutex.
unsafe impl Send for Pinned {}

impl Drop for Pinned {
    fn drop(&mut self) {
        // SAFETY: allocated by cuMemHostAlloc in `P2p::new`, freed once.
        unsafe { sys::cuMemFreeHost(self.0.cast()) };
    }
}

/// Host-side access to the GPU heap.
pub struct P2p {
    /// This PE's GPU.
    pub gpu: Arc<Gpu>,
    result: Mutex<Pinned>,
    internal: OnceLock<std::result::Result<Module, String>>,
    state: Arc<Mutex<crate::device::DeviceState>>,
}

impl std::fmt::Debug for P2p {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("P2p").field("gpu", &self.gpu).finish()
    }
}

impl P2p {
    /// Sets up host access to the GPU heap of `gpu`.
    pub fn new(gpu: Arc<Gpu>, state: Arc<Mutex<crate::device::DeviceState>>) -> Result<Self> {
        gpu.bind("init")?;
        let mut p: *mut std::ffi::c_void = std::ptr::null_mut();
        // SAFETY: valid out-pointer; 64 bytes of pinned memory.
        check(
            // SAFETY: valid out-pointer; 64 bytes of pinned memory.
            unsafe { sys::cuMemHostAlloc(&mut p, 64, 0) },
            "init",
            "cuMemHostAlloc",
        )?;
        Ok(P2p {
            gpu,
            result: Mutex::new(Pinned(p.cast())),
            internal: OnceLock::new(),
            state,
        })
    }

    fn stream(&self) -> sys::CUstream {
        self.gpu.stream.cu_stream()
    }

    /// Host → GPU heap copy; `src` may be reused on return (pageable sources are staged).
    pub fn put(&self, call: &'static str, dst: usize, src: *const u8, n: usize) -> Result<()> {
        self.gpu.bind(call)?;
        // SAFETY: dst..dst+n is a checked, mapped heap range; src..src+n a live host buffer. For
        // pageable memory the driver copies it to staging before returning.
        check(
            unsafe { sys::cuMemcpyHtoDAsync_v2(dst as u64, src.cast(), n, self.stream()) },
            call,
            "copying host memory into the GPU heap",
        )
    }

    /// GPU heap → host copy, complete on return.
    pub fn get(&self, call: &'static str, dst: *mut u8, src: usize, n: usize) -> Result<()> {
        self.gpu.bind(call)?;
        // SAFETY: as in put, reversed; the sync below completes the copy before dst is used.
        check(
            // SAFETY: as in put, reversed; the sync below completes the copy before dst is used.
            unsafe { sys::cuMemcpyDtoHAsync_v2(dst.cast(), src as u64, n, self.stream()) },
            call,
            "copying from the GPU heap",
        )?;
        self.gpu.sync(call)
    }

    /// GPU heap → GPU heap copy (stream-ordered on rshmem's stream).
    pub fn copy(&self, call: &'static str, dst: usize, src: usize, n: usize) -> Result<()> {
        self.gpu.bind(call)?;
        // SAFETY: both ranges are checked, mapped heap ranges.
        check(
            unsafe { sys::cuMemcpyAsync(dst as u64, src as u64, n, self.stream()) },
            call,
            "copying within the GPU heap",
        )
    }

    /// Zero-fills a GPU heap range.
    pub fn zero(&self, call: &'static str, dst: usize, n: usize) -> Result<()> {
        self.gpu.bind(call)?;
        // SAFETY: checked, mapped heap range.
        check(
            // SAFETY: checked, mapped heap range.
            unsafe { sys::cuMemsetD8Async(dst as u64, 0, n, self.stream()) },
            call,
            "zeroing GPU heap memory",
        )?;
        self.gpu.sync(call)
    }

    /// Completes every queued operation.
    pub fn quiet(&self, call: &'static str) -> Result<()> {
        self.gpu.sync(call)
    }

    /// The internal kernels, compiled on first use.
    pub fn internal(&self, call: &'static str) -> Result<&Module> {
        let m = self.internal.get_or_init(|| {
            Module::load(&self.gpu, INTERNAL_KERNELS, "rshmem_internal", &self.state)
                .map_err(|e| e.to_string())
        });
        m.as_ref().map_err(|e| Error::Unsupported {
            call,
            reason: format!("rshmem's internal GPU kernels are unavailable: {e}"),
        })
    }

    /// The internal kernels if they were loaded already.
    pub fn internal_loaded(&self) -> Option<&std::result::Result<Module, String>> {
        self.internal.get()
    }

    /// Runs one atomic on a GPU heap word from the host; returns the old value.
    pub fn amo(
        &self,
        call: &'static str,
        op: AmoOp,
        addr: usize,
        size: usize,
        value: u64,
        cond: u64,
    ) -> Result<u64> {
        if op == AmoOp::Fetch {
            // An aligned 4/8-byte copy is a single access: atomic, and cheaper than a kernel.
            let mut w = 0u64;
            self.get(call, (&mut w as *mut u64).cast(), addr, size)?;
            return Ok(w);
        }
        let m = self.internal(call)?;
        let res = self.result.lock().map_err(|_| Error::State {
            call,
            reason: "a thread panicked during a host atomic".into(),
        })?;
        let f = m.function("rshmem_internal_amo")?;
        let mut op_u = op as u32;
        let mut size_u = size as u32;
        let mut a = addr as u64;
        let mut v = value;
        let mut c = cond;
        let mut out = res.0 as u64;
        let mut args: [*mut std::ffi::c_void; 6] = [
            (&mut op_u as *mut u32).cast(),
            (&mut size_u as *mut u32).cast(),
            (&mut a as *mut u64).cast(),
            (&mut v as *mut u64).cast(),
            (&mut c as *mut u64).cast(),
            (&mut out as *mut u64).cast(),
        ];
        // SAFETY: the kernel's signature is (u32, u32, u64, u64, u64, u64*) as in internal.cu;
        // the result pointer is pinned host memory (device-accessible through UVA).
        unsafe { m.launch_raw(call, f, (1, 1, 1), (1, 1, 1), 0, self.stream(), &mut args)? };
        self.gpu.sync(call)?;
        // SAFETY: the kernel finished (stream synchronized) and wrote the pinned word.
        Ok(unsafe { std::ptr::read_volatile(res.0) })
    }
}
