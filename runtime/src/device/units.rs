//! Device state for nvcc-compiled translation units.
//!
//! A CUDA C++ file compiled by nvcc (without `-rdc`) that includes the device library gets its
//! own `__constant__ rshmem_device_state rshmem_state` (device-lib/include/rshmem/state.cuh). No
//! runtime call can reach such a variable by name, so the header registers, when the program
//! starts, one function per translation unit that copies a state into that unit's variable with
//! the program's own CUDA runtime (`cudaMemcpyToSymbolAsync`). This module keeps those functions
//! and calls every one of them whenever this PE's device state changes (init, heap growth),
//! with a zero state at finalize (kernels launched afterwards trap with a message instead of
//! writing through a stale heap base), and at once for a unit registered while a world is live
//! (a shared library loaded after init). NVRTC modules and modules loaded from images are
//! reached by [`crate::device::module`] instead.
//!
//! The registration entry point is the C symbol `rshmem_device_register_state_updater`,
//! exported by this crate, so both the C library (librshmem) and Rust programs that link
//! nvcc-compiled objects provide it.

use std::ffi::{c_int, c_void};
use std::sync::{Arc, Mutex, MutexGuard};

use super::DeviceState;
use crate::cuda::Gpu;
use crate::error::{Error, Result};

/// What a translation unit registers: copies `size` bytes of device state into its
/// `rshmem_state` on `stream` (a `CUstream` of this PE's context, current on the calling
/// thread) and waits. Returns a `cudaError_t` value (0: done), or -1 when `size` is not the
/// unit's state size (device library and runtime versions differ).
pub type StateUpdater =
    unsafe extern "C" fn(state: *const c_void, size: usize, stream: *mut c_void) -> c_int;

struct Units {
    updaters: Vec<StateUpdater>,
    /// The live world's GPU and current state (None before init and after finalize).
    live: Option<(Arc<Gpu>, DeviceState)>,
}

static UNITS: Mutex<Units> = Mutex::new(Units {
    updaters: Vec::new(),
    live: None,
});

fn units() -> MutexGuard<'static, Units> {
    // The lock only guards plain data (no invariant spans a panic), so a poisoned lock is
    // still usable.
    UNITS.lock().unwrap_or_else(|p| p.into_inner())
}

/// Calls one updater with `st` on `gpu`'s stream.
fn update(call: &'static str, gpu: &Gpu, f: StateUpdater, st: &DeviceState) -> Result<()> {
    gpu.bind(call)?;
    let bytes = st.as_bytes();
    // SAFETY: `f` was registered by a translation unit of this process as a function with
    // this signature (state.cuh); it reads `bytes.len()` bytes from a live buffer and uses the
    // stream handle, which belongs to this PE's context (bound above) and outlives the call.
    let rc = unsafe {
        f(
            bytes.as_ptr().cast(),
            bytes.len(),
            gpu.stream.cu_stream().cast(),
        )
    };
    match rc {
        0 => Ok(()),
        -1 => Err(Error::invalid(
            call,
            format!(
                "an nvcc-compiled translation unit has a device state of another size than this \
                 runtime's {} bytes (device library headers and runtime versions differ): \
                 rebuild it with this rshmem's headers",
                bytes.len()
            ),
        )),
        code => Err(Error::Cuda {
            call,
            what: "copying the device state into an nvcc-compiled translation unit \
                   (cudaMemcpyToSymbolAsync)"
                .into(),
            code: format!("cudaError_t {code}"),
        }),
    }
}

/// Installs `st` in every registered unit and remembers it for units registered later.
pub(crate) fn deliver(call: &'static str, gpu: &Arc<Gpu>, st: &DeviceState) -> Result<()> {
    let mut u = units();
    u.live = Some((gpu.clone(), *st));
    for f in u.updaters.clone() {
        update(call, gpu, f, st)?;
    }
    Ok(())
}

/// At finalize: installs a zero state (version 0) in every unit and forgets the live world.
/// Best effort: a failure is logged (finalize must not fail because a unit cannot be reached).
pub(crate) fn retire(gpu: &Arc<Gpu>) {
    let mut u = units();
    if u.live.take().is_none() {
        return;
    }
    let zero = DeviceState::default();
    for f in u.updaters.clone() {
        if let Err(e) = update("finalize", gpu, f, &zero) {
            tracing::warn!(target: "rshmem::device", "clearing a unit's device state: {e}");
        }
    }
}

/// Number of registered units (for diagnostics and tests).
pub fn registered() -> usize {
    units().updaters.len()
}

/// Registers an nvcc-compiled translation unit's state updater (called by the device library's
/// static registrar when the program starts; see the module docs). While a world is live the
/// unit receives the current state at once. Returns 0, or -1 for a null function or when the
/// first delivery fails (the cause is printed on stderr as `rshmem: ...`).
#[no_mangle]
pub extern "C" fn rshmem_device_register_state_updater(f: Option<StateUpdater>) -> c_int {
    const CALL: &str = "rshmem_device_register_state_updater";
    let Some(f) = f else {
        crate::say!("rshmem: {CALL}: the updater function is NULL");
        return -1;
    };
    let result = std::panic::catch_unwind(|| {
        let mut u = units();
        if !u.updaters.iter().any(|g| *g as usize == f as usize) {
            u.updaters.push(f);
        }
        match &u.live {
            Some((gpu, st)) => update(CALL, gpu, f, st),
            None => Ok(()),
        }
    });
    match result {
        Ok(Ok(())) => 0,
        Ok(Err(e)) => {
            crate::say!("rshmem: {CALL}: {e}");
            -1
        }
        Err(_) => {
            crate::say!("rshmem: {CALL}: internal error (panic)");
            -1
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    unsafe extern "C" fn nop(_: *const c_void, _: usize, _: *mut c_void) -> c_int {
        0
    }

    #[test]
    fn registration_is_kept_once_and_null_is_refused() {
        let before = registered();
        assert_eq!(rshmem_device_register_state_updater(Some(nop)), 0);
        assert_eq!(rshmem_device_register_state_updater(Some(nop)), 0);
        assert_eq!(registered(), before + 1);
        assert_eq!(rshmem_device_register_state_updater(None), -1);
        assert_eq!(registered(), before + 1);
    }
}
