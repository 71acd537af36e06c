//! The symmetric heap.
//!
//! The PEs of one host reserve one range of address space at the same virtual address in every
//! process; PE with local index `i` owns the slice `[base + i·slice, base + (i+1)·slice)`. Each
//! slice starts with a small runtime-internal area (barrier flags and the like), then the user
//! heap. Memory is mapped on demand in chunks (memfd on the CPU), each shared with every local
//! PE, so a symmetric address of mine translates to PE `j`'s copy by offset:
//! `peer = base + local(j)·slice + (addr − my_base)`.
//!
//! Allocation is collective and deterministic: the same calls in the same order give the same
//! offsets on every PE.

pub mod alloc;
pub mod host;
pub(crate) mod lazy;

use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Mutex, RwLock};

use rshmem_bootstrap::Bootstrap;

use crate::error::{Error, Result};
use crate::node::{Liveness, Node, USER_TAG};
use crate::seqlock::SeqLock;
use alloc::{checked_round_up, round_up, Allocator};
use host::{Reservation, BASE_ALIGN, GRANULE};

/// Bytes at the start of every slice of a host heap reserved for the runtime (see [`internal`]).
/// GPU heaps reserve more ([`crate::device::state::internal::USER_START`]); ask
/// [`Heap::internal`].
pub const INTERNAL_SIZE: usize = 2 << 20;

/// Frees of at least this many bytes return their pages to the system (host heaps); smaller
/// ones keep them, so that allocation churn stays cheap.
pub const RELEASE_MIN: usize = 1 << 20;

/// Where a heap's memory lives.
#[derive(Debug, Clone)]
pub enum Backing {
    /// Host memory (memfd chunks shared between the host's processes).
    Host,
    /// GPU memory of this PE's device (CUDA VMM chunks shared through POSIX fds).
    Cuda(std::sync::Arc<crate::cuda::Gpu>),
}

/// Offsets of runtime-internal objects inside the internal area.
pub mod internal {
    /// Barrier flags: one cache line per dissemination round.
    pub const BARRIER_FLAGS: usize = 0;
    /// Number of barrier rounds supported (2^64 PEs).
    pub const BARRIER_ROUNDS: usize = 64;
    /// Size of one flag slot.
    pub const FLAG_STRIDE: usize = 64;
    /// Words of the checked barrier (`World::sync_all_checked`): per round, at the same
    /// stride as the flags, two sets (by epoch parity, 32 bytes apart) of four words.
    pub const CHECK_WORDS: usize = 0x1000;
    /// The control heap's "gone PE" notice word: PE + 1 of the first PE this PE saw gone (0:
    /// none), read by local peers when this PE leaves (`crate::node::Liveness`).
    pub const PEER_NOTICE: usize = 0x7000;
    /// The PE's shared-memory bell (`crate::wait::SharedBell`): a 32-bit ring count and a
    /// 32-bit count of the PE's waits asleep on it. Local peers ring it after storing a flag
    /// into this PE's control heap; a napping barrier wait sleeps on it (a futex word).
    pub const BELL: usize = 0x7040;
    /// The proxy's own dissemination barrier (device barriers when some PE is on another
    /// node; `crate::proxy::service`): one flag per round at [`FLAG_STRIDE`], written by the
    /// same PE as the host barrier's round. Here, not in the proxy, because the transports'
    /// targets must know it too (they accept exactly these runtime flag stores).
    pub const PROXY_BARRIER_FLAGS: usize = 0x8000;
    /// The host barrier (`crate::sync`: world syncs when every PE is on one host), in local
    /// PE 0's control heap: the arrival count, the last completed epoch, the kinds of call seen
    /// (two words, by epoch parity) and the barrier's bell, each on a cache line of its own;
    /// then [`HOST_BARRIER_SLOTS`].
    pub const HOST_BARRIER: usize = 0x9000;
    /// The host barrier's bell (`crate::wait::SharedBell`), on which the group leaders sleep.
    pub const HOST_BARRIER_BELL: usize = HOST_BARRIER + 4 * 64;
    /// The bells of the host barrier's groups of [`HOST_BARRIER_GROUP`] local PEs (8 bytes
    /// each), on which the PEs of a group other than its leader sleep; for the first
    /// [`HOST_BARRIER_GROUPS`] groups (the PEs beyond sleep on the leaders' bell).
    pub const HOST_BARRIER_GROUP_BELLS: usize = HOST_BARRIER + 5 * 64;
    /// Local PEs per group of the host barrier.
    pub const HOST_BARRIER_GROUP: usize = 32;
    /// Bits of each count in the host barrier's arrival word (arrivals, finalizes, checked heap
    /// calls): the host barrier serves up to 2^21 − 1 PEs.
    pub const HOST_BARRIER_COUNT_BITS: u32 = 21;

    /// The bells of the host barrier for local PE `l`, as offsets in local PE 0's internal
    /// area: the one it sleeps on, and the group bell it rings once the barrier is done when
    /// it leads a group (the first PE of each group of [`HOST_BARRIER_GROUP`] with a bell of
    /// its own). The others of a group sleep on the group's bell; the leaders, and the PEs of
    /// groups beyond [`HOST_BARRIER_GROUPS`], on [`HOST_BARRIER_BELL`].
    pub fn host_barrier_bells(l: usize) -> (usize, Option<usize>) {
        let g = l / HOST_BARRIER_GROUP;
        if g >= HOST_BARRIER_GROUPS {
            return (HOST_BARRIER_BELL, None);
        }
        let group = HOST_BARRIER_GROUP_BELLS + 8 * g;
        if l % HOST_BARRIER_GROUP == 0 {
            (HOST_BARRIER_BELL, Some(group))
        } else {
            (group, None)
        }
    }
    /// Groups with a bell of their own.
    pub const HOST_BARRIER_GROUPS: usize = 256;
    /// Each local PE's last barrier epoch (32 bits, by local index), for naming a PE that has
    /// not arrived; room for [`HOST_BARRIER_NAMED`] PEs.
    pub const HOST_BARRIER_SLOTS: usize = HOST_BARRIER_GROUP_BELLS + 8 * HOST_BARRIER_GROUPS;
    /// PEs whose arrival the host barrier records (beyond them a timeout names no PE).
    pub const HOST_BARRIER_NAMED: usize = (TEAM_AREA_START - HOST_BARRIER_SLOTS) / 4;
    /// Bytes 64 KiB .. 2 MiB of the host control heap's internal area hold the team slots
    /// (`crate::team`); nothing else may use them.
    pub const TEAM_AREA_START: usize = 64 << 10;

    /// A lazily mapped heap's table of its chunks' descriptor numbers (`crate::heap::lazy`):
    /// [`MAX_CHUNKS`] 32-bit slots in the PE's own first chunk, descriptor + 1 (0: none yet).
    pub const CHUNK_FDS: usize = 0x7400;
    /// Chunks a lazily mapped heap may have (the heap at least doubles as it grows).
    pub const MAX_CHUNKS: usize = 256;

    const _: () = {
        assert!(BELL + 64 <= CHUNK_FDS && CHUNK_FDS + 4 * MAX_CHUNKS <= PROXY_BARRIER_FLAGS);
        assert!(BARRIER_FLAGS + BARRIER_ROUNDS * FLAG_STRIDE <= CHECK_WORDS);
        assert!(CHECK_WORDS + BARRIER_ROUNDS * FLAG_STRIDE <= PEER_NOTICE);
        assert!(PEER_NOTICE + 8 <= BELL && BELL % 64 == 0);
        assert!(BELL + 64 <= PROXY_BARRIER_FLAGS);
        assert!(PROXY_BARRIER_FLAGS + BARRIER_ROUNDS * FLAG_STRIDE <= HOST_BARRIER);
        assert!(HOST_BARRIER_SLOTS + 4 * HOST_BARRIER_NAMED <= TEAM_AREA_START);
    };
}

/// One PE's view of the node's symmetric heap.
pub struct Heap {
    /// Most bytes a slice may map (the heap limit plus the internal area).
    end: usize,
    backing: Backing,
    /// GPU ranges mapped in this process (unmapped before the reservation is freed).
    gpu_maps: Mutex<Vec<(usize, usize)>>,
    res: Reservation,
    /// Bytes at the start of every slice that belong to the runtime (the user heap follows).
    internal: usize,
    slice: usize,
    my_base: usize,
    n_local: usize,
    me_local: usize,
    /// Bytes mapped in every slice (equal on all PEs).
    mapped: std::sync::Arc<AtomicUsize>,
    alloc: RwLock<Allocator>,
    /// The heap's growth limit: `end`, or the lowest registered buffer's offset when lower.
    floor: AtomicUsize,
    /// Users' buffers mapped at the top of every slice (`World::register_buffer_symmetric`),
    /// sorted by offset.
    user: Mutex<Vec<UserRegion>>,
    /// Allocations that range checks hit recently (cleared when one disappears or shrinks).
    hits: HitCache,
    grow_lock: Mutex<u64>,
    /// Local PEs' slices mapped at first access (host heaps under `RSHMEM_LAZY_MAPPING`);
    /// None: every local PE's chunks are mapped as the heap grows.
    lazy: Option<lazy::Lazy>,
    /// `heap` or `ctrl` (names of the chunks).
    label: &'static str,
}

crate::debug_fields!(Heap, |h| {
    base: format_args!("{:#x}", h.res.base),
    slice: h.slice,
    mapped: h.mapped.load(Ordering::Relaxed),
});

/// Allocations remembered by range checks.
const HIT_CACHE: usize = 4;

/// The allocations range checks hit last, shared by the threads of one PE: (start, end) as
/// addresses, most recent first, so code alternating between a few objects (data and flag, ping
/// and pong) stays on the fast path. Empty entries are (0, 0), which match nothing.
///
/// A sequence lock rather than a thread-local: in `libshmem.so` every thread-local access is a
/// call to `__tls_get_addr`, a sizeable part of a small put or atomic. `seq` is odd while the
/// entries change (see `crate::seqlock`); a reader that sees it odd or changed takes the slow path. Entries are added
/// only while the allocator is locked for reading (no free can run) and all cleared, with the
/// allocator locked for writing, by every free or shrink, so no entry outlives its allocation.
struct HitCache {
    lock: SeqLock,
    ent: [[AtomicUsize; 2]; HIT_CACHE],
}

impl HitCache {
    fn new() -> Self {
        HitCache {
            lock: SeqLock::new(),
            ent: Default::default(),
        }
    }

    /// True if `[addr, addr+len)` lies inside a remembered allocation (`len == 0`: `addr` does).
    #[inline]
    fn hit(&self, addr: usize, len: usize) -> bool {
        self.lock
            .read(|| {
                self.ent.iter().find_map(|[s, e]| {
                    let (s, e) = (s.load(Ordering::Relaxed), e.load(Ordering::Relaxed));
                    (addr >= s && addr <= e && len <= e - addr && (len > 0 || addr < e))
                        .then_some(())
                })
            })
            .is_some()
    }

    /// Runs `f` on the entries inside the write protocol; `wait`: block for the writer lock,
    /// else give up when another thread holds it.
    fn update(&self, wait: bool, f: impl FnOnce(&[[AtomicUsize; 2]; HIT_CACHE])) {
        self.lock.write(wait, || f(&self.ent));
    }

    /// Remembers `[start, end)` first. Call with the allocator locked (for reading at least).
    fn insert(&self, start: usize, end: usize) {
        self.update(false, |ent| {
            for i in (1..HIT_CACHE).rev() {
                for (to, from) in ent[i].iter().zip(&ent[i - 1]) {
                    to.store(from.load(Ordering::Relaxed), Ordering::Relaxed);
                }
            }
            ent[0][0].store(start, Ordering::Relaxed);
            ent[0][1].store(end, Ordering::Relaxed);
        });
    }

    /// Forgets every allocation. Call with the allocator locked for writing.
    fn clear(&self) {
        self.update(true, |ent| {
            for [s, e] in ent {
                s.store(0, Ordering::Relaxed);
                e.store(0, Ordering::Relaxed);
            }
        });
    }
}

impl Heap {
    /// Collective over all PEs: reserves the node's address range and maps the first chunk.
    /// Reserves the node's slices and maps the first `initial` bytes of mine. Collective over
    /// the job. `label` names the heap's chunks (`heap`, `ctrl`); `lazy` asks for local PEs'
    /// slices to be mapped at first access ([`lazy`]), which the host heaps of a node get
    /// when every PE of the node asks for it and they share a PID namespace.
    #[allow(clippy::too_many_arguments)]
    pub fn create(
        boot: &dyn Bootstrap,
        node: &Node,
        live: &Liveness,
        backing: Backing,
        limit: usize,
        initial: usize,
        label: &'static str,
        lazy: bool,
    ) -> Result<Self> {
        // `end` is the most a slice may map; `slice` (the address-space stride between PEs)
        // rounds it up to BASE_ALIGN so every slice starts equally aligned.
        let internal = match &backing {
            Backing::Host => INTERNAL_SIZE,
            Backing::Cuda(_) => crate::device::state::internal::USER_START,
        };
        let too_big = || {
            Error::invalid(
                "init",
                format!("the heap limit of {limit} bytes (RSHMEM_HEAP_LIMIT) is too large for the address space"),
            )
        };
        let end = limit
            .checked_add(internal)
            .map(|e| e.max(internal + GRANULE))
            .and_then(|e| checked_round_up(e, GRANULE))
            .ok_or_else(too_big)?;
        let slice = checked_round_up(end, BASE_ALIGN).ok_or_else(too_big)?;
        let n_local = node.len();
        let total = slice.checked_mul(n_local).ok_or_else(|| {
            Error::invalid("init", "RSHMEM_HEAP_LIMIT times PEs per host overflows")
        })?;
        let res = match &backing {
            Backing::Host => {
                host::reserve_matching(boot, &node.pes, node.me, total, &host::reserve_host)
            }
            Backing::Cuda(g) => {
                g.bind("init")?;
                host::reserve_matching(boot, &node.pes, node.me, total, &host::reserve_gpu)
            }
        }
        .map_err(|e| match e {
            // Every process reserves the slices of every PE of its host.
            Error::Os {
                call,
                context,
                source,
            } if limit > 0 => Error::Os {
                call,
                context: format!(
                    "{context} for the {label} of {n_local} PEs on this host ({slice} bytes \
                     each, from the heap limit of {limit} bytes: lower RSHMEM_HEAP_LIMIT)"
                ),
                source,
            },
            e => e,
        })?;
        let my_base = res.base + node.me * slice;
        let first = checked_round_up(initial.saturating_add(internal), GRANULE)
            .unwrap_or(end)
            .min(end);
        // My first chunk is made before the others know its descriptor number, which the
        // node learns in the same all-gather that settles the mapping mode.
        let first_fd = match &backing {
            Backing::Host => Some(host::create_chunk(
                &lazy::chunk_name(node.pes[node.me], label, 0),
                first,
            )?),
            Backing::Cuda(_) => None,
        };
        let lazy = settle_lazy(boot, node, lazy, first_fd.as_ref(), label)?;
        let heap = Heap {
            end,
            backing,
            gpu_maps: Mutex::new(Vec::new()),
            my_base,
            slice,
            n_local,
            me_local: node.me,
            mapped: std::sync::Arc::new(AtomicUsize::new(0)),
            alloc: RwLock::new(Allocator::new(internal, internal)),
            floor: AtomicUsize::new(end),
            user: Mutex::new(Vec::new()),
            internal,
            hits: HitCache::new(),
            grow_lock: Mutex::new(0),
            res,
            lazy,
            label,
        };
        heap.grow_to(node, live, "init", first, first_fd)?;
        Ok(heap)
    }

    /// Maps `[mapped, new_end)` in my slice and, unless the heap maps its peers lazily, in
    /// every local slice (collective over the host's PEs). `made`: my chunk, when the caller
    /// created it already.
    fn grow_to(
        &self,
        node: &Node,
        live: &Liveness,
        call: &'static str,
        new_end: usize,
        made: Option<OwnedFd>,
    ) -> Result<()> {
        let mut chunk_no = self.grow_lock.lock().map_err(|_| poisoned(call))?;
        let old = self.mapped.load(Ordering::Acquire);
        let len = new_end - old;
        let mine = self.my_base + old;
        let fd = match &self.backing {
            Backing::Host => {
                let fd = match made {
                    Some(fd) => fd,
                    None => host::create_chunk(
                        &lazy::chunk_name(node.pes[node.me], self.label, *chunk_no as usize),
                        len,
                    )?,
                };
                host::map_chunk(&fd, mine, len, &self.res)?;
                fd
            }
            Backing::Cuda(g) => {
                let fd = crate::cuda::create_and_map(g, mine, len)?;
                self.gpu_maps
                    .lock()
                    .map_err(|_| poisoned(call))?
                    .push((mine, len));
                fd
            }
        };
        if let Some(z) = &self.lazy {
            z.add_mine(call, self.me_local, self.my_base, old, len, fd)?;
            return self.grown(call, &mut chunk_no, new_end);
        }
        let peers = node.exchange_fds(call, *chunk_no, &fd, live)?;
        for (j, pfd) in peers.iter().enumerate() {
            if let Some(pfd) = pfd {
                let at = self.res.base + j * self.slice + old;
                match &self.backing {
                    Backing::Host => host::map_chunk(pfd, at, len, &self.res)?,
                    Backing::Cuda(g) => {
                        crate::cuda::import_and_map(g, pfd, at, len)?;
                        self.gpu_maps
                            .lock()
                            .map_err(|_| poisoned(call))?
                            .push((at, len));
                    }
                }
            }
        }
        self.grown(call, &mut chunk_no, new_end)
    }

    /// The end of a growth: the chunk counted and the new end published to the allocator.
    fn grown(&self, call: &'static str, chunk_no: &mut u64, new_end: usize) -> Result<()> {
        *chunk_no += 1;
        let old = self.mapped.swap(new_end, Ordering::AcqRel);
        let mut a = self.alloc.write().map_err(|_| poisoned(call))?;
        if new_end > a.mapped_end() {
            a.grow(new_end);
        }
        tracing::debug!(target: "rshmem::heap", call, from = old, to = new_end, "heap grew");
        Ok(())
    }

    /// Whether local PE `local`'s slice is mapped here up to offset `end` (always true unless
    /// the heap maps its peers lazily). The hot check before a load/store to a peer.
    #[inline(always)]
    pub(crate) fn peer_mapped(&self, local: usize, end: usize) -> bool {
        self.lazy
            .as_ref()
            .is_none_or(|z| z.spans.covers(local, end))
    }

    /// Makes sure `[0, end)` of local PE `local`'s slice is mapped here (a no-op unless the
    /// heap maps its peers lazily): maps every chunk of it this PE knows of.
    #[inline]
    pub(crate) fn map_peer(
        &self,
        call: &'static str,
        local: usize,
        end: usize,
        live: Option<&Liveness>,
    ) -> Result<()> {
        match &self.lazy {
            Some(z) if !z.spans.covers(local, end) => {
                z.map_peer(call, local, end, self.slice_base(local), &self.res, live)
            }
            _ => Ok(()),
        }
    }

    /// Maps every local PE's slice as far as the heap has grown (for users that need them all,
    /// such as the GPU proxy).
    pub(crate) fn map_every_peer(&self, call: &'static str, live: Option<&Liveness>) -> Result<()> {
        let end = self.mapped();
        (0..self.n_local).try_for_each(|l| self.map_peer(call, l, end, live))
    }

    /// Other local PEs whose slice is mapped here (all of them unless the heap maps lazily).
    pub(crate) fn peers_mapped(&self) -> usize {
        match &self.lazy {
            Some(z) => (0..self.n_local)
                .filter(|&j| j != self.me_local && z.spans.covers(j, 1))
                .count(),
            None => self.n_local - 1,
        }
    }

    /// Per local PE, how much of its slice is mapped here; None when all of it always is.
    pub(crate) fn peer_spans(&self) -> Option<std::sync::Arc<lazy::PeerSpans>> {
        self.lazy.as_ref().map(|z| z.spans.clone())
    }

    /// Allocates `size` bytes at `align`, growing the heap collectively when needed. Returns the
    /// offset. Deterministic: same calls on every PE give the same offset.
    pub fn alloc(
        &self,
        node: &Node,
        live: &Liveness,
        call: &'static str,
        size: usize,
        align: usize,
    ) -> Result<usize> {
        if align > BASE_ALIGN {
            return Err(Error::invalid(
                call,
                format!("alignment {align} is larger than the largest supported, the heap's base alignment of {BASE_ALIGN} bytes"),
            ));
        }
        if size > self.end - self.internal || align > self.end - self.internal {
            return Err(Error::OutOfMemory {
                call,
                requested: size,
                reason: format!(
                    "{} exceeds the heap limit of {} bytes per PE; raise RSHMEM_HEAP_LIMIT",
                    if size > self.end - self.internal {
                        "the size"
                    } else {
                        "the alignment"
                    },
                    self.end - self.internal
                ),
            });
        }
        loop {
            let need = {
                let mut a = self.alloc.write().map_err(|_| poisoned(call))?;
                match a.alloc(size, align) {
                    Ok(off) => return Ok(off),
                    Err(n) => n.needed_end,
                }
            };
            let cur = self.mapped.load(Ordering::Acquire);
            let limit = self.floor.load(Ordering::Acquire);
            if need > limit {
                let user = if limit < self.end {
                    format!(
                        "; buffers registered with register_buffer_symmetric hold the top {} \
                         bytes of the slice (unregister them to give the heap room)",
                        self.slice - limit
                    )
                } else {
                    String::new()
                };
                return Err(Error::OutOfMemory {
                    call,
                    requested: size,
                    reason: format!(
                        "the heap limit is {} bytes per PE ({} in use{user}); raise RSHMEM_HEAP_LIMIT",
                        limit - self.internal,
                        self.in_use()
                    ),
                });
            }
            let target = round_up(need.max(cur.saturating_mul(2)), GRANULE).min(limit);
            self.grow_to(node, live, call, target, None)?;
        }
    }

    /// Frees the allocation at `off`; error if it is not one. On a host heap the pages of a
    /// free of at least [`RELEASE_MIN`] bytes go back to the system (this PE's slice only:
    /// every PE frees its own copy in the same collective call).
    pub fn free(&self, call: &'static str, off: usize) -> Result<usize> {
        let mut a = self.alloc.write().map_err(|_| poisoned(call))?;
        let n = a.free(off).ok_or_else(|| Error::NotSymmetric {
            call,
            reason: format!(
                "address {:#x} is not the start of a live allocation",
                self.my_base + off
            ),
        })?;
        self.hits.clear();
        if n >= RELEASE_MIN && matches!(self.backing, Backing::Host) {
            // Still holding the allocator's lock: nothing can be placed there meanwhile.
            if let Err(e) = host::release_pages(self.my_base + off, n) {
                tracing::warn!(target: "rshmem::heap", call, bytes = n, "returning freed pages to the system failed: {e}");
            }
        }
        Ok(n)
    }

    /// Resizes in place if possible.
    pub fn resize_in_place(&self, call: &'static str, off: usize, size: usize) -> Result<bool> {
        if size > self.end - self.internal {
            return Err(Error::OutOfMemory {
                call,
                requested: size,
                reason: format!(
                    "exceeds the heap limit of {} bytes per PE; raise RSHMEM_HEAP_LIMIT",
                    self.end - self.internal
                ),
            });
        }
        let mut a = self.alloc.write().map_err(|_| poisoned(call))?;
        let ok = a.resize_in_place(off, size);
        if ok {
            self.hits.clear();
        }
        Ok(ok)
    }

    /// Size of the live allocation at exactly `off`.
    pub fn size_of(&self, off: usize) -> Option<usize> {
        self.alloc.read().ok()?.size_of(off)
    }

    /// Bytes allocated by the user.
    pub fn in_use(&self) -> usize {
        self.alloc.read().map(|a| a.in_use()).unwrap_or(0)
    }

    /// Start of my slice.
    #[inline]
    pub fn my_base(&self) -> usize {
        self.my_base
    }

    /// Bytes mapped per slice.
    pub fn mapped(&self) -> usize {
        self.mapped.load(Ordering::Acquire)
    }

    /// The mapped size as a shared counter, for the TCP service threads' range checks.
    pub(crate) fn mapped_handle(&self) -> std::sync::Arc<AtomicUsize> {
        self.mapped.clone()
    }

    /// Bytes of address space per PE (the heap limit plus the internal area).
    pub fn slice(&self) -> usize {
        self.slice
    }

    /// Start of local PE `j`'s slice (same value in every process of the host).
    #[inline]
    pub fn slice_base(&self, local: usize) -> usize {
        self.res.base + local * self.slice
    }

    /// Address of offset `off` in local PE `j`'s slice.
    #[inline]
    pub fn peer_addr(&self, local: usize, off: usize) -> usize {
        self.res.base + local * self.slice + off
    }

    /// Bytes at the start of every slice that belong to the runtime: the user heap starts at
    /// this offset.
    #[inline]
    pub fn internal(&self) -> usize {
        self.internal
    }

    /// Address of a runtime-internal object in local PE `j`'s slice.
    #[inline]
    pub fn internal_addr(&self, local: usize, off: usize) -> usize {
        debug_assert!(off < self.internal);
        self.peer_addr(local, off)
    }

    /// The offset of `[addr, addr+len)` when it lies in one of the live allocations the range
    /// cache remembers (the hot path of [`check_range`](Heap::check_range)); None when the cache
    /// cannot tell (the slow check may still accept it).
    #[inline(always)]
    pub fn cached_offset(&self, addr: usize, len: usize) -> Option<usize> {
        self.hits.hit(addr, len).then(|| addr - self.my_base)
    }

    /// Checks that `[addr, addr+len)` lies inside one live allocation of my heap and returns its
    /// offset. `len == 0` only checks the address.
    #[inline]
    pub fn check_range(&self, call: &'static str, addr: usize, len: usize) -> Result<usize> {
        if self.hits.hit(addr, len) {
            return Ok(addr - self.my_base);
        }
        self.check_range_slow(call, addr, len)
    }

    #[cold]
    fn check_range_slow(&self, call: &'static str, addr: usize, len: usize) -> Result<usize> {
        let mapped = self.mapped();
        if addr >= self.my_base + mapped && addr < self.my_base + self.slice {
            if let Some(off) = self.check_user_range(call, addr, len)? {
                return Ok(off);
            }
        }
        if addr < self.my_base + self.internal || addr >= self.my_base + mapped {
            return Err(Error::NotSymmetric {
                call,
                reason: format!(
                    "address {addr:#x} is outside this PE's symmetric heap [{:#x}, {:#x})",
                    self.my_base + self.internal,
                    self.my_base + mapped
                ),
            });
        }
        let off = addr - self.my_base;
        let a = self.alloc.read().map_err(|_| poisoned(call))?;
        let Some((o, l)) = a.find(off) else {
            return Err(Error::NotSymmetric {
                call,
                reason: format!("address {addr:#x} is inside the heap but not inside a live allocation (freed?)"),
            });
        };
        if len > o + l - off {
            return Err(Error::NotSymmetric {
                call,
                reason: format!(
                    "range of {len} bytes at {addr:#x} runs {} bytes past the end of its allocation ({l} bytes at {:#x})",
                    off + len - (o + l),
                    self.my_base + o
                ),
            });
        }
        // Still holding the allocator's lock: no free can remove the allocation meanwhile.
        self.hits.insert(self.my_base + o, self.my_base + o + l);
        drop(a);
        Ok(off)
    }

    /// The offset of `[addr, addr+len)` when `addr` lies in a registered user buffer (None:
    /// in none); an error when the range runs past the buffer's end.
    fn check_user_range(
        &self,
        call: &'static str,
        addr: usize,
        len: usize,
    ) -> Result<Option<usize>> {
        let off = addr - self.my_base;
        let user = self.user.lock().map_err(|_| poisoned(call))?;
        let Some(r) = user.iter().find(|r| off >= r.off && off < r.off + r.len) else {
            return Ok(None);
        };
        if len > r.off + r.len - off {
            return Err(Error::NotSymmetric {
                call,
                reason: format!(
                    "range of {len} bytes at {addr:#x} runs {} bytes past the end of its registered buffer ({} bytes at {:#x})",
                    off + len - (r.off + r.len),
                    r.len,
                    self.my_base + r.off
                ),
            });
        }
        Ok(Some(off))
    }

    /// Where a user buffer of `len` bytes mapped at `align` goes: the highest free place at
    /// the top of the slice, above the mapped heap. Deterministic (the same on every PE that
    /// registered and unregistered the same buffers).
    pub(crate) fn user_offset(
        &self,
        call: &'static str,
        len: usize,
        align: usize,
    ) -> Result<usize> {
        let user = self.user.lock().map_err(|_| poisoned(call))?;
        let low = self.mapped().max(self.internal);
        let taken: Vec<(usize, usize)> = user.iter().map(|r| (r.off, r.len)).collect();
        place_user(&taken, self.slice, low, len, align.max(GRANULE)).ok_or_else(|| {
            Error::OutOfMemory {
                call,
                requested: len,
                reason: format!(
                    "the free address space between the mapped heap ({} bytes) and the registered \
                 buffers at the top of the slice ({} bytes per PE in all) is too small; raise \
                 RSHMEM_HEAP_LIMIT, or register before the heap grows",
                    low, self.slice
                ),
            }
        })
    }

    /// Maps a user's buffer (retained as `a`) at offset `off` of my slice and every local
    /// peer's buffer at `off` of theirs (their fds come over the host's sockets). Collective
    /// over the host's PEs, which agreed on `off` and `len` beforehand. On failure nothing stays
    /// mapped here.
    pub(crate) fn map_user(
        &self,
        node: &Node,
        live: &Liveness,
        call: &'static str,
        a: &crate::cuda::UserAllocation,
        off: usize,
        len: usize,
    ) -> Result<()> {
        let Backing::Cuda(g) = &self.backing else {
            return Err(Error::Unsupported {
                call,
                reason: "symmetric registration of user buffers needs the GPU backend".into(),
            });
        };
        let mut chunk_no = self.grow_lock.lock().map_err(|_| poisoned(call))?;
        let mut maps = Vec::with_capacity(self.n_local);
        let own = crate::cuda::map_user_allocation(call, g, a, self.my_base + off, len);
        if own.is_ok() {
            maps.push((self.my_base + off, len));
        }
        // The exchange happens even when the own mapping failed: the local peers wait for it.
        let peers = node.exchange_fds(call, USER_TAG | *chunk_no, &a.fd, live);
        let r = own.and_then(|()| {
            for (j, pfd) in peers?.iter().enumerate() {
                if let Some(pfd) = pfd {
                    let at = self.res.base + j * self.slice + off;
                    crate::cuda::import_user_allocation(call, g, pfd, at, len)?;
                    maps.push((at, len));
                }
            }
            Ok(())
        });
        *chunk_no += 1;
        if let Err(e) = r {
            for &(at, l) in &maps {
                crate::cuda::unmap(at, l);
            }
            return Err(e);
        }
        let mut user = self.user.lock().map_err(|_| poisoned(call))?;
        let at = user.partition_point(|r| r.off < off);
        user.insert(at, UserRegion { off, len, maps });
        self.floor
            .store(self.end.min(user[0].off), Ordering::Release);
        tracing::debug!(target: "rshmem::heap", call, off, len, "user buffer mapped");
        Ok(())
    }

    /// Unmaps the user buffer at offset `off` (every local PE's copy) and gives its address
    /// space back. Call only when no PE accesses it any more.
    pub(crate) fn unmap_user(&self, call: &'static str, off: usize) -> Result<()> {
        let mut user = self.user.lock().map_err(|_| poisoned(call))?;
        let Some(i) = user.iter().position(|r| r.off == off) else {
            return Err(Error::invalid(
                call,
                format!("no registered buffer at offset {off:#x}"),
            ));
        };
        let r = user.remove(i);
        if let Backing::Cuda(g) = &self.backing {
            let _ = g.sync(call);
        }
        for &(at, l) in &r.maps {
            crate::cuda::unmap(at, l);
        }
        self.floor.store(
            user.first().map_or(self.end, |r| self.end.min(r.off)),
            Ordering::Release,
        );
        Ok(())
    }

    /// The registered user buffer containing my address `addr`: (offset, length).
    pub(crate) fn user_region(&self, addr: usize) -> Option<(usize, usize)> {
        let off = addr.checked_sub(self.my_base)?;
        let user = self.user.lock().ok()?;
        user.iter()
            .find(|r| off >= r.off && off < r.off + r.len)
            .map(|r| (r.off, r.len))
    }

    /// Lowest offset of a registered user buffer in a slice, 0 when there is none (the device
    /// state's `heap_reg_start`).
    pub(crate) fn user_start(&self) -> usize {
        self.user
            .lock()
            .ok()
            .and_then(|u| u.first().map(|r| r.off))
            .unwrap_or(0)
    }

    /// The GPU of a GPU heap.
    pub fn gpu(&self) -> Option<&std::sync::Arc<crate::cuda::Gpu>> {
        match &self.backing {
            Backing::Cuda(g) => Some(g),
            Backing::Host => None,
        }
    }

    /// Start of local PE 0's slice.
    pub fn base(&self) -> usize {
        self.res.base
    }

    /// The local index of this PE.
    pub fn me_local(&self) -> usize {
        self.me_local
    }

    /// PEs sharing this heap reservation.
    pub fn n_local(&self) -> usize {
        self.n_local
    }
}

impl Drop for Heap {
    fn drop(&mut self) {
        if let Backing::Cuda(g) = &self.backing {
            let _ = g.sync("finalize");
            if let Ok(maps) = self.gpu_maps.lock() {
                for &(a, l) in maps.iter() {
                    crate::cuda::unmap(a, l);
                }
            }
            if let Ok(user) = self.user.lock() {
                for r in user.iter() {
                    for &(a, l) in &r.maps {
                        crate::cuda::unmap(a, l);
                    }
                }
            }
        }
    }
}

/// Settles whether a heap maps its local peers lazily: every PE of the job tells whether it
/// asks for it (with a host heap) and its first chunk's descriptor number; the node's PEs map
/// lazily when all of them ask and they share a PID namespace (the same answer on each of them).
fn settle_lazy(
    boot: &dyn Bootstrap,
    node: &Node,
    want: bool,
    first: Option<&OwnedFd>,
    label: &'static str,
) -> Result<Option<lazy::Lazy>> {
    let ((_, _), one_pidns) = node.process(node.me);
    let num = first.map_or(-1, |f| f.as_raw_fd());
    let mut mine = [0u8; 5];
    mine[0] = u8::from(want && first.is_some() && one_pidns);
    mine[1..].copy_from_slice(&num.to_le_bytes());
    let all = boot.allgather(&mine)?;
    let local: Vec<&Vec<u8>> = node.pes.iter().map(|&p| &all[p]).collect();
    if local.iter().any(|b| b.len() != 5 || b[0] != 1) {
        return Ok(None);
    }
    let first_fd = local
        .iter()
        .map(|b| i32::from_le_bytes([b[1], b[2], b[3], b[4]]))
        .collect();
    let procs = (0..node.len()).map(|j| node.process(j).0).collect();
    Ok(Some(lazy::Lazy::new(
        node.me,
        first_fd,
        procs,
        node.pes.clone(),
        label,
        node.timeout(),
    )))
}

/// Where a user buffer of `len` bytes goes in a slice of `slice` bytes whose heap is mapped up
/// to `low`, given the buffers already there (`taken`: (offset, length), sorted by offset): the
/// highest `align`-aligned place at or above `low` that overlaps none of them. None: no room.
fn place_user(
    taken: &[(usize, usize)],
    slice: usize,
    low: usize,
    len: usize,
    align: usize,
) -> Option<usize> {
    let fits = |hi: usize, lo: usize| -> Option<usize> {
        let start = hi.checked_sub(len)? & !(align - 1);
        (start >= lo).then_some(start)
    };
    let mut hi = slice;
    for &(off, l) in taken.iter().rev() {
        if let Some(start) = fits(hi, (off + l).max(low)) {
            return Some(start);
        }
        hi = off;
    }
    fits(hi, low)
}

/// A user's buffer mapped at the top of every local slice.
struct UserRegion {
    /// Offset in every slice.
    off: usize,
    len: usize,
    /// The mappings in this process (mine and the local peers'), unmapped when it goes.
    maps: Vec<(usize, usize)>,
}

fn poisoned(call: &'static str) -> Error {
    Error::State {
        call,
        reason: "the heap lock is poisoned (another thread panicked inside rshmem)".into(),
    }
}

#[cfg(test)]
mod tests {
    use super::HitCache;

    #[test]
    fn user_buffers_stack_down_from_the_top_and_reuse_holes() {
        use super::place_user;
        const M: usize = 1 << 20;
        let slice = 1024 * M;
        // Empty: at the top, aligned.
        assert_eq!(
            place_user(&[], slice, 64 * M, 4 * M, 2 * M),
            Some(slice - 4 * M)
        );
        assert_eq!(
            place_user(&[], slice, 64 * M, 3 * M, 2 * M),
            Some(slice - 4 * M)
        );
        // Below the lowest one.
        let taken = [(slice - 4 * M, 4 * M)];
        assert_eq!(
            place_user(&taken, slice, 64 * M, 2 * M, 2 * M),
            Some(slice - 6 * M)
        );
        // A hole left by an unregistered buffer is reused when it fits, from the top.
        let taken = [(slice - 10 * M, 2 * M), (slice - 2 * M, 2 * M)];
        assert_eq!(
            place_user(&taken, slice, 64 * M, 4 * M, 2 * M),
            Some(slice - 6 * M)
        );
        assert_eq!(
            place_user(&taken, slice, 64 * M, 8 * M, 2 * M),
            Some(slice - 18 * M)
        );
        // Never into the mapped heap.
        assert_eq!(place_user(&[], slice, slice - 2 * M, 4 * M, 2 * M), None);
        assert_eq!(place_user(&[], 4 * M, 0, 8 * M, 2 * M), None);
        let taken = [(slice - 4 * M, 4 * M)];
        assert_eq!(place_user(&taken, slice, slice - 6 * M, 4 * M, 2 * M), None);
    }

    #[test]
    fn hit_cache_remembers_and_forgets() {
        let c = HitCache::new();
        assert!(!c.hit(0, 0), "an empty cache matches nothing");
        assert!(!c.hit(0, 8));
        c.insert(0x1000, 0x2000);
        assert!(c.hit(0x1000, 0x1000));
        assert!(c.hit(0x1ff8, 8));
        assert!(c.hit(0x1fff, 0));
        assert!(!c.hit(0x2000, 0), "the end is not inside");
        assert!(!c.hit(0x1ff8, 9), "a range running past the end");
        assert!(!c.hit(0xff8, 16), "a range starting before");
        for i in 1..super::HIT_CACHE {
            c.insert(0x10000 * (i + 1), 0x10000 * (i + 1) + 64);
        }
        assert!(
            c.hit(0x1800, 8),
            "still one of the last {}",
            super::HIT_CACHE
        );
        c.insert(0x100000, 0x100040);
        assert!(!c.hit(0x1800, 8), "the oldest entry was dropped");
        assert!(c.hit(0x100000, 64));
        c.clear();
        assert!(!c.hit(0x100000, 64), "clear forgets every allocation");
    }

    #[test]
    fn hit_cache_readers_never_see_torn_entries() {
        // Writers alternate two entries whose halves do not combine into a valid range that
        // covers the probe; readers must never report a hit for it.
        let c = HitCache::new();
        let stop = std::sync::atomic::AtomicBool::new(false);
        std::thread::scope(|s| {
            s.spawn(|| {
                for i in 0..20_000 {
                    if i % 2 == 0 {
                        c.insert(0x1000, 0x1100);
                    } else {
                        c.insert(0x8000, 0x8100);
                    }
                    if i % 7 == 0 {
                        c.clear();
                    }
                }
                stop.store(true, std::sync::atomic::Ordering::Release);
            });
            s.spawn(|| {
                while !stop.load(std::sync::atomic::Ordering::Acquire) {
                    // (0x1000, 0x8100) would be a torn entry covering 0x4000.
                    assert!(!c.hit(0x4000, 8));
                }
            });
        });
    }
}
