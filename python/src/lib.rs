//! # rshmem._rshmem
//!
//! The native half of the `rshmem` Python package: thin PyO3 bindings over the runtime crate
//! (`rshmem`, imported here as `rt`). Every call takes addresses (Python ints), byte counts,
//! dtype names and an optional CUDA stream handle, checks what only it can check, and calls
//! the runtime, whose checks (PE range, symmetric ranges, alignment, types) and messages are
//! the ones users see, raised as `rshmem.Error`. Arrays, tensors, dtypes and launchers are the
//! Python half's business (`python/rshmem/`); nothing here reimplements the runtime.
//!
//! One runtime per process: `init` publishes it, `finalize` takes it back. Blocking calls
//! release the GIL.

use std::collections::HashMap;
use std::sync::atomic::{AtomicI64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, RwLock};

use pyo3::exceptions::PyException;
use pyo3::prelude::*;
use pyo3::types::PyBytes;

use rt::cudarc::driver::sys;
use rt::cudarc::driver::{CudaStream, DevicePtr, DevicePtrMut, DeviceSlice, SyncOnDrop};
use rt::{Cmp, SignalOp};

mod dlpack;
mod ep;
mod kernel;
mod tensor;

pyo3::create_exception!(
    _rshmem,
    Error,
    PyException,
    "An rshmem call failed; the message names the call and the cause (the runtime's message)."
);

/// The running runtime of this process.
pub(crate) struct State {
    /// Expert-parallel handles (`ep.rs`), in creation order, with their keys. They borrow
    /// `world`: declared before it so that they drop first, and freed by `finalize` before the
    /// world is.
    eps: Mutex<Vec<(i64, ep::EpSlot)>>,
    pub(crate) world: Arc<rt::World>,
    /// Teams by handle: 0 world, 1 shared, 2 node, then splits.
    teams: Mutex<HashMap<i64, rt::Team>>,
    next_team: AtomicI64,
    /// The stream handle last found to belong to this PE's context (`usize::MAX`: none yet), so
    /// that a loop of calls on one stream asks the driver once (see `on_stream`).
    checked_stream: AtomicUsize,
}

/// The running runtime (None before init and after finalize).
static STATE: RwLock<Option<Arc<State>>> = RwLock::new(None);

/// A Python error from a runtime error.
pub(crate) fn rt_err(e: rt::Error) -> PyErr {
    Error::new_err(e.to_string())
}

/// A Python error naming `call`.
pub(crate) fn err(call: &str, what: impl std::fmt::Display) -> PyErr {
    Error::new_err(format!("{call}: {what}"))
}

/// The running runtime, or an error naming `call`.
pub(crate) fn state(call: &str) -> PyResult<Arc<State>> {
    let g = STATE
        .read()
        .map_err(|_| err(call, "internal error (state lock poisoned)"))?;
    g.clone().ok_or_else(|| {
        err(
            call,
            "rshmem is not initialized: call rshmem.init() first (or it was finalized)",
        )
    })
}

/// A value moved into (or out of) a closure that `Python::detach` runs on this very thread.
struct Here<T>(T);
// SAFETY: `detach` runs its closure synchronously on the calling thread and returns its result
// there: nothing wrapped crosses a thread. The closures wrapped this way touch no Python object.
unsafe impl<T> Send for Here<T> {}

/// Runs `f` without the GIL (on this thread), mapping runtime errors.
fn detached<R>(py: Python<'_>, f: impl FnOnce() -> rt::Result<R>) -> PyResult<R> {
    let f = Here(f);
    let r = py.detach(move || {
        let f = f;
        Here((f.0)())
    });
    r.0.map_err(rt_err)
}

// ---------------------------------------------------------------------------------------------
// Start-up and information
// ---------------------------------------------------------------------------------------------

/// Starts the runtime (collective). Rank, size and uid together start from a unique id;
/// with none of them the launcher's variables are read (rshmemrun, mpirun with an address,
/// torchrun with a secret, ...). `backend` is "cpu", "gpu" or "auto"; `device` a CUDA ordinal.
#[pyfunction]
#[pyo3(signature = (rank=None, nranks=None, uid=None, device=None, backend=None))]
fn init(
    py: Python<'_>,
    rank: Option<usize>,
    nranks: Option<usize>,
    uid: Option<String>,
    device: Option<usize>,
    backend: Option<String>,
) -> PyResult<()> {
    let call = "rshmem.init";
    let mut g = STATE
        .write()
        .map_err(|_| err(call, "internal error (state lock poisoned)"))?;
    if g.is_some() {
        return Err(err(
            call,
            "rshmem is already initialized in this process (call rshmem.finalize() first)",
        ));
    }
    let mut b = rt::Builder::new();
    match (rank, nranks) {
        (Some(r), Some(n)) => b = b.rank(r).size(n),
        (None, None) => {}
        _ => return Err(err(call, "give rank and nranks together (or neither)")),
    }
    if let Some(u) = uid {
        let id: rt::UniqueId = u
            .trim()
            .parse()
            .map_err(|e| err(call, format!("uid {u:?}: {e}")))?;
        b = b.unique_id(id);
    }
    if let Some(d) = device {
        b = b.device(d);
    }
    if let Some(s) = backend {
        let c = match s.as_str() {
            "cpu" => rt::config::BackendChoice::Cpu,
            "gpu" => rt::config::BackendChoice::Gpu,
            "auto" => rt::config::BackendChoice::Auto,
            other => {
                return Err(err(
                    call,
                    format!("backend {other:?}: use \"cpu\", \"gpu\" or \"auto\""),
                ))
            }
        };
        b = b.backend(c);
    }
    let world = detached(py, || b.init())?;
    if let Some(gpu) = world.gpu() {
        // The program's CUDA calls on this thread use the same device and context.
        gpu.bind("rshmem.init").map_err(rt_err)?;
    }
    let world = world.into_shared();
    let mut teams = HashMap::new();
    teams.insert(0, world.team_world());
    teams.insert(1, world.team_shared());
    teams.insert(2, world.team_node());
    *g = Some(Arc::new(State {
        eps: Mutex::new(Vec::new()),
        world,
        teams: Mutex::new(teams),
        checked_stream: AtomicUsize::new(usize::MAX),
        next_team: AtomicI64::new(3),
    }));
    Ok(())
}

/// Stops the runtime (collective). Every allocation is released, and every expert-parallel
/// handle still live is freed first (collective, in creation order). Returns the number of
/// handles it freed.
#[pyfunction]
fn finalize(py: Python<'_>) -> PyResult<usize> {
    let call = "rshmem.finalize";
    let st = {
        let mut g = STATE
            .write()
            .map_err(|_| err(call, "internal error (state lock poisoned)"))?;
        g.take()
            .ok_or_else(|| err(call, "rshmem is not initialized"))?
    };
    let State {
        eps, world, teams, ..
    } = Arc::try_unwrap(st).map_err(|_| {
        err(
            call,
            "another thread is inside an rshmem call: finish it before finalize",
        )
    })?;
    // The handles borrow the world: freed (or at least dropped) before it goes.
    let eps = eps.into_inner().unwrap_or_else(|p| p.into_inner());
    let (freed, ep_err) = detached(py, || Ok(ep::free_all(eps)))?;
    drop(teams);
    detached(py, || rt::World::finalize_shared(world))?;
    match ep_err {
        Some(e) => Err(err(
            call,
            format!("freeing the {freed} live expert-parallel handle(s) failed: {e}"),
        )),
        None => Ok(freed),
    }
}

/// True between init and finalize.
#[pyfunction]
fn is_initialized() -> bool {
    STATE.read().map(|g| g.is_some()).unwrap_or(false)
}

/// A fresh unique id (text) for a job whose rank 0 is this process (local, before init).
#[pyfunction]
fn get_unique_id() -> PyResult<String> {
    rt::new_unique_id().map(|u| u.to_string()).map_err(rt_err)
}

/// This PE's number.
#[pyfunction]
fn my_pe() -> PyResult<usize> {
    Ok(state("rshmem.my_pe")?.world.my_pe())
}

/// The number of PEs.
#[pyfunction]
fn n_pes() -> PyResult<usize> {
    Ok(state("rshmem.n_pes")?.world.n_pes())
}

/// "gpu" when the heap is GPU memory, "cpu" otherwise.
#[pyfunction]
fn backend() -> PyResult<&'static str> {
    Ok(if state("rshmem.backend")?.world.gpu().is_some() {
        "gpu"
    } else {
        "cpu"
    })
}

/// This PE's CUDA device ordinal (None on the CPU backend).
#[pyfunction]
fn device() -> PyResult<Option<usize>> {
    Ok(state("rshmem.device")?.world.gpu().map(|g| g.ordinal))
}

/// The PEs on this host.
#[pyfunction]
fn node_pes() -> PyResult<Vec<usize>> {
    Ok(state("rshmem.node_pes")?.world.node_pes().to_vec())
}

// ---------------------------------------------------------------------------------------------
// Memory
// ---------------------------------------------------------------------------------------------

/// Allocates `nbytes` (at least 1) from the symmetric heap (collective); zero-filled with
/// `zero`. Returns the address.
#[pyfunction]
fn malloc(py: Python<'_>, nbytes: usize, zero: bool) -> PyResult<usize> {
    let st = state("rshmem.malloc")?;
    let n = nbytes.max(1);
    let p = detached(py, || {
        if zero {
            st.world.calloc_bytes(1, n)
        } else {
            st.world.malloc_bytes(n)
        }
    })?;
    Ok(p as usize)
}

/// Releases an allocation (collective).
#[pyfunction]
fn free(py: Python<'_>, addr: usize) -> PyResult<()> {
    let st = state("rshmem.free")?;
    detached(py, || st.world.free_bytes(addr as *mut u8))
}

/// True if `[addr, addr + nbytes)` lies in this PE's symmetric heap.
#[pyfunction]
fn heap_contains(addr: usize, nbytes: usize) -> PyResult<bool> {
    Ok(heap_contains_in(
        &*state("rshmem.heap_contains")?,
        addr,
        nbytes,
    ))
}

/// Whether `nbytes` at `addr` lie in this PE's symmetric memory.
pub(crate) fn heap_contains_in(st: &State, addr: usize, nbytes: usize) -> bool {
    let me = st.world.my_pe();
    let last = addr.saturating_add(nbytes.max(1) - 1);
    addr != 0
        && st.world.addr_accessible(addr as *const u8, me)
        && st.world.addr_accessible(last as *const u8, me)
}

/// The address at which this PE reaches PE `pe`'s copy of `addr` by load/store (None when
/// only the proxy or a network transport reaches it).
#[pyfunction]
fn peer_addr(addr: usize, pe: usize) -> PyResult<Option<usize>> {
    let st = state("rshmem.peer_tensor")?;
    check_pe(&st, "rshmem.peer_tensor", pe)?;
    Ok(st.world.ptr(addr as *const u8, pe).map(|p| p as usize))
}

fn check_pe(st: &State, call: &str, pe: usize) -> PyResult<()> {
    let n = st.world.n_pes();
    if pe >= n {
        return Err(err(
            call,
            format!("PE {pe} is out of range: the job has {n} PEs (0..{n})"),
        ));
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// Streams
// ---------------------------------------------------------------------------------------------

/// Runs `f` with the program's stream `handle` (a `CUstream`, e.g. torch's `cuda_stream`)
/// wrapped for this PE's GPU, without the GIL.
fn on_stream<R>(
    py: Python<'_>,
    st: &State,
    call: &'static str,
    handle: usize,
    f: impl FnOnce(&rt::World, &Arc<CudaStream>) -> rt::Result<R>,
) -> PyResult<R> {
    let Some(g) = st.world.gpu() else {
        return Err(err(
            call,
            "stream= needs the GPU backend, and this PE runs on the CPU backend (no CUDA GPU \
             visible, or RSHMEM_BACKEND=cpu): leave stream out",
        ));
    };
    g.bind(call).map_err(rt_err)?;
    // The context check costs a driver call per call; a program's loop uses one stream. A handle
    // checked before is not asked again: were that stream destroyed and its handle reused by a
    // stream of another context, the runtime's own CUDA call on it fails and names the error.
    if st.checked_stream.load(Ordering::Relaxed) != handle {
        check_stream_ctx(call, g, handle)?;
        st.checked_stream.store(handle, Ordering::Relaxed);
    }
    // SAFETY: the stream is live for the call (the caller holds it), belongs to this context
    // (checked above), and the wrapper does not own it: dropping it neither destroys nor
    // synchronizes the stream.
    let s = unsafe { g.ctx.wrap_borrowed_stream(handle as sys::CUstream) };
    let w = &st.world;
    // `detached` runs `f` on this thread, to which the context is bound (above).
    detached(py, || f(w, &s))
}

/// Checks that the program's stream `handle` is a live stream of this PE's context.
fn check_stream_ctx(call: &'static str, g: &rt::cuda::Gpu, handle: usize) -> PyResult<()> {
    let mut ctx: sys::CUcontext = std::ptr::null_mut();
    // SAFETY: a plain query with a valid out-pointer; the handle is one of the program's live
    // streams (or 0, the default stream of the current context).
    let r = unsafe { sys::cuStreamGetCtx(handle as sys::CUstream, &mut ctx) };
    if r != sys::CUresult::CUDA_SUCCESS {
        return Err(err(
            call,
            format!(
                "cuStreamGetCtx on stream {handle:#x} failed ({r:?}){}",
                rt::cuda::stream_query_hint(&format!("{r:?}"))
            ),
        ));
    }
    if ctx != g.ctx.cu_ctx() {
        return Err(err(
            call,
            format!(
                "the stream belongs to another CUDA context than this PE's (the primary context \
                 of device {}): use a stream of torch.cuda.device({})",
                g.ordinal, g.ordinal
            ),
        ));
    }
    Ok(())
}

/// Device memory of this PE that is not symmetric, as a cudarc device buffer.
struct RawDev {
    ptr: u64,
    len: usize,
    stream: Arc<CudaStream>,
}

impl DeviceSlice<u8> for RawDev {
    fn len(&self) -> usize {
        self.len
    }
    fn stream(&self) -> &Arc<CudaStream> {
        &self.stream
    }
}

impl DevicePtr<u8> for RawDev {
    fn device_ptr<'a>(&'a self, _stream: &'a CudaStream) -> (sys::CUdeviceptr, SyncOnDrop<'a>) {
        // The copy is ordered on the caller's stream; the program orders its own writes.
        (self.ptr, SyncOnDrop::Sync(None))
    }
}

impl DevicePtrMut<u8> for RawDev {
    fn device_ptr_mut<'a>(
        &'a mut self,
        _stream: &'a CudaStream,
    ) -> (sys::CUdeviceptr, SyncOnDrop<'a>) {
        (self.ptr, SyncOnDrop::Sync(None))
    }
}

fn symmetric(w: &rt::World, addr: usize) -> bool {
    addr != 0 && w.addr_accessible(addr as *const u8, w.my_pe())
}

// ---------------------------------------------------------------------------------------------
// RMA
// ---------------------------------------------------------------------------------------------

/// A local buffer the Python half took from an array (address and length it read from the
/// array's own interface).
fn local<'a>(call: &str, addr: usize, nbytes: usize) -> PyResult<&'a [u8]> {
    if nbytes == 0 {
        return Ok(&[]);
    }
    if addr == 0 {
        return Err(err(call, "the local buffer's address is 0"));
    }
    // SAFETY: the Python half passes the data pointer and byte size of a live, contiguous
    // array that it keeps referenced for the duration of the call.
    Ok(unsafe { std::slice::from_raw_parts(addr as *const u8, nbytes) })
}

fn local_mut<'a>(call: &str, addr: usize, nbytes: usize) -> PyResult<&'a mut [u8]> {
    if nbytes == 0 {
        return Ok(&mut []);
    }
    if addr == 0 {
        return Err(err(call, "the local buffer's address is 0"));
    }
    // SAFETY: as in `local`; the array is writable (checked by the Python half).
    Ok(unsafe { std::slice::from_raw_parts_mut(addr as *mut u8, nbytes) })
}

/// Put of `nbytes` from `src` (this PE) to the symmetric `dest` on PE `pe`: host form
/// (blocking, or `nbi`), or stream-ordered on `stream`.
#[pyfunction]
#[pyo3(signature = (dest, src, nbytes, pe, nbi=false, stream=None))]
pub(crate) fn put(
    py: Python<'_>,
    dest: usize,
    src: usize,
    nbytes: usize,
    pe: usize,
    nbi: bool,
    stream: Option<usize>,
) -> PyResult<()> {
    let call = if nbi { "rshmem.put_nbi" } else { "rshmem.put" };
    let st = state(call)?;
    if let Some(h) = stream {
        return on_stream(py, &st, call, h, |w, s| {
            if symmetric(w, src) {
                w.putmem_on_stream(dest as *mut u8, src as *const u8, nbytes, pe, s)
            } else {
                let raw = RawDev {
                    ptr: src as u64,
                    len: nbytes,
                    stream: s.clone(),
                };
                w.put_from_device_on_stream(dest as *mut u8, &raw, nbytes, pe, s)
            }
        });
    }
    let s = local(call, src, nbytes)?;
    detached(py, || {
        if nbi {
            st.world.putmem_nbi(dest as *mut u8, s, pe)
        } else {
            st.world.putmem(dest as *mut u8, s, pe)
        }
    })
}

/// Get of `nbytes` from the symmetric `src` on PE `pe` into `dest` (this PE).
#[pyfunction]
#[pyo3(signature = (dest, src, nbytes, pe, nbi=false, stream=None))]
pub(crate) fn get(
    py: Python<'_>,
    dest: usize,
    src: usize,
    nbytes: usize,
    pe: usize,
    nbi: bool,
    stream: Option<usize>,
) -> PyResult<()> {
    let call = if nbi { "rshmem.get_nbi" } else { "rshmem.get" };
    let st = state(call)?;
    if let Some(h) = stream {
        return on_stream(py, &st, call, h, |w, s| {
            if symmetric(w, dest) {
                w.getmem_on_stream(dest as *mut u8, src as *const u8, nbytes, pe, s)
            } else {
                let mut raw = RawDev {
                    ptr: dest as u64,
                    len: nbytes,
                    stream: s.clone(),
                };
                w.get_to_device_on_stream(&mut raw, src as *const u8, nbytes, pe, s)
            }
        });
    }
    let d = local_mut(call, dest, nbytes)?;
    detached(py, || {
        if nbi {
            st.world.getmem_nbi(d, src as *const u8, pe)
        } else {
            st.world.getmem(d, src as *const u8, pe)
        }
    })
}

/// Calls `$body` with `$T` bound to the Rust type of the dtype name `$dt`, among `$($name => $ty)`.
macro_rules! dispatch {
    ($call:expr, $dt:expr, [$($name:literal => $ty:ty),*], $T:ident => $body:expr) => {
        match $dt {
            $($name => { type $T = $ty; $body })*
            other => Err(err($call, format!(
                "dtype {other} is not supported here (supported: {})",
                [$($name),*].join(", ")
            ))),
        }
    };
}

/// Every element type the typed calls take.
macro_rules! rma_types {
    ($call:expr, $dt:expr, $T:ident => $body:expr) => {
        dispatch!($call, $dt, ["int8" => i8, "int16" => i16, "int32" => i32, "int64" => i64,
            "uint8" => u8, "uint16" => u16, "uint32" => u32, "uint64" => u64,
            "float32" => f32, "float64" => f64], $T => $body)
    };
}

/// Writes one element to `dest` on PE `pe`.
#[pyfunction]
#[pyo3(signature = (dest, dtype, value, pe, stream=None))]
fn p(
    py: Python<'_>,
    dest: usize,
    dtype: &str,
    value: &Bound<'_, PyAny>,
    pe: usize,
    stream: Option<usize>,
) -> PyResult<()> {
    let call = "rshmem.p";
    let st = state(call)?;
    rma_types!(call, dtype, T => {
        let v: T = value.extract()?;
        match stream {
            Some(h) => on_stream(py, &st, call, h, |w, s| w.p_on_stream(dest as *mut T, v, pe, s)),
            None => detached(py, || st.world.p(dest as *mut T, v, pe)),
        }
    })
}

/// Reads one element of `src` on PE `pe` (with a stream: after the stream's earlier work).
#[pyfunction]
#[pyo3(signature = (src, dtype, pe, stream=None))]
fn g(
    py: Python<'_>,
    src: usize,
    dtype: &str,
    pe: usize,
    stream: Option<usize>,
) -> PyResult<Py<PyAny>> {
    let call = "rshmem.g";
    let st = state(call)?;
    rma_types!(call, dtype, T => {
        let v: T = match stream {
            Some(h) => on_stream(py, &st, call, h, |w, s| w.g_on_stream(src as *const T, pe, s))?,
            None => detached(py, || st.world.g(src as *const T, pe))?,
        };
        Ok(v.into_pyobject(py)?.into_any().unbind())
    })
}

// ---------------------------------------------------------------------------------------------
// Atomics
// ---------------------------------------------------------------------------------------------

/// Runs the atomic `op` on `dest` at PE `pe`; returns the fetched value for fetching ops.
#[pyfunction]
#[pyo3(signature = (op, dest, dtype, pe, value=None, cond=None))]
fn atomic(
    py: Python<'_>,
    op: &str,
    dest: usize,
    dtype: &str,
    pe: usize,
    value: Option<&Bound<'_, PyAny>>,
    cond: Option<&Bound<'_, PyAny>>,
) -> PyResult<Option<Py<PyAny>>> {
    let call = "rshmem.atomic";
    let st = state(call)?;
    let w = &st.world;
    let need = |v, what| need(op, v, what);
    // Converts a fetched value.
    macro_rules! out {
        ($r:expr) => {{
            let v = $r;
            Ok(Some(v.into_pyobject(py)?.into_any().unbind()))
        }};
    }
    match op {
        "fetch" | "set" | "swap" => dispatch!(call, dtype, ["int32" => i32, "int64" => i64,
            "uint32" => u32, "uint64" => u64, "float32" => f32, "float64" => f64], T => {
            let d = dest as *mut T;
            match op {
                "fetch" => out!(detached(py, || w.atomic_fetch(d as *const T, pe))?),
                "set" => {
                    let v: T = need(value, "a value")?.extract()?;
                    detached(py, || w.atomic_set(d, v, pe))?;
                    Ok(None)
                }
                _ => {
                    let v: T = need(value, "a value")?.extract()?;
                    out!(detached(py, || w.atomic_swap(d, v, pe))?)
                }
            }
        }),
        "compare_swap" | "fetch_inc" | "inc" | "fetch_add" | "add" => dispatch!(call, dtype,
            ["int32" => i32, "int64" => i64, "uint32" => u32, "uint64" => u64], T => {
            let d = dest as *mut T;
            match op {
                "compare_swap" => {
                    let c: T = need(cond, "cond")?.extract()?;
                    let v: T = need(value, "a value")?.extract()?;
                    out!(detached(py, || w.atomic_compare_swap(d, c, v, pe))?)
                }
                "fetch_inc" => out!(detached(py, || w.atomic_fetch_inc(d, pe))?),
                "inc" => {
                    detached(py, || w.atomic_inc(d, pe))?;
                    Ok(None)
                }
                "fetch_add" => {
                    let v: T = need(value, "a value")?.extract()?;
                    out!(detached(py, || w.atomic_fetch_add(d, v, pe))?)
                }
                _ => {
                    let v: T = need(value, "a value")?.extract()?;
                    detached(py, || w.atomic_add(d, v, pe))?;
                    Ok(None)
                }
            }
        }),
        "fetch_and" | "and" | "fetch_or" | "or" | "fetch_xor" | "xor" => dispatch!(call, dtype,
            ["int32" => i32, "int64" => i64, "uint32" => u32, "uint64" => u64], T => {
            let d = dest as *mut T;
            let v: T = need(value, "a value")?.extract()?;
            match op {
                "fetch_and" => out!(detached(py, || w.atomic_fetch_and(d, v, pe))?),
                "fetch_or" => out!(detached(py, || w.atomic_fetch_or(d, v, pe))?),
                "fetch_xor" => out!(detached(py, || w.atomic_fetch_xor(d, v, pe))?),
                "and" => { detached(py, || w.atomic_and(d, v, pe))?; Ok(None) }
                "or" => { detached(py, || w.atomic_or(d, v, pe))?; Ok(None) }
                _ => { detached(py, || w.atomic_xor(d, v, pe))?; Ok(None) }
            }
        }),
        other => Err(err(call, format!("unknown atomic operation {other:?}"))),
    }
}

/// The argument `v` of atomic `op`, or an error saying it is missing.
fn need<'a, 'py>(
    op: &str,
    v: Option<&'a Bound<'py, PyAny>>,
    what: &str,
) -> PyResult<&'a Bound<'py, PyAny>> {
    v.ok_or_else(|| err(&format!("rshmem.atomic_{op}"), format!("needs {what}")))
}

// ---------------------------------------------------------------------------------------------
// Signals, ordering, synchronization
// ---------------------------------------------------------------------------------------------

fn sigop(call: &str, op: &str) -> PyResult<SignalOp> {
    match op {
        "set" => Ok(SignalOp::Set),
        "add" => Ok(SignalOp::Add),
        o => Err(err(
            call,
            format!("signal op {o:?}: use \"set\" or \"add\""),
        )),
    }
}

fn cmp(call: &str, c: &str) -> PyResult<Cmp> {
    Ok(match c {
        "eq" | "==" => Cmp::Eq,
        "ne" | "!=" => Cmp::Ne,
        "gt" | ">" => Cmp::Gt,
        "ge" | ">=" => Cmp::Ge,
        "lt" | "<" => Cmp::Lt,
        "le" | "<=" => Cmp::Le,
        o => {
            return Err(err(
                call,
                format!("comparison {o:?}: use eq, ne, gt, ge, lt or le"),
            ))
        }
    })
}

/// Put of `nbytes` then the signal update on PE `pe` (visible after the data).
#[pyfunction]
#[pyo3(signature = (dest, src, nbytes, sig, signal, op, pe, nbi=false, stream=None))]
#[allow(clippy::too_many_arguments)]
fn put_signal(
    py: Python<'_>,
    dest: usize,
    src: usize,
    nbytes: usize,
    sig: usize,
    signal: u64,
    op: &str,
    pe: usize,
    nbi: bool,
    stream: Option<usize>,
) -> PyResult<()> {
    let call = if nbi {
        "rshmem.put_signal_nbi"
    } else {
        "rshmem.put_signal"
    };
    let st = state(call)?;
    let op = sigop(call, op)?;
    let (d, sg) = (dest as *mut u8, sig as *mut u64);
    if let Some(h) = stream {
        return on_stream(py, &st, call, h, |w, s| {
            if symmetric(w, src) {
                w.put_signal_on_stream(d, src as *const u8, nbytes, sg, signal, op, pe, s)
            } else {
                // A device source: data on the stream, then the signal on the same stream.
                if !w.addr_accessible(sg.cast_const(), pe) {
                    return Err(rt::Error::InvalidArgument {
                        call: "put_signal_on_stream",
                        reason: format!(
                            "the signal {sg:p} is not a symmetric address reachable on PE {pe}"
                        ),
                    });
                }
                let raw = RawDev {
                    ptr: src as u64,
                    len: nbytes,
                    stream: s.clone(),
                };
                w.put_from_device_on_stream(d, &raw, nbytes, pe, s)?;
                w.signal_op_on_stream(sg, signal, op, pe, s)
            }
        });
    }
    let s = local(call, src, nbytes)?;
    detached(py, || {
        if nbi {
            st.world.put_signal_nbi(d, s, sg, signal, op, pe)
        } else {
            st.world.put_signal(d, s, sg, signal, op, pe)
        }
    })
}

/// Updates the signal `sig` on PE `pe` without data.
#[pyfunction]
#[pyo3(signature = (sig, signal, op, pe, stream=None))]
fn signal_op(
    py: Python<'_>,
    sig: usize,
    signal: u64,
    op: &str,
    pe: usize,
    stream: Option<usize>,
) -> PyResult<()> {
    let call = "rshmem.signal_op";
    let st = state(call)?;
    let op = sigop(call, op)?;
    match stream {
        Some(h) => on_stream(py, &st, call, h, |w, s| {
            w.signal_op_on_stream(sig as *mut u64, signal, op, pe, s)
        }),
        None => detached(py, || st.world.signal_op(sig as *mut u64, signal, op, pe)),
    }
}

/// Waits until this PE's signal satisfies `cmp value`; returns its value (host form) or None
/// (stream form: the stream waits).
#[pyfunction]
#[pyo3(signature = (sig, cmp_, value, stream=None))]
fn signal_wait_until(
    py: Python<'_>,
    sig: usize,
    cmp_: &str,
    value: u64,
    stream: Option<usize>,
) -> PyResult<Option<u64>> {
    let call = "rshmem.signal_wait_until";
    let st = state(call)?;
    let c = cmp(call, cmp_)?;
    match stream {
        Some(h) => {
            on_stream(py, &st, call, h, |w, s| {
                w.signal_wait_until_on_stream(sig as *const u64, c, value, s)
            })?;
            Ok(None)
        }
        None => detached(py, || {
            st.world.signal_wait_until(sig as *const u64, c, value)
        })
        .map(Some),
    }
}

/// This PE's signal word, read atomically.
#[pyfunction]
fn signal_fetch(sig: usize) -> PyResult<u64> {
    let st = state("rshmem.signal_fetch")?;
    st.world.signal_fetch(sig as *const u64).map_err(rt_err)
}

/// Waits until this PE's integer `ivar` satisfies `cmp value`.
#[pyfunction]
fn wait_until(
    py: Python<'_>,
    ivar: usize,
    dtype: &str,
    cmp_: &str,
    value: &Bound<'_, PyAny>,
) -> PyResult<()> {
    let call = "rshmem.wait_until";
    let st = state(call)?;
    let c = cmp(call, cmp_)?;
    dispatch!(call, dtype, ["int32" => i32, "int64" => i64, "uint32" => u32, "uint64" => u64], T => {
        let v: T = value.extract()?;
        detached(py, || st.world.wait_until(ivar as *const T, c, v))
    })
}

/// Orders this PE's puts, atomics and signals per target PE.
#[pyfunction]
fn fence() -> PyResult<()> {
    state("rshmem.fence")?.world.fence();
    Ok(())
}

/// Completes this PE's outstanding operations (host), or orders the stream after them.
#[pyfunction]
#[pyo3(signature = (stream=None))]
fn quiet(py: Python<'_>, stream: Option<usize>) -> PyResult<()> {
    let call = "rshmem.quiet";
    let st = state(call)?;
    match stream {
        Some(h) => on_stream(py, &st, call, h, |w, s| w.quiet_on_stream(s)),
        None => detached(py, || st.world.quiet()),
    }
}

fn team(st: &State, call: &str, id: i64) -> PyResult<rt::Team> {
    let t = st
        .teams
        .lock()
        .map_err(|_| err(call, "internal error (team lock poisoned)"))?;
    t.get(&id).cloned().ok_or_else(|| {
        err(
            call,
            format!("team {id} does not exist (destroyed, or never made)"),
        )
    })
}

/// Barrier over the team (0: all PEs): completes outstanding operations, then waits for every
/// member. `sync_only` skips the completion (sync_all / team sync).
#[pyfunction]
#[pyo3(signature = (team_id=0, sync_only=false, stream=None))]
fn barrier(py: Python<'_>, team_id: i64, sync_only: bool, stream: Option<usize>) -> PyResult<()> {
    let call = if sync_only {
        "rshmem.sync"
    } else {
        "rshmem.barrier"
    };
    let st = state(call)?;
    let t = team(&st, call, team_id)?;
    let all = team_id == 0;
    match stream {
        Some(h) => on_stream(py, &st, call, h, |w, s| match (all, sync_only) {
            (true, false) => w.barrier_all_on_stream(s),
            (true, true) => w.sync_all_on_stream(s),
            (false, false) => w.barrier_on_stream(&t, s),
            (false, true) => w.team_sync_on_stream(&t, s),
        }),
        None => detached(py, || match (all, sync_only) {
            (true, false) => st.world.barrier_all(),
            (true, true) => st.world.sync_all(),
            (false, false) => st.world.barrier(&t),
            (false, true) => st.world.team_sync(&t),
        }),
    }
}

// ---------------------------------------------------------------------------------------------
// Teams
// ---------------------------------------------------------------------------------------------

/// Splits the parent team (collective over the parent); the new team's handle, or None on
/// parent PEs not in it.
#[pyfunction]
fn team_split_strided(
    py: Python<'_>,
    parent: i64,
    start: usize,
    stride: isize,
    size: usize,
) -> PyResult<Option<i64>> {
    let call = "rshmem.team_split_strided";
    let st = state(call)?;
    let p = team(&st, call, parent)?;
    let t = detached(py, || st.world.team_split_strided(&p, start, stride, size))?;
    Ok(match t {
        Some(t) => {
            let id = st.next_team.fetch_add(1, Ordering::Relaxed);
            st.teams
                .lock()
                .map_err(|_| err(call, "internal error (team lock poisoned)"))?
                .insert(id, t);
            Some(id)
        }
        None => None,
    })
}

/// (my_pe, n_pes) in the team.
#[pyfunction]
fn team_info(id: i64) -> PyResult<(usize, usize)> {
    let call = "rshmem.Team";
    let st = state(call)?;
    let t = team(&st, call, id)?;
    Ok((t.my_pe(), t.n_pes()))
}

/// The number in team `dest` of PE `pe` of team `src` (None when not a member).
#[pyfunction]
fn team_translate_pe(src: i64, pe: usize, dest: i64) -> PyResult<Option<usize>> {
    let call = "rshmem.Team.translate_pe";
    let st = state(call)?;
    let (s, d) = (team(&st, call, src)?, team(&st, call, dest)?);
    Ok(st.world.team_translate_pe(&s, pe, &d))
}

/// Destroys a team made by a split (collective over the team).
#[pyfunction]
fn team_destroy(py: Python<'_>, id: i64) -> PyResult<()> {
    let call = "rshmem.Team.destroy";
    let st = state(call)?;
    if id < 3 {
        return Err(err(call, "the predefined teams cannot be destroyed"));
    }
    let t = st
        .teams
        .lock()
        .map_err(|_| err(call, "internal error (team lock poisoned)"))?
        .remove(&id)
        .ok_or_else(|| err(call, format!("team {id} does not exist")))?;
    detached(py, || st.world.team_destroy(t))
}

// ---------------------------------------------------------------------------------------------
// Collectives
// ---------------------------------------------------------------------------------------------

/// alltoall (`kind` "alltoall": `nbytes` per member), fcollect (`nbytes` from each member) or
/// broadcast (`nbytes` from `root`) over the team.
#[pyfunction]
#[pyo3(signature = (kind, team_id, dest, src, nbytes, root=0, stream=None))]
#[allow(clippy::too_many_arguments)]
pub(crate) fn collective(
    py: Python<'_>,
    kind: &str,
    team_id: i64,
    dest: usize,
    src: usize,
    nbytes: usize,
    root: usize,
    stream: Option<usize>,
) -> PyResult<()> {
    let call = match kind {
        "alltoall" => "rshmem.alltoall",
        "fcollect" => "rshmem.fcollect",
        "broadcast" => "rshmem.broadcast",
        o => {
            return Err(err(
                "rshmem.collective",
                format!("unknown collective {o:?}"),
            ))
        }
    };
    let st = state(call)?;
    let t = team(&st, call, team_id)?;
    let (d, s) = (dest as *mut u8, src as *const u8);
    match stream {
        Some(h) => on_stream(py, &st, call, h, |w, sm| match kind {
            "alltoall" => w.alltoall_on_stream(&t, d, s, nbytes, sm),
            "fcollect" => w.fcollect_on_stream(&t, d, s, nbytes, sm),
            _ => w.broadcast_on_stream(&t, d, s, nbytes, root, sm),
        }),
        None => detached(py, || match kind {
            "alltoall" => st.world.alltoall(&t, d, s, nbytes),
            "fcollect" => st.world.fcollect(&t, d, s, nbytes),
            _ => st.world.broadcast(&t, d, s, nbytes, root),
        }),
    }
}

/// Reduction (`scatter`: reduce-scatter) of `nelems` elements with `op` over the team.
#[pyfunction]
#[pyo3(signature = (team_id, dest, src, nelems, dtype, op, scatter=false, stream=None))]
#[allow(clippy::too_many_arguments)]
fn reduce(
    py: Python<'_>,
    team_id: i64,
    dest: usize,
    src: usize,
    nelems: usize,
    dtype: &str,
    op: &str,
    scatter: bool,
    stream: Option<usize>,
) -> PyResult<()> {
    let call = if scatter {
        "rshmem.reducescatter"
    } else {
        "rshmem.reduce"
    };
    let st = state(call)?;
    let t = team(&st, call, team_id)?;
    /// Runs the reduction with the runtime's operator type `$O`.
    macro_rules! run {
        ($T:ty, $O:ty) => {{
            let (d, s) = (dest as *mut $T, src as *const $T);
            let o = <$O>::default();
            match stream {
                Some(h) => on_stream(py, &st, call, h, |w, sm| {
                    if scatter {
                        w.reducescatter_on_stream(&t, d, s, nelems, o, sm)
                    } else {
                        w.reduce_on_stream(&t, d, s, nelems, o, sm)
                    }
                }),
                None => detached(py, || {
                    if scatter {
                        st.world.reducescatter(&t, d, s, nelems, o)
                    } else {
                        st.world.reduce(&t, d, s, nelems, o)
                    }
                }),
            }
        }};
    }
    macro_rules! arith {
        ($T:ty) => {
            match op {
                "sum" => run!($T, rt::Sum),
                "prod" => run!($T, rt::Prod),
                "min" => run!($T, rt::Min),
                "max" => run!($T, rt::Max),
                o => Err(err(
                    call,
                    format!(
                        "op {o:?} is not a reduction for {dtype} (sum, prod, min, max{})",
                        if dtype.starts_with("float") {
                            ""
                        } else {
                            ", and, or, xor"
                        }
                    ),
                )),
            }
        };
    }
    macro_rules! int {
        ($T:ty) => {
            match op {
                "and" => run!($T, rt::And),
                "or" => run!($T, rt::Or),
                "xor" => run!($T, rt::Xor),
                _ => arith!($T),
            }
        };
    }
    match dtype {
        "float32" => arith!(f32),
        "float64" => arith!(f64),
        "int8" => int!(i8),
        "int16" => int!(i16),
        "int32" => int!(i32),
        "int64" => int!(i64),
        "uint8" => int!(u8),
        "uint16" => int!(u16),
        "uint32" => int!(u32),
        "uint64" => int!(u64),
        o => Err(err(
            call,
            format!(
                "dtype {o} has no reductions (int8..int64, uint8..uint64, float32, float64 do)"
            ),
        )),
    }
}

// ---------------------------------------------------------------------------------------------
// The module
// ---------------------------------------------------------------------------------------------

/// Raw bytes of `nbytes` at a local address (tests and debugging).
#[pyfunction]
fn read_bytes<'py>(py: Python<'py>, addr: usize, nbytes: usize) -> PyResult<Bound<'py, PyBytes>> {
    let call = "rshmem._read_bytes";
    let st = state(call)?;
    if st.world.gpu().is_some() || !symmetric(&st.world, addr) {
        return Err(err(call, "only host symmetric memory"));
    }
    Ok(PyBytes::new(py, local(call, addr, nbytes)?))
}

#[pymodule]
fn _rshmem(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add("Error", m.py().get_type::<Error>())?;
    m.add_function(wrap_pyfunction!(init, m)?)?;
    m.add_function(wrap_pyfunction!(finalize, m)?)?;
    m.add_function(wrap_pyfunction!(is_initialized, m)?)?;
    m.add_function(wrap_pyfunction!(get_unique_id, m)?)?;
    m.add_function(wrap_pyfunction!(my_pe, m)?)?;
    m.add_function(wrap_pyfunction!(n_pes, m)?)?;
    m.add_function(wrap_pyfunction!(backend, m)?)?;
    m.add_function(wrap_pyfunction!(device, m)?)?;
    m.add_function(wrap_pyfunction!(node_pes, m)?)?;
    m.add_function(wrap_pyfunction!(malloc, m)?)?;
    m.add_function(wrap_pyfunction!(free, m)?)?;
    m.add_function(wrap_pyfunction!(heap_contains, m)?)?;
    m.add_function(wrap_pyfunction!(peer_addr, m)?)?;
    m.add_function(wrap_pyfunction!(put, m)?)?;
    m.add_function(wrap_pyfunction!(get, m)?)?;
    m.add_function(wrap_pyfunction!(p, m)?)?;
    m.add_function(wrap_pyfunction!(g, m)?)?;
    m.add_function(wrap_pyfunction!(atomic, m)?)?;
    m.add_function(wrap_pyfunction!(put_signal, m)?)?;
    m.add_function(wrap_pyfunction!(signal_op, m)?)?;
    m.add_function(wrap_pyfunction!(signal_wait_until, m)?)?;
    m.add_function(wrap_pyfunction!(signal_fetch, m)?)?;
    m.add_function(wrap_pyfunction!(wait_until, m)?)?;
    m.add_function(wrap_pyfunction!(fence, m)?)?;
    m.add_function(wrap_pyfunction!(quiet, m)?)?;
    m.add_function(wrap_pyfunction!(barrier, m)?)?;
    m.add_function(wrap_pyfunction!(team_split_strided, m)?)?;
    m.add_function(wrap_pyfunction!(team_info, m)?)?;
    m.add_function(wrap_pyfunction!(team_translate_pe, m)?)?;
    m.add_function(wrap_pyfunction!(team_destroy, m)?)?;
    m.add_function(wrap_pyfunction!(collective, m)?)?;
    m.add_function(wrap_pyfunction!(reduce, m)?)?;
    m.add_function(wrap_pyfunction!(read_bytes, m)?)?;
    m.add_function(wrap_pyfunction!(tensor::register_torch, m)?)?;
    m.add_function(wrap_pyfunction!(tensor::rma_tensors, m)?)?;
    m.add_function(wrap_pyfunction!(tensor::alltoall_tensors, m)?)?;
    m.add_function(wrap_pyfunction!(dlpack::dlpack_capsule, m)?)?;
    m.add_class::<kernel::Module>()?;
    m.add_class::<ep::EpHandle>()?;
    m.add_function(wrap_pyfunction!(ep::ep_new, m)?)?;
    m.add_function(wrap_pyfunction!(ep::ep_sizes, m)?)?;
    m.add_function(wrap_pyfunction!(ep::ep_check_routing, m)?)?;
    m.add_function(wrap_pyfunction!(kernel::load_module, m)?)?;
    Ok(())
}
