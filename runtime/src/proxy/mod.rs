//! The proxy: a host thread per PE that executes device requests the GPU cannot do by
//! load/store (puts, gets, atomics, signals, quiet and barriers that involve PEs on other
//! nodes), fed by a ring of fixed-size requests in host memory mapped into the GPU
//! ([`fifo`]; device half: `device-lib/include/rshmem/proxy.cuh`).
//!
//! It exists on the GPU backend when some PE is on another node (or every PE is, under
//! `RSHMEM_DISABLE_P2P=1`); each request travels over the remote transport that serves its
//! target PE: the TCP transport, whose service threads apply them to the target's GPU memory
//! ([`GpuMem`](crate::cuda::target::GpuMem) on a stream of its own), or the UCX transport (puts
//! and gets by UCX into the GPU heap registered as CUDA memory, atomics applied by rshmem on
//! the target: `transport/ucx/amo.rs`). The device
//! state's `proxy_fifo`, `proxy_ctrl` and `proxy_slots` point device code at it; with
//! `proxy_slots == 0` (every PE reachable by load/store) device calls never look at it.

pub mod fifo;
mod ordered;
pub(crate) mod service;

use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

use crate::cuda::pinned::Pinned;
use crate::cuda::target::GpuMem;
use crate::cuda::Gpu;
use crate::device::DeviceState;
use crate::error::{Error, Result};
use crate::heap::Heap;
use crate::node::{Liveness, Node};
use crate::transport::remote::Remotes;

/// The running proxy of this PE: its ring (host-mapped) and service thread.
pub struct Proxy {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
    // The ring memory outlives the thread (dropped after the join in `Drop`).
    _slots: Pinned,
    _ctrl: Pinned,
    fifo_dev: u64,
    ctrl_dev: u64,
    n_slots: usize,
}

crate::debug_fields!(Proxy, |p| { slots: p.n_slots });

impl Proxy {
    /// Starts the proxy of a GPU heap (`heap`) whose job has PEs on other nodes, reached through
    /// the remote transports (`remotes`).
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn start(
        gpu: &Arc<Gpu>,
        state: &Arc<Mutex<DeviceState>>,
        remotes: &Arc<Remotes>,
        heap: &Heap,
        ctrl: &Heap,
        node: &Node,
        me: usize,
        n: usize,
        live: &Arc<Liveness>,
        timeout: Option<std::time::Duration>,
    ) -> Result<Proxy> {
        let call = "init";
        let n_slots = fifo::DEFAULT_SLOTS;
        let slots = Pinned::new(gpu, n_slots * fifo::SLOT, true, call)?;
        let ctl = Pinned::new(gpu, fifo::CTRL_BYTES, true, call)?;
        let fifo_dev = slots.device_ptr(call)?;
        let ctrl_dev = ctl.device_ptr(call)?;
        // SAFETY: both allocations are zeroed, page-aligned, owned by the Proxy and outlive
        // the thread (joined in Drop before they are freed); only that thread reads them on
        // the host.
        let ring = unsafe { fifo::Ring::new(slots.ptr(), ctl.ptr(), n_slots) };
        let mem = GpuMem::new(gpu.clone(), state.clone(), false, me, timeout)?;
        let bounce = Pinned::new(gpu, service::BOUNCE, false, call)?;
        let ex = service::NetExec {
            remotes: remotes.clone(),
            mem,
            heap_base: heap.my_base(),
            bounce,
            barrier: service::HostBarrier {
                me,
                n,
                epoch: 0,
                local_of: node.local_of.clone(),
                ctrl_base: (0..node.len()).map(|l| ctrl.slice_base(l)).collect(),
                my_local: node.me,
                live: live.clone(),
                timeout,
            },
        };
        // Device requests wait on TCP round trips (quiet, gets, fetching atomics): this PE's
        // TCP threads busy-poll for a while before blocking (every PE of the job has a proxy,
        // so the targets' service threads do too).
        if let Some(net) = remotes.tcp() {
            net.set_spin(crate::transport::tcp::PROXY_SPIN);
        }
        let stop = Arc::new(AtomicBool::new(false));
        let s = stop.clone();
        let g = gpu.clone();
        let thread = std::thread::Builder::new()
            .name(format!("rshmem-proxy-{me}"))
            .spawn(move || {
                if let Err(e) = g.bind("proxy") {
                    crate::say!("rshmem: proxy of PE {me}: {e}");
                }
                service::run(ring, ex, s, me)
            })
            .map_err(|e| Error::os(call, "starting the proxy thread", e))?;
        tracing::debug!(target: "rshmem::proxy", pe = me, slots = n_slots, "proxy started");
        Ok(Proxy {
            stop,
            thread: Some(thread),
            _slots: slots,
            _ctrl: ctl,
            fifo_dev,
            ctrl_dev,
            n_slots,
        })
    }

    /// Fills the device state's proxy fields.
    pub(crate) fn describe(&self, st: &mut DeviceState) {
        st.proxy_fifo = self.fifo_dev;
        st.proxy_ctrl = self.ctrl_dev;
        st.proxy_slots = self.n_slots as u64;
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.stop.store(true, std::sync::atomic::Ordering::Release);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}
