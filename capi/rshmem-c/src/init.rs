//! Init (plain, with a unique id, over an MPI communicator found at run time), the unique id,
//! the choice of GPU, and finalize.

use std::collections::HashMap;
use std::ffi::{c_char, c_int, c_uint, c_void};
use std::sync::Mutex;

use rt::config::BackendChoice;
use rt::cudarc::driver::sys;

use crate::{current, fail, guarded_status, invalid, CResult, Code, Fail, Rt, NOT_INIT, RT};

/// Bytes of the text of a unique id (`rshmem_uniqueid_t.internal`).
const UID_TEXT: usize = 124;
const UID_VERSION: c_int = 1;
const ATTR_VERSION: c_int = 1;
const WITH_MPI_COMM: c_uint = 1 << 1;
const WITH_UNIQUEID: c_uint = 1 << 3;

/// `rshmem_uniqueid_t`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct UniqueIdC {
    version: c_int,
    internal: [c_char; UID_TEXT],
}

/// `rshmem_init_attr_t`.
#[repr(C)]
pub struct InitAttr {
    version: c_int,
    mpi_comm: *mut c_void,
    rank: c_int,
    nranks: c_int,
    uid: UniqueIdC,
}

/// The device ordinal of the CUDA context current on this thread, if the program made one
/// current (the CUDA runtime makes the device's primary context current after cudaSetDevice
/// and its first call). `None` without a driver or a current context.
fn current_context_device() -> CResult<Option<usize>> {
    // Without cuInit there is no current context; rshmem's init initializes CUDA later.
    if !rt::cuda::initialized() {
        return Ok(None);
    }
    // SAFETY: plain driver queries with valid out-pointers.
    unsafe {
        let mut ctx: sys::CUcontext = std::ptr::null_mut();
        if sys::cuCtxGetCurrent(&mut ctx) != sys::CUresult::CUDA_SUCCESS || ctx.is_null() {
            return Ok(None);
        }
        let mut dev: sys::CUdevice = 0;
        let r = sys::cuCtxGetDevice(&mut dev);
        if r != sys::CUresult::CUDA_SUCCESS {
            return fail(
                Code::Cuda,
                format!("cuCtxGetDevice on the current CUDA context failed: {r:?}"),
            );
        }
        let mut n = 0i32;
        if sys::cuDeviceGetCount(&mut n) != sys::CUresult::CUDA_SUCCESS {
            return Ok(None);
        }
        for i in 0..n.max(0) {
            let mut d: sys::CUdevice = 0;
            if sys::cuDeviceGet(&mut d, i) == sys::CUresult::CUDA_SUCCESS && d == dev {
                return Ok(Some(i as usize));
            }
        }
        Ok(None)
    }
}

/// The builder's device: the current context's device, when the program made one current and
/// the backend may use a GPU. RSHMEM_DEVICE naming another device is an error.
fn choose_device(b: rt::Builder) -> CResult<rt::Builder> {
    let cfg = rt::config::Config::from_env()?;
    if cfg.backend == BackendChoice::Cpu {
        return Ok(b);
    }
    match (current_context_device()?, cfg.device) {
        (Some(d), Some(e)) if d != e => invalid(format!(
            "RSHMEM_DEVICE={e} but the program made a CUDA context of device {d} current before \
             init: unset RSHMEM_DEVICE or call cudaSetDevice({e})"
        )),
        (Some(d), _) => Ok(b.device(d)),
        (None, _) => Ok(b),
    }
}

/// Starts the runtime with `b` and publishes it.
fn start(call: &'static str, b: impl FnOnce() -> CResult<rt::Builder>) -> c_int {
    guarded_status(call, || {
        let _g = RT.lock();
        if RT.is_set() {
            return fail(
                Code::State,
                "rshmem is already initialized (call rshmem_finalize first)",
            );
        }
        // RSHMEM_LOG (or NVSHMEM_DEBUG) asks for rshmem's log: install its stderr logger
        // unless the program installed a subscriber of its own.
        if rt::config::effective(&|k| std::env::var(k).ok(), "RSHMEM_LOG").is_some() {
            rt::init_logging();
        }
        let b = choose_device(b()?)?;
        // Before meeting the other PEs, so that the handler is in place on every PE before any
        // PE can return from init and call rshmem_global_exit.
        rt::exit::install();
        let world = b.init()?;
        rt::exit::set_pids(host_pids(&world)?);
        if let Some(g) = world.gpu() {
            // The program's CUDA runtime calls on this thread use the same device and context.
            g.bind(call)?;
        }
        let me = world.my_pe();
        let rt = Box::new(Rt {
            world,
            teams: Mutex::new(HashMap::new()),
            buffers: Mutex::new(Vec::new()),
        });
        RT.publish(rt, me);
        Ok(())
    })
}

/// The process ids of this host's PEs (collective over the host's PEs), for
/// `rshmem_global_exit`.
fn host_pids(world: &rt::World) -> CResult<Vec<libc::pid_t>> {
    let node = world.team_node();
    let n = node.n_pes();
    let buf = world.calloc_bytes(n + 1, 8)?.cast::<i64>();
    // SAFETY: buf holds n + 1 i64s; the last one is this PE's source slot.
    let src = unsafe { buf.add(n) };
    let r = (|| -> CResult<Vec<libc::pid_t>> {
        // SAFETY: getpid has no preconditions.
        let me = unsafe { libc::getpid() } as i64;
        world.p(src, me, world.my_pe())?;
        world.fcollect(&node, buf, src, 1)?;
        let mut pids = vec![0i64; n];
        world.get(&mut pids, buf, world.my_pe())?;
        Ok(pids.into_iter().map(|p| p as libc::pid_t).collect())
    })();
    world.free_bytes(buf.cast())?;
    r
}

/// `rshmem_global_exit`: ends every PE of the host with `status` (they get a signal that makes
/// them exit with it), then this one; PEs of other hosts see this PE gone at their next wait on
/// it, or are stopped by the launcher.
#[no_mangle]
pub extern "C" fn rshmem_global_exit(status: c_int) -> ! {
    let _ = std::panic::catch_unwind(|| rt::exit::tell_others(status));
    use std::io::Write;
    let _ = std::io::stdout().flush();
    // SAFETY: fflush(NULL) flushes every C output stream; _exit ends the process at once (no
    // atexit handlers, which might call back into this library).
    unsafe {
        libc::fflush(std::ptr::null_mut());
        libc::_exit(status)
    }
}

/// `RSHMEM_STATUS_NOT_INITIALIZED`.
const STATUS_NOT_INITIALIZED: c_int = 0;
/// `RSHMEM_STATUS_IS_INITIALIZED`.
const STATUS_IS_INITIALIZED: c_int = 2;

/// `rshmem_init_status`: **local**, allowed before init.
#[no_mangle]
pub extern "C" fn rshmem_init_status() -> c_int {
    if !RT.is_set() {
        STATUS_NOT_INITIALIZED
    } else {
        STATUS_IS_INITIALIZED
    }
}

/// `RSHMEM_MAX_NAME_LEN`.
const MAX_NAME_LEN: usize = 256;

/// `rshmem_info_get_version`: **local**, allowed before init; the library's major and minor
/// version.
///
/// # Safety
/// `major` and `minor` are NULL or point to ints.
#[no_mangle]
pub unsafe extern "C" fn rshmem_info_get_version(major: *mut c_int, minor: *mut c_int) {
    let v = |s: &str| s.parse::<c_int>().unwrap_or(0);
    // SAFETY: NULL or valid, by the caller's contract.
    unsafe {
        if let Some(m) = major.as_mut() {
            *m = v(env!("CARGO_PKG_VERSION_MAJOR"));
        }
        if let Some(m) = minor.as_mut() {
            *m = v(env!("CARGO_PKG_VERSION_MINOR"));
        }
    }
}

/// `rshmem_info_get_name`: **local**, allowed before init; writes `rshmem <version>`
/// (NUL-terminated, at most `RSHMEM_MAX_NAME_LEN` bytes) into `name`.
///
/// # Safety
/// `name` is NULL or has room for `RSHMEM_MAX_NAME_LEN` bytes.
#[no_mangle]
pub unsafe extern "C" fn rshmem_info_get_name(name: *mut c_char) {
    if name.is_null() {
        return;
    }
    let text = concat!("rshmem ", env!("CARGO_PKG_VERSION"));
    let n = text.len().min(MAX_NAME_LEN - 1);
    // SAFETY: name has room for MAX_NAME_LEN bytes (the caller's contract); n + 1 <= that.
    unsafe {
        std::ptr::copy_nonoverlapping(text.as_ptr().cast::<c_char>(), name, n);
        *name.add(n) = 0;
    }
}

/// `rshmem_init`: **collective**; starts rshmem with the launcher's variables.
#[no_mangle]
pub extern "C" fn rshmem_init() -> c_int {
    start("rshmem_init", || Ok(rt::Builder::new()))
}

/// The text of a C unique id.
fn uid_of(u: &UniqueIdC) -> CResult<rt::UniqueId> {
    if u.version != UID_VERSION {
        return invalid(format!(
            "the unique id has version {} (expected {UID_VERSION}): initialize it with \
             RSHMEM_UNIQUEID_INITIALIZER and fill it with rshmem_get_uniqueid",
            u.version
        ));
    }
    let bytes: Vec<u8> = u
        .internal
        .iter()
        .map(|&c| c as u8)
        .take_while(|&c| c != 0)
        .collect();
    if bytes.is_empty() {
        return invalid("the unique id is empty: fill it with rshmem_get_uniqueid on rank 0");
    }
    let text = String::from_utf8(bytes)
        .map_err(|_| Fail::Msg(Code::InvalidValue, "the unique id is not text".into()))?;
    text.parse()
        .map_err(|e| Fail::Msg(Code::InvalidValue, format!("the unique id: {e}")))
}

/// A C unique id holding `id`'s text.
fn uid_to_c(id: &rt::UniqueId) -> CResult<UniqueIdC> {
    let text = id.to_string();
    if text.len() >= UID_TEXT {
        return fail(
            Code::Internal,
            format!("the unique id {} is too long", id.addr()),
        );
    }
    let mut u = UniqueIdC {
        version: UID_VERSION,
        internal: [0; UID_TEXT],
    };
    for (d, s) in u.internal.iter_mut().zip(text.bytes()) {
        *d = s as c_char;
    }
    Ok(u)
}

/// A new unique id (the runtime's [`rt::new_unique_id`]: `RSHMEM_TCP_ADDR`, else this host
/// name's first non-loopback IPv4 address, else loopback; with a port free now).
fn new_uid() -> CResult<rt::UniqueId> {
    Ok(rt::new_unique_id()?)
}

/// `rshmem_get_uniqueid`: **local**, allowed before init; makes a fresh unique id.
///
/// # Safety
/// `uid` is NULL or points to a `rshmem_uniqueid_t`.
#[no_mangle]
pub unsafe extern "C" fn rshmem_get_uniqueid(uid: *mut UniqueIdC) -> c_int {
    guarded_status("rshmem_get_uniqueid", || {
        if uid.is_null() {
            return invalid("uid is NULL");
        }
        let u = uid_to_c(&new_uid()?)?;
        // SAFETY: non-null, points to a rshmem_uniqueid_t by the caller's contract.
        unsafe { uid.write(u) };
        Ok(())
    })
}

/// `rshmem_set_attr_uniqueid_args`: **local**, allowed before init.
///
/// # Safety
/// `uid` points to a `rshmem_uniqueid_t`, `attr` to a `rshmem_init_attr_t` (or NULL).
#[no_mangle]
pub unsafe extern "C" fn rshmem_set_attr_uniqueid_args(
    rank: c_int,
    nranks: c_int,
    uid: *const UniqueIdC,
    attr: *mut InitAttr,
) -> c_int {
    guarded_status("rshmem_set_attr_uniqueid_args", || {
        if uid.is_null() || attr.is_null() {
            return invalid("uid and attr must not be NULL");
        }
        if nranks < 1 || rank < 0 || rank >= nranks {
            return invalid(format!(
                "rank {rank} of {nranks}: ranks are 0..nranks and nranks is at least 1"
            ));
        }
        // SAFETY: non-null pointers to the C structs, by the caller's contract.
        unsafe {
            let u = *uid;
            uid_of(&u)?;
            (*attr).rank = rank;
            (*attr).nranks = nranks;
            (*attr).uid = u;
        }
        Ok(())
    })
}

/// `rshmem_init_attr`: **collective**; init with a unique id or an MPI communicator.
///
/// # Safety
/// `attr` is NULL (flags 0 only) or points to a `rshmem_init_attr_t`; with
/// `RSHMEM_INIT_WITH_MPI_COMM`, `attr->mpi_comm` points to a valid `MPI_Comm` of an
/// initialized MPI.
#[no_mangle]
pub unsafe extern "C" fn rshmem_init_attr(flags: c_uint, attr: *mut InitAttr) -> c_int {
    let call = "rshmem_init_attr";
    // SAFETY: NULL or a valid rshmem_init_attr_t, by the caller's contract.
    let attr = unsafe { attr.as_ref() };
    start(call, || {
        if flags & !(WITH_MPI_COMM | WITH_UNIQUEID) != 0 {
            return invalid(format!("unknown flags {flags:#x}"));
        }
        if flags == 0 {
            return Ok(rt::Builder::new());
        }
        let Some(a) = attr else {
            return invalid("attr is NULL");
        };
        if a.version != ATTR_VERSION {
            return invalid(format!(
                "attr has version {} (expected {ATTR_VERSION}): start from \
                 RSHMEM_INIT_ATTR_INITIALIZER",
                a.version
            ));
        }
        match flags {
            WITH_UNIQUEID => {
                if a.nranks < 1 || a.rank < 0 || a.rank >= a.nranks {
                    return invalid(format!(
                        "rank {} of {}: set them with rshmem_set_attr_uniqueid_args",
                        a.rank, a.nranks
                    ));
                }
                Ok(rt::Builder::new()
                    .rank(a.rank as usize)
                    .size(a.nranks as usize)
                    .unique_id(uid_of(&a.uid)?))
            }
            WITH_MPI_COMM => {
                // SAFETY: attr.mpi_comm points to an MPI_Comm of an initialized MPI.
                let (rank, size, id) = unsafe { crate::init::mpi::job(a.mpi_comm) }?;
                Ok(rt::Builder::new().rank(rank).size(size).unique_id(id))
            }
            _ => invalid(
                "RSHMEM_INIT_WITH_UNIQUEID and RSHMEM_INIT_WITH_MPI_COMM exclude each other",
            ),
        }
    })
}

/// `rshmem_finalize`: **collective**; stops the runtime.
#[no_mangle]
pub extern "C" fn rshmem_finalize() -> c_int {
    guarded_status("rshmem_finalize", || {
        let _g = RT.lock();
        current()?;
        let Some(rt) = RT.take() else {
            return fail(Code::NotInitialized, NOT_INIT);
        };
        let Rt { world, teams, .. } = *rt;
        drop(teams);
        world.finalize()?;
        Ok(())
    })
}

/// The MPI bootstrap: MPI found in the process at run time with `dlsym` (the broadcast of the
/// unique id is the bootstrap crate's [`rshmem_bootstrap::uid_over_comm`]).
mod mpi {
    use std::ffi::c_void;

    use crate::{fail, invalid, CResult, Code};

    /// (rank, size, unique id) of the communicator `*comm`: rank 0 makes the id and
    /// broadcasts its text.
    ///
    /// # Safety
    /// `comm` points to a valid `MPI_Comm` of an initialized MPI.
    pub(super) unsafe fn job(comm: *mut c_void) -> CResult<(usize, usize, rt::UniqueId)> {
        if comm.is_null() {
            return invalid("attr->mpi_comm is NULL: point it at the program's MPI_Comm");
        }
        // SAFETY: dlsym with RTLD_DEFAULT and a NUL-terminated name.
        if unsafe { libc::dlsym(libc::RTLD_DEFAULT, c"MPI_Comm_rank".as_ptr()) }.is_null() {
            return fail(
                Code::Unsupported,
                "RSHMEM_INIT_WITH_MPI_COMM: MPI_Comm_rank is not in the process: link the \
                 program with its MPI library and call MPI_Init first",
            );
        }
        let mut make =
            || super::new_uid().map_err(|e| rshmem_bootstrap::Error::Config(e.to_string()));
        // SAFETY: the caller's contract.
        unsafe { rshmem_bootstrap::uid_over_comm(comm.cast_const(), &mut make) }
            .map_err(|e| crate::Fail::Msg(Code::Bootstrap, e.to_string()))
    }
}
