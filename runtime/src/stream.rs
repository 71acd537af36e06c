//! Stream-ordered operations on the GPU heap (`*_on_stream`), and the GPU-facing parts of the
//! host API: the device, kernel modules that use the device library.
//!
//! Every `*_on_stream` call is enqueued on the caller's CUDA stream and returns at once; it takes
//! effect in stream order, after the work queued before it. Errors about arguments are returned
//! immediately, before anything is enqueued. These calls need the GPU backend; on the CPU backend
//! they return `Error::Unsupported`.

use std::sync::Arc;

use cudarc::driver::{CudaStream, PushKernelArg};

use crate::cuda::kernels::{launched, ONE_THREAD};
use crate::cuda::{copy, Gpu};
use crate::device::module::Module;
use crate::device::DeviceState;
use crate::error::{Error, Result};
use crate::transport::{p2p::P2p, Transport};
use crate::types::{Cmp, RmaType, SignalOp};
use crate::world::World;

/// What a failed `*_on_stream` put or get copy was doing (in its error).
const COPY_WHAT: &str = "copying between symmetric buffers (cuMemcpyAsync)";
/// What a failed `p_on_stream` word write was doing (in its error).
const P_WORD_WHAT: &str = "writing the element (cuStreamWriteValue64)";

/// Declares the stream-ordered copies between this PE and PE `pe`, one row a direction: the
/// docs and name of the typed call, those of its byte form, and whether it is a get (`src` on
/// PE `pe`, `dest` on this PE) or a put (the other way round).
macro_rules! copies_on_stream {
    ($($(#[$doc:meta])* $name:ident, $(#[$mdoc:meta])* $mem:ident, get = $get:literal;)+) => {$(
        $(#[$doc])*
        pub fn $name<T: RmaType>(
            &self,
            dest: *mut T,
            src: *const T,
            nelems: usize,
            pe: usize,
            stream: &CudaStream,
        ) -> Result<()> {
            let (dpe, spe) = if $get { (self.me, pe) } else { (pe, self.me) };
            let (dest, src) = ((dest as usize, dpe), (src as usize, spe));
            self.copy_on_stream::<T>(stringify!($name), dest, src, nelems, stream)
        }

        $(#[$mdoc])*
        pub fn $mem(
            &self,
            dest: *mut u8,
            src: *const u8,
            nbytes: usize,
            pe: usize,
            stream: &CudaStream,
        ) -> Result<()> {
            self.$name(dest, src, nbytes, pe, stream)
        }
    )+};
}

impl World {
    /// This PE's GPU when the heap is in GPU memory (its context and rshmem's internal stream).
    pub fn gpu(&self) -> Option<&Arc<Gpu>> {
        self.dev.gpu.as_ref()
    }

    /// **Local.** Hands work that the caller queued on rshmem's internal stream
    /// (`gpu().stream`) to the next quiet: [`World::quiet`] (and every call that implies it:
    /// barriers, finalize) then waits for that stream. For non-blocking host calls whose local
    /// buffer is device memory (the C API's `_nbi` puts and gets), so they need not wait at once.
    /// `Error::Unsupported` on the CPU backend.
    pub fn complete_internal_stream_at_quiet(&self, call: &'static str) -> Result<()> {
        self.p2p(call)?.mark_pending();
        Ok(())
    }

    /// The current device state (what modules see as `rshmem_state`).
    pub fn device_state(&self) -> DeviceState {
        self.dev.state.lock().map(|s| *s).unwrap_or_default()
    }

    /// Compiles CUDA source that may `#include "rshmem/rshmem.cuh"` with NVRTC for this GPU,
    /// loads it and installs the device state (kept current when the heap grows). **Local.**
    pub fn load_module(&self, src: &str) -> Result<Module> {
        self.load_module_with(src, &[])
    }

    /// [`load_module`](World::load_module) with extra NVRTC options (e.g. `-DN=4`).
    pub fn load_module_with(&self, src: &str, options: &[String]) -> Result<Module> {
        let g = self.p2p("load_module")?.gpu.clone();
        let m = Module::load_with(&g, src, "user", options, &self.dev.state)?;
        self.register(&m)?;
        Ok(m)
    }

    /// Loads a CUBIN/fatbin built elsewhere (e.g. nvcc with `-I device-lib/include`) and installs
    /// the device state.
    pub fn load_module_image(&self, image: Vec<u8>) -> Result<Module> {
        let g = self.p2p("load_module")?.gpu.clone();
        let m = Module::from_cubin(&g, image, &self.dev.state)?;
        self.register(&m)?;
        Ok(m)
    }

    pub(crate) fn register(&self, m: &Module) -> Result<()> {
        let mut v = self.dev.modules.lock().map_err(|_| Error::State {
            call: "load_module",
            reason: "module list lock poisoned".into(),
        })?;
        v.push(Arc::downgrade(m.cuda_module()));
        Ok(())
    }

    pub(crate) fn p2p(&self, call: &'static str) -> Result<&P2p> {
        match &self.xport {
            Transport::P2p(p) => Ok(p),
            Transport::Shm => Err(Error::Unsupported {
                call,
                reason: "this call needs the GPU backend (the heap is in host memory: no GPU, or RSHMEM_BACKEND=cpu)".into(),
            }),
        }
    }

    copies_on_stream! {
        /// **One-sided, stream-ordered.** Copies `nelems` elements from the symmetric `src`
        /// (this PE) to the symmetric `dest` on PE `pe` with the copy engine. Like
        /// `putmem_on_stream`.
        put_on_stream,
        /// **One-sided, stream-ordered.** Byte form of [`put_on_stream`](World::put_on_stream).
        putmem_on_stream, get = false;

        /// **One-sided, stream-ordered.** Copies `nelems` elements from the symmetric `src` on
        /// PE `pe` into the symmetric `dest` of this PE. Like `getmem_on_stream`.
        get_on_stream,
        /// **One-sided, stream-ordered.** Byte form of [`get_on_stream`](World::get_on_stream).
        getmem_on_stream, get = true;
    }

    /// Checks both symmetric ranges (address, PE) and enqueues the copy-engine copy.
    fn copy_on_stream<T>(
        &self,
        call: &'static str,
        (dest, dpe): (usize, usize),
        (src, spe): (usize, usize),
        nelems: usize,
        stream: &CudaStream,
    ) -> Result<()> {
        let p = self.p2p(call)?;
        self.check_stream(call, stream)?;
        let n = bytes_of::<T>(call, nelems)?;
        if self.via_proxy(dpe) || self.via_proxy(spe) {
            let (pe, get) = if dpe == self.me {
                (spe, true)
            } else {
                (dpe, false)
            };
            return self.proxy_copy_on_stream(call, dest, src, n, pe, get, stream);
        }
        if n == 0 {
            return self
                .local_index(call, dpe)
                .and(self.local_index(call, spe))
                .map(drop);
        }
        let d = self.remote(call, dest, n, dpe)?;
        let s = self.remote(call, src, n, spe)?;
        p.gpu.bind(call)?;
        // SAFETY: both ranges were checked against live allocations of the mapped GPU heap.
        unsafe { copy::device_to_device(call, COPY_WHAT, d as u64, s as u64, n, stream) }
    }

    /// **One-sided, stream-ordered.** Writes one element to `dest` on PE `pe` (the value is
    /// captured now).
    pub fn p_on_stream<T: RmaType>(
        &self,
        dest: *mut T,
        value: T,
        pe: usize,
        stream: &CudaStream,
    ) -> Result<()> {
        let call = "p_on_stream";
        let p = self.p2p(call)?;
        let size = std::mem::size_of::<T>();
        if self.via_proxy(pe) {
            let bits = word_of(&value);
            return self.proxy_p_on_stream(call, dest as usize, bits, size, pe, stream);
        }
        let d = self.remote(call, dest as usize, size, pe)?;
        p.gpu.bind(call)?;
        if size == 8 && d % 8 == 0 {
            let w = word_of(&value);
            // SAFETY: d is a checked, aligned word of the mapped GPU heap.
            return unsafe {
                crate::cuda::stream_write_word(call, P_WORD_WHAT, stream, d as u64, 8, w)
            };
        }
        // SAFETY: the value lives on our stack; pageable copies are staged before returning.
        unsafe {
            copy::host_to_device(
                call,
                "writing the element (cuMemcpyHtoDAsync)",
                d as u64,
                (&value as *const T).cast(),
                size,
                stream,
            )
        }
    }

    /// **One-sided.** Reads one element of `src` on PE `pe` after the stream's earlier work
    /// (synchronizes the stream).
    pub fn g_on_stream<T: RmaType>(
        &self,
        src: *const T,
        pe: usize,
        stream: &CudaStream,
    ) -> Result<T> {
        let call = "g_on_stream";
        let p = self.p2p(call)?;
        let size = std::mem::size_of::<T>();
        if self.via_proxy(pe) {
            let t = self.target(call, src as usize, size, pe)?;
            synchronize(call, stream)?;
            let mut v = T::default_value();
            self.get_from(call, (&mut v as *mut T).cast(), t, size)?;
            return Ok(v);
        }
        let s = self.remote(call, src as usize, size, pe)?;
        p.gpu.bind(call)?;
        let mut v = T::default_value();
        // SAFETY: checked source range; destination is our local; synchronized below.
        unsafe {
            copy::device_to_host(
                call,
                "reading the element (cuMemcpyDtoHAsync)",
                (&mut v as *mut T).cast(),
                s as u64,
                size,
                stream,
            )
        }?;
        synchronize(call, stream)?;
        Ok(v)
    }

    /// **One-sided, stream-ordered.** Copies `nelems` elements from the symmetric `src` to `dest`
    /// on PE `pe`, then updates the signal `sig` there (the data is visible first). Like
    /// `put_signal_on_stream`.
    #[allow(clippy::too_many_arguments)]
    pub fn put_signal_on_stream<T: RmaType>(
        &self,
        dest: *mut T,
        src: *const T,
        nelems: usize,
        sig: *mut u64,
        signal: u64,
        op: SignalOp,
        pe: usize,
        stream: &CudaStream,
    ) -> Result<()> {
        let call = "put_signal_on_stream";
        let p = self.p2p(call)?;
        self.sig_check(call, sig, pe)?;
        self.put_on_stream(dest, src, nelems, pe, stream)?;
        self.signal_kernel(p, call, sig, signal, op, pe, stream)
    }

    /// **One-sided, stream-ordered.** Updates the signal `sig` on PE `pe` after the stream's
    /// earlier work.
    pub fn signal_op_on_stream(
        &self,
        sig: *mut u64,
        signal: u64,
        op: SignalOp,
        pe: usize,
        stream: &CudaStream,
    ) -> Result<()> {
        let call = "signal_op_on_stream";
        let p = self.p2p(call)?;
        self.sig_check(call, sig, pe)?;
        self.signal_kernel(p, call, sig, signal, op, pe, stream)
    }

    #[allow(clippy::too_many_arguments)]
    fn signal_kernel(
        &self,
        p: &P2p,
        call: &'static str,
        sig: *mut u64,
        signal: u64,
        op: SignalOp,
        pe: usize,
        stream: &CudaStream,
    ) -> Result<()> {
        let name = "rshmem_internal_signal";
        let f = p.internal(call)?.func(call, name)?;
        let (a, o, pe_i) = (
            sig as u64,
            crate::wire::SignalCode::from(op).code(),
            pe as i32,
        );
        let mut b = stream.launch_builder(&f);
        b.arg(&a).arg(&signal).arg(&o).arg(&pe_i);
        // SAFETY: matches `rshmem_internal_signal(uint64_t, uint64_t, int, int)`; the address was
        // checked by the caller.
        launched(call, name, unsafe { b.launch(ONE_THREAD) })
    }

    /// **Local, stream-ordered.** The stream waits until this PE's signal `sig` satisfies
    /// `cmp value` (acquire). Bounded by the device wait timeout.
    pub fn signal_wait_until_on_stream(
        &self,
        sig: *const u64,
        cmp: Cmp,
        value: u64,
        stream: &CudaStream,
    ) -> Result<()> {
        let call = "signal_wait_until_on_stream";
        let p = self.p2p(call)?;
        self.sig_addr(call, sig, self.me)?;
        let name = "rshmem_internal_signal_wait";
        let f = p.internal(call)?.func(call, name)?;
        let (a, c) = (sig as u64, cmp_code(cmp));
        let mut b = stream.launch_builder(&f);
        b.arg(&a).arg(&c).arg(&value);
        // SAFETY: matches `rshmem_internal_signal_wait(uint64_t, int, uint64_t)`.
        launched(call, name, unsafe { b.launch(ONE_THREAD) })
    }

    /// **One-sided, stream-ordered.** Work queued on `stream` after this call starts only once
    /// every host-issued put/atomic of this PE (queued on rshmem's stream) has completed.
    pub fn quiet_on_stream(&self, stream: &CudaStream) -> Result<()> {
        let call = "quiet_on_stream";
        let p = self.p2p(call)?;
        if self.proxy.is_some() {
            self.proxy_quiet_on_stream(call, stream)?;
        }
        if !p.pending() {
            // Nothing host-issued is queued: no dependency to add.
            return Ok(());
        }
        let ev = p
            .gpu
            .stream
            .record_event(None)
            .map_err(|e| cuda_err(call, "recording an event", e))?;
        stream
            .wait(&ev)
            .map_err(|e| cuda_err(call, "waiting on an event", e))
    }

    /// **Collective, stream-ordered.** All PEs' work queued before it on their streams is
    /// complete and visible before any PE's work after it starts. Like `barrier_all_on_stream`.
    pub fn barrier_all_on_stream(&self, stream: &CudaStream) -> Result<()> {
        self.quiet_on_stream(stream)?;
        self.barrier_kernel("barrier_all_on_stream", 1, stream)
    }

    /// **Collective, stream-ordered.** Like [`barrier_all_on_stream`](World::barrier_all_on_stream)
    /// without completing host-issued operations. Like `sync_all_on_stream`.
    pub fn sync_all_on_stream(&self, stream: &CudaStream) -> Result<()> {
        self.barrier_kernel("sync_all_on_stream", 0, stream)
    }

    fn barrier_kernel(&self, call: &'static str, quiet: i32, stream: &CudaStream) -> Result<()> {
        let p = self.p2p(call)?;
        let name = "rshmem_internal_barrier_all";
        let f = p.internal(call)?.func(call, name)?;
        let threads = (self.heap.n_local() as u32).div_ceil(32).max(1) * 32;
        let cfg = cudarc::driver::LaunchConfig {
            grid_dim: (1, 1, 1),
            block_dim: (threads.min(1024), 1, 1),
            shared_mem_bytes: 0,
        };
        let mut b = stream.launch_builder(&f);
        b.arg(&quiet);
        // SAFETY: matches `rshmem_internal_barrier_all(int)`.
        launched(call, name, unsafe { b.launch(cfg) })
    }
}

/// The device library's `RSHMEM_CMP_*` code of a comparison.
pub fn cmp_code(c: Cmp) -> i32 {
    crate::wire::CmpCode::from(c).code()
}

fn bytes_of<T>(call: &'static str, nelems: usize) -> Result<usize> {
    nelems
        .checked_mul(std::mem::size_of::<T>())
        .ok_or_else(|| Error::invalid(call, "nelems × element size overflows"))
}

fn cuda_err(call: &'static str, what: &str, e: cudarc::driver::DriverError) -> Error {
    Error::Cuda {
        call,
        what: what.to_string(),
        code: format!("{e:?}"),
    }
}

/// The bits of `v` (an RMA type: at most 8 bytes) in the low bytes of a word, as the device
/// stores them.
fn word_of<T: RmaType>(v: &T) -> u64 {
    let mut w = 0u64;
    // SAFETY: T is at most 8 bytes (an RMA type); its bytes are copied into the u64.
    unsafe {
        std::ptr::copy_nonoverlapping(
            (v as *const T).cast::<u8>(),
            (&mut w as *mut u64).cast::<u8>(),
            std::mem::size_of::<T>().min(8),
        )
    };
    w
}

/// Waits for `stream`'s work.
fn synchronize(call: &'static str, stream: &CudaStream) -> Result<()> {
    stream
        .synchronize()
        .map_err(|e| cuda_err(call, "synchronizing the stream", e))
}
