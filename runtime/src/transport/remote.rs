//! The remote transports of a PE, as one object ([`Remotes`]): which one serves each PE of
//! another host (TCP, verbs or UCX), the collective steps that set them up (open, announce,
//! connect, register heap growth), and the calls that walk all of them (`fence`, `quiet`,
//! `push`). Host calls and the proxy's device requests reach every remote PE through it.
//!
//! Every collective step here is taken by every PE or by none, decided from what all PEs
//! announced, so a PE that has no RDMA device (or was built without the `verbs` feature) still
//! takes part in the exchanges of a job where other pairs use verbs, with an empty payload.

use std::sync::{Arc, Mutex};

use rshmem_bootstrap::Bootstrap;

use super::select::{self, Announce, RemoteChoice, Via};
use super::tcp::{Net, Region};
use super::ucx;
#[cfg(feature = "verbs")]
use super::verbs;
use super::verbs::wire::{self, ConnInfo};
use super::{Caps, HeapId, RegionTargets, RemoteRef, TransportOps};
use crate::config::Config;
use crate::error::{Error, Result};
use crate::heap::Heap;
use crate::node::Liveness;

/// How this PE reaches every PE, and the remote transports it uses.
pub(crate) struct Remotes {
    /// The TCP transport, when some PE is reached through it. Declared first: its service
    /// threads stop before the other transports deregister memory.
    tcp: Option<Arc<Net>>,
    /// Per PE; empty when every PE shares this host (then every PE is [`Via::Local`]).
    via: Vec<Via>,
    /// Some pair of the job uses verbs: this PE takes part in the verbs exchanges.
    verbs_job: bool,
    /// Bytes of the user heap registered with verbs so far (equal on every PE).
    registered: Mutex<usize>,
    #[cfg(feature = "verbs")]
    verbs: Option<verbs::Verbs>,
    /// Some pair of the job uses UCX: this PE takes part in the UCX exchanges.
    ucx_job: bool,
    /// Bytes of the user heap mapped with UCX so far (equal on every PE).
    ucx_registered: Mutex<usize>,
    /// The UCX transport, when some PE is reached through it (shared with the proxy).
    ucx: Option<Arc<ucx::Ucx>>,
}

crate::debug_fields!(Remotes, |r| { via: r.via, verbs_job: r.verbs_job, ucx_job: r.ucx_job });

/// Opens the RDMA device this PE would use (a clean error, never a panic, when there is none).
#[cfg(feature = "verbs")]
fn open_device(cfg: &Config) -> Result<verbs::Device> {
    verbs::Device::open(cfg)
}

/// Without the `verbs` feature there is no device to open.
#[cfg(not(feature = "verbs"))]
fn open_device(_cfg: &Config) -> Result<std::convert::Infallible> {
    Err(Error::Unsupported {
        call: "init",
        reason: "RSHMEM_REMOTE_TRANSPORT=verbs but rshmem was built without the `verbs` cargo feature (build with --features verbs; it needs cmake and libclang-dev)".into(),
    })
}

/// What [`Remotes::connect`] brings the transports up with.
pub(crate) struct ConnectWith<'a> {
    /// The job's bootstrap (the exchanges are collective over all PEs).
    pub boot: &'a dyn Bootstrap,
    /// The run-time configuration.
    pub cfg: &'a Config,
    /// Who is still alive (the progress threads watch it).
    pub live: &'a Arc<Liveness>,
    /// The user heap, mapped for remote access.
    pub heap: &'a Arc<Heap>,
    /// The control heap, mapped for remote access.
    pub ctrl: &'a Heap,
    /// Where atomics from UCX peers on a GPU heap are applied (None: host heap).
    pub gpu_mem: Option<Arc<crate::cuda::target::GpuMem>>,
    /// The registered symmetric regions' targets.
    pub regions: &'a Arc<RegionTargets>,
}

impl Remotes {
    /// No remote transport: every PE is reached through the heap's transport.
    fn none() -> Remotes {
        Remotes {
            tcp: None,
            via: Vec::new(),
            verbs_job: false,
            registered: Mutex::new(0),
            #[cfg(feature = "verbs")]
            verbs: None,
            ucx_job: false,
            ucx_registered: Mutex::new(0),
            ucx: None,
        }
    }

    /// **Collective over all PEs.** Decides how each PE is reached: every PE opens its RDMA
    /// device when verbs may be used and announces the result; the routes follow from all
    /// announcements ([`select::plan`]). With `RSHMEM_REMOTE_TRANSPORT=verbs`, a PE whose device
    /// did not open returns that error (after the exchange, so the others fail too instead of
    /// waiting for it); likewise with `ucx` when libucp cannot be loaded or initialised, or, on
    /// the GPU backend (`gpu`), when that UCX cannot move GPU memory (no `cuda_copy`: the error
    /// names the fix). With `auto` such a UCX is left out and the reason logged.
    pub(crate) fn plan(
        boot: &dyn Bootstrap,
        cfg: &Config,
        local_of: &[Option<usize>],
        gpu: bool,
    ) -> Result<Self> {
        let call = "init";
        let me = boot.rank();
        let local: Vec<bool> = local_of.iter().map(Option::is_some).collect();
        let mut r = Remotes::none();
        if local.iter().all(|l| *l) {
            return Ok(r);
        }
        let choice = cfg.remote_transport;
        let opened =
            matches!(choice, RemoteChoice::Auto | RemoteChoice::Verbs).then(|| open_device(cfg));
        if let Some(Err(e)) = &opened {
            tracing::debug!(target: "rshmem::verbs", "no verbs transport on PE {me}: {e}");
        }
        // Read once: `open_ucx` and the choice of where atomics are applied both need it.
        let rdma_dev = rdma_device();
        let ucx = open_ucx(cfg, me, boot.size(), choice, gpu, rdma_dev);
        let (ucx_ok, ucx_rdma, ucx_peer) = match &ucx {
            Some(Ok((u, rdma))) => (
                true,
                *rdma,
                select::ucx_peer_errors(cfg.ucx_error_mode, u.version(), *rdma),
            ),
            _ => (false, false, false),
        };
        if let Some(Err(e)) = &ucx {
            if gpu && choice == RemoteChoice::Auto {
                tracing::info!(target: "rshmem::ucx", "RSHMEM_REMOTE_TRANSPORT=auto: PE {me} does not use UCX for PEs on other hosts (rshmem's TCP transport serves them): {e}");
            } else {
                tracing::debug!(target: "rshmem::ucx", "no UCX transport on PE {me}: {e}");
            }
        }
        let mine = Announce {
            choice,
            verbs: matches!(opened, Some(Ok(_))),
            ucx: ucx_ok,
            ucx_rdma,
            ucx_peer,
            ucx_mode_set: cfg.ucx_error_mode != select::UcxErrorMode::Auto,
        };
        let all: Vec<Announce> = boot
            .allgather(&mine.encode())?
            .iter()
            .enumerate()
            .map(|(p, b)| {
                Announce::decode(b).ok_or_else(|| {
                    Error::invalid(call, format!("PE {p} announced its remote transport as {b:?}: mixed rshmem versions in one job?"))
                })
            })
            .collect::<Result<_>>()?;
        if choice == RemoteChoice::Verbs {
            if let Some(Err(e)) = opened {
                return Err(e);
            }
        }
        let ucx = match ucx {
            Some(Err(e)) if choice == RemoteChoice::Ucx => {
                return Err(Error::Unsupported {
                    call,
                    reason: if gpu {
                        format!("RSHMEM_REMOTE_TRANSPORT=ucx with the GPU backend, but UCX is unusable: {e}")
                    } else {
                        format!("RSHMEM_REMOTE_TRANSPORT=ucx but UCX is unavailable: {e}")
                    },
                })
            }
            Some(Ok((u, _))) => Some(u),
            _ => None,
        };
        r.via =
            select::plan(me, &local, &all).map_err(|e| Error::Unsupported { call, reason: e.0 })?;
        r.verbs_job = select::verbs_in_job(&all);
        r.ucx_job = select::ucx_in_job(&all);
        if r.via.contains(&Via::Ucx) {
            let peer = select::ucx_peer_errors_in_job(&all)
                .map_err(|e| Error::Unsupported { call, reason: e.0 })?;
            if let Some(u) = &ucx {
                let user_rndv = std::env::var_os("UCX_RNDV_THRESH").is_some();
                if let Some(why) = select::ucx_emulated_rma(u.version(), ucx_rdma, peer, user_rndv)
                {
                    let (a, b, c) = u.version();
                    if !cfg.ucx_emulated_rma {
                        return Err(Error::Unsupported {
                            call,
                            reason: format!(
                                "UCX {a}.{b}.{c} would carry puts and gets to PEs on other hosts by its software emulation over TCP ({why}), and that emulation aborts a PE inside UCX when a peer dies with puts to it in flight, instead of reporting the peer lost; use RSHMEM_REMOTE_TRANSPORT=tcp (or auto), a UCX of 1.20 or newer, or an RDMA transport, or set RSHMEM_UCX_EMULATED_RMA=1 to accept it"
                            ),
                        });
                    }
                    tracing::warn!(target: "rshmem::ucx", "UCX {a}.{b}.{c} emulates RMA over TCP ({why}); RSHMEM_UCX_EMULATED_RMA=1 accepts it: a peer's death during puts may abort this PE inside UCX");
                }
                u.set_peer_errors(peer);
                u.set_target_atomics(select::ucx_target_atomics(
                    gpu,
                    cfg.ucx_target_atomics,
                    rdma_dev,
                ));
            }
            r.ucx = ucx;
        }
        #[cfg(feature = "verbs")]
        if let Some(Ok(dev)) = opened {
            if r.via.contains(&Via::Verbs) {
                r.verbs = Some(verbs::Verbs::new(dev, me, &r.via, cfg)?);
            }
        }
        tracing::debug!(target: "rshmem::init", pe = me, ?choice, verbs_job = r.verbs_job, "remote transports planned");
        Ok(r)
    }

    /// How PE `pe` is reached (`Transport` for PEs of this host and out-of-range PEs).
    #[inline]
    pub(crate) fn via(&self, pe: usize) -> Via {
        self.via.get(pe).copied().unwrap_or(Via::Local)
    }

    /// True if some PE is reached through `v`.
    pub(crate) fn uses(&self, v: Via) -> bool {
        self.via.contains(&v)
    }

    /// The PEs the TCP transport must connect to, in the form `Net::establish` takes: PEs not
    /// served by TCP look like PEs of this host to it.
    fn tcp_mask(&self, local_of: &[Option<usize>]) -> Vec<Option<usize>> {
        local_of
            .iter()
            .enumerate()
            .map(|(p, l)| match self.via(p) {
                Via::Tcp => None,
                _ => Some(l.unwrap_or(usize::MAX)),
            })
            .collect()
    }

    /// **Collective over all PEs** (when some pair uses TCP). Connects the TCP transport to the
    /// PEs it serves: listens on `addr` (see [`super::tcp::pick_address`]), serves `regions`.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn connect_tcp(
        &mut self,
        boot: &dyn Bootstrap,
        local_of: &[Option<usize>],
        token: &[u8],
        addr: std::net::IpAddr,
        timeout: Option<std::time::Duration>,
        live: Arc<Liveness>,
        regions: [Region; 3],
    ) -> Result<()> {
        let mask = self.tcp_mask(local_of);
        let net = Net::establish(boot, &mask, token, addr, timeout, live, regions)?;
        self.tcp = Some(Arc::new(net));
        Ok(())
    }

    /// The TCP transport, for what only it offers (batched gets, request counters, its
    /// busy-poll time); None when no PE is reached through it.
    pub(crate) fn tcp(&self) -> Option<&Arc<Net>> {
        self.tcp.as_ref()
    }

    /// True if some PE is reached through a remote transport (one that was set up).
    pub(crate) fn any(&self) -> bool {
        #[cfg(feature = "verbs")]
        if self.verbs.is_some() {
            return true;
        }
        self.tcp.is_some() || self.ucx.is_some()
    }

    /// The remote transport serving PE `pe`: an error naming `call` when none does (a PE of
    /// this host, an out-of-range PE, or a transport that was not set up).
    #[inline]
    pub(crate) fn get(&self, call: &'static str, pe: usize) -> Result<RemoteRef<'_>> {
        if let (Via::Tcp, Some(t)) = (self.via(pe), &self.tcp) {
            return Ok(RemoteRef::Tcp(t));
        }
        #[cfg(feature = "verbs")]
        if let (Via::Verbs, Some(v)) = (self.via(pe), &self.verbs) {
            return Ok(RemoteRef::Verbs(v));
        }
        if let (Via::Ucx, Some(u)) = (self.via(pe), &self.ucx) {
            return Ok(RemoteRef::Ucx(u.as_ref()));
        }
        Err(Error::State {
            call,
            reason: match self.via(pe) {
                Via::Local => format!(
                    "PE {pe} is not reached through a remote transport (it is this PE, a PE of \
                     this host, or out of range)"
                ),
                via => format!(
                    "PE {pe} is reached through {via:?}, which is not set up on this PE \
                     (no remote transport serves it)"
                ),
            },
        })
    }

    /// True if this PE takes part in the UCX exchanges (some pair of the job uses UCX).
    pub(crate) fn ucx_job(&self) -> bool {
        self.ucx_job
    }

    /// **Collective over all PEs** (when some pair uses verbs). Registers this PE's heaps,
    /// exchanges queue pair numbers, port addresses and memory keys, and brings every queue pair
    /// up. Every PE learns whether all succeeded.
    pub(crate) fn connect(&mut self, with: ConnectWith<'_>) -> Result<()> {
        let ConnectWith {
            boot,
            cfg,
            live,
            heap,
            ctrl,
            ..
        } = with;
        let _ = (cfg, live);
        if self.ucx_job {
            self.connect_ucx(&with)?;
        }
        if !self.verbs_job {
            return Ok(());
        }
        let call = "init";
        let n = boot.size();
        #[allow(unused_mut)]
        let mut mine: Result<Vec<u8>> = Ok(Vec::new());
        #[cfg(feature = "verbs")]
        if let Some(v) = &mut self.verbs {
            mine = v
                .register_heaps(call, heap, ctrl)
                .map(|keys| v.conn_info(keys).encode());
        }
        let _ = (&heap, ctrl);
        // A PE whose registration failed sends one byte: the others stop too.
        let payload = match &mine {
            Ok(b) => b.clone(),
            Err(_) => vec![0],
        };
        let all = boot.allgather(&payload)?;
        let mut failed = Vec::new();
        let mut infos = Vec::with_capacity(n);
        for (p, b) in all.iter().enumerate() {
            if b.len() == 1 {
                failed.push(p.to_string());
                infos.push(None);
                continue;
            }
            infos.push(ConnInfo::decode(b, n).map_err(|e| {
                Error::invalid(
                    call,
                    format!("PE {p} sent bad verbs connection details: {e}"),
                )
            })?);
        }
        let mine = mine?;
        let _ = mine;
        failed_on(
            call,
            &failed,
            "the verbs transport failed",
            " (see their errors)",
        )?;
        #[allow(unused_mut)]
        let mut up: Result<()> = Ok(());
        #[cfg(feature = "verbs")]
        if let Some(v) = &mut self.verbs {
            up = v.connect(call, &infos, cfg, live.clone());
        }
        let _ = infos;
        agree_up(boot, call, up, "verbs queue pairs could not be brought up")?;
        *self.registered.lock().map_err(|_| poisoned(call))? = heap.mapped();
        Ok(())
    }

    /// **Collective over all PEs** (called by every PE after the heap grew in an allocation):
    /// registers the new part of the user heap with verbs and exchanges its key.
    pub(crate) fn heap_grown(
        &self,
        call: &'static str,
        boot: &dyn Bootstrap,
        heap: &Heap,
    ) -> Result<()> {
        if self.ucx_job {
            self.ucx_heap_grown(call, boot, heap)?;
        }
        if !self.verbs_job {
            return Ok(());
        }
        let mut reg = self.registered.lock().map_err(|_| poisoned(call))?;
        let mapped = heap.mapped();
        if mapped <= *reg {
            return Ok(());
        }
        let chunk = user_chunk(heap, *reg, mapped);
        let _ = &chunk;
        // [status] + keys: 1 = registered (keys follow), 0 = failed, empty = no verbs here.
        #[allow(unused_mut)]
        let mut mine: Result<Vec<u8>> = Ok(Vec::new());
        #[cfg(feature = "verbs")]
        if let Some(v) = &self.verbs {
            mine = v.register_chunk(call, &chunk).map(|k| {
                let mut b = vec![1];
                wire::encode_keys(&[k], &mut b);
                b
            });
        }
        let payload = match &mine {
            Ok(b) => b.clone(),
            Err(_) => vec![0],
        };
        let all = boot.allgather(&payload)?;
        mine?;
        let mut failed = Vec::new();
        for (p, b) in all.iter().enumerate() {
            match b.split_first() {
                None => {}
                Some((1, keys)) => {
                    let keys = wire::decode_keys(keys).map_err(|e| {
                        Error::invalid(call, format!("PE {p} sent bad verbs memory keys: {e}"))
                    })?;
                    #[cfg(feature = "verbs")]
                    if let (Via::Verbs, Some(v)) = (self.via(p), &self.verbs) {
                        v.add_keys(call, p, &keys)?;
                    }
                    let _ = keys;
                }
                Some(_) => failed.push(p.to_string()),
            }
        }
        failed_on(
            call,
            &failed,
            "registering the grown heap with verbs failed",
            "",
        )?;
        *reg = mapped;
        Ok(())
    }

    /// What this PE's waits call between checks: progress of the UCX worker (its peers'
    /// RMA and atomics over TCP are applied by it); None without UCX.
    pub(crate) fn progress(&self) -> Option<Arc<dyn crate::wait::Progress>> {
        let u = self.ucx.clone()?;
        Some(u)
    }

    /// The UCX transport, for what only it offers (its doorbell); None when no PE is reached
    /// through it.
    pub(crate) fn ucx(&self) -> Option<&Arc<ucx::Ucx>> {
        self.ucx.as_ref()
    }

    /// Every remote transport that was set up, for the calls that walk all of them.
    fn each(&self) -> impl Iterator<Item = RemoteRef<'_>> {
        let tcp = self.tcp.as_deref().map(RemoteRef::Tcp);
        let ucx = self.ucx.as_deref().map(RemoteRef::Ucx);
        #[cfg(feature = "verbs")]
        let verbs = self.verbs.as_ref().map(RemoteRef::Verbs);
        #[cfg(not(feature = "verbs"))]
        let verbs = None;
        tcp.into_iter().chain(ucx).chain(verbs)
    }

    /// Orders this PE's operations per target on the transports that do not deliver in order
    /// by themselves (those without [`Caps::ORDERED`]: UCX).
    pub(crate) fn fence(&self, call: &'static str) -> Result<()> {
        for t in self.each() {
            if !t.caps().contains(Caps::ORDERED) {
                t.fence(call)?;
            }
        }
        Ok(())
    }

    /// Completes every operation issued through every remote transport.
    pub(crate) fn quiet(&self, call: &'static str) -> Result<()> {
        for t in self.each() {
            t.quiet(call)?;
        }
        Ok(())
    }

    /// Sends what the transports hold back to batch small requests
    /// ([`TransportOps::put_batched`]).
    pub(crate) fn push(&self, call: &'static str) -> Result<()> {
        for t in self.each() {
            t.push(call)?;
        }
        Ok(())
    }
}

/// **Collective over all PEs**: every PE reports whether its part of a set-up step (`up`) came
/// up; this PE's own error comes first, else an `Unsupported` error naming the PEs where it did
/// not (`what … on PE(s) …`), so that every PE fails together instead of waiting on the others.
fn agree_up(boot: &dyn Bootstrap, call: &'static str, up: Result<()>, what: &str) -> Result<()> {
    let ok = boot.allgather(&[up.is_ok() as u8])?;
    up?;
    let down: Vec<String> = (0..ok.len())
        .filter(|&p| ok[p] != [1])
        .map(|p| p.to_string())
        .collect();
    if down.is_empty() {
        return Ok(());
    }
    Err(Error::Unsupported {
        call,
        reason: format!("{what} on PE(s) {}", down.join(", ")),
    })
}

fn poisoned(call: &'static str) -> Error {
    Error::State {
        call,
        reason: "a lock is poisoned (another thread panicked inside rshmem)".into(),
    }
}

/// Whether this machine has an RDMA device (`/sys/class/infiniband` lists one).
fn rdma_device() -> bool {
    std::fs::read_dir("/sys/class/infiniband").is_ok_and(|mut d| d.next().is_some())
}

/// Loads UCX and creates this PE's worker when the setting may use it: always for `ucx`; for
/// `auto` only on a machine with an RDMA device (`rdma_dev`: [`rdma_device`]), and the result
/// says whether UCX found an RDMA transport there. `None`: UCX not considered.
fn open_ucx(
    cfg: &Config,
    me: usize,
    n: usize,
    choice: RemoteChoice,
    gpu: bool,
    rdma_dev: bool,
) -> Option<std::result::Result<(Arc<ucx::Ucx>, bool), String>> {
    match choice {
        RemoteChoice::Ucx => {}
        RemoteChoice::Auto if rdma_dev => {}
        _ => return None,
    }
    Some((|| {
        let lib = ucx::ffi::lib(cfg.ucx_lib.as_deref())?;
        // Where atomics are applied is settled once the job agreed on peer-failure handling
        // (`Ucx::set_target_atomics` in `Remotes::plan`).
        let u = ucx::Ucx::new(lib, me, n, cfg.timeout)?;
        let resources = u.resources();
        if gpu {
            let (a, b, c) = lib.version;
            select::ucx_gpu_ready(
                &resources,
                std::env::var("UCX_TLS").ok().as_deref(),
                &format!("UCX {a}.{b}.{c} ({})", lib.path),
                ucx::ucp::cuda_module(lib),
            )?;
        }
        let rdma = resources.iter().any(|r| ucx::ucp::is_rdma(r));
        Ok((Arc::new(u), rdma))
    })())
}

impl Remotes {
    /// **Collective over all PEs** (when some pair uses UCX): maps the heaps with UCP, exchanges
    /// worker addresses and packed keys, creates the endpoints, starts serving atomics applied
    /// on this PE (on `gpu_mem` for a GPU heap) and the progress thread. Every PE learns
    /// whether all succeeded.
    fn connect_ucx(&mut self, with: &ConnectWith<'_>) -> Result<()> {
        let ConnectWith {
            boot,
            live,
            heap,
            ctrl,
            regions,
            ..
        } = *with;
        let gpu_mem = with.gpu_mem.clone();
        let call = "init";
        let mine: Result<Vec<u8>> = match &self.ucx {
            None => Ok(Vec::new()),
            Some(u) => (|| {
                let mut keys = Vec::new();
                for (h, id) in [(ctrl, HeapId::Ctrl), (heap, HeapId::User)] {
                    keys.push(u.register(
                        call,
                        &super::Chunk {
                            heap: id,
                            base: h.my_base(),
                            start: 0,
                            len: h.mapped(),
                            gpu: h.gpu().cloned(),
                        },
                    )?);
                }
                Ok(ucx::wire::Payload {
                    address: u.address(call)?,
                    keys,
                }
                .encode())
            })(),
        };
        let all = boot.allgather(&status_payload(&mine))?;
        let infos = decode_all(call, &all, "UCX connection details")?;
        mine?;
        let mut up: Result<()> = Ok(());
        if let Some(u) = &mut self.ucx {
            u.serve(ucx::amo::Served {
                ctrl: (
                    ctrl.my_base(),
                    ctrl.mapped().min(crate::heap::INTERNAL_SIZE),
                ),
                heap: heap.clone(),
                regions: regions.clone(),
                mem: match gpu_mem {
                    Some(g) => ucx::amo::TargetMem::Gpu(g),
                    None => ucx::amo::TargetMem::Host,
                },
            });
            let via = &self.via;
            up = (|| {
                let u = Arc::get_mut(u).ok_or_else(|| Error::State {
                    call,
                    reason: "the UCX transport is shared before it is connected".into(),
                })?;
                for (p, info) in infos.iter().enumerate() {
                    if via.get(p) != Some(&Via::Ucx) {
                        continue;
                    }
                    let Some(info) = info else {
                        return Err(Error::invalid(
                            call,
                            format!("PE {p} sent no UCX details but is routed to UCX"),
                        ));
                    };
                    u.connect(call, p, &info.address)?;
                    u.add_keys(call, p, &info.keys)?;
                }
                u.start_progress(live.clone())?;
                u.wire_up(call)
            })();
        }
        agree_up(boot, call, up, "UCX endpoints could not be created")?;
        *self.ucx_registered.lock().map_err(|_| poisoned(call))? = heap.mapped();
        Ok(())
    }

    /// **Collective over all PEs**: maps the new part of the user heap with UCP and exchanges
    /// its key.
    fn ucx_heap_grown(&self, call: &'static str, boot: &dyn Bootstrap, heap: &Heap) -> Result<()> {
        let mut reg = self.ucx_registered.lock().map_err(|_| poisoned(call))?;
        let mapped = heap.mapped();
        if mapped <= *reg {
            return Ok(());
        }
        let chunk = user_chunk(heap, *reg, mapped);
        self.ucx_share_chunk(call, boot, Some(&chunk), "UCX memory keys")?;
        *reg = mapped;
        Ok(())
    }

    /// **Collective over all PEs** (every PE registers its symmetric regions in the same
    /// order): maps this PE's copy of the symmetric region registered `index`-th (`range`:
    /// start and length; None when this PE registered no memory for it) with the remote
    /// transports that need it, and exchanges the keys. The TCP transport needs nothing: its
    /// targets resolve region offsets through [`RegionTargets`]. Verbs does not reach regions.
    pub(crate) fn region_registered(
        &self,
        call: &'static str,
        boot: &dyn Bootstrap,
        index: usize,
        range: Option<(usize, usize)>,
    ) -> Result<()> {
        if !self.ucx_job {
            return Ok(());
        }
        let first = index << super::REGION_SHIFT;
        let chunk = range.map(|(start, len)| super::Chunk {
            heap: HeapId::Region,
            base: start.wrapping_sub(first),
            start: first,
            len,
            gpu: None,
        });
        self.ucx_share_chunk(
            call,
            boot,
            chunk.as_ref(),
            "UCX memory keys of a symmetric region",
        )
    }

    /// **Collective over all PEs**: maps `chunk` (None: this PE has nothing to map this time)
    /// with UCP, allgathers every PE's key and unpacks those of the PEs served by UCX. Every PE
    /// learns whether all succeeded (`what` names the keys in the error).
    fn ucx_share_chunk(
        &self,
        call: &'static str,
        boot: &dyn Bootstrap,
        chunk: Option<&super::Chunk>,
        what: &str,
    ) -> Result<()> {
        let mine: Result<Vec<u8>> = match &self.ucx {
            None => Ok(Vec::new()),
            Some(u) => chunk.map(|c| u.register(call, c)).transpose().map(|k| {
                ucx::wire::Payload {
                    address: Vec::new(),
                    keys: k.into_iter().collect(),
                }
                .encode()
            }),
        };
        let all = boot.allgather(&status_payload(&mine))?;
        let infos = decode_all(call, &all, what)?;
        mine?;
        if let Some(u) = &self.ucx {
            for (p, info) in infos.iter().enumerate() {
                if let (Some(Via::Ucx), Some(info)) = (self.via.get(p), info) {
                    u.add_keys(call, p, &info.keys)?;
                }
            }
        }
        Ok(())
    }
}

/// Offsets `[start, end)` of the user heap, as a chunk to register.
fn user_chunk(heap: &Heap, start: usize, end: usize) -> super::Chunk {
    super::Chunk {
        heap: HeapId::User,
        base: heap.my_base(),
        start,
        len: end - start,
        gpu: heap.gpu().cloned(),
    }
}

/// A PE's payload in a UCX exchange: `[1] + payload` when it worked, `[1]` with nothing more
/// when this PE takes no part, `[0]` when it failed (the others then stop too).
fn status_payload(mine: &Result<Vec<u8>>) -> Vec<u8> {
    match mine {
        Ok(b) => {
            let mut v = vec![1];
            v.extend_from_slice(b);
            v
        }
        Err(_) => vec![0],
    }
}

/// Decodes every PE's [`status_payload`]; an error names the PEs that failed or sent garbage.
fn decode_all(
    call: &'static str,
    all: &[Vec<u8>],
    what: &str,
) -> Result<Vec<Option<ucx::wire::Payload>>> {
    let mut failed = Vec::new();
    let mut out = Vec::with_capacity(all.len());
    for (p, b) in all.iter().enumerate() {
        match b.split_first() {
            Some((1, [])) => out.push(None),
            Some((1, rest)) => out
                .push(Some(ucx::wire::Payload::decode(rest).map_err(|e| {
                    Error::invalid(call, format!("PE {p} sent bad {what}: {e}"))
                })?)),
            _ => {
                failed.push(p.to_string());
                out.push(None);
            }
        }
    }
    failed_on(
        call,
        &failed,
        "the UCX transport failed",
        " (see their errors)",
    )?;
    Ok(out)
}

/// `Unsupported`: "`what` on PE(s) `failed``then`", unless no PE failed.
fn failed_on(call: &'static str, failed: &[String], what: &str, then: &str) -> Result<()> {
    if failed.is_empty() {
        return Ok(());
    }
    Err(Error::Unsupported {
        call,
        reason: format!("{what} on PE(s) {}{then}", failed.join(", ")),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Remotes with these routes and no transport but `ucx`.
    fn routes_only(via: Vec<Via>, ucx: Option<Arc<ucx::Ucx>>) -> Remotes {
        Remotes {
            via,
            ucx,
            ..Remotes::none()
        }
    }

    /// A request to a PE goes to the transport that serves it (host calls and the proxy's
    /// device requests alike); a PE that no set-up transport serves is an error naming the PE
    /// and the route, never a panic.
    #[test]
    fn each_pe_goes_to_the_transport_that_serves_it() {
        let routes = vec![Via::Local, Via::Tcp, Via::Ucx, Via::Verbs];
        let r = routes_only(routes.clone(), None);
        assert!(!r.any());
        for pe in 0..6 {
            let e = r
                .get("put", pe)
                .err()
                .expect("no transport here")
                .to_string();
            assert!(e.contains("put") && e.contains(&format!("PE {pe} ")), "{e}");
        }
        let e = r.get("put", 3).err().expect("verbs").to_string();
        assert!(e.contains("Verbs, which is not set up"), "{e}");
        // Nothing to complete or order when no transport is set up.
        r.quiet("quiet").expect("quiet with no transports");
        r.fence("fence").expect("fence with no transports");
        // With a real UCX transport (when UCX loads here): the UCX PE goes to it, the TCP PE
        // still needs TCP, and quiet walks it.
        let Ok(lib) = ucx::ffi::lib(None) else {
            eprintln!("SKIPPED (UCX part): no UCX here");
            return;
        };
        let u = Arc::new(ucx::Ucx::new(lib, 0, 4, None).expect("a UCX worker"));
        let r = routes_only(routes, Some(u));
        assert!(r.any());
        assert!(matches!(r.get("put", 2), Ok(RemoteRef::Ucx(_))));
        assert!(r.get("put", 1).is_err());
        assert!(r.get("put", 0).is_err());
        assert_eq!(r.each().count(), 1);
        r.quiet("quiet").expect("quiet with nothing outstanding");
    }

    /// On the GPU backend, a UCX without CUDA support (Debian's libucx0 here) is refused with
    /// the cause and the fix, on the real library (skipped where libucp cannot be loaded, or
    /// where the installed UCX does offer cuda_copy).
    #[test]
    fn gpu_backend_refuses_ucx_without_cuda() {
        let cfg = Config::default();
        let probe = match ucx::probe(None) {
            Ok(p) => p,
            Err(e) => {
                eprintln!("SKIPPED: no UCX here: {e}");
                return;
            }
        };
        if probe.cuda() {
            eprintln!("SKIPPED: this UCX has CUDA support ({:?})", probe.resources);
            return;
        }
        let r = open_ucx(&cfg, 0, 2, RemoteChoice::Ucx, true, false).expect("ucx considered");
        let e = r.expect_err("refused");
        assert!(
            e.contains("cannot carry the GPU heap") && e.contains("cuda_copy"),
            "{e}"
        );
        assert!(e.contains("libucx-cu13") || e.contains("UCX_TLS"), "{e}");
        // The same UCX serves the CPU backend.
        let r = open_ucx(&cfg, 0, 2, RemoteChoice::Ucx, false, false).expect("ucx considered");
        assert!(r.is_ok(), "{:?}", r.err());
        // auto never opens UCX without an RDMA device, nor tcp.
        assert!(open_ucx(&cfg, 0, 2, RemoteChoice::Auto, true, false).is_none());
        assert!(open_ucx(&cfg, 0, 2, RemoteChoice::Tcp, true, true).is_none());
    }
}
