//! Transports: how bytes reach a PE's copy of a symmetric object.
//!
//! Every transport implements [`TransportOps`]: it says what it can do in [`Caps`] bits and offers
//! the same operations (memory registration, put, get, atomics, fence, quiet, progress) on the
//! addresses it understands ([`TransportOps::Addr`]). Connecting is collective and happens when a
//! transport is built at init: the local ones share the heap's chunks as the heap maps them, TCP
//! connects in `tcp::Net::establish`, verbs in `remote::Remotes::connect` (queue pairs, keys).
//!
//! * [`shm`] — CPU load/store into memory shared by the host's processes (host heap).
//! * [`p2p`] — GPU heap: the copy engine (`cuMemcpy*Async` on rshmem's stream) for host-issued
//!   puts and gets to any GPU of the host, and small kernels for host-issued atomics.
//! * [`tcp`] — PEs that share no memory with this one (other hosts, or every other PE under
//!   `RSHMEM_DISABLE_P2P=1`): requests applied by a service thread on the target.
//! * `verbs` (cargo feature `verbs`) — InfiniBand/RoCE RC queue pairs to PEs on other hosts.
//! * [`ucx`] — PEs on other hosts through UCX's UCP API (libucp opened at run time).
//!
//! The two local transports take load/store addresses (the heap is mapped in this process);
//! the remote ones take a [`RemoteAddr`] (PE, heap, offset). Each PE pair is served by the best
//! transport that reaches it: [`Transport`] (the transport of this host's heap) for the PEs of this
//! host, and the remote transport chosen by [`select::plan`] for the others. Dispatch is static
//! (enums with `#[inline]` matches), so a put to a PE of this host costs what a `memcpy` does.
//!
//! The host API ([`crate::World`]) checks arguments and translates addresses into a
//! [`crate::world::Target`]: a load/store address handled by [`Transport`], or a (PE, offset)
//! handled by a remote transport.

pub mod key;
pub mod p2p;
pub(crate) mod remote;
pub mod select;
pub mod shm;
pub mod tcp;
pub mod ucx;
pub mod verbs;

use crate::error::Result;

pub use tcp::HeapId;

/// What a transport can do, as bits (like NVSHMEM's transport capability flags).
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Caps(u32);

impl Caps {
    /// No capability.
    pub const NONE: Caps = Caps(0);
    /// The target's heap is mapped in this process: `World::ptr` gives an address that loads and
    /// stores reach (from the CPU for host heaps, from kernels for GPU heaps).
    pub const LOAD_STORE: Caps = Caps(1);
    /// One-sided put and get.
    pub const RMA: Caps = Caps(1 << 1);
    /// One-sided atomics on 4- and 8-byte words, atomic with respect to the target's own atomics
    /// on the same word.
    pub const AMO: Caps = Caps(1 << 2);
    /// Operations to one PE are applied in the order they were issued (so `fence` costs nothing
    /// and the data of `put_signal` lands before its signal without extra work).
    pub const ORDERED: Caps = Caps(1 << 3);

    const NAMES: [(Caps, &'static str); 4] = [
        (Caps::LOAD_STORE, "load_store"),
        (Caps::RMA, "rma"),
        (Caps::AMO, "amo"),
        (Caps::ORDERED, "ordered"),
    ];

    /// The raw bits.
    pub const fn bits(self) -> u32 {
        self.0
    }

    /// True if every bit of `other` is set in `self`.
    pub const fn contains(self, other: Caps) -> bool {
        self.0 & other.0 == other.0
    }

    /// The bits of both.
    pub const fn union(self, other: Caps) -> Caps {
        Caps(self.0 | other.0)
    }
}

impl std::ops::BitOr for Caps {
    type Output = Caps;
    fn bitor(self, rhs: Caps) -> Caps {
        self.union(rhs)
    }
}

impl std::fmt::Debug for Caps {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Caps({self})")
    }
}

impl std::fmt::Display for Caps {
    /// The names of the set bits joined by `|` (`none` when empty).
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let names: Vec<&str> = Self::NAMES
            .iter()
            .filter(|(c, _)| self.contains(*c))
            .map(|(_, n)| *n)
            .collect();
        if names.is_empty() {
            f.write_str("none")
        } else {
            f.write_str(&names.join("|"))
        }
    }
}

/// Which transport serves a PE, and what it can do (see [`crate::World::transport`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TransportInfo {
    /// `shm`, `p2p`, `tcp`, `verbs` or `ucx`.
    pub name: &'static str,
    /// Its capability bits.
    pub caps: Caps,
}

pub use crate::wire::{Amo, AmoOp};

/// A symmetric location on a PE reached by a remote transport: the same offset names the same
/// object on every PE because allocation is deterministic.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RemoteAddr {
    /// The target PE.
    pub pe: usize,
    /// Which of its heaps.
    pub heap: HeapId,
    /// Offset from the start of that heap (this PE's slice of it).
    pub off: usize,
}

impl RemoteAddr {
    /// Offset `off` of PE `pe`'s user heap.
    #[inline]
    pub const fn user(pe: usize, off: usize) -> Self {
        RemoteAddr {
            pe,
            heap: HeapId::User,
            off,
        }
    }

    /// Offset `off` of PE `pe`'s control heap (runtime-internal words).
    #[inline]
    pub const fn ctrl(pe: usize, off: usize) -> Self {
        RemoteAddr {
            pe,
            heap: HeapId::Ctrl,
            off,
        }
    }

    /// Offset `off` of PE `pe`'s copy of the symmetric region registered `index`-th
    /// ([`crate::region`]; `off` below [`REGION_MAX_LEN`]).
    #[inline]
    pub const fn region(pe: usize, index: usize, off: usize) -> Self {
        RemoteAddr {
            pe,
            heap: HeapId::Region,
            off: (index << REGION_SHIFT) | off,
        }
    }
}

/// A [`HeapId::Region`] offset is `index << REGION_SHIFT | offset in the region`: each
/// region has its own range of offsets, so memory keys and the targets' checks tell regions
/// apart by offset alone, as they tell heap chunks apart.
pub const REGION_SHIFT: u32 = 40;

/// The largest symmetric region the remote transports reach (1 TiB).
pub const REGION_MAX_LEN: usize = 1 << REGION_SHIFT;

/// This PE's symmetric regions as the targets of the remote transports see them: the `k`-th
/// entry is the range (start, length) this PE registered `k`-th, or None where it took part
/// in a registration without memory. Shared by `World::register_region` (which adds to it,
/// every PE in the same order, before any peer may address the region) and the transports'
/// target sides (TCP service threads, UCX's atomic handler), which resolve a
/// [`HeapId::Region`] offset through it and refuse anything outside one registered range.
#[derive(Debug, Default)]
pub struct RegionTargets {
    list: std::sync::RwLock<Vec<Option<(usize, usize)>>>,
}

impl RegionTargets {
    /// Appends this PE's range for the next registration; its index.
    pub(crate) fn add(&self, range: Option<(usize, usize)>) -> usize {
        let mut l = self.list.write().unwrap_or_else(|p| p.into_inner());
        l.push(range);
        l.len() - 1
    }

    /// This PE's address of `[off, off+len)` for a [`HeapId::Region`] offset, if the range lies
    /// inside one region this PE registered memory for.
    pub fn resolve(&self, off: u64, len: u64) -> Option<usize> {
        let index = usize::try_from(off >> REGION_SHIFT).ok()?;
        let at = usize::try_from(off & (REGION_MAX_LEN as u64 - 1)).ok()?;
        let len = usize::try_from(len).ok()?;
        let l = self.list.read().unwrap_or_else(|p| p.into_inner());
        let (start, size) = (*l.get(index)?)?;
        (at.checked_add(len)? <= size).then_some(start + at)
    }
}

/// A range of a heap that became accessible (at init, or when the heap grew), for the remote
/// transports' registration (UCX `ucp_mem_map`, verbs memory regions).
#[derive(Debug, Clone)]
#[cfg_attr(not(feature = "verbs"), allow(dead_code))]
pub struct Chunk {
    /// Which heap.
    pub heap: HeapId,
    /// This PE's address of offset 0 of the heap.
    pub base: usize,
    /// First offset of the new range.
    pub start: usize,
    /// Length of the new range in bytes.
    pub len: usize,
    /// The GPU the memory belongs to (None for host memory).
    pub gpu: Option<std::sync::Arc<crate::cuda::Gpu>>,
}

impl Chunk {
    /// This PE's address of the new range (for a region: `base` is its start minus the
    /// region's first offset, so the sum wraps).
    pub fn addr(&self) -> usize {
        self.base.wrapping_add(self.start)
    }
}

/// The operations every transport offers, exactly what `World` calls through it (set-up and
/// heap registration are each transport's own, driven by `remote.rs`). Arguments are checked
/// by the caller (`World`): the ranges lie inside live allocations of mapped heaps, words are
/// aligned, local buffers are live for the length given.
/// A transport's identity: what [`TransportOps::kind`] returns.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Kind {
    /// A short name (`shm`, `p2p`, `tcp`, `ucx`, `verbs`) for logs and errors.
    pub name: &'static str,
    /// What the transport can do.
    pub caps: Caps,
}

impl Kind {
    /// The transport called `name` that can do `caps`.
    pub const fn new(name: &'static str, caps: Caps) -> Kind {
        Kind { name, caps }
    }
}

pub trait TransportOps {
    /// How this transport names a target: a load/store address, or a [`RemoteAddr`].
    type Addr: Copy;

    /// Which transport this is: its name and what it can do.
    fn kind(&self) -> Kind;

    /// A short name (`shm`, `p2p`, `tcp`, `ucx`, `verbs`) for logs and errors.
    fn name(&self) -> &'static str {
        self.kind().name
    }

    /// What this transport can do.
    fn caps(&self) -> Caps {
        self.kind().caps
    }

    /// Copies `n` bytes from local memory `src` to `dst`; `src` may be reused on return.
    fn put(&self, call: &'static str, dst: Self::Addr, src: *const u8, n: usize) -> Result<()>;

    /// Copies `n` bytes from `src` into local memory `dst`, complete on return.
    fn get(&self, call: &'static str, dst: *mut u8, src: Self::Addr, n: usize) -> Result<()>;

    /// [`put`](TransportOps::put) for a caller that sends many small requests in a row (the
    /// proxy): `src` may be reused on return, but the transport may hold the data back to send
    /// it with later requests, until [`push`](TransportOps::push), the next round trip to that
    /// PE or [`quiet`](TransportOps::quiet). Order with later requests to the same PE is kept.
    /// The default is the plain put.
    fn put_batched(
        &self,
        call: &'static str,
        dst: Self::Addr,
        src: *const u8,
        n: usize,
    ) -> Result<()> {
        self.put(call, dst, src, n)
    }

    /// Sends what [`put_batched`](TransportOps::put_batched) held back (not waiting for it to
    /// complete). The default has nothing held back.
    fn push(&self, call: &'static str) -> Result<()> {
        let _ = call;
        Ok(())
    }

    /// Starts [`put`](TransportOps::put) without waiting until `src` has been read: the put
    /// may read `src` until the next [`quiet`](TransportOps::quiet) completes it. The default
    /// is the blocking put (a transport that copies the source at once gains nothing).
    ///
    /// # Safety
    /// `src..src+n` stays readable and unmodified until this transport's next `quiet` returns.
    unsafe fn put_nbi(
        &self,
        call: &'static str,
        dst: Self::Addr,
        src: *const u8,
        n: usize,
    ) -> Result<()> {
        self.put(call, dst, src, n)
    }

    /// Starts [`get`](TransportOps::get) without waiting for the data: `dst` holds it after the
    /// next [`quiet`](TransportOps::quiet). The default is the blocking get.
    ///
    /// # Safety
    /// `dst..dst+n` stays writable, and is neither read nor written by anyone else, until this
    /// transport's next `quiet` returns.
    unsafe fn get_nbi(
        &self,
        call: &'static str,
        dst: *mut u8,
        src: Self::Addr,
        n: usize,
    ) -> Result<()> {
        self.get(call, dst, src, n)
    }

    /// Applies the atomic `a` to the aligned word of `a.size` (4 or 8) bytes at `at`; returns
    /// the old value.
    fn amo(&self, call: &'static str, at: Self::Addr, a: Amo) -> Result<u64>;

    /// Applies `a` like [`amo`](TransportOps::amo) for a caller that does not read the old
    /// value (`atomic_add`, `atomic_set`, ...). A transport may post it: then it is complete at
    /// the next [`quiet`](TransportOps::quiet), and on an [`Caps::ORDERED`] transport applied
    /// after everything issued before it to the same PE. The default waits for `amo`.
    fn amo_nf(&self, call: &'static str, at: Self::Addr, a: Amo) -> Result<()> {
        self.amo(call, at, a).map(drop)
    }

    /// Stores the 8-byte `value` at the aligned word `at` with release semantics: it lands after
    /// every put issued before it to the same PE. Not acknowledged (use `quiet` to complete it).
    /// The default is an atomic set.
    fn store(&self, call: &'static str, at: Self::Addr, value: u64) -> Result<()> {
        self.amo(call, at, Amo::set64(value)).map(drop)
    }

    /// Orders the puts and atomics issued before it to each PE before those issued after it.
    fn fence(&self, call: &'static str) -> Result<()>;

    /// Completes every operation this PE issued through this transport.
    fn quiet(&self, call: &'static str) -> Result<()>;
}

/// The transport of this host's heap: load/store addresses of PEs that share this host.
#[derive(Debug)]
pub enum Transport {
    /// Host shared memory ([`shm::Shm`]).
    Shm,
    /// GPU memory over NVLink/PCIe.
    P2p(p2p::P2p),
}

impl Transport {
    /// Copies `n` bytes between two (translated, checked) heap addresses.
    pub fn copy(&self, call: &'static str, dst: usize, src: usize, n: usize) -> Result<()> {
        match self {
            Transport::Shm => shm::Shm.put(call, dst, src as *const u8, n),
            Transport::P2p(p) => p.copy(call, dst, src, n),
        }
    }

    /// Sets `n` bytes at a (translated, checked) heap address to zero.
    pub fn zero(&self, call: &'static str, dst: usize, n: usize) -> Result<()> {
        match self {
            Transport::Shm => {
                // SAFETY: the range was checked against a live allocation of a mapped heap.
                unsafe { std::ptr::write_bytes(dst as *mut u8, 0, n) };
                Ok(())
            }
            Transport::P2p(p) => p.zero(call, dst, n),
        }
    }

    /// Reads the aligned word of `size` bytes at `addr` with acquire semantics (for waits).
    #[inline]
    pub fn load(&self, call: &'static str, addr: usize, size: usize) -> Result<u64> {
        self.amo(call, addr, Amo::fetch(size))
    }

    /// True if loads of heap words are cheap (waits may spin on them).
    pub fn cheap_loads(&self) -> bool {
        matches!(self, Transport::Shm)
    }

    /// Completes every operation this PE issued.
    #[inline]
    pub fn quiet(&self, call: &'static str) -> Result<()> {
        std::sync::atomic::fence(std::sync::atomic::Ordering::SeqCst);
        match self {
            Transport::Shm => Ok(()),
            Transport::P2p(p) => p.quiet(call),
        }
    }
}

impl TransportOps for Transport {
    type Addr = usize;

    fn kind(&self) -> Kind {
        match self {
            Transport::Shm => shm::Shm.kind(),
            Transport::P2p(p) => p.kind(),
        }
    }

    /// Copies `n` bytes from local host memory `src` to the (translated, checked) address `dst`.
    #[inline]
    fn put(&self, call: &'static str, dst: usize, src: *const u8, n: usize) -> Result<()> {
        match self {
            Transport::Shm => shm::Shm.put(call, dst, src, n),
            Transport::P2p(p) => p.put(call, dst, src, n),
        }
    }

    /// Copies `n` bytes from the (translated, checked) address `src` into local host memory.
    #[inline]
    fn get(&self, call: &'static str, dst: *mut u8, src: usize, n: usize) -> Result<()> {
        match self {
            Transport::Shm => shm::Shm.get(call, dst, src, n),
            Transport::P2p(p) => p.get(call, dst, src, n),
        }
    }

    /// Applies `a` to the aligned word at `addr`; returns the old value.
    #[inline]
    fn amo(&self, call: &'static str, addr: usize, a: Amo) -> Result<u64> {
        match self {
            Transport::Shm => shm::Shm.amo(call, addr, a),
            Transport::P2p(p) => p2p_amo(p, call, addr, a.op, a.size, a.value, a.cond),
        }
    }

    fn fence(&self, call: &'static str) -> Result<()> {
        match self {
            Transport::Shm => shm::Shm.fence(call),
            Transport::P2p(p) => p.fence(call),
        }
    }

    fn quiet(&self, call: &'static str) -> Result<()> {
        Transport::quiet(self, call)
    }
}

/// [`Transport::amo`] on a GPU heap, out of line and with the operand's fields as scalars: the
/// shared-memory path then builds no operand block in memory (it did on every CPU atomic).
#[cold]
#[inline(never)]
fn p2p_amo(
    p: &p2p::P2p,
    call: &'static str,
    addr: usize,
    op: AmoOp,
    size: usize,
    value: u64,
    cond: u64,
) -> Result<u64> {
    TransportOps::amo(p, call, addr, Amo::new(op, size, value, cond))
}

/// A remote transport serving some PE: static dispatch over the built-in ones.
#[derive(Clone, Copy)]
pub enum RemoteRef<'a> {
    /// The TCP transport.
    Tcp(&'a tcp::Net),
    /// The verbs transport.
    #[cfg(feature = "verbs")]
    Verbs(&'a verbs::Verbs),
    /// The UCX transport.
    Ucx(&'a ucx::Ucx),
}

macro_rules! remote_dispatch {
    ($self:ident, $t:ident => $e:expr) => {
        match $self {
            RemoteRef::Tcp($t) => $e,
            #[cfg(feature = "verbs")]
            RemoteRef::Verbs($t) => $e,
            RemoteRef::Ucx($t) => $e,
        }
    };
}

/// The methods of [`TransportOps`] for [`RemoteRef`]: each passes its arguments on to the same
/// method of the transport the reference holds (an `unsafe` one under the caller's contract).
/// A method added to the trait belongs in this list too: one with a default body left out
/// would give `RemoteRef` the default instead of the held transport's own.
macro_rules! forward_to_remote {
    (
        $(fn $name:ident(&self $(, $arg:ident: $ty:ty)*) -> $ret:ty;)+
        unsafe {
            $(fn $uname:ident(&self $(, $uarg:ident: $uty:ty)*) -> $uret:ty;)+
        }
    ) => {
        $(
            fn $name(&self $(, $arg: $ty)*) -> $ret {
                remote_dispatch!(self, t => TransportOps::$name(*t $(, $arg)*))
            }
        )+
        $(
            unsafe fn $uname(&self $(, $uarg: $uty)*) -> $uret {
                // SAFETY: the caller's contract, passed on.
                remote_dispatch!(self, t => unsafe { TransportOps::$uname(*t $(, $uarg)*) })
            }
        )+
    };
}

impl TransportOps for RemoteRef<'_> {
    type Addr = RemoteAddr;

    forward_to_remote! {
        fn kind(&self) -> Kind;
        fn put(&self, call: &'static str, dst: RemoteAddr, src: *const u8, n: usize) -> Result<()>;
        fn put_batched(&self, call: &'static str, dst: RemoteAddr, src: *const u8, n: usize)
            -> Result<()>;
        fn push(&self, call: &'static str) -> Result<()>;
        fn get(&self, call: &'static str, dst: *mut u8, src: RemoteAddr, n: usize) -> Result<()>;
        fn amo(&self, call: &'static str, at: RemoteAddr, a: Amo) -> Result<u64>;
        fn amo_nf(&self, call: &'static str, at: RemoteAddr, a: Amo) -> Result<()>;
        fn store(&self, call: &'static str, at: RemoteAddr, value: u64) -> Result<()>;
        fn fence(&self, call: &'static str) -> Result<()>;
        fn quiet(&self, call: &'static str) -> Result<()>;
        unsafe {
            fn put_nbi(&self, call: &'static str, dst: RemoteAddr, src: *const u8, n: usize)
                -> Result<()>;
            fn get_nbi(&self, call: &'static str, dst: *mut u8, src: RemoteAddr, n: usize)
                -> Result<()>;
        }
    }
}

/// What the TCP transport can do.
pub const TCP_CAPS: Caps = Caps::RMA.union(Caps::AMO).union(Caps::ORDERED);

/// The TCP transport as a [`TransportOps`]: requests applied in order by the target's service
/// thread, so it is ordered; atomics use the target's CPU atomics.
impl TransportOps for tcp::Net {
    type Addr = RemoteAddr;

    fn kind(&self) -> Kind {
        Kind::new("tcp", TCP_CAPS)
    }

    fn put(&self, call: &'static str, dst: RemoteAddr, src: *const u8, n: usize) -> Result<()> {
        tcp::Net::put(self, call, dst, src, n, false)
    }

    fn put_batched(
        &self,
        call: &'static str,
        dst: RemoteAddr,
        src: *const u8,
        n: usize,
    ) -> Result<()> {
        // Small frames are copied into the connection's buffer, larger ones written at once.
        tcp::Net::put(self, call, dst, src, n, true)
    }

    fn push(&self, call: &'static str) -> Result<()> {
        tcp::Net::push(self, call)
    }

    fn get(&self, call: &'static str, dst: *mut u8, src: RemoteAddr, n: usize) -> Result<()> {
        tcp::Net::get(self, call, dst, src, n)
    }

    fn amo(&self, call: &'static str, at: RemoteAddr, a: Amo) -> Result<u64> {
        tcp::Net::amo(self, call, at, a)
    }

    fn amo_nf(&self, call: &'static str, at: RemoteAddr, a: Amo) -> Result<()> {
        tcp::Net::amo_nf(self, call, at, a)
    }

    fn store(&self, call: &'static str, at: RemoteAddr, value: u64) -> Result<()> {
        tcp::Net::store(self, call, at, value)
    }

    fn fence(&self, _call: &'static str) -> Result<()> {
        // One connection per peer, applied in arrival order.
        Ok(())
    }

    fn quiet(&self, call: &'static str) -> Result<()> {
        tcp::Net::quiet(self, call)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn caps_bits_are_distinct_and_named() {
        let all = [Caps::LOAD_STORE, Caps::RMA, Caps::AMO, Caps::ORDERED];
        for (i, a) in all.iter().enumerate() {
            assert_eq!(a.bits().count_ones(), 1, "{a} is one bit");
            for b in &all[i + 1..] {
                assert_eq!(a.bits() & b.bits(), 0, "{a} and {b} overlap");
            }
        }
        let c = Caps::RMA | Caps::ORDERED;
        assert!(c.contains(Caps::RMA) && c.contains(Caps::ORDERED));
        assert!(!c.contains(Caps::AMO) && !c.contains(Caps::LOAD_STORE));
        assert!(c.contains(Caps::NONE));
        assert_eq!(c.to_string(), "rma|ordered");
        assert_eq!(Caps::NONE.to_string(), "none");
        assert_eq!(
            (Caps::LOAD_STORE | Caps::RMA | Caps::AMO | Caps::ORDERED).to_string(),
            "load_store|rma|amo|ordered"
        );
    }

    /// What each built-in transport claims: shm is the only one with CPU load/store and every
    /// capability; the remote ones never claim load/store.
    #[test]
    fn transport_caps() {
        let shm = Transport::Shm;
        assert_eq!(shm.name(), "shm");
        assert_eq!(
            shm.caps(),
            Caps::LOAD_STORE | Caps::RMA | Caps::AMO | Caps::ORDERED
        );
        assert_eq!(
            p2p::CAPS,
            Caps::LOAD_STORE | Caps::RMA | Caps::AMO | Caps::ORDERED
        );
        assert_eq!(TCP_CAPS, Caps::RMA | Caps::AMO | Caps::ORDERED);
        assert!(!TCP_CAPS.contains(Caps::LOAD_STORE));
        #[cfg(feature = "verbs")]
        assert_eq!(verbs::CAPS, Caps::RMA | Caps::AMO | Caps::ORDERED);
        assert_eq!(ucx::CAPS, Caps::RMA | Caps::AMO);
    }

    #[test]
    fn heap_codes_round_trip() {
        for h in [HeapId::User, HeapId::Ctrl, HeapId::Region] {
            assert_eq!(HeapId::from_code(h as u8), Some(h));
        }
        assert_eq!(HeapId::from_code(3), None);
        assert_eq!(HeapId::Region.describe(), "symmetric regions");
    }

    #[test]
    fn amo_apply() {
        assert_eq!(AmoOp::Fetch.apply(5, 9, 0), 5);
        assert_eq!(AmoOp::Set.apply(5, 9, 0), 9);
        assert_eq!(AmoOp::Swap.apply(5, 9, 0), 9);
        assert_eq!(AmoOp::CompareSwap.apply(5, 9, 5), 9);
        assert_eq!(AmoOp::CompareSwap.apply(5, 9, 4), 5);
        assert_eq!(AmoOp::FetchAdd.apply(u64::MAX, 2, 0), 1);
        assert_eq!(AmoOp::FetchAnd.apply(0b1100, 0b1010, 0), 0b1000);
        assert_eq!(AmoOp::FetchOr.apply(0b1100, 0b1010, 0), 0b1110);
        assert_eq!(AmoOp::FetchXor.apply(0b1100, 0b1010, 0), 0b0110);
    }
}
