//! Memory for the symmetric heap: matching-address reservations (host and GPU) and memfd
//! chunks.
//!
//! Everything here is a thin checked wrapper over `mmap`/`memfd_create`; the unsafe blocks map
//! only inside the heap reservation this module created.

use std::num::NonZeroUsize;
use std::os::fd::OwnedFd;
use std::ptr::NonNull;

use nix::sys::mman::{mmap, mmap_anonymous, munmap, MapFlags, ProtFlags};
use rshmem_bootstrap::Bootstrap;

use crate::error::{Error, Result};

/// Alignment of the reservation and granularity of heap chunks.
pub const GRANULE: usize = 2 << 20;

/// Alignment of every heap reservation and slice: each PE's slice starts at a multiple of it,
/// so an allocation aligned (by offset) to any power of two up to it is aligned by address on
/// every PE, and offsets stay symmetric.
pub const BASE_ALIGN: usize = 1 << 30;

/// An address-space reservation owned by this process: host (PROT_NONE mmap) or GPU
/// (`cuMemAddressReserve`). Dropping it releases the range; mappings inside must be gone first
/// for GPU reservations (the heap unmaps its chunks before dropping it).
#[derive(Debug)]
pub struct Reservation {
    /// First byte.
    pub base: usize,
    /// Length in bytes.
    pub len: usize,
    /// Host or GPU address space.
    pub gpu: bool,
}

impl Drop for Reservation {
    fn drop(&mut self) {
        if self.gpu {
            crate::cuda::unreserve(self.base, self.len);
        } else if let Some(p) = NonNull::new(self.base as *mut libc::c_void) {
            // SAFETY: [base, base+len) was mapped by this module and is owned by this
            // Reservation; nothing refers to it once the heap (its only user) is dropped.
            let _ = unsafe { munmap(p, self.len) };
        }
    }
}

/// Reserves host address space: anywhere (`at == None`) or exactly at `at` (None if taken).
pub fn reserve_host(at: Option<usize>, len: usize) -> Result<Option<Reservation>> {
    match at {
        None => {
            // Try random high addresses first: the kernel's own choice (just below the other
            // mappings) is where other processes' libraries and CUDA reservations tend to sit,
            // so a random spot is far more likely to be free in every process of the host.
            for _ in 0..8 {
                if let Some(r) = random_hint(len).and_then(|a| reserve_at(a, len)) {
                    return Ok(Some(r));
                }
            }
            reserve_anywhere(len).map(Some)
        }
        Some(a) => Ok(reserve_at(a, len)),
    }
}

/// A random BASE_ALIGN-aligned address in [16 TiB, 96 TiB) with room for `len` bytes (x86-64 user
/// space ends at 128 TiB).
fn random_hint(len: usize) -> Option<usize> {
    const LO: usize = 16 << 40;
    const HI: usize = 96 << 40;
    if len >= HI - LO {
        return None;
    }
    let mut b = [0u8; 8];
    getrandom::fill(&mut b).ok()?;
    let span = (HI - LO - len) / BASE_ALIGN;
    Some(LO + (u64::from_le_bytes(b) as usize % span.max(1)) * BASE_ALIGN)
}

fn reserve_anywhere(len: usize) -> Result<Reservation> {
    let total = len + BASE_ALIGN;
    let nz =
        NonZeroUsize::new(total).ok_or_else(|| Error::invalid("init", "empty heap reservation"))?;
    // SAFETY: an anonymous PROT_NONE mapping at an address of the kernel's choosing touches no
    // existing memory.
    let p = unsafe {
        mmap_anonymous(
            None,
            nz,
            ProtFlags::PROT_NONE,
            MapFlags::MAP_PRIVATE | MapFlags::MAP_NORESERVE,
        )
    }
    .map_err(|e| Error::os("init", format!("reserving {len} bytes of address space"), e))?;
    let start = p.as_ptr() as usize;
    let base = crate::heap::alloc::round_up(start, BASE_ALIGN);
    // Trim the unaligned head and the tail.
    // SAFETY: both trimmed pieces lie inside the mapping just created and are not used.
    unsafe {
        if base > start {
            let _ = munmap(p, base - start);
        }
        let tail = start + total - (base + len);
        if tail > 0 {
            if let Some(t) = NonNull::new((base + len) as *mut libc::c_void) {
                let _ = munmap(t, tail);
            }
        }
    }
    Ok(Reservation {
        base,
        len,
        gpu: false,
    })
}

fn reserve_at(addr: usize, len: usize) -> Option<Reservation> {
    let nz = NonZeroUsize::new(len)?;
    let want = NonZeroUsize::new(addr)?;
    // SAFETY: MAP_FIXED_NOREPLACE never replaces an existing mapping; it fails instead.
    let p = unsafe {
        mmap_anonymous(
            Some(want),
            nz,
            ProtFlags::PROT_NONE,
            MapFlags::MAP_PRIVATE | MapFlags::MAP_NORESERVE | MapFlags::MAP_FIXED_NOREPLACE,
        )
    }
    .ok()?;
    let r = Reservation {
        base: p.as_ptr() as usize,
        len,
        gpu: false,
    };
    // Kernels older than 4.17 treat the flag as a hint: accept only the exact address.
    (r.base == addr).then_some(r)
}

/// Reserves GPU virtual address space: anywhere or exactly at `at`.
pub fn reserve_gpu(at: Option<usize>, len: usize) -> Result<Option<Reservation>> {
    if at.is_none() {
        // As for host memory: propose a random spot first, then whatever the driver picks.
        for _ in 0..8 {
            if let Some(base) = random_hint(len).and_then(|a| {
                crate::cuda::reserve(len, BASE_ALIGN, Some(a))
                    .ok()
                    .flatten()
            }) {
                return Ok(Some(Reservation {
                    base,
                    len,
                    gpu: true,
                }));
            }
        }
    }
    Ok(
        crate::cuda::reserve(len, BASE_ALIGN, at)?.map(|base| Reservation {
            base,
            len,
            gpu: true,
        }),
    )
}

/// Collective over all PEs: reserves `len` bytes at the same address in every process of each
/// host, with `reserve(None, len)` (anywhere) and `reserve(Some(addr), len)` (exactly there).
/// `local` lists the global PE numbers on this host (ascending), `me` my index in it.
pub fn reserve_matching(
    boot: &dyn Bootstrap,
    local: &[usize],
    me: usize,
    len: usize,
    reserve: &dyn Fn(Option<usize>, usize) -> Result<Option<Reservation>>,
) -> Result<Reservation> {
    let mut blockers = Vec::new();
    for round in 0..16 {
        let proposal = if me == 0 {
            let mut r = reserve(None, len);
            if !matches!(r, Ok(Some(_))) && !blockers.is_empty() {
                // The addresses refused so far hold the space a new proposal needs (a large
                // reservation fits the address space only a few times): give them back.
                blockers.clear();
                r = reserve(None, len);
            }
            let r = r?.ok_or_else(|| {
                Error::invalid(
                    "init",
                    format!("could not reserve {len} bytes of address space"),
                )
            })?;
            let b = r.base;
            blockers.push(r);
            b
        } else {
            0
        };
        let all = boot.allgather(&(proposal as u64).to_le_bytes())?;
        let leader = u64_at(&all[local[0]]) as usize;
        let mine = if me == 0 {
            blockers.pop()
        } else {
            reserve(Some(leader), len)?
        };
        let ok = mine.is_some();
        let oks = boot.allgather(&[ok as u8])?;
        if local.iter().all(|&p| oks[p].first() == Some(&1)) {
            let nodes_ok = oks.iter().all(|o| o.first() == Some(&1));
            if let Some(r) = mine {
                if !nodes_ok {
                    // Others are still retrying; keep ours and join their rounds.
                    return finish_rounds(boot, r);
                }
                tracing::debug!(target: "rshmem::heap", round, base = format_args!("{:#x}", r.base), "heap reserved");
                return Ok(r);
            }
        }
        // Someone on this host failed: retry with another address (the leader's failed
        // reservation stays in `blockers` until we are done, so the next proposal differs).
        if let Some(r) = mine {
            if me == 0 {
                blockers.push(r);
            }
        }
    }
    Err(Error::Unsupported {
        call: "init",
        reason: format!("could not reserve {len} bytes at a common address on all PEs of this host after 16 tries; lower RSHMEM_HEAP_LIMIT"),
    })
}

fn finish_rounds(boot: &dyn Bootstrap, r: Reservation) -> Result<Reservation> {
    loop {
        boot.allgather(&0u64.to_le_bytes())?;
        let oks = boot.allgather(&[1u8])?;
        if oks.iter().all(|o| o.first() == Some(&1)) {
            return Ok(r);
        }
    }
}

fn u64_at(b: &[u8]) -> u64 {
    let mut a = [0u8; 8];
    let n = b.len().min(8);
    a[..n].copy_from_slice(&b[..n]);
    u64::from_le_bytes(a)
}

/// Creates an owner-only memfd of `len` bytes (pages are allocated on first touch).
pub fn create_chunk(name: &str, len: usize) -> Result<OwnedFd> {
    let fd = nix::sys::memfd::memfd_create(name, nix::sys::memfd::MFdFlags::MFD_CLOEXEC)
        .map_err(|e| Error::os("malloc", "memfd_create for a heap chunk", e))?;
    nix::unistd::ftruncate(&fd, len as libc::off_t)
        .map_err(|e| Error::os("malloc", format!("sizing a heap chunk to {len} bytes"), e))?;
    Ok(fd)
}

/// Maps `fd` read-write and shared at exactly `addr`, which must lie inside a reservation of
/// this process (replacing its PROT_NONE pages).
pub fn map_chunk(fd: &OwnedFd, addr: usize, len: usize, res: &Reservation) -> Result<()> {
    if addr < res.base || addr + len > res.base + res.len {
        return Err(Error::invalid(
            "malloc",
            "heap chunk outside the reservation",
        ));
    }
    let (Some(a), Some(l)) = (NonZeroUsize::new(addr), NonZeroUsize::new(len)) else {
        return Err(Error::invalid("malloc", "empty heap chunk"));
    };
    // SAFETY: [addr, addr+len) is inside our own PROT_NONE reservation (checked above), which no
    // Rust object refers to; MAP_FIXED replaces exactly those pages with the shared chunk.
    unsafe {
        mmap(
            Some(a),
            l,
            ProtFlags::PROT_READ | ProtFlags::PROT_WRITE,
            MapFlags::MAP_SHARED | MapFlags::MAP_FIXED,
            fd,
            0,
        )
    }
    .map_err(|e| Error::os("malloc", format!("mapping a heap chunk at {addr:#x}"), e))?;
    Ok(())
}

/// Frees the pages of the page-aligned interior of `[addr, addr+len)` of a mapped chunk
/// (`MADV_REMOVE`, a hole punched in the memfd): the memory goes back to the system for every
/// process that maps the chunk, and reads as zero afterwards. The range must be freed heap
/// memory that nobody accesses any more.
pub fn release_pages(addr: usize, len: usize) -> std::io::Result<()> {
    // SAFETY: sysconf has no preconditions.
    let page = usize::try_from(unsafe { libc::sysconf(libc::_SC_PAGESIZE) })
        .ok()
        .filter(|p| p.is_power_of_two())
        .unwrap_or(4096);
    let start = addr.checked_add(page - 1).map(|a| a & !(page - 1));
    let end = addr.checked_add(len).map(|e| e & !(page - 1));
    let (Some(start), Some(end)) = (start, end) else {
        return Ok(());
    };
    if end <= start {
        return Ok(());
    }
    // SAFETY: the caller passes freed memory of a shared memfd mapping of this heap; dropping
    // its contents affects no live object (no Rust reference points into the heap).
    let r = unsafe { libc::madvise(start as *mut libc::c_void, end - start, libc::MADV_REMOVE) };
    if r == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}
