//! The memory of symmetric regions ([`RegionMemory`]), their layouts ([`RegionLayout`],
//! [`RegionObject`]) and this PE's table of registered regions ([`Regions`], a part of the
//! world): what a region is and how an address inside one is resolved. Registration and the
//! calls that use regions are the world's (`region/mod.rs`).

use std::ffi::c_void;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, RwLock};

use crate::error::{Error, Result};
use crate::transport::RegionTargets;

/// This process's memory moved onto a `memfd` by [`RegionMemory::share_in_place`], ready for
/// [`World::register_region`](crate::World::register_region).
#[derive(Debug)]
pub struct RegionMemory {
    pub(crate) start: usize,
    pub(crate) len: usize,
    pub(crate) fd: OwnedFd,
}

impl RegionMemory {
    /// **Local.** Moves the page-aligned range `[start, start+len)` of this process onto shared
    /// memory in place: its contents are copied into a new `memfd`, which is mapped read-write
    /// over the same addresses. The range's old mapping (anonymous memory, a program's data
    /// pages) is replaced.
    ///
    /// # Safety
    /// The range must be mapped readable and writable, belong to nothing that depends on its
    /// current mapping (a file mapping written back, locked memory), and no thread may write it
    /// while this call runs (writes between the copy and the remap would be lost): call it
    /// before other threads exist, or with them stopped.
    pub unsafe fn share_in_place(start: *mut u8, len: usize) -> Result<RegionMemory> {
        let call = "share_in_place";
        let start = start as usize;
        // SAFETY: sysconf has no preconditions.
        let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) } as usize;
        if len == 0 || start % page != 0 || len % page != 0 || start.checked_add(len).is_none() {
            return Err(Error::invalid(
                call,
                format!("range {start:#x}+{len} is empty or not page-aligned ({page} bytes)"),
            ));
        }
        let os = |what: &str| Error::Os {
            call,
            context: what.to_owned(),
            source: std::io::Error::last_os_error(),
        };
        // SAFETY: memfd_create with a valid C string; MFD_CLOEXEC keeps it from child programs.
        let raw = unsafe { libc::memfd_create(c"rshmem-region".as_ptr(), libc::MFD_CLOEXEC) };
        if raw < 0 {
            return Err(os("memfd_create"));
        }
        // SAFETY: `raw` is a fresh descriptor that nothing else owns.
        let fd = unsafe { OwnedFd::from_raw_fd(raw) };
        // SAFETY: fd is a fresh memfd.
        if unsafe { libc::ftruncate(fd.as_raw_fd(), len as libc::off_t) } != 0 {
            return Err(os("ftruncate"));
        }
        let mut done = 0usize;
        while done < len {
            // SAFETY: [start, start+len) is mapped and readable (the caller's contract).
            let w = unsafe {
                libc::pwrite(
                    fd.as_raw_fd(),
                    (start + done) as *const c_void,
                    len - done,
                    done as libc::off_t,
                )
            };
            if w <= 0 {
                return Err(os("copying the range into the memfd"));
            }
            done += w as usize;
        }
        // SAFETY: replaces the range's pages with a shared mapping of identical contents at
        // the same addresses; nobody writes the range meanwhile (the caller's contract).
        let p = unsafe {
            libc::mmap(
                start as *mut c_void,
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED | libc::MAP_FIXED,
                fd.as_raw_fd(),
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(os("mmap over the range"));
        }
        Ok(RegionMemory { start, len, fd })
    }

    /// Start of the range.
    pub fn start(&self) -> *mut u8 {
        self.start as *mut u8
    }

    /// Bytes in the range.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Always false (an empty range is refused).
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

/// A named range of addresses of this process: `[start, end)`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RegionObject {
    /// First byte.
    pub start: usize,
    /// One past the last byte.
    pub end: usize,
    /// For messages: a variable's name, or why the range is refused.
    pub name: String,
}

/// What is symmetric inside a region (see the module docs).
#[derive(Debug, Clone, Default)]
pub struct RegionLayout {
    /// For messages: what the region is (`"the program's data segment"`).
    pub name: String,
    /// The objects of the region (any order, may overlap). `Some`: every access must lie
    /// inside one object. `None`: any range inside the region (and outside `refused`) is
    /// accepted.
    pub objects: Option<Vec<RegionObject>>,
    /// Ranges, inside the region or next to it, that are not symmetric: an access touching one
    /// is refused with its `name` as the reason. Used when `objects` is `None`; an address in
    /// a refused range outside the region is refused either way.
    pub refused: Vec<RegionObject>,
}

/// Where a PE's copy of a registered region is, seen from this PE.
pub(crate) enum PeerCopy {
    /// Mapped into this process at this address (a PE of this host, or this PE).
    Mapped(usize),
    /// On another host, reached through the remote transport that serves the PE.
    Remote,
    /// Not reachable, and why.
    Unreachable(String),
}

/// A registered region: my range and where every PE's copy is.
pub(crate) struct SymRegion {
    pub(crate) start: usize,
    pub(crate) len: usize,
    /// Its place in the order of registrations (the same on every PE).
    pub(crate) index: usize,
    pub(crate) name: String,
    /// Sorted, overlapping ones merged.
    pub(crate) objects: Option<Vec<RegionObject>>,
    pub(crate) refused: Vec<RegionObject>,
    /// Per PE: where its copy is.
    pub(crate) peers: Vec<PeerCopy>,
    pub(crate) me: usize,
}

impl Drop for SymRegion {
    fn drop(&mut self) {
        for (pe, p) in self.peers.iter().enumerate() {
            if let (PeerCopy::Mapped(base), true) = (p, pe != self.me) {
                // SAFETY: `base` is a mapping of `len` bytes that registration created and that
                // only this region owns.
                unsafe { libc::munmap(*base as *mut c_void, self.len) };
            }
        }
    }
}

impl SymRegion {
    /// True if `[addr, addr+len)` lies inside one object (the common case), or anywhere in
    /// the region when it has neither objects nor refused ranges.
    #[inline]
    pub(crate) fn fits(&self, addr: usize, len: usize) -> bool {
        let off = addr.wrapping_sub(self.start);
        if off >= self.len || len > self.len - off {
            return false;
        }
        match &self.objects {
            Some(objs) => {
                let k = objs.partition_point(|o| o.start <= addr);
                k > 0 && addr < objs[k - 1].end && len <= objs[k - 1].end - addr
            }
            None => self.refused.is_empty(),
        }
    }

    /// Why `[addr, addr+len)` (starting inside the region) is refused, if it is.
    #[cold]
    pub(crate) fn refusal(&self, call: &'static str, addr: usize, len: usize) -> Option<Error> {
        let not_sym = |reason: String| Some(Error::NotSymmetric { call, reason });
        if let Some(r) = self.refused_at(addr) {
            return not_sym(refused_msg(addr, r));
        }
        let end = self.start + self.len;
        if len > end - addr {
            return not_sym(format!(
                "range {addr:#x}+{len} runs past the end of the symmetric region `{}` \
                 ({:#x}, {} bytes)",
                self.name, self.start, self.len
            ));
        }
        match &self.objects {
            Some(objs) => {
                let k = objs.partition_point(|o| o.start <= addr);
                match k.checked_sub(1).map(|k| &objs[k]) {
                    Some(o) if addr < o.end => not_sym(format!(
                        "range {addr:#x}+{len} runs past the end of the symmetric variable `{}` \
                         ({:#x}, {} bytes)",
                        o.name,
                        o.start,
                        o.end - o.start
                    )),
                    _ => not_sym(format!(
                        "address {addr:#x} is in {} but in no object of it (not a symmetric \
                         object)",
                        self.name
                    )),
                }
            }
            None => self
                .refused
                .iter()
                .find(|r| addr < r.end && addr.saturating_add(len.max(1)) > r.start)
                .and_then(|r| not_sym(refused_msg(addr, r))),
        }
    }

    pub(crate) fn refused_at(&self, addr: usize) -> Option<&RegionObject> {
        self.refused
            .iter()
            .find(|r| addr >= r.start && addr < r.end)
    }
}

pub(crate) fn refused_msg(addr: usize, r: &RegionObject) -> String {
    format!("address {addr:#x} is in {}; it is not symmetric", r.name)
}

/// The registered regions of a world, with the bounds of everything they cover (regions and
/// refused ranges) for a two-load test on the hot path.
pub(crate) struct Regions {
    pub(crate) list: RwLock<Vec<Arc<SymRegion>>>,
    /// What the remote transports' targets may reach of this PE's regions.
    pub(crate) targets: Arc<RegionTargets>,
    /// Lowest address covered (0 with no region).
    pub(crate) lo: AtomicUsize,
    /// Bytes from `lo` to the highest address covered (0 with no region).
    pub(crate) span: AtomicUsize,
}

impl Regions {
    /// No region yet; `targets` is the table the remote transports' targets resolve region
    /// offsets through (registrations add to it).
    pub(crate) fn new(targets: Arc<RegionTargets>) -> Regions {
        Regions {
            list: RwLock::new(Vec::new()),
            targets,
            lo: AtomicUsize::new(0),
            span: AtomicUsize::new(0),
        }
    }

    /// True if `addr` may lie in a registered region or a refused range (false for every
    /// address while none is registered).
    #[inline(always)]
    pub(crate) fn may_hold(&self, addr: usize) -> bool {
        addr.wrapping_sub(self.lo.load(Ordering::Relaxed)) < self.span.load(Ordering::Relaxed)
    }
}
