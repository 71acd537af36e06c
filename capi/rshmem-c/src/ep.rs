//! Expert-parallel MoE dispatch and combine (`rshmemx_ep_*`): the C face of `rshmem::ep`
//! (docs/moe.md). A handle is a leaked `Box` of the runtime's `Ep` over the process's world;
//! every call returns a status code and enqueues nothing on error.

use std::ffi::{c_int, c_void};

use rt::cudarc::driver::{CudaSlice, CudaStream, DevicePtr};

use crate::stream::{on_stream, CudaStreamT};
use crate::{current, fail, guarded_status, invalid, CResult, Code};

/// `rshmemx_ep_config_t` of rshmem.h.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct EpConfigC {
    num_experts: usize,
    hidden: usize,
    topk: usize,
    max_tokens: usize,
    dtype: c_int,
    num_sms: c_int,
    max_recv_rows: usize,
    low_latency: c_int,
}

/// The handle behind `rshmemx_ep_t *`.
pub struct EpHandle {
    ep: rt::ep::Ep<'static>,
}

fn config_of(c: *const EpConfigC) -> CResult<rt::ep::EpConfig> {
    // SAFETY: a non-null config points to the program's rshmemx_ep_config_t.
    let Some(c) = (unsafe { c.as_ref() }) else {
        return invalid("config is NULL");
    };
    let dtype = match c.dtype {
        0 => rt::ep::EpDtype::F32,
        1 => rt::ep::EpDtype::Bf16,
        2 => rt::ep::EpDtype::Fp8E4m3,
        d => {
            return invalid(format!(
                "config->dtype {d}: use RSHMEMX_EP_F32, RSHMEMX_EP_BF16 or RSHMEMX_EP_FP8_E4M3"
            ))
        }
    };
    if c.num_sms < 0 {
        return invalid(format!("config->num_sms {} is negative", c.num_sms));
    }
    Ok(rt::ep::EpConfig {
        max_recv_rows: (c.max_recv_rows > 0).then_some(c.max_recv_rows),
        num_sms: (c.num_sms > 0).then_some(c.num_sms as u32),
        low_latency: c.low_latency != 0,
        ..rt::ep::EpConfig::new(c.num_experts, c.hidden, c.topk, c.max_tokens, dtype)
    })
}

fn handle<'a>(ep: *mut EpHandle) -> CResult<&'a EpHandle> {
    // SAFETY: a non-null handle is one rshmemx_ep_create returned and rshmemx_ep_destroy has
    // not released (the program's contract).
    match unsafe { ep.as_ref() } {
        Some(h) => Ok(h),
        None => invalid("ep is NULL"),
    }
}

/// The stream-ordered entry points: `f` on the live handle `ep` and the program's `stream`
/// (see `on_stream`).
fn on_handle(
    call: &'static str,
    ep: *mut EpHandle,
    stream: CudaStreamT,
    f: impl FnOnce(&rt::ep::Ep<'static>, &CudaStream) -> rt::Result<()>,
) -> c_int {
    on_stream(call, stream, |_, st| {
        f(&handle(ep)?.ep, st)?;
        Ok(())
    })
}

/// The local entry points: `f` on the live handle `ep`.
fn on_local(
    call: &'static str,
    ep: *mut EpHandle,
    f: impl FnOnce(&rt::ep::Ep<'static>) -> CResult<()>,
) -> c_int {
    guarded_status(call, || f(&handle(ep)?.ep))
}

/// The expert outputs `y` of a combine: the handle's own output `own` when NULL.
fn y_or(y: *const c_void, own: u64) -> u64 {
    if y.is_null() {
        own
    } else {
        y as u64
    }
}

/// The device addresses of two of a handle's buffers (on the world's GPU stream).
fn device_addrs<A, B>(a: &CudaSlice<A>, b: &CudaSlice<B>) -> CResult<(usize, usize)> {
    let g = current()?
        .world
        .gpu()
        .ok_or_else(|| crate::Fail::Msg(Code::Unsupported, "no GPU backend".into()))?;
    let (pa, _a) = a.device_ptr(&g.stream);
    let (pb, _b) = b.device_ptr(&g.stream);
    Ok((pa as usize, pb as usize))
}

/// Writes `v` through the out-pointer `p` unless it is NULL.
///
/// # Safety
/// `p` is NULL or valid for one write.
unsafe fn put<T>(p: *mut T, v: T) {
    // SAFETY: the caller's contract.
    if let Some(p) = unsafe { p.as_mut() } {
        *p = v;
    }
}

/// `rshmemx_ep_create`: **collective**; a handle in `*ep` (NULL on error).
///
/// # Safety
/// `config` is NULL or a valid config; `ep` is NULL or valid for one write.
#[no_mangle]
pub unsafe extern "C" fn rshmemx_ep_create(
    config: *const EpConfigC,
    ep: *mut *mut EpHandle,
) -> c_int {
    let call = "rshmemx_ep_create";
    guarded_status(call, || {
        if ep.is_null() {
            return invalid("ep is NULL");
        }
        // SAFETY: checked non-null; the program's out-pointer.
        unsafe { *ep = std::ptr::null_mut() };
        let cfg = config_of(config)?;
        let rt = current()?;
        // The configuration's errors before the backend's, so that they read the same everywhere.
        cfg.sizes(rt.world.n_pes())?;
        if rt.world.gpu().is_none() {
            return fail(
                Code::Unsupported,
                "expert-parallel dispatch needs the GPU backend, and this PE runs on the CPU backend",
            );
        }
        let h = Box::new(EpHandle {
            ep: rt::ep::Ep::new(&rt.world, cfg)?,
        });
        // SAFETY: as above.
        unsafe { *ep = Box::into_raw(h) };
        Ok(())
    })
}

/// `rshmemx_ep_destroy`: **collective**; waits for the context's work, frees the handle.
///
/// # Safety
/// `ep` is NULL or a live handle, not used afterwards.
#[no_mangle]
pub unsafe extern "C" fn rshmemx_ep_destroy(ep: *mut EpHandle) -> c_int {
    guarded_status("rshmemx_ep_destroy", || {
        handle(ep)?;
        // SAFETY: a live handle from rshmemx_ep_create (checked non-null), released once.
        let h = unsafe { Box::from_raw(ep) };
        h.ep.free()?;
        Ok(())
    })
}

/// `rshmemx_ep_dispatch_on_stream`: **collective, stream-ordered**.
///
/// # Safety
/// The pointers are device memory of this PE's context holding `num_tokens` rows / `k`
/// entries per token, unchanged until the kernels ran; `ep` a live handle.
#[no_mangle]
pub unsafe extern "C" fn rshmemx_ep_dispatch_on_stream(
    ep: *mut EpHandle,
    x: *const c_void,
    topk_idx: *const i64,
    topk_weights: *const f32,
    num_tokens: usize,
    stream: CudaStreamT,
) -> c_int {
    let (x, idx, w) = (x as u64, topk_idx as u64, topk_weights as u64);
    on_handle("rshmemx_ep_dispatch_on_stream", ep, stream, |h, st| {
        // SAFETY: forwarded from the caller's contract.
        unsafe { h.dispatch_raw(x, idx, w, num_tokens, st) }
    })
}

/// `rshmemx_ep_dispatch_fp8_on_stream`: **collective, stream-ordered**; fp8 tokens with their
/// per-block scales (`num_tokens × hidden/128` floats), handles of `RSHMEMX_EP_FP8_E4M3`.
///
/// # Safety
/// As `rshmemx_ep_dispatch_on_stream`, `x_scales` included.
#[no_mangle]
pub unsafe extern "C" fn rshmemx_ep_dispatch_fp8_on_stream(
    ep: *mut EpHandle,
    x: *const c_void,
    x_scales: *const f32,
    topk_idx: *const i64,
    topk_weights: *const f32,
    num_tokens: usize,
    stream: CudaStreamT,
) -> c_int {
    let (x, xs, idx, w) = (
        x as u64,
        x_scales as u64,
        topk_idx as u64,
        topk_weights as u64,
    );
    on_handle("rshmemx_ep_dispatch_fp8_on_stream", ep, stream, |h, st| {
        // SAFETY: forwarded from the caller's contract.
        unsafe { h.dispatch_fp8_raw(x, xs, idx, w, num_tokens, st) }
    })
}

/// `rshmemx_ep_combine_on_stream`: **collective, stream-ordered**; `y` NULL: the expert
/// outputs are in the dispatch output itself (not for fp8 handles, whose `y` is bf16).
///
/// # Safety
/// `y` (unless NULL) holds `max_rows` rows, `out` the last dispatch's `num_tokens` rows, device
/// memory of this PE's context; `ep` a live handle.
#[no_mangle]
pub unsafe extern "C" fn rshmemx_ep_combine_on_stream(
    ep: *mut EpHandle,
    y: *const c_void,
    out: *mut c_void,
    stream: CudaStreamT,
) -> c_int {
    on_handle("rshmemx_ep_combine_on_stream", ep, stream, |h, st| {
        // SAFETY: forwarded from the caller's contract.
        unsafe { h.combine_raw(y_or(y, h.expert_x_addr()), out as u64, st) }
    })
}

/// `rshmemx_ep_check`: **local**; synchronizes `stream`, returns what the kernels found wrong.
///
/// # Safety
/// `ep` is NULL or a live handle.
#[no_mangle]
pub unsafe extern "C" fn rshmemx_ep_check(ep: *mut EpHandle, stream: CudaStreamT) -> c_int {
    on_handle("rshmemx_ep_check", ep, stream, |h, st| h.check(st))
}

/// `rshmemx_ep_output`: **local**; the dispatch output's device addresses (any out-pointer may
/// be NULL).
///
/// # Safety
/// `ep` is NULL or a live handle; each out-pointer NULL or valid for one write.
#[no_mangle]
pub unsafe extern "C" fn rshmemx_ep_output(
    ep: *mut EpHandle,
    expert_x: *mut *mut c_void,
    expert_offsets: *mut *const i64,
    expert_src: *mut *const i32,
    max_rows: *mut usize,
) -> c_int {
    on_local("rshmemx_ep_output", ep, |h| {
        let (o, r) = device_addrs(h.expert_offsets(), h.expert_src())?;
        // SAFETY: each out-pointer is NULL or valid for one write (the caller's contract).
        unsafe {
            put(expert_x, h.expert_x_addr() as usize as *mut c_void);
            put(expert_offsets, o as *const i64);
            put(expert_src, r as *const i32);
            put(max_rows, h.sizes().max_rows);
        }
        Ok(())
    })
}

/// `rshmemx_ep_output_scales`: **local**; the device address of the dispatch output's scales
/// (`max_rows × scales_per_row` floats, fp8 handles; NULL and 0 otherwise) and the scales per
/// row (any out-pointer may be NULL).
///
/// # Safety
/// `ep` is NULL or a live handle; each out-pointer NULL or valid for one write.
#[no_mangle]
pub unsafe extern "C" fn rshmemx_ep_output_scales(
    ep: *mut EpHandle,
    expert_scales: *mut *const f32,
    scales_per_row: *mut usize,
) -> c_int {
    on_local("rshmemx_ep_output_scales", ep, |h| {
        // SAFETY: each out-pointer is NULL or valid for one write (the caller's contract).
        unsafe {
            put(expert_scales, h.expert_scales_addr() as usize as *const f32);
            put(scales_per_row, h.sizes().scale_words);
        }
        Ok(())
    })
}

/// `rshmemx_ep_ll_dispatch_on_stream`: **collective, stream-ordered**; the low-latency mode.
///
/// # Safety
/// As `rshmemx_ep_dispatch_on_stream`.
#[no_mangle]
pub unsafe extern "C" fn rshmemx_ep_ll_dispatch_on_stream(
    ep: *mut EpHandle,
    x: *const c_void,
    topk_idx: *const i64,
    num_tokens: usize,
    stream: CudaStreamT,
) -> c_int {
    let (x, idx) = (x as u64, topk_idx as u64);
    on_handle("rshmemx_ep_ll_dispatch_on_stream", ep, stream, |h, st| {
        // SAFETY: forwarded from the caller's contract.
        unsafe { h.ll_dispatch_raw(x, idx, num_tokens, st) }
    })
}

/// `rshmemx_ep_ll_dispatch_fp8_on_stream`: **collective, stream-ordered**; the low-latency
/// mode with fp8 tokens and their per-block scales.
///
/// # Safety
/// As `rshmemx_ep_dispatch_fp8_on_stream`.
#[no_mangle]
pub unsafe extern "C" fn rshmemx_ep_ll_dispatch_fp8_on_stream(
    ep: *mut EpHandle,
    x: *const c_void,
    x_scales: *const f32,
    topk_idx: *const i64,
    num_tokens: usize,
    stream: CudaStreamT,
) -> c_int {
    let (x, xs, idx) = (x as u64, x_scales as u64, topk_idx as u64);
    on_handle(
        "rshmemx_ep_ll_dispatch_fp8_on_stream",
        ep,
        stream,
        |h, st| {
            // SAFETY: forwarded from the caller's contract.
            unsafe { h.ll_dispatch_fp8_raw(x, xs, idx, num_tokens, st) }
        },
    )
}

/// `rshmemx_ep_ll_combine_on_stream`: **collective, stream-ordered**; `y` NULL: the expert
/// outputs are in the low-latency output itself (not for fp8 handles).
///
/// # Safety
/// `y` (unless NULL) holds `E × max_tokens` rows, `topk_weights` and `out` the last low-latency
/// dispatch's tokens, device memory of this PE's context; `ep` a live handle.
#[no_mangle]
pub unsafe extern "C" fn rshmemx_ep_ll_combine_on_stream(
    ep: *mut EpHandle,
    y: *const c_void,
    topk_weights: *const f32,
    out: *mut c_void,
    stream: CudaStreamT,
) -> c_int {
    let (w, out) = (topk_weights as u64, out as u64);
    on_handle("rshmemx_ep_ll_combine_on_stream", ep, stream, |h, st| {
        // SAFETY: forwarded from the caller's contract.
        unsafe { h.ll_combine_raw(y_or(y, h.ll_recv_x_addr()), w, out, st) }
    })
}

/// `rshmemx_ep_ll_output`: **local**; the low-latency output's device addresses: rows
/// `[L][n][max_tokens]`, counts `[L][n]`, (token, slot) pairs (any out-pointer may be NULL).
///
/// # Safety
/// `ep` is NULL or a live handle; each out-pointer NULL or valid for one write.
#[no_mangle]
pub unsafe extern "C" fn rshmemx_ep_ll_output(
    ep: *mut EpHandle,
    recv_x: *mut *mut c_void,
    count: *mut *const i32,
    src: *mut *const i32,
) -> c_int {
    on_local("rshmemx_ep_ll_output", ep, |h| {
        if !h.config().low_latency {
            return invalid("the handle was made without config->low_latency");
        }
        let (c, s) = device_addrs(h.ll_count(), h.ll_src())?;
        // SAFETY: each out-pointer is NULL or valid for one write (the caller's contract).
        unsafe {
            put(recv_x, h.ll_recv_x_addr() as usize as *mut c_void);
            put(count, c as *const i32);
            put(src, s as *const i32);
        }
        Ok(())
    })
}

/// `rshmemx_ep_ll_per_pe`: **local**; `*per_pe` = 1 when the handle's low-latency exchange goes
/// once per (token, PE) (the dispatch into the token's first expert's row on each PE, the
/// combine back as one partial sum per PE), 0 when once per (token, expert) pair or without
/// `config->low_latency`; the same on every PE ([`rt::ep::Ep::ll_per_pe`]).
///
/// # Safety
/// `ep` is NULL or a live handle; `per_pe` NULL or valid for one write.
#[no_mangle]
pub unsafe extern "C" fn rshmemx_ep_ll_per_pe(ep: *mut EpHandle, per_pe: *mut c_int) -> c_int {
    on_local("rshmemx_ep_ll_per_pe", ep, |h| {
        // SAFETY: NULL or valid for one write (the caller's contract).
        unsafe { put(per_pe, c_int::from(h.ll_per_pe())) };
        Ok(())
    })
}

/// `rshmemx_ep_ll_output_scales`: **local**; the device address of the low-latency output's
/// scales, `[L][n][max_tokens][hidden/128]` floats beside its rows (fp8 handles made with
/// `low_latency`).
///
/// # Safety
/// `ep` is NULL or a live handle; `recv_scales` NULL or valid for one write.
#[no_mangle]
pub unsafe extern "C" fn rshmemx_ep_ll_output_scales(
    ep: *mut EpHandle,
    recv_scales: *mut *const f32,
) -> c_int {
    on_local("rshmemx_ep_ll_output_scales", ep, |h| {
        let a = h.ll_recv_scales_addr();
        if a == 0 {
            return invalid(format!(
                "the handle has no low-latency scales (made for {:?}{})",
                h.config().dtype,
                if h.config().low_latency {
                    ""
                } else {
                    ", without config->low_latency"
                }
            ));
        }
        // SAFETY: NULL or valid for one write (the caller's contract).
        unsafe { put(recv_scales, a as usize as *const f32) };
        Ok(())
    })
}
