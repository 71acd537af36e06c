//! Expert-parallel Mixture-of-Experts dispatch and combine on the GPU heap (like DeepEP's
//! normal-mode intranode kernels), with device-initiated NVLink stores.
//!
//! Every PE holds `T` tokens of `H` elements (`f32`, bf16 as `u16` bit patterns, or fp8 e4m3 as
//! `u8` bit patterns with one `f32` scale per 128 elements), the top-k expert indices of each
//! token (`i64`, `-1` = no expert) and their routing weights (`f32`).
//! `E` experts are spread evenly: expert `e` lives on PE `e / L` as local expert `e % L`,
//! `L = E / n_pes`.
//!
//! * [`Ep::dispatch`] sends every token **once per destination PE** (not once per expert) and
//!   lays the received tokens out per local expert, contiguously: local expert `l`'s rows are
//!   `expert_offsets[l] .. expert_offsets[l + 1]` of [`Ep::expert_x`], sources in PE order
//!   inside it ([`Ep::expert_src`] gives each row's source PE and token).
//! * [`Ep::combine`] takes the expert outputs in that same layout (`y`, which may be
//!   [`Ep::expert_x`] itself, overwritten in place), sends each token's weighted partial sum
//!   back to its source PE once per expert PE, and writes `out[t] = Σ_j w[t][j]·y(e_j, t)` in the
//!   token's original order.
//! * fp8 ([`EpDtype::Fp8E4m3`]): [`Ep::dispatch_fp8`] takes the tokens with their per-block
//!   scales (`[T, H/128]` `f32`) and delivers both unchanged, in the same row order
//!   ([`Ep::expert_x`] and [`Ep::expert_scales`]); the combine of such a handle takes and returns
//!   bf16 rows (the expert outputs are bf16), so it is never in place.
//!
//! Both are **collective over all PEs, stream-ordered**: every PE makes the same sequence of
//! dispatch/combine calls on its handle, each call enqueues two kernels on the caller's stream
//! and returns at once (no host synchronization, so both can be captured into a CUDA graph: use
//! [`Ep::dispatch_raw`] / [`Ep::combine_raw`], which take plain device addresses). The kernels
//! use `num_sms` blocks, leaving the other SMs to compute. Kernels: `rshmem/ep.cuh`; the
//! algorithm, buffer sizes and limits: docs/moe.md.

pub mod reference;

use std::cell::Cell;

use cudarc::driver::{CudaSlice, CudaStream, DevicePtr, DevicePtrMut};

use crate::cuda::kernels::Kernels;
use crate::cuda::launch::Start;
use crate::device::module::Module;
use crate::error::{Error, Result};
use crate::mem::SymBuf;
use crate::world::World;

/// Source of the module (`rshmem/ep.cuh` with its kernels defined).
const EP_SOURCE: &str = include_str!("ep.cu");
/// The module's kernels.
const EP_KERNELS: &[&str] = &[
    "rshmem_ep_dispatch_send",
    "rshmem_ep_dispatch_recv",
    "rshmem_ep_combine_send_f32",
    "rshmem_ep_combine_send_bf16",
    "rshmem_ep_combine_recv_f32",
    "rshmem_ep_combine_recv_bf16",
    "rshmem_ep_ll_send",
    "rshmem_ep_ll_send_per_pe",
    "rshmem_ep_ll_wait",
    "rshmem_ep_ll_combine_send",
    "rshmem_ep_ll_combine_send_per_pe_f32",
    "rshmem_ep_ll_combine_send_per_pe_bf16",
    "rshmem_ep_ll_combine_recv_f32",
    "rshmem_ep_ll_combine_recv_bf16",
];
/// Elements of a row per fp8 scale: [`EpDtype::Fp8E4m3`] tokens carry one `f32` scale per
/// this many elements (`RSHMEM_EP_FP8_BLOCK` in ep.cuh).
pub const FP8_BLOCK: usize = 128;
/// Threads per block (`RSHMEM_EP_THREADS`).
const THREADS: u32 = 512;
/// Limits of the kernels (`RSHMEM_EP_MAX_*` in ep.cuh).
const MAX_PES: usize = 32;
const MAX_EXPERTS: usize = 1024;
const MAX_TOPK: usize = 32;
/// Most tokens per PE of the low-latency mode.
pub const LL_MAX_TOKENS: usize = 256;
/// Alignment of every sub-buffer.
const ALIGN: usize = 256;

/// Consecutive areas of one buffer, each starting [`ALIGN`]-aligned.
#[derive(Default)]
struct Areas {
    /// Bytes used so far (rounded up to [`ALIGN`]).
    end: usize,
}

impl Areas {
    /// The offset of the next area, of `bytes` bytes; None when its size (None) or the total
    /// overflows.
    fn take(&mut self, bytes: Option<usize>) -> Option<usize> {
        let at = self.end;
        self.end = at.checked_add(bytes?)?.checked_next_multiple_of(ALIGN)?;
        Some(at)
    }
}

/// Element type of the tokens.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EpDtype {
    /// 32-bit float.
    F32,
    /// bfloat16 (passed as `u16` bit patterns; `half::bf16` has the same layout).
    Bf16,
    /// fp8 e4m3 (the "fn" variant: no infinities, largest finite 448), passed as `u8` bit
    /// patterns, with one `f32` scale per [`FP8_BLOCK`] elements of each row (the dequantized
    /// value of element `h` is `fp8(x[h]) · scale[h / 128]`). The dispatch moves the bytes and
    /// the scales unchanged; the combine of such a handle runs in bf16
    /// ([`combine_dtype`](EpDtype::combine_dtype)).
    Fp8E4m3,
}

impl EpDtype {
    /// Bytes per element of the dispatched tokens.
    pub fn size(self) -> usize {
        match self {
            EpDtype::F32 => 4,
            EpDtype::Bf16 => 2,
            EpDtype::Fp8E4m3 => 1,
        }
    }

    /// The element type of the combine (`y` and `out`): the token dtype itself, bf16 for
    /// [`EpDtype::Fp8E4m3`].
    pub fn combine_dtype(self) -> EpDtype {
        match self {
            EpDtype::Fp8E4m3 => EpDtype::Bf16,
            d => d,
        }
    }

    /// `f32` scales per row of `hidden` elements: `hidden / 128` for [`EpDtype::Fp8E4m3`], 0
    /// for the others.
    pub fn scale_words(self, hidden: usize) -> usize {
        match self {
            EpDtype::Fp8E4m3 => hidden / FP8_BLOCK,
            _ => 0,
        }
    }
}

/// Rust element types of the token buffers: `f32` for [`EpDtype::F32`], `u16` (bf16 bits) for
/// [`EpDtype::Bf16`], `u8` (fp8 e4m3 bits) for [`EpDtype::Fp8E4m3`].
pub trait EpElem: Copy + 'static {
    /// The dtype this element type carries.
    const DTYPE: EpDtype;
}
impl EpElem for f32 {
    const DTYPE: EpDtype = EpDtype::F32;
}
impl EpElem for u16 {
    const DTYPE: EpDtype = EpDtype::Bf16;
}
impl EpElem for u8 {
    const DTYPE: EpDtype = EpDtype::Fp8E4m3;
}

/// What a handle is built for. Every PE must pass the same values.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EpConfig {
    /// Experts in all (`E`), a multiple of the number of PEs, at most 1024.
    pub num_experts: usize,
    /// Elements per token (`H`); `H × element size` must be a multiple of 16 bytes, and `H` a
    /// multiple of 128 for [`EpDtype::Fp8E4m3`] (one scale per 128 elements).
    pub hidden: usize,
    /// Experts per token (`k`), 1..=32.
    pub topk: usize,
    /// Most tokens a PE passes to one dispatch (`T ≤ max_tokens`).
    pub max_tokens: usize,
    /// Element type of the tokens.
    pub dtype: EpDtype,
    /// Rows of the dispatch output per PE; `None`: the worst case,
    /// `n_pes × max_tokens × min(k, L)`. Rows beyond it are dropped and reported by
    /// [`Ep::check`].
    pub max_recv_rows: Option<usize>,
    /// Blocks (one per SM) of each kernel; `None`: the GPU's SMs divided among the PEs that share
    /// it.
    pub num_sms: Option<u32>,
    /// Also allocate the low-latency mode's buffers ([`Ep::ll_dispatch`]); needs
    /// `max_tokens ≤ 256`.
    pub low_latency: bool,
}

impl EpConfig {
    /// A configuration with the worst-case row capacity and all SMs.
    pub fn new(
        num_experts: usize,
        hidden: usize,
        topk: usize,
        max_tokens: usize,
        dtype: EpDtype,
    ) -> Self {
        EpConfig {
            num_experts,
            hidden,
            topk,
            max_tokens,
            dtype,
            max_recv_rows: None,
            num_sms: None,
            low_latency: false,
        }
    }

    /// Checks the configuration for `n_pes` PEs and computes the buffer layout.
    pub fn sizes(&self, n_pes: usize) -> Result<EpSizes> {
        let call = "ep_new";
        let bad = |what: &str, why: String| Err(Error::invalid(call, format!("{what}: {why}")));
        if n_pes == 0 || n_pes > MAX_PES {
            return bad("n_pes", format!("{n_pes} PEs; 1..={MAX_PES} are supported"));
        }
        let e = self.num_experts;
        if e == 0 || e > MAX_EXPERTS || e % n_pes != 0 {
            return bad(
                "num_experts",
                format!("{e}; must be 1..={MAX_EXPERTS} and a multiple of the {n_pes} PEs"),
            );
        }
        if self.topk == 0 || self.topk > MAX_TOPK {
            return bad("topk", format!("{}; must be 1..={MAX_TOPK}", self.topk));
        }
        if self.dtype == EpDtype::Fp8E4m3 && self.hidden % FP8_BLOCK != 0 {
            return bad(
                "hidden",
                format!(
                    "{} is not a multiple of {FP8_BLOCK}: fp8 rows carry one scale per {FP8_BLOCK} elements",
                    self.hidden
                ),
            );
        }
        let es = self.dtype.size();
        let row_bytes = self
            .hidden
            .checked_mul(es)
            .filter(|&b| b > 0 && b % 16 == 0)
            .ok_or_else(|| {
                Error::invalid(
                    call,
                    format!(
                        "hidden: {} elements of {es} bytes is not a positive multiple of 16 bytes",
                        self.hidden
                    ),
                )
            })?;
        let comb_row_bytes = self.hidden * self.dtype.combine_dtype().size();
        let scale_words = self.dtype.scale_words(self.hidden);
        if self.max_tokens > i32::MAX as usize / 2 {
            return bad("max_tokens", format!("{} is too large", self.max_tokens));
        }
        let l = e / n_pes;
        let worst = n_pes
            .saturating_mul(self.max_tokens)
            .saturating_mul(self.topk.min(l));
        let max_rows = self.max_recv_rows.unwrap_or(worst);
        if max_rows > i32::MAX as usize {
            return bad("max_recv_rows", format!("{max_rows} rows is too many"));
        }
        if self.low_latency && self.max_tokens > LL_MAX_TOKENS {
            return bad(
                "max_tokens",
                format!(
                    "{} with low_latency; the low-latency mode takes at most {LL_MAX_TOKENS} tokens per PE",
                    self.max_tokens
                ),
            );
        }
        if self.num_sms == Some(0) {
            return bad("num_sms", "0; at least one block is needed".into());
        }
        let meta_words = (1 + 3 * self.topk).div_ceil(4) * 4;
        let too_big = || Error::invalid(call, "the buffers would not fit in the address space");
        // The symmetric buffers, then (from offset 0 again) the local scratch.
        let mut sym = Areas::default();
        let mut take = |bytes: Option<usize>| sym.take(bytes).ok_or_else(too_big);
        let nt = n_pes.checked_mul(self.max_tokens);
        let sig = take(Some(8 * n_pes * 8))?;
        let recv_cnt = take(Some(n_pes * (1 + l) * 4))?;
        let stage_meta = take(nt.and_then(|x| x.checked_mul(meta_words * 4)))?;
        let stage_x = take(nt.and_then(|x| x.checked_mul(row_bytes)))?;
        let comb_x = take(nt.and_then(|x| x.checked_mul(comb_row_bytes)))?;
        let stage_scales = take(nt.and_then(|x| x.checked_mul(scale_words * 4)))?;
        // Low-latency: [L][n][M] rows and (token, slot, data row, 0) int32 metadata, [L][n]
        // counts, [M][k] rows.
        let ll = |b: usize| Some(if self.low_latency { b } else { 0 });
        let em = e.checked_mul(self.max_tokens);
        let ll_x = take(em.and_then(|x| x.checked_mul(row_bytes)).and_then(ll))?;
        let ll_meta = take(em.and_then(|x| x.checked_mul(16)).and_then(ll))?;
        let ll_cnt = take(ll(e * 4))?;
        let ll_comb = take(
            self.max_tokens
                .checked_mul(self.topk * comb_row_bytes)
                .and_then(ll),
        )?;
        let ll_scales = take(em.and_then(|x| x.checked_mul(scale_words * 4)).and_then(ll))?;
        // Low-latency combine of a per-PE dispatch: a tagged weight (u64) per (source, token,
        // slot).
        let nmk = nt.and_then(|x| x.checked_mul(self.topk));
        let ll_wgt = take(nmk.and_then(|x| x.checked_mul(8)).and_then(ll))?;
        let symmetric_bytes = sym.end;
        let mut scratch = Areas::default();
        let mut take = |bytes: Option<usize>| scratch.take(bytes).ok_or_else(too_big);
        let epoch = take(Some(32))?;
        let done = take(Some(32))?;
        let err = take(Some(16))?;
        let send_ntok = take(Some(n_pes * 4))?;
        let ecnt = take(Some(e * 4))?;
        let recv_ntok = take(Some(n_pes * 4))?;
        let tok_mask = take(Some(self.max_tokens.max(1) * 4))?;
        let comb_meta = take(nt.and_then(|x| x.checked_mul(meta_words * 4)))?;
        let ll_slot_ok = take(Some(self.max_tokens.max(1) * self.topk * 4))?;
        // Per-PE low-latency combine: the row of each (source, token, slot), the leads
        // ({source, token, row, slots' mask} int32) and their count.
        let ll_pair = take(nmk.and_then(|x| x.checked_mul(4)).and_then(ll))?;
        let ll_items = take(nt.and_then(|x| x.checked_mul(16)).and_then(ll))?;
        let ll_nitems = take(ll(4))?;
        let scratch_bytes = scratch.end;
        let expert_x_bytes = max_rows.checked_mul(row_bytes).ok_or_else(too_big)?;
        let expert_scales_bytes = max_rows.checked_mul(scale_words * 4).ok_or_else(too_big)?;
        Ok(EpSizes {
            n_pes,
            local_experts: l,
            row_bytes,
            comb_row_bytes,
            scale_words,
            meta_words,
            max_rows,
            symmetric_bytes,
            local_bytes: scratch_bytes
                + expert_x_bytes
                + expert_scales_bytes
                + max_rows * 8
                + (l + 1) * 8
                + if self.low_latency {
                    e * 4 + e * self.max_tokens * 8
                } else {
                    0
                },
            off: Offsets {
                sig,
                recv_cnt,
                stage_meta,
                stage_x,
                comb_x,
                stage_scales,
                ll_x,
                ll_meta,
                ll_cnt,
                ll_comb,
                ll_scales,
                ll_wgt,
                ll_slot_ok,
                ll_pair,
                ll_items,
                ll_nitems,
                epoch,
                done,
                err,
                send_ntok,
                ecnt,
                recv_ntok,
                tok_mask,
                comb_meta,
                scratch_bytes,
            },
        })
    }
}

/// Buffer sizes of a handle ([`EpConfig::sizes`]).
#[derive(Debug, Clone)]
pub struct EpSizes {
    /// PEs the layout is for.
    pub n_pes: usize,
    /// Experts per PE (`L`).
    pub local_experts: usize,
    /// Bytes per dispatched token row (`H × element size`; the scales of fp8 rows apart).
    pub row_bytes: usize,
    /// Bytes per row of the combine (`y`, `out`): `row_bytes`, or `2·H` (bf16) for fp8.
    pub comb_row_bytes: usize,
    /// `f32` scales per dispatched row: `H / 128` for fp8, 0 otherwise.
    pub scale_words: usize,
    /// 32-bit words of one metadata row.
    pub meta_words: usize,
    /// Rows of the dispatch output.
    pub max_rows: usize,
    /// Bytes of symmetric heap per PE: signals and counts, the staging buffer
    /// (`n_pes × max_tokens` rows plus metadata, and scales for fp8) and the combine receive
    /// buffer (`n_pes × max_tokens` combine rows).
    pub symmetric_bytes: usize,
    /// Bytes of ordinary GPU memory per PE: the dispatch output (`max_rows` rows, their
    /// scales for fp8, their sources, the offsets) and scratch.
    pub local_bytes: usize,
    off: Offsets,
}

#[derive(Debug, Clone)]
struct Offsets {
    sig: usize,
    recv_cnt: usize,
    stage_meta: usize,
    stage_x: usize,
    comb_x: usize,
    stage_scales: usize,
    ll_x: usize,
    ll_meta: usize,
    ll_cnt: usize,
    ll_comb: usize,
    ll_scales: usize,
    ll_wgt: usize,
    ll_slot_ok: usize,
    ll_pair: usize,
    ll_items: usize,
    ll_nitems: usize,
    epoch: usize,
    done: usize,
    err: usize,
    send_ntok: usize,
    ecnt: usize,
    recv_ntok: usize,
    tok_mask: usize,
    comb_meta: usize,
    scratch_bytes: usize,
}

/// Checks the device addresses a raw entry point was given, each `(name, address, alignment)`:
/// aligned, and not null when there are `rows` rows to read or write (`rows > 0`).
fn addrs_ok(call: &'static str, rows: usize, addrs: &[(&str, u64, u64)]) -> Result<()> {
    for &(what, a, align) in addrs {
        if a % align != 0 || (a == 0 && rows > 0) {
            return Err(Error::invalid(
                call,
                format!("{what}: address {a:#x} is null or not {align}-byte aligned"),
            ));
        }
    }
    Ok(())
}

/// The kernels' argument (`rshmem_ep_params` in ep.cuh, 49 eight-byte fields).
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
struct EpParams {
    n_pes: i64,
    my_pe: i64,
    num_experts: i64,
    local_experts: i64,
    topk: i64,
    row_bytes: i64,
    hidden: i64,
    num_tokens: i64,
    max_tokens: i64,
    max_rows: i64,
    meta_words: i64,
    stage_x: u64,
    stage_meta: u64,
    recv_cnt: u64,
    sig: u64,
    comb_x: u64,
    epoch: u64,
    done: u64,
    err: u64,
    send_ntok: u64,
    ecnt: u64,
    recv_ntok: u64,
    tok_mask: u64,
    comb_meta: u64,
    expert_x: u64,
    expert_offsets: u64,
    expert_src: u64,
    x: u64,
    topk_idx: u64,
    topk_w: u64,
    y: u64,
    out: u64,
    ll_x: u64,
    ll_meta: u64,
    ll_cnt: u64,
    ll_comb: u64,
    ll_count: u64,
    ll_src: u64,
    ll_slot_ok: u64,
    comb_row_bytes: i64,
    scale_words: i64,
    x_scales: u64,
    stage_scales: u64,
    expert_scales: u64,
    ll_scales: u64,
    ll_wgt: u64,
    ll_pair: u64,
    ll_items: u64,
    ll_nitems: u64,
}
const _: () = assert!(std::mem::size_of::<EpParams>() == 49 * 8);

/// An expert-parallel handle: the symmetric buffers, the dispatch output and the compiled
/// kernels of one MoE layer shape. Made collectively by [`Ep::new`], released by [`Ep::free`].
///
/// One stream at a time per handle: the calls of one handle must be ordered (one stream, or
/// streams ordered by events); different handles are independent.
pub struct Ep<'w> {
    world: &'w World,
    cfg: EpConfig,
    sizes: EpSizes,
    sym: SymBuf<'w, u8>,
    /// Owns the scratch memory the kernels use (by address, through `base`).
    _scratch: CudaSlice<u8>,
    expert_x: CudaSlice<u8>,
    expert_scales: CudaSlice<f32>,
    expert_src: CudaSlice<i32>,
    expert_offsets: CudaSlice<i64>,
    ll_count: CudaSlice<i32>,
    ll_src: CudaSlice<i32>,
    kernels: Kernels,
    sms: u32,
    /// Whether the low-latency dispatch sends a token once per destination PE and the combine
    /// returns one row per (token, PE) (`RSHMEM_EP_LL_PER_PE`, the same on every PE: [`Ep::new`]).
    ll_per_pe: bool,
    base: EpParams,
    last_tokens: Cell<Option<usize>>,
    last_ll_tokens: Cell<Option<usize>>,
}

crate::debug_fields!(Ep<'_>, |e| { cfg: e.cfg, sizes: e.sizes, sms: e.sms });

/// Whether this PE asks for the low-latency exchange once per destination PE
/// (`RSHMEM_EP_LL_PER_PE`; auto: [`ll_per_pe_auto`]). A handle uses it when every PE asks for it
/// ([`Ep::ll_per_pe`]).
pub fn ll_per_pe(world: &World) -> bool {
    world
        .config()
        .ep_ll_per_pe
        .unwrap_or_else(|| ll_per_pe_auto(world.n_pes(), world.gpu_sharing().pes_on_gpu))
}

/// The automatic choice of [`ll_per_pe`]: once per PE when there are other PEs and this PE has
/// its GPU to itself (the NVLink bytes shrink and the receivers' local copies run on their own
/// GPUs); once per (token, expert) pair when the job is one PE or PEs share this GPU (the copies
/// would then cost more than the local stores they save).
pub fn ll_per_pe_auto(n_pes: usize, pes_on_gpu: usize) -> bool {
    n_pes > 1 && pes_on_gpu <= 1
}

fn dev_ptr<T>(s: &CudaSlice<T>, stream: &CudaStream) -> u64 {
    let (p, _sync) = s.device_ptr(stream);
    p
}

impl<'w> Ep<'w> {
    /// **Collective.** Checks `cfg` (every PE must pass the same), allocates the buffers
    /// ([`EpConfig::sizes`]) and compiles the kernels (NVRTC, cached on disk). Needs the GPU
    /// backend with every PE reachable by load/store (one host, NVLink or PCIe peer access).
    pub fn new(world: &'w World, cfg: EpConfig) -> Result<Ep<'w>> {
        let call = "ep_new";
        let p2p = world.p2p(call)?;
        let gpu = p2p.gpu.clone();
        let (me, n) = (world.my_pe(), world.n_pes());
        if let Some(pe) = (0..n).find(|&pe| world.node.local_of[pe].is_none()) {
            return Err(Error::Unsupported {
                call,
                reason: format!(
                    "PE {pe} is not reachable by load/store (another host, or RSHMEM_DISABLE_P2P); expert-parallel dispatch needs every PE on this host"
                ),
            });
        }
        let sizes = cfg.sizes(n)?;
        let sms = match cfg.num_sms {
            Some(s) => s,
            None => {
                let all = gpu.multiprocessor_count()?;
                let share = world.gpu_sharing().pes_on_gpu.max(1) as u32;
                ((all.max(1) as u32) / share).max(1)
            }
        };
        let module = Module::load(&gpu, EP_SOURCE, "rshmem_ep", &world.dev.state)?;
        world.register(&module)?;
        let kernels = Kernels::new(module);
        kernels.preload(call, EP_KERNELS)?;
        let stream = gpu.stream.clone();
        let scratch = stream.alloc_zeros::<u8>(sizes.off.scratch_bytes)?;
        let expert_x = stream.alloc_zeros::<u8>(sizes.max_rows.max(1) * sizes.row_bytes)?;
        let expert_scales =
            stream.alloc_zeros::<f32>((sizes.max_rows * sizes.scale_words).max(1))?;
        let expert_src = stream.alloc_zeros::<i32>(sizes.max_rows.max(1) * 2)?;
        let expert_offsets = stream.alloc_zeros::<i64>(sizes.local_experts + 1)?;
        let ll_elems = if cfg.low_latency { cfg.num_experts } else { 1 };
        let ll_count = stream.alloc_zeros::<i32>(ll_elems)?;
        let ll_src = stream.alloc_zeros::<i32>(ll_elems * cfg.max_tokens.max(1) * 2)?;
        stream.synchronize()?;
        // Zero-filled: the signals and acknowledgements start at epoch 0 on every PE.
        let sym = world.calloc::<u8>(sizes.symmetric_bytes)?;
        let s = sym.as_ptr() as u64;
        let o = &sizes.off;
        let sc = dev_ptr(&scratch, &stream);
        let base = EpParams {
            n_pes: n as i64,
            my_pe: me as i64,
            num_experts: cfg.num_experts as i64,
            local_experts: sizes.local_experts as i64,
            topk: cfg.topk as i64,
            row_bytes: sizes.row_bytes as i64,
            hidden: cfg.hidden as i64,
            max_tokens: cfg.max_tokens as i64,
            max_rows: sizes.max_rows as i64,
            meta_words: sizes.meta_words as i64,
            stage_x: s + o.stage_x as u64,
            stage_meta: s + o.stage_meta as u64,
            recv_cnt: s + o.recv_cnt as u64,
            sig: s + o.sig as u64,
            comb_x: s + o.comb_x as u64,
            epoch: sc + o.epoch as u64,
            done: sc + o.done as u64,
            err: sc + o.err as u64,
            send_ntok: sc + o.send_ntok as u64,
            ecnt: sc + o.ecnt as u64,
            recv_ntok: sc + o.recv_ntok as u64,
            tok_mask: sc + o.tok_mask as u64,
            comb_meta: sc + o.comb_meta as u64,
            expert_x: dev_ptr(&expert_x, &stream),
            expert_offsets: dev_ptr(&expert_offsets, &stream),
            expert_src: dev_ptr(&expert_src, &stream),
            ll_x: s + o.ll_x as u64,
            ll_meta: s + o.ll_meta as u64,
            ll_cnt: s + o.ll_cnt as u64,
            ll_comb: s + o.ll_comb as u64,
            ll_count: dev_ptr(&ll_count, &stream),
            ll_src: dev_ptr(&ll_src, &stream),
            ll_slot_ok: sc + o.ll_slot_ok as u64,
            comb_row_bytes: sizes.comb_row_bytes as i64,
            scale_words: sizes.scale_words as i64,
            stage_scales: s + o.stage_scales as u64,
            expert_scales: dev_ptr(&expert_scales, &stream),
            ll_scales: s + o.ll_scales as u64,
            ll_wgt: s + o.ll_wgt as u64,
            ll_pair: sc + o.ll_pair as u64,
            ll_items: sc + o.ll_items as u64,
            ll_nitems: sc + o.ll_nitems as u64,
            ..EpParams::default()
        };
        // The low-latency mode, the same on every PE (the dispatch's lead rows and the combine's
        // partial sums must agree): once per PE where every PE asks for it and every PE's grid
        // fits on its share of the SMs (the per-PE combine's blocks wait for other PEs' blocks:
        // ep.cuh, ll_combine_send_per_pe).
        let ll_per_pe = cfg.low_latency && {
            let all = gpu.multiprocessor_count()?.max(1) as usize;
            let share = world.gpu_sharing().pes_on_gpu.max(1);
            let mut w = u64::from(ll_per_pe(world) && sms as usize * share <= all);
            world.team_and(call, &world.team_world(), &mut w)?;
            w != 0
        };
        // Every PE's buffers are zero before any PE's first dispatch can write into them.
        world.barrier_all()?;
        Ok(Ep {
            world,
            cfg,
            sizes,
            sym,
            _scratch: scratch,
            expert_x,
            expert_scales,
            expert_src,
            expert_offsets,
            ll_count,
            ll_src,
            kernels,
            sms,
            ll_per_pe,
            base,
            last_tokens: Cell::new(None),
            last_ll_tokens: Cell::new(None),
        })
    }

    /// **Collective.** Releases the symmetric buffers (the local ones go with the handle).
    /// Waits for all of this PE's GPU work first (the context), so that no kernel of any PE
    /// still writes a signal into memory that a later allocation reuses (the free itself
    /// synchronizes the PEs).
    pub fn free(self) -> Result<()> {
        let call = "ep_free";
        let gpu = &self.world.p2p(call)?.gpu;
        gpu.bind(call)?;
        gpu.ctx.synchronize()?;
        self.world.free(self.sym)
    }

    /// The configuration.
    pub fn config(&self) -> &EpConfig {
        &self.cfg
    }

    /// The buffer layout.
    pub fn sizes(&self) -> &EpSizes {
        &self.sizes
    }

    /// Blocks each kernel uses.
    pub fn num_sms(&self) -> u32 {
        self.sms
    }

    /// Whether this handle's low-latency dispatch sends each token once per destination PE (the
    /// receiver copies it to the token's other experts there) and its low-latency combine
    /// returns one row per (token, PE), the PE's experts' outputs summed there; otherwise both
    /// go once per (token, expert) pair. The same on every PE: [`Ep::new`] takes it when every
    /// PE asks for it (`RSHMEM_EP_LL_PER_PE`, [`ll_per_pe`]) and every PE's `num_sms` blocks fit
    /// on its share of the GPU. False on a handle without `low_latency`.
    pub fn ll_per_pe(&self) -> bool {
        self.ll_per_pe
    }

    /// The dispatch output: `max_rows` rows of `row_bytes` bytes, local expert `l`'s rows at
    /// `expert_offsets[l] .. expert_offsets[l + 1]`. Valid after the last dispatch's kernels ran,
    /// until the next dispatch.
    pub fn expert_x(&self) -> &CudaSlice<u8> {
        &self.expert_x
    }

    /// `L + 1` row offsets of the local experts in [`expert_x`](Ep::expert_x) (the last one is
    /// the number of rows, at most `max_rows`).
    pub fn expert_offsets(&self) -> &CudaSlice<i64> {
        &self.expert_offsets
    }

    /// Two `i32` per row of [`expert_x`](Ep::expert_x): the source PE and the token's index
    /// there.
    pub fn expert_src(&self) -> &CudaSlice<i32> {
        &self.expert_src
    }

    /// Device address of [`expert_x`](Ep::expert_x) (for kernels and `combine_raw`).
    pub fn expert_x_addr(&self) -> u64 {
        self.base.expert_x
    }

    /// The scales of the dispatch output's rows (fp8 handles): `max_rows × scale_words` `f32`,
    /// row `r`'s at `r·scale_words ..`, the scales the row's source passed with it. A
    /// one-element buffer on other handles. Valid as [`expert_x`](Ep::expert_x).
    pub fn expert_scales(&self) -> &CudaSlice<f32> {
        &self.expert_scales
    }

    /// Device address of [`expert_scales`](Ep::expert_scales); 0 on a handle without scales.
    pub fn expert_scales_addr(&self) -> u64 {
        if self.sizes.scale_words > 0 {
            self.base.expert_scales
        } else {
            0
        }
    }

    /// Launches one phase on `stream`: `kernels` (name, blocks) in order, every kernel with the
    /// parameters `p` (the send kernel, then the receive kernel; the phase's epoch and the wait
    /// for the previous exchange's acknowledgements are in the kernels: ep.cuh, `phase_begin`).
    /// The receive kernel starts as `recv_start` says: [`Start::Overlapping`] makes it a
    /// programmatic dependent of the send kernel (on GPUs that have it), launched while the send
    /// kernel's blocks finish (ep.cuh, `phase_sent`); it waits for the data through the signals
    /// anyway. docs/moe.md says where that is used and why.
    fn launch_phase(
        &self,
        call: &'static str,
        p: &EpParams,
        kernels: [(&'static str, u32); 2],
        recv_start: Start,
        stream: &CudaStream,
    ) -> Result<()> {
        let [(send, send_blocks), (recv, recv_blocks)] = kernels;
        self.launch(call, send, send_blocks, p, stream, Start::AfterPrevious)?;
        self.launch(call, recv, recv_blocks, p, stream, recv_start)
    }

    /// A typed dispatch's inputs, by their lengths: `x` of the handle's dtype `E` with
    /// `x_len ≥ num_tokens × hidden` elements, `idx_len ≥ num_tokens × topk` expert indices,
    /// as many weights (`w_len`; `None`: the low-latency dispatch, which takes none), and for the
    /// `*_fp8` dispatches (`scales_len` is `Some`, checked first: an fp8 handle) at least
    /// `num_tokens × hidden/128` scales.
    fn inputs_ok<E: EpElem>(
        &self,
        call: &'static str,
        x_len: usize,
        idx_len: usize,
        w_len: Option<usize>,
        scales_len: Option<usize>,
        num_tokens: usize,
    ) -> Result<()> {
        if scales_len.is_some() {
            fp8_only::<()>(call, self.cfg.dtype)?;
        }
        self.elem_ok::<E>(call, "x", self.cfg.dtype)?;
        let (h, k) = (self.cfg.hidden, self.cfg.topk);
        Self::len_ok(call, "x", x_len, num_tokens, h, "hidden")?;
        Self::len_ok(call, "topk_idx", idx_len, num_tokens, k, "topk")?;
        if let Some(len) = w_len {
            Self::len_ok(call, "topk_weights", len, num_tokens, k, "topk")?;
        }
        if let Some(len) = scales_len {
            let sw = self.sizes.scale_words;
            Self::len_ok(call, "x_scales", len, num_tokens, sw, "hidden / 128")?;
        }
        Ok(())
    }

    /// `num_tokens` fits the handle's buffers (at most `max_tokens`).
    fn tokens_ok(&self, call: &'static str, num_tokens: usize) -> Result<()> {
        if num_tokens > self.cfg.max_tokens {
            return Err(Error::invalid(
                call,
                format!(
                    "num_tokens: {num_tokens} is more than the handle's max_tokens {}",
                    self.cfg.max_tokens
                ),
            ));
        }
        Ok(())
    }

    /// The scales argument of a dispatch: required (and 4-byte aligned, not null when there are
    /// tokens) on an fp8 handle, refused on the others. Returns the address (0: none).
    fn scales_ok(
        &self,
        call: &'static str,
        x_scales: Option<u64>,
        num_tokens: usize,
    ) -> Result<u64> {
        scales_arg(call, self.cfg.dtype, x_scales, num_tokens)
    }

    /// Refuses the dispatch output as `y` of an fp8 handle's combine (it holds fp8 rows; the
    /// combine reads bf16 rows twice as long).
    fn not_in_place(&self, call: &'static str, y: u64, output: u64) -> Result<()> {
        not_in_place(call, self.cfg.dtype, y, output)
    }

    fn stream_ok(&self, call: &'static str, stream: &CudaStream) -> Result<()> {
        self.world.check_stream(call, stream)
    }

    fn launch(
        &self,
        call: &'static str,
        name: &'static str,
        blocks: u32,
        p: &EpParams,
        stream: &CudaStream,
        start: Start,
    ) -> Result<()> {
        let mut p = *p;
        let mut args: [*mut std::ffi::c_void; 1] = [(&mut p as *mut EpParams).cast()];
        // SAFETY: every kernel of ep.cu takes one rshmem_ep_params by value, which EpParams
        // mirrors (size asserted on both sides); its addresses are this handle's buffers (alive
        // as long as the handle) and the caller's, checked by the callers of this function.
        unsafe {
            self.kernels
                .launch(call, name, blocks, THREADS, stream, &mut args, start)
        }
    }

    /// **Collective, stream-ordered.** Dispatch with device addresses: `x` holds `num_tokens`
    /// rows of `hidden` elements (16-byte aligned), `topk_idx` `num_tokens × k` `i64`,
    /// `topk_weights` `num_tokens × k` `f32`. Expert indices outside `-1 .. E` are skipped and
    /// reported by [`check`](Ep::check). Graph-capturable (only kernel launches).
    ///
    /// # Safety
    /// The addresses must be device memory of this PE's context holding what is said above,
    /// unchanged until the kernels ran.
    pub unsafe fn dispatch_raw(
        &self,
        x: u64,
        topk_idx: u64,
        topk_weights: u64,
        num_tokens: usize,
        stream: &CudaStream,
    ) -> Result<()> {
        // SAFETY: the caller's contract, forwarded.
        unsafe { self.dispatch_any(x, None, topk_idx, topk_weights, num_tokens, stream) }
    }

    /// **Collective, stream-ordered.** [`dispatch_raw`](Ep::dispatch_raw) of an
    /// [`EpDtype::Fp8E4m3`] handle: `x` holds `num_tokens` rows of `hidden` fp8 bytes (16-byte
    /// aligned), `x_scales` `num_tokens × hidden/128` `f32` (row-major, 4-byte aligned).
    /// Afterwards [`expert_x`](Ep::expert_x) holds the rows and
    /// [`expert_scales`](Ep::expert_scales) their scales, in the same row order.
    /// Graph-capturable.
    ///
    /// # Safety
    /// As [`dispatch_raw`](Ep::dispatch_raw), `x_scales` included.
    pub unsafe fn dispatch_fp8_raw(
        &self,
        x: u64,
        x_scales: u64,
        topk_idx: u64,
        topk_weights: u64,
        num_tokens: usize,
        stream: &CudaStream,
    ) -> Result<()> {
        // SAFETY: the caller's contract, forwarded.
        unsafe {
            self.dispatch_any(
                x,
                Some(x_scales),
                topk_idx,
                topk_weights,
                num_tokens,
                stream,
            )
        }
    }

    /// The two raw dispatches; `x_scales` is `Some` for fp8 handles (checked).
    ///
    /// # Safety
    /// As [`dispatch_raw`](Ep::dispatch_raw).
    unsafe fn dispatch_any(
        &self,
        x: u64,
        x_scales: Option<u64>,
        topk_idx: u64,
        topk_weights: u64,
        num_tokens: usize,
        stream: &CudaStream,
    ) -> Result<()> {
        let call = "ep_dispatch";
        self.stream_ok(call, stream)?;
        self.tokens_ok(call, num_tokens)?;
        let x_scales = self.scales_ok(call, x_scales, num_tokens)?;
        if num_tokens > 0 {
            addrs_ok(
                call,
                num_tokens,
                &[
                    ("x", x, 16),
                    ("topk_idx", topk_idx, 8),
                    ("topk_weights", topk_weights, 4),
                ],
            )?;
        }
        let p = EpParams {
            num_tokens: num_tokens as i64,
            x,
            x_scales,
            topk_idx,
            topk_w: topk_weights,
            ..self.base
        };
        self.launch_phase(
            call,
            &p,
            [
                ("rshmem_ep_dispatch_send", self.sms),
                ("rshmem_ep_dispatch_recv", self.sms),
            ],
            // Overlapped, the dispatch took longer at every size measured (docs/moe.md).
            Start::AfterPrevious,
            stream,
        )?;
        self.last_tokens.set(Some(num_tokens));
        Ok(())
    }

    /// **Collective, stream-ordered.** Dispatch: `x` holds at least `num_tokens × hidden`
    /// elements of the handle's dtype, `topk_idx` and `topk_weights` at least `num_tokens × k`.
    /// Afterwards (in stream order) [`expert_x`](Ep::expert_x), [`expert_offsets`](Ep::expert_offsets)
    /// and [`expert_src`](Ep::expert_src) hold the received tokens. Shapes are checked here;
    /// expert indices on the device ([`check`](Ep::check) reports them).
    pub fn dispatch<E, X, I, W>(
        &self,
        x: &X,
        topk_idx: &I,
        topk_weights: &W,
        num_tokens: usize,
        stream: &CudaStream,
    ) -> Result<()>
    where
        E: EpElem,
        X: DevicePtr<E>,
        I: DevicePtr<i64>,
        W: DevicePtr<f32>,
    {
        let (x_len, idx_len, w_len) = (x.len(), topk_idx.len(), Some(topk_weights.len()));
        self.inputs_ok::<E>("ep_dispatch", x_len, idx_len, w_len, None, num_tokens)?;
        let (xa, _a) = x.device_ptr(stream);
        let (ia, _b) = topk_idx.device_ptr(stream);
        let (wa, _c) = topk_weights.device_ptr(stream);
        // SAFETY: the three are device memory of this context (cudarc slices) whose lengths
        // were checked above; the SyncOnDrop guards keep cudarc's stream ordering.
        unsafe { self.dispatch_raw(xa, ia, wa, num_tokens, stream) }
    }

    /// **Collective, stream-ordered.** Dispatch of fp8 tokens ([`EpDtype::Fp8E4m3`] handles):
    /// `x` at least `num_tokens × hidden` bytes (e4m3 bit patterns), `x_scales` at least
    /// `num_tokens × hidden/128` `f32` (the scale of elements `128·b .. 128·(b+1)` of token `t`
    /// at `t·hidden/128 + b`), `topk_idx` and `topk_weights` as in [`dispatch`](Ep::dispatch).
    /// Afterwards [`expert_x`](Ep::expert_x) holds the received rows' bytes and
    /// [`expert_scales`](Ep::expert_scales) their scales, both unchanged and in the same row
    /// order, with [`expert_offsets`](Ep::expert_offsets) and [`expert_src`](Ep::expert_src) as
    /// for the other dtypes.
    pub fn dispatch_fp8<X, S, I, W>(
        &self,
        x: &X,
        x_scales: &S,
        topk_idx: &I,
        topk_weights: &W,
        num_tokens: usize,
        stream: &CudaStream,
    ) -> Result<()>
    where
        X: DevicePtr<u8>,
        S: DevicePtr<f32>,
        I: DevicePtr<i64>,
        W: DevicePtr<f32>,
    {
        let (x_len, idx_len) = (x.len(), topk_idx.len());
        let (w_len, s_len) = (Some(topk_weights.len()), Some(x_scales.len()));
        self.inputs_ok::<u8>("ep_dispatch", x_len, idx_len, w_len, s_len, num_tokens)?;
        let (xa, _a) = x.device_ptr(stream);
        let (sa, _s) = x_scales.device_ptr(stream);
        let (ia, _b) = topk_idx.device_ptr(stream);
        let (wa, _c) = topk_weights.device_ptr(stream);
        // SAFETY: device memory of this context (cudarc slices) whose lengths were checked
        // above; the SyncOnDrop guards keep cudarc's stream ordering.
        unsafe { self.dispatch_fp8_raw(xa, sa, ia, wa, num_tokens, stream) }
    }

    /// **Collective, stream-ordered.** Combine with device addresses: `y` holds the expert
    /// outputs in the layout of the last dispatch (`max_rows` rows; may be
    /// [`expert_x_addr`](Ep::expert_x_addr)), `out` receives the last dispatch's `num_tokens`
    /// rows. Graph-capturable.
    ///
    /// # Safety
    /// As [`dispatch_raw`](Ep::dispatch_raw): device memory of this context, `y` valid for the
    /// rows of the last dispatch, `out` for `num_tokens` rows, until the kernels ran.
    pub unsafe fn combine_raw(&self, y: u64, out: u64, stream: &CudaStream) -> Result<()> {
        let call = "ep_combine";
        self.stream_ok(call, stream)?;
        let t = self.last_tokens.get().ok_or_else(|| {
            Error::invalid(
                call,
                "no dispatch on this handle yet: combine returns the tokens of the last dispatch",
            )
        })?;
        // `y` is read for the rows this PE received, which a PE with no tokens of its own
        // (t = 0) may have too: never null.
        addrs_ok(call, 1, &[("y", y, 16)])?;
        addrs_ok(call, t, &[("out", out, 16)])?;
        self.not_in_place(call, y, self.base.expert_x)?;
        let p = EpParams {
            num_tokens: t as i64,
            y,
            out,
            ..self.base
        };
        let (send, recv) = match self.cfg.dtype.combine_dtype() {
            EpDtype::F32 => ("rshmem_ep_combine_send_f32", "rshmem_ep_combine_recv_f32"),
            _ => ("rshmem_ep_combine_send_bf16", "rshmem_ep_combine_recv_bf16"),
        };
        self.launch_phase(
            call,
            &p,
            [(send, self.sms), (recv, self.sms)],
            Start::Overlapping,
            stream,
        )
    }

    /// **Collective, stream-ordered.** Combine: `y` holds the expert outputs in the layout of
    /// the last dispatch (at least `max_rows × hidden` elements), `out` at least the last
    /// dispatch's `num_tokens × hidden`. `out[t] = Σ_j topk_weights[t][j] · y(row of token t at
    /// expert topk_idx[t][j])`, summed in fp32 (per expert PE in slot order, then over PEs in PE
    /// order) and rounded to the dtype; zeros for a token with no expert. `y` and `out` are of
    /// the handle's [combine dtype](EpDtype::combine_dtype): bf16 (`u16`) for fp8 handles.
    pub fn combine<E, Y, O>(&self, y: &Y, out: &mut O, stream: &CudaStream) -> Result<()>
    where
        E: EpElem,
        Y: DevicePtr<E>,
        O: DevicePtrMut<E>,
    {
        let call = "ep_combine";
        let cd = self.cfg.dtype.combine_dtype();
        self.elem_ok::<E>(call, "y", cd)?;
        let t = self.last_tokens.get().unwrap_or(0);
        let h = self.cfg.hidden;
        Self::len_ok(call, "y", y.len(), self.sizes.max_rows, h, "hidden")?;
        Self::len_ok(call, "out", out.len(), t, h, "hidden")?;
        let (ya, _a) = y.device_ptr(stream);
        let (oa, _b) = out.device_ptr_mut(stream);
        // SAFETY: cudarc device memory of this context with the lengths checked above.
        unsafe { self.combine_raw(ya, oa, stream) }
    }

    /// **Collective, stream-ordered.** [`combine`](Ep::combine) with the expert outputs written
    /// in place into [`expert_x`](Ep::expert_x). Not for fp8 handles (their `y` is bf16).
    pub fn combine_in_place<E, O>(&self, out: &mut O, stream: &CudaStream) -> Result<()>
    where
        E: EpElem,
        O: DevicePtrMut<E>,
    {
        let call = "ep_combine";
        self.not_in_place(call, self.base.expert_x, self.base.expert_x)?;
        self.elem_ok::<E>(call, "out", self.cfg.dtype.combine_dtype())?;
        let t = self.last_tokens.get().unwrap_or(0);
        Self::len_ok(call, "out", out.len(), t, self.cfg.hidden, "hidden")?;
        let (oa, _b) = out.device_ptr_mut(stream);
        // SAFETY: expert_x is this handle's buffer of max_rows rows; out was checked above.
        unsafe { self.combine_raw(self.base.expert_x, oa, stream) }
    }

    fn ll_ok(&self, call: &'static str) -> Result<()> {
        if self.cfg.low_latency {
            Ok(())
        } else {
            Err(Error::invalid(
                call,
                "the handle was made without low_latency (EpConfig::low_latency = true allocates the low-latency buffers)",
            ))
        }
    }

    /// **Collective, stream-ordered.** Low-latency dispatch with device addresses (as
    /// [`dispatch_raw`](Ep::dispatch_raw); `num_tokens ≤ max_tokens ≤ 256`): every (token,
    /// expert) pair is stored straight into the expert's region on its PE, rows
    /// `[l][source][0 .. count[l][source]]` of [`ll_recv_x_addr`](Ep::ll_recv_x_addr), no count
    /// exchange before the data. Counts: [`ll_count`](Ep::ll_count), rows' (token, slot):
    /// [`ll_src`](Ep::ll_src). The received rows stay valid until any PE's next low-latency
    /// dispatch, which comes after this PE's low-latency combine when dispatch and combine
    /// alternate. Graph-capturable.
    ///
    /// # Safety
    /// As [`dispatch_raw`](Ep::dispatch_raw).
    pub unsafe fn ll_dispatch_raw(
        &self,
        x: u64,
        topk_idx: u64,
        num_tokens: usize,
        stream: &CudaStream,
    ) -> Result<()> {
        // SAFETY: the caller's contract, forwarded.
        unsafe { self.ll_dispatch_any(x, None, topk_idx, num_tokens, stream) }
    }

    /// **Collective, stream-ordered.** [`ll_dispatch_raw`](Ep::ll_dispatch_raw) of an
    /// [`EpDtype::Fp8E4m3`] handle: `x_scales` as in [`dispatch_fp8_raw`](Ep::dispatch_fp8_raw);
    /// each row's scales land beside it ([`ll_recv_scales_addr`](Ep::ll_recv_scales_addr)).
    ///
    /// # Safety
    /// As [`dispatch_raw`](Ep::dispatch_raw), `x_scales` included.
    pub unsafe fn ll_dispatch_fp8_raw(
        &self,
        x: u64,
        x_scales: u64,
        topk_idx: u64,
        num_tokens: usize,
        stream: &CudaStream,
    ) -> Result<()> {
        // SAFETY: the caller's contract, forwarded.
        unsafe { self.ll_dispatch_any(x, Some(x_scales), topk_idx, num_tokens, stream) }
    }

    /// The two raw low-latency dispatches; `x_scales` is `Some` for fp8 handles (checked).
    ///
    /// # Safety
    /// As [`dispatch_raw`](Ep::dispatch_raw).
    unsafe fn ll_dispatch_any(
        &self,
        x: u64,
        x_scales: Option<u64>,
        topk_idx: u64,
        num_tokens: usize,
        stream: &CudaStream,
    ) -> Result<()> {
        let call = "ep_ll_dispatch";
        self.ll_ok(call)?;
        self.stream_ok(call, stream)?;
        self.tokens_ok(call, num_tokens)?;
        let x_scales = self.scales_ok(call, x_scales, num_tokens)?;
        if num_tokens > 0 {
            addrs_ok(call, num_tokens, &[("x", x, 16), ("topk_idx", topk_idx, 8)])?;
        }
        let p = EpParams {
            num_tokens: num_tokens as i64,
            x,
            x_scales,
            topk_idx,
            ..self.base
        };
        let ll_send = if self.ll_per_pe {
            "rshmem_ep_ll_send_per_pe"
        } else {
            "rshmem_ep_ll_send"
        };
        self.launch_phase(
            call,
            &p,
            [(ll_send, self.sms), ("rshmem_ep_ll_wait", self.sms)],
            Start::Overlapping,
            stream,
        )?;
        self.last_ll_tokens.set(Some(num_tokens));
        Ok(())
    }

    /// **Collective, stream-ordered.** Low-latency dispatch; shapes as [`dispatch`](Ep::dispatch)
    /// (the weights are not sent: [`ll_combine`](Ep::ll_combine) takes them).
    pub fn ll_dispatch<E, X, I>(
        &self,
        x: &X,
        topk_idx: &I,
        num_tokens: usize,
        stream: &CudaStream,
    ) -> Result<()>
    where
        E: EpElem,
        X: DevicePtr<E>,
        I: DevicePtr<i64>,
    {
        let call = "ep_ll_dispatch";
        self.inputs_ok::<E>(call, x.len(), topk_idx.len(), None, None, num_tokens)?;
        let (xa, _a) = x.device_ptr(stream);
        let (ia, _b) = topk_idx.device_ptr(stream);
        // SAFETY: cudarc device memory of this context with the lengths checked above.
        unsafe { self.ll_dispatch_raw(xa, ia, num_tokens, stream) }
    }

    /// **Collective, stream-ordered.** Low-latency dispatch of fp8 tokens: shapes as
    /// [`dispatch_fp8`](Ep::dispatch_fp8) (no weights: [`ll_combine`](Ep::ll_combine) takes
    /// them). The received rows' scales: [`ll_recv_scales_addr`](Ep::ll_recv_scales_addr).
    pub fn ll_dispatch_fp8<X, S, I>(
        &self,
        x: &X,
        x_scales: &S,
        topk_idx: &I,
        num_tokens: usize,
        stream: &CudaStream,
    ) -> Result<()>
    where
        X: DevicePtr<u8>,
        S: DevicePtr<f32>,
        I: DevicePtr<i64>,
    {
        let (x_len, idx_len, s_len) = (x.len(), topk_idx.len(), Some(x_scales.len()));
        self.inputs_ok::<u8>("ep_ll_dispatch", x_len, idx_len, None, s_len, num_tokens)?;
        let (xa, _a) = x.device_ptr(stream);
        let (sa, _s) = x_scales.device_ptr(stream);
        let (ia, _b) = topk_idx.device_ptr(stream);
        // SAFETY: cudarc device memory of this context with the lengths checked above.
        unsafe { self.ll_dispatch_fp8_raw(xa, sa, ia, num_tokens, stream) }
    }

    /// **Collective, stream-ordered.** Low-latency combine with device addresses: `y` holds
    /// the expert outputs in the layout of the low-latency dispatch output (`[L][n][max_tokens]`
    /// rows; may be [`ll_recv_x_addr`](Ep::ll_recv_x_addr)), `topk_weights` the last
    /// low-latency dispatch's `num_tokens × k` weights, `out` its `num_tokens` rows:
    /// `out[t] = Σ_j w[t][j]·y(t, j)` over the slots that were sent. Once per (token, expert)
    /// pair: in slot order (fp32 fused multiply-adds from 0), rounded once. Once per PE
    /// ([`ll_per_pe`](Ep::ll_per_pe)): the weights go to the experts' PEs, each PE sums its
    /// experts' rows of a token in slot order (fp32 fused multiply-adds from 0), rounded once to
    /// the combine dtype, and sends that one row back; the source adds the rows in the order of
    /// each PE's first slot (fp32), rounded once ([`reference::combine_ll_per_pe`]).
    /// Graph-capturable.
    ///
    /// # Safety
    /// As [`combine_raw`](Ep::combine_raw).
    pub unsafe fn ll_combine_raw(
        &self,
        y: u64,
        topk_weights: u64,
        out: u64,
        stream: &CudaStream,
    ) -> Result<()> {
        let call = "ep_ll_combine";
        self.ll_ok(call)?;
        self.stream_ok(call, stream)?;
        let t = self.last_ll_tokens.get().ok_or_else(|| {
            Error::invalid(call, "no low-latency dispatch on this handle yet: combine returns the tokens of the last one")
        })?;
        // `y` is read for the rows this PE's experts received, also when t = 0: never null.
        addrs_ok(call, 1, &[("y", y, 16)])?;
        self.not_in_place(call, y, self.base.ll_x)?;
        addrs_ok(
            call,
            t,
            &[("out", out, 16), ("topk_weights", topk_weights, 4)],
        )?;
        let p = EpParams {
            num_tokens: t as i64,
            y,
            topk_w: topk_weights,
            out,
            ..self.base
        };
        let f32 = self.cfg.dtype.combine_dtype() == EpDtype::F32;
        let recv = if f32 {
            "rshmem_ep_ll_combine_recv_f32"
        } else {
            "rshmem_ep_ll_combine_recv_bf16"
        };
        let send = match (self.ll_per_pe, f32) {
            (false, _) => "rshmem_ep_ll_combine_send",
            (true, true) => "rshmem_ep_ll_combine_send_per_pe_f32",
            (true, false) => "rshmem_ep_ll_combine_send_per_pe_bf16",
        };
        self.launch_phase(
            call,
            &p,
            [(send, self.sms), (recv, self.sms)],
            Start::Overlapping,
            stream,
        )
    }

    /// **Collective, stream-ordered.** Low-latency combine: `y` at least
    /// `E·max_tokens·hidden` elements in the dispatch output's layout (or `None`: the expert
    /// outputs were written in place into it; not for fp8 handles), `topk_weights` and `out` for
    /// the last low-latency dispatch's tokens. `y` and `out` are of the handle's
    /// [combine dtype](EpDtype::combine_dtype).
    pub fn ll_combine<E, Y, W, O>(
        &self,
        y: Option<&Y>,
        topk_weights: &W,
        out: &mut O,
        stream: &CudaStream,
    ) -> Result<()>
    where
        E: EpElem,
        Y: DevicePtr<E>,
        W: DevicePtr<f32>,
        O: DevicePtrMut<E>,
    {
        let call = "ep_ll_combine";
        self.elem_ok::<E>(call, "out", self.cfg.dtype.combine_dtype())?;
        self.ll_ok(call)?;
        let t = self.last_ll_tokens.get().unwrap_or(0);
        let (h, k) = (self.cfg.hidden, self.cfg.topk);
        let ya = match y {
            Some(y) => {
                let rows = self.cfg.num_experts * self.cfg.max_tokens;
                Self::len_ok(call, "y", y.len(), rows, h, "hidden")?;
                y.device_ptr(stream).0
            }
            None => {
                self.not_in_place(call, self.base.ll_x, self.base.ll_x)?;
                self.base.ll_x
            }
        };
        Self::len_ok(call, "topk_weights", topk_weights.len(), t, k, "topk")?;
        Self::len_ok(call, "out", out.len(), t, h, "hidden")?;
        let (wa, _a) = topk_weights.device_ptr(stream);
        let (oa, _b) = out.device_ptr_mut(stream);
        // SAFETY: cudarc device memory of this context (or the handle's buffer) with the
        // lengths checked above.
        unsafe { self.ll_combine_raw(ya, wa, oa, stream) }
    }

    /// Device address of the low-latency dispatch output: `[L][n][max_tokens]` rows (local
    /// expert, source PE, rank), symmetric memory of this handle.
    pub fn ll_recv_x_addr(&self) -> u64 {
        self.base.ll_x
    }

    /// Device address of the scales of the low-latency output's rows (fp8 handles):
    /// `[L][n][max_tokens][scale_words]` `f32`, symmetric memory of this handle, beside the rows
    /// of [`ll_recv_x_addr`](Ep::ll_recv_x_addr). 0 on a handle without scales or without the
    /// low-latency mode.
    pub fn ll_recv_scales_addr(&self) -> u64 {
        if self.cfg.low_latency && self.sizes.scale_words > 0 {
            self.base.ll_scales
        } else {
            0
        }
    }

    /// `L × n` `i32`: rows of each (local expert, source PE) block of the last low-latency
    /// dispatch.
    pub fn ll_count(&self) -> &CudaSlice<i32> {
        &self.ll_count
    }

    /// `L × n × max_tokens × 2` `i32`: (source token, slot) of each received row.
    pub fn ll_src(&self) -> &CudaSlice<i32> {
        &self.ll_src
    }

    /// **Local.** Synchronizes `stream` and copies `rows` rows of the low-latency output's
    /// block (local expert `l`, source PE `src`) to the host (for checks).
    pub fn ll_read_rows(
        &self,
        l: usize,
        src: usize,
        rows: usize,
        stream: &CudaStream,
    ) -> Result<Vec<u8>> {
        let call = "ep_ll_read_rows";
        self.ll_ok(call)?;
        let (at, row) = (self.base.ll_x, self.sizes.row_bytes);
        self.ll_read_block(
            call,
            "copying rows to the host",
            at,
            row,
            (l, src, rows),
            stream,
        )
    }

    /// **Local.** Synchronizes `stream` and copies the scales of `rows` rows of the low-latency
    /// output's block (local expert `l`, source PE `src`) to the host (fp8 handles; for checks):
    /// `rows × scale_words` values.
    pub fn ll_read_scales(
        &self,
        l: usize,
        src: usize,
        rows: usize,
        stream: &CudaStream,
    ) -> Result<Vec<f32>> {
        let call = "ep_ll_read_scales";
        self.ll_ok(call)?;
        let sw = self.sizes.scale_words;
        if sw == 0 {
            return Err(Error::invalid(
                call,
                format!(
                    "the handle was made for {:?}, whose rows carry no scales",
                    self.cfg.dtype
                ),
            ));
        }
        let at = self.base.ll_scales;
        self.ll_read_block(
            call,
            "copying scales to the host",
            at,
            sw,
            (l, src, rows),
            stream,
        )
    }

    /// The two `ll_read_*`: synchronizes `stream` and copies `rows` rows of `per_row` elements
    /// `T` of the block (local expert `l`, source PE `src`) of the `[L][n][max_tokens]` rows at
    /// `at` (the low-latency output, or its scales) to the host.
    fn ll_read_block<T: Copy + Default>(
        &self,
        call: &'static str,
        what: &'static str,
        at: u64,
        per_row: usize,
        (l, src, rows): (usize, usize, usize),
        stream: &CudaStream,
    ) -> Result<Vec<T>> {
        let (n, m) = (self.sizes.n_pes, self.cfg.max_tokens);
        if l >= self.sizes.local_experts || src >= n || rows > m {
            return Err(Error::invalid(
                call,
                format!(
                    "block ({l}, {src}) of {rows} rows is outside [{}][{n}][{m}]",
                    self.sizes.local_experts
                ),
            ));
        }
        let mut v = vec![T::default(); rows * per_row];
        self.world.p2p(call)?.gpu.bind(call)?;
        stream.synchronize()?;
        if rows > 0 {
            let row_bytes = per_row * std::mem::size_of::<T>();
            let a = at + (((l * n + src) * m) * row_bytes) as u64;
            let bytes = v.len() * std::mem::size_of::<T>();
            // SAFETY: the range lies inside this handle's low-latency rows or scales (checked
            // above; `T` plain data: bytes or f32); the stream was synchronized.
            unsafe { crate::cuda::copy::read(call, what, v.as_mut_ptr().cast(), a, bytes) }?;
        }
        Ok(v)
    }

    /// **Local.** Waits for `stream` and reports what the kernels found wrong since the last
    /// check: an expert index outside `-1 .. E` (`ep_dispatch: topk_idx[t][j] = …`) or more rows
    /// than `max_recv_rows` (`ep_dispatch: max_recv_rows …`); clears it.
    pub fn check(&self, stream: &CudaStream) -> Result<()> {
        let call = "ep_dispatch";
        self.stream_ok(call, stream)?;
        let mut e = [0i32; 4];
        self.world.p2p(call)?.gpu.bind(call)?;
        stream.synchronize()?;
        // SAFETY: 16 bytes of this handle's scratch into a 16-byte host array; the stream was
        // synchronized, so no kernel of the handle writes them meanwhile.
        unsafe {
            crate::cuda::copy::read(
                call,
                "reading the error word",
                e.as_mut_ptr().cast(),
                self.base.err,
                16,
            )
        }?;
        if e[0] == 0 {
            return Ok(());
        }
        // SAFETY: the 16 bytes at scratch + err belong to this handle, and no kernel of the
        // handle runs (its calls are ordered on one stream, which was synchronized above).
        unsafe {
            crate::cuda::copy::fill(
                call,
                "clearing the error word",
                self.base.err,
                0,
                16,
                stream,
            )
        }?;
        stream.synchronize()?;
        Err(match e[0] {
            1 => Error::invalid(
                call,
                format!(
                    "topk_idx[{}][{}] = {} is out of range: experts are 0..{} (-1 = none); that entry was skipped",
                    e[1], e[2], e[3], self.cfg.num_experts
                ),
            ),
            2 if e[3] == 1 => Error::invalid(
                "ep_ll_dispatch",
                format!(
                    "max_tokens: an expert got {} rows from this PE, more than the {} its low-latency block holds (a token names the expert more than once); the rows beyond were dropped",
                    e[1], e[2]
                ),
            ),
            2 => Error::invalid(
                call,
                format!(
                    "max_recv_rows: this PE received {} expert rows, more than the {} the handle holds; the rows beyond were dropped",
                    e[1], e[2]
                ),
            ),
            c => Error::State {
                call,
                reason: format!("unknown device error code {c}"),
            },
        })
    }

    /// `E` is `want`, the dtype `what` must have on this handle (the token dtype, or the
    /// combine dtype).
    fn elem_ok<E: EpElem>(&self, call: &'static str, what: &str, want: EpDtype) -> Result<()> {
        elem_check::<E>(call, what, self.cfg.dtype, want)
    }

    fn len_ok(
        call: &'static str,
        what: &str,
        len: usize,
        rows: usize,
        cols: usize,
        cols_name: &str,
    ) -> Result<()> {
        let need = rows.saturating_mul(cols);
        if len < need {
            return Err(Error::invalid(
                call,
                format!(
                    "{what}: holds {len} elements, fewer than {rows} rows × {cols} ({cols_name}) = {need}"
                ),
            ));
        }
        Ok(())
    }

    /// **Local.** Checks expert indices on the host (for callers that have them there): every
    /// entry of `topk_idx` (`num_tokens × k`) must be in `-1 .. E`. The error names the first
    /// bad entry.
    pub fn check_routing(&self, topk_idx: &[i64], num_tokens: usize) -> Result<()> {
        check_routing(
            "ep_dispatch",
            topk_idx,
            num_tokens,
            self.cfg.topk,
            self.cfg.num_experts,
        )
    }
}

/// The scales argument of a dispatch on a handle of `dtype`: required (4-byte aligned, not null
/// when there are tokens) for fp8, refused for the others. Returns the address (0: none).
fn scales_arg(
    call: &'static str,
    dtype: EpDtype,
    x_scales: Option<u64>,
    num_tokens: usize,
) -> Result<u64> {
    match (dtype, x_scales) {
            (EpDtype::Fp8E4m3, None) => Err(Error::invalid(
                call,
                "x_scales: an Fp8E4m3 handle needs the tokens' per-block scales: use dispatch_fp8 / ll_dispatch_fp8",
            )),
            (EpDtype::Fp8E4m3, Some(a)) => {
                addrs_ok(call, num_tokens, &[("x_scales", a, 4)])?;
                Ok(a)
            }
            (d, Some(_)) => fp8_only(call, d),
            (_, None) => Ok(0),
        }
}

/// The `*_fp8` dispatches need an fp8 handle: on another one the error names `x_scales`.
fn fp8_only<T: Default>(call: &'static str, dtype: EpDtype) -> Result<T> {
    if dtype == EpDtype::Fp8E4m3 {
        return Ok(T::default());
    }
    Err(Error::invalid(
        call,
        format!(
            "x_scales: the handle was made for {dtype:?}; per-block scales go with Fp8E4m3 tokens"
        ),
    ))
}

/// Refuses `y` = `output` (the handle's dispatch output) for the combine of an fp8 handle: that
/// output holds fp8 rows, the combine reads bf16 rows twice as long.
fn not_in_place(call: &'static str, dtype: EpDtype, y: u64, output: u64) -> Result<()> {
    if dtype == EpDtype::Fp8E4m3 && y == output {
        return Err(Error::invalid(
            call,
            "y: the dispatch output of an Fp8E4m3 handle holds fp8 rows, and its combine takes the expert outputs in bf16: pass them as y (no combine in place)",
        ));
    }
    Ok(())
}

/// Elements `E` for the argument `what` of a handle of `handle`'s dtype, where `want` (the
/// token dtype or the combine dtype) is expected.
fn elem_check<E: EpElem>(
    call: &'static str,
    what: &str,
    handle: EpDtype,
    want: EpDtype,
) -> Result<()> {
    if E::DTYPE == want {
        Ok(())
    } else if want == handle {
        Err(Error::invalid(
            call,
            format!(
                "{what}: elements are {:?} but the handle was made for {handle:?}",
                E::DTYPE
            ),
        ))
    } else {
        Err(Error::invalid(
            call,
            format!(
                "{what}: elements are {:?} but the combine of a {handle:?} handle takes {want:?}",
                E::DTYPE
            ),
        ))
    }
}

/// Host check of routing indices (see [`Ep::check_routing`]).
pub fn check_routing(
    call: &'static str,
    topk_idx: &[i64],
    num_tokens: usize,
    k: usize,
    e: usize,
) -> Result<()> {
    if topk_idx.len() != num_tokens.saturating_mul(k) {
        return Err(Error::invalid(
            call,
            format!(
                "topk_idx: holds {} entries; num_tokens {num_tokens} × topk {k} = {}",
                topk_idx.len(),
                num_tokens.saturating_mul(k)
            ),
        ));
    }
    if let Some((i, &v)) = topk_idx
        .iter()
        .enumerate()
        .find(|&(_, &v)| v < -1 || v >= e as i64)
    {
        return Err(Error::invalid(
            call,
            format!(
                "topk_idx[{}][{}] = {v} is out of range: experts are 0..{e} (-1 = none)",
                i / k,
                i % k
            ),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn msg<T: std::fmt::Debug>(r: Result<T>) -> String {
        r.expect_err("an error").to_string()
    }

    #[test]
    fn fp8_sizes_carry_scales_and_bf16_combine_rows() {
        let (n, e, h, k, m) = (4, 32, 7168, 8, 64);
        let bf = EpConfig::new(e, h, k, m, EpDtype::Bf16).sizes(n).unwrap();
        let f8 = EpConfig::new(e, h, k, m, EpDtype::Fp8E4m3)
            .sizes(n)
            .unwrap();
        assert_eq!(
            (f8.row_bytes, f8.comb_row_bytes, f8.scale_words),
            (h, 2 * h, h / 128)
        );
        assert_eq!(
            (bf.row_bytes, bf.comb_row_bytes, bf.scale_words),
            (2 * h, 2 * h, 0)
        );
        assert_eq!(f8.max_rows, bf.max_rows);
        // Staging: H bytes + H/128 scales per row instead of 2H; the combine receive is bf16.
        let stage = |s: &EpSizes| (n * m * (s.row_bytes + 4 * s.scale_words)) as i64;
        assert_eq!(
            f8.symmetric_bytes as i64 - bf.symmetric_bytes as i64,
            stage(&f8) - stage(&bf)
        );
        assert_eq!(f8.off.comb_x - f8.off.stage_x, n * m * h);
        assert_eq!(f8.off.stage_scales - f8.off.comb_x, n * m * 2 * h);
        // The dispatch output: H bytes + scales per row instead of 2H.
        assert_eq!(
            bf.local_bytes - f8.local_bytes,
            f8.max_rows * (2 * h - h - 4 * (h / 128))
        );
        // Low-latency: [E][M] fp8 rows and their scales, [M][k] bf16 combine rows.
        let ll = |d| {
            EpConfig {
                low_latency: true,
                ..EpConfig::new(e, h, k, m, d)
            }
            .sizes(n)
            .unwrap()
        };
        let (lf, lb) = (ll(EpDtype::Fp8E4m3), ll(EpDtype::Bf16));
        assert_eq!(lf.off.ll_meta - lf.off.ll_x, e * m * h);
        assert_eq!(lf.off.ll_scales - lf.off.ll_comb, m * k * 2 * h);
        assert_eq!(lf.off.ll_wgt - lf.off.ll_scales, e * m * 4 * (h / 128));
        assert_eq!(lb.off.ll_wgt, lb.off.ll_scales); // no scales: an empty area
                                                     // The per-PE combine: a u64 weight per (source, token, slot), symmetric; locally the
                                                     // row of each (source, token, slot), an int4 per (source, token) and a count.
        for s in [&lf, &lb] {
            assert_eq!(s.symmetric_bytes - s.off.ll_wgt, n * m * k * 8);
            assert_eq!(s.off.ll_items - s.off.ll_pair, n * m * k * 4);
            assert_eq!(s.off.ll_nitems - s.off.ll_items, n * m * 16);
            assert_eq!(s.off.scratch_bytes - s.off.ll_nitems, ALIGN);
            assert!(s.off.ll_pair >= s.off.ll_slot_ok + m * k * 4);
        }
        // Without low_latency the areas are empty.
        assert_eq!(bf.symmetric_bytes, bf.off.ll_wgt);
        assert_eq!(bf.off.scratch_bytes, bf.off.ll_nitems);
    }

    #[test]
    fn fp8_hidden_must_be_a_multiple_of_128() {
        for h in [64, 144, 200] {
            let m = msg(EpConfig::new(8, h, 2, 16, EpDtype::Fp8E4m3).sizes(2));
            assert!(
                m.contains("ep_new: hidden") && m.contains("multiple of 128"),
                "{m}"
            );
        }
        for h in [128, 384, 7168] {
            EpConfig::new(8, h, 2, 16, EpDtype::Fp8E4m3)
                .sizes(2)
                .unwrap();
        }
        // bf16 takes any 16-byte row.
        EpConfig::new(8, 64, 2, 16, EpDtype::Bf16).sizes(2).unwrap();
    }

    #[test]
    fn dtype_facts() {
        assert_eq!(EpDtype::Fp8E4m3.size(), 1);
        assert_eq!(EpDtype::Fp8E4m3.combine_dtype(), EpDtype::Bf16);
        assert_eq!(EpDtype::F32.combine_dtype(), EpDtype::F32);
        assert_eq!(EpDtype::Bf16.combine_dtype(), EpDtype::Bf16);
        assert_eq!(EpDtype::Fp8E4m3.scale_words(7168), 56);
        assert_eq!(EpDtype::Bf16.scale_words(7168), 0);
        assert_eq!(<u8 as EpElem>::DTYPE, EpDtype::Fp8E4m3);
    }

    #[test]
    fn scales_are_required_for_fp8_and_refused_otherwise() {
        let m = msg(scales_arg("ep_dispatch", EpDtype::Fp8E4m3, None, 4));
        assert!(
            m.contains("ep_dispatch: x_scales") && m.contains("dispatch_fp8"),
            "{m}"
        );
        let m = msg(scales_arg("ep_dispatch", EpDtype::Fp8E4m3, Some(0), 4));
        assert!(m.contains("x_scales: address 0x0"), "{m}");
        let m = msg(scales_arg(
            "ep_ll_dispatch",
            EpDtype::Fp8E4m3,
            Some(0x1002),
            4,
        ));
        assert!(
            m.contains("ep_ll_dispatch: x_scales") && m.contains("4-byte"),
            "{m}"
        );
        assert_eq!(
            scales_arg("ep_dispatch", EpDtype::Fp8E4m3, Some(0x1004), 4).unwrap(),
            0x1004
        );
        // No tokens: a null scales pointer is fine (nothing is read).
        assert_eq!(
            scales_arg("ep_dispatch", EpDtype::Fp8E4m3, Some(0), 0).unwrap(),
            0
        );
        let m = msg(scales_arg("ep_dispatch", EpDtype::Bf16, Some(0x1000), 4));
        assert!(m.contains("x_scales: the handle was made for Bf16"), "{m}");
        assert_eq!(scales_arg("ep_dispatch", EpDtype::F32, None, 4).unwrap(), 0);
        // The typed *_fp8 calls check the handle first (before the elements of x).
        let m = msg(fp8_only::<()>("ep_ll_dispatch", EpDtype::F32));
        assert!(
            m.contains("ep_ll_dispatch: x_scales: the handle was made for F32"),
            "{m}"
        );
        fp8_only::<()>("ep_dispatch", EpDtype::Fp8E4m3).unwrap();
    }

    #[test]
    fn element_types_and_in_place_combine_of_fp8() {
        let m = msg(elem_check::<u16>(
            "ep_dispatch",
            "x",
            EpDtype::Fp8E4m3,
            EpDtype::Fp8E4m3,
        ));
        assert!(
            m.contains("x: elements are Bf16 but the handle was made for Fp8E4m3"),
            "{m}"
        );
        let want = EpDtype::Fp8E4m3.combine_dtype();
        elem_check::<u16>("ep_combine", "y", EpDtype::Fp8E4m3, want).unwrap();
        let m = msg(elem_check::<u8>("ep_combine", "y", EpDtype::Fp8E4m3, want));
        assert!(
            m.contains("y: elements are Fp8E4m3 but the combine of a Fp8E4m3 handle takes Bf16"),
            "{m}"
        );
        let m = msg(elem_check::<u8>(
            "ep_dispatch",
            "x",
            EpDtype::Bf16,
            EpDtype::Bf16,
        ));
        assert!(m.contains("made for Bf16"), "{m}");
        let m = msg(not_in_place("ep_combine", EpDtype::Fp8E4m3, 0x2000, 0x2000));
        assert!(m.contains("ep_combine: y:") && m.contains("bf16"), "{m}");
        not_in_place("ep_combine", EpDtype::Fp8E4m3, 0x3000, 0x2000).unwrap();
        not_in_place("ep_combine", EpDtype::Bf16, 0x2000, 0x2000).unwrap();
    }

    /// The fields between `open` and the next `close` line of `src`, as (name, 64-bit type
    /// signedness) pairs: C `int64_t n;` / `uint64_t n;` or Rust `n: i64,` / `n: u64,`.
    fn struct_fields(src: &str, open: &str, close: &str) -> Vec<(String, bool)> {
        let start = src.find(open).unwrap_or_else(|| panic!("{open} not found"));
        let body = &src[start + open.len()..];
        let body = &body[..body.find(close).expect("end of the struct")];
        body.lines()
            .map(|l| l.split("//").next().unwrap_or("").trim())
            .filter(|l| !l.is_empty())
            .map(|l| {
                let l = l.trim_end_matches([';', ',']);
                if let Some((name, ty)) = l.split_once(':') {
                    (name.trim().to_string(), ty.trim() == "i64")
                } else {
                    let (ty, name) = l.split_once(' ').expect("type and name");
                    (name.trim().to_string(), ty == "int64_t")
                }
            })
            .collect()
    }

    /// `EpParams` mirrors `rshmem_ep_params` field by field: the kernels take it by value, so a
    /// field missing, moved or of the other signedness on one side would hand every kernel the
    /// wrong values with no error. Both definitions are read from their sources.
    #[test]
    fn low_latency_sends_once_per_pe_only_with_a_gpu_per_pe() {
        assert!(ll_per_pe_auto(4, 1));
        assert!(ll_per_pe_auto(2, 1));
        assert!(!ll_per_pe_auto(1, 1));
        assert!(!ll_per_pe_auto(4, 4));
        assert!(!ll_per_pe_auto(4, 2));
    }

    #[test]
    fn params_mirror_the_kernels_struct() {
        let c = struct_fields(
            include_str!("../../device-include/rshmem/ep.cuh"),
            "struct rshmem_ep_params {",
            "\n};",
        );
        let rust = struct_fields(include_str!("mod.rs"), "struct EpParams {", "\n}");
        assert_eq!(c.len(), std::mem::size_of::<EpParams>() / 8, "{c:?}");
        assert_eq!(c, rust);
    }
}
