//! Symmetric regions: ranges of a process's own memory, outside the symmetric heap, that the
//! runtime treats as symmetric (the C library registers the program's global and static
//! variables this way).
//!
//! A region is made in two steps:
//!
//! 1. [`RegionMemory::share_in_place`] (**local**, before other threads can write the range,
//!    typically before [`crate::init`]): the range's pages are copied into a `memfd`
//!    (`MFD_CLOEXEC`) that is then mapped `MAP_SHARED | MAP_FIXED` over the same addresses,
//!    so the program sees the same contents at the same addresses.
//! 2. [`World::register_region`] (**collective**, every PE in the same order): the PEs
//!    exchange (pid, memfd, length) and each maps the copies of the PEs of its host through
//!    `/proc/<pid>/fd/<fd>`. A PE may take part without memory (`None`); its copy is then
//!    unreachable.
//!
//! From then on every call that takes a symmetric address — RMA, atomics, signals, waits,
//! team collectives, [`World::ptr`] — also accepts an address inside a registered region: an
//! address is translated by its offset from the region's start (which may differ between PEs,
//! e.g. under ASLR). The translation lives in one place, `World::region_target`, which the
//! runtime's address resolution (`World::target`, `World::remote`) consults for addresses
//! inside the registered regions' bounds.
//!
//! **The copies of PEs on other hosts** are reached through the remote transport that serves
//! each such PE: registration also exposes this PE's copy to it (UCX maps it with
//! `ucp_mem_map` and the PEs exchange its remote key; the TCP transport's targets resolve
//! region offsets through `transport::RegionTargets`), and an address inside the region
//! becomes a `transport::HeapId::Region` offset for that PE: the
//! region's index and the offset from its start. The verbs transport does not reach regions.
//! The copies of PEs that registered no memory or a different length, or that only verbs
//! reaches, are not reachable: a call that needs one fails with an [`Error::Unsupported`]
//! naming the call and the PE; nothing is written. Regions need the CPU backend (the
//! transports of the GPU backend copy GPU memory). A region stays registered until the world
//! is dropped.
//!
//! A region may describe its **objects** ([`RegionLayout::objects`]): then every access must
//! lie inside one object, and a range running past an object's end, or an address inside no
//! object, is an [`Error::NotSymmetric`] naming the call and the object. It may also name
//! **refused ranges** (inside or next to it) with the reason they are not symmetric.

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::atomic::Ordering;
use std::sync::Arc;

use crate::error::{Error, Result};
use crate::transport::select::Via;
use crate::transport::REGION_MAX_LEN;
use crate::world::{Target, World};

pub(crate) mod memory;

use memory::{refused_msg, PeerCopy, SymRegion};
pub use memory::{RegionLayout, RegionMemory, RegionObject};

impl World {
    /// **Collective.** Registers a symmetric region: `mem` (this PE's range, from
    /// [`RegionMemory::share_in_place`]; `None` to take part without one) described by
    /// `layout`. `mem` must stay alive (its memfd open) until this call returns; the mappings
    /// stay valid afterwards. Every PE makes the same registrations in the same order; the k-th region of
    /// one PE corresponds to the k-th of every other. Each PE maps the copies of the PEs of its
    /// host that registered the same length, and exposes its own copy to the remote transports
    /// (UCX, TCP) that serve PEs of other hosts; afterwards every call that takes a symmetric
    /// address accepts addresses inside the region (see the [module docs](crate::region)):
    /// one-sided calls to a PE whose copy is not reachable (no memory, another length, a PE
    /// reached through verbs) fail with [`Error::Unsupported`] naming the call and the PE.
    pub fn register_region(&self, mem: Option<&RegionMemory>, layout: RegionLayout) -> Result<()> {
        let call = "register_region";
        let supported = self.xport.cheap_loads();
        // A bad range is reported after the exchange and the sync (every PE takes part, so
        // none is left waiting); this PE then registers nothing.
        let placed = mem.map_or(Ok(()), |m| self.check_region_place(call, m));
        let mem = mem.filter(|_| placed.is_ok() && supported);
        // SAFETY: getpid has no preconditions.
        let pid = unsafe { libc::getpid() } as u64;
        // The machine, not the node: under RSHMEM_DISABLE_P2P every PE is its own node (the
        // heap goes through a remote transport), but its region is still mapped by the PEs of
        // its machine, as the C data segment always was.
        let host = {
            use std::hash::{Hash, Hasher};
            let mut h = std::hash::DefaultHasher::new();
            crate::node::host_identity(self.cfg.node_id.as_deref()).hash(&mut h);
            h.finish()
        };
        let entry: [u64; 4] = match mem {
            Some(m) => [pid, m.fd.as_raw_fd() as u64, m.len as u64, host],
            None => [pid, 0, 0, host],
        };
        let bytes: Vec<u8> = entry.iter().flat_map(|v| v.to_le_bytes()).collect();
        let all = self.boot.allgather(&bytes)?;
        if !supported {
            return Err(Error::Unsupported {
                call,
                reason: "symmetric regions need the CPU backend (host memory heap)".into(),
            });
        }
        // Exposed to the remote transports' targets before any peer can address it (the
        // sync below); the index is the same on every PE (one entry per registration).
        let range = mem.map(|m| (m.start, m.len));
        let index = self.regions.targets.add(range);
        let exposed = self
            .remotes
            .region_registered(call, self.boot.as_ref(), index, range);
        let word = |pe: usize, i: usize| -> u64 {
            let b = all.get(pe).and_then(|v| v.get(8 * i..8 * i + 8));
            b.and_then(|b| b.try_into().ok())
                .map_or(0, u64::from_le_bytes)
        };
        let mine_len = mem.as_ref().map_or(0, |m| m.len);
        let peers = (0..self.n)
            .map(|pe| {
                let Some(m) = mem else {
                    return PeerCopy::Unreachable(
                        "this PE registered no memory for the region".to_owned(),
                    );
                };
                if pe == self.me {
                    return PeerCopy::Mapped(m.start);
                }
                match word(pe, 2) as usize {
                    0 => {
                        return PeerCopy::Unreachable(format!(
                            "PE {pe} registered no memory for the region"
                        ))
                    }
                    l if l != mine_len => {
                        return PeerCopy::Unreachable(format!(
                            "PE {pe} registered {l} bytes, this PE {mine_len}"
                        ))
                    }
                    _ => {}
                }
                if word(pe, 3) == host {
                    return match map_peer(word(pe, 0), word(pe, 1), mine_len) {
                        Ok(a) => PeerCopy::Mapped(a),
                        Err(e) => {
                            PeerCopy::Unreachable(format!("mapping PE {pe}'s copy failed: {e}"))
                        }
                    };
                }
                match self.remotes.via(pe) {
                    Via::Tcp | Via::Ucx => PeerCopy::Remote,
                    Via::Verbs => PeerCopy::Unreachable(format!(
                        "PE {pe} is on another host and reached through verbs, which does not \
                         reach symmetric regions (RSHMEM_REMOTE_TRANSPORT=ucx or tcp does)"
                    )),
                    Via::Local => PeerCopy::Unreachable(format!(
                        "PE {pe} is on another host but no transport reaches it"
                    )),
                }
            })
            .collect();
        let mut objects = layout.objects;
        if let Some(objs) = &mut objects {
            objs.retain(|o| o.end > o.start);
            objs.sort_by_key(|o| o.start);
            let mut merged: Vec<RegionObject> = Vec::with_capacity(objs.len());
            for o in objs.drain(..) {
                match merged.last_mut() {
                    Some(last) if o.start < last.end => last.end = last.end.max(o.end),
                    _ => merged.push(o),
                }
            }
            *objs = merged;
        }
        let region = mem.map(|m| SymRegion {
            start: m.start,
            len: m.len,
            index,
            name: layout.name,
            objects,
            refused: layout.refused,
            peers,
            me: self.me,
        });
        // Every PE has opened the others' memfds, and exposed its copy to the remote
        // transports, before anyone may exit or address the region.
        self.sync_all_named(call)?;
        placed?;
        exposed?;
        let Some(region) = region else {
            return Ok(());
        };
        let mut list = self
            .regions
            .list
            .write()
            .map_err(|_| region_poisoned(call))?;
        list.push(Arc::new(region));
        let lo = list
            .iter()
            .flat_map(|r| std::iter::once(r.start).chain(r.refused.iter().map(|x| x.start)))
            .min()
            .unwrap_or(0);
        let hi = list
            .iter()
            .flat_map(|r| std::iter::once(r.start + r.len).chain(r.refused.iter().map(|x| x.end)))
            .max()
            .unwrap_or(0);
        // A thread uses the new region's addresses only after learning of the region, which
        // orders it after this call: it sees both stores. A thread racing with the
        // registration may see a stale pair, which only affects addresses it cannot know yet
        // (regions are only added, so every older region stays inside the new bounds).
        self.regions.lo.store(lo, Ordering::Relaxed);
        self.regions
            .span
            .store(hi.saturating_sub(lo), Ordering::Relaxed);
        Ok(())
    }

    /// Rejects a region overlapping the symmetric heap or another region.
    fn check_region_place(&self, call: &'static str, m: &RegionMemory) -> Result<()> {
        let overlaps = |a: usize, al: usize, b: usize, bl: usize| a < b + bl && b < a + al;
        let heap = self.heap.slice_base(0);
        let heap_len = self.heap.slice() * self.node.len();
        if m.len >= REGION_MAX_LEN {
            return Err(Error::invalid(
                call,
                format!(
                    "range {:#x}+{} is larger than the {REGION_MAX_LEN} bytes a region may span",
                    m.start, m.len
                ),
            ));
        }
        if overlaps(m.start, m.len, heap, heap_len) {
            return Err(Error::invalid(
                call,
                format!("range {:#x}+{} overlaps the symmetric heap", m.start, m.len),
            ));
        }
        let list = self
            .regions
            .list
            .read()
            .map_err(|_| region_poisoned(call))?;
        if let Some(r) = list
            .iter()
            .find(|r| overlaps(m.start, m.len, r.start, r.len))
        {
            return Err(Error::invalid(
                call,
                format!(
                    "range {:#x}+{} overlaps the registered region `{}`",
                    m.start, m.len, r.name
                ),
            ));
        }
        Ok(())
    }

    /// Where PE `pe`'s copy of `[addr, addr+len)` is when `addr` is in a registered region (or
    /// a refused range: then the error): its load/store address, or its region offset on a PE
    /// of another host; `None` when it is in none, so the symmetric heap's checks apply. The
    /// one place where regions are resolved (called by `World::target` for addresses inside
    /// [`Regions::may_hold`]).
    #[cold]
    pub(crate) fn region_target(
        &self,
        call: &'static str,
        addr: usize,
        len: usize,
        pe: usize,
    ) -> Option<Result<Target>> {
        let list = match self.regions.list.read() {
            Ok(l) => l,
            Err(_) => return Some(Err(region_poisoned(call))),
        };
        let Some(r) = list.iter().find(|r| addr.wrapping_sub(r.start) < r.len) else {
            let refused = list.iter().find_map(|r| r.refused_at(addr));
            return refused.map(|x| {
                Err(Error::NotSymmetric {
                    call,
                    reason: refused_msg(addr, x),
                })
            });
        };
        if !r.fits(addr, len) {
            if let Some(e) = r.refusal(call, addr, len) {
                return Some(Err(e));
            }
        }
        let off = addr - r.start;
        Some(match r.peers.get(pe) {
            None => Err(self.bad_pe(call, pe)),
            Some(PeerCopy::Mapped(base)) => Ok(Target::Local(base + off)),
            Some(PeerCopy::Remote) => Ok(Target::region(pe, r.index, off)),
            Some(PeerCopy::Unreachable(why)) => Err(Error::Unsupported {
                call,
                reason: format!(
                    "PE {pe}'s copy of the symmetric region `{}` is not reachable from PE {}: \
                     {why}",
                    r.name, self.me
                ),
            }),
        })
    }
}

fn region_poisoned(call: &'static str) -> Error {
    Error::State {
        call,
        reason: "the region lock is poisoned (another thread panicked inside rshmem)".into(),
    }
}

/// Maps PE `pid`'s memfd `fd` (`len` bytes) into this process.
fn map_peer(pid: u64, fd: u64, len: usize) -> std::io::Result<usize> {
    let path = std::ffi::CString::new(format!("/proc/{pid}/fd/{fd}"))
        .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidInput, e))?;
    // SAFETY: a valid C string.
    let raw = unsafe { libc::open(path.as_ptr(), libc::O_RDWR | libc::O_CLOEXEC) };
    if raw < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: `raw` is a descriptor this call just opened.
    let pfd = unsafe { OwnedFd::from_raw_fd(raw) };
    // SAFETY: maps the peer's memfd of `len` bytes at an address the kernel picks.
    let p = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_SHARED,
            pfd.as_raw_fd(),
            0,
        )
    };
    if p == libc::MAP_FAILED {
        return Err(std::io::Error::last_os_error());
    }
    Ok(p as usize)
}
