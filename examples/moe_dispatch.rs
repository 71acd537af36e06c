//! moe_dispatch: one MoE layer step with rshmem's expert-parallel dispatch and combine, checked
//! against the host reference (`rshmem::ep::reference`) for every row and every element.
//!
//! Per case and round: every PE routes its tokens (uneven on purpose: one hot expert gets most
//! tokens, every fourth expert gets none, some tokens name an expert twice or have `-1` slots,
//! the token count differs between PEs), dispatches, checks that each local expert received
//! exactly the expected (source PE, token) rows with the source's data bit for bit, runs a
//! stand-in expert (a per-expert scale, on the host), combines and checks every output element
//! (fp32: exactly; bf16: within two bf16 ulps of the reference's magnitude, which computes the
//! same roundings and is normally exact). Cases: fp32 and bf16, k = 8, 4 and 1, T = 0 on every
//! PE and on some, the benchmark's shape (E = 256, H = 7168, k = 8); then bad arguments (each
//! must give an error naming the argument, never a hang): short buffers, too many tokens, wrong
//! element type, combine before dispatch, bad configurations, an expert index out of range
//! (reported by `Ep::check`, the exchange still completes) and a too-small row capacity.
//!
//! Needs the GPU backend with every PE on one host. On the CPU backend only the host-side
//! argument checks run, and it says so. Prints `moe_dispatch: ALL CHECKS PASSED on N PEs` at
//! the end when everything passed.
//!
//! `--graph` runs only the CUDA-graph check instead: dispatch + combine captured once and
//! replayed with new data (see `graph_replay`); `--ll` only the low-latency mode's cases
//! (see `low_latency`); `--fp8` only the fp8 cases, normal and low-latency (tokens quantized
//! per 128-element block with scale = amax / 448, dispatched with their scales and compared
//! byte for byte; the stand-in expert dequantizes and writes bf16; the bf16 combine checked
//! against the reference and against the unquantized sum within the fp8 error: see
//! `check_out`). Every dtype runs the same round bodies (`round`, `ll_round`); what differs
//! between f32, bf16 and fp8 (encoding, scales, the dispatch call, the combine's element type)
//! is the trait `El`.
//!
//! Run: `target/release/rshmemrun -n 4 target/release/moe_dispatch [--quick | --graph | --ll |
//! --fp8]`

// Only common::main is used here.
#[allow(dead_code)]
#[path = "common.rs"]
mod common;

use std::process::ExitCode;
use std::sync::Arc;

use rshmem::cudarc::driver::{CudaSlice, CudaStream, DeviceRepr, ValidAsZeroBits};
use rshmem::ep::reference::{self, Routing};
use rshmem::ep::{Ep, EpConfig, EpDtype, EpElem};
use rshmem::World;

/// Element types of the dispatched tokens: `f32`, `u16` (bf16 bits) and `u8` (fp8 e4m3 bits with
/// one f32 scale per 128 elements). What differs between them lives here; the cases' bodies are
/// shared.
trait El: EpElem + DeviceRepr + ValidAsZeroBits + Default + PartialEq + std::fmt::Debug {
    /// The element type of the combine (`y`, `out`): the type itself, bf16 for fp8.
    type Comb: El;
    fn from_f32(v: f32) -> Self;
    fn to_f32(self) -> f32;
    /// Rows of `h` values as the handle takes them: the elements and their per-block scales
    /// (empty but for fp8).
    fn encode(x: &[f32], _h: usize) -> (Vec<Self>, Vec<f32>) {
        (x.iter().map(|&v| Self::from_f32(v)).collect(), Vec::new())
    }
    /// The values of encoded rows of `h` elements.
    fn decode(v: &[Self], _scales: &[f32], _h: usize) -> Vec<f32> {
        v.iter().map(|&e| e.to_f32()).collect()
    }
    /// The handle's dispatch for this element type of a round's inputs (the scales are used by
    /// fp8 only), the low-latency one with `ll` (which takes no weights).
    fn dispatch(
        ep: &Ep<'_>,
        r: &RoundIn<'_, Self>,
        ll: bool,
        stream: &Arc<CudaStream>,
    ) -> rshmem::Result<()> {
        let t_n = r.mine().num_tokens;
        if ll {
            ep.ll_dispatch(&r.x, &r.idx, t_n, stream)
        } else {
            ep.dispatch(&r.x, &r.idx, &r.w, t_n, stream)
        }
    }
}
impl El for f32 {
    type Comb = f32;
    fn from_f32(v: f32) -> Self {
        v
    }
    fn to_f32(self) -> f32 {
        self
    }
}
impl El for u16 {
    type Comb = u16;
    fn from_f32(v: f32) -> Self {
        reference::f32_to_bf16(v)
    }
    fn to_f32(self) -> f32 {
        reference::bf16_to_f32(self)
    }
}
/// fp8: tokens quantized per 128-element block (scale = block amax / 448,
/// `reference::quantize_fp8`), dispatched with their scales; the combine runs in bf16.
impl El for u8 {
    type Comb = u16;
    fn from_f32(v: f32) -> Self {
        reference::f32_to_fp8_e4m3(v)
    }
    fn to_f32(self) -> f32 {
        reference::fp8_e4m3_to_f32(self)
    }
    fn encode(x: &[f32], h: usize) -> (Vec<Self>, Vec<f32>) {
        reference::quantize_fp8(x, h)
    }
    fn decode(v: &[Self], scales: &[f32], h: usize) -> Vec<f32> {
        reference::dequantize_fp8(v, scales, h)
    }
    fn dispatch(
        ep: &Ep<'_>,
        r: &RoundIn<'_, Self>,
        ll: bool,
        stream: &Arc<CudaStream>,
    ) -> rshmem::Result<()> {
        let t_n = r.mine().num_tokens;
        if ll {
            ep.ll_dispatch_fp8(&r.x, &r.xs, &r.idx, t_n, stream)
        } else {
            ep.dispatch_fp8(&r.x, &r.xs, &r.idx, &r.w, t_n, stream)
        }
    }
}

/// The values of `b` as elements of type `E` (bytes as the device holds them).
fn elems<E: El>(b: &[u8]) -> Vec<E> {
    b.chunks_exact(std::mem::size_of::<E>())
        .map(|b| {
            let mut v = E::default();
            // SAFETY: E is f32, u16 or u8, plain bytes of exactly this size.
            unsafe {
                std::ptr::copy_nonoverlapping(b.as_ptr(), (&mut v as *mut E).cast::<u8>(), b.len())
            };
            v
        })
        .collect()
}

fn mix(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    x = (x ^ (x >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    x ^ (x >> 31)
}

fn h4(a: u64, b: u64, c: u64, d: u64) -> u64 {
    mix(mix(mix(mix(a) ^ b) ^ c) ^ d)
}

/// Element `h` of token `t` of PE `pe` in round `seed`: m/8 with |m| ≤ 127 (exact in bf16).
fn x_val(seed: u64, pe: usize, t: usize, h: usize) -> f32 {
    ((h4(seed, pe as u64, t as u64, h as u64 | 1 << 40) % 255) as f32 - 127.0) / 8.0
}

/// The stand-in expert: a per-expert scale.
fn scale(e: usize) -> f32 {
    [0.5, 1.0, 1.5, 2.0, -1.0][e % 5]
}

#[derive(Clone, Debug)]
struct Case {
    name: &'static str,
    dtype: EpDtype,
    experts: usize,
    hidden: usize,
    k: usize,
    max_tokens: usize,
    /// Tokens of PE `pe`: `base + 13·pe` (capped), or 0 on odd PEs with `zero_odd`.
    base: usize,
    zero_odd: bool,
    max_recv_rows: Option<usize>,
}

impl Case {
    /// A case with the worst-case row capacity.
    #[allow(clippy::too_many_arguments)]
    fn new(
        name: &'static str,
        dtype: EpDtype,
        experts: usize,
        hidden: usize,
        k: usize,
        max_tokens: usize,
        base: usize,
        zero_odd: bool,
    ) -> Case {
        Case {
            name,
            dtype,
            experts,
            hidden,
            k,
            max_tokens,
            base,
            zero_odd,
            max_recv_rows: None,
        }
    }

    fn tokens(&self, pe: usize) -> usize {
        if (self.zero_odd && pe % 2 == 1) || self.base == 0 {
            0
        } else {
            (self.base + 13 * pe).min(self.max_tokens)
        }
    }

    /// Uneven routing of PE `pe`: slot 0 is the hot expert for 3 tokens in 4, experts ≡ 3
    /// (mod 4) are never chosen, token t ≡ 4 (mod 13) names its slot-0 expert twice, t ≡ 5
    /// (mod 11) has a -1 last slot, t ≡ 7 (mod 37) has no expert at all.
    fn routing(&self, seed: u64, pe: usize) -> Routing {
        let (e_all, k) = (self.experts, self.k);
        let t_n = self.tokens(pe);
        let hot = (e_all / 2 + 1) % e_all;
        let allowed: Vec<usize> = (0..e_all).filter(|e| e % 4 != 3 || e_all < 4).collect();
        let mut idx = Vec::with_capacity(t_n * k);
        let mut w = Vec::with_capacity(t_n * k);
        for t in 0..t_n {
            let mut chosen: Vec<i64> = Vec::with_capacity(k);
            for j in 0..k {
                let r = h4(seed ^ 0x5157, pe as u64, t as u64, j as u64);
                let e = if j == 0 && !r.is_multiple_of(4) {
                    hot as i64
                } else {
                    let mut pick = (r >> 8) as usize % allowed.len();
                    while chosen.contains(&(allowed[pick] as i64)) {
                        pick = (pick + 1) % allowed.len();
                    }
                    allowed[pick] as i64
                };
                chosen.push(e);
            }
            if k >= 2 && t % 13 == 4 {
                chosen[1] = chosen[0];
            }
            if k >= 2 && t % 11 == 5 {
                chosen[k - 1] = -1;
            }
            if t % 37 == 7 {
                chosen.iter_mut().for_each(|c| *c = -1);
            }
            for (j, &c) in chosen.iter().enumerate() {
                idx.push(c);
                let r = h4(seed ^ 0x3779, pe as u64, t as u64, j as u64);
                w.push([0.25, 0.5, 0.75, 1.0, 1.5][(r % 5) as usize]);
            }
        }
        Routing {
            num_tokens: t_n,
            topk_idx: idx,
            topk_weights: w,
        }
    }

    fn config(&self) -> EpConfig {
        EpConfig {
            max_recv_rows: self.max_recv_rows,
            ..EpConfig::new(
                self.experts,
                self.hidden,
                self.k,
                self.max_tokens,
                self.dtype,
            )
        }
    }
}

/// PE `pe`'s tokens of round `seed` as the handle takes them: elements and their per-block
/// scales (fp8; empty for the others).
fn tokens<E: El>(seed: u64, pe: usize, t_n: usize, h: usize) -> (Vec<E>, Vec<f32>) {
    let x: Vec<f32> = (0..t_n * h)
        .map(|i| x_val(seed, pe, i / h, i % h))
        .collect();
    E::encode(&x, h)
}

fn upload<T: DeviceRepr + ValidAsZeroBits + Copy>(
    s: &Arc<CudaStream>,
    v: &[T],
) -> rshmem::Result<CudaSlice<T>> {
    if v.is_empty() {
        Ok(s.alloc_zeros::<T>(1)?)
    } else {
        Ok(s.clone_htod(v)?)
    }
}

fn download<T: DeviceRepr + ValidAsZeroBits + Copy + Default>(
    s: &Arc<CudaStream>,
    d: &CudaSlice<T>,
    n: usize,
) -> rshmem::Result<Vec<T>> {
    let mut v = vec![T::default(); n];
    if n > 0 {
        s.memcpy_dtoh(&d.slice(0..n), &mut v)?;
    }
    s.synchronize()?;
    Ok(v)
}

struct Checker {
    me: usize,
    failures: usize,
}

impl Checker {
    fn check(&mut self, ok: bool, what: impl FnOnce() -> String) {
        if !ok {
            self.failures += 1;
            if self.failures <= 20 {
                println!("PE {}: FAIL: {}", self.me, what());
            }
        }
    }
}

/// The dispatch output's layout against the reference: every local expert's row range
/// (contiguous, in expert order), sources in PE order, the same (source PE, token) multiset as
/// the reference; then the data of every row: `row_bad(r, s, t)` is the number of values of row
/// `r` that differ from token `t` of PE `s`.
#[allow(clippy::too_many_arguments)]
fn check_layout(
    c: &mut Checker,
    case: &Case,
    routing: &[Routing],
    me: usize,
    offs: &[i64],
    src: &[i32],
    rows: usize,
    row_bad: &dyn Fn(usize, usize, usize) -> usize,
) {
    let n = routing.len();
    let expect = reference::expected_rows(routing, case.experts, case.k, me);
    let mut at = 0usize;
    for (l, exp) in expect.iter().enumerate() {
        let (lo, hi) = (offs[l] as usize, offs[l + 1] as usize);
        c.check(lo == at && hi - lo == exp.len(), || {
            format!(
                "{}: local expert {l}: rows {lo}..{hi}, expected {at}..{}",
                case.name,
                at + exp.len()
            )
        });
        at += exp.len();
        if hi < lo || hi > rows || hi - lo != exp.len() {
            continue;
        }
        let got: Vec<(usize, usize)> = (lo..hi)
            .map(|r| (src[2 * r] as usize, src[2 * r + 1] as usize))
            .collect();
        // Sources in PE order; the same multiset of tokens per source.
        c.check(got.windows(2).all(|p| p[0].0 <= p[1].0), || {
            format!("{}: local expert {l}: sources not in PE order", case.name)
        });
        let (mut gs, mut es) = (got.clone(), exp.clone());
        gs.sort_unstable();
        es.sort_unstable();
        c.check(gs == es, || {
            format!(
                "{}: local expert {l}: received {} rows, not the expected {} (source, token) pairs",
                case.name,
                got.len(),
                exp.len()
            )
        });
        for (i, &(s, t)) in got.iter().enumerate() {
            if s >= n || t >= routing[s].num_tokens {
                c.check(false, || {
                    format!("{}: row {} names PE {s} token {t}", case.name, lo + i)
                });
                continue;
            }
            let r = lo + i;
            let bad = row_bad(r, s, t);
            c.check(bad == 0, || {
                format!(
                    "{}: row {r} (PE {s} token {t}): {bad} values differ from the source's",
                    case.name
                )
            });
        }
    }
}

/// Every PE's tokens of one round, encoded as the handle takes them (elements, and per-block
/// scales for fp8): each PE uploads its own, and the checks compare received rows with their
/// source's.
struct Tokens<E> {
    h: usize,
    x: Vec<Vec<E>>,
    scales: Vec<Vec<f32>>,
}

impl<E: El> Tokens<E> {
    fn new(seed: u64, routing: &[Routing], h: usize) -> Self {
        let (x, scales) = (0..routing.len())
            .map(|pe| tokens::<E>(seed, pe, routing[pe].num_tokens, h))
            .unzip();
        Tokens { h, x, scales }
    }

    /// Scales per row (`H/128` for fp8, 0 otherwise).
    fn sw(&self) -> usize {
        E::DTYPE.scale_words(self.h)
    }

    /// Token `t` of PE `pe`: its elements and its scales.
    fn row(&self, pe: usize, t: usize) -> (&[E], &[f32]) {
        let (h, sw) = (self.h, self.sw());
        (
            &self.x[pe][t * h..(t + 1) * h],
            &self.scales[pe][t * sw..(t + 1) * sw],
        )
    }

    /// Elements and scales of a received row that differ from token `t` of PE `s` (bit for bit).
    fn row_bad(&self, s: usize, t: usize, got: &[E], got_scales: &[f32]) -> usize {
        let (x, xs) = self.row(s, t);
        let elems = (0..self.h).filter(|&j| got[j] != x[j]).count();
        let scales = (0..xs.len())
            .filter(|&b| got_scales[b].to_bits() != xs[b].to_bits())
            .count();
        elems + scales
    }

    /// What the stand-in expert `e` returns for this PE's token `t` (see [`expert`]), as f32.
    fn expert_out(&self, pe: usize, t: usize, e: Option<usize>) -> Vec<f32> {
        let (x, xs) = self.row(pe, t);
        expert::<E>(x, xs, self.h, e)
            .into_iter()
            .map(El::to_f32)
            .collect()
    }
}

/// The stand-in expert `e` on one row (elements and scales as received): the decoded values
/// times `scale(e)`, in the combine's element type; `None`: the identity.
fn expert<E: El>(x: &[E], scales: &[f32], h: usize, e: Option<usize>) -> Vec<E::Comb> {
    let f = e.map_or(1.0, scale);
    E::decode(x, scales, h)
        .into_iter()
        .map(|v| E::Comb::from_f32(v * f))
        .collect()
}

/// The combine output `got` of one round checked element by element against the host reference
/// `want` (the same encoded tokens): bit-identical, or within the combine dtype's tolerance
/// (fp32: none; bf16 and fp8's bf16 combine: 2⁻⁶ of the terms' magnitude `Σ_j |w_j·y_j|`; the
/// reference computes the same roundings, so normally exactly). fp8 rounds (`scales`, this PE's
/// block scales) are also checked against the exact sum of the unquantized tokens, within the
/// fp8 quantization error `Σ_j |w_j·scale_j| · (|x|/16 + s/1024)` (e4m3 keeps 3 mantissa bits,
/// so a value moves by at most 2⁻⁴ of itself, or by half the subnormal step 2⁻⁹·s near zero, s
/// the block's scale) plus the bf16 tolerance. Returns (elements not bit-identical, worst error
/// against the reference, worst error against the unquantized sum).
#[allow(clippy::too_many_arguments)]
fn check_out<C: El>(
    c: &mut Checker,
    case: &Case,
    seed: u64,
    mine: &Routing,
    me: usize,
    got: &[C],
    want: &[f32],
    yf: &dyn Fn(usize, usize) -> Vec<f32>,
    scales: Option<&[f32]>,
) -> (usize, f32, f32) {
    let (e_all, h, k) = (case.experts, case.hidden, case.k);
    let sw = h / rshmem::ep::FP8_BLOCK;
    let (mut inexact, mut worst, mut worst_q) = (0usize, 0f32, 0f32);
    for t in 0..mine.num_tokens {
        let slots = mine.slots(t, k, e_all);
        let ys: Vec<Vec<f32>> = slots.iter().map(|&(_, e, _)| yf(e, t)).collect();
        let a: f32 = slots.iter().map(|s| (s.2 * scale(s.1)).abs()).sum();
        for j in 0..h {
            let (g, r) = (got[t * h + j].to_f32(), want[t * h + j]);
            let mag: f32 = slots.iter().zip(&ys).map(|(s, y)| (s.2 * y[j]).abs()).sum();
            if g.to_bits() != r.to_bits() {
                inexact += 1;
                let tol = match case.dtype {
                    EpDtype::F32 => 0.0,
                    _ => mag / 64.0,
                };
                let err = (g - r).abs();
                worst = worst.max(err);
                c.check(err <= tol, || {
                    format!(
                        "{}: out[{t}][{j}] = {g}, reference {r} (tolerance {tol})",
                        case.name
                    )
                });
            }
            let Some(scales) = scales else { continue };
            let x = x_val(seed, me, t, j);
            let exact: f64 = slots
                .iter()
                .map(|s| s.2 as f64 * scale(s.1) as f64 * x as f64)
                .sum();
            let sb = scales[t * sw + j / rshmem::ep::FP8_BLOCK];
            let tol_q = a * (x.abs() / 16.0 + sb / 1024.0) + mag / 64.0;
            let err = (g as f64 - exact).abs() as f32;
            worst_q = worst_q.max(err);
            c.check(err <= tol_q, || {
                format!(
                    "{}: out[{t}][{j}] = {g}, unquantized {exact}: error {err} beyond the fp8 tolerance {tol_q}",
                    case.name
                )
            });
        }
    }
    (inexact, worst, worst_q)
}

/// The end of a round's line: the combine's outcome over `elems` output elements (what
/// [`check_out`] returns; the error against the unquantized sum for fp8 only) and the round's
/// failures.
fn combine_note<E: El>(
    (inexact, worst, worst_q): (usize, f32, f32),
    elems: usize,
    failures: usize,
) -> String {
    let fp8 = if E::DTYPE == EpDtype::Fp8E4m3 {
        format!(", worst error against the unquantized sum {worst_q}")
    } else {
        String::new()
    };
    format!(
        "combine: {inexact} of {elems} elements not bit-identical (worst {worst}){fp8}, {failures} failures"
    )
}

/// What a round of `case` starts from: every PE's routing and tokens of round `seed`, this PE's
/// uploaded.
struct RoundIn<'a, E: El> {
    case: &'a Case,
    seed: u64,
    me: usize,
    routing: Vec<Routing>,
    toks: Tokens<E>,
    x: CudaSlice<E>,
    xs: CudaSlice<f32>,
    idx: CudaSlice<i64>,
    w: CudaSlice<f32>,
}

impl<'a, E: El> RoundIn<'a, E> {
    fn new(
        world: &World,
        case: &'a Case,
        seed: u64,
        stream: &Arc<CudaStream>,
    ) -> rshmem::Result<Self> {
        let (me, n) = (world.my_pe(), world.n_pes());
        let routing: Vec<Routing> = (0..n).map(|pe| case.routing(seed, pe)).collect();
        let toks = Tokens::<E>::new(seed, &routing, case.hidden);
        let (idx, w) = (&routing[me].topk_idx, &routing[me].topk_weights);
        Ok(RoundIn {
            x: upload(stream, &toks.x[me])?,
            xs: upload(stream, &toks.scales[me])?,
            idx: upload(stream, idx)?,
            w: upload(stream, w)?,
            case,
            seed,
            me,
            routing,
            toks,
        })
    }

    /// This PE's routing.
    fn mine(&self) -> &Routing {
        &self.routing[self.me]
    }

    /// Dispatches this PE's tokens ([`El::dispatch`]; the low-latency mode with `ll`) and
    /// returns the round's checker, which has recorded what [`Ep::check`] reported.
    fn dispatch(&self, ep: &Ep<'_>, ll: bool, stream: &Arc<CudaStream>) -> rshmem::Result<Checker> {
        E::dispatch(ep, self, ll, stream)?;
        let mut c = Checker {
            me: self.me,
            failures: 0,
        };
        if let Err(e) = ep.check(stream) {
            let mode = if ll { "low-latency " } else { "" };
            c.check(false, || {
                format!("{}: {mode}dispatch reported {e}", self.case.name)
            });
        }
        Ok(c)
    }

    /// The combine's output buffer: this PE's tokens' rows, NaN until written.
    fn out(&self, stream: &Arc<CudaStream>) -> rshmem::Result<CudaSlice<E::Comb>> {
        let rows =
            vec![E::Comb::from_f32(f32::NAN); (self.mine().num_tokens * self.case.hidden).max(1)];
        upload(stream, &rows)
    }

    /// The combine's output `out` checked element by element ([`check_out`]) against `want`,
    /// the reference computed from the expert outputs `yf` (fp8: also against the unquantized
    /// sum). Returns what `check_out` returns.
    fn check_combine(
        &self,
        c: &mut Checker,
        out: &CudaSlice<E::Comb>,
        want: &[f32],
        yf: &dyn Fn(usize, usize) -> Vec<f32>,
        stream: &Arc<CudaStream>,
    ) -> rshmem::Result<(usize, f32, f32)> {
        let (mine, me) = (self.mine(), self.me);
        let got = download(stream, out, mine.num_tokens * self.case.hidden)?;
        let quant = (self.toks.sw() > 0).then_some(&self.toks.scales[me][..]);
        Ok(check_out(
            c, self.case, self.seed, mine, me, &got, want, yf, quant,
        ))
    }
}

/// One round of the normal mode: dispatch, the dispatch output against the reference (layout,
/// sources, every row's elements and scales bit for bit: [`check_layout`]), the stand-in expert
/// on the host (a per-expert scale of the received rows, written in the combine's dtype),
/// combine, every output element ([`check_out`]). Returns the number of failures.
fn round<E: El>(
    world: &World,
    ep: &Ep<'_>,
    case: &Case,
    seed: u64,
    stream: &Arc<CudaStream>,
) -> rshmem::Result<usize> {
    let (me, n) = (world.my_pe(), world.n_pes());
    let (e_all, h, k) = (case.experts, case.hidden, case.k);
    let l_n = e_all / n;
    let r = RoundIn::<E>::new(world, case, seed, stream)?;
    let (routing, toks, mine) = (&r.routing, &r.toks, r.mine());
    let (t_n, sw) = (mine.num_tokens, toks.sw());
    let mut c = r.dispatch(ep, false, stream)?;
    // Dispatch output against the reference.
    let offs = download(stream, ep.expert_offsets(), l_n + 1)?;
    let rows = offs[l_n] as usize;
    let src = download(stream, ep.expert_src(), rows * 2)?;
    let xe: Vec<E> = elems(&download(
        stream,
        ep.expert_x(),
        rows * h * std::mem::size_of::<E>(),
    )?);
    let xsc = if sw > 0 {
        download(stream, ep.expert_scales(), rows * sw)?
    } else {
        Vec::new()
    };
    let row_of = |r: usize| (&xe[r * h..(r + 1) * h], &xsc[r * sw..(r + 1) * sw]);
    let row_bad = |r: usize, s: usize, t: usize| {
        let (v, vs) = row_of(r);
        toks.row_bad(s, t, v, vs)
    };
    check_layout(&mut c, case, routing, me, &offs, &src, rows, &row_bad);
    // Stand-in expert on the host: y[r] = x[r] · scale(expert of r).
    let mut y = vec![E::Comb::default(); ep.sizes().max_rows.max(1) * h];
    for l in 0..l_n {
        for r in offs[l] as usize..offs[l + 1] as usize {
            let (v, vs) = row_of(r);
            y[r * h..(r + 1) * h].copy_from_slice(&expert::<E>(v, vs, h, Some(me * l_n + l)));
        }
    }
    let y = upload(stream, &y)?;
    let mut out = r.out(stream)?;
    ep.combine(&y, &mut out, stream)?;
    let yf = |e: usize, t: usize| toks.expert_out(me, t, Some(e));
    let want = reference::combine(routing, e_all, k, me, h, case.dtype, &yf);
    let outcome = r.check_combine(&mut c, &out, &want, &yf, stream)?;
    let sent = reference::tokens_sent(mine, e_all, k, n);
    println!(
        "PE {me}: {} seed {seed}: T {t_n}, sent {sent:?} tokens per PE, received {rows} expert rows ({sw} scales each), {}",
        case.name,
        combine_note::<E>(outcome, t_n * h, c.failures)
    );
    Ok(c.failures)
}

/// One low-latency round: dispatch, every (expert, source) block checked (counts, the (token,
/// slot) set, every row's elements and scales), a stand-in expert (per-expert scale on the host,
/// or the identity in place with `in_place`), combine, every output element ([`check_out`]).
fn ll_round<E: El>(
    world: &World,
    ep: &Ep<'_>,
    case: &Case,
    seed: u64,
    in_place: bool,
    stream: &Arc<CudaStream>,
) -> rshmem::Result<usize> {
    let (me, n) = (world.my_pe(), world.n_pes());
    let (e_all, h, k, m) = (case.experts, case.hidden, case.k, case.max_tokens);
    let l_n = e_all / n;
    let r = RoundIn::<E>::new(world, case, seed, stream)?;
    let (routing, toks, mine) = (&r.routing, &r.toks, r.mine());
    let (t_n, sw) = (mine.num_tokens, toks.sw());
    let mut c = r.dispatch(ep, true, stream)?;
    let counts = download(stream, ep.ll_count(), l_n * n)?;
    let src = download(stream, ep.ll_src(), l_n * n * m * 2)?;
    let expect = reference::expected_ll_rows(routing, e_all, k, me);
    let mut y = if in_place {
        Vec::new()
    } else {
        vec![E::Comb::default(); l_n * n * m * h]
    };
    let mut rows_total = 0;
    for (b, exp) in expect.iter().enumerate() {
        let (l, s) = (b / n, b % n);
        let cnt = counts[b] as usize;
        c.check(cnt == exp.len(), || {
            format!(
                "{}: block (expert {l}, PE {s}): {cnt} rows, expected {}",
                case.name,
                exp.len()
            )
        });
        if cnt != exp.len() || cnt > m {
            continue;
        }
        rows_total += cnt;
        let mut got: Vec<(usize, usize)> = (0..cnt)
            .map(|i| {
                (
                    src[(b * m + i) * 2] as usize,
                    src[(b * m + i) * 2 + 1] as usize,
                )
            })
            .collect();
        let rows: Vec<E> = elems(&ep.ll_read_rows(l, s, cnt, stream)?);
        let scales = if sw > 0 {
            ep.ll_read_scales(l, s, cnt, stream)?
        } else {
            Vec::new()
        };
        for (i, &(t, _)) in got.iter().enumerate() {
            if t >= routing[s].num_tokens {
                c.check(false, || {
                    format!("{}: block ({l}, {s}) row {i} names token {t}", case.name)
                });
                continue;
            }
            let (v, vs) = (&rows[i * h..(i + 1) * h], &scales[i * sw..(i + 1) * sw]);
            let bad = toks.row_bad(s, t, v, vs);
            c.check(bad == 0, || {
                format!(
                    "{}: block ({l}, {s}) row {i} (token {t}): {bad} of {h} elements (and {sw} scales) differ",
                    case.name
                )
            });
            if !in_place {
                let at = (b * m + i) * h;
                y[at..at + h].copy_from_slice(&expert::<E>(v, vs, h, Some(me * l_n + l)));
            }
        }
        let mut want = exp.clone();
        got.sort_unstable();
        want.sort_unstable();
        c.check(got == want, || {
            format!("{}: block ({l}, {s}): wrong (token, slot) set", case.name)
        });
    }
    let mut out = r.out(stream)?;
    if in_place {
        ep.ll_combine::<E::Comb, CudaSlice<E::Comb>, _, _>(None, &r.w, &mut out, stream)?;
    } else {
        let yd = upload(stream, &y)?;
        ep.ll_combine(Some(&yd), &r.w, &mut out, stream)?;
    }
    let yf = |e: usize, t: usize| toks.expert_out(me, t, (!in_place).then_some(e));
    // Once per (token, PE) or per (token, expert) pair, as the handle exchanges (the same on
    // every PE).
    let want = if ep.ll_per_pe() {
        reference::combine_ll_per_pe(mine, e_all, k, n, h, case.dtype, &yf)
    } else {
        reference::combine_ll(mine, e_all, k, h, case.dtype, &yf)
    };
    let outcome = r.check_combine(&mut c, &out, &want, &yf, stream)?;
    println!(
        "PE {me}: {} (low latency{}{}) seed {seed}: T {t_n}, received {rows_total} rows ({sw} scales each), {}",
        case.name,
        if ep.ll_per_pe() { ", once per PE" } else { "" },
        if in_place { ", identity expert in place" } else { "" },
        combine_note::<E>(outcome, t_n * h, c.failures)
    );
    Ok(c.failures)
}

/// Two rounds of `case` on one handle of element type `E`, in the normal or the low-latency
/// mode. The large low-latency cases of fp32 and bf16 run the identity expert in place (the
/// combine reads the dispatch output); fp8's dispatch output holds fp8 rows, never in place.
fn rounds<E: El>(
    world: &World,
    ep: &Ep<'_>,
    case: &Case,
    ll: bool,
    stream: &Arc<CudaStream>,
) -> rshmem::Result<usize> {
    let in_place = ll && case.hidden > 1024 && E::DTYPE != EpDtype::Fp8E4m3;
    let mut fails = 0;
    for seed in [1u64, 2] {
        fails += if ll {
            ll_round::<E>(world, ep, case, seed, in_place, stream)?
        } else {
            round::<E>(world, ep, case, seed, stream)?
        };
    }
    Ok(fails)
}

/// `case` on a fresh handle (with the low-latency mode's buffers when `ll`): two rounds.
/// Returns the number of failures.
fn run_case(
    world: &World,
    case: &Case,
    ll: bool,
    stream: &Arc<CudaStream>,
) -> rshmem::Result<usize> {
    let ep = Ep::new(
        world,
        EpConfig {
            low_latency: ll,
            ..case.config()
        },
    )?;
    let fails = match case.dtype {
        EpDtype::F32 => rounds::<f32>(world, &ep, case, ll, stream)?,
        EpDtype::Bf16 => rounds::<u16>(world, &ep, case, ll, stream)?,
        EpDtype::Fp8E4m3 => rounds::<u8>(world, &ep, case, ll, stream)?,
    };
    world.barrier_all()?;
    ep.free()?;
    Ok(fails)
}

/// Every case of `cases` ([`run_case`]), a verdict line each; the number of failures.
fn run_cases(
    world: &World,
    cases: &[Case],
    ll: bool,
    stream: &Arc<CudaStream>,
) -> rshmem::Result<usize> {
    let me = world.my_pe();
    let mut fails = 0;
    for case in cases {
        let f = run_case(world, case, ll, stream)?;
        println!(
            "PE {me}: case {}: {}",
            case.name,
            if f == 0 { "ok" } else { "FAILED" }
        );
        fails += f;
    }
    Ok(fails)
}

/// `r` must be an error whose message contains every string of `needles`.
fn expect_err<T>(c: &mut Checker, what: &str, r: rshmem::Result<T>, needles: &[&str]) {
    match r {
        Ok(_) => c.check(false, || format!("{what}: no error")),
        Err(e) => {
            let m = e.to_string();
            let ok = needles.iter().all(|s| m.contains(s));
            c.check(ok, || {
                format!("{what}: error {m:?} does not name {needles:?}")
            });
            if ok && c.me == 0 {
                println!("PE 0: {what}: {m}");
            }
        }
    }
}

/// Bad configurations: host checks only (also on the CPU backend).
fn config_checks(c: &mut Checker, n: usize) {
    let ok = EpConfig::new(8 * n, 64, 2, 16, EpDtype::Bf16);
    let cases: [(&str, EpConfig, &[&str]); 6] = [
        (
            "experts not a multiple of PEs",
            EpConfig {
                num_experts: 8 * n + 1,
                ..ok.clone()
            },
            &["num_experts"],
        ),
        (
            "too many experts",
            EpConfig {
                num_experts: 2048,
                ..ok.clone()
            },
            &["num_experts"],
        ),
        (
            "topk 0",
            EpConfig {
                topk: 0,
                ..ok.clone()
            },
            &["topk"],
        ),
        (
            "hidden not 16-byte rows",
            EpConfig {
                hidden: 7,
                ..ok.clone()
            },
            &["hidden"],
        ),
        (
            "num_sms 0",
            EpConfig {
                num_sms: Some(0),
                ..ok.clone()
            },
            &["num_sms"],
        ),
        (
            "fp8 hidden not a multiple of 128",
            EpConfig {
                dtype: EpDtype::Fp8E4m3,
                hidden: 192,
                ..ok.clone()
            },
            &["hidden", "multiple of 128"],
        ),
    ];
    for (what, cfg, needles) in cases {
        expect_err(c, what, cfg.sizes(n), needles);
    }
    c.check(ok.sizes(n).is_ok(), || {
        "a good configuration was refused".into()
    });
    let bad = [0i64, 1, 8 * n as i64, -1];
    expect_err(
        c,
        "host routing check",
        rshmem::ep::check_routing("ep_dispatch", &bad, 2, 2, 8 * n),
        &["topk_idx[1][0]", "out of range"],
    );
}

/// Bad arguments on the GPU: errors that name the argument; nothing hangs.
fn gpu_bad_args(world: &World, stream: &Arc<CudaStream>) -> rshmem::Result<usize> {
    let (me, n) = (world.my_pe(), world.n_pes());
    let mut c = Checker { me, failures: 0 };
    let case = Case::new("bad-args", EpDtype::F32, 8 * n, 64, 4, 64, 40, false);
    let ep = Ep::new(world, case.config())?;
    let (h, k) = (case.hidden, case.k);
    let mut out = stream.alloc_zeros::<f32>(64 * h)?;
    expect_err(
        &mut c,
        "combine before dispatch",
        ep.combine_in_place(&mut out, stream),
        &["no dispatch"],
    );
    let x = stream.alloc_zeros::<f32>(40 * h)?;
    let xs = stream.alloc_zeros::<f32>(40 * h - 1)?;
    let xb = stream.alloc_zeros::<u16>(40 * h)?;
    let idx = stream.alloc_zeros::<i64>(40 * k)?;
    let ids = stream.alloc_zeros::<i64>(40 * k - 1)?;
    let w = stream.alloc_zeros::<f32>(40 * k)?;
    let ws = stream.alloc_zeros::<f32>(39 * k)?;
    expect_err(
        &mut c,
        "short x",
        ep.dispatch(&xs, &idx, &w, 40, stream),
        &["ep_dispatch", "x:"],
    );
    expect_err(
        &mut c,
        "short topk_idx",
        ep.dispatch(&x, &ids, &w, 40, stream),
        &["topk_idx"],
    );
    expect_err(
        &mut c,
        "short topk_weights",
        ep.dispatch(&x, &idx, &ws, 40, stream),
        &["topk_weights"],
    );
    expect_err(
        &mut c,
        "bf16 into an fp32 handle",
        ep.dispatch(&xb, &idx, &w, 40, stream),
        &["x:", "F32"],
    );
    let big = stream.alloc_zeros::<f32>(65 * h)?;
    let bigi = stream.alloc_zeros::<i64>(65 * k)?;
    let bigw = stream.alloc_zeros::<f32>(65 * k)?;
    expect_err(
        &mut c,
        "too many tokens",
        ep.dispatch(&big, &bigi, &bigw, 65, stream),
        &["num_tokens"],
    );
    // A null y on PEs with no tokens of their own (their experts may still receive rows): refused
    // before anything is launched, naming y; the exchange then completes with the real y.
    let none = case.routing(6, me);
    let none = Routing {
        num_tokens: 0,
        ..none
    };
    let iv0 = upload(stream, &none.topk_idx)?;
    let wv0 = upload(stream, &none.topk_weights)?;
    ep.dispatch(&x, &iv0, &wv0, 0, stream)?;
    let (oa, guard) = rshmem::cudarc::driver::DevicePtr::device_ptr(&out, stream);
    // SAFETY: `out` is device memory of this context with room for every token; y is refused.
    let res = unsafe { ep.combine_raw(0, oa, stream) };
    drop(guard);
    expect_err(
        &mut c,
        "null y with T = 0",
        res,
        &["ep_combine", "y:", "null"],
    );
    ep.combine_in_place(&mut out, stream)?;
    // An expert index out of range on PE 0 (token 3, slot 2): skipped, reported by check; the
    // exchange completes on every PE.
    let mut r = case.routing(7, me);
    if me == 0 {
        r.topk_idx[3 * k + 2] = 8 * n as i64 + 5;
    }
    let xv = upload(stream, &tokens::<f32>(7, me, r.num_tokens, h).0)?;
    let iv = upload(stream, &r.topk_idx)?;
    let wv = upload(stream, &r.topk_weights)?;
    ep.dispatch(&xv, &iv, &wv, r.num_tokens, stream)?;
    ep.combine_in_place(&mut out, stream)?;
    let res = ep.check(stream);
    if me == 0 {
        let want = format!("topk_idx[3][2] = {}", 8 * n + 5);
        expect_err(&mut c, "expert index out of range", res, &[&want]);
        c.check(ep.check(stream).is_ok(), || {
            "check did not clear the error".into()
        });
    } else {
        c.check(res.is_ok(), || format!("check on PE {me}: {res:?}"));
    }
    world.barrier_all()?;
    ep.free()?;
    // A row capacity too small: reported, rows dropped, nothing hangs; then the good rounds
    // still pass on a fresh handle.
    let small = Case {
        max_recv_rows: Some(10),
        name: "small-capacity",
        ..case.clone()
    };
    let ep = Ep::new(world, small.config())?;
    let r2 = case.routing(8, me);
    let xv = upload(stream, &tokens::<f32>(8, me, r2.num_tokens, h).0)?;
    let iv = upload(stream, &r2.topk_idx)?;
    let wv = upload(stream, &r2.topk_weights)?;
    ep.dispatch(&xv, &iv, &wv, r2.num_tokens, stream)?;
    ep.combine_in_place(&mut out, stream)?;
    let res = ep.check(stream);
    expect_err(&mut c, "row capacity", res, &["max_recv_rows"]);
    world.barrier_all()?;
    ep.free()?;
    let f = run_case(world, &case, false, stream)?;
    Ok(c.failures + f)
}

/// `--graph`: dispatch + combine (identity expert, in place) captured once into a CUDA graph and
/// replayed three times with new routing and tokens uploaded into the same buffers, with an
/// ordinary dispatch + combine between the replays; every output element is checked.
fn graph_replay(world: &World, stream: &Arc<CudaStream>) -> rshmem::Result<usize> {
    use rshmem::cudarc::driver::sys::{CUgraphInstantiate_flags, CUstreamCaptureMode};
    use rshmem::cudarc::driver::DevicePtr;
    let (me, n) = (world.my_pe(), world.n_pes());
    let mut c = Checker { me, failures: 0 };
    let case = Case::new("graph", EpDtype::F32, 8 * n, 128, 8, 96, 96, false);
    let (h, k, e_all) = (case.hidden, case.k, case.experts);
    let t_n = case.max_tokens; // the same T every round (fixed in the graph)
    let ep = Ep::new(world, case.config())?;
    let mut x = stream.alloc_zeros::<f32>(t_n * h)?;
    let mut idx = stream.alloc_zeros::<i64>(t_n * k)?;
    let mut w = stream.alloc_zeros::<f32>(t_n * k)?;
    let mut out = stream.alloc_zeros::<f32>(t_n * h)?;
    let fixed = |seed: u64, pe: usize| {
        let mut r = case.routing(seed, pe);
        r.num_tokens = t_n;
        r.topk_idx.resize(t_n * k, -1);
        r.topk_weights.resize(t_n * k, 0.0);
        r
    };
    let (xa, ia, wa, oa) = {
        let (xa, _a) = x.device_ptr(stream);
        let (ia, _b) = idx.device_ptr(stream);
        let (wa, _c) = w.device_ptr(stream);
        let (oa, _d) = out.device_ptr(stream);
        (xa, ia, wa, oa)
    };
    stream.synchronize()?;
    world.barrier_all()?;
    stream.begin_capture(CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_RELAXED)?;
    // SAFETY: the four buffers hold T tokens' worth and live until the end of this function;
    // the graph replays the kernels with these addresses.
    let captured = unsafe {
        ep.dispatch_raw(xa, ia, wa, t_n, stream)
            .and_then(|()| ep.combine_raw(ep.expert_x_addr(), oa, stream))
    };
    let graph = stream.end_capture(CUgraphInstantiate_flags(0))?;
    captured?;
    let Some(graph) = graph else {
        c.check(false, || "the capture produced no graph".into());
        return Ok(c.failures);
    };
    for seed in [11u64, 12, 13] {
        let routing: Vec<Routing> = (0..n).map(|pe| fixed(seed, pe)).collect();
        stream.memcpy_htod(&tokens::<f32>(seed, me, t_n, h).0, &mut x)?;
        stream.memcpy_htod(&routing[me].topk_idx, &mut idx)?;
        stream.memcpy_htod(&routing[me].topk_weights, &mut w)?;
        stream.synchronize()?;
        world.barrier_all()?;
        graph.launch()?;
        stream.synchronize()?;
        let got = download(stream, &out, t_n * h)?;
        let yf =
            |_e: usize, t: usize| -> Vec<f32> { (0..h).map(|j| x_val(seed, me, t, j)).collect() };
        let want = reference::combine(&routing, e_all, k, me, h, EpDtype::F32, &yf);
        let bad = (0..t_n * h)
            .filter(|&i| got[i].to_bits() != want[i].to_bits())
            .count();
        c.check(bad == 0, || {
            format!(
                "graph replay seed {seed}: {bad} of {} elements differ",
                t_n * h
            )
        });
        // An ordinary call between replays (the device epochs stay in step).
        ep.dispatch(&x, &idx, &w, t_n, stream)?;
        ep.combine_in_place(&mut out, stream)?;
        ep.check(stream)?;
        let got2 = download(stream, &out, t_n * h)?;
        let bad2 = (0..t_n * h)
            .filter(|&i| got2[i].to_bits() != want[i].to_bits())
            .count();
        c.check(bad2 == 0, || {
            format!("ordinary call after replay {seed}: {bad2} elements differ")
        });
        println!("PE {me}: graph replay seed {seed}: {bad} / {bad2} elements differ");
    }
    drop(graph);
    world.barrier_all()?;
    ep.free()?;
    Ok(c.failures)
}

/// `--ll`: the low-latency mode's cases.
fn low_latency(world: &World, stream: &Arc<CudaStream>) -> rshmem::Result<usize> {
    let me = world.my_pe();
    let e = 32;
    let cases = [
        Case::new("ll-f32-k8", EpDtype::F32, e, 128, 8, 160, 100, false),
        Case::new("ll-bf16-k8", EpDtype::Bf16, e, 256, 8, 192, 120, false),
        Case::new("ll-bf16-k1", EpDtype::Bf16, e, 256, 1, 256, 200, false),
        Case::new("ll-f32-T0-odd", EpDtype::F32, e, 64, 4, 96, 50, true),
        Case::new(
            "ll-bf16-E256-H7168-k8",
            EpDtype::Bf16,
            256,
            7168,
            8,
            160,
            110,
            false,
        ),
    ];
    let fails = run_cases(world, &cases, true, stream)?;
    // A handle without low_latency refuses the low-latency calls, naming the cause.
    let mut c = Checker { me, failures: 0 };
    let ep = Ep::new(world, cases[0].config())?;
    let x = stream.alloc_zeros::<f32>(128)?;
    let i = stream.alloc_zeros::<i64>(8)?;
    expect_err(
        &mut c,
        "low-latency call on a normal handle",
        ep.ll_dispatch(&x, &i, 1, stream),
        &["low_latency"],
    );
    world.barrier_all()?;
    ep.free()?;
    expect_err(
        &mut c,
        "low latency with too many tokens",
        EpConfig {
            low_latency: true,
            max_tokens: 300,
            ..cases[0].config()
        }
        .sizes(world.n_pes()),
        &["max_tokens", "256"],
    );
    Ok(fails + c.failures)
}

// ---------------------------------------------------------------------------------------------
// fp8 (`--fp8`): the cases run the same rounds as the other dtypes (`El for u8`: tokens quantized
// per 128-element block, dispatched with their scales, compared byte for byte; the stand-in
// expert dequantizes and writes bf16; the combine runs in bf16 and is also checked against the
// unquantized sum: `check_out`).

/// fp8 argument errors (naming the argument, nothing enqueued): scales missing, scales on a
/// bf16 handle, short scales, the combine in place, fp8 elements as y.
fn fp8_bad_args(world: &World, stream: &Arc<CudaStream>) -> rshmem::Result<usize> {
    let (me, n) = (world.my_pe(), world.n_pes());
    let mut c = Checker { me, failures: 0 };
    let (e_all, h, k, t) = (8 * n, 256, 4, 16);
    let f8 = Ep::new(
        world,
        EpConfig {
            low_latency: true,
            ..EpConfig::new(e_all, h, k, 32, EpDtype::Fp8E4m3)
        },
    )?;
    let x = stream.alloc_zeros::<u8>(t * h)?;
    let xs = stream.alloc_zeros::<f32>(t * h / 128)?;
    let xs_short = stream.alloc_zeros::<f32>(t * h / 128 - 1)?;
    let idx = upload(stream, &vec![-1i64; t * k])?;
    let w = stream.alloc_zeros::<f32>(t * k)?;
    let xb = stream.alloc_zeros::<u16>(t * h)?;
    expect_err(
        &mut c,
        "fp8 handle without scales",
        f8.dispatch(&x, &idx, &w, t, stream),
        &["ep_dispatch", "x_scales", "dispatch_fp8"],
    );
    expect_err(
        &mut c,
        "fp8 low-latency handle without scales",
        f8.ll_dispatch(&x, &idx, t, stream),
        &["ep_ll_dispatch", "x_scales"],
    );
    expect_err(
        &mut c,
        "short x_scales",
        f8.dispatch_fp8(&x, &xs_short, &idx, &w, t, stream),
        &["ep_dispatch", "x_scales: holds", "hidden / 128"],
    );
    expect_err(
        &mut c,
        "bf16 tokens into an fp8 handle",
        f8.dispatch(&xb, &idx, &w, t, stream),
        &["x:", "Fp8E4m3"],
    );
    // A real (empty-routing) dispatch, then the combine's checks.
    f8.dispatch_fp8(&x, &xs, &idx, &w, t, stream)?;
    let mut out = stream.alloc_zeros::<u16>(t * h)?;
    expect_err(
        &mut c,
        "fp8 combine in place",
        f8.combine_in_place(&mut out, stream),
        &["ep_combine", "y:", "bf16"],
    );
    let y8 = stream.alloc_zeros::<u8>(f8.sizes().max_rows * h)?;
    let mut out8 = stream.alloc_zeros::<u8>(t * h)?;
    expect_err(
        &mut c,
        "fp8 elements as y",
        f8.combine(&y8, &mut out8, stream),
        &["y: elements are Fp8E4m3", "takes Bf16"],
    );
    let y = stream.alloc_zeros::<u16>(f8.sizes().max_rows * h)?;
    f8.combine(&y, &mut out, stream)?;
    f8.ll_dispatch_fp8(&x, &xs, &idx, t, stream)?;
    expect_err(
        &mut c,
        "fp8 low-latency combine in place",
        f8.ll_combine::<u16, CudaSlice<u16>, _, _>(None, &w, &mut out, stream),
        &["ep_ll_combine", "y:"],
    );
    let yl = stream.alloc_zeros::<u16>(e_all * 32 * h)?;
    f8.ll_combine(Some(&yl), &w, &mut out, stream)?;
    f8.check(stream)?;
    world.barrier_all()?;
    f8.free()?;
    let bf = Ep::new(world, EpConfig::new(e_all, h, k, 32, EpDtype::Bf16))?;
    expect_err(
        &mut c,
        "scales on a bf16 handle",
        bf.dispatch_fp8(&x, &xs, &idx, &w, t, stream),
        &["x_scales", "made for Bf16"],
    );
    world.barrier_all()?;
    bf.free()?;
    Ok(c.failures)
}

/// `--fp8`: fp8 cases of the normal and the low-latency mode, then the fp8 argument errors.
fn fp8_cases(world: &World, stream: &Arc<CudaStream>, quick: bool) -> rshmem::Result<usize> {
    let me = world.my_pe();
    let fp8 = EpDtype::Fp8E4m3;
    let mut normal = vec![
        Case::new("fp8-k8", fp8, 32, 512, 8, 256, 150, false),
        Case::new("fp8-k1-H128", fp8, 32, 128, 1, 320, 300, false),
        Case::new("fp8-k4-T0-odd", fp8, 32, 384, 4, 128, 100, true),
    ];
    let mut ll = vec![
        Case::new("ll-fp8-k8", fp8, 32, 256, 8, 192, 120, false),
        Case::new("ll-fp8-k1-H128-T0-odd", fp8, 32, 128, 1, 96, 50, true),
    ];
    if !quick {
        normal.push(Case::new(
            "fp8-E256-H7168-k8",
            fp8,
            256,
            7168,
            8,
            192,
            128,
            false,
        ));
        ll.push(Case::new(
            "ll-fp8-E256-H7168-k8",
            fp8,
            256,
            7168,
            8,
            160,
            110,
            false,
        ));
    }
    let fails = run_cases(world, &normal, false, stream)? + run_cases(world, &ll, true, stream)?;
    let f = fp8_bad_args(world, stream)?;
    println!(
        "PE {me}: fp8 bad arguments: {}",
        if f == 0 { "ok" } else { "FAILED" }
    );
    Ok(fails + f)
}

fn run() -> rshmem::Result<bool> {
    let quick = std::env::args().any(|a| a == "--quick");
    let world = rshmem::init()?;
    let (me, n) = (world.my_pe(), world.n_pes());
    let mut c = Checker { me, failures: 0 };
    config_checks(&mut c, n);
    let Some(gpu) = world.gpu() else {
        expect_err(
            &mut c,
            "CPU backend",
            Ep::new(&world, EpConfig::new(8 * n, 64, 2, 16, EpDtype::F32)),
            &["GPU backend"],
        );
        println!(
            "PE {me}: moe_dispatch: no GPU backend: only the host-side argument checks ran ({} failures); nothing was dispatched",
            c.failures
        );
        let ok = c.failures == 0;
        world.finalize()?;
        return Ok(ok);
    };
    let stream = gpu.ctx.new_stream()?;
    if std::env::args().any(|a| a == "--ll") {
        let f = low_latency(&world, &stream)?;
        return finish(world, c.failures + f, "low-latency mode");
    }
    if std::env::args().any(|a| a == "--graph") {
        let f = graph_replay(&world, &stream)?;
        return finish(world, c.failures + f, "graph replay");
    }
    if std::env::args().any(|a| a == "--fp8") {
        let f = fp8_cases(&world, &stream, quick)?;
        return finish(world, c.failures + f, "fp8");
    }
    let e = 32;
    let mut cases = vec![
        Case::new("f32-k8", EpDtype::F32, e, 128, 8, 256, 200, false),
        Case::new("bf16-k8", EpDtype::Bf16, e, 512, 8, 256, 150, false),
        Case::new("bf16-k1", EpDtype::Bf16, e, 256, 1, 320, 300, false),
        Case::new("f32-k4-T0", EpDtype::F32, e, 64, 4, 64, 0, false),
        Case::new("bf16-k8-T0-odd", EpDtype::Bf16, e, 64, 8, 128, 100, true),
    ];
    if !quick {
        cases.push(Case::new(
            "bf16-E256-H7168-k8",
            EpDtype::Bf16,
            256,
            7168,
            8,
            192,
            128,
            false,
        ));
    }
    let mut fails = c.failures + run_cases(&world, &cases, false, &stream)?;
    let f = gpu_bad_args(&world, &stream)?;
    println!(
        "PE {me}: bad arguments: {}",
        if f == 0 { "ok" } else { "FAILED" }
    );
    fails += f;
    finish(world, fails, "")
}

/// Every PE's verdict, so PE 0's last line speaks for the job; finalizes.
fn finish(world: World, fails: usize, what: &str) -> rshmem::Result<bool> {
    let (me, n) = (world.my_pe(), world.n_pes());
    let what = if what.is_empty() {
        String::new()
    } else {
        format!(" ({what})")
    };
    let verdict = world.calloc::<u64>(1)?;
    world.barrier_all()?;
    if fails > 0 {
        world.atomic_add(verdict.as_ptr(), 1u64, 0)?;
    }
    world.barrier_all()?;
    if me == 0 {
        let bad = verdict.read(0).unwrap_or(u64::MAX);
        if bad == 0 && fails == 0 {
            println!("moe_dispatch: ALL CHECKS PASSED on {n} PEs{what}");
        } else {
            println!("moe_dispatch: FAILED on {n} PEs{what} ({bad} PEs reported failures)");
        }
    }
    world.barrier_all()?;
    world.free(verdict)?;
    world.finalize()?;
    Ok(fails == 0)
}

fn main() -> ExitCode {
    common::main("moe_dispatch", run)
}
