//! NVSHMEM's environment variables and unknown `RSHMEM_*` names.
//!
//! * [`NVSHMEM_VARS`]: every `NVSHMEM_*` variable of NVSHMEM 3.4 with what rshmem does with it:
//!   **mapped** (it sets an `RSHMEM_*` variable of [`super::ENV_VARS`] or the bootstrap's table
//!   unless that variable is set itself: the `RSHMEM_*` one wins), **satisfied** (it asks for
//!   what rshmem does anyway: nothing to say), **program** (read by NVSHMEM's perftests
//!   themselves, not by the library) or **no equivalent** (ignored; named in one warning at
//!   init).
//! * [`TOOL_VARS`]: `RSHMEM_*` names read by rshmem's scripts, builds and tests, not by the
//!   library; known, so never reported as unknown.
//! * [`EnvReport`]: what init says about a process environment: `RSHMEM_*` names rshmem does not
//!   know (with the closest known name), `NVSHMEM_*` variables it ignores, and mapped ones an
//!   `RSHMEM_*` variable overrides.

use super::EnvVar;

/// What rshmem does with one NVSHMEM variable.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NvshmemUse {
    /// Sets the named `RSHMEM_*` variable (value translated) when that one is unset.
    Maps(&'static str),
    /// rshmem already behaves as the variable asks (any value): accepted silently.
    Satisfied,
    /// Read by NVSHMEM's test programs (perftests) themselves, not by the library.
    Program,
    /// No rshmem equivalent: ignored, named in the warning at init.
    NoEquivalent,
}

/// One `NVSHMEM_*` variable and what rshmem does with it.
#[derive(Debug, Clone, Copy)]
pub struct NvshmemVar {
    /// NVSHMEM's name.
    pub name: &'static str,
    /// How rshmem treats it.
    pub what: NvshmemUse,
    /// One line for the docs and `rshmem-info`: how the value is translated, or why it needs
    /// nothing, or why there is no equivalent.
    pub note: &'static str,
    translate: Translate,
}

/// How a mapped variable's value becomes the `RSHMEM_*` variable's value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Translate {
    /// Not a mapping.
    None,
    /// NVSHMEM's size syntax (`1.5G`, `20m`) to bytes.
    Size,
    /// NVSHMEM's booleans to `0`/`1`.
    Bool,
    /// A non-negative integer, taken as is.
    Index,
    /// `NVSHMEM_DEBUG` levels to `RSHMEM_LOG` levels.
    DebugLevel,
    /// `NVSHMEM_DEBUG=VERSION` to `RSHMEM_INFO=1`.
    DebugVersion,
    /// `NVSHMEM_BOOTSTRAP` to `RSHMEM_BOOTSTRAP`.
    Bootstrap,
    /// `NVSHMEM_REMOTE_TRANSPORT` to `RSHMEM_REMOTE_TRANSPORT`.
    RemoteTransport,
    /// `NVSHMEM_HCA_LIST` (one device) to `RSHMEM_IB_DEVICE`.
    HcaList,
}

/// What a mapped variable's value turned into.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Mapped {
    /// This value for the `RSHMEM_*` variable.
    Value(String),
    /// Nothing for this `RSHMEM_*` variable (e.g. `NVSHMEM_DEBUG=WARN` says nothing about
    /// `RSHMEM_INFO`).
    Nothing,
    /// A value NVSHMEM accepts but rshmem has no equivalent of: ignored, with the reason
    /// (named in the warning at init).
    NoEquivalent(String),
    /// A value NVSHMEM itself rejects: init fails naming the variable, as with a malformed
    /// `RSHMEM_*` value.
    Invalid(String),
}

macro_rules! nv {
    ($name:literal, maps $to:literal, $tr:ident, $note:literal) => {
        NvshmemVar {
            name: $name,
            what: NvshmemUse::Maps($to),
            note: $note,
            translate: Translate::$tr,
        }
    };
    ($name:literal, $what:ident, $note:literal) => {
        NvshmemVar {
            name: $name,
            what: NvshmemUse::$what,
            note: $note,
            translate: Translate::None,
        }
    };
}

/// Every variable NVSHMEM 3.4 reads (its host library, bootstrap and transport tables, and the
/// ones its perftests read), with what rshmem does with it. A name appears twice when it sets
/// two `RSHMEM_*` variables (`NVSHMEM_DEBUG`).
pub static NVSHMEM_VARS: &[NvshmemVar] = &[
    // Mapped.
    nv!("NVSHMEM_SYMMETRIC_SIZE", maps "RSHMEM_HEAP_INITIAL", Size,
        "Size of the heap mapped at init (NVSHMEM's size syntax, e.g. 2G, 1.5g, 512m). rshmem's heap still grows on demand past it, up to RSHMEM_HEAP_LIMIT."),
    nv!("NVSHMEM_MAX_MEMORY_PER_GPU", maps "RSHMEM_HEAP_LIMIT", Size,
        "Most symmetric memory one PE may map."),
    nv!("NVSHMEM_DISABLE_P2P", maps "RSHMEM_DISABLE_P2P", Bool,
        "No load/store between PEs: every other PE is reached through the remote transport."),
    nv!("NVSHMEM_DEBUG", maps "RSHMEM_LOG", DebugLevel,
        "Log level: WARN -> warn, INFO -> info, TRACE -> trace, ABORT -> error (rshmem's events; librshmem then installs its stderr logger)."),
    nv!("NVSHMEM_DEBUG", maps "RSHMEM_INFO", DebugVersion,
        "VERSION: print the version at init (RSHMEM_INFO=1)."),
    nv!("NVSHMEM_INFO", maps "RSHMEM_INFO", Bool,
        "Print the version and the variables set at init (PE 0)."),
    nv!("NVSHMEM_VERSION", maps "RSHMEM_INFO", Bool,
        "Print the version at init (RSHMEM_INFO also lists the variables set)."),
    nv!("NVSHMEM_ENABLE_ERROR_CHECKS", maps "RSHMEM_DEVICE_CHECKS", Bool,
        "Argument checks in device calls."),
    nv!("NVSHMEM_BOOTSTRAP", maps "RSHMEM_BOOTSTRAP", Bootstrap,
        "MPI -> mpi, UID -> tcp (rshmem's unique-id rendezvous), PMI -> auto (rshmem reads the launcher's variables itself); SHMEM and plugin have no equivalent."),
    nv!("NVSHMEM_REMOTE_TRANSPORT", maps "RSHMEM_REMOTE_TRANSPORT", RemoteTransport,
        "ibrc, ibdevx -> verbs; ucx -> ucx; libfabric, ibgda and none have no equivalent."),
    nv!("NVSHMEM_HCA_LIST", maps "RSHMEM_IB_DEVICE", HcaList,
        "One device (name or name:port); a list of several or an exclusion (^) has no equivalent."),
    nv!("NVSHMEM_IB_GID_INDEX", maps "RSHMEM_IB_GID_INDEX", Index,
        "GID table index of the verbs transport."),
    // What rshmem does anyway.
    nv!("NVSHMEM_DISABLE_NVLS", Satisfied, "rshmem never uses NVLink multicast (NVLS)."),
    nv!("NVSHMEM_DISABLE_NVLS_SHARING", Satisfied, "rshmem never uses NVLink multicast (NVLS)."),
    nv!("NVSHMEM_DISABLE_MNNVL", Satisfied, "rshmem never uses multi-node NVLink."),
    nv!("NVSHMEM_DISABLE_NCCL", Satisfied, "rshmem's collectives never use NCCL."),
    nv!("NVSHMEM_IB_ENABLE_IBGDA", Satisfied, "rshmem has no GPU-initiated InfiniBand transport; device calls to PEs on other hosts go through the proxy."),
    nv!("NVSHMEM_BOOTSTRAP_PMI", Satisfied, "rshmem reads the launcher's variables (PMI, PMIx, Open MPI, Slurm) itself; RSHMEM_LAUNCHER forces one."),
    nv!("NVSHMEM_CUDA_PATH", Satisfied, "rshmem finds libcuda through the dynamic linker's search path (LD_LIBRARY_PATH)."),
    // Read by NVSHMEM's perftests themselves.
    nv!("NVSHMEM_MACHINE_READABLE_OUTPUT", Program, "Read by NVSHMEM's perftests, not by the library."),
    nv!("NVSHMEM_TEST_CUBIN_LIBRARY", Program, "Read by NVSHMEM's perftests (--cubin), not by the library."),
    nv!("NVSHMEM_PERF_COLL_MAX_ELEMS", Program, "Read by NVSHMEM's perftests, not by the library."),
    // No equivalent.
    nv!("NVSHMEM_INFO_HIDDEN", NoEquivalent, "rshmem has no hidden variables (rshmem-info lists all)."),
    nv!("NVSHMEM_HEAP_KIND", NoEquivalent, "The heap is GPU memory on the GPU backend (RSHMEM_BACKEND picks the backend)."),
    nv!("NVSHMEM_ENABLE_RAIL_OPT", NoEquivalent, "No rail optimization."),
    nv!("NVSHMEM_ENABLE_ALIGNED_MALLOC", NoEquivalent, "Allocations are aligned by the allocator."),
    nv!("NVSHMEM_BOOTSTRAP_PLUGIN", NoEquivalent, "No bootstrap plugins."),
    nv!("NVSHMEM_BOOTSTRAP_MPI_PLUGIN", NoEquivalent, "No bootstrap plugins (the MPI bootstrap is built in with the mpi feature)."),
    nv!("NVSHMEM_BOOTSTRAP_SHMEM_PLUGIN", NoEquivalent, "No bootstrap plugins."),
    nv!("NVSHMEM_BOOTSTRAP_PMI_PLUGIN", NoEquivalent, "No bootstrap plugins."),
    nv!("NVSHMEM_BOOTSTRAP_PMI2_PLUGIN", NoEquivalent, "No bootstrap plugins."),
    nv!("NVSHMEM_BOOTSTRAP_PMIX_PLUGIN", NoEquivalent, "No bootstrap plugins."),
    nv!("NVSHMEM_BOOTSTRAP_UID_PLUGIN", NoEquivalent, "No bootstrap plugins."),
    nv!("NVSHMEM_BOOTSTRAP_TWO_STAGE", NoEquivalent, "No two-stage initialization."),
    nv!("NVSHMEM_BOOTSTRAP_UID_SOCK_IFNAME", NoEquivalent, "The unique id names rank 0's address (RSHMEM_BOOTSTRAP_ADDR)."),
    nv!("NVSHMEM_BOOTSTRAP_UID_SOCK_FAMILY", NoEquivalent, "The unique id names rank 0's address (RSHMEM_BOOTSTRAP_ADDR)."),
    nv!("NVSHMEM_BOOTSTRAP_UID_SESSION_ID", NoEquivalent, "The unique id carries the job secret."),
    nv!("NVSHMEM_DEBUG_ATTACH_DELAY", NoEquivalent, "No attach delay."),
    nv!("NVSHMEM_DEBUG_SUBSYS", NoEquivalent, "Use RSHMEM_LOG's per-target filters (rshmem::heap=debug, ...)."),
    nv!("NVSHMEM_DEBUG_FILE", NoEquivalent, "Logs go to stderr."),
    nv!("NVSHMEM_G_COALESCING_BUF_SIZE", NoEquivalent, "No g buffers (g reads the peer's memory)."),
    nv!("NVSHMEM_G_BUF_SIZE", NoEquivalent, "No g buffers (g reads the peer's memory)."),
    nv!("NVSHMEM_MAX_TEAMS", NoEquivalent, "The team table's size is fixed at build time (RSHMEM_MAX_TEAMS in the device library)."),
    nv!("NVSHMEM_MAX_PEER_STREAMS", NoEquivalent, "No per-peer streams."),
    nv!("NVSHMEM_DISABLE_CUDA_VMM", NoEquivalent, "The GPU heap is always CUDA VMM memory."),
    nv!("NVSHMEM_IGNORE_CUDA_MPS_ACTIVE_THREAD_PERCENTAGE", NoEquivalent, "rshmem has no limited mode under MPS."),
    nv!("NVSHMEM_CUMEM_GRANULARITY", NoEquivalent, "Heap chunks use the device's allocation granularity."),
    nv!("NVSHMEM_CUMEM_HANDLE_TYPE", NoEquivalent, "Heap chunks are shared as POSIX file descriptors."),
    nv!("NVSHMEM_BYPASS_ACCESSIBILITY_CHECK", NoEquivalent, "Peer access is checked."),
    nv!("NVSHMEM_CUDA_LIMIT_STACK_SIZE", NoEquivalent, "POWER9 only in NVSHMEM."),
    nv!("NVSHMEM_FCOLLECT_NTHREADS", NoEquivalent, "Collective tuning is rshmem's own."),
    nv!("NVSHMEM_REDUCESCATTER_NTHREADS", NoEquivalent, "Collective tuning is rshmem's own."),
    nv!("NVSHMEM_REDUCE_NTHREADS", NoEquivalent, "Collective tuning is rshmem's own."),
    nv!("NVSHMEM_MAX_CTAS", NoEquivalent, "Collective tuning is rshmem's own."),
    nv!("NVSHMEM_BARRIER_DISSEM_KVAL", NoEquivalent, "Collective tuning is rshmem's own."),
    nv!("NVSHMEM_BARRIER_TG_DISSEM_KVAL", NoEquivalent, "Collective tuning is rshmem's own."),
    nv!("NVSHMEM_REDUCE_RECEXCH_KVAL", NoEquivalent, "Collective tuning is rshmem's own."),
    nv!("NVSHMEM_FCOLLECT_LL_THRESHOLD", NoEquivalent, "Collective tuning is rshmem's own."),
    nv!("NVSHMEM_FCOLLECT_LL128_THRESHOLD", NoEquivalent, "Collective tuning is rshmem's own."),
    nv!("NVSHMEM_FCOLLECT_NVLS_THRESHOLD", NoEquivalent, "Collective tuning is rshmem's own."),
    nv!("NVSHMEM_REDUCESCATTER_NVLS_THRESHOLD", NoEquivalent, "Collective tuning is rshmem's own."),
    nv!("NVSHMEM_REDUCE_SCRATCH_SIZE", NoEquivalent, "Collective tuning is rshmem's own."),
    nv!("NVSHMEM_BCAST_TREE_KVAL", NoEquivalent, "Collective tuning is rshmem's own."),
    nv!("NVSHMEM_BCAST_ALGO", NoEquivalent, "Collective tuning is rshmem's own."),
    nv!("NVSHMEM_FCOLLECT_ALGO", NoEquivalent, "Collective tuning is rshmem's own."),
    nv!("NVSHMEM_REDUCE_ALGO", NoEquivalent, "Collective tuning is rshmem's own."),
    nv!("NVSHMEM_REDUCE_NVLS_THRESHOLD", NoEquivalent, "Collective tuning is rshmem's own."),
    nv!("NVSHMEM_REDMAXLOC_ALGO", NoEquivalent, "Collective tuning is rshmem's own."),
    nv!("NVSHMEM_REDUCESCATTER_ALGO", NoEquivalent, "Collective tuning is rshmem's own."),
    nv!("NVSHMEM_DISABLE_CE_COLLECTIVES", NoEquivalent, "Collective tuning is rshmem's own."),
    nv!("NVSHMEM_DISABLE_SELF_WRITE_CE_COLL", NoEquivalent, "Collective tuning is rshmem's own."),
    nv!("NVSHMEM_ASSERT_ATOMICS_SYNC", NoEquivalent, "No flush to bypass."),
    nv!("NVSHMEM_BYPASS_FLUSH", NoEquivalent, "No flush to bypass."),
    nv!("NVSHMEM_ENABLE_NIC_PE_MAPPING", NoEquivalent, "RSHMEM_IB_DEVICE names the device of each PE."),
    nv!("NVSHMEM_HCA_PE_MAPPING", NoEquivalent, "RSHMEM_IB_DEVICE names the device of each PE."),
    nv!("NVSHMEM_HCA_PREFIX", NoEquivalent, "RSHMEM_IB_DEVICE names the device."),
    nv!("NVSHMEM_DISABLE_LOCAL_ONLY_PROXY", NoEquivalent, "The proxy runs only when some PE is on another host."),
    nv!("NVSHMEM_PROXY_REQUEST_BATCH_MAX", NoEquivalent, "The proxy's batching is rshmem's own."),
    nv!("NVSHMEM_NVTX", NoEquivalent, "No NVTX ranges."),
    nv!("NVSHMEM_DISABLE_IB_NATIVE_ATOMICS", NoEquivalent, "Verbs transport tuning is rshmem's own."),
    nv!("NVSHMEM_DISABLE_GDRCOPY", NoEquivalent, "rshmem does not use GDRCopy."),
    nv!("NVSHMEM_DISABLE_DATA_DIRECT", NoEquivalent, "Verbs transport tuning is rshmem's own."),
    nv!("NVSHMEM_IB_DISABLE_DMABUF", NoEquivalent, "Verbs transport tuning is rshmem's own."),
    nv!("NVSHMEM_IB_TRAFFIC_CLASS", NoEquivalent, "Verbs transport tuning is rshmem's own."),
    nv!("NVSHMEM_IB_ADDR_FAMILY", NoEquivalent, "Verbs transport tuning is rshmem's own."),
    nv!("NVSHMEM_IB_ADDR_RANGE", NoEquivalent, "Verbs transport tuning is rshmem's own."),
    nv!("NVSHMEM_IB_ROCE_VERSION_NUM", NoEquivalent, "RSHMEM_IB_GID_INDEX picks the GID (a RoCE v2 one by default)."),
    nv!("NVSHMEM_IB_SL", NoEquivalent, "Verbs transport tuning is rshmem's own."),
    nv!("NVSHMEM_IB_NUM_RC_PER_DEVICE", NoEquivalent, "Verbs transport tuning is rshmem's own."),
    nv!("NVSHMEM_IB_ENABLE_RELAXED_ORDERING", NoEquivalent, "Verbs transport tuning is rshmem's own."),
    nv!("NVSHMEM_QP_DEPTH", NoEquivalent, "Verbs transport tuning is rshmem's own."),
    nv!("NVSHMEM_SRQ_DEPTH", NoEquivalent, "Verbs transport tuning is rshmem's own."),
    nv!("NVSHMEM_LIBFABRIC_PROVIDER", NoEquivalent, "No libfabric transport."),
    nv!("NVSHMEM_IBGDA_ENABLE_MULTI_PORT", NoEquivalent, "No GPU-initiated InfiniBand transport."),
    nv!("NVSHMEM_IBGDA_NUM_DCT", NoEquivalent, "No GPU-initiated InfiniBand transport."),
    nv!("NVSHMEM_IBGDA_NUM_DCI", NoEquivalent, "No GPU-initiated InfiniBand transport."),
    nv!("NVSHMEM_IBGDA_NUM_SHARED_DCI", NoEquivalent, "No GPU-initiated InfiniBand transport."),
    nv!("NVSHMEM_IBGDA_DCI_MAP_BY", NoEquivalent, "No GPU-initiated InfiniBand transport."),
    nv!("NVSHMEM_IBGDA_NUM_RC_PER_PE", NoEquivalent, "No GPU-initiated InfiniBand transport."),
    nv!("NVSHMEM_IBGDA_RC_MAP_BY", NoEquivalent, "No GPU-initiated InfiniBand transport."),
    nv!("NVSHMEM_IBGDA_FORCE_NIC_BUF_MEMTYPE", NoEquivalent, "No GPU-initiated InfiniBand transport."),
    nv!("NVSHMEM_IBGDA_NUM_REQUESTS_IN_BATCH", NoEquivalent, "No GPU-initiated InfiniBand transport."),
    nv!("NVSHMEM_IBGDA_NUM_FETCH_SLOTS_PER_DCI", NoEquivalent, "No GPU-initiated InfiniBand transport."),
    nv!("NVSHMEM_IBGDA_NUM_FETCH_SLOTS_PER_RC", NoEquivalent, "No GPU-initiated InfiniBand transport."),
    nv!("NVSHMEM_IBGDA_NIC_HANDLER", NoEquivalent, "No GPU-initiated InfiniBand transport."),
];

/// `RSHMEM_*` variables read by rshmem's scripts, build scripts and tests, not by the library
/// (known names: init never calls them unknown).
pub static TOOL_VARS: &[EnvVar] = &[
    tool("RSHMEM_LIB_DIR", "path", "Scripts (rshmemcc, cuda-examples, sos-check): the folder holding librshmem/libshmem (default target/release)."),
    tool("RSHMEM_STATIC", "bool", "scripts/rshmemcc: 1 links libshmem.a instead of libshmem.so."),
    tool("RSHMEM_CC", "command", "Scripts: the C compiler."),
    tool("RSHMEM_CXX", "command", "install-c's oshc++ wrapper: the C++ compiler."),
    tool("RSHMEM_NVCC_DIR", "path", "scripts/install-nvcc: where nvcc is installed."),
    tool("RSHMEM_NVCC_PIP", "command", "scripts/install-nvcc: the pip used to install nvcc."),
    tool("RSHMEM_NVRTC_DIR", "path", "scripts/install-nvrtc: where NVRTC is installed."),
    tool("RSHMEM_CUDA_ARCH", "sm_XY", "Scripts: the GPU architecture nvcc compiles for."),
    tool("RSHMEM_GIT_COMMIT", "string", "perftest build: the commit recorded in the JSON rows (default: git describe)."),
    tool("RSHMEM_REQUIRE_NVRTC", "bool", "Tests: 1 makes the NVRTC compile tests fail instead of skipping without NVRTC."),
    tool("RSHMEM_TEST_PE", "bool", "Tests: marks a test binary started as a PE."),
    tool("RSHMEM_TEST_PE_KILL", "integer", "Tests: the PE a launcher test kills."),
    tool("RSHMEM_MPI_TEST_CHILD", "bool", "Tests: marks the MPI bootstrap test's child processes."),
];

const fn tool(name: &'static str, kind: &'static str, help: &'static str) -> EnvVar {
    EnvVar {
        name,
        kind,
        default: "",
        help,
    }
}

/// The entries of [`NVSHMEM_VARS`] for `name` (two for `NVSHMEM_DEBUG`).
pub fn nvshmem_entries(name: &str) -> impl Iterator<Item = &'static NvshmemVar> + '_ {
    NVSHMEM_VARS.iter().filter(move |v| v.name == name)
}

/// Every `RSHMEM_*` name rshmem knows: the runtime's and the bootstrap's tables and
/// [`TOOL_VARS`].
pub fn known_rshmem_names() -> impl Iterator<Item = &'static str> {
    super::all_env_vars()
        .chain(TOOL_VARS.iter())
        .map(|v| v.name)
        .filter(|n| n.starts_with("RSHMEM_"))
}

impl NvshmemVar {
    /// What `value` of this variable means for the `RSHMEM_*` variable it maps to
    /// ([`Mapped::Nothing`] for variables that map to none).
    pub fn map_value(&self, value: &str) -> Mapped {
        let v = value.trim();
        match self.translate {
            Translate::None => Mapped::Nothing,
            Translate::Size => match nvshmem_size(v) {
                Some(n) => Mapped::Value(n.to_string()),
                None => Mapped::Invalid(
                    "expected a size like 1024, 20m, 1.5G (k/m/g/t: powers of 1024)".into(),
                ),
            },
            Translate::Bool => match nvshmem_bool(v) {
                Some(b) => Mapped::Value(if b { "1" } else { "0" }.into()),
                None => Mapped::Invalid("expected a boolean (0/1, y/n, true/false)".into()),
            },
            Translate::Index => match v.parse::<u32>() {
                _ if v.is_empty() => Mapped::Nothing,
                Ok(n) => Mapped::Value(n.to_string()),
                Err(_) => Mapped::Invalid("expected a non-negative integer".into()),
            },
            Translate::DebugLevel => match v.to_ascii_uppercase().as_str() {
                "" => Mapped::Nothing,
                "WARN" => Mapped::Value("warn".into()),
                "INFO" => Mapped::Value("info".into()),
                "TRACE" => Mapped::Value("trace".into()),
                "ABORT" => Mapped::Value("error".into()),
                "VERSION" => Mapped::Nothing,
                _ => Mapped::Invalid("expected one of VERSION, WARN, INFO, ABORT, TRACE".into()),
            },
            Translate::DebugVersion => match v.to_ascii_uppercase().as_str() {
                "VERSION" => Mapped::Value("1".into()),
                _ => Mapped::Nothing,
            },
            Translate::Bootstrap => match v.to_ascii_uppercase().as_str() {
                "" => Mapped::Nothing,
                "MPI" => Mapped::Value("mpi".into()),
                "UID" => Mapped::Value("tcp".into()),
                "PMI" => Mapped::Value("auto".into()),
                "SHMEM" => Mapped::NoEquivalent(
                    "rshmem cannot bootstrap through an OpenSHMEM library".into(),
                ),
                "PLUGIN" => Mapped::NoEquivalent("rshmem has no bootstrap plugins".into()),
                _ => Mapped::Invalid("expected one of PMI, MPI, SHMEM, plugin, UID".into()),
            },
            Translate::RemoteTransport => match v.to_ascii_lowercase().as_str() {
                "" => Mapped::Nothing,
                "ibrc" | "ibdevx" => Mapped::Value("verbs".into()),
                "ucx" => Mapped::Value("ucx".into()),
                "libfabric" | "ibgda" | "none" => Mapped::NoEquivalent(format!(
                    "rshmem has no {v} transport; it picks one itself (RSHMEM_REMOTE_TRANSPORT=auto)"
                )),
                _ => Mapped::Invalid(
                    "expected one of ibrc, ucx, libfabric, ibdevx, ibgda, none".into(),
                ),
            },
            Translate::HcaList => {
                if v.is_empty() {
                    Mapped::Nothing
                } else if v.contains(',') || v.starts_with('^') {
                    Mapped::NoEquivalent(
                        "rshmem takes one device (RSHMEM_IB_DEVICE=name[:port]), not a list or an exclusion".into(),
                    )
                } else {
                    match v.split_once(':').map(|(_, p)| p.parse::<u8>()) {
                        Some(Ok(0) | Err(_)) => {
                            Mapped::Invalid("expected name or name:port with a port from 1".into())
                        }
                        _ => Mapped::Value(v.to_string()),
                    }
                }
            }
        }
    }
}

/// NVSHMEM's size syntax: a decimal number (`.5` allowed) and an optional multiplier `k`, `m`,
/// `g`, `t` (either case, powers of 1024; anything after it is ignored, as NVSHMEM does),
/// rounded up to whole bytes.
pub fn nvshmem_size(s: &str) -> Option<usize> {
    let s = s.trim();
    let end = s
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(s.len());
    let (num, rest) = s.split_at(end);
    if num.is_empty() || num == "." {
        return None;
    }
    let shift = match rest.chars().next() {
        None => 0,
        Some('k' | 'K') => 10,
        Some('m' | 'M') => 20,
        Some('g' | 'G') => 30,
        Some('t' | 'T') => 40,
        Some(_) => return None,
    };
    if !num.contains('.') {
        let n: usize = num.parse().ok()?;
        return n.checked_mul(1usize << shift);
    }
    let x: f64 = num.parse().ok()?;
    let bytes = (x * (1u64 << shift) as f64).ceil();
    (bytes.is_finite() && bytes < usize::MAX as f64).then_some(bytes as usize)
}

fn nvshmem_bool(s: &str) -> Option<bool> {
    match s.trim().to_ascii_lowercase().as_str() {
        "1" | "y" | "yes" | "t" | "true" | "on" => Some(true),
        "0" | "n" | "no" | "f" | "false" | "off" | "" => Some(false),
        _ => None,
    }
}

/// The value of `name` rshmem uses, read through `get`: the variable itself when set (an
/// `RSHMEM_*` variable always wins), else the translated value of an NVSHMEM variable that maps
/// to it (the first set one, in [`NVSHMEM_VARS`] order). Malformed NVSHMEM values give nothing
/// here; [`check_nvshmem`] reports them.
pub fn effective(get: &dyn Fn(&str) -> Option<String>, name: &str) -> Option<String> {
    if let Some(v) = get(name) {
        return Some(v);
    }
    if !name.starts_with("RSHMEM_") {
        return None;
    }
    NVSHMEM_VARS
        .iter()
        .filter(|nv| matches!(nv.what, NvshmemUse::Maps(to) if to == name))
        .find_map(|nv| match nv.map_value(&get(nv.name)?) {
            Mapped::Value(v) => Some(v),
            _ => None,
        })
}

/// The first NVSHMEM variable (through `get`) whose value NVSHMEM itself would reject, with
/// its value and the reason. Mapped variables overridden by their `RSHMEM_*` variable are not
/// checked (their value is not used).
pub fn check_nvshmem(
    get: &dyn Fn(&str) -> Option<String>,
) -> Option<(&'static str, String, String)> {
    NVSHMEM_VARS.iter().find_map(|nv| {
        let NvshmemUse::Maps(to) = nv.what else {
            return None;
        };
        if get(to).is_some() {
            return None;
        }
        let value = get(nv.name)?;
        match nv.map_value(&value) {
            Mapped::Invalid(why) => Some((nv.name, value, why)),
            _ => None,
        }
    })
}

/// Edit distance between `a` and `b` (insertions, deletions, substitutions and transpositions
/// of neighbours each count 1: the optimal string alignment distance).
pub fn edit_distance(a: &str, b: &str) -> usize {
    let a: Vec<char> = a.chars().collect();
    let b: Vec<char> = b.chars().collect();
    let (n, m) = (a.len(), b.len());
    let mut d = vec![vec![0usize; m + 1]; n + 1];
    for (i, row) in d.iter_mut().enumerate() {
        row[0] = i;
    }
    for (j, cell) in d[0].iter_mut().enumerate() {
        *cell = j;
    }
    for i in 1..=n {
        for j in 1..=m {
            let cost = usize::from(a[i - 1] != b[j - 1]);
            let mut best = (d[i - 1][j] + 1)
                .min(d[i][j - 1] + 1)
                .min(d[i - 1][j - 1] + cost);
            if i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] {
                best = best.min(d[i - 2][j - 2] + 1);
            }
            d[i][j] = best;
        }
    }
    d[n][m]
}

/// The known name closest to `name` when it is close enough to be a likely misspelling (at
/// most a third of the part after the prefix changed, and at least one edit allowed).
pub fn closest<'a>(name: &str, known: impl IntoIterator<Item = &'a str>) -> Option<&'a str> {
    let body = name.split_once('_').map_or(name, |(_, b)| b).len();
    let limit = (body / 3).max(2);
    known
        .into_iter()
        .map(|k| (edit_distance(name, k), k))
        .filter(|(d, _)| *d <= limit)
        .min_by_key(|(d, k)| (*d, *k))
        .map(|(_, k)| k)
}

/// What init reports about an environment (see [`EnvReport::lines`]).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct EnvReport {
    /// `RSHMEM_*` names rshmem does not know, with the closest known name.
    pub unknown_rshmem: Vec<(String, Option<&'static str>)>,
    /// `NVSHMEM_*` variables rshmem ignores, with the reason (`name=value (why)` for a value
    /// without an equivalent, `name (not an NVSHMEM variable; did you mean ...)` for a name
    /// NVSHMEM does not know either).
    pub nvshmem_ignored: Vec<String>,
    /// Mapped `NVSHMEM_*` variables whose `RSHMEM_*` variable is set too (and wins).
    pub nvshmem_overridden: Vec<(String, &'static str)>,
}

impl EnvReport {
    /// The report for the variables `vars` (name, value) — every variable of a process
    /// environment; only `RSHMEM_*` and `NVSHMEM_*` names are looked at.
    pub fn from_vars<I, K, V>(vars: I) -> EnvReport
    where
        I: IntoIterator<Item = (K, V)>,
        K: AsRef<str>,
        V: AsRef<str>,
    {
        let vars: Vec<(String, String)> = vars
            .into_iter()
            .map(|(k, v)| (k.as_ref().to_string(), v.as_ref().to_string()))
            .filter(|(k, _)| k.starts_with("RSHMEM_") || k.starts_with("NVSHMEM_"))
            .collect();
        let get = |k: &str| vars.iter().find(|(n, _)| n == k).map(|(_, v)| v.clone());
        let mut r = EnvReport::default();
        let mut names: Vec<&(String, String)> = vars.iter().collect();
        names.sort();
        for (name, value) in names {
            if name.starts_with("RSHMEM_") {
                if !known_rshmem_names().any(|k| k == name) {
                    r.unknown_rshmem
                        .push((name.clone(), closest(name, known_rshmem_names())));
                }
                continue;
            }
            let entries: Vec<&NvshmemVar> = nvshmem_entries(name).collect();
            if entries.is_empty() {
                let hint = match closest(name, NVSHMEM_VARS.iter().map(|v| v.name)) {
                    Some(k) => format!("not an NVSHMEM variable; did you mean {k}?"),
                    None => "not an NVSHMEM variable".to_string(),
                };
                r.nvshmem_ignored.push(format!("{name} ({hint})"));
                continue;
            }
            for nv in entries {
                match nv.what {
                    NvshmemUse::Satisfied | NvshmemUse::Program => {}
                    NvshmemUse::NoEquivalent => r.nvshmem_ignored.push(name.clone()),
                    NvshmemUse::Maps(to) => {
                        let mapped = nv.map_value(value);
                        if get(to).is_some() {
                            if mapped != Mapped::Nothing
                                && !r.nvshmem_overridden.iter().any(|(n, _)| n == name)
                            {
                                r.nvshmem_overridden.push((name.clone(), to));
                            }
                        } else if let Mapped::NoEquivalent(why) = mapped {
                            r.nvshmem_ignored.push(format!("{name}={value} ({why})"));
                        }
                    }
                }
            }
        }
        r
    }

    /// The report for this process's environment.
    pub fn from_process() -> EnvReport {
        EnvReport::from_vars(std::env::vars_os().map(|(k, v)| {
            (
                k.to_string_lossy().into_owned(),
                v.to_string_lossy().into_owned(),
            )
        }))
    }

    /// Nothing to report.
    pub fn is_empty(&self) -> bool {
        self.unknown_rshmem.is_empty()
            && self.nvshmem_ignored.is_empty()
            && self.nvshmem_overridden.is_empty()
    }

    /// The lines init prints on stderr (without a PE prefix): one per unknown `RSHMEM_*` name,
    /// one naming every ignored `NVSHMEM_*` variable, one naming the overridden ones.
    pub fn lines(&self) -> Vec<String> {
        let mut out = Vec::new();
        for (name, near) in &self.unknown_rshmem {
            out.push(match near {
                Some(k) => format!(
                    "warning: {name} is not an rshmem variable and is ignored; did you mean {k}? (rshmem-info lists them)"
                ),
                None => format!(
                    "warning: {name} is not an rshmem variable and is ignored (rshmem-info lists them)"
                ),
            });
        }
        if !self.nvshmem_ignored.is_empty() {
            out.push(format!(
                "warning: NVSHMEM variables without an rshmem equivalent are ignored: {} (docs/nvshmem-porting.md lists what each NVSHMEM variable does in rshmem)",
                self.nvshmem_ignored.join(", ")
            ));
        }
        if !self.nvshmem_overridden.is_empty() {
            let pairs: Vec<String> = self
                .nvshmem_overridden
                .iter()
                .map(|(n, r)| format!("{n} by {r}"))
                .collect();
            out.push(format!(
                "note: RSHMEM_ variables win over the NVSHMEM_ variables they stand for: {} overridden",
                pairs.join(", ")
            ));
        }
        out
    }

    /// A 64-bit digest of [`lines`](Self::lines) (FNV-1a), compared between PEs so that PEs
    /// whose report equals PE 0's stay silent.
    pub fn digest(&self) -> u64 {
        let mut h: u64 = 0xcbf2_9ce4_8422_2325;
        for line in self.lines() {
            for b in line.bytes().chain(std::iter::once(b'\n')) {
                h ^= u64::from(b);
                h = h.wrapping_mul(0x0100_0000_01b3);
            }
        }
        h
    }
}

/// The lines `RSHMEM_INFO=1` prints at init (PE 0): the version, then every `RSHMEM_*` variable
/// of the tables with a value (its own or one an NVSHMEM variable gave it), then every
/// `NVSHMEM_*` variable set, with what rshmem does with it.
pub fn info_lines(get: &dyn Fn(&str) -> Option<String>) -> Vec<String> {
    let mut out = vec![format!("rshmem {}", env!("CARGO_PKG_VERSION"))];
    for v in super::all_env_vars().filter(|v| v.name.starts_with("RSHMEM_")) {
        match (get(v.name), effective(get, v.name)) {
            (Some(own), _) => out.push(format!("  {}={own}", v.name)),
            (None, Some(from)) => {
                let src = NVSHMEM_VARS
                    .iter()
                    .filter(|nv| matches!(nv.what, NvshmemUse::Maps(to) if to == v.name))
                    .find(|nv| {
                        matches!(
                            get(nv.name).map(|x| nv.map_value(&x)),
                            Some(Mapped::Value(_))
                        )
                    })
                    .map_or("an NVSHMEM variable", |nv| nv.name);
                out.push(format!("  {}={from} (from {src})", v.name));
            }
            (None, None) => {}
        }
    }
    let mut seen: Vec<&str> = Vec::new();
    for nv in NVSHMEM_VARS {
        if seen.contains(&nv.name) {
            continue;
        }
        seen.push(nv.name);
        if let Some(value) = get(nv.name) {
            let what = match nv.what {
                NvshmemUse::Maps(to) => format!("stands for {to}"),
                NvshmemUse::Satisfied => "nothing to do".to_string(),
                NvshmemUse::Program => "read by the program".to_string(),
                NvshmemUse::NoEquivalent => "ignored".to_string(),
            };
            out.push(format!("  {}={value}: {what}: {}", nv.name, nv.note));
        }
    }
    out
}

/// The table of [`NVSHMEM_VARS`] as Markdown (docs/nvshmem-porting.md holds it; `rshmem-info
/// --markdown --nvshmem` prints it).
pub fn nvshmem_markdown() -> String {
    let mut out =
        String::from("| NVSHMEM variable | in rshmem | what rshmem does |\n|---|---|---|\n");
    let mut i = 0;
    while i < NVSHMEM_VARS.len() {
        let nv = &NVSHMEM_VARS[i];
        // Consecutive entries of one name (NVSHMEM_DEBUG) share a row.
        let same: Vec<&NvshmemVar> = NVSHMEM_VARS[i..]
            .iter()
            .take_while(|v| v.name == nv.name)
            .collect();
        i += same.len();
        let what: Vec<String> = same
            .iter()
            .map(|v| match v.what {
                NvshmemUse::Maps(to) => format!("`{to}`"),
                NvshmemUse::Satisfied => "nothing to do".into(),
                NvshmemUse::Program => "read by the program".into(),
                NvshmemUse::NoEquivalent => {
                    "no equivalent: ignored, named in the warning at init".into()
                }
            })
            .collect();
        let notes: Vec<&str> = same.iter().map(|v| v.note).collect();
        out.push_str(&format!(
            "| `{}` | {} | {} |\n",
            nv.name,
            what.join(", "),
            notes.join(" ").replace('|', "\\|")
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::tests::lookup;

    fn report(vars: &[(&str, &str)]) -> EnvReport {
        EnvReport::from_vars(vars.iter().copied())
    }

    #[test]
    fn misspelled_rshmem_name_gets_the_closest_known_one() {
        let r = report(&[("RSHMEM_BAKCEND", "cpu"), ("RSHMEM_BACKEND", "cpu")]);
        assert_eq!(
            r.unknown_rshmem,
            [("RSHMEM_BAKCEND".to_string(), Some("RSHMEM_BACKEND"))]
        );
        let lines = r.lines();
        assert_eq!(lines.len(), 1, "{lines:?}");
        assert!(
            lines[0].contains("RSHMEM_BAKCEND")
                && lines[0].contains("did you mean RSHMEM_BACKEND?"),
            "{lines:?}"
        );
        for (typo, meant) in [
            ("RSHMEM_TIMEOUTS", "RSHMEM_TIMEOUT"),
            ("RSHMEM_HEAP_LIMT", "RSHMEM_HEAP_LIMIT"),
            ("RSHMEM_DISABLE_PP2", "RSHMEM_DISABLE_P2P"),
            ("RSHMEM_BOOTSTRAP_ADR", "RSHMEM_BOOTSTRAP_ADDR"),
            ("RSHMEM_LOCALRANK", "RSHMEM_LOCAL_RANK"),
        ] {
            assert_eq!(closest(typo, known_rshmem_names()), Some(meant), "{typo}");
        }
        let r = report(&[("RSHMEM_SOMETHING_ELSE_ENTIRELY", "1")]);
        assert_eq!(r.unknown_rshmem[0].1, None, "no near name: no suggestion");
        assert!(!r.lines()[0].contains("did you mean"));
    }

    #[test]
    fn known_names_are_not_reported() {
        let all: Vec<(&str, &str)> = known_rshmem_names().map(|n| (n, "1")).collect();
        let r = EnvReport::from_vars(all.iter().copied());
        assert!(r.unknown_rshmem.is_empty(), "{r:?}");
        assert!(report(&[("PATH", "/bin"), ("NVSHMEMTEST_USE_MPI_LAUNCHER", "1")]).is_empty());
    }

    #[test]
    fn edit_distance_counts_transpositions_once() {
        assert_eq!(edit_distance("BACKEND", "BAKCEND"), 1);
        assert_eq!(edit_distance("", "abc"), 3);
        assert_eq!(edit_distance("abc", "abc"), 0);
        assert_eq!(edit_distance("kitten", "sitting"), 3);
    }

    #[test]
    fn nvshmem_without_equivalent_is_one_warning_naming_each() {
        let r = report(&[
            ("NVSHMEM_CUMEM_GRANULARITY", "1G"),
            ("NVSHMEM_NVTX", "on"),
            ("NVSHMEM_SYMETRIC_SIZE", "1G"),
            ("NVSHMEM_REMOTE_TRANSPORT", "libfabric"),
            // Mapped, satisfied and program variables are not named.
            ("NVSHMEM_SYMMETRIC_SIZE", "1G"),
            ("NVSHMEM_DISABLE_NVLS", "1"),
            ("NVSHMEM_MACHINE_READABLE_OUTPUT", "1"),
            ("NVSHMEM_DEBUG", "WARN"),
        ]);
        let lines = r.lines();
        assert_eq!(lines.len(), 1, "{lines:?}");
        let l = &lines[0];
        for part in [
            "NVSHMEM_CUMEM_GRANULARITY",
            "NVSHMEM_NVTX",
            "NVSHMEM_SYMETRIC_SIZE (not an NVSHMEM variable; did you mean NVSHMEM_SYMMETRIC_SIZE?)",
            "NVSHMEM_REMOTE_TRANSPORT=libfabric (rshmem has no libfabric transport",
        ] {
            assert!(l.contains(part), "{part} missing from {l}");
        }
        for quiet in [
            "NVSHMEM_SYMMETRIC_SIZE,",
            "NVSHMEM_DISABLE_NVLS",
            "MACHINE_READABLE",
            "NVSHMEM_DEBUG",
        ] {
            assert!(!l.contains(quiet), "{quiet} named in {l}");
        }
        // Words the NVSHMEM examples' checks treat as a failure must not appear.
        assert!(!l.to_lowercase().contains("error") && !l.to_lowercase().contains("fail"));
    }

    #[test]
    fn every_nvshmem_name_is_listed_once_per_target() {
        let mut seen: Vec<(&str, NvshmemUse)> = Vec::new();
        for nv in NVSHMEM_VARS {
            assert!(nv.name.starts_with("NVSHMEM_"), "{}", nv.name);
            assert!(!seen.contains(&(nv.name, nv.what)), "{} twice", nv.name);
            seen.push((nv.name, nv.what));
            assert!(!nv.note.is_empty());
            if let NvshmemUse::Maps(to) = nv.what {
                assert!(
                    super::super::all_env_vars().any(|v| v.name == to),
                    "{} maps to {to}, which is in no table",
                    nv.name
                );
            } else {
                assert_eq!(nv.translate, Translate::None, "{}", nv.name);
            }
        }
        // NVSHMEM 3.4's host, bootstrap and transport tables: 101 names, plus 3 perftest ones.
        let distinct: std::collections::BTreeSet<&str> =
            NVSHMEM_VARS.iter().map(|v| v.name).collect();
        assert_eq!(distinct.len(), 104);
    }

    #[test]
    fn mapping_translates_and_rshmem_wins() {
        let env = [
            ("NVSHMEM_SYMMETRIC_SIZE", "1.5G"),
            ("NVSHMEM_DISABLE_P2P", "y"),
            ("NVSHMEM_DEBUG", "TRACE"),
            ("NVSHMEM_BOOTSTRAP", "MPI"),
            ("NVSHMEM_REMOTE_TRANSPORT", "ibrc"),
            ("NVSHMEM_HCA_LIST", "mlx5_1:1"),
            ("NVSHMEM_IB_GID_INDEX", "3"),
            ("NVSHMEM_MAX_MEMORY_PER_GPU", "8g"),
            ("NVSHMEM_ENABLE_ERROR_CHECKS", "true"),
        ];
        let get = lookup(&env);
        let eff = |k: &str| effective(&get, k);
        assert_eq!(eff("RSHMEM_HEAP_INITIAL").as_deref(), Some("1610612736"));
        assert_eq!(eff("RSHMEM_HEAP_LIMIT").as_deref(), Some("8589934592"));
        assert_eq!(eff("RSHMEM_DISABLE_P2P").as_deref(), Some("1"));
        assert_eq!(eff("RSHMEM_LOG").as_deref(), Some("trace"));
        assert_eq!(eff("RSHMEM_INFO"), None);
        assert_eq!(eff("RSHMEM_BOOTSTRAP").as_deref(), Some("mpi"));
        assert_eq!(eff("RSHMEM_REMOTE_TRANSPORT").as_deref(), Some("verbs"));
        assert_eq!(eff("RSHMEM_IB_DEVICE").as_deref(), Some("mlx5_1:1"));
        assert_eq!(eff("RSHMEM_IB_GID_INDEX").as_deref(), Some("3"));
        assert_eq!(eff("RSHMEM_DEVICE_CHECKS").as_deref(), Some("1"));
        assert_eq!(eff("RSHMEM_TIMEOUT"), None);
        assert!(report(&env).is_empty(), "{:?}", report(&env));

        let both = [("NVSHMEM_DISABLE_P2P", "1"), ("RSHMEM_DISABLE_P2P", "0")];
        let get = lookup(&both);
        assert_eq!(effective(&get, "RSHMEM_DISABLE_P2P").as_deref(), Some("0"));
        let r = report(&both);
        assert_eq!(
            r.nvshmem_overridden,
            [("NVSHMEM_DISABLE_P2P".to_string(), "RSHMEM_DISABLE_P2P")]
        );
        assert!(r.lines()[0].contains("NVSHMEM_DISABLE_P2P by RSHMEM_DISABLE_P2P"));

        let v = [("NVSHMEM_DEBUG", "VERSION")];
        let get = lookup(&v);
        assert_eq!(effective(&get, "RSHMEM_INFO").as_deref(), Some("1"));
        assert_eq!(effective(&get, "RSHMEM_LOG"), None);
        let v = [("NVSHMEM_VERSION", "1")];
        assert_eq!(effective(&lookup(&v), "RSHMEM_INFO").as_deref(), Some("1"));
        let v = [("NVSHMEM_BOOTSTRAP", "UID")];
        assert_eq!(
            effective(&lookup(&v), "RSHMEM_BOOTSTRAP").as_deref(),
            Some("tcp")
        );
    }

    #[test]
    fn nvshmem_values_nvshmem_rejects_are_errors() {
        for (k, v) in [
            ("NVSHMEM_SYMMETRIC_SIZE", "lots"),
            ("NVSHMEM_SYMMETRIC_SIZE", "1x"),
            ("NVSHMEM_DISABLE_P2P", "maybe"),
            ("NVSHMEM_DEBUG", "LOUD"),
            ("NVSHMEM_BOOTSTRAP", "carrier-pigeon"),
            ("NVSHMEM_IB_GID_INDEX", "-1"),
            ("NVSHMEM_HCA_LIST", "mlx5_0:x"),
        ] {
            let env = [(k, v)];
            let (name, value, _) = check_nvshmem(&lookup(&env)).expect(k);
            assert_eq!((name, value.as_str()), (k, v));
            let err = super::super::Config::from_lookup(&lookup(&env)).unwrap_err();
            let msg = err.to_string();
            assert!(msg.contains(k) && msg.contains(v), "{msg}");
        }
        // Overridden by the RSHMEM_ variable: its value is not used, so not checked.
        let env = [
            ("NVSHMEM_DISABLE_P2P", "maybe"),
            ("RSHMEM_DISABLE_P2P", "1"),
        ];
        assert!(check_nvshmem(&lookup(&env)).is_none());
    }

    #[test]
    fn nvshmem_sizes() {
        assert_eq!(nvshmem_size("1024"), Some(1024));
        assert_eq!(nvshmem_size("20m"), Some(20 << 20));
        assert_eq!(nvshmem_size("3.1M"), Some(3_250_586));
        assert_eq!(nvshmem_size(".5m"), Some(512 << 10));
        assert_eq!(nvshmem_size("2G"), Some(2 << 30));
        assert_eq!(nvshmem_size("1t"), Some(1 << 40));
        assert_eq!(
            nvshmem_size("20kk"),
            Some(20 << 10),
            "after the multiplier: ignored"
        );
        assert_eq!(nvshmem_size(""), None);
        assert_eq!(nvshmem_size("."), None);
        assert_eq!(nvshmem_size("k"), None);
        assert_eq!(nvshmem_size("12q"), None);
        assert_eq!(nvshmem_size("99999999999999999999t"), None);
    }

    #[test]
    fn config_takes_nvshmem_values() {
        let env = [
            ("NVSHMEM_SYMMETRIC_SIZE", "256m"),
            ("NVSHMEM_DISABLE_P2P", "1"),
            ("NVSHMEM_INFO", "1"),
        ];
        let c = super::super::Config::from_lookup(&lookup(&env)).unwrap();
        assert_eq!(c.heap_initial, 256 << 20);
        assert!(c.disable_p2p && c.info);
        let env = [
            ("NVSHMEM_SYMMETRIC_SIZE", "256m"),
            ("RSHMEM_HEAP_INITIAL", "1M"),
        ];
        let c = super::super::Config::from_lookup(&lookup(&env)).unwrap();
        assert_eq!(c.heap_initial, 1 << 20, "the RSHMEM_ variable wins");
    }

    #[test]
    fn info_lines_show_where_values_come_from() {
        let env = [
            ("NVSHMEM_SYMMETRIC_SIZE", "1g"),
            ("RSHMEM_TIMEOUT", "5"),
            ("NVSHMEM_NVTX", "x"),
        ];
        let lines = info_lines(&lookup(&env));
        assert!(lines[0].starts_with("rshmem "));
        assert!(lines.iter().any(|l| l == "  RSHMEM_TIMEOUT=5"), "{lines:?}");
        assert!(
            lines
                .iter()
                .any(|l| l == "  RSHMEM_HEAP_INITIAL=1073741824 (from NVSHMEM_SYMMETRIC_SIZE)"),
            "{lines:?}"
        );
        assert!(lines
            .iter()
            .any(|l| l.starts_with("  NVSHMEM_NVTX=x: ignored")));
    }

    /// Every `RSHMEM_*` name the workspace's code reads from the environment is a known name, so init never calls a legitimate variable unknown. Looks
    /// at Rust, C/CUDA, Python and shell sources (not the docs) for the usual ways of reading a
    /// variable.
    #[test]
    fn every_name_the_code_reads_is_known() {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .parent()
            .expect("the workspace root")
            .to_path_buf();
        let mut files = Vec::new();
        collect(&root, &mut files);
        assert!(
            files.len() > 50,
            "found only {} source files under {root:?}",
            files.len()
        );
        let known: Vec<&str> = known_rshmem_names().collect();
        let mut missing = Vec::new();
        for f in &files {
            let Ok(text) = std::fs::read_to_string(f) else {
                continue;
            };
            for (name, form) in reads(&text) {
                if !known.contains(&name.as_str()) {
                    missing.push(format!("{}: {form}{name}", f.display()));
                }
            }
        }
        assert!(
            missing.is_empty(),
            "RSHMEM_ variables read by the code but in no table (add them to config::ENV_VARS, \
             the bootstrap's ENV_VARS or config::TOOL_VARS):\n{}",
            missing.join("\n")
        );
        // The scanner itself finds what it should.
        // (Built with format! so that this file holds no such read itself.)
        let sample = format!(
            r#"std::env::var("{p}X1"); getenv("{p}X2"); ${{{p}X3:-1}} ${p}X4 os.environ.get("{p}X5") get("{p}X6") "{p}NOT_READ""#,
            p = "RSHMEM_"
        );
        let sample = sample.as_str();
        let found: Vec<String> = reads(sample).into_iter().map(|(n, _)| n).collect();
        assert_eq!(
            found,
            [
                "RSHMEM_X1",
                "RSHMEM_X2",
                "RSHMEM_X3",
                "RSHMEM_X4",
                "RSHMEM_X5",
                "RSHMEM_X6"
            ]
        );
    }

    /// Source files under `dir` (not target/, .git or other hidden folders).
    fn collect(dir: &std::path::Path, out: &mut Vec<std::path::PathBuf>) {
        let Ok(entries) = std::fs::read_dir(dir) else {
            return;
        };
        for e in entries.flatten() {
            let p = e.path();
            let name = e.file_name().to_string_lossy().into_owned();
            if p.is_dir() {
                if name != "target" && (!name.starts_with('.') || name == ".ci") {
                    collect(&p, out);
                }
                continue;
            }
            let ext = p.extension().map(|x| x.to_string_lossy().into_owned());
            let script = p
                .parent()
                .and_then(|d| d.file_name())
                .is_some_and(|d| d == "scripts" || d == ".ci")
                && ext.is_none();
            let source = matches!(
                ext.as_deref(),
                Some("rs" | "c" | "h" | "cu" | "cuh" | "cpp" | "py" | "sh" | "cmake" | "in")
            );
            if script || source {
                out.push(p);
            }
        }
    }

    /// `RSHMEM_*` names in `text` in a reading form, with the form.
    fn reads(text: &str) -> Vec<(String, &'static str)> {
        const FORMS: &[&str] = &[
            "var(\"",
            "var_os(\"",
            "get(\"",
            "lookup(\"",
            "option_env!(\"",
            "getenv(\"",
            "${",
            "$",
            "environ[\"",
            "environ.get(\"",
            "only(\"",
        ];
        let mut out = Vec::new();
        let mut at = 0;
        while let Some(i) = text[at..].find("RSHMEM_") {
            let start = at + i;
            let end = text[start..]
                .find(|c: char| !(c.is_ascii_uppercase() || c.is_ascii_digit() || c == '_'))
                .map_or(text.len(), |e| start + e);
            let before = &text[..start];
            if let Some(form) = FORMS.iter().find(|f| before.ends_with(**f)) {
                let name = &text[start..end];
                if !name.ends_with('_') {
                    out.push((name.to_string(), *form));
                }
            }
            at = end.max(start + 1);
        }
        out
    }
}
