//! One-sided atomic memory operations on symmetric objects of the AMO types.
//!
//! Every call is **one-sided** and atomic with respect to every other rshmem atomic on the same
//! object (from any PE), not with respect to plain puts. The target must be aligned to the
//! type's size. Fetching calls return the value held before the operation. Atomics are ordered
//! with other operations to the same PE by [`World::fence`] and completed by [`World::quiet`];
//! on the shared-memory transport each one is complete (and acquire-release) when it returns.
//! The non-fetching calls (`atomic_set`, `atomic_add`, `atomic_inc`, `atomic_and`/`or`/`xor`)
//! may be posted to a PE of another host: then they are complete at the next quiet.

use crate::error::Result;
use crate::transport::{Amo, AmoOp};
use crate::types::{AmoBitwise, AmoInt, AmoType, Bits};
use crate::world::{Target, World};

/// Declares atomics that come as a fetching call and one without the old value, one row a
/// pair: the docs and name of each, the type bound, and the operation (applied with `value`).
macro_rules! fetch_and_plain {
    ($($(#[$fdoc:meta])* $fetch:ident, $(#[$doc:meta])* $plain:ident: $bound:ident $op:ident;)+) => {$(
        $(#[$fdoc])*
        #[inline]
        pub fn $fetch<T: $bound>(&self, dest: *mut T, value: T, pe: usize) -> Result<T> {
            self.amo(stringify!($fetch), AmoOp::$op, dest, value, value, pe)
        }

        $(#[$doc])*
        #[inline]
        pub fn $plain<T: $bound>(&self, dest: *mut T, value: T, pe: usize) -> Result<()> {
            self.amo_post(stringify!($plain), AmoOp::$op, dest, value, pe)
        }
    )+};
}

impl World {
    /// Checks `dest` (aligned, inside a live allocation, PE in range): its target on PE `pe`
    /// and its size.
    #[inline(always)]
    fn amo_word<T: AmoType>(
        &self,
        call: &'static str,
        dest: *const T,
        pe: usize,
    ) -> Result<(Target, usize)> {
        let size = std::mem::size_of::<T>();
        Self::check_aligned(call, "address", dest, size)?;
        Ok((self.target(call, dest as usize, size, pe)?, size))
    }

    /// Checks `dest` ([`amo_word`](World::amo_word)) and applies `op`.
    #[inline]
    fn amo<T: AmoType>(
        &self,
        call: &'static str,
        op: AmoOp,
        dest: *const T,
        value: T,
        cond: T,
        pe: usize,
    ) -> Result<T> {
        let (t, size) = self.amo_word(call, dest, pe)?;
        let (v, c) = (value.to_bits().to_u64(), cond.to_bits().to_u64());
        let old = self.amo_at(call, t, Amo::new(op, size, v, c))?;
        Ok(T::from_bits(T::Bits::from_u64(old)))
    }

    /// [`amo`](World::amo) for the calls that return no old value (see the module docs).
    #[inline]
    fn amo_post<T: AmoType>(
        &self,
        call: &'static str,
        op: AmoOp,
        dest: *const T,
        value: T,
        pe: usize,
    ) -> Result<()> {
        let (t, size) = self.amo_word(call, dest, pe)?;
        let v = value.to_bits().to_u64();
        self.amo_nf_at(call, t, Amo::new(op, size, v, v))
    }

    /// **One-sided.** Atomically reads `src` on PE `pe`. Like `shmem_atomic_fetch`.
    #[inline]
    pub fn atomic_fetch<T: AmoType>(&self, src: *const T, pe: usize) -> Result<T> {
        let zero = T::from_bits(T::Bits::from_u64(0));
        self.amo("atomic_fetch", AmoOp::Fetch, src, zero, zero, pe)
    }

    /// **One-sided.** Atomically writes `value` to `dest` on PE `pe`. Like `shmem_atomic_set`.
    #[inline]
    pub fn atomic_set<T: AmoType>(&self, dest: *mut T, value: T, pe: usize) -> Result<()> {
        self.amo_post("atomic_set", AmoOp::Set, dest, value, pe)
    }

    /// **One-sided.** Atomically replaces `dest` on PE `pe` with `value`; returns the old value. Like `shmem_atomic_swap`.
    #[inline]
    pub fn atomic_swap<T: AmoType>(&self, dest: *mut T, value: T, pe: usize) -> Result<T> {
        self.amo("atomic_swap", AmoOp::Swap, dest, value, value, pe)
    }

    /// **One-sided.** If `dest` on PE `pe` equals `cond`, replaces it with `value`; returns the old value either way. Like `shmem_atomic_compare_swap`.
    #[inline]
    pub fn atomic_compare_swap<T: AmoInt>(
        &self,
        dest: *mut T,
        cond: T,
        value: T,
        pe: usize,
    ) -> Result<T> {
        self.amo(
            "atomic_compare_swap",
            AmoOp::CompareSwap,
            dest,
            value,
            cond,
            pe,
        )
    }

    /// **One-sided.** Increments `dest` on PE `pe`; returns the old value. Like `shmem_atomic_fetch_inc`.
    #[inline]
    pub fn atomic_fetch_inc<T: AmoInt>(&self, dest: *mut T, pe: usize) -> Result<T> {
        self.amo(
            "atomic_fetch_inc",
            AmoOp::FetchAdd,
            dest,
            T::one(),
            T::one(),
            pe,
        )
    }

    /// **One-sided.** Increments `dest` on PE `pe`. Like `shmem_atomic_inc`.
    #[inline]
    pub fn atomic_inc<T: AmoInt>(&self, dest: *mut T, pe: usize) -> Result<()> {
        self.amo_post("atomic_inc", AmoOp::FetchAdd, dest, T::one(), pe)
    }

    fetch_and_plain! {
        /// **One-sided.** Adds `value` to `dest` on PE `pe` (wrapping); returns the old value. Like `shmem_atomic_fetch_add`.
        atomic_fetch_add,
        /// **One-sided.** Adds `value` to `dest` on PE `pe` (wrapping). Like `shmem_atomic_add`.
        atomic_add: AmoInt FetchAdd;

        /// **One-sided.** Bitwise-ANDs `value` into `dest` on PE `pe`; returns the old value. Like `shmem_atomic_fetch_and`.
        atomic_fetch_and,
        /// **One-sided.** Bitwise-ANDs `value` into `dest` on PE `pe`. Like `shmem_atomic_and`.
        atomic_and: AmoBitwise FetchAnd;

        /// **One-sided.** Bitwise-ORs `value` into `dest` on PE `pe`; returns the old value. Like `shmem_atomic_fetch_or`.
        atomic_fetch_or,
        /// **One-sided.** Bitwise-ORs `value` into `dest` on PE `pe`. Like `shmem_atomic_or`.
        atomic_or: AmoBitwise FetchOr;

        /// **One-sided.** Bitwise-XORs `value` into `dest` on PE `pe`; returns the old value. Like `shmem_atomic_fetch_xor`.
        atomic_fetch_xor,
        /// **One-sided.** Bitwise-XORs `value` into `dest` on PE `pe`. Like `shmem_atomic_xor`.
        atomic_xor: AmoBitwise FetchXor;
    }
}
