//! Hand-written declarations of the part of UCX's UCP API the UCX transport uses, and the loader
//! that opens libucp at run time (no build-time dependency on UCX).
//!
//! The structs, field masks, enums and status codes follow the UCP API **1.13** headers
//! (`ucp/api/ucp.h`, `ucp/api/ucp_def.h`, `ucs/type/status.h`, `ucs/type/cpu_set.h`,
//! `ucs/memory/memory_type.h`). UCP keeps this ABI stable across 1.x: new fields are only
//! appended and guarded by field-mask bits, so a library newer than 1.13 reads these structs
//! correctly. [`Lib::load`] refuses libraries older than [`MIN_VERSION`] and major versions other
//! than 1. The layouts are checked against the installed C headers by a unit test (`layout`
//! below), skipped when the headers or a C compiler are missing.

use std::ffi::{c_char, c_int, c_uint, c_void, CStr};

/// `ucs_status_t`.
pub type Status = c_int;
/// `UCS_OK`.
pub const UCS_OK: Status = 0;
/// `UCS_INPROGRESS`.
pub const UCS_INPROGRESS: Status = 1;
/// `UCS_ERR_BUSY` (ucp_worker_arm: events are pending).
pub const UCS_ERR_BUSY: Status = -15;
/// `UCS_ERR_LAST`: status pointers at or above this (as unsigned) are errors.
const UCS_ERR_LAST: isize = -100;

/// Opaque handles.
pub type Context = *mut c_void;
/// `ucp_worker_h`.
pub type Worker = *mut c_void;
/// `ucp_ep_h`.
pub type Ep = *mut c_void;
/// `ucp_mem_h`.
pub type MemH = *mut c_void;
/// `ucp_rkey_h`.
pub type Rkey = *mut c_void;
/// `ucp_config_t *`.
pub type Config = *mut c_void;
/// `ucp_address_t *`.
pub type Address = *mut c_void;
/// `ucs_status_ptr_t`: NULL (done), an error status, or a request.
pub type StatusPtr = *mut c_void;

// ucp_params_t field mask and features.
pub const UCP_PARAM_FIELD_FEATURES: u64 = 1 << 0;
pub const UCP_PARAM_FIELD_MT_WORKERS_SHARED: u64 = 1 << 5;
pub const UCP_PARAM_FIELD_ESTIMATED_NUM_EPS: u64 = 1 << 6;
pub const UCP_PARAM_FIELD_NAME: u64 = 1 << 8;
pub const UCP_FEATURE_RMA: u64 = 1 << 1;
pub const UCP_FEATURE_AMO32: u64 = 1 << 2;
pub const UCP_FEATURE_AMO64: u64 = 1 << 3;
pub const UCP_FEATURE_WAKEUP: u64 = 1 << 4;
pub const UCP_FEATURE_AM: u64 = 1 << 6;

// Active messages: ucp_am_handler_param_t field mask, handler flags, send flags, receive
// attributes.
pub const UCP_AM_HANDLER_PARAM_FIELD_ID: u64 = 1 << 0;
pub const UCP_AM_HANDLER_PARAM_FIELD_FLAGS: u64 = 1 << 1;
pub const UCP_AM_HANDLER_PARAM_FIELD_CB: u64 = 1 << 2;
pub const UCP_AM_HANDLER_PARAM_FIELD_ARG: u64 = 1 << 3;
pub const UCP_AM_FLAG_WHOLE_MSG: u32 = 1 << 0;
pub const UCP_AM_SEND_FLAG_REPLY: u32 = 1 << 0;
pub const UCP_AM_SEND_FLAG_EAGER: u32 = 1 << 1;
pub const UCP_AM_RECV_ATTR_FIELD_REPLY_EP: u64 = 1 << 0;

// ucp_worker_params_t field mask.
pub const UCP_WORKER_PARAM_FIELD_THREAD_MODE: u64 = 1 << 0;
/// `UCS_THREAD_MODE_SERIALIZED`.
pub const UCS_THREAD_MODE_SERIALIZED: c_int = 1;

// ucp_ep_params_t field mask.
pub const UCP_EP_PARAM_FIELD_REMOTE_ADDRESS: u64 = 1 << 0;
pub const UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE: u64 = 1 << 1;
pub const UCP_EP_PARAM_FIELD_ERR_HANDLER: u64 = 1 << 2;
/// `UCP_ERR_HANDLING_MODE_NONE`.
pub const UCP_ERR_HANDLING_MODE_NONE: c_int = 0;
/// `UCP_ERR_HANDLING_MODE_PEER`.
pub const UCP_ERR_HANDLING_MODE_PEER: c_int = 1;

// ucp_mem_map_params_t field mask and protection bits.
pub const UCP_MEM_MAP_PARAM_FIELD_ADDRESS: u64 = 1 << 0;
pub const UCP_MEM_MAP_PARAM_FIELD_LENGTH: u64 = 1 << 1;
pub const UCP_MEM_MAP_PARAM_FIELD_PROT: u64 = 1 << 3;
pub const UCP_MEM_MAP_PARAM_FIELD_MEMORY_TYPE: u64 = 1 << 4;
pub const UCP_MEM_MAP_PROT_LOCAL_READ: c_uint = 1 << 0;
pub const UCP_MEM_MAP_PROT_LOCAL_WRITE: c_uint = 1 << 1;
pub const UCP_MEM_MAP_PROT_REMOTE_READ: c_uint = 1 << 8;
pub const UCP_MEM_MAP_PROT_REMOTE_WRITE: c_uint = 1 << 9;
/// `UCS_MEMORY_TYPE_HOST`.
pub const UCS_MEMORY_TYPE_HOST: c_int = 0;
/// `UCS_MEMORY_TYPE_CUDA`.
pub const UCS_MEMORY_TYPE_CUDA: c_int = 1;

// ucp_request_param_t attribute mask.
pub const UCP_OP_ATTR_FIELD_DATATYPE: u32 = 1 << 3;
pub const UCP_OP_ATTR_FIELD_REPLY_BUFFER: u32 = 1 << 5;
pub const UCP_OP_ATTR_FIELD_FLAGS: u32 = 1 << 4;
/// `UCP_OP_ATTR_FLAG_FAST_CMPL`: complete locally as soon as the buffer may be reused (a copy
/// instead of a zero-copy send that waits for the target's acknowledgement).
pub const UCP_OP_ATTR_FLAG_FAST_CMPL: u32 = 1 << 17;
/// `UCP_EP_CLOSE_FLAG_FORCE`.
pub const UCP_EP_CLOSE_FLAG_FORCE: u32 = 1 << 0;

/// `ucp_atomic_op_t`.
pub const UCP_ATOMIC_OP_ADD: c_int = 0;
pub const UCP_ATOMIC_OP_SWAP: c_int = 1;
pub const UCP_ATOMIC_OP_CSWAP: c_int = 2;
pub const UCP_ATOMIC_OP_AND: c_int = 3;
pub const UCP_ATOMIC_OP_OR: c_int = 4;
pub const UCP_ATOMIC_OP_XOR: c_int = 5;

/// `ucp_dt_make_contig(size)`: `(size << UCP_DATATYPE_SHIFT) | UCP_DATATYPE_CONTIG`.
pub const fn dt_contig(size: usize) -> u64 {
    (size as u64) << 3
}

/// `UCS_PTR_IS_ERR`.
pub fn ptr_is_err(p: StatusPtr) -> bool {
    p as usize >= UCS_ERR_LAST as usize
}

/// `UCS_PTR_RAW_STATUS` of an error pointer.
pub fn ptr_status(p: StatusPtr) -> Status {
    p as isize as Status
}

/// `ucp_params_t`.
#[repr(C)]
pub struct UcpParams {
    pub field_mask: u64,
    pub features: u64,
    pub request_size: usize,
    pub request_init: Option<unsafe extern "C" fn(*mut c_void)>,
    pub request_cleanup: Option<unsafe extern "C" fn(*mut c_void)>,
    pub tag_sender_mask: u64,
    pub mt_workers_shared: c_int,
    pub estimated_num_eps: usize,
    pub estimated_num_ppn: usize,
    pub name: *const c_char,
}

/// `ucp_worker_params_t` (`ucs_cpu_set_t` is 1024 bits).
#[repr(C)]
pub struct UcpWorkerParams {
    pub field_mask: u64,
    pub thread_mode: c_int,
    pub cpu_mask: [u64; 16],
    pub events: c_uint,
    pub user_data: *mut c_void,
    pub event_fd: c_int,
    pub flags: u64,
    pub name: *const c_char,
    pub am_alignment: usize,
    pub client_id: u64,
}

/// `ucp_err_handler_t`.
#[repr(C)]
pub struct UcpErrHandler {
    pub cb: Option<unsafe extern "C" fn(arg: *mut c_void, ep: Ep, status: Status)>,
    pub arg: *mut c_void,
}

/// `ucs_sock_addr_t`.
#[repr(C)]
pub struct UcsSockAddr {
    pub addr: *const c_void,
    pub addrlen: u32,
}

/// `ucp_ep_params_t`.
#[repr(C)]
pub struct UcpEpParams {
    pub field_mask: u64,
    pub address: *const c_void,
    pub err_mode: c_int,
    pub err_handler: UcpErrHandler,
    pub user_data: *mut c_void,
    pub flags: c_uint,
    pub sockaddr: UcsSockAddr,
    pub conn_request: *mut c_void,
    pub name: *const c_char,
    pub local_sockaddr: UcsSockAddr,
}

/// `ucp_mem_map_params_t`.
#[repr(C)]
pub struct UcpMemMapParams {
    pub field_mask: u64,
    pub address: *mut c_void,
    pub length: usize,
    pub flags: c_uint,
    pub prot: c_uint,
    pub memory_type: c_int,
}

/// `ucp_am_recv_callback_t`.
pub type AmRecvCb = unsafe extern "C" fn(
    arg: *mut c_void,
    header: *const c_void,
    header_length: usize,
    data: *mut c_void,
    length: usize,
    param: *const UcpAmRecvParam,
) -> Status;

/// `ucp_am_handler_param_t`.
#[repr(C)]
pub struct UcpAmHandlerParam {
    pub field_mask: u64,
    pub id: c_uint,
    pub flags: u32,
    pub cb: Option<AmRecvCb>,
    pub arg: *mut c_void,
}

/// `ucp_am_recv_param_t`.
#[repr(C)]
pub struct UcpAmRecvParam {
    pub recv_attr: u64,
    pub reply_ep: Ep,
}

/// `ucp_request_param_t` (the callback and receive-info unions are one pointer each).
#[repr(C)]
pub struct UcpRequestParam {
    pub op_attr_mask: u32,
    pub flags: u32,
    pub request: *mut c_void,
    pub cb: *mut c_void,
    pub datatype: u64,
    pub user_data: *mut c_void,
    pub reply_buffer: *mut c_void,
    pub memory_type: c_int,
    pub recv_info: *mut c_void,
    pub memh: *mut c_void,
}

impl UcpRequestParam {
    /// No attributes: contiguous bytes, no callback (completion is polled).
    pub fn empty() -> Self {
        // SAFETY: every field is an integer or a raw pointer, for which all-zero is valid.
        unsafe { std::mem::zeroed() }
    }
}

/// `ucp_put_nbx` (local buffer `*const`) and `ucp_get_nbx` (`*mut`): endpoint, local buffer,
/// length, remote address, remote key, parameters.
pub type RmaNbx<B> =
    unsafe extern "C" fn(Ep, B, usize, u64, Rkey, *const UcpRequestParam) -> StatusPtr;

/// The oldest UCX whose UCP API this module follows.
pub const MIN_VERSION: (u32, u32) = (1, 13);

/// The library name opened when `RSHMEM_UCX_LIB` is not set.
pub const DEFAULT_LIB: &str = "libucp.so.0";

/// The UCP entry points, resolved from a loaded libucp (kept loaded for the process's life).
#[allow(clippy::type_complexity)]
pub struct Lib {
    /// Where it was loaded from (`RSHMEM_UCX_LIB` or the default name).
    pub path: String,
    /// `ucp_get_version`: major, minor, release.
    pub version: (u32, u32, u32),
    pub config_read: unsafe extern "C" fn(*const c_char, *const c_char, *mut Config) -> Status,
    pub config_release: unsafe extern "C" fn(Config),
    pub config_modify: unsafe extern "C" fn(Config, *const c_char, *const c_char) -> Status,
    pub init_version:
        unsafe extern "C" fn(c_uint, c_uint, *const UcpParams, Config, *mut Context) -> Status,
    pub cleanup: unsafe extern "C" fn(Context),
    pub context_print_info: unsafe extern "C" fn(Context, *mut libc::FILE),
    pub worker_create: unsafe extern "C" fn(Context, *const UcpWorkerParams, *mut Worker) -> Status,
    pub worker_destroy: unsafe extern "C" fn(Worker),
    pub worker_get_address: unsafe extern "C" fn(Worker, *mut Address, *mut usize) -> Status,
    pub worker_release_address: unsafe extern "C" fn(Worker, Address),
    pub worker_progress: unsafe extern "C" fn(Worker) -> c_uint,
    pub worker_get_efd: unsafe extern "C" fn(Worker, *mut c_int) -> Status,
    pub worker_arm: unsafe extern "C" fn(Worker) -> Status,
    pub worker_fence: unsafe extern "C" fn(Worker) -> Status,
    pub worker_flush_nbx: unsafe extern "C" fn(Worker, *const UcpRequestParam) -> StatusPtr,
    pub ep_create: unsafe extern "C" fn(Worker, *const UcpEpParams, *mut Ep) -> Status,
    pub ep_close_nbx: unsafe extern "C" fn(Ep, *const UcpRequestParam) -> StatusPtr,
    pub mem_map: unsafe extern "C" fn(Context, *const UcpMemMapParams, *mut MemH) -> Status,
    pub mem_unmap: unsafe extern "C" fn(Context, MemH) -> Status,
    pub rkey_pack: unsafe extern "C" fn(Context, MemH, *mut *mut c_void, *mut usize) -> Status,
    pub rkey_buffer_release: unsafe extern "C" fn(*mut c_void),
    pub ep_rkey_unpack: unsafe extern "C" fn(Ep, *const c_void, *mut Rkey) -> Status,
    pub rkey_destroy: unsafe extern "C" fn(Rkey),
    pub put_nbx: RmaNbx<*const c_void>,
    pub get_nbx: RmaNbx<*mut c_void>,
    pub atomic_op_nbx: unsafe extern "C" fn(
        Ep,
        c_int,
        *const c_void,
        usize,
        u64,
        Rkey,
        *const UcpRequestParam,
    ) -> StatusPtr,
    pub worker_set_am_recv_handler:
        unsafe extern "C" fn(Worker, *const UcpAmHandlerParam) -> Status,
    pub am_send_nbx: unsafe extern "C" fn(
        Ep,
        c_uint,
        *const c_void,
        usize,
        *const c_void,
        usize,
        *const UcpRequestParam,
    ) -> StatusPtr,
    pub request_check_status: unsafe extern "C" fn(*mut c_void) -> Status,
    pub request_free: unsafe extern "C" fn(*mut c_void),
    pub status_string: unsafe extern "C" fn(Status) -> *const c_char,
    _lib: libloading::Library,
}

// SAFETY: the struct holds plain function pointers into a library that stays loaded; UCP's
// functions are called on handles whose thread safety the transport manages itself.
unsafe impl Send for Lib {}
// SAFETY: as above; nothing in `Lib` is mutated after loading.
unsafe impl Sync for Lib {}

impl std::fmt::Debug for Lib {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let (a, b, c) = self.version;
        write!(f, "UCX {a}.{b}.{c} ({})", self.path)
    }
}

impl Lib {
    /// Opens `path` (or [`DEFAULT_LIB`]), resolves every entry point and checks the version.
    /// The error says what failed, for messages like "UCX transport unavailable: ...".
    pub fn load(path: Option<&str>) -> Result<Lib, String> {
        let path = path.unwrap_or(DEFAULT_LIB).to_string();
        // SAFETY: loading libucp runs its constructors (UCS initialization), which is what any
        // UCX user does; the library is never unloaded while its functions are in use (the
        // `Lib` lives in a process-wide static).
        let lib = unsafe { libloading::Library::new(&path) }
            .map_err(|e| format!("cannot load {path}: {e} (install UCX, e.g. Debian's libucx0, or set RSHMEM_UCX_LIB)"))?;
        macro_rules! sym {
            ($name:literal) => {
                // SAFETY: the symbol is declared in the UCP headers with the signature of the
                // field it is stored in (see the declarations above).
                *unsafe { lib.get(concat!($name, "\0").as_bytes()) }
                    .map_err(|e| format!("{path} lacks {}: {e}", $name))?
            };
        }
        let get_version: unsafe extern "C" fn(*mut c_uint, *mut c_uint, *mut c_uint) =
            sym!("ucp_get_version");
        let (mut a, mut b, mut c) = (0, 0, 0);
        // SAFETY: three valid out-pointers.
        unsafe { get_version(&mut a, &mut b, &mut c) };
        if a != MIN_VERSION.0 || b < MIN_VERSION.1 {
            return Err(format!(
                "{path} is UCX {a}.{b}.{c}; rshmem needs UCX 1.x with x >= {} (it follows the UCP {}.{} API)",
                MIN_VERSION.1, MIN_VERSION.0, MIN_VERSION.1
            ));
        }
        Ok(Lib {
            version: (a, b, c),
            config_read: sym!("ucp_config_read"),
            config_release: sym!("ucp_config_release"),
            config_modify: sym!("ucp_config_modify"),
            init_version: sym!("ucp_init_version"),
            cleanup: sym!("ucp_cleanup"),
            context_print_info: sym!("ucp_context_print_info"),
            worker_create: sym!("ucp_worker_create"),
            worker_destroy: sym!("ucp_worker_destroy"),
            worker_get_address: sym!("ucp_worker_get_address"),
            worker_release_address: sym!("ucp_worker_release_address"),
            worker_progress: sym!("ucp_worker_progress"),
            worker_get_efd: sym!("ucp_worker_get_efd"),
            worker_arm: sym!("ucp_worker_arm"),
            worker_fence: sym!("ucp_worker_fence"),
            worker_flush_nbx: sym!("ucp_worker_flush_nbx"),
            ep_create: sym!("ucp_ep_create"),
            ep_close_nbx: sym!("ucp_ep_close_nbx"),
            mem_map: sym!("ucp_mem_map"),
            mem_unmap: sym!("ucp_mem_unmap"),
            rkey_pack: sym!("ucp_rkey_pack"),
            rkey_buffer_release: sym!("ucp_rkey_buffer_release"),
            ep_rkey_unpack: sym!("ucp_ep_rkey_unpack"),
            rkey_destroy: sym!("ucp_rkey_destroy"),
            put_nbx: sym!("ucp_put_nbx"),
            get_nbx: sym!("ucp_get_nbx"),
            atomic_op_nbx: sym!("ucp_atomic_op_nbx"),
            worker_set_am_recv_handler: sym!("ucp_worker_set_am_recv_handler"),
            am_send_nbx: sym!("ucp_am_send_nbx"),
            request_check_status: sym!("ucp_request_check_status"),
            request_free: sym!("ucp_request_free"),
            // In libucs, a dependency of libucp: found through libucp's handle.
            status_string: sym!("ucs_status_string"),
            path,
            _lib: lib,
        })
    }

    /// Sends an active message `id` whose header is `header[..len]` and which has no data
    /// (`ucp_am_send_nbx` with `flags`, `UCP_AM_SEND_FLAG_*`): the request, null when done at
    /// once, or an error status ([`ptr_is_err`]).
    ///
    /// # Safety
    /// `ep` is a live endpoint, used under its worker's lock (or from a callback of that
    /// worker's progress); `header` stays readable for `len` bytes until the request completes.
    pub unsafe fn am_send_header(
        &self,
        ep: Ep,
        id: c_uint,
        header: *const c_void,
        len: usize,
        flags: u32,
    ) -> StatusPtr {
        let mut p = UcpRequestParam::empty();
        p.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
        p.flags = flags;
        // SAFETY: the caller's contract; no data, and `p` outlives the call.
        unsafe { (self.am_send_nbx)(ep, id, header, len, std::ptr::null(), 0, &p) }
    }

    /// UCX's text for a status code.
    pub fn status_text(&self, s: Status) -> String {
        // SAFETY: ucs_status_string returns a static NUL-terminated string for any code.
        let p = unsafe { (self.status_string)(s) };
        if p.is_null() {
            return format!("status {s}");
        }
        // SAFETY: non-null, NUL-terminated, static.
        unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
    }
}

static LIB: std::sync::OnceLock<Result<Lib, String>> = std::sync::OnceLock::new();

/// The process's libucp, loaded on first use from `RSHMEM_UCX_LIB` (or [`DEFAULT_LIB`]). Every
/// later call returns the same library (or the same error).
pub fn lib(path: Option<&str>) -> Result<&'static Lib, String> {
    LIB.get_or_init(|| Lib::load(path))
        .as_ref()
        .map_err(Clone::clone)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::mem::{offset_of, size_of};

    /// The Rust layouts match the C headers: compiles a C program printing `sizeof`/`offsetof`
    /// of every struct field used, when the UCX headers and a C compiler exist (otherwise the
    /// test says it was skipped).
    #[test]
    fn layout() {
        if !std::path::Path::new("/usr/include/ucp/api/ucp.h").exists()
            && std::env::var_os("UCX_INCLUDE").is_none()
        {
            eprintln!("SKIPPED: no UCX headers (install libucx-dev or set UCX_INCLUDE)");
            return;
        }
        let dir = std::env::temp_dir().join(format!("rshmem-ucx-layout-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let src = dir.join("l.c");
        let mut c = String::from(
            "#include <stdio.h>\n#include <stddef.h>\n#include <ucp/api/ucp.h>\nint main(void){\n",
        );
        let fields: &[(&str, &[&str])] = &[
            (
                "ucp_params_t",
                &[
                    "field_mask",
                    "features",
                    "request_size",
                    "request_init",
                    "request_cleanup",
                    "tag_sender_mask",
                    "mt_workers_shared",
                    "estimated_num_eps",
                    "estimated_num_ppn",
                    "name",
                ],
            ),
            (
                "ucp_worker_params_t",
                &[
                    "field_mask",
                    "thread_mode",
                    "cpu_mask",
                    "events",
                    "user_data",
                    "event_fd",
                    "flags",
                    "name",
                    "am_alignment",
                    "client_id",
                ],
            ),
            (
                "ucp_ep_params_t",
                &[
                    "field_mask",
                    "address",
                    "err_mode",
                    "err_handler",
                    "user_data",
                    "flags",
                    "sockaddr",
                    "conn_request",
                    "name",
                    "local_sockaddr",
                ],
            ),
            (
                "ucp_mem_map_params_t",
                &[
                    "field_mask",
                    "address",
                    "length",
                    "flags",
                    "prot",
                    "memory_type",
                ],
            ),
            (
                "ucp_request_param_t",
                &[
                    "op_attr_mask",
                    "flags",
                    "request",
                    "cb",
                    "datatype",
                    "user_data",
                    "reply_buffer",
                    "memory_type",
                    "recv_info",
                    "memh",
                ],
            ),
            (
                "ucp_am_handler_param_t",
                &["field_mask", "id", "flags", "cb", "arg"],
            ),
            ("ucp_am_recv_param_t", &["recv_attr", "reply_ep"]),
        ];
        for (t, fs) in fields {
            c += &format!("printf(\"{t} size %zu\\n\", sizeof({t}));\n");
            for f in *fs {
                c += &format!("printf(\"{t} {f} %zu\\n\", offsetof({t}, {f}));\n");
            }
        }
        for k in [
            "UCS_ERR_BUSY",
            "UCS_ERR_LAST",
            "UCP_ATOMIC_OP_XOR",
            "UCP_ATOMIC_OP_CSWAP",
            "UCP_ERR_HANDLING_MODE_NONE",
            "UCP_ERR_HANDLING_MODE_PEER",
            "UCS_THREAD_MODE_SERIALIZED",
            "UCS_MEMORY_TYPE_CUDA",
            "UCP_FEATURE_WAKEUP",
            "UCP_EP_PARAM_FIELD_ERR_HANDLER",
            "UCP_OP_ATTR_FIELD_REPLY_BUFFER",
            "UCP_OP_ATTR_FIELD_FLAGS",
            "UCP_OP_ATTR_FLAG_FAST_CMPL",
            "UCP_EP_CLOSE_FLAG_FORCE",
            "UCP_MEM_MAP_PROT_REMOTE_WRITE",
            "UCP_MEM_MAP_PARAM_FIELD_MEMORY_TYPE",
            "UCP_PARAM_FIELD_NAME",
            "UCP_FEATURE_AM",
            "UCP_AM_HANDLER_PARAM_FIELD_ID",
            "UCP_AM_HANDLER_PARAM_FIELD_FLAGS",
            "UCP_AM_HANDLER_PARAM_FIELD_CB",
            "UCP_AM_HANDLER_PARAM_FIELD_ARG",
            "UCP_AM_FLAG_WHOLE_MSG",
            "UCP_AM_SEND_FLAG_REPLY",
            "UCP_AM_SEND_FLAG_EAGER",
            "UCP_AM_RECV_ATTR_FIELD_REPLY_EP",
            "UCP_API_MAJOR",
            "UCP_API_MINOR",
        ] {
            c += &format!("printf(\"const {k} %lld\\n\", (long long)({k}));\n");
        }
        c += "printf(\"const dt8 %llu\\n\", (unsigned long long)ucp_dt_make_contig(8));\nreturn 0;}\n";
        std::fs::write(&src, c).unwrap();
        let exe = dir.join("l");
        let mut cc =
            std::process::Command::new(std::env::var("CC").unwrap_or_else(|_| "cc".into()));
        cc.arg(&src).arg("-o").arg(&exe);
        if let Some(inc) = std::env::var_os("UCX_INCLUDE") {
            cc.arg("-I").arg(inc);
        }
        let out = match cc.output() {
            Ok(o) => o,
            Err(e) => {
                eprintln!("SKIPPED: no C compiler ({e})");
                return;
            }
        };
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let run = std::process::Command::new(&exe).output().unwrap();
        let text = String::from_utf8(run.stdout).unwrap();
        std::fs::remove_dir_all(&dir).ok();
        let get = |k: &str| -> i64 {
            text.lines()
                .find_map(|l| l.strip_prefix(k).and_then(|r| r.strip_prefix(' ')))
                .unwrap_or_else(|| panic!("{k} missing in\n{text}"))
                .parse()
                .unwrap()
        };
        macro_rules! check {
            ($c:literal, $r:ty, [$($f:ident),*]) => {
                assert_eq!(get(concat!($c, " size")) as usize, size_of::<$r>(), "sizeof {}", $c);
                $(assert_eq!(get(concat!($c, " ", stringify!($f))) as usize, offset_of!($r, $f), "{}.{}", $c, stringify!($f));)*
            };
        }
        check!(
            "ucp_params_t",
            UcpParams,
            [
                field_mask,
                features,
                request_size,
                request_init,
                request_cleanup,
                tag_sender_mask,
                mt_workers_shared,
                estimated_num_eps,
                estimated_num_ppn,
                name
            ]
        );
        check!(
            "ucp_worker_params_t",
            UcpWorkerParams,
            [
                field_mask,
                thread_mode,
                cpu_mask,
                events,
                user_data,
                event_fd,
                flags,
                name,
                am_alignment,
                client_id
            ]
        );
        check!(
            "ucp_ep_params_t",
            UcpEpParams,
            [
                field_mask,
                address,
                err_mode,
                err_handler,
                user_data,
                flags,
                sockaddr,
                conn_request,
                name,
                local_sockaddr
            ]
        );
        check!(
            "ucp_mem_map_params_t",
            UcpMemMapParams,
            [field_mask, address, length, flags, prot, memory_type]
        );
        check!(
            "ucp_request_param_t",
            UcpRequestParam,
            [
                op_attr_mask,
                flags,
                request,
                cb,
                datatype,
                user_data,
                reply_buffer,
                memory_type,
                recv_info,
                memh
            ]
        );
        check!(
            "ucp_am_handler_param_t",
            UcpAmHandlerParam,
            [field_mask, id, flags, cb, arg]
        );
        check!("ucp_am_recv_param_t", UcpAmRecvParam, [recv_attr, reply_ep]);
        for (k, v) in [
            ("UCP_FEATURE_AM", UCP_FEATURE_AM as i64),
            (
                "UCP_AM_HANDLER_PARAM_FIELD_ID",
                UCP_AM_HANDLER_PARAM_FIELD_ID as i64,
            ),
            (
                "UCP_AM_HANDLER_PARAM_FIELD_FLAGS",
                UCP_AM_HANDLER_PARAM_FIELD_FLAGS as i64,
            ),
            (
                "UCP_AM_HANDLER_PARAM_FIELD_CB",
                UCP_AM_HANDLER_PARAM_FIELD_CB as i64,
            ),
            (
                "UCP_AM_HANDLER_PARAM_FIELD_ARG",
                UCP_AM_HANDLER_PARAM_FIELD_ARG as i64,
            ),
            ("UCP_AM_FLAG_WHOLE_MSG", UCP_AM_FLAG_WHOLE_MSG as i64),
            ("UCP_AM_SEND_FLAG_REPLY", UCP_AM_SEND_FLAG_REPLY as i64),
            ("UCP_AM_SEND_FLAG_EAGER", UCP_AM_SEND_FLAG_EAGER as i64),
            (
                "UCP_AM_RECV_ATTR_FIELD_REPLY_EP",
                UCP_AM_RECV_ATTR_FIELD_REPLY_EP as i64,
            ),
        ] {
            assert_eq!(get(&format!("const {k}")), v, "{k}");
        }
        assert_eq!(get("const UCS_ERR_BUSY"), UCS_ERR_BUSY as i64);
        assert_eq!(get("const UCS_ERR_LAST"), UCS_ERR_LAST as i64);
        assert_eq!(get("const UCP_ATOMIC_OP_XOR"), UCP_ATOMIC_OP_XOR as i64);
        assert_eq!(get("const UCP_ATOMIC_OP_CSWAP"), UCP_ATOMIC_OP_CSWAP as i64);
        assert_eq!(
            get("const UCP_ERR_HANDLING_MODE_NONE"),
            UCP_ERR_HANDLING_MODE_NONE as i64
        );
        assert_eq!(
            get("const UCP_ERR_HANDLING_MODE_PEER"),
            UCP_ERR_HANDLING_MODE_PEER as i64
        );
        assert_eq!(
            get("const UCS_THREAD_MODE_SERIALIZED"),
            UCS_THREAD_MODE_SERIALIZED as i64
        );
        assert_eq!(
            get("const UCS_MEMORY_TYPE_CUDA"),
            UCS_MEMORY_TYPE_CUDA as i64
        );
        assert_eq!(get("const UCP_FEATURE_WAKEUP"), UCP_FEATURE_WAKEUP as i64);
        assert_eq!(
            get("const UCP_EP_PARAM_FIELD_ERR_HANDLER"),
            UCP_EP_PARAM_FIELD_ERR_HANDLER as i64
        );
        assert_eq!(
            get("const UCP_OP_ATTR_FIELD_REPLY_BUFFER"),
            UCP_OP_ATTR_FIELD_REPLY_BUFFER as i64
        );
        assert_eq!(
            get("const UCP_OP_ATTR_FIELD_FLAGS"),
            UCP_OP_ATTR_FIELD_FLAGS as i64
        );
        assert_eq!(
            get("const UCP_OP_ATTR_FLAG_FAST_CMPL"),
            UCP_OP_ATTR_FLAG_FAST_CMPL as i64
        );
        assert_eq!(
            get("const UCP_EP_CLOSE_FLAG_FORCE"),
            UCP_EP_CLOSE_FLAG_FORCE as i64
        );
        assert_eq!(
            get("const UCP_MEM_MAP_PROT_REMOTE_WRITE"),
            UCP_MEM_MAP_PROT_REMOTE_WRITE as i64
        );
        assert_eq!(
            get("const UCP_MEM_MAP_PARAM_FIELD_MEMORY_TYPE"),
            UCP_MEM_MAP_PARAM_FIELD_MEMORY_TYPE as i64
        );
        assert_eq!(
            get("const UCP_PARAM_FIELD_NAME"),
            UCP_PARAM_FIELD_NAME as i64
        );
        assert_eq!(get("const dt8"), dt_contig(8) as i64);
        assert!(
            get("const UCP_API_MAJOR") as u32 == MIN_VERSION.0
                && get("const UCP_API_MINOR") as u32 >= MIN_VERSION.1
        );
    }

    /// Loading a library that does not exist is an error naming it, never a panic.
    #[test]
    fn missing_library_is_an_error() {
        let e = Lib::load(Some("/nonexistent/libucp.so.0")).unwrap_err();
        assert!(e.contains("/nonexistent/libucp.so.0"), "{e}");
    }

    /// A library reporting an unsupported UCP version is refused, naming the version: a stub
    /// library with only `ucp_get_version` (1.12.0, then 2.0.0) built with the C compiler
    /// (skipped, visibly, without one).
    #[test]
    fn old_or_new_major_version_is_refused() {
        for (maj, min, want) in [(1, 12, "is UCX 1.12.0"), (2, 0, "is UCX 2.0.0")] {
            let dir = std::env::temp_dir()
                .join(format!("rshmem-ucx-ver-{}-{maj}{min}", std::process::id()));
            std::fs::create_dir_all(&dir).unwrap();
            let src = dir.join("v.c");
            std::fs::write(
                &src,
                format!("void ucp_get_version(unsigned *a, unsigned *b, unsigned *c) {{ *a = {maj}; *b = {min}; *c = 0; }}\n"),
            )
            .unwrap();
            let so = dir.join("libucp-stub.so");
            let out =
                std::process::Command::new(std::env::var("CC").unwrap_or_else(|_| "cc".into()))
                    .args(["-shared", "-fPIC", "-o"])
                    .arg(&so)
                    .arg(&src)
                    .output();
            match out {
                Ok(o) if o.status.success() => {}
                _ => {
                    eprintln!("SKIPPED: no C compiler to build a stub library");
                    return;
                }
            }
            let e = Lib::load(so.to_str()).unwrap_err();
            std::fs::remove_dir_all(&dir).ok();
            assert!(e.contains(want) && e.contains("needs UCX 1.x"), "{e}");
        }
    }

    /// The installed libucp (when there is one) loads and reports a supported version.
    #[test]
    fn loads_installed_ucx() {
        match Lib::load(None) {
            Ok(l) => {
                assert_eq!(l.version.0, 1);
                assert!(l.status_text(UCS_ERR_BUSY).to_lowercase().contains("busy"));
            }
            Err(e) => eprintln!("SKIPPED: {e}"),
        }
    }
}
