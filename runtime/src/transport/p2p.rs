//! The GPU peer-to-peer transport for host-issued operations on the GPU heap.
//!
//! Puts and gets from the host are copy-engine transfers (`cuMemcpy*Async`) on rshmem's internal
//! stream, straight into (or out of) the target GPU's memory mapped in this process; `quiet`
//! synchronizes that stream. Host-issued atomics run as a one-thread kernel on the same stream,
//! so they are atomic with respect to device atomics on the same word (system scope); the old
//! value comes back through pinned host memory.

use std::sync::{Arc, Mutex, OnceLock};

use super::{Amo, AmoOp, Caps, Kind, TransportOps};
use crate::cuda::kernels::{self, Kernels};
use crate::cuda::pinned::Pinned;
use crate::cuda::{copy, Gpu};
use crate::error::{Error, Result};

/// What the GPU peer-to-peer transport can do: kernels reach every GPU of the host by
/// load/store; host-issued puts, gets and atomics are stream-ordered on rshmem's stream.
pub const CAPS: Caps = Caps::LOAD_STORE
    .union(Caps::RMA)
    .union(Caps::AMO)
    .union(Caps::ORDERED);

/// What a failed host put was doing (in its error).
const INTO_HEAP: &str = "copying host memory into the GPU heap";

/// Bytes of pinned memory small host puts are staged through.
const STAGING: usize = 1 << 20;
/// Puts up to this size are staged (truly asynchronous copies from pinned memory); larger ones
/// are copied from the caller's pageable memory by the driver.
const STAGE_MAX: usize = 64 << 10;

/// Pinned staging for small host puts: bytes `[0, used)` may still be read by queued copies.
struct Staging {
    buf: Pinned,
    used: usize,
}

/// Host-side access to the GPU heap.
pub struct P2p {
    /// This PE's GPU.
    pub gpu: Arc<Gpu>,
    result: Mutex<Pinned>,
    staging: Mutex<Staging>,
    /// Host-issued work may be queued on rshmem's stream (cleared by `quiet`).
    pending: std::sync::atomic::AtomicBool,
    internal: OnceLock<std::result::Result<Kernels, String>>,
    state: Arc<Mutex<crate::device::DeviceState>>,
}

crate::debug_fields!(P2p, |p| { gpu: p.gpu });

impl P2p {
    /// Sets up host access to the GPU heap of `gpu`.
    pub fn new(gpu: Arc<Gpu>, state: Arc<Mutex<crate::device::DeviceState>>) -> Result<Self> {
        let p = Pinned::new(&gpu, 64, false, "init")?;
        let st = Pinned::new(&gpu, STAGING, false, "init")?;
        Ok(P2p {
            gpu,
            result: Mutex::new(p),
            staging: Mutex::new(Staging { buf: st, used: 0 }),
            pending: std::sync::atomic::AtomicBool::new(false),
            internal: OnceLock::new(),
            state,
        })
    }

    /// Host → GPU heap copy; `src` may be reused on return. Aligned 4- and 8-byte puts travel
    /// inside the stream command itself (`cuStreamWriteValue`); other small puts are staged
    /// through pinned memory so the copy is truly asynchronous; large ones are copied by the
    /// driver from the caller's memory.
    pub fn put(&self, call: &'static str, dst: usize, src: *const u8, n: usize) -> Result<()> {
        self.gpu.bind(call)?;
        self.mark_pending();
        if (n == 8 && dst % 8 == 0) || (n == 4 && dst % 4 == 0) {
            let mut w = 0u64;
            // SAFETY: src points to n (4 or 8) readable bytes; w has room for 8.
            unsafe { std::ptr::copy_nonoverlapping(src, (&mut w as *mut u64).cast::<u8>(), n) };
            // SAFETY: dst is a checked, aligned word of the mapped GPU heap of the bound context.
            let r = unsafe {
                crate::cuda::stream_write_word(call, INTO_HEAP, &self.gpu.stream, dst as u64, n, w)
            };
            if r.is_ok() {
                return Ok(());
            }
            // Not supported on this memory: fall through to a copy.
        }
        if n <= STAGE_MAX {
            let mut st = self.staging.lock().map_err(|_| Error::State {
                call,
                reason: "a thread panicked during a host put".into(),
            })?;
            if st.used + n > STAGING {
                self.gpu.sync(call)?;
                st.used = 0;
            }
            let at = st.used;
            // SAFETY: [at, at+n) lies inside the pinned staging buffer and no queued copy reads it
            // (everything queued before was synchronized when `used` was last reset).
            let stage = unsafe { st.buf.ptr().add(at) };
            // SAFETY: src has n readable bytes; stage has n writable bytes; they cannot overlap.
            unsafe { std::ptr::copy_nonoverlapping(src, stage, n) };
            st.used = (at + n + 63) & !63;
            // SAFETY: dst..dst+n is a checked, mapped heap range of the bound context; the
            // pinned source stays untouched until the stream is synchronized.
            return unsafe {
                copy::host_to_device(call, INTO_HEAP, dst as u64, stage, n, &self.gpu.stream)
            };
        }
        // SAFETY: dst..dst+n is a checked, mapped heap range of the bound context; src..src+n
        // a live host buffer. For pageable memory the driver copies it to staging before
        // returning.
        unsafe { copy::host_to_device(call, INTO_HEAP, dst as u64, src, n, &self.gpu.stream) }
    }

    /// GPU heap → host copy, complete on return.
    pub fn get(&self, call: &'static str, dst: *mut u8, src: usize, n: usize) -> Result<()> {
        self.gpu.bind(call)?;
        // SAFETY: as in put, reversed; the sync below completes the copy before dst is used.
        unsafe {
            copy::device_to_host(
                call,
                "copying from the GPU heap",
                dst,
                src as u64,
                n,
                &self.gpu.stream,
            )
        }?;
        self.gpu.sync(call)
    }

    /// GPU heap → GPU heap copy (stream-ordered on rshmem's stream).
    pub fn copy(&self, call: &'static str, dst: usize, src: usize, n: usize) -> Result<()> {
        self.gpu.bind(call)?;
        self.mark_pending();
        // SAFETY: both ranges are checked, mapped heap ranges of the bound context.
        unsafe {
            copy::device_to_device(
                call,
                "copying within the GPU heap",
                dst as u64,
                src as u64,
                n,
                &self.gpu.stream,
            )
        }
    }

    /// Zero-fills a GPU heap range.
    pub fn zero(&self, call: &'static str, dst: usize, n: usize) -> Result<()> {
        self.gpu.bind(call)?;
        // SAFETY: checked, mapped heap range of the bound context.
        unsafe {
            copy::fill(
                call,
                "zeroing GPU heap memory",
                dst as u64,
                0,
                n,
                &self.gpu.stream,
            )
        }?;
        self.gpu.sync(call)
    }

    /// Completes every queued operation.
    pub fn quiet(&self, call: &'static str) -> Result<()> {
        use std::sync::atomic::Ordering;
        if !self.pending.load(Ordering::Acquire) {
            return Ok(());
        }
        let mut st = self.staging.lock().map_err(|_| Error::State {
            call,
            reason: "a thread panicked during a host put".into(),
        })?;
        self.pending.store(false, Ordering::Release);
        self.gpu.sync(call)?;
        st.used = 0;
        Ok(())
    }

    /// Records that host-issued work was (or is about to be) queued on rshmem's stream, by this
    /// transport's calls or by others, so the next [`quiet`](P2p::quiet) synchronizes it.
    pub fn mark_pending(&self) {
        self.pending
            .store(true, std::sync::atomic::Ordering::Release);
    }

    /// True if host-issued work may still be queued on rshmem's stream.
    pub fn pending(&self) -> bool {
        self.pending.load(std::sync::atomic::Ordering::Acquire)
    }

    /// The internal kernels, compiled on first use.
    pub fn internal(&self, call: &'static str) -> Result<&Kernels> {
        kernels::load_internal(&self.internal, call, &self.gpu, &self.state)
    }

    /// The internal kernels if they were loaded already.
    pub fn internal_loaded(&self) -> Option<&std::result::Result<Kernels, String>> {
        self.internal.get()
    }

    /// Runs one atomic on a GPU heap word from the host; returns the old value.
    fn amo_impl(&self, call: &'static str, addr: usize, a: Amo) -> Result<u64> {
        if a.op == AmoOp::Fetch {
            // An aligned 4/8-byte copy is a single access: atomic, and cheaper than a kernel.
            let mut w = 0u64;
            self.get(call, (&mut w as *mut u64).cast(), addr, a.size)?;
            return Ok(w);
        }
        let k = self.internal(call)?;
        let res = self.result.lock().map_err(|_| Error::State {
            call,
            reason: "a thread panicked during a host atomic".into(),
        })?;
        // SAFETY: addr is a checked, aligned word of the mapped GPU heap; the result word is
        // pinned host memory (device-accessible through UVA), held locked until read below.
        unsafe { k.launch_amo(call, &self.gpu.stream, a, addr as u64, res.ptr() as u64)? };
        self.gpu.sync(call)?;
        // SAFETY: the kernel finished (stream synchronized) and wrote the pinned word.
        Ok(unsafe { std::ptr::read_volatile(res.ptr().cast::<u64>()) })
    }
}

impl TransportOps for P2p {
    type Addr = usize;

    fn kind(&self) -> Kind {
        Kind::new("p2p", CAPS)
    }

    fn put(&self, call: &'static str, dst: usize, src: *const u8, n: usize) -> Result<()> {
        P2p::put(self, call, dst, src, n)
    }

    fn get(&self, call: &'static str, dst: *mut u8, src: usize, n: usize) -> Result<()> {
        P2p::get(self, call, dst, src, n)
    }

    fn amo(&self, call: &'static str, at: usize, a: Amo) -> Result<u64> {
        self.amo_impl(call, at, a)
    }

    fn fence(&self, _call: &'static str) -> Result<()> {
        // Host-issued operations run in order on one stream.
        Ok(())
    }

    fn quiet(&self, call: &'static str) -> Result<()> {
        P2p::quiet(self, call)
    }
}
