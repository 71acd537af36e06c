//! Checked copies and fills of GPU memory: the one place the runtime calls the driver's
//! `cuMemcpy*` and `cuMemset*` (and exports a range as a dma-buf). Each wrapper makes exactly
//! one driver call and returns `Result`, the error naming the rshmem call (`call`) and what
//! was being done (`what`), as [`check`] does.
//!
//! The wrappers do not bind a context or synchronize: the caller binds the context that owns
//! the memory and the stream ([`Gpu::bind`](super::Gpu::bind)) and waits for the stream when
//! the result is needed, so each call site keeps its own order of driver calls.

use std::os::fd::{FromRawFd, OwnedFd};

use cudarc::driver::sys;
use cudarc::driver::CudaStream;

use super::check;
use crate::error::{Error, Result};

/// The stream-ordered wrappers, each `NAME(call, what, A, B, n, stream)`: one driver call
/// `DRIVER(args.., n, stream)` queued on `stream`, its status checked ([`check`]).
macro_rules! on_stream {
    ($(
        $(#[$doc:meta])*
        fn $name:ident($a:ident: $aty:ty, $b:ident: $bty:ty) => $driver:ident($($arg:expr),+);
    )+) => {$(
        $(#[$doc])*
        pub(crate) unsafe fn $name(
            call: &'static str,
            what: &str,
            $a: $aty,
            $b: $bty,
            n: usize,
            stream: &CudaStream,
        ) -> Result<()> {
            // SAFETY: forwarded from the caller; the stream is alive (borrowed).
            let r = unsafe { sys::$driver($($arg,)+ n, stream.cu_stream()) };
            check(r, call, what)
        }
    )+};
}

on_stream! {
    /// Queues on `stream` a copy of `n` bytes of host memory at `src` into GPU memory at `dst`
    /// (`cuMemcpyHtoDAsync`). A pageable source is copied by the driver before it returns; a
    /// pinned one must stay untouched until the stream has run the copy.
    ///
    /// # Safety
    /// `src` must be valid for `n` bytes of reads; `dst..dst+n` must be GPU memory of
    /// `stream`'s context, which is current on this thread.
    fn host_to_device(dst: u64, src: *const u8) => cuMemcpyHtoDAsync_v2(dst, src.cast());

    /// Queues on `stream` a copy of `n` bytes of GPU memory at `src` into host memory at `dst`
    /// (`cuMemcpyDtoHAsync`); `dst` holds the bytes once the stream has run the copy.
    ///
    /// # Safety
    /// `dst` must stay valid for `n` bytes of writes until the stream has run the copy;
    /// `src..src+n` must be GPU memory of `stream`'s context, which is current on this thread.
    fn device_to_host(dst: *mut u8, src: u64) => cuMemcpyDtoHAsync_v2(dst.cast(), src);

    /// Queues on `stream` a copy of `n` bytes from `src` to `dst`, both device-accessible
    /// addresses (GPU memory of this or a peer GPU mapped here, unified addressing):
    /// `cuMemcpyAsync`.
    ///
    /// # Safety
    /// `src..src+n` and `dst..dst+n` must be device-accessible memory of `stream`'s context,
    /// which is current on this thread, and stay so until the stream has run the copy.
    fn device_to_device(dst: u64, src: u64) => cuMemcpyAsync(dst, src);

    /// Queues on `stream` a fill of `n` bytes of GPU memory at `dst` with `value`
    /// (`cuMemsetD8Async`).
    ///
    /// # Safety
    /// `dst..dst+n` must be GPU memory of `stream`'s context, which is current on this thread.
    fn fill(dst: u64, value: u8) => cuMemsetD8Async(dst, value);
}

/// Copies `n` bytes of GPU memory at `src` into host memory at `dst`, complete on return
/// (`cuMemcpyDtoH`: synchronous with respect to the host, ordered after the work of the legacy
/// default stream only; wait for other streams first).
///
/// # Safety
/// `dst` must be valid for `n` bytes of writes; `src..src+n` must be GPU memory of the context
/// current on this thread.
pub(crate) unsafe fn read(
    call: &'static str,
    what: &str,
    dst: *mut u8,
    src: u64,
    n: usize,
) -> Result<()> {
    // SAFETY: forwarded from the caller.
    let r = unsafe { sys::cuMemcpyDtoH_v2(dst.cast(), src, n) };
    check(r, call, what)
}

/// Exports `addr..addr+len`, a mapped range of GPU memory of the context current on this
/// thread, as a dma-buf file descriptor (`cuMemGetHandleForAddressRange` with
/// `CU_MEM_RANGE_HANDLE_TYPE_DMA_BUF_FD`), for an RDMA registration. The error is
/// [`Error::Cuda`] whose `code` is the driver's status (`CUDA_SUCCESS` when the driver
/// succeeded but handed back no descriptor).
#[cfg_attr(not(feature = "verbs"), allow(dead_code))]
pub(crate) fn dma_buf_fd(call: &'static str, addr: usize, len: usize) -> Result<OwnedFd> {
    let mut fd: std::ffi::c_int = -1;
    // SAFETY: `fd` is a valid out-pointer for the int the DMA_BUF_FD handle type returns; the
    // driver only looks the range up (an unmapped one is reported, not undefined behaviour).
    let r = unsafe {
        sys::cuMemGetHandleForAddressRange(
            (&mut fd as *mut std::ffi::c_int).cast(),
            addr as u64,
            len,
            sys::CUmemRangeHandleType::CU_MEM_RANGE_HANDLE_TYPE_DMA_BUF_FD,
            0,
        )
    };
    if r != sys::CUresult::CUDA_SUCCESS || fd < 0 {
        return Err(Error::Cuda {
            call,
            what: format!(
                "exporting {len} bytes of GPU memory at {addr:#x} as a dma-buf \
                 (cuMemGetHandleForAddressRange, DMA_BUF_FD)"
            ),
            code: format!("{r:?}"),
        });
    }
    // SAFETY: the driver returned a fresh descriptor that we now own.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}
