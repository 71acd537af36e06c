//! The put and get sweeps behind `shmem_put_latency`, `shmem_get_latency`, `shmem_put_bw` and
//! `shmem_get_bw`: one implementation per direction, latency or bandwidth from the program's
//! [`Kind`].
//!
//! * Latency: PE 0 times `putmem` + `quiet` (or a blocking `getmem`) of `size` bytes, one at a
//!   time, always the same buffers.
//! * Bandwidth: PE 0 times iterations of `window` `putmem_nbi`/`getmem_nbi` of `size` bytes to
//!   consecutive slots of a `window × size` region (or all to one slot, `--same-slot`, as
//!   ucx_perftest does), then one `quiet`. They are the deferred forms
//!   ([`rshmem::World::put_nbi_deferred`]), as a C program's `shmem_putmem_nbi` is.
//!
//! The data is a position-dependent pattern whose seed changes at every point; the receiving
//! side fills its buffer with a different seed first and checks every byte afterwards.

use rshmem::SymBuf;

use crate::{
    fill_pattern, poison, time_reps, verify_pattern, Bench, Counts, Kind, LocalBuf, Result,
    Samples, Sweep, LOCAL_ALIGN,
};

/// Direction of the transfer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dir {
    /// PE 0 writes PE 1's memory.
    Put,
    /// PE 0 reads PE 1's memory.
    Get,
}

/// PE 0's target.
const TARGET: usize = 1;

/// State of a put or get sweep: the symmetric buffer (written by puts on PE 1, read by gets
/// from PE 1) and PE 0's private buffer (the source of puts, the destination of gets).
#[derive(Debug)]
pub struct RmaSweep<'w> {
    dir: Dir,
    sym: SymBuf<'w, u8>,
    local: LocalBuf,
}

impl<'w> RmaSweep<'w> {
    /// **Collective.** Allocates the buffers for the whole sweep of `b`'s options.
    pub fn new(b: &Bench<'w>, dir: Dir) -> Result<Self> {
        let region = match b.spec.kind {
            Kind::Bandwidth => b.opts.bw_region(),
            _ => b.opts.max,
        };
        // Page-aligned, as the symmetric buffer is (see `LocalBuf` for why it matters).
        let sym = b.world.align::<u8>(LOCAL_ALIGN, region)?;
        let local = LocalBuf::new(if b.me() == 0 { region } else { 0 });
        Ok(RmaSweep { dir, sym, local })
    }

    /// **Collective.** Releases the symmetric buffer.
    pub fn free(self, b: &Bench<'w>) -> Result<()> {
        Ok(b.world.free(self.sym)?)
    }

    /// The first `len` bytes of this PE's copy of the symmetric buffer.
    ///
    /// # Safety
    /// No PE may access these bytes remotely while the slice is alive (the sweep's barriers
    /// keep PE 0 out of the buffer while the target prepares or verifies it).
    #[allow(clippy::mut_from_ref)]
    unsafe fn sym_bytes(&self, len: usize) -> Result<&mut [u8]> {
        // SAFETY: forwarded from the caller; `len` never exceeds the region allocated in `new`.
        let all = unsafe { self.sym.as_mut_slice()? };
        Ok(&mut all[..len])
    }
}

/// Bytes of the local and symmetric buffers a point uses: `size` for a latency point and with
/// `--same-slot`, else its window of consecutive slots.
fn span(b: &Bench<'_>, size: usize, window: usize) -> usize {
    if b.spec.kind == Kind::Bandwidth {
        b.opts.bw_span(size)
    } else {
        size * window
    }
}

impl Sweep for RmaSweep<'_> {
    fn prepare(&mut self, b: &Bench<'_>, size: usize, window: usize, seed: u8) -> Result<()> {
        let len = span(b, size, window);
        match (self.dir, b.me()) {
            (Dir::Put, 0) => fill_pattern(&mut self.local.bytes_mut()[..len], seed, 0),
            // SAFETY: PE 0 does not touch the buffer until the barrier after prepare.
            (Dir::Put, TARGET) => fill_pattern(unsafe { self.sym_bytes(len)? }, poison(seed), 0),
            (Dir::Get, 0) => fill_pattern(&mut self.local.bytes_mut()[..len], poison(seed), 0),
            // SAFETY: as above.
            (Dir::Get, TARGET) => fill_pattern(unsafe { self.sym_bytes(len)? }, seed, 0),
            _ => {}
        }
        Ok(())
    }

    fn measure(
        &mut self,
        b: &Bench<'_>,
        size: usize,
        window: usize,
        counts: Counts,
    ) -> Result<Samples> {
        let w = b.world;
        let sym = self.sym.as_ptr();
        let local = self.local.bytes_mut();
        // Slot j of the window: consecutive, or all the first with `--same-slot`.
        let step = if b.opts.same_slot { 0 } else { size };
        // The `_nbi` transfers read or fill `local` until the quiet that ends each iteration,
        // as C's `shmem_putmem_nbi` may: over UCX they are only posted, so the window streams.
        let at = local.as_mut_ptr();
        match (self.dir, b.spec.kind) {
            (dir, Kind::Bandwidth) => time_reps(counts, |_| {
                for j in 0..window {
                    let (remote, mine) = (sym.wrapping_add(j * step), at.wrapping_add(j * step));
                    // SAFETY: slot j lies inside `local` (prepared for this span) and inside the
                    // symmetric region; neither is touched again before the quiet below (a
                    // get's `local` is read only after it, by `verify`).
                    unsafe {
                        match dir {
                            Dir::Put => w.put_nbi_deferred(remote, mine, size, TARGET),
                            Dir::Get => w.get_nbi_deferred(mine, remote, size, TARGET),
                        }?
                    };
                }
                w.quiet()?;
                Ok(())
            }),
            (Dir::Put, _) => {
                let src = &local[..size];
                time_reps(counts, |_| {
                    w.putmem(sym, src, TARGET)?;
                    w.quiet()?;
                    Ok(())
                })
            }
            (Dir::Get, _) => {
                let dst = &mut local[..size];
                time_reps(counts, |_| {
                    w.getmem(dst, sym, TARGET)?;
                    Ok(())
                })
            }
        }
    }

    fn verify(&mut self, b: &Bench<'_>, size: usize, window: usize, seed: u8) -> Result<()> {
        let len = span(b, size, window);
        let slots = if len == size {
            "one slot"
        } else {
            "consecutive slots"
        };
        let what = |buf: &str| {
            format!(
                "{} of {len} bytes ({window} × {size} to {slots}), {buf}",
                b.spec.name
            )
        };
        match (self.dir, b.me()) {
            // SAFETY: PE 0 does not touch the buffer until the barrier after verify.
            (Dir::Put, TARGET) => verify_pattern(
                unsafe { self.sym_bytes(len)? },
                seed,
                0,
                &what("put target on PE 1"),
            ),
            (Dir::Get, 0) => verify_pattern(
                &self.local.bytes()[..len],
                seed,
                0,
                &what("get destination on PE 0"),
            ),
            _ => Ok(()),
        }
    }
}
