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
//!
//! **Modules the program loads itself** (`cuModuleLoad` of a cubin that includes the device
//! library, NVSHMEM's `nvshmemx_cumodule_init`): [`init_module`] finds the module's
//! `rshmem_state` with `cuModuleGetGlobal`, copies the current state into it and keeps the
//! module; every later state change (heap growth) reaches it like the units above, and
//! [`finalize_module`] (or the world's finalize) writes a zero state into it and forgets it. A
//! module must be finalized before the program unloads it.

use std::ffi::{c_int, c_void};
use std::sync::{Arc, Mutex, MutexGuard};

use super::DeviceState;
use crate::cuda::{copy, launch, Gpu};
use crate::error::{Error, Result};

/// What a translation unit registers: copies `size` bytes of device state into its
/// `rshmem_state` on `stream` (a `CUstream` of this PE's context, current on the calling
/// thread) and waits. Returns a `cudaError_t` value (0: done), or -1 when `size` is not the
/// unit's state size (device library and runtime versions differ).
pub type StateUpdater =
    unsafe extern "C" fn(state: *const c_void, size: usize, stream: *mut c_void) -> c_int;

struct Units {
    updaters: Vec<StateUpdater>,
    /// Modules the program loaded itself and handed to [`init_module`].
    modules: Modules,
    /// The live world's GPU and current state (None before init and after finalize).
    live: Option<(Arc<Gpu>, DeviceState)>,
}

static UNITS: Mutex<Units> = Mutex::new(Units {
    updaters: Vec::new(),
    modules: Modules { list: Vec::new() },
    live: None,
});

/// Where a module's state is written: the CUDA driver (or a stand-in in tests).
trait StateSink {
    /// Copies `bytes` into `module`'s `rshmem_state`.
    fn write(&self, call: &'static str, module: usize, bytes: &[u8]) -> Result<()>;
}

/// The modules of [`init_module`], by `CUmodule` handle value.
struct Modules {
    list: Vec<usize>,
}

impl Modules {
    /// Installs `st` in `module` and keeps it (once; a second init only reinstalls).
    fn add(
        &mut self,
        call: &'static str,
        module: usize,
        st: &DeviceState,
        sink: &dyn StateSink,
    ) -> Result<()> {
        if module == 0 {
            return Err(Error::invalid(call, "the module is NULL"));
        }
        sink.write(call, module, st.as_bytes())?;
        if !self.list.contains(&module) {
            self.list.push(module);
        }
        Ok(())
    }

    /// Writes a zero state into `module` and forgets it; an error if it was not added.
    fn remove(&mut self, call: &'static str, module: usize, sink: &dyn StateSink) -> Result<()> {
        let Some(i) = self.list.iter().position(|&m| m == module) else {
            return Err(Error::invalid(
                call,
                format!(
                    "module {module:#x} was not initialized with nvshmemx_cumodule_init / \
                     rshmemx_cumodule_init (or was finalized already)"
                ),
            ));
        };
        self.list.remove(i);
        sink.write(call, module, DeviceState::default().as_bytes())
    }

    /// Installs `st` in every module.
    fn deliver(&self, call: &'static str, st: &DeviceState, sink: &dyn StateSink) -> Result<()> {
        for &m in &self.list {
            sink.write(call, m, st.as_bytes())?;
        }
        Ok(())
    }

    /// Writes a zero state into every module (best effort) and forgets them all.
    fn retire(&mut self, sink: &dyn StateSink) {
        for m in std::mem::take(&mut self.list) {
            if let Err(e) = sink.write("finalize", m, DeviceState::default().as_bytes()) {
                tracing::warn!(target: "rshmem::device", "clearing a module's device state: {e}");
            }
        }
    }
}

/// The CUDA driver as a [`StateSink`]: `cuModuleGetGlobal` and a copy on `gpu`'s stream.
struct Driver<'a>(&'a Gpu);

impl StateSink for Driver<'_> {
    fn write(&self, call: &'static str, module: usize, bytes: &[u8]) -> Result<()> {
        self.0.bind(call)?;
        // SAFETY: `module` is a CUmodule handle the program passed in (documented: loaded in
        // this PE's context, which is bound, and not unloaded).
        let found = unsafe { launch::module_global(call, module, c"rshmem_state") }?;
        let Some((dptr, size)) = found else {
            return Err(Error::invalid(
                call,
                "the module has no rshmem_state: it does not include the device library \
                 (rshmem/rshmem.cuh, or nvshmem.h of rshmem's compatibility headers), or was \
                 compiled with -rdc without a device link",
            ));
        };
        if size != bytes.len() {
            return Err(Error::invalid(
                call,
                format!(
                    "the module's rshmem_state is {size} bytes but this runtime's device state \
                     is {} (device library headers and runtime versions differ): rebuild the \
                     module with this rshmem's headers",
                    bytes.len()
                ),
            ));
        }
        // SAFETY: `dptr` is the module's `size`-byte global (checked equal to bytes.len()); the
        // source is a live host buffer; the stream belongs to the bound context, and the copy
        // is waited for below before `bytes` can go away.
        unsafe {
            copy::host_to_device(
                call,
                "copying the device state into the module",
                dptr,
                bytes.as_ptr(),
                bytes.len(),
                &self.0.stream,
            )
        }?;
        self.0.sync(call)
    }
}

/// **Local.** Makes the device state reach `module`, a `CUmodule` the program loaded itself
/// in this PE's context from an image that includes the device library (NVSHMEM's
/// `nvshmemx_cumodule_init`): installs the current state in its `rshmem_state` now and after
/// every change, until [`finalize_module`] or the world's finalize. Needs a live world on the
/// GPU backend.
pub fn init_module(module: usize) -> Result<()> {
    const CALL: &str = "rshmemx_cumodule_init";
    let (mut u, gpu, st) = live_units(
        CALL,
        "call it after rshmem_init / nvshmem_init, on a PE with a GPU",
    )?;
    u.modules.add(CALL, module, &st, &Driver(&gpu))
}

/// **Local.** Writes a zero state into `module` (kernels launched from it afterwards trap
/// with a message) and stops updating it (NVSHMEM's `nvshmemx_cumodule_finalize`); an error
/// when it was not given to [`init_module`].
pub fn finalize_module(module: usize) -> Result<()> {
    const CALL: &str = "rshmemx_cumodule_finalize";
    let (mut u, gpu, _) = live_units(CALL, "its finalize already cleared every module")?;
    u.modules.remove(CALL, module, &Driver(&gpu))
}

/// The units with the live world's GPU and device state; `Error::State` (the reason ending in
/// `why`) when rshmem is not initialized on the GPU backend.
fn live_units(
    call: &'static str,
    why: &str,
) -> Result<(MutexGuard<'static, Units>, Arc<Gpu>, DeviceState)> {
    let u = units();
    match u.live.clone() {
        Some((gpu, st)) => Ok((u, gpu, st)),
        None => Err(Error::State {
            call,
            reason: format!("rshmem is not initialized on the GPU backend ({why})"),
        }),
    }
}

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
    u.modules.deliver(call, st, &Driver(gpu))
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
    u.modules.retire(&Driver(gpu));
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
    use std::cell::RefCell;

    /// Records every write; modules listed in `missing` have no `rshmem_state`.
    #[derive(Default)]
    struct Fake {
        writes: RefCell<Vec<(usize, Vec<u8>)>>,
        missing: Vec<usize>,
    }

    impl StateSink for Fake {
        fn write(&self, call: &'static str, module: usize, bytes: &[u8]) -> Result<()> {
            if self.missing.contains(&module) {
                return Err(Error::invalid(call, "the module has no rshmem_state"));
            }
            self.writes.borrow_mut().push((module, bytes.to_vec()));
            Ok(())
        }
    }

    fn state(n: u8) -> DeviceState {
        let mut st = DeviceState::default();
        // A recognisable, non-zero state: the first bytes set to n.
        // SAFETY: DeviceState is plain old data (repr(C), all fields integers/pointers as
        // integers); any byte pattern is a valid value.
        let b = unsafe {
            std::slice::from_raw_parts_mut((&mut st as *mut DeviceState).cast::<u8>(), 8)
        };
        b.fill(n);
        st
    }

    #[test]
    fn modules_get_the_state_now_on_every_change_and_zero_at_the_end() {
        let sink = Fake::default();
        let mut m = Modules { list: Vec::new() };
        let zero = DeviceState::default().as_bytes().to_vec();
        m.add("init", 0x10, &state(1), &sink).unwrap();
        m.add("init", 0x20, &state(1), &sink).unwrap();
        m.add("init", 0x10, &state(1), &sink).unwrap();
        assert_eq!(m.list, [0x10, 0x20], "kept once each");
        sink.writes.borrow_mut().clear();
        // Heap growth: every module gets the new state.
        m.deliver("grow", &state(2), &sink).unwrap();
        assert_eq!(
            *sink.writes.borrow(),
            [
                (0x10, state(2).as_bytes().to_vec()),
                (0x20, state(2).as_bytes().to_vec())
            ]
        );
        sink.writes.borrow_mut().clear();
        // Finalizing one zeroes it and stops its updates.
        m.remove("fin", 0x10, &sink).unwrap();
        assert_eq!(*sink.writes.borrow(), [(0x10, zero.clone())]);
        let e = m.remove("fin", 0x10, &sink).unwrap_err().to_string();
        assert!(e.contains("fin") && e.contains("not initialized"), "{e}");
        sink.writes.borrow_mut().clear();
        m.deliver("grow", &state(3), &sink).unwrap();
        assert_eq!(sink.writes.borrow().len(), 1, "only 0x20 is left");
        sink.writes.borrow_mut().clear();
        // The world's finalize zeroes the rest and forgets them.
        m.retire(&sink);
        assert_eq!(*sink.writes.borrow(), [(0x20, zero)]);
        assert!(m.list.is_empty());
    }

    #[test]
    fn bad_modules_are_refused_and_not_kept() {
        let sink = Fake {
            missing: vec![0x30],
            ..Fake::default()
        };
        let mut m = Modules { list: Vec::new() };
        let e = m
            .add("rshmemx_cumodule_init", 0, &state(1), &sink)
            .unwrap_err();
        assert!(e.to_string().contains("NULL"), "{e}");
        let e = m
            .add("rshmemx_cumodule_init", 0x30, &state(1), &sink)
            .unwrap_err();
        assert!(e.to_string().contains("rshmem_state"), "{e}");
        assert!(m.list.is_empty());
    }

    #[test]
    fn module_calls_need_a_live_gpu_world() {
        // No world in this test process: a clear state error naming the call.
        let e = init_module(0x40).unwrap_err().to_string();
        assert!(
            e.contains("rshmemx_cumodule_init") && e.contains("not initialized"),
            "{e}"
        );
        let e = finalize_module(0x40).unwrap_err().to_string();
        assert!(e.contains("rshmemx_cumodule_finalize"), "{e}");
    }

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
