//! Symmetric registration of users' GPU buffers (NVSHMEM's
//! `nvshmemx_buffer_register_symmetric` / `nvshmemx_buffer_unregister_symmetric`).
//!
//! A buffer of the same size on every PE, allocated by the program with the CUDA VMM calls
//! (`cuMemCreate` with `CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR` among its requested handle
//! types, mapped with `cuMemMap`), becomes symmetric memory:
//!
//! 1. every PE retains its buffer's allocation handle (`cuMemRetainAllocationHandle`), checks it
//!    (VMM memory of its own GPU, exportable as a POSIX fd, the size a multiple of the
//!    allocation granularity, the address the start of its mapping), and the PEs compare sizes
//!    (one allgather: a mismatch or any PE's failure fails the call on every PE);
//! 2. the PEs agree on one offset near the top of their slices of the symmetric heap's address
//!    range (above the mapped heap, below earlier registrations; the heap stops growing below
//!    the lowest registered buffer);
//! 3. each PE maps its buffer at that offset of its own slice, exports it as a file descriptor
//!    to the other PEs of the host over the sockets that share heap chunks, and maps theirs at
//!    the same offset of their slices (`cuMemMap` + `cuMemSetAccess` for its GPU).
//!
//! The returned address is then translated like any heap address (host calls, `World::ptr`,
//! device calls: the device library adds the slice stride). The runtime's host-side range
//! checks accept it; the device library's debug checks accept `[heap_reg_start, slice)` of the
//! device state. The physical memory stays the program's: both mappings show the same bytes.
//!
//! **Limits.** Only the GPU backend; only jobs whose PEs all share one host (PEs on other hosts
//! could not reach the buffer: their remote transports register heap chunks only), so a job
//! spanning hosts (or run with `RSHMEM_DISABLE_P2P=1`, where every PE is its own host) gets
//! [`Error::Unsupported`]. `cudaMalloc` memory is refused, as NVSHMEM 3.4 refuses it.

use std::ffi::c_void;

use crate::error::{Error, Result};
use crate::world::World;

/// Encodes words for an allgather.
fn words(w: &[u64]) -> Vec<u8> {
    w.iter().flat_map(|x| x.to_le_bytes()).collect()
}

/// Word `i` of PE `pe`'s allgather contribution (0 when it sent fewer).
fn word(all: &[Vec<u8>], pe: usize, i: usize) -> u64 {
    all.get(pe)
        .and_then(|b| b.get(8 * i..8 * i + 8))
        .and_then(|b| b.try_into().ok())
        .map_or(0, u64::from_le_bytes)
}

/// Checks that each of the `n` PEs' first word in `all` is 1 (its step succeeded); otherwise an
/// error naming the first PE that failed, which `did_not` says what it could not do.
fn all_ok(call: &'static str, all: &[Vec<u8>], n: usize, did_not: &str) -> Result<()> {
    match (0..n).find(|&pe| word(all, pe, 0) != 1) {
        Some(pe) => Err(Error::invalid(
            call,
            format!("PE {pe} {did_not} (its own error says why)"),
        )),
        None => Ok(()),
    }
}

impl World {
    /// Checks that symmetric registration can work in this job at all (the same answer on
    /// every PE: no collective is needed).
    fn userbuf_supported(&self, call: &'static str) -> Result<&std::sync::Arc<crate::cuda::Gpu>> {
        let Some(g) = self.heap.gpu() else {
            return Err(Error::Unsupported {
                call,
                reason: "symmetric registration of user buffers needs the GPU backend (this \
                         job runs on the CPU backend, RSHMEM_BACKEND=cpu): the buffer must be \
                         CUDA VMM memory"
                    .into(),
            });
        };
        if self.node.len() != self.n {
            return Err(Error::Unsupported {
                call,
                reason: format!(
                    "symmetric registration of user buffers needs every PE on one host (this \
                     job has {} of its {} PEs on this host; with RSHMEM_DISABLE_P2P=1 every PE \
                     is its own host): PEs on other hosts could not reach the buffer",
                    self.node.len(),
                    self.n
                ),
            });
        }
        Ok(g)
    }

    /// **Collective** (every PE, the same size). Makes `buf`, this PE's buffer of `size` bytes
    /// of CUDA VMM memory, symmetric: returns the address, equal on every PE up to the slice
    /// stride like any symmetric address, at which every PE's call on it reaches the matching
    /// buffer of the target PE. NVSHMEM's `nvshmemx_buffer_register_symmetric`.
    ///
    /// `buf` must be the address a `cuMemCreate` allocation of this PE's GPU is mapped at
    /// (`cuMemMap`), created with `CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR` in
    /// `requestedHandleTypes`; `size` a multiple of its allocation granularity, at most its
    /// size. The returned address and `buf` show the same memory (writes through either are
    /// seen through the other); the buffer stays the program's to free, after
    /// [`unregister_buffer_symmetric`](World::unregister_buffer_symmetric) (the runtime keeps
    /// its own reference to the memory until then, so an early free does not pull it away).
    ///
    /// The buffer is placed near the top of every PE's slice of the heap's address range
    /// (`RSHMEM_HEAP_LIMIT` bounds the slice), and the heap stops growing below it: register
    /// early or raise the limit. Completes with every PE's copy mapped on every PE (the call
    /// ends with an exchange between all PEs).
    ///
    /// Errors (every PE fails when one does, each naming this call): [`Error::Unsupported`] on
    /// the CPU backend or when the PEs span hosts; [`Error::InvalidArgument`] for a NULL
    /// buffer, size 0, memory that is not CUDA VMM memory (`cudaMalloc`, host memory), a VMM
    /// buffer without the POSIX fd handle type or of another GPU, a size that is not a multiple
    /// of the granularity, or sizes that differ between PEs (naming them);
    /// [`Error::OutOfMemory`] when the address space left above the heap is too small.
    pub fn register_buffer_symmetric(&self, buf: *mut c_void, size: usize) -> Result<*mut c_void> {
        let call = "register_buffer_symmetric";
        let g = self.userbuf_supported(call)?.clone();
        let _span = tracing::debug_span!(target: "rshmem::heap", "register_buffer_symmetric", size)
            .entered();
        // 1. Local checks, then every PE learns every PE's outcome and size.
        let mine: Result<crate::cuda::UserAllocation> = if buf.is_null() {
            Err(Error::invalid(call, "the buffer is NULL"))
        } else if size == 0 {
            Err(Error::invalid(call, "the size is 0"))
        } else {
            crate::cuda::retain_user_allocation(call, &g, buf as usize, size)
        };
        let gran = mine.as_ref().map_or(0, |a| a.granularity as u64);
        let all = self
            .boot
            .allgather(&words(&[mine.is_ok() as u64, size as u64, gran]))?;
        let mine = mine?;
        all_ok(call, &all, self.n, "could not register its buffer")?;
        if let Some(pe) = (0..self.n).find(|&pe| word(&all, pe, 1) != size as u64) {
            return Err(Error::invalid(
                call,
                format!(
                    "the size must be the same on every PE: PE {} passed {size} bytes, PE {pe} \
                     passed {} bytes",
                    self.me,
                    word(&all, pe, 1)
                ),
            ));
        }
        let align = (0..self.n)
            .map(|pe| word(&all, pe, 2) as usize)
            .max()
            .unwrap_or(0);
        // 2. One offset on every PE (computed alike; compared to catch any divergence).
        let off = self.heap.user_offset(call, size, align);
        let all = self.boot.allgather(&words(&[
            off.is_ok() as u64,
            *off.as_ref().unwrap_or(&0) as u64,
        ]))?;
        let off = off?;
        all_ok(call, &all, self.n, "found no room for the buffer")?;
        if let Some(pe) = (0..self.n).find(|&pe| word(&all, pe, 1) != off as u64) {
            return Err(Error::AsymmetricCall {
                call,
                details: format!(
                    "PE {} would place the buffer at slice offset {off:#x}, PE {pe} at {:#x} \
                     (the PEs registered or unregistered different buffers before)",
                    self.me,
                    word(&all, pe, 1)
                ),
            });
        }
        // 3. Map every local copy; then all PEs learn whether all succeeded.
        let mapped = self
            .heap
            .map_user(&self.node, &self.live, call, &mine, off, size);
        drop(mine);
        let all = self.boot.allgather(&words(&[mapped.is_ok() as u64]))?;
        mapped?;
        if let Err(e) = all_ok(call, &all, self.n, "could not map the buffers") {
            let _ = self.heap.unmap_user(call, off);
            return Err(e);
        }
        self.refresh_device_state()?;
        Ok((self.heap.my_base() + off) as *mut c_void)
    }

    /// **Collective** (every PE, the same buffer). Ends a registration of
    /// [`register_buffer_symmetric`](World::register_buffer_symmetric): `addr` is the address
    /// it returned, `size` the size it was given. Completes this PE's outstanding operations
    /// and waits for its GPU's work (`cuCtxSynchronize`) and for every PE before unmapping, so
    /// no PE's call still uses the buffer; the program's own mapping (`buf`) stays.
    /// NVSHMEM's `nvshmemx_buffer_unregister_symmetric`.
    ///
    /// Errors (every PE fails when one does): [`Error::Unsupported`] as for registration;
    /// [`Error::InvalidArgument`] when `addr` is not an address registration returned or
    /// `size` is not its size, naming the PE.
    pub fn unregister_buffer_symmetric(&self, addr: *mut c_void, size: usize) -> Result<()> {
        let call = "unregister_buffer_symmetric";
        let g = self.userbuf_supported(call)?.clone();
        let mine = match self.heap.user_region(addr as usize) {
            Some((off, len)) if self.heap.my_base() + off == addr as usize && len == size => {
                Ok(off)
            }
            Some((off, len)) => Err(Error::invalid(
                call,
                format!(
                    "{addr:p} and {size} bytes do not name a registered buffer (the buffer there \
                     starts at {:#x} and has {len} bytes)",
                    self.heap.my_base() + off
                ),
            )),
            None => Err(Error::invalid(
                call,
                format!(
                    "{addr:p} is not an address register_buffer_symmetric returned (or it was \
                     unregistered already)"
                ),
            )),
        };
        let all = self.boot.allgather(&words(&[
            mine.is_ok() as u64,
            *mine.as_ref().unwrap_or(&0) as u64,
        ]))?;
        let off = mine?;
        if let Some(pe) =
            (0..self.n).find(|&pe| word(&all, pe, 0) != 1 || word(&all, pe, 1) != off as u64)
        {
            return Err(Error::invalid(
                call,
                format!("PE {pe} named another buffer or none (its own error says why)"),
            ));
        }
        self.quiet_all(call)?;
        g.bind(call)?;
        g.ctx.synchronize().map_err(|e| Error::Cuda {
            call,
            what: "waiting for this PE's GPU work before unmapping the buffer".into(),
            code: format!("{e:?}"),
        })?;
        self.sync_all_named(call)?;
        self.heap.unmap_user(call, off)?;
        self.refresh_device_state()
    }
}
