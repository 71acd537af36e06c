//! GPU memory as the proxy and the TCP transport's service threads see it: copies between host
//! buffers and this PE's GPU memory, and atomics on GPU heap words, on a stream of their own.
//!
//! The stream is never rshmem's internal stream nor a user stream: a user kernel that waits
//! for a request served here (a device put's completion, a signal from another PE) may be
//! running on those, and work queued behind it would never start. CUDA may still feed this
//! stream and such a user stream through one hardware work queue, which deadlocks the same way
//! (see [`crate::cuda::init_driver`]); so waits for this stream are bounded by
//! `RSHMEM_TIMEOUT` and fail naming that cause instead of hanging.

use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use cudarc::driver::sys;
use cudarc::driver::CudaStream;

use crate::cuda::kernels::{self, Kernels};
use crate::cuda::pinned::Pinned;
use crate::cuda::{check, copy, Gpu};
use crate::device::DeviceState;
use crate::error::{Error, Result};
use crate::wire::{Amo, AmoOp};

/// Access to this PE's GPU memory from host threads, on a private stream.
pub struct GpuMem {
    gpu: Arc<Gpu>,
    stream: Arc<CudaStream>,
    /// Old values of atomics.
    result: Mutex<Pinned>,
    /// The internal kernels (atomics), loaded on first use.
    kernels: OnceLock<std::result::Result<Kernels, String>>,
    state: Arc<Mutex<DeviceState>>,
    /// Asynchronous copies may be queued on the stream.
    pending: std::sync::atomic::AtomicBool,
    /// This PE, and the bound of a wait for the stream (`RSHMEM_TIMEOUT`).
    me: usize,
    timeout: Option<Duration>,
}

/// How long a wait for the stream polls it without yielding the core, then without sleeping.
const SPIN: Duration = Duration::from_micros(200);
const YIELD: Duration = Duration::from_millis(20);

crate::debug_fields!(GpuMem, |g| { gpu: g.gpu });

fn cuda_err(call: &'static str, what: &str, e: cudarc::driver::DriverError) -> Error {
    Error::Cuda {
        call,
        what: what.to_string(),
        code: format!("{e:?}"),
    }
}

impl GpuMem {
    /// Sets up access to `gpu`'s memory for PE `me` with a new stream, whose waits are bounded
    /// by `timeout`. With `atomics`, the atomic kernel
    /// is loaded (and launched once) now, at init: loading a module later installs the device
    /// state on rshmem's stream and may need a context synchronization, and either waits
    /// behind a user kernel or stream wait that is itself waiting for this PE's atomics
    /// (a signal), which deadlocks.
    pub fn new(
        gpu: Arc<Gpu>,
        state: Arc<Mutex<DeviceState>>,
        atomics: bool,
        me: usize,
        timeout: Option<Duration>,
    ) -> Result<Arc<GpuMem>> {
        let call = "init";
        gpu.bind(call)?;
        let stream = gpu
            .ctx
            .new_stream()
            .map_err(|e| cuda_err(call, "creating the proxy's stream", e))?;
        let result = Pinned::new(&gpu, 64, false, call)?;
        let m = Arc::new(GpuMem {
            gpu,
            stream,
            result: Mutex::new(result),
            kernels: OnceLock::new(),
            state,
            pending: std::sync::atomic::AtomicBool::new(false),
            me,
            timeout,
        });
        if atomics {
            let word = {
                let r = m.result.lock().map_err(|_| Error::State {
                    call,
                    reason: "a proxy lock is poisoned".into(),
                })?;
                r.ptr() as u64 + 16
            };
            // A harmless atomic on a word of pinned host memory: loads the kernel for good.
            m.amo(call, word, Amo::fetch(8))?;
        }
        Ok(m)
    }

    fn s(&self) -> sys::CUstream {
        self.stream.cu_stream()
    }

    /// Waits for everything queued on the stream: polls it (spinning, then yielding, then in
    /// short naps), bounded by `RSHMEM_TIMEOUT`.
    pub fn sync(&self, call: &'static str) -> Result<()> {
        use std::sync::atomic::Ordering;
        self.gpu.bind(call)?;
        self.pending.store(false, Ordering::Release);
        let start = Instant::now();
        loop {
            // SAFETY: the stream is alive (owned by self).
            let r = unsafe { sys::cuStreamQuery(self.s()) };
            if r != sys::CUresult::CUDA_ERROR_NOT_READY {
                return check(r, call, "synchronizing the proxy's stream");
            }
            let waited = start.elapsed();
            if self.timeout.is_some_and(|t| waited > t) {
                return Err(Error::Timeout {
                    call,
                    me: self.me,
                    pe: None,
                    what: "a CUDA copy or atomic of rshmem's host threads on this PE's GPU memory \
                           (queued behind GPU work that waits for it: a kernel waiting for this \
                           PE's proxy or a peer, with more work queued on its stream, in the \
                           same hardware work queue; CUDA_DEVICE_MAX_CONNECTIONS, docs/device.md)"
                        .into(),
                    waited,
                });
            }
            if waited < SPIN {
                std::hint::spin_loop();
            } else if waited < YIELD {
                std::thread::yield_now();
            } else {
                std::thread::sleep(Duration::from_micros(50));
            }
        }
    }

    /// Completes queued copies if there are any.
    pub fn flush(&self, call: &'static str) -> Result<()> {
        if self.pending.load(std::sync::atomic::Ordering::Acquire) {
            self.sync(call)?;
        }
        Ok(())
    }

    /// Copies `n` bytes of GPU memory at `src` into host memory at `dst`; complete on return.
    ///
    /// # Safety
    /// `dst` must be valid for `n` bytes of writes; `src..src+n` must be GPU memory of this
    /// context (a bad device address is reported by the driver, not undefined behaviour).
    pub unsafe fn read(&self, call: &'static str, dst: *mut u8, src: u64, n: usize) -> Result<()> {
        self.gpu.bind(call)?;
        // SAFETY: forwarded from the caller; synchronized below before dst is used.
        unsafe {
            copy::device_to_host(
                call,
                "copying from GPU memory (proxy)",
                dst,
                src,
                n,
                &self.stream,
            )
        }?;
        self.sync(call)
    }

    /// Copies `n` bytes of host memory at `src` to GPU memory at `dst`, in stream order; `src`
    /// may be reused on return (pageable sources are staged by the driver; pinned ones must
    /// stay untouched until [`flush`](GpuMem::flush) or [`sync`](GpuMem::sync)).
    ///
    /// # Safety
    /// `src` must be valid for `n` bytes of reads; `dst..dst+n` GPU memory of this context.
    pub unsafe fn write_async(
        &self,
        call: &'static str,
        dst: u64,
        src: *const u8,
        n: usize,
    ) -> Result<()> {
        self.gpu.bind(call)?;
        self.pending
            .store(true, std::sync::atomic::Ordering::Release);
        // A copy even for one aligned word: on H200 an 8-byte cuMemcpyHtoDAsync + synchronize
        // measured 5.7-5.8 us against 6.0 for cuStreamWriteValue64 (perftest proxy_floor).
        // SAFETY: forwarded from the caller.
        unsafe {
            copy::host_to_device(
                call,
                "copying into GPU memory (proxy)",
                dst,
                src,
                n,
                &self.stream,
            )
        }
    }

    /// Locks the result words (old values of atomics) and launches the one-thread atomic kernel
    /// on the stream; the old value goes to result word `slot`. The lock is held until the
    /// caller drops the guard.
    fn launch_amo(
        &self,
        call: &'static str,
        addr: u64,
        a: Amo,
        slot: u64,
    ) -> Result<std::sync::MutexGuard<'_, Pinned>> {
        let res = self.result.lock().map_err(|_| Error::State {
            call,
            reason: "a thread panicked during a proxy atomic".into(),
        })?;
        let k = kernels::load_internal(&self.kernels, call, &self.gpu, &self.state)?;
        self.gpu.bind(call)?;
        let out = res.ptr() as u64 + 8 * slot;
        // SAFETY: addr is GPU memory of this context (checked by the caller) and `out` a word
        // of pinned host memory, device-accessible through UVA, held under the result lock.
        unsafe { k.launch_amo(call, &self.stream, a, addr, out)? };
        Ok(res)
    }

    /// The atomic `a` on the aligned word of `a.size` (4 or 8) bytes at `addr` (GPU memory),
    /// after everything queued before on the stream, atomic with respect to device atomics
    /// (system scope). Returns the old value.
    pub fn amo(&self, call: &'static str, addr: u64, a: Amo) -> Result<u64> {
        let res = self.launch_amo(call, addr, a, 0)?;
        self.sync(call)?;
        // SAFETY: the kernel finished (stream synchronized) and wrote the pinned word.
        Ok(unsafe { std::ptr::read_volatile(res.ptr().cast::<u64>()) })
    }

    /// [`amo`](GpuMem::amo) without waiting and without the old value: queued on the stream in
    /// order after the writes before it; [`flush`](GpuMem::flush) completes it.
    pub fn amo_async(&self, call: &'static str, addr: u64, a: Amo) -> Result<()> {
        self.pending
            .store(true, std::sync::atomic::Ordering::Release);
        if a.op == AmoOp::Set {
            // A set whose old value nobody reads is an aligned write of one word: a stream
            // memory operation (5.7-6 us with its synchronization on H200) instead of a kernel
            // launch (7.6-9.9 us; perftest proxy_floor). The word is written whole, so a
            // concurrent device atomic on it sees either the old or the new value.
            self.gpu.bind(call)?;
            // SAFETY: addr is an aligned word of `size` bytes of this context's GPU memory
            // (checked by the caller); the stream is alive.
            return unsafe {
                crate::cuda::stream_write_word(
                    call,
                    "writing a GPU word (proxy atomic set)",
                    &self.stream,
                    addr,
                    a.size,
                    a.value,
                )
            };
        }
        // The old value goes to a scratch word nobody reads.
        self.launch_amo(call, addr, a, 1).map(drop)
    }
}

/// GPU memory access for the remote transports' targets when the user heap is on a GPU (the TCP
/// transport's service threads, the UCX transport's atomics applied on the target) of PE `me`,
/// its waits bounded by `timeout`; None on the CPU backend.
pub(crate) fn for_user_heap(
    gpu: &Option<Arc<Gpu>>,
    state: &Arc<Mutex<DeviceState>>,
    me: usize,
    timeout: Option<Duration>,
) -> Result<Option<Arc<GpuMem>>> {
    match gpu {
        Some(g) => Ok(Some(GpuMem::new(
            g.clone(),
            state.clone(),
            true,
            me,
            timeout,
        )?)),
        None => Ok(None),
    }
}
