//! Stream-ordered calls (`*_on_stream`) whose target PE is not reachable by load/store: a
//! one-thread internal kernel makes the device call, which goes through the proxy, so the
//! operation happens in stream order like the load/store forms.

use cudarc::driver::{CudaStream, PushKernelArg};

use crate::cuda::kernels::{launched, ONE_THREAD};
use crate::error::Result;
use crate::world::World;

impl World {
    /// With a proxy, loads rshmem's internal kernels now, at init. Loaded at first use (CUDA's
    /// lazy loading), a kernel can need a context synchronization while an earlier kernel
    /// waits for the proxy, and the proxy's own CUDA calls then wait too: `*_on_stream` calls
    /// through the proxy hung that way (the first `put_on_stream` kernel waited for its put
    /// while the next call looked up another internal kernel).
    pub(crate) fn load_proxy_kernels(&self) -> Result<()> {
        if self.proxy.is_none() {
            return Ok(());
        }
        let call = "init";
        let p = self.p2p(call)?;
        p.internal(call)?
            .preload(call, crate::cuda::kernels::INTERNAL_NAMES)?;
        Ok(())
    }

    /// True if `pe` is a PE of the job that this PE reaches through the proxy (GPU heap, PE on
    /// another node).
    #[inline]
    pub(crate) fn via_proxy(&self, pe: usize) -> bool {
        self.proxy.is_some() && matches!(self.node.local_of.get(pe), Some(None))
    }

    /// Checks that `sig` is an aligned signal word of this PE's heap and `pe` a valid target
    /// (reachable by load/store or through the proxy).
    pub(crate) fn sig_check(&self, call: &'static str, sig: *const u64, pe: usize) -> Result<()> {
        self.sig_target(call, sig, pe).map(drop)
    }

    /// `put_on_stream` (`get == false`: `dest` on `pe` ← my `src`) or `get_on_stream`
    /// (`get == true`: my `dest` ← `src` on `pe`) through the proxy; both addresses are this
    /// PE's symmetric addresses.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn proxy_copy_on_stream(
        &self,
        call: &'static str,
        dest: usize,
        src: usize,
        nbytes: usize,
        pe: usize,
        get: bool,
        stream: &CudaStream,
    ) -> Result<()> {
        self.check_pe(call, pe)?;
        self.heap.check_range(call, dest, nbytes)?;
        self.heap.check_range(call, src, nbytes)?;
        if nbytes == 0 {
            return Ok(());
        }
        let p = self.p2p(call)?;
        let name = "rshmem_internal_proxy_copy";
        let f = p.internal(call)?.func(call, name)?;
        let (d, s, n, pe_i, g) = (
            dest as u64,
            src as u64,
            nbytes as u64,
            pe as i32,
            get as i32,
        );
        let mut b = stream.launch_builder(&f);
        b.arg(&d).arg(&s).arg(&n).arg(&pe_i).arg(&g);
        // SAFETY: matches rshmem_internal_proxy_copy(uint64_t, uint64_t, uint64_t, int, int);
        // both ranges were checked against live allocations of this PE's GPU heap.
        launched(call, name, unsafe { b.launch(ONE_THREAD) })
    }

    /// `p_on_stream` through the proxy: `size` bytes of `bits` to `dest` on `pe`.
    pub(crate) fn proxy_p_on_stream(
        &self,
        call: &'static str,
        dest: usize,
        bits: u64,
        size: usize,
        pe: usize,
        stream: &CudaStream,
    ) -> Result<()> {
        self.check_pe(call, pe)?;
        self.heap.check_range(call, dest, size)?;
        let p = self.p2p(call)?;
        let name = "rshmem_internal_proxy_p";
        let f = p.internal(call)?.func(call, name)?;
        let (d, sz, pe_i) = (dest as u64, size as u32, pe as i32);
        let mut b = stream.launch_builder(&f);
        b.arg(&d).arg(&bits).arg(&sz).arg(&pe_i);
        // SAFETY: matches rshmem_internal_proxy_p(uint64_t, uint64_t, uint32_t, int); the range
        // was checked.
        launched(call, name, unsafe { b.launch(ONE_THREAD) })
    }

    /// Stream-ordered quiet through the proxy: completes every request issued before it (the
    /// device's and, since the TCP transport is shared, this PE's host-issued puts).
    pub(crate) fn proxy_quiet_on_stream(
        &self,
        call: &'static str,
        stream: &CudaStream,
    ) -> Result<()> {
        let p = self.p2p(call)?;
        let name = "rshmem_internal_quiet";
        let f = p.internal(call)?.func(call, name)?;
        // SAFETY: rshmem_internal_quiet takes no arguments.
        launched(call, name, unsafe {
            stream.launch_builder(&f).launch(ONE_THREAD)
        })
    }
}
