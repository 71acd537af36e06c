//! Init and finalize: the process-wide runtime state ([`World`]) and its [`Builder`].

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use rshmem_bootstrap::Bootstrap;

use crate::config::Config;
use crate::error::{Error, Result};
use crate::heap::Heap;
use crate::node::{host_identity, Liveness, Node};
use crate::wait::WaitPolicy;

static ACTIVE: AtomicBool = AtomicBool::new(false);

/// Configures and starts the runtime. Settings left unset come from the environment
/// (see [`crate::config::ENV_VARS`]).
#[derive(Debug, Default)]
pub struct Builder {
    timeout: Option<Option<Duration>>,
    heap_limit: Option<usize>,
    heap_initial: Option<usize>,
    debug_symmetry: Option<bool>,
}

impl Builder {
    /// A builder that takes every setting from the environment.
    pub fn new() -> Self {
        Self::default()
    }

    /// Timeout of every blocking wait (`None` waits forever). Overrides `RSHMEM_TIMEOUT`.
    pub fn timeout(mut self, t: Option<Duration>) -> Self {
        self.timeout = Some(t);
        self
    }

    /// Most symmetric memory one PE may use. Overrides `RSHMEM_HEAP_LIMIT`.
    pub fn heap_limit(mut self, bytes: usize) -> Self {
        self.heap_limit = Some(bytes);
        self
    }

    /// Size of the first heap chunk. Overrides `RSHMEM_HEAP_INITIAL`.
    pub fn heap_initial(mut self, bytes: usize) -> Self {
        self.heap_initial = Some(bytes);
        self
    }

    /// Check that allocation calls match across PEs. Overrides `RSHMEM_DEBUG_SYMMETRY`.
    pub fn debug_symmetry(mut self, on: bool) -> Self {
        self.debug_symmetry = Some(on);
        self
    }

    /// **Collective.** Starts the runtime: reads the launcher's variables, meets the other PEs,
    /// reserves and maps the symmetric heap. Every PE of the job must call it.
    pub fn init(self) -> Result<World> {
        let mut cfg = Config::from_env()?;
        if let Some(t) = self.timeout {
            cfg.timeout = t;
        }
        if let Some(v) = self.heap_limit {
            cfg.heap_limit = v;
        }
        if let Some(v) = self.heap_initial {
            cfg.heap_initial = v;
        }
        if let Some(v) = self.debug_symmetry {
            cfg.debug_symmetry = v;
        }
        let (_info, boot) = rshmem_bootstrap::from_env(cfg.timeout)?;
        World::start(cfg, boot)
    }
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
    pub(crate) boot: Box<dyn Bootstrap>,
    pub(crate) node: Node,
    pub(crate) heap: Heap,
    pub(crate) live: Arc<Liveness>,
    pub(crate) wait: WaitPolicy,
    pub(crate) cfg: Config,
    pub(crate) barrier_epoch: AtomicU64,
    pub(crate) coll_seq: AtomicU64,
    finalized: AtomicBool,
    init_time: Duration,
}

impl std::fmt::Debug for World {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("World")
            .field("my_pe", &self.me)
            .field("n_pes", &self.n)
            .field("node", &self.node)
            .field("heap", &self.heap)
            .finish()
    }
}

impl World {
    fn start(cfg: Config, boot: Box<dyn Bootstrap>) -> Result<World> {
        let t0 = Instant::now();
        if ACTIVE.swap(true, Ordering::AcqRel) {
            return Err(Error::State {
                call: "init",
                reason: "rshmem is already initialized in this process (call finalize first)".into(),
            });
        }
        let r = Self::start_inner(cfg, boot, t0);
        if r.is_err() {
            ACTIVE.store(false, Ordering::Release);
        }
        r
    }

    fn start_inner(cfg: Config, boot: Box<dyn Bootstrap>, t0: Instant) -> Result<World> {
        let me = boot.rank();
        let n = boot.size();
        let _span = tracing::info_span!(target: "rshmem::init", "init", pe = me, n_pes = n).entered();
        let id = host_identity(cfg.node_id.as_deref());
        let mut node = Node::establish(boot.as_ref(), &id, cfg.timeout)?;
        if node.len() != n {
            let remote: Vec<String> = (0..n).filter(|&p| node.local_of[p].is_none()).map(|p| p.to_string()).collect();
            return Err(Error::Unsupported {
                call: "init",
                reason: format!(
                    "PE(s) {} run on another host; this build has only the shared-memory transport, so every PE must run on one host",
                    remote.join(", ")
                ),
            });
        }
        let live = Arc::new(Liveness::new());
        let heap = Heap::create(boot.as_ref(), &node, &live, cfg.heap_limit, cfg.heap_initial)?;
        node.start_monitor(live.clone())?;
        let wait = WaitPolicy::new(me, cfg.timeout, node.len());
        boot.barrier()?;
        tracing::debug!(target: "rshmem::init", elapsed = ?t0.elapsed(), "initialized");
        Ok(World {
            me,
            n,
            boot,
            node,
            heap,
            live,
            wait,
            cfg,
            barrier_epoch: AtomicU64::new(0),
            coll_seq: AtomicU64::new(0),
            finalized: AtomicBool::new(false),
            init_time: t0.elapsed(),
        })
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

    /// **Collective.** Completes all outstanding operations, waits for every PE, and releases
    /// the runtime (heap, sockets, threads). Like `shmem_finalize`. Symmetric addresses are
    /// invalid afterwards; the borrow checker enforces it for [`crate::SymBuf`]s.
    pub fn finalize(self) -> Result<()> {
        self.quiet();
        let r = self.barrier_all_named("finalize");
        self.live.set_finalizing();
        self.finalized.store(true, Ordering::Release);
        drop(self);
        r
    }

    /// Validates `pe` and returns its index on this host.
    #[inline]
    pub(crate) fn local_index(&self, call: &'static str, pe: usize) -> Result<usize> {
        match self.node.local_of.get(pe) {
            Some(Some(l)) => Ok(*l),
            Some(None) => Err(Error::Unsupported {
                call,
                reason: format!("PE {pe} is on another host and no remote transport is available"),
            }),
            None => Err(self.bad_pe(call, pe)),
        }
    }

    #[cold]
    pub(crate) fn bad_pe(&self, call: &'static str, pe: usize) -> Error {
        Error::invalid(call, format!("PE {pe} is out of range: the job has {} PEs (0..{})", self.n, self.n))
    }

    /// Translates my symmetric `[addr, addr+len)` to PE `pe`'s copy, checking both.
    #[inline]
    pub(crate) fn remote(&self, call: &'static str, addr: usize, len: usize, pe: usize) -> Result<usize> {
        let local = self.local_index(call, pe)?;
        let off = self.heap.check_range(call, addr, len)?;
        Ok(self.heap.peer_addr(local, off))
    }
}

impl Drop for World {
    fn drop(&mut self) {
        if !self.finalized.load(Ordering::Acquire) {
            tracing::warn!(target: "rshmem::init", pe = self.me, "World dropped without finalize; peers will see this PE as gone");
        }
        self.node.stop_monitor();
        ACTIVE.store(false, Ordering::Release);
    }
}
