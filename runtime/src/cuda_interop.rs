//! Working with `cudarc` directly: symmetric buffers as kernel arguments and as `cudarc` device
//! memory, copies between a program's own `cudarc` memory and a PE's symmetric memory on any
//! stream of the PE's context. (Driver errors convert into [`Error`] with `?`.)
//!
//! * `launch_builder(&f).arg(&buf)` with a [`SymBuf`] passes its symmetric address (this PE's
//!   copy) as a pointer argument, like a `CudaSlice`.
//! * [`SymBuf::device`] gives a [`SymDevice`], which implements `cudarc`'s `DeviceSlice`,
//!   `DevicePtr` and `DevicePtrMut`: `stream.memcpy_htod(&host, &mut view)`,
//!   `stream.memcpy_dtoh(&view, &mut host)`, `stream.memcpy_dtod(&slice, &mut view)` and the
//!   rest of `cudarc`'s API take it.
//! * [`World::put_from_device_on_stream`] / [`World::get_to_device_on_stream`] copy between any
//!   `cudarc` device memory of this PE (a `CudaSlice`, `CudaView`, ...) and a symmetric buffer on
//!   any PE, on any `CudaStream` of this PE's context.
//!
//! Ordering is the program's business, as for all symmetric memory: rshmem records no events
//! on these buffers (peers write them at any time); order the work with streams, `quiet` and
//! barriers.

use std::mem::size_of;
use std::sync::Arc;

use cudarc::driver::{
    sys, CudaStream, DevicePtr, DevicePtrMut, DeviceSlice, LaunchArgs, PushKernelArg, SyncOnDrop,
};

use crate::cuda::copy;
use crate::error::{Error, Result};
use crate::mem::SymBuf;
use crate::types::RmaType;

/// What a failed `put_from_device_on_stream` copy was doing (in its error).
const PUT_WHAT: &str = "copying device memory into symmetric memory (cuMemcpyAsync)";
/// What a failed `get_to_device_on_stream` copy was doing (in its error).
const GET_WHAT: &str = "copying symmetric memory into device memory (cuMemcpyAsync)";
use crate::world::World;

// A pointer argument is pushed as the 8 bytes of the address (see the SAFETY comments below).
const _: () = assert!(std::mem::size_of::<*mut u8>() == std::mem::size_of::<u64>());
const _: () = assert!(std::mem::align_of::<*mut u8>() == std::mem::align_of::<u64>());

/// The address field of a symmetric buffer as the `u64` a kernel parameter of pointer type is.
fn addr_arg<T>(p: &*mut T) -> &u64 {
    // SAFETY: a thin raw pointer and u64 have the same size and alignment (checked above) and
    // every bit pattern is a valid u64; the reference keeps the borrow of `p`.
    unsafe { &*(p as *const *mut T).cast::<u64>() }
}

// SAFETY: pushes a pointer to 8 bytes that live as long as the borrow of the SymBuf ('b: 'a),
// which is what a kernel parameter of pointer type reads. Only GPU-heap addresses mean
// anything to a kernel; a CPU-heap address faults in the kernel (a CUDA error, not memory
// unsafety on the host).
unsafe impl<'a, 'b: 'a, 'w, T: RmaType> PushKernelArg<&'b SymBuf<'w, T>> for LaunchArgs<'a> {
    #[inline(always)]
    fn arg(&mut self, arg: &'b SymBuf<'w, T>) -> &mut Self {
        self.arg(addr_arg(arg.ptr_field()))
    }
}

/// A symmetric buffer on the GPU heap seen as `cudarc` device memory (this PE's copy), from
/// [`SymBuf::device`]. It borrows the buffer, so the buffer cannot be freed while it exists.
#[derive(Debug)]
pub struct SymDevice<'b, T> {
    ptr: *mut T,
    len: usize,
    stream: &'b Arc<CudaStream>,
}

impl<'w, T: RmaType> SymBuf<'w, T> {
    /// This PE's copy as `cudarc` device memory (for `memcpy_*`, `DevicePtr` users, kernel
    /// arguments). `Error::Unsupported` on the CPU backend, where the heap is host memory.
    ///
    /// ```no_run
    /// use rshmem::cudarc::driver::{CudaContext, LaunchConfig, PushKernelArg};
    ///
    /// fn main() -> rshmem::Result<()> {
    ///     let world = rshmem::init()?;
    ///     let gpu = world.gpu().expect("needs the GPU backend");
    ///     let ctx = CudaContext::new(gpu.ordinal)?; // cudarc errors convert with `?`
    ///     let stream = ctx.new_stream()?; // any stream of this PE's context
    ///     let buf = world.calloc::<f32>(1024)?;
    ///     // Host data into this PE's copy, with cudarc.
    ///     stream.memcpy_htod(&vec![1.0f32; 1024], &mut buf.device()?)?;
    ///     // The program's own CudaSlice as the source of a put to the next PE.
    ///     let mine = stream.clone_htod(&vec![2.0f32; 1024])?;
    ///     let next = (world.my_pe() + 1) % world.n_pes();
    ///     world.put_from_device_on_stream(buf.as_ptr(), &mine, 1024, next, &stream)?;
    ///     world.barrier_all_on_stream(&stream)?;
    ///     // The symmetric buffer as a kernel argument (`float *`).
    ///     let module = world.load_module(r#"extern "C" __global__ void twice(float *x) {
    ///         x[threadIdx.x] *= 2.0f; }"#)?;
    ///     let f = module.function("twice")?;
    ///     let cfg = LaunchConfig::for_num_elems(1024);
    ///     // SAFETY: twice(float *) gets this PE's GPU-heap address of 1024 floats.
    ///     unsafe { stream.launch_builder(&f).arg(&buf).launch(cfg) }?;
    ///     // Back into a CudaSlice of this program.
    ///     let mut out = stream.alloc_zeros::<f32>(1024)?;
    ///     world.get_to_device_on_stream(&mut out, buf.as_ptr(), 1024, world.my_pe(), &stream)?;
    ///     assert_eq!(stream.clone_dtoh(&out)?, vec![4.0f32; 1024]);
    ///     world.free(buf)?;
    ///     world.finalize()
    /// }
    /// ```
    pub fn device(&self) -> Result<SymDevice<'_, T>> {
        let gpu = match self.world().gpu() {
            Some(g) if self.world().p2p("SymBuf::device").is_ok() => g,
            _ => {
                return Err(Error::Unsupported {
                    call: "SymBuf::device",
                    reason: "the symmetric heap is in host memory (CPU backend: no GPU, or RSHMEM_BACKEND=cpu); use read/write/to_vec".into(),
                })
            }
        };
        Ok(SymDevice {
            ptr: self.as_ptr(),
            len: self.len(),
            stream: &gpu.stream,
        })
    }
}

impl<T> DeviceSlice<T> for SymDevice<'_, T> {
    fn len(&self) -> usize {
        self.len
    }
    /// rshmem's internal stream of this PE (what `cudarc` uses when it needs one for a
    /// buffer; the copies themselves run on the stream you pass them).
    fn stream(&self) -> &Arc<CudaStream> {
        self.stream
    }
}

impl<T> DevicePtr<T> for SymDevice<'_, T> {
    fn device_ptr<'a>(&'a self, _stream: &'a CudaStream) -> (sys::CUdeviceptr, SyncOnDrop<'a>) {
        // No events: symmetric memory is ordered by the program (streams, quiet, barriers).
        (self.ptr as sys::CUdeviceptr, SyncOnDrop::Sync(None))
    }
}

impl<T> DevicePtrMut<T> for SymDevice<'_, T> {
    fn device_ptr_mut<'a>(
        &'a mut self,
        _stream: &'a CudaStream,
    ) -> (sys::CUdeviceptr, SyncOnDrop<'a>) {
        (self.ptr as sys::CUdeviceptr, SyncOnDrop::Sync(None))
    }
}

// SAFETY: as for &SymBuf: the pushed 8 bytes are the view's address field, borrowed for 'b.
unsafe impl<'a, 'b: 'a, 'c, T> PushKernelArg<&'b SymDevice<'c, T>> for LaunchArgs<'a> {
    #[inline(always)]
    fn arg(&mut self, arg: &'b SymDevice<'c, T>) -> &mut Self {
        self.arg(addr_arg(&arg.ptr))
    }
}

impl World {
    /// Fails unless `stream` belongs to this PE's CUDA context (the device's primary context,
    /// which `CudaContext::new(ordinal)` also returns): rshmem's addresses mean nothing in
    /// another context.
    pub(crate) fn check_stream(&self, call: &'static str, stream: &CudaStream) -> Result<()> {
        let p = self.p2p(call)?;
        if stream.context().cu_ctx() == p.gpu.ctx.cu_ctx() {
            Ok(())
        } else {
            Err(Error::invalid(
                call,
                format!(
                    "the stream belongs to another CUDA context (device {}); use a stream of this PE's context: world.gpu().ctx.new_stream(), or CudaContext::new({})",
                    stream.context().ordinal(),
                    p.gpu.ordinal
                ),
            ))
        }
    }

    /// **One-sided, stream-ordered.** Copies `nelems` elements of this PE's device memory `src`
    /// (any `cudarc` device memory: a `CudaSlice`, a `CudaView`, a [`SymDevice`]) into the
    /// symmetric `dest` on PE `pe`, with the copy engine, on `stream` (any stream of this PE's
    /// context). `src` need not be symmetric. PEs reached only through the proxy (other
    /// hosts, `RSHMEM_DISABLE_P2P`) need a symmetric source: `Error::Unsupported` there.
    pub fn put_from_device_on_stream<T: RmaType, S: DevicePtr<T>>(
        &self,
        dest: *mut T,
        src: &S,
        nelems: usize,
        pe: usize,
        stream: &CudaStream,
    ) -> Result<()> {
        let call = "put_from_device_on_stream";
        let Some((n, d)) =
            self.device_copy_target::<T>(call, src.len(), nelems, dest, pe, stream)?
        else {
            return Ok(());
        };
        let (s, _sync) = src.device_ptr(stream);
        // SAFETY: `dest` was checked against a live allocation of the mapped GPU heap on `pe`;
        // `src` holds at least `n` bytes (its length was checked) in this context.
        unsafe { copy::device_to_device(call, PUT_WHAT, d as u64, s, n, stream) }
    }

    /// **One-sided, stream-ordered.** Copies `nelems` elements of the symmetric `src` on PE
    /// `pe` into this PE's device memory `dest` (any `cudarc` device memory), on `stream` (any
    /// stream of this PE's context). The counterpart of
    /// [`put_from_device_on_stream`](World::put_from_device_on_stream), with the same limits.
    pub fn get_to_device_on_stream<T: RmaType, D: DevicePtrMut<T>>(
        &self,
        dest: &mut D,
        src: *const T,
        nelems: usize,
        pe: usize,
        stream: &CudaStream,
    ) -> Result<()> {
        let call = "get_to_device_on_stream";
        let Some((n, s)) =
            self.device_copy_target::<T>(call, dest.len(), nelems, src, pe, stream)?
        else {
            return Ok(());
        };
        let (d, _sync) = dest.device_ptr_mut(stream);
        // SAFETY: `src` was checked against a live allocation of the mapped GPU heap on `pe`;
        // `dest` holds at least `n` bytes (its length was checked) in this context.
        unsafe { copy::device_to_device(call, GET_WHAT, d, s as u64, n, stream) }
    }

    /// The checks of the two calls above, for a copy of `nelems` elements between a device
    /// buffer of `local_len` elements and the symmetric `sym` on PE `pe`; then the byte count
    /// and `sym`'s address on `pe`, None when there is nothing to copy.
    fn device_copy_target<T>(
        &self,
        call: &'static str,
        local_len: usize,
        nelems: usize,
        sym: *const T,
        pe: usize,
        stream: &CudaStream,
    ) -> Result<Option<(usize, usize)>> {
        let p = self.p2p(call)?;
        self.check_stream(call, stream)?;
        self.check_pe(call, pe)?;
        if nelems > local_len {
            return Err(Error::invalid(
                call,
                format!(
                    "nelems {nelems} is more than the {local_len} elements of the device buffer"
                ),
            ));
        }
        if self.via_proxy(pe) {
            return Err(Error::Unsupported {
                call,
                reason: format!(
                    "PE {pe} is reached through the proxy, which needs a symmetric source and destination; copy through a symmetric buffer (put_on_stream/get_on_stream)"
                ),
            });
        }
        let n = nelems
            .checked_mul(size_of::<T>())
            .ok_or_else(|| Error::invalid(call, format!("nelems {nelems} overflows")))?;
        p.gpu.bind(call)?;
        if n == 0 {
            return Ok(None);
        }
        Ok(Some((n, self.remote(call, sym as usize, n, pe)?)))
    }
}
