//! Host reference of dispatch and combine: what the GPU kernels of [`super::Ep`] must produce,
//! computed on the CPU with the same arithmetic (fp32 fused multiply-adds in slot order per
//! expert PE, partial sums rounded to the dtype, then fp32 adds over the expert PEs in PE order).
//! The GPU check (`examples/moe_dispatch`) compares every row and every element against it.
//!
//! fp8 ([`EpDtype::Fp8E4m3`]): the dispatch is an exact copy of each row's bytes and of its
//! scales (compare them bit for bit against the source's), and the combine is the bf16 combine
//! (`combine(.., EpDtype::Fp8E4m3, ..)` rounds as for bf16). [`quantize_fp8`] and
//! [`dequantize_fp8`] give the per-block quantization MoE layers use (scale = block amax / 448).

use super::{EpDtype, FP8_BLOCK};

/// bf16 bits → f32 (exact).
pub fn bf16_to_f32(h: u16) -> f32 {
    f32::from_bits((h as u32) << 16)
}

/// f32 → bf16 bits, rounding to nearest even (NaN → a quiet NaN), as the kernels do.
pub fn f32_to_bf16(f: f32) -> u16 {
    let u = f.to_bits();
    if u & 0x7fff_ffff > 0x7f80_0000 {
        return 0x7fc0;
    }
    ((u + 0x7fff + ((u >> 16) & 1)) >> 16) as u16
}

/// `v` rounded to the precision of `dtype`'s combine, as an f32 (bf16 for
/// [`EpDtype::Fp8E4m3`], whose combine runs in bf16).
pub fn round_to(dtype: EpDtype, v: f32) -> f32 {
    match dtype.combine_dtype() {
        EpDtype::F32 => v,
        _ => bf16_to_f32(f32_to_bf16(v)),
    }
}

/// Largest finite fp8 e4m3 value.
pub const FP8_E4M3_MAX: f32 = 448.0;

/// fp8 e4m3 bits → f32 (exact): 1 sign, 4 exponent (bias 7), 3 mantissa bits; exponent 0 holds
/// the subnormals `m·2⁻⁹`; `0x7f`/`0xff` are NaN (no infinities).
pub fn fp8_e4m3_to_f32(b: u8) -> f32 {
    let sign = if b & 0x80 != 0 { -1.0 } else { 1.0 };
    let (e, m) = (((b >> 3) & 0xf) as i32, (b & 7) as f32);
    if e == 0xf && b & 7 == 7 {
        return f32::NAN;
    }
    if e == 0 {
        sign * m * 2f32.powi(-9)
    } else {
        sign * (8.0 + m) * 2f32.powi(e - 10)
    }
}

/// f32 → fp8 e4m3 bits, rounding to nearest even; magnitudes beyond 448 saturate to ±448 and
/// NaN gives `0x7f`.
pub fn f32_to_fp8_e4m3(f: f32) -> u8 {
    if f.is_nan() {
        return 0x7f;
    }
    let sign = if f.is_sign_negative() { 0x80u8 } else { 0 };
    let a = f.abs();
    if a >= FP8_E4M3_MAX {
        return sign | 0x7e;
    }
    // The spacing of e4m3 values near `a`: 2^(e-3) for a in [2^e, 2^(e+1)), 2^-9 below 2^-6.
    let e = if a < 2f32.powi(-6) {
        -6
    } else {
        ((a.to_bits() >> 23) as i32) - 127
    };
    // a / spacing, rounded to an integer (ties to even): 0..=16 (16 carries into the next
    // exponent, which the encoding below handles); the scaling by a power of two is exact.
    let q = (a * 2f32.powi(3 - e)).round_ties_even() as u32;
    let v = q as f32 * 2f32.powi(e - 3);
    if v >= FP8_E4M3_MAX {
        return sign | 0x7e;
    }
    if v < 2f32.powi(-6) {
        // Subnormal: v = m·2^-9, m in 0..8.
        return sign | q as u8;
    }
    let ev = ((v.to_bits() >> 23) as i32) - 127;
    let mant = (v * 2f32.powi(3 - ev)) as u32 - 8;
    sign | (((ev + 7) as u8) << 3) | mant as u8
}

/// Per-block fp8 quantization of `rows` rows of `hidden` values (`hidden` a multiple of 128):
/// for each block of 128 elements, `scale = max(amax, 1e-4) / 448` and the elements become
/// `fp8(x / scale)`. Returns the e4m3 bytes and the `rows × hidden/128` scales (the layout
/// [`super::Ep::dispatch_fp8`] takes).
pub fn quantize_fp8(x: &[f32], hidden: usize) -> (Vec<u8>, Vec<f32>) {
    let mut q = Vec::with_capacity(x.len());
    let mut scales = Vec::with_capacity(x.len() / FP8_BLOCK.max(1));
    for block in x.chunks(FP8_BLOCK) {
        let amax = block.iter().fold(0f32, |m, v| m.max(v.abs()));
        let s = amax.max(1e-4) / FP8_E4M3_MAX;
        scales.push(s);
        q.extend(block.iter().map(|&v| f32_to_fp8_e4m3(v / s)));
    }
    debug_assert!(hidden == 0 || x.len() % hidden == 0);
    (q, scales)
}

/// The values of fp8 rows of `hidden` elements with their per-block scales:
/// `fp8(q[i]) · scales[i / 128]`.
pub fn dequantize_fp8(q: &[u8], scales: &[f32], hidden: usize) -> Vec<f32> {
    debug_assert!(hidden == 0 || q.len() % hidden == 0);
    q.iter()
        .enumerate()
        .map(|(i, &b)| fp8_e4m3_to_f32(b) * scales[i / FP8_BLOCK])
        .collect()
}

/// The routing of one PE: `num_tokens × k` expert indices (`-1` = none) and weights.
#[derive(Debug, Clone, Default)]
pub struct Routing {
    /// Tokens of the PE.
    pub num_tokens: usize,
    /// `num_tokens × k` expert indices.
    pub topk_idx: Vec<i64>,
    /// `num_tokens × k` weights.
    pub topk_weights: Vec<f32>,
}

impl Routing {
    /// The valid experts of token `t` with their slot and weight, in slot order.
    pub fn slots(&self, t: usize, k: usize, num_experts: usize) -> Vec<(usize, usize, f32)> {
        (0..k)
            .filter_map(|j| {
                let e = self.topk_idx[t * k + j];
                (e >= 0 && (e as usize) < num_experts)
                    .then(|| (j, e as usize, self.topk_weights[t * k + j]))
            })
            .collect()
    }
}

/// Every row PE `pe` receives in a dispatch, as (its local expert, source PE, source token,
/// slot): sources in PE order, tokens in order within a source, slots in order within a token
/// (a token that names an expert twice gives two rows).
fn received<'a>(
    routing: &'a [Routing],
    num_experts: usize,
    k: usize,
    pe: usize,
) -> impl Iterator<Item = (usize, usize, usize, usize)> + 'a {
    let l = num_experts / routing.len();
    routing.iter().enumerate().flat_map(move |(s, r)| {
        (0..r.num_tokens).flat_map(move |t| {
            r.slots(t, k, num_experts)
                .into_iter()
                .filter(move |&(_, e, _)| e / l == pe)
                .map(move |(j, e, _)| (e % l, s, t, j))
        })
    })
}

/// What PE `pe` receives in a dispatch: for each of its local experts, the `(source PE, source
/// token)` of every row, sources in PE order and tokens in order within a source (a token that
/// names an expert twice has two rows). The kernels order rows the same way by source; within
/// one source and expert their order is unspecified, so compare each source's rows as sets.
pub fn expected_rows(
    routing: &[Routing],
    num_experts: usize,
    k: usize,
    pe: usize,
) -> Vec<Vec<(usize, usize)>> {
    let mut rows = vec![Vec::new(); num_experts / routing.len()];
    for (x, s, t, _) in received(routing, num_experts, k, pe) {
        rows[x].push((s, t));
    }
    rows
}

/// Tokens PE `s` sends to each PE in a dispatch (each token once per PE that holds one of its
/// experts) — the NVLink traffic of the dispatch.
pub fn tokens_sent(routing: &Routing, num_experts: usize, k: usize, n_pes: usize) -> Vec<usize> {
    let l = num_experts / n_pes;
    let mut out = vec![0; n_pes];
    for t in 0..routing.num_tokens {
        let mut mask = 0u64;
        for (_, e, _) in routing.slots(t, k, num_experts) {
            mask |= 1 << (e / l);
        }
        for (d, o) in out.iter_mut().enumerate() {
            *o += ((mask >> d) & 1) as usize;
        }
    }
    out
}

/// The combine output of PE `src`: `num_tokens × hidden` values (rounded to `dtype`), given the
/// expert outputs `y(e, t)` (the row expert `e` produced for token `t` of `src`, `hidden` values
/// already in `dtype` precision).
pub fn combine(
    routing: &[Routing],
    num_experts: usize,
    k: usize,
    src: usize,
    hidden: usize,
    dtype: EpDtype,
    y: &dyn Fn(usize, usize) -> Vec<f32>,
) -> Vec<f32> {
    let n = routing.len();
    let l = num_experts / n;
    let r = &routing[src];
    let mut out = vec![0f32; r.num_tokens * hidden];
    for t in 0..r.num_tokens {
        let slots = r.slots(t, k, num_experts);
        let rows: Vec<Vec<f32>> = slots.iter().map(|&(_, e, _)| y(e, t)).collect();
        let o = &mut out[t * hidden..(t + 1) * hidden];
        for d in 0..n {
            let here: Vec<usize> = (0..slots.len()).filter(|&i| slots[i].1 / l == d).collect();
            if here.is_empty() {
                continue;
            }
            for (h, oh) in o.iter_mut().enumerate() {
                *oh += round_to(dtype, weighted(&slots, &rows, &here, h));
            }
        }
        for v in o.iter_mut() {
            *v = round_to(dtype, *v);
        }
    }
    out
}

/// Element `h` of the weighted sum of the expert rows `rows` of the slots `which` (indices into
/// `slots`, in order): fused multiply-adds from 0, as the kernels form it.
fn weighted(slots: &[(usize, usize, f32)], rows: &[Vec<f32>], which: &[usize], h: usize) -> f32 {
    which
        .iter()
        .fold(0f32, |acc, &i| slots[i].2.mul_add(rows[i][h], acc))
}

/// What PE `pe` receives in a low-latency dispatch: for each (local expert `l`, source PE `s`)
/// block, at index `l·n + s`, the `(token, slot)` of every row (the kernels' order within a
/// block is unspecified: compare as sets).
pub fn expected_ll_rows(
    routing: &[Routing],
    num_experts: usize,
    k: usize,
    pe: usize,
) -> Vec<Vec<(usize, usize)>> {
    let n = routing.len();
    let mut blocks = vec![Vec::new(); num_experts / n * n];
    for (x, s, t, j) in received(routing, num_experts, k, pe) {
        blocks[x * n + s].push((t, j));
    }
    blocks
}

/// The low-latency combine output of a PE with routing `r`: `out[t] = Σ_j w_j·y(e_j, t)` over
/// its valid slots in slot order (fused multiply-adds from 0), rounded once to `dtype`.
pub fn combine_ll(
    r: &Routing,
    num_experts: usize,
    k: usize,
    hidden: usize,
    dtype: EpDtype,
    y: &dyn Fn(usize, usize) -> Vec<f32>,
) -> Vec<f32> {
    let mut out = vec![0f32; r.num_tokens * hidden];
    for t in 0..r.num_tokens {
        let slots = r.slots(t, k, num_experts);
        let rows: Vec<Vec<f32>> = slots.iter().map(|&(_, e, _)| y(e, t)).collect();
        let all: Vec<usize> = (0..slots.len()).collect();
        for (h, o) in out[t * hidden..(t + 1) * hidden].iter_mut().enumerate() {
            *o = round_to(dtype, weighted(&slots, &rows, &all, h));
        }
    }
    out
}

/// The low-latency combine output of a PE with routing `r` when the exchange goes once per PE
/// ([`Ep::ll_per_pe`](super::Ep::ll_per_pe)): every expert PE `d` of token `t` forms
/// `p_d = Σ w_j·y(e_j, t)` over the token's slots on `d`, in slot order (fused multiply-adds
/// from 0), rounded to `dtype`'s combine precision; the source adds the partials of its expert
/// PEs in the order of each PE's first slot (fused multiply-adds of weight 1 from 0, i.e. fp32
/// adds), rounded once. A token with no valid slot gives zeros.
pub fn combine_ll_per_pe(
    r: &Routing,
    num_experts: usize,
    k: usize,
    n_pes: usize,
    hidden: usize,
    dtype: EpDtype,
    y: &dyn Fn(usize, usize) -> Vec<f32>,
) -> Vec<f32> {
    let l = num_experts / n_pes;
    let mut out = vec![0f32; r.num_tokens * hidden];
    for t in 0..r.num_tokens {
        let slots = r.slots(t, k, num_experts);
        let rows: Vec<Vec<f32>> = slots.iter().map(|&(_, e, _)| y(e, t)).collect();
        // The expert PEs in the order of their first slot, each with its slots (indices into
        // `slots`, in slot order).
        let mut pes: Vec<(usize, Vec<usize>)> = Vec::new();
        for (i, &(_, e, _)) in slots.iter().enumerate() {
            match pes.iter_mut().find(|(d, _)| *d == e / l) {
                Some((_, here)) => here.push(i),
                None => pes.push((e / l, vec![i])),
            }
        }
        for (h, o) in out[t * hidden..(t + 1) * hidden].iter_mut().enumerate() {
            let sum = pes.iter().fold(0f32, |acc, (_, here)| {
                1f32.mul_add(round_to(dtype, weighted(&slots, &rows, here, h)), acc)
            });
            *o = round_to(dtype, sum);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bf16_rounding() {
        assert_eq!(f32_to_bf16(1.0), 0x3f80);
        assert_eq!(bf16_to_f32(0x3f80), 1.0);
        // 1 + 2^-8 is halfway between 1 and 1 + 2^-7: ties to even (1.0).
        assert_eq!(f32_to_bf16(1.0 + 1.0 / 256.0), 0x3f80);
        // 1 + 3·2^-8 is halfway between 1 + 2^-7 and 1 + 2^-6: ties to even (1 + 2^-6).
        assert_eq!(f32_to_bf16(1.0 + 3.0 / 256.0), 0x3f82);
        assert_eq!(f32_to_bf16(-2.5), 0xc020);
        assert_eq!(f32_to_bf16(f32::NAN), 0x7fc0);
        for v in [-8.0f32, -0.125, 0.0, 3.5, 100.0] {
            assert_eq!(bf16_to_f32(f32_to_bf16(v)), v);
        }
    }

    fn routing() -> Vec<Routing> {
        // 2 PEs, 4 experts (2 per PE), k = 2.
        vec![
            Routing {
                num_tokens: 3,
                topk_idx: vec![0, 3, 1, 1, -1, 2],
                topk_weights: vec![0.5, 0.25, 1.0, 2.0, 9.0, 0.75],
            },
            Routing {
                num_tokens: 1,
                topk_idx: vec![2, 0],
                topk_weights: vec![1.0, 0.5],
            },
        ]
    }

    #[test]
    fn fp8_e4m3_encoding() {
        assert_eq!(f32_to_fp8_e4m3(1.0), 0x38);
        assert_eq!(fp8_e4m3_to_f32(0x38), 1.0);
        assert_eq!(f32_to_fp8_e4m3(448.0), 0x7e);
        assert_eq!(f32_to_fp8_e4m3(-448.0), 0xfe);
        assert_eq!(f32_to_fp8_e4m3(1000.0), 0x7e); // saturates
        assert_eq!(f32_to_fp8_e4m3(f32::NAN), 0x7f);
        assert!(fp8_e4m3_to_f32(0x7f).is_nan() && fp8_e4m3_to_f32(0xff).is_nan());
        assert_eq!(fp8_e4m3_to_f32(0x01), 2f32.powi(-9)); // smallest subnormal
        assert_eq!(fp8_e4m3_to_f32(0x08), 2f32.powi(-6)); // smallest normal
        assert_eq!(fp8_e4m3_to_f32(0x7e), 448.0);
        assert_eq!(fp8_e4m3_to_f32(0xc4), -3.0);
        // Ties to even: 1 + 1/16 lies halfway between 1 (mantissa 0) and 1.125 (mantissa 1).
        assert_eq!(f32_to_fp8_e4m3(1.0 + 1.0 / 16.0), 0x38);
        // 1 + 3/16 lies halfway between 1.125 and 1.25 (mantissa 2, even).
        assert_eq!(f32_to_fp8_e4m3(1.0 + 3.0 / 16.0), 0x3a);
        // Half the smallest subnormal ties to 0; 3·2^-10 to 2·2^-9; 15·2^-10 up to 2^-6.
        assert_eq!(f32_to_fp8_e4m3(2f32.powi(-10)), 0x00);
        assert_eq!(f32_to_fp8_e4m3(3.0 * 2f32.powi(-10)), 0x02);
        assert_eq!(f32_to_fp8_e4m3(15.0 * 2f32.powi(-10)), 0x08);
        // 15.5 rounds to 16 (carry into the next exponent); 464 (between 448 and 480) saturates.
        assert_eq!(fp8_e4m3_to_f32(f32_to_fp8_e4m3(15.5)), 16.0);
        assert_eq!(f32_to_fp8_e4m3(464.0), 0x7e);
        // Every finite code round-trips; -0 keeps its sign bit.
        for b in 0..=255u8 {
            if b & 0x7f != 0x7f {
                assert_eq!(f32_to_fp8_e4m3(fp8_e4m3_to_f32(b)), b, "code {b:#04x}");
            }
        }
        // Every value rounds to a nearest code.
        for i in 0..4000 {
            let v = (i as f32 - 2000.0) * 0.1337;
            let got = fp8_e4m3_to_f32(f32_to_fp8_e4m3(v));
            let best = (0..=255u8)
                .map(fp8_e4m3_to_f32)
                .filter(|c| !c.is_nan())
                .fold(f32::INFINITY, |b, c| {
                    b.min((c - v.clamp(-448.0, 448.0)).abs())
                });
            assert_eq!((got - v.clamp(-448.0, 448.0)).abs(), best, "value {v}");
        }
    }

    #[test]
    fn fp8_block_quantization() {
        let h = 256;
        let x: Vec<f32> = (0..2 * h)
            .map(|i| ((i * 37 % 101) as f32 - 50.0) / 7.0)
            .collect();
        let (q, s) = quantize_fp8(&x, h);
        assert_eq!((q.len(), s.len()), (2 * h, 2 * h / FP8_BLOCK));
        for (b, &sb) in s.iter().enumerate() {
            let block = &x[b * FP8_BLOCK..(b + 1) * FP8_BLOCK];
            let amax = block.iter().fold(0f32, |m, v| m.max(v.abs()));
            assert_eq!(sb, amax / FP8_E4M3_MAX);
            // The block's largest element maps to ±448 exactly.
            assert!(q[b * FP8_BLOCK..(b + 1) * FP8_BLOCK]
                .iter()
                .any(|&c| c & 0x7f == 0x7e));
        }
        let d = dequantize_fp8(&q, &s, h);
        for (i, (&v, &dv)) in x.iter().zip(&d).enumerate() {
            // e4m3 keeps 3 mantissa bits: within 2^-4 relative, or half a subnormal step.
            let sb = s[i / FP8_BLOCK];
            assert!(
                (v - dv).abs() <= v.abs() / 16.0 + sb * 2f32.powi(-10),
                "element {i}: {v} -> {dv}"
            );
        }
        // An all-zero block gets the floor scale and zeros.
        let (qz, sz) = quantize_fp8(&[0.0; 128], 128);
        assert!(qz.iter().all(|&c| c == 0) && sz == vec![1e-4 / FP8_E4M3_MAX]);
    }

    #[test]
    fn fp8_combine_rounds_as_bf16() {
        let r = routing();
        let y = |e: usize, t: usize| vec![1.0 + (e + t) as f32 / 256.0; 2];
        assert_eq!(
            combine(&r, 4, 2, 0, 2, EpDtype::Fp8E4m3, &y),
            combine(&r, 4, 2, 0, 2, EpDtype::Bf16, &y)
        );
        assert_ne!(
            combine(&r, 4, 2, 0, 2, EpDtype::Fp8E4m3, &y),
            combine(&r, 4, 2, 0, 2, EpDtype::F32, &y)
        );
        assert_eq!(round_to(EpDtype::Fp8E4m3, 1.0 + 1.0 / 512.0), 1.0);
    }

    #[test]
    fn rows_per_expert() {
        let r = routing();
        assert_eq!(
            expected_rows(&r, 4, 2, 0),
            vec![vec![(0, 0), (1, 0)], vec![(0, 1), (0, 1)]]
        );
        assert_eq!(
            expected_rows(&r, 4, 2, 1),
            vec![vec![(0, 2), (1, 0)], vec![(0, 0)]]
        );
        assert_eq!(tokens_sent(&r[0], 4, 2, 2), vec![2, 2]);
        assert_eq!(tokens_sent(&r[1], 4, 2, 2), vec![1, 1]);
    }

    #[test]
    fn combine_weights_in_order() {
        let r = routing();
        // Expert e's output for token t: (10·e + t) in every element.
        let y = |e: usize, t: usize| vec![(10 * e + t) as f32; 2];
        let out = combine(&r, 4, 2, 0, 2, EpDtype::F32, &y);
        // t0: 0.5·0 + 0.25·30; t1: 1·11 + 2·11 (expert 1 twice); t2: 0.75·22 (slot 0 is -1).
        assert_eq!(out, vec![7.5, 7.5, 33.0, 33.0, 16.5, 16.5]);
        let out1 = combine(&r, 4, 2, 1, 2, EpDtype::Bf16, &y);
        assert_eq!(out1, vec![20.0, 20.0]);
        // Low latency: one sum over the slots, the same values here.
        assert_eq!(combine_ll(&r[0], 4, 2, 2, EpDtype::F32, &y), out);
    }

    #[test]
    fn low_latency_blocks() {
        let r = routing();
        // PE 0 holds experts 0 and 1: blocks (l, s) at l·2 + s.
        assert_eq!(
            expected_ll_rows(&r, 4, 2, 0),
            vec![vec![(0, 0)], vec![(0, 1)], vec![(1, 0), (1, 1)], vec![]]
        );
        assert_eq!(
            expected_ll_rows(&r, 4, 2, 1),
            vec![vec![(2, 1)], vec![(0, 0)], vec![(0, 1)], vec![]]
        );
    }

    /// One token of `n` PEs' routing (the others hold none) with `k` slots.
    fn one_token(idx: &[i64], w: &[f32]) -> Routing {
        Routing {
            num_tokens: 1,
            topk_idx: idx.to_vec(),
            topk_weights: w.to_vec(),
        }
    }

    #[test]
    fn per_pe_combine_sums_each_pe_then_the_pes() {
        let r = routing();
        let y = |e: usize, t: usize| vec![(10 * e + t) as f32; 2];
        // Exact in f32: the same values as the per-pair sum (t1 names expert 1 twice: one
        // partial of two terms on PE 0; t2's slot 0 is -1).
        let per_pe = combine_ll_per_pe(&r[0], 4, 2, 2, 2, EpDtype::F32, &y);
        assert_eq!(per_pe, vec![7.5, 7.5, 33.0, 33.0, 16.5, 16.5]);
        assert_eq!(per_pe, combine_ll(&r[0], 4, 2, 2, EpDtype::F32, &y));
        assert_eq!(
            combine_ll_per_pe(&r[1], 4, 2, 2, 2, EpDtype::Bf16, &y),
            vec![20.0, 20.0]
        );
    }

    #[test]
    fn per_pe_combine_rounds_each_partial() {
        // 2 PEs, one expert each; slots 0 and 1 on PE 0, slot 2 on PE 1; every row 1.0.
        let r = one_token(&[0, 0, 1], &[1.0, 3.0 / 512.0, 5.0 / 1024.0]);
        let y = |_: usize, _: usize| vec![1.0f32];
        // PE 0: 1 + 3/512 = 1.005859375, rounded to bf16 1.0078125; PE 1: 5/1024 (exact);
        // 1.0078125 + 0.0048828125 = 1.0126953125 rounds to 1.015625. One sum rounded once:
        // 1.0107421875 rounds to 1.0078125.
        assert_eq!(
            combine_ll_per_pe(&r, 2, 3, 2, 1, EpDtype::Bf16, &y),
            vec![1.015625]
        );
        assert_eq!(combine_ll(&r, 2, 3, 1, EpDtype::Bf16, &y), vec![1.0078125]);
        // fp8 handles combine in bf16.
        assert_eq!(
            combine_ll_per_pe(&r, 2, 3, 2, 1, EpDtype::Fp8E4m3, &y),
            vec![1.015625]
        );
        // f32: exact (1 + 6/1024 + 5/1024).
        assert_eq!(
            combine_ll_per_pe(&r, 2, 3, 2, 1, EpDtype::F32, &y),
            vec![1.0 + 11.0 / 1024.0]
        );
    }

    #[test]
    fn per_pe_combine_adds_the_pes_in_first_slot_order() {
        // 3 PEs, one expert each; slots name PEs 1, 2, 0: 2^-24 + 2^-24 + 1 = 1 + 2^-23 in
        // that order, where PE order (1 + 2^-24 + 2^-24) would give 1.
        let r = one_token(&[1, 2, 0], &[1.0, 1.0, 1.0]);
        let tiny = 2f32.powi(-24);
        let y = move |e: usize, _: usize| vec![if e == 0 { 1.0 } else { tiny }];
        let got = combine_ll_per_pe(&r, 3, 3, 3, 1, EpDtype::F32, &y);
        assert_eq!(got, vec![1.0 + 2f32.powi(-23)]);
        assert_ne!(got, vec![(1.0 + tiny) + tiny]);
    }

    #[test]
    fn per_pe_combine_of_no_experts_k1_and_repeats() {
        let y = |e: usize, _: usize| vec![(e + 1) as f32, -((e + 1) as f32)];
        // No expert: zeros.
        let none = one_token(&[-1, -1], &[0.5, 0.5]);
        assert_eq!(
            combine_ll_per_pe(&none, 4, 2, 2, 2, EpDtype::Bf16, &y),
            vec![0.0, 0.0]
        );
        // k = 1: the weighted row of its one expert.
        let k1 = one_token(&[3], &[0.25]);
        assert_eq!(
            combine_ll_per_pe(&k1, 4, 1, 2, 2, EpDtype::F32, &y),
            vec![1.0, -1.0]
        );
        // Expert 2 twice and expert 1: PE 1 sums 0.5·3 + 0.25·3, PE 0 gives 2·2.
        let rep = one_token(&[2, 1, 2], &[0.5, 2.0, 0.25]);
        assert_eq!(
            combine_ll_per_pe(&rep, 4, 3, 2, 2, EpDtype::F32, &y),
            vec![6.25, -6.25]
        );
    }
}
