//! One-sided atomic memory operations on symmetric objects of the AMO types.
//!
//! Every call is **one-sided** and atomic with respect to every other rshmem atomic on the same
//! object (from any PE), not with respect to plain puts. The target must be aligned to the
//! type's size. Fetching calls return the value held before the operation. Atomics are ordered
//! with other operations to the same PE by [`World::fence`] and completed by [`World::quiet`];
//! on the shared-memory transport each one is complete (and acquire-release) when it returns.

use std::sync::atomic::Ordering;

use crate::error::{Error, Result};
use crate::types::{AmoBitwise, AmoInt, AmoType, Bits};
use crate::world::World;

impl World {
    #[inline]
    fn amo_addr<T: AmoType>(&self, call: &'static str, dest: *const T, pe: usize) -> Result<usize> {
        let size = std::mem::size_of::<T>();
        if (dest as usize) % size != 0 {
            return Err(Error::invalid(call, format!("address {dest:p} is not {size}-byte aligned")));
        }
        self.remote(call, dest as usize, size, pe)
    }

    /// **One-sided.** Atomically reads `src` on PE `pe`. Like `shmem_atomic_fetch`.
    #[inline]
    pub fn atomic_fetch<T: AmoType>(&self, src: *const T, pe: usize) -> Result<T> {
        let a = self.amo_addr("atomic_fetch", src, pe)?;
        // SAFETY: `amo_addr` checked alignment and that the object is inside a live allocation of
        // PE pe's heap, mapped in this process for the World's lifetime.
        Ok(T::from_bits(unsafe { T::Bits::load(a, Ordering::Acquire) }))
    }

    /// **One-sided.** Atomically writes `value` to `dest` on PE `pe`. Like `shmem_atomic_set`.
    #[inline]
    pub fn atomic_set<T: AmoType>(&self, dest: *mut T, value: T, pe: usize) -> Result<()> {
        let a = self.amo_addr("atomic_set", dest, pe)?;
        // SAFETY: as in atomic_fetch.
        unsafe { T::Bits::store(a, value.to_bits(), Ordering::Release) };
        Ok(())
    }

    /// **One-sided.** Atomically replaces `dest` on PE `pe` with `value`; returns the old value.
    /// Like `shmem_atomic_swap`.
    #[inline]
    pub fn atomic_swap<T: AmoType>(&self, dest: *mut T, value: T, pe: usize) -> Result<T> {
        let a = self.amo_addr("atomic_swap", dest, pe)?;
        // SAFETY: as in atomic_fetch.
        Ok(T::from_bits(unsafe { T::Bits::swap(a, value.to_bits()) }))
    }

    /// **One-sided.** If `dest` on PE `pe` equals `cond`, replaces it with `value`; returns the
    /// old value either way. Like `shmem_atomic_compare_swap`.
    #[inline]
    pub fn atomic_compare_swap<T: AmoInt>(&self, dest: *mut T, cond: T, value: T, pe: usize) -> Result<T> {
        let a = self.amo_addr("atomic_compare_swap", dest, pe)?;
        // SAFETY: as in atomic_fetch.
        Ok(T::from_bits(unsafe { T::Bits::cas(a, cond.to_bits(), value.to_bits()) }))
    }

    /// **One-sided.** Adds `value` to `dest` on PE `pe` (wrapping); returns the old value. Like
    /// `shmem_atomic_fetch_add`.
    #[inline]
    pub fn atomic_fetch_add<T: AmoInt>(&self, dest: *mut T, value: T, pe: usize) -> Result<T> {
        let a = self.amo_addr("atomic_fetch_add", dest, pe)?;
        // SAFETY: as in atomic_fetch. Two's-complement addition on the bits is the same for
        // signed and unsigned types.
        Ok(T::from_bits(unsafe { T::Bits::fetch_add(a, value.to_bits()) }))
    }

    /// **One-sided.** Adds `value` to `dest` on PE `pe`. Like `shmem_atomic_add`.
    #[inline]
    pub fn atomic_add<T: AmoInt>(&self, dest: *mut T, value: T, pe: usize) -> Result<()> {
        let a = self.amo_addr("atomic_add", dest, pe)?;
        // SAFETY: as in atomic_fetch_add.
        unsafe { T::Bits::fetch_add(a, value.to_bits()) };
        Ok(())
    }

    /// **One-sided.** Increments `dest` on PE `pe`; returns the old value. Like
    /// `shmem_atomic_fetch_inc`.
    #[inline]
    pub fn atomic_fetch_inc<T: AmoInt>(&self, dest: *mut T, pe: usize) -> Result<T> {
        let a = self.amo_addr("atomic_fetch_inc", dest, pe)?;
        // SAFETY: as in atomic_fetch_add.
        Ok(T::from_bits(unsafe { T::Bits::fetch_add(a, T::one().to_bits()) }))
    }

    /// **One-sided.** Increments `dest` on PE `pe`. Like `shmem_atomic_inc`.
    #[inline]
    pub fn atomic_inc<T: AmoInt>(&self, dest: *mut T, pe: usize) -> Result<()> {
        let a = self.amo_addr("atomic_inc", dest, pe)?;
        // SAFETY: as in atomic_fetch_add.
        unsafe { T::Bits::fetch_add(a, T::one().to_bits()) };
        Ok(())
    }

    /// **One-sided.** Bitwise-ANDs `value` into `dest` on PE `pe`; returns the old value.
    #[inline]
    pub fn atomic_fetch_and<T: AmoBitwise>(&self, dest: *mut T, value: T, pe: usize) -> Result<T> {
        let a = self.amo_addr("atomic_fetch_and", dest, pe)?;
        // SAFETY: as in atomic_fetch.
        Ok(T::from_bits(unsafe { T::Bits::fetch_and(a, value.to_bits()) }))
    }

    /// **One-sided.** Bitwise-ORs `value` into `dest` on PE `pe`; returns the old value.
    #[inline]
    pub fn atomic_fetch_or<T: AmoBitwise>(&self, dest: *mut T, value: T, pe: usize) -> Result<T> {
        let a = self.amo_addr("atomic_fetch_or", dest, pe)?;
        // SAFETY: as in atomic_fetch.
        Ok(T::from_bits(unsafe { T::Bits::fetch_or(a, value.to_bits()) }))
    }

    /// **One-sided.** Bitwise-XORs `value` into `dest` on PE `pe`; returns the old value.
    #[inline]
    pub fn atomic_fetch_xor<T: AmoBitwise>(&self, dest: *mut T, value: T, pe: usize) -> Result<T> {
        let a = self.amo_addr("atomic_fetch_xor", dest, pe)?;
        // SAFETY: as in atomic_fetch.
        Ok(T::from_bits(unsafe { T::Bits::fetch_xor(a, value.to_bits()) }))
    }

    /// **One-sided.** Bitwise-ANDs `value` into `dest` on PE `pe`.
    #[inline]
    pub fn atomic_and<T: AmoBitwise>(&self, dest: *mut T, value: T, pe: usize) -> Result<()> {
        self.atomic_fetch_and(dest, value, pe).map(drop)
    }

    /// **One-sided.** Bitwise-ORs `value` into `dest` on PE `pe`.
    #[inline]
    pub fn atomic_or<T: AmoBitwise>(&self, dest: *mut T, value: T, pe: usize) -> Result<()> {
        self.atomic_fetch_or(dest, value, pe).map(drop)
    }

    /// **One-sided.** Bitwise-XORs `value` into `dest` on PE `pe`.
    #[inline]
    pub fn atomic_xor<T: AmoBitwise>(&self, dest: *mut T, value: T, pe: usize) -> Result<()> {
        self.atomic_fetch_xor(dest, value, pe).map(drop)
    }
}
