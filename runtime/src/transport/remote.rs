//! The remote transports of a PE: which one serves each PE of another host, and the collective
//! steps of the verbs transport (open, announce, connect, register heap growth).
//!
//! Every collective step here is taken by every PE or by none, decided from what all PEs
//! announced, so a PE that has no RDMA device (or was built without the `verbs` feature) still
//! takes part in the exchanges of a job where other pairs use verbs, with an empty payload.

use std::sync::Mutex;

use rshmem_bootstrap::Bootstrap;

use super::select::{self, Announce, RemoteChoice, Via};
#[cfg(feature = "verbs")]
use super::verbs;
use super::verbs::wire::{self, ConnInfo};
use super::{HeapId, RemoteRef};
use crate::config::Config;
use crate::error::{Error, Result};
use crate::heap::Heap;
use crate::node::Liveness;

/// How this PE reaches every PE, and the verbs transport when this PE uses it.
pub(crate) struct Remotes {
    /// Per PE; empty when every PE shares this host (then every PE is [`Via::Local`]).
    via: Vec<Via>,
    /// Some pair of the job uses verbs: this PE takes part in the verbs exchanges.
    verbs_job: bool,
    /// Bytes of the user heap registered with verbs so far (equal on every PE).
    registered: Mutex<usize>,
    #[cfg(feature = "verbs")]
    verbs: Option<verbs::Verbs>,
}

impl std::fmt::Debug for Remotes {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Remotes")
            .field("via", &self.via)
            .field("verbs_job", &self.verbs_job)
            .finish()
    }
}

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

impl Remotes {
    /// **Collective over all PEs.** Decides how each PE is reached: every PE opens its RDMA
    /// device when verbs may be used and announces the result; the routes follow from all
    /// announcements ([`select::plan`]). With `RSHMEM_REMOTE_TRANSPORT=verbs`, a PE whose device
    /// did not open returns that error (after the exchange, so the others fail too instead of
    /// waiting for it).
    pub(crate) fn plan(
        boot: &dyn Bootstrap,
        cfg: &Config,
        local_of: &[Option<usize>],
    ) -> Result<Self> {
        let call = "init";
        let me = boot.rank();
        let local: Vec<bool> = local_of.iter().map(Option::is_some).collect();
        let mut r = Remotes {
            via: Vec::new(),
            verbs_job: false,
            registered: Mutex::new(0),
            #[cfg(feature = "verbs")]
            verbs: None,
        };
        if local.iter().all(|l| *l) {
            return Ok(r);
        }
        let choice = cfg.remote_transport;
        let opened = (choice != RemoteChoice::Tcp).then(|| open_device(cfg));
        if let Some(Err(e)) = &opened {
            tracing::debug!(target: "rshmem::verbs", "no verbs transport on PE {me}: {e}");
        }
        let mine = Announce {
            choice,
            verbs: matches!(opened, Some(Ok(_))),
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
        r.via =
            select::plan(me, &local, &all).map_err(|e| Error::Unsupported { call, reason: e.0 })?;
        r.verbs_job = select::verbs_in_job(&all);
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
    pub(crate) fn tcp_mask(&self, local_of: &[Option<usize>]) -> Vec<Option<usize>> {
        local_of
            .iter()
            .enumerate()
            .map(|(p, l)| match self.via(p) {
                Via::Tcp => None,
                _ => Some(l.unwrap_or(usize::MAX)),
            })
            .collect()
    }

    /// The non-TCP remote transport serving PE `pe`.
    pub(crate) fn get(&self, call: &'static str, pe: usize) -> Result<RemoteRef<'_>> {
        #[cfg(feature = "verbs")]
        if let (Via::Verbs, Some(v)) = (self.via(pe), &self.verbs) {
            return Ok(RemoteRef::Verbs(v));
        }
        Err(Error::State {
            call,
            reason: format!("no remote transport serves PE {pe}"),
        })
    }

    /// **Collective over all PEs** (when some pair uses verbs). Registers this PE's heaps,
    /// exchanges queue pair numbers, port addresses and memory keys, and brings every queue pair
    /// up. Every PE learns whether all succeeded.
    pub(crate) fn connect(
        &mut self,
        boot: &dyn Bootstrap,
        cfg: &Config,
        live: &std::sync::Arc<Liveness>,
        heap: &Heap,
        ctrl: &Heap,
    ) -> Result<()> {
        let _ = (cfg, live);
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
        let _ = (heap, ctrl);
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
        if !failed.is_empty() {
            return Err(Error::Unsupported {
                call,
                reason: format!(
                    "the verbs transport failed on PE(s) {} (see their errors)",
                    failed.join(", ")
                ),
            });
        }
        #[allow(unused_mut)]
        let mut up: Result<()> = Ok(());
        #[cfg(feature = "verbs")]
        if let Some(v) = &mut self.verbs {
            up = v.connect(call, &infos, cfg, live.clone());
        }
        let _ = infos;
        let ok = boot.allgather(&[up.is_ok() as u8])?;
        up?;
        let down: Vec<String> = (0..n)
            .filter(|&p| ok[p] != [1])
            .map(|p| p.to_string())
            .collect();
        if !down.is_empty() {
            return Err(Error::Unsupported {
                call,
                reason: format!(
                    "verbs queue pairs could not be brought up on PE(s) {}",
                    down.join(", ")
                ),
            });
        }
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
        if !self.verbs_job {
            return Ok(());
        }
        let mut reg = self.registered.lock().map_err(|_| poisoned(call))?;
        let mapped = heap.mapped();
        if mapped <= *reg {
            return Ok(());
        }
        let chunk = super::Chunk {
            heap: HeapId::User,
            base: heap.my_base(),
            start: *reg,
            len: mapped - *reg,
            gpu: heap.gpu().cloned(),
        };
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
        if !failed.is_empty() {
            return Err(Error::Unsupported {
                call,
                reason: format!(
                    "registering the grown heap with verbs failed on PE(s) {}",
                    failed.join(", ")
                ),
            });
        }
        *reg = mapped;
        Ok(())
    }

    /// Completes every operation issued through the non-TCP remote transports.
    #[inline]
    pub(crate) fn quiet(&self, call: &'static str) -> Result<()> {
        #[cfg(feature = "verbs")]
        if let Some(v) = &self.verbs {
            return super::TransportOps::quiet(v, call);
        }
        let _ = call;
        Ok(())
    }
}

fn poisoned(call: &'static str) -> Error {
    Error::State {
        call,
        reason: "a lock is poisoned (another thread panicked inside rshmem)".into(),
    }
}
