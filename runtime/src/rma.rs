//! One-sided RMA: put, get, p, g, strided iput/iget, and their `_nbi` forms.
//!
//! All calls here are **one-sided**: only the calling PE takes part. Symmetric addresses are
//! this PE's addresses of symmetric objects (from [`crate::SymBuf`] or the `*_bytes` allocators);
//! every call checks that the whole range lies inside one live allocation and that the PE
//! exists, and writes nothing when it returns an error.
//!
//! Ordering and completion: a blocking `put` returns when the source may be reused; its data is
//! *delivered* (visible to the target) after [`World::quiet`] or a barrier, and puts to the same PE
//! separated by [`World::fence`] arrive in order. A `get` returns with the data in the local
//! buffer. The `_nbi` forms take borrowed slices, so they too have read the source (puts) or
//! filled the destination (gets) when they return — safe Rust cannot let a call read a slice
//! after its borrow ends; what they may leave for [`World::quiet`] is the delivery of put data to
//! the target. On the shared-memory transport every call completes before it returns. To a PE reached over TCP,
//! puts are sent (the source is reusable) but applied later, in order; gets wait for the data.
//! The unsafe [`World::put_nbi_deferred`] and [`World::get_nbi_deferred`] take raw pointers
//! under C's rule instead (the buffer is the transfer's until the next quiet): over UCX they only
//! post the transfer.

use crate::error::{Error, Result};
use crate::transport::TransportOps;
use crate::types::RmaType;
use crate::world::{Target, World};

/// The contiguous puts and gets (bytes and typed) in their blocking form `$name`, documented
/// by the comment given, and their `_nbi` form `$nbi`: both hand their arguments to
/// `put_impl`/`get_impl` under their own call name (the `_nbi` form takes borrowed slices, so
/// it has read `src` or filled `dest` when it returns: it may leave only delivery to quiet).
macro_rules! blocking_and_nbi {
    ($(
        $(#[$doc:meta])*
        $name:ident, $nbi:ident $(<$t:ident>)? ($dest:ident: $dty:ty, $src:ident: $sty:ty) => $body:ident;
    )+) => {$(
        $(#[$doc])*
        #[inline]
        pub fn $name $(<$t: RmaType>)? (&self, $dest: $dty, $src: $sty, pe: usize) -> Result<()> {
            self.$body(stringify!($name), $dest, $src, pe)
        }

        #[doc = concat!("**One-sided.** Non-blocking [`", stringify!($name), "`](World::",
            stringify!($name), "); completed by [`World::quiet`].")]
        #[inline]
        pub fn $nbi $(<$t: RmaType>)? (&self, $dest: $dty, $src: $sty, pe: usize) -> Result<()> {
            self.$body(stringify!($nbi), $dest, $src, pe)
        }
    )+};
}

impl World {
    blocking_and_nbi! {
        /// **One-sided.** Copies `src` into the symmetric `dest` on PE `pe`. Like `shmem_putmem`.
        putmem, putmem_nbi(dest: *mut u8, src: &[u8]) => put_impl;
        /// **One-sided.** Copies the symmetric `src` on PE `pe` into `dest`. Like `shmem_getmem`.
        getmem, getmem_nbi(dest: &mut [u8], src: *const u8) => get_impl;
        /// **One-sided.** Copies `src.len()` elements into the symmetric `dest` on PE `pe`. Like
        /// `shmem_TYPE_put`.
        put, put_nbi<T>(dest: *mut T, src: &[T]) => put_impl;
        /// **One-sided.** Copies `dest.len()` elements from the symmetric `src` on PE `pe`. Like
        /// `shmem_TYPE_get`.
        get, get_nbi<T>(dest: &mut [T], src: *const T) => get_impl;
    }

    /// **One-sided.** [`put_nbi`](World::put_nbi) as C's `shmem_TYPE_put_nbi` defines it: the
    /// put may still read `src` after this returns, until the next [`World::quiet`] (or a call
    /// that implies it: `barrier_all`, `finalize`, `free`). Over UCX the put is only posted,
    /// so a loop of them streams instead of waiting a round trip each; elsewhere it behaves like
    /// `put_nbi`. The C ABI's `_nbi` puts use it.
    ///
    /// # Safety
    /// `src` is valid for reads of `nelems` elements, and neither written nor freed until the
    /// next quiet on this PE returns.
    #[inline]
    pub unsafe fn put_nbi_deferred<T: RmaType>(
        &self,
        dest: *mut T,
        src: *const T,
        nelems: usize,
        pe: usize,
    ) -> Result<()> {
        // SAFETY: the caller's contract, passed on.
        unsafe { self.deferred::<T>("put_nbi", Dir::Put, src as usize, dest as usize, nelems, pe) }
    }

    /// **One-sided.** [`get_nbi`](World::get_nbi) as C's `shmem_TYPE_get_nbi` defines it:
    /// `dest` holds the data only after the next [`World::quiet`] (or a call that implies it).
    /// Over UCX the get is only posted; elsewhere it completes before it returns. The C ABI's
    /// `_nbi` gets use it.
    ///
    /// # Safety
    /// `dest` is valid for writes of `nelems` elements, and neither read, written nor freed
    /// until the next quiet on this PE returns.
    #[inline]
    pub unsafe fn get_nbi_deferred<T: RmaType>(
        &self,
        dest: *mut T,
        src: *const T,
        nelems: usize,
        pe: usize,
    ) -> Result<()> {
        // SAFETY: the caller's contract, passed on.
        unsafe { self.deferred::<T>("get_nbi", Dir::Get, dest as usize, src as usize, nelems, pe) }
    }

    /// A deferred transfer of `nelems` elements between the local buffer at `local` and the
    /// symmetric address `sym` on PE `pe`: checked, then handed to the transport's
    /// `put_nbi`/`get_nbi` for a remote PE, or done at once for a PE of this node.
    ///
    /// # Safety
    /// As [`put_nbi_deferred`](World::put_nbi_deferred) (`Put`) or
    /// [`get_nbi_deferred`](World::get_nbi_deferred) (`Get`) for the local buffer.
    unsafe fn deferred<T>(
        &self,
        call: &'static str,
        dir: Dir,
        local: usize,
        sym: usize,
        nelems: usize,
        pe: usize,
    ) -> Result<()> {
        let Some(bytes) = self.deferred_bytes::<T>(call, local, nelems, pe)? else {
            return Ok(());
        };
        match self.target(call, sym, bytes, pe)? {
            Target::Local(a) => match dir {
                Dir::Put => self.xport.put(call, a, local as *const u8, bytes),
                Dir::Get => self.xport.get(call, local as *mut u8, a, bytes),
            },
            Target::Remote { pe, off } => {
                let at = Target::remote_addr(pe, off);
                let x = self.remote_xport(call, pe)?;
                // SAFETY: the caller keeps the local buffer until the next quiet, which quiets
                // this transport.
                unsafe {
                    match dir {
                        Dir::Put => x.put_nbi(call, at, local as *const u8, bytes),
                        Dir::Get => x.get_nbi(call, local as *mut u8, at, bytes),
                    }
                }
            }
        }
    }

    /// The byte length of a deferred transfer of `nelems` elements whose local buffer is at
    /// `local`, checked; None for an empty one (after the PE check).
    fn deferred_bytes<T>(
        &self,
        call: &'static str,
        local: usize,
        nelems: usize,
        pe: usize,
    ) -> Result<Option<usize>> {
        if nelems == 0 {
            return self.check_pe(call, pe).map(|()| None);
        }
        if local == 0 {
            return Err(Error::invalid(call, "the local buffer is a null pointer"));
        }
        if local % std::mem::align_of::<T>() != 0 {
            return Err(Error::invalid(
                call,
                format!("the local buffer {local:#x} is misaligned"),
            ));
        }
        let bytes = span_bytes(call, "transfer", nelems, std::mem::size_of::<T>())?;
        if local.checked_add(bytes).is_none() {
            return Err(Error::invalid(
                call,
                "the local buffer wraps the address space",
            ));
        }
        Ok(Some(bytes))
    }

    /// **One-sided.** Writes one element to the symmetric `dest` on PE `pe`. Like `shmem_TYPE_p`.
    #[inline]
    pub fn p<T: RmaType>(&self, dest: *mut T, value: T, pe: usize) -> Result<()> {
        self.put_impl("p", dest, std::slice::from_ref(&value), pe)
    }

    /// **One-sided.** Reads one element from the symmetric `src` on PE `pe`. Like `shmem_TYPE_g`.
    #[inline]
    pub fn g<T: RmaType>(&self, src: *const T, pe: usize) -> Result<T> {
        let mut v = [T::default_value()];
        self.get_impl("g", &mut v, src, pe)?;
        Ok(v[0])
    }

    /// **One-sided.** Strided put: element `i` of the target is `dest[i·dst]`, of the source
    /// `src[i·sst]`, for `i < nelems`; strides count elements and must be at least 1. Like
    /// `shmem_TYPE_iput`.
    pub fn iput<T: RmaType>(
        &self,
        dest: *mut T,
        src: &[T],
        dst: usize,
        sst: usize,
        nelems: usize,
        pe: usize,
    ) -> Result<()> {
        let local = (src.as_ptr() as usize, src.len());
        self.strided::<T>(
            "iput",
            Dir::Put,
            local,
            dest as usize,
            (dst, sst),
            nelems,
            pe,
        )
    }

    /// **One-sided.** Strided get: `dest[i·dst] = src[i·sst]` (src on PE `pe`) for `i < nelems`.
    /// Like `shmem_TYPE_iget`.
    pub fn iget<T: RmaType>(
        &self,
        dest: &mut [T],
        src: *const T,
        dst: usize,
        sst: usize,
        nelems: usize,
        pe: usize,
    ) -> Result<()> {
        let local = (dest.as_mut_ptr() as usize, dest.len());
        self.strided::<T>(
            "iget",
            Dir::Get,
            local,
            src as usize,
            (dst, sst),
            nelems,
            pe,
        )
    }

    /// The body of [`iput`](World::iput) (`Put`: the local buffer is the source) and
    /// [`iget`](World::iget) (`Get`: it is the destination): `nelems` elements between the
    /// local buffer (`local`: its address and length in elements) and the symmetric `sym` on
    /// PE `pe`, the destination's `dst` and the source's `sst` elements apart.
    #[allow(clippy::too_many_arguments)]
    fn strided<T: RmaType>(
        &self,
        call: &'static str,
        dir: Dir,
        (local, local_len): (usize, usize),
        sym: usize,
        (dst, sst): (usize, usize),
        nelems: usize,
        pe: usize,
    ) -> Result<()> {
        if nelems == 0 {
            return self.check_pe(call, pe);
        }
        let (dspan, sspan) = spans(call, dst, sst, nelems)?;
        // Each side's stride and extent, and its name in errors.
        let ((lstride, lspan, lwhat), (rstride, rspan, rwhat)) = match dir {
            Dir::Put => ((sst, sspan, "source"), (dst, dspan, "target")),
            Dir::Get => ((dst, dspan, "destination"), (sst, sspan, "source")),
        };
        local_fits(call, lwhat, local_len, lstride, nelems, lspan)?;
        let size = std::mem::size_of::<T>();
        let base = self.strided_target::<T>(call, rwhat, sym, rspan, pe)?;
        for i in 0..nelems {
            // Each element lies inside the checked ranges: i·stride < span on either side, the
            // local span fits the buffer, and span·size did not overflow, so neither does
            // i·stride·size.
            let l = local + i * lstride * size;
            let r = base.offset(i * rstride * size);
            match dir {
                Dir::Put => self.put_to(call, r, l as *const u8, size)?,
                Dir::Get => self.get_from(call, l as *mut u8, r, size)?,
            }
        }
        Ok(())
    }

    /// The target of a strided extent of `span` elements at `addr` on PE `pe` (`what` names it
    /// in errors).
    fn strided_target<T>(
        &self,
        call: &'static str,
        what: &str,
        addr: usize,
        span: usize,
        pe: usize,
    ) -> Result<Target> {
        let bytes = span_bytes(call, what, span, std::mem::size_of::<T>())?;
        self.target(call, addr, bytes, pe)
    }

    #[inline]
    fn put_impl<T: RmaType>(
        &self,
        call: &'static str,
        dest: *mut T,
        src: &[T],
        pe: usize,
    ) -> Result<()> {
        let bytes = std::mem::size_of_val(src);
        if bytes == 0 {
            return self.check_pe(call, pe);
        }
        let t = self.target(call, dest as usize, bytes, pe)?;
        self.put_to(call, t, src.as_ptr().cast(), bytes)
    }

    /// Copies `dest.len()` elements from the symmetric `src` on PE `pe` (the blocking and
    /// non-blocking gets, the host collectives' pulls).
    #[inline]
    pub(crate) fn get_impl<T: RmaType>(
        &self,
        call: &'static str,
        dest: &mut [T],
        src: *const T,
        pe: usize,
    ) -> Result<()> {
        let bytes = std::mem::size_of_val(dest);
        if bytes == 0 {
            return self.check_pe(call, pe);
        }
        let t = self.target(call, src as usize, bytes, pe)?;
        self.get_from(call, dest.as_mut_ptr().cast(), t, bytes)
    }
}

/// Which way a transfer between a local buffer and a symmetric address goes: to the symmetric
/// address (a put) or from it (a get).
#[derive(Clone, Copy)]
enum Dir {
    Put,
    Get,
}

/// Bytes of a strided extent of `span` elements of `size` bytes, checked: a wrapped product
/// would pass the range check and let the element loop write outside the allocation, and an
/// extent past `isize::MAX` bytes can be no object's (a slice of it is undefined behaviour).
fn span_bytes(call: &'static str, what: &str, span: usize, size: usize) -> Result<usize> {
    extent_bytes(what, span, size).map_err(|reason| Error::invalid(call, reason))
}

fn extent_bytes(what: &str, span: usize, size: usize) -> std::result::Result<usize, String> {
    span.checked_mul(size)
        .filter(|&b| b <= isize::MAX as usize)
        .ok_or_else(|| format!("{what} extent of {span} elements of {size} bytes overflows"))
}

/// The byte length of a transfer of `nelems` elements of `T`, checked: `nelems × size_of::<T>()`
/// must neither wrap nor exceed `isize::MAX` (no object is larger). The error is the reason
/// every transfer of the runtime gives for such a count (`transfer extent of N elements of S
/// bytes overflows`); the C libraries check each `(pointer, count)` pair with it before they
/// make a slice of it.
pub fn transfer_bytes<T>(nelems: usize) -> std::result::Result<usize, String> {
    extent_bytes("transfer", nelems, std::mem::size_of::<T>())
}

/// Rejects a local buffer (`what`, `len` elements) too short for `nelems` elements `stride`
/// apart (`span` elements).
fn local_fits(
    call: &'static str,
    what: &str,
    len: usize,
    stride: usize,
    nelems: usize,
    span: usize,
) -> Result<()> {
    if span > len {
        return Err(Error::invalid(
            call,
            format!("{what} has {len} elements, stride {stride} × {nelems} needs {span}"),
        ));
    }
    Ok(())
}

fn spans(call: &'static str, dst: usize, sst: usize, nelems: usize) -> Result<(usize, usize)> {
    if dst == 0 || sst == 0 {
        return Err(Error::invalid(
            call,
            format!("strides must be at least 1 (dst {dst}, sst {sst})"),
        ));
    }
    let span = |s: usize| (nelems - 1).checked_mul(s).and_then(|x| x.checked_add(1));
    match (span(dst), span(sst)) {
        (Some(a), Some(b)) => Ok((a, b)),
        _ => Err(Error::invalid(call, "stride × nelems overflows")),
    }
}
