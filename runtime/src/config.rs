//! Runtime configuration: ONE table of environment variables feeds [`Config`], the docs and
//! `rshmem-info`. Builder settings (see [`crate::Builder`]) override the environment.
//!
//! NVSHMEM's variables ([`NVSHMEM_VARS`]) with an rshmem equivalent stand in for the `RSHMEM_*`
//! variable they map to when that one is unset ([`effective`]); [`EnvReport`] says what init
//! warns about (unknown `RSHMEM_*` names, ignored `NVSHMEM_*` variables).

mod compat;

pub use compat::{
    check_nvshmem, closest, edit_distance, effective, info_lines, known_rshmem_names,
    nvshmem_entries, nvshmem_markdown, nvshmem_size, EnvReport, Mapped, NvshmemUse, NvshmemVar,
    NVSHMEM_VARS, TOOL_VARS,
};

use std::time::Duration;

use crate::error::{Error, Result};

/// This PE's rank from the launcher's variables, for messages before init knows it.
pub use rshmem_bootstrap::launcher_rank;
pub use rshmem_bootstrap::EnvVar;

/// Every variable the runtime itself reads (the bootstrap's own are in
/// [`rshmem_bootstrap::ENV_VARS`]; [`all_env_vars`] lists both).
pub static ENV_VARS: &[EnvVar] = &[
    EnvVar {
        name: "RSHMEM_TIMEOUT",
        kind: "seconds (float)",
        default: "300",
        help: "Timeout of every blocking wait (barrier, wait_until, signal_wait_until, the TCP bootstrap, each send, receive, connect and handshake of the TCP transport; MPI calls of the MPI bootstrap are not covered); 0 disables it. The error names the waiting PE and what it waited for.",
    },
    EnvVar {
        name: "RSHMEM_HEAP_LIMIT",
        kind: "bytes (K/M/G/T suffix)",
        default: "64G (32T / PEs per host above 512 PEs on a host)",
        help: "Most symmetric memory one PE may map; the heap grows on demand up to this. Address space for it is reserved at init, memory is not: every process reserves it for each PE of its host.",
    },
    EnvVar {
        name: "RSHMEM_HEAP_INITIAL",
        kind: "bytes (K/M/G/T suffix)",
        default: "64M",
        help: "Size of the first heap chunk mapped at init; later chunks double the heap.",
    },
    EnvVar {
        name: "RSHMEM_DEBUG_SYMMETRY",
        kind: "bool",
        default: "0",
        help: "Check that every PE makes the same allocation calls in the same order; a mismatch is an error naming the PEs and calls.",
    },
    EnvVar {
        name: "RSHMEM_BACKEND",
        kind: "auto | cpu | gpu",
        default: "auto",
        help: "Where the symmetric heap lives: gpu (CUDA VMM memory, one GPU per PE) when a CUDA driver and GPUs are present, else cpu (host shared memory). All PEs must agree.",
    },
    EnvVar {
        name: "RSHMEM_DEVICE",
        kind: "integer",
        default: "local rank mod GPU count",
        help: "CUDA device ordinal this PE uses (among the visible devices).",
    },
    EnvVar {
        name: "RSHMEM_DEVICE_CHECKS",
        kind: "bool",
        default: "1 in debug builds of rshmem, else 0",
        help: "Device calls check PE numbers and heap ranges and trap with a message naming the call on bad input.",
    },
    EnvVar {
        name: "RSHMEM_CACHE_DIR",
        kind: "path",
        default: "$XDG_CACHE_HOME/rshmem or ~/.cache/rshmem",
        help: "Where CUBINs compiled by NVRTC are cached.",
    },
    EnvVar {
        name: "RSHMEM_NODE_ID",
        kind: "string",
        default: "hostname + boot id",
        help: "Identity of this PE's host; PEs with equal ids share memory. Override only for testing.",
    },
    EnvVar {
        name: "RSHMEM_DISABLE_P2P",
        kind: "bool",
        default: "0",
        help: "Treat every PE as its own host: no load/store between PEs, every other PE is reached over the TCP transport (CPU backend). For testing the remote path on one host.",
    },
    EnvVar {
        name: "RSHMEM_HOST_BARRIER",
        kind: "auto|0|1",
        default: "auto",
        help: "World barriers (barrier_all, sync_all, the barriers of heap calls and finalize) when every PE is on one host: 1 counts arrivals in one shared word and wakes the sleepers with one futex call (the host barrier), 0 uses the dissemination barrier (a flag per round), auto the host barrier when the PEs outnumber the host's CPUs. Must be the same on every PE.",
    },
    EnvVar {
        name: "RSHMEM_LAZY_MAPPING",
        kind: "bool",
        default: "1",
        help: "Host heaps (the CPU backend's heap, every backend's control heap): map another PE of this host at this PE's first access to it, through /proc/PID/fd, instead of mapping every PE of the host at init and at every heap growth. 0 maps them all eagerly (needed where /proc of another process of the same user cannot be opened). Lazy needs every PE of the host to ask for it and to share one PID namespace; otherwise the host maps eagerly.",
    },
    EnvVar {
        name: "RSHMEM_TCP_ADDR",
        kind: "IP address",
        default: "the local address of the route to the bootstrap host (loopback when that is this host or unknown)",
        help: "The one address the TCP transport (PEs on other hosts) listens on and advertises to the other PEs; it never listens on every interface. Set it on multi-homed hosts, and on multi-host jobs under the MPI bootstrap.",
    },
    EnvVar {
        name: "RSHMEM_REMOTE_TRANSPORT",
        kind: "auto | tcp | verbs | ucx",
        default: "auto",
        help: "Transport to PEs on other hosts: tcp, verbs (InfiniBand/RoCE; needs rshmem built with the verbs feature and an RDMA device, else init fails naming the cause), ucx (UCX's UCP API; libucp is loaded at run time; on the GPU backend it must be a CUDA-enabled UCX offering cuda_copy; init fails naming the cause and the fix when it cannot be used), or auto: verbs between two PEs that both opened an RDMA device, else UCX between two PEs whose UCX has an InfiniBand/RoCE transport (and, on the GPU backend, CUDA support), else TCP. All PEs must agree.",
    },
    EnvVar {
        name: "RSHMEM_UCX_LIB",
        kind: "path",
        default: "libucp.so.0 (the dynamic linker's search path)",
        help: "The libucp the UCX transport loads. UCX's own variables (UCX_TLS, UCX_NET_DEVICES, ...) choose what UCX uses.",
    },
    EnvVar {
        name: "RSHMEM_UCX_TARGET_ATOMICS",
        kind: "bool",
        default: "0 (1 on the GPU backend, and on a host without an RDMA device)",
        help: "Atomics and signals on the user heap of PEs reached through UCX are applied by rshmem on the target PE (a UCX active message; fetching ones are answered, posted ones counted and settled by the next quiet) instead of by UCX's own atomics. Always so on the GPU backend, where UCX's software atomics cannot touch GPU memory, and on a host without an RDMA device, where UCX would emulate them in software (its emulation aborts the target PE when the initiator dies with an atomic in flight, and UCX 1.22 with peer-failure handling finds no protocol for software fetching atomics over TCP); set it to 1 to run that path elsewhere (testing).",
    },
    EnvVar {
        name: "RSHMEM_UCX_EMULATED_RMA",
        kind: "bool",
        default: "0",
        help: "Use a UCX that would carry puts and gets over TCP by its software emulation (UCX 1.13 and older; 1.14-1.19 with peer-failure handling; 1.20 and newer with UCX_RNDV_THRESH set by the user), which init otherwise refuses: such a UCX aborts a PE (ucs_fatal 'unexpected error: Endpoint timeout' in its put handler) when a peer dies with puts to it in flight, instead of reporting the peer lost. Set it to 1 to accept that (tests, benchmarks).",
    },
    EnvVar {
        name: "RSHMEM_UCX_ERROR_MODE",
        kind: "auto | peer | none",
        default: "auto",
        help: "Whether UCX endpoints use UCX's peer-failure handling. peer: yes (a keepalive on every endpoint: a peer that vanishes without closing its connections is found); none: no, as Open MPI's OSHMEM runs UCX (a peer that crashes is still reported as gone when its connections close, one that vanishes silently only after RSHMEM_TIMEOUT); auto: none with a UCX of 1.14 to 1.19 that has no InfiniBand/RoCE transport (with peer handling such a UCX emulates every put over TCP with active messages: twice the latency, a fifth of the bandwidth of large puts), peer otherwise. UCX cannot connect endpoints of both kinds, so the job uses none as soon as one PE does; init fails, naming both PEs, when another PE set peer explicitly.",
    },
    EnvVar {
        name: "RSHMEM_IB_DEVICE",
        kind: "name[:port]",
        default: "the first device with an active port",
        help: "RDMA device (as listed by ibv_devices) and port the verbs transport uses.",
    },
    EnvVar {
        name: "RSHMEM_IB_GID_INDEX",
        kind: "integer",
        default: "a RoCE v2 GID of the port if any, else 0",
        help: "GID table index the verbs transport addresses this port by (matters on RoCE; see show_gids).",
    },
    EnvVar {
        name: "RSHMEM_HANG_REPORT_FD",
        kind: "file descriptor",
        default: "unset (set by rshmemrun)",
        help: "Pipe to which a PE writes its hang report when rshmemrun asks with SIGUSR1, and the wait that timed out or saw a peer gone; rshmemrun merges the PEs' reports into one table. Unset: a report asked for with SIGUSR1 goes to stderr.",
    },
    EnvVar {
        name: "RSHMEM_EP_LL_PER_PE",
        kind: "auto|0|1",
        default: "auto",
        help: "How the low-latency MoE exchange (rshmem::ep) moves a token: 1 once per destination PE, the dispatch into the row of its first expert there (the receiver copies it to the token's other experts on that PE) and the combine back as one row per (token, PE), that PE's experts' outputs summed there with the routing weights (fewer NVLink bytes each way: with 4 PEs, E 256 and k 8 about 2.7 instead of 6 remote rows per token); 0 once per (token, expert) pair; auto: 1 when there are other PEs and this PE has its GPU to itself, 0 on one PE or when PEs share the GPU (there the copy costs more than the stores it saves). A handle goes once per PE only when every PE asks for it and every PE's kernel blocks fit on its share of the SMs (Ep::ll_per_pe says which).",
    },
    EnvVar {
        name: "RSHMEM_INFO",
        kind: "bool",
        default: "0",
        help: "At init, PE 0 prints rshmem's version and every RSHMEM_/NVSHMEM_ variable that is set, with the value rshmem uses, on stderr.",
    },
    EnvVar {
        name: "RSHMEM_CAPI_DATA_SEGMENT",
        kind: "bool",
        default: "1",
        help: "libshmem (the OpenSHMEM C library) only: 0 leaves the program's global and static variables private (not symmetric) instead of moving the data segment onto shared memory at init.",
    },
    EnvVar {
        name: "RSHMEM_LOG",
        kind: "tracing filter",
        default: "warn",
        help: "tracing filter for programs that call rshmem::init_logging() (examples, perftests; librshmem calls it at init when this or NVSHMEM_DEBUG is set), e.g. rshmem=debug,rshmem::heap=trace; a bare level means rshmem=LEVEL.",
    },
];

/// Both tables: the runtime's and the bootstrap's.
pub fn all_env_vars() -> impl Iterator<Item = &'static EnvVar> {
    ENV_VARS.iter().chain(rshmem_bootstrap::ENV_VARS.iter())
}

/// Settings read from the environment (and overridden by the builder).
#[derive(Debug, Clone)]
pub struct Config {
    /// Timeout of every blocking wait; `None` waits forever.
    pub timeout: Option<Duration>,
    /// Most symmetric memory one PE may map (`RSHMEM_HEAP_LIMIT`); `None`: the default,
    /// [`Config::heap_limit_for`]. A `World`'s `config()` holds the limit in effect.
    pub heap_limit: Option<usize>,
    /// Size of the first heap chunk.
    pub heap_initial: usize,
    /// Check allocation symmetry across PEs.
    pub debug_symmetry: bool,
    /// Host identity override.
    pub node_id: Option<String>,
    /// Requested backend.
    pub backend: BackendChoice,
    /// CUDA device ordinal override.
    pub device: Option<usize>,
    /// Device-side argument checks.
    pub device_checks: bool,
    /// Every PE is its own node (no load/store between PEs).
    pub disable_p2p: bool,
    /// Map local PEs' host heaps at first access (`RSHMEM_LAZY_MAPPING`).
    pub lazy_mapping: bool,
    /// World barriers of a one-host job as host barriers (`RSHMEM_HOST_BARRIER`): None is
    /// auto (when the PEs outnumber the host's CPUs).
    pub host_barrier: Option<bool>,
    /// Address of the TCP transport.
    pub tcp_addr: Option<String>,
    /// Transport to PEs on other hosts.
    pub remote_transport: RemoteChoice,
    /// RDMA device name and optional port for the verbs transport.
    pub ib_device: Option<(String, Option<u8>)>,
    /// GID index for the verbs transport.
    pub ib_gid_index: Option<u32>,
    /// The libucp to load (`RSHMEM_UCX_LIB`).
    pub ucx_lib: Option<String>,
    /// Atomics on the user heap over UCX are applied on the target by rshmem
    /// (`RSHMEM_UCX_TARGET_ATOMICS`; always on the GPU backend).
    pub ucx_target_atomics: bool,
    /// Whether UCX endpoints use UCX's peer-failure handling (`RSHMEM_UCX_ERROR_MODE`).
    pub ucx_error_mode: UcxErrorMode,
    /// PE 0 prints the version and the variables set at init (`RSHMEM_INFO`).
    pub info: bool,
    /// Accept a UCX that emulates RMA over TCP in software (`RSHMEM_UCX_EMULATED_RMA`).
    pub ucx_emulated_rma: bool,
    /// The low-latency MoE dispatch sends a token's row once per destination PE
    /// (`RSHMEM_EP_LL_PER_PE`): None is auto (when the PE has its GPU to itself).
    pub ep_ll_per_pe: Option<bool>,
}

/// The `RSHMEM_BACKEND` setting.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BackendChoice {
    /// GPU when available, else CPU.
    Auto,
    /// Host shared memory.
    Cpu,
    /// GPU memory (an error if no GPU is usable).
    Gpu,
}

/// The heap limit per PE when `RSHMEM_HEAP_LIMIT` is not set, for a host of few PEs.
pub const DEFAULT_HEAP_LIMIT: usize = 64 << 30;

/// The address space the default heap limits of one host's PEs add up to at most: every process
/// of the host reserves every local PE's slice, and x86-64 user space is 128 TiB (with 1,024
/// PEs on a host, 64 GiB each needed 65 TiB in every process, which ASLR-placed libraries left
/// room for only now and then).
pub const HOST_HEAP_SPACE: usize = 32 << 40;

impl Config {
    /// The heap limit of each of `n_local` PEs on this host: `RSHMEM_HEAP_LIMIT` when set, else
    /// [`DEFAULT_HEAP_LIMIT`], lowered to [`HOST_HEAP_SPACE`] / `n_local` (whole GiB, at least
    /// 1 GiB) on hosts with more than 512 PEs.
    pub fn heap_limit_for(&self, n_local: usize) -> usize {
        self.heap_limit.unwrap_or_else(|| {
            let share = (HOST_HEAP_SPACE / n_local.max(1)) & !((1 << 30) - 1);
            DEFAULT_HEAP_LIMIT.min(share.max(1 << 30))
        })
    }
}

impl Default for Config {
    fn default() -> Self {
        Config {
            timeout: Some(Duration::from_secs(300)),
            heap_limit: None,
            heap_initial: 64 << 20,
            debug_symmetry: false,
            node_id: None,
            backend: BackendChoice::Auto,
            device: None,
            device_checks: cfg!(debug_assertions),
            disable_p2p: false,
            lazy_mapping: true,
            host_barrier: None,
            tcp_addr: None,
            remote_transport: RemoteChoice::Auto,
            ib_device: None,
            ib_gid_index: None,
            ucx_lib: None,
            ucx_target_atomics: false,
            ucx_emulated_rma: false,
            ucx_error_mode: UcxErrorMode::Auto,
            info: false,
            ep_ll_per_pe: None,
        }
    }
}

impl Config {
    /// Reads the variables of [`ENV_VARS`] from the process environment.
    pub fn from_env() -> Result<Self> {
        Self::from_lookup(&|k| std::env::var(k).ok())
    }

    /// Reads the variables through `get` (testable without touching the environment). An
    /// unset `RSHMEM_*` variable takes the translated value of the NVSHMEM variable that maps
    /// to it, if any ([`effective`]); a malformed value of such an NVSHMEM variable is an error
    /// naming it.
    pub fn from_lookup(get: &dyn Fn(&str) -> Option<String>) -> Result<Self> {
        if let Some((name, value, why)) = check_nvshmem(get) {
            return Err(bad(name, &value, &why));
        }
        let raw = get;
        let get = &|k: &str| effective(raw, k);
        let mut c = Config::default();
        if let Some(v) = get("RSHMEM_TIMEOUT") {
            let secs: f64 = v
                .trim()
                .parse()
                .ok()
                .filter(|s: &f64| s.is_finite() && *s >= 0.0)
                .ok_or_else(|| bad("RSHMEM_TIMEOUT", &v, "expected a number of seconds >= 0"))?;
            c.timeout = (secs > 0.0).then(|| Duration::from_secs_f64(secs));
        }
        let flag = |name| parsed(get, name, parse_bool, "expected 0/1/true/false");
        let auto_flag = |name| parsed(get, name, parse_auto_bool, "expected auto, 0 or 1");
        let size = |name, like| parsed(get, name, parse_size, like);
        if let Some(b) = size("RSHMEM_HEAP_LIMIT", "expected a size like 512M or 16G")? {
            c.heap_limit = Some(b);
        }
        if let Some(b) = size("RSHMEM_HEAP_INITIAL", "expected a size like 64M")? {
            c.heap_initial = b;
        }
        if let Some(on) = flag("RSHMEM_DEBUG_SYMMETRY")? {
            c.debug_symmetry = on;
        }
        if let Some(v) = get("RSHMEM_BACKEND") {
            c.backend = match v.trim().to_ascii_lowercase().as_str() {
                "" | "auto" => BackendChoice::Auto,
                "cpu" | "host" => BackendChoice::Cpu,
                "gpu" | "cuda" => BackendChoice::Gpu,
                _ => return Err(bad("RSHMEM_BACKEND", &v, "expected auto, cpu or gpu")),
            };
        }
        if let Some(d) = parsed(get, "RSHMEM_DEVICE", number, "expected a device ordinal")? {
            c.device = Some(d);
        }
        if let Some(on) = flag("RSHMEM_DEVICE_CHECKS")? {
            c.device_checks = on;
        }
        if let Some(on) = flag("RSHMEM_DISABLE_P2P")? {
            c.disable_p2p = on;
        }
        if let Some(on) = flag("RSHMEM_LAZY_MAPPING")? {
            c.lazy_mapping = on;
        }
        if let Some(v) = auto_flag("RSHMEM_HOST_BARRIER")? {
            c.host_barrier = v;
        }
        if let Some(v) = get("RSHMEM_TCP_ADDR").filter(|v| !v.trim().is_empty()) {
            if v.trim().parse::<std::net::IpAddr>().is_err() {
                return Err(bad("RSHMEM_TCP_ADDR", &v, "expected an IP address"));
            }
            c.tcp_addr = Some(v.trim().to_string());
        }
        if let Some(v) = get("RSHMEM_REMOTE_TRANSPORT") {
            c.remote_transport = RemoteChoice::parse(&v).ok_or_else(|| {
                bad(
                    "RSHMEM_REMOTE_TRANSPORT",
                    &v,
                    "expected auto, tcp, verbs or ucx",
                )
            })?;
        }
        if let Some(v) = get("RSHMEM_UCX_LIB").filter(|v| !v.trim().is_empty()) {
            c.ucx_lib = Some(v.trim().to_string());
        }
        if let Some(v) = get("RSHMEM_UCX_TARGET_ATOMICS") {
            c.ucx_target_atomics = parse_bool(&v)
                .ok_or_else(|| bad("RSHMEM_UCX_TARGET_ATOMICS", &v, "expected 0/1/true/false"))?;
        }
        if let Some(v) = get("RSHMEM_UCX_EMULATED_RMA") {
            c.ucx_emulated_rma = parse_bool(&v)
                .ok_or_else(|| bad("RSHMEM_UCX_EMULATED_RMA", &v, "expected 0/1/true/false"))?;
        }
        if let Some(v) = auto_flag("RSHMEM_EP_LL_PER_PE")? {
            c.ep_ll_per_pe = v;
        }
        if let Some(v) = get("RSHMEM_UCX_ERROR_MODE") {
            c.ucx_error_mode = UcxErrorMode::parse(&v)
                .ok_or_else(|| bad("RSHMEM_UCX_ERROR_MODE", &v, "expected auto, peer or none"))?;
        }
        if let Some(v) = get("RSHMEM_IB_DEVICE").filter(|v| !v.trim().is_empty()) {
            let v = v.trim();
            c.ib_device = Some(match v.split_once(':') {
                Some((name, port)) => {
                    let port: u8 = port.parse().ok().filter(|p| *p > 0).ok_or_else(|| {
                        bad(
                            "RSHMEM_IB_DEVICE",
                            v,
                            "expected name or name:port with a port from 1",
                        )
                    })?;
                    (name.to_string(), Some(port))
                }
                None => (v.to_string(), None),
            });
        }
        // Set but blank is unset.
        let non_blank = |k: &str| get(k).filter(|v| !v.trim().is_empty());
        let gid = "RSHMEM_IB_GID_INDEX";
        if let Some(i) = parsed(&non_blank, gid, number, "expected a GID table index")? {
            c.ib_gid_index = Some(i);
        }
        if let Some(on) = flag("RSHMEM_INFO")? {
            c.info = on;
        }
        if let Some(v) = get("RSHMEM_NODE_ID") {
            if v.is_empty() {
                return Err(bad("RSHMEM_NODE_ID", &v, "must not be empty"));
            }
            c.node_id = Some(v);
        }
        Ok(c)
    }
}

/// Variable `name` parsed by `parse` when it is set; an error naming it (`expected` says what
/// it should be) when it does not parse.
fn parsed<T>(
    get: &dyn Fn(&str) -> Option<String>,
    name: &str,
    parse: fn(&str) -> Option<T>,
    expected: &str,
) -> Result<Option<T>> {
    get(name)
        .map(|v| parse(&v).ok_or_else(|| bad(name, &v, expected)))
        .transpose()
}

/// A number of type `T` (surrounding blanks ignored).
fn number<T: std::str::FromStr>(v: &str) -> Option<T> {
    v.trim().parse().ok()
}

fn bad(var: &str, value: &str, reason: &str) -> Error {
    Error::invalid(
        "init",
        format!("environment variable {var}={value:?} is malformed: {reason}"),
    )
}

/// Parses a size in bytes as rshmem writes them everywhere (environment variables, the
/// perftests' `--min-size`/`--max-size`): digits with an optional binary suffix `K`, `M`, `G`,
/// `T` (either case; powers of 1024: `4K` = 4096) and an optional trailing `B` or `iB` (`64MiB`);
/// white space around the number is ignored. `None` when it is not such a size or does not fit
/// in `usize`.
///
/// ```
/// use rshmem::config::parse_size;
/// assert_eq!(parse_size("4KiB"), Some(4096));
/// assert_eq!(parse_size("2m"), Some(2 << 20));
/// assert_eq!(parse_size("-1"), None);
/// ```
pub fn parse_size(s: &str) -> Option<usize> {
    let t = s.trim();
    let t = t
        .strip_suffix("iB")
        .or_else(|| t.strip_suffix('B'))
        .unwrap_or(t);
    let (num, shift) = match t.char_indices().last()? {
        (i, 'k' | 'K') => (&t[..i], 10),
        (i, 'm' | 'M') => (&t[..i], 20),
        (i, 'g' | 'G') => (&t[..i], 30),
        (i, 't' | 'T') => (&t[..i], 40),
        _ => (t, 0),
    };
    let n: usize = num.trim().parse().ok()?;
    n.checked_mul(1usize << shift)
}

/// `auto` (or empty) as `Some(None)`, a [`parse_bool`] value as `Some(Some(b))`; None when it
/// is neither.
fn parse_auto_bool(s: &str) -> Option<Option<bool>> {
    match s.trim().to_ascii_lowercase().as_str() {
        "" | "auto" => Some(None),
        other => parse_bool(other).map(Some),
    }
}

fn parse_bool(s: &str) -> Option<bool> {
    match s.trim().to_ascii_lowercase().as_str() {
        "1" | "true" | "yes" | "on" => Some(true),
        "0" | "false" | "no" | "off" | "" => Some(false),
        _ => None,
    }
}

crate::wire::code_enum! {
/// The `RSHMEM_REMOTE_TRANSPORT` setting (its code travels in the init exchange).
#[derive(Default)]
pub enum RemoteChoice: u8 {
    /// Verbs where both PEs of a pair have an RDMA device (and rshmem was built with the `verbs`
    /// feature), TCP otherwise.
    #[default]
    Auto = 0,
    /// TCP for every PE of another host.
    Tcp = 1,
    /// Verbs for every PE of another host; an error at init when a PE cannot open a device.
    Verbs = 2,
    /// UCX for every PE of another host; an error at init when a PE cannot load or initialise
    /// libucp.
    Ucx = 3,
}
}

/// `RSHMEM_REMOTE_TRANSPORT`'s names, the first of each value the one it is shown by.
const REMOTE_NAMES: &[(&str, RemoteChoice)] = &[
    ("auto", RemoteChoice::Auto),
    ("", RemoteChoice::Auto),
    ("tcp", RemoteChoice::Tcp),
    ("verbs", RemoteChoice::Verbs),
    ("ib", RemoteChoice::Verbs),
    ("rdma", RemoteChoice::Verbs),
    ("ucx", RemoteChoice::Ucx),
];

/// The value `v` names in `table` (case-insensitive, surrounding blanks ignored).
fn by_name<T: Copy>(table: &[(&str, T)], v: &str) -> Option<T> {
    let v = v.trim().to_ascii_lowercase();
    table.iter().find(|(n, _)| *n == v).map(|&(_, t)| t)
}

/// The first name of `t` in `table`.
fn name_of<T: PartialEq>(table: &[(&'static str, T)], t: &T) -> &'static str {
    table.iter().find(|(_, x)| x == t).map_or("?", |(n, _)| n)
}

impl RemoteChoice {
    /// Parses `auto`, `tcp`, `verbs` (also `ib`, `rdma`) or `ucx` (case-insensitive,
    /// surrounding blanks ignored).
    pub fn parse(v: &str) -> Option<Self> {
        by_name(REMOTE_NAMES, v)
    }
}

impl std::fmt::Display for RemoteChoice {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(name_of(REMOTE_NAMES, self))
    }
}

/// The `RSHMEM_UCX_ERROR_MODE` setting: whether UCX endpoints use UCX's peer-failure handling.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum UcxErrorMode {
    /// The runtime decides from the UCX version and its transports (see `RSHMEM_UCX_ERROR_MODE`).
    #[default]
    Auto,
    /// UCX's peer-failure handling (`UCP_ERR_HANDLING_MODE_PEER`).
    Peer,
    /// None (`UCP_ERR_HANDLING_MODE_NONE`, as Open MPI's OSHMEM runs UCX).
    None,
}

impl UcxErrorMode {
    /// Parses `auto`, `peer` or `none` (case-insensitive, surrounding blanks ignored).
    pub fn parse(v: &str) -> Option<Self> {
        by_name(
            &[
                ("auto", UcxErrorMode::Auto),
                ("", UcxErrorMode::Auto),
                ("peer", UcxErrorMode::Peer),
                ("none", UcxErrorMode::None),
            ],
            v,
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An environment of the `pairs` (for the lookups `Config` and the NVSHMEM mapping take).
    pub(super) fn lookup<'a>(
        pairs: &'a [(&'a str, &'a str)],
    ) -> impl Fn(&str) -> Option<String> + 'a {
        move |k| {
            pairs
                .iter()
                .find(|(n, _)| *n == k)
                .map(|(_, v)| v.to_string())
        }
    }

    #[test]
    fn sizes() {
        assert_eq!(parse_size("123"), Some(123));
        assert_eq!(parse_size("16"), Some(16));
        assert_eq!(parse_size("64K"), Some(64 << 10));
        assert_eq!(parse_size("4K"), Some(4096));
        assert_eq!(parse_size("4KiB"), Some(4096));
        assert_eq!(parse_size("2m"), Some(2 << 20));
        assert_eq!(parse_size("64MiB"), Some(64 << 20));
        assert_eq!(parse_size("2g"), Some(2 << 30));
        assert_eq!(parse_size("1T"), Some(1 << 40));
        assert_eq!(parse_size("x"), None);
        assert_eq!(parse_size("-1"), None);
        assert_eq!(parse_size("99999999999999999999T"), None);
    }

    #[test]
    fn default_heap_limit_fits_the_host_address_space() {
        let c = Config::default();
        assert_eq!(c.heap_limit_for(1), DEFAULT_HEAP_LIMIT);
        assert_eq!(c.heap_limit_for(512), 64 << 30);
        assert_eq!(c.heap_limit_for(1024), 32 << 30);
        assert_eq!(c.heap_limit_for(3000), 10 << 30);
        assert_eq!(c.heap_limit_for(1 << 20), 1 << 30);
        for n in [1, 7, 513, 1024, 2048, 6000] {
            assert!(c.heap_limit_for(n) * n <= HOST_HEAP_SPACE.max(n << 30));
        }
        // A limit that was set is kept, however many PEs share the host.
        let set = Config {
            heap_limit: Some(64 << 30),
            ..Config::default()
        };
        assert_eq!(set.heap_limit_for(1024), 64 << 30);
    }

    #[test]
    fn env_values() {
        let c = Config::from_lookup(&lookup(&[
            ("RSHMEM_TIMEOUT", "2.5"),
            ("RSHMEM_HEAP_LIMIT", "1G"),
        ]))
        .unwrap();
        assert_eq!(c.timeout, Some(Duration::from_millis(2500)));
        assert_eq!(c.heap_limit, Some(1 << 30));
        let c = Config::from_lookup(&lookup(&[("RSHMEM_TIMEOUT", "0")])).unwrap();
        assert_eq!(c.timeout, None);
        assert_eq!(c.remote_transport, RemoteChoice::Auto);
        let c = Config::from_lookup(&lookup(&[
            ("RSHMEM_REMOTE_TRANSPORT", "Verbs"),
            ("RSHMEM_IB_DEVICE", "mlx5_1:2"),
            ("RSHMEM_IB_GID_INDEX", "3"),
        ]))
        .unwrap();
        assert_eq!(c.remote_transport, RemoteChoice::Verbs);
        assert_eq!(c.ib_device, Some(("mlx5_1".to_string(), Some(2))));
        assert_eq!(c.ib_gid_index, Some(3));
        let c = Config::from_lookup(&lookup(&[
            ("RSHMEM_REMOTE_TRANSPORT", "tcp"),
            ("RSHMEM_IB_DEVICE", "rxe0"),
        ]))
        .unwrap();
        assert_eq!(c.remote_transport, RemoteChoice::Tcp);
        assert_eq!(c.ib_device, Some(("rxe0".to_string(), None)));
        assert_eq!(c.ucx_error_mode, UcxErrorMode::Auto);
        let c = Config::from_lookup(&lookup(&[("RSHMEM_UCX_ERROR_MODE", "None")])).unwrap();
        assert_eq!(c.ucx_error_mode, UcxErrorMode::None);
        assert_eq!(c.ep_ll_per_pe, None);
        for (v, want) in [("1", Some(true)), ("0", Some(false)), ("Auto", None)] {
            let c = Config::from_lookup(&lookup(&[("RSHMEM_EP_LL_PER_PE", v)])).unwrap();
            assert_eq!(c.ep_ll_per_pe, want, "{v}");
        }
    }

    #[test]
    fn malformed_env_names_the_variable() {
        for (k, v) in [
            ("RSHMEM_TIMEOUT", "soon"),
            ("RSHMEM_TIMEOUT", "-3"),
            ("RSHMEM_HEAP_LIMIT", "lots"),
            ("RSHMEM_DEBUG_SYMMETRY", "maybe"),
            ("RSHMEM_BACKEND", "tpu"),
            ("RSHMEM_DEVICE", "first"),
            ("RSHMEM_DISABLE_P2P", "sometimes"),
            ("RSHMEM_TCP_ADDR", "eth0"),
            ("RSHMEM_REMOTE_TRANSPORT", "carrier-pigeon"),
            ("RSHMEM_IB_DEVICE", "mlx5_0:x"),
            ("RSHMEM_IB_DEVICE", "mlx5_0:0"),
            ("RSHMEM_IB_GID_INDEX", "roce"),
            ("RSHMEM_UCX_ERROR_MODE", "strict"),
            ("RSHMEM_EP_LL_PER_PE", "per-pe"),
            ("RSHMEM_HOST_BARRIER", "sometimes"),
        ] {
            let err = Config::from_lookup(&move |q| (q == k).then(|| v.to_string())).unwrap_err();
            let msg = err.to_string();
            assert!(msg.contains(k) && msg.contains(v), "{msg}");
        }
    }
}
