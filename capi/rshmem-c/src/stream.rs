//! The stream-ordered calls (`rshmemx_*_on_stream`): each checks that the PE runs on the GPU
//! backend and that the stream belongs to its device's primary context, wraps the program's
//! `cudaStream_t` (the driver's `CUstream`) as a borrowed cudarc stream, and calls the
//! runtime's `*_on_stream` method. They return a status code; nothing is enqueued on error.

#![allow(clippy::too_many_arguments)]

use std::ffi::{c_int, c_void};
use std::sync::Arc;

use rt::cudarc::driver::sys;
use rt::cudarc::driver::{CudaStream, DevicePtr, DevicePtrMut, DeviceSlice, SyncOnDrop};
use rt::RmaType;

use capi_core::{nonneg, Way};

use crate::memory::pe;
use crate::{cmp_of, fail, invalid, sigop_of, status, CResult, Code, Rt};

/// The C `cudaStream_t`.
pub type CudaStreamT = *mut c_void;

/// Runs `f` with the program's stream wrapped for this PE's GPU; the status code.
pub(crate) fn on_stream(
    call: &'static str,
    s: CudaStreamT,
    f: impl FnOnce(&Rt, &Arc<CudaStream>) -> CResult<()>,
) -> c_int {
    status(call, |rt| {
        let Some(g) = rt.world.gpu() else {
            return fail(
                Code::Unsupported,
                "stream-ordered calls need the GPU backend, and this PE runs on the CPU backend \
                 (no CUDA GPU visible, or RSHMEM_BACKEND=cpu)",
            );
        };
        g.bind(call)?;
        let mut ctx: sys::CUcontext = std::ptr::null_mut();
        // SAFETY: a plain query with a valid out-pointer; a stream handle the program passes
        // is one of its live streams (or 0, the default stream of the current context).
        let r = unsafe { sys::cuStreamGetCtx(s as sys::CUstream, &mut ctx) };
        if r != sys::CUresult::CUDA_SUCCESS {
            return fail(
                Code::Cuda,
                format!(
                    "cuStreamGetCtx on the stream failed ({r:?}){}",
                    rt::cuda::stream_query_hint(&format!("{r:?}"))
                ),
            );
        }
        if ctx != g.ctx.cu_ctx() {
            return invalid(format!(
                "the stream belongs to another CUDA context than this PE's (the primary context \
                 of device {}): create it after rshmem_init, or after cudaSetDevice({})",
                g.ordinal, g.ordinal
            ));
        }
        // SAFETY: the stream is live for the duration of the call (the program's), belongs to
        // this context (checked above), and the wrapper does not own it: dropping it neither
        // destroys nor synchronizes the stream.
        let st = unsafe { g.ctx.wrap_borrowed_stream(s as sys::CUstream) };
        f(rt, &st)
    })
}

/// Device memory of this PE that is not symmetric (cudaMalloc'd), as a cudarc device buffer.
struct RawDev {
    ptr: u64,
    len: usize,
    stream: Arc<CudaStream>,
}

impl<T> DeviceSlice<T> for RawDev {
    fn len(&self) -> usize {
        self.len
    }
    fn stream(&self) -> &Arc<CudaStream> {
        &self.stream
    }
}

impl<T> DevicePtr<T> for RawDev {
    fn device_ptr<'a>(&'a self, _stream: &'a CudaStream) -> (sys::CUdeviceptr, SyncOnDrop<'a>) {
        // The copy is ordered on the caller's stream; the program orders its own writes.
        (self.ptr, SyncOnDrop::Sync(None))
    }
}

impl<T> DevicePtrMut<T> for RawDev {
    fn device_ptr_mut<'a>(
        &'a mut self,
        _stream: &'a CudaStream,
    ) -> (sys::CUdeviceptr, SyncOnDrop<'a>) {
        (self.ptr, SyncOnDrop::Sync(None))
    }
}

/// True if `p` lies in this PE's symmetric heap.
fn symmetric<T>(rt: &Rt, p: *const T) -> bool {
    rt.world.addr_accessible(p, rt.world.my_pe())
}

/// True if `p` is GPU memory that host code cannot read or write (the symmetric heap on the GPU
/// backend, or device memory the program allocated), so a host RMA call must move it with the
/// copy engine. False on the CPU backend, for NULL, host and managed memory.
pub(crate) fn device_buffer(rt: &Rt, p: *const c_void) -> bool {
    if p.is_null() || rt.world.gpu().is_none() {
        return false;
    }
    if symmetric(rt, p) {
        return true;
    }
    let (mut ty, mut managed) = (0u32, 0i32);
    // SAFETY: plain queries with valid out-pointers of the attributes' types (a CUmemorytype
    // and an int); any pointer value may be asked about (unknown ones fail).
    unsafe {
        let r = sys::cuPointerGetAttribute(
            (&mut ty as *mut u32).cast(),
            sys::CUpointer_attribute::CU_POINTER_ATTRIBUTE_MEMORY_TYPE,
            p as u64,
        );
        if r != sys::CUresult::CUDA_SUCCESS || ty != sys::CUmemorytype::CU_MEMORYTYPE_DEVICE as u32
        {
            return false;
        }
        let r = sys::cuPointerGetAttribute(
            (&mut managed as *mut i32).cast(),
            sys::CUpointer_attribute::CU_POINTER_ATTRIBUTE_IS_MANAGED,
            p as u64,
        );
        r != sys::CUresult::CUDA_SUCCESS || managed == 0
    }
}

/// A host put or get whose local buffer `local` is GPU memory: a copy-engine copy on rshmem's
/// internal stream (ordered after this PE's earlier host-issued operations). Blocking
/// (`nbi == false`): completed before returning (the local buffer is reusable, or holds the
/// data). Non-blocking: completed by the next quiet, as OpenSHMEM's `_nbi` rule allows, so a
/// loop of them queues copies instead of waiting for each. `remote` is the symmetric address
/// on PE `p`.
pub(crate) fn host_rma_device<T: RmaType>(
    call: &'static str,
    rt: &Rt,
    r: Rma<T>,
    nbi: bool,
) -> CResult<()> {
    let g = internal(call, rt)?;
    rma_any(rt, &g.stream, r)?;
    if nbi {
        return Ok(rt.world.complete_internal_stream_at_quiet(call)?);
    }
    Ok(g.sync(call)?)
}

/// This PE's GPU, bound to the calling thread.
fn internal<'a>(call: &'static str, rt: &'a Rt) -> CResult<&'a Arc<rt::cuda::Gpu>> {
    let Some(g) = rt.world.gpu() else {
        return fail(Code::Internal, "no GPU for a device buffer");
    };
    g.bind(call)?;
    Ok(g)
}

/// One host RMA call: `n` elements between the local buffer `local` (the source of a put,
/// the destination of a get) and the symmetric `remote` on PE `p` (a C PE number).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Rma<T> {
    /// Put or get.
    pub way: Way,
    /// The local buffer.
    pub local: *const T,
    /// The symmetric buffer on PE `p`.
    pub remote: *const T,
    /// Elements.
    pub n: usize,
    /// The C PE number.
    pub p: c_int,
}

impl<T> Rma<T> {
    /// The call `way` of a C entry point with `dest`, `src`, `n` and `p`.
    pub fn new(way: Way, dest: *mut T, src: *const T, n: usize, p: c_int) -> Self {
        let (local, remote) = match way {
            Way::Put => (src, dest.cast_const()),
            Way::Get => (dest.cast_const(), src),
        };
        Rma {
            way,
            local,
            remote,
            n,
            p,
        }
    }
}

/// A put or get on the stream whose local buffer is symmetric or device memory.
fn rma_any<T: RmaType>(rt: &Rt, st: &Arc<CudaStream>, r: Rma<T>) -> CResult<()> {
    let Rma {
        way,
        local,
        remote,
        n,
        p,
    } = r;
    let pe = pe(rt, p)?;
    if local.is_null() && n > 0 {
        return invalid(match way {
            Way::Put => "the source buffer is NULL",
            Way::Get => "the destination buffer is NULL",
        });
    }
    let w = &rt.world;
    let mut raw = RawDev {
        ptr: local as u64,
        len: n,
        stream: st.clone(),
    };
    Ok(match (way, symmetric(rt, local)) {
        (Way::Put, true) => w.put_on_stream(remote.cast_mut(), local, n, pe, st),
        (Way::Put, false) => w.put_from_device_on_stream(remote.cast_mut(), &raw, n, pe, st),
        (Way::Get, true) => w.get_on_stream(local.cast_mut(), remote, n, pe, st),
        (Way::Get, false) => w.get_to_device_on_stream(&mut raw, remote, n, pe, st),
    }?)
}

/// Checks, before any data moves, that `sig` is a symmetric address reachable on PE `pe` (a
/// put_signal from a device buffer moves the data and then signals: nothing may be sent when
/// the signal is bad).
pub(crate) fn check_signal(rt: &Rt, sig: *mut u64, pe: usize) -> CResult<()> {
    if !rt.world.addr_accessible(sig, pe) {
        return invalid(format!(
            "the signal {sig:p} is not a symmetric address reachable on PE {pe}"
        ));
    }
    Ok(())
}

/// A put_signal on the stream (data first, then the signal).
fn put_signal_any<T: RmaType>(
    rt: &Rt,
    st: &Arc<CudaStream>,
    r: Rma<T>,
    (sig, signal, op): (*mut u64, u64, c_int),
) -> CResult<()> {
    let (op, pe_n) = (sigop_of(op)?, pe(rt, r.p)?);
    let (src, dest) = (r.local, r.remote.cast_mut());
    if symmetric(rt, src) {
        return Ok(rt
            .world
            .put_signal_on_stream(dest, src, r.n, sig, signal, op, pe_n, st)?);
    }
    // A device source: check the signal first, so that nothing is enqueued on error.
    check_signal(rt, sig, pe_n)?;
    rma_any(rt, st, r)?;
    Ok(rt.world.signal_op_on_stream(sig, signal, op, pe_n, st)?)
}

/// Defines the C entry point `$name(args…, stream)` (`$doc` says what kind of call it is),
/// whose body runs through [`on_stream`] with the runtime and the wrapped stream bound to the
/// two names of `|rt, st|`. `unsafe` makes an `unsafe extern "C" fn` (a pointer the body
/// writes through).
macro_rules! on_stream_entry {
    (unsafe $name:ident, $doc:expr, ($($arg:ident: $ty:ty),*), |$rt:ident, $st:ident| $body:expr) => {
        #[doc = concat!("`", stringify!($name), "`: ", $doc, ".")]
        ///
        /// # Safety
        /// Pointer arguments valid as `rshmem.h` says.
        #[no_mangle]
        pub unsafe extern "C" fn $name($($arg: $ty,)* stream: CudaStreamT) -> c_int {
            on_stream(stringify!($name), stream, |$rt, $st| $body)
        }
    };
    ($name:ident, $doc:expr, ($($arg:ident: $ty:ty),*), |$rt:ident, $st:ident| $body:expr) => {
        #[doc = concat!("`", stringify!($name), "`: ", $doc, ".")]
        #[no_mangle]
        pub extern "C" fn $name($($arg: $ty,)* stream: CudaStreamT) -> c_int {
            on_stream(stringify!($name), stream, |$rt, $st| $body)
        }
    };
}

/// The stream calls on bytes (`u8` elements) and the typed ones (`$n`, `$t`):
/// `put`/`get`/`put_signal` on stream, and for the typed ones `p` and `g`.
macro_rules! rma_stream_entries {
    (mem) => {
        rma_stream_entries!(@rma rshmemx_putmem_on_stream, rshmemx_getmem_on_stream,
                            rshmemx_putmem_signal_on_stream, c_void, u8, nbytes);
    };
    ($n:ident, $t:ty) => {
        paste::paste! {
            rma_stream_entries!(@rma [<rshmemx_ $n _put_on_stream>], [<rshmemx_ $n _get_on_stream>],
                                [<rshmemx_ $n _put_signal_on_stream>], $t, $t, nelems);
            on_stream_entry!([<rshmemx_ $n _p_on_stream>], "**one-sided, stream-ordered**", (dest: *mut $t, value: $t, p: c_int),
                |rt, st| Ok(rt.world.p_on_stream(dest, value, pe(rt, p)?, st)?));
            on_stream_entry!(unsafe [<rshmemx_ $n _g_on_stream>],
                "**one-sided**; synchronizes the stream", (value: *mut $t, src: *const $t, p: c_int),
                |rt, st| g_into(value, rt.world.g_on_stream(src, pe(rt, p)?, st)?));
        }
    };
    (@rma $put:ident, $get:ident, $put_signal:ident, $p:ty, $t:ty, $count:ident) => {
        on_stream_entry!($put, "**one-sided, stream-ordered**", (dest: *mut $p, src: *const $p, $count: usize, pe: c_int),
            |rt, st| rma_any(rt, st, Rma::<$t>::new(Way::Put, dest.cast(), src.cast(), $count, pe)));
        on_stream_entry!($get, "**one-sided, stream-ordered**", (dest: *mut $p, src: *const $p, $count: usize, pe: c_int),
            |rt, st| rma_any(rt, st, Rma::<$t>::new(Way::Get, dest.cast(), src.cast(), $count, pe)));
        on_stream_entry!($put_signal, "**one-sided, stream-ordered**", (dest: *mut $p, src: *const $p, $count: usize,
                sig: *mut u64, signal: u64, op: c_int, pe: c_int),
            |rt, st| put_signal_any(rt, st, Rma::<$t>::new(Way::Put, dest.cast(), src.cast(), $count, pe),
                                     (sig, signal, op)));
    };
}
rma_stream_entries!(mem);
capi_core::rshmem_rma_types!(rma_stream_entries);

/// Writes the value a `g_on_stream` read into the program's `value`.
fn g_into<T>(value: *mut T, v: T) -> CResult<()> {
    if value.is_null() {
        return invalid("value is NULL");
    }
    // SAFETY: non-null and writable, by the caller's contract (the entry point is unsafe).
    unsafe { value.write_unaligned(v) };
    Ok(())
}

on_stream_entry!(rshmemx_signal_op_on_stream, "**one-sided, stream-ordered**",
    (sig: *mut u64, signal: u64, op: c_int, p: c_int),
    |rt, st| Ok(rt.world.signal_op_on_stream(sig, signal, sigop_of(op)?, pe(rt, p)?, st)?));
on_stream_entry!(rshmemx_signal_wait_until_on_stream, "**local, stream-ordered**", (sig: *mut u64, cmp: c_int, value: u64),
    |rt, st| Ok(rt.world.signal_wait_until_on_stream(sig, cmp_of(cmp)?, value, st)?));
on_stream_entry!(
    rshmemx_quiet_on_stream,
    "**one-sided, stream-ordered**",
    (),
    |rt, st| Ok(rt.world.quiet_on_stream(st)?)
);
on_stream_entry!(
    rshmemx_barrier_all_on_stream,
    "**collective, stream-ordered**",
    (),
    |rt, st| Ok(rt.world.barrier_all_on_stream(st)?)
);
on_stream_entry!(
    rshmemx_sync_all_on_stream,
    "**collective, stream-ordered**",
    (),
    |rt, st| Ok(rt.world.sync_all_on_stream(st)?)
);
on_stream_entry!(rshmemx_barrier_on_stream, "**collective over the team, stream-ordered**", (team: i32),
    |rt, st| Ok(rt.world.barrier_on_stream(&crate::team::team(rt, team)?, st)?));
on_stream_entry!(rshmemx_team_sync_on_stream, "**collective over the team, stream-ordered**", (team: i32),
    |rt, st| Ok(rt.world.team_sync_on_stream(&crate::team::team(rt, team)?, st)?));

/// Runs the stream collective `f` over the team named by `h`.
fn coll<R>(rt: &Rt, h: i32, f: impl FnOnce(&rt::World, &rt::Team) -> rt::Result<R>) -> CResult<R> {
    let t = crate::team::team(rt, h)?;
    Ok(f(&rt.world, &t)?)
}

/// The stream collectives on bytes (`mem`: `u8` elements, counted in bytes) and the typed ones
/// (`$n`, `$t`): `alltoall`, `fcollect`, `broadcast` on stream, and for the typed ones
/// `collect` and `alltoalls`.
macro_rules! coll_stream_entries {
    (mem) => {
        coll_stream_entries!(@same rshmemx_alltoallmem_on_stream, c_void, u8, nbytes, alltoall_on_stream);
        coll_stream_entries!(@same rshmemx_fcollectmem_on_stream, c_void, u8, nbytes, fcollect_on_stream);
        coll_stream_entries!(@broadcast rshmemx_broadcastmem_on_stream, c_void, u8, nbytes);
    };
    ($n:ident, $t:ty) => {
        paste::paste! {
            coll_stream_entries!(@same [<rshmemx_ $n _alltoall_on_stream>], $t, $t, nelems, alltoall_on_stream);
            coll_stream_entries!(@same [<rshmemx_ $n _fcollect_on_stream>], $t, $t, nelems, fcollect_on_stream);
            coll_stream_entries!(@same [<rshmemx_ $n _collect_on_stream>], $t, $t, nelems, collect_on_stream);
            coll_stream_entries!(@broadcast [<rshmemx_ $n _broadcast_on_stream>], $t, $t, nelems);
            on_stream_entry!([<rshmemx_ $n _alltoalls_on_stream>], "**collective over the team, stream-ordered**",
                (team: i32, dest: *mut $t, source: *const $t, dst: isize, sst: isize, nelems: usize),
                |rt, st| {
                    let (dst, sst) = (nonneg("dst", dst as i64)?, nonneg("sst", sst as i64)?);
                    coll(rt, team, |w, t| w.alltoalls_on_stream(t, dest, source, dst, sst, nelems, st))
                });
        }
    };
    (@same $name:ident, $p:ty, $t:ty, $count:ident, $f:ident) => {
        on_stream_entry!($name, "**collective over the team, stream-ordered**", (team: i32, dest: *mut $p, source: *const $p, $count: usize),
            |rt, st| coll(rt, team, |w, t| w.$f::<$t>(t, dest.cast(), source.cast(), $count, st)));
    };
    (@broadcast $name:ident, $p:ty, $t:ty, $count:ident) => {
        on_stream_entry!($name, "**collective over the team, stream-ordered**",
            (team: i32, dest: *mut $p, source: *const $p, $count: usize, root: c_int),
            |rt, st| {
                let root = nonneg("root", root.into())?;
                coll(rt, team, |w, t| w.broadcast_on_stream::<$t>(t, dest.cast(), source.cast(), $count, root, st))
            });
    };
}
coll_stream_entries!(mem);
capi_core::rshmem_rma_types!(coll_stream_entries);

/// `rshmemx_TYPENAME_OP_reduce_on_stream` and `rshmemx_TYPENAME_OP_reducescatter_on_stream`.
macro_rules! reduce_stream_entries {
    ($n:ident, $t:ty, $op:ident, $O:ident) => {
        paste::paste! {
            on_stream_entry!([<rshmemx_ $n _ $op _reduce_on_stream>], "**collective over the team, stream-ordered**",
                (team: i32, dest: *mut $t, source: *const $t, nreduce: usize),
                |rt, st| coll(rt, team, |w, t| w.reduce_on_stream(t, dest, source, nreduce, rt::$O, st)));
            on_stream_entry!([<rshmemx_ $n _ $op _reducescatter_on_stream>], "**collective over the team, stream-ordered**",
                (team: i32, dest: *mut $t, source: *const $t, nreduce: usize),
                |rt, st| coll(rt, team, |w, t| w.reducescatter_on_stream(t, dest, source, nreduce, rt::$O, st)));
        }
    };
}
capi_core::rshmem_reductions!(reduce_stream_entries);
