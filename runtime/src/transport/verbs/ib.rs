//! The verbs transport proper, on the `sideway` crate (which opens libibverbs at run time).
//!
//! * One protection domain, one completion queue, and one RC queue pair per remote peer that is
//!   routed to verbs. Queue pairs go INIT → RTR → RTS with the peer's queue pair number, LID,
//!   GID and packet sequence number learnt through the bootstrap ([`super::wire`]).
//! * Every heap chunk is a memory region (host memory through `ibv_reg_mr`, GPU memory through
//!   a dma-buf from `cuMemGetHandleForAddressRange` and `ibv_reg_dmabuf_mr`); the peers' keys
//!   are kept per PE and heap, and a transfer crossing two chunks is split.
//! * Puts copy the caller's bytes into a registered staging buffer and post RDMA writes (so the
//!   caller's buffer is reusable on return); gets post RDMA reads into staging and wait. Every
//!   work request is signalled; completions are polled under one lock when the staging buffer
//!   or the send queue fills up, and by `quiet`.
//! * Atomics: 8-byte fetch-add and compare-swap are native; every other operation, and every
//!   4-byte one (on the aligned 8-byte word that holds it), is a compare-and-swap loop.
//!   Gets and atomics wait for every outstanding request, so no read or atomic is ever in flight
//!   when a later write is posted: operations to one PE are applied in issue order and `fence`
//!   needs no work.
//!
//! Never run on RDMA hardware (see the module above).

use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

use sideway::ibverbs::address::{AddressHandleAttribute, Gid};
use sideway::ibverbs::completion::{
    BasicCompletionQueue, GenericCompletionQueue, PollCompletionQueueError, WorkCompletionStatus,
};
use sideway::ibverbs::device::{DeviceInfo, DeviceList, GetDeviceListErrorKind};
use sideway::ibverbs::device_context::{DeviceContext, LinkLayer, Mtu, PortState};
use sideway::ibverbs::memory_region::MemoryRegion;
use sideway::ibverbs::protection_domain::ProtectionDomain;
use sideway::ibverbs::queue_pair::{
    BasicQueuePair, PostSendGuard, QueuePair, QueuePairAttribute, QueuePairState,
    SetScatterGatherEntry, WorkRequestFlags,
};
use sideway::ibverbs::AccessFlags;

use super::wire::{ConnInfo, Key};
use crate::config::Config;
use crate::error::{Error, Result};
use crate::node::{peer_lost, Liveness};
use crate::transport::select::Via;
use crate::transport::{key, Amo, AmoOp, Caps, Chunk, HeapId, Kind, RemoteAddr, TransportOps};

/// What the verbs transport can do.
pub const CAPS: Caps = Caps::RMA.union(Caps::AMO).union(Caps::ORDERED);

/// Work requests in flight at most (per process; also the send queue depth of each QP).
const DEPTH: u32 = 256;
/// Registered bounce buffer for puts, gets and atomic results.
const STAGING: usize = 4 << 20;
/// Largest single RDMA write or read.
const PIECE: usize = 1 << 20;

fn unsupported(call: &'static str, reason: String) -> Error {
    Error::Unsupported { call, reason }
}

fn verbs_err(call: &'static str, what: String, e: impl std::fmt::Display) -> Error {
    unsupported(call, format!("verbs transport: {what} failed: {e}"))
}

/// An opened RDMA device and the port this PE uses.
pub struct Device {
    ctx: Arc<DeviceContext>,
    name: String,
    port: u8,
    lid: u16,
    gid: Gid,
    gid_index: u8,
    mtu: Mtu,
    rd_atomic: u8,
}

impl Device {
    /// Finds and opens the device (`RSHMEM_IB_DEVICE`, else the first one with an active port).
    /// No device, no libibverbs, or no active port is an [`Error::Unsupported`] naming the call.
    pub fn open(cfg: &Config) -> Result<Device> {
        let call = "init";
        let list = DeviceList::new().map_err(|e| {
            #[allow(unreachable_patterns)]
            let errno = match &e.0 {
                GetDeviceListErrorKind::Ibverbs(io) => io.raw_os_error(),
                _ => None,
            };
            match errno {
                // rdma-core's loader answers EOPNOTSUPP when it could not open libibverbs.
                Some(libc::EOPNOTSUPP) => unsupported(call, "verbs transport: libibverbs (libibverbs.so.1) is not installed or could not be loaded, so ibv_get_device_list is unavailable".into()),
                // libibverbs answers ENOSYS when the kernel has no RDMA support at all.
                Some(libc::ENOSYS) => unsupported(call, "verbs transport: ibv_get_device_list found no RDMA device (the kernel has no RDMA support: ENOSYS)".into()),
                _ => verbs_err(call, "ibv_get_device_list".into(), format!("{e}: {:?}", e.0)),
            }
        })?;
        if list.is_empty() {
            return Err(unsupported(
                call,
                "verbs transport: ibv_get_device_list found no RDMA device (no InfiniBand/RoCE adapter, or its kernel driver is not loaded)".into(),
            ));
        }
        let (want, want_port) = match &cfg.ib_device {
            Some((n, p)) => (Some(n.as_str()), *p),
            None => (None, None),
        };
        let mut seen = Vec::new();
        for dev in list.iter() {
            let name = dev.name();
            if want.is_some_and(|w| w != name) {
                seen.push(name);
                continue;
            }
            let ctx = dev
                .open()
                .map_err(|e| verbs_err(call, format!("ibv_open_device({name})"), e))?;
            let attr = ctx
                .query_device()
                .map_err(|e| verbs_err(call, format!("ibv_query_device({name})"), e))?;
            let ports: Vec<u8> = match want_port {
                Some(p) => vec![p],
                None => (1..=attr.phys_port_cnt()).collect(),
            };
            for port in ports {
                let pattr = ctx
                    .query_port(port)
                    .map_err(|e| verbs_err(call, format!("ibv_query_port({name}, {port})"), e))?;
                if pattr.port_state() != PortState::Active {
                    seen.push(format!("{name}:{port} (not active)"));
                    continue;
                }
                let gid_index = match cfg.ib_gid_index {
                    Some(i) => i,
                    None => pick_gid(&ctx, port, pattr.link_layer(), pattr.gid_tbl_len()),
                };
                let gid = ctx.query_gid(port, gid_index).map_err(|e| {
                    verbs_err(
                        call,
                        format!("ibv_query_gid({name}, {port}, {gid_index})"),
                        e,
                    )
                })?;
                let rd_atomic = attr.max_qp_rd_atom().clamp(1, 16) as u8;
                tracing::debug!(target: "rshmem::verbs", device = %name, port, lid = pattr.lid(), gid = %gid, gid_index, "opened RDMA device");
                return Ok(Device {
                    ctx,
                    name,
                    port,
                    lid: pattr.lid(),
                    gid,
                    gid_index: u8::try_from(gid_index).map_err(|_| {
                        unsupported(call, format!("verbs transport: GID index {gid_index} does not fit the address vector (at most 255)"))
                    })?,
                    mtu: pattr.active_mtu(),
                    rd_atomic,
                });
            }
        }
        Err(unsupported(
            call,
            match want {
                Some(w) => format!("verbs transport: no active port on RDMA device {w} (RSHMEM_IB_DEVICE); seen: {}", seen.join(", ")),
                None => format!("verbs transport: no RDMA device has an active port; seen: {}", seen.join(", ")),
            },
        ))
    }
}

/// On RoCE, the first RoCE v2 GID of the port (routable over IP); else index 0.
fn pick_gid(ctx: &DeviceContext, port: u8, link: LinkLayer, len: i32) -> u32 {
    if link != LinkLayer::Ethernet {
        return 0;
    }
    (0..len.max(0) as u32)
        .find(|&i| {
            ctx.query_gid(port, i).is_ok_and(|g| !g.is_zero())
                && ctx.query_gid_type(port, i).is_ok_and(|t| t == 1)
        })
        .unwrap_or(0)
}

struct Peer {
    qp: BasicQueuePair,
    /// A completion with an error was seen for this peer.
    broken: Option<String>,
}

struct State {
    peers: Vec<Option<Peer>>,
    /// Work requests posted and not yet completed.
    outstanding: u32,
    /// Bytes of the staging buffer in use by outstanding requests.
    used: usize,
    seq: u64,
}

/// The verbs transport of one PE.
pub struct Verbs {
    me: usize,
    dev: Device,
    pd: Arc<ProtectionDomain>,
    cq: Arc<BasicCompletionQueue>,
    psn: u32,
    state: Mutex<State>,
    /// Keys of every PE's registered chunks, by PE.
    keys: RwLock<Vec<Vec<Key>>>,
    /// My registered chunks (kept alive until drop).
    mrs: Mutex<Vec<Arc<MemoryRegion>>>,
    /// The staging region (taken in `Drop` before the buffer is freed).
    staging_mr: Option<Arc<MemoryRegion>>,
    /// `STAGING` bytes from the global allocator, written only under `state`'s lock.
    staging: std::ptr::NonNull<u8>,
    timeout: Option<Duration>,
    live: Mutex<Option<Arc<Liveness>>>,
}

// SAFETY: the staging buffer is owned by `Verbs` and only touched under `state`'s lock; the
// verbs objects (sideway types) are Send and Sync.
unsafe impl Send for Verbs {}
// SAFETY: as above.
unsafe impl Sync for Verbs {}

fn staging_layout() -> std::alloc::Layout {
    std::alloc::Layout::from_size_align(STAGING, 4096).unwrap_or(std::alloc::Layout::new::<u8>())
}

impl std::fmt::Debug for Verbs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Verbs")
            .field("device", &self.dev.name)
            .field("port", &self.dev.port)
            .finish()
    }
}

fn access() -> AccessFlags {
    AccessFlags::LocalWrite
        | AccessFlags::RemoteWrite
        | AccessFlags::RemoteRead
        | AccessFlags::RemoteAtomic
}

impl Verbs {
    /// Creates the protection domain, completion queue, staging region and one queue pair (in
    /// INIT) for every PE routed to verbs.
    pub fn new(dev: Device, me: usize, via: &[Via], cfg: &Config) -> Result<Verbs> {
        let call = "init";
        let name = dev.name.clone();
        let pd = dev
            .ctx
            .alloc_pd()
            .map_err(|e| verbs_err(call, format!("ibv_alloc_pd({name})"), e))?;
        let cq = dev
            .ctx
            .create_cq_builder()
            .setup_cqe(2 * DEPTH)
            .build()
            .map_err(|e| verbs_err(call, format!("ibv_create_cq({name})"), e))?;
        // SAFETY: a non-zero-sized layout.
        let raw = unsafe { std::alloc::alloc_zeroed(staging_layout()) };
        let staging = std::ptr::NonNull::new(raw).ok_or_else(|| Error::OutOfMemory {
            call,
            requested: STAGING,
            reason: "no memory for the verbs staging buffer".into(),
        })?;
        // SAFETY: the buffer lives until `Drop for Verbs`, which deregisters the region first.
        let staging_mr = match unsafe { pd.reg_mr(raw as usize, STAGING, access()) } {
            Ok(mr) => mr,
            Err(e) => {
                // SAFETY: allocated just above with this layout, never registered.
                unsafe { std::alloc::dealloc(raw, staging_layout()) };
                return Err(verbs_err(call, "ibv_reg_mr (staging buffer)".into(), e));
            }
        };
        let mut peers = Vec::with_capacity(via.len());
        for (p, v) in via.iter().enumerate() {
            if *v != Via::Verbs {
                peers.push(None);
                continue;
            }
            let gcq = GenericCompletionQueue::from(Arc::clone(&cq));
            let mut qp = pd
                .create_qp_builder()
                .setup_send_cq(gcq.clone())
                .setup_recv_cq(gcq)
                .setup_max_send_wr(DEPTH)
                .setup_max_recv_wr(1)
                .setup_max_send_sge(1)
                .build()
                .map_err(|e| verbs_err(call, format!("ibv_create_qp (RC, for PE {p})"), e))?;
            let mut attr = QueuePairAttribute::new();
            attr.setup_state(QueuePairState::Init)
                .setup_pkey_index(0)
                .setup_port(dev.port)
                .setup_access_flags(access());
            qp.modify(&attr)
                .map_err(|e| verbs_err(call, format!("ibv_modify_qp to INIT (for PE {p})"), e))?;
            peers.push(Some(Peer { qp, broken: None }));
        }
        let mut seed = [0u8; 4];
        getrandom::fill(&mut seed).ok();
        Ok(Verbs {
            me,
            pd,
            cq,
            psn: u32::from_le_bytes(seed) & 0xff_ffff,
            state: Mutex::new(State {
                peers,
                outstanding: 0,
                used: 0,
                seq: 0,
            }),
            keys: RwLock::new(vec![Vec::new(); via.len()]),
            mrs: Mutex::new(Vec::new()),
            staging,
            staging_mr: Some(staging_mr),
            timeout: cfg.timeout,
            live: Mutex::new(None),
            dev,
        })
    }

    /// Registers a heap chunk as a memory region and returns its key.
    pub fn register_chunk(&self, call: &'static str, chunk: &Chunk) -> Result<Key> {
        let addr = chunk.addr();
        let mr = match &chunk.gpu {
            None => {
                // SAFETY: the chunk is mapped for the World's lifetime; the region is
                // deregistered (in `Drop for Verbs`) before the heap is unmapped.
                unsafe { self.pd.reg_mr(addr, chunk.len, access()) }.map_err(|e| {
                    verbs_err(
                        call,
                        format!(
                            "ibv_reg_mr of heap bytes {:#x}+{:#x}",
                            chunk.start, chunk.len
                        ),
                        e,
                    )
                })?
            }
            Some(g) => self.register_gpu(call, g, addr, chunk.len)?,
        };
        let key = Key::of(chunk, mr.rkey());
        self.mrs.lock().map_err(|_| poisoned(call))?.push(mr);
        self.add_keys(call, self.me, &[key])?;
        Ok(key)
    }

    /// GPU memory: a dma-buf of the range, registered with `ibv_reg_dmabuf_mr`.
    fn register_gpu(
        &self,
        call: &'static str,
        gpu: &crate::cuda::Gpu,
        addr: usize,
        len: usize,
    ) -> Result<Arc<MemoryRegion>> {
        use std::os::fd::AsRawFd;
        gpu.bind(call)?;
        // `addr..addr+len` is a mapped range of this GPU's heap.
        let fd = crate::cuda::copy::dma_buf_fd(call, addr, len).map_err(|e| {
            let status = match e {
                Error::Cuda { code, .. } => code,
                other => other.to_string(),
            };
            unsupported(
                call,
                format!("verbs transport: GPU memory cannot be registered for RDMA: cuMemGetHandleForAddressRange(DMA_BUF_FD) returned {status} (needs a CUDA driver and kernel with dma-buf support)"),
            )
        })?;
        // SAFETY: fd is a dma-buf of exactly `len` bytes starting at `addr`; the region is
        // deregistered before the heap is unmapped.
        let mr = unsafe {
            self.pd
                .reg_dmabuf_mr(0, len, addr as u64, fd.as_raw_fd(), access())
        };
        // We own fd; the registration holds its own reference to the dma-buf.
        drop(fd);
        mr.map_err(|e| {
            unsupported(call, format!("verbs transport: ibv_reg_dmabuf_mr of GPU heap memory failed: {e} (the RDMA driver or kernel lacks dma-buf support)"))
        })
    }

    /// Registers this PE's user heap and control heap as mapped now.
    pub fn register_heaps(
        &self,
        call: &'static str,
        heap: &crate::heap::Heap,
        ctrl: &crate::heap::Heap,
    ) -> Result<Vec<Key>> {
        let user = Chunk {
            heap: HeapId::User,
            base: heap.my_base(),
            start: 0,
            len: heap.mapped(),
            gpu: heap.gpu().cloned(),
        };
        let control = Chunk {
            heap: HeapId::Ctrl,
            base: ctrl.my_base(),
            start: 0,
            len: ctrl.mapped(),
            gpu: None,
        };
        Ok(vec![
            self.register_chunk(call, &user)?,
            self.register_chunk(call, &control)?,
        ])
    }

    /// This PE's connection details with `keys`.
    pub fn conn_info(&self, keys: Vec<Key>) -> ConnInfo {
        let qpn = match self.state.lock() {
            Ok(st) => st
                .peers
                .iter()
                .map(|p| p.as_ref().map_or(0, |p| p.qp.qp_number()))
                .collect(),
            Err(_) => Vec::new(),
        };
        ConnInfo {
            lid: self.dev.lid,
            gid: self.dev.gid.raw,
            mtu: self.dev.mtu as u8,
            psn: self.psn,
            qpn,
            keys,
        }
    }

    /// Adds keys of PE `pe`.
    pub fn add_keys(&self, call: &'static str, pe: usize, keys: &[Key]) -> Result<()> {
        let mut all = self.keys.write().map_err(|_| poisoned(call))?;
        let Some(k) = all.get_mut(pe) else {
            return Err(Error::invalid(
                call,
                format!("memory keys for PE {pe}, out of range"),
            ));
        };
        k.extend_from_slice(keys);
        Ok(())
    }

    /// Brings every queue pair to RTS with the peer's details from `infos` (by PE).
    pub fn connect(
        &mut self,
        call: &'static str,
        infos: &[Option<ConnInfo>],
        _cfg: &Config,
        live: Arc<Liveness>,
    ) -> Result<()> {
        *self.live.lock().map_err(|_| poisoned(call))? = Some(live);
        let st = self.state.get_mut().map_err(|_| poisoned(call))?;
        for (p, peer) in st.peers.iter_mut().enumerate() {
            let Some(peer) = peer else { continue };
            let Some(Some(info)) = infos.get(p) else {
                return Err(unsupported(
                    call,
                    format!("verbs transport: PE {p} sent no connection details"),
                ));
            };
            let Some(&dest) = info.qpn.get(self.me).filter(|q| **q != 0) else {
                return Err(unsupported(
                    call,
                    format!(
                        "verbs transport: PE {p} created no queue pair for PE {}",
                        self.me
                    ),
                ));
            };
            let mtu = Mtu::from(u32::from(info.mtu).min(self.dev.mtu as u32));
            let mut ah = AddressHandleAttribute::new();
            ah.setup_dest_lid(info.lid)
                .setup_port(self.dev.port)
                .setup_service_level(0);
            let gid = Gid { raw: info.gid };
            if !gid.is_zero() {
                ah.setup_grh_src_gid_index(self.dev.gid_index)
                    .setup_grh_dest_gid(&gid)
                    .setup_grh_hop_limit(64);
            }
            let mut attr = QueuePairAttribute::new();
            attr.setup_state(QueuePairState::ReadyToReceive)
                .setup_path_mtu(mtu)
                .setup_dest_qp_num(dest)
                .setup_rq_psn(info.psn)
                .setup_max_dest_read_atomic(self.dev.rd_atomic)
                .setup_min_rnr_timer(12)
                .setup_address_vector(&ah);
            peer.qp
                .modify(&attr)
                .map_err(|e| verbs_err(call, format!("ibv_modify_qp to RTR (for PE {p})"), e))?;
            let mut attr = QueuePairAttribute::new();
            attr.setup_state(QueuePairState::ReadyToSend)
                .setup_sq_psn(self.psn)
                .setup_timeout(14)
                .setup_retry_cnt(7)
                .setup_rnr_retry(7)
                .setup_max_read_atomic(self.dev.rd_atomic);
            peer.qp
                .modify(&attr)
                .map_err(|e| verbs_err(call, format!("ibv_modify_qp to RTS (for PE {p})"), e))?;
            self.keys.get_mut().map_err(|_| poisoned(call))?[p] = info.keys.clone();
        }
        tracing::debug!(target: "rshmem::verbs", pe = self.me, device = %self.dev.name, "verbs queue pairs up");
        Ok(())
    }

    /// Remote address and key of `[at.off, at.off+n)` on `at.pe`, cut at the end of its chunk:
    /// returns (address, rkey, bytes covered).
    fn locate(&self, call: &'static str, at: RemoteAddr, n: usize) -> Result<(u64, u32, usize)> {
        let keys = self.keys.read().map_err(|_| poisoned(call))?;
        let k = keys
            .get(at.pe)
            .and_then(|k| key::find(k, at.heap, at.off as u64))
            .ok_or_else(|| {
                Error::invalid(
                    call,
                    format!(
                        "PE {}: heap offset {:#x} is in no memory region registered with verbs",
                        at.pe, at.off
                    ),
                )
            })?;
        let within = (at.off as u64 - k.start) as usize;
        Ok((
            k.addr + within as u64,
            k.rkey,
            n.min(k.len as usize - within),
        ))
    }

    /// Posts one signalled work request to `pe` (staging offset `stage`, `len` bytes).
    fn post(
        &self,
        call: &'static str,
        st: &mut State,
        pe: usize,
        wr: Wr,
        stage: usize,
        len: usize,
    ) -> Result<()> {
        if st.outstanding >= DEPTH {
            self.drain(call, st, DEPTH / 2)?;
        }
        st.seq += 1;
        let wr_id = ((pe as u64) << 40) | (st.seq & ((1 << 40) - 1));
        let me = self.me;
        let peer = st
            .peers
            .get_mut(pe)
            .and_then(|p| p.as_mut())
            .ok_or_else(|| Error::invalid(call, format!("PE {pe} is not reached over verbs")))?;
        if let Some(why) = &peer.broken {
            return Err(Error::PeerLost {
                call,
                me,
                pe,
                reason: why.clone(),
            });
        }
        let lkey = self.staging_mr.as_ref().map_or(0, |m| m.lkey());
        let laddr = self.staging_ptr(stage) as u64;
        let mut g = peer.qp.start_post_send();
        let h = g.construct_wr(wr_id, WorkRequestFlags::Signaled);
        // SAFETY: [laddr, laddr+len) lies in the registered staging buffer and is not reused
        // until this request completes (`used` is reset only when nothing is outstanding).
        unsafe {
            match wr {
                Wr::Write { raddr, rkey } => h
                    .setup_write(rkey, raddr)
                    .setup_sge(lkey, laddr, len as u32),
                Wr::Read { raddr, rkey } => {
                    h.setup_read(rkey, raddr).setup_sge(lkey, laddr, len as u32)
                }
                Wr::Cas {
                    raddr,
                    rkey,
                    cmp,
                    swap,
                } => h
                    .setup_atomic_compare_swap(rkey, raddr, cmp, swap)
                    .setup_sge(lkey, laddr, 8),
                Wr::Fadd { raddr, rkey, add } => h
                    .setup_atomic_fetch_add(rkey, raddr, add)
                    .setup_sge(lkey, laddr, 8),
            }
        }
        g.post()
            .map_err(|e| verbs_err(call, format!("ibv_post_send to PE {pe}"), e))?;
        st.outstanding += 1;
        Ok(())
    }

    /// Polls the completion queue once; returns whether anything completed and the first
    /// failure seen (its peer is marked broken and, unless it refused access, reported lost).
    fn reap(&self, call: &'static str, st: &mut State) -> Result<(bool, Option<Error>)> {
        let poller = match self.cq.start_poll() {
            Ok(p) => p,
            Err(PollCompletionQueueError::CompletionQueueEmpty) => return Ok((false, None)),
            Err(e) => return Err(verbs_err(call, "ibv_poll_cq".into(), e)),
        };
        let mut first_err = None;
        for wc in poller {
            st.outstanding = st.outstanding.saturating_sub(1);
            if wc.status() == WorkCompletionStatus::Success as u32 {
                continue;
            }
            let pe = (wc.wr_id() >> 40) as usize;
            let status = WorkCompletionStatus::from(wc.status());
            let reason = format!(
                "RDMA completion error {status:?} (vendor code {:#x})",
                wc.vendor_err()
            );
            if let Some(Some(p)) = st.peers.get_mut(pe) {
                p.broken.get_or_insert(reason.clone());
            }
            let e = if status == WorkCompletionStatus::RemoteAccessError {
                Error::invalid(call, format!("PE {pe} refused an RDMA access ({reason})"))
            } else {
                let live = self.live.lock();
                let live = live.as_deref().ok().and_then(Option::as_deref);
                peer_lost(live, call, self.me, pe, reason)
            };
            first_err.get_or_insert(e);
        }
        if st.outstanding == 0 {
            st.used = 0;
        }
        Ok((true, first_err))
    }

    /// Polls completions until at most `left` requests are outstanding (bounded by
    /// `RSHMEM_TIMEOUT`); the first failed completion is returned as an error.
    fn drain(&self, call: &'static str, st: &mut State, left: u32) -> Result<()> {
        let start = Instant::now();
        let mut first_err: Option<Error> = None;
        while st.outstanding > left {
            let (got, err) = self.reap(call, st)?;
            if let Some(e) = err {
                first_err.get_or_insert(e);
            }
            if !got {
                if self.timeout.is_some_and(|t| start.elapsed() > t) {
                    return Err(Error::Timeout {
                        call,
                        me: self.me,
                        pe: None,
                        what: format!("{} RDMA completion(s)", st.outstanding),
                        waited: start.elapsed(),
                    });
                }
                std::hint::spin_loop();
            }
        }
        if st.outstanding == 0 {
            st.used = 0;
        }
        first_err.map_or(Ok(()), Err)
    }

    /// `len` bytes of staging (64-byte aligned), draining everything first when full.
    fn stage(&self, call: &'static str, st: &mut State, len: usize) -> Result<usize> {
        if st.used + len > STAGING {
            self.drain(call, st, 0)?;
        }
        let at = st.used;
        st.used = (at + len + 63) & !63;
        Ok(at)
    }

    fn lock(&self, call: &'static str) -> Result<std::sync::MutexGuard<'_, State>> {
        self.state.lock().map_err(|_| poisoned(call))
    }

    fn staging_ptr(&self, at: usize) -> *mut u8 {
        // SAFETY: callers pass offsets inside the staging buffer; writes happen under the state
        // lock, to bytes no outstanding request uses.
        unsafe { self.staging.as_ptr().add(at) }
    }

    /// Runs `f` on each piece of at most [`PIECE`] bytes of `[at, at+n)` in order, with the
    /// state lock held, the piece located and staging bytes for it reserved.
    fn by_piece(
        &self,
        call: &'static str,
        at: RemoteAddr,
        n: usize,
        mut f: impl FnMut(&mut State, Piece) -> Result<()>,
    ) -> Result<()> {
        let mut st = self.lock(call)?;
        let mut done = 0;
        while done < n {
            let here = RemoteAddr {
                off: at.off + done,
                ..at
            };
            let (raddr, rkey, k) = self.locate(call, here, (n - done).min(PIECE))?;
            let stage = self.stage(call, &mut st, k)?;
            f(
                &mut st,
                Piece {
                    done,
                    raddr,
                    rkey,
                    stage,
                    k,
                },
            )?;
            done += k;
        }
        Ok(())
    }

    /// One native 8-byte atomic on the word at `raddr`; returns the old value.
    fn atomic8(&self, call: &'static str, st: &mut State, pe: usize, wr: Wr) -> Result<u64> {
        let at = self.stage(call, st, 8)?;
        self.post(call, st, pe, wr, at, 8)?;
        self.drain(call, st, 0)?;
        let mut b = [0u8; 8];
        // SAFETY: the atomic completed and wrote its 8 bytes at `at`.
        unsafe { std::ptr::copy_nonoverlapping(self.staging_ptr(at), b.as_mut_ptr(), 8) };
        Ok(u64::from_ne_bytes(b))
    }
}

/// One piece of a put or get (see [`Verbs::by_piece`]).
#[derive(Clone, Copy)]
struct Piece {
    /// Bytes of the whole transfer before this piece.
    done: usize,
    /// Its remote address and key.
    raddr: u64,
    rkey: u32,
    /// Its offset in the staging buffer.
    stage: usize,
    /// Its length.
    k: usize,
}

#[derive(Clone, Copy)]
enum Wr {
    Write {
        raddr: u64,
        rkey: u32,
    },
    Read {
        raddr: u64,
        rkey: u32,
    },
    Cas {
        raddr: u64,
        rkey: u32,
        cmp: u64,
        swap: u64,
    },
    Fadd {
        raddr: u64,
        rkey: u32,
        add: u64,
    },
}

impl TransportOps for Verbs {
    type Addr = RemoteAddr;

    fn kind(&self) -> Kind {
        Kind::new("verbs", CAPS)
    }

    fn put(&self, call: &'static str, dst: RemoteAddr, src: *const u8, n: usize) -> Result<()> {
        self.by_piece(call, dst, n, |st, p| {
            // SAFETY: the caller's `src` has n readable bytes; the staging bytes are free.
            unsafe {
                std::ptr::copy_nonoverlapping(src.add(p.done), self.staging_ptr(p.stage), p.k)
            };
            self.post(
                call,
                st,
                dst.pe,
                Wr::Write {
                    raddr: p.raddr,
                    rkey: p.rkey,
                },
                p.stage,
                p.k,
            )
        })
    }

    fn get(&self, call: &'static str, dst: *mut u8, src: RemoteAddr, n: usize) -> Result<()> {
        self.by_piece(call, src, n, |st, p| {
            self.post(
                call,
                st,
                src.pe,
                Wr::Read {
                    raddr: p.raddr,
                    rkey: p.rkey,
                },
                p.stage,
                p.k,
            )?;
            self.drain(call, st, 0)?;
            // SAFETY: the read completed into staging; `dst` has n writable bytes.
            unsafe {
                std::ptr::copy_nonoverlapping(self.staging_ptr(p.stage), dst.add(p.done), p.k)
            };
            Ok(())
        })
    }

    fn amo(&self, call: &'static str, at: RemoteAddr, a: Amo) -> Result<u64> {
        let Amo {
            op,
            size,
            value,
            cond,
        } = a;
        // The aligned 8-byte word holding the target, and where the target sits in it.
        let word = RemoteAddr {
            off: at.off & !7,
            ..at
        };
        let (shift, mask) = if size == 8 {
            (0, u64::MAX)
        } else {
            ((at.off & 4) as u32 * 8, 0xffff_ffff)
        };
        let (raddr, rkey, _) = self.locate(call, word, 8)?;
        let mut st = self.lock(call)?;
        let pe = at.pe;
        let fadd =
            |st: &mut State, add: u64| self.atomic8(call, st, pe, Wr::Fadd { raddr, rkey, add });
        let cas = |st: &mut State, cmp: u64, swap: u64| {
            self.atomic8(
                call,
                st,
                pe,
                Wr::Cas {
                    raddr,
                    rkey,
                    cmp,
                    swap,
                },
            )
        };
        if size == 8 {
            match op {
                AmoOp::FetchAdd => return fadd(&mut st, value),
                AmoOp::Fetch => return fadd(&mut st, 0),
                AmoOp::CompareSwap => return cas(&mut st, cond, value),
                _ => {}
            }
        }
        let mut cur = fadd(&mut st, 0)?;
        loop {
            let old = (cur >> shift) & mask;
            if op == AmoOp::Fetch || (op == AmoOp::CompareSwap && old != cond & mask) {
                return Ok(old);
            }
            let new_part = op.apply(old, value & mask, cond & mask) & mask;
            let new = (cur & !(mask << shift)) | (new_part << shift);
            let seen = cas(&mut st, cur, new)?;
            if seen == cur {
                return Ok(old);
            }
            cur = seen;
        }
    }

    fn store(&self, call: &'static str, at: RemoteAddr, value: u64) -> Result<()> {
        // An 8-byte RDMA write: ordered after the writes before it on the same queue pair.
        self.put(call, at, value.to_ne_bytes().as_ptr(), 8)
    }

    fn fence(&self, _call: &'static str) -> Result<()> {
        // Writes to one PE are delivered in order on its RC queue pair, and reads and atomics
        // wait for completion before returning (see the module docs).
        Ok(())
    }

    fn quiet(&self, call: &'static str) -> Result<()> {
        let mut st = self.lock(call)?;
        if st.outstanding == 0 {
            return Ok(());
        }
        self.drain(call, &mut st, 0)
    }
}

impl Drop for Verbs {
    fn drop(&mut self) {
        if let Ok(mut st) = self.state.lock() {
            let _ = self.drain("finalize", &mut st, 0);
            // Queue pairs go before the regions they may still reference.
            st.peers.clear();
        }
        if let Ok(mut m) = self.mrs.lock() {
            m.clear();
        }
        if let Some(mr) = self.staging_mr.take() {
            drop(mr);
            // SAFETY: allocated in `new` with this layout; its region is deregistered.
            unsafe { std::alloc::dealloc(self.staging.as_ptr(), staging_layout()) };
        }
    }
}

fn poisoned(call: &'static str) -> Error {
    Error::State {
        call,
        reason: "a verbs lock is poisoned (another thread panicked inside rshmem)".into(),
    }
}
