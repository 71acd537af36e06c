//! Stream-ordered team collectives on the GPU heap (`*_on_stream`, like NVSHMEM's
//! `nvshmemx_*_on_stream`).
//!
//! Each call checks its arguments on the host (errors are returned before anything is
//! enqueued) and enqueues one kernel on the caller's stream: the grid form of the device
//! library's collective (`device-lib/include/rshmem/coll.cuh`), which moves the data by
//! load/store over NVLink and synchronizes the team on the device. The call is collective over
//! the team in stream order: every member enqueues the same collectives on the team in the same
//! order, and each takes effect after the work queued before it on that member's stream. Like
//! OpenSHMEM, every member's `dest` must be ready to be written when the collective starts on
//! any member. Every member must be on this host (load/store reachable).
//!
//! Launch shapes are chosen from the size (see `docs/collectives.md`): one block for small
//! messages (latency: the data goes in one round of stores, then one team sync), up to one block
//! per SM for large ones (bandwidth; per SM of this PE's share when several PEs use one GPU);
//! broadcast switches to a pipelined scatter + allgather (pull from the root, push to the other
//! members) above [`BCAST_PIPELINE_MIN`] bytes.
//!
//! Progress never depends on co-residency: no block waits for a block that may not be running.
//! A launch of several blocks waits for nobody at its start; a collective that needs a start
//! sync there gets a one-block sync kernel before it on the stream; only the last block of a
//! launch (every other block of it has exited) makes the closing team sync.

use std::sync::Arc;

use cudarc::driver::CudaStream;

use super::{Group, ReduceOp, ReduceType};
use crate::cuda::kernels::Kernels;
use crate::cuda::launch::Start;
use crate::device::module::Module;
use crate::error::{Error, Result};
use crate::team::Team;
use crate::types::RmaType;
use crate::wire::device_type;
use crate::world::World;

/// Source of the byte-moving collective kernels.
const COLL_KERNELS: &str = include_str!("../device/kernels/coll.cu");
/// Source of the reduction kernels (compiled once per element type).
const REDUCE_KERNELS: &str = include_str!("../device/kernels/coll_reduce.cu");

/// Threads per block of the collective kernels (1024 measured no faster on 4 H200s).
const THREADS: u32 = 512;
/// Bytes each block of a bandwidth-sized launch moves at least.
const BYTES_PER_BLOCK: usize = 64 << 10;
/// Broadcasts of at least this many bytes (and teams of 3 or more) use the pipelined
/// scatter + allgather.
pub const BCAST_PIPELINE_MIN: usize = 2 << 20;
/// Bytes each block of a reduction moves at least (reductions need more parallelism).
const REDUCE_BYTES_PER_BLOCK: usize = 64 << 10;
/// Bytes each block of the pipelined broadcast pulls per step while the block's other half
/// pushes the previous step's, KiB. 16 MiB on 4 H200s: 2 and 4 KiB 62 us, 8 KiB 66, 16 KiB 73,
/// 64 KiB 92 (smaller steps overlap the two halves better); 256 or 1024 threads per block
/// were no faster than 512.
const BCAST_PIECE_KIB: i32 = 4;
/// Per-buffer scratch of the one-shot reductions (`RSHMEM_TEAM_SYNC_SCRATCH_BYTES`).
const ONESHOT_SCRATCH: usize = 992;

/// The kernels of coll.cu (loaded together, see [`Kernels::preload`]).
const BYTES_KERNELS: &[&str] = &[
    "rshmem_internal_team_sync",
    "rshmem_internal_alltoall",
    "rshmem_internal_fcollect",
    "rshmem_internal_broadcast",
    "rshmem_internal_alltoalls",
    "rshmem_internal_collect_start",
    "rshmem_internal_collect",
];

/// The device library's operator code of a reduction (`RSHMEM_OP_*`), from its call name.
fn op_code(call: &str) -> Option<i32> {
    crate::wire::ReduceCode::of_call(call).map(|c| c.code())
}

/// Blocks of a push launch of `blocks` blocks that copy this PE's own part (a 1/n share: on 4
/// H200s a quarter of that measured the same at 16 MiB per PE).
fn local_blocks(blocks: u32, n: usize) -> i32 {
    (blocks / (n as u32).max(1)).max(1) as i32
}

/// Threads of a one-block team sync launch (one per member to watch, whole warps).
fn sync_threads(n: usize) -> u32 {
    (n as u32).div_ceil(32).clamp(1, 16) * 32
}

/// Blocks for a launch that moves `bytes` per PE.
fn blocks_for(bytes: usize, sms: u32) -> u32 {
    (bytes.div_ceil(BYTES_PER_BLOCK).max(1) as u64).min(sms.max(1) as u64) as u32
}

impl World {
    /// How this PE's GPU is shared with other PEs of its host (found at init).
    pub fn gpu_sharing(&self) -> crate::device::sharing::GpuSharing {
        self.dev.coll.sharing
    }

    /// The SMs a collective launch of this PE may spread over: the GPU's SMs, divided among the
    /// PEs that share the GPU (their grids then fit side by side; correctness does not depend on
    /// it, since no block waits for one that is not running).
    fn coll_modules_sms(&self, call: &'static str) -> Result<u32> {
        let sms = self.gpu_sms(call)?;
        let share = self.dev.coll.sharing.pes_on_gpu.max(1) as u32;
        Ok((sms / share).max(1))
    }

    fn gpu_sms(&self, call: &'static str) -> Result<u32> {
        let p = self.p2p(call)?;
        Ok(*self.dev.coll.sms.get_or_init(|| {
            match crate::cuda::multiprocessor_count(call, p.gpu.ordinal) {
                Ok(n) if n > 0 => n as u32,
                _ => 1,
            }
        }))
    }

    fn coll_bytes_module(&self, call: &'static str) -> Result<&Kernels> {
        let p = self.p2p(call)?;
        let m = self.dev.coll.bytes.get_or_init(|| {
            let m = Module::load(&p.gpu, COLL_KERNELS, "rshmem_coll", &self.dev.state)
                .map_err(|e| e.to_string())?;
            self.register(&m).map_err(|e| e.to_string())?;
            let l = Kernels::new(m);
            l.preload(call, BYTES_KERNELS).map_err(|e| e.to_string())?;
            Ok(l)
        });
        m.as_ref().map_err(|e| Error::Unsupported {
            call,
            reason: format!("rshmem's collective GPU kernels are unavailable: {e}"),
        })
    }

    fn coll_reduce_module<T: 'static>(&self, call: &'static str) -> Result<Arc<Kernels>> {
        let p = self.p2p(call)?;
        let ty = device_type::<T>().ok_or_else(|| Error::Unsupported {
            call,
            reason: format!("{} has no device reduction", std::any::type_name::<T>()),
        })?;
        let mut map = self.dev.coll.reduce.lock().map_err(|_| Error::State {
            call,
            reason: "collective module lock poisoned".into(),
        })?;
        if let Some(l) = map.get(ty) {
            return Ok(l.clone());
        }
        let opts = vec![format!("-DRSHMEM_RT={ty}")];
        let name = format!("rshmem_reduce_{}", ty.replace(' ', "_"));
        let m = Module::load_with(&p.gpu, REDUCE_KERNELS, &name, &opts, &self.dev.state)?;
        self.register(&m)?;
        let l = Arc::new(Kernels::new(m));
        l.preload(call, &["rshmem_internal_reduce"])?;
        map.insert(ty, l.clone());
        Ok(l)
    }

    /// Checks that `team` can run device collectives here: GPU heap, this PE a member, every
    /// member on this host. Returns the team's device handle.
    fn coll_team(&self, call: &'static str, team: &Team) -> Result<i32> {
        self.p2p(call)?;
        self.team_check(call, team)?;
        if let Some(&pe) = team
            .members()
            .iter()
            .find(|&&pe| self.node.local_of[pe].is_none())
        {
            return Err(Error::Unsupported {
                call,
                reason: format!(
                    "PE {pe} of the team is on another host; stream collectives need every member reachable by load/store"
                ),
            });
        }
        Ok(team.device_handle())
    }

    fn coll_launch(
        &self,
        call: &'static str,
        l: &Kernels,
        name: &'static str,
        grid: Grid,
        stream: &CudaStream,
        args: &mut [*mut std::ffi::c_void],
    ) -> Result<()> {
        let (blocks, threads) = match grid {
            Grid::Blocks(b) => (b, THREADS),
            Grid::Sync(n) => (1, sync_threads(n)),
        };
        // SAFETY: every caller passes arguments matching the kernel's signature in coll.cu /
        // coll_reduce.cu, with addresses checked against this PE's symmetric heap.
        unsafe {
            l.launch(
                call,
                name,
                blocks,
                threads,
                stream,
                args,
                Start::AfterPrevious,
            )
        }
    }

    /// The start sync of a collective launched with several blocks: one block that syncs the
    /// team, before the launch on the same stream (the launch's own blocks never wait for it).
    fn start_sync(&self, call: &'static str, h: i32, n: usize, stream: &CudaStream) -> Result<()> {
        let l = self.coll_bytes_module(call)?;
        let mut h = h;
        let mut args: [*mut std::ffi::c_void; 1] = [(&mut h as *mut i32).cast()];
        let name = "rshmem_internal_team_sync";
        self.coll_launch(call, l, name, Grid::Sync(n), stream, &mut args)
    }

    /// **Collective over the team, stream-ordered.** Every member's work queued before it on
    /// its stream is visible to every member's work after it. Like `team_sync_on_stream`.
    pub fn team_sync_on_stream(&self, team: &Team, stream: &CudaStream) -> Result<()> {
        self.team_sync_kernel("team_sync_on_stream", team, stream)
    }

    /// **Collective over the team, stream-ordered.** Like
    /// [`team_sync_on_stream`](World::team_sync_on_stream), after completing this PE's
    /// host-issued puts and atomics. Like `barrier_on_stream`.
    pub fn barrier_on_stream(&self, team: &Team, stream: &CudaStream) -> Result<()> {
        let call = "barrier_on_stream";
        self.coll_team(call, team)?;
        self.quiet_on_stream(stream)?;
        self.team_sync_kernel(call, team, stream)
    }

    fn team_sync_kernel(&self, call: &'static str, team: &Team, stream: &CudaStream) -> Result<()> {
        let h = self.coll_team(call, team)?;
        self.start_sync(call, h, team.n_pes(), stream)
    }

    calls! {
        [T: RmaType]
        (team: &Team, dest: *mut T, source: *const T, nelems: usize, stream: &CudaStream)
            -> Result<()>;

        /// **Collective over the team, stream-ordered.** Block `j` of `nelems` elements of
        /// `source` on team PE `i` goes to block `i` of `dest` on team PE `j`. Both hold
        /// `n_pes()·nelems` elements and must not overlap. Like `alltoall_on_stream`.
        alltoall_on_stream => bytes_coll(
            "rshmem_internal_alltoall", team, dest, source, nelems, true, stream
        );

        /// **Collective over the team, stream-ordered.** Concatenates every member's `source`
        /// block of `nelems` elements in team order into every member's `dest`; they must not
        /// overlap. Like `fcollect_on_stream`.
        fcollect_on_stream => bytes_coll(
            "rshmem_internal_fcollect", team, dest, source, nelems, false, stream
        );
    }

    /// Checks and runs alltoall (`all`: source holds n blocks) or fcollect: a kernel that
    /// stores into the members' dest, blocks split over the members. (Copy-engine copies to
    /// every member on side streams, then a sync kernel, measured slower on 4 H200s: 245 µs
    /// against 151 µs at 16 MiB per PE.)
    #[allow(clippy::too_many_arguments)]
    fn bytes_coll<T: RmaType>(
        &self,
        call: &'static str,
        kernel: &'static str,
        team: &Team,
        dest: *mut T,
        source: *const T,
        nelems: usize,
        all: bool,
        stream: &CudaStream,
    ) -> Result<()> {
        let h = self.coll_team(call, team)?;
        let n = team.n_pes();
        let total = super::team_total(call, nelems, n)?;
        let db = self.coll_bufs(
            call,
            dest,
            total,
            source,
            if all { total } else { nelems },
            false,
        )?;
        let nbytes = db / n.max(1);
        let l = self.coll_bytes_module(call)?;
        let sms = self.coll_modules_sms(call)?;
        let blocks = blocks_for(db, sms);
        let mut a = CollArgs {
            a: local_blocks(blocks, n),
            ..CollArgs::new(kernel, h, dest, source, nbytes)
        };
        let mut args = a.ptrs();
        self.coll_launch(call, l, a.kernel, Grid::Blocks(blocks), stream, &mut args)
    }

    /// **Collective over the team, stream-ordered.** Strided
    /// [`alltoall_on_stream`](World::alltoall_on_stream): element `k` of block `j` is
    /// `dest[(j·nelems + k)·dst]` and `source[(j·nelems + k)·sst]` (strides in elements, at
    /// least 1); elements of `dest` between the strided ones are left alone. Like
    /// [`alltoalls`](World::alltoalls), stream-ordered.
    #[allow(clippy::too_many_arguments)]
    pub fn alltoalls_on_stream<T: RmaType>(
        &self,
        team: &Team,
        dest: *mut T,
        source: *const T,
        dst: usize,
        sst: usize,
        nelems: usize,
        stream: &CudaStream,
    ) -> Result<()> {
        let call = "alltoalls_on_stream";
        let mut h = self.coll_team(call, team)?;
        if dst == 0 || sst == 0 {
            return Err(Error::invalid(
                call,
                format!("strides must be at least 1 (dst {dst}, sst {sst})"),
            ));
        }
        let esize = std::mem::size_of::<T>();
        let total = super::team_total(call, nelems, team.n_pes())?;
        let dspan = super::span(call, "dest", total, dst)?;
        let sspan = super::span(call, "source", total, sst)?;
        self.coll_bufs(call, dest, dspan, source, sspan, false)?;
        let l = self.coll_bytes_module(call)?;
        let sms = self.coll_modules_sms(call)?;
        let (mut d, mut s, mut n, mut e, mut z, mut ds, mut ss) = (
            dest as u64,
            source as u64,
            nelems as u64,
            esize as i32,
            0i32,
            dst as u64,
            sst as u64,
        );
        let mut args: [*mut std::ffi::c_void; 8] = [
            (&mut h as *mut i32).cast(),
            (&mut d as *mut u64).cast(),
            (&mut s as *mut u64).cast(),
            (&mut n as *mut u64).cast(),
            (&mut e as *mut i32).cast(),
            (&mut z as *mut i32).cast(),
            (&mut ds as *mut u64).cast(),
            (&mut ss as *mut u64).cast(),
        ];
        let blocks = blocks_for(total.saturating_mul(esize), sms);
        let name = "rshmem_internal_alltoalls";
        self.coll_launch(call, l, name, Grid::Blocks(blocks), stream, &mut args)
    }

    /// **Collective over the team, stream-ordered.** Every member's `source` block (`nelems`
    /// elements, which may differ between members) back to back in team order into every
    /// member's `dest`, which must hold their sum; `dest` and `source` must not overlap. Like
    /// [`collect`](World::collect), stream-ordered. The host checks `source` and that `dest`
    /// starts in the symmetric heap; the members' counts are exchanged on the device, so `dest`'s
    /// extent is checked there (with `RSHMEM_DEVICE_CHECKS=1`). Teams of at most 128 PEs.
    pub fn collect_on_stream<T: RmaType>(
        &self,
        team: &Team,
        dest: *mut T,
        source: *const T,
        nelems: usize,
        stream: &CudaStream,
    ) -> Result<()> {
        let call = "collect_on_stream";
        let h = self.coll_team(call, team)?;
        if team.n_pes() > 128 {
            return Err(Error::Unsupported {
                call,
                reason: format!(
                    "the team has {} PEs; collect on stream takes at most 128",
                    team.n_pes()
                ),
            });
        }
        let sb = self.coll_buf(call, "source", source, nelems)?;
        self.coll_buf(call, "dest", dest, 1)?;
        Self::coll_overlap(call, dest, 1, source, sb, false)?;
        let l = self.coll_bytes_module(call)?;
        let sms = self.coll_modules_sms(call)?;
        let mut a = CollArgs {
            a: std::mem::size_of::<T>() as i32,
            ..CollArgs::new("rshmem_internal_collect", h, dest, source, nelems)
        };
        let mut args = a.ptrs();
        let blocks = blocks_for(sb.saturating_mul(team.n_pes()), sms);
        if blocks > 1 {
            // The counts and the start sync in one block first (see collect_start in coll.cu).
            let (mut h2, mut n2) = (h, nelems as u64);
            let mut a2: [*mut std::ffi::c_void; 2] =
                [(&mut h2 as *mut i32).cast(), (&mut n2 as *mut u64).cast()];
            let name = "rshmem_internal_collect_start";
            self.coll_launch(call, l, name, Grid::Sync(team.n_pes()), stream, &mut a2)?;
        }
        self.coll_launch(call, l, a.kernel, Grid::Blocks(blocks), stream, &mut args)
    }

    /// **Collective over the team, stream-ordered.** Copies `nelems` elements of `source` on
    /// team PE `root` to `dest` on every member. `dest` and `source` may be the very same
    /// range but must not overlap otherwise. Like `broadcast_on_stream`.
    pub fn broadcast_on_stream<T: RmaType>(
        &self,
        team: &Team,
        dest: *mut T,
        source: *const T,
        nelems: usize,
        root: usize,
        stream: &CudaStream,
    ) -> Result<()> {
        let call = "broadcast_on_stream";
        let h = self.coll_team(call, team)?;
        let n = team.n_pes();
        Group::Team(team).check_root(call, root)?;
        let db = self.coll_bufs(call, dest, nelems, source, nelems, true)?;
        let l = self.coll_bytes_module(call)?;
        let sms = self.coll_modules_sms(call)?;
        let pipelined = n >= 3 && db >= BCAST_PIPELINE_MIN;
        let blocks = if pipelined {
            sms
        } else {
            blocks_for(db.saturating_mul((n - 1).max(1)), sms)
        };
        let mut a = CollArgs {
            a: root as i32,
            b: if pipelined { BCAST_PIECE_KIB } else { 0 },
            c: local_blocks(blocks, n),
            ..CollArgs::new("rshmem_internal_broadcast", h, dest, source, db)
        };
        if pipelined && blocks > 1 {
            self.start_sync(call, h, n, stream)?;
        }
        let mut args = a.ptrs();
        self.coll_launch(call, l, a.kernel, Grid::Blocks(blocks), stream, &mut args)
    }

    calls! {
        [T: ReduceType, O: ReduceOp<T>]
        (team: &Team, dest: *mut T, source: *const T, nelems: usize, op: O, stream: &CudaStream)
            -> Result<()>;

        /// **Collective over the team, stream-ordered.** Element-wise reduction with `op` of
        /// every member's `source` (`nelems` elements) into every member's `dest` (may be the
        /// very same range, must not overlap otherwise). Combined in team PE order: every member
        /// gets bit-identical results, equal to [`reduce`](World::reduce)'s. Like
        /// `TYPE_OP_reduce_on_stream`; errors name `<op>_reduce_on_stream`.
        reduce_on_stream => reduce_kernel(team, dest, source, nelems, op, false, stream);

        /// **Collective over the team, stream-ordered.** Reduces every member's `source` of
        /// `n_pes()·nelems` elements with `op` and leaves block `i` of the result in `dest` on
        /// team PE `i`; they must not overlap. Like `TYPE_OP_reducescatter_on_stream`.
        reducescatter_on_stream => reduce_kernel(team, dest, source, nelems, op, true, stream);
    }

    #[allow(clippy::too_many_arguments)]
    fn reduce_kernel<T: ReduceType, O: ReduceOp<T>>(
        &self,
        call: &'static str,
        team: &Team,
        dest: *mut T,
        source: *const T,
        nelems: usize,
        _op: O,
        scatter: bool,
        stream: &CudaStream,
    ) -> Result<()> {
        let h = self.coll_team(call, team)?;
        let op = op_code(O::CALL).ok_or_else(|| Error::Unsupported {
            call,
            reason: format!("{} has no device form", O::CALL),
        })?;
        let n = team.n_pes();
        // Scatter: every member's source holds n blocks, and dest is one of them (never the
        // same range); reduce: the very same range is allowed.
        let (sn, identical_ok) = if scatter {
            (super::team_total(call, nelems, n)?, false)
        } else {
            (nelems, true)
        };
        let db = self.coll_bufs(call, dest, nelems, source, sn, identical_ok)?;
        // Bytes each PE moves: its block from every member (scatter), or its chunk from every
        // member and to every member (reduce).
        let moved = db.saturating_mul(if scatter { n } else { 2 });
        let l = self.coll_reduce_module::<T>(call)?;
        let sms = self.coll_modules_sms(call)?;
        let mut a = CollArgs {
            a: op,
            b: scatter as i32,
            ..CollArgs::new("rshmem_internal_reduce", h, dest, source, nelems)
        };
        let mut args = a.ptrs();
        let blocks = if n.saturating_mul(db) <= ONESHOT_SCRATCH {
            1
        } else {
            (moved.div_ceil(REDUCE_BYTES_PER_BLOCK) as u64).clamp(1, sms as u64) as u32
        };
        if blocks > 1 {
            self.start_sync(call, h, n, stream)?;
        }
        self.coll_launch(call, &l, a.kernel, Grid::Blocks(blocks), stream, &mut args)
    }
}

/// How a collective kernel is launched.
#[derive(Clone, Copy)]
enum Grid {
    /// This many blocks of [`THREADS`] threads.
    Blocks(u32),
    /// One block that syncs a team of this many PEs (threads from [`sync_threads`]).
    Sync(usize),
}

/// Arguments of a collective kernel `(int team, u64 dest, u64 src, u64 n[, int a, int b])`.
struct CollArgs {
    kernel: &'static str,
    team: i32,
    dest: u64,
    src: u64,
    n: u64,
    a: i32,
    b: i32,
    c: i32,
}

impl CollArgs {
    /// `kernel` on the team with handle `team`, from `src` to `dest`, `n` as the kernel
    /// counts (bytes or elements); the extra arguments zero.
    fn new<T>(kernel: &'static str, team: i32, dest: *mut T, src: *const T, n: usize) -> Self {
        let (dest, src, n) = (dest as u64, src as u64, n as u64);
        let (a, b, c) = (0, 0, 0);
        CollArgs {
            kernel,
            team,
            dest,
            src,
            n,
            a,
            b,
            c,
        }
    }

    /// Pointers to the fields in kernel-argument order (the kernels ignore trailing extras).
    fn ptrs(&mut self) -> [*mut std::ffi::c_void; 7] {
        [
            (&mut self.team as *mut i32).cast(),
            (&mut self.dest as *mut u64).cast(),
            (&mut self.src as *mut u64).cast(),
            (&mut self.n as *mut u64).cast(),
            (&mut self.a as *mut i32).cast(),
            (&mut self.b as *mut i32).cast(),
            (&mut self.c as *mut i32).cast(),
        ]
    }
}
