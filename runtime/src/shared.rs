//! Owned (`'static`) handles: a [`World`] shared through an `Arc` and the symmetric buffers
//! that keep it alive ([`SharedSymBuf`]), so that a framework can hold the world and its
//! buffers in one struct.
//!
//! Freeing stays **explicit and collective**: [`SharedSymBuf::free`] is `shmem_free` and every
//! PE must call it for the same buffer in the same order. Dropping a `SharedSymBuf` never frees
//! (a collective call in `Drop` would run at a different point on each PE, whenever each PE's
//! owner happens to go away, and mismatch or deadlock): its memory stays allocated, and a
//! warning is logged, until the world is dropped. This is the rule of [`crate::SymBuf`] too.
//!
//! ```no_run
//! use std::sync::Arc;
//! use rshmem::{SharedSymBuf, World};
//!
//! /// A framework's communicator: owns the world and its buffers, no lifetimes.
//! struct Comm {
//!     flags: SharedSymBuf<u64>,
//!     data: SharedSymBuf<f32>,
//!     world: Arc<World>,
//! }
//!
//! impl Comm {
//!     fn new() -> rshmem::Result<Self> {
//!         let world = rshmem::init()?.into_shared();
//!         Ok(Comm {
//!             flags: world.calloc_shared(world.n_pes())?,
//!             data: world.malloc_shared(1 << 20)?,
//!             world,
//!         })
//!     }
//!
//!     /// Collective: frees the buffers in the same order on every PE, then finalizes.
//!     fn close(self) -> rshmem::Result<()> {
//!         self.data.free()?;
//!         self.flags.free()?;
//!         World::finalize_shared(self.world)
//!     }
//! }
//!
//! fn main() -> rshmem::Result<()> {
//!     let c = Comm::new()?;
//!     let next = (c.world.my_pe() + 1) % c.world.n_pes();
//!     c.world.put(c.data.as_ptr(), &[1.0f32], next)?;
//!     c.world.barrier_all()?;
//!     c.close()
//! }
//! ```

use std::sync::Arc;

use crate::error::Result;
use crate::mem::SymBuf;
use crate::types::RmaType;
use crate::world::World;

/// A typed symmetric allocation that owns a handle to its [`World`] (an `Arc`), so it has no
/// lifetime parameter and can live in the same struct as the world. Made by
/// [`World::malloc_shared`] / [`World::calloc_shared`] on a world from [`World::into_shared`].
///
/// It offers the local accessors of [`SymBuf`]; pass [`SharedSymBuf::as_ptr`] or
/// [`SharedSymBuf::at`] to the world's RMA, atomic and wait calls. Release it with
/// [`SharedSymBuf::free`] (collective). Dropped without `free`, its memory stays allocated
/// until the world itself is dropped (see the [module docs](crate::shared) for why).
pub struct SharedSymBuf<T: RmaType> {
    ptr: *mut T,
    len: usize,
    world: Arc<World>,
}

// SAFETY: like SymBuf: an address into memory that stays mapped as long as the Arc<World> it
// holds, accessible from every thread; all access through &SharedSymBuf is volatile or atomic.
unsafe impl<T: RmaType> Send for SharedSymBuf<T> {}
// SAFETY: as above.
unsafe impl<T: RmaType> Sync for SharedSymBuf<T> {}

impl<T: RmaType> std::fmt::Debug for SharedSymBuf<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Shared{:?}", self.view())
    }
}

impl World {
    /// **Collective.** [`World::malloc`] returning an owned handle that keeps the world alive.
    pub fn malloc_shared<T: RmaType>(self: &Arc<Self>, count: usize) -> Result<SharedSymBuf<T>> {
        self.malloc::<T>(count).map(|b| self.owned(b))
    }

    /// **Collective.** [`World::calloc`] returning an owned handle that keeps the world alive.
    pub fn calloc_shared<T: RmaType>(self: &Arc<Self>, count: usize) -> Result<SharedSymBuf<T>> {
        self.calloc::<T>(count).map(|b| self.owned(b))
    }

    /// The owned handle of the allocation `b` of this world.
    fn owned<T: RmaType>(self: &Arc<Self>, b: SymBuf<'_, T>) -> SharedSymBuf<T> {
        SharedSymBuf {
            ptr: b.as_ptr(),
            len: b.len(),
            world: self.clone(),
        }
    }
}

impl<T: RmaType> SharedSymBuf<T> {
    /// A borrowed view with SymBuf's accessors; never handed out (a `SymBuf` can be passed to
    /// `World::free`, which would leave this handle dangling).
    fn view(&self) -> SymBuf<'_, T> {
        self.world.wrap(self.ptr.cast(), self.len)
    }

    /// The world this buffer belongs to.
    pub fn world(&self) -> &Arc<World> {
        &self.world
    }

    crate::mem::sym_addresses!();

    /// PE `pe`'s copy of element 0 for load/store, as [`SymBuf::ptr`].
    pub fn ptr(&self, pe: usize) -> Option<*mut T> {
        self.view().ptr(pe)
    }

    /// Reads element `i` of this PE's copy, as [`SymBuf::read`].
    pub fn read(&self, i: usize) -> Result<T> {
        self.view().read(i)
    }

    /// Writes element `i` of this PE's copy, as [`SymBuf::write`].
    pub fn write(&self, i: usize, v: T) -> Result<()> {
        self.view().write(i, v)
    }

    /// Copies this PE's copy into a Vec, as [`SymBuf::to_vec`].
    pub fn to_vec(&self) -> Result<Vec<T>> {
        self.view().to_vec()
    }

    /// Overwrites this PE's copy from element 0, as [`SymBuf::copy_from_slice`].
    pub fn copy_from_slice(&self, src: &[T]) -> Result<()> {
        self.view().copy_from_slice(src)
    }

    /// **Collective.** Releases the buffer on every PE ([`World::free`]): every PE must free the
    /// same buffers in the same order.
    pub fn free(self) -> Result<()> {
        let me = std::mem::ManuallyDrop::new(self);
        // SAFETY: `me` is never used or dropped again after the Arc is moved out of it.
        let world = unsafe { std::ptr::read(&me.world) };
        world.free_bytes(me.ptr.cast())
    }
}

impl<T: RmaType> Drop for SharedSymBuf<T> {
    fn drop(&mut self) {
        if self.len > 0 && !self.world.is_finalized() {
            tracing::warn!(
                target: "rshmem::heap",
                pe = self.world.my_pe(),
                len = self.len,
                "a SharedSymBuf was dropped without free (a collective call): its memory stays allocated until the world is dropped"
            );
        }
    }
}
