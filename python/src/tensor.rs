//! Torch tensors read natively: the fast path of the calls that move data between tensors.
//!
//! A call on two torch tensors spends most of its time reading them (data pointer, size, dtype,
//! device) when the Python half does it attribute by attribute. The functions here read both
//! tensors and the stream in one native call and then run the same runtime call as the address
//! form. They take only the plain case: two contiguous torch tensors of one supported dtype, on
//! this PE's device (or host tensors on the CPU backend), the symmetric one(s) on the heap, sizes
//! that fit, a stream given as a torch stream (or none). Anything else returns `false`, and the
//! Python half runs its checking path, which raises the error that names the cause; so no check
//! or message lives here twice.
//!
//! The Python half registers torch the first time it reads a torch tensor
//! ([`register_torch`]): the `torch.Tensor` type, its map of supported dtypes, and torch's
//! current-raw-stream function.

use std::sync::OnceLock;

use pyo3::intern;
use pyo3::prelude::*;
use pyo3::types::PyDict;

use crate::{collective, heap_contains_in, put, state, State};

/// What the fast path needs from torch.
struct Torch {
    /// `torch.Tensor`.
    tensor: Py<PyAny>,
    /// torch dtype -> rshmem dtype name: the supported dtypes.
    dtypes: Py<PyDict>,
    /// `torch._C._cuda_getCurrentRawStream(device)`, when this torch has it.
    raw_stream: Option<Py<PyAny>>,
}

static TORCH: OnceLock<Torch> = OnceLock::new();

/// Registers torch for the fast path (first registration wins; later ones are ignored).
#[pyfunction]
#[pyo3(signature = (tensor, dtypes, raw_stream=None))]
pub(crate) fn register_torch(
    tensor: Py<PyAny>,
    dtypes: Py<PyDict>,
    raw_stream: Option<Py<PyAny>>,
) -> bool {
    TORCH
        .set(Torch {
            tensor,
            dtypes,
            raw_stream,
        })
        .is_ok()
}

/// A torch tensor as the runtime sees it.
struct View<'py> {
    ptr: usize,
    nbytes: usize,
    dtype: Bound<'py, PyAny>,
    cuda: bool,
    /// All of it lies in this PE's symmetric memory.
    symmetric: bool,
}

/// Reads `x` when it is a contiguous torch tensor of a supported dtype on this PE's device (or
/// in host memory); None otherwise. A tensor on this PE's symmetric heap is on its device by
/// construction (the heap is this PE's GPU memory, or host memory on the CPU backend), so only
/// other tensors are asked where they live.
fn view<'py>(t: &Torch, st: &State, x: &Bound<'py, PyAny>) -> PyResult<Option<View<'py>>> {
    let py = x.py();
    if !x.is_instance(t.tensor.bind(py))? {
        return Ok(None);
    }
    if !x.call_method0(intern!(py, "is_contiguous"))?.is_truthy()? {
        return Ok(None);
    }
    let dtype = x.getattr(intern!(py, "dtype"))?;
    if !t.dtypes.bind(py).contains(&dtype)? {
        return Ok(None);
    }
    let ptr: usize = x.call_method0(intern!(py, "data_ptr"))?.extract()?;
    let nbytes: usize = x.getattr(intern!(py, "nbytes"))?.extract()?;
    let symmetric = heap_contains_in(st, ptr, nbytes);
    let cuda = if symmetric {
        st.world.gpu().is_some()
    } else {
        x.getattr(intern!(py, "is_cuda"))?.is_truthy()?
    };
    if cuda && !symmetric {
        let Some(g) = st.world.gpu() else {
            return Ok(None);
        };
        let dev: i64 = x.call_method0(intern!(py, "get_device"))?.extract()?;
        if usize::try_from(dev).ok() != Some(g.ordinal) {
            return Ok(None);
        }
    }
    Ok(Some(View {
        ptr,
        nbytes,
        dtype,
        cuda,
        symmetric,
    }))
}

/// The two tensors when both are plain ([`view`]) and of one dtype.
fn pair<'py>(
    t: &Torch,
    st: &State,
    a: &Bound<'py, PyAny>,
    b: &Bound<'py, PyAny>,
) -> PyResult<Option<(View<'py>, View<'py>)>> {
    let (Some(va), Some(vb)) = (view(t, st, a)?, view(t, st, b)?) else {
        return Ok(None);
    };
    Ok(va.dtype.is(&vb.dtype).then_some((va, vb)))
}

/// The stream handle to order the call on: Some(None) for the host form, Some(Some(h)) for a
/// stream, None when the checking path must decide (a stream object of another kind, CUDA
/// tensors on the CPU backend, no raw-stream function).
fn stream_of(
    t: &Torch,
    st: &State,
    stream: &Bound<'_, PyAny>,
    views: [&View<'_>; 2],
) -> PyResult<Option<Option<usize>>> {
    let py = stream.py();
    if !stream.is_none() {
        return match stream.getattr_opt(intern!(py, "cuda_stream"))? {
            Some(h) => Ok(Some(Some(h.extract()?))),
            None => Ok(None),
        };
    }
    if !views.iter().any(|v| v.cuda) {
        return Ok(Some(None));
    }
    let (Some(g), Some(f)) = (st.world.gpu(), t.raw_stream.as_ref()) else {
        return Ok(None);
    };
    Ok(Some(Some(f.bind(py).call1((g.ordinal,))?.extract()?)))
}

/// Which way a transfer goes: the remote (symmetric) side is `dst` for a put, `src` for a get,
/// and the local side's size is the count.
#[derive(Clone, Copy)]
enum Dir {
    Put,
    Get,
}

/// `rshmem.put`/`put_nbi` (`get` false) or `rshmem.get`/`get_nbi` (`get` true) on two torch
/// tensors: true when done here, false when the Python half must run its checking path.
#[pyfunction]
pub(crate) fn rma_tensors(
    py: Python<'_>,
    get: bool,
    dst: &Bound<'_, PyAny>,
    src: &Bound<'_, PyAny>,
    pe: &Bound<'_, PyAny>,
    nbi: bool,
    stream: &Bound<'_, PyAny>,
) -> PyResult<bool> {
    let dir = if get { Dir::Get } else { Dir::Put };
    let call = match dir {
        Dir::Put => "rshmem.put",
        Dir::Get => "rshmem.get",
    };
    let (Some(t), Ok(st), Ok(pe)) = (TORCH.get(), state(call), pe.extract::<usize>()) else {
        return Ok(false);
    };
    let Some((d, s)) = pair(t, &st, dst, src)? else {
        return Ok(false);
    };
    let (remote, local) = match dir {
        Dir::Put => (&d, &s),
        Dir::Get => (&s, &d),
    };
    if local.nbytes > remote.nbytes || !remote.symmetric {
        return Ok(false);
    }
    let Some(h) = stream_of(t, &st, stream, [&d, &s])? else {
        return Ok(false);
    };
    match dir {
        Dir::Put => put(py, d.ptr, s.ptr, s.nbytes, pe, nbi, h)?,
        Dir::Get => crate::get(py, d.ptr, s.ptr, d.nbytes, pe, nbi, h)?,
    }
    Ok(true)
}

/// `rshmem.alltoall` on two torch tensors over the team `team_id` of `n` PEs (as
/// [`rma_tensors`]).
#[pyfunction]
pub(crate) fn alltoall_tensors(
    py: Python<'_>,
    team_id: i64,
    n: usize,
    dst: &Bound<'_, PyAny>,
    src: &Bound<'_, PyAny>,
    stream: &Bound<'_, PyAny>,
) -> PyResult<bool> {
    let (Some(t), Ok(st)) = (TORCH.get(), state("rshmem.alltoall")) else {
        return Ok(false);
    };
    let Some((d, s)) = pair(t, &st, dst, src)? else {
        return Ok(false);
    };
    if n == 0 || d.nbytes != s.nbytes || s.nbytes % n != 0 {
        return Ok(false);
    }
    if !d.symmetric || !s.symmetric {
        return Ok(false);
    }
    let Some(h) = stream_of(t, &st, stream, [&d, &s])? else {
        return Ok(false);
    };
    collective(py, "alltoall", team_id, d.ptr, s.ptr, s.nbytes / n, 0, h)?;
    Ok(true)
}
