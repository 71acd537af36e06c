//! Expert-parallel MoE dispatch and combine (`rshmem.ep.Buffer` holds one of these): the
//! runtime's `rshmem::ep::Ep` over the process's world, called with the device addresses of
//! the tensors the Python half checked (shape, dtype, device, contiguity). The runtime checks
//! the rest (sizes, alignment, `max_tokens`, the stream's context, the configuration) and its
//! messages are the ones raised.
//!
//! Lifetime: an `Ep<'w>` borrows the `World`. The handles live in the process's [`State`]
//! (`State::eps`, keyed by a number unique in the process), next to the `Arc<World>` they
//! borrow, declared before it (so dropped first), and `finalize` frees the live ones before the
//! world goes (collective, in creation order, which is the same on every PE because creation is
//! collective). The Python object holds only the key: after `free` or `finalize` its calls
//! raise `rshmem.Error`.

use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Arc, Mutex};

use pyo3::prelude::*;
use pyo3::types::PyDict;

use rt::cudarc::driver::DevicePtr;
use rt::ep::{Ep, EpConfig, EpDtype};

use crate::{detached, err, on_stream, rt_err, state, State};

/// Keys of the handles: unique in the process (across init/finalize cycles), so that a Python
/// object of a handle freed by an earlier finalize never finds a newer handle.
static NEXT_EP: AtomicI64 = AtomicI64::new(1);

/// A handle owned by the process's state.
pub(crate) type EpBox = Ep<'static>;

/// A handle as the state keeps it: its own lock, so that a call that blocks on one handle
/// (`check`, `free`) holds up no other handle's calls.
pub(crate) type EpSlot = Arc<Mutex<EpBox>>;

fn poisoned(call: &'static str) -> rt::Error {
    rt::Error::State {
        call,
        reason: "internal error (handle lock poisoned)".into(),
    }
}

fn dtype_of(call: &str, dtype: &str) -> PyResult<EpDtype> {
    match dtype {
        "float32" => Ok(EpDtype::F32),
        "bfloat16" => Ok(EpDtype::Bf16),
        "float8_e4m3fn" => Ok(EpDtype::Fp8E4m3),
        d => Err(err(
            call,
            format!(
                "dtype: {d}; the expert-parallel kernels take float32, bfloat16 or float8_e4m3fn"
            ),
        )),
    }
}

#[allow(clippy::too_many_arguments)]
fn config(
    call: &str,
    num_experts: usize,
    hidden: usize,
    topk: usize,
    max_tokens: usize,
    dtype: &str,
    max_recv_rows: Option<usize>,
    num_sms: Option<u32>,
    low_latency: bool,
) -> PyResult<EpConfig> {
    Ok(EpConfig {
        max_recv_rows,
        num_sms,
        low_latency,
        ..EpConfig::new(
            num_experts,
            hidden,
            topk,
            max_tokens,
            dtype_of(call, dtype)?,
        )
    })
}

/// The buffer sizes of a configuration for `n_pes` PEs (the runtime's `EpConfig::sizes`, which
/// checks the configuration): a dict of `local_experts`, `row_bytes`, `comb_row_bytes`,
/// `scale_words`, `max_rows`, `symmetric_bytes`, `local_bytes`. Local; needs no init.
#[pyfunction]
#[pyo3(signature = (n_pes, num_experts, hidden, topk, max_tokens, dtype, max_recv_rows=None,
                    num_sms=None, low_latency=false))]
#[allow(clippy::too_many_arguments)]
pub(crate) fn ep_sizes<'py>(
    py: Python<'py>,
    n_pes: usize,
    num_experts: usize,
    hidden: usize,
    topk: usize,
    max_tokens: usize,
    dtype: &str,
    max_recv_rows: Option<usize>,
    num_sms: Option<u32>,
    low_latency: bool,
) -> PyResult<Bound<'py, PyDict>> {
    let cfg = config(
        "ep_new",
        num_experts,
        hidden,
        topk,
        max_tokens,
        dtype,
        max_recv_rows,
        num_sms,
        low_latency,
    )?;
    let s = cfg.sizes(n_pes).map_err(rt_err)?;
    let d = PyDict::new(py);
    d.set_item("local_experts", s.local_experts)?;
    d.set_item("row_bytes", s.row_bytes)?;
    d.set_item("comb_row_bytes", s.comb_row_bytes)?;
    d.set_item("scale_words", s.scale_words)?;
    d.set_item("max_rows", s.max_rows)?;
    d.set_item("symmetric_bytes", s.symmetric_bytes)?;
    d.set_item("local_bytes", s.local_bytes)?;
    Ok(d)
}

/// The runtime's host check of routing indices (`rshmem::ep::check_routing`): the
/// `num_tokens × topk` `int64` entries at `addr` (host memory of a live, contiguous array) must
/// lie in `-1 .. num_experts`; the error names the first bad entry. Local; needs no init.
#[pyfunction]
pub(crate) fn ep_check_routing(
    addr: usize,
    num_tokens: usize,
    topk: usize,
    num_experts: usize,
) -> PyResult<()> {
    let call = "ep_dispatch";
    let nbytes = num_tokens
        .checked_mul(topk)
        .and_then(|n| n.checked_mul(8))
        .ok_or_else(|| err(call, "topk_idx: num_tokens × topk overflows"))?;
    let bytes = crate::local(call, addr, nbytes)?;
    let idx: Vec<i64> = bytes
        .chunks_exact(8)
        .map(|b| {
            let mut a = [0u8; 8];
            a.copy_from_slice(b);
            i64::from_ne_bytes(a)
        })
        .collect();
    rt::ep::check_routing(call, &idx, num_tokens, topk, num_experts).map_err(rt_err)
}

/// An expert-parallel handle of this process (the key of its `Ep` in the state).
#[pyclass(module = "rshmem._rshmem", name = "Ep", frozen)]
pub(crate) struct EpHandle {
    id: i64,
}

/// Runs `f` on the live handle `id` of `st` (without the GIL: the caller is `detached` or
/// `on_stream`, so no lock is waited for while holding the GIL). The list's lock is held only
/// to find the handle; the handle's own lock for the call.
fn with_ep<R>(
    st: &State,
    call: &'static str,
    id: i64,
    f: impl FnOnce(&EpBox) -> rt::Result<R>,
) -> rt::Result<R> {
    let slot = {
        let eps = st.eps.lock().map_err(|_| poisoned(call))?;
        eps.iter()
            .find(|(k, _)| *k == id)
            .map(|(_, e)| Arc::clone(e))
    };
    let Some(slot) = slot else {
        return Err(rt::Error::State {
            call,
            reason: "the handle was freed (Buffer.free, or rshmem.finalize): make a new one".into(),
        });
    };
    let ep = slot.lock().map_err(|_| poisoned(call))?;
    f(&ep)
}

/// **Collective.** Makes a handle (the runtime's `Ep::new`): the configuration is checked
/// first (every PE gets the same answer), then the backend, the buffers and the kernels.
#[pyfunction]
#[pyo3(signature = (num_experts, hidden, topk, max_tokens, dtype, max_recv_rows=None,
                    num_sms=None, low_latency=false))]
#[allow(clippy::too_many_arguments)]
pub(crate) fn ep_new(
    py: Python<'_>,
    num_experts: usize,
    hidden: usize,
    topk: usize,
    max_tokens: usize,
    dtype: &str,
    max_recv_rows: Option<usize>,
    num_sms: Option<u32>,
    low_latency: bool,
) -> PyResult<EpHandle> {
    let call = "ep_new";
    let cfg = config(
        call,
        num_experts,
        hidden,
        topk,
        max_tokens,
        dtype,
        max_recv_rows,
        num_sms,
        low_latency,
    )?;
    let st = state("rshmem.ep.Buffer")?;
    // The configuration's errors before the backend's, so that they read the same everywhere.
    cfg.sizes(st.world.n_pes()).map_err(rt_err)?;
    if let Some(g) = st.world.gpu() {
        g.bind(call).map_err(rt_err)?;
    }
    let id = NEXT_EP.fetch_add(1, Ordering::Relaxed);
    let s2 = Arc::clone(&st);
    detached(py, move || {
        let w: &rt::World = &s2.world;
        let ep = Ep::new(w, cfg)?;
        // SAFETY: the handle borrows the World inside `s2.world` (an Arc, so the World does not
        // move). It is stored in the same State, whose `eps` field is declared before `world`
        // and emptied by `finalize` before the World is finalized, so the handle never
        // outlives the World it borrows.
        let ep: EpBox = unsafe { std::mem::transmute::<Ep<'_>, Ep<'static>>(ep) };
        let mut eps = s2.eps.lock().map_err(|_| poisoned(call))?;
        eps.push((id, Arc::new(Mutex::new(ep))));
        Ok(())
    })?;
    Ok(EpHandle { id })
}

/// Frees every live handle of `eps` in creation order (collective: `finalize` calls it on every
/// PE). Returns the number freed and the first error.
pub(crate) fn free_all(eps: Vec<(i64, EpSlot)>) -> (usize, Option<rt::Error>) {
    let n = eps.len();
    let mut first = None;
    for (_, slot) in eps {
        let r = match Arc::try_unwrap(slot) {
            Ok(m) => m.into_inner().unwrap_or_else(|p| p.into_inner()).free(),
            // Not reached: finalize holds the only reference to the state, and calls hold
            // their slot only while they hold the state. Dropped (not freed) if it were.
            Err(_) => Err(poisoned("rshmem.finalize")),
        };
        if let Err(e) = r {
            first.get_or_insert(e);
        }
    }
    (n, first)
}

#[pymethods]
impl EpHandle {
    /// **Collective.** Releases the handle (the runtime's `Ep::free`: waits for the context's
    /// work, frees the symmetric buffers). Its views must not be used afterwards.
    fn free(&self, py: Python<'_>) -> PyResult<()> {
        let call = "ep_free";
        let st = state("rshmem.ep.Buffer.free")?;
        let id = self.id;
        detached(py, || {
            let mut slot = {
                let mut eps = st.eps.lock().map_err(|_| poisoned(call))?;
                let at =
                    eps.iter()
                        .position(|(k, _)| *k == id)
                        .ok_or_else(|| rt::Error::State {
                            call,
                            reason:
                                "the handle was already freed (Buffer.free, or rshmem.finalize)"
                                    .into(),
                        })?;
                eps.remove(at).1
            };
            // Out of the list, so no new call finds it; a call of another thread that found it
            // before holds a reference until its (stream-ordered, short) call returns.
            let ep = loop {
                match Arc::try_unwrap(slot) {
                    Ok(m) => break m.into_inner().unwrap_or_else(|p| p.into_inner()),
                    Err(s) => {
                        drop(s.lock().map_err(|_| poisoned(call))?);
                        std::thread::yield_now();
                        slot = s;
                    }
                }
            };
            ep.free()
        })
    }

    /// Whether the handle is live (not freed, and rshmem not finalized since it was made).
    fn live(&self) -> bool {
        let Ok(st) = state("") else { return false };
        let ok = st.eps.lock().map(|e| e.iter().any(|(k, _)| *k == self.id));
        ok.unwrap_or(false)
    }

    /// `(max_rows, local_experts, num_sms, ll_per_pe)` of the handle.
    fn info(&self, py: Python<'_>) -> PyResult<(usize, usize, u32, bool)> {
        let st = state("rshmem.ep.Buffer")?;
        detached(py, || {
            with_ep(&st, "ep_info", self.id, |ep| {
                let s = ep.sizes();
                Ok((s.max_rows, s.local_experts, ep.num_sms(), ep.ll_per_pe()))
            })
        })
    }

    /// Device addresses of the dispatch output: `(expert_x, expert_offsets, expert_src)`.
    fn output(&self, py: Python<'_>) -> PyResult<(u64, u64, u64)> {
        self.addresses(py, "ep_output", |ep, stream| {
            let (o, _a) = ep.expert_offsets().device_ptr(stream);
            let (s, _b) = ep.expert_src().device_ptr(stream);
            (ep.expert_x_addr(), o, s)
        })
    }

    /// Device addresses of the low-latency output: `(recv_x, count, src)` (symmetric rows
    /// `[L][n][max_tokens]`, `[L][n]` `int32` counts, `[L][n][max_tokens][2]` `int32`).
    fn ll_output(&self, py: Python<'_>) -> PyResult<(u64, u64, u64)> {
        self.addresses(py, "ep_ll_output", |ep, stream| {
            let (c, _a) = ep.ll_count().device_ptr(stream);
            let (s, _b) = ep.ll_src().device_ptr(stream);
            (ep.ll_recv_x_addr(), c, s)
        })
    }

    /// **Collective, stream-ordered.** The runtime's `Ep::dispatch_raw` with the tensors'
    /// device addresses (checked by the Python half) on the stream `stream` (a `CUstream`).
    fn dispatch(
        &self,
        py: Python<'_>,
        x: u64,
        topk_idx: u64,
        topk_weights: u64,
        num_tokens: usize,
        stream: usize,
    ) -> PyResult<()> {
        let w = Some(topk_weights);
        self.dispatch_any(py, x, None, topk_idx, w, num_tokens, stream)
    }

    /// Device addresses of the received rows' scales (fp8 handles, else 0):
    /// `(expert_scales, ll_recv_scales, scale_words)`.
    fn scales_output(&self, py: Python<'_>) -> PyResult<(u64, u64, u64)> {
        self.addresses(py, "ep_output", |ep, _| {
            (
                ep.expert_scales_addr(),
                ep.ll_recv_scales_addr(),
                ep.sizes().scale_words as u64,
            )
        })
    }

    /// **Collective, stream-ordered.** The runtime's `Ep::dispatch_fp8_raw` (fp8 tokens and
    /// their per-block scales).
    #[allow(clippy::too_many_arguments)]
    fn dispatch_fp8(
        &self,
        py: Python<'_>,
        x: u64,
        x_scales: u64,
        topk_idx: u64,
        topk_weights: u64,
        num_tokens: usize,
        stream: usize,
    ) -> PyResult<()> {
        let (xs, w) = (Some(x_scales), Some(topk_weights));
        self.dispatch_any(py, x, xs, topk_idx, w, num_tokens, stream)
    }

    /// **Collective, stream-ordered.** The runtime's `Ep::ll_dispatch_fp8_raw`.
    fn ll_dispatch_fp8(
        &self,
        py: Python<'_>,
        x: u64,
        x_scales: u64,
        topk_idx: u64,
        num_tokens: usize,
        stream: usize,
    ) -> PyResult<()> {
        self.dispatch_any(py, x, Some(x_scales), topk_idx, None, num_tokens, stream)
    }

    /// **Collective, stream-ordered.** The runtime's `Ep::combine_raw`; `y` 0: the expert
    /// outputs are in the dispatch output itself.
    fn combine(&self, py: Python<'_>, y: u64, out: u64, stream: usize) -> PyResult<()> {
        self.on_stream(
            py,
            "rshmem.ep.Buffer.combine",
            "ep_combine",
            stream,
            |ep, s| {
                let y = if y == 0 { ep.expert_x_addr() } else { y };
                // SAFETY: `y` is the handle's dispatch output or a live contiguous CUDA tensor
                // of the handle's dtype with at least the rows the last dispatch received
                // (checked by the Python half); `out` one of the last dispatch's num_tokens
                // rows; both on this PE's device, valid in the caller's stream order.
                unsafe { ep.combine_raw(y, out, s) }
            },
        )
    }

    /// **Collective, stream-ordered.** The runtime's `Ep::ll_dispatch_raw`.
    fn ll_dispatch(
        &self,
        py: Python<'_>,
        x: u64,
        topk_idx: u64,
        num_tokens: usize,
        stream: usize,
    ) -> PyResult<()> {
        self.dispatch_any(py, x, None, topk_idx, None, num_tokens, stream)
    }

    /// **Collective, stream-ordered.** The runtime's `Ep::ll_combine_raw`; `y` 0: the expert
    /// outputs are in the low-latency output itself.
    fn ll_combine(
        &self,
        py: Python<'_>,
        y: u64,
        topk_weights: u64,
        out: u64,
        stream: usize,
    ) -> PyResult<()> {
        self.on_stream(
            py,
            "rshmem.ep.Buffer.ll_combine",
            "ep_ll_combine",
            stream,
            |ep, s| {
                let y = if y == 0 { ep.ll_recv_x_addr() } else { y };
                // SAFETY: `y` is the handle's low-latency output or a live contiguous CUDA
                // tensor of its full `[L][n][max_tokens]` rows, `topk_weights` the last
                // low-latency dispatch's num_tokens × topk float32, `out` its num_tokens rows
                // (all checked by the Python half), valid in the caller's stream order.
                unsafe { ep.ll_combine_raw(y, topk_weights, out, s) }
            },
        )
    }

    /// **Local.** Synchronizes `stream` and raises what the kernels found wrong since the last
    /// check (the runtime's `Ep::check`).
    fn check(&self, py: Python<'_>, stream: usize) -> PyResult<()> {
        self.on_stream(
            py,
            "rshmem.ep.Buffer.check",
            "ep_dispatch",
            stream,
            |ep, s| ep.check(s),
        )
    }

    /// **Local.** Synchronizes `stream` and returns the `L + 1` row offsets of the last
    /// dispatch's output.
    fn read_offsets(&self, py: Python<'_>, stream: usize) -> PyResult<Vec<i64>> {
        self.on_stream(
            py,
            "rshmem.ep.Buffer.recv_counts",
            "ep_read_offsets",
            stream,
            |ep, s| {
                let v = s.clone_dtoh(ep.expert_offsets())?;
                s.synchronize()?;
                Ok(v)
            },
        )
    }
}

impl EpHandle {
    /// The four dispatches: the normal mode's with `topk_weights`, the low-latency mode's
    /// without; the `*_fp8` ones with `x_scales`.
    #[allow(clippy::too_many_arguments)]
    fn dispatch_any(
        &self,
        py: Python<'_>,
        x: u64,
        x_scales: Option<u64>,
        topk_idx: u64,
        topk_weights: Option<u64>,
        num_tokens: usize,
        stream: usize,
    ) -> PyResult<()> {
        let (what, call) = match topk_weights {
            Some(_) => ("rshmem.ep.Buffer.dispatch", "ep_dispatch"),
            None => ("rshmem.ep.Buffer.ll_dispatch", "ep_ll_dispatch"),
        };
        self.on_stream(py, what, call, stream, |ep, s| {
            // SAFETY: the Python half passes the data pointers of live, contiguous CUDA tensors
            // of this PE's device holding num_tokens rows of the handle's hidden size and dtype,
            // num_tokens × topk int64 / float32 (no weights in the low-latency mode) and, for
            // fp8, num_tokens × hidden/128 float32 scales (checked there), which the caller's
            // stream order keeps valid until the kernels ran.
            unsafe {
                match (topk_weights, x_scales) {
                    (Some(w), None) => ep.dispatch_raw(x, topk_idx, w, num_tokens, s),
                    (Some(w), Some(xs)) => ep.dispatch_fp8_raw(x, xs, topk_idx, w, num_tokens, s),
                    (None, None) => ep.ll_dispatch_raw(x, topk_idx, num_tokens, s),
                    (None, Some(xs)) => ep.ll_dispatch_fp8_raw(x, xs, topk_idx, num_tokens, s),
                }
            }
        })
    }

    /// Runs `f` on this live handle and the program's stream `stream` (see `on_stream`),
    /// without the GIL; `what` names the Python call when rshmem is not initialized.
    fn on_stream<R>(
        &self,
        py: Python<'_>,
        what: &'static str,
        call: &'static str,
        stream: usize,
        f: impl FnOnce(&EpBox, &Arc<rt::cudarc::driver::CudaStream>) -> rt::Result<R> + Send,
    ) -> PyResult<R> {
        let st = state(what)?;
        on_stream(py, &st, call, stream, |_, s| {
            with_ep(&st, call, self.id, |ep| f(ep, s))
        })
    }

    /// Three device addresses of this handle's buffers, read by `f` on the world's stream.
    fn addresses(
        &self,
        py: Python<'_>,
        call: &'static str,
        f: impl FnOnce(&EpBox, &rt::cudarc::driver::CudaStream) -> (u64, u64, u64) + Send,
    ) -> PyResult<(u64, u64, u64)> {
        let st = state("rshmem.ep.Buffer")?;
        let Some(g) = st.world.gpu() else {
            return Err(err("rshmem.ep.Buffer", "no GPU backend"));
        };
        let stream = g.stream.clone();
        detached(py, || with_ep(&st, call, self.id, |ep| Ok(f(ep, &stream))))
    }
}
