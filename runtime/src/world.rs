//! Init and finalize: the process-wide runtime state ([`World`]) and its [`Builder`].

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use rshmem_bootstrap::Bootstrap;

use std::sync::{Mutex, Weak};

use crate::config::{BackendChoice, Config};
use crate::cuda::Gpu;
use crate::device::state::{
    internal as dev_internal, DEVICE_STATE_VERSION, FLAG_CONTIGUOUS, FLAG_DEBUG,
};
use crate::device::DeviceState;
use crate::error::{Error, Result};
use crate::heap::internal::{BELL, PEER_NOTICE};
use crate::heap::{Backing, Heap};
use crate::node::{host_identity, Liveness, Node};
use crate::transport::remote::Remotes;
use crate::transport::select::Via;
use crate::transport::tcp::{self, Net, Region};
use crate::transport::{
    p2p::P2p, Amo, AmoOp, HeapId, RegionTargets, RemoteAddr, RemoteRef, Transport,
    TransportOps as _,
};
use crate::types::Bits;
use crate::wait::SharedBell;
use crate::wait::WaitPolicy;

static ACTIVE: AtomicBool = AtomicBool::new(false);

/// Configures and starts the runtime. Settings left unset come from the environment
/// (see [`crate::config::ENV_VARS`]).
///
/// A framework that already knows its ranks (torchrun, a Ray actor, its own MPI communicator)
/// starts rshmem without any launcher variables by giving [`Builder::rank`], [`Builder::size`]
/// and the rendezvous ([`Builder::unique_id`], or [`Builder::rendezvous`] with an address and a
/// secret): rank 0 creates a [`crate::UniqueId`], the framework passes its text to every rank
/// through its own channel, and each rank calls
/// `Builder::new().rank(r).size(n).unique_id(id).init()`. Then the launcher's variables are not
/// read at all. Every value given to the builder wins over the environment; contradictory
/// settings (a rank without a size, a multi-PE job without a rendezvous, a device with the CPU
/// backend, ...) are errors naming the setting.
///
/// ```no_run
/// # fn main() -> rshmem::Result<()> {
/// // Rank 0 of 2: make the id (the others parse the text they were sent).
/// let id = rshmem::UniqueId::new("10.0.0.1:29600")?;
/// let text = id.to_string(); // send to the other ranks, e.g. through the framework's store
/// let world = rshmem::Builder::new()
///     .rank(0)
///     .size(2)
///     .unique_id(text.parse()?)
///     .backend(rshmem::config::BackendChoice::Cpu)
///     .init()?;
/// world.finalize()
/// # }
/// ```
#[derive(Debug, Default)]
pub struct Builder {
    timeout: Option<Option<Duration>>,
    heap_limit: Option<usize>,
    heap_initial: Option<usize>,
    debug_symmetry: Option<bool>,
    rank: Option<usize>,
    size: Option<usize>,
    uid: Option<rshmem_bootstrap::UniqueId>,
    rendezvous_addr: Option<(String, [u8; rshmem_bootstrap::SECRET_LEN])>,
    backend: Option<BackendChoice>,
    device: Option<usize>,
}

/// [`Builder`] methods that store their argument as one setting:
/// `name(arg: Type) => field;` makes `pub fn name(self, arg: Type) -> Self`.
macro_rules! settings {
    ($($(#[$doc:meta])* $name:ident($arg:ident: $ty:ty) => $field:ident;)*) => {$(
        $(#[$doc])*
        pub fn $name(mut self, $arg: $ty) -> Self {
            self.$field = Some($arg);
            self
        }
    )*};
}

impl Builder {
    /// A builder that takes every setting from the environment.
    pub fn new() -> Self {
        Self::default()
    }

    settings! {
        /// Timeout of every blocking wait (`None` waits forever). Overrides `RSHMEM_TIMEOUT`.
        timeout(t: Option<Duration>) => timeout;
        /// Most symmetric memory one PE may use. Overrides `RSHMEM_HEAP_LIMIT`.
        heap_limit(bytes: usize) => heap_limit;
        /// Size of the first heap chunk. Overrides `RSHMEM_HEAP_INITIAL`.
        heap_initial(bytes: usize) => heap_initial;
        /// Check that allocation calls match across PEs. Overrides `RSHMEM_DEBUG_SYMMETRY`.
        debug_symmetry(on: bool) => debug_symmetry;
        /// This PE's rank, `0..size`. Needs [`Builder::size`]; with both, the launcher's variables
        /// (`RSHMEM_RANK`, `RANK`, `OMPI_COMM_WORLD_RANK`, ...) are not read.
        rank(rank: usize) => rank;
        /// Number of PEs in the job. Needs [`Builder::rank`].
        size(size: usize) => size;
        /// The job's rendezvous: rank 0's address and the job secret, as made by
        /// [`crate::UniqueId::new`] on one rank and passed to the others (its `Display` text parses
        /// back with `str::parse`). Needs [`Builder::rank`] and [`Builder::size`]. Rank 0 listens
        /// at the id's address, so that address must be one of rank 0's own.
        unique_id(id: rshmem_bootstrap::UniqueId) => uid;
        /// CPU or GPU symmetric heap. Overrides `RSHMEM_BACKEND`.
        backend(b: BackendChoice) => backend;
        /// CUDA device ordinal of this PE (among the visible devices). Overrides `RSHMEM_DEVICE`;
        /// an error with the CPU backend.
        device(ordinal: usize) => device;
    }

    /// The job's rendezvous as rank 0's `host:port` and the 16-byte job secret (every rank must
    /// give the same); the same as [`Builder::unique_id`] with
    /// [`crate::UniqueId::with_secret`]. Give one of the two, not both.
    pub fn rendezvous(
        mut self,
        addr: impl Into<String>,
        secret: [u8; rshmem_bootstrap::SECRET_LEN],
    ) -> Self {
        self.rendezvous_addr = Some((addr.into(), secret));
        self
    }

    /// The explicit job (rank, size, rendezvous) when the builder was given one; an error for
    /// contradictory settings.
    fn explicit_job(
        &mut self,
    ) -> Result<Option<(usize, usize, Option<rshmem_bootstrap::UniqueId>)>> {
        let call = "Builder::init";
        let uid = match (self.uid.take(), self.rendezvous_addr.take()) {
            (Some(_), Some(_)) => {
                return Err(Error::invalid(
                    call,
                    "both unique_id and rendezvous are set: give the rendezvous one way only",
                ))
            }
            (Some(id), None) => Some(id),
            (None, Some((addr, secret))) => Some(
                rshmem_bootstrap::UniqueId::with_secret(addr, secret)
                    .map_err(|e| Error::invalid(call, format!("rendezvous: {e}")))?,
            ),
            (None, None) => None,
        };
        match (self.rank, self.size) {
            (None, None) => match uid {
                Some(_) => Err(Error::invalid(
                    call,
                    "a unique id (or rendezvous) is set without rank and size: set both with Builder::rank and Builder::size",
                )),
                None => Ok(None),
            },
            (Some(_), None) => Err(Error::invalid(
                call,
                "rank is set but size is not: set both (Builder::size)",
            )),
            (None, Some(_)) => Err(Error::invalid(
                call,
                "size is set but rank is not: set both (Builder::rank)",
            )),
            (Some(_), Some(0)) => Err(Error::invalid(call, "size is 0: a job has at least one PE")),
            (Some(r), Some(n)) if r >= n => Err(Error::invalid(
                call,
                format!("rank {r} is out of range for size {n} (ranks are 0..{n})"),
            )),
            (Some(r), Some(n)) if n > 1 && uid.is_none() => Err(Error::invalid(
                call,
                format!(
                    "rank {r} of {n}: a job of more than one PE needs a rendezvous (Builder::unique_id or Builder::rendezvous)"
                ),
            )),
            (Some(r), Some(n)) => Ok(Some((r, n, uid))),
        }
    }

    /// **Collective.** Starts the runtime: reads the launcher's variables (unless the builder
    /// was given rank, size and rendezvous), meets the other PEs, reserves and maps the
    /// symmetric heap. Every PE of the job must call it.
    ///
    /// The environment is checked first ([`crate::config::EnvReport`]): unknown `RSHMEM_*`
    /// names (with the closest known name) and `NVSHMEM_*` variables without an rshmem
    /// equivalent are named in warnings on stderr, printed once per job by PE 0 (and by any
    /// other PE whose warnings differ from PE 0's); when init fails, every PE prints its own.
    pub fn init(self) -> Result<World> {
        let report = crate::config::EnvReport::from_process();
        ENV_REPORTED.store(false, Ordering::Relaxed);
        let r = self.init_checked(&report);
        if r.is_err() && !ENV_REPORTED.load(Ordering::Relaxed) {
            let pe =
                crate::config::launcher_rank().map_or_else(|| "?".to_string(), |r| r.to_string());
            for line in report.lines() {
                eprintln!("rshmem PE {pe}: {line}");
            }
        }
        r
    }

    fn init_checked(mut self, report: &crate::config::EnvReport) -> Result<World> {
        let job = self.explicit_job()?;
        let mut cfg = Config::from_env()?;
        if let Some(b) = self.backend {
            cfg.backend = b;
        }
        if let Some(d) = self.device {
            cfg.device = Some(d);
        }
        let from_builder = self.device.is_some() || self.backend.is_some();
        if let (BackendChoice::Cpu, Some(d), true) = (cfg.backend, cfg.device, from_builder) {
            let src = |b: bool, var: &str, call: &str| {
                if b {
                    call.to_string()
                } else {
                    var.to_string()
                }
            };
            return Err(Error::invalid(
                "Builder::init",
                format!(
                    "device {d} (from {}) is set but the backend is cpu (from {}): a CUDA device \
                     needs the gpu or auto backend",
                    src(self.device.is_some(), "RSHMEM_DEVICE", "Builder::device"),
                    src(self.backend.is_some(), "RSHMEM_BACKEND", "Builder::backend"),
                ),
            ));
        }
        if let Some(t) = self.timeout {
            cfg.timeout = t;
        }
        if let Some(v) = self.heap_limit {
            cfg.heap_limit = Some(v);
        }
        if let Some(v) = self.heap_initial {
            cfg.heap_initial = v;
        }
        if let Some(v) = self.debug_symmetry {
            cfg.debug_symmetry = v;
        }
        if let Some((rank, size, uid)) = job {
            tracing::debug!(target: "rshmem::init", rank, size, launcher = "none (rank, size and rendezvous given to Builder)", "launch information");
            let rendezvous = uid.as_ref().map(|u| u.addr().to_string());
            let boot: Box<dyn Bootstrap> = match &uid {
                Some(id) if size > 1 => Box::new(rshmem_bootstrap::TcpBootstrap::new(
                    rank,
                    size,
                    id,
                    cfg.timeout,
                    None,
                )?),
                _ => Box::new(rshmem_bootstrap::SingletonBootstrap::new()),
            };
            return World::start(cfg, boot, rendezvous, report);
        }
        let env = |k: &str| crate::config::effective(&env_var, k);
        let (info, boot) = rshmem_bootstrap::from_env_lookup(&env, cfg.timeout)?;
        tracing::debug!(target: "rshmem::init", rank = info.rank, size = info.size, launcher = %info.launcher, "launch information (detected launcher)");
        let rendezvous = info.uid.as_ref().map(|u| u.addr().to_string());
        World::start(cfg, boot, rendezvous, report)
    }
}

/// Whether this init printed its environment warnings already (so a failing init does not
/// print them twice).
static ENV_REPORTED: AtomicBool = AtomicBool::new(false);

/// The process environment as a lookup function.
fn env_var(name: &str) -> Option<String> {
    std::env::var_os(name).map(|v| v.to_string_lossy().into_owned())
}

/// Prints the environment warnings of `report` once per job (PE 0, and any PE whose report
/// differs from PE 0's), and the `RSHMEM_INFO` lines on PE 0. Collective (one allgather).
fn report_environment(
    boot: &dyn Bootstrap,
    cfg: &Config,
    report: &crate::config::EnvReport,
) -> Result<()> {
    let me = boot.rank();
    let digests = boot.allgather(&report.digest().to_le_bytes())?;
    ENV_REPORTED.store(true, Ordering::Relaxed);
    let differs = digests.first().map(Vec::as_slice) != Some(&report.digest().to_le_bytes()[..]);
    if me == 0 || differs {
        for line in report.lines() {
            eprintln!("rshmem PE {me}: {line}");
        }
    }
    if cfg.info && me == 0 {
        for line in crate::config::info_lines(&env_var) {
            eprintln!("rshmem PE {me}: {line}");
        }
    }
    Ok(())
}

/// **Collective.** Starts the runtime with settings from the environment; shorthand for
/// `Builder::new().init()`. Like `shmem_init`.
pub fn init() -> Result<World> {
    Builder::new().init()
}

/// The running rshmem runtime of this process: one per process, between [`init`] and
/// [`World::finalize`]. It is `Send + Sync`; one-sided calls may come from any thread,
/// collective calls (allocation, barrier) from one thread at a time per PE.
pub struct World {
    pub(crate) me: usize,
    pub(crate) n: usize,
    /// The proxy serving device calls to PEs on other nodes (GPU backend with remote PEs).
    /// Declared first: its thread stops before the transport and heaps it uses go away.
    pub(crate) proxy: Option<crate::proxy::Proxy>,
    /// How waits spin, yield and nap. Declared before the transports: its progress hook holds
    /// the UCX transport, whose last reference must go with `remotes`, before the heaps are
    /// unmapped (its drop completes outstanding operations and may report a peer lost).
    pub(crate) wait: WaitPolicy,
    /// How each PE is reached, and the remote transports (TCP, verbs, UCX) to PEs of other
    /// hosts; shared with the proxy. Declared before the heaps: the transports' service threads
    /// stop and memory regions are deregistered before the heaps are unmapped.
    pub(crate) remotes: Arc<Remotes>,
    pub(crate) boot: Box<dyn Bootstrap>,
    pub(crate) node: Node,
    /// The user's symmetric heap (host or GPU memory).
    pub(crate) heap: Arc<Heap>,
    /// A small host heap for host-side synchronization (barrier flags), whatever the backend.
    pub(crate) ctrl: Heap,
    pub(crate) xport: Transport,
    /// This PE's GPU side (GPU backend): device, device state and the modules that hold it.
    pub(crate) dev: DeviceSide,
    pub(crate) live: Arc<Liveness>,
    pub(crate) cfg: Config,
    pub(crate) barrier_epoch: AtomicU64,
    /// World barriers are host barriers (`crate::sync::host_barrier_serves`).
    pub(crate) host_barrier: bool,
    /// Dissemination rounds run so far (every barrier and team sync; [`CommCounters`]).
    pub(crate) sync_rounds: AtomicU64,
    pub(crate) coll_seq: AtomicU64,
    /// Teams: free synchronization slots and the predefined teams.
    pub(crate) teams: crate::team::handle::Teams,
    /// Registered symmetric regions (memory outside the heap; see `region`).
    pub(crate) regions: crate::region::memory::Regions,
    finalized: AtomicBool,
    init_time: Duration,
}

/// The GPU side of a world: its device, the device state every module sees, the modules that
/// hold a copy of it and the stream collectives' kernels.
pub(crate) struct DeviceSide {
    /// This PE's GPU (None on the CPU backend).
    pub(crate) gpu: Option<Arc<Gpu>>,
    /// The current device state (what modules see as `rshmem_state`).
    pub(crate) state: Arc<Mutex<DeviceState>>,
    /// Modules loaded through the world (state reinstalled on every change).
    pub(crate) modules: Mutex<Vec<Weak<cudarc::driver::CudaModule>>>,
    /// Kernels of the stream collectives (compiled on first use).
    pub(crate) coll: crate::coll::modules::CollModules,
}

crate::debug_fields!(World, |w| { my_pe: w.me, n_pes: w.n, node: w.node, heap: w.heap });

impl World {
    fn start(
        cfg: Config,
        boot: Box<dyn Bootstrap>,
        rendezvous: Option<String>,
        report: &crate::config::EnvReport,
    ) -> Result<World> {
        let t0 = Instant::now();
        if ACTIVE.swap(true, Ordering::AcqRel) {
            return Err(Error::State {
                call: "init",
                reason: "rshmem is already initialized in this process (call finalize first)"
                    .into(),
            });
        }
        let fds = crate::cloexec::open_fds();
        let r = report_environment(boot.as_ref(), &cfg, report)
            .and_then(|()| Self::start_inner(cfg, boot, rendezvous, t0));
        // Whatever init and its libraries opened stays out of programs this PE starts.
        let marked = crate::cloexec::mark_new(&fds);
        if marked > 0 {
            tracing::debug!(target: "rshmem::init", "set close-on-exec on {marked} descriptors opened by libraries during init");
        }
        if let Ok(w) = &r {
            // The PEs are connected: libraries' listeners (UCX's TCP transport) take no one new.
            // rshmem's own TCP transport keeps listening (its PEs connect at first use, and
            // every connection must present the job token).
            let mut keep = fds.clone();
            keep.extend(w.remotes.tcp().map(|n| n.listener_fd()));
            let shut = crate::cloexec::shut_new_listeners(&keep);
            if shut > 0 {
                tracing::debug!(target: "rshmem::init", "closed {shut} listening sockets opened by libraries during init to new connections");
            }
        }
        if r.is_err() {
            ACTIVE.store(false, Ordering::Release);
        }
        r
    }

    fn start_inner(
        mut cfg: Config,
        boot: Box<dyn Bootstrap>,
        rendezvous: Option<String>,
        t0: Instant,
    ) -> Result<World> {
        let me = boot.rank();
        let n = boot.size();
        let _span =
            tracing::info_span!(target: "rshmem::init", "init", pe = me, n_pes = n).entered();
        let mut id = host_identity(cfg.node_id.as_deref());
        if cfg.disable_p2p {
            // Every PE its own node: no load/store between PEs, all of them over TCP.
            id = format!("{id}/pe{me}");
        }
        let mut node = Node::establish(boot.as_ref(), &id, cfg.timeout)?;
        let live = Arc::new(Liveness::new(n));
        // The host control heap first: before a CUDA context fills the address space.
        let ctrl = Heap::create(
            boot.as_ref(),
            &node,
            &live,
            Backing::Host,
            0,
            0,
            "ctrl",
            cfg.lazy_mapping,
        )?;
        live.set_notice(ctrl.internal_addr(ctrl.me_local(), PEER_NOTICE));
        // The bells this PE's barrier waits sleep on, rung when a peer is found lost.
        let own = SharedBell::at(ctrl.internal_addr(ctrl.me_local(), BELL));
        live.on_failure(Box::new(move || own.ring()));
        let host_cpus = crate::wait::host_cpus().unwrap_or(1);
        let host_barrier =
            crate::wait::host_barrier_serves(node.len(), n, host_cpus, cfg.host_barrier);
        if host_barrier {
            ctrl.map_peer("init", 0, ctrl.internal(), Some(&live))?;
            let (sleeps_on, _) = crate::heap::internal::host_barrier_bells(ctrl.me_local());
            let bell = SharedBell::at(ctrl.internal_addr(0, sleeps_on));
            live.on_failure(Box::new(move || bell.ring()));
        }
        let (gpu, host_pes) = choose_gpu(boot.as_ref(), &cfg, &node)?;
        if gpu.is_some() {
            // The GPU proxy reaches every local PE's control heap: map them all now.
            ctrl.map_every_peer("init", Some(&live))?;
        }
        let sharing = match &gpu {
            Some(g) => crate::device::sharing::detect(boot.as_ref(), &node, g)?,
            None => Default::default(),
        };
        let backing = match &gpu {
            Some(g) => Backing::Cuda(g.clone()),
            None => Backing::Host,
        };
        // The limit in effect, as `config()` reports it.
        let heap_limit = cfg.heap_limit_for(node.len());
        cfg.heap_limit = Some(heap_limit);
        let heap = Arc::new(Heap::create(
            boot.as_ref(),
            &node,
            &live,
            backing,
            heap_limit,
            cfg.heap_initial,
            "heap",
            cfg.lazy_mapping,
        )?);
        let dstate = Arc::new(Mutex::new(DeviceState::default()));
        let xport = match &gpu {
            Some(g) => Transport::P2p(P2p::new(g.clone(), dstate.clone())?),
            None => Transport::Shm,
        };
        let mut remotes = Remotes::plan(boot.as_ref(), &cfg, &node.local_of, gpu.is_some())?;
        // This PE's symmetric regions as the remote transports' targets see them (filled in by
        // `register_region`).
        let region_targets = Arc::new(RegionTargets::default());
        if remotes.uses(Via::Tcp) {
            let addr = tcp::pick_address(cfg.tcp_addr.as_deref(), rendezvous.as_deref())?;
            let regions = [
                Region::user(
                    &heap,
                    crate::cuda::target::for_user_heap(&gpu, &dstate, me, cfg.timeout)?,
                ),
                Region::ctrl(&ctrl),
                Region::regions(&region_targets),
            ];
            remotes.connect_tcp(
                boot.as_ref(),
                &node.local_of,
                &node.token,
                addr,
                cfg.timeout,
                live.clone(),
                regions,
            )?;
        }
        // Atomics from PEs reached through UCX on a GPU heap are applied here by rshmem (UCX
        // cannot touch GPU memory with its software atomics).
        let ucx_gpu_mem = if remotes.ucx_job() {
            crate::cuda::target::for_user_heap(&gpu, &dstate, me, cfg.timeout)?
        } else {
            None
        };
        remotes.connect(crate::transport::remote::ConnectWith {
            boot: boot.as_ref(),
            cfg: &cfg,
            live: &live,
            heap: &heap,
            ctrl: &ctrl,
            gpu_mem: ucx_gpu_mem,
            regions: &region_targets,
        })?;
        let remotes = Arc::new(remotes);
        let proxy = match &gpu {
            Some(g) if remotes.any() => Some(crate::proxy::Proxy::start(
                g,
                &dstate,
                &remotes,
                &heap,
                &ctrl,
                &node,
                me,
                n,
                &live,
                cfg.timeout,
            )?),
            _ => None,
        };
        let ctrl_spans = ctrl.peer_spans();
        node.start_monitor(
            live.clone(),
            |j| ctrl.internal_addr(j, PEER_NOTICE),
            move |j| {
                ctrl_spans
                    .as_ref()
                    .is_none_or(|s| s.covers(j, PEER_NOTICE + 8))
            },
        )?;
        // The PEs of the host share its cores, also when RSHMEM_DISABLE_P2P makes every PE
        // its own node (then node.len() is 1, and 32 PEs on 2 cores each spun as if alone).
        let tcp = remotes.tcp();
        let mut wait = WaitPolicy::new(me, cfg.timeout, host_pes.max(node.len()), tcp.is_some());
        if let Some(net) = tcp {
            if wait.serving_threads_share_core() {
                net.spin_at_least(tcp::SHARED_CORE_SPIN);
            }
        }
        // One doorbell per PE, rung by the TCP service threads after each write they apply and
        // by UCX's progress when it did something (over TCP, UCX applies peers' writes there).
        let ucx = remotes.ucx();
        if tcp.is_some() || ucx.is_some() {
            let bell = tcp.map_or_else(Default::default, |net| net.bell());
            let ucx_writes_in_progress = match ucx {
                Some(u) => {
                    u.set_bell(bell.clone());
                    u.set_crowded(wait.pes_outnumber_cores());
                    u.writes_only_in_progress()
                }
                None => false,
            };
            // The rung writers are the only writers of this PE's memory when it is in host
            // memory, no other PE maps it, and every other PE reaches it over TCP, or over a
            // UCX that writes only in its progress.
            let only_rung_writes = gpu.is_none()
                && node.len() == 1
                && (0..n).all(|p| {
                    p == me
                        || match remotes.via(p) {
                            Via::Tcp => true,
                            Via::Ucx => ucx_writes_in_progress,
                            _ => false,
                        }
                });
            wait.set_doorbell(bell, only_rung_writes);
        }
        wait.set_progress(remotes.progress());
        let world = World {
            me,
            n,
            proxy,
            remotes,
            boot,
            node,
            heap,
            ctrl,
            xport,
            dev: DeviceSide {
                gpu,
                state: dstate,
                modules: Mutex::new(Vec::new()),
                coll: crate::coll::modules::CollModules::new(sharing),
            },
            live,
            wait,
            cfg,
            barrier_epoch: AtomicU64::new(0),
            host_barrier,
            sync_rounds: AtomicU64::new(0),
            coll_seq: AtomicU64::new(0),
            teams: crate::team::handle::Teams::new(n),
            regions: crate::region::memory::Regions::new(region_targets),
            finalized: AtomicBool::new(false),
            init_time: Duration::ZERO,
        };
        world.init_device_area()?;
        world.load_proxy_kernels()?;
        world.boot.barrier()?;
        crate::hang::install(me);
        let mut world = world;
        world.init_time = t0.elapsed();
        tracing::debug!(target: "rshmem::init", elapsed = ?world.init_time, gpu = world.dev.gpu.is_some(), "initialized");
        Ok(world)
    }

    /// GPU backend: fills the runtime-internal area of my GPU slice (zeroed barrier words, the
    /// PE table) and the device state.
    fn init_device_area(&self) -> Result<()> {
        let Transport::P2p(p) = &self.xport else {
            return Ok(());
        };
        let call = "init";
        let mine = self.heap.my_base();
        p.zero(call, mine, dev_internal::PE_TABLE)?;
        let table: Vec<i32> = (0..self.n)
            .map(|pe| self.node.local_of[pe].map_or(-1, |l| l as i32))
            .collect();
        let bytes: Vec<u8> = table.iter().flat_map(|v| v.to_le_bytes()).collect();
        p.put(
            call,
            mine + dev_internal::PE_TABLE,
            bytes.as_ptr(),
            bytes.len(),
        )?;
        p.quiet(call)?;
        for t in [self.team_world(), self.team_shared(), self.team_node()] {
            self.device_team_install(call, t.inner.slot, t.members())?;
        }
        self.refresh_device_state()
    }

    /// Recomputes the device state (after init and heap growth) and installs it in every live
    /// module. After heap growth (collectively, every PE grows in the same call) it first
    /// registers the new chunk with the remote transports that need it (verbs).
    pub(crate) fn refresh_device_state(&self) -> Result<()> {
        self.remotes
            .heap_grown("malloc", self.boot.as_ref(), &self.heap)?;
        if self.dev.gpu.is_none() {
            return Ok(());
        }
        let mut st = DeviceState {
            version: DEVICE_STATE_VERSION,
            size: std::mem::size_of::<DeviceState>() as u32,
            my_pe: self.me as i32,
            n_pes: self.n as i32,
            my_local: self.heap.me_local() as i32,
            n_local: self.heap.n_local() as i32,
            heap_base: self.heap.base() as u64,
            slice: self.heap.slice() as u64,
            heap_user_start: self.heap.internal() as u64,
            heap_mapped: self.heap.mapped() as u64,
            pe_local_table: (self.heap.my_base() + dev_internal::PE_TABLE) as u64,
            timeout_ns: self
                .cfg
                .timeout
                .map_or(0, |t| t.as_nanos().min(u64::MAX as u128) as u64),
            flags: (if self.cfg.device_checks {
                FLAG_DEBUG
            } else {
                0
            }) | (if self.node.pes.windows(2).all(|w| w[1] == w[0] + 1) {
                FLAG_CONTIGUOUS
            } else {
                0
            }),
            team_table: (self.heap.my_base() + dev_internal::TEAM_TABLE) as u64,
            team_count: dev_internal::MAX_TEAMS as u64,
            heap_reg_start: self.heap.user_start() as u64,
            ..Default::default()
        };
        if let Some(p) = &self.proxy {
            p.describe(&mut st);
        }
        st.check_slice("init")?;
        let changed = {
            let mut cur = self.dev.state.lock().map_err(|_| poisoned("init"))?;
            let changed = *cur != st;
            *cur = st;
            changed
        };
        if changed {
            if let Some(g) = &self.dev.gpu {
                crate::device::units::deliver("init", g, &st)?;
            }
            if let (Some(g), Ok(mut mods)) = (&self.dev.gpu, self.dev.modules.lock()) {
                mods.retain(|w| w.strong_count() > 0);
                for m in mods.iter().filter_map(|w| w.upgrade()) {
                    crate::device::module::Module::wrap(g, m).install_state(&st)?;
                }
            }
            if let Transport::P2p(p) = &self.xport {
                if let Some(Ok(k)) = p.internal_loaded() {
                    k.module.install_state(&st)?;
                }
            }
        }
        Ok(())
    }

    /// This PE's number, `0..n_pes()`. Like `shmem_my_pe`.
    #[inline]
    pub fn my_pe(&self) -> usize {
        self.me
    }

    /// Number of PEs in the job. Like `shmem_n_pes`.
    #[inline]
    pub fn n_pes(&self) -> usize {
        self.n
    }

    /// The settings in effect.
    pub fn config(&self) -> &Config {
        &self.cfg
    }

    /// How long [`init`] took in this process.
    pub fn init_time(&self) -> Duration {
        self.init_time
    }

    /// The PEs that share this host (and so this PE's memory by load/store), ascending.
    pub fn node_pes(&self) -> &[usize] {
        &self.node.pes
    }

    /// **Local.** The address of PE `pe`'s copy of the symmetric object at `addr` (this PE's
    /// address), usable by load/store from this process — host memory on the CPU backend, a
    /// device address (for kernels and CUDA copies) on the GPU backend. `None` when `addr` is not
    /// inside a live symmetric allocation, `pe` is out of range, or `pe` cannot be reached by
    /// load/store. Like `shmem_ptr`.
    pub fn ptr<T>(&self, addr: *const T, pe: usize) -> Option<*mut T> {
        self.remote("ptr", addr as usize, 0, pe)
            .ok()
            .map(|a| a as *mut T)
    }

    /// **Local.** True if `addr` lies inside a live symmetric allocation of this PE and `pe`
    /// can be reached (so one-sided calls on it to `pe` are valid). Like `shmem_addr_accessible`.
    pub fn addr_accessible<T>(&self, addr: *const T, pe: usize) -> bool {
        self.target("addr_accessible", addr as usize, 0, pe).is_ok()
    }

    /// **Local.** Which transport serves PE `pe` from this PE and its capability bits:
    /// `shm`/`p2p` (load/store) for this PE and the PEs of its host, `tcp` or `verbs` for the
    /// others (see `RSHMEM_REMOTE_TRANSPORT`). `None` when `pe` is out of range.
    pub fn transport(&self, pe: usize) -> Option<crate::transport::TransportInfo> {
        let info = |name, caps| Some(crate::transport::TransportInfo { name, caps });
        match self.node.local_of.get(pe)? {
            Some(_) => info(self.xport.name(), self.xport.caps()),
            None => {
                let r = self.remote_xport("transport", pe).ok()?;
                info(r.name(), r.caps())
            }
        }
    }

    /// **Local.** True if `pe` exists and this PE can communicate with it. Like
    /// `shmem_pe_accessible`.
    pub fn pe_accessible(&self, pe: usize) -> bool {
        self.check_pe("pe_accessible", pe).is_ok()
    }

    /// **Collective.** Completes all outstanding operations, waits for every PE, and releases
    /// the runtime (heap, sockets, threads). Like `shmem_finalize`. Symmetric addresses are
    /// invalid afterwards; the borrow checker enforces it for [`crate::SymBuf`]s.
    pub fn finalize(mut self) -> Result<()> {
        let r = self.finalize_collective();
        self.node.stop_monitor();
        drop(self);
        r
    }

    /// **Collective.** [`World::finalize`] for a world shared through [`World::into_shared`]:
    /// completes all outstanding operations and meets every PE exactly like `finalize`, on
    /// every PE, whatever other handles remain. The memory, sockets and threads are released
    /// when the last handle (a clone of the `Arc` or a [`crate::SharedSymBuf`]) is dropped; until
    /// then those handles keep their memory mapped (sound to touch locally), but calls that
    /// need a peer fail, since the peers have finalized. Calling it twice is an error.
    pub fn finalize_shared(world: Arc<World>) -> Result<()> {
        if world.finalized.load(Ordering::Acquire) {
            return Err(Error::State {
                call: "finalize_shared",
                reason: "this world is already finalized".into(),
            });
        }
        world.finalize_collective()
    }

    /// Wraps the world in an `Arc`, so that it can be stored next to its buffers in one struct
    /// (see [`crate::SharedSymBuf`] and [`World::malloc_shared`]); end it with
    /// [`World::finalize_shared`].
    pub fn into_shared(self) -> Arc<World> {
        Arc::new(self)
    }

    /// True once [`World::finalize`] or [`World::finalize_shared`] ran.
    pub(crate) fn is_finalized(&self) -> bool {
        self.finalized.load(Ordering::Acquire)
    }

    /// Test support, not part of the API: makes only the first of finalize's two barriers
    /// (which a barrier_all no longer pairs with: their kinds differ), for tests of a PE that
    /// leaves between them. The world stays usable only for exiting.
    #[doc(hidden)]
    pub fn finalize_first_barrier_for_tests(&self) -> Result<()> {
        self.barrier_all_named("finalize")
    }

    /// The collective part of finalize: the two barriers (the monitor of peers goes on until
    /// the world is dropped; after the last barrier it only marks PEs gone).
    fn finalize_collective(&self) -> Result<()> {
        // The last barrier's partners' control heaps, mapped while every PE is still here
        // (lazy mapping: a PE that passed the last barrier may leave, and with it the way to
        // map it).
        self.map_sync_partners();
        // First barrier: every PE is done with its operations (and still watched: a PE that
        // dies before it is reported).
        let r = self.barrier_all_named("finalize");
        // Last barrier: from here on a peer that finished it may exit and close its
        // connections at any time, which is no failure, so reports only mark PEs gone. The
        // watching goes on: a peer that left without making its stores of this barrier (it
        // exited or died between the two) is found when this PE waits on it, instead of
        // waiting out the timeout.
        self.live.set_finalizing();
        let r2 = if r.is_ok() {
            self.sync_all_checked("finalize", None, true).map(drop)
        } else {
            Ok(())
        };
        self.finalized.store(true, Ordering::Release);
        r.and(r2)
    }

    /// Validates `pe` and returns its index on this host.
    #[inline]
    pub(crate) fn local_index(&self, call: &'static str, pe: usize) -> Result<usize> {
        match self.node.local_of.get(pe) {
            Some(Some(l)) => Ok(*l),
            Some(None) => Err(not_local(call, pe)),
            None => Err(self.bad_pe(call, pe)),
        }
    }

    #[cold]
    pub(crate) fn bad_pe(&self, call: &'static str, pe: usize) -> Error {
        Error::invalid(
            call,
            format!(
                "PE {pe} is out of range: the job has {} PEs (0..{})",
                self.n, self.n
            ),
        )
    }

    /// Translates my symmetric `[addr, addr+len)` (heap or registered region) to PE `pe`'s
    /// copy, checking both; an error if that copy is not reachable by load/store.
    #[inline]
    pub(crate) fn remote(
        &self,
        call: &'static str,
        addr: usize,
        len: usize,
        pe: usize,
    ) -> Result<usize> {
        match self.target(call, addr, len, pe)? {
            Target::Local(a) => Ok(a),
            Target::Remote { .. } => Err(not_local(call, pe)),
        }
    }

    /// Rejects a `what` address `p` that is not `size`-byte aligned.
    #[inline(always)]
    pub(crate) fn check_aligned<T>(
        call: &'static str,
        what: &'static str,
        p: *const T,
        size: usize,
    ) -> Result<()> {
        if (p as usize) % size != 0 {
            return Err(misaligned(call, what, p.cast(), size));
        }
        Ok(())
    }

    /// Validates `pe` as a target of one-sided calls (reachable by load/store or over TCP).
    #[inline]
    pub(crate) fn check_pe(&self, call: &'static str, pe: usize) -> Result<()> {
        match self.node.local_of.get(pe) {
            Some(Some(_)) => Ok(()),
            Some(None) if self.remotes.via(pe) != Via::Local => Ok(()),
            _ => self.local_index(call, pe).map(drop),
        }
    }

    /// Translates my symmetric `[addr, addr+len)` to PE `pe`'s copy, checking both: a
    /// load/store address for a PE of this node (or any reachable copy of a registered region,
    /// see `region`), a heap offset for a PE reached over TCP.
    #[inline(always)]
    pub(crate) fn target(
        &self,
        call: &'static str,
        addr: usize,
        len: usize,
        pe: usize,
    ) -> Result<Target> {
        let local = self.node.local_of.get(pe).copied().flatten();
        if let Some(l) = local {
            // The hot path: an allocation of the heap the range cache remembers (never a
            // region's address: the cache holds heap allocations only).
            if let Some(off) = self.heap.cached_offset(addr, len) {
                if self.heap.peer_mapped(l, off + len.max(1)) {
                    return Ok(Target::Local(self.heap.peer_addr(l, off)));
                }
            }
        }
        if self.regions.may_hold(addr) {
            if let Some(r) = self.region_target(call, addr, len, pe) {
                return r;
            }
        }
        self.heap_target(call, addr, len, pe, local)
    }

    /// [`target`](World::target) in the heap past the range cache (kept out of line: the
    /// cached path is the hot one): at `local` (PE `pe`'s local index) or, for a PE this one
    /// does not reach by load/store, over the remote transport.
    #[cold]
    fn heap_target(
        &self,
        call: &'static str,
        addr: usize,
        len: usize,
        pe: usize,
        local: Option<usize>,
    ) -> Result<Target> {
        if local.is_none() {
            self.check_pe(call, pe)?;
        }
        let off = self.heap.check_range(call, addr, len)?;
        Ok(match local {
            Some(l) => {
                // A local PE's slice is mapped here at this PE's first access to it (lazy).
                self.heap
                    .map_peer(call, l, off + len.max(1), Some(&self.live))?;
                Target::Local(self.heap.peer_addr(l, off))
            }
            None => Target::Remote { pe, off },
        })
    }

    fn net(&self, call: &'static str) -> Result<&Net> {
        self.remotes
            .tcp()
            .map(|t| &**t)
            .ok_or_else(|| Error::State {
                call,
                reason: "no TCP transport (every PE is on this node)".into(),
            })
    }

    /// The remote transport that serves PE `pe` (a PE of another host).
    #[cold]
    pub(crate) fn remote_xport(&self, call: &'static str, pe: usize) -> Result<RemoteRef<'_>> {
        self.remotes.get(call, pe)
    }

    /// Copies `n` bytes from local memory `src` to the checked target.
    #[inline]
    pub(crate) fn put_to(
        &self,
        call: &'static str,
        t: Target,
        src: *const u8,
        n: usize,
    ) -> Result<()> {
        match t {
            Target::Local(a) => self.xport.put(call, a, src, n),
            Target::Remote { pe, off } => {
                self.put_remote(call, Target::remote_addr(pe, off), src, n)
            }
        }
    }

    #[cold]
    fn put_remote(
        &self,
        call: &'static str,
        at: RemoteAddr,
        src: *const u8,
        n: usize,
    ) -> Result<()> {
        self.remote_xport(call, at.pe)?.put(call, at, src, n)
    }

    /// Copies `n` bytes from the checked target into local memory `dst`.
    #[inline]
    pub(crate) fn get_from(
        &self,
        call: &'static str,
        dst: *mut u8,
        t: Target,
        n: usize,
    ) -> Result<()> {
        match t {
            Target::Local(a) => self.xport.get(call, dst, a, n),
            Target::Remote { pe, off } => {
                self.get_remote(call, dst, Target::remote_addr(pe, off), n)
            }
        }
    }

    /// [`get_from`](World::get_from) for several `(dst, target, bytes)`, with the round trips
    /// of those that go over TCP overlapped ([`Net::get_batch`]): a collective that pulls a
    /// block from each of n − 1 remote members waits about one round trip, not n − 1.
    pub(crate) fn get_batched(
        &self,
        call: &'static str,
        gets: &[(*mut u8, Target, usize)],
    ) -> Result<()> {
        let mut tcp = Vec::new();
        for &(dst, t, n) in gets {
            match t {
                Target::Remote { pe, off } if n > 0 && self.remotes.via(pe) == Via::Tcp => {
                    tcp.push(crate::transport::tcp::BatchGet {
                        dst,
                        at: Target::remote_addr(pe, off),
                        n,
                    });
                }
                _ => self.get_from(call, dst, t, n)?,
            }
        }
        match tcp.len() {
            0 => Ok(()),
            1 => self.net(call)?.get(call, tcp[0].dst, tcp[0].at, tcp[0].n),
            _ => self.net(call)?.get_batch(call, &tcp),
        }
    }

    #[cold]
    fn get_remote(&self, call: &'static str, dst: *mut u8, at: RemoteAddr, n: usize) -> Result<()> {
        self.remote_xport(call, at.pe)?.get(call, dst, at, n)
    }

    /// Applies `a` to the checked, aligned word; returns the old value.
    #[inline(always)]
    pub(crate) fn amo_at(&self, call: &'static str, t: Target, a: Amo) -> Result<u64> {
        match t {
            Target::Local(addr) => self.xport.amo(call, addr, a),
            Target::Remote { pe, off } => {
                self.amo_remote(call, pe, off, a.op, a.size, a.value, a.cond, false)
            }
        }
    }

    /// [`amo_at`](World::amo_at) for a caller that does not read the old value: a remote
    /// transport may post it (complete at the next quiet, ordered after earlier operations
    /// to the same PE).
    #[inline(always)]
    pub(crate) fn amo_nf_at(&self, call: &'static str, t: Target, a: Amo) -> Result<()> {
        match t {
            Target::Local(addr) => self.xport.amo(call, addr, a).map(drop),
            Target::Remote { pe, off } => self
                .amo_remote(call, pe, off, a.op, a.size, a.value, a.cond, true)
                .map(drop),
        }
    }

    /// The remote arm of [`amo_at`](World::amo_at) and, with `post` (the old value unread, 0
    /// returned), of [`amo_nf_at`](World::amo_nf_at); out of line. It takes the operand's
    /// fields as scalars: with an `Amo` argument the compiler built the operand block in memory
    /// on every call, the shared-memory path's included.
    #[cold]
    #[inline(never)]
    #[allow(clippy::too_many_arguments)]
    fn amo_remote(
        &self,
        call: &'static str,
        pe: usize,
        off: usize,
        op: AmoOp,
        size: usize,
        value: u64,
        cond: u64,
        post: bool,
    ) -> Result<u64> {
        let (at, a) = (
            Target::remote_addr(pe, off),
            Amo::new(op, size, value, cond),
        );
        let x = self.remote_xport(call, pe)?;
        if post {
            x.amo_nf(call, at, a).map(|()| 0)
        } else {
            x.amo(call, at, a)
        }
    }

    /// Stores `v` (release) into the runtime-internal word at `off` of PE `pe`'s control heap.
    pub(crate) fn ctrl_store(
        &self,
        call: &'static str,
        pe: usize,
        off: usize,
        v: u64,
    ) -> Result<()> {
        match self.node.local_of.get(pe) {
            Some(Some(l)) => {
                self.ctrl_mapped(call, *l)?;
                let a = self.ctrl.internal_addr(*l, off);
                // SAFETY: runtime-internal control words are aligned u64s inside every local
                // PE's first control-heap chunk, mapped (above) for the World's lifetime.
                unsafe { u64::store(a, v, Ordering::Release) };
                // Its napping barrier wait sleeps on its bell (`crate::wait::SharedBell`).
                SharedBell::at(self.ctrl.internal_addr(*l, BELL)).ring();
                Ok(())
            }
            Some(None) => {
                let at = RemoteAddr::ctrl(pe, off);
                self.remote_xport(call, pe)?.store(call, at, v)
            }
            None => Err(self.bad_pe(call, pe)),
        }
    }

    /// Maps local PE `l`'s control heap here if it is not yet (lazy mapping; the control heap
    /// is one chunk, its internal area).
    #[inline(always)]
    pub(crate) fn ctrl_mapped(&self, call: &'static str, l: usize) -> Result<()> {
        // `map_peer` checks the mapped length inline first (one load when it is mapped).
        self.ctrl
            .map_peer(call, l, self.ctrl.internal(), Some(&self.live))
    }

    /// Reads (acquire) the runtime-internal word at `off` of PE `pe`'s control heap.
    pub(crate) fn ctrl_load(&self, call: &'static str, pe: usize, off: usize) -> Result<u64> {
        match self.node.local_of.get(pe) {
            Some(Some(l)) => {
                self.ctrl_mapped(call, *l)?;
                let a = self.ctrl.internal_addr(*l, off);
                // SAFETY: as in `ctrl_store`.
                Ok(unsafe { u64::load(a, Ordering::Acquire) })
            }
            Some(None) => {
                let at = RemoteAddr::ctrl(pe, off);
                self.remote_xport(call, pe)?.amo(call, at, Amo::fetch(8))
            }
            None => Err(self.bad_pe(call, pe)),
        }
    }

    /// Completes every operation this PE issued, on every transport.
    #[inline]
    pub(crate) fn quiet_all(&self, call: &'static str) -> Result<()> {
        self.xport.quiet(call)?;
        self.quiet_net(call)
    }

    /// Completes what was sent through the remote transports (nothing without remote PEs):
    /// before the barrier of a heap call, so that no put lands in memory the target frees or
    /// zeroes afterwards.
    #[inline]
    pub(crate) fn quiet_net(&self, call: &'static str) -> Result<()> {
        self.remotes.quiet(call)
    }
}

/// Where PE `pe`'s copy of a symmetric range is.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Target {
    /// Reachable by load/store (or the GPU copy engine) at this address.
    Local(usize),
    /// On a PE of another host (reached by a remote transport), at this offset of its user
    /// heap, or, with [`Target::REGION`] set, at this [`HeapId::Region`] offset of its
    /// symmetric regions ([`Target::remote_addr`] tells them apart). (Two words, not a
    /// `RemoteAddr`: the enum is moved through every RMA and atomic, and the padding of a
    /// `RemoteAddr` made those moves partial stack copies that stall store forwarding: CPU
    /// atomics went from 14 to 22 ns.)
    Remote { pe: usize, off: usize },
}

impl Target {
    /// The bit of a [`Target::Remote`] offset that marks a symmetric region's offset (heap
    /// offsets never reach it).
    pub(crate) const REGION: usize = 1 << 63;

    /// Offset `off` of PE `pe`'s copy of the region registered `index`-th.
    pub(crate) fn region(pe: usize, index: usize, off: usize) -> Target {
        Target::Remote {
            pe,
            off: Target::REGION | RemoteAddr::region(pe, index, off).off,
        }
    }

    /// The transports' address of a [`Target::Remote`].
    #[inline]
    pub(crate) fn remote_addr(pe: usize, off: usize) -> RemoteAddr {
        if off & Target::REGION == 0 {
            RemoteAddr::user(pe, off)
        } else {
            RemoteAddr {
                pe,
                heap: HeapId::Region,
                off: off & !Target::REGION,
            }
        }
    }

    /// The target `d` bytes further.
    #[inline]
    pub(crate) fn offset(self, d: usize) -> Target {
        match self {
            Target::Local(a) => Target::Local(a + d),
            Target::Remote { pe, off } => Target::Remote { pe, off: off + d },
        }
    }
}

#[cold]
fn not_local(call: &'static str, pe: usize) -> Error {
    Error::Unsupported {
        call,
        reason: format!("PE {pe} is on another node: this call needs a PE reachable by load/store"),
    }
}

#[cold]
fn misaligned(call: &'static str, what: &str, p: *const u8, size: usize) -> Error {
    Error::invalid(call, format!("{what} {p:p} is not {size}-byte aligned"))
}

fn poisoned(call: &'static str) -> Error {
    Error::State {
        call,
        reason: "a lock is poisoned (another thread panicked inside rshmem)".into(),
    }
}

/// Picks this PE's GPU (or none) and makes sure every PE agrees on the backend; also returns
/// how many PEs run on this host.
fn choose_gpu(
    boot: &dyn Bootstrap,
    cfg: &Config,
    node: &Node,
) -> Result<(Option<Arc<Gpu>>, usize)> {
    let call = "init";
    let (host_rank, host_pes) = crate::node::host_place(boot, cfg, node)?;
    let count = match cfg.backend {
        BackendChoice::Cpu => 0,
        _ => crate::cuda::device_count(host_pes),
    };
    let want_gpu = match cfg.backend {
        BackendChoice::Cpu => false,
        BackendChoice::Auto => count > 0,
        BackendChoice::Gpu => {
            if count == 0 {
                return Err(Error::Unsupported {
                    call,
                    reason: if crate::cuda::driver_present() {
                        "RSHMEM_BACKEND=gpu but no CUDA device is visible".into()
                    } else {
                        "RSHMEM_BACKEND=gpu but the CUDA driver (libcuda) is not installed".into()
                    },
                });
            }
            true
        }
    };
    let votes = boot.allgather(&[want_gpu as u8])?;
    let gpus: Vec<usize> = (0..votes.len())
        .filter(|&p| votes[p].first() == Some(&1))
        .collect();
    if !gpus.is_empty() && gpus.len() != votes.len() {
        let cpus: Vec<String> = (0..votes.len())
            .filter(|p| !gpus.contains(p))
            .map(|p| p.to_string())
            .collect();
        return Err(Error::Unsupported {
            call,
            reason: format!(
                "PEs disagree on the backend: PE(s) {} found no usable GPU while others use GPUs; set RSHMEM_BACKEND=cpu on all PEs or give every PE a GPU",
                cpus.join(", ")
            ),
        });
    }
    if !want_gpu {
        return Ok((None, host_pes));
    }
    let ordinal = cfg.device.unwrap_or(host_rank % count);
    if ordinal >= count {
        return Err(Error::invalid(
            call,
            format!("RSHMEM_DEVICE={ordinal} but only {count} CUDA device(s) are visible"),
        ));
    }
    Gpu::open(ordinal).map(|g| (Some(g), host_pes))
}

/// How long a world dropped without finalize keeps its local connections (and its warning)
/// before the peers see it gone, unless the process exits first.
const LINGER: Duration = Duration::from_millis(300);

static DROP_WARNED: AtomicBool = AtomicBool::new(false);
static DROP_PE: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

/// Prints the "dropped without finalize" warning once, if the `rshmem::init` target logs
/// warnings (written directly, in the logger's format: at exit the subscriber's thread-local
/// buffers may already be gone).
fn print_dropped_warning() {
    if DROP_WARNED.swap(true, Ordering::AcqRel) {
        return;
    }
    let pe = DROP_PE.load(Ordering::Relaxed);
    crate::say!("rshmem PE {pe} WARN rshmem::init: World dropped without finalize; peers will see this PE as gone");
}

extern "C" fn dropped_warning_at_exit() {
    print_dropped_warning();
}

/// Arranges for the warning of a world dropped without finalize to be printed at the
/// process's exit or after [`LINGER`], whichever comes first.
fn dropped_warning_later(me: usize) {
    if !tracing::event_enabled!(target: "rshmem::init", tracing::Level::WARN) {
        return;
    }
    DROP_PE.store(me, Ordering::Relaxed);
    DROP_WARNED.store(false, Ordering::Release);
    static AT_EXIT: std::sync::Once = std::sync::Once::new();
    AT_EXIT.call_once(|| {
        // SAFETY: registers a plain extern "C" function that takes nothing and only writes to
        // stderr; atexit has no other effect.
        unsafe { libc::atexit(dropped_warning_at_exit) };
    });
    let _ = std::thread::Builder::new()
        .name("rshmem-linger".into())
        .spawn(|| {
            std::thread::sleep(LINGER);
            print_dropped_warning();
        });
}

impl Drop for World {
    fn drop(&mut self) {
        if !self.finalized.load(Ordering::Acquire) {
            // Usually `main` returning an error: the error is printed after this drop. So the
            // warning waits for the process's exit (or LINGER) and the local peers see this PE
            // leave only then, and the real error comes first.
            dropped_warning_later(self.me);
            self.node.close_links_later(LINGER);
        }
        self.node.stop_monitor();
        // A peer found lost while the transports shut down is still recorded, but no longer
        // announced in the control heap, which is unmapped after them.
        self.live.set_notice(0);
        self.live.clear_on_failure();
        if let Some(g) = &self.dev.gpu {
            crate::device::units::retire(g);
        }
        ACTIVE.store(false, Ordering::Release);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A region's remote target keeps its index and offset through `offset` and comes out as a
    /// `HeapId::Region` address; a heap offset stays a user-heap address.
    #[test]
    fn remote_targets_tell_regions_from_the_heap() {
        let t = Target::region(3, 2, 0x100).offset(8);
        let Target::Remote { pe, off } = t else {
            panic!("a region target on another host must be remote: {t:?}")
        };
        let at = Target::remote_addr(pe, off);
        assert_eq!(at, RemoteAddr::region(3, 2, 0x108));
        assert_eq!(at.off >> crate::transport::REGION_SHIFT, 2);
        assert_eq!(
            Target::remote_addr(1, 0x20_0000),
            RemoteAddr::user(1, 0x20_0000)
        );
        let Target::Remote { pe, off } = Target::region(0, 0, 0) else {
            unreachable!()
        };
        assert_eq!(Target::remote_addr(pe, off).heap, HeapId::Region);
    }

    fn err(b: Builder) -> String {
        let mut b = b;
        match b.explicit_job() {
            Err(e) => e.to_string(),
            Ok(j) => panic!("accepted: {:?}", j.map(|(r, n, _)| (r, n))),
        }
    }

    fn id() -> rshmem_bootstrap::UniqueId {
        rshmem_bootstrap::UniqueId::with_secret("127.0.0.1:4000", [7; 16]).expect("valid id")
    }

    #[test]
    fn builder_settings_that_contradict_are_errors_naming_them() {
        assert!(err(Builder::new().rank(0)).contains("size is not"));
        assert!(err(Builder::new().size(2)).contains("rank is not"));
        assert!(
            err(Builder::new().rank(2).size(2).unique_id(id())).contains("rank 2 is out of range")
        );
        assert!(err(Builder::new().rank(0).size(0)).contains("size is 0"));
        assert!(err(Builder::new().rank(1).size(2)).contains("needs a rendezvous"));
        assert!(err(Builder::new().unique_id(id())).contains("without rank and size"));
        assert!(err(Builder::new()
            .rank(0)
            .size(2)
            .unique_id(id())
            .rendezvous("127.0.0.1:4000", [7; 16]))
        .contains("one way only"));
        assert!(err(Builder::new()
            .rank(0)
            .size(2)
            .rendezvous("no port", [7; 16]))
        .contains("rendezvous"));
    }

    #[test]
    fn builder_explicit_job_is_taken() {
        let mut b = Builder::new()
            .rank(1)
            .size(3)
            .rendezvous("127.0.0.1:4000", [7; 16]);
        let (r, n, uid) = b.explicit_job().expect("valid").expect("explicit");
        assert_eq!((r, n), (1, 3));
        assert_eq!(uid.expect("id").addr(), "127.0.0.1:4000");
        let mut b = Builder::new().rank(0).size(1);
        assert!(matches!(b.explicit_job(), Ok(Some((0, 1, None)))));
        assert!(matches!(Builder::new().explicit_job(), Ok(None)));
    }

    #[test]
    fn builder_device_with_cpu_backend_is_an_error() {
        let e = Builder::new()
            .backend(BackendChoice::Cpu)
            .device(0)
            .init()
            .expect_err("device with the cpu backend");
        let s = e.to_string();
        assert!(
            s.contains("Builder::device") && s.contains("Builder::backend"),
            "{s}"
        );
    }
}
