//! Thin checked wrappers over the CUDA driver (`cudarc::driver::sys`): every call returns
//! `Result` with the rshmem call and what was being done. libcuda is loaded at run time, so
//! builds and CPU-only runs never need CUDA. The rest of the runtime calls the driver only
//! through this module's wrappers (`runtime/tests/cuda_boundary.rs` fails on a raw call
//! elsewhere).

pub(crate) mod copy;
pub(crate) mod kernels;
pub(crate) mod launch;
pub(crate) mod pinned;
pub(crate) mod target;

use std::os::fd::{FromRawFd, OwnedFd};
use std::sync::Arc;

use cudarc::driver::sys::{self, CUresult};
use cudarc::driver::{CudaContext, CudaStream};

use crate::error::{Error, Result};

/// Turns a driver status into a `Result`.
pub(crate) fn check(r: CUresult, call: &'static str, what: &str) -> Result<()> {
    if r == CUresult::CUDA_SUCCESS {
        Ok(())
    } else {
        Err(Error::Cuda {
            call,
            what: what.to_string(),
            code: format!("{r:?}"),
        })
    }
}

pub use crate::error::{failed_context_note, stream_query_hint};

/// True if libcuda can be loaded (never panics).
pub fn driver_present() -> bool {
    // SAFETY: only probes for the library with dlopen.
    unsafe { sys::is_culib_present() }
}

/// Work queues of one GPU's MPS clients together: MPS gives them one pool, and on an H200
/// 6 clients of 16 queues started while 8 of 16 (or 4 of 32) did not.
const MPS_POOL: usize = 96;
/// The most work queues rshmem asks for.
const MAX_WORK_QUEUES: usize = 16;

/// The hardware work queues (`CUDA_DEVICE_MAX_CONNECTIONS`) rshmem asks for on a host with
/// `local_pes` PEs, or None to leave CUDA's default (8): as many as fit the MPS pool were all
/// of them to share one GPU, at most `MAX_WORK_QUEUES` (16). See [`init_driver`].
pub fn work_queues(local_pes: usize) -> Option<usize> {
    let q = (MPS_POOL / local_pes.max(1)).min(MAX_WORK_QUEUES);
    (q > 8).then_some(q)
}

/// True if this process has initialized the CUDA driver (`cuInit`); false without a driver.
pub fn initialized() -> bool {
    if !driver_present() {
        return false;
    }
    let mut n = 0i32;
    // SAFETY: a plain driver query with a valid out-pointer; before cuInit it only reports that
    // the driver is not initialized.
    let r = unsafe { sys::cuDeviceGetCount(&mut n) };
    r != CUresult::CUDA_ERROR_NOT_INITIALIZED
}

/// Initializes the CUDA driver (`cuInit`) for a PE of a host with `local_pes` PEs; false when
/// it cannot be. The one place rshmem initializes CUDA, so that it can first widen the
/// hardware work queues.
///
/// CUDA feeds the streams of a context to the GPU through a few hardware work queues
/// (`CUDA_DEVICE_MAX_CONNECTIONS`, read once, by `cuInit`), and work of two streams that share
/// a queue runs in the order it was queued. The proxy and the remote transports' targets copy
/// into and out of this PE's GPU memory from host threads, on streams of their own, while a
/// kernel may be waiting for exactly that copy (a device get through the proxy, a signal from
/// a peer). If that kernel's stream has more work queued behind it and the copy lands in the
/// same hardware queue, the copy waits for that work, which waits for the kernel, which waits
/// for the copy. Measured with 2 PEs on one H200 under MPS and `RSHMEM_DISABLE_P2P=1`: the
/// `stream` scenario deadlocked in 2 of 40 runs with CUDA's default, 6 of 6 with
/// `CUDA_DEVICE_MAX_CONNECTIONS=1`, 0 of 40 with 12, 16 or 32. So before CUDA is initialized,
/// and when the program has not set it, rshmem sets `CUDA_DEVICE_MAX_CONNECTIONS` to
/// [`work_queues`]. A program that initialized CUDA first, or chose its own value, keeps its
/// queues; a copy that then stays stuck fails after `RSHMEM_TIMEOUT` (`cuda::target::GpuMem`).
pub fn init_driver(local_pes: usize) -> bool {
    if !driver_present() {
        return false;
    }
    if !initialized() && std::env::var_os("CUDA_DEVICE_MAX_CONNECTIONS").is_none() {
        if let Some(q) = work_queues(local_pes) {
            // Nothing in this process has initialized CUDA yet, so no context exists.
            std::env::set_var("CUDA_DEVICE_MAX_CONNECTIONS", q.to_string());
            tracing::debug!(target: "rshmem::cuda", "CUDA_DEVICE_MAX_CONNECTIONS={q} (set by rshmem before initializing CUDA)");
        }
    }
    // SAFETY: plain driver call.
    unsafe { sys::cuInit(0) == CUresult::CUDA_SUCCESS }
}

/// Number of CUDA devices visible to this process (0 when there is no driver), which
/// initializes CUDA for a PE of a host with `local_pes` PEs ([`init_driver`]).
pub fn device_count(local_pes: usize) -> usize {
    if !init_driver(local_pes) {
        return 0;
    }
    // SAFETY: plain driver calls with valid out-pointers.
    unsafe {
        let mut n = 0i32;
        if sys::cuDeviceGetCount(&mut n) != CUresult::CUDA_SUCCESS {
            return 0;
        }
        n.max(0) as usize
    }
}

/// The driver's handle of device `ordinal` (`cuDeviceGet`).
fn device(call: &'static str, ordinal: usize) -> Result<sys::CUdevice> {
    let mut dev: sys::CUdevice = 0;
    // SAFETY: a plain driver query with a valid out-pointer.
    let r = unsafe { sys::cuDeviceGet(&mut dev, ordinal as i32) };
    check(r, call, &format!("finding GPU {ordinal} (cuDeviceGet)"))?;
    Ok(dev)
}

/// The UUID of device `ordinal` (`cuDeviceGet`, `cuDeviceGetUuid`): one physical GPU, the same
/// in every process that sees it whatever its ordinal there.
pub(crate) fn device_uuid(call: &'static str, ordinal: usize) -> Result<[u8; 16]> {
    let dev = device(call, ordinal)?;
    let mut id = sys::CUuuid_st { bytes: [0; 16] };
    // SAFETY: a plain driver query with a valid out-pointer and a device handle from the driver.
    let r = unsafe { sys::cuDeviceGetUuid_v2(&mut id, dev) };
    check(
        r,
        call,
        &format!("reading the UUID of GPU {ordinal} (cuDeviceGetUuid)"),
    )?;
    Ok(id.bytes.map(|b| b as u8))
}

/// The number of streaming multiprocessors of device `ordinal` (`cuDeviceGet`,
/// `cuDeviceGetAttribute` of `CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT`); with the [`Gpu`] at
/// hand, [`Gpu::multiprocessor_count`] asks its context instead.
pub(crate) fn multiprocessor_count(call: &'static str, ordinal: usize) -> Result<i32> {
    let dev = device(call, ordinal)?;
    let mut n = 0i32;
    // SAFETY: a plain driver query with a valid out-pointer and a device handle from the driver.
    let r = unsafe {
        sys::cuDeviceGetAttribute(
            &mut n,
            sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT,
            dev,
        )
    };
    check(
        r,
        call,
        &format!("reading the multiprocessor count of GPU {ordinal} (cuDeviceGetAttribute)"),
    )?;
    Ok(n)
}

/// Whether an NVRTC architecture (`sm_90`, `sm_100`, ...) has programmatic dependent launch
/// (compute capability 9.0 and later).
fn arch_has_programmatic_launch(arch: &str) -> bool {
    arch.strip_prefix("sm_")
        .and_then(|v| v.parse::<u32>().ok())
        .is_some_and(|v| v >= 90)
}

/// The GPU of this PE: its primary context and an internal stream for host-API copies.
pub struct Gpu {
    /// The context (the device's primary context, shared with CUDA runtime code in the process).
    pub ctx: Arc<CudaContext>,
    /// rshmem's internal stream for host-initiated copies and kernels.
    pub stream: Arc<CudaStream>,
    /// Device ordinal.
    pub ordinal: usize,
    /// VMM granularity for this device (bytes).
    pub granularity: usize,
    /// Compute capability as an NVRTC architecture, e.g. `sm_90`.
    pub arch: String,
    /// Whether kernels can be launched as programmatic dependents (from `arch`, once).
    programmatic: bool,
}

crate::debug_fields!(Gpu, |g| { ordinal: g.ordinal });

impl Gpu {
    /// Opens device `ordinal` (retaining its primary context) and checks it supports what the
    /// symmetric heap needs.
    pub fn open(ordinal: usize) -> Result<Arc<Gpu>> {
        let call = "init";
        let ctx = CudaContext::new(ordinal).map_err(|e| Error::Cuda {
            call,
            what: format!("creating the context of GPU {ordinal}"),
            code: format!("{e:?}"),
        })?;
        let dev = ctx.cu_device();
        for (attr, name) in [
            (
                sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED,
                "virtual memory management",
            ),
            (
                sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED,
                "POSIX file-descriptor memory handles",
            ),
        ] {
            let mut v = 0i32;
            // SAFETY: valid out-pointer and device handle.
            check(unsafe { sys::cuDeviceGetAttribute(&mut v, attr, dev) }, call, "cuDeviceGetAttribute")?;
            if v == 0 {
                return Err(Error::Unsupported {
                    call,
                    reason: format!("GPU {ordinal} lacks {name}, which the GPU symmetric heap needs; use RSHMEM_BACKEND=cpu"),
                });
            }
        }
        let mut cc = [0i32; 2];
        for (i, attr) in [
            sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR,
            sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR,
        ]
        .into_iter()
        .enumerate()
        {
            // SAFETY: valid out-pointer and device handle.
            check(
                // SAFETY: valid out-pointer and device handle.
                unsafe { sys::cuDeviceGetAttribute(&mut cc[i], attr, dev) },
                call,
                "compute capability",
            )?;
        }
        let stream = ctx.new_stream().map_err(|e| Error::Cuda {
            call,
            what: "creating rshmem's internal stream".into(),
            code: format!("{e:?}"),
        })?;
        let prop = alloc_prop(ordinal);
        let gran = granularity(&prop, call, "cuMemGetAllocationGranularity")?;
        let arch = format!("sm_{}{}", cc[0], cc[1]);
        Ok(Arc::new(Gpu {
            ctx,
            stream,
            ordinal,
            granularity: gran.max(1),
            programmatic: arch_has_programmatic_launch(&arch),
            arch,
        }))
    }

    /// The number of streaming multiprocessors of this GPU (cudarc's
    /// `CudaContext::attribute`; its error converts as [`Error::Driver`]).
    pub(crate) fn multiprocessor_count(&self) -> Result<i32> {
        Ok(self
            .ctx
            .attribute(sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)?)
    }

    /// Whether kernels can be launched as programmatic dependents of the kernel before them
    /// (compute capability 9.0 and later; [`launch::Start::Overlapping`]).
    pub(crate) fn programmatic_launch(&self) -> bool {
        self.programmatic
    }

    /// Makes this GPU's context current on the calling thread.
    pub fn bind(&self, call: &'static str) -> Result<()> {
        self.ctx.bind_to_thread().map_err(|e| Error::Cuda {
            call,
            what: "binding the context".into(),
            code: format!("{e:?}"),
        })
    }

    /// Waits for everything queued on the internal stream.
    pub fn sync(&self, call: &'static str) -> Result<()> {
        self.bind(call)?;
        // SAFETY: the stream handle is alive (owned by self).
        check(
            unsafe { sys::cuStreamSynchronize(self.stream.cu_stream()) },
            call,
            "synchronizing rshmem's stream",
        )
    }
}

/// Queues on `stream` a write of the aligned word of `size` bytes (4 or 8) at `addr` with the
/// low bytes of `value`, as a stream memory operation (`cuStreamWriteValue64`/`32`: no kernel,
/// no copy). Callers either report the error or fall back to a copy where the memory does not
/// take it.
///
/// # Safety
/// `addr` must be an aligned word of GPU memory of `stream`'s context, which is current.
pub(crate) unsafe fn stream_write_word(
    call: &'static str,
    what: &str,
    stream: &CudaStream,
    addr: u64,
    size: usize,
    value: u64,
) -> Result<()> {
    let stream = stream.cu_stream();
    // SAFETY: forwarded from the caller; the stream is alive (borrowed).
    let r = unsafe {
        if size == 8 {
            sys::cuStreamWriteValue64_v2(stream, addr, value, 0)
        } else {
            sys::cuStreamWriteValue32_v2(stream, addr, value as u32, 0)
        }
    };
    check(r, call, what)
}

/// The minimum allocation granularity, in bytes, of memory with the properties `prop`.
fn granularity(prop: &sys::CUmemAllocationProp, call: &'static str, what: &str) -> Result<usize> {
    let mut gran = 0usize;
    check(
        // SAFETY: valid out-pointer and property struct.
        unsafe {
            sys::cuMemGetAllocationGranularity(
                &mut gran,
                prop,
                sys::CUmemAllocationGranularity_flags::CU_MEM_ALLOC_GRANULARITY_MINIMUM,
            )
        },
        call,
        what,
    )?;
    Ok(gran)
}

pub(crate) fn alloc_prop(ordinal: usize) -> sys::CUmemAllocationProp {
    // SAFETY: CUmemAllocationProp is a plain C struct for which all-zero is a valid value.
    let mut prop: sys::CUmemAllocationProp = unsafe { std::mem::zeroed() };
    prop.type_ = sys::CUmemAllocationType::CU_MEM_ALLOCATION_TYPE_PINNED;
    prop.requestedHandleTypes =
        sys::CUmemAllocationHandleType::CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
    prop.location.type_ = sys::CUmemLocationType::CU_MEM_LOCATION_TYPE_DEVICE;
    prop.location.id = ordinal as i32;
    prop
}

/// Reserves `len` bytes of device virtual address space, at `at` exactly when given (None if
/// the driver picks another address).
pub(crate) fn reserve(len: usize, align: usize, at: Option<usize>) -> Result<Option<usize>> {
    let mut p: sys::CUdeviceptr = 0;
    // SAFETY: valid out-pointer; a reservation touches no memory.
    let r = unsafe { sys::cuMemAddressReserve(&mut p, len, align, at.unwrap_or(0) as u64, 0) };
    match (r, at) {
        (CUresult::CUDA_SUCCESS, Some(a)) if p as usize != a => {
            // SAFETY: p..p+len was just reserved by us and holds no mappings.
            unsafe { sys::cuMemAddressFree(p, len) };
            Ok(None)
        }
        (CUresult::CUDA_SUCCESS, _) => Ok(Some(p as usize)),
        (_, Some(_)) => Ok(None),
        (e, None) => check(
            e,
            "init",
            &format!("reserving {len} bytes of GPU address space"),
        )
        .map(|_| None),
    }
}

/// Frees a reservation made by [`reserve`] (all mappings inside must be gone).
pub(crate) fn unreserve(addr: usize, len: usize) {
    // SAFETY: the caller owns the reservation and has unmapped it.
    unsafe { sys::cuMemAddressFree(addr as u64, len) };
}

/// Creates `len` bytes of GPU memory on `gpu`, maps it at `addr`, grants the GPU access, and
/// returns a POSIX fd that other processes can import.
pub(crate) fn create_and_map(gpu: &Gpu, addr: usize, len: usize) -> Result<OwnedFd> {
    let call = "malloc";
    gpu.bind(call)?;
    let prop = alloc_prop(gpu.ordinal);
    let mut h: sys::CUmemGenericAllocationHandle = 0;
    // SAFETY: valid out-pointer and property struct.
    check(
        // SAFETY: valid out-pointer and property struct.
        unsafe { sys::cuMemCreate(&mut h, len, &prop, 0) },
        call,
        &format!("cuMemCreate of {len} bytes on GPU {}", gpu.ordinal),
    )?;
    let r = (|| {
        map_with_access(call, "cuMemMap", gpu, h, addr, len)?;
        let mut fd: i32 = -1;
        // SAFETY: the out-pointer receives an int fd for the POSIX handle type.
        check(
            // SAFETY: the out-pointer receives an int fd for the POSIX handle type.
            unsafe {
                sys::cuMemExportToShareableHandle(
                    (&mut fd as *mut i32).cast(),
                    h,
                    sys::CUmemAllocationHandleType::CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR,
                    0,
                )
            },
            call,
            "cuMemExportToShareableHandle",
        )?;
        // SAFETY: the driver returned a fresh fd that we now own.
        Ok(unsafe { OwnedFd::from_raw_fd(fd) })
    })();
    // The mapping (and the exported fd) keep the memory alive; drop our handle either way.
    // SAFETY: h is a live allocation handle owned by this function.
    unsafe { sys::cuMemRelease(h) };
    r
}

/// Imports a peer's exported GPU memory and maps it at `addr` with access for our GPU.
pub(crate) fn import_and_map(gpu: &Gpu, fd: &OwnedFd, addr: usize, len: usize) -> Result<()> {
    import_and_map_as("malloc", "a peer's heap chunk", gpu, fd, addr, len)
}

fn import_and_map_as(
    call: &'static str,
    what: &str,
    gpu: &Gpu,
    fd: &OwnedFd,
    addr: usize,
    len: usize,
) -> Result<()> {
    use std::os::fd::AsRawFd;
    gpu.bind(call)?;
    let mut h: sys::CUmemGenericAllocationHandle = 0;
    check(
        // SAFETY: for POSIX fds the "OS handle" argument is the fd value itself.
        unsafe {
            sys::cuMemImportFromShareableHandle(
                &mut h,
                fd.as_raw_fd() as usize as *mut std::ffi::c_void,
                sys::CUmemAllocationHandleType::CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR,
            )
        },
        call,
        &format!("cuMemImportFromShareableHandle ({what})"),
    )?;
    let r = map_with_access(call, &format!("cuMemMap of {what}"), gpu, h, addr, len);
    // SAFETY: h is the handle we imported; the mapping keeps the memory alive.
    unsafe { sys::cuMemRelease(h) };
    r
}

/// A user's CUDA VMM allocation retained for symmetric registration: the allocation handle
/// (one reference, released on drop) and a POSIX fd that other processes can import.
pub(crate) struct UserAllocation {
    handle: sys::CUmemGenericAllocationHandle,
    /// The allocation exported as a POSIX file descriptor.
    pub(crate) fd: OwnedFd,
    /// Its minimum mapping granularity (addresses it is mapped at must be aligned to it).
    pub(crate) granularity: usize,
}

impl Drop for UserAllocation {
    fn drop(&mut self) {
        // SAFETY: `handle` holds the one reference `cuMemRetainAllocationHandle` gave us;
        // mappings made from it keep the memory alive on their own.
        unsafe { sys::cuMemRelease(self.handle) };
    }
}

/// Checks that `[addr, addr+len)` is the start of a CUDA VMM allocation (`cuMemCreate`) of
/// this PE's GPU that can be exported as a POSIX file descriptor, `len` a multiple of the
/// allocation granularity, and retains its handle. The error says which condition failed.
pub(crate) fn retain_user_allocation(
    call: &'static str,
    gpu: &Gpu,
    addr: usize,
    len: usize,
) -> Result<UserAllocation> {
    gpu.bind(call)?;
    let bad = |reason: String| Error::invalid(call, reason);
    let mut h: sys::CUmemGenericAllocationHandle = 0;
    // SAFETY: valid out-pointer; the driver only looks `addr` up in its tables.
    let r = unsafe { sys::cuMemRetainAllocationHandle(&mut h, addr as *mut std::ffi::c_void) };
    if r != CUresult::CUDA_SUCCESS {
        return Err(bad(format!(
            "buffer {addr:#x} is not CUDA VMM memory (cuMemRetainAllocationHandle: {r:?}): only \
             memory made with cuMemCreate and mapped with cuMemMap can be registered \
             symmetrically, not cudaMalloc, cudaMallocManaged or host memory"
        )));
    }
    // From here on `handle` holds one reference: kept by the result, released on errors.
    let handle = h;
    let check_props = || -> Result<usize> {
        // SAFETY: plain C struct; all-zero is valid.
        let mut prop: sys::CUmemAllocationProp = unsafe { std::mem::zeroed() };
        check(
            // SAFETY: valid out-pointer, live handle.
            unsafe { sys::cuMemGetAllocationPropertiesFromHandle(&mut prop, handle) },
            call,
            "cuMemGetAllocationPropertiesFromHandle of the buffer",
        )?;
        // A bit mask; the location type may hold a value newer than these bindings: read it as
        // a plain integer.
        let handle_types = prop.requestedHandleTypes.0;
        // SAFETY: `location.type_` is a 32-bit C enum inside `prop`, which is initialized.
        let loc_type = unsafe { std::ptr::addr_of!(prop.location.type_).cast::<u32>().read() };
        let posix = sys::CUmemAllocationHandleType::CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR.0;
        if handle_types & posix == 0 {
            return Err(bad(format!(
                "buffer {addr:#x} was created without CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR \
                 in CUmemAllocationProp::requestedHandleTypes (handle types {handle_types:#x}), \
                 so it cannot be shared with the other PEs of this host"
            )));
        }
        let device = sys::CUmemLocationType::CU_MEM_LOCATION_TYPE_DEVICE as u32;
        if loc_type != device || prop.location.id != gpu.ordinal as i32 {
            return Err(bad(format!(
                "buffer {addr:#x} is not memory of this PE's GPU {} (location type {loc_type}, \
                 id {})",
                gpu.ordinal, prop.location.id
            )));
        }
        let gran = granularity(&prop, call, "cuMemGetAllocationGranularity of the buffer")?;
        if gran == 0 || len % gran != 0 {
            return Err(bad(format!(
                "size {len} is not a multiple of the buffer's allocation granularity ({gran} bytes)"
            )));
        }
        let (mut base, mut size): (sys::CUdeviceptr, usize) = (0, 0);
        // SAFETY: valid out-pointers; the driver only looks `addr` up.
        let r = unsafe { sys::cuMemGetAddressRange_v2(&mut base, &mut size, addr as u64) };
        if r == CUresult::CUDA_SUCCESS && base as usize != addr {
            return Err(bad(format!(
                "buffer {addr:#x} is not the start of the mapped range that holds it (which \
                 starts at {base:#x}): pass the address the allocation is mapped at, in an \
                 address reservation of its own"
            )));
        }
        if r == CUresult::CUDA_SUCCESS && len > size {
            return Err(bad(format!(
                "size {len} is larger than the buffer's mapping of {size} bytes at {addr:#x}"
            )));
        }
        Ok(gran)
    };
    let fd = check_props().and_then(|gran| {
        let mut fd: i32 = -1;
        check(
            // SAFETY: the out-pointer receives an int fd for the POSIX handle type.
            unsafe {
                sys::cuMemExportToShareableHandle(
                    (&mut fd as *mut i32).cast(),
                    handle,
                    sys::CUmemAllocationHandleType::CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR,
                    0,
                )
            },
            call,
            "cuMemExportToShareableHandle of the buffer",
        )?;
        // SAFETY: the driver returned a fresh fd that we now own.
        Ok((unsafe { OwnedFd::from_raw_fd(fd) }, gran))
    });
    match fd {
        Ok((fd, granularity)) => Ok(UserAllocation {
            handle,
            fd,
            granularity,
        }),
        Err(e) => {
            // SAFETY: the reference retained above; nothing else uses it.
            unsafe { sys::cuMemRelease(handle) };
            Err(e)
        }
    }
}

/// Maps the first `len` bytes of a retained user allocation at `addr` (an unmapped part of our
/// reservation) with access for our GPU.
pub(crate) fn map_user_allocation(
    call: &'static str,
    gpu: &Gpu,
    a: &UserAllocation,
    addr: usize,
    len: usize,
) -> Result<()> {
    let what = "cuMemMap of the registered buffer into the symmetric heap";
    map_with_access(call, what, gpu, a.handle, addr, len)
}

/// Imports a peer's exported user allocation and maps its first `len` bytes at `addr`.
pub(crate) fn import_user_allocation(
    call: &'static str,
    gpu: &Gpu,
    fd: &OwnedFd,
    addr: usize,
    len: usize,
) -> Result<()> {
    import_and_map_as(call, "a peer's registered buffer", gpu, fd, addr, len)
}

/// Maps `len` bytes of the allocation `h` at `addr` (an unmapped part of our reservation) and
/// gives `gpu` read-write access to them (binding its context first); unmaps them again when
/// access cannot be set. `what` names the mapping in errors. The one mapping step of a heap
/// chunk made here, a peer's imported one and a registered user allocation.
fn map_with_access(
    call: &'static str,
    what: &str,
    gpu: &Gpu,
    h: sys::CUmemGenericAllocationHandle,
    addr: usize,
    len: usize,
) -> Result<()> {
    gpu.bind(call)?;
    check(
        // SAFETY: addr..addr+len is an unmapped part of our reservation; the handle is live
        // (the caller holds it).
        unsafe { sys::cuMemMap(addr as u64, len, 0, h, 0) },
        call,
        what,
    )?;
    set_access_as(call, gpu, addr, len).inspect_err(|_| unmap(addr, len))
}

fn set_access_as(call: &'static str, gpu: &Gpu, addr: usize, len: usize) -> Result<()> {
    // SAFETY: plain C struct; zero is valid.
    let mut desc: sys::CUmemAccessDesc = unsafe { std::mem::zeroed() };
    desc.location.type_ = sys::CUmemLocationType::CU_MEM_LOCATION_TYPE_DEVICE;
    desc.location.id = gpu.ordinal as i32;
    desc.flags = sys::CUmemAccess_flags::CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    // SAFETY: addr..addr+len is mapped; desc is valid for one entry.
    check(
        unsafe { sys::cuMemSetAccess(addr as u64, len, &desc, 1) },
        call,
        "cuMemSetAccess",
    )
}

/// Unmaps a mapped range (at teardown).
pub(crate) fn unmap(addr: usize, len: usize) {
    // SAFETY: the caller mapped this range and nothing uses it any more.
    unsafe { sys::cuMemUnmap(addr as u64, len) };
}

#[cfg(test)]
mod tests {
    use super::{arch_has_programmatic_launch, failed_context_note, work_queues};
    use crate::error::Error;

    #[test]
    fn programmatic_launch_from_compute_capability_9_on() {
        for (arch, has) in [
            ("sm_90", true),
            ("sm_90a", false),
            ("sm_100", true),
            ("sm_120", true),
            ("sm_89", false),
            ("sm_80", false),
            ("compute_90", false),
            ("", false),
        ] {
            assert_eq!(arch_has_programmatic_launch(arch), has, "{arch}");
        }
    }

    #[test]
    fn a_failed_context_is_named_as_the_cause() {
        // The message of the module load that followed moe_shuffle's faulting kernel.
        let e = Error::Cuda {
            call: "barrier_all_on_stream",
            what: "loading a module".into(),
            code: "DriverError(CUDA_ERROR_ILLEGAL_ADDRESS, \"an illegal memory access\")".into(),
        };
        let text = e.to_string();
        assert!(text.contains("CUDA_ERROR_ILLEGAL_ADDRESS"), "{text}");
        assert!(text.contains("failed earlier: a kernel that ran before this call faulted"));
        // Any other status is reported as it was.
        let e = Error::Cuda {
            call: "malloc",
            what: "creating memory".into(),
            code: "CUDA_ERROR_OUT_OF_MEMORY".into(),
        };
        assert_eq!(
            e.to_string(),
            "malloc: CUDA error CUDA_ERROR_OUT_OF_MEMORY while creating memory"
        );
        assert_eq!(failed_context_note("CUDA_ERROR_INVALID_HANDLE"), "");
        assert!(!failed_context_note("CUDA_ERROR_LAUNCH_FAILED").is_empty());
        // A failed stream query: the failed context, or else a stream that is not live.
        assert_eq!(
            super::stream_query_hint("CUDA_ERROR_INVALID_HANDLE"),
            ": is it a live CUDA stream?"
        );
        assert_eq!(
            super::stream_query_hint("CUDA_ERROR_ILLEGAL_ADDRESS"),
            failed_context_note("CUDA_ERROR_ILLEGAL_ADDRESS")
        );
    }

    #[test]
    fn work_queues_fit_the_mps_pool() {
        // Few PEs: the most rshmem asks for.
        assert_eq!(work_queues(1), Some(16));
        assert_eq!(work_queues(6), Some(16));
        // More: what fits 96 were they all on one GPU under MPS.
        assert_eq!(work_queues(8), Some(12));
        assert_eq!(work_queues(10), Some(9));
        // No more than CUDA's default would fit: left alone.
        assert_eq!(work_queues(12), None);
        assert_eq!(work_queues(64), None);
        assert_eq!(work_queues(0), Some(16));
    }
}
