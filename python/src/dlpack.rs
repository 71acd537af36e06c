//! DLPack export of symmetric-heap memory: the capsule `__dlpack__` returns, so that
//! `torch.from_dlpack`, `cupy.from_dlpack` and `numpy.from_dlpack` view the heap with no copy.
//! Both the versioned (DLPack 1.x, capsule "dltensor_versioned") and the legacy (capsule
//! "dltensor") forms; the struct layouts are DLPack's `dlpack.h`.

use std::ffi::{c_char, c_void};

use pyo3::ffi;
use pyo3::prelude::*;

use crate::err;

#[repr(C)]
#[derive(Clone, Copy)]
struct DLDevice {
    device_type: i32,
    device_id: i32,
}

#[repr(C)]
#[derive(Clone, Copy)]
struct DLDataType {
    code: u8,
    bits: u8,
    lanes: u16,
}

#[repr(C)]
struct DLTensor {
    data: *mut c_void,
    device: DLDevice,
    ndim: i32,
    dtype: DLDataType,
    shape: *mut i64,
    strides: *mut i64,
    byte_offset: u64,
}

#[repr(C)]
struct DLManagedTensor {
    dl_tensor: DLTensor,
    manager_ctx: *mut c_void,
    deleter: Option<unsafe extern "C" fn(*mut DLManagedTensor)>,
}

#[repr(C)]
struct DLPackVersion {
    major: u32,
    minor: u32,
}

#[repr(C)]
struct DLManagedTensorVersioned {
    version: DLPackVersion,
    manager_ctx: *mut c_void,
    deleter: Option<unsafe extern "C" fn(*mut DLManagedTensorVersioned)>,
    flags: u64,
    dl_tensor: DLTensor,
}

/// `DLPACK_FLAG_BITMASK_READ_ONLY`.
const FLAG_READ_ONLY: u64 = 1;

const LEGACY: &[u8] = b"dltensor\0";
const VERSIONED: &[u8] = b"dltensor_versioned\0";

/// What a capsule's tensor owns: the Python object that keeps the allocation alive, and the
/// shape the tensor points to.
struct Ctx {
    /// Held, never read: the reference keeps the allocation alive.
    #[allow(dead_code)]
    owner: Py<PyAny>,
    shape: Vec<i64>,
}

/// Frees a context (drops the owner's reference with the GIL held).
///
/// # Safety
/// `ctx` is a `Box<Ctx>` turned into a raw pointer by `dlpack_capsule`, not freed before.
unsafe fn drop_ctx(ctx: *mut c_void) {
    if ctx.is_null() {
        return;
    }
    // SAFETY: by the contract, a live Box<Ctx> given up with into_raw.
    let ctx = unsafe { Box::from_raw(ctx.cast::<Ctx>()) };
    Python::attach(move |_py| drop(ctx));
}

unsafe extern "C" fn legacy_deleter(t: *mut DLManagedTensor) {
    if t.is_null() {
        return;
    }
    // SAFETY: `t` is the Box<DLManagedTensor> made by `dlpack_capsule`; its consumer calls the
    // deleter once.
    let t = unsafe { Box::from_raw(t) };
    // SAFETY: the context belongs to this tensor only.
    unsafe { drop_ctx(t.manager_ctx) };
}

unsafe extern "C" fn versioned_deleter(t: *mut DLManagedTensorVersioned) {
    if t.is_null() {
        return;
    }
    // SAFETY: as in `legacy_deleter`.
    let t = unsafe { Box::from_raw(t) };
    // SAFETY: as in `legacy_deleter`.
    unsafe { drop_ctx(t.manager_ctx) };
}

/// The capsule's destructor: frees the tensor unless a consumer took it (and renamed the
/// capsule to "used_...").
unsafe extern "C" fn capsule_destructor(cap: *mut ffi::PyObject) {
    // SAFETY: called by Python with the capsule, GIL held; the names are NUL-terminated.
    unsafe {
        if ffi::PyCapsule_IsValid(cap, VERSIONED.as_ptr().cast()) == 1 {
            let p = ffi::PyCapsule_GetPointer(cap, VERSIONED.as_ptr().cast());
            let t = p.cast::<DLManagedTensorVersioned>();
            if let Some(d) = t.as_ref().and_then(|t| t.deleter) {
                d(t);
            }
        } else if ffi::PyCapsule_IsValid(cap, LEGACY.as_ptr().cast()) == 1 {
            let p = ffi::PyCapsule_GetPointer(cap, LEGACY.as_ptr().cast());
            let t = p.cast::<DLManagedTensor>();
            if let Some(d) = t.as_ref().and_then(|t| t.deleter) {
                d(t);
            }
        }
        // A consumed capsule ("used_dltensor..."): the consumer owns the tensor now.
    }
}

/// A DLPack capsule viewing `addr` (C-contiguous `shape`, dtype `code`/`bits`) on device
/// `device_type`/`device_id` (1 CPU, 2 CUDA); `owner` stays referenced while any consumer
/// holds the tensor. `versioned` makes a DLPack 1.x capsule.
#[pyfunction]
#[allow(clippy::too_many_arguments)]
pub(crate) fn dlpack_capsule(
    py: Python<'_>,
    owner: Py<PyAny>,
    addr: usize,
    shape: Vec<i64>,
    code: u8,
    bits: u8,
    device_type: i32,
    device_id: i32,
    versioned: bool,
    readonly: bool,
) -> PyResult<Py<PyAny>> {
    if shape.iter().any(|&d| d < 0) {
        return Err(err("rshmem.__dlpack__", "negative dimension"));
    }
    let mut ctx = Box::new(Ctx { owner, shape });
    let tensor = DLTensor {
        data: addr as *mut c_void,
        device: DLDevice {
            device_type,
            device_id,
        },
        ndim: ctx.shape.len() as i32,
        dtype: DLDataType {
            code,
            bits,
            lanes: 1,
        },
        shape: ctx.shape.as_mut_ptr(),
        // NULL strides: C-contiguous (allowed in every DLPack version).
        strides: std::ptr::null_mut(),
        byte_offset: 0,
    };
    let ctx = Box::into_raw(ctx).cast::<c_void>();
    let (ptr, name): (*mut c_void, &[u8]) = if versioned {
        let t = Box::new(DLManagedTensorVersioned {
            version: DLPackVersion { major: 1, minor: 0 },
            manager_ctx: ctx,
            deleter: Some(versioned_deleter),
            flags: if readonly { FLAG_READ_ONLY } else { 0 },
            dl_tensor: tensor,
        });
        (Box::into_raw(t).cast(), VERSIONED)
    } else {
        let t = Box::new(DLManagedTensor {
            dl_tensor: tensor,
            manager_ctx: ctx,
            deleter: Some(legacy_deleter),
        });
        (Box::into_raw(t).cast(), LEGACY)
    };
    // SAFETY: a non-null pointer, a static NUL-terminated name and a destructor that frees the
    // tensor unless consumed.
    let cap = unsafe {
        ffi::PyCapsule_New(
            ptr,
            name.as_ptr().cast::<c_char>(),
            Some(capsule_destructor),
        )
    };
    if cap.is_null() {
        // SAFETY: the capsule was not made, so nobody else owns the tensor.
        unsafe {
            if versioned {
                versioned_deleter(ptr.cast());
            } else {
                legacy_deleter(ptr.cast());
            }
        }
        return Err(PyErr::fetch(py));
    }
    // SAFETY: a new reference returned by PyCapsule_New.
    Ok(unsafe { Bound::from_owned_ptr(py, cap) }.unbind())
}
