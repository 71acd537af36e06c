//! Symmetric memory management: `malloc`, `calloc`, `align`, `realloc`, `free` (OpenSHMEM 1.5
//! semantics) and the typed handle [`SymBuf`].
//!
//! Every call here is **collective**: all PEs make the same calls, in the same order, with the
//! same sizes; they return the same offset in every PE's heap. `malloc`/`calloc`/`align` end
//! with a barrier (no PE touches the new object on a peer before the peer has it); `free` starts
//! with one (no PE frees what a peer may still access); `realloc` has both.
//! The barrier of every call also compares the call across PEs (its sequence number, kind,
//! size and alignment, or address), at no extra cost: the comparison travels with the
//! barrier's flags. A mismatch is an [`Error::AsymmetricCall`] on every PE naming two PEs that
//! differ, and the call has no effect (a mismatched allocation is undone, a mismatched free
//! frees nothing). With `RSHMEM_DEBUG_SYMMETRY=1` every call is also compared through the
//! bootstrap before anything happens, and the error lists every PE's call. Not caught: calls
//! whose sizes differ so that some PEs grow the heap and others do not (the growing PEs wait
//! for the others' chunk until `RSHMEM_TIMEOUT`, with a message asking whether every PE made
//! the same call) — `RSHMEM_DEBUG_SYMMETRY=1` catches those too.

use std::marker::PhantomData;
use std::sync::atomic::Ordering;

use crate::error::{Error, Result};
use crate::heap::alloc::MIN_ALIGN;
use crate::types::RmaType;
use crate::world::World;

/// A typed symmetric allocation of `len` elements, returned by [`World::malloc`] and friends.
///
/// The handle names this PE's copy; pass [`SymBuf::as_ptr`] or [`SymBuf::at`] to the RMA,
/// atomic and wait calls to name the matching copy on any PE. Remote PEs may write into it at
/// any time, so local access goes through [`read`](SymBuf::read)/[`write`](SymBuf::write)/
/// [`to_vec`](SymBuf::to_vec) (which also work on the GPU heap) or the `unsafe` slice views
/// (CPU heap only). Release it with [`World::free`] (collective); a handle that is
/// dropped without `free` keeps its memory until [`World::finalize`].
pub struct SymBuf<'w, T: RmaType> {
    ptr: *mut T,
    len: usize,
    world: &'w World,
    _t: PhantomData<T>,
}

// SAFETY: the handle is an address into memory that outlives 'w and that every thread may access
// (like a shared atomic region); it owns no thread-affine state.
unsafe impl<T: RmaType> Send for SymBuf<'_, T> {}
// SAFETY: as above; all access through &SymBuf is volatile or atomic.
unsafe impl<T: RmaType> Sync for SymBuf<'_, T> {}

impl<T: RmaType> std::fmt::Debug for SymBuf<'_, T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "SymBuf<{}>({:p}, len {})",
            std::any::type_name::<T>(),
            self.ptr,
            self.len
        )
    }
}

/// The address accessors every handle of a symmetric allocation has (`SymBuf` and
/// `SharedSymBuf`: a `ptr` and a `len` field): `len`, `is_empty`, `as_ptr`, `at`.
macro_rules! sym_addresses {
    () => {
        /// Number of elements.
        pub fn len(&self) -> usize {
            self.len
        }

        /// True for a zero-length allocation (whose pointer is null, as OpenSHMEM's
        /// `malloc(0)`).
        pub fn is_empty(&self) -> bool {
            self.len == 0
        }

        /// The symmetric address of element 0 on this PE.
        pub fn as_ptr(&self) -> *mut T {
            self.ptr
        }

        /// The symmetric address of element `i` (not checked here; the call it is passed to
        /// checks it against the allocation).
        pub fn at(&self, i: usize) -> *mut T {
            self.ptr.wrapping_add(i)
        }
    };
}
pub(crate) use sym_addresses;

impl<'w, T: RmaType> SymBuf<'w, T> {
    sym_addresses!();

    /// The runtime the buffer belongs to.
    pub(crate) fn world(&self) -> &'w World {
        self.world
    }

    /// The address field itself (a kernel argument points at it: see `cuda_interop`).
    pub(crate) fn ptr_field(&self) -> &*mut T {
        &self.ptr
    }

    /// PE `pe`'s copy of element 0, for direct load/store ([`World::ptr`]); `None` for an empty
    /// buffer or a PE not reachable by load/store.
    pub fn ptr(&self, pe: usize) -> Option<*mut T> {
        if self.len == 0 {
            return None;
        }
        self.world.ptr(self.ptr, pe)
    }

    /// Reads element `i` of this PE's copy (a volatile load on the CPU heap, a copy from the
    /// GPU heap). An error when `i >= len` (naming `SymBuf::read`, the index and the length) or
    /// when the copy from the GPU fails; like [`write`](SymBuf::write) and
    /// [`to_vec`](SymBuf::to_vec).
    pub fn read(&self, i: usize) -> Result<T> {
        if i >= self.len {
            return Err(Error::invalid(
                "SymBuf::read",
                format!("index {i} out of range for length {}", self.len),
            ));
        }
        if self.world.xport.cheap_loads() {
            // SAFETY: i < len, so the element is inside this live host allocation, which is
            // mapped for 'w; volatile because peers may write it concurrently.
            return Ok(unsafe { self.ptr.add(i).read_volatile() });
        }
        let mut v = [T::default_value()];
        self.world.get(&mut v, self.at(i), self.world.my_pe())?;
        Ok(v[0])
    }

    /// Writes element `i` of this PE's copy.
    pub fn write(&self, i: usize, v: T) -> Result<()> {
        if i >= self.len {
            return Err(Error::invalid(
                "SymBuf::write",
                format!("index {i} out of range for length {}", self.len),
            ));
        }
        self.world.put(self.at(i), &[v], self.world.my_pe())?;
        self.world.quiet()
    }

    /// Copies this PE's copy into a Vec.
    pub fn to_vec(&self) -> Result<Vec<T>> {
        let mut v = vec![T::default_value(); self.len];
        if self.len > 0 {
            self.world.get(&mut v, self.ptr, self.world.my_pe())?;
        }
        Ok(v)
    }

    /// Overwrites this PE's copy, starting at element 0, with `src`.
    pub fn copy_from_slice(&self, src: &[T]) -> Result<()> {
        if src.len() > self.len {
            return Err(Error::invalid(
                "SymBuf::copy_from_slice",
                format!("{} elements do not fit in {}", src.len(), self.len),
            ));
        }
        if !src.is_empty() {
            self.world.put(self.ptr, src, self.world.my_pe())?;
        }
        self.world.quiet()
    }

    /// This PE's copy as a slice (CPU heap only: GPU memory is not addressable from the host).
    ///
    /// # Safety
    /// No PE may write these elements (put, atomic, local write) while the slice is alive.
    pub unsafe fn as_slice(&self) -> Result<&[T]> {
        self.host_only("SymBuf::as_slice")?;
        if self.len == 0 {
            return Ok(&[]);
        }
        // SAFETY: host allocation of len initialized elements (memfd memory starts zeroed); the
        // caller guarantees the absence of concurrent writers.
        Ok(unsafe { std::slice::from_raw_parts(self.ptr, self.len) })
    }

    /// This PE's copy as a mutable slice (CPU heap only).
    ///
    /// # Safety
    /// No PE may read or write these elements remotely while the slice is alive.
    #[allow(clippy::mut_from_ref)]
    pub unsafe fn as_mut_slice(&self) -> Result<&mut [T]> {
        self.host_only("SymBuf::as_mut_slice")?;
        if self.len == 0 {
            return Ok(&mut []);
        }
        // SAFETY: as in `as_slice`, and the caller guarantees exclusivity.
        Ok(unsafe { std::slice::from_raw_parts_mut(self.ptr, self.len) })
    }

    fn host_only(&self, call: &'static str) -> Result<()> {
        if self.world.xport.cheap_loads() {
            Ok(())
        } else {
            Err(Error::Unsupported {
                call,
                reason: "the symmetric heap is in GPU memory; use read/to_vec or a kernel".into(),
            })
        }
    }
}

impl World {
    /// **Collective.** Allocates `count` elements of `T` from the symmetric heap (uninitialized
    /// contents: whatever a previous allocation left, zero for fresh memory). `count == 0`
    /// returns an empty handle. Like `shmem_malloc`.
    pub fn malloc<T: RmaType>(&self, count: usize) -> Result<SymBuf<'_, T>> {
        let bytes = elem_bytes::<T>("malloc", count)?;
        let shown = format!("malloc::<{}>({count})", type_name::<T>());
        let p = self.alloc_impl("malloc", &shown, bytes, align_of_elem::<T>(), false)?;
        Ok(self.wrap(p, count))
    }

    /// **Collective.** Like [`malloc`](World::malloc) but zero-filled. Like `shmem_calloc`.
    pub fn calloc<T: RmaType>(&self, count: usize) -> Result<SymBuf<'_, T>> {
        let bytes = elem_bytes::<T>("calloc", count)?;
        let shown = format!("calloc::<{}>({count})", type_name::<T>());
        let p = self.alloc_impl("calloc", &shown, bytes, align_of_elem::<T>(), true)?;
        Ok(self.wrap(p, count))
    }

    /// **Collective.** Allocates `count` elements aligned to `alignment` bytes (a power of two).
    /// Like `shmem_align`.
    pub fn align<T: RmaType>(&self, alignment: usize, count: usize) -> Result<SymBuf<'_, T>> {
        if !alignment.is_power_of_two() {
            return Err(Error::invalid(
                "align",
                format!("alignment {alignment} is not a power of two"),
            ));
        }
        let bytes = elem_bytes::<T>("align", count)?;
        let shown = format!(
            "align::<{}>(alignment {alignment}, {count})",
            type_name::<T>()
        );
        let align = alignment.max(align_of_elem::<T>());
        let p = self.alloc_impl("align", &shown, bytes, align, false)?;
        Ok(self.wrap(p, count))
    }

    /// **Collective.** Resizes `buf` to `count` elements in place of the handle, keeping the
    /// contents up to the smaller length; the memory may move. `count == 0` frees it and leaves
    /// an empty handle. On error `buf` is unchanged and still valid. Like `shmem_realloc`.
    pub fn realloc<'w, T: RmaType>(&'w self, buf: &mut SymBuf<'w, T>, count: usize) -> Result<()> {
        let bytes = elem_bytes::<T>("realloc", count)?;
        let shown = format!("realloc::<{}>({count})", type_name::<T>());
        let p = self.realloc_impl(buf.ptr.cast(), bytes, &shown)?;
        *buf = self.wrap(p, count);
        Ok(())
    }

    /// **Collective.** Releases `buf` on every PE. Like `shmem_free`.
    pub fn free<T: RmaType>(&self, buf: SymBuf<'_, T>) -> Result<()> {
        self.free_bytes(buf.ptr.cast())
    }

    /// **Collective.** Byte-level `shmem_malloc`: `size == 0` returns null.
    pub fn malloc_bytes(&self, size: usize) -> Result<*mut u8> {
        self.alloc_impl(
            "malloc",
            &format!("malloc({size} bytes)"),
            size,
            MIN_ALIGN,
            false,
        )
    }

    /// **Collective.** Byte-level `shmem_calloc(count, size)`: zero-filled; a zero product
    /// returns null.
    pub fn calloc_bytes(&self, count: usize, size: usize) -> Result<*mut u8> {
        let bytes = count
            .checked_mul(size)
            .ok_or_else(|| Error::invalid("calloc", format!("{count} × {size} bytes overflows")))?;
        let shown = format!("calloc({count} × {size} bytes)");
        self.alloc_impl("calloc", &shown, bytes, MIN_ALIGN, true)
    }

    /// **Collective.** Byte-level `shmem_align(alignment, size)`.
    pub fn align_bytes(&self, alignment: usize, size: usize) -> Result<*mut u8> {
        if !alignment.is_power_of_two() {
            return Err(Error::invalid(
                "align",
                format!("alignment {alignment} is not a power of two"),
            ));
        }
        let shown = format!("align(alignment {alignment}, {size} bytes)");
        self.alloc_impl("align", &shown, size, alignment, false)
    }

    /// **Collective.** Byte-level `shmem_realloc(ptr, size)`: a null `ptr` allocates, `size == 0`
    /// frees and returns null.
    pub fn realloc_bytes(&self, ptr: *mut u8, size: usize) -> Result<*mut u8> {
        self.realloc_impl(ptr, size, &format!("realloc({size} bytes)"))
    }

    /// [`World::realloc_bytes`]; `shown` is the call as the user made it, for messages.
    fn realloc_impl(&self, ptr: *mut u8, size: usize, shown: &str) -> Result<*mut u8> {
        let call = "realloc";
        if ptr.is_null() {
            return self.alloc_impl(call, shown, size, MIN_ALIGN, false);
        }
        if size == 0 {
            self.free_impl(call, ptr)?;
            return Ok(std::ptr::null_mut());
        }
        let off = self.start_offset(call, ptr)?;
        let args = [off as u64, size as u64];
        let shown = format!("{shown} of the allocation at heap offset {off}");
        let seq = self.check_symmetric(call, &args, &shown)?;
        self.quiet_net(call)?;
        self.sync_all_symmetric(call, seq, &args, &shown)?;
        let old = self.heap.size_of(off).unwrap_or(0);
        let out = if self.heap.resize_in_place(call, off, size)? {
            ptr
        } else {
            let grown = self.heap.mapped();
            let new_off = self
                .heap
                .alloc(&self.node, &self.live, call, size, MIN_ALIGN)?;
            if self.heap.mapped() != grown {
                self.refresh_device_state()?;
            }
            let np = self.heap.my_base() + new_off;
            // Both ranges are live allocations of my heap and do not overlap (the old one is
            // still allocated while the new one is placed).
            self.xport
                .copy(call, np, self.heap.my_base() + off, old.min(size))?;
            self.xport.quiet(call)?;
            self.heap.free(call, off)?;
            np as *mut u8
        };
        self.quiet_net(call)?;
        self.sync_all_named(call)?;
        Ok(out)
    }

    /// **Collective.** Byte-level `shmem_free`: null is allowed and does nothing but the barrier.
    pub fn free_bytes(&self, ptr: *mut u8) -> Result<()> {
        self.free_impl("free", ptr)
    }

    fn free_impl(&self, call: &'static str, ptr: *mut u8) -> Result<()> {
        let off = if ptr.is_null() {
            0
        } else {
            self.start_offset(call, ptr)?
        };
        let shown = if ptr.is_null() {
            format!("{call}(NULL)")
        } else {
            format!("{call}(the allocation at heap offset {off})")
        };
        let seq = self.check_symmetric(call, &[off as u64], &shown)?;
        self.quiet_net(call)?;
        // A mismatch (PEs freeing different objects) frees nothing.
        self.sync_all_symmetric(call, seq, &[off as u64], &shown)?;
        if !ptr.is_null() {
            self.heap.free(call, off)?;
        }
        Ok(())
    }

    fn start_offset(&self, call: &'static str, ptr: *mut u8) -> Result<usize> {
        let addr = ptr as usize;
        let off = addr.wrapping_sub(self.heap.my_base());
        match self.heap.size_of(off) {
            Some(_) if addr >= self.heap.my_base() => Ok(off),
            _ => Err(Error::NotSymmetric {
                call,
                reason: format!(
                    "{addr:#x} is not the start of a live symmetric allocation of this PE"
                ),
            }),
        }
    }

    /// Allocates `size` bytes aligned to `align`; `shown` is the call in the user's units
    /// (`calloc::<u64>(8)`, `malloc(64 bytes)`) for messages. PEs are compared on the bytes and
    /// alignment, so `calloc::<u64>(8)` on one PE matches `calloc::<u32>(16)` on another.
    fn alloc_impl(
        &self,
        call: &'static str,
        shown: &str,
        size: usize,
        align: usize,
        zero: bool,
    ) -> Result<*mut u8> {
        let args = [size as u64, align as u64];
        let seq = self.check_symmetric(call, &args, shown)?;
        if size == 0 {
            self.quiet_net(call)?;
            self.sync_all_symmetric(call, seq, &args, shown)?;
            return Ok(std::ptr::null_mut());
        }
        let grown = self.heap.mapped();
        let off = self.heap.alloc(&self.node, &self.live, call, size, align)?;
        if self.heap.mapped() != grown {
            self.refresh_device_state()?;
        }
        let p = (self.heap.my_base() + off) as *mut u8;
        if zero {
            // [p, p+size) is the allocation just made in my mapped heap.
            self.xport.zero(call, p as usize, size)?;
        }
        self.quiet_net(call)?;
        if let Err(e) = self.sync_all_symmetric(call, seq, &args, shown) {
            if matches!(e, Error::AsymmetricCall { .. }) {
                // Every PE saw the mismatch: undo this PE's part so its heap stays in step.
                self.heap.free(call, off)?;
            }
            return Err(e);
        }
        Ok(p)
    }

    pub(crate) fn wrap<T: RmaType>(&self, p: *mut u8, count: usize) -> SymBuf<'_, T> {
        SymBuf {
            ptr: if count == 0 {
                std::ptr::null_mut()
            } else {
                p.cast()
            },
            len: if p.is_null() { 0 } else { count },
            world: self,
            _t: PhantomData,
        }
    }

    /// The barrier of a heap call, which also compares the call (its sequence number, name and
    /// `args`) across PEs at no extra round trip (see `World::sync_all_checked`): a mismatch is
    /// an [`Error::AsymmetricCall`] naming two PEs that differ, on every PE, and this PE's call
    /// as `shown`.
    fn sync_all_symmetric(
        &self,
        call: &'static str,
        seq: u64,
        args: &[u64],
        shown: &str,
    ) -> Result<()> {
        let mut all = Vec::with_capacity(args.len() + 1);
        all.push(seq);
        all.extend_from_slice(args);
        let d = crate::sync::digest(call, &all);
        match self.sync_all_checked(call, Some(d), false)? {
            None => Ok(()),
            Some(m) => Err(Error::AsymmetricCall {
                call,
                details: asymmetry_details(
                    m,
                    &format!("#{seq} {shown}"),
                    "set RSHMEM_DEBUG_SYMMETRY=1 to list every PE's heap call",
                ),
            }),
        }
    }

    /// Numbers this collective heap call and, with `RSHMEM_DEBUG_SYMMETRY`, compares it across
    /// PEs (every PE's call name and `args`, through the bootstrap; a mismatch shows each
    /// group's call as `shown`, in the user's units). Returns its sequence number.
    pub(crate) fn check_symmetric(
        &self,
        call: &'static str,
        args: &[u64],
        shown: &str,
    ) -> Result<u64> {
        let seq = self.coll_seq.fetch_add(1, Ordering::AcqRel);
        if !self.cfg.debug_symmetry {
            return Ok(seq);
        }
        // What is compared, then a NUL, then what is shown.
        let key = format!("#{seq} {call}{}", show_args(args));
        let desc = format!("{key}\0#{seq} {shown}");
        let all = self.boot.allgather(desc.as_bytes())?;
        let key_of = |d: &[u8]| -> Vec<u8> { d.split(|&b| b == 0).next().unwrap_or(d).to_vec() };
        if all.iter().all(|d| key_of(d) == key.as_bytes()) {
            return Ok(seq);
        }
        let mut groups: Vec<(Vec<u8>, String, Vec<usize>)> = Vec::new();
        for (pe, d) in all.iter().enumerate() {
            let k = key_of(d);
            let s = d
                .iter()
                .position(|&b| b == 0)
                .map_or_else(|| d.as_slice(), |i| &d[i + 1..]);
            let s = String::from_utf8_lossy(s).into_owned();
            match groups.iter_mut().find(|(g, _, _)| *g == k) {
                Some((_, _, v)) => v.push(pe),
                None => groups.push((k, s, vec![pe])),
            }
        }
        let details = groups
            .iter()
            .map(|(_, d, pes)| format!("PE {} called {d}", crate::error::join_pes(pes, ",")))
            .collect::<Vec<_>>()
            .join("; ");
        Err(Error::AsymmetricCall { call, details })
    }
}

/// `(a, b, …)`.
fn show_args(args: &[u64]) -> String {
    let v: Vec<String> = args.iter().map(|a| a.to_string()).collect();
    format!("({})", v.join(", "))
}

/// The message of a mismatch found by a checked barrier: the two PEs it names, this PE's own
/// call, and what to do.
pub(crate) fn asymmetry_details(m: crate::sync::Mismatch, mine: &str, hint: &str) -> String {
    let (a, b) = (m.low_pe.min(m.high_pe), m.low_pe.max(m.high_pe));
    format!("PEs {a} and {b} made different calls here (this PE: {mine}); {hint}")
}

fn elem_bytes<T>(call: &'static str, count: usize) -> Result<usize> {
    count.checked_mul(std::mem::size_of::<T>()).ok_or_else(|| {
        Error::invalid(
            call,
            format!(
                "{count} elements of {} ({} bytes each) overflows",
                type_name::<T>(),
                std::mem::size_of::<T>()
            ),
        )
    })
}

/// The name of `T` as a user writes it (`u64`, `f32`; other types by their last path
/// segment).
fn type_name<T>() -> &'static str {
    let full = std::any::type_name::<T>();
    if full.contains('<') {
        return full;
    }
    full.rsplit("::").next().unwrap_or(full)
}

fn align_of_elem<T>() -> usize {
    std::mem::align_of::<T>().max(MIN_ALIGN)
}
